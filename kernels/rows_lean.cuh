/*
 * rows_lean.cuh - the lean path of the row engine: a group of W lanes a row (W = 8, 16, 32), R
 * rows a group, NW warps a block, the rows in registers, for rows on the 16-byte grid of at most
 * W x ND_ROWS_LEAN_MAX_PK packs. Included by rows.cuh before nd_rows_run.
 *
 * Why. On an H200 LayerNorm's 16-bit rows of 128-1024 columns ran at 83-95% of the copy
 * ceiling, behind torch.compile (0.88-0.99x), whose "per" kernels lay them out a warp a row
 * (bench/ncu_pair.sh: 10.7-13.7 instructions an element against the tile and warp kernels'
 * 18.6-21.5). bench/loop_probe.cu's hand-written warp-a-row kernel reached 92 / 88 (float16 /
 * bfloat16) at 256 columns, 96.6 / 94.3 at 512 and 96.2 / 95.7 at 1024, where the library ran
 * 85.8 / 83.7, 92.6 / 91.9 and 93.6 / 94.6 (bench/results/loop_probe_h200.txt). The same layout
 * through the warp kernel (W = 32) lost points instead (bench/results/ln_short_h200.txt): the
 * gain is the kernel's body, not its geometry. This kernel is the probe's body with the op's own
 * statistics: blocks of 1-4 warps, every load of a group's R rows in flight before any sum, and
 * none of the warp kernel's row loop, parameter pipe or grid offsets.
 *
 * How. Lane gl of a group holds packs gl, gl + W, ... (PK at most) of each of its R rows, every
 * load issued before any sum (__ldcs: x is read once). The statistics are the op's register
 * statistics (Op::stats, as in the warp kernel: LayerNorm's exact mean, a double cross-lane sum
 * kept as two floats) over a context whose all-reduce is the group's shuffles, the R rows in one
 * all-reduce so their shuffle chains interleave. Then each pack's parameters are loaded once for
 * the group's R rows, and y is stored evict-first; where the op's policy says so
 * (ND_ROWS_LEAN_PRESENT), calls with every parameter present take a copy of that loop that sets
 * no absent-parameter defaults, its lanes asking for all their parameters at once where a group
 * holds one row (LayerNorm's 16-bit rows: +0.3 to +3.7 points, bench/results/
 * lean_present_h200.txt). No loop over rows: one unit of 32 / W x R x NW rows a block, a grid
 * of every unit (at most 2^31 - 1 of them). Which rows and which (W, R,
 * NW) are the op's policy's lean(element bytes, packs, fast), measured per op: LayerNorm's
 * 16-bit rows of 128, 256, 512 and 1024 columns (+1.6 to +6.6 points of the copy ceiling),
 * softmax's of 512 and 1024 and log_softmax's of 1024 (+1 to +1.8) take it on an H200, and in
 * the exact twin LayerNorm's of 384, RMSNorm's of 192 and log_softmax's of 128 and 256 (-0.5
 * to +1.8, bench/results/lean_short_h200.txt, lean_ls256_h200.txt) and LayerNorm's of 64 (+1.8
 * to +3.4 since each lane finishes one row, ln_spread_h200.txt) and 192 (+1.4 to +1.8,
 * ln192_h200.txt); LayerNorm's of 128 and 256 columns on an H100 too (+0.4 to +2.3), and of
 * 640 on an H100 only (+0.4 to +0.7);
 * LayerNorm's and RMSNorm's float32 rows of 64 and 128 columns, in blocks of 4 warps, on every
 * device (+1.1 to +7 at 64 columns; bench/results/lean_f32_h200.txt, lean_f32_h100.txt).
 * Rows that fill every lane (W x PK packs) take the exact twin, whose row length is a
 * compile-time number (ND_ROWS_LEAN_EXACT): LayerNorm 16-bit 128-1024 columns +0.5 to +2.7
 * points on an H200, softmax within 0.5 (bench/results/lean_exact_h200.txt); on an H100, where
 * LayerNorm's 128 and 256 columns take the lean kernel, +1.2 to +1.7 and +0.3 to +0.4
 * (bench/results/lean_exact_h100.txt).
 *
 * Tried first (H200, two alternating rounds, % of the same-run copy ceiling): the op's stream
 * statistics (Op::stream_stats, ctx.for_each over the registers), one call a row. nvcc ran the
 * R rows' shuffle chains one after the other, and LayerNorm's 16-bit rows ran 256 columns at
 * 82.7 / 86.3 (bfloat16 / float16; R = 2, NW = 4) against the tile kernel's 84.6 / 86.3, 512 at
 * 88.5 / 92.4 against 91.2 / 91.9; 1024 (R = 1) gained, 93.9 / 94.7 -> 95.6 / 96.7. Each lane's
 * parameters loaded with x, before the statistics, rather than after them: up to 24 points
 * lower (bfloat16 1024 columns 95.6 -> 71.8).
 * Tried (H200, three alternating rounds, bench/results/lean_pf_h200.txt): thread 0 of each block
 * asking L2 (one cp.async.bulk.prefetch.L2, before its loads) for the rows of the block a
 * device-full (32 blocks an SM) or half of one later, as the big block and the 16-bit axis
 * kernels do with a gain. LayerNorm 64-1024 columns: a device-full ahead moved 16-bit -1.6 to
 * +1.1 (bfloat16 192 89.2 -> 90.3; 512 and 1024 -1.1 to -1.6), half of one -5.1 to +1.4; float32
 * in 4-warp blocks, 64 columns 96.1 -> 97.4 / 94.4, 128 95.2 -> 91.7 / 85.9. Not kept.
 */
