/*
 * gpu_axis.c - the CUDA backend's softmax / log-softmax over any axis and its PReLU, against the
 * float64 reference of tests/util with the shared tolerance rule.
 *
 * Every case draws a fresh random input, poisons the output on the device before the call, runs
 * the public nd_cuda_* entry point on the legacy stream and compares every element. Shapes cover
 * ranks 2-5 with every axis (the last one too: nd_cuda_softmax picks the row kernel there), inner
 * sizes 1, 3 and large, outer 1, columns long enough to need a cluster or the two-pass walk, and
 * tensors that start one element past an aligned address. Skipped when there is no CUDA device.
 */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_fast.h"
#include "util/nd_testutil.h"

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                    \
    } while (0)

static const nd_dtype all_dtypes[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};

static void need_device(void)
{
    if (nd_cuda_device_count() < 1)
        cr_skip_test("no CUDA device");
}

/* A device copy of n elements of dt, starting `offset` elements past a 256-byte aligned address. */
typedef struct dev_buf {
    void *base;
    void *p;
} dev_buf;

static dev_buf dev_alloc(nd_dtype dt, int64_t n, int offset)
{
    dev_buf b;
    size_t es = nd_dtype_size(dt);
    CUDA_OK(cudaMalloc(&b.base, (size_t)(n + offset) * es));
    b.p = (char *)b.base + (size_t)offset * es;
    return b;
}

static void shape_str(char *buf, size_t size, const int64_t *shape, int rank)
{
    size_t k = 0;
    k += snprintf(buf + k, size - k, "(");
    for (int i = 0; i < rank && k < size; i++)
        k += snprintf(buf + k, size - k, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (k < size)
        snprintf(buf + k, size - k, ")");
}

/* ---- softmax ---- */

enum { MASK_NONE, MASK_ATTENTION, MASK_NONFINITE /* attention, then nd_mask_nonfinite */ };

/* Softmax (log_ = 0) or log-softmax over (outer, dim, inner) of x ~ mean + std N(0, 1), masked
 * as `mask` says; x and y start `offset` elements past alignment. `what` names the case in
 * failure messages. */
static void check_softmax_mask(nd_dtype dt, int log_, int64_t outer, int64_t dim, int64_t inner,
                               int offset, double mean, double std, int mask, uint64_t *rng,
                               const char *what)
{
    int64_t n = outer * dim * inner;
    size_t es = nd_dtype_size(dt);
    void *hx = malloc((size_t)n * es), *hy = malloc((size_t)n * es);
    double *fx = malloc((size_t)n * sizeof(double)), *ref = malloc((size_t)n * sizeof(double));
    cr_assert(hx && hy && fx && ref);
    nd_fill_random(dt, hx, n, mean, std, rng, fx);
    if (mask != MASK_NONE)
        nd_mask_attention(dt, hx, fx, outer, dim, inner, rng);
    if (mask == MASK_NONFINITE)
        nd_mask_nonfinite(dt, hx, fx, outer, dim, inner);
    nd_poison(dt, hy, n);
    dev_buf dx = dev_alloc(dt, n, offset), dy = dev_alloc(dt, n, offset);
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy.p, hy, (size_t)n * es, cudaMemcpyHostToDevice));

    nd_softmax_args a = {dt, outer, dim, inner, dx.p, dy.p};
    nd_error err = {{0}};
    nd_status st = nd_cuda_softmax(&a, log_, NULL, &err);
    cr_assert_eq(st, ND_OK, "%s: %s", what, err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(hy, dy.p, (size_t)n * es, cudaMemcpyDeviceToHost));

    /* the same call again gives the same bits: column parts merge in one fixed order, whatever
     * order their blocks ran in (cluster ranks, split segments) */
    void *hy2 = malloc((size_t)n * es);
    cr_assert(hy2);
    CUDA_OK(cudaMemset(dy.p, 0xff, (size_t)n * es));
    st = nd_cuda_softmax(&a, log_, NULL, &err);
    cr_assert_eq(st, ND_OK, "%s (again): %s", what, err.msg);
    CUDA_OK(cudaMemcpy(hy2, dy.p, (size_t)n * es, cudaMemcpyDeviceToHost));
    cr_expect(memcmp(hy, hy2, (size_t)n * es) == 0, "%s %s %s: a second run gave other bits", what,
              log_ ? "log_softmax" : "softmax", nd_dtype_name(dt));
    free(hy2);

    nd_ref_softmax(fx, outer, dim, inner, log_, ref);
    char msg[256], label[200];
    snprintf(label, sizeof label, "%s %s %s (outer=%lld dim=%lld inner=%lld off=%d mean=%g) y",
             what, log_ ? "log_softmax" : "softmax", nd_dtype_name(dt), (long long)outer,
             (long long)dim, (long long)inner, offset, mean);
    int64_t bad = nd_compare(dt, hy, ref, n, label, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);

    cudaFree(dx.base);
    cudaFree(dy.base);
    free(hx);
    free(hy);
    free(fx);
    free(ref);
}

