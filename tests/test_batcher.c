/*
 * test_batcher.c - the batching policy, with a scripted engine: which jobs share a launch, when a
 * batch starts, the row bound, the queue bound, failures, and draining on shutdown.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../server/batcher.h"

/* ---- a scripted engine: y = x + 1 (float32), records every batch, can hold or fail ---- */

#define MAX_RECORDED 256

typedef struct script_engine {
    nd_engine base;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int hold;          /* run() waits while set */
    int fail_next;     /* run() fails the next batch */
    int nbatches;
    int64_t rows[MAX_RECORDED];
    double started[MAX_RECORDED];
    void *in, *out;
    size_t in_cap, out_cap;
} script_engine;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static nd_status se_staging(nd_engine *e, int slot, size_t in_bytes, size_t out_bytes,
                            void **in, void **out, nd_error *err)
{
    script_engine *s = (script_engine *)e;
    if (in_bytes > s->in_cap) {
        s->in = realloc(s->in, in_bytes);
        s->in_cap = in_bytes;
    }
    if (out_bytes > s->out_cap) {
        s->out = realloc(s->out, out_bytes);
        s->out_cap = out_bytes;
    }
    *in = s->in;
    *out = s->out;
    return ND_OK;
}

static nd_status se_run(nd_engine *e, int slot, nd_batch *b, nd_error *err)
{
    script_engine *s = (script_engine *)e;
    pthread_mutex_lock(&s->lock);
    if (s->nbatches < MAX_RECORDED) {
        s->rows[s->nbatches] = b->outer;
        s->started[s->nbatches] = now_s();
    }
    s->nbatches++;
    pthread_cond_broadcast(&s->cond);
    while (s->hold)
        pthread_cond_wait(&s->cond, &s->lock);
    int fail = s->fail_next;
    s->fail_next = 0;
    pthread_mutex_unlock(&s->lock);
    if (fail)
        return nd_error_set(err, ND_EDEVICE, "scripted failure");
    int64_t n = b->outer * b->mid * b->inner;
    for (int64_t i = 0; i < n; i++)
        ((float *)b->y)[i] = ((const float *)b->x)[i] + 1.0f;
    return ND_OK;
}

static const nd_engine_vt script_vt = {.name = "script", .staging = se_staging, .run = se_run};

static script_engine eng;
static nd_metrics *metrics;
static nd_batcher *batcher;

static void setup(int64_t max_rows, int64_t delay_us, int queue_limit)
{
    memset(&eng, 0, sizeof eng);
    eng.base.vt = &script_vt;
    eng.base.nslots = 1;
    eng.base.ndevices = 1;
    pthread_mutex_init(&eng.lock, NULL);
    pthread_cond_init(&eng.cond, NULL);
    nd_config cfg;
    nd_config_defaults(&cfg);
    cfg.max_batch_rows = max_rows;
    cfg.max_delay_us = delay_us;
    cfg.queue_limit = queue_limit;
    metrics = nd_metrics_create();
    nd_error err;
    batcher = nd_batcher_create(&cfg, &eng.base, metrics, &err);
    cr_assert_not_null(batcher, "%s", err.msg);
}

static void teardown(void)
{
    nd_batcher_destroy(batcher);
    nd_metrics_destroy(metrics);
    free(eng.in);
    free(eng.out);
}

static void hold(int on)
{
    pthread_mutex_lock(&eng.lock);
    eng.hold = on;
    pthread_cond_broadcast(&eng.cond);
    pthread_mutex_unlock(&eng.lock);
}

/* Waits until the engine has started n batches. */
static void wait_batches(int n)
{
    pthread_mutex_lock(&eng.lock);
    while (eng.nbatches < n)
        pthread_cond_wait(&eng.cond, &eng.lock);
    pthread_mutex_unlock(&eng.lock);
}

/* ---- jobs ---- */

typedef struct tjob {
    nd_job job;
    float *x;
    int done;
} tjob;

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;

static void on_done(nd_job *j, void *arg)
{
    tjob *t = arg;
    pthread_mutex_lock(&done_lock);
    t->done = 1;
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&done_lock);
}

static void wait_done(tjob *t)
{
    pthread_mutex_lock(&done_lock);
    while (!t->done)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);
}

