/*
 * engine.c - the host engines (cpu, null) and the choice between engines.
 *
 * Both keep per-slot staging in ordinary heap memory: the batcher packs x there and the CPU
 * backend computes straight from it. Two slots let one batch be packed or scattered while the
 * other computes; the CPU backend itself spreads one batch over every core.
 *
 * A slot keeps up to HOST_STAGING_KEEP per buffer between batches; a larger batch gets buffers of
 * its own size, given back when it is done with them (staging_release). Otherwise a burst of
 * large batches (or of clients that then went away) leaves the daemon holding two slots' worth
 * of the largest batch ever seen, in and out, for good, outside --max-inflight-bytes. Blocks that
 * large come from the request buffer cache (bigbuf.h): given back to it after the batch, they
 * serve the next large batch without page faults while the daemon is busy, and go back to the
 * system when it is idle. (Freed at once, as before, each large batch paid a page fault per
 * 4 KiB of its staging: on an H200 host the null backend answered 2.3-3.1k req/s of 64x4096
 * float16 layernorms at 64-256 connections, against 21k for the cuda backend, whose staging is
 * kept.)
 */
#include "engine.h"

#include "bigbuf.h"
#include "params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST_SLOTS 2
#define HOST_STAGING_KEEP ((size_t)8 << 20) /* per buffer (in, out) and slot */

typedef struct host_engine {
    nd_engine base;
    struct {
        void *in, *out;
        size_t in_cap, out_cap;
    } slot[HOST_SLOTS];
} host_engine;

/* Staging up to HOST_STAGING_KEEP is the slot's own; beyond it, a request buffer (64-byte
 * aligned: its size is far above BIGBUF_MIN). */
static void staging_free(void *p, size_t cap)
{
    if (cap > HOST_STAGING_KEEP)
        nd_bigbuf_free(p);
    else
        free(p);
}

static nd_status grow(void **p, size_t *cap, size_t want, nd_error *err)
{
    if (want <= *cap)
        return ND_OK;
    size_t n = want + want / 4; /* some headroom so a slowly growing batch does not realloc */
    n = (n + 63) & ~(size_t)63;
    void *q = n > HOST_STAGING_KEEP ? nd_bigbuf_alloc(n) : aligned_alloc(64, n);
    if (!q)
        return nd_error_set(err, ND_ENOMEM, "cannot allocate %zu bytes of staging", n);
    staging_free(*p, *cap);
    *p = q;
    *cap = n;
    return ND_OK;
}

static nd_status host_staging(nd_engine *e, int slot, size_t in_bytes, size_t out_bytes,
                              void **in, void **out, nd_error *err)
{
    host_engine *h = (host_engine *)e;
    nd_status st = grow(&h->slot[slot].in, &h->slot[slot].in_cap, in_bytes, err);
    if (st == ND_OK)
        st = grow(&h->slot[slot].out, &h->slot[slot].out_cap, out_bytes, err);
    *in = h->slot[slot].in;
    *out = h->slot[slot].out;
    return st;
}

static void host_staging_release(nd_engine *e, int slot)
{
    host_engine *h = (host_engine *)e;
    if (h->slot[slot].in_cap > HOST_STAGING_KEEP) {
        staging_free(h->slot[slot].in, h->slot[slot].in_cap);
        h->slot[slot].in = NULL;
        h->slot[slot].in_cap = 0;
    }
    if (h->slot[slot].out_cap > HOST_STAGING_KEEP) {
        staging_free(h->slot[slot].out, h->slot[slot].out_cap);
        h->slot[slot].out = NULL;
        h->slot[slot].out_cap = 0;
    }
}

nd_status nd_batch_call(const nd_batch *b, const nd_batch_ptrs *p, nd_backend_api api,
                        void *stream, nd_error *err)
{
    const int cuda = api == ND_API_CUDA;
    switch (b->op) {
    case ND_OP_LAYERNORM:
    case ND_OP_RMSNORM: {
        nd_norm_args a = {b->dtype, b->outer, b->mid, p->x,   p->y,
                          p->gamma, p->beta,  b->eps, p->mean, p->rstd};
        if (b->op == ND_OP_LAYERNORM)
            return cuda ? nd_cuda_layernorm(&a, stream, err) : nd_cpu_layernorm(&a, err);
        a.beta = NULL;
        a.mean = NULL;
        return cuda ? nd_cuda_rmsnorm(&a, stream, err) : nd_cpu_rmsnorm(&a, err);
    }
    case ND_OP_SOFTMAX:
    case ND_OP_LOG_SOFTMAX: {
        nd_softmax_args a = {b->dtype, b->outer, b->mid, b->inner, p->x, p->y};
        int log = b->op == ND_OP_LOG_SOFTMAX;
        return cuda ? nd_cuda_softmax(&a, log, stream, err) : nd_cpu_softmax(&a, log, err);
    }
    case ND_OP_PRELU: {
        nd_prelu_args a = {b->dtype, b->outer, b->mid,    b->inner,
                           p->x,     p->y,     p->alpha, b->alpha_count};
        return cuda ? nd_cuda_prelu(&a, stream, err) : nd_cpu_prelu(&a, err);
    }
    default:
        return nd_error_set(err, ND_EINVAL, "unknown op %d", (int)b->op);
    }
}

