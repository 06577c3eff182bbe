#!/usr/bin/env bash
# json_vs_binary.sh - JSON against raw binary on one daemon (issue 12's measurement): normd
# --backend cpu, layernorm 8x1024 float32, wrk 2 threads 16 connections, binary and JSON
# alternating (/v1 and v2), ROUNDS rounds of DUR s; each run annotated with the CPU other
# processes used meanwhile (others_cores); before each round waits up to QUIET_WAIT s for a quiet
# machine. Environment: NORMD (build/normd), ROUNDS (3), DUR (10), QUIET_WAIT (0), MODES.
# Only 127.0.0.1 is contacted.
set -euo pipefail
NORMD=${NORMD:-build/normd}; ROUNDS=${ROUNDS:-3}; DUR=${DUR:-10}; QUIET_WAIT=${QUIET_WAIT:-0}
NORMD_BIN=$NORMD
source "$(dirname "$0")/lib.sh"
trap stop_daemon EXIT
log=$(mktemp)
start_daemon "$log" --backend cpu || exit 1
pid=$daemon_pid
url=http://127.0.0.1:$daemon_port
tck=$(getconf CLK_TCK)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
mine() { awk '{print $14+$15}' /proc/$pid/stat; }
export NORMD_OP=layernorm NORMD_DTYPE=float32 NORMD_SHAPE=8,1024
run() { # label script proto
  local b0 m0 b1 m1 out w
  b0=$(busy); m0=$(mine)
  out=$( { /usr/bin/time -f "WRKCPU %U %S" env NORMD_PROTO=$3 wrk -t2 -c16 -d${DUR}s -s bench/service/$2 $url; } 2>&1)
  b1=$(busy); m1=$(mine)
  w=$(grep WRKCPU <<<"$out" | awk '{print $2+$3}')
  other=$(python3 -c "print('%.2f' % (max(0, (($b1-$b0)-($m1-$m0))/$tck - $w) / $DUR))")
  echo "$1 $(grep RESULT <<<"$out") others_cores=$other"
}
quiet() {
  local t=0 b0 b1
  while [ $t -lt $QUIET_WAIT ]; do
    b0=$(busy); sleep 1; b1=$(busy); t=$((t+1))
    python3 -c "import sys; sys.exit(0 if ($b1-$b0)/$tck < 0.2 else 1)" && return 0
  done
}
NORMD_PROTO=v1 wrk -t2 -c16 -d2s -s bench/service/post_binary.lua $url >/dev/null
NORMD_PROTO=v1 wrk -t2 -c16 -d2s -s bench/service/post_json.lua $url >/dev/null
MODES=${MODES:-"binary-v1:post_binary.lua:v1 json-v1:post_json.lua:v1 binary-v2:post_binary.lua:v2 json-v2:post_json.lua:v2"}
for r in $(seq $ROUNDS); do
  quiet
  for m in $MODES; do
    IFS=: read -r label script proto <<<"$m"
    run "round=$r $label" $script $proto
  done
done
