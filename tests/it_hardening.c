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
 *   - memory goes back to the system after a large request: the RSS a second after one 256 MiB
 *     request is within 64 MiB of its idle level.
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

/* The daemon's RSS may grow at most this much over >= 1,000 aborted requests. */
#define RSS_GROWTH_MAX_MIB 32.0
#define WAVE 100 /* clients at once */
/* The request the aborted clients send: layernorm of 64 x 4096 float32 (1 MiB each way), as in
 * the issue that found the leak. */
#define ABORT_ROWS 64
#define ABORT_COLS 4096
#define ABORT_BYTES ((size_t)ABORT_ROWS * ABORT_COLS * sizeof(float))

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

/* The daemon's main loop gives the allocator's free small blocks back once it has been idle for a
 * tick (200 ms). */
#define SETTLE_S 0.5

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

/* The RSS once the daemon has settled: it gives memory back when idle (the request buffer cache
 * and malloc_trim, within a few 200 ms ticks), so a reading taken too soon after a burst measures
 * what is about to be returned. Waits, from SETTLE_S on, until two readings 300 ms apart are
 * within 0.25 MiB (at most 5 s). */
static double settled_rss_mib(pid_t pid)
{
    sleep_s(SETTLE_S);
    double r = rss_mib(pid);
    for (double t0 = now_s(); now_s() - t0 < 5;) {
        sleep_s(0.3);
        double r1 = rss_mib(pid);
        if (fabs(r1 - r) < 0.25)
            return r1;
        r = r1;
    }
    return r;
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
    return nd_metric(daemon_.base, name, labels);
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
    return metric("normd_requests_open", NULL) == 1 && metric("normd_jobs_open", NULL) == 0;
}

