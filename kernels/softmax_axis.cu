/*
 * softmax_axis.cu - softmax and log-softmax along an axis that is not the last one.
 *
 * The tensor is viewed as (outer, dim, inner), as in PaddlePaddle PR 32396 (seed 004): a column
 * (o, *, i) is dim elements `inner` apart, and the reduction runs along it. What we keep from the
 * seed: that decomposition, a block that spreads one column's rows over several threads and combines
 * their partial results in shared memory, and a grid sized from the device. Where we depart:
 *
 *   - threadIdx.x runs along the contiguous inner dimension (the seed put it on dim), in packs of up
 *     to 16 bytes, so every row of a column tile is one coalesced access. When inner is small (a row
 *     of the tile is the whole inner extent) the block's rows are adjacent in memory, so a block
 *     still reads one contiguous slab however few elements a row has;
 *   - x is read once: each thread keeps its rows in registers (up to axis_policy::max_rows packs)
 *     and the reduction is a single merge of (max, sum) pairs (the online softmax of seed 001), not
 *     a max pass, a sum pass and a write pass that read x three times;
 *   - when outer * inner alone cannot fill the GPU, a column is also split across the blocks of a
 *     thread-block cluster (up to axis_policy::max_cluster) that merge their (max, sum) pairs through
 *     distributed shared memory, so even outer = 1 uses every multiprocessor without a workspace or
 *     a second launch;
 *   - only when a column is too long for the registers of a whole cluster does a thread walk its rows
 *     twice: an online (max, sum) pass and a write pass (two reads of x; the second mostly from L2).
 *
 * Arithmetic is in float32 with the accurate expf/logf. Offsets are 64-bit.
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <algorithm>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

namespace {

/* Tuned numbers for this op, in one place. */
struct axis_policy {
    /* Rows a thread keeps in registers (packs of up to 16 bytes); above this the column is split
     * over more threads, then over a cluster, then walked twice. */
    static constexpr int max_rows = 16;
    /* Rows a thread prefers to keep when the GPU is full anyway: more loads in flight per thread
     * than this buys little and costs occupancy. */
    static constexpr int pref_rows = 8;
    /* Threads the grid should hold at least, per multiprocessor, before we split columns further. */
    static constexpr int fill_threads_per_sm = 1024;
    /* Threads per block we aim for. */
    static constexpr int block_threads = 256;
    /* Most blocks a column is spread over (portable cluster size). */
    static constexpr int max_cluster = 8;
    /* Rows loaded before use in the two-pass (uncached) walk. */
    static constexpr int uncached_unroll = 4;
    /* Most packs of a tile row; 32 packs of 16 bytes = 512 bytes, a whole warp's access. */
    static constexpr int max_tile_packs = 32;
};

/* What the kernel needs to know about the problem and the launch. */
struct axis_geom {
    int64_t dim, inner;
    int64_t packs;   /* pack-columns per outer index: inner / P */
    int64_t chunks;  /* tiles of blockDim.x packs per outer index */
    int64_t groups;  /* outer * chunks: the column tiles */
    int64_t rows_per_rank; /* rows of a column handled by one block of a cluster */
    int cluster;     /* blocks per column along dim (gridDim.y) */
};

/* ------------------------------------------------------------------------------------------- */
/* kernels                                                                                       */
/* ------------------------------------------------------------------------------------------- */

/* Merge the partial softmax state (m2, s2) into (m, s): s counts sum(exp(x - m)). */
__device__ __forceinline__ void merge_pair(float &m, float &s, float m2, float s2)
{
    float a[2] = {m, s};
    const float b[2] = {m2, s2};
    nd_op_softmax_pair()(a, b);
    m = a[0];
    s = a[1];
}

/*
 * Combine the per-thread states of the threads that share a column: over threadIdx.y through
 * shared memory (a tree, log2(blockDim.y) steps), then over the blocks of the cluster through
 * distributed shared memory. On return every thread of the column holds the column's (max, sum).
 */
