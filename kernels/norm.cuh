/*
 * norm.cuh - what LayerNorm (layernorm.cu) and RMSNorm (rmsnorm.cu) share: the technique, the
 * tuned policy, the parameters and the launcher. Each op is a translation unit of its own, so
 * the two compile side by side.
 *
 * Technique: OneFlow's LayerNorm (seed 000) and the RMSNorm article (seed 002): the row is read
 * once into registers with 16-byte packs, reduced, and written from registers; the kernel is chosen
 * by row size (sub-warp groups, warp, block; see rows.cuh). Departures (and those of LayerNorm's
 * statistics in layernorm.cu):
 *   - Rows longer than a block's registers are spread over a thread-block cluster (sm_90) that
 *     all-reduces through distributed shared memory, instead of OneFlow's shared-memory cache and
 *     uncached block fallback; x is still read from device memory once. Only rows beyond a
 *     16-block cluster (262144 float32 / 524288 16-bit columns) take the re-reading stream
 *     kernel.
 *   - Any row start: packs follow the 16-byte grid of memory, partial packs at the row's ends.
 */
#ifndef ND_NORM_CUH
#define ND_NORM_CUH

#include "rows.cuh"

/* ---------------------------------------------------------------------------------------------
 * Policies: the tuned numbers, one place for both ops.
 * ------------------------------------------------------------------------------------------- */

/* nd_norm_policy::lean's geometries (nd_lean_code(lanes a row, rows a group, warps a block),
 * 0: none) for float32 rows of 16 and 32 packs */
#ifndef ND_NORM_LEAN_F32_P16
#define ND_NORM_LEAN_F32_P16 nd_lean_code(8, 2, 4)
#endif
#ifndef ND_NORM_LEAN_F32_P32
#define ND_NORM_LEAN_F32_P32 nd_lean_code(32, 2, 4)
#endif

