/*
 * test_proto.c - proto/: JSON and raw binary request parsing, validation messages, JSON answers.
 *
 * Inputs are random bit patterns of each dtype (finite ones), written into bodies as exact
 * decimals; the expected stored values are those bit patterns, decoded here independently of
 * nd_dtype.h (ldexp for float16, a shift for bfloat16). The seed is printed with every failure.
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

#include "../proto/nd_proto.h"

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

/* Exact value of a float16 bit pattern, decoded without nd_dtype.h. */
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

/* Random finite bit pattern of dt in *bits (as uint32), its exact value returned. Mixed scales:
 * mostly ordinary magnitudes, sometimes any finite pattern (subnormals, extremes). */
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

/* A growing string. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = b->cap - b->len;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
}

/* Appends "name":[v0,v1,...] with n random values of dt; bits get the patterns. */
static void sb_values(sbuf *b, uint64_t *s, nd_dtype dt, int64_t n, uint32_t *bits)
{
    sb_printf(b, "[");
    for (int64_t i = 0; i < n; i++) {
        double v = rnd_value(s, dt, &bits[i]);
        /* jansson reads "-0" as the integer 0; "-0.0" is a real and keeps its sign */
        sb_printf(b, "%s%.17g%s", i ? "," : "", v, v == 0 && signbit(v) ? ".0" : "");
    }
    sb_printf(b, "]");
}

static const nd_dtype dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
static const char *const dtype_str[] = {"float32", "float16", "bfloat16"};

static int64_t rnd_shape(uint64_t *s, int64_t *shape, int min_rank)
{
    int nd = (int)rnd_range(s, min_rank, 4);
    for (int i = 0; i < nd; i++)
        shape[i] = rnd_range(s, 1, 6);
    return nd;
}

static void sb_shape(sbuf *b, const int64_t *shape, int nd)
{
    sb_printf(b, "[");
    for (int i = 0; i < nd; i++)
        sb_printf(b, "%s%lld", i ? "," : "", (long long)shape[i]);
    sb_printf(b, "]");
}

static int64_t prod(const int64_t *shape, int from, int to)
{
    int64_t p = 1;
    for (int i = from; i < to; i++)
        p *= shape[i];
    return p;
}

static void expect_bits(nd_dtype dt, const void *p, const uint32_t *bits, int64_t n,
                        const char *what)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(stored_bits(dt, p, i), bits[i],
                     "seed %llu: %s[%lld] (%s): got 0x%x, want 0x%x", (unsigned long long)seed0,
                     what, (long long)i, nd_dtype_name(dt), stored_bits(dt, p, i), bits[i]);
}

static int parse_str(nd_op op, const char *body, nd_request *req, nd_error *err)
{
    return nd_proto_parse_json(op, body, strlen(body), 0, req, err);
}

/* ======================================================================== JSON: valid requests */

/* Every op and dtype with random shapes, values and parameters; the view and every stored value
 * checked against what the test computed. */
Test(json, every_op_and_dtype)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 40; iter++) {
        for (int op = 0; op < ND_OP_COUNT; op++) {
            for (int d = 0; d < 3; d++) {
                nd_dtype dt = dtypes[d];
                int64_t shape[8];
                int nd = (int)rnd_shape(&s, shape, 1);
                int64_t n = prod(shape, 0, nd);
                uint32_t *x = malloc((size_t)n * 4), p1[8], p2[8];
                sbuf b = {0};
                int axis = -1, has_axis = 0, alpha_n = 0;
                double eps = 0;
                sb_printf(&b, "{\"dtype\":\"%s\",\"shape\":", dtype_str[d]);
                sb_shape(&b, shape, nd);
                sb_printf(&b, ",\"data\":");
                sb_values(&b, &s, dt, n, x);
                int64_t last = shape[nd - 1];
                if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
                    sb_printf(&b, ",\"%s\":", op == ND_OP_LAYERNORM ? "gamma" : "weight");
                    sb_values(&b, &s, dt, last, p1);
                    if (op == ND_OP_LAYERNORM) {
                        sb_printf(&b, ",\"beta\":");
                        sb_values(&b, &s, dt, last, p2);
                    }
                    eps = ldexp(1.0, -(int)rnd_range(&s, 3, 30));
                    sb_printf(&b, ",\"eps\":%.17g", eps);
                    if (rnd(&s) % 2) {
                        has_axis = 1;
                        axis = rnd(&s) % 2 ? -1 : nd - 1;
                        sb_printf(&b, ",\"axis\":%d", axis);
                    }
                } else if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
                    has_axis = 1;
                    axis = (int)rnd_range(&s, -nd, nd - 1);
                    sb_printf(&b, ",\"axis\":%d", axis);
                } else {
                    int64_t ch = nd >= 2 ? shape[1] : 1;
                    alpha_n = rnd(&s) % 2 ? 1 : (int)ch;
                    sb_printf(&b, ",\"alpha\":");
                    sb_values(&b, &s, dt, alpha_n, p1);
                }
                sb_printf(&b, "}");

                nd_request req;
                nd_error err = {{0}};
                int rc = nd_proto_parse_json((nd_op)op, b.p, b.len, 0, &req, &err);
                cr_assert_eq(rc, 0, "seed %llu: %s: %s\nbody: %s", (unsigned long long)seed0,
                             nd_op_name((nd_op)op), err.msg, b.p);
                cr_assert_eq((int)req.op, op);
                cr_assert_eq(req.dtype, dt);
                cr_assert_eq(req.wire, ND_WIRE_JSON);
                cr_assert_eq(req.ndim, nd);
                for (int i = 0; i < nd; i++)
                    cr_assert_eq(req.shape[i], shape[i]);
                cr_assert_eq(req.elems, n);
                cr_assert_eq(req.outer * req.mid * req.inner, n);
                cr_assert_eq(req.outputs, ND_OUT_Y);
                expect_bits(dt, req.x, x, n, "x");
                (void)has_axis;
                if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
                    cr_assert_eq(req.outer, prod(shape, 0, nd - 1));
                    cr_assert_eq(req.mid, last);
                    cr_assert_eq(req.inner, 1);
                    cr_assert_eq(req.axis, nd - 1);
                    cr_assert_eq(req.eps, (float)eps);
                    expect_bits(dt, req.gamma, p1, last, "gamma");
                    if (op == ND_OP_LAYERNORM)
                        expect_bits(dt, req.beta, p2, last, "beta");
                    else
                        cr_assert_null(req.beta);
                    cr_assert_eq(nd_request_stat_rows(&req), req.outer);
                } else if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
                    int a = axis < 0 ? axis + nd : axis;
                    cr_assert_eq(req.axis, a);
                    cr_assert_eq(req.outer, prod(shape, 0, a));
                    cr_assert_eq(req.mid, shape[a]);
                    cr_assert_eq(req.inner, prod(shape, a + 1, nd));
                    cr_assert_null(req.gamma);
                    cr_assert_eq(nd_request_stat_rows(&req), 0);
                } else {
                    cr_assert_eq(req.outer, shape[0]);
                    cr_assert_eq(req.mid, nd >= 2 ? shape[1] : 1);
                    cr_assert_eq(req.inner, prod(shape, 2, nd));
                    cr_assert_eq(req.alpha_count, alpha_n);
                    expect_bits(dt, req.alpha, p1, alpha_n, "alpha");
                }
                nd_request_free(&req);
                cr_assert_null(req.owned);
                free(b.p);
                free(x);
            }
        }
    }
}

