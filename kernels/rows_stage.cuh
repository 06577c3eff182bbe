/*
 * rows_stage.cuh - the stage path of the row engine: short rows off the 16-byte grid (a width
 * not a multiple of a pack, or x not on the grid), staged through shared memory so that every
 * access to device memory is a whole 16-byte pack. Included by rows.cuh before nd_rows_run.
 *
 * Why. The warp kernel lays a row out in packs of the memory's 16-byte grid (rows.cuh, Layout),
 * so a row off the grid has a partial pack at each end, loaded and stored element by element,
 * and its lanes branch on which of their packs are partial; a warp of rows with different grid
 * offsets runs both paths, and parameters on their own grid load element by element. Short rows
 * pay that on every row: ncu, H100, float16 softmax of 44 columns: 1.64 load and 1.55 store
 * instructions an element, 44 instructions an element, where the grid twin of 40 columns runs
 * 0.2, 0.2 and 27. On an H200 such 16-bit rows ran at 24-63% of the copy ceiling where rows on
 * the grid reach 70-95 (bench/results/rows_edge_pack_h200.txt). Widths users send are often off
 * the grid (softmax over 50 or 60 classes or experts, 77 tokens).
 *
 * How. A block's G = ND_ROWS_STAGE_BLOCK / W rows (one per group of W lanes) are one contiguous
 * run of G * cols elements, the span. The block copies the span, rounded out to the 16-byte
 * grid, into shared memory in 16-byte packs (each thread's packs all loaded before the first is
 * stored; a pack that sticks out of the tensor, at most the first and the last, element by
 * element), one barrier, and each group reads its row from there in 32-bit words of the row's
 * own grid: lane l holds words l, l + W, l + 2W, ... (nd_stage_ctx), so a warp's shared-memory
 * accesses are conflict-free and the parameters load a word at a time on their own grid. A
 * 16-bit word that starts at an odd element is two words funnel-shifted. Statistics and output
 * are the Op's, as in the warp kernel (R = 1); the output goes back over x's place in shared
 * memory, one barrier, and the block stores the span to y in 16-byte packs, element by element
 * only in the span's first and last packs (shared with the neighbouring blocks' spans). y must
 * sit at x's offset on the grid (the usual case; otherwise the warp kernel runs).
 *
 * Which rows: those of at most the policy's stage_packs packs of their own grid (nd_rows_run);
 * the numbers are at the policies and in bench/results/rows_stage_h200.txt. Longer rows lost:
 * a block's rows wait for all of its span before any lane starts and for each other at the
 * second barrier, and the word layout takes four times the shared-memory and parameter
 * instructions of 16-byte packs. Tried first: lanes holding 16-byte packs of the row's grid,
 * read as five 32-bit words funnel-shifted: lanes 8 apart hit the same bank, four-way conflicts
 * on every access (H100: 16-bit softmax 1001 / 2047 columns 67% of the copy ceiling against 92
 * in the warp kernel); and each thread's span packs loaded and stored one at a time (one memory
 * latency a pack: H200 3-20 points lower at 44-2047 columns than loading them together). Tried
 * after: two or four spans a block, the next span's loads issued before the current one is
 * worked on (H200: two gained 1-4 points at 16-bit 44-79 columns and lost 9-19 at 7 and 20,
 * where halving the grid leaves fewer blocks than the device holds; four lost up to 39).
 */
#ifndef ND_ROWS_STAGE_CUH
#define ND_ROWS_STAGE_CUH

/* 0: rows off the grid run the warp kernel's generic form; 1: the stage kernel, where x and y
 * share their offset on the grid. */
#ifndef ND_ROWS_STAGE
#define ND_ROWS_STAGE 1
#endif

enum { ND_ROWS_STAGE_BLOCK = 128 };

/* Shared memory for a span of `rows` rows of `cols` elements of `elem_bytes`: the span, a pack
 * of grid offset before it, and a pack of slack after it for the two-word reads. */
static inline size_t nd_stage_smem_bytes(int rows, int64_t cols, int elem_bytes)
{
    const int vec = 16 / elem_bytes;
    const int64_t packs = ((int64_t)rows * cols + vec - 1) / vec + 2;
    return (size_t)packs * 16;
}

/* The layout of a row in a group's lanes here: lane l holds the row's 32-bit words l, l + W,
 * l + 2W, ... (EW = 4 / sizeof(T) elements a word): element e of a lane is its word e / EW,
 * column (e / EW * W + l) * EW + e % EW. The context answers for that layout (valid, full;
 * never whole packs); the rest is the warp kernel's. */
template <int W, int PACKS, int VEC> struct nd_stage_ctx : nd_warp_ctx<W, 1, PACKS, VEC> {
    static constexpr int EW = VEC / 4; /* elements of a 32-bit word */
    __device__ __forceinline__ int col(int e) const { return ((e / EW) * W + this->gl) * EW + e % EW; }
    __device__ __forceinline__ bool valid(int, int e) const { return col(e) < this->cols; }
    __device__ __forceinline__ bool full(int) const { return col(PACKS * VEC - 1) < this->cols; }
    __device__ __forceinline__ bool whole_packs(int) const { return false; }
};