/* The label of the first device's series for the backend under test. */
static const char *device_label(void)
{
    const char *b = getenv("NORMD_BACKEND");
    return b && !strcmp(b, "cuda") ? "device=\"cuda:0\"" : "device=\"cpu\"";
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
 * --max-batch-rows in the "queued" and "computing" configurations, so it never waits there for
 * company. */
#define STEADY_ROWS (WAVE * ABORT_ROWS + 1)
#define STEADY_COLS 2

typedef struct steady {
    pthread_t thread;
    float expect; /* every element of the answer: 1/STEADY_COLS, or 0 on the null backend */
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
            good = y == s->expect;
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

static void steady_start(steady *s, int null_backend)
{
    memset(s, 0, sizeof *s);
    s->expect = null_backend ? 0.0f : 1.0f / STEADY_COLS;
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
           metric("normd_device_batches_in_flight", device_label()) >= 1;
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

/* In the "queued" configuration a wave waits (up to 10 s) until one more row of its kind
 * arrives: this request, which then runs in one batch with the abandoned ones and must be
 * answered right. */
static void release_the_queue(void)
{
    float *x = make_x(ABORT_COLS, 7);
    char url[160];
    snprintf(url, sizeof url, "%s/v1/layernorm?shape=1,%d", daemon_.base, ABORT_COLS);
    nd_resp r;
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", x, ABORT_COLS * sizeof(float),
                         &r), 0);
    cr_assert_eq(r.code, 200, "the request that released the queue: HTTP %ld %s", r.code, r.body);
    cr_assert_eq(r.len, ABORT_COLS * sizeof(float));
    double sum = 0, sq = 0;
    for (int i = 0; i < ABORT_COLS; i++) {
        float y;
        memcpy(&y, r.body + i * sizeof y, sizeof y);
        sum += y;
        sq += (double)y * y;
    }
    cr_assert(fabs(sum / ABORT_COLS) < 1e-3 && fabs(sq / ABORT_COLS - 1) < 1e-2,
              "layernorm row: mean %g, mean square %g", sum / ABORT_COLS, sq / ABORT_COLS);
    nd_resp_free(&r);
    free(x);
}

static int wave_gone(void *arg)
{
    return metric("normd_jobs_open", NULL) <= 1;
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
    for (int i = 0; i < n; i++)
        abort_close(fds[i]);
    if (state == A_QUEUED)
        release_the_queue();
    steady_go(st);
    /* The next wave starts once this one's jobs are gone (the steady client may hold one): it
     * is then sent to an idle daemon, quickly enough to be queued as a whole. */
    wait_until(wave_gone, NULL, 60, "the wave's jobs to finish");
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
    steady_start(&st, state == A_SENDING);
    for (int done = 0; done < warm; done += WAVE)
        abort_wave(state, WAVE, body, &st);
    steady_hold(&st);
    wait_until(quiet, NULL, 60, "the daemon to finish the warm-up");
    double before = settled_rss_mib(daemon_.pid);
    steady_go(&st);
    double t0 = now_s();
    for (int done = 0; done < total; done += WAVE)
        abort_wave(state, WAVE, body, &st);
    steady_hold(&st);
    wait_until(quiet, NULL, 60, "the daemon to finish the aborted requests");
    double after = settled_rss_mib(daemon_.pid);
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

/* A wave of WAVE requests stays queued, however long it takes to arrive, until one more row of
 * its kind fills --max-batch-rows (release_the_queue). */
static void start_queueing(void)
{
    static char rows[16];
    snprintf(rows, sizeof rows, "%d", WAVE * ABORT_ROWS + 1);
    static const char *args[] = {"--max-batch-rows", rows, "--max-delay-us", "10000000", NULL};
    start(args);
}

/* The answers are large and nothing needs computing: the null backend (y = x). */
static void start_null(void)
{
    static const char *const args[] = {"--backend", "null", NULL};
    start(args);
}

/* A wave of WAVE requests fills --max-batch-rows exactly, so it runs as one batch the moment
 * the last arrives, and that batch takes 0.25 s longer (0.5 s under a sanitizer): time to see it
 * running and close the clients. */
static void start_slow_batches(void)
{
    static char rows[16];
    snprintf(rows, sizeof rows, "%d", WAVE * ABORT_ROWS);
    static const char *args[] = {"--max-batch-rows", rows, "--max-delay-us", "10000000",
                                 "--slow-batch-us", "250000", NULL};
    if (sanitized())
        args[5] = "500000";
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

Test(aborts, while_sending_the_answer, .init = start_null)
{
    aborts_in(A_SENDING);
}

/* ---- graceful drain ---- */

/* A keep-alive client: softmax of 16 x 64 zeros, over and over on one connection, reconnecting
 * after an answer that closes it, until the listener refuses or t_end. */
#define KA_ROWS 16
#define KA_COLS 64

typedef struct ka_client {
    pthread_t thread;
    double t_end;
    const double *t_term; /* when SIGTERM was sent (0 before) */
    int sent, answered, ok, busy_after_term, closes, refused;
    int unanswered;       /* sent in full, the connection ended without an answer */
    int wrong;            /* an answer other than 200 / a 503 after SIGTERM, or a wrong y */
    char why[256];
} ka_client;

static void *ka_main(void *arg)
{
    ka_client *k = arg;
    const size_t n = KA_ROWS * KA_COLS, bytes = n * sizeof(float);
    char head[256];
    char path[64];
    snprintf(path, sizeof path, "/v1/softmax?shape=%d,%d", KA_ROWS, KA_COLS);
    int hl = post_head(head, sizeof head, path, bytes, NULL);
    char *req = calloc(1, (size_t)hl + bytes);
    memcpy(req, head, (size_t)hl);
    int fd = -1;
    while (now_s() < k->t_end) {
        int fresh = fd < 0;
        if (fd < 0 && (fd = tcp_open(daemon_.port, 0)) < 0) {
            k->refused++;
            break;
        }
        double t_send = now_s();
        if (send_all(fd, req, (size_t)hl + bytes) < 0) { /* closed under us: not sent in full */
            close(fd);
            fd = -1;
            continue;
        }
        k->sent++;
        raw_answer a;
        errno = 0;
        if (read_answer(fd, &a, 20, 0) < 0) {
            if (k->unanswered++ == 0)
                snprintf(k->why, sizeof k->why, "a request sent %.3f s %s SIGTERM on a %s "
                         "connection got no answer (%s)", fabs(t_send - *k->t_term),
                         t_send < *k->t_term ? "before" : "after", fresh ? "new" : "kept-alive",
                         errno ? strerror(errno) : "closed");
            raw_answer_free(&a);
            close(fd);
            fd = -1;
            continue;
        }
        k->answered++;
        if (a.code == 200) {
            int good = a.content_length == (long)bytes;
            for (size_t i = 0; good && i < n; i++) {
                float y;
                memcpy(&y, a.body + i * sizeof y, sizeof y);
                good = y == 1.0f / KA_COLS;
            }
            if (good)
                k->ok++;
            else if (k->wrong++ == 0)
                snprintf(k->why, sizeof k->why, "a wrong answer");
        } else if (a.code == 503 && *k->t_term > 0 && t_send >= *k->t_term) {
            k->busy_after_term++;
        } else if (k->wrong++ == 0) {
            snprintf(k->why, sizeof k->why, "HTTP %d for a request sent %s SIGTERM: %.120s",
                     a.code, *k->t_term > 0 && t_send >= *k->t_term ? "after" : "before",
                     a.body ? a.body : "");
        }
        if (a.close) {
            k->closes++;
            close(fd);
            fd = -1;
        }
        raw_answer_free(&a);
    }
    if (fd >= 0)
        close(fd);
    free(req);
    return NULL;
}

/* The daemon's exit status once it has exited (at most timeout_s), -1 when it died of a signal,
 * -2 when it is still running. */
static int wait_exit(double timeout_s)
{
    double t_end = now_s() + timeout_s;
    for (;;) {
        int ws;
        pid_t r = waitpid(daemon_.pid, &ws, WNOHANG);
        if (r == daemon_.pid) {
            daemon_.pid = 0;
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
        }
        if (now_s() >= t_end)
            return -2;
        sleep_s(0.005);
    }
}

TestSuite(drain, .fini = stop_expect_clean, .timeout = 120);

static void start_draining(void)
{
    static const char *const args[] = {"--drain-seconds", "10", "--max-delay-us", "2000", NULL};
    start(args);
}

Test(drain, sigterm_under_keep_alive_load_answers_every_request_sent, .init = start_draining)
{
    enum { CLIENTS = 32 };
    static double t_term = 0;
    t_term = 0;
    ka_client *k = calloc(CLIENTS, sizeof *k);
    double t0 = now_s();
    for (int i = 0; i < CLIENTS; i++) {
        k[i].t_end = t0 + 4.0;
        k[i].t_term = &t_term;
        cr_assert_eq(pthread_create(&k[i].thread, NULL, ka_main, &k[i]), 0);
    }
    /* a request half sent before SIGTERM, finished after it */
    const size_t big = (size_t)256 * 4096 * sizeof(float);
    char head[256];
    int hl = post_head(head, sizeof head, "/v1/layernorm?shape=256,4096", big, NULL);
    float *x = make_x(big / sizeof(float), 3);
    int partial = tcp_open(daemon_.port, 0);
    cr_assert_eq(send_all(partial, head, (size_t)hl), 0);
    cr_assert_eq(send_all(partial, x, big / 2), 0);
    /* an idle keep-alive connection that asks /healthz after SIGTERM, and one that stays idle */
    int idle[2];
    const char *health = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    for (int i = 0; i < 2; i++) {
        idle[i] = tcp_open(daemon_.port, 0);
        cr_assert_eq(send_all(idle[i], health, strlen(health)), 0);
        raw_answer a;
        cr_assert_eq(read_answer(idle[i], &a, 5, 0), 0);
        cr_assert_eq(a.code, 200, "/healthz before SIGTERM: %d", a.code);
        cr_assert_eq(a.close, 0);
        raw_answer_free(&a);
    }

    sleep_s(0.5); /* load runs */
    t_term = now_s();
    kill(daemon_.pid, SIGTERM);

    sleep_s(0.2);
    cr_assert_eq(send_all(idle[0], health, strlen(health)), 0);
    raw_answer h;
    cr_assert_eq(read_answer(idle[0], &h, 5, 0), 0, "an idle keep-alive connection's request "
                 "within the grace got no answer");
    cr_assert_eq(h.code, 503, "/healthz while draining: %d %s", h.code, h.body);
    cr_assert(strstr(h.body, "draining"), "%s", h.body);
    cr_assert(h.close, "no Connection: close while draining");
    raw_answer_free(&h);

    cr_assert_eq(send_all(partial, (char *)x + big / 2, big - big / 2), 0);
    raw_answer p;
    cr_assert_eq(read_answer(partial, &p, 10, 0), 0, "the request half sent before SIGTERM got "
                 "no answer");
    cr_assert_eq(p.code, 200, "half-sent request: %d %s", p.code, p.body);
    cr_assert_eq(p.content_length, (long)big);
    cr_assert(p.close);
    raw_answer_free(&p);

    /* the idle connection is closed after the grace */
    struct pollfd pf = {idle[1], POLLIN, 0};
    cr_assert_eq(poll(&pf, 1, 5000), 1, "the idle connection was not closed");
    char c;
    cr_assert_leq(recv(idle[1], &c, 1, 0), 0, "the idle connection got data");
    double t_idle_closed = now_s() - t_term;

    int status = wait_exit(15);
    double t_exit = now_s() - t_term;
    cr_assert_eq(status, 0, "normd exited with %d after SIGTERM", status);
    int sent = 0, answered = 0, ok = 0, busy = 0, closes = 0, refused = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(k[i].thread, NULL);
        cr_assert_eq(k[i].unanswered, 0, "client %d: %s", i, k[i].why);
        cr_assert_eq(k[i].wrong, 0, "client %d: %s", i, k[i].why);
        sent += k[i].sent;
        answered += k[i].answered;
        ok += k[i].ok;
        busy += k[i].busy_after_term;
        closes += k[i].closes;
        refused += k[i].refused;
    }
    cr_assert_eq(answered, sent);
    cr_assert_geq(closes, CLIENTS, "every connection ends with an answer that closes it");
    fprintf(stderr, "drain: %d keep-alive clients sent %d requests in full, %d answered (%d "
            "with 200, %d with 503 after SIGTERM), %d answers closed their connection, %d "
            "reconnects refused; the idle connection closed %.2f s and the daemon exited %.2f s "
            "after SIGTERM\n", CLIENTS, sent, answered, ok, busy, closes, refused, t_idle_closed,
            t_exit);
    cr_assert_lt(t_exit, 10, "the drain took the whole --drain-seconds");
    close(partial);
    close(idle[0]);
    close(idle[1]);
    free(x);
    free(k);
}

static void start_short_drain(void)
{
    static const char *const args[] = {"--drain-seconds", "2", NULL};
    start(args);
}

/* A client that stalls half-way through its body holds the drain up to --drain-seconds, no
 * longer; the exit is still 0. */
Test(drain, a_stalled_request_holds_the_drain_up_to_drain_seconds, .init = start_short_drain)
{
    const size_t big = (size_t)64 * 4096 * sizeof(float);
    char head[256];
    int hl = post_head(head, sizeof head, "/v1/layernorm?shape=64,4096", big, NULL);
    int fd = tcp_open(daemon_.port, 0);
    cr_assert_eq(send_all(fd, head, (size_t)hl), 0);
    char *half = calloc(1, big / 2);
    cr_assert_eq(send_all(fd, half, big / 2), 0);
    wave_ctx w = {1, 2, 0};
    wait_until(all_open, &w, 5, "the stalled request to begin");
    double t0 = now_s();
    kill(daemon_.pid, SIGTERM);
    int status = wait_exit(10);
    double t = now_s() - t0;
    cr_assert_eq(status, 0, "normd exited with %d", status);
    cr_assert(t >= 1.9 && t < 4, "exited %.2f s after SIGTERM with --drain-seconds 2", t);
    close(fd);
    free(half);
}

/* ---- the byte budget ---- */

TestSuite(budget, .fini = stop_expect_clean, .timeout = 120);

#define BUDGET_MIB 64

static void start_budget(void)
{
    static char b[32];
    snprintf(b, sizeof b, "%d", BUDGET_MIB << 20);
    static const char *args[] = {"--max-inflight-bytes", b, NULL};
    start(args);
}

typedef struct bytes_ctx {
    double want;
} bytes_ctx;

static int inflight_is(void *arg)
{
    return metric("normd_inflight_bytes", NULL) == ((bytes_ctx *)arg)->want;
}

Test(budget, a_request_past_the_budget_gets_503_before_its_body_is_read, .init = start_budget)
{
    /* A, 12 MiB, holds its charge (a multiple of its body: 48 MiB at 4x) of the 64 MiB budget
     * while its body trickles in */
    const size_t row = 4096 * sizeof(float), a_bytes = 768 * row;
    char head[256];
    int hl = post_head(head, sizeof head, "/v1/layernorm?shape=768,4096", a_bytes, NULL);
    float *x = make_x(a_bytes / sizeof(float), 5);
    int a = tcp_open(daemon_.port, 0);
    cr_assert_eq(send_all(a, head, (size_t)hl), 0);
    cr_assert_eq(send_all(a, x, 1 << 20), 0);
    wave_ctx w = {1, 2, 0};
    wait_until(all_open, &w, 5, "the first request to begin");
    bytes_ctx held = {metric("normd_inflight_bytes", NULL)};
    double factor = held.want / (double)a_bytes;
    cr_assert(factor >= 2 && held.want < (double)((size_t)BUDGET_MIB << 20),
              "a %zu-byte body is charged %.0f bytes", a_bytes, held.want);
    /* B, a little more than what is left of the budget at that rate: 503 with Retry-After,
     * without sending a byte of its body */
    size_t b_rows = (size_t)((((double)((size_t)BUDGET_MIB << 20) - held.want) / factor) /
                             (double)row) + 64;
    size_t b_bytes = b_rows * row;
    cr_assert_leq(b_bytes, a_bytes); /* sent from x below */
    char path[64];
    snprintf(path, sizeof path, "/v1/layernorm?shape=%zu,4096", b_rows);
    hl = post_head(head, sizeof head, path, b_bytes, NULL);
    int b = tcp_open(daemon_.port, 0);
    cr_assert_eq(send_all(b, head, (size_t)hl), 0);
    raw_answer r;
    cr_assert_eq(read_answer(b, &r, 5, 0), 0, "no answer to the headers alone");
    cr_assert_eq(r.code, 503, "HTTP %d: %s", r.code, r.body);
    cr_assert_str_eq(r.retry_after, "1");
    cr_assert(strstr(r.body, "max-inflight-bytes"), "%s", r.body);
    raw_answer_free(&r);
    close(b);
    cr_assert_eq(metric("normd_inflight_bytes", NULL), held.want, "the refused request's "
                 "charge was not given back");
    /* A finishes and is answered; then the budget is free again and B goes through */
    cr_assert_eq(send_all(a, (char *)x + (1 << 20), a_bytes - (1 << 20)), 0);
    cr_assert_eq(read_answer(a, &r, 30, 0), 0);
    cr_assert_eq(r.code, 200, "HTTP %d: %s", r.code, r.body);
    raw_answer_free(&r);
    close(a);
    bytes_ctx none = {0};
    wait_until(inflight_is, &none, 5, "the budget to be free");
    nd_resp ok;
    char url[128];
    snprintf(url, sizeof url, "%s%s", daemon_.base, path);
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", x, b_bytes, &ok), 0);
    cr_assert_eq(ok.code, 200, "HTTP %ld: %s", ok.code, ok.body);
    nd_resp_free(&ok);
    free(x);
}

/* Many clients with large bodies at once: the RSS stays under the budget plus a fixed overhead. */
typedef struct budget_client {
    pthread_t thread;
    double t_end;
    const float *x;
    int ok, busy, bad;
} budget_client;

#define BC_ROWS 256 /* x 4096 float32: 4 MiB each way */

/* One request as a client with a large body should send it: headers with Expect: 100-continue,
 * the body only after "100 Continue". The status, or -1 when the exchange failed. */
static int post_expect_continue(const char *path, const void *body, size_t len, size_t *got)
{
    char head[256];
    int hl = post_head(head, sizeof head, path, len, "Expect: 100-continue\r\n");
    int fd = tcp_open(daemon_.port, 0);
    if (fd < 0 || send_all(fd, head, (size_t)hl) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    raw_answer a;
    int rc = read_answer(fd, &a, 30, 0);
    if (rc == 0 && a.code == 100) {
        rc = send_all(fd, body, len);
        if (rc == 0)
            rc = read_answer(fd, &a, 30, 0);
    }
    int code = rc == 0 ? a.code : -1;
    *got = rc == 0 && a.content_length > 0 ? (size_t)a.content_length : 0;
    raw_answer_free(&a);
    close(fd);
    return code;
}

static void *budget_client_main(void *arg)
{
    budget_client *c = arg;
    char path[64];
    snprintf(path, sizeof path, "/v1/layernorm?shape=%d,4096", BC_ROWS);
    const size_t bytes = (size_t)BC_ROWS * 4096 * sizeof(float);
    while (now_s() < c->t_end) {
        size_t got;
        int code = post_expect_continue(path, c->x, bytes, &got);
        if (code == 200 && got == bytes)
            c->ok++;
        else if (code == 503) {
            c->busy++;
            sleep_s(0.002);
        } else
            c->bad++;
    }
    return NULL;
}

typedef struct rss_sampler {
    pthread_t thread;
    atomic_int stop;
    double peak;
} rss_sampler;

static void *rss_sampler_main(void *arg)
{
    rss_sampler *s = arg;
    while (!atomic_load(&s->stop)) {
        double r = rss_mib(daemon_.pid);
        if (r > s->peak)
            s->peak = r;
        sleep_s(0.001);
    }
    return NULL;
}

/* What the daemon may hold beyond the requests' charges (each is charged for its body, its share
 * of its batch's staging and its answer): the staging the CPU engine keeps between batches (8 MiB
 * per buffer, in and out, two slots: 32 MiB), the HTTP connections' buffers, and the allocator's
 * heaps of small blocks (larger ones are mmap'ed and given back when freed, server/main.c). */
#define BUDGET_OVERHEAD_MIB 48

Test(budget, concurrent_large_bodies_stay_within_the_budget, .init = start_budget)
{
    enum { CLIENTS = 24 };
    const size_t n = (size_t)BC_ROWS * 4096;
    float *x = make_x(n, 9);
    budget_client c[CLIENTS];
    double base = rss_mib(daemon_.pid);
    rss_sampler s = {.peak = base};
    cr_assert_eq(pthread_create(&s.thread, NULL, rss_sampler_main, &s), 0);
    double t_end = now_s() + 3.0;
    for (int i = 0; i < CLIENTS; i++) {
        c[i] = (budget_client){.t_end = t_end, .x = x};
        cr_assert_eq(pthread_create(&c[i].thread, NULL, budget_client_main, &c[i]), 0);
    }
    int ok = 0, busy = 0, bad = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(c[i].thread, NULL);
        ok += c[i].ok;
        busy += c[i].busy;
        bad += c[i].bad;
    }
    atomic_store(&s.stop, 1);
    pthread_join(s.thread, NULL);
    fprintf(stderr, "budget: %d clients with 4 MiB bodies for 3 s under a %d MiB budget: %d "
            "answered, %d turned away (503), %d failed; daemon RSS %.1f MiB at rest, peak %.1f "
            "(+%.1f; bound: budget + %d MiB)\n", CLIENTS, BUDGET_MIB, ok, busy, bad, base,
            s.peak, s.peak - base, BUDGET_OVERHEAD_MIB);
    cr_assert_eq(bad, 0);
    cr_assert_gt(ok, CLIENTS);
    cr_assert_gt(busy, 0, "the budget never turned anyone away");
    if (!sanitized())
        cr_assert_lt(s.peak, base + BUDGET_MIB + BUDGET_OVERHEAD_MIB, "peak RSS %.1f MiB",
                     s.peak);
    free(x);
}

/* ---- memory back to the system after a large request ---- */

TestSuite(memory, .fini = stop_expect_clean, .timeout = 120);

#define LARGE_MIB 256      /* the request's body, and its answer */
#define RSS_RETURN_MIB 64  /* how far above its idle level the RSS may stay a second later */

/* Limits that let one 256 MiB body through: the body limit, and the byte budget, which charges a
 * request a multiple of its body. */
static void start_large(void)
{
    static char body[32], budget[32];
    snprintf(body, sizeof body, "%lld", (long long)(LARGE_MIB + 1) << 20);
    snprintf(budget, sizeof budget, "%lld", (long long)(8 * LARGE_MIB) << 20);
    static const char *args[] = {"--max-body-bytes", body, "--max-inflight-bytes", budget, NULL};
    start(args);
}

Test(memory, rss_is_back_near_idle_a_second_after_a_256_mib_request, .init = start_large)
{
    /* Under a sanitizer the RSS says nothing (shadow memory, quarantine) and a 256 MiB layernorm
     * takes minutes on 2 cores: a 32 MiB one still runs the path. */
    const int mib = sanitized() ? 32 : LARGE_MIB;
    const size_t cols = 4096, rows = ((size_t)mib << 20) / (cols * sizeof(float));
    const size_t bytes = rows * cols * sizeof(float);
    float *x = make_x(rows * cols, 13);
    char url[128];
    nd_resp r;
    /* idle: after one small request of the same kind, settled */
    snprintf(url, sizeof url, "%s/v1/layernorm?shape=4,%zu", daemon_.base, cols);
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", x, 4 * cols * sizeof(float),
                         &r), 0);
    cr_assert_eq(r.code, 200, "HTTP %ld: %s", r.code, r.body);
    nd_resp_free(&r);
    sleep_s(SETTLE_S);
    const double idle = rss_mib(daemon_.pid);
    rss_sampler s = {.peak = idle};
    cr_assert_eq(pthread_create(&s.thread, NULL, rss_sampler_main, &s), 0);
    snprintf(url, sizeof url, "%s/v1/layernorm?shape=%zu,%zu", daemon_.base, rows, cols);
    cr_assert_eq(nd_http("POST", url, "application/octet-stream", x, bytes, &r), 0);
    atomic_store(&s.stop, 1);
    pthread_join(s.thread, NULL);
    cr_assert_eq(r.code, 200, "HTTP %ld: %s", r.code, r.body);
    cr_assert_eq(r.len, bytes);
    nd_resp_free(&r);
    free(x);
    sleep_s(1.0);
    const double after = rss_mib(daemon_.pid);
    fprintf(stderr, "memory: one %d MiB request: daemon RSS %.1f MiB idle, peak %.1f, %.1f a "
            "second after (%+.1f; bound: +%d)\n", mib, idle, s.peak, after, after - idle,
            RSS_RETURN_MIB);
    if (!sanitized())
        cr_assert_lt(after - idle, RSS_RETURN_MIB, "RSS %.1f MiB idle, %.1f a second after a "
                     "%d MiB request", idle, after, LARGE_MIB);
}