Test(json, defaults)
{
    nd_request req;
    nd_error err;
    cr_assert_eq(parse_str(ND_OP_LAYERNORM, "{\"shape\":[2,2],\"data\":[1,2,3,4]}", &req, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(req.dtype, ND_FLOAT32);
    cr_assert_eq(req.eps, ND_LAYERNORM_EPS_DEFAULT);
    cr_assert_eq(req.outputs, ND_OUT_Y);
    cr_assert_null(req.gamma);
    cr_assert_null(req.beta);
    cr_assert_str_eq(req.params, "");
    cr_assert_eq(((const float *)req.x)[3], 4.0f);
    nd_request_free(&req);

    cr_assert_eq(parse_str(ND_OP_RMSNORM, "{\"data\":[1,2,3]}", &req, &err), 0, "%s", err.msg);
    cr_assert_eq(req.eps, ND_RMSNORM_EPS_DEFAULT);
    cr_assert_eq(req.ndim, 1); /* shape inferred: rank 1, one row */
    cr_assert_eq(req.outer, 1);
    cr_assert_eq(req.mid, 3);
    nd_request_free(&req);

    cr_assert_eq(parse_str(ND_OP_SOFTMAX, "{\"shape\":[2,3,4],\"data\":[[[1,2,3,4],[1,2,3,4],"
                                          "[1,2,3,4]],[[1,2,3,4],[1,2,3,4],[1,2,3,4]]]}",
                           &req, &err),
                 0, "%s", err.msg);
    cr_assert_eq(req.axis, 2);
    cr_assert_eq(req.outer, 6);
    cr_assert_eq(req.mid, 4);
    cr_assert_eq(req.inner, 1);
    nd_request_free(&req);

    /* null counts as absent */
    cr_assert_eq(parse_str(ND_OP_LAYERNORM, "{\"data\":[1,2],\"gamma\":null,\"eps\":null}", &req,
                           &err),
                 0, "%s", err.msg);
    cr_assert_null(req.gamma);
    nd_request_free(&req);
}

Test(json, nested_data)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 50; iter++) {
        int64_t shape[8];
        int nd = (int)rnd_shape(&s, shape, 1);
        int64_t n = prod(shape, 0, nd);
        uint32_t *x = malloc((size_t)n * 4);
        nd_dtype dt = dtypes[iter % 3];
        sbuf b = {0};
        int given = iter % 2;
        sb_printf(&b, "{\"dtype\":\"%s\"", dtype_str[iter % 3]);
        if (given) {
            sb_printf(&b, ",\"shape\":");
            sb_shape(&b, shape, nd);
        }
        sb_printf(&b, ",\"data\":");
        /* nested writing: open brackets when an index rolls over */
        for (int64_t i = 0; i < n; i++) {
            int64_t rem = i;
            int opens = 0;
            for (int k = nd - 1; k >= 0 && rem % shape[k] == 0; k--) {
                opens++;
                rem /= shape[k];
            }
            if (i)
                sb_printf(&b, ",");
            for (int k = 0; k < opens; k++)
                sb_printf(&b, "[");
            double v = rnd_value(&s, dt, &x[i]);
            sb_printf(&b, "%.17g%s", v, v == 0 && signbit(v) ? ".0" : "");
            rem = i + 1;
            for (int k = nd - 1; k >= 0 && rem % shape[k] == 0; k--) {
                sb_printf(&b, "]");
                rem /= shape[k];
            }
        }
        sb_printf(&b, "}");
        nd_request req;
        nd_error err = {{0}};
        int rc = nd_proto_parse_json(ND_OP_SOFTMAX, b.p, b.len, 0, &req, &err);
        cr_assert_eq(rc, 0, "seed %llu: %s\n%s", (unsigned long long)seed0, err.msg, b.p);
        cr_assert_eq(req.ndim, nd);
        for (int i = 0; i < nd; i++)
            cr_assert_eq(req.shape[i], shape[i]);
        expect_bits(dt, req.x, x, n, "x");
        nd_request_free(&req);
        free(b.p);
        free(x);
    }
}

Test(json, outputs_and_params)
{
    nd_request req;
    nd_error err;
    cr_assert_eq(parse_str(ND_OP_LAYERNORM,
                           "{\"data\":[1,2],\"outputs\":[\"mean\",\"rstd\"],\"params\":\"ln-1.a_B\"}",
                           &req, &err),
                 0, "%s", err.msg);
    cr_assert_eq(req.outputs, ND_OUT_Y | ND_OUT_MEAN | ND_OUT_RSTD);
    cr_assert_str_eq(req.params, "ln-1.a_B");
    nd_request_free(&req);

    cr_assert_eq(parse_str(ND_OP_RMSNORM, "{\"data\":[1,2],\"outputs\":[\"y\",\"rstd\"]}", &req,
                           &err),
                 0, "%s", err.msg);
    cr_assert_eq(req.outputs, ND_OUT_Y | ND_OUT_RSTD);
    nd_request_free(&req);

    /* prelu with a registered set needs no alpha; alpha_count is the server's to fill */
    cr_assert_eq(parse_str(ND_OP_PRELU, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"params\":\"p\"}",
                           &req, &err),
                 0, "%s", err.msg);
    cr_assert_null(req.alpha);
    cr_assert_eq(req.alpha_count, 0);
    nd_request_free(&req);

    char name[80];
    memset(name, 'a', 63);
    name[63] = '\0';
    char body[200];
    snprintf(body, sizeof body, "{\"data\":[1],\"params\":\"%s\"}", name);
    cr_assert_eq(parse_str(ND_OP_SOFTMAX, body, &req, &err), 0, "%s", err.msg);
    cr_assert_str_eq(req.params, name);
    nd_request_free(&req);
}

