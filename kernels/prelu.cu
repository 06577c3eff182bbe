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
 *   - each thread issues prelu_policy::unroll<T>() independent pack loads before it uses any,
 *     keeps them as the words it loaded until it computes, and (16-bit) loads every pack's
 *     alphas before computing any output, so the alpha loads fly with x's.
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
 * Before that, H200, one run, % of a same-run copy ceiling (a one-pack-per-thread copy kernel,
 * 4.25 TB/s), against 512 threads, 2 packs per thread and default-policy loads and stores: 256
 * threads, evict-first loads and stores and 1 pack per thread took float32 from 95-97% to
 * 99-100% on the large shapes and (96,512,7,7) from 90% to 96.5%; the 16-bit per-channel shapes
 * with 1 pack lost 1-2 points on the large shapes (their per-pack alpha lookup is twice the work
 * per byte) and gained 10 at (96,512,7,7); with 2 packs and evict-first accesses (512 threads)
 * they gained 0.5-1 on the large shapes and nothing at (96,512,7,7). 16-bit keeps 2 packs per
 * thread.
 *
 * Then (stop 34, bench/results/prelu_early_h200.txt; ab_rounds.sh, three rounds, median % of the
 * same-run copy ceiling). ncu on an H200 (float16 (96,512,14,14)) showed each warp waiting for
 * its x load right after issuing it: the 16-bit pack was split into halves (PRMT) inside the
 * load's bounds branch, so the locate arithmetic and the alpha load came only after x arrived,
 * and the warp then waited a second time, for its alpha; 152 instructions a warp where the copy
 * kernel takes 21. Now x stays in its load words, 16-bit packs get their alphas first (both
 * alphas of a pack that crosses a plane, then paired multiplies with a per-pair alpha), and
 * blocks are 128 threads instead of 256:
 *                                 H200 float16 / bfloat16       H100 float16 / bfloat16
 *   (96,512,7,7)                  81.6 / 78.5 -> 90.8 / 90.6    91.2 / 89.6 -> 92.8 / 92.8
 *   (96,512,14,14)                89.6 / 87.0 -> 96.4 / 96.5    98.5 / 98.2 -> 97.5 / 97.4
 *   (96,256,28,28) .. (96,64,112,112)  96.3-97.1 -> 97.1-99.3   98.9-99.6 -> 98.7-99.2
 *   shared alpha, 16-bit          96.9 / 97.0 -> 99.4 / 99.3    99.4 / 99.4 -> 99.3 / 99.4
 * 128-thread blocks alone gave the large 16-bit shapes +1.5-2.6 on the H200 and the small ones
 * +0.2-0.7; 512 lost 0-2.7. float32 keeps its alphas in the output loop (loaded early it lost
 * 0.7-2.3 points on the H200 at (96,512,7,7) and (96,512,14,14)); its plain pack needs no
 * conversion, so its alpha load already flew with x; float32 moved -0.2 to +0.6 (H200), -0.2
 * to 0 (H100).
 *
 * Then (stop 38, H100, five alternating rounds, bench/results/prelu_ln128_h100.txt): blocks of 64
 * or 256 threads against 128 (ND_PRELU_BLOCK): (96,512,7,7) float16 / bfloat16 92.8 / 92.7 ->
 * 92.8 / 92.7 (64) and 92.5 / 92.4 (256), the other shapes within 0.5. Kept 128.
 * Then (H200, three alternating rounds, bench/results/prelu_unroll2_small_h200.txt): two packs a
 * thread at every size (ND_PRELU_UNROLL2_MIN_PACKS 0), so (96,512,7,7)'s blocks fit the device in
 * one wave: float16 / bfloat16 (96,512,7,7) 91.4 / 91.3 -> 91.7 / 91.2, (96,512,14,14) 96.4 /
 * 96.4 -> 95.1 / 95.1. Kept one pack. Again (stop 55, prelu_u2_h200.txt): (96,512,7,7) 90.7 /
 * 90.7 -> 91.2 / 90.9, (96,512,14,14) -1.0 to -1.2; in blocks of 256 as well, every 16-bit shape
 * lost 1.2-2.7.
 * Then (H200, three alternating rounds, bench/results/prelu_pairs31_h200.txt): the 16-bit
 * per-channel packs of tensors under 2^31 elements in a third fewer instructions (static SASS on
 * a (96,512,7,7) pack's path 105-138 -> 82): 32-bit index arithmetic throughout, each division a
 * multiply-high and a shift, the two alphas of a pack kept as one 16-bit word pair and each
 * pair's taken by one prmt, no branch between packs that cross a plane and packs that do not.
 * float16 / bfloat16 (96,512,7,7) 91.3 / 91.2 -> 92.2 / 91.6, (96,512,14,14) +0.1 / +0.2,
 * (96,256,28,28) -1.1 / -1.3, (96,128,56,56) -0.8 / -0.4: the small tensors do not wait on the
 * SM issuing their instructions. Not kept.
 */
#ifndef ND_PRELU_BLOCK /* prelu_policy::block_threads */
#define ND_PRELU_BLOCK 128
#endif
#ifndef ND_PRELU_UNROLL2_MIN_PACKS /* prelu_policy::unroll2_min_packs */
#define ND_PRELU_UNROLL2_MIN_PACKS ((int64_t)2 << 20)
#endif
struct prelu_policy {
    static constexpr int block_threads = ND_PRELU_BLOCK;
    /* whether each thread loads every pack's alphas before computing any output (16-bit) or
     * each pack's with its output (float32) */
    template <typename T> __host__ __device__ static constexpr bool early_alpha()
    {
        return sizeof(T) == 2;
    }
    /* Packs per thread, loaded before any is used: 2 for 16-bit tensors of at least
     * unroll2_min_packs packs, else 1 (a small tensor needs every thread it can get). */
    template <typename T> __host__ __device__ static constexpr int unroll() { return sizeof(T) == 4 ? 1 : 2; }
    static constexpr int64_t unroll2_min_packs = ND_PRELU_UNROLL2_MIN_PACKS;
    /* Evict-first loads and stores: x and y are touched once. */
    static constexpr bool streaming = true;
};

/* A pack as the word it is loaded and stored as (uint4 for 16 bytes). The kernel keeps x in this
 * form until it computes, so no conversion makes a thread wait for its load early. */
template <typename T, int P> using pack_word = typename nd_word<sizeof(T) * P>::type;

/* The same pack as elements, where the arithmetic goes element by element. */
template <typename T, int P> union pack_view {
    pack_word<T, P> w;
    nd_pack<T, P> pk;
};

template <typename T, int P>
__device__ __forceinline__ pack_word<T, P> load_word(const pack_word<T, P> *p)
{
    return prelu_policy::streaming ? __ldcs(p) : __ldg(p);
}

template <typename T, int P>
__device__ __forceinline__ void store_word(pack_word<T, P> *p, pack_word<T, P> w)
{
    if (prelu_policy::streaming)
        __stcs(p, w);
    else
        *p = w;
}

struct prelu_geom {
    int64_t n;       /* elements */
    int64_t head;    /* elements before the first aligned pack */
    int64_t packs;   /* whole packs after the head */
    int64_t tail;    /* elements after the last pack */
    int64_t inner, channels;
    nd_fast_div<uint64_t> div_inner, div_channels;
    nd_fast_div<uint32_t> div32_inner, div32_channels; /* when n < 2^32 */
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

/* A pack as loaded (W), with one alpha (whole), or with alpha lo for its first n_lo elements
 * and hi for the rest (split: the pack that crosses into the next plane). For 16-byte packs of
 * the two-byte types, two elements at a time in their own arithmetic: the product of two float16
 * (bfloat16) values is exact in float32, so the paired multiply, rounded once, gives the same
 * bits as the float32 route, in a third of the instructions; the select is a mask from the
 * paired compare. Other packs go element by element in float. */
template <typename T, int P> struct prelu_word_ops {
    typedef pack_word<T, P> W;
    static __device__ __forceinline__ W whole(W w, float a) { return split(w, a, a, P); }
    static __device__ __forceinline__ W split(W w, float lo, float hi, int n_lo)
    {
        pack_view<T, P> in, out;
        in.w = w;
#pragma unroll
        for (int j = 0; j < P; j++)
            out.pk.v[j] = prelu_one(in.pk.v[j], j < n_lo ? lo : hi);
        return out.w;
    }
};

template <typename T2> __device__ __forceinline__ T2 prelu_pair_alpha(float a, float b);
template <> __device__ __forceinline__ __half2 prelu_pair_alpha<__half2>(float a, float b)
{
    return __floats2half2_rn(a, b);
}
template <>
__device__ __forceinline__ __nv_bfloat162 prelu_pair_alpha<__nv_bfloat162>(float a, float b)
{
    return __floats2bfloat162_rn(a, b);
}

template <typename T2> __device__ __forceinline__ unsigned prelu_pair(unsigned x, T2 a2)
{
    const T2 xv = *reinterpret_cast<const T2 *>(&x);
    T2 pv = __hmul2(xv, a2);
    const unsigned mask = __hgt2_mask(xv, T2());
    return (x & mask) | (*reinterpret_cast<unsigned *>(&pv) & ~mask);
}

/* 16-byte packs of a two-byte type: four pairs in a uint4. */
template <typename T, typename T2> struct prelu_word_ops_pairs {
    static __device__ __forceinline__ uint4 whole(uint4 w, float a)
    {
        const T2 a2 = prelu_pair_alpha<T2>(a, a);
        return make_uint4(prelu_pair(w.x, a2), prelu_pair(w.y, a2), prelu_pair(w.z, a2),
                          prelu_pair(w.w, a2));
    }
    static __device__ __forceinline__ uint4 split(uint4 w, float lo, float hi, int n_lo)
    {
#define ND_PRELU_PAIR(k, x) \
    prelu_pair(x, prelu_pair_alpha<T2>(2 * k < n_lo ? lo : hi, 2 * k + 1 < n_lo ? lo : hi))
        return make_uint4(ND_PRELU_PAIR(0, w.x), ND_PRELU_PAIR(1, w.y), ND_PRELU_PAIR(2, w.z),
                          ND_PRELU_PAIR(3, w.w));
#undef ND_PRELU_PAIR
    }
};
template <> struct prelu_word_ops<__half, 8> : prelu_word_ops_pairs<__half, __half2> {};
template <>
struct prelu_word_ops<__nv_bfloat16, 8> : prelu_word_ops_pairs<__nv_bfloat16, __nv_bfloat162> {};

/* Channel of flat element e, and e's index within its plane; W32: the tensor has fewer than 2^32
 * elements, and the 32-bit divisions do. */
template <bool W32>
__device__ __forceinline__ void locate(const prelu_geom &g, int64_t e, int64_t &c, int64_t &i)
{
    if (W32) {
        const uint32_t plane = nd_fast_div_q(g.div32_inner, (uint32_t)e);
        i = (int64_t)((uint32_t)e - plane * (uint32_t)g.inner);
        const uint32_t q = nd_fast_div_q(g.div32_channels, plane);
        c = (int64_t)(plane - q * (uint32_t)g.channels);
    } else {
        uint64_t plane = nd_fast_div_q(g.div_inner, (uint64_t)e);
        i = e - (int64_t)plane * g.inner;
        uint64_t q = nd_fast_div_q(g.div_channels, plane);
        c = (int64_t)(plane - q * (uint64_t)g.channels);
    }
}

template <typename T, int P, bool SHARED, int U, bool W32>
__global__ void __launch_bounds__(prelu_policy::block_threads)
prelu_kernel(const T *__restrict__ x, T *__restrict__ y, const T *__restrict__ alpha,
             prelu_geom g)
{
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

    typedef pack_word<T, P> W;
    typedef prelu_word_ops<T, P> ops;
    const W *xp = reinterpret_cast<const W *>(x + g.head);
    W *yp = reinterpret_cast<W *>(y + g.head);
    const int64_t first = (int64_t)blockIdx.x * blockDim.x * U + threadIdx.x;
    /* 1. x, every pack's load in flight at once, kept as loaded */
    W v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        int64_t q = first + (int64_t)u * blockDim.x;
        if (q < g.packs)
            v[u] = load_word<T, P>(xp + q);
    }
    if constexpr (SHARED) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t q = first + (int64_t)u * blockDim.x;
            if (q < g.packs)
                store_word<T, P>(yp + q, ops::whole(v[u], a0));
        }
    } else {
        /* 2. each pack's plane and alphas: the one of its first element (lo) and, for a pack
         * that crosses into the next plane (planes of at least a pack cross at most once), the
         * next channel's (hi) from its n_lo-th element on. */
        int64_t c[U], i[U];
        float lo[U], hi[U];
        int n_lo[U];
        auto alphas = [&](int u) {
            int64_t q = first + (int64_t)u * blockDim.x;
            q = q < g.packs ? q : 0; /* past the end: any e <= n has a channel */
            locate<W32>(g, g.head + q * P, c[u], i[u]);
            lo[u] = nd_to_float(__ldg(alpha + c[u]));
            n_lo[u] = g.inner - i[u] < P ? (int)(g.inner - i[u]) : P;
            hi[u] = lo[u];
            if (n_lo[u] < P && g.inner >= P)
                hi[u] = nd_to_float(__ldg(alpha + (c[u] + 1 == g.channels ? 0 : c[u] + 1)));
        };
        /* 16-bit packs: all alphas before any output, so that their loads fly with x's */
        constexpr bool EARLY = prelu_policy::early_alpha<T>();
        if constexpr (EARLY) {
#pragma unroll
            for (int u = 0; u < U; u++)
                alphas(u);
        }
        /* 3. the output */
#pragma unroll
        for (int u = 0; u < U; u++) {
            int64_t q = first + (int64_t)u * blockDim.x;
            if (q >= g.packs)
                continue;
            if constexpr (!EARLY)
                alphas(u);
            W o;
            if (g.inner >= P) {
                o = n_lo[u] == P ? ops::whole(v[u], lo[u])
                                 : ops::split(v[u], lo[u], hi[u], n_lo[u]);
            } else { /* planes shorter than a pack: step the channel element by element */
                pack_view<T, P> in, out;
                in.w = v[u];
                int64_t cc = c[u], ii = i[u];
#pragma unroll
                for (int j = 0; j < P; j++) {
                    if (ii == g.inner) {
                        ii = 0;
                        cc = cc + 1 == g.channels ? 0 : cc + 1;
                    }
                    out.pk.v[j] = prelu_one(in.pk.v[j], nd_to_float(alpha[cc]));
                    ii++;
                }
                o = out.w;
            }
            store_word<T, P>(yp + q, o);
        }
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
    g.div_inner = nd_fast_div_make((uint64_t)a->inner);
    g.div_channels = nd_fast_div_make((uint64_t)a->channels);
    if (g.n < ((int64_t)1 << 32)) {
        g.div32_inner = nd_fast_div_make((uint32_t)a->inner);
        g.div32_channels = nd_fast_div_make((uint32_t)a->channels);
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
