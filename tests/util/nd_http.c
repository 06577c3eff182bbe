/*
 * nd_http.c - see nd_http.h.
 */
#include "nd_http.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Daemon logs: a file per test, printed when the test fails
 * ------------------------------------------------------------------------------------------- */

/* The test program's file name, the same in Criterion's runner and in its workers (which run
 * under another argv[0]). */
static const char *test_program(void)
{
    static char name[256];
    if (!name[0]) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        const char *base = strrchr(exe, '/');
        snprintf(name, sizeof name, "%.200s", n > 0 ? (base ? base + 1 : exe) : "test");
    }
    return name;
}

/* The log of a test's daemons: $ND_TEST_LOGS/<program>/<suite>.<test>.log. 0 when ND_TEST_LOGS is
 * not set (the daemons then write to this process's stderr) or the path does not fit. */
static int test_log_path(const char *suite, const char *test, char *path, size_t size)
{
    const char *dir = getenv("ND_TEST_LOGS");
    if (!dir || !*dir)
        return 0;
    int n = snprintf(path, size, "%s/%s/%s.%s.log", dir, test_program(), suite, test);
    return n > 0 && (size_t)n < size;
}

/* The current test's log, opened for the daemon's stderr: emptied by the first daemon a test
 * starts (each test runs in a process of its own), appended to by the others, each introduced by
 * its command line. -1 when there is none (see test_log_path) or it cannot be opened. */
static int test_log_open(const char *const *argv)
{
    static int started; /* daemons started by this test */
    char path[PATH_MAX], dir[PATH_MAX];
    if (!criterion_current_test ||
        !test_log_path(criterion_current_test->category, criterion_current_test->name, path,
                       sizeof path))
        return -1;
    snprintf(dir, sizeof dir, "%s/%s", getenv("ND_TEST_LOGS"), test_program());
    mkdir(getenv("ND_TEST_LOGS"), 0755);
    mkdir(dir, 0755);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (started++ ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    dprintf(fd, "==");
    for (int i = 0; argv[i]; i++)
        dprintf(fd, " %s", argv[i]);
    dprintf(fd, "\n");
    return fd;
}

/* After each test (and its fini, which stops its daemon): a failed test's daemon log is printed.
 * This runs in Criterion's runner, which reports the test's result. */
ReportHook(POST_FINI)(struct criterion_test_stats *stats)
{
    char path[PATH_MAX];
    if (stats->test_status != CR_STATUS_FAILED && !stats->crashed && !stats->timed_out)
        return;
    if (!test_log_path(stats->test->category, stats->test->name, path, sizeof path))
        return;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "---- %s: the daemon's log ----\n", path);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "---- end of %s ----\n", path);
    fclose(f);
}

/* ---------------------------------------------------------------------------------------------
 * The daemon
 * ------------------------------------------------------------------------------------------- */

