/*
 * nd_http.h - integration-test helpers: start build/normd as a child process on a free port and
 * talk to it with libcurl.
 *
 * The daemon binary comes from $NORMD_BIN (default build/normd) and the backend from
 * $NORMD_BACKEND (default cpu), so the same tests run against --backend cuda on a GPU machine.
 */
#ifndef ND_HTTP_H
#define ND_HTTP_H

#include <stddef.h>
#include <sys/types.h>

typedef struct nd_daemon {
    pid_t pid;
    unsigned port;
    char base[64]; /* "http://127.0.0.1:PORT" */
} nd_daemon;

/* Starts the daemon with --listen 127.0.0.1:0, the backend, and extra (NULL-terminated, may be
 * NULL) arguments; waits for its "listening on" line. Returns 0, or -1 with a message on stderr.
 * With $ND_TEST_LOGS set (make test sets it), the daemon's stderr goes to the current test's log,
 * $ND_TEST_LOGS/<test program>/<suite>.<test>.log, printed after the test only if it fails;
 * otherwise to this process's stderr. */
int nd_daemon_start(nd_daemon *d, const char *const *extra);
/* SIGTERM, then waits (at most timeout_s) for exit. Returns the exit status, or -1 when it did
 * not exit in time (it is then killed) or died from a signal. */
int nd_daemon_stop(nd_daemon *d, double timeout_s);

typedef struct nd_resp {
    long code;
    char *body; /* NUL-terminated, malloc'ed */
    size_t len;
    char content_type[128];
    char shape[128];       /* X-Normd-Shape */
    char dtype[32];        /* X-Normd-Dtype */
    char outputs[64];      /* X-Normd-Outputs */
    char retry_after[32];
    char allow[64];
    char infer_header_len[32];  /* Inference-Header-Content-Length */
    char content_encoding[32];
    char connection[32];
} nd_resp;

/* A request with everything optional spelled out; nd_http and nd_http_unix are shorthands. */
typedef struct nd_http_req {
    const char *method, *url;
    const char *unix_path;       /* NULL: TCP */
    const char *content_type;    /* NULL: none sent */
    const char *const *headers;  /* NULL-terminated "Name: value" lines, or NULL */
    const void *body;
    size_t len;
    const char *accept_encoding; /* NULL: none; "" lets curl offer and decode what it can */
} nd_http_req;

int nd_http_do(const nd_http_req *q, nd_resp *r);

/* One request. content_type may be NULL (no header); body may be NULL. unix_path, when not NULL,
 * sends it over that UNIX socket. Returns 0, or -1 when the transfer itself failed. */
int nd_http(const char *method, const char *url, const char *content_type, const void *body,
            size_t len, nd_resp *r);
int nd_http_unix(const char *unix_path, const char *method, const char *url,
                 const char *content_type, const void *body, size_t len, nd_resp *r);
void nd_resp_free(nd_resp *r);

/* libcurl write and header callbacks that fill an nd_resp (for tests that drive curl_multi). */
size_t nd_resp_body_cb(char *p, size_t size, size_t n, void *resp);
size_t nd_resp_header_cb(char *p, size_t size, size_t n, void *resp);

/* The value of a metric line "name{labels} value" (labels as written, "" for none) in a /metrics
 * exposition; -1 when absent. */
double nd_metric_value(const char *exposition, const char *name, const char *labels);

/* The value of one metric series from the /metrics of the daemon at base (a URL prefix); the
 * test fails when the request does or the series is absent. */
double nd_metric(const char *base, const char *name, const char *labels);

#endif /* ND_HTTP_H */
