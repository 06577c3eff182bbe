/*
 * rows.cuh - the row engine shared by the last-axis operators (layernorm.cu, rmsnorm.cu,
 * softmax.cu, log_softmax.cu).
 *
 * An operator over the last axis reads a row, reduces it to a few numbers, and writes a row of the
 * same shape. The engine does the reading, the reducing across threads and the writing; an Op
 * policy (LayerNorm, RMSNorm, Softmax, ...) does the arithmetic. These kernels cover every width:
 *
 *   warp     a group of W lanes (W = 1..32, so 32/W rows per warp) holds R rows in registers;
 *            all-reduce by xor shuffles. Up to 8 packs (128 bytes) per lane: 1024 float32 or
 *            2048 16-bit columns.
 *   tile     the warp kernel's rows, for the geometries the op's policy names, when x and y
 *            sit on the 16-byte grid (rows_tile.cuh): a block's rows come into shared memory by
 *            bulk copies (TMA), a few tiles of rows at once, instead of by each lane's loads.
 *   lean     a group of W lanes a row (W = 8..32), R rows a group, for the rows on the 16-byte
 *            grid of up to 128 packs that the op's policy names (rows_lean.cuh): small blocks,
 *            the R rows in one all-reduce, parameters loaded once for them.
 *   stage    short rows off the 16-byte grid (rows_stage.cuh): a block's rows are one run of
 *            memory, copied through shared memory in 16-byte packs, so the partial packs at the
 *            rows' ends cost nothing in device memory.
 *   block    a block of 64..512 threads holds one row in registers (128 bytes per thread);
 *            all-reduce through shared memory, so every element of x is read from device memory
 *            exactly once: up to 16384 float32 / 32768 16-bit columns.
 *   loop     one block a row that reads it twice, the second time from L2, for the rows on the
 *            16-byte grid that the op's policy names (rows_loop.cuh).
 *   split    longer rows (rows_split.cuh): one block per 64 KB chunk of a row, the row's blocks
 *            combining their partial statistics through global memory; x is still read once.
 *   cluster  where the split kernel cannot hold a row's chunks at once: a thread-block cluster of
 *            2..16 blocks (sm_90) shares the row through distributed shared memory and
 *            prefetches its next row into shared memory (cp.async).
 *   stream   rows longer than a 16-block cluster can hold: the cluster walks the row once per
 *            statistics round and once to write (the re-reading fallback).
 * The warp, block and split kernels get one block per unit of work (not a persistent grid: see
 * ND_ROWS_GRID). Registers per thread are capped at 64 (block) and 80 (warp) so 768-1024 threads
 * per SM stay resident: occupancy is what overlaps one row's reductions with other rows' loads.
 *
 * Layout. A row is cut into packs of VEC elements (16 bytes) on the 16-byte grid of memory, not
 * of the row: a row starting h elements past a 16-byte boundary has its pack p cover columns
 * [p*VEC - h, p*VEC - h + VEC). Full packs move as one 16-byte access; only the first and the last
 * pack of a row can be partial and are read and written element by element. So an odd width or an
 * odd offset costs two partial packs per row, never a scalar pass over the tensor. y and the
 * per-column parameters use 16-byte accesses when they sit at the same offset on that grid as x
 * (the usual case: all come from cudaMalloc and cols % VEC == 0), element accesses otherwise.
 * Thread t of a group of G holds packs t, t + G, t + 2G, ... so each access is coalesced.
 *
 * Op interface (static members):
 *   kPad                     value loaded for a column outside the row (0 for sums, -inf for max)
 *   kParams                  number of per-column parameter tensors (0..2)
 *   State                    per-row (and per-thread) result of the statistics
 *   stats<R, N>(v, st, ctx)  v[R] (nd_regrow) this thread's N elements of R rows, pads set;
 *                            v[r].get(e) widens, v[r].set(e, f) may rewrite (exactly where
 *                            V::kExactSet: float32 rows and nd_regrow_wide);
 *                            ctx.valid(r, e), ctx.allreduce<K>(a, op), ctx.n (cols as float)
 *                            ctx.first(r, f): row r's first element x[0], where f is the
 *                            value this thread would give if it held column 0 (the warp
 *                            kernel shuffles it from the group's lane 0; the block kernels
 *                            load it from memory, one uniform load per thread)
 *   out(st, v, p0, p1)       y for an element from its (possibly rewritten) register value
 *   stream_stats(st, ctx)    the same statistics from ctx.for_each(f) passes over the row
 *                            (ctx.x0: the row's first element)
 *   out_stream(st, x, p0, p1) y from the raw x
 *   write_stats(st, row, prm) the per-row float32 outputs (mean, rstd), by one thread per row
 *   min_blocks(kind, elem bytes, packs, threads, twin lanes)  optional: blocks per SM the
 *                            warp, plain block or split kernel's launch bounds ask for (0: the
 *                            default), i.e. its register cap (nd_rows_min_blocks), in blocks of
 *                            `threads` (the warp kernel's: nd_rows_warp_block); twin lanes:
 *                            the lanes a row of the warp kernel's exact and grid twins, 0 for
 *                            every other kernel
 *   param_hold(elem bytes, packs, lanes)  optional: whether a warp-kernel lane of that many
 *                            packs, in groups of that many lanes a row, loads all its parameters
 *                            with x rather than one pack ahead (nd_param_hold)
 *   wide_regs(elem bytes, n) optional: whether a warp-kernel lane holding n elements of a 16-bit
 *                            row keeps them as floats, so set(e, f) is exact (nd_wide_regs)
 *   param_l2_last(elem bytes) optional: whether the parameters are loaded with an L2 evict-last
 *                            policy in every kernel (nd_param_l2_last)
 *   big_plain(elem bytes)    optional: how the big block that asks L2 for rows ahead loads x and
 *                            stores y: 1 x plain, 2 y plain, 3 both (nd_big_plain; float32 only)
 */
#ifndef ND_ROWS_CUH
#define ND_ROWS_CUH

#include <string.h>
#include <type_traits>

#include "cuda_common.cuh"

/* ---------------------------------------------------------------------------------------------
 * Arguments and pack access
 * ------------------------------------------------------------------------------------------- */

template <class T> struct nd_rows_args {
    const T *x;
    T *y;
    const T *p0, *p1; /* per-column parameters (gamma, beta), NULL when absent */
    int64_t rows;
    int64_t cols;
};

/* Elements from the start of a 16-byte-grid pack to p: 0 .. VEC-1. */
template <class T, int VEC> __host__ __device__ __forceinline__ int nd_grid_offset(const T *p)
{
    return (int)(((uintptr_t)p / sizeof(T)) & (VEC - 1));
}

/* Load columns [c0, c0 + VEC) of a row into 4 words (one pack); columns outside [0, cols) read
 * as pad. WHOLE: the caller knows the pack is whole. GRID: a row of whole packs on the 16-byte
 * grid (the grid twins, ND_ROWS_GRID_TWIN), c0 >= 0 a multiple of VEC: the pack lies in the row
 * or wholly past its end, so one test a pack and pads past it, not a test an element. x is
 * loaded evict-first (ld.global.cs) and y stored so (nd_store_pack_stream). H100, rows suite,
 * three alternating rounds, against default-policy stores / default loads and stores /
 * read-only-path loads: median -2.2 / -1.3 / -1.0 points of the copy ceiling over 192 shapes,
 * down to -20 / -24 / -13 (long rows, 16-bit 32 columns); the best gain +6.6 (float32 32 columns,
 * default stores) (bench/results/rows_hints_h100.txt). */
/* Tried: a pack holding a row's first or last elements, off the 16-byte grid, loaded as its
 * aligned 16 bytes with the elements outside the row then set to pad (one load, not one an
 * element), and packs wholly outside the row neither loaded nor stored. H200, two alternating
 * rounds: most rows off the grid within 2 points, block rows of 4097 columns -9 to -12 (float32
 * RMSNorm 92.9 -> 85.0), 16-bit softmax 1001 79 -> 69 (bench/results/rows_edge_pack_h200.txt). */
/* PLAIN: whole packs loaded with the default policy (ld.global), not evict-first (the big block
 * that asks L2 for its float32 rows ahead, where the op says: nd_big_plain). */
template <class T, int VEC, class I, bool WHOLE = false, bool GRID = false, bool PLAIN = false>
__device__ __forceinline__ void nd_row_load_words(const T *row, I c0, I cols, float pad, uint32_t *o)
{
    union { uint4 w; nd_pack<T, VEC> pk; } u;
    static_assert(sizeof(T) * VEC == 16, "packs are 16 bytes");
    if (WHOLE || (GRID ? c0 < cols : c0 >= 0 && c0 + VEC <= cols)) {
        const uint4 *p = reinterpret_cast<const uint4 *>(row + c0);
        u.w = PLAIN ? *p : __ldcs(p);
    } else {
        const T tp = nd_from_float<T>(pad);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            I c = c0 + j;
            u.pk.v[j] = !GRID && c >= 0 && c < cols ? nd_ldcs1(row + c) : tp;
        }
    }
    o[0] = u.w.x;
    o[1] = u.w.y;
    o[2] = u.w.z;
    o[3] = u.w.w;
}

/* Prefetch of the next row into shared memory (cp.async: nd_cp_async16), so its loads are in
 * flight while the current row is reduced and written. Each thread copies and later reads only
 * its own 16-byte slots: cp.async.wait_all is the only synchronisation needed. */

/* One pack of a row into its slot: a full pack by cp.async, a partial one (the row's ends) by
 * element loads and a shared-memory store. */
template <class T, int VEC, class I>
__device__ __forceinline__ void nd_row_prefetch(const T *row, I c0, I cols, float pad, uint4 *slot)
{
    if (c0 >= 0 && c0 + VEC <= cols) {
        nd_cp_async16(slot, row + c0);
    } else {
        uint32_t w[4];
        nd_row_load_words<T, VEC, I>(row, c0, cols, pad, w);
        *slot = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

__device__ __forceinline__ void nd_slot_words(const uint4 *slot, uint32_t *o)
{
    uint4 q = *slot;
    o[0] = q.x;
    o[1] = q.y;
    o[2] = q.z;
    o[3] = q.w;
}

/* Load columns [c0, c0 + VEC) of a row, raw; columns outside [0, cols) read as pad. */
template <class T, int VEC, class I>
__device__ __forceinline__ void nd_row_load_raw(const T *row, I c0, I cols, float pad, T *o)
{
    typedef typename nd_word<sizeof(T) * VEC>::type W;
    union { W w; nd_pack<T, VEC> pk; } u;
    if (c0 >= 0 && c0 + VEC <= cols) {
        u.w = __ldcs(reinterpret_cast<const W *>(row + c0));
    } else {
        const T tp = nd_from_float<T>(pad);
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            I c = c0 + j;
            u.pk.v[j] = (c >= 0 && c < cols) ? nd_ldcs1(row + c) : tp;
        }
    }
#pragma unroll
    for (int j = 0; j < VEC; j++)
        o[j] = u.pk.v[j];
}

/* Same, widened to float. */
template <class T, int VEC, class I>
__device__ __forceinline__ void nd_row_load(const T *row, I c0, I cols, float pad, float *o)
{
    T t[VEC];
    nd_row_load_raw<T, VEC, I>(row, c0, cols, pad, t);
#pragma unroll
    for (int j = 0; j < VEC; j++)
        o[j] = nd_to_float(t[j]);
}

/* 1: an op whose param_l2_last(element bytes) says so loads its parameters with an L2
 * evict-last policy (nd_ldg_keep), 2: every op, 0: none. RMSNorm names float32: H100, three
 * alternating rounds, % of the copy ceiling, 128x1048576 90.0 -> 91.5, the other widths measured
 * (128-262144 columns) within 0.1; ncu: 561.6 -> 546.3 MB read from DRAM for 512 MiB of x. On
 * LayerNorm's float32 rows (ncu: 606 -> 577 MB) 128x1048576 gained 0.5, 262144 and 65536 columns
 * lost 1.6 and 2.1; on 16-bit rows it lost up to 5 (bench/results/param_l2_h100.txt). */
#ifndef ND_ROWS_PARAM_L2_LAST
#define ND_ROWS_PARAM_L2_LAST 1
#endif
template <class Op, class = void> struct nd_op_has_param_l2_last : std::false_type {};
template <class Op>
struct nd_op_has_param_l2_last<Op, std::void_t<decltype(Op::param_l2_last(0))>> : std::true_type {};
template <class Op> __host__ __device__ constexpr bool nd_param_l2_last(int elem_bytes)
{
    if constexpr (nd_op_has_param_l2_last<Op>::value)
        return ND_ROWS_PARAM_L2_LAST == 2 || (ND_ROWS_PARAM_L2_LAST == 1 && Op::param_l2_last(elem_bytes));
    else
        return ND_ROWS_PARAM_L2_LAST == 2;
}

/* Parameters: cached loads (they are read by every row); vector only when vec_ok (same grid
 * offset as x) or WHOLE (the caller knows the pack is whole and on the grid). Absent (NULL)
 * parameters read as dflt. KEEP: kept in L2 (nd_param_l2_last). */
template <class T, int VEC, class I, bool WHOLE = false, bool KEEP = false>
__device__ __forceinline__ void nd_param_load(const T *p, I c0, I cols, bool vec_ok, float dflt,
                                              float (&o)[VEC])
{
    if (!p) {
#pragma unroll
        for (int j = 0; j < VEC; j++)
            o[j] = dflt;
    } else if (WHOLE || (vec_ok && c0 >= 0 && c0 + VEC <= cols)) {
        nd_load_pack<T, VEC, KEEP>(p + c0, o);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            I c = c0 + j;
            o[j] = (c >= 0 && c < cols) ? nd_load1(p + c) : dflt;
        }
    }
}

/* PLAIN: whole packs stored with the default policy, not evict-first (nd_big_plain) */
template <class T, int VEC, class I, bool WHOLE = false, bool PLAIN = false>
__device__ __forceinline__ void nd_row_store(T *row, I c0, I cols, bool vec_ok,
                                             const float (&o)[VEC])
{
    if (WHOLE || (vec_ok && c0 >= 0 && c0 + VEC <= cols)) {
        if (PLAIN)
            nd_store_pack<T, VEC>(row + c0, o);
        else
            nd_store_pack_stream<T, VEC>(row + c0, o);
    } else {
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            I c = c0 + j;
            if (c >= 0 && c < cols)
                nd_store1(row + c, o[j]);
        }
    }
}

/* Per-row facts for writing: which of y, p0, p1 can use 16-byte accesses (same grid offset as
 * this row of x). */
struct nd_row_out {
    bool y_vec, p0_vec, p1_vec;
};

template <class T, int VEC>
__device__ __forceinline__ nd_row_out nd_row_out_make(const nd_rows_args<T> &a, const T *yrow, int h)
{
    nd_row_out o;
    o.y_vec = nd_grid_offset<T, VEC>(yrow) == h;
    o.p0_vec = nd_grid_offset<T, VEC>(a.p0) == h;
    o.p1_vec = nd_grid_offset<T, VEC>(a.p1) == h;
    return o;
}

/* Write one pack of output: parameters, Op::out, store (WHOLE: a whole pack on the grid; PLAIN:
 * nd_row_store's). */
template <class Op, class T, int VEC, bool STREAM, class I, bool WHOLE = false, bool PLAIN = false,
          class G>
