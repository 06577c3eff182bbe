/*
 * config.c - one table of options serves the flags, the NORMD_* environment variables and --help,
 * so the three cannot drift apart.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum opt_kind {
    OPT_LISTEN, OPT_UNIX, OPT_BACKEND, OPT_INT, OPT_I64, OPT_SIZE, OPT_DEVICES,
    OPT_BOOL,       /* a flag: --name alone (or --name=1|0) sets it; never takes the next argument */
    OPT_TOKEN_FILE, /* a file whose first line is the admin token */
} opt_kind;

typedef struct opt {
    const char *flag; /* without the leading "--" */
    const char *env;
    opt_kind kind;
    size_t offset;
    int64_t min, max; /* numeric bounds */
    const char *help;
} opt;

#define OFF(field) offsetof(nd_config, field)

static const opt options[] = {
    {"listen", "NORMD_LISTEN", OPT_LISTEN, 0, 0, 0,
     "HOST:PORT to listen on, or 'off' (default 127.0.0.1:8000; the default is not opened "
     "when systemd passes listening sockets)"},
    {"unix", "NORMD_UNIX", OPT_UNIX, 0, 0, 0, "also listen on this UNIX socket path"},
    {"backend", "NORMD_BACKEND", OPT_BACKEND, 0, 0, 0,
     "auto|cpu|cuda|null (default auto: cuda when a device is present)"},
    {"threads", "NORMD_THREADS", OPT_INT, OFF(threads), 1, 1024,
     "HTTP threads (default: half the usable cores, at least 2)"},
    {"cpu-threads", "NORMD_CPU_THREADS", OPT_INT, OFF(cpu_threads), 0, 1024,
     "CPU backend worker threads (default 0: one per core)"},
    {"max-batch-rows", "NORMD_MAX_BATCH_ROWS", OPT_I64, OFF(max_batch_rows), 1, INT64_C(1) << 40,
     "rows that launch a batch at once (default 65536)"},
    {"max-delay-us", "NORMD_MAX_DELAY_US", OPT_I64, OFF(max_delay_us), 0, 10000000,
     "longest a request waits for company before its batch runs (default 0: run as soon as "
     "an executor is free)"},
    {"max-body-bytes", "NORMD_MAX_BODY_BYTES", OPT_SIZE, OFF(max_body_bytes), 1,
     INT64_C(1) << 40, "largest request body accepted, else 413 (default 268435456)"},
    {"queue-limit", "NORMD_QUEUE_LIMIT", OPT_INT, OFF(queue_limit), 1, 1 << 24,
     "requests waiting for a batch before new ones get 503 (default 4096)"},
    {"max-inflight-bytes", "NORMD_MAX_INFLIGHT_BYTES", OPT_SIZE, OFF(max_inflight_bytes), 1,
     INT64_C(1) << 48,
     "byte budget of requests in flight (each is charged 4x its body until answered: body, "
     "staging in and out, answer); one that would pass it gets 503 before its body is read "
     "(default: half the memory of the machine or container)"},
    {"drain-seconds", "NORMD_DRAIN_SECONDS", OPT_INT, OFF(drain_seconds), 0, 3600,
     "on SIGTERM, how long to wait for accepted requests to be answered (default 30)"},
    {"streams", "NORMD_STREAMS", OPT_INT, OFF(streams), 1, 64,
     "CUDA streams (batches in flight) per device (default 4)"},
    {"devices", "NORMD_DEVICES", OPT_DEVICES, 0, 0, 0,
     "comma-separated CUDA device ordinals (default: all visible)"},
    {"cuda-spin-us", "NORMD_CUDA_SPIN_US", OPT_INT, OFF(cuda_spin_us), 0, 100000,
     "poll a CUDA batch this long before sleeping until it completes (default 50; 0 sleeps "
     "at once, saving CPU at the cost of latency)"},
    {"cuda-zero-copy-bytes", "NORMD_CUDA_ZERO_COPY_BYTES", OPT_SIZE, OFF(cuda_zero_copy_bytes),
     0, INT64_C(1) << 30,
     "CUDA batches of at most this many bytes (in + out) are computed straight from and into "
     "pinned host memory, without copies (default 196608: a lone request of up to ~96 KiB; "
     "0: always copy)"},
    {"cuda-direct-output-bytes", "NORMD_CUDA_DIRECT_OUTPUT_BYTES", OPT_SIZE,
     OFF(cuda_direct_output_bytes), 0, INT64_C(1) << 40,
     "CUDA batches with at most this many bytes of outputs have the kernel write them straight "
     "into pinned host memory instead of copying them back (default 16777216; 0: always copy)"},
    {"cuda-shm-dma-bytes", "NORMD_CUDA_SHM_DMA_BYTES", OPT_SIZE, OFF(cuda_shm_dma_bytes), 0,
     INT64_C(1) << 40,
     "tensors in shared memory regions (--allow-client-shm) of at least this many bytes, and "
     "those of a request that runs alone, go between their region and the GPU without passing "
     "through staging, when the region could be pinned (default 262144; 0: every such tensor)"},
    {"admin-token-file", "NORMD_ADMIN_TOKEN_FILE", OPT_TOKEN_FILE, 0, 0, 0,
     "file holding the bearer token that PUT and DELETE /v1/params/{name} and registering or "
     "unregistering shared memory require (Authorization: Bearer TOKEN); default: none, which "
     "is refused beyond loopback"},
    {"allow-open-admin", "NORMD_ALLOW_OPEN_ADMIN", OPT_BOOL, OFF(allow_open_admin), 0, 1,
     "listen beyond loopback although the admin routes take no token (default: refuse)"},
    {"allow-client-shm", "NORMD_ALLOW_CLIENT_SHM", OPT_BOOL, OFF(allow_client_shm), 0, 1,
     "serve KServe v2 system shared memory: clients on this host register POSIX shared memory "
     "regions and name them in inference requests instead of sending tensors (default: off, as "
     "in Triton; registering and unregistering take the admin token when one is set)"},
    {"max-shm-regions", "NORMD_MAX_SHM_REGIONS", OPT_INT, OFF(max_shm_regions), 1, 1 << 16,
     "registered shared memory regions at most, else 507 (default 64)"},
    {"max-param-sets", "NORMD_MAX_PARAM_SETS", OPT_INT, OFF(max_param_sets), 0, 1 << 20,
     "registered parameter sets at most, else 507 (default 1024)"},
    {"max-param-bytes", "NORMD_MAX_PARAM_BYTES", OPT_SIZE, OFF(max_param_bytes), 0,
     INT64_C(1) << 40, "bytes of all registered parameter sets together at most, else 507 "
     "(default 1073741824)"},
    {"fault-every", "NORMD_FAULT_EVERY", OPT_INT, OFF(fault_every), 0, INT_MAX,
     "testing only: fail every Nth batch with a backend error (default 0: never)"},
    {"slow-batch-us", "NORMD_SLOW_BATCH_US", OPT_INT, OFF(slow_batch_us), 0, 60000000,
     "testing only: every batch's run takes this much longer, as on a slow device (default 0)"},
    {"verbose", "NORMD_VERBOSE", OPT_INT, OFF(verbose), 0, 3, "log level 0-3 (default 1)"},
};