/* The 32-bit word of the staged span s that starts at element b: float32 one load; 16-bit the
 * word itself where b is even for every lane of the block (even), else the two words around it,
 * funnel-shifted by one element where b is odd (the same instructions for every lane). */
template <class T>
__device__ __forceinline__ uint32_t nd_stage_word(const T *s, int b, bool even)
{
    const uint32_t *w = reinterpret_cast<const uint32_t *>(s);
    if constexpr (sizeof(T) == 4)
        return w[b];
    else if (even)
        return w[b >> 1];
    else
        return __funnelshift_r(w[b >> 1], w[(b >> 1) + 1], (b & 1) * 16);
}

/* The parameters of the EW columns from c: one 32-bit load where the word is on p's grid of
 * words and in the row, else element by element (absent: dflt). */
template <class T, int EW>
__device__ __forceinline__ void nd_stage_param(const T *p, int c, int cols, bool word_ok,
                                               float dflt, float (&o)[EW])
{
    if (!p) {
#pragma unroll
        for (int t = 0; t < EW; t++)
            o[t] = dflt;
    } else if (EW == 1 || (word_ok && c + EW <= cols)) {
        nd_load_pack<T, EW>(p + c, o);
    } else {
#pragma unroll
        for (int t = 0; t < EW; t++)
            o[t] = c + t < cols ? nd_load1(p + c + t) : dflt;
    }
}

template <class Op, class T, int VEC, int PACKS, int W>
__global__ void __launch_bounds__(ND_ROWS_STAGE_BLOCK,
                                  (nd_rows_warp_min_blocks<Op, T, PACKS, ND_ROWS_STAGE_BLOCK>()))
nd_rows_stage_kernel(nd_rows_args<T> a, typename Op::Params prm)
{
    constexpr int G = ND_ROWS_STAGE_BLOCK / W; /* rows of a span */
    constexpr int N = PACKS * VEC;
    extern __shared__ uint4 nd_stage_buf[];
    T *s = reinterpret_cast<T *>(nd_stage_buf);
    const int gl = threadIdx.x % W, rt = threadIdx.x / W; /* this group's row of the span */
    const int64_t nspans = (a.rows + G - 1) / G;
    const T *const xend = a.x + a.rows * a.cols;

    constexpr int EW = VEC / 4; /* elements of a 32-bit word */
    nd_stage_ctx<W, PACKS, VEC> ctx;
    ctx.gl = gl;
    ctx.h[0] = 0;
    const bool p0w = nd_aligned(a.p0, 4), p1w = nd_aligned(a.p1, 4);
    const T pad = nd_from_float<T>(Op::kPad);

    for (int64_t sp = blockIdx.x; sp < nspans; sp += gridDim.x) {
        const int64_t r0 = sp * G;
        const int nr = (int)(a.rows - r0 < G ? a.rows - r0 : G);
        const int ne = nr * (int)a.cols; /* the span's elements */
        const T *xs = a.x + r0 * a.cols;
        const int hx = nd_grid_offset<T, VEC>(xs);
        const int npk = (hx + ne + VEC - 1) / VEC; /* packs of the grid the span touches */
        const T *x0 = xs - hx;                     /* on the grid */

        /* x's span into shared memory: every pack of a thread's share loaded before the first
         * is stored (a span is at most PACKS + 1 packs a thread), so its loads travel together;
         * only a pack that sticks out of the tensor (x not on the grid, at its first or last
         * row) goes element by element */
        constexpr int U = PACKS + 1;
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = threadIdx.x + u * ND_ROWS_STAGE_BLOCK;
            const T *p = x0 + k * VEC;
            if (k >= npk)
                break;
            if (p >= a.x && p + VEC <= xend) {
                q[u] = __ldcs(reinterpret_cast<const uint4 *>(p));
            } else {
                union { uint4 w; T v[VEC]; } e;
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    e.v[j] = p + j >= a.x && p + j < xend ? nd_ldcs1(p + j) : pad;
                q[u] = e.w;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = threadIdx.x + u * ND_ROWS_STAGE_BLOCK;
            if (k >= npk)
                break;
            nd_stage_buf[k] = q[u];
        }
        __syncthreads();

        /* this group's row, word k of lane gl its word k * W + gl (nd_stage_ctx); pads past
         * its end */
        const bool live = rt < nr;
        const int base = hx + rt * (int)a.cols;
        const bool even = ((hx | (int)a.cols) & 1) == 0; /* every row's base even */
        typename std::conditional<nd_wide_regs<Op>((int)sizeof(T), N), nd_regrow_wide<T, N>,
                                  nd_regrow<T, N>>::type v[1];
        ctx.cols = (int)a.cols;
#pragma unroll
        for (int i = 0; i < PACKS; i++) {
            union { uint32_t w[4]; T v[VEC]; } u;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int c = ((i * 4 + j) * W + gl) * EW;
                if (live && c < ctx.cols)
                    u.w[j] = nd_stage_word<T>(s, base + c, even);
#pragma unroll
                for (int t = 0; t < EW; t++)
                    if (!live || c + t >= ctx.cols)
                        u.v[j * EW + t] = pad;
            }
            v[0].put_pack(i, u.w);
        }
        nd_ctx_cols_here(ctx);
        typename Op::State st[1];
        Op::template stats<1, N>(v, st, ctx, prm);
        if (live) {
            const int64_t row = r0 + rt;
            if (gl == 0)
                Op::write_stats(st[0], row, prm);
#pragma unroll
            for (int k = 0; k < N / EW; k++) {
                const int c = (k * W + gl) * EW;
                if (c >= ctx.cols) /* this word and the lane's next ones: past the row */
                    break;
                float g[EW], b[EW], o[EW];
                if (Op::kParams >= 1)
                    nd_stage_param<T, EW>(a.p0, c, ctx.cols, p0w, 1.0f, g);
                if (Op::kParams >= 2)
                    nd_stage_param<T, EW>(a.p1, c, ctx.cols, p1w, 0.0f, b);
#pragma unroll
                for (int t = 0; t < EW; t++)
                    o[t] = Op::out(st[0], prm, v[0].get(k * EW + t), g[t], b[t]);
                T *d = s + base + c;
                if constexpr (sizeof(T) == 4) {
                    *d = o[0];
                } else if (even && c + EW <= ctx.cols) {
                    *reinterpret_cast<uint32_t *>(d) = nd_pack2<T>(o[0], o[1]);
                } else {
#pragma unroll
                    for (int t = 0; t < EW; t++)
                        if (c + t < ctx.cols)
                            d[t] = nd_from_float<T>(o[t]);
                }
            }
        }
        __syncthreads();

        /* the span out to y, on the same grid offset as x: whole packs, but the span's first
         * and last pack (shared with the neighbouring spans) element by element */
        T *y0 = a.y + r0 * a.cols - hx;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = threadIdx.x + u * ND_ROWS_STAGE_BLOCK;
            const int e0 = k * VEC - hx; /* the pack's first element in the span */
            if (k >= npk)
                break;
            if (e0 >= 0 && e0 + VEC <= ne) {
                __stcs(reinterpret_cast<uint4 *>(y0 + k * VEC), nd_stage_buf[k]);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    if (e0 + j >= 0 && e0 + j < ne)
                        y0[k * VEC + j] = s[k * VEC + j];
            }
        }
        __syncthreads(); /* the buffer is free for the next span */
    }
}

