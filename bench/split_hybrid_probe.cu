/*
 * split_hybrid_probe.cu - a design for rows longer than a block, measured and not built: chunk
 * blocks that hold their chunk partly in registers (as the split kernel does) and partly in
 * shared memory, so that an SM holds more of x at once.
 *
 * Why. Without its exchange (a probe that lets each chunk block use its own block's sums; wrong
 * results) the split kernel (kernels/rows_split.cuh) runs 128x1048576 rows at 86-95% of the copy
 * ceiling instead of 75-82 (bench/results/split_exchange_h200.txt): the wait for the row's other
 * chunks costs up to 17 points. A block waits, registers held and no loads in flight, for the
 * last chunk of its row to start, load and publish, plus a round trip through L2. Both parts
 * shrink against a block's lifetime when an SM holds more blocks (more bytes of x) at once: the
 * spread of a row's chunks over time is about (row bytes) / (bytes the device holds), and a
 * block's life grows with the bytes an SM holds. The register file holds 128 KB of x an SM (the
 * other half: addresses, sums, parameters); shared memory, 227 KB an SM, is unused by the split
 * kernel. Here each thread holds RP packs in registers and SP more in shared memory, brought by
 * cp.async (no registers, no bulk-copy barriers: each thread copies and later reads only its own
 * slots, so cp.async.wait_all is its only wait).
 *
 * The probe, for RMSNorm and LayerNorm (float32 sums; LayerNorm's shifted by the row's first
 * element, one all-reduce, as the library's split kernel):
 *   - a block takes a ticket (row t / C, chunk t % C, as the split kernel); each thread starts
 *     its SP cp.async copies (16 bytes each, L2 only), then loads its RP register packs;
 *   - the thread's sums over its register packs, then (cp.async.wait_all) over its shared-memory
 *     packs; the block all-reduce; thread 0 publishes the block's sums as one 64-bit flag word;
 *     warp 0 waits for the row's C words and folds them in a fixed order;
 *   - y written from registers and shared memory with the parameters (read-only path),
 *     evict-first.
 * Geometry TH x RP + SP: TH threads, RP + SP packs a thread, chunk TH * (RP + SP) * 16 bytes;
 * RP + 0 is the register-only chunk of the split kernel, in this probe's code, so the rows
 * measure what shared memory adds against the same code without it.
 *
 * H200 (bench/results/split_exchange_h200.txt, call 2), % of the copy ceiling: this probe's
 * register chunks (256 x 8+0) ran 8-12 points below the library's at every shape. Shared-memory
 * packs helped float32 RMSNorm at 262144 and 1048576 columns (256 threads: 73.3 -> 78.9 and 70.3
 * -> 75.1; 512: 74.8 -> 81.3 and 67.4 -> 79.3), 16-bit rows by at most 2 at 48 KB, and lost
 * beyond that (128x1048576 at 84 KB: 16-bit RMSNorm -5.6 to -5.8, LayerNorm -7.7 to -12). Not
 * built.
 *
 * Prints, per op, dtype and shape: the copy ceiling, the library and each geometry (blocks an SM
 * from the occupancy API, chunks a row) as % of it, and the probe's largest difference from the
 * library's output (poisoned before each check). Timing as bench_gpu's (graph replays).
 *
 * Build (bench/device_link.sh has made build/libndkernels.a):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/split_hybrid_probe.cu \
 *        build/libndkernels.a -o build/bench/split_hybrid_probe
 * Usage: split_hybrid_probe [cols ...]   (default 65536 262144 1048576; rows: 2^27 / cols)
 */
#include <cmath>

#include "split_probe.cuh"

/* OP 0: RMSNorm, y = x * rsqrt(mean(x^2) + eps) * g; OP 1: LayerNorm, (x - mean) * rstd * g + b.
 * Thread t's packs of the chunk: t + i * TH, i < RP in registers, RP <= i < RP + SP in shared
 * memory slot (i - RP) * TH + t. */
