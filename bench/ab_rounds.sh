#!/usr/bin/env bash
# ab_rounds.sh - bench_gpu builds side by side on the GPU machine: ROUNDS rounds, each running
# every build once in the order given (so drift in the machine spreads over all of them), then the
# median % of the same-run copy ceiling per shape and build, and each build's plan.
#
#   ROUNDS=3 SUITE=axis [BENCH_ARGS="--op softmax"] [TORCH=1 [TORCH_ARGS="--op softmax"]] \
#       bench/ab_rounds.sh BIN...
#
# Writes NAME_rR.csv per build (NAME: the binary's name) and summary.txt into $OUT (or
# bench/results/ab). TORCH=1 also runs torch_bench.py on the same shapes (eager and
# torch.compile, after 4 warm-shard processes; TORCH_ARGS: its --op, --dtype, --cols) and appends
# plot.py's joined table for each build's first round, so x torch.compile is read against the
# same PyTorch run for every build. Build the binaries with bench/ab_variant.sh.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
OUT=${OUT:-bench/results/ab}
mkdir -p "$OUT"
ROUNDS=${ROUNDS:-3}
SUITE=${SUITE:-axis}
for r in $(seq 1 "$ROUNDS"); do
    for b in "$@"; do
        n=$(basename "$b")
        # shellcheck disable=SC2086
        timeout "${BENCH_TIMEOUT:-300}" "$b" --suite "$SUITE" ${BENCH_ARGS:-} --csv "$OUT/${n}_r$r.csv" \
            > "$OUT/${n}_r$r.log" 2>&1 || echo "ab_rounds.sh: $n round $r failed (see $OUT/${n}_r$r.log)"
    done
done
names=""
for b in "$@"; do names="$names $(basename "$b")"; done
# shellcheck disable=SC2086
python3 bench/ab_summary.py "$OUT" $names > "$OUT/summary.txt"
if [ "${TORCH:-0}" = 1 ]; then
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086
        timeout 300 python3 bench/torch_bench.py --suite "$SUITE" ${TORCH_ARGS:-} --warm-shard "$i/4" \
            > /dev/null 2>&1 &
    done
    wait
    # shellcheck disable=SC2086
    timeout 600 python3 bench/torch_bench.py --suite "$SUITE" ${TORCH_ARGS:-} --impl eager,compile \
        --csv "$OUT/torch.csv" > "$OUT/torch.log" 2>&1
    for b in "$@"; do
        n=$(basename "$b")
        printf '\n%s, round 1, against torch_bench.py in this run:\n' "$n" >> "$OUT/summary.txt"
        python3 bench/plot.py --table "$OUT/${n}_r1.csv" "$OUT/torch.csv" >> "$OUT/summary.txt"
    done
fi
cat "$OUT/summary.txt"
