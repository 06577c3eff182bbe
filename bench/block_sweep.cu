/*
 * block_sweep.cu - the plain block kernel's geometry swept for float32 rows of 1536-8192 columns,
 * where RMSNorm and LayerNorm sit at 97-99% of the copy ceiling and 0.97-0.99x torch.compile
 * (bench/results/goals_h200_keep.txt: float32 5120 columns 0.97x in every H200 table).
 *
 * nd_rows_run's block kernel gives such a row one block of the smallest power-of-two threads (from
 * the policy's block_min, 128) whose 8 packs a thread hold it, then spreads the row over them:
 * 5120 columns (1280 packs) ran as 256 threads x 5 packs until this sweep found no block better
 * and the loop kernel took them on a fast device (320 x 4). Here each row length also runs as
 * every other block of whole warps whose packs divide the row exactly (160 x 8, 320 x 4, 640 x 2
 * for 5120), each at the launch bounds nd_rows_run's kernel has (mb 0: the op's own, else 1024
 * threads an SM, a cap of 64 registers) and at 1536 and 2048 threads an SM where that is a whole
 * number of blocks. Every variant is the exact twin (XC = the row length), as the shipped plan
 * is.
 *
 * Prints per op and width: the copy ceiling (us), the library as % of it, then each variant's %,
 * its registers, spill and blocks an SM, and its largest difference from the library's output
 * (another thread count sums in another order: expect float32 rounding, not more). Timing as
 * bench_gpu's (graph replays, rotated buffers past L2).
 *
 * Build (bench/device_link.sh has made build/libndkernels.a):
 *   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 bench/block_sweep.cu \
 *        build/libndkernels.a -o build/bench/block_sweep
 * Usage: block_sweep [cols ...]   (default 1536 2048 4096 5120 8192; rows 49152)
 */
#include <string>

#include "gpu_timing.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/rmsnorm.cuh"

template <class Op> static typename Op::Params params(float eps)
{
    typename Op::Params p;
    memset(&p, 0, sizeof p);
    p.eps = eps;
    return p;
}

/* One variant: TH threads of PACKS packs a row, MB blocks an SM in the launch bounds. */
template <class Op, int TH, int PACKS, int MB>
static void variant(const probe_case &c, int op, float eps)
{
    typedef float T;
    constexpr int VEC = 4, XC = TH * PACKS * VEC;
    if (c.cols != XC)
        return;
    typedef op_mb<Op, MB> O;
    auto kernel = nd_rows_block_kernel<O, T, VEC, PACKS, TH, false, XC>;
    const typename O::Params prm = params<O>(eps);
    auto launch = [&](void *x, void *y) {
        nd_rows_args<T> a;
        a.x = (const T *)x;
        a.y = (T *)y;
        a.p0 = (const T *)c.g;
        a.p1 = op == 1 ? (const T *)c.b : NULL;
        a.rows = c.rows;
        a.cols = c.cols;
        kernel<<<(unsigned)c.rows, TH, 0, c.s>>>(a, prm);
        CK(cudaGetLastError());
    };
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kernel));
    int blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, TH, 0));
    const double t = time_graph(c.s, c.N, [&](int i) { launch(c.xs[i % c.k], c.ys[i % c.k]); });
    const double md = probe_max_diff<T>(c, launch);
    printf("    %4d x %d  mb %2d  regs %3d spill %3zu B  blocks/SM %2d  %8.2f us  %5.1f%%  "
           "diff %.2g\n", TH, PACKS, MB, fa.numRegs, fa.localSizeBytes, blocks, t,
           100.0 * c.tc / t, md);
    fflush(stdout);
}

/* a geometry at the default launch bounds, 1536 and 2048 threads an SM (whole blocks only) */
template <class Op, int TH, int PACKS> static void geometry(const probe_case &c, int op, float eps)
{
    variant<Op, TH, PACKS, 0>(c, op, eps);
    if constexpr (1536 % TH == 0)
        variant<Op, TH, PACKS, 1536 / TH>(c, op, eps);
    if constexpr (2048 % TH == 0 && TH <= 1024)
        variant<Op, TH, PACKS, 2048 / TH>(c, op, eps);
}

/* Every block of whole warps, at most 1024 threads and 8 packs a thread, that holds a row of the
 * default list's widths exactly (each call returns at once unless TH * PACKS * 4 is the row
 * length). The results of one H200: bench/results/f32_5120_h200.txt. */
template <class Op> static void sweep(const probe_case &c, int op, float eps)
{
    /* 1536 columns: 384 packs */
    geometry<Op, 64, 6>(c, op, eps);
    geometry<Op, 96, 4>(c, op, eps);
    geometry<Op, 128, 3>(c, op, eps);
    geometry<Op, 192, 2>(c, op, eps);
    geometry<Op, 384, 1>(c, op, eps);
    /* 2048: 512 packs */
    geometry<Op, 64, 8>(c, op, eps);
    geometry<Op, 128, 4>(c, op, eps);
    geometry<Op, 256, 2>(c, op, eps);
    /* 4096: 1024 packs */
    geometry<Op, 128, 8>(c, op, eps);
    geometry<Op, 256, 4>(c, op, eps);
    geometry<Op, 512, 2>(c, op, eps);
    /* 5120: 1280 packs */
    geometry<Op, 160, 8>(c, op, eps);
    geometry<Op, 256, 5>(c, op, eps);
    geometry<Op, 320, 4>(c, op, eps);
    geometry<Op, 640, 2>(c, op, eps);
    /* 8192: 2048 packs */
    geometry<Op, 256, 8>(c, op, eps);
    geometry<Op, 512, 4>(c, op, eps);
    geometry<Op, 1024, 2>(c, op, eps);
}

int main(int argc, char **argv)
{
    std::vector<long> widths = {1536, 2048, 4096, 5120, 8192};
    if (argc > 1) {
        widths.clear();
        for (int i = 1; i < argc; i++)
            widths.push_back(atol(argv[i]));
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (%d SMs); float32 rows of 49152; %% = of the copy ceiling, same run\n",
           prop.name, prop.multiProcessorCount);
    for (int op = 0; op < 2; op++)
        for (long cols : widths) {
            probe_case c = probe_case_make<float>(ND_FLOAT32, 49152, cols);
            const float eps = op == 1 ? 1e-5f : 1e-6f;
            const double tl = probe_lib_time(c, ND_FLOAT32, op, eps);
            printf("%-9s float32 49152x%-6ld ceil %8.2f us  lib %8.2f us %5.1f%%\n",
                   op == 1 ? "layernorm" : "rmsnorm", cols, c.tc, tl, 100.0 * c.tc / tl);
            if (op == 1)
                sweep<nd_layernorm_op>(c, op, eps);
            else
                sweep<nd_rmsnorm_op>(c, op, eps);
            probe_case_free(c);
        }
    return 0;
}
