#!/usr/bin/env bash
# two_gpus.sh - does a second GPU add throughput? /v1 raw binary (post_binary.lua) at each
# connection count, a fresh daemon per run on one GPU (--devices 0) and then on two (--devices
# 0,1), for each shape. Prints one line per run: rps, p50, p99, max (us), non-2xx.
#
# Environment: NORMD_BIN (build/normd), SHAPES ("64,4096 8,4096"), CONNS ("64 256"), DURATION (8),
# OP/DTYPE (layernorm float16). Only 127.0.0.1 is contacted.
set -u
here=$(cd "$(dirname "$0")" && pwd)
NORMD_BIN=${NORMD_BIN:-build/normd}
export NORMD_OP=${OP:-layernorm} NORMD_DTYPE=${DTYPE:-float16} NORMD_PROTO=v1
port=18500
one() { # name devices connections
    "$NORMD_BIN" --listen 127.0.0.1:$port --backend cuda --devices "$2" >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 200); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.05; done
    local r
    r=$(wrk -t 8 -c "$3" -d "${DURATION:-8}s" --timeout 10s -s "$here/post_binary.lua" \
        http://127.0.0.1:$port/ | grep '^RESULT')
    echo "$1 shape=$NORMD_SHAPE c=$3 $(sed -n 's/.*\(rps=[^ ]*\) \(p50_us=[^ ]*\) p90_us=[^ ]* \(p99_us=[^ ]*\) \(max_us=[^ ]*\).*\(non2xx=[^ ]*\).*/\1 \2 \3 \4 \5/p' <<<"$r")"
    kill -TERM $pid; wait $pid
}
for shape in ${SHAPES:-64,4096 8,4096}; do
    export NORMD_SHAPE=$shape
    for c in ${CONNS:-64 256}; do
        one gpu1 0 "$c"
        one gpu2 0,1 "$c"
    done
done