/* Rounding into float16 and bfloat16 is to nearest, ties to even, and done once: a value just
 * above a tie goes up even when double -> float would have rounded it onto the tie. */
Test(json, rounding)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 2000; iter++) {
        int d = 1 + iter % 2;
        nd_dtype dt = dtypes[d];
        uint16_t a = (uint16_t)(rnd(&s) & 0x7fff);
        uint16_t bnext = (uint16_t)(a + 1);
        double va = dt == ND_FLOAT16 ? half_value(a) : bf16_value(a);
        double vb = dt == ND_FLOAT16 ? half_value(bnext) : bf16_value(bnext);
        if (!isfinite(va) || !isfinite(vb))
            continue;
        double mid = (va + vb) / 2; /* exact in double */
        double above = nextafter(mid, INFINITY), below = nextafter(mid, 0);
        double vals[3] = {mid, above, below};
        uint16_t want[3] = {(a & 1) ? bnext : a, bnext, a};
        for (int k = 0; k < 3; k++) {
            char body[128];
            int neg = rnd(&s) % 2;
            snprintf(body, sizeof body, "{\"dtype\":\"%s\",\"data\":[%.17g]}", dtype_str[d],
                     neg ? -vals[k] : vals[k]);
            nd_request req;
            nd_error err;
            cr_assert_eq(parse_str(ND_OP_SOFTMAX, body, &req, &err), 0, "%s: %s", body, err.msg);
            uint16_t got = (uint16_t)stored_bits(dt, req.x, 0);
            uint16_t w = (uint16_t)(want[k] | (neg ? 0x8000 : 0));
            cr_assert_eq(got, w, "seed %llu: %s %.17g -> 0x%04x, want 0x%04x",
                         (unsigned long long)seed0, dtype_str[d], neg ? -vals[k] : vals[k], got,
                         w);
            nd_request_free(&req);
        }
    }
    /* the largest float16 is 65504; up to the tie at 65520 rounds to it */
    nd_request req;
    nd_error err;
    cr_assert_eq(parse_str(ND_OP_SOFTMAX, "{\"dtype\":\"float16\",\"data\":[65519.99,-65519]}",
                           &req, &err),
                 0, "%s", err.msg);
    cr_assert_eq(stored_bits(ND_FLOAT16, req.x, 0), 0x7bff);
    cr_assert_eq(stored_bits(ND_FLOAT16, req.x, 1), 0xfbff);
    nd_request_free(&req);
    /* integers beyond 2^53 are rounded once too: 2^60 + 2^36 + 1 lies just above a float tie */
    cr_assert_eq(parse_str(ND_OP_SOFTMAX, "{\"data\":[1152921573326323713]}", &req, &err), 0,
                 "%s", err.msg);
    cr_assert_eq(stored_bits(ND_FLOAT32, req.x, 0), 0x5d800001u);
    nd_request_free(&req);
}

/* ======================================================================== JSON: rejections */

typedef struct reject_case {
    nd_op op;
    const char *body;
    int status;
    const char *msg; /* a substring the message must contain */
} reject_case;