int nd_daemon_start(nd_daemon *d, const char *const *extra)
{
    const char *bin = getenv("NORMD_BIN") ? getenv("NORMD_BIN") : "build/normd";
    const char *backend = getenv("NORMD_BACKEND") ? getenv("NORMD_BACKEND") : "cpu";
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    const char *argv[64] = {bin, "--listen", "127.0.0.1:0", "--backend", backend};
    int argc = 5;
    for (int i = 0; extra && extra[i] && argc < 62; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    memset(d, 0, sizeof *d);
    int log = test_log_open(argv);
    d->pid = fork();
    if (d->pid < 0) {
        if (log >= 0)
            close(log);
        return -1;
    }
    if (d->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        if (log >= 0)
            dup2(log, STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    if (log >= 0)
        close(log);
    char line[256];
    size_t n = 0;
    /* read the first line, 20 s at most */
    while (n < sizeof line - 1) {
        struct pollfd p = {fds[0], POLLIN, 0};
        if (poll(&p, 1, 20000) <= 0)
            break;
        ssize_t r = read(fds[0], line + n, 1);
        if (r <= 0 || line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    close(fds[0]);
    const char *p = strstr(line, "http://127.0.0.1:");
    if (!p || sscanf(p + 17, "%u", &d->port) != 1) {
        fprintf(stderr, "normd did not start (first line: \"%s\")\n", line);
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        return -1;
    }
    snprintf(d->base, sizeof d->base, "http://127.0.0.1:%u", d->port);
    return 0;
}

int nd_daemon_stop(nd_daemon *d, double timeout_s)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int status = 0;
    struct timespec step = {0, 10 * 1000 * 1000};
    for (double t = 0; t < timeout_s; t += 0.01) {
        pid_t r = waitpid(d->pid, &status, WNOHANG);
        if (r == d->pid) {
            d->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        }
        nanosleep(&step, NULL);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -1;
}

size_t nd_resp_body_cb(char *p, size_t size, size_t n, void *arg)
{
    nd_resp *r = arg;
    size_t add = size * n;
    char *q = realloc(r->body, r->len + add + 1);
    if (!q)
        return 0;
    memcpy(q + r->len, p, add);
    r->body = q;
    r->len += add;
    r->body[r->len] = '\0';
    return add;
}

static void copy_header(char *dst, size_t size, const char *value, size_t len)
{
    while (len && (value[len - 1] == '\r' || value[len - 1] == '\n'))
        len--;
    if (len >= size)
        len = size - 1;
    memcpy(dst, value, len);
    dst[len] = '\0';
}

size_t nd_resp_header_cb(char *p, size_t size, size_t n, void *arg)
{
    nd_resp *r = arg;
    size_t len = size * n;
    static const struct {
        const char *name;
        size_t off, size;
    } wanted[] = {
        {"content-type:", offsetof(nd_resp, content_type), sizeof ((nd_resp *)0)->content_type},
        {"x-normd-shape:", offsetof(nd_resp, shape), sizeof ((nd_resp *)0)->shape},
        {"x-normd-dtype:", offsetof(nd_resp, dtype), sizeof ((nd_resp *)0)->dtype},
        {"x-normd-outputs:", offsetof(nd_resp, outputs), sizeof ((nd_resp *)0)->outputs},
        {"retry-after:", offsetof(nd_resp, retry_after), sizeof ((nd_resp *)0)->retry_after},
        {"allow:", offsetof(nd_resp, allow), sizeof ((nd_resp *)0)->allow},
        {"inference-header-content-length:", offsetof(nd_resp, infer_header_len),
         sizeof ((nd_resp *)0)->infer_header_len},
        {"content-encoding:", offsetof(nd_resp, content_encoding),
         sizeof ((nd_resp *)0)->content_encoding},
        {"connection:", offsetof(nd_resp, connection), sizeof ((nd_resp *)0)->connection},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        size_t k = strlen(wanted[i].name);
        if (len > k && !strncasecmp(p, wanted[i].name, k)) {
            const char *v = p + k;
            while (*v == ' ')
                v++;
            copy_header((char *)r + wanted[i].off, wanted[i].size, v, len - (size_t)(v - p));
        }
    }
    return len;
}

int nd_http_do(const nd_http_req *q, nd_resp *r)
{
    memset(r, 0, sizeof *r);
    CURL *c = curl_easy_init();
    if (!c)
        return -1;
    struct curl_slist *h = NULL;
    char ct[160];
    if (q->content_type) {
        snprintf(ct, sizeof ct, "Content-Type: %s", q->content_type);
        h = curl_slist_append(h, ct);
    } else if (q->body)
        h = curl_slist_append(h, "Content-Type:"); /* send none at all */
    h = curl_slist_append(h, "Expect:");
    for (const char *const *p = q->headers; p && *p; p++)
        h = curl_slist_append(h, *p);
    curl_easy_setopt(c, CURLOPT_URL, q->url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, q->method);
    if (q->body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, q->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->len);
    }
    if (q->unix_path)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, q->unix_path);
    if (q->accept_encoding)
        curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, q->accept_encoding);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, nd_resp_body_cb);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, nd_resp_header_cb);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (!r->body) {
        r->body = calloc(1, 1);
        r->len = 0;
    }
    if (rc != CURLE_OK) {
        fprintf(stderr, "%s %s: %s\n", q->method, q->url, curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

int nd_http_unix(const char *unix_path, const char *method, const char *url,
                 const char *content_type, const void *body, size_t len, nd_resp *r)
{
    nd_http_req q = {.method = method, .url = url, .unix_path = unix_path,
                     .content_type = content_type, .body = body, .len = len};
    return nd_http_do(&q, r);
}

int nd_http(const char *method, const char *url, const char *content_type, const void *body,
            size_t len, nd_resp *r)
{
    return nd_http_unix(NULL, method, url, content_type, body, len, r);
}

void nd_resp_free(nd_resp *r)
{
    free(r->body);
    r->body = NULL;
}

double nd_metric_value(const char *text, const char *name, const char *labels)
{
    char key[256];
    if (labels && *labels)
        snprintf(key, sizeof key, "\n%s{%s} ", name, labels);
    else
        snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    if (!p && !strncmp(text, key + 1, strlen(key + 1)))
        p = text - 1;
    if (!p)
        return -1;
    return strtod(p + strlen(key), NULL);
}

double nd_metric(const char *base, const char *name, const char *labels)
{
    char url[256];
    snprintf(url, sizeof url, "%s/metrics", base);
    nd_resp r;
    cr_assert_eq(nd_http("GET", url, NULL, NULL, 0, &r), 0);
    cr_assert_eq(r.code, 200);
    double v = nd_metric_value(r.body, name, labels);
    nd_resp_free(&r);
    cr_assert_geq(v, 0, "/metrics has no %s{%s}", name, labels ? labels : "");
    return v;
}
