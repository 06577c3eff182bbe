/*
 * cluster_probe.cu - how many thread-block clusters of each size the device holds at once, for
 * blocks that take a whole SM (1024 threads, most of its shared memory) and for smaller ones.
 *
 * The resident slab kernel (kernels/softmax_axis.cu, softmax_axis_slab_res) runs one 1024-thread
 * block an SM, 16 blocks a slab, 8 slabs for (8,32768,64). Running each slab's blocks as one
 * cluster needs cudaOccupancyMaxActiveClusters >= 8 at size 16; on one H200 the launcher never
 * took that form. Clusters live in one GPC, and an H100 / H200 has 132 SMs in 8 GPCs of uneven
 * size, so the answer is the GPCs' sizes, which this program reads off: for blocks of a whole
 * SM, the clusters of size k that fit at once are the sum over GPCs of floor(SMs / k).
 *
 * Usage: cluster_probe   (prints one line per block shape and cluster size)
 */
#include <cooperative_groups.h>

#include "gpu_timing.cuh" /* CK */

namespace cg = cooperative_groups;

__global__ void __launch_bounds__(1024, 1) whole_sm(int *p)
{
    extern __shared__ int s[];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    if (p)
        p[blockIdx.x] = s[1023 - threadIdx.x];
}

/* a cooperative launch in clusters: every block passes a grid barrier and a cluster barrier, then
 * writes its cluster rank (checked by the host) */
__global__ void __launch_bounds__(1024, 1) coop_clusters(int *p)
{
    extern __shared__ int s[];
    s[threadIdx.x] = (int)threadIdx.x;
    cg::this_grid().sync();
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    if (threadIdx.x == 0)
        p[blockIdx.x] = (int)cl.block_rank() + s[0];
}

/* A launch of grid blocks of `threads` in clusters of k (cooperative where asked), attrs[] its
 * room for the attributes. */
static cudaLaunchConfig_t cluster_launch(cudaLaunchAttribute (&attrs)[2], unsigned grid,
                                         unsigned threads, size_t smem, unsigned k, bool coop)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = k;
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    attrs[1].id = cudaLaunchAttributeCooperative;
    attrs[1].val.cooperative = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = coop ? 2 : 1;
    return cfg;
}

int main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, %zu bytes of shared memory a block at most\n", prop.name,
           prop.multiProcessorCount, (size_t)prop.sharedMemPerBlockOptin);
    const size_t smem_whole = prop.sharedMemPerBlockOptin - 4096; /* one block an SM */
    CK(cudaFuncSetAttribute(whole_sm, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem_whole));
    CK(cudaFuncSetAttribute(whole_sm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    struct {
        const char *what;
        int threads;
        size_t smem;
    } shapes[] = {
        {"1024 threads, one block an SM", 1024, smem_whole},
        {"192 threads, 27 KB (the 16-bit slab kernel's blocks, 5 an SM by registers)", 192,
         27 * 1024},
    };
    for (const auto &sh : shapes) {
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, whole_sm, sh.threads, sh.smem));
        printf("%s: %d blocks an SM by occupancy\n", sh.what, per_sm);
        for (unsigned k = 1; k <= 16; k++) {
            cudaLaunchAttribute attrs[2];
            const cudaLaunchConfig_t cfg = cluster_launch(attrs, (unsigned)(k * 16),
                                                          (unsigned)sh.threads, sh.smem, k, false);
            int clusters = 0;
            const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, whole_sm, &cfg);
            if (e != cudaSuccess) {
                printf("  cluster %2u: %s\n", k, cudaGetErrorString(e));
                (void)cudaGetLastError();
                continue;
            }
            printf("  cluster %2u: %3d clusters at once (%4u blocks)\n", k, clusters, clusters * k);
        }
    }
    /* can a launch be cooperative and clustered at once (the resident slabs as clusters of 8, two
     * a slab, exchanging through memory across the grid)? */
    CK(cudaFuncSetAttribute(coop_clusters, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)smem_whole));
    int *d = nullptr;
    CK(cudaMalloc(&d, 1024 * sizeof(int)));
    for (int k : {1, 2, 4, 8}) {
        for (int grid : {128, 132}) {
            if (grid % k)
                continue;
            CK(cudaMemset(d, 0xff, 1024 * sizeof(int)));
            cudaLaunchAttribute attrs[2];
            const cudaLaunchConfig_t cfg =
                cluster_launch(attrs, (unsigned)grid, 1024, smem_whole, (unsigned)k, true);
            cudaError_t e = cudaLaunchKernelEx(&cfg, coop_clusters, d);
            if (e == cudaSuccess)
                e = cudaDeviceSynchronize();
            int h[1024];
            int ok = 0;
            if (e == cudaSuccess) {
                CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
                for (int b = 0; b < grid; b++)
                    ok += h[b] == b % k;
            }
            printf("cooperative launch of %d whole-SM blocks in clusters of %d: %s, %d of %d "
                   "blocks right\n", grid, k, cudaGetErrorString(e), ok, grid);
            (void)cudaGetLastError();
        }
    }
    CK(cudaFree(d));
    return 0;
}
