#!/usr/bin/env python3
"""plot.py - the joined table and the charts of the GPU benchmark.

    plot.py --table NORMD_CSV [TORCH_CSV]      print op, dtype, shape, normd GB/s, % of ceiling,
                                               speed-up over PyTorch eager and torch.compile
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
    print(f"{'op':12s} {'dtype':9s} {'shape':24s} {'GB/s':>8s} {'%ceil':>6s} {'x eager':>8s} "
          f"{'x compile':>9s}")
    for r in normd:
        t = float(r["time_us"])
        key = (r["op"], r["dtype"], r["shape"])
        e = ti.get(key + ("eager",))
        c = ti.get(key + ("compile",))
        es = f"{e / t:8.2f}" if e else f"{'-':>8s}"
        cs = f"{c / t:9.2f}" if c else f"{'-':>9s}"
        print(f"{r['op']:12s} {r['dtype']:9s} {r['shape']:24s} {float(r['gbps']):8.0f} "
              f"{float(r['pct_ceiling']):5.1f}% {es} {cs}")


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
    else:
        plots(normd, tr, a.outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
