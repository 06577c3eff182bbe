/*
 * softmax_axis.cu - softmax and log-softmax along an axis that is not the last one.
 *
 * The tensor is viewed as (outer, dim, inner), as in PaddlePaddle PR 32396 (seed 004): a column
 * (o, *, i) is dim elements `inner` apart, and the reduction runs along it. What we keep from the
 * seed: that decomposition, a block that spreads one column's rows over several threads and combines
 * their partial results in shared memory, and a grid sized from the device. Where we depart:
 *
 *   - threadIdx.x runs along the contiguous inner dimension (the seed put it on dim), in packs of up
 *     to 16 bytes (float32) or 8 bytes (16-bit: 4 elements, so a thread carries the same per-column
 *     state and rows as in float32 and more threads fit), so every row of a column tile is one
 *     coalesced access. When inner is small (a row of the tile is the whole inner extent) the
 *     block's rows are adjacent in memory, so a block still reads one contiguous slab however few
 *     elements a row has;
 *   - x is read once: each thread keeps its rows in registers (up to axis_policy::max_rows packs),
 *     takes each element's exp once against its own max, and the column's (max, sum) come from a
 *     max all-reduce and an all-reduce of the sums rescaled to that max (the merge rule of the
 *     online softmax, seed 001), not from a max pass, a sum pass and a write pass over x;
 *   - when outer * inner alone cannot fill the GPU, a column is also split across the blocks of a
 *     thread-block cluster (up to axis_policy::max_cluster) that combine their (max, sum) through
 *     distributed shared memory, so even outer = 1 uses every multiprocessor without a workspace or
 *     a second launch;
 *   - a short inner extent with enough outer indices (softmax_axis_slab): a block or cluster
 *     reads one outer index's whole slab as 16-byte packs, like a long row, each thread's packs
 *     all in the same few columns, and the columns' (max, sum) pairs are merged in shared memory;
 *   - long slabs that fit on chip (a short inner extent, few outer indices; softmax_axis_slab_res):
 *     one cooperative grid of one block an SM, each block's segment in its registers and shared
 *     memory (bulk copies), the segments' (max, sum) pairs exchanged through flag words in a
 *     small workspace, y written from chip: x read once, in one launch;
 *   - only when a column is too long for the registers of a whole cluster is it cut into segments
 *     of independent blocks: one launch writes each segment's (max, sum) to a small stream-ordered
 *     workspace, a second merges them and writes y, reading x a second time (mostly from L2); for
 *     a short inner extent the slab's own segments do this (softmax_axis_slab_stats / merge /
 *     apply).
 *     Two reads of x, not three, and the whole GPU busy however few columns there are.
 *
 * Arithmetic is in float32: exp as one ex2.approx (see nd_exp_le0 for why that meets the tolerance
 * rule), the accurate logf. Offsets are 64-bit. The 16-bit kernels issue about an instruction for
 * every byte they move (ncu: ~27 an element), so they spend few: a column's max in packed 16-bit
 * max over the words as loaded (half an instruction an element, not a widening and an fmaxf), and
 * softmax's output as one ex2.approx of fma(x - max, log2 e, -log2 sum) (nd_exp_div, not exp
 * times 1 / sum). H100, three alternating rounds, two calls (bench/results/axis_exp_div_h100.txt),
 * % of the copy ceiling: softmax 16-bit (512,896,4,12) 81.3-82.1 -> 83.3-85.1, (32,1000,56,56)
 * 83.5-83.9 -> 85.5-86.7, (128,128,16,16) 82.5-83.6 -> 84.7-84.9, (65536,8,128) 96.4-96.7 ->
 * 97.6-97.7; log_softmax 16-bit slabs +0.8 to +1.3; float32 and (8,32768,64) within 1.2. Tried
 * there too: float16 sums taking exp(x - max) as ex2.approx(fma(x, log2 e, -max log2 e)), the
 * rounding of max log2 e put right by one ex2 a column: float16 slabs lost 0.7-1.3 against the kept
 * form.
 *
 * Tried and rejected (H200, bench_gpu --suite axis, % of the same-run copy ceiling, softmax
 * float32 / float16; tables in bench/results/axis_variants_h200.txt):
 *   - A "group" path instead of clusters and the split path: each column tile cut into parts of
 *     one short-lived 128-thread block (8 per SM at 64 registers, or 6 at 80), rows in registers,
 *     blocks taking (tile, part) from an atomic ticket; a block publishes its (max, sum) to a
 *     workspace, the last of each sub-group of 32 parts merges them in a fixed order, the last
 *     sub-group raises the tile's flag, every block reads the merged stats and writes y. Correct
 *     and deterministic, but slower everywhere: (32,1000,56,56) 61 / 49 -> 47 / 46 at best (38 /
 *     37 at 64 registers, where the merge code spills 140 bytes a thread), (512,896,4,12)
 *     59 / 42 -> 40 / 40, (128,128,16,16) 73 / 61 -> 34 / 22 (the memset, ticket and merge
 *     latency on a 10 us problem), (8,32768,64) float16 36 -> 36. A block sits on its registers,
 *     with no loads in flight, through several L2 round trips (publish, fence, atomic, merge,
 *     flag, read back) until the tile's slowest part arrives; a cluster barrier is far shorter.
 *     Even with one part per column and no merge, (65536,8,128) fell from 96 / 78 to 58 / 31:
 *     its 32-pack x 4-row tiles left 2 rows (32 bytes) a thread where this plan keeps all 8 rows
 *     in one thread: bytes in flight per thread decide these shapes more than block shape does.
 *   - The split path in slabs of whole outer indices of 8-32 MB, so its second read of x hits
 *     L2: (8,32768,64) float32 46 -> 5 (8 MB), 15 (16 MB), 32 (32 MB). A slab has so few columns
 *     that the plan cuts them into hundreds of segments of a few rows a thread, and the slabs'
 *     launch pairs run one after another.
 *   - A shared-memory tile path (H100; bench/results/axis_tile_h100.txt): a block copies a whole
 *     column tile (all dim rows x W elements, W * sizeof(T) a multiple of 32 bytes dividing inner,
 *     tiles of up to 64 KiB) into shared memory with cp.async, takes the columns' max and sum
 *     from there and writes y 16 bytes a thread. Only float32 with short columns gained:
 *     (128,128,16,16) ax0 88 -> 92 (softmax), 82 -> 95 (log_softmax). Everything else lost:
 *     (32,1000,56,56) float32 78 -> 64, float16 58 -> 51; (512,896,4,12) float16 51 -> 39. The
 *     tiles' rows are 32-64 byte pieces far apart, where the register plan reads 256 bytes of a
 *     row at once, and a block computes nothing until its whole tile has arrived: ncu on the
 *     float16 (32,1000,56,56) run showed 3 blocks (37.5% occupancy) per SM, DRAM 44% busy.
 *     96 KiB tiles, or no shared-memory carveout request, changed nothing.
 *   - One all-reduce of (max, sum) pairs (op_online, as the slab kernel makes) in the register
 *     kernel's tree and cluster combine, instead of a max and a sum all-reduce (H100, three
 *     alternating rounds): (32,1000,56,56) float32 77.5 -> 81% of the copy ceiling and 16-bit
 *     (65536,8,128) softmax 90 -> 92, but (128,128,16,16) float32 88 -> 82 (log_softmax 82 -> 68),
 *     (65536,8,128) float32 98 -> 82-92 and (32,1000,56,56) 16-bit 58-60 -> 56-58.
 *
 * Where the H200's 16-bit gap is (probes, wrong results, timing only; bench/results/
 * probes_h200.txt): the one-pass slab kernel without its all-reduce (each thread writing y from
 * its own partials) ran (32,1000,56,56) and (512,896,4,12) at 90-95% of the copy ceiling where it
 * runs 70-72, (128,128,16,16) (no cluster) at 84-86; without its exps, 3-11 points more. The
 * cached kernel at (65536,8,128) ran 91-96 without its exps, but its float32 form fell 94 -> 68
 * with them gone, and one fma an exp fewer in its statistics (ex2(fma(x, log2 e, -c)), the
 * rounding of c taken out once a column) lost 4-17 points there with 8 bytes spilled
 * (bench/results/axis_exp_fma_h200.txt): it moves with its registers and code layout more than
 * with its exps. Tried on the slab reading (H200, three alternating rounds, bench/results/
 * axis_hold_h200.txt): fewer blocks a tile, each thread holding up to 7 more packs in shared
 * memory (cp.async.cg into its own slots before its register loads), (32,1000,56,56) in clusters
 * of 3 instead of 5, (512,896,4,12) of 2 instead of 4: every such shape lost 4.9-8.6 points.
 * Nsight Compute (H200, one launch each; bench/results/axis_exp_poly_h200.txt) put the MUFU pipe
 * at 51-54% of its peak over the 16-bit resident and slab kernels ((8,32768,64), (512,896,4,12)),
 * float32's resident kernel at 31%, with issue slots 46% / 38% busy and 1.9 / 0.9 eligible warps
 * a scheduler. Tried on that: one element's exp in every 4, 3 or 2 taken on the FMA pipes instead
 * (2^t as round(t) into the exponent field and a degree-5 polynomial for the rest, ten
 * instructions, within 1.7e-7 as ex2.approx is) in the 16-bit slab and resident kernels'
 * statistics and outputs. Every 16-bit shape it reaches lost, the more the more exps it moved:
 * 1 in 4, -1.1 to -7.3 points of the copy ceiling ((32,1000,56,56) softmax float16 81.7 ->
 * 74.4), 1 in 2, up to -11.1. The MUFU is not what these kernels wait on, and ten issue slots for
 * one is a worse trade. Nor is (512,896,4,12)'s last wave (ncu: 2048 blocks in clusters of 4,
 * 3 waves of 660 and one of 68): the one-pass slab kernel held to 4 blocks an SM (shared memory
 * padded; 3.9 waves of 528) moved it -0.3 to -3.0 points, (32,1000,56,56) 16-bit -2.8 to +0.6
 * and float32 -9, (128,128,16,16) -0.3 to +0.8; 3 blocks an SM lost 4-16 everywhere
 * (bench/results/axis_slab_blocks_h200.txt).
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <algorithm>

#include "cuda_common.cuh"

namespace cg = cooperative_groups;

/*
 * Compile-time knobs, so a tuning run can build bench/bench_gpu once per setting; the defaults are
 * the measured choice. On an H200 (one run, bench_gpu --suite axis), against 16-byte packs of
 * 8 halves kept as 8 registers with 2 blocks per SM: 16-bit softmax over (512,896,4,12) ax1 went
 * from 31% to 43% of the copy ceiling, (32,1000,56,56) ax1 34% -> 48%, (128,128,16,16) ax0
 * 47% -> 61%, (8,32768,64) ax1 24-29% -> 36%. Rows in 32-bit words alone changed nothing; 16
 * rows of 8-element packs (126 registers, spills) gained less (42%, 46%) and lost on the split
 * path; 8-byte packs with 2 blocks per SM (105 registers) gained about 4 points less.
 */
#ifndef ND_AXIS_WORDS /* 1: 16-bit rows sit in 32-bit words, two elements each (float32 measured
                         slower that way: 96% -> 85% at (65536,8,128), so it keeps its arrays) */
#define ND_AXIS_WORDS 1
#endif
#ifndef ND_AXIS_PACK16_BYTES /* widest access for the 16-bit dtypes: 8 bytes = 4 elements, so a
                                thread's per-column state (max, sum) is the size float32's is */
#define ND_AXIS_PACK16_BYTES 8
#endif
#ifndef ND_AXIS_MAX_ROWS_P8 /* rows a thread keeps when a pack holds 8 elements (16-byte 16-bit
                               packs only): 8 or 16 */
#define ND_AXIS_MAX_ROWS_P8 8
#endif
/* The slab paths (softmax_axis_slab, softmax_axis_slab_stats / merge / apply). */
#ifndef ND_AXIS_SLAB /* 0: never take the slab path (A/B runs) */
#define ND_AXIS_SLAB 1
#endif
#ifndef ND_AXIS_SLAB_THREADS /* a block: the largest multiple of lcm(32, q) up to this */
#define ND_AXIS_SLAB_THREADS 256
#endif
#ifndef ND_AXIS_SLAB_PACKS16 /* packs a thread keeps at most, 16-bit (float32: 8) */
#define ND_AXIS_SLAB_PACKS16 7
#endif
/* 16-bit one-pass slab kernels of up to this many packs a thread widen their packs once and keep
 * the floats (softmax its exps, log_softmax x) instead of widening again, and taking the exps
 * again, for the output (slab_kept_packs); 0: none. At 4 packs (32 floats where the words were
 * 16 registers) nothing spills (nvcc 13, 64 registers). H200, three alternating rounds in each of
 * two calls (bench/results/axis_keep_h200.txt), (128,128,16,16) ax0, the one bench shape at 4
 * packs, % of the copy ceiling, float16 / bfloat16: softmax 76.6-77.7 / 77.0-78.2 -> 80.3-81.3 /
 * 80.4-81.7, log_softmax 76.4-77.5 / 74.7-75.4 -> 78.2-79.4 / 76.0-77.0; every other shape
 * within the runs' spread. Static SASS of the float16 tiled softmax kernel: 24 MUFU (32 ex2
 * fewer, 8 more for the columns' factors), 32 HADD2 (widenings), 24 FFMA and 24 FADD fewer, 32
 * FMUL more. */
#ifndef ND_AXIS_SLAB_KEEP16
#define ND_AXIS_SLAB_KEEP16 4
#endif
/* and those of more packs keep this many of them so (the rest widened again; 0 as measured).
 * Keeping 1 of 7 spilled 20 bytes and lost: (32,1000,56,56) and (512,896,4,12) 16-bit -1.6 to
 * -3.3 points (axis_keep_h200.txt); 2 of 7 spilled 32-40 bytes (not run). */
#ifndef ND_AXIS_SLAB_KEEP_SOME16
#define ND_AXIS_SLAB_KEEP_SOME16 0
#endif
#ifndef ND_AXIS_TILE_MAX16 /* widest tile, in packs, where a 16-bit inner row is cut (0: none) */
#define ND_AXIS_TILE_MAX16 8
#endif
#ifndef ND_AXIS_TILE_MAX32 /* the same for float32 */
#define ND_AXIS_TILE_MAX32 16
#endif
/* The narrowest tile, in packs, where an inner row is cut, and the most blocks (a cluster) a slab
 * plan gives a tile before it cuts the tile narrower. H200, three alternating rounds, tiles cut
 * down to 1 pack so that a tile takes at most 1, 2 or 4 blocks (ncu had put 12% of the 16-bit
 * (32,1000,56,56) slab kernel's stall samples on its cluster barrier): every narrower tile lost,
 * the more the narrower, (32,1000,56,56) 16-bit 70-71% of the copy ceiling -> 64-66 (4 packs, 3
 * blocks), 57-59 (2 packs), 31 (1 pack); (512,896,4,12) in 2-3 blocks 43-47, float32 60-61
 * (bench/results/axis_clusters_h200.txt). */
#ifndef ND_AXIS_TILE_MIN
#define ND_AXIS_TILE_MIN 4
#endif
#ifndef ND_AXIS_SLAB_MAX_CLUSTER
#define ND_AXIS_SLAB_MAX_CLUSTER 8
#endif
#ifndef ND_AXIS_SLAB_SPLIT /* 0: never take the two-pass slab path (A/B runs) */
#define ND_AXIS_SLAB_SPLIT 1
#endif
#ifndef ND_AXIS_SLAB_SPLIT_WAVES /* segments: enough for this many waves of blocks */
#define ND_AXIS_SLAB_SPLIT_WAVES 2
#endif
#ifndef ND_AXIS_SLAB_UNROLL /* packs a thread loads at once in the two-pass slab kernels */
#define ND_AXIS_SLAB_UNROLL 8
#endif
/* The two-pass slab path: the statistics pass loads x plainly (1) or streaming (0, ld.global.cs),
 * and the apply pass walks the segments last to first (1) or first to last (0); see
 * softmax_axis_slab_stats. */
