/*
 * test_dtype.c - kernels/nd_dtype.h (float16/bfloat16 conversions) and the name tables of
 * kernels/ops.c.
 *
 * References are independent of the header: float16 against the compiler's _Float16 conversions
 * (correctly rounded, from libgcc), bfloat16 against a rounding decided in double between the two
 * bfloat16 neighbours of the input.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../kernels/nd_dtype.h"
#include "../kernels/nd_ops.h"
#include "util/nd_testutil.h"

static uint16_t ref_float_to_half(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, sizeof b);
    return b;
}

static float ref_half_to_float(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, sizeof h);
    return (float)h;
}

/* bfloat16 pattern p (no NaN) as a double; 0x7f80 (infinity) is 2^128, the grid point past the
 * largest finite value, so overflow falls out of the nearest-point rule. */
static double bf16_grid_value(uint16_t p)
{
    double mag = (p & 0x7fff) == 0x7f80 ? 0x1p128 : (double)nd_bits_f32((uint32_t)(p & 0x7fff) << 16);
    return (p & 0x8000) ? -mag : mag;
}

static uint16_t ref_float_to_bf16(float f)
{
    uint32_t u = nd_f32_bits(f);
    if ((u & 0x7fffffffu) >= 0x7f800000u)
        return (uint16_t)(u >> 16); /* infinity; NaN is checked apart */
    uint16_t lo = (uint16_t)(u >> 16);  /* truncated toward zero */
    uint16_t hi = (uint16_t)(lo + 1);   /* next away from zero */
    double v = fabs((double)f), a = fabs(bf16_grid_value(lo)), b = fabs(bf16_grid_value(hi));
    if (v - a < b - v)
        return lo;
    if (v - a > b - v)
        return hi;
    return (lo & 1) ? hi : lo;
}

static float random_float(uint64_t *st)
{
    uint64_t r = nd_rand_u64(st);
    switch (r % 6) {
    case 0: /* any pattern: NaN, infinity, subnormals, everything */
        return nd_bits_f32((uint32_t)(r >> 32));
    case 1: /* float16's subnormal and small-normal range */
        return (float)ldexp(nd_rand_uniform(st) * ((r >> 8) & 1 ? 1 : -1), -26 + (int)(r >> 40) % 14);
    case 2: /* near float16's overflow threshold 65520 */
        return (float)(65504.0 + 32.0 * nd_rand_uniform(st)) * ((r >> 8) & 1 ? 1 : -1);
    case 3: { /* exact float16 ties: 12th significant bit set, the bits below clear */
        uint32_t u = (uint32_t)(r >> 32);
        u = (u & 0x80000000u) | ((0x38800000u + (u & 0x07ffffffu)) & 0x7fffe000u) | 0x1000u;
        return nd_bits_f32(u);
    }
    case 4: { /* exact bfloat16 ties */
        uint32_t u = (uint32_t)(r >> 32);
        return nd_bits_f32((u & 0xffff0000u) | 0x8000u);
    }
    default: /* ordinary magnitudes */
        return (float)(nd_rand_normal(st) * ldexp(1.0, (int)(r >> 40) % 40 - 20));
    }
}

Test(dtype, every_half_pattern_round_trips)
{
    for (uint32_t p = 0; p < 65536; p++) {
        uint16_t h = (uint16_t)p;
        float f = nd_half_to_float(h);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan) {
            cr_assert(isnan(f), "0x%04x should widen to NaN", p);
            uint16_t back = nd_float_to_half(f);
            cr_assert((back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (back & 0x8000) == (h & 0x8000),
                      "NaN 0x%04x came back as 0x%04x", p, back);
            continue;
        }
        cr_assert_eq(nd_f32_bits(f), nd_f32_bits(ref_half_to_float(h)),
                     "0x%04x widened to %a, expected %a", p, f, ref_half_to_float(h));
        cr_assert_eq(nd_float_to_half(f), h, "0x%04x -> %a -> 0x%04x", p, f, nd_float_to_half(f));
    }
}

Test(dtype, every_bf16_pattern_round_trips)
{
    for (uint32_t p = 0; p < 65536; p++) {
        uint16_t b = (uint16_t)p;
        float f = nd_bf16_to_float(b);
        cr_assert_eq(nd_f32_bits(f), p << 16);
        if (isnan(f))
            cr_assert(isnan(nd_bf16_to_float(nd_float_to_bf16(f))));
        else
            cr_assert_eq(nd_float_to_bf16(f), b, "0x%04x came back as 0x%04x", p,
                         nd_float_to_bf16(f));
    }
}

Test(dtype, float_to_half_rounds_like_float16)
{
    uint64_t st = 1;
    for (int i = 0; i < 4000000; i++) {
        float f = random_float(&st);
        uint16_t got = nd_float_to_half(f), ref = ref_float_to_half(f);
        if (isnan(f)) {
            cr_assert(isnan(nd_half_to_float(got)), "%a: NaN became 0x%04x", f, got);
            cr_assert_eq(got & 0x8000, (nd_f32_bits(f) >> 16) & 0x8000, "NaN sign lost");
            continue;
        }
        cr_assert_eq(got, ref, "%a (0x%08x): got 0x%04x, expected 0x%04x", f, nd_f32_bits(f),
                     got, ref);
    }
}

