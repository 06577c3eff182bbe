#!/usr/bin/env python3
"""ab_summary.py - the table of bench/ab_rounds.sh: per shape, the median over rounds of each
build's % of the same-run copy ceiling, then each build's plan for that shape.

    ab_summary.py DIR NAME...     (reads DIR/NAME_rR.csv, as bench_gpu --csv writes them)
"""
import csv
import glob
import os
import re
import statistics
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    d, names = sys.argv[1], sys.argv[2:]
    pct, plans = {}, {}
    for name in names:
        files = [f for f in glob.glob(os.path.join(d, name + "_r*.csv"))
                 if re.fullmatch(re.escape(name) + r"_r\d+\.csv", os.path.basename(f))]
        if not files:
            sys.exit(f"ab_summary.py: no {name}_r*.csv in {d}")
        for f in sorted(files):
            for r in csv.DictReader(open(f)):
                k = (r["op"], r["dtype"], r["shape"])
                pct.setdefault(k, {}).setdefault(name, []).append(float(r["pct_ceiling"]))
                plans.setdefault(k, {})[name] = r.get("plan", "")
    w = max(10, max(len(n) for n in names) + 2)
    print("median over rounds, % of the same-run copy ceiling")
    print("%-12s %-9s %-22s" % ("op", "dtype", "shape") + "".join(n.rjust(w) for n in names))
    for k in sorted(pct):
        cells = ["%.1f" % statistics.median(pct[k][n]) if n in pct[k] else "-" for n in names]
        print("%-12s %-9s %-22s" % k + "".join(c.rjust(w) for c in cells))
    print()
    for k in sorted(plans):
        for n in names:
            if n in plans[k]:
                print("%-12s %-9s %-22s %s: %s" % (k + (n, plans[k][n])))


if __name__ == "__main__":
    main()