#ifndef ND_AXIS_SLAB_STATS_PLAIN
#define ND_AXIS_SLAB_STATS_PLAIN 1
#endif
#ifndef ND_AXIS_SLAB_APPLY_REVERSE
#define ND_AXIS_SLAB_APPLY_REVERSE 1
#endif
/* The resident slab path (softmax_axis_slab_res). */
#ifndef ND_AXIS_RES /* 0: never take it (A/B runs) */
#define ND_AXIS_RES 1
#endif
#ifndef ND_AXIS_RES_REG_ROUNDS /* rounds of a segment a thread keeps in registers, at most */
#define ND_AXIS_RES_REG_ROUNDS 4
#endif
#ifndef ND_AXIS_RES_UNROLL /* streamed packs a thread loads at once, float32 */
#define ND_AXIS_RES_UNROLL 4
#endif
#ifndef ND_AXIS_RES_UNROLL16 /* the same, 16-bit (4 spilled 16 bytes at 64 registers, nvcc 13) */
#define ND_AXIS_RES_UNROLL16 2
#endif
#ifndef ND_AXIS_RES_STREAM8 /* streamed rounds a segment may have, in eighths of its resident */
#define ND_AXIS_RES_STREAM8 8
#endif
#ifndef ND_AXIS_RES_BATCH /* rounds a thread folds into its pairs at once (one rescale each) */
#define ND_AXIS_RES_BATCH 2
#endif
/* Bulk copies a block of the resident kernel keeps in flight (0: all of them at its start): W at
 * its start, then up to W + ND_AXIS_RES_BATCH rounds past the one it folds. H200, against 6 (the
 * H100's pick), (8,32768,64) ax1, % of the same-run copy ceiling (bench/results/
 * axis_res_window_h200.txt): 4, six alternating rounds, 16-bit 64.5-65.0 -> 65.2-65.9 (every round
 * above every round of 6), float32 70.2-71.2 -> 70.4-71.6; in an earlier call, three rounds,
 * medians: 4 moved 16-bit +0.1 to +1.2, 3 -0.4 to +0.2, 8 -2.3 to -2.7 (12 had lost 7,
 * axis_knobs_h200.txt), and folds of 4 rounds (ND_AXIS_RES_BATCH 4) -0.7 to +0.3, float32 -0.8
 * to -1.0. */
#ifndef ND_AXIS_RES_WINDOW
#define ND_AXIS_RES_WINDOW 4
#endif
/* Which resident launches empty their workspace themselves (res_clears): 0 none, 1 16-bit,
 * 2 all; the others are preceded by a memset of it. */
#ifndef ND_AXIS_RES_CLEAR
#define ND_AXIS_RES_CLEAR 1
#endif
/* Where a self-clearing resident launch (res_clears) waits at its grid barrier: 1 after its
 * statistics, before it publishes; 0 once its register rounds are folded. 1 lost 2-2.5 points
 * at (8,32768,64) 16-bit on an H200: the statistics end 4 us sooner, but the barrier then takes
 * 3-5 us past the last arrival (bench/results/res_phases_h200.txt). Nor does the barrier hold the
 * load phase back: split in two (a block arrives once its words are empty, before its first fold,
 * and waits only once it has asked for its last bulk copy; bench/res_split_sync.patch) 16-bit lost
 * 2.2-3.5 points in every round, and wider windows under it more (bench/results/
 * res_split_sync_h200.txt): it paces the blocks whose data comes first, and the slab waits for
 * its slowest segment either way. */
#ifndef ND_AXIS_RES_SYNC_LATE
#define ND_AXIS_RES_SYNC_LATE 0
#endif
#ifndef ND_AXIS_KEEP16_64 /* exps a thread keeps, 16-bit column kernels of 512+ threads */
#define ND_AXIS_KEEP16_64 16
#endif
#ifndef ND_AXIS_SPLIT_UNROLL
#define ND_AXIS_SPLIT_UNROLL 4
#endif
/* The one-pass slab kernel in clusters: leave with a relaxed arrive after the last remote read
 * and a wait at the end (1), or with cluster.sync() at the end (0). See slab_allreduce. */
#ifndef ND_AXIS_SLAB_LEAVE_SPLIT
#define ND_AXIS_SLAB_LEAVE_SPLIT 1
#endif
/* slab_allreduce, 16-bit slabs: folds a column's partials in every thread, then in one a column
 * (1), or all of them in one thread a column (0); reads every rank's pairs of a column before
 * merging them (1) or one rank at a time (0). float32 slabs take 0 and 0: they spilled 48-96
 * bytes with either (nvcc 13, 8 packs at 64 registers) and lost up to 13 points (H100). */
#ifndef ND_AXIS_SLAB_COMBINE_PAR
#define ND_AXIS_SLAB_COMBINE_PAR 1
#endif
#ifndef ND_AXIS_SLAB_RANK_LOADS
#define ND_AXIS_SLAB_RANK_LOADS 1
#endif
/* slab_allreduce, 16-bit slabs: each thread folds its VEC pairs of a column at once (1: the
 * largest max, then every sum scaled to it, one exp a pair and all of them independent;
 * online_fold), or as a tree of pairwise merges (0: two exps a merge, three merges deep). H200,
 * float16, three alternating rounds (bench/results/axis_fold_h200.txt), % of the copy ceiling:
 * (128,128,16,16) 74.7 / 76.0 -> 76.7 / 77.2 (log_softmax / softmax), (32,1000,56,56) +0.2 /
 * +0.9, (512,896,4,12) +0.4 / +0.5. The same fold for the cluster's ranks (every rank's pair,
 * then one scaling a rank) lost 4-5 points at (32,1000,56,56) (clusters of 5; not understood)
 * and gained 0.8-1 at (512,896,4,12) (clusters of 4); for the L partials of a column that one
 * thread folds after the barrier (two passes over shared memory, maxes then sums), up to -3
 * at (32,1000,56,56) with the thread fold. Both stay pairwise merges. */
#ifndef ND_AXIS_SLAB_FOLD_NARY
#define ND_AXIS_SLAB_FOLD_NARY 1
#endif
/* The one-pass slab kernel: each column's output factor (log(sum) for log_softmax, -log2(sum)
 * for softmax, nd_exp_div_factor) taken once a column in slab_allreduce (its FIN), or by every
 * thread for each of its VEC columns after it, the same for every thread of a pack-column: at
 * 16-bit, 8 accurate logfs a thread between its loads and its first store. 1: once for 16-bit
 * log_softmax (as measured); 0: never; 2: every slab kernel (A/B runs). H200, four alternating
 * rounds against 0, % of the copy ceiling, float16 / bfloat16 log_softmax: (128,128,16,16) ax0
 * 79.0-79.7 / 76.8-77.0 -> 82.2-82.8 / 80.9-81.3 (one block a slab: col's pass and its barrier),
 * (512,896,4,12) ax1 76.8-77.9 / 77.2-77.5 -> 80.0-80.4 / 79.4-80.1, (32,1000,56,56) ax1 +1.0 /
 * +1.6 on median (clusters: in fin, no barrier more). Softmax's lg2.approx and float32's 4
 * logfs gained nothing that held, and in one block lost 0.3-2.2
 * (bench/results/axis_fin_once_h200.txt). */
#ifndef ND_AXIS_SLAB_FIN_ONCE
#define ND_AXIS_SLAB_FIN_ONCE 1
#endif
/* The two-pass slab path (softmax_axis_slab_stats / merge) keeps slab_allreduce's old form and
 * the branching merge (1: its code as before these knobs), or takes the one-pass kernel's (0).
 * H100, three alternating rounds: with the one-pass kernel's changes (8,32768,64) 16-bit fell
 * from 60.2-60.6% of the copy ceiling to 56.6-57.3, and to 55.2-55.6 with the old fold and merge
 * but the new cluster code, which the statistics kernel carries without ever running it (it
 * changed the kernel's registers); so the statistics kernel compiles to exactly its old code
 * (slab_allreduce's TUNED false), measured back at 59.4-60.9
 * (bench/results/axis_slab_sync_h100.txt). */
#ifndef ND_AXIS_SLAB_SPLIT_OLD_FOLD
#define ND_AXIS_SLAB_SPLIT_OLD_FOLD 1
#endif
/* The cluster barrier before the remote reads, after the block barrier that follows the writes
 * of col: thread 0 issues fence.acq_rel.cluster and every thread arrives relaxed (1), or every
 * thread arrives with release semantics (0, cluster.sync()). Tried: warp 0 arriving with release
 * and the other warps relaxed, about as fast, but its bfloat16 7-pack tiled kernel spilled 36 / 52
 * bytes and ran (32,1000,56,56) at 73% of the copy ceiling against 83
 * (bench/results/axis_slab_sync_h100.txt). */
#ifndef ND_AXIS_SLAB_ONE_RELEASE
#define ND_AXIS_SLAB_ONE_RELEASE 1
#endif
/* L2 prefetch on a fast device (peak DRAM bandwidth >= ND_AXIS_PF_MIN_GBPS: an H200, not an
 * H100 SXM, where it was not measured). Thread 0 of a block asks L2 for the x that the block
 * PF / 8 of a device-full of blocks later will read (one cp.async.bulk.prefetch.L2, issued before
 * the block's own loads, so that the DRAM has reads queued while blocks reduce and wait at their
 * barriers), in kernels of their own (template PF):
 *   ND_AXIS_CACHED_PF  the 16-bit register-cached kernel where each block holds whole slabs (one
 *                      segment of dim, one chunk of inner: consecutive outer indices, one piece
 *                      of x), as (65536,8,128) ax1;
 *   ND_AXIS_SLAB_PF    the 16-bit one-pass slab kernel cut into tiles, as (32,1000,56,56) ax1.
 *                      A unit (a tile, one cluster) is taken as an equal consecutive piece of x,
 *                      each block of the cluster asking for its share: not the tile's own columns
 *                      but, over a slab's tiles (consecutive units), the whole slab; the distance
 *                      is at least a slab's tiles, so that a slab is asked for whole before its
 *                      first tile runs.
 * H200, three alternating rounds in each of two calls, % of the same-run copy ceiling
 * (bench/results/axis_pf_h200.txt), base -> 4 eighths: (65536,8,128) softmax float16 / bfloat16
 * 79.5 / 80.9 -> 81.1 / 81.9 and 79.4 / 80.8 -> 80.6 / 81.8, log_softmax 86.0 / 87.2 -> 88.1 /
 * 90.0 and 85.0 / 86.4 -> 86.8 / 91.0; (32,1000,56,56) 16-bit 69.4-71.0 -> 71.0-72.0 and
 * 69.6-71.1 -> 71.0-71.9. 8 eighths did less (call 1), 2 about as well (call 2). Not taken:
 * whole slabs, (512,896,4,12) 16-bit 71 -> 66-67; float32, whose kernels spilled 12-48 bytes
 * more with the code and lost 3-25 points ((65536,8,128) 94-96 -> 90-91); a grid of one wave
 * ((128,128,16,16) ax0) has no block later to ask for. 0: never. */
#ifndef ND_AXIS_PF_MIN_GBPS
#define ND_AXIS_PF_MIN_GBPS 4000.0
#endif
#ifndef ND_AXIS_CACHED_PF
#define ND_AXIS_CACHED_PF 4
#endif
#ifndef ND_AXIS_SLAB_PF
#define ND_AXIS_SLAB_PF 4
#endif
#ifndef ND_AXIS_MINB_16BIT /* blocks per SM the 16-bit 4-element 16-row kernel must fit: 3 caps it
                              at 80 registers (a few spill) for 1.5x the rows in flight of 2 */
#define ND_AXIS_MINB_16BIT 3
#endif

