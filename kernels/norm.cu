/*
 * norm.cu - LayerNorm and RMSNorm over the last axis (CUDA backend).
 *
 * Technique: OneFlow's LayerNorm (seed 000) and the RMSNorm article (seed 002): the row is read
 * once into registers with 16-byte packs, reduced, and written from registers; the kernel is chosen
 * by row size (sub-warp groups, warp, block; see rows.cuh). Departures:
 *   - Statistics are not Welford. With the row on chip, a shifted two-pass form is as cheap and
 *     more accurate: m1 = sum(x)/n; d = x - m1 (exact for x near m1), c = sum(d)/n,
 *     var = sum(d^2)/n - c^2; y = (d - c) * rstd * gamma + beta; mean = m1 + c. A row of mean 1e4
 *     and std 1, where float32 cannot hold the mean to better than 5e-4, still gives y within
 *     1e-5. The second round reduces sum(d) and sum(d^2) together, so that form costs two
 *     all-reduces per row (the stream kernel uses it). The register kernels take m1 = the row's
 *     first element instead (the warp kernel shuffles it from lane 0, the block and cluster
 *     kernels load it): one all-reduce per row, like RMSNorm (H200, warp kernel: +5-15 points
 *     of the copy ceiling at 32..2048 columns, 2-4 points lost at 512 float32). d = x - x[0]
 *     stays exact for a row of mean 1e4 and std 1; var = sum(d^2)/n - c^2 gives up about
 *     log10(1 + (x[0] - mean)^2 / var) digits, at most log10(n), which only a row whose first
 *     element is an extreme outlier approaches.
 *   - Rows longer than a block's registers are spread over a thread-block cluster (sm_90) that
 *     all-reduces through distributed shared memory, instead of OneFlow's shared-memory cache and
 *     uncached block fallback; x is still read from device memory once. Only rows beyond a
 *     16-block cluster (262144 float32 / 524288 16-bit columns) take the re-reading stream
 *     kernel.
 *   - Any row start: packs follow the 16-byte grid of memory, partial packs at the row's ends.
 */
#include "rows.cuh"

/* 1: LayerNorm in the register kernels makes one all-reduce of (sum d, sum d^2) with
 * d = x - x[0], x[0] the row's first element (ctx.first); 0: the two rounds below (mean, then
 * the shifted sums) on every path. */
#ifndef ND_NORM_ONE_ROUND
#define ND_NORM_ONE_ROUND 1
#endif
#ifndef ND_NORM_ONE_ROUND_BLOCK /* 1: the plain block kernel too (x[0] loaded) */
#define ND_NORM_ONE_ROUND_BLOCK 1
#endif

/* ---------------------------------------------------------------------------------------------
 * Policies: the tuned numbers, one place for both ops.
 * ------------------------------------------------------------------------------------------- */

struct nd_norm_policy {
    static constexpr int kRegBytes = 128;    /* bytes of the row per thread held in registers */
    static constexpr int kRowsInFlight = 2;  /* packs per lane in flight in the warp kernel */
    /* 4 for groups of 4 lanes (float32 32 / 16-bit 64 columns): H200 +12 to +15 points of the
     * copy ceiling there; 4 everywhere lost 9-13 at 2 lanes (16-bit 32) and 1-3 at 8 */
    static constexpr int kRowsInFlight4 = 4;
    static constexpr int kSubPacks = 4;      /* packs per lane in the sub-warp kernel */
    static constexpr int kBlockMin = 128;
    static constexpr int kBlockMax = 512;
    static constexpr int kClusterMax = 16;
    static constexpr int kStreamThreads = 512;
};

struct nd_norm_params {
    float eps;
    float *mean;
    float *rstd;
};

/* ---------------------------------------------------------------------------------------------
 * Ops
 * ------------------------------------------------------------------------------------------- */

struct nd_layernorm_op {
    static constexpr float kPad = 0.0f;
    static constexpr int kParams = 2;
    typedef nd_norm_params Params;
    struct State {
        float m1, c, rstd, nc; /* nc = -c * rstd */
    };

