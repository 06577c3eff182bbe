/*
 * engine_cuda.c - the CUDA engine: one context per device, a pool of streams, pinned staging.
 *
 * A slot is one stream on one device, with its own pinned host staging (in and out) and device
 * buffers of the same sizes. The batcher thread that owns the slot packs a batch into the pinned
 * input, run() copies it to the device and launches the kernel, which writes the outputs straight
 * into the pinned output staging through its device mapping (outputs over
 * --cuda-direct-output-bytes, 16 MiB by default, are copied back instead), all on the slot's
 * stream, then waits for that stream. A batch of at most --cuda-zero-copy-bytes (in + out; by
 * default a lone request of up to ~96 KiB) skips the copy in too: the kernel reads the pinned
 * input staging the same way. Because each slot has its own batcher thread and
 * its own stream, several batches are in flight per device: the copies of one overlap the kernel
 * of another, while the HTTP threads keep receiving.
 *
 * Design choices:
 *   - Slot s runs on device s % ndevices, so the first idle batcher threads are spread over the
 *     devices and load spreads without a separate scheduler.
 *   - Contexts are created with cudaDeviceScheduleBlockingSync: a batcher thread that waits for
 *     its stream sleeps instead of spinning, so streams x devices waiting threads do not eat the
 *     cores the HTTP threads need. Waking a sleeping thread costs latency (tens of microseconds,
 *     more under load), so the wait first polls the stream for --cuda-spin-us (default 50): a
 *     small batch is usually done by then, and a large one costs at most that much CPU.
 *   - Streams are non-blocking, so the synchronous copies of param_attach (legacy default stream,
 *     on an HTTP thread) never serialise with batches in flight.
 *   - Buffers grow on demand and are kept: in steady state nothing is allocated on the request
 *     path. Growth frees the old buffers (cudaFree synchronises the device), which is rare and
 *     logged at verbose >= 2. Some staging is reserved up front so small batches never grow.
 *   - One contiguous H2D copy moves x and the inline parameters (the batcher packs them back to
 *     back), one D2H copy brings y and the statistics back. Tensors in shared memory regions
 *     (--allow-client-shm) are pinned when registered (host_register); a large one is copied by
 *     its own H2D and D2H between its region and the device buffers, so the host never copies
 *     its bytes (--cuda-shm-dma-bytes), and the staging copies go around it. A small batch of
 *     one request in shared memory has its kernel read x from and write y to the regions.
 *   - CUDA shared memory regions are another process's device memory, opened by IPC handle
 *     (ipc_open). A batch of one request whose x and y are there, on the slot's device, runs
 *     its kernel on them in place, at any size; other batches copy such tensors device to
 *     device into and out of the device buffers. The host never touches them.
 *
 * Errors: every CUDA call is checked and reported as ND_EDEVICE with the CUDA error string. A
 * sticky error (illegal address, launch failure, ECC, device lost...) leaves the context unusable:
 * the engine marks itself broken and refuses further work, and main() exits non-zero after
 * answering what it can, so that a supervisor restarts the daemon. Other errors fail only their
 * batch.
 *
 * Without CUDA in the build (ND_HAVE_CUDA undefined) nd_engine_cuda_create refuses with a message
 * and --backend auto falls back to the cpu engine.
 */
#include "engine.h"

#ifndef ND_HAVE_CUDA

nd_engine *nd_engine_cuda_create(const nd_config *cfg, nd_error *err)
{
    nd_error_set(err, ND_EUNSUPPORTED,
                 "this build of normd has no CUDA backend (built without nvcc)");
    return NULL;
}

#else /* ND_HAVE_CUDA */

#include <cuda.h> /* types of the driver entry points used (cuStreamWriteValue32,
                   * cuMemGetAddressRange) */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../proto/nd_proto.h"
#include "params.h"

#define MAX_SLOTS ((int)(sizeof(((nd_engine *)0)->slot_device) / sizeof(int)))

/* Staging reserved per slot at start (bytes, in and out each, pinned and on the device), so that
 * ordinary batches never allocate; growth beyond it adds a quarter of headroom and rounds up to
 * GROW_QUANTUM. */
#define STAGING_INITIAL ((size_t)4 << 20)
#define GROW_QUANTUM ((size_t)1 << 20)

typedef struct cuda_slot {
    int dev;             /* engine device index (metrics label index) */
    int ordinal;         /* CUDA device ordinal */
    cudaStream_t stream; /* non-blocking */
    /* device times of a batch's stages, for the stage histograms: c0 before the copy in, k0
     * and k1 around the kernel, c1 after the copy out (c0 and c1 only when there are copies) */
    cudaEvent_t c0, k0, k1, c1;
    /* pinned host staging and device buffers; host and device sides have the same capacity.
     * The host staging is also mapped into the device's address space (hm_*: the device's
     * pointers to it), for batches small enough to run without copies (see cuda_run). */
    void *h_in, *h_out, *d_in, *d_out;
    void *hm_in, *hm_out;
    size_t in_cap, out_cap;
    /* completion word in pinned host memory: the stream writes seq there after a batch's last
     * operation, and the waiting thread polls it with plain loads (see stream_wait) */
    uint32_t *done_word;
    uint32_t seq;
} cuda_slot;

