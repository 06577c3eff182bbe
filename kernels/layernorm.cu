/*
 * layernorm.cu - the CUDA backend's LayerNorm entry point: the op of layernorm.cuh (where its
 * statistics are described) run by the row engine with the launcher of norm.cuh.
 */
#include "layernorm.cuh"

/* ---------------------------------------------------------------------------------------------
 * Launcher
 * ------------------------------------------------------------------------------------------- */

extern "C" nd_status nd_cuda_layernorm(const nd_norm_args *a, void *stream, nd_error *err)
{
    return norm_dispatch<nd_layernorm_op>(a, stream, "layernorm", err);
}
