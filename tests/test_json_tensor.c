/*
 * test_json_tensor.c - proto/json_tensor.c: the scanner that reads a body's numeric arrays before
 * jansson parses the rest.
 *
 * Differential throughout: the reference is the jansson walk the scanner replaced
 * (fuzz/json_oracle.h). For random tensors (flat and nested, right and wrong shapes, every kind of
 * entry, numbers in every form, whitespace anywhere) and for randomly mutated /v1 and v2 bodies,
 * the scanner must give the same status, the same message and the same stored bits; for a body
 * jansson refuses, jansson's own message. The seed is printed with every failure (ND_TEST_SEED
 * repeats a run).
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

#include "../fuzz/json_oracle.h"
#include "../proto/json_tensor.h"

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

static uint64_t below(uint64_t *s, uint64_t n)
{
    return rnd(s) % n;
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
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

static const nd_dtype dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};

/* Some whitespace, usually none. */
static void sb_ws(sbuf *b, uint64_t *s)
{
    static const char *const ws[] = {" ", "\n", "\t", "\r\n  ", "  "};
    if (below(s, 6) == 0)
        sb_printf(b, "%s", ws[below(s, 5)]);
}

/* A JSON number in one of the forms clients write, or one at an edge. */
static void sb_number(sbuf *b, uint64_t *s)
{
    static const char *const edge[] = {
        "0", "-0", "0.0", "-0.0", "0e0", "-0e-0", "1E+2", "1e-400", "-1e-400", "1e-45",
        "1.401298464324817e-45", "7e-46", "7.006e-46", "3.4028235e38", "3.4028236e38",
        "3.40282357e38", "1e39", "65504", "65519.99", "65520", "-65520", "6.1e-5", "5.96e-8",
        "2.98e-8", "3e-8", "9007199254740993", "-9007199254740993", "18014398509481985",
        "9223372036854775807", "-9223372036854775808", "1152921573326323713",
        "9223372036854775808", "-9223372036854775809", "100000000000000000000", "1e309",
        "-1e400", "00", "01", "-01", "1.", ".5", "1e", "1e+", "-",
        "0.000000000000000000000000000000000000001", "123456789012345678901234567890e-10",
        "1.00000005960464477539062500000000000001", "1.000000059604644775390625",
        "0.1000000000000000055511151231257827021181583404541015625", "4.9e-324",
        "2.2250738585072011e-308", "1.7976931348623157e308", "100000000000000000000000e-23"};
    double v;
    uint64_t r = rnd(s);
    switch (r % 8) {
    case 0:
        sb_printf(b, "%s", edge[(r >> 8) % (sizeof edge / sizeof edge[0])]);
        return;
    case 1: /* integers, small and large */
        sb_printf(b, "%lld", (long long)(int64_t)(rnd(s) >> (r >> 8) % 64));
        return;
    case 2: /* any double bit pattern, at any precision */
        memcpy(&v, &(uint64_t){rnd(s)}, 8);
        if (!isfinite(v))
            v = 1.5;
        sb_printf(b, "%.*g", (int)((r >> 8) % 20) + 1, v);
        return;
    default: { /* float32 values as clients print them */
        float f = (float)((double)(int64_t)rnd(s) * 0x1p-63 * ldexp(1, (int)((r >> 8) % 40) - 20));
        static const char *const fmt[] = {"%.9g", "%.17g", "%.6e", "%.3f", "%g"};
        sb_printf(b, fmt[(r >> 16) % 5], (double)f);
        return;
    }
    }
}

/* An entry that is not a number (always an error in a tensor). */
static void sb_other(sbuf *b, uint64_t *s)
{
    static const char *const other[] = {"\"1\"",  "\"a\\\"b\\u00e9\"", "true", "false", "null",
                                        "{}",     "{\"a\":[1,{\"b\":2}]}", "[]",   "[1]",   "[[1]]",
                                        "[\"x\"]"};
    sb_printf(b, "%s", other[below(s, sizeof other / sizeof other[0])]);
}

