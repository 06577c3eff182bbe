/*
 * cpu.c - the CPU backend: plain C11 + pthreads.
 *
 * It is the daemon's backend on a machine with no GPU and the reference every GPU result is
 * checked against, so accuracy comes first:
 *   - per-row statistics are accumulated in double (8 independent lanes, so the loop vectorizes
 *     without reassociation), mean and variance in two passes; a row with mean 1e4 and std 1
 *     normalizes to float32 accuracy;
 *   - the normalized value is computed in float as ((x - mean_hi) - mean_lo) * rstd, where
 *     mean_hi + mean_lo is the double mean split into two floats, so the subtraction loses nothing
 *     to the rounding of the mean;
 *   - float16 and bfloat16 rows are widened to a float scratch buffer once (float16 through a
 *     65536-entry table built from nd_half_to_float), computed in float and rounded on store with
 *     nd_dtype.h, so results round exactly as the header specifies.
 * Inner loops are written as blocks of 8 independent lanes plus a scalar tail: GCC's SLP
 * vectorizer turns them into SIMD at -O2, with no reliance on -O3 or -ffast-math.
 *
 * Threads: one persistent pool, created on first use (pthread_once), sized by nd_cpu_set_threads
 * (0 = one per online core, counting the calling thread). A call splits its rows (items) into one
 * contiguous chunk per thread, queues a job, works on its own job's chunks too and waits on the
 * job's completion count; several callers may queue jobs at once. Problems under
 * ND_CPU_SERIAL_ELEMS elements run on the calling thread.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nd_dtype.h"
#include "nd_ops.h"

/* Tuned numbers, in one place. */
enum {
    ND_CPU_SERIAL_ELEMS = 64 * 1024, /* below this many elements no thread is woken */
    ND_CPU_ROW_CAP = 64 * 1024,      /* float scratch per chunk: rows up to this are widened once */
    ND_CPU_STACK_CAP = 1024,         /* scratch on the stack when malloc fails */
    ND_CPU_INNER_BLOCK = 256,        /* softmax over a non-last axis: columns per tile */
    ND_CPU_MAX_THREADS = 256,
};

/* ---------------------------------------------------------------------------------------------
 * Worker pool
 * ------------------------------------------------------------------------------------------- */

typedef void (*nd_task_fn)(void *ctx, int64_t begin, int64_t end);

typedef struct nd_job {
    nd_task_fn fn;
    void *ctx;
    int64_t items;
    int parts;
    int next_part;       /* next chunk to hand out; guarded by pool.mu */
    int done_parts;      /* chunks finished; guarded by pool.mu */
    struct nd_job *next; /* queue link; guarded by pool.mu */
} nd_job;

static struct {
    pthread_once_t once;
    pthread_mutex_t mu;  /* guards head, tail and every queued job's counters */
    pthread_cond_t work; /* signalled when a job is queued */
    pthread_cond_t done; /* broadcast when a job's last chunk finishes */
    nd_job *head, *tail; /* jobs with chunks not yet handed out */
    int nthreads;        /* workers + 1 (the caller); fixed once the pool exists */
    int requested;       /* nd_cpu_set_threads() value, read once at pool creation */
} pool = {
    .once = PTHREAD_ONCE_INIT,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
};

static float half_table[65536]; /* nd_half_to_float of every pattern; filled by pool_init */

/* With pool.mu held: hand out the next chunk of the head job, or return NULL. */
static nd_job *claim_locked(int *part)
{
    nd_job *j = pool.head;
    if (!j)
        return NULL;
    *part = j->next_part++;
    if (j->next_part == j->parts) {
        pool.head = j->next;
        if (!pool.head)
            pool.tail = NULL;
    }
    return j;
}

static void run_part(nd_job *j, int part)
{
    int64_t b = j->items * part / j->parts;
    int64_t e = j->items * (part + 1) / j->parts;
    if (b < e)
        j->fn(j->ctx, b, e);
}

static void *worker_main(void *unused)
{
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        int part;
        nd_job *j;
        while (!(j = claim_locked(&part)))
            pthread_cond_wait(&pool.work, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
        run_part(j, part);
        pthread_mutex_lock(&pool.mu);
        /* j lives on its caller's stack until done_parts reaches parts: touch it no more after. */
        if (++j->done_parts == j->parts)
            pthread_cond_broadcast(&pool.done);
    }
    return NULL;
}

