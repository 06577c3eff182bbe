/*
 * gpu_rows.c - the CUDA backend's last-axis operators (layernorm, rmsnorm, softmax, log_softmax)
 * against the float64 reference of tests/util, with the shared tolerance rule.
 *
 * Every case draws fresh random inputs, poisons y (and mean/rstd) on the device before the call,
 * runs the public nd_cuda_* entry point on the legacy stream and compares every element. The
 * shapes walk every kernel of the dispatch (sub-warp groups, warp, block, split rows, cluster,
 * stream): widths 1, 3, 4 .. 1,000,003, rows 1 .. a few hundred, x one element past an aligned
 * address (y at the same or another offset), gamma/beta present or absent, mean/rstd requested or
 * not, and rows of mean 1e4 and std 1. One case has more than 2^31 elements, checked on its last
 * rows; one runs long rows on four streams at once and wants the same bits from each (the
 * split-row kernel's result must not depend on timing, and concurrent launches must not
 * deadlock). The norm_ulp cases hold LayerNorm and RMSNorm to 1 ulp of the float64 result in
 * 16-bit dtypes at widths 1 .. 2,500,001, and ask their signed errors to average to zero.
 * Skipped when there is no CUDA device.
 */
#include <criterion/criterion.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/nd_dtype.h"
#include "gpu_fast.h"
#include "util/nd_testutil.h"

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                    \
    } while (0)

static void need_device(void)
{
    if (nd_cuda_device_count() < 1)
        cr_skip_test("no CUDA device");
}

/* A device buffer of n elements of es bytes starting `off` elements past a 256-byte boundary. */
typedef struct dbuf {
    void *base;
    void *p;
} dbuf;

static dbuf dalloc(size_t es, int64_t n, int off)
{
    dbuf b = {NULL, NULL};
    CUDA_OK(cudaMalloc(&b.base, (size_t)(n + off) * es));
    b.p = (char *)b.base + (size_t)off * es;
    return b;
}

static void dfree(dbuf b)
{
    if (b.base)
        cudaFree(b.base);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert(p, "out of host memory");
    return p;
}

/* ---------------------------------------------------------------------------------------------
 * One case
 * ------------------------------------------------------------------------------------------- */

typedef struct rcase {
    nd_op op;
    nd_dtype dt;
    int64_t rows, cols;
    int xoff, yoff;     /* element offsets from alignment */
    int params;         /* gamma (and beta for layernorm) given */
    int stats;          /* mean/rstd requested */
    double mean, std;   /* of x */
} rcase;

/* The standard deviation of x for an op's cases: softmax and log_softmax take exp over many
 * orders of magnitude at 3; the norms see 1. */
static double case_std(nd_op op)
{
    return op == ND_OP_SOFTMAX || op == ND_OP_LOG_SOFTMAX ? 3.0 : 1.0;
}

static void run_case(const rcase *c, uint64_t *rng)
{
    const nd_dtype dt = c->dt;
    const size_t es = nd_dtype_size(dt);
    const int64_t n = c->rows * c->cols, rows = c->rows, cols = c->cols;
    void *hx = xmalloc((size_t)n * es), *hy = xmalloc((size_t)n * es);
    void *hg = xmalloc((size_t)cols * es), *hb = xmalloc((size_t)cols * es);
    double *fx = xmalloc((size_t)n * sizeof(double)), *ref = xmalloc((size_t)n * sizeof(double));
    double *fg = xmalloc((size_t)cols * sizeof(double)), *fb = xmalloc((size_t)cols * sizeof(double));
    double *rmean = xmalloc((size_t)rows * sizeof(double)), *rrstd = xmalloc((size_t)rows * sizeof(double));
    float *hmean = xmalloc((size_t)rows * 4), *hrstd = xmalloc((size_t)rows * 4);

    nd_fill_random(dt, hx, n, c->mean, c->std, rng, fx);
    nd_fill_random(dt, hg, cols, 1.0, 0.5, rng, fg);
    nd_fill_random(dt, hb, cols, 0.0, 0.5, rng, fb);
    nd_poison(dt, hy, n);
    nd_poison(ND_FLOAT32, hmean, rows);
    nd_poison(ND_FLOAT32, hrstd, rows);

    dbuf dx = dalloc(es, n, c->xoff), dy = dalloc(es, n, c->yoff);
    dbuf dg = dalloc(es, cols, 0), db = dalloc(es, cols, 0);
    dbuf dm = dalloc(4, rows, 0), dr = dalloc(4, rows, 0);
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy.p, hy, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg.p, hg, (size_t)cols * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db.p, hb, (size_t)cols * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dm.p, hmean, (size_t)rows * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dr.p, hrstd, (size_t)rows * 4, cudaMemcpyHostToDevice));

    char label[200];
    snprintf(label, sizeof label, "%s %s rows=%lld cols=%lld xoff=%d yoff=%d params=%d stats=%d "
             "mean=%g", nd_op_name(c->op), nd_dtype_name(dt), (long long)rows, (long long)cols,
             c->xoff, c->yoff, c->params, c->stats, c->mean);

    nd_error err = {{0}};
    nd_status st;
    const int is_norm = c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM;
    if (is_norm) {
        nd_norm_args a;
        memset(&a, 0, sizeof a);
        a.dtype = dt;
        a.rows = rows;
        a.cols = cols;
        a.x = dx.p;
        a.y = dy.p;
        a.gamma = c->params ? dg.p : NULL;
        a.beta = c->params && c->op == ND_OP_LAYERNORM ? db.p : NULL;
        a.eps = c->op == ND_OP_LAYERNORM ? 1e-5f : 1e-6f;
        a.mean = c->stats && c->op == ND_OP_LAYERNORM ? (float *)dm.p : NULL;
        a.rstd = c->stats ? (float *)dr.p : NULL;
        st = c->op == ND_OP_LAYERNORM ? nd_cuda_layernorm(&a, NULL, &err)
                                      : nd_cuda_rmsnorm(&a, NULL, &err);
        if (c->op == ND_OP_LAYERNORM)
            nd_ref_layernorm(fx, rows, cols, a.gamma ? fg : NULL, a.beta ? fb : NULL, a.eps, ref,
                             rmean, rrstd);
        else
            nd_ref_rmsnorm(fx, rows, cols, a.gamma ? fg : NULL, a.eps, ref, rrstd);
    } else {
        nd_softmax_args a = {dt, rows, cols, 1, dx.p, dy.p};
        int log_ = c->op == ND_OP_LOG_SOFTMAX;
        st = nd_cuda_softmax(&a, log_, NULL, &err);
        nd_ref_softmax(fx, rows, cols, 1, log_, ref);
    }
    cr_assert_eq(st, ND_OK, "%s: status %d: %s", label, (int)st, err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(hy, dy.p, (size_t)n * es, cudaMemcpyDeviceToHost));

    char msg[256], what[260];
    snprintf(what, sizeof what, "%s: y", label);
    int64_t bad = nd_compare(dt, hy, ref, n, what, msg, sizeof msg);
    cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);
    if (is_norm && c->stats) {
        CUDA_OK(cudaMemcpy(hrstd, dr.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
        snprintf(what, sizeof what, "%s: rstd", label);
        bad = nd_compare_f32(hrstd, rrstd, rows, what, msg, sizeof msg);
        cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);
        if (c->op == ND_OP_LAYERNORM) {
            CUDA_OK(cudaMemcpy(hmean, dm.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
            snprintf(what, sizeof what, "%s: mean", label);
            bad = nd_compare_f32(hmean, rmean, rows, what, msg, sizeof msg);
            cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);
        }
    }

    dfree(dx), dfree(dy), dfree(dg), dfree(db), dfree(dm), dfree(dr);
    free(hx), free(hy), free(hg), free(hb), free(fx), free(ref), free(fg), free(fb);
    free(rmean), free(rrstd), free(hmean), free(hrstd);
}

/* ---------------------------------------------------------------------------------------------
 * Shape lists
 * ------------------------------------------------------------------------------------------- */

/* (rows, cols) covering every kernel: sub-warp groups, a warp, blocks of 128..512, clusters of
 * 2..16, the stream kernel; widths on and off the 16-byte grid. */
static const int64_t fixed_shapes[][2] = {
    {1, 1},      {7, 1},     {5, 3},      {9, 4},     {33, 7},    {3, 32},     {129, 64},
    {31, 100},   {40, 128},  {17, 255},   {11, 256},  {9, 768},   {9, 1000},   {6, 1024},
    {5, 1025},   {4, 2048},  {3, 3001},   {4, 4096},  {3, 4097},  {2, 8192},   {2, 12345},
    {2, 16384},  {1, 20000}, {2, 32768},  {1, 40000}, {1, 65536}, {1, 65539},  {1, 131072},
    {1, 262144}, {1, 262147}, {1, 1000000},
    /* float32 rows of one 1024-thread block (the policies' big_block), off its exact lengths */
    {3, 18433},  {3, 26000},  {2, 30001},
    /* long rows, several per call, odd widths: clusters, and the split-row kernel
     * (rows_split.cuh) with more chunk blocks than the device holds at once (5 x 1048576 float32:
     * 320 blocks of 64 KB), so blocks wait on chunks of rows that start later */
    {37, 65539}, {300, 40001}, {5, 1048576}, {3, 1000003},
};

static void run_op_dtype(nd_op op, nd_dtype dt, uint64_t seed)
{
    uint64_t rng = seed;
    const int nf = (int)(sizeof fixed_shapes / sizeof fixed_shapes[0]);
    for (int i = 0; i < nf; i++) {
        rcase c = {op, dt, fixed_shapes[i][0], fixed_shapes[i][1], 0, 0, 1, 1, 0.0, 1.0};
        /* rotate the variations over the list so every kernel sees each of them */
        switch (i % 5) {
        case 1: c.xoff = c.yoff = 1; break;              /* x one element past alignment */
        case 2: c.params = 0; c.stats = 0; break;        /* no gamma/beta, no statistics */
        case 3: c.mean = 1e4; break;                     /* a large mean */
        case 4: c.xoff = 1; c.yoff = 0; c.stats = 0; break; /* x and y on different offsets */
        default: break;
        }
        c.std = case_std(op);
        run_case(&c, &rng);
    }
    /* random shapes, every variation drawn independently */
    for (int t = 0; t < 24; t++) {
        rcase c;
        c.op = op;
        c.dt = dt;
        c.rows = 1 + (int64_t)(nd_rand_u64(&rng) % 300);
        /* log-uniform widths from 1 to about 20000 */
        c.cols = (int64_t)exp(nd_rand_uniform(&rng) * log(20000.0));
        if (c.cols < 1)
            c.cols = 1;
        c.xoff = (int)(nd_rand_u64(&rng) % 3 == 0);
        c.yoff = nd_rand_u64(&rng) % 4 == 0 ? 1 - c.xoff : c.xoff;
        c.params = (int)(nd_rand_u64(&rng) % 2);
        c.stats = (int)(nd_rand_u64(&rng) % 2);
        c.mean = nd_rand_u64(&rng) % 4 == 0 ? 1e4 : 0.0;
        c.std = case_std(op);
        run_case(&c, &rng);
    }
    /* a mean of 1e4 on every path, x aligned and not */
    for (int i = 0; i < nf; i += 2) {
        rcase c = {op, dt, fixed_shapes[i][0], fixed_shapes[i][1], i % 4 == 0, i % 4 == 0, 1, 1,
                   1e4, 1.0};
        run_case(&c, &rng);
    }
    /* rows on the 16-byte grid that the power-of-two groups leave some lanes or threads short of
     * packs for (widths of models): the fitted geometries of ND_ROWS_WARP_FIT (16-bit 24-192
     * columns in 1-8 lanes of 3 packs, 320 in 8 lanes of 5, 640 / 896 in 16 of 5 / 7), of
     * ND_ROWS_WARP_FIT_DOWN (384 in 16 lanes of 3, float32 192)
     * and the parameter pipe of ND_ROWS_PIPE_PARTIAL (576 in 32 lanes of 3, 1600 of 7, 3200 in
     * 128 threads of 4), which run the grid twins of the warp and block kernels
     * (ND_ROWS_GRID_TWIN; 16-bit 200 in 8 lanes of 4, 392 in 16 of 4, 24 in 2 lanes of 2, 40
     * and 56 in 4 of 2, float32 4800 in 512 threads of 3, 20488 in a block of 1024 where the
     * policy takes one), and of ND_ROWS_WARP_FIT_QUARTER where a policy takes them (2 and 4
     * lanes of 5 or 7 packs: 16-bit 80 / 112 / 160 / 224, float32 40 / 56 / 80 / 112), and
     * of ND_ROWS_WARP_FIT_TAIL where a policy takes them (lanes of 5-7 packs, the last ones
     * short: 16-bit 72 / 288 / 352 / 416 / 576 / 832, float32 72 / 288 / 416), mean 0 and 1e4,
     * and without parameters or statistics */
    static const int64_t partial_widths[] = {24,  40,  48,  56,  72,   80,   96,   112,  160,
                                             192, 200, 224, 288, 320,  352,  384,  392,  416,
                                             576, 640, 832, 896, 1600, 3200, 4800, 20488};
    for (size_t i = 0; i < sizeof partial_widths / sizeof partial_widths[0]; i++)
        for (int m = 0; m < 3; m++) {
            rcase c = {op, dt, 37, partial_widths[i], 0, 0, m < 2, m < 2, m == 1 ? 1e4 : 0.0,
                       case_std(op)};
            run_case(&c, &rng);
        }
}

/* The tile kernel (rows_tile.cuh) takes rows the warp kernel covers when x and y sit on the
 * 16-byte grid with whole packs a row (for the geometries its op's policy names), which the
 * lists above have only a few rows of. Here: many tiles a call, so blocks take several tiles and
 * the last tile is partial (row counts prime), at every group width; each case once with
 * parameters and statistics, once without, once with a mean of 1e4. */
static const int64_t tile_shapes[][2] = {
    {10007, 8}, {8191, 16}, {4099, 32}, {3001, 64}, {2053, 128}, {2053, 256},
    {1031, 512}, {1031, 768}, {517, 1024}, {263, 2048},
};

static void run_tile_cases(nd_op op, nd_dtype dt, uint64_t seed)
{
    uint64_t rng = seed;
    for (size_t i = 0; i < sizeof tile_shapes / sizeof tile_shapes[0]; i++) {
        for (int v = 0; v < 3; v++) {
            rcase c = {op, dt, tile_shapes[i][0], tile_shapes[i][1], 0, 0, v == 0, v == 0,
                       v == 2 ? 1e4 : 0.0, case_std(op)};
            run_case(&c, &rng);
        }
    }
}

/* The stage kernel (rows_stage.cuh) takes short rows off the 16-byte grid (up to the policy's
 * stage_packs packs of their own grid), where x and y share their offset on it: a block's rows
 * are one span, copied in and out in 16-byte packs, its first and last pack shared with the
 * neighbouring blocks' spans. Here: many spans a call (row counts prime, so the last is
 * partial), odd and even widths off the grid for both element sizes at every group width the
 * policies stage (1 to 16 lanes) and just past the policies' limits (81: 11 packs of 16-bit;
 * 257: LayerNorm's, 33 / 65 packs), x and y at offsets 0, 1 and 3 (spans at every offset;
 * 16-bit rows of odd and even bases); with parameters and statistics, without, with a mean of
 * 1e4; and x and y at different offsets (the warp kernel's generic form). */
static const int64_t stage_shapes[][2] = {
    {10007, 3}, {8191, 7},   {4099, 13},  {3001, 20},  {3001, 44}, {2053, 50}, {2053, 77},
    {2053, 79}, {1031, 81},  {1031, 127}, {1031, 197}, {517, 255}, {517, 257},
};

Test(gpu_rows, stage_kernel_many_rows)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX};
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    uint64_t rng = 0x7000;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (size_t i = 0; i < sizeof stage_shapes / sizeof stage_shapes[0]; i++)
                for (int v = 0; v < 4; v++) {
                    static const int xo[] = {0, 1, 3, 1}, yo[] = {0, 1, 3, 0};
                    rcase c = {ops[o], dts[d], stage_shapes[i][0], stage_shapes[i][1], xo[v],
                               yo[v], v != 1, v != 1, v == 2 ? 1e4 : 0.0, case_std(ops[o])};
                    run_case(&c, &rng);
                }
}

