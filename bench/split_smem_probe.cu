/*
 * split_smem_probe.cu - a design for rows longer than a block, measured and not built: chunk
 * blocks that hold their chunk of the row in shared memory, brought by the bulk-copy engine,
 * instead of in registers.
 *
 * Why. The split kernel (kernels/rows_split.cuh) holds a chunk of 512 x 8 or 256 x 8 packs in
 * each block's registers; the register file then holds 128 KB of x an SM (two or four blocks),
 * and a block that has published its statistics waits, registers held and no loads in flight,
 * for the slowest chunk of its row. On an H200 that path runs rows of 65536-1048576 columns at
 * 74-90% of the copy ceiling. Shared memory holds up to 227 KB an SM, filled by bulk copies that
 * need no registers and put a whole chunk's bytes in flight at once; a block of few registers
 * then computes from it twice (statistics, output). So an SM holds more of x at once (2-6 blocks
 * of 32-112 KB), and a chunk can be larger than registers allow (fewer chunks a row, fewer waits).
 *
 * The probe, for RMSNorm and LayerNorm (float32 sums; LayerNorm's shifted by the row's first
 * element, one all-reduce, as the library's):
 *   - a block takes a ticket (row t / C, chunk t % C, as the split kernel), thread 0 starts NPC
 *     bulk copies of the chunk's pieces into shared memory (an mbarrier each, L2 evict-first);
 *   - each thread sums its packs of each piece as it lands; the block all-reduce; thread 0
 *     publishes the block's sums as one 64-bit flag word (the workspace starts as all ones);
 *     warp 0 waits for the row's C words and folds them in a fixed order;
 *   - y written from shared memory with the parameters (read-only path), evict-first.
 *
 * H200, against the library's split kernel in the same process (% of the copy ceiling; every
 * geometry and shape in bench/results/split_smem_h200.txt):
 *                            library   best probe geometry (256 threads x 32 KB, 6 blocks an SM)
 *   RMSNorm   float32 / float16   2048x65536   90.9 / 89.6   80.5 / 79.5
 *                                 128x1048576  83.2 / 82.4   74.5 / 72.1
 *   LayerNorm float32 / float16   2048x65536   87.2 / 86.3   77.2 / 75.4
 *                                 128x1048576  77.4 / 78.9   68.9 / 69.0
 * Larger chunks (up to 112 KB, 2-3 a row at 65536 columns, 2-4 blocks an SM) did no better than
 * 32 KB x 6 at any shape: within the probe, neither more bytes an SM nor fewer waits a row paid.
 *
 * Prints, per op, dtype and shape: the copy ceiling (the faster of bench_gpu's copy kernel and
 * cudaMemcpyAsync), the library and each probe geometry (threads x KB a chunk, blocks an SM from
 * the occupancy API, chunks a row) as % of it, and the probe's largest difference from the
 * library's output (poisoned before each check). Timing as bench_gpu's (graph replays).
 *
 * Build (bench/device_link.sh has made build/libndkernels.a):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/split_smem_probe.cu \
 *        build/libndkernels.a -o build/bench/split_smem_probe
 * Usage: split_smem_probe [cols ...]   (default 65536 262144 1048576; rows: 2^27 / cols)
 */
#include <cmath>

#include "split_probe.cuh"

constexpr int MAXPC = 8; /* pieces (bulk copies, mbarriers) a chunk at most */

/* OP 0: RMSNorm, y = x * rsqrt(mean(x^2) + eps) * g; OP 1: LayerNorm, (x - mean) * rstd * g + b.
 * CP packs a chunk (shared memory: CP * 16 bytes), NPC pieces. */
