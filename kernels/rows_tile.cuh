/*
 * rows_tile.cuh - the tile path of the row engine: rows the warp kernel's geometry covers (groups
 * of W lanes, PACKS packs a lane, one row a group), with x brought into shared memory by the
 * bulk-copy engine (cp.async.bulk, sm_90) several tiles at once instead of by each lane's loads.
 * Included by rows.cuh before nd_rows_run.
 *
 * Why. On an H200 the warp kernel's 16-bit LayerNorm rows of 64-1024 columns sat at 76-88% of the
 * copy ceiling where float32 rows reached 92-97, and the H100 -> H200 step gained them 1.1x where
 * the ceiling gained 1.3-1.4x (bench/results/h100_vs_h200_scaling.txt). A block of the warp
 * kernel has its rows in flight only from its loads to its first reduction, and how many blocks
 * run is set by registers. Here one thread asks the copy engine for all of a block's rows at
 * once, as a few tiles, and the block's lanes start on the first tile while the others travel.
 * Which geometries take it is measured, per op (the policies' tile_tiles; the numbers are there
 * and in bench/results/rows_tile_h200.txt): LayerNorm's 16-bit rows of the geometries of 256,
 * 512, 768 and 1024 columns on a fast device, RMSNorm's of 64 and 128, softmax's and
 * log_softmax's 16-bit rows of 72-128 and float32 rows of 33-64 columns. Elsewhere it measured
 * no faster than the warp kernel, or slower.
 *
 * How. A tile is ND_ROWS_TILE_BLOCK / 32 warps x 32 / W groups = one row per group of the block:
 * tile_rows consecutive rows, so one contiguous run of bytes (the path needs x and y on the
 * 16-byte grid and cols % VEC == 0, so every row and tile starts on it too). Block b takes the
 * per_block tiles from b * per_block on. Thread 0 initialises one mbarrier per tile, arms it with
 * the tile's byte count (arrive.expect_tx) and starts one cp.async.bulk global -> shared into the
 * tile's buffer; the copy engine completes the barrier's phase as the bytes land, and the block's
 * threads wait on it (try_wait.parity) before reading that tile. A lane reads its packs from
 * shared memory (16-byte loads, a warp's rows contiguous: no bank conflicts); the Op's statistics
 * and output run as in the warp kernel (nd_warp_ctx with R = 1, parameters as nd_param_pipe
 * takes them there, loaded once per block where a lane holds at most two packs of them); y is
 * stored from registers (st.global.cs).
 * Tried (H200, bench/results/rows_tile_h200.txt), each against the warp kernel: persistent
 * blocks taking a share of all tiles through refilled buffers (lost up to 33 points of the copy
 * ceiling); 4-8 tiles a block everywhere (fewer blocks than the device holds at these sizes: lost
 * up to 31); the parameters converted once per block into float tables in shared memory, read
 * back 16 bytes at a time, with x widened once (LayerNorm 16-bit: 256 columns 81 -> 77, 2048
 * 97 -> 62). And (H100, bench/results/ln_short_probes_h100.txt) an exact twin for rows of
 * exactly the geometry's length, the lanes' bounds tests compiled out as in the warp kernel's:
 * LayerNorm 16-bit 64 columns 94.7 / 95.8 -> 92.3 / 92.7, RMSNorm within 1.2 lower. On an H200
 * (bench/results/ln_short_h200.txt) that twin took 17% of LayerNorm's instructions (float16 256
 * and 1024 columns; issue active 59 -> 48%) and none of its time: 256-1024 columns within -1.3 to
 * +1.0 points, at 6 blocks an SM -4.3 to +0.2; RMSNorm's 16-bit 64 and 128 columns lost 1.9-4.5.
 */
#ifndef ND_ROWS_TILE_CUH
#define ND_ROWS_TILE_CUH

/* 0: never; 1: the warp-kernel geometries the op's policy names (tile_tiles), on rows on the
 * 16-byte grid (sm_90 and later); 2: every warp-kernel geometry (2 tiles a block where the policy
 * names none; for A/B runs). */
