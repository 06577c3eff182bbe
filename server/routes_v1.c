/*
 * routes_v1.c - normd's own API: POST /v1/{op} (JSON or raw binary), the parameter registry
 * (/v1/params), /healthz and /metrics. The listener (http.c) calls nd_v1_route on a request's
 * first call, nd_v1_handle with the whole body, and nd_v1_send_result when its job has finished.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_conn.h"

/* ---- routing ---- */

static int allow(conn *c, const char *allowed, const char *method)
{
    c->allow = allowed;
    /* HEAD goes wherever GET goes */
    if (!strcmp(method, "HEAD") && strstr(allowed, "GET"))
        return 0;
    const char *p = strstr(allowed, method);
    size_t n = strlen(method);
    return p && (p[n] == '\0' || p[n] == ',') ? 0 : 405;
}

int nd_v1_route(conn *c, const char *url, const char *method)
{
    c->metrics_op = ND_METRICS_OP_OTHER;
    if (!strcmp(url, "/healthz") || !strcmp(url, "/metrics")) {
        c->route = url[1] == 'h' ? R_HEALTH : R_METRICS;
        return allow(c, "GET, HEAD", method);
    }
    if (strncmp(url, "/v1/", 4) != 0)
        return -1;
    if (!strcmp(url, "/v1/params") || !strcmp(url, "/v1/params/")) {
        c->route = R_V1_PARAMS_LIST;
        return allow(c, "GET, HEAD", method);
    }
    if (!strncmp(url, "/v1/params/", 11)) {
        const char *name = url + 11;
        if (strlen(name) >= sizeof c->name)
            return 404;
        strcpy(c->name, name);
        c->route = R_V1_PARAMS_ONE;
        return allow(c, "GET, HEAD, PUT, DELETE", method);
    }
    if (nd_op_from_name(url + 4, &c->op) == 0) {
        c->route = R_V1_OP;
        c->metrics_op = (int)c->op;
        return allow(c, "POST", method);
    }
    return 404;
}

/* ---- parameter binding (shared with /v2) ---- */

