/*
 * http.c - libmicrohttpd glue: routing, body accumulation, suspend/resume around the batcher.
 *
 * The access handler is re-entered (as in libmicrohttpd's own examples): the first call allocates
 * the per-request state and checks the route, the calls with upload data append to the body, and
 * the final call parses and either answers at once (errors, metrics, health) or queues a job and
 * suspends the connection. The job's completion, on a batcher thread, resumes the connection, and
 * libmicrohttpd calls the handler once more to send the answer. No libmicrohttpd thread ever waits
 * for compute.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../proto/nd_proto.h"
#include "batcher.h"
#include "metrics.h"
#include "params.h"

#define MAX_QUERY_ARGS 32
#define BODY_RESERVE_MAX ((size_t)4 << 20)

struct nd_server {
    nd_config cfg;
    nd_engine *engine;
    nd_metrics *metrics;
    nd_params *params;
    nd_batcher *batcher;
    struct MHD_Daemon *tcp, *unix_d;
    unsigned port;
    atomic_int jobs_open; /* requests with a job submitted whose answer is not yet sent */
    atomic_int stopping;
};

typedef enum route {
    R_OP,
    R_PARAMS_ONE,
    R_PARAMS_LIST,
    R_HEALTH,
    R_METRICS,
} route;

typedef enum job_state { J_NONE, J_QUEUED, J_DONE } job_state;

/* Per-request state, from the first handler call to MHD's completion notice. */
typedef struct conn {
    nd_server *srv;
    struct MHD_Connection *mc;
    route route;
    nd_op op;
    int metrics_op; /* nd_op or ND_METRICS_OP_OTHER */
    char name[ND_PARAMS_NAME_MAX + 1];
    double t_start;
    char *body;
    size_t len, cap;
    int too_large;
    int binary; /* the request is raw binary (and so is the answer) */
    nd_kv query[MAX_QUERY_ARGS];
    size_t nquery;
    int query_overflow;
    nd_job job;
    _Atomic int state; /* job_state */
    int counted;       /* counted in srv->jobs_open */
} conn;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- answering ---- */

static enum MHD_Result send_buffer(conn *c, int code, const char *type, void *data, size_t len,
                                   int must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, data, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (must_free)
            free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == 503)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (code == 405) {
        const char *allow = c->route == R_OP            ? "POST"
                            : c->route == R_PARAMS_ONE  ? "GET, PUT, DELETE"
                                                        : "GET";
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    }
    enum MHD_Result ret = MHD_queue_response(c->mc, (unsigned)code, r);
    MHD_destroy_response(r);
    nd_metrics_request(c->srv->metrics, c->metrics_op, code, now_s() - c->t_start);
    return ret;
}

static enum MHD_Result send_json(conn *c, int code, char *json)
{
    if (!json)
        return MHD_NO;
    return send_buffer(c, code, "application/json", json, strlen(json), 1);
}

static enum MHD_Result send_error(conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum MHD_Result send_error(conn *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->srv->cfg.verbose >= 2)
        fprintf(stderr, "normd: %d %s\n", code, msg);
    return send_json(c, code, nd_proto_error_json(msg));
}

