/*
 * it_v2.c - the KServe v2 protocol at the byte level, against a started daemon: the binary tensor
 * framing and its edge cases, compressed bodies and answers, status codes, v2 and /v1 requests in
 * one batch with bit-identical answers, the UNIX socket, the health/metadata routes, and the
 * system shared memory extension (off by default, the admin token, tensors read from and written
 * to regions by batches of several requests, a region unregistered under a request in flight).
 * (tests/py/test_v2_tritonclient.py and test_v2_shm_tritonclient.py drive the same routes through
 * a real client.)
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "../kernels/nd_dtype.h"
#include "util/nd_http.h"
#include "util/nd_testutil.h"

static nd_daemon d;

static void start(const char *const *extra)
{
    cr_assert_eq(nd_daemon_start(&d, extra), 0, "daemon did not start");
}
static void start_default(void)
{
    start(NULL);
}
static void stop_clean(void)
{
    cr_assert_eq(nd_daemon_stop(&d, 30), 0, "daemon did not exit 0 on SIGTERM");
}

static char *url_of(const char *path)
{
    static __thread char buf[256];
    snprintf(buf, sizeof buf, "%s%s", d.base, path);
    return buf;
}

/* A request's charge against the in-flight byte budget is given back when the daemon completes
 * it, which can be a moment after its client has read the answer: wait until nothing is charged
 * (at most 5 s), as it_hardening's budget test does before its next request. */
static void wait_budget_free(void)
{
    for (int i = 0;; i++) {
        const double held = nd_metric(d.base, "normd_inflight_bytes", NULL);
        if (held == 0)
            return;
        cr_assert(i < 1000, "the in-flight byte budget still holds %.0f bytes after 5 s", held);
        usleep(5000);
    }
}

/* POST /v2/models/{model}/infer with a JSON header of hlen bytes followed by bin (blen bytes).
 * header_value overrides the Inference-Header-Content-Length value ("" sends none). */
static void infer_raw(const char *model, const char *json, const void *bin, size_t blen,
                      const char *header_value, const char *accept_encoding, nd_resp *r)
{
    size_t jlen = strlen(json);
    char *body = malloc(jlen + blen + 1);
    cr_assert_not_null(body);
    memcpy(body, json, jlen);
    if (blen)
        memcpy(body + jlen, bin, blen);
    char hdr[96];
    const char *headers[2] = {NULL, NULL};
    if (!header_value) {
        snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", jlen);
        headers[0] = hdr;
    } else if (*header_value) {
        snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %s", header_value);
        headers[0] = hdr;
    }
    char path[128];
    snprintf(path, sizeof path, "/v2/models/%s/infer", model);
    nd_http_req q = {.method = "POST", .url = url_of(path), .content_type = "application/json",
                     .headers = headers, .body = body, .len = jlen + blen,
                     .accept_encoding = accept_encoding};
    cr_assert_eq(nd_http_do(&q, r), 0);
    free(body);
}

static json_t *parse_json(const char *s, size_t len)
{
    json_error_t e;
    json_t *j = json_loadb(s, len, 0, &e);
    cr_assert_not_null(j, "not JSON (%s): %.*s", e.text, (int)(len < 300 ? len : 300), s);
    return j;
}

static void expect_error(const nd_resp *r, long code, const char *needle)
{
    cr_assert_eq(r->code, code, "HTTP %ld (expected %ld): %s", r->code, code, r->body);
    cr_assert(strstr(r->body, needle), "message does not name \"%s\": %s", needle, r->body);
}

/* A random float16 layernorm case: x [rows, cols], gamma, beta; the JSON header of a binary
 * request; the float64 reference. */
typedef struct ln_case {
    int rows, cols;
    uint16_t *x, *g, *b;
    double *xd, *gd, *bd, *ref;
    char json[1024];
    char *bin;
    size_t blen;
} ln_case;

static void ln_make(ln_case *c, int rows, int cols, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->rows = rows;
    c->cols = cols;
    uint64_t rng = seed;
    size_t n = (size_t)rows * cols;
    c->x = malloc(n * 2);
    c->g = malloc((size_t)cols * 2);
    c->b = malloc((size_t)cols * 2);
    c->xd = malloc(n * sizeof(double));
    c->gd = malloc((size_t)cols * sizeof(double));
    c->bd = malloc((size_t)cols * sizeof(double));
    c->ref = malloc(n * sizeof(double));
    nd_fill_random(ND_FLOAT16, c->x, (int64_t)n, 0.5, 2.0, &rng, c->xd);
    nd_fill_random(ND_FLOAT16, c->g, cols, 1.0, 0.5, &rng, c->gd);
    nd_fill_random(ND_FLOAT16, c->b, cols, 0.0, 0.5, &rng, c->bd);
    nd_ref_layernorm(c->xd, rows, cols, c->gd, c->bd, 1e-5, c->ref, NULL, NULL);
    snprintf(c->json, sizeof c->json,
             "{\"id\":\"ln\",\"inputs\":["
             "{\"name\":\"x\",\"shape\":[%d,%d],\"datatype\":\"FP16\","
             "\"parameters\":{\"binary_data_size\":%zu}},"
             "{\"name\":\"gamma\",\"shape\":[%d],\"datatype\":\"FP16\","
             "\"parameters\":{\"binary_data_size\":%d}},"
             "{\"name\":\"beta\",\"shape\":[%d],\"datatype\":\"FP16\","
             "\"parameters\":{\"binary_data_size\":%d}}],"
             "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"binary_data\":true}}]}",
             rows, cols, n * 2, cols, cols * 2, cols, cols * 2);
    c->blen = n * 2 + (size_t)cols * 4;
    c->bin = malloc(c->blen);
    memcpy(c->bin, c->x, n * 2);
    memcpy(c->bin + n * 2, c->g, (size_t)cols * 2);
    memcpy(c->bin + n * 2 + (size_t)cols * 2, c->b, (size_t)cols * 2);
}

static void ln_free(ln_case *c)
{
    free(c->x), free(c->g), free(c->b), free(c->xd), free(c->gd), free(c->bd), free(c->ref);
    free(c->bin);
}

/* Checks a binary v2 answer holding y only against the reference; returns a pointer to y. */
static const char *check_binary_answer(const ln_case *c, const nd_resp *r)
{
    cr_assert_eq(r->code, 200, "HTTP %ld: %s", r->code, r->body);
    cr_assert(r->infer_header_len[0], "no Inference-Header-Content-Length in the answer");
    size_t hlen = strtoull(r->infer_header_len, NULL, 10);
    size_t ybytes = (size_t)c->rows * c->cols * 2;
    cr_assert_eq(r->len, hlen + ybytes, "answer is %zu bytes, header %zu + y %zu", r->len, hlen,
                 ybytes);
    json_t *j = parse_json(r->body, hlen);
    cr_assert_str_eq(json_string_value(json_object_get(j, "id")), "ln");
    cr_assert_str_eq(json_string_value(json_object_get(j, "model_name")), "layernorm");
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(o, "name")), "y");
    cr_assert_str_eq(json_string_value(json_object_get(o, "datatype")), "FP16");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "parameters"),
                                                    "binary_data_size")),
                 (json_int_t)ybytes);
    json_decref(j);
    char msg[256];
    int64_t bad = nd_compare(ND_FLOAT16, r->body + hlen, c->ref, (int64_t)c->rows * c->cols, "y",
                             msg, sizeof msg);
    cr_assert_eq(bad, 0, "%lld wrong: %s", (long long)bad, msg);
    return r->body + hlen;
}

