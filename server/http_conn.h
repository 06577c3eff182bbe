/*
 * http_conn.h - what the listener (http.c) and the route handlers (routes_v1.c, routes_v2.c)
 * share: the server state, the per-request state, and the ways to answer. Private to server/.
 *
 * A request's life, as libmicrohttpd drives it (see http.c for the handler):
 *   1. first call: a conn is allocated, the route is found (nd_v1_route / nd_v2_route), limits
 *      that can be checked from the headers are checked (body size, byte budget);
 *   2. body chunks are appended to conn->body;
 *   3. last call: the body is decoded (Content-Encoding) and the route's handler answers at once
 *      or submits a job and suspends the connection;
 *   4. the job's completion (a batcher thread) resumes the connection; the handler is called once
 *      more and the route's result writer answers;
 *   5. request_completed frees everything the conn holds, on every path (aborts included).
 */
#ifndef ND_HTTP_CONN_H
#define ND_HTTP_CONN_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stddef.h>

#include "../proto/nd_proto.h"
#include "../proto/nd_v2.h"
#include "batcher.h"
#include "config.h"
#include "engine.h"
#include "http.h"
#include "listen_fds.h"
#include "metrics.h"
#include "params.h"
#include "shm.h"

#define ND_MAX_QUERY_ARGS 32

struct nd_server {
    nd_config cfg;
    nd_engine *engine;
    nd_metrics *metrics;
    nd_params *params;
    nd_batcher *batcher;
    nd_shm *shm;            /* registered shared memory regions (NULL: --allow-client-shm off) */
    struct MHD_Daemon *tcp, *unix_d;
    struct MHD_Daemon *passed[ND_LISTEN_FDS_MAX]; /* one per socket systemd passed */
    int npassed;
    unsigned port;
    double t_started;           /* CLOCK_MONOTONIC seconds */
    atomic_int jobs_open;       /* requests with a job submitted whose answer is not yet sent */
    atomic_int requests_open;   /* requests from their first handler call to their completion */
    atomic_int connections;     /* open client connections */
    atomic_llong inflight_bytes; /* bytes charged by requests not yet completed (--max-inflight-bytes) */
    atomic_llong shm_shrunk;     /* requests answered 400 because a region's object shrank under them */
    atomic_int stopping;        /* draining: not ready, every answer closes its connection */
};

typedef enum route {
    R_V1_OP,
    R_V1_PARAMS_ONE,
    R_V1_PARAMS_LIST,
    R_HEALTH,
    R_METRICS,
    R_V2_SERVER,
    R_V2_LIVE,
    R_V2_READY,
    R_V2_MODEL,
    R_V2_MODEL_READY,
    R_V2_MODEL_CONFIG,
    R_V2_STATS,       /* one model (has_op) or all */
    R_V2_INFER,
    R_V2_SHM_STATUS,     /* one region (name set) or all */
    R_V2_SHM_REGISTER,
    R_V2_SHM_UNREGISTER, /* one region (name set) or all */
} route;

/* How a finished job is answered. */
typedef enum answer_form { FORM_V1_JSON, FORM_V1_BINARY, FORM_V2 } answer_form;

typedef enum job_state { J_NONE, J_QUEUED, J_DONE } job_state;