/* Whether rows of a take the stage kernel: off the 16-byte grid, with y at x's offset on it. */
template <class T> static inline bool nd_rows_stage_ok(const nd_rows_args<T> &a)
{
    constexpr int VEC = 16 / (int)sizeof(T);
    return ND_ROWS_STAGE && a.rows > 0 &&
           nd_grid_offset<T, VEC>(a.x) == nd_grid_offset<T, VEC>(a.y) &&
           (nd_grid_offset<T, VEC>(a.x) != 0 || a.cols % VEC != 0);
}

/* Whether rows of the sub-warp geometry of w lanes x packs packs can take the stage kernel: some
 * row of at most the policy's stage_packs packs has that geometry (w lanes of `packs` hold rows
 * of more than w / 2 x packs packs; one lane, of 1 to packs). So only those kernels compile. */
template <class Pol> constexpr bool nd_rows_stage_any(int elem_bytes, int w, int packs)
{
    return ND_ROWS_STAGE && (w == 1 ? 1 : w / 2 * packs + 1) <= Pol::stage_packs(elem_bytes);
}

/* Rows of the warp kernel's geometry (W lanes, PACKS packs of the row's own grid) through the
 * stage kernel. */
template <class Op, class T, int VEC, int PACKS, int W>
static nd_status nd_rows_stage_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                   const nd_cuda_device_info *di, cudaStream_t s,
                                   const char *name, nd_error *err)
{
    constexpr int G = ND_ROWS_STAGE_BLOCK / W;
    if (a.cols > (int64_t)W * PACKS * VEC) /* the kernel's loads and smem assume a lane's share */
        return nd_error_set(err, ND_EUNSUPPORTED, "%s: stage kernel of %d x %d packs for rows of %lld",
                            name, W, PACKS, (long long)a.cols);
    ND_PLAN("stage W=%d packs=%d rows=%d", W, PACKS, G);
    return nd_rows_launch(nd_rows_stage_kernel<Op, T, VEC, PACKS, W>, ND_ROWS_STAGE_BLOCK, 1,
                          nd_stage_smem_bytes(G, a.cols, (int)sizeof(T)), (a.rows + G - 1) / G,
                          di, s, err, name, a, prm);
}

#endif /* ND_ROWS_STAGE_CUH */
