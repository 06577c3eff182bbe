/*
 * metrics.c - counters and fixed-bucket histograms behind one mutex, rendered on demand.
 */
#include "metrics.h"

#include <pthread.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 16
#define MAX_BUCKETS 24

/* HTTP status codes tracked individually; anything else lands in the last slot as its class. */
static const int tracked_codes[] = {200, 400, 401, 404, 405, 413, 415, 500, 503, 504, 507};
#define NCODES (int)(sizeof tracked_codes / sizeof tracked_codes[0])
#define CODE_OTHER_4XX NCODES
#define CODE_OTHER_5XX (NCODES + 1)
#define CODE_SLOTS (NCODES + 2)

typedef struct histogram {
    const double *bounds; /* upper bounds, ascending; +Inf is implicit */
    int nbounds;
    uint64_t counts[MAX_BUCKETS + 1];
    double sum;
    uint64_t count;
} histogram;

static const double seconds_bounds[] = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
                                        10e-3, 25e-3,  50e-3,  100e-3, 250e-3, 0.5,  1,
                                        2.5,   5,      10};
static const double kernel_bounds[] = {2e-6,   5e-6,   10e-6, 25e-6, 50e-6, 100e-6, 250e-6,
                                       500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3, 25e-3, 100e-3};
/* A request's stages run from microseconds (a copy, a wake-up) to seconds (a queue under load). */
static const double stage_bounds[] = {5e-6,  10e-6, 25e-6,  50e-6, 100e-6, 250e-6, 500e-6,
                                      1e-3,  2.5e-3, 5e-3,  10e-3, 25e-3,  50e-3,  100e-3,
                                      250e-3, 1,     5};
static const double rows_bounds[] = {1,    2,    4,     8,     16,    32,     64,    128,
                                     256,  512,  1024,  2048,  4096,  8192,   16384, 32768,
                                     65536, 131072, 262144, 524288, 1048576};

typedef struct device_stats {
    char label[32];
    int64_t inflight;
    uint64_t h2d_bytes, d2h_bytes;
    uint64_t batches, failed;
    histogram compute_s, queue_wait_s, kernel_s;
} device_stats;

/* The stages of a request (nd_stage_times), in the order a request passes them. */
enum {
    STAGE_QUEUE,
    STAGE_INPUT,
    STAGE_INFER,
    STAGE_SUBMIT,
    STAGE_H2D,
    STAGE_KERNEL,
    STAGE_D2H,
    STAGE_OUTPUT,
    STAGE_WAKEUP,
    STAGE_TOTAL,
    STAGE_COUNT
};
static const char *const stage_names[STAGE_COUNT] = {
    "queue", "input", "compute", "submit", "h2d", "kernel", "d2h", "output", "wakeup", "total"};

typedef struct op_stats {
    uint64_t success, fail;
    double success_s, fail_s, stage_s[STAGE_COUNT];
    uint64_t stage_n[STAGE_COUNT];
    uint64_t last_ms;
} op_stats;

struct nd_metrics {
    pthread_mutex_t lock; /* guards everything below */
    uint64_t requests[ND_OP_COUNT + 1][CODE_SLOTS];
    uint64_t batches[ND_OP_COUNT];
    uint64_t batch_failures[ND_OP_COUNT];
    histogram batch_rows;
    histogram request_s;
    int64_t queue_depth;
    op_stats ops[ND_OP_COUNT];
    histogram stage_s[STAGE_COUNT];
    device_stats dev[MAX_DEVICES];
    int ndev;
};

static void hist_init(histogram *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->bounds = bounds;
    h->nbounds = n;
}

