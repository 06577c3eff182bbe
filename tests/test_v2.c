/*
 * test_v2.c - proto/v2.c: the KServe v2 inference request (JSON and binary tensors), its answer,
 * and the metadata, configuration and statistics documents.
 *
 * Random requests of every op and dtype are written twice, as /v1 and as v2 would send them, from
 * the same decimal text (or the same bytes): both parsers must give the same nd_request bit for
 * bit, and both must hold the bit patterns the test drew (decoded here independently of
 * nd_dtype.h, as in test_proto.c). The seed is printed with every failure (ND_TEST_SEED repeats a
 * run).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../proto/nd_v2.h"
#include "util/nd_testutil.h"

/* ======================================================================== helpers */

static uint64_t seed0;

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint64_t rng_init(void)
{
    if (!seed0) {
        const char *env = getenv("ND_TEST_SEED");
        seed0 = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
        if (!seed0)
            seed0 = 1;
    }
    return seed0;
}

static int64_t rnd_range(uint64_t *s, int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rnd(s) % (uint64_t)(hi - lo + 1));
}

static size_t esize(nd_dtype dt)
{
    return dt == ND_FLOAT32 ? 4 : 2;
}

static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

static double bf16_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double f32_value(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A random finite bit pattern of dt in *bits, its exact value returned: mostly ordinary
 * magnitudes, sometimes any finite pattern (subnormals, extremes). */
static double rnd_value(uint64_t *s, nd_dtype dt, uint32_t *bits)
{
    for (;;) {
        uint64_t r = rnd(s);
        double v;
        if (dt == ND_FLOAT32) {
            uint32_t u = (uint32_t)r;
            if ((r >> 40) % 4)
                u = (u & 0x807fffffu) | ((uint32_t)(112 + (r >> 32) % 32) << 23);
            v = f32_value(u);
            *bits = u;
        } else if (dt == ND_FLOAT16) {
            uint16_t h = (uint16_t)r;
            v = half_value(h);
            *bits = h;
        } else {
            uint16_t b = (uint16_t)r;
            if ((r >> 40) % 4)
                b = (uint16_t)((b & 0x807fu) | ((112 + (r >> 32) % 32) << 7));
            v = bf16_value(b);
            *bits = b;
        }
        if (isfinite(v))
            return v;
    }
}

static uint32_t stored_bits(nd_dtype dt, const void *p, int64_t i)
{
    if (dt == ND_FLOAT32) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return h;
}

static void expect_bits(nd_dtype dt, const void *p, const uint32_t *bits, int64_t n,
                        const char *what)
{
    cr_assert_not_null(p, "seed %llu: %s missing", (unsigned long long)seed0, what);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(stored_bits(dt, p, i), bits[i],
                     "seed %llu: %s[%lld] (%s): got 0x%x, want 0x%x", (unsigned long long)seed0,
                     what, (long long)i, nd_dtype_name(dt), stored_bits(dt, p, i), bits[i]);
}

/* A growing byte string. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t n)
{
    if (b->len + n + 1 <= b->cap)
        return;
    b->cap = (b->len + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    cr_assert(b->p);
}

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    sb_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void sb_bytes(sbuf *b, const void *p, size_t n)
{
    sb_reserve(b, n);
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static const nd_dtype dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
static const char *const v1_dtype[] = {"float32", "float16", "bfloat16"};
static const char *const v2_dtype[] = {"FP32", "FP16", "BF16"};

/* A value as JSON text that reads back exactly ("-0.0": jansson reads "-0" as the integer 0). */
static void sb_value(sbuf *b, double v)
{
    sb_printf(b, "%.17g%s", v, v == 0 && signbit(v) ? ".0" : "");
}

static void sb_flat(sbuf *b, const double *v, int64_t n)
{
    sb_printf(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i)
            sb_printf(b, ",");
        sb_value(b, v[i]);
    }
    sb_printf(b, "]");
}

/* v nested as shape: a bracket opens when an index rolls over. */
static void sb_nested(sbuf *b, const double *v, const int64_t *shape, int nd)
{
    int64_t n = 1;
    for (int k = 0; k < nd; k++)
        n *= shape[k];
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i;
        if (i)
            sb_printf(b, ",");
        for (int k = nd - 1; k >= 0 && rem % shape[k] == 0; k--) {
            sb_printf(b, "[");
            rem /= shape[k];
        }
        sb_value(b, v[i]);
        rem = i + 1;
        for (int k = nd - 1; k >= 0 && rem % shape[k] == 0; k--) {
            sb_printf(b, "]");
            rem /= shape[k];
        }
    }
}

static void sb_shape(sbuf *b, const int64_t *shape, int nd)
{
    sb_printf(b, "[");
    for (int i = 0; i < nd; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
    sb_printf(b, "]");
}

/* Appends n bit patterns as little-endian dtype-sized elements. */
static void sb_raw(sbuf *b, nd_dtype dt, const uint32_t *bits, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t e[4] = {(uint8_t)bits[i], (uint8_t)(bits[i] >> 8), (uint8_t)(bits[i] >> 16),
                        (uint8_t)(bits[i] >> 24)};
        sb_bytes(b, e, esize(dt));
    }
}

static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++)
        p *= shape[i];
    return p;
}

/* ======================================================================== random requests */

/* One tensor of a request: its name, shape, bit patterns and exact values. */
typedef struct tensor {
    const char *name;
    int nd;
    int64_t shape[ND_MAX_DIMS];
    int64_t n;
    uint32_t *bits;
    double *vals;
    int binary; /* v2: sent as binary (else as JSON data) */
    int nested; /* v2 JSON: data nested as the shape */
} tensor;

typedef struct tcase {
    nd_op op;
    int d;
    tensor t[3]; /* x first, then the op's parameter tensors */
    int nt;
    int has_eps, has_axis;
    double eps;
    int axis;
} tcase;

static void tensor_fill(uint64_t *s, tensor *t, nd_dtype dt)
{
    t->n = prod(t->shape, 0, t->nd);
    t->bits = malloc((size_t)t->n * sizeof *t->bits);
    t->vals = malloc((size_t)t->n * sizeof *t->vals);
    for (int64_t i = 0; i < t->n; i++)
        t->vals[i] = rnd_value(s, dt, &t->bits[i]);
}

static void tcase_free(tcase *c)
{
    for (int i = 0; i < c->nt; i++) {
        free(c->t[i].bits);
        free(c->t[i].vals);
    }
}

static void add_param(uint64_t *s, tcase *c, const char *name, int64_t count)
{
    tensor *t = &c->t[c->nt++];
    t->name = name;
    t->nd = 1;
    t->shape[0] = count;
    tensor_fill(s, t, dtypes[c->d]);
}

/* A random valid request of op and dtype d; binary_mode: 0 all JSON, 1 all binary, 2 mixed. */
static void tcase_make(uint64_t *s, tcase *c, nd_op op, int d, int binary_mode)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->d = d;
    tensor *x = &c->t[c->nt++];
    x->name = "x";
    x->nd = (int)rnd_range(s, 1, 4);
    for (int i = 0; i < x->nd; i++)
        x->shape[i] = rnd_range(s, 1, 6);
    tensor_fill(s, x, dtypes[d]);
    const int64_t last = x->shape[x->nd - 1];
    const int64_t ch = x->nd >= 2 ? x->shape[1] : 1;
    if (op == ND_OP_LAYERNORM) {
        /* both or neither, so that the /v1 binary form (affine=1) can say the same */
        if (rnd(s) % 2) {
            add_param(s, c, "gamma", last);
            add_param(s, c, "beta", last);
        }
    } else if (op == ND_OP_RMSNORM) {
        if (rnd(s) % 2)
            add_param(s, c, "weight", last);
    } else if (op == ND_OP_PRELU) {
        add_param(s, c, "alpha", rnd(s) % 2 ? 1 : ch);
    }
    if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
        if ((c->has_eps = rnd(s) % 2))
            c->eps = ldexp(1.0, -(int)rnd_range(s, 3, 30));
        if ((c->has_axis = rnd(s) % 3 == 0))
            c->axis = rnd(s) % 2 ? -1 : x->nd - 1;
    } else if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
        if ((c->has_axis = rnd(s) % 3 != 0))
            c->axis = (int)rnd_range(s, -x->nd, x->nd - 1);
    }
    for (int i = 0; i < c->nt; i++) {
        c->t[i].binary = binary_mode == 1 || (binary_mode == 2 && rnd(s) % 2);
        c->t[i].nested = rnd(s) % 2;
    }
}

/* The /v1 JSON body for c (flat data). */
static void v1_json(const tcase *c, sbuf *b)
{
    const tensor *x = &c->t[0];
    sb_printf(b, "{\"dtype\":\"%s\",\"shape\":", v1_dtype[c->d]);
    sb_shape(b, x->shape, x->nd);
    sb_printf(b, ",\"data\":");
    sb_flat(b, x->vals, x->n);
    for (int i = 1; i < c->nt; i++) {
        sb_printf(b, ",\"%s\":", c->t[i].name);
        sb_flat(b, c->t[i].vals, c->t[i].n);
    }
    if (c->has_eps)
        sb_printf(b, ",\"eps\":%.17g", c->eps);
    if (c->has_axis)
        sb_printf(b, ",\"axis\":%d", c->axis);
    sb_printf(b, "}");
}

/* nd_op_is_norm lives in the private request.h. */
static int is_norm(nd_op op)
{
    return op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM;
}

/* The /v1 raw binary form of c: its query (into kv, strings in store) and body. */
static size_t v1_binary(const tcase *c, nd_kv *kv, char store[][64], sbuf *b)
{
    const tensor *x = &c->t[0];
    size_t n = 0;
    int len = 0;
    for (int i = 0; i < x->nd; i++)
        len += snprintf(store[0] + len, 64 - (size_t)len, "%s%lld", i ? "," : "",
                        (long long)x->shape[i]);
    kv[n++] = (nd_kv){"shape", store[0]};
    kv[n++] = (nd_kv){"dtype", v1_dtype[c->d]};
    if (c->has_eps) {
        snprintf(store[1], 64, "%.17g", c->eps);
        kv[n++] = (nd_kv){"eps", store[1]};
    }
    if (c->has_axis) {
        snprintf(store[2], 64, "%d", c->axis);
        kv[n++] = (nd_kv){"axis", store[2]};
    }
    if (is_norm(c->op) && c->nt > 1)
        kv[n++] = (nd_kv){"affine", "1"};
    if (c->op == ND_OP_PRELU)
        kv[n++] = (nd_kv){"alpha", c->t[1].n == 1 ? "shared" : "channel"};
    for (int i = 0; i < c->nt; i++)
        sb_raw(b, dtypes[c->d], c->t[i].bits, c->t[i].n);
    return n;
}

/* The v2 body for c, inputs in a random order, each tensor as its binary/nested flags say;
 * *header gets the JSON part's length (0 when nothing is binary). pad: spaces after the JSON, to
 * move the binary tensors' alignment about. */
