/*
 * shm.c - registered shared memory regions, system and CUDA (shm.h).
 *
 * The table is a short list (at most --max-shm-regions) under one lock. A region carries a
 * reference count: one for being registered, one for each request that holds it. Unregistering
 * takes the region off the list and drops the first; whoever drops the last unmaps it. The lock
 * is held only to look up and count, never while a request's bytes are copied, so a large copy
 * from one region does not hold up another request's lookup.
 *
 * Pages that vanish. The size check at every use cannot stop a client that shrinks its object
 * while a request is queued: the batcher then reads x from, or writes y to, pages past the
 * object's end, and the kernel answers with SIGBUS, which would end the daemon. So each mapping
 * is also listed in a lock-free table (guard_slots) that a SIGBUS handler reads: a fault inside
 * a listed mapping gets a private zero page mapped over the lost one (MAP_FIXED), the mapping is
 * marked as faulted, and the copy goes on; every request that holds the region is answered 400
 * (nd_shm_region_lost, checked after the last copy), and the region is refused until it is
 * registered again, since its mapping no longer shows the object. A SIGBUS anywhere else is
 * handed back to the previous action, so a real bug still ends the daemon with a core.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct nd_shm_region {
    char name[ND_V2_SHM_NAME_MAX];
    nd_shm_kind kind;
    uint64_t byte_size;         /* the region's bytes, as registered */
    /* ND_SHM_CUDA: the allocation the IPC handle names, as the opener mapped it */
    int64_t device_id;          /* as registered (the CUDA ordinal) */
    int dev;                    /* the opener's index of that device */
    void *dptr;                 /* the device pointer to the region's first byte */
    const nd_shm_device *device;
    /* ND_SHM_SYSTEM: the window of an object */
    char key[ND_SHM_KEY_MAX];
    uint64_t offset;            /* the window's start in the object, as registered */
    int fd;                     /* kept open to check the object's size at every use */
    void *map;                  /* the mapping: from offset rounded down to a page */
    size_t map_len;
    char *base;                 /* the window's first byte, inside the mapping */
    int pinned;                 /* the pinner took the mapping */
    int guard;                  /* its slot in guard_slots */
    const nd_shm_pinner *pinner;
    int refs;                   /* 1 while registered, + 1 per request holding it */
    nd_shm_region *next;
};

struct nd_shm {
    pthread_mutex_t lock;
    nd_shm_region *head;
    int count, max;
    nd_shm_pinner pinner; /* pin NULL: none */
    nd_shm_device device; /* open NULL: CUDA regions are refused */
};

/* ---- the SIGBUS guard (see the top of this file) ---- */

/* Mappings alive at once, registered or still held after unregistering: twice the most regions
 * --max-shm-regions allows. Untouched slots cost no memory (bss). */
enum { GUARD_SLOTS = 2 << 16 };

typedef struct guard_slot {
    _Atomic uintptr_t lo, hi; /* the mapping [lo, hi); 0, 0 when free */
    atomic_int used;          /* claimed by a region */
    atomic_int faulted;       /* a page of it vanished under an access */
} guard_slot;

static guard_slot guard_slots[GUARD_SLOTS];
static atomic_int guard_top; /* slots below this may be in use; the handler looks no further */
static uintptr_t guard_page;
static struct sigaction guard_prev;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

/* Async-signal-safe: atomics and one mmap. */
static void guard_on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const int saved = errno;
    const uintptr_t a = (uintptr_t)si->si_addr;
    const int top = atomic_load(&guard_top);
    for (int i = 0; i < top; i++) {
        guard_slot *g = &guard_slots[i];
        if (a < atomic_load(&g->lo) || a >= atomic_load(&g->hi))
            continue;
        void *page = (void *)(a & ~(guard_page - 1));
        if (mmap(page, guard_page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            atomic_store(&g->faulted, 1);
            errno = saved;
            return; /* the access runs again, on the zero page */
        }
        break;
    }
    /* Not a region's page: the previous action (by default, end with a core); the access runs
     * again and faults under it. An ignored SIGBUS would fault forever: take the default. */
    if (guard_prev.sa_handler == SIG_IGN)
        guard_prev.sa_handler = SIG_DFL;
    sigaction(sig, &guard_prev, NULL);
    errno = saved;
}

static void guard_install(void)
{
    guard_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &guard_prev) != 0)
        fprintf(stderr, "normd: cannot handle SIGBUS (%s): a client that shrinks a shared memory "
                        "object under a request ends the daemon\n", strerror(errno));
}