static void check_softmax_at(nd_dtype dt, int log_, int64_t outer, int64_t dim, int64_t inner,
                             int offset, double mean, double std, uint64_t *rng, const char *what)
{
    check_softmax_mask(dt, log_, outer, dim, inner, offset, mean, std, MASK_NONE, rng, what);
}

/* x ~ N(0, 9): a spread of 3 makes exp() range over many orders of magnitude */
static void check_softmax(nd_dtype dt, int log_, int64_t outer, int64_t dim, int64_t inner,
                          int offset, uint64_t *rng, const char *what)
{
    check_softmax_at(dt, log_, outer, dim, inner, offset, 0.0, 3.0, rng, what);
}

/* Every (dtype, op) on one (outer, dim, inner). */
static void check_softmax_all(int64_t outer, int64_t dim, int64_t inner, int offset, uint64_t *rng,
                              const char *what)
{
    for (int d = 0; d < 3; d++)
        for (int log_ = 0; log_ < 2; log_++)
            check_softmax(all_dtypes[d], log_, outer, dim, inner, offset, rng, what);
}

Test(gpu_axis, softmax_fixed_shapes)
{
    need_device();
    uint64_t rng = 0x5eed0001;
    /* the benchmark's shapes, scaled down where the CPU reference would take long */
    check_softmax_all(1, 128, 128 * 16 * 16 / 8, 0, &rng, "outer 1, axis 0 of (128,16,16,16)-like");
    check_softmax_all(64, 896, 48, 0, &rng, "(64,896,4,12) axis 1");
    check_softmax_all(2, 1000, 3136, 0, &rng, "(2,1000,56,56) axis 1");
    check_softmax_all(2, 32768, 64, 0, &rng, "(2,32768,64) axis 1 (long column)");
    check_softmax_all(4096, 8, 128, 0, &rng, "(4096,8,128) axis 1 (short column)");
    /* inner 1 (the last axis, through the same public call), inner 3 */
    check_softmax_all(37, 1000, 1, 0, &rng, "inner 1");
    check_softmax_all(33, 517, 3, 0, &rng, "inner 3");
    check_softmax_all(5, 3, 3, 0, &rng, "tiny");
    check_softmax_all(1, 1, 7, 0, &rng, "dim 1");
    /* outer 1 with long columns: cluster and two-pass paths */
    check_softmax_all(1, 70000, 8, 0, &rng, "outer 1, dim 70000, inner 8");
    check_softmax_all(1, 5000, 3, 0, &rng, "outer 1, dim 5000, inner 3");
    check_softmax_all(1, 200000, 2, 0, &rng, "outer 1, dim 200000, inner 2");
    check_softmax_all(3, 3000, 1000, 0, &rng, "large inner, long column");
    /* the split path in slabs of outer indices (10 MB of float32 per outer index) */
    check_softmax_all(3, 40000, 64, 0, &rng, "(3,40000,64) axis 1 (split path, slabs)");
    /* more inner widths (24, 8, 64, 1024) and column lengths (33 to 2048) */
    check_softmax_all(5, 640, 24, 0, &rng, "(5,640,24)");
    check_softmax_all(3, 2048, 8, 0, &rng, "(3,2048,8)");
    check_softmax_all(100, 33, 64, 0, &rng, "(100,33,64)");
    check_softmax_all(2, 300, 1024, 0, &rng, "(2,300,1024)");
    /* unaligned tensors: the pack shrinks but the result must not change */
    check_softmax_all(7, 100, 64, 1, &rng, "offset by one element");
    check_softmax_all(2, 9, 1, 1, &rng, "offset by one element, inner 1");
}