/* ---- admin routes and parameter-set limits ---- */

static char token_path[64];

/* Runs normd with args until it prints its first line or exits; returns the exit status (or -2
 * when it started, then it is stopped), with what it printed in out. */
static int run_normd(const char *const *args, char *out, size_t size)
{
    const char *bin = getenv("NORMD_BIN") ? getenv("NORMD_BIN") : "build/normd";
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const char *argv[32] = {bin, "--backend", "null"};
    int argc = 3;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    while (n < size - 1) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0)
            break;
        ssize_t k = read(fds[0], out + n, 1);
        if (k <= 0 || out[n] == '\n')
            break;
        n++;
    }
    out[n] = '\0';
    close(fds[0]);
    int ws;
    for (int t = 0; t < 100; t++) {
        if (waitpid(pid, &ws, WNOHANG) == pid)
            return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
        sleep_s(0.01);
    }
    kill(pid, SIGTERM);
    waitpid(pid, &ws, 0);
    return -2;
}

static void write_token(void)
{
    snprintf(token_path, sizeof token_path, "/tmp/normd-token-%d", (int)getpid());
    FILE *f = fopen(token_path, "w");
    cr_assert_not_null(f);
    fputs("s3cret-t0ken\n", f);
    fclose(f);
}

static void start_admin(void)
{
    write_token();
    static const char *args[] = {"--admin-token-file", token_path, "--max-param-sets", "2",
                                 "--max-param-bytes", "1024", NULL};
    start(args);
}