static void v2_body(uint64_t *s, const tcase *c, sbuf *b, size_t *header, int pad,
                    const char *extra_params, const char *outputs)
{
    int order[3] = {0, 1, 2};
    int any_binary = 0;
    for (int i = c->nt - 1; i > 0; i--) {
        int j = (int)rnd_range(s, 0, i);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    sb_printf(b, "{\"id\":\"req-%llu\",\"parameters\":{", (unsigned long long)rnd(s) % 1000);
    int first = 1;
    if (c->has_eps) {
        sb_printf(b, "\"eps\":%.17g", c->eps);
        first = 0;
    }
    if (c->has_axis) {
        sb_printf(b, "%s\"axis\":%d", first ? "" : ",", c->axis);
        first = 0;
    }
    if (extra_params)
        sb_printf(b, "%s%s", first ? "" : ",", extra_params);
    sb_printf(b, "},\"inputs\":[");
    for (int k = 0; k < c->nt; k++) {
        const tensor *t = &c->t[order[k]];
        sb_printf(b, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":", k ? "," : "", t->name,
                  v2_dtype[c->d]);
        sb_shape(b, t->shape, t->nd);
        if (t->binary) {
            sb_printf(b, ",\"parameters\":{\"binary_data_size\":%zu}",
                      (size_t)t->n * esize(dtypes[c->d]));
            any_binary = 1;
        } else {
            sb_printf(b, ",\"data\":");
            if (t->nested) {
                /* a rank-1 nesting is the flat form */
                if (t->nd == 1)
                    sb_flat(b, t->vals, t->n);
                else
                    sb_nested(b, t->vals, t->shape, t->nd);
            } else {
                sb_flat(b, t->vals, t->n);
            }
        }
        sb_printf(b, "}");
    }
    sb_printf(b, "]");
    if (outputs)
        sb_printf(b, ",\"outputs\":%s", outputs);
    sb_printf(b, ",\"client_extension\":{\"ignored\":true}}");
    for (int i = 0; i < pad; i++)
        sb_printf(b, " ");
    *header = any_binary ? b->len : 0;
    for (int k = 0; k < c->nt; k++)
        if (c->t[order[k]].binary)
            sb_raw(b, dtypes[c->d], c->t[order[k]].bits, c->t[order[k]].n);
}

/* Both requests describe the same operation with the same bits. */
static void expect_same(const nd_request *a, const nd_request *b, const char *ctx)
{
    const unsigned long long sd = (unsigned long long)seed0;
    cr_assert_eq(a->op, b->op, "seed %llu %s: op", sd, ctx);
    cr_assert_eq(a->dtype, b->dtype, "seed %llu %s: dtype", sd, ctx);
    cr_assert_eq(a->ndim, b->ndim, "seed %llu %s: ndim", sd, ctx);
    for (int i = 0; i < a->ndim; i++)
        cr_assert_eq(a->shape[i], b->shape[i], "seed %llu %s: shape[%d]", sd, ctx, i);
    cr_assert_eq(a->axis, b->axis, "seed %llu %s: axis %d vs %d", sd, ctx, a->axis, b->axis);
    cr_assert_eq(memcmp(&a->eps, &b->eps, sizeof a->eps), 0, "seed %llu %s: eps %g vs %g", sd,
                 ctx, a->eps, b->eps);
    cr_assert_eq(a->outer, b->outer, "seed %llu %s: outer", sd, ctx);
    cr_assert_eq(a->mid, b->mid, "seed %llu %s: mid", sd, ctx);
    cr_assert_eq(a->inner, b->inner, "seed %llu %s: inner", sd, ctx);
    cr_assert_eq(a->elems, b->elems, "seed %llu %s: elems", sd, ctx);
    cr_assert_eq(a->alpha_count, b->alpha_count, "seed %llu %s: alpha_count", sd, ctx);
    cr_assert_str_eq(a->params, b->params, "seed %llu %s: params", sd, ctx);
    const size_t es = esize(a->dtype);
    cr_assert_eq(memcmp(a->x, b->x, (size_t)a->elems * es), 0, "seed %llu %s: x", sd, ctx);
    cr_assert_eq(a->gamma == NULL, b->gamma == NULL, "seed %llu %s: gamma", sd, ctx);
    cr_assert_eq(a->beta == NULL, b->beta == NULL, "seed %llu %s: beta", sd, ctx);
    cr_assert_eq(a->alpha == NULL, b->alpha == NULL, "seed %llu %s: alpha", sd, ctx);
    if (a->gamma)
        cr_assert_eq(memcmp(a->gamma, b->gamma, (size_t)a->mid * es), 0, "seed %llu %s: gamma",
                     sd, ctx);
    if (a->beta)
        cr_assert_eq(memcmp(a->beta, b->beta, (size_t)a->mid * es), 0, "seed %llu %s: beta", sd,
                     ctx);
    if (a->alpha)
        cr_assert_eq(memcmp(a->alpha, b->alpha, (size_t)a->alpha_count * es), 0,
                     "seed %llu %s: alpha", sd, ctx);
}

/* What the test itself expects of a parsed v2 request for c. */
static void expect_case(const tcase *c, const nd_v2_request *r, const char *body, size_t len)
{
    const nd_request *req = &r->req;
    const nd_dtype dt = dtypes[c->d];
    const tensor *x = &c->t[0];
    expect_bits(dt, req->x, x->bits, x->n, "x");
    for (int i = 1; i < c->nt; i++) {
        const tensor *t = &c->t[i];
        const void *p = !strcmp(t->name, "beta")    ? req->beta
                        : !strcmp(t->name, "alpha") ? req->alpha
                                                    : req->gamma;
        expect_bits(dt, p, t->bits, t->n, t->name);
    }
    /* binary tensors point into the body, JSON ones into req.owned */
    const tensor *ts[3] = {&c->t[0], c->nt > 1 ? &c->t[1] : NULL, c->nt > 2 ? &c->t[2] : NULL};
    const void *ps[3] = {req->x, c->nt > 1 ? (c->op == ND_OP_PRELU ? req->alpha : req->gamma)
                                           : NULL,
                         req->beta};
    for (int i = 0; i < c->nt; i++) {
        const char *p = ps[i];
        int inside = p >= body && p < body + len;
        cr_assert_eq(inside, ts[i]->binary, "seed %llu: %s points %s the body",
                     (unsigned long long)seed0, ts[i]->name, inside ? "into" : "outside");
    }
    cr_assert_eq(req->wire, x->binary ? ND_WIRE_BINARY : ND_WIRE_JSON);
    cr_assert(r->has_id);
    cr_assert(!strncmp(r->id, "req-", 4));
    if (c->op == ND_OP_PRELU)
        cr_assert_eq(req->alpha_count, c->t[1].n);
    if (c->op == ND_OP_LAYERNORM)
        cr_assert_eq(req->outputs, ND_OUT_Y | ND_OUT_MEAN | ND_OUT_RSTD);
    else if (c->op == ND_OP_RMSNORM)
        cr_assert_eq(req->outputs, ND_OUT_Y | ND_OUT_RSTD);
    else
        cr_assert_eq(req->outputs, ND_OUT_Y);
}

/* ======================================================================== valid requests */

/* Every op and dtype: v2 JSON (FP32/FP16), v2 binary and v2 mixed against /v1 JSON and /v1
 * binary for the same values, and against the drawn bits. */
Test(v2, every_op_and_dtype_matches_v1)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 30; iter++) {
        for (int op = 0; op < ND_OP_COUNT; op++) {
            for (int d = 0; d < 3; d++) {
                for (int mode = 0; mode < 3; mode++) {
                    if (d == 2 && mode != 1)
                        continue; /* BF16 travels only as binary */
                    tcase c;
                    tcase_make(&s, &c, (nd_op)op, d, mode);
                    sbuf b1 = {0}, b2 = {0}, bb = {0};
                    nd_request v1, v1b;
                    nd_v2_request v2;
                    nd_error err = {{0}};
                    size_t hl;
                    char hs[24], store[3][64];
                    nd_kv kv[8];
                    char ctx[64];
                    snprintf(ctx, sizeof ctx, "%s %s mode %d", nd_op_name((nd_op)op),
                             v2_dtype[d], mode);

                    v1_json(&c, &b1);
                    int rc = nd_proto_parse_json((nd_op)op, b1.p, b1.len, 0, &v1, &err);
                    cr_assert_eq(rc, 0, "seed %llu %s: v1: %s\n%s", (unsigned long long)seed0,
                                 ctx, err.msg, b1.p);
                    size_t nkv = v1_binary(&c, kv, store, &bb);
                    rc = nd_proto_parse_binary((nd_op)op, kv, nkv, bb.p, bb.len, 0, &v1b, &err);
                    cr_assert_eq(rc, 0, "seed %llu %s: v1 binary: %s", (unsigned long long)seed0,
                                 ctx, err.msg);

                    /* a 16-bit BF16 y must go back in binary */
                    v2_body(&s, &c, &b2, &hl, (int)rnd_range(&s, 0, 3),
                            d == 2 ? "\"binary_data_output\":true" : NULL, NULL);
                    snprintf(hs, sizeof hs, "%zu", hl);
                    /* an exact-size copy, so that ASan sees a read past the body */
                    char *body = malloc(b2.len);
                    memcpy(body, b2.p, b2.len);
                    rc = nd_v2_parse_infer((nd_op)op, body, b2.len, hl ? hs : NULL, 0, &v2, &err);
                    cr_assert_eq(rc, 0, "seed %llu %s: v2: %s\n%s", (unsigned long long)seed0,
                                 ctx, err.msg, b2.p);
                    expect_same(&v1, &v2.req, ctx);
                    expect_same(&v1b, &v2.req, ctx);
                    expect_case(&c, &v2, body, b2.len);
                    nd_request_free(&v1b);

                    nd_v2_request_free(&v2);
                    cr_assert_null(v2.req.owned);
                    nd_request_free(&v1);
                    free(body);
                    free(b1.p);
                    free(b2.p);
                    free(bb.p);
                    tcase_free(&c);
                }
            }
        }
    }
}

/* Decimals that fall between float16 / float32 values are rounded by both parsers alike. */
Test(v2, rounding_matches_v1)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 500; iter++) {
        int d = iter % 2;
        double v[8];
        for (int i = 0; i < 8; i++) {
            /* arbitrary decimals, not exact dtype values */
            double m = (double)(rnd(&s) % 2000001) / 1000000.0 - 1.0;
            v[i] = ldexp(m, (int)rnd_range(&s, -30, 15));
        }
        if (iter % 50 == 0) {
            v[0] = 65519.99; /* rounds to the largest float16 */
            v[1] = 1152921573326323713.0;
        }
        sbuf b1 = {0}, b2 = {0};
        sb_printf(&b1, "{\"dtype\":\"%s\",\"data\":", v1_dtype[d]);
        sb_flat(&b1, v, 8);
        sb_printf(&b1, "}");
        sb_printf(&b2, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"%s\",\"shape\":[8],\"data\":",
                  v2_dtype[d]);
        sb_flat(&b2, v, 8);
        sb_printf(&b2, "}]}");
        nd_request a;
        nd_v2_request b;
        nd_error err;
        int ra = nd_proto_parse_json(ND_OP_SOFTMAX, b1.p, b1.len, 0, &a, &err);
        cr_assert_eq(ra, 0, "%s", err.msg);
        int rb = nd_v2_parse_infer(ND_OP_SOFTMAX, b2.p, b2.len, NULL, 0, &b, &err);
        cr_assert_eq(rb, 0, "%s", err.msg);
        expect_same(&a, &b.req, "rounding");
        nd_request_free(&a);
        nd_v2_request_free(&b);
        free(b1.p);
        free(b2.p);
    }
    /* integers beyond 2^53 are rounded once, as by /v1: 2^60 + 2^36 + 1 lies just above a tie */
    const char *body = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],"
                       "\"data\":[1152921573326323713]}]}";
    nd_v2_request r;
    nd_error err;
    cr_assert_eq(nd_v2_parse_infer(ND_OP_SOFTMAX, body, strlen(body), NULL, 0, &r, &err), 0);
    cr_assert_eq(stored_bits(ND_FLOAT32, r.req.x, 0), 0x5d800001u);
    nd_v2_request_free(&r);
}

