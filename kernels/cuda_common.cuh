/*
 * cuda_common.cuh - the device pieces every normd CUDA kernel shares, written once.
 *
 *   error handling   ND_CUDA_TRY turns a failed CUDA call into nd_error_set(err, ND_EDEVICE, ...)
 *                    and returns it; ND_CUDA_CHECK_LAUNCH does the same for the last launch. Errors
 *                    are values: nothing here prints or exits.
 *   dtype traits     nd_cuda_type<T>: float / __half / __nv_bfloat16 <-> float, the nd_dtype tag
 *                    and the number of elements in a 16-byte pack.
 *   packs            16-byte aligned pack types and load/store helpers that convert to and from
 *                    float registers (ld.global.nc / streaming variants for data read once);
 *                    nd_regrow, a row share kept in 32-bit words (16-bit elements two to a
 *                    register), and nd_pack2, two floats rounded into one 16-bit pair.
 *   reductions       all-reduce over a group of W lanes of a warp (W = 1..32), over a block and over
 *                    a thread-block cluster through distributed shared memory (sm_90). Each takes
 *                    K floats at once and a combine functor, so a (max, sum) softmax pair or a
 *                    (sum, sum of squares) pair costs one round, and every participant gets the
 *                    same bits back (combining always runs in the same order).
 *   device info      one cached record per device: SM count, shared memory limits, cluster support
 *                    (kernels/device.cu fills it).
 *
 * Host code that includes this must be compiled by nvcc (the .cu files of kernels/ and bench/).
 */
#ifndef ND_CUDA_COMMON_CUH
#define ND_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "nd_ops.h"

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* Evaluate a cudaError_t expression; on failure fill err and return ND_EDEVICE from the caller
 * (which must return nd_status). */
#define ND_CUDA_TRY(err, call)                                                                     \
    do {                                                                                           \
        cudaError_t nd_e_ = (call);                                                                \
        if (nd_e_ != cudaSuccess)                                                                  \
            return nd_error_set((err), ND_EDEVICE, "%s: %s", #call, cudaGetErrorString(nd_e_));   \
    } while (0)

/* After a <<<>>> launch or cudaLaunchKernelEx: a bad configuration shows up here. */
#define ND_CUDA_CHECK_LAUNCH(err, what)                                                            \
    do {                                                                                           \
        cudaError_t nd_e_ = cudaGetLastError();                                                    \
        if (nd_e_ != cudaSuccess)                                                                  \
            return nd_error_set((err), ND_EDEVICE, "launch of %s: %s", (what),                     \
                                cudaGetErrorString(nd_e_));                                        \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Device info (kernels/device.cu)
 * ------------------------------------------------------------------------------------------- */

typedef struct nd_cuda_device_info {
    int device;
    int cc_major, cc_minor;
    int sm_count;
    int max_threads_per_sm;
    int regs_per_sm;
    size_t smem_per_block_optin; /* the most dynamic+static shared memory one block may ask for */
    size_t smem_per_sm;
    int l2_bytes;
    int cluster_launch;          /* 1 when thread-block clusters can be launched (sm_90+) */
    int coop_launch;             /* 1 when cooperative grids can be launched */
    double mem_gbps;             /* peak DRAM bandwidth, GB/s (2 x memory clock x bus width) */
} nd_cuda_device_info;

/* The record of the current device, filled on first use and cached for the process (thread-safe).
 * Returns ND_OK and sets *out, or ND_EDEVICE / ND_EUNSUPPORTED with a message. */
nd_status nd_cuda_device_info_get(const nd_cuda_device_info **out, nd_error *err);

/* The launch plan trace (nd_cuda_plan_trace in nd_ops.h): ND_PLAN starts this thread's line,
 * ND_PLAN_MORE appends to it; both cost one load and a branch while the trace is off. */
extern int nd_cuda_plan_on;
void nd_cuda_plan_note(bool append, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define ND_PLAN(...)                                                                               \
    do {                                                                                           \
        if (nd_cuda_plan_on)                                                                       \
            nd_cuda_plan_note(false, __VA_ARGS__);                                                 \
    } while (0)
#define ND_PLAN_MORE(...)                                                                          \
    do {                                                                                           \
        if (nd_cuda_plan_on)                                                                       \
            nd_cuda_plan_note(true, __VA_ARGS__);                                                  \
    } while (0)

/* Softmax over a non-last axis (inner > 1), in kernels/softmax_axis.cu. a has passed
 * nd_softmax_args_check. nd_cuda_softmax calls it for every inner > 1. */
nd_status nd_cuda_softmax_axis(const nd_softmax_args *a, int log, cudaStream_t stream,
                               nd_error *err);

/*
 * What the launchers would otherwise ask the runtime on every launch, asked once (kernels/
 * device.cu): the occupancy calculator's answer per (kernel, device, threads, cluster size,
 * dynamic shared memory), and the shared memory limit set on a kernel (csize -1) or its
 * non-portable cluster size permission (csize -2). A batch's launch paid for these calls on the
 * thread that waits for it (bench/cuda_api_cost.cu measures each). get: 1 and *value when known.
 * put: remembers (silently not, once the table is half full: the caller then keeps asking).
 */
int nd_cuda_occupancy_get(const void *fn, int dev, int threads, int csize, size_t smem,
                          int *value);
void nd_cuda_occupancy_put(const void *fn, int dev, int threads, int csize, size_t smem,
                           int value);

/* cudaOccupancyMaxActiveBlocksPerMultiprocessor, remembered. */
template <class Kernel>
static inline nd_status nd_cuda_blocks_per_sm(Kernel kernel, int dev, int threads, size_t smem,
                                              int *per_sm, nd_error *err)
{
    const void *fn = reinterpret_cast<const void *>(kernel);
    if (nd_cuda_occupancy_get(fn, dev, threads, 1, smem, per_sm))
        return ND_OK;
    ND_CUDA_TRY(err, cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, smem));
    nd_cuda_occupancy_put(fn, dev, threads, 1, smem, *per_sm);
    return ND_OK;
}

/* Lets kernel use smem bytes of dynamic shared memory (the limit is only ever raised). */
template <class Kernel>
static inline nd_status nd_cuda_allow_smem(Kernel kernel, int dev, size_t smem, nd_error *err)
{
    const void *fn = reinterpret_cast<const void *>(kernel);
    int have = 0;
    if (nd_cuda_occupancy_get(fn, dev, 0, -1, 0, &have) && (size_t)have >= smem)
        return ND_OK;
    ND_CUDA_TRY(err, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)smem));
    nd_cuda_occupancy_put(fn, dev, 0, -1, 0, (int)smem);
    return ND_OK;
}