#ifndef ND_ROWS_LEAN_CUH
#define ND_ROWS_LEAN_CUH

/* 0: never (A/B runs); 1: where the op's policy's lean() says */
#ifndef ND_ROWS_LEAN
#define ND_ROWS_LEAN 1
#endif

/* Rows of exactly W x PK packs in the lean kernel's exact twin (XP): 1 (as measured), or 0 for
 * none (A/B runs) */
#ifndef ND_ROWS_LEAN_EXACT
#define ND_ROWS_LEAN_EXACT 1
#endif

/* 1: the lean kernel's first element depends on every word it loads, so that ptxas issues all of
 * a lane's loads before its statistics (as measured); 0: no such dependency (A/B runs). H200,
 * three alternating rounds, every op's lean kernels built with it (bench/results/
 * lean_dep_h200.txt), float16 / bfloat16: LayerNorm 128 columns 92.9 / 91.5 -> 94.5 / 93.5 and
 * 93.5 / 92.1 -> 95.3 / 95.1 (with the spread finish at 2 packs a lane, ND_LN_SPREAD_MAX_N,
 * which lost 2-5.5 points without it; LayerNorm alone in an earlier call, ln_spread_h200.txt
 * call 6: 92.5 / 91.3 -> 93.4 / 93.1), log_softmax 128 96.5 / 96.3 -> 95.7 / 98.6, every other
 * lean row within -0.7 to +0.9 (LayerNorm 64-1024, RMSNorm 192, softmax 512 / 1024,
 * log_softmax 256 / 1024, float32 64 / 128); rows the knob does not reach moved -0.6 to +0.3. */
#ifndef ND_ROWS_LEAN_LOAD_DEP
#define ND_ROWS_LEAN_LOAD_DEP 1
#endif

/* How a lean kernel with every parameter present writes y (nd_lean_present, the op's policy's
 * lean_present(element bytes, rows a group); -1: as the policy says, as measured; 0-2 on every
 * op with parameters, for A/B runs):
 *   0  one output loop for present and absent parameters (gamma 1, beta 0 where absent);
 *   1  a second copy of the loop, taken when every parameter is present, that sets no
 *      absent-parameter defaults (in the shared loop, a move an element, then overwritten
 *      under a predicate);
 *   2  as 1, each lane asking for all its packs' parameters at once before its first output
 *      pack, rather than each pack's after the last pack's store. */
#ifndef ND_ROWS_LEAN_PRESENT
#define ND_ROWS_LEAN_PRESENT (-1)
#endif

/* the most packs a lane holds of a row: rows of up to W x this many packs */
#define ND_ROWS_LEAN_MAX_PK 4

