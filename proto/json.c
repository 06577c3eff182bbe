/*
 * json.c - the JSON request body: {"shape": [...], "dtype": "...", "data": [...], ...}.
 *
 * jansson parses the body (duplicate keys rejected); we then walk its arrays with
 * json_array_size/json_array_get and write every number, rounded once to the dtype, straight into
 * one malloc'ed block (req->owned) that holds x and the inline parameters, each at a 64-byte
 * aligned offset. The tensor walk (nd_json_tensor_check/fill, json_tensor.h) is shared with the v2
 * parser in v2.c. jansson still builds one json_t per number; that is the price of the JSON form
 * (the raw binary form is the fast path).
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

/* ======================================================================== numbers */

/* The exact value of a JSON number as a double, rounded to odd when it does not fit (integers
 * beyond 2^53), so that nd_store_f64's rounding stays a single rounding. 0, or -1 for non-numbers. */
static inline int number_value(const json_t *v, double *out)
{
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        double d = (double)i;
        if (i > ((json_int_t)1 << 53) || i < -((json_int_t)1 << 53)) {
            /* d is exact iff it converts back (2^63 itself is never exact for an int64) */
            int exact = fabs(d) < 9223372036854775808.0 && (json_int_t)d == i;
            if (!exact) {
                uint64_t u;
                memcpy(&u, &d, sizeof u);
                if (!(u & 1)) {
                    int away = fabs(d) > 9223372036854775807.0 ||
                               (i > 0 ? (json_int_t)d > i : (json_int_t)d < i);
                    u = away ? u - 1 : u + 1;
                    memcpy(&d, &u, sizeof d);
                }
            }
        }
        *out = d;
        return 0;
    }
    return -1;
}

/* A path in messages: the tensor's name (at most 63 bytes) and up to ND_MAX_DIMS "[index]". */
#define PATH_SIZE (64 + ND_MAX_DIMS * 24)

/* Converts element v into element i of dst; path names it in messages ("data[3]"). */
static int put_number(const json_t *v, nd_dtype dt, void *dst, int64_t i, const char *path,
                      nd_error *err)
{
    double d;
    if (number_value(v, &d) != 0)
        return nd_proto_fail(err, 400, "%s: expected a number, got %s", path,
                             nd_json_type_name(v));
    if (!isfinite(d) || nd_store_f64(dt, dst, i, d) != 0)
        return nd_proto_fail(err, 400, "%s=%g is out of range for %s", path, d,
                             nd_dtype_name(dt));
    return 0;
}

/* Fills n elements of dst from the flat array arr, whose length the caller has checked. */
static int fill_flat(const json_t *arr, nd_dtype dt, void *dst, const char *name, nd_error *err)
{
    const size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        double d;
        /* the common case without building a path string */
        if (number_value(v, &d) == 0 && isfinite(d) && nd_store_f64(dt, dst, (int64_t)i, d) == 0)
            continue;
        char path[PATH_SIZE];
        snprintf(path, sizeof path, "%.63s[%zu]", name, i);
        return put_number(v, dt, dst, (int64_t)i, path, err);
    }
    return 0;
}

/* Walks data nested as shape, depth levels in, writing elements from *pos on. With dst NULL it
 * checks the nesting only, so that nothing is allocated for a shape the data does not fill. path
 * (PATH_SIZE bytes) holds plen bytes: the name and the indices down to this level. */
static int fill_nested(const json_t *arr, const int64_t *shape, int ndim, nd_dtype dt, int depth,
                       int64_t *pos, char *path, size_t plen, void *dst, nd_error *err)
{
    const int64_t want = shape[depth];
    const size_t n = json_array_size(arr);
    const size_t psize = PATH_SIZE;
    if ((int64_t)n != want) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%s has %zu entries, shape %s needs %lld there", path, n,
                             s, (long long)want);
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (depth + 1 < ndim) {
            size_t l = plen + (size_t)snprintf(path + plen, psize - plen, "[%zu]", i);
            if (!json_is_array(v)) {
                char s[ND_MAX_DIMS * 21 + 4];
                nd_shape_str(shape, ndim, s, sizeof s);
                return nd_proto_fail(err, 400,
                                     "%s: expected an array (shape %s nests %d deep), got %s",
                                     path, s, ndim, nd_json_type_name(v));
            }
            int rc = fill_nested(v, shape, ndim, dt, depth + 1, pos, path, l, dst, err);
            if (rc)
                return rc;
            path[plen] = '\0';
        } else if (!dst) {
            if (json_is_array(v)) {
                snprintf(path + plen, psize - plen, "[%zu]", i);
                return nd_proto_fail(err, 400, "%s: expected a number, got an array", path);
            }
        } else {
            double d;
            if (number_value(v, &d) == 0 && isfinite(d) && nd_store_f64(dt, dst, *pos, d) == 0) {
                ++*pos;
                continue;
            }
            snprintf(path + plen, psize - plen, "[%zu]", i);
            return put_number(v, dt, dst, *pos, path, err);
        }
    }
    return 0;
}