#define OP_DTYPE_TEST(name, op, dt, seed)                                                          \
    Test(gpu_rows, name)                                                                           \
    {                                                                                              \
        need_device();                                                                             \
        run_op_dtype(op, dt, seed);                                                                \
    }

OP_DTYPE_TEST(layernorm_f32, ND_OP_LAYERNORM, ND_FLOAT32, 0x1001)
OP_DTYPE_TEST(layernorm_f16, ND_OP_LAYERNORM, ND_FLOAT16, 0x1002)
OP_DTYPE_TEST(layernorm_bf16, ND_OP_LAYERNORM, ND_BFLOAT16, 0x1003)
OP_DTYPE_TEST(rmsnorm_f32, ND_OP_RMSNORM, ND_FLOAT32, 0x2001)
OP_DTYPE_TEST(rmsnorm_f16, ND_OP_RMSNORM, ND_FLOAT16, 0x2002)
OP_DTYPE_TEST(rmsnorm_bf16, ND_OP_RMSNORM, ND_BFLOAT16, 0x2003)
OP_DTYPE_TEST(softmax_f32, ND_OP_SOFTMAX, ND_FLOAT32, 0x3001)
OP_DTYPE_TEST(softmax_f16, ND_OP_SOFTMAX, ND_FLOAT16, 0x3002)
OP_DTYPE_TEST(softmax_bf16, ND_OP_SOFTMAX, ND_BFLOAT16, 0x3003)
OP_DTYPE_TEST(log_softmax_f32, ND_OP_LOG_SOFTMAX, ND_FLOAT32, 0x4001)
OP_DTYPE_TEST(log_softmax_f16, ND_OP_LOG_SOFTMAX, ND_FLOAT16, 0x4002)
OP_DTYPE_TEST(log_softmax_bf16, ND_OP_LOG_SOFTMAX, ND_BFLOAT16, 0x4003)

/* The exact kernels (ND_ROWS_EXACT): rows of exactly a warp or plain block kernel's geometry,
 * x, y and the parameters on the 16-byte grid, take a twin with the row length compiled in and
 * no per-pack bounds checks (LayerNorm's block twin loads gamma/beta and stores y unchecked
 * too). The widths below are such lengths for every warp geometry (8 .. 2048 16-bit columns)
 * and block size (128, 256, 512 threads of 3-8 packs), in both element sizes; row counts are
 * prime, so warps and blocks end part-way through their groups of rows. Each case once with
 * gamma/beta and statistics, once without, once with a mean of 1e4. */
static const int64_t exact_widths[] = {
    4,    8,    16,   32,   64,    96,    128,   256,   512,   768,   1024,  1280,  1536,
    1792, 2048, 3072, 4096, 5120,  6144,  7168,  8192,  10240, 12288, 14336, 16384, 20480,
    24576, 28672, 32768,
    /* rows of whole split chunks (ND_ROWS_SPLIT_EXACT): multiples of every op's chunk length
     * (threads x 8 packs), past a block's registers */
    65536, 196608,
};

