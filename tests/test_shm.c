/*
 * test_shm.c - the shared memory region registry (server/shm.c): registration checks, the window a
 * request sees, the status document, and the lifetime rule (a region unregistered while a request
 * holds it stays mapped until that request lets go).
 *
 * Each test makes its own POSIX shared memory objects, named after the process, and removes them.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../server/shm.h"

/* Regions registered in r now. */
static int registered(nd_shm *r)
{
    int n;
    uint64_t bytes, pinned;
    nd_shm_stats(r, ND_SHM_SYSTEM, &n, &bytes, &pinned);
    return n;
}

/* A shared memory object of n bytes, its bytes i = (i * 7 + salt) & 255; returns its key in key
 * and a mapping of it in *map (the test's own view). */
static void make_object(char *key, size_t size, const char *tag, size_t n, unsigned salt,
                        unsigned char **map)
{
    snprintf(key, size, "/normd-test-%d-%s", (int)getpid(), tag);
    shm_unlink(key);
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0, "shm_open %s", key);
    cr_assert_eq(ftruncate(fd, (off_t)n), 0);
    *map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(*map, MAP_FAILED);
    for (size_t i = 0; i < n; i++)
        (*map)[i] = (unsigned char)(i * 7 + salt);
    close(fd);
}

/* Makes the object key n bytes long (the client shrinking or growing it). */
static void resize_object(const char *key, off_t n)
{
    int fd = shm_open(key, O_RDWR, 0);
    cr_assert(fd >= 0);
    cr_assert_eq(ftruncate(fd, n), 0);
    close(fd);
}

Test(shm, a_window_is_seen_at_its_offset_both_ways)
{
    char key[96];
    unsigned char *obj;
    const size_t n = 3 * 4096 + 100;
    make_object(key, sizeof key, "window", n, 3, &obj);
    nd_shm *r = nd_shm_create(8, NULL, NULL);
    nd_error err = {{0}};
    /* a window that starts mid-page, so the mapping starts before it */
    const uint64_t off = 4096 + 37, size = 2 * 4096;
    cr_assert_eq(nd_shm_register(r, "w", key, off, size, &err), 0, "%s", err.msg);
    cr_assert_eq(registered(r), 1);

    void *p = NULL;
    int st = 0;
    nd_shm_region *g = nd_shm_acquire(r, "w", 11, 500, &p, &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(memcmp(p, obj + off + 11, 500), 0, "the daemon reads the client's bytes");
    memset(p, 0xA5, 500);
    for (size_t i = 0; i < 500; i++)
        cr_assert_eq(obj[off + 11 + i], 0xA5, "the client sees the daemon's write at %zu", i);
    cr_assert_eq(obj[off + 10], (unsigned char)((off + 10) * 7 + 3), "nothing before the window");
    cr_assert_eq(obj[off + 511], (unsigned char)((off + 511) * 7 + 3), "nothing after it");
    nd_shm_release(r, g);

    /* the last byte of the window, and one past it */
    cr_assert_not_null(g = nd_shm_acquire(r, "w", size - 1, 1, &p, &st, &err), "%s", err.msg);
    nd_shm_release(r, g);
    cr_assert_null(nd_shm_acquire(r, "w", size - 1, 2, &p, &st, &err));
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "run past region \"w\""), "%s", err.msg);
    cr_assert_null(nd_shm_acquire(r, "w", size + 1, 0, &p, &st, &err));
    cr_assert_null(nd_shm_acquire(r, "nope", 0, 1, &p, &st, &err));
    cr_assert(strstr(err.msg, "no shared memory region named \"nope\""), "%s", err.msg);

    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, "w"), 1);
    cr_assert_eq(registered(r), 0);
    cr_assert_null(nd_shm_acquire(r, "w", 0, 1, &p, &st, &err), "gone once unregistered");
    nd_shm_destroy(r);
    munmap(obj, n);
    shm_unlink(key);
}