/* A float32 layernorm-shaped job of rows x cols with distinct data; eps and gamma vary the key. */
static tjob *job_new(int64_t rows, int64_t cols, float eps, const float *gamma, float seed)
{
    tjob *t = calloc(1, sizeof *t);
    t->x = malloc((size_t)(rows * cols) * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++)
        t->x[i] = seed + (float)i;
    nd_request *r = &t->job.req;
    r->op = ND_OP_LAYERNORM;
    r->dtype = ND_FLOAT32;
    r->ndim = 2;
    r->shape[0] = rows;
    r->shape[1] = cols;
    r->outer = rows;
    r->mid = cols;
    r->inner = 1;
    r->elems = rows * cols;
    r->eps = eps;
    r->outputs = ND_OUT_Y;
    r->x = t->x;
    r->gamma = gamma;
    t->job.done = on_done;
    t->job.done_arg = t;
    return t;
}

static void job_check_and_free(tjob *t)
{
    wait_done(t);
    cr_assert_eq(t->job.status, 200, "status %d: %s", t->job.status, t->job.error);
    const float *y = t->job.y;
    for (int64_t i = 0; i < t->job.req.elems; i++)
        cr_assert_eq(y[i], t->x[i] + 1.0f, "element %lld of a job got another job's answer",
                     (long long)i);
    nd_job_free_y(&t->job);
    free(t->x);
    free(t);
}

static void submit_ok(tjob *t)
{
    cr_assert_eq(nd_batcher_submit(batcher, &t->job), 0);
}

/* Holds the engine and starts one 1 x cols job on the only executor, so that what is submitted
 * next queues behind it. Release with hold(0); the job is returned for checking. */
static tjob *occupy_executor(int64_t cols)
{
    hold(1);
    tjob *first = job_new(1, cols, 1e-5f, NULL, 0);
    submit_ok(first);
    wait_batches(1);
    return first;
}

/* ---- tests ---- */

Test(batcher, an_idle_batcher_runs_a_job_at_once)
{
    setup(1024, 0, 64);
    tjob *t = job_new(2, 8, 1e-5f, NULL, 0);
    double t0 = now_s();
    submit_ok(t);
    wait_done(t);
    cr_assert_lt(now_s() - t0, 1.0);
    cr_assert_eq(eng.nbatches, 1);
    job_check_and_free(t);
    teardown();
}

Test(batcher, jobs_waiting_for_a_busy_executor_share_one_batch)
{
    setup(1024, 0, 64);
    tjob *first = occupy_executor(8);
    tjob *t[10];
    for (int i = 0; i < 10; i++) {
        t[i] = job_new(3, 8, 1e-5f, NULL, (float)(100 * i));
        submit_ok(t[i]);
    }
    hold(0);
    job_check_and_free(first);
    for (int i = 0; i < 10; i++)
        job_check_and_free(t[i]);
    cr_assert_eq(eng.nbatches, 2, "%d batches", eng.nbatches);
    cr_assert_eq(eng.rows[1], 30);
    teardown();
}

Test(batcher, a_batch_takes_whole_jobs_up_to_max_batch_rows_and_never_splits_one)
{
    setup(7, 0, 64);
    tjob *first = occupy_executor(4);
    tjob *t[5];
    int64_t rows[5] = {3, 3, 3, 20, 1};
    for (int i = 0; i < 5; i++) {
        t[i] = job_new(rows[i], 4, 1e-5f, NULL, (float)i);
        submit_ok(t[i]);
    }
    hold(0);
    job_check_and_free(first);
    for (int i = 0; i < 5; i++)
        job_check_and_free(t[i]);
    /* in arrival order: [3,3], [3], [20] alone (larger than the bound), [1] */
    cr_assert_eq(eng.nbatches, 5, "%d batches", eng.nbatches);
    int64_t want[] = {1, 6, 3, 20, 1};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(eng.rows[i], want[i], "batch %d has %lld rows, expected %lld", i,
                     (long long)eng.rows[i], (long long)want[i]);
    teardown();
}

