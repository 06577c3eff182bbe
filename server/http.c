/*
 * http.c - the listener: libmicrohttpd's access handler, body accumulation, limits, answering,
 * and the server's lifecycle (start, drain, stop). The routes live in routes_v1.c (normd's own
 * API) and routes_v2.c (KServe v2); http_conn.h describes a request's life through them.
 *
 * The access handler is re-entered (as in libmicrohttpd's own examples): the first call allocates
 * the per-request state and checks the route and the limits the headers show, the calls with
 * upload data append to the body, and the final call either answers at once or queues a job and
 * suspends the connection. The job's completion, on a batcher thread, resumes the connection, and
 * libmicrohttpd calls the handler once more to send the answer. No libmicrohttpd thread ever waits
 * for compute.
 *
 * Memory a request holds is freed in request_completed, which libmicrohttpd calls once for every
 * request it started, whether it was answered, aborted while the body was arriving, or aborted
 * while its answer was being sent. A queued job keeps its connection suspended, so its conn lives
 * until the job has finished and the answer was attempted.
 */
#include "http_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "compress.h"

#define BODY_RESERVE_MAX ((size_t)4 << 20)
/* Answers shorter than this go uncompressed even when the client accepts gzip. */
#define COMPRESS_MIN_BYTES 1024
/* How long a draining daemon keeps an idle keep-alive connection open for a request that may be
 * on its way. */
#define DRAIN_IDLE_GRACE_S 1.0
/* What a request holds at its peak, per byte of its body, for --max-inflight-bytes: the body,
 * the batch's staging of its x and of its y (packed in, computed out), and its answer, each
 * about as large as the body (for JSON, the parsed x and y are smaller than their text). Charged
 * from the first call to completion, so the daemon's memory stays under the budget plus a fixed
 * overhead (it_hardening's budget test measures it): twice the body, the first guess, let 24
 * clients with 4 MiB bodies take the RSS to twice a 64 MiB budget. */
#define CHARGE_PER_BYTE 4

/* The most bytes of freed request buffers kept for reuse (server/bigbuf.h). */
#define BIGBUF_CACHE_MAX ((size_t)256 << 20)
/* A request's deadline while queued, in milliseconds (504 when it passes). */
#define ND_TIMEOUT_HEADER "X-Normd-Timeout-Ms"

double nd_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ======================================================================== answering */

enum MHD_Result nd_conn_send(conn *c, int code, struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    if (code == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (code == 405 && c->allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, c->allow);
    if (atomic_load(&c->srv->stopping))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c->mc, (unsigned)code, r);
    MHD_destroy_response(r);
    nd_metrics_request(c->srv->metrics, c->metrics_op, code, nd_now_s() - c->t_start);
    return ret;
}

struct MHD_Response *nd_conn_response(conn *c, const char *type, void *data, size_t len,
                                     int must_free)
{
    const char *encoding = NULL;
    if (must_free && c->gzip_answer && len >= COMPRESS_MIN_BYTES) {
        void *z;
        size_t zlen;
        if (nd_compress(data, len, c->gzip_answer == 1 ? ND_ENC_GZIP : ND_ENC_DEFLATE, &z,
                        &zlen) == 0) {
            if (must_free == ND_DATA_BIGBUF)
                nd_bigbuf_free(data);
            else
                free(data);
            data = z;
            len = zlen;
            must_free = ND_DATA_MALLOC;
            encoding = c->gzip_answer == 1 ? "gzip" : "deflate";
        }
    }
    struct MHD_Response *r =
        must_free == ND_DATA_BIGBUF
            ? MHD_create_response_from_buffer_with_free_callback(len, data, nd_bigbuf_free)
            : MHD_create_response_from_buffer(len, data, must_free ? MHD_RESPMEM_MUST_FREE
                                                                   : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (must_free == ND_DATA_BIGBUF)
            nd_bigbuf_free(data);
        else if (must_free)
            free(data);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (encoding)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, encoding);
    return r;
}

enum MHD_Result nd_conn_send_buffer(conn *c, int code, const char *type, void *data, size_t len,
                                    int must_free)
{
    return nd_conn_send(c, code, nd_conn_response(c, type, data, len, must_free));
}