Test(shm, registration_is_checked)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "checks", 1000, 0, &obj);
    nd_shm *r = nd_shm_create(2, NULL, NULL);
    nd_error err = {{0}};
    struct {
        const char *name, *key;
        uint64_t off, size;
        int status;
        const char *msg;
    } bad[] = {
        {"", key, 0, 10, 400, "region name"},
        {"a/b", key, 0, 10, 400, "region name"},
        {"a b", key, 0, 10, 400, "region name"},
        {"ok", "/", 0, 10, 400, "key \"/\""},
        {"ok", "/a/b", 0, 10, 400, "key \"/a/b\""},
        {"ok", "..", 0, 10, 400, "key \"..\""},
        {"ok", key, 0, 0, 400, "byte_size: must be at least 1"},
        {"ok", key, 1, 1000, 400, "the object is 1000 bytes, but offset 1 + byte_size 1000 "
                                  "reach byte 1001"},
        {"ok", key, UINT64_MAX, 2, 400, "past 2^63"},
        {"ok", "/normd-test-no-such-object", 0, 10, 400, "cannot open the shared memory object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        int st = nd_shm_register(r, bad[i].name, bad[i].key, bad[i].off, bad[i].size, &err);
        cr_expect_eq(st, bad[i].status, "case %zu: %d (%s)", i, st, err.msg);
        cr_expect(strstr(err.msg, bad[i].msg), "case %zu: \"%s\" lacks \"%s\"", i, err.msg,
                  bad[i].msg);
    }
    cr_assert_eq(registered(r), 0, "nothing was registered");

    cr_assert_eq(nd_shm_register(r, "a", key, 0, 1000, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_shm_register(r, "a", key, 0, 10, &err), 400);
    cr_assert(strstr(err.msg, "already registered"), "%s", err.msg);
    cr_assert_eq(nd_shm_register(r, "b", key + 1, 500, 500, &err), 0, "a key without its slash: %s",
                 err.msg);
    cr_assert_eq(nd_shm_register(r, "c", key, 0, 10, &err), 507, "past max_regions");
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, "not-there"), 0, "unregistering a stranger is no error");
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, NULL), 2);
    cr_assert_eq(nd_shm_register(r, "c", key, 0, 10, &err), 0, "room again: %s", err.msg);
    nd_shm_destroy(r);
    munmap(obj, 1000);
    shm_unlink(key);
}

Test(shm, status_lists_what_is_registered)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "status", 4096, 0, &obj);
    nd_shm *r = nd_shm_create(8, NULL, NULL);
    nd_error err = {{0}};
    cr_assert_eq(nd_shm_register(r, "one", key, 0, 100, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_shm_register(r, "two", key, 96, 4000, &err), 0, "%s", err.msg);
    int st = 0;
    char *s = nd_shm_status_json(r, ND_SHM_SYSTEM, NULL, &st, &err);
    cr_assert_eq(st, 200);
    json_t *d = json_loads(s, 0, NULL);
    cr_assert(json_is_array(d) && json_array_size(d) == 2, "%s", s);
    int seen = 0;
    for (size_t i = 0; i < 2; i++) {
        const json_t *o = json_array_get(d, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        cr_assert_str_eq(json_string_value(json_object_get(o, "key")), key);
        int two = !strcmp(name, "two");
        seen |= 1 << two;
        cr_assert_eq(json_integer_value(json_object_get(o, "offset")), two ? 96 : 0);
        cr_assert_eq(json_integer_value(json_object_get(o, "byte_size")), two ? 4000 : 100);
    }
    cr_assert_eq(seen, 3, "%s", s);
    json_decref(d);
    free(s);

    s = nd_shm_status_json(r, ND_SHM_SYSTEM, "two", &st, &err);
    d = json_loads(s, 0, NULL);
    cr_assert(json_array_size(d) == 1, "%s", s);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(d, 0), "name")), "two");
    json_decref(d);
    free(s);
    cr_assert_null(nd_shm_status_json(r, ND_SHM_SYSTEM, "three", &st, &err));
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "\"three\""), "%s", err.msg);
    nd_shm_destroy(r);
    munmap(obj, 4096);
    shm_unlink(key);
}

