/*
 * rows_split.cuh - the split-row path of the row engine: rows longer than one block's registers,
 * spread over a plain (non-persistent, non-cluster) grid of chunk blocks that combine their
 * statistics through global memory. Included by rows.cuh before nd_rows_run.
 *
 * Technique. A row of P packs (16 bytes) is cut into C = ceil(P / (THREADS * PACKS)) chunks of
 * THREADS * PACKS consecutive packs (the op's split_threads x 8 packs: 512 x 8 = 64 KB, or
 * 256 x 8 = 32 KB); one block holds one chunk
 * in registers, laid out like a block of the block kernel (thread t holds packs t, t + THREADS,
 * ...) so every access is a coalesced 16-byte one and x is read from memory exactly once. The
 * Op's stats run unchanged against nd_split_ctx, whose allreduce<K>(v, op) is
 *   1. the block all-reduce (nd_block_allreduce);
 *   2. thread 0 stores the block's K <= 4 floats as one or two 64-bit words in the workspace
 *      slot [row][round][chunk]; the workspace starts as all ones, a pattern no store writes,
 *      so each word is its own flag (no fence, no counter);
 *   3. warp 0 waits for and reads the row's C slots of this round and combines them in one fixed
 *      order (lane l folds chunks l, l + 32, ... in order, spinning on each until it is written,
 *      then a shuffle tree in lane order), so every block of the row, and every run, gets the
 *      same bits whatever the timing; the result reaches the block through shared memory.
 * Each all-reduce of an op has its own slots (at most ND_SPLIT_ROUNDS, 2). The row's first
 * element (ctx.first) is one load per thread, as in the block kernel; the per-row mean/rstd are
 * written by thread 0 of chunk 0 only.
 *
 * Why not the cluster or stream kernels: they are persistent grids, and persistent grids are
 * slow on this GPU (a grid-stride copy reaches 3.9 of the 4.25 TB/s a grid of short blocks
 * does, bench/results/copy_probe_h200.txt); a cluster of 16 also waits on cluster barriers twice
 * per row, and the stream kernel reads x twice. Chunk blocks live for one chunk, like the copy.
 *
 * Workspace: one cudaMallocAsync'd block per call (the ticket, then the slots, all set to ones by
 * cudaMemsetAsync), freed with cudaFreeAsync on the same stream: stream-ordered, so it works
 * under CUDA graph capture (bench_gpu times captured graphs) and needs no state between calls.
 *
 * Measurements (H200, bench_gpu, % of the same-run copy ceiling). First form, a counter per row
 * and a fence (cluster/stream -> split; float32 / float16 / bfloat16):
 *                  128x1048576 (64 / 32 chunks;     512x262144 (16 / 8 chunks;
 *                  was the stream kernel)            was a cluster of 16 / 8)
 *     layernorm    34.7 25.9 25.7 -> 65.4 56.8 57.0   58.4 60.5 59.7 -> 71.7 57.1 56.9
 *     rmsnorm      48.9 42.1 41.6 -> 72.9 74.3 73.9   64.2 74.6 75.6 -> 78.4 75.3 75.7
 *     softmax      42.5 32.4 31.7 -> 67.7 62.2 61.8   63.0 64.9 63.7 -> 76.1 65.1 64.8
 *     log_softmax  42.8 33.4 32.7 -> 67.1 67.2 66.3   63.8 70.4 70.1 -> 77.8 72.7 72.3
 * That form took rows of 9 chunks or more. The flag-word form (this one), taking every row
 * beyond a block, against that dispatch in one later run: 512x262144 16-bit (8 chunks, was a
 * cluster) +3 to +7 points (rmsnorm 74.5 -> 81.6, softmax 64.6 -> 71.0), 2048x65536 (4 / 2
 * chunks, was a cluster of 4 / 2) rmsnorm/softmax/log_softmax float32 +4 to +6, 16-bit 0 to
 * +4, layernorm float32 +0.3; 49152x32768 float32 (2 chunks) +1.5 to +2 except layernorm -3.4;
 * 128x1048576 unchanged. Still 15-40 points from the ceiling where the block kernel, the same
 * block shape without the cross-block step, reaches 96-98%: a block waits, its registers held
 * and no loads in flight, for the slowest chunk of its row.
 * Tried: two phases, statistics blocks that publish and end and apply blocks ~8 MB of x later
 * that re-read their chunk from L2 (bench/split_l2_probe.cu: +1 to +4 points for a lean RMSNorm).
 * With the ops' statistics run in both blocks, 16-bit rows lost 5-13 points on an H100
 * (bench/results/split_two_phase_h100.txt).
 * Tried (H100, three alternating rounds, bench/results/rows_split_prefetch_h100.txt): thread 0
 * of each block asking for chunk blockIdx.x in L2 (one cp.async.bulk.prefetch.L2) before taking
 * its ticket, a guess at the chunk it will get, so the ticket's atomic and the first DRAM reads
 * overlap: 16-bit 2048x65536 lost 3-4 points (LayerNorm 88.3 -> 85.9, softmax 94.8 -> 90.8),
 * 128x1048576 moved -0.5 to +1. And LayerNorm's chunk blocks asking for all their parameters in
 * L1 (prefetch.global.L1) before the statistics, where ncu put 15% of the warp stall samples
 * on the parameter loads of the output loop (from L2, one pack ahead): 16-bit lost 0.3-1.5.
 * Tried: each chunk's x kept in shared memory (stored as it arrives, read back for the output)
 * so that no register holds it across the wait; the 16-bit LayerNorm kernel's 28-byte spill went
 * to 0, and 65536 columns lost 2 points, 1048576 gained 1, the other ops lost 1-4 (H100,
 * bench/results/split_smem_h100.txt).
 * What LayerNorm's long rows lose to RMSNorm's is mostly its second parameter: with beta's
 * pointer set to gamma's (a probe; its second loads then hit L1) 128x1048576 went float32 86.1
 * -> 91.7% of the copy ceiling, 16-bit +2.4 to +2.7 (H100). Tried for that: chunk blocks holding
 * the same columns of two rows (half the packs of each, 512 threads), so each parameter pack
 * served both rows; the kernels spilled 8-56 bytes at 64 registers and LayerNorm lost 3-7
 * points at 262144 and 1048576 columns, 14-17 at 65536 (RMSNorm: within 0.5, +1.5 at 16-bit
 * 262144). bench/results/ln_split_params_h100.txt. Then blocks of two groups of chunk threads,
 * each group the same columns of its own row (its own all-reduce on a named barrier, its own
 * wait), one row a thread, so the groups' parameter loads meet in L1: every op lost, LayerNorm
 * 16-bit 128x1048576 88.7 / 86.2 -> 80.8 / 78.7, 2048x65536 3-5.5 points, the other ops 0.5-7
 * (H100, bench/results/split_rows2_h100.txt). And the parameters with an L2 evict-last policy:
 * DRAM reads of float32 128x1048576 fell 606 -> 577 MB, LayerNorm moved -2.1 to +0.9
 * (bench/results/param_l2_h100.txt; RMSNorm float32 keeps it, ND_ROWS_PARAM_L2_LAST).
 * And chunk blocks in thread-block clusters of two, the same chunk of two rows, rank 0 bulk-copying
 * gamma and rank 1 beta into shared memory and each reading the other's through distributed
 * shared memory (the pair's ticket passed from rank 0, cluster barriers after the copies and
 * before leaving): correct, but the clusters alone, parameters still from global memory, cost
 * 13-17 points at every long shape (H200, float16 2048x65536 85.6 -> 70.7; ncu 154 -> 187 us),
 * and sharing the parameters lost 1-3 more (128x1048576 float16 77.9 -> 59.2).
 * bench/results/split_pairs_h200.txt. On an H200 the parameters' traffic is not the bound at
 * all: with every chunk block on an SM reading the same chunk's parameters (a probe with wrong
 * results: the parameter pointers offset to chunk %smid % C; L1 hit rate 2 -> 47%, L2 traffic
 * -28%) LayerNorm float16 128x1048576 took as long (ncu 162.6 -> 164.2 us), and beta read from
 * gamma's lines moved the long shapes -10 to +2.6 points (bench/results/
 * split_param_probes_h200.txt). With no parameters at all (a probe, null gamma and beta;
 * bench/results/probes_h200.txt) LayerNorm's 128x1048576 ran 77.1-78.1% of the copy ceiling
 * against 73.5-78.0, 512x262144 82.0-89.2 against 78.6-85.7: what keeps them below 90 is not
 * the parameters.
 * Tried (H200, bench/results/split_team_h200.txt): teams of C blocks, member m holding chunk m of
 * several rows in turn, its chunk of the team's next row bulk-copied into shared memory (or asked
 * of L2) before it waits for the current row, so the wait has loads in flight. Every form lost
 * 0-9 points (bulk copies) or 3-20 (L2): its grids are a wave of the device, or a few rows a
 * block, and such grids stay below short blocks here, as the persistent copy does.
 * Tried (H200, bench/results/split_loop_h200.txt): chunk blocks that hold no x, looping over
 * their chunk twice as the loop kernel does over a row (32-40 registers, 1536-2048 threads an
 * SM; the second pass from L2) with this kernel's ticket and slots between the passes, so the
 * SM's other blocks load through a block's wait. Every op and dtype lost, more the more chunks a
 * row has: 16-bit chunks of 64 KB 5-14 points (2048x65536 in 2 chunks 81-90 -> 74-80), of
 * 32 KB 7-26, of 128 KB 5-25; float32 0-41.
 * Tried (H200, bench/split_smem_probe.cu, bench/results/split_smem_h200.txt): chunks held in
 * shared memory instead of registers, brought by bulk copies (8 a chunk, an mbarrier each), 32-38
 * registers a thread, so an SM holds 192-224 KB of x (2-6 blocks of 32-112 KB) where registers
 * hold 128 KB, and chunks up to 112 KB (fewer a row). RMSNorm and LayerNorm, every shape and
 * chunk size: 7-25 points below this kernel (float32 2048x65536 RMSNorm 90.9 -> 77-80.5); the
 * smallest chunks with the most blocks an SM did best.
 * Tried (H100, bench/results/split_psmid_h100.txt): the parameter probe above in which every
 * chunk block on an SM reads the same chunk's parameters (wrong results), now on an H100:
 * LayerNorm float32 128x1048576 83.8 -> 89.8, every other long shape -3.0 to 0. An SM-affine
 * chunk order was not built for the one shape.
 * Tried (H100 only, bench/results/hold_h100.txt): rows of 8192 packs (16-bit 65536 columns,
 * float32 32768) in one block of 512 threads a row holding the row on chip, 8 packs a thread in
 * registers and 8 in shared memory (cp.async into thread-private slots; or 4 + 12), two rows an
 * SM and no wait on other blocks. Lower at every such shape: 16-bit 2048x65536 3-27 points
 * below this kernel (bfloat16 spilled at 64 registers), float32 49152x32768 1.5-8 below the big
 * block.
 * Tried (H200, bench/split_polls.patch, bench/results/split_polls_h200.txt): the waiting lanes
 * keeping four looks at their words in flight, a quarter of an L2 round trip apart, so a word is
 * seen sooner after it lands: softmax and log_softmax lost 1-3 points, RMSNorm up to 2.6,
 * LayerNorm (spilling 8-80 bytes for the looks' registers) 1-17. Seeing the word sooner is not
 * what these rows lose.
 * Tried (H200, bench/split_stagger.patch, bench/results/split_stagger_h200.txt): the first wave's
 * blocks starting their loads up to 3 or 6 us apart, in case a device-full of blocks loads, then
 * waits, in step: softmax +0.3 to +1.9 points at eight of nine long shapes, RMSNorm -2 to -4.5 at
 * 16-bit 128x1048576 (the delay itself, never won back), the rest within 0.6. The waves do not
 * run in step enough to matter.
 * Where the time goes, by probes (H200, bench/split_exchange.patch, wrong results; bench/results/
 * split_exchange_h200.txt): with no exchange at all (each block takes its own sums) 128x1048576
 * ran 86-95% of the copy ceiling instead of 75-82, 512x262144 87.5-96 instead of 79.5-88.5, but
 * LayerNorm's 16-bit rows stayed at 86-89.5. In rows of 2-8 chunks, waiting only for the block's
 * own published word (not the other chunks') recovered 2-5.5 of the points and skipping that
 * round trip too 0-3 more; blockIdx.x for the ticket gave 1-4 at 262144-1048576 columns (not
 * taken: the order blocks start in is not promised). Chunks held partly in shared memory (8 packs
 * a thread in registers, up to 13 more by cp.async; bench/split_hybrid_probe.cu), so an SM holds
 * up to 2.6x the bytes of x: within the probe, float32 RMSNorm +5 to +12 at 262144-1048576
 * columns, 16-bit rows at most +2, and at 84 KB a chunk 128x1048576 16-bit RMSNorm -5.6 to -5.8,
 * LayerNorm -7.7 to -12; and the probe's register-only chunks ran 8-12 points below this kernel,
 * so none of it beats it.
 */
