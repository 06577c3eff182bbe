/*
 * cuda_api_cost.cu - what the CUDA runtime calls that a batch makes cost the calling thread, and
 * what one small batch's round trip takes, with 1 and with 4 threads at once (each on its own
 * stream, as the engine's slot threads are). The per-batch overhead of the cuda engine against the
 * null one (issue 11) is made of these.
 *
 *   build/bench/cuda_api_cost [iterations]     (default 20000)
 *
 * Prints one line per call: mean microseconds per call on the calling thread (median over the
 * threads), for 1 and for 4 threads. Then the round trip of a batch the way engine_cuda.c runs it
 * (H2D of 64 KiB pinned, a kernel, D2H of 64 KiB, polling cudaStreamQuery): p50 and p99.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "gpu_timing.cuh" /* CK */

static double now_us()
{
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

__global__ void touch(const float4 *x, float4 *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float4 v = x[i];
        v.x += 1.f;
        y[i] = v;
    }
}

__global__ void empty_kernel() {}

enum { BYTES = 64 << 10 };

struct lane {
    cudaStream_t s;
    cudaEvent_t e;
    void *h_in, *h_out, *d_in, *d_out;
};

static lane make_lane()
{
    lane l;
    CK(cudaStreamCreateWithFlags(&l.s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&l.e));
    CK(cudaHostAlloc(&l.h_in, BYTES, cudaHostAllocDefault));
    CK(cudaHostAlloc(&l.h_out, BYTES, cudaHostAllocDefault));
    CK(cudaMalloc(&l.d_in, BYTES));
    CK(cudaMalloc(&l.d_out, BYTES));
    memset(l.h_in, 1, BYTES);
    return l;
}

static void run_batch(const lane &l)
{
    const int n = BYTES / 16;
    CK(cudaMemcpyAsync(l.d_in, l.h_in, BYTES, cudaMemcpyHostToDevice, l.s));
    touch<<<(n + 255) / 256, 256, 0, l.s>>>((const float4 *)l.d_in, (float4 *)l.d_out, n);
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(l.h_out, l.d_out, BYTES, cudaMemcpyDeviceToHost, l.s));
    while (cudaStreamQuery(l.s) == cudaErrorNotReady) {
    }
}

/* Runs body(lane, iters) on nthreads threads at once; returns the median over threads of the
 * mean microseconds per iteration. */
static double timed(int nthreads, int iters, std::vector<lane> &lanes,
                    const std::function<void(lane &, int)> &body)
{
    std::vector<double> per(nthreads);
    std::vector<std::thread> ts;
    for (int t = 0; t < nthreads; t++)
        ts.emplace_back([&, t] {
            CK(cudaSetDevice(0));
            body(lanes[t], 100); /* warm */
            double t0 = now_us();
            body(lanes[t], iters);
            per[t] = (now_us() - t0) / iters;
        });
    for (auto &th : ts)
        th.join();
    std::sort(per.begin(), per.end());
    return per[nthreads / 2];
}

int main(int argc, char **argv)
{
    const int iters = argc > 1 ? atoi(argv[1]) : 20000;
    CK(cudaSetDevice(0));
    CK(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
    CK(cudaFree(0));
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("device: %s; %d iterations per thread\n", p.name, iters);
    std::vector<lane> lanes;
    for (int i = 0; i < 4; i++)
        lanes.push_back(make_lane());

    struct call {
        const char *name;
        std::function<void(lane &, int)> body;
    };
    const int n = BYTES / 16;
    std::vector<call> calls = {
        {"cudaSetDevice", [](lane &, int k) { for (int i = 0; i < k; i++) CK(cudaSetDevice(0)); }},
        {"cudaGetLastError", [](lane &, int k) { for (int i = 0; i < k; i++) (void)cudaGetLastError(); }},
        {"cudaStreamQuery (idle stream)",
         [](lane &l, int k) { for (int i = 0; i < k; i++) CK(cudaStreamQuery(l.s)); }},
        {"cudaEventRecord",
         [](lane &l, int k) {
             for (int i = 0; i < k; i++)
                 CK(cudaEventRecord(l.e, l.s));
             CK(cudaStreamSynchronize(l.s));
         }},
        {"cudaOccupancyMaxActiveBlocksPerMultiprocessor",
         [](lane &, int k) {
             int per_sm;
             for (int i = 0; i < k; i++)
                 CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, touch, 256, 0));
         }},
        {"cudaFuncSetAttribute (max dynamic smem)",
         [](lane &, int k) {
             for (int i = 0; i < k; i++)
                 CK(cudaFuncSetAttribute(touch, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            1024));
         }},
        {"launch <<<>>> (empty kernel)",
         [](lane &l, int k) {
             for (int i = 0; i < k; i++)
                 empty_kernel<<<1, 32, 0, l.s>>>();
             CK(cudaStreamSynchronize(l.s));
         }},
        {"cudaMemcpyAsync H2D 64 KiB (enqueue)",
         [](lane &l, int k) {
             for (int i = 0; i < k; i++)
                 CK(cudaMemcpyAsync(l.d_in, l.h_in, BYTES, cudaMemcpyHostToDevice, l.s));
             CK(cudaStreamSynchronize(l.s));
         }},
        {"batch: H2D + kernel + D2H, polled",
         [n](lane &l, int k) {
             (void)n;
             for (int i = 0; i < k; i++)
                 run_batch(l);
         }},
    };
    printf("%-48s %12s %12s\n", "call", "1 thread us", "4 threads us");
    for (auto &c : calls) {
        int k = strstr(c.name, "batch") || strstr(c.name, "H2D") ? iters / 10 : iters;
        double one = timed(1, k, lanes, c.body);
        double four = timed(4, k, lanes, c.body);
        printf("%-48s %12.2f %12.2f\n", c.name, one, four);
    }

    /* one batch at a time, its latency distribution */
    std::vector<double> lat;
    for (int i = 0; i < iters / 4; i++) {
        double t0 = now_us();
        run_batch(lanes[0]);
        lat.push_back(now_us() - t0);
    }
    std::sort(lat.begin(), lat.end());
    printf("batch round trip, one thread: p50 %.1f us, p90 %.1f, p99 %.1f\n", lat[lat.size() / 2],
           lat[lat.size() * 9 / 10], lat[lat.size() * 99 / 100]);
    return 0;
}
