/*
 * prelu.cu - PReLU, y = x > 0 ? x : alpha * x, with one shared alpha or one alpha per channel of
 * an (N, C, ...) tensor viewed as (outer, channels, inner).
 *
 * Follows OneFlow's PReLU article (seed 003): the tensor is processed in 16-byte packs, and the
 * alpha index is found once per pack, not once per element. Where we depart:
 *
 *   - the seed computes (index / inner_size) % alpha_size with two integer divisions per pack and
 *     falls back to its element-wise kernel whenever inner is not a multiple of the pack (its
 *     (96,64,111,111) case ran no faster than PyTorch). Here the tensor is walked as one flat array
 *     in packs aligned to 16 bytes, whatever inner is: the plane and the channel of a pack come
 *     from two divisions by invariant divisors done as multiply-high and shifts (magic numbers
 *     computed once on the host, valid for 64-bit indices); a pack that crosses into the next
 *     plane selects per element between two alphas (planes shorter than a pack step the channel
 *     element by element), with no division. Almost every pack of a plane of a few packs or more
 *     lies within it and costs one alpha load;
 *   - the pointer need not be 16-byte aligned: the few elements before the first aligned pack
 *     (and after the last whole one) are done one by one by the first threads of the grid, so an
 *     offset tensor still runs on the packed path. Only x and y that are misaligned by different
 *     amounts fall back to narrower packs;
 *   - each thread issues prelu_policy::unroll<T>() independent pack loads before it uses any.
 */
#include <stdint.h>

#include "cuda_common.cuh"

