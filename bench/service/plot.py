#!/usr/bin/env python3
"""plot.py - the service benchmark's chart from its CSV (bench/service/run.sh).

One column per workload; top row requests/s, bottom row p50 (solid) and p99 (dashed) latency,
both against wrk connections, one line per configuration.

  python3 bench/service/plot.py [-o PNG] [CSV ...]
      (defaults: bench/results/service.csv, PNG next to the first CSV). Several CSVs of one
      session (e.g. a variant run with LABEL_SUFFIX) are drawn together.
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"cuda-batch": "tab:green", "cuda-nobatch": "tab:red", "null": "tab:gray",
         "cpu-batch": "tab:blue", "cpu-nobatch": "tab:orange",
         "cuda-batch+spin100": "tab:olive", "cuda-nobatch+spin100": "tab:pink",
         "cuda-batch+streams8": "tab:cyan"}


def main():
    args = sys.argv[1:]
    dst = None
    if len(args) >= 2 and args[0] == "-o":
        dst, args = args[1], args[2:]
    srcs = args or ["bench/results/service.csv"]
    dst = dst or srcs[0].rsplit(".", 1)[0] + ".png"
    rows = [r for src in srcs for r in csv.DictReader(open(src))]
    if not rows:
        sys.exit("plot.py: %s: no rows" % " ".join(srcs))
    series = defaultdict(list)  # (workload, config) -> rows
    workloads, configs = [], []
    for r in rows:
        wl = "%s %s %s" % (r["op"], r["dtype"], r["shape"])
        if wl not in workloads:
            workloads.append(wl)
        if r["config"] not in configs:
            configs.append(r["config"])
        series[wl, r["config"]].append(r)

    fig, axes = plt.subplots(2, len(workloads), figsize=(6.5 * len(workloads), 8), squeeze=False)
    for col, wl in enumerate(workloads):
        top, bottom = axes[0][col], axes[1][col]
        for cfg in configs:
            rs = sorted(series.get((wl, cfg), []), key=lambda r: int(r["connections"]))
            if not rs:
                continue
            c = [int(r["connections"]) for r in rs]
            color = STYLE.get(cfg)
            top.plot(c, [float(r["rps"]) for r in rs], "o-", color=color, label=cfg)
            for r in rs:
                if float(r["mean_batch_rows"]) > 0 and cfg != "null":
                    top.annotate("%.0f" % float(r["mean_batch_rows"]),
                                 (int(r["connections"]), float(r["rps"])),
                                 textcoords="offset points", xytext=(4, -12), fontsize=7,
                                 color=color)
            bottom.plot(c, [float(r["p50_ms"]) for r in rs], "o-", color=color,
                        label=cfg + " p50")
            bottom.plot(c, [float(r["p99_ms"]) for r in rs], "s--", color=color,
                        label=cfg + " p99", alpha=0.7)
        top.set_title(wl + "  (labels: mean batch rows)")
        top.set_ylabel("requests/s")
        bottom.set_ylabel("latency (ms)")
        bottom.set_yscale("log")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("wrk connections")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        top.set_ylim(bottom=0)
    device = rows[0].get("device", "")
    fig.suptitle("normd service benchmark over loopback (%s, %ss per point)"
                 % (device, rows[0]["duration_s"]))
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print("wrote", dst)


if __name__ == "__main__":
    main()