__device__ __forceinline__ void nd_row_emit(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                            const typename Op::State &st, T *yrow, I c0, I cols,
                                            nd_row_out ro, G v)
{
    constexpr bool K = nd_param_l2_last<Op>((int)sizeof(T));
    float g[VEC], b[VEC], o[VEC];
    if (Op::kParams >= 1)
        nd_param_load<T, VEC, I, WHOLE, K>(a.p0, c0, cols, ro.p0_vec, 1.0f, g);
    if (Op::kParams >= 2)
        nd_param_load<T, VEC, I, WHOLE, K>(a.p1, c0, cols, ro.p1_vec, 0.0f, b);
#pragma unroll
    for (int j = 0; j < VEC; j++)
        o[j] = STREAM ? Op::out_stream(st, prm, v(j), g[j], b[j]) : Op::out(st, prm, v(j), g[j], b[j]);
    nd_row_store<T, VEC, I, WHOLE, PLAIN>(yrow, c0, cols, ro.y_vec, o);
    /* A compiler-only barrier: the next pack's parameter loads are not hoisted above this store,
     * so only one pack of gamma/beta is live at a time (hoisting them all spilled registers). */
    asm volatile("" ::: "memory");
}

/* ND_ROWS_PARAM_PIPE: a lane's parameters loaded one pack ahead of their use. start() loads the
 * first pack's (call it with x's loads, before the statistics); emit() writes the lane's packs,
 * loading each next pack's parameters while the current one is computed. For a lane whose packs
 * all lie in the row (the context's full()), or any lane of a row on the 16-byte grid in whole
 * packs (each of its packs then lies in the row or wholly past its end, and load() and emit()
 * skip the latter: ND_ROWS_PIPE_PARTIAL), with the parameters on x's grid (usable()); others go
 * through nd_row_emit. */
/* 1: the pipe for lanes of rows on the grid that are not full (a row shorter than its group's
 * packs: 16-bit 576 columns in 32 lanes of 3 packs, 1600 in 32 of 7, 3200 in 128 threads of 4);
 * 0: those lanes load each pack's parameters after the statistics, each pack's a round trip
 * after the last one's store. H100, two alternating rounds, % of the copy ceiling
 * (bench/results/model_widths_h100.txt): LayerNorm 16-bit 1600 / 3200 columns 62-64 / 69 ->
 * 92 / 93, 192-960 48-66 -> 67-86 (most of those then took ND_ROWS_WARP_FIT), float32 320 89
 * -> 98.5; RMSNorm 16-bit 192-960 79-92 -> 94-99. */
#ifndef ND_ROWS_PIPE_PARTIAL
#define ND_ROWS_PIPE_PARTIAL 1
#endif
/* The warp, block and split kernels each write out their few lines of set-up (PIPE, usable,
 * start). Folded into one helper (const bool pipe = PIPE && pp.begin(...)), same logic, the
 * 16-bit block kernel at 32768 columns, which spills at 8 packs a thread, ran at 77-78% of the
 * copy ceiling instead of 87.4 (H200, one run): measure that shape before refactoring here. */
/* PARTIAL: the kernel may hold lanes that are not full; usable() then takes those of rows on the
 * grid (ND_ROWS_PIPE_PARTIAL), and load() and emit() test each pack against the row's end. The
 * exact twins (every lane full) and the tile kernel (full lanes only) pass false. */
template <class Op, class T, int VEC, int HOLD = 1, bool PARTIAL = false> struct nd_param_pipe {
    /* HOLD packs of parameters in flight: the pack in use and the next HOLD - 1 (1: one ahead;
     * a lane's PACKS: all of them loaded with x, nd_param_hold) */
    uint4 g[HOLD], b[HOLD];
    static __device__ __forceinline__ bool usable(const nd_rows_args<T> &a, bool full, int h)
    {
        return (full || (PARTIAL && ND_ROWS_PIPE_PARTIAL && h == 0 && a.cols % VEC == 0)) &&
               a.p0 && nd_grid_offset<T, VEC>(a.p0) == h &&
               (Op::kParams < 2 || (a.p1 && nd_grid_offset<T, VEC>(a.p1) == h));
    }
    /* the pack of parameters at column c0 into slot k (PARTIAL: nothing for a pack past the
     * row's end) */
    __device__ __forceinline__ void load(const nd_rows_args<T> &a, int c0, int k)
    {
        if (PARTIAL && c0 >= a.cols)
            return;
        constexpr bool K = nd_param_l2_last<Op>((int)sizeof(T));
        g[k] = nd_ldg_keep<K>(reinterpret_cast<const uint4 *>(a.p0 + c0));
        if (Op::kParams >= 2)
            b[k] = nd_ldg_keep<K>(reinterpret_cast<const uint4 *>(a.p1 + c0));
    }
    /* the first min(HOLD, PACKS) packs of a lane whose pack i starts at c_first + i * stride */
    template <int PACKS>
    __device__ __forceinline__ void start(const nd_rows_args<T> &a, int c_first, int stride)
    {
#pragma unroll
        for (int k = 0; k < HOLD && k < PACKS; k++)
            load(a, c_first + k * stride, k);
    }
    /* pack i of this lane starts at column c_first + i * stride; v holds its elements (WHOLE:
     * y's packs are whole and on the grid; PARTIAL: packs past the row's end are skipped; PLAIN:
     * nd_row_store's) */
    template <int PACKS, bool WHOLE = false, bool PLAIN = false, class V>
    __device__ __forceinline__ void emit(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                         const typename Op::State &st, T *yrow, int c_first,
                                         int stride, bool y_vec, const V &v)
    {
#pragma unroll
        for (int i = 0; i < PACKS; i++) {
            const int c0 = c_first + i * stride;
            if (PARTIAL && c0 >= a.cols) /* this pack and the lane's next ones lie past the row */
                break;
            nd_regrow<T, VEC> gp, bp;
            memcpy(gp.w, &g[i % HOLD], sizeof(uint4));
            memcpy(bp.w, &b[i % HOLD], sizeof(uint4));
            if (i + HOLD < PACKS)
                load(a, c0 + HOLD * stride, i % HOLD);
            float o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; j++)
                o[j] = Op::out(st, prm, v.get(i * VEC + j), gp.get(j),
                               Op::kParams >= 2 ? bp.get(j) : 0.0f);
            nd_row_store<T, VEC, int, WHOLE, PLAIN>(yrow, c0, (int)a.cols, y_vec, o);
        }
    }
};

/* ---------------------------------------------------------------------------------------------
 * Warp kernel: groups of W lanes, R rows per group per iteration, PACKS packs per lane per row.
 * ------------------------------------------------------------------------------------------- */

/* Threads a block of the warp kernel: one warp.
 * H200, three alternating rounds, every op built with blocks of 32 threads against 128
 * (bench/results/warp_block32_h200.txt), % of the copy ceiling at 192-1024 columns: float32
 * softmax / log_softmax / RMSNorm +0.4 to +1.9 at every width (1024 columns: softmax 97.7 ->
 * 99.2, log_softmax 97.8 -> 99.7, RMSNorm 96.2 -> 97.8), LayerNorm float32 +0.3 to +1.3 but
 * 192 -1.0; 16-bit RMSNorm 512-1024 +0.2 to +0.9, softmax / log_softmax 192 +0.6 to +0.8;
 * LayerNorm 16-bit 640 / 768 +1.8 / -1.4 (float16), -2.5 / -5.7 (bfloat16), where its
 * min_blocks, counted in blocks of 4 warps, then capped no registers; scaled to one-warp blocks
 * it gains (nd_layernorm_op::min_blocks). One reading, not
 * profiled: a block of one warp retires on its own, four free their slot with the slowest. In a
 * second call (three alternating rounds) float32 1024 columns +1.2 to +1.5 again, 192 -1.1 to
 * +0.6. But the full table of that call (bench/results/goals_h200_warp32.txt, against
 * 8a534d5's) put the shortest rows far lower: 16-bit 32 columns (2 lanes of 2 packs, 16 rows a
 * warp, a 3 us kernel) softmax / log_softmax / RMSNorm 99.5-101.5 -> 89.0-92.4, float32 32
 * RMSNorm / LayerNorm -3.5 / -2.9 (softmax +3.6). So rows of at most ND_ROWS_WARP_SHORT_PACKS
 * packs keep blocks of 4 warps: their kernels are 8a534d5's again (the same SASS, cuobjdump
 * compared), as that table measured them. Not measured on an H100. */
#ifndef ND_ROWS_WARP_THREADS
#define ND_ROWS_WARP_THREADS 32
#endif
#ifndef ND_ROWS_WARP_SHORT_PACKS
#define ND_ROWS_WARP_SHORT_PACKS 8
#endif
/* blocks of 4 warps: the warp kernel's rows of at most ND_ROWS_WARP_SHORT_PACKS packs */
enum { ND_ROWS_WARP_BLOCK4 = 128 };
/* Threads a block of the warp kernel for groups of W lanes x PACKS packs */
template <int W, int PACKS>
__host__ __device__ constexpr int nd_rows_warp_block()
{
    return W * PACKS <= ND_ROWS_WARP_SHORT_PACKS ? ND_ROWS_WARP_BLOCK4 : ND_ROWS_WARP_THREADS;
}

/* The block and chunk kernels of 16-bit rows load the row's first element (ctx.x0, LayerNorm's
 * shift) after their packs of x (1) or before them (0). Before, its conversion waited for the
 * load, so the packs' loads left one memory latency late: ncu (float16 LayerNorm, 128x1048576)
 * put 3.4% of the chunk kernel's warp stall samples on that wait. H100, three alternating
 * rounds, 16-bit LayerNorm: 49152x32768 (block kernel) 93.5 -> 94.5% of the copy ceiling, the
 * split shapes +0.4. float32 keeps the old order: its chunk kernel spilled 8 bytes with the late
 * load and measured 1-2 points lower (bench/results/rows_split_prefetch_h100.txt). */
#ifndef ND_ROWS_X0_LATE
#define ND_ROWS_X0_LATE 1
#endif
/* Threads per SM every row kernel must allow (caps registers at 64 per thread): the row sits in
 * registers, so occupancy is what hides the latency of the next rows loads. */
#ifndef ND_ROWS_MIN_THREADS_PER_SM
#define ND_ROWS_MIN_THREADS_PER_SM 1024
#endif
/* 1: the cluster kernel prefetches its next row into shared memory with cp.async while it works
 * on the current one (measured on an H200: +10-25 points of the ceiling for rows of 32768-262144
 * columns, where a row costs two cluster barriers); the warp and block kernels load each row when
 * they get to it (prefetching measured slower there: occupancy already hides the latency; with
 * one block per row, 2 rows per block with the second prefetched lost 2-7 points at 2048-32768
 * columns). */
#ifndef ND_ROWS_PREFETCH
#define ND_ROWS_PREFETCH 1
#endif
/* Grid shape. 1: the warp and block kernels get one block per unit of rows (the row loop in each
 * kernel runs once) and the block scheduler keeps the SMs full; clusters stay persistent (their
 * next-row prefetch needs a next row). H200, same run, against a non-persistent copy kernel:
 * rows of 256-32768 columns +5 to +12 points (rmsnorm f16 4096: 87.5% -> 97.3%), clusters
 * -5 to -16 when made non-persistent too (2). 0: every kernel persistent (as many blocks as fit
 * at once), which measured like a grid-stride copy: ~3.9 of the 4.25 TB/s a copy reaches. */
#ifndef ND_ROWS_GRID
#define ND_ROWS_GRID 1
#endif
/* Tried and rejected: the warp kernel's parameters (gamma, beta; RMSNorm's weight) converted to
 * float in shared memory once per block, lanes reading two 16-byte shared loads a pack instead of
 * a global load and a conversion per element. LayerNorm float16 rows of 256 columns lose 12
 * points of the copy ceiling to their parameters (bench/rows_sweep.cu: 77.6% with, 89.5%
 * without), but the shared copy won back 1.2 there and lost 2-6 points at 768-2048 columns and
 * 2-10 at 32 (H200, bench_gpu rows suite, two runs each): the block's x loads wait for the fill
 * and its barrier, and the per-pack parameter reads stay on each pack's path. */

/* 1: in the warp kernel, a lane with one row (R = 1) whose packs are all in the row loads its
 * first pack of parameters together with x, before the statistics, and each next pack's while
 * the current one is computed, so that no pack waits for its parameters' load (before, each pack
 * loaded its parameters after the previous pack's store, a round trip per pack that occupancy did
 * not hide: LayerNorm float16 at 256 columns ran at 77.6% of the copy ceiling with gamma and beta,
 * 89.5% without, bench/rows_sweep.cu). H200, bench_gpu rows suite, two runs each, % of the copy
 * ceiling: LayerNorm float16 / bfloat16 32 cols 84 / 89 -> 93 / 98, 128 68 / 67 -> 76 / 76, 256
 * 77 / 76 -> 87 / 87, 512 81 -> 89 / 91, 1024 83 / 82 -> 93 / 94, 2048 85 / 84 -> 88 / 88; float32
 * 64-256 +2 to +5; RMSNorm 16-bit 256 and 1024 +2; 1536 bfloat16 LayerNorm -2.7 (float16 +2.9),
 * RMSNorm 768 -1.8. float32 rows of 7-8 packs a lane (1024 columns) lost 8.5 points at their
 * 72-register cap and keep the old order. (bench/results/param_pipe_h200.txt) */
#ifndef ND_ROWS_PARAM_PIPE
#define ND_ROWS_PARAM_PIPE 1
#endif
/* Which warp-kernel lanes load all their parameters with x rather than one pack ahead: -1
 * (default) those the op's param_hold(element bytes, packs, lanes) names (none where it has
 * none), 0 none, n lanes of up to n packs in every op (A/B runs). */
#ifndef ND_ROWS_PARAM_HOLD
#define ND_ROWS_PARAM_HOLD -1
#endif
/* The same in the block and cluster kernels (one row per block or cluster), for LayerNorm: H200,
 * two runs each, float16 / bfloat16 4096 columns 87 -> 91%, 32768 86 -> 88, 16384 88.6 -> 87.5,
 * float32 1536 96 -> 99.8; RMSNorm's one parameter lost 0.3-0.9 points there and keeps the old
 * order (bench/results/param_pipe_h200.txt). */
#ifndef ND_ROWS_PARAM_PIPE_BLOCK
#define ND_ROWS_PARAM_PIPE_BLOCK 1
#endif
/* The block and split kernels pipe 16-bit rows of at most this many packs a thread. With the
 * pipe, LayerNorm's 16-bit kernels of 6-8 packs spilled 20-284 bytes a thread at their
 * 64-register cap (nvcc 13, -Xptxas -v), without it 0-28. H100, bench_gpu, three alternating
 * runs each, float16 / bfloat16 % of the copy ceiling, pipe at 8 packs -> not: 8192 columns
 * 87.7 / 87.8 -> 94.6 / 94.6, 16384 88.3 / 88.5 -> 95.6 / 95.6, 32768 87.9 / 88.0 -> 93.7 / 93.5,
 * and in the split kernel 65536 76.1 / 76.0 -> 81.5 / 81.4, 262144 74.2 / 73.9 -> 77.4 / 77.1,
 * 1048576 72.0 / 70.9 -> 74.8 / 74.2; float32 unchanged (bench/results/ln16_pipe_h100.txt).
 * The warp kernel keeps its pipe at every 16-bit width, though LayerNorm's lanes of 5-8 packs
 * spill 32-158 bytes with it and none without: without it, 2048 columns went float16 96.8 ->
 * 96.0 and bfloat16 95.0 -> 95.4, and RMSNorm at 1536-2048 lost 0.3-1.1 points. */
