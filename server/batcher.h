/*
 * batcher.h - gathers requests with the same batch key into one backend call.
 *
 * The batch key is everything a kernel launch shares: op, dtype, the view without outer
 * (mid, inner), eps, the parameters (the bytes of inline parameters, or a registered set's
 * generation) and alpha_count. Requests with equal keys are concatenated along outer.
 *
 * Each engine slot has one batcher thread. An idle thread takes the key whose oldest request has
 * waited longest, once that key is ready: its queued rows reach max_batch_rows, or its oldest
 * request has waited max_delay_us (0: at once, so an idle daemon answers immediately and batches
 * grow only with load). A batch takes whole requests in arrival order up to max_batch_rows; a
 * request larger than that runs alone. Requests are never split.
 *
 * A job with a deadline that is still queued when the deadline passes leaves its group and is
 * finished with status 504 by the next batcher thread that looks at the queue; an idle thread
 * wakes up for it, so the answer is late only while every thread is running a batch.
 */
#ifndef ND_BATCHER_H
#define ND_BATCHER_H

#include <stdint.h>
#include <stdlib.h>

#include "../proto/nd_proto.h"
#include "bigbuf.h"
#include "config.h"
#include "engine.h"
#include "metrics.h"
#include "params.h"

typedef struct nd_job nd_job;
typedef void (*nd_job_done_fn)(nd_job *job, void *arg);

/* One request's journey through the batcher. The submitter owns it before submit and again
 * after done is called; in between the batcher does. */
struct nd_job {
    nd_request req;
    nd_param_set *pset; /* a reference taken by the submitter, or NULL */
    double deadline;    /* CLOCK_MONOTONIC seconds; a job still queued then is finished with 504
                         * without running (0: no deadline) */
    /* results, set before done is called */
    int status;           /* 200, or an HTTP error status */
    char error[256];
    size_t y_room;        /* set by the submitter: bytes to leave free before y in its buffer
                           * (v2 writes its answer's JSON there); 0 for none */
    void *y_dst;          /* set by the submitter: where y goes (req.elems elements, any
                           * alignment), e.g. a shared memory region; NULL: into y */
    int x_pinned;         /* set by the submitter: req.x lies in memory the engine took with
                           * host_register, which its device may copy from directly */
    int y_pinned;         /* the same for y_dst */
    int x_device;         /* set by the submitter: 0 when req.x is host memory; d + 1 when it is
                           * engine device d's memory (a CUDA shared memory region), which only
                           * that device's copies and kernels may touch */
    int y_device;         /* the same for y_dst */
    void *y;              /* req.elems elements of req.dtype, y_room bytes into a malloc'ed
                           * buffer; the submitter frees it with nd_job_free_y. Stays NULL
                           * when y_dst is set */
    float *mean, *rstd;   /* req.outer floats each when asked for, malloc'ed */
    /* where the job's time went, set before done is called (0 for stages it did not reach):
     * queue, input, compute (with its device-timed parts h2d, kernel, d2h) and output; the
     * submitter adds wakeup and total (see nd_stage_times) */
    nd_stage_times t;
    double t_done;        /* CLOCK_MONOTONIC seconds at which done was called */
    int batch_jobs;       /* requests in the job's batch (0 when it never ran) */
    nd_job_done_fn done;
    void *done_arg;
    /* private */
    double t_enqueue;
    nd_job *next;
};

/* Frees y's buffer (which starts y_room bytes before y) and clears y. */
static inline void nd_job_free_y(nd_job *j)
{
    if (j->y)
        nd_bigbuf_free((char *)j->y - j->y_room);
    j->y = NULL;
}

typedef struct nd_batcher nd_batcher;

nd_batcher *nd_batcher_create(const nd_config *cfg, nd_engine *engine, nd_metrics *metrics,
                              nd_error *err);
/* Drains (see nd_batcher_drain) and frees. */
void nd_batcher_destroy(nd_batcher *b);

/*
 * Queue a job. Returns 0 (done will be called exactly once, from a batcher thread), or 503 when
 * the queue is full or the batcher is stopping (done is not called).
 */
int nd_batcher_submit(nd_batcher *b, nd_job *job);

/* Stop accepting new jobs (submit answers 503); queued jobs still run. */
void nd_batcher_close(nd_batcher *b);

/* Close, run everything already queued and wait for it; submit keeps answering 503 until the
 * batcher is destroyed. */
void nd_batcher_drain(nd_batcher *b);

#endif /* ND_BATCHER_H */