static const reject_case json_rejects[] = {
    /* malformed */
    {ND_OP_SOFTMAX, "", 400, "invalid JSON"},
    {ND_OP_SOFTMAX, "{\"data\":[1,2]", 400, "invalid JSON"},
    {ND_OP_SOFTMAX, "{\"data\":[1,2],\"data\":[3]}", 400, "invalid JSON"},
    {ND_OP_SOFTMAX, "[1,2]", 400, "expected a JSON object"},
    {ND_OP_SOFTMAX, "{\"data\":[1,NaN]}", 400, "invalid JSON"},
    /* unknown fields and fields of other ops */
    {ND_OP_LAYERNORM, "{\"data\":[1],\"gama\":[1]}", 400, "unknown field \"gama\""},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"alpha\":[1]}", 400, "alpha: not accepted by layernorm"},
    {ND_OP_RMSNORM, "{\"data\":[1],\"gamma\":[1]}", 400, "gamma: not accepted by rmsnorm"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"eps\":0.1}", 400, "eps: not accepted by softmax"},
    {ND_OP_PRELU, "{\"data\":[1],\"alpha\":[1],\"axis\":0}", 400, "axis: not accepted by prelu"},
    /* wrong types */
    {ND_OP_SOFTMAX, "{\"data\":\"1,2\"}", 400, "data: expected an array of numbers, got a string"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"dtype\":16}", 400, "dtype: expected a string"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"shape\":\"1\"}", 400, "shape: expected an array"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"shape\":[1.0]}", 400, "shape[0]: expected an integer"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"axis\":\"0\"}", 400, "axis: expected an integer"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"axis\":0.5}", 400, "axis: expected an integer"},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"eps\":\"1e-5\"}", 400, "eps: expected a number"},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"gamma\":1}", 400, "gamma: expected an array"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"outputs\":\"y\"}", 400, "outputs: expected an array"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"outputs\":[1]}", 400, "outputs[0]: expected a string"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"params\":[\"a\"]}", 400, "params: expected a string"},
    /* missing and empty data */
    {ND_OP_SOFTMAX, "{\"shape\":[1]}", 400, "data: required"},
    {ND_OP_SOFTMAX, "{\"data\":[]}", 400, "data"},
    {ND_OP_SOFTMAX, "{\"data\":[[]]}", 400, "empty"},
    /* shape and data disagree */
    {ND_OP_SOFTMAX, "{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12]}", 400,
     "data has 12 numbers, shape [2,4] needs 8"},
    {ND_OP_SOFTMAX, "{\"shape\":[2,2],\"data\":[[1,2],[3]]}", 400, "data[1] has 1 entries"},
    {ND_OP_SOFTMAX, "{\"shape\":[2,2],\"data\":[[1,2],3]}", 400, "data[1]: expected an array"},
    {ND_OP_SOFTMAX, "{\"shape\":[2,2],\"data\":[[1,2],[3,[4]]]}", 400,
     "data[1][1]: expected a number, got an array"},
    {ND_OP_SOFTMAX, "{\"data\":[[1,2],[3]]}", 400, "data[1] has 1 entries"},
    {ND_OP_SOFTMAX, "{\"shape\":[3],\"data\":[[1],[2],[3]]}", 400, "data[0]: expected a number"},
    {ND_OP_SOFTMAX, "{\"data\":[[[[[[[[[1]]]]]]]]]}", 400, "deeper than 8"},
    /* dimensions */
    {ND_OP_SOFTMAX, "{\"shape\":[2,0],\"data\":[1]}", 400,
     "shape[1]=0: every dimension must be at least 1"},
    {ND_OP_SOFTMAX, "{\"shape\":[-3],\"data\":[1]}", 400,
     "shape[0]=-3: every dimension must be at least 1"},
    {ND_OP_SOFTMAX, "{\"shape\":[],\"data\":[1]}", 400, "shape: must have 1 to 8 dimensions"},
    {ND_OP_SOFTMAX, "{\"shape\":[1,1,1,1,1,1,1,1,1],\"data\":[1]}", 400,
     "shape: must have 1 to 8 dimensions"},
    {ND_OP_SOFTMAX, "{\"shape\":[1099511627776,1099511627776],\"data\":[1]}", 400,
     "overflows"},
    {ND_OP_SOFTMAX, "{\"shape\":[4294967296,4294967296,4],\"data\":[1]}", 400, "overflows"},
    {ND_OP_SOFTMAX, "{\"shape\":[1000000,1000000],\"data\":[[1]]}", 400, "data has 1 entries"},
    /* non-numeric and out-of-range data */
    {ND_OP_SOFTMAX, "{\"data\":[1,2,\"3\"]}", 400, "data[2]: expected a number, got a string"},
    {ND_OP_SOFTMAX, "{\"data\":[1,true]}", 400, "data[1]: expected a number, got a boolean"},
    {ND_OP_SOFTMAX, "{\"data\":[1,null]}", 400, "data[1]: expected a number, got null"},
    {ND_OP_SOFTMAX, "{\"dtype\":\"float16\",\"data\":[1,2,3,1e6]}", 400,
     "data[3]=1e+06 is out of range for float16"},
    {ND_OP_SOFTMAX, "{\"dtype\":\"float16\",\"data\":[65520]}", 400,
     "data[0]=65520 is out of range for float16"},
    {ND_OP_SOFTMAX, "{\"dtype\":\"float16\",\"data\":[[1,2],[3,-1e5]]}", 400,
     "data[1][1]=-100000 is out of range for float16"},
    {ND_OP_SOFTMAX, "{\"data\":[1e39]}", 400, "data[0]=1e+39 is out of range for float32"},
    {ND_OP_SOFTMAX, "{\"dtype\":\"bfloat16\",\"data\":[3.4e38]}", 400,
     "out of range for bfloat16"},
    {ND_OP_LAYERNORM, "{\"dtype\":\"float16\",\"data\":[1,2],\"beta\":[0,7e4]}", 400,
     "beta[1]=70000 is out of range for float16"},
    /* dtype */
    {ND_OP_SOFTMAX, "{\"data\":[1],\"dtype\":\"float64\"}", 400,
     "dtype: unknown \"float64\"; expected float32, float16 or bfloat16"},
    /* parameter lengths */
    {ND_OP_LAYERNORM, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"gamma\":[1,2]}", 400,
     "gamma has 2 numbers, expected 3"},
    {ND_OP_LAYERNORM, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"beta\":[1,2,3,4,5,6]}", 400,
     "beta has 6 numbers, expected 3"},
    {ND_OP_RMSNORM, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"weight\":[]}", 400,
     "weight has 0 numbers, expected 3"},
    {ND_OP_LAYERNORM, "{\"data\":[1,2],\"gamma\":[1,\"x\"]}", 400, "gamma[1]: expected a number"},
    {ND_OP_PRELU, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"alpha\":[1,2]}", 400,
     "alpha has 2 numbers, expected 1 (shared) or 3"},
    {ND_OP_PRELU, "{\"data\":[1,2,3]}", 400, "alpha: required"},
    {ND_OP_PRELU, "{\"data\":[1,2,3],\"alpha\":[1,2,3]}", 400, "alpha has 3 numbers, expected 1"},
    /* axis */
    {ND_OP_SOFTMAX, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"axis\":2}", 400,
     "axis=2 is out of range"},
    {ND_OP_LOG_SOFTMAX, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"axis\":-3}", 400,
     "axis=-3 is out of range"},
    {ND_OP_LAYERNORM, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"axis\":0}", 400,
     "axis=0: layernorm normalizes over the last dimension only"},
    {ND_OP_RMSNORM, "{\"shape\":[2,3],\"data\":[1,2,3,4,5,6],\"axis\":-2}", 400, "axis=-2"},
    /* eps */
    {ND_OP_LAYERNORM, "{\"data\":[1],\"eps\":0}", 400, "eps=0"},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"eps\":-1e-5}", 400, "eps=-1e-05"},
    {ND_OP_RMSNORM, "{\"data\":[1],\"eps\":1e-60}", 400, "eps=1e-60"},
    {ND_OP_RMSNORM, "{\"data\":[1],\"eps\":1e300}", 400, "eps=1e+300"},
    /* outputs */
    {ND_OP_LAYERNORM, "{\"data\":[1],\"outputs\":[\"y\",\"var\"]}", 400,
     "outputs[1]: unknown output \"var\""},
    {ND_OP_RMSNORM, "{\"data\":[1],\"outputs\":[\"mean\"]}", 400,
     "outputs[0]: \"mean\" is produced by layernorm only"},
    {ND_OP_SOFTMAX, "{\"data\":[1],\"outputs\":[\"rstd\"]}", 400, "outputs[0]: \"rstd\""},
    /* params */
    {ND_OP_LAYERNORM, "{\"data\":[1],\"gamma\":[1],\"params\":\"ln\"}", 400,
     "params: cannot be combined with inline gamma"},
    {ND_OP_PRELU, "{\"data\":[1],\"alpha\":[1],\"params\":\"p\"}", 400,
     "params: cannot be combined with inline alpha"},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"params\":\"a b\"}", 400, "params: \"a b\" is not a valid"},
    {ND_OP_LAYERNORM, "{\"data\":[1],\"params\":\"\"}", 400, "params: \"\" is not a valid"},
    {ND_OP_LAYERNORM,
     "{\"data\":[1],\"params\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
     400, "is not a valid name"},
};