enum MHD_Result nd_conn_send_json(conn *c, int code, char *json)
{
    if (!json)
        return nd_conn_send_buffer(c, 500, "application/json",
                                   "{\"error\":\"out of memory\"}", 26, 0);
    return nd_conn_send_buffer(c, code, "application/json", json, strlen(json), 1);
}

enum MHD_Result nd_conn_send_error(conn *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->srv->cfg.verbose >= 2)
        fprintf(stderr, "normd: %d %s\n", code, msg);
    return nd_conn_send_json(c, code, nd_proto_error_json(msg));
}

/* ======================================================================== jobs */

static void job_done(nd_job *job, void *arg)
{
    conn *c = arg;
    atomic_store(&c->state, J_DONE);
    MHD_resume_connection(c->mc);
}

/* The request's deadline as CLOCK_MONOTONIC seconds (0: none), counted from its arrival: the
 * X-Normd-Timeout-Ms header (milliseconds) and, for /v2, the "timeout" parameter (microseconds,
 * as Triton's); the earlier wins. -1 when the header is not a whole number of milliseconds in
 * [1, 86400000]. */
static int request_deadline(const conn *c, double *deadline)
{
    double timeout_s = 0;
    const char *h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, ND_TIMEOUT_HEADER);
    if (h) {
        char *end;
        errno = 0;
        long long ms = strtoll(h, &end, 10);
        if (errno || end == h || *end || ms < 1 || ms > 86400000LL)
            return -1;
        timeout_s = (double)ms * 1e-3;
    }
    if (c->form == FORM_V2 && c->v2.timeout_us > 0) {
        double t = (double)c->v2.timeout_us * 1e-6;
        if (timeout_s == 0 || t < timeout_s)
            timeout_s = t;
    }
    *deadline = timeout_s > 0 ? c->t_start + timeout_s : 0;
    return 0;
}

enum MHD_Result nd_conn_submit(conn *c)
{
    nd_server *s = c->srv;
    if (request_deadline(c, &c->job.deadline) < 0)
        return nd_conn_send_error(c, 400, ND_TIMEOUT_HEADER ": \"%s\" is not a whole number of "
                                          "milliseconds from 1 to 86400000",
                                  MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND,
                                                              ND_TIMEOUT_HEADER));
    c->job.done = job_done;
    c->job.done_arg = c;
    atomic_store(&c->state, J_QUEUED);
    /* Suspend before submitting: the job may finish (and resume us) before submit returns. */
    MHD_suspend_connection(c->mc);
    atomic_fetch_add(&s->jobs_open, 1);
    c->counted = 1;
    if (nd_batcher_submit(s->batcher, &c->job) != 0) {
        c->job.status = 503;
        snprintf(c->job.error, sizeof c->job.error,
                 atomic_load(&s->stopping) ? "shutting down; retry on another instance"
                                           : "queue full (%d requests waiting); retry later",
                 s->cfg.queue_limit);
        atomic_store(&c->state, J_DONE);
        MHD_resume_connection(c->mc);
    }
    return MHD_YES;
}

int nd_server_ready(const nd_server *s)
{
    return !atomic_load(&s->stopping) && !nd_server_broken(s);
}

/* ======================================================================== the handler */

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    conn *c = cls;
    if (c->nquery == ND_MAX_QUERY_ARGS) {
        c->query_overflow = 1;
        return MHD_NO;
    }
    c->query[c->nquery].key = key;
    c->query[c->nquery].value = value ? value : "";
    c->nquery++;
    return MHD_YES;
}

/* JSON or raw binary for /v1, from Content-Type. curl's default for --data-binary
 * (application/x-www-form-urlencoded) and a missing type are taken as raw binary when the query
 * string carries the metadata, as JSON otherwise; anything else is 415. /v2 bodies are always a
 * JSON header (and binary tensors after it), whatever the type says. */
