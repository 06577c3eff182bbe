/*
 * it_server.c - integration tests: build/normd started on a free port, driven with libcurl.
 *
 * Every op x dtype over JSON and raw binary is checked against the float64 reference in
 * tests/util; every class of bad input gets its 4xx and a message naming the problem, and the
 * daemon answers a valid request right after; concurrent requests are served in fewer batches than
 * requests, each with its own answer, and softmax over long middle-axis slabs of several shapes
 * at once (separate batches, several streams) answers each right; overload answers 503 with
 * Retry-After; SIGTERM answers what was accepted and exits 0. The backend comes from
 * $NORMD_BACKEND (default cpu).
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/nd_dtype.h"
#include "../proto/request.h" /* nd_store_f64: the parsers' rounding */
#include "util/nd_http.h"
#include "util/nd_testutil.h"

static const nd_dtype dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};

/* ---- a random operator case and its float64 reference ---- */

typedef struct op_case {
    nd_op op;
    nd_dtype dt;
    int ndim;
    int64_t shape[4];
    int axis;            /* softmax: the axis; others: -1 */
    int64_t outer, mid, inner, n;
    void *x;             /* n elements of dt */
    double *xd, *ref;
    void *p0, *p1;       /* gamma/weight/alpha, beta */
    double *p0d, *p1d;
    int64_t pcount;      /* elements of p0 (and p1) */
    double *mean, *rstd; /* layernorm/rmsnorm references */
} op_case;

static void *xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    cr_assert_not_null(p);
    return p;
}

/* A case of the shape in c->ndim, c->shape: data and parameters (present) from rng, and the
 * float64 reference. axis < 0 counts from the end; alpha_shared picks prelu's form. */
static void case_fill(op_case *c, nd_op op, nd_dtype dt, uint64_t *rng, int axis, int alpha_shared)
{
    c->op = op;
    c->dt = dt;
    c->axis = axis < 0 ? c->ndim + axis : axis % c->ndim;
    c->n = 1;
    for (int i = 0; i < c->ndim; i++)
        c->n *= c->shape[i];
    size_t esz = nd_dtype_size(dt);
    c->x = xalloc((size_t)c->n * esz);
    c->xd = xalloc((size_t)c->n * sizeof(double));
    c->ref = xalloc((size_t)c->n * sizeof(double));
    nd_fill_random(dt, c->x, c->n, 0.5, 2.0, rng, c->xd);
    if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
        c->outer = c->inner = 1;
        for (int i = 0; i < c->axis; i++)
            c->outer *= c->shape[i];
        for (int i = c->axis + 1; i < c->ndim; i++)
            c->inner *= c->shape[i];
        c->mid = c->shape[c->axis];
        nd_ref_softmax(c->xd, c->outer, c->mid, c->inner, op == ND_OP_LOG_SOFTMAX, c->ref);
        return;
    }
    if (op == ND_OP_PRELU) {
        c->outer = c->shape[0];
        c->mid = c->shape[1];
        c->inner = c->n / (c->outer * c->mid);
        c->pcount = alpha_shared ? 1 : c->mid;
    } else {
        c->mid = c->shape[c->ndim - 1];
        c->outer = c->n / c->mid;
        c->inner = 1;
        c->pcount = c->mid;
    }
    c->p0 = xalloc((size_t)c->pcount * esz);
    c->p0d = xalloc((size_t)c->pcount * sizeof(double));
    nd_fill_random(dt, c->p0, c->pcount, op == ND_OP_PRELU ? 0.2 : 1.0, 0.3, rng, c->p0d);
    if (op == ND_OP_PRELU) {
        nd_ref_prelu(c->xd, c->outer, c->mid, c->inner, c->p0d, c->pcount, c->ref);
        return;
    }
    c->rstd = xalloc((size_t)c->outer * sizeof(double));
    if (op == ND_OP_LAYERNORM) {
        c->p1 = xalloc((size_t)c->pcount * esz);
        c->p1d = xalloc((size_t)c->pcount * sizeof(double));
        nd_fill_random(dt, c->p1, c->pcount, 0.0, 0.5, rng, c->p1d);
        c->mean = xalloc((size_t)c->outer * sizeof(double));
        nd_ref_layernorm(c->xd, c->outer, c->mid, c->p0d, c->p1d, 1e-5, c->ref, c->mean,
                         c->rstd);
    } else
        nd_ref_rmsnorm(c->xd, c->outer, c->mid, c->p0d, 1e-6, c->ref, c->rstd);
}

/* A random case: shape of rank 2 or 3 drawn from srng, data and parameters from rng. axis < 0:
 * the last. */
static void case_make_from(op_case *c, nd_op op, nd_dtype dt, uint64_t *srng, uint64_t *rng,
                           int axis, int alpha_shared)
{
    memset(c, 0, sizeof *c);
    c->ndim = 2 + (int)(nd_rand_u64(srng) % 2);
    for (int i = 0; i < c->ndim; i++)
        c->shape[i] = 1 + (int64_t)(nd_rand_u64(srng) % 9);
    c->shape[c->ndim - 1] += 3; /* rows a little wider than the rest */
    case_fill(c, op, dt, rng, axis < 0 ? -1 : axis, alpha_shared);
}

static void case_make(op_case *c, nd_op op, nd_dtype dt, uint64_t *rng, int axis,
                      int alpha_shared)
{
    case_make_from(c, op, dt, rng, rng, axis, alpha_shared);
}

static void case_free(op_case *c)
{
    free(c->x);
    free(c->xd);
    free(c->ref);
    free(c->p0);
    free(c->p1);
    free(c->p0d);
    free(c->p1d);
    free(c->mean);
    free(c->rstd);
}

/* ---- JSON requests ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void sb_array(sbuf *b, const char *name, const double *v, int64_t n)
{
    sb_printf(b, ",\"%s\":[", name);
    for (int64_t i = 0; i < n; i++)
        sb_printf(b, "%s%.17g", i ? "," : "", v[i]);
    sb_printf(b, "]");
}

static char *case_json(const op_case *c, int want_stats)
{
    sbuf b = {0};
    sb_printf(&b, "{\"dtype\":\"%s\",\"shape\":[", nd_dtype_name(c->dt));
    for (int i = 0; i < c->ndim; i++)
        sb_printf(&b, "%s%lld", i ? "," : "", (long long)c->shape[i]);
    sb_printf(&b, "]");
    sb_array(&b, "data", c->xd, c->n);
    if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX)
        sb_printf(&b, ",\"axis\":%d", c->axis - (c->axis % 2 ? c->ndim : 0)); /* negative too */
    if (c->op == ND_OP_LAYERNORM) {
        sb_array(&b, "gamma", c->p0d, c->pcount);
        sb_array(&b, "beta", c->p1d, c->pcount);
    }
    if (c->op == ND_OP_RMSNORM)
        sb_array(&b, "weight", c->p0d, c->pcount);
    if (c->op == ND_OP_PRELU)
        sb_array(&b, "alpha", c->p0d, c->pcount);
    if (want_stats)
        sb_printf(&b, c->op == ND_OP_LAYERNORM ? ",\"outputs\":[\"y\",\"mean\",\"rstd\"]"
                                               : ",\"outputs\":[\"y\",\"rstd\"]");
    sb_printf(&b, "}");
    return b.p;
}

/* A JSON array of n numbers read as dt, each strtod's value rounded once (what a client's reader
 * and the parsers' nd_store_f64 do), into out. */