/* Unregistering takes the name at once, but a request that holds the region keeps its mapping:
 * its pointer stays readable and writable until it lets go (under ASan a freed mapping would
 * fault here). */
Test(shm, a_held_region_outlives_its_unregistering)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "held", 8192, 9, &obj);
    nd_shm *r = nd_shm_create(4, NULL, NULL);
    nd_error err = {{0}};
    cr_assert_eq(nd_shm_register(r, "h", key, 0, 8192, &err), 0, "%s", err.msg);
    void *p1 = NULL, *p2 = NULL;
    int st = 0;
    nd_shm_region *g1 = nd_shm_acquire(r, "h", 0, 8192, &p1, &st, &err);
    nd_shm_region *g2 = nd_shm_acquire(r, "h", 4096, 4096, &p2, &st, &err);
    cr_assert(g1 && g2, "%s", err.msg);
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, NULL), 1);
    cr_assert_eq(registered(r), 0);
    /* the name is free for a new registration while the old region is still held */
    cr_assert_eq(nd_shm_register(r, "h", key, 0, 100, &err), 0, "%s", err.msg);
    nd_shm_release(r, g1);
    unsigned char *q = p2;
    for (size_t i = 0; i < 4096; i++)
        cr_assert_eq(q[i], (unsigned char)((4096 + i) * 7 + 9), "byte %zu after unregister", i);
    q[0] = 0x5A;
    cr_assert_eq(obj[4096], 0x5A);
    nd_shm_release(r, g2);
    nd_shm_destroy(r);
    munmap(obj, 8192);
    shm_unlink(key);
}

/* A client that shrinks its object after registering gets a 400 at its next request, instead of
 * the daemon touching pages past the object's end (SIGBUS). */
Test(shm, a_shrunk_object_is_refused)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "shrunk", 8192, 0, &obj);
    nd_shm *r = nd_shm_create(4, NULL, NULL);
    nd_error err = {{0}};
    cr_assert_eq(nd_shm_register(r, "s", key, 4096, 4096, &err), 0, "%s", err.msg);
    resize_object(key, 4096);
    void *p = NULL;
    int st = 0;
    cr_assert_null(nd_shm_acquire(r, "s", 0, 1, &p, &st, &err));
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "no longer holds it (4096 bytes now)"), "%s", err.msg);
    nd_shm_destroy(r);
    munmap(obj, 8192);
    shm_unlink(key);
}

/* A client that shrinks its object while a request holds the region: the daemon's copies from
 * and to the lost pages (here, the test's own reads and writes through the request's pointer)
 * would raise SIGBUS and end the daemon. They complete, on zero pages; the region says it
 * faulted, a region beside it does not, and it is refused from then on, even once the object
 * has its old size again (the mapping no longer shows the object there). */
