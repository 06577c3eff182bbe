/*
 * json.c - the JSON request body: {"shape": [...], "dtype": "...", "data": [...], ...}.
 *
 * The numeric arrays (data, gamma, beta, weight, alpha) are read by our own scanner and jansson
 * parses the rest (json_tensor.h: nd_json_doc_load; duplicate keys rejected, messages for invalid
 * JSON are jansson's). Every number is then written, rounded once to the dtype, straight into one
 * malloc'ed block (req->owned) that holds x and the inline parameters, each at a 64-byte aligned
 * offset. The tensor reading (nd_json_tensor_*, json_tensor.h) is shared with the v2 parser in
 * v2.c.
 *
 * Choices a client may notice:
 *   - data is flat (length = product of shape) or nested exactly as shape; without shape, the shape
 *     is the nesting of data (a flat array is rank 1).
 *   - An optional field set to null counts as absent (clients serialize None that way).
 *   - Integers that do not fit 64 bits are rejected by jansson as "too big integer" (write them as
 *     reals, 1e20, instead). The decimal -> double step is strtod's; from double to the dtype we
 *     round once, to nearest-even (see nd_store_f64).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_tensor.h"

/* ======================================================================== fields */

enum field {
    F_SHAPE,
    F_DTYPE,
    F_DATA,
    F_GAMMA,
    F_BETA,
    F_WEIGHT,
    F_ALPHA,
    F_EPS,
    F_AXIS,
    F_OUTPUTS,
    F_PARAMS,
    F_COUNT
};

#define OPS_ALL ((1u << ND_OP_COUNT) - 1)
#define OP(o) (1u << (o))
#define OPS_NORM (OP(ND_OP_LAYERNORM) | OP(ND_OP_RMSNORM))

static const struct {
    const char *name;
    unsigned ops; /* the operators that accept the field */
} fields[] = {
    [F_SHAPE] = {"shape", OPS_ALL},
    [F_DTYPE] = {"dtype", OPS_ALL},
    [F_DATA] = {"data", OPS_ALL},
    [F_GAMMA] = {"gamma", OP(ND_OP_LAYERNORM)},
    [F_BETA] = {"beta", OP(ND_OP_LAYERNORM)},
    [F_WEIGHT] = {"weight", OP(ND_OP_RMSNORM)},
    [F_ALPHA] = {"alpha", OP(ND_OP_PRELU)},
    [F_EPS] = {"eps", OPS_NORM},
    [F_AXIS] = {"axis", OPS_NORM | OP(ND_OP_SOFTMAX) | OP(ND_OP_LOG_SOFTMAX)},
    [F_OUTPUTS] = {"outputs", OPS_ALL},
    [F_PARAMS] = {"params", OPS_ALL},
};
_Static_assert(sizeof fields / sizeof fields[0] == F_COUNT, "fields must list every enum field");
/* The tensor fields are the scanner's /v1 sites, in the same order. */
_Static_assert(F_GAMMA - F_DATA == ND_JSON_SITE_GAMMA && F_BETA - F_DATA == ND_JSON_SITE_BETA &&
                   F_WEIGHT - F_DATA == ND_JSON_SITE_WEIGHT &&
                   F_ALPHA - F_DATA == ND_JSON_SITE_ALPHA &&
                   F_ALPHA - F_DATA + 1 == ND_JSON_V1_SITES,
               "tensor fields and sites in step");

const char *nd_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* "shape, dtype, data, gamma, ..." for the fields op accepts. */
static void accepted_list(nd_op op, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int f = 0; f < F_COUNT && n < size; f++)
        if (fields[f].ops & OP(op))
            n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", fields[f].name);
}

/* A parameter given as something else than an array (t NULL: v is what the client sent). */
static int check_param(const nd_json_tensor *t, const json_t *v, const char *name, nd_error *err)
{
    if (!t)
        return nd_proto_fail(err, 400, "%s: expected an array of numbers, got %s", name,
                             nd_json_type_name(v));
    return 0;
}

/* ======================================================================== parse */

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