#ifndef ND_ROWS_PIPE16_MAX_PACKS
#define ND_ROWS_PIPE16_MAX_PACKS 5
#endif
/* Whether the block and split kernels pipe the parameters of rows of PACKS packs of T a thread
 * (float32 rows of 7-8 packs keep the old order, see above; 16-bit, ND_ROWS_PIPE16_MAX_PACKS). */
template <class T> __host__ __device__ constexpr bool nd_block_pipe_ok(int packs)
{
    return sizeof(T) == 4 ? packs < 7 : packs <= ND_ROWS_PIPE16_MAX_PACKS;
}

/* 1: rows of exactly a warp or plain block kernel's geometry (W lanes x PACKS packs, or THREADS
 * x PACKS packs), with x, y and the parameters on the 16-byte grid, take a twin of that kernel
 * with the row length compiled in (template argument XC): x loaded without a bounds check on any
 * pack, no grid offsets, and the row length's conversions (1/n, LayerNorm's double n) folded
 * into constants. The generic kernels' PTX is 2-3x the twins' (every pack has a partial-pack
 * path); most rows a model has are such a length. H200, two alternating rounds against the
 * generic kernels (bench/results/rows_exact_h200.txt), % of the copy ceiling: LayerNorm
 * float16 / bfloat16 128 columns 77.8 / 79.2 -> 85.5 / 83.4, 8192 91.2 / 91.1 -> 97.0 / 96.6,
 * 16384 86.3 / 86.4 -> 97.0 / 97.8, 32768 89.8 / 90.3 -> 98.1 / 93.3, float32 32 90.8 -> 101.1,
 * 64 87.8 -> 93.5; softmax 16-bit 64 92.6 -> 97.4 / 100.0, log_softmax 92.3-93.1 -> 97.5-99.8;
 * RMSNorm 16-bit 768 93.4 / 94.0 -> 97.6 / 97.7; most other widths of 32-32768 columns within
 * -1.5 to +2.5; on an H100 (one round) LayerNorm 16-bit 32-256 columns +1.3 to +5.1, 8192-32768
 * +1.2, most widths within 1. The policies' exact() keeps the generic kernel where the twin
 * lost (float32 softmax, log_softmax and RMSNorm at 32 columns, 99.3-99.9 -> 94.2-96.5; their
 * 16-bit 64 columns on an H100, up to -10.5), and LayerNorm's tile_tiles leaves it 16-bit rows
 * of 64 and 768 columns on an H200. */
#ifndef ND_ROWS_EXACT
#define ND_ROWS_EXACT 1
#endif
/* 1: rows on the 16-byte grid (nd_rows_on_grid: x, y and the parameters on the grid, whole packs
 * a row) that no exact twin takes run the grid twin of the warp kernel (groups of 8 lanes or
 * more; of 2 or 4 for 16-bit rows short of packs, ND_ROWS_GRID_TWIN_SHORT16) or the plain block
 * kernel (XC = ND_XC_GRID): the row length stays a run-time value, but
 * every pack a thread holds lies in the row or wholly past its end, so loads, parameters and
 * stores test a pack, not each of its elements, and no grid offsets are computed. Model widths
 * such as 1600 columns take it. ncu, H200, 49152x1600 (bench/results/rows_grid_h200.txt):
 * LayerNorm float32 (blocks of 128 x 4 packs) 48.9 -> 36.0 instructions an element, float16 (32
 * lanes x 7) 26.3 -> 21.2, softmax float16 22.5 -> 18.1, RMSNorm bfloat16 17.0 -> 13.5; the
 * generic kernels ran the last pack's element-wise path in every warp (the exact twins of 1536
 * columns: 23.6 and 16.6). H200, three alternating rounds, % of the copy ceiling, generic ->
 * grid twin: LayerNorm float16 / bfloat16 1600 81.7 / 83.8 -> 92.3 / 92.1, 3200 76.1 / 78.1 ->
 * 85.2 / 87.1, 6400 79.5 / 80.0 -> 98.2 / 97.4, float32 1600 91.6 -> 95.3; RMSNorm 16-bit 576
 * 84 -> 94, 2304 88 -> 99; softmax 16-bit 960 92 -> 98.5, log_softmax 16-bit 576 76 -> 86-88;
 * the other float32 rows of 1600-6400 in blocks within -1.0 to +0.7. Groups of 8 and 16 lanes,
 * against the generic kernel: 16-bit 200 / 392 / 504 columns LayerNorm 57 / 67 / 75 -> 74 /
 * 79.5 / 89, RMSNorm 81 / 85 / 92 -> 91 / 95 / 96, softmax 81.5 / 81 / 93 -> 92 / 95.5 / 97.
 * 0: the generic kernels (A/B runs). */
#ifndef ND_ROWS_GRID_TWIN
#define ND_ROWS_GRID_TWIN 1
#endif
/* 1: the warp kernel's grid twin also for groups of 2 and 4 lanes, for 16-bit rows that leave
 * some lanes short of packs (24 columns in 2 lanes of 2 packs, 40 and 56 in 4 of 2); 0: groups
 * of 8 lanes or more only. H100, three alternating rounds, float16 / bfloat16 % of the copy
 * ceiling, generic kernel -> twin (bench/results/rows_grid_small_h100.txt): LayerNorm 40 columns
 * 59.6 / 58.2 -> 81.8 / 79.6, 56 69.5 / 68.1 -> 91.6 / 90.2; RMSNorm 40 76.7 / 76.6 -> 89.0 /
 * 88.5, 56 85.3 / 84.5 -> 92.8 / 91.5, 24 85.2 / 86.4 -> 89.7 / 89.7; softmax 40 74 -> 88, 56
 * 80.5 -> 95.5, 24 85 -> 91; log_softmax 40 77 -> 87-87.5, 56 87 -> 95, 24 88 -> 90. Not for
 * rows that fill every lane (16-bit softmax 64 columns on an H100, which its policy keeps off
 * the exact twin, lost 10.5 in the twin), nor float32: its rows of 20 and 28 columns gained 4-13
 * points but RMSNorm's, softmax's and log_softmax's of 24 (4 lanes, 2 of them a pack short) lost
 * 7.6-11.3 (107.7 -> 100.1, 106.3 -> 95.5). Not measured on an H200. */
#ifndef ND_ROWS_GRID_TWIN_SHORT16
#define ND_ROWS_GRID_TWIN_SHORT16 1
#endif
enum { ND_XC_GRID = -1 }; /* a kernel's XC for its grid twin */
/* 1: the exact block kernel of an op with two parameters (LayerNorm) loads them and stores y
 * without bounds checks too; others check them as the generic kernels do. The same run: LayerNorm
 * 16-bit 16384 columns 90.7 / 91.8 (x only) -> 97.0 / 97.8, 32768 91.7 / 92.8 -> 98.1 / 93.3,
 * 8192 +1.1 / +1.4; softmax, log_softmax and RMSNorm at 2048-16384 columns lost 0.3-1.2 that
 * way. In the exact warp kernel it lost 5-10 points (16-bit 32-64 columns; call 1 of
 * bench/results/rows_exact_h200.txt, one round), which checks them. */
#ifndef ND_ROWS_EXACT_OUT
#define ND_ROWS_EXACT_OUT 1
#endif
/* 1: the exact plain block kernel of 16-bit rows takes the row length through nd_ctx_cols_here
 * after its loads, as the generic one does (see ND_ROWS_BLOCK_LATE_N), rather than as a
 * constant: as a constant, LayerNorm's kernels of 5-8 packs spilled 4-16 bytes (nvcc 13). */
#ifndef ND_ROWS_EXACT_LATE_N
#define ND_ROWS_EXACT_LATE_N 1
#endif
/* 1: the warp kernel converts the row length to float (ctx.n, and ctx.cols as the statistics
 * see it) after its loads are issued, not before: a warp issues in order, and the compiler had
 * hoisted the conversions, 1/n with its slow-path branch and a 4-byte local store ahead of the
 * loads (ncu, H200, float16 LayerNorm 49152x128: about 80 instructions before a warp's first
 * load). Two alternating rounds, % of the copy ceiling (bench/results/rows_late_n.txt):
 * LayerNorm float16 / bfloat16 128 columns H200 75.9 / 76.2 -> 78.0 / 79.1, H100 90.9 / 91.1 ->
 * 91.8 / 92.5 (and 92.1 / 92.7 in a second run); 32 columns +1.4 to +1.7 (both); float32 64
 * +0.7 to +1.3; the other ops and widths within about 0.5, but for float32 32 columns (the
 * shortest kernels): softmax +1.5, RMSNorm -1.6 (H200; H100 -0.9 and +0.2). */
#ifndef ND_ROWS_WARP_LATE_N
#define ND_ROWS_WARP_LATE_N 1
#endif
/* The same in the plain block kernel (one row per block), for 16-bit rows. H200, two alternating
 * rounds, % of the copy ceiling (bench/results/rows_late_n.txt): LayerNorm float16 / bfloat16
 * 32768 columns 84.8 / 85.4 -> 89.8 / 90.5 (the 512-thread kernel of 8 packs no longer spills
 * its 24 bytes; a second run 85.3 / 85.4 -> 90.7 / 91.0; H100 95.1 / 94.6 -> 98.5 / 98.0),
 * 16384 86.7 / 84.7 -> 86.6 / 86.2 (87.5 / 85.1 -> 87.3 / 86.7), 8192 and 4096 within 1.6
 * either way; the other ops within 0.3. float32 rows keep the old order: log_softmax spilled 4
 * bytes with it and lost 0.6-1.0 at 2048-16384 columns. */
#ifndef ND_ROWS_BLOCK_LATE_N
#define ND_ROWS_BLOCK_LATE_N 1
#endif
/* ND_ROWS_WARP_LATE_N, ND_ROWS_BLOCK_LATE_N: ctx.cols and ctx.n as computed at this point of
 * the kernel; the empty asm keeps the compiler from hoisting them (and what the op derives from
 * them, 1/n, (double)n) above the loads before it. */
template <class Ctx> __device__ __forceinline__ void nd_ctx_cols_here(Ctx &ctx)
{
    int cols = ctx.cols;
    asm volatile("" : "+r"(cols));
    ctx.cols = cols;
    ctx.n = (float)cols;
}
/* The warp kernel holds R rows per lane and more indexing: 768 threads (80 registers). */
#ifndef ND_ROWS_WARP_MIN_THREADS_PER_SM
#define ND_ROWS_WARP_MIN_THREADS_PER_SM 768
#endif

/* What an all-reduce costs in a context (Ctx::kKind; nd_ctx_kind<Ctx> reads it, and calls a
 * context without one cross-block): shuffles only, a block barrier, or barriers across blocks. */
enum { ND_CTX_WARP = 0, ND_CTX_BLOCK = 1, ND_CTX_CROSS_BLOCK = 2 };
template <class Ctx, class = void> struct nd_ctx_kind : std::integral_constant<int, ND_CTX_CROSS_BLOCK> {};
template <class Ctx>
struct nd_ctx_kind<Ctx, std::void_t<decltype(Ctx::kKind)>> : std::integral_constant<int, Ctx::kKind> {};
/* The threads of a plain block kernel's block (Ctx::kThreads; 0 for a context without it). */
template <class Ctx, class = void> struct nd_ctx_threads : std::integral_constant<int, 0> {};
template <class Ctx>
struct nd_ctx_threads<Ctx, std::void_t<decltype(Ctx::kThreads)>> : std::integral_constant<int, Ctx::kThreads> {};

/* Whether a stream-statistics context (Op::stream_stats) gives each thread so few elements of a
 * row (Ctx::kShortChains, the loop kernel's: at most 16) that an op may take one pass where it
 * would take two over a long row's chains. */
template <class Ctx, class = void> struct nd_ctx_short_chains : std::false_type {};
template <class Ctx>
struct nd_ctx_short_chains<Ctx, std::void_t<decltype(Ctx::kShortChains)>>
    : std::integral_constant<bool, Ctx::kShortChains> {};

/* The lanes of a group that all-reduce R rows together by shuffles and may share out per-row work
 * after it (Ctx::kSpreadLanes: lane r of the group does row r's, the others take the result with
 * ctx.from_lane(v, r)); 0 for a context without them. */
template <class Ctx, class = void> struct nd_ctx_spread_lanes : std::integral_constant<int, 0> {};
template <class Ctx>
struct nd_ctx_spread_lanes<Ctx, std::void_t<decltype(Ctx::kSpreadLanes)>>
    : std::integral_constant<int, Ctx::kSpreadLanes> {};

/* Blocks per SM that a warp (ND_CTX_WARP) or plain block (ND_CTX_BLOCK) kernel's launch bounds
 * ask for, which caps its registers: the defaults above (dflt), unless the Op names its own for
 * that kernel, Op::min_blocks(kind, element bytes, packs per thread, threads, twin lanes) != 0. */
template <class Op, class = void> struct nd_op_has_min_blocks : std::false_type {};
template <class Op>
struct nd_op_has_min_blocks<Op, std::void_t<decltype(Op::min_blocks(0, 0, 0, 0, 0))>>
    : std::true_type {};
template <class Op>
constexpr int nd_rows_min_blocks(int kind, int elem_bytes, int packs, int threads, int dflt,
                                 int twin_lanes = 0)
{
    if constexpr (nd_op_has_min_blocks<Op>::value) {
        const int b = Op::min_blocks(kind, elem_bytes, packs, threads, twin_lanes);
        return b ? b : dflt;
    } else {
        return dflt;
    }
}

/* The launch bounds' blocks an SM of a kernel in the warp kernel's geometry (lanes of PACKS
 * packs) in blocks of BLOCK threads: the op's min_blocks for ND_CTX_WARP, else enough blocks for
 * ND_ROWS_WARP_MIN_THREADS_PER_SM threads (the warp and stage kernels). TWIN_LANES: W for the
 * warp kernel's exact and grid twins (XC != 0), else 0. */
template <class Op, class T, int PACKS, int BLOCK, int TWIN_LANES = 0>
constexpr int nd_rows_warp_min_blocks()
{
    return nd_rows_min_blocks<Op>(ND_CTX_WARP, (int)sizeof(T), PACKS, BLOCK,
                                  ND_ROWS_WARP_MIN_THREADS_PER_SM / BLOCK, TWIN_LANES);
}

/* Packs of parameters a warp-kernel lane of PACKS packs, in groups of `lanes` lanes a row, keeps
 * in flight (nd_param_pipe's HOLD): all of them where the op's param_hold(element bytes, PACKS,
 * lanes) (or ND_ROWS_PARAM_HOLD) says so, else 1. */
template <class Op, class = void> struct nd_op_has_param_hold : std::false_type {};
template <class Op>
struct nd_op_has_param_hold<Op, std::void_t<decltype(Op::param_hold(0, 0, 0))>> : std::true_type {};
template <class Op>
__host__ __device__ constexpr int nd_param_hold(int elem_bytes, int packs, int lanes)
{
    bool all = packs <= ND_ROWS_PARAM_HOLD;
    if constexpr (nd_op_has_param_hold<Op>::value)
        all = ND_ROWS_PARAM_HOLD < 0 ? Op::param_hold(elem_bytes, packs, lanes) : all;
    return all ? packs : 1;
}

/* Whether the warp kernel holds a lane's elements of T as floats (nd_regrow_wide) rather than
 * packed (nd_regrow): where the op's wide_regs(element bytes, n) says so for the n = R * N
 * elements of its R rows. */