namespace {

/* Tuned numbers for this op, in one place. */
struct axis_policy {
    /* Rows a thread keeps in registers (packs of up to 16 bytes); above this the column is split
     * over more threads, then over a cluster, then cut into segments of independent blocks. */
    static constexpr int max_rows = 16;
    /* Rows a thread prefers to keep when the GPU is full anyway: more loads in flight per thread
     * than this buys little and costs occupancy. */
    static constexpr int pref_rows = 16;
    /* Threads the grid should hold at least, per multiprocessor, before we split columns further. */
    static constexpr int fill_threads_per_sm = 1024;
    /* Threads per block we aim for. */
    static constexpr int block_threads = 256;
    /* Most blocks a column is spread over (portable cluster size). */
    static constexpr int max_cluster = 8;
    /* The split path (columns too long for a cluster): threads per block, rows loaded before
     * use, and about how many rows each thread walks per segment. */
    static constexpr int split_threads = 256;
    static constexpr int split_unroll = ND_AXIS_SPLIT_UNROLL;
    static constexpr int split_rows = 32;
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
    int pf_blocks;   /* the PF kernel: blocks ahead whose x to ask L2 for (launch_cached) */
};

/* ------------------------------------------------------------------------------------------- */
/* kernels                                                                                       */
/* ------------------------------------------------------------------------------------------- */

/*
 * One pack of P elements of a row, as a thread keeps it. 16-bit packs stay in 32-bit words
 * (nd_regrow: two elements per register, widened on use) and stores round pairs with one
 * cvt.rn.f16x2 / bf16x2; float32 packs (and odd 16-bit ones) are an array of T.
 */
template <class T, int P, bool WORDS = ND_AXIS_WORDS && sizeof(T) == 2 && P % 2 == 0>
struct axis_pack {
    typedef typename nd_word<P * sizeof(T)>::type W;
    nd_regrow<T, P> r;
    __device__ __forceinline__ void load(const T *p)
    {
        W u = *reinterpret_cast<const W *>(p);
        static_assert(sizeof u == sizeof r.w, "a pack is whole words");
        memcpy(r.w, &u, sizeof u);
    }
    __device__ __forceinline__ float get(int j) const { return r.get(j); }
    /* m[j] = the largest element j of packs v[k], k < n (-inf when n is 0): a column's max over
     * the rows a thread holds, in packed 16-bit max (half an instruction an element where
     * widening each and taking fmaxf is two) */
    template <int R>
    static __device__ __forceinline__ void rows_max(const axis_pack (&v)[R], int n, float (&m)[P])
    {
        typedef nd_regrow<T, P> RG;
#pragma unroll
        for (int q = 0; q < RG::kWords; q++) {
            uint32_t a = v[0].r.w[q];
#pragma unroll
            for (int k = 1; k < R; k++)
                if (k < n)
                    a = RG::max2(a, v[k].r.w[q]);
            m[2 * q] = n > 0 ? RG::half_of(a, 0) : -INFINITY;
            m[2 * q + 1] = n > 0 ? RG::half_of(a, 1) : -INFINITY;
        }
    }
    /* Between passes over the row: the words look rewritten, so the compiler widens them again
     * rather than keeping widened copies live. A guard, not a measured gain: ptxas reported the
     * same register counts with and without it (the tuned build has it). */
    __device__ __forceinline__ void fence()
    {
#pragma unroll
        for (int i = 0; i < nd_regrow<T, P>::kWords; i++)
            asm volatile("" : "+r"(r.w[i]));
    }
    static __device__ __forceinline__ void store(T *p, const float (&o)[P])
    {
        constexpr int K = P * (int)sizeof(T) / 4;
        uint32_t w[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            w[i] = sizeof(T) == 4 ? __float_as_uint(o[i]) : nd_pack2<T>(o[2 * i], o[2 * i + 1]);
        W u;
        memcpy(&u, w, sizeof u);
        *reinterpret_cast<W *>(p) = u;
    }
};

template <class T, int P> struct axis_pack<T, P, false> {
    nd_pack<T, P> v;
    __device__ __forceinline__ void load(const T *p) { v = *reinterpret_cast<const nd_pack<T, P> *>(p); }
    __device__ __forceinline__ float get(int j) const { return nd_to_float(v.v[j]); }
    template <int R>
    static __device__ __forceinline__ void rows_max(const axis_pack (&v)[R], int n, float (&m)[P])
    {
#pragma unroll
        for (int j = 0; j < P; j++) {
            m[j] = -INFINITY;
#pragma unroll
            for (int k = 0; k < R; k++)
                if (k < n)
                    m[j] = fmaxf(m[j], v[k].get(j));
        }
    }
    __device__ __forceinline__ void fence() {}
    static __device__ __forceinline__ void store(T *p, const float (&o)[P])
    {
        nd_pack<T, P> out;
#pragma unroll
        for (int j = 0; j < P; j++)
            out.v[j] = nd_from_float<T>(o[j]);
        *reinterpret_cast<nd_pack<T, P> *>(p) = out;
    }
};

struct op_max {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
/* a NaN wins: a segment whose only numbers are masked scores and a NaN has a NaN max, so the
 * merge of segments, which skips those of max -inf, keeps its NaN sum */
struct op_max_nan {
    __device__ __forceinline__ float operator()(float a, float b) const { return nd_fmax_nan(a, b); }
};
struct op_add {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
/* (max, sum of exp(x - max)) pairs, combined in place by the online softmax's merge rule
 * (seed 001); a part with no elements is (-inf, 0). NAN_WINS: a NaN max wins, so a part whose
 * max is NaN (a NaN among masked scores) carries its NaN sum on even into a merge that skips
 * parts of max -inf. */
template <bool SELECT = ND_MERGE_SELECT != 0, bool NAN_WINS = false> struct op_online_t {
    static constexpr int K = 2;
    __device__ __forceinline__ void operator()(float (&a)[2], const float (&b)[2]) const
    {
        const float m = NAN_WINS ? nd_fmax_nan(a[0], b[0]) : fmaxf(a[0], b[0]);
        if constexpr (SELECT) { /* as nd_op_softmax_pair: a select, so independent merges overlap */
            const float r = nd_exp_ref(m);
            a[1] = a[1] * nd_exp_le0(a[0] - r) + b[1] * nd_exp_le0(b[0] - r);
        } else {
            if (m == -INFINITY)
                return;
            a[1] = a[1] * nd_exp_le0(a[0] - m) + b[1] * nd_exp_le0(b[0] - m);
        }
        a[0] = m;
    }
};
typedef op_online_t<> op_online;

/* Pairs p[0 .. N) of op_online folded into p[0] at once: (M, sum of s_i exp(m_i - M) in order of
 * i), M the largest m_i, or the sums taken against 0 where every m_i is -inf (they are all 0,
 * as op_online's merge keeps them). A NaN sum carries on, as in op_online. One exp a pair, the
 * N of them independent, where N - 1 pairwise merges take two each, a tree log2 N deep. */
template <int N> __device__ __forceinline__ void online_fold(float (&p)[N][2])
{
    float M = p[0][0];
#pragma unroll
    for (int i = 1; i < N; i++)
        M = fmaxf(M, p[i][0]);
    const float r = nd_exp_ref(M);
    float S = p[0][1] * nd_exp_le0(p[0][0] - r);
#pragma unroll
    for (int i = 1; i < N; i++)
        S = fmaf(p[i][1], nd_exp_le0(p[i][0] - r), S);
    p[0][0] = M;
    p[0][1] = S;
}
/* The two-pass slab path's merges (softmax_axis_slab_stats / merge) */
typedef op_online_t<!ND_AXIS_SLAB_SPLIT_OLD_FOLD && ND_MERGE_SELECT, true> op_online_split;

/*
 * All-reduce P floats over the threads that share a column: over threadIdx.y through shared memory
 * (a tree of log2(blockDim.y) steps), then over the blocks of the cluster through distributed
 * shared memory. `red` holds blockDim.x * blockDim.y * blockDim.z * P floats; two consecutive
 * calls must use different buffers (another block may still read the first one's results). On
 * return every thread of the column holds the same bits.
 */
template <int P, class Op>
__device__ __forceinline__ void column_allreduce(float (&v)[P], float *red, int cluster, Op op)
{
    /* red is P planes of one float per thread ([j][tz][ty][tx]), so a warp's accesses to a plane
     * fall in 32 different banks */
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int TX = blockDim.x, TY = blockDim.y;
    const size_t nt = (size_t)TX * TY * blockDim.z;
    float *mine = red + (size_t)(tz * TY + ty) * TX + tx;
    float *head = red + (size_t)(tz * TY) * TX + tx;
    if (TY > 1 || cluster > 1) {
#pragma unroll
        for (int j = 0; j < P; j++)
            mine[j * nt] = v[j];
    }
    if (TY > 1) {
        int half = 1;
        while (half < TY)
            half <<= 1;
        for (half >>= 1; half >= 1; half >>= 1) {
            __syncthreads();
            if (ty < half && ty + half < TY) {
                const float *other = mine + (size_t)half * TX;
#pragma unroll
                for (int j = 0; j < P; j++) {
                    v[j] = op(v[j], other[j * nt]);
                    mine[j * nt] = v[j];
                }
            }
        }
        __syncthreads();
    }
    if (cluster > 1) {
        cg::cluster_group cl = cg::this_cluster();
        cl.sync(); /* every block's result sits in its red[.][tz][0][tx] */
        const float *r0 = cl.map_shared_rank(head, 0);
#pragma unroll
        for (int j = 0; j < P; j++)
            v[j] = r0[j * nt];
        for (int r = 1; r < cluster; r++) {
            const float *rr = cl.map_shared_rank(head, r);
#pragma unroll
            for (int j = 0; j < P; j++)
                v[j] = op(v[j], rr[j * nt]);
        }
    } else if (TY > 1) {
#pragma unroll
        for (int j = 0; j < P; j++)
            v[j] = head[j * nt];
    }
}

/*
 * The register-cached kernel. One thread: pack-column pk of outer index o, rows
 * d0 + ty + k * blockDim.y (k < R) of the block's share [d0, d1) of the column, all kept in
 * registers, so x is read once. Each element's exp is taken once, against the thread's own max;
 * softmax keeps those exps for the output when they fit (KEEP), otherwise takes them again.
 *
 * Registers: 64 (two blocks of 512 or one of 1024 per SM) except where the rows kept would spill
 * badly there (16 rows, or 8 rows of 8 two-byte elements), which get 128 in blocks of 256, or 80
 * (ND_AXIS_MINB_16BIT = 3 blocks) for 16 rows of 4 two-byte elements.
 */
template <typename T, int P, int R, int MAXT, bool LOG, bool PF = false>
__global__ void __launch_bounds__(MAXT, (R >= 16 || (P >= 8 && R >= 8))
                                            ? (sizeof(T) == 2 && P <= 4 ? ND_AXIS_MINB_16BIT : 2)
                                            : 1024 / MAXT)
softmax_axis_kernel(const T *__restrict__ x, T *__restrict__ y, axis_geom g)
{
    /* softmax keeps its exps for the output where they fit: up to 32 a thread, 16 in 16-bit
     * kernels capped at 64 registers (512+ threads), where 32 (R = 8, P = 4) spilled 48 bytes
     * and ran (65536,8,128) ax1 float16 / bfloat16 at 90.2 / 90.4% of the copy ceiling against
     * 96.7 / 96.4 taking the exps twice (H100, three alternating rounds; the other axis shapes
     * within 0.5: bench/results/axis_keep_h100.txt) */
    constexpr bool KEEP = !LOG && R * P <= (sizeof(T) == 2 && MAXT >= 512 ? ND_AXIS_KEEP16_64 : 32);
    extern __shared__ float red[];
    using pack = axis_pack<T, P>;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int TX = blockDim.x, TY = blockDim.y;

    /* The divisions below are taken only where they are needed (a uniform branch each): a
     * column tile's outer index where a block row is not a whole inner extent, a thread's rows
     * where it has fewer than R. Every thread of the 16-bit (65536,8,128) kernel made both,
     * 64-bit, for 32 elements. */
    const int64_t grp = (int64_t)blockIdx.x * blockDim.z + threadIdx.z;
    int64_t o = g.chunks == 1 ? grp : grp / g.chunks;
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

    int nrows = 0;
    if (live && d0 < d1)
        nrows = d1 - d0 >= (int64_t)R * TY ? R : (int)((d1 - d0 + TY - 1) / TY);
    if constexpr (PF) {
        /* whole slabs a block (launch_cached): block b's x is one piece, blockDim.z slabs long;
         * asked for before this block's loads (after them, their registers held the address) */
        const int64_t b = blockIdx.x + (int64_t)g.pf_blocks, bz = blockDim.z;
        if ((tx | ty | threadIdx.z) == 0 && b * bz < g.groups) {
            const int64_t slab = g.dim * g.inner;
            nd_prefetch_l2(x + b * bz * slab,
                           (unsigned)(min(bz, g.groups - b * bz) * slab * (int64_t)sizeof(T)));
        }
    }
    pack v[R];
#pragma unroll
    for (int k = 0; k < R; k++)
        if (k < nrows)
            v[k].load(xp + k * step);

    float m[P], s[P], ml[P], e[KEEP ? R : 1][P];
    pack::rows_max(v, nrows, m);
    /* the exps against this thread's max, or against 0 where its rows of the column are all
     * -inf (masked, or no rows): each exp(-inf - 0) = 0, not exp(-inf - -inf), and the sum 0 */
#pragma unroll
    for (int j = 0; j < P; j++) {
        s[j] = 0.0f;
        ml[j] = nd_exp_ref(m[j]);
    }
#pragma unroll
    for (int k = 0; k < R; k++)
        v[k].fence();
    /* the exps kept for the output row by row, the sums alone column by column (the order of
     * the measured build; each column adds its rows in the same order either way) */
    if constexpr (KEEP) {
#pragma unroll
        for (int k = 0; k < R; k++)
            if (k < nrows)
#pragma unroll
                for (int j = 0; j < P; j++) {
                    const float t = nd_exp_le0(v[k].get(j) - ml[j]);
                    e[k][j] = t;
                    s[j] += t;
                }
    } else {
#pragma unroll
        for (int j = 0; j < P; j++)
#pragma unroll
            for (int k = 0; k < R; k++)
                if (k < nrows)
                    s[j] += nd_exp_le0(v[k].get(j) - ml[j]);
    }
    /* the column's (max, sum): two cheap all-reduces, the sums rescaled to the column max */
    const size_t half = (size_t)blockDim.x * blockDim.y * blockDim.z * P;
    column_allreduce<P>(m, red, g.cluster, op_max());
    float scale[P];
#pragma unroll
    for (int j = 0; j < P; j++) {
        scale[j] = s[j] == 0.0f ? 0.0f : nd_exp_le0(ml[j] - m[j]); /* s >= 1 unless masked */
        s[j] *= scale[j];
    }
    column_allreduce<P>(s, red + half, g.cluster, op_add());
#pragma unroll
    for (int k = 0; k < R; k++)
        v[k].fence();
    if (g.cluster > 1)
        cg::this_cluster().sync(); /* no block leaves while another still reads its buffers */
#pragma unroll
    for (int j = 0; j < P; j++)
        s[j] = LOG ? logf(s[j]) : KEEP ? scale[j] / s[j] : nd_exp_div_factor(s[j]);
#pragma unroll
    for (int k = 0; k < R; k++)
        if (k < nrows) {
            float out[P];
#pragma unroll
            for (int j = 0; j < P; j++) {
                float d = v[k].get(j) - m[j];
                if constexpr (LOG)
                    out[j] = d - s[j];
                else if constexpr (KEEP)
                    out[j] = e[k][j] * s[j];
                else
                    out[j] = nd_exp_div(d, s[j]);
            }
            pack::store(yp + k * step, out);
        }
}

/*
 * Long columns with few of them (say outer 8, dim 32768, inner 64): too long for the registers of
 * a cluster, and too few to fill the GPU if each went to one cluster. The column is cut into
 * gridDim.y segments of independent blocks: softmax_axis_stats writes each segment's (max, sum)
 * to a workspace, softmax_axis_apply merges a column's segments and writes y, reading x a second
 * time (from L2 when x fits there).
 */
template <typename T, int P>
__global__ void __launch_bounds__(axis_policy::split_threads)
softmax_axis_stats(const T *__restrict__ x, float2 *__restrict__ ws, axis_geom g)
{
    extern __shared__ float red[];
    using pack = nd_pack<T, P>;
    constexpr int U = axis_policy::split_unroll;
    const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
    int64_t o = (int64_t)blockIdx.x / g.chunks;
    const int64_t pk = ((int64_t)blockIdx.x - o * g.chunks) * TX + tx;
    const bool live = pk < g.packs;
    const int64_t d0 = (int64_t)blockIdx.y * g.rows_per_rank + ty;
    const int64_t d1 = min(g.dim, (int64_t)(blockIdx.y + 1) * g.rows_per_rank);
    const int64_t n = (live && d0 < d1) ? (d1 - d0 + TY - 1) / TY : 0;
    const int64_t step = (int64_t)TY * g.inner;
    const T *xp = x + (o * g.dim + d0) * g.inner + (live ? pk * P : 0);

    float m[P], s[P];
#pragma unroll
    for (int j = 0; j < P; j++) {
        m[j] = -INFINITY;
        s[j] = 0.0f;
    }
    for (int64_t k = 0; k < n; k += U) {
        pack v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k + u < n)
                v[u] = *reinterpret_cast<const pack *>(xp + (k + u) * step);
#pragma unroll
        for (int j = 0; j < P; j++) {
            float mx = m[j]; /* a NaN wins: a segment of -inf and NaN must not pass as masked */
#pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u < n)
                    mx = nd_fmax_nan(mx, nd_to_float(v[u].v[j]));
            const float r = nd_exp_ref(mx);
            float acc = m[j] == -INFINITY ? 0.0f : s[j] * nd_exp_le0(m[j] - r);
#pragma unroll
            for (int u = 0; u < U; u++)
                if (k + u < n)
                    acc += nd_exp_le0(nd_to_float(v[u].v[j]) - r);
            m[j] = mx;
            s[j] = acc;
        }
    }
    float ml[P];
#pragma unroll
    for (int j = 0; j < P; j++)
        ml[j] = m[j];
    column_allreduce<P>(m, red, 1, op_max_nan());
#pragma unroll
    for (int j = 0; j < P; j++)
        s[j] = ml[j] == -INFINITY ? 0.0f : s[j] * nd_exp_le0(ml[j] - m[j]);
    column_allreduce<P>(s, red + (size_t)TX * TY * P, 1, op_add());
    if (ty == 0 && live) {
        float2 *w = ws + ((int64_t)blockIdx.y * g.groups * TX + (int64_t)blockIdx.x * TX + tx) * P;
#pragma unroll
        for (int j = 0; j < P; j++)
            w[j] = make_float2(m[j], s[j]);
    }
}

template <typename T, int P, bool LOG>
__global__ void __launch_bounds__(axis_policy::split_threads)
softmax_axis_apply(const T *__restrict__ x, T *__restrict__ y, const float2 *__restrict__ ws,
                   axis_geom g)
{
    extern __shared__ float red[];
    using pack = nd_pack<T, P>;
    constexpr int U = axis_policy::split_unroll;
    const int tx = threadIdx.x, ty = threadIdx.y, TX = blockDim.x, TY = blockDim.y;
    int64_t o = (int64_t)blockIdx.x / g.chunks;
    const int64_t pk = ((int64_t)blockIdx.x - o * g.chunks) * TX + tx;
    const bool live = pk < g.packs;
    const int nseg = gridDim.y;

    /* merge the column's segments: thread ty takes segments ty, ty + TY, ... */
    float m[P], s[P];
#pragma unroll
    for (int j = 0; j < P; j++) {
        m[j] = -INFINITY;
        s[j] = 0.0f;
    }
    if (live)
        for (int seg = ty; seg < nseg; seg += TY) {
            const float2 *w = ws + ((int64_t)seg * g.groups * TX + (int64_t)blockIdx.x * TX + tx) * P;
#pragma unroll
            for (int j = 0; j < P; j++) {
                /* a segment's NaN max carries its NaN sum (op_max_nan in softmax_axis_stats) */
                const float2 t = w[j];
                float a[2] = {m[j], s[j]};
                op_online_t<false, true>()(a, {t.x, t.y});
                m[j] = a[0];
                s[j] = a[1];
            }
        }
    float ml[P];
#pragma unroll
    for (int j = 0; j < P; j++)
        ml[j] = m[j];
    column_allreduce<P>(m, red, 1, op_max());
#pragma unroll
    for (int j = 0; j < P; j++)
        s[j] = ml[j] == -INFINITY ? 0.0f : s[j] * nd_exp_le0(ml[j] - m[j]);
    column_allreduce<P>(s, red + (size_t)TX * TY * P, 1, op_add());
#pragma unroll
    for (int j = 0; j < P; j++)
        s[j] = LOG ? logf(s[j]) : nd_exp_div_factor(s[j]);

    const int64_t d0 = (int64_t)blockIdx.y * g.rows_per_rank + ty;
    const int64_t d1 = min(g.dim, (int64_t)(blockIdx.y + 1) * g.rows_per_rank);
    const int64_t n = (live && d0 < d1) ? (d1 - d0 + TY - 1) / TY : 0;
    const int64_t step = (int64_t)TY * g.inner;
    const int64_t off = (o * g.dim + d0) * g.inner + (live ? pk * P : 0);
    const T *xp = x + off;
    T *yp = y + off;
    for (int64_t k = 0; k < n; k += U) {
        pack v[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k + u < n)
                v[u] = *reinterpret_cast<const pack *>(xp + (k + u) * step);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (k + u < n) {
                pack out;
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float d = nd_to_float(v[u].v[j]) - m[j];
                    out.v[j] = nd_from_float<T>(LOG ? d - s[j] : nd_exp_div(d, s[j]));
                }
                *reinterpret_cast<pack *>(yp + (k + u) * step) = out;
            }
    }
}

/*
 * The slab kernel: a short inner extent and a column long enough to fill a thread, as softmax
 * over axis 1 of (512,896,4,12) (inner 48, dim 896). The column plan above gives each thread a
 * pack-column of 4 elements and rows `inner` apart, which for such shapes means 8-byte loads,
 * blocks of odd shape (12 x 19 threads there) and per-thread state for only 4 columns. Here one
 * outer index's slab (dim * inner elements, contiguous) is read like a row of the row engine's
 * block kernel: 16-byte packs, thread g of a block (or cluster) of G threads holding packs
 * g, g + G, g + 2G, ... of the slab. A pack holds VEC columns of one inner row, and the slab's
 * packs cycle through the q = inner / VEC packs of an inner row, so with G a multiple of q every
 * pack of thread g lies in the same VEC columns (pack-column g % q): the thread keeps (max, sum)
 * for those VEC columns, and a column's all-reduce is over the G / q threads that share it, in
 * shared memory (slab_allreduce), then over the cluster's blocks through distributed shared
 * memory. x is read once, with accesses as wide and as contiguous as a copy's.
 *
 * An inner row wider than max_q packs (or whose lcm(32, q) is too large) is cut into tiles of
 * up to slab_policy::tile_max packs, the widest whose rows a cluster holds, and each tile's dim
 * rows of q packs are taken like a slab of their own: one block or cluster a tile, a warp
 * reading 4 rows of a 128-byte tile where the column plan read 2 rows of 128 bytes with 8-byte
 * loads.
 *
 * Measured on an H100, bench_gpu --suite axis, three alternating rounds a build, % of the
 * same-run copy ceiling:
 *   slabs (bench/results/axis_slab_h100.txt): (512,896,4,12) ax1 float16 / bfloat16 50-52 ->
 *     74-75, float32 72-73 -> 83-84, softmax and log_softmax alike;
 *   tiles of 8 packs, both dtypes (bench/results/axis_tiles_h100.txt): (32,1000,56,56) ax1
 *     16-bit 58-61 -> 70, float32 77.5 -> 80-81; (128,128,16,16) ax0 16-bit 71-73 -> 75-78,
 *     float32 log_softmax 82 -> 88, softmax 88.5 -> 87.3; tiles of up to 4 packs gained about
 *     half as much (wider ones: slab_policy::tile_max);
 *   block size: up to 256 threads (192 for inner 48, in clusters of 4 for 16-bit and 7 for
 *     float32) 16-bit 72-73 and float32 80 with the two-round all-reduce noted in the kernel,
 *     against 64-66 and 74 for up to 512 (480, clusters of 2 and 3); up to 128 (96, clusters
 *     of 8; float32 then takes the column plan) 16-bit 67-69, and 61-64 with the one-round
 *     all-reduce that 256 has at 74;
 *   the all-reduce's synchronization (bench/results/axis_slab_sync_h100.txt). ncu on float16
 *     (32,1000,56,56) put 31% of the warp stall samples at block barriers, most of them while
 *     two warps folded the columns' partials one branchy merge at a time, and 19% at the
 *     membars of cluster.sync(), the last of which waited for the block's output stores. Each
 *     step, added to the one before, softmax float16 / float32: the last cluster.sync() split
 *     into a relaxed arrive after the remote reads and a wait before exit (nd_cluster_arrive_
 *     relaxed / nd_cluster_wait): (32,1000,56,56) 70 / 84 -> 74 / 93, (512,896,4,12) 74 / 84
 *     -> 75 / 89; merges as selects, not branches (ND_MERGE_SELECT): (128,128,16,16) 76 / 98 ->
 *     81 / 99; every thread folding partials (ND_AXIS_SLAB_COMBINE_PAR, 16-bit): +3 to +6; the
 *     ranks' pairs loaded at once (ND_AXIS_SLAB_RANK_LOADS, 16-bit): +0.5 to +1; the release
 *     before the remote reads issued by one thread's fence (ND_AXIS_SLAB_ONE_RELEASE): +1 to
 *     +5 on the cluster shapes. In all, over three alternating rounds in one call, 16-bit
 *     69-77 -> 81.5-86.4, float32 83-98 -> 94-99.
 * On an H200 the 16-bit kernel issues an instruction in most cycles (ncu: issue slots 63% busy
 * at (32,1000,56,56), 23.5 instructions an element), so instructions it need not issue are
 * time. Its threads no longer divide: the host gives it multipliers and the quotients that are
 * the same for every thread (slab_geom), the cluster's unit is %clusterid.x, and the compiler is
 * told that a thread holds PACKS - 1 packs or PACKS, so only the last pack is guarded (the
 * guards had filled predicate registers and spilled a pack to local memory). ncu, float16
 * (32,1000,56,56): 77.1 -> 58.7 M warp instructions, 133 -> 115 us. H200, three alternating
 * rounds (bench/results/axis_nodiv_h200.txt), % of the copy ceiling: (32,1000,56,56) 16-bit
 * 71.3-72.8 -> 80.2-84.5, float32 84.3-85.1 -> 89.6-90.5; (512,896,4,12) 16-bit 70.9-71.9 ->
 * 74.8-77.2, float32 79.2-79.3 -> 82.3-82.9; (128,128,16,16) 16-bit 70.4-72.1 -> 73.6-76.1,
 * float32 88.7-89.2 -> 92.6-93.4.
 */
struct slab_policy {
    static constexpr int max_threads = ND_AXIS_SLAB_THREADS;
    static constexpr int min_packs = 4;     /* packs a thread must get, or the column plan runs */
    /* packs a thread keeps: 128 bytes, as the row engine, except 16-bit 8 packs, which spilled
     * 32 bytes at the 64-register cap (nvcc 13, -Xptxas -v; 7 packs spill 8-16, 28-36 in
     * tiles, float32 8 packs 8). H100, (512,896,4,12) 16-bit: 7 packs 74-75% of the copy
     * ceiling, 6 packs 71-73, 5 packs 64-67 (more blocks a slab, more cluster traffic). Since
     * the kernel makes no divisions (softmax_axis_slab), 7 packs spill nothing and 8 spill 20
     * bytes; 8 (clusters of 4 for (32,1000,56,56), not 5) ran within a point of 7 at every
     * shape (H200, bench/results/axis_nodiv_h200.txt). */
    static constexpr int max_packs(size_t es) { return es == 2 ? ND_AXIS_SLAB_PACKS16 : 8; }
    static constexpr int max_q = 64;        /* 16-byte packs of a tile row (512 16-bit elements) */
    static constexpr int tile_min = ND_AXIS_TILE_MIN; /* narrowest tile where a row is cut (4
                                                          packs: 64 bytes) */
    /* widest (H100, three alternating rounds, bench/results/axis_tiles_h100.txt): 16-bit at 16
     * packs against 8, (128,128,16,16) 75-78 -> 68-70% of the copy ceiling, (32,1000,56,56)
     * unchanged; 64 packs lost 10-17 points for both dtypes. float32 at 16 packs (64 elements,
     * as 16-bit's 8) against 8: (128,128,16,16) ax0 87.2-87.5 -> 98.2-98.8, (32,1000,56,56) ax1
     * 79.8-81.1 -> 84.3-84.5, the other shapes within 0.3 (a later H100 call, medians of three
     * alternating rounds, bench/results/rows_split_h100.txt). */
    static constexpr int tile_max(size_t es)
    {
        return es == 2 ? ND_AXIS_TILE_MAX16 : ND_AXIS_TILE_MAX32;
    }
    static constexpr int max_cluster = 8;   /* portable cluster size */
    /* the plan's: a tile that needs more blocks is cut narrower */
    static constexpr int plan_cluster = ND_AXIS_SLAB_MAX_CLUSTER;
    static_assert(plan_cluster >= 1 && plan_cluster <= max_cluster, "a portable cluster");
    static constexpr int fill_blocks_per_sm = 2; /* fewer blocks than this per SM: column plan */
};

/* How many of its PACKS packs a thread of the one-pass slab kernel of T keeps as floats
 * (ND_AXIS_SLAB_KEEP16, ND_AXIS_SLAB_KEEP_SOME16): twice the registers of the words; float32
 * packs are floats already. */
template <class T> __host__ __device__ constexpr int slab_kept_packs(int packs)
{
    if (sizeof(T) != 2)
        return 0;
    if (packs <= ND_AXIS_SLAB_KEEP16)
        return packs;
    return ND_AXIS_SLAB_KEEP_SOME16 < packs - 1 ? ND_AXIS_SLAB_KEEP_SOME16 : packs - 1;
}

/* A slab, or a tile of one: the one-pass kernel may cut an inner row of more than max_q packs
 * into tiles of q packs, each tile's dim rows of q packs then taken like a slab of its own. */
struct slab_geom {
    int64_t slab; /* elements of one outer index: dim * inner */
    int inner;    /* columns of a tile: q * VEC (the whole inner extent when tiles == 1) */
    int q;        /* packs of a tile's row */
    int row;      /* packs from one row to the next: inner / VEC of the tensor */
    int rows;     /* dim */
    int tiles;    /* tiles of an inner row: row / q */
    int packs;    /* packs of a tile: rows * q */
    int cluster;  /* blocks per tile */
    int64_t units; /* tiles of the tensor: outer * tiles (one cluster each) */
    int pf_units;  /* the PF kernel: units ahead whose x to ask L2 for (launch_slab_packs) */
    /* Divisions done once on the host (launch_slab_packs), so the kernel's threads do none:
     * tile_div  unit / tiles without a divide (nd_fast_div);
     * q_mul     t / q as (t * q_mul) >> 16 for a thread index t < 1024 (q <= 64);
     * block_rows, rs  tile rows of a block's and of a cluster's threads: threads / q, G / q;
     * pf_ub, pf_share  bytes of x a unit, and of those each block of its cluster asks L2 for
     *           (PF kernel). */
    nd_fast_div<uint32_t> tile_div;
    int q_mul;
    int block_rows, rs;
    int64_t pf_ub, pf_share;
};

/* VEC floats of shared memory at p (16-byte aligned) into o, four at a time. */
template <int VEC> __device__ __forceinline__ void slab_read_cols(const float *p, float (&o)[VEC])
{
#pragma unroll
    for (int i = 0; i < VEC / 4; i++) {
        const float4 w = reinterpret_cast<const float4 *>(p)[i];
        o[4 * i] = w.x;
        o[4 * i + 1] = w.y;
        o[4 * i + 2] = w.z;
        o[4 * i + 3] = w.w;
    }
}

/*
 * All-reduce, per column, over the threads of a slab that share the column: v[k][j] is this
 * thread's partial k (of Op::K) for column cp * VEC + j. `red` holds Op::K * blockDim.x *
 * (VEC + 1) floats, `col` and `fin` Op::K * inner each; on return red[t * VEC + j] still holds
 * thread t's own v[0][j] (softmax_axis_slab's kept exps read their max back from it). Each column
 * is combined in one fixed order (the block's threads in a fixed tree, then the cluster's blocks
 * in rank order), so every thread of the column, every block and every run gets the same bits.
 * Called once per kernel: a second
 * call would need a second `col`, which other blocks of the cluster may still be reading.
 * TUNED false keeps the form this had before the ND_AXIS_SLAB_* synchronization knobs (one
 * thread a column folds every partial; cluster.sync() before the remote reads, one rank at a
 * time), for the two-pass path's statistics kernel (ND_AXIS_SLAB_SPLIT_OLD_FOLD).
 * The caller gives parts = blockDim.x / q (threads a pack-column in the block) and tq = this
 * thread's threadIdx.x / q, divisions it has made already or the host made for it.
 * FIN: each column's sum as handed back, the sum itself (0) or its output factor (slab_fin:
 * 1 softmax's -log2(sum), 2 log_softmax's log(sum)), taken once a column by the thread that
 * finishes its pair into fin (a cluster; col stays the raw pair there: the other ranks read
 * it), or for one block in a pass over col after its pairs are written (a barrier more).
 */
template <int FIN> __device__ __forceinline__ float slab_fin(float s)
{
    return FIN == 2 ? logf(s) : FIN == 1 ? nd_exp_div_factor(s) : s;
}

template <int VEC, bool TUNED = true, int FIN = 0, class Op>
__device__ __forceinline__ void slab_allreduce(float (&v)[Op::K][VEC], float *red, float *col,
                                               float *fin, const slab_geom &g, int cp, int parts,
                                               int tq, Op op)
{
    constexpr int K = Op::K;
    const int t = threadIdx.x, nt = blockDim.x;
    const int plane = nt * VEC; /* red: K planes of nt * VEC floats */
#pragma unroll
    for (int k = 0; k < K; k++)
#pragma unroll
        for (int i = 0; i < VEC / 4; i++)
            reinterpret_cast<float4 *>(red + k * plane + t * VEC)[i] =
                make_float4(v[k][4 * i], v[k][4 * i + 1], v[k][4 * i + 2], v[k][4 * i + 3]);
    __syncthreads();
    /* thread u's partial of column c = cp(u) * VEC + j sits at red[u * VEC + j]; the threads of
     * pack-column cp are cp, cp + q, ..., so column c's partials are red[c + p * inner] */
    /* parts >= 4: plan_slab */
    const int L = parts / VEC;  /* threads a column, when parts % VEC == 0: L * inner = nt */
    if (ND_AXIS_SLAB_COMBINE_PAR && TUNED && VEC == 8 && parts % VEC == 0 && L >= 2) {
        /* Every thread folds VEC of a column's partials, p = l, l + L, ... (at once), into
         * scr (K planes of nt floats past red's), then one thread a column folds its L results in
         * order of l. A warp reads 32 consecutive columns of one p: no bank conflict. */
        float *scr = red + K * plane;
        const int l = tq / VEC, c = t - l * g.inner; /* t / inner, t % inner (inner = q VEC) */
        float a[VEC][K];
#pragma unroll
        for (int i = 0; i < VEC; i++)
#pragma unroll
            for (int k = 0; k < K; k++)
                a[i][k] = red[k * plane + c + (l + i * L) * g.inner];
        if constexpr (ND_AXIS_SLAB_FOLD_NARY && std::is_same<Op, op_online>::value) {
            online_fold<VEC>(a);
        } else {
#pragma unroll
            for (int w = 1; w < VEC; w *= 2)
#pragma unroll
                for (int i = 0; i + w < VEC; i += 2 * w)
                    op(a[i], a[i + w]);
        }
#pragma unroll
        for (int k = 0; k < K; k++)
            scr[k * nt + t] = a[0][k];
        __syncthreads();
        if (t < g.inner) {
            float b[K];
#pragma unroll
            for (int k = 0; k < K; k++)
                a[0][k] = scr[k * nt + t];
            for (int i = 1; i < L; i++) {
#pragma unroll
                for (int k = 0; k < K; k++)
                    b[k] = scr[k * nt + i * g.inner + t];
                op(a[0], b);
            }
#pragma unroll
            for (int k = 0; k < K; k++)
                col[k * g.inner + t] = a[0][k];
        }
    } else
    for (int c = t; c < g.inner; c += nt) {
        float a[4][K], b[K];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int k = 0; k < K; k++)
                a[i][k] = red[k * plane + c + i * g.inner];
        int p = 4;
        for (; p + 4 <= parts; p += 4)
#pragma unroll
            for (int i = 0; i < 4; i++) {
#pragma unroll
                for (int k = 0; k < K; k++)
                    b[k] = red[k * plane + c + (p + i) * g.inner];
                op(a[i], b);
            }
        for (; p < parts; p++) {
#pragma unroll
            for (int k = 0; k < K; k++)
                b[k] = red[k * plane + c + p * g.inner];
            op(a[0], b);
        }
        op(a[0], a[1]);
        op(a[2], a[3]);
        op(a[0], a[2]);
#pragma unroll
        for (int k = 0; k < K; k++)
            col[k * g.inner + c] = a[0][k];
    }
    __syncthreads();
    const float *res = col;
    if (g.cluster > 1) {
        /* the cluster's blocks in rank order, one column a thread, into fin; each thread then
         * reads its columns from its own block (a thread holding v across C remote reads of
         * its VEC columns spilled: 30 bytes at 16-bit 8 packs) */
        cg::cluster_group cl = cg::this_cluster();
        if (TUNED && ND_AXIS_SLAB_ONE_RELEASE) {
            /* col's writers passed the barrier above: one thread's release covers them */
            if (t == 0)
                asm volatile("fence.acq_rel.cluster;" ::: "memory");
            nd_cluster_arrive_relaxed();
            nd_cluster_wait();
        } else {
            cl.sync(); /* every block's col is written */
        }
        for (int c = t; c < g.inner; c += nt) {
            float a[K], b[K];
#pragma unroll
            for (int k = 0; k < K; k++)
                a[k] = *cl.map_shared_rank(col + k * g.inner + c, 0);
            if (TUNED && ND_AXIS_SLAB_RANK_LOADS && VEC == 8) {
                /* every rank's pair in flight at once: one remote round trip, not cluster - 1 */
                float br[slab_policy::max_cluster - 1][K];
#pragma unroll
                for (int r = 1; r < slab_policy::max_cluster; r++)
                    if (r < g.cluster)
#pragma unroll
                        for (int k = 0; k < K; k++)
                            br[r - 1][k] = *cl.map_shared_rank(col + k * g.inner + c, r);
#pragma unroll
                for (int r = 1; r < slab_policy::max_cluster; r++)
                    if (r < g.cluster)
                        op(a, br[r - 1]);
            } else {
                for (int r = 1; r < g.cluster; r++) {
#pragma unroll
                    for (int k = 0; k < K; k++)
                        b[k] = *cl.map_shared_rank(col + k * g.inner + c, r);
                    op(a, b);
                }
            }
#pragma unroll
            for (int k = 0; k < K; k++)
                fin[k * g.inner + c] = k == K - 1 ? slab_fin<FIN>(a[k]) : a[k];
        }
        __syncthreads();
        /* the remote reads are done (their values were stored to fin before the barrier): this
         * block may leave once the others have passed here too (softmax_axis_slab's end) */
        if (TUNED && ND_AXIS_SLAB_LEAVE_SPLIT)
            nd_cluster_arrive_relaxed();
        res = fin;
    } else if constexpr (FIN != 0) {
        /* one block: col is this block's alone; its sums become factors in place */
        for (int c = t; c < g.inner; c += nt)
            col[(K - 1) * g.inner + c] = slab_fin<FIN>(col[(K - 1) * g.inner + c]);
        __syncthreads();
    }
#pragma unroll
    for (int k = 0; k < K; k++)
        slab_read_cols<VEC>(res + k * g.inner + cp * VEC, v[k]);
}

/* Between passes over the packs: the words (of packs FROM on) look rewritten, so the compiler
 * widens them again in the next pass instead of keeping every widened element live across an
 * all-reduce (as axis_pack::fence). */
template <int FROM = 0, class R> __device__ __forceinline__ void slab_fence(R &v)
{
#pragma unroll
    for (int i = FROM * 16 / 4; i < R::kWords; i++)
        asm volatile("" : "+r"(v.w[i]));
}

/* A thread's packs i < n of a slab, at xs[p + i * stride] (16 bytes; streaming loads unless
 * PLAIN), into the words of v (pack i in words 4i .. 4i + 3). */
template <int N, bool PLAIN = false, class R>
__device__ __forceinline__ void slab_load(R &v, const uint4 *xs, int p, int stride, int n)
{
#pragma unroll
    for (int i = 0; i < N; i++)
        if (i < n) {
            const uint4 w = PLAIN ? xs[p + i * stride] : __ldcs(xs + p + i * stride);
            v.w[4 * i] = w.x;
            v.w[4 * i + 1] = w.y;
            v.w[4 * i + 2] = w.z;
            v.w[4 * i + 3] = w.w;
        }
}

/* The outputs of a thread's packs i < n, as slab_load put them in v, to ys[p + i * stride]:
 * per column j of a pack, exp(x - m[j]) / sum (softmax, f = nd_exp_div_factor(sum): one
 * ex2.approx of an fma, nd_exp_div) or x - m[j] - f[j] (log_softmax, f = log(sum)). KEPT
 * softmax: v holds each element's exp against the thread's own max and f[j] the factor that
 * turns it into the output, one multiplication (softmax_axis_slab, slab_kept_packs). */
template <bool LOG, int FIRST, int N, class T, int VEC, bool KEPT = false, class R>
__device__ __forceinline__ void slab_store(uint4 *ys, int p, int stride, int n, const R &v,
                                           const float (&m)[VEC], const float (&f)[VEC])
{
#pragma unroll
    for (int i = FIRST; i < N; i++)
        if (i < n) {
            float out[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                if (KEPT && !LOG) { /* v holds the exps, f the column's factor */
                    out[j] = v.get(i * VEC + j) * f[j];
                    continue;
                }
                const float d = v.get(i * VEC + j) - m[j];
                out[j] = LOG ? d - f[j] : nd_exp_div(d, f[j]);
            }
            nd_store_pack_stream<T, VEC>(reinterpret_cast<T *>(ys + p + i * stride), out);
        }
}

/*
 * One slab per block (g.cluster == 1) or per cluster of g.cluster blocks; PACKS packs of 16 bytes
 * per thread, kept in registers (16-bit packs as words, widened on use). Every thread holds at
 * least PACKS - 1 packs (the plan takes PACKS = ceil(packs / G)), so none is empty. A 16-bit
 * thread of up to ND_AXIS_SLAB_KEEP16 packs widens them once and keeps the floats, softmax its
 * exps (an output is then one multiplication, where widening, subtracting the max and an ex2 of
 * an fma were four) and log_softmax x (one widening fewer); the other kernels take the exps again
 * for the output: 8 floats a pack would not fit the registers.
 */
template <typename T, int PACKS, bool LOG, bool TILED, bool PF = false>
__global__ void __launch_bounds__(slab_policy::max_threads, 1024 / slab_policy::max_threads)
softmax_axis_slab(const T *__restrict__ x, T *__restrict__ y, slab_geom g)
{
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int K = op_online::K;
    __shared__ __align__(16) float red[K * slab_policy::max_threads * (VEC + 1)];
    __shared__ __align__(16) float col[K * slab_policy::max_q * VEC];
    __shared__ __align__(16) float fin[K * slab_policy::max_q * VEC];
    unsigned rank = 0, unit32 = blockIdx.x;
    if (g.cluster > 1) {
        rank = cg::this_cluster().block_rank();
        asm("mov.u32 %0, %%clusterid.x;" : "=r"(unit32)); /* blockIdx.x / cluster */
    }
    const int64_t unit = unit32;
    const int64_t o = TILED ? nd_fast_div_q(g.tile_div, unit32) : unit;
    const int t = threadIdx.x, G = g.cluster * (int)blockDim.x;
    const int gt = (int)rank * (int)blockDim.x + t;
    /* blockDim.x is a multiple of q: thread t's pack-column is t % q, its tile row gt / q */
    const int tq = (t * g.q_mul) >> 16, cp = t - tq * g.q;
    const uint4 *xs = reinterpret_cast<const uint4 *>(x + o * g.slab);
    uint4 *ys = reinterpret_cast<uint4 *>(y + o * g.slab);
    /* pack i of this thread, in packs from xs: the slab's pack gt + i * G; in a tile, pack cp of
     * the tile's row r0 + i * RS (ints: rows * row < 2^31). The untiled form is kept apart: the
     * tiled arithmetic in every slab cost (512,896,4,12) 16-bit 1.5-2 points (H100). Every
     * thread has PACKS - 1 packs or PACKS (the plan takes PACKS = ceil(packs / G)): n says which,
     * and the compiler, told so, guards only the last pack's code. */
    int first = gt, stride = G;
    bool full = gt + (PACKS - 1) * G < g.packs;
    if constexpr (TILED) {
        const int tile = (int)(unit - o * g.tiles), RS = g.rs;
        const int r0 = (int)rank * g.block_rows + tq;
        first = r0 * g.row + tile * g.q + cp;
        stride = RS * g.row;
        full = r0 + (PACKS - 1) * RS < g.rows;
    }
    const int n = PACKS - 1 + (int)full;
    __builtin_assume(n >= PACKS - 1);

    if constexpr (PF) {
        /* this block's share of unit unit + pf_units, units as equal pieces of x (ND_AXIS_SLAB_PF);
         * asked for before this block's loads (after them, their registers held the address) */
        const int64_t ahead = unit + g.pf_units;
        if (threadIdx.x == 0 && ahead < g.units) {
            const int64_t b0 = rank * g.pf_share;
            if (b0 < g.pf_ub)
                nd_prefetch_l2(reinterpret_cast<const char *>(x) + ahead * g.pf_ub + b0,
                               (unsigned)min(g.pf_share, g.pf_ub - b0));
        }
    }
    nd_regrow<T, PACKS * VEC> v;
    slab_load<PACKS>(v, xs, first, stride, n);
    /* One all-reduce of (max, sum) pairs, each thread's sums taken against its own max. Two
     * (the column max, then the sums against it), which keep only 8 floats of state live across
     * each, measured slower on an H100: (512,896,4,12) float16 72% of the copy ceiling against
     * 74, float32 79-80 against 83-84. */
    float ms[2][VEC];
    float (&m)[VEC] = ms[0], (&s)[VEC] = ms[1];
    v.template max_cols<VEC>(n, m); /* n >= 1 */
    /* The first KP packs widened once and kept as floats (softmax each exp against this
     * thread's max, log_softmax each x), the rest kept as loaded and widened again, their exps
     * taken again, for the output (slab_kept_packs). */
    constexpr int KP = slab_kept_packs<T>(PACKS);
    nd_regrow_wide<T, (KP > 0 ? KP : 1) * VEC> e;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const float r = nd_exp_ref(m[j]);
        s[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < PACKS; i++)
            if (i < n) {
                const float xv = v.get(i * VEC + j), ex = nd_exp_le0(xv - r);
                s[j] += ex;
                if (i < KP)
                    e.set(i * VEC + j, LOG ? xv : ex);
            }
    }
    slab_fence<KP>(v);
    constexpr bool ONCE = ND_AXIS_SLAB_FIN_ONCE == 2 ||
                          (ND_AXIS_SLAB_FIN_ONCE == 1 && LOG && VEC == 8);
    constexpr int FIN = ONCE ? (LOG ? 2 : 1) : 0;
    slab_allreduce<VEC, true, FIN>(ms, red, col, fin, g, cp, g.block_rows, tq, op_online());
    /* f: log(sum) (log_softmax), -log2(sum) (softmax, nd_exp_div), from slab_allreduce where
     * FIN (ND_AXIS_SLAB_FIN_ONCE), else taken here; softmax's kept exps take
     * k = exp(mt - m) / sum, mt this thread's own max of the column, read back from red
     * (slab_allreduce leaves each thread's own pairs there: 8 registers fewer live across the
     * all-reduce, where they spilled 48 bytes at 4 packs). mt - m <= 0, except where this
     * thread's packs of the column are all -inf (their exps 0; mt is taken as 0, and exp(0 -
     * m) could overflow: k is then 1 / sum, so the outputs are 0, or NaN where the whole column
     * is -inf, as the exps taken again give) or where m is NaN or inf (k NaN, as those). */
    if constexpr (FIN == 0)
#pragma unroll
        for (int j = 0; j < VEC; j++)
            s[j] = slab_fin<LOG ? 2 : 1>(s[j]);
    if constexpr (KP > 0) {
        float k[VEC]; /* the kept packs' factor: k (softmax), f (log_softmax) */
        if constexpr (LOG) {
#pragma unroll
            for (int j = 0; j < VEC; j++)
                k[j] = s[j];
        } else {
            slab_read_cols<VEC>(red + t * VEC, k); /* mt */
#pragma unroll
            for (int j = 0; j < VEC; j++)
                k[j] = nd_exp_div(fminf(nd_exp_ref(k[j]) - m[j], 0.0f), s[j]);
        }
        slab_store<LOG, 0, KP, T, VEC, true>(ys, first, stride, n, e, m, k);
    }
    if constexpr (KP < PACKS)
        slab_store<LOG, KP, PACKS, T, VEC>(ys, first, stride, n, v, m, s);
    if (g.cluster > 1) { /* no block leaves while another still reads its col */
        if (ND_AXIS_SLAB_LEAVE_SPLIT)
            nd_cluster_wait(); /* arrived in slab_allreduce */
        else
            cg::this_cluster().sync();
    }
}