template <int P>
__device__ __forceinline__ void column_reduce(float (&m)[P], float (&s)[P], float2 *red,
                                              int cluster)
{
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int TX = blockDim.x, TY = blockDim.y;
    float2 *mine = red + ((size_t)(tz * TY + ty) * TX + tx) * P;
    float2 *head = red + ((size_t)(tz * TY) * TX + tx) * P;
    if (TY > 1) {
#pragma unroll
        for (int j = 0; j < P; j++)
            mine[j] = make_float2(m[j], s[j]);
        int half = 1;
        while (half < TY)
            half <<= 1;
        for (half >>= 1; half >= 1; half >>= 1) {
            __syncthreads();
            if (ty < half && ty + half < TY) {
                const float2 *other = mine + (size_t)half * TX * P;
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float2 t = other[j];
                    merge_pair(m[j], s[j], t.x, t.y);
                    mine[j] = make_float2(m[j], s[j]);
                }
            }
        }
        __syncthreads();
    } else if (cluster > 1) {
#pragma unroll
        for (int j = 0; j < P; j++)
            mine[j] = make_float2(m[j], s[j]);
    }
    if (cluster > 1) {
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every block's result sits in its red[tz][0][tx] */
#pragma unroll
        for (int j = 0; j < P; j++) {
            m[j] = -INFINITY;
            s[j] = 0.0f;
        }
        for (int r = 0; r < cluster; r++) {
            const float2 *rem = cl.map_shared_rank(head, r);
#pragma unroll
            for (int j = 0; j < P; j++) {
                float2 t = rem[j];
                merge_pair(m[j], s[j], t.x, t.y);
            }
        }
        cl.sync(); /* no block leaves while another still reads its shared memory */
    } else if (TY > 1) {
#pragma unroll
        for (int j = 0; j < P; j++) {
            float2 t = head[j];
            m[j] = t.x;
            s[j] = t.y;
        }
    }
}

/* y for one pack given the column's (max, sum) in the form the caller prepared: for softmax
 * k = 1/sum, for log-softmax k = log(sum). */
template <typename T, int P>
__device__ __forceinline__ nd_pack<T, P> softmax_out(const nd_pack<T, P> &v, const float (&m)[P],
                                                    const float (&k)[P], int log)
{
    nd_pack<T, P> o;
#pragma unroll
    for (int j = 0; j < P; j++) {
        float f = nd_to_float(v.v[j]);
        o.v[j] = nd_from_float<T>(log ? (f - m[j]) - k[j] : expf(f - m[j]) * k[j]);
    }
    return o;
}

template <int P>
__device__ __forceinline__ void prepare_out(float (&s)[P], int log)
{
#pragma unroll
    for (int j = 0; j < P; j++)
        s[j] = log ? logf(s[j]) : 1.0f / s[j];
}

/*
 * One thread: pack-column pk of outer index o, rows d0 + ty + k * blockDim.y of the block's share
 * [d0, d1) of the column. R > 0: the thread's rows (at most R) stay in registers and x is read once.
 * R == 0: the rows are walked twice (online max/sum, then the write).
 */
template <typename T, int P, int R, int MAXT>
__global__ void __launch_bounds__(MAXT)
softmax_axis_kernel(const T *__restrict__ x, T *__restrict__ y, axis_geom g, int log)
{
    extern __shared__ float2 red[];
    using pack = nd_pack<T, P>;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int TX = blockDim.x, TY = blockDim.y;

    const int64_t grp = (int64_t)blockIdx.x * blockDim.z + threadIdx.z;
    int64_t o = grp / g.chunks;
    const int64_t pk = (grp - o * g.chunks) * TX + tx;
    const bool live = grp < g.groups && pk < g.packs;
    if (!live)
        o = 0;
    const int64_t d0 = (int64_t)blockIdx.y * g.rows_per_rank + ty;
    const int64_t d1 = min(g.dim, (int64_t)(blockIdx.y + 1) * g.rows_per_rank);
    const int64_t step = (int64_t)TY * g.inner;
    const int64_t off = (o * g.dim + d0) * g.inner + pk * P;
    const T *xp = x + off;
    T *yp = y + off;

    float m[P], s[P];
#pragma unroll
    for (int j = 0; j < P; j++) {
        m[j] = -INFINITY;
        s[j] = 0.0f;
    }

    if constexpr (R > 0) {
        int nrows = 0;
        if (live && d0 < d1)
            nrows = (int)min((int64_t)R, (d1 - d0 + TY - 1) / TY);
        pack v[R];
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < nrows)
                v[k] = *reinterpret_cast<const pack *>(xp + k * step);
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < nrows)
#pragma unroll
                for (int j = 0; j < P; j++)
                    m[j] = fmaxf(m[j], nd_to_float(v[k].v[j]));
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < nrows)
#pragma unroll
                for (int j = 0; j < P; j++)
                    s[j] += expf(nd_to_float(v[k].v[j]) - m[j]);
        column_reduce<P>(m, s, red, g.cluster);
        prepare_out<P>(s, log);
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < nrows)
                *reinterpret_cast<pack *>(yp + k * step) = softmax_out<T, P>(v[k], m, s, log);
    } else {
        constexpr int U = axis_policy::uncached_unroll;
        const int64_t n = (live && d0 < d1) ? (d1 - d0 + TY - 1) / TY : 0;
        for (int64_t k = 0; k < n; k += U) {
            pack v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u < n)
                    v[u] = *reinterpret_cast<const pack *>(xp + (k + u) * step);
#pragma unroll
            for (int j = 0; j < P; j++) {
                float mx = m[j];
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (k + u < n)
                        mx = fmaxf(mx, nd_to_float(v[u].v[j]));
                float acc = s[j] * expf(m[j] - mx);
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (k + u < n)
                        acc += expf(nd_to_float(v[u].v[j]) - mx);
                m[j] = mx;
                s[j] = acc;
            }
        }
        column_reduce<P>(m, s, red, g.cluster);
        prepare_out<P>(s, log);
        for (int64_t k = 0; k < n; k += U) {
            pack v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u < n)
                    v[u] = *reinterpret_cast<const pack *>(xp + (k + u) * step);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u < n)
                    *reinterpret_cast<pack *>(yp + (k + u) * step) =
                        softmax_out<T, P>(v[u], m, s, log);
        }
    }
}

