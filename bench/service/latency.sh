#!/usr/bin/env bash
# latency.sh - sidecar-grade latency (issue 11): tail latency of a fresh daemon, from the moment it
# is ready.
#
# For each repeat and each configuration it starts a fresh normd, waits until it says it is
# listening and /healthz answers 200, and at once (no warm-up: the first seconds after ready are
# measured on purpose) runs wrk with post_binary.lua for DURATION seconds at each connection count
# in turn, then stops the daemon. Every run's req/s, p50/p90/p99/p99.9/max and errors go to
# RESULTS_DIR/latency_TAG.csv and its latency-by-percentile curve (0 to 99.999%, and the maximum)
# to latency_TAG_curves.csv. At the end latency.py prints the summary (medians over repeats, the
# worst p99.9 and max), PASS/MISS lines for the issue's targets per repeat (see latency.py), and
# draws latency_TAG.png; the printed report is also kept as latency_TAG.txt.
#
# Configurations (CONFIGS, space separated):
#   cuda, cpu, null   --backend <name>, over TCP on 127.0.0.1
#   unix              --backend cuda over the UNIX socket listener (--listen off --unix PATH)
#   <backend>-unix    that backend over the UNIX socket (e.g. null-unix, the baseline of unix)
# wrk connects only to TCP addresses it resolves itself; for the UNIX socket this script has wrk
# load a wrapper of post_binary.lua whose wrk.resolve builds an AF_UNIX address through LuaJIT's
# FFI (wrk is built on LuaJIT). wrk itself then connects to the socket and drives it with the same
# event loop, requests and latency recording as over TCP: nothing relays the bytes (a relay such as
# socat would add its own hop to every request and so to the latencies measured).
#
# Environment: NORMD_BIN (build/normd), CONFIGS ("cuda null unix"), REPEATS (3), DURATION (20,
# seconds per run), CONNS ("1 4 16 64 256"), WRK_THREADS (8; a run uses min(connections, this)),
# NORMD_EXTRA (more daemon flags for every configuration), NORMD_OP/NORMD_DTYPE/NORMD_SHAPE
# (layernorm float16 8,4096), NORMD_PROTO (v1, v2 or v2shm: x and y in shared memory regions that
# this script makes and registers once each daemon is ready, with --allow-client-shm added; or
# v2cudashm: x and y in device memory that HOLD_BIN, bench/cudashm_hold beside NORMD_BIN, holds
# for the whole run, registered with each daemon as CUDA shared memory regions), TAG
# (date and time), RESULTS_DIR (bench/results), NORMD_CPUS and WRK_CPUS (CPU lists as taskset -c
# takes them: the daemon and wrk each kept to their own cores, as a sidecar with dedicated cores
# and the model server beside it would be; unset: both run anywhere),
# READY_TIMEOUT (60 s), WORK (logs and scratch; a temporary directory), PYTHON (python3).
# Needs bash, wrk and python3 (matplotlib for the plot; without it the plot is skipped, and
# `latency.py plot CSV CURVES PNG` draws it later on a machine that has it).
# Only 127.0.0.1 and a UNIX socket under WORK are ever contacted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NORMD_BIN=${NORMD_BIN:-build/normd}
CONFIGS=${CONFIGS:-"cuda null unix"}
REPEATS=${REPEATS:-3}
DURATION=${DURATION:-20}
CONNS=${CONNS:-"1 4 16 64 256"}
WRK_THREADS=${WRK_THREADS:-8}
NORMD_EXTRA=${NORMD_EXTRA:-}
TAG=${TAG:-$(date +%Y%m%d-%H%M%S)}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
READY_TIMEOUT=${READY_TIMEOUT:-60}
WORK=${WORK:-$(mktemp -d)}
export NORMD_OP=${NORMD_OP:-layernorm} NORMD_DTYPE=${NORMD_DTYPE:-float16}
export NORMD_SHAPE=${NORMD_SHAPE:-8,4096} NORMD_PROTO=${NORMD_PROTO:-v1}

PYTHON=${PYTHON:-python3}
die() { echo "latency.sh: $*" >&2; exit 1; }
on_cpus=() wrk_on_cpus=()
[ -n "${NORMD_CPUS:-}" ] && on_cpus=(taskset -c "$NORMD_CPUS")
[ -n "${WRK_CPUS:-}" ] && wrk_on_cpus=(taskset -c "$WRK_CPUS")
[ -n "${EPOCHREALTIME:-}" ] || die "needs bash 5 (EPOCHREALTIME)"
for tool in wrk "$PYTHON"; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
# matplotlib comes from Debian's python3-matplotlib, which only /usr/bin/python3 sees when another
# python3 comes first on PATH
if ! "$PYTHON" -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ] &&
    /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    PYTHON=/usr/bin/python3
