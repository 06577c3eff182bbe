/*
 * rmsnorm.cuh - RMSNorm over the last axis (CUDA backend): the op below run by the row engine
 * (rows.cuh) with the policy and launcher of norm.cuh, where the technique is described. One
 * all-reduce per row, of sum(x^2).
 */
#ifndef ND_RMSNORM_CUH
#define ND_RMSNORM_CUH
#include "norm.cuh"

/* ---------------------------------------------------------------------------------------------
 * Op
 * ------------------------------------------------------------------------------------------- */

#ifndef ND_RMS_TILE_FULL /* 1: nd_rmsnorm_policy::tile_tiles takes 4 x 2 only for rows that fill every lane */
#define ND_RMS_TILE_FULL 1
#endif

#ifndef ND_RMS_BIG_PLAIN /* nd_rmsnorm_op::big_plain: 1 x loaded plainly, 2 y stored so, 3 both */
#define ND_RMS_BIG_PLAIN 3
#endif
#ifndef ND_RMS_LOOP /* 1: nd_rmsnorm_policy::loop names the rows below; 0: none */
#define ND_RMS_LOOP 1
#endif
#ifndef ND_RMS_LOOP16_1024 /* the loop geometry for 16-bit rows of 1024 packs (0: the block kernel) */
#define ND_RMS_LOOP16_1024 nd_loop_code(256, 4)
#endif
/* the loop geometry for float32 rows of 1024 packs (4096 columns), on any device (a number on
 * nvcc's command line: nd_loop_code's threads * 8 + packs, 2052 for 256 x 4). 256 x 4 on an H100
 * (three alternating rounds): 99.7 -> 98.2% of the copy ceiling against 512 x 2 (bench/results/
 * loop256_h100.txt); on an H200 99.3 -> 98.3 (rms_loop256_h200.txt). */
#ifndef ND_RMS_LOOP32_1024
#define ND_RMS_LOOP32_1024 nd_loop_code(512, 2)
#endif
/* the loop geometry for float32 rows of 1280 packs (5120 columns) on a fast device (0: the block
 * kernel): 320 x 4, one pass that every thread fills; see nd_rmsnorm_policy::loop */
#ifndef ND_RMS_LOOP32_1280
#define ND_RMS_LOOP32_1280 nd_loop_code(320, 4)
#endif

#ifndef ND_RMS_LEAN_P24 /* nd_rmsnorm_policy::lean: 16-bit rows of 24 packs on a fast device (0: none) */
#define ND_RMS_LEAN_P24 nd_lean_code(8, 1, 1)
#endif
#ifndef ND_RMS_LEAN_PRESENT_R1 /* nd_rmsnorm_policy::lean_present, 16-bit groups of one row */
#define ND_RMS_LEAN_PRESENT_R1 2
#endif

#ifndef ND_RMS_BIG_PF16 /* nd_rmsnorm_policy::big_pf for 16-bit rows: eighths of a device-full */
#define ND_RMS_BIG_PF16 6
#endif
#ifndef ND_RMS_SUB_FULL16 /* nd_rmsnorm_policy::sub_full(2) */
#define ND_RMS_SUB_FULL16 16
#endif

/* RMSNorm's policy: nd_norm_policy's, with 16-bit rows of 16-31 packs (128-248 columns) at
 * kSubPacks (4) packs a lane in 4-8 lanes rather than 2 in 8-16, and the tile kernel
 * (rows_tile.cuh, 2 tiles a block) for 16-bit rows in groups of 4 lanes x 4 packs (the geometry of
 * 128 columns) on every device and of 4 x 2 (64 columns) on a fast one (an H200). Against the
 * warp kernel, float16 / bfloat16 % of the copy ceiling: 128 columns, H200 (three alternating
 * rounds) 88.5 / 83.5 -> 98.1 / 98.3, where 4 x 4 lanes in the warp kernel measured 87.0 / 87.2;
 * H100 (two) 94.5 / 94.9 -> 105.4 / 104.4 against 4 x 4 in the warp kernel. 64 columns: H200
 * 95.4 / 95.1 -> 97.2 / 97.5, H100 99.1 / 99.0 -> 96.7 / 96.8. Every other width of 32-2048
 * columns through the tile kernel, and float32, lost up to 14 points or was within 1 on the H200
 * (bench/results/rows_tile_h200.txt). */