/* Inline parameters win; else the registered set's host copy of tensor k. */
static const void *host_param(const void *inline_p, const nd_param_set *ps, int k)
{
    return inline_p ? inline_p : ps ? ps->host[k] : NULL;
}

static nd_status cpu_run(nd_engine *e, int slot, nd_batch *b, nd_error *err)
{
    const int ln = b->op == ND_OP_LAYERNORM;
    nd_batch_ptrs p = {
        .x = b->x,
        .y = b->y,
        .mean = b->mean,
        .rstd = b->rstd,
        .gamma = host_param(b->gamma, b->pset, ln ? ND_PARAM_GAMMA : ND_PARAM_WEIGHT),
        .beta = host_param(b->beta, b->pset, ND_PARAM_BETA),
        .alpha = host_param(b->alpha, b->pset, ND_PARAM_ALPHA),
    };
    return nd_batch_call(b, &p, ND_API_CPU, NULL, err);
}

static nd_status null_run(nd_engine *e, int slot, nd_batch *b, nd_error *err)
{
    size_t n = (size_t)b->outer * (size_t)b->mid * (size_t)b->inner * nd_dtype_size(b->dtype);
    memcpy(b->y, b->x, n);
    if (b->mean)
        memset(b->mean, 0, (size_t)b->outer * sizeof(float));
    if (b->rstd)
        memset(b->rstd, 0, (size_t)b->outer * sizeof(float));
    return ND_OK;
}

static void host_destroy(nd_engine *e)
{
    host_engine *h = (host_engine *)e;
    for (int s = 0; s < HOST_SLOTS; s++) {
        staging_free(h->slot[s].in, h->slot[s].in_cap);
        staging_free(h->slot[s].out, h->slot[s].out_cap);
    }
    free(h);
}

static const nd_engine_vt cpu_vt = {.name = "cpu",
                                    .staging = host_staging,
                                    .run = cpu_run,
                                    .staging_release = host_staging_release,
                                    .destroy = host_destroy};
static const nd_engine_vt null_vt = {.name = "null",
                                     .staging = host_staging,
                                     .run = null_run,
                                     .staging_release = host_staging_release,
                                     .destroy = host_destroy};

static nd_engine *host_create(const nd_engine_vt *vt, nd_error *err)
{
    host_engine *h = calloc(1, sizeof *h);
    if (!h) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return NULL;
    }
    h->base.vt = vt;
    h->base.nslots = HOST_SLOTS;
    h->base.ndevices = 1;
    snprintf(h->base.device_label[0], sizeof h->base.device_label[0], "%s", vt->name);
    return &h->base;
}

nd_engine *nd_engine_cpu_create(const nd_config *cfg, nd_error *err)
{
    nd_cpu_set_threads(cfg->cpu_threads);
    return host_create(&cpu_vt, err);
}

nd_engine *nd_engine_null_create(const nd_config *cfg, nd_error *err)
{
    return host_create(&null_vt, err);
}

nd_engine *nd_engine_create(const nd_config *cfg, nd_error *err)
{
    switch (cfg->backend) {
    case ND_BACKEND_CPU:
        return nd_engine_cpu_create(cfg, err);
    case ND_BACKEND_NULL:
        return nd_engine_null_create(cfg, err);
    case ND_BACKEND_CUDA:
        return nd_engine_cuda_create(cfg, err);
    default:
        if (nd_cuda_device_count() > 0) {
            nd_engine *e = nd_engine_cuda_create(cfg, err);
            if (e)
                return e;
            fprintf(stderr, "normd: CUDA device present but unusable (%s); using the cpu "
                            "backend\n", err ? err->msg : "");
        }
        return nd_engine_cpu_create(cfg, err);
    }
}

void nd_engine_destroy(nd_engine *e)
{
    if (e)
        e->vt->destroy(e);
}