static int pick_media(conn *c, const char *ctype)
{
    size_t n = ctype ? strcspn(ctype, "; ") : 0;
    if (ctype && n == 16 && !strncasecmp(ctype, "application/json", n))
        c->binary = 0;
    else if (ctype && n == 24 && !strncasecmp(ctype, "application/octet-stream", n))
        c->binary = 1;
    else if (!ctype || !*ctype ||
             (n == 33 && !strncasecmp(ctype, "application/x-www-form-urlencoded", n))) {
        c->binary = c->nquery > 0;
        c->media_guess = c->binary
                             ? "read as raw binary because the query string carries the "
                               "metadata and Content-Type is not application/json"
                             : "read as JSON because there is no query string and Content-Type "
                               "is not application/octet-stream";
    } else
        return 415;
    return 0;
}

/* 1 gzip, 2 deflate, 0 neither, from Accept-Encoding (q=0 excludes a coding). */
static int pick_answer_encoding(const char *accept)
{
    if (!accept)
        return 0;
    int best = 0;
    const char *p = accept;
    while (*p) {
        p += strspn(p, " ,");
        size_t n = strcspn(p, ",;");
        int coding = (n == 4 && !strncasecmp(p, "gzip", 4))      ? 1
                     : (n == 7 && !strncasecmp(p, "deflate", 7)) ? 2
                                                                   : 0;
        const char *end = p + strcspn(p, ",");
        const char *q = memchr(p, ';', (size_t)(end - p));
        if (q) {
            const char *qv = strstr(q, "q=");
            if (qv && qv < end && strtod(qv + 2, NULL) <= 0)
                coding = 0;
        }
        if (coding && (!best || coding < best))
            best = coding;
        p = *end ? end + 1 : end;
    }
    return best;
}

static void op_list(char *buf, size_t size)
{
    buf[0] = '\0';
    for (int k = 0; k < ND_OP_COUNT; k++) {
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, "%s%s", k ? ", " : "", nd_op_name((nd_op)k));
    }
}

/* 1 when the admin routes are open (no --admin-token-file) or the request carries
 * "Authorization: Bearer TOKEN" with the configured token. The comparison takes the same time
 * wherever the first difference is. */
static int admin_authorized(const conn *c)
{
    const char *token = c->srv->cfg.admin_token;
    if (!token[0])
        return 1;
    const char *h =
        MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t n = strlen(token), m = strlen(h);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)token[i] ^ (unsigned char)(i < m ? h[i] : 0);
    return diff == 0;
}

static enum MHD_Result send_unauthorized(conn *c)
{
    const char *msg = "{\"error\":\"PUT and DELETE on /v1/params, and registering or "
                      "unregistering shared memory, need Authorization: Bearer <the token in "
                      "--admin-token-file>\"}";
    struct MHD_Response *r = nd_conn_response(c, "application/json", (void *)msg, strlen(msg), 0);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"normd\"");
    return nd_conn_send(c, 401, r);
}

int nd_conn_charge(conn *c, long long bytes)
{
    nd_server *s = c->srv;
    long long after = atomic_fetch_add(&s->inflight_bytes, bytes) + bytes;
    c->charged += bytes;
    if (after > (long long)s->cfg.max_inflight_bytes && after != c->charged) {
        atomic_fetch_sub(&s->inflight_bytes, c->charged);
        c->charged = 0;
        return -1;
    }
    return 0;
}

/* The request's first call: route and header checks. Answers errors at once. */
static enum MHD_Result begin_request(conn *c, const char *url, const char *method)
{
    nd_server *s = c->srv;
    struct MHD_Connection *mc = c->mc;
    MHD_get_connection_values(mc, MHD_GET_ARGUMENT_KIND, collect_query, c);
    int st = nd_v1_route(c, url, method);
    if (st < 0)
        st = nd_v2_route(c, url, method);
    if (st < 0 || st == 404) {
        c->metrics_op = ND_METRICS_OP_OTHER;
        char ops[96];
        op_list(ops, sizeof ops);
        if (!strncmp(url, "/v1/", 4) && !strchr(url + 4, '/'))
            return nd_conn_send_error(c, 404, "no such operator: %s (operators: %s)", url + 4,
                                      ops);
        if (!strncmp(url, "/v2/models/", 11))
            return nd_conn_send_error(c, 404, "no such model or version: %s (models: %s, "
                                              "version " ND_V2_VERSION ")", url, ops);
        return nd_conn_send_error(c, 404, "no such endpoint: %s %s", method, url);
    }
    if (st == 405)
        return nd_conn_send_error(c, 405, "%s is not allowed on %s (allowed: %s)", method, url,
                                  c->allow ? c->allow : "");
    const int admin = (c->route == R_V1_PARAMS_ONE &&
                       (!strcmp(method, "PUT") || !strcmp(method, "DELETE"))) ||
                      c->route == R_V2_SHM_REGISTER || c->route == R_V2_SHM_UNREGISTER;
    if (admin && !admin_authorized(c))
        return send_unauthorized(c);
    if (c->query_overflow)
        return nd_conn_send_error(c, 400, "more than %d query parameters", ND_MAX_QUERY_ARGS);
    if (strcmp(method, "POST") && strcmp(method, "PUT"))
        return MHD_YES;