/* Shapes the slab kernels take (a short inner extent): the one-pass kernel with enough outer
 * indices to fill the GPU (one block per slab at 16-bit (300,200,64), clusters of 2 to 8 blocks,
 * blocks of 160, 192 and 256 threads, threads with one pack fewer than others), the two-pass
 * segments where the columns are too long for a cluster and the slab layout's q (3 or 6 packs)
 * does not divide a warp (a last segment shorter than the others, inner 24), inner rows too wide
 * for one slab cut into tiles of 8 packs (inner 3136 and 2048), and the resident segments of long
 * slabs that fit on chip (outer 1, 2 and 8; (8,32768,64): float32 streams some rounds;
 * (8,30001,16): a last segment with a partial round and an empty one; inner 8: one pack a row at
 * 16 bits, a segment of one round); the plan trace shows the path was taken for every dtype. */
Test(gpu_axis, softmax_slab_shapes)
{
    need_device();
    uint64_t rng = 0x5eed0003;
    static const struct {
        int64_t outer, dim, inner;
        const char *plan;
    } shapes[] = {
        {300, 200, 64, "axis slab "},       {400, 333, 48, "axis slab "},
        {300, 1000, 40, "axis slab "},      {300, 512, 64, "axis slab "},
        {320, 896, 48, "axis slab "},       {2, 32768, 64, "axis slab-res "},
        {5, 9999, 24, "axis slab-split "},  {1, 70000, 8, "axis slab-res "},
        {4, 300, 3136, "axis slab "},       {6, 333, 2048, "axis slab "},
        {8, 32768, 64, "axis slab-res "},   {8, 30001, 16, "axis slab-res "},
        {8, 100000, 8, "axis slab-res "},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int log_ = 0; log_ < 2; log_++) {
                char what[96];
                snprintf(what, sizeof what, "slab (%lld,%lld,%lld)", (long long)shapes[i].outer,
                         (long long)shapes[i].dim, (long long)shapes[i].inner);
                nd_cuda_plan_trace(1);
                check_softmax(all_dtypes[d], log_, shapes[i].outer, shapes[i].dim, shapes[i].inner,
                              0, &rng, what);
                nd_cuda_plan_trace(0);
                cr_expect(strncmp(nd_cuda_last_plan(), shapes[i].plan, strlen(shapes[i].plan)) == 0,
                          "%s %s: plan \"%s\", expected \"%s...\"", what,
                          nd_dtype_name(all_dtypes[d]), nd_cuda_last_plan(), shapes[i].plan);
            }
}

/* Columns far from zero, x ~ +-30000 + 40 N(0, 1) (float16 holds them in steps of 16, bfloat16
 * in steps of 128). The kernels subtract the column max before scaling by log2 e, then take
 * the softmax output as one ex2.approx of (x - max) log2 e - log2(sum) (nd_exp_div): a form that
 * scaled x and the max apart, as x log2 e - max log2 e with max log2 e rounded to float, would be
 * off by up to 2^-9 in the exponent there (0.14% of an output, 1.4 to 2.8 float16 ulp). The
 * cached kernel, the one-pass slab kernel with and without clusters, and the resident slabs. */
