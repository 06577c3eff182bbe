/*
 * engine_cuda.c - the CUDA engine (placeholder until the GPU serving engine lands): refuses
 * to start, so --backend auto falls back to the cpu engine.
 */
#include "engine.h"

nd_engine *nd_engine_cuda_create(const nd_config *cfg, nd_error *err)
{
    nd_error_set(err, ND_EUNSUPPORTED, "the cuda engine is not available in this build");
    return NULL;
}
