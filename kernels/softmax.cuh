/*
 * softmax.cuh - softmax and log-softmax over the last axis (CUDA backend): the technique, the
 * policy, the op and its launcher, shared by softmax.cu (softmax, and nd_cuda_softmax, the entry
 * for every axis, which hands inner > 1 to softmax_axis.cu) and log_softmax.cu (log-softmax), two
 * translation units that compile side by side.
 *
 * Technique: OneFlow's softmax (seed 001): coalesced 16-byte loads, the row kept in registers,
 * warp-shuffle then shared-memory reductions, the kernel chosen by row width. It follows the
 * online softmax of that article in a form that needs one exponential per element and one
 * all-reduce per row:
 *   each thread takes its local max mt and replaces its elements by e = exp(x - mt), summing
 *   them to st; the (mt, st) pairs are all-reduced with the online merge
 *   (m, s) = (max, s1 * exp(m1 - m) + s2 * exp(m2 - m)); then y = e * (exp(mt - m) / s).
 *   log_softmax keeps x and writes (x - m) - log(s). In 16-bit rows, a warp-kernel lane of at
 *   most 32 elements holds them as floats and keeps its exponentials as float32 rows do
 *   (wide_regs); longer lanes and the block kernels keep x packed and compute exp(x - mt) a
 *   second time when writing (cheaper than repacking the exponentials).
 * Departures from the seed: rows longer than a block's registers go to a thread-block cluster
 * that merges the pairs through distributed shared memory (sm_90), so x is read once up to
 * 262144 float32 / 524288 16-bit columns; the stream kernel (two passes over x) only beyond that.
 * exp is nd_sm_exp(x - m), one ex2.approx of (x - m) * log2 e (as softmax_axis.cu; its bound
 * against the tolerance is at nd_exp_le0): the subtraction comes first so a row with a large mean
 * loses nothing to the scaling.
 */
#ifndef ND_SOFTMAX_CUH
#define ND_SOFTMAX_CUH

#include "rows.cuh"

/* ---------------------------------------------------------------------------------------------
 * Policy
 * ------------------------------------------------------------------------------------------- */

#ifndef ND_SM_SUB_FULL16 /* nd_softmax_policy<false>::sub_full(2) */
#define ND_SM_SUB_FULL16 16
#endif
#ifndef ND_LSM_SUB_FULL16 /* nd_softmax_policy<true>::sub_full(2) */
#define ND_LSM_SUB_FULL16 16
#endif
#ifndef ND_LSM_SPLIT_SLEEP /* nd_softmax_op<true>::kSplitSleep (0: spin) */
#define ND_LSM_SPLIT_SLEEP 500
#endif
#ifndef ND_SM_SPLIT_THREADS /* nd_softmax_policy::split_threads: threads of a split chunk block */
#define ND_SM_SPLIT_THREADS 256
#endif
#ifndef ND_SM_WIDE16 /* nd_softmax_op<false>::wide_regs: 16-bit lanes of up to this many elements (0: none) */
#define ND_SM_WIDE16 32
#endif

#ifndef ND_SM_LEAN /* nd_softmax_policy::lean: 1 as measured, 0 none, 2 on every device (A/B) */
#define ND_SM_LEAN 1
#endif

