/*
 * it_hardening.c - integration tests of normd against clients that go away, a shutdown under
 * load, and limits: build/normd started on a free port (tests/util/nd_http.h), driven over raw
 * sockets where a test needs to stop half-way, and over libcurl otherwise.
 *
 *   - aborts: >= 1,000 requests abandoned in each state of a request's life (receiving its body,
 *     queued, computing, being sent) free everything they held: the daemon's RSS (VmRSS from
 *     /proc) grows by less than 32 MiB from a warmed-up baseline, and a client running beside
 *     them is served right throughout. Each state is made long enough to abort in, and checked
 *     from the daemon's own gauges before the clients close (normd_requests_open,
 *     normd_jobs_open, normd_queue_depth, normd_device_batches_in_flight).
 *   - drain: SIGTERM under keep-alive load answers every request sent in full (200, or 503 only
 *     for one sent after the signal), each with Connection: close; /healthz says "draining";
 *     an idle keep-alive connection is closed after a short grace; exit 0.
 *   - the byte budget answers 503 + Retry-After before reading the body, and bounds the RSS.
 *   - admin routes take a bearer token when one is configured; parameter-set limits.
 *   - a request whose deadline (X-Normd-Timeout-Ms) passes while queued gets 504, counted.
 *
 * The RSS bounds are skipped when the daemon runs under a sanitizer (NORMD_SANITIZED=1, set by
 * make test-asan and test-tsan): shadow memory and quarantine are not the daemon's. The number
 * of aborts per state is ND_ABORTS (default 1000).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "util/nd_http.h"

#define MIB (1024.0 * 1024.0)
/* The daemon's RSS may grow at most this much over >= 1,000 aborted requests. */
#define RSS_GROWTH_MAX_MIB 32.0
#define WAVE 100 /* clients at once */

static nd_daemon daemon_;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int sanitized(void)
{
    const char *v = getenv("NORMD_SANITIZED");
    return v && *v && strcmp(v, "0");
}

static int aborts_per_state(void)
{
    const char *v = getenv("ND_ABORTS");
    int n = v ? atoi(v) : 1000;
    return n < WAVE ? WAVE : n;
}

/* The daemon's resident set in MiB (VmRSS). */
static double rss_mib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    fclose(f);
    cr_assert_geq(kb, 0);
    return (double)kb / 1024.0;
}

static void start(const char *const *extra)
{
    cr_assert_eq(nd_daemon_start(&daemon_, extra), 0, "normd did not start");
}

static void stop_expect_clean(void)
{
    if (daemon_.pid > 0)
        cr_assert_eq(nd_daemon_stop(&daemon_, 30), 0, "normd did not exit 0 on SIGTERM");
}

static double metric(const char *name, const char *labels)
{
    char url[128];
    snprintf(url, sizeof url, "%s/metrics", daemon_.base);
    nd_resp r;
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    double v = nd_metric_value(r.body, name, labels);
    nd_resp_free(&r);
    cr_assert_geq(v, 0, "/metrics has no %s{%s}", name, labels ? labels : "");
    return v;
}

/* Waits until cond(arg) holds, polling /metrics; fails the test after timeout_s. */
static void wait_until(int (*cond)(void *), void *arg, double timeout_s, const char *what)
{
    double t_end = now_s() + timeout_s;
    while (!cond(arg)) {
        cr_assert(now_s() < t_end, "timed out after %.0f s waiting for %s", timeout_s, what);
        sleep_s(0.005);
    }
}

/* Nothing in flight but the /metrics request asking. */
static int quiet(void *arg)
{
    return metric("normd_requests_open", NULL) == 1 && metric("normd_queue_depth", NULL) == 0 &&
           metric("normd_device_batches_in_flight", "device=\"cpu\"") == 0;
}

/* ---- raw sockets ---- */

