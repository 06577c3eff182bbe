/*
 * split_probe.cuh - what the split-row probes (split_smem_probe.cu, split_hybrid_probe.cu) share:
 * the chunk exchange, the norm statistics from a row's sums, and a timed, checked run. The probes'
 * harness (rows, the copy ceiling, the library's output as reference) is gpu_timing.cuh's.
 */
#ifndef ND_BENCH_SPLIT_PROBE_CUH
#define ND_BENCH_SPLIT_PROBE_CUH

#include "gpu_timing.cuh"
#include "../kernels/cuda_common.cuh"

/* The widths a probe runs (its arguments, or 65536 262144 1048576), and the device's SMs. */
static inline std::vector<long> probe_widths(int argc, char **argv)
{
    std::vector<long> w = {65536, 262144, 1048576};
    if (argc > 1) {
        w.clear();
        for (int i = 1; i < argc; i++)
            w.push_back(atol(argv[i]));
    }
    return w;
}
static inline int probe_sm_count()
{
    int dev = 0, nsm = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    return nsm;
}

/* ---------------------------------------------------------------------------------------------
 * The split probes' chunk exchange (split_smem_probe.cu, split_hybrid_probe.cu): a chunk block of
 * NW warps all-reduces its two sums (s, q), thread 0 publishes them as one 64-bit flag word in
 * slot [row][chunk] (the workspace starts as all ones), warp 0 waits for the row's C words and
 * folds them in a fixed order (lane l: chunks l, l + 32, ..., then a shuffle tree in lane order);
 * every thread returns with the row's sums in s and q. As the library's split kernel does
 * (kernels/rows_split.cuh), in a simpler form.
 * ------------------------------------------------------------------------------------------- */
template <int NW>
__device__ __forceinline__ void probe_split_sums(float &s, float &q, unsigned long long *slots,
                                                 long row, int chunk, int C)
{
    __shared__ float red[2][NW];
    __shared__ float tot[2];
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        q += __shfl_xor_sync(0xffffffffu, q, o);
    }
    if ((threadIdx.x & 31) == 0) {
        red[0][threadIdx.x / 32] = s;
        red[1][threadIdx.x / 32] = q;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        s = lane < NW ? red[0][lane] : 0.0f;
        q = lane < NW ? red[1][lane] : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            s += __shfl_xor_sync(0xffffffffu, s, o);
            q += __shfl_xor_sync(0xffffffffu, q, o);
        }
        unsigned long long *sl = slots + row * C;
        if (lane == 0)
            nd_split_store(sl + chunk,
                           (unsigned long long)__float_as_uint(s) << 32 | __float_as_uint(q));
        float as = 0.0f, aq = 0.0f;
        for (int c = lane; c < C; c += 32) {
            const unsigned long long w = nd_split_wait(sl + c);
            as += __uint_as_float((unsigned)(w >> 32));
            aq += __uint_as_float((unsigned)w);
        }
        for (int o = 16; o > 0; o /= 2) {
            as += __shfl_down_sync(0xffffffffu, as, o);
            aq += __shfl_down_sync(0xffffffffu, aq, o);
        }
        if (lane == 0) {
            tot[0] = as;
            tot[1] = aq;
        }
    }
    __syncthreads();
    s = tot[0];
    q = tot[1];
}

/* The row's statistics from its sums over n columns: RMSNorm (op 0, s unused) rs = 1 / rms, m = 0;
 * LayerNorm (op 1; sums of x - sh) mean m and rs = 1 / std. */
__device__ __forceinline__ void probe_norm_stats(int op, float s, float q, float sh, float n,
                                                 float eps, float &m, float &rs)
{
    if (op == 1) {
        const float dm = s / n;
        m = sh + dm;
        rs = rsqrtf(fmaxf(q / n - dm * dm, 0.0f) + eps);
    } else {
        m = 0.0f;
        rs = rsqrtf(q / n + eps);
    }
}

