/*
 * loop_probe.cu - a design for rows of 1024-32768 columns, measured here before it was built
 * (as kernels/rows_loop.cuh, for RMSNorm): one block a row that loops over it twice, its
 * statistics from a first pass and its output from a second pass that re-reads x from L2,
 * instead of holding the row in registers. And short rows laid out a warp a row.
 *
 * Why. ncu on an H200 (bench/ncu_pair.sh) put torch.compile's RMSNorm float32 49152x8192 at
 * 743 us where the library's block kernel (256 threads x 8 packs held in registers) took 787,
 * and its LayerNorm float32 49152x4096 at 371 us against 394: Inductor's "red" kernels loop over
 * the row, keep nothing but their sums, and run at 68-93% occupancy (32-40 registers, 512
 * threads) where the block kernel runs at 44%; their second read of x hits L2 (DRAM read bytes
 * equal to the library's), and HBM stayed busier (89% against 84%).
 *
 * The probe, for RMSNorm and LayerNorm (the library's numerics: LayerNorm's sums shifted by the
 * row's first element, float32 sums):
 *   pass 1: thread t takes packs t, t + TH, ... U at a time (U loads in flight), summing x^2
 *           (RMSNorm) or d = x - shift and d^2 (LayerNorm) in U chains; one block all-reduce;
 *   pass 2: the same packs again, y = f(x) with the parameters (read-only path), stored
 *           evict-first.
 * POL bit 0: pass 1 loads x with an L2 evict_last policy; bit 1: pass 2 loads it evict-first;
 * bit 2: pass 2 stores y with a plain st.global (else st.global.cs, evict-first), as Inductor's
 * "red" kernels do (their loads: evict_last in pass 1, evict_first in pass 2).
 *
 * Prints, per op, dtype and width: the copy ceiling (the faster of bench_gpu's copy kernel and
 * cudaMemcpyAsync), the library and each probe variant as % of it, and the probe's largest
 * difference from the library's output. Timing as bench_gpu's (graph replays, rotated buffers).
 *
 * Build (bench/device_link.sh has made build/libndkernels.a):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/loop_probe.cu \
 *        build/libndkernels.a -o build/bench/loop_probe
 * Usage: loop_probe [--float32] [cols ...]   (default 256 512 1024 ... 32768; rows 49152;
 *        --float32: that dtype only)
 */
#include <cmath>
#include <cstring>
#include <string>

#include "gpu_timing.cuh"

/* s += d and q += d^2 over a pack's elements, d = x - sh */
template <class T> __device__ __forceinline__ void add_shifted(uint4 v, float sh, float &s, float &q)
{
    float f[16 / sizeof(T)];
    unpack<T>(v, f);
#pragma unroll
    for (int j = 0; j < 16 / (int)sizeof(T); j++) {
        const float d = f[j] - sh;
        s += d;
        q = fmaf(d, d, q);
    }
}

__device__ __forceinline__ uint4 ld_last(const uint4 *p)
{
    uint4 r;
    asm volatile("{\n\t.reg .b64 pol;\n\t"
                 "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                 "ld.global.nc.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], pol;\n\t}"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* OP 0: RMSNorm (w = gamma), 1: LayerNorm (gamma, beta) */
template <class T, int OP, int TH, int U, int POL>
__global__ void __launch_bounds__(TH) loop_rows(const uint4 *__restrict__ x, uint4 *__restrict__ y,
                                                const uint4 *__restrict__ g,
                                                const uint4 *__restrict__ b, long P, long cols,
                                                float eps)
{
    constexpr int VEC = 16 / sizeof(T);
    __shared__ float red[2][TH / 32];
    const uint4 *xr = x + blockIdx.x * P;
    uint4 *yr = y + blockIdx.x * P;
    const int t = threadIdx.x;
    const float shift = OP == 1 ? (float)__ldg(reinterpret_cast<const T *>(xr)) : 0.0f;
    float s[U], q[U];
#pragma unroll
    for (int u = 0; u < U; u++)
        s[u] = q[u] = 0.0f;
    for (long p0 = t; p0 < P; p0 += (long)TH * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long p = p0 + (long)u * TH;
            v[u] = p < P ? ((POL & 1) ? ld_last(xr + p) : __ldg(xr + p)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const float sh = p0 + (long)u * TH < P ? shift : 0.0f; /* a pad pack adds 0 */
            add_shifted<T>(v[u], sh, s[u], q[u]);
        }
    }
#pragma unroll
    for (int u = 1; u < U; u++) {
        s[0] += s[u];
        q[0] += q[u];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
        s[0] += __shfl_xor_sync(0xffffffffu, s[0], o);
        q[0] += __shfl_xor_sync(0xffffffffu, q[0], o);
    }
    if ((t & 31) == 0) {
        red[0][t / 32] = s[0];
        red[1][t / 32] = q[0];
    }
    __syncthreads();
    float S = 0.0f, Q = 0.0f;
#pragma unroll
    for (int w = 0; w < TH / 32; w++) {
        S += red[0][w];
        Q += red[1][w];
    }
    const float inv_n = 1.0f / (float)cols;
    float mean = 0.0f, rstd;
    if (OP == 1) {
        const float md = S * inv_n;
        const float var = fmaxf(fmaf(-md, md, Q * inv_n), 0.0f);
        mean = shift + md;
        rstd = rsqrtf(var + eps);
    } else {
        rstd = rsqrtf(Q * inv_n + eps);
    }
    for (long p0 = t; p0 < P; p0 += (long)TH * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long p = p0 + (long)u * TH;
            if (p < P)
                v[u] = (POL & 2) ? __ldcs(xr + p) : __ldg(xr + p);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const long p = p0 + (long)u * TH;
            if (p >= P)
                continue;
            float f[VEC], gg[VEC], bb[VEC];
            unpack<T>(v[u], f);
            unpack<T>(__ldg(g + p), gg);
            if (OP == 1)
                unpack<T>(__ldg(b + p), bb);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                f[j] = OP == 1 ? fmaf((f[j] - mean) * rstd, gg[j], bb[j]) : f[j] * rstd * gg[j];
            if (POL & 4)
                yr[p] = pack<T>(f);
            else
                __stcs(yr + p, pack<T>(f));
        }
    }
}