/*
 * Long slabs: a short inner extent whose slabs do not fit a cluster's registers, or too few of
 * them to fill the GPU, as (8,32768,64) over axis 1. Where the column plan would cut such
 * columns into segments and read x twice (softmax_axis_stats / apply), the slab's own segments
 * do the same with the slab layout: each segment of seg_packs consecutive packs is one block,
 * each thread walking packs t, t + nt, ... of it (seg_packs and nt multiples of q, so still
 * always in the same VEC columns), ND_AXIS_SLAB_UNROLL 16-byte loads in flight. Three launches:
 *   softmax_axis_slab_stats  each segment's (max, sum) per column into `part`
 *   softmax_axis_slab_merge  a slab's segments merged in a fixed order, one warp a column,
 *                            into (max, log(sum) or -log2(sum)) in `fin`
 *   softmax_axis_slab_apply  x read again (from L2 where it still is) and y written
 * H100, three alternating rounds against the column plan's split path (bench/results/
 * axis_slab_split_h100.txt): (8,32768,64) ax1 16-bit 42-43% of the copy ceiling -> 54-55,
 * float32 52 -> 59. Segments for 1, 2 or 4 waves of blocks: within a point.
 *
 * The statistics pass loads x plainly (it stays in L2 at normal priority, where streaming loads
 * marked it first to go) and the apply pass takes the segments last to first, the most recently
 * read first (ND_AXIS_SLAB_STATS_PLAIN, ND_AXIS_SLAB_APPLY_REVERSE). H100, three alternating
 * rounds (bench/results/axis_l2_h100.txt): (8,32768,64) 16-bit 53.6-54.5 -> 59.5-60.4, float32
 * 59.0-59.2 -> 62.0-62.1; the other axis shapes do not take this path. Where the time goes
 * (ncu, float16, streaming loads): statistics 18.7 us for 33.5 MB (1.8 TB/s), merge 4.2 us, apply
 * 21 us for 33.5 MB read and 33.5 written. Measured and not kept (same file,
 * bench/results/axis_fused_h100.txt), 16-bit / float32:
 *   - statistics loads with an L2 evict_last policy, apply loads evict_first, reversed: 58 / 61;
 *   - outer indices in groups whose x fits half of L2, three launches a group: 48 / 54-55;
 *   - the two passes in one launch: blocks take tickets as they start, the statistics run one or
 *     more slabs ahead of the outputs, a slab's last statistics block merges its segments and
 *     raises a flag that the output blocks wait on. x came from DRAM once (ncu: 34.5 MB read,
 *     against 67 for the three launches) but the launch took 62-64 us against 44: 38-42 / 50-56,
 *     with warps stalled at block barriers 44% of the time and one instruction issued every four
 *     cycles; segments of 4 packs a thread (twice the blocks) 27-38.
 *   - One pass over a grid of segments (commit d54fe8b, bench/results/axis_slab_grid_h100.txt):
 *     each segment of 256 threads x 8 packs kept in registers as in the one-pass kernel (16-bit:
 *     128 segments a slab, a quarter of the blocks the device holds, so the row engine's
 *     ticket argument holds), the slab's blocks exchanging their columns' pairs through global
 *     memory, then y written from the registers. Against the two-pass path's 60-61 (16-bit):
 *     the last block merging and raising a flag 35; every block gathering every segment's
 *     pairs (64 KB from L2 a block) 48-50; column owners (the block of segment c % nseg folds
 *     column c in one warp from flag words and writes a last flag word) 57-59. Blocks from
 *     blockIdx.x instead of the ticket gained 3; 147 segments of 7 packs (no spill; past the
 *     quarter) lost 4-9. float32 fits only at half the device (256 segments): 59 against 62.5.
 *     x is read once, but the tensor is two waves of such blocks, each waiting with no loads in
 *     flight for its slab's slowest segment.
 */