#ifndef ND_ROWS_TILE
#define ND_ROWS_TILE 1
#endif
/* 0: the policy's tiles a block; n > 0: n for every geometry the policy tiles (A/B runs). */
#ifndef ND_ROWS_TILE_PER_BLOCK
#define ND_ROWS_TILE_PER_BLOCK 0
#endif
#ifndef ND_ROWS_TILE_MAX
#define ND_ROWS_TILE_MAX 8 /* tiles (and barriers) a block takes at most */
#endif
/* 16-bit lanes of at most this many elements of an op without parameters keep x as floats
 * (nd_regrow_wide): softmax keeps its exponentials exactly instead of computing them again. */
#ifndef ND_ROWS_TILE_WIDE_MAX
#define ND_ROWS_TILE_WIDE_MAX 32
#endif
/* Blocks per SM the launch bounds ask for at most (the register cap: 6 -> 80 registers); fewer
 * where the op asks the warp kernel for fewer (nd_rows_min_blocks: LayerNorm's 16-bit lanes of 4
 * packs holding their parameters, 5 blocks, 96 registers). */
#ifndef ND_ROWS_TILE_MIN_BLOCKS
#define ND_ROWS_TILE_MIN_BLOCKS 6
#endif
/* 1: the tile copies carry an evict-first L2 policy, as x's loads in the other kernels do. */
#ifndef ND_ROWS_TILE_EVICT_FIRST
#define ND_ROWS_TILE_EVICT_FIRST 1
#endif

enum { ND_ROWS_TILE_BLOCK = 128 };

/* The launch's geometry (nd_rows_tile_run). */
struct nd_tile_geom {
    int tile_rows; /* rows of a tile: one per group of W lanes of the block */
    int per_block; /* tiles a block takes (<= ND_ROWS_TILE_MAX), all asked for at its start */
    int64_t ntiles;
};

/* ---------------------------------------------------------------------------------------------
 * Kernel
 * ------------------------------------------------------------------------------------------- */

/* Shared memory: the barriers (8 bytes each, ND_ROWS_TILE_MAX of them in 128 bytes), then the
 * block's tiles. */
static inline size_t nd_tile_smem_bytes(int per_block, int64_t tile_bytes)
{
    return 128 + (size_t)per_block * (size_t)tile_bytes;
}

template <class Op, class T, int PACKS> struct nd_tile_bounds {
    static constexpr int op = nd_rows_min_blocks<Op>(ND_CTX_WARP, (int)sizeof(T), PACKS,
                                                     ND_ROWS_TILE_BLOCK, ND_ROWS_TILE_MIN_BLOCKS);
    static constexpr int min_blocks = op < ND_ROWS_TILE_MIN_BLOCKS ? op : ND_ROWS_TILE_MIN_BLOCKS;
};