/* Short rows the way Inductor's "per" kernels lay them out (1-2 warp programs of 58 / 32
 * registers at LayerNorm 16-bit 256 / 128 columns): a row per warp of 32 lanes, lane l taking
 * packs l, l + 32, ... (PK at most), R rows a warp, all R x PK packs loaded before any sum; NW
 * warps a block. */
template <class T, int OP, int PK, int R, int NW>
__global__ void __launch_bounds__(32 * NW) short_rows(const uint4 *__restrict__ x,
                                                      uint4 *__restrict__ y,
                                                      const uint4 *__restrict__ g,
                                                      const uint4 *__restrict__ b, long rows,
                                                      long P, long cols, float eps)
{
    constexpr int VEC = 16 / sizeof(T);
    const int lane = threadIdx.x & 31;
    const long r0 = ((long)blockIdx.x * NW + threadIdx.x / 32) * R;
    uint4 v[R][PK];
    float shift[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const long row = r0 + r;
        const uint4 *xr = x + row * P;
#pragma unroll
        for (int k = 0; k < PK; k++) {
            const long p = lane + 32L * k;
            v[r][k] = row < rows && p < P ? __ldcs(xr + p) : make_uint4(0, 0, 0, 0);
        }
        shift[r] = OP == 1 && row < rows ? (float)__ldg(reinterpret_cast<const T *>(xr)) : 0.0f;
    }
    float s[R], q[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        s[r] = q[r] = 0.0f;
#pragma unroll
        for (int k = 0; k < PK; k++) {
            add_shifted<T>(v[r][k], lane + 32L * k < P ? shift[r] : 0.0f, s[r], q[r]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2)
#pragma unroll
        for (int r = 0; r < R; r++) {
            s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
            q[r] += __shfl_xor_sync(0xffffffffu, q[r], o);
        }
    const float inv_n = 1.0f / (float)cols;
#pragma unroll
    for (int k = 0; k < PK; k++) {
        const long p = lane + 32L * k;
        if (p >= P)
            continue;
        float gg[VEC], bb[VEC];
        unpack<T>(__ldg(g + p), gg);
        if (OP == 1)
            unpack<T>(__ldg(b + p), bb);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const long row = r0 + r;
            if (row >= rows)
                continue;
            float mean = 0.0f, rstd;
            if (OP == 1) {
                const float md = s[r] * inv_n;
                mean = shift[r] + md;
                rstd = rsqrtf(fmaxf(fmaf(-md, md, q[r] * inv_n), 0.0f) + eps);
            } else {
                rstd = rsqrtf(q[r] * inv_n + eps);
            }
            float f[VEC];
            unpack<T>(v[r][k], f);
#pragma unroll
            for (int j = 0; j < VEC; j++)
                f[j] = OP == 1 ? fmaf((f[j] - mean) * rstd, gg[j], bb[j]) : f[j] * rstd * gg[j];
            __stcs(y + row * P + p, pack<T>(f));
        }
    }
}

struct variant {
    const char *name;
    void (*launch)(const void *, void *, const void *, const void *, long, long, long, float,
                   cudaStream_t);
};

template <class T, int OP, int TH, int U, int POL>
static void launch_v(const void *x, void *y, const void *g, const void *b, long rows, long P,
                     long cols, float eps, cudaStream_t s)
{
    loop_rows<T, OP, TH, U, POL><<<(unsigned)rows, TH, 0, s>>>(
        (const uint4 *)x, (uint4 *)y, (const uint4 *)g, (const uint4 *)b, P, cols, eps);
    CK(cudaGetLastError());
}

template <class T, int OP, int PK, int R, int NW>
static void launch_s(const void *x, void *y, const void *g, const void *b, long rows, long P,
                     long cols, float eps, cudaStream_t s)
{
    const long per = (long)R * NW;
    short_rows<T, OP, PK, R, NW><<<(unsigned)((rows + per - 1) / per), 32 * NW, 0, s>>>(
        (const uint4 *)x, (uint4 *)y, (const uint4 *)g, (const uint4 *)b, rows, P, cols, eps);
    CK(cudaGetLastError());
}

/* the short-row variants for rows of at most 32 x PK packs */
template <class T, int OP, int PK> static std::vector<variant> short_variants()
{
    return {
        {"w R1 NW1", launch_s<T, OP, PK, 1, 1>}, {"w R2 NW1", launch_s<T, OP, PK, 2, 1>},
        {"w R4 NW1", launch_s<T, OP, PK, 4, 1>}, {"w R2 NW4", launch_s<T, OP, PK, 2, 4>},
        {"w R4 NW4", launch_s<T, OP, PK, 4, 4>}, {"w R1 NW4", launch_s<T, OP, PK, 1, 4>},
    };
}

template <class T, int OP> static std::vector<variant> short_for(long P)
{
    if (P <= 32)
        return short_variants<T, OP, 1>();
    if (P <= 64)
        return short_variants<T, OP, 2>();
    if (P <= 128)
        return short_variants<T, OP, 4>();
    return {};
}

template <class T, int OP> static std::vector<variant> variants()
{
    return {
        {"512x1 p0", launch_v<T, OP, 512, 1, 0>}, {"512x1 p3", launch_v<T, OP, 512, 1, 3>},
        {"512x2 p3", launch_v<T, OP, 512, 2, 3>}, {"256x2 p3", launch_v<T, OP, 256, 2, 3>},
        {"256x4 p3", launch_v<T, OP, 256, 4, 3>}, {"1024x1 p3", launch_v<T, OP, 1024, 1, 3>},
        {"512x4 p3", launch_v<T, OP, 512, 4, 3>},
        /* Inductor's order of cache policies (plain stores), at its float32 block sizes (ncu:
         * 512 threads at 5120 columns, 1024 at 32768) and more packs in flight */
        {"512x1 p7", launch_v<T, OP, 512, 1, 7>}, {"512x2 p7", launch_v<T, OP, 512, 2, 7>},
        {"1024x1 p7", launch_v<T, OP, 1024, 1, 7>}, {"1024x2 p3", launch_v<T, OP, 1024, 2, 3>},
        {"1024x2 p7", launch_v<T, OP, 1024, 2, 7>}, {"1024x4 p7", launch_v<T, OP, 1024, 4, 7>},
        /* one pass that every thread fills at float32 5120 columns (1280 packs) */
        {"640x2 p3", launch_v<T, OP, 640, 2, 3>}, {"640x2 p7", launch_v<T, OP, 640, 2, 7>},
        {"320x4 p7", launch_v<T, OP, 320, 4, 7>},
    };
}

template <class T> static void run(int op, long cols, nd_dtype dt)
{
    const long rows = 49152;
    const long P = cols * (long)sizeof(T) / 16;
    probe_case c = probe_case_make<T>(dt, rows, cols);
    const float eps = op == 1 ? 1e-5f : 1e-6f;
    const double tl = probe_lib_time(c, dt, op, eps);
    printf("%-9s %-8s 49152x%-6ld ceil %7.1f us  lib %5.1f%%", op == 1 ? "layernorm" : "rmsnorm",
           nd_dtype_name(dt), cols, c.tc, 100.0 * c.tc / tl);
    std::vector<variant> vs = op == 1 ? short_for<T, 1>(P) : short_for<T, 0>(P);
    if (cols >= 1024) {
        const std::vector<variant> lv = op == 1 ? variants<T, 1>() : variants<T, 0>();
        vs.insert(vs.end(), lv.begin(), lv.end());
    }
    for (const variant &v : vs) {
        auto launch = [&](void *x, void *y) { v.launch(x, y, c.g, c.b, rows, P, cols, eps, c.s); };
        const double t = time_graph(c.s, c.N, [&](int i) { launch(c.xs[i % c.k], c.ys[i % c.k]); });
        const double md = probe_max_diff<T>(c, launch);
        printf(" | %s %5.1f%% (%.2g)", v.name, 100.0 * c.tc / t, md);
        fflush(stdout);
    }
    printf("\n");
    probe_case_free(c);
}

int main(int argc, char **argv)
{
    std::vector<long> widths;
    bool f32_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--float32"))
            f32_only = true;
        else
            widths.push_back(atol(argv[i]));
    }
    if (widths.empty())
        widths = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
    for (int op = 0; op < 2; op++)
        for (long c : widths) {
            run<float>(op, c, ND_FLOAT32);
            if (f32_only)
                continue;
            run<__half>(op, c, ND_FLOAT16);
            run<__nv_bfloat16>(op, c, ND_BFLOAT16);
        }
    return 0;
}