template <class T, int OP, int TH>
__global__ void __launch_bounds__(TH)
smem_chunk(const uint4 *__restrict__ x, uint4 *__restrict__ y, const uint4 *__restrict__ g,
           const uint4 *__restrict__ b, long P, int C, int CP, int NPC, unsigned *ticket,
           unsigned long long *slots, float eps, float n)
{
    constexpr int VEC = 16 / sizeof(T), NW = TH / 32;
    extern __shared__ uint4 buf[];
    __shared__ uint64_t bar[MAXPC];
    __shared__ unsigned tk;
    __shared__ float shift;
    if (threadIdx.x == 0) {
        tk = atomicAdd(ticket, 1u);
        for (int k = 0; k < NPC; k++)
            nd_mbar_init(&bar[k], 1);
        nd_mbar_init_fence();
    }
    __syncthreads();
    const long row = tk / (unsigned)C;
    const int chunk = (int)(tk % (unsigned)C);
    const long c0 = (long)chunk * CP;
    const int np = (int)min((long)CP, P - c0); /* packs of this chunk */
    const int pp = (CP + NPC - 1) / NPC;        /* packs a piece */
    const uint4 *xr = x + row * P;
    if (threadIdx.x == 0) {
        for (int k = 0; k < NPC && k * pp < np; k++) {
            const int cnt = min(pp, np - k * pp);
            nd_mbar_expect_tx(&bar[k], (unsigned)cnt * 16u);
            nd_bulk_load<true>(buf + k * pp, xr + c0 + k * pp, (unsigned)cnt * 16u, &bar[k]);
        }
        if (OP == 1) {
            float f[VEC];
            unpack<T>(__ldg(xr), f);
            shift = f[0];
        }
    }
    if (OP == 1)
        __syncthreads();
    const float sh = OP == 1 ? shift : 0.0f;
    float s = 0.0f, q = 0.0f;
    for (int k = 0; k < NPC && k * pp < np; k++) {
        const int hi = min(np, (k + 1) * pp);
        nd_mbar_wait(&bar[k], 0);
        for (int p = k * pp + threadIdx.x; p < hi; p += TH) {
            float f[VEC];
            unpack<T>(buf[p], f);
#pragma unroll
            for (int j = 0; j < VEC; j++) {
                const float d = f[j] - sh;
                s += d;
                q = fmaf(d, d, q);
            }
        }
    }
    probe_split_sums<NW>(s, q, slots, row, chunk, C);
    float m, rs;
    probe_norm_stats(OP, s, q, sh, n, eps, m, rs);
    uint4 *yr = y + row * P + c0;
#pragma unroll 4
    for (int p = threadIdx.x; p < np; p += TH)
        __stcs(yr + p, probe_norm_pack<T, OP>(buf[p], g + c0 + p, b + c0 + p, m, rs));
}

struct geom {
    int th, kb; /* threads, KB of x a chunk */
};

template <class T, int OP, int TH> struct launcher {
    static int blocks_per_sm(int smem)
    {
        CK(cudaFuncSetAttribute(smem_chunk<T, OP, TH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                smem));
        int nb = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, smem_chunk<T, OP, TH>, TH, smem));
        return nb;
    }
    static void launch(const void *x, void *y, const void *g, const void *b, long rows, long P,
                       int C, int CP, void *ws, float eps, long cols, cudaStream_t s)
    {
        smem_chunk<T, OP, TH><<<(unsigned)(rows * C), TH, (size_t)CP * 16, s>>>(
            (const uint4 *)x, (uint4 *)y, (const uint4 *)g, (const uint4 *)b, P, C, CP, MAXPC,
            (unsigned *)ws, (unsigned long long *)((char *)ws + 16), eps, (float)cols);
        CK(cudaGetLastError());
    }
};

template <class T, int OP> static void run(long cols, nd_dtype dt)
{
    const long P = cols * (long)sizeof(T) / 16;
    float eps;
    probe_case c = probe_norm_start<T>(cols, dt, OP, &eps);
    for (geom gm : {geom{256, 32}, geom{512, 48}, geom{512, 64}, geom{512, 72}, geom{512, 96},
                    geom{512, 112}, geom{1024, 112}}) {
        const int CP = gm.kb * 1024 / 16, C = (int)((P + CP - 1) / CP);
        const int smem = CP * 16;
        int nb;
        void (*launch)(const void *, void *, const void *, const void *, long, long, int, int,
                       void *, float, long, cudaStream_t);
        if (gm.th == 256) {
            nb = launcher<T, OP, 256>::blocks_per_sm(smem);
            launch = launcher<T, OP, 256>::launch;
        } else if (gm.th == 512) {
            nb = launcher<T, OP, 512>::blocks_per_sm(smem);
            launch = launcher<T, OP, 512>::launch;
        } else {
            nb = launcher<T, OP, 1024>::blocks_per_sm(smem);
            launch = launcher<T, OP, 1024>::launch;
        }
        printf(" | %dx%dK %d/SM C=%d", gm.th, gm.kb, nb, C);
        probe_chunks<T>(c, C, nb, [&](void *x, void *y, void *ws) {
            launch(x, y, c.g, c.b, c.rows, P, C, CP, ws, eps, cols, c.s);
        });
    }
    printf("\n");
    probe_case_free(c);
}

int main(int argc, char **argv)
{
    for (long c : probe_widths(argc, argv))
        PROBE_NORM_CASES(run, c);
    return 0;
}
