/*
 * routes_v2.c - the KServe v2 / Open Inference Protocol over HTTP (proto/nd_v2.h has the wire
 * format). Each operator is a model of the same name with one version, "1":
 *
 *   GET  /v2                                 server metadata (name, version, extensions)
 *   GET  /v2/health/live, /v2/health/ready   200 when true, 400 when not (as the protocol says)
 *   GET  /v2/models/{op}[/versions/1]        model metadata
 *   GET  /v2/models/{op}[/versions/1]/ready
 *   GET  /v2/models/{op}[/versions/1]/config model configuration (Triton's extension)
 *   GET  /v2/models/stats, /v2/models/{op}[/versions/1]/stats   statistics extension
 *   POST /v2/models/{op}[/versions/1]/infer  inference, JSON or with binary tensors
 *   GET  /v2/systemsharedmemory[/region/{name}]/status      the shared memory extension
 *   POST /v2/systemsharedmemory/region/{name}/register     (with --allow-client-shm)
 *   POST /v2/systemsharedmemory[/region/{name}]/unregister
 *   GET  /v2/cudasharedmemory[/region/{name}]/status        the CUDA shared memory extension
 *   POST /v2/cudasharedmemory/region/{name}/register       (with --allow-client-shm and the
 *   POST /v2/cudasharedmemory[/region/{name}]/unregister    cuda backend)
 *
 * An inference request becomes the same nd_request a /v1 request does and joins the same batches.
 * A tensor in shared memory is read by the batcher straight from the region (as a binary tensor
 * is from the body), and y is scattered straight into its region: such a request's tensors cross
 * no socket and are copied once each way, into the batch and out of it; with the cuda engine a
 * large one is not copied by the host at all (its region is pinned, and the GPU's copy engines
 * move it: --cuda-shm-dma-bytes). A tensor in a CUDA region (device memory another process
 * exported with cudaIpcGetMemHandle) never reaches the host at all: the kernel reads and writes
 * it on the device; only the small inline parameters and statistics are copied, at bind and at
 * answer.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_conn.h"
#include "version.h"

/* Bytes the batcher leaves before y for the answer's JSON part: enough for every output's header
 * and an id of about 150 characters (a longer one takes the copying path). */
#define Y_ROOM 2048

/* ---- routing ---- */

static int only_get(conn *c, const char *method)
{
    c->allow = "GET, HEAD";
    return strcmp(method, "GET") && strcmp(method, "HEAD") ? 405 : 0;
}

static int only_post(conn *c, const char *method)
{
    c->allow = "POST";
    return strcmp(method, "POST") ? 405 : 0;
}

/* /v2/{system,cuda}sharedmemory/ + rest: status, unregister, or region/{name}/ + status,
 * register or unregister */
static int shm_route(conn *c, const char *rest, const char *method, nd_shm_kind kind)
{
    c->shm_kind = kind;
    if (!strncmp(rest, "region/", 7)) {
        rest += 7;
        size_t n = strcspn(rest, "/");
        c->has_name = 1;
        c->name_bad = !nd_name_ok(rest, n); /* else it fits c->name */
        if (!c->name_bad) {
            memcpy(c->name, rest, n);
            c->name[n] = '\0';
        }
        rest += n;
        if (*rest++ != '/')
            return 404;
        if (!strcmp(rest, "register")) {
            c->route = R_V2_SHM_REGISTER;
            return only_post(c, method);
        }
    }
    if (!strcmp(rest, "status")) {
        c->route = R_V2_SHM_STATUS;
        return only_get(c, method);
    }
    if (!strcmp(rest, "unregister")) {
        c->route = R_V2_SHM_UNREGISTER;
        return only_post(c, method);
    }
    return 404;
}

