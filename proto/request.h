/*
 * request.h - what the wire parsers in proto/ share (request.c); not part of the public API.
 *
 * Both parsers follow the same steps: nd_request_begin, then the wire-specific reading of metadata
 * with the helpers below, then nd_request_finish (view, element count, limits), then the tensors.
 * Each helper returns 0, or an HTTP status with a message in err; the caller returns that status
 * after nd_request_free.
 */
#ifndef ND_PROTO_REQUEST_H
#define ND_PROTO_REQUEST_H

#include "nd_proto.h"
#include "../kernels/nd_dtype.h"

/* Zeroes *req and records op and wire; 400 for an op outside nd_op. */
int nd_request_begin(nd_request *req, nd_op op, nd_wire wire, nd_error *err);

static inline int nd_op_is_norm(nd_op op)
{
    return op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM;
}

/* Sets req->dtype from a name, or 400 "dtype: unknown ...". */
int nd_request_set_dtype(nd_request *req, const char *name, nd_error *err);

/* Adds one named output ("y", "mean", "rstd"; len bytes of name) to req->outputs, checking that
 * req->op produces it. where names the field in messages ("outputs[1]", "outputs"). */
int nd_request_add_output(nd_request *req, const char *name, size_t len, const char *where,
                          nd_error *err);

/* Checks and copies a registered parameter set's name into req->params. */
int nd_request_set_params(nd_request *req, const char *name, size_t len, nd_error *err);

/* Checks an eps value (finite, > 0, a positive finite float32) and stores it in req->eps. */
int nd_request_set_eps(nd_request *req, double eps, nd_error *err);

/* Checks dimension i of the shape; the value comes as the client wrote it. */
int nd_request_check_dim(int i, int64_t v, nd_error *err);

/*
 * With req->op, dtype, ndim and shape set: checks the axis (when has_axis) against the op and the
 * rank, then sets req->axis, the view (outer, mid, inner), elems, the eps default for norms when
 * eps is still 0, and ND_OUT_Y. 400 when the element or byte count overflows, 413 when elems
 * exceeds max_elems (max_elems <= 0: no bound).
 */
int nd_request_finish(nd_request *req, int has_axis, int64_t axis, int64_t max_elems,
                      nd_error *err);

/* Writes "[2,4]" (the shape as in JSON) into buf. */
void nd_request_shape_str(const nd_request *req, char *buf, size_t size);
void nd_shape_str(const int64_t *shape, int ndim, char *buf, size_t size);

/* ---- JSON text (request.c): what every JSON answer writes, one definition for /v1 and v2 ---- */

/* The most bytes nd_json_put_numbers writes per element, the separating comma included. */
#define ND_JSON_NUMBER_MAX 17

/*
 * Writes n elements of dt from src as comma-separated JSON numbers (no brackets): the shortest
 * decimal that reads back as the same value, the nearest such for float32 (json_num.h), in "%.9g"'s
 * layout; null for non-finite values, "-0.0" for negative zero. p needs room for
 * n * ND_JSON_NUMBER_MAX bytes; returns the end. src may be unaligned.
 */
char *nd_json_put_numbers(char *p, nd_dtype dt, const void *src, int64_t n);

/* Writes s (n bytes) as a quoted JSON string: '"' and '\' escaped, control bytes as \u00XX,
 * invalid UTF-8 as \ufffd. p needs room for 2 + 6 * n bytes; returns the end. */
char *nd_json_put_string(char *p, const char *s, size_t n);

/* For messages: s (len bytes) shortened and with non-printable bytes shown as '?'. */
void nd_proto_quote(char *out, size_t size, const char *s, size_t len);

/*
 * Rounding a double into a storage dtype, to nearest-even, with one rounding: a direct double ->
 * float16 conversion done as double -> float -> float16 would round twice and can land on the
 * wrong neighbour when the first rounding hits a tie. Rounding to float with round-to-odd first
 * (keep the truncated value, make it odd when anything was dropped) carries the sticky bit, and
 * float has more than twice float16's and bfloat16's precision plus two, so the second rounding is
 * then exact. The leading decimal -> double step (strtod) is a separate rounding we cannot see past.
 */
static inline float nd_f64_to_f32_odd(double d)
{
    float f = (float)d;
    if ((double)f == d || f != f)
        return f;
    uint32_t u = nd_f32_bits(f);
    if (u & 1u)
        return f;
    /* f is the even neighbour; the odd one lies on d's side of f */
    if (__builtin_fabs((double)f) > __builtin_fabs(d))
        u -= 1;
    else
        u += 1;
    return nd_bits_f32(u);
}

/* Stores finite d into element i of dt; returns -1 (storing nothing) when it rounds to infinity,
 * i.e. is out of the dtype's range. */
static inline int nd_store_f64(nd_dtype dt, void *p, int64_t i, double d)
{
    switch (dt) {
    case ND_FLOAT16: {
        uint16_t h = nd_float_to_half(nd_f64_to_f32_odd(d));
        if ((h & 0x7fffu) == 0x7c00u)
            return -1;
        ((uint16_t *)p)[i] = h;
        return 0;
    }
    case ND_BFLOAT16: {
        uint16_t b = nd_float_to_bf16(nd_f64_to_f32_odd(d));
        if ((b & 0x7fffu) == 0x7f80u)
            return -1;
        ((uint16_t *)p)[i] = b;
        return 0;
    }
    default: {
        float f = (float)d;
        if (__builtin_isinf(f))
            return -1;
        ((float *)p)[i] = f;
        return 0;
    }
    }
}

#endif /* ND_PROTO_REQUEST_H */
