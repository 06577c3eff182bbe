/*
 * bench_cpu.c - effective bandwidth of the CPU backend, next to memcpy on the same sizes.
 *
 * For every op x dtype x row width: x holds about 64 MB (rows = 64 MB / (cols * dtype size)),
 * GB/s = (bytes of x read + bytes of y written) / time, median of several runs after a warm-up.
 * memcpy GB/s is measured the same way (bytes read + bytes written, one memcpy of x's size into a
 * buffer of y's size) in the same run; note that memcpy runs on one thread while the backend uses
 * its pool. Prints a table and writes bench/results/cpu.csv.
 *
 *   bench_cpu [reps] [threads]     (defaults: 7 reps, threads 0 = one per core)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../kernels/nd_dtype.h"
#include "../kernels/nd_ops.h"

enum { X_BYTES = 64 << 20, MAX_REPS = 64 };
static const int64_t widths[] = {128, 1024, 4096, 32768};
static const char *const op_labels[] = {"layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

typedef struct bench_bufs {
    void *x, *y, *g, *b;
    float *mean, *rstd;
} bench_bufs;

/* Runs op once; exits on an error (a benchmark may). */
static void run_op(int op, nd_dtype dt, int64_t rows, int64_t cols, const bench_bufs *m)
{
    nd_error err = {{0}};
    nd_status st;
    if (op <= 1) {
        nd_norm_args a = {.dtype = dt, .rows = rows, .cols = cols, .x = m->x, .y = m->y,
                          .gamma = m->g, .beta = op == 0 ? m->b : NULL, .eps = 1e-5f,
                          .mean = op == 0 ? m->mean : NULL, .rstd = m->rstd};
        st = op == 0 ? nd_cpu_layernorm(&a, &err) : nd_cpu_rmsnorm(&a, &err);
    } else if (op <= 3) {
        nd_softmax_args a = {.dtype = dt, .outer = rows, .dim = cols, .inner = 1, .x = m->x,
                             .y = m->y};
        st = nd_cpu_softmax(&a, op == 3, &err);
    } else {
        nd_prelu_args a = {.dtype = dt, .outer = rows, .channels = cols, .inner = 1, .x = m->x,
                           .y = m->y, .alpha = m->g, .alpha_count = cols};
        st = nd_cpu_prelu(&a, &err);
    }
    if (st != ND_OK) {
        fprintf(stderr, "bench_cpu: %s: %s\n", op_labels[op], err.msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_cpu [reps 1-%d] [threads]\n", MAX_REPS);
        return 2;
    }
    nd_cpu_set_threads(threads);

    bench_bufs m;
    m.x = malloc(X_BYTES);
    m.y = malloc(X_BYTES);
    m.g = malloc(32768 * 4);
    m.b = malloc(32768 * 4);
    m.mean = malloc((X_BYTES / 256) * sizeof(float));
    m.rstd = malloc((X_BYTES / 256) * sizeof(float));
    if (!m.x || !m.y || !m.g || !m.b || !m.mean || !m.rstd) {
        fprintf(stderr, "bench_cpu: out of memory\n");
        return 1;
    }

    if (mkdir("bench/results", 0777) != 0 && errno != EEXIST) {
        perror("bench_cpu: mkdir bench/results");
        return 1;
    }
    FILE *csv = fopen("bench/results/cpu.csv", "w");
    if (!csv) {
        perror("bench_cpu: bench/results/cpu.csv");
        return 1;
    }
    fprintf(csv, "op,dtype,rows,cols,bytes,time_ms,gbps,memcpy_gbps,fraction_of_memcpy\n");

    printf("CPU backend, threads=%d (0 = one per core), median of %d runs after a warm-up\n",
           threads, reps);
    printf("%-12s %-9s %6s %7s %9s %9s %10s %7s\n", "op", "dtype", "cols", "rows", "ms", "GB/s",
           "memcpy", "ratio");

    double t[MAX_REPS];
    for (int op = 0; op < 5; op++)
        for (int d = 0; d < ND_DTYPE_COUNT; d++) {
            nd_dtype dt = (nd_dtype)d;
            size_t es = nd_dtype_size(dt);
            /* inputs: x ~ 0.5 + N-ish spread, parameters near 1 / 0.25 */
            for (int64_t i = 0; i < (int64_t)(X_BYTES / es); i++)
                nd_store(dt, m.x, i, (float)((i * 2654435761u) % 1000) * 0.004f - 1.5f);
            for (int64_t i = 0; i < 32768; i++) {
                nd_store(dt, m.g, i, op == 4 ? 0.25f : 1.0f + 0.001f * (float)(i % 7));
                nd_store(dt, m.b, i, 0.01f * (float)(i % 5));
            }
            for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
                int64_t cols = widths[w];
                int64_t rows = (int64_t)(X_BYTES / es) / cols;
                size_t bytes = (size_t)(rows * cols) * es;

                memcpy(m.y, m.x, bytes); /* warm-up; touches y's pages */
                for (int r = 0; r < reps; r++) {
                    double t0 = now_s();
                    memcpy(m.y, m.x, bytes);
                    t[r] = now_s() - t0;
                }
                double mc = median(t, reps);

                run_op(op, dt, rows, cols, &m);
                for (int r = 0; r < reps; r++) {
                    double t0 = now_s();
                    run_op(op, dt, rows, cols, &m);
                    t[r] = now_s() - t0;
                }
                double tk = median(t, reps);
                double gbps = 2.0 * (double)bytes / tk * 1e-9, mgbps = 2.0 * (double)bytes / mc * 1e-9;
                printf("%-12s %-9s %6lld %7lld %9.2f %9.2f %10.2f %7.2f\n", op_labels[op],
                       nd_dtype_name(dt), (long long)cols, (long long)rows, tk * 1e3, gbps, mgbps,
                       gbps / mgbps);
                fprintf(csv, "%s,%s,%lld,%lld,%zu,%.4f,%.3f,%.3f,%.4f\n", op_labels[op],
                        nd_dtype_name(dt), (long long)rows, (long long)cols, 2 * bytes, tk * 1e3,
                        gbps, mgbps, gbps / mgbps);
                fflush(stdout);
            }
        }
    fclose(csv);
    printf("wrote bench/results/cpu.csv\n");
    free(m.x), free(m.y), free(m.g), free(m.b), free(m.mean), free(m.rstd);
    return 0;
}
