#!/usr/bin/env bash
# run.sh - the service benchmark: normd over loopback, driven by wrk with raw binary POSTs.
#
# For each configuration and workload it starts the daemon on a free port, warms it up, runs wrk
# at each connection count, reads requests/s, latency percentiles and errors from wrk and the mean
# batch rows from /metrics (normd_batch_rows_sum / _count, before and after each run), spot-checks
# one answer (cuda against the cpu backend, null against its own input), stops the daemon, and
# finally writes a CSV and prints a table.
#
# Configurations (CONFIGS, space separated):
#   <backend>-batch    --backend <backend>, batching as configured (the default policy)
#   <backend>-nobatch  --backend <backend> --max-batch-rows <one request's rows>: batching off
#   <backend>-v2       as <backend>-batch, the requests sent over KServe v2 with binary tensors
#   <backend>-json     as <backend>-batch, the requests sent as /v1 JSON (post_json.lua: "%.9g"
#                      numbers, the answer in JSON), to set beside the raw binary runs
#   null               --backend null: no compute, the HTTP ceiling
# Workloads: layernorm float16 8x4096 and rmsnorm bfloat16 1x4096 (x only).
#
# Environment: NORMD_BIN (build/normd), RESULTS_DIR (bench/results), DURATION (seconds per run,
# 5), CONNS ("1 16 64 256"), WRK_THREADS (8), CONFIGS ("cuda-batch cuda-nobatch null"),
# NORMD_EXTRA (more daemon flags for every configuration), LABEL_SUFFIX (appended to the config
# names in the CSV, e.g. "+spin100" for a run with NORMD_EXTRA="--cuda-spin-us 100"), CSV_NAME
# (service.csv), WORK (scratch dir, a temporary one).
# Needs wrk, curl, python3. Only 127.0.0.1 is ever contacted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NORMD_BIN=${NORMD_BIN:-build/normd}
RESULTS_DIR=${RESULTS_DIR:-bench/results}
DURATION=${DURATION:-5}
CONNS=${CONNS:-"1 16 64 256"}
WRK_THREADS=${WRK_THREADS:-8}
CONFIGS=${CONFIGS:-"cuda-batch cuda-nobatch null"}
NORMD_EXTRA=${NORMD_EXTRA:-}
WORKLOADS=${WORKLOADS:-"layernorm:float16:8,4096 rmsnorm:bfloat16:1,4096"}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$RESULTS_DIR" "$WORK"
LABEL_SUFFIX=${LABEL_SUFFIX:-}
CSV=$RESULTS_DIR/${CSV_NAME:-service.csv}

for tool in wrk curl python3; do
    command -v $tool >/dev/null || { echo "run.sh: $tool not found" >&2; exit 1; }
done
[ -x "$NORMD_BIN" ] || { echo "run.sh: $NORMD_BIN not built (make $NORMD_BIN)" >&2; exit 1; }

device=$( (nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || true) | head -1)
device=${device:-none}

source "$here/lib.sh"
trap stop_daemon EXIT

