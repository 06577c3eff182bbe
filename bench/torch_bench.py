#!/usr/bin/env python3
"""torch_bench.py - PyTorch on the shapes of bench_gpu.cu, eager and torch.compile.

Each measurement captures N calls of the functional op into a CUDA graph (so PyTorch's launch
overhead does not count against it), rotating among k input sets so the working set is well past
L2, replays it for at least --warm-ms (default 50, as bench_gpu) to warm up and takes the median
of several replays. torch.compile is reset between shapes (torch._dynamo.reset()), or after 8
recompiles it would silently fall back to eager.

    torch_bench.py [--suite rows|axis|prelu|all|widths] [--op NAME] [--dtype NAME] [--csv PATH]
                   [--impl eager,compile[,copy]] [--quick] [--budget-s SECONDS] [--nvtx-once]

Writes CSV (default bench/results/torch.csv): suite, op, dtype, shape, impl, time_us, gbps.
--nvtx-once times nothing: each selected op runs three times, then once more inside an NVTX range
named "prof", for a profiler to take that launch alone (bench/ncu_pair.sh).
The shape list must match make_shapes() in bench_gpu.cu.
"""
import argparse
import csv
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

WORKING_SET = 512 * 2**20
GRAPH_BYTES = 2 * 2**30
REPLAYS = 9
WARM_MS = 50.0  # --warm-ms
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def make_shapes(quick, extra=()):
    v = []
    # powers of two, and widths of models (as bench_gpu's list)
    cols = [32, 64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536, 1600, 2048, 4096, 5120, 8192,
            16384, 32768]
    if quick:
        cols = [32, 256, 1024, 4096, 32768]
    cols += [c for c in extra if 1 <= c <= 32768 and c not in cols]  # as bench_gpu --cols
    for op in ("layernorm", "rmsnorm", "softmax", "log_softmax"):
        for c in cols:
            v.append(("rows", op, f"49152x{c}", (49152, c), -1))
        for c in (65536, 262144, 1048576):
            r = (128 << 20) // c
            v.append(("rows", op, f"{r}x{c}", (r, c), -1))
    axes = [((128, 128, 16, 16), 0), ((512, 896, 4, 12), 1), ((32, 1000, 56, 56), 1),
            ((8, 32768, 64), 1), ((65536, 8, 128), 1)]
    for op in ("softmax", "log_softmax"):
        for s, ax in axes:
            v.append(("axis", op, "(" + ",".join(map(str, s)) + f")ax{ax}", s, ax))
    for s in ((96, 64, 112, 112), (96, 128, 56, 56), (96, 256, 28, 28), (96, 512, 14, 14),
              (96, 512, 7, 7), (96, 64, 111, 111)):
        v.append(("prelu", "prelu", "(" + ",".join(map(str, s)) + ")", s, 1))
    v.append(("prelu", "prelu_shared", "(96,64,112,112)", (96, 64, 112, 112), 1))
    # the widths suite, not in "all" (as bench_gpu's)
    widths = [24, 40, 48, 56, 72, 80, 96, 112, 160, 224, 288, 320, 352, 416, 448, 576, 704, 832,
              896, 960, 1152, 1408, 1792, 2304, 2560, 2816, 3072, 3584, 4608, 6144, 7168, 9216,
              11008, 12800, 14336, 18432]
    for op in ("layernorm", "rmsnorm", "softmax", "log_softmax"):
        for c in widths:
            v.append(("widths", op, f"49152x{c}", (49152, c), -1))
    return v


def make_fn(op, shape, axis, dt, impl="eager"):
    dev = "cuda"
    if impl == "copy":  # the harness's own copy of x (see --impl)
        return lambda x: x.clone()
    if op in ("layernorm", "rmsnorm"):
        c = shape[-1]
        w = torch.rand(c, device=dev).add_(0.5).to(dt)
        b = torch.rand(c, device=dev).sub_(0.5).to(dt)
        if op == "layernorm":
            return lambda x: F.layer_norm(x, (c,), w, b, 1e-5)
        return lambda x: F.rms_norm(x, (c,), w, 1e-6)
    if op == "softmax":
        return lambda x: F.softmax(x, dim=axis)
    if op == "log_softmax":
        return lambda x: F.log_softmax(x, dim=axis)
    n_alpha = 1 if op == "prelu_shared" else shape[1]
    a = torch.rand(n_alpha, device=dev).mul_(0.5).to(dt)
    return lambda x: F.prelu(x, a)


def time_graph(fn, xs, n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            fn(xs[i % len(xs)])
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    # Keep every output alive during capture so each call writes fresh memory, as bench_gpu's
    # rotated y buffers do; a dropped output would be reused and its writes absorbed by L2.
    outs = []
    with torch.cuda.graph(g):
        for i in range(n):
            outs.append(fn(xs[i % len(xs)]))
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    g.replay()
    e1.record()
    e1.synchronize()
    warm = e0.elapsed_time(e1)
    done = warm
    while warm > 0 and done < WARM_MS:
        g.replay()
        done += warm
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPLAYS):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    del g, outs
    return statistics.median(ts) * 1e3 / n  # microseconds per call