typedef CUresult (*write_value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

typedef struct cuda_engine {
    nd_engine base;
    int ordinal[ND_MAX_DEVICES];
    int verbose;
    int spin_us; /* --cuda-spin-us: poll the stream this long before blocking on it */
    size_t zero_copy_bytes; /* --cuda-zero-copy-bytes: batches up to this size (in + out) run
                             * on the mapped host staging, with no copies */
    size_t direct_out_bytes; /* --cuda-direct-output-bytes: outputs up to this size are written
                              * by the kernel into the mapped host staging, with no copy back */
    write_value32_fn write_value32; /* cuStreamWriteValue32, or NULL where the driver lacks it */
    address_range_fn address_range; /* cuMemGetAddressRange, or NULL: CUDA regions refused */
    int host_pointers; /* every device uses a registered host pointer as its own device address
                        * (cudaDevAttrCanUseHostPointerForRegisteredMem) */
    atomic_int broken_claim; /* the first thread to see a sticky error claims the message */
    atomic_int broken;       /* then sets this, after writing broken_msg */
    char broken_msg[256];
    cuda_slot slot[MAX_SLOTS];
} cuda_engine;

/* ---- errors ---- */

/* Errors after which the context cannot be used again (the CUDA documentation calls them
 * sticky: every later call in the process returns them), or the device is gone. */
static int is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorExternalDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorContextIsDestroyed:
    case cudaErrorCudartUnloading:
    case cudaErrorSystemNotReady:
    case cudaErrorUnknown:
        return 1;
    default:
        return 0;
    }
}

static void mark_broken(cuda_engine *ce, int dev, cudaError_t e)
{
    int unclaimed = 0;
    if (!atomic_compare_exchange_strong(&ce->broken_claim, &unclaimed, 1))
        return;
    snprintf(ce->broken_msg, sizeof ce->broken_msg, "%s: %s", ce->base.device_label[dev],
             cudaGetErrorString(e));
    atomic_store(&ce->broken, 1);
    fprintf(stderr, "normd: %s: the device context is lost (%s)\n", ce->base.device_label[dev],
            cudaGetErrorString(e));
}

/* A failed call: fill err, and mark the engine broken when the error is sticky (ce may be NULL
 * while the engine is being created). */
static nd_status cuda_fail(cuda_engine *ce, int dev, cudaError_t e, const char *what,
                           nd_error *err)
{
    if (ce && is_sticky(e))
        mark_broken(ce, dev, e);
    return nd_error_set(err, e == cudaErrorMemoryAllocation ? ND_ENOMEM : ND_EDEVICE,
                        "%s%s%s: %s", ce ? ce->base.device_label[dev] : "", ce ? ": " : "", what,
                        cudaGetErrorString(e));
}

#define TRY(ce, dev, err, call)                                                                    \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_fail((ce), (dev), e_, #call, (err));                                       \
    } while (0)

static nd_status refuse_broken(cuda_engine *ce, nd_error *err)
{
    return nd_error_set(err, ND_EDEVICE, "device context lost (%s)", ce->broken_msg);
}

/* ---- staging ---- */

static size_t round_up(size_t n, size_t q)
{
    return (n + q - 1) / q * q;
}

/* Make the slot's in (or out) buffers, host and device, hold at least want bytes. The slot is
 * idle (its batcher thread is the caller and run() drains the stream before returning), so the
 * old buffers can be freed at once. */
static nd_status slot_grow(cuda_engine *ce, cuda_slot *s, int out_side, size_t want,
                           nd_error *err)
{
    size_t *cap = out_side ? &s->out_cap : &s->in_cap;
    void **h = out_side ? &s->h_out : &s->h_in;
    void **d = out_side ? &s->d_out : &s->d_in;
    void **hm = out_side ? &s->hm_out : &s->hm_in;
    if (want <= *cap && *h)
        return ND_OK;
    size_t n = want <= STAGING_INITIAL ? STAGING_INITIAL
                                       : round_up(want + want / 4, GROW_QUANTUM);
    if (*cap && ce->verbose >= 2)
        fprintf(stderr, "normd: %s slot %d: %s staging grows %zu -> %zu bytes\n",
                ce->base.device_label[s->dev], (int)(s - ce->slot),
                out_side ? "output" : "input", *cap, n);
    TRY(ce, s->dev, err, cudaSetDevice(s->ordinal));
    if (*h)
        TRY(ce, s->dev, err, cudaFreeHost(*h));
    if (*d)
        TRY(ce, s->dev, err, cudaFree(*d));
    *h = *d = *hm = NULL;
    *cap = 0;
    cudaError_t e = cudaHostAlloc(h, n, cudaHostAllocPortable | cudaHostAllocMapped);
    if (e != cudaSuccess) {
        *h = NULL;
        return cuda_fail(ce, s->dev, e, "cudaHostAlloc", err);
    }
    e = cudaHostGetDevicePointer(hm, *h, 0);
    if (e != cudaSuccess) {
        cudaFreeHost(*h);
        *h = *hm = NULL;
        return cuda_fail(ce, s->dev, e, "cudaHostGetDevicePointer", err);
    }
    e = cudaMalloc(d, n);
    if (e != cudaSuccess) {
        cudaFreeHost(*h);
        *h = *d = *hm = NULL;
        return cuda_fail(ce, s->dev, e, "cudaMalloc", err);
    }
    *cap = n;
    return ND_OK;
}

static nd_status cuda_staging(nd_engine *e, int slot, size_t in_bytes, size_t out_bytes,
                              void **in, void **out, nd_error *err)
{
    cuda_engine *ce = (cuda_engine *)e;
    cuda_slot *s = &ce->slot[slot];
    *in = *out = NULL;
    if (atomic_load(&ce->broken))
        return refuse_broken(ce, err);
    nd_status st = slot_grow(ce, s, 0, in_bytes, err);
    if (st == ND_OK)
        st = slot_grow(ce, s, 1, out_bytes, err);
    if (st != ND_OK)
        return st;
    *in = s->h_in;
    *out = s->h_out;
    return ND_OK;
}

/* ---- run ---- */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Queue, as the stream's last operation, the write of the slot's next sequence number to its
 * completion word. Returns 1 when queued, 0 when the waiter must ask the driver instead (no
 * entry point, or the driver refused: then nothing was queued). The write comes after a memory
 * fence over the stream's earlier work, so the kernel's stores into host memory and the copies'
 * bytes are visible once the word is. */
