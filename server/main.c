/*
 * main.c - normd: load the configuration, start the server, wait for SIGINT/SIGTERM, stop
 * gracefully (everything accepted is answered), exit 0. Exits non-zero when the engine reports a
 * lost device context, so that a supervisor restarts the daemon.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "config.h"
#include "http.h"

int main(int argc, char **argv)
{
    nd_config cfg;
    nd_error err = {{0}};
    nd_config_defaults(&cfg);
    int rc = nd_config_load(&cfg, argc, argv, &err);
    if (rc == 1)
        return 0;
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

    nd_server *srv = nd_server_start(&cfg, &err);
    if (!srv) {
        fprintf(stderr, "normd: %s\n", err.msg);
        return 1;
    }
    if (cfg.listen_host[0])
        printf("normd: listening on http://%s:%u (backend %s)\n", cfg.listen_host,
               nd_server_port(srv), nd_server_backend(srv));
    if (cfg.unix_path[0])
        printf("normd: listening on unix:%s (backend %s)\n", cfg.unix_path,
               nd_server_backend(srv));
    fflush(stdout);

    int broken = 0;
    for (;;) {
        struct timespec tick = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&stop, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            if (cfg.verbose)
                fprintf(stderr, "normd: %s: answering what was accepted, then exiting\n",
                        sig == SIGINT ? "SIGINT" : "SIGTERM");
            break;
        }
        if (nd_server_broken(srv)) {
            fprintf(stderr, "normd: the device context is lost; exiting for a restart\n");
            broken = 1;
            break;
        }
    }
    nd_server_stop(srv, 30.0);
    return broken ? 3 : 0;
}
