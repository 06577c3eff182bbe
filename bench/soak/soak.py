#!/usr/bin/env python3
"""soak.py - normd's CPU backend under ten minutes of mixed load with clients that go away.

  python3 bench/soak/soak.py [--normd build/normd] [--minutes 10] [--conns 256]
                             [--warmup 60] [--results bench/results] [--label NAME]

Load: wrk (bench/soak/mixed.lua) at --conns keep-alive connections: five operators, three
dtypes, nine shapes from 1 x 4096 to 64 x 4096 float32, raw binary and JSON. Beside it, threads
of this script:
  checkers  send requests (random op, dtype float32, shape, some JSON) and compare every answer
            with a float64 reference (tolerance 1e-4 + 1e-4 |ref|); one mismatch fails the run
  aborters  leave at random points: with the body half sent; right after the whole body (the
            request then waits in the queue or runs without them); after reading the head and a
            little of a 4 MiB answer; each closes with a reset
The daemon's RSS (VmRSS) is sampled ten times a second, its /metrics (answers by code) every 5 s.

RSS under load swings with what is in flight (large bodies and answers are mmap'ed and given
back as they are freed), so growth is judged where it is not noise: with the daemon idle (no
request open, a tick given to hand memory back), once after the warm-up (its load stops for
that) and once at the end. Fails (exit 1) when that idle RSS grew by more than 10%, when any
answer is wrong (checkers, or wrk's length check), or when the daemon does not exit 0 on
SIGTERM. Prints the RSS under load per minute (p10 / median / p90) beside it. Writes
RESULTS/LABEL.csv (RSS and answers/s, ten rows a second) and RESULTS/LABEL.png (matplotlib, when
it imports), and a summary on stdout.
Needs wrk (Debian: wrk) and python3; matplotlib (python3-matplotlib) for the chart.
"""
import argparse
import csv
import json
import math
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


# ---- the daemon ----