template <class Op, class = void> struct nd_op_has_wide_regs : std::false_type {};
template <class Op>
struct nd_op_has_wide_regs<Op, std::void_t<decltype(Op::wide_regs(0, 0))>> : std::true_type {};
template <class Op> __host__ __device__ constexpr bool nd_wide_regs(int elem_bytes, int n)
{
    if constexpr (nd_op_has_wide_regs<Op>::value)
        return elem_bytes < 4 && Op::wide_regs(elem_bytes, n);
    else
        return false;
}

/* XC > 0: rows of exactly XC = W * PACKS * VEC columns on the 16-byte grid (ND_ROWS_EXACT):
 * every lane full, h[] 0, cols == XC. XC = ND_XC_GRID: rows of whole packs on the grid
 * (ND_ROWS_GRID_TWIN), h[] 0, an element valid where its pack starts in the row. */
template <int W, int R, int PACKS, int VEC, int XC = 0> struct nd_warp_ctx {
    int h[R];
    int gl;
    int cols;
    float n;
    /* column of element e (pack e / VEC) of this lane's share of row r */
    __device__ __forceinline__ bool valid(int r, int e) const
    {
        if constexpr (XC == ND_XC_GRID)
            return ((e / VEC) * W + gl) * VEC < cols;
        int c = ((e / VEC) * W + gl) * VEC + (e % VEC) - h[r];
        return XC > 0 || (c >= 0 && c < cols);
    }
    /* true when every element this lane holds of row r is in the row (no pads) */
    __device__ __forceinline__ bool full(int r) const
    {
        return XC > 0 ||
               ((gl > 0 || h[r] == 0) && ((PACKS - 1) * W + gl + 1) * VEC - h[r] <= cols);
    }
    /* true when row r is whole packs on the 16-byte grid: each pack in it or wholly past it */
    __device__ __forceinline__ bool whole_packs(int r) const
    {
        return XC != 0 || (h[r] == 0 && cols % VEC == 0);
    }
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        nd_warp_allreduce<W, K>(v, op);
    }
    static constexpr int kKind = ND_CTX_WARP;
    /* lane 0 of the group holds column 0: one shuffle */
    __device__ __forceinline__ float first(int, float f) const
    {
        return __shfl_sync(0xffffffffu, f, 0, W);
    }
};

template <class Op, class T, int VEC, int PACKS, int W, int R, int XC = 0>
__global__ void __launch_bounds__(nd_rows_warp_block<W, PACKS>(),
                                  (nd_rows_warp_min_blocks<Op, T, PACKS,
                                                           nd_rows_warp_block<W, PACKS>(),
                                                           XC != 0 ? W : 0>()))
nd_rows_warp_kernel(nd_rows_args<T> a, typename Op::Params prm)
{
    constexpr int GPW = 32 / W; /* groups per warp */
    constexpr int N = PACKS * VEC;
    const int lane = threadIdx.x & 31, gl = lane % W, grp = lane / W;
    const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int64_t nwarps = ((int64_t)gridDim.x * blockDim.x) >> 5;

    /* XC > 0 (ND_ROWS_EXACT): rows of XC columns, every pack whole and on the grid;
     * XC = ND_XC_GRID (ND_ROWS_GRID_TWIN): rows of whole packs on the grid, each pack a lane
     * holds in the row or wholly past its end */
    constexpr bool WH = XC > 0, GR = XC == ND_XC_GRID;
    const int64_t acols = WH ? (int64_t)XC : a.cols;
    nd_warp_ctx<W, R, PACKS, VEC, XC> ctx;
    ctx.gl = gl;
    ctx.cols = (int)acols;
    ctx.n = (float)acols;

    /* pf[r * PACKS + i][thread]: the next iteration's packs, loaded while this one computes */
    constexpr bool PF = false; /* see ND_ROWS_PREFETCH */
    __shared__ uint4 pf[PF ? R * PACKS : 1][nd_rows_warp_block<W, PACKS>()];
    const int64_t step = nwarps * (GPW * R);
    auto prefetch = [&](int64_t base) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int64_t rw = base + r * GPW + grp;
            const T *xrow = a.x + (rw < a.rows ? rw : 0) * a.cols;
            const int h = nd_grid_offset<T, VEC>(xrow);
            const int cols = rw < a.rows ? ctx.cols : 0; /* a row past the end is all pads */
#pragma unroll
            for (int i = 0; i < PACKS; i++)
                nd_row_prefetch<T, VEC, int>(xrow, (i * W + gl) * VEC - h, cols, Op::kPad,
                                             &pf[r * PACKS + i][threadIdx.x]);
        }
        nd_cp_async_commit();
    };

    /* The loop bound is the same for every lane of a warp: shuffles need all 32. */
    int64_t base = warp * (GPW * R);
    if (PF && base < a.rows)
        prefetch(base);
    for (; base < a.rows; base += step) {
        typename std::conditional<nd_wide_regs<Op>((int)sizeof(T), R * N), nd_regrow_wide<T, N>,
                                  nd_regrow<T, N>>::type v[R];
        int64_t row[R];
        if constexpr (PF)
            nd_cp_async_wait_all();
#pragma unroll
        for (int r = 0; r < R; r++) {
            row[r] = base + r * GPW + grp;
            /* a row past the end reads row 0 whole (WH) or as pads */
            const T *xrow = a.x + (row[r] < a.rows ? row[r] : 0) * acols;
            ctx.h[r] = WH || GR ? 0 : nd_grid_offset<T, VEC>(xrow);
#pragma unroll
            for (int i = 0; i < PACKS; i++) {
                uint32_t wds[4];
                if (PF)
                    nd_slot_words(&pf[r * PACKS + i][threadIdx.x], wds);
                else
                    nd_row_load_words<T, VEC, int, WH, GR>(xrow, (i * W + gl) * VEC - ctx.h[r],
                                                           row[r] < a.rows ? ctx.cols : 0,
                                                           Op::kPad, wds);
                v[r].put_pack(i, wds);
            }
        }
        if constexpr (ND_ROWS_WARP_LATE_N && !WH)
            nd_ctx_cols_here(ctx);
        if (PF && base + step < a.rows)
            prefetch(base + step);
        /* ND_ROWS_PARAM_PIPE: the first pack's parameters, loaded with x */
        constexpr bool PIPE = ND_ROWS_PARAM_PIPE && Op::kParams > 0 && R == 1 &&
                              !(sizeof(T) == 4 && PACKS >= 7);
        nd_param_pipe<Op, T, VEC, nd_param_hold<Op>((int)sizeof(T), PACKS, W), !WH> pp;
        bool pipe = false;
        if constexpr (PIPE) {
            pipe = row[0] < a.rows && pp.usable(a, ctx.full(0), ctx.h[0]);
            if (pipe)
                pp.template start<PACKS>(a, gl * VEC - ctx.h[0], W * VEC);
        }
        typename Op::State st[R];
        Op::template stats<R, N>(v, st, ctx, prm);
        bool same_h = true; /* all R rows on the same 16-byte grid offset (always when aligned) */
#pragma unroll
        for (int r = 0; r < R; r++) {
            same_h = same_h && ctx.h[r] == ctx.h[0];
            if (gl == 0 && row[r] < a.rows)
                Op::write_stats(st[r], row[r], prm);
        }
        if constexpr (PIPE) {
            if (pipe) {
                T *yrow = a.y + row[0] * acols;
                pp.template emit<PACKS, GR>(a, prm, st[0], yrow, gl * VEC - ctx.h[0], W * VEC,
                                            nd_grid_offset<T, VEC>(yrow) == ctx.h[0], v[0]);
                continue;
            }
        }
        if (R > 1 && Op::kParams > 0 && same_h) {
            /* one load of each parameter pack serves the R rows */
            const int h = ctx.h[0];
            const bool p0v = nd_grid_offset<T, VEC>(a.p0) == h, p1v = nd_grid_offset<T, VEC>(a.p1) == h;
#pragma unroll
            for (int i = 0; i < PACKS; i++) {
                const int c0 = (i * W + gl) * VEC - h;
                if (GR && c0 >= ctx.cols) /* this pack and the lane's next ones: past the rows */
                    break;
                float g[VEC], b[VEC];
                constexpr bool K = nd_param_l2_last<Op>((int)sizeof(T));
                if (Op::kParams >= 1)
                    nd_param_load<T, VEC, int, GR, K>(a.p0, c0, ctx.cols, p0v, 1.0f, g);
                if (Op::kParams >= 2)
                    nd_param_load<T, VEC, int, GR, K>(a.p1, c0, ctx.cols, p1v, 0.0f, b);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    if (row[r] >= a.rows)
                        continue;
                    T *yrow = a.y + row[r] * acols;
                    float o[VEC];
#pragma unroll
                    for (int j = 0; j < VEC; j++)
                        o[j] = Op::out(st[r], prm, v[r].get(i * VEC + j), g[j], b[j]);
                    nd_row_store<T, VEC, int, GR>(yrow, c0, ctx.cols,
                                                  nd_grid_offset<T, VEC>(yrow) == h, o);
                }
                asm volatile("" ::: "memory");
            }
            continue;
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            if (row[r] >= a.rows)
                continue;
            T *yrow = a.y + row[r] * acols;
            const nd_row_out ro = nd_row_out_make<T, VEC>(a, yrow, ctx.h[r]);
#pragma unroll
            for (int i = 0; i < PACKS; i++) {
                int c0 = (i * W + gl) * VEC - ctx.h[r];
                if (GR && c0 >= ctx.cols) /* this pack and the lane's next ones: past the row */
                    break;
                nd_row_emit<Op, T, VEC, false, int, GR>(a, prm, st[r], yrow, c0, ctx.cols, ro,
                                                        [&](int j) { return v[r].get(i * VEC + j); });
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Block / cluster kernel: one row per block (CLUSTER false) or per cluster of gridDim-consecutive
 * blocks (CLUSTER true, cluster size given at launch), the row in registers.
 * ------------------------------------------------------------------------------------------- */

/* This block's rank in its cluster and the cluster's size (0 and 1 outside a cluster). */
__device__ __forceinline__ void nd_cluster_place(bool cluster, unsigned &rank, unsigned &csize)
{
    rank = 0;
    csize = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster) {
        cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
        rank = cl.block_rank();
        csize = cl.num_blocks();
    }
#endif
}

/* At a cluster kernel's end: no block may leave while another still reads its shared memory. */
__device__ __forceinline__ void nd_cluster_leave(bool cluster)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cluster)
        cooperative_groups::this_cluster().sync();
#endif
}

template <int K> struct nd_rows_smem {
    nd_cluster_reduce_smem<K> r;
};

/* A row shared by a group of G threads (a block, a cluster, or a row's chunk blocks), thread g
 * holding packs g, g + G, ...: which of its elements are in the row, and the row's first element
 * (loaded by every thread). The block and split contexts add their all-reduce. */
/* WHOLE: every pack of the row is whole and on the 16-byte grid (the exact twins,
 * ND_ROWS_EXACT and ND_ROWS_SPLIT_EXACT): every element valid, every thread full. GRID: the row
 * is whole packs on the grid (the grid twin, ND_ROWS_GRID_TWIN; h 0): an element is valid where
 * its pack starts in the row. */
template <int VEC, int PACKS, bool WHOLE = false, bool GRID = false> struct nd_group_row {
    int h;
    float x0; /* the row's first element, loaded by every thread (see first()) */
    int g, G; /* this thread's index in the row's group, and the group size */
    int cols;
    float n;
    __device__ __forceinline__ bool valid(int, int e) const
    {
        if constexpr (GRID)
            return ((e / VEC) * G + g) * VEC < cols;
        int c = ((e / VEC) * G + g) * VEC + (e % VEC) - h;
        return WHOLE || (c >= 0 && c < cols);
    }
    __device__ __forceinline__ bool full(int) const
    {
        return WHOLE || ((g > 0 || h == 0) && ((PACKS - 1) * G + g + 1) * VEC - h <= cols);
    }
    /* true when the row is whole packs on the 16-byte grid: each pack in it or wholly past it */
    __device__ __forceinline__ bool whole_packs(int) const
    {
        return WHOLE || GRID || (h == 0 && cols % VEC == 0);
    }
    __device__ __forceinline__ float first(int, float) const { return x0; }
};

/* XC > 0: rows of exactly XC = G * PACKS * VEC columns on the 16-byte grid (ND_ROWS_EXACT);
 * ND_XC_GRID: rows of whole packs on the grid (ND_ROWS_GRID_TWIN). THREADS: the block's threads
 * (an op's statistics may choose by it, nd_ctx_threads). */
template <bool CLUSTER, int VEC, int PACKS, int XC = 0, int THREADS = 0>
struct nd_block_ctx : nd_group_row<VEC, PACKS, (XC > 0), (XC == ND_XC_GRID)> {
    static constexpr int kKind = CLUSTER ? ND_CTX_CROSS_BLOCK : ND_CTX_BLOCK;
    static constexpr int kThreads = THREADS;
    int *round;
    void *smem; /* nd_cluster_reduce_smem<K> for the largest K used */
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        auto &sm = *reinterpret_cast<nd_cluster_reduce_smem<K> *>(smem);
        if (CLUSTER)
            nd_cluster_allreduce<K>(v, op, sm, (*round)++);
        else
            nd_block_allreduce<K>(v, op, sm.block, (*round)++);
    }
};

/* Shared memory for every all-reduce an op makes with up to 4 floats. */
typedef nd_cluster_reduce_smem<4> nd_rows_reduce_smem;

/* Threads of the big block: one block a row for rows past kBlockMax x PM packs, where the
 * policy's big_block(element bytes, packs a thread, fast) takes it instead of the split kernel
 * (nd_rows_run). */
#ifndef ND_ROWS_BIG_BLOCK
#define ND_ROWS_BIG_BLOCK 1024
#endif
/* -1: the big block asks L2 for a row ahead as the policy's big_pf says (nd_rows_big_pf); n >= 0:
 * n eighths of a device-full of big blocks ahead for every big block (A/B runs) */
#ifndef ND_ROWS_BIG_PF
#define ND_ROWS_BIG_PF -1
#endif
/* The policies' big_pf for float32 rows of 8 packs a thread on a fast device (32768 columns): half
 * a device-full ahead. H200, three alternating rounds in each of two calls against a device-full
 * ahead, % of the copy ceiling (bench/results/rows_big_pf_h200.txt, calls 4 and 5): LayerNorm 90.8
 * -> 92.5 and 91.8 -> 93.9, softmax 96.3 -> 97.3 and 96.4 -> 97.7, log_softmax 95.9 -> 97.0 and
 * 96.0 -> 97.5; RMSNorm, whose big block did not prefetch before, 96.1 -> 97.9 against that and
 * 94.0 -> 97.5 against a device-full ahead. 16-bit rows of 65536 moved within 0.7 either way at
 * half a device-full, and keep a whole one. */
#ifndef ND_ROWS_BIG_PF32
#define ND_ROWS_BIG_PF32 4
#endif
/* The big block that asks L2 for float32 rows ahead (PF8 > 0), bits: 1, x loaded with the default
 * cache policy (ld.global), not evict-first; 2, y stored so. -1: as the op's big_plain(element
 * bytes) says (nd_big_plain), 0: evict-first both, as every other row kernel; n > 0: n for every
 * op (A/B runs). 16-bit rows keep evict-first: their big blocks at 65536 columns lost 2-13 points
 * of the copy ceiling loading x plainly (bench/results/plain_access_h200.txt, call 2). */
