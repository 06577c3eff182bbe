/*
 * batcher.c - groups of queued jobs by batch key; one thread per engine slot packs, runs and
 * scatters batches.
 *
 * There is no separate dispatcher: an idle slot thread is the dispatcher. That makes "launch when
 * an executor is free and rows are waiting" the natural policy, and it means a batch is formed at
 * the last moment, as large as the queue allows, exactly when something can run it.
 *
 * Idle slot threads wait on a stack, each on its own condition variable, and work wakes the one
 * that went idle last: at low load the same thread, warm in its core's caches with its stream and
 * staging, runs batch after batch, and more threads join only as the load needs them. One shared
 * condition variable woke them in turn instead, so each request of a lone client met a thread
 * that had slept longest (H200, layernorm 8x4096 float16, one connection, p50: 132 us with 4
 * slots, 112 us with 2, 304 us with 8).
 */
#include "batcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/nd_dtype.h"

typedef struct group {
    /* the key */
    nd_op op;
    nd_dtype dtype;
    int64_t mid, inner;
    float eps;
    int64_t alpha_count;
    const nd_param_set *pset;
    /* queued jobs, oldest first; every job here has the same inline parameters as head */
    nd_job *head, *tail;
    int64_t rows;
    struct group *next;
} group;

struct nd_batcher {
    nd_config cfg;
    nd_engine *engine;
    nd_metrics *metrics;
    pthread_t *threads;
    int nthreads;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t *wake; /* one per slot thread: signalled when it is handed work or stopping is
                           * set */
    int *idle;            /* slot threads waiting for work, in the order they went idle */
    int nidle;
    int nwake;            /* condition variables initialised */
    group *groups;
    int queued;           /* jobs in groups */
    int timed;            /* jobs in groups that have a deadline */
    double next_deadline; /* no queued job's deadline is earlier (may be stale-early; 0: none) */
    int closed;           /* no new jobs */
    int stopping;         /* run everything queued now, then exit */
    uint64_t batch_seq;   /* for fault injection */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- idle slot threads (the lock held) ---- */

static void idle_push(nd_batcher *b, int slot)
{
    b->idle[b->nidle++] = slot;
}

/* Takes slot off the idle stack if it is there (a thread woken by a timeout or spuriously). */
static void idle_remove(nd_batcher *b, int slot)
{
    for (int i = 0; i < b->nidle; i++)
        if (b->idle[i] == slot) {
            memmove(b->idle + i, b->idle + i + 1, (size_t)(b->nidle - i - 1) * sizeof *b->idle);
            b->nidle--;
            return;
        }
}

/* The slot thread that went idle last, taken off the stack (-1: none is idle); the caller
 * signals b->wake[slot] once it has let go of the lock. */
static int idle_pop(nd_batcher *b)
{
    return b->nidle ? b->idle[--b->nidle] : -1;
}

static void wake_slot(nd_batcher *b, int slot)
{
    if (slot >= 0)
        pthread_cond_signal(&b->wake[slot]);
}

/* 1 when a job's x (or y) is left to the device to take from (or put in) its place: device
 * memory (device: a CUDA shared memory region, which the host cannot touch), or pinned (in
 * memory the engine took with host_register), and at least --cuda-shm-dma-bytes or the batch's
 * only job (whose x and y the kernel of a small batch reads and writes in place). */
static int dma_ok(const nd_batcher *b, const nd_job *j, int pinned, int device, int njobs)
{
    return device ||
           (pinned && (njobs == 1 || (size_t)j->req.elems * nd_dtype_size(j->req.dtype) >=
                                         b->cfg.cuda_shm_dma_bytes));
}

static int dma_x(const nd_batcher *b, const nd_job *j, int njobs)
{
    return dma_ok(b, j, j->x_pinned, j->x_device, njobs);
}

static int dma_y(const nd_batcher *b, const nd_job *j, int njobs)
{
    return j->y_dst && dma_ok(b, j, j->y_pinned, j->y_device, njobs);
}

/* ---- keys ---- */

static size_t param_bytes(const nd_request *r, const void *p, int is_alpha)
{
    if (!p)
        return 0;
    return (size_t)(is_alpha ? r->alpha_count : r->mid) * nd_dtype_size(r->dtype);
}

static int same_param(const nd_request *a, const nd_request *b, const void *pa, const void *pb,
                      int is_alpha)
{
    if (!pa || !pb)
        return pa == pb;
    return memcmp(pa, pb, param_bytes(a, pa, is_alpha)) == 0;
}

static int key_matches(const group *g, const nd_job *j)
{
    const nd_request *r = &j->req, *h = &g->head->req;
    if (g->op != r->op || g->dtype != r->dtype || g->mid != r->mid || g->inner != r->inner ||
        g->pset != j->pset || g->alpha_count != r->alpha_count)
        return 0;
    if (memcmp(&g->eps, &r->eps, sizeof g->eps) != 0)
        return 0;
    return same_param(h, r, h->gamma, r->gamma, 0) && same_param(h, r, h->beta, r->beta, 0) &&
           same_param(h, r, h->alpha, r->alpha, 1);
}

/* ---- queue ---- */

int nd_batcher_submit(nd_batcher *b, nd_job *job)
{
    job->next = NULL;
    job->status = 0;
    job->t_enqueue = now_s();
    pthread_mutex_lock(&b->lock);
    if (b->closed || b->queued >= b->cfg.queue_limit) {
        pthread_mutex_unlock(&b->lock);
        return 503;
    }
    group *g = b->groups;
    while (g && !key_matches(g, job))
        g = g->next;
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g) {
            pthread_mutex_unlock(&b->lock);
            return 503;
        }
        g->op = job->req.op;
        g->dtype = job->req.dtype;
        g->mid = job->req.mid;
        g->inner = job->req.inner;
        g->eps = job->req.eps;
        g->alpha_count = job->req.alpha_count;
        g->pset = job->pset;
        g->next = b->groups;
        b->groups = g;
    }
    if (g->tail)
        g->tail->next = job;
    else
        g->head = job;
    g->tail = job;
    g->rows += job->req.outer;
    b->queued++;
    if (job->deadline > 0) {
        b->timed++;
        if (b->next_deadline == 0 || job->deadline < b->next_deadline)
            b->next_deadline = job->deadline;
    }
    nd_metrics_queue_depth_add(b->metrics, 1);
    int slot = idle_pop(b);
    pthread_mutex_unlock(&b->lock);
    wake_slot(b, slot);
    return 0;
}