Test(gpu_rows, exact_kernels)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX};
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    uint64_t rng = 0x6000;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (size_t i = 0; i < sizeof exact_widths / sizeof exact_widths[0]; i++)
                for (int v = 0; v < 3; v++) {
                    const int64_t cols = exact_widths[i];
                    const int64_t rows = cols <= 2048 ? 37 : cols <= 32768 ? 5 : 3;
                    rcase c = {ops[o], dts[d], rows, cols, 0, 0, v == 0, v == 0,
                               v == 2 ? 1e4 : 0.0, case_std(ops[o])};
                    run_case(&c, &rng);
                }
}

Test(gpu_rows, tile_kernel_many_rows)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX};
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            run_tile_cases(ops[o], dts[d], 0x5000 + 16 * (uint64_t)o + (uint64_t)d);
}

/* Many long rows on the 16-byte grid (the split path): more chunk blocks than the device holds at
 * once, in rows of whole chunks and of a partial last chunk. 40960 columns are 5 float32 chunks
 * of 8192 and 1.25 / 2.5 of the 16-bit ones (32768 / 16384 columns); 49160 leaves every dtype a
 * partial last chunk. */
Test(gpu_rows, split_many_rows)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX};
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    static const int64_t widths[] = {40960, 49160};
    uint64_t rng = 0x6100;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (int w = 0; w < 2; w++) {
                rcase c = {ops[o], dts[d], 400, widths[w], 0, 0, (o + d + w) % 2 == 0,
                           (o + w) % 2 == 0, w == 1 && d != 1 ? 1e4 : 0.0, case_std(ops[o])};
                run_case(&c, &rng);
            }
}

/* A row shape and the plan the dispatch should pick for 4 such rows (check_plans). */
typedef struct plan_case {
    nd_op op;
    nd_dtype dt;
    int64_t cols; /* at most 128 KB a row (float32 32768 columns, 16-bit 65536) */
    int xoff;     /* x and y this many elements past the 16-byte grid */
    const char *kind; /* the plan starts with this (NULL: see check_plans) */
} plan_case;

/* The plan the dispatch picks for 4 rows of c's shape in x and y (zeros in x). */
static void plan_for(const plan_case *c, void *x, void *y, char *plan, size_t n)
{
    const size_t es = nd_dtype_size(c->dt);
    char *xp = (char *)x + c->xoff * es, *yp = (char *)y + c->xoff * es;
    nd_error err = {{0}};
    nd_status st;
    nd_cuda_plan_trace(1);
    if (c->op == ND_OP_LAYERNORM || c->op == ND_OP_RMSNORM) {
        nd_norm_args a = {c->dt, 4, c->cols, xp, yp, NULL, NULL, 1e-5f, NULL, NULL};
        st = c->op == ND_OP_LAYERNORM ? nd_cuda_layernorm(&a, 0, &err)
                                      : nd_cuda_rmsnorm(&a, 0, &err);
    } else {
        nd_softmax_args a = {c->dt, 4, c->cols, 1, xp, yp};
        st = nd_cuda_softmax(&a, c->op == ND_OP_LOG_SOFTMAX, NULL, &err);
    }
    nd_cuda_plan_trace(0);
    cr_assert_eq(st, ND_OK, "%s", err.msg);
    snprintf(plan, n, "%s", nd_cuda_last_plan());
}

/* x and y for plan_for: 4 rows of up to 32768 float32 columns and a grid offset, x all zeros */
static void plan_buffers(void **x, void **y)
{
    const size_t bytes = (size_t)4 * 32768 * 4 + 16;
    CUDA_OK(cudaMalloc(x, bytes));
    CUDA_OK(cudaMalloc(y, bytes));
    CUDA_OK(cudaMemset(*x, 0, bytes));
}

/* Each case's plan starts with its kind, where the kind names a path a fast device alone takes
 * (starts with `fast_only`) with `other` on other devices; where the expected kind is NULL, the
 * plan is any but one starting with `fast_only`. fast_only NULL: every kind on every device. */
static void check_plans(const plan_case *c, size_t n, const char *fast_only, const char *other)
{
    const int fast = nd_test_fast_device();
    void *x = NULL, *y = NULL;
    plan_buffers(&x, &y);
    for (size_t i = 0; i < n; i++) {
        cr_assert(c[i].cols * (int64_t)nd_dtype_size(c[i].dt) <= 4 * 32768);
        cr_assert(c[i].kind || fast_only); /* NULL: any plan but one starting with fast_only */
        char plan[256];
        plan_for(&c[i], x, y, plan, sizeof plan);
        const char *want = c[i].kind;
        if (!fast && want && fast_only && strncmp(want, fast_only, strlen(fast_only)) == 0)
            want = other;
        if (want)
            cr_expect(strncmp(plan, want, strlen(want)) == 0,
                      "%s %s 4 x %lld, x %d elements off the grid, %s device: plan \"%s\", "
                      "expected it to start with \"%s\"", nd_op_name(c[i].op),
                      nd_dtype_name(c[i].dt), (long long)c[i].cols, c[i].xoff,
                      fast ? "a fast" : "a", plan, want);
        else
            cr_expect(strncmp(plan, fast_only, strlen(fast_only)) != 0,
                      "%s %s 4 x %lld, x %d elements off the grid, %s device: plan \"%s\", "
                      "expected another kernel's", nd_op_name(c[i].op), nd_dtype_name(c[i].dt),
                      (long long)c[i].cols, c[i].xoff, fast ? "a fast" : "a", plan);
    }
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(x);
    cudaFree(y);
}

/* RMSNorm's and LayerNorm's rows on the 16-byte grid of some lengths take the loop kernel on a
 * fast device, some of them on every device (rows_loop.cuh; the policies' loop): two passes over
 * x in passes of threads x 1, 2 or 4 packs. Those widths (float32 6144: a pass of 512 x 4 packs
 * that ends at the third) and widths beside them, many rows, in every dtype, on any device; the
 * plans of some of them, and of the same rows off the grid (the block kernel). */
Test(gpu_rows, loop_kernel_many_rows)
{
    need_device();
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    static const int64_t widths[] = {2048, 4096, 5120, 6144, 8192, 16384, 32768, 5000, 32760};
    static const nd_op ops[] = {ND_OP_RMSNORM, ND_OP_LAYERNORM};
    uint64_t rng = 0x6200;
    for (int o = 0; o < 2; o++)
        for (int d = 0; d < 3; d++)
            for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
                for (int v = 0; v < 3; v++) {
                    rcase c = {ops[o], dts[d], v == 1 ? 300 : 41, widths[w], 0, 0, v != 1,
                               v == 0, v == 2 ? 1e4 : 0.0, case_std(ops[o])};
                    run_case(&c, &rng);
                }
    /* on a fast device; elsewhere a loop plan is a block's */
    static const plan_case plans[] = {
        {ND_OP_RMSNORM, ND_FLOAT16, 4096, 0, "loop threads=256 packs=2"},
        {ND_OP_RMSNORM, ND_BFLOAT16, 16384, 0, "loop threads=512 packs=4"},
        {ND_OP_RMSNORM, ND_FLOAT32, 6144, 0, "loop threads=512 packs=4"},
        {ND_OP_RMSNORM, ND_BFLOAT16, 8192, 0, "loop threads=256 packs=4"},
        {ND_OP_RMSNORM, ND_FLOAT16, 10240, 0, "block "},
        {ND_OP_RMSNORM, ND_FLOAT16, 4096, 1, "block "},
        {ND_OP_RMSNORM, ND_FLOAT16, 2048, 0, "warp "},
        {ND_OP_LAYERNORM, ND_FLOAT16, 8192, 0, "block "},
        {ND_OP_LAYERNORM, ND_FLOAT32, 4096, 0, "loop threads=256 packs=4"},
        {ND_OP_RMSNORM, ND_FLOAT32, 5120, 0, "loop threads=320 packs=4"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 5120, 0, "loop threads=320 packs=4"},
        {ND_OP_LAYERNORM, ND_FLOAT16, 5120, 0, "block "}};
    check_plans(plans, sizeof plans / sizeof plans[0], "loop", "block ");
    /* on every device: RMSNorm's rows of 4096 packs and float32 rows of 1024, LayerNorm's
     * float32 rows of 2048 */
    static const plan_case anywhere[] = {
        {ND_OP_RMSNORM, ND_FLOAT16, 32768, 0, "loop threads=1024 packs=1"},
        {ND_OP_RMSNORM, ND_FLOAT32, 16384, 0, "loop threads=1024 packs=1"},
        {ND_OP_RMSNORM, ND_FLOAT32, 4096, 0, "loop threads=512 packs=2"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 8192, 0, "loop threads=512 packs=4"},
        {ND_OP_RMSNORM, ND_BFLOAT16, 32760, 0, "block "}};
    check_plans(anywhere, sizeof anywhere / sizeof anywhere[0], NULL, NULL);
}

/* Rows of 8192 packs on the 16-byte grid (float32 32768 columns: one block of 1024 threads a row;
 * 16-bit 65536: the split kernel in chunks of 2-4 blocks, or on a fast device, RMSNorm's and
 * LayerNorm's, one block of 1024 threads) and beside them (32760 and 65528: whole packs, a row's
 * last block or chunk part-empty), every op and dtype, more rows than the device holds such
 * blocks at once in one case of each (so the big block's L2 prefetch of a row ahead, the
 * policies' big_pf, is taken), x of mean 0 and 1e4; and the plans. */