TestSuite(v2, .init = start_default, .fini = stop_clean, .timeout = 120);
TestSuite(v2_configured, .timeout = 120);

/* ---- the routes that are not inference ---- */

Test(v2, health_metadata_config_and_stats)
{
    static const struct {
        const char *path;
        long code;
        const char *needle;
    } cases[] = {
        {"/v2/health/live", 200, ""},
        {"/v2/health/ready", 200, ""},
        {"/v2", 200, "\"binary_tensor_data\""},
        {"/v2/models/layernorm", 200, "\"gamma\""},
        {"/v2/models/rmsnorm/versions/1", 200, "\"weight\""},
        {"/v2/models/prelu/ready", 200, ""},
        {"/v2/models/softmax/versions/1/ready", 200, ""},
        {"/v2/models/log_softmax/config", 200, "\"max_batch_size\""},
        {"/v2/models/stats", 200, "\"model_stats\""},
        {"/v2/models/softmax/stats", 200, "\"inference_stats\""},
        {"/v2/models/batchnorm", 404, "layernorm"},
        {"/v2/models/softmax/versions/2", 404, "version"},
        {"/v2/models/softmax/versions/2/infer", 404, "version"},
        {"/v2/models/softmax/unknown", 404, "no such"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        nd_resp r;
        cr_assert_eq(nd_http("GET", url_of(cases[i].path), NULL, NULL, 0, &r), 0);
        cr_assert_eq(r.code, cases[i].code, "GET %s: HTTP %ld: %s", cases[i].path, r.code,
                     r.body);
        cr_assert(strstr(r.body, cases[i].needle), "GET %s: no %s in %s", cases[i].path,
                  cases[i].needle, r.body);
        if (r.code == 200 && r.len)
            json_decref(parse_json(r.body, r.len));
        nd_resp_free(&r);
    }
    nd_resp r;
    cr_assert_eq(nd_http("POST", url_of("/v2/health/live"), "application/json", "{}", 2, &r), 0);
    cr_assert_eq(r.code, 405);
    cr_assert(strstr(r.allow, "GET"), "Allow: %s", r.allow);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/models/softmax/infer"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 405);
    cr_assert_str_eq(r.allow, "POST");
    nd_resp_free(&r);
}

/* ---- inference ---- */

Test(v2, binary_layernorm_matches_the_reference_and_the_v1_answer_bit_for_bit)
{
    ln_case c;
    ln_make(&c, 7, 300, 42);
    nd_resp r2;
    infer_raw("layernorm", c.json, c.bin, c.blen, NULL, NULL, &r2);
    const char *y2 = check_binary_answer(&c, &r2);

    char path[160];
    snprintf(path, sizeof path, "/v1/layernorm?shape=%d,%d&dtype=float16&affine=1", c.rows,
             c.cols);
    nd_resp r1;
    cr_assert_eq(nd_http("POST", url_of(path), "application/octet-stream", c.bin, c.blen, &r1),
                 0);
    cr_assert_eq(r1.code, 200, "/v1: %s", r1.body);
    cr_assert_eq(r1.len, (size_t)c.rows * c.cols * 2);
    cr_assert_eq(memcmp(r1.body, y2, r1.len), 0, "/v1 and /v2 answers differ");
    nd_resp_free(&r1);
    nd_resp_free(&r2);
    ln_free(&c);
}

Test(v2, json_tensors_and_the_versioned_route)
{
    const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2,3],\"datatype\":\"FP32\","
                       "\"data\":[[1,2,3],[1,1,1]]}],\"outputs\":[{\"name\":\"y\"}]}";
    nd_resp r;
    cr_assert_eq(nd_http("POST", url_of("/v2/models/softmax/versions/1/infer"),
                         "application/json", body, strlen(body), &r), 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    cr_assert_eq(r.infer_header_len[0], '\0', "a JSON answer carries no binary header");
    json_t *j = parse_json(r.body, r.len);
    cr_assert_str_eq(json_string_value(json_object_get(j, "model_version")), "1");
    cr_assert_null(json_object_get(j, "id"), "no id asked, none echoed");
    json_t *y = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    cr_assert_eq(json_array_size(y), 6);
    double x[6] = {1, 2, 3, 1, 1, 1}, ref[6];
    nd_ref_softmax(x, 2, 3, 1, 0, ref);
    for (int i = 0; i < 6; i++) {
        double got = json_number_value(json_array_get(y, (size_t)i));
        cr_assert(nd_close(ND_FLOAT32, got, ref[i]), "y[%d]=%g, reference %g", i, got, ref[i]);
    }
    json_decref(j);
    nd_resp_free(&r);
}

Test(v2, binary_framing_errors_are_400_and_name_the_problem)
{
    ln_case c;
    ln_make(&c, 2, 8, 7);
    static const struct {
        const char *header;
        const char *needle;
    } bad_headers[] = {
        {"-1", "Inference-Header-Content-Length"},
        {"abc", "Inference-Header-Content-Length"},
        {"12x", "Inference-Header-Content-Length"},
        {"999999", "Inference-Header-Content-Length"},
        {"99999999999999999999999", "Inference-Header-Content-Length"},
    };
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        nd_resp r;
        infer_raw("layernorm", c.json, c.bin, c.blen, bad_headers[i].header, NULL, &r);
        expect_error(&r, 400, bad_headers[i].needle);
        nd_resp_free(&r);
    }
    /* binary sizes that do not add up to the body: one byte short, one byte over */
    nd_resp r;
    infer_raw("layernorm", c.json, c.bin, c.blen - 1, NULL, NULL, &r);
    cr_assert_eq(r.code, 400, "short body: HTTP %ld %s", r.code, r.body);
    nd_resp_free(&r);
    char *more = calloc(1, c.blen + 1);
    memcpy(more, c.bin, c.blen);
    infer_raw("layernorm", c.json, more, c.blen + 1, NULL, NULL, &r);
    cr_assert_eq(r.code, 400, "long body: HTTP %ld %s", r.code, r.body);
    nd_resp_free(&r);
    free(more);
    /* binary_data_size with no header at all: the JSON parser sees the tensor bytes */
    infer_raw("layernorm", c.json, c.bin, c.blen, "", NULL, &r);
    cr_assert_eq(r.code, 400, "no header: HTTP %ld %s", r.code, r.body);
    nd_resp_free(&r);
    ln_free(&c);
    /* the daemon carries on */
    ln_make(&c, 3, 16, 8);
    infer_raw("layernorm", c.json, c.bin, c.blen, NULL, NULL, &r);
    check_binary_answer(&c, &r);
    nd_resp_free(&r);
    ln_free(&c);
}

