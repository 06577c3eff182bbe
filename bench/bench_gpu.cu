/*
 * bench_gpu.cu - kernel benchmark of the CUDA backend through its public API, against the memory
 * ceiling measured in the same run.
 *
 * For every shape: effective bandwidth = (bytes of x read + bytes of y written) / time, and the
 * ceiling = the faster of cudaMemcpyAsync device-to-device and a 16-byte vectorized copy kernel
 * moving the same number of bytes. Timing: each measurement captures N launches into a CUDA graph
 * (so launch gaps count neither for normd, nor for the copies, nor for PyTorch in torch_bench.py),
 * rotating among k input/output sets so the working set is well past L2; the graph is replayed
 * after a warm-up and the median replay time over N is the time per launch. Inputs are random.
 *
 *   bench_gpu [--suite rows|axis|prelu|all|widths] [--op NAME] [--dtype NAME] [--cols N[,N...]]
 *             [--csv PATH] [--quick] [--rest-ms MS] [--pre-alloc-mb MB] [--warm-ms MS]
 *
 * "all" is the rows, axis and prelu suites (the goals of bench/plot.py); "widths" is a survey of
 * 36 more row widths of models, run only when asked for.
 *
 * Prints a table and writes CSV (default bench/results/gpu.csv). Each line ends with the plan the
 * dispatch picked for that shape (nd_cuda_last_plan: kernel, packs, lanes, block, grid), so a
 * number can be read next to the kernel that made it.
 *
 * For finding out why a shape measures differently inside a suite than alone: --rest-ms sleeps
 * that long (device idle) before each shape, --pre-alloc-mb allocates, touches and frees that
 * much device memory once before the first shape. --warm-ms replays each graph for at least that
 * long before the timed replays (default 50). With one warm-up replay, a shape
 * timed right after a long, heavy one could be measured in a slower state of the GPU that lasts
 * tens of milliseconds: float32 2048x65536 right after the 16-bit 49152x32768 shapes measured
 * 82-84% of the copy ceiling, 92-97 alone, after a 3 s rest, or after 50 or 200 ms of warm-up
 * (H100, bench/results/alone_vs_suite_h100.txt).
 */
#include <cmath>
#include <cstring>
#include <string>

#include <unistd.h>

#include "gpu_timing.cuh"

/* ---------------------------------------------------------------------------------------------
 * Shapes
 * ------------------------------------------------------------------------------------------- */

struct shape {
    std::string suite, op, name; /* op: layernorm rmsnorm softmax log_softmax prelu prelu_shared */
    int64_t outer, dim, inner;   /* rows: (rows, cols, 1); axis: (outer, dim, inner);
                                    prelu: (N, C, HW) */
};

/* The suites' shapes, and rows of 49152 x each width of `extra` that the rows suite lacks
 * (widths up to 32768: --cols 5120 measures a width the list does not have). */
static std::vector<shape> make_shapes(bool quick, const std::vector<int64_t> &extra)
{
    std::vector<shape> v;
    const char *row_ops[] = {"layernorm", "rmsnorm", "softmax", "log_softmax"};
    /* powers of two, and widths of models that leave power-of-two groups short of packs (192,
     * 384, 640, 1600, 5120: hidden sizes of ViT-Ti/S, GPT-2 XL, Llama-13B and others) */
    std::vector<int64_t> cols = {32,  64,   128,  192,  256,  384,  512,  640,   768,  1024,
                                 1536, 1600, 2048, 4096, 5120, 8192, 16384, 32768};
    if (quick)
        cols = {32, 256, 1024, 4096, 32768};
    for (int64_t c : extra)
        if (c >= 1 && c <= 32768 && std::find(cols.begin(), cols.end(), c) == cols.end())
            cols.push_back(c);
    for (const char *op : row_ops) {
        for (int64_t c : cols) {
            char nm[64];
            snprintf(nm, sizeof nm, "49152x%lld", (long long)c);
            v.push_back({"rows", op, nm, 49152, c, 1});
        }
        /* long rows: 256 MB of 16-bit x (512 MB of float32) */
        for (int64_t c : {65536LL, 262144LL, 1048576LL}) {
            int64_t r = ((int64_t)128 << 20) / c;
            char nm[64];
            snprintf(nm, sizeof nm, "%lldx%lld", (long long)r, (long long)c);
            v.push_back({"rows", op, nm, r, c, 1});
        }
    }
    /* the widths suite (not in "all"): rows of 49152 x hidden sizes of models that the rows
     * suite lacks, where a width's packs leave a power-of-two group of lanes or threads short
     * (the fitted geometries of kernels/rows.cuh take some; a survey for the others) */
    const int64_t widths[] = {24,   40,   48,   56,   72,   80,    96,    112,   160,
                              224,  288,  320,  352,  416,  448,   576,   704,   832,
                              896,  960,  1152, 1408, 1792, 2304,  2560,  2816,  3072,
                              3584, 4608, 6144, 7168, 9216, 11008, 12800, 14336, 18432};
    for (const char *op : row_ops)
        for (int64_t c : widths) {
            char nm[64];
            snprintf(nm, sizeof nm, "49152x%lld", (long long)c);
            v.push_back({"widths", op, nm, 49152, c, 1});
        }
    struct ax { int64_t s[4]; int rank, axis; };
    const ax axes[] = {{{128, 128, 16, 16}, 4, 0}, {{512, 896, 4, 12}, 4, 1},
                       {{32, 1000, 56, 56}, 4, 1}, {{8, 32768, 64, 1}, 3, 1},
                       {{65536, 8, 128, 1}, 3, 1}};
    for (const char *op : {"softmax", "log_softmax"}) {
        for (const ax &a : axes) {
            int64_t outer = 1, inner = 1;
            for (int i = 0; i < a.axis; i++)
                outer *= a.s[i];
            for (int i = a.axis + 1; i < a.rank; i++)
                inner *= a.s[i];
            std::string nm = "(";
            for (int i = 0; i < a.rank; i++)
                nm += (i ? "," : "") + std::to_string(a.s[i]);
            nm += ")ax" + std::to_string(a.axis);
            v.push_back({"axis", op, nm, outer, a.s[a.axis], inner});
        }
    }
    const int64_t pr[][4] = {{96, 64, 112, 112}, {96, 128, 56, 56}, {96, 256, 28, 28},
                             {96, 512, 14, 14},  {96, 512, 7, 7},   {96, 64, 111, 111}};
    for (auto &p : pr) {
        char nm[64];
        snprintf(nm, sizeof nm, "(%lld,%lld,%lld,%lld)", (long long)p[0], (long long)p[1],
                 (long long)p[2], (long long)p[3]);
        v.push_back({"prelu", "prelu", nm, p[0], p[1], p[2] * p[3]});
    }
    v.push_back({"prelu", "prelu_shared", "(96,64,112,112)", 96, 64, 112 * 112});
    return v;
}