/*
 * Half the cores this process may run on (its affinity mask, which follows a container's cpuset),
 * at least 2. On a 16-core H200 host, 8 HTTP threads instead of 4 raised the requests/s at 64-256
 * connections by 1.1-1.5x with batching on and 1.1-1.7x on the null backend (two runs:
 * bench/results/service_t8.csv against service.csv); the other half of the cores is left to the
 * clients, the batcher threads and the CPU backend.
 */
static int default_http_threads(void)
{
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (cores <= 0)
        cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return cores / 2 > 2 ? cores / 2 : 2;
}

/* Half the memory this process may use: the smaller of the machine's memory and a cgroup (v2 or
 * v1) limit, e.g. a container's. */
static size_t default_inflight_bytes(void)
{
    uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    const char *limits[] = {"/sys/fs/cgroup/memory.max",
                            "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        FILE *f = fopen(limits[i], "r");
        unsigned long long v;
        if (!f)
            continue;
        if (fscanf(f, "%llu", &v) == 1 && v > 0 && v < mem)
            mem = v;
        fclose(f);
    }
    if (mem < ((uint64_t)64 << 20))
        mem = (uint64_t)64 << 20;
    return (size_t)(mem / 2);
}

void nd_config_defaults(nd_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->listen_host, "127.0.0.1");
    cfg->listen_port = 8000;
    cfg->backend = ND_BACKEND_AUTO;
    cfg->threads = default_http_threads();
    cfg->max_batch_rows = 65536;
    cfg->max_delay_us = 0;
    cfg->max_body_bytes = (size_t)256 << 20;
    cfg->queue_limit = 4096;
    cfg->max_inflight_bytes = default_inflight_bytes();
    cfg->drain_seconds = 30;
    cfg->streams = 4;
    /* A small batch usually completes within tens of microseconds, before a thread sleeping in
     * the driver would be woken. On an H200 host (layernorm float16 8x4096, /v1 and v2 on one
     * daemon, bench/service/v2_vs_v1.sh) polling 50 us first raised 16 connections from 41k to
     * 58k req/s (p99 1.35 -> 0.61 ms) and 64 from 66k to 79k, and one connection's p50 from 168
     * to 141 us. The poll is bounded per batch, so the CPU it costs is too. */
    cfg->cuda_spin_us = 50;
    /* A batch this small (a lone request of up to ~96 KiB each way) is read and written by the
     * kernel over the bus instead of being copied in and out: two DMA submissions and their
     * completions fewer. H200, layernorm float16 8x4096 (64 KiB each way, so 144 KiB with the
     * output), one connection, fresh daemon per run, three rounds of (copies, zero copy, null):
     * p50 137/152/144 -> 128/129/142 us against null's 104/103/108. Batches of two such
     * requests (288 KiB) still copy: at 1 MiB, 16 connections lost 16% of their req/s. */
    cfg->cuda_zero_copy_bytes = (size_t)192 << 10;
    cfg->cuda_direct_output_bytes = (size_t)16 << 20;
    /* One H100, layernorm float16 in shared memory (bench/results/shm_dma_h100.txt): 512 KiB
     * tensors by the copy engines served 1.35x the requests of the host copying them; 64 KiB
     * ones 1.28x at 16 connections but 0.98x at 64 and 0.75x at 256 (a copy submission per
     * piece, and no zero-copy path). */
    cfg->cuda_shm_dma_bytes = (size_t)256 << 10;
    cfg->max_param_sets = 1024;
    cfg->max_shm_regions = 64;
    cfg->max_param_bytes = (size_t)1 << 30;
    cfg->verbose = 1;
}