Test(gpu_axis, softmax_far_from_zero)
{
    need_device();
    uint64_t rng = 0x5eed0004;
    static const int64_t shapes[][3] = {
        {4096, 8, 128}, {64, 896, 48}, {300, 200, 64}, {2, 32768, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int log_ = 0; log_ < 2; log_++)
                for (int sign = -1; sign <= 1; sign += 2)
                    check_softmax_at(all_dtypes[d], log_, shapes[i][0], shapes[i][1],
                                     shapes[i][2], 0, sign * 30000.0, 40.0, &rng, "far from zero");
}

/* The kernels that ask L2 for x ahead of their own (ND_AXIS_CACHED_PF, ND_AXIS_SLAB_PF in
 * softmax_axis.cu): 16-bit grids of more blocks than a fraction of a device-full ahead, blocks of
 * whole slabs in the cached kernel ((12288,8,128): 1536 blocks) and tiles of the one-pass slab
 * kernel ((16,200,3136): 784 tiles, the prefetch a whole slab of 49 tiles or more ahead, so the
 * last tiles ask for none). On a fast device the plan names the distance (" pf="); elsewhere, and
 * for float32, no kernel prefetches. */
Test(gpu_axis, softmax_l2_prefetch)
{
    need_device();
    const int fast = nd_test_fast_device();
    uint64_t rng = 0x5eed0007;
    static const struct {
        int64_t outer, dim, inner;
        const char *plan;
    } shapes[] = {{12288, 8, 128, "axis cached "}, {16, 200, 3136, "axis slab "}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int log_ = 0; log_ < 2; log_++) {
                char what[96];
                snprintf(what, sizeof what, "prefetch (%lld,%lld,%lld)",
                         (long long)shapes[i].outer, (long long)shapes[i].dim,
                         (long long)shapes[i].inner);
                nd_cuda_plan_trace(1);
                check_softmax(all_dtypes[d], log_, shapes[i].outer, shapes[i].dim, shapes[i].inner,
                              0, &rng, what);
                nd_cuda_plan_trace(0);
                const char *plan = nd_cuda_last_plan();
                const int want = fast && all_dtypes[d] != ND_FLOAT32;
                cr_expect(strncmp(plan, shapes[i].plan, strlen(shapes[i].plan)) == 0 &&
                              (strstr(plan, " pf=") != NULL) == want,
                          "%s %s on %s device: plan \"%s\", expected \"%s...\" %s a prefetch",
                          what, nd_dtype_name(all_dtypes[d]), fast ? "a fast" : "a", plan,
                          shapes[i].plan, want ? "with" : "without");
            }
}

/* Masked scores (nd_mask_attention: causal prefixes, scattered -inf, whole columns masked)
 * through every kind of kernel: over the last axis the warp kernel (64 and 1000 columns), the
 * tile kernel (128), the block kernel (4096), the split kernel (131072 columns, several chunks a
 * row) and the stage kernel (rows off the 16-byte grid: 77 columns); over other axes the cached
 * kernel (with clusters at (3,3000,1000) and 16-bit (64,896,48)), the one-pass slab kernel
 * (float32 (64,896,48)), the resident and the two-pass slabs (plans as softmax_masked_nonfinite
 * asserts them; that test also takes the column split path). A thread, lane or block whose
 * elements of a row are all masked holds a max of -inf; its outputs are exp(-inf) = 0
 * (log_softmax: -inf), not exp(-inf - -inf). Against the kernels before the fix, 36 of these 72
 * cases failed (H200). */
Test(gpu_axis, softmax_masked)
{
    need_device();
    uint64_t rng = 0x5eed0005;
    static const int64_t shapes[][3] = {
        {300, 64, 1},  {100, 1000, 1}, {257, 128, 1}, {40, 4096, 1},  {5, 131072, 1},
        {60, 77, 1},   {4096, 8, 128}, {64, 896, 48}, {2, 32768, 64}, {5, 9999, 24},
        {1, 70000, 8}, {3, 3000, 1000}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int log_ = 0; log_ < 2; log_++)
                check_softmax_mask(all_dtypes[d], log_, shapes[i][0], shapes[i][1], shapes[i][2],
                                   0, 0.0, 3.0, MASK_ATTENTION, &rng, "masked");
}

/* The same masks with a NaN or +inf among the masked scores of some columns
 * (nd_mask_nonfinite): those columns are NaN throughout, as PyTorch's, also where the thread,
 * lane, block or segment that holds a NaN holds only masked scores besides (a max that passes
 * over NaN makes its part (-inf, 0), and the NaN is lost) and where another holds only masked
 * ones (its outputs are exp(-inf) times the row's scale: NaN, not 0). Rows as softmax_masked's,
 * and each path over other axes, named by its plan. Against 07b9c4a's kernels 48 of the first
 * 13 shapes' 78 cases failed: every last-axis case and the two-pass slabs (H200). */
Test(gpu_axis, softmax_masked_nonfinite)
{
    need_device();
    uint64_t rng = 0x5eed0006;
    static const struct {
        int64_t outer, dim, inner;
        const char *plan; /* NULL: a last-axis kernel, which one depends on the device */
    } shapes[] = {
        {300, 64, 1, NULL},   {100, 1000, 1, NULL},  {257, 128, 1, NULL},  {40, 4096, 1, NULL},
        {5, 131072, 1, NULL}, {60, 77, 1, NULL},     {300, 32, 1, NULL},
        {4096, 8, 128, "axis cached "},   {3, 3000, 1000, "axis cached "},
        {300, 200, 64, "axis slab "},     {320, 896, 48, "axis slab "},
        {2, 32768, 64, "axis slab-res "}, {1, 70000, 8, "axis slab-res "},
        {5, 9999, 24, "axis slab-split "}, {2, 20000, 7, "axis split "}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int d = 0; d < 3; d++)
            for (int log_ = 0; log_ < 2; log_++) {
                nd_cuda_plan_trace(1);
                check_softmax_mask(all_dtypes[d], log_, shapes[i].outer, shapes[i].dim,
                                   shapes[i].inner, 0, 0.0, 3.0, MASK_NONFINITE, &rng,
                                   "masked, non-finite");
                nd_cuda_plan_trace(0);
                if (shapes[i].plan)
                    cr_expect(strncmp(nd_cuda_last_plan(), shapes[i].plan,
                                      strlen(shapes[i].plan)) == 0,
                              "(%lld,%lld,%lld) %s: plan \"%s\", expected \"%s...\"",
                              (long long)shapes[i].outer, (long long)shapes[i].dim,
                              (long long)shapes[i].inner, nd_dtype_name(all_dtypes[d]),
                              nd_cuda_last_plan(), shapes[i].plan);
            }
}

/* Random shapes of rank 2-5, every axis of each. */
Test(gpu_axis, softmax_random_shapes)
{
    need_device();
    uint64_t rng = 0x5eed0002;
    for (int trial = 0; trial < 12; trial++) {
        int rank = 2 + (int)(nd_rand_u64(&rng) % 4);
        int64_t shape[5];
        int64_t n = 1;
        for (int i = 0; i < rank; i++) {
            /* sizes from 1 to ~70, with the element count kept under about 600k */
            int64_t lim = rank <= 2 ? 700 : rank == 3 ? 90 : 28;
            shape[i] = 1 + (int64_t)(nd_rand_u64(&rng) % (uint64_t)lim);
            n *= shape[i];
        }
        char sh[96];
        shape_str(sh, sizeof sh, shape, rank);
        for (int axis = 0; axis < rank; axis++) {
            int64_t outer = 1, inner = 1;
            for (int i = 0; i < axis; i++)
                outer *= shape[i];
            for (int i = axis + 1; i < rank; i++)
                inner *= shape[i];
            char what[160];
            snprintf(what, sizeof what, "random %s axis %d", sh, axis);
            nd_dtype dt = all_dtypes[(trial + axis) % 3];
            int offset = (int)(nd_rand_u64(&rng) % 4 == 0);
            for (int log_ = 0; log_ < 2; log_++)
                check_softmax(dt, log_, outer, shape[axis], inner, offset, &rng, what);
        }
        (void)n;
    }
}

/* ---- prelu ---- */

/* x and y offsets in elements from alignment (they may differ). */
static void check_prelu(nd_dtype dt, int64_t outer, int64_t channels, int64_t inner, int shared,
                        int xoff, int yoff, uint64_t *rng, const char *what)
{
    int64_t n = outer * channels * inner;
    int64_t na = shared ? 1 : channels;
    size_t es = nd_dtype_size(dt);
    void *hx = malloc((size_t)n * es), *hy = malloc((size_t)n * es), *ha = malloc((size_t)na * es);
    double *fx = malloc((size_t)n * sizeof(double)), *ref = malloc((size_t)n * sizeof(double));
    double *fa = malloc((size_t)na * sizeof(double));
    cr_assert(hx && hy && ha && fx && ref && fa);
    nd_fill_random(dt, hx, n, 0.0, 1.0, rng, fx);
    nd_fill_random(dt, ha, na, 0.25, 0.2, rng, fa);
    nd_poison(dt, hy, n);
    dev_buf dx = dev_alloc(dt, n, xoff), dy = dev_alloc(dt, n, yoff), da = dev_alloc(dt, na, 0);
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy.p, hy, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(da.p, ha, (size_t)na * es, cudaMemcpyHostToDevice));

    nd_prelu_args a = {dt, outer, channels, inner, dx.p, dy.p, da.p, na};
    nd_error err = {{0}};
    nd_status st = nd_cuda_prelu(&a, NULL, &err);
    cr_assert_eq(st, ND_OK, "%s: %s", what, err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(hy, dy.p, (size_t)n * es, cudaMemcpyDeviceToHost));

    nd_ref_prelu(fx, outer, channels, inner, fa, na, ref);
    char msg[256], label[200];
    snprintf(label, sizeof label, "%s prelu %s %s (outer=%lld channels=%lld inner=%lld xoff=%d "
             "yoff=%d) y", what, shared ? "shared" : "per-channel", nd_dtype_name(dt),
             (long long)outer, (long long)channels, (long long)inner, xoff, yoff);
    int64_t bad = nd_compare(dt, hy, ref, n, label, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);

    cudaFree(dx.base);
    cudaFree(dy.base);
    cudaFree(da.base);
    free(hx);
    free(hy);
    free(ha);
    free(fx);
    free(ref);
    free(fa);
}