/* Warps an SM the lean kernel's launch bounds ask for (0: none, as measured; A/B runs). Blocks of
 * one warp stop at 32 an SM (50% occupancy), the hardware's block limit; blocks of NW warps at
 * nvcc's own register count (57 for LayerNorm bfloat16 256 columns, bench/results/
 * ncu_ln_bf16_h100.txt) stop at about 35 warps. Asking for more caps the registers, so blocks of
 * 2 warps can hold more warps an SM than either (for NW = 1 a bound past 32 blocks is no bound).
 * nvcc 13, -Xptxas -v, LayerNorm 16-bit 256 columns in 16 lanes x 2 rows x 2 warps: 40 warps an
 * SM, 48 registers, no spill (42 warps resident); 48 warps, 40 registers, 44-48 bytes spilled.
 * At 40 with 2-warp blocks for LayerNorm 16-bit 256, 512 and 1024 columns, H200, three
 * alternating rounds: -0.7 to -1.7 points at each (bench/results/lean_nw2_h200.txt). */
#ifndef ND_ROWS_LEAN_MIN_WARPS
#define ND_ROWS_LEAN_MIN_WARPS 0
#endif

/* The register kernels' context (Op::stats) of the lean kernel: a group of W lanes over rows on
 * the 16-byte grid in whole packs, lane gl of the group holding packs gl, gl + W, ... (PK at
 * most) of each of its rows. */
template <int W, int PK, int VEC> struct nd_lean_ctx {
    static constexpr int kKind = ND_CTX_WARP; /* shuffles: one all-reduce round (LayerNorm) */
    static constexpr int kSpreadLanes = W;    /* the group's rows: nd_ctx_spread_lanes */
    int gl, npacks, cols;
    float n;
    /* whether element e of this lane's share of a row is in the row: its pack is */
    __device__ __forceinline__ bool valid(int, int e) const
    {
        return (e / VEC) * W + gl < npacks;
    }
    /* true when every pack this lane holds is in the row */
    __device__ __forceinline__ bool full(int) const { return (PK - 1) * W + gl < npacks; }
    /* rows on the grid in whole packs: each pack in the row or wholly past its end */
    __device__ __forceinline__ bool whole_packs(int) const { return true; }
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        nd_warp_allreduce<W, K>(v, op);
    }
    /* lane 0 of the group holds column 0: one shuffle */
    __device__ __forceinline__ float first(int, float f) const
    {
        return __shfl_sync(0xffffffffu, f, 0, W);
    }
    /* lane `src` of the group's v (every lane of the warp calls it) */
    __device__ __forceinline__ float from_lane(float v, int src) const
    {
        return __shfl_sync(0xffffffffu, v, src, W);
    }
};

/* ND_ROWS_LEAN_PRESENT for an op's lean kernel of R rows a group: the op's policy's
 * lean_present(element bytes, R) where it has one (0 where not), 0 for ops without parameters. */
template <class Op, class = void> struct nd_lean_present_of {
    static __host__ __device__ constexpr int get(int, int) { return 0; }
};
template <class Op>
struct nd_lean_present_of<Op, std::void_t<decltype(Op::Policy::lean_present(2, 1))>> {
    static __host__ __device__ constexpr int get(int elem_bytes, int rows)
    {
        return Op::Policy::lean_present(elem_bytes, rows);
    }
};
template <class Op> __host__ __device__ constexpr int nd_lean_present(int elem_bytes, int rows)
{
    return Op::kParams == 0 ? 0
           : ND_ROWS_LEAN_PRESENT >= 0 ? ND_ROWS_LEAN_PRESENT
                                       : nd_lean_present_of<Op>::get(elem_bytes, rows);
}

/* Groups of W lanes a row (32 / W groups a warp), R rows a group, NW warps a block: a group's
 * rows are r0 + r * (32 / W), r < R, the warp's groups taking consecutive rows. XP > 0 (the exact
 * twin, ND_ROWS_LEAN_EXACT): rows of XP = W x PK packs, a number the compiler knows, so the
 * packs' bounds tests, the row length and 1 / n fold away and each address is a shift and an
 * add; XP = 0: rows of any length the geometry holds, read at run time. */