struct nd_rmsnorm_policy : nd_norm_policy {
    /* nd_norm_policy's lean rows, and on a fast device 16-bit rows of 24 packs (192 columns) in
     * the lean kernel's exact twin, 8 lanes x 4 rows x 1 warp (ND_RMS_LEAN_P24). H200, three
     * alternating rounds in each of two calls against the warp kernel's exact twin, float16 /
     * bfloat16 % of the copy ceiling (bench/results/lean_short_h200.txt): 94.7 / 94.5 -> 95.7 /
     * 94.8 and 94.5 / 94.1 -> 94.5 / 94.9 (x torch.compile 1.00 / 0.98 -> 1.01 / 0.98); 8 x 2 x 1
     * 93.1 / 93.0, 32 x 4 x 1 90.2 / 91.5. 16-bit rows of 8 packs (64 columns) in 8 x 4 x 1, as
     * LayerNorm's take them now, lost to the tile kernel: 95.2 / 96.0 -> 93.9 / 94.5
     * (bench/results/rms_lean64_h200.txt).
     * Since the lean kernel's loop for present parameters (lean_present, below), those rows take
     * 8 x 1 x 1, one row a group, with that loop and each lane's gamma asked for at once: H200,
     * four alternating rounds against 8 x 4 x 1 (bench/results/lean_present_h200.txt, call 3),
     * float16 / bfloat16 94.0-95.0 / 94.1-95.0 -> 94.8-95.2 / 95.8-96.0; 8 x 1 x 1 with one loop
     * 93.8-94.2 / 94.5-94.9. The kept library against the one before in a later call (three
     * rounds): 94.4-95.6 / 95.0-95.6 -> 95.0-95.2 / 95.7-96.0 (call 4). */
    static constexpr int lean(int elem_bytes, int64_t packs, bool fast)
    {
        if (elem_bytes == 2 && packs == 24 && fast)
            return ND_RMS_LEAN_P24;
        return nd_norm_policy::lean(elem_bytes, packs, fast);
    }
    /* How the lean kernel writes y when gamma is there (ND_ROWS_LEAN_PRESENT): 16-bit groups of
     * one row (192 columns, above) with the loop for present parameters, gamma asked for at once
     * (2); others one loop (0): 16-bit 192 columns in 8 x 4 x 1 lost 0.2-1.9 points with the loop
     * for present parameters, float32 64 and 128 columns moved within 0.6
     * (bench/results/lean_present_h200.txt, call 1). 16-bit rows of 256 and 512 columns in the
     * lean kernel, one row a group with gamma at once (8 x 1 x 1, 16 x 1 x 1), lost to the warp
     * kernel: float16 / bfloat16 256 95.9 / 95.8 -> 94.3 / 95.3, 512 97.3 / 97.4 -> 96.8 / 97.0
     * (three alternating rounds, bench/results/split_exchange_h200.txt). */
    static __host__ __device__ constexpr int lean_present(int elem_bytes, int rows)
    {
        return elem_bytes == 2 && rows == 1 ? ND_RMS_LEAN_PRESENT_R1 : 0;
    }
    /* Rows of more than 32 chunks (float32 1048576 columns) on a fast device: chunks of 512
     * threads, not 256 (16-bit chunks are 512 already). H200, three alternating rounds
     * (bench/results/split_threads_h200.txt): float32 128x1048576 80.5 -> 83.1% of the copy
     * ceiling. */
    static constexpr int split_threads_long(int elem_bytes, bool fast)
    {
        return fast ? 512 : split_threads(elem_bytes);
    }
    /* nd_norm_policy's, but 8 packs a lane in flight (R = 4 rows a group) for groups of 8 lanes
     * of 1-2 packs (float32 64, 16-bit 128 columns), as softmax's policy has. H100, three
     * alternating rounds, % of the copy ceiling (bench/results/rows_rif8.txt): float32 64
     * columns 96.8 -> 100.1, 16-bit 128 104.3 -> 104.3 / 104.8; 4 packs (R = 2): 95.7. Groups of
     * 8 lanes of 4 packs (float32 128) lost 1.9 at 8; LayerNorm lost 2.4 to 20 at 4 or 8 (its
     * 2-pack lanes hold their parameters too, and spilled 88-960 bytes at 8). Lanes of 3 packs
     * at 6 (2 rows; H200, two alternating rounds): 16-bit 192 / 384 / 768 columns 94.1-94.2 /
     * 96.3-97.0 / 97.7-98.1 -> 87.6-87.8 / 93.5 / 95.6-96.4, float32 384 -1.1
     * (bench/results/rows_fit_down.txt). */
    static constexpr int rows_in_flight(int w, int packs)
    {
        return w == 4 ? 4 : w == 8 && packs <= 2 ? 8 : 2;
    }
    static constexpr int sub_full(int elem_bytes)
    {
        return elem_bytes == 2 ? ND_RMS_SUB_FULL16 : 8 * kSubPacks;
    }
    /* The tile kernel (rows_tile.cuh, 2 tiles a block) for 16-bit rows in 4 lanes of 4 packs
     * (128 columns) and, on a fast device, of 2 packs where they fill every lane (64 columns;
     * ND_RMS_TILE_FULL). Rows of 4 lanes of 2 packs that leave lanes short (40, 56 columns)
     * take the warp kernel's grid twin instead: H200, three alternating rounds, float16 /
     * bfloat16 % of the copy ceiling, tile -> twin: 40 columns 57.3 / 57.1 -> 83.7 / 83.3, 56
     * 69.0 / 68.6 -> 82.5 / 83.0; 64 (still the tile) and float32 within the run's 1.1
     * (bench/results/rms_tile_full_h200.txt). */
    static constexpr int tile_tiles(int elem_bytes, int w, int packs, bool fast, bool, bool full)
    {
        return elem_bytes == 2 && w == 4 &&
                       (packs == 4 || (fast && packs == 2 && (full || !ND_RMS_TILE_FULL)))
                   ? 2
                   : 0;
    }
    /* The exact twins (ND_ROWS_EXACT) but for float32 rows of 32 columns (H200, two alternating
     * rounds: 99.9 -> 94.8 / 96.5% of the copy ceiling) and, on a device that is not fast,
     * 16-bit rows of 64 (H100, one round: float16 / bfloat16 99.1 / 99.7 -> 96.8 / 97.2; on an
     * H200 they take the tile kernel) (bench/results/rows_exact_h200.txt). */
    static constexpr bool exact(int elem_bytes, int cols, bool fast)
    {
        return elem_bytes == 2 ? fast || cols != 64 : cols > 32;
    }
    /* float32 rows of 4097-8192 packs take one block of 1024 threads a row, not the split kernel's
     * chunks (H100, three alternating rounds against the split kernel, % of the copy ceiling,
     * float32 49152 rows of 20480 / 24576 / 28672 / 32768 columns, 5-8 packs a thread;
     * bench/results/rows_big_block.txt): 95.4 / 96.2 / 96.6 / 97.0 -> 100.2 / 100.0 / 100.1 / 99.9.
     * 16-bit rows of 65536 columns gained 1.2 that way and the other ops' lost 0.7-4.5: not taken.
     * On an H200 too: the split kernel lost 3.4-3.6 at 24576 / 32768 columns (bench/results/
     * rows_fit_big_h200.txt). */
    static constexpr bool big_block(int elem_bytes, int packs, bool fast)
    {
        return elem_bytes == 4 || (fast && packs == 8);
    }
    /* The big block's L2 prefetch (nd_rows_big_pf), eighths of a device-full ahead: 16-bit rows of
     * 65536 columns take the big block on a fast device with it. H200, three alternating rounds
     * against the split kernel in each of two calls (bench/results/rows_big_pf_h200.txt):
     * float16 / bfloat16 89.1 / 89.0 -> 91.1 / 89.8% of the copy ceiling and 89.2 / 89.2 ->
     * 90.7 / 89.8 (the big block alone: 89.3 / 89.3 -> 89.5 / 89.0), a device-full ahead; three
     * quarters of one (ND_RMS_BIG_PF16), against that in two later calls (bench/results/
     * axis_pf_h200.txt): 91.1 / 89.5 -> 91.7 / 90.2 and 90.5 / 90.5 -> 91.2 / 91.2; a device-full
     * and a half: 84.1 / 83.2. Float32 32768 columns, in the big block already on every device,
     * lost with it a device-full ahead, 95.8 -> 94.0 and 95.9 -> 94.0, and gained half a
     * device-full ahead (ND_ROWS_BIG_PF32), 96.1 -> 97.9 and 95.9 -> 97.5, on an H200. */
    static constexpr int big_pf(int elem_bytes, int packs, bool fast)
    {
        return packs == 8 && fast ? (elem_bytes == 4 ? ND_ROWS_BIG_PF32 : ND_RMS_BIG_PF16) : 0;
    }
    /* Rows on the grid of these lengths take the loop kernel on a fast device (rows_loop.cuh):
     * float32 2048, 4096, 6144, 8192 and 16384 columns (512, 1024, 1536, 2048 and 4096 packs),
     * 16-bit 4096, 8192, 16384 and 32768 (512-4096 packs); threads x packs a pass as
     * nd_loop_geometry, but 256 x 4 for 16-bit rows of 1024 packs (ND_RMS_LOOP16_1024). H200,
     * alternating rounds, % of the same-run copy ceiling, block kernel -> loop kernel
     * (bench/results/rms_loop_h200.txt): float32 97.2 /
     * 96.8 / 96.1 / 96.5 / 98.4 -> 100.2 / 99.2 / 100.2 / 100.1 / 101.2; float16 4096 / 16384 /
     * 32768 96.7 / 96.2 / 97.8 -> 99.1 / 100.3 / 101.0, bfloat16 97.0 / 96.5 / 97.8 -> 98.4 /
     * 100.2 / 101.3; 16-bit 8192 96.6 / 96.8 -> 98.6 / 98.6 (512 x 2: 94.0-94.9; 1024 x 1: 57).
     * The other widths measured lost: 16-bit 5120, 6144, 10240, 20480 and 24576 and float32
     * 2560 and 10240 (rows that leave threads a pass short, or more than one pass of 1024)
     * 97-98 -> 70-82, float32 5120 within 0.3; so only the lengths above.
     * Float32 5120 columns (1280 packs) on a fast device later took 320 x 4, one pass of 4 packs
     * that every thread fills (nd_loop_geometry's 512 x 4 leaves 3/8 of its pass's packs empty):
     * H200, three alternating rounds, 97.2 -> 99.8% of the same-run copy ceiling, x torch.compile
     * 0.97 -> 1.00 (0.97 in all twelve earlier H200 tables); 256 x 4 (a pass and a quarter)
     * lost, 97.3 -> 96.6 (bench/results/f32_5120_h200.txt).
     * On any device, rows of 4096 packs (float32 16384 columns, 16-bit 32768). H100, three
     * alternating rounds, every fast-device loop row on the H100 (ND_ROWS_LOOP_EVERY) against the
     * block kernel (bench/results/rms_loop_h100.txt): float32 16384 99.2 -> 100.2, float16 /
     * bfloat16 32768 99.2 / 99.2 -> 100.1 / 100.2, x torch.compile 0.99 / 0.99 / 1.02 -> 1.00 /
     * 1.00 / 1.03 (first round); the other widths moved -1.0 (16-bit 8192) to +0.6 (float32
     * 4096) and stay on the block kernel there, except float32 4096 (1024 packs): a second
     * call measured it at 99.1 -> 99.8, x torch.compile 1.00 -> 1.01 (H100, three alternating
     * rounds, bench/results/loop_every_h100.txt), so it takes the loop kernel on every device. */
    static constexpr int loop(int elem_bytes, int64_t packs, bool fast)
    {
        if (!ND_RMS_LOOP)
            return 0;
        if (packs == 1024) /* float32 4096 columns on any device, 16-bit 8192 on a fast one */
            return elem_bytes == 4 ? ND_RMS_LOOP32_1024 : fast ? ND_RMS_LOOP16_1024 : 0;
        if (packs == 1280 && elem_bytes == 4 && fast) /* float32 5120 columns */
            return ND_RMS_LOOP32_1280;
        const bool take = (fast || packs == 4096) &&
                          (packs == 512 || packs == 2048 || packs == 4096 ||
                           (elem_bytes == 4 && packs == 1536));
        return take ? nd_loop_geometry(packs) : 0;
    }
    /* The fitted warp geometries (ND_ROWS_WARP_FIT) of 16-bit rows in lanes of 3 packs (48 and 96
     * columns: 91 / 82 -> 101 / 94% of the copy ceiling) and 8 lanes of 5 (320: 94.0 -> 95.7);
     * 4 and 8 lanes of 6-7 packs (192, 384, 448), 16 of 5 (640), one lane of 3 (24) and float32
     * lanes of 3 and 6 (48, 192) lost 0.8-4.1 (H100, three alternating rounds;
     * bench/results/model_widths_h100.txt). On a fast device also the 16-bit ones measured
     * there: on an H200 (three alternating rounds, bench/results/rows_fit_big_h200.txt) 8 lanes
     * of 6 (384 columns) 88.6-88.8 -> 93.2-93.3, 16 of 5 (640) 88.3-88.5 -> 96.5-96.6, 16 of 7
     * (896) 90.5-90.9 -> 96.4-96.5, 4 of 6 (192) within 0.4; float32 8 lanes of 6 (192) lost 2.2.
     * The others (one lane of 3, 8 of 7) were not measured on an H200 and keep the H100's.
     * Since ND_ROWS_WARP_FIT_DOWN, 16-bit 192 and 384 columns take 8 and 16 lanes of 3 before
     * the 4 and 8 lanes of 6 here are asked (H200: 192 88 -> 94, 384 93.4 -> 97;
     * bench/results/rows_fit_down.txt).
     * float32 rows of 8 lanes of 3 packs (96 columns), which otherwise take 16 lanes of 2 with
     * four empty: H200, three alternating rounds in each of two calls, 63.0 -> 94.2 and 62.8 ->
     * 94.0% of the copy ceiling. With every float32 lane count of 3 packs, 4 lanes (48 columns,
     * otherwise 8 of 2 with two empty) 91.2 -> 87.1 and 16 (192, otherwise 16 of 4 each a pack
     * short) 96.6 both ways (bench/results/rms_fit32_h200.txt). Not measured on an H100; taken
     * on every device. */
    static constexpr bool warp_fit(int elem_bytes, int w, int packs, bool fast)
    {
        const bool fast_fit = fast && (((w == 4 || w == 8) && packs == 6) ||
                                       (w == 16 && (packs == 5 || packs == 7)));
        return elem_bytes == 2 ? fast_fit || (w >= 2 && packs == 3) || (w == 8 && packs == 5)
                               : w == 8 && packs == 3;
    }
    /* The quarter-lane fits (ND_ROWS_WARP_FIT_QUARTER, whose note has the measurements) of
     * float32 rows in 4 lanes (80 and 112 columns): 2 lanes lost at every size measured. */
    static constexpr bool quarter_fit(int elem_bytes, int w, int)
    {
        return elem_bytes == 4 && w == 4;
    }
    /* The tail fits (ND_ROWS_WARP_FIT_TAIL, whose note has the measurements): 16-bit rows in 8
     * or 16 lanes of 5 packs, float32 rows in lanes of 5 and in 4 lanes of 6-7. 16-bit rows in 2
     * or 4 lanes lost 1.6-23 points at every size, 8 and 16 lanes of 6-7 2-5 (float32 1.4-2.6). */
    static constexpr bool tail_fit(int elem_bytes, int w, int packs)
    {
        return elem_bytes == 2 ? packs == 5 && w >= 8 : packs == 5 || w == 4;
    }
};