/* Lists [p, p + n) for the handler; the slot, or -1 when every slot is taken. */
static int guard_claim(void *p, size_t n)
{
    for (int i = 0; i < GUARD_SLOTS; i++) {
        int free_slot = 0;
        if (!atomic_compare_exchange_strong(&guard_slots[i].used, &free_slot, 1))
            continue;
        guard_slot *g = &guard_slots[i];
        atomic_store(&g->faulted, 0);
        atomic_store(&g->lo, (uintptr_t)p); /* hi is 0 while the slot is free (guard_drop) */
        atomic_store(&g->hi, (uintptr_t)p + n);
        int top = atomic_load(&guard_top);
        while (top <= i && !atomic_compare_exchange_weak(&guard_top, &top, i + 1)) {
        }
        return i;
    }
    return -1;
}

/* Unlists a slot, before its mapping goes. */
static void guard_drop(int i)
{
    atomic_store(&guard_slots[i].hi, 0);
    atomic_store(&guard_slots[i].lo, 0);
    atomic_store(&guard_slots[i].used, 0);
}

/* 1 when g's object no longer holds the whole region (its size now in *st). */
static int object_short(const nd_shm_region *g, struct stat *st)
{
    return fstat(g->fd, st) != 0 || (uint64_t)st->st_size < g->offset + g->byte_size;
}

/* A key shm_open takes: an optional leading slash, then 1-254 bytes with no slash, and not "."
 * or ".." (which would name /dev/shm itself or its parent). */
static int key_ok(const char *key)
{
    const char *k = key[0] == '/' ? key + 1 : key;
    size_t n = strlen(k);
    return n > 0 && n < ND_SHM_KEY_MAX - 1 && !strchr(k, '/') && strcmp(k, ".") &&
           strcmp(k, "..");
}

nd_shm *nd_shm_create(int max_regions, const nd_shm_pinner *pinner,
                      const nd_shm_device *device)
{
    pthread_once(&guard_once, guard_install);
    nd_shm *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    r->max = max_regions;
    if (pinner)
        r->pinner = *pinner;
    if (device)
        r->device = *device;
    return r;
}

static void region_free(nd_shm_region *g)
{
    if (g->kind == ND_SHM_CUDA) {
        g->device->close(g->device->ctx, g->dptr, g->dev);
        free(g);
        return;
    }
    if (g->pinned)
        g->pinner->unpin(g->pinner->ctx, g->map);
    guard_drop(g->guard);
    munmap(g->map, g->map_len);
    close(g->fd);
    free(g);
}

void nd_shm_destroy(nd_shm *r)
{
    if (!r)
        return;
    for (nd_shm_region *g = r->head, *next; g; g = next) {
        next = g->next;
        region_free(g);
    }
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static nd_shm_region *find(nd_shm *r, const char *name)
{
    for (nd_shm_region *g = r->head; g; g = g->next)
        if (!strcmp(g->name, name))
            return g;
    return NULL;
}

/* Lists a region made by a register call, or frees it when its name is taken (by a region of
 * either kind: the names are one namespace, as in Triton) or the table is full. */
static int list(nd_shm *r, nd_shm_region *g, nd_error *err)
{
    pthread_mutex_lock(&r->lock);
    int st_code = 0;
    if (find(r, g->name))
        st_code = nd_proto_fail(err, 400, "region \"%s\" is already registered; unregister it "
                                          "first", g->name);
    else if (r->count >= r->max)
        st_code = nd_proto_fail(err, 507, "%d regions are registered, the most allowed "
                                          "(--max-shm-regions); unregister one first", r->count);
    else {
        g->next = r->head;
        r->head = g;
        r->count++;
    }
    pthread_mutex_unlock(&r->lock);
    if (st_code)
        region_free(g);
    return st_code;
}

const char *nd_shm_kind_name(nd_shm_kind kind)
{
    return kind == ND_SHM_CUDA ? "CUDA" : "system";
}

/* What both kinds of registration check first: the region's name (0 when good). */
static int check_name(const char *name, nd_error *err)
{
    if (nd_name_ok(name, strlen(name)))
        return 0;
    return nd_proto_fail(err, 400, "region name: 1 to %d letters, digits, '.', '_' or '-'",
                         ND_V2_SHM_NAME_MAX - 1);
}

/* A region of at least one byte (0 when good). */
static int check_size(uint64_t byte_size, nd_error *err)
{
    return byte_size ? 0 : nd_proto_fail(err, 400, "byte_size: must be at least 1");
}

int nd_shm_register(nd_shm *r, const char *name, const char *key, uint64_t offset,
                    uint64_t byte_size, nd_error *err)
{
    if (check_name(name, err))
        return 400;
    if (!key_ok(key))
        return nd_proto_fail(err, 400, "key \"%.64s\": expected a shared memory object's "
                                       "name as shm_open takes it (\"/name\", no other '/')",
                             key);
    if (check_size(byte_size, err))
        return 400;
    uint64_t end;
    if (__builtin_add_overflow(offset, byte_size, &end) || end > (uint64_t)INT64_MAX)
        return nd_proto_fail(err, 400, "offset + byte_size: past 2^63");

    int fd = shm_open(key, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        return nd_proto_fail(err, 400, "key \"%s\": cannot open the shared memory object: %s%s",
                             key, strerror(e),
                             e == ENOENT ? " (create it with shm_open before registering)" : "");
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return nd_proto_fail(err, 400, "key \"%s\": not a shared memory object", key);
    }
    if ((uint64_t)st.st_size < end) {
        close(fd);
        return nd_proto_fail(err, 400, "key \"%s\": the object is %lld bytes, but offset %llu "
                                       "+ byte_size %llu reach byte %llu",
                             key, (long long)st.st_size, (unsigned long long)offset,
                             (unsigned long long)byte_size, (unsigned long long)end);
    }
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const uint64_t start = offset / page * page;
    const size_t map_len = (size_t)(end - start);
    void *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) {
        int e = errno;
        close(fd);
        return nd_proto_fail(err, 400, "key \"%s\": cannot map %zu bytes: %s", key, map_len,
                             strerror(e));
    }
    nd_shm_region *g = calloc(1, sizeof *g);
    const int slot = g ? guard_claim(map, map_len) : -1;
    if (slot < 0) {
        free(g);
        munmap(map, map_len);
        close(fd);
        return g ? nd_proto_fail(err, 503, "%d shared memory mappings are alive (registered, "
                                           "or held by requests after unregistering); retry "
                                           "later", GUARD_SLOTS)
                 : nd_proto_fail(err, 500, "out of memory");
    }
    g->guard = slot;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->kind = ND_SHM_SYSTEM;
    g->dev = -1;
    snprintf(g->key, sizeof g->key, "%s", key);
    g->offset = offset;
    g->byte_size = byte_size;
    g->fd = fd;
    g->map = map;
    g->map_len = map_len;
    g->base = (char *)map + (offset - start);
    g->refs = 1;
    g->pinner = &r->pinner;
    /* Offered before the region is listed, so that no request sees it half made; one the pinner
     * turns down is still served, through the staging. */
    g->pinned = r->pinner.pin && r->pinner.pin(r->pinner.ctx, map, map_len) == 0;
    return list(r, g, err);
}