    static __device__ __forceinline__ void finish(State &st, float m1, float sd, float sdd, float n,
                                                  float eps)
    {
        st.m1 = m1;
        st.c = sd / n;
        float var = fmaxf(sdd / n - st.c * st.c, 0.0f);
        st.rstd = 1.0f / sqrtf(var + eps);
        st.nc = -st.c * st.rstd;
    }

    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats(V (&v)[R], State (&st)[R], const Ctx &ctx,
                                                 const Params &p)
    {
        /* H200, same run: one round gained 2-5 points for 16-bit rows in the block kernel and
         * 10-15 across clusters, but lost 1.3-3 points for float32 rows of 32 elements per thread
         * in a plain block (4096-16384 columns), which keep two rounds. */
        constexpr int kind = nd_ctx_kind<Ctx>::value;
        constexpr bool two = !ND_NORM_ONE_ROUND ||
                             (kind == ND_CTX_BLOCK && (!ND_NORM_ONE_ROUND_BLOCK ||
                                                       (V::kElemBytes == 4 && N >= 32)));
        if constexpr (!two)
            stats_one_round<R, N>(v, st, ctx, p);
        else
            stats_two_rounds<R, N>(v, st, ctx, p);
    }

    /* One all-reduce: shift by the row's first element instead of by the mean. f is that
     * element if this thread holds column 0 (at element h of its first pack), for ctx.first. */
    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats_one_round(V (&v)[R], State (&st)[R],
                                                           const Ctx &ctx, const Params &p)
    {
        constexpr int VEC = 16 / V::kElemBytes; /* elements of a pack */
        float q[2 * R], ref[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float f = v[r].get(0);
            if (!ctx.full(r)) {
#pragma unroll
                for (int e = 1; e < (N < VEC ? N : VEC); e++)
                    if (ctx.valid(r, e) && !ctx.valid(r, e - 1))
                        f = v[r].get(e);
            }
            ref[r] = ctx.first(r, f);
            float sd = 0.0f, sdd = 0.0f;
            if (ctx.full(r)) {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    float d = v[r].get(e) - ref[r];
                    sd += d;
                    sdd = fmaf(d, d, sdd);
                }
            } else {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    float d = ctx.valid(r, e) ? v[r].get(e) - ref[r] : 0.0f;
                    sd += d;
                    sdd = fmaf(d, d, sdd);
                }
            }
            q[2 * r] = sd;
            q[2 * r + 1] = sdd;
        }
        ctx.template allreduce<2 * R>(q, nd_op_sum());
#pragma unroll
        for (int r = 0; r < R; r++)
            finish(st[r], ref[r], q[2 * r], q[2 * r + 1], ctx.n, p.eps);
    }

    /* Two all-reduces: the mean, then the sums of d = x - mean and d^2. */
    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats_two_rounds(V (&v)[R], State (&st)[R],
                                                            const Ctx &ctx, const Params &p)
    {
        float s[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            s[r] = 0.0f;
#pragma unroll
            for (int e = 0; e < N; e++)
                s[r] += v[r].get(e);
        }
        ctx.template allreduce<R>(s, nd_op_sum());
        float q[2 * R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float m1 = s[r] / ctx.n, sd = 0.0f, sdd = 0.0f;
            if (ctx.full(r)) { /* the usual case: no pads among this thread's elements */
#pragma unroll
                for (int e = 0; e < N; e++) {
                    float d = v[r].get(e) - m1;
                    sd += d;
                    sdd = fmaf(d, d, sdd);
                }
            } else {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    float d = ctx.valid(r, e) ? v[r].get(e) - m1 : 0.0f;
                    sd += d;
                    sdd = fmaf(d, d, sdd);
                }
            }
            s[r] = m1;
            q[2 * r] = sd;
            q[2 * r + 1] = sdd;
        }
        ctx.template allreduce<2 * R>(q, nd_op_sum());
