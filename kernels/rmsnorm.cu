/*
 * rmsnorm.cu - the CUDA backend's RMSNorm entry point: the op of rmsnorm.cuh (where its
 * statistics are described) run by the row engine with the launcher of norm.cuh.
 */
#include "rmsnorm.cuh"

/* ---------------------------------------------------------------------------------------------
 * Launcher
 * ------------------------------------------------------------------------------------------- */

extern "C" nd_status nd_cuda_rmsnorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return norm_dispatch<nd_rmsnorm_op>(a, stream, "rmsnorm", err);
}