fi
[ -x "$NORMD_BIN" ] || die "$NORMD_BIN not built (make $NORMD_BIN)"
for config in $CONFIGS; do
    case $config in
        cuda | cpu | null | unix | cuda-unix | cpu-unix | null-unix) ;;
        *) die "unknown configuration '$config' (cuda cpu null unix <backend>-unix)" ;;
    esac
done
mkdir -p "$RESULTS_DIR" "$WORK"
CSV=$RESULTS_DIR/latency_$TAG.csv
CURVES=$RESULTS_DIR/latency_${TAG}_curves.csv
PNG=$RESULTS_DIR/latency_$TAG.png
TXT=$RESULTS_DIR/latency_$TAG.txt
sock=$WORK/normd.sock
[ ${#sock} -lt 108 ] || die "$sock: longer than a UNIX socket path may be (set WORK shorter)"

device=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | head -1)
device=${device:-none}

# wrk script for the UNIX socket: post_binary.lua as it is, with an AF_UNIX address in place of the
# TCP lookup. wrk copies a thread's address with its own script_addr_copy (exported, which is what
# lets LuaJIT's FFI call it), so the address is allocated the way wrk later frees it.
cat >"$WORK/post_binary_unix.lua" <<'LUA'
dofile(os.getenv("NORMD_POST_LUA"))
local ffi = require("ffi")
ffi.cdef [[
struct nd_addrinfo { int ai_flags, ai_family, ai_socktype, ai_protocol; unsigned int ai_addrlen;
                     void *ai_addr; char *ai_canonname; void *ai_next; };
struct nd_sockaddr_un { unsigned short sun_family; char sun_path[108]; };
void script_addr_copy(struct nd_addrinfo *src, struct nd_addrinfo *dst);
]]
function wrk.resolve(host, service)
   local path = os.getenv("NORMD_UNIX")
   local ok, err = pcall(function()
      local sa = ffi.new("struct nd_sockaddr_un")
      sa.sun_family = 1 -- AF_UNIX
      ffi.copy(sa.sun_path, path)
      local src = ffi.new("struct nd_addrinfo")
      src.ai_family, src.ai_socktype, src.ai_protocol = 1, 1, 0 -- AF_UNIX, SOCK_STREAM
      src.ai_addrlen, src.ai_addr = ffi.sizeof(sa), sa
      local addr = wrk.lookup("127.0.0.1", "1")[1] -- a wrk.addr to overwrite
      ffi.C.script_addr_copy(src, ffi.cast("struct nd_addrinfo *", addr))
      wrk.addrs = wrk.connect(addr) and { addr } or {}
   end)
   if not ok then
      io.stderr:write("post_binary_unix.lua: no UNIX socket address for wrk: " .. err .. "\n")
      wrk.addrs = {}
   end
end
LUA

source "$here/lib.sh" # stop_daemon, field, shm_regions_make, shm_regions_register
shm_in=/dev/shm/normd-latency-in-$$ shm_out=/dev/shm/normd-latency-out-$$
hold_fd=
cleanup() {
    stop_daemon
    rm -f "$shm_in" "$shm_out"
    [ -z "$hold_fd" ] || exec {hold_fd}>&- # cudashm_hold frees its memory and exits
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM
shm_flags=()
if [ "$NORMD_PROTO" = v2shm ]; then
    shm_regions_make "$shm_in" "$shm_out"
    shm_flags=(--allow-client-shm)
elif [ "$NORMD_PROTO" = v2cudashm ]; then
    cuda_regions_hold "${HOLD_BIN:-$(dirname "$NORMD_BIN")/bench/cudashm_hold}" "$WORK" ||
        die "cudashm_hold did not start (see $WORK/hold.log)"
    shm_flags=(--allow-client-shm)
fi
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }

echo "config,backend,transport,op,dtype,shape,connections,repeat,duration_s,requests,rps,p50_us,p90_us,p99_us,p999_us,max_us,non2xx,socket_errors,since_ready_s,ready_s,device" >"$CSV"
echo "config,connections,repeat,percentile,latency_us" >"$CURVES"

nconf=$(wc -w <<<"$CONFIGS")
nconn=$(wc -w <<<"$CONNS")
echo "latency.sh: $NORMD_OP $NORMD_DTYPE $NORMD_SHAPE ($NORMD_PROTO), configurations: $CONFIGS," \
     "connections: $CONNS, ${DURATION}s per run, $REPEATS repeats: about" \
     "$(( REPEATS * nconf * nconn * (DURATION + 1) )) s; device: $device; logs in $WORK"

for repeat in $(seq "$REPEATS"); do
    for config in $CONFIGS; do
        backend=${config%-unix}
        transport=tcp
        if [ "$config" = unix ]; then
            backend=cuda transport=unix
        elif [ "$config" != "$backend" ]; then
            transport=unix
        fi
        log=$WORK/normd-$config-r$repeat.log
        if [ $transport = unix ]; then
            rm -f "$sock"
            listen=(--listen off --unix "$sock")
        else
            listen=(--listen 127.0.0.1:0)
        fi
        t0=$EPOCHREALTIME
        # shellcheck disable=SC2086  # NORMD_EXTRA is a list of flags
        "${on_cpus[@]}" "$NORMD_BIN" "${listen[@]}" --backend "$backend" "${shm_flags[@]}" $NORMD_EXTRA \
            >"$log" 2>&1 &
        daemon_pid=$!
        if ! where=$("$PYTHON" "$here/latency.py" ready "$log" "$daemon_pid" "$READY_TIMEOUT"); then
            cat "$log" >&2
            stop_daemon
            die "normd --backend $backend ($transport) did not become ready"
        fi
        ready=$EPOCHREALTIME
        ready_s=$(seconds_since "$t0")
        if [ $transport = unix ]; then
            script=$WORK/post_binary_unix.lua url=http://localhost/
        else
            script=$here/post_binary.lua url=http://127.0.0.1:${where#tcp }/
        fi
        if [ "$NORMD_PROTO" = v2shm ] || [ "$NORMD_PROTO" = v2cudashm ]; then
            curl_to=()
            [ $transport = unix ] && curl_to=(--unix-socket "$sock")
            if [ "$NORMD_PROTO" = v2shm ]; then
                shm_regions_register "${url%/}" "$shm_in" "$shm_out" "${curl_to[@]}"
            else
                cuda_regions_register "${url%/}" "$WORK" "${curl_to[@]}"
            fi || { stop_daemon; die "registering the shared memory regions failed"; }
        fi
        for c in $CONNS; do
            t=$(( c < WRK_THREADS ? c : WRK_THREADS ))
            since=$(seconds_since "$ready")
            wlog=$WORK/wrk-$config-r$repeat-c$c.log
            curve=$WORK/curve-$config-r$repeat-c$c.csv
            rm -f "$curve"
            NORMD_LATENCY_CURVE=$curve NORMD_POST_LUA=$here/post_binary.lua NORMD_UNIX=$sock \
                NORMD_SHM_IN_FILE=$shm_in \
                "${wrk_on_cpus[@]}" wrk -t "$t" -c "$c" -d "${DURATION}s" --timeout 10s \
                --latency -s "$script" \
                "$url" >"$wlog" 2>&1 || true
            line=$(grep '^RESULT' "$wlog" || true)
            if [ -z "$line" ]; then
                echo "latency.sh: r$repeat $config c=$c: wrk gave no result:" >&2
                tail -5 "$wlog" >&2
                line="RESULT requests=0 rps=0 p50_us=0 p90_us=0 p99_us=0 p999_us=0 max_us=0 non2xx=0 connect_errors=1 read_errors=0 write_errors=0 timeouts=0"
            fi
            sockerr=$(( $(field connect_errors "$line") + $(field read_errors "$line") + \
                        $(field write_errors "$line") + $(field timeouts "$line") ))
            echo "$config,$backend,$transport,$NORMD_OP,$NORMD_DTYPE,${NORMD_SHAPE//,/x},$c,$repeat,$DURATION,$(field requests "$line"),$(field rps "$line"),$(field p50_us "$line"),$(field p90_us "$line"),$(field p99_us "$line"),$(field p999_us "$line"),$(field max_us "$line"),$(field non2xx "$line"),$sockerr,$since,$ready_s,$device" >>"$CSV"
            [ -f "$curve" ] && tail -n +2 "$curve" | sed "s/^/$config,$c,$repeat,/" >>"$CURVES"
            printf 'r%s %-10s c=%-4s %9.0f req/s  p50 %7.0f  p90 %7.0f  p99 %7.0f  p99.9 %7.0f  max %7.0f us  errors %d+%d  (from %ss after ready)\n' \
                "$repeat" "$config" "$c" "$(field rps "$line")" "$(field p50_us "$line")" \
                "$(field p90_us "$line")" "$(field p99_us "$line")" "$(field p999_us "$line")" \
                "$(field max_us "$line")" "$(field non2xx "$line")" "$sockerr" "$since"
        done
        stop_daemon
    done
done

echo
{
    echo "latency.sh $TAG: $NORMD_OP $NORMD_DTYPE $NORMD_SHAPE ($NORMD_PROTO), ${DURATION}s per run," \
         "$REPEATS repeats, a fresh daemon per configuration and repeat measured from ready," \
         "wrk -t min(c,$WRK_THREADS); device: $device; NORMD_EXTRA: ${NORMD_EXTRA:-none}" \
         "${NORMD_CPUS:+; normd on CPUs $NORMD_CPUS}${WRK_CPUS:+, wrk on CPUs $WRK_CPUS}"
    "$PYTHON" "$here/latency.py" report "$CSV" "$CURVES" "$PNG"
} | tee "$TXT"
echo "CSV: $CSV  curves: $CURVES  report: $TXT  logs: $WORK"