Test(gpu_rows, rows_of_8192_packs)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_RMSNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX};
    static const nd_dtype dts[] = {ND_FLOAT32, ND_FLOAT16, ND_BFLOAT16};
    static const int64_t widths[] = {32768, 65536, 32760, 65528};
    uint64_t rng = 0x6400;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (int w = 0; w < 4; w++) {
                if ((w & 1) != (d != 0)) /* float32 32768 / 32760, 16-bit 65536 / 65528 */
                    continue;
                for (int v = 0; v < 3; v++) {
                    rcase c = {ops[o], dts[d], v == 1 && w < 2 ? 300 : 7, widths[w], 0, 0, v != 1,
                               v == 0, v == 2 ? 1e4 : 0.0, case_std(ops[o])};
                    run_case(&c, &rng);
                }
            }
    /* rows off the grid in the big block (a fast device's RMSNorm and LayerNorm), prefetch taken */
    for (int o = 0; o < 2; o++) {
        rcase c = {ops[o], ND_FLOAT16, 300, 65520, 1, 1, 1, 0, 0.0, case_std(ops[o])};
        run_case(&c, &rng);
    }
    /* the big block with its L2 prefetch on a fast device (the policies' big_pf): float32 32768
     * columns half a device-full ahead (the big block without it elsewhere), all but LayerNorm's
     * loading x and storing y plainly (their big_plain), and RMSNorm's and LayerNorm's 16-bit
     * 65536 (the split kernel elsewhere) */
    static const plan_case big[] = {
        {ND_OP_RMSNORM, ND_FLOAT32, 32768, 0, "block packs=8 exact pf=4/8 plain block="},
        {ND_OP_SOFTMAX, ND_FLOAT32, 32768, 0, "block packs=8 exact pf=4/8 plain block="},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT32, 32768, 0, "block packs=8 exact pf=4/8 plain block="}};
    check_plans(big, sizeof big / sizeof big[0], "block packs=8 exact pf=",
                "block packs=8 exact block=1024");
    /* LayerNorm's float32 32768 on a fast device: the big block's grid twin (its policy's exact) */
    static const plan_case big_ln[] = {
        {ND_OP_LAYERNORM, ND_FLOAT32, 32768, 0, "block packs=8 whole-packs pf=4/8 block="}};
    check_plans(big_ln, 1, "block packs=8 whole-packs pf=", "block packs=8 exact block=1024");
    static const plan_case big16[] = {
        {ND_OP_RMSNORM, ND_FLOAT16, 65536, 0, "block packs=8 exact pf="},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 65536, 0, "block packs=8 exact pf="}};
    check_plans(big16, sizeof big16 / sizeof big16[0], "block packs=8 exact pf=", "split ");
    /* rows of whole packs short of 8192 (the grid twin) and rows off the grid: the same */
    static const plan_case short16[] = {
        {ND_OP_RMSNORM, ND_BFLOAT16, 65528, 0, "block packs=8 whole-packs pf="},
        {ND_OP_LAYERNORM, ND_FLOAT16, 65528, 0, "block packs=8 whole-packs pf="},
        {ND_OP_RMSNORM, ND_FLOAT16, 65520, 1, "block packs=8 pf="}};
    check_plans(short16, sizeof short16 / sizeof short16[0], "block packs=8", "split ");
    static const plan_case anywhere[] = {
        {ND_OP_SOFTMAX, ND_FLOAT16, 65536, 0, "split "},
        {ND_OP_LOG_SOFTMAX, ND_BFLOAT16, 65536, 0, "split "}};
    check_plans(anywhere, sizeof anywhere / sizeof anywhere[0], NULL, NULL);
}

/* Rows on the 16-byte grid of some widths take the lean kernel (rows_lean.cuh; the policies'
 * lean): W lanes a row, R rows a group, NW warps a block, one unit of 32 / W x R x NW rows a
 * block. LayerNorm's and RMSNorm's float32 rows of 64 and 128 columns and LayerNorm's 16-bit rows
 * of 128 and 256 on every device; on a fast one also LayerNorm's 16-bit rows of 64, 192, 384,
 * 512 and 1024, RMSNorm's of 192, softmax's and log_softmax's of 1024, softmax's of 512,
 * log_softmax's of 128 and 256. Those widths and 640 and 768 beside them, every op and dtype
 * (where others take other kernels: the same answers), with row counts that end part-way through
 * a warp's rows and a block's warps; the plans of some, and of the same rows off the grid. */
Test(gpu_rows, lean_kernel_many_rows)
{
    need_device();
    static const nd_op ops[] = {ND_OP_LAYERNORM, ND_OP_SOFTMAX, ND_OP_LOG_SOFTMAX, ND_OP_RMSNORM};
    static const nd_dtype dts[] = {ND_FLOAT16, ND_BFLOAT16, ND_FLOAT32};
    static const int64_t widths[] = {64, 128, 192, 256, 384, 512, 640, 768, 1024};
    static const int64_t rows[] = {1, 2, 3, 9, 41, 301};
    uint64_t rng = 0x6300;
    for (int o = 0; o < 4; o++)
        for (int d = 0; d < 3; d++)
            for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++)
                for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
                    for (int v = 0; v < 3; v++) {
                        rcase c = {ops[o], dts[d], rows[r], widths[w], 0, 0, v != 1, v == 0,
                                   v == 2 ? 1e4 : 0.0, case_std(ops[o])};
                        run_case(&c, &rng);
                    }
    /* LayerNorm's 16-bit 128 and 256 columns, LayerNorm's and RMSNorm's float32 64 and 128, on
     * every device, in the exact twin */
    static const plan_case anywhere[] = {
        {ND_OP_LAYERNORM, ND_BFLOAT16, 128, 0, "lean W=8 packs=2 R=4 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_FLOAT16, 256, 0, "lean W=16 packs=2 R=2 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_FLOAT32, 64, 0, "lean W=8 packs=2 R=2 warps=4 exact "},
        {ND_OP_LAYERNORM, ND_FLOAT32, 128, 0, "lean W=32 packs=1 R=2 warps=4 exact "},
        {ND_OP_RMSNORM, ND_FLOAT32, 64, 0, "lean W=8 packs=2 R=2 warps=4 exact "},
        {ND_OP_RMSNORM, ND_FLOAT32, 128, 0, "lean W=32 packs=1 R=2 warps=4 exact "}};
    check_plans(anywhere, sizeof anywhere / sizeof anywhere[0], NULL, NULL);
    /* on a fast device, rows that fill every lane in the exact twin (ND_ROWS_LEAN_EXACT);
     * elsewhere, and where NULL, any plan but a lean one */
    static const plan_case plans[] = {
        {ND_OP_LAYERNORM, ND_BFLOAT16, 512, 0, "lean W=32 packs=2 R=2 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_FLOAT16, 1024, 0, "lean W=32 packs=4 R=1 warps=1 exact "},
        {ND_OP_SOFTMAX, ND_BFLOAT16, 1024, 0, "lean W=32 packs=4 R=1 warps=1 exact "},
        {ND_OP_SOFTMAX, ND_FLOAT16, 512, 0, "lean W=32 packs=2 R=1 warps=4 exact "},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 1024, 0, "lean W=32 packs=4 R=1 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_FLOAT16, 384, 0, "lean W=16 packs=3 R=1 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 64, 0, "lean W=8 packs=1 R=4 warps=1 exact "},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 192, 0, "lean W=8 packs=3 R=1 warps=1 exact "},
        {ND_OP_RMSNORM, ND_BFLOAT16, 192, 0, "lean W=8 packs=3 R=1 warps=1 exact "},
        {ND_OP_LOG_SOFTMAX, ND_BFLOAT16, 128, 0, "lean W=8 packs=2 R=2 warps=4 exact "},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 256, 0, "lean W=16 packs=2 R=2 warps=1 exact "},
        {ND_OP_SOFTMAX, ND_FLOAT32, 64, 0, "lean W=8 packs=2 R=2 warps=4 exact "},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT32, 64, 0, "lean W=8 packs=2 R=2 warps=4 exact "},
        {ND_OP_SOFTMAX, ND_BFLOAT16, 256, 0, NULL},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 512, 0, NULL},
        {ND_OP_SOFTMAX, ND_FLOAT16, 128, 0, NULL},
        {ND_OP_LAYERNORM, ND_FLOAT16, 256, 1, NULL},
        {ND_OP_SOFTMAX, ND_FLOAT16, 1024, 3, NULL},
        {ND_OP_RMSNORM, ND_FLOAT32, 132, 0, NULL},
        {ND_OP_LAYERNORM, ND_FLOAT32, 64, 1, NULL},
        {ND_OP_LAYERNORM, ND_FLOAT32, 256, 0, NULL},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 264, 0, NULL},
        {ND_OP_LAYERNORM, ND_FLOAT16, 768, 0, NULL},
        {ND_OP_RMSNORM, ND_FLOAT16, 256, 0, NULL}};
    check_plans(plans, sizeof plans / sizeof plans[0], "lean", NULL);
    /* LayerNorm's 16-bit 640 columns on a device not of the fast class only (an H100) */
    static const plan_case lean640[] = {
        {ND_OP_LAYERNORM, ND_FLOAT16, 640, 0, "lean W=32 packs=3 R=2 warps=1 "},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 640, 0, "lean W=32 packs=3 R=2 warps=1 "}};
    static const plan_case any640[] = {{ND_OP_LAYERNORM, ND_FLOAT16, 640, 0, NULL},
                                       {ND_OP_LAYERNORM, ND_BFLOAT16, 640, 0, NULL}};
    if (nd_test_fast_device())
        check_plans(any640, 2, "lean", NULL); /* any plan but a lean one */
    else
        check_plans(lean640, 2, NULL, NULL);
}

/* The warp kernel's block size (nd_rows_warp_block): blocks of 4 warps for rows of a group of at
 * most 8 packs (lanes x packs a lane), blocks of one warp for every other row. Each shape's plan, where it is the warp kernel's, must name the block its
 * geometry should have; on a fast device every shape here takes the warp kernel (so the check
 * holds something there), elsewhere it may take another. */