/* ------------------------------------------------------------------------------------------- */
/* launchers                                                                                     */
/* ------------------------------------------------------------------------------------------- */

/* A launch: the kernel's template arguments beyond the dtype, and the geometry. */
struct axis_plan {
    int pack;    /* P: elements per access */
    int rows;    /* R: rows kept in registers, 0 = walk twice */
    int maxt;    /* the kernel's launch bound */
    dim3 block, grid;
    size_t smem;
    axis_geom g;
};

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int pow2_ceil(int64_t v)
{
    int p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

/* The largest pack (16, 4 or 1 element bytes) that divides inner and suits both pointers. */
static int choose_pack(const nd_softmax_args *a, size_t es)
{
    uintptr_t addr = (uintptr_t)a->x | (uintptr_t)a->y;
    const int bytes[] = {16, 4};
    for (int b : bytes) {
        int p = b / (int)es;
        if (p > 1 && a->inner % p == 0 && addr % (uintptr_t)b == 0)
            return p;
    }
    return 1;
}

/*
 * The launch for one problem. Threads along dim per column (s) are chosen to fill the GPU and to
 * keep at most pref_rows rows per thread; rows per thread round up to a power of two (R). A block
 * holds TX pack-columns x TY row-threads x TZ column tiles; when a column needs more row-threads
 * than a block holds, it is spread over a cluster of C blocks; when even max_cluster blocks with
 * max_rows rows each cannot hold it, the rows are walked twice (R = 0).
 */
static axis_plan plan_axis(const nd_softmax_args *a, size_t es, int sms)
{
    typedef axis_policy pol;
    axis_plan pl = {};
    const int P = choose_pack(a, es);
    const int64_t packs = a->inner / P;
    const int64_t cols = a->outer * packs;
    const int64_t fill = (int64_t)sms * pol::fill_threads_per_sm;
    /* The reduction buffer holds blockDim * P float2: keep it within the default 48 KB. */
    const int max_block = P >= 8 ? 512 : 1024;

    /* 16 packs of 8 two-byte elements (and their float temporaries) no longer fit 128 registers */
    const int max_rows = P >= 8 ? pol::pref_rows : pol::max_rows;

    int64_t s = std::min(std::max(cdiv(fill, cols), cdiv(a->dim, pol::pref_rows)), a->dim);
    int R = pow2_ceil(cdiv(a->dim, s));
    int TX = 1, TY = 1, maxt = max_block;
    int64_t C = 1;
    for (;;) {
        s = cdiv(a->dim, R);
        TX = packs <= pol::max_tile_packs ? (int)packs : (s <= 16 ? 32 : s <= 64 ? 16 : 8);
        maxt = std::min(R <= 4 ? 1024 : 512, max_block);
        int ty_max = std::max(1, maxt / TX);
        C = cdiv(s, ty_max);
        TY = (int)cdiv(s, C);
        if (C <= pol::max_cluster || R >= max_rows)
            break;
        R = max_rows;
    }
    int64_t rows_per_rank = C > 1 ? (int64_t)TY * R : a->dim;
    if (C > pol::max_cluster) {
        /* Too long for the registers of a cluster: walk the rows twice. Narrow tiles (down to
         * 64-byte rows) give more blocks when there are few columns. */
        R = 0;
        maxt = max_block;
        int tx_min = std::max(1, 64 / (P * (int)es));
        TX = (int)std::min(packs, (int64_t)pol::max_tile_packs);
        for (;;) {
            TY = (int)std::min((int64_t)std::max(1, 512 / TX), a->dim);
            C = std::min((int64_t)pol::max_cluster, std::max((int64_t)1, cdiv(fill, cols * TY)));
            C = std::min(C, cdiv(a->dim, TY));
            if (TX <= tx_min || a->outer * cdiv(packs, TX) * C >= 2 * sms)
                break;
            TX = std::max(tx_min, TX / 2);
        }
        rows_per_rank = cdiv(a->dim, C);
    }
    int TZ = 1;
    if (TY * TX < pol::block_threads)
        TZ = std::max(1, pol::block_threads / (TX * TY));
    const int64_t chunks = cdiv(packs, TX);
    const int64_t groups = a->outer * chunks;
    TZ = (int)std::min((int64_t)TZ, groups);

    pl.pack = P;
    pl.rows = R;
    pl.maxt = maxt;
    pl.block = dim3(TX, TY, TZ);
    pl.grid = dim3((unsigned)cdiv(groups, TZ), (unsigned)C, 1);
    pl.smem = (TY > 1 || C > 1) ? (size_t)TX * TY * TZ * P * sizeof(float2) : 0;
    pl.g.dim = a->dim;
    pl.g.inner = a->inner;
    pl.g.packs = packs;
    pl.g.chunks = chunks;
    pl.g.groups = groups;
    pl.g.cluster = (int)C;
    pl.g.rows_per_rank = rows_per_rank;
    return pl;
}

template <typename T, int P, int R, int MAXT>
static cudaError_t launch_one(const axis_plan &pl, const void *x, void *y, int log,
                              cudaStream_t stream)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = pl.grid;
    cfg.blockDim = pl.block;
    cfg.dynamicSmemBytes = pl.smem;
    cfg.stream = stream;
    if (pl.g.cluster > 1) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 1;
        attr[0].val.clusterDim.y = pl.g.cluster;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&cfg, softmax_axis_kernel<T, P, R, MAXT>, (const T *)x, (T *)y,
                              pl.g, log);
}