template <bool LOG> struct nd_softmax_policy {
    static constexpr int kRegBytes = 128;
    /* Packs a lane of the warp kernel loads before its first reduction (R = that / packs rows,
     * at least 1): 4, but for lanes of 1-2 packs 2 in groups of 1-2 lanes (R = 1) and 8 in
     * groups of 8 or more (R = 4). H100, three alternating runs, % of the copy ceiling, R = 2
     * (4 for every lane) -> as here: softmax float16 / bfloat16 32 columns (2 lanes) 89.7 /
     * 90.5 -> 100.9 / 101.1, log_softmax 96.7 / 96.8 -> 103.8 / 104.0; float32 64 (8 lanes)
     * softmax 94.2 -> 96.7, log_softmax 95.2 -> 97.3; 128-512 columns unchanged. 8 for every
     * lane lost 5 points at float32 128 columns and 14 at 16-bit 256 (R = 2 of 4 packs); 8 for
     * groups of 4 lanes lost 16 at float32 32 and 12 at 16-bit 128
     * (bench/results/short_rows_h100.txt). */
    static constexpr int rows_in_flight(int w, int packs)
    {
        return w == 4 || packs > 2 ? 4 : w <= 2 ? 2 : 8;
    }
    static constexpr int kSubPacks = 4;      /* packs per lane in the sub-warp kernel */
    /* Rows of this many packs and more take kSubPacks packs a lane: for 16-bit rows from 16 packs
     * (128-248 columns on 4-8 lanes of 4 packs, not 8-16 lanes of 2), not 32. H100, bench_gpu,
     * three alternating runs, % of the copy ceiling: softmax float16 / bfloat16 128 columns
     * 90.6 / 90.6 -> 92.1 / 92.1; log_softmax 128 columns 93.7 / 93.6 -> 94.5 / 94.2
     * (bench/results/softmax_sub_full_h100.txt). softmax took 4 packs a lane from 8 packs (64
     * columns) too, 88.7 / 88.0 -> 91.1 / 90.5 there, until its 2-pack lanes held their row as
     * floats (wide_regs) and took one exponential an element: then 2 packs a lane at 64 columns
     * went 96.9 / 95.1 -> 103.2 / 103.7, the other widths within 0.6; from 32 packs lost 15 at
     * 128 columns (95.7 / 96.0 -> 80.9 / 80.4; three alternating rounds, H100,
     * bench/results/sm_sub_full_h100.txt). log_softmax at 64 columns had lost 5 points with 8
     * (99.6 / 99.3 -> 94.6 / 93.9). 32 and 256 columns and float32 rows are unchanged. */
    static constexpr int sub_full(int elem_bytes)
    {
        return elem_bytes == 2 ? (LOG ? ND_LSM_SUB_FULL16 : ND_SM_SUB_FULL16) : 8 * kSubPacks;
    }
    /* 64: rows of 257-512 packs (16-bit 4096 columns) in blocks of 64 threads x 8 packs rather
     * than 128 x 4: H200 softmax f16/bf16 4096 +6 points (91 -> 97%), log_softmax -1.3, float32
     * 1536-2048 within +-1 (the norms lost up to 3 points this way and kept 128; LayerNorm's
     * 16-bit rows take 64 since, nd_layernorm_policy::block_min) */
    static constexpr int block_min(int) { return 64; }
    static constexpr int kBlockMax = 512;
    /* The tile kernel (rows_tile.cuh, 2 tiles a block) for 16-bit rows in groups of 4 lanes x 4
     * packs (72-128 columns) on every device, and on a fast one (an H200) also float32 rows in
     * groups of 8 x 2 (33-64). Against the warp kernel, two alternating rounds, % of the copy
     * ceiling, float16 / bfloat16 128 columns: H200 softmax 92.4 / 91.8 -> 95.6 / 95.7,
     * log_softmax 86.8 / 85.9 -> 96.4 / 95.6; H100 softmax 96.7 / 96.7 -> 102.4 / 102.1,
     * log_softmax 95.9 / 95.7 -> 102.8 / 102.2. float32 64 columns: H200 softmax 87.3 -> 95.6,
     * log_softmax 89.0 -> 95.5; H100 softmax within 1, log_softmax 99.9 -> 98.5. The other widths
     * measured (H200) lost 2-15 points with an earlier form of the kernel
     * (bench/results/rows_tile_h200.txt). */
    static constexpr int tile_tiles(int elem_bytes, int w, int packs, bool fast, bool, bool)
    {
        return (elem_bytes == 2 && w == 4 && packs == 4) || (fast && elem_bytes == 4 && w == 8 && packs == 2)
                   ? 2
                   : 0;
    }
    /* The exact twins (ND_ROWS_EXACT) but for float32 rows of 32 columns (H200, two alternating
     * rounds: softmax 99.3 -> 94.2, log_softmax 99.8 -> 95.3-95.6% of the copy ceiling) and, on
     * a device that is not fast, 16-bit rows of 64 (H100, one round: softmax float16 / bfloat16
     * 105.2 / 105.1 -> 94.7 / 96.6, log_softmax 100.8 / 100.4 -> 96.8 / 95.7, where an H200 went
     * softmax 93.6 / 93.5 -> 97.4 / 101.0) (bench/results/rows_exact_h200.txt). */
    static constexpr bool exact(int elem_bytes, int cols, bool fast)
    {
        return elem_bytes == 2 ? fast || cols != 64 : cols > 32;
    }
    /* The fitted warp geometries (ND_ROWS_WARP_FIT) of 2-8 lanes of at most 6 packs: 16-bit 96
     * and 320 columns 71-76 / 84-86 -> 97-98 / 96-97% of the copy ceiling, 48 and 192 +1 to +6,
     * float32 48 / 96 +6 / +12. One lane of 3 packs (16-bit 24 columns: log_softmax 89 -> 85,
     * softmax +0.5 to +1.7), 8 lanes of 7 (448: softmax -0.9 to -1.1, log_softmax +0.3 to
     * +0.5) and 16 of 5-7 (640, 896: -0.3 to -0.9) were not taken (H100, three alternating
     * rounds; bench/results/model_widths_h100.txt). On a fast device also 16-bit rows in 16
     * lanes of 5 and 7 packs: on an H200 (three alternating rounds, bench/results/
     * rows_fit_big_h200.txt) 640 columns 81.6-84.3 -> 97.2-97.5 (softmax and log_softmax), 896
     * 87.9-88.7 -> 96.2-97.1. (One lane of 3 and 8 of 7 were not measured on an H200 and keep
     * the H100's choice.) And 16 lanes of 3 (ND_ROWS_WARP_FIT_DOWN: 16-bit 384 columns, float32
     * 192): H200 93.0 -> 97.6 and 95.3-95.8 -> 97.0-97.4 (bench/results/rows_fit_down.txt). */
    static constexpr bool warp_fit(int elem_bytes, int w, int packs, bool fast)
    {
        return (w >= 2 && w <= 8 && packs <= 6) || (w == 16 && packs == 3) ||
               (fast && elem_bytes == 2 && w == 16 && (packs == 5 || packs == 7));
    }
    /* The quarter-lane fits (ND_ROWS_WARP_FIT_QUARTER, whose note has the measurements): 16-bit
     * rows in 2 lanes of 5 packs (80 columns), float32 rows in 4 lanes (80, 112); float32 in 2
     * lanes of 5 moved -1.6 / +1.0 (softmax / log_softmax), 2 of 7 lost 2-17 points. */
    static constexpr bool quarter_fit(int elem_bytes, int w, int packs)
    {
        return elem_bytes == 2 ? w == 2 && packs == 5 : w == 4;
    }
    /* The tail fits (ND_ROWS_WARP_FIT_TAIL, whose note has the measurements): lanes of 5 packs,
     * float32 rows in 4 lanes of 6-7 (+1.0 to +3.9), log_softmax's 16-bit rows in 8 lanes of 6
     * (+1.7 to +3.0). Not: 16-bit rows in 2 or 4 lanes of 6-7 (-2.8 to -21), 8 and 16 lanes of
     * 7 (softmax -0.8 to -2.8, log_softmax -0.8 to +1.2), softmax's 8 lanes of 6 (-0.6 to
     * +0.8), float32 8 lanes of 6-7 (-0.4 to -3.0) and 16 of 7 (-0.5 to +0.7). */
    static constexpr bool tail_fit(int elem_bytes, int w, int packs)
    {
        return packs == 5 || (elem_bytes == 4 && w == 4) ||
               (LOG && elem_bytes == 2 && w == 8 && packs == 6);
    }
    /* float32 rows of 6145-8192 packs take one block of 1024 threads a row, not the split kernel's
     * chunks (H100, three alternating rounds against the split kernel, % of the copy ceiling,
     * float32 49152 rows of 20480 / 24576 / 28672 / 32768 columns, 5-8 packs a thread;
     * bench/results/rows_big_block.txt): softmax 97.3 / 98.0 -> 100.3 / 99.6 at 28672 / 32768
     * columns, log_softmax 97.3 / 97.9 -> 100.3 / 99.8; at 5-6 packs a thread (20480, 24576) the
     * block lost 0.8-5.2. Not on a fast device: on an H200 (three alternating rounds,
     * bench/results/rows_fit_big_h200.txt) the split kernel took 32768 columns from 84.2 / 84.3
     * to 93.8 / 93.0 (softmax / log_softmax). With the big block asking L2 for the row a
     * device-full of big blocks ahead (big_pf), the big block takes them there too: H200, three
     * alternating rounds against the split kernel in each of two calls, 92.4 / 91.8 -> 96.5 /
     * 95.9 and 93.0 / 92.3 -> 96.2 / 95.9 (bench/results/rows_big_pf_h200.txt). 16-bit rows of
     * 65536 columns lost 13-16 points in the big block, 7-12 with the prefetch, and keep the
     * split kernel. */
    static constexpr bool big_block(int elem_bytes, int packs, bool fast)
    {
        return elem_bytes == 4 && (fast ? packs == 8 : packs >= 7);
    }
    /* the big block's L2 prefetch (nd_rows_big_pf), eighths of a device-full ahead: float32 rows
     * of 8 packs a thread on a fast device, half a device-full ahead (ND_ROWS_BIG_PF32; H200,
     * three alternating rounds in each of two calls against a device-full ahead, softmax /
     * log_softmax: 96.3 / 95.9 -> 97.3 / 97.0 and 96.4 / 96.0 -> 97.7 / 97.5;
     * bench/results/rows_big_pf_h200.txt) */
    static constexpr int big_pf(int elem_bytes, int packs, bool fast)
    {
        return elem_bytes == 4 && packs == 8 && fast ? ND_ROWS_BIG_PF32 : 0;
    }
    /* Rows off the 16-byte grid of at most 10 packs of their own grid (16-bit 80 columns,
     * float32 40) take the stage kernel (rows_stage.cuh). H200, two alternating rounds against
     * the warp kernel's generic form, % of the copy ceiling, softmax / log_softmax float16
     * (bench/results/rows_stage_h200.txt): 7 columns 54 / 56 -> 71 / 72, 20 45 / 46 -> 67 / 64,
     * 44 42 / 47 -> 53 / 52, 50 42 / 45 -> 56 / 54, 77 39 / 40 -> 50 / 45; float32 7 69 / 70
     * -> 83 / 83, 50 66 / 68 -> 71 / 71. 100-197 columns: 16-bit from +3 to -12, float32 -5
     * to +8; 333-2047: 16-bit -7 to -20, float32 to -17. H100, the kept rule: 16-bit 7-79
     * columns +8 to +26, float32 7 +13 / +15. */
    static constexpr int stage_packs(int) { return 10; }
    /* No row takes the loop kernel (rows_loop.cuh). Tried (H200, two alternating rounds,
     * bench/results/loop_softmax_h200.txt): RMSNorm's loop rows, float32 2048-16384 columns and
     * 16-bit 4096-32768. Every width lost but float32 8192 (log_softmax +0.5, softmax -3.6):
     * 16-bit 32768 97-98 -> 53-57% of the copy ceiling, float32 4096 97 -> 66. The kernel runs
     * at 32 registers, and the online statistics take one or two exps and a branch an element. */
    static constexpr int loop(int, int64_t, bool) { return 0; }
    /* 16-bit rows on the grid of 1024 columns (128 packs), and softmax's of 512 (64), take the
     * lean kernel on a fast device (rows_lean.cuh): 1 row a warp, 1 and 4 warps a block. H200,
     * two alternating rounds against the warp kernel, % of the same-run copy ceiling, bfloat16
     * / float16 (bench/results/lean_h200.txt): softmax 1024 columns 97.3 / 97.3 -> 98.5 / 98.2
     * (1 x 2: 98.3 / 98.6), 512 96.5 / 96.5 -> 97.5 / 97.5; log_softmax 1024 97.7 / 97.3 ->
     * 99.5 / 98.4. Not taken: log_softmax 512 (1 x 4: 96.8 / 96.4 -> 96.2 / 96.8; 2 x 4: 93.8 /
     * 94.0), 256 (2 rows of 4 warps: 95 -> 76-81), and 2 or 4 rows a warp at 512-1024
     * (93.8-97.6). log_softmax's 16-bit rows of 128 columns (16 packs) take the exact twin in 8
     * lanes x 2 rows x 4 warps, against the tile kernel: H200, three alternating rounds in each
     * of three calls, bfloat16 / float16 94.7 / 94.7 -> 95.1 / 95.7 (lean_nw4_h200.txt), 95.6 /
     * 96.0 -> 96.4 / 96.5 and 94.3 / 95.3 -> 95.9 / 96.0 (x torch.compile 1.15 / 1.16 -> 1.15 /
     * 1.17; bench/results/lean_short_h200.txt); softmax's lost 5 points there. log_softmax's
     * 16-bit rows of 256 columns (32 packs) take the exact twin in 16 x 2 x 1, against the warp
     * kernel's exact twin (8 lanes x 4 packs): H200, three alternating rounds in each of two
     * calls, float16 94.9 -> 96.7 and 94.6 -> 96.0, bfloat16 95.0 -> 94.9 and 94.7 -> 94.2; x
     * torch.compile (round 1) float16 1.09 -> 1.11 and 1.07 -> 1.09, bfloat16 1.17 / 1.19 both
     * ways (lean_short_h200.txt call 4, lean_ls256_h200.txt); in a third, float16 94.6 -> 96.2,
     * bfloat16 94.5 both ways. 16 x 1 x 1 ran at 81.
     * float32 rows of 64 columns (16 packs) take the exact twin in 8 lanes x 2 rows x 4 warps, as
     * LayerNorm's and RMSNorm's do, against the tile kernel (8 lanes x 2 packs, 16 rows, 2 tiles,
     * 8 KB of shared memory): H200, four alternating rounds, softmax / log_softmax 94.7-95.0 /
     * 94.8-95.1 -> 99.3-99.8 / 98.8-99.3 (8 x 4 x 1: 96.4-96.7 / 98.2-98.5; bench/results/
     * lean_sm32_h200.txt). Not measured on another device. At 128 columns (32 packs), against the
     * warp kernel's exact twin (96.0-96.4): 32 x 2 x 4 lost 3 / 9 points, 16 x 2 x 4 +0.4 to +1.3
     * / -0.2 to -0.3 (lean_sm128_h200.txt); not taken. */
    static constexpr int lean(int elem_bytes, int64_t packs, bool fast)
    {
        if (ND_SM_LEAN == 0 || (!fast && ND_SM_LEAN != 2))
            return 0;
        if (elem_bytes == 4)
            return packs == 16 ? nd_lean_code(8, 2, 4) : 0;
        if (elem_bytes != 2)
            return 0;
        return packs == 128            ? nd_lean_code(32, 1, 1)
               : packs == 64 && !LOG ? nd_lean_code(32, 1, 4)
               : packs == 32 && LOG  ? nd_lean_code(16, 2, 1)
               : packs == 16 && LOG  ? nd_lean_code(8, 2, 4)
                                     : 0;
    }
    /* Threads of a split kernel's chunk block (rows_split.cuh): 256, 8 packs each (32 KB of
     * float32, 64 KB of 16-bit). H100, three alternating rounds, 512 -> 256, % of the copy
     * ceiling: float32 softmax / log_softmax 128x1048576 83.2 / 83.7 -> 85.0 / 85.4, 512x262144
     * 92.3 / 92.4 -> 93.4 / 93.8, 2048x65536 unchanged; 16-bit within -1 to +1
     * (bench/results/rows_split_h100.txt). H200, two alternating rounds, 16-bit softmax /
     * log_softmax 2048x65536 82.2-83.1 -> 86.5-89.0, 512x262144 77.0-80.6 -> 82.3-84.1,
     * 128x1048576 75.8-78.3 -> 76.9-79.0 (bench/results/rows_split_h200.txt, call 4). H100, the
     * same build, three rounds: 2048x65536 +0.7 to +1.1, 512x262144 +1.2 to +2.1, 128x1048576
     * -1.5 to -2.5 (91.6-92.8 -> 89.3-91.2): so rows of more than 32 such chunks (16-bit
     * 1048576 columns) keep 512 threads except on a fast device (split_threads_long). There
     * float32 rows of more than 32 chunks take 512 threads: H200, three alternating rounds
     * (bench/results/split_threads_h200.txt), softmax / log_softmax float32 128x1048576 76.3 /
     * 76.3 -> 79.0 / 79.3; 16-bit 1048576 moved -0.5 to +0.4 at 512, and the shorter rows (32
     * chunks or fewer, not long) lost 1-6 at 512. */
    static constexpr int split_threads(int) { return ND_SM_SPLIT_THREADS; }
    static constexpr int split_threads_long(int elem_bytes, bool fast)
    {
        if (elem_bytes == 2)
            return fast ? ND_SM_SPLIT_THREADS : 512;
        return fast ? 512 : ND_SM_SPLIT_THREADS;
    }
    /* the split kernel's L2 prefetch, eighths of a device-full of blocks ahead (rows_split.cuh):
     * a device-full on a fast one (H200, 16-bit 128x1048576 2-3 points higher than at half a
     * device-full, where LayerNorm and RMSNorm lost 1-3.5), 5 eighths on another (H100, four
     * alternating rounds against a device-full, % of the copy ceiling: 128x1048576 float32
     * 88.6-88.9 -> 92.0-92.2, 16-bit 92.8-93.2 -> 93.9-94.4; 512x262144 float32 +0.3-0.4,
     * 16-bit -0.3 to 0; 4 eighths lost 1.5-2.4 at 16-bit, 6 was within 0.5 of 5 at 1048576
     * columns, measured in another call; bench/results/rows_split_pf.txt) */
    static constexpr int split_pf_ahead8(bool fast) { return fast ? 8 : 5; }
    static constexpr int kClusterMax = 16;
    static constexpr int kStreamThreads = 512;
};