static int parse(nd_op op, const char *body, const char *header, nd_v2_request *r, nd_error *e)
{
    memset(e, 0, sizeof *e);
    return nd_v2_parse_infer(op, body, strlen(body), header, 0, r, e);
}

#define X23 "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,3],\"data\":[1,2,3,4,5,6]}"

Test(v2, defaults)
{
    nd_v2_request r;
    nd_error err;
    cr_assert_eq(parse(ND_OP_LAYERNORM, "{\"inputs\":[" X23 "]}", NULL, &r, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(r.req.eps, ND_LAYERNORM_EPS_DEFAULT);
    cr_assert_eq(r.req.dtype, ND_FLOAT32);
    cr_assert_eq(r.req.outer, 2);
    cr_assert_eq(r.req.mid, 3);
    cr_assert_null(r.req.gamma);
    cr_assert_eq(r.has_id, 0);
    cr_assert_str_eq(r.id, "");
    cr_assert_eq(r.timeout_us, 0);
    cr_assert_eq(r.binary_outputs, 0);
    cr_assert_eq(r.noutputs, 3);
    cr_assert_eq(r.output_order[0], ND_OUT_Y);
    cr_assert_eq(r.output_order[1], ND_OUT_MEAN);
    cr_assert_eq(r.output_order[2], ND_OUT_RSTD);
    nd_v2_request_free(&r);

    cr_assert_eq(parse(ND_OP_RMSNORM, "{\"inputs\":[" X23 "]}", NULL, &r, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(r.req.eps, ND_RMSNORM_EPS_DEFAULT);
    cr_assert_eq(r.noutputs, 2);
    cr_assert_eq(r.req.outputs, ND_OUT_Y | ND_OUT_RSTD);
    nd_v2_request_free(&r);

    cr_assert_eq(parse(ND_OP_SOFTMAX, "{\"inputs\":[" X23 "]}", NULL, &r, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(r.req.axis, 1);
    cr_assert_eq(r.noutputs, 1);
    nd_v2_request_free(&r);

    /* parameters: timeout, params, nulls as absent, unknown ones ignored */
    cr_assert_eq(parse(ND_OP_LAYERNORM,
                       "{\"id\":null,\"parameters\":{\"timeout\":2500,\"params\":\"ln-0.a_B\","
                       "\"eps\":null,\"sequence_id\":7,\"priority\":\"high\"},\"inputs\":[" X23
                       "],\"outputs\":null,\"unknown\":[1]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.timeout_us, 2500);
    cr_assert_str_eq(r.req.params, "ln-0.a_B");
    cr_assert_eq(r.req.eps, ND_LAYERNORM_EPS_DEFAULT);
    cr_assert_eq(r.has_id, 0);
    nd_v2_request_free(&r);

    /* prelu with a registered set needs no alpha; alpha_count is the server's to fill */
    cr_assert_eq(parse(ND_OP_PRELU, "{\"parameters\":{\"params\":\"p\"},\"inputs\":[" X23 "]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_null(r.req.alpha);
    cr_assert_eq(r.req.alpha_count, 0);
    nd_v2_request_free(&r);

    /* a rank-1 prelu x has one channel: alpha [1] */
    cr_assert_eq(parse(ND_OP_PRELU,
                       "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[4],\"data\":"
                       "[1,-2,3,-4]},{\"name\":\"alpha\",\"datatype\":\"FP16\",\"shape\":[1],"
                       "\"data\":[0.25]}]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.req.alpha_count, 1);
    cr_assert_eq(stored_bits(ND_FLOAT16, r.req.alpha, 0), 0x3400);
    nd_v2_request_free(&r);

    /* the header equal to the body's length: all JSON, nothing binary */
    const char *b = "{\"inputs\":[" X23 "]}";
    char h[24];
    snprintf(h, sizeof h, "%zu", strlen(b));
    cr_assert_eq(parse(ND_OP_SOFTMAX, b, h, &r, &err), 0, "%s", err.msg);
    nd_v2_request_free(&r);
    snprintf(h, sizeof h, "00%zu", strlen(b)); /* leading zeros are still decimal */
    cr_assert_eq(parse(ND_OP_SOFTMAX, b, h, &r, &err), 0, "%s", err.msg);
    nd_v2_request_free(&r);

    /* the id, up to ND_V2_ID_MAX - 1 bytes, kept as sent */
    char id[ND_V2_ID_MAX];
    memset(id, 'i', sizeof id - 1);
    id[sizeof id - 1] = '\0';
    sbuf bb = {0};
    sb_printf(&bb, "{\"id\":\"%s\",\"inputs\":[" X23 "]}", id);
    cr_assert_eq(parse(ND_OP_SOFTMAX, bb.p, NULL, &r, &err), 0, "%s", err.msg);
    cr_assert_str_eq(r.id, id);
    cr_assert_eq(r.has_id, 1);
    nd_v2_request_free(&r);
    free(bb.p);
}

/* Output selection: order, binary flags, the request-wide default and the per-output override. */
Test(v2, outputs)
{
    nd_v2_request r;
    nd_error err;
    cr_assert_eq(parse(ND_OP_LAYERNORM,
                       "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"rstd\",\"parameters\":"
                       "{\"binary_data\":true}},{\"name\":\"y\"}]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.noutputs, 2);
    cr_assert_eq(r.output_order[0], ND_OUT_RSTD);
    cr_assert_eq(r.output_order[1], ND_OUT_Y);
    cr_assert_eq(r.req.outputs, ND_OUT_Y | ND_OUT_RSTD);
    cr_assert_eq(r.binary_outputs, ND_OUT_RSTD);
    nd_v2_request_free(&r);

    /* mean alone: y is still computed (req.outputs) but not answered */
    cr_assert_eq(parse(ND_OP_LAYERNORM,
                       "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"mean\",\"parameters\":{}}]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.noutputs, 1);
    cr_assert_eq(r.output_order[0], ND_OUT_MEAN);
    cr_assert_eq(r.req.outputs, ND_OUT_Y | ND_OUT_MEAN);
    nd_v2_request_free(&r);

    /* binary_data_output: every output binary unless it says otherwise */
    cr_assert_eq(parse(ND_OP_LAYERNORM,
                       "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[" X23 "]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.binary_outputs, ND_OUT_Y | ND_OUT_MEAN | ND_OUT_RSTD);
    nd_v2_request_free(&r);
    cr_assert_eq(parse(ND_OP_LAYERNORM,
                       "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[" X23
                       "],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":false}},"
                       "{\"name\":\"mean\"}]}",
                       NULL, &r, &err),
                 0, "%s", err.msg);
    cr_assert_eq(r.binary_outputs, ND_OUT_MEAN);
    nd_v2_request_free(&r);

    /* an empty list is every output, as when absent */
    cr_assert_eq(parse(ND_OP_RMSNORM, "{\"inputs\":[" X23 "],\"outputs\":[]}", NULL, &r, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(r.noutputs, 2);
    nd_v2_request_free(&r);

    /* every permutation of layernorm's three */
    static const char *const names[3] = {"y", "mean", "rstd"};
    static const unsigned bits[3] = {ND_OUT_Y, ND_OUT_MEAN, ND_OUT_RSTD};
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int p = 0; p < 6; p++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"%s\"},{\"name\":\"%s\","
                 "\"parameters\":{\"binary_data\":true}},{\"name\":\"%s\"}]}",
                 names[perms[p][0]], names[perms[p][1]], names[perms[p][2]]);
        cr_assert_eq(parse(ND_OP_LAYERNORM, body, NULL, &r, &err), 0, "%s", err.msg);
        cr_assert_eq(r.noutputs, 3);
        for (int k = 0; k < 3; k++)
            cr_assert_eq(r.output_order[k], bits[perms[p][k]]);
        cr_assert_eq(r.binary_outputs, bits[perms[p][1]]);
        nd_v2_request_free(&r);
    }

    /* BF16: y in binary is fine, and so is a BF16 request that does not ask for y */
    const char *bf = "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":\"x\","
                     "\"datatype\":\"BF16\",\"shape\":[2],\"parameters\":{\"binary_data_size\":4}"
                     "}]}AAAA";
    char h[24];
    snprintf(h, sizeof h, "%zu", strlen(bf) - 4);
    cr_assert_eq(parse(ND_OP_RMSNORM, bf, h, &r, &err), 0, "%s", err.msg);
    cr_assert_eq(r.req.dtype, ND_BFLOAT16);
    nd_v2_request_free(&r);
    bf = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BF16\",\"shape\":[2],\"parameters\":"
         "{\"binary_data_size\":4}}],\"outputs\":[{\"name\":\"rstd\"}]}AAAA";
    snprintf(h, sizeof h, "%zu", strlen(bf) - 4);
    cr_assert_eq(parse(ND_OP_RMSNORM, bf, h, &r, &err), 0, "%s", err.msg);
    nd_v2_request_free(&r);
}

Test(v2, too_many_elements)
{
    nd_v2_request r;
    nd_error err;
    const char *b = "{\"inputs\":[" X23 "]}";
    cr_assert_eq(nd_v2_parse_infer(ND_OP_SOFTMAX, b, strlen(b), NULL, 5, &r, &err), 413);
    cr_assert(strstr(err.msg, "inputs[0].shape [2,3]: x has 6 elements, more than the limit of 5"),
              "%s", err.msg);
    cr_assert_eq(nd_v2_parse_infer(ND_OP_SOFTMAX, b, strlen(b), NULL, 6, &r, &err), 0);
    nd_v2_request_free(&r);
}

/* ======================================================================== rejections */

#define AUTO "auto" /* header: the length of json */

typedef struct reject_case {
    nd_op op;
    const char *header; /* NULL: none; AUTO: strlen(json) */
    const char *json;
    const char *bin; /* appended after json (no NUL bytes) */
    int status;
    const char *msg; /* a substring the message must contain */
} reject_case;

#define LN ND_OP_LAYERNORM
#define RMS ND_OP_RMSNORM
#define SM ND_OP_SOFTMAX
#define LSM ND_OP_LOG_SOFTMAX
#define PR ND_OP_PRELU
#define IN(s) "{\"inputs\":[" s "]}"
#define XB(shape, size) \
    "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":" shape \
    ",\"parameters\":{\"binary_data_size\":" size "}}"

/* x [2,3] or [1] FP32 with the given input parameters (no data) */
#define XS(shape, params) \
    "{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":" shape ",\"parameters\":{" params "}}"

static const reject_case rejects[] = {
    /* malformed */
    {SM, NULL, "", "", 400, "invalid JSON"},
    {SM, NULL, "{\"inputs\":[", "", 400, "invalid JSON"},
    {SM, NULL, "[1]", "", 400, "body: expected a JSON object, got an array"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"inputs\":[" X23 "]}", "", 400, "invalid JSON"},
    {SM, NULL, "{}", "", 400, "inputs: required"},
    {SM, NULL, "{\"inputs\":{}}", "", 400, "inputs: expected an array of objects, got an object"},
    {SM, NULL, IN("1"), "", 400, "inputs[0]: expected an object, got an integer"},
    {SM, NULL, IN(""), "", 400, "inputs: no input named \"x\""},
    {SM, NULL, "{\"id\":5,\"inputs\":[" X23 "]}", "", 400, "id: expected a string, got an integer"},
    {SM, NULL, "{\"parameters\":[],\"inputs\":[" X23 "]}", "", 400,
     "parameters: expected an object, got an array"},
    /* input names */
    {LN, NULL,
     IN(X23 ",{\"name\":\"weight\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2,3]}"), "",
     400, "inputs[1].name: unknown input \"weight\"; layernorm takes x, gamma, beta"},
    {RMS, NULL,
     IN(X23 ",{\"name\":\"gamma\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2,3]}"), "",
     400, "inputs[1].name: unknown input \"gamma\"; rmsnorm takes x, weight"},
    {SM, NULL, IN("{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].name: unknown input \"input\"; softmax takes x"},
    {PR, NULL, IN("{\"name\":\"X\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "unknown input \"X\"; prelu takes x, alpha"},
    {SM, NULL, IN(X23 "," X23), "", 400, "inputs[1].name: \"x\" given twice (also inputs[0])"},
    {SM, NULL, IN("{\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].name: required"},
    {SM, NULL, IN("{\"name\":1,\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].name: expected a string, got an integer"},
    {LN, NULL, IN("{\"name\":\"gamma\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs: no input named \"x\""},
    /* datatypes */
    {SM, NULL, IN("{\"name\":\"x\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].datatype: required"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"INT8\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].datatype: \"INT8\" is not supported; expected FP32, FP16 or BF16"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"fp32\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].datatype: \"fp32\" is not supported"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP64\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "\"FP64\" is not supported"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":32,\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].datatype: expected a string, got an integer"},
    {LN, NULL,
     IN("{\"name\":\"gamma\",\"datatype\":\"FP16\",\"shape\":[3],\"data\":[1,2,3]}," X23), "",
     400, "inputs[0].datatype: FP16, but x is FP32; every input must have x's datatype"},
    /* shapes */
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"data\":[1]}"), "", 400,
     "inputs[0].shape: required"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":2,\"data\":[1,2]}"), "", 400,
     "inputs[0].shape: expected an array of integers, got an integer"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[],\"data\":[1]}"), "", 400,
     "inputs[0].shape: must have 1 to 8 dimensions, got 0"},
    {SM, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]}"), "",
     400, "inputs[0].shape: must have 1 to 8 dimensions, got 9"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,0],\"data\":[1]}"), "", 400,
     "inputs[0].shape[1]=0: every dimension must be at least 1"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[-1],\"data\":[1]}"), "", 400,
     "inputs[0].shape[0]=-1: every dimension must be at least 1"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1.5],\"data\":[1]}"), "", 400,
     "inputs[0].shape[0]: expected an integer, got a real number"},
    {SM, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[4294967296,4294967296,4],\"data\":[1]}"),
     "", 400, "inputs[0].shape [4294967296,4294967296,4]: the element count overflows"},
    {SM, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1000000,1000000],\"data\":[[1]]}"), "",
     400, "inputs[0].data has 1 entries, shape [1000000,1000000] needs 1000000 there"},
    /* data */
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2]}"), "", 400,
     "inputs[0].data has 2 numbers, shape [3] needs 3"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[]}"), "", 400,
     "inputs[0].data has 0 numbers, shape [3] needs 3"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],[3]]}"),
     "", 400, "inputs[0].data[1] has 1 entries, shape [2,2] needs 2 there"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2,2],\"data\":[[1,2],3]}"), "",
     400, "inputs[0].data[1]: expected an array (shape [2,2] nests 2 deep), got an integer"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[[1],[2],[3]]}"),
     "", 400, "inputs[0].data[0]: expected a number, got an array"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":\"1,2\"}"), "",
     400, "inputs[0].data: expected an array of numbers, got a string"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2]}"), "", 400,
     "inputs[0].data: required"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":null}"), "", 400,
     "inputs[0].data: required"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,\"2\"]}"), "",
     400, "inputs[0].data[1]: expected a number, got a string"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,true]}"), "",
     400, "inputs[0].data[1]: expected a number, got a boolean"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[4],\"data\":[1,2,3,1e6]}"),
     "", 400, "inputs[0].data[3]=1e+06 is out of range for float16"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[1],\"data\":[65520]}"), "",
     400, "inputs[0].data[0]=65520 is out of range for float16"},
    {SM, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[2,2],\"data\":[[1,2],[3,-1e5]]}"), "",
     400, "inputs[0].data[1][1]=-100000 is out of range for float16"},
    {LN, NULL,
     IN(X23 ",{\"name\":\"beta\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[0,1e39,0]}"),
     "", 400, "inputs[1].data[1]=1e+39 is out of range for float32"},
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"BF16\",\"shape\":[1],\"data\":[1]}"), "", 400,
     "inputs[0].data: BF16 travels only as binary"},
    /* parameter tensors */
    {LN, NULL, IN(X23 ",{\"name\":\"gamma\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2]}"),
     "", 400, "inputs[1].shape: gamma must be [3] (x's last dimension), got [2]"},
    {LN, NULL,
     IN(X23 ",{\"name\":\"beta\",\"datatype\":\"FP32\",\"shape\":[1,3],\"data\":[1,2,3]}"), "",
     400, "inputs[1].shape: beta must be [3] (x's last dimension), got [1,3]"},
    {RMS, NULL,
     IN("{\"name\":\"weight\",\"datatype\":\"FP32\",\"shape\":[6],\"data\":[1,2,3,4,5,6]}," X23),
     "", 400, "inputs[0].shape: weight must be [3] (x's last dimension), got [6]"},
    {RMS, NULL, IN(X23 ",{\"name\":\"weight\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1,2]}"),
     "", 400, "inputs[1].data has 2 numbers, shape [3] needs 3"},
    {PR, NULL, IN(X23 ",{\"name\":\"alpha\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2]}"),
     "", 400, "inputs[1].shape: alpha must be [1] (shared) or [3] (one per channel"},
    {PR, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1,2,3,4]},{\"name\":"
        "\"alpha\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1,2]}"),
     "", 400, "inputs[1].shape: alpha must be [1], got [2]"},
    {PR, NULL, IN(X23), "", 400, "prelu needs an input named \"alpha\""},
    /* request parameters */
    {LN, NULL,
     "{\"parameters\":{\"params\":\"ln\"},\"inputs\":[" X23 ",{\"name\":\"gamma\",\"datatype\":"
     "\"FP32\",\"shape\":[3],\"data\":[1,2,3]}]}",
     "", 400, "parameters.params: cannot be combined with input gamma (inputs[1])"},
    {PR, NULL,
     "{\"parameters\":{\"params\":\"p\"},\"inputs\":[{\"name\":\"alpha\",\"datatype\":\"FP32\","
     "\"shape\":[1],\"data\":[1]}," X23 "]}",
     "", 400, "parameters.params: cannot be combined with input alpha (inputs[0])"},
    {LN, NULL, "{\"parameters\":{\"params\":\"a b\"},\"inputs\":[" X23 "]}", "", 400,
     "parameters.params: \"a b\" is not a valid name"},
    {LN, NULL, "{\"parameters\":{\"params\":7},\"inputs\":[" X23 "]}", "", 400,
     "parameters.params: expected a string, got an integer"},
    {LN, NULL, "{\"parameters\":{\"eps\":\"1e-5\"},\"inputs\":[" X23 "]}", "", 400,
     "parameters.eps: expected a number, got a string"},
    {LN, NULL, "{\"parameters\":{\"eps\":0},\"inputs\":[" X23 "]}", "", 400,
     "parameters.eps=0: must be a finite number greater than 0"},
    {RMS, NULL, "{\"parameters\":{\"eps\":1e300},\"inputs\":[" X23 "]}", "", 400,
     "parameters.eps=1e+300: does not fit a positive float32"},
    {SM, NULL, "{\"parameters\":{\"eps\":0.1},\"inputs\":[" X23 "]}", "", 400,
     "parameters.eps: not accepted by softmax"},
    {PR, NULL, "{\"parameters\":{\"eps\":0.1},\"inputs\":[" X23 "]}", "", 400,
     "parameters.eps: not accepted by prelu"},
    {SM, NULL, "{\"parameters\":{\"axis\":0.5},\"inputs\":[" X23 "]}", "", 400,
     "parameters.axis: expected an integer, got a real number"},
    {SM, NULL, "{\"parameters\":{\"axis\":2},\"inputs\":[" X23 "]}", "", 400,
     "parameters.axis=2 is out of range for a tensor of rank 2"},
    {LSM, NULL, "{\"parameters\":{\"axis\":-3},\"inputs\":[" X23 "]}", "", 400,
     "parameters.axis=-3 is out of range"},
    {LN, NULL, "{\"parameters\":{\"axis\":0},\"inputs\":[" X23 "]}", "", 400,
     "parameters.axis=0: layernorm normalizes over the last dimension only"},
    {PR, NULL,
     "{\"parameters\":{\"axis\":1},\"inputs\":[" X23 ",{\"name\":\"alpha\",\"datatype\":\"FP32\","
     "\"shape\":[1],\"data\":[1]}]}",
     "", 400, "parameters.axis: not accepted by prelu"},
    {SM, NULL, "{\"parameters\":{\"timeout\":-1},\"inputs\":[" X23 "]}", "", 400,
     "parameters.timeout=-1: must be at least 0"},
    {SM, NULL, "{\"parameters\":{\"timeout\":\"1s\"},\"inputs\":[" X23 "]}", "", 400,
     "parameters.timeout: expected an integer (microseconds), got a string"},
    {SM, NULL, "{\"parameters\":{\"binary_data_output\":1},\"inputs\":[" X23 "]}", "", 400,
     "parameters.binary_data_output: expected a boolean, got an integer"},
    /* input parameters and binary data */
    {SM, NULL, IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"parameters\":1}"), "",
     400, "inputs[0].parameters: expected an object, got an integer"},
    {SM, AUTO, IN(XB("[1]", "\"4\"")), "AAAA", 400,
     "inputs[0].parameters.binary_data_size: expected an integer, got a string"},
    {SM, AUTO, IN(XB("[1]", "-4")), "AAAA", 400,
     "inputs[0].parameters.binary_data_size=-4: must be at least 0"},
    {SM, NULL, IN(XB("[1]", "4")), "", 400,
     "inputs[0].parameters.binary_data_size: binary data needs the "
     "Inference-Header-Content-Length header"},
    {SM, AUTO,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],\"parameters\":"
        "{\"binary_data_size\":4}}"),
     "AAAA", 400, "inputs[0]: has both data and parameters.binary_data_size"},
    {SM, AUTO, IN(XB("[2]", "4")), "AAAA", 400,
     "inputs[0].parameters.binary_data_size=4: shape [2] of FP32 is 8 bytes"},
    {SM, AUTO, IN(XB("[2]", "8")), "AAAAAAAAAAAA", 400,
     "binary data: the inputs' binary_data_size add up to 8 bytes, but 12 bytes follow the"},
    {SM, AUTO, IN(XB("[2]", "8")), "AAAA", 400, "add up to 8 bytes, but 4 bytes follow"},
    {SM, AUTO, IN(X23), "AAAA", 400, "add up to 0 bytes, but 4 bytes follow"},
    {LN, AUTO,
     IN(XB("[2,2]", "16") ",{\"name\":\"gamma\",\"datatype\":\"FP32\",\"shape\":[2],\"parameters\""
                          ":{\"binary_data_size\":8}}"),
     "AAAAAAAAAAAAAAAAAAAA", 400, "add up to 24 bytes, but 20 bytes follow"},
    {SM, AUTO, IN(XB("[1]", "4")), "", 400, "add up to 4 bytes, but 0 bytes follow"},
    /* the header */
    {SM, "-1", IN(X23), "", 400, "Inference-Header-Content-Length: \"-1\" is not a byte count"},
    {SM, "+12", IN(X23), "", 400, "Inference-Header-Content-Length: \"+12\" is not a byte count"},
    {SM, "abc", IN(X23), "", 400, "Inference-Header-Content-Length: \"abc\" is not a byte count"},
    {SM, "12x", IN(X23), "", 400, "Inference-Header-Content-Length: \"12x\" is not a byte count"},
    {SM, " 12", IN(X23), "", 400, "Inference-Header-Content-Length: \" 12\" is not a byte count"},
    {SM, "12 ", IN(X23), "", 400, "Inference-Header-Content-Length: \"12 \" is not a byte count"},
    {SM, "1.5", IN(X23), "", 400, "\"1.5\" is not a byte count"},
    {SM, "0x10", IN(X23), "", 400, "\"0x10\" is not a byte count"},
    {SM, "", IN(X23), "", 400, "Inference-Header-Content-Length: empty"},
    {SM, "1000", IN(X23), "", 400,
     "Inference-Header-Content-Length: 1000 is more than the body's 78 bytes"},
    {SM, "99999999999999999999", IN(X23), "", 400,
     "Inference-Header-Content-Length: 99999999999999999999 is more than the body's"},
    {SM, "184467440737095516160", IN(X23), "", 400, "is more than the body's"},
    {SM, "0", IN(X23), "", 400, "invalid JSON"},
    {SM, "20", IN(X23), "", 400, "invalid JSON"},
    /* outputs */
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":{}}", "", 400,
     "outputs: expected an array of objects, got an object"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[\"y\"]}", "", 400,
     "outputs[0]: expected an object, got a string"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{}]}", "", 400, "outputs[0].name: required"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":[]}]}", "", 400,
     "outputs[0].name: expected a string, got an array"},
    {LN, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\"},{\"name\":\"var\"}]}", "", 400,
     "outputs[1].name: unknown output \"var\"; expected y, mean or rstd"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"Y\"}]}", "", 400,
     "outputs[0].name: unknown output \"Y\"; expected y"},
    {RMS, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"mean\"}]}", "", 400,
     "outputs[0].name: \"mean\" is produced by layernorm only, not rmsnorm"},
    {LSM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"rstd\"}]}", "", 400,
     "outputs[0].name: \"rstd\" is produced by layernorm and rmsnorm only, not log_softmax"},
    {LN, NULL,
     "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\"},{\"name\":\"mean\"},{\"name\":\"y\"}]}",
     "", 400, "outputs[2].name: \"y\" named twice"},
    {SM, NULL, "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\",\"parameters\":[]}]}", "", 400,
     "outputs[0].parameters: expected an object, got an array"},
    {SM, NULL,
     "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":\"1\"}}]}",
     "", 400, "outputs[0].parameters.binary_data: expected a boolean, got a string"},
    {RMS, AUTO,
     "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BF16\",\"shape\":[2],\"parameters\":"
     "{\"binary_data_size\":4}}],\"outputs\":[{\"name\":\"rstd\"},{\"name\":\"y\"}]}",
     "AAAA", 400, "outputs[1]: a BF16 y travels only as binary"},
    {SM, AUTO,
     "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BF16\",\"shape\":[2],\"parameters\":"
     "{\"binary_data_size\":4}}]}",
     "AAAA", 400, "outputs: a BF16 y travels only as binary"},
    {SM, AUTO,
     "{\"parameters\":{\"binary_data_output\":true},\"inputs\":[{\"name\":\"x\",\"datatype\":"
     "\"BF16\",\"shape\":[2],\"parameters\":{\"binary_data_size\":4}}],\"outputs\":[{\"name\":"
     "\"y\",\"parameters\":{\"binary_data\":false}}]}",
     "AAAA", 400, "outputs[0]: a BF16 y travels only as binary"},
    /* shared memory */
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_region\":\"r\"")), "", 400,
     "inputs[0].parameters: shared_memory_region and shared_memory_byte_size go together "
     "(shared_memory_byte_size is missing)"},
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_byte_size\":24")), "", 400,
     "(shared_memory_region is missing)"},
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_offset\":8")), "", 400,
     "(shared_memory_region is missing)"},
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_region\":1,\"shared_memory_byte_size\":24")), "",
     400, "inputs[0].parameters.shared_memory_region: expected a string, got an integer"},
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_region\":\"\",\"shared_memory_byte_size\":24")),
     "", 400, "inputs[0].parameters.shared_memory_region: a region name has 1 to 63 bytes, got 0"},
    {SM, NULL,
     IN(XS("[2,3]", "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":\"24\"")), "",
     400, "inputs[0].parameters.shared_memory_byte_size: expected an integer, got a string"},
    {SM, NULL,
     IN(XS("[2,3]", "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":24,"
                    "\"shared_memory_offset\":-8")),
     "", 400, "inputs[0].parameters.shared_memory_offset=-8: must be at least 0"},
    {SM, NULL, IN(XS("[2,3]", "\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":20")),
     "", 400, "inputs[0].parameters.shared_memory_byte_size=20: shape [2,3] of FP32 is 24 bytes"},
    {SM, NULL,
     IN("{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1],\"parameters\":"
        "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}"),
     "", 400, "inputs[0]: has both data and parameters.shared_memory_region"},
    {SM, AUTO,
     IN(XS("[1]", "\"binary_data_size\":4,\"shared_memory_region\":\"r\","
                  "\"shared_memory_byte_size\":4")),
     "AAAA", 400, "inputs[0]: has both parameters.binary_data_size and "
                  "parameters.shared_memory_region"},
    {LN, NULL,
     "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\",\"parameters\":{"
     "\"shared_memory_region\":\"o\",\"shared_memory_byte_size\":23}}]}",
     "", 400, "outputs[0].parameters.shared_memory_byte_size=23: y is 24 bytes"},
    {LN, NULL,
     "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\"},{\"name\":\"rstd\",\"parameters\":{"
     "\"shared_memory_region\":\"o\",\"shared_memory_byte_size\":4}}]}",
     "", 400, "outputs[1].parameters.shared_memory_byte_size=4: rstd is 8 bytes"},
    {LN, NULL,
     "{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"mean\",\"parameters\":{"
     "\"shared_memory_byte_size\":8}}]}",
     "", 400, "outputs[0].parameters: shared_memory_region and shared_memory_byte_size go "
              "together"},
};

Test(v2, rejections)
{
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++) {
        const reject_case *c = &rejects[i];
        sbuf b = {0};
        char h[24];
        const char *header = c->header;
        sb_printf(&b, "%s%s", c->json, c->bin);
        if (header && !strcmp(header, AUTO)) {
            snprintf(h, sizeof h, "%zu", strlen(c->json));
            header = h;
        }
        /* an exact-size copy, so that ASan sees a read past the body */
        char *body = malloc(b.len ? b.len : 1);
        memcpy(body, b.p, b.len);
        nd_v2_request r;
        nd_error err;
        memset(&err, 0, sizeof err);
        int rc = nd_v2_parse_infer(c->op, body, b.len, header, 0, &r, &err);
        cr_expect_eq(rc, c->status, "case %zu (%s %s): status %d, want %d (%s)", i,
                     nd_op_name(c->op), c->json, rc, c->status, err.msg);
        cr_expect(strstr(err.msg, c->msg) != NULL, "case %zu (%s): message \"%s\" lacks \"%s\"",
                  i, c->json, err.msg, c->msg);
        cr_expect_null(r.req.owned, "case %zu leaves memory behind", i);
        cr_expect_null(r.req.x, "case %zu leaves a pointer behind", i);
        if (rc == 0)
            nd_v2_request_free(&r);
        free(body);
        free(b.p);
    }
}