static void json_as_dtype(const json_t *arr, nd_dtype dt, void *out, int64_t n, const char *what)
{
    cr_assert(json_is_array(arr), "%s is not an array", what);
    cr_assert_eq((int64_t)json_array_size(arr), n, "%s has %zu values, expected %lld", what,
                 json_array_size(arr), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, (size_t)i);
        cr_assert(json_is_number(v), "%s[%lld] is not a number", what, (long long)i);
        cr_assert_eq(nd_store_f64(dt, out, i, json_number_value(v)), 0, "%s[%lld] = %g",
                     what, (long long)i, json_number_value(v));
    }
}

static void check_json_answer(const op_case *c, const nd_resp *r, int want_stats)
{
    cr_assert_eq(r->code, 200, "%s %s: HTTP %ld: %s", nd_op_name(c->op), nd_dtype_name(c->dt),
                 r->code, r->body);
    json_error_t jerr;
    json_t *root = json_loads(r->body, 0, &jerr);
    cr_assert_not_null(root, "answer is not JSON: %s", jerr.text);
    cr_assert_str_eq(json_string_value(json_object_get(root, "dtype")), nd_dtype_name(c->dt));
    const json_t *shape = json_object_get(root, "shape");
    cr_assert_eq((int)json_array_size(shape), c->ndim);
    for (int i = 0; i < c->ndim; i++)
        cr_assert_eq(json_integer_value(json_array_get(shape, (size_t)i)), c->shape[i]);
    void *y = xalloc((size_t)c->n * nd_dtype_size(c->dt));
    json_as_dtype(json_object_get(root, "data"), c->dt, y, c->n, "data");
    char msg[256];
    int64_t bad = nd_compare(c->dt, y, c->ref, c->n, "y", msg, sizeof msg);
    cr_assert_eq(bad, 0, "%s %s json: %lld mismatches: %s", nd_op_name(c->op),
                 nd_dtype_name(c->dt), (long long)bad, msg);
    if (want_stats) {
        float *s = xalloc((size_t)c->outer * sizeof(float));
        json_as_dtype(json_object_get(root, "rstd"), ND_FLOAT32, s, c->outer, "rstd");
        bad = nd_compare_f32(s, c->rstd, c->outer, "rstd", msg, sizeof msg);
        cr_assert_eq(bad, 0, "%s", msg);
        if (c->op == ND_OP_LAYERNORM) {
            json_as_dtype(json_object_get(root, "mean"), ND_FLOAT32, s, c->outer, "mean");
            bad = nd_compare_f32(s, c->mean, c->outer, "mean", msg, sizeof msg);
            cr_assert_eq(bad, 0, "%s", msg);
        }
        free(s);
    }
    free(y);
    json_decref(root);
}

/* ---- raw binary requests ---- */

static char *case_binary_url(const op_case *c, const nd_daemon *d, int want_stats)
{
    sbuf b = {0};
    sb_printf(&b, "%s/v1/%s?dtype=%s&shape=", d->base, nd_op_name(c->op), nd_dtype_name(c->dt));
    for (int i = 0; i < c->ndim; i++)
        sb_printf(&b, "%s%lld", i ? "," : "", (long long)c->shape[i]);
    if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX)
        sb_printf(&b, "&axis=%d", c->axis);
    if (c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM)
        sb_printf(&b, "&affine=1");
    if (c->op == ND_OP_PRELU)
        sb_printf(&b, "&alpha=%s", c->pcount == 1 ? "shared" : "channel");
    if (want_stats)
        sb_printf(&b, c->op == ND_OP_LAYERNORM ? "&outputs=y,mean,rstd" : "&outputs=y,rstd");
    return b.p;
}

static void *case_binary_body(const op_case *c, size_t *len)
{
    size_t esz = nd_dtype_size(c->dt), xb = (size_t)c->n * esz, pb = (size_t)c->pcount * esz;
    size_t total = xb + (c->p0 ? pb : 0) + (c->p1 ? pb : 0);
    char *body = xalloc(total);
    memcpy(body, c->x, xb);
    if (c->p0)
        memcpy(body + xb, c->p0, pb);
    if (c->p1)
        memcpy(body + xb + pb, c->p1, pb);
    *len = total;
    return body;
}

static void check_binary_answer(const op_case *c, const nd_resp *r, int want_stats)
{
    cr_assert_eq(r->code, 200, "%s %s binary: HTTP %ld: %s", nd_op_name(c->op),
                 nd_dtype_name(c->dt), r->code, r->body);
    size_t esz = nd_dtype_size(c->dt), yb = (size_t)c->n * esz;
    size_t sb = want_stats ? (size_t)c->outer * sizeof(float) : 0;
    size_t nstats = want_stats ? (c->op == ND_OP_LAYERNORM ? 2 : 1) : 0;
    cr_assert_eq(r->len, yb + nstats * sb, "answer has %zu bytes, expected %zu", r->len,
                 yb + nstats * sb);
    cr_assert_str_eq(r->content_type, "application/octet-stream");
    cr_assert_str_eq(r->dtype, nd_dtype_name(c->dt));
    char shape[128] = "";
    for (int i = 0; i < c->ndim; i++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", i ? "," : "",
                 (long long)c->shape[i]);
    cr_assert_str_eq(r->shape, shape);
    char msg[256];
    int64_t bad = nd_compare(c->dt, r->body, c->ref, c->n, "y", msg, sizeof msg);
    cr_assert_eq(bad, 0, "%s %s binary: %lld mismatches: %s", nd_op_name(c->op),
                 nd_dtype_name(c->dt), (long long)bad, msg);
    if (want_stats) {
        float *s = xalloc(sb);
        const char *p = r->body + yb;
        if (c->op == ND_OP_LAYERNORM) {
            cr_assert_str_eq(r->outputs, "y,mean,rstd");
            memcpy(s, p, sb);
            bad = nd_compare_f32(s, c->mean, c->outer, "mean", msg, sizeof msg);
            cr_assert_eq(bad, 0, "%s", msg);
            p += sb;
        }
        memcpy(s, p, sb);
        bad = nd_compare_f32(s, c->rstd, c->outer, "rstd", msg, sizeof msg);
        cr_assert_eq(bad, 0, "%s", msg);
        free(s);
    }
}

/* ---- fixtures ---- */

static nd_daemon daemon_;

static void start(const char *const *extra)
{
    cr_assert_eq(nd_daemon_start(&daemon_, extra), 0, "normd did not start");
}

static void start_default(void)
{
    start(NULL);
}

static void stop_expect_clean(void)
{
    if (daemon_.pid > 0)
        cr_assert_eq(nd_daemon_stop(&daemon_, 20), 0, "normd did not exit 0 on SIGTERM");
}

static nd_resp post(const char *op, const char *ctype, const char *body)
{
    char url[256];
    snprintf(url, sizeof url, "%s/v1/%s", daemon_.base, op);
    nd_resp r;
    cr_assert_eq(nd_http("POST", url, ctype, body, body ? strlen(body) : 0, &r), 0,
                 "transfer failed");
    return r;
}

static void expect_valid_request_works(void)
{
    nd_resp r = post("softmax", "application/json", "{\"shape\":[1,2],\"data\":[0,0]}");
    cr_assert_eq(r.code, 200, "a valid request after a bad one failed: %ld %s", r.code, r.body);
    cr_assert(strstr(r.body, "0.5"), "softmax([0,0]) answered %s", r.body);
    nd_resp_free(&r);
}

TestSuite(server, .init = start_default, .fini = stop_expect_clean, .timeout = 120);
/* Tests that start the daemon with options of their own. */
TestSuite(configured, .timeout = 120);

/* ---- every op and dtype ---- */