/* A tensor of the given shape, nested or flat, with sometimes a wrong entry or count. */
static void sb_tensor(sbuf *b, uint64_t *s, const int64_t *shape, int nd, int nested, int bad)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        n *= shape[i];
    if (!nested) {
        int64_t m = n + (bad && below(s, 3) == 0 ? (int64_t)below(s, 3) - 1 : 0);
        sb_printf(b, "[");
        for (int64_t i = 0; i < m; i++) {
            sb_ws(b, s);
            if (i)
                sb_printf(b, ",");
            sb_ws(b, s);
            if (bad && below(s, 2 * (uint64_t)m) == 0)
                sb_other(b, s);
            else
                sb_number(b, s);
        }
        sb_ws(b, s);
        sb_printf(b, "]");
        return;
    }
    if (nd == 0) {
        if (bad && below(s, 8) == 0)
            sb_other(b, s);
        else
            sb_number(b, s);
        return;
    }
    int64_t m = shape[0] + (bad && below(s, 6) == 0 ? (int64_t)below(s, 3) - 1 : 0);
    sb_printf(b, "[");
    for (int64_t i = 0; i < m; i++) {
        if (i)
            sb_printf(b, ",");
        sb_ws(b, s);
        if (bad && below(s, 12) == 0)
            sb_number(b, s); /* a number where an array belongs, or a leaf one level early */
        else
            sb_tensor(b, s, shape + 1, nd - 1, 1, bad);
        sb_ws(b, s);
    }
    sb_printf(b, "]");
}

/* Both results agree: status and, on failure, message. */
#define AGREE(rc_new, err_new, rc_old, err_old, what, body)                                       \
    do {                                                                                         \
        cr_assert_eq(rc_new, rc_old, "seed %llu: %s: status %d, reference %d (%s | %s)\n%s",    \
                     (unsigned long long)seed0, what, rc_new, rc_old, (err_new).msg,             \
                     (err_old).msg, body);                                                       \
        if (rc_new)                                                                              \
            cr_assert_str_eq((err_new).msg, (err_old).msg, "seed %llu: %s\n%s",                  \
                             (unsigned long long)seed0, what, body);                             \
    } while (0)

/*
 * One array both ways: nested or not, the first-entry counts, check against shape, fill (and a
 * flat fill when it could be a parameter vector), each status, message and stored byte compared.
 */
static void compare_tensor(const nd_json_tensor *t, const json_t *arr, const int64_t *shape,
                           int nd, nd_dtype dt, const char *body)
{
    cr_assert_not_null(t, "seed %llu: the scanner did not take the array\n%s",
                       (unsigned long long)seed0, body);
    cr_assert_eq(nd_json_tensor_len(t), json_array_size(arr), "seed %llu\n%s",
                 (unsigned long long)seed0, body);
    cr_assert_eq(nd_json_tensor_nested(t), oracle_is_nested(arr));
    int64_t d1[ND_MAX_DIMS + 1], d2[ND_MAX_DIMS + 1];
    int l1 = nd_json_tensor_dims(t, d1, ND_MAX_DIMS + 1);
    int l2 = oracle_dims(arr, d2, ND_MAX_DIMS + 1);
    cr_assert_eq(l1, l2, "seed %llu: dims levels\n%s", (unsigned long long)seed0, body);
    for (int i = 0; i < l1; i++)
        cr_assert_eq(d1[i], d2[i]);

    int64_t elems = 1;
    for (int i = 0; i < nd; i++)
        elems *= shape[i];
    nd_error e1 = {{0}}, e2 = {{0}};
    int r1 = nd_json_tensor_check(t, shape, nd, elems, "data", &e1);
    int r2 = oracle_check(arr, shape, nd, elems, "data", &e2);
    AGREE(r1, e1, r2, e2, "check", body);
    const int64_t len = (int64_t)json_array_size(arr), most = elems > len ? elems : len;
    const size_t bytes = (size_t)most * 4 + 4;
    unsigned char *b1 = calloc(1, bytes), *b2 = calloc(1, bytes);
    if (r1 == 0) {
        r1 = nd_json_tensor_fill(t, shape, nd, dt, b1, "data", &e1);
        r2 = oracle_fill(arr, shape, nd, dt, b2, "data", &e2);
        AGREE(r1, e1, r2, e2, "fill", body);
        if (r1 == 0)
            cr_assert_eq(memcmp(b1, b2, (size_t)elems * nd_dtype_size(dt)), 0,
                         "seed %llu: stored values differ\n%s", (unsigned long long)seed0, body);
    }
    r1 = nd_json_tensor_fill_flat(t, dt, b1, "gamma", &e1);
    r2 = oracle_fill_flat(arr, dt, b2, "gamma", &e2);
    AGREE(r1, e1, r2, e2, "flat fill", body);
    if (r1 == 0)
        cr_assert_eq(memcmp(b1, b2, json_array_size(arr) * nd_dtype_size(dt)), 0);
    free(b1);
    free(b2);
}