namespace {

/* Tuned numbers for this op, in one place. */
/*
 * H200, bench_gpu --suite prelu, three runs each, old and new binaries alternating: one pack a
 * thread below unroll2_min_packs and 32-bit index arithmetic below 2^32 elements took float16 /
 * bfloat16 (96,512,14,14) from 79 / 78% to 89 / 87% of the copy ceiling, (96,512,7,7) from 74 /
 * 72% to 81 / 79%, (96,256,28,28) from 93 to 96%; the large shapes moved -0.7 to +0.7 points,
 * float32 within 0.7 (bench/results/prelu_unroll_h200.txt). Rejected after: the pack that
 * crosses into the next plane done in pairs (__hmul2 with a per-pair alpha) like a whole pack,
 * and the whole pack through the same code: 16-bit (96,512,14,14) 89 -> 86%, (96,512,7,7) 81 ->
 * 79% (three runs each, same host).
 *
 * Before that, H200, one run, % of a same-run copy ceiling (a one-pack-per-thread copy kernel, 4.25 TB/s),
 * against 512 threads, 2 packs per thread and default-policy loads and stores: 256 threads,
 * evict-first loads and stores and 1 pack per thread took float32 from 95-97% to 99-100% on the
 * large shapes and (96,512,7,7) from 90% to 96.5%; the 16-bit per-channel shapes with 1 pack lost 1-2 points on
 * the large shapes (their per-pack alpha lookup is twice the work per byte) and gained 10 at
 * (96,512,7,7); with 2 packs and evict-first accesses (512 threads) they gained 0.5-1 on the
 * large shapes and nothing at (96,512,7,7). 16-bit keeps 2 packs per thread.
 */
struct prelu_policy {
    static constexpr int block_threads = 256;
    /* Packs per thread, loaded before any is used: 2 for 16-bit tensors of at least
     * unroll2_min_packs packs, else 1 (a small tensor needs every thread it can get). */
    template <typename T> __host__ __device__ static constexpr int unroll() { return sizeof(T) == 4 ? 1 : 2; }
    static constexpr int64_t unroll2_min_packs = (int64_t)2 << 20;
    /* Evict-first loads and stores: x and y are touched once. */
    static constexpr bool streaming = true;
};

template <typename T, int P>
__device__ __forceinline__ nd_pack<T, P> load_pack(const nd_pack<T, P> *p)
{
    typedef typename nd_word<sizeof(T) * P>::type W;
    union { W w; nd_pack<T, P> pk; } u;
    u.w = prelu_policy::streaming ? __ldcs(reinterpret_cast<const W *>(p))
                                  : __ldg(reinterpret_cast<const W *>(p));
    return u.pk;
}

template <typename T, int P>
__device__ __forceinline__ void store_pack(nd_pack<T, P> *p, const nd_pack<T, P> &v)
{
    typedef typename nd_word<sizeof(T) * P>::type W;
    union { W w; nd_pack<T, P> pk; } u;
    u.pk = v;
    if (prelu_policy::streaming)
        __stcs(reinterpret_cast<W *>(p), u.w);
    else
        *reinterpret_cast<W *>(p) = u.w;
}

/*
 * n / d for 0 <= n < 2^N and a fixed 1 <= d < 2^N, N the bits of U (32 or 64), without a divide
 * instruction (Granlund and Montgomery, "Division by invariant integers using multiplication",
 * fig. 4.1):
 *   l = ceil(log2 d), m = floor(2^N * (2^l - d) / d) + 1,
 *   t = mulhi(m, n), q = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0).
 * The 32-bit form is one multiply-high, which is what most tensors need; a 64-bit one is several
 * instructions.
 */
template <class U> struct fast_div {
    U d, m;
    int sh1, sh2;
};

template <class U> static fast_div<U> fast_div_make(U d)
{
    constexpr int N = 8 * (int)sizeof(U);
    fast_div<U> f;
    int l = 0;
    while (l < N && ((unsigned __int128)1 << l) < d)
        l++;
    f.d = d;
    f.m = (U)((((unsigned __int128)1 << N) * (((unsigned __int128)1 << l) - d)) / d + 1);
    f.sh1 = l < 1 ? l : 1;
    f.sh2 = l - 1 > 0 ? l - 1 : 0;
    return f;
}

__device__ __forceinline__ uint64_t fast_div_mulhi(uint64_t a, uint64_t b)
{
    return __umul64hi(a, b);
}

__device__ __forceinline__ uint32_t fast_div_mulhi(uint32_t a, uint32_t b)
{
    return __umulhi(a, b);
}

template <class U> __device__ __forceinline__ U fast_div_q(const fast_div<U> &f, U n)
{
    const U t = fast_div_mulhi(f.m, n);
    return (t + ((n - t) >> f.sh1)) >> f.sh2;
}

struct prelu_geom {
    int64_t n;       /* elements */
    int64_t head;    /* elements before the first aligned pack */
    int64_t packs;   /* whole packs after the head */
    int64_t tail;    /* elements after the last pack */
    int64_t inner, channels;
    fast_div<uint64_t> div_inner, div_channels;
    fast_div<uint32_t> div32_inner, div32_channels; /* when n < 2^32 */
};

/* ------------------------------------------------------------------------------------------- */
/* kernels                                                                                       */
/* ------------------------------------------------------------------------------------------- */

template <typename T>
__device__ __forceinline__ T prelu_one(T v, float a)
{
    float f = nd_to_float(v);
    return f > 0.0f ? v : nd_from_float<T>(a * f);
}

/* A whole pack with one alpha. For the two-byte types two elements at a time in their own
 * arithmetic: the product of two float16 (bfloat16) values is exact in float32, so the paired
 * multiply, rounded once, gives the same bits as the float32 route, in a third of the
 * instructions; the select is a mask from the paired compare. */
template <typename T, int P>
__device__ __forceinline__ nd_pack<T, P> prelu_pack(const nd_pack<T, P> &v, float a)
{
    nd_pack<T, P> o;
#pragma unroll
    for (int j = 0; j < P; j++)
        o.v[j] = prelu_one(v.v[j], a);
    return o;
}

template <typename T2, int P>
__device__ __forceinline__ void prelu_pairs(const unsigned (&x)[P / 2], unsigned (&y)[P / 2],
                                            T2 a2)
{
    const T2 zero = T2();
#pragma unroll
    for (int j = 0; j < P / 2; j++) {
        T2 xv = *reinterpret_cast<const T2 *>(&x[j]);
        T2 pv = __hmul2(xv, a2);
        unsigned mask = __hgt2_mask(xv, zero);
        y[j] = (x[j] & mask) | (*reinterpret_cast<unsigned *>(&pv) & ~mask);
    }
}

template <>
__device__ __forceinline__ nd_pack<__half, 8> prelu_pack(const nd_pack<__half, 8> &v, float a)
{
    union { nd_pack<__half, 8> p; unsigned u[4]; } in, out;
    in.p = v;
    prelu_pairs<__half2, 8>(in.u, out.u, __float2half2_rn(a));
    return out.p;
}

template <>
__device__ __forceinline__ nd_pack<__nv_bfloat16, 8> prelu_pack(const nd_pack<__nv_bfloat16, 8> &v,
                                                                float a)
{
    union { nd_pack<__nv_bfloat16, 8> p; unsigned u[4]; } in, out;
    in.p = v;
    prelu_pairs<__nv_bfloat162, 8>(in.u, out.u, __float2bfloat162_rn(a));
    return out.p;
}

/* Channel of flat element e, and e's index within its plane; W32: the tensor has fewer than 2^32
 * elements, and the 32-bit divisions do. */
template <bool W32>
__device__ __forceinline__ void locate(const prelu_geom &g, int64_t e, int64_t &c, int64_t &i)
{
    if (W32) {
        const uint32_t plane = fast_div_q(g.div32_inner, (uint32_t)e);
        i = (int64_t)((uint32_t)e - plane * (uint32_t)g.inner);
        const uint32_t q = fast_div_q(g.div32_channels, plane);
        c = (int64_t)(plane - q * (uint32_t)g.channels);
    } else {
        uint64_t plane = fast_div_q(g.div_inner, (uint64_t)e);
        i = e - (int64_t)plane * g.inner;
        uint64_t q = fast_div_q(g.div_channels, plane);
        c = (int64_t)(plane - q * (uint64_t)g.channels);
    }
}

template <typename T, int P, bool SHARED, int U, bool W32>
__global__ void __launch_bounds__(prelu_policy::block_threads)
prelu_kernel(const T *__restrict__ x, T *__restrict__ y, const T *__restrict__ alpha,
             prelu_geom g)
{
    using pack = nd_pack<T, P>;
    const float a0 = SHARED ? nd_to_float(alpha[0]) : 0.0f;

    /* The head and tail elements, one per thread of the first block(s). */
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (tid < g.head + g.tail) {
        int64_t e = tid < g.head ? tid : g.head + g.packs * P + (tid - g.head);
        float a = a0;
        if (!SHARED) {
            int64_t c, i;
            locate<W32>(g, e, c, i);
            a = nd_to_float(alpha[c]);
        }
        y[e] = prelu_one(x[e], a);
    }

    const pack *xp = reinterpret_cast<const pack *>(x + g.head);
    pack *yp = reinterpret_cast<pack *>(y + g.head);
    const int64_t first = (int64_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    pack v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t q = first + (int64_t)u * blockDim.x;
        if (q < g.packs)
            v[u] = load_pack<T, P>(xp + q);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t q = first + (int64_t)u * blockDim.x;
        if (q >= g.packs)
            continue;
        pack o;
        if (SHARED) {
            o = prelu_pack<T, P>(v[u], a0);
        } else {
            int64_t c, i;
            locate<W32>(g, g.head + q * P, c, i);
            if (i + P <= g.inner) { /* the whole pack lies in one plane: one alpha */
                o = prelu_pack<T, P>(v[u], nd_to_float(alpha[c]));
            } else if (g.inner >= P) { /* it crosses into the next plane once: two alphas */
                const float a_lo = nd_to_float(alpha[c]);
                const float a_hi = nd_to_float(alpha[c + 1 == g.channels ? 0 : c + 1]);
                const int split = (int)(g.inner - i); /* elements left in the first plane */
#pragma unroll
                for (int j = 0; j < P; j++)
                    o.v[j] = prelu_one(v[u].v[j], j < split ? a_lo : a_hi);
            } else { /* planes shorter than a pack: step the channel element by element */
#pragma unroll
                for (int j = 0; j < P; j++) {
                    if (i == g.inner) {
                        i = 0;
                        c = c + 1 == g.channels ? 0 : c + 1;
                    }
                    o.v[j] = prelu_one(v[u].v[j], nd_to_float(alpha[c]));
                    i++;
                }
            }
        }
        store_pack<T, P>(yp + q, o);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* launchers                                                                                     */
/* ------------------------------------------------------------------------------------------- */

template <typename T, int P, int U, bool W32>
static cudaError_t launch_kernel(const nd_prelu_args *a, const prelu_geom &g, cudaStream_t stream)
{
    constexpr int B = prelu_policy::block_threads;
    int64_t blocks = (g.packs + (int64_t)B * U - 1) / ((int64_t)B * U);
    int64_t edge_blocks = (g.head + g.tail + B - 1) / B;
    if (blocks < edge_blocks)
        blocks = edge_blocks;
    if (blocks > INT32_MAX)
        return cudaErrorInvalidConfiguration;
    ND_PLAN("prelu pack=%d unroll=%d index=%s block=%d grid=%lld", P, U, W32 ? "32-bit" : "64-bit",
            B, (long long)blocks);
    if (a->alpha_count == 1)
        prelu_kernel<T, P, true, U, W32><<<(unsigned)blocks, B, 0, stream>>>(
            (const T *)a->x, (T *)a->y, (const T *)a->alpha, g);
    else
        prelu_kernel<T, P, false, U, W32><<<(unsigned)blocks, B, 0, stream>>>(
            (const T *)a->x, (T *)a->y, (const T *)a->alpha, g);
    return cudaGetLastError();
}

/* Packs per thread and index width by size (prelu_policy). */
template <typename T, int P>
static cudaError_t launch_packed(const nd_prelu_args *a, const prelu_geom &g, cudaStream_t stream)
{
    constexpr int U = prelu_policy::unroll<T>();
    const bool w32 = g.n < ((int64_t)1 << 32);
    if (U > 1 && g.packs >= prelu_policy::unroll2_min_packs)
        return w32 ? launch_kernel<T, P, U, true>(a, g, stream)
                   : launch_kernel<T, P, U, false>(a, g, stream);
    return w32 ? launch_kernel<T, P, 1, true>(a, g, stream)
               : launch_kernel<T, P, 1, false>(a, g, stream);
}

/* The widest pack (16, 4 bytes, or one element) at which x and y reach alignment together. */
template <typename T>
static cudaError_t launch_typed(const nd_prelu_args *a, prelu_geom &g, cudaStream_t stream)
{
    const uintptr_t xa = (uintptr_t)a->x, ya = (uintptr_t)a->y;
    constexpr int P16 = 16 / sizeof(T), P4 = 4 / sizeof(T) > 0 ? 4 / sizeof(T) : 1;
    int P = 1;
    if ((xa - ya) % 16 == 0)
        P = P16;
    else if (P4 > 1 && (xa - ya) % 4 == 0)
        P = P4;
    if (P > 1) {
        uintptr_t bytes = (uintptr_t)P * sizeof(T);
        g.head = (int64_t)(((bytes - xa % bytes) % bytes) / sizeof(T));
        if (g.head > g.n)
            g.head = g.n;
    } else {
        g.head = 0;
    }
    g.packs = (g.n - g.head) / P;
    g.tail = g.n - g.head - g.packs * P;
    if (P == P16)
        return launch_packed<T, P16>(a, g, stream);
    if (P4 > 1 && P == P4)
        return launch_packed<T, P4>(a, g, stream);
    return launch_packed<T, 1>(a, g, stream);
}

} /* namespace */

nd_status nd_cuda_prelu(const nd_prelu_args *a, void *stream, nd_error *err)
{
    nd_status st = nd_prelu_args_check(a, err);
    if (st != ND_OK)
        return st;
    prelu_geom g = {};
    g.n = a->outer * a->channels * a->inner;
    g.inner = a->inner;
    g.channels = a->channels;
    g.div_inner = fast_div_make((uint64_t)a->inner);
    g.div_channels = fast_div_make((uint64_t)a->channels);
    if (g.n < ((int64_t)1 << 32)) {
        g.div32_inner = fast_div_make((uint32_t)a->inner);
        g.div32_channels = fast_div_make((uint32_t)a->channels);
    }
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t ce;
    switch (a->dtype) {
    case ND_FLOAT16: ce = launch_typed<__half>(a, g, s); break;
    case ND_BFLOAT16: ce = launch_typed<__nv_bfloat16>(a, g, s); break;
    default: ce = launch_typed<float>(a, g, s); break;
    }
    if (ce != cudaSuccess)
        return nd_error_set(err, ND_EDEVICE, "prelu (outer=%lld channels=%lld inner=%lld): %s",
                            (long long)a->outer, (long long)a->channels, (long long)a->inner,
                            cudaGetErrorString(ce));
    return ND_OK;
}