int nd_shm_register_cuda(nd_shm *r, const char *name, const void *handle, size_t handle_len,
                         int64_t device_id, uint64_t byte_size, nd_error *err)
{
    if (check_name(name, err))
        return 400;
    if (!r->device.open)
        return nd_proto_fail(err, 400, "CUDA shared memory needs the cuda backend, which this "
                                       "normd does not run (use system shared memory)");
    if (check_size(byte_size, err))
        return 400;
    if (byte_size > (uint64_t)INT64_MAX)
        return nd_proto_fail(err, 400, "byte_size: past 2^63");
    /* Opening a handle twice under two names is the opener's business (CUDA counts the
     * openings of one allocation); the name is checked once, when the region is listed. */
    void *dptr = NULL;
    uint64_t alloc_bytes = 0;
    int dev = -1;
    int st = r->device.open(r->device.ctx, handle, handle_len, device_id, &dptr, &alloc_bytes,
                            &dev, err);
    if (st)
        return st;
    if (alloc_bytes < byte_size) {
        r->device.close(r->device.ctx, dptr, dev);
        return nd_proto_fail(err, 400, "byte_size %llu: the allocation the handle names holds "
                                       "%llu bytes from its start",
                             (unsigned long long)byte_size, (unsigned long long)alloc_bytes);
    }
    nd_shm_region *g = calloc(1, sizeof *g);
    if (!g) {
        r->device.close(r->device.ctx, dptr, dev);
        return nd_proto_fail(err, 500, "out of memory");
    }
    snprintf(g->name, sizeof g->name, "%s", name);
    g->kind = ND_SHM_CUDA;
    g->byte_size = byte_size;
    g->device_id = device_id;
    g->dev = dev;
    g->dptr = dptr;
    g->device = &r->device;
    g->fd = -1;
    g->guard = -1;
    g->refs = 1;
    return list(r, g, err);
}

/* Drops one reference; the caller holds the lock. Returns the region when that was the last
 * one (to be freed once the lock is let go), else NULL. */
static nd_shm_region *unref(nd_shm_region *g)
{
    return --g->refs == 0 ? g : NULL;
}

int nd_shm_unregister(nd_shm *r, nd_shm_kind kind, const char *name)
{
    nd_shm_region *dead = NULL;
    int n = 0;
    pthread_mutex_lock(&r->lock);
    for (nd_shm_region **pp = &r->head; *pp;) {
        nd_shm_region *g = *pp;
        if (g->kind != kind || (name && strcmp(g->name, name))) {
            pp = &g->next;
            continue;
        }
        *pp = g->next;
        r->count--;
        n++;
        if (unref(g)) {
            g->next = dead;
            dead = g;
        }
    }
    pthread_mutex_unlock(&r->lock);
    for (nd_shm_region *g = dead, *next; g; g = next) {
        next = g->next;
        region_free(g);
    }
    return n;
}