int nd_v2_route(conn *c, const char *url, const char *method)
{
    if (strcmp(url, "/v2") && strcmp(url, "/v2/") && strncmp(url, "/v2/", 4))
        return -1;
    c->metrics_op = ND_METRICS_OP_OTHER;
    if (!strcmp(url, "/v2") || !strcmp(url, "/v2/")) {
        c->route = R_V2_SERVER;
        return only_get(c, method);
    }
    if (!strcmp(url, "/v2/health/live")) {
        c->route = R_V2_LIVE;
        return only_get(c, method);
    }
    if (!strcmp(url, "/v2/health/ready")) {
        c->route = R_V2_READY;
        return only_get(c, method);
    }
    if (!strcmp(url, "/v2/models/stats")) {
        c->route = R_V2_STATS;
        return only_get(c, method);
    }
    if (!strncmp(url, "/v2/systemsharedmemory/", 23))
        return shm_route(c, url + 23, method, ND_SHM_SYSTEM);
    if (!strncmp(url, "/v2/cudasharedmemory/", 21))
        return shm_route(c, url + 21, method, ND_SHM_CUDA);
    if (strncmp(url, "/v2/models/", 11))
        return 404;
    /* {op}[/versions/1][/ready|/config|/stats|/infer] */
    const char *p = url + 11;
    size_t n = strcspn(p, "/");
    char name[32];
    if (n == 0 || n >= sizeof name)
        return 404;
    memcpy(name, p, n);
    name[n] = '\0';
    if (nd_op_from_name(name, &c->op))
        return 404;
    c->has_op = 1;
    p += n;
    if (!strncmp(p, "/versions/", 10)) {
        p += 10;
        size_t vn = strcspn(p, "/");
        if (vn != strlen(ND_V2_VERSION) || strncmp(p, ND_V2_VERSION, vn))
            return 404;
        p += vn;
    }
    if (!*p) {
        c->route = R_V2_MODEL;
        return only_get(c, method);
    }
    if (!strcmp(p, "/ready")) {
        c->route = R_V2_MODEL_READY;
        return only_get(c, method);
    }
    if (!strcmp(p, "/config")) {
        c->route = R_V2_MODEL_CONFIG;
        return only_get(c, method);
    }
    if (!strcmp(p, "/stats")) {
        c->route = R_V2_STATS;
        return only_get(c, method);
    }
    if (!strcmp(p, "/infer")) {
        c->route = R_V2_INFER;
        c->metrics_op = (int)c->op;
        c->allow = "POST";
        return strcmp(method, "POST") ? 405 : 0;
    }
    return 404;
}

/* ---- inference ---- */

/* Holds the region of one shared memory reference and returns where its bytes are; NULL with an
 * HTTP status in *st and the message in err, which names the field. */
static void *hold_shm(conn *c, const nd_v2_shm_ref *ref, uint64_t bytes, const char *where,
                      int *st, nd_error *err)
{
    void *p = NULL;
    nd_shm_region *g = nd_shm_acquire(c->srv->shm, ref->region, ref->offset, bytes, &p, st, err);
    if (!g) {
        char tmp[sizeof err->msg];
        int n = snprintf(tmp, sizeof tmp, "%s[%d].parameters.shared_memory_region: ", where,
                         ref->index);
        snprintf(tmp + n, sizeof tmp - (size_t)n, "%s", err->msg);
        memcpy(err->msg, tmp, sizeof tmp);
        return NULL;
    }
    c->shm_held[c->nshm_held++] = g;
    return p;
}

/* Points the job's tensors that live in shared memory at their regions, holding each region
 * until the request completes; each window must hold its tensor. Returns 0, or an HTTP status
 * with a message in err. The request is c->job.req by now (c->v2.req was moved there). */
static int bind_shm(conn *c, nd_error *err)
{
    nd_server *s = c->srv;
    nd_request *req = &c->job.req;
    int st = 0;
    if (!s->shm) {
        snprintf(err->msg, sizeof err->msg, "a tensor names a shared memory region, but shared "
                 "memory is off (start normd with --allow-client-shm)");
        return 400;
    }
    const void **in[ND_V2_IN_COUNT] = {&req->x, &req->gamma, &req->beta, &req->alpha};
    for (int k = 0; k < ND_V2_IN_COUNT; k++) {
        const nd_v2_shm_ref *ref = &c->v2.in_shm[k];
        if (!ref->region[0])
            continue;
        if (!(*in[k] = hold_shm(c, ref, ref->byte_size, "inputs", &st, err)))
            return st;
        const nd_shm_region *g = c->shm_held[c->nshm_held - 1];
        const int dev = nd_shm_region_device(g);
        if (k == ND_V2_IN_X) {
            c->job.x_pinned = nd_shm_region_pinned(g);
            c->job.x_device = dev + 1;
        } else if (dev >= 0) {
            /* A parameter in device memory: the batcher compares and packs parameters on the
             * host, so bring this one's few bytes over now. */
            void *copy = malloc(ref->byte_size ? ref->byte_size : 1);
            if (!copy) {
                snprintf(err->msg, sizeof err->msg, "out of memory");
                return 500;
            }
            c->param_copy[k] = copy;
            nd_engine *e = s->engine;
            if (e->vt->copy(e, dev, copy, *in[k], ref->byte_size, err) != ND_OK)
                return 500;
            *in[k] = copy;
        }
    }
    for (int k = 0; k < ND_V2_OUT_COUNT; k++) {
        const nd_v2_shm_ref *ref = &c->v2.out_shm[k];
        if (!ref->region[0])
            continue;
        const uint64_t bytes = nd_v2_output_bytes(req, k);
        if (!(c->shm_out[k] = hold_shm(c, ref, bytes, "outputs", &st, err)))
            return st;
        const nd_shm_region *g = c->shm_held[c->nshm_held - 1];
        c->shm_out_device[k] = nd_shm_region_device(g) + 1;
        if (k == ND_V2_OUT_Y) {
            c->job.y_pinned = nd_shm_region_pinned(g);
            c->job.y_device = c->shm_out_device[k];
        }
    }
    c->job.y_dst = c->shm_out[ND_V2_OUT_Y];
    /* The byte budget charges a request for the memory it makes the daemon hold (the body, the
     * batch's staging, the answer). A request in shared memory sends a small body but still
     * takes staging in and out: charge that, and turn it away as an over-budget body is. */
    const long long y_bytes = (long long)nd_v2_output_bytes(req, ND_V2_OUT_Y);
    if (nd_conn_charge(c, 2 * y_bytes)) {
        snprintf(err->msg, sizeof err->msg, "%lld bytes of tensors in shared memory would pass "
                 "the in-flight byte budget of %zu (--max-inflight-bytes); retry later",
                 y_bytes, s->cfg.max_inflight_bytes);
        return 503;
    }
    return 0;
}

