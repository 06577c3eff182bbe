/*
 * stride_probe.cu - does the DRAM serve 128 streams 2^n bytes apart as fast as one?
 *
 * The resident slab kernel (softmax_axis_slab_res) reads (8,32768,64) 16-bit x at 2.2 TB/s, half
 * the copy's speed (bench/results/res_phases_h200.txt): one 1024-thread block an SM, block b
 * reading segment b (256 KB, 16 rounds of 16 KB) from its first round on, so at any moment the
 * 128 blocks read at addresses that differ only in bits 18 and up. This program reads the same
 * bytes in that pattern and in others, load-only (each thread folds what it reads into one word,
 * stored only if it is a value no input makes), and prints each pattern's read speed:
 *
 *   inorder   block b reads segment b from round 0 (the resident kernel)
 *   rotated   block b reads segment b from round (b * 7) % rounds, wrapping around
 *   padded    block b reads a segment PAD bytes further on per block (b * (L + 16 KB))
 *   interleave block b reads rounds b, b + G, b + 2G, ... of the whole (a copy's window)
 *
 * in flight: every thread keeps IN rounds of loads outstanding (IN x 16 bytes; IN = 4: 64 KB an
 * SM, the resident kernel's register rounds). The bytes read rotate over 8 copies of the input so
 * L2 (50 MB) holds none of a launch's bytes when it starts.
 *
 * Usage: stride_probe [SEG_KB [BLOCKS]]   (default 256 KB segments, 128 blocks)
 */
#include "gpu_timing.cuh" /* CK */

enum { INORDER, ROTATED, PADDED, INTERLEAVE, NMODES };
static const char *kNames[NMODES] = {"inorder", "rotated", "padded", "interleave"};
constexpr int NT = 1024;

/* segment bytes L = rounds x NT x 16; `stride` packs between segments' starts */
template <int IN>
__global__ void __launch_bounds__(NT, 1)
read_probe(const uint4 *__restrict__ x, int rounds, long stride, int mode, unsigned *sink)
{
    const int b = blockIdx.x, t = threadIdx.x, G = gridDim.x;
    unsigned acc = 0;
    for (int i = 0; i < rounds; i += IN) {
        uint4 w[IN];
#pragma unroll
        for (int u = 0; u < IN; u++) {
            const int k = i + u;
            long p;
            if (mode == INTERLEAVE)
                p = ((long)k * G + b) * NT + t;
            else {
                const int r = mode == ROTATED ? (k + b * 7) % rounds : k;
                p = b * stride + (long)r * NT + t;
            }
            w[u] = k < rounds ? __ldcs(x + p) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < IN; u++)
            acc ^= w[u].x + w[u].y * 3 + w[u].z * 5 + w[u].w * 7;
    }
    if (acc == 0x9e3779b9u) /* no input here folds to it; keeps the loads */
        sink[b * NT + t] = acc;
}

int main(int argc, char **argv)
{
    const int seg_kb = argc > 1 ? atoi(argv[1]) : 256, G = argc > 2 ? atoi(argv[2]) : 128;
    const int rounds = seg_kb * 1024 / (NT * 16);
    const long seg_packs = (long)rounds * NT, pad_packs = seg_packs + NT;
    const size_t piece = (size_t)G * pad_packs * 16, copies = 8;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs; %d blocks of %d threads, segments of %d KB (%d rounds of 16 KB), "
           "%.1f MB read a launch\n",
           prop.name, prop.multiProcessorCount, G, NT, seg_kb, rounds,
           (double)G * seg_packs * 16 / 1e6);
    uint4 *x;
    unsigned *sink;
    CK(cudaMalloc(&x, piece * copies));
    CK(cudaMemset(x, 1, piece * copies));
    CK(cudaMalloc(&sink, (size_t)G * NT * sizeof(unsigned)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 15;
    for (int in : {4, 8}) {
        for (int mode = 0; mode < NMODES; mode++) {
            std::vector<float> ms;
            for (int rep = 0; rep < reps + 2; rep++) {
                CK(cudaEventRecord(e0));
                for (size_t c = 0; c < copies; c++) {
                    const uint4 *xc = x + c * (piece / 16);
                    const long stride = mode == PADDED ? pad_packs : seg_packs;
                    if (in == 4)
                        read_probe<4><<<G, NT>>>(xc, rounds, stride, mode, sink);
                    else
                        read_probe<8><<<G, NT>>>(xc, rounds, stride, mode, sink);
                    CK(cudaGetLastError());
                }
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float m;
                CK(cudaEventElapsedTime(&m, e0, e1));
                if (rep >= 2)
                    ms.push_back(m);
            }
            std::sort(ms.begin(), ms.end());
            const double bytes = (double)G * seg_packs * 16 * copies;
            printf("  %d rounds in flight  %-10s  median %7.2f us a launch  %6.2f TB/s "
                   "(min %.2f, max %.2f)\n",
                   in, kNames[mode], ms[ms.size() / 2] * 1e3 / copies,
                   bytes / (ms[ms.size() / 2] * 1e-3) / 1e12, bytes / (ms.back() * 1e-3) / 1e12,
                   bytes / (ms.front() * 1e-3) / 1e12);
        }
    }
    CK(cudaFree(x));
    CK(cudaFree(sink));
    return 0;
}