const char *nd_backend_name(nd_backend_kind kind)
{
    switch (kind) {
    case ND_BACKEND_CPU:
        return "cpu";
    case ND_BACKEND_CUDA:
        return "cuda";
    case ND_BACKEND_NULL:
        return "null";
    default:
        return "auto";
    }
}

static int parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static int set_listen(nd_config *cfg, const char *v, nd_error *err)
{
    cfg->listen_given = 1;
    if (strcmp(v, "off") == 0) {
        cfg->listen_host[0] = '\0';
        return 0;
    }
    const char *colon = strrchr(v, ':');
    int64_t port;
    if (!colon || colon == v || parse_i64(colon + 1, 0, 65535, &port) < 0) {
        nd_error_set(err, ND_EINVAL, "listen: \"%s\" is not HOST:PORT (port 0-65535)", v);
        return -1;
    }
    size_t hlen = (size_t)(colon - v);
    if (v[0] == '[' && hlen >= 2 && v[hlen - 1] == ']') { /* [::1]:8000 */
        v++;
        hlen -= 2;
    }
    if (hlen >= sizeof cfg->listen_host) {
        nd_error_set(err, ND_EINVAL, "listen: host name too long");
        return -1;
    }
    memcpy(cfg->listen_host, v, hlen);
    cfg->listen_host[hlen] = '\0';
    cfg->listen_port = (unsigned)port;
    return 0;
}

/* Reads the admin token: the file's first line, surrounding whitespace dropped. */
static int set_token_file(nd_config *cfg, const char *path, nd_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        nd_error_set(err, ND_EINVAL, "admin-token-file: %s: %s", path, strerror(errno));
        return -1;
    }
    char line[sizeof cfg->admin_token + 2] = "";
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    size_t n = strcspn(p, "\r\n");
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (!ok || n == 0 || n >= sizeof cfg->admin_token) {
        nd_error_set(err, ND_EINVAL, "admin-token-file: %s must hold one token of 1-%zu "
                                     "characters on its first line", path,
                     sizeof cfg->admin_token - 1);
        return -1;
    }
    memcpy(cfg->admin_token, p, n);
    cfg->admin_token[n] = '\0';
    return 0;
}

/* 1 when host names only this machine: localhost, 127.0.0.0/8 or ::1. */
static int host_is_loopback(const char *host)
{
    return !strcasecmp(host, "localhost") || !strncmp(host, "127.", 4) || !strcmp(host, "::1");
}

