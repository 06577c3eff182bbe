#!/bin/bash
# gpu_service.sh - one call on the GPU machine for the service: the daemon's GPU correctness
# (integration suites against --backend cuda), a fresh daemon's first seconds, and the service
# benchmark (/v1 raw binary beside KServe v2 binary, with the null backend as the HTTP ceiling).
# Build here first (make build/normd build/tests/it_server build/tests/it_v2), carry build/ (or a
# stripped subset, BIN=...) and .deb/ (make device-debs); this script sources bench/device_env.sh.
#
#   BIN=build            where normd and tests/ are
#   OUT=bench/results/run  logs and CSVs
#   STEPS="tests first bench"  which parts to run
#   REPEATS=2            service benchmark repeats (each a fresh daemon per configuration)
#   DURATION=8 CONNS="1 16 64 256" CONFIGS="cuda-batch cuda-v2 null"   passed to run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../device_env.sh"
BIN=${BIN:-build}
OUT=${OUT:-bench/results/run}
STEPS=${STEPS:-"tests first bench"}
REPEATS=${REPEATS:-2}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

if [[ " $STEPS " == *" tests "* ]]; then
    for t in it_server it_v2; do
        echo "== $t --backend cuda"
        NORMD_BIN="$BIN/normd" NORMD_BACKEND=cuda timeout 300 "$BIN/tests/$t" --jobs 1 \
            > "$OUT/${t}_cuda.log" 2>&1
        echo "$t(cuda) rc=$?"; grep -E "Synthesis|FAIL|Assertion" "$OUT/${t}_cuda.log" | head -8
    done
fi

# A fresh daemon's first seconds at one connection: the first 3 s, then 3 s more.
if [[ " $STEPS " == *" first "* ]]; then
    echo "== first seconds of a fresh daemon (layernorm float16 8x4096, c=1)"
    log=$OUT/first_normd.log
    t0=$(date +%s.%N)
    "$BIN/normd" --listen 127.0.0.1:0 --backend cuda > "$log" 2>&1 &
    pid=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/^normd.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$port" ] && break
        sleep 0.05
    done
    t1=$(date +%s.%N)
    echo "start to listening: $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') s; $(head -1 "$log")"
    export NORMD_OP=layernorm NORMD_DTYPE=float16 NORMD_SHAPE=8,4096 NORMD_PROTO=v1
    for slice in 1 2; do
        wrk -t 1 -c 1 -d 3s --latency -s "$here/post_binary.lua" "http://127.0.0.1:$port/" \
            > "$OUT/first_$slice.log" 2>&1
        echo "slice $slice: $(grep '^RESULT' "$OUT/first_$slice.log")"
    done
    kill -TERM $pid; wait $pid; echo "normd exit $?"
fi

if [[ " $STEPS " == *" bench "* ]]; then
    for r in $(seq "$REPEATS"); do
        echo "== service benchmark, repeat $r"
        NORMD_BIN="$BIN/normd" RESULTS_DIR="$OUT" CSV_NAME="service_r$r.csv" \
            DURATION=${DURATION:-8} CONNS=${CONNS:-"1 16 64 256"} \
            CONFIGS=${CONFIGS:-"cuda-batch cuda-v2 null"} \
            WORKLOADS=${WORKLOADS:-"layernorm:float16:8,4096"} \
            "$here/run.sh" 2>"$OUT/run_r$r.err" | tail -n +3
    done
fi