static constexpr float ND_LOG2E = 1.4426950408889634f;

/* exp(d) for d <= 0 (x less a max it does not exceed): nd_exp_le0 (one ex2.approx.ftz; its bound
 * is at its definition) where ND_SM_EXP_APPROX, else exp2f(d * log2 e). H100, three alternating
 * rounds, exp2f -> nd_exp_le0, % of the copy ceiling: softmax float16 / bfloat16 64 columns 92.1
 * / 94.7 -> 96.9 / 97.0, 512x262144 89.3 / 88.3 -> 91.7 / 91.2, 128x1048576 81.3 / 80.1 -> 84.4 /
 * 84.0; log_softmax 16-bit 64 columns +2.3, 128 +1.3; float32 64 columns +1.2 / +1.8; most others
 * within 0.5. Lost: 32 columns, float32 softmax 102.8 -> 98.5, 16-bit 103.5-103.8 -> 101.3-101.5
 * (bench/results/rows_exp_h100.txt). */
#ifndef ND_SM_EXP_APPROX
#define ND_SM_EXP_APPROX 1
#endif
#ifndef ND_SM_BIG_PLAIN /* nd_softmax_op::big_plain: 1 x loaded plainly, 2 y stored so, 3 both */
#define ND_SM_BIG_PLAIN 3
#endif
static __device__ __forceinline__ float nd_sm_exp(float d)
{
    return ND_SM_EXP_APPROX ? nd_exp_le0(d) : exp2f(d * ND_LOG2E);
}