static void pool_init(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        half_table[h] = nd_half_to_float((uint16_t)h);

    pthread_mutex_lock(&pool.mu);
    int n = pool.requested;
    pthread_mutex_unlock(&pool.mu);
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)cores : 1;
    }
    if (n > ND_CPU_MAX_THREADS)
        n = ND_CPU_MAX_THREADS;
    /* The workers live as long as the process; a failed create just leaves fewer of them. */
    int started = 0;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    for (int i = 0; i < n - 1; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, worker_main, NULL) == 0)
            started++;
    }
    pthread_attr_destroy(&attr);
    pool.nthreads = started + 1;
}

void nd_cpu_set_threads(int threads)
{
    pthread_mutex_lock(&pool.mu);
    pool.requested = threads;
    pthread_mutex_unlock(&pool.mu);
}

/* Runs fn over [0, items) in contiguous chunks; returns when every chunk is done. `elems` (the
 * problem's element count) decides whether threads are worth waking. */
static void parallel_for(int64_t items, int64_t elems, nd_task_fn fn, void *ctx)
{
    pthread_once(&pool.once, pool_init);
    int parts = pool.nthreads;
    if (parts > items)
        parts = (int)items;
    if (elems < ND_CPU_SERIAL_ELEMS || parts <= 1) {
        fn(ctx, 0, items);
        return;
    }
    nd_job job = {.fn = fn, .ctx = ctx, .items = items, .parts = parts};
    pthread_mutex_lock(&pool.mu);
    if (pool.tail)
        pool.tail->next = &job;
    else
        pool.head = &job;
    pool.tail = &job;
    pthread_cond_broadcast(&pool.work);
    /* Work on our own job (not others'): its chunks are the ones we wait for. */
    while (job.next_part < job.parts) {
        int part = job.next_part++;
        if (job.next_part == job.parts) {
            /* unlink: our job may sit anywhere in the queue */
            nd_job **pp = &pool.head, *prev = NULL;
            while (*pp != &job) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            *pp = job.next;
            if (pool.tail == &job)
                pool.tail = prev;
        }
        pthread_mutex_unlock(&pool.mu);
        run_part(&job, part);
        pthread_mutex_lock(&pool.mu);
        job.done_parts++;
    }
    while (job.done_parts < job.parts)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
}

/* ---------------------------------------------------------------------------------------------
 * Scratch and conversions
 * ------------------------------------------------------------------------------------------- */

/* Two float buffers of cap elements each, on the heap, or on the stack when malloc fails. */
typedef struct scratch {
    float *a, *b;
    int64_t cap;
    void *heap;
    float stack[2 * ND_CPU_STACK_CAP];
} scratch;

static void scratch_init(scratch *s, int64_t want)
{
    if (want > ND_CPU_ROW_CAP)
        want = ND_CPU_ROW_CAP;
    if (want < 1)
        want = 1;
    s->heap = want > ND_CPU_STACK_CAP ? malloc((size_t)want * 2 * sizeof(float)) : NULL;
    if (s->heap) {
        s->cap = want;
        s->a = s->heap;
    } else {
        s->cap = want < ND_CPU_STACK_CAP ? want : ND_CPU_STACK_CAP;
        s->a = s->stack;
    }
    s->b = s->a + s->cap;
}

static void scratch_free(scratch *s)
{
    free(s->heap);
}

/* n elements of p starting at off, as floats: p itself for float32, else widened into buf. */
static const float *load_f32(nd_dtype dt, const void *p, int64_t off, int64_t n, float *buf)
{
    if (dt == ND_FLOAT32)
        return (const float *)p + off;
    const uint16_t *h = (const uint16_t *)p + off;
    if (dt == ND_FLOAT16) {
        for (int64_t i = 0; i < n; i++)
            buf[i] = half_table[h[i]];
    } else {
        for (int64_t i = 0; i < n; i++)
            buf[i] = nd_bits_f32((uint32_t)h[i] << 16);
    }
    return buf;
}