/* Blocks to launch for a grid-stride kernel: enough to fill every SM at the occupancy the
 * kernel reaches with this block size and shared memory, capped at `work` blocks. */
template <class Kernel>
static inline nd_status nd_cuda_grid_size(Kernel kernel, int threads, size_t smem, int64_t work,
                                          const nd_cuda_device_info *di, int *grid, nd_error *err)
{
    int per_sm = 0;
    nd_status st = nd_cuda_blocks_per_sm(kernel, di->device, threads, smem, &per_sm, err);
    if (st != ND_OK)
        return st;
    if (per_sm < 1)
        return nd_error_set(err, ND_EDEVICE, "kernel cannot run with %d threads and %zu bytes of "
                            "shared memory per block", threads, smem);
    int64_t full = (int64_t)per_sm * di->sm_count;
    *grid = (int)(work < full ? work : full);
    return ND_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Dtype traits
 * ------------------------------------------------------------------------------------------- */

template <class T> struct nd_cuda_type;

template <> struct nd_cuda_type<float> {
    static constexpr nd_dtype dtype = ND_FLOAT32;
    static constexpr int pack = 4;
    static __device__ __forceinline__ float to_float(float v) { return v; }
    static __device__ __forceinline__ float from_float(float v) { return v; }
};

template <> struct nd_cuda_type<__half> {
    static constexpr nd_dtype dtype = ND_FLOAT16;
    static constexpr int pack = 8;
    static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
    static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};

template <> struct nd_cuda_type<__nv_bfloat16> {
    static constexpr nd_dtype dtype = ND_BFLOAT16;
    static constexpr int pack = 8;
    static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float v)
    {
        return __float2bfloat16_rn(v);
    }
};

template <class T> __device__ __forceinline__ float nd_to_float(T v)
{
    return nd_cuda_type<T>::to_float(v);
}

template <class T> __device__ __forceinline__ T nd_from_float(float v)
{
    return nd_cuda_type<T>::from_float(v);
}

/* ---------------------------------------------------------------------------------------------
 * Packs: N elements of T in one aligned chunk (N * sizeof(T) <= 16).
 * ------------------------------------------------------------------------------------------- */

template <class T, int N> struct alignas(sizeof(T) * N) nd_pack {
    T v[N];
};

/* The raw 16-byte (or smaller) word a pack of N T's travels in. */
template <int BYTES> struct nd_word;
template <> struct nd_word<16> { typedef uint4 type; };
template <> struct nd_word<8> { typedef uint2 type; };
template <> struct nd_word<4> { typedef unsigned type; };
template <> struct nd_word<2> { typedef unsigned short type; };

/* A 16-byte word that many blocks re-read (a row op's parameters), KEEP: with an L2 evict-last
 * cache policy (createpolicy + ld.global.nc.L2::cache_hint), so streamed data (x and y are
 * evict-first) does not push it out of L2; else a plain ld.global.nc. The load is volatile asm:
 * a plain asm statement may be hoisted above the bounds check that guards it (see nd_ldg1). */