struct nd_norm_policy {
    static constexpr int kRegBytes = 128;    /* bytes of the row per thread held in registers */
    /* Packs a lane of the warp kernel loads before its first reduction (R = that / packs rows,
     * at least 1), for groups of w lanes of `packs` packs: 2, and 4 for groups of 4 lanes
     * (float32 32 / 16-bit 64 columns): H200 +12 to +15 points of the copy ceiling there; 4
     * everywhere lost 9-13 at 2 lanes (16-bit 32) and 1-3 at 8. H100, LayerNorm, three
     * alternating runs: 4 everywhere else lost 15 points at 32 columns and 5 at float32 64; 8
     * for groups of 4 lanes lost 30 at 16-bit 64 columns (bench/results/short_rows_h100.txt). */
    static constexpr int rows_in_flight(int w, int) { return w == 4 ? 4 : 2; }
    static constexpr int kSubPacks = 4;      /* packs per lane in the sub-warp kernel */
    /* rows of this many packs and more take kSubPacks packs a lane */
    static constexpr int sub_full(int) { return 8 * kSubPacks; }
    /* the smallest block of the block kernel for rows of that element size */
    static constexpr int block_min(int) { return 128; }
    static constexpr int kBlockMax = 512;
    /* Threads of a split kernel's chunk block (rows_split.cuh; chunks of 8 packs a thread): 256
     * for float32, 512 for 16-bit. H100, three alternating rounds, % of the copy ceiling, 512 ->
     * 256: float32 RMSNorm 128x1048576 84.9 -> 89.0, 512x262144 94.2 -> 93.3, 2048x65536 97.1
     * -> 96.3 (softmax's float32 rows gained 1-2 points at 262144 and 1048576 columns); 16-bit
     * RMSNorm lost 0 to 1.4 (bench/results/rows_split_h100.txt). */
    static constexpr int split_threads(int elem_bytes) { return elem_bytes == 4 ? 256 : 512; }
    /* the split kernel's L2 prefetch, eighths of a device-full of blocks ahead (rows_split.cuh),
     * on a device of the fast class or not: half a device-full on both (H100, four alternating
     * rounds, 128x1048576 and 512x262144: 3 eighths moved -0.9 to +1.4 points of the copy
     * ceiling, 2 lost up to 5.8 and 6 up to 4.9; bench/results/rows_split_pf.txt) */
    static constexpr int split_pf_ahead8(bool) { return 4; }
    static constexpr int kClusterMax = 16;
    static constexpr int kStreamThreads = 512;
    /* the warp kernel everywhere; LayerNorm and RMSNorm name their tile kernel geometries in
     * their own policies (rows_tile.cuh) */
    static constexpr int tile_tiles(int, int, int, bool, bool, bool) { return 0; }
    /* rows of exactly a kernel's geometry take its exact twin (ND_ROWS_EXACT) */
    static constexpr bool exact(int, int, bool) { return true; }
    /* every fitted warp geometry (ND_ROWS_WARP_FIT): LayerNorm's 16-bit rows gained 5-29
     * points of the copy ceiling at each one measured (24-896 columns), float32 24-96 10-13,
     * 192 and 320 moved within 0.7 (H100; bench/results/model_widths_h100.txt) */
    static constexpr bool warp_fit(int, int, int, bool) { return true; }
    /* no quarter-lane fits (ND_ROWS_WARP_FIT_QUARTER); LayerNorm and RMSNorm name theirs */
    static constexpr bool quarter_fit(int, int, int) { return false; }
    /* no tail fits (ND_ROWS_WARP_FIT_TAIL) */
    static constexpr bool tail_fit(int, int, int) { return false; }
    /* rows past kBlockMax x 8 packs take the split kernel, not one block of 1024 threads */
    static constexpr bool big_block(int, int, bool) { return false; }
    /* rows off the 16-byte grid of at most this many packs of their own grid (ceil(cols / VEC))
     * take the stage kernel (rows_stage.cuh): 10 (16-bit 80 columns, float32 40). H200, two
     * alternating rounds against the warp kernel's generic form, % of the copy ceiling
     * (bench/results/rows_stage_h200.txt): RMSNorm 16-bit 7 / 20 / 44 / 50 / 77 columns 51 /
     * 45 / 46 / 45 / 39 -> 63 / 61 / 47 / 48 / 44, float32 7 63 -> 74; at 100-197 columns
     * 16-bit lost 2-12, at 333-2047 2-22. H100, the kept rule: 16-bit 7-79 columns +3.5 to
     * +20, float32 7 +11. */
    static constexpr int stage_packs(int) { return 10; }
    /* no row takes the loop kernel (rows_loop.cuh); RMSNorm's policy names its rows */
    static constexpr int loop(int, int64_t, bool) { return 0; }
    /* float32 rows of 16 and 32 packs (64 and 128 columns) take the lean kernel's exact twin
     * (rows_lean.cuh) on every device, LayerNorm's and RMSNorm's alike: 8 lanes x 2 rows x 4
     * warps and 32 x 2 x 4 (ND_NORM_LEAN_F32_P16 / _P32). Three alternating rounds against the
     * warp kernel's exact twins, % of the same-run copy ceiling, LayerNorm / RMSNorm:
     *   H200 (bench/results/lean_f32_h200.txt)   64 columns 93.2 / 95.8 -> 96.2 / 96.9 (8 x 4 x 1:
     *                                            91.3 / 96.7); 128 94.2 / 94.0 -> 95.4 / 95.6
     *                                            (16 x 2 x 1: 94.8 / 95.2); x torch.compile 64
     *                                            1.05 / 1.03 -> 1.08 / 1.04, 128 1.03 / 1.02 ->
     *                                            1.04 / 1.03
     *   H100 (lean_f32_h100.txt)                 64 96.2 / 99.9 -> 103.2 / 103.9 (LayerNorm x
     *                                            torch.compile 1.00 -> 1.08); 128 97.0 / 97.1 ->
     *                                            96.9 / 98.2
     * 16-bit rows: none here; LayerNorm's policy names its own. RMSNorm's 16-bit rows through
     * the generic form, before the exact twin (H200, two alternating rounds; bench/results/
     * lean_h200.txt): 64-384 columns 0.9-13 points lower in every geometry tried (three a width,
     * 8-32 lanes), 512 and 1024 within 0.4, 640 +0.9 / +1.0 (32 x 1 x 4); in the exact twin
     * with 4-warp blocks, 192 and 256 columns lost 0.5-3.7 (lean_nw4_h200.txt). On an H100
     * (ND_ROWS_LEAN_TRY_EVERY, LayerNorm's geometries for 24, 32 and 64 packs, three alternating
     * rounds; bench/results/lean_odd_h100.txt) 16-bit 192 columns lost 1.5-2.0, 256 0, 512
     * 0.3-0.9. */
    static constexpr int lean(int elem_bytes, int64_t packs, bool)
    {
        return elem_bytes != 4 ? 0
               : packs == 16   ? ND_NORM_LEAN_F32_P16
               : packs == 32   ? ND_NORM_LEAN_F32_P32
                               : 0;
    }
};

/* The policy an op runs with: Op::Policy where it names one, else nd_norm_policy. */
template <class Op, class = void> struct nd_op_policy { typedef nd_norm_policy type; };
template <class Op> struct nd_op_policy<Op, std::void_t<typename Op::Policy>> {
    typedef typename Op::Policy type;
};

struct nd_norm_params {
    float eps;
    float *mean;
    float *rstd;
};

/* ---------------------------------------------------------------------------------------------
 * Launchers (each op's file has its entry point, which instantiates these for its op)
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
    return nd_rows_run<Op, T, typename nd_op_policy<Op>::type>(ra, p, s, name, err);
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

#endif /* ND_NORM_CUH */