/* ======================================================================== tensors */

Test(scan, random_tensors)
{
    uint64_t s = rng_init();
    for (int iter = 0; iter < 3000; iter++) {
        int64_t shape[ND_MAX_DIMS];
        int nd = 1 + (int)below(&s, 4);
        for (int i = 0; i < nd; i++)
            shape[i] = 1 + (int64_t)below(&s, 4);
        int nested = nd > 1 && below(&s, 2);
        int bad = below(&s, 3) == 0;
        nd_dtype dt = dtypes[below(&s, 3)];
        sbuf b = {0};
        sb_printf(&b, "{\"data\":");
        sb_ws(&b, &s);
        sb_tensor(&b, &s, shape, nd, nested, bad);
        sb_ws(&b, &s);
        sb_printf(&b, "}");
        /* checked against the shape it was written for, or one a client got wrong */
        if (below(&s, 4) == 0) {
            shape[below(&s, (uint64_t)nd)] += 1;
            if (below(&s, 2) && nd < ND_MAX_DIMS)
                shape[nd++] = 2;
        }

        nd_json_doc doc;
        json_t *oroot = NULL;
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_doc_load(&doc, ND_JSON_V1, b.p, b.len, &e1);
        int r2 = oracle_load(b.p, b.len, &oroot, &e2);
        AGREE(r1, e1, r2, e2, "load", b.p);
        if (r1 == 0) {
            const json_t *arr = json_object_get(oroot, "data");
            compare_tensor(nd_json_doc_tensor(&doc, ND_JSON_SITE_DATA,
                                              json_object_get(doc.root, "data")),
                           arr, shape, nd, dt, b.p);
        }
        nd_json_doc_free(&doc);
        json_decref(oroot);
        free(b.p);
    }
}

/* Every number form agrees with jansson's value (and kind: integer or real, which messages
 * name), and every malformed one is refused with jansson's message. */