Test(v2, request_errors_are_400_and_name_the_problem)
{
    static const struct {
        const char *model, *body, *needle;
    } cases[] = {
        {"softmax", "{\"inputs\":[]}", "no input named"},
        {"softmax", "{\"inputs\":[{\"name\":\"y\",\"shape\":[1],\"datatype\":\"FP32\","
                    "\"data\":[1]}]}", "unknown input"},
        {"softmax", "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
                    "\"data\":[1,2]},{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
                    "\"data\":[1,2]}]}", "given twice"},
        {"softmax", "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"INT8\","
                    "\"data\":[1,2]}]}", "INT8"},
        {"softmax", "{\"inputs\":[{\"name\":\"x\",\"shape\":[3],\"datatype\":\"FP32\","
                    "\"data\":[1,2]}]}", "shape"},
        {"softmax", "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"BF16\","
                    "\"data\":[1,2]}]}", "BF16"},
        {"layernorm", "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
                      "\"data\":[1,2]}],\"outputs\":[{\"name\":\"z\"}]}", "z"},
        {"softmax", "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
                    "\"data\":[1,2]}],\"parameters\":{\"axis\":3}}", "axis"},
        {"softmax", "not json", "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[96];
        snprintf(path, sizeof path, "/v2/models/%s/infer", cases[i].model);
        nd_resp r;
        cr_assert_eq(nd_http("POST", url_of(path), "application/json", cases[i].body,
                             strlen(cases[i].body), &r), 0);
        cr_assert_eq(r.code, 400, "case %zu: HTTP %ld: %s", i, r.code, r.body);
        cr_assert(strstr(r.body, cases[i].needle), "case %zu: message does not name %s: %s", i,
                  cases[i].needle, r.body);
        nd_resp_free(&r);
    }
    /* an unknown parameter set is a 404, as on /v1 */
    const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
                       "\"data\":[1,2]}],\"parameters\":{\"params\":\"none\"}}";
    nd_resp r;
    cr_assert_eq(nd_http("POST", url_of("/v2/models/rmsnorm/infer"), "application/json", body,
                         strlen(body), &r), 0);
    expect_error(&r, 404, "none");
    nd_resp_free(&r);
}

/* gzip (and deflate) request bodies; a gzip answer when the client accepts it. */
static size_t gzip_buf(const void *in, size_t len, int gzip, char *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, gzip ? 31 : 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    return n;
}

Test(v2, compressed_bodies_and_answers)
{
    ln_case c;
    ln_make(&c, 16, 256, 99);
    size_t jlen = strlen(c.json), plain = jlen + c.blen;
    char *body = malloc(plain), *z = malloc(plain * 2 + 1024);
    memcpy(body, c.json, jlen);
    memcpy(body + jlen, c.bin, c.blen);
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %zu", jlen);
    for (int gzip = 0; gzip <= 1; gzip++) {
        size_t zlen = gzip_buf(body, plain, gzip, z, plain * 2 + 1024);
        const char *headers[] = {hdr, gzip ? "Content-Encoding: gzip" : "Content-Encoding: deflate",
                                 NULL};
        nd_http_req q = {.method = "POST", .url = url_of("/v2/models/layernorm/infer"),
                         .headers = headers, .body = z, .len = zlen, .accept_encoding = ""};
        nd_resp r;
        cr_assert_eq(nd_http_do(&q, &r), 0);
        cr_assert_str_eq(r.content_encoding, "gzip", "answer not compressed (%s)",
                         r.content_encoding);
        check_binary_answer(&c, &r); /* curl inflated it */
        nd_resp_free(&r);
    }
    /* corrupt compressed data and an unknown coding */
    const char *headers[] = {hdr, "Content-Encoding: gzip", NULL};
    nd_http_req q = {.method = "POST", .url = url_of("/v2/models/layernorm/infer"),
                     .headers = headers, .body = body, .len = plain};
    nd_resp r;
    cr_assert_eq(nd_http_do(&q, &r), 0);
    expect_error(&r, 400, "compressed");
    nd_resp_free(&r);
    const char *br[] = {hdr, "Content-Encoding: br", NULL};
    q.headers = br;
    cr_assert_eq(nd_http_do(&q, &r), 0);
    expect_error(&r, 415, "br");
    nd_resp_free(&r);
    free(body);
    free(z);
    ln_free(&c);
}

/* ---- v2 and /v1 in one batch ---- */

typedef struct flight {
    const ln_case *c;
    int v2;
    nd_resp r;
} flight;

static void *fly(void *arg)
{
    flight *f = arg;
    if (f->v2) {
        infer_raw("layernorm", f->c->json, f->c->bin, f->c->blen, NULL, NULL, &f->r);
    } else {
        char path[160];
        snprintf(path, sizeof path, "%s/v1/layernorm?shape=%d,%d&dtype=float16&affine=1", d.base,
                 f->c->rows, f->c->cols);
        nd_http("POST", path, "application/octet-stream", f->c->bin, f->c->blen, &f->r);
    }
    return NULL;
}

static void start_slow(void)
{
    static const char *const args[] = {"--max-delay-us", "300000", NULL};
    start(args);
}

Test(v2_configured, v2_and_v1_requests_share_batches, .init = start_slow, .fini = stop_clean)
{
    enum { N = 16 };
    ln_case cases[N];
    flight f[N];
    pthread_t t[N];
    nd_resp m0;
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &m0), 0);
    double b0 = nd_metric_value(m0.body, "normd_batches_total", "op=\"layernorm\"");
    nd_resp_free(&m0);
    /* one gamma/beta for all (the batch key includes inline parameters): rows differ */
    for (int i = 0; i < N; i++) {
        ln_make(&cases[i], 1 + i % 3, 64, 1000 + (uint64_t)i);
        if (i) {
            memcpy(cases[i].bin + (size_t)cases[i].rows * 64 * 2, cases[0].bin + 64 * 2, 256);
            nd_to_f64(ND_FLOAT16, cases[0].g, 64, cases[i].gd);
            nd_to_f64(ND_FLOAT16, cases[0].b, 64, cases[i].bd);
            nd_ref_layernorm(cases[i].xd, cases[i].rows, 64, cases[i].gd, cases[i].bd, 1e-5,
                             cases[i].ref, NULL, NULL);
        }
        f[i] = (flight){.c = &cases[i], .v2 = i % 2};
        pthread_create(&t[i], NULL, fly, &f[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) {
        if (f[i].v2) {
            check_binary_answer(&cases[i], &f[i].r);
        } else {
            cr_assert_eq(f[i].r.code, 200, "/v1: %s", f[i].r.body);
            char msg[256];
            cr_assert_eq(nd_compare(ND_FLOAT16, f[i].r.body, cases[i].ref,
                                    (int64_t)cases[i].rows * 64, "y", msg, sizeof msg), 0, "%s",
                         msg);
        }
        nd_resp_free(&f[i].r);
        ln_free(&cases[i]);
    }
    nd_resp m1;
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &m1), 0);
    double b1 = nd_metric_value(m1.body, "normd_batches_total", "op=\"layernorm\"");
    nd_resp_free(&m1);
    cr_assert(b1 - b0 >= 1 && b1 - b0 <= N / 2, "%g batches for %d requests", b1 - b0, N);
}

static void start_small_body(void)
{
    static const char *const args[] = {"--max-body-bytes", "4096", NULL};
    start(args);
}

Test(v2_configured, body_over_the_limit_is_413, .init = start_small_body, .fini = stop_clean)
{
    ln_case c;
    ln_make(&c, 8, 512, 5);
    nd_resp r;
    infer_raw("layernorm", c.json, c.bin, c.blen, NULL, NULL, &r);
    expect_error(&r, 413, "limit");
    nd_resp_free(&r);
    ln_free(&c);
}

static char unix_path[108];
static void start_unix(void)
{
    snprintf(unix_path, sizeof unix_path, "/tmp/normd-it-v2-%d.sock", (int)getpid());
    static const char *args[] = {"--unix", NULL, NULL};
    args[1] = unix_path;
    start(args);
}