    if (c->route < R_V2_SERVER) { /* /v1; /v2 bodies are JSON whatever the type says */
        const char *ctype =
            MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (pick_media(c, ctype))
            return nd_conn_send_error(c, 415, "Content-Type \"%s\" is not supported; send "
                                              "application/json or application/octet-stream",
                                      ctype);
    }
    const char *cenc =
        MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    if (cenc && nd_encoding_from_name(cenc) < 0)
        return nd_conn_send_error(c, 415, "Content-Encoding \"%s\" is not supported; send "
                                          "gzip, deflate or identity", cenc);
    c->gzip_answer = pick_answer_encoding(
        MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING));

    const char *clen =
        MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long declared = clen ? strtoull(clen, NULL, 10) : 0;
    if (declared > s->cfg.max_body_bytes)
        return nd_conn_send_error(c, 413, "body of %llu bytes is over the limit of %zu "
                                          "(--max-body-bytes)",
                                  declared, s->cfg.max_body_bytes);
    /* The byte budget: a request is charged CHARGE_PER_BYTE times its body from now until it
     * completes; one that would pass the budget is turned away before its body is read. */
    if (declared) {
        if (nd_conn_charge(c, CHARGE_PER_BYTE * (long long)declared))
            return nd_conn_send_error(c, 503, "%llu-byte body would pass the in-flight byte "
                                              "budget of %zu (--max-inflight-bytes); retry later",
                                      declared, s->cfg.max_inflight_bytes);
        /* Reserve what the client declared, up to BODY_RESERVE_MAX: a declared length is a
         * promise, not bytes, and many idle connections must not pin large buffers. */
        size_t want = declared + 1 < BODY_RESERVE_MAX ? declared + 1 : BODY_RESERVE_MAX;
        c->body = nd_bigbuf_alloc(want);
        if (!c->body)
            return nd_conn_send_error(c, 503, "out of memory for a %llu-byte body", declared);
        c->cap = want;
    }
    return MHD_YES;
}

/* Appends a body chunk. Beyond the body limit the rest is read and dropped (413 at the end). */
static enum MHD_Result append_body(conn *c, const char *upload, size_t n)
{
    nd_server *s = c->srv;
    if (c->too_large || c->len + n > s->cfg.max_body_bytes) {
        c->too_large = 1;
        return MHD_YES;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 4096;
        while (cap < c->len + n + 1)
            cap *= 2;
        char *p = nd_bigbuf_realloc(c->body, cap);
        if (!p)
            return MHD_NO;
        c->body = p;
        c->cap = cap;
    }
    memcpy(c->body + c->len, upload, n);
    c->len += n;
    /* A body without Content-Length (chunked) is charged as it grows. */
    long long need = CHARGE_PER_BYTE * (long long)c->len;
    if (need > c->charged) {
        atomic_fetch_add(&s->inflight_bytes, need - c->charged);
        c->charged = need;
    }
    return MHD_YES;
}

/* Inflates a gzip or deflate body in place of the received one; 0, or answers an error and
 * returns the status. */