metric() { # metric NAME: one unlabelled series from /metrics
    curl -sf "http://127.0.0.1:$daemon_port/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}

# post OP DTYPE SHAPE BODY OUT: one binary request; prints the HTTP status
post() {
    curl -s -o "$5" -w '%{http_code}' -H 'Content-Type: application/octet-stream' \
        --data-binary @"$4" "http://127.0.0.1:$daemon_port/v1/$1?shape=$3&dtype=$2"
}

elems_of() { tr ',' '\n' <<<"$1" | awk 'BEGIN { p = 1 } { p *= $1 } END { print p }'; }
esize_of() { [ "$1" = float32 ] && echo 4 || echo 2; }

echo "config,op,dtype,shape,connections,duration_s,requests,rps,payload_gbps,p50_ms,p99_ms,mean_batch_rows,non2xx,socket_errors,spot_check,device" >"$CSV"

for wl in $WORKLOADS; do
    IFS=: read -r op dtype shape <<<"$wl"
    python3 "$here/spot_check.py" body "$dtype" "$(elems_of "$shape")" "$WORK/$op.body"
done

declare -A spot
for config in $CONFIGS; do
    for wl in $WORKLOADS; do
        IFS=: read -r op dtype shape <<<"$wl"
        rows=$(( $(elems_of "$shape") / ${shape##*,} ))
        backend=${config%-*}
        args=(--backend "$backend")
        [ "${config##*-}" = nobatch ] && args+=(--max-batch-rows "$rows")
        proto=v1
        [ "${config##*-}" = v2 ] && proto=v2
        script=post_binary.lua
        [ "${config##*-}" = json ] && script=post_json.lua
        log=$WORK/normd-$config-$op.log
        start_daemon "$log" $NORMD_EXTRA "${args[@]}"
        echo "== $config $op $dtype $shape (port $daemon_port, ${args[*]})" >&2

        # spot check first, on a fresh daemon
        out=$WORK/out-$config-$op.bin
        code=$(post "$op" "$dtype" "$shape" "$WORK/$op.body" "$out")
        if [ "$code" != 200 ]; then
            spot[$config,$op]="FAIL_HTTP_$code"
        elif [ "$proto" = v2 ] || [ "$script" = post_json.lua ]; then
            spot[$config,$op]=v1_checked  # the binary form was checked on this daemon; v2
                                          # framing and JSON answers are checked by make test
        elif [ "$backend" = null ]; then
            spot[$config,$op]=$(python3 "$here/spot_check.py" same "$out" "$WORK/$op.body" | tr ' ' '_')
        else
            spot[$config,$op]=pending
        fi

        export NORMD_OP=$op NORMD_DTYPE=$dtype NORMD_SHAPE=$shape NORMD_PROTO=$proto
        url=http://127.0.0.1:$daemon_port/
        wrk -t 2 -c 16 -d 1s -s "$here/$script" "$url" >/dev/null # warm-up
        for c in $CONNS; do
            t=$(( c < WRK_THREADS ? c : WRK_THREADS ))
            s0=$(metric normd_batch_rows_sum); n0=$(metric normd_batch_rows_count)
            wlog=$WORK/wrk-$config-$op-$c.log
            wrk -t "$t" -c "$c" -d "${DURATION}s" --timeout 10s --latency \
                -s "$here/$script" "$url" >"$wlog" 2>&1 || true
            s1=$(metric normd_batch_rows_sum); n1=$(metric normd_batch_rows_count)
            line=$(grep '^RESULT' "$wlog" || echo "RESULT requests=0")
            req=$(field requests "$line"); rps=$(field rps "$line")
            p50=$(field p50_us "$line"); p99=$(field p99_us "$line")
            non2xx=$(field non2xx "$line")
            sockerr=$(( $(field connect_errors "$line") + $(field read_errors "$line") + \
                        $(field write_errors "$line") + $(field timeouts "$line") ))
            bytes=$(field req_bytes "$line")
            awk -v cfg="$config$LABEL_SUFFIX" -v op="$op" -v dt="$dtype" -v sh="${shape//,/x}" -v c="$c" \
                -v d="$DURATION" -v req="$req" -v rps="$rps" -v b="$bytes" -v p50="$p50" \
                -v p99="$p99" -v s="$(awk -v a="$s1" -v b="$s0" 'BEGIN{print a-b}')" \
                -v n="$(awk -v a="$n1" -v b="$n0" 'BEGIN{print a-b}')" -v e2="$non2xx" \
                -v es="$sockerr" -v dev="$device" 'BEGIN {
                    printf "%s,%s,%s,%s,%d,%s,%d,%.1f,%.3f,%.3f,%.3f,%.2f,%d,%d,SPOT,%s\n",
                        cfg, op, dt, sh, c, d, req, rps, rps * 2 * b / 1e9, p50 / 1e3,
                        p99 / 1e3, (n > 0 ? s / n : 0), e2, es, dev }' >>"$CSV"
        done
        stop_daemon
    done
done

# Reference answers from the cpu backend for the spot checks of compute backends.
if grep -q pending <<<"${spot[*]}"; then
    for wl in $WORKLOADS; do
        IFS=: read -r op dtype shape <<<"$wl"
        start_daemon "$WORK/normd-cpu-ref-$op.log" $NORMD_EXTRA --backend cpu
        code=$(post "$op" "$dtype" "$shape" "$WORK/$op.body" "$WORK/ref-$op.bin")
        stop_daemon
        for config in $CONFIGS; do
            [ "${spot[$config,$op]}" = pending ] || continue
            if [ "$code" != 200 ]; then
                spot[$config,$op]="cpu_ref_HTTP_$code"
            else
                spot[$config,$op]=$(python3 "$here/spot_check.py" compare "$dtype" \
                    "$WORK/out-$config-$op.bin" "$WORK/ref-$op.bin" | tr ' ,' '__')
            fi
        done
    done
fi
tmp=$CSV.tmp
: >"$tmp"
while IFS= read -r l; do
    if [[ $l == *,SPOT,* ]]; then
        IFS=, read -r cfg op _ <<<"$l"
        cfg=${cfg%"$LABEL_SUFFIX"}
        l=${l/,SPOT,/,${spot[$cfg,$op]},}
    fi
    echo "$l" >>"$tmp"
done <"$CSV"
mv "$tmp" "$CSV"

echo
echo "service benchmark: $device, ${DURATION}s per run, wrk -t min(c,$WRK_THREADS) --latency; payload = request + response bytes"
tail -n +2 "$CSV" | sort -t, -k2,2 -k1,1 -k5,5n | awk -F, '{
    key = $2 " " $3 " " $4
    if (key != last) { printf "\n%s\n%-14s %5s %10s %8s %9s %9s %10s %7s %s\n", key, "config", "conns",
        "req/s", "GB/s", "p50 ms", "p99 ms", "batch rows", "errors", "spot"; last = key }
    printf "%-14s %5d %10.0f %8.3f %9.3f %9.3f %10.2f %7d %s\n", $1, $5, $8, $9, $10, $11, $12,
        $13 + $14, $15 }'
echo
echo "CSV: $CSV   logs: $WORK"