static enum MHD_Result handle_infer(conn *c)
{
    nd_error err = {{0}};
    const char *hlen = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND,
                                                   "Inference-Header-Content-Length");
    int st = nd_v2_parse_infer(c->op, c->body ? c->body : "", c->len, hlen, 0, &c->v2, &err);
    if (st)
        return nd_conn_send_error(c, st, "%s", err.msg);
    /* The operator request moves into the job; c->v2 keeps what only v2 has. */
    c->job.req = c->v2.req;
    memset(&c->v2.req, 0, sizeof c->v2.req);
    if (c->job.req.params[0]) {
        char msg[256];
        st = nd_conn_bind_params(c, &c->job.req, msg, sizeof msg);
        if (st)
            return nd_conn_send_error(c, st, "%s", msg);
    }
    if (c->v2.nshm && (st = bind_shm(c, &err)))
        return nd_conn_send_error(c, st, "%s", err.msg);
    c->form = FORM_V2;
    /* Room for the answer's JSON before y, so that a binary y is sent from its own buffer; not
     * for a compressed answer, which is a new buffer anyway. */
    c->job.y_room = c->gzip_answer ? 0 : Y_ROOM;
    return nd_conn_submit(c);
}

/* The answer is one buffer, JSON then the binary outputs. Sending y from its own buffer beside
 * the JSON (MHD_create_response_from_iovec) was slower: libmicrohttpd 0.9.75 writes the headers
 * and the vector in separate system calls (null backend, 8x4096 float16, one connection on an H200
 * host: 9.8k against 11.9k req/s for /v1, one more wake-up per request seen with strace). So the
 * batcher leaves Y_ROOM bytes before y and, when y is the only binary output, the JSON is written
 * there and the answer is y's own buffer; otherwise the outputs are copied into a new one. */
