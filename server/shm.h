/*
 * shm.h - registered system shared memory regions (the KServe v2 shared memory extension, as
 * Triton defines it): a client creates a POSIX shared memory object, registers a window of it
 * under a name, and then names that region in inference requests instead of sending the tensor's
 * bytes, so that large tensors cross no socket.
 *
 * A region is mapped once, when it is registered, and stays mapped while a request uses it:
 * each request takes a reference (nd_shm_acquire) for its life, so unregistering a region that
 * requests are still reading or writing takes its name away at once but unmaps only after the
 * last of them. Every use checks that the object still holds the whole region, so a client that
 * shrinks its object gets a 400 instead of the daemon touching pages past its end; one that
 * shrinks it while a request is in flight gets a 400 for that request (nd_shm_region_lost)
 * instead of a SIGBUS that ends the daemon.
 *
 * Thread-safe: one lock around the table, held for lookups, never across a copy.
 */
#ifndef ND_SHM_H
#define ND_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/nd_proto.h"
#include "../proto/nd_v2.h"

#define ND_SHM_KEY_MAX 256 /* bytes of a key, NUL included */

typedef struct nd_shm nd_shm;
typedef struct nd_shm_region nd_shm_region;

/* What a region's memory is offered to when it is mapped, and taken back from before it is
 * unmapped: the engine's host_register, so that its device can copy from and to the region
 * directly (engine.h). pin returns 0 when it took the memory, -1 when not. */
typedef struct nd_shm_pinner {
    void *ctx;
    int (*pin)(void *ctx, void *p, size_t n);
    void (*unpin)(void *ctx, void *p);
} nd_shm_pinner;

/* A registry of at most max_regions regions, their memory offered to pinner (NULL: to nobody);
 * NULL when out of memory. */
nd_shm *nd_shm_create(int max_regions, const nd_shm_pinner *pinner);
/* Unmaps every region. No request may hold one any more. */
void nd_shm_destroy(nd_shm *r);

/*
 * Registers name as the window [offset, offset + byte_size) of the shared memory object key (as
 * shm_open names it: "/name" or "name", no other slash). Returns 0, or an HTTP status with a
 * message in err: 400 for a bad name or key, an object that cannot be opened or is smaller than
 * the window, a name already registered; 507 past max_regions.
 */
int nd_shm_register(nd_shm *r, const char *name, const char *key, uint64_t offset,
                    uint64_t byte_size, nd_error *err);

/* Unregisters name, or every region when name is NULL. A name not registered is not an error
 * (as in Triton). Returns the number of regions unregistered. */
int nd_shm_unregister(nd_shm *r, const char *name);

/* The status document: [{"name","key","offset","byte_size"}, ...] of every region, or of name
 * alone (NULL: all). Malloc'ed; NULL when out of memory, or with *status 400 and a message in
 * err when name is not registered. */
char *nd_shm_status_json(nd_shm *r, const char *name, int *status, nd_error *err);

/*
 * The bytes [offset, offset + bytes) of region name, held until nd_shm_release: *ptr points at
 * them (any alignment). Returns the region, or NULL with an HTTP status in *status and a message
 * in err (400: no such region, a window past the region's end, or an object that no longer holds
 * the region).
 */
nd_shm_region *nd_shm_acquire(nd_shm *r, const char *name, uint64_t offset, uint64_t bytes,
                              void **ptr, int *status, nd_error *err);
void nd_shm_release(nd_shm *r, nd_shm_region *region);
/* 1 when the pinner took the region's memory. */
int nd_shm_region_pinned(const nd_shm_region *region);
/* 1 when the region's object shrank while a request held it: a page vanished under an access
 * (what was read from or written to it since is not the object's; acquire refuses the region
 * from then on), or the object is smaller than the region now (a device's copies to pinned
 * pages do not fault, and the bytes they wrote are not in the object any more). Check it after
 * a request's last access and answer 400. One fstat. */
int nd_shm_region_lost(const nd_shm_region *region);
const char *nd_shm_region_name(const nd_shm_region *region);

/* Regions registered now, their bytes, and the bytes of those the pinner took (r may be NULL:
 * all 0). */
void nd_shm_stats(nd_shm *r, int *regions, uint64_t *bytes, uint64_t *pinned_bytes);

#endif /* ND_SHM_H */