/* Block blockIdx.x of a two-pass slab kernel: segment seg of slab o, packs [begin, end). */
struct slab_segment {
    int64_t o;
    int seg, begin, end;
    /* reverse: block b takes the segment that block gridDim.x - 1 - b of the statistics pass read */
    __device__ __forceinline__ slab_segment(const slab_geom &g, int nseg, int seg_packs,
                                            bool reverse = false)
    {
        const int64_t b = reverse ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
        o = b / nseg;
        seg = (int)(b - o * nseg);
        begin = seg * seg_packs;
        end = min(g.packs, begin + seg_packs);
    }
};

template <typename T>
__global__ void __launch_bounds__(slab_policy::max_threads, 1024 / slab_policy::max_threads)
softmax_axis_slab_stats(const T *__restrict__ x, float *__restrict__ part, slab_geom g, int nseg,
                        int seg_packs)
{
    constexpr int VEC = 16 / (int)sizeof(T), U = ND_AXIS_SLAB_UNROLL, K = op_online::K;
    __shared__ __align__(16) float red[K * slab_policy::max_threads * (VEC + 1)];
    __shared__ __align__(16) float col[K * slab_policy::max_q * VEC];
    const slab_segment sg(g, nseg, seg_packs);
    const int t = threadIdx.x, nt = blockDim.x;
    const int64_t o = sg.o;
    const uint4 *xs = reinterpret_cast<const uint4 *>(x + o * g.slab);
    float ms[2][VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        ms[0][j] = -INFINITY;
        ms[1][j] = 0.0f;
    }
    for (int p = sg.begin + t; p < sg.end; p += U * nt) {
        const int n = min(U, (sg.end - p + nt - 1) / nt); /* packs p + u * nt, u < n */
        nd_regrow<T, U * VEC> v;
        slab_load<U, ND_AXIS_SLAB_STATS_PLAIN != 0>(v, xs, p, nt, n);
        float vm[VEC];
        v.template max_cols<VEC, true>(n, vm); /* n >= 1; a NaN wins (op_online_split) */
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float b[2] = {vm[j], 0.0f};
            if (b[0] == -INFINITY)
                continue;
#pragma unroll
            for (int u = 0; u < U; u++)
                if (u < n)
                    b[1] += nd_exp_le0(v.get(u * VEC + j) - b[0]);
            float a[2] = {ms[0][j], ms[1][j]};
            op_online_split()(a, b);
            ms[0][j] = a[0];
            ms[1][j] = a[1];
        }
    }
    slab_allreduce<VEC, !ND_AXIS_SLAB_SPLIT_OLD_FOLD>(ms, red, col, col, g, t % g.q, nt / g.q,
                                                       t / g.q, op_online_split()); /* g.cluster is 1 here */
    /* col holds the block's pair for every column (slab_allreduce's last barrier passed) */
    for (int c = t; c < g.inner; c += nt)
