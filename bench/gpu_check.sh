#!/bin/bash
# gpu_check.sh - one call on the GPU machine: the GPU tests, the kernel benchmark, PyTorch on the
# same shapes, and the joined table last. Logs and CSVs go to $OUT (or bench/results/run).
# Build first where the toolchain is (make build/tests/gpu_rows build/bench/bench_gpu), carry
# build/ and .deb/, and source bench/device_env.sh before this on a machine without packages.
#
#   SUITE=rows|axis|prelu|all   which benchmark shapes (default rows)
#   TESTS="gpu_rows gpu_axis"   which test programs (default: every build/tests/gpu_*)
#   TORCH_IMPL=eager,compile    PyTorch variants; TORCH_BUDGET_S caps the compile time spent
#   QUICK=1                     a reduced width sweep
set -u
OUT=${OUT:-bench/results/run}
mkdir -p "$OUT"
SUITE=${SUITE:-rows}
TORCH_IMPL=${TORCH_IMPL:-eager,compile}
TORCH_BUDGET_S=${TORCH_BUDGET_S:-1000000}
Q=""; [ "${QUICK:-0}" = 1 ] && Q="--quick"
export PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > "$OUT/device.txt" 2>&1

tests=${TESTS:-$(cd build/tests && ls gpu_* 2>/dev/null | grep -v '\.d$')}
for t in $tests; do
    echo "== $t"
    timeout "${TEST_TIMEOUT:-300}" "build/tests/$t" --jobs 1 > "$OUT/$t.log" 2>&1
    echo "$t rc=$?"; tail -3 "$OUT/$t.log"
done

echo "== bench_gpu --suite $SUITE $Q"
timeout "${BENCH_TIMEOUT:-300}" build/bench/bench_gpu --suite "$SUITE" $Q --csv "$OUT/normd.csv" \
    > "$OUT/bench_gpu.log" 2>&1
echo "bench_gpu rc=$?"

if [ -n "$TORCH_IMPL" ]; then
    echo "== torch_bench --suite $SUITE $Q --impl $TORCH_IMPL"
    timeout "${TORCH_TIMEOUT:-400}" python3 bench/torch_bench.py --suite "$SUITE" $Q \
        --impl "$TORCH_IMPL" --budget-s "$TORCH_BUDGET_S" --csv "$OUT/torch.csv" \
        > "$OUT/torch.log" 2>&1
    echo "torch_bench rc=$?"
fi

python3 bench/plot.py --table "$OUT/normd.csv" "$OUT/torch.csv" | tee "$OUT/table.txt"