Test(server, every_op_and_dtype_over_json)
{
    uint64_t rng = 0x1234;
    for (int op = 0; op < ND_OP_COUNT; op++)
        for (int d = 0; d < 3; d++)
            for (int rep = 0; rep < 3; rep++) {
                op_case c;
                case_make(&c, (nd_op)op, dtypes[d], &rng, (int)(nd_rand_u64(&rng) % 3), rep == 1);
                char *json = case_json(&c, 0);
                nd_resp r = post(nd_op_name((nd_op)op), "application/json", json);
                check_json_answer(&c, &r, 0);
                nd_resp_free(&r);
                free(json);
                case_free(&c);
            }
}

Test(server, every_op_and_dtype_over_raw_binary)
{
    uint64_t rng = 0x5678;
    for (int op = 0; op < ND_OP_COUNT; op++)
        for (int d = 0; d < 3; d++)
            for (int rep = 0; rep < 3; rep++) {
                op_case c;
                case_make(&c, (nd_op)op, dtypes[d], &rng, (int)(nd_rand_u64(&rng) % 3), rep == 1);
                char *url = case_binary_url(&c, &daemon_, 0);
                size_t len;
                void *body = case_binary_body(&c, &len);
                nd_resp r;
                /* alternate the explicit type and curl's default, which must work too */
                cr_assert_eq(nd_http("POST", url, rep == 2 ? "application/x-www-form-urlencoded"
                                                           : "application/octet-stream",
                                     body, len, &r),
                             0);
                check_binary_answer(&c, &r, 0);
                nd_resp_free(&r);
                free(body);
                free(url);
                case_free(&c);
            }
}

/* The same shapes again and again, with fresh data and parameters each time, so that one slot
 * runs the same batch shape over and over in the same staging: each batch must carry its own
 * inputs and give each request its own outputs (a backend that cached a shape's work, or left a
 * previous batch's results in place, would answer with stale values). */
Test(server, repeated_shapes_get_answers_of_their_own_data)
{
    for (int op = 0; op < ND_OP_COUNT; op++)
        for (int d = 0; d < 3; d++)
            for (int rep = 0; rep < 6; rep++) {
                uint64_t srng = 0x5eed + (uint64_t)(op * 3 + d), rng = 0xda7a + (uint64_t)rep;
                const int stats = (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) && (rep & 1);
                op_case c;
                case_make_from(&c, (nd_op)op, dtypes[d], &srng, &rng, -1, 0);
                char *url = case_binary_url(&c, &daemon_, stats);
                size_t len;
                void *body = case_binary_body(&c, &len);
                nd_resp r;
                cr_assert_eq(nd_http("POST", url, "application/octet-stream", body, len, &r), 0);
                check_binary_answer(&c, &r, stats);
                nd_resp_free(&r);
                free(body);
                free(url);
                case_free(&c);
            }
}

Test(server, norm_statistics_over_json_and_binary)
{
    uint64_t rng = 0x9abc;
    nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM};
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 3; d++) {
            op_case c;
            case_make(&c, ops[k], dtypes[d], &rng, -1, 0);
            char *json = case_json(&c, 1);
            nd_resp r = post(nd_op_name(ops[k]), "application/json", json);
            check_json_answer(&c, &r, 1);
            nd_resp_free(&r);
            free(json);
            char *url = case_binary_url(&c, &daemon_, 1);
            size_t len;
            void *body = case_binary_body(&c, &len);
            cr_assert_eq(nd_http("POST", url, "application/octet-stream", body, len, &r), 0);
            check_binary_answer(&c, &r, 1);
            nd_resp_free(&r);
            free(body);
            free(url);
            case_free(&c);
        }
}

Test(server, layernorm_of_rows_with_mean_1e4)
{
    uint64_t rng = 0xdef0;
    for (int d = 0; d < 3; d++) {
        op_case c;
        case_make(&c, ND_OP_LAYERNORM, dtypes[d], &rng, -1, 0);
        nd_fill_random(c.dt, c.x, c.n, 1e4, 1.0, &rng, c.xd);
        nd_ref_layernorm(c.xd, c.outer, c.mid, c.p0d, c.p1d, 1e-5, c.ref, c.mean, c.rstd);
        char *json = case_json(&c, 1);
        nd_resp r = post("layernorm", "application/json", json);
        check_json_answer(&c, &r, 1);
        nd_resp_free(&r);
        free(json);
        case_free(&c);
    }
}

/* ---- bad input ---- */

typedef struct bad_case {
    const char *method, *path, *ctype, *body;
    long code;
    const char *needle; /* must appear in the error message */
} bad_case;

static const bad_case bad_cases[] = {
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[2,", 400, "JSON"},
    {"POST", "/v1/layernorm", "application/json", "[1,2,3]", 400, "object"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":\"2,2\",\"data\":[1,2,3,4]}", 400,
     "shape"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[2,2],\"data\":[1,2,3]}", 400,
     "data"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[2,0],\"data\":[]}", 400,
     "shape[1]"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[-2,2],\"data\":[1,2,3,4]}", 400,
     "shape[0]"},
    {"POST", "/v1/layernorm", "application/json",
     "{\"shape\":[4294967296,4294967296,4294967296],\"data\":[1]}", 0, "shape"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[1,2],\"data\":[1,\"x\"]}", 400,
     "data[1]"},
    {"POST", "/v1/layernorm", "application/json",
     "{\"shape\":[1,2],\"data\":[1,2],\"gamma\":[1,2,3]}", 400, "gamma"},
    {"POST", "/v1/rmsnorm", "application/json",
     "{\"shape\":[1,2],\"data\":[1,2],\"weight\":[1]}", 400, "weight"},
    {"POST", "/v1/prelu", "application/json", "{\"shape\":[1,3,2],\"data\":[1,2,3,4,5,6],"
                                              "\"alpha\":[1,2]}", 400, "alpha"},
    {"POST", "/v1/softmax", "application/json", "{\"shape\":[1,2],\"data\":[1,2],\"axis\":2}",
     400, "axis"},
    {"POST", "/v1/softmax", "application/json", "{\"shape\":[1,2],\"data\":[1,2],\"axis\":-3}",
     400, "axis"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[1,2],\"data\":[1,2],\"eps\":\"a\"}",
     400, "eps"},
    {"POST", "/v1/layernorm", "application/json", "{\"shape\":[1,2],\"data\":[1,2],\"gama\":[1,1]}",
     400, "gama"},
    {"POST", "/v1/layernorm", "application/json",
     "{\"shape\":[1,2],\"dtype\":\"float64\",\"data\":[1,2]}", 400, "dtype"},
    {"POST", "/v1/layernorm", "application/json",
     "{\"shape\":[1,2],\"dtype\":\"float16\",\"data\":[1,1e6]}", 400, "data[1]"},
    {"POST", "/v1/layernorm?shape=2,2&dtype=float32", "application/octet-stream", "abc", 400,
     "bytes"},
    {"POST", "/v1/layernorm?shape=2,2&colour=red", "application/octet-stream", "0123456789abcdef",
     400, "colour"},
    {"POST", "/v1/layernorm?shape=2,x", "application/octet-stream", "0123456789abcdef", 400,
     "shape"},
    {"POST", "/v1/nosuchop", "application/json", "{}", 404, "nosuchop"},
    {"GET", "/v1/layernorm", NULL, NULL, 405, "GET"},
    {"DELETE", "/metrics", NULL, NULL, 405, "DELETE"},
    {"POST", "/v1/layernorm", "text/plain", "{\"shape\":[1,2],\"data\":[1,2]}", 415,
     "text/plain"},
    {"POST", "/v1/layernorm", "application/json",
     "{\"shape\":[1,2],\"data\":[1,2],\"params\":\"nope\"}", 404, "nope"},
};

Test(server, bad_input_gets_a_clear_4xx_and_the_daemon_carries_on)
{
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *b = &bad_cases[i];
        char url[512];
        snprintf(url, sizeof url, "%s%s", daemon_.base, b->path);
        nd_resp r;
        cr_assert_eq(nd_http(b->method, url, b->ctype, b->body, b->body ? strlen(b->body) : 0, &r),
                     0);
        if (b->code)
            cr_assert_eq(r.code, b->code, "case %zu (%s %s %s): HTTP %ld, expected %ld: %s", i,
                         b->method, b->path, b->body ? b->body : "", r.code, b->code, r.body);
        else /* overflow: too large (413) or invalid (400), never accepted */
            cr_assert(r.code == 400 || r.code == 413, "case %zu: HTTP %ld: %s", i, r.code, r.body);
        json_t *root = json_loads(r.body, 0, NULL);
        cr_assert_not_null(root, "case %zu: error body is not JSON: %s", i, r.body);
        const char *msg = json_string_value(json_object_get(root, "error"));
        cr_assert_not_null(msg, "case %zu: no \"error\" field: %s", i, r.body);
        cr_assert(strstr(msg, b->needle), "case %zu: message \"%s\" does not mention \"%s\"", i,
                  msg, b->needle);
        if (r.code == 405)
            cr_assert(r.allow[0], "405 without an Allow header");
        json_decref(root);
        nd_resp_free(&r);
        expect_valid_request_works();
    }
}

