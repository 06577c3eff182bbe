/*
 * rows_loop.cuh - the loop path of the row engine: one block a row that reads the row twice,
 * once for its statistics and once, from L2, for its output, holding none of it in registers
 * between the two. Included by rows.cuh before nd_rows_run.
 *
 * Why. The block kernel holds a thread's share of the row (up to kRegBytes) in registers from
 * its loads to its output, so its registers cap it at 44% occupancy (ncu, H200, RMSNorm float32
 * 49152x8192: 256 threads of 62 registers), and from its all-reduce to its stores an SM has no
 * loads of those blocks in flight. torch.compile's "red" kernels loop over the row instead and
 * keep only their sums (40 registers, 512 threads, 68% occupancy); their second read of x hits
 * L2 (DRAM read the same bytes as the block kernel's), and they took 743 us there where the block
 * kernel took 787 (bench/ncu_pair.sh). bench/loop_probe.cu measured that design first (RMSNorm
 * float32 2048-16384 columns and 16-bit 4096-32768 at 99-103% of the same-run copy ceiling where
 * the library ran 96-99; bench/results/loop_probe_h200.txt); this kernel, through RMSNorm's
 * policy (H200, alternating rounds, % of the same-run copy ceiling; bench/results/
 * rms_loop_h200.txt):
 *                               block kernel   loop kernel
 *   float32 2048-16384          96.4-98.4      99.2-101.4   (two runs)
 *   16-bit  4096                96.7-97.2      98.3-99.6    (two runs)
 *   16-bit  16384-32768         96.2-97.8      100.2-101.3  (two runs)
 *   16-bit  8192 (256 x 4)      96.6-96.8      98.6         (one run)
 * and LayerNorm float32 8192 columns 96.5-96.6 -> 100.5-100.6 (bench/results/ln_loop_h200.txt);
 * float32 5120 columns in 320 x 4 (a geometry of the policies' own, one pass that every thread
 * fills) RMSNorm 97.2 -> 99.8, LayerNorm 97.2 -> 100.0 (bench/results/f32_5120_h200.txt).
 * Its pick is per width: at other widths it lost to the block kernel, most where a pass leaves
 * some threads without a pack (RMSNorm 16-bit 5120 columns: 72 against 97.7), and LayerNorm's
 * 16-bit rows everywhere (16-30 points at 4096-32768 columns).
 *
 * How. Thread t of the block takes the row's 16-byte packs t, t + THREADS, ... U at a time: one
 * pass of U loads in flight (x with an L2 evict-last policy, so it is still there for the second
 * pass), feeding the op's stream statistics (Op::stream_stats, which the stream kernel runs too:
 * ctx.for_each(f) calls f on every element of the thread's packs, ctx.allreduce the block
 * all-reduce), then a second pass loading the same packs evict-first and writing y through
 * nd_row_emit. The path takes only rows on the 16-byte grid in whole packs (nd_rows_on_grid),
 * so neither pass tests a column; which rows and which (THREADS, U) are the op's policy's
 * loop(element bytes, packs, fast), measured per op.
 *
 * Tried (H200, two alternating rounds, bench/results/loop8k_h200.txt): rows of 8192 packs
 * (float32 32768 columns, 16-bit 65536) in 1024 threads x 1 or 2 packs a pass, every op
 * (LayerNorm float32 only). Every such row lost: 16-bit 65536 9-26 points of the copy ceiling
 * against the split kernel, float32 32768 7-23 against the split kernel and RMSNorm's big block
 * (96.1 -> 88). Rows of 64 KB run at 101% here; rows of 128 KB, two blocks an SM, hold 34 MB of
 * x between their passes. Nor did Inductor's form of those rows, which runs one block of 1024
 * threads an SM at 54 registers and stores y plainly (torch.compile at 101% there): RMSNorm
 * float32 32768 at 1024 x 2, one block an SM (launch bounds of 1), plain stores, 97.8 -> 77.4;
 * bench/loop_probe.cu's best such form (1024 x 4, plain stores) 94.9 (H200, bench/results/
 * f32_5120_h200.txt).
 */
#ifndef ND_ROWS_LOOP_CUH
#define ND_ROWS_LOOP_CUH