static int decode_body(conn *c, enum MHD_Result *ret)
{
    const char *cenc = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_CONTENT_ENCODING);
    int enc = cenc ? nd_encoding_from_name(cenc) : ND_ENC_IDENTITY;
    if (enc == ND_ENC_IDENTITY || !c->body)
        return 0;
    void *out;
    size_t out_len;
    nd_error err = {{0}};
    int st = nd_decompress(c->body, c->len, enc, c->srv->cfg.max_body_bytes, &out, &out_len,
                           &err);
    if (st) {
        *ret = nd_conn_send_error(c, st, "%s", err.msg);
        return st;
    }
    /* into a request buffer of its own, which the rest of the request's life expects */
    nd_bigbuf_free(c->body);
    c->body = nd_bigbuf_alloc(out_len + 1);
    if (!c->body) {
        free(out);
        *ret = nd_conn_send_error(c, 503, "out of memory for a %zu-byte inflated body", out_len);
        return 503;
    }
    memcpy(c->body, out, out_len);
    free(out);
    c->len = out_len;
    c->cap = out_len + 1;
    long long need = CHARGE_PER_BYTE * (long long)out_len;
    if (need > c->charged) {
        atomic_fetch_add(&c->srv->inflight_bytes, need - c->charged);
        c->charged = need;
    }
    return 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *mc, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    nd_server *s = cls;
    conn *c = *con_cls;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c)
            return MHD_NO;
        c->srv = s;
        c->mc = mc;
        c->t_start = nd_now_s();
        *con_cls = c;
        atomic_fetch_add(&s->requests_open, 1);
        return begin_request(c, url, method);
    }

    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        return append_body(c, upload, n);
    }

    /* The whole body is here (or there was none), or a suspended job has finished. */
    int state = atomic_load(&c->state);
    if (state == J_DONE) {
        nd_job *j = &c->job;
        const double now = nd_now_s();
        j->t.wakeup = j->t_done > 0 ? now - j->t_done : 0;
        j->t.total = now - c->t_start;
        nd_metrics_job(s->metrics, j->req.op, j->status == 200, &j->t);
        return c->form == FORM_V2 ? nd_v2_send_result(c) : nd_v1_send_result(c);
    }
    if (state == J_QUEUED)
        return MHD_YES; /* spurious wake-up: still waiting */
    if (c->too_large)
        return nd_conn_send_error(c, 413, "body is over the limit of %zu bytes "
                                          "(--max-body-bytes)", s->cfg.max_body_bytes);
    enum MHD_Result ret;
    if (decode_body(c, &ret))
        return ret;
    if (c->body)
        c->body[c->len] = '\0';
    return c->route >= R_V2_SERVER ? nd_v2_handle(c, method) : nd_v1_handle(c, method);
}

static void request_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    nd_server *s = cls;
    conn *c = *con_cls;
    if (!c)
        return;
    /* A queued job cannot be here: its connection stays suspended, which libmicrohttpd never
     * closes, until the job is done. */
    if (c->job.pset)
        nd_params_release(s->params, c->job.pset);
    for (int k = 0; k < c->nshm_held; k++)
        nd_shm_release(s->shm, c->shm_held[k]);
    for (int k = 0; k < ND_V2_IN_COUNT; k++)
        free(c->param_copy[k]);
    nd_request_free(&c->job.req);
    nd_v2_request_free(&c->v2);
    nd_job_free_y(&c->job);
    free(c->job.mean);
    free(c->job.rstd);
    nd_bigbuf_free(c->body);
    if (c->charged)
        atomic_fetch_sub(&s->inflight_bytes, c->charged);
    if (c->counted)
        atomic_fetch_sub(&s->jobs_open, 1);
    free(c);
    *con_cls = NULL;
    atomic_fetch_sub(&s->requests_open, 1);
}

static int shm_pin(void *engine, void *p, size_t n)
{
    nd_engine *e = engine;
    return e->vt->host_register(e, p, n);
}

static void shm_unpin(void *engine, void *p)
{
    nd_engine *e = engine;
    e->vt->host_unregister(e, p);
}

static int shm_ipc_open(void *engine, const void *handle, size_t handle_len, int64_t device_id,
                        void **ptr, uint64_t *bytes, int *dev, nd_error *err)
{
    nd_engine *e = engine;
    return e->vt->ipc_open(e, handle, handle_len, device_id, ptr, bytes, dev, err);
}

static void shm_ipc_close(void *engine, void *ptr, int dev)
{
    nd_engine *e = engine;
    e->vt->ipc_close(e, ptr, dev);
}

