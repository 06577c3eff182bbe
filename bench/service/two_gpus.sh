#!/usr/bin/env bash
# two_gpus.sh - does a second GPU add throughput? post_binary.lua at each connection count, a
# fresh daemon per run on one GPU (--devices 0) and then on two (--devices 0,1), for each shape
# and way of sending tensors:
#   v1     /v1 raw binary: x and y cross the socket
#   v2shm  KServe v2 with x and y in system shared memory (--allow-client-shm): the body is a
#          few hundred bytes of JSON; x is read from a registered region and y written to one
#   v2cudashm  the same with CUDA shared memory regions on device 0, held by bench/cudashm_hold
#          (HOLD_BIN; beside NORMD_BIN): on two GPUs, batches that run on device 1 copy them
#          from device 0
# Prints one line per run: rps, p50, p99, max (us), non-2xx.
#
# Environment: NORMD_BIN (build/normd), SHAPES ("64,4096 8,4096"), CONNS ("64 256"), MODES
# ("v1 v2shm"), GPUS ("1 2": the device counts to run), DURATION (8), OP/DTYPE (layernorm
# float16), BACKEND (cuda; null measures the host alone), EXTRA (more daemon flags, e.g.
# "--cuda-shm-dma-bytes 0"). Only 127.0.0.1 is contacted.
set -u
here=$(cd "$(dirname "$0")" && pwd)
NORMD_BIN=${NORMD_BIN:-build/normd}
export NORMD_OP=${OP:-layernorm} NORMD_DTYPE=${DTYPE:-float16}
source "$here/lib.sh"
shm_in=/dev/shm/normd-bench-in-$$ shm_out=/dev/shm/normd-bench-out-$$
hold_fd=
hold_stop() {
    [ -z "$hold_fd" ] || exec {hold_fd}>&- # cudashm_hold frees its memory and exits
    hold_fd=
}
cleanup() {
    stop_daemon
    rm -f "$shm_in" "$shm_out"
    hold_stop
}
trap cleanup EXIT
log=$(mktemp)

one() { # name devices connections mode
    local extra=()
    if [ "$4" = v2shm ]; then
        extra=(--allow-client-shm)
        shm_regions_make "$shm_in" "$shm_out"
    elif [ "$4" = v2cudashm ]; then
        extra=(--allow-client-shm)
        hold_dir=$(mktemp -d)
        cuda_regions_hold "${HOLD_BIN:-$(dirname "$NORMD_BIN")/bench/cudashm_hold}" "$hold_dir" ||
            { echo "two_gpus.sh: cudashm_hold did not start ($hold_dir/hold.log)" >&2; exit 1; }
    fi
    # shellcheck disable=SC2086 # EXTRA is a list of flags
    start_daemon "$log" --backend "${BACKEND:-cuda}" --devices "$2" "${extra[@]}" ${EXTRA:-} ||
        exit 1
    if [ "$4" = v2shm ]; then
        shm_regions_register "http://127.0.0.1:$daemon_port" "$shm_in" "$shm_out" || exit 1
    elif [ "$4" = v2cudashm ]; then
        cuda_regions_register "http://127.0.0.1:$daemon_port" "$hold_dir" || exit 1
    fi
    local r
    r=$(NORMD_PROTO=$4 NORMD_SHM_IN_FILE=$shm_in \
        wrk -t 8 -c "$3" -d "${DURATION:-8}s" --timeout 10s -s "$here/post_binary.lua" \
        "http://127.0.0.1:$daemon_port/" | grep '^RESULT')
    echo "$1 $4 shape=$NORMD_SHAPE c=$3 rps=$(field rps "$r") p50_us=$(field p50_us "$r")" \
         "p99_us=$(field p99_us "$r") max_us=$(field max_us "$r") non2xx=$(field non2xx "$r")"
    stop_daemon
    hold_stop
}
for shape in ${SHAPES:-64,4096 8,4096}; do
    export NORMD_SHAPE=$shape
    for mode in ${MODES:-v1 v2shm}; do
        for c in ${CONNS:-64 256}; do
            for g in ${GPUS:-1 2}; do
                one "gpu$g" "$(seq -s, 0 $((g - 1)))" "$c" "$mode"
            done
        done
    done
done