/* 0: never (A/B runs); 1: where the op's policy's loop() says */
#ifndef ND_ROWS_LOOP
#define ND_ROWS_LOOP 1
#endif
/* 1: every device asks the op's policy for a fast device's loop() rows (nd_rows_run; A/B
 * runs); 0: as measured */
#ifndef ND_ROWS_LOOP_EVERY
#define ND_ROWS_LOOP_EVERY 0
#endif

/* Threads an SM the kernel's launch bounds ask for: 2048, the most an SM holds, caps it at 32
 * registers, where every geometry below compiles without spilling (nvcc 13, -Xptxas -v) and
 * bench/loop_probe.cu's kernels ran; left to itself nvcc took 37-72, and a first build at those
 * (a loop over rows, since dropped, holding 5-16 of them) ran 16-bit 4096-32768 columns at 48-85%
 * of the copy ceiling where the probe ran 99-101 (H200). */
#ifndef ND_ROWS_LOOP_THREADS_PER_SM
#define ND_ROWS_LOOP_THREADS_PER_SM 2048
#endif

/* The stream statistics' context of the loop kernel: the block's threads over one row of whole
 * packs on the 16-byte grid, U packs a thread in flight. */
template <class T, int VEC, int U> struct nd_loop_ctx {
    static constexpr int kElemBytes = (int)sizeof(T);
    /* a thread sums few elements of a row (nd_ctx_short_chains): float32 rows take this path
     * only in geometries of at most 16 elements a thread (nd_layernorm_policy checks its own) */
    static constexpr bool kShortChains = true;
    const T *xrow;
    float x0; /* the row's first element (dropped by the compiler when the op does not use it) */
    int g, G;
    int npacks;
    int64_t cols;
    float n;
    int *round;
    void *smem;
    /* f(x) for every element of the packs this thread owns, U loads in flight at a time. x is
     * widened element by element, not through nd_word_floats: with that, nvcc 13 peeled the
     * first trip of the bfloat16 kernel of 256 x 2 and issued its second load only after the
     * first pack's arithmetic (RMSNorm bfloat16 49152x4096 96.9 -> 92.6% of the copy ceiling,
     * H200, bench/results/bf16_words_h200.txt). */
    template <class F> __device__ __forceinline__ void for_each(F f) const
    {
        const uint4 *x = reinterpret_cast<const uint4 *>(xrow);
        for (int p0 = g; p0 < npacks; p0 += G * U) {
            uint4 w[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (p0 + u * G < npacks)
                    w[u] = nd_ldg_keep<true>(x + p0 + u * G);
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (p0 + u * G >= npacks)
                    break;
                union { uint4 w; nd_pack<T, VEC> pk; } v;
                v.w = w[u];
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    f(nd_to_float(v.pk.v[j]));
            }
        }
    }
    template <int K, class O> __device__ __forceinline__ void allreduce(float (&v)[K], O op) const
    {
        auto &sm = *reinterpret_cast<nd_cluster_reduce_smem<K> *>(smem);
        nd_block_allreduce<K>(v, op, sm.block, (*round)++);
    }
};