/* The answer to a finished job: y (and the statistics) as JSON or raw bytes. */
static enum MHD_Result send_job_result(conn *c)
{
    nd_job *j = &c->job;
    if (j->status != 200)
        return send_error(c, j->status, "%s", j->error);
    const nd_request *req = &j->req;
    if (!c->binary) {
        char *out;
        size_t len;
        if (nd_proto_encode_json(req, j->y, j->mean, j->rstd, &out, &len) != 0)
            return send_error(c, 500, "out of memory encoding the answer");
        return send_buffer(c, 200, "application/json", out, len, 1);
    }
    /* Raw binary: y, then mean and rstd (float32) when asked, described by headers. */
    size_t ybytes = (size_t)req->elems * nd_dtype_size(req->dtype);
    size_t sbytes = (size_t)nd_request_stat_rows(req) * sizeof(float);
    void *body = j->y;
    size_t len = ybytes;
    char outputs[32] = "y";
    if (j->mean || j->rstd) {
        len += (j->mean ? sbytes : 0) + (j->rstd ? sbytes : 0);
        body = realloc(j->y, len);
        if (!body)
            return send_error(c, 500, "out of memory encoding the answer");
        j->y = NULL;
        char *p = (char *)body + ybytes;
        if (j->mean) {
            memcpy(p, j->mean, sbytes);
            p += sbytes;
            strcat(outputs, ",mean");
        }
        if (j->rstd) {
            memcpy(p, j->rstd, sbytes);
            strcat(outputs, ",rstd");
        }
    } else
        j->y = NULL; /* the response owns it now */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    char shape[ND_MAX_DIMS * 21 + 1];
    nd_proto_format_shape(req, shape, sizeof shape);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, "X-Normd-Shape", shape);
    MHD_add_response_header(r, "X-Normd-Dtype", nd_dtype_name(req->dtype));
    MHD_add_response_header(r, "X-Normd-Outputs", outputs);
    enum MHD_Result ret = MHD_queue_response(c->mc, 200, r);
    MHD_destroy_response(r);
    nd_metrics_request(c->srv->metrics, c->metrics_op, 200, now_s() - c->t_start);
    return ret;
}

/* ---- operator requests ---- */

static void job_done(nd_job *job, void *arg)
{
    conn *c = arg;
    atomic_store(&c->state, J_DONE);
    MHD_resume_connection(c->mc);
}

/* Resolves req->params against the registry: the set must exist, match the dtype and carry the
 * tensors this op needs with the right lengths. Returns 0 or an HTTP status with a message. */
static int bind_params(conn *c, nd_request *req, char *msg, size_t size)
{
    nd_param_set *p = nd_params_acquire(c->srv->params, req->params);
    if (!p) {
        snprintf(msg, size, "params: no parameter set named \"%s\" (PUT /v1/params/%s first)",
                 req->params, req->params);
        return 400;
    }
    c->job.pset = p;
    if (p->dtype != req->dtype) {
        snprintf(msg, size, "params: set \"%s\" is %s but the request is %s", p->name,
                 nd_dtype_name(p->dtype), nd_dtype_name(req->dtype));
        return 400;
    }
    int need[ND_PARAM_COUNT] = {0};
    if (req->op == ND_OP_LAYERNORM)
        need[ND_PARAM_GAMMA] = need[ND_PARAM_BETA] = 1; /* used when present */
    else if (req->op == ND_OP_RMSNORM)
        need[ND_PARAM_WEIGHT] = 2;
    else if (req->op == ND_OP_PRELU)
        need[ND_PARAM_ALPHA] = 2;
    int used = 0;
    for (int k = 0; k < ND_PARAM_COUNT; k++) {
        if (!need[k])
            continue;
        if (!p->host[k]) {
            if (need[k] == 2) {
                snprintf(msg, size, "params: set \"%s\" has no %s tensor, which %s needs",
                         p->name, nd_param_tensor_name(k), nd_op_name(req->op));
                return 400;
            }
            continue;
        }
        used = 1;
        int ok = k == ND_PARAM_ALPHA ? (p->count[k] == 1 || p->count[k] == req->mid)
                                     : p->count[k] == req->mid;
        if (!ok) {
            snprintf(msg, size, "params: %s of set \"%s\" has %lld elements, the request needs "
                                "%s%lld", nd_param_tensor_name(k), p->name,
                     (long long)p->count[k], k == ND_PARAM_ALPHA ? "1 or " : "",
                     (long long)req->mid);
            return 400;
        }
    }
    if (!used) {
        snprintf(msg, size, "params: set \"%s\" has no tensor that %s uses", p->name,
                 nd_op_name(req->op));
        return 400;
    }
    if (req->op == ND_OP_PRELU)
        req->alpha_count = p->count[ND_PARAM_ALPHA];
    return 0;
}

