/*
 * bench_json.c - JSON request parsing and answer encoding, in numbers per second on one core.
 *
 * Each case is one whole request body or answer as the server sees it (/v1 or KServe v2, 8 x 1024
 * elements unless said otherwise), parsed with nd_proto_parse_json / nd_v2_parse_infer or encoded
 * with nd_proto_encode_json / nd_v2_encode_infer, over and over for about --seconds (1.5); the
 * rate is elements / time, the best of ten rounds (the machine may be shared). The bodies hold
 * what clients send:
 *   "9 digits"   "%.9g" of random float32 values (numpy's float32 repr and C clients' printf)
 *   "17 digits"  "%.17g" of the same values as doubles (Python's json.dumps of x.tolist())
 *   "5 digits"   float16 values as "%.5g"
 * and, for the float32 writer alone (json_num.h), the numbers of x one at a time (nd_json_put_f32)
 * and as an array (nd_json_put_f32s: eight at a time where the CPU has AVX-512, as the answers
 * are written; the header says which).
 * Prints a table; --csv FILE also writes it as CSV.
 *
 *   bench_json [--csv FILE] [--seconds S]
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../kernels/nd_dtype.h"
#include "../proto/json_num.h"
#include "../proto/nd_proto.h"
#include "../proto/nd_v2.h"

enum { ROWS = 8, COLS = 1024, N = ROWS * COLS };

static double bench_seconds = 1.5;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

/* Roughly normal values, as activations are. */
static float gauss(void)
{
    double u = uniform() + 1e-300, v = uniform();
    return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

/* A growing string, as the bench may exit on failure. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_add(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = 2 * (b->cap + (size_t)n + 1);
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "bench_json: out of memory\n");
            exit(1);
        }
    }
}

/* The numbers of x: "%.<digits>g" of float32 values (float16 ones when half). */
static void add_numbers(sbuf *b, const float *x, int digits)
{
    for (int i = 0; i < N; i++)
        sb_add(b, "%s%.*g", i ? "," : "", digits, (double)x[i]);
}

typedef struct result {
    const char *what, *form;
    double mnum_s; /* million numbers per second */
} result;

static result results[16];
static int nresults;

static void report(const char *what, const char *form, double secs, long reps)
{
    double rate = (double)N * (double)reps / secs / 1e6;
    results[nresults++] = (result){what, form, rate};
    printf("%-34s %-10s %10.1f %9.1f\n", what, form, rate, 1e3 / rate);
    fflush(stdout);
}

/* Times fn(ctx) (one request) and reports elements per second. */
static void timed(const char *what, const char *form, void (*fn)(void *), void *ctx)
{
    double best = 1e30;
    long best_reps = 1;
    fn(ctx); /* warm-up, tables */
    for (int round = 0; round < 10; round++) {
        long reps = 0;
        double t0 = now_s(), t;
        do {
            fn(ctx);
            reps++;
        } while ((t = now_s() - t0) < bench_seconds / 10);
        if (t / (double)reps < best / (double)best_reps) {
            best = t;
            best_reps = reps;
        }
    }
    report(what, form, best, best_reps);
}

typedef struct parse_ctx {
    const char *body;
    size_t len;
    int v2;
    nd_dtype dt;
} parse_ctx;

static void parse_once(void *p)
{
    parse_ctx *c = p;
    nd_error err;
    int rc;
    if (c->v2) {
        nd_v2_request r;
        rc = nd_v2_parse_infer(ND_OP_LAYERNORM, c->body, c->len, NULL, 0, &r, &err);
        nd_v2_request_free(&r);
    } else {
        nd_request req;
        rc = nd_proto_parse_json(ND_OP_LAYERNORM, c->body, c->len, 0, &req, &err);
        nd_request_free(&req);
    }
    if (rc) {
        fprintf(stderr, "bench_json: parse failed: %d %s\n", rc, err.msg);
        exit(1);
    }
}

typedef struct encode_ctx {
    nd_request req;
    nd_v2_request v2;
    const void *y;
    int use_v2;
} encode_ctx;

static void encode_once(void *p)
{
    encode_ctx *c = p;
    char *out = NULL;
    size_t len, jl;
    int rc = c->use_v2 ? nd_v2_encode_infer(&c->v2, c->y, NULL, NULL, &out, &len, &jl)
                       : nd_proto_encode_json(&c->req, c->y, NULL, NULL, &out, &len);
    if (rc) {
        fprintf(stderr, "bench_json: encode failed\n");
        exit(1);
    }
    free(out);
}

/* The float32 writer alone, on x: one number at a time, or the array at once. */
typedef struct write_ctx {
    const float *x;
    char *buf;
    int array;
} write_ctx;

static void write_once(void *p)
{
    write_ctx *c = p;
    char *e = c->buf;
    if (c->array) {
        e = nd_json_put_f32s(e, c->x, N);
    } else {
        for (int i = 0; i < N; i++) {
            if (i)
                *e++ = ',';
            e = nd_json_put_f32(e, c->x[i]);
        }
    }
    if (e == c->buf) {
        fprintf(stderr, "bench_json: nothing written\n");
        exit(1);
    }
}

static void parse_case(const char *what, const char *form, const float *x, int digits, int v2,
                       const char *dtype)
{
    sbuf b = {0};
    if (v2) {
        sb_add(&b, "{\"inputs\":[{\"name\":\"x\",\"shape\":[%d,%d],\"datatype\":\"%s\",\"data\":[",
               ROWS, COLS, dtype);
        add_numbers(&b, x, digits);
        sb_add(&b, "]}]}");
    } else {
        sb_add(&b, "{\"shape\":[%d,%d],\"dtype\":\"%s\",\"data\":[", ROWS, COLS, dtype);
        add_numbers(&b, x, digits);
        sb_add(&b, "]}");
    }
    parse_ctx c = {b.p, b.len, v2, ND_FLOAT32};
    timed(what, form, parse_once, &c);
    free(b.p);
}

int main(int argc, char **argv)
{
    const char *csv = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc)
            csv = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            bench_seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_json [--csv FILE] [--seconds S]\n");
            return 2;
        }
    }

    static float x[N], xh[N];
    static uint16_t yh[N];
    for (int i = 0; i < N; i++) {
        x[i] = gauss();
        yh[i] = nd_float_to_half(x[i]);
        xh[i] = nd_half_to_float(yh[i]);
    }