Test(gpu_rows, warp_kernel_block_sizes)
{
    need_device();
    static const plan_case cases[] = {
        {ND_OP_SOFTMAX, ND_FLOAT16, 32, 0, NULL},      {ND_OP_RMSNORM, ND_BFLOAT16, 32, 0, NULL},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 64, 0, NULL},  {ND_OP_LAYERNORM, ND_FLOAT32, 32, 0, NULL},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT32, 32, 0, NULL},  {ND_OP_SOFTMAX, ND_BFLOAT16, 192, 0, NULL},
        {ND_OP_RMSNORM, ND_FLOAT16, 256, 0, NULL},     {ND_OP_RMSNORM, ND_FLOAT32, 1024, 0, NULL},
        {ND_OP_LAYERNORM, ND_FLOAT32, 1024, 0, NULL},  {ND_OP_LAYERNORM, ND_FLOAT16, 768, 0, NULL},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 2048, 0, NULL}, {ND_OP_LOG_SOFTMAX, ND_BFLOAT16, 2048, 0, NULL}};
    const int fast = nd_test_fast_device();
    void *x = NULL, *y = NULL;
    plan_buffers(&x, &y);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const plan_case *c = &cases[i];
        char plan[256];
        plan_for(c, x, y, plan, sizeof plan);
        int w = 0, packs = 0;
        if (sscanf(plan, "warp W=%d packs=%d", &w, &packs) != 2) {
            cr_expect(!fast, "%s %s %lld columns, a fast device: plan \"%s\", expected the warp "
                      "kernel's", nd_op_name(c->op), nd_dtype_name(c->dt), (long long)c->cols, plan);
            continue;
        }
        const int want = w * packs <= 8 ? 128 : 32;
        char block[32];
        snprintf(block, sizeof block, " block=%d ", want);
        cr_expect(strstr(plan, block) != NULL, "%s %s %lld columns: plan \"%s\", expected blocks "
                  "of %d threads", nd_op_name(c->op), nd_dtype_name(c->dt), (long long)c->cols,
                  plan, want);
    }
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(x);
    cudaFree(y);
}

/* The fitted warp geometries that the policies choose per op and dtype (warp_fit, quarter_fit,
 * tail_fit in kernels/rows.cuh): rows that a power-of-two group would leave lanes empty in take
 * fewer lanes of more packs where that measured faster, and keep the group where it did not;
 * and the block sizes LayerNorm's policy starts from (block_min). */
Test(gpu_rows, fitted_geometries_by_op)
{
    need_device();
    static const plan_case plans[] = {
        /* 2 lanes of 5: LayerNorm every dtype, softmax and log_softmax 16-bit */
        {ND_OP_LAYERNORM, ND_FLOAT16, 80, 0, "warp W=2 packs=5 R=1 exact"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 40, 0, "warp W=2 packs=5 R=1 exact"},
        {ND_OP_SOFTMAX, ND_BFLOAT16, 80, 0, "warp W=2 packs=5 R=1 exact"},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 80, 0, "warp W=2 packs=5 R=1 exact"},
        {ND_OP_RMSNORM, ND_FLOAT16, 80, 0, "warp W=8 packs=2 "},
        /* 2 lanes of 7: LayerNorm 16-bit alone */
        {ND_OP_LAYERNORM, ND_BFLOAT16, 112, 0, "warp W=2 packs=7 R=1 exact"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 56, 0, "warp W=8 packs=2 "},
        {ND_OP_RMSNORM, ND_FLOAT16, 112, 0, "warp W=8 packs=2 "},
        /* 4 lanes of 5 and 7 */
        {ND_OP_LAYERNORM, ND_FLOAT16, 160, 0, "warp W=4 packs=5 R=1 exact"},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 224, 0, "warp W=4 packs=7 R=1 exact"},
        {ND_OP_RMSNORM, ND_FLOAT32, 80, 0, "warp W=4 packs=5 R=1 exact"},
        {ND_OP_SOFTMAX, ND_FLOAT32, 112, 0, "warp W=4 packs=7 R=1 exact"},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT32, 80, 0, "warp W=4 packs=5 R=1 exact"},
        /* RMSNorm float32 in 8 lanes of 3; LayerNorm 16-bit 24 columns in 2 lanes of 2, not 1 of 3 */
        {ND_OP_RMSNORM, ND_FLOAT32, 96, 0, "warp W=8 packs=3 R=1 exact"},
        {ND_OP_LAYERNORM, ND_FLOAT16, 24, 0, "warp W=2 packs=2 "},
        /* tail fits (lanes of 5-7 packs, the last ones short; the grid twin) where the op's
         * policy takes them, and the power-of-two group where it does not */
        {ND_OP_LAYERNORM, ND_BFLOAT16, 72, 0, "warp W=2 packs=5 R=1 whole-packs"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 72, 0, "warp W=4 packs=5 R=1 whole-packs"},
        {ND_OP_LAYERNORM, ND_FLOAT16, 288, 0, "warp W=8 packs=5 R=1 whole-packs"},
        {ND_OP_LAYERNORM, ND_FLOAT16, 832, 0, "warp W=16 packs=7 R=1 whole-packs"},
        {ND_OP_LAYERNORM, ND_FLOAT32, 416, 0, "warp W=32 packs=4 "},
        {ND_OP_RMSNORM, ND_FLOAT16, 72, 0, "warp W=8 packs=2 "},
        {ND_OP_RMSNORM, ND_BFLOAT16, 576, 0, "warp W=16 packs=5 R=1 whole-packs"},
        {ND_OP_RMSNORM, ND_FLOAT16, 352, 0, "warp W=16 packs=4 "},
        {ND_OP_RMSNORM, ND_FLOAT32, 104, 0, "warp W=4 packs=7 R=1 whole-packs"},
        {ND_OP_SOFTMAX, ND_FLOAT32, 288, 0, "warp W=16 packs=5 R=1 whole-packs"},
        {ND_OP_SOFTMAX, ND_FLOAT16, 200, 0, "warp W=8 packs=4 "},
        {ND_OP_SOFTMAX, ND_FLOAT16, 352, 0, "warp W=16 packs=4 "},
        {ND_OP_LOG_SOFTMAX, ND_BFLOAT16, 352, 0, "warp W=8 packs=6 R=1 whole-packs"},
        {ND_OP_LOG_SOFTMAX, ND_FLOAT16, 144, 0, "warp W=4 packs=5 R=1 whole-packs"},
        /* LayerNorm's block kernel from 64 threads for 16-bit rows, 128 for float32 (block_min) */
        {ND_OP_LAYERNORM, ND_FLOAT16, 2304, 0, "block packs=5 whole-packs block=64 "},
        {ND_OP_LAYERNORM, ND_BFLOAT16, 2560, 0, "block packs=5 exact block=64 "},
        {ND_OP_LAYERNORM, ND_FLOAT32, 1152, 0, "block packs=3 whole-packs block=128 "}};
    check_plans(plans, sizeof plans / sizeof plans[0], NULL, NULL);
}

/* ---------------------------------------------------------------------------------------------
 * Ulp accuracy of LayerNorm and RMSNorm (issue 13). The shared rule (nd_close) lets a 16-bit
 * result be anywhere within 1e-5 of the reference, which near zero is many ulp (a bfloat16 of
 * 1e-6 has an ulp of 7.5e-9): it let long bfloat16 LayerNorm rows through with outputs near zero
 * off by 15 ulp and a mean signed error far from zero. These cases hold every 16-bit output to
 * 1 ulp of the correctly rounded float64 result, with an absolute floor only where float32
 * arithmetic provably cannot follow (below), and ask the signed errors to average to zero.
 *
 * Widths from 1 to 2,500,001 (every kernel: sub-warp groups, a warp, LayerNorm's lean kernel at
 * 16-bit 256-1024 columns on a fast device, blocks of 128..512, the float32 block kernel's
 * two-round form at 16001, split rows, and at 2,500,001 the stream kernel on an H100/H200, whose
 * split path holds at most ~2.1M 16-bit / 1.08M float32 columns), x of mean 0 and of mean 1e4
 * with std 3, each with no gamma/beta and with random gamma ~ N(1, 0.5),
 * beta ~ N(0, 0.5). Per element:
 *   float16, bfloat16: got within 1 ulp of round(ref) on the dtype's grid, or
 *                      |got - ref| <= 2^-20 (|xhat * gamma| + |beta|)
 *     The floor: y = fma(t, gamma, beta) with t = xhat in float32, and t carries a relative
 *     error of a few 2^-24 (rstd, whose var = sum(d^2)/n - c^2 loses about (1 + z0^2) x 2^-25
 *     for a row shifted by an element z0 std from the mean, plus the roundings of x - mean and
 *     the fma). Where gamma * xhat and beta cancel, y is far smaller than either and that error
 *     is many of y's ulp; no float32 formula avoids it. 2^-20 = 16 x 2^-24 covers |z0| <= 4 with
 *     room. With no gamma/beta (y = xhat, or x * rstd) the floor is 2^-20 |y|, far below an
 *     ulp: those cases are held to 1 ulp everywhere, also at y near zero.
 *   float32: the shared rule (nd_close).
 * Per case without gamma/beta (16-bit): the mean signed distance in ulp must be within 4
 * standard errors of zero, over each row and over all rows. Elements of a row with the same x
 * have the same error, so the standard error takes each distinct x of a row as one sample
 * (cluster-robust: SE^2 = sum over (row, x) of (sum of its errors)^2 / n^2). Not for float32:
 * there the output grid is the arithmetic's own and x - mean rounds the same way across a binade
 * of x in any float32 formula (PyTorch's too), a mean error of a fraction of an ulp that is not
 * noise; float32 is held to its rule and the row mean below.
 * LayerNorm rows of 65537 columns or more: the mean written out within one float32 ulp of the
 * float64 mean + 2^-24 std / 4 (float32 rows: + 2^-24 std). Before the fix the mean was off by
 * 0.3 to 2.6 x 2^-24 std on such rows (emulated, bench/norm_numerics.c; on an H200 the old
 * kernels failed this on 16-bit rows by up to 14 x the bound); after, 16-bit rows are within
 * ~0.02 x 2^-24 std and float32 rows 0.1-0.3.
 * ------------------------------------------------------------------------------------------- */