Test(v2_configured, the_unix_socket_serves_v2, .init = start_unix, .fini = stop_clean)
{
    nd_resp r;
    cr_assert_eq(nd_http_unix(unix_path, "GET", "http://localhost/v2/health/ready", NULL, NULL,
                              0, &r), 0);
    cr_assert_eq(r.code, 200);
    nd_resp_free(&r);
    const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2,2],\"datatype\":\"FP32\","
                       "\"data\":[-1,2,-3,4]},{\"name\":\"alpha\",\"shape\":[2],"
                       "\"datatype\":\"FP32\",\"data\":[0.5,0.25]}]}";
    cr_assert_eq(nd_http_unix(unix_path, "POST", "http://localhost/v2/models/prelu/infer",
                              "application/json", body, strlen(body), &r), 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    json_t *j = parse_json(r.body, r.len);
    json_t *y = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
    const double want[4] = {-0.5, 2, -0.75, 4};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(json_number_value(json_array_get(y, (size_t)i)), want[i], "y[%d]", i);
    json_decref(j);
    nd_resp_free(&r);
}

/* ---- system shared memory ---- */

/* A POSIX shared memory object of n bytes made by the test (the client's side), mapped. */
typedef struct shm_obj {
    char key[64];
    unsigned char *p;
    size_t n;
} shm_obj;

static void shm_make(shm_obj *o, const char *tag, size_t n)
{
    snprintf(o->key, sizeof o->key, "/normd-it-v2-%d-%s", (int)getpid(), tag);
    shm_unlink(o->key);
    int fd = shm_open(o->key, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0, "shm_open %s", o->key);
    cr_assert_eq(ftruncate(fd, (off_t)n), 0);
    o->p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(o->p, MAP_FAILED);
    close(fd);
    o->n = n;
}

static void shm_drop(shm_obj *o)
{
    munmap(o->p, o->n);
    shm_unlink(o->key);
}

static long shm_post(const char *path, const char *body, const char *auth, nd_resp *r)
{
    const char *headers[2] = {auth, NULL};
    nd_http_req q = {.method = "POST", .url = url_of(path), .content_type = "application/json",
                     .headers = auth ? headers : NULL, .body = body,
                     .len = body ? strlen(body) : 0};
    cr_assert_eq(nd_http_do(&q, r), 0);
    return r->code;
}

static void shm_register(const char *name, const shm_obj *o, size_t off, size_t size,
                         const char *auth)
{
    char path[128], body[192];
    snprintf(path, sizeof path, "/v2/systemsharedmemory/region/%s/register", name);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"offset\":%zu,\"byte_size\":%zu}", o->key, off,
             size);
    nd_resp r;
    cr_assert_eq(shm_post(path, body, auth, &r), 200, "register %s: HTTP %ld: %s", name, r.code,
                 r.body);
    nd_resp_free(&r);
}

/* The JSON of a layernorm request whose x, gamma, beta lie in region rin at xo, go, bo, whose y
 * goes to region rout at yo and, when mo (ro) is not negative, its mean (rstd) to rout at mo
 * (ro). */
static void ln_region_json(const ln_case *c, const char *rin, const char *rout, size_t xo,
                           size_t go, size_t bo, size_t yo, long mo, long ro, char *buf,
                           size_t size)
{
    const size_t xb = (size_t)c->rows * c->cols * 2, pb = (size_t)c->cols * 2;
    int n = snprintf(buf, size,
                     "{\"inputs\":["
                     "{\"name\":\"x\",\"shape\":[%d,%d],\"datatype\":\"FP16\",\"parameters\":{"
                     "\"shared_memory_region\":\"%s\",\"shared_memory_offset\":%zu,"
                     "\"shared_memory_byte_size\":%zu}},"
                     "{\"name\":\"gamma\",\"shape\":[%d],\"datatype\":\"FP16\",\"parameters\":{"
                     "\"shared_memory_region\":\"%s\",\"shared_memory_offset\":%zu,"
                     "\"shared_memory_byte_size\":%zu}},"
                     "{\"name\":\"beta\",\"shape\":[%d],\"datatype\":\"FP16\",\"parameters\":{"
                     "\"shared_memory_region\":\"%s\",\"shared_memory_offset\":%zu,"
                     "\"shared_memory_byte_size\":%zu}}],"
                     "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":"
                     "\"%s\",\"shared_memory_offset\":%zu,\"shared_memory_byte_size\":%zu}}",
                     c->rows, c->cols, rin, xo, xb, c->cols, rin, go, pb, c->cols, rin, bo, pb,
                     rout, yo, xb);
    const char *names[2] = {"mean", "rstd"};
    const long offs[2] = {mo, ro};
    for (int k = 0; k < 2; k++)
        if (offs[k] >= 0)
            n += snprintf(buf + n, size - (size_t)n,
                          ",{\"name\":\"%s\",\"parameters\":{\"shared_memory_region\":\"%s\","
                          "\"shared_memory_offset\":%ld,\"shared_memory_byte_size\":%d}}",
                          names[k], rout, offs[k], c->rows * 4);
    snprintf(buf + n, size - (size_t)n, "]}");
}

/* The answer names y's region and carries no values; y itself is checked in the region. */
static void check_shm_answer(const ln_case *c, const nd_resp *r, const unsigned char *y)
{
    cr_assert_eq(r->code, 200, "HTTP %ld: %s", r->code, r->body);
    cr_assert_eq(r->infer_header_len[0], '\0', "nothing binary in the answer");
    json_t *j = parse_json(r->body, r->len);
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    cr_assert_null(json_object_get(o, "data"), "%s", r->body);
    json_t *p = json_object_get(o, "parameters");
    cr_assert_str_eq(json_string_value(json_object_get(p, "shared_memory_region")), "out");
    cr_assert_eq(json_integer_value(json_object_get(p, "shared_memory_byte_size")),
                 (json_int_t)c->rows * c->cols * 2);
    json_decref(j);
    char msg[256];
    int64_t bad = nd_compare(ND_FLOAT16, y, c->ref, (int64_t)c->rows * c->cols, "y", msg,
                             sizeof msg);
    cr_assert_eq(bad, 0, "%lld wrong: %s", (long long)bad, msg);
}

Test(v2, shared_memory_is_off_unless_asked_for)
{
    nd_resp r;
    cr_assert_eq(shm_post("/v2/systemsharedmemory/region/a/register",
                          "{\"key\":\"/a\",\"byte_size\":4}", NULL, &r),
                 400);
    expect_error(&r, 400, "--allow-client-shm");
    nd_resp_free(&r);
    cr_assert_eq(shm_post("/v2/cudasharedmemory/region/a/register",
                          "{\"raw_handle\":{\"b64\":\"AAAA\"},\"device_id\":0,\"byte_size\":4}",
                          NULL, &r),
                 400);
    expect_error(&r, 400, "CUDA shared memory is off (start normd with --allow-client-shm)");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2"), NULL, NULL, 0, &r), 0);
    cr_assert_null(strstr(r.body, "system_shared_memory"), "%s", r.body);
    cr_assert_null(strstr(r.body, "cuda_shared_memory"), "%s", r.body);
    nd_resp_free(&r);
    const char *body = "{\"inputs\":[{\"name\":\"x\",\"shape\":[2],\"datatype\":\"FP32\","
                       "\"parameters\":{\"shared_memory_region\":\"a\","
                       "\"shared_memory_byte_size\":8}}]}";
    infer_raw("softmax", body, NULL, 0, "", NULL, &r);
    expect_error(&r, 400, "--allow-client-shm");
    nd_resp_free(&r);
}

