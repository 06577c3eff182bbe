/*
 * cudashm_hold.c - device memory for the CUDA shared memory benchmarks (bench/service, NORMD_PROTO
 * v2cudashm): the model server's side of a sidecar whose tensors are already on the GPU.
 *
 *   cudashm_hold DTYPE X_BYTES Y_BYTES DIR [DEVICE]
 *
 * Allocates X_BYTES and Y_BYTES on CUDA device DEVICE (0), fills the first with random values of
 * DTYPE (float32, float16, bfloat16: uniform in [-2, 2]), and writes the bodies that register them
 * with normd as regions bench_in and bench_out to DIR/bench_in.json and DIR/bench_out.json
 * (POST /v2/cudasharedmemory/region/{name}/register). Then prints "ready" and holds the memory
 * until its standard input closes: a CUDA IPC allocation lives only as long as the process that
 * made it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kernels/nd_dtype.h"

#ifndef ND_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "cudashm_hold: this build has no CUDA (built without nvcc)\n");
    return 2;
}
#else
#include <cuda_runtime_api.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "cudashm_hold: %s: %s\n", #call, cudaGetErrorString(e_));             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static void base64(const unsigned char *in, size_t n, char *out)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        for (size_t k = 0; k < 4; k++)
            out[o++] = k <= n - i ? abc[(v >> (18 - 6 * k)) & 63] : '=';
    }
    out[o] = '\0';
}

static int write_body(const char *dir, const char *name, void *p, int device, size_t bytes)
{
    cudaIpcMemHandle_t h;
    CHECK(cudaIpcGetMemHandle(&h, p));
    char b64[128], path[4096];
    base64((const unsigned char *)&h, sizeof h, b64);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "{\"raw_handle\":{\"b64\":\"%s\"},\"device_id\":%d,\"byte_size\":%zu}\n", b64,
            device, bytes);
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: cudashm_hold DTYPE X_BYTES Y_BYTES DIR [DEVICE]\n");
        return 2;
    }
    nd_dtype dt;
    if (!strcmp(argv[1], "float32"))
        dt = ND_FLOAT32;
    else if (!strcmp(argv[1], "float16"))
        dt = ND_FLOAT16;
    else if (!strcmp(argv[1], "bfloat16"))
        dt = ND_BFLOAT16;
    else {
        fprintf(stderr, "cudashm_hold: dtype %s: float32, float16 or bfloat16\n", argv[1]);
        return 2;
    }
    const size_t xb = strtoull(argv[2], NULL, 10), yb = strtoull(argv[3], NULL, 10);
    const int device = argc > 5 ? atoi(argv[5]) : 0;
    const size_t esz = nd_dtype_size(dt);
    if (!xb || !yb || xb % esz) {
        fprintf(stderr, "cudashm_hold: X_BYTES (a whole number of elements) and Y_BYTES\n");
        return 2;
    }
    CHECK(cudaSetDevice(device));
    void *x = NULL, *y = NULL;
    CHECK(cudaMalloc(&x, xb));
    CHECK(cudaMalloc(&y, yb));
    unsigned char *host = malloc(xb);
    if (!host)
        return 1;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < xb / esz; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        nd_store(dt, host, (int64_t)i, (float)((double)(s >> 11) / 9007199254740992.0 * 4 - 2));
    }
    CHECK(cudaMemcpy(x, host, xb, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(y, 0, yb));
    free(host);
    if (write_body(argv[4], "bench_in", x, device, xb) ||
        write_body(argv[4], "bench_out", y, device, yb))
        return 1;
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    return 0;
}
#endif