static enum MHD_Result handle_op(conn *c)
{
    nd_server *s = c->srv;
    nd_error err = {{0}};
    int64_t max_elems = 0; /* the body limit already bounds what can arrive */
    int st = c->binary
                 ? nd_proto_parse_binary(c->op, c->query, c->nquery, c->body, c->len, max_elems,
                                         &c->job.req, &err)
                 : nd_proto_parse_json(c->op, c->body, c->len, max_elems, &c->job.req, &err);
    if (st)
        return send_error(c, st, "%s", err.msg);
    if (!c->binary && c->nquery > 0)
        return send_error(c, 400, "query parameter \"%s\": a JSON request carries its metadata "
                                  "in the body", c->query[0].key);
    if (c->job.req.params[0]) {
        char msg[256];
        st = bind_params(c, &c->job.req, msg, sizeof msg);
        if (st)
            return send_error(c, st, "%s", msg);
    }
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

/* ---- parameter sets ---- */

static enum MHD_Result handle_params(conn *c, const char *method)
{
    nd_server *s = c->srv;
    nd_error err = {{0}};
    if (c->route == R_PARAMS_LIST) {
        char *list = nd_params_list_json(s->params);
        return list ? send_json(c, 200, list) : send_error(c, 500, "out of memory");
    }
    if (!strcmp(method, "GET")) {
        char *one = nd_params_get_json(s->params, c->name);
        return one ? send_json(c, 200, one)
                   : send_error(c, 404, "no parameter set named \"%s\"", c->name);
    }
    if (!strcmp(method, "DELETE")) {
        int st = nd_params_delete(s->params, c->name, &err);
        if (st)
            return send_error(c, st, "%s", err.msg);
        char *ok = NULL;
        if (asprintf(&ok, "{\"deleted\":\"%s\"}", c->name) < 0)
            return MHD_NO;
        return send_json(c, 200, ok);
    }
    /* PUT */
    nd_params_body pb;
    int st = c->binary ? nd_proto_parse_params_binary(c->query, c->nquery, c->body, c->len, &pb,
                                                      &err)
                       : nd_proto_parse_params_json(c->body, c->len, &pb, &err);
    if (st)
        return send_error(c, st, "%s", err.msg);
    st = nd_params_put(s->params, c->name, pb.dtype, pb.tensor, pb.count, &err);
    nd_params_body_free(&pb);
    if (st)
        return send_error(c, st, "%s", err.msg);
    char *ok = NULL;
    if (asprintf(&ok, "{\"registered\":\"%s\"}", c->name) < 0)
        return MHD_NO;
    return send_json(c, 200, ok);
}

/* ---- routing and the handler ---- */

static enum MHD_Result collect_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    conn *c = cls;
    if (c->nquery == MAX_QUERY_ARGS) {
        c->query_overflow = 1;
        return MHD_NO;
    }
    c->query[c->nquery].key = key;
    c->query[c->nquery].value = value ? value : "";
    c->nquery++;
    return MHD_YES;
}

/* Fills c->route (and op or name); returns 0, or 404 for an unknown path, 405 for a known path
 * with the wrong method. */
static int route_request(conn *c, const char *url, const char *method)
{
    c->metrics_op = ND_METRICS_OP_OTHER;
    if (!strcmp(url, "/healthz") || !strcmp(url, "/metrics")) {
        c->route = url[1] == 'h' ? R_HEALTH : R_METRICS;
        return strcmp(method, "GET") && strcmp(method, "HEAD") ? 405 : 0;
    }
    if (!strcmp(url, "/v1/params") || !strcmp(url, "/v1/params/")) {
        c->route = R_PARAMS_LIST;
        return strcmp(method, "GET") ? 405 : 0;
    }
    if (!strncmp(url, "/v1/params/", 11)) {
        const char *name = url + 11;
        if (strlen(name) >= sizeof c->name)
            return 404;
        strcpy(c->name, name);
        c->route = R_PARAMS_ONE;
        return strcmp(method, "GET") && strcmp(method, "PUT") && strcmp(method, "DELETE") ? 405
                                                                                          : 0;
    }
    if (!strncmp(url, "/v1/", 4) && nd_op_from_name(url + 4, &c->op) == 0) {
        c->route = R_OP;
        c->metrics_op = (int)c->op;
        return strcmp(method, "POST") ? 405 : 0;
    }
    return 404;
}

/* JSON or raw binary, from Content-Type. curl's default for --data-binary
 * (application/x-www-form-urlencoded) and a missing type are taken as raw binary when the query
 * string carries the metadata, as JSON otherwise; anything else is 415. */