static int tcp_open(unsigned port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 0 when all n bytes went out, -1 when the connection failed first. */
static int send_all(int fd, const void *p, size_t n)
{
    const char *q = p;
    while (n) {
        ssize_t k = send(fd, q, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        q += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Closes with a reset (SO_LINGER 0), as a client that crashed or gave up does. */
static void abort_close(int fd)
{
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

typedef struct raw_answer {
    int code;
    int close;           /* Connection: close */
    char retry_after[16];
    long content_length; /* -1 when absent */
    char *body;          /* content_length bytes + NUL, malloc'ed */
} raw_answer;

static void raw_answer_free(raw_answer *a)
{
    free(a->body);
    a->body = NULL;
}

/* The value of header name (with the colon, lower case) in head, copied into out. */
static int header_value(const char *head, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, n))
            continue;
        const char *v = p + 2 + n;
        while (*v == ' ')
            v++;
        size_t k = strcspn(v, "\r\n");
        if (k >= size)
            k = size - 1;
        memcpy(out, v, k);
        out[k] = '\0';
        return 1;
    }
    return 0;
}

/* Reads one answer: the head, then (unless head_only) a Content-Length body. Returns 0, or -1
 * when the connection ended (or timeout_s passed) before a whole answer. */
static int read_answer(int fd, raw_answer *a, double timeout_s, int head_only)
{
    memset(a, 0, sizeof *a);
    a->content_length = -1;
    char head[8192];
    size_t n = 0;
    double t_end = now_s() + timeout_s;
    char *end = NULL;
    /* byte by byte up to the blank line, so that nothing of a next answer is consumed */
    while (!end) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((t_end - now_s()) * 1e3);
        if (ms <= 0 || poll(&p, 1, ms) <= 0 || n == sizeof head - 1)
            return -1;
        ssize_t k = recv(fd, head + n, 1, 0);
        if (k <= 0)
            return -1;
        n++;
        head[n] = '\0';
        if (n >= 4 && !memcmp(head + n - 4, "\r\n\r\n", 4))
            end = head + n;
    }
    if (sscanf(head, "HTTP/1.%*d %d", &a->code) != 1)
        return -1;
    char v[64];
    if (header_value(head, "content-length:", v, sizeof v))
        a->content_length = atol(v);
    if (header_value(head, "connection:", v, sizeof v))
        a->close = !strcasecmp(v, "close");
    header_value(head, "retry-after:", a->retry_after, sizeof a->retry_after);
    if (head_only || a->content_length < 0)
        return 0;
    a->body = malloc((size_t)a->content_length + 1);
    cr_assert_not_null(a->body);
    size_t got = 0;
    while (got < (size_t)a->content_length) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((t_end - now_s()) * 1e3);
        if (ms <= 0 || poll(&p, 1, ms) <= 0)
            return -1;
        ssize_t k = recv(fd, a->body + got, (size_t)a->content_length - got, 0);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    a->body[got] = '\0';
    return 0;
}

/* A raw binary POST's head; body_len is its Content-Length. */
static int post_head(char *buf, size_t size, const char *path, size_t body_len,
                     const char *extra)
{
    return snprintf(buf, size,
                    "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream"
                    "\r\nContent-Length: %zu\r\n%s\r\n",
                    path, body_len, extra ? extra : "");
}

/* x for an n-element float32 request: small values, different for each seed. */
static float *make_x(size_t n, unsigned seed)
{
    float *x = malloc(n * sizeof *x);
    cr_assert_not_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u + seed * 40503u) % 1000) / 250.0f - 2.0f;
    return x;
}

/* ---- a client served beside the aborted ones ---- */

/* A raw binary softmax of zeros: every answer element must be exactly 1/cols. Its rows fill
 * --max-batch-rows in the "computing" configuration, so it never waits for company. */
#define STEADY_ROWS 6400
#define STEADY_COLS 2

typedef struct steady {
    pthread_t thread;
    atomic_int stop, hold, idle;
    atomic_int ok, bad;
    char why[256];
} steady;

static void *steady_main(void *arg)
{
    steady *s = arg;
    const size_t n = STEADY_ROWS * STEADY_COLS;
    float *zeros = calloc(n, sizeof *zeros);
    char url[160];
    snprintf(url, sizeof url, "%s/v1/softmax?shape=%d,%d", daemon_.base, STEADY_ROWS,
             STEADY_COLS);
    while (!atomic_load(&s->stop)) {
        if (atomic_load(&s->hold)) {
            atomic_store(&s->idle, 1);
            sleep_s(0.002);
            continue;
        }
        atomic_store(&s->idle, 0);
        nd_resp r;
        int rc = nd_http("POST", url, "application/octet-stream", zeros, n * sizeof(float), &r);
        int good = rc == 0 && r.code == 200 && r.len == n * sizeof(float);
        for (size_t i = 0; good && i < n; i++) {
            float y;
            memcpy(&y, r.body + i * sizeof y, sizeof y);
            good = y == 1.0f / STEADY_COLS;
        }
        if (good)
            atomic_fetch_add(&s->ok, 1);
        else if (atomic_fetch_add(&s->bad, 1) == 0)
            snprintf(s->why, sizeof s->why, "HTTP %ld (%d): %.160s", r.code, rc,
                     r.body ? r.body : "");
        nd_resp_free(&r);
    }
    atomic_store(&s->idle, 1);
    free(zeros);
    return NULL;
}

static void steady_start(steady *s)
{
    memset(s, 0, sizeof *s);
    cr_assert_eq(pthread_create(&s->thread, NULL, steady_main, s), 0);
}