/* (cols, rows): about 2^18 elements or more for each width */
static const int64_t ulp_shapes[][2] = {
    {1, 1024},    {3, 2048},    {33, 2048},    {255, 1024},    {256, 1031},   {512, 257},
    {1024, 129},  {1025, 256},
    {4097, 64},   {16001, 16},  {32769, 8},    {65537, 4},     {262145, 2},
    {1000003, 2}, {1048576, 1}, {2500001, 1},
};

/* v rounded to nearest-even on dt's grid, straight from double (float16: 11 significant bits,
 * subnormals down to 2^-24; bfloat16: 8 bits; float32: the C conversion), as nd_close does. */
static double round_dt(nd_dtype dt, double v)
{
    if (dt == ND_FLOAT32)
        return (double)(float)v;
    if (v == 0.0 || !isfinite(v))
        return v;
    const int prec = dt == ND_FLOAT16 ? 11 : 8, min_exp = dt == ND_FLOAT16 ? -24 : -133;
    int e;
    frexp(v, &e);
    const int q = e - prec < min_exp ? min_exp : e - prec;
    return ldexp(nearbyint(ldexp(v, -q)), q);
}

/* Position of v (a value on dt's grid, or NaN) on dt's number line: neighbours differ by 1. */
static int64_t ordinal_dt(nd_dtype dt, double v)
{
    if (dt == ND_FLOAT32) {
        uint32_t u = nd_f32_bits((float)v);
        return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
    }
    uint16_t b = dt == ND_FLOAT16 ? nd_float_to_half((float)v) : nd_float_to_bf16((float)v);
    return (b & 0x8000u) ? -(int64_t)(b & 0x7fffu) : (int64_t)b;
}

/* Signed distances of one case, for the bias check: sums per (row, x) in bins indexed by x's
 * 16 bits, only the touched ones reset after each row. */
typedef struct bias_acc {
    double sum, clus2;           /* all rows: sum of e; sum over (row, x) of (sum of e)^2 */
    double row_sum, row_clus2;   /* this row */
    double worst_z;              /* largest |z| of a row */
    int64_t worst_row;
    int64_t bin[65536];
    int32_t touched[65536];
    int ntouched;
} bias_acc;

static void bias_add(bias_acc *b, uint16_t xbits, int64_t e)
{
    if (e == 0)
        return;
    if (b->bin[xbits] == 0)
        b->touched[b->ntouched++] = xbits;
    b->bin[xbits] += e;
    b->row_sum += (double)e;
}

static void bias_row_end(bias_acc *b, int64_t row)
{
    b->row_clus2 = 0.0;
    for (int k = 0; k < b->ntouched; k++) {
        double s = (double)b->bin[b->touched[k]];
        b->row_clus2 += s * s;
        b->bin[b->touched[k]] = 0;
    }
    b->ntouched = 0;
    double z = b->row_clus2 > 0.0 ? b->row_sum / sqrt(b->row_clus2) : 0.0;
    if (fabs(z) > fabs(b->worst_z)) {
        b->worst_z = z;
        b->worst_row = row;
    }
    b->sum += b->row_sum;
    b->clus2 += b->row_clus2;
    b->row_sum = 0.0;
}

typedef struct ulp_summary {
    int64_t worst_ulp;  /* largest distance in ulp of a 16-bit element, no gamma/beta */
    int64_t floor_used; /* 16-bit elements more than 1 ulp off, within the floor (gamma/beta) */
    double worst_z;    /* largest |z| of a row or a case */
    double worst_mean_err; /* LayerNorm long rows: largest |mean - ref| / its bound */
} ulp_summary;

static void ulp_case(nd_op op, nd_dtype dt, int64_t rows, int64_t cols, double mean, int params,
                     uint64_t *rng, bias_acc *bias, ulp_summary *sum)
{
    const size_t es = nd_dtype_size(dt);
    const int64_t n = rows * cols;
    const int ln = op == ND_OP_LAYERNORM;
    void *hx = xmalloc((size_t)n * es), *hy = xmalloc((size_t)n * es);
    void *hg = xmalloc((size_t)cols * es), *hb = xmalloc((size_t)cols * es);
    double *fx = xmalloc((size_t)n * sizeof(double)), *ref = xmalloc((size_t)n * sizeof(double));
    double *fg = xmalloc((size_t)cols * sizeof(double)), *fb = xmalloc((size_t)cols * sizeof(double));
    double *rmean = xmalloc((size_t)rows * sizeof(double)), *rrstd = xmalloc((size_t)rows * sizeof(double));
    float *hmean = xmalloc((size_t)rows * 4), *hrstd = xmalloc((size_t)rows * 4);

    nd_fill_random(dt, hx, n, mean, 3.0, rng, fx);
    nd_fill_random(dt, hg, cols, 1.0, 0.5, rng, fg);
    nd_fill_random(dt, hb, cols, 0.0, 0.5, rng, fb);
    nd_poison(dt, hy, n);
    nd_poison(ND_FLOAT32, hmean, rows);
    nd_poison(ND_FLOAT32, hrstd, rows);
    dbuf dx = dalloc(es, n, 0), dy = dalloc(es, n, 0), dg = dalloc(es, cols, 0);
    dbuf db = dalloc(es, cols, 0), dm = dalloc(4, rows, 0), dr = dalloc(4, rows, 0);
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dy.p, hy, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg.p, hg, (size_t)cols * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db.p, hb, (size_t)cols * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dm.p, hmean, (size_t)rows * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dr.p, hrstd, (size_t)rows * 4, cudaMemcpyHostToDevice));

    char label[160];
    snprintf(label, sizeof label, "%s %s %lldx%lld mean=%g %s", nd_op_name(op), nd_dtype_name(dt),
             (long long)rows, (long long)cols, mean, params ? "gamma/beta" : "no gamma/beta");
    nd_norm_args a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.rows = rows;
    a.cols = cols;
    a.x = dx.p;
    a.y = dy.p;
    a.gamma = params ? dg.p : NULL;
    a.beta = params && ln ? db.p : NULL;
    a.eps = ln ? 1e-5f : 1e-6f;
    a.mean = ln ? (float *)dm.p : NULL;
    a.rstd = (float *)dr.p;
    nd_error err = {{0}};
    nd_status st = ln ? nd_cuda_layernorm(&a, NULL, &err) : nd_cuda_rmsnorm(&a, NULL, &err);
    cr_assert_eq(st, ND_OK, "%s: status %d: %s", label, (int)st, err.msg);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(hy, dy.p, (size_t)n * es, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hmean, dm.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hrstd, dr.p, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    if (ln)
        nd_ref_layernorm(fx, rows, cols, a.gamma ? fg : NULL, a.beta ? fb : NULL, a.eps, ref, rmean,
                         rrstd);
    else
        nd_ref_rmsnorm(fx, rows, cols, a.gamma ? fg : NULL, a.eps, ref, rrstd);

    int64_t bad = 0, first = -1, first_d = 0;
    const int do_bias = dt != ND_FLOAT32 && !params;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            const int64_t i = r * cols + c;
            const double got = (double)nd_load(dt, hy, i);
            int ok;
            int64_t d = 0;
            if (dt == ND_FLOAT32) {
                ok = nd_close(dt, got, ref[i]);
            } else {
                const double xhat = ln ? (fx[i] - rmean[r]) * rrstd[r] : fx[i] * rrstd[r];
                const double t = params ? xhat * fg[c] : xhat, b = params && ln ? fb[c] : 0.0;
                d = ordinal_dt(dt, got) - ordinal_dt(dt, round_dt(dt, ref[i]));
                const int near = d >= -1 && d <= 1;
                ok = !isnan(got) &&
                     (near || fabs(got - ref[i]) <= 0x1p-20 * (fabs(t) + fabs(b)));
                if (ok && !near)
                    sum->floor_used++;
                if (ok && !params && (d > sum->worst_ulp || -d > sum->worst_ulp))
                    sum->worst_ulp = d < 0 ? -d : d;
                if (do_bias)
                    bias_add(bias, ((const uint16_t *)hx)[i], d);
            }
            if (!ok && bad++ == 0) {
                first = i;
                first_d = d;
            }
        }
        if (do_bias)
            bias_row_end(bias, r);
    }
    if (bad) {
        const int64_t r = first / cols, c = first % cols;
        cr_expect_eq(bad, 0, "%s: %lld elements off; first [%lld][%lld]: x=%.9g got %.9g, "
                     "reference %.12g (%lld ulp; mean %.9g rstd %.9g)", label, (long long)bad,
                     (long long)r, (long long)c, fx[first], (double)nd_load(dt, hy, first),
                     ref[first], (long long)first_d, rmean[r], rrstd[r]);
    }
    if (do_bias) {
        const double z = bias->clus2 > 0.0 ? bias->sum / sqrt(bias->clus2) : 0.0;
        cr_expect(fabs(z) < 4.0 && fabs(bias->worst_z) < 4.0,
                  "%s: mean signed error %+.3g ulp = %+.1f standard errors over all rows, "
                  "%+.1f in row %lld", label, bias->sum / (double)n, z, bias->worst_z,
                  (long long)bias->worst_row);
        if (fabs(z) > fabs(sum->worst_z))
            sum->worst_z = z;
        if (fabs(bias->worst_z) > fabs(sum->worst_z))
            sum->worst_z = bias->worst_z;
    }

    char msg[256], what[200];
    snprintf(what, sizeof what, "%s: rstd", label);
    int64_t sbad = nd_compare_f32(hrstd, rrstd, rows, what, msg, sizeof msg);
    cr_expect_eq(sbad, 0, "%lld mismatches; first: %s", (long long)sbad, msg);
    if (ln) {
        snprintf(what, sizeof what, "%s: mean", label);
        sbad = nd_compare_f32(hmean, rmean, rows, what, msg, sizeof msg);
        cr_expect_eq(sbad, 0, "%lld mismatches; first: %s", (long long)sbad, msg);
        for (int64_t r = 0; r < rows && cols >= 65537; r++) {
            const double sd = sqrt(fmax(1.0 / (rrstd[r] * rrstd[r]) - a.eps, 0.0));
            /* one float32 ulp of the mean (it is written as a float) + a fraction of the std */
            const double bound = 0x1p-23 * fabs(rmean[r]) + 0x1p-24 * (dt == ND_FLOAT32 ? 1.0 : 0.25) * sd;
            const double e = fabs((double)hmean[r] - rmean[r]) / bound;
            if (e > sum->worst_mean_err)
                sum->worst_mean_err = e;
            cr_expect(e <= 1.0, "%s: row %lld: mean %.12g, reference %.12g (std %.6g): off by "
                      "%.3g x its bound", label, (long long)r, (double)hmean[r], rmean[r], sd, e);
        }
    }

    dfree(dx), dfree(dy), dfree(dg), dfree(db), dfree(dm), dfree(dr);
    free(hx), free(hy), free(hg), free(hb), free(fx), free(ref), free(fg), free(fb);
    free(rmean), free(rrstd), free(hmean), free(hrstd);
}