Test(v2, id_too_long)
{
    sbuf b = {0};
    sb_printf(&b, "{\"id\":\"");
    for (int i = 0; i < ND_V2_ID_MAX; i++)
        sb_printf(&b, "i");
    sb_printf(&b, "\",\"inputs\":[" X23 "]}");
    nd_v2_request r;
    nd_error err;
    cr_assert_eq(parse(ND_OP_SOFTMAX, b.p, NULL, &r, &err), 400);
    cr_assert(strstr(err.msg, "id: 256 bytes, more than the 255 allowed"), "%s", err.msg);
    free(b.p);
}

/* A small request with binary tensors, cut at every length and read with every header value: a
 * 400 each time but for the one right pair, and never a read past the body (run under ASan). */
Test(v2, truncated_and_every_header)
{
    const char *json = "{\"id\":\"t\",\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":"
                       "[2,3],\"parameters\":{\"binary_data_size\":12}},{\"name\":\"gamma\","
                       "\"datatype\":\"FP16\",\"shape\":[3],\"data\":[1,2,3]},{\"name\":\"beta\","
                       "\"datatype\":\"FP16\",\"shape\":[3],\"parameters\":{\"binary_data_size\""
                       ":6}}],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}"
                       ",{\"name\":\"rstd\"}]}";
    const size_t jl = strlen(json);
    sbuf b = {0};
    sb_bytes(&b, json, jl);
    for (int i = 0; i < 9; i++) {
        uint16_t h = (uint16_t)(0x3c00 + i);
        sb_bytes(&b, &h, 2);
    }
    char hs[24];
    snprintf(hs, sizeof hs, "%zu", jl);
    for (size_t cut = 0; cut <= b.len; cut++) {
        char *body = malloc(cut ? cut : 1);
        memcpy(body, b.p, cut);
        nd_v2_request r;
        nd_error err = {{0}};
        int rc = nd_v2_parse_infer(ND_OP_LAYERNORM, body, cut, hs, 0, &r, &err);
        if (cut == b.len) {
            cr_assert_eq(rc, 0, "%s", err.msg);
            cr_assert_eq(stored_bits(ND_FLOAT16, r.req.x, 5), 0x3c05);
            cr_assert_eq(stored_bits(ND_FLOAT16, r.req.beta, 2), 0x3c08);
            cr_assert_eq(stored_bits(ND_FLOAT16, r.req.gamma, 2), 0x4200);
            cr_assert_eq((const char *)r.req.x, body + jl);
            cr_assert_eq((const char *)r.req.beta, body + jl + 12);
            nd_v2_request_free(&r);
        } else {
            cr_assert_eq(rc, 400, "cut %zu: %d %s", cut, rc, err.msg);
        }
        /* and the same cut with no header: all of it read as JSON */
        rc = nd_v2_parse_infer(ND_OP_LAYERNORM, body, cut, NULL, 0, &r, &err);
        cr_assert_eq(rc, 400, "cut %zu without header: %d", cut, rc);
        free(body);
    }
    char *body = malloc(b.len);
    memcpy(body, b.p, b.len);
    for (size_t h = 0; h <= b.len + 2; h++) {
        nd_v2_request r;
        nd_error err = {{0}};
        snprintf(hs, sizeof hs, "%zu", h);
        int rc = nd_v2_parse_infer(ND_OP_LAYERNORM, body, b.len, hs, 0, &r, &err);
        cr_assert_eq(rc, h == jl ? 0 : 400, "header %zu: %d %s", h, rc, err.msg);
        if (h > b.len)
            cr_assert(strstr(err.msg, "Inference-Header-Content-Length"), "%s", err.msg);
        if (rc == 0)
            nd_v2_request_free(&r);
    }
    free(body);
    free(b.p);
}