/* Where to compute n output floats: p itself for float32, else buf (then store_f32). */
static float *out_f32(nd_dtype dt, void *p, int64_t off, float *buf)
{
    return dt == ND_FLOAT32 ? (float *)p + off : buf;
}

/* Branch-free copies of nd_float_to_half and nd_float_to_bf16 (every case computed, the answer
 * picked by bit masks) so that the store loops vectorize; they agree with nd_dtype.h on all 2^32
 * inputs (checked exhaustively when they were written). */
static inline uint16_t half_round(float f)
{
    uint32_t u = nd_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    uint32_t special = 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u); /* NaN, inf, overflow */
    uint32_t sub = nd_f32_bits(nd_bits_f32(abs) + 0.5f) - 0x3f000000u;
    uint32_t norm = (abs + 0xc8000fffu + ((abs >> 13) & 1u)) >> 13;
    uint32_t m_sub = 0u - (uint32_t)(abs < 0x38800000u);
    uint32_t m_special = 0u - (uint32_t)(abs >= 0x477ff000u);
    uint32_t r = (sub & m_sub) | (norm & ~m_sub);
    r = (special & m_special) | (r & ~m_special);
    return (uint16_t)(sign | r);
}

static inline uint16_t bf16_round(float f)
{
    uint32_t u = nd_f32_bits(f);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t q = (u >> 16) | 0x40u;
    uint32_t m = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
    return (uint16_t)((q & m) | (r & ~m));
}

/* Rounds n floats of src into p at off (nothing to do when src already is p). */
static void store_f32(nd_dtype dt, void *p, int64_t off, const float *src, int64_t n)
{
    if (dt == ND_FLOAT32) {
        float *d = (float *)p + off;
        if (d != src)
            memcpy(d, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = (uint16_t *)p + off;
    int64_t i = 0;
    if (dt == ND_FLOAT16) {
        for (; i + 8 <= n; i += 8) {
            uint16_t t[8];
            for (int j = 0; j < 8; j++)
                t[j] = half_round(src[i + j]);
            memcpy(h + i, t, sizeof t);
        }
        for (; i < n; i++)
            h[i] = nd_float_to_half(src[i]);
    } else {
        for (; i + 8 <= n; i += 8) {
            uint16_t t[8];
            for (int j = 0; j < 8; j++)
                t[j] = bf16_round(src[i + j]);
            memcpy(h + i, t, sizeof t);
        }
        for (; i < n; i++)
            h[i] = nd_float_to_bf16(src[i]);
    }
}

/* A whole parameter vector as floats: the tensor itself for float32, else a malloc'd copy
 * (*owned is set to it for free()). Returns NULL only when p is NULL or malloc fails. */
static const float *param_f32(nd_dtype dt, const void *p, int64_t n, float **owned)
{
    *owned = NULL;
    if (!p || dt == ND_FLOAT32)
        return p;
    float *f = malloc((size_t)n * sizeof(float));
    if (!f)
        return NULL;
    pthread_once(&pool.once, pool_init); /* the table */
    load_f32(dt, p, 0, n, f);
    *owned = f;
    return f;
}

/* ---------------------------------------------------------------------------------------------
 * Vector pieces: 8 independent lanes plus a scalar tail
 * ------------------------------------------------------------------------------------------- */

/* y[i..i+7] = expr (of j): all eight loads come before the stores, so the SLP vectorizer needs
 * no alias check (and y may be x). */
#define ND_BLOCK8(y, i, expr)                                                                    \
    do {                                                                                         \
        float t_[8];                                                                             \
        for (int j = 0; j < 8; j++)                                                              \
            t_[j] = (expr);                                                                      \
        for (int j = 0; j < 8; j++)                                                              \
            (y)[(i) + j] = t_[j];                                                                \
    } while (0)

static double sum_f64(const float *x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j];
    for (; i < n; i++)
        acc[0] += (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum (x - m)^2 in double */
static double sqdev_f64(const float *x, int64_t n, double m)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)x[i + j] - m;
            acc[j] += d * d;
        }
    for (; i < n; i++) {
        double d = (double)x[i] - m;
        acc[0] += d * d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static double sumsq_f64(const float *x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double d = (double)x[i + j];
            acc[j] += d * d;
        }
    for (; i < n; i++)
        acc[0] += (double)x[i] * (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static float max_f32(const float *x, int64_t n)
{
    float acc[8];
    int64_t i = 0;
    for (int j = 0; j < 8; j++)
        acc[j] = -INFINITY;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    for (; i < n; i++)
        acc[0] = x[i] > acc[0] ? x[i] : acc[0];
    float m = acc[0];
    for (int j = 1; j < 8; j++)
        m = acc[j] > m ? acc[j] : m;
    return m;
}

/* y = ((x - mhi) - mlo) * rs * g + b, g and b optional */
static void norm_apply(const float *x, float *y, int64_t n, float mhi, float mlo, float rs,
                       const float *g, const float *b)
{
    int64_t i = 0;
    if (g && b) {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, ((x[i + j] - mhi) - mlo) * rs * g[i + j] + b[i + j]);
        for (; i < n; i++)
            y[i] = ((x[i] - mhi) - mlo) * rs * g[i] + b[i];
    } else if (g) {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, ((x[i + j] - mhi) - mlo) * rs * g[i + j]);
        for (; i < n; i++)
            y[i] = ((x[i] - mhi) - mlo) * rs * g[i];
    } else if (b) {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, ((x[i + j] - mhi) - mlo) * rs + b[i + j]);
        for (; i < n; i++)
            y[i] = ((x[i] - mhi) - mlo) * rs + b[i];
    } else {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, ((x[i + j] - mhi) - mlo) * rs);
        for (; i < n; i++)
            y[i] = ((x[i] - mhi) - mlo) * rs;
    }
}