static void check_prelu_all(int64_t outer, int64_t channels, int64_t inner, int xoff, int yoff,
                            uint64_t *rng, const char *what)
{
    for (int d = 0; d < 3; d++)
        for (int shared = 0; shared < 2; shared++)
            check_prelu(all_dtypes[d], outer, channels, inner, shared, xoff, yoff, rng, what);
}

Test(gpu_axis, prelu_fixed_shapes)
{
    need_device();
    uint64_t rng = 0x5eed0003;
    check_prelu_all(4, 64, 112 * 112, 0, 0, &rng, "(4,64,112,112)");
    /* more 16-bit packs than prelu_policy::unroll2_min_packs: two packs per thread */
    check_prelu_all(24, 64, 112 * 112, 0, 0, &rng, "(24,64,112,112)");
    check_prelu_all(3, 64, 111 * 111, 0, 0, &rng, "(3,64,111,111) inner 111*111");
    check_prelu_all(3, 64, 111 * 111, 1, 1, &rng, "(3,64,111,111) offset by one element");
    check_prelu_all(5, 512, 7 * 7, 0, 0, &rng, "(5,512,7,7)");
    check_prelu_all(5, 512, 7 * 7, 1, 1, &rng, "(5,512,7,7) offset by one element");
    check_prelu_all(9, 33, 3, 0, 0, &rng, "inner 3");
    check_prelu_all(9, 33, 3, 1, 1, &rng, "inner 3, offset by one element");
    check_prelu_all(1000, 37, 1, 0, 0, &rng, "inner 1 (rank 2)");
    check_prelu_all(1000, 37, 1, 1, 1, &rng, "inner 1 (rank 2), offset by one element");
    check_prelu_all(2, 7, 1001, 1, 0, &rng, "x and y misaligned differently");
    check_prelu_all(2, 7, 1001, 0, 3, &rng, "x and y misaligned differently (3)");
    check_prelu_all(1, 1, 5, 1, 1, &rng, "fewer elements than a pack");
    check_prelu_all(1, 3, 1, 0, 0, &rng, "three elements");
}