static int queue_done_word(cuda_engine *ce, cuda_slot *s)
{
    if (!ce->write_value32 || !s->done_word || ce->spin_us <= 0)
        return 0;
    uint32_t next = s->seq + 1;
    if (ce->write_value32((CUstream)s->stream, (CUdeviceptr)(uintptr_t)s->done_word, next,
                          CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS) {
        (void)cudaGetLastError();
        return 0;
    }
    s->seq = next;
    return 1;
}

/* Wait until everything queued on the stream is done. With spin_us > 0, poll first for at most
 * that long: a small batch often completes within tens of microseconds, sooner than a sleeping
 * thread is woken by blocking sync. With a completion word queued (by_word) the poll is a load
 * from host memory; otherwise each poll is a cudaStreamQuery, which takes the driver's locks that
 * the other slots' threads need to submit their batches. Then (or at once, with spin_us 0)
 * sleep in the driver, which also reports an asynchronous error: a batch that faulted never
 * writes its word. */
static cudaError_t stream_wait(const cuda_engine *ce, cuda_slot *s, int by_word)
{
    if (ce->spin_us > 0) {
        const double until = now_us() + ce->spin_us;
        if (by_word) {
            do {
                for (int i = 0; i < 64; i++) {
                    if (__atomic_load_n(s->done_word, __ATOMIC_ACQUIRE) == s->seq)
                        return cudaSuccess;
                    cpu_relax();
                }
            } while (now_us() < until);
        } else {
            do {
                cudaError_t q = cudaStreamQuery(s->stream);
                if (q != cudaErrorNotReady)
                    return q;
            } while (now_us() < until);
        }
    }
    return cudaStreamSynchronize(s->stream);
}

/* Seconds between two completed events of a stream; 0 when the runtime cannot say. */
static double event_seconds(cudaEvent_t from, cudaEvent_t to)
{
    float ms = 0;
    if (cudaEventElapsedTime(&ms, from, to) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (double)ms * 1e-3;
}

/* Raise *end to the end of [p, p + n) as an offset from base; 0 when that range does not lie
 * within [base, base + cap). NULL p is fine and changes nothing. */
static int span(const void *base, size_t cap, const void *p, size_t n, size_t *end)
{
    if (!p)
        return 1;
    const char *b = base, *q = p;
    if (q < b || (size_t)(q - b) > cap || n > cap - (size_t)(q - b))
        return 0;
    size_t e = (size_t)(q - b) + n;
    if (e > *end)
        *end = e;
    return 1;
}

/* The device address that mirrors a host staging pointer (NULL stays NULL): in the device
 * buffers, or with zc in the mapped host staging itself. */
static const void *dev_in(const cuda_slot *s, const void *p, int zc)
{
    const char *base = zc ? s->hm_in : s->d_in;
    return p ? base + ((const char *)p - (const char *)s->h_in) : NULL;
}

static void *dev_out(const cuda_slot *s, const void *p, int zc)
{
    char *base = zc ? s->hm_out : s->d_out;
    return p ? base + ((const char *)p - (const char *)s->h_out) : NULL;
}

/* A registered set's copy of tensor k on the slot's device, or NULL. */
static const void *pset_dev(const nd_param_set *ps, int dev, int k)
{
    return ps ? ps->device[dev][k] : NULL;
}

/* The kernel, on the slot's stream, with device pointers: inputs from the mapped host staging
 * with zc_in (else the device copy), outputs into it with zc_out; x_host and y_host (when not
 * NULL) are x and y in registered host memory, or in this device's memory, that the kernel
 * reads and writes directly. Inline
 * parameters win over a registered set, as in the cpu engine. */
static nd_status launch(cuda_slot *s, const nd_batch *b, int zc_in, int zc_out,
                        const void *x_host, void *y_host, nd_error *err)
{
    const nd_param_set *ps = b->pset;
    const int ln = b->op == ND_OP_LAYERNORM;
    nd_batch_ptrs p = {
        .x = x_host ? x_host : dev_in(s, b->x, zc_in),
        .y = y_host ? y_host : dev_out(s, b->y, zc_out),
        .mean = dev_out(s, b->mean, zc_out),
        .rstd = dev_out(s, b->rstd, zc_out),
        .gamma = b->gamma ? dev_in(s, b->gamma, zc_in)
                          : pset_dev(ps, s->dev, ln ? ND_PARAM_GAMMA : ND_PARAM_WEIGHT),
        .beta = b->beta ? dev_in(s, b->beta, zc_in) : pset_dev(ps, s->dev, ND_PARAM_BETA),
        .alpha = b->alpha ? dev_in(s, b->alpha, zc_in) : pset_dev(ps, s->dev, ND_PARAM_ALPHA),
    };
    return nd_batch_call(b, &p, ND_API_CUDA, (void *)s->stream, err);
}

/* Copies [from_off, n) between a slot's host staging and its device buffer on stream, except
 * the pieces (in increasing offset, all at or past from_off) that go between the device buffer
 * and their own place instead (registered host memory, or device memory): H2D reads piece i
 * from its src, D2H writes it to its dst. One copy for each stretch of staging between pieces,
 * and one for each piece; a piece's copy lets the runtime tell host from device memory. */
static cudaError_t copy_pieces(cudaStream_t stream, void *to, const void *from, size_t from_off,
                               size_t n, const nd_batch_dma *piece, int npieces,
                               enum cudaMemcpyKind kind)
{
    const int h2d = kind == cudaMemcpyHostToDevice;
    size_t at = from_off;
    for (int i = 0; i <= npieces; i++) {
        const size_t end = i < npieces ? piece[i].off : n;
        cudaError_t e = cudaSuccess;
        if (end > at)
            e = cudaMemcpyAsync((char *)to + at, (const char *)from + at, end - at, kind, stream);
        if (e != cudaSuccess || i == npieces)
            return e;
        const nd_batch_dma *d = &piece[i];
        e = h2d ? cudaMemcpyAsync((char *)to + d->off, d->src, d->bytes, cudaMemcpyDefault,
                                  stream)
                : cudaMemcpyAsync(d->dst, (const char *)from + d->off, d->bytes,
                                  cudaMemcpyDefault, stream);
        if (e != cudaSuccess)
            return e;
        at = d->off + d->bytes;
    }
    return cudaSuccess;
}

/* Bytes of the pieces that lie in device memory (their copies do not cross the bus). */
static size_t device_bytes(const nd_batch_dma *piece, int npieces)
{
    size_t n = 0;
    for (int i = 0; i < npieces; i++)
        if (piece[i].dev >= 0)
            n += piece[i].bytes;
    return n;
}

/* Lower *lo to p's offset from base (NULL p changes nothing). */
static void lowest(const void *base, const void *p, size_t *lo)
{
    if (p && (size_t)((const char *)p - (const char *)base) < *lo)
        *lo = (size_t)((const char *)p - (const char *)base);
}

/*
 * Run b on the slot: H2D of the packed inputs, the kernel, D2H of the outputs, then wait for the
 * stream (sleeping: the context uses blocking sync). Every pointer in b must lie in the slot's
 * staging, as the batcher arranges it, except the pieces of x and y in b->dma_in and dma_out,
 * which are copied from and to (or read and written in) their own pinned host memory. Whatever
 * happens after the first copy is queued, the stream is drained before returning, so the slot's
 * staging is idle again when run returns.
 */
static nd_status cuda_run(nd_engine *e, int slot, nd_batch *b, nd_error *err)
{
    cuda_engine *ce = (cuda_engine *)e;
    cuda_slot *s = &ce->slot[slot];
    b->h2d_bytes = b->d2h_bytes = 0;
    b->h2d_s = b->kernel_s = b->d2h_s = b->submit_s = 0;
    if (atomic_load(&ce->broken))
        return refuse_broken(ce, err);

    const size_t esz = nd_dtype_size(b->dtype);
    const size_t x_bytes = (size_t)b->outer * (size_t)b->mid * (size_t)b->inner * esz;
    const size_t p_bytes = (size_t)b->mid * esz;
    const size_t stat_bytes = (size_t)b->outer * sizeof(float);
    size_t in_end = 0, out_end = 0;
    if (!b->x || !b->y || !span(s->h_in, s->in_cap, b->x, x_bytes, &in_end) ||
        !span(s->h_in, s->in_cap, b->gamma, p_bytes, &in_end) ||
        !span(s->h_in, s->in_cap, b->beta, p_bytes, &in_end) ||
        !span(s->h_in, s->in_cap, b->alpha, (size_t)b->alpha_count * esz, &in_end) ||
        !span(s->h_out, s->out_cap, b->y, x_bytes, &out_end) ||
        !span(s->h_out, s->out_cap, b->mean, stat_bytes, &out_end) ||
        !span(s->h_out, s->out_cap, b->rstd, stat_bytes, &out_end))
        return nd_error_set(err, ND_EINVAL, "batch buffers are not this slot's staging");
    if (b->pset && b->op >= 0 && b->op < ND_OP_COUNT) {
        /* A tensor the set holds on the host must have been attached to this device. */
        static const int uses[ND_OP_COUNT][2] = {
            [ND_OP_LAYERNORM] = {ND_PARAM_GAMMA, ND_PARAM_BETA},
            [ND_OP_RMSNORM] = {ND_PARAM_WEIGHT, -1},
            [ND_OP_SOFTMAX] = {-1, -1},
            [ND_OP_LOG_SOFTMAX] = {-1, -1},
            [ND_OP_PRELU] = {ND_PARAM_ALPHA, -1},
        };
        for (int i = 0; i < 2; i++) {
            int k = uses[b->op][i];
            if (k >= 0 && b->pset->host[k] && !b->pset->device[s->dev][k])
                return nd_error_set(err, ND_EINVAL, "parameter set \"%s\": %s is not on %s",
                                    b->pset->name, nd_param_tensor_name(k),
                                    e->device_label[s->dev]);
        }
    }

    /* A small batch runs on the mapped host staging: the kernel reads x over the bus and
     * writes y back the same way, which for a few tens of KiB is sooner than two copies, each
     * with its own submission and completion on the stream. Larger batches copy their inputs
     * in (the copy engine reads host memory much faster than a kernel's loads over the bus
     * do), but up to direct_out_bytes of outputs the kernel still writes straight into the
     * host staging: stores over the bus are posted, so they lengthen the kernel by less than
     * the copy back would take (H100, 8x4096 float16 batches at 64 connections: kernel
     * 14.6 -> 22.8 us, the 20.7 us copy gone), and the batch needs two driver calls fewer. */
    /* Parts of x and y in registered host memory (dma_in, dma_out) are copied by the copy
     * engines straight from and to their place, so such a batch copies in and out; unless each
     * is one piece that is all of x (y), aligned to its elements as the kernels need, and the
     * batch is small enough to run without copies: then the kernel reads x from (writes y to)
     * that memory itself, as it does the staging. An x (y) that is all in this device's own
     * memory (a CUDA shared memory region) is read (written) in place at any size: only the
     * rest of the staging moves, the inline parameters in and the statistics out, and a batch
     * with neither needs no copy at all. Pieces in another device's memory are copied. */
    /* An x and y that share bytes (a client may name overlapping windows) are never read and
     * written in place: a kernel that writes one row's y over another row's x, or one block's
     * over another's, would read what it wrote. The copies in and out order them instead. */
    const uintptr_t xa = b->ndma_in == 1 ? (uintptr_t)b->dma_in[0].src : 0;
    const uintptr_t ya = b->ndma_out == 1 ? (uintptr_t)b->dma_out[0].dst : 0;
    const int alias = xa && ya && xa < ya + b->dma_out[0].bytes && ya < xa + b->dma_in[0].bytes;
    const int whole_in = !alias && b->ndma_in == 1 && b->dma_in[0].off == 0 &&
                         b->dma_in[0].bytes == x_bytes && (uintptr_t)b->dma_in[0].src % esz == 0;
    const int whole_out = !alias && b->ndma_out == 1 && b->dma_out[0].off == 0 &&
                          b->dma_out[0].bytes == x_bytes && (uintptr_t)b->dma_out[0].dst % esz == 0;
    const int place_x = whole_in && b->dma_in[0].dev == s->dev;
    const int place_y = whole_out && b->dma_out[0].dev == s->dev;
    size_t in_begin = place_x ? in_end : 0, out_begin = place_y ? out_end : 0;
    if (place_x) {
        lowest(s->h_in, b->gamma, &in_begin);
        lowest(s->h_in, b->beta, &in_begin);
        lowest(s->h_in, b->alpha, &in_begin);
    }
    if (place_y) {
        lowest(s->h_out, b->mean, &out_begin);
        lowest(s->h_out, b->rstd, &out_begin);
    }
    const nd_batch_dma *pin = place_x ? NULL : b->dma_in, *pout = place_y ? NULL : b->dma_out;
    const int npin = place_x ? 0 : b->ndma_in, npout = place_y ? 0 : b->ndma_out;
    const int host_in = ce->host_pointers && whole_in && b->dma_in[0].dev < 0;
    const int host_out = ce->host_pointers && whole_out && b->dma_out[0].dev < 0;
    const int zc = (npin == 0 || host_in) && (npout == 0 || host_out) &&
                   ce->zero_copy_bytes > 0 &&
                   (in_end - in_begin) + (out_end - out_begin) <= ce->zero_copy_bytes;
    const int zc_out = zc || (npout == 0 && out_end - out_begin <= ce->direct_out_bytes);
    const void *x_host = place_x || (zc && whole_in) ? b->dma_in[0].src : NULL;
    void *y_host = place_y || (zc && whole_out) ? b->dma_out[0].dst : NULL;
    const double t_submit = now_us();
    TRY(ce, s->dev, err, cudaSetDevice(s->ordinal));
    (void)cudaGetLastError(); /* a non-sticky error left on this thread is not this batch's */

    nd_error kerr = {{0}};
    nd_status st = ND_OK;
    if (!zc) {
        cudaError_t ec = cudaEventRecord(s->c0, s->stream);
        if (ec == cudaSuccess)
            ec = copy_pieces(s->stream, s->d_in, s->h_in, in_begin, in_end, pin, npin,
                             cudaMemcpyHostToDevice);
        if (ec != cudaSuccess)
            st = cuda_fail(ce, s->dev, ec, "cudaMemcpyAsync(H2D)", &kerr);
    }
    b->h2d_bytes = in_end - in_begin - device_bytes(pin, npin);

    cudaError_t e0 = st == ND_OK ? cudaEventRecord(s->k0, s->stream) : cudaSuccess;
    if (e0 != cudaSuccess)
        st = cuda_fail(ce, s->dev, e0, "cudaEventRecord", &kerr);
    if (st == ND_OK)
        st = launch(s, b, zc, zc_out, x_host, y_host, &kerr);
    if (st == ND_OK) {
        cudaError_t e1 = cudaEventRecord(s->k1, s->stream);
        if (e1 != cudaSuccess)
            st = cuda_fail(ce, s->dev, e1, "cudaEventRecord", &kerr);
    }
    const size_t out_moved = out_end - out_begin - device_bytes(pout, npout);
    if (st == ND_OK && zc_out)
        b->d2h_bytes = out_moved;
    else if (st == ND_OK) {
        cudaError_t e2 = copy_pieces(s->stream, s->h_out, s->d_out, out_begin, out_end, pout,
                                     npout, cudaMemcpyDeviceToHost);
        if (e2 == cudaSuccess)
            e2 = cudaEventRecord(s->c1, s->stream);
        if (e2 != cudaSuccess)
            st = cuda_fail(ce, s->dev, e2, "cudaMemcpyAsync(D2H)", &kerr);
        else
            b->d2h_bytes = out_moved;
    }
    const int by_word = st == ND_OK && queue_done_word(ce, s);
    b->submit_s = (now_us() - t_submit) * 1e-6;
    /* Always drain: the H2D copy may still be reading staging the batcher is about to reuse. An
     * asynchronous fault of the kernel shows up here. */
    cudaError_t se = stream_wait(ce, s, by_word);
    if (se != cudaSuccess) {
        nd_status sst = cuda_fail(ce, s->dev, se, "waiting for the stream", err);
        if (st != ND_OK)
            nd_error_set(err, sst, "%s (then waiting for the stream: %s)", kerr.msg,
                         cudaGetErrorString(se));
        b->d2h_bytes = 0;
        return sst;
    }
    if (st != ND_OK) {
        /* The launchers report the CUDA error as text only: ask the runtime whether the context
         * survived (a sticky error is returned again by every call). */
        cudaError_t pe = cudaPeekAtLastError();
        if (is_sticky(pe))
            mark_broken(ce, s->dev, pe);
        if (err)
            *err = kerr;
        return st;
    }
    b->kernel_s = event_seconds(s->k0, s->k1);
    if (!zc)
        b->h2d_s = event_seconds(s->c0, s->k0);
    if (!zc_out)
        b->d2h_s = event_seconds(s->k1, s->c1);
    return ND_OK;
}

/* Start-up warm-up of one slot: a tiny batch of every operator and dtype through run(), so the
 * stream, the staging pages and each launcher's first-call work (attribute look-ups, the kernels
 * themselves: main() asks for eager module loading) are paid before the daemon says it is ready,
 * not by the first live requests. */
static nd_status warm_slot(cuda_engine *ce, int slot, nd_error *err)
{
    cuda_slot *s = &ce->slot[slot];
    enum { COLS = 64 };
    const size_t esz_max = 4;
    if (s->in_cap < 4 * COLS * esz_max + 64 || s->out_cap < COLS * esz_max + 64)
        return ND_OK; /* staging reserve too small to warm with: nothing to gain */
    memset(s->h_in, 0, s->in_cap);
    for (int op = 0; op < ND_OP_COUNT; op++)
        for (int dt = 0; dt < 3; dt++) {
            const nd_dtype dtype = dt == 0 ? ND_FLOAT32 : dt == 1 ? ND_FLOAT16 : ND_BFLOAT16;
            const size_t esz = nd_dtype_size(dtype);
            char *in = s->h_in, *out = s->h_out;
            nd_batch b = {.op = (nd_op)op, .dtype = dtype, .outer = 1, .mid = COLS, .inner = 1,
                          .eps = 1e-5f, .x = in, .y = out};
            if (op == ND_OP_LAYERNORM || op == ND_OP_RMSNORM) {
                b.gamma = in + COLS * esz;
                b.rstd = (float *)(out + COLS * esz);
            }
            if (op == ND_OP_LAYERNORM) {
                b.beta = in + 2 * COLS * esz;
                b.mean = (float *)(out + COLS * esz + 16);
            }
            if (op == ND_OP_PRELU) {
                b.alpha = in + COLS * esz;
                b.alpha_count = 1;
            }
            nd_status st = cuda_run(&ce->base, slot, &b, err);
            if (st != ND_OK)
                return st;
        }
    return ND_OK;
}

/* ---- registered parameters ---- */

static void cuda_param_detach(nd_engine *e, nd_param_set *p)
{
    cuda_engine *ce = (cuda_engine *)e;
    for (int d = 0; d < e->ndevices; d++)
        for (int k = 0; k < ND_PARAM_COUNT; k++) {
            if (!p->device[d][k])
                continue;
            /* On a lost context freeing fails; there is nothing better to do than forget. */
            if (cudaSetDevice(ce->ordinal[d]) == cudaSuccess)
                cudaFree(p->device[d][k]);
            p->device[d][k] = NULL;
        }
}

/* Copy every tensor of p to every device. All or nothing: on failure what was copied is freed. */
static nd_status cuda_param_attach(nd_engine *e, nd_param_set *p, nd_error *err)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (atomic_load(&ce->broken))
        return refuse_broken(ce, err);
    const size_t esz = nd_dtype_size(p->dtype);
    nd_status st = ND_OK;
    for (int d = 0; d < e->ndevices && st == ND_OK; d++) {
        cudaError_t e2 = cudaSetDevice(ce->ordinal[d]);
        if (e2 != cudaSuccess) {
            st = cuda_fail(ce, d, e2, "cudaSetDevice", err);
            break;
        }
        for (int k = 0; k < ND_PARAM_COUNT; k++) {
            if (!p->host[k])
                continue;
            size_t n = (size_t)p->count[k] * esz;
            e2 = cudaMalloc(&p->device[d][k], n);
            if (e2 != cudaSuccess) {
                p->device[d][k] = NULL;
                st = cuda_fail(ce, d, e2, "cudaMalloc", err);
                break;
            }
            /* Pageable source: synchronous, on the legacy stream, which the non-blocking slot
             * streams do not wait for. */
            e2 = cudaMemcpy(p->device[d][k], p->host[k], n, cudaMemcpyHostToDevice);
            if (e2 != cudaSuccess) {
                st = cuda_fail(ce, d, e2, "cudaMemcpy", err);
                break;
            }
        }
    }
    if (st != ND_OK)
        cuda_param_detach(e, p);
    return st;
}

/* ---- lifetime ---- */

/* Pins [p, p + n) for every device (a shared memory region), so that copies from and to it
 * are the copy engines' own DMA. -1 when the driver will not (e.g. past RLIMIT_MEMLOCK in a
 * container): the region is then served through the staging. */
static int cuda_host_register(nd_engine *e, void *p, size_t n)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (atomic_load(&ce->broken))
        return -1;
    cudaError_t r = cudaSetDevice(ce->ordinal[0]);
    if (r == cudaSuccess)
        r = cudaHostRegister(p, n, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (r != cudaSuccess) {
        (void)cudaGetLastError();
        if (ce->verbose >= 1)
            fprintf(stderr, "normd: cannot pin %zu bytes of shared memory (%s); it is copied "
                            "through staging instead\n", n, cudaGetErrorString(r));
        return -1;
    }
    return 0;
}

static void cuda_host_unregister(nd_engine *e, void *p)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (cudaSetDevice(ce->ordinal[0]) != cudaSuccess || cudaHostUnregister(p) != cudaSuccess)
        (void)cudaGetLastError(); /* a lost device: nothing left to undo */
}