/* The ready group whose oldest job is oldest, or NULL; *deadline gets the earliest time at which
 * a not-yet-ready group becomes ready (0 when none). Called with the lock held. */
static group *pick_ready(nd_batcher *b, double now, double *deadline)
{
    group *best = NULL;
    double delay = (double)b->cfg.max_delay_us * 1e-6;
    *deadline = 0;
    for (group *g = b->groups; g; g = g->next) {
        double due = g->head->t_enqueue + delay;
        int ready = b->stopping || g->rows >= b->cfg.max_batch_rows || due <= now;
        if (ready) {
            if (!best || g->head->t_enqueue < best->head->t_enqueue)
                best = g;
        } else if (*deadline == 0 || due < *deadline)
            *deadline = due;
    }
    return best;
}

/* Removes the empty group g from the list and frees it. Called with the lock held. */
static void group_unlink(nd_batcher *b, group *g)
{
    group **pp = &b->groups;
    while (*pp != g)
        pp = &(*pp)->next;
    *pp = g->next;
    free(g);
}

/* Pops whole jobs up to max_batch_rows (at least one) from g; frees g when it empties. Called
 * with the lock held. Returns the jobs as a list, their count in *njobs. */
static nd_job *take_jobs(nd_batcher *b, group *g, int *njobs)
{
    nd_job *first = g->head, *last = NULL;
    int64_t rows = 0;
    int n = 0;
    while (g->head && (n == 0 || rows + g->head->req.outer <= b->cfg.max_batch_rows)) {
        last = g->head;
        rows += last->req.outer;
        g->head = last->next;
        b->timed -= last->deadline > 0;
        n++;
    }
    last->next = NULL;
    g->rows -= rows;
    if (!g->head)
        group_unlink(b, g);
    b->queued -= n;
    *njobs = n;
    return first;
}

/* Takes every queued job whose deadline has passed out of its group; returns them as a list
 * (NULL when none) and recomputes next_deadline. Called with the lock held. */
