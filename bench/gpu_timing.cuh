/*
 * gpu_timing.cuh - what the GPU benchmarks (bench_gpu.cu, rows_sweep.cu, the probes) share:
 * random inputs, 16-byte packs as floats, the copy kernel of the memory ceiling, and timing by
 * CUDA graph replay.
 */
#ifndef ND_BENCH_GPU_TIMING_CUH
#define ND_BENCH_GPU_TIMING_CUH

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "../kernels/nd_ops.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Settings
 * ------------------------------------------------------------------------------------------- */

static const double kWorkingSet = 512.0 * (1 << 20); /* bytes of x + y over all rotated sets */
static const double kGraphBytes = 2.0 * (1 << 30);   /* bytes moved per graph replay, at least */
static const int kReplays = 9;                       /* timed replays (median), after one warm-up */

/* ---------------------------------------------------------------------------------------------
 * Device helpers: random fill, the copy kernel
 * ------------------------------------------------------------------------------------------- */

__device__ __forceinline__ float hash_uniform(uint64_t i, uint32_t seed)
{
    uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) */
}

template <class T>
__global__ void fill_kernel(T *p, int64_t n, uint32_t seed, float lo, float hi)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float u = lo + (hi - lo) * hash_uniform((uint64_t)i, seed);
        if constexpr (sizeof(T) == 4)
            p[i] = u;
        else if constexpr (std::is_same<T, __half>::value)
            p[i] = __float2half_rn(u);
        else
            p[i] = __float2bfloat16_rn(u);
    }
}

static inline void fill(nd_dtype dt, void *p, int64_t n, uint32_t seed, float lo, float hi)
{
    if (dt == ND_FLOAT32)
        fill_kernel<float><<<1024, 256>>>((float *)p, n, seed, lo, hi);
    else if (dt == ND_FLOAT16)
        fill_kernel<__half><<<1024, 256>>>((__half *)p, n, seed, lo, hi);
    else
        fill_kernel<__nv_bfloat16><<<1024, 256>>>((__nv_bfloat16 *)p, n, seed, lo, hi);
    CK(cudaGetLastError());
}

/* A 16-byte pack of T (float, __half or __nv_bfloat16) as floats, and back (rounded to nearest
 * even): for the probes' hand-written kernels. */
template <class T> __device__ __forceinline__ void unpack(uint4 u, float (&f)[16 / sizeof(T)])
{
    if constexpr (sizeof(T) == 4) {
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
    } else {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            T h[2];
            memcpy(h, &w[i], 4);
            f[2 * i] = (float)h[0];
            f[2 * i + 1] = (float)h[1];
        }
    }
}

template <class T> __device__ __forceinline__ uint4 pack(const float (&f)[16 / sizeof(T)])
{
    uint4 u;
    if constexpr (sizeof(T) == 4) {
        u.x = __float_as_uint(f[0]); u.y = __float_as_uint(f[1]);
        u.z = __float_as_uint(f[2]); u.w = __float_as_uint(f[3]);
    } else {
        unsigned w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            T h[2] = {(T)f[2 * i], (T)f[2 * i + 1]};
            memcpy(&w[i], h, 4);
        }
        u.x = w[0]; u.y = w[1]; u.z = w[2]; u.w = w[3];
    }
    return u;
}

/* 16-byte vectorized copy: one 16-byte load and store per thread, one block per 4 KB, as many
 * blocks as the bytes need. On an H200 this moved 4.23-4.28 TB/s (read + write) where a
 * persistent grid-stride copy with four loads in flight per thread moved 3.9 and
 * cudaMemcpyAsync 4.19 (bench/copy_probe.cu): the block scheduler spreading short blocks is the
 * fastest copy there, so it is the ceiling. */
__global__ void __launch_bounds__(256) copy_kernel(const uint4 *__restrict__ src, uint4 *__restrict__ dst,
                                                   int64_t n16)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n16)
        __stcs(dst + i, __ldcs(src + i));
}

/* ---------------------------------------------------------------------------------------------
 * Timing: N launches in one graph, median replay time / N
 * ------------------------------------------------------------------------------------------- */

/* Warm-up before the timed replays: replays of the graph until at least this many milliseconds
 * of them have run (at least one). bench_gpu --warm-ms sets it. */
inline double g_warm_ms = 0.0;

template <class F> static double time_graph(cudaStream_t s, int n, F launch)
{
    launch(0); /* outside capture: lazy module loading, first-use attributes */
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; i++)
        launch(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s)); /* warm-up */
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float warm;
    CK(cudaEventElapsedTime(&warm, e0, e1));
    for (double done = warm; warm > 0 && done < g_warm_ms; done += warm)
        CK(cudaGraphLaunch(ge, s));
    std::vector<float> ms;
    for (int r = 0; r < kReplays; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return ms[ms.size() / 2] * 1e3 / n; /* microseconds per launch */
}

/* The memory ceiling for moving xb bytes from xs[i % k] to ys[i % k], N copies per graph: the
 * copy kernel's and cudaMemcpyAsync's times per copy (us). */
static inline void time_ceiling(cudaStream_t s, int N, const std::vector<void *> &xs,
                         const std::vector<void *> &ys, double xb, double *t_kernel,
                         double *t_memcpy)
{
    const int k = (int)xs.size();
    const int64_t n16 = (int64_t)(xb / 16);
    *t_kernel = time_graph(s, N, [&](int i) {
        copy_kernel<<<(unsigned)((n16 + 255) / 256), 256, 0, s>>>((const uint4 *)xs[i % k],
                                                                  (uint4 *)ys[i % k], n16);
        CK(cudaGetLastError());
    });
    *t_memcpy = time_graph(s, N, [&](int i) {
        CK(cudaMemcpyAsync(ys[i % k], xs[i % k], (size_t)xb, cudaMemcpyDeviceToDevice, s));
    });
}

