/*
 * gpu_service.c - the daemon end to end on a GPU: starts build/normd --backend cuda on a free
 * loopback port and talks to it over HTTP (libcurl), checking every answer against the float64
 * reference of tests/util with the shared tolerance rule.
 *
 *   - every operator x dtype, over JSON and over raw binary, including a non-last softmax axis,
 *     per-channel and shared PReLU alpha, and the mean/rstd outputs;
 *   - one batch larger than the engine's initial staging (the grow-and-keep path);
 *   - registered parameter sets: PUT, GET (list and one), requests naming them (JSON and binary),
 *     DELETE, and the 400 for a request naming a deleted set;
 *   - concurrent requests are batched: fewer backend calls than requests in /metrics, every
 *     answer still right;
 *   - /metrics carries the per-device series, with bytes moved for a cuda backend.
 *
 * NORMD_BIN (default build/normd) and NORMD_BACKEND (default cuda) choose what is started, so the
 * same checks run against the cpu backend on a machine without a GPU.
 */
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kernels/nd_dtype.h"
#include "util/nd_testutil.h"

/* ---- the daemon ---- */

static pid_t daemon_pid;
static unsigned daemon_port;

static const char *backend(void)
{
    const char *b = getenv("NORMD_BACKEND");
    return b && *b ? b : "cuda";
}

static void daemon_start(void)
{
    const char *bin = getenv("NORMD_BIN");
    if (!bin || !*bin)
        bin = "build/normd";
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the test */
        if (getppid() != parent)
            _exit(127);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(bin, bin, "--backend", backend(), "--listen", "127.0.0.1:0", (char *)NULL);
        perror(bin);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[256] = "";
    cr_assert(fgets(line, sizeof line, f), "%s exited before listening", bin);
    /* normd: listening on http://127.0.0.1:PORT (backend NAME) */
    const char *p = strstr(line, "127.0.0.1:");
    cr_assert(p, "unexpected first line: %s", line);
    daemon_port = (unsigned)strtoul(p + 10, NULL, 10);
    char want[64];
    snprintf(want, sizeof want, "(backend %s)", backend());
    cr_assert(strstr(line, want), "started the wrong backend: %s", line);
    fclose(f); /* the daemon writes nothing more to stdout that we need */
    daemon_pid = pid;
}

static void daemon_stop(void)
{
    if (daemon_pid <= 0)
        return;
    kill(daemon_pid, SIGTERM);
    int status = 0;
    waitpid(daemon_pid, &status, 0);
    daemon_pid = 0;
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "normd did not exit cleanly (status 0x%x)", status);
}

TestSuite(gpu_service, .init = daemon_start, .fini = daemon_stop, .timeout = 180);

/* ---- HTTP ---- */

typedef struct resp {
    long code;
    char *body;
    size_t len;
} resp;

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
    resp *r = arg;
    char *q = realloc(r->body, r->len + size * n + 1);
    if (!q)
        return 0;
    memcpy(q + r->len, p, size * n);
    r->body = q;
    r->len += size * n;
    r->body[r->len] = '\0';
    return size * n;
}

