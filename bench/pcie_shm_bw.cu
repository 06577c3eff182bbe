/*
 * pcie_shm_bw.cu - how fast one GPU's copy engines move request-sized pieces between the device
 * and host memory of the kinds normd copies from: a POSIX shared memory object mapped and pinned
 * with cudaHostRegister (a registered shared memory region, --allow-client-shm) and
 * cudaMallocHost memory (the staging), host-to-device alone, device-to-host alone, and both at
 * once on separate streams, as batches on different slots overlap.
 *
 *   build/bench/pcie_shm_bw [piece KiB] [pieces]      (defaults 512 and 256: 128 MiB a pass)
 *
 * Prints GB/s per case (the median of 5 timed passes after one warm-up). It answers whether a
 * workload of tensors in shared memory is bound by the GPU's link: normd's own rate times the
 * bytes per request, set beside these figures.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu_timing.cuh" /* CK */

/* A shared memory object of n bytes, mapped and pinned; unlinked at once (the mapping stays). */
static char *shm_pinned(size_t n)
{
    char key[64];
    snprintf(key, sizeof key, "/normd-pcie-bw-%d", (int)getpid());
    int fd = shm_open(key, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)n) != 0) {
        perror("shm_open");
        exit(1);
    }
    shm_unlink(key);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    memset(p, 1, n);
    CK(cudaHostRegister(p, n, cudaHostRegisterPortable));
    return (char *)p;
}

/* One pass: every piece copied in the given direction(s); dirs: 1 H2D, 2 D2H, 3 both (H2D on
 * s[0], D2H on s[1]). Returns seconds. */
static double pass(int dirs, char *host_in, char *host_out, char *dev_in, char *dev_out,
                   size_t piece, int pieces, cudaStream_t s[2], cudaEvent_t ev[4])
{
    CK(cudaEventRecord(ev[0], s[0]));
    CK(cudaStreamWaitEvent(s[1], ev[0], 0));
    for (int i = 0; i < pieces; i++) {
        size_t off = (size_t)i * piece;
        if (dirs & 1)
            CK(cudaMemcpyAsync(dev_in + off, host_in + off, piece, cudaMemcpyHostToDevice, s[0]));
        if (dirs & 2)
            CK(cudaMemcpyAsync(host_out + off, dev_out + off, piece, cudaMemcpyDeviceToHost,
                               s[1]));
    }
    CK(cudaEventRecord(ev[1], s[0]));
    CK(cudaEventRecord(ev[2], s[1]));
    CK(cudaEventSynchronize(ev[1]));
    CK(cudaEventSynchronize(ev[2]));
    float a = 0, b = 0;
    CK(cudaEventElapsedTime(&a, ev[0], ev[1]));
    CK(cudaEventElapsedTime(&b, ev[0], ev[2]));
    return std::max(a, b) * 1e-3;
}

int main(int argc, char **argv)
{
    const size_t piece = (argc > 1 ? strtoull(argv[1], NULL, 10) : 512) << 10;
    const int pieces = argc > 2 ? atoi(argv[2]) : 256;
    const size_t n = piece * (size_t)pieces;
    char *dev_in, *dev_out, *mh_in, *mh_out;
    CK(cudaMalloc(&dev_in, n));
    CK(cudaMalloc(&dev_out, n));
    CK(cudaMallocHost(&mh_in, n));
    CK(cudaMallocHost(&mh_out, n));
    memset(mh_in, 1, n);
    char *sh_in = shm_pinned(n), *sh_out = shm_pinned(n);
    cudaStream_t s[2];
    cudaEvent_t ev[4];
    for (auto &x : s)
        CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    for (auto &e : ev)
        CK(cudaEventCreate(&e));

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %zu KiB pieces, %d a pass; GB/s each way (median of 5 passes)\n", prop.name,
           piece >> 10, pieces);
    const char *kinds[2] = {"shared memory, cudaHostRegister", "cudaMallocHost"};
    char *ins[2] = {sh_in, mh_in}, *outs[2] = {sh_out, mh_out};
    const char *dir_names[4] = {"", "H2D alone", "D2H alone", "H2D + D2H at once"};
    for (int k = 0; k < 2; k++)
        for (int dirs = 1; dirs <= 3; dirs++) {
            pass(dirs, ins[k], outs[k], dev_in, dev_out, piece, pieces, s, ev); /* warm-up */
            std::vector<double> t;
            for (int r = 0; r < 5; r++)
                t.push_back(pass(dirs, ins[k], outs[k], dev_in, dev_out, piece, pieces, s, ev));
            std::sort(t.begin(), t.end());
            printf("  %-34s %-18s %6.1f\n", kinds[k], dir_names[dirs], (double)n / t[2] * 1e-9);
        }
    CK(cudaHostUnregister(sh_in));
    CK(cudaHostUnregister(sh_out));
    munmap(sh_in, n);
    munmap(sh_out, n);
    CK(cudaFreeHost(mh_in));
    CK(cudaFreeHost(mh_out));
    CK(cudaFree(dev_in));
    CK(cudaFree(dev_out));
    return 0;
}