#if defined(__x86_64__)
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
#else
    const int avx512 = 0;
#endif
    printf("float32 arrays written %s\n", avx512 ? "eight at a time (AVX-512)" : "one at a time");
    printf("%-34s %-10s %10s %9s\n", "case (8x1024, one core)", "numbers", "M num/s", "ns/num");
    parse_case("parse /v1 float32", "9 digits", x, 9, 0, "float32");
    parse_case("parse /v1 float32", "17 digits", x, 17, 0, "float32");
    parse_case("parse v2 FP32", "9 digits", x, 9, 1, "FP32");
    parse_case("parse /v1 float16", "5 digits", xh, 5, 0, "float16");

    encode_ctx e = {0};
    e.req.op = ND_OP_LAYERNORM;
    e.req.dtype = ND_FLOAT32;
    e.req.ndim = 2;
    e.req.shape[0] = ROWS;
    e.req.shape[1] = COLS;
    e.req.elems = N;
    e.req.outputs = ND_OUT_Y;
    e.v2.req = e.req;
    e.y = x;
    timed("encode /v1 float32", "shortest", encode_once, &e);
    e.use_v2 = 1;
    timed("encode v2 FP32", "shortest", encode_once, &e);
    e.use_v2 = 0;
    e.req.dtype = ND_FLOAT16;
    e.y = yh;
    timed("encode /v1 float16", "table", encode_once, &e);

    static char wbuf[N * (ND_JSON_F32_MAX + 1)];
    write_ctx w = {x, wbuf, 0};
    timed("write float32 one at a time", "shortest", write_once, &w);
    w.array = 1;
    timed(avx512 ? "write float32 array (AVX-512)" : "write float32 array", "shortest", write_once,
          &w);

    if (csv) {
        FILE *f = fopen(csv, "w");
        if (!f) {
            perror(csv);
            return 1;
        }
        fprintf(f, "case,numbers,mnum_per_s,ns_per_num\n");
        for (int i = 0; i < nresults; i++)
            fprintf(f, "%s,%s,%.2f,%.2f\n", results[i].what, results[i].form, results[i].mnum_s,
                    1e3 / results[i].mnum_s);
        fclose(f);
    }
    return 0;
}