Test(shm, pages_lost_under_a_request_fault_the_region_not_the_daemon)
{
    char key[96], key2[96];
    unsigned char *obj, *obj2;
    make_object(key, sizeof key, "lost", 3 * 4096, 1, &obj);
    make_object(key2, sizeof key2, "kept", 4096, 2, &obj2);
    nd_shm *r = nd_shm_create(4, NULL, NULL);
    nd_error err = {{0}};
    cr_assert_eq(nd_shm_register(r, "lost", key, 0, 3 * 4096, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_shm_register(r, "kept", key2, 0, 4096, &err), 0, "%s", err.msg);
    void *p = NULL, *p2 = NULL;
    int st = 0;
    nd_shm_region *g = nd_shm_acquire(r, "lost", 0, 3 * 4096, &p, &st, &err);
    nd_shm_region *g2 = nd_shm_acquire(r, "kept", 0, 4096, &p2, &st, &err);
    cr_assert(g && g2, "%s", err.msg);
    cr_assert_eq(nd_shm_region_lost(g), 0);

    resize_object(key, 4096);
    volatile unsigned char *v = p;
    unsigned sum = 0;
    for (size_t i = 4096; i < 3 * 4096; i += 512)
        sum += v[i]; /* reads of both lost pages */
    memset((char *)p + 2 * 4096 + 100, 0x33, 200); /* a write to one */
    cr_assert_eq(sum, 0, "lost pages read as zeros, not as the object's old bytes");
    cr_assert_eq(nd_shm_region_lost(g), 1);
    cr_assert_eq(nd_shm_region_lost(g2), 0);
    cr_assert_str_eq(nd_shm_region_name(g), "lost");
    v[0] = 0x5A; /* the page the object kept is still shared */
    cr_assert_eq(obj[0], 0x5A);
    cr_assert_eq(((volatile unsigned char *)p2)[5], (unsigned char)(5 * 7 + 2));

    resize_object(key, 3 * 4096);
    void *q = NULL;
    cr_assert_null(nd_shm_acquire(r, "lost", 0, 1, &q, &st, &err));
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "region \"lost\": its object \"") &&
                  strstr(err.msg, "shrank while a request was using it; unregister the region "
                                  "and register it again"),
              "%s", err.msg);
    nd_shm_release(r, g);
    nd_shm_release(r, g2);

    /* registered again: a fresh mapping, served */
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, "lost"), 1);
    cr_assert_eq(nd_shm_register(r, "lost", key, 0, 3 * 4096, &err), 0, "%s", err.msg);
    g = nd_shm_acquire(r, "lost", 4096, 4096, &q, &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(nd_shm_region_lost(g), 0);
    ((volatile unsigned char *)q)[7] = 0x6B;
    cr_assert_eq(obj[4096 + 7], 0x6B, "the object's grown pages, seen through the new mapping");
    nd_shm_release(r, g);
    nd_shm_destroy(r);
    munmap(obj, 3 * 4096);
    munmap(obj2, 4096);
    shm_unlink(key);
    shm_unlink(key2);
}

/* An object that is smaller than its region when a request ends is a lost region for that
 * request even when no CPU access met the lost pages (a device's copies to pinned pages do not
 * fault); with nothing faulted, the region is served again once the object holds it again. */
Test(shm, a_region_whose_object_is_short_at_the_end_is_lost)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "short", 2 * 4096, 4, &obj);
    nd_shm *r = nd_shm_create(4, NULL, NULL);
    nd_error err = {{0}};
    cr_assert_eq(nd_shm_register(r, "s", key, 0, 2 * 4096, &err), 0, "%s", err.msg);
    void *p = NULL;
    int st = 0;
    nd_shm_region *g = nd_shm_acquire(r, "s", 0, 8, &p, &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert_eq(nd_shm_region_lost(g), 0);
    resize_object(key, 4096);
    cr_assert_eq(nd_shm_region_lost(g), 1);
    resize_object(key, 2 * 4096);
    cr_assert_eq(nd_shm_region_lost(g), 0);
    nd_shm_release(r, g);
    g = nd_shm_acquire(r, "s", 4096, 8, &p, &st, &err);
    cr_assert_not_null(g, "no page faulted: served again (%s)", err.msg);
    nd_shm_release(r, g);
    nd_shm_destroy(r);
    munmap(obj, 2 * 4096);
    shm_unlink(key);
}

/* The guard takes only the pages of registered regions: a SIGBUS anywhere else goes to the
 * action there was before it, so a real bug still ends the process as it would have (by the
 * signal; under AddressSanitizer, whose handler was there first, by its report and exit). */
Test(shm, a_sigbus_outside_the_regions_still_ends_the_process)
{
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "elsewhere", 2 * 4096, 3, &obj);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        nd_shm *r = nd_shm_create(4, NULL, NULL); /* installs the guard */
        resize_object(key, 0);
        volatile unsigned char *v = obj;
        (void)v[4096];
        nd_shm_destroy(r);
        _exit(0);
    }
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    munmap(obj, 2 * 4096);
    shm_unlink(key);
    if (getenv("NORMD_SANITIZED"))
        cr_assert(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "a read past a shrunk object that no region maps went on");
    else
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
                  "status %#x: a read past a shrunk object that no region maps did not end the "
                  "process with SIGBUS", status);
}