template <typename T, int P>
static cudaError_t launch_rows(const axis_plan &pl, const void *x, void *y, int log,
                               cudaStream_t stream)
{
    constexpr int MB = P >= 8 ? 512 : 1024; /* the plan's max_block for this pack */
    switch (pl.rows) {
    case 0: return launch_one<T, P, 0, MB>(pl, x, y, log, stream);
    case 1: return launch_one<T, P, 1, MB>(pl, x, y, log, stream);
    case 2: return launch_one<T, P, 2, MB>(pl, x, y, log, stream);
    case 4: return launch_one<T, P, 4, MB>(pl, x, y, log, stream);
    case 8: return launch_one<T, P, 8, 512>(pl, x, y, log, stream);
    case 16:
        if constexpr (P < 8)
            return launch_one<T, P, 16, 512>(pl, x, y, log, stream);
        return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
    }
}

template <typename T>
static cudaError_t launch_typed(const axis_plan &pl, const void *x, void *y, int log,
                                cudaStream_t stream)
{
    constexpr int P16 = 16 / sizeof(T), P4 = 4 / sizeof(T);
    if (pl.pack == P16)
        return launch_rows<T, P16>(pl, x, y, log, stream);
    if (P4 > 1 && pl.pack == P4)
        return launch_rows<T, (P4 > 1 ? P4 : 1)>(pl, x, y, log, stream);
    return launch_rows<T, 1>(pl, x, y, log, stream);
}

} /* namespace */

nd_status nd_cuda_softmax_axis(const nd_softmax_args *a, int log, cudaStream_t stream,
                               nd_error *err)
{
    nd_status st = nd_softmax_args_check(a, err);
    if (st != ND_OK)
        return st;
    const nd_cuda_device_info *di = NULL;
    st = nd_cuda_device_info_get(&di, err);
    if (st != ND_OK)
        return st;
    axis_plan pl = plan_axis(a, nd_dtype_size(a->dtype), di->sm_count);
    cudaError_t ce;
    switch (a->dtype) {
    case ND_FLOAT16: ce = launch_typed<__half>(pl, a->x, a->y, log != 0, stream); break;
    case ND_BFLOAT16: ce = launch_typed<__nv_bfloat16>(pl, a->x, a->y, log != 0, stream); break;
    default: ce = launch_typed<float>(pl, a->x, a->y, log != 0, stream); break;
    }
    if (ce == cudaSuccess)
        ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return nd_error_set(err, ND_EDEVICE, "softmax over axis (outer=%lld dim=%lld inner=%lld): %s",
                            (long long)a->outer, (long long)a->dim, (long long)a->inner,
                            cudaGetErrorString(ce));
    return ND_OK;
}