char *nd_shm_status_json(nd_shm *r, nd_shm_kind kind, const char *name, int *status,
                         nd_error *err)
{
    *status = 200;
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    int found = 0, oom = 0;
    pthread_mutex_lock(&r->lock);
    for (nd_shm_region *g = r->head; g && !oom; g = g->next) {
        if (g->kind != kind || (name && strcmp(g->name, name)))
            continue;
        found++;
        json_t *o = kind == ND_SHM_CUDA
                        ? json_pack("{s:s, s:I, s:I}", "name", g->name, "device_id",
                                    (json_int_t)g->device_id, "byte_size",
                                    (json_int_t)g->byte_size)
                        : json_pack("{s:s, s:s, s:I, s:I}", "name", g->name, "key", g->key,
                                    "offset", (json_int_t)g->offset, "byte_size",
                                    (json_int_t)g->byte_size);
        oom = json_array_append_new(arr, o) != 0;
    }
    pthread_mutex_unlock(&r->lock);
    if (name && !found && !oom) {
        json_decref(arr);
        *status = nd_proto_fail(err, 400, "no %s shared memory region named \"%s\"",
                                nd_shm_kind_name(kind), name);
        return NULL;
    }
    char *s = oom ? NULL : json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return s;
}

nd_shm_region *nd_shm_acquire(nd_shm *r, const char *name, uint64_t offset, uint64_t bytes,
                              void **ptr, int *status, nd_error *err)
{
    pthread_mutex_lock(&r->lock);
    nd_shm_region *g = find(r, name);
    struct stat st = {0};
    if (!g)
        *status = nd_proto_fail(err, 400, "no shared memory region named \"%s\" (register it "
                                          "with POST /v2/systemsharedmemory/region/%s/register "
                                          "or /v2/cudasharedmemory/region/%s/register)",
                                name, name, name);
    else if (offset > g->byte_size || bytes > g->byte_size - offset)
        *status = nd_proto_fail(err, 400, "offset %llu + %llu bytes run past region \"%s\" of "
                                          "%llu bytes",
                                (unsigned long long)offset, (unsigned long long)bytes, name,
                                (unsigned long long)g->byte_size);
    else if (g->kind == ND_SHM_CUDA) {
        g->refs++;
        *ptr = (char *)g->dptr + offset;
        pthread_mutex_unlock(&r->lock);
        return g;
    } else if (atomic_load(&guard_slots[g->guard].faulted))
        *status = nd_proto_fail(err, 400, "region \"%s\": its object \"%s\" shrank while a "
                                          "request was using it; unregister the region and "
                                          "register it again",
                                name, g->key);
    else if (object_short(g, &st))
        *status = nd_proto_fail(err, 400, "region \"%s\": its object \"%s\" no longer holds it "
                                          "(%lld bytes now); register the region again",
                                name, g->key, (long long)st.st_size);
    else {
        g->refs++;
        *ptr = g->base + offset;
        pthread_mutex_unlock(&r->lock);
        return g;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

void nd_shm_release(nd_shm *r, nd_shm_region *region)
{
    if (!region)
        return;
    pthread_mutex_lock(&r->lock);
    nd_shm_region *dead = unref(region);
    pthread_mutex_unlock(&r->lock);
    if (dead)
        region_free(dead);
}

int nd_shm_region_pinned(const nd_shm_region *region)
{
    return region->pinned;
}

int nd_shm_region_device(const nd_shm_region *region)
{
    return region->kind == ND_SHM_CUDA ? region->dev : -1;
}

int nd_shm_region_lost(const nd_shm_region *region)
{
    struct stat st;
    if (region->kind == ND_SHM_CUDA)
        return 0; /* device memory does not shrink under a mapping that holds it */
    return atomic_load(&guard_slots[region->guard].faulted) || object_short(region, &st);
}

const char *nd_shm_region_name(const nd_shm_region *region)
{
    return region->name;
}

void nd_shm_stats(nd_shm *r, nd_shm_kind kind, int *regions, uint64_t *bytes,
                  uint64_t *pinned_bytes)
{
    *regions = 0;
    *bytes = *pinned_bytes = 0;
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    for (const nd_shm_region *g = r->head; g; g = g->next) {
        if (g->kind != kind)
            continue;
        (*regions)++;
        *bytes += g->byte_size;
        if (g->pinned)
            *pinned_bytes += g->byte_size;
    }
    pthread_mutex_unlock(&r->lock);
}
