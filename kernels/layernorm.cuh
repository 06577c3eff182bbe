/*
 * layernorm.cuh - LayerNorm over the last axis (CUDA backend): the op below run by the row
 * engine (rows.cuh) with the policy and launcher of norm.cuh, where the technique is described.
 * Departures in its statistics:
 *   - Statistics are not Welford. With the row on chip, a shifted form is as cheap and more
 *     accurate: d = x - shift, c = sum(d)/n, var = sum(d^2)/n - c^2, mean = shift + c,
 *     y = (x - mean) * rstd * gamma + beta. The register kernels take shift = the row's first
 *     element (the warp kernel shuffles it from lane 0, the block and cluster kernels load it):
 *     one all-reduce per row, like RMSNorm (H200, warp kernel: +5-15 points of the copy ceiling
 *     at 32..2048 columns, 2-4 points lost at 512 float32). float32 rows in the block kernel at
 *     32 elements a thread and in the stream kernel take shift = sum(x)/n from a first
 *     all-reduce. d stays exact for a row of mean 1e4 and std 1, where float32 cannot hold the
 *     mean to better than 5e-4; var gives up about log10(1 + (shift - mean)^2 / var) digits, at
 *     most log10(n), which only a row whose first element is an extreme outlier approaches.
 *   - The mean is exact to far better than one float32 holds. An error in it is an offset that
 *     every output of the row shares, and outputs near zero (x near the mean) show it as many
 *     ulp: issue 13, a bfloat16 row of 1,000,003 columns off by up to 15 ulp there, with a mean
 *     signed error ~30 standard errors from zero. bench/norm_numerics.c emulates the kernels on
 *     the CPU: the per-thread sums of d, each about N |c| (c ~ the row's std), were combined in
 *     float across threads, blocks and chunks, rounding at every level, and c = sum(d)/n was
 *     kept in one float: the mean off by 0.3-2.6 x 2^-24 std on rows of 1M columns, outputs
 *     near zero by up to 19 ulp. Now (nd_layernorm_op::row_sums, finish):
 *       per thread, float sums as before (three instructions an element); 16-bit rows sum x
 *       itself for the mean, not x - shift (nd_norm_raw: a shift's low bits, rounded the same way
 *       on every addition, were a bias of their own: the two-round stream kernel, shifted by a
 *       float mean, was off by up to 59 ulp); float32 rows keep x - shift;
 *       across threads, the sum for the mean in double (nd_op_norm_sums: one more shuffle per
 *       level and a DADD, per row, not per element);
 *       the mean kept as two floats m_hi + m_lo, y = fma(fma(x - m_hi, rstd, -m_lo * rstd),
 *       gamma, beta): three instructions a column, as before.
 *     Emulated: the mean within 0.02 x 2^-24 std on 16-bit rows (float32: 0.1-0.3), every
 *     bfloat16 output within 1 ulp of the float64 result. H200 (gpu_rows norm_ulp, widths 1 ..
 *     2,500,001): every 16-bit output without gamma/beta within 1 ulp, signed errors averaging
 *     within 2.1 standard errors of zero; the kernels before failed 22 of those cases (up to 27
 *     ulp; a width-3 output that is exactly 0 came out as -1.9e-8). Speed, same run against the
 *     kernels before (bench_gpu rows suite, 48 LayerNorm shapes, 3 runs each): -0.14 points of
 *     the copy ceiling on average, -3.6 (16-bit rows of 16384-65536 columns: blocks of 8 packs a
 *     thread at the 64-register cap, a few more bytes spilled, and a longer reduction) to +5.8
 *     (16-bit 768-1536 columns, where min_blocks below now gives the warp kernel a block more
 *     per SM than before). 16-bit rows in the stream kernel take one pass for their statistics
 *     instead of two.
 */
#ifndef ND_LAYERNORM_CUH
#define ND_LAYERNORM_CUH
#include "norm.cuh"

/* 1: where a group of lanes all-reduces R > 1 16-bit rows together (the lean kernel) and each
 * lane holds at most ND_LN_SPREAD_MAX_N elements of a row, each lane finishes one row's
 * statistics and takes the others' by shuffle (nd_layernorm_op::row_sums); 0: every lane finishes
 * every row. The same bits either way. A finish is about 50 instructions with a division, a
 * square root and double arithmetic (static SASS, 8 lanes x 2 packs x 4 rows: 1304 -> 1176
 * instructions spread, 16 shuffles added). H200, three alternating rounds
 * (bench/results/ln_spread_h200.txt): 16-bit 64 columns in 8 lanes x 4 rows (1 pack a lane) ran
 * 86.6 / 85.9% of the copy ceiling without it (lean_short_h200.txt) and 94.7 / 94.1 with it
 * (float16 / bfloat16), where the warp kernel's exact twin (4 lanes x 2 packs) ran 92.9 / 91.3;
 * but 128 columns in 8 x 4 x 1 (2 packs a lane) lost, 92.9 / 91.7 -> 87.7 / 89.7 (and in a second
 * call 92.4 / 91.2 -> 86.9 / 88.9), 256 in 16 x 2 x 1 0 / -0.7, float32 64 and 128 +0.3 / -0.7.
 * Seen in that 128-column kernel's code (cuobjdump -sass, nvcc 13): without the spread finish all
 * 8 of a lane's x loads issue first; with it ptxas issues the 4th row's 2 loads after the first
 * rows' shuffles have begun (the PTX still has all 8 first). ncu's source counters (one launch,
 * float16, ln_spread_h200.txt call 5): 14% of the stall samples on the first use of those late
 * loads, 33% on x's first uses in all against 23% without the spread finish. Neither a
 * __syncwarp() after the loads (ptxas dropped it) nor shuffling m_lo only where the mean is
 * written (fewer live registers) kept them first (static SASS); making the first element depend
 * on every loaded word did (ND_ROWS_LEAN_LOAD_DEP), and with it the spread finish at 2 packs a
 * lane runs 128 columns faster, in three calls: 92.5 / 91.3 -> 93.4 / 93.1, 92.9 / 91.5 -> 94.5 /
 * 93.5 and 93.5 / 92.1 -> 95.3 / 95.1 (x torch.compile 1.05 / 1.02 -> 1.08 / 1.05;
 * bench/results/ln_spread_h200.txt call 6, lean_dep_h200.txt). So a lane of up to 2 packs
 * (16 elements) finishes one row. At 3 packs, 16-bit 192 columns in 8 x 4 x 1 (96 registers)
 * lost, 90.6 / 88.2 -> 85.8 / 85.5 against the warp kernel's exact twin (lean_dep_h200.txt). */
#ifndef ND_LN_SPREAD_FINISH
#define ND_LN_SPREAD_FINISH 1
#endif
#ifndef ND_LN_SPREAD_MAX_N
#define ND_LN_SPREAD_MAX_N 16
#endif
/* 1: the spread finish takes rstd as rsqrtf(var + eps), PyTorch's form (one rsqrt.approx, within
 * 2 float32 ulp); 0: 1 / sqrtf(var + eps), as every other finish. H200, three alternating rounds
 * (ln_spread_h200.txt, call 4): 64 columns -0.6 / -0.1 (float16 / bfloat16), and with the spread
 * finish at 2 packs a lane (ND_LN_SPREAD_MAX_N 16) 128 columns still lost 4-5 points. Taken in
 * every finish of 16-bit rows, rsqrtf made nvcc 13 (-Xptxas -v) spill more in 52 of LayerNorm's
 * 16-bit kernels, 48 of which had spilled nothing (up to 424 bytes: the block kernel of 512 x 8
 * packs), so it was not measured there. */
#ifndef ND_LN_SPREAD_RSQRT
#define ND_LN_SPREAD_RSQRT 0
#endif

/* nd_layernorm_op::param_hold: 16-bit lanes of up to this many packs. 3, not 2: lanes of 3 packs
 * at their registers as before (72 for up to 8 lanes; the 16- and 32-lane twins' 64, where they
 * now spill 24-36 bytes, nvcc 13). H200, three alternating rounds in each of two calls, float16 /
 * bfloat16 % of the copy ceiling (bench/results/ln_hold3_h200.txt): 48 columns 91.4 / 91.4 -> 99.2
 * / 98.9, 96 82.0 / 80.9 -> 91.1 / 91.1 and 82.1 / 80.7 -> 90.9 / 91.0, 768 96.0 / 96.7 -> 98.7 /
 * 99.0 and 96.0 / 96.5 -> 98.3 / 98.8, 704 and 760 (the generic 32-lane kernel, 56 bytes spilled)
 * +0.3 to +2.2; 24, 192 and 384 within 0.5. Not measured on an H100. */
#ifndef ND_LN_PARAM_HOLD16
#define ND_LN_PARAM_HOLD16 3
#endif

#ifndef ND_LN_WARP_BLOCKS78 /* nd_layernorm_op::min_blocks: 16-bit warp-kernel lanes of 7-8 packs */
#define ND_LN_WARP_BLOCKS78 6
#endif