static void connection_notify(void *cls, struct MHD_Connection *mc, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
    nd_server *s = cls;
    atomic_fetch_add(&s->connections, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

/* ======================================================================== lifecycle */

static int listen_unix(const char *path, nd_error *err)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0) {
        nd_error_set(err, ND_EINVAL, "unix socket: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path); /* a stale socket from an earlier run */
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0) {
        nd_error_set(err, ND_EINVAL, "unix socket %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* A listening TCP socket of our own (rather than libmicrohttpd's), so that an address in use is
 * reported as such. SO_REUSEADDR only: a restart may bind while old connections linger in
 * TIME_WAIT, but a second live daemon on the same port is refused (SO_REUSEPORT would let two
 * daemons split the traffic without a word). */
static int listen_tcp(const char *host, unsigned port, int *ipv6, unsigned *bound, nd_error *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char ports[8];
    snprintf(ports, sizeof ports, "%u", port);
    int rc = getaddrinfo(host, ports, &hints, &ai);
    if (rc) {
        nd_error_set(err, ND_EINVAL, "listen %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
        int e = errno;
        nd_error_set(err, ND_EINVAL, "cannot listen on %s:%u: %s%s", host, port, strerror(e),
                     e == EADDRINUSE ? " (another process, perhaps another normd, holds it; "
                                       "stop it or choose another port with --listen HOST:PORT)"
                                     : "");
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *ipv6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* libmicrohttpd's own messages are mostly about clients (one that closed with its request half
 * sent, one that reset the connection): normal for a server, so only shown at --verbose 2. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    const nd_server *s = cls;
    if (s->cfg.verbose < 2)
        return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "normd: libmicrohttpd: %s%s", msg,
            msg[0] && msg[strlen(msg) - 1] == '\n' ? "" : "\n");
}

/* poll(), not epoll: with libmicrohttpd 0.9.75's internal epoll threads, a client that sent part
 * of a body and then shut its side (FIN in the same burst as the data) was sometimes never seen
 * to go (4 of 30 probes; 0 of 60 with poll), so its connection stayed until the 120 s timeout
 * and held a drain for all of --drain-seconds; fuzz_http found it. poll was no slower at 256
 * keep-alive connections (wrk, null backend, 2 cores). */
static struct MHD_Daemon *start_daemon(nd_server *s, int fd, int ipv6)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, s}, /* first, or MHD warns */
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)s->cfg.threads, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_completed, s},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)connection_notify, s},
        {MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, 10000, NULL},
        {MHD_OPTION_LISTEN_SOCKET, (intptr_t)fd, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, s, MHD_OPTION_ARRAY, opts,
                            MHD_OPTION_END);
}

/* One daemon for each listening socket that systemd passed; 0, or -1 with a message. A passed
 * socket that others can reach is refused while the admin routes are open, as --listen is. */
static int start_passed(nd_server *s, nd_error *err)
{
    int fds[ND_LISTEN_FDS_MAX];
    int n = nd_listen_fds(fds, ND_LISTEN_FDS_MAX, err);
    for (int i = 0; i < n; i++) {
        if (!s->cfg.admin_token[0] && !s->cfg.allow_open_admin && !nd_socket_local(fds[i])) {
            nd_error_set(err, ND_EINVAL, "passed socket %d is beyond loopback and PUT/DELETE "
                         "/v1/params would be open to anyone who can connect; set "
                         "--admin-token-file FILE, or --allow-open-admin when the network in "
                         "front is trusted", fds[i]);
            goto fail;
        }
        s->passed[i] = start_daemon(s, fds[i], nd_socket_ipv6(fds[i]));
        if (!s->passed[i]) {
            nd_error_set(err, ND_EINVAL, "cannot serve on passed socket %d", fds[i]);
            goto fail;
        }
        s->npassed = i + 1;
    }
    return n < 0 ? -1 : 0;
fail:
    for (int i = s->npassed; i < n; i++)
        close(fds[i]);
    return -1;
}