def start_daemon(normd, extra):
    p = subprocess.Popen([normd, "--listen", "127.0.0.1:0", "--backend", "cpu"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        sys.exit(f"soak: normd did not start: {line!r} {p.stderr.read()!r}")
    # keep draining its output so that it never blocks on a full pipe
    for stream in (p.stdout, p.stderr):
        threading.Thread(target=lambda s=stream: [None for _ in s], daemon=True).start()
    return p, int(m.group(1))


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def scrape(port):
    """normd_requests_total summed over ops, by code."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    codes = {}
    for m in re.finditer(r'^normd_requests_total\{op="[^"]*",code="([^"]+)"\} (\S+)$', text,
                         re.M):
        codes[m.group(1)] = codes.get(m.group(1), 0) + float(m.group(2))
    return codes


# ---- float64 references ----

def ref(op, x, shape, axis, alpha):
    n = len(x)
    y = [0.0] * n
    if op in ("layernorm", "rmsnorm"):
        cols = shape[-1]
        for r in range(n // cols):
            row = x[r * cols:(r + 1) * cols]
            if op == "layernorm":
                mean = sum(row) / cols
                var = sum((v - mean) ** 2 for v in row) / cols
                rstd = 1.0 / math.sqrt(var + 1e-5)
                y[r * cols:(r + 1) * cols] = [(v - mean) * rstd for v in row]
            else:
                rstd = 1.0 / math.sqrt(sum(v * v for v in row) / cols + 1e-6)
                y[r * cols:(r + 1) * cols] = [v * rstd for v in row]
        return y
    if op in ("softmax", "log_softmax"):
        ax = axis % len(shape)
        outer = math.prod(shape[:ax])
        mid = shape[ax]
        inner = math.prod(shape[ax + 1:])
        for o in range(outer):
            for i in range(inner):
                idx = [(o * mid + k) * inner + i for k in range(mid)]
                mx = max(x[j] for j in idx)
                s = sum(math.exp(x[j] - mx) for j in idx)
                for j in idx:
                    y[j] = (x[j] - mx - math.log(s)) if op == "log_softmax" else \
                        math.exp(x[j] - mx) / s
        return y
    # prelu, one alpha per channel (dim 1)
    inner = math.prod(shape[2:])
    for j, v in enumerate(x):
        c = (j // inner) % shape[1]
        y[j] = v if v >= 0 else alpha[c] * v
    return y


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


CHECK_CASES = [("layernorm", [4, 256]), ("rmsnorm", [8, 128]), ("softmax", [8, 100]),
               ("log_softmax", [2, 50, 3]), ("prelu", [2, 4, 25])]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.checked = 0
        self.wrong = 0
        self.first_wrong = ""
        self.refused = 0
        self.aborts = {"mid-body": 0, "after-body": 0, "mid-answer": 0}
        self.abort_errors = 0


def http_request(port, method, path, headers, body, timeout=60):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: normd\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"Content-Length: {len(body)}\r\n\r\n"
        s.sendall(head.encode() + body)
        data = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    return code, payload


def checker(port, stop, st, seed):
    rnd = random.Random(seed)
    while not stop.is_set():
        op, shape = rnd.choice(CHECK_CASES)
        n = math.prod(shape)
        x = [f32(rnd.gauss(0, 2)) for _ in range(n)]
        axis = rnd.choice([-1, 1]) if op in ("softmax", "log_softmax") else -1
        alpha = [f32(rnd.uniform(0, 0.5)) for _ in range(shape[1])] if op == "prelu" else None
        use_json = rnd.random() < 0.25
        if use_json:
            req = {"shape": shape, "data": x}
            if axis != -1:
                req["axis"] = axis
            if alpha:
                req["alpha"] = alpha
            body = json.dumps(req).encode()
            headers = {"Content-Type": "application/json"}
            path = f"/v1/{op}"
        else:
            body = struct.pack(f"<{n}f", *x) + (struct.pack(f"<{len(alpha)}f", *alpha)
                                                if alpha else b"")
            headers = {"Content-Type": "application/octet-stream"}
            path = f"/v1/{op}?shape={','.join(map(str, shape))}"
            if axis != -1:
                path += f"&axis={axis}"
            if alpha:
                path += "&alpha=channel"
        try:
            code, payload = http_request(port, "POST", path, headers, body)
        except OSError:
            with st.lock:
                st.refused += 1
            continue
        if code == 503:  # busy (queue or byte budget): a fair answer under overload
            time.sleep(0.01)
            continue
        want = ref(op, x, shape, axis, alpha)
        why = ""
        if code != 200:
            why = f"HTTP {code}: {payload[:200]!r}"
        else:
            got = json.loads(payload)["data"] if use_json else \
                list(struct.unpack(f"<{n}f", payload)) if len(payload) == 4 * n else None
            if got is None:
                why = f"{len(payload)} bytes for {n} float32"
            else:
                if use_json:  # nested like the shape: flatten
                    while got and isinstance(got[0], list):
                        got = [v for row in got for v in row]
                for i, (g, w) in enumerate(zip(got, want)):
                    if g is None or abs(g - w) > 1e-4 + 1e-4 * abs(w):
                        why = f"element {i}: {g} against {w}"
                        break
        with st.lock:
            st.checked += 1
            if why:
                st.wrong += 1
                if not st.first_wrong:
                    st.first_wrong = f"{op} {shape} axis={axis} json={use_json}: {why}"


def aborter(port, stop, st, seed):
    rnd = random.Random(seed)
    small = struct.pack("<16384f", *[rnd.gauss(0, 1) for _ in range(16384)])  # 64 x 256
    big = bytes(4 << 20)  # 1024 x 1024 float32 zeros
    while not stop.is_set():
        kind = rnd.choice(["mid-body", "after-body", "mid-answer"])
        body, path = (big, "/v1/layernorm?shape=1024,1024") if kind == "mid-answer" else \
            (small, "/v1/softmax?shape=64,256")
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(30)
            s.connect(("127.0.0.1", port))
            head = (f"POST {path} HTTP/1.1\r\nHost: normd\r\nContent-Type: "
                    f"application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            if kind == "mid-body":
                s.sendall(head + body[:rnd.randrange(1, len(body))])
            else:
                s.sendall(head + body)
            if kind == "mid-answer":
                got = b""
                while b"\r\n\r\n" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            with st.lock:
                st.aborts[kind] += 1
        except OSError:
            with st.lock:
                st.abort_errors += 1
        time.sleep(rnd.uniform(0.01, 0.05))


# ---- the run ----

def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


class Sampler(threading.Thread):
    """The daemon's RSS ten times a second, its answers by code every 5 s."""

    def __init__(self, pid, port, t0):
        super().__init__(daemon=True)
        self.pid, self.port, self.t0 = pid, port, t0
        self.rows = []  # t, rss, answers/s, 200/s
        self.stop = threading.Event()

    def run(self):
        last_codes, last_t = scrape(self.port), time.monotonic()
        rps = ok_ps = 0.0
        next_scrape = last_t + 5
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_scrape:
                codes = scrape(self.port)
                now = time.monotonic()
                total = sum(codes.values()) - sum(last_codes.values())
                ok = codes.get("200", 0) - last_codes.get("200", 0)
                rps, ok_ps = total / (now - last_t), ok / (now - last_t)
                last_codes, last_t, next_scrape = codes, now, now + 5
            self.rows.append((round(now - self.t0, 2), rss_mib(self.pid), rps, ok_ps))
            time.sleep(0.1)


def idle_rss(pid, port):
    """The RSS once no request and no connection is open (but the /metrics request asking) and
    the daemon has had a tick to give memory back: the lowest of five samples over 0.5 s."""
    t_end = time.monotonic() + 120
    while time.monotonic() < t_end:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        req = re.search(rb"^normd_requests_open (\d+)", text, re.M)
        conn = re.search(rb"^normd_connections_open (\d+)", text, re.M)
        if req and conn and int(req.group(1)) <= 1 and int(conn.group(1)) <= 1:
            break
        time.sleep(0.05)
    time.sleep(1.0)
    samples = []
    for _ in range(5):
        samples.append(rss_mib(pid))
        time.sleep(0.1)
    return min(samples)


def run_phase(a, port, seconds, st, seed):
    """wrk for `seconds` with the checkers and aborters beside it; returns wrk's output."""
    wrk = subprocess.Popen(["wrk", f"-t{a.wrk_threads}", f"-c{a.conns}", f"-d{int(seconds)}s",
                            "--timeout", "30s", "-s", os.path.join(HERE, "mixed.lua"),
                            f"http://127.0.0.1:{port}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()
    workers = [threading.Thread(target=checker, args=(port, stop, st, seed + i), daemon=True)
               for i in range(a.checkers)]
    workers += [threading.Thread(target=aborter, args=(port, stop, st, seed + 100 + i),
                                 daemon=True) for i in range(a.aborters)]
    for w in workers:
        w.start()
    out = wrk.communicate(timeout=seconds + 120)[0]
    stop.set()
    for w in workers:
        w.join(timeout=60)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--normd", default="build/normd")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=60, help="seconds")
    ap.add_argument("--conns", type=int, default=256)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--checkers", type=int, default=4)
    ap.add_argument("--aborters", type=int, default=4)
    ap.add_argument("--results", default="bench/results")
    ap.add_argument("--label", default="soak")
    ap.add_argument("--daemon-args", default="", help="more normd flags")
    a = ap.parse_args()
    duration = a.minutes * 60
    os.makedirs(a.results, exist_ok=True)

    daemon, port = start_daemon(a.normd, a.daemon_args.split())
    print(f"soak: normd pid {daemon.pid} on port {port}, {a.minutes:g} min ({a.warmup:g} s "
          f"warm-up), wrk at {a.conns} connections, {a.checkers} checkers, {a.aborters} "
          f"aborters", flush=True)
    t0 = time.monotonic()
    sampler = Sampler(daemon.pid, port, t0)
    sampler.start()
    st = Stats()
    warm_out = run_phase(a, port, a.warmup, st, 100)
    rss_idle_warm = idle_rss(daemon.pid, port)
    t_main = time.monotonic() - t0
    print(f"soak: warm-up done, idle RSS {rss_idle_warm:.1f} MiB; the main run starts at "
          f"{t_main:.0f} s", flush=True)
    main_out = run_phase(a, port, duration - a.warmup, st, 1000)
    t_end = time.monotonic() - t0
    rss_idle_end = idle_rss(daemon.pid, port)
    sampler.stop.set()
    sampler.join()
    rows = sampler.rows
    codes = scrape(port)
    daemon.send_signal(15)
    try:
        exit_code = daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        exit_code = "killed after 60 s"

    # ---- results ----
    csv_path = os.path.join(a.results, f"{a.label}.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rss_mib", "answers_per_s", "ok_per_s"])
        w.writerows(rows)
    wrk_kv = {}
    for out in (warm_out, main_out):
        m = re.search(r"SOAKWRK (.*)", out)
        if not m:
            continue
        for kv in m.group(1).split():
            k, v = kv.split("=", 1)
            wrk_kv.setdefault(k, []).append(v)
    wrk_requests = sum(int(v) for v in wrk_kv.get("requests", []))
    wrk_bad = sum(int(v) for v in wrk_kv.get("bad", []))
    wrk_sock = sum(int(v) for v in wrk_kv.get("socket_errors", []))
    loaded = [r for r in rows if t_main <= r[0] < t_end]
    minutes = []
    for k in range(int((t_end - t_main) // 60)):
        win = [r[1] for r in loaded if t_main + 60 * k <= r[0] < t_main + 60 * (k + 1)]
        minutes.append((pct(win, 0.1), median(win), pct(win, 0.9)))
    growth = rss_idle_end / rss_idle_warm - 1
    total = sum(codes.values())
    non2xx = {c: int(n) for c, n in sorted(codes.items()) if c != "200" and n}
    main_rps = [float(v) for v in wrk_kv.get("rps", [])]
    print(f"\nsoak: {a.minutes:g} min against normd (cpu backend) at {a.conns} wrk connections "
          f"+ {a.checkers} checkers + {a.aborters} aborters")
    print(f"  answers        {int(total)} in all ({total / t_end:.1f}/s over the run); wrk: "
          f"{wrk_requests} requests, {main_rps[-1] if main_rps else float('nan'):.1f}/s in the "
          f"main run, p50 {float(wrk_kv.get('p50_us', ['nan'])[-1]) / 1e3:.1f} ms, p99 "
          f"{float(wrk_kv.get('p99_us', ['nan'])[-1]) / 1e3:.1f} ms, socket errors {wrk_sock}")
    print(f"  non-2xx        {non2xx if non2xx else 'none'} (daemon, all clients)")
    print(f"  checked        {st.checked} answers against the float64 reference, {st.wrong} wrong"
          f"{': ' + st.first_wrong if st.wrong else ''}; wrk length checks failed: {wrk_bad}")
    print(f"  aborted        {st.aborts} ({st.abort_errors} attempts failed to connect/send)")
    print(f"  idle RSS       {rss_idle_warm:.1f} MiB after the warm-up, {rss_idle_end:.1f} at the "
          f"end ({growth * 100:+.1f}%)")
    print("  RSS under load (MiB, per minute of the main run: p10 / median / p90):")
    for k, (lo, mid, hi) in enumerate(minutes):
        print(f"    minute {k + 1:2d}   {lo:6.1f} / {mid:6.1f} / {hi:6.1f}")
    print(f"  peak           {max(r[1] for r in rows):.1f} MiB; samples in {csv_path}")
    print(f"  exit           normd exited {exit_code} on SIGTERM")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
        ts = [r[0] / 60 for r in rows]
        ax[0].plot(ts, [r[1] for r in rows], color="tab:blue", lw=0.4, alpha=0.6,
                   label="RSS (10 samples/s)")
        if minutes:
            mx = [(t_main + 60 * k + 30) / 60 for k in range(len(minutes))]
            ax[0].plot(mx, [m[1] for m in minutes], "o-", color="navy", label="median per minute")
        ax[0].plot([t_main / 60, t_end / 60], [rss_idle_warm, rss_idle_end], "s",
                   color="tab:red", label="idle: after warm-up, at the end")
        ax[0].axhline(rss_idle_warm * 1.1, color="tab:red", ls="--", lw=0.8,
                      label="idle after warm-up +10%")
        ax[0].axvline(t_main / 60, color="gray", ls=":")
        ax[0].set_ylabel("normd RSS (MiB)")
        ax[0].set_ylim(bottom=0)
        ax[0].legend(loc="upper right", fontsize=8)
        ax[1].plot(ts, [r[2] for r in rows], color="tab:green", label="all answers")
        ax[1].plot(ts, [r[3] for r in rows], color="tab:olive", ls="--", label="200")
        ax[1].axvline(t_main / 60, color="gray", ls=":")
        ax[1].set_ylabel("answers / s (5 s means)")
        ax[1].set_xlabel("minutes")
        ax[1].set_ylim(bottom=0)
        ax[1].legend(loc="lower right", fontsize=8)
        fig.suptitle(f"normd soak, cpu backend: {a.conns} wrk connections (mixed ops), "
                     f"{a.checkers} checking and {a.aborters} aborting clients")
        fig.tight_layout()
        png = os.path.join(a.results, f"{a.label}.png")
        fig.savefig(png, dpi=110)
        print(f"  chart          {png}")
    except ImportError:
        print("  chart          not drawn: matplotlib does not import (python3-matplotlib)")
    failed = []
    if st.wrong or wrk_bad:
        failed.append("wrong answers")
    if not growth <= 0.10:
        failed.append(f"idle RSS grew {growth * 100:.1f}% after the warm-up")
    if exit_code != 0:
        failed.append(f"normd exited {exit_code}")
    if len(wrk_kv.get("requests", [])) != 2:
        failed.append("no wrk summary: " + (warm_out + main_out)[-500:])
    print("soak: " + ("FAILED: " + "; ".join(failed) if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