/* nd_layernorm_op::min_blocks: 16-bit warp-kernel lanes of 3 packs, 7 as the other short lanes,
 * except the exact and grid twins of 16 and 32 lanes a row (384 and 768 columns), which take
 * ND_LN_WARP_BLOCKS3_WIDE. ncu (H100, bfloat16 192 columns: 64 registers, 41% occupancy,
 * long-scoreboard stalls first; bench/results/ncu_ln_bf16_h100.txt) asked for more warps an SM;
 * at 9 blocks (56 registers, nvcc 13) the twins spill nothing, the generic kernel of 32 lanes
 * 48-64 bytes. Three alternating rounds, 7 -> 9 blocks for every lane of 3 packs, float16 /
 * bfloat16 % of the copy ceiling (bench/results/ln_warp_blocks3.txt):
 *   H200, two calls   384 columns 93.0 / 90.8 -> 93.7 / 92.9 and 93.1 / 90.5 -> 94.1 / 92.7;
 *                     768 95.0 / 95.0 -> 95.6 / 96.8 and 95.1 / 95.5 -> 96.0 / 96.6;
 *                     192 (8 lanes) 90.4 / 88.0 -> 89.4 / 87.8 and 89.9 / 87.9 -> 89.5 / 87.7
 *   H100              384 97.6 / 97.5 -> 97.3 / 97.3; 768 98.2 / 98.3 -> 98.2 / 98.2;
 *                     192 95.5 / 95.5 -> 95.1 / 95.3
 * so 8 lanes keep 7 (ND_LN_WARP_BLOCKS3). */
#ifndef ND_LN_WARP_BLOCKS3
#define ND_LN_WARP_BLOCKS3 7
#endif
#ifndef ND_LN_WARP_BLOCKS3_WIDE
#define ND_LN_WARP_BLOCKS3_WIDE 9
#endif

/* nd_layernorm_op::min_blocks: 16-bit warp-kernel lanes of 5-6 packs (640, 1280, 1536 columns),
 * for A/B runs. At 7 (the 640 twin spills nothing, the generic 32-lane kernels 8-104 bytes),
 * three alternating rounds, float16 / bfloat16: H200 640 columns 95.0 / 94.0 -> 95.8 / 94.3
 * (at 8, where the 640 twin spills 34 bytes: 95.7 / 94.9); H100 1280 98.2 / 98.4 -> 98.0 /
 * 98.4, 1536 98.2 / 98.4 -> 98.7 / 98.9 (bench/results/ln_warp_blocks3.txt). Not kept: within
 * a point, and 1280 / 1536 not measured on an H200. */
#ifndef ND_LN_WARP_BLOCKS56
#define ND_LN_WARP_BLOCKS56 6
#endif

#ifndef ND_LN_HOLD4 /* 1: 16-bit warp-kernel lanes of 4 packs hold their parameters, at 5 blocks an SM */
#define ND_LN_HOLD4 1
#endif

/* 1: nd_layernorm_op::row_sums tests each pack, not each element, of rows on the 16-byte grid in
 * whole packs, in one loop for every thread (threads that hold fewer packs than their group's
 * others no longer take a loop of their own, so a warp runs one loop, not both); 0: full threads
 * and the others in two loops. H100, three alternating rounds, float16 / bfloat16 % of the copy
 * ceiling (bench/results/model_widths_h100.txt): 576 columns (32 lanes of 3 packs, 24 of them
 * short one) 75.2 / 73.9 -> 85.2 / 84.4, 960 86 -> 91-92, 1600 91.6 / 91.7 -> 97.5 / 97.4, 2304
 * 91 -> 93, 3200 93 -> 98; 64 columns (the tile kernel, every lane full) 96.7 / 95.2 -> 95.7 /
 * 94.5, the other widths within 0.4, float32 within 0.4. Not tried: a warp vote taking the full
 * loop where every lane of the warp is full. */
#ifndef ND_LN_SUMS_PACKWISE
#define ND_LN_SUMS_PACKWISE 1
#endif

/* 1: nd_layernorm_op::row_sums' pack-wise loop selects its shift once a pack (a pad pack's 0),
 * not d once an element; 0: an element (A/B runs). The same bits either way. H200, two runs of
 * alternating rounds, % of the copy ceiling (bench/results/ln_short_h200.txt): 49152x1600 (the
 * grid twins) bfloat16 93.7 / 94.1 -> 96.0 / 96.0, float32 (blocks) 95.2 / 95.5 -> 95.9 / 96.2,
 * float16 within 0.2; in a third run the tile kernel's float16 / bfloat16 rows 256 columns 85.2 /
 * 82.9 -> 86.2 / 84.5, 512 90.9 / 89.9 -> 92.1 / 91.1, 1024 +0.2 / +1.0. */
#ifndef ND_LN_PACK_SHIFT
#define ND_LN_PACK_SHIFT 1
#endif

/* 1: LayerNorm in the register kernels makes one all-reduce of (sum d, sum d^2) with
 * d = x - x[0], x[0] the row's first element (ctx.first); 0: the two rounds below (mean, then
 * the shifted sums) on every path. */
#ifndef ND_NORM_ONE_ROUND
#define ND_NORM_ONE_ROUND 1
#endif
#ifndef ND_NORM_ONE_ROUND_BLOCK /* 1: the plain block kernel too (x[0] loaded) */
#define ND_NORM_ONE_ROUND_BLOCK 1
#endif
/* 1: float32 rows in blocks of 1024 threads (nd_rows_run's big block) make the one all-reduce
 * at 8 packs a thread too, where smaller blocks make two, and LayerNorm's policy takes the big
 * block at 8 packs (32768 columns); 0: two rounds there, and the split kernel at 8 packs. With
 * two rounds the big block lost 95.8 -> 90.3% of the copy ceiling at 32768 columns; with one,
 * H100, three alternating rounds: 95.7 -> 99.7 (bench/results/rows_big_block.txt). */
#ifndef ND_LN_BIG_ONE_ROUND
#define ND_LN_BIG_ONE_ROUND 1
#endif
/* 1: float32 rows of 32768 columns on a fast device take the big block's grid twin rather than
 * its exact twin (nd_layernorm_policy::exact says what was measured); 0: the exact twin */
#ifndef ND_LN_BIG32_GRID
#define ND_LN_BIG32_GRID 1
#endif
/* nd_layernorm_policy::loop: 1 as measured (float32 8192 columns); 2 rows of 512, 1024, 1280,
 * 1536, 2048 and 4096 packs on the grid (A/B runs); 0 none */
#ifndef ND_LN_LOOP
#define ND_LN_LOOP 1
#endif
/* float32 rows of 1024 packs (4096 columns) on a fast device in the loop kernel, this many threads
 * (256, 512 or 1024) taking the row in one pass (0: the block kernel; nd_layernorm_policy::loop
 * says what is measured) */
#ifndef ND_LN_LOOP32_1024_THREADS
#define ND_LN_LOOP32_1024_THREADS 256
#endif
/* float32 rows of 1280 packs (5120 columns) on a fast device in the loop kernel, in this geometry
 * (nd_loop_code; 0: the block kernel): 320 x 4, one pass of 16 elements a thread (the one-pass
 * statistics' limit, nd_ln_loop_chains_short). H200, three alternating rounds, block kernel ->
 * loop kernel: 97.2 -> 100.0% of the same-run copy ceiling, x torch.compile 0.97 -> 1.00 (0.96-0.97
 * in all twelve earlier H200 tables; bench/results/f32_5120_h200.txt). */
#ifndef ND_LN_LOOP32_1280
#define ND_LN_LOOP32_1280 nd_loop_code(320, 4)
#endif

/* nd_layernorm_policy::lean: 1 as measured; 0 none (A/B runs); 2 the fast device's rows on
 * every device (A/B runs). ND_LN_LEAN_P<n>: the geometry (nd_lean_code(lanes a row, rows a
 * group, warps a block), 0: none) of 16-bit rows of n packs (float32 rows:
 * nd_norm_policy::lean). */
#ifndef ND_LN_BLOCK_MIN16 /* nd_layernorm_policy::block_min for 16-bit rows */
#define ND_LN_BLOCK_MIN16 64
#endif
#ifndef ND_LN_FIT_ONE_LANE /* nd_layernorm_policy::warp_fit: 1 takes rows of one lane of 3 packs */
#define ND_LN_FIT_ONE_LANE 0
#endif
#ifndef ND_LN_LEAN
#define ND_LN_LEAN 1
#endif
#ifndef ND_LN_LEAN_PRESENT /* nd_layernorm_policy::lean_present, 16-bit groups of 2-4 rows */
#define ND_LN_LEAN_PRESENT 1
#endif
#ifndef ND_LN_LEAN_PRESENT_R1 /* nd_layernorm_policy::lean_present, 16-bit groups of one row */
#define ND_LN_LEAN_PRESENT_R1 2
#endif
#ifndef ND_LN_LEAN_P8
#define ND_LN_LEAN_P8 nd_lean_code(8, 4, 1)
#endif
#ifndef ND_LN_LEAN_P16
#define ND_LN_LEAN_P16 nd_lean_code(8, 4, 1)
#endif
#ifndef ND_LN_LEAN_P32
#define ND_LN_LEAN_P32 nd_lean_code(16, 2, 1)
#endif
#ifndef ND_LN_LEAN_P24
#define ND_LN_LEAN_P24 nd_lean_code(8, 1, 1)
#endif
#ifndef ND_LN_LEAN_P48
#define ND_LN_LEAN_P48 nd_lean_code(16, 1, 1)
#endif
#ifndef ND_LN_LEAN_P64
#define ND_LN_LEAN_P64 nd_lean_code(32, 2, 1)
#endif
#ifndef ND_LN_LEAN_P96
#define ND_LN_LEAN_P96 0
#endif
#ifndef ND_LN_LEAN_P128
#define ND_LN_LEAN_P128 nd_lean_code(32, 1, 1)
#endif
#ifndef ND_LN_LEAN_P80 /* 16-bit rows of 80 packs (640 columns) on a device not of the fast class */
#define ND_LN_LEAN_P80 nd_lean_code(32, 2, 1)
#endif

