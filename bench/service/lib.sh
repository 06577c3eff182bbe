# lib.sh - what the service benchmark scripts share (source it): one normd on a free loopback
# port, stopped cleanly, and the fields of post_binary.lua's / post_json.lua's RESULT line.
# NORMD_BIN names the daemon (build/normd).

daemon_pid=
daemon_port=

# start_daemon LOG ARGS...: starts normd with ARGS on a free loopback port, its output in LOG,
# and sets daemon_pid and daemon_port; 1 (LOG printed) when it does not come up.
start_daemon() {
    local log=$1
    shift
    "${NORMD_BIN:-build/normd}" --listen 127.0.0.1:0 "$@" >"$log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 300); do
        daemon_port=$(sed -n 's/^normd.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
        [ -n "$daemon_port" ] && return 0
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "${0##*/}: normd $* did not start:" >&2
    cat "$log" >&2
    daemon_pid=
    return 1
}

# stop_daemon: SIGTERM, then waits; says so when normd exits with a failure.
stop_daemon() {
    [ -n "$daemon_pid" ] || return 0
    kill -TERM "$daemon_pid" 2>/dev/null || true
    local rc=0
    wait "$daemon_pid" || rc=$?
    daemon_pid=
    [ $rc -eq 0 ] || echo "${0##*/}: normd exited with status $rc" >&2
    return 0
}

# field NAME LINE: the value of NAME=... in a RESULT line
field() {
    sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<"$2"
}

# shm_regions_make IN OUT: the shared memory objects (files under /dev/shm) that post_binary.lua's
# v2shm form uses, sized for NORMD_SHAPE and NORMD_DTYPE: IN holds one x, OUT one y per wrk thread
# (up to 8). Sets shm_bytes.
shm_regions_make() {
    shm_bytes=$(( $(tr ',' '*' <<<"$NORMD_SHAPE") * $([ "$NORMD_DTYPE" = float32 ] && echo 4 || echo 2) ))
    truncate -s "$shm_bytes" "$1"
    truncate -s $((shm_bytes * 8)) "$2"
}

# cuda_regions_hold HOLD_BIN DIR: starts cudashm_hold (bench/cudashm_hold.c) with device memory
# for one x and one y per wrk thread (up to 8), sized as shm_regions_make sizes its objects, and
# its register bodies in DIR; it holds the memory until the file descriptor in hold_fd is closed.
# 1 when it does not get ready.
cuda_regions_hold() {
    local bin=$1 dir=$2
    shm_bytes=$(( $(tr ',' '*' <<<"$NORMD_SHAPE") * $([ "$NORMD_DTYPE" = float32 ] && echo 4 || echo 2) ))
    mkfifo "$dir/hold.fifo"
    "$bin" "$NORMD_DTYPE" "$shm_bytes" $((shm_bytes * 8)) "$dir" <"$dir/hold.fifo" >"$dir/hold.log" 2>&1 &
    exec {hold_fd}>"$dir/hold.fifo"
    local i
    for i in $(seq 100); do
        grep -q '^ready' "$dir/hold.log" 2>/dev/null && return 0
        kill -0 $! 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# cuda_regions_register URL DIR [CURL_ARGS...]: registers cuda_regions_hold's memory as CUDA
# regions bench_in and bench_out with the daemon at URL; 1 when it refuses.
cuda_regions_register() {
    local url=$1 dir=$2 name
    shift 2
    for name in bench_in bench_out; do
        curl -sf "$@" -X POST "$url/v2/cudasharedmemory/region/$name/register" \
             -H 'Content-Type: application/json' -d @"$dir/$name.json" >/dev/null ||
            { echo "${0##*/}: registering $name failed" >&2; return 1; }
    done
}

# shm_regions_register URL IN OUT [CURL_ARGS...]: registers IN as region bench_in and OUT as
# bench_out with the daemon at URL (e.g. http://127.0.0.1:PORT; CURL_ARGS such as --unix-socket
# PATH); 1 when it refuses.
shm_regions_register() {
    local url=$1 in=$2 out=$3
    shift 3
    local name file size
    for name in bench_in bench_out; do
        if [ $name = bench_in ]; then file=$in size=$shm_bytes; else file=$out size=$((shm_bytes * 8)); fi
        curl -sf "$@" -X POST "$url/v2/systemsharedmemory/region/$name/register" \
             -H 'Content-Type: application/json' \
             -d "{\"key\":\"/${file##*/}\",\"offset\":0,\"byte_size\":$size}" >/dev/null ||
            { echo "${0##*/}: registering $name failed" >&2; return 1; }
    done
}
