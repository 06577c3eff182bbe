/*
 * test_cpu.c - kernels/cpu.c against the float64 reference of tests/util, with the shared
 * tolerance rule. Inputs are random, outputs are poisoned before every call, and every op runs in
 * every dtype over the widths and shapes listed below.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/nd_dtype.h"
#include "../kernels/nd_ops.h"
#include "util/nd_testutil.h"

static const nd_dtype all_dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
static const int64_t widths[] = {1, 3, 7, 32, 1000, 4097};

static void *xalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert_not_null(p);
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * LayerNorm and RMSNorm
 * ------------------------------------------------------------------------------------------- */

typedef struct norm_case {
    nd_dtype dt;
    int64_t rows, cols;
    int gamma, beta, stats, rms;
    double mean, std; /* of x */
    uint64_t seed;
} norm_case;

/* Runs one case; returns the number of mismatches (0 = pass) and fills msg with the first. */
static int64_t run_norm(const norm_case *t, char *msg, size_t msg_size)
{
    const int64_t n = t->rows * t->cols;
    const size_t es = nd_dtype_size(t->dt);
    uint64_t st = t->seed;
    void *x = xalloc((size_t)n * es), *y = xalloc((size_t)n * es);
    void *g = xalloc((size_t)t->cols * es), *b = xalloc((size_t)t->cols * es);
    double *x64 = xalloc((size_t)n * 8), *y64 = xalloc((size_t)n * 8);
    double *g64 = xalloc((size_t)t->cols * 8), *b64 = xalloc((size_t)t->cols * 8);
    double *m64 = xalloc((size_t)t->rows * 8), *r64 = xalloc((size_t)t->rows * 8);
    float *mean = xalloc((size_t)t->rows * 4), *rstd = xalloc((size_t)t->rows * 4);

    nd_fill_random(t->dt, x, n, t->mean, t->std, &st, x64);
    nd_fill_random(t->dt, g, t->cols, 1.0, 0.5, &st, g64);
    nd_fill_random(t->dt, b, t->cols, 0.0, 0.5, &st, b64);
    nd_poison(t->dt, y, n);
    nd_poison(ND_FLOAT32, mean, t->rows);
    nd_poison(ND_FLOAT32, rstd, t->rows);

    nd_norm_args a = {
        .dtype = t->dt, .rows = t->rows, .cols = t->cols, .x = x, .y = y,
        .gamma = t->gamma ? g : NULL, .beta = t->beta ? b : NULL,
        .eps = t->rms ? 1e-6f : 1e-5f,
        .mean = t->stats ? mean : NULL, .rstd = t->stats ? rstd : NULL,
    };
    nd_error err = {{0}};
    nd_status s = t->rms ? nd_cpu_rmsnorm(&a, &err) : nd_cpu_layernorm(&a, &err);
    cr_assert_eq(s, ND_OK, "status %d: %s", s, err.msg);

    if (t->rms)
        nd_ref_rmsnorm(x64, t->rows, t->cols, t->gamma ? g64 : NULL, (double)a.eps, y64, r64);
    else
        nd_ref_layernorm(x64, t->rows, t->cols, t->gamma ? g64 : NULL, t->beta ? b64 : NULL,
                         (double)a.eps, y64, m64, r64);
    int64_t bad = nd_compare(t->dt, y, y64, n, "y", msg, msg_size);
    if (!bad && t->stats) {
        if (!t->rms)
            bad += nd_compare_f32(mean, m64, t->rows, "mean", msg, msg_size);
        if (!bad)
            bad += nd_compare_f32(rstd, r64, t->rows, "rstd", msg, msg_size);
    }
    if (!t->stats && !bad) {
        /* NULL statistics must stay untouched */
        for (int64_t r = 0; r < t->rows; r++)
            if (!isnan(mean[r]) || !isnan(rstd[r]))
                bad++;
        if (bad)
            snprintf(msg, msg_size, "mean/rstd written although NULL");
    }
    free(x), free(y), free(g), free(b), free(x64), free(y64), free(g64), free(b64);
    free(m64), free(r64), free(mean), free(rstd);
    return bad;
}

static void check_norm(norm_case t)
{
    char msg[256];
    int64_t bad = run_norm(&t, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%s %s rows=%lld cols=%lld gamma=%d beta=%d mean=%g: %lld bad, first %s",
                 t.rms ? "rmsnorm" : "layernorm", nd_dtype_name(t.dt), (long long)t.rows,
                 (long long)t.cols, t.gamma, t.beta, t.mean, (long long)bad, msg);
}