template <class Op, class T, int VEC, int W, int PK, int R, int NW, int XP = 0>
__global__ void __launch_bounds__(32 * NW, ND_ROWS_LEAN_MIN_WARPS / NW)
    nd_rows_lean_kernel(nd_rows_args<T> a, typename Op::Params prm)
{
    static_assert(XP == 0 || XP == W * PK, "the exact twin: every lane holds PK packs");
    constexpr int GPW = 32 / W; /* groups a warp */
    constexpr int N = PK * VEC; /* elements a lane holds of a row */
    const int lane = threadIdx.x & 31, gl = lane % W;
    const int64_t cols = XP > 0 ? (int64_t)XP * VEC : a.cols;
    nd_lean_ctx<W, PK, VEC> ctx;
    ctx.gl = gl;
    ctx.npacks = (int)(cols / VEC);
    ctx.cols = (int)cols;
    const int64_t r0 = ((int64_t)blockIdx.x * NW + (threadIdx.x >> 5)) * (GPW * R) + lane / W;
    const uint4 *x = reinterpret_cast<const uint4 *>(a.x);
    nd_regrow<T, N> v[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = r0 + r * GPW;
        const bool in = row < a.rows; /* a row past the end: zeros, computed, not stored */
        const uint4 *xr = x + row * ctx.npacks;
#pragma unroll
        for (int k = 0; k < PK; k++) {
            const int p = k * W + gl;
            const uint4 w = in && p < ctx.npacks ? __ldcs(xr + p) : make_uint4(0, 0, 0, 0);
            const uint32_t wds[4] = {w.x, w.y, w.z, w.w};
            v[r].put_pack(k, wds);
        }
    }
    if constexpr (ND_ROWS_LEAN_LOAD_DEP != 0) {
        /* the first element made to depend on every loaded word, through a mask that is 0 for
         * any real row count (rows < 2^62) but that the compiler cannot know, so ptxas issues
         * every load before the statistics start */
        uint32_t all = 0;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < nd_regrow<T, N>::kWords; i++)
                all ^= v[r].w[i];
        v[0].w[0] ^= all & (uint32_t)((uint64_t)a.rows >> 62);
    }
    if constexpr (XP > 0)
        ctx.n = (float)cols;
    else
        nd_ctx_cols_here(ctx); /* the row length as a float after the loads (ND_ROWS_WARP_LATE_N) */
    constexpr bool K = nd_param_l2_last<Op>((int)sizeof(T));
    constexpr int NP = Op::kParams < 2 ? Op::kParams : 2;
    const T *pp[2] = {a.p0, a.p1};
    /* the R rows' statistics in one all-reduce */
    typename Op::State st[R];
    Op::template stats<R, N>(v, st, ctx, prm);
#pragma unroll
    for (int r = 0; r < R; r++)
        if (gl == 0 && r0 + r * GPW < a.rows)
            Op::write_stats(st[r], r0 + r * GPW, prm);
    /* y, pack by pack; PRESENT: every parameter there (nd_lean_present) */
    constexpr int HOW = nd_lean_present<Op>((int)sizeof(T), R);
    auto emit = [&](auto present) {
        constexpr bool PRESENT = decltype(present)::value;
        constexpr bool AHEAD = PRESENT && HOW == 2;
        /* parameter q's pack p of the row, as loaded */
        auto param = [&](int q, int p) {
            return nd_ldg_keep<K>(reinterpret_cast<const uint4 *>(pp[q]) + p);
        };
        uint4 pw[PK][2]; /* AHEAD: the lane's parameters, asked for before any output */
        if constexpr (AHEAD) {
#pragma unroll
            for (int k = 0; k < PK; k++)
#pragma unroll
                for (int q = 0; q < NP; q++)
                    if (k * W + gl < ctx.npacks)
                        pw[k][q] = param(q, k * W + gl);
        }
#pragma unroll
        for (int k = 0; k < PK; k++) {
            const int p = k * W + gl;
            if (p >= ctx.npacks) /* this pack and the lane's next ones lie past the row */
                break;
            float g[2][VEC]; /* each pack's parameters, once for the R rows */
#pragma unroll
            for (int q = 0; q < 2; q++) {
                if (q >= NP || (!PRESENT && !pp[q])) { /* absent: gamma 1, beta 0 */
#pragma unroll
                    for (int j = 0; j < VEC; j++)
                        g[q][j] = q == 0 ? 1.0f : 0.0f;
                    continue;
                }
                nd_word_floats<T, VEC>(AHEAD ? pw[k][q] : param(q, p), g[q]);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int64_t row = r0 + r * GPW;
                if (row >= a.rows)
                    continue;
                float o[VEC];
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    o[j] = Op::out(st[r], prm, v[r].get(k * VEC + j), g[0][j], g[1][j]);
                nd_store_pack_stream<T, VEC>(a.y + row * cols + (int64_t)p * VEC, o);
            }
        }
    };
    if constexpr (HOW > 0) {
        if (pp[0] && (NP < 2 || pp[1])) {
            emit(std::true_type());
            return;
        }
    }
    emit(std::false_type());
}

