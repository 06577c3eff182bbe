#!/usr/bin/env python3
"""latency.py - the helper of latency.sh: waits for a fresh daemon, then reports and plots.

  latency.py ready LOG PID TIMEOUT_S
      Waits until normd (process PID, writing LOG) says it is listening and /healthz answers 200,
      then prints where it listens: "tcp PORT" or "unix PATH". Exits 1 if the daemon exits or
      TIMEOUT_S passes first.
  latency.py report CSV CURVES PNG
      Prints the summary table (per configuration and connection count: medians over repeats,
      the worst p99.9 and max over repeats, errors), then one PASS/MISS line per target and repeat
      (below), and draws PNG from CURVES: latency by percentile, one panel per connection count,
      one colour per configuration (a thin line per repeat, a thick one for their median). Without
      matplotlib the plot is skipped with a message.
  latency.py plot CSV CURVES PNG
      Only the plot (e.g. on another machine, from the files a run wrote).

Targets (issue 11), checked per repeat for every configuration that computes (all but null):
  - at 1, 4 and 16 connections: p99.9 <= 2 ms and max <= 5 ms;
  - at 1 connection: p50 <= 1.3x null's p50 in the same repeat;
  - at 16, 64 and 256 connections: req/s >= 90% of null's in the same repeat.
The null baseline of "X-unix" (and of "unix", cuda over the UNIX socket) is "null-unix" when that
was measured too, otherwise "null" over TCP, which the line then says. A run with non-2xx answers
or socket errors misses every target it is checked for.
"""
import csv
import http.client
import os
import re
import socket
import statistics
import sys
import time
from collections import defaultdict

TAIL_CONNS = (1, 4, 16)
P999_LIMIT_US = 2000.0
MAX_LIMIT_US = 5000.0
P50_RATIO_LIMIT = 1.3
RPS_CONNS = (16, 64, 256)
RPS_RATIO_LIMIT = 0.90

LISTENING = re.compile(r"^normd .*listening on (?:http://127\.0\.0\.1:(\d+)|unix:(\S+))", re.M)


# ---- ready: wait for a fresh daemon ----

class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def healthz(kind, where):
    conn = (UnixHTTPConnection(where, 2) if kind == "unix"
            else http.client.HTTPConnection("127.0.0.1", int(where), timeout=2))
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by the shell) counts as gone
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def cmd_ready(log, pid, timeout_s):
    deadline = time.monotonic() + float(timeout_s)
    pid = int(pid)
    where = None
    while time.monotonic() < deadline:
        if where is None:
            try:
                m = LISTENING.search(open(log, errors="replace").read())
            except OSError:
                m = None
            if m:
                where = ("tcp", m.group(1)) if m.group(1) else ("unix", m.group(2))
        if where is not None and healthz(*where) == 200:
            print(*where)
            return 0
        if not alive(pid):
            break
        time.sleep(0.005)
    print("latency.py: normd (pid %d) %s" % (pid, "exited" if not alive(pid) else
          "not ready after %s s" % timeout_s), file=sys.stderr)
    return 1


# ---- report: summary table, targets, plot ----

