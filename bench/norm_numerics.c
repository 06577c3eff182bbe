/*
 * norm_numerics.c - a CPU emulation, in float32 arithmetic, of how the CUDA LayerNorm kernels
 * compute a row's statistics and outputs: it explains the error seen on long 16-bit rows
 * (issue 13: outputs near zero off by up to 15 ulp, a mean signed error that is not zero) and
 * checks the fix, without a GPU.
 *
 * It follows the kernels' order of operations (kernels/layernorm.cu, rows.cuh, rows_split.cuh): the
 * row is laid out in 16-byte packs over threads as nd_rows_run's dispatch does for that width on
 * an H100/H200 (sub-warp or warp groups, a block of 128..512 threads, the split kernel's chunk
 * blocks of 512 threads x 8 packs, up to 66 chunks; beyond, the stream kernel's cluster of 16
 * blocks of 512); each thread sums d = x - shift and d^2 over its elements in order; the partial
 * sums meet in each warp's xor-shuffle tree, the sequential sum over the block's warps, and warp
 * 0's gather over the row's chunks (split) or the sequential sum over the cluster's blocks
 * (stream); then finish() and the output formula.
 * Float arithmetic is IEEE single (C float on x86-64, no contraction: -ffp-contract=off or ISO C
 * mode); fmaf is the correctly rounded fused multiply-add, as on the GPU.
 *
 * Variants (per-thread sums identical in all):
 *   old      the kernels before the fix. One round (every path but the float32 block kernel at
 *            8 packs a thread, and the stream kernel): shift = x[0]; the partials combined in
 *            float; c = S / n; y = fma(fma(x - shift, rstd, -c * rstd), g, b). Two rounds:
 *            shift = m1 = fl(sum x) / n, then the same.
 *   sum      ablation: the partial sums of d combined in double, the old output
 *   out      ablation: the old float combination, the new output (mean as m_hi + m_lo)
 *   new      the kernels after the fix. The per-thread float partials combined in double:
 *            16-bit x, one round everywhere (the stream kernel too): sum x (not shifted: sums
 *            of 16-bit values round only their own low bits, no bias) and sum (x - x[0])^2;
 *            float32 x, the old shifts (x[0], or m1 on the two-round paths) for both sums.
 *            The mean kept as two floats, m_hi = fl(shift + c_hi), m_lo = what m_hi misses
 *            (TwoSum) + the division's remainder; var = q / n - (mean - x[0])^2;
 *            y = fma(fma(x - m_hi, rstd, -m_lo * rstd), g, b)
 *
 * Printed per row set, against the float64 result rounded to the dtype: elements off by >= 1
 * ulp, the largest distance, the mean signed distance in ulp with its standard error (elements
 * with the same x in a row give the same error, so the standard error counts each distinct x of
 * a row as one sample), and the largest error of the mean the output formula uses, in units of
 * 2^-24 x the row's standard deviation.
 *
 *   cc -O2 -std=c11 -ffp-contract=off bench/norm_numerics.c -lm -o norm_numerics
 *   ./norm_numerics                 (a few seconds)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/nd_dtype.h"

/* ---------------------------------------------------------------------------------------------
 * Inputs (the test utilities' generator: xorshift64*, Box-Muller) and rounding
 * ------------------------------------------------------------------------------------------- */

