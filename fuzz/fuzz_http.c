/*
 * fuzz_http.c - libFuzzer entry point for normd's own request handling, not only its payload
 * parsers: request lines, headers, query strings, bodies, chunked and compressed framing,
 * pipelined requests, through libmicrohttpd, the listener (http.c), both route sets, the batcher
 * and the null engine (y = x).
 *
 * The server is started once, in-process, on 127.0.0.1:0 with a small body limit and byte
 * budget. Each input is written raw to a new TCP connection, whose write side is then shut; the
 * answers are read until the daemon closes the connection, and the next input waits until the
 * daemon has let go of it (no connection open), so that what one input leaves behind is seen by
 * the leak check. The daemon must close within HANG_S: a connection it keeps past that is a hang
 * and aborts, as does a byte charge or job still counted once the connection is gone. The admin
 * token is "fuzz" (the dictionary, fuzz/fuzz_http.dict, has it and the rest of the vocabulary),
 * and a small --max-delay-us lets deadlines expire in the queue.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../server/http_conn.h"

#define HANG_S 10.0

static nd_server *srv;
static unsigned port;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    signal(SIGPIPE, SIG_IGN);
    nd_config cfg;
    nd_config_defaults(&cfg);
    snprintf(cfg.listen_host, sizeof cfg.listen_host, "127.0.0.1");
    cfg.listen_port = 0;
    cfg.backend = ND_BACKEND_NULL;
    cfg.threads = 2;
    cfg.max_body_bytes = 1 << 20;
    cfg.max_inflight_bytes = 16 << 20;
    cfg.max_delay_us = 1000;
    cfg.queue_limit = 64;
    cfg.max_param_sets = 8;
    cfg.max_param_bytes = 1 << 16;
    snprintf(cfg.admin_token, sizeof cfg.admin_token, "fuzz");
    cfg.verbose = 0;
    nd_error err = {{0}};
    srv = nd_server_start(&cfg, &err);
    if (!srv) {
        fprintf(stderr, "fuzz_http: cannot start the server: %s\n", err.msg);
        abort();
    }
    port = nd_server_port(srv);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        abort();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        fprintf(stderr, "fuzz_http: connect: %s\n", strerror(errno));
        abort();
    }
    const double t_end = now_s() + HANG_S;
    size_t sent = 0;
    if (size == 0)
        shutdown(fd, SHUT_WR);
    int eof = 0;
    char buf[65536];
    /* Write and read together: the daemon may answer (and stop reading) before all is sent. */
    while (!eof) {
        struct pollfd p = {fd, POLLIN | (sent < size ? POLLOUT : 0), 0};
        int ms = (int)((t_end - now_s()) * 1e3);
        if (ms <= 0) {
            fprintf(stderr, "fuzz_http: the daemon kept the connection open %.0f s after the "
                            "input (%zu of %zu bytes taken)\n", HANG_S, sent, size);
            abort();
        }
        if (poll(&p, 1, ms) < 0 && errno != EINTR)
            abort();
        if (p.revents & POLLOUT) {
            ssize_t k = send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0)
                sent += (size_t)k;
            else if (k < 0 && errno != EAGAIN && errno != EINTR)
                sent = size; /* the daemon closed; what is left is not taken */
            if (sent == size)
                shutdown(fd, SHUT_WR);
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                eof = 1;
        }
    }
    close(fd);
    /* Until the daemon has let go of the connection (its requests completed, freed). */
    while (atomic_load(&srv->connections) > 0 || atomic_load(&srv->requests_open) > 0) {
        if (now_s() > t_end) {
            fprintf(stderr, "fuzz_http: the daemon still holds %d connections, %d requests\n",
                    atomic_load(&srv->connections), atomic_load(&srv->requests_open));
            abort();
        }
        usleep(100);
    }
    /* Everything a request charged and held is given back. */
    if (atomic_load(&srv->inflight_bytes) != 0 || atomic_load(&srv->jobs_open) != 0) {
        fprintf(stderr, "fuzz_http: idle, yet %lld bytes charged and %d jobs open\n",
                (long long)atomic_load(&srv->inflight_bytes), atomic_load(&srv->jobs_open));
        abort();
    }
    return 0;
}