/* ---- CUDA shared memory (another process's device memory, by IPC handle) ---- */

static int cuda_ipc_open(nd_engine *e, const void *handle, size_t handle_len, int64_t device_id,
                         void **ptr, uint64_t *bytes, int *dev, nd_error *err)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (atomic_load(&ce->broken))
        return nd_proto_fail(err, 503, "the CUDA context is lost: %s", ce->broken_msg);
    if (handle_len != sizeof(cudaIpcMemHandle_t))
        return nd_proto_fail(err, 400, "raw_handle: expected the %zu bytes of a "
                                       "cudaIpcMemHandle_t, got %zu",
                             sizeof(cudaIpcMemHandle_t), handle_len);
    int d = 0;
    while (d < e->ndevices && ce->ordinal[d] != device_id)
        d++;
    if (d == e->ndevices) {
        char list[ND_MAX_DEVICES * 8] = "";
        for (int k = 0, n = 0; k < e->ndevices; k++)
            n += snprintf(list + n, sizeof list - (size_t)n, "%s%d", k ? ", " : "",
                          ce->ordinal[k]);
        return nd_proto_fail(err, 400, "device_id %lld: normd runs on CUDA device%s %s",
                             (long long)device_id, e->ndevices > 1 ? "s" : "", list);
    }
    if (!ce->address_range)
        return nd_proto_fail(err, 400, "this CUDA driver has no cuMemGetAddressRange, so the "
                                       "size of a region's allocation cannot be checked");
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    void *p = NULL;
    cudaError_t r = cudaSetDevice(ce->ordinal[d]);
    if (r == cudaSuccess)
        r = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (r != cudaSuccess) {
        (void)cudaGetLastError();
        return nd_proto_fail(err, 400, "raw_handle: CUDA device %lld cannot open it: %s (it "
                                       "must come from cudaIpcGetMemHandle in another process "
                                       "on this machine, for memory that is still allocated)",
                             (long long)device_id, cudaGetErrorString(r));
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    if (ce->address_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) {
        cudaIpcCloseMemHandle(p);
        (void)cudaGetLastError();
        return nd_proto_fail(err, 400, "raw_handle: the size of its allocation is unknown");
    }
    *ptr = p;
    *bytes = (uint64_t)(base + size - (CUdeviceptr)(uintptr_t)p);
    *dev = d;
    return 0;
}