Test(batcher, different_keys_never_share_a_launch)
{
    setup(1024, 0, 64);
    tjob *first = occupy_executor(4);
    static const float g1[4] = {1, 1, 1, 1}, g2[4] = {1, 1, 1, 2}, g1_copy[4] = {1, 1, 1, 1};
    tjob *t[6] = {
        job_new(1, 4, 1e-5f, NULL, 1), job_new(1, 4, 1e-3f, NULL, 2), /* eps differs */
        job_new(1, 5, 1e-5f, NULL, 3),                                /* cols differ */
        job_new(1, 4, 1e-5f, g1, 4),   job_new(1, 4, 1e-5f, g2, 5),   /* gamma bytes differ */
        job_new(1, 4, 1e-5f, g1_copy, 6), /* same bytes as g1 at another address: shares */
    };
    for (int i = 0; i < 6; i++)
        submit_ok(t[i]);
    hold(0);
    job_check_and_free(first);
    for (int i = 0; i < 6; i++)
        job_check_and_free(t[i]);
    cr_assert_eq(eng.nbatches, 1 + 5, "%d batches", eng.nbatches);
    teardown();
}

Test(batcher, max_delay_holds_a_batch_for_company_unless_it_is_full)
{
    setup(4, 100000, 64); /* 100 ms */
    tjob *a = job_new(1, 4, 1e-5f, NULL, 0);
    double t0 = now_s();
    submit_ok(a);
    tjob *b = job_new(1, 4, 1e-5f, NULL, 1);
    submit_ok(b);
    wait_done(a);
    double waited = now_s() - t0;
    cr_assert_geq(waited, 0.09, "ran after %.3f s, before max_delay", waited);
    job_check_and_free(a);
    job_check_and_free(b);
    cr_assert_eq(eng.nbatches, 1);
    cr_assert_eq(eng.rows[0], 2);
    /* reaching max_batch_rows launches without waiting */
    tjob *c = job_new(4, 4, 1e-5f, NULL, 2);
    t0 = now_s();
    submit_ok(c);
    wait_done(c);
    cr_assert_lt(now_s() - t0, 0.09);
    job_check_and_free(c);
    teardown();
}

Test(batcher, a_full_queue_refuses_with_503)
{
    setup(1024, 0, 2);
    tjob *first = occupy_executor(4); /* running, no longer queued */
    tjob *a = job_new(1, 4, 1e-5f, NULL, 1), *b = job_new(1, 4, 1e-5f, NULL, 2);
    tjob *c = job_new(1, 4, 1e-5f, NULL, 3);
    submit_ok(a);
    submit_ok(b);
    cr_assert_eq(nd_batcher_submit(batcher, &c->job), 503);
    cr_assert_eq(nd_metrics_queue_depth(metrics), 2);
    hold(0);
    job_check_and_free(first);
    job_check_and_free(a);
    job_check_and_free(b);
    free(c->x);
    free(c);
    teardown();
}

/* The failure is also logged (verbose 1): to a pipe here, where it is checked, rather than
 * to the test run's output. */
Test(batcher, a_failed_batch_fails_its_jobs_with_500_and_only_those, .init = cr_redirect_stderr)
{
    setup(1024, 0, 64);
    tjob *first = occupy_executor(4);
    tjob *a = job_new(1, 4, 1e-5f, NULL, 1), *b = job_new(2, 4, 1e-5f, NULL, 2);
    submit_ok(a);
    submit_ok(b);
    pthread_mutex_lock(&eng.lock);
    eng.fail_next = 1; /* the held batch (first) fails */
    pthread_mutex_unlock(&eng.lock);
    hold(0);
    wait_done(first);
    cr_assert_eq(first->job.status, 500);
    cr_assert(strstr(first->job.error, "scripted failure"), "%s", first->job.error);
    cr_assert_stderr_eq_str("normd: backend script failed: scripted failure\n");
    cr_assert_null(first->job.y);
    free(first->x);
    free(first);
    job_check_and_free(a);
    job_check_and_free(b);
    teardown();
}

Test(batcher, destroy_runs_everything_already_queued)
{
    setup(2, 5000000, 1000); /* a 5 s delay that shutdown must not wait for */
    tjob *t[9];
    for (int i = 0; i < 9; i++) {
        t[i] = job_new(1, 4, 1e-5f, NULL, (float)i);
        submit_ok(t[i]);
    }
    double t0 = now_s();
    nd_batcher_drain(batcher);
    cr_assert_lt(now_s() - t0, 2.0);
    for (int i = 0; i < 9; i++)
        job_check_and_free(t[i]);
    tjob *late = job_new(1, 4, 1e-5f, NULL, 0);
    cr_assert_eq(nd_batcher_submit(batcher, &late->job), 503, "a drained batcher took a job");
    free(late->x);
    free(late);
    teardown();
}