/* ---------------------------------------------------------------------------------------------
 * Op
 * ------------------------------------------------------------------------------------------- */

/* The partial sums of a LayerNorm row, per row r of K / 3: the sum of d = x - shift as a double
 * (its high and low words in a[3r], a[3r + 1]) and the sum of d^2 as a float (a[3r + 2]). Each
 * thread's own sums are float (exact or nearly: see nd_layernorm_op); only their combination
 * across threads is in double, so it costs one more shuffle per level and a DADD for an FADD,
 * per row, not per element. */
struct nd_op_norm_sums {
    static constexpr bool kCommutative = true; /* DADD and FADD: a + b is b + a, bit for bit */
    static __device__ __forceinline__ double get(const float *a)
    {
        return __hiloint2double(__float_as_int(a[0]), __float_as_int(a[1]));
    }
    static __device__ __forceinline__ void put(float *a, double v)
    {
        a[0] = __int_as_float(__double2hiint(v));
        a[1] = __int_as_float(__double2loint(v));
    }
    template <int K> __device__ __forceinline__ void operator()(float (&a)[K], const float (&b)[K]) const
    {
        static_assert(K % 3 == 0, "LayerNorm sums come in (sum d: 2 words, sum d^2) threes");
#pragma unroll
        for (int i = 0; i < K; i += 3) {
            put(&a[i], get(&a[i]) + get(&b[i]));
            a[i + 2] += b[i + 2];
        }
    }
};

/* Whether a LayerNorm row of this element size sums x itself for its mean (16-bit) rather than
 * x - shift (float32). A float sum of 16-bit values rounds only low bits of the values
 * themselves, which vary from element to element: noise, tiny, no bias (and values of one
 * magnitude, as a row of mean 1e4, sum exactly: 8 or 11 significant bits leave 13-16 bits of
 * room). A shift, whatever it is, has low bits of its own below the partial sums' ulp unless it
 * is a coarse number, and x - shift carries them into every element: the same rounding on every
 * addition, a bias in the mean (the two-round form's float mean as shift did that: up to 59
 * bfloat16 ulp near zero at 2.5M columns, bench/norm_numerics.c). A float32 x has all 24 bits:
 * its own sum would round at ~2^-24 of |mean| per element, far too much for a row of mean 1e4
 * and std 1, so float32 keeps x - shift (exact near the shift, Sterbenz): its remaining mean
 * error, ~0.1-0.3 x 2^-24 std, is far inside float32's tolerance. */
template <int ELEM_BYTES> struct nd_norm_raw : std::integral_constant<bool, ELEM_BYTES == 2> {};

/* LayerNorm's policy: nd_norm_policy's, with chunks of 256 threads in the split kernel.
 * 16-bit rows of 16-31 packs (128-248 columns) took 4 packs a lane (4 or 8 lanes) rather than 2
 * (8 or 16 lanes) while every lane loaded its parameters one pack ahead (H200, three runs:
 * float16 / bfloat16 128 columns 71.9 / 73.1 -> 76.6 / 78.0% of the copy ceiling). Now lanes of
 * 2 packs hold both packs' parameters from the start (nd_layernorm_op::param_hold), and 2 packs
 * a lane are faster: H100, three alternating rounds, 128 columns at 4 packs a lane 87.3 / 87.2,
 * at 2 packs 88.2 / 87.4, at 2 packs holding their parameters 90.7 / 90.9; 64-512 columns within
 * 0.4 (bench/results/rows_split_h100.txt). On an H200 too, both holding their parameters (two
 * alternating rounds): 128 columns in 4 lanes of 4 (sub_full 16) 85.8 / 83.5 -> 81.4 / 80.0, and
 * through the tile kernel in 4 lanes of 4 77.3 / 76.3 (bench/results/rows_fit_down.txt). */