/* ======================================================================== encode */

/* The JSON part of an answer, parsed; checks the fixed fields. */
static json_t *answer_json(const char *out, size_t json_len, const char *model)
{
    json_error_t jerr;
    json_t *a = json_loadb(out, json_len, JSON_REJECT_DUPLICATES, &jerr);
    cr_assert_not_null(a, "answer is not JSON: %s\n%.*s", jerr.text, (int)json_len, out);
    cr_assert_str_eq(json_string_value(json_object_get(a, "model_name")), model);
    cr_assert_str_eq(json_string_value(json_object_get(a, "model_version")), "1");
    cr_assert(json_is_array(json_object_get(a, "outputs")));
    return a;
}

static void expect_shape(const json_t *o, const int64_t *shape, int nd)
{
    const json_t *s = json_object_get(o, "shape");
    cr_assert_eq(json_array_size(s), (size_t)nd);
    for (int i = 0; i < nd; i++)
        cr_assert_eq(json_integer_value(json_array_get(s, i)), shape[i], "shape[%d]", i);
}

/* Random requests of every op and dtype, every subset and order of outputs, JSON or binary: the
 * answer parses, names the outputs in order with their datatypes and shapes, and holds y, mean and
 * rstd exactly (binary bytes compared; JSON numbers read back through /v1's parser). */