/* One request; curl may be NULL (a fresh handle) or a caller's handle for keep-alive. */
static resp http(CURL *curl, const char *method, const char *path, const char *ctype,
                 const void *body, size_t len)
{
    int own = !curl;
    if (own)
        curl = curl_easy_init();
    cr_assert(curl);
    curl_easy_reset(curl);
    char url[2048];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", daemon_port, path);
    resp r = {0};
    struct curl_slist *h = NULL;
    if (ctype) {
        char line[128];
        snprintf(line, sizeof line, "Content-Type: %s", ctype);
        h = curl_slist_append(h, line);
    }
    h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip for big bodies */
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 60L);
    if (body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    CURLcode rc = curl_easy_perform(curl);
    cr_assert_eq(rc, CURLE_OK, "%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.code);
    curl_slist_free_all(h);
    if (own)
        curl_easy_cleanup(curl);
    return r;
}

/* ---- text building ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)n + 64;
        b->p = realloc(b->p, b->cap);
        cr_assert(b->p);
    }
}

static void sb_array(sbuf *b, const char *key, nd_dtype dt, const void *v, int64_t n)
{
    sb_printf(b, ",\"%s\":[", key);
    for (int64_t i = 0; i < n; i++)
        sb_printf(b, "%s%.9g", i ? "," : "", (double)nd_load(dt, v, i));
    sb_printf(b, "]");
}

/* ---- one operator case ---- */

typedef struct op_case {
    nd_op op;
    int ndim;
    int64_t shape[4];
    int axis;       /* softmax/log_softmax; -1 for last */
    int affine;     /* norms: gamma/beta or weight inline; prelu: 1 = per channel alpha */
    int stats;      /* norms: ask for mean (layernorm) and rstd */
} op_case;

typedef struct view {
    int64_t outer, mid, inner, elems;
} view;

static view view_of(const op_case *c)
{
    view v = {1, 1, 1, 1};
    for (int i = 0; i < c->ndim; i++)
        v.elems *= c->shape[i];
    if (c->op == ND_OP_PRELU) {
        v.outer = c->shape[0];
        v.mid = c->ndim > 1 ? c->shape[1] : 1;
        v.inner = v.elems / (v.outer * v.mid);
    } else if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX) {
        int ax = c->axis < 0 ? c->ndim - 1 : c->axis;
        for (int i = 0; i < ax; i++)
            v.outer *= c->shape[i];
        v.mid = c->shape[ax];
        v.inner = v.elems / (v.outer * v.mid);
    } else {
        v.mid = c->shape[c->ndim - 1];
        v.outer = v.elems / v.mid;
    }
    return v;
}

/* Inputs and the float64 reference of one case. */
typedef struct prepared {
    view v;
    void *x, *p0, *p1;      /* x; gamma/weight/alpha; beta */
    int64_t n0, n1;         /* elements in p0, p1 (0 when absent) */
    double *ref, *ref_mean, *ref_rstd;
} prepared;

static const double EPS_LN = 1e-5, EPS_RMS = 1e-6;

static void prepare(const op_case *c, nd_dtype dt, uint64_t seed, prepared *pp)
{
    memset(pp, 0, sizeof *pp);
    view v = view_of(c);
    pp->v = v;
    size_t esz = nd_dtype_size(dt);
    double *xd = malloc(sizeof(double) * (size_t)v.elems);
    pp->x = malloc(esz * (size_t)v.elems);
    pp->ref = malloc(sizeof(double) * (size_t)v.elems);
    cr_assert(xd && pp->x && pp->ref);
    /* an offset mean makes layernorm's cancellation matter */
    nd_fill_random(dt, pp->x, v.elems, c->op == ND_OP_LAYERNORM ? 0.5 : 0.0, 2.0, &seed, xd);
    double *p0d = NULL, *p1d = NULL;
    if (c->op == ND_OP_PRELU)
        pp->n0 = c->affine ? v.mid : 1;
    else if ((c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM) && c->affine) {
        pp->n0 = v.mid;
        pp->n1 = c->op == ND_OP_LAYERNORM ? v.mid : 0;
    }
    if (pp->n0) {
        pp->p0 = malloc(esz * (size_t)pp->n0);
        p0d = malloc(sizeof(double) * (size_t)pp->n0);
        nd_fill_random(dt, pp->p0, pp->n0, c->op == ND_OP_PRELU ? 0.2 : 1.0, 0.3, &seed, p0d);
    }
    if (pp->n1) {
        pp->p1 = malloc(esz * (size_t)pp->n1);
        p1d = malloc(sizeof(double) * (size_t)pp->n1);
        nd_fill_random(dt, pp->p1, pp->n1, 0.0, 0.5, &seed, p1d);
    }
    if (c->stats) {
        pp->ref_mean = malloc(sizeof(double) * (size_t)v.outer);
        pp->ref_rstd = malloc(sizeof(double) * (size_t)v.outer);
    }
    switch (c->op) {
    case ND_OP_LAYERNORM:
        nd_ref_layernorm(xd, v.outer, v.mid, p0d, p1d, EPS_LN, pp->ref, pp->ref_mean,
                         pp->ref_rstd);
        break;
    case ND_OP_RMSNORM:
        nd_ref_rmsnorm(xd, v.outer, v.mid, p0d, EPS_RMS, pp->ref, pp->ref_rstd);
        break;
    case ND_OP_SOFTMAX:
    case ND_OP_LOG_SOFTMAX:
        nd_ref_softmax(xd, v.outer, v.mid, v.inner, c->op == ND_OP_LOG_SOFTMAX, pp->ref);
        break;
    case ND_OP_PRELU:
        nd_ref_prelu(xd, v.outer, v.mid, v.inner, p0d, pp->n0, pp->ref);
        break;
    default:
        cr_assert_fail("op %d", (int)c->op);
    }
    free(xd);
    free(p0d);
    free(p1d);
}