/* The case of one line: rows of cols columns (2^27 elements in all) for RMSNorm (op 0, eps 1e-6)
 * or LayerNorm (op 1, eps 1e-5), the library timed on it; prints the line's start (op, dtype,
 * shape, the copy ceiling, the library as % of it). */
template <class T> static probe_case probe_norm_start(long cols, nd_dtype dt, int op, float *eps)
{
    const long rows = (1L << 27) / cols;
    probe_case c = probe_case_make<T>(dt, rows, cols);
    *eps = op == 1 ? 1e-5f : 1e-6f;
    const double tl = probe_lib_time(c, dt, op, *eps);
    printf("%-9s %-8s %ldx%-8ld ceil %8.1f us  lib %5.1f%%", op == 1 ? "layernorm" : "rmsnorm",
           nd_dtype_name(dt), rows, cols, c.tc, 100.0 * c.tc / tl);
    return c;
}

/* One pack of y from its pack of x and the parameters at g (and b, LayerNorm): op 0 x * rs * g,
 * op 1 (x - m) * rs * g + b. */
template <class T, int OP>
__device__ __forceinline__ uint4 probe_norm_pack(uint4 x, const uint4 *g, const uint4 *b, float m,
                                                 float rs)
{
    constexpr int VEC = 16 / sizeof(T);
    float f[VEC], gg[VEC], bb[VEC];
    unpack<T>(x, f);
    unpack<T>(__ldg(g), gg);
    if (OP == 1)
        unpack<T>(__ldg(b), bb);
#pragma unroll
    for (int k = 0; k < VEC; k++)
        f[k] = OP == 1 ? fmaf((f[k] - m) * rs, gg[k], bb[k]) : f[k] * rs * gg[k];
    return pack<T>(f);
}

/* One geometry of C chunks a row at nb blocks an SM: " n/a" where a row's chunks cannot all be
 * resident at once (or C < 2), else its workspace (a 16-byte ticket, then a word a chunk a row),
 * reset before each launch (slots all ones: empty; ticket 0), and go(x, y, ws) timed over
 * c's rotated sets and checked against the library's output: " NN.N% (largest difference)". */
template <class T, class F> static void probe_chunks(const probe_case &c, int C, int nb, F go)
{
    if (C > nb * probe_sm_count() || C < 2) {
        printf(" n/a");
        return;
    }
    const size_t wsb = 16 + (size_t)c.rows * C * 8;
    void *ws;
    CK(cudaMalloc(&ws, wsb));
    auto run = [&](void *x, void *y) {
        CK(cudaMemsetAsync(ws, 0xff, wsb, c.s)); /* slots empty */
        CK(cudaMemsetAsync(ws, 0, 16, c.s));     /* ticket 0 */
        go(x, y, ws);
    };
    const double t = time_graph(c.s, c.N, [&](int i) { run(c.xs[i % c.k], c.ys[i % c.k]); });
    const double md = probe_max_diff<T>(c, run);
    printf(" %5.1f%% (%.2g)", 100.0 * c.tc / t, md);
    fflush(stdout);
    CK(cudaFree(ws));
}

/* RUN<T, OP>(cols, dtype) for RMSNorm (OP 0) and LayerNorm (OP 1) in the three dtypes. */
#define PROBE_NORM_CASES(RUN, cols)                                                                \
    do {                                                                                           \
        RUN<float, 0>(cols, ND_FLOAT32);                                                           \
        RUN<__half, 0>(cols, ND_FLOAT16);                                                          \
        RUN<__nv_bfloat16, 0>(cols, ND_BFLOAT16);                                                  \
        RUN<float, 1>(cols, ND_FLOAT32);                                                           \
        RUN<__half, 1>(cols, ND_FLOAT16);                                                          \
        RUN<__nv_bfloat16, 1>(cols, ND_BFLOAT16);                                                  \
    } while (0)

#endif /* ND_BENCH_SPLIT_PROBE_CUH */