Test(encode, every_op_and_output_choice)
{
    uint64_t s = rng_init();
    static const char *const names[3] = {"y", "mean", "rstd"};
    static const unsigned bits[3] = {ND_OUT_Y, ND_OUT_MEAN, ND_OUT_RSTD};
    for (int iter = 0; iter < 300; iter++) {
        nd_op op = (nd_op)(iter % ND_OP_COUNT);
        int d = (int)rnd_range(&s, 0, 2);
        nd_dtype dt = dtypes[d];
        tcase c;
        tcase_make(&s, &c, op, d, 1);
        /* outputs this op has, in a random order and subset (possibly none: all) */
        int have[3], nh = 0;
        for (int k = 0; k < 3; k++)
            if (k == 0 || (k == 1 && op == ND_OP_LAYERNORM) || (k == 2 && is_norm(op)))
                have[nh++] = k;
        for (int i = nh - 1; i > 0; i--) {
            int j = (int)rnd_range(&s, 0, i), t = have[i];
            have[i] = have[j];
            have[j] = t;
        }
        int nsel = (int)rnd_range(&s, 0, nh);
        int bin[3];
        sbuf ob = {0};
        sb_printf(&ob, "[");
        for (int k = 0; k < nsel; k++) {
            bin[k] = (int)(rnd(&s) % 2);
            if (dt == ND_BFLOAT16 && have[k] == 0)
                bin[k] = 1;
            sb_printf(&ob, "%s{\"name\":\"%s\",\"parameters\":{\"binary_data\":%s}}", k ? "," : "",
                      names[have[k]], bin[k] ? "true" : "false");
        }
        sb_printf(&ob, "]");
        int all_binary = nsel == 0 && (dt == ND_BFLOAT16 || rnd(&s) % 2);

        sbuf b = {0};
        size_t hl;
        char hs[24];
        v2_body(&s, &c, &b, &hl, 0, all_binary ? "\"binary_data_output\":true" : NULL, ob.p);
        snprintf(hs, sizeof hs, "%zu", hl);
        nd_v2_request r;
        nd_error err = {{0}};
        int rc = nd_v2_parse_infer(op, b.p, b.len, hl ? hs : NULL, 0, &r, &err);
        cr_assert_eq(rc, 0, "seed %llu: %s\n%s", (unsigned long long)seed0, err.msg, b.p);

        /* y: x's bits with some non-finite values; stats: random floats */
        const int64_t n = r.req.elems, rows = nd_request_stat_rows(&r.req);
        const size_t es = esize(dt);
        char *y = malloc((size_t)n * es);
        memcpy(y, r.req.x, (size_t)n * es);
        if (n > 1 && dt == ND_FLOAT32) {
            uint32_t inf = 0x7f800000u;
            memcpy(y + 4, &inf, 4);
        } else if (n > 1) {
            uint16_t nan = dt == ND_FLOAT16 ? 0x7e00 : 0x7fc0;
            memcpy(y + 2, &nan, 2);
        }
        float *mean = malloc((size_t)(rows ? rows : 1) * 4);
        float *rstd = malloc((size_t)(rows ? rows : 1) * 4);
        for (int64_t i = 0; i < rows; i++) {
            uint32_t u;
            mean[i] = (float)rnd_value(&s, ND_FLOAT32, &u);
            rstd[i] = (float)rnd_value(&s, ND_FLOAT32, &u);
        }

        char *out;
        size_t len, jl;
        cr_assert_eq(nd_v2_encode_infer(&r, y, mean, rstd, &out, &len, &jl), 0);
        json_t *a = answer_json(out, jl, nd_op_name(op));
        cr_assert_str_eq(json_string_value(json_object_get(a, "id")), r.id);
        const json_t *outs = json_object_get(a, "outputs");
        const int want_n = nsel ? nsel : nh;
        cr_assert_eq(json_array_size(outs), (size_t)want_n, "seed %llu", (unsigned long long)seed0);
        size_t off = jl;
        for (int k = 0; k < want_n; k++) {
            const json_t *o = json_array_get(outs, (size_t)k);
            int which = nsel ? have[k] : (k == 0 ? 0 : op == ND_OP_LAYERNORM ? k : 2);
            int is_bin = nsel ? bin[k] : all_binary;
            cr_assert_str_eq(json_string_value(json_object_get(o, "name")), names[which]);
            cr_assert_eq(r.output_order[k], bits[which]);
            const void *src = which == 0 ? (const void *)y : which == 1 ? (const void *)mean
                                                                         : (const void *)rstd;
            nd_dtype odt = which == 0 ? dt : ND_FLOAT32;
            int64_t cnt = which == 0 ? n : rows;
            cr_assert_str_eq(json_string_value(json_object_get(o, "datatype")),
                             nd_v2_datatype_name(odt));
            if (which == 0) {
                expect_shape(o, r.req.shape, r.req.ndim);
            } else if (r.req.ndim > 1) {
                expect_shape(o, r.req.shape, r.req.ndim - 1);
            } else {
                const int64_t one = 1;
                expect_shape(o, &one, 1);
            }
            size_t bytes = (size_t)cnt * esize(odt);
            if (is_bin) {
                cr_assert_null(json_object_get(o, "data"));
                const json_t *p = json_object_get(o, "parameters");
                cr_assert_eq(json_integer_value(json_object_get(p, "binary_data_size")),
                             (json_int_t)bytes);
                cr_assert_leq(off + bytes, len);
                cr_assert_eq(memcmp(out + off, src, bytes), 0, "seed %llu: %s bytes",
                             (unsigned long long)seed0, names[which]);
                off += bytes;
            } else {
                const json_t *data = json_object_get(o, "data");
                cr_assert_eq(json_array_size(data), (size_t)cnt);
                /* read back as /v1 reads decimals: non-finite values come back as null */
                for (int64_t i = 0; i < cnt; i++) {
                    const json_t *v = json_array_get(data, (size_t)i);
                    uint32_t want = stored_bits(odt, src, i);
                    double wv = odt == ND_FLOAT32 ? f32_value(want)
                                : odt == ND_FLOAT16 ? half_value((uint16_t)want)
                                                    : bf16_value((uint16_t)want);
                    if (!isfinite(wv)) {
                        cr_assert(json_is_null(v), "seed %llu: %s[%lld] not null",
                                  (unsigned long long)seed0, names[which], (long long)i);
                        continue;
                    }
                    cr_assert(json_is_number(v));
                    char body[128];
                    char *txt = json_dumps(v, JSON_ENCODE_ANY);
                    snprintf(body, sizeof body, "{\"dtype\":\"%s\",\"data\":[%s]}",
                             odt == ND_FLOAT32 ? "float32" : odt == ND_FLOAT16 ? "float16"
                                                                               : "bfloat16",
                             txt);
                    free(txt);
                    nd_request back;
                    cr_assert_eq(nd_proto_parse_json(ND_OP_SOFTMAX, body, strlen(body), 0, &back,
                                                     &err),
                                 0, "%s: %s", body, err.msg);
                    cr_assert_eq(stored_bits(odt, back.x, 0), want,
                                 "seed %llu: %s[%lld]: %s reads back as 0x%x, want 0x%x",
                                 (unsigned long long)seed0, names[which], (long long)i, body,
                                 stored_bits(odt, back.x, 0), want);
                    nd_request_free(&back);
                }
            }
        }
        cr_assert_eq(off, len, "seed %llu: binary part", (unsigned long long)seed0);
        cr_assert_eq(out[len], '\0');
        json_decref(a);
        free(out);
        free(y);
        free(mean);
        free(rstd);
        nd_v2_request_free(&r);
        free(ob.p);
        free(b.p);
        tcase_free(&c);
    }
}

/* The id goes back JSON-escaped; a y that was not computed is left out. */
Test(encode, id_escaping_and_missing_outputs)
{
    nd_v2_request r;
    nd_error err;
    const char *body =
        "{\"id\":\"a\\\"b\\\\c\\nd\\u0001\\u20ac/\",\"inputs\":[" X23 "],\"outputs\":[{\"name\":"
        "\"mean\"},{\"name\":\"y\"}]}";
    cr_assert_eq(parse(ND_OP_LAYERNORM, body, NULL, &r, &err), 0, "%s", err.msg);
    cr_assert_str_eq(r.id, "a\"b\\c\nd\x01\xe2\x82\xac/");
    float y[6] = {1, 2, 3, 4, 5, 6}, mean[2] = {0.5f, -0.25f};
    char *out;
    size_t len, jl;
    cr_assert_eq(nd_v2_encode_infer(&r, y, mean, NULL, &out, &len, &jl), 0);
    cr_assert_eq(len, jl);
    json_t *a = answer_json(out, jl, "layernorm");
    cr_assert_str_eq(json_string_value(json_object_get(a, "id")), r.id);
    const json_t *outs = json_object_get(a, "outputs");
    cr_assert_eq(json_array_size(outs), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(outs, 0), "name")), "mean");
    const json_t *m = json_object_get(json_array_get(outs, 0), "data");
    cr_assert_eq(json_real_value(json_array_get(m, 1)), -0.25);
    json_decref(a);
    free(out);

    /* mean not computed (NULL): left out */
    cr_assert_eq(nd_v2_encode_infer(&r, y, NULL, NULL, &out, &len, &jl), 0);
    a = answer_json(out, jl, "layernorm");
    cr_assert_eq(json_array_size(json_object_get(a, "outputs")), 1);
    json_decref(a);
    free(out);
    nd_v2_request_free(&r);

    /* no id: no "id" key */
    cr_assert_eq(parse(ND_OP_SOFTMAX, "{\"inputs\":[" X23 "]}", NULL, &r, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(nd_v2_encode_infer(&r, y, NULL, NULL, &out, &len, &jl), 0);
    a = answer_json(out, jl, "softmax");
    cr_assert_null(json_object_get(a, "id"));
    json_decref(a);
    free(out);
    nd_v2_request_free(&r);

    /* a request built by hand, without output_order: what req.outputs says */
    nd_v2_request h;
    memset(&h, 0, sizeof h);
    h.req.op = ND_OP_RMSNORM;
    h.req.dtype = ND_FLOAT32;
    h.req.ndim = 2;
    h.req.shape[0] = 2;
    h.req.shape[1] = 3;
    h.req.outer = 2;
    h.req.mid = 3;
    h.req.inner = 1;
    h.req.elems = 6;
    h.req.outputs = ND_OUT_Y | ND_OUT_RSTD;
    h.binary_outputs = ND_OUT_RSTD;
    cr_assert_eq(nd_v2_encode_infer(&h, y, NULL, mean, &out, &len, &jl), 0);
    cr_assert_eq(len, jl + 8);
    cr_assert_eq(memcmp(out + jl, mean, 8), 0);
    a = answer_json(out, jl, "rmsnorm");
    outs = json_object_get(a, "outputs");
    cr_assert_eq(json_array_size(outs), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(outs, 1), "name")), "rstd");
    json_decref(a);
    free(out);
}

/* ======================================================================== documents */

static json_t *load_doc(char *s)
{
    json_error_t jerr;
    cr_assert_not_null(s);
    json_t *d = json_loads(s, JSON_REJECT_DUPLICATES, &jerr);
    cr_assert_not_null(d, "%s: %s", jerr.text, s);
    free(s);
    return d;
}

