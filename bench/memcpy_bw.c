/*
 * memcpy_bw.c - how fast one core copies request-sized buffers, alone and with others copying at
 * once. The daemon copies each request's bytes in user space (body -> staging -> answer) besides
 * the kernel's socket copies, so per-core copy speed bounds requests per core on large bodies.
 *
 * Each thread copies between 8 source/destination pairs of SIZE bytes in turn for 0.5 s (pages
 * touched first). Usage: memcpy_bw [MAX_THREADS] (1, 2, 4 ... up to it; default 8).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NBUF = 8, MAX_THREADS = 64 };

typedef struct worker {
    size_t bytes;
    double gbps;
} worker;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *copy_loop(void *p)
{
    worker *w = p;
    char *src[NBUF], *dst[NBUF];
    for (int i = 0; i < NBUF; i++) {
        src[i] = aligned_alloc(4096, w->bytes);
        dst[i] = aligned_alloc(4096, w->bytes);
        if (!src[i] || !dst[i]) {
            fprintf(stderr, "memcpy_bw: out of memory\n");
            exit(1);
        }
        memset(src[i], i, w->bytes);
        memset(dst[i], 0, w->bytes);
    }
    size_t total = 0;
    const double t0 = now_s();
    for (int it = 0; now_s() - t0 < 0.5; it++) {
        memcpy(dst[it % NBUF], src[it % NBUF], w->bytes);
        total += w->bytes;
    }
    w->gbps = (double)total / (now_s() - t0) / 1e9;
    for (int i = 0; i < NBUF; i++) {
        free(src[i]);
        free(dst[i]);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int max_threads = argc > 1 ? atoi(argv[1]) : 8;
    if (max_threads < 1 || max_threads > MAX_THREADS) {
        fprintf(stderr, "usage: %s [MAX_THREADS, 1..%d]\n", argv[0], MAX_THREADS);
        return 2;
    }
    const size_t sizes[] = {64 << 10, 512 << 10, 4 << 20, 32 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int n = 1; n <= max_threads; n *= 2) {
            pthread_t th[MAX_THREADS];
            worker w[MAX_THREADS];
            for (int i = 0; i < n; i++) {
                w[i].bytes = sizes[s];
                if (pthread_create(&th[i], NULL, copy_loop, &w[i]) != 0) {
                    fprintf(stderr, "memcpy_bw: pthread_create failed\n");
                    return 1;
                }
            }
            double sum = 0;
            for (int i = 0; i < n; i++) {
                pthread_join(th[i], NULL);
                sum += w[i].gbps;
            }
            printf("memcpy %6zu KiB  threads %2d  per thread %6.1f GB/s  total %6.1f GB/s\n",
                   sizes[s] >> 10, n, sum / n, sum);
        }
    return 0;
}
