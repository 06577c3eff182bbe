#!/usr/bin/env bash
# stages.sh - where a request's time goes, per backend and connection count (issue 11).
#
# For each configuration it starts one normd, warms it for WARM seconds, then for each connection
# count reads /metrics, runs wrk with post_binary.lua for DURATION seconds, reads /metrics again
# and prints, from the differences of normd_request_stage_seconds{stage} sums and counts, the mean
# time per request in each stage (queue, input, compute and its device-timed parts h2d, kernel,
# d2h, output, wakeup, total), the requests per batch, the part of compute the device does not
# account for (compute - h2d - kernel - d2h: waiting to see completion, and submitting where the
# device stamps an event before the next call reaches it), the daemon's CPU time per request and
# the machine's busy cores.
#
# Environment: NORMD_BIN (build/normd), CONFIGS ("cuda null": backends), CONNS ("1 16 64 256"),
# DURATION (5), WARM (2), WRK_THREADS (8), NORMD_EXTRA (daemon flags for every configuration),
# NORMD_OP/NORMD_DTYPE/NORMD_SHAPE/NORMD_PROTO (as post_binary.lua), WORK (logs; a temporary
# directory). Only 127.0.0.1 is contacted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
CONFIGS=${CONFIGS:-"cuda null"}
CONNS=${CONNS:-"1 16 64 256"}
DURATION=${DURATION:-5}
WARM=${WARM:-2}
WRK_THREADS=${WRK_THREADS:-8}
NORMD_EXTRA=${NORMD_EXTRA:-}
WORK=${WORK:-$(mktemp -d)}
export NORMD_OP=${NORMD_OP:-layernorm} NORMD_DTYPE=${NORMD_DTYPE:-float16}
export NORMD_SHAPE=${NORMD_SHAPE:-8,4096} NORMD_PROTO=${NORMD_PROTO:-v1}
mkdir -p "$WORK"

source "$here/lib.sh" # start_daemon, stop_daemon, field
trap stop_daemon EXIT
trap 'stop_daemon; exit 130' INT TERM

# load C SECONDS LOG: wrk against the running daemon; prints its RESULT line
load() {
    local t=$(( $1 < WRK_THREADS ? $1 : WRK_THREADS ))
    wrk -t "$t" -c "$1" -d "${2}s" --timeout 10s -s "$here/post_binary.lua" \
        "http://127.0.0.1:$daemon_port/" >"$3" 2>&1 || true
    grep '^RESULT' "$3" || echo "RESULT rps=0 p50_us=0 p99_us=0"
}

# snap K: /metrics to $WORK/mK, with the daemon's CPU time (/proc/PID/stat utime + stime, in
# clock ticks), its minor page faults and the machine's /proc/stat cpu line appended as comments,
# which Prometheus text allows and stages.py reads
snap() {
    curl -s "http://127.0.0.1:$daemon_port/metrics" >"$WORK/m$1"
    { echo "# proc_ticks $(awk '{ print $14 + $15 }' "/proc/$daemon_pid/stat")"
      echo "# proc_minflt $(awk '{ print $10 }' "/proc/$daemon_pid/stat")"
      echo "# clk_tck $(getconf CLK_TCK)"
      echo "# cpu $(head -1 /proc/stat)"; } >>"$WORK/m$1"
}

echo "stages.sh: $NORMD_OP $NORMD_DTYPE $NORMD_SHAPE ($NORMD_PROTO), ${DURATION}s per run;" \
     "mean us per request in each stage (h2d/kernel/d2h: device-timed parts of compute;" \
     "unacct = compute - h2d - kernel - d2h; cpu: the daemon's CPU us per request; busy: the" \
     "machine's busy cores, wrk included)"
for config in $CONFIGS; do
    # shellcheck disable=SC2086  # NORMD_EXTRA is a list of flags
    start_daemon "$WORK/normd-$config.log" --backend "$config" $NORMD_EXTRA
    load 16 "$WARM" "$WORK/warm-$config.log" >/dev/null
    for c in $CONNS; do
        snap 0
        line=$(load "$c" "$DURATION" "$WORK/wrk-$config-c$c.log")
        snap 1
        python3 "$here/stages.py" "$WORK/m0" "$WORK/m1" "$config" "$c" \
            "$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")"
    done
    stop_daemon
done