static int has_string(const json_t *arr, const char *s)
{
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (json_string_value(json_array_get(arr, i)) &&
            !strcmp(json_string_value(json_array_get(arr, i)), s))
            return 1;
    return 0;
}

/* The "name"s of the objects in arr, comma-joined. */
static void names_of(const json_t *arr, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < json_array_size(arr) && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? "," : "",
                              json_string_value(json_object_get(json_array_get(arr, i), "name")));
}

static const char *const want_inputs[ND_OP_COUNT] = {"x,gamma,beta", "x,weight", "x", "x",
                                                     "x,alpha"};
static const char *const want_outputs[ND_OP_COUNT] = {"y,mean,rstd", "y,rstd", "y", "y", "y"};

Test(documents, server_metadata)
{
    for (int shm = 0; shm < 4; shm++) {
        json_t *d = load_doc(nd_v2_server_metadata_json("1.2.3-\"dev\"", shm & 1, shm >> 1));
        cr_assert_str_eq(json_string_value(json_object_get(d, "name")), "normd");
        cr_assert_str_eq(json_string_value(json_object_get(d, "version")), "1.2.3-\"dev\"");
        const json_t *ext = json_object_get(d, "extensions");
        cr_assert(has_string(ext, "binary_tensor_data"));
        cr_assert(has_string(ext, "statistics"));
        cr_assert(has_string(ext, "model_configuration"));
        cr_assert_eq(has_string(ext, "system_shared_memory"), shm & 1,
                     "system_shared_memory listed: %d, enabled: %d",
                     has_string(ext, "system_shared_memory"), shm & 1);
        cr_assert_eq(has_string(ext, "cuda_shared_memory"), shm >> 1,
                     "cuda_shared_memory listed: %d, enabled: %d",
                     has_string(ext, "cuda_shared_memory"), shm >> 1);
        json_decref(d);
    }
}

Test(documents, model_metadata)
{
    char buf[128];
    for (int op = 0; op < ND_OP_COUNT; op++) {
        json_t *d = load_doc(nd_v2_model_metadata_json((nd_op)op));
        cr_assert_str_eq(json_string_value(json_object_get(d, "name")), nd_op_name((nd_op)op));
        cr_assert_str_eq(json_string_value(json_object_get(d, "platform")), "normd");
        cr_assert(has_string(json_object_get(d, "versions"), "1"));
        const json_t *in = json_object_get(d, "inputs"), *out = json_object_get(d, "outputs");
        names_of(in, buf, sizeof buf);
        cr_assert_str_eq(buf, want_inputs[op]);
        names_of(out, buf, sizeof buf);
        cr_assert_str_eq(buf, want_outputs[op]);
        for (size_t i = 0; i < json_array_size(in); i++) {
            const json_t *t = json_array_get(in, i);
            cr_assert_str_eq(json_string_value(json_object_get(t, "datatype")), "FP32");
            const json_t *sh = json_object_get(t, "shape");
            cr_assert_eq(json_array_size(sh), i == 0 ? 2 : 1);
            cr_assert_eq(json_integer_value(json_array_get(sh, 0)), -1);
        }
        for (size_t i = 0; i < json_array_size(out); i++)
            cr_assert_str_eq(json_string_value(json_object_get(json_array_get(out, i), "datatype")),
                             "FP32");
        json_decref(d);
    }
    cr_assert_null(nd_v2_model_metadata_json(ND_OP_COUNT));
}

Test(documents, model_config)
{
    char buf[128];
    nd_v2_model_policy pol = {.max_batch_rows = 65536, .max_delay_us = 250, .queue_limit = 4096};
    for (int op = 0; op < ND_OP_COUNT; op++) {
        json_t *d = load_doc(nd_v2_model_config_json((nd_op)op, &pol));
        cr_assert_str_eq(json_string_value(json_object_get(d, "name")), nd_op_name((nd_op)op));
        cr_assert_str_eq(json_string_value(json_object_get(d, "platform")), "normd");
        cr_assert_str_eq(json_string_value(json_object_get(d, "backend")), "normd");
        cr_assert_eq(json_integer_value(json_object_get(d, "max_batch_size")), 0);
        const json_t *in = json_object_get(d, "input"), *out = json_object_get(d, "output");
        names_of(in, buf, sizeof buf);
        cr_assert_str_eq(buf, want_inputs[op]);
        names_of(out, buf, sizeof buf);
        cr_assert_str_eq(buf, want_outputs[op]);
        for (size_t i = 0; i < json_array_size(in); i++) {
            const json_t *t = json_array_get(in, i);
            cr_assert_str_eq(json_string_value(json_object_get(t, "data_type")), "TYPE_FP32");
            cr_assert(json_is_array(json_object_get(t, "dims")));
            cr_assert_eq(json_is_true(json_object_get(t, "optional")), i > 0);
        }
        const json_t *db = json_object_get(d, "dynamic_batching");
        cr_assert_eq(json_integer_value(json_object_get(db, "max_queue_delay_microseconds")), 250);
        cr_assert_eq(json_integer_value(json_object_get(json_object_get(db, "default_queue_policy"),
                                                        "max_queue_size")),
                     4096);
        const json_t *p = json_object_get(d, "parameters");
        cr_assert_str_eq(
            json_string_value(json_object_get(json_object_get(p, "datatypes"), "string_value")),
            "FP32,FP16,BF16");
        const json_t *rows = json_object_get(p, "max_batch_rows");
        cr_assert_str_eq(json_string_value(json_object_get(rows, "string_value")), "65536");
        json_decref(d);
    }
}

Test(documents, stats)
{
    nd_op ops[2] = {ND_OP_RMSNORM, ND_OP_PRELU};
    nd_v2_stats st[2];
    memset(st, 0, sizeof st);
    st[0] = (nd_v2_stats){.last_inference_ms = 1700000000123ull, .inference_count = 10,
                          .execution_count = 3, .success_count = 9, .success_ns = 9000,
                          .fail_count = 1, .fail_ns = 100, .queue_count = 10, .queue_ns = 500,
                          .compute_input_count = 10, .compute_input_ns = 11,
                          .compute_infer_count = 10, .compute_infer_ns = 12,
                          .compute_output_count = 10, .compute_output_ns = UINT64_MAX};
    json_t *d = load_doc(nd_v2_stats_json(ops, st, 2));
    const json_t *ms = json_object_get(d, "model_stats");
    cr_assert_eq(json_array_size(ms), 2);
    const json_t *m = json_array_get(ms, 0);
    cr_assert_str_eq(json_string_value(json_object_get(m, "name")), "rmsnorm");
    cr_assert_str_eq(json_string_value(json_object_get(m, "version")), "1");
    cr_assert_eq(json_integer_value(json_object_get(m, "last_inference")), 1700000000123ll);
    cr_assert_eq(json_integer_value(json_object_get(m, "inference_count")), 10);
    cr_assert_eq(json_integer_value(json_object_get(m, "execution_count")), 3);
    const json_t *is = json_object_get(m, "inference_stats");
    static const char *const keys[] = {"success",       "fail",          "queue",
                                       "compute_input", "compute_infer", "compute_output"};
    for (int k = 0; k < 6; k++) {
        const json_t *e = json_object_get(is, keys[k]);
        cr_assert(json_is_integer(json_object_get(e, "count")), "%s.count", keys[k]);
        cr_assert(json_is_integer(json_object_get(e, "ns")), "%s.ns", keys[k]);
    }
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(is, "success"), "ns")), 9000);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(is, "fail"), "count")), 1);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(is, "compute_output"), "ns")),
                 INT64_MAX); /* clamped */
    cr_assert(json_is_array(json_object_get(m, "batch_stats")));
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(ms, 1), "name")), "prelu");
    json_decref(d);

    d = load_doc(nd_v2_stats_json(ops, st, 0));
    cr_assert_eq(json_array_size(json_object_get(d, "model_stats")), 0);
    json_decref(d);
}

Test(documents, datatype_names)
{
    cr_assert_str_eq(nd_v2_datatype_name(ND_FLOAT32), "FP32");
    cr_assert_str_eq(nd_v2_datatype_name(ND_FLOAT16), "FP16");
    cr_assert_str_eq(nd_v2_datatype_name(ND_BFLOAT16), "BF16");
}

/* The answer written into y's own buffer (the room before y) is byte for byte the copied one,
 * and the copying path is taken whenever it must be: another binary output, no room, an id whose
 * escaped form does not fit. */
Test(encode, in_room_answer_is_the_copied_answer)
{
    enum { ROOM = 2048, N = 6 }; /* routes_v2.c's room */
    struct {
        const char *body;
        int in_room;
    } cases[] = {
        {"{\"id\":\"r-17\",\"parameters\":{\"binary_data_output\":true},\"inputs\":[" X23
         "],\"outputs\":[{\"name\":\"y\"}]}", 1},
        {"{\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}},"
         "{\"name\":\"mean\"},{\"name\":\"rstd\"}]}", 1},
        {"{\"parameters\":{\"binary_data_output\":true},\"inputs\":[" X23 "],\"outputs\":[{\"name\":"
         "\"y\"},{\"name\":\"rstd\"}]}", 0}, /* rstd binary too: it must follow y */
        {"{\"inputs\":[" X23 "]}", 0},                                       /* y as JSON */
        {NULL, 0}, /* an id whose escaped form does not fit: built below */
    };
    char long_id[2048];
    int n = sprintf(long_id, "{\"id\":\"");
    for (int k = 0; k < 250; k++)
        n += sprintf(long_id + n, "\\u0001");
    sprintf(long_id + n, "\",\"inputs\":[" X23 "],\"outputs\":[{\"name\":\"y\",\"parameters\":"
            "{\"binary_data\":true}},{\"name\":\"mean\"},{\"name\":\"rstd\"}]}");
    cases[4].body = long_id;
    srand(29);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nd_v2_request r;
        nd_error err;
        cr_assert_eq(parse(ND_OP_LAYERNORM, cases[i].body, NULL, &r, &err), 0, "%zu: %s", i,
                     err.msg);
        char *buf = malloc(ROOM + N * sizeof(float));
        memset(buf, 0x5a, ROOM); /* poison the room */
        float *y = (float *)(buf + ROOM), mean[2], rstd[2];
        for (int k = 0; k < N; k++)
            y[k] = (float)rand() / RAND_MAX - 0.5f;
        mean[0] = 0.125f, mean[1] = -3.0f, rstd[0] = 2.5f, rstd[1] = 1e-3f;
        char *ref, *out;
        size_t rlen, rjl, len, jl;
        cr_assert_eq(nd_v2_encode_infer(&r, y, mean, rstd, &ref, &rlen, &rjl), 0);
        cr_assert_eq(nd_v2_encode_infer_room(&r, y, ROOM, mean, rstd, &out, &len, &jl), 0);
        cr_assert_eq(out == (char *)y - jl, cases[i].in_room, "case %zu", i);
        cr_assert_eq(len, rlen, "case %zu", i);
        cr_assert_eq(jl, rjl, "case %zu", i);
        cr_assert_eq(memcmp(out, ref, len), 0, "case %zu: the answers differ", i);
        if (!cases[i].in_room)
            free(out);
        /* with no room, never into y's buffer */
        cr_assert_eq(nd_v2_encode_infer_room(&r, y, 0, mean, rstd, &out, &len, &jl), 0);
        cr_assert_neq(out, (char *)y - jl);
        free(out);
        free(ref);
        free(buf);
        nd_v2_request_free(&r);
    }
}

/* ======================================================================== shared memory */

