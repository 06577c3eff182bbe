/*
 * cuda_stub.c - the CUDA backend's API in a build without nvcc: no devices, every op refused.
 * Lets the daemon and tests link the same way with and without CUDA.
 */
#include "nd_ops.h"

int nd_cuda_device_count(void)
{
    return 0;
}

static nd_status no_cuda(nd_error *err)
{
    return nd_error_set(err, ND_EUNSUPPORTED, "this build of normd has no CUDA backend");
}

nd_status nd_cuda_layernorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return no_cuda(err);
}

nd_status nd_cuda_rmsnorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return no_cuda(err);
}

nd_status nd_cuda_softmax(const nd_softmax_args *a, int log, void *stream, nd_error *err)
{
    return no_cuda(err);
}

nd_status nd_cuda_prelu(const nd_prelu_args *a, void *stream, nd_error *err)
{
    return no_cuda(err);
}

void nd_cuda_plan_trace(int on)
{
}

const char *nd_cuda_last_plan(void)
{
    return "";
}