enum MHD_Result nd_v2_send_result(conn *c)
{
    nd_job *j = &c->job;
    if (j->status != 200)
        return nd_conn_send_error(c, j->status, "%s", j->error);
    nd_v2_request r = c->v2;
    r.req = j->req;
    /* y is in its region already (the batcher put it there); the statistics are small */
    const float *stats[ND_V2_OUT_COUNT] = {NULL, j->mean, j->rstd};
    for (int k = ND_V2_OUT_MEAN; k < ND_V2_OUT_COUNT; k++) {
        if (!c->shm_out[k] || !stats[k])
            continue;
        const size_t n = nd_v2_output_bytes(&r.req, k);
        nd_engine *e = c->srv->engine;
        nd_error err = {{0}};
        if (!c->shm_out_device[k])
            memcpy(c->shm_out[k], stats[k], n);
        else if (e->vt->copy(e, c->shm_out_device[k] - 1, c->shm_out[k], stats[k], n, &err) !=
                 ND_OK)
            return nd_conn_send_error(c, 500, "writing %s to its CUDA shared memory region: "
                                      "%s", k == ND_V2_OUT_MEAN ? "mean" : "rstd", err.msg);
    }
    /* Every access to the request's regions is behind us: if the object of one of them shrank
     * meanwhile (shm.c's SIGBUS guard put zero pages where the CPU met lost ones; the device's
     * copies wrote to pages the object no longer has), what was read or written is not the
     * client's tensor. */
    for (int k = 0; k < c->nshm_held; k++)
        if (nd_shm_region_lost(c->shm_held[k])) {
            const char *name = nd_shm_region_name(c->shm_held[k]);
            atomic_fetch_add(&c->srv->shm_shrunk, 1);
            if (c->srv->cfg.verbose >= 1)
                fprintf(stderr, "normd: shared memory region \"%s\" shrank under a request\n",
                        name);
            return nd_conn_send_error(c, 400, "shared memory region \"%s\": its object shrank "
                                      "while this request was using it, so its tensors were not "
                                      "read or written whole; unregister the region and "
                                      "register it again", name);
        }
    char *out;
    size_t len, json_len;
    if (nd_v2_encode_infer_room(&r, j->y, j->y ? j->y_room : 0, j->mean, j->rstd, &out, &len,
                                &json_len) != 0)
        return nd_conn_send_error(c, 500, "out of memory encoding the answer");
    int binary = json_len != len;
    const char *type = binary ? "application/octet-stream" : "application/json";
    struct MHD_Response *resp;
    if (j->y && out == (char *)j->y - json_len) { /* y's buffer is the answer now */
        void *base = (char *)j->y - j->y_room;
        j->y = NULL;
        resp = MHD_create_response_from_buffer_with_free_callback_cls(len, out, nd_bigbuf_free,
                                                                      base);
        if (!resp) {
            nd_bigbuf_free(base);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    } else if (!(resp = nd_conn_response(c, type, out, len, 1)))
        return MHD_NO;
    if (binary) {
        char h[24];
        snprintf(h, sizeof h, "%zu", json_len);
        MHD_add_response_header(resp, "Inference-Header-Content-Length", h);
    }
    return nd_conn_send(c, 200, resp);
}

/* ---- the rest ---- */

static enum MHD_Result send_stats(conn *c)
{
    nd_op ops[ND_OP_COUNT];
    nd_v2_stats stats[ND_OP_COUNT];
    int n = 0;
    for (int k = 0; k < ND_OP_COUNT; k++) {
        if (c->has_op && (nd_op)k != c->op)
            continue;
        ops[n] = (nd_op)k;
        nd_metrics_v2_stats(c->srv->metrics, ops[n], &stats[n]);
        n++;
    }
    return nd_conn_send_json(c, 200, nd_v2_stats_json(ops, stats, n));
}

/* ---- the shared memory extension ---- */

/* A non-negative integer member of the register request; 0 when absent (*v untouched). */
static int register_count(const json_t *doc, const char *key, uint64_t *v, nd_error *err)
{
    const json_t *n = json_object_get(doc, key);
    if (!n)
        return 0;
    if (!json_is_integer(n) || json_integer_value(n) < 0) {
        snprintf(err->msg, sizeof err->msg, "%s: expected a non-negative integer", key);
        return 400;
    }
    *v = (uint64_t)json_integer_value(n);
    return 0;
}

/* POST .../region/{name}/register {"key": "/name", "offset": 0, "byte_size": N} */
static enum MHD_Result shm_register(conn *c)
{
    nd_error err = {{0}};
    json_error_t jerr;
    json_t *doc = json_loadb(c->body ? c->body : "", c->len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return nd_conn_send_error(c, 400, "body: not JSON (%s); expected {\"key\": \"/name\", "
                                          "\"offset\": 0, \"byte_size\": N}", jerr.text);
    const json_t *key = json_object_get(doc, "key");
    uint64_t offset = 0, size = 0;
    int st = 400;
    if (!json_is_object(doc))
        snprintf(err.msg, sizeof err.msg, "body: expected a JSON object");
    else if (!json_is_string(key))
        snprintf(err.msg, sizeof err.msg, "key: required, a string (the shared memory object's "
                                          "name, as \"/name\")");
    else if (!json_object_get(doc, "byte_size"))
        snprintf(err.msg, sizeof err.msg, "byte_size: required");
    else if (!(st = register_count(doc, "offset", &offset, &err)) &&
             !(st = register_count(doc, "byte_size", &size, &err)))
        st = nd_shm_register(c->srv->shm, c->name, json_string_value(key), offset, size, &err);
    json_decref(doc);
    if (st)
        return nd_conn_send_error(c, st, "register \"%s\": %s", c->name, err.msg);
    if (c->srv->cfg.verbose >= 1)
        fprintf(stderr, "normd: shared memory region \"%s\" registered (%llu bytes)\n", c->name,
                (unsigned long long)size);
    return nd_conn_send_buffer(c, 200, "application/json", "{}", 2, 0);
}

/* POST /v2/cudasharedmemory/region/{name}/register
 * {"raw_handle": {"b64": "..."}, "device_id": 0, "byte_size": N} */
static enum MHD_Result cuda_shm_register(conn *c)
{
    nd_error err = {{0}};
    unsigned char handle[128]; /* a cudaIpcMemHandle_t is 64; the engine checks the length */
    size_t handle_len = 0;
    int64_t device_id = 0;
    uint64_t size = 0;
    int st = nd_v2_parse_cuda_register(c->body ? c->body : "", c->len, handle, sizeof handle,
                                       &handle_len, &device_id, &size, &err);
    if (!st)
        st = nd_shm_register_cuda(c->srv->shm, c->name, handle, handle_len, device_id, size,
                                  &err);
    if (st)
        return nd_conn_send_error(c, st, "register \"%s\": %s", c->name, err.msg);
    if (c->srv->cfg.verbose >= 1)
        fprintf(stderr, "normd: CUDA shared memory region \"%s\" registered (%llu bytes on "
                        "device %lld)\n", c->name, (unsigned long long)size,
                (long long)device_id);
    return nd_conn_send_buffer(c, 200, "application/json", "{}", 2, 0);
}

static enum MHD_Result shm_handle(conn *c)
{
    nd_shm *shm = c->srv->shm;
    const nd_shm_kind kind = c->shm_kind;
    if (!shm)
        return nd_conn_send_error(c, 400, "%s shared memory is off (start normd with "
                                          "--allow-client-shm)",
                                  nd_shm_kind_name(kind));
    if (c->has_name && c->name_bad)
        return nd_conn_send_error(c, 400, "region name: 1 to %d letters, digits, '.', '_' or "
                                          "'-'", ND_V2_SHM_NAME_MAX - 1);
    const char *name = c->has_name ? c->name : NULL;
    switch (c->route) {
    case R_V2_SHM_STATUS: {
        nd_error err = {{0}};
        int st = 0;
        char *json = nd_shm_status_json(shm, kind, name, &st, &err);
        if (st != 200)
            return nd_conn_send_error(c, st, "%s", err.msg);
        return nd_conn_send_json(c, 200, json);
    }
    case R_V2_SHM_REGISTER:
        return kind == ND_SHM_CUDA ? cuda_shm_register(c) : shm_register(c);
    default: {
        int n = nd_shm_unregister(shm, kind, name);
        if (n && c->srv->cfg.verbose >= 1)
            fprintf(stderr, "normd: %d %s shared memory region(s) unregistered\n", n,
                    nd_shm_kind_name(kind));
        return nd_conn_send_buffer(c, 200, "application/json", "{}", 2, 0);
    }
    }
}

/* Health answers: 200 when true; the protocol asks for a 4xx when false. */
static enum MHD_Result send_health(conn *c, int ok, const char *why)
{
    if (ok)
        return nd_conn_send_buffer(c, 200, "application/json", "", 0, 0);
    return nd_conn_send_error(c, 400, "not ready: %s", why);
}

enum MHD_Result nd_v2_handle(conn *c, const char *method)
{
    nd_server *s = c->srv;
    const char *why = nd_server_broken(s) ? "the backend cannot run (device lost)"
                                           : "draining for shutdown";
    switch (c->route) {
    case R_V2_SERVER:
        return nd_conn_send_json(c, 200,
                                 nd_v2_server_metadata_json(ND_VERSION_STRING, s->shm != NULL,
                                                            s->shm && s->engine->vt->ipc_open));
    case R_V2_LIVE:
        return send_health(c, !nd_server_broken(s), why);
    case R_V2_READY:
    case R_V2_MODEL_READY:
        return send_health(c, nd_server_ready(s), why);
    case R_V2_MODEL:
        return nd_conn_send_json(c, 200, nd_v2_model_metadata_json(c->op));
    case R_V2_MODEL_CONFIG: {
        nd_v2_model_policy pol = {.max_batch_rows = s->cfg.max_batch_rows,
                                  .max_delay_us = s->cfg.max_delay_us,
                                  .queue_limit = s->cfg.queue_limit};
        return nd_conn_send_json(c, 200, nd_v2_model_config_json(c->op, &pol));
    }
    case R_V2_STATS:
        return send_stats(c);
    case R_V2_INFER:
        return handle_infer(c);
    case R_V2_SHM_STATUS:
    case R_V2_SHM_REGISTER:
    case R_V2_SHM_UNREGISTER:
        return shm_handle(c);
    default:
        return MHD_NO;
    }
}