static long params_call(const char *method, const char *name, const char *auth, int nweights)
{
    char url[160], body[4096] = "{\"dtype\":\"float32\",\"weight\":[";
    snprintf(url, sizeof url, "%s/v1/params/%s", daemon_.base, name);
    for (int i = 0; i < nweights; i++)
        strcat(body, i ? ",1" : "1");
    strcat(body, "]}");
    const char *headers[2] = {auth, NULL};
    nd_http_req q = {.method = method, .url = url, .headers = auth ? headers : NULL};
    if (!strcmp(method, "PUT")) {
        q.content_type = "application/json";
        q.body = body;
        q.len = strlen(body);
    }
    nd_resp r;
    cr_assert_eq(nd_http_do(&q, &r), 0);
    long code = r.code;
    nd_resp_free(&r);
    return code;
}

TestSuite(admin, .fini = stop_expect_clean, .timeout = 60);

Test(admin, parameter_changes_need_the_bearer_token, .init = start_admin)
{
    const char *good = "Authorization: Bearer s3cret-t0ken";
    cr_assert_eq(params_call("PUT", "w", NULL, 4), 401);
    cr_assert_eq(params_call("PUT", "w", "Authorization: Bearer s3cret-t0keN", 4), 401);
    cr_assert_eq(params_call("PUT", "w", "Authorization: Basic czNjcmV0LXQwa2Vu", 4), 401);
    cr_assert_eq(params_call("GET", "w", NULL, 0), 404, "an unauthorized PUT registered a set");
    cr_assert_eq(params_call("PUT", "w", good, 4), 200);
    cr_assert_eq(params_call("GET", "w", NULL, 0), 200, "reading stays open");
    cr_assert_eq(params_call("DELETE", "w", NULL, 0), 401);
    cr_assert_eq(params_call("DELETE", "w", good, 0), 200);
    /* the 401 names the scheme */
    char url[160];
    snprintf(url, sizeof url, "%s/v1/params/w", daemon_.base);
    nd_resp r;
    cr_assert_eq(nd_http("DELETE", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 401);
    cr_assert(strstr(r.body, "Bearer"), "%s", r.body);
    nd_resp_free(&r);
}

Test(admin, parameter_sets_are_limited_in_count_and_bytes, .init = start_admin)
{
    const char *good = "Authorization: Bearer s3cret-t0ken";
    cr_assert_eq(params_call("PUT", "a", good, 64), 200);   /* 256 bytes */
    cr_assert_eq(params_call("PUT", "b", good, 64), 200);   /* 512 */
    cr_assert_eq(params_call("PUT", "c", good, 4), 507);    /* a third set */
    cr_assert_eq(params_call("PUT", "a", good, 200), 507);  /* 256 + 800 > 1024 */
    cr_assert_eq(params_call("PUT", "a", good, 150), 200);  /* replaces a: 256 + 600 */
    cr_assert_eq(params_call("PUT", "d", good, 300), 413);  /* 1200 alone */
    cr_assert_eq(params_call("DELETE", "b", good, 0), 200);
    cr_assert_eq(params_call("PUT", "c", good, 64), 200);
}

Test(admin, beyond_loopback_the_admin_routes_need_a_token_or_an_explicit_flag)
{
    write_token();
    char out[512];
    const char *open_[] = {"--listen", "0.0.0.0:0", NULL};
    int st = run_normd(open_, out, sizeof out);
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "beyond loopback") && strstr(out, "--admin-token-file"), "%s", out);
    const char *with_token[] = {"--listen", "0.0.0.0:0", "--admin-token-file", token_path, NULL};
    st = run_normd(with_token, out, sizeof out);
    cr_assert_eq(st, -2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "listening on http://0.0.0.0:"), "%s", out);
    const char *flagged[] = {"--listen", "0.0.0.0:0", "--allow-open-admin", NULL};
    st = run_normd(flagged, out, sizeof out);
    cr_assert_eq(st, -2, "exit %d: %s", st, out);
    const char *empty_token[] = {"--admin-token-file", "/dev/null", NULL};
    st = run_normd(empty_token, out, sizeof out);
    cr_assert_eq(st, 2, "exit %d: %s", st, out);
    cr_assert(strstr(out, "admin-token-file"), "%s", out);
}