struct nd_layernorm_policy : nd_norm_policy {
    /* The block kernel's smallest block: 64 threads for 16-bit rows (ND_LN_BLOCK_MIN16), so rows
     * of 257-512 packs (2056-4096 columns) take 64 threads of 5-8 packs rather than 128 of 3-4.
     * H200, five alternating rounds, float16 / bfloat16 % of the copy ceiling
     * (bench/results/ln_block64_h200.txt): 2304 columns 78.3 / 80.6 -> 97.2 / 97.2, 2560 82.6 /
     * 85.0 -> 97.9 / 98.0, 2816 86.6 / 89.2 -> 98.5 / 98.1, 3584 91.4 / 92.6 -> 97.6 / 97.4,
     * 3072 +0.4 / +0.5, 4096 -0.3 / -0.5; a second call (one run): 2304 97.9 / 98.2, 2560 98.2
     * / 98.2, 2816 98.6 / 97.1, 3584 97.6 / 97.8. float32 rows keep 128 (nd_norm_policy's):
     * from 64, 1152 and 1600 columns gained (91.4 -> 98.3, 95.8 -> 97.9) but 1536 and 1792 lost
     * (99.1 -> 96.5, 99.0 -> 97.7). Not measured on an H100. */
    static constexpr int block_min(int elem_bytes)
    {
        return elem_bytes == 2 ? ND_LN_BLOCK_MIN16 : nd_norm_policy::block_min(elem_bytes);
    }
    /* nd_norm_policy's fitted warp geometries but one lane of 3 packs (16-bit 24 columns; under
     * ND_LN_FIT_ONE_LANE 1 that too): those rows take 2 lanes of 2 packs, one empty, instead.
     * H200, three alternating rounds, float16 / bfloat16 % of the copy ceiling: 69.9 / 71.9 ->
     * 73.6 / 74.8 (bench/results/rows_fit_quarter_h200.txt). */
    static constexpr bool warp_fit(int, int w, int, bool) { return ND_LN_FIT_ONE_LANE || w >= 2; }
    /* The quarter-lane fits (ND_ROWS_WARP_FIT_QUARTER; its note has the measurements): 2 lanes of
     * 5 packs (16-bit 80, float32 40 columns), 4 of 5 and 7 (16-bit 160 / 224, float32 80 /
     * 112), and 2 of 7 for 16-bit rows (112) alone (float32 56 lost 9 points there). */
    static constexpr bool quarter_fit(int elem_bytes, int w, int packs)
    {
        return packs == 5 || (packs == 7 && (w == 4 || elem_bytes == 2));
    }
    /* The tail fits (ND_ROWS_WARP_FIT_TAIL, whose note has the measurements): lanes of 5 packs,
     * and 16-bit rows in 4 lanes or more of 6-7, float32 rows in 4 lanes of 6-7; not 16-bit 2
     * lanes of 6-7 (-0.1 to -8.8), float32 8 and 16 lanes of 6-7 (-1.0 to -3.8). */
    static constexpr bool tail_fit(int elem_bytes, int w, int packs)
    {
        return packs == 5 || w == 4 || (elem_bytes == 2 && w >= 4);
    }
    /* Chunks of 256 threads for 16-bit rows too: min_blocks gives them 80 registers (3 blocks an
     * SM), where 8 packs a thread, two parameters and their pipe fit without spilling (512
     * threads at 64 registers spilled 28 bytes and kept the pipe off). H100, three alternating
     * rounds, float16 / bfloat16 % of the copy ceiling: 2048x65536 81.4 / 81.4 -> 88.2 / 88.2,
     * 512x262144 77.3 / 77.1 -> 84.1 / 84.2, 128x1048576 74.5 / 73.1 -> 79.9 / 80.5; float32
     * within 0.3 (bench/results/rows_split_h100.txt). */
    static constexpr int split_threads(int) { return 256; }
    /* The tile kernel (rows_tile.cuh, 2 tiles a block) for 16-bit rows, on a fast device (an
     * H200), in groups of w lanes x packs packs of 8 x 4, 16 x 4, 32 x 3 and 32 x 4 (256, 512,
     * 768 and 1024 columns); 4 x 2 (64 columns) took it on every device before (below). Against the
     * warp kernel, two alternating rounds, float16 / bfloat16 % of the copy ceiling:
     *   H200: 64 columns 81.5 / 80.6 -> 83.1 / 83.1, 256 81.5 / 81.2 -> 86.5 / 84.9, 512 83.8 /
     *   83.7 -> 92.2 / 91.3, 768 87.8 / 88.5 -> 94.1 / 93.2, 1024 84.1 / 84.9 -> 95.1 / 94.9;
     *   H100: 64 89.7 / 88.7 -> 96.3 / 95.8; 256-1024 lost 0.5-2.5 (768: 99.0 / 99.1 -> 96.8 /
     *   96.6).
     * On the H200 128 columns (8 x 2) measured within 1.7, 32, 1536 and 2048 lost 2.5-10, and
     * float32 rows lost up to 14 or were within 0.5 (bench/results/rows_tile_h200.txt).
     * On a fast device those four only for rows that fill every lane (full: W * packs * 8
     * columns): rows with lanes short of packs ran there at about half the copy's speed and take
     * the warp kernel's grid twin (ND_ROWS_GRID_TWIN) instead. H200, three alternating rounds,
     * float16 / bfloat16, % of the copy ceiling: 576 columns (32 lanes of 3) 49.7 / 48.2 -> 77.1
     * / 76.3, 704 59.2 / 57.6 -> 87.4 / 86.3, 960 (32 of 4) 57.1 / 55.6 -> 90.4 / 89.8, 1016
     * 60.6 / 59.0 -> 92.3 / 91.0, 392 (16 of 4) 46.5 / 45.2 -> 67.1 / 65.8; rows that fill the
     * lanes unchanged (bench/results/rows_grid_h200.txt). */
    /* On a fast device, rows of exactly 64 or 768 columns (on the grid) take the warp kernel's
     * exact twin instead (ND_ROWS_EXACT). H200, two alternating rounds, float16 / bfloat16: 64
     * columns 82.6 / 82.5 -> 91.9 / 90.5, 768 93.8 / 92.6 -> 95.5 / 95.5; at 256, 512 and 1024
     * the twin lost 2-7 points to the tile kernel (bench/results/rows_exact_h200.txt).
     * And 4 x 2 no longer takes it on any device: on an H100, since the exact twins, the warp
     * kernel beat it at 64 columns, and rows that leave lanes short of packs (40, 56) ran at
     * half the copy's speed in it, as the four above did on the H200. H100, three alternating
     * rounds, float16 / bfloat16, tile -> warp kernel: 40 columns 50.7 / 49.9 -> 59.8 / 58.0,
     * 56 61.1 / 60.4 -> 69.4 / 68.3, 64 (its exact twin) 95.5 / 95.0 -> 103.6 / 103.0; 128-1024
     * within 0.5 (bench/results/ln_tile42_h100.txt). On an H200, 64 columns took the exact twin
     * already; 40 and 56 were not measured there. */
    static constexpr int tile_tiles(int elem_bytes, int w, int packs, bool fast, bool exact,
                                    bool full)
    {
        const bool g = (w == 8 && packs == 4) || (w == 16 && packs == 4) ||
                       (w == 32 && ((packs == 3 && !exact) || packs == 4));
        return elem_bytes == 2 && fast && g && full ? 2 : 0;
    }
    /* On a fast device, float32 rows of 32768 columns take the big block's grid twin rather than
     * its exact twin (ND_LN_BIG32_GRID): with the prefetch the exact twin takes 64 registers and
     * spills 8 bytes, the grid twin 61 and none. H200, four alternating rounds in each of two
     * calls, % of the copy ceiling: 93.1-93.3 -> 94.8-95.1 (-DND_ROWS_EXACT=0) and 93.6-93.8 ->
     * 95.1-95.2 (this knob); at 16384 columns (the plain block) the exact twin stays ahead, 99.0
     * against 98.3 (bench/results/ln_big32_grid_h200.txt). */
    static constexpr bool exact(int elem_bytes, int cols, bool fast)
    {
        return !(ND_LN_BIG32_GRID && fast && elem_bytes == 4 && cols == 32768);
    }
    /* float32 rows of 4097-8192 packs take one block of 1024 threads a row, not the split kernel's
     * chunks (H100, three alternating rounds against the split kernel, % of the copy ceiling,
     * float32 49152 rows of 20480 / 24576 / 28672 / 32768 columns, 5-8 packs a thread;
     * bench/results/rows_big_block.txt): 90.2 / 94.9 / 91.2 / 95.7 -> 94.2 / 97.1 / 99.5 / 99.7,
     * 32768 with one all-reduce (ND_LN_BIG_ONE_ROUND; with two it lost, 95.8 -> 90.3).
     * Not on a fast device: on an H200 (three alternating rounds, bench/results/
     * rows_fit_big_h200.txt) the split kernel took 24576 columns from 79.8 to 89.0, 32768 90.0
     * -> 89.9. */
    static constexpr bool big_block(int elem_bytes, int packs, bool fast)
    {
        return fast ? packs == 8 : elem_bytes == 4 && (packs <= 7 || ND_LN_BIG_ONE_ROUND);
    }
    /* On a fast device, rows of 8 packs a thread (float32 32768 columns, 16-bit 65536) take the
     * big block with its L2 prefetch a device-full of big blocks ahead (nd_rows_big_pf; float32
     * half a device-full, ND_ROWS_BIG_PF32: 89.7 -> 93.9 in a third call). H200,
     * three alternating rounds against the split kernel in each of two calls (bench/results/
     * rows_big_pf_h200.txt), % of the copy ceiling: float32 89.7 -> 91.6 and 90.2 -> 93.8,
     * float16 / bfloat16 85.6 / 81.7 -> 86.5 / 84.7 and 85.6 / 81.3 -> 85.6 / 84.8 (the big
     * block alone: 16-bit 85.8 / 81.7 -> 80.8 / 76.7, float32 90.2 -> 90.3). float32 stayed ~6
     * points below RMSNorm's same block (93.8 against 100.4, goals_h200_70418de.txt; 95.1 since
     * the grid twin, exact above), and not for its second parameter: with beta read from
     * gamma's lines (a probe, wrong results) it ran 93.8 -> 93.9
     * (bench/results/ln_beta_probe_h200.txt). */
    static constexpr int big_pf(int elem_bytes, int packs, bool fast)
    {
        return packs == 8 && fast ? (elem_bytes == 4 ? ND_ROWS_BIG_PF32 : 8) : 0;
    }
    /* Rows off the 16-byte grid of up to 256 columns take the stage kernel (rows_stage.cuh):
     * their parameters then load on their own grid, where the warp kernel's generic form loads
     * them element by element. H200, two alternating rounds, % of the copy ceiling, float16 /
     * float32 (bench/results/rows_stage_h200.txt): 7 columns 37 / 54 -> 53 / 70, 20 39 / 68 ->
     * 51 / 68, 77 26 / 39 -> 35 / 54, 127 24 / 45 -> 37 / 57, 197 29 / 54 -> 34 / 61, 255 24 /
     * 59 -> 29 / 66; 333 columns -1 / +2, 1001 -6 / -31. H100: 7-255 columns +3.6 to +17. */
    static constexpr int stage_packs(int elem_bytes) { return elem_bytes == 2 ? 32 : 64; }
    /* Float32 rows on the grid of 8192 columns (2048 packs) take the loop kernel on any device
     * (rows_loop.cuh; 512 threads x 4 packs a pass, one pass for the statistics:
     * nd_ctx_short_chains). H200, two alternating rounds, % of the same-run copy ceiling, block
     * kernel -> loop kernel (bench/results/ln_loop_h200.txt): 96.5 -> 100.6; H100, three
     * alternating rounds in each of two calls: 99.5 -> 99.8 and 99.4 -> 99.7, x torch.compile
     * 0.99 -> 1.00 (bench/results/rms_loop_h100.txt, loop_every_h100.txt). Every other width
     * measured lost, RMSNorm's geometries at 2048-32768 columns: float32 2048-6144 0.1-20
     * points, 16384 16; 16-bit 4096-32768 16-30 (5120 and 6144 within 0.3); at 1536 threads an
     * SM (40 registers) as much or more. Float32 rows of 1024 packs (4096 columns) take 256 x 4
     * on a fast device (ND_LN_LOOP32_1024_THREADS), as bench/loop_probe.cu's loop ran them at
     * 99.9 / 100.8% of the copy ceiling where the block kernel ran 96.0 / 97.2 (H200, two
     * runs, bench/results/loop_probe_h200.txt). In the library, H200, three alternating rounds
     * in each of two calls: 96.6 -> 99.1 and 96.6 -> 99.2, x torch.compile 0.97 -> 0.99
     * (bench/results/ln_warp_blocks3.txt). On an H100 (with ND_ROWS_LOOP_EVERY, three
     * alternating rounds) it lost, 99.1 -> 98.8 (bench/results/loop256_h100.txt). Float32 rows of
     * 1280 packs (5120 columns) take 320 x 4 on a fast device (ND_LN_LOOP32_1280): one pass that
     * every thread fills, where nd_loop_geometry's 512 x 4 leaves 3/8 of its pass's packs empty. */
    static constexpr int loop(int elem_bytes, int64_t packs, bool fast)
    {
        const bool take = ND_LN_LOOP == 2 ? fast && (packs == 512 || packs == 1024 ||
                                                     packs == 1280 || packs == 1536 ||
                                                     packs == 2048 || packs == 4096)
                                          : ND_LN_LOOP == 1 && elem_bytes == 4 && packs == 2048;
        if (ND_LN_LOOP == 1 && fast && elem_bytes == 4 && packs == 1280 && ND_LN_LOOP32_1280)
            return ND_LN_LOOP32_1280;
#if ND_LN_LOOP32_1024_THREADS
        constexpr int T = ND_LN_LOOP32_1024_THREADS;
        static_assert(T == 256 || T == 512 || T == 1024, "a loop geometry of one pass");
        if (ND_LN_LOOP == 1 && fast && elem_bytes == 4 && packs == 1024)
            return nd_loop_code(T, 1024 / T);
#endif
        return take ? nd_loop_geometry(packs) : 0;
    }
    /* 16-bit rows on the grid of 128, 256, 512 and 1024 columns (16, 32, 64, 128 packs) take
     * the lean kernel on a fast device (rows_lean.cuh), W lanes a row x R rows a group x NW
     * warps a block of 8 x 4 x 1 (2 packs a lane), 16 x 2 x 1 (2 packs), 32 x 2 x 1 and
     * 32 x 1 x 1. H200, two or three alternating rounds, % of the same-run copy ceiling,
     * bfloat16 / float16, against the tile and warp kernels (bench/results/lean_h200.txt):
     *   128 columns   83.4 / 85.6 -> 90.0 / 90.0   (16 x 4 x 1 86.4 / 87.1, 16 x 2 x 4 84 / 86,
     *                                               8 x 2 x 1 86.7 / 87.0, 8 x 2 x 2 85 / 85,
     *                                               8 x 1 x 1 77)
     *   256           84.8 / 86.6 -> 90.9 / 92.4   (32 x 4 x 1 89.2 / 90.2, 32 x 4 x 2 89.8 /
     *                                               90.2, 16 x 2 x 2 90.2 / 90.4, 16 x 4 x 1
     *                                               87.5 / 86.6, 8 x 4 x 1 76, 32 x 8 x 1 70-71,
     *                                               16 x 1 x 1 78, 32 x 1 x 4 74-78)
     *   512           91.0 / 92.3 -> 94.9 / 95.7   (32 x 2 x 2 93.2 / 94.3, 32 x 2 x 4 92.1 /
     *                                               93.3, 32 x 4 x 1 89.9 / 86.2)
     *   1024          93.8 / 95.0 -> 96.2 / 96.6   (32 x 2 x 1 95.2 / 96.1, 32 x 1 x 2 94.8 /
     *                                               95.8, 32 x 2 x 2, 32 x 2 x 4, 32 x 1 x 4
     *                                               94-95.4)
     * Not taken, lower than the kernels they would replace, or within 0.1, in the three
     * geometries of 8-32 lanes tried for each: 64 columns (-2.8 to -18.3), 192 (-1.3 to -16.5),
     * 384 (-0.2 to -11.1), 640 (+0.1 to -7.9); and 768 (32 lanes, 1 x 1 and 1 x 4: -2.9 to
     * +1.8 in two runs; the warp kernel's exact twin keeps it, ND_LN_LEAN_P96 0). float32 rows
     * of 64-256 columns moved within -16.3 to +1.1 in the generic kernel (64 and 128 take the
     * exact twin now, below). Also tried: rstd = rsqrtf(var + eps) for 1 / sqrtf (as PyTorch's
     * kernels): within -0.4 to +0.4 at 256-1024 columns, not kept.
     * On an H100 (every device, ND_LN_LEAN 2, against the warp kernels; three alternating
     * rounds, bench/results/lean_h100.txt), bfloat16 / float16: 128 columns 94.5 / 96.2 -> 96.8
     * / 96.8, 256 95.8 / 96.0 -> 96.5 / 96.4, 512 98.3 / 98.3 -> 97.6 / 97.7, 1024 99.1 / 99.2
     * -> 98.2 / 98.5; softmax 512 / 1024 and log_softmax 1024 within -0.4 to +0.2. So rows of
     * 16 and 32 packs take it on every device, 64 and 128 on a fast one (the final library
     * against it with P16 and P32 0, three rounds: 128 94.6 / 96.2 -> 96.6 / 97.0, 256 95.6 /
     * 96.1 -> 96.5 / 96.7).
     * On an H100, rows of 24, 48 and 80 packs (192, 384, 640 columns) in 8, 16 and 32 lanes of 3
     * packs, 2 rows a group, 1 warp a block (ND_ROWS_LEAN_TRY_EVERY; three alternating rounds
     * against the warp kernel's exact twins, float16 / bfloat16, bench/results/
     * lean_odd_h100.txt): 192 95.6 / 95.3 -> 92.9 / 92.4, 384 97.4 / 97.4 -> 97.6 / 97.2, 640
     * 97.2 / 97.0 -> 97.8 / 97.6; the committed rule in another call 97.2 / 97.0 -> 97.9 / 97.4.
     * So rows of 80 packs take it on a device not of the fast class (ND_LN_LEAN_P80); on an H200
     * 640 columns lost in all three geometries tried above.
     * float32 rows of 64 and 128 columns take nd_norm_policy::lean's rule, since the exact
     * twin; its blocks of 4 warps for 16-bit rows of 64-384 columns lost 0.5-8.6 points on an
     * H200 (lean_nw4_h200.txt).
     * In the exact twin on an H200, against the warp kernel's exact twins (three alternating
     * rounds in each of two calls, float16 / bfloat16; bench/results/lean_short_h200.txt): rows
     * of 48 packs (384 columns) in 16 x 1 x 1 94.0 / 93.1 -> 94.6 / 93.4 and 94.0 / 92.9 ->
     * 94.7 / 93.3 (x torch.compile 0.98 / 0.98 -> 0.99 / 0.98 and 0.98 / 0.97 -> 0.99 / 0.97),
     * so they take it on a fast device (ND_LN_LEAN_P48); 16 x 2 x 1 93.7 / 93.1, 32 x 2 x 1
     * 87.7 / 83.3. Rows of 24 packs (192) lost or stayed within 0.4 in each geometry, against
     * 90.3-90.5 / 87.8-88.1: 8 x 2 x 1 88.7 / 88.2, 8 x 4 x 1 78.9 / 77.0, 32 x 2 x 1 61.8 /
     * 61.4, and 32 x 4 x 1 77.1 / 75.5, torch.compile's layout (one pack a lane, 24 of 32 lanes
     * busy, 4 rows a warp); rows of 8 packs (64) 8 x 4 x 1 86.6 / 85.9, 8 x 2 x 1 78.5 / 78.7
     * against the warp kernel's exact twin's 92.1 / 90.3; and in a third call 16 x 4 x 1 for
     * 16 packs (128) and 32 x 2 x 1 for 32 (256) lost 4.8-15.2 against 8 x 4 x 1 and 16 x 2 x 1.
     * Since each lane finishes one row of its group (ND_LN_SPREAD_FINISH), rows of 8 packs (64
     * columns) take the exact twin in 8 x 4 x 1 on a fast device: H200, three alternating
     * rounds in each of two calls, against the warp kernel's exact twin, float16 / bfloat16 92.9
     * / 91.3 -> 94.7 / 94.1 and 91.9 / 90.5 -> 94.1 / 93.9, x torch.compile 1.15 / 1.14 -> 1.16
     * / 1.18 (bench/results/ln_spread_h200.txt; 8 x 8 x 1 87.4 / 88.5, 8 x 4 x 2 81.6 / 83.0).
     * Tried there too, with the spread finish, and lost: 16 x 4 x 1 at 128 columns (89.4 / 89.0
     * against 92.9 / 91.7), 32 x 4 x 1 at 192 (81.9 / 80.2 against 90.3 / 87.9) and 256 (91.1 /
     * 90.4 against 93.8 / 91.9), 8 x 2 x 1 at 192 (87.9 / 87.7), 16 x 2 x 1 at 384 (93.8 / 92.6
     * against 94.6 / 93.4), 32 x 2 x 1 at 640 (94.7 / 91.3 against 94.7 / 94.4).
     * Rows of 24 packs (192 columns) take the exact twin in 8 x 1 x 1 on a fast device: one row a
     * group, no spread finish, blocks of one warp. H200, three alternating rounds, against the
     * warp kernel's exact twin (8 lanes of 3 packs, blocks of 4 warps), float16 / bfloat16:
     * 90.0 / 88.1 -> 91.7 / 89.5 and in a second call 90.2 / 88.0 -> 92.0 / 89.5, x
     * torch.compile 0.97 / 0.94 -> 0.99 / 0.96 and 0.95 / 0.94 -> 0.97 / 0.95
     * (bench/results/ln192_h200.txt). The same rows in 8 x 1 x 4 ran 85.5 / 83.2, in 8 x 2 x 1
     * and 8 x 4 x 1 with the spread finish at 3 packs a lane (ND_LN_SPREAD_MAX_N 24) 88.4 / 87.5
     * and 85.8 / 85.5 (lean_dep_h200.txt). */
    static constexpr int lean(int elem_bytes, int64_t packs, bool fast)
    {
        if (!ND_LN_LEAN)
            return 0;
        if (elem_bytes == 4)
            return nd_norm_policy::lean(elem_bytes, packs, fast);
        if (packs == 16 || packs == 32)
            return packs == 16 ? ND_LN_LEAN_P16 : ND_LN_LEAN_P32;
        if (!fast && ND_LN_LEAN != 2)
            return packs == 80 ? ND_LN_LEAN_P80 : 0;
        return packs == 8 ? ND_LN_LEAN_P8 : packs == 24 ? ND_LN_LEAN_P24
               : packs == 48 ? ND_LN_LEAN_P48
               : packs == 64 ? ND_LN_LEAN_P64
               : packs == 96 ? ND_LN_LEAN_P96 : packs == 128 ? ND_LN_LEAN_P128 : 0;
    }
    /* How the lean kernel writes y when gamma and beta are both there (ND_ROWS_LEAN_PRESENT):
     * 16-bit rows in their own copy of the output loop, without the absent-parameter defaults
     * (1: static SASS of the bfloat16 192-column kernel's path 492 -> 444 instructions), and
     * groups of one row (R = 1) asking for all their parameters at once (2); float32 rows keep
     * one loop (0; RMSNorm's: nd_rmsnorm_policy::lean_present). H200, three alternating
     * rounds, % of the same-run copy ceiling, float16 / bfloat16 (bench/results/
     * lean_present_h200.txt):
     *                       one loop       1              2
     *   64 (8 x 1, R 4)     94.1 / 94.1    94.4 / 95.0    94.0 / 94.9
     *   128 (8 x 2, R 4)    94.2 / 93.9    96.3 / 96.1    94.5 / 91.4
     *   192 (8 x 3, R 1)    92.0 / 90.8    93.6 / 92.9    94.0 / 94.3
     *   256 (16 x 2, R 2)   93.5 / 92.3    93.8 / 93.3    94.5 / 92.7
     *   384 (16 x 3, R 1)   95.5 / 94.4    95.8 / 95.9    96.4 / 96.8
     *   512 (32 x 2, R 2)   96.2 / 95.4    95.8 / 96.2    96.2 / 95.8
     *   1024 (32 x 4, R 1)  97.2 / 97.0    97.1 / 97.3    97.7 / 97.7
     * float32 64 columns (8 x 2, R 2, 4 warps) lost 4.4 with either (96.2 -> 91.8 / 92.1; 40 ->
     * 47 registers), 128 within 0.3; RMSNorm's 16-bit 192 (8 x 3, R 4) lost 0.2-1.9. This rule
     * against the library before, in a second call: 64 93.7 / 94.3 -> 94.3 / 94.7, 128 94.1 /
     * 93.5 -> 96.1 / 94.8, 192 92.3 / 90.7 -> 94.0 / 94.4, 256 93.4 / 92.2 -> 93.8 / 93.4, 384
     * 95.7 / 94.2 -> 96.7 / 96.6, 512 within 0.3, 1024 +0.2 / +0.9; x torch.compile at 192
     * 0.97 / 0.97 -> 0.99 / 1.00, at 384 1.00 / 0.99 -> 1.01 / 1.01. There 192 columns in 8 x 3,
     * R 2 (the second loop) lost 4.5-5.6 against it. Not measured on an H100, whose LayerNorm
     * 16-bit 128, 256 and 640 columns take the lean kernel too (R 4, 2, 2: the second loop).
     * Tried since, one row a group with the parameters at once (H200, three alternating rounds,
     * bench/results/split_exchange_h200.txt): 256 columns in 8 x 1 x 1 (4 packs a lane), float16
     * / bfloat16 93.8 / 93.5 -> 92.9 / 93.3; 512 in 16 x 1 x 1, 95.8 / 96.1 -> 95.7 / 95.8. */
    static __host__ __device__ constexpr int lean_present(int elem_bytes, int rows)
    {
        return elem_bytes != 2 ? 0 : rows == 1 ? ND_LN_LEAN_PRESENT_R1 : ND_LN_LEAN_PRESENT;
    }
    /* Tried after (H100, three alternating rounds, bench/results/rows_hold_h100.txt), none kept:
     *   16-bit rows of 32-63 packs at 2 packs a lane too (256 columns: 16 lanes, parameters
     *   held): 93.1 / 93.9 -> 92.0 / 92.7% of the copy ceiling;
     *   one row a lane for groups of 4 lanes (16-bit 64 columns; R = 1, parameters held): 92.9
     *   / 91.5 -> 86.9 / 87.7, float32 32 columns 104.2 -> 88.7;
     *   blocks of at most 256 threads, so 16-bit rows of 32768 columns take the split kernel
     *   (2 chunks, 80 registers, piped): 93.9 / 93.7 -> 90.6 / 90.7, float32 16384 99.8 ->
     *   93.9;
     *   float32 chunks at 3 blocks an SM (80 registers), parameters piped / not: 512x262144
     *   89.6 -> 89.6 / 86.2, 2048x65536 82.3 -> 82.3 / 79.9; at 128x1048576
     *   the rows no longer fit the split kernel's share of the device (128 chunks) and ran at
     *   39%. Holding the parameters of lanes of R > 1 rows (16-bit 64 columns) spilled
     *   244-296 bytes at the 72-register cap (nvcc 13) and was not measured.
     * And on an H200 (two alternating rounds, bench/results/ln_short_h200.txt): 2 rows a group
     * for groups of 8 and 16 lanes of 2-3 packs (no spill), to have twice the bytes in flight:
     * float16 / bfloat16 128 columns 85.6 / 83.4 -> 81.3 / 80.8, 192 90.0 / 87.8 -> 79.4 / 78.3,
     * 384 93.1 / 91.0 -> 88.6 / 87.4, float32 64 93.1 -> 88.0, 192 96.8 -> 93.1.
     * And (H200, two alternating rounds, same file) 16-bit rows of 32-64 packs in a full warp a
     * row, 1-2 packs a lane (2 rows a group at 1), the layout of torch.compile's kernel there
     * and of bench/loop_probe.cu's short_rows, which ran 256 / 512 columns 4-6 points above the
     * library: through this op's warp kernel float16 / bfloat16 256 columns 86.7 / 84.4 -> 78.9
     * / 78.0, 320-448 15-25 lower, 512 92.1 / 90.9 -> 89.1. */
};