static void prepared_free(prepared *pp)
{
    free(pp->x);
    free(pp->p0);
    free(pp->p1);
    free(pp->ref);
    free(pp->ref_mean);
    free(pp->ref_rstd);
}

static const char *p0_name(nd_op op)
{
    return op == ND_OP_LAYERNORM ? "gamma" : op == ND_OP_RMSNORM ? "weight" : "alpha";
}

static char *shape_text(const op_case *c, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->ndim; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)c->shape[i]);
    return buf;
}

/* The raw binary request's query string (without the leading '?'). params: a set's name or NULL. */
static void binary_query(const op_case *c, nd_dtype dt, const char *params, char *q, size_t size)
{
    char shape[128];
    int n = snprintf(q, size, "shape=%s&dtype=%s", shape_text(c, shape, sizeof shape),
                     nd_dtype_name(dt));
    int norm = c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM;
    if (norm)
        n += snprintf(q + n, size - n, "&eps=%g", c->op == ND_OP_LAYERNORM ? EPS_LN : EPS_RMS);
    if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX)
        n += snprintf(q + n, size - n, "&axis=%d", c->axis);
    if (params)
        n += snprintf(q + n, size - n, "&params=%s", params);
    else if (norm && c->affine)
        n += snprintf(q + n, size - n, "&affine=1");
    if (c->op == ND_OP_PRELU && !params)
        n += snprintf(q + n, size - n, "&alpha=%s", c->affine ? "channel" : "shared");
    if (c->stats)
        snprintf(q + n, size - n, "&outputs=%s",
                 c->op == ND_OP_LAYERNORM ? "y,mean,rstd" : "y,rstd");
}

static char *json_body(const op_case *c, nd_dtype dt, const prepared *pp, const char *params)
{
    sbuf b = {0};
    char shape[128];
    sb_printf(&b, "{\"shape\":[%s],\"dtype\":\"%s\"", shape_text(c, shape, sizeof shape),
              nd_dtype_name(dt));
    sb_array(&b, "data", dt, pp->x, pp->v.elems);
    if (params)
        sb_printf(&b, ",\"params\":\"%s\"", params);
    else {
        if (pp->n0)
            sb_array(&b, p0_name(c->op), dt, pp->p0, pp->n0);
        if (pp->n1)
            sb_array(&b, "beta", dt, pp->p1, pp->n1);
    }
    if (c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM)
        sb_printf(&b, ",\"eps\":%g", c->op == ND_OP_LAYERNORM ? EPS_LN : EPS_RMS);
    if (c->op == ND_OP_SOFTMAX || c->op == ND_OP_LOG_SOFTMAX)
        sb_printf(&b, ",\"axis\":%d", c->axis);
    if (c->stats)
        sb_printf(&b, ",\"outputs\":[\"y\",%s\"rstd\"]",
                  c->op == ND_OP_LAYERNORM ? "\"mean\"," : "");
    sb_printf(&b, "}");
    return b.p;
}

