#!/usr/bin/env python3
"""torch_rounds.py DIR: per shape, normd's % of the copy ceiling and x torch.compile in each round
(gpu_rR.csv against torch_rR.csv of the same round), and how many shapes are below 1.00x in every
round, in some round, and by the median. One round is one bench_gpu --csv DIR/gpu_rR.csv and one
torch_bench.py --impl eager,compile --csv DIR/torch_rR.csv, run one after the other (R = 1, 2, ...),
so that drift of the machine falls on both."""
import csv, glob, os, statistics, sys
d = sys.argv[1]
rounds = sorted(int(os.path.basename(f)[5:-4]) for f in glob.glob(os.path.join(d, "gpu_r*.csv")))
pct, x = {}, {}
for r in rounds:
    comp = {(t["op"], t["dtype"], t["shape"]): float(t["time_us"])
            for t in csv.DictReader(open(os.path.join(d, f"torch_r{r}.csv"))) if t["impl"] == "compile"}
    for g in csv.DictReader(open(os.path.join(d, f"gpu_r{r}.csv"))):
        k = (g["op"], g["dtype"], g["shape"])
        pct.setdefault(k, []).append(float(g["pct_ceiling"]))
        if k in comp:
            x.setdefault(k, []).append(comp[k] / float(g["time_us"]))
print("per shape: %% of the copy ceiling (median of %d rounds); x torch.compile per round" % len(rounds))
print("%-12s %-9s %-22s %7s  %s" % ("op", "dtype", "shape", "%ceil", "x compile"))
for k in pct:
    xs = x.get(k, [])
    print("%-12s %-9s %-22s %6.1f%%  %s" % (k + (statistics.median(pct[k]), " ".join("%.2f" % v for v in xs))))
below = lambda v: round(v, 2) < 1.0  # as printed: 0.995 reads 1.00 (rounded) as in plot.py's table
every = [k for k in x if all(below(v) for v in x[k])]
some = [k for k in x if any(below(v) for v in x[k])]
med = [k for k in x if below(statistics.median(x[k]))]
print()
print("shapes: %d; below 1.00x torch.compile in every round: %d; in some round: %d; by the median: %d"
      % (len(x), len(every), len(some), len(med)))
print("below in every round:", "; ".join("%s %s %s" % k for k in every))