Test(json, rejections)
{
    for (size_t i = 0; i < sizeof json_rejects / sizeof json_rejects[0]; i++) {
        const reject_case *c = &json_rejects[i];
        nd_request req;
        nd_error err;
        memset(&err, 0, sizeof err);
        int rc = nd_proto_parse_json(c->op, c->body, strlen(c->body), 0, &req, &err);
        cr_expect_eq(rc, c->status, "case %zu (%s %s): status %d, want %d (%s)", i,
                     nd_op_name(c->op), c->body, rc, c->status, err.msg);
        cr_expect(strstr(err.msg, c->msg) != NULL, "case %zu (%s): message \"%s\" lacks \"%s\"",
                  i, c->body, err.msg, c->msg);
        cr_expect_null(req.owned, "case %zu leaves memory behind", i);
        if (rc == 0)
            nd_request_free(&req);
    }
}

Test(json, too_many_elements)
{
    nd_request req;
    nd_error err;
    const char *body = "{\"shape\":[2,4],\"data\":[1,2,3,4,5,6,7,8]}";
    int rc = nd_proto_parse_json(ND_OP_SOFTMAX, body, strlen(body), 7, &req, &err);
    cr_assert_eq(rc, 413, "%s", err.msg);
    cr_assert(strstr(err.msg, "8 elements") && strstr(err.msg, "limit of 7"), "%s", err.msg);
    rc = nd_proto_parse_json(ND_OP_SOFTMAX, body, strlen(body), 8, &req, &err);
    cr_assert_eq(rc, 0, "%s", err.msg);
    nd_request_free(&req);
    /* inferred shapes are bounded too */
    rc = nd_proto_parse_json(ND_OP_SOFTMAX, "{\"data\":[[1,2],[3,4]]}", 22, 3, &req, &err);
    cr_assert_eq(rc, 413, "%s", err.msg);
}

/* The body is a buffer with a length, not a C string. */
Test(json, body_not_terminated)
{
    const char text[] = "{\"data\":[1,2]}garbage";
    nd_request req;
    nd_error err;
    cr_assert_eq(nd_proto_parse_json(ND_OP_SOFTMAX, text, 14, 0, &req, &err), 0, "%s", err.msg);
    nd_request_free(&req);
    cr_assert_eq(nd_proto_parse_json(ND_OP_SOFTMAX, text, 15, 0, &req, &err), 400);
}

/* ======================================================================== binary: valid */

Test(binary, every_op_and_dtype)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 40; iter++) {
        for (int op = 0; op < ND_OP_COUNT; op++) {
            for (int d = 0; d < 3; d++) {
                nd_dtype dt = dtypes[d];
                int64_t shape[8];
                int nd = (int)rnd_shape(&s, shape, 1);
                int64_t n = prod(shape, 0, nd), last = shape[nd - 1];
                int64_t ch = nd >= 2 ? shape[1] : 1;
                char shape_s[128], eps_s[32], axis_s[16];
                int len = 0;
                for (int i = 0; i < nd; i++)
                    len += snprintf(shape_s + len, sizeof shape_s - (size_t)len, "%s%lld",
                                    i ? "," : "", (long long)shape[i]);
                nd_kv q[8];
                size_t nq = 0;
                q[nq++] = (nd_kv){"shape", shape_s};
                q[nq++] = (nd_kv){"dtype", dtype_str[d]};
                int64_t nparam = 0, alpha_n = 0;
                int affine = 0, axis = -1;
                double eps = 0;
                if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
                    affine = rnd(&s) % 2;
                    q[nq++] = (nd_kv){"affine", affine ? "1" : "0"};
                    nparam = affine ? (op == ND_OP_LAYERNORM ? 2 : 1) * last : 0;
                    eps = ldexp(1.0, -(int)rnd_range(&s, 3, 30));
                    snprintf(eps_s, sizeof eps_s, "%.17g", eps);
                    q[nq++] = (nd_kv){"eps", eps_s};
                    q[nq++] = (nd_kv){"outputs", op == ND_OP_LAYERNORM ? "y,mean,rstd" : "rstd"};
                } else if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
                    axis = (int)rnd_range(&s, -nd, nd - 1);
                    snprintf(axis_s, sizeof axis_s, "%d", axis);
                    q[nq++] = (nd_kv){"axis", axis_s};
                } else {
                    int mode = (int)(rnd(&s) % 3); /* 0: by length, 1: shared, 2: channel */
                    alpha_n = mode == 1 ? 1 : mode == 2 ? ch : (rnd(&s) % 2 ? 1 : ch);
                    if (mode)
                        q[nq++] = (nd_kv){"alpha", mode == 1 ? "shared" : "channel"};
                    nparam = alpha_n;
                }
                size_t es = esize(dt);
                size_t bytes = (size_t)(n + nparam) * es;
                /* an odd offset: pointers into the body need not be aligned */
                char *raw = malloc(bytes + 1), *body = raw + 1;
                uint32_t *bits = malloc((size_t)(n + nparam) * 4);
                for (int64_t i = 0; i < n + nparam; i++) {
                    rnd_value(&s, dt, &bits[i]);
                    memcpy(body + (size_t)i * es, &bits[i], es); /* little-endian host */
                }
                nd_request req;
                nd_error err = {{0}};
                int rc = nd_proto_parse_binary((nd_op)op, q, nq, body, bytes, 0, &req, &err);
                cr_assert_eq(rc, 0, "seed %llu: %s: %s", (unsigned long long)seed0,
                             nd_op_name((nd_op)op), err.msg);
                cr_assert_eq(req.wire, ND_WIRE_BINARY);
                cr_assert_eq(req.dtype, dt);
                cr_assert_eq(req.elems, n);
                cr_assert_eq(req.x, body);
                cr_assert_null(req.owned);
                expect_bits(dt, req.x, bits, n, "x");
                if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
                    cr_assert_eq(req.outer, n / last);
                    cr_assert_eq(req.mid, last);
                    cr_assert_eq(req.eps, (float)eps);
                    cr_assert_eq(req.outputs, op == ND_OP_LAYERNORM
                                                  ? (ND_OUT_Y | ND_OUT_MEAN | ND_OUT_RSTD)
                                                  : (ND_OUT_Y | ND_OUT_RSTD));
                    if (affine) {
                        cr_assert_eq(req.gamma, body + n * (int64_t)es);
                        expect_bits(dt, req.gamma, bits + n, last, "gamma");
                        if (op == ND_OP_LAYERNORM) {
                            cr_assert_eq(req.beta, body + (n + last) * (int64_t)es);
                            expect_bits(dt, req.beta, bits + n + last, last, "beta");
                        }
                    } else {
                        cr_assert_null(req.gamma);
                        cr_assert_null(req.beta);
                    }
                } else if (op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX) {
                    int a = axis < 0 ? axis + nd : axis;
                    cr_assert_eq(req.axis, a);
                    cr_assert_eq(req.outer, prod(shape, 0, a));
                    cr_assert_eq(req.mid, shape[a]);
                    cr_assert_eq(req.inner, prod(shape, a + 1, nd));
                } else {
                    cr_assert_eq(req.outer, shape[0]);
                    cr_assert_eq(req.mid, ch);
                    cr_assert_eq(req.alpha_count, alpha_n);
                    cr_assert_eq(req.alpha, body + n * (int64_t)es);
                    expect_bits(dt, req.alpha, bits + n, alpha_n, "alpha");
                }
                nd_request_free(&req);
                free(raw);
                free(bits);
            }
        }
    }
}