Test(batcher, a_job_whose_deadline_passes_in_the_queue_gets_504_and_never_runs)
{
    setup(1024, 0, 64);
    tjob *first = occupy_executor(4); /* the only executor is busy */
    tjob *late = job_new(1, 4, 1e-5f, NULL, 1), *ontime = job_new(1, 4, 1e-5f, NULL, 2);
    late->job.deadline = now_s() + 0.05;
    ontime->job.deadline = now_s() + 60;
    submit_ok(late);
    submit_ok(ontime);
    cr_assert_eq(nd_metrics_queue_depth(metrics), 2);
    usleep(100000);
    hold(0);
    wait_done(late);
    cr_assert_eq(late->job.status, 504, "status %d", late->job.status);
    cr_assert(strstr(late->job.error, "deadline"), "%s", late->job.error);
    cr_assert_null(late->job.y, "an expired job got results");
    cr_assert_eq(late->job.batch_jobs, 0);
    job_check_and_free(first);
    job_check_and_free(ontime);
    /* the expired job left no trace in the queue or in the batches */
    cr_assert_eq(nd_metrics_queue_depth(metrics), 0);
    cr_assert_eq(eng.nbatches, 2, "%d batches", eng.nbatches);
    cr_assert_eq(eng.rows[1], 1);
    free(late->x);
    free(late);
    teardown();
}

Test(batcher, an_idle_executor_wakes_up_for_a_deadline)
{
    setup(1024, 2000000, 64); /* batches wait 2 s for company */
    tjob *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = job_new(1, 4, 1e-5f, NULL, (float)i);
        t[i]->job.deadline = i == 1 ? now_s() + 0.1 : 0; /* the middle one of the group */
        submit_ok(t[i]);
    }
    double t0 = now_s();
    wait_done(t[1]);
    double waited = now_s() - t0;
    cr_assert_eq(t[1]->job.status, 504);
    cr_assert(waited < 1.0, "504 after %.3f s for a 0.1 s deadline", waited);
    cr_assert_eq(eng.nbatches, 0, "the group ran early");
    nd_batcher_drain(batcher); /* the other two run, as one batch of 2 rows */
    job_check_and_free(t[0]);
    job_check_and_free(t[2]);
    cr_assert_eq(eng.nbatches, 1);
    cr_assert_eq(eng.rows[0], 2);
    free(t[1]->x);
    free(t[1]);
    teardown();
}

/* ---- tensors the engine's device copies itself (nd_batch dma_in / dma_out) ---- */

/* A scripted engine that registers host memory and copies the dma pieces itself, as the cuda
 * engine's copy engines do: its "device" buffers are private; the staging is poisoned before
 * each batch, so a piece the batcher should have left alone but packed, or a y it scattered from
 * the staging instead of leaving to the engine, shows as a wrong answer. */
static int dma_seen_in, dma_seen_out;

static nd_status dma_staging(nd_engine *e, int slot, size_t in_bytes, size_t out_bytes,
                             void **in, void **out, nd_error *err)
{
    nd_status st = se_staging(e, slot, in_bytes, out_bytes, in, out, err);
    memset(*in, 0xFF, in_bytes);
    memset(*out, 0xFF, out_bytes);
    return st;
}

static nd_status dma_run(nd_engine *e, int slot, nd_batch *b, nd_error *err)
{
    const size_t n = (size_t)(b->outer * b->mid * b->inner), bytes = n * sizeof(float);
    float *dx = malloc(bytes), *dy = malloc(bytes);
    memcpy(dx, b->x, bytes); /* the staging, then the pieces over it */
    size_t at = 0;
    for (int i = 0; i < b->ndma_in; i++) {
        const nd_batch_dma *d = &b->dma_in[i];
        cr_assert(d->off >= at && d->off + d->bytes <= bytes, "piece %d out of order", i);
        for (size_t k = 0; k < d->bytes; k++)
            cr_assert_eq(((const unsigned char *)b->x)[d->off + k], 0xFF,
                         "the batcher packed bytes the device copies itself");
        memcpy((char *)dx + d->off, d->src, d->bytes);
        at = d->off + d->bytes;
    }
    for (size_t i = 0; i < n; i++)
        dy[i] = dx[i] + 1.0f;
    memcpy(b->y, dy, bytes);
    for (int i = 0; i < b->ndma_out; i++) {
        const nd_batch_dma *d = &b->dma_out[i];
        memcpy(d->dst, (char *)dy + d->off, d->bytes);
        memset((char *)b->y + d->off, 0xFF, d->bytes); /* not in the staging */
    }
    dma_seen_in += b->ndma_in;
    dma_seen_out += b->ndma_out;
    free(dx);
    free(dy);
    return ND_OK;
}