static void hist_observe(histogram *h, double v)
{
    int i = 0;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

nd_metrics *nd_metrics_create(void)
{
    nd_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    hist_init(&m->batch_rows, rows_bounds, (int)(sizeof rows_bounds / sizeof rows_bounds[0]));
    hist_init(&m->request_s, seconds_bounds,
              (int)(sizeof seconds_bounds / sizeof seconds_bounds[0]));
    for (int k = 0; k < STAGE_COUNT; k++)
        hist_init(&m->stage_s[k], stage_bounds,
                  (int)(sizeof stage_bounds / sizeof stage_bounds[0]));
    for (int d = 0; d < MAX_DEVICES; d++) {
        hist_init(&m->dev[d].compute_s, seconds_bounds,
                  (int)(sizeof seconds_bounds / sizeof seconds_bounds[0]));
        hist_init(&m->dev[d].queue_wait_s, seconds_bounds,
                  (int)(sizeof seconds_bounds / sizeof seconds_bounds[0]));
        hist_init(&m->dev[d].kernel_s, kernel_bounds,
                  (int)(sizeof kernel_bounds / sizeof kernel_bounds[0]));
    }
    return m;
}

void nd_metrics_destroy(nd_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static int code_slot(int code)
{
    for (int i = 0; i < NCODES; i++)
        if (tracked_codes[i] == code)
            return i;
    return code >= 500 ? CODE_OTHER_5XX : CODE_OTHER_4XX;
}

void nd_metrics_request(nd_metrics *m, int op, int code, double seconds)
{
    if (op < 0 || op > ND_OP_COUNT)
        op = ND_METRICS_OP_OTHER;
    pthread_mutex_lock(&m->lock);
    m->requests[op][code_slot(code)]++;
    if (op != ND_METRICS_OP_OTHER)
        hist_observe(&m->request_s, seconds);
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_job(nd_metrics *m, nd_op op, int ok, const nd_stage_times *t)
{
    if ((int)op < 0 || op >= ND_OP_COUNT)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const double stage[STAGE_COUNT] = {
        [STAGE_QUEUE] = t->queue,   [STAGE_INPUT] = t->input,   [STAGE_INFER] = t->compute,
        [STAGE_SUBMIT] = t->submit,
        [STAGE_H2D] = t->h2d,       [STAGE_KERNEL] = t->kernel, [STAGE_D2H] = t->d2h,
        [STAGE_OUTPUT] = t->output, [STAGE_WAKEUP] = t->wakeup, [STAGE_TOTAL] = t->total};
    pthread_mutex_lock(&m->lock);
    op_stats *o = &m->ops[op];
    if (ok) {
        o->success++;
        o->success_s += t->total;
    } else {
        o->fail++;
        o->fail_s += t->total;
    }
    o->last_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
    for (int k = 0; k < STAGE_COUNT; k++) {
        /* a stage the request never reached (a failed batch) is not a zero-length stage */
        if (k != STAGE_TOTAL && stage[k] <= 0 && !(k == STAGE_QUEUE && ok))
            continue;
        o->stage_s[k] += stage[k];
        o->stage_n[k]++;
        hist_observe(&m->stage_s[k], stage[k]);
    }
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_v2_stats(nd_metrics *m, nd_op op, nd_v2_stats *out)
{
    memset(out, 0, sizeof *out);
    if ((int)op < 0 || op >= ND_OP_COUNT)
        return;
    pthread_mutex_lock(&m->lock);
    const op_stats *o = &m->ops[op];
#define NS(sec) ((uint64_t)((sec) * 1e9 + 0.5))
    out->last_inference_ms = o->last_ms;
    out->inference_count = o->success;
    out->execution_count = m->batches[op] - m->batch_failures[op];
    out->success_count = o->success;
    out->success_ns = NS(o->success_s);
    out->fail_count = o->fail;
    out->fail_ns = NS(o->fail_s);
    out->queue_count = o->stage_n[STAGE_QUEUE];
    out->queue_ns = NS(o->stage_s[STAGE_QUEUE]);
    out->compute_input_count = o->stage_n[STAGE_INPUT];
    out->compute_input_ns = NS(o->stage_s[STAGE_INPUT]);
    out->compute_infer_count = o->stage_n[STAGE_INFER];
    out->compute_infer_ns = NS(o->stage_s[STAGE_INFER]);
    out->compute_output_count = o->stage_n[STAGE_OUTPUT];
    out->compute_output_ns = NS(o->stage_s[STAGE_OUTPUT]);
#undef NS
    pthread_mutex_unlock(&m->lock);
}

static device_stats *device_at(nd_metrics *m, int device)
{
    if (device < 0 || device >= MAX_DEVICES)
        device = 0;
    if (device >= m->ndev)
        m->ndev = device + 1;
    return &m->dev[device];
}

void nd_metrics_batch(nd_metrics *m, nd_op op, int device, int64_t rows, int requests,
                      double queue_wait_s, double compute_s, int failed)
{
    pthread_mutex_lock(&m->lock);
    device_stats *d = device_at(m, device);
    m->batches[op]++;
    if (failed) {
        m->batch_failures[op]++;
        d->failed++;
    }
    hist_observe(&m->batch_rows, (double)rows);
    d->batches++;
    hist_observe(&d->compute_s, compute_s);
    hist_observe(&d->queue_wait_s, queue_wait_s);
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_kernel(nd_metrics *m, int device, double seconds)
{
    pthread_mutex_lock(&m->lock);
    hist_observe(&device_at(m, device)->kernel_s, seconds);
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_transfer(nd_metrics *m, int device, uint64_t h2d_bytes, uint64_t d2h_bytes)
{
    pthread_mutex_lock(&m->lock);
    device_stats *d = device_at(m, device);
    d->h2d_bytes += h2d_bytes;
    d->d2h_bytes += d2h_bytes;
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_inflight_add(nd_metrics *m, int device, int delta)
{
    pthread_mutex_lock(&m->lock);
    device_at(m, device)->inflight += delta;
    pthread_mutex_unlock(&m->lock);
}

void nd_metrics_queue_depth_add(nd_metrics *m, int delta)
{
    pthread_mutex_lock(&m->lock);
    m->queue_depth += delta;
    pthread_mutex_unlock(&m->lock);
}

int64_t nd_metrics_queue_depth(nd_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    int64_t v = m->queue_depth;
    pthread_mutex_unlock(&m->lock);
    return v;
}

void nd_metrics_set_device_label(nd_metrics *m, int device, const char *label)
{
    pthread_mutex_lock(&m->lock);
    snprintf(device_at(m, device)->label, sizeof m->dev[0].label, "%s", label);
    pthread_mutex_unlock(&m->lock);
}

/* ---- rendering ---- */

/* The per-device series, in the order they are written. */
typedef enum series_kind { S_GAUGE, S_COUNTER, S_HIST } series_kind;
typedef struct series {
    const char *name, *help;
    series_kind kind;
    size_t offset; /* of the field in device_stats */
} series;

static const series device_series[] = {
    {"normd_device_batches_in_flight", "Batches running on a device.", S_GAUGE,
     offsetof(device_stats, inflight)},
    {"normd_device_h2d_bytes_total", "Bytes copied host to device.", S_COUNTER,
     offsetof(device_stats, h2d_bytes)},
    {"normd_device_d2h_bytes_total", "Bytes copied device to host.", S_COUNTER,
     offsetof(device_stats, d2h_bytes)},
    {"normd_device_batch_errors_total", "Batches that failed on a device.", S_COUNTER,
     offsetof(device_stats, failed)},
    {"normd_device_compute_seconds", "Time of one batch on its executor (copies and kernel).",
     S_HIST, offsetof(device_stats, compute_s)},
    {"normd_device_queue_wait_seconds", "Wait of a batch's oldest request before it ran.", S_HIST,
     offsetof(device_stats, queue_wait_s)},
    {"normd_device_kernel_seconds",
     "Kernel time of one batch, where the engine measures it (CUDA events).", S_HIST,
     offsetof(device_stats, kernel_s)},
};

typedef struct buf {
    char *p;
    size_t len, cap;
    int failed;
} buf;

static void buf_printf(buf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void render_hist(buf *b, const char *name, const char *labels, const histogram *h)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < h->nbounds; i++) {
        cum += h->counts[i];
        buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i],
                   (unsigned long long)cum);
    }
    cum += h->counts[h->nbounds];
    buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
    buf_printf(b, "%s_sum%s%s%s %.9g\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "",
               h->sum);
    buf_printf(b, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
               labels[0] ? "}" : "", (unsigned long long)h->count);
}

static const char *op_label(int op)
{
    return op == ND_METRICS_OP_OTHER ? "other" : nd_op_name((nd_op)op);
}

char *nd_metrics_render(nd_metrics *m, size_t *len)
{
    buf b = {malloc(16384), 0, 16384, 0};
    if (!b.p)
        return NULL;
    pthread_mutex_lock(&m->lock);

    buf_printf(&b, "# HELP normd_requests_total Requests answered, by operator and HTTP status.\n"
                   "# TYPE normd_requests_total counter\n");
    for (int op = 0; op <= ND_OP_COUNT; op++)
        for (int c = 0; c < CODE_SLOTS; c++) {
            if (!m->requests[op][c])
                continue;
            char code[8];
            if (c < NCODES)
                snprintf(code, sizeof code, "%d", tracked_codes[c]);
            else
                snprintf(code, sizeof code, "%s", c == CODE_OTHER_4XX ? "4xx" : "5xx");
            buf_printf(&b, "normd_requests_total{op=\"%s\",code=\"%s\"} %llu\n", op_label(op),
                       code, (unsigned long long)m->requests[op][c]);
        }

    buf_printf(&b, "# HELP normd_batches_total Backend calls, by operator.\n"
                   "# TYPE normd_batches_total counter\n");
    for (int op = 0; op < ND_OP_COUNT; op++)
        buf_printf(&b, "normd_batches_total{op=\"%s\"} %llu\n", op_label(op),
                   (unsigned long long)m->batches[op]);
    buf_printf(&b, "# HELP normd_batch_failures_total Backend calls that failed.\n"
                   "# TYPE normd_batch_failures_total counter\n");
    for (int op = 0; op < ND_OP_COUNT; op++)
        buf_printf(&b, "normd_batch_failures_total{op=\"%s\"} %llu\n", op_label(op),
                   (unsigned long long)m->batch_failures[op]);

    buf_printf(&b, "# HELP normd_batch_rows Rows (outer slices) per backend call.\n"
                   "# TYPE normd_batch_rows histogram\n");
    render_hist(&b, "normd_batch_rows", "", &m->batch_rows);
    buf_printf(&b, "# HELP normd_request_duration_seconds Operator requests, arrival to answer.\n"
                   "# TYPE normd_request_duration_seconds histogram\n");
    render_hist(&b, "normd_request_duration_seconds", "", &m->request_s);
    buf_printf(&b, "# HELP normd_request_stage_seconds Where operator requests spent their "
                   "time: queue (waiting for a batch), input (packing the batch), compute (the "
                   "backend's run as the host sees it), submit (of compute, the host handing the "
                   "batch to the device), h2d, kernel and d2h (device-timed parts of compute: "
                   "copy in, kernel, copy out), output (scattering results), wakeup (batch done "
                   "to the answer picked up), total (arrival to answer).\n"
                   "# TYPE normd_request_stage_seconds histogram\n");
    for (int k = 0; k < STAGE_COUNT; k++) {
        char labels[32];
        snprintf(labels, sizeof labels, "stage=\"%s\"", stage_names[k]);
        render_hist(&b, "normd_request_stage_seconds", labels, &m->stage_s[k]);
    }
    buf_printf(&b, "# HELP normd_queue_depth Requests accepted and waiting for a batch.\n"
                   "# TYPE normd_queue_depth gauge\nnormd_queue_depth %lld\n",
               (long long)m->queue_depth);

    for (size_t k = 0; k < sizeof device_series / sizeof device_series[0]; k++) {
        const series *sr = &device_series[k];
        buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", sr->name, sr->help, sr->name,
                   sr->kind == S_HIST ? "histogram" : sr->kind == S_GAUGE ? "gauge" : "counter");
        for (int d = 0; d < m->ndev; d++) {
            const char *field = (const char *)&m->dev[d] + sr->offset;
            char labels[64];
            snprintf(labels, sizeof labels, "device=\"%s\"", m->dev[d].label);
            if (sr->kind == S_HIST)
                render_hist(&b, sr->name, labels, (const histogram *)field);
            else if (sr->kind == S_GAUGE)
                buf_printf(&b, "%s{%s} %lld\n", sr->name, labels,
                           (long long)*(const int64_t *)field);
            else
                buf_printf(&b, "%s{%s} %llu\n", sr->name, labels,
                           (unsigned long long)*(const uint64_t *)field);
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
