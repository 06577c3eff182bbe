#!/usr/bin/env python3
"""torch_rounds.py DIR: per shape, normd's % of the copy ceiling and x torch.compile in each round
(gpu_rR.csv against torch_rR.csv of the same round), and how many shapes are below 1.00x in every
round, in some round, and by the median. One round is one bench_gpu --csv DIR/gpu_rR.csv and one
torch_bench.py --impl eager,compile --csv DIR/torch_rR.csv, run one after the other (R = 1, 2, ...),
so that drift of the machine falls on both.

With --median-csv, also writes DIR/gpu_med.csv and DIR/torch_med.csv: per shape the row of the
round whose normd % of the ceiling is the median, and per shape and PyTorch variant the row of
the median time, for bench/plot.py --table / --goals over the rounds together (use an odd number
of rounds, so each median is a measured row)."""
import csv, glob, os, statistics, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
d = args[0]
rounds = sorted(int(os.path.basename(f)[5:-4]) for f in glob.glob(os.path.join(d, "gpu_r*.csv")))


def read_csv(path):
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        return rd.fieldnames, list(rd)


# each round's two CSVs, read once: (field names, rows) by "gpu" / "torch", in round order
tables = {name: [read_csv(os.path.join(d, f"{name}_r{r}.csv")) for r in rounds] for name in ("gpu", "torch")}
pct, x = {}, {}
for (_, gpu), (_, torch) in zip(tables["gpu"], tables["torch"]):
    comp = {(t["op"], t["dtype"], t["shape"]): float(t["time_us"]) for t in torch if t["impl"] == "compile"}
    for g in gpu:
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


def median_rows(tabs, key, value):
    """Per key, the row whose value is the median among the rounds' rows (the lower of the two
    middle ones for an even count), over tabs, a list of (field names, rows)."""
    by = {}
    for _, rows in tabs:
        for t in rows:
            by.setdefault(key(t), []).append(t)
    out = []
    for ts in by.values():
        ts.sort(key=lambda t: float(t[value]))
        out.append(ts[(len(ts) - 1) // 2])
    return out


if "--median-csv" in sys.argv:
    for name, key, value in (("gpu", lambda t: (t["op"], t["dtype"], t["shape"]), "pct_ceiling"),
                             ("torch", lambda t: (t["op"], t["dtype"], t["shape"], t["impl"]), "time_us")):
        with open(os.path.join(d, "%s_med.csv" % name), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=tables[name][0][0])
            w.writeheader()
            w.writerows(median_rows(tables[name], key, value))