static uint64_t rand_u64(uint64_t *s)
{
    uint64_t x = *s ? *s : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static double rand_normal(uint64_t *s)
{
    double u1 = (double)(rand_u64(s) >> 11) * 0x1p-53, u2 = (double)(rand_u64(s) >> 11) * 0x1p-53;
    if (u1 < 0x1p-60)
        u1 = 0x1p-60;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* v rounded to nearest-even on the grid of dt, straight from double */
static double round_dt(nd_dtype dt, double v)
{
    if (dt == ND_FLOAT32)
        return (double)(float)v;
    const int prec = dt == ND_FLOAT16 ? 11 : 8, min_e = dt == ND_FLOAT16 ? -24 : -133;
    if (v == 0.0 || !isfinite(v))
        return v;
    int e;
    frexp(v, &e);
    int q = e - prec < min_e ? min_e : e - prec;
    return ldexp(nearbyint(ldexp(v, -q)), q);
}

static float store_dt(nd_dtype dt, float v) /* v rounded to dt, widened back */
{
    switch (dt) {
    case ND_FLOAT16: return nd_half_to_float(nd_float_to_half(v));
    case ND_BFLOAT16: return nd_bf16_to_float(nd_float_to_bf16(v));
    default: return v;
    }
}

static int64_t ordinal(nd_dtype dt, double v) /* position on dt's number line (v on the grid) */
{
    if (dt == ND_FLOAT32) {
        int32_t u = (int32_t)nd_f32_bits((float)v);
        return u < 0 ? -(int64_t)(u & 0x7fffffff) : (int64_t)u;
    }
    uint16_t b = dt == ND_FLOAT16 ? nd_float_to_half((float)v) : nd_float_to_bf16((float)v);
    int32_t m = b & 0x7fff;
    return (b & 0x8000) ? -m : m;
}

/* ---------------------------------------------------------------------------------------------
 * The kernels' layout and combination order
 * ------------------------------------------------------------------------------------------- */

typedef struct part {
    float s, q;  /* sum d, sum d^2 per thread; combined in float (old) */
    double S;    /* sum d combined in double (new) */
} part;

static part part_add(part a, part b) /* a: the lower lane, or the earlier warp or chunk */
{
    part r = {a.s + b.s, a.q + b.q, a.S + b.S};
    return r;
}

/* nd_warp_allreduce<W>: xor butterfly, lo + hi at every level; every lane ends equal */
static part xor_tree(part *v, int w)
{
    part t[32];
    for (int m = w / 2; m > 0; m /= 2) {
        for (int l = 0; l < w; l++)
            t[l] = (l & m) ? part_add(v[l ^ m], v[l]) : part_add(v[l], v[l ^ m]);
        memcpy(v, t, (size_t)w * sizeof *v);
    }
    return v[0];
}

typedef struct layout {
    nd_dtype dt;
    int vec;     /* elements per 16-byte pack */
    int kind;    /* 0: W lanes of a warp; 1: one block; 2: chunk blocks of the split kernel;
                    3: the stream kernel's cluster of 16 blocks */
    int w;       /* lanes (kind 0) */
    int threads; /* kind 1, 2 */
    int packs;   /* packs per thread */
    int chunks;  /* kind 2 */
    int rounds;  /* 2: the float32 block kernel at 8 packs a thread, the stream kernel */
    int64_t npacks;
} layout;

/* nd_rows_run's choice for rows of `cols` columns, x aligned (kRegBytes 128: 8 packs a thread;
 * kSubPacks 4; blocks of 128..512; split chunks of 512 x 8 packs while 4 x the chunks fit in the
 * 264 blocks of 512 an H100/H200 holds at once; the stream kernel beyond). */
static layout pick_layout(nd_dtype dt, int64_t cols)
{
    layout L = {dt, dt == ND_FLOAT32 ? 4 : 8, 0, 1, 0, 1, 1, 1, 0};
    const int64_t P = cols % L.vec == 0 ? cols / L.vec : (cols + 2 * L.vec - 2) / L.vec;
    L.npacks = (cols + L.vec - 1) / L.vec;
    if (P <= 64) { /* sub-warp groups: 2 packs a lane below 32 packs, 4 up to 64 */
        const int sp = P < 32 ? 2 : 4;
        int64_t lanes = (P + sp - 1) / sp, w = 1;
        while (w < lanes)
            w *= 2;
        L.w = (int)w;
        L.packs = w == 1 ? (int)P : sp;
    } else if (P <= 32 * 8) {
        L.w = 32;
        L.packs = (int)((P + 31) / 32);
    } else if (P <= 512 * 8) {
        int t = 128;
        while ((int64_t)t * 8 < P)
            t *= 2;
        const int pk = (int)((P + t - 1) / t), lo = t == 128 ? 2 : 4;
        L.kind = 1;
        L.threads = t;
        L.packs = pk < lo ? lo : pk;
        L.rounds = L.vec * L.packs >= 32 && dt == ND_FLOAT32 ? 2 : 1;
    } else if ((P + 4095) / 4096 * 4 <= 264) {
        L.kind = 2;
        L.threads = 512;
        L.packs = 8;
        L.chunks = (int)((P + 4095) / 4096);
    } else {
        L.kind = 3;
        L.threads = 512;
        L.rounds = 2;
    }
    return L;
}

/* One thread's partial sums over packs pack0 + i * stride (i < packs) of the row, in element
 * order, elements outside the row left out: s = sum (x - sshift), q = sum (x - vshift)^2. */
static part thread_part(const float *x, int64_t n, const layout *L, int64_t pack0, int64_t stride,
                        int64_t packs, float sshift, float vshift)
{
    part p = {0.0f, 0.0f, 0.0};
    for (int64_t i = 0; i < packs; i++)
        for (int j = 0; j < L->vec; j++) {
            const int64_t c = (pack0 + (int64_t)i * stride) * L->vec + j;
            const float d = c < n ? x[c] - vshift : 0.0f;
            p.s += c < n ? x[c] - sshift : 0.0f;
            p.q = fmaf(d, d, p.q);
        }
    p.S = p.s;
    return p;
}

/* Every thread's partials combined in the kernel's order. */
static part row_combine(const float *x, int64_t n, const layout *L, float sshift, float vshift)
{
    part lane[32];
    if (L->kind == 0) {
        for (int l = 0; l < L->w; l++)
            lane[l] = thread_part(x, n, L, l, L->w, L->packs, sshift, vshift);
        return xor_tree(lane, L->w);
    }
    if (L->kind == 3) { /* 16 blocks: each block's all-reduce, then ranks 0..15 in order */
        const int64_t G = 16 * L->threads;
        part cl = {0.0f, 0.0f, 0.0};
        for (int b = 0; b < 16; b++) {
            part blk = {0.0f, 0.0f, 0.0};
            for (int w = 0; w < L->threads / 32; w++) {
                for (int l = 0; l < 32; l++) {
                    const int64_t g = (int64_t)b * L->threads + w * 32 + l;
                    lane[l] = thread_part(x, n, L, g, G, g < L->npacks ? (L->npacks - g + G - 1) / G : 0,
                                          sshift, vshift);
                }
                const part wv = xor_tree(lane, 32);
                blk = w == 0 ? wv : part_add(blk, wv);
            }
            cl = b == 0 ? blk : part_add(cl, blk);
        }
        return cl;
    }
    const int nchunks = L->kind == 2 ? L->chunks : 1;
    part *chunk = malloc((size_t)nchunks * sizeof *chunk);
    for (int c = 0; c < nchunks; c++) {
        part blk = {0.0f, 0.0f, 0.0};
        for (int w = 0; w < L->threads / 32; w++) {
            for (int l = 0; l < 32; l++) {
                const int64_t t = (int64_t)w * 32 + l;
                const int64_t pack0 = L->kind == 2 ? (int64_t)c * L->threads * L->packs + t : t;
                lane[l] = thread_part(x, n, L, pack0, L->threads, L->packs, sshift, vshift);
            }
            const part wv = xor_tree(lane, 32);
            blk = w == 0 ? wv : part_add(blk, wv); /* nd_block_allreduce: slot 0, then 1, 2.. */
        }
        chunk[c] = blk;
    }
    part r = chunk[0];
    if (L->kind == 2) { /* nd_split_gather: lane l folds chunks l, l + 32, ..; shuffle-down tree */
        part a[32];
        memset(a, 0, sizeof a);
        for (int l = 0; l < 32; l++)
            for (int c = l; c < nchunks; c += 32)
                a[l] = c == l ? chunk[c] : part_add(a[l], chunk[c]);
        const int cnt = nchunks < 32 ? nchunks : 32;
        for (int off = 16; off > 0; off /= 2) {
            part t[32];
            for (int l = 0; l < 32; l++)
                t[l] = l + off < cnt ? part_add(a[l], a[l + off]) : a[l];
            memcpy(a, t, sizeof a);
        }
        r = a[0];
    }
    free(chunk);
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * finish() and the output formula
 * ------------------------------------------------------------------------------------------- */

enum { V_OLD, V_SUM, V_OUT, V_NEW, V_COUNT };
static const char *const vname[V_COUNT] = {"old", "sum", "out", "new"};

typedef struct stats {
    float hi, rstd, nlo; /* y = fma(fma(x - hi, rstd, nlo), g, b) */
    double mean;         /* the mean this stands for: hi - nlo / rstd, taken as hi + lo */
} stats;

/* The old finish(): c = S / n, var = q / n - c^2 (nvcc contracts it into one fma). */
static stats finish_old(float shift, float S, float q, float n, float eps)
{
    stats st;
    const float c = S / n;
    const float var = fmaxf(fmaf(-c, c, q / n), 0.0f);
    st.rstd = 1.0f / sqrtf(var + eps);
    st.hi = shift;
    st.nlo = -c * st.rstd;
    st.mean = (double)shift + (double)c;
    return st;
}

/* The new finish() (nd_layernorm_op::finish): S = sum (x - sshift) in double, q = sum
 * (x - vshift)^2. c = S / n as c_hi + c_lo, c_lo from the exact remainder S - c_hi * n (one
 * double fma); the mean sshift + c as m_hi + m_lo by TwoSum; var = q / n - (mean - vshift)^2.
 * On the GPU c_lo is an approximate division (__fdividef): c_lo is 2^-23 of c at most, its own
 * rounding is far below anything that shows. */
static stats finish_new(float sshift, double S, float vshift, float q, float n, float eps)
{
    stats st;
    const float c_hi = (float)S / n;
    const double r = fma(-(double)c_hi, (double)n, S);
    const float c_lo = (float)r / n;
    const float m_hi = sshift + c_hi, t = m_hi - sshift;
    const float m_lo = ((sshift - (m_hi - t)) + (c_hi - t)) + c_lo;
    const float cv = (m_hi - vshift) + m_lo;
    const float var = fmaxf(fmaf(-cv, cv, q / n), 0.0f);
    st.rstd = 1.0f / sqrtf(var + eps);
    st.hi = m_hi;
    st.nlo = -m_lo * st.rstd;
    st.mean = (double)m_hi + (double)m_lo;
    return st;
}

static stats row_stats(int v, const float *x, int64_t n, const layout *L, float eps)
{
    const float nf = (float)n, x0 = x[0];
    if (v == V_NEW && L->dt != ND_FLOAT32) { /* 16-bit: one round, sum x unshifted */
        const part p = row_combine(x, n, L, 0.0f, x0);
        return finish_new(0.0f, p.S, x0, p.q, nf, eps);
    }
    float shift = x0;
    if (L->rounds == 2) /* the first round: the mean of x, summed in float */
        shift = row_combine(x, n, L, 0.0f, 0.0f).s / nf;
    const part p = row_combine(x, n, L, shift, shift);
    switch (v) {
    case V_OLD: return finish_old(shift, p.s, p.q, nf, eps);
    case V_SUM: return finish_old(shift, (float)p.S, p.q, nf, eps);
    case V_OUT: return finish_new(shift, (double)p.s, shift, p.q, nf, eps);
    default: return finish_new(shift, p.S, shift, p.q, nf, eps);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Measurement
 * ------------------------------------------------------------------------------------------- */

typedef struct tally {
    int64_t n, off, maxulp;
    double sum_e, clus2; /* sum of signed distances; sum over clusters of (cluster sum)^2 */
    double max_mean_err; /* |mean used - mean| / (2^-24 std), largest over rows */
} tally;

static const float *sort_key;
static int cmp_idx(const void *a, const void *b)
{
    float x = sort_key[*(const int64_t *)a], y = sort_key[*(const int64_t *)b];
    return (x > y) - (x < y);
}

static void run_shape(nd_dtype dt, int64_t rows, int64_t cols, double mean, double std,
                      uint64_t seed)
{
    const float eps = 1e-5f;
    float *x = malloc((size_t)cols * sizeof *x);
    double *ref = malloc((size_t)cols * sizeof *ref);
    int64_t *idx = malloc((size_t)cols * sizeof *idx), *e = malloc((size_t)cols * sizeof *e);
    tally t[V_COUNT];
    memset(t, 0, sizeof t);
    const layout L = pick_layout(dt, cols);
    uint64_t rng = seed;
    double z0max = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++)
            x[i] = store_dt(dt, (float)(mean + std * rand_normal(&rng)));
        double m = 0.0, var = 0.0;
        for (int64_t i = 0; i < cols; i++)
            m += x[i];
        m /= (double)cols;
        for (int64_t i = 0; i < cols; i++)
            var += (x[i] - m) * (x[i] - m);
        var /= (double)cols;
        const double rs = 1.0 / sqrt(var + eps), sd = sqrt(var) > 0 ? sqrt(var) : 1.0;
        for (int64_t i = 0; i < cols; i++) {
            ref[i] = (x[i] - m) * rs;
            idx[i] = i;
        }
        sort_key = x;
        qsort(idx, (size_t)cols, sizeof *idx, cmp_idx);
        if (fabs(x[0] - m) / sd > z0max)
            z0max = fabs(x[0] - m) / sd;
        for (int v = 0; v < V_COUNT; v++) {
            const stats st = row_stats(v, x, cols, &L, eps);
            const double me = fabs(st.mean - m) / (0x1p-24 * sd);
            if (me > t[v].max_mean_err)
                t[v].max_mean_err = me;
            for (int64_t i = 0; i < cols; i++) {
                const float y = store_dt(dt, fmaf(fmaf(x[i] - st.hi, st.rstd, st.nlo), 1.0f, 0.0f));
                e[i] = ordinal(dt, y) - ordinal(dt, round_dt(dt, ref[i]));
                t[v].n++;
                t[v].sum_e += (double)e[i];
                t[v].off += e[i] != 0;
                if (llabs(e[i]) > t[v].maxulp)
                    t[v].maxulp = llabs(e[i]);
            }
            for (int64_t k = 0; k < cols;) { /* clusters: equal x in this row */
                double cs = 0.0;
                int64_t k2 = k;
                for (; k2 < cols && x[idx[k2]] == x[idx[k]]; k2++)
                    cs += (double)e[idx[k2]];
                t[v].clus2 += cs * cs;
                k = k2;
            }
        }
    }
    char lay[64];
    if (L.kind == 0)
        snprintf(lay, sizeof lay, "%d lanes x %d packs", L.w, L.packs);
    else if (L.kind == 1)
        snprintf(lay, sizeof lay, "block %d x %d packs%s", L.threads, L.packs,
                 L.rounds == 2 ? ", 2 rounds" : "");
    else if (L.kind == 2)
        snprintf(lay, sizeof lay, "split, %d chunks", L.chunks);
    else
        snprintf(lay, sizeof lay, "stream kernel");
    printf("%-8s %lldx%lld, x ~ N(%g, %g^2) (%s); largest |x[0] - mean| / std %.2f\n",
           nd_dtype_name(dt), (long long)rows, (long long)cols, mean, std, lay, z0max);
    for (int v = 0; v < V_COUNT; v++) {
        const double n = (double)t[v].n, mu = t[v].sum_e / n;
        /* cluster-robust standard error of the mean (mean ~ 0: clusters sum to ~0 each) */
        const double se = sqrt(t[v].clus2) / n;
        printf("  %-4s >=1ulp %6lld  max %4lld ulp  mean %+.2e ulp = %+6.1f SE   "
               "mean error %7.3f x 2^-24 std\n",
               vname[v], (long long)t[v].off, (long long)t[v].maxulp, mu, se > 0 ? mu / se : 0.0,
               t[v].max_mean_err);
    }
    free(x), free(ref), free(idx), free(e);
}

/* nd_dtype_name lives in kernels/ops.c; this program stands alone */
const char *nd_dtype_name(nd_dtype dt)
{
    return dt == ND_FLOAT32 ? "float32" : dt == ND_FLOAT16 ? "float16" : "bfloat16";
}

int main(void)
{
    printf("LayerNorm, no gamma/beta (y = xhat); distance in ulp to the float64 result rounded "
           "to the dtype\n");
    /* the shapes */
    run_shape(ND_BFLOAT16, 2, 1000003, 0.0, 3.0, 0xb001);
    run_shape(ND_BFLOAT16, 1, 262144, 0.0, 3.0, 0xb002);
    run_shape(ND_BFLOAT16, 3, 65537, 0.0, 3.0, 0xb003);
    run_shape(ND_FLOAT16, 2, 1000003, 0.0, 3.0, 0xf001);
    /* more rows of the long ones, the other paths, a large mean */
    run_shape(ND_BFLOAT16, 8, 1048576, 0.0, 3.0, 0xb004);
    run_shape(ND_BFLOAT16, 2, 2500001, 0.0, 3.0, 0xb005);
    run_shape(ND_BFLOAT16, 16, 16384, 0.0, 3.0, 0xb006);
    run_shape(ND_BFLOAT16, 256, 2048, 0.0, 3.0, 0xb007);
    run_shape(ND_BFLOAT16, 2, 1000003, 1e4, 3.0, 0xb008);
    run_shape(ND_FLOAT16, 2, 1000003, 1e4, 3.0, 0xf002);
    /* float32: the float32 rule is 1e-5; here only the mean error is of interest */
    run_shape(ND_FLOAT32, 2, 1000003, 0.0, 3.0, 0x3001);
    run_shape(ND_FLOAT32, 16, 16384, 0.0, 3.0, 0x3002);
    run_shape(ND_FLOAT32, 16, 16384, 1e4, 1.0, 0x3003);
    return 0;
}