def main():
    global WARM_MS
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="all")
    ap.add_argument("--op", default="")
    ap.add_argument("--dtype", default="")
    ap.add_argument("--csv", default="bench/results/torch.csv")
    ap.add_argument("--impl", default="eager,compile",
                    help="eager, compile, copy (x.clone() timed the same way: what this harness "
                         "measures for a copy of the shape, against bench_gpu's ceiling)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cols", default="",
                    help="N[,N...]: only shapes of these last-axis widths, rows of 49152 x N "
                         "added for widths the list lacks (as bench_gpu --cols)")
    ap.add_argument("--warm-shard", default="",
                    help="i/n: only compile (and run once) every n-th shape from i, to fill "
                         "Inductor's on-disk caches in parallel before a timing run; no CSV")
    ap.add_argument("--warm-ms", type=float, default=50.0,
                    help="replay each graph for at least this long before timing (as bench_gpu)")
    ap.add_argument("--budget-s", type=float, default=1e9,
                    help="stop starting new torch.compile measurements after this many seconds")
    ap.add_argument("--nvtx-once", action="store_true",
                    help="no timing: three warm calls, then one inside the NVTX range \"prof\"")
    args = ap.parse_args()
    WARM_MS = args.warm_ms
    only_cols = [int(c) for c in args.cols.split(",") if c]

    def shapes():
        return [s for s in make_shapes(args.quick, only_cols)
                if (args.suite == s[0] or (args.suite == "all" and s[0] != "widths"))
                and (not args.op or args.op == s[1])
                and (not only_cols or s[3][s[4]] in only_cols)]
    impls = args.impl.split(",")
    t_start = time.time()
    if args.warm_shard:
        i, n = map(int, args.warm_shard.split("/"))
        for j, (suite, op, sname, shape, axis) in enumerate(shapes()):
            if j % n != i:
                continue
            for dname, dt in DTYPES.items():
                if args.dtype and args.dtype != dname:
                    continue
                x = torch.rand(shape, device="cuda").to(dt)
                torch._dynamo.reset()
                torch.compile(make_fn(op, shape, axis, dt), dynamic=False)(x)
                torch.cuda.synchronize()
                del x
                torch.cuda.empty_cache()
        print(f"warm shard {args.warm_shard} done in {time.time() - t_start:.0f} s", flush=True)
        return
    name = torch.cuda.get_device_name()
    print(f"device: {name}; torch {torch.__version__}", flush=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "suite", "op", "dtype", "shape", "impl", "time_us", "gbps",
                    "compile_s"])
        for suite, op, sname, shape, axis in shapes():
            for dname, dt in DTYPES.items():
                if args.dtype and args.dtype != dname:
                    continue
                n = math.prod(shape)
                moved = 2 * n * dt.itemsize
                k = int(min(64, max(1, math.ceil(WORKING_SET / moved))))
                N = int(min(2000, max(k, math.ceil(GRAPH_BYTES / moved), 3)))
                xs = [torch.rand(shape, device="cuda").mul_(4).sub_(2).to(dt) for _ in range(k)]
                for impl in impls:
                    fn = make_fn(op, shape, axis, dt, impl)
                    comp_s = 0.0
                    if impl == "compile":
                        if time.time() - t_start > args.budget_s:
                            print(f"budget spent: skipping compile {op} {dname} {sname}",
                                  flush=True)
                            continue
                        torch._dynamo.reset()
                        f_run = torch.compile(fn, dynamic=False)
                        t0 = time.time()
                        f_run(xs[0])
                        torch.cuda.synchronize()
                        comp_s = time.time() - t0
                    else:
                        f_run = fn
                    if args.nvtx_once:
                        for _ in range(3):
                            f_run(xs[0])
                        torch.cuda.synchronize()
                        torch.cuda.nvtx.range_push("prof")
                        f_run(xs[0])
                        torch.cuda.synchronize()
                        torch.cuda.nvtx.range_pop()
                        continue
                    try:
                        t = time_graph(f_run, xs, N)
                    except Exception as e:  # report and go on: one shape must not end the run
                        print(f"{op} {dname} {sname} {impl}: {e}", file=sys.stderr, flush=True)
                        continue
                    gbps = moved / t / 1e3
                    w.writerow([name, suite, op, dname, sname, impl, f"{t:.3f}", f"{gbps:.1f}",
                                f"{comp_s:.1f}"])
                    f.flush()
                    print(f"{op:12s} {dname:9s} {sname:24s} {impl:8s} {t:10.2f} us {gbps:8.1f} GB/s"
                          f"  (compile {comp_s:.1f} s)", flush=True)
                del xs
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