static nd_job *take_expired(nd_batcher *b, double now)
{
    if (b->timed == 0 || now < b->next_deadline)
        return NULL;
    nd_job *late = NULL, **late_tail = &late;
    double next = 0;
    for (group *g = b->groups, *gnext; g; g = gnext) {
        gnext = g->next;
        nd_job *prev = NULL;
        for (nd_job **pp = &g->head; *pp;) {
            nd_job *j = *pp;
            if (j->deadline <= 0 || j->deadline > now) {
                if (j->deadline > 0 && (next == 0 || j->deadline < next))
                    next = j->deadline;
                prev = j;
                pp = &j->next;
                continue;
            }
            *pp = j->next;
            if (g->tail == j)
                g->tail = prev;
            g->rows -= j->req.outer;
            b->queued--;
            b->timed--;
            j->next = NULL;
            *late_tail = j;
            late_tail = &j->next;
        }
        if (!g->head)
            group_unlink(b, g);
    }
    b->next_deadline = next;
    return late;
}

/* ---- running a batch ---- */

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Stamps each job with the batch's stage times (t_start: the batch was taken; t_packed, t_ran,
 * t_end: the stages ended, 0 when not reached; bt: the device's own times, or NULL). */
static void stamp_all(nd_job *jobs, int njobs, double t_start, double t_packed, double t_ran,
                      double t_end, const nd_batch *bt)
{
    for (nd_job *j = jobs; j; j = j->next) {
        j->t = (nd_stage_times){
            .queue = t_start - j->t_enqueue,
            .input = t_packed > 0 ? t_packed - t_start : 0,
            .compute = t_ran > 0 ? t_ran - t_packed : 0,
            .submit = bt ? bt->submit_s : 0,
            .h2d = bt ? bt->h2d_s : 0,
            .kernel = bt ? bt->kernel_s : 0,
            .d2h = bt ? bt->d2h_s : 0,
            .output = t_end > 0 ? t_end - t_ran : 0,
        };
        j->batch_jobs = njobs;
    }
}

static void finish_all(nd_job *jobs, int status, const char *msg)
{
    const double t_done = now_s();
    for (nd_job *j = jobs, *next; j; j = next) {
        next = j->next; /* done hands the job back; do not touch it afterwards */
        if (status != 200) {
            nd_job_free_y(j);
            free(j->mean);
            free(j->rstd);
            j->mean = j->rstd = NULL;
            snprintf(j->error, sizeof j->error, "%s", msg);
        }
        j->status = status;
        j->t_done = t_done;
        j->done(j, j->done_arg);
    }
}

/* The batch is done with the slot's staging: the engine may give back what it grew for it
 * (before the answers go out, so a burst's peak is lower). */
static void release_staging(nd_batcher *b, int slot)
{
    if (b->engine->vt->staging_release)
        b->engine->vt->staging_release(b->engine, slot);
}