#ifndef ND_ROWS_SPLIT_CUH
#define ND_ROWS_SPLIT_CUH

/* LayerNorm's parameters loaded one pack ahead in the split kernel too (nd_param_pipe). H200,
 * two runs each, float16 / bfloat16: 128x1048576 59.5 -> 62.5% of the copy ceiling, 2048x65536
 * 65 -> 67-68, 512x262144 61.5 -> 65-66; float32 keeps the old order (8 packs a thread). */
#ifndef ND_ROWS_PARAM_PIPE_SPLIT
#define ND_ROWS_PARAM_PIPE_SPLIT ND_ROWS_PARAM_PIPE_BLOCK
#endif

/* 0: never (rows beyond a block go to the cluster and stream kernels as before); 1: the split
 * path where nd_rows_split_try's measured choice takes it; 2: wherever it can hold the row
 * (for tests and benchmarks). */
#ifndef ND_ROWS_SPLIT
#define ND_ROWS_SPLIT 1
#endif
/* ND_ROWS_SPLIT 1 takes the split path for rows of at least this many chunks (fewer go to the
 * cluster kernel; see the measurements above). */
#ifndef ND_ROWS_SPLIT_MIN_CHUNKS
#define ND_ROWS_SPLIT_MIN_CHUNKS 2
#endif
/* Chunk shape: threads per block and packs per thread (0: the op's split_threads(element
 * bytes) and kRegBytes / 16). */
