#!/bin/bash
# tests/deploy/systemd.sh - the systemd units verify, and normd serves sockets that a service
# manager passes it (socket activation), as deploy/systemd/normd.socket would.
#
#   tests/deploy/systemd.sh build/normd          (make test-deploy)
#
# systemd-socket-activate (Debian's systemd) plays systemd's part: it listens, and on the first
# connection starts normd with the sockets at fd 3.. and LISTEN_FDS/LISTEN_PID set.
set -euo pipefail

normd=$(realpath "${1:?usage: systemd.sh NORMD_BINARY}")
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
passed=0 failed=0
check() { # check NAME COMMAND...
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok   $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
    fi
}
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# answers URL [CURL_ARGS...]: the body of a JSON layernorm request, or nothing on failure.
layernorm() {
    local url=$1
    shift
    curl -fsS -m 20 "$@" "$url/v1/layernorm" -H 'Content-Type: application/json' \
        -d '{"shape":[1,4],"data":[1,2,3,4]}' 2>/dev/null || true
}
# activate LOG NSOCKETS ARGS...: systemd-socket-activate ARGS in the background ($pid), once it
# listens on all NSOCKETS sockets (it says so on stderr before it waits for a connection).
activate() {
    local log=$1 n=$2
    shift 2
    systemd-socket-activate "$@" >"$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do
        [ "$(grep -c '^Listening on' "$log")" -ge "$n" ] && return 0
        sleep 0.05
    done
    echo "systemd-socket-activate did not listen:"
    cat "$log"
    return 1
}
y_ok() { case $1 in *'"data":[-1.3416'*) return 0 ;; esac; return 1; }

# ---- systemd-analyze verify: any complaint fails (verify itself exits 0 on unknown keys).
# The units name /usr/local/bin/normd; verify wants it to exist, so a copy names the binary built.
for u in normd.service normd.socket; do
    sed "s|/usr/local/bin/normd|$normd|" "$src/deploy/systemd/$u" >"$tmp/$u"
done
out=$(systemd-analyze verify "$tmp/normd.service" "$tmp/normd.socket" 2>&1) && rc=0 || rc=$?
[ -n "$out" ] && echo "$out"
check "systemd-analyze verify normd.service normd.socket: no complaint" \
    test "$rc" = 0 -a -z "$out"
for key in DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes MemoryMax=; do
    check "normd.service has $key" grep -q "^$key" "$src/deploy/systemd/normd.service"
done

# ---- one TCP socket passed: served; the default --listen (127.0.0.1:8000) is not opened.
port=$(free_port)
activate "$tmp/one.log" 1 -l "127.0.0.1:$port" "$normd" --backend cpu
y=$(layernorm "http://127.0.0.1:$port")
echo "     answer: $y"
check "passed TCP socket: POST /v1/layernorm answers" y_ok "$y"
check "passed TCP socket: /v2/health/ready is 200" \
    test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/health/ready")" = 200
check "normd reports the passed socket" grep -q "listening on 1 socket passed by systemd" "$tmp/one.log"
check "the default --listen is not opened beside it" \
    sh -c "! grep -q 'listening on http://' '$tmp/one.log'"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
check "SIGTERM: exits 0" test "$rc" = 0

# ---- a TCP and a UNIX socket passed, and --listen given explicitly: all three are served.
port=$(free_port) port2=$(free_port)
sock=$tmp/normd.sock
activate "$tmp/three.log" 2 -l "127.0.0.1:$port" -l "$sock" \
    "$normd" --backend cpu --listen "127.0.0.1:$port2"
check "passed TCP socket of two: answers" y_ok "$(layernorm "http://127.0.0.1:$port")"
check "passed UNIX socket: answers" y_ok "$(layernorm http://normd --unix-socket "$sock")"
check "explicit --listen beside passed sockets: answers" \
    y_ok "$(layernorm "http://127.0.0.1:$port2")"
check "normd reports both passed sockets" grep -q "listening on 2 sockets passed by systemd" \
    "$tmp/three.log"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
check "SIGTERM: exits 0" test "$rc" = 0

# ---- a passed socket on every address, with the admin routes open: refused at start.
port=$(free_port)
activate "$tmp/open.log" 1 -l "0.0.0.0:$port" env -u NORMD_ALLOW_OPEN_ADMIN \
    "$normd" --backend cpu
curl -s -m 10 -o /dev/null "http://127.0.0.1:$port/healthz" || true
rc=0
wait "$pid" || rc=$?
check "passed socket beyond loopback without an admin token: refused (exit $rc)" \
    sh -c "[ $rc != 0 ] && grep -q 'beyond loopback' '$tmp/open.log'"

# ... and served with an admin token.
port=$(free_port)
echo "s3cret-token" >"$tmp/token"
activate "$tmp/token.log" 1 -l "0.0.0.0:$port" env -u NORMD_ALLOW_OPEN_ADMIN \
    "$normd" --backend cpu --admin-token-file "$tmp/token"
y=$(layernorm "http://127.0.0.1:$port")
check "passed socket beyond loopback with an admin token: answers" y_ok "$y"
y_ok "$y" || { echo "     answer: $y"; cat "$tmp/token.log"; }
kill -TERM "$pid"
wait "$pid" || true

echo "systemd: $passed passed, $failed failed"
[ "$failed" = 0 ]
