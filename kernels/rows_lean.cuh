/*
 * rows_lean.cuh - the lean path of the row engine: a full warp a row, R rows a warp, NW warps a
 * block, the row in registers, for rows on the 16-byte grid of at most 32 x ND_ROWS_LEAN_MAX_PK
 * packs. Included by rows.cuh before nd_rows_run.
 *
 * Why. On an H200 LayerNorm's 16-bit rows of 256-1024 columns ran at 84-95% of the copy
 * ceiling, behind torch.compile (0.88-0.99x), whose "per" kernels lay them out a warp a row
 * (bench/ncu_pair.sh: 10.7-13.7 instructions an element against the tile and warp kernels'
 * 18.6-21.5). bench/loop_probe.cu's hand-written warp-a-row kernel reached 92 / 88 (float16 /
 * bfloat16) at 256 columns, 96.6 / 94.3 at 512 and 96.2 / 95.7 at 1024, where the library ran
 * 85.8 / 83.7, 92.6 / 91.9 and 93.6 / 94.6 (bench/results/loop_probe_h200.txt). The same layout
 * through the warp kernel (W = 32) lost points instead (bench/results/ln_short_h200.txt): the
 * gain is the kernel's body, not its geometry. This kernel is the probe's body with the op's own
 * statistics.
 *
 * How. Lane l of a warp holds packs l, l + 32, ... (PK at most) of each of its R rows, every
 * load issued before any sum (__ldcs: x is read once). The statistics are the op's register
 * statistics (Op::stats, as in the warp kernel: LayerNorm's exact mean, a double cross-lane sum
 * kept as two floats) over a context whose all-reduce is the warp's, the R rows in one
 * all-reduce so their shuffle chains interleave. Then each pack's parameters are loaded once for
 * the warp's R rows, and y is stored evict-first. No loop over rows: one unit of R x NW rows a
 * block, a grid of every unit (at most 2^31 - 1 of them). Which rows and which (R, NW) are the
 * op's policy's lean(element bytes, packs, fast), measured per op.
 *
 * Tried first (H200, two alternating rounds, % of the same-run copy ceiling): the op's stream
 * statistics (Op::stream_stats, ctx.for_each over the registers), one call a row. nvcc ran the
 * R rows' shuffle chains one after the other, and LayerNorm's 16-bit rows ran 256 columns at
 * 82.7 / 86.3 (bfloat16 / float16; R = 2, NW = 4) against the tile kernel's 84.6 / 86.3, 512 at
 * 88.5 / 92.4 against 91.2 / 91.9; 1024 (R = 1) gained, 93.9 / 94.7 -> 95.6 / 96.7. Each lane's
 * parameters loaded with x, before the statistics, rather than after them: up to 24 points
 * lower (bfloat16 1024 columns 95.6 -> 71.8).
 */
#ifndef ND_ROWS_LEAN_CUH
#define ND_ROWS_LEAN_CUH

/* 0: never (A/B runs); 1: where the op's policy's lean() says */
#ifndef ND_ROWS_LEAN
#define ND_ROWS_LEAN 1
#endif

/* the most packs a lane holds of a row: rows of up to 32 x this many packs */
#define ND_ROWS_LEAN_MAX_PK 4

/* The register kernels' context (Op::stats) of the lean kernel: a warp over rows on the 16-byte
 * grid in whole packs, lane l holding packs l, l + 32, ... (PK at most) of each of its rows. */
template <int PK, int VEC> struct nd_lean_ctx {
    static constexpr int kKind = ND_CTX_WARP; /* a warp's all-reduce: one round (LayerNorm) */
    int lane, npacks, cols;
    float n;
    /* whether element e of this lane's share of a row is in the row: its pack is */
    __device__ __forceinline__ bool valid(int, int e) const
    {
        return (e / VEC) * 32 + lane < npacks;
    }
    /* true when every pack this lane holds is in the row */
    __device__ __forceinline__ bool full(int) const { return (PK - 1) * 32 + lane < npacks; }
    /* rows on the grid in whole packs: each pack in the row or wholly past its end */
    __device__ __forceinline__ bool whole_packs(int) const { return true; }
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        nd_warp_allreduce<32, K>(v, op);
    }
    /* lane 0 holds column 0: one shuffle */
    __device__ __forceinline__ float first(int, float f) const
    {
        return __shfl_sync(0xffffffffu, f, 0);
    }
};

