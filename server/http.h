/*
 * http.h - the daemon: libmicrohttpd in front of the batcher.
 *
 * Endpoints:
 *   POST   /v1/{op}             op in layernorm, rmsnorm, softmax, log_softmax, prelu;
 *                               JSON or raw binary (see README.md and proto/nd_proto.h)
 *   PUT    /v1/params/{name}    register a parameter set (JSON, or raw binary with the
 *                               metadata in the query string); GET one; DELETE one
 *   GET    /v1/params           list the registered sets
 *   GET    /healthz             liveness and the backend in use
 *   GET    /metrics             Prometheus text format
 */
#ifndef ND_HTTP_H
#define ND_HTTP_H

#include "config.h"
#include "engine.h"

typedef struct nd_server nd_server;

/* Builds the engine, batcher and listeners. NULL with a message in err on failure. */
nd_server *nd_server_start(const nd_config *cfg, nd_error *err);

/* The TCP port actually bound (useful with --listen HOST:0), 0 when TCP is off. */
unsigned nd_server_port(const nd_server *s);
/* How many listening sockets systemd passed (socket activation) are being served. */
int nd_server_passed_sockets(const nd_server *s);
const char *nd_server_backend(const nd_server *s);
/* Seconds from nd_server_start's call to now (its return, when asked right after). */
double nd_server_startup_seconds(const nd_server *s);
/* 1 when no request is open: none is being received, queued, run or answered. */
int nd_server_idle(const nd_server *s);
/* Nonzero once the engine reported that it cannot run anything any more. */
int nd_server_broken(const nd_server *s);

/*
 * Graceful stop: stop accepting connections, answer every request already accepted (queued or
 * running), then close everything. Waits at most grace_s for the answers to be sent.
 */
void nd_server_stop(nd_server *s, double grace_s);

#endif /* ND_HTTP_H */