static void start_small_body(void)
{
    static const char *const args[] = {"--max-body-bytes", "1000", NULL};
    start(args);
}

Test(configured, body_over_the_limit_is_413, .init = start_small_body, .fini = stop_expect_clean)
{
    size_t n = 4000;
    char *body = xalloc(n);
    char url[256];
    snprintf(url, sizeof url, "%s/v1/softmax?shape=1,1000", daemon_.base);
    nd_resp r;
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", body, n, &r), 0);
    cr_assert_eq(r.code, 413, "HTTP %ld: %s", r.code, r.body);
    cr_assert(strstr(r.body, "limit"), "%s", r.body);
    nd_resp_free(&r);
    free(body);
    expect_valid_request_works();
}

/* ---- many clients at once ---- */

typedef struct flight {
    op_case c;
    char *url;
    void *body;
    size_t len;
    nd_resp r;
} flight;

/* Sends every flight at once with one curl multi handle; after_ms > 0 calls hook once that many
 * milliseconds after the start. */
static void fly(flight *f, int n, int after_ms, void (*hook)(void))
{
    CURLM *m = curl_multi_init();
    CURL **h = xalloc(sizeof *h * (size_t)n);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/octet-stream");
    hdr = curl_slist_append(hdr, "Expect:");
    for (int i = 0; i < n; i++) {
        h[i] = curl_easy_init();
        memset(&f[i].r, 0, sizeof f[i].r);
        curl_easy_setopt(h[i], CURLOPT_URL, f[i].url);
        curl_easy_setopt(h[i], CURLOPT_POSTFIELDS, f[i].body);
        curl_easy_setopt(h[i], CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f[i].len);
        curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, nd_resp_body_cb);
        curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &f[i].r);
        curl_easy_setopt(h[i], CURLOPT_HEADERFUNCTION, nd_resp_header_cb);
        curl_easy_setopt(h[i], CURLOPT_HEADERDATA, &f[i].r);
        curl_easy_setopt(h[i], CURLOPT_TIMEOUT, 60L);
        curl_multi_add_handle(m, h[i]);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int running = 1, hooked = 0;
    while (running) {
        curl_multi_perform(m, &running);
        if (running)
            curl_multi_poll(m, NULL, 0, 10, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t);
        double ms = (double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) / 1e6;
        if (hook && !hooked && ms >= after_ms) {
            hook();
            hooked = 1;
        }
    }
    for (int i = 0; i < n; i++) {
        curl_easy_getinfo(h[i], CURLINFO_RESPONSE_CODE, &f[i].r.code);
        curl_multi_remove_handle(m, h[i]);
        curl_easy_cleanup(h[i]);
    }
    curl_slist_free_all(hdr);
    curl_multi_cleanup(m);
    free(h);
}

static flight *make_flights(int n, nd_op op, nd_dtype dt, uint64_t seed)
{
    flight *f = xalloc(sizeof *f * (size_t)n);
    uint64_t rng = seed;
    /* one shape for all, so they share a batch key; different data for each */
    op_case first;
    case_make(&first, op, dt, &rng, -1, 0);
    for (int i = 0; i < n; i++) {
        op_case *c = &f[i].c;
        case_make(c, op, dt, &rng, -1, 0);
        /* same view and parameters as the first, so all share one key; own data */
        case_free(c);
        *c = first;
        c->x = xalloc((size_t)c->n * nd_dtype_size(dt));
        c->xd = xalloc((size_t)c->n * sizeof(double));
        c->ref = xalloc((size_t)c->n * sizeof(double));
        c->rstd = c->mean = NULL;
        c->p0 = xalloc((size_t)c->pcount * nd_dtype_size(dt));
        memcpy(c->p0, first.p0, (size_t)c->pcount * nd_dtype_size(dt));
        c->p0d = xalloc((size_t)c->pcount * sizeof(double));
        memcpy(c->p0d, first.p0d, (size_t)c->pcount * sizeof(double));
        c->p1 = c->p1d = NULL;
        if (first.p1) {
            c->p1 = xalloc((size_t)c->pcount * nd_dtype_size(dt));
            memcpy(c->p1, first.p1, (size_t)c->pcount * nd_dtype_size(dt));
            c->p1d = xalloc((size_t)c->pcount * sizeof(double));
            memcpy(c->p1d, first.p1d, (size_t)c->pcount * sizeof(double));
        }
        c->rstd = xalloc((size_t)c->outer * sizeof(double));
        c->mean = xalloc((size_t)c->outer * sizeof(double));
        nd_fill_random(dt, c->x, c->n, (double)i, 1.0 + i % 5, &rng, c->xd);
        nd_ref_layernorm(c->xd, c->outer, c->mid, c->p0d, c->p1d, 1e-5, c->ref, c->mean,
                         c->rstd);
        f[i].url = case_binary_url(c, &daemon_, 0);
        f[i].body = case_binary_body(c, &f[i].len);
    }
    case_free(&first);
    return f;
}

static void free_flights(flight *f, int n)
{
    for (int i = 0; i < n; i++) {
        case_free(&f[i].c);
        free(f[i].url);
        free(f[i].body);
        nd_resp_free(&f[i].r);
    }
    free(f);
}

static double metric(const char *name, const char *labels)
{
    char url[256];
    snprintf(url, sizeof url, "%s/metrics", daemon_.base);
    nd_resp r;
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    double v = nd_metric_value(r.body, name, labels);
    nd_resp_free(&r);
    return v;
}

static void start_batching(void)
{
    static const char *const args[] = {"--max-delay-us", "50000", NULL};
    start(args);
}