static void run_batch(nd_batcher *b, int slot, nd_job *jobs, int njobs)
{
    const nd_request *h = &jobs->req;
    const size_t esz = nd_dtype_size(h->dtype);
    int64_t rows = 0;
    unsigned want = 0;
    for (nd_job *j = jobs; j; j = j->next) {
        rows += j->req.outer;
        want |= j->req.outputs;
    }
    const int want_mean = h->op == ND_OP_LAYERNORM && (want & ND_OUT_MEAN);
    const int want_rstd = (h->op == ND_OP_LAYERNORM || h->op == ND_OP_RMSNORM) &&
                          (want & ND_OUT_RSTD);

    const size_t x_bytes = (size_t)rows * (size_t)h->mid * (size_t)h->inner * esz;
    const size_t pbytes[3] = {param_bytes(h, h->gamma, 0), param_bytes(h, h->beta, 0),
                              param_bytes(h, h->alpha, 1)};
    size_t in_bytes = align16(x_bytes);
    for (int k = 0; k < 3; k++)
        in_bytes += align16(pbytes[k]);
    const size_t stat_bytes = align16((size_t)rows * sizeof(float));
    const size_t out_bytes = align16(x_bytes) + (want_mean ? stat_bytes : 0) +
                             (want_rstd ? stat_bytes : 0);

    nd_error err = {{0}};
    const double t_start = now_s();
    const double wait_s = t_start - jobs->t_enqueue;
    int device = b->engine->slot_device[slot];
    void *in, *out;

    /* Result buffers first: a failure here fails the batch before any work is done. */
    int oom = 0;
    for (nd_job *j = jobs; j; j = j->next) {
        const int jm = want_mean && (j->req.outputs & ND_OUT_MEAN);
        const int jr = want_rstd && (j->req.outputs & ND_OUT_RSTD);
        char *yb = j->y_dst ? NULL : nd_bigbuf_alloc(j->y_room + (size_t)j->req.elems * esz);
        j->y = yb ? yb + j->y_room : NULL;
        j->mean = jm ? malloc((size_t)j->req.outer * sizeof(float)) : NULL;
        j->rstd = jr ? malloc((size_t)j->req.outer * sizeof(float)) : NULL;
        if ((!j->y && !j->y_dst) || (jm && !j->mean) || (jr && !j->rstd))
            oom = 1;
    }
    if (oom) {
        nd_metrics_batch(b->metrics, h->op, device, rows, njobs, wait_s, 0, 1);
        stamp_all(jobs, njobs, t_start, 0, 0, 0, NULL);
        finish_all(jobs, 500, "out of memory for the results");
        return;
    }
    if (b->engine->vt->staging(b->engine, slot, in_bytes, out_bytes, &in, &out, &err) != ND_OK) {
        nd_metrics_batch(b->metrics, h->op, device, rows, njobs, wait_s, 0, 1);
        stamp_all(jobs, njobs, t_start, 0, 0, 0, NULL);
        release_staging(b, slot);
        finish_all(jobs, 500, err.msg);
        return;
    }

    /* Pack: every request's x, one after the other; then the shared inline parameters. An x in
     * memory the engine registered is left to its device (dma_ok): as a piece the device copies
     * itself, or, for a small batch of one request, reads in place. */
    nd_batch_dma *dma = NULL;
    int ndma_in = 0, ndma_out = 0;
    if (b->engine->vt->host_register || b->engine->vt->ipc_open) {
        int want = 0, on_device = 0;
        for (nd_job *j = jobs; j; j = j->next) {
            want += dma_x(b, j, njobs) + dma_y(b, j, njobs);
            on_device |= j->x_device || (j->y_dst && j->y_device);
        }
        if (want)
            dma = malloc((size_t)want * sizeof *dma); /* NULL: copy everything */
        if (want && !dma && on_device) { /* device memory cannot go through the host */
            nd_metrics_batch(b->metrics, h->op, device, rows, njobs, wait_s, 0, 1);
            stamp_all(jobs, njobs, t_start, 0, 0, 0, NULL);
            release_staging(b, slot);
            finish_all(jobs, 500, "out of memory for the batch's copy list");
            return;
        }
    }
    char *p = in;
    for (nd_job *j = jobs; j; j = j->next) {
        size_t n = (size_t)j->req.elems * esz;
        if (dma && dma_x(b, j, njobs))
            dma[ndma_in++] = (nd_batch_dma){.off = (size_t)(p - (char *)in), .bytes = n,
                                            .src = j->req.x, .dev = j->x_device - 1};
        else
            memcpy(p, j->req.x, n);
        p += n;
    }
    nd_batch_dma *dma_out = dma ? dma + ndma_in : NULL;
    size_t y_off = 0;
    for (nd_job *j = jobs; j; j = j->next) {
        size_t n = (size_t)j->req.elems * esz;
        if (dma && dma_y(b, j, njobs))
            dma_out[ndma_out++] = (nd_batch_dma){.off = y_off, .bytes = n, .dst = j->y_dst,
                                                 .dev = j->y_device - 1};
        y_off += n;
    }
    nd_batch batch = {
        .op = h->op,
        .dtype = h->dtype,
        .outer = rows,
        .mid = h->mid,
        .inner = h->inner,
        .eps = h->eps,
        .x = in,
        .y = out,
        .alpha_count = h->alpha_count,
        .pset = jobs->pset,
        .dma_in = dma,
        .ndma_in = ndma_in,
        .dma_out = dma_out,
        .ndma_out = ndma_out,
    };
    p = (char *)in + align16(x_bytes);
    const void *src[3] = {h->gamma, h->beta, h->alpha};
    const void **dst[3] = {&batch.gamma, &batch.beta, &batch.alpha};
    for (int k = 0; k < 3; k++) {
        if (!src[k])
            continue;
        memcpy(p, src[k], pbytes[k]);
        *dst[k] = p;
        p += align16(pbytes[k]);
    }
    char *q = (char *)out + align16(x_bytes);
    if (want_mean) {
        batch.mean = (float *)q;
        q += stat_bytes;
    }
    if (want_rstd)
        batch.rstd = (float *)q;

    int fault = 0;
    pthread_mutex_lock(&b->lock);
    uint64_t seq = ++b->batch_seq;
    pthread_mutex_unlock(&b->lock);
    if (b->cfg.fault_every > 0 && seq % (uint64_t)b->cfg.fault_every == 0)
        fault = 1;

    const double t_packed = now_s();
    nd_metrics_inflight_add(b->metrics, device, 1);
    if (b->cfg.slow_batch_us > 0)
        usleep((useconds_t)b->cfg.slow_batch_us);
    nd_status st = fault ? nd_error_set(&err, ND_EDEVICE, "injected fault (--fault-every %d)",
                                        b->cfg.fault_every)
                         : b->engine->vt->run(b->engine, slot, &batch, &err);
    nd_metrics_inflight_add(b->metrics, device, -1);
    const double t_ran = now_s();
    const double compute_s = t_ran - t_start;
    nd_metrics_transfer(b->metrics, device, batch.h2d_bytes, batch.d2h_bytes);
    if (st == ND_OK && batch.kernel_s > 0)
        nd_metrics_kernel(b->metrics, device, batch.kernel_s);
    nd_metrics_batch(b->metrics, h->op, device, rows, njobs, wait_s, compute_s, st != ND_OK);
    if (b->cfg.verbose >= 3)
        fprintf(stderr, "normd: batch %s rows=%lld jobs=%d slot=%d %.3f ms%s\n",
                nd_op_name(h->op), (long long)rows, njobs, slot, compute_s * 1e3,
                st == ND_OK ? "" : " FAILED");
    if (st != ND_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "backend %s failed: %s", b->engine->vt->name, err.msg);
        if (b->cfg.verbose >= 1)
            fprintf(stderr, "normd: %s\n", msg);
        stamp_all(jobs, njobs, t_start, t_packed, t_ran, 0, NULL);
        release_staging(b, slot);
        free(dma);
        finish_all(jobs, 500, msg);
        return;
    }

    /* Scatter: each request's rows of y and of the statistics, in the order they were packed
     * (a y the device copied to its place already is skipped). */
    const char *y = out;
    int64_t row0 = 0;
    int next_dma = 0;
    for (nd_job *j = jobs; j; j = j->next) {
        size_t n = (size_t)j->req.elems * esz;
        if (next_dma < ndma_out && dma_out[next_dma].off == (size_t)(y - (const char *)out))
            next_dma++;
        else
            memcpy(j->y_dst ? j->y_dst : j->y, y, n);
        y += n;
        if (j->mean)
            memcpy(j->mean, batch.mean + row0, (size_t)j->req.outer * sizeof(float));
        if (j->rstd)
            memcpy(j->rstd, batch.rstd + row0, (size_t)j->req.outer * sizeof(float));
        row0 += j->req.outer;
    }
    stamp_all(jobs, njobs, t_start, t_packed, t_ran, now_s(), &batch);
    release_staging(b, slot);
    free(dma);
    finish_all(jobs, 200, NULL);
}