static char *binary_body(const op_case *c, nd_dtype dt, const prepared *pp, int with_params,
                         size_t *len)
{
    size_t esz = nd_dtype_size(dt);
    size_t n = (size_t)pp->v.elems * esz + (with_params ? (size_t)(pp->n0 + pp->n1) * esz : 0);
    char *body = malloc(n ? n : 1), *p = body;
    cr_assert(body);
    memcpy(p, pp->x, (size_t)pp->v.elems * esz);
    p += (size_t)pp->v.elems * esz;
    if (with_params) {
        memcpy(p, pp->p0, (size_t)pp->n0 * esz);
        p += (size_t)pp->n0 * esz;
        memcpy(p, pp->p1, (size_t)pp->n1 * esz);
    }
    *len = n;
    return body;
}

/* Compare y (stored dt values) and the statistics with the reference. */
static void check_result(const op_case *c, nd_dtype dt, const prepared *pp, const void *y,
                         const float *mean, const float *rstd, const char *what)
{
    char msg[256];
    int64_t bad = nd_compare(dt, y, pp->ref, pp->v.elems, "y", msg, sizeof msg);
    cr_assert_eq(bad, 0, "%s %s %s: %lld mismatches, first %s", what, nd_op_name(c->op),
                 nd_dtype_name(dt), (long long)bad, msg);
    if (c->stats && c->op == ND_OP_LAYERNORM) {
        cr_assert(mean, "%s: no mean", what);
        bad = nd_compare_f32(mean, pp->ref_mean, pp->v.outer, "mean", msg, sizeof msg);
        cr_assert_eq(bad, 0, "%s %s %s: %s", what, nd_op_name(c->op), nd_dtype_name(dt), msg);
    }
    if (c->stats) {
        cr_assert(rstd, "%s: no rstd", what);
        bad = nd_compare_f32(rstd, pp->ref_rstd, pp->v.outer, "rstd", msg, sizeof msg);
        cr_assert_eq(bad, 0, "%s %s %s: %s", what, nd_op_name(c->op), nd_dtype_name(dt), msg);
    }
}

static float *json_floats(json_t *arr, int64_t n, const char *what)
{
    cr_assert(json_is_array(arr), "%s: not an array", what);
    cr_assert_eq((int64_t)json_array_size(arr), n, "%s: %zu values, expected %lld", what,
                 json_array_size(arr), (long long)n);
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        f[i] = json_is_number(v) ? (float)json_number_value(v) : NAN;
    }
    return f;
}

static void run_json(const op_case *c, nd_dtype dt, const prepared *pp, const char *params)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/%s", nd_op_name(c->op));
    char *body = json_body(c, dt, pp, params);
    resp r = http(NULL, "POST", path, "application/json", body, strlen(body));
    free(body);
    cr_assert_eq(r.code, 200, "JSON %s %s: HTTP %ld: %s", nd_op_name(c->op), nd_dtype_name(dt),
                 r.code, r.body ? r.body : "");
    json_error_t je;
    json_t *root = json_loadb(r.body, r.len, 0, &je);
    cr_assert(root, "JSON answer does not parse: %s", je.text);
    cr_assert_str_eq(json_string_value(json_object_get(root, "dtype")), nd_dtype_name(dt));
    float *yf = json_floats(json_object_get(root, "data"), pp->v.elems, "data");
    void *y = malloc(nd_dtype_size(dt) * (size_t)pp->v.elems);
    for (int64_t i = 0; i < pp->v.elems; i++)
        nd_store(dt, y, i, yf[i]);
    float *mean = NULL, *rstd = NULL;
    if (c->stats && c->op == ND_OP_LAYERNORM)
        mean = json_floats(json_object_get(root, "mean"), pp->v.outer, "mean");
    if (c->stats)
        rstd = json_floats(json_object_get(root, "rstd"), pp->v.outer, "rstd");
    check_result(c, dt, pp, y, mean, rstd, params ? "JSON+params" : "JSON");
    free(yf);
    free(y);
    free(mean);
    free(rstd);
    json_decref(root);
    free(r.body);
}