template <bool KEEP> __device__ __forceinline__ uint4 nd_ldg_keep(const uint4 *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (KEEP) {
        unsigned long long pol;
        asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
        uint4 r;
        asm volatile("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p), "l"(pol));
        return r;
    }
#endif
    return __ldg(p);
}

/* Element h (0: the low half, 1: the high one) of a 32-bit word of two 16-bit T, widened:
 * float16 by one conversion of that half; bfloat16 by one shift or mask of the word. Not
 * __bfloat162float of the element: its cvt.f32.bf16 takes a 16-bit register, so a high half cost
 * a PRMT to extract it and then the shift (nvcc 13, sm_90). */
template <class T> __device__ __forceinline__ float nd_half_of(uint32_t u, int h)
{
    static_assert(sizeof(T) == 2, "two 16-bit elements a word");
    if constexpr (std::is_same<T, __half>::value) {
        __half2 p;
        memcpy(&p, &u, sizeof p);
        return h ? __high2float(p) : __low2float(p);
    } else {
        return __uint_as_float(h ? (u & 0xffff0000u) : (u << 16));
    }
}

/* The N elements of T in w, a pack's word as loaded (nd_word), widened; bfloat16 a 32-bit word
 * at a time (nd_half_of: one instruction an element, where each element's __bfloat162float took
 * two for a high half). float16 keeps the element's conversion, already one instruction (HADD2.F32
 * selects the half). LayerNorm's bfloat16 parameters come through here in the block, split and
 * lean kernels (the block kernel at 32768 columns: 1473 -> 1402 instructions, where float16's
 * takes 1400). H200, three alternating rounds, % of the copy ceiling, bfloat16 LayerNorm
 * (bench/results/bf16_words_h200.txt): 49152x32768 93.2 -> 96.8, 2048x65536 84.2 -> 86.0,
 * 512x262144 78.7 -> 80.0, 128x1048576 73.7 -> 75.2, 192 columns 89.5 -> 90.8, 384 93.8 -> 94.9;
 * 2048 98.4 -> 97.3 and 32 98.3 -> 97.6 (warp kernels: the same instructions on their path,
 * scheduled otherwise); RMSNorm's 16-bit rows within 0.8. */
template <class T, int N, class W>
__device__ __forceinline__ void nd_word_floats(const W &w, float (&out)[N])
{
    static_assert(sizeof(W) == sizeof(T) * N, "one pack's word");
    if constexpr (std::is_same<T, __nv_bfloat16>::value && sizeof(W) >= 4) {
        uint32_t u[sizeof(W) / 4];
        memcpy(u, &w, sizeof(W));
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = nd_half_of<T>(u[i / 2], i & 1);
    } else {
        union { W w; nd_pack<T, N> pk; } u;
        u.w = w;
#pragma unroll
        for (int i = 0; i < N; i++)
            out[i] = nd_to_float(u.pk.v[i]);
    }
}

/* Load N elements at p (aligned to N * sizeof(T)) into floats. Read-only path (ld.global.nc);
 * KEEP: a 16-byte pack that many blocks re-read, kept in L2 (nd_ldg_keep). */
template <class T, int N, bool KEEP = false>
__device__ __forceinline__ void nd_load_pack(const T *p, float (&out)[N])
{
    typedef typename nd_word<sizeof(T) * N>::type W;
    W w;
    if constexpr (KEEP && sizeof(W) == 16)
        w = nd_ldg_keep<true>(reinterpret_cast<const uint4 *>(p));
    else
        w = __ldg(reinterpret_cast<const W *>(p));
    nd_word_floats<T, N>(w, out);
}

/* Same, streaming (evict-first): for data read exactly once, so it does not push parameters or
 * the other buffers out of L2. */
template <class T, int N>
__device__ __forceinline__ void nd_load_pack_stream(const T *p, float (&out)[N])
{
    typedef typename nd_word<sizeof(T) * N>::type W;
    nd_word_floats<T, N>(__ldcs(reinterpret_cast<const W *>(p)), out);
}

/* Store N floats, rounded to T, at p (aligned to N * sizeof(T)). */
template <class T, int N>
__device__ __forceinline__ void nd_store_pack(T *p, const float (&in)[N])
{
    typedef typename nd_word<sizeof(T) * N>::type W;
    union { W w; nd_pack<T, N> pk; } u;
#pragma unroll
    for (int i = 0; i < N; i++)
        u.pk.v[i] = nd_from_float<T>(in[i]);
    *reinterpret_cast<W *>(p) = u.w;
}

/* Streaming store (evict-first) for outputs nobody reads back soon. */
template <class T, int N>
__device__ __forceinline__ void nd_store_pack_stream(T *p, const float (&in)[N])
{
    typedef typename nd_word<sizeof(T) * N>::type W;
    union { W w; nd_pack<T, N> pk; } u;
#pragma unroll
    for (int i = 0; i < N; i++)
        u.pk.v[i] = nd_from_float<T>(in[i]);
    __stcs(reinterpret_cast<W *>(p), u.w);
}

/* max(a, b) where a NaN wins (max.NaN.f32, sm_80): a row's max that carries a NaN on, where
 * fmaxf would pass over it. */
__device__ __forceinline__ float nd_fmax_nan(float a, float b)
{
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/*
 * n / d for 0 <= n < 2^N and a fixed 1 <= d < 2^N, N the bits of U (32 or 64), without a divide
 * instruction (Granlund and Montgomery, "Division by invariant integers using multiplication",
 * fig. 4.1):
 *   l = ceil(log2 d), m = floor(2^N * (2^l - d) / d) + 1,
 *   t = mulhi(m, n), q = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0).
 * The 32-bit form is one multiply-high, which is what most tensors need; a 64-bit one is several
 * instructions. Made on the host (nd_fast_div_make), passed in a kernel's arguments (prelu.cu's
 * plane and channel of a pack, softmax_axis.cu's tile of a slab).
 */
template <class U> struct nd_fast_div {
    U d, m;
    int sh1, sh2;
};

template <class U> static nd_fast_div<U> nd_fast_div_make(U d)
{
    constexpr int N = 8 * (int)sizeof(U);
    nd_fast_div<U> f;
    int l = 0;
    while (l < N && ((unsigned __int128)1 << l) < d)
        l++;
    f.d = d;
    f.m = (U)((((unsigned __int128)1 << N) * (((unsigned __int128)1 << l) - d)) / d + 1);
    f.sh1 = l < 1 ? l : 1;
    f.sh2 = l - 1 > 0 ? l - 1 : 0;
    return f;
}

__device__ __forceinline__ uint64_t nd_fast_div_mulhi(uint64_t a, uint64_t b)
{
    return __umul64hi(a, b);
}

__device__ __forceinline__ uint32_t nd_fast_div_mulhi(uint32_t a, uint32_t b)
{
    return __umulhi(a, b);
}

template <class U> __device__ __forceinline__ U nd_fast_div_q(const nd_fast_div<U> &f, U n)
{
    const U t = nd_fast_div_mulhi(f.m, n);
    return (t + ((n - t) >> f.sh1)) >> f.sh2;
}

/* The register copy of a thread's share of a row: N elements of T in 32-bit words, 16 bytes per
 * pack, so a 16-bit row takes half the registers of a float32 one (an array of 16-bit elements
 * would get one register each). get/set widen and round one element; e is a compile-time index
 * in every use, so each word stays in a register. */
template <class T, int N> struct nd_regrow {
    static constexpr int kWords = N * (int)sizeof(T) / 4;
    static constexpr int kElemBytes = (int)sizeof(T);
    static constexpr bool kExactSet = sizeof(T) == 4; /* set(e, f) keeps f exactly */
    uint32_t w[kWords];
    /* pack i (16 bytes of T) from its four words, as loaded */
    __device__ __forceinline__ void put_pack(int i, const uint32_t (&o)[4])
    {
#pragma unroll
        for (int k = 0; k < 4; k++)
            w[i * 4 + k] = o[k];
    }
    /* element h (0: low half, 1: high) of a word of two 16-bit elements, widened */
    static __device__ __forceinline__ float half_of(uint32_t u, int h) { return nd_half_of<T>(u, h); }
    /* the element-wise max of two words of two 16-bit elements (one HMNMX2; as fmaxf, a NaN
     * loses to a number, or with NAN a NaN wins) */
    template <bool NAN_WINS = false>
    static __device__ __forceinline__ uint32_t max2(uint32_t a, uint32_t b)
    {
        typedef typename std::conditional<std::is_same<T, __half>::value, __half2,
                                          __nv_bfloat162>::type P2;
        P2 pa, pb;
        memcpy(&pa, &a, 4);
        memcpy(&pb, &b, 4);
        pa = NAN_WINS ? __hmax2_nan(pa, pb) : __hmax2(pa, pb);
        memcpy(&a, &pa, 4);
        return a;
    }
    __device__ __forceinline__ float get(int e) const
    {
        /* bit operations only: taking the address of w[] would put the row in local memory */
        if constexpr (sizeof(T) == 4)
            return __uint_as_float(w[e]);
        else
            return half_of(w[e / 2], e & 1);
    }
    /* The largest element, or NaN where one is NaN (softmax's row max: a NaN among masked
     * scores must not leave a max of -inf), with packed 16-bit max where the type allows
     * (exact, and it keeps the compiler from widening the whole row to float registers at
     * once); the same instructions as a max that passes over NaN. */
    __device__ __forceinline__ float max_all() const
    {
        if constexpr (sizeof(T) == 4) {
            float m = __uint_as_float(w[0]);
#pragma unroll
            for (int i = 1; i < kWords; i++)
                m = nd_fmax_nan(m, __uint_as_float(w[i]));
            return m;
        } else {
            uint32_t m = w[0];
#pragma unroll
            for (int i = 1; i < kWords; i++)
                m = max2<true>(m, w[i]);
            return nd_fmax_nan(half_of(m, 0), half_of(m, 1));
        }
    }
    /* m[j] = the largest of element j of packs 0 .. n - 1 (1 <= n <= N / VEC), pack i holding
     * elements i * VEC .. i * VEC + VEC - 1: a column's max over the packs a thread holds of it
     * (softmax_axis.cu's slabs), packed for 16-bit elements (half an instruction an element
     * where widening each and taking fmaxf is two). NAN_WINS: a NaN wins, as in max_all. */
    template <int VEC, bool NAN_WINS = false>
    __device__ __forceinline__ void max_cols(int n, float (&m)[VEC]) const
    {
        static_assert(N % VEC == 0 && VEC % 2 == 0, "whole packs of whole words");
        constexpr int PACKS = N / VEC;
        if constexpr (sizeof(T) == 4) {
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                m[j] = __uint_as_float(w[j]);
#pragma unroll
                for (int i = 1; i < PACKS; i++)
                    if (i < n)
                        m[j] = NAN_WINS ? nd_fmax_nan(m[j], __uint_as_float(w[i * VEC + j]))
                                        : fmaxf(m[j], __uint_as_float(w[i * VEC + j]));
            }
        } else {
            constexpr int WP = VEC / 2; /* words a pack */
#pragma unroll
            for (int k = 0; k < WP; k++) {
                uint32_t a = w[k];
#pragma unroll
                for (int i = 1; i < PACKS; i++)
                    if (i < n)
                        a = max2<NAN_WINS>(a, w[i * WP + k]);
                m[2 * k] = half_of(a, 0);
                m[2 * k + 1] = half_of(a, 1);
            }
        }
    }
    __device__ __forceinline__ void set(int e, float v)
    {
        if constexpr (sizeof(T) == 4) {
            w[e] = __float_as_uint(v);
        } else {
            unsigned short b = std::is_same<T, __half>::value
                                   ? __half_as_ushort(__float2half_rn(v))
                                   : __bfloat16_as_ushort(__float2bfloat16_rn(v));
            w[e / 2] = (e & 1) ? ((w[e / 2] & 0xffffu) | ((uint32_t)b << 16))
                               : ((w[e / 2] & 0xffff0000u) | b);
        }
    }
};

/* A row's elements of T held as floats, widened as each pack arrives: twice the registers of
 * nd_regrow for 16-bit T, in exchange for set(e, f) keeping f exactly (softmax keeps its
 * exponentials instead of computing them again when it writes; nd_wide_regs). */
template <class T, int N> struct nd_regrow_wide {
    static constexpr int kElemBytes = (int)sizeof(T); /* of the row in memory */
    static constexpr bool kExactSet = true;
    static constexpr int kVec = 16 / (int)sizeof(T);
    float f[N];
    __device__ __forceinline__ void put_pack(int i, const uint32_t (&o)[4])
    {
        nd_regrow<T, 16 / sizeof(T)> p;
        p.put_pack(0, o);
#pragma unroll
        for (int j = 0; j < kVec; j++)
            f[i * kVec + j] = p.get(j);
    }
    __device__ __forceinline__ float get(int e) const { return f[e]; }
    __device__ __forceinline__ void set(int e, float v) { f[e] = v; }
    __device__ __forceinline__ float max_all() const /* as nd_regrow's: a NaN wins */
    {
        float m = f[0];
#pragma unroll
        for (int i = 1; i < N; i++)
            m = nd_fmax_nan(m, f[i]);
        return m;
    }
};

/* Two floats rounded to T and packed in one 32-bit word (low half first): one cvt.rn.f16x2 /
 * bf16x2 instruction for the 16-bit types. */
template <class T> __device__ __forceinline__ uint32_t nd_pack2(float lo, float hi)
{
    if constexpr (std::is_same<T, __half>::value) {
        __half2 h = __floats2half2_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    } else {
        __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
        uint32_t u;
        memcpy(&u, &h, 4);
        return u;
    }
}

/* One element of global memory through the read-only path (nd_ldg1) or evict-first
 * (nd_ldcs1), for loads under a guard (a bounds or null check). cuda_fp16.h and cuda_bf16.h give
 * __half and __nv_bfloat16 their __ldg and __ldcs as inline asm that is not volatile, which the
 * compiler may take for free of side effects and hoist above the guard: it did, in the exact
 * warp kernel of 8 float16 columns (ND_ROWS_EXACT), where an absent parameter's element load (a
 * null pointer) left its null check and the row loop (compute-sanitizer: a read of address 0).
 * 16-bit elements go through the unsigned short forms, which are volatile. */
template <class T> __device__ __forceinline__ T nd_from_bits16(unsigned short u)
{
    T t;
    memcpy(&t, &u, sizeof t);
    return t;
}
template <class T> __device__ __forceinline__ T nd_ldg1(const T *p)
{
    if constexpr (sizeof(T) == 2)
        return nd_from_bits16<T>(__ldg(reinterpret_cast<const unsigned short *>(p)));
    else
        return __ldg(p);
}
template <class T> __device__ __forceinline__ T nd_ldcs1(const T *p)
{
    if constexpr (sizeof(T) == 2)
        return nd_from_bits16<T>(__ldcs(reinterpret_cast<const unsigned short *>(p)));
    else
        return __ldcs(p);
}

template <class T> __device__ __forceinline__ float nd_load1(const T *p)
{
    return nd_to_float(nd_ldg1(p));
}

template <class T> __device__ __forceinline__ void nd_store1(T *p, float v)
{
    *p = nd_from_float<T>(v);
}

/* True when p is aligned to `bytes` (a power of two). Host and device. */
__host__ __device__ __forceinline__ bool nd_aligned(const void *p, size_t bytes)
{
    return ((uintptr_t)p & (bytes - 1)) == 0;
}

/* One bulk prefetch of bytes [p, p + n) into L2 (p 16-byte aligned, n a multiple of 16), for the
 * kernels that ask L2 for x a later block will read (the split kernel, the big block, the axis
 * kernels); nothing before sm_90. */
__device__ __forceinline__ void nd_prefetch_l2(const void *p, unsigned n)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Reductions. Combine functors work on K floats at once: a[i] = combine(a, b).
 * ------------------------------------------------------------------------------------------- */

struct nd_op_sum {
    template <int K> __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const
    {
#pragma unroll
        for (int i = 0; i < K; i++)
            a[i] += b[i];
    }
};

struct nd_op_max {
    template <int K> __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const
    {
#pragma unroll
        for (int i = 0; i < K; i++)
            a[i] = fmaxf(a[i], b[i]);
    }
};

/*
 * exp(d) for d = x - max <= 0 as one MUFU.EX2 (ex2.approx.ftz) of d * log2(e). Its bound, checked
 * against the tolerance rule: ex2.approx has a relative error below 2^-22; rounding d * log2(e)
 * adds at most |d| * 2^-24 (relative) to the result, 1.2e-6 at d = -20, where exp(d) is 2e-9.
 * So a result near 1 is within 3e-7 of exp(d) (far inside float32's 1e-5 and half an ulp of
 * float16 / bfloat16), and a result small enough for |d| to matter is far below the absolute
 * 1e-5 the rule grants. Results below 2^-126 flush to 0, also inside that absolute bound. The
 * accurate expf costs about three times the instructions, which the two-byte dtypes feel. Used by
 * softmax over any axis (softmax_axis.cu, softmax.cuh).
 */
__device__ __forceinline__ float nd_exp_le0(float d)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d * 1.4426950408889634f));
    return r;
}

