/*
 * split_l2_probe.cu - a design for rows longer than a block, measured and not (yet) built:
 * statistics blocks that never wait, then apply blocks that re-read x from L2.
 *
 * The split kernel (kernels/rows_split.cuh) holds a chunk of a row in each block's registers and
 * waits, registers held and no loads in flight, until every chunk of its row has published its
 * partial sums; on an H100 it reaches 85-95% of the copy ceiling where the block kernel (no
 * cross-block step) reaches 98-99. This probe tries the other order, for RMSNorm:
 *   - a statistics block loads its chunk (512 threads x 8 packs), sums x^2, publishes the sum
 *     in the row's slot (st.relaxed.gpu, the slot's empty pattern all ones) and exits;
 *   - an apply block loads its chunk, waits for the row's slots (warp 0 polls them), and writes
 *     y = x * rstd * w. It comes K rows after the statistics of its row (K rows ~ LAG bytes of
 *     x), so x is normally still in L2 and HBM sees x read once, as in a copy.
 * Blocks take tickets in the order they start (as the split kernel does); the ticket sequence is
 * stats(0..K-1), then stats(r + K) and apply(r) alternating row by row, then the last applies.
 * Only apply blocks wait, and only for statistics blocks of lower tickets, which have started and
 * never wait: no deadlock whatever the occupancy. Mode 3 loads x in the statistics blocks with an
 * L2 evict_last policy and in the apply blocks with __ldcs (evict first); mode 0 plainly.
 *
 * H100, against the library's split kernel in the same process (% of a cudaMemcpyAsync
 * device-to-device of the same bytes; bench/results/split_l2_probe_h100.txt):
 *                       library   mode 3, 8 MB of lag
 *   2048x65536  f32/f16  94.8/91.3   97.8/94.4
 *   512x262144  f32/f16  92.4/89.3   95.7/93.4
 *   128x1048576 f32/f16  85.4/86.3   86.4/90.3   (rows of 4 / 2 MB: K = 2 / 4)
 * 2-4 MB of lag lose 3-9 points (stats and apply blocks too close, the applies wait), 16-32 MB
 * lose 15-30 (x evicted before its second read; mode 3 holds on a little longer). +1 to +4 points
 * over the library. Built into the split kernel with each op's own statistics run by both kinds
 * of block (every op makes one all-reduce there), it lost 5-13 points on 16-bit rows and won only
 * float32 rows of 32768 columns (bench/results/split_two_phase_h100.txt): the statistics blocks
 * have to stay as lean as this probe's, and the apply blocks must not redo the statistics.
 *
 * Usage: split_l2_probe (no arguments; prints one line per dtype and shape)
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_timing.cuh"

constexpr int TH = 512, PK = 8;

__device__ __forceinline__ void st_relaxed(unsigned *p, unsigned v)
{
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* mode bit 0: apply blocks load x with __ldcs (evict first); bit 1: statistics blocks load it
 * with an L2 evict_last policy */
template <class T>
__global__ void __launch_bounds__(TH, 2)
twophase(const uint4 *__restrict__ x, uint4 *__restrict__ y, const uint4 *__restrict__ w, long rows,
         long P, int C, int K, unsigned *ticket, unsigned *slots, float eps, long cols, int mode)
{
    constexpr int VEC = 16 / sizeof(T);
    __shared__ unsigned tk;
    __shared__ float red[TH / 32];
    __shared__ float total;
    if (threadIdx.x == 0)
        tk = atomicAdd(ticket, 1u);
    __syncthreads();
    const long t = tk;
    const long KC = (long)K * C, B = (rows - K) * 2L * C;
    bool stats;
    long row, chunk;
    if (t < KC) {
        stats = true; row = t / C; chunk = t % C;
    } else if (t < KC + B) {
        const long u = t - KC, s = K + u / (2L * C), r = u % (2L * C);
        stats = r < C; row = stats ? s : s - K; chunk = stats ? r : r - C;
    } else {
        const long u = t - KC - B;
        stats = false; row = (rows + u / C) - K; chunk = u % C;
    }
    const uint4 *xr = x + row * P;
    const long p0 = chunk * (long)(TH * PK) + threadIdx.x;
    uint4 v[PK];
    if (stats) {
#pragma unroll
        for (int i = 0; i < PK; i++) {
            const long p = p0 + (long)i * TH;
            if (p < P) {
                if (mode & 2)
                    asm volatile("{\n\t.reg .b64 pol;\n\t"
                                 "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                                 "ld.global.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n\t}"
                                 : "=r"(v[i].x), "=r"(v[i].y), "=r"(v[i].z), "=r"(v[i].w)
                                 : "l"(xr + p));
                else
                    v[i] = xr[p];
            } else {
                v[i] = make_uint4(0, 0, 0, 0);
            }
        }
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < PK; i++) {
            float f[VEC];
            unpack<T>(v[i], f);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                s = fmaf(f[j], f[j], s);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if ((threadIdx.x & 31) == 0)
            red[threadIdx.x / 32] = s;
        __syncthreads();
        if (threadIdx.x < 32) {
            float a = threadIdx.x < TH / 32 ? red[threadIdx.x] : 0.0f;
#pragma unroll
            for (int o = 16; o > 0; o /= 2)
                a += __shfl_xor_sync(0xffffffffu, a, o);
            if (threadIdx.x == 0)
                st_relaxed(slots + row * C + chunk, __float_as_uint(a));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < PK; i++) {
        const long p = p0 + (long)i * TH;
        v[i] = p < P ? ((mode & 1) ? __ldcs(xr + p) : xr[p]) : make_uint4(0, 0, 0, 0);
    }
    if (threadIdx.x < 32) {
        float a = 0.0f;
        for (int c = threadIdx.x; c < C; c += 32) {
            unsigned u;
            while ((u = ld_relaxed(slots + row * C + c)) == 0xffffffffu) {
            }
            a += __uint_as_float(u);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2)
            a += __shfl_xor_sync(0xffffffffu, a, o);
        if (threadIdx.x == 0)
            total = a;
    }
    __syncthreads();
    const float rs = rsqrtf(total / (float)cols + eps);
    uint4 *yr = y + row * P;
#pragma unroll
    for (int i = 0; i < PK; i++) {
        const long p = p0 + (long)i * TH;
        if (p < P) {
            float f[VEC], g[VEC];
            unpack<T>(v[i], f);
            unpack<T>(__ldg(w + p), g);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                f[j] = f[j] * rs * g[j];
            __stcs(yr + p, pack<T>(f));
        }
    }
}