/* The policy's lean geometry, packed as lanes a row * 4096 + rows a group * 64 + warps a block
 * (0: not the lean path). */
constexpr int nd_lean_code(int lanes, int rows, int warps)
{
    return lanes * 4096 + rows * 64 + warps;
}
constexpr int nd_lean_lanes(int code) { return code / 4096; }

/* A/B runs: ND_ROWS_LEAN_TRY(element bytes, packs), a geometry (nd_lean_code) for every op's
 * rows of that many packs on a fast device where its policy names none; 0: the policies alone.
 * Defined in a header given to nvcc with -include (nvcc splits a -D value at its commas), say
 *   #define ND_ROWS_LEAN_TRY(e, p) ((e) == 2 && (p) == 16 ? nd_lean_code(16, 4, 1) : 0) */
#ifndef ND_ROWS_LEAN_TRY
#define ND_ROWS_LEAN_TRY(e, p) 0
#endif
/* 1: ND_ROWS_LEAN_TRY's geometries on every device, not only a fast one (A/B runs on an H100) */
#ifndef ND_ROWS_LEAN_TRY_EVERY
#define ND_ROWS_LEAN_TRY_EVERY 0
#endif

/* the geometry for rows of `packs` packs: the policy's, or an A/B run's (ND_ROWS_LEAN_TRY) */
template <class Pol> constexpr int nd_rows_lean_code(int elem_bytes, int64_t packs, bool fast)
{
    const int c = Pol::lean(elem_bytes, packs, fast);
    return c || (!fast && !ND_ROWS_LEAN_TRY_EVERY) ? c : ND_ROWS_LEAN_TRY(elem_bytes, packs);
}

/* Whether rows of P packs take the lean kernel's exact twin (ND_ROWS_LEAN_EXACT) in W lanes of
 * PK packs */
constexpr bool nd_rows_lean_exact(int64_t p, int w, int pk)
{
    return ND_ROWS_LEAN_EXACT && p == (int64_t)w * pk;
}

/* Whether some row of T of W x (PK - 1) + 1 .. W x PK packs takes the lean geometry `code` of W
 * lanes (every such geometry when code is 0) on some device: so that only the kernels a policy
 * names are compiled. kernel: -1 in any kernel, 1 in the exact twin, 0 in the generic kernel. */
template <class Pol>
constexpr bool nd_rows_lean_has(int elem_bytes, int w, int pk, int code, int kernel = -1)
{
    if (!ND_ROWS_LEAN)
        return false;
    for (int p = w * (pk - 1) + 1; p <= w * pk; p++)
        for (int f = 0; f < 2; f++) {
            const int c = nd_rows_lean_code<Pol>(elem_bytes, p, f != 0);
            if (c != 0 && nd_lean_lanes(c) == w && (code == 0 || c == code) &&
                (kernel < 0 || nd_rows_lean_exact(p, w, pk) == (kernel == 1)))
                return true;
        }
    return false;
}