/* ---------------------------------------------------------------------------------------------
 * Op
 * ------------------------------------------------------------------------------------------- */

struct nd_softmax_params {
    int unused;
};

template <bool LOG> struct nd_softmax_op {
    static constexpr float kPad = -INFINITY;
    static constexpr int kParams = 0;
    /* Rows of 2-15 chunks in the split kernel (rows_split.cuh, nd_split_sleep): log_softmax's
     * waiting lanes sleep ND_LSM_SPLIT_SLEEP ns between two looks at a chunk's word not yet
     * written; softmax's spin. H200, three alternating rounds against spinning (bench/results/
     * split_sleep_h200.txt), % of the copy ceiling: log_softmax 2048x65536 float16 88.9-89.3 ->
     * 90.5-90.8, bfloat16 89.0-89.2 -> 90.4-90.9, float32 89.8-90.9 -> 90.6-91.3; in the
     * prefetching kernel (16 chunks or more) it moved 512x262144 within half a point on median
     * and 128x1048576 16-bit -0.8 / -0.9, and softmax 16-bit 2048x65536 lost 2 with it, so
     * neither takes it. 200 and 1000 ns were within 0.5 of 500 (four rounds, a later call). */
    static constexpr int kSplitSleep = LOG ? ND_LSM_SPLIT_SLEEP : 0;
    typedef nd_softmax_params Params;
    /* register path: softmax k = exp(mt - m) / s (this thread's scale) and, for 16-bit rows,
     * m = mt (y = exp(x - mt) * k is recomputed: packing the exponentials back into 16-bit
     * registers cost more than a second exponential); log: m and k = log(s);
     * stream path: softmax m and k = 1 / s, log: m and k = log(s) */
    struct State {
        float m, k;
        bool recompute;
    };
    /* The warp kernel holds a 16-bit lane's n elements as floats (nd_regrow_wide) where n <=
     * ND_SM_WIDE16, so softmax keeps each exponential as float32 rows do: one exponential an element,
     * not two. Where the multi-function unit was the bound (rows of 64-256 columns: a lane's 32
     * exponentials twice, with every block of the grid resident at once, so no loads overlap
     * them), H100, three alternating rounds, float16 / bfloat16 % of the copy ceiling, packed
     * (-DND_SM_WIDE16=0) -> floats: 32 columns 100.7 / 100.9 -> 103.8 / 103.8, 64 90.9 / 90.3 ->
     * 93.9 / 94.3, 128 91.7 / 92.1 -> 95.7 / 95.9, 256 94.8 / 94.7 -> 96.0 / 95.9, 512 97.5 /
     * 97.4 -> 98.0 / 98.1, 1024 98.1 / 98.3 -> 98.9 / 98.8 (bench/results/rows_final_h100.txt,
     * columns new and nowide). No lane of them spills
     * (nvcc 13, -Xptxas -v); lanes of 4 rows x 16 elements (R * N = 64) spilled 300 bytes, so n
     * counts every row a lane holds. */
    static __host__ __device__ constexpr bool wide_regs(int, int n) { return !LOG && n <= ND_SM_WIDE16; }
    /* The big block that asks L2 for float32 rows ahead (32768 columns on a fast device) loads x
     * and stores y with the default cache policy, as torch.compile's kernels do, not evict-first
     * (nd_big_plain). H200, three alternating rounds, % of the copy ceiling: softmax 97.8 ->
     * 100.3, log_softmax 97.6 -> 100.3 (bench/results/plain_access_h200.txt, call 3). */
    static __host__ __device__ constexpr int big_plain(int) { return ND_SM_BIG_PLAIN; }

    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats(V (&v)[R], State (&st)[R], const Ctx &ctx,
                                                 const Params &)
    {
        float a[2 * R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float mt = v[r].max_all();
            float s = 0.0f;
            if (mt != -INFINITY) {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    float ex = nd_sm_exp(v[r].get(e) - mt);
                    s += ex;
                    if (!LOG && V::kExactSet)
                        v[r].set(e, ex);
                    /* finish each 8 elements before the next: computing all 64 exponentials
                     * of a 16-bit row up front spilled registers */
                    if ((e & 7) == 7)
                        asm volatile("" : "+f"(s));
                }
            } else if (!LOG && V::kExactSet) {
                /* every element -inf (masked scores, or pads; a NaN would have made mt NaN):
                 * the kept exps are exp(-inf) = 0; the pair is (-inf, 0) */
#pragma unroll
                for (int e = 0; e < N; e++) {
                    const float x = v[r].get(e);
                    v[r].set(e, x == -INFINITY ? 0.0f : x);
                }
            }
            a[2 * r] = mt;
            a[2 * r + 1] = s;
        }
        float own[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            own[r] = a[2 * r];
        ctx.template allreduce<2 * R>(a, nd_op_softmax_pair());
#pragma unroll
        for (int r = 0; r < R; r++) {
            /* this thread's elements all -inf: outputs exp(x - 0) * 0 = 0, or NaN where the
             * whole row is -inf (as PyTorch's: exp(-inf - -inf)) or its sum is NaN (a NaN or
             * +inf elsewhere in the row: 0 * sum). The select on k gives what
             * exp(own - max) / sum would there, written out: without it nvcc allocated the
             * 16-bit kernels' registers otherwise, and 2048x65536 lost 2 points (H200;
             * bench/results/softmax_masked.txt). A thread holding a NaN has own = NaN
             * (max_all lets a NaN win), so its pair carries the NaN into the row's sum. */
            const bool masked = own[r] == -INFINITY;
            st[r].m = a[2 * r];
            st[r].recompute = !LOG && !V::kExactSet;
            if (st[r].recompute)
                st[r].m = nd_exp_ref(own[r]);
            if (LOG)
                st[r].k = logf(a[2 * r + 1]);
            else
                st[r].k = masked ? (a[2 * r] == -INFINITY ? NAN : 0.0f * a[2 * r + 1])
                                 : nd_sm_exp(own[r] - a[2 * r]) / a[2 * r + 1];
        }
    }

    template <class Ctx>
    static __device__ __forceinline__ void stream_stats(State &st, const Ctx &ctx, const Params &)
    {
        float a[2] = {-INFINITY, 0.0f};
        ctx.for_each([&](float x) {
            if (x == -INFINITY)
                return;
            if (x > a[0]) {
                a[1] = a[1] * nd_sm_exp(a[0] - x);
                a[0] = x;
            }
            a[1] += nd_sm_exp(x - a[0]);
        });
        ctx.template allreduce<2>(a, nd_op_softmax_pair());
        st.m = a[0];
        st.k = LOG ? logf(a[1]) : 1.0f / a[1];
        st.recompute = false;
    }

    static __device__ __forceinline__ float out(const State &st, const Params &, float v, float,
                                                float)
    {
        if (LOG)
            return (v - st.m) - st.k;
        return st.recompute ? nd_sm_exp(v - st.m) * st.k : v * st.k;
    }
    static __device__ __forceinline__ float out_stream(const State &st, const Params &, float x,
                                                       float, float)
    {
        return LOG ? (x - st.m) - st.k : nd_sm_exp(x - st.m) * st.k;
    }
    static __device__ __forceinline__ void write_stats(const State &, int64_t, const Params &)
    {
    }
};