Test(binary, defaults_and_params)
{
    float x[6] = {1, 2, 3, 4, 5, 6};
    nd_kv q[] = {{"shape", "2,3"}};
    nd_request req;
    nd_error err;
    cr_assert_eq(nd_proto_parse_binary(ND_OP_RMSNORM, q, 1, x, sizeof x, 0, &req, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(req.dtype, ND_FLOAT32);
    cr_assert_eq(req.eps, ND_RMSNORM_EPS_DEFAULT);
    cr_assert_eq(req.outputs, ND_OUT_Y);
    cr_assert_null(req.gamma);
    nd_kv q2[] = {{"shape", "2,3"}, {"params", "prelu.v1"}};
    cr_assert_eq(nd_proto_parse_binary(ND_OP_PRELU, q2, 2, x, sizeof x, 0, &req, &err), 0, "%s",
                 err.msg);
    cr_assert_str_eq(req.params, "prelu.v1");
    cr_assert_null(req.alpha);
    /* channels == 1: one extra element is the shared alpha */
    nd_kv q3[] = {{"shape", "5,1"}};
    cr_assert_eq(nd_proto_parse_binary(ND_OP_PRELU, q3, 1, x, sizeof x, 0, &req, &err), 0, "%s",
                 err.msg);
    cr_assert_eq(req.alpha_count, 1);
}

/* ======================================================================== binary: rejections */

typedef struct bin_case {
    nd_op op;
    const char *query; /* "k=v&k=v"; a key without '=' gets a NULL value */
    size_t len;        /* body bytes */
    int status;
    const char *msg;
} bin_case;

static const bin_case bin_rejects[] = {
    {ND_OP_LAYERNORM, "shape=8,4096&dtype=float16&affine=1", 65536, 400,
     "body has 65536 bytes, expected 81920 (x 8x4096 float16 = 65536 bytes + gamma 4096 float16 "
     "= 8192 bytes + beta 4096 float16 = 8192 bytes)"},
    {ND_OP_RMSNORM, "shape=8,4096&affine=1", 131072, 400,
     "body has 131072 bytes, expected 147456 (x 8x4096 float32 = 131072 bytes + weight 4096"},
    {ND_OP_SOFTMAX, "shape=2,3", 25, 400, "body has 25 bytes, expected 24"},
    {ND_OP_SOFTMAX, "shape=2,3", 0, 400, "body has 0 bytes, expected 24"},
    {ND_OP_PRELU, "shape=2,3", 24, 400, "expected 28 (x 2x3 float32 = 24 bytes + alpha 1"},
    {ND_OP_PRELU, "shape=2,3&alpha=channel", 28, 400, "expected 36"},
    {ND_OP_PRELU, "shape=2,3&alpha=shared", 36, 400, "expected 28"},
    {ND_OP_PRELU, "shape=2,3&alpha=both", 28, 400, "alpha=both: expected shared or channel"},
    {ND_OP_PRELU, "shape=2,3&alpha=shared&params=p", 24, 400, "alpha: cannot be combined"},
    {ND_OP_LAYERNORM, "shape=2,3&affine=1&params=p", 24, 400, "affine=1: cannot be combined"},
    {ND_OP_LAYERNORM, "shape=2,3&affine=yes", 24, 400, "affine=yes: expected 0 or 1"},
    {ND_OP_SOFTMAX, "shape=2,3&foo=1", 24, 400, "unknown query key \"foo\""},
    {ND_OP_SOFTMAX, "shape=2,3&eps=1e-5", 24, 400, "eps: not accepted by softmax"},
    {ND_OP_SOFTMAX, "shape=2,3&dtype=float16&dtype=float32", 12, 400, "dtype: given more than once"},
    {ND_OP_SOFTMAX, "dtype=float16", 12, 400, "shape: required"},
    {ND_OP_SOFTMAX, "shape=2,3&dtype=fp8", 24, 400,
     "dtype: unknown \"fp8\"; expected float32, float16 or bfloat16"},
    {ND_OP_SOFTMAX, "shape=2,0", 0, 400, "shape[1]=0: every dimension must be at least 1"},
    {ND_OP_SOFTMAX, "shape=2,-3", 0, 400, "shape[1]=-3: every dimension must be at least 1"},
    {ND_OP_SOFTMAX, "shape=2,,3", 0, 400, "shape[1]: empty"},
    {ND_OP_SOFTMAX, "shape=", 0, 400, "shape[0]: empty"},
    {ND_OP_SOFTMAX, "shape=2,x", 0, 400, "shape[1]=x: expected a positive integer"},
    {ND_OP_SOFTMAX, "shape= 2", 0, 400, "shape[0]= 2: expected a positive integer"},
    {ND_OP_SOFTMAX, "shape=99999999999999999999", 0, 400, "shape[0]=99999999999999999999"},
    {ND_OP_SOFTMAX, "shape=1,1,1,1,1,1,1,1,1", 4, 400, "shape: must have 1 to 8 dimensions"},
    {ND_OP_SOFTMAX, "shape=1099511627776,1099511627776", 0, 400, "overflows"},
    {ND_OP_SOFTMAX, "shape=4611686018427387904", 0, 400, "byte count overflows"},
    {ND_OP_SOFTMAX, "shape=2,3&axis=2", 24, 400, "axis=2 is out of range"},
    {ND_OP_SOFTMAX, "shape=2,3&axis=one", 24, 400, "axis=one: expected an integer"},
    {ND_OP_LAYERNORM, "shape=2,3&axis=0", 24, 400, "axis=0: layernorm normalizes"},
    {ND_OP_PRELU, "shape=2,3&axis=1", 28, 400, "axis: not accepted by prelu"},
    {ND_OP_LAYERNORM, "shape=2,3&eps=abc", 24, 400, "eps=abc: expected a number"},
    {ND_OP_LAYERNORM, "shape=2,3&eps=-1", 24, 400, "eps=-1"},
    {ND_OP_LAYERNORM, "shape=2,3&eps=inf", 24, 400, "eps=inf"},
    {ND_OP_LAYERNORM, "shape=2,3&outputs=y,var", 24, 400, "outputs: unknown output \"var\""},
    {ND_OP_RMSNORM, "shape=2,3&outputs=mean", 24, 400, "outputs: \"mean\" is produced by"},
    {ND_OP_SOFTMAX, "shape=2,3&params=a/b", 24, 400, "params: \"a/b\" is not a valid name"},
    {ND_OP_SOFTMAX, "shape=2,3&affine", 24, 400, "affine: not accepted by softmax"},
    {ND_OP_LAYERNORM, "shape=2,3&affine", 24, 400, "affine=: expected 0 or 1"},
};

Test(binary, rejections)
{
    static char body[147456 + 16];
    for (size_t i = 0; i < sizeof bin_rejects / sizeof bin_rejects[0]; i++) {
        const bin_case *c = &bin_rejects[i];
        char qs[256];
        nd_kv q[16];
        size_t nq = 0;
        snprintf(qs, sizeof qs, "%s", c->query);
        for (char *tok = strtok(qs, "&"); tok && nq < 16; tok = strtok(NULL, "&")) {
            char *eq = strchr(tok, '=');
            if (eq)
                *eq = '\0';
            q[nq++] = (nd_kv){tok, eq ? eq + 1 : NULL};
        }
        nd_request req;
        nd_error err;
        memset(&err, 0, sizeof err);
        int rc = nd_proto_parse_binary(c->op, q, nq, body, c->len, 0, &req, &err);
        cr_expect_eq(rc, c->status, "case %zu (%s %s): status %d, want %d (%s)", i,
                     nd_op_name(c->op), c->query, rc, c->status, err.msg);
        cr_expect(strstr(err.msg, c->msg) != NULL, "case %zu (%s): message \"%s\" lacks \"%s\"",
                  i, c->query, err.msg, c->msg);
    }
}

Test(binary, too_many_elements)
{
    nd_kv q[] = {{"shape", "8,4096"}};
    nd_request req;
    nd_error err;
    int rc = nd_proto_parse_binary(ND_OP_SOFTMAX, q, 1, NULL, 0, 4096, &req, &err);
    cr_assert_eq(rc, 413, "%s", err.msg);
    cr_assert(strstr(err.msg, "32768 elements"), "%s", err.msg);
}

/* ======================================================================== encoding */

/* parse(encode(y)) == y bit for bit, for random values of every dtype. */
Test(encode, round_trip)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 60; iter++) {
        int d = iter % 3;
        nd_dtype dt = dtypes[d];
        int64_t shape[8];
        int nd = (int)rnd_shape(&s, shape, 1);
        int64_t n = prod(shape, 0, nd) * 40;
        shape[0] *= 40;
        nd_request req = {0};
        req.op = ND_OP_SOFTMAX;
        req.dtype = dt;
        req.ndim = nd;
        memcpy(req.shape, shape, sizeof shape);
        req.elems = n;
        req.outputs = ND_OUT_Y;
        uint32_t *bits = malloc((size_t)n * 4);
        char *y = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) {
            rnd_value(&s, dt, &bits[i]);
            memcpy(y + (size_t)i * esize(dt), &bits[i], esize(dt));
        }
        char *out = NULL;
        size_t len = 0;
        cr_assert_eq(nd_proto_encode_json(&req, y, NULL, NULL, &out, &len), 0);
        cr_assert_eq(strlen(out), len);

        /* the answer is a valid request body (shape, dtype, data) for the same op */
        nd_request back;
        nd_error err;
        cr_assert_eq(nd_proto_parse_json(ND_OP_SOFTMAX, out, len, 0, &back, &err), 0, "%s",
                     err.msg);
        cr_assert_eq(back.dtype, dt);
        cr_assert_eq(back.ndim, nd);
        for (int i = 0; i < nd; i++)
            cr_assert_eq(back.shape[i], shape[i]);
        expect_bits(dt, back.x, bits, n, "round trip");
        nd_request_free(&back);
        free(out);
        free(bits);
        free(y);
    }
}

