/*
 * rows_sweep.cu - the warp kernel's geometry swept for short 16-bit rows, where the row ops
 * stay furthest from the copy ceiling (issue 13: float16 LayerNorm at 256 columns 77%, float32
 * 93%). For float16 rows of 128, 256 and 1024 columns and each of LayerNorm, RMSNorm and softmax,
 * every (lanes per row W, packs per lane, rows per group R, blocks per SM in the launch bounds)
 * compiled below is timed like bench_gpu (graph replay, rotated sets past L2) against the copy
 * ceiling, next to what the shipped dispatch picks (the public API). The best line per shape is
 * what nd_rows_run's table should pick; rows_sweep is how to check it on a new GPU.
 *
 *   rows_sweep [--op layernorm|rmsnorm|softmax] [--cols 128|256|1024] [--rows N]
 */
#include <cmath>
#include <cstring>
#include <string>

#include "gpu_timing.cuh"
#include "../kernels/layernorm.cuh"
#include "../kernels/rmsnorm.cuh"
#include "../kernels/softmax.cuh"

struct variant {
    int w, packs, r, mb;
};

struct job {
    std::string op;
    int64_t rows, cols;
    std::vector<void *> xs, ys;
    void *gamma, *beta;
    int N;
    cudaStream_t s;
    double t_copy;
};

template <class Op>
static typename Op::Params op_params(const job &)
{
    typename Op::Params p;
    memset(&p, 0, sizeof p);
    if constexpr (std::is_same<typename Op::Params, nd_norm_params>::value)
        p.eps = 1e-5f;
    return p;
}

/* One variant of one op: the kernel launched as nd_rows_run would launch it. */
template <class Op, int W, int PACKS, int R, int MB> static void run_variant(job &j)
{
    typedef __half T;
    constexpr int VEC = 8;
    if ((int64_t)W * PACKS * VEC < j.cols || (int64_t)W * (PACKS - 1) * VEC >= j.cols)
        return; /* this variant is not for this row size */
    typedef op_mb<Op, MB> O;
    auto kernel = nd_rows_warp_kernel<O, T, VEC, PACKS, W, R>;
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kernel));
    constexpr int B = nd_rows_warp_block<W, PACKS>();
    const int rows_per_block = (B / W) * R;
    const unsigned grid = (unsigned)((j.rows + rows_per_block - 1) / rows_per_block);
    const typename O::Params prm = op_params<O>(j);
    const int k = (int)j.xs.size();
    double t = time_graph(j.s, j.N, [&](int i) {
        nd_rows_args<T> a;
        a.x = (const T *)j.xs[i % k];
        a.y = (T *)j.ys[i % k];
        a.p0 = (const T *)j.gamma;
        a.p1 = O::kParams >= 2 ? (const T *)j.beta : NULL;
        a.rows = j.rows;
        a.cols = j.cols;
        kernel<<<grid, B, 0, j.s>>>(a, prm);
        CK(cudaGetLastError());
    });
    int blocks = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, B, 0));
    printf("%-10s %6lld  W=%-2d packs=%d R=%d mb=%-2d  regs %3d spill %3zu B  blocks/SM %2d  "
           "%8.2f us  %5.1f%%\n", j.op.c_str(), (long long)j.cols, W, PACKS, R, MB, fa.numRegs,
           fa.localSizeBytes, blocks, t, 100.0 * j.t_copy / t);
    fflush(stdout);
}

template <class Op, int W, int PACKS, int R> static void run_mbs(job &j)
{
    run_variant<Op, W, PACKS, R, 0>(j);
    run_variant<Op, W, PACKS, R, 8>(j);
    run_variant<Op, W, PACKS, R, 12>(j);
}

/* The geometries: 128 float16 columns are 16 packs, 256 are 32, 1024 are 128. */
template <class Op> static void sweep(job &j)
{
    run_mbs<Op, 4, 8, 1>(j);
    run_mbs<Op, 4, 8, 2>(j);
    run_mbs<Op, 8, 4, 1>(j);
    run_mbs<Op, 8, 4, 2>(j);
    run_mbs<Op, 16, 2, 1>(j);
    run_mbs<Op, 16, 2, 2>(j);
    run_mbs<Op, 16, 2, 4>(j);
    run_mbs<Op, 32, 1, 2>(j);
    run_mbs<Op, 32, 1, 4>(j);
    run_mbs<Op, 16, 8, 1>(j);
    run_mbs<Op, 16, 8, 2>(j);
    run_mbs<Op, 32, 4, 1>(j);
    run_mbs<Op, 32, 4, 2>(j);
    run_mbs<Op, 32, 4, 4>(j);
    /* 128 columns: 16 packs */
    run_mbs<Op, 8, 2, 1>(j);
    run_mbs<Op, 8, 2, 2>(j);
    run_mbs<Op, 4, 4, 1>(j);
    run_mbs<Op, 4, 4, 2>(j);
    run_mbs<Op, 16, 1, 2>(j);
    run_mbs<Op, 16, 1, 4>(j);
}