nd_server *nd_server_start(const nd_config *cfg, nd_error *err)
{
    nd_server *s = calloc(1, sizeof *s);
    if (!s) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->t_started = nd_now_s();
    /* Freed request buffers kept for the next requests: a quarter of the byte budget, which
     * charges 4x each body, i.e. about one body's worth per request the budget admits. */
    nd_bigbuf_set_cap(BIGBUF_CACHE_MAX < cfg->max_inflight_bytes / 4 ? BIGBUF_CACHE_MAX
                                                                     : cfg->max_inflight_bytes / 4);
    s->metrics = nd_metrics_create();
    if (!s->metrics) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        goto fail;
    }
    s->engine = nd_engine_create(cfg, err);
    if (!s->engine)
        goto fail;
    for (int d = 0; d < s->engine->ndevices; d++)
        nd_metrics_set_device_label(s->metrics, d, s->engine->device_label[d]);
    s->params = nd_params_create(s->engine);
    if (!s->params) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        goto fail;
    }
    nd_params_set_limits(s->params, cfg->max_param_sets, cfg->max_param_bytes);
    if (cfg->allow_client_shm) {
        /* regions are offered to the engine, so that its device copies from and to them */
        const nd_shm_pinner pinner = {s->engine, shm_pin, shm_unpin};
        /* and CUDA regions are opened by it, when it can */
        const nd_shm_device device = {s->engine, shm_ipc_open, shm_ipc_close};
        s->shm = nd_shm_create(cfg->max_shm_regions,
                               s->engine->vt->host_register ? &pinner : NULL,
                               s->engine->vt->ipc_open ? &device : NULL);
        if (!s->shm) {
            nd_error_set(err, ND_ENOMEM, "out of memory");
            goto fail;
        }
    }
    s->batcher = nd_batcher_create(cfg, s->engine, s->metrics, err);
    if (!s->batcher)
        goto fail;

    /* The listeners open last: the engine is warm by now, so the first request pays no
     * start-up cost, and one that arrives earlier waits in the kernel's accept queue.
     * Sockets passed by systemd (socket activation) replace the default --listen, not one given
     * explicitly; --unix is opened either way. */
    if (start_passed(s, err) < 0)
        goto fail;
    if (cfg->listen_host[0] && (s->npassed == 0 || cfg->listen_given)) {
        int ipv6 = 0;
        int fd = listen_tcp(cfg->listen_host, cfg->listen_port, &ipv6, &s->port, err);
        if (fd < 0)
            goto fail;
        s->tcp = start_daemon(s, fd, ipv6);
        if (!s->tcp) {
            close(fd);
            nd_error_set(err, ND_EINVAL, "cannot serve on %s:%u", cfg->listen_host,
                         cfg->listen_port);
            goto fail;
        }
    }
    if (cfg->unix_path[0]) {
        int fd = listen_unix(cfg->unix_path, err);
        if (fd < 0)
            goto fail;
        s->unix_d = start_daemon(s, fd, 0);
        if (!s->unix_d) {
            close(fd);
            nd_error_set(err, ND_EINVAL, "cannot serve on unix socket %s", cfg->unix_path);
            goto fail;
        }
    }
    return s;
fail:
    nd_server_stop(s, 0);
    return NULL;
}

unsigned nd_server_port(const nd_server *s)
{
    return s->port;
}

int nd_server_passed_sockets(const nd_server *s)
{
    return s->npassed;
}

const char *nd_server_backend(const nd_server *s)
{
    return s->engine->vt->name;
}

double nd_server_startup_seconds(const nd_server *s)
{
    return nd_now_s() - s->t_started;
}

int nd_server_idle(const nd_server *s)
{
    return atomic_load(&s->requests_open) == 0;
}

int nd_server_broken(const nd_server *s)
{
    return s->engine && s->engine->vt->broken && s->engine->vt->broken(s->engine);
}

/* ---- closing the listeners without losing a connection ----
 *
 * Closing a listening socket resets every connection still in its accept queue, and a client
 * whose connect() has returned has likely sent its request already: a request sent and never
 * answered (it_hardening's drain test saw it in 1 run of 8 under ASan: a client reconnecting
 * 1-5 ms after SIGTERM, reset by peer). So a TCP listener first stops completing handshakes: a
 * socket filter drops every bare SYN (the client's kernel retries after 1 s, and by then finds
 * the port closed: refused, nothing sent), and libmicrohttpd keeps accepting for
 * HANDSHAKE_GRACE_S, long enough for a handshake already answered to finish and be taken. A
 * UNIX socket's path is removed instead (a new connect() fails at once). Then the daemon is
 * quiesced, whatever reached the queue meanwhile is handed to it (MHD_add_connection), and the
 * socket closed. Every answer from then on closes its connection. Sockets systemd passed are only
 * quiesced: systemd keeps their queue for the next instance, and a filter would stay with it. */
