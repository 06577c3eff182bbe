/*
 * gpu_timing.cuh - what the GPU benchmarks (bench_gpu.cu, rows_sweep.cu, the probes) share:
 * random inputs, 16-byte packs as floats, the copy kernel of the memory ceiling, and timing by
 * CUDA graph replay.
 */
#ifndef ND_BENCH_GPU_TIMING_CUH
#define ND_BENCH_GPU_TIMING_CUH

#include <algorithm>
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

#endif /* ND_BENCH_GPU_TIMING_CUH */