/* Tensors named by shared memory regions: the parser records each reference where the server
 * looks for it and leaves the tensor's pointer for the server to set; the answer names the region
 * of an output written there instead of carrying its values. */
Test(shm, references_are_recorded_and_answered_without_data)
{
    uint64_t s = rng_init() ^ 0x5eed;
    const int64_t rows = rnd_range(&s, 1, 9), cols = rnd_range(&s, 1, 40);
    const uint64_t xoff = (uint64_t)rnd_range(&s, 0, 4096), goff = (uint64_t)rnd_range(&s, 0, 99);
    const uint64_t xbytes = (uint64_t)(rows * cols) * 2, pbytes = (uint64_t)cols * 2;
    sbuf b = {0};
    sb_printf(&b, "{\"parameters\":{\"binary_data_output\":true},\"inputs\":["
                  "{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[%lld,%lld],\"parameters\":{"
                  "\"shared_memory_region\":\"in-1\",\"shared_memory_byte_size\":%llu,"
                  "\"shared_memory_offset\":%llu}},"
                  "{\"name\":\"gamma\",\"datatype\":\"FP16\",\"shape\":[%lld],\"parameters\":{"
                  "\"shared_memory_region\":\"in.2\",\"shared_memory_byte_size\":%llu,"
                  "\"shared_memory_offset\":%llu}}],"
                  "\"outputs\":[{\"name\":\"rstd\",\"parameters\":{\"shared_memory_region\":\"out\","
                  "\"shared_memory_byte_size\":%llu}},{\"name\":\"mean\"},"
                  "{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\","
                  "\"shared_memory_byte_size\":%llu,\"shared_memory_offset\":64}}]}",
              (long long)rows, (long long)cols, (unsigned long long)xbytes,
              (unsigned long long)xoff, (long long)cols, (unsigned long long)pbytes,
              (unsigned long long)goff, (unsigned long long)rows * 4 + 8,
              (unsigned long long)xbytes);
    nd_v2_request r;
    nd_error err = {{0}};
    cr_assert_eq(nd_v2_parse_infer(ND_OP_LAYERNORM, b.p, b.len, NULL, 0, &r, &err), 0, "%s: %s",
                 b.p, err.msg);
    cr_assert_eq(r.nshm, 4);
    cr_assert_str_eq(r.in_shm[ND_V2_IN_X].region, "in-1");
    cr_assert_eq(r.in_shm[ND_V2_IN_X].offset, xoff);
    cr_assert_eq(r.in_shm[ND_V2_IN_X].byte_size, xbytes);
    cr_assert_eq(r.in_shm[ND_V2_IN_X].index, 0);
    cr_assert_str_eq(r.in_shm[ND_V2_IN_GAMMA].region, "in.2");
    cr_assert_eq(r.in_shm[ND_V2_IN_GAMMA].offset, goff);
    cr_assert_eq(r.in_shm[ND_V2_IN_GAMMA].index, 1);
    cr_assert_str_eq(r.in_shm[ND_V2_IN_BETA].region, "");
    cr_assert_null(r.req.x, "x's pointer is the server's to set");
    cr_assert_null(r.req.gamma);
    cr_assert_null(r.req.owned, "nothing to copy");
    cr_assert_eq(r.req.outer, rows);
    cr_assert_eq(r.req.mid, cols);
    cr_assert_str_eq(r.out_shm[ND_V2_OUT_Y].region, "out");
    cr_assert_eq(r.out_shm[ND_V2_OUT_Y].offset, 64);
    cr_assert_eq(r.out_shm[ND_V2_OUT_Y].index, 2);
    cr_assert_str_eq(r.out_shm[ND_V2_OUT_RSTD].region, "out");
    cr_assert_str_eq(r.out_shm[ND_V2_OUT_MEAN].region, "");
    cr_assert_eq(nd_v2_output_bytes(&r.req, ND_V2_OUT_Y), xbytes);
    cr_assert_eq(nd_v2_output_bytes(&r.req, ND_V2_OUT_RSTD), (uint64_t)rows * 4);
    /* binary_data_output covers the outputs that are not in shared memory only */
    cr_assert_eq(r.binary_outputs, ND_OUT_MEAN, "binary outputs 0x%x", r.binary_outputs);

    /* The answer: y and rstd name their region and byte size and carry no data; mean is binary. */
    float *mean = malloc((size_t)rows * sizeof(float));
    for (int64_t i = 0; i < rows; i++)
        mean[i] = (float)rnd_range(&s, -1000, 1000) / 8;
    char *out;
    size_t len, jlen;
    cr_assert_eq(nd_v2_encode_infer(&r, NULL, mean, NULL, &out, &len, &jlen), 0);
    cr_assert_eq(len, jlen + (size_t)rows * 4, "the binary part is mean alone");
    cr_assert_eq(memcmp(out + jlen, mean, (size_t)rows * 4), 0);
    json_error_t jerr;
    json_t *a = json_loadb(out, jlen, JSON_REJECT_DUPLICATES, &jerr);
    cr_assert_not_null(a, "%s: %.*s", jerr.text, (int)jlen, out);
    const json_t *outs = json_object_get(a, "outputs");
    cr_assert_eq(json_array_size(outs), 3);
    const char *names[3] = {"rstd", "mean", "y"};
    const uint64_t sizes[3] = {(uint64_t)rows * 4, (uint64_t)rows * 4, xbytes};
    for (int k = 0; k < 3; k++) {
        const json_t *o = json_array_get(outs, k);
        const json_t *p = json_object_get(o, "parameters");
        cr_assert_str_eq(json_string_value(json_object_get(o, "name")), names[k]);
        cr_assert_null(json_object_get(o, "data"), "%s has data", names[k]);
        if (k == 1) {
            cr_assert_eq(json_integer_value(json_object_get(p, "binary_data_size")), rows * 4);
            continue;
        }
        cr_assert_str_eq(json_string_value(json_object_get(p, "shared_memory_region")), "out");
        cr_assert_eq((uint64_t)json_integer_value(json_object_get(p, "shared_memory_byte_size")),
                     sizes[k], "%s", names[k]);
        cr_assert_null(json_object_get(p, "binary_data_size"));
    }
    json_decref(a);
    free(out);
    free(mean);
    nd_v2_request_free(&r);
    free(b.p);
}

/* A BF16 y may go to shared memory: no JSON numbers are needed for it. */
Test(shm, bf16_y_may_go_to_shared_memory)
{
    const char *json = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"BF16\",\"shape\":[2],"
                       "\"parameters\":{\"shared_memory_region\":\"i\",\"shared_memory_byte_size\":"
                       "4}}],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":"
                       "\"o\",\"shared_memory_byte_size\":4}}]}";
    nd_v2_request r;
    nd_error err = {{0}};
    cr_assert_eq(nd_v2_parse_infer(ND_OP_SOFTMAX, json, strlen(json), NULL, 0, &r, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(r.req.wire, ND_WIRE_BINARY);
    cr_assert_eq(r.binary_outputs, 0u);
    nd_v2_request_free(&r);
}

/* ======================================================================== CUDA shared memory */

Test(cuda_shm, base64_round_trips_random_bytes_with_and_without_padding)
{
    uint64_t s = rng_init();
    for (int trial = 0; trial < 400; trial++) {
        unsigned char in[100], out[100];
        char text[200];
        const size_t n = (size_t)(rnd(&s) % 100);
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)rnd(&s);
        const int pad = trial & 1;
        const size_t len = nd_b64_encode(in, n, text, pad);
        long got = nd_b64_decode(text, len, out, sizeof out);
        cr_assert_eq(got, (long)n, "seed %llu: %zu bytes as \"%s\" decoded to %ld",
                     (unsigned long long)seed0, n, text, got);
        cr_assert(memcmp(in, out, n) == 0, "seed %llu: \"%s\"", (unsigned long long)seed0, text);
        if (n > 0)
            cr_assert_eq(nd_b64_decode(text, len, out, n - 1), -1, "one byte too little room");
    }
}

Test(cuda_shm, base64_refuses_what_is_not_base64)
{
    unsigned char out[16];
    const char *bad[] = {"A", "AAAAA", "AA=", "A===", "AB==", "AAB=", "AA*A", "AA A", "=AAA",
                         "AA==AA==", "-_AA"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(nd_b64_decode(bad[i], strlen(bad[i]), out, sizeof out), -1, "\"%s\"",
                     bad[i]);
    cr_assert_eq(nd_b64_decode("", 0, out, sizeof out), 0);
    cr_assert_eq(nd_b64_decode("/+8=", 4, out, sizeof out), 2);
    cr_assert(out[0] == 0xff && out[1] == 0xef);
}

Test(cuda_shm, a_register_body_gives_the_handle_device_and_size)
{
    unsigned char handle[64], got[128];
    for (size_t i = 0; i < sizeof handle; i++)
        handle[i] = (unsigned char)(i * 37 + 11);
    char b64[100], body[300];
    nd_b64_encode(handle, sizeof handle, b64, 1);
    snprintf(body, sizeof body, "{\"raw_handle\": {\"b64\": \"%s\"}, \"device_id\": 3, "
             "\"byte_size\": 123456789012}", b64);
    size_t len = 0;
    int64_t dev = -1;
    uint64_t size = 0;
    nd_error err = {{0}};
    cr_assert_eq(nd_v2_parse_cuda_register(body, strlen(body), got, sizeof got, &len, &dev,
                                           &size, &err), 0, "%s", err.msg);
    cr_assert_eq(len, sizeof handle);
    cr_assert(memcmp(got, handle, len) == 0);
    cr_assert_eq(dev, 3);
    cr_assert_eq(size, 123456789012ull);

    const struct {
        const char *body, *says;
    } bad[] = {
        {"[1]", "body: expected a JSON object"},
        {"{\"raw", "body: not JSON"},
        {"{\"device_id\": 0, \"byte_size\": 4}", "raw_handle: required"},
        {"{\"raw_handle\": \"AAAA\", \"device_id\": 0, \"byte_size\": 4}", "raw_handle: required"},
        {"{\"raw_handle\": {\"b64\": \"AA*A\"}, \"device_id\": 0, \"byte_size\": 4}",
         "raw_handle.b64: not the base64"},
        {"{\"raw_handle\": {\"b64\": \"AAAA\"}, \"byte_size\": 4}", "device_id: required"},
        {"{\"raw_handle\": {\"b64\": \"AAAA\"}, \"device_id\": -1, \"byte_size\": 4}",
         "device_id: expected a non-negative integer"},
        {"{\"raw_handle\": {\"b64\": \"AAAA\"}, \"device_id\": 0}", "byte_size: required"},
        {"{\"raw_handle\": {\"b64\": \"AAAA\"}, \"device_id\": 0, \"byte_size\": 1.5}",
         "byte_size: expected a non-negative integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        cr_assert_eq(nd_v2_parse_cuda_register(bad[i].body, strlen(bad[i].body), got, sizeof got,
                                               &len, &dev, &size, &err), 400, "%s", bad[i].body);
        cr_assert(strstr(err.msg, bad[i].says), "%s: \"%s\"", bad[i].body, err.msg);
    }
    /* a handle longer than the room */
    unsigned char big[100];
    memset(big, 7, sizeof big);
    char big64[200], body2[400];
    nd_b64_encode(big, sizeof big, big64, 1);
    snprintf(body2, sizeof body2, "{\"raw_handle\": {\"b64\": \"%s\"}, \"device_id\": 0, "
             "\"byte_size\": 1}", big64);
    cr_assert_eq(nd_v2_parse_cuda_register(body2, strlen(body2), got, 64, &len, &dev, &size,
                                           &err), 400);
    cr_assert(strstr(err.msg, "64 bytes at most"), "%s", err.msg);
}