template <class Op, class T, int VEC, int THREADS, int U>
__global__ void __launch_bounds__(THREADS, ND_ROWS_LOOP_THREADS_PER_SM / THREADS)
nd_rows_loop_kernel(nd_rows_args<T> a, typename Op::Params prm)
{
    __shared__ nd_rows_reduce_smem smem;
    int round = 0;
    nd_loop_ctx<T, VEC, U> ctx;
    ctx.g = (int)threadIdx.x;
    ctx.G = THREADS;
    ctx.npacks = (int)(a.cols / VEC);
    ctx.cols = a.cols;
    ctx.n = (float)a.cols;
    ctx.round = &round;
    ctx.smem = &smem;
    const nd_row_out ro = {true, true, true}; /* whole packs on the grid: nd_rows_on_grid */
    /* one row a block, no loop over rows (the dispatch takes this path only for grids of up to
     * 2^31 - 1 rows): a loop kept 5-16 more registers live, over the 32 of full occupancy */
    const int64_t row = blockIdx.x;
    ctx.xrow = a.x + row * a.cols;
    ctx.x0 = nd_to_float(__ldg(ctx.xrow));
    typename Op::State st;
    Op::stream_stats(st, ctx, prm);
    if (threadIdx.x == 0)
        Op::write_stats(st, row, prm);
    const uint4 *x = reinterpret_cast<const uint4 *>(ctx.xrow);
    T *yrow = a.y + row * a.cols;
    for (int p0 = ctx.g; p0 < ctx.npacks; p0 += THREADS * U) {
        uint4 w[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p0 + u * THREADS < ctx.npacks)
                w[u] = __ldcs(x + p0 + u * THREADS);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = p0 + u * THREADS;
            if (p >= ctx.npacks)
                break;
            union { uint4 w; nd_pack<T, VEC> pk; } v;
            v.w = w[u];
            nd_row_emit<Op, T, VEC, true, int, true>(a, prm, st, yrow, p * VEC, (int)a.cols, ro,
                                                     [&](int j) { return nd_to_float(v.pk.v[j]); });
        }
    }
}

/* The policy's loop geometry, packed as threads * 8 + packs a pass (0: not the loop path). */
constexpr int nd_loop_code(int threads, int packs) { return threads * 8 + packs; }
constexpr int nd_loop_threads(int code) { return code / 8; }

/* The geometry bench/loop_probe.cu measured best for rows of `packs` packs at each power of two
 * (512-4096): 256 x 2 for 512 packs, 512 x 2 up to 1024, 512 x 4 up to 2048, 1024 x 1 beyond.
 * The policies take it for the rows they name, or name another. */
constexpr int nd_loop_geometry(int64_t packs)
{
    return packs <= 512    ? nd_loop_code(256, 2)
           : packs <= 1024 ? nd_loop_code(512, 2)
           : packs <= 2048 ? nd_loop_code(512, 4)
                           : nd_loop_code(1024, 1);
}

/* Whether some row of T, of up to 8192 packs, takes the loop path on some device (so its
 * kernels are compiled; the policies name rows of 512-4096 packs). */
template <class Pol> constexpr bool nd_rows_loop_any(int elem_bytes)
{
    if (!ND_ROWS_LOOP)
        return false;
    for (int p = 1; p <= 1 << 13; p++)
        if (Pol::loop(elem_bytes, p, true) || Pol::loop(elem_bytes, p, false))
            return true;
    return false;
}

/* The loop kernel in the policy's geometry `code` (nd_loop_code); the geometries below are
 * every one a policy may name. */
template <class Op, class T, int VEC>
static nd_status nd_rows_loop_run(const nd_rows_args<T> &a, const typename Op::Params &prm,
                                  int code, const nd_cuda_device_info *di, cudaStream_t s,
                                  const char *name, nd_error *err)
{
    auto launch = [&](auto th, auto u) {
        constexpr int TH = decltype(th)::value, U = decltype(u)::value;
        ND_PLAN("loop threads=%d packs=%d", TH, U);
        return nd_rows_launch(nd_rows_loop_kernel<Op, T, VEC, TH, U>, TH, 1, 0, a.rows, di, s,
                              err, name, a, prm);
    };
    using std::integral_constant;
    switch (code) {
    case nd_loop_code(256, 2):
        return launch(integral_constant<int, 256>(), integral_constant<int, 2>());
    case nd_loop_code(256, 4):
        return launch(integral_constant<int, 256>(), integral_constant<int, 4>());
    case nd_loop_code(320, 4):
        return launch(integral_constant<int, 320>(), integral_constant<int, 4>());
    case nd_loop_code(512, 2):
        return launch(integral_constant<int, 512>(), integral_constant<int, 2>());
    case nd_loop_code(512, 4):
        return launch(integral_constant<int, 512>(), integral_constant<int, 4>());
    case nd_loop_code(1024, 1):
        return launch(integral_constant<int, 1024>(), integral_constant<int, 1>());
    default:
        return nd_error_set(err, ND_EUNSUPPORTED, "%s: no loop kernel of geometry %d", name, code);
    }
}

#endif /* ND_ROWS_LOOP_CUH */