/* ---------------------------------------------------------------------------------------------
 * Launchers
 * ------------------------------------------------------------------------------------------- */

template <bool LOG, class T>
static nd_status softmax_run(const nd_softmax_args *a, cudaStream_t s, nd_error *err)
{
    nd_rows_args<T> ra;
    ra.x = (const T *)a->x;
    ra.y = (T *)a->y;
    ra.p0 = NULL;
    ra.p1 = NULL;
    ra.rows = a->outer;
    ra.cols = a->dim;
    nd_softmax_params p = {0};
    return nd_rows_run<nd_softmax_op<LOG>, T, nd_softmax_policy<LOG>>(
        ra, p, s, LOG ? "log_softmax" : "softmax", err);
}

template <bool LOG>
static nd_status softmax_dispatch(const nd_softmax_args *a, cudaStream_t s, nd_error *err)
{
    switch (a->dtype) {
    case ND_FLOAT32: return softmax_run<LOG, float>(a, s, err);
    case ND_FLOAT16: return softmax_run<LOG, __half>(a, s, err);
    case ND_BFLOAT16: return softmax_run<LOG, __nv_bfloat16>(a, s, err);
    default: return nd_error_set(err, ND_EINVAL, "softmax: unknown dtype %d", (int)a->dtype);
    }
}

/* Log-softmax over the last axis (inner == 1) of arguments that passed nd_softmax_args_check:
 * softmax_dispatch<true>, compiled in log_softmax.cu. */
nd_status nd_cuda_log_softmax_rows(const nd_softmax_args *a, cudaStream_t s, nd_error *err);

#endif /* ND_SOFTMAX_CUH */
