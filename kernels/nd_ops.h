/*
 * nd_ops.h - the normd operator API.
 *
 * One API, several backends: the CPU backend (nd_cpu_*, plain C, always built; the reference that
 * every other backend is checked against) and the CUDA backend (nd_cuda_*, built when nvcc is
 * present). Both take the same argument structs; the CPU backend reads and writes host memory, the
 * CUDA backend device memory on a caller-given stream.
 *
 * Tensors are row-major and contiguous. Storage types are float32, float16 (IEEE binary16) and
 * bfloat16; arithmetic is done in float32 or better and results are rounded to nearest-even on store.
 * Parameter tensors (gamma, beta, weight, alpha) have the same dtype as x. Per-row statistics
 * (mean, rstd) are always float32.
 *
 * Every function returns ND_OK or an error status and, when err is not NULL, a message in err.
 */
#ifndef ND_OPS_H
#define ND_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nd_status {
    ND_OK = 0,
    ND_EINVAL,   /* arguments that describe no valid operation */
    ND_ENOMEM,   /* host or device allocation failed */
    ND_EDEVICE,  /* a CUDA call or launch failed; the message holds the CUDA error string */
    ND_EUNSUPPORTED, /* valid arguments this backend cannot run (e.g. no CUDA device) */
} nd_status;

typedef struct nd_error {
    char msg[256];
} nd_error;

typedef enum nd_dtype {
    ND_FLOAT32 = 0,
    ND_FLOAT16 = 1,
    ND_BFLOAT16 = 2,
    ND_DTYPE_COUNT
} nd_dtype;

typedef enum nd_op {
    ND_OP_LAYERNORM = 0,
    ND_OP_RMSNORM,
    ND_OP_SOFTMAX,
    ND_OP_LOG_SOFTMAX,
    ND_OP_PRELU,
    ND_OP_COUNT
} nd_op;

/* Names used on the wire and in metrics: "float32", "float16", "bfloat16"; "layernorm", ... */
const char *nd_dtype_name(nd_dtype dt);
size_t nd_dtype_size(nd_dtype dt);
/* Returns 0 and sets *out, or -1 for an unknown name. */
int nd_dtype_from_name(const char *name, nd_dtype *out);
const char *nd_op_name(nd_op op);
int nd_op_from_name(const char *name, nd_op *out);

/*
 * LayerNorm and RMSNorm over the last `cols` elements of each of `rows` rows.
 *   layernorm: y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps), var biased
 *   rmsnorm:   y = x * rstd * weight,                 rstd = 1 / sqrt(mean(x^2) + eps)
 * gamma (the rmsnorm weight) and beta may be NULL (treated as 1 and 0). mean and rstd may be NULL;
 * when given they receive `rows` float32 values. rmsnorm ignores beta and mean.
 */
typedef struct nd_norm_args {
    nd_dtype dtype;
    int64_t rows;
    int64_t cols;
    const void *x;
    void *y;
    const void *gamma;
    const void *beta;
    float eps;
    float *mean;
    float *rstd;
} nd_norm_args;

/*
 * Softmax and log-softmax along one axis. The tensor is viewed as (outer, dim, inner): dim is the
 * size of the reduced axis, inner the product of the sizes after it (1 for the last axis), outer the
 * product of the sizes before it. Element (o, d, i) is at ((o * dim) + d) * inner + i.
 */
typedef struct nd_softmax_args {
    nd_dtype dtype;
    int64_t outer;
    int64_t dim;
    int64_t inner;
    const void *x;
    void *y;
} nd_softmax_args;

/*
 * PReLU: y = x > 0 ? x : alpha[c] * x. The tensor is viewed as (outer, channels, inner) where
 * channels is dim 1 of an (N, C, ...) tensor. With alpha_count == 1 one alpha is shared by every
 * element; otherwise alpha_count == channels and alpha[c] applies to channel c.
 */
typedef struct nd_prelu_args {
    nd_dtype dtype;
    int64_t outer;
    int64_t channels;
    int64_t inner;
    const void *x;
    void *y;
    const void *alpha;
    int64_t alpha_count;
} nd_prelu_args;

/* Argument checks shared by every backend (sizes >= 1, no overflow, pointers present). */
nd_status nd_norm_args_check(const nd_norm_args *a, nd_error *err);
nd_status nd_softmax_args_check(const nd_softmax_args *a, nd_error *err);
nd_status nd_prelu_args_check(const nd_prelu_args *a, nd_error *err);

/* printf-style helper that fills err (when not NULL) and returns st. */
nd_status nd_error_set(nd_error *err, nd_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- CPU backend (kernels/cpu.c) ---- */

/* Worker threads used by the CPU backend; 0 means one per online core. Call before the first op. */
void nd_cpu_set_threads(int threads);
nd_status nd_cpu_layernorm(const nd_norm_args *a, nd_error *err);
nd_status nd_cpu_rmsnorm(const nd_norm_args *a, nd_error *err);
nd_status nd_cpu_softmax(const nd_softmax_args *a, int log, nd_error *err);
nd_status nd_cpu_prelu(const nd_prelu_args *a, nd_error *err);

/* ---- CUDA backend (the kernels/ .cu files); stream is a cudaStream_t, NULL for the legacy stream ---- */

/* Number of usable CUDA devices, 0 when the runtime or driver is missing or the build has no CUDA. */
int nd_cuda_device_count(void);
nd_status nd_cuda_layernorm(const nd_norm_args *a, void *stream, nd_error *err);
nd_status nd_cuda_rmsnorm(const nd_norm_args *a, void *stream, nd_error *err);
nd_status nd_cuda_softmax(const nd_softmax_args *a, int log, void *stream, nd_error *err);
nd_status nd_cuda_prelu(const nd_prelu_args *a, void *stream, nd_error *err);

/* Launch plans, for benchmarks and debugging: after nd_cuda_plan_trace(1), each nd_cuda_* call on
 * this thread records which kernel its dispatch picked and its geometry (one line, for example
 * "warp W=8 packs=4 R=1 block=128 cluster=1 grid=3072 smem=0"), and nd_cuda_last_plan() returns
 * it ("" before any). Off by default, so that the service never formats one. */
void nd_cuda_plan_trace(int on);
const char *nd_cuda_last_plan(void);

#ifdef __cplusplus
}
#endif

#endif /* ND_OPS_H */
