#!/usr/bin/env bash
# ncu_pair.sh - one row shape's kernels side by side under Nsight Compute, on the GPU machine:
# normd's (bench_gpu, one launch of its row kernel after 20) and torch.compile's (torch_bench.py
# --nvtx-once: the launches inside its NVTX range "prof"), with the figures that tell an
# issue-bound kernel from a latency-bound one.
#
#   OP=layernorm DTYPE=float16 COLS=256 [BIN=build/bench/bench_gpu] [OUT=dir] bench/ncu_pair.sh
#
# Rows of the bench's rows suite: 49152 x COLS (COLS <= 32768). Prints, per kernel: time,
# grid x block, registers, achieved occupancy, issue slots busy, warp instructions and
# instructions an element (warp instructions x 32 / elements), DRAM throughput and bytes read and
# written, and the top warp stall reasons (samples per issued instruction). Keeps ncu's raw CSVs
# in OUT (default bench/results/ncu). The clocks are left alone (--clock-control none), as DEVICE.md asks.
set -euo pipefail
OP=${OP:?OP=layernorm|rmsnorm|softmax|log_softmax}
DTYPE=${DTYPE:?DTYPE=float32|float16|bfloat16}
COLS=${COLS:?COLS=row length (<= 32768)}
BIN=${BIN:-build/bench/bench_gpu}
OUT=${OUT:-bench/results/ncu}
mkdir -p "$OUT"
tag=${OP}_${DTYPE}_${COLS}
M=gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,dram__bytes_read.sum,dram__bytes_write.sum
for r in long_scoreboard wait short_scoreboard barrier math_pipe_throttle lg_throttle mio_throttle \
    no_instruction branch_resolving not_selected selected; do
    M=$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
done
# ncu with the metrics above as CSV, in base units (nanoseconds); "$@": which launches, the program
prof() { ncu --clock-control none --csv --print-units base --metrics "$M" "$@"; }
prof -k regex:'nd_rows_' --launch-skip 20 --launch-count 1 \
    "$BIN" --suite rows --op "$OP" --dtype "$DTYPE" --cols "$COLS" --csv /tmp/ncu_pair_bench.csv \
    > "$OUT/${tag}_normd.csv"
prof --nvtx --nvtx-include 'prof/' \
    python3 bench/torch_bench.py --suite rows --op "$OP" --dtype "$DTYPE" --cols "$COLS" \
    --impl compile --nvtx-once --csv /tmp/ncu_pair_torch.csv > "$OUT/${tag}_compile.csv"
python3 - "$OUT/${tag}_normd.csv" "$OUT/${tag}_compile.csv" "$((49152 * COLS))" <<'PY'
import collections, csv, sys

elements = int(sys.argv[3])


def kernels(path):
    """ncu --csv rows (one per metric) grouped by launch ID: {id: (name, {metric: value})}"""
    lines = [l for l in open(path) if l.startswith('"')]
    out = collections.OrderedDict()
    for row in csv.DictReader(lines):
        k = out.setdefault(row["ID"], (row["Kernel Name"], {}))
        try:
            k[1][row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:  # "n/a" and the like
            pass
    return out


for label, path in (("normd", sys.argv[1]), ("torch.compile", sys.argv[2])):
    ks = kernels(path)
    if not ks:
        print(f"{label}: ncu profiled no kernel (see {path})")
    for name, m in ks.values():
        g = lambda k: m.get(k, 0.0)
        inst = g("smsp__inst_executed.sum")
        print(f"{label}: {name[:100]}")
        print(f"  {g('gpu__time_duration.sum') / 1e3:9.2f} us  grid {g('launch__grid_size'):.0f}"
              f" x {g('launch__block_size'):.0f}, {g('launch__registers_per_thread'):.0f} registers,"
              f" occupancy {g('sm__warps_active.avg.pct_of_peak_sustained_active'):.1f}%,"
              f" issue {g('smsp__issue_active.avg.pct_of_peak_sustained_active'):.1f}%,"
              f" DRAM {g('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f}%")
        print(f"  {inst:,.0f} warp instructions, {inst * 32 / elements:.2f} an element;"
              f" DRAM read {g('dram__bytes_read.sum') / 1e6:.1f} MB, written"
              f" {g('dram__bytes_write.sum') / 1e6:.1f} MB")
        stalls = sorted(((v, k.split("stalled_")[1].split("_per_")[0]) for k, v in m.items()
                         if "issue_stalled" in k), reverse=True)
        print("  stalls per issue: " + ", ".join(f"{n} {v:.2f}" for v, n in stalls[:6]))
PY