template <class Op, class T, int VEC, int PK, int R, int NW>
__global__ void __launch_bounds__(32 * NW) nd_rows_lean_kernel(nd_rows_args<T> a,
                                                                typename Op::Params prm)
{
    constexpr int N = PK * VEC; /* elements a lane holds of a row */
    const int lane = threadIdx.x & 31;
    nd_lean_ctx<PK, VEC> ctx;
    ctx.lane = lane;
    ctx.npacks = (int)(a.cols / VEC);
    ctx.cols = (int)a.cols;
    const int64_t r0 = ((int64_t)blockIdx.x * NW + (threadIdx.x >> 5)) * R;
    const uint4 *x = reinterpret_cast<const uint4 *>(a.x);
    nd_regrow<T, N> v[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const bool in = r0 + r < a.rows; /* a row past the end: zeros, computed, not stored */
        const uint4 *xr = x + (r0 + r) * ctx.npacks;
#pragma unroll
        for (int k = 0; k < PK; k++) {
            const int p = k * 32 + lane;
            const uint4 w = in && p < ctx.npacks ? __ldcs(xr + p) : make_uint4(0, 0, 0, 0);
            const uint32_t wds[4] = {w.x, w.y, w.z, w.w};
            v[r].put_pack(k, wds);
        }
    }
    nd_ctx_cols_here(ctx); /* the row length as a float after the loads (ND_ROWS_WARP_LATE_N) */
    constexpr bool K = nd_param_l2_last<Op>((int)sizeof(T));
    constexpr int NP = Op::kParams < 2 ? Op::kParams : 2;
    const T *pp[2] = {a.p0, a.p1};
    /* the R rows' statistics in one all-reduce */
    typename Op::State st[R];
    Op::template stats<R, N>(v, st, ctx, prm);
#pragma unroll
    for (int r = 0; r < R; r++)
        if (lane == 0 && r0 + r < a.rows)
            Op::write_stats(st[r], r0 + r, prm);
#pragma unroll
    for (int k = 0; k < PK; k++) {
        const int p = k * 32 + lane;
        if (p >= ctx.npacks) /* this pack and the lane's next ones lie past the row */
            break;
        float g[2][VEC]; /* each pack's parameters, once for the R rows */
#pragma unroll
        for (int q = 0; q < 2; q++) {
            if (q >= NP || !pp[q]) { /* absent: gamma 1, beta 0 */
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    g[q][j] = q == 0 ? 1.0f : 0.0f;
                continue;
            }
            union { uint4 w; nd_pack<T, VEC> pk; } u;
            u.w = nd_ldg_keep<K>(reinterpret_cast<const uint4 *>(pp[q]) + p);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                g[q][j] = nd_to_float(u.pk.v[j]);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (r0 + r >= a.rows)
                continue;
            float o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++)
                o[j] = Op::out(st[r], prm, v[r].get(k * VEC + j), g[0][j], g[1][j]);
            nd_store_pack_stream<T, VEC>(a.y + (r0 + r) * a.cols + (int64_t)p * VEC, o);
        }
    }
}

/* The policy's lean geometry, packed as rows a warp * 64 + warps a block (0: not the lean
 * path). */
constexpr int nd_lean_code(int rows, int warps) { return rows * 64 + warps; }

/* A/B runs: ND_ROWS_LEAN_TRY_P<n>, a geometry (nd_lean_code) for every op's 16-bit rows of n
 * packs on a fast device where its policy names none; 0: the policies alone */
#ifndef ND_ROWS_LEAN_TRY_P32
#define ND_ROWS_LEAN_TRY_P32 0
#endif
#ifndef ND_ROWS_LEAN_TRY_P64
#define ND_ROWS_LEAN_TRY_P64 0
#endif
#ifndef ND_ROWS_LEAN_TRY_P128
#define ND_ROWS_LEAN_TRY_P128 0
#endif