static void ulp_run(nd_op op, nd_dtype dt, uint64_t seed)
{
    uint64_t rng = seed;
    bias_acc *bias = calloc(1, sizeof *bias);
    cr_assert(bias, "out of host memory");
    ulp_summary sum = {0, 0, 0.0, 0.0};
    const int ns = (int)(sizeof ulp_shapes / sizeof ulp_shapes[0]);
    for (int i = 0; i < ns; i++)
        for (int k = 0; k < 4; k++) {
            memset(bias, 0, sizeof *bias);
            ulp_case(op, dt, ulp_shapes[i][1], ulp_shapes[i][0], k < 2 ? 0.0 : 1e4, k & 1, &rng,
                     bias, &sum);
        }
    if (dt == ND_FLOAT32)
        fprintf(stderr, "norm_ulp %s %s: largest mean error %.3f x its bound\n", nd_op_name(op),
                nd_dtype_name(dt), sum.worst_mean_err);
    else
        fprintf(stderr, "norm_ulp %s %s: largest distance %lld ulp without gamma/beta, %lld "
                "elements past 1 ulp within the floor with them, largest |bias| %.1f SE, "
                "largest mean error %.3f x its bound\n", nd_op_name(op), nd_dtype_name(dt),
                (long long)sum.worst_ulp, (long long)sum.floor_used, fabs(sum.worst_z),
                sum.worst_mean_err);
    free(bias);
}

#define ULP_TEST(name, op, dt, seed)                                                               \
    Test(gpu_rows, name, .timeout = 120)                                                           \
    {                                                                                              \
        need_device();                                                                             \
        ulp_run(op, dt, seed);                                                                     \
    }

ULP_TEST(norm_ulp_layernorm_f32, ND_OP_LAYERNORM, ND_FLOAT32, 0x8001)
ULP_TEST(norm_ulp_layernorm_f16, ND_OP_LAYERNORM, ND_FLOAT16, 0x8002)
ULP_TEST(norm_ulp_layernorm_bf16, ND_OP_LAYERNORM, ND_BFLOAT16, 0x8003)
ULP_TEST(norm_ulp_rmsnorm_f32, ND_OP_RMSNORM, ND_FLOAT32, 0x8004)
ULP_TEST(norm_ulp_rmsnorm_f16, ND_OP_RMSNORM, ND_FLOAT16, 0x8005)
ULP_TEST(norm_ulp_rmsnorm_bf16, ND_OP_RMSNORM, ND_BFLOAT16, 0x8006)

/* ---------------------------------------------------------------------------------------------
 * More than 2^31 elements: the whole tensor runs, the last rows are checked.
 * ------------------------------------------------------------------------------------------- */

Test(gpu_rows, beyond_int32_elements)
{
    need_device();
    const nd_dtype dt = ND_FLOAT16;
    const int64_t cols = 1024, rows = ((int64_t)1 << 31) / cols + 5, n = rows * cols;
    const int64_t check = 5; /* last rows, all past element 2^31 */
    size_t free_b = 0, total_b = 0;
    CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
    if (free_b < (size_t)n * 2 * 2 + ((size_t)1 << 30))
        cr_skip_test("not enough device memory for 2 x %lld fp16 elements", (long long)n);
    uint64_t rng = 0x5001;
    void *dx, *dy;
    CUDA_OK(cudaMalloc(&dx, (size_t)n * 2));
    CUDA_OK(cudaMalloc(&dy, (size_t)n * 2));
    CUDA_OK(cudaMemset(dx, 0x3c, (size_t)n * 2)); /* 1.06 everywhere else */
    const int64_t m = check * cols;
    void *hx = xmalloc((size_t)m * 2), *hy = xmalloc((size_t)m * 2);
    double *fx = xmalloc((size_t)m * sizeof(double)), *ref = xmalloc((size_t)m * sizeof(double));
    nd_fill_random(dt, hx, m, 0.0, 2.0, &rng, fx);
    char *tail_x = (char *)dx + (size_t)(n - m) * 2, *tail_y = (char *)dy + (size_t)(n - m) * 2;
    CUDA_OK(cudaMemcpy(tail_x, hx, (size_t)m * 2, cudaMemcpyHostToDevice));
    char msg[256];
    for (int k = 0; k < 3; k++) {
        nd_poison(dt, hy, m);
        CUDA_OK(cudaMemcpy(tail_y, hy, (size_t)m * 2, cudaMemcpyHostToDevice));
        nd_error err = {{0}};
        nd_status st;
        if (k == 0) {
            nd_norm_args a = {dt, rows, cols, dx, dy, NULL, NULL, 1e-5f, NULL, NULL};
            st = nd_cuda_layernorm(&a, NULL, &err);
            nd_ref_layernorm(fx, check, cols, NULL, NULL, 1e-5, ref, NULL, NULL);
        } else if (k == 1) {
            nd_norm_args a = {dt, rows, cols, dx, dy, NULL, NULL, 1e-6f, NULL, NULL};
            st = nd_cuda_rmsnorm(&a, NULL, &err);
            nd_ref_rmsnorm(fx, check, cols, NULL, 1e-6, ref, NULL);
        } else {
            nd_softmax_args a = {dt, rows, cols, 1, dx, dy};
            st = nd_cuda_softmax(&a, 0, NULL, &err);
            nd_ref_softmax(fx, check, cols, 1, 0, ref);
        }
        cr_assert_eq(st, ND_OK, "op %d: %s", k, err.msg);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(hy, tail_y, (size_t)m * 2, cudaMemcpyDeviceToHost));
        int64_t bad = nd_compare(dt, hy, ref, m, k == 0 ? "layernorm tail" : k == 1 ? "rmsnorm tail"
                                                                                   : "softmax tail",
                                 msg, sizeof msg);
        cr_expect_eq(bad, 0, "%lld mismatches; first: %s", (long long)bad, msg);
    }
    cudaFree(dx);
    cudaFree(dy);
    free(hx), free(hy), free(fx), free(ref);
}

/* ---------------------------------------------------------------------------------------------
 * Long rows on several streams at once: every launch finishes (the split-row kernel's blocks wait
 * on each other; four launches share the device), each output matches the reference, and all
 * outputs carry the same bits (statistics combined in a fixed order, whatever the timing).
 * ------------------------------------------------------------------------------------------- */

/* rows x cols of op in dtype dt (LayerNorm with random gamma and beta) on NS streams at once,
 * three launches each */
static void concurrent_long_rows(nd_op op, nd_dtype dt, int64_t rows, int64_t cols, uint64_t seed)
{
    enum { NS = 4 };
    const size_t es = nd_dtype_size(dt);
    const int64_t n = rows * cols;
    uint64_t rng = seed;
    void *hx = xmalloc((size_t)n * es), *hy = xmalloc((size_t)n * es), *h0 = xmalloc((size_t)n * es);
    void *hg = xmalloc((size_t)cols * es), *hb = xmalloc((size_t)cols * es);
    double *fx = xmalloc((size_t)n * sizeof(double)), *ref = xmalloc((size_t)n * sizeof(double));
    double *fg = xmalloc((size_t)cols * sizeof(double)), *fb = xmalloc((size_t)cols * sizeof(double));
    double *rmean = xmalloc((size_t)rows * sizeof(double)), *rrstd = xmalloc((size_t)rows * sizeof(double));
    nd_fill_random(dt, hx, n, 0.0, 3.0, &rng, fx);
    nd_fill_random(dt, hg, cols, 1.0, 0.5, &rng, fg);
    nd_fill_random(dt, hb, cols, 0.0, 0.5, &rng, fb);
    if (op == ND_OP_LAYERNORM)
        nd_ref_layernorm(fx, rows, cols, fg, fb, 1e-5f, ref, rmean, rrstd);
    else
        nd_ref_softmax(fx, rows, cols, 1, 0, ref);
    dbuf dx = dalloc(es, n, 0), dg = dalloc(es, cols, 0), db = dalloc(es, cols, 0), dy[NS];
    cudaStream_t st[NS];
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dg.p, hg, (size_t)cols * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db.p, hb, (size_t)cols * es, cudaMemcpyHostToDevice));
    for (int i = 0; i < NS; i++) {
        dy[i] = dalloc(es, n, 0);
        CUDA_OK(cudaMemset(dy[i].p, 0xff, (size_t)n * es));
        CUDA_OK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    }
    for (int rep = 0; rep < 3; rep++) { /* each stream runs three launches back to back */
        for (int i = 0; i < NS; i++) {
            nd_error err = {{0}};
            if (op == ND_OP_LAYERNORM) {
                nd_norm_args a = {dt, rows, cols, dx.p, dy[i].p, dg.p, db.p, 1e-5f, NULL, NULL};
                cr_assert_eq(nd_cuda_layernorm(&a, st[i], &err), ND_OK, "%s", err.msg);
            } else {
                nd_softmax_args a = {dt, rows, cols, 1, dx.p, dy[i].p};
                cr_assert_eq(nd_cuda_softmax(&a, 0, st[i], &err), ND_OK, "%s", err.msg);
            }
        }
    }
    CUDA_OK(cudaDeviceSynchronize());
    char msg[256], what[160];
    snprintf(what, sizeof what, "%s %s %lldx%lld on %d streams", nd_op_name(op), nd_dtype_name(dt),
             (long long)rows, (long long)cols, NS);
    for (int i = 0; i < NS; i++) {
        CUDA_OK(cudaMemcpy(i ? hy : h0, dy[i].p, (size_t)n * es, cudaMemcpyDeviceToHost));
        int64_t bad = nd_compare(dt, i ? hy : h0, ref, n, what, msg, sizeof msg);
        cr_expect_eq(bad, 0, "stream %d: %lld mismatches; first: %s", i, (long long)bad, msg);
        if (i)
            cr_expect(memcmp(h0, hy, (size_t)n * es) == 0, "%s: stream %d: other bits than stream 0",
                      what, i);
    }
    for (int i = 0; i < NS; i++) {
        CUDA_OK(cudaStreamDestroy(st[i]));
        dfree(dy[i]);
    }
    dfree(dx), dfree(dg), dfree(db);
    free(hx), free(hy), free(h0), free(hg), free(hb), free(fx), free(ref), free(fg), free(fb);
    free(rmean), free(rrstd);
}