static void run_binary(CURL *curl, const op_case *c, nd_dtype dt, const prepared *pp,
                       const char *params)
{
    char q[512], path[600];
    binary_query(c, dt, params, q, sizeof q);
    snprintf(path, sizeof path, "/v1/%s?%s", nd_op_name(c->op), q);
    size_t len;
    char *body = binary_body(c, dt, pp, !params, &len);
    resp r = http(curl, "POST", path, "application/octet-stream", body, len);
    free(body);
    cr_assert_eq(r.code, 200, "binary %s %s: HTTP %ld: %s", nd_op_name(c->op),
                 nd_dtype_name(dt), r.code, r.body ? r.body : "");
    size_t ybytes = (size_t)pp->v.elems * nd_dtype_size(dt);
    size_t sbytes = (size_t)pp->v.outer * sizeof(float);
    size_t want = ybytes + (c->stats ? sbytes * (c->op == ND_OP_LAYERNORM ? 2 : 1) : 0);
    cr_assert_eq(r.len, want, "binary %s %s: %zu bytes, expected %zu", nd_op_name(c->op),
                 nd_dtype_name(dt), r.len, want);
    float *mean = NULL, *rstd = NULL;
    if (c->stats) {
        size_t off = ybytes;
        if (c->op == ND_OP_LAYERNORM) {
            mean = malloc(sbytes);
            memcpy(mean, r.body + off, sbytes);
            off += sbytes;
        }
        rstd = malloc(sbytes);
        memcpy(rstd, r.body + off, sbytes);
    }
    void *y = malloc(ybytes);
    memcpy(y, r.body, ybytes); /* aligned copy of the answer */
    check_result(c, dt, pp, y, mean, rstd, params ? "binary+params" : "binary");
    free(y);
    free(mean);
    free(rstd);
    free(r.body);
}

static const op_case CASES[] = {
    {ND_OP_LAYERNORM, 3, {4, 3, 768}, -1, 1, 1},
    {ND_OP_LAYERNORM, 2, {2, 4096}, -1, 0, 0},
    {ND_OP_LAYERNORM, 2, {3, 100}, -1, 1, 0},
    {ND_OP_RMSNORM, 2, {6, 1024}, -1, 1, 1},
    {ND_OP_RMSNORM, 2, {1, 4096}, -1, 0, 0},
    {ND_OP_SOFTMAX, 2, {5, 1000}, -1, 0, 0},
    {ND_OP_SOFTMAX, 3, {3, 17, 5}, 1, 0, 0},
    {ND_OP_LOG_SOFTMAX, 2, {4, 2048}, -1, 0, 0},
    {ND_OP_LOG_SOFTMAX, 3, {2, 8, 3}, 0, 0, 0},
    {ND_OP_PRELU, 3, {4, 16, 33}, -1, 1, 0},
    {ND_OP_PRELU, 2, {7, 100}, -1, 0, 0},
};

static const nd_dtype DTYPES[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};

Test(gpu_service, every_op_and_dtype_json_and_binary)
{
    CURL *curl = curl_easy_init();
    uint64_t seed = 1;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        for (size_t d = 0; d < 3; d++) {
            prepared pp;
            prepare(&CASES[i], DTYPES[d], seed++, &pp);
            run_json(&CASES[i], DTYPES[d], &pp, NULL);
            run_binary(curl, &CASES[i], DTYPES[d], &pp, NULL);
            prepared_free(&pp);
        }
    curl_easy_cleanup(curl);
}

/* 2048 x 4096 float32 is 32 MiB each way: more than a slot's initial staging, so the engine
 * grows its buffers; a small request after it must still be right. */