#pragma unroll
        for (int r = 0; r < R; r++)
            finish(st[r], s[r], q[2 * r], q[2 * r + 1], ctx.n, p.eps);
    }

    template <class Ctx>
    static __device__ __forceinline__ void stream_stats(State &st, const Ctx &ctx, const Params &p)
    {
        float s[1] = {0.0f};
        ctx.for_each([&](float x) { s[0] += x; });
        ctx.template allreduce<1>(s, nd_op_sum());
        const float m1 = s[0] / ctx.n;
        float q[2] = {0.0f, 0.0f};
        ctx.for_each([&](float x) {
            float d = x - m1;
            q[0] += d;
            q[1] = fmaf(d, d, q[1]);
        });
        ctx.template allreduce<2>(q, nd_op_sum());
        finish(st, m1, q[0], q[1], ctx.n, p.eps);
    }

    static __device__ __forceinline__ float out(const State &st, const Params &, float x, float g,
                                                float b)
    {
        /* (d - c) * rstd as fma(d, rstd, -c * rstd): d = x - m1 is exact, so only the small
         * -c * rstd is rounded; three instructions a column instead of four */
        return fmaf(fmaf(x - st.m1, st.rstd, st.nc), g, b);
    }
    static __device__ __forceinline__ float out_stream(const State &st, const Params &p, float x,
                                                       float g, float b)
    {
        return out(st, p, x, g, b);
    }
    static __device__ __forceinline__ void write_stats(const State &st, int64_t row, const Params &p)
    {
        if (p.mean)
            p.mean[row] = st.m1 + st.c;
        if (p.rstd)
            p.rstd[row] = st.rstd;
    }
};

struct nd_rmsnorm_op {
    static constexpr float kPad = 0.0f;
    static constexpr int kParams = 1;
    typedef nd_norm_params Params;
    struct State {
        float rstd;
    };

    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats(V (&v)[R], State (&st)[R], const Ctx &ctx,
                                                 const Params &p)
    {
        float q[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            q[r] = 0.0f;
#pragma unroll
            for (int e = 0; e < N; e++)
                q[r] = fmaf(v[r].get(e), v[r].get(e), q[r]);
        }
        ctx.template allreduce<R>(q, nd_op_sum());
#pragma unroll
        for (int r = 0; r < R; r++)
            st[r].rstd = 1.0f / sqrtf(q[r] / ctx.n + p.eps);
    }

    template <class Ctx>
    static __device__ __forceinline__ void stream_stats(State &st, const Ctx &ctx, const Params &p)
    {
        float q[1] = {0.0f};
        ctx.for_each([&](float x) { q[0] = fmaf(x, x, q[0]); });
        ctx.template allreduce<1>(q, nd_op_sum());
        st.rstd = 1.0f / sqrtf(q[0] / ctx.n + p.eps);
    }

    static __device__ __forceinline__ float out(const State &st, const Params &, float x, float g,
                                                float)
    {
        return x * st.rstd * g;
    }
    static __device__ __forceinline__ float out_stream(const State &st, const Params &p, float x,
                                                       float g, float b)
    {
        return out(st, p, x, g, b);
    }
    static __device__ __forceinline__ void write_stats(const State &st, int64_t row, const Params &p)
    {
        if (p.rstd)
            p.rstd[row] = st.rstd;
    }
};

/* ---------------------------------------------------------------------------------------------
 * Launchers
 * ------------------------------------------------------------------------------------------- */

template <class Op, class T>
static nd_status norm_run(const nd_norm_args *a, cudaStream_t s, const char *name, nd_error *err)
{
    nd_rows_args<T> ra;
    ra.x = (const T *)a->x;
    ra.y = (T *)a->y;
    ra.p0 = (const T *)a->gamma;
    ra.p1 = Op::kParams >= 2 ? (const T *)a->beta : NULL;
    ra.rows = a->rows;
    ra.cols = a->cols;
    nd_norm_params p;
    p.eps = a->eps;
    p.mean = a->mean;
    p.rstd = a->rstd;
    return nd_rows_run<Op, T, nd_norm_policy>(ra, p, s, name, err);
}

template <class Op>
static nd_status norm_dispatch(const nd_norm_args *a, void *stream, const char *name, nd_error *err)
{
    nd_status st = nd_norm_args_check(a, err);
    if (st != ND_OK)
        return st;
    cudaStream_t s = (cudaStream_t)stream;
    switch (a->dtype) {
    case ND_FLOAT32: return norm_run<Op, float>(a, s, name, err);
    case ND_FLOAT16: return norm_run<Op, __half>(a, s, name, err);
    case ND_BFLOAT16: return norm_run<Op, __nv_bfloat16>(a, s, name, err);
    default: return nd_error_set(err, ND_EINVAL, "%s: unknown dtype %d", name, (int)a->dtype);
    }
}

extern "C" nd_status nd_cuda_layernorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return norm_dispatch<nd_layernorm_op>(a, stream, "layernorm", err);
}

extern "C" nd_status nd_cuda_rmsnorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return norm_dispatch<nd_rmsnorm_op>(a, stream, "rmsnorm", err);
}
