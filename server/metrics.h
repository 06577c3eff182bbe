/*
 * metrics.h - the daemon's counters and histograms, rendered in Prometheus text format.
 *
 * Every update takes one short mutex; updates happen once per request or per batch, never per
 * element, so the lock is not a bottleneck.
 */
#ifndef ND_METRICS_H
#define ND_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/nd_ops.h"
#include "../proto/nd_v2.h"

typedef struct nd_metrics nd_metrics;

/* Requests outside the operator endpoints (metrics, health, params, unknown paths). */
#define ND_METRICS_OP_OTHER ND_OP_COUNT

nd_metrics *nd_metrics_create(void);
void nd_metrics_destroy(nd_metrics *m);

/* One answered request: op is an nd_op or ND_METRICS_OP_OTHER; seconds from arrival to answer. */
void nd_metrics_request(nd_metrics *m, int op, int code, double seconds);
/* One batch run on executor `device` (a label index; see nd_metrics_set_device_label). */
void nd_metrics_batch(nd_metrics *m, nd_op op, int device, int64_t rows, int requests,
                      double queue_wait_s, double compute_s, int failed);
/* The kernel time of one batch on device, where the engine measures it (CUDA events). */
void nd_metrics_kernel(nd_metrics *m, int device, double seconds);
void nd_metrics_transfer(nd_metrics *m, int device, uint64_t h2d_bytes, uint64_t d2h_bytes);
void nd_metrics_inflight_add(nd_metrics *m, int device, int delta);
void nd_metrics_queue_depth_add(nd_metrics *m, int delta);
int64_t nd_metrics_queue_depth(nd_metrics *m);
/* Where one operator request's time went, in seconds. A stage the request did not pass is 0
 * and is not observed (a request that failed before its batch ran has no compute stage; a
 * backend that does not time its device, no h2d, kernel or d2h). */
typedef struct nd_stage_times {
    double queue;   /* queued -> its batch was taken by a batcher thread */
    double input;   /* packing the batch into the slot's staging */
    double compute; /* the backend's run as the host sees it: copies, kernel and the wait */
    double submit;  /* of compute, the host's time handing the batch to the device */
    double h2d;     /* of compute, timed on the device: the copy in, */
    double kernel;  /*   the kernel, */
    double d2h;     /*   the copy out */
    double output;  /* scattering the results to the requests */
    double wakeup;  /* batch done -> the connection's HTTP thread picked the answer up */
    double total;   /* the request's first byte -> its answer queued */
} nd_stage_times;

/* One finished operator request (either protocol) and its stages. Feeds the v2 statistics
 * extension and the normd_request_stage_seconds{stage} histograms. */
void nd_metrics_job(nd_metrics *m, nd_op op, int ok, const nd_stage_times *t);
/* The v2 statistics of op so far (executions are the batches run for op). */
void nd_metrics_v2_stats(nd_metrics *m, nd_op op, nd_v2_stats *out);
/* Labels devices in the output ("cpu", "cuda:0", ...). At most 16 devices. */
void nd_metrics_set_device_label(nd_metrics *m, int device, const char *label);

/* The whole exposition, malloc'ed and NUL-terminated. NULL on allocation failure. */
char *nd_metrics_render(nd_metrics *m, size_t *len);

#endif /* ND_METRICS_H */