/* The max a part's exps are taken against: its max m, or 0 where m is -inf (no elements, or all
 * -inf: masked scores), so each exp(x - 0) of that part is exp(-inf) = 0 and its sum 0, where
 * exp(-inf - -inf) would be NaN. Softmax's pair merges and every kernel that takes exps against
 * a part's own max use it. */
__device__ __forceinline__ float nd_exp_ref(float m) { return m == -INFINITY ? 0.0f : m; }

/*
 * exp(d) / s for d = x - max <= 0 and a column's sum s >= 1, given f = nd_exp_div_factor(s) =
 * -log2(s): one ex2.approx of fma(d, log2 e, f), where exp(d) * (1 / s) takes a multiplication
 * more an element (and a reciprocal with its slow path a column; lg2.approx is one instruction).
 * Its bound, as nd_exp_le0's: lg2.approx is within 2^-22 (absolute) of log2 s; the fma's result r
 * = d log2 e - log2 s rounds at 2^-24 of |r|, and |r| <= 17 wherever the output 2^r is above
 * float32's absolute 1e-5 (|r| < 1 where it is above 1/2); ex2.approx adds 2^-22 relative. So an
 * output is within 1e-6 of exp(d) / s relative, far inside float32's 1e-5 and half an ulp of
 * float16 / bfloat16. Results below 2^-126 flush to 0, as nd_exp_le0's. Used by softmax over a
 * non-last axis (softmax_axis.cu), whose 16-bit kernels issue an instruction for every byte or
 * two they move.
 */
