/*
 * shm.h - registered shared memory regions (the KServe v2 shared memory extensions, as Triton
 * defines them): a client registers memory under a name and then names that region in inference
 * requests instead of sending the tensor's bytes, so that large tensors cross no socket.
 *
 *   - A system region is a window of a POSIX shared memory object that the client created.
 *   - A CUDA region is device memory the client allocated and exported with
 *     cudaIpcGetMemHandle: the engine opens the handle (nd_shm_device), and the kernels read x
 *     from and write y to the client's own device memory, so the tensors do not cross the bus
 *     either. Such a pointer is the device's: the host never reads or writes through it.
 *
 * Both kinds share one namespace (a name is registered once, of either kind), the reference
 * counting below and nd_shm_acquire; status and unregister take the kind, as their routes do.
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

/* What maps the allocation a CUDA IPC handle names into the daemon, and unmaps it: the engine's
 * ipc_open and ipc_close (engine.h). open returns 0 with the allocation's device pointer, its
 * bytes from that pointer and the engine's index of its device, or an HTTP status with a message
 * in err (a device the engine does not run on, a handle that does not open). */
typedef struct nd_shm_device {
    void *ctx;
    int (*open)(void *ctx, const void *handle, size_t handle_len, int64_t device_id, void **ptr,
                uint64_t *bytes, int *dev, nd_error *err);
    void (*close)(void *ctx, void *ptr, int dev);
} nd_shm_device;

typedef enum nd_shm_kind { ND_SHM_SYSTEM, ND_SHM_CUDA } nd_shm_kind;
/* "system" or "CUDA", for messages. */
const char *nd_shm_kind_name(nd_shm_kind kind);

/* A registry of at most max_regions regions of both kinds, system memory offered to pinner
 * (NULL: to nobody), CUDA handles opened by device (NULL: CUDA regions are refused); NULL when
 * out of memory. */
nd_shm *nd_shm_create(int max_regions, const nd_shm_pinner *pinner,
                      const nd_shm_device *device);
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

/*
 * Registers name as the first byte_size bytes of the device allocation that handle (the bytes of
 * a cudaIpcMemHandle_t) names on CUDA device device_id. Returns 0, or an HTTP status with a
 * message in err: 400 for a bad name, no opener, a handle that does not open, a device the
 * engine does not use, an allocation smaller than byte_size, a name already registered; 507
 * past max_regions.
 */
int nd_shm_register_cuda(nd_shm *r, const char *name, const void *handle, size_t handle_len,
                         int64_t device_id, uint64_t byte_size, nd_error *err);

/* Unregisters name, or every region when name is NULL, of the given kind only. A name not
 * registered (as that kind) is not an error (as in Triton). Returns the number of regions
 * unregistered. */
int nd_shm_unregister(nd_shm *r, nd_shm_kind kind, const char *name);

/* The status document of the regions of one kind: [{"name","key","offset","byte_size"}, ...]
 * for system regions, [{"name","device_id","byte_size"}, ...] for CUDA ones; of every region,
 * or of name alone (NULL: all). Malloc'ed; NULL when out of memory, or with *status 400 and a
 * message in err when name is not registered as that kind. */
char *nd_shm_status_json(nd_shm *r, nd_shm_kind kind, const char *name, int *status,
                         nd_error *err);

/*
 * The bytes [offset, offset + bytes) of region name, of either kind, held until nd_shm_release:
 * *ptr points at them (any alignment; a device pointer for a CUDA region, see
 * nd_shm_region_device). Returns the region, or NULL with an HTTP status in *status and a message
 * in err (400: no such region, a window past the region's end, or an object that no longer holds
 * the region).
 */
nd_shm_region *nd_shm_acquire(nd_shm *r, const char *name, uint64_t offset, uint64_t bytes,
                              void **ptr, int *status, nd_error *err);
void nd_shm_release(nd_shm *r, nd_shm_region *region);
/* -1 for a system region (host memory), else the engine's index of the CUDA region's device. */
int nd_shm_region_device(const nd_shm_region *region);
/* 1 when the pinner took the region's memory. */
int nd_shm_region_pinned(const nd_shm_region *region);
/* 1 when the region's object shrank while a request held it: a page vanished under an access
 * (what was read from or written to it since is not the object's; acquire refuses the region
 * from then on), or the object is smaller than the region now (a device's copies to pinned
 * pages do not fault, and the bytes they wrote are not in the object any more). Check it after
 * a request's last access and answer 400. One fstat. */
int nd_shm_region_lost(const nd_shm_region *region);
const char *nd_shm_region_name(const nd_shm_region *region);

/* Regions of one kind registered now, their bytes, and the bytes of those the pinner took (r may
 * be NULL: all 0). */
void nd_shm_stats(nd_shm *r, nd_shm_kind kind, int *regions, uint64_t *bytes,
                  uint64_t *pinned_bytes);

#endif /* ND_SHM_H */