static void cuda_ipc_close(nd_engine *e, void *ptr, int dev)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (cudaSetDevice(ce->ordinal[dev]) != cudaSuccess || cudaIpcCloseMemHandle(ptr) != cudaSuccess)
        (void)cudaGetLastError(); /* a lost device: nothing left to undo */
}

static nd_status cuda_copy(nd_engine *e, int dev, void *dst, const void *src, size_t n,
                           nd_error *err)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (atomic_load(&ce->broken))
        return refuse_broken(ce, err);
    TRY(ce, dev, err, cudaSetDevice(ce->ordinal[dev]));
    /* Synchronous, on the legacy stream, which the non-blocking slot streams do not wait for. */
    TRY(ce, dev, err, cudaMemcpy(dst, src, n, cudaMemcpyDefault));
    return ND_OK;
}

static int cuda_broken(nd_engine *e)
{
    return atomic_load(&((cuda_engine *)e)->broken);
}

static void cuda_destroy(nd_engine *e)
{
    cuda_engine *ce = (cuda_engine *)e;
    if (!ce)
        return;
    for (int i = 0; i < MAX_SLOTS; i++) {
        cuda_slot *s = &ce->slot[i];
        if (!s->stream && !s->h_in && !s->h_out)
            continue;
        if (cudaSetDevice(s->ordinal) != cudaSuccess)
            continue; /* a lost device: the process is about to exit anyway */
        if (s->stream)
            cudaStreamDestroy(s->stream);
        cudaEvent_t *ev[] = {&s->c0, &s->k0, &s->k1, &s->c1};
        for (size_t k = 0; k < sizeof ev / sizeof ev[0]; k++)
            if (*ev[k])
                cudaEventDestroy(*ev[k]);
        cudaFreeHost(s->h_in);
        cudaFreeHost(s->h_out);
        if (s->done_word)
            cudaFreeHost(s->done_word);
        cudaFree(s->d_in);
        cudaFree(s->d_out);
    }
    free(ce);
}

