/*
 * nd_testutil.c - random inputs, the float64 reference and the tolerance rule (see nd_testutil.h).
 *
 * The reference is written from the textbook formulas in double precision and shares no code with
 * any backend: two-pass mean and variance, max-subtracted softmax with the sum in double. The
 * tolerance for float16 and bfloat16 rounds the double reference straight to the dtype (never via
 * float, which would round twice) and accepts that value or either neighbour on the dtype's grid.
 */
#include "nd_testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../kernels/nd_dtype.h"

/* ---------------------------------------------------------------------------------------------
 * Random inputs
 * ------------------------------------------------------------------------------------------- */

/* xorshift64* (Vigna); a zero state would stick at zero, so it is replaced by a fixed seed. */
uint64_t nd_rand_u64(uint64_t *state)
{
    uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

double nd_rand_uniform(uint64_t *state)
{
    return (double)(nd_rand_u64(state) >> 11) * 0x1p-53;
}

/* Box-Muller; one of the pair is thrown away to keep the function stateless beyond *state. */
double nd_rand_normal(uint64_t *state)
{
    double u1 = nd_rand_uniform(state);
    double u2 = nd_rand_uniform(state);
    if (u1 < 0x1p-60)
        u1 = 0x1p-60;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void nd_fill_random(nd_dtype dt, void *buf, int64_t n, double mean, double std, uint64_t *state,
                    double *f64)
{
    for (int64_t i = 0; i < n; i++) {
        double v = mean + std * nd_rand_normal(state);
        nd_store(dt, buf, i, (float)v);
        if (f64)
            f64[i] = (double)nd_load(dt, buf, i);
    }
}

void nd_to_f64(nd_dtype dt, const void *buf, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)nd_load(dt, buf, i);
}

void nd_poison(nd_dtype dt, void *buf, int64_t n)
{
    if (dt == ND_FLOAT32) {
        float nan = nd_bits_f32(0x7fc0deadu);
        for (int64_t i = 0; i < n; i++)
            ((float *)buf)[i] = nan;
    } else {
        uint16_t nan = dt == ND_FLOAT16 ? 0x7e5au : 0x7fdau;
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)buf)[i] = nan;
    }
}

void nd_mask_attention(nd_dtype dt, void *buf, double *f64, int64_t outer, int64_t dim,
                       int64_t inner, uint64_t *state)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t c = o * inner + i, keep = 1 + (c * 7919) % dim;
            const int kind = (int)(c % 5);
            for (int64_t d = 0; d < dim; d++) {
                const int64_t k = (o * dim + d) * inner + i;
                if ((kind <= 1 && d >= keep) || kind == 4 ||
                    ((kind == 2 || kind == 3) && nd_rand_u64(state) % 3 == 0)) {
                    nd_store(dt, buf, k, -INFINITY);
                    f64[k] = -INFINITY;
                }
            }
        }
}

void nd_mask_nonfinite(nd_dtype dt, void *buf, double *f64, int64_t outer, int64_t dim,
                       int64_t inner)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t c = o * inner + i;
            const int kind = (int)(c % 5);
            if (kind > 2 || (c / 5) % 2 != 0)
                continue;
            int64_t d = dim - 1;
            if (kind == 2) /* the last masked element, if any */
                while (d >= 0 && f64[(o * dim + d) * inner + i] != -INFINITY)
                    d--;
            if (d < 0)
                continue;
            const int64_t k = (o * dim + d) * inner + i;
            const float v = kind != 1 ? NAN : INFINITY;
            nd_store(dt, buf, k, v);
            f64[k] = v;
        }
}

/* ---------------------------------------------------------------------------------------------
 * float64 reference
 * ------------------------------------------------------------------------------------------- */

void nd_ref_layernorm(const double *x, int64_t rows, int64_t cols, const double *gamma,
                      const double *beta, double eps, double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *yr = y + r * cols;
        double m = 0.0;
        for (int64_t c = 0; c < cols; c++)
            m += xr[c];
        m /= (double)cols;
        double var = 0.0;
        for (int64_t c = 0; c < cols; c++)
            var += (xr[c] - m) * (xr[c] - m);
        var /= (double)cols;
        double rs = 1.0 / sqrt(var + eps);
        for (int64_t c = 0; c < cols; c++) {
            double v = (xr[c] - m) * rs;
            if (gamma)
                v *= gamma[c];
            if (beta)
                v += beta[c];
            yr[c] = v;
        }
        if (mean)
            mean[r] = m;
        if (rstd)
            rstd[r] = rs;
    }
}

void nd_ref_rmsnorm(const double *x, int64_t rows, int64_t cols, const double *weight, double eps,
                    double *y, double *rstd)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = x + r * cols;
        double *yr = y + r * cols;
        double ss = 0.0;
        for (int64_t c = 0; c < cols; c++)
            ss += xr[c] * xr[c];
        double rs = 1.0 / sqrt(ss / (double)cols + eps);
        for (int64_t c = 0; c < cols; c++)
            yr[c] = weight ? xr[c] * rs * weight[c] : xr[c] * rs;
        if (rstd)
            rstd[r] = rs;
    }
}

