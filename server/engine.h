/*
 * engine.h - where batches run: the executors behind the batcher.
 *
 * An engine owns a fixed number of slots (executors). A slot is used by one batcher thread at a
 * time: the batcher asks the slot for host staging buffers, packs the batch's inputs into them,
 * calls run, and reads the outputs back from them. For the CPU engine the staging buffers are the
 * compute buffers; for the CUDA engine they are pinned host memory and a slot is one stream on one
 * device, so several batches are in flight at once and copies overlap compute.
 *
 * Engines: cpu (kernels/cpu.c), null (y = x, no compute: the HTTP ceiling), cuda (engine_cuda.c).
 */
#ifndef ND_ENGINE_H
#define ND_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "../kernels/nd_ops.h"
#include "config.h"

struct nd_param_set;

/* A request's tensor that the device copies straight from or to its own place instead of
 * through the staging: host memory registered with the engine (host_register; a system shared
 * memory region), or device memory (a CUDA shared memory region, ipc_open). Its bytes belong at
 * offset off of the batch's x (in) or y (out) and are not in the staging. */
typedef struct nd_batch_dma {
    size_t off, bytes;
    const void *src; /* in: where the bytes are */
    void *dst;       /* out: where they go */
    int dev;         /* -1: registered host memory; else the engine device whose memory it is */
} nd_batch_dma;

/* One backend call: every pointer is host staging memory of the slot that runs it. */
typedef struct nd_batch {
    nd_op op;
    nd_dtype dtype;
    int64_t outer, mid, inner; /* the request view (proto/nd_proto.h), outer summed over jobs */
    float eps;
    const void *x;
    void *y;
    float *mean; /* NULL unless some request wants it */
    float *rstd;
    const void *gamma; /* inline parameters packed into staging, or NULL */
    const void *beta;
    const void *alpha;
    int64_t alpha_count;
    const struct nd_param_set *pset; /* registered parameters (their device copies), or NULL */
    /* parts of x and y that the device copies from and to registered host memory (only for an
     * engine with host_register), in increasing offset; the rest is in the staging */
    const nd_batch_dma *dma_in, *dma_out;
    int ndma_in, ndma_out;
    /* filled by run, for metrics: bytes moved to and from a device, and the device's own times
     * of the copy in, the kernel and the copy out (0 when the engine does not time them apart
     * from the whole run, or a batch had no copies) */
    uint64_t h2d_bytes, d2h_bytes;
    double h2d_s, kernel_s, d2h_s;
    double submit_s; /* host time spent handing the batch to the device (0: not measured) */
} nd_batch;

/* A batch's tensors as one backend sees them (host pointers for cpu, device pointers for cuda),
 * parameters already resolved: inline ones, else the registered set's copies, else NULL. */
typedef struct nd_batch_ptrs {
    const void *x;
    void *y;
    float *mean, *rstd;
    const void *gamma; /* layernorm gamma or rmsnorm weight */
    const void *beta;
    const void *alpha;
} nd_batch_ptrs;

typedef enum nd_backend_api { ND_API_CPU, ND_API_CUDA } nd_backend_api;

/* Calls the operator of b through the cpu or cuda API (stream: a cudaStream_t for cuda). */
nd_status nd_batch_call(const nd_batch *b, const nd_batch_ptrs *p, nd_backend_api api,
                        void *stream, nd_error *err);

typedef struct nd_engine nd_engine;

typedef struct nd_engine_vt {
    const char *name;
    /* Host staging for a slot, grown as needed and kept: *in holds in_bytes, *out out_bytes. */
    nd_status (*staging)(nd_engine *e, int slot, size_t in_bytes, size_t out_bytes, void **in,
                         void **out, nd_error *err);
    /* Run b on slot; returns when the outputs are in the slot's host staging. */
    nd_status (*run)(nd_engine *e, int slot, nd_batch *b, nd_error *err);
    /* Optional: the batch that used the slot's staging is done with it (its outputs are
     * scattered); the engine may give back staging beyond what it keeps between batches. */
    void (*staging_release)(nd_engine *e, int slot);
    /* Optional: make a registered parameter set usable by run (e.g. copy it to every device),
     * and release that again. */
    nd_status (*param_attach)(nd_engine *e, struct nd_param_set *p, nd_error *err);
    void (*param_detach)(nd_engine *e, struct nd_param_set *p);
    /* Optional: let the device copy straight from and to [p, p + n) (the cuda engine pins it),
     * so that batches may name parts of it in dma_in and dma_out; 0 when it can, -1 when not
     * (then the batcher copies those bytes through the staging, as any host memory's).
     * host_unregister undoes it before the memory goes away. */
    int (*host_register)(nd_engine *e, void *p, size_t n);
    void (*host_unregister)(nd_engine *e, void *p);
    /* Optional (with them a CUDA shared memory region can be registered, shm.h): map the device
     * allocation that handle (a cudaIpcMemHandle_t's bytes) names on CUDA device device_id;
     * returns 0 with its device pointer, its bytes from there and the engine's index of the
     * device (*dev), or an HTTP status with a message in err. ipc_close unmaps it again. */
    int (*ipc_open)(nd_engine *e, const void *handle, size_t handle_len, int64_t device_id,
                    void **ptr, uint64_t *bytes, int *dev, nd_error *err);
    void (*ipc_close)(nd_engine *e, void *ptr, int dev);
    /* With ipc_open: copies n bytes between host memory and device dev's memory (either way,
     * synchronously), for the small tensors of a request in a CUDA region that the host needs:
     * inline parameters (the batcher compares them) and the statistics outputs. */
    nd_status (*copy)(nd_engine *e, int dev, void *dst, const void *src, size_t n,
                      nd_error *err);
    /* Nonzero when the engine can no longer run anything (e.g. a lost CUDA context). */
    int (*broken)(nd_engine *e);
    void (*destroy)(nd_engine *e);
} nd_engine_vt;

struct nd_engine {
    const nd_engine_vt *vt;
    int nslots;
    int slot_device[64];    /* metrics device index of each slot */
    char device_label[ND_MAX_DEVICES][32];
    int ndevices;
};

nd_engine *nd_engine_cpu_create(const nd_config *cfg, nd_error *err);
nd_engine *nd_engine_null_create(const nd_config *cfg, nd_error *err);
/* NULL with a message when the build has no CUDA or no device can be used. */
nd_engine *nd_engine_cuda_create(const nd_config *cfg, nd_error *err);

/* Picks by cfg->backend; auto means cuda when a device is present, cpu otherwise. */
nd_engine *nd_engine_create(const nd_config *cfg, nd_error *err);
void nd_engine_destroy(nd_engine *e);

#endif /* ND_ENGINE_H */