/* ---- CUDA regions, through a stand-in for the engine's IPC opener ---- */

/* A pretend device: handles are 64 bytes whose first byte picks one of its allocations (the
 * rest must be 0xAB), each of alloc_bytes; it counts what is open. */
typedef struct fake_device {
    unsigned char mem[3][4096];
    uint64_t alloc_bytes;
    int open, closed;
} fake_device;

static int fake_open(void *ctx, const void *handle, size_t handle_len, int64_t device_id,
                     void **ptr, uint64_t *bytes, int *dev, nd_error *err)
{
    fake_device *f = ctx;
    const unsigned char *h = handle;
    if (handle_len != 64)
        return nd_proto_fail(err, 400, "raw_handle: expected 64 bytes");
    for (size_t i = 1; i < 64; i++)
        if (h[i] != 0xAB)
            return nd_proto_fail(err, 400, "raw_handle: does not open");
    if (device_id != 5 || h[0] >= 3)
        return nd_proto_fail(err, 400, "device_id %lld: not here", (long long)device_id);
    *ptr = f->mem[h[0]];
    *bytes = f->alloc_bytes;
    *dev = 1;
    f->open++;
    return 0;
}

static void fake_close(void *ctx, void *ptr, int dev)
{
    fake_device *f = ctx;
    cr_assert_eq(dev, 1);
    cr_assert(ptr == f->mem[0] || ptr == f->mem[1] || ptr == f->mem[2]);
    f->closed++;
}

static void fake_handle(unsigned char *h, int which)
{
    memset(h, 0xAB, 64);
    h[0] = (unsigned char)which;
}

static int cuda_registered(nd_shm *r, uint64_t *bytes)
{
    int n;
    uint64_t b, pinned;
    nd_shm_stats(r, ND_SHM_CUDA, &n, &b, &pinned);
    if (bytes)
        *bytes = b;
    return n;
}

Test(shm, a_cuda_region_is_the_device_memory_its_handle_opens)
{
    fake_device f = {.alloc_bytes = 4096};
    const nd_shm_device dev = {&f, fake_open, fake_close};
    nd_shm *r = nd_shm_create(8, NULL, &dev);
    unsigned char h[64];
    nd_error err = {{0}};
    fake_handle(h, 2);
    cr_assert_eq(nd_shm_register_cuda(r, "gpu", h, sizeof h, 5, 3000, &err), 0, "%s", err.msg);
    uint64_t bytes = 0;
    cr_assert_eq(cuda_registered(r, &bytes), 1);
    cr_assert_eq(bytes, 3000);
    cr_assert_eq(registered(r), 0, "a CUDA region is not a system one");

    void *p = NULL;
    int st = 0;
    nd_shm_region *g = nd_shm_acquire(r, "gpu", 100, 2900, &p, &st, &err);
    cr_assert_not_null(g, "%s", err.msg);
    cr_assert(p == f.mem[2] + 100, "the pointer is the opened allocation's, at the offset");
    cr_assert_eq(nd_shm_region_device(g), 1);
    cr_assert_eq(nd_shm_region_pinned(g), 0);
    cr_assert_eq(nd_shm_region_lost(g), 0);
    cr_assert_null(nd_shm_acquire(r, "gpu", 100, 2901, &p, &st, &err), "past the region's end");
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "run past region \"gpu\""), "%s", err.msg);

    /* unregistering as the other kind leaves it; as its own, it closes after the last holder */
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, "gpu"), 0);
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_SYSTEM, NULL), 0);
    cr_assert_eq(cuda_registered(r, NULL), 1);
    cr_assert_eq(nd_shm_unregister(r, ND_SHM_CUDA, NULL), 1);
    cr_assert_eq(cuda_registered(r, NULL), 0);
    cr_assert_eq(f.closed, 0, "a request still holds it");
    nd_shm_release(r, g);
    cr_assert_eq(f.closed, 1);
    cr_assert_eq(f.open, 1);
    nd_shm_destroy(r);
}