/* ---------------------------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    std::string suite = "all", only_op, only_dtype, csv = "bench/results/gpu.csv";
    std::vector<int64_t> only_cols; /* --cols 65536,5120: any of these (rows of a width the
                                       list lacks, up to 32768: 49152 of them) */
    bool quick = false;
    long rest_ms = 0, pre_alloc_mb = 0;
    g_warm_ms = 50.0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--suite" && i + 1 < argc)
            suite = argv[++i];
        else if (a == "--op" && i + 1 < argc)
            only_op = argv[++i];
        else if (a == "--dtype" && i + 1 < argc)
            only_dtype = argv[++i];
        else if (a == "--csv" && i + 1 < argc)
            csv = argv[++i];
        else if (a == "--cols" && i + 1 < argc)
            for (char *c = argv[++i], *end; *c; c = end + (*end == ',')) {
                only_cols.push_back(strtoll(c, &end, 10));
                if (end == c || (*end && *end != ','))
                    { fprintf(stderr, "bench_gpu: --cols: not a list of numbers: %s\n", argv[i]); return 2; }
            }
        else if (a == "--quick")
            quick = true;
        else if (a == "--rest-ms" && i + 1 < argc)
            rest_ms = atol(argv[++i]);
        else if (a == "--pre-alloc-mb" && i + 1 < argc)
            pre_alloc_mb = atol(argv[++i]);
        else if (a == "--warm-ms" && i + 1 < argc)
            g_warm_ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--suite rows|axis|prelu|all|widths] [--op NAME] "
                    "[--dtype NAME] [--cols N[,N...]] [--csv PATH] [--quick] [--rest-ms MS] "
                    "[--pre-alloc-mb MB] [--warm-ms MS]\n", argv[0]);
            return 2;
        }
    }
    if (nd_cuda_device_count() < 1) {
        fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    FILE *f = fopen(csv.c_str(), "w");
    if (!f) {
        perror(csv.c_str());
        return 1;
    }
    fprintf(f, "device,suite,op,dtype,shape,rows,cols,inner,bytes,time_us,gbps,ceiling_gbps,"
            "pct_ceiling,copy_kernel_gbps,memcpy_gbps,copy_time_us,plan\n");
    printf("device: %s (%d SMs, L2 %d MB)\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20);
    printf("%-12s %-9s %-24s %10s %9s %9s %7s %9s  %s\n", "op", "dtype", "shape", "time_us",
           "GB/s", "ceil", "%ceil", "x_copy", "plan (the dispatch's pick)");

    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (pre_alloc_mb > 0) {
        void *p;
        CK(cudaMalloc(&p, (size_t)pre_alloc_mb << 20));
        CK(cudaMemset(p, 0x5a, (size_t)pre_alloc_mb << 20));
        CK(cudaDeviceSynchronize());
        CK(cudaFree(p));
    }
    const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    for (const shape &sh : make_shapes(quick, only_cols)) {
        if (suite != sh.suite && (suite != "all" || sh.suite == "widths"))
            continue;
        if (!only_op.empty() && only_op != sh.op)
            continue;
        if (!only_cols.empty() &&
            std::find(only_cols.begin(), only_cols.end(), sh.dim) == only_cols.end())
            continue;
        for (nd_dtype dt : dts) {
            if (!only_dtype.empty() && only_dtype != nd_dtype_name(dt))
                continue;
            if (rest_ms > 0) {
                CK(cudaDeviceSynchronize());
                usleep((useconds_t)rest_ms * 1000);
            }
            const size_t es = nd_dtype_size(dt);
            const int64_t n = sh.outer * sh.dim * sh.inner;
            const double xb = (double)n * es, moved = 2 * xb;
            int k = (int)std::min(64.0, std::max(1.0, std::ceil(kWorkingSet / moved)));
            int N = (int)std::min(2000.0, std::max((double)k, std::ceil(kGraphBytes / moved)));
            N = std::max(N, 3);
            std::vector<void *> xs(k), ys(k);
            for (int i = 0; i < k; i++) {
                CK(cudaMalloc(&xs[i], (size_t)n * es + 16));
                CK(cudaMalloc(&ys[i], (size_t)n * es + 16));
                fill(dt, xs[i], n, 1234 + i, -2.0f, 2.0f);
            }
            void *gamma = NULL, *beta = NULL;
            int64_t np = sh.suite == "prelu" ? sh.dim : sh.dim;
            CK(cudaMalloc(&gamma, (size_t)np * es));
            CK(cudaMalloc(&beta, (size_t)np * es));
            fill(dt, gamma, np, 99, 0.5f, 1.5f);
            fill(dt, beta, np, 98, -0.5f, 0.5f);
            CK(cudaDeviceSynchronize());

            nd_error err = {{0}};
            auto run = [&](int i) {
                void *x = xs[i % k], *y = ys[i % k];
                nd_status st = ND_OK;
                if (sh.op == "layernorm" || sh.op == "rmsnorm") {
                    nd_norm_args a = {dt, sh.outer, sh.dim, x, y, gamma, beta,
                                      sh.op == "layernorm" ? 1e-5f : 1e-6f, NULL, NULL};
                    st = sh.op == "layernorm" ? nd_cuda_layernorm(&a, s, &err)
                                              : nd_cuda_rmsnorm(&a, s, &err);
                } else if (sh.op == "softmax" || sh.op == "log_softmax") {
                    nd_softmax_args a = {dt, sh.outer, sh.dim, sh.inner, x, y};
                    st = nd_cuda_softmax(&a, sh.op == "log_softmax", s, &err);
                } else {
                    nd_prelu_args a = {dt, sh.outer, sh.dim, sh.inner, x, y, gamma,
                                       sh.op == "prelu_shared" ? 1 : sh.dim};
                    st = nd_cuda_prelu(&a, s, &err);
                }
                if (st != ND_OK) {
                    fprintf(stderr, "%s %s %s: %s\n", sh.op.c_str(), nd_dtype_name(dt),
                            sh.name.c_str(), err.msg);
                    exit(1);
                }
            };
            /* the dispatch's pick, from one traced call before the timed ones */
            nd_cuda_plan_trace(1);
            run(0);
            nd_cuda_plan_trace(0);
            const std::string plan = nd_cuda_last_plan();
            double t = time_graph(s, N, run);
            double tk, tm;
            time_ceiling(s, N, xs, ys, xb, &tk, &tm);
            double gbps = moved / t / 1e3, gk = moved / tk / 1e3, gm = moved / tm / 1e3;
            double ceil_g = std::max(gk, gm), tc = std::min(tk, tm);
            char dims[64];
            snprintf(dims, sizeof dims, "%lld,%lld,%lld", (long long)sh.outer, (long long)sh.dim,
                     (long long)sh.inner);
            fprintf(f, "\"%s\",%s,%s,%s,\"%s\",%s,%.0f,%.3f,%.1f,%.1f,%.2f,%.1f,%.1f,%.3f,\"%s\"\n",
                    prop.name, sh.suite.c_str(), sh.op.c_str(), nd_dtype_name(dt), sh.name.c_str(),
                    dims, moved, t, gbps, ceil_g, 100.0 * gbps / ceil_g, gk, gm, tc, plan.c_str());
            fflush(f);
            printf("%-12s %-9s %-24s %10.2f %9.1f %9.1f %6.1f%% %8.2fx  %s\n", sh.op.c_str(),
                   nd_dtype_name(dt), sh.name.c_str(), t, gbps, ceil_g, 100.0 * gbps / ceil_g,
                   t / tk, plan.c_str());
            fflush(stdout);
            for (int i = 0; i < k; i++) {
                CK(cudaFree(xs[i]));
                CK(cudaFree(ys[i]));
            }
            CK(cudaFree(gamma));
            CK(cudaFree(beta));
        }
    }
    fclose(f);
    return 0;
}