/* The loop kernel's float32 rows take one pass for their statistics (stream_stats,
 * nd_ctx_short_chains): at most 16 elements a thread, as the register kernels' one-pass rows. */
constexpr bool nd_ln_loop_chains_short()
{
    for (int p = 1; p <= 1 << 13; p++) {
        const int code = nd_layernorm_policy::loop(4, p, true);
        if (code && (p + nd_loop_threads(code) - 1) / nd_loop_threads(code) * 4 > 16)
            return false;
    }
    return true;
}
static_assert(nd_ln_loop_chains_short(), "LayerNorm's float32 loop rows: at most 16 elements a thread");

struct nd_layernorm_op {
    typedef nd_layernorm_policy Policy;
    static constexpr float kPad = 0.0f;
    static constexpr int kParams = 2;
    typedef nd_norm_params Params;
    /* Launch bounds (nd_rows_min_blocks): the statistics below hold more across the all-reduce
     * and finish than the float form did, and at the default caps nvcc took up to 8 registers
     * more, a block per SM fewer for 16-bit rows of 4 packs a lane (256..1024 columns: 72 -> 80,
     * 7 -> 6 blocks) and 128-thread blocks of 3 packs (56 -> 59..64, 9 -> 8), measured at 4 to 6
     * points of the copy ceiling (H200). At 7 warp-kernel blocks (72 registers) every warp
     * kernel but 16-bit lanes of 7 or 8 packs, and at 9 blocks (56) those block kernels, fit
     * without spilling (nvcc 13, -Xptxas -v). 16-bit blocks of 7-8 packs a thread spilled 24
     * bytes at 64 registers (after ND_ROWS_PIPE16_MAX_PACKS) and none at 896 threads an SM:
     * 7 blocks of 128 (72 registers), 3 of 256 (80). H100, three alternating runs, float16 /
     * bfloat16: 8192 columns 94.6 / 94.6 -> 98.9 / 98.9% of the copy ceiling, 16384 95.6 / 95.6
     * -> 98.6 / 98.3. Blocks of 512 keep 2 an SM: 1 (128 registers) took 32768 columns from
     * 93.7 to 84. */
    /* The split kernel's 16-bit chunks of 256 threads x 8 packs (kind ND_CTX_CROSS_BLOCK) take
     * the same 3 blocks an SM (80 registers) as the block kernel's. 16-bit warp-kernel lanes of
     * 5-6 packs (1280-1536 columns) take 6 blocks (80 registers): at 7 (72) they spilled 32-108
     * bytes, at 6 none (nvcc 13). H100, three alternating rounds, float16 / bfloat16 1536
     * columns 96.9 / 95.8 -> 98.1 / 98.2% of the copy ceiling; at 6 blocks lanes of 2 packs lost
     * 2.4-6.3 (32 and 128 columns) and of 3 packs 2.3 (768), of 4 packs within +0.5
     * (bench/results/ln_warp_blocks_h100.txt). Lanes of 7-8 packs (1792-2048 columns) took 5
     * blocks (96 registers): at 6 (80) the generic kernels spilled 144-158 bytes with the
     * parameter pipe of ND_ROWS_PIPE16_MAX_PACKS's note, at 5 none. H100, five alternating
     * rounds, float16 / bfloat16 2048 columns 96.9 / 94.6 -> 98.3 / 98.0, 1024-1536 and 4096
     * within 0.1 (bench/results/ln_warp_blocks5_h100.txt). Now those rows on the grid take the
     * exact or grid twin, which spill nothing at 6 blocks (nvcc 13; the generic kernels, left to
     * rows off the grid, 16-132 bytes), so they take 6 (ND_LN_WARP_BLOCKS78). Three alternating
     * rounds against 5 (bench/results/ln_warp_blocks6_h200.txt): H200 1600 columns (grid twin)
     * 92.8 / 91.8 -> 96.6 / 93.6, 1800 +1.5 / 0, 1792 (exact) -0.5 / -0.6, 2048 within 0.1;
     * H100 every width within 0.5. */
    /* The warp kernel's blocks an SM, as measured in blocks of 4 warps (above). Its blocks are of
     * one warp now (nd_rows_warp_block) but for rows of at most ND_ROWS_WARP_SHORT_PACKS packs,
     * so 16-bit rows ask for the same threads an SM, that is the same register cap, in blocks
     * of `threads` (at most the SM's 32 blocks: 16-bit 768 columns, 9 -> 32 blocks, 56 -> 64
     * registers). H200, three alternating rounds against blocks of 4 warps, float16 / bfloat16
     * % of the copy ceiling (bench/results/ln_warp32_h200.txt): 640 columns 94.7 / 94.3 -> 95.2
     * / 94.9, 768 96.2 / 97.0 -> 96.3 / 96.7, 1280 +0.4 / +0.3, 1536 +0.7 / +0.2, 2048 96.6 /
     * 96.8 -> 97.7 / 98.4; a second call, 640 +0.1 / +0.2, 768 0 / 0, 1280 -0.1 / +0.2, 1536
     * +0.5 / +0.2, 2048 97.1 / 96.9 -> 98.2 / 98.4 (most of these kernels are the same code
     * as before, cuobjdump -sass compared: the launch changed). In one-warp blocks with these
     * counts unscaled (no cap: 72-96 registers where these take 56-80) 640 moved +1.8 / -2.5 and
     * 768 -1.4 / -5.7 (bench/results/warp_block32_h200.txt). float32 rows keep 7 in one-warp
     * blocks, 224 threads an SM, no cap below nvcc's own (as that file measured them; scaled to
     * 72 registers they moved -0.6 to +0.5 at 192-1024 columns in the run above). */
    static constexpr int min_blocks(int kind, int elem_bytes, int packs, int threads,
                                    int twin_lanes)
    {
        const int b3 = twin_lanes >= 16 ? ND_LN_WARP_BLOCKS3_WIDE : ND_LN_WARP_BLOCKS3;
        const int b16 = (packs >= 7 ? ND_LN_WARP_BLOCKS78
                         : packs >= 5 ? ND_LN_WARP_BLOCKS56
                         : packs == 4 && ND_LN_HOLD4 ? 5
                         : packs == 3 ? b3
                                      : 7) * ND_ROWS_WARP_BLOCK4 / threads;
        return kind == ND_CTX_WARP ? (elem_bytes == 2 ? (b16 < 32 ? b16 : 32) : 7)
               : threads == 128 && packs <= 3 ? 9
               : elem_bytes == 2 && packs >= 7 && threads <= 256 ? 896 / threads
                                                                 : 0;
    }
    /* Tried (H200, three alternating rounds, bench/results/warp_short_blocks_h200.txt): warp-kernel
     * lanes of at most 2 packs (16-bit) or 4 (float32) at 9 or 8 blocks instead of 7: 16-bit 32
     * and 64 columns lost up to 6 points (spills), float32 128 / 256 0.4-2.1; float32 64 gained
     * 93.3 -> 95.0 at 9, and takes the lean kernel now (nd_layernorm_policy::lean). Not kept.
     * Tried: 16-bit rows in the plain block kernel at 4 packs a thread in larger blocks (up to
     * 512 threads) instead of 8, which spill 276 bytes a thread at the 64-register cap (nvcc 13,
     * -Xptxas -v; 4 and 5 packs spill none). H200, three runs each: 8192 columns 86.7 -> 87.9% of
     * the copy ceiling, 16384 87.5 -> 81.5, 2048-4096 and 32768 unchanged. Not kept.
     * Tried (H100, five alternating rounds, bench/results/ln_warp_blocks_h100.txt): the exact
     * twin of 16-bit lanes of 2 packs (128 columns), whose bfloat16 kernel takes 71 registers and
     * so 7 blocks where float16's takes 64 (8 blocks), capped at 8 blocks (63 registers, no
     * spill): bfloat16 94.6 -> 94.5% of the copy ceiling, float16 95.8 -> 94.8. Not kept.
     * Tried: 16-bit warp-kernel lanes of up to 16 elements holding x as floats (wide_regs, as
     * softmax's), widened once instead of again for the output (ncu, H200, float16 128 columns:
     * 21.5 instructions an element, 4 of them conversions of x, gamma and beta). H200, three
     * alternating rounds: 128 columns 85.7 / 83.5 -> 85.6 / 83.2% of the copy ceiling, 32 and
     * 64 within 2.5 either way (bench/results/rows_grid_h200.txt). Not kept.
     * Tried: for threads holding at most 16 elements of their rows, rstd = rsqrtf (as PyTorch's
     * kernels; no slow-path branches) and 4 partial sums a thread instead of one serial chain
     * (LayerNorm and RMSNorm). ncu, H100, float16 128 columns: 21.5 -> 20.1 instructions an
     * element, but 64 -> 72 registers; H100, three alternating rounds, every short row within
     * about 1 point (float16 128: 96.0 -> 95.0). Without the 16-element limit nvcc spilled
     * 36-816 bytes in 16-bit lanes and blocks of 5-8 packs (bench/results/
     * norm_short_stats_h100.txt; torch.compile's kernels run 10.7-11.5 instructions an element
     * there: bench/results/triton_instr_h100.txt). Not kept; not measured on an H200. */
    /* Warp-kernel lanes of at most ND_LN_PARAM_HOLD16 (3) packs of a 16-bit row load all their
     * parameters with x (nd_param_hold); float32 rows of 64 columns (8 lanes of 2 packs) lost 1.2
     * points of the copy ceiling holding theirs (H100, bench/results/rows_split_h100.txt). 16-bit
     * lanes of 4 packs hold theirs too, at 5 blocks an SM (min_blocks; ND_LN_HOLD4): holding
     * them, they spilled 116-184 bytes at 7 blocks (72 registers), 84-156 at 6 (80) and none at
     * 5 (96; nvcc 13).
     * H100, three alternating rounds, against 7 blocks not held, float16 / bfloat16 % of the copy
     * ceiling: 256 columns 93.3 / 93.8 -> 94.6 / 94.4, 512 96.3 / 96.7 -> 97.6 / 97.5, 1024
     * 98.3 / 98.4 -> 98.6 / 98.5. Lanes of 3 packs at 5 blocks lost 6 points at 768 columns
     * (99.1 -> 92-93, held or not), and at 6 held 2 (bench/results/ln_hold4_h100.txt). On an
     * H200 the tile kernel (256-1024 columns there) without the hold, at 72 registers, lost 3-6
     * points (bench/results/ln_hold4_h200.txt). */
    static __host__ __device__ constexpr bool param_hold(int elem_bytes, int packs, int)
    {
        return elem_bytes == 2 && (packs <= ND_LN_PARAM_HOLD16 || (packs == 4 && ND_LN_HOLD4));
    }
    /* the row mean is m_hi + m_lo (two floats); y = (x - m_hi - m_lo) * rstd * gamma + beta */
    struct State {
        float m_hi, m_lo, rstd, nlo; /* nlo = -m_lo * rstd */
    };