#pragma unroll
        for (int k = 0; k < K; k++)
            part[((o * nseg + sg.seg) * K + k) * g.inner + c] = col[k * g.inner + c];
}

/* One warp a column (blockIdx.y * warps + warp of slab blockIdx.x): lane l merges segments l,
 * l + 32, ... in order, then a shuffle tree in lane order, so the result does not depend on
 * timing. (One thread a column walking every segment in turn waited an L2 round trip per
 * segment: 132 segments took longer than the two passes over x.) */
template <bool LOG>
__global__ void softmax_axis_slab_merge(const float *__restrict__ part, float *__restrict__ fin,
                                        int inner, int nseg)
{
    const int64_t o = blockIdx.x;
    const int c = (int)(blockIdx.y * (blockDim.x / 32) + threadIdx.x / 32), lane = threadIdx.x & 31;
    if (c >= inner) /* the whole warp */
        return;
    float a[2] = {-INFINITY, 0.0f};
    for (int seg = lane; seg < nseg; seg += 32) {
        const float *p = part + (o * nseg + seg) * 2 * inner + c;
        const float b[2] = {p[0], p[inner]};
        op_online_split()(a, b);
    }
    const int n = nseg < 32 ? nseg : 32;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        const float b[2] = {__shfl_down_sync(0xffffffffu, a[0], off),
                            __shfl_down_sync(0xffffffffu, a[1], off)};
        if (lane + off < n)
            op_online_split()(a, b);
    }
    if (lane == 0) {
        fin[o * 2 * inner + c] = a[0];
        fin[o * 2 * inner + inner + c] = LOG ? logf(a[1]) : nd_exp_div_factor(a[1]);
    }
}

template <typename T, bool LOG>
__global__ void __launch_bounds__(slab_policy::max_threads, 1024 / slab_policy::max_threads)
softmax_axis_slab_apply(const T *__restrict__ x, T *__restrict__ y, const float *__restrict__ fin,
                        slab_geom g, int nseg, int seg_packs)
{
    constexpr int VEC = 16 / (int)sizeof(T), U = ND_AXIS_SLAB_UNROLL;
    const slab_segment sg(g, nseg, seg_packs, ND_AXIS_SLAB_APPLY_REVERSE != 0);
    const int t = threadIdx.x, nt = blockDim.x;
    const int64_t o = sg.o;
    const uint4 *xs = reinterpret_cast<const uint4 *>(x + o * g.slab);
    uint4 *ys = reinterpret_cast<uint4 *>(y + o * g.slab);
    float m[VEC], f[VEC]; /* the column's max, and log(sum) or nd_exp_div_factor(sum) */
    const float *fm = fin + o * 2 * g.inner + (t % g.q) * VEC;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        m[j] = fm[j];
        f[j] = fm[g.inner + j];
    }
    for (int p = sg.begin + t; p < sg.end; p += U * nt) {
        const int n = min(U, (sg.end - p + nt - 1) / nt); /* packs p + u * nt, u < n */
        nd_regrow<T, U * VEC> v;
        slab_load<U>(v, xs, p, nt, n);
        slab_store<LOG, 0, U, T>(ys, p, nt, n, v, m, f);
    }
}

/*
 * Resident slabs (softmax_axis_slab_res): long columns over a short inner extent where the whole
 * tensor, or most of it, fits on chip at once, as (8,32768,64) over axis 1 at 16 bits (33.5 MB:
 * 256 KB for each of 128 SMs). One cooperative launch of one 1024-thread block an SM, so every
 * block is resident at once and may wait for the others. Block b is segment b % nseg of slab
 * b / nseg: `rounds` rounds of 1024 consecutive packs, thread t holding packs begin + i * 1024 + t,
 * always the same VEC columns (q divides 32). Of a segment's rounds,
 *   - the first reg_rounds come to registers (16-byte streaming loads: read once);
 *   - the next smem_rounds come to shared memory by bulk copies (16-bit: one mbarrier a round,
 *     an evict-first policy) or by each thread's cp.async of its own slots (float32:
 *     res_cpasync), ND_AXIS_RES_WINDOW rounds in flight, so they land in order and the
 *     statistics of the first overlap the loads of the rest;
 *   - the rest (float32 only, at these sizes) are streamed: read in the statistics pass and
 *     again in the output pass, which takes them first, while they are still in L2.
 * Each thread folds its packs into per-column (max, sum of exp(x - max)) pairs, ND_AXIS_RES_BATCH
 * rounds at a time (res_fold: one rescale a batch, one exp an element); the block folds its warps'
 * pairs in a fixed order and publishes them as flag words; every block then folds all of its
 * slab's segments in one fixed order (so every block of a slab, and every run, gets the same bits)
 * and writes y from registers and shared memory. x crosses DRAM once and y once, a copy's
 * traffic, where the two-pass slab path reads x twice and spends a launch between the reads.
 * The flag words start empty: a 16-bit launch empties them itself (each block its own words,
 * then one grid barrier once its register rounds are folded, while its bulk copies fly: res_clears),
 * a float32 launch follows a memset of the workspace. Against the memset, five alternating
 * rounds (stop 38): 16-bit 73.3-73.6 -> 74.4-74.9% of the copy ceiling; float32 clearing itself
 * lost 1.3-1.4 (75.6-75.8 -> 74.2-74.5), and a barrier before the first fold lost 1.6-2.4 (16-bit).
 *
 * H100, three alternating rounds against the two-pass slab path (bench/results/
 * axis_resident_h100.txt), % of the copy ceiling: (8,32768,64) ax1 16-bit 60.0-60.9 -> 73.8-74.0,
 * float32 (15 of 32 rounds streamed) 62.5-62.6 -> 75.5-75.6. Where the time goes (ncu, float16
 * softmax, folds of 4 rounds, 31 us at ncu's clocks): the loads and statistics a third, at about
 * the DRAM's read speed; the stores under a third; the start (barrier set-up, the first loads'
 * latency) and the two reductions with the wait for a slab's slowest segment the rest, with the
 * DRAM idle. Measured and not kept:
 *   - the first form: one rescale and one exp an element (a branch-free online update), a
 *     ticket per block instead of a cooperative grid, every bulk copy asked for at the start:
 *     16-bit 66.5-68.0, float32 73.1-73.4; folds of 4 rounds instead of 2: 16-bit 71.4-72.3;
 *     every copy at the start (folds of 4): 70.5-70.7;
 *   - the warps' pairs, and the segments' pairs, folded by teams of 16 lanes a column (a
 *     butterfly) instead of one thread a column walking them in order: 16-bit 71.0-71.6; the
 *     warps' pairs only: 72.3-72.7; with 3 copies ahead those gained 1.5-2 (72.5; and 74.2-74.7,
 *     0.4-0.8 above the kept form in the same run, but float32 0.7-1.0 below it), 10 ahead lost
 *     1.7; a nanosleep between looks at an unpublished segment: within 0.3;
 *   - two phases (a block takes a segment of slab o, then of slab o + outer / 2, whose copies it
 *     asks for once the first phase's statistics are done, to overlap the first phase's wait and
 *     stores with the second's loads): 16-bit 65-66, ncu 38 us against 31;
 *   - the pairs exchanged across a grid barrier (cooperative_groups' grid sync) instead of as flag
 *     words, with no workspace to clear beforehand: 16-bit 1.0-1.3 lower, float32 0.4-0.6;
 *   - folds of 1 round (a rescale exp an element): 16-bit 1.1-1.6 lower; 2 register rounds instead
 *     of 4 (one more in shared memory): 16-bit 0.5-1.5 lower; 8 copies ahead: within 0.2.
 * H200 (bench/results/res_phases_h200.txt): per-block clock marks put 16-bit x all in by ~15 us
 * of 25 (2.2 TB/s), the exchange at ~2 us and the stores at ~6.6. A memset instead of the grid
 * barrier moved 16-bit -0.5 to 0, the barrier after the statistics -2 to -2.5
 * (ND_AXIS_RES_SYNC_LATE). Each slab's segments as one thread-block cluster cannot run here: the
 * H200 holds 7 clusters of 16 whole-SM blocks at once (8 slabs needed), 15 of 8, and refuses a
 * cooperative launch in clusters of 4 or more (bench/cluster_probe.cu). Nor is the load phase
 * slow for its order: 128 load-only blocks reading 256 KB segments from their first round run as
 * fast as reading a copy's window (bench/stride_probe.cu, 3.06-3.17 TB/s against 3.17-3.20, launch
 * gaps included), and each segment read from its own round on, wrapping around (bench/
 * res_rotate.patch), lost 1.0-2.4 points at 16-bit, 0.3-0.7 at float32 (res_rotate_h200.txt).
 */
constexpr int kResThreads = 1024, kResMaxSmemRounds = 16, kResMaxCols = 64, kResStaticSmem = 1024;

/* How a resident block's shared-memory rounds come (res_cpasync): by cp.async, each thread its own
 * 16-byte slot of each round (the slots it alone reads back), a commit group a round, the same
 * window of rounds in flight; or by one bulk copy a round on an mbarrier. 0: bulk copies; 1:
 * cp.async for float32, bulk copies for 16-bit; 2: cp.async for all. H200, four alternating rounds
 * at (8,32768,64) ax1 against bulk copies (bench/results/res_cpasync_h200.txt), % of the copy
 * ceiling: float32 softmax 71.0-71.3 -> 72.5-72.6, log_softmax 69.9-70.3 -> 71.8-72.0; 16-bit
 * 1-2 lower (softmax float16 65.1-65.3 -> 63.4-63.6), and 3-5 lower with 8 rounds in flight. */
#ifndef ND_AXIS_RES_CPASYNC
#define ND_AXIS_RES_CPASYNC 1
#endif
template <class T> __host__ __device__ constexpr bool res_cpasync()
{
    return ND_AXIS_RES_CPASYNC == 2 || (ND_AXIS_RES_CPASYNC == 1 && sizeof(T) == 4);
}
struct slab_res {
    int nseg;        /* segments (blocks) a slab */
    int rounds;      /* rounds of kResThreads packs a segment */
    int reg_rounds;  /* rounds in registers (<= ND_AXIS_RES_REG_ROUNDS) */
    int smem_rounds; /* then rounds in shared memory; the rest are streamed */
};

/* Whether a resident launch of T empties its own flag words (each block its own, then one grid
 * barrier once its first rounds are folded, its bulk copies in flight) rather than follow a
 * memset of the workspace. */
template <class T> __host__ __device__ constexpr bool res_clears()
{
    return ND_AXIS_RES_CLEAR == 2 || (ND_AXIS_RES_CLEAR == 1 && sizeof(T) == 2);
}

/* A pack of nothing: every element -inf, so it adds nothing to a column's pair. */
template <class T> __device__ __forceinline__ uint4 res_empty_pack()
{
    const uint32_t w = sizeof(T) == 4 ? 0xff800000u
                                      : std::is_same<T, __half>::value ? 0xfc00fc00u : 0xff80ff80u;
    return make_uint4(w, w, w, w);
}

/* N packs of a thread (N rounds, the same VEC columns) into its per-column pairs (m, s): the
 * batch's max rescales s once, then one exp an element against the new max. An all -inf column
 * stays (-inf, 0). H200, four alternating rounds at (8,32768,64) (bench/results/res_fold_h200.txt,
 * bench/res_fixed_ref.patch): with no exps at all (a probe, wrong results) 16-bit gained only
 * 1.5-2 points, and batches summed against the pair's m as it stands (no rescale while no lane's
 * new values pass it by 64: a third fewer exps) moved nothing; the exps are not the bound. */
template <class T, int VEC, int N>
__device__ __forceinline__ void res_fold(float (&m)[VEC], float (&s)[VEC], const uint4 (&w)[N])
{
    nd_regrow<T, N * VEC> v;
#pragma unroll
    for (int u = 0; u < N; u++)
        v.put_pack(u, {w[u].x, w[u].y, w[u].z, w[u].w});
    float vm[VEC];
    v.template max_cols<VEC>(N, vm);
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        const float mx = fmaxf(m[j], vm[j]);
        const float r = nd_exp_ref(mx);
        float acc = s[j] * nd_exp_le0(m[j] - r);
#pragma unroll
        for (int u = 0; u < N; u++)
            acc += nd_exp_le0(v.get(u * VEC + j) - r);
        s[j] = acc;
        m[j] = mx;
    }
}

/* y of one pack: exp(x - m) / sum (softmax, f = -log2(sum)) or x - m - f (log_softmax,
 * f = log sum) */
template <bool LOG, class T, int VEC>
__device__ __forceinline__ void res_store_pack(uint4 *ys, int p, const uint4 &w,
                                               const float (&m)[VEC], const float (&f)[VEC])
{
    nd_regrow<T, VEC> v;
    v.put_pack(0, {w.x, w.y, w.z, w.w});
    slab_store<LOG, 0, 1, T>(ys, p, 0, 1, v, m, f);
}