template <class Pol> constexpr bool nd_rows_lean_any(int elem_bytes)
{
    for (int w = 8; w <= 32; w *= 2)
        for (int pk = 1; pk <= ND_ROWS_LEAN_MAX_PK; pk++)
            if (nd_rows_lean_has<Pol>(elem_bytes, w, pk, 0))
                return true;
    return false;
}

/* The lean kernel for rows on the grid of P packs in the policy's geometry `code` (nd_lean_code:
 * W lanes of at most ND_ROWS_LEAN_MAX_PK packs a row); the geometries below are every one a
 * policy may name. */
template <class Op, class T, int VEC, class Pol>
static nd_status nd_rows_lean_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  int64_t P, int code, const nd_cuda_device_info *di,
                                  cudaStream_t s, const char *name, nd_error *err)
{
    using std::integral_constant;
    auto launch = [&](auto w, auto pk, auto r, auto nw) -> nd_status {
        constexpr int W = decltype(w)::value, PK = decltype(pk)::value;
        constexpr int R = decltype(r)::value, NW = decltype(nw)::value;
        constexpr int E = (int)sizeof(T), C = nd_lean_code(W, R, NW);
        /* the exact twin for rows of W x PK packs, the generic kernel for the rest */
        constexpr bool EXACT = nd_rows_lean_has<Pol>(E, W, PK, C, 1);
        constexpr bool GENERIC = nd_rows_lean_has<Pol>(E, W, PK, C, 0);
        if constexpr (EXACT || GENERIC) {
            const int64_t per = (int64_t)(32 / W) * R * NW; /* rows a block */
            const int64_t units = (a.rows + per - 1) / per;
            if (units > 0x7fffffff)
                return nd_error_set(err, ND_EUNSUPPORTED, "%s: %lld rows are too many for one "
                                    "lean launch", name, (long long)a.rows);
            const bool exact = EXACT && nd_rows_lean_exact(P, W, PK);
            ND_PLAN("lean W=%d packs=%d R=%d warps=%d%s", W, PK, R, NW, exact ? " exact" : "");
            if constexpr (EXACT)
                if (exact)
                    return nd_rows_launch(nd_rows_lean_kernel<Op, T, VEC, W, PK, R, NW, W * PK>,
                                          32 * NW, 1, 0, units, di, s, err, name, a, prm);
            if constexpr (GENERIC)
                return nd_rows_launch(nd_rows_lean_kernel<Op, T, VEC, W, PK, R, NW>, 32 * NW, 1,
                                      0, units, di, s, err, name, a, prm);
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: no lean kernel of %d lanes x %d packs "
                                "for rows of %lld packs", name, W, PK, (long long)P);
        } else {
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: no lean kernel of %d lanes x %d packs, "
                                "geometry %d", name, W, PK, code);
        }
    };
    auto geometry = [&](auto w, auto pk) -> nd_status {
        constexpr int W = decltype(w)::value;
        switch (code - nd_lean_code(W, 0, 0)) {
#define ND_LEAN_CASE(R, NW)                                                                        \
    case nd_lean_code(0, R, NW):                                                                   \
        return launch(w, pk, integral_constant<int, R>(), integral_constant<int, NW>());
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
    auto packs = [&](auto w) -> nd_status {
        constexpr int W = decltype(w)::value;
        static_assert(ND_ROWS_LEAN_MAX_PK == 4, "one case a pack count");
        switch ((P + W - 1) / W) {
        case 1: return geometry(w, integral_constant<int, 1>());
        case 2: return geometry(w, integral_constant<int, 2>());
        case 3: return geometry(w, integral_constant<int, 3>());
        case 4: return geometry(w, integral_constant<int, 4>());
        default:
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: rows of %lld packs are too long for "
                                "%d lanes of the lean kernel", name, (long long)P, W);
        }
    };
    switch (nd_lean_lanes(code)) {
    case 8: return packs(integral_constant<int, 8>());
    case 16: return packs(integral_constant<int, 16>());
    case 32: return packs(integral_constant<int, 32>());
    default:
        return nd_error_set(err, ND_EUNSUPPORTED, "%s: no lean kernel of geometry %d", name, code);
    }
}

#endif /* ND_ROWS_LEAN_CUH */