#ifndef ND_ROWS_BIG_PF_PLAIN
#define ND_ROWS_BIG_PF_PLAIN -1
#endif
template <class Op, class = void> struct nd_op_has_big_plain : std::false_type {};
template <class Op>
struct nd_op_has_big_plain<Op, std::void_t<decltype(Op::big_plain(0))>> : std::true_type {};
template <class Op> __host__ __device__ constexpr int nd_big_plain(int elem_bytes)
{
    if (elem_bytes != 4)
        return 0;
    if constexpr (nd_op_has_big_plain<Op>::value)
        return ND_ROWS_BIG_PF_PLAIN >= 0 ? ND_ROWS_BIG_PF_PLAIN : Op::big_plain(elem_bytes);
    else
        return ND_ROWS_BIG_PF_PLAIN > 0 ? ND_ROWS_BIG_PF_PLAIN : 0;
}

/* PF8 > 0: the big block that asks L2 for the row PF8 / 8 of a device-full of big blocks (one an
 * SM) after its own (nd_rows_big_pf). A kernel of its own: carried in every big block, that code
 * cost the rows that did not prefetch (RMSNorm's float32 32768 columns, then) 1.9 points of the
 * copy ceiling (H200, bench/results/rows_big_pf_h200.txt). */
template <class Op, class T, int VEC, int PACKS, int THREADS, bool CLUSTER, int XC = 0,
          int PF8 = 0>
__global__ void __launch_bounds__(THREADS,
                                  CLUSTER ? ND_ROWS_MIN_THREADS_PER_SM / THREADS
                                          : nd_rows_min_blocks<Op>(ND_CTX_BLOCK, (int)sizeof(T),
                                                                   PACKS, THREADS,
                                                                   ND_ROWS_MIN_THREADS_PER_SM /
                                                                       THREADS))
nd_rows_block_kernel(nd_rows_args<T> a, typename Op::Params prm)
{
    constexpr int N = PACKS * VEC;
    /* XC > 0 (ND_ROWS_EXACT, plain blocks): rows of XC columns, every pack whole and on the grid;
     * XC = ND_XC_GRID (ND_ROWS_GRID_TWIN, plain blocks): rows of whole packs on the grid */
    static_assert(XC <= 0 || (!CLUSTER && XC == THREADS * PACKS * VEC), "exact rows: one block's");
    static_assert(XC >= 0 || (!CLUSTER && XC == ND_XC_GRID), "grid rows: plain blocks");
    constexpr bool WH = XC > 0, GR = XC == ND_XC_GRID;
    /* y and the parameters unchecked: the exact twin's (ND_ROWS_EXACT_OUT), and the grid twin's
     * packs that lie in the row */
    constexpr bool WO = (WH && ND_ROWS_EXACT_OUT && Op::kParams >= 2) || GR;
    const int64_t acols = WH ? (int64_t)XC : a.cols;
    __shared__ nd_rows_reduce_smem smem;
    int round = 0;
    unsigned rank, csize;
    nd_cluster_place(CLUSTER, rank, csize);
    nd_block_ctx<CLUSTER, VEC, PACKS, XC, THREADS> ctx;
    ctx.g = (int)(rank * THREADS + threadIdx.x);
    ctx.G = (int)(csize * THREADS);
    ctx.cols = (int)acols;
    ctx.n = (float)acols;
    ctx.round = &round;
    ctx.smem = &smem;

    /* pf[i * THREADS + thread]: the next row's packs (dynamic shared memory, PACKS * THREADS
     * slots), loaded while this row is reduced and written */
    extern __shared__ uint4 pf[];
    constexpr bool PF = ND_ROWS_PREFETCH && CLUSTER;
    const int64_t step = gridDim.x / csize;
    auto prefetch = [&](int64_t rw) {
        const T *xrow = a.x + rw * a.cols;
        const int h = nd_grid_offset<T, VEC>(xrow);
#pragma unroll
        for (int i = 0; i < PACKS; i++)
            nd_row_prefetch<T, VEC, int>(xrow, (i * ctx.G + ctx.g) * VEC - h, ctx.cols, Op::kPad,
                                         &pf[i * THREADS + threadIdx.x]);
        nd_cp_async_commit();
    };
    int64_t row = blockIdx.x / csize;
    if (PF && row < a.rows)
        prefetch(row);
    /* x loaded, y stored with the default cache policy where the op says (nd_big_plain) */
    constexpr int PLAIN = PF8 > 0 ? nd_big_plain<Op>((int)sizeof(T)) : 0;
    constexpr bool XPLAIN = PLAIN & 1, YPLAIN = PLAIN & 2;
    for (; row < a.rows; row += step) {
        const T *xrow = a.x + row * acols;
        ctx.h = WH || GR ? 0 : nd_grid_offset<T, VEC>(xrow);
        constexpr bool X0_LATE = ND_ROWS_X0_LATE && sizeof(T) == 2;
        if (!X0_LATE) /* dropped by the compiler when the op does not use it */
            ctx.x0 = nd_to_float(__ldg(xrow));
        nd_regrow<T, N> v[1];
        if constexpr (PF)
            nd_cp_async_wait_all();
#pragma unroll
        for (int i = 0; i < PACKS; i++) {
            if (PF)
                nd_slot_words(&pf[i * THREADS + threadIdx.x], &v[0].w[i * 4]);
            else
                nd_row_load_words<T, VEC, int, WH, GR, XPLAIN>(
                    xrow, (i * ctx.G + ctx.g) * VEC - ctx.h, ctx.cols, Op::kPad, &v[0].w[i * 4]);
        }
        if constexpr (ND_ROWS_BLOCK_LATE_N && !CLUSTER && (ND_ROWS_EXACT_LATE_N || !WH) &&
                      sizeof(T) == 2)
            nd_ctx_cols_here(ctx);
        if (X0_LATE)
            ctx.x0 = nd_to_float(__ldg(xrow)); /* see ND_ROWS_X0_LATE */
        if (PF && row + step < a.rows)
            prefetch(row + step);
        /* the big block (one an SM): thread 0 asks L2 for the row a block starting about when
         * this one ends will read, once its own loads are out (nd_rows_big_pf) */
        if constexpr (PF8 > 0) {
            static_assert(THREADS == ND_ROWS_BIG_BLOCK && !CLUSTER, "the big block's prefetch");
            unsigned nsm; /* the SMs' count, or a little more where their ids have gaps */
            asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
            const int64_t ahead = row + (int64_t)nsm * PF8 / 8;
            if (threadIdx.x == 0 && ahead < a.rows) {
                /* the 16-byte grid's packs that hold the row (a bulk copy's alignment) */
                const uintptr_t b = (uintptr_t)(a.x + ahead * acols);
                const uintptr_t b0 = b & ~(uintptr_t)15;
                const uintptr_t b1 = (b + (uintptr_t)acols * sizeof(T) + 15) & ~(uintptr_t)15;
                nd_prefetch_l2((const void *)b0, (unsigned)(b1 - b0));
            }
        }
        /* ND_ROWS_PARAM_PIPE_BLOCK: the first pack's parameters, loaded with x */
        constexpr bool PIPE = ND_ROWS_PARAM_PIPE_BLOCK && Op::kParams >= 2 &&
                              nd_block_pipe_ok<T>(PACKS);
        nd_param_pipe<Op, T, VEC, 1, !WH> pp;
        bool pipe = false;
        if constexpr (PIPE) {
            pipe = pp.usable(a, ctx.full(0), ctx.h);
            if (pipe)
                pp.template start<PACKS>(a, ctx.g * VEC - ctx.h, ctx.G * VEC);
        }
        typename Op::State st[1];
        Op::template stats<1, N>(v, st, ctx, prm);
        if (ctx.g == 0)
            Op::write_stats(st[0], row, prm);
        T *yrow = a.y + row * acols;
        if constexpr (PIPE) {
            if (pipe) {
                pp.template emit<PACKS, WO, YPLAIN>(a, prm, st[0], yrow, ctx.g * VEC - ctx.h,
                                                    ctx.G * VEC,
                                                    nd_grid_offset<T, VEC>(yrow) == ctx.h, v[0]);
                continue;
            }
        }
        const nd_row_out ro = nd_row_out_make<T, VEC>(a, yrow, ctx.h);
#pragma unroll
        for (int i = 0; i < PACKS; i++) {
            int c0 = (i * ctx.G + ctx.g) * VEC - ctx.h;
            if (GR && c0 >= ctx.cols) /* this pack and the thread's next ones: past the row */
                break;
            nd_row_emit<Op, T, VEC, false, int, WO, YPLAIN>(a, prm, st[0], yrow, c0, ctx.cols, ro,
                                                            [&](int j) {
                                                                return v[0].get(i * VEC + j);
                                                            });
        }
    }
    nd_cluster_leave(CLUSTER);
}

/* ---------------------------------------------------------------------------------------------
 * Stream kernel (re-reading fallback) for rows longer than a cluster's registers.
 * ------------------------------------------------------------------------------------------- */

template <class T, int VEC> struct nd_stream_ctx {
    static constexpr int kElemBytes = (int)sizeof(T);
    const T *xrow;
    float x0; /* the row's first element (dropped by the compiler when the op does not use it) */
    int h;
    int g, G;
    int64_t cols, npacks;
    float n;
    int *round;
    void *smem;
    bool cluster;
    /* f(x) for every element of the row this thread owns */
    template <class F> __device__ __forceinline__ void for_each(F f) const
    {
        for (int64_t p = g; p < npacks; p += G) {
            float v[VEC];
            int64_t c0 = p * VEC - h;
            nd_row_load<T, VEC, int64_t>(xrow, c0, cols, 0.0f, v);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                if (c0 + j >= 0 && c0 + j < cols)
                    f(v[j]);
        }
    }
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        auto &sm = *reinterpret_cast<nd_cluster_reduce_smem<K> *>(smem);
        if (cluster)
            nd_cluster_allreduce<K>(v, op, sm, (*round)++);
        else
            nd_block_allreduce<K>(v, op, sm.block, (*round)++);
    }
};

template <class Op, class T, int VEC, int THREADS>
__global__ void __launch_bounds__(THREADS, ND_ROWS_MIN_THREADS_PER_SM / THREADS)
nd_rows_stream_kernel(nd_rows_args<T> a, typename Op::Params prm, int cluster)
{
    __shared__ nd_rows_reduce_smem smem;
    int round = 0;
    unsigned rank, csize;
    nd_cluster_place(cluster != 0, rank, csize);
    nd_stream_ctx<T, VEC> ctx;
    ctx.g = (int)(rank * THREADS + threadIdx.x);
    ctx.G = (int)(csize * THREADS);
    ctx.cols = a.cols;
    ctx.n = (float)a.cols;
    ctx.round = &round;
    ctx.smem = &smem;
    ctx.cluster = cluster != 0;
    for (int64_t row = blockIdx.x / csize; row < a.rows; row += gridDim.x / csize) {
        ctx.xrow = a.x + row * a.cols;
        ctx.h = nd_grid_offset<T, VEC>(ctx.xrow);
        ctx.npacks = (a.cols + ctx.h + VEC - 1) / VEC;
        ctx.x0 = nd_to_float(__ldg(ctx.xrow));
        typename Op::State st;
        Op::stream_stats(st, ctx, prm);
        if (ctx.g == 0)
            Op::write_stats(st, row, prm);
        T *yrow = a.y + row * a.cols;
        const nd_row_out ro = nd_row_out_make<T, VEC>(a, yrow, ctx.h);
        for (int64_t p = ctx.g; p < ctx.npacks; p += ctx.G) {
            float v[VEC];
            int64_t c0 = p * VEC - ctx.h;
            nd_row_load<T, VEC, int64_t>(ctx.xrow, c0, a.cols, 0.0f, v);
            nd_row_emit<Op, T, VEC, true, int64_t>(a, prm, st, yrow, c0, a.cols, ro,
                                                   [&](int j) { return v[j]; });
        }
    }
    nd_cluster_leave(cluster != 0);
}

/* ---------------------------------------------------------------------------------------------
 * Launchers
 * ------------------------------------------------------------------------------------------- */

/* Launch `kernel` with clusters of `csize` blocks of `threads`: `rows` units of work (rows, or
 * groups of rows for the warp kernel); clusters as many as fit on the device at once, plain
 * blocks (csize 1) one per unit (see ND_ROWS_GRID). */