template <typename T, bool LOG>
__global__ void __launch_bounds__(kResThreads, 1)
softmax_axis_slab_res(const T *__restrict__ x, T *__restrict__ y, unsigned long long *ws,
                      slab_geom g, slab_res r)
{
    constexpr int VEC = 16 / (int)sizeof(T), NT = kResThreads, RR = ND_AXIS_RES_REG_ROUNDS,
                  B = ND_AXIS_RES_BATCH, WARPS = NT / 32,
                  U = sizeof(T) == 4 ? ND_AXIS_RES_UNROLL : ND_AXIS_RES_UNROLL16;
    extern __shared__ __align__(16) uint4 res_x[]; /* smem_rounds x NT packs, then red */
    __shared__ uint64_t bar[kResMaxSmemRounds];
    __shared__ float fin[2][kResMaxCols];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, cols = g.inner;
    /* the block's reductions, after its rounds (res_red_bytes) */
    float *red = reinterpret_cast<float *>(res_x + (size_t)r.smem_rounds * NT);
    const int64_t o = blockIdx.x / r.nseg;
    const int seg = (int)(blockIdx.x % r.nseg);
    const int begin = seg * r.rounds * NT, end = min(g.packs, begin + r.rounds * NT);
    const uint4 *xs = reinterpret_cast<const uint4 *>(x + o * g.slab);
    uint4 *ys = reinterpret_cast<uint4 *>(y + o * g.slab);
    /* round i of this segment starts at pack begin + i * NT: registers, shared memory, streamed */
    const int sm0 = r.reg_rounds, st0 = r.reg_rounds + r.smem_rounds;
    const int nsm = min(r.smem_rounds, (end - begin + NT - 1) / NT - sm0); /* rounds with packs */

    unsigned long long *slot = ws + o * r.nseg * cols; /* [segment][column] of this slab */
    if (res_clears<T>() && t < cols)
        nd_split_store(slot + seg * cols + t, ND_SPLIT_EMPTY);
    if (t == 0) {
        for (int i = 0; i < r.smem_rounds; i++)
            nd_mbar_init(&bar[i], 1);
        nd_mbar_init_fence();
    }
    uint4 rv[RR];
#pragma unroll
    for (int i = 0; i < RR; i++) {
        const int p = begin + i * NT + t;
        rv[i] = i < r.reg_rounds && p < end ? __ldcs(xs + p) : res_empty_pack<T>();
    }
    __syncthreads(); /* the barriers are initialised */
    int issued = 0;  /* thread 0 (every thread, res_cpasync): rounds asked for */
    auto issue_to = [&](int lim) {
        if constexpr (res_cpasync<T>()) {
            for (; issued < lim && issued < nsm; issued++) {
                const int p = begin + (sm0 + issued) * NT + t;
                if (p < end)
                    nd_cp_async16(res_x + issued * NT + t, xs + p);
                nd_cp_async_commit();
            }
            return;
        }
        if (t == 0)
            for (; issued < lim && issued < nsm; issued++) {
                const int p = begin + (sm0 + issued) * NT, n = min(NT, end - p);
                nd_mbar_expect_tx(&bar[issued], (unsigned)n * 16u);
                nd_bulk_load<true>(res_x + issued * NT, xs + p, (unsigned)n * 16u, &bar[issued]);
            }
    };
    issue_to(ND_AXIS_RES_WINDOW > 0 ? ND_AXIS_RES_WINDOW : nsm);

    /* statistics */
    float m[VEC], s[VEC];
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        m[j] = -INFINITY;
        s[j] = 0.0f;
    }
    res_fold<T>(m, s, rv);
    if (res_clears<T>() && !ND_AXIS_RES_SYNC_LATE)
        cg::this_grid().sync(); /* every block's words are empty */
    for (int i = 0; i < nsm; i += B) {
        issue_to(ND_AXIS_RES_WINDOW > 0 ? i + B + ND_AXIS_RES_WINDOW : nsm);
        uint4 w[B];
#pragma unroll
        for (int u = 0; u < B; u++) {
            w[u] = res_empty_pack<T>();
            if (i + u < nsm) {
                if constexpr (res_cpasync<T>())
                    nd_cp_async_wait(issued - (i + u + 1));
                else
                    nd_mbar_wait(&bar[i + u], 0);
                if (begin + (sm0 + i + u) * NT + t < end)
                    w[u] = res_x[(i + u) * NT + t];
            }
        }
        res_fold<T>(m, s, w);
    }
    const int nst = r.rounds - st0;
    for (int i = 0; i < nst && begin + (st0 + i) * NT < end; i += U) {
        uint4 w[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = begin + (st0 + i + u) * NT + t;
            w[u] = i + u < nst && p < end ? xs[p] : res_empty_pack<T>(); /* plainly: read again */
        }
        res_fold<T>(m, s, w);
    }

    if (res_clears<T>() && ND_AXIS_RES_SYNC_LATE)
        cg::this_grid().sync(); /* every block's words are empty */
    /* the block's pair per column: lanes of a warp that share columns (q apart), then the warps
     * in order by the threads of column c < cols */
    for (int off = g.q; off < 32; off *= 2)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            float a[2] = {m[j], s[j]};
            const float b[2] = {__shfl_xor_sync(0xffffffffu, m[j], off),
                                __shfl_xor_sync(0xffffffffu, s[j], off)};
            op_online()(a, b);
            m[j] = a[0];
            s[j] = a[1];
        }
    if (lane < g.q)
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            red[warp * cols + lane * VEC + j] = m[j];
            red[(WARPS + warp) * cols + lane * VEC + j] = s[j];
        }
    __syncthreads();
    if (t < cols) {
        float a[2] = {red[t], red[WARPS * cols + t]};
        for (int w = 1; w < WARPS; w++) {
            const float b[2] = {red[w * cols + t], red[(WARPS + w) * cols + t]};
            op_online()(a, b);
        }
        nd_split_store(slot + seg * cols + t, nd_split_word<2>(a, 0));
    }
    __syncthreads(); /* red is free again */

    /* the slab's pair per column: thread t folds segments t / cols, + parts, ... of column
     * t % cols in order (spinning until each is published), then the threads of each column in
     * order */
    {
        const int c = t % cols, pt = t / cols, parts = NT / cols;
        float a[2] = {-INFINITY, 0.0f};
        for (int sg = pt; sg < r.nseg; sg += parts) {
            const unsigned long long w = nd_split_wait(slot + sg * cols + c);
            const float b[2] = {__uint_as_float((unsigned)w), __uint_as_float((unsigned)(w >> 32))};
            op_online()(a, b);
        }
        red[pt * cols + c] = a[0];
        red[(parts + pt) * cols + c] = a[1];
        __syncthreads();
        if (t < cols) {
            const int n = min(parts, r.nseg);
            float b0[2] = {red[t], red[parts * cols + t]};
            for (int i = 1; i < n; i++) {
                const float b[2] = {red[i * cols + t], red[(parts + i) * cols + t]};
                op_online()(b0, b);
            }
            fin[0][t] = b0[0];
            fin[1][t] = LOG ? logf(b0[1]) : nd_exp_div_factor(b0[1]);
        }
        __syncthreads();
    }

    /* y: streamed rounds first (the most recently read, still in L2), registers, shared memory */
    float mm[VEC], ff[VEC];
    const int c0 = (t % g.q) * VEC;
#pragma unroll
    for (int j = 0; j < VEC; j++) {
        mm[j] = fin[0][c0 + j];
        ff[j] = fin[1][c0 + j];
    }
    for (int i = 0; i < nst && begin + (st0 + i) * NT + t < end; i += U) {
        const int p = begin + (st0 + i) * NT + t;
        const int n = min(min(U, nst - i), (end - p + NT - 1) / NT);
        nd_regrow<T, U * VEC> v;
        slab_load<U, true>(v, xs, p, NT, n);
        slab_store<LOG, 0, U, T>(ys, p, NT, n, v, mm, ff);
    }
#pragma unroll
    for (int i = 0; i < RR; i++)
        if (i < r.reg_rounds && begin + i * NT + t < end)
            res_store_pack<LOG, T>(ys, begin + i * NT + t, rv[i], mm, ff);
    for (int i = 0; i < nsm; i++) {
        const int p = begin + (sm0 + i) * NT + t;
        if (p < end)
            res_store_pack<LOG, T>(ys, p, res_x[i * NT + t], mm, ff);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* launchers                                                                                     */
/* ------------------------------------------------------------------------------------------- */

/* A launch: the kernel's template arguments beyond the dtype, and the geometry. */
struct axis_plan {
    int pack;    /* P: elements per access */
    int rows;    /* R: rows kept in registers; 0 = the split path */
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
    const int bytes[] = {es == 2 ? ND_AXIS_PACK16_BYTES : 16, 4};
    for (int b : bytes) {
        int p = b / (int)es;
        if (p > 1 && a->inner % p == 0 && addr % (uintptr_t)b == 0)
            return p;
    }
    return 1;
}

/* The kernel's thread limit for (P, R): see softmax_axis_kernel. */
static int max_threads(int P, int R)
{
    if (R >= 16 || (P >= 8 && R >= 8))
        return 256;
    return P >= 8 || R >= 8 ? 512 : 1024;
}

/*
 * The launch for one problem. Threads along dim per column (s) are chosen to fill the GPU and to
 * keep at most pref_rows rows per thread; rows per thread round up to a power of two (R). A block
 * holds TX pack-columns x TY row-threads x TZ column tiles; when a column needs more row-threads
 * than a block holds, it is spread over a cluster of C blocks; when even max_cluster blocks with
 * max_rows rows each cannot hold it, the column goes to the split path (R = 0).
 */
static axis_plan plan_axis(const nd_softmax_args *a, size_t es, int sms)
{
    typedef axis_policy pol;
    axis_plan pl = {};
    const int P = choose_pack(a, es);
    const int64_t packs = a->inner / P;
    const int64_t cols = a->outer * packs;
    const int64_t fill = (int64_t)sms * pol::fill_threads_per_sm;
    /* 16 rows of 8 two-byte elements would not fit the registers */
    const int max_rows = P >= 8 ? ND_AXIS_MAX_ROWS_P8 : pol::max_rows;
    const int pref_rows = std::min(max_rows, pol::pref_rows);

    int64_t s = std::min(std::max(cdiv(fill, cols), cdiv(a->dim, pref_rows)), a->dim);
    int R = std::min(max_rows, pow2_ceil(cdiv(a->dim, s)));
    int TX = 1, TY = 1;
    int64_t C = 1;
    for (;;) {
        s = cdiv(a->dim, R);
        TX = packs <= pol::max_tile_packs ? (int)packs : (s <= 16 ? 32 : s <= 64 ? 16 : 8);
        int ty_max = std::max(1, max_threads(P, R) / TX);
        C = cdiv(s, ty_max);
        TY = (int)cdiv(s, C);
        if (C <= pol::max_cluster || R >= max_rows)
            break;
        R = max_rows;
    }
    pl.pack = P;
    pl.g.dim = a->dim;
    pl.g.inner = a->inner;
    pl.g.packs = packs;
    if (C > pol::max_cluster) {
        /* The split path: segments of about split_rows rows per thread, enough of them to fill
         * the GPU twice. */
        TX = (int)std::min(packs, (int64_t)pol::max_tile_packs);
        TY = std::max(1, pol::split_threads / TX);
        const int64_t chunks = cdiv(packs, TX);
        int64_t nseg = std::max(cdiv(2 * fill, cols * TY), cdiv(a->dim, (int64_t)TY * pol::split_rows));
        nseg = std::min(nseg, std::min(cdiv(a->dim, TY), (int64_t)65535));
        pl.rows = 0;
        pl.block = dim3(TX, TY, 1);
        pl.grid = dim3((unsigned)(a->outer * chunks), (unsigned)nseg, 1);
        pl.smem = 2 * (size_t)TX * TY * P * sizeof(float);
        pl.g.chunks = chunks;
        pl.g.groups = a->outer * chunks;
        pl.g.cluster = 1;
        pl.g.rows_per_rank = cdiv(a->dim, nseg);
        return pl;
    }
    int TZ = 1;
    if (TY * TX < pol::block_threads)
        TZ = std::min(64, std::max(1, pol::block_threads / (TX * TY))); /* blockDim.z <= 64 */
    const int64_t chunks = cdiv(packs, TX);
    const int64_t groups = a->outer * chunks;
    TZ = (int)std::min((int64_t)TZ, groups);

    pl.rows = R;
    pl.block = dim3(TX, TY, TZ);
    pl.grid = dim3((unsigned)cdiv(groups, TZ), (unsigned)C, 1);
    pl.smem = (TY > 1 || C > 1) ? 2 * (size_t)TX * TY * TZ * P * sizeof(float) : 0;
    pl.g.chunks = chunks;
    pl.g.groups = groups;
    pl.g.cluster = (int)C;
    pl.g.rows_per_rank = C > 1 ? (int64_t)TY * R : a->dim;
    return pl;
}

/* The ND_AXIS_*_PF distance: units (blocks, or clusters of `cluster`) that pf8 / 8 of a
 * device-full of kern's blocks of `threads` make, or 0 where a grid of `units` has no unit that
 * far ahead (the occupancy, remembered by nd_cuda_blocks_per_sm, is looked up only when it
 * might). */
template <class K>
static cudaError_t prefetch_ahead(K kern, int threads, size_t smem, const nd_cuda_device_info *di,
                                  int cluster, int pf8, int64_t units, int64_t *ahead)
{
    *ahead = 0;
    if (pf8 <= 0 || di->mem_gbps < ND_AXIS_PF_MIN_GBPS ||
        units <= (int64_t)di->sm_count / cluster * pf8 / 8) /* at least one block an SM */
        return cudaSuccess;
    int per_sm = 0;
    nd_error err;
    if (nd_cuda_blocks_per_sm(kern, di->device, threads, smem, &per_sm, &err) != ND_OK) {
        const cudaError_t ce = cudaGetLastError();
        return ce != cudaSuccess ? ce : cudaErrorInvalidValue;
    }
    const int64_t a = (int64_t)per_sm * di->sm_count / cluster * pf8 / 8;
    *ahead = a > 0 && a < units ? a : 0;
    return cudaSuccess;
}

template <typename T, int P, int R, int MAXT>
static cudaError_t launch_cached(const axis_plan &pl, const void *x, void *y, int log,
                                 const nd_cuda_device_info *di, cudaStream_t stream)
{
    auto kern = log ? softmax_axis_kernel<T, P, R, MAXT, true>
                    : softmax_axis_kernel<T, P, R, MAXT, false>;
    axis_geom g = pl.g;
    g.pf_blocks = 0;
    /* ND_AXIS_CACHED_PF: 16-bit blocks of whole slabs */
    if constexpr (sizeof(T) == 2 && ND_AXIS_CACHED_PF > 0) {
        if (pl.grid.y == 1 && g.cluster == 1 && g.chunks == 1 &&
            (g.dim * g.inner * (int64_t)sizeof(T)) % 16 == 0 && nd_aligned(x, 16)) {
            auto pk = log ? softmax_axis_kernel<T, P, R, MAXT, true, true>
                          : softmax_axis_kernel<T, P, R, MAXT, false, true>;
            int64_t ahead = 0;
            cudaError_t ce = prefetch_ahead(pk, (int)(pl.block.x * pl.block.y * pl.block.z),
                                            pl.smem, di, 1, ND_AXIS_CACHED_PF, pl.grid.x, &ahead);
            if (ce != cudaSuccess)
                return ce;
            if (ahead > 0) {
                kern = pk;
                g.pf_blocks = (int)ahead;
                ND_PLAN_MORE(" pf=%d/8 ahead=%lld", ND_AXIS_CACHED_PF, (long long)ahead);
            }
        }
    }
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
    return cudaLaunchKernelEx(&cfg, kern, (const T *)x, (T *)y, g);
}

/* The split path's two launches around a stream-ordered workspace. */
template <typename T, int P>
static cudaError_t launch_split(const axis_plan &pl, const void *x, void *y, int log,
                                cudaStream_t stream)
{
    const size_t n = (size_t)pl.grid.y * pl.g.groups * pl.block.x * P;
    float2 *ws = NULL;
    cudaError_t ce = cudaMallocAsync((void **)&ws, n * sizeof(float2), stream);
    if (ce != cudaSuccess)
        return ce;
    softmax_axis_stats<T, P><<<pl.grid, pl.block, pl.smem, stream>>>((const T *)x, ws, pl.g);
    ce = cudaGetLastError();
    if (ce == cudaSuccess) {
        if (log)
            softmax_axis_apply<T, P, true><<<pl.grid, pl.block, pl.smem, stream>>>(
                (const T *)x, (T *)y, ws, pl.g);
        else
            softmax_axis_apply<T, P, false><<<pl.grid, pl.block, pl.smem, stream>>>(
                (const T *)x, (T *)y, ws, pl.g);
        ce = cudaGetLastError();
    }
    cudaError_t fe = cudaFreeAsync(ws, stream);
    return ce != cudaSuccess ? ce : fe;
}

template <typename T, int P>
static cudaError_t launch_rows(const axis_plan &pl, const void *x, void *y, int log,
                               const nd_cuda_device_info *di, cudaStream_t stream)
{
    switch (pl.rows) {
    case 0: return launch_split<T, P>(pl, x, y, log, stream);
    case 1: return launch_cached<T, P, 1, P >= 8 ? 512 : 1024>(pl, x, y, log, di, stream);
    case 2: return launch_cached<T, P, 2, P >= 8 ? 512 : 1024>(pl, x, y, log, di, stream);
    case 4: return launch_cached<T, P, 4, P >= 8 ? 512 : 1024>(pl, x, y, log, di, stream);
    case 8: return launch_cached<T, P, 8, P >= 8 ? 256 : 512>(pl, x, y, log, di, stream);
    case 16:
        if constexpr (P < 8 || ND_AXIS_MAX_ROWS_P8 >= 16)
            return launch_cached<T, P, 16, 256>(pl, x, y, log, di, stream);
        return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
    }
}

/* lcm(32, q): the least block of whole warps whose threads cycle through q pack-columns evenly */
static int64_t lcm32(int64_t q)
{
    int64_t l = 32;
    while (l % q != 0)
        l += 32;
    return l;
}

/*
 * The slab layout's block for these tensors (see softmax_axis_slab): x and y on the 16-byte grid
 * with whole packs in an inner row; tiles of q packs, the whole row or (tile_max > 0) the widest
 * tile of tile_min .. tile_max packs that divides it; a block of a multiple of lcm(32, q) threads
 * (so every pack of a thread is in its columns, and blocks are whole warps) with at least 4
 * threads a column. Returns the block's threads and fills g (one block a tile), or 0 where the
 * layout does not apply.
 */

static int slab_layout(const nd_softmax_args *a, size_t es, int tile_max, slab_geom *g)
{
    typedef slab_policy pol;
    const int vec = 16 / (int)es;
    if (!ND_AXIS_SLAB || a->inner % vec != 0 || (((uintptr_t)a->x | (uintptr_t)a->y) & 15) != 0)
        return 0;
    const int64_t row = a->inner / vec;
    if (a->dim * row > 0x7fffffff)
        return 0;
    int64_t q = 0;
    for (int64_t d = std::min(row, (int64_t)pol::max_q); d >= 1 && q == 0; d--) {
        if (row % d != 0 || (d < row && (d > tile_max || d < pol::tile_min)))
            continue;
        const int64_t l = lcm32(d);
        if (l <= pol::max_threads && pol::max_threads / l * l / d >= 4) /* see slab_allreduce */
            q = d;
    }
    if (q == 0)
        return 0;
    g->slab = a->dim * a->inner;
    g->inner = (int)(q * vec);
    g->q = (int)q;
    g->row = (int)row;
    g->rows = (int)a->dim;
    g->tiles = (int)(row / q);
    g->packs = (int)(a->dim * q);
    g->cluster = 1;
    g->units = a->outer * g->tiles;
    g->pf_units = 0;
    return (int)(pol::max_threads / lcm32(q) * lcm32(q));
}

/*
 * The slab plan (softmax_axis_slab), or false where another is the choice: the slab layout, the
 * fewest blocks per slab (up to a cluster of plan_cluster) that hold it at max_packs a thread,
 * leaving at least min_packs, and enough slabs to give every SM fill_blocks_per_sm blocks.
 */
static bool plan_slab(const nd_softmax_args *a, size_t es, int sms, slab_geom *g, int *threads,
                      int *packs)
{
    typedef slab_policy pol;
    /* the widest layout whose tile fits a cluster: tiles narrower by a step each time one does not */
    for (int tile_max = pol::tile_max(es);;) {
        const int nt = slab_layout(a, es, tile_max, g);
        if (nt == 0)
            return false;
        const int64_t S = g->packs, units = a->outer * g->tiles;
        for (int c = 1; c <= pol::plan_cluster; c++) {
            const int64_t G = (int64_t)c * nt;
            if (S > G * pol::max_packs(es))
                continue;
            const int64_t p = cdiv(S, G);
            if (p < pol::min_packs || units * c < (int64_t)sms * pol::fill_blocks_per_sm ||
                units * c > 0x7fffffff)
                return false;
            g->cluster = c;
            *threads = nt;
            *packs = (int)p;
            return true;
        }
        if (g->tiles == 1 || g->q <= pol::tile_min) /* a whole row, or the narrowest tile */
            return false;
        tile_max = g->q - 1;
    }
}

/* The two-pass slab plan (softmax_axis_slab_stats / merge / apply): segments of whole blocks'
 * strides, enough of them for two waves of blocks, each thread at least ND_AXIS_SLAB_UNROLL
 * packs. */
struct slab_split {
    int threads, nseg, seg_packs;
};

static bool plan_slab_split(const nd_softmax_args *a, size_t es, int sms, slab_geom *g,
                            slab_split *sp)
{
    const int nt = slab_layout(a, es, 0, g); /* whole rows only */
    if (nt == 0)
        return false;
    const int64_t S = g->packs;
    int64_t nseg = cdiv((int64_t)sms * (1024 / nt) * ND_AXIS_SLAB_SPLIT_WAVES, a->outer);
    nseg = std::max((int64_t)1, std::min(nseg, cdiv(S, (int64_t)nt * ND_AXIS_SLAB_UNROLL)));
    const int64_t seg_packs = cdiv(cdiv(S, nseg), nt) * nt;
    nseg = cdiv(S, seg_packs);
    if (a->outer * nseg > 0x7fffffff)
        return false;
    sp->threads = nt;
    sp->nseg = (int)nseg;
    sp->seg_packs = (int)seg_packs;
    return true;
}

/* The two-pass slab path's three launches around a stream-ordered workspace: each segment's
 * pairs, then each column's (max, log(sum) or -log2(sum)). */
template <typename T>
static cudaError_t launch_slab_split(const slab_geom &g, const slab_split &sp, int64_t outer,
                                     const void *x, void *y, int log, cudaStream_t stream)
{
    const size_t npart = (size_t)outer * sp.nseg * 2 * g.inner;
    float *ws = NULL;
    cudaError_t ce = cudaMallocAsync((void **)&ws, (npart + (size_t)outer * 2 * g.inner) * sizeof(float),
                                     stream);
    if (ce != cudaSuccess)
        return ce;
    const unsigned grid = (unsigned)(outer * sp.nseg);
    const dim3 merge_grid((unsigned)outer, (unsigned)cdiv(g.inner, 8)); /* 8 warps a block */
    softmax_axis_slab_stats<T><<<grid, sp.threads, 0, stream>>>((const T *)x, ws, g, sp.nseg,
                                                               sp.seg_packs);
    ce = cudaGetLastError();
    if (ce == cudaSuccess) {
        if (log)
            softmax_axis_slab_merge<true><<<merge_grid, 256, 0, stream>>>(
                ws, ws + npart, g.inner, sp.nseg);
        else
            softmax_axis_slab_merge<false><<<merge_grid, 256, 0, stream>>>(
                ws, ws + npart, g.inner, sp.nseg);
        ce = cudaGetLastError();
    }
    if (ce == cudaSuccess) {
        if (log)
            softmax_axis_slab_apply<T, true><<<grid, sp.threads, 0, stream>>>(
                (const T *)x, (T *)y, ws + npart, g, sp.nseg, sp.seg_packs);
        else
            softmax_axis_slab_apply<T, false><<<grid, sp.threads, 0, stream>>>(
                (const T *)x, (T *)y, ws + npart, g, sp.nseg, sp.seg_packs);
        ce = cudaGetLastError();
    }
    cudaError_t fe = cudaFreeAsync(ws, stream);
    return ce != cudaSuccess ? ce : fe;
}

/* Shared memory of a resident block beyond its rounds: the warps' pairs, then the segments'. */
static size_t res_red_bytes(int cols)
{
    return 2 * sizeof(float) * (size_t)std::max(kResThreads / 32 * cols, kResThreads);
}

/* The resident slab plan (softmax_axis_slab_res), or false: whole inner rows of q packs, q
 * dividing 32, at most kResMaxCols columns; one block an SM for at least three quarters of the
 * SMs; rounds in registers, then in shared memory as far as it holds them, and no more streamed
 * than ND_AXIS_RES_STREAM8 / 8 of those. */
static bool plan_slab_res(const nd_softmax_args *a, size_t es, const nd_cuda_device_info *di,
                          slab_geom *g, slab_res *r)
{
    if (!ND_AXIS_RES || !di->coop_launch || slab_layout(a, es, 0, g) == 0 || 32 % g->q != 0 ||
        g->inner > kResMaxCols)
        return false;
    const int64_t sms = di->sm_count;
    int64_t nseg = sms / a->outer;
    if (nseg < 1 || a->outer * nseg * 4 < sms * 3)
        return false;
    const int64_t rounds = cdiv(cdiv(g->packs, nseg), kResThreads);
    nseg = cdiv(g->packs, rounds * kResThreads);
    const int64_t room = ((int64_t)di->smem_per_block_optin - kResStaticSmem -
                          (int64_t)res_red_bytes(g->inner)) / (kResThreads * 16);
    const int64_t rr = std::min(rounds, (int64_t)ND_AXIS_RES_REG_ROUNDS);
    const int64_t sr = std::min(rounds - rr, std::min(room, (int64_t)kResMaxSmemRounds));
    if ((rounds - sr - rr) * 8 > (sr + rr) * ND_AXIS_RES_STREAM8)
        return false;
    r->nseg = (int)nseg;
    r->rounds = (int)rounds;
    r->reg_rounds = (int)rr;
    r->smem_rounds = (int)sr;
    return true;
}

/* The resident path's launch: cooperative (every block resident at once, or an error), around a
 * stream-ordered workspace of flag words, all empty. */
template <typename T>
static cudaError_t launch_slab_res(const slab_geom &g, const slab_res &r, int64_t outer,
                                   const void *x, void *y, int log, int dev, cudaStream_t stream)
{
    auto kernel = log ? softmax_axis_slab_res<T, true> : softmax_axis_slab_res<T, false>;
    const size_t smem = (size_t)r.smem_rounds * kResThreads * 16 + res_red_bytes(g.inner);
    nd_error err;
    if (nd_cuda_allow_smem(kernel, dev, smem, &err) != ND_OK) {
        const cudaError_t ce = cudaGetLastError();
        return ce != cudaSuccess ? ce : cudaErrorInvalidValue;
    }
    const size_t bytes = (size_t)outer * r.nseg * g.inner * sizeof(unsigned long long);
    unsigned long long *ws = NULL;
    cudaError_t ce = cudaMallocAsync((void **)&ws, bytes, stream);
    if (ce != cudaSuccess)
        return ce;
    if (!res_clears<T>())
        ce = cudaMemsetAsync(ws, 0xff, bytes, stream); /* ND_SPLIT_EMPTY */
    if (ce == cudaSuccess) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute attr[1];
        cfg.gridDim = dim3((unsigned)(outer * r.nseg));
        cfg.blockDim = dim3(kResThreads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        ce = cudaLaunchKernelEx(&cfg, kernel, (const T *)x, (T *)y, ws, g, r);
    }
    cudaError_t fe = cudaFreeAsync(ws, stream);
    return ce != cudaSuccess ? ce : fe;
}

template <typename T, int PACKS>
static cudaError_t launch_slab_packs(const slab_geom &sg, int threads, int64_t outer, const void *x,
                                     void *y, int log, const nd_cuda_device_info *di,
                                     cudaStream_t stream)
{
    auto kern = sg.tiles > 1 ? (log ? softmax_axis_slab<T, PACKS, true, true>
                                    : softmax_axis_slab<T, PACKS, false, true>)
                             : (log ? softmax_axis_slab<T, PACKS, true, false>
                                    : softmax_axis_slab<T, PACKS, false, false>);
    slab_geom g = sg;
    g.pf_units = 0;
    g.tile_div = nd_fast_div_make((uint32_t)g.tiles);
    g.q_mul = (1 << 16) / g.q + 1;
    g.block_rows = threads / g.q;
    g.rs = g.cluster * threads / g.q;
    g.pf_ub = g.slab * (int64_t)sizeof(T) / g.tiles;
    g.pf_share = (g.pf_ub + 16 * g.cluster - 1) / (16 * g.cluster) * 16;
    /* ND_AXIS_SLAB_PF: 16-bit tiles */
    if constexpr (sizeof(T) == 2 && ND_AXIS_SLAB_PF > 0) {
        if (g.tiles > 1) {
            auto pk = log ? softmax_axis_slab<T, PACKS, true, true, true>
                          : softmax_axis_slab<T, PACKS, false, true, true>;
            int64_t ahead = 0;
            cudaError_t ce = prefetch_ahead(pk, threads, 0, di, g.cluster, ND_AXIS_SLAB_PF,
                                            g.units, &ahead);
            if (ce != cudaSuccess)
                return ce;
            if (ahead > 0) /* a slab asked for whole before its first tile runs */
                ahead = std::max(ahead, (int64_t)g.tiles);
            if (ahead > 0 && ahead < g.units) {
                kern = pk;
                g.pf_units = (int)ahead;
                ND_PLAN_MORE(" pf=%d/8 ahead=%lld", ND_AXIS_SLAB_PF, (long long)ahead);
            }
        }
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)(outer * g.tiles * g.cluster));
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = stream;
    if (g.cluster > 1) {
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = g.cluster;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
    }
    return cudaLaunchKernelEx(&cfg, kern, (const T *)x, (T *)y, g);
}