__device__ __forceinline__ float nd_exp_div_factor(float s)
{
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s));
    return -r;
}
__device__ __forceinline__ float nd_exp_div(float d, float f)
{
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(d, 1.4426950408889634f, f)));
    return r;
}

/* Online-softmax pairs (max m, sum s of exp(x - m)) at a[2j], a[2j+1]: merging rescales each
 * side's sum to the larger max. An empty side is (-inf, 0). K is even.
 * ND_MERGE_SELECT 1: the all-empty case is a select instead of a branch (same bits otherwise).
 * The branch put each merge in its own branch region, so a thread folding several independent
 * chains of pairs ran them one after another (ncu, softmax_axis_slab's column combine). */
#ifndef ND_MERGE_SELECT
#define ND_MERGE_SELECT 1
#endif
struct nd_op_softmax_pair {
    template <int K> __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const
    {
        static_assert(K % 2 == 0, "softmax pairs come in (max, sum) twos");
#pragma unroll
        for (int i = 0; i < K; i += 2) {
            const float m = fmaxf(a[i], b[i]);
#if ND_MERGE_SELECT
            /* both empty (or all -inf): rescale against 0, not -inf (no inf - inf), so the sum
             * stays 0; a select, not a branch, so merges of independent pairs overlap */
            const float r = nd_exp_ref(m);
            a[i + 1] = a[i + 1] * exp2f((a[i] - r) * 1.4426950408889634f) +
                       b[i + 1] * exp2f((b[i] - r) * 1.4426950408889634f);
#else
            if (m == -INFINITY) /* both empty (or all -inf): keep the sum 0, avoid inf - inf */
                continue;
            a[i + 1] = a[i + 1] * exp2f((a[i] - m) * 1.4426950408889634f) +
                       b[i + 1] * exp2f((b[i] - m) * 1.4426950408889634f);
#endif
            a[i] = m;
        }
    }
};

