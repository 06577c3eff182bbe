/*
 * device.cu - device discovery and the per-device record the kernels size their launches from.
 *
 * nd_cuda_device_count() must be safe to call on a machine with no driver or no GPU: it asks the
 * runtime once and turns any error into 0, printing nothing. nd_cuda_device_info_get() caches one
 * nd_cuda_device_info per device the first time a kernel runs there; the launchers read SM count,
 * shared-memory limits and cluster support from it instead of constants tuned to one card.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <mutex>

#include "cuda_common.cuh"

/* ---------------------------------------------------------------------------------------------
 * Device count
 * ------------------------------------------------------------------------------------------- */

extern "C" int nd_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear it so later calls start clean */
        return 0;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------------
 * Launch plan trace
 * ------------------------------------------------------------------------------------------- */

int nd_cuda_plan_on;
static thread_local char plan_line[256];

extern "C" void nd_cuda_plan_trace(int on)
{
    nd_cuda_plan_on = on != 0;
}

extern "C" const char *nd_cuda_last_plan(void)
{
    return plan_line;
}

void nd_cuda_plan_note(bool append, const char *fmt, ...)
{
    size_t used = append ? strlen(plan_line) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(plan_line + used, sizeof plan_line - used, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------------------------
 * Per-device info
 * ------------------------------------------------------------------------------------------- */

enum { ND_MAX_DEVICES = 64 };

/* infos[d] is written once under lock, then published through ready[d]; readers that see ready
 * set read it without the lock. */
static std::mutex info_lock;
static nd_cuda_device_info infos[ND_MAX_DEVICES];
static volatile int ready[ND_MAX_DEVICES];

static nd_status device_info_fill(int dev, nd_cuda_device_info *di, nd_error *err)
{
    cudaDeviceProp p;
    ND_CUDA_TRY(err, cudaGetDeviceProperties(&p, dev));
    int cluster = 0, coop = 0, mem_khz = 0, bus_bits = 0;
    ND_CUDA_TRY(err, cudaDeviceGetAttribute(&cluster, cudaDevAttrClusterLaunch, dev));
    ND_CUDA_TRY(err, cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    ND_CUDA_TRY(err, cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev));
    ND_CUDA_TRY(err, cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
    di->device = dev;
    di->cc_major = p.major;
    di->cc_minor = p.minor;
    di->sm_count = p.multiProcessorCount;
    di->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
    di->regs_per_sm = p.regsPerMultiprocessor;
    di->smem_per_block_optin = p.sharedMemPerBlockOptin;
    di->smem_per_sm = p.sharedMemPerMultiprocessor;
    di->l2_bytes = p.l2CacheSize;
    di->cluster_launch = cluster != 0;
    di->coop_launch = coop != 0;
    di->mem_gbps = 2.0 * mem_khz * 1e3 * (bus_bits / 8) / 1e9;
    return ND_OK;
}

nd_status nd_cuda_device_info_get(const nd_cuda_device_info **out, nd_error *err)
{
    int dev = 0;
    ND_CUDA_TRY(err, cudaGetDevice(&dev));
    if (dev < 0 || dev >= ND_MAX_DEVICES)
        return nd_error_set(err, ND_EUNSUPPORTED, "device %d: more than %d devices", dev,
                            ND_MAX_DEVICES);
    if (!ready[dev]) {
        std::lock_guard<std::mutex> g(info_lock);
        if (!ready[dev]) {
            nd_status st = device_info_fill(dev, &infos[dev], err);
            if (st != ND_OK)
                return st;
            __sync_synchronize();
            ready[dev] = 1;
        }
    }
    *out = &infos[dev];
    return ND_OK;
}

/* ---- occupancy answers, asked once ---- */

namespace {
struct occ_entry {
    const void *fn;
    int dev, threads, csize;
    size_t smem;
    int value;
};
enum { OCC_SLOTS = 4096 }; /* a power of two; every launchable kernel and shape fits many times */
std::mutex occ_lock;
occ_entry occ[OCC_SLOTS];
int occ_used;

size_t occ_hash(const void *fn, int dev, int threads, int csize, size_t smem)
{
    uint64_t h = (uint64_t)(uintptr_t)fn * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(unsigned)dev << 48) ^ ((uint64_t)(unsigned)threads << 24) ^
         ((uint64_t)(unsigned)csize << 12) ^ (uint64_t)smem;
    h *= 0xBF58476D1CE4E5B9ull;
    return (size_t)(h >> 32) & (OCC_SLOTS - 1);
}
} // namespace

int nd_cuda_occupancy_get(const void *fn, int dev, int threads, int csize, size_t smem,
                          int *value)
{
    std::lock_guard<std::mutex> g(occ_lock);
    for (size_t i = occ_hash(fn, dev, threads, csize, smem), k = 0; k < OCC_SLOTS;
         k++, i = (i + 1) & (OCC_SLOTS - 1)) {
        const occ_entry &e = occ[i];
        if (!e.fn)
            return 0;
        if (e.fn == fn && e.dev == dev && e.threads == threads && e.csize == csize &&
            e.smem == smem) {
            *value = e.value;
            return 1;
        }
    }
    return 0;
}

void nd_cuda_occupancy_put(const void *fn, int dev, int threads, int csize, size_t smem,
                           int value)
{
    std::lock_guard<std::mutex> g(occ_lock);
    if (occ_used >= OCC_SLOTS / 2) /* full enough: the caller just asks the runtime each time */
        return;
    for (size_t i = occ_hash(fn, dev, threads, csize, smem);; i = (i + 1) & (OCC_SLOTS - 1)) {
        occ_entry &e = occ[i];
        if (!e.fn) {
            e = occ_entry{fn, dev, threads, csize, smem, value};
            occ_used++;
            return;
        }
        if (e.fn == fn && e.dev == dev && e.threads == threads && e.csize == csize &&
            e.smem == smem) {
            e.value = value;
            return;
        }
    }
}
