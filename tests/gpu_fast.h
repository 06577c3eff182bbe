/*
 * gpu_fast.h - for the GPU tests: whether the device is of the kernels' fast class (peak DRAM
 * bandwidth of 4000 GB/s or more, 2 x memory clock x bus width: ND_ROWS_FAST_GBPS in
 * kernels/rows.cuh, ND_AXIS_PF_MIN_GBPS in kernels/softmax_axis.cu), where the dispatch takes
 * the routes measured on such a device (an H200). Include after criterion and cuda_runtime.h.
 */
#ifndef ND_GPU_FAST_H
#define ND_GPU_FAST_H

static inline int nd_test_fast_device(void)
{
    int khz = 0, bits = 0;
    cr_assert_eq(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0), cudaSuccess);
    cr_assert_eq(cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, 0), cudaSuccess);
    return 2.0 * khz * 1e3 * (bits / 8) / 1e9 >= 4000.0;
}

#endif