/* Whether op(a, b) and op(b, a) give the same bits (Op::kCommutative; false when absent): an
 * xor-shuffle all-reduce then needs no lane ordering. */
template <class Op, class = void> struct nd_op_commutative : std::false_type {};
template <class Op>
struct nd_op_commutative<Op, std::void_t<decltype(Op::kCommutative)>>
    : std::integral_constant<bool, Op::kCommutative> {};

/* All-reduce over aligned groups of W consecutive lanes (W a power of two <= 32). Every lane of
 * the group ends with the same result. All 32 lanes of the warp must take part. */
template <int W, int K, class Op>
__device__ __forceinline__ void nd_warp_allreduce(float (&v)[K], Op op)
{
#pragma unroll
    for (int mask = W / 2; mask > 0; mask /= 2) {
        float o[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            o[i] = __shfl_xor_sync(0xffffffffu, v[i], mask, W);
        if constexpr (nd_op_commutative<Op>::value) {
            op(v, o);
            continue;
        }
        /* xor pairs see (a, b) and (b, a); combine in lane order so both get the same bits */
        bool low = (threadIdx.x & mask) == 0;
        float lo[K], hi[K];
#pragma unroll
        for (int i = 0; i < K; i++) {
            lo[i] = low ? v[i] : o[i];
            hi[i] = low ? o[i] : v[i];
        }
        op(lo, hi);
#pragma unroll
        for (int i = 0; i < K; i++)
            v[i] = lo[i];
    }
}

/* Shared memory one block all-reduce needs: two rounds' worth of per-warp slots, so consecutive
 * reductions need only one __syncthreads each (round r writes slots[r & 1]; the barrier of round
 * r+1 separates round r's reads from round r+2's writes). */
template <int K> struct nd_block_reduce_smem {
    float slots[2][32][K];
};

/* All-reduce over the whole block (blockDim.x a multiple of 32, all threads take part). `round`
 * counts the calls that share this smem, starting at 0. */
template <int K, class Op>
__device__ __forceinline__ void nd_block_allreduce(float (&v)[K], Op op, nd_block_reduce_smem<K> &sm,
                                                   int round)
{
    nd_warp_allreduce<32, K>(v, op);
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    float(*slot)[K] = sm.slots[round & 1];
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int i = 0; i < K; i++)
            slot[warp][i] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < K; i++)
        v[i] = slot[0][i];
    for (int w = 1; w < nwarps; w++) {
        float o[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            o[i] = slot[w][i];
        op(v, o);
    }
}