static char shm_token_path[64];
static void start_shm(void)
{
    snprintf(shm_token_path, sizeof shm_token_path, "/tmp/normd-it-v2-token-%d", (int)getpid());
    FILE *f = fopen(shm_token_path, "w");
    cr_assert_not_null(f);
    fputs("shm-t0ken\n", f);
    fclose(f);
    /* a batching window, so that the concurrent requests below share batches; a slow batch, so
     * that a region can be unregistered while its request is in flight */
    static const char *args[] = {"--allow-client-shm", "--admin-token-file", NULL,
                                 "--max-delay-us", "200000", "--slow-batch-us", "300000",
                                 "--max-inflight-bytes", "1000000",
                                 /* with --backend cuda: every tensor in shared memory goes by
                                  * the device's own copy from and to its region */
                                 "--cuda-shm-dma-bytes", "0", NULL};
    args[2] = shm_token_path;
    start(args);
}

static void stop_shm(void)
{
    unlink(shm_token_path);
    /* the test's objects, also when a failed assertion ended it before shm_drop */
    const char *tags[] = {"in", "out"};
    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof key, "/normd-it-v2-%d-%s", (int)getpid(), tags[i]);
        shm_unlink(key);
    }
    stop_clean();
}

#define SHM_AUTH "Authorization: Bearer shm-t0ken"

typedef struct shm_flight {
    const char *json;
    nd_resp r;
} shm_flight;

static void *shm_fly(void *arg)
{
    shm_flight *f = arg;
    infer_raw("layernorm", f->json, NULL, 0, "", NULL, &f->r);
    return NULL;
}

/* Requests of different row counts, their tensors at odd offsets of one input region and their
 * y at odd offsets of one output region, batched together: each y lands in its own window and
 * nowhere else. Then a region unregistered while a request that uses it is in flight: that
 * request is still answered from it, and later ones are refused. Then a y window past its
 * region's end, and the byte budget. */