/* A row op with its launch bounds' blocks an SM replaced by MB (0: the op's own), for the sweeps
 * (rows_sweep.cu, block_sweep.cu): the signature is nd_rows_min_blocks's, so the override is seen
 * and hides the op's own min_blocks. */
template <class Op, int MB> struct with_min_blocks : Op {
    static constexpr int min_blocks(int, int, int, int, int) { return MB; }
};
template <class Op, int MB>
using op_mb = typename std::conditional<MB == 0, Op, with_min_blocks<Op, MB>>::type;

/* ---------------------------------------------------------------------------------------------
 * The probes' harness (loop_probe.cu, split_smem_probe.cu): rows x cols of T in rotated sets, the
 * parameters, the copy ceiling, the library's output as the reference
 * ------------------------------------------------------------------------------------------- */

struct probe_case {
    int64_t rows, cols, n; /* n = rows * cols elements */
    int k, N;                   /* k sets of x and y (kWorkingSet bytes moved over them, at most
                                   64), N launches a graph (kGraphBytes moved at least) */
    std::vector<void *> xs, ys; /* x uniform in [-2, 2) */
    void *g, *b, *yref;         /* gamma in [0.5, 1.5), beta in [-0.5, 0.5), the reference */
    cudaStream_t s;
    double tc; /* the copy ceiling (us): the faster of the copy kernel and cudaMemcpyAsync */
};

template <class T> static probe_case probe_case_make(nd_dtype dt, int64_t rows, int64_t cols)
{
    probe_case c;
    c.rows = rows;
    c.cols = cols;
    c.n = rows * cols;
    const size_t es = sizeof(T);
    const double xb = (double)c.n * es, moved = 2 * xb;
    c.k = (int)std::min(64.0, std::max(1.0, std::ceil(kWorkingSet / moved)));
    c.N = std::max(3, (int)std::min(2000.0, std::max((double)c.k, std::ceil(kGraphBytes / moved))));
    c.xs.resize(c.k);
    c.ys.resize(c.k);
    for (int i = 0; i < c.k; i++) {
        CK(cudaMalloc(&c.xs[i], (size_t)c.n * es));
        CK(cudaMalloc(&c.ys[i], (size_t)c.n * es));
        fill(dt, c.xs[i], c.n, 1234 + i, -2.0f, 2.0f);
    }
    CK(cudaMalloc(&c.g, cols * es));
    CK(cudaMalloc(&c.b, cols * es));
    CK(cudaMalloc(&c.yref, (size_t)c.n * es));
    fill(dt, c.g, cols, 99, 0.5f, 1.5f);
    fill(dt, c.b, cols, 98, -0.5f, 0.5f);
    CK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
    double tk, tm;
    time_ceiling(c.s, c.N, c.xs, c.ys, xb, &tk, &tm);
    c.tc = std::min(tk, tm);
    return c;
}

static inline void probe_case_free(probe_case &c)
{
    for (int i = 0; i < c.k; i++) {
        CK(cudaFree(c.xs[i]));
        CK(cudaFree(c.ys[i]));
    }
    for (void *p : {c.g, c.b, c.yref})
        CK(cudaFree(p));
    CK(cudaStreamDestroy(c.s));
}

/* The library's RMSNorm (op 0) or LayerNorm (op 1, beta c.b) of c.rows rows from x into y, on c's
 * stream. */
static inline void probe_lib_norm(const probe_case &c, nd_dtype dt, int op, float eps, void *x,
                                  void *y)
{
    nd_norm_args a = {dt, c.rows, c.cols, x, y, c.g, op == 1 ? c.b : NULL, eps, NULL, NULL};
    nd_error err;
    if ((op == 1 ? nd_cuda_layernorm(&a, c.s, &err) : nd_cuda_rmsnorm(&a, c.s, &err)) != ND_OK) {
        fprintf(stderr, "library: %s\n", err.msg);
        exit(1);
    }
}

/* The library's time (us a launch) over c's rotated sets, as a probe variant's is timed; then its
 * output of c.xs[0] in c.yref, the reference for probe_max_diff. */
static inline double probe_lib_time(const probe_case &c, nd_dtype dt, int op, float eps)
{
    const double t = time_graph(c.s, c.N, [&](int i) {
        probe_lib_norm(c, dt, op, eps, c.xs[i % c.k], c.ys[i % c.k]);
    });
    probe_lib_norm(c, dt, op, eps, c.xs[0], c.yref);
    return t;
}

/* y (poisoned, then written by launch(c.xs[0], c.ys[0])) against c.yref: the largest difference
 * over three stretches of up to 1M elements (the start, the middle, the end; a NaN counts as
 * inf). */
template <class T, class F> static double probe_max_diff(const probe_case &c, F launch)
{
    CK(cudaMemsetAsync(c.ys[0], 0xff, (size_t)c.n * sizeof(T), c.s)); /* poison */
    launch(c.xs[0], c.ys[0]);
    CK(cudaStreamSynchronize(c.s));
    const int64_t len = std::min(c.n, (int64_t)1 << 20);
    std::vector<T> a1(len), a2(len);
    double md = 0;
    for (int64_t off : {(int64_t)0, std::min(c.n / 2, c.n - len), c.n - len}) {
        CK(cudaMemcpy(a1.data(), (T *)c.ys[0] + off, a1.size() * sizeof(T), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(a2.data(), (T *)c.yref + off, a2.size() * sizeof(T), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < a1.size(); i++) {
            const double d = fabs((double)(float)a1[i] - (double)(float)a2[i]);
            md = std::max(md, d == d ? d : INFINITY);
        }
    }
    return md;
}

#endif /* ND_BENCH_GPU_TIMING_CUH */