template <class... KArgs, class... Args>
static nd_status nd_rows_launch(void (*kernel)(KArgs...), int threads, int csize, size_t smem,
                                int64_t rows, const nd_cuda_device_info *di, cudaStream_t s,
                                nd_error *err, const char *name, Args... args)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    nd_status st;
    if (smem > 0 && /* static shared memory counts towards the same 48 KB default limit */
        (st = nd_cuda_allow_smem(kernel, di->device, smem, err)) != ND_OK)
        return st;
    cfg.stream = s;
    int64_t units; /* clusters (or blocks) resident at once */
    if (csize > 1) {
        const void *fn = reinterpret_cast<const void *>(kernel);
        int allowed = 0;
        if (csize > 8 && !nd_cuda_occupancy_get(fn, di->device, 0, -2, 0, &allowed)) {
            ND_CUDA_TRY(err, cudaFuncSetAttribute(kernel,
                                                  cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
            nd_cuda_occupancy_put(fn, di->device, 0, -2, 0, 1);
        }
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = csize;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cfg.gridDim = dim3(csize);
        int nclusters = 0;
        if (!nd_cuda_occupancy_get(fn, di->device, threads, csize, smem, &nclusters)) {
            ND_CUDA_TRY(err, cudaOccupancyMaxActiveClusters(&nclusters, kernel, &cfg));
            nd_cuda_occupancy_put(fn, di->device, threads, csize, smem, nclusters);
        }
        if (nclusters < 1)
            return nd_error_set(err, ND_EUNSUPPORTED, "%s: a cluster of %d blocks of %d threads "
                                "does not fit on this device", name, csize, threads);
        units = nclusters;
    } else {
        int per_sm = 0;
        if ((st = nd_cuda_blocks_per_sm(kernel, di->device, threads, smem, &per_sm, err)) != ND_OK)
            return st;
        if (per_sm < 1)
            return nd_error_set(err, ND_EDEVICE, "%s: cannot run %d threads per block", name,
                                threads);
        units = (int64_t)per_sm * di->sm_count;
    }
    /* ND_ROWS_GRID 1: plain blocks get one block per unit of rows (the loop inside each kernel
     * then runs once); clusters stay persistent. 2: clusters too. 0: all persistent. */
    if (ND_ROWS_GRID == 2 || (ND_ROWS_GRID == 1 && csize == 1))
        units = rows;
    if (units > rows)
        units = rows;
    if (units * csize > 0x7fffffff)
        units = 0x7fffffff / csize;
    cfg.gridDim = dim3((unsigned)(units * csize));
    ND_PLAN_MORE(" block=%d cluster=%d grid=%lld smem=%zu", threads, csize,
                 (long long)(units * csize), smem);
    ND_CUDA_TRY(err, cudaLaunchKernelEx(&cfg, kernel, args...));
    ND_CUDA_CHECK_LAUNCH(err, name);
    return ND_OK;
}


/* A dispatch rule's A/B knob: 0 never, 1 where the policy says (`policy`), 2 always. */
constexpr bool nd_rows_knob(int knob, bool policy)
{
    return knob == 2 || (knob == 1 && policy);
}

/* ceil(log2(n)) for n >= 1 */
constexpr int nd_log2_ceil(int n)
{
    return n <= 1 ? 0 : 1 + nd_log2_ceil((n + 1) / 2);
}

/* Call f(std::integral_constant<int, P>) for the smallest P in [LO, HI] with P >= n (HI if none). */
template <int LO, int HI, class F> static inline nd_status nd_rows_pick(int n, F f)
{
    if constexpr (LO >= HI)
        return f(std::integral_constant<int, HI>());
    else if (n <= LO)
        return f(std::integral_constant<int, LO>());
    else
        return nd_rows_pick<LO + 1, HI>(n, f);
}

/* Devices with at least this peak DRAM bandwidth (GB/s) take the policies' "fast" routes (the
 * tile kernel's tile_tiles, the split kernel's split_threads_long, exact, warp_fit, big_block):
 * an H200 (4.8 TB/s) does, an H100 SXM (3.35) does not. The routes were measured on both. */
#ifndef ND_ROWS_FAST_GBPS
#define ND_ROWS_FAST_GBPS 4000.0
#endif

/* Whether every pack of every row of a is whole and on the 16-byte grid, in x, y and the
 * parameters: a row of whole packs then needs no bounds checks (ND_ROWS_EXACT). */
template <class T> static inline bool nd_rows_on_grid(const nd_rows_args<T> &a)
{
    return nd_aligned(a.x, 16) && nd_aligned(a.y, 16) && (!a.p0 || nd_aligned(a.p0, 16)) &&
           (!a.p1 || nd_aligned(a.p1, 16)) && a.cols % (16 / (int64_t)sizeof(T)) == 0;
}

/* 1: rows on the grid whose packs half the lanes of their power-of-two group hold exactly, in
 * more packs a lane than the op's policy names for that group, take that geometry's exact twin
 * where the policy's warp_fit says so (16-bit 192 columns: 8 lanes of 3 packs rather than 16
 * lanes of 2, four of them with one pack empty; 320 and 384: 8 lanes of 5 and 6 rather than 16
 * of 4; 640: 16 lanes of 5 rather than 32 of 3). 0: the policy's geometry, with lanes short of
 * packs. H100, three alternating rounds against the parameter pipe alone (ND_ROWS_PIPE_PARTIAL),
 * % of the copy ceiling (bench/results/model_widths_h100.txt): LayerNorm 16-bit 48 / 96 / 192 /
 * 320 / 384 / 640 / 896 columns 72-74 / 68 / 68 / 76 / 85 / 82-83 / 84-85 -> 100.5 / 91 / 95 /
 * 94 / 96 / 97 / 98, float32 24-96 85-87 -> 97-98; softmax and log_softmax 16-bit 96 71-76 ->
 * 97-98, 320 84-86 -> 96-97; RMSNorm 16-bit 48 / 96 91 / 82 -> 101 / 94, but 192-640 (4 and 8
 * lanes of 6-7 packs, 16 of 5) 1.1-2.7 lower, and softmax's 16 lanes of 5-7 packs 0.9 lower.
 * 2: every fitted geometry, whatever the policy says (A/B runs). */
#ifndef ND_ROWS_WARP_FIT
#define ND_ROWS_WARP_FIT 1
#endif
/* 1: rows on the grid that all W lanes of the policy's group hold exactly in one pack fewer than
 * it names (kSubPacks - 1 = 3: 16-bit 192 columns in 8 lanes of 3 packs, 384 in 16 of 3, float32
 * 192 in 16 of 3) take that geometry's exact twin where the policy's warp_fit says so, ahead of
 * the half-lanes fit above (192: 4 lanes of 6; 384: 8 of 6) and of W lanes of 4 with every lane a
 * pack short. H200, three alternating rounds, % of the copy ceiling, float16 / bfloat16
 * (bench/results/rows_fit_down.txt): RMSNorm 192 88.0 / 87.1 -> 94.3 / 94.0, 384 93.4 / 93.5 ->
 * 97.0 / 96.8; softmax 192 90.8 -> 95.3 / 95.6, 384 93.0 -> 97.6; log_softmax 192 92.5 / 92.6 ->
 * 95.3 / 94.9, 384 94.6 / 94.8 -> 97.3 / 97.1; LayerNorm 384 91.9 / 91.1 -> 93.1 / 90.9 (its
 * 192 took 8 of 3 already); float32 192 LayerNorm 93.9 -> 97.0, softmax 95.8 -> 97.0,
 * log_softmax 95.3 -> 97.4. H100, the kept rule: every changed shape -0.2 to +1.7 (softmax
 * 16-bit 192 95.4-95.7 -> 97.1-97.3, 384 97.0-97.2 -> 98.6-98.9; LayerNorm 16-bit 384 96.5-96.7
 * -> 97.3-97.5). Where a policy admits W lanes of 3, the half-lanes fit's W / 2 lanes of 6 packs
 * (the same rows: P = 3W) no longer take any row. 2: always, whatever the policy says (A/B
 * runs); 0: never. */
#ifndef ND_ROWS_WARP_FIT_DOWN
#define ND_ROWS_WARP_FIT_DOWN 1
#endif
/* 1: rows on the grid in lanes of SP = 2 packs (short of sub_full) that W / 4 lanes of 5-7 packs
 * hold exactly, where neither fit above takes them, take that geometry's exact twin where the
 * policy's quarter_fit says so (16-bit 80 columns in 2 lanes of 5 rather than 8 of 2, three of
 * them empty; 160 / 224 in 4 lanes of 5 / 7 rather than 16 of 2; float32 40 / 56 / 80 / 112 in
 * 2 or 4 lanes of 5 or 7). H200, three alternating rounds, every op taking every such geometry
 * (ND_ROWS_WARP_FIT_QUARTER 2), % of the copy ceiling, float16 / bfloat16 / float32
 * (bench/results/rows_fit_quarter_h200.txt):
 *   2 lanes of 5   LayerNorm 16-bit 80 56.4 / 56.1 -> 81.3 / 81.0, float32 40 57.3 -> 72.6;
 *                  softmax 16-bit 80 68.3 / 68.4 -> 86.1 / 85.8, log_softmax 79.1 / 74.3 ->
 *                  87.9 / 88.2; but float32 40 softmax -1.6, log_softmax +1.0, and RMSNorm
 *                  lost at both sizes (16-bit 80 94.2-94.6 -> 85.8-86.4, float32 40 -7.7)
 *   2 lanes of 7   LayerNorm 16-bit 112 71.0 / 70.7 -> 80.0 / 78.7; every other op and
 *                  float32 56 lost 0.3-16.7 (LayerNorm float32 56 72.2 -> 63.0)
 *   4 lanes of 5   float32 80 LayerNorm 54.4 -> 89.8, RMSNorm 55.0 -> 89.2, softmax 84.4 ->
 *                  96.0, log_softmax 82.4 -> 94.5; LayerNorm 16-bit 160 53.8 / 53.8 -> 83.9 /
 *                  82.3 (the other ops' 16-bit 160 take other geometries first)
 *   4 lanes of 7   float32 112 LayerNorm 70.7 -> 84.4, RMSNorm 71.3 -> 83.5, softmax +2.3,
 *                  log_softmax +4.0; LayerNorm 16-bit 224 70.1 / 69.9 -> 84.9 / 83.2
 * The policies take the gains (quarter_fit). Not measured on an H100; taken on every device.
 * 2: every such geometry, whatever the policy says (A/B runs); 0: never. */
#ifndef ND_ROWS_WARP_FIT_QUARTER
#define ND_ROWS_WARP_FIT_QUARTER 1
#endif
/* 1: rows on the grid that the power-of-two group below leaves many packs empty in (16-bit 72
 * columns: 9 packs in 8 lanes of 2, 7 empty; 288: 36 packs in 16 lanes of 4, 28 empty; 576: 72
 * in 32 lanes of 3, 24 empty) take fewer lanes of 5-7 packs in the grid twin, the row's packs
 * spread over them with at most one pack a lane empty (2 lanes of 5, 8 of 5, 16 of 5), where
 * that leaves at most half as many packs empty and the policy's tail_fit says so: for the
 * sub-warp groups W x SP / 8 lanes (a quarter of W lanes of 2 packs, half of W lanes of 4), for
 * a full warp 16 lanes. Rows that such a geometry holds exactly are the fits' above, not this
 * one's. H200, three alternating rounds in each of two calls, every op taking every such
 * geometry (ND_ROWS_WARP_FIT_TAIL 2) against the library, % of the copy ceiling, float16 /
 * bfloat16 (bench/results/rows_fit_tail_h200.txt):
 *   lanes of 5   gained wherever measured but RMSNorm's 16-bit 2 and 4 lanes (-1.6 to -16):
 *                16-bit 576 (16 x 5) 79-87 -> 92-97, 288 / 272 (8 x 5) 70-87 -> 87-96, 144 /
 *                136 (4 x 5) LayerNorm 47-49 -> 73-79, the others +2.5 to +9; float32 72
 *                (4 x 5) LayerNorm 49.4 -> 84.0, RMSNorm 50.1 -> 86.2, log_softmax 78.2 ->
 *                91.0, softmax +1.8; float32 136-288 (8 and 16 x 5) 81-88 -> 91-97
 *   lanes of 6-7 LayerNorm 16-bit in 4-16 lanes +0.4 to +15.6 and float32 4 x 6 / 4 x 7 (88 /
 *                104) 58.3 / 65.8 -> 81.0 / 78.2 (RMSNorm +25.5 / +15.5, softmax +1.0 / +1.2,
 *                log_softmax +3.9 / +2.1), log_softmax 16-bit 8 x 6 (352) +1.7 to +3.0; every
 *                16-bit 2 x 6 / 2 x 7 (88 / 104) lost (up to 23 points), and the other 6-7
 *                geometries lost 0.4-20 for at least one op
 * The policies take the gains (tail_fit). Not measured on an H100; taken on every device.
 * 2: every such geometry, whatever the policy says (A/B runs); 0: never. */
#ifndef ND_ROWS_WARP_FIT_TAIL
#define ND_ROWS_WARP_FIT_TAIL 1
#endif
/* Whether rows of exactly w lanes x packs take the quarter fit: the policy's
 * quarter_fit(element bytes, w, packs), or every one under ND_ROWS_WARP_FIT_QUARTER 2. */
template <class Pol> constexpr bool nd_rows_quarter_fit(int elem_bytes, int w, int packs)
{
    return nd_rows_knob(ND_ROWS_WARP_FIT_QUARTER, Pol::quarter_fit(elem_bytes, w, packs));
}
/* ND_ROWS_WARP_FIT_TAIL: packs a lane (5-7) for rows of P packs in tw lanes, where that leaves
 * some packs empty but at most half as many as w lanes of sp packs do; 0: no tail fit. */
static inline int nd_rows_tail_packs(int64_t P, int tw, int w, int sp)
{
    const int64_t pk = (P + tw - 1) / tw;
    const int64_t empty = (int64_t)w * sp - P, tail_empty = tw * pk - P;
    return pk >= 5 && pk <= 7 && tail_empty > 0 && 2 * tail_empty <= empty ? (int)pk : 0;
}
/* Whether rows of tw lanes x packs take the tail fit: the policy's tail_fit(element bytes, tw,
 * packs), or every one under ND_ROWS_WARP_FIT_TAIL 2. */
template <class Pol> constexpr bool nd_rows_tail_fit(int elem_bytes, int tw, int packs)
{
    return nd_rows_knob(ND_ROWS_WARP_FIT_TAIL, Pol::tail_fit(elem_bytes, tw, packs));
}

/* Whether rows of exactly w lanes x packs packs take that fitted geometry: the policy's
 * warp_fit(element bytes, w, packs, fast), or every one under ND_ROWS_WARP_FIT 2. */
template <class Pol> constexpr bool nd_rows_warp_fit(int elem_bytes, int w, int packs, bool fast)
{
    return ND_ROWS_WARP_FIT == 2 || Pol::warp_fit(elem_bytes, w, packs, fast);
}

/* Rows a group of the warp kernel takes at once, for groups of w lanes x packs packs: the
 * policy's rows_in_flight(w, packs) packs a lane in flight, at least one row. */
template <class Pol> constexpr int nd_rows_warp_r(int w, int packs)
{
    return packs >= Pol::rows_in_flight(w, packs) ? 1 : Pol::rows_in_flight(w, packs) / packs;
}

/* Blocks of BLOCK threads of the warp kernel for groups of W lanes, R rows a group (the launch
 * caps them). */
template <int BLOCK, int W, int R> static inline int64_t nd_rows_warp_units(int64_t rows)
{
    constexpr int64_t per_block = (BLOCK / W) * R;
    return (rows + per_block - 1) / per_block;
}

/* What a plan adds for a row kernel's XC: " exact" for its exact twin, " whole-packs" for its
 * grid twin, nothing for the generic kernel. */
constexpr const char *nd_rows_twin_word(int xc)
{
    return xc > 0 ? " exact" : xc == ND_XC_GRID ? " whole-packs" : "";
}

/* The warp kernel for groups of W lanes x PACKS packs, R rows a group: the generic kernel (XC 0),
 * its exact twin (XC = W * PACKS * VEC, ND_ROWS_EXACT) or its grid twin (ND_XC_GRID). */
template <class Op, class T, int VEC, int PACKS, int W, int R, int XC = 0>
static nd_status nd_rows_warp_launch(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                     const nd_cuda_device_info *di, cudaStream_t s,
                                     const char *name, nd_error *err)
{
    static_assert(XC <= 0 || XC == W * PACKS * VEC, "exact rows: a group's");
    ND_PLAN("warp W=%d packs=%d R=%d%s", W, PACKS, R, nd_rows_twin_word(XC));
    constexpr int B = nd_rows_warp_block<W, PACKS>();
    return nd_rows_launch(nd_rows_warp_kernel<Op, T, VEC, PACKS, W, R, XC>, B, 1, 0,
                          nd_rows_warp_units<B, W, R>(a.rows), di, s, err, name, a, prm);
}

/* The warp kernel for groups of W lanes x PACKS packs, R rows a group; its exact twin where
 * `exact` (the rows are W * PACKS * VEC columns on the grid and the policy takes the twin), else
 * its grid twin where `on_grid` (nd_rows_on_grid; ND_ROWS_GRID_TWIN) for groups of 8 lanes or
 * more, and for groups of 2 or 4 where 16-bit rows leave lanes short of packs
 * (ND_ROWS_GRID_TWIN_SHORT16). */
template <class Op, class T, int VEC, int PACKS, int W, int R>
static nd_status nd_rows_warp_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  bool exact, bool on_grid, const nd_cuda_device_info *di,
                                  cudaStream_t s, const char *name, nd_error *err)
{
    if constexpr (ND_ROWS_EXACT) {
        if (exact)
            return nd_rows_warp_launch<Op, T, VEC, PACKS, W, R, W * PACKS * VEC>(a, prm, di, s,
                                                                                name, err);
    }
    constexpr bool SMALL = ND_ROWS_GRID_TWIN_SHORT16 && sizeof(T) == 2 && W >= 2;
    if constexpr (ND_ROWS_GRID_TWIN && (W >= 8 || SMALL)) {
        /* groups of 8 lanes or more: every row on the grid; of 2 or 4: 16-bit rows that leave
         * some lanes short of packs (ND_ROWS_GRID_TWIN_SHORT16) */
        if (on_grid && (W >= 8 || a.cols < (int64_t)W * PACKS * VEC))
            return nd_rows_warp_launch<Op, T, VEC, PACKS, W, R, ND_XC_GRID>(a, prm, di, s, name,
                                                                             err);
    }
    return nd_rows_warp_launch<Op, T, VEC, PACKS, W, R>(a, prm, di, s, name, err);
}

