/*
 * main.c - normd: load the configuration, start the server, wait for SIGINT/SIGTERM, stop
 * gracefully (everything accepted is answered), exit 0. Exits non-zero when the engine reports a
 * lost device context, so that a supervisor restarts the daemon.
 */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bigbuf.h"
#include "config.h"
#include "http.h"
#include "version.h"

/*
 * Memory goes back to the system. glibc starts with an mmap threshold of 128 KiB but raises it
 * each time such a block is freed (up to 32 MiB), after which request bodies, answers and
 * staging come from its heap arenas, one per thread, which keep what they once held: 400
 * clients that sent a 1 MiB body and left grew the daemon by hundreds of MB for good, and each
 * thread's arena holds its own high-water mark, so the sum over threads passes what
 * --max-inflight-bytes admits. A fixed threshold (which also turns the raising off) mmaps every
 * block from 128 KiB up and unmaps it when freed: the RSS follows what requests hold
 * (it_hardening: 24 clients with 4 MiB bodies under a 64 MiB budget peaked 59-65 MiB over the
 * idle RSS in five runs, against 129-175 MiB with the raising threshold). The price, page
 * faults on every large buffer, is paid back for the request buffers (bodies, answers, host
 * staging) by their own bounded cache of mappings (bigbuf.h), emptied at idle below.
 */
#define MMAP_THRESHOLD (128 * 1024)

/*
 * Blocks under the threshold are kept while the daemon is busy. glibc gives the free top of an
 * arena back to the system once it passes the trim threshold, 128 KiB by default (and no longer
 * raised once the mmap threshold is fixed): a 64 KiB answer freed beside a free top crossed it, so
 * the next request's buffers came back as fresh pages, zeroed and faulted in one by one (null
 * backend, layernorm 8x4096 float16, one HTTP thread, wrk 16 connections: 5 page faults per /v1
 * request and 16 per v2 request, 7.0k and 5.0k req/s; with a 4 MiB trim threshold none, 9.8k and
 * 9.2-9.6k req/s, 2 cores). An arena keeps at most this much free at its top while busy; the idle
 * trim below gives it back.
 */
#define TRIM_THRESHOLD (4 * 1024 * 1024)

/* What blocks under the threshold leave free in the arenas goes back once the daemon is idle (no
 * request open for a whole tick), once per idle spell: malloc_trim returns free pages inside the
 * heaps too, not only at their tops. */
static void trim_when_idle(nd_server *srv, int *idle_ticks)
{
    if (!nd_server_idle(srv))
        *idle_ticks = 0;
    else if (*idle_ticks < 2 && ++*idle_ticks == 2) {
        nd_bigbuf_trim();
        malloc_trim(0);
    }
}

int main(int argc, char **argv)
{
    /* An operator's own choice (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=..., trim_threshold)
     * wins over these. */
    const char *tunables = getenv("GLIBC_TUNABLES");
    if (!tunables || !strstr(tunables, "glibc.malloc.mmap_threshold"))
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    if (!tunables || !strstr(tunables, "glibc.malloc.trim_threshold"))
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    nd_config cfg;
    nd_error err = {{0}};
    nd_config_defaults(&cfg);
    int rc = nd_config_load(&cfg, argc, argv, &err);
    if (rc == 1)
        return 0;
    if (rc == 2) {
        printf("normd %s\n", ND_VERSION_STRING);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "normd: %s\n", err.msg);
        return 2;
    }

    /* Block the stop signals in every thread; this one waits for them. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Load every CUDA kernel when the context is made, not on its first launch: a live request
     * must not pay for module loading (tens of ms). An explicit setting from the environment
     * wins. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);

    nd_server *srv = nd_server_start(&cfg, &err);
    if (!srv) {
        fprintf(stderr, "normd: %s\n", err.msg);
        return 1;
    }
    double startup_s = nd_server_startup_seconds(srv);
    int passed = nd_server_passed_sockets(srv);
    if (passed)
        printf("normd %s: listening on %d socket%s passed by systemd (backend %s, ready in "
               "%.2f s)\n", ND_VERSION_STRING, passed, passed > 1 ? "s" : "",
               nd_server_backend(srv), startup_s);
    if (cfg.listen_host[0] && (!passed || cfg.listen_given))
        printf("normd %s: listening on http://%s:%u (backend %s, ready in %.2f s)\n",
               ND_VERSION_STRING, cfg.listen_host, nd_server_port(srv), nd_server_backend(srv),
               startup_s);
    if (cfg.unix_path[0])
        printf("normd %s: listening on unix:%s (backend %s, ready in %.2f s)\n",
               ND_VERSION_STRING, cfg.unix_path, nd_server_backend(srv), startup_s);
    fflush(stdout);

    int broken = 0, idle_ticks = 2;
    for (;;) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&stop, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            if (cfg.verbose)
                fprintf(stderr, "normd: %s: answering what was accepted, then exiting\n",
                        sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
        trim_when_idle(srv, &idle_ticks);
        if (nd_server_broken(srv)) {
            fprintf(stderr, "normd: the device context is lost; exiting for a restart\n");
            broken = 1;
            break;
        }
    }
    nd_server_stop(srv, (double)cfg.drain_seconds);
    return broken ? 3 : 0;
}
