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
source "$here/lib.sh"
trap stop_daemon EXIT
log=$(mktemp)
one() { # name devices connections
    start_daemon "$log" --backend cuda --devices "$2" || exit 1
    local r
    r=$(wrk -t 8 -c "$3" -d "${DURATION:-8}s" --timeout 10s -s "$here/post_binary.lua" \
        "http://127.0.0.1:$daemon_port/" | grep '^RESULT')
    echo "$1 shape=$NORMD_SHAPE c=$3 rps=$(field rps "$r") p50_us=$(field p50_us "$r")" \
         "p99_us=$(field p99_us "$r") max_us=$(field max_us "$r") non2xx=$(field non2xx "$r")"
    stop_daemon
}
for shape in ${SHAPES:-64,4096 8,4096}; do
    export NORMD_SHAPE=$shape
    for c in ${CONNS:-64 256}; do
        one gpu1 0 "$c"
        one gpu2 0,1 "$c"
    done
done