int nd_conn_bind_params(conn *c, nd_request *req, char *msg, size_t size)
{
    nd_param_set *p = nd_params_acquire(c->srv->params, req->params);
    if (!p) {
        snprintf(msg, size, "params: no parameter set named \"%s\" (PUT /v1/params/%s first)",
                 req->params, req->params);
        return 404;
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

/* ---- operator requests ---- */

static enum MHD_Result handle_op(conn *c)
{
    nd_error err = {{0}};
    int64_t max_elems = 0; /* the body limit already bounds what can arrive */
    int st = c->binary
                 ? nd_proto_parse_binary(c->op, c->query, c->nquery, c->body, c->len, max_elems,
                                         &c->job.req, &err)
                 : nd_proto_parse_json(c->op, c->body, c->len, max_elems, &c->job.req, &err);
    if (st && c->media_guess)
        return nd_conn_send_error(c, st, "%s (the body was %s; set Content-Type to say which "
                                         "it is)", err.msg, c->media_guess);
    if (st)
        return nd_conn_send_error(c, st, "%s", err.msg);
    if (!c->binary && c->nquery > 0)
        return nd_conn_send_error(c, 400, "query parameter \"%s\": a JSON request carries its "
                                          "metadata in the body", c->query[0].key);
    if (c->job.req.params[0]) {
        char msg[256];
        st = nd_conn_bind_params(c, &c->job.req, msg, sizeof msg);
        if (st)
            return nd_conn_send_error(c, st, "%s", msg);
    }
    c->form = c->binary ? FORM_V1_BINARY : FORM_V1_JSON;
    return nd_conn_submit(c);
}

/* The answer to a finished job: y (and the statistics) as JSON or raw bytes. */
enum MHD_Result nd_v1_send_result(conn *c)
{
    nd_job *j = &c->job;
    if (j->status != 200)
        return nd_conn_send_error(c, j->status, "%s", j->error);
    const nd_request *req = &j->req;
    if (!c->binary) {
        char *out;
        size_t len;
        if (nd_proto_encode_json(req, j->y, j->mean, j->rstd, &out, &len) != 0)
            return nd_conn_send_error(c, 500, "out of memory encoding the answer");
        return nd_conn_send_buffer(c, 200, "application/json", out, len, 1);
    }
    /* Raw binary: y, then mean and rstd (float32) when asked, described by headers. */
    size_t ybytes = (size_t)req->elems * nd_dtype_size(req->dtype);
    size_t sbytes = (size_t)nd_request_stat_rows(req) * sizeof(float);
    void *body = j->y;
    size_t len = ybytes;
    char outputs[32] = "y";
    if (j->mean || j->rstd) {
        len += (j->mean ? sbytes : 0) + (j->rstd ? sbytes : 0);
        body = nd_bigbuf_realloc(j->y, len); /* y_room is 0 for /v1 */
        if (!body)
            return nd_conn_send_error(c, 500, "out of memory encoding the answer");
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
        nd_conn_response(c, "application/octet-stream", body, len, ND_DATA_BIGBUF);
    if (!r)
        return MHD_NO;
    char shape[ND_MAX_DIMS * 21 + 1];
    nd_proto_format_shape(req, shape, sizeof shape);
    MHD_add_response_header(r, "X-Normd-Shape", shape);
    MHD_add_response_header(r, "X-Normd-Dtype", nd_dtype_name(req->dtype));
    MHD_add_response_header(r, "X-Normd-Outputs", outputs);
    return nd_conn_send(c, 200, r);
}

/* ---- parameter sets ---- */

static enum MHD_Result handle_params(conn *c, const char *method)
{
    nd_server *s = c->srv;
    nd_error err = {{0}};
    if (c->route == R_V1_PARAMS_LIST) {
        char *list = nd_params_list_json(s->params);
        return list ? nd_conn_send_json(c, 200, list) : nd_conn_send_error(c, 500, "out of memory");
    }
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
        char *one = nd_params_get_json(s->params, c->name);
        return one ? nd_conn_send_json(c, 200, one)
                   : nd_conn_send_error(c, 404, "no parameter set named \"%s\"", c->name);
    }
    if (!strcmp(method, "DELETE")) {
        int st = nd_params_delete(s->params, c->name, &err);
        if (st)
            return nd_conn_send_error(c, st, "%s", err.msg);
        char *ok = NULL;
        if (asprintf(&ok, "{\"deleted\":\"%s\"}", c->name) < 0)
            return MHD_NO;
        return nd_conn_send_json(c, 200, ok);
    }
    /* PUT */
    nd_params_body pb;
    int st = c->binary ? nd_proto_parse_params_binary(c->query, c->nquery, c->body, c->len, &pb,
                                                      &err)
                       : nd_proto_parse_params_json(c->body, c->len, &pb, &err);
    if (st)
        return nd_conn_send_error(c, st, "%s", err.msg);
    st = nd_params_put(s->params, c->name, pb.dtype, pb.tensor, pb.count, &err);
    nd_params_body_free(&pb);
    if (st)
        return nd_conn_send_error(c, st, "%s", err.msg);
    char *ok = NULL;
    if (asprintf(&ok, "{\"registered\":\"%s\"}", c->name) < 0)
        return MHD_NO;
    return nd_conn_send_json(c, 200, ok);
}

/* The listener's own gauges, after the metrics module's exposition (*text grows; nonzero and
 * *text freed on allocation failure). The request asking is itself one open request. */
static int append_server_gauges(nd_server *s, char **text, size_t *len)
{
    char *more = NULL;
    int shm_regions, cuda_regions;
    uint64_t shm_bytes, shm_pinned, cuda_bytes, cuda_pinned;
    nd_shm_stats(s->shm, ND_SHM_SYSTEM, &shm_regions, &shm_bytes, &shm_pinned);
    nd_shm_stats(s->shm, ND_SHM_CUDA, &cuda_regions, &cuda_bytes, &cuda_pinned);
    int n = asprintf(
        &more,
        "# HELP normd_connections_open Client connections open.\n"
        "# TYPE normd_connections_open gauge\n"
        "normd_connections_open %d\n"
        "# HELP normd_requests_open Requests begun and not yet completed: receiving, queued, "
        "running or being sent.\n"
        "# TYPE normd_requests_open gauge\n"
        "normd_requests_open %d\n"
        "# HELP normd_jobs_open Operator requests submitted to the batcher whose answer is not "
        "yet sent.\n"
        "# TYPE normd_jobs_open gauge\n"
        "normd_jobs_open %d\n"
        "# HELP normd_inflight_bytes Bytes charged against --max-inflight-bytes.\n"
        "# TYPE normd_inflight_bytes gauge\n"
        "normd_inflight_bytes %lld\n"
        "# HELP normd_inflight_bytes_limit The budget, --max-inflight-bytes.\n"
        "# TYPE normd_inflight_bytes_limit gauge\n"
        "normd_inflight_bytes_limit %zu\n"
        "# HELP normd_shm_regions System shared memory regions registered (--allow-client-shm).\n"
        "# TYPE normd_shm_regions gauge\n"
        "normd_shm_regions %d\n"
        "# HELP normd_shm_bytes Bytes of the registered shared memory regions.\n"
        "# TYPE normd_shm_bytes gauge\n"
        "normd_shm_bytes %llu\n"
        "# HELP normd_shm_pinned_bytes Bytes of them pinned for the GPU's own copies.\n"
        "# TYPE normd_shm_pinned_bytes gauge\n"
        "normd_shm_pinned_bytes %llu\n"
        "# HELP normd_shm_shrunk_requests_total Requests answered 400 because the object of a "
        "region they used shrank while they were in flight (the region is refused until it is "
        "registered again).\n"
        "# TYPE normd_shm_shrunk_requests_total counter\n"
        "normd_shm_shrunk_requests_total %lld\n"
        "# HELP normd_cuda_shm_regions CUDA shared memory regions registered (device memory of "
        "other processes, opened by IPC handle).\n"
        "# TYPE normd_cuda_shm_regions gauge\n"
        "normd_cuda_shm_regions %d\n"
        "# HELP normd_cuda_shm_bytes Bytes of the registered CUDA shared memory regions.\n"
        "# TYPE normd_cuda_shm_bytes gauge\n"
        "normd_cuda_shm_bytes %llu\n",
        atomic_load(&s->connections), atomic_load(&s->requests_open),
        atomic_load(&s->jobs_open), (long long)atomic_load(&s->inflight_bytes),
        s->cfg.max_inflight_bytes, shm_regions, (unsigned long long)shm_bytes,
        (unsigned long long)shm_pinned, (long long)atomic_load(&s->shm_shrunk), cuda_regions,
        (unsigned long long)cuda_bytes);
    char *grown = n < 0 ? NULL : realloc(*text, *len + (size_t)n + 1);
    if (!grown) {
        if (n >= 0)
            free(more);
        free(*text);
        *text = NULL;
        return -1;
    }
    memcpy(grown + *len, more, (size_t)n + 1);
    free(more);
    *text = grown;
    *len += (size_t)n;
    return 0;
}

enum MHD_Result nd_v1_handle(conn *c, const char *method)
{
    nd_server *s = c->srv;
    switch (c->route) {
    case R_HEALTH: {
        char *h = NULL;
        int broken = nd_server_broken(s);
        const char *status = broken ? "broken" : atomic_load(&s->stopping) ? "draining" : "ok";
        if (asprintf(&h, "{\"status\":\"%s\",\"backend\":\"%s\"}", status,
                     s->engine->vt->name) < 0)
            return MHD_NO;
        return nd_conn_send_json(c, broken || atomic_load(&s->stopping) ? 503 : 200, h);
    }
    case R_METRICS: {
        size_t len;
        char *text = nd_metrics_render(s->metrics, &len);
        if (!text || append_server_gauges(s, &text, &len))
            return nd_conn_send_error(c, 500, "out of memory");
        return nd_conn_send_buffer(c, 200, "text/plain; version=0.0.4", text, len, 1);
    }
    case R_V1_PARAMS_LIST:
    case R_V1_PARAMS_ONE:
        return handle_params(c, method);
    case R_V1_OP:
        return handle_op(c);
    default:
        return MHD_NO;
    }
}
