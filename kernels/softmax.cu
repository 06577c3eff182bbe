/*
 * softmax.cu - softmax over the last axis (CUDA backend), and nd_cuda_softmax, the entry for
 * softmax and log-softmax over every axis: inner > 1 goes to softmax_axis.cu, log-softmax over
 * the last axis to log_softmax.cu. The technique, the op and its launcher are in softmax.cuh.
 */
#include "softmax.cuh"

extern "C" nd_status nd_cuda_softmax(const nd_softmax_args *a, int log, void *stream, nd_error *err)
{
    nd_status st = nd_softmax_args_check(a, err);
    if (st != ND_OK)
        return st;
    cudaStream_t s = (cudaStream_t)stream;
    if (a->inner > 1)
        return nd_cuda_softmax_axis(a, log, s, err);
    return log ? nd_cuda_log_softmax_rows(a, s, err) : softmax_dispatch<false>(a, s, err);
}