Test(gpu_rows, long_rows_concurrent_streams)
{
    need_device();
    concurrent_long_rows(ND_OP_SOFTMAX, ND_FLOAT32, 24, 1048576, 0x7001);
}

/* the same for LayerNorm's 16-bit chunk blocks, with gamma and beta (an odd row count) */
Test(gpu_rows, long_rows_concurrent_streams_layernorm)
{
    need_device();
    concurrent_long_rows(ND_OP_LAYERNORM, ND_FLOAT16, 25, 1048576, 0x7002);
}

/* ---------------------------------------------------------------------------------------------
 * Arguments the backend must refuse, and the CPU backend agreeing on one shape.
 * ------------------------------------------------------------------------------------------- */

Test(gpu_rows, bad_arguments)
{
    need_device();
    nd_error err = {{0}};
    nd_norm_args a = {ND_FLOAT32, 0, 4, (void *)16, (void *)16, NULL, NULL, 1e-5f, NULL, NULL};
    cr_expect_eq(nd_cuda_layernorm(&a, NULL, &err), ND_EINVAL);
    a.rows = 1;
    a.x = NULL;
    cr_expect_eq(nd_cuda_rmsnorm(&a, NULL, &err), ND_EINVAL);
    nd_softmax_args s = {ND_FLOAT16, 1, 0, 1, (void *)16, (void *)16};
    cr_expect_eq(nd_cuda_softmax(&s, 0, NULL, &err), ND_EINVAL);
}

/* The plan trace names the kernel the row dispatch picks, by row size, and only while it is on. */
Test(gpu_rows, plan_trace_names_the_pick)
{
    need_device();
    static const struct {
        int64_t rows, cols;
        int xoff;          /* x this many elements past the 16-byte grid */
        const char *kind;
        int exact;         /* the exact twin (ND_ROWS_EXACT): " exact" in the plan */
        int whole;         /* the grid twin (ND_ROWS_GRID_TWIN): " whole-packs" in the plan */
    } cases[] = {/* off the grid, softmax's rows of up to 10 packs of their own grid (80
                    columns) take the stage kernel (rows_stage.cuh), longer ones the warp
                    kernel's generic form, and a row of 2048 spans 257 packs: a block's; split
                    rows are exact
                    when whole chunks (ND_ROWS_SPLIT_EXACT); rows on the grid that no exact
                    twin takes run a grid twin where 8 lanes or more or a block hold them, or
                    2 or 4 lanes with some short of packs (ND_ROWS_GRID_TWIN_SHORT16: 40);
                    rows that all lanes of a group hold in 3 packs run that exact geometry
                    (ND_ROWS_WARP_FIT_DOWN: 192, 384) */
                 {64, 128, 0, "tile W=", 0, 0},   {64, 127, 0, "warp W=", 0, 0},
                 {64, 2048, 0, "warp W=", 1, 0},  {64, 2048, 1, "block ", 0, 0},
                 {64, 50, 3, "stage W=4 packs=2 ", 0, 0}, {64, 79, 1, "stage W=8 packs=2 ", 0, 0},
                 {64, 81, 0, "warp W=", 0, 0},
                 {64, 4096, 0, "block ", 1, 0},   {64, 4096, 1, "block ", 0, 0},
                 {64, 4088, 0, "block ", 0, 1},   {64, 1600, 0, "warp W=32 ", 0, 1},
                 {64, 200, 0, "warp W=8 ", 0, 1},  {64, 40, 0, "warp W=4 ", 0, 1},
                 {64, 192, 0, "warp W=8 packs=3 ", 1, 0}, {64, 384, 0, "warp W=16 packs=3 ", 1, 0},
                 {64, 1600, 1, "warp W=32 ", 0, 0}, {3, 1 << 20, 0, "split ", 1, 0},
                 {3, 1 << 20, 1, "split ", 0, 0}, {3, (1 << 20) - 8, 0, "split ", 0, 0}};
    const size_t es = 2;
    void *x = NULL, *y = NULL;
    CUDA_OK(cudaMalloc(&x, (size_t)4 << 21));
    CUDA_OK(cudaMalloc(&y, (size_t)4 << 21));
    CUDA_OK(cudaMemset(x, 0, (size_t)4 << 21));
    nd_error err = {{0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert((size_t)(cases[i].rows * cases[i].cols + cases[i].xoff) * es <= (size_t)4 << 21);
        nd_softmax_args a = {ND_FLOAT16, cases[i].rows, cases[i].cols, 1,
                             (char *)x + cases[i].xoff * es, (char *)y + cases[i].xoff * es};
        nd_cuda_plan_trace(1);
        nd_status st = nd_cuda_softmax(&a, 0, NULL, &err);
        nd_cuda_plan_trace(0);
        cr_assert_eq(st, ND_OK, "%s", err.msg);
        char plan[256];
        snprintf(plan, sizeof plan, "%s", nd_cuda_last_plan());
        cr_expect(strncmp(plan, cases[i].kind, strlen(cases[i].kind)) == 0,
                  "%lld x %lld: plan \"%s\", expected it to start with \"%s\"",
                  (long long)cases[i].rows, (long long)cases[i].cols, plan, cases[i].kind);
        cr_expect(strstr(plan, " grid=") != NULL, "plan \"%s\" has no grid", plan);
        cr_expect((strstr(plan, " exact") != NULL) == cases[i].exact,
                  "%lld x %lld, x %d elements off the grid: plan \"%s\"%s names the exact kernel",
                  (long long)cases[i].rows, (long long)cases[i].cols, cases[i].xoff, plan,
                  cases[i].exact ? " never" : "");
        cr_expect((strstr(plan, " whole-packs") != NULL) == cases[i].whole,
                  "%lld x %lld, x %d elements off the grid: plan \"%s\"%s names the grid twin",
                  (long long)cases[i].rows, (long long)cases[i].cols, cases[i].xoff, plan,
                  cases[i].whole ? " never" : "");
        /* with the trace off, a call leaves the line alone */
        nd_softmax_args b = {ND_FLOAT16, 8, 32, 1, x, y};
        cr_assert_eq(nd_cuda_softmax(&b, 0, NULL, &err), ND_OK, "%s", err.msg);
        cr_expect_str_eq(nd_cuda_last_plan(), plan);
    }
    CUDA_OK(cudaDeviceSynchronize());
    cudaFree(x);
    cudaFree(y);
}

Test(gpu_rows, agrees_with_cpu_backend)
{
    need_device();
    /* float32 layernorm on the CPU and the GPU: both within the rule of the reference, so
     * within twice the rule of each other */
    const int64_t rows = 64, cols = 3001, n = rows * cols;
    uint64_t rng = 0x6001;
    float *hx = xmalloc((size_t)n * 4), *hc = xmalloc((size_t)n * 4), *hg = xmalloc((size_t)n * 4);
    nd_fill_random(ND_FLOAT32, hx, n, 3.0, 2.0, &rng, NULL);
    nd_norm_args a = {ND_FLOAT32, rows, cols, hx, hc, NULL, NULL, 1e-5f, NULL, NULL};
    nd_error err = {{0}};
    cr_assert_eq(nd_cpu_layernorm(&a, &err), ND_OK, "%s", err.msg);
    dbuf dx = dalloc(4, n, 0), dy = dalloc(4, n, 0);
    CUDA_OK(cudaMemcpy(dx.p, hx, (size_t)n * 4, cudaMemcpyHostToDevice));
    a.x = dx.p;
    a.y = dy.p;
    cr_assert_eq(nd_cuda_layernorm(&a, NULL, &err), ND_OK, "%s", err.msg);
    CUDA_OK(cudaMemcpy(hg, dy.p, (size_t)n * 4, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)hg[i] - hc[i]) <= 2e-5 * fmax(1.0, fabs((double)hc[i]))))
            bad++;
    cr_expect_eq(bad, 0, "%lld elements differ from the CPU backend", (long long)bad);
    dfree(dx), dfree(dy);
    free(hx), free(hc), free(hg);
}