static int pick_media(conn *c, const char *ctype)
{
    size_t n = ctype ? strcspn(ctype, "; ") : 0;
    if (ctype && n == 16 && !strncasecmp(ctype, "application/json", n))
        c->binary = 0;
    else if (ctype && n == 24 && !strncasecmp(ctype, "application/octet-stream", n))
        c->binary = 1;
    else if (!ctype || !*ctype ||
             (n == 33 && !strncasecmp(ctype, "application/x-www-form-urlencoded", n)))
        c->binary = c->nquery > 0;
    else
        return 415;
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
        c->t_start = now_s();
        *con_cls = c;
        MHD_get_connection_values(mc, MHD_GET_ARGUMENT_KIND, collect_query, c);
        int st = route_request(c, url, method);
        if (st == 404)
            return send_error(c, 404, "no such endpoint: %s %s", method, url);
        if (st == 405)
            return send_error(c, 405, "%s is not allowed on %s", method, url);
        if (c->query_overflow)
            return send_error(c, 400, "more than %d query parameters", MAX_QUERY_ARGS);
        if (!strcmp(method, "POST") || !strcmp(method, "PUT")) {
            const char *ctype = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                            MHD_HTTP_HEADER_CONTENT_TYPE);
            if (pick_media(c, ctype))
                return send_error(c, 415, "Content-Type \"%s\" is not supported; send "
                                          "application/json or application/octet-stream",
                                  ctype);
            const char *clen = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                           MHD_HTTP_HEADER_CONTENT_LENGTH);
            unsigned long long declared = clen ? strtoull(clen, NULL, 10) : 0;
            if (declared > s->cfg.max_body_bytes)
                return send_error(c, 413, "body of %llu bytes is over the limit of %zu "
                                          "(--max-body-bytes)",
                                  declared, s->cfg.max_body_bytes);
            /* Reserve what the client declared, up to BODY_RESERVE_MAX: a declared length is a
             * promise, not bytes, and many idle connections must not pin large buffers. */
            if (declared) {
                size_t want = declared + 1 < BODY_RESERVE_MAX ? declared + 1 : BODY_RESERVE_MAX;
                c->body = malloc(want);
                if (!c->body)
                    return send_error(c, 503, "out of memory for a %llu-byte body", declared);
                c->cap = want;
            }
        }
        return MHD_YES;
    }

    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->too_large || c->len + n > s->cfg.max_body_bytes) {
            c->too_large = 1;
            return MHD_YES;
        }
        if (c->len + n + 1 > c->cap) {
            size_t cap = c->cap ? c->cap : 4096;
            while (cap < c->len + n + 1)
                cap *= 2;
            char *p = realloc(c->body, cap);
            if (!p)
                return MHD_NO;
            c->body = p;
            c->cap = cap;
        }
        memcpy(c->body + c->len, upload, n);
        c->len += n;
        return MHD_YES;
    }

    /* The whole body is here (or there was none), or a suspended job has finished. */
    int state = atomic_load(&c->state);
    if (state == J_DONE)
        return send_job_result(c);
    if (state == J_QUEUED)
        return MHD_YES; /* spurious wake-up: still waiting */
    if (c->too_large)
        return send_error(c, 413, "body is over the limit of %zu bytes (--max-body-bytes)",
                          s->cfg.max_body_bytes);
    if (c->body)
        c->body[c->len] = '\0';
    switch (c->route) {
    case R_HEALTH: {
        char *h = NULL;
        if (asprintf(&h, "{\"status\":\"%s\",\"backend\":\"%s\"}",
                     nd_server_broken(s) ? "broken" : "ok", s->engine->vt->name) < 0)
            return MHD_NO;
        return send_json(c, nd_server_broken(s) ? 503 : 200, h);
    }
    case R_METRICS: {
        size_t len;
        char *text = nd_metrics_render(s->metrics, &len);
        if (!text)
            return send_error(c, 500, "out of memory");
        return send_buffer(c, 200, "text/plain; version=0.0.4", text, len, 1);
    }
    case R_PARAMS_LIST:
    case R_PARAMS_ONE:
        return handle_params(c, method);
    case R_OP:
        return handle_op(c);
    }
    return MHD_NO;
}