/* the geometry for rows of `packs` packs: the policy's, or an A/B run's (ND_ROWS_LEAN_TRY_P<n>) */
template <class Pol> constexpr int nd_rows_lean_code(int elem_bytes, int64_t packs, bool fast)
{
    const int c = Pol::lean(elem_bytes, packs, fast);
    if (c || elem_bytes != 2 || !fast)
        return c;
    return packs == 32 ? ND_ROWS_LEAN_TRY_P32 : packs == 64 ? ND_ROWS_LEAN_TRY_P64
           : packs == 128 ? ND_ROWS_LEAN_TRY_P128 : 0;
}

/* Whether some row of T of 32 x (PK - 1) + 1 .. 32 x PK packs takes the lean geometry `code`
 * (every geometry when code is 0) on some device: so that only the kernels a policy names are
 * compiled. */
template <class Pol> constexpr bool nd_rows_lean_has(int elem_bytes, int pk, int code)
{
    if (!ND_ROWS_LEAN)
        return false;
    for (int p = 32 * (pk - 1) + 1; p <= 32 * pk; p++)
        for (int f = 0; f < 2; f++) {
            const int c = nd_rows_lean_code<Pol>(elem_bytes, p, f != 0);
            if (c != 0 && (code == 0 || c == code))
                return true;
        }
    return false;
}

template <class Pol> constexpr bool nd_rows_lean_any(int elem_bytes)
{
    for (int pk = 1; pk <= ND_ROWS_LEAN_MAX_PK; pk++)
        if (nd_rows_lean_has<Pol>(elem_bytes, pk, 0))
            return true;
    return false;
}

/* The lean kernel for rows on the grid of P <= 32 x ND_ROWS_LEAN_MAX_PK packs, in the policy's
 * geometry `code` (nd_lean_code); the geometries below are every one a policy may name. */
template <class Op, class T, int VEC, class Pol>
static nd_status nd_rows_lean_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  int64_t P, int code, const nd_cuda_device_info *di,
                                  cudaStream_t s, const char *name, nd_error *err)
{
    auto launch = [&](auto pk, auto r, auto nw) -> nd_status {
        constexpr int PK = decltype(pk)::value, R = decltype(r)::value, NW = decltype(nw)::value;
        if constexpr (nd_rows_lean_has<Pol>((int)sizeof(T), PK, nd_lean_code(R, NW))) {
            const int64_t units = (a.rows + R * NW - 1) / (R * NW);
            if (units > 0x7fffffff)
                return nd_error_set(err, ND_EUNSUPPORTED, "%s: %lld rows are too many for one "
                                    "lean launch", name, (long long)a.rows);
            ND_PLAN("lean packs=%d R=%d warps=%d", PK, R, NW);
            return nd_rows_launch(nd_rows_lean_kernel<Op, T, VEC, PK, R, NW>, 32 * NW, 1, 0,
                                  units, di, s, err, name, a, prm);
        } else {
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: no lean kernel of %d packs, geometry %d",
                                name, PK, code);
        }
    };
    auto geometry = [&](auto pk) -> nd_status {
        using std::integral_constant;
        switch (code) {
#define ND_LEAN_CASE(R, NW)                                                                        \
    case nd_lean_code(R, NW):                                                                      \
        return launch(pk, integral_constant<int, R>(), integral_constant<int, NW>());
            ND_LEAN_CASE(1, 1) ND_LEAN_CASE(1, 2) ND_LEAN_CASE(1, 4)
            ND_LEAN_CASE(2, 1) ND_LEAN_CASE(2, 2) ND_LEAN_CASE(2, 4)
            ND_LEAN_CASE(4, 1) ND_LEAN_CASE(4, 2) ND_LEAN_CASE(4, 4)
            ND_LEAN_CASE(8, 1) ND_LEAN_CASE(8, 2)
#undef ND_LEAN_CASE
        default:
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: no lean kernel of geometry %d", name,
                                code);
        }
    };
    static_assert(ND_ROWS_LEAN_MAX_PK == 4, "one case a pack count");
    switch ((P + 31) / 32) {
    case 1: return geometry(std::integral_constant<int, 1>());
    case 2: return geometry(std::integral_constant<int, 2>());
    case 3: return geometry(std::integral_constant<int, 3>());
    case 4: return geometry(std::integral_constant<int, 4>());
    default:
        return nd_error_set(err, ND_EUNSUPPORTED, "%s: rows of %lld packs are too long for the "
                            "lean kernel", name, (long long)P);
    }
}

#endif /* ND_ROWS_LEAN_CUH */