/* 16-bit warp-kernel lanes of 3 packs, in groups of at least this many lanes a row (0: none), load
 * their weights with x too (nd_param_hold; 54-72 registers, no spill, nvcc 13). H200, three
 * alternating rounds, one call, every group holding, float16 / bfloat16 % of the copy ceiling
 * (bench/results/rms_hold3_h200.txt): 96 columns (4 lanes) 87.3 / 86.2 -> 92.6 / 91.6, 384 and
 * 768 +0.7 to +1.6, 704 and 760 +0.3 to +0.8, but 48 (2 lanes) 99.8 / 99.1 -> 96.6 / 97.5 and 24
 * (1 lane) within 0.2: so from 4 lanes up. The kernels this takes are, instruction for
 * instruction, those that ran (cuobjdump -sass); lanes of 1-2 keep the library's. */
#ifndef ND_RMS_PARAM_HOLD3_LANES
#define ND_RMS_PARAM_HOLD3_LANES 4
#endif

struct nd_rmsnorm_op {
    typedef nd_rmsnorm_policy Policy;
    static constexpr float kPad = 0.0f;
    static constexpr int kParams = 1;
    typedef nd_norm_params Params;
    struct State {
        float rstd;
    };
    /* Warp-kernel lanes of 4 packs of a 16-bit row load all their weights with x
     * (nd_param_hold; 80 registers, no spill, nvcc 13). H100, three alternating rounds, float16
     * / bfloat16 % of the copy ceiling: 256 columns 95.5 / 95.5 -> 96.4 / 96.7, 512 97.7 / 97.4
     * -> 98.3 / 98.2, 1024 98.6 / 98.5 -> 98.8 / 99.2. Lanes of 2 packs lost that way (float16
     * 32 columns 106.6 -> 104.2, 128 95.9 -> 93.3) and keep the weights one pack ahead, as do
     * float32 rows (bench/results/rows_hold_h100.txt). */
    static __host__ __device__ constexpr bool param_hold(int elem_bytes, int packs, int lanes)
    {
        return elem_bytes == 2 &&
               (packs == 4 || (packs == 3 && ND_RMS_PARAM_HOLD3_LANES > 0 &&
                               lanes >= ND_RMS_PARAM_HOLD3_LANES));
    }
    /* float32 weights loaded with an L2 evict-last policy (ND_ROWS_PARAM_L2_LAST): 128x1048576
     * 90.0 -> 91.5% of the copy ceiling (H100), the other widths within 0.1. */
    static __host__ __device__ constexpr bool param_l2_last(int elem_bytes) { return elem_bytes == 4; }
    /* The big block that asks L2 for float32 rows ahead (32768 columns on a fast device) loads x
     * and stores y with the default cache policy, as torch.compile's kernels do, not evict-first
     * (nd_big_plain). H200, three alternating rounds, % of the copy ceiling: x plain 97.7 -> 99.5
     * and 97.9 -> 100.0, x and y plain 97.9 -> 100.4, x torch.compile 0.97 -> 1.00 (bench/results/
     * plain_access_h200.txt, calls 2 and 3). */
    static __host__ __device__ constexpr int big_plain(int) { return ND_RMS_BIG_PLAIN; }

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
        /* Every lane finishes every row. Tried: LayerNorm's spread finish (lane r of a lean group
         * finishes row r, the others take its rstd by shuffle). H200, three alternating rounds
         * (bench/results/rms_spread_h200.txt): 16-bit 192 columns (4 rows a group) 95.4 / 95.8
         * -> 95.2 / 95.3, float32 64 and 128 0 and +0.6, as much as rows it did not reach moved:
         * this finish is a division and a square root, not LayerNorm's ~50 instructions. */
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

#endif /* ND_RMSNORM_CUH */