static const nd_engine_vt cuda_vt = {
    .name = "cuda",
    .staging = cuda_staging,
    .run = cuda_run,
    .param_attach = cuda_param_attach,
    .param_detach = cuda_param_detach,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .ipc_open = cuda_ipc_open,
    .ipc_close = cuda_ipc_close,
    .copy = cuda_copy,
    .broken = cuda_broken,
    .destroy = cuda_destroy,
};

/* Create device d's primary context now (not on the first batch), set to sleep rather than spin
 * while a thread waits for it. When something in the process made the context first, the flag
 * may not take; that costs CPU, not correctness, so it is only reported. */
static nd_status device_open(cuda_engine *ce, int d, nd_error *err)
{
    const int ord = ce->ordinal[d];
    cudaError_t e = cudaInitDevice(ord, cudaDeviceScheduleBlockingSync,
                                   cudaInitDeviceFlagsAreValid);
    if (e == cudaSuccess)
        e = cudaSetDevice(ord);
    if (e != cudaSuccess)
        return nd_error_set(err, ND_EDEVICE, "cuda:%d: cannot create a context: %s", ord,
                            cudaGetErrorString(e));
    unsigned flags = 0;
    if (cudaGetDeviceFlags(&flags) == cudaSuccess &&
        (flags & cudaDeviceScheduleMask) != cudaDeviceScheduleBlockingSync && ce->verbose >= 1)
        fprintf(stderr, "normd: cuda:%d: blocking sync not set; waiting threads may spin\n", ord);
    return ND_OK;
}