#include "rows_split.cuh"
#include "rows_tile.cuh"
#include "rows_stage.cuh"
#include "rows_loop.cuh"
#include "rows_lean.cuh"

/* 0: never one big block a row (A/B runs); 1: where the policy's big_block says; 2: every row of
 * every op and dtype it holds, on every device (A/B runs) */
#ifndef ND_ROWS_BIG_BLOCK_TAKE
#define ND_ROWS_BIG_BLOCK_TAKE 1
#endif

/* Whether rows of `packs` packs a thread take the big block: the policy's big_block(element
 * bytes, packs, fast), never under ND_ROWS_BIG_BLOCK_TAKE 0; nd_big_block_any: for some row of
 * T on some device (so its kernels are compiled). */
template <class Pol> constexpr bool nd_rows_big_block(int elem_bytes, int packs, bool fast)
{
    return nd_rows_knob(ND_ROWS_BIG_BLOCK_TAKE, Pol::big_block(elem_bytes, packs, fast));
}
/* whether some device takes the big block at `packs` packs a thread (its kernels compiled) */
template <class Pol> constexpr bool nd_rows_big_packs(int elem_bytes, int packs)
{
    return nd_rows_big_block<Pol>(elem_bytes, packs, true) ||
           nd_rows_big_block<Pol>(elem_bytes, packs, false);
}
template <class Pol> constexpr bool nd_big_block_any(int elem_bytes, int pm)
{
    for (int p = pm / 2 + 1; p <= pm; p++)
        if (nd_rows_big_packs<Pol>(elem_bytes, p))
            return true;
    return false;
}
/* How far ahead a big block asks L2 for a row, in eighths of a device-full of big blocks (one an
 * SM): the policy's big_pf(element bytes, packs, fast) where it has one, else 0 (none). */
template <class Pol, class = void> struct nd_big_pf_of {
    static constexpr int get(int, int, bool) { return 0; }
};
template <class Pol>
struct nd_big_pf_of<Pol, std::void_t<decltype(Pol::big_pf(0, 0, false))>> {
    static constexpr int get(int elem_bytes, int packs, bool fast)
    {
        return Pol::big_pf(elem_bytes, packs, fast);
    }
};
template <class Pol> constexpr int nd_rows_big_pf(int elem_bytes, int packs, bool fast)
{
    return ND_ROWS_BIG_PF >= 0 ? ND_ROWS_BIG_PF : nd_big_pf_of<Pol>::get(elem_bytes, packs, fast);
}
/* the big block's prefetch distance where a device of that class takes the big block, else 0 */
template <class Pol> constexpr int nd_rows_big_pf_on(int elem_bytes, int packs, bool fast)
{
    return nd_rows_big_block<Pol>(elem_bytes, packs, fast)
               ? nd_rows_big_pf<Pol>(elem_bytes, packs, fast)
               : 0;
}

/*
 * The dispatch by row size, one place for every op. Pol (the op's policy) gives:
 *   kRegBytes      bytes of the row one thread keeps in registers (in the storage type, so a
 *                  16-bit row holds twice the elements of a float32 row per thread)
 *   rows_in_flight(w, packs)  packs a lane of the warp kernel loads before its first
 *                  reduction, in groups of w lanes of `packs` packs (R = that / packs rows, >= 1)
 *   kSubPacks      packs per lane in the sub-warp kernel for rows of sub_full..16 * kSubPacks
 *                  packs; half as many below sub_full(element bytes) (8 * kSubPacks; for
 *                  16-bit rows softmax's is 2 * kSubPacks and log_softmax's 4 * kSubPacks:
 *                  from 2 or 4 lanes)
 *   block_min(element bytes), kBlockMax   the smallest block of the block kernel for rows of
 *                  that element size, and the largest (powers of two, 64 <= block_min,
 *                  kBlockMax <= 8 * block_min)
 *   split_threads(element bytes)  threads of the split kernel's chunk blocks (8 packs each)
 *   split_threads_long(element bytes, fast)  optional: the same for rows of more than
 *                  ND_ROWS_SPLIT_LONG_CHUNKS (32) such chunks, on a device of
 *                  ND_ROWS_FAST_GBPS or more (fast) or less (rows_split.cuh)
 *   split_pf_ahead8(fast)  how far ahead the split kernel asks L2 for a chunk, in eighths of a
 *                  device-full of blocks, on a device of the fast class or not (rows_split.cuh)
 *   kClusterMax    largest cluster (<= 16)
 *   kStreamThreads block size of the stream kernel
 *   tile_tiles(element bytes, w, packs, fast, exact, full)  tiles a block of the tile kernel
 *                  takes for the warp kernel's groups of w lanes x packs packs (rows_tile.cuh)
 *                  on a device of ND_ROWS_FAST_GBPS or more (fast) or less, for rows of exactly
 *                  the geometry's length (exact: the warp kernel's exact twin is the other
 *                  choice) or not, and rows that fill every lane (full, whatever exact says) or
 *                  not; 0: the warp kernel
 *   big_block(element bytes, packs, fast)  whether rows of more than kBlockMax * PM packs and
 *                  at most ND_ROWS_BIG_BLOCK (1024) * PM take one block of that many threads, of
 *                  `packs` packs a thread, rather than the split kernel, on a device of the
 *                  fast class or not
 *   big_pf(element bytes, packs, fast)  optional: how far ahead such a block asks L2 for a
 *                  row, in eighths of a device-full of big blocks (one an SM); 0: it does not
 *   exact(element bytes, cols, fast)  whether rows of exactly a warp or block kernel's cols
 *                  columns, on the 16-byte grid, take that kernel's exact twin (ND_ROWS_EXACT)
 *                  on a device of the fast class or not
 *   stage_packs(element bytes)  rows off the 16-byte grid (x's offset on it, or the width)
 *                  of at most this many packs of their own grid take the stage kernel
 *                  (rows_stage.cuh) where y shares x's offset, in the geometry that many packs
 *                  get below (<= 16 * kSubPacks: a sub-warp geometry)
 *   loop(element bytes, packs, fast)  the loop kernel's geometry (nd_loop_code(threads, packs
 *                  a pass); rows_loop.cuh) for rows on the grid of `packs` packs past the warp
 *                  kernels' on a device of the fast class or not; 0: not the loop kernel
 *   lean(element bytes, packs, fast)  the lean kernel's geometry (nd_lean_code(lanes a row,
 *                  rows a group, warps a block); rows_lean.cuh) for rows on the grid of `packs`
 *                  packs, at most lanes x ND_ROWS_LEAN_MAX_PK, on a device of the fast class or
 *                  not; 0: the branches below
 *   warp_fit(element bytes, w, packs, fast)  whether rows on the grid of exactly w lanes x
 *                  packs packs, where the branches below would take 2w lanes with some short
 *                  of packs (ND_ROWS_WARP_FIT) or w lanes of packs + 1 with every lane a pack
 *                  short (ND_ROWS_WARP_FIT_DOWN, packs = kSubPacks - 1), take that fitted
 *                  geometry's exact twin, on a device of the fast class or not
 *   quarter_fit(element bytes, w, packs)  whether rows on the grid of exactly w lanes x packs
 *                  packs (5-7), where the branches below would take 4w lanes of 2 packs with
 *                  some empty and neither fit above holds the row, take that geometry's exact
 *                  twin (ND_ROWS_WARP_FIT_QUARTER)
 *   tail_fit(element bytes, w, packs)  whether rows on the grid that w lanes of 5-7 packs hold
 *                  with at most one pack a lane empty, where the branches below would leave
 *                  twice as many packs empty or more, take that geometry's grid twin
 *                  (ND_ROWS_WARP_FIT_TAIL)
 * Choice by P, the most 16-byte packs any row spans (for rows that take the stage kernel, the
 * packs of the row's own grid, ceil(cols / VEC); the sub-warp branch's geometry then runs as the
 * stage kernel):
 *   lean(element bytes, P, fast) lean kernel (rows_lean.cuh), rows on the grid (on_grid) of
 *                                P <= W * ND_ROWS_LEAN_MAX_PK, ahead of every branch below
 *   P <= 16 * kSubPacks          warp kernel, W = P / SP rounded up to a power of two lanes per
 *                                row, SP = kSubPacks packs per lane (kSubPacks / 2 below
 *                                8 * kSubPacks packs). H200: 2 packs per lane instead of 1 for
 *                                rows of 4-31 packs, +5 to +20 points of the copy ceiling; 4
 *                                instead of 2 for 32-64 packs (16-bit 256 and 512 columns) -1
 *                                to +12, but -15 to -33 where it left a lane alone on a row
 *   P <= 32 * PM                 warp kernel, a full warp per row, ceil(P / 32) packs per lane
 *                                (both warp branches: the tile kernel, same W and packs, where
 *                                the policy's tile_tiles(element bytes, W, packs, fast, exact,
 *                                full) > 0 and
 *                                nd_rows_tile_ok: x, y on the 16-byte grid, whole packs a row)
 *   loop(element bytes, P, fast) loop kernel (rows_loop.cuh), rows on the grid (on_grid)
 *   P <= kBlockMax * PM          block kernel, the smallest block (from block_min) that
 *                                holds the row
 *   P <= 1024 * PM               block kernel of 1024 threads, where big_block says so (asking
 *                                L2 for a row ahead where big_pf says)
 *   P > kBlockMax * PM           split kernel (rows_split.cuh): chunk blocks of split_threads
 *                                threads combining through global memory, while a quarter of
 *                                the device holds a row's chunks at once (up to about 1M
 *                                float32 / 2M 16-bit columns); else:
 *   P <= kClusterMax * kBlockMax * PM   cluster kernel, the smallest power-of-two cluster
 *   else                         stream kernel (re-reads x: once per statistics round)
 * where PM = kRegBytes / 16 packs per thread.
 * The warp kernels (for the grid twin: groups of 8 lanes or more, or of 2 or 4 with 16-bit rows
 * short of packs) and the plain block kernels run their exact twin where the rows are the
 * kernel's length (exact), else their grid twin where the rows are on the grid
 * (ND_ROWS_GRID_TWIN). Rows on the grid that both warp branches' groups would leave many packs
 * empty in run fewer lanes of 5-7 packs instead, where the policy's warp_fit, quarter_fit or
 * tail_fit says so (ND_ROWS_WARP_FIT, _DOWN, _QUARTER, _TAIL).
 */
