/*
 * binary.c - the raw binary request: metadata in the query string, tensors in the body.
 *
 *   POST /v1/layernorm?shape=8,4096&dtype=float16&affine=1      body: x, gamma, beta
 *   POST /v1/prelu?shape=8,64,32&alpha=channel                   body: x, alpha[64]
 *
 * Query keys: shape (required), dtype (float32), eps (norms), axis (norms: -1 or ndim-1; softmax,
 * log_softmax: [-ndim, ndim)), affine=0|1 (norms: the body carries gamma and beta / weight after x),
 * alpha=shared|channel (prelu; absent: decided by the body length, shared when both fit), outputs
 * (y,mean,rstd), params (a registered set; the body then holds x only). A key given twice or one
 * the op does not take is an error.
 *
 * Nothing is copied or converted: the request's tensor pointers point into the caller's body, so
 * they have whatever alignment the body buffer has and may be unaligned for the dtype; read them
 * with memcpy (or copy the body to aligned memory) before treating them as float arrays. The bytes
 * are taken as they are: NaN and infinity in x are not looked for here.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

enum key { K_SHAPE, K_DTYPE, K_EPS, K_AXIS, K_AFFINE, K_ALPHA, K_OUTPUTS, K_PARAMS, K_COUNT };

#define OPS_ALL ((1u << ND_OP_COUNT) - 1)
#define OP(o) (1u << (o))
#define OPS_NORM (OP(ND_OP_LAYERNORM) | OP(ND_OP_RMSNORM))

static const struct {
    const char *name;
    unsigned ops; /* the operators that accept the key */
} keys[] = {
    [K_SHAPE] = {"shape", OPS_ALL},
    [K_DTYPE] = {"dtype", OPS_ALL},
    [K_EPS] = {"eps", OPS_NORM},
    [K_AXIS] = {"axis", OPS_NORM | OP(ND_OP_SOFTMAX) | OP(ND_OP_LOG_SOFTMAX)},
    [K_AFFINE] = {"affine", OPS_NORM},
    [K_ALPHA] = {"alpha", OP(ND_OP_PRELU)},
    [K_OUTPUTS] = {"outputs", OPS_ALL},
    [K_PARAMS] = {"params", OPS_ALL},
};
_Static_assert(sizeof keys / sizeof keys[0] == K_COUNT, "keys must list every enum key");

/* A decimal integer, optionally negative, nothing else. 0, -1 (not one) or -2 (out of range). */
static int parse_int64(const char *s, int64_t *out)
{
    int neg = *s == '-';
    uint64_t v = 0;
    const char *p = s + neg;
    if (!*p)
        return -1;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (v > (UINT64_MAX - 9) / 10)
            return -2;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (v > (uint64_t)INT64_MAX + (uint64_t)neg)
        return -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

static int parse_shape(nd_request *req, const char *s, nd_error *err)
{
    char q[64];
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char dim[32];
        int64_t v;
        int rc;
        if (n == ND_MAX_DIMS)
            return nd_proto_fail(err, 400, "shape: must have 1 to %d dimensions", ND_MAX_DIMS);
        nd_proto_quote(q, sizeof q, p, len);
        if (len == 0)
            return nd_proto_fail(err, 400, "shape[%d]: empty; expected e.g. shape=8,4096", n);
        if (len >= sizeof dim)
            return nd_proto_fail(err, 400, "shape[%d]=%s: not an integer that fits 64 bits", n,
                                 q);
        memcpy(dim, p, len);
        dim[len] = '\0';
        rc = parse_int64(dim, &v);
        if (rc == -1)
            return nd_proto_fail(err, 400, "shape[%d]=%s: expected a positive integer", n, q);
        if (rc == -2)
            return nd_proto_fail(err, 400, "shape[%d]=%s: not an integer that fits 64 bits", n,
                                 q);
        if ((rc = nd_request_check_dim(n, v, err)))
            return rc;
        req->shape[n++] = v;
        if (!end)
            break;
        p = end + 1;
    }
    req->ndim = n;
    return 0;
}