/* ---- threads ---- */

typedef struct slot_arg {
    nd_batcher *b;
    int slot;
} slot_arg;

/* Answers jobs whose deadline passed in the queue: 504, never run. */
static void finish_expired(nd_batcher *b, nd_job *late, double now)
{
    int n = 0;
    for (nd_job *j = late; j; j = j->next) {
        j->t = (nd_stage_times){.queue = now - j->t_enqueue};
        j->batch_jobs = 0;
        n++;
    }
    nd_metrics_queue_depth_add(b->metrics, -n);
    for (nd_job *j = late, *next; j; j = next) {
        next = j->next;
        snprintf(j->error, sizeof j->error, "deadline passed after %.0f ms in the queue; the "
                 "request was not run", j->t.queue * 1e3);
        j->status = 504;
        j->t_done = now;
        j->done(j, j->done_arg);
    }
}

static void *slot_main(void *arg)
{
    slot_arg *sa = arg;
    nd_batcher *b = sa->b;
    const int slot = sa->slot;
    free(sa);
    pthread_mutex_lock(&b->lock);
    for (;;) {
        double now = now_s(), deadline;
        nd_job *late = take_expired(b, now);
        if (late) {
            pthread_mutex_unlock(&b->lock);
            finish_expired(b, late, now);
            pthread_mutex_lock(&b->lock);
            continue;
        }
        group *g = pick_ready(b, now, &deadline);
        if (b->timed > 0 && (deadline == 0 || b->next_deadline < deadline))
            deadline = b->next_deadline;
        if (!g) {
            if (b->stopping && !b->groups)
                break;
            if (deadline > 0) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                double wait = deadline - now_s();
                if (wait < 0)
                    wait = 0;
                ts.tv_sec += (time_t)wait;
                ts.tv_nsec += (long)((wait - (double)(time_t)wait) * 1e9);
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                idle_push(b, slot);
                pthread_cond_timedwait(&b->wake[slot], &b->lock, &ts);
            } else {
                idle_push(b, slot);
                pthread_cond_wait(&b->wake[slot], &b->lock);
            }
            idle_remove(b, slot);
            continue;
        }
        int njobs;
        nd_job *jobs = take_jobs(b, g, &njobs);
        /* Another slot may find more ready work at once. */
        int other = b->groups ? idle_pop(b) : -1;
        pthread_mutex_unlock(&b->lock);
        wake_slot(b, other);
        nd_metrics_queue_depth_add(b->metrics, -njobs);
        run_batch(b, slot, jobs, njobs);
        pthread_mutex_lock(&b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

nd_batcher *nd_batcher_create(const nd_config *cfg, nd_engine *engine, nd_metrics *metrics,
                              nd_error *err)
{
    nd_batcher *b = calloc(1, sizeof *b);
    if (!b) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return NULL;
    }
    b->cfg = *cfg;
    b->engine = engine;
    b->metrics = metrics;
    pthread_mutex_init(&b->lock, NULL);
    b->threads = calloc((size_t)engine->nslots, sizeof *b->threads);
    b->wake = calloc((size_t)engine->nslots, sizeof *b->wake);
    b->idle = calloc((size_t)engine->nslots, sizeof *b->idle);
    if (!b->threads || !b->wake || !b->idle) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        goto fail;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (int s = 0; s < engine->nslots; s++)
        pthread_cond_init(&b->wake[s], &ca);
    pthread_condattr_destroy(&ca);
    b->nwake = engine->nslots;
    for (int s = 0; s < engine->nslots; s++) {
        slot_arg *sa = malloc(sizeof *sa);
        int rc = ENOMEM;
        if (sa) {
            sa->b = b;
            sa->slot = s;
            rc = pthread_create(&b->threads[s], NULL, slot_main, sa);
        }
        if (rc) {
            free(sa);
            nd_error_set(err, ND_ENOMEM, "cannot start batcher thread: %s", strerror(rc));
            goto fail;
        }
        b->nthreads++;
    }
    return b;
fail:
    nd_batcher_destroy(b);
    return NULL;
}

void nd_batcher_close(nd_batcher *b)
{
    pthread_mutex_lock(&b->lock);
    b->closed = 1;
    pthread_mutex_unlock(&b->lock);
}

void nd_batcher_drain(nd_batcher *b)
{
    pthread_mutex_lock(&b->lock);
    b->closed = 1;
    b->stopping = 1;
    b->nidle = 0;
    pthread_mutex_unlock(&b->lock);
    for (int s = 0; s < b->nwake; s++)
        pthread_cond_signal(&b->wake[s]);
    for (int s = 0; s < b->nthreads; s++)
        pthread_join(b->threads[s], NULL);
    b->nthreads = 0;
}

void nd_batcher_destroy(nd_batcher *b)
{
    if (!b)
        return;
    /* With no threads (a failed create) nothing can have been queued. */
    nd_batcher_drain(b);
    free(b->threads);
    for (int s = 0; s < b->nwake; s++)
        pthread_cond_destroy(&b->wake[s]);
    free(b->wake);
    free(b->idle);
    pthread_mutex_destroy(&b->lock);
    free(b);
}
