/*
 * copy_probe.cu - which way of moving bytes reaches the device's copy speed.
 *
 * The row kernels are judged against the faster of cudaMemcpyAsync device-to-device and a
 * 16-byte copy kernel. On an H200 the driver's memcpy moved 4.2-4.27 TB/s (read + write) for
 * buffers under 1 GB while bench_gpu's grid-stride copy kernel moved ~3.93: a row kernel that
 * loads and stores the way that copy kernel does cannot reach 95% of memcpy. This program times
 * copy variants side by side on one buffer pair so the access pattern the kernels should use is
 * chosen by measurement:
 *
 *   memcpy         cudaMemcpyAsync device-to-device
 *   stride4        grid-stride, 4 packs per thread in flight, __ldcs/__stcs (bench_gpu's kernel)
 *   stride4_plain  the same with default cache policy loads and stores
 *   chunkU         one block per chunk of 256 x U packs (not persistent), U packs per thread
 *   chunk8_nc256   chunk8 with ld.global.nc.L2::256B loads
 *   chunk8_wb      chunk8 with __ldcs loads and default (write-back) stores
 *   rowlike        persistent 128-thread blocks, a 16 KB "row" per block: 8 packs per thread,
 *                  a __syncthreads between the loads and the stores (the shape of a row kernel)
 *   tma            one block per 32 KB chunk: cp.async.bulk global -> shared -> global
 *   tile SEG xU    rows of 12544 bytes (a (32,1000,56,56) float32 tensor over axis 1) copied
 *                  in tiles SEG bytes wide, U packs per thread down the rows
 *
 * Usage: copy_probe [MB]   (bytes of x; y is as large; default 512)
 */
#include <algorithm>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

__global__ void __launch_bounds__(256) stride4(const uint4 *__restrict__ s, uint4 *__restrict__ d,
                                               long n, int plain)
{
    const long stride = (long)gridDim.x * blockDim.x;
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (plain) {
        for (; i + 3 * stride < n; i += 4 * stride) {
            uint4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
            d[i] = a;
            d[i + stride] = b;
            d[i + 2 * stride] = c;
            d[i + 3 * stride] = e;
        }
    } else {
        for (; i + 3 * stride < n; i += 4 * stride) {
            uint4 a = __ldcs(s + i), b = __ldcs(s + i + stride), c = __ldcs(s + i + 2 * stride),
                  e = __ldcs(s + i + 3 * stride);
            __stcs(d + i, a);
            __stcs(d + i + stride, b);
            __stcs(d + i + 2 * stride, c);
            __stcs(d + i + 3 * stride, e);
        }
    }
    for (; i < n; i += stride)
        d[i] = s[i];
}

__device__ __forceinline__ uint4 ld_nc256(const uint4 *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* MODE 0: __ldcs/__stcs; 1: nc L2::256B loads, __stcs; 2: __ldcs, default stores */
template <int U, int MODE>
__global__ void __launch_bounds__(256) chunk(const uint4 *__restrict__ s, uint4 *__restrict__ d, long n)
{
    const long base = (long)blockIdx.x * 256 * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        long i = base + u * 256;
        if (i < n)
            v[u] = MODE == 1 ? ld_nc256(s + i) : __ldcs(s + i);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        long i = base + u * 256;
        if (i < n) {
            if (MODE == 2)
                d[i] = v[u];
            else
                __stcs(d + i, v[u]);
        }
    }
}

__global__ void __launch_bounds__(128, 8) rowlike(const uint4 *__restrict__ s, uint4 *__restrict__ d,
                                                  long nrows)
{
    constexpr int P = 8, RP = 128 * P; /* packs per row */
    for (long r = blockIdx.x; r < nrows; r += gridDim.x) {
        uint4 v[P];
#pragma unroll
        for (int u = 0; u < P; u++)
            v[u] = __ldcs(s + r * RP + u * 128 + threadIdx.x);
        __syncthreads();
#pragma unroll
        for (int u = 0; u < P; u++)
            __stcs(d + r * RP + u * 128 + threadIdx.x, v[u]);
    }
}

/* One 32 KB chunk per block through shared memory with the bulk-copy (TMA) engine. */
__global__ void __launch_bounds__(32) tma(const uint4 *__restrict__ s, uint4 *__restrict__ d, long n)
{
    constexpr int BYTES = 32768;
    __shared__ __align__(128) uint4 buf[BYTES / 16];
    __shared__ __align__(8) unsigned long long bar;
    const long first = (long)blockIdx.x * (BYTES / 16);
    long cnt = n - first < BYTES / 16 ? n - first : BYTES / 16;
    unsigned bytes = (unsigned)(cnt * 16);
    unsigned sbuf = (unsigned)__cvta_generic_to_shared(buf);
    unsigned sbar = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(bytes)
                     : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                     "%2, [%3];" ::"r"(sbuf),
                     "l"(s + first), "r"(bytes), "r"(sbar)
                     : "memory");
        asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
                     "@!p bra W;\n}" ::"r"(sbar)
                     : "memory");
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(d + first),
                     "r"(sbuf), "r"(bytes)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
}

/* The access of a softmax over a middle axis: x as rows of `pitch` packs; a block copies a tile
 * SEG packs wide and 256 * U / SEG rows tall, each thread U packs of one column of the tile (rows
 * r, r + 256 / SEG, ...). Few wide segments or many narrow ones: how wide must a row segment be
 * for the memory system to stream it? */