/* "x 8x4096 float16 = 65536 bytes" */
static int describe(char *buf, size_t size, const char *name, const int64_t *dims, int ndim,
                    nd_dtype dt, uint64_t bytes)
{
    int n = snprintf(buf, size, "%s ", name);
    for (int i = 0; i < ndim && (size_t)n < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%s%lld", i ? "x" : "", (long long)dims[i]);
    if ((size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " %s = %llu bytes", nd_dtype_name(dt),
                      (unsigned long long)bytes);
    return n;
}

int nd_proto_parse_binary(nd_op op, const nd_kv *query, size_t nquery, const void *body,
                          size_t len, int64_t max_elems, nd_request *req, nd_error *err)
{
    const char *v[K_COUNT] = {0};
    int64_t axis = 0;
    int affine = 0;
    int alpha_mode = 0; /* 0 absent, 1 shared, 2 channel */
    char q[64];
    int rc;

    rc = nd_request_begin(req, op, ND_WIRE_BINARY, err);
    if (rc)
        return rc;

    for (size_t i = 0; i < nquery; i++) {
        const char *key = query[i].key ? query[i].key : "";
        int k = 0;
        while (k < K_COUNT && strcmp(key, keys[k].name) != 0)
            k++;
        if (k == K_COUNT) {
            char list[160];
            size_t n = 0;
            list[0] = '\0';
            for (int j = 0; j < K_COUNT; j++)
                if (keys[j].ops & OP(op))
                    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", n ? ", " : "",
                                          keys[j].name);
            nd_proto_quote(q, sizeof q, key, strlen(key));
            return nd_proto_fail(err, 400, "unknown query key \"%s\"; %s accepts %s", q,
                                 nd_op_name(op), list);
        }
        if (!(keys[k].ops & OP(op)))
            return nd_proto_fail(err, 400, "%s: not accepted by %s", key, nd_op_name(op));
        if (v[k])
            return nd_proto_fail(err, 400, "%s: given more than once", key);
        v[k] = query[i].value ? query[i].value : "";
    }

    if (v[K_DTYPE] && (rc = nd_request_set_dtype(req, v[K_DTYPE], err)))
        return rc;
    if (v[K_PARAMS] && (rc = nd_request_set_params(req, v[K_PARAMS], strlen(v[K_PARAMS]), err)))
        return rc;
    if (v[K_EPS]) {
        char *end;
        double eps;
        errno = 0;
        eps = strtod(v[K_EPS], &end);
        nd_proto_quote(q, sizeof q, v[K_EPS], strlen(v[K_EPS]));
        if (end == v[K_EPS] || *end)
            return nd_proto_fail(err, 400, "eps=%s: expected a number", q);
        if ((rc = nd_request_set_eps(req, eps, err)))
            return rc;
    }
    if (v[K_AXIS]) {
        nd_proto_quote(q, sizeof q, v[K_AXIS], strlen(v[K_AXIS]));
        if (parse_int64(v[K_AXIS], &axis) != 0)
            return nd_proto_fail(err, 400, "axis=%s: expected an integer", q);
    }
    if (v[K_AFFINE]) {
        nd_proto_quote(q, sizeof q, v[K_AFFINE], strlen(v[K_AFFINE]));
        if (strcmp(v[K_AFFINE], "0") && strcmp(v[K_AFFINE], "1"))
            return nd_proto_fail(err, 400, "affine=%s: expected 0 or 1", q);
        affine = v[K_AFFINE][0] == '1';
        if (affine && req->params[0])
            return nd_proto_fail(err, 400,
                                 "affine=1: cannot be combined with params (the parameters come "
                                 "from the registered set)");
    }
    if (v[K_ALPHA]) {
        nd_proto_quote(q, sizeof q, v[K_ALPHA], strlen(v[K_ALPHA]));
        if (!strcmp(v[K_ALPHA], "shared"))
            alpha_mode = 1;
        else if (!strcmp(v[K_ALPHA], "channel"))
            alpha_mode = 2;
        else
            return nd_proto_fail(err, 400, "alpha=%s: expected shared or channel", q);
        if (req->params[0])
            return nd_proto_fail(err, 400,
                                 "alpha: cannot be combined with params (alpha comes from the "
                                 "registered set)");
    }
    if (v[K_OUTPUTS]) {
        const char *p = v[K_OUTPUTS];
        for (;;) {
            const char *end = strchr(p, ',');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            if ((rc = nd_request_add_output(req, p, n, "outputs", err)))
                return rc;
            if (!end)
                break;
            p = end + 1;
        }
    }
    if (!v[K_SHAPE])
        return nd_proto_fail(err, 400, "shape: required query key (e.g. shape=8,4096)");
    if ((rc = parse_shape(req, v[K_SHAPE], err)))
        return rc;
    if ((rc = nd_request_finish(req, v[K_AXIS] != NULL, axis, max_elems, err)))
        return rc;

    /* ---- the body: x, then the parameters ---- */
    const uint64_t esize = nd_dtype_size(req->dtype);
    const uint64_t xbytes = (uint64_t)req->elems * esize; /* checked by nd_request_finish */
    const uint64_t pbytes = (uint64_t)req->mid * esize;   /* mid <= elems */
    const char *names[2] = {0};
    uint64_t sizes[2] = {0};
    int64_t counts[2] = {0};
    int nparam = 0;
    if (nd_op_is_norm(op) && affine) {
        names[nparam] = op == ND_OP_LAYERNORM ? "gamma" : "weight";
        counts[nparam] = req->mid;
        sizes[nparam++] = pbytes;
        if (op == ND_OP_LAYERNORM) {
            names[nparam] = "beta";
            counts[nparam] = req->mid;
            sizes[nparam++] = pbytes;
        }
    } else if (op == ND_OP_PRELU && !req->params[0]) {
        int64_t count;
        if (alpha_mode == 1)
            count = 1;
        else if (alpha_mode == 2)
            count = req->mid;
        else if ((uint64_t)len == xbytes + esize)
            count = 1; /* also when channels == 1: both readings agree */
        else if ((uint64_t)len == xbytes + pbytes)
            count = req->mid;
        else {
            char xd[128];
            describe(xd, sizeof xd, "x", req->shape, req->ndim, req->dtype, xbytes);
            if (req->mid == 1)
                return nd_proto_fail(err, 400, "body has %zu bytes, expected %llu (%s + alpha "
                                               "1 %s = %llu bytes)",
                                     len, (unsigned long long)(xbytes + esize), xd,
                                     nd_dtype_name(req->dtype), (unsigned long long)esize);
            return nd_proto_fail(err, 400,
                                 "body has %zu bytes, expected %llu (%s + alpha 1 %s, shared) or "
                                 "%llu (+ alpha %lld %s, one per channel)",
                                 len, (unsigned long long)(xbytes + esize), xd,
                                 nd_dtype_name(req->dtype),
                                 (unsigned long long)(xbytes + pbytes), (long long)req->mid,
                                 nd_dtype_name(req->dtype));
        }
        names[nparam] = "alpha";
        counts[nparam] = count;
        sizes[nparam++] = (uint64_t)count * esize;
        req->alpha_count = count;
    }

    uint64_t want = xbytes;
    int over = 0;
    for (int i = 0; i < nparam; i++)
        over |= __builtin_add_overflow(want, sizes[i], &want);
    if (over || (uint64_t)len != want) {
        char msg[384];
        int n = describe(msg, sizeof msg, "x", req->shape, req->ndim, req->dtype, xbytes);
        for (int i = 0; i < nparam && (size_t)n < sizeof msg; i++) {
            n += snprintf(msg + n, sizeof msg - (size_t)n, " + ");
            if ((size_t)n < sizeof msg)
                n += describe(msg + n, sizeof msg - (size_t)n, names[i], &counts[i], 1,
                              req->dtype, sizes[i]);
        }
        if (over)
            return nd_proto_fail(err, 400, "body has %zu bytes; the expected size overflows "
                                           "64 bits (%s)",
                                 len, msg);
        return nd_proto_fail(err, 400, "body has %zu bytes, expected %llu (%s)", len,
                             (unsigned long long)want, msg);
    }

    const char *b = body;
    req->x = b;
    if (nparam && op != ND_OP_PRELU) {
        req->gamma = b + xbytes;
        if (nparam == 2)
            req->beta = b + xbytes + pbytes;
    } else if (nparam) {
        req->alpha = b + xbytes;
    }
    return 0;
}