Test(v2_configured, tensors_in_shared_memory, .init = start_shm, .fini = stop_shm)
{
    enum { N = 6, COLS = 96 };
    shm_obj in, out;
    shm_make(&in, "in", 1 << 20);
    shm_make(&out, "out", 1 << 20);

    /* registering and unregistering take the admin token */
    nd_resp r;
    char reg[160];
    snprintf(reg, sizeof reg, "{\"key\":\"%s\",\"offset\":0,\"byte_size\":%zu}", in.key, in.n);
    cr_assert_eq(shm_post("/v2/systemsharedmemory/region/in/register", reg, NULL, &r), 401);
    nd_resp_free(&r);
    cr_assert_eq(shm_post("/v2/systemsharedmemory/unregister", NULL, NULL, &r), 401);
    nd_resp_free(&r);
    shm_register("in", &in, 0, in.n, SHM_AUTH);
    shm_register("out", &out, 4096, out.n - 4096, SHM_AUTH); /* a window from the second page */
    cr_assert_eq(nd_http("GET", url_of("/v2"), NULL, NULL, 0, &r), 0);
    cr_assert(strstr(r.body, "\"system_shared_memory\""), "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    const double regions = nd_metric_value(r.body, "normd_shm_regions", "");
    const double bytes = nd_metric_value(r.body, "normd_shm_bytes", "");
    const double pinned = nd_metric_value(r.body, "normd_shm_pinned_bytes", "");
    nd_resp_free(&r);
    cr_assert_eq(regions, 2);
    cr_assert_eq(bytes, (double)(in.n + out.n - 4096));
    /* pinned by the cuda engine, not by the cpu one */
    cr_assert(pinned == 0 || pinned == bytes, "pinned %g of %g bytes", pinned, bytes);
    cr_assert_eq(nd_http("GET", url_of("/v2/systemsharedmemory/region/out/status"), NULL, NULL,
                         0, &r), 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    cr_assert(strstr(r.body, "\"offset\":4096"), "%s", r.body);
    nd_resp_free(&r);

    ln_case c[N];
    char json[N][1024];
    size_t yo[N], at = 3, yat = 5;
    for (int i = 0; i < N; i++) {
        ln_make(&c[i], 1 + i % 4, COLS, 700 + (uint64_t)i);
        /* the batch key holds the parameters' bytes: one gamma and beta for all */
        if (i) {
            memcpy(c[i].g, c[0].g, COLS * 2);
            memcpy(c[i].b, c[0].b, COLS * 2);
            nd_to_f64(ND_FLOAT16, c[0].g, COLS, c[i].gd);
            nd_to_f64(ND_FLOAT16, c[0].b, COLS, c[i].bd);
            nd_ref_layernorm(c[i].xd, c[i].rows, COLS, c[i].gd, c[i].bd, 1e-5, c[i].ref, NULL,
                             NULL);
        }
        size_t xb = (size_t)c[i].rows * COLS * 2;
        size_t xo = at, go = at + xb + 1, bo = go + COLS * 2 + 1;
        memcpy(in.p + xo, c[i].x, xb);
        memcpy(in.p + go, c[i].g, COLS * 2);
        memcpy(in.p + bo, c[i].b, COLS * 2);
        at = bo + COLS * 2 + 7;
        yo[i] = yat;
        yat += xb + 3;
        ln_region_json(&c[i], "in", "out", xo, go, bo, yo[i], -1, -1, json[i], sizeof json[i]);
    }
    memset(out.p, 0x7E, out.n); /* poison: 0x7E7E is a NaN in float16 */
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    double b0 = nd_metric_value(r.body, "normd_batches_total", "op=\"layernorm\"");
    nd_resp_free(&r);
    shm_flight f[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        f[i] = (shm_flight){.json = json[i]};
        pthread_create(&t[i], NULL, shm_fly, &f[i]);
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    unsigned char *mine = calloc(out.n, 1); /* 1: inside some request's y window */
    for (int i = 0; i < N; i++) {
        check_shm_answer(&c[i], &f[i].r, out.p + 4096 + yo[i]);
        nd_resp_free(&f[i].r);
        memset(mine + 4096 + yo[i], 1, (size_t)c[i].rows * COLS * 2);
    }
    for (size_t k = 0; k < out.n; k++)
        cr_assert(mine[k] || out.p[k] == 0x7E, "byte %zu, outside every y window, was written",
                  k);
    free(mine);
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    double b1 = nd_metric_value(r.body, "normd_batches_total", "op=\"layernorm\"");
    nd_resp_free(&r);
    cr_assert(b1 - b0 >= 1 && b1 - b0 < N, "%g batches for %d requests: none shared", b1 - b0, N);

    /* a lone request with x and y at element-aligned offsets: with the cuda engine its kernel
     * reads x and writes y in the regions themselves (the unaligned ones above go by copies) */
    {
        ln_case lone;
        ln_make(&lone, 3, COLS, 911);
        memcpy(lone.g, c[0].g, COLS * 2);
        memcpy(lone.b, c[0].b, COLS * 2);
        nd_to_f64(ND_FLOAT16, c[0].g, COLS, lone.gd);
        nd_to_f64(ND_FLOAT16, c[0].b, COLS, lone.bd);
        nd_ref_layernorm(lone.xd, 3, COLS, lone.gd, lone.bd, 1e-5, lone.ref, NULL, NULL);
        const size_t xo = 512 << 10, go = xo + 3 * COLS * 2, bo = go + COLS * 2, yo = 8192;
        memcpy(in.p + xo, lone.x, 3 * COLS * 2);
        memcpy(in.p + go, lone.g, COLS * 2);
        memcpy(in.p + bo, lone.b, COLS * 2);
        char lj[1024];
        ln_region_json(&lone, "in", "out", xo, go, bo, yo, -1, -1, lj, sizeof lj);
        memset(out.p, 0x7E, out.n);
        infer_raw("layernorm", lj, NULL, 0, "", NULL, &r);
        check_shm_answer(&lone, &r, out.p + 4096 + yo);
        nd_resp_free(&r);
        for (size_t k = 0; k < out.n; k++)
            cr_assert(k - (4096 + yo) < 3 * COLS * 2 || out.p[k] == 0x7E,
                      "byte %zu, outside the lone y window, was written", k);
        ln_free(&lone);
    }

    /* unregistered while in flight: the batch sleeps for --slow-batch-us */
    memset(out.p, 0x7E, out.n);
    f[0] = (shm_flight){.json = json[0]};
    pthread_create(&t[0], NULL, shm_fly, &f[0]);
    usleep(100000);
    cr_assert_eq(shm_post("/v2/systemsharedmemory/region/out/unregister", NULL, SHM_AUTH, &r),
                 200);
    nd_resp_free(&r);
    pthread_join(t[0], NULL);
    check_shm_answer(&c[0], &f[0].r, out.p + 4096 + yo[0]);
    nd_resp_free(&f[0].r);
    infer_raw("layernorm", json[0], NULL, 0, "", NULL, &r);
    expect_error(&r, 400, "outputs[0].parameters.shared_memory_region: no shared memory "
                          "region named \\\"out\\\"");
    nd_resp_free(&r);

    /* a y window that the request says is large enough, but that runs past its region */
    shm_register("tiny", &out, 0, 100, SHM_AUTH);
    char tiny[1024];
    snprintf(tiny, sizeof tiny,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,96],\"datatype\":\"FP16\","
             "\"parameters\":{\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":"
             "192}}],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":"
             "\"tiny\",\"shared_memory_byte_size\":192}}]}");
    memset(out.p, 0x7E, out.n);
    infer_raw("layernorm", tiny, NULL, 0, "", NULL, &r);
    expect_error(&r, 400, "outputs[0].parameters.shared_memory_region: offset 0 + 192 bytes run "
                          "past region");
    nd_resp_free(&r);
    for (size_t k = 0; k < 4096; k++)
        cr_assert_eq(out.p[k], 0x7E, "byte %zu written by a refused request", k);

    /* The byte budget (--max-inflight-bytes 1000000) counts the staging a request in shared
     * memory takes, though its body is small: 1 MiB of x beside a request in flight is 503, and
     * alone it runs. */
    char big[1024];
    snprintf(big, sizeof big,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":[512,1024],\"datatype\":\"FP16\","
             "\"parameters\":{\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":"
             "1048576}}],\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":"
             "\"in\",\"shared_memory_byte_size\":1048576}}]}");
    shm_register("out", &out, 4096, out.n - 4096, SHM_AUTH);
    f[0] = (shm_flight){.json = json[0]};
    pthread_create(&t[0], NULL, shm_fly, &f[0]);
    usleep(100000);
    infer_raw("softmax", big, NULL, 0, "", NULL, &r);
    expect_error(&r, 503, "in-flight byte budget");
    nd_resp_free(&r);
    pthread_join(t[0], NULL);
    cr_assert_eq(f[0].r.code, 200, "%s", f[0].r.body);
    nd_resp_free(&f[0].r);
    wait_budget_free();
    infer_raw("softmax", big, NULL, 0, "", NULL, &r);
    cr_assert_eq(r.code, 200, "alone: HTTP %ld: %s", r.code, r.body);
    nd_resp_free(&r);

    cr_assert_eq(shm_post("/v2/systemsharedmemory/unregister", NULL, SHM_AUTH, &r), 200);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/systemsharedmemory/status"), NULL, NULL, 0, &r), 0);
    cr_assert_str_eq(r.body, "[]");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(nd_metric_value(r.body, "normd_shm_regions", ""), 0);
    cr_assert_eq(nd_metric_value(r.body, "normd_shm_bytes", ""), 0);
    nd_resp_free(&r);
    for (int i = 0; i < N; i++)
        ln_free(&c[i]);
    shm_drop(&in);
    shm_drop(&out);
}

/* A client that shrinks its object while its request is in flight (the batch sleeps for
 * --slow-batch-us): the daemon's writes of y and of the mean to the lost pages would raise
 * SIGBUS and end it. That request is answered 400 naming the region, the daemon keeps serving,
 * the region is refused until it is registered again (even once the object has its size back),
 * and then it is served. */
Test(v2_configured, an_object_shrunk_under_a_request, .init = start_shm, .fini = stop_shm)
{
    enum { ROWS = 4, COLS = 96, Y_OFF = 4096 - 100, MEAN_OFF = 2 * 4096 };
    shm_obj in, out;
    shm_make(&in, "in", 4096);
    shm_make(&out, "out", 3 * 4096);
    ln_case c;
    ln_make(&c, ROWS, COLS, 0x5B5B);
    memcpy(in.p, c.x, (size_t)ROWS * COLS * 2);
    memcpy(in.p + 1024, c.g, COLS * 2);
    memcpy(in.p + 1024 + COLS * 2, c.b, COLS * 2);
    shm_register("in", &in, 0, in.n, SHM_AUTH);
    shm_register("out", &out, 0, out.n, SHM_AUTH);
    char json[1024];
    snprintf(json, sizeof json,
             "{\"inputs\":[{\"name\":\"x\",\"shape\":[%d,%d],\"datatype\":\"FP16\","
             "\"parameters\":{\"shared_memory_region\":\"in\",\"shared_memory_byte_size\":%d}},"
             "{\"name\":\"gamma\",\"shape\":[%d],\"datatype\":\"FP16\",\"parameters\":{"
             "\"shared_memory_region\":\"in\",\"shared_memory_offset\":1024,"
             "\"shared_memory_byte_size\":%d}},"
             "{\"name\":\"beta\",\"shape\":[%d],\"datatype\":\"FP16\",\"parameters\":{"
             "\"shared_memory_region\":\"in\",\"shared_memory_offset\":%d,"
             "\"shared_memory_byte_size\":%d}}],"
             "\"outputs\":[{\"name\":\"y\",\"parameters\":{\"shared_memory_region\":\"out\","
             "\"shared_memory_offset\":%d,\"shared_memory_byte_size\":%d}},"
             "{\"name\":\"mean\",\"parameters\":{\"shared_memory_region\":\"out\","
             "\"shared_memory_offset\":%d,\"shared_memory_byte_size\":%d}}]}",
             ROWS, COLS, ROWS * COLS * 2, COLS, COLS * 2, COLS, 1024 + COLS * 2, COLS * 2, Y_OFF,
             ROWS * COLS * 2, MEAN_OFF, ROWS * 4);

    shm_flight f = {.json = json};
    pthread_t t;
    pthread_create(&t, NULL, shm_fly, &f);
    /* shrink once the request holds its regions (its job is submitted; the batching window and
     * the slow batch keep it in flight for another half second) */
    nd_resp r;
    double open = 0;
    for (int i = 0; i < 400 && open < 1; i++) {
        usleep(5000);
        cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
        open = nd_metric_value(r.body, "normd_jobs_open", "");
        nd_resp_free(&r);
    }
    cr_assert_geq(open, 1, "the request never reached the batcher");
    int fd = shm_open(out.key, O_RDWR, 0);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, 4096), 0, "shrink to the first page");
    pthread_join(t, NULL);
    expect_error(&f.r, 400, "shared memory region \\\"out\\\": its object shrank while this "
                            "request was using it");
    nd_resp_free(&f.r);

    cr_assert_eq(nd_http("GET", url_of("/v2/health/ready"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200, "the daemon still serves");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(nd_metric_value(r.body, "normd_shm_shrunk_requests_total", ""), 1, "%s",
                 r.body);
    nd_resp_free(&r);
    cr_assert_eq(ftruncate(fd, (off_t)out.n), 0, "the object's old size back");
    close(fd);
    infer_raw("layernorm", json, NULL, 0, "", NULL, &r);
    expect_error(&r, 400, "outputs[0].parameters.shared_memory_region: region \\\"out\\\": its "
                          "object");
    expect_error(&r, 400, "shrank while a request was using it; unregister the region and "
                          "register it again");
    nd_resp_free(&r);

    cr_assert_eq(shm_post("/v2/systemsharedmemory/region/out/unregister", NULL, SHM_AUTH, &r),
                 200);
    nd_resp_free(&r);
    shm_register("out", &out, 0, out.n, SHM_AUTH);
    infer_raw("layernorm", json, NULL, 0, "", NULL, &r);
    cr_assert_eq(r.code, 200, "registered again: HTTP %ld: %s", r.code, r.body);
    nd_resp_free(&r);
    char msg[256];
    int64_t bad = nd_compare(ND_FLOAT16, out.p + Y_OFF, c.ref, (int64_t)ROWS * COLS, "y", msg,
                             sizeof msg);
    cr_assert_eq(bad, 0, "%lld wrong: %s", (long long)bad, msg);
    ln_free(&c);
    shm_drop(&in);
    shm_drop(&out);
}

/* ---- CUDA shared memory ---- */

static int on_cuda(void)
{
    const char *b = getenv("NORMD_BACKEND");
    return b && !strcmp(b, "cuda");
}

/* The CUDA shared memory tests run on one backend each: they skip before their daemon starts
 * (a test that skips after its .init skips its .fini too, and would leave the daemon running). */
static void start_shm_cpu(void)
{
    if (on_cuda())
        cr_skip_test("the cuda backend registers CUDA regions (tensors_in_cuda_shared_memory)");
    start_shm();
}

static void start_shm_cuda(void)
{
    if (!on_cuda())
        cr_skip_test("needs NORMD_BACKEND=cuda");
    start_shm();
}

static void stop_shm_if_started(void)
{
    if (d.pid > 0)
        stop_shm();
}

/* Without the cuda backend a CUDA region cannot be registered, and nothing says it can. */
Test(v2_configured, cuda_shared_memory_needs_the_cuda_backend, .init = start_shm_cpu,
     .fini = stop_shm_if_started)
{
    nd_resp r;
    cr_assert_eq(nd_http("GET", url_of("/v2"), NULL, NULL, 0, &r), 0);
    cr_assert(strstr(r.body, "system_shared_memory"), "%s", r.body);
    cr_assert_null(strstr(r.body, "cuda_shared_memory"), "%s", r.body);
    nd_resp_free(&r);
    const char *reg = "{\"raw_handle\":{\"b64\":\"AAAA\"},\"device_id\":0,\"byte_size\":64}";
    cr_assert_eq(shm_post("/v2/cudasharedmemory/region/g/register", reg, NULL, &r), 401);
    nd_resp_free(&r);
    cr_assert_eq(shm_post("/v2/cudasharedmemory/region/g/register", reg, SHM_AUTH, &r), 400);
    expect_error(&r, 400, "register \\\"g\\\": CUDA shared memory needs the cuda backend");
    nd_resp_free(&r);
    cr_assert_eq(shm_post("/v2/cudasharedmemory/region/g/register", "{\"device_id\":0}",
                          SHM_AUTH, &r), 400);
    expect_error(&r, 400, "raw_handle: required");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/cudasharedmemory/status"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    cr_assert_str_eq(r.body, "[]");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/cudasharedmemory/region/g/status"), NULL, NULL, 0,
                         &r), 0);
    expect_error(&r, 400, "no CUDA shared memory region named \\\"g\\\"");
    nd_resp_free(&r);
    cr_assert_eq(shm_post("/v2/cudasharedmemory/unregister", NULL, SHM_AUTH, &r), 200);
    nd_resp_free(&r);
}