template <class Op, class T, class Pol>
static nd_status nd_rows_run(const nd_rows_args<T> &a, const typename Op::Params &prm, cudaStream_t s,
                             const char *name, nd_error *err)
{
    constexpr int VEC = nd_cuda_type<T>::pack;
    constexpr int PM = Pol::kRegBytes / 16;
    static_assert(PM >= 4 && (PM & (PM - 1)) == 0, "kRegBytes / 16 must be a power of two >= 4");
    const nd_cuda_device_info *di;
    nd_status st = nd_cuda_device_info_get(&di, err);
    if (st != ND_OK)
        return st;
    if (!nd_aligned(a.x, sizeof(T)) || !nd_aligned(a.y, sizeof(T)) || !nd_aligned(a.p0, sizeof(T)) ||
        !nd_aligned(a.p1, sizeof(T)))
        return nd_error_set(err, ND_EINVAL, "%s: tensors must be aligned to their element size",
                            name);
    const bool rows_aligned = nd_aligned(a.x, 16) && a.cols % VEC == 0;
    /* rows off the grid of up to the policy's stage_packs packs of their own grid run the stage
     * kernel (rows_stage.cuh), their geometry chosen from ceil(cols / VEC) packs */
    static_assert(Pol::stage_packs(2) <= 16 * Pol::kSubPacks && Pol::stage_packs(4) <= 16 * Pol::kSubPacks,
                  "stage rows are sub-warp rows");
    /* rows short of sub_full packs take kSubPacks / 2 packs a lane in at most 16 lanes: a larger
     * sub_full (a policy knob) would leave the packs past 16 lanes out of the row */
    static_assert(Pol::sub_full(2) <= 8 * Pol::kSubPacks && Pol::sub_full(4) <= 8 * Pol::kSubPacks,
                  "sub_full is at most 16 lanes of kSubPacks / 2 packs");
    const int64_t own_packs = (a.cols + VEC - 1) / VEC;
    const bool stage = !rows_aligned && own_packs <= Pol::stage_packs((int)sizeof(T)) &&
                       nd_rows_stage_ok(a);
    const int64_t P = rows_aligned ? a.cols / VEC : stage ? own_packs : (a.cols + 2 * VEC - 2) / VEC;
    const int64_t cap_block = (int64_t)Pol::kBlockMax * PM;
    const int max_cluster = di->cluster_launch ? Pol::kClusterMax : 1;
    const bool tile = nd_rows_tile_ok(a, di); /* the warp kernel's rows, x through the copy engine */
    const bool fast = di->mem_gbps >= ND_ROWS_FAST_GBPS; /* the policies' routes by device */
    /* whether the rows take the exact twin of a kernel of xc columns (ND_ROWS_EXACT) */
    const bool on_grid = nd_rows_on_grid(a);
    auto exact = [&](int xc) {
        return ND_ROWS_EXACT && on_grid && a.cols == xc && Pol::exact((int)sizeof(T), xc, fast);
    };

    /* the lean kernel (rows_lean.cuh), where the policy's lean() names a geometry for rows on
     * the grid of P packs */
    if constexpr (nd_rows_lean_any<Pol>((int)sizeof(T))) {
        if (on_grid && P <= 32 * ND_ROWS_LEAN_MAX_PK)
            if (const int code = nd_rows_lean_code<Pol>((int)sizeof(T), P, fast))
                return nd_rows_lean_run<Op, T, VEC, Pol>(a, prm, P, code, di, s, name, err);
    }
    /* ND_ROWS_WARP_FIT_TAIL: rows on the grid of P packs in TW lanes of the tail fit's packs
     * (5-7; nd_rows_tail_packs) where the policy takes that geometry; 0: not */
    auto tail_packs = [&](int tw, int w, int sp) {
        const int pk = ND_ROWS_WARP_FIT_TAIL && on_grid ? nd_rows_tail_packs(P, tw, w, sp) : 0;
        return pk && nd_rows_tail_fit<Pol>((int)sizeof(T), tw, pk) ? pk : 0;
    };
    /* The quarter (Q) and tail fits' warp kernel: WF lanes of pk (5-7) packs, the exact twin
     * (quarter: the rows are the geometry's length) or the grid twin (tail: the last lanes a
     * pack short), compiled only for the geometries the policy takes. */
    auto fitted = [&](auto wf, auto q, int pk) {
        constexpr int WF = decltype(wf)::value;
        constexpr bool Q = decltype(q)::value;
        return nd_rows_pick<5, 7>(pk, [&](auto pkc) {
            constexpr int PACKS = decltype(pkc)::value;
            constexpr int R = nd_rows_warp_r<Pol>(WF, PACKS);
            constexpr int XC = Q ? WF * PACKS * VEC : ND_XC_GRID;
            if constexpr (Q ? nd_rows_quarter_fit<Pol>((int)sizeof(T), WF, PACKS)
                            : nd_rows_tail_fit<Pol>((int)sizeof(T), WF, PACKS))
                return nd_rows_warp_launch<Op, T, VEC, PACKS, WF, R, XC>(a, prm, di, s, name, err);
            else
                return nd_error_set(err, ND_EUNSUPPORTED, "%s: no warp kernel of %d x %d packs",
                                    name, WF, PACKS);
        });
    };
    /* Every nd_rows_pick below starts at the least its branch is given (the branches before it
     * take the smaller rows, as noted at each): a lower start would only compile kernels that no
     * row reaches. Were one reached all the same, its n would go to the start's kernel, which
     * handles shorter rows too. */
    /* sub-warp groups of W lanes, SP packs per lane (W = P / SP rounded up to a power of two);
     * SP = kSubPacks takes P >= sub_full(element size) packs: sub_full / SP lanes or more */
    auto sub_warp = [&](auto sp) {
        constexpr int SP = decltype(sp)::value;
        const int64_t lanes = (P + SP - 1) / SP;
        const int log2w = lanes <= 1 ? 0 : 64 - __builtin_clzll((unsigned long long)(lanes - 1));
        constexpr int LW = SP == Pol::kSubPacks ? nd_log2_ceil(Pol::sub_full(sizeof(T)) / SP) : 0;
        return nd_rows_pick<LW, 4>(log2w, [&](auto lw) {
            constexpr int W = 1 << decltype(lw)::value;
            /* ND_ROWS_WARP_FIT_DOWN: all W lanes of SP - 1 packs, holding the row exactly,
             * where W lanes of SP would leave every lane a pack short */
            if constexpr (ND_ROWS_WARP_FIT_DOWN && ND_ROWS_EXACT && W >= 2 && SP >= 4) {
                constexpr int PACKS = SP - 1, XC = W * PACKS * VEC;
                if (P == W * PACKS && exact(XC) &&
                    (ND_ROWS_WARP_FIT_DOWN == 2 ||
                     nd_rows_warp_fit<Pol>((int)sizeof(T), W, PACKS, fast)))
                    return nd_rows_warp_launch<Op, T, VEC, PACKS, W, nd_rows_warp_r<Pol>(W, PACKS),
                                               XC>(a, prm, di, s, name, err);
            }
            /* ND_ROWS_WARP_FIT: W / 2 lanes of more than SP packs each, holding the row exactly */
            if constexpr (ND_ROWS_WARP_FIT && ND_ROWS_EXACT && W >= 2 && SP >= 2) {
                constexpr int WF = W / 2;
                if (P % WF == 0 && P / WF > SP && P / WF < 2 * SP && exact((int)P * VEC) &&
                    nd_rows_warp_fit<Pol>((int)sizeof(T), WF, (int)(P / WF), fast))
                    return nd_rows_pick<SP + 1, 2 * SP - 1>((int)(P / WF), [&](auto pk) {
                        constexpr int PACKS = decltype(pk)::value;
                        constexpr int R = nd_rows_warp_r<Pol>(WF, PACKS);
                        constexpr int XC = WF * PACKS * VEC;
                        return nd_rows_warp_launch<Op, T, VEC, PACKS, WF, R, XC>(a, prm, di, s,
                                                                                 name, err);
                    });
            }
            /* ND_ROWS_WARP_FIT_QUARTER: W / 4 lanes of 5-7 packs (lanes of SP = 2), holding
             * the row exactly, where neither fit above does (16-bit 80 and 160 columns: 2 lanes
             * of 5 and 4 of 5 rather than 8 and 16 lanes of 2, with 3 and 6 lanes empty) */
            if constexpr (ND_ROWS_WARP_FIT_QUARTER && ND_ROWS_EXACT && W >= 8 && SP == 2 &&
                          4 * SP - 1 <= PM) {
                constexpr int WQ = W / 4;
                if (P % WQ == 0 && P / WQ > 2 * SP && P / WQ < 4 * SP && exact((int)P * VEC) &&
                    nd_rows_quarter_fit<Pol>((int)sizeof(T), WQ, (int)(P / WQ)))
                    return fitted(std::integral_constant<int, WQ>(), std::true_type(),
                                  (int)(P / WQ));
            }
            /* ND_ROWS_WARP_FIT_TAIL: W x SP / 8 lanes of 5-7 packs, the last ones short */
            if constexpr (ND_ROWS_WARP_FIT_TAIL && W * SP / 8 >= 2 && PM >= 7)
                if (const int pk = tail_packs(W * SP / 8, W, SP))
                    return fitted(std::integral_constant<int, W * SP / 8>(), std::false_type(), pk);
            return nd_rows_pick<(W == 1 ? 1 : SP), SP>((int)P, [&](auto pk) {
                constexpr int PACKS = decltype(pk)::value;
                constexpr int R = nd_rows_warp_r<Pol>(W, PACKS);
                const bool ex = exact(W * PACKS * VEC);
                const bool full = a.cols == W * PACKS * VEC;
                if constexpr (nd_rows_stage_any<Pol>((int)sizeof(T), W, PACKS)) {
                    if (stage)
                        return nd_rows_stage_run<Op, T, VEC, PACKS, W>(a, prm, di, s, name, err);
                } else if (stage) { /* P counts the row's own packs: no warp kernel holds it */
                    return nd_error_set(err, ND_EUNSUPPORTED, "%s: no stage kernel of %d x %d packs",
                                        name, W, PACKS);
                }
                if constexpr (nd_rows_tiles_any<Pol>((int)sizeof(T), W, PACKS) > 0)
                    if (const int tiles = tile ? nd_rows_tiles<Pol>((int)sizeof(T), W, PACKS, fast, ex, full) : 0)
                        return nd_rows_tile_run<Op, T, VEC, PACKS, W>(a, prm, tiles, di, s, name, err);
                return nd_rows_warp_run<Op, T, VEC, PACKS, W, R>(a, prm, ex, on_grid, di, s, name,
                                                                 err);
            });
        });
    };
    if (P < Pol::sub_full(sizeof(T)))
        return sub_warp(std::integral_constant<int, Pol::kSubPacks / 2>());
    if (P <= 16 * Pol::kSubPacks)
        return sub_warp(std::integral_constant<int, Pol::kSubPacks>());
    if (P <= 32 * PM) { /* P > 16 * kSubPacks: more than kSubPacks / 2 packs per lane */
        /* ND_ROWS_WARP_FIT: 16 lanes of 5 or 7 packs (P = 80, 112), holding the row exactly,
         * where 32 lanes of 3 or 4 would leave some a pack short */
        if constexpr (ND_ROWS_WARP_FIT && ND_ROWS_EXACT && PM >= 7) {
            auto fit16 = [&](auto pk) {
                constexpr int PACKS = decltype(pk)::value;
                constexpr int R = nd_rows_warp_r<Pol>(16, PACKS);
                constexpr int XC = 16 * PACKS * VEC;
                return nd_rows_warp_launch<Op, T, VEC, PACKS, 16, R, XC>(a, prm, di, s, name, err);
            };
            if ((P == 80 || P == 112) && exact((int)P * VEC) &&
                nd_rows_warp_fit<Pol>((int)sizeof(T), 16, (int)(P / 16), fast))
                return P == 80 ? fit16(std::integral_constant<int, 5>())
                               : fit16(std::integral_constant<int, 7>());
        }
        /* ND_ROWS_WARP_FIT_TAIL: 16 lanes of 5-7 packs, the last ones short (P = 65-111) */
        if constexpr (ND_ROWS_WARP_FIT_TAIL && PM >= 7)
            if (const int pk = tail_packs(16, 32, (int)((P + 31) / 32)))
                return fitted(std::integral_constant<int, 16>(), std::false_type(), pk);
        return nd_rows_pick<Pol::kSubPacks / 2 + 1, PM>((int)((P + 31) / 32), [&](auto pk) {
            constexpr int PACKS = decltype(pk)::value;
            constexpr int R = nd_rows_warp_r<Pol>(32, PACKS);
            const bool ex = exact(32 * PACKS * VEC);
            const bool full = a.cols == 32 * PACKS * VEC;
            if constexpr (nd_rows_tiles_any<Pol>((int)sizeof(T), 32, PACKS) > 0)
                if (const int tiles = tile ? nd_rows_tiles<Pol>((int)sizeof(T), 32, PACKS, fast, ex, full) : 0)
                    return nd_rows_tile_run<Op, T, VEC, PACKS, 32>(a, prm, tiles, di, s, name, err);
            return nd_rows_warp_run<Op, T, VEC, PACKS, 32, R>(a, prm, ex, on_grid, di, s, name,
                                                              err);
        });
    }
    /* the block kernel, TH threads of `packs` packs a row: P > 32 * PM, and P > TH / 2 * PM for
     * TH > BMIN */
    constexpr int BMIN = Pol::block_min((int)sizeof(T));
    auto block = [&](auto th, int packs) {
        constexpr int TH = decltype(th)::value;
        return nd_rows_pick<(TH == BMIN ? 32 * PM / BMIN + 1 : PM / 2 + 1), PM>(packs, [&](auto pk) {
            constexpr int PACKS = decltype(pk)::value;
            /* the generic kernel (XC 0), its exact twin or its grid twin */
            auto launch = [&](auto xc) {
                [[maybe_unused]] constexpr int XC = decltype(xc)::value; /* not in the error path */
                /* the big block's prefetching kernel where the policy takes it on this device
                 * class (F: fast, S: not), eighths of a device-full ahead */
                constexpr int F = nd_rows_big_pf_on<Pol>((int)sizeof(T), PACKS, true);
                constexpr int S = nd_rows_big_pf_on<Pol>((int)sizeof(T), PACKS, false);
                auto prefetching = [&](auto pf) {
                    constexpr int PF = decltype(pf)::value;
                    constexpr int PL = PF > 0 ? nd_big_plain<Op>((int)sizeof(T)) : 0;
                    ND_PLAN("block packs=%d%s pf=%d/8%s", PACKS, nd_rows_twin_word(XC), PF,
                            PL == 3 ? " plain" : PL == 1 ? " plain-x" : PL == 2 ? " plain-y" : "");
                    return nd_rows_launch(
                        nd_rows_block_kernel<Op, T, VEC, PACKS, TH, false, XC, PF>, TH, 1, 0,
                        a.rows, di, s, err, name, a, prm);
                };
                if constexpr (TH == ND_ROWS_BIG_BLOCK && F > 0) {
                    if (fast)
                        return prefetching(std::integral_constant<int, F>());
                }
                if constexpr (TH == ND_ROWS_BIG_BLOCK && S > 0) {
                    if (!fast)
                        return prefetching(std::integral_constant<int, S>());
                }
                /* the plain kernel, compiled for the big block only where a device class takes
                 * it without the prefetch */
                constexpr int E = (int)sizeof(T);
                constexpr bool PLAIN = TH != ND_ROWS_BIG_BLOCK ||
                                       (nd_rows_big_block<Pol>(E, PACKS, true) && !F) ||
                                       (nd_rows_big_block<Pol>(E, PACKS, false) && !S);
                if constexpr (PLAIN) {
                    ND_PLAN("block packs=%d%s", PACKS, nd_rows_twin_word(XC));
                    return nd_rows_launch(nd_rows_block_kernel<Op, T, VEC, PACKS, TH, false, XC>,
                                          TH, 1, 0, a.rows, di, s, err, name, a, prm);
                } else {
                    return nd_error_set(err, ND_EUNSUPPORTED,
                                        "%s: no big block of %d packs without its prefetch", name,
                                        PACKS);
                }
            };
            constexpr bool BIG_NONE = TH == ND_ROWS_BIG_BLOCK &&
                                      !nd_rows_big_packs<Pol>((int)sizeof(T), PACKS);
            if constexpr (BIG_NONE) {
                /* the big block is compiled only for the packs a policy takes it at */
                return nd_error_set(err, ND_EUNSUPPORTED, "%s: no big block of %d packs", name,
                                    PACKS);
            } else {
                constexpr int XC = TH * PACKS * VEC;
                if constexpr (ND_ROWS_EXACT) {
                    if (exact(XC))
                        return launch(std::integral_constant<int, XC>());
                }
                if constexpr (ND_ROWS_GRID_TWIN) {
                    if (on_grid)
                        return launch(std::integral_constant<int, ND_XC_GRID>());
                }
                return launch(std::integral_constant<int, 0>());
            }
        });
    };
    /* the loop kernel (rows_loop.cuh), where the policy's loop() names a geometry for rows on
     * the grid of P packs */
    if constexpr (nd_rows_loop_any<Pol>((int)sizeof(T))) {
        /* one block a row: a grid of every row (ND_ROWS_GRID) of at most 2^31 - 1 */
        const bool loop_ok = ND_ROWS_GRID != 0 && on_grid && a.rows <= 0x7fffffff;
        const bool lfast = fast || ND_ROWS_LOOP_EVERY; /* the A/B knob (rows_loop.cuh) */
        if (const int code = loop_ok ? Pol::loop((int)sizeof(T), P, lfast) : 0)
            return nd_rows_loop_run<Op, T, VEC>(a, prm, code, di, s, name, err);
    }
    if (P <= cap_block) {
        int threads = BMIN;
        while ((int64_t)threads * PM < P)
            threads *= 2;
        const int packs = (int)((P + threads - 1) / threads);
        static_assert(Pol::kBlockMax <= 8 * BMIN, "block sizes: block_min .. 8x");
        if (threads == BMIN)
            return block(std::integral_constant<int, BMIN>(), packs);
        if (threads == 2 * BMIN)
            return block(std::integral_constant<int, 2 * BMIN>(), packs);
        if (threads == 4 * BMIN && 4 * BMIN < Pol::kBlockMax)
            return block(std::integral_constant<int, (4 * BMIN < Pol::kBlockMax ? 4 * BMIN : Pol::kBlockMax)>(),
                         packs);
        return block(std::integral_constant<int, Pol::kBlockMax>(), packs);
    }
    /* one block of ND_ROWS_BIG_BLOCK threads a row, where the policy's big_block takes it */
    constexpr int BIG = ND_ROWS_BIG_BLOCK;
    static_assert(Pol::kBlockMax < BIG && BIG <= 1024, "a big block is larger than kBlockMax");
    if constexpr (nd_big_block_any<Pol>((int)sizeof(T), PM)) {
        const int packs = (int)((P + BIG - 1) / BIG);
        if (P <= (int64_t)BIG * PM && nd_rows_big_block<Pol>((int)sizeof(T), packs, fast))
            return block(std::integral_constant<int, BIG>(), packs);
    }
    bool split = false;
    st = nd_rows_split_try<Op, T, Pol>(a, prm, P, fast, on_grid, di, s, name, err, &split);
    if (st != ND_OK || split)
        return st;
    if (P <= max_cluster * cap_block) {
        int csize = 2;
        while (csize * cap_block < P)
            csize *= 2;
        int packs = (int)((P + (int64_t)csize * Pol::kBlockMax - 1) / ((int64_t)csize * Pol::kBlockMax));
        return nd_rows_pick<PM / 2 + 1, PM>(packs, [&](auto pk) { /* P > csize / 2 * cap_block */
            constexpr int PACKS = decltype(pk)::value;
            ND_PLAN("cluster packs=%d", PACKS);
            return nd_rows_launch(nd_rows_block_kernel<Op, T, VEC, PACKS, Pol::kBlockMax, true>,
                                  Pol::kBlockMax, csize, ND_ROWS_PREFETCH * (size_t)PACKS * Pol::kBlockMax * 16,
                                  a.rows, di, s, err, name, a, prm);
        });
    }
    int csize = max_cluster;
    ND_PLAN("stream");
    return nd_rows_launch(nd_rows_stream_kernel<Op, T, VEC, Pol::kStreamThreads>,
                          Pol::kStreamThreads, csize, 0, a.rows, di, s, err, name, a, prm,
                          csize > 1 ? 1 : 0);
}

#endif /* ND_ROWS_CUH */