Test(scan, numbers_as_jansson_reads_them)
{
    uint64_t s = rng_init();
    static const char alphabet[] = "0123456789-+.eE";
    for (int iter = 0; iter < 20000; iter++) {
        char tok[40];
        sbuf b = {0};
        if (iter % 2) {
            int n = 1 + (int)below(&s, 14);
            for (int i = 0; i < n; i++)
                tok[i] = alphabet[below(&s, sizeof alphabet - 1)];
            tok[n] = '\0';
            if (below(&s, 2))
                tok[0] = (char)('1' + below(&s, 9));
            sb_printf(&b, "{\"data\":[%s]}", tok);
        } else {
            sb_printf(&b, "{\"data\":[");
            sb_number(&b, &s);
            sb_printf(&b, "]}");
        }
        nd_json_doc doc;
        json_t *oroot = NULL;
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_doc_load(&doc, ND_JSON_V1, b.p, b.len, &e1);
        int r2 = oracle_load(b.p, b.len, &oroot, &e2);
        AGREE(r1, e1, r2, e2, "load", b.p);
        if (r1 == 0) {
            const nd_json_tensor *t =
                nd_json_doc_tensor(&doc, ND_JSON_SITE_DATA, json_object_get(doc.root, "data"));
            const json_t *v = json_array_get(json_object_get(oroot, "data"), 0);
            double want;
            cr_assert_not_null(t);
            cr_assert_eq(oracle_number_value(v, &want), 0);
            if (json_is_integer(v) && fabs(want) >= 0x1p63) {
                /* The old walk's rounding to odd goes wrong for integers whose nearest double is
                 * 2^63 in magnitude (it takes -2^63 for inexact, and casts 2^63 back to int64);
                 * the scanner rounds them to odd properly. Both give the same float32 and
                 * bfloat16 (float16 has no room for them). */
                uint16_t h1 = 0, h2 = 0;
                cr_assert_eq((float)t->tok[1], (float)want, "%s", b.p);
                nd_store_f64(ND_BFLOAT16, &h1, 0, t->tok[1]);
                nd_store_f64(ND_BFLOAT16, &h2, 0, want);
                cr_assert_eq(h1, h2, "%s", b.p);
                want = t->tok[1];
            }
            cr_assert_eq(memcmp(&t->tok[1], &want, 8), 0, "seed %llu: %s: %.17g, jansson %.17g",
                         (unsigned long long)seed0, b.p, t->tok[1], want);
            /* the kind, through the message that names it */
            const int64_t shape[2] = {1, 1};
            r1 = nd_json_tensor_check(t, shape, 2, 1, "data", &e1);
            r2 = oracle_check(json_object_get(oroot, "data"), shape, 2, 1, "data", &e2);
            AGREE(r1, e1, r2, e2, "kind", b.p);
        }
        nd_json_doc_free(&doc);
        json_decref(oroot);
        free(b.p);
    }
}

/* ======================================================================== whole bodies */

/* A /v1 or v2 body with tensors at several sites (and look-alikes that are not sites). */
static void sb_body(sbuf *b, uint64_t *s, int v2)
{
    int64_t shape[2] = {1 + (int64_t)below(s, 3), 1 + (int64_t)below(s, 3)};
    if (!v2) {
        sb_printf(b, "{\"shape\":[%lld,%lld],\"dtype\":\"float16\",\"data\":", (long long)shape[0],
                  (long long)shape[1]);
        sb_tensor(b, s, shape, 2, (int)below(s, 2), (int)below(s, 2));
        sb_printf(b, ",\"gamma\":");
        sb_tensor(b, s, shape + 1, 1, 0, (int)below(s, 2));
        sb_printf(b, ",\"outputs\":[\"y\",\"data\"],\"x\":{\"data\":[1,[2]],\"alpha\":\"[\"},");
        sb_printf(b, "\"b\\u0065ta\":");
        sb_tensor(b, s, shape + 1, 1, 0, 0);
        sb_printf(b, ",\"eps\":1e-5}");
        return;
    }
    sb_printf(b, "{\"id\":\"r\\\"1\",\"parameters\":{\"data\":[1,2]},\"inputs\":[");
    sb_printf(b, "{\"name\":\"x\",\"shape\":[%lld,%lld],\"datatype\":\"FP32\",\"data\":",
              (long long)shape[0], (long long)shape[1]);
    sb_tensor(b, s, shape, 2, (int)below(s, 2), (int)below(s, 2));
    sb_printf(b, "},7,{\"name\":\"gamma\",\"parameters\":{\"binary_data_size\":4},\"d\\u0061ta\":");
    sb_tensor(b, s, shape + 1, 1, 0, (int)below(s, 2));
    sb_printf(b, "}],\"outputs\":[{\"name\":\"y\",\"data\":[3]}]}");
}