Test(configured, concurrent_requests_share_batches_and_get_their_own_answers,
     .init = start_batching, .fini = stop_expect_clean)
{
    const int n = 64;
    flight *f = make_flights(n, ND_OP_LAYERNORM, ND_FLOAT32, 42);
    fly(f, n, 0, NULL);
    for (int i = 0; i < n; i++)
        check_binary_answer(&f[i].c, &f[i].r, 0);
    double batches = metric("normd_batches_total", "op=\"layernorm\"");
    double requests = metric("normd_requests_total", "op=\"layernorm\",code=\"200\"");
    cr_assert_eq(requests, n, "metrics count %g answered requests, sent %d", requests, n);
    cr_assert(batches >= 1 && batches < n, "%d requests ran in %g batches", n, batches);
    cr_log_info("concurrency: %d requests in %g batches\n", n, batches);
    fprintf(stderr, "concurrency: %d requests served in %g batches\n", n, batches);
    free_flights(f, n);
}

/* Softmax over a middle axis of long columns and a short inner extent (slabs), requests of
 * different shapes in flight at once, so they run as separate batches on several of the
 * daemon's streams, with row-op requests between them. On a GPU with cooperative launch, slabs
 * like these take the resident slab kernel (softmax_axis_slab_res: one block per SM, every block
 * waiting on its slab's others, so two such grids cannot share the device; gpu_axis's plan check
 * names the path for shapes of each kind), and (1,99999,24), whose inner rows are 3 packs, the
 * two-pass one. Every answer must arrive within the client's timeout and match its float64
 * reference. Two requests share a shape and may share a batch. */
Test(server, long_axis_slabs_and_rows_at_once_each_get_their_own_answer, .timeout = 240)
{
    static const struct {
        nd_op op;
        nd_dtype dt;
        int64_t shape[3];
    } kinds[] = {
        {ND_OP_SOFTMAX, ND_FLOAT32, {1, 70000, 8}},
        {ND_OP_SOFTMAX, ND_FLOAT32, {1, 70000, 8}},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, {1, 70000, 8}},
        {ND_OP_SOFTMAX, ND_BFLOAT16, {2, 32768, 64}},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT32, {8, 30001, 16}},
        {ND_OP_SOFTMAX, ND_FLOAT16, {2, 50000, 32}},
        {ND_OP_LOG_SOFTMAX, ND_BFLOAT16, {1, 99999, 24}},
        {ND_OP_LAYERNORM, ND_FLOAT16, {64, 4096, 0}},
        {ND_OP_RMSNORM, ND_BFLOAT16, {3, 70000, 0}},
        {ND_OP_SOFTMAX, ND_FLOAT32, {256, 1000, 0}},
    };
    const int n = (int)(sizeof kinds / sizeof kinds[0]);
    flight *f = xalloc(sizeof *f * (size_t)n);
    uint64_t rng = 0x51ab;
    for (int i = 0; i < n; i++) {
        op_case *c = &f[i].c;
        memset(c, 0, sizeof *c);
        c->ndim = kinds[i].shape[2] ? 3 : 2;
        memcpy(c->shape, kinds[i].shape, sizeof kinds[i].shape);
        case_fill(c, kinds[i].op, kinds[i].dt, &rng, c->ndim == 3 ? 1 : -1, 0);
        f[i].url = case_binary_url(c, &daemon_, 0);
        f[i].body = case_binary_body(c, &f[i].len);
    }
    fly(f, n, 0, NULL);
    for (int i = 0; i < n; i++)
        check_binary_answer(&f[i].c, &f[i].r, 0);
    free_flights(f, n);
    expect_valid_request_works();
}

static void start_tiny_queue(void)
{
    static const char *const args[] = {"--queue-limit", "4", "--max-delay-us", "300000", NULL};
    start(args);
}

Test(configured, overload_answers_503_with_retry_after, .init = start_tiny_queue,
     .fini = stop_expect_clean)
{
    const int n = 24;
    flight *f = make_flights(n, ND_OP_LAYERNORM, ND_FLOAT32, 7);
    fly(f, n, 0, NULL);
    int ok = 0, busy = 0;
    for (int i = 0; i < n; i++) {
        if (f[i].r.code == 200) {
            check_binary_answer(&f[i].c, &f[i].r, 0);
            ok++;
        } else {
            cr_assert_eq(f[i].r.code, 503, "HTTP %ld: %s", f[i].r.code, f[i].r.body);
            cr_assert(strstr(f[i].r.body, "queue full"), "%s", f[i].r.body);
            cr_assert_str_eq(f[i].r.retry_after, "1", "503 without Retry-After");
            busy++;
        }
    }
    cr_assert(ok >= 4 && busy >= 1, "%d answered, %d turned away", ok, busy);
    free_flights(f, n);
}

static void send_sigterm(void)
{
    kill(daemon_.pid, SIGTERM);
}

static void start_slow_batches(void)
{
    static const char *const args[] = {"--max-delay-us", "2000000", NULL};
    start(args);
}

/* The test reaps its daemon itself; one an assertion left running is ended here, so that it does
 * not outlive the test run holding its output open. */
static void reap_leftover(void)
{
    if (daemon_.pid > 0)
        nd_daemon_stop(&daemon_, 5);
}

Test(configured, sigterm_answers_everything_accepted_then_exits_0, .init = start_slow_batches,
     .fini = reap_leftover)
{
    const int n = 16;
    flight *f = make_flights(n, ND_OP_LAYERNORM, ND_FLOAT32, 99);
    /* The batches wait 2 s for company; SIGTERM after 400 ms must run them at once. */
    fly(f, n, 400, send_sigterm);
    for (int i = 0; i < n; i++)
        check_binary_answer(&f[i].c, &f[i].r, 0);
    int status = -2;
    for (int t = 0; t < 200 && status == -2; t++) {
        int ws;
        pid_t r = waitpid(daemon_.pid, &ws, WNOHANG);
        if (r == daemon_.pid)
            status = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
        else
            usleep(50000);
    }
    cr_assert_eq(status, 0, "normd exited with %d after SIGTERM", status);
    daemon_.pid = 0;
    free_flights(f, n);
}

static void start_faulty(void)
{
    static const char *const args[] = {"--fault-every", "2", NULL};
    start(args);
}

Test(configured, a_failed_batch_is_a_500_and_counted, .init = start_faulty,
     .fini = stop_expect_clean)
{
    int ok = 0, failed = 0;
    for (int i = 0; i < 6; i++) {
        nd_resp r = post("softmax", "application/json", "{\"shape\":[1,2],\"data\":[0,0]}");
        if (r.code == 200)
            ok++;
        else {
            cr_assert_eq(r.code, 500, "HTTP %ld: %s", r.code, r.body);
            cr_assert(strstr(r.body, "injected fault"), "%s", r.body);
            failed++;
        }
        nd_resp_free(&r);
    }
    cr_assert_eq(ok, 3);
    cr_assert_eq(failed, 3);
    cr_assert_eq(metric("normd_batch_failures_total", "op=\"softmax\""), 3);
    cr_assert_eq(metric("normd_requests_total", "op=\"softmax\",code=\"500\""), 3);
}

/* ---- parameter sets ---- */