template <typename T>
static cudaError_t launch_slab(const slab_geom &g, int threads, int packs, int64_t outer,
                               const void *x, void *y, int log, const nd_cuda_device_info *di,
                               cudaStream_t stream)
{
    constexpr int PMAX = slab_policy::max_packs(sizeof(T));
    static_assert(slab_policy::min_packs == 4 && PMAX <= 8, "the cases below");
    switch (packs) {
    case 4: return launch_slab_packs<T, 4>(g, threads, outer, x, y, log, di, stream);
    case 5: return launch_slab_packs<T, 5>(g, threads, outer, x, y, log, di, stream);
    case 6: return launch_slab_packs<T, 6>(g, threads, outer, x, y, log, di, stream);
    case 7: return launch_slab_packs<T, 7>(g, threads, outer, x, y, log, di, stream);
    case 8:
        if constexpr (PMAX >= 8)
            return launch_slab_packs<T, (PMAX >= 8 ? 8 : 4)>(g, threads, outer, x, y, log, di, stream);
        return cudaErrorInvalidValue;
    default: return cudaErrorInvalidValue;
    }
}

template <typename T>
static cudaError_t launch_typed(const axis_plan &pl, const void *x, void *y, int log,
                                const nd_cuda_device_info *di, cudaStream_t stream)
{
    constexpr int P16 = (sizeof(T) == 2 ? ND_AXIS_PACK16_BYTES : 16) / sizeof(T), P4 = 4 / sizeof(T);
    if (pl.pack == P16)
        return launch_rows<T, P16>(pl, x, y, log, di, stream);
    if (P4 > 1 && pl.pack == P4)
        return launch_rows<T, (P4 > 1 ? P4 : 1)>(pl, x, y, log, di, stream);
    return launch_rows<T, 1>(pl, x, y, log, di, stream);
}

/* One call's launch: the slab plan where it applies, else the column plan. */
static cudaError_t launch_axis(const nd_softmax_args *a, int log, const nd_cuda_device_info *di,
                               cudaStream_t stream)
{
    const int sms = di->sm_count;
    const size_t es = nd_dtype_size(a->dtype);
    slab_geom sg;
    int threads = 0, packs = 0;
    if (plan_slab(a, es, sms, &sg, &threads, &packs)) {
        ND_PLAN("axis slab packs=%d block=%d cluster=%d tile=%d grid=%lld", packs, threads,
                sg.cluster, sg.q, (long long)(a->outer * sg.tiles * sg.cluster));
        switch (a->dtype) {
        case ND_FLOAT16: return launch_slab<__half>(sg, threads, packs, a->outer, a->x, a->y, log, di, stream);
        case ND_BFLOAT16:
            return launch_slab<__nv_bfloat16>(sg, threads, packs, a->outer, a->x, a->y, log, di, stream);
        default: return launch_slab<float>(sg, threads, packs, a->outer, a->x, a->y, log, di, stream);
        }
    }
    axis_plan pl = plan_axis(a, es, sms);
    slab_res rs;
    if (pl.rows == 0 && plan_slab_res(a, es, di, &sg, &rs)) {
        ND_PLAN("axis slab-res block=%d segments=%d rounds=%d regs=%d smem=%d grid=%lld",
                kResThreads, rs.nseg, rs.rounds, rs.reg_rounds, rs.smem_rounds,
                (long long)(a->outer * rs.nseg));
        const int dev = di->device;
        cudaError_t ce;
        switch (a->dtype) {
        case ND_FLOAT16:
            ce = launch_slab_res<__half>(sg, rs, a->outer, a->x, a->y, log, dev, stream);
            break;
        case ND_BFLOAT16:
            ce = launch_slab_res<__nv_bfloat16>(sg, rs, a->outer, a->x, a->y, log, dev, stream);
            break;
        default: ce = launch_slab_res<float>(sg, rs, a->outer, a->x, a->y, log, dev, stream);
        }
        if (ce != cudaErrorCooperativeLaunchTooLarge)
            return ce;
        /* the grid does not fit at once after all (a device shared with other processes): the
         * two-pass path below, which does not need it to */
        (void)cudaGetLastError();
    }
    slab_split sp;
    if (pl.rows == 0 && ND_AXIS_SLAB_SPLIT && plan_slab_split(a, es, sms, &sg, &sp)) {
        /* the column plan would read x twice too: the slab layout's segments do it faster */
        ND_PLAN("axis slab-split block=%d segments=%d seg_packs=%d grid=%lld", sp.threads, sp.nseg,
                sp.seg_packs, (long long)(a->outer * sp.nseg));
        switch (a->dtype) {
        case ND_FLOAT16: return launch_slab_split<__half>(sg, sp, a->outer, a->x, a->y, log, stream);
        case ND_BFLOAT16:
            return launch_slab_split<__nv_bfloat16>(sg, sp, a->outer, a->x, a->y, log, stream);
        default: return launch_slab_split<float>(sg, sp, a->outer, a->x, a->y, log, stream);
        }
    }
    ND_PLAN("axis %s pack=%d rows=%d block=%ux%ux%u grid=%ux%u cluster=%d",
            pl.rows ? "cached" : "split", pl.pack, pl.rows, pl.block.x, pl.block.y, pl.block.z,
            pl.grid.x, pl.grid.y, pl.g.cluster);
    switch (a->dtype) {
    case ND_FLOAT16: return launch_typed<__half>(pl, a->x, a->y, log != 0, di, stream);
    case ND_BFLOAT16: return launch_typed<__nv_bfloat16>(pl, a->x, a->y, log != 0, di, stream);
    default: return launch_typed<float>(pl, a->x, a->y, log != 0, di, stream);
    }
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
    cudaError_t ce = launch_axis(a, log, di, stream);
    if (ce == cudaSuccess)
        ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return nd_error_set(err, ND_EDEVICE, "softmax over axis (outer=%lld dim=%lld inner=%lld): %s",
                            (long long)a->outer, (long long)a->dim, (long long)a->inner,
                            cudaGetErrorString(ce));
    return ND_OK;
}
