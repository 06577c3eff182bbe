/*
 * bigbuf.c - see bigbuf.h.
 *
 * Every buffer has a 16-byte prefix before the pointer handed out whose last 8 bytes hold the size
 * of its mapping (0 for a malloc'ed one), so that free and realloc know where it came from. A
 * mapping starts with a 64-byte header (the prefix is its end), which also links it into its
 * size class's list while it is cached. Size classes are four per power of two (at most 25%
 * rounding), from BIGBUF_MIN up to 2 GiB; larger buffers are never cached.
 */
#include "bigbuf.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PREFIX 16
#define HEADER 64
#define PAGE ((size_t)4096)
#define MIN_LOG2 17 /* BIGBUF_MIN == 1 << 17 */
#define MAX_LOG2 31
#define NCLASSES ((MAX_LOG2 - MIN_LOG2) * 4)

typedef struct mapping {
    struct mapping *next; /* in its class's list while cached */
    char pad[HEADER - sizeof(struct mapping *) - sizeof(size_t)];
    size_t bytes; /* the prefix's size field: the mapping's size */
} mapping;
_Static_assert(sizeof(mapping) == HEADER, "the header is 64 bytes, ending in the size field");

static struct {
    pthread_mutex_t lock;
    mapping *free[NCLASSES];
    size_t cached, cap;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t *prefix_of(void *p)
{
    return (size_t *)((char *)p - sizeof(size_t));
}

/* The mapping size for n bytes and its class (-1: too large to cache). */
static size_t class_of(size_t n, int *cls)
{
    size_t m = (n + HEADER + PAGE - 1) & ~(PAGE - 1);
    int k = 63 - __builtin_clzll((unsigned long long)(m - 1)); /* 2^k < m <= 2^(k+1) */
    if (k < MIN_LOG2 || k >= MAX_LOG2) {
        *cls = -1;
        return m;
    }
    size_t step = (size_t)1 << (k - 2);
    size_t q = (m + step - 1) / step; /* 5..8 */
    *cls = (k - MIN_LOG2) * 4 + (int)(q - 5);
    return q * step;
}

void nd_bigbuf_set_cap(size_t cap)
{
    pthread_mutex_lock(&cache.lock);
    cache.cap = cap;
    pthread_mutex_unlock(&cache.lock);
    if (nd_bigbuf_cached() > cap)
        nd_bigbuf_trim();
}

void *nd_bigbuf_alloc(size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    if (n < BIGBUF_MIN) {
        char *b = malloc(n + PREFIX);
        if (!b)
            return NULL;
        *(size_t *)(b + PREFIX - sizeof(size_t)) = 0;
        return b + PREFIX;
    }
    int cls;
    size_t bytes = class_of(n, &cls);
    mapping *m = NULL;
    if (cls >= 0) {
        pthread_mutex_lock(&cache.lock);
        if ((m = cache.free[cls])) {
            cache.free[cls] = m->next;
            cache.cached -= m->bytes;
        }
        pthread_mutex_unlock(&cache.lock);
    }
    if (!m) {
        void *b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED)
            return NULL;
        m = b;
        m->bytes = bytes;
    }
    m->next = NULL;
    return (char *)m + HEADER;
}

static void unmap(mapping *m)
{
    munmap(m, m->bytes);
}

void nd_bigbuf_free(void *p)
{
    if (!p)
        return;
    size_t bytes = *prefix_of(p);
    if (!bytes) {
        free((char *)p - PREFIX);
        return;
    }
    mapping *m = (mapping *)((char *)p - HEADER);
    int cls;
    class_of(bytes - HEADER, &cls);
    pthread_mutex_lock(&cache.lock);
    if (cls >= 0 && cache.cached + bytes <= cache.cap) {
        m->next = cache.free[cls];
        cache.free[cls] = m;
        cache.cached += bytes;
        m = NULL;
    }
    pthread_mutex_unlock(&cache.lock);
    if (m)
        unmap(m);
}

void *nd_bigbuf_realloc(void *p, size_t n)
{
    if (!p)
        return nd_bigbuf_alloc(n);
    size_t bytes = *prefix_of(p);
    size_t have = bytes ? bytes - HEADER : malloc_usable_size((char *)p - PREFIX) - PREFIX;
    if (!bytes && n < BIGBUF_MIN) {
        char *b = realloc((char *)p - PREFIX, n + PREFIX);
        return b ? b + PREFIX : NULL;
    }
    if (bytes && n <= have && n >= BIGBUF_MIN)
        return p;
    void *q = nd_bigbuf_alloc(n);
    if (!q)
        return NULL;
    memcpy(q, p, have < n ? have : n);
    nd_bigbuf_free(p);
    return q;
}

void nd_bigbuf_trim(void)
{
    mapping *all[NCLASSES];
    pthread_mutex_lock(&cache.lock);
    memcpy(all, cache.free, sizeof all);
    memset(cache.free, 0, sizeof cache.free);
    cache.cached = 0;
    pthread_mutex_unlock(&cache.lock);
    for (int c = 0; c < NCLASSES; c++)
        for (mapping *m = all[c], *next; m; m = next) {
            next = m->next;
            unmap(m);
        }
}

size_t nd_bigbuf_cached(void)
{
    pthread_mutex_lock(&cache.lock);
    size_t n = cache.cached;
    pthread_mutex_unlock(&cache.lock);
    return n;
}