Test(server, registered_parameters_give_the_inline_answer)
{
    uint64_t rng = 0x77;
    for (int d = 0; d < 3; d++) {
        op_case c;
        case_make(&c, ND_OP_LAYERNORM, dtypes[d], &rng, -1, 0);
        /* register gamma and beta as raw binary */
        char url[512];
        snprintf(url, sizeof url, "%s/v1/params/ln-%d?dtype=%s&gamma=%lld&beta=%lld",
                 daemon_.base, d, nd_dtype_name(c.dt), (long long)c.pcount, (long long)c.pcount);
        size_t pb = (size_t)c.pcount * nd_dtype_size(c.dt);
        char *params = xalloc(2 * pb);
        memcpy(params, c.p0, pb);
        memcpy(params + pb, c.p1, pb);
        nd_resp r;
        cr_assert_eq(nd_http("PUT", url, "application/octet-stream", params, 2 * pb, &r), 0);
        cr_assert_eq(r.code, 200, "PUT: %ld %s", r.code, r.body);
        nd_resp_free(&r);
        free(params);
        /* activations only */
        snprintf(url, sizeof url, "%s/v1/layernorm?dtype=%s&params=ln-%d&shape=", daemon_.base,
                 nd_dtype_name(c.dt), d);
        for (int i = 0; i < c.ndim; i++)
            snprintf(url + strlen(url), sizeof url - strlen(url), "%s%lld", i ? "," : "",
                     (long long)c.shape[i]);
        cr_assert_eq(nd_http("POST", url, "application/octet-stream", c.x,
                             (size_t)c.n * nd_dtype_size(c.dt), &r),
                     0);
        check_binary_answer(&c, &r, 0);
        nd_resp_free(&r);
        case_free(&c);
    }
    /* JSON registration, listing, GET, use from JSON, DELETE, then use fails */
    char url[256];
    snprintf(url, sizeof url, "%s/v1/params/w", daemon_.base);
    const char *put = "{\"dtype\":\"float32\",\"weight\":[2,2]}";
    nd_resp r;
    cr_assert_eq(nd_http("PUT", url, "application/json", put, strlen(put), &r), 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    cr_assert(strstr(r.body, "\"weight\":[2,2]"), "%s", r.body);
    nd_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/params", daemon_.base);
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert(strstr(r.body, "\"ln-0\"") && strstr(r.body, "\"w\""), "%s", r.body);
    nd_resp_free(&r);
    r = post("rmsnorm", "application/json", "{\"shape\":[1,2],\"data\":[3,4],\"params\":\"w\"}");
    cr_assert_eq(r.code, 200, "%s", r.body);
    /* rms = sqrt(12.5); y = x / rms * 2 */
    json_t *root = json_loads(r.body, 0, NULL);
    double y0 = json_number_value(json_array_get(json_object_get(root, "data"), 0));
    cr_assert(fabs(y0 - 3.0 / sqrt(12.5 + 1e-6) * 2) < 1e-5, "y0=%g", y0);
    json_decref(root);
    nd_resp_free(&r);
    r = post("rmsnorm", "application/json", "{\"shape\":[1,3],\"data\":[3,4,5],\"params\":\"w\"}");
    cr_assert_eq(r.code, 400, "a 3-wide row with a 2-wide weight: %ld %s", r.code, r.body);
    nd_resp_free(&r);
    snprintf(url, sizeof url, "%s/v1/params/w", daemon_.base);
    cr_assert_eq(nd_http("DELETE", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("DELETE", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 404);
    nd_resp_free(&r);
    r = post("rmsnorm", "application/json", "{\"shape\":[1,2],\"data\":[3,4],\"params\":\"w\"}");
    cr_assert_eq(r.code, 404, "a deleted set is unknown: %s", r.body);
    nd_resp_free(&r);
}

/* ---- health, metrics, UNIX socket ---- */

Test(server, health_and_metrics)
{
    char url[256];
    snprintf(url, sizeof url, "%s/healthz", daemon_.base);
    nd_resp r;
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    cr_assert(strstr(r.body, "\"ok\""), "%s", r.body);
    nd_resp_free(&r);
    expect_valid_request_works();
    snprintf(url, sizeof url, "%s/metrics", daemon_.base);
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    const char *series[] = {"normd_requests_total{op=\"softmax\",code=\"200\"} 1",
                            "normd_batches_total{op=\"softmax\"} 1",
                            "# TYPE normd_batch_rows histogram",
                            "# TYPE normd_request_duration_seconds histogram",
                            "normd_queue_depth 0"};
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++)
        cr_assert(strstr(r.body, series[i]), "missing \"%s\" in:\n%s", series[i], r.body);
    nd_resp_free(&r);
}

static char unix_path[64];

static void start_unix(void)
{
    snprintf(unix_path, sizeof unix_path, "/tmp/normd-test-%d.sock", (int)getpid());
    const char *args[] = {"--unix", unix_path, NULL};
    start(args);
}

Test(configured, serves_a_unix_socket, .init = start_unix, .fini = stop_expect_clean)
{
    const char *body = "{\"shape\":[1,2],\"data\":[0,0]}";
    nd_resp r;
    cr_assert_eq(nd_http_unix(unix_path, "POST", "http://normd/v1/softmax", "application/json",
                              body, strlen(body), &r),
                 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    cr_assert(strstr(r.body, "0.5"), "%s", r.body);
    nd_resp_free(&r);
}

/* ---- large batches and the per-device series ---- */

/* 2048 x 4096 float32 is 32 MiB each way: more than an engine slot's initial staging, so the
 * engine grows its buffers; a small request of another dtype after it must still be right. */
Test(server, a_batch_larger_than_the_initial_staging_then_a_small_one)
{
    uint64_t rng = 0x5151;
    for (int k = 0; k < 2; k++) {
        nd_dtype dt = k ? ND_BFLOAT16 : ND_FLOAT32;
        int64_t rows = k ? 3 : 2048, cols = k ? 512 : 4096;
        op_case c;
        memset(&c, 0, sizeof c);
        c.op = ND_OP_RMSNORM;
        c.dt = dt;
        c.ndim = 2;
        c.shape[0] = rows;
        c.shape[1] = cols;
        c.axis = 1;
        c.outer = rows;
        c.mid = c.pcount = cols;
        c.inner = 1;
        c.n = rows * cols;
        size_t esz = nd_dtype_size(dt);
        c.x = xalloc((size_t)c.n * esz);
        c.xd = xalloc((size_t)c.n * sizeof(double));
        c.ref = xalloc((size_t)c.n * sizeof(double));
        c.p0 = xalloc((size_t)cols * esz);
        c.p0d = xalloc((size_t)cols * sizeof(double));
        c.rstd = xalloc((size_t)rows * sizeof(double));
        nd_fill_random(dt, c.x, c.n, 0.0, 1.0, &rng, c.xd);
        nd_fill_random(dt, c.p0, cols, 1.0, 0.2, &rng, c.p0d);
        nd_ref_rmsnorm(c.xd, rows, cols, c.p0d, 1e-6, c.ref, c.rstd);
        char *url = case_binary_url(&c, &daemon_, 0);
        size_t len;
        void *body = case_binary_body(&c, &len);
        nd_resp r;
        cr_assert_eq(nd_http("POST", url, "application/octet-stream", body, len, &r), 0);
        check_binary_answer(&c, &r, 0);
        nd_resp_free(&r);
        free(body);
        free(url);
        case_free(&c);
    }
}

/* The per-device series exist for the backend under test (label "cpu" or "cuda:0"); on cuda the
 * copies and kernel times are counted. */
/* A device series summed over every device the daemon shows (cuda:0, cuda:1, ... or cpu): with
 * several GPUs, batches spread over them. -1 when no device has it. */
static double device_metric(const char *name, int cuda, int *ndevices)
{
    if (!cuda) {
        *ndevices = 1;
        return metric(name, "device=\"cpu\"");
    }
    double sum = -1;
    *ndevices = 0;
    for (int d = 0; d < 16; d++) {
        char label[32];
        snprintf(label, sizeof label, "device=\"cuda:%d\"", d);
        double v = metric(name, label);
        if (v < 0)
            continue;
        sum = (sum < 0 ? 0 : sum) + v;
        ++*ndevices;
    }
    return sum;
}

Test(server, metrics_have_the_device_series)
{
    const char *backend = getenv("NORMD_BACKEND") ? getenv("NORMD_BACKEND") : "cpu";
    int cuda = !strcmp(backend, "cuda");
    const int n = 4;
    for (int i = 0; i < n; i++)
        expect_valid_request_works(); /* softmax of 1 x 2 float32 */
    static const char *const series[] = {
        "normd_device_batches_in_flight", "normd_device_h2d_bytes_total",
        "normd_device_d2h_bytes_total",   "normd_device_batch_errors_total",
        "normd_device_compute_seconds_count", "normd_device_queue_wait_seconds_count"};
    double v[6];
    int ndev[6];
    for (int i = 0; i < 6; i++) {
        v[i] = device_metric(series[i], cuda, &ndev[i]);
        cr_assert_geq(v[i], 0, "/metrics lacks %s for %s", series[i], backend);
        cr_assert_eq(ndev[i], ndev[0], "%s: %d devices, %s: %d", series[i], ndev[i], series[0],
                     ndev[0]);
    }
    fprintf(stderr, "device series: %d device(s)\n", ndev[0]);
    cr_assert_eq(v[0], 0, "batches still in flight at rest");
    cr_assert_eq(v[3], 0, "batch errors");
    cr_assert_eq(v[4], n, "%g batches timed for %d requests", v[4], n);
    if (cuda) {
        int nk;
        cr_assert_geq(v[1], n * 2 * sizeof(float), "h2d bytes %g", v[1]);
        cr_assert_geq(v[2], n * 2 * sizeof(float), "d2h bytes %g", v[2]);
        cr_assert_eq(device_metric("normd_device_kernel_seconds_count", cuda, &nk), n);
    }
    /* Every request's stages, each observed once per request; the device-timed ones only on a
     * device (a lone small request runs without copies, so no h2d or d2h there either). */
    static const char *const stages[] = {"queue", "input",  "compute", "output",
                                         "wakeup", "total", "submit",  "kernel"};
    for (size_t k = 0; k < sizeof stages / sizeof stages[0]; k++) {
        char label[48];
        snprintf(label, sizeof label, "stage=\"%s\"", stages[k]);
        const double want = k < 6 || cuda ? n : 0;
        const double got = metric("normd_request_stage_seconds_count", label);
        cr_assert_eq(got, want, "stage %s observed %g times for %d requests on %s", stages[k],
                     got, n, backend);
    }
}

/* ---- content types: one rule for /v1, none for /v2 ---- */

Test(server, content_types_follow_one_rule_and_errors_say_which_form_was_assumed)
{
    static const float x8[8] = {1, 2, 3, 4, 10, 20, 30, 40};
    const char *json = "{\"shape\":[2,4],\"data\":[1,2,3,4,10,20,30,40]}";
    static const struct {
        const char *query;  /* after /v1/layernorm */
        const char *ctype;  /* NULL: no header; "form": curl's default for -d */
        int binary_body;
        long code;
        const char *needle; /* in the error message */
    } cases[] = {
        {"", "application/json", 0, 200, NULL},
        {"", NULL, 0, 200, NULL},
        {"", "form", 0, 200, NULL},
        {"?shape=2,4", "application/octet-stream", 1, 200, NULL},
        {"?shape=2,4", "form", 1, 200, NULL},
        {"?shape=2,4", NULL, 1, 200, NULL},
        /* binary bytes with curl's default type and no query string: read as JSON, and said */
        {"", "form", 1, 400, "read as JSON because there is no query string"},
        /* a JSON body with curl's default type and a query string: read as binary, and said */
        {"?shape=2,4", "form", 0, 400, "read as raw binary because the query string"},
        {"?shape=2,4", "application/json", 0, 400, "carries its metadata in the body"},
        {"", "application/octet-stream", 1, 400, "shape"},
        {"", "text/plain", 0, 415, "application/octet-stream"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char url[256];
        snprintf(url, sizeof url, "%s/v1/layernorm%s", daemon_.base, cases[i].query);
        const char *ctype = cases[i].ctype && !strcmp(cases[i].ctype, "form")
                                ? "application/x-www-form-urlencoded"
                                : cases[i].ctype;
        const void *body = cases[i].binary_body ? (const void *)x8 : (const void *)json;
        size_t len = cases[i].binary_body ? sizeof x8 : strlen(json);
        nd_resp r;
        cr_assert_eq(nd_http("POST", url, ctype, body, len, &r), 0);
        cr_assert_eq(r.code, cases[i].code, "case %zu (%s %s): HTTP %ld: %s", i, cases[i].query,
                     ctype ? ctype : "no type", r.code, r.body);
        if (cases[i].needle)
            cr_assert(strstr(r.body, cases[i].needle), "case %zu: no \"%s\" in %s", i,
                      cases[i].needle, r.body);
        nd_resp_free(&r);
    }
    /* /v2 bodies are a JSON header (and binary after it) whatever the type says */
    const char *v2 = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
                     "\"data\":[0,0]}]}";
    char url[256];
    snprintf(url, sizeof url, "%s/v2/models/softmax/infer", daemon_.base);
    const char *types[] = {"application/json", "text/plain", NULL};
    for (int i = 0; i < 3; i++) {
        nd_resp r;
        cr_assert_eq(nd_http("POST", url, types[i], v2, strlen(v2), &r), 0);
        cr_assert_eq(r.code, 200, "v2 with %s: %ld %s", types[i] ? types[i] : "no type", r.code,
                     r.body);
        nd_resp_free(&r);
    }
}

/* ---- one daemon per port ---- */

Test(server, a_second_daemon_on_the_same_port_refuses_to_start)
{
    const char *bin = getenv("NORMD_BIN") ? getenv("NORMD_BIN") : "build/normd";
    char listen[64], cmd[512];
    snprintf(listen, sizeof listen, "127.0.0.1:%u", daemon_.port);
    snprintf(cmd, sizeof cmd, "%s --listen %s --backend null 2>&1", bin, listen);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[1024] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1,
              "the second daemon did not exit 1: status %d, %s", status, out);
    cr_assert(strstr(out, listen) && strstr(out, "in use"),
              "the message does not name the address and the cause: %s", out);
    /* and the first one still answers alone */
    expect_valid_request_works();
}

Test(configured, version_flag_prints_the_version)
{
    const char *bin = getenv("NORMD_BIN") ? getenv("NORMD_BIN") : "build/normd";
    char cmd[300];
    snprintf(cmd, sizeof cmd, "%s --version", bin);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char out[128] = "";
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0);
    cr_assert(!strncmp(out, "normd ", 6) && strchr(out, '.'), "--version printed %s", out);
}

/* ---- JSON answers hold the binary answers' values ---- */

/* Bit for bit: what a JSON answer says and what the binary answer holds. */
static void expect_same_bits(const void *json_vals, const void *bin, int64_t n, nd_dtype dt,
                             const char *what)
{
    const size_t es = nd_dtype_size(dt);
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)json_vals + i * (int64_t)es, (const char *)bin + i * (int64_t)es,
                   es)) {
            double a, b;
            nd_to_f64(dt, (const char *)json_vals + i * (int64_t)es, 1, &a);
            nd_to_f64(dt, (const char *)bin + i * (int64_t)es, 1, &b);
            cr_assert_fail("%s[%lld]: JSON answer %.9g, binary answer %.9g", what, (long long)i,
                           a, b);
        }
}