Test(cpu_layernorm, every_dtype_width_and_param_combination)
{
    uint64_t seed = 11;
    for (int d = 0; d < 3; d++)
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int rows = 1; rows <= 37; rows += 36)
                for (int p = 0; p < 4; p++)
                    check_norm((norm_case){all_dtypes[d], rows, widths[w], p & 1, p >> 1, p & 1,
                                           0, 0.5, 3.0, seed++});
}

Test(cpu_rmsnorm, every_dtype_width_and_param_combination)
{
    uint64_t seed = 12;
    for (int d = 0; d < 3; d++)
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int rows = 1; rows <= 37; rows += 36)
                for (int p = 0; p < 2; p++)
                    check_norm((norm_case){all_dtypes[d], rows, widths[w], p, 0, p, 1, 0.5, 3.0,
                                           seed++});
}

Test(cpu_layernorm, many_rows_use_the_pool)
{
    for (int d = 0; d < 3; d++) {
        check_norm((norm_case){all_dtypes[d], 300, 1000, 1, 1, 1, 0, 0.0, 1.0, 21 + d});
        check_norm((norm_case){all_dtypes[d], 97, 4097, 1, 0, 1, 1, 0.0, 1.0, 31 + d});
    }
}

/* Rows wider than the backend's float scratch are processed chunk by chunk in every pass. */
Test(cpu_layernorm, very_wide_rows)
{
    for (int d = 0; d < 3; d++) {
        check_norm((norm_case){all_dtypes[d], 2, 70001, 1, 1, 1, 0, 3.0, 2.0, 41 + d});
        check_norm((norm_case){all_dtypes[d], 2, 70001, 1, 0, 1, 1, 3.0, 2.0, 51 + d});
    }
}

/* Mean 1e4, std 1: a naive E[x^2] - E[x]^2 in float loses every digit of the variance. */
Test(cpu_layernorm, large_mean_small_std)
{
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 3; c++) {
            int64_t cols = c == 0 ? 7 : c == 1 ? 1024 : 4097;
            check_norm((norm_case){all_dtypes[d], 9, cols, 1, 1, 1, 0, 1e4, 1.0, 61 + c});
            check_norm((norm_case){all_dtypes[d], 9, cols, 0, 0, 1, 0, 1e4, 1.0, 71 + c});
            check_norm((norm_case){all_dtypes[d], 9, cols, 1, 0, 1, 1, 1e4, 1.0, 81 + c});
        }
}

/* ---------------------------------------------------------------------------------------------
 * Softmax and log-softmax
 * ------------------------------------------------------------------------------------------- */

static int64_t run_softmax_mask(nd_dtype dt, int64_t outer, int64_t dim, int64_t inner, int log_,
                                double mean, double std, int masked, uint64_t seed, char *msg,
                                size_t msg_size)
{
    const int64_t n = outer * dim * inner;
    const size_t es = nd_dtype_size(dt);
    void *x = xalloc((size_t)n * es), *y = xalloc((size_t)n * es);
    double *x64 = xalloc((size_t)n * 8), *y64 = xalloc((size_t)n * 8);
    nd_fill_random(dt, x, n, mean, std, &seed, x64);
    if (masked)
        nd_mask_attention(dt, x, x64, outer, dim, inner, &seed);
    if (masked == 2)
        nd_mask_nonfinite(dt, x, x64, outer, dim, inner);
    nd_poison(dt, y, n);
    nd_softmax_args a = {.dtype = dt, .outer = outer, .dim = dim, .inner = inner, .x = x, .y = y};
    nd_error err = {{0}};
    nd_status s = nd_cpu_softmax(&a, log_, &err);
    cr_assert_eq(s, ND_OK, "status %d: %s", s, err.msg);
    nd_ref_softmax(x64, outer, dim, inner, log_, y64);
    int64_t bad = nd_compare(dt, y, y64, n, "y", msg, msg_size);
    free(x), free(y), free(x64), free(y64);
    return bad;
}

static int64_t run_softmax(nd_dtype dt, int64_t outer, int64_t dim, int64_t inner, int log_,
                           double mean, double std, uint64_t seed, char *msg, size_t msg_size)
{
    return run_softmax_mask(dt, outer, dim, inner, log_, mean, std, 0, seed, msg, msg_size);
}