int nd_proto_parse_json(nd_op op, const char *body, size_t len, int64_t max_elems,
                        nd_request *req, nd_error *err)
{
    nd_json_doc doc = {0};
    json_t *root;
    const json_t *f[F_COUNT] = {0};
    const nd_json_tensor *tf[F_COUNT] = {0}; /* the arrays at the tensor fields */
    const char *key;
    json_t *val;
    int64_t axis = 0;
    int rc;

    rc = nd_request_begin(req, op, ND_WIRE_JSON, err);
    if (rc)
        return rc;

    if ((rc = nd_json_doc_load(&doc, ND_JSON_V1, body, len, err)))
        goto fail;
    root = doc.root;
    if (!json_is_object(root)) {
        rc = nd_proto_fail(err, 400, "body: expected a JSON object, got %s",
                           nd_json_type_name(root));
        goto fail;
    }

    json_object_foreach(root, key, val) {
        int k = 0;
        while (k < F_COUNT && strcmp(key, fields[k].name) != 0)
            k++;
        if (k == F_COUNT) {
            char q[64], list[160];
            nd_proto_quote(q, sizeof q, key, strlen(key));
            accepted_list(op, list, sizeof list);
            rc = nd_proto_fail(err, 400, "unknown field \"%s\"; %s accepts %s", q,
                               nd_op_name(op), list);
            goto fail;
        }
        if (!(fields[k].ops & OP(op))) {
            rc = nd_proto_fail(err, 400, "%s: not accepted by %s", key, nd_op_name(op));
            goto fail;
        }
        if (!json_is_null(val))
            f[k] = val;
        if (k >= F_DATA && k <= F_ALPHA)
            tf[k] = nd_json_doc_tensor(&doc, (size_t)(k - F_DATA), val);
    }

    /* ---- scalar metadata ---- */
    if (f[F_DTYPE]) {
        if (!json_is_string(f[F_DTYPE])) {
            rc = nd_proto_fail(err, 400, "dtype: expected a string, got %s",
                               nd_json_type_name(f[F_DTYPE]));
            goto fail;
        }
        if ((rc = nd_request_set_dtype(req, json_string_value(f[F_DTYPE]), err)))
            goto fail;
    }
    if (f[F_PARAMS]) {
        if (!json_is_string(f[F_PARAMS])) {
            rc = nd_proto_fail(err, 400, "params: expected a string, got %s",
                               nd_json_type_name(f[F_PARAMS]));
            goto fail;
        }
        if ((rc = nd_request_set_params(req, json_string_value(f[F_PARAMS]),
                                        json_string_length(f[F_PARAMS]), err)))
            goto fail;
        for (int k = F_GAMMA; k <= F_ALPHA; k++)
            if (f[k]) {
                rc = nd_proto_fail(err, 400,
                                   "params: cannot be combined with inline %s; send one or the "
                                   "other",
                                   fields[k].name);
                goto fail;
            }
    }
    if (f[F_EPS]) {
        if (!json_is_number(f[F_EPS])) {
            rc = nd_proto_fail(err, 400, "eps: expected a number, got %s",
                               nd_json_type_name(f[F_EPS]));
            goto fail;
        }
        if ((rc = nd_request_set_eps(req, json_number_value(f[F_EPS]), err)))
            goto fail;
    }
    if (f[F_AXIS]) {
        if (!json_is_integer(f[F_AXIS])) {
            rc = nd_proto_fail(err, 400, "axis: expected an integer, got %s",
                               nd_json_type_name(f[F_AXIS]));
            goto fail;
        }
        axis = json_integer_value(f[F_AXIS]);
    }
    if (f[F_OUTPUTS]) {
        const json_t *o = f[F_OUTPUTS];
        if (!json_is_array(o)) {
            rc = nd_proto_fail(err, 400, "outputs: expected an array of strings, got %s",
                               nd_json_type_name(o));
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(o); i++) {
            const json_t *s = json_array_get(o, i);
            char where[32];
            snprintf(where, sizeof where, "outputs[%zu]", i);
            if (!json_is_string(s)) {
                rc = nd_proto_fail(err, 400, "%s: expected a string, got %s", where,
                                   nd_json_type_name(s));
                goto fail;
            }
            if ((rc = nd_request_add_output(req, json_string_value(s), json_string_length(s),
                                            where, err)))
                goto fail;
        }
    }

    /* ---- shape, given or inferred from data ---- */
    const nd_json_tensor *data = tf[F_DATA];
    if (!f[F_DATA]) {
        rc = nd_proto_fail(err, 400, "data: required (an array of numbers)");
        goto fail;
    }
    if (!data) {
        rc = nd_proto_fail(err, 400, "data: expected an array of numbers, got %s",
                           nd_json_type_name(f[F_DATA]));
        goto fail;
    }
    const int nested = nd_json_tensor_nested(data);
    if (f[F_SHAPE]) {
        const json_t *s = f[F_SHAPE];
        size_t n;
        if (!json_is_array(s)) {
            rc = nd_proto_fail(err, 400, "shape: expected an array of integers, got %s",
                               nd_json_type_name(s));
            goto fail;
        }
        n = json_array_size(s);
        if (n < 1 || n > ND_MAX_DIMS) {
            rc = nd_proto_fail(err, 400, "shape: must have 1 to %d dimensions, got %zu",
                               ND_MAX_DIMS, n);
            goto fail;
        }
        for (size_t i = 0; i < n; i++) {
            const json_t *d = json_array_get(s, i);
            if (!json_is_integer(d)) {
                rc = nd_proto_fail(err, 400, "shape[%zu]: expected an integer, got %s", i,
                                   nd_json_type_name(d));
                goto fail;
            }
            if ((rc = nd_request_check_dim((int)i, json_integer_value(d), err)))
                goto fail;
            req->shape[i] = json_integer_value(d);
        }
        req->ndim = (int)n;
    } else if (nested) {
        int64_t dims[ND_MAX_DIMS + 1];
        const int levels = nd_json_tensor_dims(data, dims, ND_MAX_DIMS + 1);
        for (int k = 0; k < levels; k++) {
            const int64_t n = dims[k];
            if (req->ndim == ND_MAX_DIMS) {
                rc = nd_proto_fail(err, 400, "data: nested deeper than %d levels", ND_MAX_DIMS);
                goto fail;
            }
            if (n == 0) {
                rc = nd_proto_fail(err, 400, "data: contains an empty array (no dimension may "
                                             "be 0)");
                goto fail;
            }
            req->shape[req->ndim++] = n;
        }
    } else {
        if (nd_json_tensor_len(data) == 0) {
            rc = nd_proto_fail(err, 400, "data: is empty (no dimension may be 0)");
            goto fail;
        }
        req->ndim = 1;
        req->shape[0] = (int64_t)nd_json_tensor_len(data);
    }

    if ((rc = nd_request_finish(req, f[F_AXIS] != NULL, axis, max_elems, err)))
        goto fail;

    if ((rc = nd_json_tensor_check(data, req->shape, req->ndim, req->elems, "data", err)))
        goto fail;

    /* ---- inline parameters: presence and lengths ---- */
    const int64_t cols = req->mid;
    for (int k = F_GAMMA; k <= F_WEIGHT; k++) {
        if (!f[k])
            continue;
        if ((rc = check_param(tf[k], f[k], fields[k].name, err)))
            goto fail;
        if ((int64_t)nd_json_tensor_len(tf[k]) != cols) {
            rc = nd_proto_fail(err, 400,
                               "%s has %zu numbers, expected %lld (the size of the last "
                               "dimension)",
                               fields[k].name, nd_json_tensor_len(tf[k]), (long long)cols);
            goto fail;
        }
    }
    if (op == ND_OP_PRELU && !req->params[0]) {
        const nd_json_tensor *a = tf[F_ALPHA];
        int64_t n;
        if (!f[F_ALPHA]) {
            rc = nd_proto_fail(err, 400, "alpha: required for prelu (or name a registered "
                                         "parameter set with params)");
            goto fail;
        }
        if ((rc = check_param(a, f[F_ALPHA], "alpha", err)))
            goto fail;
        n = (int64_t)nd_json_tensor_len(a);
        if (n != 1 && n != req->mid) {
            if (req->mid == 1)
                rc = nd_proto_fail(err, 400, "alpha has %lld numbers, expected 1", (long long)n);
            else
                rc = nd_proto_fail(err, 400,
                                   "alpha has %lld numbers, expected 1 (shared) or %lld (one per "
                                   "channel)",
                                   (long long)n, (long long)req->mid);
            goto fail;
        }
        req->alpha_count = n;
    }

    /* ---- one block for x and the parameters ---- */
    const size_t esize = nd_dtype_size(req->dtype);
    const size_t xbytes = (size_t)req->elems * esize; /* checked by nd_request_finish */
    const size_t pbytes = align64((size_t)cols * esize);
    size_t total = align64(xbytes);
    size_t off_gamma = 0, off_beta = 0, off_alpha = 0;
    const nd_json_tensor *g = op == ND_OP_RMSNORM ? tf[F_WEIGHT] : tf[F_GAMMA];
    if (g && op != ND_OP_PRELU) {
        off_gamma = total;
        total += pbytes;
    }
    if (f[F_BETA]) {
        off_beta = total;
        total += pbytes;
    }
    if (req->alpha_count) {
        off_alpha = total;
        total += align64((size_t)req->alpha_count * esize);
    }
    req->owned = aligned_alloc(64, total ? total : 64);
    if (!req->owned) {
        rc = nd_proto_fail(err, 500, "out of memory for %zu bytes", total);
        goto fail;
    }
    char *block = req->owned;

    if ((rc = nd_json_tensor_fill(data, req->shape, req->ndim, req->dtype, block, "data", err)))
        goto fail;
    req->x = block;
    if (g && op != ND_OP_PRELU) {
        if ((rc = nd_json_tensor_fill_flat(g, req->dtype, block + off_gamma,
                                           op == ND_OP_RMSNORM ? "weight" : "gamma", err)))
            goto fail;
        req->gamma = block + off_gamma;
    }
    if (f[F_BETA]) {
        if ((rc = nd_json_tensor_fill_flat(tf[F_BETA], req->dtype, block + off_beta, "beta",
                                           err)))
            goto fail;
        req->beta = block + off_beta;
    }
    if (req->alpha_count) {
        if ((rc = nd_json_tensor_fill_flat(tf[F_ALPHA], req->dtype, block + off_alpha, "alpha",
                                           err)))
            goto fail;
        req->alpha = block + off_alpha;
    }

    nd_json_doc_free(&doc);
    return 0;

fail:
    nd_json_doc_free(&doc);
    nd_request_free(req);
    req->x = req->gamma = req->beta = req->alpha = NULL;
    return rc;
}