/* Per-request state, from the first handler call to libmicrohttpd's completion notice. */
typedef struct conn {
    nd_server *srv;
    struct MHD_Connection *mc;
    route route;
    const char *allow;  /* the methods the route takes, for 405's Allow header */
    nd_op op;
    int has_op;         /* R_V2_STATS for one model */
    int metrics_op;     /* nd_op or ND_METRICS_OP_OTHER */
    char name[ND_PARAMS_NAME_MAX + 1]; /* a parameter set's, or a shared memory region's */
    int has_name;       /* R_V2_SHM_*: the URL names a region (name_bad: one that cannot be) */
    nd_shm_kind shm_kind; /* R_V2_SHM_*: /v2/systemsharedmemory or /v2/cudasharedmemory */
    int name_bad;
    double t_start;
    char *body;
    size_t len, cap;
    long long charged;  /* bytes this request holds against the in-flight budget */
    int too_large;
    int binary;         /* /v1: the request is raw binary (and so is the answer) */
    const char *media_guess; /* /v1 without a JSON or binary Content-Type: why binary was or was
                              * not assumed (for error messages), else NULL */
    int gzip_answer;    /* 1 gzip, 2 deflate: the client accepts it and the answer is compressed */
    answer_form form;
    nd_kv query[ND_MAX_QUERY_ARGS];
    size_t nquery;
    int query_overflow;
    nd_v2_request v2;   /* R_V2_INFER: what only v2 has (its req moves into job.req) */
    /* shared memory regions the request's tensors live in, held until it completes; and where
     * its outputs go in them (y goes by job.y_dst) */
    nd_shm_region *shm_held[ND_V2_IN_COUNT + ND_V2_OUT_COUNT];
    int nshm_held;
    void *shm_out[ND_V2_OUT_COUNT];
    int shm_out_device[ND_V2_OUT_COUNT]; /* 0: shm_out[k] is host memory; d + 1: device d's */
    void *param_copy[ND_V2_IN_COUNT]; /* host copies of parameters in CUDA regions (malloc'ed) */
    nd_job job;
    _Atomic int state;  /* job_state */
    int counted;        /* counted in srv->jobs_open */
} conn;

double nd_now_s(void);

/* ---- answering (http.c); each returns what the handler returns ---- */

/* Queues r (taking care of Connection: close while draining, compression and metrics) and
 * destroys it. */
enum MHD_Result nd_conn_send(conn *c, int code, struct MHD_Response *r);
/* Who frees a response's data: nobody (static or kept elsewhere), free(), nd_bigbuf_free(). */
enum { ND_DATA_KEEP = 0, ND_DATA_MALLOC = 1, ND_DATA_BIGBUF = 2 };
/* A response with data (len bytes) as its body, compressed when the client accepts it (then only
 * when must_free, ND_DATA_MALLOC or ND_DATA_BIGBUF: the response takes data over). NULL on
 * failure (data freed when must_free). */
struct MHD_Response *nd_conn_response(conn *c, const char *type, void *data, size_t len,
                                     int must_free);
/* nd_conn_send of nd_conn_response. */
enum MHD_Result nd_conn_send_buffer(conn *c, int code, const char *type, void *data, size_t len,
                                    int must_free);
/* A malloc'ed NUL-terminated JSON document (NULL: out of memory, answered 500). */
enum MHD_Result nd_conn_send_json(conn *c, int code, char *json);
/* {"error": "..."} */
enum MHD_Result nd_conn_send_error(conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Charges bytes more to the request against --max-inflight-bytes (given back when it completes).
 * -1 when that passes the budget while other requests hold charges: then the request's whole
 * charge is given back at once, not when its 503 has been sent (until then it would turn others
 * away, and a client that has read the 503 would still see it in normd_inflight_bytes). A
 * request alone is never turned away, whatever its size. */
int nd_conn_charge(conn *c, long long bytes);
/* Resolves req->params against the registry into c->job.pset; 0 or an HTTP status + message. */
int nd_conn_bind_params(conn *c, nd_request *req, char *msg, size_t size);
/* Submits c->job (its req already set) and suspends the connection; the answer comes later. */
enum MHD_Result nd_conn_submit(conn *c);

/* 1 when the daemon is ready for work: warmed up, not draining, engine not broken. */
int nd_server_ready(const nd_server *s);

/* ---- routes ---- */

/* Each fills c->route (and op, name, allow) for url and returns 0, 404 for a path it does not
 * know, 405 for a known path with the wrong method; -1 when the path is not its protocol's. */
int nd_v1_route(conn *c, const char *url, const char *method);
int nd_v2_route(conn *c, const char *url, const char *method);
/* The last call with the whole body: answer or submit. */
enum MHD_Result nd_v1_handle(conn *c, const char *method);
enum MHD_Result nd_v2_handle(conn *c, const char *method);
/* The answer to a finished job. */
enum MHD_Result nd_v1_send_result(conn *c);
enum MHD_Result nd_v2_send_result(conn *c);

#endif /* ND_HTTP_CONN_H */