/* x and the parameters as a v2 request body with JSON tensors, all outputs as JSON. */
static char *case_v2_json(const op_case *c)
{
    static const char *const names[3] = {"FP32", "FP16", "BF16"};
    const char *dt = names[c->dt == ND_FLOAT32 ? 0 : c->dt == ND_FLOAT16 ? 1 : 2];
    sbuf b = {0};
    sb_printf(&b, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"%s\",\"shape\":[", dt);
    for (int i = 0; i < c->ndim; i++)
        sb_printf(&b, "%s%lld", i ? "," : "", (long long)c->shape[i]);
    sb_printf(&b, "]");
    sb_array(&b, "data", c->xd, c->n);
    sb_printf(&b, "}");
    const char *pname[2] = {c->op == ND_OP_LAYERNORM ? "gamma"
                            : c->op == ND_OP_RMSNORM ? "weight"
                                                     : "alpha",
                            "beta"};
    const double *pv[2] = {c->p0d, c->p1d};
    for (int k = 0; k < 2; k++) {
        if (!pv[k])
            continue;
        sb_printf(&b, ",{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[%lld]", pname[k], dt,
                  (long long)c->pcount);
        sb_array(&b, "data", pv[k], c->pcount);
        sb_printf(&b, "}");
    }
    sb_printf(&b, "]");
    if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX)
        sb_printf(&b, ",\"parameters\":{\"axis\":%d}", c->axis);
    sb_printf(&b, ",\"outputs\":[{\"name\":\"y\"}%s%s]}",
              c->op == ND_OP_LAYERNORM ? ",{\"name\":\"mean\"}" : "",
              c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM ? ",{\"name\":\"rstd\"}" : "");
    return b.p;
}