#ifdef ND_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                   \
    } while (0)

/* Registers the device allocation at p (this process's, exported by IPC handle) as name. */
static long cuda_register(const char *name, void *p, long long device_id, size_t byte_size,
                          nd_resp *r)
{
    cudaIpcMemHandle_t h;
    CU(cudaIpcGetMemHandle(&h, p));
    char b64[128];
    nd_b64_encode(&h, sizeof h, b64, 1);
    char path[128], body[256];
    snprintf(path, sizeof path, "/v2/cudasharedmemory/region/%s/register", name);
    snprintf(body, sizeof body,
             "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":%lld,\"byte_size\":%zu}", b64,
             device_id, byte_size);
    return shm_post(path, body, SHM_AUTH, r);
}

/* Device memory of this process, registered as CUDA regions: x, gamma and beta are read from
 * it and y, mean and rstd written to it by the daemon, which copies none of them over the bus.
 * A lone request (its kernel runs on the regions in place), one whose y is not aligned to its
 * elements (copied device to device), and requests batched together, each y in its own window
 * and the bytes between the windows untouched. Then the registration errors, and unregistering.
 * Only with --backend cuda (make test-gpu). */
Test(v2_configured, tensors_in_cuda_shared_memory, .init = start_shm_cuda,
     .fini = stop_shm_if_started)
{
    enum { N = 4, COLS = 96, MB = 1 << 20 };
    unsigned char *gin = NULL, *gout = NULL;
    CU(cudaSetDevice(0));
    CU(cudaMalloc((void **)&gin, MB));
    CU(cudaMalloc((void **)&gout, MB));
    nd_resp r;
    cr_assert_eq(cuda_register("gin", gin, 0, MB, &r), 200, "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(cuda_register("gout", gout, 0, MB, &r), 200, "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2"), NULL, NULL, 0, &r), 0);
    cr_assert(strstr(r.body, "cuda_shared_memory"), "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/cudasharedmemory/region/gout/status"), NULL, NULL,
                         0, &r), 0);
    cr_assert_eq(r.code, 200, "%s", r.body);
    json_t *st = parse_json(r.body, r.len);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(st, 0), "device_id")), 0);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(st, 0), "byte_size")), MB);
    json_decref(st);
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/systemsharedmemory/status"), NULL, NULL, 0, &r), 0);
    cr_assert_str_eq(r.body, "[]", "CUDA regions are not system ones");
    nd_resp_free(&r);

    unsigned char *host = malloc(MB);
    cr_assert_not_null(host);
    ln_case c[N];
    size_t xo[N], yo[N];
    size_t at = 0;
    for (int i = 0; i < N; i++) {
        ln_make(&c[i], 3 + 5 * i, COLS, 0xC0DA + (uint64_t)i);
        const size_t xb = (size_t)c[i].rows * COLS * 2;
        xo[i] = at + (i == 2 ? 2 : 0); /* one x aligned only to its elements */
        CU(cudaMemcpy(gin + xo[i], c[i].x, xb, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(gin + xo[i] + xb, c[i].g, COLS * 2, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(gin + xo[i] + xb + COLS * 2, c[i].b, COLS * 2, cudaMemcpyHostToDevice));
        yo[i] = 4096 * (size_t)i + (i == 1 ? 1 : 0); /* one y at an odd byte */
        at += 8192;
    }

    /* 1. a lone request, with its statistics: the kernel reads and writes the regions */
    double *mean = malloc(64 * sizeof(double)), *rstd = malloc(64 * sizeof(double));
    nd_ref_layernorm(c[0].xd, c[0].rows, COLS, c[0].gd, c[0].bd, 1e-5, c[0].ref, mean, rstd);
    CU(cudaMemset(gout, 0xFF, MB)); /* poison: NaN in float16 and float32 */
    char json[2048];
    const size_t xb0 = (size_t)c[0].rows * COLS * 2;
    ln_region_json(&c[0], "gin", "gout", xo[0], xo[0] + xb0, xo[0] + xb0 + COLS * 2, 0, 65536,
                   65536 + 4096, json, sizeof json);
    infer_raw("layernorm", json, NULL, 0, "", NULL, &r);
    cr_assert_eq(r.code, 200, "HTTP %ld: %s", r.code, r.body);
    nd_resp_free(&r);
    CU(cudaMemcpy(host, gout, MB, cudaMemcpyDeviceToHost));
    char msg[256];
    int64_t bad = nd_compare(ND_FLOAT16, host, c[0].ref, (int64_t)c[0].rows * COLS, "y", msg,
                             sizeof msg);
    cr_assert_eq(bad, 0, "lone request: %lld wrong: %s", (long long)bad, msg);
    for (int i = 0; i < c[0].rows; i++) {
        float m, s;
        memcpy(&m, host + 65536 + 4 * i, 4);
        memcpy(&s, host + 65536 + 4096 + 4 * i, 4);
        cr_assert(fabs(m - mean[i]) <= 1e-5 * (1 + fabs(mean[i])), "mean[%d] %g, want %g", i, m,
                  mean[i]);
        cr_assert(fabs(s - rstd[i]) <= 1e-4 * fabs(rstd[i]), "rstd[%d] %g, want %g", i, s,
                  rstd[i]);
    }
    free(mean);
    free(rstd);

    /* 2. the same alone with y at an odd byte, then all N at once (one batch, through the
     * batching window), each y in its own window */
    for (int round = 0; round < 2; round++) {
        CU(cudaMemset(gout, 0xFF, MB));
        char jsons[N][2048];
        shm_flight f[N];
        pthread_t t[N];
        const int first = round == 0 ? 1 : 0, last = round == 0 ? 2 : N;
        for (int i = first; i < last; i++) {
            const size_t xb = (size_t)c[i].rows * COLS * 2;
            ln_region_json(&c[i], "gin", "gout", xo[i], xo[i] + xb, xo[i] + xb + COLS * 2,
                           yo[i], -1, -1, jsons[i], sizeof jsons[i]);
            f[i] = (shm_flight){.json = jsons[i]};
            pthread_create(&t[i], NULL, shm_fly, &f[i]);
        }
        for (int i = first; i < last; i++)
            pthread_join(t[i], NULL);
        CU(cudaMemcpy(host, gout, MB, cudaMemcpyDeviceToHost));
        size_t written = 0;
        for (int i = first; i < last; i++) {
            cr_assert_eq(f[i].r.code, 200, "request %d: HTTP %ld: %s", i, f[i].r.code,
                         f[i].r.body);
            nd_resp_free(&f[i].r);
            bad = nd_compare(ND_FLOAT16, host + yo[i], c[i].ref, (int64_t)c[i].rows * COLS, "y",
                             msg, sizeof msg);
            cr_assert_eq(bad, 0, "round %d, request %d: %lld wrong: %s", round, i,
                         (long long)bad, msg);
            written += (size_t)c[i].rows * COLS * 2;
        }
        size_t poisoned = 0;
        for (size_t k = 0; k < MB; k++)
            poisoned += host[k] == 0xFF;
        cr_assert_geq(poisoned, MB - written, "bytes outside the y windows were written");
    }

    /* 3. y over x, the same bytes and one row further on: a request that runs alone and names
     * overlapping windows still gets y computed from its x */
    for (int shift = 0; shift < 2; shift++) {
        const size_t xb = (size_t)c[3].rows * COLS * 2;
        CU(cudaMemcpy(gin + xo[3], c[3].x, xb, cudaMemcpyHostToDevice));
        char j[2048];
        ln_region_json(&c[3], "gin", "gout", xo[3], xo[3] + xb, xo[3] + xb + COLS * 2, 0, -1, -1,
                       j, sizeof j);
        /* y goes to "gin" at x's offset (+ one row): rewrite the y reference of the JSON */
        char *yref = strstr(j, "\"gout\"");
        cr_assert_not_null(yref);
        char tail[512];
        snprintf(tail, sizeof tail, "\"gin\",\"shared_memory_offset\":%zu,"
                 "\"shared_memory_byte_size\":%zu}}]}", xo[3] + (size_t)shift * COLS * 2, xb);
        strcpy(yref, tail);
        infer_raw("layernorm", j, NULL, 0, "", NULL, &r);
        cr_assert_eq(r.code, 200, "HTTP %ld: %s", r.code, r.body);
        nd_resp_free(&r);
        CU(cudaMemcpy(host, gin + xo[3] + (size_t)shift * COLS * 2, xb, cudaMemcpyDeviceToHost));
        bad = nd_compare(ND_FLOAT16, host, c[3].ref, (int64_t)c[3].rows * COLS, "y", msg,
                         sizeof msg);
        cr_assert_eq(bad, 0, "y over x shifted by %d rows: %lld wrong: %s", shift,
                     (long long)bad, msg);
    }

    /* 4. registration errors */
    cr_assert_eq(cuda_register("other", gin, 7, MB, &r), 400);
    expect_error(&r, 400, "device_id 7: normd runs on CUDA device");
    nd_resp_free(&r);
    cr_assert_eq(cuda_register("big", gin, 0, (size_t)MB + 1, &r), 400);
    expect_error(&r, 400, "holds 1048576 bytes");
    nd_resp_free(&r);
    cr_assert_eq(cuda_register("gin", gout, 0, MB, &r), 400);
    expect_error(&r, 400, "already registered");
    nd_resp_free(&r);
    char junk[256] = "{\"raw_handle\":{\"b64\":\""; /* 64 zero bytes: 86 'A', "==" */
    memset(junk + strlen(junk), 'A', 86);
    strcpy(junk + strlen(junk), "==\"},\"device_id\":0,\"byte_size\":64}");
    cr_assert_eq(shm_post("/v2/cudasharedmemory/region/junk/register", junk, SHM_AUTH, &r), 400);
    expect_error(&r, 400, "cannot open it");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/metrics"), NULL, NULL, 0, &r), 0);
    cr_assert_eq(nd_metric_value(r.body, "normd_cuda_shm_regions", ""), 2, "%s", r.body);
    nd_resp_free(&r);

    /* 5. unregistered, a region is refused */
    cr_assert_eq(shm_post("/v2/cudasharedmemory/unregister", NULL, SHM_AUTH, &r), 200);
    nd_resp_free(&r);
    infer_raw("layernorm", json, NULL, 0, "", NULL, &r);
    expect_error(&r, 400, "no shared memory region named \\\"gin\\\"");
    nd_resp_free(&r);
    cr_assert_eq(nd_http("GET", url_of("/v2/cudasharedmemory/status"), NULL, NULL, 0, &r), 0);
    cr_assert_str_eq(r.body, "[]");
    nd_resp_free(&r);
    for (int i = 0; i < N; i++)
        ln_free(&c[i]);
    free(host);
    CU(cudaFree(gin));
    CU(cudaFree(gout));
}
#endif /* ND_HAVE_CUDA */