/* ---- deadlines ---- */

TestSuite(deadline, .fini = stop_expect_clean, .timeout = 60);

static void start_waiting(void)
{
    static const char *const args[] = {"--max-delay-us", "500000", NULL};
    start(args);
}

static nd_resp post_with_timeout(const char *path, const char *ctype, const char *body,
                                 const char *timeout_header, double *seconds)
{
    char url[160];
    snprintf(url, sizeof url, "%s%s", daemon_.base, path);
    const char *headers[2] = {timeout_header, NULL};
    nd_http_req q = {.method = "POST", .url = url, .content_type = ctype,
                     .headers = timeout_header ? headers : NULL, .body = body,
                     .len = strlen(body)};
    nd_resp r;
    double t0 = now_s();
    cr_assert_eq(nd_http_do(&q, &r), 0);
    *seconds = now_s() - t0;
    return r;
}

Test(deadline, a_request_still_queued_at_its_deadline_gets_504, .init = start_waiting)
{
    const char *json = "{\"shape\":[1,2],\"data\":[0,0]}";
    double t;
    /* batches wait 0.5 s for company; a 100 ms deadline passes in the queue */
    nd_resp r = post_with_timeout("/v1/softmax", "application/json", json,
                                  "X-Normd-Timeout-Ms: 100", &t);
    cr_assert_eq(r.code, 504, "HTTP %ld: %s", r.code, r.body);
    cr_assert(strstr(r.body, "deadline"), "%s", r.body);
    cr_assert(t >= 0.09 && t < 0.4, "504 after %.3f s for a 100 ms deadline", t);
    nd_resp_free(&r);
    /* a deadline that leaves room is served */
    r = post_with_timeout("/v1/softmax", "application/json", json, "X-Normd-Timeout-Ms: 5000", &t);
    cr_assert_eq(r.code, 200, "HTTP %ld: %s", r.code, r.body);
    nd_resp_free(&r);
    /* v2's "timeout" parameter, in microseconds */
    const char *v2 = "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,2],\"datatype\":\"FP32\","
                     "\"data\":[0,0]}],\"parameters\":{\"timeout\":100000}}";
    r = post_with_timeout("/v2/models/softmax/infer", "application/json", v2, NULL, &t);
    cr_assert_eq(r.code, 504, "v2: HTTP %ld: %s", r.code, r.body);
    cr_assert(t < 0.4, "v2: 504 after %.3f s for a 100 ms deadline", t);
    nd_resp_free(&r);
    /* a header that is not a number of milliseconds */
    r = post_with_timeout("/v1/softmax", "application/json", json, "X-Normd-Timeout-Ms: soon", &t);
    cr_assert_eq(r.code, 400, "HTTP %ld: %s", r.code, r.body);
    cr_assert(strstr(r.body, "X-Normd-Timeout-Ms"), "%s", r.body);
    nd_resp_free(&r);
    cr_assert_eq(metric("normd_requests_total", "op=\"softmax\",code=\"504\""), 2);
    cr_assert_eq(metric("normd_queue_depth", NULL), 0, "an expired job stayed in the queue");
}