static int dma_register(nd_engine *e, void *p, size_t n)
{
    return 0;
}

static void dma_unregister(nd_engine *e, void *p)
{
}

static const nd_engine_vt dma_vt = {.name = "dma", .staging = dma_staging, .run = dma_run,
                                    .host_register = dma_register,
                                    .host_unregister = dma_unregister};

Test(batcher, pinned_tensors_are_left_to_the_engine_the_rest_is_packed_and_scattered)
{
    memset(&eng, 0, sizeof eng);
    eng.base.vt = &dma_vt;
    eng.base.nslots = 1;
    eng.base.ndevices = 1;
    nd_config cfg;
    nd_config_defaults(&cfg);
    cfg.max_delay_us = 200000; /* the four jobs below share one batch */
    cfg.cuda_shm_dma_bytes = 256;
    metrics = nd_metrics_create();
    nd_error err;
    batcher = nd_batcher_create(&cfg, &eng.base, metrics, &err);
    cr_assert_not_null(batcher, "%s", err.msg);
    dma_seen_in = dma_seen_out = 0;

    /* rows of 8 floats (32 bytes): 10 rows reach the 256-byte threshold, 2 do not */
    struct {
        int64_t rows;
        int x_pinned, y_pinned;
    } kind[] = {{10, 1, 1}, {2, 0, 0}, {2, 1, 1}, {12, 1, 0}, {9, 0, 0}};
    enum { N = sizeof kind / sizeof kind[0] };
    tjob *t[N];
    float *ydst[N];
    for (int i = 0; i < N; i++) {
        t[i] = job_new(kind[i].rows, 8, 1e-5f, NULL, (float)(1000 * i));
        t[i]->job.x_pinned = kind[i].x_pinned;
        ydst[i] = NULL;
        if (kind[i].y_pinned || i == 1) { /* job 1: a y_dst that is not pinned */
            ydst[i] = calloc((size_t)kind[i].rows * 8, sizeof(float));
            t[i]->job.y_dst = ydst[i];
            t[i]->job.y_pinned = kind[i].y_pinned;
        }
        submit_ok(t[i]);
    }
    for (int i = 0; i < N; i++) {
        wait_done(t[i]);
        cr_assert_eq(t[i]->job.status, 200, "job %d: %s", i, t[i]->job.error);
        const float *y = ydst[i] ? ydst[i] : t[i]->job.y;
        cr_assert_eq(t[i]->job.y == NULL, ydst[i] != NULL, "job %d: y buffer", i);
        for (int64_t k = 0; k < t[i]->job.req.elems; k++)
            cr_assert_eq(y[k], t[i]->x[k] + 1.0f, "job %d, element %lld", i, (long long)k);
        nd_job_free_y(&t[i]->job);
        free(ydst[i]);
        free(t[i]->x);
        free(t[i]);
    }
    cr_assert_eq(dma_seen_in, 2, "x pieces left to the engine: %d (jobs 0 and 3)", dma_seen_in);
    cr_assert_eq(dma_seen_out, 1, "y pieces left to the engine: %d (job 0)", dma_seen_out);

    /* a batch's only job: its pinned x and y are left to the engine whatever their size (the
     * cuda engine's kernel reads and writes them in place when the batch is small) */
    dma_seen_in = dma_seen_out = 0;
    tjob *lone = job_new(2, 8, 1e-5f, NULL, 7.0f);
    float lone_y[16];
    lone->job.x_pinned = 1;
    lone->job.y_dst = lone_y;
    lone->job.y_pinned = 1;
    submit_ok(lone);
    wait_done(lone);
    cr_assert_eq(lone->job.status, 200, "%s", lone->job.error);
    for (int k = 0; k < 16; k++)
        cr_assert_eq(lone_y[k], lone->x[k] + 1.0f, "lone job, element %d", k);
    cr_assert_eq(dma_seen_in, 1);
    cr_assert_eq(dma_seen_out, 1);
    free(lone->x);
    free(lone);
    nd_batcher_destroy(batcher);
    nd_metrics_destroy(metrics);
    free(eng.in);
    free(eng.out);
}