/* An answer starts with room for numbers of typical length and grows: one whose every number is
 * as long as float32 text gets (15 bytes) still comes out whole and reads back. */
Test(encode, longest_numbers)
{
    const int64_t n = 20000;
    float *y = malloc((size_t)n * sizeof *y);
    uint64_t s = rng_init();
    for (int64_t i = 0; i < n; i++) { /* -1.2e-38 .. -2.4e-38, mostly 9 digits: 15 bytes */
        uint32_t u = 0x80800000u | ((uint32_t)rnd(&s) & 0x7fffffu);
        memcpy(&y[i], &u, 4);
    }
    nd_request req = {0};
    req.op = ND_OP_SOFTMAX;
    req.dtype = ND_FLOAT32;
    req.ndim = 1;
    req.shape[0] = n;
    req.elems = n;
    req.outputs = ND_OUT_Y;
    char *out;
    size_t len;
    cr_assert_eq(nd_proto_encode_json(&req, y, NULL, NULL, &out, &len), 0);
    cr_assert_eq(strlen(out), len);
    cr_assert_gt(len, (size_t)n * 14, "%zu bytes: not past the room answers start with", len);
    nd_request back;
    nd_error err;
    cr_assert_eq(nd_proto_parse_json(ND_OP_SOFTMAX, out, len, 0, &back, &err), 0, "%s", err.msg);
    cr_assert_eq(memcmp(back.x, y, (size_t)n * sizeof *y), 0);
    nd_request_free(&back);
    free(out);
    free(y);
}

