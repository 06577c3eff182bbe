#!/usr/bin/env bash
# v2_vs_v1.sh - KServe v2 with binary tensors against /v1 raw binary on the same daemon: at each
# connection count, REPS rounds of (v1, v2) runs back to back, so both protocols see the same
# daemon, the same machine state and the same noise. Prints per-protocol medians and the v2/v1
# ratios, and writes every run to a CSV.
#
# Environment: NORMD_BIN (build/normd), BACKEND (cuda), NORMD_EXTRA (more daemon flags),
# OP/DTYPE/SHAPE (layernorm float16 8,4096), CONNS ("1 16 64 256"), REPS (3), DURATION (10),
# WRK_THREADS (8), CSV (bench/results/v2_vs_v1.csv). Only 127.0.0.1 is contacted.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NORMD_BIN=${NORMD_BIN:-build/normd}
BACKEND=${BACKEND:-cuda}
CONNS=${CONNS:-"1 16 64 256"}
REPS=${REPS:-3}
DURATION=${DURATION:-10}
WRK_THREADS=${WRK_THREADS:-8}
CSV=${CSV:-bench/results/v2_vs_v1.csv}
export NORMD_OP=${OP:-layernorm} NORMD_DTYPE=${DTYPE:-float16} NORMD_SHAPE=${SHAPE:-8,4096}
mkdir -p "$(dirname "$CSV")"
source "$here/lib.sh"
trap stop_daemon EXIT
log=$(mktemp)
start_daemon "$log" --backend "$BACKEND" ${NORMD_EXTRA:-} || exit 1
url=http://127.0.0.1:$daemon_port/
NORMD_PROTO=v1 wrk -t 2 -c 16 -d 2s -s "$here/post_binary.lua" "$url" >/dev/null # warm-up
NORMD_PROTO=v2 wrk -t 2 -c 16 -d 2s -s "$here/post_binary.lua" "$url" >/dev/null

echo "proto,connections,rep,rps,p50_us,p90_us,p99_us,max_us,non2xx,socket_errors" >"$CSV"
for c in $CONNS; do
    t=$(( c < WRK_THREADS ? c : WRK_THREADS ))
    for r in $(seq "$REPS"); do
        for proto in v1 v2; do
            line=$(NORMD_PROTO=$proto wrk -t "$t" -c "$c" -d "${DURATION}s" --timeout 10s \
                   -s "$here/post_binary.lua" "$url" 2>&1 | grep '^RESULT' || echo RESULT)
            errs=$(( $(field connect_errors "$line") + $(field read_errors "$line") + \
                     $(field write_errors "$line") + $(field timeouts "$line") ))
            echo "$proto,$c,$r,$(field rps "$line"),$(field p50_us "$line"),$(field p90_us "$line"),$(field p99_us "$line"),$(field max_us "$line"),$(field non2xx "$line"),$errs" >>"$CSV"
        done
    done
done

python3 - "$CSV" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"{'conns':>5} {'v1 req/s':>10} {'v2 req/s':>10} {'v2/v1':>6} {'v1 p50':>8} {'v2 p50':>8} "
      f"{'v1 p99':>8} {'v2 p99':>8} {'p99 v2/v1':>9}  (medians of the rounds; us)")
for c in sorted({int(r["connections"]) for r in rows}):
    med = {}
    for p in ("v1", "v2"):
        rs = [r for r in rows if r["proto"] == p and int(r["connections"]) == c]
        med[p] = {k: statistics.median(float(r[k]) for r in rs) for k in ("rps", "p50_us", "p99_us")}
    a, b = med["v1"], med["v2"]
    print(f"{c:>5} {a['rps']:>10.0f} {b['rps']:>10.0f} {b['rps']/a['rps']:>6.3f} {a['p50_us']:>8.0f} "
          f"{b['p50_us']:>8.0f} {a['p99_us']:>8.0f} {b['p99_us']:>8.0f} {b['p99_us']/a['p99_us']:>9.3f}")
errs = sum(int(r["non2xx"] or 0) + int(r["socket_errors"] or 0) for r in rows)
print(f"non-2xx + socket errors over all runs: {errs}")
PY