template <class Op, class T, int VEC, int PACKS, int W>
__global__ void __launch_bounds__(ND_ROWS_TILE_BLOCK, (nd_tile_bounds<Op, T, PACKS>::min_blocks))
nd_rows_tile_kernel(nd_rows_args<T> a, typename Op::Params prm, nd_tile_geom tg)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int GPW = 32 / W, N = PACKS * VEC;
    static_assert(ND_ROWS_TILE_MAX * 8 <= 128, "the barriers fit the 128-byte header");
    extern __shared__ __align__(128) unsigned char nd_tile_smem[];
    uint64_t *full = reinterpret_cast<uint64_t *>(nd_tile_smem);
    T *buf = reinterpret_cast<T *>(nd_tile_smem + 128);

    const int lane = threadIdx.x & 31, gl = lane % W;
    const int rt = (threadIdx.x >> 5) * GPW + lane / W; /* this group's row of each tile */
    const int64_t tile_elems = (int64_t)tg.tile_rows * a.cols;
    const int64_t t0 = (int64_t)blockIdx.x * tg.per_block;
    const int nt = (int)(tg.ntiles - t0 < tg.per_block ? tg.ntiles - t0 : tg.per_block);

    /* Thread 0 asks for all of the block's tiles at once, tile k into buffer k. */
    if (threadIdx.x == 0) {
        for (int k = 0; k < nt; k++)
            nd_mbar_init(&full[k], 1);
        nd_mbar_init_fence();
        for (int k = 0; k < nt; k++) {
            const int64_t r0 = (t0 + k) * tg.tile_rows;
            const int64_t nr = a.rows - r0 < tg.tile_rows ? a.rows - r0 : tg.tile_rows;
            const unsigned bytes = (unsigned)(nr * a.cols * (int64_t)sizeof(T));
            nd_mbar_expect_tx(&full[k], bytes);
            nd_bulk_load<ND_ROWS_TILE_EVICT_FIRST != 0>(buf + k * tile_elems, a.x + r0 * a.cols, bytes, &full[k]);
        }
    }
    __syncthreads(); /* the barriers are initialised before anyone waits on them */

    nd_warp_ctx<W, 1, PACKS, VEC> ctx;
    ctx.gl = gl;
    ctx.cols = (int)a.cols;
    ctx.n = (float)a.cols;
    ctx.h[0] = 0;
    /* Parameters as the warp kernel takes them (ND_ROWS_PARAM_PIPE, nd_param_hold); a lane that
     * holds all of its packs' and has at most two loads them once, while the tiles travel. */
    constexpr bool PIPE = ND_ROWS_PARAM_PIPE && Op::kParams > 0 && !(sizeof(T) == 4 && PACKS >= 7);
    constexpr int HOLD = nd_param_hold<Op>((int)sizeof(T), PACKS, W);
    constexpr bool ONCE = HOLD == PACKS && PACKS <= 2;
    nd_param_pipe<Op, T, VEC, HOLD> pp;
    const bool pipe = PIPE && pp.usable(a, ctx.full(0), 0); /* full lanes only (no PARTIAL) */
    if (ONCE && pipe)
        pp.template start<PACKS>(a, gl * VEC, W * VEC);
    constexpr bool WIDE = nd_wide_regs<Op>((int)sizeof(T), N) ||
                          (Op::kParams == 0 && sizeof(T) == 2 && N <= ND_ROWS_TILE_WIDE_MAX);

    for (int k = 0; k < nt; k++) {
        const int64_t row = (t0 + k) * tg.tile_rows + rt;
        const bool live = row < a.rows;
        typename std::conditional<WIDE, nd_regrow_wide<T, N>, nd_regrow<T, N>>::type v[1];
        nd_mbar_wait(&full[k], 0);
        const T *src = buf + k * tile_elems + (int64_t)rt * a.cols;
#pragma unroll
        for (int i = 0; i < PACKS; i++) {
            const int c0 = (i * W + gl) * VEC;
            uint32_t wds[4];
            if (live && c0 < ctx.cols) {
                const uint4 q = *reinterpret_cast<const uint4 *>(src + c0);
                wds[0] = q.x;
                wds[1] = q.y;
                wds[2] = q.z;
                wds[3] = q.w;
            } else { /* past the row or past the tensor: pads, no load */
                nd_row_load_words<T, VEC, int>(a.x, 0, 0, Op::kPad, wds);
            }
            v[0].put_pack(i, wds);
        }
        if (!ONCE && pipe)
            pp.template start<PACKS>(a, gl * VEC, W * VEC);
        typename Op::State st[1];
        Op::template stats<1, N>(v, st, ctx, prm);
        if (!live)
            continue;
        if (gl == 0)
            Op::write_stats(st[0], row, prm);
        T *yrow = a.y + row * a.cols;
        if (pipe) {
            pp.template emit<PACKS>(a, prm, st[0], yrow, gl * VEC, W * VEC, true, v[0]);
        } else {
            const nd_row_out ro = nd_row_out_make<T, VEC>(a, yrow, 0);
#pragma unroll
            for (int i = 0; i < PACKS; i++)
                nd_row_emit<Op, T, VEC, false, int>(a, prm, st[0], yrow, (i * W + gl) * VEC,
                                                    ctx.cols, ro,
                                                    [&](int j) { return v[0].get(i * VEC + j); });
        }
    }
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Launcher
 * ------------------------------------------------------------------------------------------- */