    /* From a row's sums S = sum(x - sshift) (double) and q = sum((x - vshift)^2), n columns (nd:
     * the same, exact; inv_n = 1/n): c = S / n as c_hi + c_lo, the mean sshift + c as m_hi + m_lo
     * (TwoSum), var = q / n - (mean - vshift)^2. c_hi needs no exact rounding: c_lo comes from
     * the exact remainder S - c_hi * n (one double fma), so a multiplication by 1/n does (and
     * saves the two divisions the old form made per row). The output formula then subtracts the
     * mean to ~2^-46 of |c| instead of the 2^-25 |c| one float holds, an offset every output of
     * the row would share. */
    template <bool RSQRT = false>
    static __device__ __forceinline__ void finish(State &st, float sshift, double S, float vshift,
                                                  float q, float inv_n, double nd, float eps)
    {
        const float c_hi = __double2float_rn(S) * inv_n;
        const float c_lo = __double2float_rn(fma(-(double)c_hi, nd, S)) * inv_n;
        const float m_hi = sshift + c_hi, t = m_hi - sshift;
        st.m_hi = m_hi;
        st.m_lo = ((sshift - (m_hi - t)) + (c_hi - t)) + c_lo;
        const float cv = (m_hi - vshift) + st.m_lo;
        const float var = fmaxf(q * inv_n - cv * cv, 0.0f);
        st.rstd = RSQRT ? rsqrtf(var + eps) : 1.0f / sqrtf(var + eps);
        st.nlo = -st.m_lo * st.rstd;
    }

    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats(V (&v)[R], State (&st)[R], const Ctx &ctx,
                                                 const Params &p)
    {
        /* H200, same run: one round gained 2-5 points for 16-bit rows in the block kernel and
         * 10-15 across clusters, but lost 1.3-3 points for float32 rows of 32 elements per thread
         * in a plain block (4096-16384 columns), which keep two rounds. */
        constexpr int kind = nd_ctx_kind<Ctx>::value;
        constexpr bool big = ND_LN_BIG_ONE_ROUND && nd_ctx_threads<Ctx>::value >= 1024;
        constexpr bool two = !ND_NORM_ONE_ROUND ||
                             (kind == ND_CTX_BLOCK && (!ND_NORM_ONE_ROUND_BLOCK ||
                                                       (V::kElemBytes == 4 && N >= 32 && !big)));
        if constexpr (!two)
            stats_one_round<R, N>(v, st, ctx, p);
        else
            stats_two_rounds<R, N>(v, st, ctx, p);
    }