/* Each site's value both ways: an array read alike, or the same non-array. */
static void compare_sites(const nd_json_doc *doc, const json_t *oroot, int v2, const char *body)
{
    if (!json_is_object(oroot))
        return;
    if (!v2) {
        static const char *const names[] = {"data", "gamma", "beta", "weight", "alpha"};
        for (int k = 0; k < 5; k++) {
            const json_t *o = json_object_get(oroot, names[k]);
            const json_t *v = json_object_get(doc->root, names[k]);
            const nd_json_tensor *t = nd_json_doc_tensor(doc, (size_t)k, v);
            if (json_is_array(o)) {
                int64_t n = (int64_t)json_array_size(o);
                compare_tensor(t, o, &n, 1, ND_FLOAT16, body);
            } else {
                cr_assert_null(t, "seed %llu: %s\n%s", (unsigned long long)seed0, names[k], body);
                cr_assert_eq(!o, !v);
                if (o)
                    cr_assert_str_eq(nd_json_type_name(v), nd_json_type_name(o));
            }
        }
        return;
    }
    const json_t *oin = json_object_get(oroot, "inputs");
    const json_t *in = json_object_get(doc->root, "inputs");
    for (size_t i = 0; i < json_array_size(oin); i++) {
        const json_t *o = json_object_get(json_array_get(oin, i), "data");
        const json_t *v = json_object_get(json_array_get(in, i), "data");
        const nd_json_tensor *t = nd_json_doc_tensor(doc, i, v);
        if (json_is_array(o)) {
            int64_t n = (int64_t)json_array_size(o);
            compare_tensor(t, o, &n, 1, ND_FLOAT32, body);
        } else {
            cr_assert_null(t);
            cr_assert_eq(!o, !v);
        }
    }
}

/* Valid bodies, then bodies with a few random edits: jansson's verdict and message, and when
 * valid, the same tensors. */
Test(scan, mutated_bodies)
{
    uint64_t s = rng_init();
    /* with a NUL: jansson skips one right after a number or a literal */
    static const char alphabet[] = "[]{}\",:0123456789-+.eE \t\n\\utrfalsn\x01\xc3\xa9\0";
    for (int iter = 0; iter < 12000; iter++) {
        const int v2 = iter % 2;
        sbuf b = {0};
        sb_body(&b, &s, v2);
        int edits = iter % 3 == 0 ? 0 : 1 + (int)below(&s, 3);
        for (int k = 0; k < edits && b.len > 1; k++) {
            size_t at = below(&s, b.len);
            char c = alphabet[below(&s, sizeof alphabet - 1)];
            switch (below(&s, 3)) {
            case 0: /* replace */
                b.p[at] = c;
                break;
            case 1: /* delete */
                memmove(b.p + at, b.p + at + 1, b.len - at);
                b.len--;
                break;
            default: /* insert */
                sb_printf(&b, " ");
                memmove(b.p + at + 1, b.p + at, b.len - at - 1);
                b.p[at] = c;
                break;
            }
        }
        /* the body need not end in a NUL: only b.len bytes are read */
        nd_json_doc doc;
        json_t *oroot = NULL;
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_doc_load(&doc, v2 ? ND_JSON_V2 : ND_JSON_V1, b.p, b.len, &e1);
        int r2 = oracle_load(b.p, b.len, &oroot, &e2);
        AGREE(r1, e1, r2, e2, v2 ? "v2 load" : "v1 load", b.p);
        if (r1 == 0)
            compare_sites(&doc, oroot, v2, b.p);
        nd_json_doc_free(&doc);
        json_decref(oroot);
        free(b.p);
    }
}

/* jansson refuses values nested deeper than 2048; the scanner counts the same depth, with and
 * without a number at the bottom, at each layout's depth. */