/* ---------------------------------------------------------------------------------------------
 * mbarrier and bulk-copy primitives (PTX ISA: mbarrier, cp.async.bulk; sm_90)
 * ------------------------------------------------------------------------------------------- */

__device__ __forceinline__ unsigned nd_smem_addr(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void nd_mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(nd_smem_addr(bar)), "r"(count)
                 : "memory");
}
/* the initialised barriers visible to the other threads and to the copy engine (async proxy) */
__device__ __forceinline__ void nd_mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void nd_mbar_expect_tx(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(nd_smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}
/* Wait for the phase of parity `parity` to complete (acquire: the tile's bytes are visible). */
__device__ __forceinline__ void nd_mbar_wait(uint64_t *bar, unsigned parity)
{
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(nd_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
}
/* `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst,
 * completing on bar's transaction count; EVICT_FIRST: with an L2 evict-first policy (x that is
 * read once). */
template <bool EVICT_FIRST>
__device__ __forceinline__ void nd_bulk_load(void *dst, const void *src, unsigned bytes, uint64_t *bar)
{
    if constexpr (EVICT_FIRST) {
        uint64_t pol;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                     " [%0], [%1], %2, [%3], %4;" ::"r"(nd_smem_addr(dst)),
                     "l"(src), "r"(bytes), "r"(nd_smem_addr(bar)), "l"(pol)
                     : "memory");
    } else {
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1], %2, [%3];" ::"r"(nd_smem_addr(dst)),
                     "l"(src), "r"(bytes), "r"(nd_smem_addr(bar))
                     : "memory");
    }
}