static void start_busy(void)
{
    static const char *const args[] = {"--slow-batch-us", "600000", NULL};
    start(args);
}

typedef struct bg_post {
    pthread_t thread;
    const char *path; /* a different op for each: they cannot share a batch */
    long code;
} bg_post;

static void *bg_post_main(void *arg)
{
    bg_post *b = arg;
    double t;
    nd_resp r = post_with_timeout(b->path, "application/json",
                                  "{\"shape\":[1,2],\"data\":[1,2]}", NULL, &t);
    b->code = r.code;
    nd_resp_free(&r);
    return NULL;
}

/* With every batcher thread busy, a queued request's deadline is noticed when one frees up: the
 * 504 comes then, and the request never runs. */
Test(deadline, with_every_executor_busy_the_504_comes_when_one_frees, .init = start_busy)
{
    bg_post bg[2] = {{.path = "/v1/rmsnorm"}, {.path = "/v1/layernorm"}};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&bg[i].thread, NULL, bg_post_main, &bg[i]), 0);
    sleep_s(0.1);
    double t;
    nd_resp r = post_with_timeout("/v1/softmax", "application/json",
                                  "{\"shape\":[1,2],\"data\":[0,0]}", "X-Normd-Timeout-Ms: 100",
                                  &t);
    cr_assert_eq(r.code, 504, "HTTP %ld: %s", r.code, r.body);
    cr_assert(t < 1.0, "504 after %.3f s", t);
    nd_resp_free(&r);
    for (int i = 0; i < 2; i++) {
        pthread_join(bg[i].thread, NULL);
        cr_assert_eq(bg[i].code, 200);
    }
    cr_assert_eq(metric("normd_batches_total", "op=\"softmax\""), 0, "the expired request ran");
}