    /* This thread's sums for R rows into q[3R] (nd_op_norm_sums), all-reduced, each row
     * finished: sum(x) for 16-bit x (RAW; see nd_norm_raw) or sum(x - shift) for float32, and
     * sum((x - shift)^2). Per element: one subtraction, one addition, one fma, as before. */
    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void row_sums(V (&v)[R], State (&st)[R], const Ctx &ctx,
                                                    const Params &p, const float (&shift)[R])
    {
        constexpr bool RAW = nd_norm_raw<V::kElemBytes>::value;
        constexpr int VEC = 16 / V::kElemBytes; /* elements of a pack */
        float q[3 * R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float s = 0.0f, sdd = 0.0f;
            if (ND_LN_SUMS_PACKWISE && ctx.whole_packs(r)) {
                /* each of this thread's packs in the row or wholly past its end (pads): one
                 * test a pack, and the same loop for every thread of the row (threads short of
                 * packs and full ones do not diverge) */
#pragma unroll
                for (int i = 0; i < N / VEC; i++) {
                    /* a pad is 0 (kPad), so a pad pack shifted by 0 adds 0 to both sums: one
                     * select a pack (ND_LN_PACK_SHIFT) rather than one an element */
                    const bool in = ctx.valid(r, i * VEC);
                    const float sh = in ? shift[r] : 0.0f;
#pragma unroll
                    for (int j = 0; j < VEC; j++) {
                        const float x = v[r].get(i * VEC + j);
                        const float d = ND_LN_PACK_SHIFT ? x - sh : in ? x - shift[r] : 0.0f;
                        s += RAW ? x : d;
                        sdd = fmaf(d, d, sdd);
                    }
                }
            } else if (ctx.full(r)) { /* no pads among this thread's elements */
#pragma unroll
                for (int e = 0; e < N; e++) {
                    const float x = v[r].get(e), d = x - shift[r];
                    s += RAW ? x : d;
                    sdd = fmaf(d, d, sdd);
                }
            } else {
#pragma unroll
                for (int e = 0; e < N; e++) {
                    const float x = v[r].get(e), d = ctx.valid(r, e) ? x - shift[r] : 0.0f;
                    s += RAW ? x : d; /* a pad is 0 (kPad) */
                    sdd = fmaf(d, d, sdd);
                }
            }
            nd_op_norm_sums::put(&q[3 * r], (double)s);
            q[3 * r + 2] = sdd;
        }
        ctx.template allreduce<3 * R>(q, nd_op_norm_sums());
        const float inv_n = 1.0f / ctx.n;
        constexpr int SW = nd_ctx_spread_lanes<Ctx>::value;
        if constexpr (ND_LN_SPREAD_FINISH && R > 1 && SW >= R && V::kElemBytes == 2 &&
                      N <= ND_LN_SPREAD_MAX_N) {
            /* Every lane of the group holds every row's sums (the same bits: the all-reduce's
             * additions commute bit for bit). Lane r of the group finishes row r (lane l: row
             * l % R, a duplicate past R) and the others take its state by shuffle: one finish a
             * lane, with its divisions and double arithmetic, not R. */
            const int mine = ctx.gl % R;
            double S = nd_op_norm_sums::get(&q[0]);
            float qq = q[2], sh = shift[0];
#pragma unroll
            for (int r = 1; r < R; r++)
                if (mine == r) {
                    S = nd_op_norm_sums::get(&q[3 * r]);
                    qq = q[3 * r + 2];
                    sh = shift[r];
                }
            State one;
            finish<ND_LN_SPREAD_RSQRT != 0>(one, RAW ? 0.0f : sh, S, sh, qq, inv_n,
                                            (double)ctx.cols, p.eps);
#pragma unroll
            for (int r = 0; r < R; r++) {
                st[r].m_hi = ctx.from_lane(one.m_hi, r);
                st[r].m_lo = ctx.from_lane(one.m_lo, r);
                st[r].rstd = ctx.from_lane(one.rstd, r);
                st[r].nlo = ctx.from_lane(one.nlo, r);
            }
        } else {
#pragma unroll
            for (int r = 0; r < R; r++)
                finish(st[r], RAW ? 0.0f : shift[r], nd_op_norm_sums::get(&q[3 * r]), shift[r],
                       q[3 * r + 2], inv_n, (double)ctx.cols, p.eps);
        }
    }