/* Whether rows of a can take the tile kernel: x and y on the 16-byte grid with whole packs a
 * row, on a device with the bulk-copy engine. */
template <class T>
static inline bool nd_rows_tile_ok(const nd_rows_args<T> &a, const nd_cuda_device_info *di)
{
    return ND_ROWS_TILE && di->cc_major >= 9 && nd_aligned(a.x, 16) && nd_aligned(a.y, 16) &&
           a.cols % (16 / (int64_t)sizeof(T)) == 0 && a.rows > 0;
}

/* Tiles a block of the tile kernel takes for warp-kernel groups of w lanes x packs packs: the
 * policy's tile_tiles(element bytes, w, packs, fast, exact, full) for a device of the fast class
 * or not, rows that would take the warp kernel's exact twin or not, and rows that fill every
 * lane (w * packs packs) or not (0: the warp kernel), or ND_ROWS_TILE 2's everywhere.
 * nd_rows_tiles_any: on some device, for some rows (the kernels that are compiled). */
template <class Pol>
constexpr int nd_rows_tiles(int elem_bytes, int w, int packs, bool fast, bool exact, bool full)
{
    return ND_ROWS_TILE == 2 && Pol::tile_tiles(elem_bytes, w, packs, fast, exact, full) == 0
               ? 2
               : Pol::tile_tiles(elem_bytes, w, packs, fast, exact, full);
}
template <class Pol> constexpr int nd_rows_tiles_any(int elem_bytes, int w, int packs)
{
    int most = 0;
    for (int k = 0; k < 8; k++) {
        const int t = nd_rows_tiles<Pol>(elem_bytes, w, packs, k & 1, k & 2, k & 4);
        most = t > most ? t : most;
    }
    return most;
}

/* Rows of the warp kernel's geometry (W lanes, PACKS packs) through the tile kernel, `tiles`
 * tiles a block (nd_rows_tiles for this device). */
template <class Op, class T, int VEC, int PACKS, int W>
static nd_status nd_rows_tile_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  int tiles, const nd_cuda_device_info *di, cudaStream_t s,
                                  const char *name, nd_error *err)
{
    nd_tile_geom tg;
    tg.tile_rows = (ND_ROWS_TILE_BLOCK / 32) * (32 / W);
    const int64_t tile_bytes = (int64_t)tg.tile_rows * a.cols * (int64_t)sizeof(T);
    tg.ntiles = (a.rows + tg.tile_rows - 1) / tg.tile_rows;
    int64_t per_block = ND_ROWS_TILE_PER_BLOCK > 0 ? ND_ROWS_TILE_PER_BLOCK : tiles;
    per_block = per_block < 1 ? 1 : per_block;
    per_block = per_block > ND_ROWS_TILE_MAX ? ND_ROWS_TILE_MAX : per_block;
    tg.per_block = (int)(per_block > tg.ntiles ? tg.ntiles : per_block);
    ND_PLAN("tile W=%d packs=%d rows=%d tiles=%d", W, PACKS, tg.tile_rows, tg.per_block);
    return nd_rows_launch(nd_rows_tile_kernel<Op, T, VEC, PACKS, W>, ND_ROWS_TILE_BLOCK, 1,
                          nd_tile_smem_bytes(tg.per_block, tile_bytes),
                          (tg.ntiles + tg.per_block - 1) / tg.per_block, di, s, err, name, a, prm,
                          tg);
}

#endif /* ND_ROWS_TILE_CUH */