/* Pauses the steady client (waits for its request in flight to finish). */
static void steady_hold(steady *s)
{
    atomic_store(&s->hold, 1);
    while (!atomic_load(&s->idle))
        sleep_s(0.001);
}

/* Lets it go again, and waits until its next request has begun: each wave then overlaps at
 * least one of its requests. */
static void steady_go(steady *s)
{
    atomic_store(&s->hold, 0);
    while (atomic_load(&s->idle))
        sleep_s(0.0005);
}

static void steady_stop_and_check(steady *s, const char *state)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    cr_assert_eq(atomic_load(&s->bad), 0, "aborts while %s: %d of the steady client's requests "
                 "failed, the first: %s", state, atomic_load(&s->bad), s->why);
    cr_assert_geq(atomic_load(&s->ok), 3, "aborts while %s: the steady client was served only "
                  "%d times", state, atomic_load(&s->ok));
}

/* ---- aborts in each state ---- */

/* The request the aborted clients send: layernorm of 64 x 4096 float32 (1 MiB each way), as in
 * the issue that found the leak. */
#define ABORT_ROWS 64
#define ABORT_COLS 4096
#define ABORT_BYTES ((size_t)ABORT_ROWS * ABORT_COLS * sizeof(float))

typedef enum abort_state { A_RECEIVING, A_QUEUED, A_COMPUTING, A_SENDING } abort_state;
static const char *const state_names[] = {"receiving", "queued", "computing", "sending"};

typedef struct wave_ctx {
    int n;
    double requests, jobs;
} wave_ctx;

static int all_open(void *arg) /* every client's request has begun */
{
    wave_ctx *w = arg;
    return metric("normd_requests_open", NULL) >= w->requests;
}

static int all_queued(void *arg)
{
    wave_ctx *w = arg;
    return metric("normd_jobs_open", NULL) >= w->jobs &&
           metric("normd_queue_depth", NULL) >= w->jobs;
}

static int all_computing(void *arg) /* submitted, none queued, a batch running */
{
    wave_ctx *w = arg;
    return metric("normd_jobs_open", NULL) >= w->jobs && metric("normd_queue_depth", NULL) == 0 &&
           metric("normd_device_batches_in_flight", "device=\"cpu\"") >= 1;
}

/* The "sending" state needs an answer larger than what the kernel's socket buffers take in
 * (about 3 MB of a 4 MB send buffer on loopback), or the daemon has handed all of it over before
 * the client closes: layernorm of 1024 x 1024 float32 zeros, 4 MiB, sent deflated (a few KB). */
#define BIG_ROWS 1024
#define BIG_COLS 1024
#define BIG_BYTES ((size_t)BIG_ROWS * BIG_COLS * sizeof(float))

static unsigned char *deflated_zeros(size_t n, size_t *len)
{
    unsigned char *zeros = calloc(1, n);
    uLongf cap = compressBound((uLong)n);
    unsigned char *z = malloc(cap);
    cr_assert(zeros && z);
    cr_assert_eq(compress2(z, &cap, zeros, (uLong)n, 9), Z_OK);
    free(zeros);
    *len = cap;
    return z;
}

/* One wave: n clients brought into `state`, checked there from the daemon's gauges, then
 * closed with a reset. */
static void abort_wave(abort_state state, int n, const char *body, steady *st)
{
    char head[512];
    int hl = post_head(head, sizeof head, "/v1/layernorm?shape=64,4096", ABORT_BYTES, NULL);
    size_t zlen = 0;
    unsigned char *z = NULL;
    if (state == A_SENDING) {
        z = deflated_zeros(BIG_BYTES, &zlen);
        hl = post_head(head, sizeof head, "/v1/layernorm?shape=1024,1024", zlen,
                       "Content-Encoding: deflate\r\n");
    }
    int fds[WAVE];
    cr_assert_leq(n, WAVE);
    /* The steady client pauses while the wave is set up, so that the gauges count the wave
     * alone; it runs again while the daemon cleans up after the wave. */
    double t_wave = now_s();
    steady_hold(st);
    for (int i = 0; i < n; i++) {
        /* a small receive buffer keeps a 1 MiB answer from fitting in the socket buffers */
        fds[i] = tcp_open(daemon_.port, state == A_SENDING ? 4096 : 0);
        cr_assert_geq(fds[i], 0, "connect: %s", strerror(errno));
        cr_assert_eq(send_all(fds[i], head, (size_t)hl), 0);
        size_t part = state == A_RECEIVING ? ABORT_BYTES / 2 : ABORT_BYTES;
        if (z)
            cr_assert_eq(send_all(fds[i], z, zlen), 0);
        else
            cr_assert_eq(send_all(fds[i], body + (i % 7) * 4, part), 0);
    }
    /* +1: the /metrics request asking */
    double tw = now_s();
    wave_ctx w = {n, n + 1.0, (double)n};
    switch (state) {
    case A_RECEIVING:
        wait_until(all_open, &w, 20, "the half-sent requests to begin");
        break;
    case A_QUEUED:
        wait_until(all_queued, &w, 20, "the requests to be queued");
        break;
    case A_COMPUTING:
        wait_until(all_computing, &w, 20, "the requests' batch to run");
        break;
    case A_SENDING:
        for (int i = 0; i < n; i++) {
            raw_answer a;
            cr_assert_eq(read_answer(fds[i], &a, 30, 1), 0, "no answer head");
            cr_assert_eq(a.code, 200);
            cr_assert_eq(a.content_length, (long)BIG_BYTES);
        }
        /* the answers have begun and are not finished: their requests are still open */
        wait_until(all_open, &w, 5, "the answers to be in the middle of sending");
        break;
    }
    if (getenv("ND_DEBUG"))
        fprintf(stderr, "wave %s: sent %.3f s, state reached %.3f s\n", state_names[state], tw - t_wave, now_s() - tw);
    for (int i = 0; i < n; i++)
        abort_close(fds[i]);
    steady_go(st);
    free(z);
}