static void request_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    nd_server *s = cls;
    conn *c = *con_cls;
    if (!c)
        return;
    /* A job still queued keeps its conn: that cannot happen, because a suspended connection is
     * not closed by libmicrohttpd and the server stops only after every job has finished. */
    if (c->job.pset)
        nd_params_release(s->params, c->job.pset);
    nd_request_free(&c->job.req);
    free(c->job.y);
    free(c->job.mean);
    free(c->job.rstd);
    free(c->body);
    if (c->counted)
        atomic_fetch_sub(&s->jobs_open, 1);
    free(c);
    *con_cls = NULL;
}

/* ---- lifecycle ---- */

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

static struct MHD_Daemon *start_daemon(nd_server *s, const struct sockaddr *sa, int fd,
                                       int ipv6)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
                     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ipv6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)s->cfg.threads, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)request_completed, s},
        {MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, 10000, NULL},
        {MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL},
        {sa ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_LISTEN_SOCKET, sa ? 0 : (intptr_t)fd,
         (void *)sa},
        {MHD_OPTION_END, 0, NULL},
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, s, MHD_OPTION_ARRAY, opts,
                            MHD_OPTION_END);
}

nd_server *nd_server_start(const nd_config *cfg, nd_error *err)
{
    nd_server *s = calloc(1, sizeof *s);
    if (!s) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
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
    s->batcher = nd_batcher_create(cfg, s->engine, s->metrics, err);
    if (!s->batcher)
        goto fail;

    if (cfg->listen_host[0]) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
        struct addrinfo *ai = NULL;
        char port[8];
        snprintf(port, sizeof port, "%u", cfg->listen_port);
        int rc = getaddrinfo(cfg->listen_host, port, &hints, &ai);
        if (rc) {
            nd_error_set(err, ND_EINVAL, "listen %s: %s", cfg->listen_host, gai_strerror(rc));
            goto fail;
        }
        s->tcp = start_daemon(s, ai->ai_addr, -1, ai->ai_family == AF_INET6);
        freeaddrinfo(ai);
        if (!s->tcp) {
            nd_error_set(err, ND_EINVAL, "cannot listen on %s:%u (in use, or not an address "
                                         "of this machine?)", cfg->listen_host, cfg->listen_port);
            goto fail;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->tcp, MHD_DAEMON_INFO_BIND_PORT);
        s->port = info ? info->port : cfg->listen_port;
    }
    if (cfg->unix_path[0]) {
        int fd = listen_unix(cfg->unix_path, err);
        if (fd < 0)
            goto fail;
        s->unix_d = start_daemon(s, NULL, fd, 0);
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

const char *nd_server_backend(const nd_server *s)
{
    return s->engine->vt->name;
}

int nd_server_broken(const nd_server *s)
{
    return s->engine && s->engine->vt->broken && s->engine->vt->broken(s->engine);
}

void nd_server_stop(nd_server *s, double grace_s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, 1);
    /* 1. No new connections. Existing keep-alive connections may still send requests; the
     *    batcher answers those with 503 once closed. */
    if (s->tcp) {
        MHD_socket fd = MHD_quiesce_daemon(s->tcp);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    if (s->unix_d) {
        MHD_socket fd = MHD_quiesce_daemon(s->unix_d);
        if (fd != MHD_INVALID_SOCKET)
            close(fd);
    }
    /* 2. Run everything queued; every job's connection is resumed with its answer. */
    if (s->batcher)
        nd_batcher_drain(s->batcher);
    /* 3. Let libmicrohttpd send those answers before the connections are closed. */
    double until = now_s() + grace_s;
    while (atomic_load(&s->jobs_open) > 0 && now_s() < until)
        usleep(2000);
    if (s->tcp)
        MHD_stop_daemon(s->tcp);
    if (s->unix_d)
        MHD_stop_daemon(s->unix_d);
    if (s->cfg.unix_path[0])
        unlink(s->cfg.unix_path);
    nd_batcher_destroy(s->batcher);
    nd_params_destroy(s->params);
    nd_engine_destroy(s->engine);
    nd_metrics_destroy(s->metrics);
    free(s);
}