static void check_softmax(nd_dtype dt, int64_t outer, int64_t dim, int64_t inner, int log_,
                          double mean, double std, uint64_t seed)
{
    char msg[256];
    int64_t bad = run_softmax(dt, outer, dim, inner, log_, mean, std, seed, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%s %s (outer %lld, dim %lld, inner %lld) x~N(%g,%g): %lld bad, first %s",
                 log_ ? "log_softmax" : "softmax", nd_dtype_name(dt), (long long)outer,
                 (long long)dim, (long long)inner, mean, std, (long long)bad, msg);
}

Test(cpu_softmax, last_axis_every_dtype_and_width)
{
    uint64_t seed = 100;
    for (int d = 0; d < 3; d++)
        for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
            for (int lg = 0; lg < 2; lg++) {
                check_softmax(all_dtypes[d], 1, widths[w], 1, lg, 0.0, 2.0, seed++);
                check_softmax(all_dtypes[d], 41, widths[w], 1, lg, 0.0, 2.0, seed++);
            }
}

/* Masked scores over the last axis and others, rows short and long: masked 1 (nd_mask_attention:
 * causal prefixes, scattered -inf, whole columns masked, whose softmax is NaN) or 2 (also
 * nd_mask_nonfinite: a NaN or +inf among the masked scores of some columns, which are then NaN
 * throughout). */
static void check_masked_scores(int masked, uint64_t seed)
{
    static const int64_t shapes[][3] = {{64, 33, 1}, {9, 5000, 1}, {7, 300, 24}, {3, 40, 130}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int lg = 0; lg < 2; lg++) {
                char msg[256];
                int64_t bad = run_softmax_mask(all_dtypes[d], shapes[i][0], shapes[i][1],
                                               shapes[i][2], lg, 0.0, 3.0, masked, seed++, msg,
                                               sizeof msg);
                cr_expect_eq(bad, 0, "masked%s %s %s (%lld, %lld, %lld): %lld bad, first %s",
                             masked == 2 ? ", non-finite" : "", lg ? "log_softmax" : "softmax",
                             nd_dtype_name(all_dtypes[d]), (long long)shapes[i][0],
                             (long long)shapes[i][1], (long long)shapes[i][2], (long long)bad, msg);
            }
}

Test(cpu_softmax, masked_scores) { check_masked_scores(1, 500); }

Test(cpu_softmax, masked_scores_nonfinite) { check_masked_scores(2, 600); }

/* Random tensors of rank 1-5, reduced along every axis. */
Test(cpu_softmax, every_axis_of_random_tensors)
{
    uint64_t st = 7;
    for (int iter = 0; iter < 60; iter++) {
        int rank = 1 + (int)(nd_rand_u64(&st) % 5);
        int64_t shape[5];
        for (int k = 0; k < rank; k++) {
            uint64_t r = nd_rand_u64(&st) % 10;
            shape[k] = r < 2 ? 1 : r < 8 ? 2 + (int64_t)(nd_rand_u64(&st) % 9)
                                         : 100 + (int64_t)(nd_rand_u64(&st) % 300);
        }
        for (int axis = 0; axis < rank; axis++) {
            int64_t outer = 1, inner = 1;
            for (int k = 0; k < axis; k++)
                outer *= shape[k];
            for (int k = axis + 1; k < rank; k++)
                inner *= shape[k];
            if (outer * shape[axis] * inner > 2000000)
                continue;
            nd_dtype dt = all_dtypes[iter % 3];
            check_softmax(dt, outer, shape[axis], inner, iter & 1, 0.0, 3.0, 1000 + iter);
        }
    }
}

Test(cpu_softmax, inner_and_outer_edges)
{
    for (int d = 0; d < 3; d++)
        for (int lg = 0; lg < 2; lg++) {
            check_softmax(all_dtypes[d], 1, 5, 300, lg, 0, 1, 200 + d);  /* outer 1 */
            check_softmax(all_dtypes[d], 3, 1, 7, lg, 0, 1, 210 + d);    /* dim 1 */
            check_softmax(all_dtypes[d], 1, 1, 1, lg, 0, 1, 220 + d);    /* one element */
            check_softmax(all_dtypes[d], 50, 300, 257, lg, 0, 1, 230 + d); /* pool, tiles */
            check_softmax(all_dtypes[d], 2, 70001, 1, lg, 0, 1, 240 + d); /* chunked rows */
            check_softmax(all_dtypes[d], 200, 1000, 1, lg, 0, 1, 250 + d); /* pool, rows */
        }
}