/* y = x * rs * w, w optional */
static void rms_apply(const float *x, float *y, int64_t n, float rs, const float *w)
{
    int64_t i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, x[i + j] * rs * w[i + j]);
        for (; i < n; i++)
            y[i] = x[i] * rs * w[i];
    } else {
        for (; i + 8 <= n; i += 8)
            ND_BLOCK8(y, i, x[i + j] * rs);
        for (; i < n; i++)
            y[i] = x[i] * rs;
    }
}

static void scale_f32(const float *x, float *y, int64_t n, float s)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        ND_BLOCK8(y, i, x[i + j] * s);
    for (; i < n; i++)
        y[i] = x[i] * s;
}

/* (x - m) is exact for x near m (Sterbenz), so subtracting m and the small lse separately keeps
 * float32 accuracy where m + lse rounded to one float would not (m = 1e4: error 5e-4). */
static void logsm_f32(const float *x, float *y, int64_t n, float m, float lse)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        ND_BLOCK8(y, i, (x[i + j] - m) - lse);
    for (; i < n; i++)
        y[i] = (x[i] - m) - lse;
}

/* e = exp(x - m); returns the sum of e in double. e may be NULL (sum only). */
static double exp_sum(const float *x, float *e, int64_t n, float m)
{
    double acc[4] = {0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) {
            float v = expf(x[i + j] - m);
            if (e)
                e[i + j] = v;
            acc[j] += v;
        }
    for (; i < n; i++) {
        float v = expf(x[i] - m);
        if (e)
            e[i] = v;
        acc[0] += v;
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* ---------------------------------------------------------------------------------------------
 * LayerNorm and RMSNorm
 * ------------------------------------------------------------------------------------------- */

typedef struct norm_ctx {
    const nd_norm_args *a;
    const float *g, *b; /* float32 views of gamma and beta (NULL when absent) */
    int rms;
} norm_ctx;

static void norm_rows(void *vctx, int64_t r0, int64_t r1)
{
    const norm_ctx *ctx = vctx;
    const nd_norm_args *a = ctx->a;
    const nd_dtype dt = a->dtype;
    const int64_t cols = a->cols;
    scratch s;
    scratch_init(&s, dt == ND_FLOAT32 ? 1 : cols);
    /* float32 rows are read in place; other rows are widened once when they fit the scratch,
     * else chunk by chunk in every pass. */
    const int whole = dt == ND_FLOAT32 || cols <= s.cap;
    const int64_t step = whole ? cols : s.cap;

    for (int64_t r = r0; r < r1; r++) {
        const int64_t base = r * cols;
        const float *xw = whole ? load_f32(dt, a->x, base, cols, s.a) : NULL;

        double m = 0.0;
        if (!ctx->rms) {
            double sum = 0.0;
            for (int64_t c = 0; c < cols; c += step) {
                int64_t n = cols - c < step ? cols - c : step;
                const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
                sum += sum_f64(xc, n);
            }
            m = sum / (double)cols;
        }
        double ss = 0.0;
        for (int64_t c = 0; c < cols; c += step) {
            int64_t n = cols - c < step ? cols - c : step;
            const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
            ss += ctx->rms ? sumsq_f64(xc, n) : sqdev_f64(xc, n, m);
        }
        double rstd = 1.0 / sqrt(ss / (double)cols + (double)a->eps);
        float mhi = (float)m, mlo = (float)(m - (double)mhi), rs = (float)rstd;

        for (int64_t c = 0; c < cols; c += step) {
            int64_t n = cols - c < step ? cols - c : step;
            const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
            float *yc = out_f32(dt, a->y, base + c, s.b);
            const float *g = ctx->g ? ctx->g + c : NULL;
            if (ctx->rms) {
                rms_apply(xc, yc, n, rs, g);
            } else {
                norm_apply(xc, yc, n, mhi, mlo, rs, g, ctx->b ? ctx->b + c : NULL);
            }
            store_f32(dt, a->y, base + c, yc, n);
        }
        if (a->mean && !ctx->rms)
            a->mean[r] = (float)m;
        if (a->rstd)
            a->rstd[r] = rs;
    }
    scratch_free(&s);
}

static nd_status norm_run(const nd_norm_args *a, int rms, nd_error *err)
{
    nd_status st = nd_norm_args_check(a, err);
    if (st)
        return st;
    float *g_owned, *b_owned = NULL;
    norm_ctx ctx = {.a = a, .rms = rms};
    ctx.g = param_f32(a->dtype, a->gamma, a->cols, &g_owned);
    if (!rms)
        ctx.b = param_f32(a->dtype, a->beta, a->cols, &b_owned);
    if ((a->gamma && !ctx.g) || (!rms && a->beta && !ctx.b)) {
        free(g_owned);
        free(b_owned);
        return nd_error_set(err, ND_ENOMEM, "out of memory widening %lld parameters",
                            (long long)a->cols);
    }
    parallel_for(a->rows, a->rows * a->cols, norm_rows, &ctx);
    free(g_owned);
    free(b_owned);
    return ND_OK;
}

nd_status nd_cpu_layernorm(const nd_norm_args *a, nd_error *err)
{
    return norm_run(a, 0, err);
}

nd_status nd_cpu_rmsnorm(const nd_norm_args *a, nd_error *err)
{
    return norm_run(a, 1, err);
}

/* ---------------------------------------------------------------------------------------------
 * Softmax and log-softmax
 * ------------------------------------------------------------------------------------------- */

typedef struct softmax_ctx {
    const nd_softmax_args *a;
    int log;
    int64_t nblk; /* inner blocks per outer index (inner > 1) */
} softmax_ctx;

/* inner == 1: each item is one contiguous row of dim elements. */
static void softmax_rows(void *vctx, int64_t r0, int64_t r1)
{
    const softmax_ctx *ctx = vctx;
    const nd_softmax_args *a = ctx->a;
    const nd_dtype dt = a->dtype;
    const int64_t dim = a->dim;
    scratch s;
    scratch_init(&s, dt == ND_FLOAT32 ? 1 : dim);
    const int whole = dt == ND_FLOAT32 || dim <= s.cap;
    const int64_t step = whole ? dim : s.cap;

    for (int64_t r = r0; r < r1; r++) {
        const int64_t base = r * dim;
        const float *xw = whole ? load_f32(dt, a->x, base, dim, s.a) : NULL;
        float mx = -INFINITY;
        for (int64_t c = 0; c < dim; c += step) {
            int64_t n = dim - c < step ? dim - c : step;
            const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
            float m = max_f32(xc, n);
            mx = m > mx ? m : mx;
        }
        /* For softmax on a row that fits, pass 2 leaves exp(x - max) in the output buffer and
         * pass 3 only scales it; otherwise pass 3 recomputes the exponentials. */
        const int keep = !ctx->log && whole;
        float *yw = out_f32(dt, a->y, base, s.b);
        double sum = 0.0;
        for (int64_t c = 0; c < dim; c += step) {
            int64_t n = dim - c < step ? dim - c : step;
            const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
            sum += exp_sum(xc, keep ? yw + c : NULL, n, mx);
        }
        const float inv = (float)(1.0 / sum);
        const float lse = (float)log(sum); /* log-softmax: y = (x - max) - lse */
        for (int64_t c = 0; c < dim; c += step) {
            int64_t n = dim - c < step ? dim - c : step;
            float *yc = keep ? yw + c : out_f32(dt, a->y, base + c, s.b);
            if (keep) {
                scale_f32(yc, yc, n, inv);
            } else {
                const float *xc = whole ? xw + c : load_f32(dt, a->x, base + c, n, s.a);
                if (ctx->log) {
                    logsm_f32(xc, yc, n, mx, lse);
                } else {
                    exp_sum(xc, yc, n, mx);
                    scale_f32(yc, yc, n, inv);
                }
            }
            store_f32(dt, a->y, base + c, yc, n);
        }
    }
    scratch_free(&s);
}

/* inner > 1: each item is a tile (one outer index, dim x up to ND_CPU_INNER_BLOCK columns); every
 * pass walks the tile row by row, so memory is read contiguously along inner. */
static void softmax_tiles(void *vctx, int64_t t0, int64_t t1)
{
    const softmax_ctx *ctx = vctx;
    const nd_softmax_args *a = ctx->a;
    const nd_dtype dt = a->dtype;
    const int64_t dim = a->dim, inner = a->inner;
    float xbuf[ND_CPU_INNER_BLOCK], ybuf[ND_CPU_INNER_BLOCK];
    float mx[ND_CPU_INNER_BLOCK], post[ND_CPU_INNER_BLOCK];
    double sum[ND_CPU_INNER_BLOCK];

    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / ctx->nblk;
        const int64_t i0 = (t % ctx->nblk) * ND_CPU_INNER_BLOCK;
        const int64_t w = inner - i0 < ND_CPU_INNER_BLOCK ? inner - i0 : ND_CPU_INNER_BLOCK;
        const int64_t base = o * dim * inner + i0;

        for (int64_t i = 0; i < w; i++) {
            mx[i] = -INFINITY;
            sum[i] = 0.0;
        }
        for (int64_t d = 0; d < dim; d++) {
            const float *xr = load_f32(dt, a->x, base + d * inner, w, xbuf);
            for (int64_t i = 0; i < w; i++)
                mx[i] = xr[i] > mx[i] ? xr[i] : mx[i];
        }
        for (int64_t d = 0; d < dim; d++) {
            const float *xr = load_f32(dt, a->x, base + d * inner, w, xbuf);
            for (int64_t i = 0; i < w; i++)
                sum[i] += expf(xr[i] - mx[i]);
        }
        for (int64_t i = 0; i < w; i++)
            post[i] = ctx->log ? (float)log(sum[i]) : (float)(1.0 / sum[i]);
        for (int64_t d = 0; d < dim; d++) {
            const int64_t off = base + d * inner;
            const float *xr = load_f32(dt, a->x, off, w, xbuf);
            float *yr = out_f32(dt, a->y, off, ybuf);
            if (ctx->log) {
                for (int64_t i = 0; i < w; i++)
                    yr[i] = (xr[i] - mx[i]) - post[i];
            } else {
                for (int64_t i = 0; i < w; i++)
                    yr[i] = expf(xr[i] - mx[i]) * post[i];
            }
            store_f32(dt, a->y, off, yr, w);
        }
    }
}

nd_status nd_cpu_softmax(const nd_softmax_args *a, int log_, nd_error *err)
{
    nd_status st = nd_softmax_args_check(a, err);
    if (st)
        return st;
    pthread_once(&pool.once, pool_init);
    softmax_ctx ctx = {.a = a, .log = log_ != 0};
    const int64_t elems = a->outer * a->dim * a->inner;
    if (a->inner == 1) {
        parallel_for(a->outer, elems, softmax_rows, &ctx);
    } else {
        ctx.nblk = (a->inner + ND_CPU_INNER_BLOCK - 1) / ND_CPU_INNER_BLOCK;
        parallel_for(a->outer * ctx.nblk, elems, softmax_tiles, &ctx);
    }
    return ND_OK;
}

/* ---------------------------------------------------------------------------------------------
 * PReLU
 * ------------------------------------------------------------------------------------------- */

enum { ND_PRELU_GRAIN = 2048 }; /* elements per work item */

typedef struct prelu_ctx {
    const nd_prelu_args *a;
    const float *alpha; /* float32 view, alpha_count values */
    int64_t total;
} prelu_ctx;

/* A select by bit mask, not a branch, so that blocks of 8 vectorize at -O2 (no if-conversion
 * there). NaN compares false and takes a * NaN = NaN, as x > 0 ? x : a * x does. */
static inline float prelu1(float x, float a)
{
    uint32_t m = 0u - (uint32_t)(x > 0.0f);
    return nd_bits_f32((nd_f32_bits(x) & m) | (nd_f32_bits(a * x) & ~m));
}

static void prelu_shared(const float *x, float *y, int64_t n, float al)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        ND_BLOCK8(y, i, prelu1(x[i + j], al));
    for (; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : al * x[i];
}

static void prelu_vec(const float *x, float *y, int64_t n, const float *al)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        ND_BLOCK8(y, i, prelu1(x[i + j], al[i + j]));
    for (; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : al[i] * x[i];
}

/* Items are grains of ND_PRELU_GRAIN flat elements. The channel of the first element of a block
 * takes one division; after that (channel, position in inner) are advanced by counting. */
static void prelu_grains(void *vctx, int64_t g0, int64_t g1)
{
    const prelu_ctx *ctx = vctx;
    const nd_prelu_args *a = ctx->a;
    const nd_dtype dt = a->dtype;
    const int64_t inner = a->inner, channels = a->channels;
    const int shared = a->alpha_count == 1;
    float xbuf[ND_PRELU_GRAIN], ybuf[ND_PRELU_GRAIN];

    const int64_t k0 = g0 * ND_PRELU_GRAIN;
    const int64_t k1 = g1 * ND_PRELU_GRAIN < ctx->total ? g1 * ND_PRELU_GRAIN : ctx->total;
    int64_t c = (k0 / inner) % channels, i = k0 % inner;
    for (int64_t k = k0; k < k1; k += ND_PRELU_GRAIN) {
        const int64_t n = k1 - k < ND_PRELU_GRAIN ? k1 - k : ND_PRELU_GRAIN;
        const float *x = load_f32(dt, a->x, k, n, xbuf);
        float *y = out_f32(dt, a->y, k, ybuf);
        if (shared) {
            prelu_shared(x, y, n, ctx->alpha[0]);
        } else if (inner == 1) {
            /* runs along channels: alpha is a vector */
            for (int64_t j = 0; j < n;) {
                int64_t run = channels - c < n - j ? channels - c : n - j;
                prelu_vec(x + j, y + j, run, ctx->alpha + c);
                j += run;
                c = c + run == channels ? 0 : c + run;
            }
        } else {
            /* runs along inner: alpha is a scalar */
            for (int64_t j = 0; j < n;) {
                int64_t run = inner - i < n - j ? inner - i : n - j;
                prelu_shared(x + j, y + j, run, ctx->alpha[c]);
                j += run;
                i += run;
                if (i == inner) {
                    i = 0;
                    c = c + 1 == channels ? 0 : c + 1;
                }
            }
        }
        store_f32(dt, a->y, k, y, n);
    }
}

nd_status nd_cpu_prelu(const nd_prelu_args *a, nd_error *err)
{
    nd_status st = nd_prelu_args_check(a, err);
    if (st)
        return st;
    float *owned;
    prelu_ctx ctx = {.a = a, .total = a->outer * a->channels * a->inner};
    ctx.alpha = param_f32(a->dtype, a->alpha, a->alpha_count, &owned);
    if (!ctx.alpha)
        return nd_error_set(err, ND_ENOMEM, "out of memory widening %lld alpha values",
                            (long long)a->alpha_count);
    pthread_once(&pool.once, pool_init);
    int64_t grains = (ctx.total + ND_PRELU_GRAIN - 1) / ND_PRELU_GRAIN;
    parallel_for(grains, ctx.total, prelu_grains, &ctx);
    free(owned);
    return ND_OK;
}