template <int SEG, int U>
__global__ void __launch_bounds__(256) tile(const uint4 *__restrict__ s, uint4 *__restrict__ d,
                                            long rows, long pitch)
{
    constexpr int TY = 256 / SEG, TR = TY * U; /* thread rows, tile rows */
    const long tiles_x = pitch / SEG;
    const long tx = blockIdx.x % tiles_x, ty = blockIdx.x / tiles_x;
    const int c = threadIdx.x % SEG, r0 = threadIdx.x / SEG;
    if (r0 >= TY)
        return;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        long r = ty * TR + r0 + u * TY;
        if (r < rows)
            v[u] = __ldcs(s + r * pitch + tx * SEG + c);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
        long r = ty * TR + r0 + u * TY;
        if (r < rows)
            __stcs(d + r * pitch + tx * SEG + c, v[u]);
    }
}

template <class F> static double time_ms(F launch)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> ms;
    for (int r = 0; r < 15; r++) {
        CK(cudaEventRecord(e0));
        for (int k = 0; k < 4; k++)
            launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / 4);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

int main(int argc, char **argv)
{
    double mb = argc > 1 ? atof(argv[1]) : 512;
    size_t bytes = (size_t)(mb * (1 << 20)) / 32768 * 32768;
    long n = (long)(bytes / 16);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    uint4 *x, *y;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaMemset(x, 0x3c, bytes));
    CK(cudaMemset(y, 0, bytes));
    const int sms = prop.multiProcessorCount;
    auto report = [&](const char *name, double ms) {
        printf("%-22s %8.1f GB/s  (%.1f us)\n", name, 2.0 * bytes / ms / 1e6, ms * 1e3);
        fflush(stdout);
    };
    printf("%s, %d SMs, x = %.0f MB\n", prop.name, sms, bytes / 1048576.0);
    report("memcpy", time_ms([&] { CK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); }));
    for (int per_sm : {4, 8}) {
        char name[64];
        snprintf(name, sizeof name, "stride4 %d/SM", per_sm);
        report(name, time_ms([&] { stride4<<<sms * per_sm, 256>>>(x, y, n, 0); CK(cudaGetLastError()); }));
        snprintf(name, sizeof name, "stride4_plain %d/SM", per_sm);
        report(name, time_ms([&] { stride4<<<sms * per_sm, 256>>>(x, y, n, 1); CK(cudaGetLastError()); }));
    }
    report("chunk1", time_ms([&] { chunk<1, 0><<<(n + 255) / 256, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("chunk4", time_ms([&] { chunk<4, 0><<<(n + 1023) / 1024, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("chunk8", time_ms([&] { chunk<8, 0><<<(n + 2047) / 2048, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("chunk8_nc256", time_ms([&] { chunk<8, 1><<<(n + 2047) / 2048, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("chunk8_wb", time_ms([&] { chunk<8, 2><<<(n + 2047) / 2048, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("chunk4_wb", time_ms([&] { chunk<4, 2><<<(n + 1023) / 1024, 256>>>(x, y, n); CK(cudaGetLastError()); }));
    report("rowlike", time_ms([&] { rowlike<<<sms * 8, 128>>>(x, y, n / 1024); CK(cudaGetLastError()); }));
    {
        /* rows of 3136 floats (12544 bytes: (32,1000,56,56) over axis 1): 784 packs */
        const long pitch = 784, rows = n / pitch;
        auto go = [&](auto seg, auto u, const char *name) {
            constexpr int SEG = decltype(seg)::value, U = decltype(u)::value;
            const long tr = 256 / SEG * U;
            const long grid = (pitch / SEG) * ((rows + tr - 1) / tr);
            report(name, time_ms([&] { tile<SEG, U><<<(unsigned)grid, 256>>>(x, y, rows, pitch); CK(cudaGetLastError()); }));
        };
        using std::integral_constant;
        go(integral_constant<int, 8>(), integral_constant<int, 8>(), "tile 128B x8");
        go(integral_constant<int, 16>(), integral_constant<int, 8>(), "tile 256B x8");
        go(integral_constant<int, 16>(), integral_constant<int, 16>(), "tile 256B x16");
        go(integral_constant<int, 16>(), integral_constant<int, 1>(), "tile 256B x1");
        go(integral_constant<int, 28>(), integral_constant<int, 8>(), "tile 448B x8");
        go(integral_constant<int, 56>(), integral_constant<int, 8>(), "tile 896B x8");
        go(integral_constant<int, 112>(), integral_constant<int, 8>(), "tile 1792B x8");
        go(integral_constant<int, 196>(), integral_constant<int, 4>(), "tile 3136B x4");
    }
    CK(cudaMemset(y, 0, bytes));
    report("tma 32KB", time_ms([&] { tma<<<(unsigned)(n / 2048), 32>>>(x, y, n); CK(cudaGetLastError()); }));
    /* check the last variant moved the bytes */
    std::vector<unsigned char> h(4096);
    CK(cudaMemcpy(h.data(), (char *)y + bytes - 4096, 4096, cudaMemcpyDeviceToHost));
    bool ok = std::all_of(h.begin(), h.end(), [](unsigned char c) { return c == 0x3c; });
    printf("tma copy check: %s\n", ok ? "ok" : "WRONG");
    return 0;
}