static float median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class T> static void run(long rows, long cols, nd_dtype dt, const char *dname)
{
    const long n = rows * cols, bytes = n * (long)sizeof(T);
    const long P = cols * (long)sizeof(T) / 16;
    const int C = (int)((P + TH * PK - 1) / (TH * PK));
    void *x, *y, *y2, *w, *ws;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaMalloc(&y2, bytes));
    CK(cudaMalloc(&w, cols * sizeof(T)));
    const size_t wsb = 16 + (size_t)rows * C * 4;
    CK(cudaMalloc(&ws, wsb));
    fill(dt, x, n, 1, -1.0f, 1.0f);
    fill(dt, w, cols, 2, 0.5f, 1.5f);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    auto timeit = [&](auto fn) {
        fn();
        CK(cudaDeviceSynchronize());
        std::vector<float> ms;
        for (int r = 0; r < 7; r++) {
            CK(cudaEventRecord(e0));
            for (int i = 0; i < 10; i++)
                fn();
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float m;
            CK(cudaEventElapsedTime(&m, e0, e1));
            ms.push_back(m / 10);
        }
        return median(ms);
    };
    const float t_copy =
        timeit([&] { CK(cudaMemcpyAsync(y2, x, bytes, cudaMemcpyDeviceToDevice)); });
    nd_norm_args a = {dt, rows, cols, x, y2, w, NULL, 1e-5f, NULL, NULL};
    auto run_lib = [&] {
        nd_error err;
        if (nd_cuda_rmsnorm(&a, 0, &err) != ND_OK) {
            fprintf(stderr, "lib: %s\n", err.msg);
            exit(1);
        }
    };
    const float t_lib = timeit(run_lib);
    printf("%-8s %5ldx%-8ld C=%-3d copy %7.1f us | lib %7.1f us %5.1f%%", dname, rows, cols, C,
           t_copy * 1e3, t_lib * 1e3, 100.0 * t_copy / t_lib);
    /* whole rows of lag for lag_mb MB of x, at least one and at most all */
    const long row_bytes = cols * (long)sizeof(T);
    auto lag_rows = [&](long lag_mb) {
        return (int)std::min(rows, std::max(1L, (lag_mb << 20) / row_bytes));
    };
    auto run_probe = [&](int K, int mode) {
        CK(cudaMemsetAsync(ws, 0xff, wsb)); /* slots empty */
        CK(cudaMemsetAsync(ws, 0, 4));      /* ticket 0 */
        twophase<T><<<(unsigned)(2 * rows * C), TH>>>(
            (const uint4 *)x, (uint4 *)y, (const uint4 *)w, rows, P, C, K, (unsigned *)ws,
            (unsigned *)((char *)ws + 16), 1e-5f, cols, mode);
        CK(cudaGetLastError());
    };
    for (int mode = 0; mode < 4; mode += 3)
        for (long lag_mb : {2L, 4L, 8L, 16L, 32L}) {
            const int K = lag_rows(lag_mb);
            const float t = timeit([&] { run_probe(K, mode); });
            printf(" | m%d lag %2ldMB K=%-4d %5.1f%%", mode, lag_mb, K, 100.0 * t_copy / t);
        }
    /* the probe's output against the library's (y2), on three stretches of 1M elements */
    run_lib();
    run_probe(lag_rows(8), 0);
    CK(cudaDeviceSynchronize());
    {
        std::vector<T> a1(1 << 20), a2(1 << 20);
        double md = 0;
        for (long off : {0L, n / 2, n - (1L << 20)}) {
            CK(cudaMemcpy(a1.data(), (T *)y + off, a1.size() * sizeof(T), cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(a2.data(), (T *)y2 + off, a2.size() * sizeof(T), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < a1.size(); i++)
                md = std::max(md, (double)fabsf((float)a1[i] - (float)a2[i]));
        }
        printf(" | maxdiff %.3g\n", md);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    for (void *p : {x, y, y2, w, ws})
        CK(cudaFree(p));
}

int main()
{
    for (long cols : {65536L, 262144L, 1048576L}) {
        const long rows = (128L << 20) / cols;
        run<float>(rows, cols, ND_FLOAT32, "float32");
        run<__half>(rows, cols, ND_FLOAT16, "float16");
    }
    return 0;
}
