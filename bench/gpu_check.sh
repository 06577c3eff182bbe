#!/bin/bash
# gpu_check.sh - one call on the GPU machine: the GPU tests, the kernel benchmark, PyTorch on the
# same shapes, and the joined table last. Logs and CSVs go to $OUT (or bench/results/run).
# Build first where the toolchain is (make build/tests/gpu_rows build/bench/bench_gpu), carry
# build/ and .deb/, and source bench/device_env.sh before this on a machine without packages. Or,
# where whole binaries are too much to carry, carry build/carry/objs (make device-objs) and .deb/
# and run bench/device_link.sh there first (BIN=build).
#
#   BIN=build                   where tests/gpu_* and bench/bench_gpu are (a carried subset of
#                               build/ works: BIN=build/carry)
#   SUITE=rows|axis|prelu|all|widths
#                               which benchmark shapes (default rows)
#   TESTS="gpu_rows gpu_axis"   which test programs (default: every build/tests/gpu_*)
#   TORCH_IMPL=eager,compile    PyTorch variants (add copy: x.clone() in PyTorch's harness);
#                               TORCH_BUDGET_S caps the compile time spent
#   TORCH_WARM=4                compile in this many processes first (fills Inductor's disk
#                               caches, so the timing run recompiles from cache); 0 disables
#   QUICK=1                     a reduced width sweep
set -u
OUT=${OUT:-bench/results/run}
mkdir -p "$OUT"
SUITE=${SUITE:-rows}
BIN=${BIN:-build}
TORCH_IMPL=${TORCH_IMPL:-eager,compile}
TORCH_BUDGET_S=${TORCH_BUDGET_S:-1000000}
Q=""; [ "${QUICK:-0}" = 1 ] && Q="--quick"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "$OUT/device.txt" 2>&1

tests=${TESTS:-$(cd "$BIN/tests" && ls gpu_* 2>/dev/null | grep -v '\.d$')}
for t in $tests; do
    echo "== $t"
    timeout "${TEST_TIMEOUT:-300}" "$BIN/tests/$t" --jobs 1 --xml="$OUT/$t.xml" > "$OUT/$t.log" 2>&1
    echo "$t rc=$?"; tail -3 "$OUT/$t.log"
    # the slowest tests (Criterion's JUnit report): where a call's device time goes
    grep -o 'testcase name="[^"]*"[^>]* time="[0-9.]*"' "$OUT/$t.xml" 2>/dev/null |
        sed -E 's/testcase name="([^"]*)".* time="([0-9.]*)"/\2 s  \1/' | sort -rn | head -5
done
# The daemon end to end on the GPU: the integration suite against --backend cuda.
if [ -z "${TESTS:-}" ] && [ -x "$BIN/tests/it_server" ] && [ -x "$BIN/normd" ]; then
    echo "== it_server --backend cuda"
    NORMD_BIN="$BIN/normd" NORMD_BACKEND=cuda timeout "${TEST_TIMEOUT:-300}" \
        "$BIN/tests/it_server" --jobs 1 > "$OUT/it_server_cuda.log" 2>&1
    echo "it_server(cuda) rc=$?"; tail -3 "$OUT/it_server_cuda.log"
fi

echo "== bench_gpu --suite $SUITE $Q"
timeout "${BENCH_TIMEOUT:-300}" "$BIN/bench/bench_gpu" --suite "$SUITE" $Q --csv "$OUT/normd.csv" \
    > "$OUT/bench_gpu.log" 2>&1
echo "bench_gpu rc=$?"

if [ -n "$TORCH_IMPL" ] && [ "${TORCH_WARM:-4}" -gt 0 ] && [[ "$TORCH_IMPL" == *compile* ]]; then
    echo "== torch compile warm-up in ${TORCH_WARM:-4} processes"
    pids=""
    for i in $(seq 0 $(( ${TORCH_WARM:-4} - 1 ))); do
        timeout "${TORCH_WARM_TIMEOUT:-240}" python3 bench/torch_bench.py --suite "$SUITE" $Q \
            --warm-shard "$i/${TORCH_WARM:-4}" > "/tmp/torch_warm_$i.log" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p"; done
    tail -qn1 /tmp/torch_warm_*.log
fi

if [ -n "$TORCH_IMPL" ]; then
    echo "== torch_bench --suite $SUITE $Q --impl $TORCH_IMPL"
    timeout "${TORCH_TIMEOUT:-400}" python3 bench/torch_bench.py --suite "$SUITE" $Q \
        --impl "$TORCH_IMPL" --budget-s "$TORCH_BUDGET_S" --csv "$OUT/torch.csv" \
        > "$OUT/torch.log" 2>&1
    echo "torch_bench rc=$?"
fi

python3 bench/plot.py --table "$OUT/normd.csv" "$OUT/torch.csv" | tee "$OUT/table.txt"
python3 bench/plot.py --goals "$OUT/normd.csv" "$OUT/torch.csv" | tee "$OUT/goals.txt"
