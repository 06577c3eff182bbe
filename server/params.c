/*
 * params.c - the registry of named parameter sets: a small list under one mutex.
 *
 * Lookups happen once per request and registrations are rare, so a list is enough; what matters
 * is the lifetime rule: a set leaves the list on DELETE or replacement but is freed (and its
 * device copies released) only when the last queued or running request lets go of it.
 */
#include "params.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/nd_dtype.h"

typedef struct entry {
    nd_param_set *set;
    struct entry *next;
} entry;

struct nd_params {
    nd_engine *engine;
    pthread_mutex_t lock; /* guards list, generation and every set's refs */
    entry *list;
    uint64_t generation;
    int max_sets;     /* 0: no limit */
    size_t max_bytes; /* 0: no limit */
};

static const char *const tensor_names[ND_PARAM_COUNT] = {"gamma", "beta", "weight", "alpha"};

const char *nd_param_tensor_name(int k)
{
    return k >= 0 && k < ND_PARAM_COUNT ? tensor_names[k] : "?";
}

nd_params *nd_params_create(nd_engine *engine)
{
    nd_params *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->engine = engine;
    pthread_mutex_init(&r->lock, NULL);
    return r;
}

void nd_params_set_limits(nd_params *r, int max_sets, size_t max_bytes)
{
    r->max_sets = max_sets;
    r->max_bytes = max_bytes;
}

static size_t set_bytes(const nd_param_set *p)
{
    size_t n = 0;
    for (int k = 0; k < ND_PARAM_COUNT; k++)
        if (p->host[k])
            n += (size_t)p->count[k] * nd_dtype_size(p->dtype);
    return n;
}

/* 0 when a set of `bytes` may be registered under name beside the sets in the list, else 507 or
 * 413 with a message. Called with the lock held. */
static int check_limits(nd_params *r, const char *name, size_t bytes, nd_error *err)
{
    if (r->max_bytes && bytes > r->max_bytes) {
        nd_error_set(err, ND_EINVAL, "a parameter set of %zu bytes is over the limit of %zu "
                                     "(--max-param-bytes)", bytes, r->max_bytes);
        return 413;
    }
    int sets = 0;
    size_t total = 0;
    for (entry *e = r->list; e; e = e->next)
        if (strcmp(e->set->name, name) != 0) { /* a set replaced by this one does not count */
            sets++;
            total += set_bytes(e->set);
        }
    if (r->max_sets && sets + 1 > r->max_sets) {
        nd_error_set(err, ND_EINVAL, "%d parameter sets are registered, the limit "
                                     "(--max-param-sets); DELETE one first", sets);
        return 507;
    }
    if (r->max_bytes && total + bytes > r->max_bytes) {
        nd_error_set(err, ND_EINVAL, "registered parameter sets hold %zu bytes; %zu more would "
                                     "pass the limit of %zu (--max-param-bytes); DELETE one "
                                     "first", total, bytes, r->max_bytes);
        return 507;
    }
    return 0;
}

static void set_free(nd_params *r, nd_param_set *p)
{
    if (r->engine && r->engine->vt->param_detach)
        r->engine->vt->param_detach(r->engine, p);
    free(p->block);
    free(p);
}