static int is_nested(const json_t *arr)
{
    return json_is_array(json_array_get(arr, 0));
}

int nd_json_tensor_check(const json_t *arr, const int64_t *shape, int ndim, int64_t elems,
                         const char *name, nd_error *err)
{
    if (is_nested(arr)) {
        char path[PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return fill_nested(arr, shape, ndim, ND_FLOAT32, 0, &pos, path,
                           plen < 64 ? (size_t)plen : 63, NULL, err);
    }
    if ((int64_t)json_array_size(arr) != elems) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%.63s has %zu numbers, shape %s needs %lld", name,
                             json_array_size(arr), s, (long long)elems);
    }
    return 0;
}

int nd_json_tensor_fill(const json_t *arr, const int64_t *shape, int ndim, nd_dtype dt,
                        void *dst, const char *name, nd_error *err)
{
    if (is_nested(arr)) {
        char path[PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return fill_nested(arr, shape, ndim, dt, 0, &pos, path, plen < 64 ? (size_t)plen : 63,
                           dst, err);
    }
    return fill_flat(arr, dt, dst, name, err);
}

/* A flat parameter array of n numbers (the caller checked the length) into dst. */
static int check_param(const json_t *v, const char *name, nd_error *err)
{
    if (!json_is_array(v))
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
    json_t *root = NULL;
    const json_t *f[F_COUNT] = {0};
    json_error_t jerr;
    const char *key;
    json_t *val;
    int64_t axis = 0;
    int rc;

    rc = nd_request_begin(req, op, ND_WIRE_JSON, err);
    if (rc)
        return rc;

    root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return nd_proto_fail(err, 400, "invalid JSON at line %d, column %d: %s", jerr.line,
                             jerr.column, jerr.text);
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
    const json_t *data = f[F_DATA];
    if (!data) {
        rc = nd_proto_fail(err, 400, "data: required (an array of numbers)");
        goto fail;
    }
    if (!json_is_array(data)) {
        rc = nd_proto_fail(err, 400, "data: expected an array of numbers, got %s",
                           nd_json_type_name(data));
        goto fail;
    }
    const int nested = json_is_array(json_array_get(data, 0));
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
        const json_t *cur = data;
        while (json_is_array(cur)) {
            size_t n = json_array_size(cur);
            if (req->ndim == ND_MAX_DIMS) {
                rc = nd_proto_fail(err, 400, "data: nested deeper than %d levels", ND_MAX_DIMS);
                goto fail;
            }
            if (n == 0) {
                rc = nd_proto_fail(err, 400, "data: contains an empty array (no dimension may "
                                             "be 0)");
                goto fail;
            }
            req->shape[req->ndim++] = (int64_t)n;
            cur = json_array_get(cur, 0);
        }
    } else {
        if (json_array_size(data) == 0) {
            rc = nd_proto_fail(err, 400, "data: is empty (no dimension may be 0)");
            goto fail;
        }
        req->ndim = 1;
        req->shape[0] = (int64_t)json_array_size(data);
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
        if ((rc = check_param(f[k], fields[k].name, err)))
            goto fail;
        if ((int64_t)json_array_size(f[k]) != cols) {
            rc = nd_proto_fail(err, 400,
                               "%s has %zu numbers, expected %lld (the size of the last "
                               "dimension)",
                               fields[k].name, json_array_size(f[k]), (long long)cols);
            goto fail;
        }
    }
    if (op == ND_OP_PRELU && !req->params[0]) {
        const json_t *a = f[F_ALPHA];
        int64_t n;
        if (!a) {
            rc = nd_proto_fail(err, 400, "alpha: required for prelu (or name a registered "
                                         "parameter set with params)");
            goto fail;
        }
        if ((rc = check_param(a, "alpha", err)))
            goto fail;
        n = (int64_t)json_array_size(a);
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
    const json_t *g = op == ND_OP_RMSNORM ? f[F_WEIGHT] : f[F_GAMMA];
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
        if ((rc = fill_flat(g, req->dtype, block + off_gamma,
                            op == ND_OP_RMSNORM ? "weight" : "gamma", err)))
            goto fail;
        req->gamma = block + off_gamma;
    }
    if (f[F_BETA]) {
        if ((rc = fill_flat(f[F_BETA], req->dtype, block + off_beta, "beta", err)))
            goto fail;
        req->beta = block + off_beta;
    }
    if (req->alpha_count) {
        if ((rc = fill_flat(f[F_ALPHA], req->dtype, block + off_alpha, "alpha", err)))
            goto fail;
        req->alpha = block + off_alpha;
    }

    json_decref(root);
    return 0;

fail:
    json_decref(root);
    nd_request_free(req);
    req->x = req->gamma = req->beta = req->alpha = NULL;
    return rc;
}