static int set_option(nd_config *cfg, const opt *o, const char *v, nd_error *err)
{
    int64_t n;
    switch (o->kind) {
    case OPT_TOKEN_FILE:
        return set_token_file(cfg, v, err);
    case OPT_BOOL:
        if (!v || !strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"))
            *(int *)((char *)cfg + o->offset) = 1;
        else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no"))
            *(int *)((char *)cfg + o->offset) = 0;
        else {
            nd_error_set(err, ND_EINVAL, "%s: \"%s\" is not 1 or 0", o->flag, v);
            return -1;
        }
        return 0;
    case OPT_LISTEN:
        return set_listen(cfg, v, err);
    case OPT_UNIX:
        if (strlen(v) >= sizeof cfg->unix_path) {
            nd_error_set(err, ND_EINVAL, "unix: path longer than %zu bytes",
                         sizeof cfg->unix_path - 1);
            return -1;
        }
        strcpy(cfg->unix_path, v);
        return 0;
    case OPT_BACKEND:
        if (!strcasecmp(v, "auto"))
            cfg->backend = ND_BACKEND_AUTO;
        else if (!strcasecmp(v, "cpu"))
            cfg->backend = ND_BACKEND_CPU;
        else if (!strcasecmp(v, "cuda"))
            cfg->backend = ND_BACKEND_CUDA;
        else if (!strcasecmp(v, "null"))
            cfg->backend = ND_BACKEND_NULL;
        else {
            nd_error_set(err, ND_EINVAL, "backend: \"%s\" is not auto, cpu, cuda or null", v);
            return -1;
        }
        return 0;
    case OPT_DEVICES: {
        cfg->ndevices = 0;
        const char *p = v;
        while (*p) {
            char *end;
            errno = 0;
            long d = strtol(p, &end, 10);
            if (errno || end == p || d < 0 || d > 1023 || (*end && *end != ',') ||
                cfg->ndevices == ND_MAX_DEVICES) {
                nd_error_set(err, ND_EINVAL,
                             "devices: \"%s\" is not a list of at most %d device ordinals", v,
                             ND_MAX_DEVICES);
                return -1;
            }
            cfg->devices[cfg->ndevices++] = (int)d;
            p = *end ? end + 1 : end;
        }
        return 0;
    }
    case OPT_INT:
    case OPT_I64:
    case OPT_SIZE:
        if (parse_i64(v, o->min, o->max, &n) < 0) {
            nd_error_set(err, ND_EINVAL, "%s: \"%s\" is not an integer in [%lld, %lld]", o->flag,
                         v, (long long)o->min, (long long)o->max);
            return -1;
        }
        if (o->kind == OPT_INT)
            *(int *)((char *)cfg + o->offset) = (int)n;
        else if (o->kind == OPT_I64)
            *(int64_t *)((char *)cfg + o->offset) = n;
        else
            *(size_t *)((char *)cfg + o->offset) = (size_t)n;
        return 0;
    }
    return -1;
}

void nd_config_usage(FILE *out)
{
    fprintf(out, "usage: normd [options]\n\nEvery option can also be set with its environment "
                 "variable; flags win.\n\n");
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        fprintf(out, "  --%-16s %-22s %s\n", options[i].flag, options[i].env, options[i].help);
    fprintf(out, "  --%-16s %-22s %s\n", "version", "", "print the version and exit");
    fprintf(out, "  --%-16s %-22s %s\n", "help", "", "print this and exit");
}

int nd_config_load(nd_config *cfg, int argc, char **argv, nd_error *err)
{
    const size_t nopt = sizeof options / sizeof options[0];
    for (size_t i = 0; i < nopt; i++) {
        const char *v = getenv(options[i].env);
        if (v && *v && set_option(cfg, &options[i], v, err) < 0) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
            nd_error_set(err, ND_EINVAL, "%s: %s", options[i].env, msg);
            return -1;
        }
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            nd_config_usage(stdout);
            return 1;
        }
        if (!strcmp(arg, "--version"))
            return 2;
        if (strncmp(arg, "--", 2) != 0) {
            nd_error_set(err, ND_EINVAL, "unexpected argument \"%s\" (see --help)", arg);
            return -1;
        }
        const char *name = arg + 2, *value = strchr(name, '=');
        size_t nlen = value ? (size_t)(value - name) : strlen(name);
        const opt *o = NULL;
        for (size_t i = 0; i < nopt; i++)
            if (strlen(options[i].flag) == nlen && !strncmp(options[i].flag, name, nlen))
                o = &options[i];
        if (!o) {
            nd_error_set(err, ND_EINVAL, "unknown option \"%.*s\" (see --help)", (int)(nlen + 2),
                         arg);
            return -1;
        }
        if (value)
            value++;
        else if (o->kind == OPT_BOOL)
            value = NULL;
        else if (a + 1 < argc)
            value = argv[++a];
        else {
            nd_error_set(err, ND_EINVAL, "option --%s needs a value", o->flag);
            return -1;
        }
        if (set_option(cfg, o, value, err) < 0)
            return -1;
    }
    if (!cfg->listen_host[0] && !cfg->unix_path[0]) {
        nd_error_set(err, ND_EINVAL, "nothing to listen on: --listen off needs --unix PATH");
        return -1;
    }
    /* The parameter registry can be changed over HTTP; beyond loopback that takes a token, or
     * an explicit word that the network in front is trusted. */
    if (cfg->listen_host[0] && !host_is_loopback(cfg->listen_host) && !cfg->admin_token[0] &&
        !cfg->allow_open_admin) {
        nd_error_set(err, ND_EINVAL,
                     "listen: %s is beyond loopback and PUT/DELETE /v1/params would be open to "
                     "anyone who can connect; set --admin-token-file FILE, or --allow-open-admin "
                     "when the network in front is trusted", cfg->listen_host);
        return -1;
    }
    return 0;
}