void nd_ref_softmax(const double *x, int64_t outer, int64_t dim, int64_t inner, int log_,
                    double *y)
{
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const double *xs = x + o * dim * inner + i;
            double *ys = y + o * dim * inner + i;
            double mx = -INFINITY;
            for (int64_t d = 0; d < dim; d++)
                if (xs[d * inner] > mx)
                    mx = xs[d * inner];
            double sum = 0.0;
            for (int64_t d = 0; d < dim; d++)
                sum += exp(xs[d * inner] - mx);
            double lse = log(sum);
            for (int64_t d = 0; d < dim; d++)
                ys[d * inner] = log_ ? xs[d * inner] - mx - lse : exp(xs[d * inner] - mx) / sum;
        }
    }
}

void nd_ref_prelu(const double *x, int64_t outer, int64_t channels, int64_t inner,
                  const double *alpha, int64_t alpha_count, double *y)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < channels; c++) {
            double a = alpha_count == 1 ? alpha[0] : alpha[c];
            for (int64_t i = 0; i < inner; i++) {
                int64_t k = (o * channels + c) * inner + i;
                y[k] = x[k] > 0.0 ? x[k] : a * x[k];
            }
        }
}

/* ---------------------------------------------------------------------------------------------
 * Tolerance
 * ------------------------------------------------------------------------------------------- */

/* Grid of a binary floating-point format: `prec` significand bits (with the implicit one), the
 * exponent of the smallest subnormal, and the largest finite value. */
typedef struct grid {
    int prec;
    int min_sub_exp;
    double max_finite;
} grid;

static const grid half_grid = {11, -24, 65504.0};
static const grid bf16_grid = {8, -133, 0x1.fep127};

/* v rounded to nearest, ties to even, on grid g; +-inf past the largest finite value. Scaling by
 * a power of two is exact in double, so nearbyint() does the one and only rounding. */
static double round_to_grid(double v, const grid *g)
{
    if (!isfinite(v) || v == 0.0)
        return v;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    int q = e - g->prec;
    if (q < g->min_sub_exp)
        q = g->min_sub_exp;
    double r = ldexp(nearbyint(ldexp(v, -q)), q);
    if (fabs(r) > g->max_finite)
        return copysign(INFINITY, v);
    if (r == 0.0)
        return copysign(0.0, v);
    return r;
}

/* Position of a 16-bit pattern on the number line: consecutive values differ by 1, +0 and -0
 * share 0. */
static int32_t ordinal16(uint16_t bits)
{
    int32_t mag = bits & 0x7fff;
    return (bits & 0x8000) ? -mag : mag;
}

/* Pattern of a value exactly representable in dt (widened values are; so are grid roundings). */
static uint16_t bits16(nd_dtype dt, double v)
{
    return dt == ND_FLOAT16 ? nd_float_to_half((float)v) : nd_float_to_bf16((float)v);
}

int nd_close(nd_dtype dt, double got, double ref)
{
    if (isnan(ref) || isnan(got))
        return isnan(ref) && isnan(got);
    if (dt == ND_FLOAT32) {
        if (isinf(ref) || isinf(got))
            return got == ref;
        return fabs(got - ref) <= 1e-5 * fmax(1.0, fabs(ref));
    }
    if (fabs(got - ref) <= 1e-5) /* absolute floor, for results that cancel to near zero */
        return 1;
    double r = round_to_grid(ref, dt == ND_FLOAT16 ? &half_grid : &bf16_grid);
    int32_t d = ordinal16(bits16(dt, got)) - ordinal16(bits16(dt, r));
    return d >= -1 && d <= 1;
}

int64_t nd_compare(nd_dtype dt, const void *got, const double *ref, int64_t n, const char *what,
                   char *msg, size_t msg_size)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = (double)nd_load(dt, got, i);
        if (!nd_close(dt, g, ref[i])) {
            if (bad == 0 && msg && msg_size)
                snprintf(msg, msg_size, "%s[%lld]=%.9g, reference %.9g", what, (long long)i, g,
                         ref[i]);
            bad++;
        }
    }
    if (bad == 0 && msg && msg_size)
        msg[0] = '\0';
    return bad;
}

int64_t nd_compare_f32(const float *got, const double *ref, int64_t n, const char *what,
                       char *msg, size_t msg_size)
{
    return nd_compare(ND_FLOAT32, got, ref, n, what, msg, msg_size);
}

/* ---- base64 ---- */

size_t nd_b64_encode(const void *in, size_t n, char *out, int pad)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = in;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)b[i + 1] << 8;
        if (i + 2 < n)
            v |= b[i + 2];
        const size_t chars = n - i >= 3 ? 4 : n - i + 1;
        for (size_t k = 0; k < 4; k++)
            if (k < chars)
                out[o++] = abc[(v >> (18 - 6 * k)) & 63];
            else if (pad)
                out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}