Test(gpu_service, batch_larger_than_initial_staging)
{
    const op_case big = {ND_OP_LAYERNORM, 2, {2048, 4096}, -1, 1, 1};
    const op_case small = {ND_OP_RMSNORM, 2, {3, 512}, -1, 1, 1};
    prepared pp;
    prepare(&big, ND_FLOAT32, 77, &pp);
    run_binary(NULL, &big, ND_FLOAT32, &pp, NULL);
    prepared_free(&pp);
    prepare(&small, ND_BFLOAT16, 78, &pp);
    run_binary(NULL, &small, ND_BFLOAT16, &pp, NULL);
    prepared_free(&pp);
}

/* ---- registered parameters ---- */

static void put_params(const char *name, nd_dtype dt, const char *k0, const void *p0, int64_t n0,
                       const char *k1, const void *p1, int64_t n1)
{
    sbuf b = {0};
    sb_printf(&b, "{\"dtype\":\"%s\"", nd_dtype_name(dt));
    sb_array(&b, k0, dt, p0, n0);
    if (k1)
        sb_array(&b, k1, dt, p1, n1);
    sb_printf(&b, "}");
    char path[128];
    snprintf(path, sizeof path, "/v1/params/%s", name);
    resp r = http(NULL, "PUT", path, "application/json", b.p, b.len);
    cr_assert_eq(r.code, 200, "PUT %s: HTTP %ld: %s", path, r.code, r.body ? r.body : "");
    free(r.body);
    free(b.p);
}

Test(gpu_service, registered_params)
{
    static const op_case cases[] = {
        {ND_OP_LAYERNORM, 2, {8, 4096}, -1, 1, 1},
        {ND_OP_RMSNORM, 2, {5, 2048}, -1, 1, 1},
        {ND_OP_PRELU, 3, {3, 24, 10}, -1, 1, 0},
    };
    static const char *names[] = {"ln.blk0", "rms-blk0", "prelu_a"};
    uint64_t seed = 100;
    for (size_t i = 0; i < 3; i++)
        for (size_t d = 0; d < 3; d++) {
            const op_case *c = &cases[i];
            nd_dtype dt = DTYPES[d];
            prepared pp;
            prepare(c, dt, seed++, &pp);
            put_params(names[i], dt, p0_name(c->op), pp.p0, pp.n0, pp.n1 ? "beta" : NULL,
                       pp.p1, pp.n1);
            run_json(c, dt, &pp, names[i]);
            run_binary(NULL, c, dt, &pp, names[i]);
            prepared_free(&pp);
        }

    resp r = http(NULL, "GET", "/v1/params", NULL, NULL, 0);
    cr_assert_eq(r.code, 200);
    for (size_t i = 0; i < 3; i++)
        cr_assert(strstr(r.body, names[i]), "list lacks %s: %s", names[i], r.body);
    free(r.body);
    r = http(NULL, "GET", "/v1/params/ln.blk0", NULL, NULL, 0);
    cr_assert_eq(r.code, 200);
    json_t *one = json_loadb(r.body, r.len, 0, NULL);
    cr_assert(one);
    cr_assert_eq(json_array_size(json_object_get(one, "gamma")), 4096);
    cr_assert_eq(json_array_size(json_object_get(one, "beta")), 4096);
    json_decref(one);
    free(r.body);

    for (size_t i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/params/%s", names[i]);
        r = http(NULL, "DELETE", path, NULL, NULL, 0);
        cr_assert_eq(r.code, 200, "DELETE %s: %ld", path, r.code);
        free(r.body);
        r = http(NULL, "GET", path, NULL, NULL, 0);
        cr_assert_eq(r.code, 404);
        free(r.body);
    }
    /* a request naming a deleted set is refused, not run with stale device copies */
    char q[256];
    binary_query(&cases[0], ND_BFLOAT16, "ln.blk0", q, sizeof q);
    char path[300];
    snprintf(path, sizeof path, "/v1/layernorm?%s", q);
    static uint16_t x[8 * 4096];
    r = http(NULL, "POST", path, "application/octet-stream", x, sizeof x);
    cr_assert_eq(r.code, 400, "request naming a deleted set: HTTP %ld", r.code);
    free(r.body);
}

/* ---- batching ---- */