static void aborts_in(abort_state state)
{
    const int total = aborts_per_state(), warm = 2 * WAVE;
    char *body = malloc(ABORT_BYTES + 64);
    cr_assert_not_null(body);
    float *x = make_x(ABORT_BYTES / sizeof(float) + 16, 1);
    memcpy(body, x, ABORT_BYTES + 64);
    free(x);
    steady st;
    steady_start(&st);
    for (int done = 0; done < warm; done += WAVE)
        abort_wave(state, WAVE, body, &st);
    steady_hold(&st);
    wait_until(quiet, NULL, 60, "the daemon to finish the warm-up");
    double before = rss_mib(daemon_.pid);
    steady_go(&st);
    double t0 = now_s();
    for (int done = 0; done < total; done += WAVE)
        abort_wave(state, WAVE, body, &st);
    steady_hold(&st);
    wait_until(quiet, NULL, 60, "the daemon to finish the aborted requests");
    double after = rss_mib(daemon_.pid);
    steady_stop_and_check(&st, state_names[state]);
    fprintf(stderr, "aborts while %-9s: %d (after %d warm-up) in %.1f s, daemon RSS %.1f -> "
            "%.1f MiB (%+.1f), steady client served %d times\n", state_names[state], total,
            warm, now_s() - t0, before, after, after - before, atomic_load(&st.ok));
    if (!sanitized())
        cr_assert_lt(after - before, RSS_GROWTH_MAX_MIB, "%d aborts while %s: RSS %.1f -> %.1f "
                     "MiB", total, state_names[state], before, after);
    /* and the daemon still answers the same request in full */
    int fd = tcp_open(daemon_.port, 0);
    char head[512];
    int hl = post_head(head, sizeof head, "/v1/layernorm?shape=64,4096", ABORT_BYTES, NULL);
    cr_assert_eq(send_all(fd, head, (size_t)hl), 0);
    cr_assert_eq(send_all(fd, body, ABORT_BYTES), 0);
    raw_answer a;
    cr_assert_eq(read_answer(fd, &a, 30, 0), 0);
    cr_assert_eq(a.code, 200);
    cr_assert_eq(a.content_length, (long)ABORT_BYTES);
    raw_answer_free(&a);
    close(fd);
    free(body);
}

TestSuite(aborts, .fini = stop_expect_clean, .timeout = 240);

static void start_plain(void)
{
    start(NULL);
}

/* The queue holds a wave for 0.4 s before its batch runs. */
static void start_queueing(void)
{
    static const char *const args[] = {"--max-delay-us", "400000", NULL};
    start(args);
}

/* A wave of WAVE requests fills --max-batch-rows exactly, so it runs as one batch the moment
 * the last arrives, and that batch takes 0.3 s longer. */
static void start_slow_batches(void)
{
    static char rows[16];
    snprintf(rows, sizeof rows, "%d", WAVE * ABORT_ROWS);
    static const char *args[] = {"--max-batch-rows", rows, "--max-delay-us", "10000000",
                                 "--slow-batch-us", "300000", NULL};
    start(args);
}

Test(aborts, while_receiving_the_body, .init = start_plain)
{
    aborts_in(A_RECEIVING);
}

Test(aborts, while_queued, .init = start_queueing)
{
    aborts_in(A_QUEUED);
}

Test(aborts, while_computing, .init = start_slow_batches)
{
    aborts_in(A_COMPUTING);
}

Test(aborts, while_sending_the_answer, .init = start_plain)
{
    aborts_in(A_SENDING);
}
