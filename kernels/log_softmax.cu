/*
 * log_softmax.cu - log-softmax over the last axis (CUDA backend): softmax.cuh's op and launcher
 * with LOG set, a translation unit of its own so it compiles beside softmax.cu. Called by
 * nd_cuda_softmax (softmax.cu).
 */
#include "softmax.cuh"

nd_status nd_cuda_log_softmax_rows(const nd_softmax_args *a, cudaStream_t s, nd_error *err)
{
    return softmax_dispatch<true>(a, s, err);
}