static double metric(const char *text, const char *series)
{
    const char *p = text;
    size_t n = strlen(series);
    while ((p = strstr(p, series))) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p += n;
    }
    return NAN;
}

static char *get_metrics(void)
{
    resp r = http(NULL, "GET", "/metrics", NULL, NULL, 0);
    cr_assert_eq(r.code, 200);
    return r.body;
}

#define CLIENTS 48
#define PER_CLIENT 25

typedef struct client_arg {
    const op_case *c;
    const prepared *pp;
    int failures;
} client_arg;

static void *client(void *arg)
{
    client_arg *a = arg;
    CURL *curl = curl_easy_init();
    for (int i = 0; i < PER_CLIENT; i++)
        run_binary(curl, a->c, ND_FLOAT16, a->pp, NULL);
    curl_easy_cleanup(curl);
    return NULL;
}

Test(gpu_service, concurrent_requests_are_batched)
{
    static const op_case c = {ND_OP_LAYERNORM, 2, {8, 1024}, -1, 1, 0};
    prepared pp;
    prepare(&c, ND_FLOAT16, 5, &pp);
    char *before = get_metrics();
    double b0 = metric(before, "normd_batches_total{op=\"layernorm\"}");
    double r0 = metric(before, "normd_requests_total{op=\"layernorm\",code=\"200\"}");
    if (isnan(r0))
        r0 = 0;
    free(before);

    pthread_t t[CLIENTS];
    client_arg a = {&c, &pp, 0};
    for (int i = 0; i < CLIENTS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, client, &a), 0);
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(t[i], NULL);

    char *after = get_metrics();
    double batches = metric(after, "normd_batches_total{op=\"layernorm\"}") - b0;
    double requests = metric(after, "normd_requests_total{op=\"layernorm\",code=\"200\"}") - r0;
    double rows_sum = metric(after, "normd_batch_rows_sum");
    double rows_count = metric(after, "normd_batch_rows_count");
    free(after);
    cr_log_info("%s: %.0f requests in %.0f batches, %.1f rows per batch", backend(), requests,
                batches, rows_sum / rows_count);
    cr_assert_eq(requests, CLIENTS * PER_CLIENT);
    cr_assert_lt(batches, requests, "%.0f batches for %.0f requests: nothing was batched",
                 batches, requests);
    prepared_free(&pp);
}

/* ---- metrics ---- */

Test(gpu_service, metrics_device_series)
{
    static const op_case c = {ND_OP_RMSNORM, 2, {16, 4096}, -1, 1, 1};
    prepared pp;
    prepare(&c, ND_BFLOAT16, 9, &pp);
    for (int i = 0; i < 4; i++)
        run_binary(NULL, &c, ND_BFLOAT16, &pp, NULL);
    prepared_free(&pp);
    char *m = get_metrics();
    int cuda = !strcmp(backend(), "cuda");
    const char *label = cuda ? "cuda:0" : backend();
    static const char *const series[] = {
        "normd_device_batches_in_flight", "normd_device_h2d_bytes_total",
        "normd_device_d2h_bytes_total", "normd_device_batch_errors_total",
        "normd_device_compute_seconds_count", "normd_device_queue_wait_seconds_count"};
    double v[6];
    for (int i = 0; i < 6; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s{device=\"%s\"}", series[i], label);
        v[i] = metric(m, name);
        cr_assert(!isnan(v[i]), "/metrics lacks %s", name);
    }
    cr_assert_eq(v[0], 0, "batches still in flight at rest");
    cr_assert_eq(v[3], 0, "batch errors");
    cr_assert_geq(v[4], 4);
    if (cuda) {
        /* 16 x 4096 bf16 in (+ 4096 weights), the same out plus 16 rstd floats, per request */
        cr_assert_geq(v[1], 4.0 * (16 * 4096 * 2 + 4096 * 2), "h2d bytes %.0f", v[1]);
        cr_assert_geq(v[2], 4.0 * (16 * 4096 * 2 + 16 * 4), "d2h bytes %.0f", v[2]);
    }
    free(m);
}