Test(shm, cuda_registration_checks_its_size_name_and_opener)
{
    fake_device f = {.alloc_bytes = 1000};
    const nd_shm_device dev = {&f, fake_open, fake_close};
    nd_shm *r = nd_shm_create(2, NULL, &dev);
    unsigned char h[64];
    nd_error err = {{0}};
    fake_handle(h, 0);
    cr_assert_eq(nd_shm_register_cuda(r, "big", h, sizeof h, 5, 1001, &err), 400);
    cr_assert(strstr(err.msg, "holds 1000 bytes"), "%s", err.msg);
    cr_assert_eq(f.open, f.closed, "a refused handle is closed again");
    cr_assert_eq(nd_shm_register_cuda(r, "zero", h, sizeof h, 5, 0, &err), 400);
    cr_assert_eq(nd_shm_register_cuda(r, "bad/name", h, sizeof h, 5, 10, &err), 400);
    cr_assert_eq(nd_shm_register_cuda(r, "elsewhere", h, sizeof h, 4, 10, &err), 400);
    cr_assert(strstr(err.msg, "device_id 4"), "the opener's message: %s", err.msg);
    cr_assert_eq(nd_shm_register_cuda(r, "short", h, 10, 5, 10, &err), 400);

    /* one namespace with system regions */
    char key[96];
    unsigned char *obj;
    make_object(key, sizeof key, "both", 4096, 1, &obj);
    cr_assert_eq(nd_shm_register(r, "taken", key, 0, 4096, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_shm_register_cuda(r, "taken", h, sizeof h, 5, 10, &err), 400);
    cr_assert(strstr(err.msg, "already registered"), "%s", err.msg);
    cr_assert_eq(f.open, f.closed, "the handle of a refused name is closed again");
    cr_assert_eq(nd_shm_register_cuda(r, "one", h, sizeof h, 5, 10, &err), 0, "%s", err.msg);
    cr_assert_eq(nd_shm_register_cuda(r, "two", h, sizeof h, 5, 10, &err), 507, "past the max");
    cr_assert_eq(nd_shm_register(r, "one", key, 0, 10, &err), 400, "nor the other way");

    /* the status documents keep to their kind */
    int st = 0;
    char *s = nd_shm_status_json(r, ND_SHM_CUDA, NULL, &st, &err);
    json_t *doc = json_loads(s, 0, NULL);
    cr_assert_eq(json_array_size(doc), 1, "%s", s);
    json_t *o = json_array_get(doc, 0);
    cr_assert_str_eq(json_string_value(json_object_get(o, "name")), "one");
    cr_assert_eq(json_integer_value(json_object_get(o, "device_id")), 5);
    cr_assert_eq(json_integer_value(json_object_get(o, "byte_size")), 10);
    cr_assert_null(json_object_get(o, "key"));
    json_decref(doc);
    free(s);
    cr_assert_null(nd_shm_status_json(r, ND_SHM_CUDA, "taken", &st, &err));
    cr_assert_eq(st, 400);
    cr_assert(strstr(err.msg, "no CUDA shared memory region named \"taken\""), "%s", err.msg);
    cr_assert_null(nd_shm_status_json(r, ND_SHM_SYSTEM, "one", &st, &err));
    cr_assert(strstr(err.msg, "no system shared memory region named \"one\""), "%s", err.msg);
    nd_shm_destroy(r);
    cr_assert_eq(f.open, f.closed, "destroy closes what is open");
    munmap(obj, 4096);
    shm_unlink(key);

    /* without an opener (no CUDA engine) */
    nd_shm *none = nd_shm_create(2, NULL, NULL);
    cr_assert_eq(nd_shm_register_cuda(none, "gpu", h, sizeof h, 0, 10, &err), 400);
    cr_assert(strstr(err.msg, "needs the cuda backend"), "%s", err.msg);
    nd_shm_destroy(none);
}