    /* One all-reduce: shift by the row's first element instead of by the mean. f is that
     * element if this thread holds column 0 (at element h of its first pack), for ctx.first. */
    template <int R, int N, class V, class Ctx>
    static __device__ __forceinline__ void stats_one_round(V (&v)[R], State (&st)[R],
                                                           const Ctx &ctx, const Params &p)
    {
        constexpr int VEC = 16 / V::kElemBytes; /* elements of a pack */
        float shift[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            float f = v[r].get(0);
            if (!ctx.full(r)) {
#pragma unroll
                for (int e = 1; e < (N < VEC ? N : VEC); e++)
                    if (ctx.valid(r, e) && !ctx.valid(r, e - 1))
                        f = v[r].get(e);
            }
            shift[r] = ctx.first(r, f);
        }
        row_sums<R, N>(v, st, ctx, p, shift);
    }

    /* Two all-reduces: the mean, then the sums around it. */
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
#pragma unroll
        for (int r = 0; r < R; r++)
            s[r] /= ctx.n;
        row_sums<R, N>(v, st, ctx, p, s);
    }

    /* The stream and loop kernels: one pass for the sums of a 16-bit row (shift: its first
     * element), two for a float32 row (the mean first, as the two-round form above), but one,
     * shifted by the first element, where a thread sums at most 16 of the row's elements
     * (nd_ctx_short_chains: the loop kernel), as the register kernels' threads of up to 16 do. */
    template <class Ctx>
    static __device__ __forceinline__ void stream_stats(State &st, const Ctx &ctx, const Params &p)
    {
        constexpr bool RAW = nd_norm_raw<Ctx::kElemBytes>::value;
        float shift = ctx.x0;
        if constexpr (!RAW && !nd_ctx_short_chains<Ctx>::value) {
            float m[1] = {0.0f};
            ctx.for_each([&](float x) { m[0] += x; });
            ctx.template allreduce<1>(m, nd_op_sum());
            shift = m[0] / ctx.n;
        }
        float s = 0.0f, sdd = 0.0f;
        ctx.for_each([&](float x) {
            const float d = x - shift;
            s += RAW ? x : d;
            sdd = fmaf(d, d, sdd);
        });
        float q[3];
        nd_op_norm_sums::put(q, (double)s);
        q[2] = sdd;
        ctx.template allreduce<3>(q, nd_op_norm_sums());
        finish(st, RAW ? 0.0f : shift, nd_op_norm_sums::get(q), shift, q[2], 1.0f / ctx.n,
               (double)ctx.cols, p.eps);
    }

    static __device__ __forceinline__ float out(const State &st, const Params &, float x, float g,
                                                float b)
    {
        /* (x - mean) * rstd as fma(x - m_hi, rstd, -m_lo * rstd): x - m_hi is exact for x near
         * the mean (Sterbenz) and otherwise off by 2^-24 of itself, so an output near zero is
         * as exact as its distance from the mean; three instructions a column */
        return fmaf(fmaf(x - st.m_hi, st.rstd, st.nlo), g, b);
    }
    static __device__ __forceinline__ float out_stream(const State &st, const Params &p, float x,
                                                       float g, float b)
    {
        return out(st, p, x, g, b);
    }
    static __device__ __forceinline__ void write_stats(const State &st, int64_t row, const Params &p)
    {
        if (p.mean)
            p.mean[row] = st.m_hi + st.m_lo;
        if (p.rstd)
            p.rstd[row] = st.rstd;
    }
};

#endif /* ND_LAYERNORM_CUH */