/* Random (N, C, ...) shapes of rank 2-5. */
Test(gpu_axis, prelu_random_shapes)
{
    need_device();
    uint64_t rng = 0x5eed0004;
    for (int trial = 0; trial < 24; trial++) {
        int rank = 2 + trial % 4;
        int64_t shape[5], inner = 1;
        for (int i = 0; i < rank; i++) {
            int64_t lim = rank <= 2 ? 900 : rank == 3 ? 120 : 30;
            shape[i] = 1 + (int64_t)(nd_rand_u64(&rng) % (uint64_t)lim);
        }
        for (int i = 2; i < rank; i++)
            inner *= shape[i];
        char sh[96], what[160];
        shape_str(sh, sizeof sh, shape, rank);
        snprintf(what, sizeof what, "random %s", sh);
        int off = (int)(nd_rand_u64(&rng) % 3 == 0);
        check_prelu(all_dtypes[trial % 3], shape[0], shape[1], inner, trial % 2, off, off, &rng,
                    what);
    }
}

/* A tensor past 2^31 elements: offsets must be 64-bit. Only the last planes are checked, against
 * the rule, after a device-side fill; skipped when the device lacks the memory. */
Test(gpu_axis, prelu_over_2g_elements)
{
    need_device();
    const int64_t channels = 3, inner = 1 << 20; /* planes of 1M half floats */
    const int64_t outer = ((int64_t)1 << 31) / (channels * inner) + 2;
    const int64_t n = outer * channels * inner;
    size_t freeb = 0, totalb = 0;
    CUDA_OK(cudaMemGetInfo(&freeb, &totalb));
    if ((size_t)n * 2 * 2 + (1u << 30) > freeb)
        cr_skip_test("needs %lld MB of device memory", (long long)(n * 4 >> 20));
    void *x = NULL, *y = NULL, *al = NULL;
    CUDA_OK(cudaMalloc(&x, (size_t)n * 2));
    CUDA_OK(cudaMalloc(&y, (size_t)n * 2));
    CUDA_OK(cudaMalloc(&al, channels * 2));
    /* x = -1.0 (0xbc00) everywhere, alpha = (0.5, 0.25, 0.125): y = -alpha[c] */
    CUDA_OK(cudaMemset(x, 0xbc, (size_t)n * 2)); /* 0xbcbc = -1.18359375 in float16 */
    const uint16_t ha[3] = {0x3800, 0x3400, 0x3000};
    CUDA_OK(cudaMemcpy(al, ha, sizeof ha, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(y, 0xff, (size_t)n * 2));
    nd_prelu_args a = {ND_FLOAT16, outer, channels, inner, x, y, al, channels};
    nd_error err = {{0}};
    cr_assert_eq(nd_cuda_prelu(&a, NULL, &err), ND_OK, "%s", err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    /* the last 2 planes of the last outer index, and 2 planes straddling element 2^31 */
    int64_t starts[2] = {n - 2 * inner, ((int64_t)1 << 31) - inner};
    uint16_t *h = malloc((size_t)(2 * inner) * 2);
    double *ref = malloc((size_t)(2 * inner) * sizeof(double));
    cr_assert(h && ref);
    for (int s = 0; s < 2; s++) {
        CUDA_OK(cudaMemcpy(h, (char *)y + starts[s] * 2, (size_t)(2 * inner) * 2,
                           cudaMemcpyDeviceToHost));
        for (int64_t k = 0; k < 2 * inner; k++) {
            int64_t c = ((starts[s] + k) / inner) % channels;
            ref[k] = -1.18359375 * (c == 0 ? 0.5 : c == 1 ? 0.25 : 0.125);
        }
        char msg[256];
        int64_t bad = nd_compare(ND_FLOAT16, h, ref, 2 * inner, "y[tail planes]", msg, sizeof msg);
        cr_expect_eq(bad, 0, "start %lld: %lld mismatches; first: %s", (long long)starts[s],
                     (long long)bad, msg);
    }
    free(h);
    free(ref);
    cudaFree(x);
    cudaFree(y);
    cudaFree(al);
}

/* Same for the axis softmax: 2^31 + elements, checking a few columns at the far end. */
Test(gpu_axis, softmax_axis_over_2g_elements)
{
    need_device();
    const int64_t dim = 4, inner = 1 << 20;
    const int64_t outer = ((int64_t)1 << 31) / (dim * inner) + 1;
    const int64_t n = outer * dim * inner;
    size_t freeb = 0, totalb = 0;
    CUDA_OK(cudaMemGetInfo(&freeb, &totalb));
    if ((size_t)n * 2 * 2 + (1u << 30) > freeb)
        cr_skip_test("needs %lld MB of device memory", (long long)(n * 4 >> 20));
    void *x = NULL, *y = NULL;
    CUDA_OK(cudaMalloc(&x, (size_t)n * 2));
    CUDA_OK(cudaMalloc(&y, (size_t)n * 2));
    /* every x equal: softmax is 1/dim = 0.25 everywhere */
    CUDA_OK(cudaMemset(x, 0x3c, (size_t)n * 2));
    CUDA_OK(cudaMemset(y, 0xff, (size_t)n * 2));
    nd_softmax_args a = {ND_FLOAT16, outer, dim, inner, x, y};
    nd_error err = {{0}};
    cr_assert_eq(nd_cuda_softmax(&a, 0, NULL, &err), ND_OK, "%s", err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    const int64_t m = dim * inner;
    uint16_t *h = malloc((size_t)m * 2);
    double *ref = malloc((size_t)m * sizeof(double));
    cr_assert(h && ref);
    CUDA_OK(cudaMemcpy(h, (char *)y + (n - m) * 2, (size_t)m * 2, cudaMemcpyDeviceToHost));
    for (int64_t k = 0; k < m; k++)
        ref[k] = 0.25;
    char msg[256];
    int64_t bad = nd_compare(ND_FLOAT16, h, ref, m, "y[last outer]", msg, sizeof msg);
    cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);
    free(h);
    free(ref);
    cudaFree(x);
    cudaFree(y);
}