#ifndef ND_ROWS_SPLIT_THREADS
#define ND_ROWS_SPLIT_THREADS 0
#endif
#ifndef ND_ROWS_SPLIT_PACKS
#define ND_ROWS_SPLIT_PACKS 0
#endif
/* Threads per SM the chunk kernel's launch bounds ask for (its register cap), unless the op's
 * min_blocks names a number for ND_CTX_CROSS_BLOCK (nd_rows_min_blocks). */
#ifndef ND_ROWS_SPLIT_MIN_THREADS
#define ND_ROWS_SPLIT_MIN_THREADS ND_ROWS_MIN_THREADS_PER_SM
#endif
/* The chunk kernel pipes the parameters of 16-bit rows of more than ND_ROWS_PIPE16_MAX_PACKS
 * packs a thread where its register cap is at least this many (the pipe's 8 more registers then
 * fit: LayerNorm's 16-bit chunks of 256 threads x 8 packs at 80 spill nothing with it). H100,
 * three alternating rounds, float16 / bfloat16 LayerNorm in chunks of 256 x 8 at 80 registers
 * without the pipe -> with it: 2048x65536 78.7 / 78.3 -> 88.2 / 88.2% of the copy ceiling,
 * 512x262144 72.4 / 72.0 -> 84.1 / 84.2, 128x1048576 67.9 / 67.5 -> 79.9 / 80.5
 * (bench/results/rows_split_h100.txt). */
#ifndef ND_ROWS_SPLIT_PIPE16_MIN_REGS
#define ND_ROWS_SPLIT_PIPE16_MIN_REGS 80
#endif

