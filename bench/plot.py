#!/usr/bin/env python3
"""plot.py - the joined table and the charts of the GPU benchmark.

    plot.py --table NORMD_CSV [TORCH_CSV]      print op, dtype, shape, normd GB/s, % of ceiling,
                                               speed-up over PyTorch eager and torch.compile
    plot.py --goals NORMD_CSV [TORCH_CSV]      the shapes short of the speed goals (% of the copy
                                               ceiling by class; x torch.compile >= 1.00)
    plot.py NORMD_CSV [TORCH_CSV] [-o DIR]      draw GB/s against cols per op and dtype (rows
                                               suite): normd, both PyTorch variants, the ceiling;
                                               one PNG per op in DIR (default bench/results)

--table needs only the standard library; the charts need matplotlib.
"""
import argparse
import csv
import os
import sys


def read(path):
    if not path or not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def torch_index(rows):
    idx = {}
    for r in rows:
        idx[(r["op"], r["dtype"], r["shape"], r["impl"])] = float(r["time_us"])
    return idx


def table(normd, torch_rows):
    ti = torch_index(torch_rows)
    # torch_bench --impl copy: PyTorch's harness timing x.clone() of the shape, as % of
    # bench_gpu's ceiling (above 100: that harness measures a copy faster than bench_gpu does)
    copies = any(k[3] == "copy" for k in ti)
    print(f"{'op':12s} {'dtype':9s} {'shape':24s} {'GB/s':>8s} {'%ceil':>6s} {'x eager':>8s} "
          f"{'x compile':>9s}" + (f" {'torch copy %ceil':>16s}" if copies else ""))
    for r in normd:
        t = float(r["time_us"])
        key = (r["op"], r["dtype"], r["shape"])
        e = ti.get(key + ("eager",))
        c = ti.get(key + ("compile",))
        es = f"{e / t:8.2f}" if e else f"{'-':>8s}"
        cs = f"{c / t:9.2f}" if c else f"{'-':>9s}"
        tc = ""
        if copies:
            k = ti.get(key + ("copy",))
            tc = f" {100 * float(r['copy_time_us']) / k:15.1f}%" if k else f" {'-':>16s}"
        print(f"{r['op']:12s} {r['dtype']:9s} {r['shape']:24s} {float(r['gbps']):8.0f} "
              f"{float(r['pct_ceiling']):5.1f}% {es} {cs}{tc}")


# The speed goals: % of the same-run copy ceiling by shape class, and x torch.compile.
GOALS = {"rows <= 32768 columns": 95.0, "rows > 32768 columns": 90.0,
         "softmax / log_softmax, not the last axis": 80.0, "prelu": 95.0}


def goal_class(r):
    if r["op"].startswith("prelu"):
        return "prelu"
    if r["suite"] == "axis":
        return "softmax / log_softmax, not the last axis"
    return "rows <= 32768 columns" if int(r["cols"]) <= 32768 else "rows > 32768 columns"


def goals(normd, torch_rows):
    ti = torch_index(torch_rows)
    for cls, goal in GOALS.items():
        rows = [r for r in normd if goal_class(r) == cls]
        short = [r for r in rows if float(r["pct_ceiling"]) < goal]
        print(f"{cls}: {len(rows) - len(short)} of {len(rows)} at >= {goal:g}% of the ceiling")
        for r in short:
            print(f"    {r['op']:12s} {r['dtype']:9s} {r['shape']:24s} {float(r['pct_ceiling']):5.1f}%")
    xs = []
    for r in normd:
        c = ti.get((r["op"], r["dtype"], r["shape"], "compile"))
        if c:
            xs.append((c / float(r["time_us"]), r))
    below = sorted(((x, r) for x, r in xs if round(x, 2) < 1.0), key=lambda e: e[0])
    print(f"x torch.compile >= 1.00 (as the table prints it, two decimals): "
          f"{len(xs) - len(below)} of {len(xs)} measured")
    for x, r in below:
        print(f"    {r['op']:12s} {r['dtype']:9s} {r['shape']:24s} {x:5.2f} "
              f"({float(r['pct_ceiling']):.1f}% of the ceiling)")


def plots(normd, torch_rows, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ti = torch_index(torch_rows)
    dev = normd[0]["device"] if normd else ""
    ops = [o for o in ("layernorm", "rmsnorm", "softmax", "log_softmax")
           if any(r["op"] == o and r["suite"] == "rows" for r in normd)]
    dtypes = ["float32", "float16", "bfloat16"]
    written = []
    for op in ops:
        fig, axs = plt.subplots(1, 3, figsize=(18, 5), sharey=True)
        for ax, dt in zip(axs, dtypes):
            rs = [r for r in normd if r["op"] == op and r["dtype"] == dt and r["suite"] == "rows"]
            rs.sort(key=lambda r: int(r["cols"]))
            if not rs:
                continue
            x = [int(r["cols"]) for r in rs]
            moved = [float(r["bytes"]) for r in rs]
            ax.plot(x, [float(r["gbps"]) for r in rs], "o-", label="normd", lw=2)
            ax.plot(x, [float(r["ceiling_gbps"]) for r in rs], "k--", label="memory ceiling")
            for impl, style in (("eager", "s-"), ("compile", "^-")):
                pts = [(xi, m / ti[(op, dt, r["shape"], impl)] / 1e3)
                       for xi, m, r in zip(x, moved, rs) if (op, dt, r["shape"], impl) in ti]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                            label=f"PyTorch {impl}" if impl == "eager" else "torch.compile")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op} {dt}")
            ax.set_xlabel("cols (rows = 49152; 128 Mi elements for >= 65536)")
            ax.grid(True, alpha=0.3)
        axs[0].set_ylabel("effective GB/s (x read + y written)")
        axs[0].legend(loc="lower right")
        fig.suptitle(f"normd {op} vs PyTorch on {dev}")
        fig.tight_layout()
        path = os.path.join(outdir, f"gpu_{op}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for p in written:
        print(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--goals", action="store_true")
    ap.add_argument("normd")
    ap.add_argument("torch", nargs="?")
    ap.add_argument("-o", "--outdir", default="bench/results")
    a = ap.parse_args()
    normd, tr = read(a.normd), read(a.torch)
    if not normd:
        print(f"no rows in {a.normd}", file=sys.stderr)
        return 1
    if a.table:
        table(normd, tr)
    elif a.goals:
        goals(normd, tr)
    else:
        plots(normd, tr, a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