Test(scan, nesting_depth)
{
    for (int v2 = 0; v2 < 2; v2++) {
        for (int n = 2038; n <= 2050; n++) {
            for (int leaf = 0; leaf < 2; leaf++) {
                sbuf b = {0};
                sb_printf(&b, v2 ? "{\"inputs\":[{\"data\":" : "{\"data\":");
                for (int i = 0; i < n; i++)
                    sb_printf(&b, "[");
                if (leaf)
                    sb_printf(&b, "1");
                for (int i = 0; i < n; i++)
                    sb_printf(&b, "]");
                sb_printf(&b, v2 ? "}]}" : "}");
                nd_json_doc doc;
                json_t *oroot = NULL;
                nd_error e1 = {{0}}, e2 = {{0}};
                int r1 = nd_json_doc_load(&doc, v2 ? ND_JSON_V2 : ND_JSON_V1, b.p, b.len, &e1);
                int r2 = oracle_load(b.p, b.len, &oroot, &e2);
                AGREE(r1, e1, r2, e2, "depth", v2 ? "v2" : "v1");
                nd_json_doc_free(&doc);
                json_decref(oroot);
                free(b.p);
            }
        }
    }
}

/* jansson takes one NUL right after a number or a literal as nothing; so does the scanner. */
Test(scan, nul_after_a_token)
{
    static const struct {
        const char *body;
        size_t len;
    } cases[] = {
#define B(s) {s, sizeof s - 1}
        B("{\"data\":[1\0,2]}"),        B("{\"data\":[[1.5\0],[2e3\0]]}"),
        B("{\"data\":[1\0\0,2]}"),     B("{\"data\":[true\0,null\0]}"),
        B("{\"data\":[1,\0 2]}"),       B("{\"data\":[1]\0}"),
        B("{\"data\":[\"a\"\0]}"),    B("{\"data\":[1\0"),
        B("{\"data\":[-0\0 , 7\0]}"),  B("{\"eps\":1\0,\"data\":[2]}"),
#undef B
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nd_json_doc doc;
        json_t *oroot = NULL;
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_doc_load(&doc, ND_JSON_V1, cases[i].body, cases[i].len, &e1);
        int r2 = oracle_load(cases[i].body, cases[i].len, &oroot, &e2);
        AGREE(r1, e1, r2, e2, "NUL", cases[i].body);
        if (r1 == 0)
            compare_sites(&doc, oroot, 0, cases[i].body);
        nd_json_doc_free(&doc);
        json_decref(oroot);
    }
}

/* A member name spelt with escapes is the same member; the array at it is still scanned. */
Test(scan, escaped_names)
{
    const char *body = "{\"d\\u0061t\\u0061\":[1.5,-2],\"\\u0067amma\":[3]}";
    nd_json_doc doc;
    nd_error err;
    cr_assert_eq(nd_json_doc_load(&doc, ND_JSON_V1, body, strlen(body), &err), 0, "%s", err.msg);
    const nd_json_tensor *t =
        nd_json_doc_tensor(&doc, ND_JSON_SITE_DATA, json_object_get(doc.root, "data"));
    cr_assert_not_null(t);
    cr_assert_eq(nd_json_tensor_len(t), 2);
    cr_assert_not_null(
        nd_json_doc_tensor(&doc, ND_JSON_SITE_GAMMA, json_object_get(doc.root, "gamma")));
    nd_json_doc_free(&doc);
}

/* A body of one large tensor, written as clients write it, is read without a heap object per
 * number: jansson sees an envelope of a few bytes. */
Test(scan, envelope_is_small)
{
    sbuf b = {0};
    sb_printf(&b, "{\"shape\":[64,1024],\"data\":[");
    for (int i = 0; i < 64 * 1024; i++)
        sb_printf(&b, "%s%.9g", i ? "," : "", sin(i) * 3);
    sb_printf(&b, "]}");
    nd_json_doc doc;
    nd_error err;
    cr_assert_eq(nd_json_doc_load(&doc, ND_JSON_V1, b.p, b.len, &err), 0, "%s", err.msg);
    cr_assert_not_null(doc.envelope);
    cr_assert_str_eq(doc.envelope, "{\"shape\":[64,1024],\"data\":0}");
    nd_json_doc_free(&doc);
    free(b.p);
}