/* 1: in rows of ND_ROWS_SPLIT_PF_MIN_CHUNKS chunks or more, a chunk block, once it has published
 * its first statistics and before it waits for its row's other chunks, asks L2 for the chunk of
 * the ticket ND_ROWS_SPLIT_PF_AHEAD8 / 8 of a device-full of blocks later (a chunk that a block
 * starting a little after this one ends will read): one cp.async.bulk.prefetch.L2, so the DRAM
 * has work while blocks wait with no loads of their own in flight. 0: never. H200, three
 * alternating rounds (bench/results/rows_split_pf.txt), rows of 16-128 chunks: 128x1048576
 * +1.6 to +3.8 points of the copy ceiling (float32 RMSNorm 0), 512x262144 16-bit LayerNorm
 * +1.4 / +1.7, float32 softmax / log_softmax +2.7, the others within 0.5 (half a device-full
 * ahead). A device-full ahead: 16-bit softmax / log_softmax 128x1048576 2-3 higher still,
 * LayerNorm and RMSNorm 1-3.5 lower; so the op's policy names it (split_pf_ahead8), for a
 * device of the fast class (nd_rows_run) and for another: on an H100 softmax and log_softmax
 * do best at 5 eighths (float32 128x1048576 +3.1-3.4 against a device-full).
 * In rows of 2-8 chunks it lost 1-4 points (16-bit 2048x65536), and its code carried in the
 * kernel that does not prefetch cost those 0.5-1.6: so it is a kernel of its own. */
#ifndef ND_ROWS_SPLIT_PF
#define ND_ROWS_SPLIT_PF 1
#endif
#ifndef ND_ROWS_SPLIT_PF_AHEAD8 /* 0: the op policy's split_pf_ahead8 */
#define ND_ROWS_SPLIT_PF_AHEAD8 0
#endif
#ifndef ND_ROWS_SPLIT_PF_MIN_CHUNKS
#define ND_ROWS_SPLIT_PF_MIN_CHUNKS 16
#endif

/* 1: rows whose length is a whole number of chunks, with x, y and the parameters on the 16-byte
 * grid (nd_rows_on_grid), take a twin of the chunk kernel that knows every pack it holds is whole
 * (the block kernel's ND_ROWS_EXACT for chunks): x loaded without a bounds check on any pack and
 * no grid offsets; an op with two parameters (LayerNorm) loads them and stores y unchecked too
 * (ND_ROWS_EXACT_OUT). The row length stays a run-time value (a row is any number of chunks).
 * H100, two alternating rounds against the generic chunk kernel (bench/results/
 * rows_split_exact.txt), % of the copy ceiling: LayerNorm 2048x65536 89.5-92.3 -> 92.8-95.7,
 * 512x262144 86.7-91.1 -> 89.6-94.3, 128x1048576 81.3-83.0 -> 84.0-85.4 (all three dtypes);
 * the other ops within -0.5 to +1.1. */
#ifndef ND_ROWS_SPLIT_EXACT
#define ND_ROWS_SPLIT_EXACT 1
#endif
/* The twin's 16-bit chunks: threads per SM its launch bounds ask for (0: the generic kernel's
 * blocks, the op's min_blocks), and whether its float16 chunks pipe the parameters whatever the
 * register cap (1; bfloat16's spilled 12 bytes that way at 64 registers, nvcc 13). Without the
 * bounds checks LayerNorm's 16-bit chunks of 256 x 8 packs fit 64 registers (4 blocks an SM)
 * where the generic kernel takes 80 (3). H100, against the twin at 3 blocks and piped, two runs
 * of 2 and 3 alternating rounds (bench/results/rows_split_exact.txt), % of the copy ceiling,
 * at 4 blocks piped / not: float16 128x1048576 85.3 -> 88.8 / 86.7, 512x262144 89.6 -> 91.8 /
 * 90.7, 2048x65536 92.9 -> 94.4 / 94.7; bfloat16 84.2 -> 85.3 / 84.9, 89.5 -> 90.2 / 90.3,
 * 92.9 -> 91.6 / 93.8. So float16 pipes and bfloat16 does not. The other ops name no
 * min_blocks and ask for 1024 threads an SM already, so only LayerNorm's chunks change. */
#ifndef ND_ROWS_SPLIT_EXACT_SM_THREADS16
#define ND_ROWS_SPLIT_EXACT_SM_THREADS16 1024
#endif
#ifndef ND_ROWS_SPLIT_EXACT_PIPE16
#define ND_ROWS_SPLIT_EXACT_PIPE16 1
#endif

/* The share of the device one launch may need resident at once: a row's chunks must fit in
 * 1 / ND_ROWS_SPLIT_SHARE of the blocks the device holds (see the deadlock argument at the
 * kernel; 4 = the daemon's default number of streams per device). */
#ifndef ND_ROWS_SPLIT_SHARE
#define ND_ROWS_SPLIT_SHARE 4
#endif

/* ---------------------------------------------------------------------------------------------
 * Workspace and context
 * ------------------------------------------------------------------------------------------- */

/* A slot holds one block's K <= 4 floats of one round as ND_SPLIT_WORDS 64-bit words (floats
 * 2w and 2w + 1 in word w; LayerNorm sends 3: a double and a float), each written and read whole
 * (st/ld.relaxed.gpu.b64 are single-copy atomic), so each word is its own flag: the workspace
 * starts as all ones, and a store never writes that pattern (nd_split_word: the only values
 * with it are NaNs, two float NaNs or one double NaN, and it is written one lower, the same
 * NaN still). No fence, no counter: a reader that sees a word sees its data. An op's
 * all-reduces get a slot each: at most ND_SPLIT_ROUNDS. */