/* cp.async (sm_80+): 16 bytes from global to this thread's shared-memory slot, bypassing L1;
 * copies are grouped by commit and waited for by group (the row engine's prefetch, the resident
 * slabs' float32 rounds). */
__device__ __forceinline__ void nd_cp_async16(uint4 *smem, const void *g)
{
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void nd_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void nd_cp_async_wait_all()
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}
/* Wait until at most n of this thread's cp.async groups are pending (fewer where n > 6). */
__device__ __forceinline__ void nd_cp_async_wait(int n)
{
    switch (n) {
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    default:
        if (n > 6)
            asm volatile("cp.async.wait_group 6;" ::: "memory");
        else
            asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
}

/* ---------------------------------------------------------------------------------------------
 * Flag words: 64-bit words that blocks of one launch publish to each other in global memory.
 * st/ld.relaxed.gpu.b64 are single-copy atomic, so a word is its own flag: the workspace starts
 * as all ones (ND_SPLIT_EMPTY, which a publisher never writes) and a reader that sees another
 * value sees the whole word. No fence, no counter.
 * ------------------------------------------------------------------------------------------- */
static constexpr unsigned long long ND_SPLIT_EMPTY = ~0ull;

/* Word w of a slot from K floats: floats 2w and 2w + 1 (0 past K), never ND_SPLIT_EMPTY. */
template <int K> __device__ __forceinline__ unsigned long long nd_split_word(const float (&v)[K], int w)
{
    const unsigned long long lo = __float_as_uint(v[2 * w]);
    const unsigned long long hi = 2 * w + 1 < K ? __float_as_uint(v[2 * w + 1 < K ? 2 * w + 1 : 0]) : 0u;
    const unsigned long long word = lo | hi << 32;
    return word == ND_SPLIT_EMPTY ? ND_SPLIT_EMPTY - 1 : word;
}

__device__ __forceinline__ void nd_split_store(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long nd_split_load(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

/* The word at p once its publisher has written it (spinning while it is ND_SPLIT_EMPTY; SLEEP:
 * nanoseconds to sleep between two looks, 0 none). */
template <int SLEEP = 0>
__device__ __forceinline__ unsigned long long nd_split_wait(const unsigned long long *p)
{
    unsigned long long v;
    while ((v = nd_split_load(p)) == ND_SPLIT_EMPTY) {
        if constexpr (SLEEP > 0)
            __nanosleep(SLEEP);
    }
    return v;
}

/* Leaving a cluster kernel in two halves (sm_90): nd_cluster_arrive_relaxed() once this block
 * has used the last value it read from another block's shared memory (used, so the read has
 * completed: issue is in order, so a store of the value or a barrier after it is enough), and
 * nd_cluster_wait() just before the block exits. No block's shared memory goes away while another
 * still reads it, and the arrive needs no release fence: cluster.sync() in its place (arrive with
 * release semantics, then wait) waits for every store the block has in flight, its outputs
 * included. Every thread of the block calls both, in that order. */
__device__ __forceinline__ void nd_cluster_arrive_relaxed()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void nd_cluster_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

/* Shared memory a cluster all-reduce needs on top of the block's: one slot per round parity,
 * read by the other blocks of the cluster through distributed shared memory. */
template <int K> struct nd_cluster_reduce_smem {
    nd_block_reduce_smem<K> block;
    float slots[2][K];
};

/* All-reduce over every thread of a thread-block cluster (sm_90). Every thread of every block of
 * the cluster ends with the same bits. Before a block exits, the cluster must sync once more
 * (cooperative_groups::this_cluster().sync()) so no block's shared memory goes away while another
 * still reads it; consecutive rounds need no extra barrier (see nd_block_reduce_smem). */
template <int K, class Op>
__device__ __forceinline__ void nd_cluster_allreduce(float (&v)[K], Op op,
                                                     nd_cluster_reduce_smem<K> &sm, int round)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    nd_block_allreduce<K>(v, op, sm.block, round);
    float *mine = sm.slots[round & 1];
    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < K; i++)
            mine[i] = v[i];
    }
    cluster.sync();
    const unsigned n = cluster.num_blocks();
    const float *r0 = cluster.map_shared_rank(mine, 0);
#pragma unroll
    for (int i = 0; i < K; i++)
        v[i] = r0[i];
    for (unsigned r = 1; r < n; r++) {
        const float *rr = cluster.map_shared_rank(mine, r);
        float o[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            o[i] = rr[i];
        op(v, o);
    }
#else
    nd_block_allreduce<K>(v, op, sm.block, round);
#endif
}

#endif /* ND_CUDA_COMMON_CUH */