Test(dtype, float_to_bf16_rounds_to_nearest_even)
{
    uint64_t st = 2;
    for (int i = 0; i < 4000000; i++) {
        float f = random_float(&st);
        uint16_t got = nd_float_to_bf16(f);
        if (isnan(f)) {
            cr_assert(isnan(nd_bf16_to_float(got)), "%a: NaN became 0x%04x", f, got);
            cr_assert(got & 0x40, "NaN not quiet: 0x%04x", got);
            cr_assert_eq(got & 0x8000, (nd_f32_bits(f) >> 16) & 0x8000, "NaN sign lost");
            continue;
        }
        uint16_t ref = ref_float_to_bf16(f);
        cr_assert_eq(got, ref, "%a (0x%08x): got 0x%04x, expected 0x%04x", f, nd_f32_bits(f),
                     got, ref);
    }
}

Test(dtype, special_values)
{
    cr_expect_eq(nd_float_to_half(65504.0f), 0x7bff);
    cr_expect_eq(nd_float_to_half(65519.996f), 0x7bff);
    cr_expect_eq(nd_float_to_half(65520.0f), 0x7c00); /* tie rounds to even: infinity */
    cr_expect_eq(nd_float_to_half(-INFINITY), 0xfc00);
    cr_expect_eq(nd_float_to_half(0x1p-24f), 0x0001);
    cr_expect_eq(nd_float_to_half(0x1p-25f), 0x0000); /* tie to even: zero */
    cr_expect_eq(nd_float_to_half(-0x1.000002p-25f), 0x8001);
    cr_expect_eq(nd_float_to_half(-0.0f), 0x8000);
    cr_expect_eq(nd_float_to_bf16(0x1.fffffep127f), 0x7f80); /* overflows to infinity */
    cr_expect_eq(nd_float_to_bf16(0x1.fep127f), 0x7f7f);
    cr_expect_eq(nd_float_to_bf16(nd_bits_f32(0x00000001u)), 0x0000); /* below half a bf16 step */
    cr_expect_eq(nd_float_to_bf16(nd_bits_f32(0x3f808000u)), 0x3f80); /* tie to even, down */
    cr_expect_eq(nd_float_to_bf16(nd_bits_f32(0x3f818000u)), 0x3f82); /* tie to even, up */
    cr_expect(isnan(nd_bf16_to_float(nd_float_to_bf16(nd_bits_f32(0x7f800001u)))),
              "signalling NaN with a low payload must stay NaN");
}

Test(dtype, load_and_store_dispatch_on_dtype)
{
    uint16_t h[1];
    float f[1];
    nd_store(ND_FLOAT16, h, 0, 1.5f);
    cr_expect_eq(h[0], 0x3e00);
    cr_expect_eq(nd_load(ND_FLOAT16, h, 0), 1.5f);
    nd_store(ND_BFLOAT16, h, 0, 1.5f);
    cr_expect_eq(h[0], 0x3fc0);
    cr_expect_eq(nd_load(ND_BFLOAT16, h, 0), 1.5f);
    nd_store(ND_FLOAT32, f, 0, 0.1f);
    cr_expect_eq(nd_load(ND_FLOAT32, f, 0), 0.1f);
}

Test(names, tables_round_trip)
{
    static const char *dnames[] = {"float32", "float16", "bfloat16"};
    static const size_t dsizes[] = {4, 2, 2};
    for (int i = 0; i < ND_DTYPE_COUNT; i++) {
        nd_dtype dt = (nd_dtype)99;
        cr_expect_str_eq(nd_dtype_name((nd_dtype)i), dnames[i]);
        cr_expect_eq(nd_dtype_size((nd_dtype)i), dsizes[i]);
        cr_expect_eq(nd_dtype_from_name(dnames[i], &dt), 0);
        cr_expect_eq(dt, (nd_dtype)i);
    }
    static const char *onames[] = {"layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"};
    for (int i = 0; i < ND_OP_COUNT; i++) {
        nd_op op = (nd_op)99;
        cr_expect_str_eq(nd_op_name((nd_op)i), onames[i]);
        cr_expect_eq(nd_op_from_name(onames[i], &op), 0);
        cr_expect_eq(op, (nd_op)i);
    }
    nd_dtype dt;
    nd_op op;
    cr_expect_eq(nd_dtype_from_name("float64", &dt), -1);
    cr_expect_eq(nd_dtype_from_name("Float32", &dt), -1);
    cr_expect_eq(nd_dtype_from_name("", &dt), -1);
    cr_expect_eq(nd_dtype_from_name(NULL, &dt), -1);
    cr_expect_eq(nd_op_from_name("softmax ", &op), -1);
    cr_expect_eq(nd_op_from_name(NULL, &op), -1);
    cr_expect_eq(nd_dtype_size((nd_dtype)ND_DTYPE_COUNT), 0);
    cr_expect_str_eq(nd_op_name((nd_op)ND_OP_COUNT), "unknown");
}

Test(errors, error_set_formats_and_returns_status)
{
    nd_error err;
    cr_expect_eq(nd_error_set(&err, ND_EINVAL, "cols=%d: must be at least %d", 0, 1), ND_EINVAL);
    cr_expect_str_eq(err.msg, "cols=0: must be at least 1");
    cr_expect_eq(nd_error_set(NULL, ND_ENOMEM, "x"), ND_ENOMEM);
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    nd_error_set(&err, ND_EINVAL, "%s", big);
    cr_expect_eq(strlen(err.msg), sizeof err.msg - 1, "long messages are truncated, terminated");
}
