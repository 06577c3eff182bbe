#!/usr/bin/env python3
"""stages.py BEFORE AFTER CONFIG CONNS RPS P50 P99 - one line of stages.sh's table.

BEFORE and AFTER are two /metrics scrapes of one daemon around a wrk run. From the differences of
normd_request_stage_seconds{stage} _sum and _count it prints each stage's mean per request (us),
requests per batch (normd_request_stage_seconds total count over normd_batches_total), and the
part of compute that the device did not time, per request: (sum of compute - sums of h2d, kernel,
d2h) over the requests that ran; the device stages are summed, not averaged, because each is
observed only on the requests that had it (a batch without copies has no h2d). stages.sh appends
comment lines to each scrape: "# proc_ticks N" (the daemon's CPU time), "# proc_minflt N" (its
minor page faults), "# clk_tck N" and "# cpu ..." (/proc/stat's first line); from them come the
daemon's CPU time and page faults per request and the machine's busy cores during the run.
"""
import re
import sys

STAGES = ["queue", "input", "compute", "submit", "h2d", "kernel", "d2h", "output", "wakeup",
          "total"]


def scrape(path):
    vals = {}
    pat = re.compile(r'^(normd_request_stage_seconds_(?:sum|count))\{stage="(\w+)"\} (\S+)$')
    batches = 0.0
    for line in open(path):
        if line.startswith(("# proc_ticks ", "# proc_minflt ", "# clk_tck ")):
            vals[line.split()[1]] = float(line.split()[2])
            continue
        if line.startswith("# cpu "):
            f = [float(x) for x in line.split()[3:]]
            vals["cpu_total"], vals["cpu_idle"] = sum(f[:8]), f[3] + f[4]
            continue
        m = pat.match(line)
        if m:
            vals[(m.group(1).rsplit("_", 1)[1], m.group(2))] = float(m.group(3))
        elif line.startswith("normd_batches_total{"):
            batches += float(line.split()[-1])
    return vals, batches


def main():
    before, after, config, conns, rps, p50, p99 = sys.argv[1:8]
    (v0, b0), (v1, b1) = scrape(before), scrape(after)
    count = {s: v1.get(("count", s), 0) - v0.get(("count", s), 0) for s in STAGES}
    total = {s: v1.get(("sum", s), 0) - v0.get(("sum", s), 0) for s in STAGES}
    mean = {s: total[s] / count[s] * 1e6 if count[s] > 0 else 0.0 for s in STAGES}
    n_total = count["total"]
    per_batch = n_total / (b1 - b0) if b1 > b0 else 0.0
    timed = total["h2d"] + total["kernel"] + total["d2h"]
    unacct = ((total["compute"] - timed) / count["compute"] * 1e6
              if timed > 0 and count["compute"] > 0 else 0.0)
    cols = " ".join(f"{s} {mean[s]:6.1f}" for s in STAGES)
    tck = v1.get("clk_tck", 100.0)
    cpu_us = ((v1.get("proc_ticks", 0) - v0.get("proc_ticks", 0)) / tck * 1e6 / n_total
              if n_total > 0 else 0.0)
    faults = ((v1.get("proc_minflt", 0) - v0.get("proc_minflt", 0)) / n_total
              if n_total > 0 else 0.0)
    ticks = v1.get("cpu_total", 0) - v0.get("cpu_total", 0)
    idle = v1.get("cpu_idle", 0) - v0.get("cpu_idle", 0)
    ncpu = len([1 for line in open("/proc/stat") if re.match(r"cpu\d", line)])
    busy = (ticks - idle) / ticks * ncpu if ticks > 0 else 0.0
    print(f"{config:6s} c={int(conns):<4d} {float(rps):8.0f} req/s p50 {float(p50):6.0f} "
          f"p99 {float(p99):6.0f} | {cols} | unacct {unacct:6.1f} | req/batch {per_batch:5.2f} "
          f"| cpu {cpu_us:6.1f} us/req faults {faults:5.2f}/req busy {busy:4.1f} of {ncpu}")


if __name__ == "__main__":
    main()