/* The v2 answer's output called name. */
static const json_t *v2_output(const json_t *root, const char *name)
{
    const json_t *outs = json_object_get(root, "outputs");
    for (size_t i = 0; i < json_array_size(outs); i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(outs, i), "name")), name))
            return json_array_get(outs, i);
    cr_assert_fail("no output %s in the v2 answer", name);
    return NULL;
}

/* One case three ways: raw binary, /v1 JSON and (FP32, FP16) v2 JSON; every value of y and of
 * the statistics must be the same bits in all three. */
static void json_and_binary_agree(const op_case *c)
{
    const int norm = c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM;
    const size_t es = nd_dtype_size(c->dt);
    const char *name = nd_op_name(c->op), *dt = nd_dtype_name(c->dt);
    char *url = case_binary_url(c, &daemon_, norm);
    size_t len;
    void *body = case_binary_body(c, &len);
    nd_resp bin;
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", body, len, &bin), 0);
    cr_assert_eq(bin.code, 200, "%s %s binary: %ld %s", name, dt, bin.code, bin.body);
    const size_t ybytes = (size_t)c->n * es, sbytes = (size_t)c->outer * sizeof(float);
    const char *bin_mean = c->op == ND_OP_LAYERNORM ? bin.body + ybytes : NULL;
    const char *bin_rstd = norm ? bin.body + ybytes + (bin_mean ? sbytes : 0) : NULL;
    void *y = xalloc(ybytes);
    float *stat = xalloc(sbytes);

    char *json = case_json(c, norm);
    nd_resp r = post(name, "application/json", json);
    cr_assert_eq(r.code, 200, "%s %s /v1 JSON: %ld %s", name, dt, r.code, r.body);
    json_error_t jerr;
    json_t *root = json_loads(r.body, 0, &jerr);
    cr_assert_not_null(root, "%s", jerr.text);
    json_as_dtype(json_object_get(root, "data"), c->dt, y, c->n, "data");
    expect_same_bits(y, bin.body, c->n, c->dt, "/v1 y");
    if (bin_mean) {
        json_as_dtype(json_object_get(root, "mean"), ND_FLOAT32, stat, c->outer, "mean");
        expect_same_bits(stat, bin_mean, c->outer, ND_FLOAT32, "/v1 mean");
    }
    if (bin_rstd) {
        json_as_dtype(json_object_get(root, "rstd"), ND_FLOAT32, stat, c->outer, "rstd");
        expect_same_bits(stat, bin_rstd, c->outer, ND_FLOAT32, "/v1 rstd");
    }
    json_decref(root);
    nd_resp_free(&r);
    free(json);

    if (c->dt != ND_BFLOAT16) { /* v2 sends BF16 only as binary */
        char v2url[256];
        snprintf(v2url, sizeof v2url, "%s/v2/models/%s/infer", daemon_.base, name);
        json = case_v2_json(c);
        cr_assert_eq(nd_http("POST", v2url, "application/json", json, strlen(json), &r), 0);
        cr_assert_eq(r.code, 200, "%s %s v2 JSON: %ld %s", name, dt, r.code, r.body);
        root = json_loads(r.body, 0, &jerr);
        cr_assert_not_null(root, "%s", jerr.text);
        json_as_dtype(json_object_get(v2_output(root, "y"), "data"), c->dt, y, c->n, "y");
        expect_same_bits(y, bin.body, c->n, c->dt, "v2 y");
        if (bin_mean) {
            json_as_dtype(json_object_get(v2_output(root, "mean"), "data"), ND_FLOAT32, stat,
                          c->outer, "mean");
            expect_same_bits(stat, bin_mean, c->outer, ND_FLOAT32, "v2 mean");
        }
        if (bin_rstd) {
            json_as_dtype(json_object_get(v2_output(root, "rstd"), "data"), ND_FLOAT32, stat,
                          c->outer, "rstd");
            expect_same_bits(stat, bin_rstd, c->outer, ND_FLOAT32, "v2 rstd");
        }
        json_decref(root);
        nd_resp_free(&r);
        free(json);
    }
    free(y);
    free(stat);
    nd_resp_free(&bin);
    free(body);
    free(url);
}

/* Every op and dtype on random shapes, and the service benchmark's request (layernorm 8 x 1024
 * float32, values from N(0, 1): answers from every part of the float32 writer). */
Test(server, json_answers_hold_the_binary_answers_values)
{
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX,
                                ND_OP_LOG_SOFTMAX, ND_OP_PRELU};
    uint64_t rng = 0x1212;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
            for (int k = 0; k < 3; k++) {
                op_case c;
                case_make(&c, ops[o], dtypes[d], &rng, (int)(nd_rand_u64(&rng) % 3),
                          (int)(nd_rand_u64(&rng) % 2));
                json_and_binary_agree(&c);
                case_free(&c);
            }

    op_case c;
    memset(&c, 0, sizeof c);
    c.op = ND_OP_LAYERNORM;
    c.dt = ND_FLOAT32;
    c.ndim = 2;
    c.shape[0] = c.outer = 8;
    c.shape[1] = c.mid = c.pcount = 1024;
    c.inner = 1;
    c.axis = 1;
    c.n = 8 * 1024;
    c.x = xalloc((size_t)c.n * 4);
    c.xd = xalloc((size_t)c.n * sizeof(double));
    c.p0 = xalloc(1024 * 4);
    c.p0d = xalloc(1024 * sizeof(double));
    c.p1 = xalloc(1024 * 4);
    c.p1d = xalloc(1024 * sizeof(double));
    nd_fill_random(ND_FLOAT32, c.x, c.n, 0.0, 1.0, &rng, c.xd);
    nd_fill_random(ND_FLOAT32, c.p0, 1024, 1.0, 0.3, &rng, c.p0d);
    nd_fill_random(ND_FLOAT32, c.p1, 1024, 0.0, 0.5, &rng, c.p1d);
    json_and_binary_agree(&c);
    case_free(&c);
}