void nd_params_destroy(nd_params *r)
{
    if (!r)
        return;
    for (entry *e = r->list, *next; e; e = next) {
        next = e->next;
        set_free(r, e->set);
        free(e);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int nd_params_put(nd_params *r, const char *name, nd_dtype dtype,
                  const void *const tensors[ND_PARAM_COUNT], const int64_t count[ND_PARAM_COUNT],
                  nd_error *err)
{
    if (!nd_name_ok(name, strlen(name))) {
        nd_error_set(err, ND_EINVAL,
                     "name: \"%.80s\" must be 1-%d characters of A-Z a-z 0-9 _ - .", name,
                     ND_PARAMS_NAME_MAX - 1);
        return 400;
    }
    size_t esz = nd_dtype_size(dtype), total = 0;
    int any = 0;
    for (int k = 0; k < ND_PARAM_COUNT; k++)
        if (tensors[k]) {
            if (count[k] < 1) {
                nd_error_set(err, ND_EINVAL, "%s: must have at least one element",
                             tensor_names[k]);
                return 400;
            }
            total += ((size_t)count[k] * esz + 15) & ~(size_t)15;
            any = 1;
        }
    if (!any) {
        nd_error_set(err, ND_EINVAL, "a parameter set needs at least one of gamma, beta, "
                                     "weight, alpha");
        return 400;
    }
    size_t bytes = 0;
    for (int k = 0; k < ND_PARAM_COUNT; k++)
        if (tensors[k])
            bytes += (size_t)count[k] * esz;
    /* checked before anything is allocated, and again under the lock when it is inserted */
    pthread_mutex_lock(&r->lock);
    int st = check_limits(r, name, bytes, err);
    pthread_mutex_unlock(&r->lock);
    if (st)
        return st;
    nd_param_set *p = calloc(1, sizeof *p);
    char *block = malloc(total);
    if (!p || !block) {
        free(p);
        free(block);
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return 500;
    }
    snprintf(p->name, sizeof p->name, "%s", name);
    p->dtype = dtype;
    p->block = block;
    p->refs = 1; /* the registry's own reference */
    for (int k = 0; k < ND_PARAM_COUNT; k++)
        if (tensors[k]) {
            size_t n = (size_t)count[k] * esz;
            memcpy(block, tensors[k], n);
            p->host[k] = block;
            p->count[k] = count[k];
            block += (n + 15) & ~(size_t)15;
        }
    if (r->engine && r->engine->vt->param_attach &&
        r->engine->vt->param_attach(r->engine, p, err) != ND_OK) {
        free(p->block);
        free(p);
        return 500;
    }
    entry *e = malloc(sizeof *e);
    if (!e) {
        set_free(r, p);
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return 500;
    }
    nd_param_set *old = NULL;
    pthread_mutex_lock(&r->lock);
    st = check_limits(r, name, bytes, err);
    if (st) {
        pthread_mutex_unlock(&r->lock);
        free(e);
        set_free(r, p);
        return st;
    }
    p->generation = ++r->generation;
    entry **pp = &r->list;
    while (*pp && strcmp((*pp)->set->name, name) != 0)
        pp = &(*pp)->next;
    if (*pp) { /* replace: the old set lives on while requests hold it */
        old = (*pp)->set;
        (*pp)->set = p;
        free(e);
        if (--old->refs > 0)
            old = NULL;
    } else {
        e->set = p;
        e->next = NULL;
        *pp = e;
    }
    pthread_mutex_unlock(&r->lock);
    if (old)
        set_free(r, old);
    return 0;
}

int nd_params_delete(nd_params *r, const char *name, nd_error *err)
{
    nd_param_set *gone = NULL;
    int found = 0;
    pthread_mutex_lock(&r->lock);
    for (entry **pp = &r->list; *pp; pp = &(*pp)->next)
        if (strcmp((*pp)->set->name, name) == 0) {
            entry *e = *pp;
            *pp = e->next;
            if (--e->set->refs == 0)
                gone = e->set;
            free(e);
            found = 1;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    if (gone)
        set_free(r, gone);
    if (!found) {
        nd_error_set(err, ND_EINVAL, "no parameter set named \"%.80s\"", name);
        return 404;
    }
    return 0;
}

nd_param_set *nd_params_acquire(nd_params *r, const char *name)
{
    nd_param_set *p = NULL;
    pthread_mutex_lock(&r->lock);
    for (entry *e = r->list; e; e = e->next)
        if (strcmp(e->set->name, name) == 0) {
            p = e->set;
            p->refs++;
            break;
        }
    pthread_mutex_unlock(&r->lock);
    return p;
}

void nd_params_release(nd_params *r, nd_param_set *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&r->lock);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&r->lock);
    if (last)
        set_free(r, p);
}

/* ---- listing ---- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->cap + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

static void describe(sbuf *b, const nd_param_set *p, int with_values)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp, "{\"name\":\"%s\",\"dtype\":\"%s\",\"generation\":%llu", p->name,
             nd_dtype_name(p->dtype), (unsigned long long)p->generation);
    sb_str(b, tmp);
    for (int k = 0; k < ND_PARAM_COUNT; k++) {
        if (!p->host[k])
            continue;
        if (!with_values) {
            snprintf(tmp, sizeof tmp, ",\"%s\":%lld", tensor_names[k], (long long)p->count[k]);
            sb_str(b, tmp);
            continue;
        }
        snprintf(tmp, sizeof tmp, ",\"%s\":[", tensor_names[k]);
        sb_str(b, tmp);
        for (int64_t i = 0; i < p->count[k]; i++) {
            int n = snprintf(tmp, sizeof tmp, "%s%.9g", i ? "," : "",
                             (double)nd_load(p->dtype, p->host[k], i));
            sb_add(b, tmp, (size_t)n);
        }
        sb_str(b, "]");
    }
    sb_str(b, "}");
}

char *nd_params_list_json(nd_params *r)
{
    sbuf b = {0};
    sb_str(&b, "{\"params\":[");
    pthread_mutex_lock(&r->lock);
    for (entry *e = r->list; e; e = e->next) {
        if (e != r->list)
            sb_str(&b, ",");
        describe(&b, e->set, 0);
    }
    pthread_mutex_unlock(&r->lock);
    sb_str(&b, "]}");
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

char *nd_params_get_json(nd_params *r, const char *name)
{
    nd_param_set *p = nd_params_acquire(r, name);
    if (!p)
        return NULL;
    sbuf b = {0};
    describe(&b, p, 1);
    nd_params_release(r, p);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