/* The public entry point (what the daemon runs), with or without gamma/beta, timed and printed. */
static void report_shipped(job &j, bool with_params)
{
    const int k = (int)j.xs.size();
    nd_error err = {{0}};
    double t = time_graph(j.s, j.N, [&](int i) {
        nd_status st;
        if (j.op == "softmax") {
            nd_softmax_args a = {ND_FLOAT16, j.rows, j.cols, 1, j.xs[i % k], j.ys[i % k]};
            st = nd_cuda_softmax(&a, 0, j.s, &err);
        } else {
            nd_norm_args a = {ND_FLOAT16, j.rows, j.cols, j.xs[i % k], j.ys[i % k],
                              with_params ? j.gamma : NULL, with_params ? j.beta : NULL, 1e-5f,
                              NULL, NULL};
            st = j.op == "layernorm" ? nd_cuda_layernorm(&a, j.s, &err)
                                     : nd_cuda_rmsnorm(&a, j.s, &err);
        }
        if (st != ND_OK) {
            fprintf(stderr, "%s: %s\n", j.op.c_str(), err.msg);
            exit(1);
        }
    });
    printf("%-10s %6lld  shipped dispatch%s %*.2f us  %5.1f%%\n", j.op.c_str(), (long long)j.cols,
           with_params ? "" : ", no parameters", with_params ? 58 : 42, t, 100.0 * j.t_copy / t);
}

int main(int argc, char **argv)
{
    std::string only_op;
    int64_t only_cols = 0, rows = 49152;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--op" && i + 1 < argc)
            only_op = argv[++i];
        else if (a == "--cols" && i + 1 < argc)
            only_cols = atoll(argv[++i]);
        else if (a == "--rows" && i + 1 < argc)
            rows = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--op layernorm|rmsnorm|softmax] [--cols 256|1024] "
                    "[--rows N]\n", argv[0]);
            return 2;
        }
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (%d SMs); float16 rows of %lld; %% = of the copy ceiling, same run\n",
           prop.name, prop.multiProcessorCount, (long long)rows);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int64_t cols : {128, 256, 1024}) {
        if (only_cols && cols != only_cols)
            continue;
        for (const char *op : {"layernorm", "rmsnorm", "softmax"}) {
            if (!only_op.empty() && only_op != op)
                continue;
            job j;
            j.op = op;
            j.rows = rows;
            j.cols = cols;
            j.s = s;
            const int64_t n = rows * cols;
            const double xb = (double)n * 2, moved = 2 * xb;
            const int k = (int)std::min(64.0, std::max(1.0, std::ceil(kWorkingSet / moved)));
            j.N = std::max(3, (int)std::min(2000.0, std::max((double)k, std::ceil(kGraphBytes / moved))));
            for (int i = 0; i < k; i++) {
                void *x, *y;
                CK(cudaMalloc(&x, (size_t)xb));
                CK(cudaMalloc(&y, (size_t)xb));
                fill(ND_FLOAT16, x, n, 1234 + i, -2.0f, 2.0f);
                j.xs.push_back(x);
                j.ys.push_back(y);
            }
            CK(cudaMalloc(&j.gamma, (size_t)cols * 2));
            CK(cudaMalloc(&j.beta, (size_t)cols * 2));
            fill(ND_FLOAT16, j.gamma, cols, 99, 0.5f, 1.5f);
            fill(ND_FLOAT16, j.beta, cols, 98, -0.5f, 0.5f);
            CK(cudaDeviceSynchronize());
            double tk, tm;
            time_ceiling(s, j.N, j.xs, j.ys, xb, &tk, &tm);
            j.t_copy = std::min(tk, tm);
            /* the shipped dispatch, with the parameters and, for the norms, without (what
             * gamma and beta cost) */
            report_shipped(j, true);
            if (j.op != "softmax")
                report_shipped(j, false);
            if (j.op == "layernorm")
                sweep<nd_layernorm_op>(j);
            else if (j.op == "rmsnorm")
                sweep<nd_rmsnorm_op>(j);
            else
                sweep<nd_softmax_op<false>>(j);
            for (int i = 0; i < k; i++) {
                CK(cudaFree(j.xs[i]));
                CK(cudaFree(j.ys[i]));
            }
            CK(cudaFree(j.gamma));
            CK(cudaFree(j.beta));
        }
    }
    return 0;
}