def load(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def errors(r):
    return int(r["non2xx"] or 0) + int(r["socket_errors"] or 0)


def summary(rows, configs, conns):
    print("%-10s %5s %10s %8s %8s %8s %8s | %9s %9s %6s   (us; medians over repeats | worst of "
          "repeats)" % ("config", "conns", "req/s", "p50", "p90", "p99", "p99.9", "p99.9 max",
                        "max", "errors"))
    for cfg in configs:
        for c in conns:
            rs = [r for r in rows if r["config"] == cfg and int(r["connections"]) == c]
            if not rs:
                continue
            med = {k: statistics.median(float(r[k]) for r in rs)
                   for k in ("rps", "p50_us", "p90_us", "p99_us", "p999_us")}
            print("%-10s %5d %10.0f %8.0f %8.0f %8.0f %8.0f | %9.0f %9.0f %6d" % (
                cfg, c, med["rps"], med["p50_us"], med["p90_us"], med["p99_us"], med["p999_us"],
                max(float(r["p999_us"]) for r in rs), max(float(r["max_us"]) for r in rs),
                sum(errors(r) for r in rs)))


def baseline_of(cfg, configs):
    """The null configuration cfg is compared with, or None (cfg is null, or null not run)."""
    if cfg.startswith("null"):
        return None
    if cfg == "unix" or cfg.endswith("-unix"):
        if "null-unix" in configs:
            return "null-unix"
    return "null" if "null" in configs else None


def targets(rows, configs):
    """Prints the PASS/MISS lines; returns (passed, missed)."""
    run = {(r["config"], int(r["connections"]), int(r["repeat"])): r for r in rows}
    repeats = sorted({int(r["repeat"]) for r in rows})
    count = {"PASS": 0, "MISS": 0}

    def line(ok, r, what):
        e = errors(r)
        verdict = "PASS" if ok and e == 0 else "MISS"
        count[verdict] += 1
        print("%s  r%s %-10s c=%-4s %s%s" % (verdict, r["repeat"], r["config"], r["connections"],
                                             what, "  [%d errors]" % e if e else ""))

    for rep in repeats:
        for cfg in configs:
            base = baseline_of(cfg, configs)
            if cfg.startswith("null"):
                continue
            for c in TAIL_CONNS:
                r = run.get((cfg, c, rep))
                if r:
                    p999, mx = float(r["p999_us"]), float(r["max_us"])
                    line(p999 <= P999_LIMIT_US, r, "p99.9 %.3f ms (target <= %g ms)"
                         % (p999 / 1e3, P999_LIMIT_US / 1e3))
                    line(mx <= MAX_LIMIT_US, r, "max   %.3f ms (target <= %g ms)"
                         % (mx / 1e3, MAX_LIMIT_US / 1e3))
            if base is None:
                print("      r%d %-10s no null configuration in this run: ratios not checked"
                      % (rep, cfg))
                continue
            r, b = run.get((cfg, 1, rep)), run.get((base, 1, rep))
            if r and b:
                ratio = float(r["p50_us"]) / float(b["p50_us"]) if float(b["p50_us"]) else 0.0
                line(0 < ratio <= P50_RATIO_LIMIT and errors(b) == 0, r,
                     "p50 %.0f us = %.2fx %s's %.0f us (target <= %.1fx)"
                     % (float(r["p50_us"]), ratio, base, float(b["p50_us"]), P50_RATIO_LIMIT))
            for c in RPS_CONNS:
                r, b = run.get((cfg, c, rep)), run.get((base, c, rep))
                if r and b:
                    ratio = float(r["rps"]) / float(b["rps"]) if float(b["rps"]) else 0.0
                    line(ratio >= RPS_RATIO_LIMIT and errors(b) == 0, r,
                         "req/s %.0f = %.2fx %s's %.0f (target >= %.2fx)"
                         % (float(r["rps"]), ratio, base, float(b["rps"]), RPS_RATIO_LIMIT))
    print("targets: %d PASS, %d MISS" % (count["PASS"], count["MISS"]))
    return count["PASS"], count["MISS"]


def plot(rows, curves, configs, conns, dst):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        print("latency.py: matplotlib not found (Debian: python3-matplotlib): no plot")
        return
    requests = {(r["config"], int(r["connections"]), int(r["repeat"])): int(r["requests"])
                for r in rows}
    series = defaultdict(list)  # (config, conns, repeat) -> [(percentile, latency_us)]
    for r in curves:
        series[r["config"], int(r["connections"]), int(r["repeat"])].append(
            (float(r["percentile"]), float(r["latency_us"])))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {cfg: colors[i % len(colors)] for i, cfg in enumerate(configs)}

    ncol = min(len(conns), 3)
    nrow = (len(conns) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.5 * ncol, 4.3 * nrow), squeeze=False)
    decades = 5
    for i, c in enumerate(conns):
        ax = axes[i // ncol][i % ncol]
        for cfg in configs:
            reps = sorted(rep for (k, cc, rep) in series if k == cfg and cc == c)
            per_rep = []
            for rep in reps:
                n = requests.get((cfg, c, rep), 0)
                if n < 1:
                    continue
                # x = 1 / (1 - p): beyond 1 / (1 - p) = n requests a percentile says nothing
                # more than the maximum, which is drawn at x = n.
                pts = [(1.0 / (1.0 - p / 100.0), v) for p, v in series[cfg, c, rep]
                       if p < 100 and 1.0 / (1.0 - p / 100.0) <= n]
                pts += [(float(n), v) for p, v in series[cfg, c, rep] if p == 100]
                per_rep.append(pts)
                ax.plot([x for x, _ in pts], [v / 1e3 for _, v in pts], "-", lw=0.8, alpha=0.4,
                        color=color[cfg])
            if not per_rep:
                continue
            # the median over repeats, at the grid points every repeat has (and their maxima)
            common = min(len(p) - 1 for p in per_rep)
            xs = [per_rep[0][k][0] for k in range(common)]
            ys = [statistics.median(p[k][1] for p in per_rep) / 1e3 for k in range(common)]
            xs.append(statistics.median(p[-1][0] for p in per_rep))
            ys.append(statistics.median(p[-1][1] for p in per_rep) / 1e3)
            ax.plot(xs, ys, "-", lw=2, color=color[cfg],
                    label="%s (%d repeat%s)" % (cfg, len(per_rep), "s" if len(per_rep) > 1 else ""))
        if c in TAIL_CONNS:
            ax.hlines(P999_LIMIT_US / 1e3, 10 ** 3, 10 ** decades, colors="black",
                      linestyles="--", lw=1, label="p99.9 target (from 99.9%)")
            ax.axhline(MAX_LIMIT_US / 1e3, color="black", ls=":", lw=1, label="max target")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1, 10 ** decades)
        ax.xaxis.set_major_locator(FixedLocator([10 ** k for k in range(decades + 1)]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"][:decades + 1])
        ax.set_xlabel("percentile (the maximum drawn at 1 - 1/requests)")
        ax.set_ylabel("latency (ms)")
        ax.set_title("%d connection%s" % (c, "s" if c > 1 else ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for j in range(len(conns), nrow * ncol):
        axes[j // ncol][j % ncol].axis("off")
    r0 = rows[0]
    fig.suptitle("normd latency by percentile, a fresh daemon per repeat measured from ready: "
                 "%s %s %s, %ss per run, device: %s" % (r0["op"], r0["dtype"], r0["shape"],
                                                r0["duration_s"], r0["device"]))
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print("wrote", dst)


def cmd_report(csv_path, curves_path, png, table=True):
    rows = load(csv_path)
    if not rows:
        print("latency.py: %s: no rows" % csv_path, file=sys.stderr)
        return 1
    configs = list(dict.fromkeys(r["config"] for r in rows))
    conns = sorted({int(r["connections"]) for r in rows})
    if table:
        summary(rows, configs, conns)
        print()
        targets(rows, configs)
        print()
    curves = load(curves_path) if os.path.exists(curves_path) else []
    plot(rows, curves, configs, conns, png)
    return 0


def main(argv):
    if len(argv) == 4 and argv[0] == "ready":
        return cmd_ready(*argv[1:])
    if len(argv) == 4 and argv[0] in ("report", "plot"):
        return cmd_report(*argv[1:], table=argv[0] == "report")
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