Test(cpu_softmax, large_mean)
{
    for (int d = 0; d < 3; d++)
        for (int lg = 0; lg < 2; lg++) {
            check_softmax(all_dtypes[d], 9, 1024, 1, lg, 1e4, 1.0, 300 + d);
            check_softmax(all_dtypes[d], 3, 64, 33, lg, 1e4, 1.0, 310 + d);
        }
}

/* ---------------------------------------------------------------------------------------------
 * PReLU
 * ------------------------------------------------------------------------------------------- */

static void check_prelu(nd_dtype dt, int64_t outer, int64_t channels, int64_t inner, int shared,
                        uint64_t seed)
{
    const int64_t n = outer * channels * inner, na = shared ? 1 : channels;
    const size_t es = nd_dtype_size(dt);
    void *x = xalloc((size_t)n * es), *y = xalloc((size_t)n * es), *al = xalloc((size_t)na * es);
    double *x64 = xalloc((size_t)n * 8), *y64 = xalloc((size_t)n * 8);
    double *a64 = xalloc((size_t)na * 8);
    nd_fill_random(dt, x, n, 0.0, 2.0, &seed, x64);
    nd_fill_random(dt, al, na, 0.25, 0.3, &seed, a64);
    nd_poison(dt, y, n);
    nd_prelu_args a = {.dtype = dt, .outer = outer, .channels = channels, .inner = inner,
                       .x = x, .y = y, .alpha = al, .alpha_count = na};
    nd_error err = {{0}};
    nd_status s = nd_cpu_prelu(&a, &err);
    cr_assert_eq(s, ND_OK, "status %d: %s", s, err.msg);
    nd_ref_prelu(x64, outer, channels, inner, a64, na, y64);
    char msg[256];
    int64_t bad = nd_compare(dt, y, y64, n, "y", msg, sizeof msg);
    cr_expect_eq(bad, 0, "prelu %s (outer %lld, channels %lld, inner %lld, alpha %lld): %lld bad, "
                 "first %s", nd_dtype_name(dt), (long long)outer, (long long)channels,
                 (long long)inner, (long long)na, (long long)bad, msg);
    free(x), free(y), free(al), free(x64), free(y64), free(a64);
}

Test(cpu_prelu, shared_and_per_channel_random_shapes)
{
    uint64_t st = 5;
    for (int iter = 0; iter < 60; iter++) {
        int rank = 2 + (int)(nd_rand_u64(&st) % 4);
        int64_t shape[5];
        for (int k = 0; k < rank; k++)
            shape[k] = 1 + (int64_t)(nd_rand_u64(&st) % (k == 1 ? 70 : 12));
        int64_t inner = 1;
        for (int k = 2; k < rank; k++)
            inner *= shape[k];
        check_prelu(all_dtypes[iter % 3], shape[0], shape[1], inner, iter & 1, 400 + iter);
    }
}

Test(cpu_prelu, inner_1_and_3_and_large)
{
    for (int d = 0; d < 3; d++)
        for (int sh = 0; sh < 2; sh++) {
            check_prelu(all_dtypes[d], 17, 33, 1, sh, 500 + d);
            check_prelu(all_dtypes[d], 17, 33, 3, sh, 510 + d);
            check_prelu(all_dtypes[d], 1000, 37, 3, sh, 520 + d);   /* pool, grains cut runs */
            check_prelu(all_dtypes[d], 500, 1001, 1, sh, 530 + d);  /* pool, inner 1 */
            check_prelu(all_dtypes[d], 3, 5, 40000, sh, 540 + d);   /* pool, long runs */
        }
}

/* ---------------------------------------------------------------------------------------------
 * Invalid arguments
 * ------------------------------------------------------------------------------------------- */

