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