nd_engine *nd_engine_cuda_create(const nd_config *cfg, nd_error *err)
{
    int visible = 0;
    cudaError_t e = cudaGetDeviceCount(&visible);
    if (e != cudaSuccess || visible == 0) {
        const char *why = e == cudaErrorInsufficientDriver
                              ? "no NVIDIA driver is loaded, or it is older than this build's "
                                "CUDA runtime needs"
                          : e == cudaErrorNoDevice || visible == 0
                              ? "no NVIDIA GPU is visible to this process"
                              : cudaGetErrorString(e);
        nd_error_set(err, ND_EUNSUPPORTED, "no usable CUDA device: %s (use --backend cpu, or "
                                           "--backend auto to fall back to it)", why);
        (void)cudaGetLastError();
        return NULL;
    }
    cuda_engine *ce = calloc(1, sizeof *ce);
    if (!ce) {
        nd_error_set(err, ND_ENOMEM, "out of memory");
        return NULL;
    }
    ce->base.vt = &cuda_vt;
    ce->verbose = cfg->verbose;
    ce->spin_us = cfg->cuda_spin_us;
    ce->zero_copy_bytes = cfg->cuda_zero_copy_bytes;
    ce->direct_out_bytes = cfg->cuda_direct_output_bytes;
    atomic_init(&ce->broken_claim, 0);
    atomic_init(&ce->broken, 0);

    int ndev = cfg->ndevices > 0 ? cfg->ndevices : visible;
    if (ndev > ND_MAX_DEVICES)
        ndev = ND_MAX_DEVICES;
    for (int d = 0; d < ndev; d++) {
        int ord = cfg->ndevices > 0 ? cfg->devices[d] : d;
        if (ord < 0 || ord >= visible) {
            nd_error_set(err, ND_EINVAL, "devices: cuda:%d does not exist (%d visible)", ord,
                         visible);
            goto fail;
        }
        for (int j = 0; j < d; j++)
            if (ce->ordinal[j] == ord) {
                nd_error_set(err, ND_EINVAL, "devices: cuda:%d is listed twice", ord);
                goto fail;
            }
        ce->ordinal[d] = ord;
        snprintf(ce->base.device_label[d], sizeof ce->base.device_label[d], "cuda:%d", ord);
    }
    ce->base.ndevices = ndev;

    int streams = cfg->streams > 0 ? cfg->streams : 1;
    if (streams * ndev > MAX_SLOTS) {
        streams = MAX_SLOTS / ndev;
        if (cfg->verbose >= 1)
            fprintf(stderr, "normd: at most %d slots: %d streams per device\n", MAX_SLOTS,
                    streams);
    }
    ce->host_pointers = 1;
    for (int d = 0; d < ndev; d++) {
        if (device_open(ce, d, err) != ND_OK)
            goto fail;
        int same = 0;
        if (cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem,
                                   ce->ordinal[d]) != cudaSuccess || !same) {
            (void)cudaGetLastError();
            ce->host_pointers = 0; /* registered memory is then only copied, never read */
        }
    }
    /* Completion words need cuStreamWriteValue32, a driver entry point (normd links only the
     * runtime; 32-bit stream memory operations are always there since CUDA 12). Without it, or
     * where a write is refused, or with spin_us 0, the wait asks the driver. */
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && fn)
        ce->write_value32 = (write_value32_fn)fn;
    (void)cudaGetLastError();
    /* And cuMemGetAddressRange, to check that a CUDA shared memory region fits its allocation. */
    fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && fn)
        ce->address_range = (address_range_fn)fn;
    (void)cudaGetLastError();
    if (ce->verbose >= 2)
        fprintf(stderr, "normd: batch completion: %s\n",
                ce->write_value32 ? "polled from host memory" : "polled through the driver");

    ce->base.nslots = streams * ndev;
    for (int i = 0; i < ce->base.nslots; i++) {
        cuda_slot *s = &ce->slot[i];
        s->dev = i % ndev;
        s->ordinal = ce->ordinal[s->dev];
        ce->base.slot_device[i] = s->dev;
        e = cudaSetDevice(s->ordinal);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            s->stream = NULL;
            nd_error_set(err, ND_EDEVICE, "cuda:%d: cudaStreamCreateWithFlags: %s", s->ordinal,
                         cudaGetErrorString(e));
            goto fail;
        }
        cudaEvent_t *ev[] = {&s->c0, &s->k0, &s->k1, &s->c1};
        for (size_t k = 0; k < sizeof ev / sizeof ev[0] && e == cudaSuccess; k++)
            e = cudaEventCreate(ev[k]);
        if (e != cudaSuccess) {
            nd_error_set(err, ND_EDEVICE, "cuda:%d: cudaEventCreate: %s", s->ordinal,
                         cudaGetErrorString(e));
            goto fail;
        }
        if (slot_grow(ce, s, 0, 0, err) != ND_OK || slot_grow(ce, s, 1, 0, err) != ND_OK)
            goto fail;
        /* A word of its own: 64 bytes keep the slots' words off each other's cache lines. */
        if (ce->write_value32) {
            void *w = NULL;
            if (cudaHostAlloc(&w, 64, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
                (void)cudaGetLastError();
                w = NULL; /* this slot asks the driver instead */
            }
            s->done_word = w;
            if (w)
                *s->done_word = s->seq = 0;
        }
    }
    for (int i = 0; i < ce->base.nslots; i++)
        if (warm_slot(ce, i, err) != ND_OK)
            goto fail;
    if (cfg->verbose >= 2)
        for (int d = 0; d < ndev; d++) {
            struct cudaDeviceProp p;
            if (cudaGetDeviceProperties(&p, ce->ordinal[d]) == cudaSuccess)
                fprintf(stderr, "normd: %s: %s, %d SMs, %zu MiB, %d streams\n",
                        ce->base.device_label[d], p.name, p.multiProcessorCount,
                        p.totalGlobalMem >> 20, streams);
        }
    return &ce->base;
fail:
    cuda_destroy(&ce->base);
    return NULL;
}

#endif /* ND_HAVE_CUDA */