/* Every float16 and bfloat16 value round-trips, and is written in its shortest form. */
Test(encode, every_16_bit_value)
{
    for (int d = 1; d < 3; d++) {
        nd_request req = {0};
        req.op = ND_OP_SOFTMAX;
        req.dtype = dtypes[d];
        req.ndim = 1;
        req.shape[0] = 65536;
        req.elems = 65536;
        uint16_t *y = malloc(65536 * 2);
        for (int i = 0; i < 65536; i++)
            y[i] = (uint16_t)i;
        char *out;
        size_t len;
        cr_assert_eq(nd_proto_encode_json(&req, y, NULL, NULL, &out, &len), 0);
        json_error_t jerr;
        json_t *root = json_loadb(out, len, 0, &jerr);
        cr_assert_not_null(root, "%s", jerr.text);
        json_t *data = json_object_get(root, "data");
        cr_assert_eq(json_array_size(data), 65536);
        for (int i = 0; i < 65536; i++) {
            json_t *v = json_array_get(data, (size_t)i);
            double want = d == 1 ? half_value((uint16_t)i) : bf16_value((uint16_t)i);
            if (!isfinite(want)) {
                cr_assert(json_is_null(v), "%s 0x%04x: want null", dtype_str[d], i);
                continue;
            }
            cr_assert(json_is_number(v));
            double got = json_number_value(v);
            /* nearest representable value to got must be want: check it is closer to want
             * than half the distance to either neighbour */
            double lo = d == 1 ? half_value((uint16_t)(i - 1)) : bf16_value((uint16_t)(i - 1));
            double hi = d == 1 ? half_value((uint16_t)(i + 1)) : bf16_value((uint16_t)(i + 1));
            if ((i & 0x7fff) == 0)
                lo = -hi; /* +-0: neighbours are the smallest subnormals */
            /* got must lie within half a gap of want on its side (a tie only when i is even) */
            double err = fabs(got - want);
            int up = fabs(got) > fabs(want);
            double nb = up ? hi : lo;
            int edge = up ? ((i & 0x7fff) == 0x7fff || isinf(hi)) : 0;
            if (got != want && !edge) {
                double gap = fabs(nb - want) / 2;
                if ((i & 0x7fff) == 0)
                    gap = fabs(hi) / 2; /* +-0: the nearest values are the smallest subnormals */
                cr_assert(err < gap || (err == gap && !(i & 1)),
                          "%s 0x%04x: %.17g reads back as a neighbour", dtype_str[d], i, got);
            }
        }
        /* shortest: float16 needs at most 5 significant digits, bfloat16 at most 4 */
        cr_assert(len < 65536 * 12, "%zu bytes", len);
        json_decref(root);
        free(out);
        free(y);
    }
}

Test(encode, stats_and_non_finite)
{
    nd_request req;
    nd_error err;
    const char *body = "{\"shape\":[2,2],\"data\":[1,2,3,4],\"outputs\":[\"mean\",\"rstd\"]}";
    cr_assert_eq(parse_str(ND_OP_LAYERNORM, body, &req, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_request_stat_rows(&req), 2);
    float y[4] = {0.5f, -INFINITY, NAN, 1e-45f};
    float mean[2] = {1.5f, 3.5f}, rstd[2] = {0.1f, INFINITY};
    char *out;
    size_t len;
    cr_assert_eq(nd_proto_encode_json(&req, y, mean, rstd, &out, &len), 0);
    /* float32 numbers are the shortest that read back as the same float32 */
    cr_assert_str_eq(out, "{\"shape\":[2,2],\"dtype\":\"float32\",\"data\":[0.5,null,null,"
                          "1e-45],\"mean\":[1.5,3.5],\"rstd\":[0.1,null]}");
    free(out);
    nd_request_free(&req);

    /* rstd only for rmsnorm; a stat not asked for is not written */
    cr_assert_eq(parse_str(ND_OP_RMSNORM, "{\"data\":[1,2],\"outputs\":[\"rstd\"]}", &req, &err),
                 0, "%s", err.msg);
    cr_assert_eq(nd_proto_encode_json(&req, y, mean, rstd, &out, &len), 0);
    cr_assert_str_eq(out, "{\"shape\":[2],\"dtype\":\"float32\",\"data\":[0.5,null],"
                          "\"rstd\":[0.1]}");
    free(out);
    nd_request_free(&req);
}

/* ======================================================================== small helpers */

Test(misc, error_json_escapes)
{
    const char *msgs[] = {"plain", "quote \" backslash \\ newline \n tab \t", "bad utf8 \xff\xfe",
                          "ok utf8 \xc3\xa9", ""};
    for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
        char *j = nd_proto_error_json(msgs[i]);
        cr_assert_not_null(j);
        json_error_t jerr;
        json_t *root = json_loads(j, 0, &jerr);
        cr_assert_not_null(root, "%s: %s", j, jerr.text);
        const char *back = json_string_value(json_object_get(root, "error"));
        cr_assert_not_null(back);
        if (i != 2)
            cr_assert_str_eq(back, msgs[i]);
        else
            cr_assert_str_eq(back, "bad utf8 \xef\xbf\xbd\xef\xbf\xbd");
        json_decref(root);
        free(j);
    }
}

Test(misc, format_shape)
{
    nd_request req = {0};
    char buf[8 * 21];
    req.ndim = 2;
    req.shape[0] = 8;
    req.shape[1] = 4096;
    nd_proto_format_shape(&req, buf, sizeof buf);
    cr_assert_str_eq(buf, "8,4096");
    req.ndim = 8;
    for (int i = 0; i < 8; i++)
        req.shape[i] = INT64_MAX;
    nd_proto_format_shape(&req, buf, sizeof buf);
    cr_assert_eq(strlen(buf), 8 * 19 + 7);
}