#define EXPECT_EINVAL(call, needle)                                                              \
    do {                                                                                         \
        nd_status s_ = (call);                                                                   \
        cr_expect_eq(s_, ND_EINVAL, "%s: status %d", #call, s_);                                 \
        cr_expect(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", #call,        \
                  err.msg, needle);                                                              \
        err.msg[0] = '\0';                                                                       \
    } while (0)

Test(cpu_args, invalid_arguments_return_einval_with_a_message)
{
    float x[8] = {0}, y[8], al[3] = {0};
    nd_error err = {{0}};
    nd_norm_args n = {.dtype = ND_FLOAT32, .rows = 2, .cols = 4, .x = x, .y = y, .eps = 1e-5f};

    nd_norm_args t = n;
    t.cols = 0;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "cols=0");
    t = n, t.rows = -3;
    EXPECT_EINVAL(nd_cpu_rmsnorm(&t, &err), "rows=-3");
    t = n, t.x = NULL;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "x");
    t = n, t.y = NULL;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "y");
    t = n, t.rows = INT64_MAX / 2, t.cols = 3;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "overflow");
    t = n, t.rows = INT64_MAX / 4, t.cols = 2; /* elements fit, bytes do not */
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "overflow");
    t = n, t.eps = -1.0f;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "eps");
    t = n, t.eps = NAN;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "eps");
    t = n, t.dtype = (nd_dtype)7;
    EXPECT_EINVAL(nd_cpu_layernorm(&t, &err), "dtype");
    EXPECT_EINVAL(nd_cpu_layernorm(NULL, &err), "args");

    nd_softmax_args s = {.dtype = ND_FLOAT32, .outer = 2, .dim = 2, .inner = 2, .x = x, .y = y};
    nd_softmax_args u = s;
    u.dim = 0;
    EXPECT_EINVAL(nd_cpu_softmax(&u, 0, &err), "dim=0");
    u = s, u.inner = 0;
    EXPECT_EINVAL(nd_cpu_softmax(&u, 1, &err), "inner=0");
    u = s, u.outer = INT64_MAX / 4, u.dim = 4;
    EXPECT_EINVAL(nd_cpu_softmax(&u, 0, &err), "overflow");
    u = s, u.x = NULL;
    EXPECT_EINVAL(nd_cpu_softmax(&u, 0, &err), "x");

    nd_prelu_args p = {.dtype = ND_FLOAT32, .outer = 2, .channels = 2, .inner = 2, .x = x,
                       .y = y, .alpha = al, .alpha_count = 1};
    nd_prelu_args q = p;
    q.alpha_count = 3;
    EXPECT_EINVAL(nd_cpu_prelu(&q, &err), "alpha_count=3");
    q = p, q.alpha = NULL;
    EXPECT_EINVAL(nd_cpu_prelu(&q, &err), "alpha");
    q = p, q.channels = 0;
    EXPECT_EINVAL(nd_cpu_prelu(&q, &err), "channels=0");
    q = p, q.inner = INT64_MAX / 3;
    EXPECT_EINVAL(nd_cpu_prelu(&q, &err), "overflow");

    /* a NULL error struct is allowed */
    t = n, t.cols = 0;
    cr_expect_eq(nd_cpu_layernorm(&t, NULL), ND_EINVAL);
    /* y was never written by any of the failed calls */
    (void)y;
}

/* ---------------------------------------------------------------------------------------------
 * Concurrency: several callers share the pool
 * ------------------------------------------------------------------------------------------- */

typedef struct thread_result {
    int id;
    int64_t bad;
    char msg[256];
} thread_result;

static void *concurrent_worker(void *arg)
{
    thread_result *r = arg;
    for (int rep = 0; rep < 4 && !r->bad; rep++) {
        nd_dtype dt = all_dtypes[(r->id + rep) % 3];
        uint64_t seed = 9000 + (uint64_t)r->id * 100 + (uint64_t)rep;
        switch ((r->id + rep) % 3) {
        case 0: {
            norm_case t = {dt, 200, 1000, 1, 1, 1, 0, 1.0, 2.0, seed};
            r->bad = run_norm(&t, r->msg, sizeof r->msg);
            break;
        }
        case 1:
            r->bad = run_softmax(dt, 100, 1000, 1, rep & 1, 0, 2, seed, r->msg, sizeof r->msg);
            break;
        default:
            r->bad = run_softmax(dt, 20, 64, 300, rep & 1, 0, 2, seed, r->msg, sizeof r->msg);
            break;
        }
    }
    return NULL;
}

Test(cpu_threads, concurrent_callers_get_correct_answers)
{
    enum { N = 6 };
    pthread_t th[N];
    thread_result res[N];
    for (int i = 0; i < N; i++) {
        res[i] = (thread_result){.id = i};
        cr_assert_eq(pthread_create(&th[i], NULL, concurrent_worker, &res[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++)
        cr_expect_eq(res[i].bad, 0, "thread %d: %lld bad, first %s", i, (long long)res[i].bad,
                     res[i].msg);
}