enum { ND_SPLIT_K = 4, ND_SPLIT_WORDS = 2, ND_SPLIT_ROUNDS = 2 };

struct nd_split_ws {
    unsigned *ticket;         /* next (row, chunk) to hand out, in the order blocks start; all
                                 ones at first, so ticket t is the (t+1)-th increment's old value */
    unsigned long long *slot; /* [rows][ND_SPLIT_ROUNDS][chunks][ND_SPLIT_WORDS] */
    int chunks;               /* C, chunks per row */
};

/* A slot's two words in one access (16-byte aligned; each word single-copy atomic on its own):
 * one round trip to L2 for a 3-4 float partial instead of two. */
__device__ __forceinline__ void nd_split_store2(unsigned long long *p, unsigned long long a,
                                                unsigned long long b)
{
    asm volatile("st.relaxed.gpu.global.v2.b64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ void nd_split_load2(const unsigned long long *p, unsigned long long &a,
                                               unsigned long long &b)
{
    asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

/* Wait for and combine every chunk's slot of one round, in a fixed order, in one warp: lane l
 * folds chunks l, l + 32, ... in order (spinning on each word until it is written), then a
 * shuffle tree (lane i takes lane i + off) leaves the result in lane 0, which every lane takes. */
template <int K, int SLEEP = 0, class O>
__device__ __forceinline__ void nd_split_gather(float (&v)[K], O op, const unsigned long long *slots,
                                                int chunks)
{
    const int lane = threadIdx.x & 31;
    float a[K] = {}; /* lanes >= chunks: never read */
    for (int c = lane; c < chunks; c += 32) {
        unsigned long long w[ND_SPLIT_WORDS];
        if constexpr (K > 2) {
            do
                nd_split_load2(slots + c * ND_SPLIT_WORDS, w[0], w[1]);
            while (w[0] == ND_SPLIT_EMPTY || w[1] == ND_SPLIT_EMPTY);
        } else {
            w[0] = nd_split_wait<SLEEP>(slots + c * ND_SPLIT_WORDS);
        }
        float b[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            b[i] = __uint_as_float((unsigned)(w[i / 2] >> (32 * (i & 1))));
        if (c == lane) {
#pragma unroll
            for (int i = 0; i < K; i++)
                a[i] = b[i];
        } else {
            op(a, b);
        }
    }
    const int n = chunks < 32 ? chunks : 32;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
        float b[K];
#pragma unroll
        for (int i = 0; i < K; i++)
            b[i] = __shfl_down_sync(0xffffffffu, a[i], off);
        if (lane + off < n)
            op(a, b);
    }
#pragma unroll
    for (int i = 0; i < K; i++)
        v[i] = __shfl_sync(0xffffffffu, a[i], 0);
}

struct nd_split_smem {
    nd_rows_reduce_smem reduce;
    float bcast[2][ND_SPLIT_K]; /* the row's result, by round parity (see nd_block_reduce_smem) */
};

/* Nanoseconds an Op's chunk blocks that do not prefetch sleep between two looks at a word not yet
 * written: Op::kSplitSleep where it names one, else 0 (spin). */
template <class Op, class = void> struct nd_split_sleep {
    static constexpr int value = 0;
};
template <class Op> struct nd_split_sleep<Op, std::void_t<decltype(Op::kSplitSleep)>> {
    static constexpr int value = Op::kSplitSleep;
};

/* The Ctx of a chunk block (see the Op interface in rows.cuh). Thread t's pack i is pack
 * g + i * THREADS of the row, g = chunk * THREADS * PACKS + t. WH (ND_ROWS_SPLIT_EXACT): the row
 * is whole chunks on the 16-byte grid, every pack whole. SLEEP: nd_split_sleep's. */
template <int VEC, int PACKS, int THREADS, bool WH = false, int SLEEP = 0>
struct nd_split_ctx : nd_group_row<VEC, PACKS, WH> {
    static constexpr int kKind = ND_CTX_CROSS_BLOCK;
    int row;  /* rows * chunks < 2^31 */
    nd_split_ws ws;
    int *round;
    nd_split_smem *smem;
    const char *pf;    /* ND_ROWS_SPLIT_PF: bytes [pf, pf + pf_bytes) of x to ask L2 for once this
                          block has published its first slot (thread 0; pf_bytes 0: none) */
    unsigned pf_bytes;
    /* block all-reduce; thread 0 publishes the block's slot; warp 0 waits for the row's slots
     * and combines them; the result reaches the block through shared memory */
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        static_assert(K <= ND_SPLIT_K, "a slot holds ND_SPLIT_K floats");
        auto &sm = *reinterpret_cast<nd_cluster_reduce_smem<K> *>(&smem->reduce);
        const int r = (*round)++;
        if (r >= ND_SPLIT_ROUNDS) /* an op with more all-reduces than the workspace has slots */
            __trap();
        nd_block_allreduce<K>(v, op, sm.block, r);
        const unsigned long long *slots =
            ws.slot + ((int64_t)row * ND_SPLIT_ROUNDS + r) * ws.chunks * ND_SPLIT_WORDS;
        if (threadIdx.x == 0) { /* g = chunk * THREADS * PACKS */
            unsigned long long *mine = const_cast<unsigned long long *>(slots) +
                                       this->g / (THREADS * PACKS) * ND_SPLIT_WORDS;
            if constexpr (K > 2)
                nd_split_store2(mine, nd_split_word<K>(v, 0), nd_split_word<K>(v, 1));
            else
                nd_split_store(mine, nd_split_word<K>(v, 0));
            if (ND_ROWS_SPLIT_PF && r == 0 && pf_bytes != 0)
                nd_prefetch_l2(pf, pf_bytes);
        }
        if (threadIdx.x < 32) {
            nd_split_gather<K, SLEEP>(v, op, slots, ws.chunks);
            if (threadIdx.x == 0) {
#pragma unroll
                for (int i = 0; i < K; i++)
                    smem->bcast[r & 1][i] = v[i];
            }
        }
        __syncthreads();
#pragma unroll
        for (int i = 0; i < K; i++)
            v[i] = smem->bcast[r & 1][i];
    }
};

/* ---------------------------------------------------------------------------------------------
 * Kernel
 *
 * Grid: exactly rows * C blocks, not persistent. A block's (row, chunk) is its ticket, taken
 * from ws.ticket when it starts: ticket t -> row t / C, chunk t % C (not blockIdx, whose order
 * of starting is not promised).
 *
 * Why the wait in allreduce always ends (no cooperative launch). Tickets are handed out in the
 * order blocks start, so when a block holds a ticket of row r, every ticket below it has gone
 * to a block that has started. A block waits only for the other chunks of its own row. Take the
 * lowest row r with a block still running, while the launch is stuck: every row below r is done,
 * so every running block of this launch holds a ticket >= r * C. If some chunk of r has no block
 * yet, no ticket of a later row has been handed out, so the launch's running blocks are all of
 * row r: at most C - 1 of them. The launch checks that C blocks of the kernel fit on the device
 * at once (occupancy x SMs), so a slot is free (or one is freed by a kernel of another stream,
 * which does not wait on us) and the next block starts and takes the next ticket of row r.
 * Once all C chunks of r have started, they all publish and all pass the wait. By induction
 * every row completes.
 * Several launches at once (the daemon runs one batch per stream) share the slots: each stuck
 * launch holds at most C - 1 waiting blocks, so S launches cannot block each other while
 * S * (C - 1) < the blocks the device holds. nd_rows_split_try asks for C <= that capacity /
 * ND_ROWS_SPLIT_SHARE, which covers the daemon's default of 4 streams; a daemon configured with
 * more streams all running rows of near that limit at once is not covered.
 * ------------------------------------------------------------------------------------------- */

/* Blocks per SM the chunk kernel's launch bounds ask for, and whether its 16-bit rows pipe their
 * parameters (at a register cap of ND_ROWS_SPLIT_PIPE16_MIN_REGS or more, or where the block
 * kernel would). Constants, so device code reads them without calling host functions. */
template <class Op, class T, int PACKS, int THREADS, bool WH = false> struct nd_split_bounds {
    static constexpr int min_blocks_generic =
        nd_rows_min_blocks<Op>(ND_CTX_CROSS_BLOCK, (int)sizeof(T), PACKS, THREADS,
                               ND_ROWS_SPLIT_MIN_THREADS / THREADS);
    static constexpr int min_blocks = WH && sizeof(T) == 2 && ND_ROWS_SPLIT_EXACT_SM_THREADS16
                                          ? ND_ROWS_SPLIT_EXACT_SM_THREADS16 / THREADS
                                          : min_blocks_generic;
    static constexpr int regs = 65536 / (min_blocks * THREADS) & ~7;
    static constexpr bool pipe = nd_block_pipe_ok<T>(PACKS) ||
                                 (sizeof(T) == 2 && (regs >= ND_ROWS_SPLIT_PIPE16_MIN_REGS ||
                                                     (WH && ND_ROWS_SPLIT_EXACT_PIPE16 &&
                                                      std::is_same<T, __half>::value)));
};

template <class Op, class T, int VEC, int PACKS, int THREADS, int PF8, bool WH = false>
__global__ void __launch_bounds__(THREADS, (nd_split_bounds<Op, T, PACKS, THREADS, WH>::min_blocks))
nd_rows_split_kernel(nd_rows_args<T> a, typename Op::Params prm, nd_split_ws ws)
{
    constexpr int N = PACKS * VEC;
    /* WH (ND_ROWS_SPLIT_EXACT): whole chunks on the grid; WO: y and parameters unchecked too */
    constexpr bool WO = WH && ND_ROWS_EXACT_OUT && Op::kParams >= 2;
    __shared__ nd_split_smem smem;
    __shared__ unsigned ticket;
    if (threadIdx.x == 0)
        ticket = atomicAdd(ws.ticket, 1u) + 1u;
    __syncthreads();
    int round = 0;
    nd_split_ctx<VEC, PACKS, THREADS, WH, PF8 == 0 ? nd_split_sleep<Op>::value : 0> ctx;
    ctx.row = (int)(ticket / (unsigned)ws.chunks);
    ctx.g = (int)(ticket % (unsigned)ws.chunks) * (THREADS * PACKS) + (int)threadIdx.x;
    ctx.G = THREADS; /* pack i of this thread: g + i * THREADS */
    ctx.cols = (int)a.cols;
    ctx.n = (float)a.cols;
    ctx.ws = ws;
    ctx.round = &round;
    ctx.smem = &smem;
    ctx.pf_bytes = 0;
    if (PF8 > 0) {
        /* the chunk of the ticket PF8 / 8 of a device-full of blocks ahead (a device-full: the
         * SM count times the launch bounds' blocks an SM), a pack wider on each side (its row
         * may sit off the 16-byte grid), on the grid and inside x */
        unsigned nsm;
        asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
        const unsigned ahead = nsm * nd_split_bounds<Op, T, PACKS, THREADS, WH>::min_blocks * PF8 / 8;
        const unsigned t2 = ticket + (ahead > 1 ? ahead : 1);
        const int64_t total = a.rows * a.cols;
        if (t2 > ticket && t2 < (unsigned)(a.rows * ws.chunks)) {
            const int64_t row2 = t2 / (unsigned)ws.chunks, c2 = t2 % (unsigned)ws.chunks;
            int64_t b = row2 * a.cols + c2 * (THREADS * PACKS * VEC) - VEC;
            int64_t e = row2 * a.cols + (c2 + 1) * (THREADS * PACKS * VEC) + VEC;
            b = b < row2 * a.cols ? row2 * a.cols : b;
            e = e > (row2 + 1) * a.cols ? (row2 + 1) * a.cols : e;
            e = e > total ? total : e;
            const uintptr_t lo = (uintptr_t)(a.x + b) & ~(uintptr_t)15;
            const uintptr_t hi = ((uintptr_t)(a.x + e) + 15) & ~(uintptr_t)15; /* same 16 bytes */
            ctx.pf = reinterpret_cast<const char *>(lo);
            ctx.pf_bytes = (unsigned)(hi - lo);
        }
    }
    const T *xrow = a.x + (int64_t)ctx.row * a.cols;
    ctx.h = WH ? 0 : nd_grid_offset<T, VEC>(xrow);
    constexpr bool X0_LATE = ND_ROWS_X0_LATE && sizeof(T) == 2;
    if (!X0_LATE)
        ctx.x0 = nd_to_float(__ldg(xrow)); /* dropped by the compiler when the op does not use it */
    nd_regrow<T, N> v[1];
#pragma unroll
    for (int i = 0; i < PACKS; i++)
        nd_row_load_words<T, VEC, int, WH>(xrow, (i * THREADS + ctx.g) * VEC - ctx.h, ctx.cols,
                                       Op::kPad, &v[0].w[i * 4]);
    if (X0_LATE)
        ctx.x0 = nd_to_float(__ldg(xrow)); /* see ND_ROWS_X0_LATE */
    /* ND_ROWS_PARAM_PIPE_SPLIT, as in the block kernel: the first pack's parameters with x */
    constexpr bool PIPE = ND_ROWS_PARAM_PIPE_SPLIT && Op::kParams >= 2 &&
                          nd_split_bounds<Op, T, PACKS, THREADS, WH>::pipe;
    nd_param_pipe<Op, T, VEC, 1, !WH> pp;
    bool pipe = false;
    if constexpr (PIPE) {
        pipe = pp.usable(a, ctx.full(0), ctx.h);
        if (pipe)
            pp.template start<PACKS>(a, ctx.g * VEC - ctx.h, THREADS * VEC);
    }
    typename Op::State st[1];
    Op::template stats<1, N>(v, st, ctx, prm);
    if (ctx.g == 0)
        Op::write_stats(st[0], ctx.row, prm);
    T *yrow = a.y + (int64_t)ctx.row * a.cols;
    if constexpr (PIPE) {
        if (pipe) {
            pp.template emit<PACKS, WO>(a, prm, st[0], yrow, ctx.g * VEC - ctx.h, THREADS * VEC,
                                        nd_grid_offset<T, VEC>(yrow) == ctx.h, v[0]);
            return;
        }
    }
    const nd_row_out ro = nd_row_out_make<T, VEC>(a, yrow, ctx.h);
#pragma unroll
    for (int i = 0; i < PACKS; i++) {
        int c0 = (i * THREADS + ctx.g) * VEC - ctx.h;
        nd_row_emit<Op, T, VEC, false, int, WO>(a, prm, st[0], yrow, c0, ctx.cols, ro,
                                            [&](int j) { return v[0].get(i * VEC + j); });
    }
}

/* ---------------------------------------------------------------------------------------------
 * Launcher
 * ------------------------------------------------------------------------------------------- */

/*
 * Run rows of P packs (P > one block's registers) on the split path, in chunk blocks of THREADS
 * threads, when it is the measured choice and can hold them; *ran (false on entry, from
 * nd_rows_split_try) tells whether it did (false: the caller takes the cluster or stream kernel,
 * nothing was launched). Errors as values, the workspace freed on every path after it was
 * allocated.
 */
/* Packs a thread of a chunk block holds. */
template <class Pol>
constexpr int nd_split_packs = ND_ROWS_SPLIT_PACKS ? ND_ROWS_SPLIT_PACKS : Pol::kRegBytes / 16;

template <class Op, class T, class Pol, int THREADS>
static nd_status nd_rows_split_go(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  int64_t P, bool fast, bool on_grid,
                                  const nd_cuda_device_info *di, cudaStream_t s, const char *name,
                                  nd_error *err, bool *ran)
{
    constexpr int VEC = nd_cuda_type<T>::pack;
    constexpr int PACKS = nd_split_packs<Pol>;
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, one block");
    if (ND_ROWS_SPLIT == 0)
        return ND_OK;
    const int64_t chunks = (P + (int64_t)THREADS * PACKS - 1) / ((int64_t)THREADS * PACKS);
    if (chunks < 2 || a.rows * chunks > 0x7fffffff)
        return ND_OK;
    if (ND_ROWS_SPLIT == 1 && chunks < ND_ROWS_SPLIT_MIN_CHUNKS)
        return ND_OK;
    /* the prefetching kernel is a kernel of its own: its code in the other cost 16-bit rows of
     * 2-8 chunks 0.5-1.6 points (H200, bench/results/rows_split_pf.txt) */
    const bool pf = ND_ROWS_SPLIT_PF && chunks >= ND_ROWS_SPLIT_PF_MIN_CHUNKS;
    /* how far ahead, on a device of the policies' fast class (F) or another (S): one kernel when
     * the policy says the same for both */
    constexpr int PF8F = ND_ROWS_SPLIT_PF_AHEAD8 ? ND_ROWS_SPLIT_PF_AHEAD8 : Pol::split_pf_ahead8(true);
    constexpr int PF8S = ND_ROWS_SPLIT_PF_AHEAD8 ? ND_ROWS_SPLIT_PF_AHEAD8 : Pol::split_pf_ahead8(false);
    static_assert(PF8F > 0 && PF8S > 0, "a prefetch ahead of the block's own chunk");
    /* ND_ROWS_SPLIT_EXACT: the twin for rows of whole chunks on the grid */
    const bool whole = ND_ROWS_SPLIT_EXACT && on_grid && a.cols % ((int64_t)THREADS * PACKS * VEC) == 0;
    auto kernel = whole ? (!pf   ? nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, 0, true>
                           : fast ? nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, PF8F, true>
                                  : nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, PF8S, true>)
                        : (!pf   ? nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, 0>
                           : fast ? nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, PF8F>
                                  : nd_rows_split_kernel<Op, T, VEC, PACKS, THREADS, PF8S>);
    int per_sm = 0;
    nd_status st = nd_cuda_blocks_per_sm(kernel, di->device, THREADS, 0, &per_sm, err);
    if (st != ND_OK)
        return st;
    if (chunks * ND_ROWS_SPLIT_SHARE > (int64_t)per_sm * di->sm_count)
        return ND_OK; /* see the deadlock argument at the kernel */

    const size_t bytes = 16 + (size_t)a.rows * ND_SPLIT_ROUNDS * (size_t)chunks * ND_SPLIT_WORDS * 8;
    void *ws_mem = NULL;
    ND_CUDA_TRY(err, cudaMallocAsync(&ws_mem, bytes, s));
    nd_split_ws ws;
    ws.ticket = (unsigned *)ws_mem;
    ws.slot = (unsigned long long *)((char *)ws_mem + 16);
    ws.chunks = (int)chunks;
    cudaError_t ce = cudaMemsetAsync(ws_mem, 0xff, bytes, s); /* ticket ~0, slots empty */
    if (ce == cudaSuccess) {
        ND_PLAN("split packs=%d block=%d chunks=%lld grid=%lld%s", PACKS, THREADS, (long long)chunks,
                (long long)(a.rows * chunks), whole ? " exact" : "");
        kernel<<<(unsigned)(a.rows * chunks), THREADS, 0, s>>>(a, prm, ws);
        ce = cudaGetLastError();
    }
    cudaError_t fe = cudaFreeAsync(ws_mem, s);
    if (ce != cudaSuccess)
        return nd_error_set(err, ND_EDEVICE, "%s: split rows (%lld x %lld, %lld chunks): %s", name,
                            (long long)a.rows, (long long)a.cols, (long long)chunks,
                            cudaGetErrorString(ce));
    ND_CUDA_TRY(err, fe);
    *ran = true;
    return ND_OK;
}

/* The chunk block: the op's split_threads(element bytes) threads, or, where the policy names
 * split_threads_long(element bytes, fast), that many for rows that would take more than
 * ND_ROWS_SPLIT_LONG_CHUNKS chunks of the first (fast: a device of the policies' fast class,
 * nd_rows_run). */
#ifndef ND_ROWS_SPLIT_LONG_CHUNKS
#define ND_ROWS_SPLIT_LONG_CHUNKS 32
#endif
template <class Pol, class = void> struct nd_split_long {
    static constexpr int threads(int elem_bytes, bool) { return Pol::split_threads(elem_bytes); }
};
template <class Pol>
struct nd_split_long<Pol, std::void_t<decltype(Pol::split_threads_long(0, false))>> {
    static constexpr int threads(int elem_bytes, bool fast)
    {
        return Pol::split_threads_long(elem_bytes, fast);
    }
};
template <class Op, class T, class Pol>
static nd_status nd_rows_split_try(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                   int64_t P, bool fast, bool on_grid,
                                   const nd_cuda_device_info *di, cudaStream_t s, const char *name,
                                   nd_error *err, bool *ran)
{
    constexpr int E = (int)sizeof(T);
    constexpr int TH = ND_ROWS_SPLIT_THREADS ? ND_ROWS_SPLIT_THREADS : Pol::split_threads(E);
    constexpr int TH_SLOW = ND_ROWS_SPLIT_THREADS ? TH : nd_split_long<Pol>::threads(E, false);
    constexpr int TH_FAST = ND_ROWS_SPLIT_THREADS ? TH : nd_split_long<Pol>::threads(E, true);
    *ran = false;
    if (P > (int64_t)ND_ROWS_SPLIT_LONG_CHUNKS * TH * nd_split_packs<Pol>)
        return fast ? nd_rows_split_go<Op, T, Pol, TH_FAST>(a, prm, P, fast, on_grid, di, s, name,
                                                            err, ran)
                    : nd_rows_split_go<Op, T, Pol, TH_SLOW>(a, prm, P, fast, on_grid, di, s, name,
                                                            err, ran);
    return nd_rows_split_go<Op, T, Pol, TH>(a, prm, P, fast, on_grid, di, s, name, err, ran);
}

#endif /* ND_ROWS_SPLIT_CUH */
