/*
 * nd_proto.h - normd's wire formats: bytes in, a validated request out; results in, bytes out.
 *
 * No I/O, no HTTP library and no GPU here: the server hands over a request body (and, for the raw
 * binary form, the query string's key/value pairs) and gets back either an nd_request or an HTTP
 * status with a message that names the offending field.
 *
 * Every operator is seen through one three-dimensional view (outer, mid, inner):
 *   layernorm, rmsnorm:   outer = rows (product of all dims but the last), mid = cols, inner = 1
 *   softmax, log_softmax: outer = product of dims before the axis, mid = shape[axis], inner = the
 *                         product after it
 *   prelu:                outer = shape[0], mid = channels = shape[1] (1 for rank 1), inner = the
 *                         product of the rest
 * Requests whose views agree in everything but outer can be concatenated along outer and run as one
 * kernel call; that is what the batcher does.
 */
#ifndef ND_PROTO_H
#define ND_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/nd_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ND_MAX_DIMS 8
#define ND_PARAMS_NAME_MAX 64

/* 1 when name[0, len) may name a registered parameter set or shared memory region: 1 to
 * ND_PARAMS_NAME_MAX - 1 bytes of A-Z a-z 0-9 _ . - (so also one segment of a URL's path). */
int nd_name_ok(const char *name, size_t len);

/* Fills err (when not NULL) with a printf-style message and returns status: the parsers' and
 * the shared memory registry's way of answering an HTTP status with its message. */
int nd_proto_fail(nd_error *err, int status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Which outputs a request wants. */
enum {
    ND_OUT_Y = 1u << 0,
    ND_OUT_MEAN = 1u << 1, /* layernorm only */
    ND_OUT_RSTD = 1u << 2, /* layernorm and rmsnorm */
};

typedef enum nd_wire {
    ND_WIRE_JSON = 0,
    ND_WIRE_BINARY,
} nd_wire;

/* A query-string pair, as the HTTP layer found it (already percent-decoded). */
typedef struct nd_kv {
    const char *key;
    const char *value;
} nd_kv;

/*
 * A parsed, validated request. Tensors hold dtype-sized elements, little-endian, row-major.
 * Pointers either point into the caller's body buffer (raw binary) or into `owned`, one block
 * allocated by the parser (JSON); nd_request_free releases `owned` only.
 */
typedef struct nd_request {
    nd_op op;
    nd_dtype dtype;
    nd_wire wire;
    int ndim;
    int64_t shape[ND_MAX_DIMS];
    int axis;          /* softmax/log_softmax: in [0, ndim); others: ndim - 1 */
    float eps;         /* layernorm/rmsnorm: given or the op's default */
    unsigned outputs;  /* ND_OUT_* mask; always has ND_OUT_Y */

    int64_t outer, mid, inner; /* the view described above */
    int64_t elems;             /* outer * mid * inner */

    const void *x;             /* elems elements */
    /* Inline parameters, NULL when absent. layernorm: gamma, beta (mid elements each);
     * rmsnorm: weight in gamma (mid elements); prelu: alpha (alpha_count elements). */
    const void *gamma;
    const void *beta;
    const void *alpha;
    int64_t alpha_count;        /* prelu: 1 (shared) or mid (per channel); from inline or registry
                                 * (the parsers leave it 0 when params names a set: the server
                                 * fills it in from the registry) */
    char params[ND_PARAMS_NAME_MAX]; /* name of a registered parameter set, "" when none */

    void *owned;
} nd_request;

void nd_request_free(nd_request *req);

/* Defaults applied when the request does not say. */
#define ND_LAYERNORM_EPS_DEFAULT 1e-5f
#define ND_RMSNORM_EPS_DEFAULT 1e-6f

/*
 * Parse a JSON body for operator op. Returns 0 and fills *req, or an HTTP status (400 invalid,
 * 413 too large, 500 out of memory) with a message in err naming the field; on failure *req owns
 * nothing (nd_request_free is harmless). The body need not be NUL-terminated.
 * max_elems bounds the element count of x (a 413 beyond it; 0 or less: no bound).
 */
int nd_proto_parse_json(nd_op op, const char *body, size_t len, int64_t max_elems,
                        nd_request *req, nd_error *err);

/*
 * Parse a raw binary request: metadata from the query string (shape, dtype, eps, axis, affine,
 * alpha=shared|channel, outputs, params), tensors from the body: x, then gamma and beta (layernorm,
 * affine=1) or weight (rmsnorm, affine=1) or alpha (prelu, always). The request's tensor pointers
 * point into body, which must outlive the request; they are as aligned as body is, so may be
 * unaligned for the dtype (read through memcpy). Returns 0 or an HTTP status as above.
 */
int nd_proto_parse_binary(nd_op op, const nd_kv *query, size_t nquery, const void *body,
                          size_t len, int64_t max_elems, nd_request *req, nd_error *err);

/*
 * Encode a JSON answer {"shape":[...],"dtype":"...","data":[...]} plus "mean"/"rstd" when the
 * request asked for them and the pointer is not NULL (each holds nd_request_stat_rows(req)
 * floats). y holds req->elems elements of req->dtype. Numbers are the shortest decimal that reads
 * back as the same value ("0.1", "1e-45"; laid out as printf's "%.9g" would); JSON has no infinity
 * or NaN, so non-finite values are written as null. *out is malloc'ed and NUL-terminated; returns
 * 0, or -1 on allocation failure.
 */
int nd_proto_encode_json(const nd_request *req, const void *y, const float *mean,
                         const float *rstd, char **out, size_t *out_len);

/* Number of per-row statistics a norm request produces (its outer), 0 for other ops. */
int64_t nd_request_stat_rows(const nd_request *req);

/* "8,4096" for the X-Normd-Shape header of binary answers. buf of at least 8 * 21 bytes. */
void nd_proto_format_shape(const nd_request *req, char *buf, size_t size);

/* {"error": msg}, malloc'ed. */
char *nd_proto_error_json(const char *msg);

/*
 * The body of PUT /v1/params/{name}: a parameter set, tensors in the order gamma, beta, weight,
 * alpha (NULL when absent). JSON: {"dtype":"float16","gamma":[...],"beta":[...]}. Raw binary:
 * ?dtype=float16&gamma=4096&beta=4096 gives each tensor's element count, and the body holds the
 * tensors in that fixed order. Returns 0 or an HTTP status with a message naming the field.
 */
#define ND_PARAM_TENSORS 4
typedef struct nd_params_body {
    nd_dtype dtype;
    const void *tensor[ND_PARAM_TENSORS];
    int64_t count[ND_PARAM_TENSORS];
    void *owned;
} nd_params_body;

int nd_proto_parse_params_json(const char *body, size_t len, nd_params_body *out, nd_error *err);
int nd_proto_parse_params_binary(const nd_kv *query, size_t nquery, const void *body, size_t len,
                                 nd_params_body *out, nd_error *err);
void nd_params_body_free(nd_params_body *pb);

#ifdef __cplusplus
}
#endif

#endif /* ND_PROTO_H */
