/*
 * config.h - the daemon's settings: defaults, then NORMD_* environment variables, then flags.
 */
#ifndef ND_CONFIG_H
#define ND_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "../kernels/nd_ops.h"

#define ND_MAX_DEVICES 16

typedef enum nd_backend_kind {
    ND_BACKEND_AUTO = 0,
    ND_BACKEND_CPU,
    ND_BACKEND_CUDA,
    ND_BACKEND_NULL, /* echo: y = x, no compute; measures the HTTP ceiling */
} nd_backend_kind;

typedef struct nd_config {
    char listen_host[256];     /* "" when TCP is off (only --unix) */
    unsigned listen_port;
    int listen_given;          /* --listen or NORMD_LISTEN was set: sockets passed by systemd
                                  are served beside it instead of replacing it */
    char unix_path[108];       /* "" when no UNIX socket */
    nd_backend_kind backend;
    int threads;               /* HTTP threads; CPU backend workers use every core */
    int cpu_threads;           /* CPU backend worker threads, 0 = one per core */
    int64_t max_batch_rows;
    int64_t max_delay_us;
    size_t max_body_bytes;
    int queue_limit;           /* requests queued (not yet running) before answering 503 */
    size_t max_inflight_bytes; /* bytes charged by requests in flight before answering 503 */
    int drain_seconds;         /* on SIGTERM: the longest wait for accepted requests' answers */
    int streams;               /* CUDA streams per device (batches in flight per device) */
    int devices[ND_MAX_DEVICES];
    int ndevices;              /* 0 = every visible device */
    int cuda_spin_us;          /* poll a batch's stream this long before blocking on it */
    size_t cuda_zero_copy_bytes; /* batches up to this size run on mapped host memory, no copies */
    size_t cuda_direct_output_bytes; /* outputs up to this size are written by the kernel into
                                      * mapped host memory, with no copy back */
    size_t cuda_shm_dma_bytes; /* tensors in shared memory of at least this size are copied by
                                * the device from and to their region, not through staging */
    int fault_every;           /* testing: fail every Nth batch with a backend error (0 = never) */
    int slow_batch_us;         /* testing: every batch's run takes this much longer (0 = not) */
    char admin_token[256];     /* bearer token the admin routes require; "" = none configured */
    int allow_open_admin;      /* listen beyond loopback with no admin token, knowingly */
    int allow_client_shm;      /* serve the system shared memory extension */
    int max_shm_regions;       /* registered shared memory regions at most */
    int max_param_sets;        /* registered parameter sets at most */
    size_t max_param_bytes;    /* bytes of all registered parameter sets together at most */
    int verbose;
} nd_config;

void nd_config_defaults(nd_config *cfg);

/*
 * Apply NORMD_* environment variables, then argv. Returns 0, 1 when --help was asked (usage
 * already printed to stdout), 2 when --version was asked, or -1 with a message in err.
 */
int nd_config_load(nd_config *cfg, int argc, char **argv, nd_error *err);

void nd_config_usage(FILE *out);

const char *nd_backend_name(nd_backend_kind kind);

#endif /* ND_CONFIG_H */