#define HANDSHAKE_GRACE_S 0.02

/* A classic BPF program for a listening TCP socket: drop a SYN without ACK, pass the rest. The
 * kernel runs a TCP socket's filter with the data at the TCP header (IPv4 and IPv6 alike), whose
 * byte 13 holds the flags; connections accepted later inherit it, and never see a bare SYN. */
static int refuse_handshakes(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD)
                                         : NULL;
    if (!info || info->listen_fd == MHD_INVALID_SOCKET)
        return -1;
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),       /* SYN | ACK */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, 1), /* SYN alone: */
        BPF_STMT(BPF_RET | BPF_K, 0),                    /*   drop */
        BPF_STMT(BPF_RET | BPF_K, 0xffffffffu),          /* the rest: pass */
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    return setsockopt(info->listen_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
}

/* Stops d accepting; with take_queue, what is in its accept queue is handed to it first. */
static void quiesce(struct MHD_Daemon *d, int take_queue)
{
    if (!d)
        return;
    MHD_socket fd = MHD_quiesce_daemon(d);
    if (fd == MHD_INVALID_SOCKET)
        return;
    int fl = take_queue ? fcntl(fd, F_GETFL) : -1;
    if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0) {
        for (;;) {
            struct sockaddr_storage sa;
            socklen_t len = sizeof sa;
            int c = accept4(fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (c >= 0)
                MHD_add_connection(d, c, (struct sockaddr *)&sa, len); /* closes c on failure */
            else if (errno != EINTR && errno != ECONNABORTED)
                break; /* EAGAIN: the queue is empty */
        }
    }
    close(fd);
}

void nd_server_stop(nd_server *s, double drain_s)
{
    if (!s)
        return;
    /* 1. Not ready any more, and every answer from now on closes its connection. */
    atomic_store(&s->stopping, 1);
    /* 2. No new connections, and none lost that the kernel has already accepted (see above). */
    for (int i = 0; i < s->npassed; i++)
        quiesce(s->passed[i], 0);
    if (s->cfg.unix_path[0])
        unlink(s->cfg.unix_path);
    if (refuse_handshakes(s->tcp) == 0) {
        struct timespec grace = {0, (long)(HANDSHAKE_GRACE_S * 1e9)};
        nanosleep(&grace, NULL);
    }
    quiesce(s->tcp, 1);
    quiesce(s->unix_d, 1);
    /* 3. Answer every request already started, queued or running. A keep-alive connection with
     *    no request gets a short grace in which a request already on its way is still answered;
     *    then idle connections are closed. */
    const double t0 = nd_now_s(), until = t0 + drain_s;
    const double idle_until = t0 + (drain_s < DRAIN_IDLE_GRACE_S ? drain_s : DRAIN_IDLE_GRACE_S);
    for (;;) {
        double now = nd_now_s();
        if (now >= until)
            break;
        if (atomic_load(&s->requests_open) == 0 &&
            (atomic_load(&s->connections) == 0 || now >= idle_until))
            break;
        usleep(2000);
    }
    if (s->cfg.verbose >= 1 && (atomic_load(&s->requests_open) > 0))
        fprintf(stderr, "normd: drain time (%.0f s) passed with %d requests unanswered\n",
                drain_s, atomic_load(&s->requests_open));
    /* 4. Run anything still queued (answers go nowhere once the listeners stop). */
    if (s->batcher)
        nd_batcher_drain(s->batcher);
    if (s->tcp)
        MHD_stop_daemon(s->tcp);
    if (s->unix_d)
        MHD_stop_daemon(s->unix_d);
    for (int i = 0; i < s->npassed; i++)
        MHD_stop_daemon(s->passed[i]);
    nd_batcher_destroy(s->batcher);
    nd_shm_destroy(s->shm); /* the listeners are stopped: no request holds a region */
    nd_params_destroy(s->params);
    nd_engine_destroy(s->engine);
    nd_metrics_destroy(s->metrics);
    free(s);
}