template <class T, int OP, int TH, int RP, int SP>
__global__ void __launch_bounds__(TH, 65536 / (TH * 64))
hybrid_chunk(const uint4 *__restrict__ x, uint4 *__restrict__ y, const uint4 *__restrict__ g,
             const uint4 *__restrict__ b, long P, int C, unsigned *ticket,
             unsigned long long *slots, float eps, float n)
{
    constexpr int VEC = 16 / sizeof(T), NW = TH / 32, CP = TH * (RP + SP);
    extern __shared__ uint4 buf[];
    __shared__ unsigned tk;
    __shared__ float shift;
    const int t = threadIdx.x;
    if (t == 0)
        tk = atomicAdd(ticket, 1u);
    __syncthreads();
    const long row = tk / (unsigned)C;
    const int chunk = (int)(tk % (unsigned)C);
    const long c0 = (long)chunk * CP;
    const int np = (int)min((long)CP, P - c0); /* packs of this chunk */
    const uint4 *xr = x + row * P + c0;
#pragma unroll
    for (int j = 0; j < SP; j++) {
        const int p = (RP + j) * TH + t;
        if (p < np)
            nd_cp_async16(buf + j * TH + t, xr + p);
    }
    nd_cp_async_commit();
    uint4 v[RP];
#pragma unroll
    for (int i = 0; i < RP; i++) {
        const int p = i * TH + t;
        v[i] = p < np ? __ldcs(xr + p) : make_uint4(0, 0, 0, 0);
    }
    if (OP == 1) {
        if (t == 0) {
            float f[VEC];
            unpack<T>(__ldg(x + row * P), f);
            shift = f[0];
        }
        __syncthreads();
    }
    const float sh = OP == 1 ? shift : 0.0f;
    float s = 0.0f, q = 0.0f;
    auto sum = [&](uint4 w) {
        float f[VEC];
        unpack<T>(w, f);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const float d = f[k] - sh;
            s += d;
            q = fmaf(d, d, q);
        }
    };
#pragma unroll
    for (int i = 0; i < RP; i++)
        if (i * TH + t < np)
            sum(v[i]);
    nd_cp_async_wait_all();
#pragma unroll
    for (int j = 0; j < SP; j++)
        if ((RP + j) * TH + t < np)
            sum(buf[j * TH + t]);
    probe_split_sums<NW>(s, q, slots, row, chunk, C);
    float m, rs;
    probe_norm_stats(OP, s, q, sh, n, eps, m, rs);
    uint4 *yr = y + row * P + c0;
    auto out = [&](uint4 w, int p) {
        __stcs(yr + p, probe_norm_pack<T, OP>(w, g + c0 + p, b + c0 + p, m, rs));
    };
#pragma unroll
    for (int i = 0; i < RP; i++)
        if (i * TH + t < np)
            out(v[i], i * TH + t);
#pragma unroll
    for (int j = 0; j < SP; j++)
        if ((RP + j) * TH + t < np)
            out(buf[j * TH + t], (RP + j) * TH + t);
}

template <class T, int OP, int TH, int RP, int SP> struct hybrid {
    static constexpr int CP = TH * (RP + SP);
    static constexpr int smem = SP * TH * 16;
    static int blocks_per_sm()
    {
        auto k = hybrid_chunk<T, OP, TH, RP, SP>;
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        int nb = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, TH, smem));
        return nb;
    }
    static void launch(const void *x, void *y, const void *g, const void *b, long rows, long P,
                       int C, void *ws, float eps, long cols, cudaStream_t s)
    {
        hybrid_chunk<T, OP, TH, RP, SP><<<(unsigned)(rows * C), TH, (size_t)smem, s>>>(
            (const uint4 *)x, (uint4 *)y, (const uint4 *)g, (const uint4 *)b, P, C, (unsigned *)ws,
            (unsigned long long *)((char *)ws + 16), eps, (float)cols);
        CK(cudaGetLastError());
    }
};

template <class T, int OP, class H>
static void run_geom(const probe_case &c, long P, float eps)
{
    const int C = (int)((P + H::CP - 1) / H::CP);
    const int nb = H::blocks_per_sm();
    printf(" | %dK %d/SM C=%d", H::CP * 16 / 1024, nb, C);
    probe_chunks<T>(c, C, nb, [&](void *x, void *y, void *ws) {
        H::launch(x, y, c.g, c.b, c.rows, P, C, ws, eps, c.cols, c.s);
    });
}

template <class T, int OP> static void run(long cols, nd_dtype dt)
{
    const long P = cols * (long)sizeof(T) / 16;
    float eps;
    probe_case c = probe_norm_start<T>(cols, dt, OP, &eps);
    /* 256 x 8+0 (32 KB, 4 an SM by registers), with 4 / 8 / 13 packs more in shared memory
     * (16 / 32 / 52 KB a block: 4 an SM still); 512 x 8+0 and 8+13 (104 KB a block, 2 an SM) */
    run_geom<T, OP, hybrid<T, OP, 256, 8, 0>>(c, P, eps);
    run_geom<T, OP, hybrid<T, OP, 256, 8, 4>>(c, P, eps);
    run_geom<T, OP, hybrid<T, OP, 256, 8, 8>>(c, P, eps);
    run_geom<T, OP, hybrid<T, OP, 256, 8, 13>>(c, P, eps);
    run_geom<T, OP, hybrid<T, OP, 512, 8, 0>>(c, P, eps);
    run_geom<T, OP, hybrid<T, OP, 512, 8, 13>>(c, P, eps);
    printf("\n");
    probe_case_free(c);
}

int main(int argc, char **argv)
{
    printf("geometries: 256 x 8+0, 8+4, 8+8, 8+13; 512 x 8+0, 8+13 (threads x register + shared "
           "packs a thread)\n");
    for (long c : probe_widths(argc, argv))
        PROBE_NORM_CASES(run, c);
    return 0;
}
