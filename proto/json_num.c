/*
 * json_num.c - JSON numbers both ways (json_num.h): the slow parts of decimal -> double (strtod in
 * the C locale, Eisel-Lemire) and float32 -> shortest decimal (Schubfach), laid out by hand, one
 * number at a time or, for arrays on x86-64 CPUs with AVX-512, eight.
 *
 * Both are checked far beyond what their papers promise for this use: tests/test_json_num.c
 * compares the reader with strtod on random and adversarial decimals and the writer with printf
 * and strtod on a large random sample (and its eight-at-a-time path with the one-at-a-time one on
 * random arrays), and `make test-f32-exhaustive` runs the writer over all 2^32 float32 patterns
 * (round trip and shortness, and both paths giving the same text).
 */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json_num.h"

/* Clinger's path and the tables below assume IEEE double arithmetic without extended precision. */
#if !defined(__FLT_EVAL_METHOD__) || __FLT_EVAL_METHOD__ != 0
#error "json_num.h needs FLT_EVAL_METHOD == 0 (SSE2 on x86-64, or any AArch64)"
#endif

/* ======================================================================== decimal -> double */

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

double nd_json_strtod(const char *s, const char *e, int *ok)
{
    char *end;
    double v;
    (void)e; /* strtod stops there: the byte at e continues no number (json_num.h) */
    pthread_once(&c_locale_once, c_locale_init);
    v = c_locale ? strtod_l(s, &end, c_locale) : strtod(s, &end);
    *ok = !isinf(v);
    return v;
}

/*
 * Eisel-Lemire (Daniel Lemire, "Number Parsing at a Gigabyte per Second", 2021; this follows Go's
 * strconv/eisel_lemire.go). POW10_128[q - POW10_MIN] is 10^q's 128 leading bits, truncated: the
 * powers that float32-range numbers written with up to 19 digits need (1.4e-45 = 14 * 10^-46 ..
 * 3.4e38); anything else goes to strtod. Generated with Python's integers:
 *   q >= 0: 10^q shifted to 128 bits; q < 0: 2^(127 + bitlen(10^-q)) // 10^-q.
 */
#define POW10_MIN (-64)
#define POW10_MAX 40
/* {high, low} 64 bits of 10^-64 .. 10^40 */
static const uint64_t POW10_128[POW10_MAX - POW10_MIN + 1][2] = {
    {0xa87fea27a539e9a5u, 0x3f2398d747b36224u}, /* -64 */
    {0xd29fe4b18e88640eu, 0x8eec7f0d19a03aadu}, /* -63 */
    {0x83a3eeeef9153e89u, 0x1953cf68300424acu}, /* -62 */
    {0xa48ceaaab75a8e2bu, 0x5fa8c3423c052dd7u}, /* -61 */
    {0xcdb02555653131b6u, 0x3792f412cb06794du}, /* -60 */
    {0x808e17555f3ebf11u, 0xe2bbd88bbee40bd0u}, /* -59 */
    {0xa0b19d2ab70e6ed6u, 0x5b6aceaeae9d0ec4u}, /* -58 */
    {0xc8de047564d20a8bu, 0xf245825a5a445275u}, /* -57 */
    {0xfb158592be068d2eu, 0xeed6e2f0f0d56712u}, /* -56 */
    {0x9ced737bb6c4183du, 0x55464dd69685606bu}, /* -55 */
    {0xc428d05aa4751e4cu, 0xaa97e14c3c26b886u}, /* -54 */
    {0xf53304714d9265dfu, 0xd53dd99f4b3066a8u}, /* -53 */
    {0x993fe2c6d07b7fabu, 0xe546a8038efe4029u}, /* -52 */
    {0xbf8fdb78849a5f96u, 0xde98520472bdd033u}, /* -51 */
    {0xef73d256a5c0f77cu, 0x963e66858f6d4440u}, /* -50 */
    {0x95a8637627989aadu, 0xdde7001379a44aa8u}, /* -49 */
    {0xbb127c53b17ec159u, 0x5560c018580d5d52u}, /* -48 */
    {0xe9d71b689dde71afu, 0xaab8f01e6e10b4a6u}, /* -47 */
    {0x9226712162ab070du, 0xcab3961304ca70e8u}, /* -46 */
    {0xb6b00d69bb55c8d1u, 0x3d607b97c5fd0d22u}, /* -45 */
    {0xe45c10c42a2b3b05u, 0x8cb89a7db77c506au}, /* -44 */
    {0x8eb98a7a9a5b04e3u, 0x77f3608e92adb242u}, /* -43 */
    {0xb267ed1940f1c61cu, 0x55f038b237591ed3u}, /* -42 */
    {0xdf01e85f912e37a3u, 0x6b6c46dec52f6688u}, /* -41 */
    {0x8b61313bbabce2c6u, 0x2323ac4b3b3da015u}, /* -40 */
    {0xae397d8aa96c1b77u, 0xabec975e0a0d081au}, /* -39 */
    {0xd9c7dced53c72255u, 0x96e7bd358c904a21u}, /* -38 */
    {0x881cea14545c7575u, 0x7e50d64177da2e54u}, /* -37 */
    {0xaa242499697392d2u, 0xdde50bd1d5d0b9e9u}, /* -36 */
    {0xd4ad2dbfc3d07787u, 0x955e4ec64b44e864u}, /* -35 */
    {0x84ec3c97da624ab4u, 0xbd5af13bef0b113eu}, /* -34 */
    {0xa6274bbdd0fadd61u, 0xecb1ad8aeacdd58eu}, /* -33 */
    {0xcfb11ead453994bau, 0x67de18eda5814af2u}, /* -32 */
    {0x81ceb32c4b43fcf4u, 0x80eacf948770ced7u}, /* -31 */
    {0xa2425ff75e14fc31u, 0xa1258379a94d028du}, /* -30 */
    {0xcad2f7f5359a3b3eu, 0x096ee45813a04330u}, /* -29 */
    {0xfd87b5f28300ca0du, 0x8bca9d6e188853fcu}, /* -28 */
    {0x9e74d1b791e07e48u, 0x775ea264cf55347du}, /* -27 */
    {0xc612062576589ddau, 0x95364afe032a819du}, /* -26 */
    {0xf79687aed3eec551u, 0x3a83ddbd83f52204u}, /* -25 */
    {0x9abe14cd44753b52u, 0xc4926a9672793542u}, /* -24 */
    {0xc16d9a0095928a27u, 0x75b7053c0f178293u}, /* -23 */
    {0xf1c90080baf72cb1u, 0x5324c68b12dd6338u}, /* -22 */
    {0x971da05074da7beeu, 0xd3f6fc16ebca5e03u}, /* -21 */
    {0xbce5086492111aeau, 0x88f4bb1ca6bcf584u}, /* -20 */
    {0xec1e4a7db69561a5u, 0x2b31e9e3d06c32e5u}, /* -19 */
    {0x9392ee8e921d5d07u, 0x3aff322e62439fcfu}, /* -18 */
    {0xb877aa3236a4b449u, 0x09befeb9fad487c2u}, /* -17 */
    {0xe69594bec44de15bu, 0x4c2ebe687989a9b3u}, /* -16 */
    {0x901d7cf73ab0acd9u, 0x0f9d37014bf60a10u}, /* -15 */
    {0xb424dc35095cd80fu, 0x538484c19ef38c94u}, /* -14 */
    {0xe12e13424bb40e13u, 0x2865a5f206b06fb9u}, /* -13 */
    {0x8cbccc096f5088cbu, 0xf93f87b7442e45d3u}, /* -12 */
    {0xafebff0bcb24aafeu, 0xf78f69a51539d748u}, /* -11 */
    {0xdbe6fecebdedd5beu, 0xb573440e5a884d1bu}, /* -10 */
    {0x89705f4136b4a597u, 0x31680a88f8953030u}, /* -9 */
    {0xabcc77118461cefcu, 0xfdc20d2b36ba7c3du}, /* -8 */
    {0xd6bf94d5e57a42bcu, 0x3d32907604691b4cu}, /* -7 */
    {0x8637bd05af6c69b5u, 0xa63f9a49c2c1b10fu}, /* -6 */
    {0xa7c5ac471b478423u, 0x0fcf80dc33721d53u}, /* -5 */
    {0xd1b71758e219652bu, 0xd3c36113404ea4a8u}, /* -4 */
    {0x83126e978d4fdf3bu, 0x645a1cac083126e9u}, /* -3 */
    {0xa3d70a3d70a3d70au, 0x3d70a3d70a3d70a3u}, /* -2 */
    {0xccccccccccccccccu, 0xccccccccccccccccu}, /* -1 */
    {0x8000000000000000u, 0x0000000000000000u}, /* 0 */
    {0xa000000000000000u, 0x0000000000000000u}, /* 1 */
    {0xc800000000000000u, 0x0000000000000000u}, /* 2 */
    {0xfa00000000000000u, 0x0000000000000000u}, /* 3 */
    {0x9c40000000000000u, 0x0000000000000000u}, /* 4 */
    {0xc350000000000000u, 0x0000000000000000u}, /* 5 */
    {0xf424000000000000u, 0x0000000000000000u}, /* 6 */
    {0x9896800000000000u, 0x0000000000000000u}, /* 7 */
    {0xbebc200000000000u, 0x0000000000000000u}, /* 8 */
    {0xee6b280000000000u, 0x0000000000000000u}, /* 9 */
    {0x9502f90000000000u, 0x0000000000000000u}, /* 10 */
    {0xba43b74000000000u, 0x0000000000000000u}, /* 11 */
    {0xe8d4a51000000000u, 0x0000000000000000u}, /* 12 */
    {0x9184e72a00000000u, 0x0000000000000000u}, /* 13 */
    {0xb5e620f480000000u, 0x0000000000000000u}, /* 14 */
    {0xe35fa931a0000000u, 0x0000000000000000u}, /* 15 */
    {0x8e1bc9bf04000000u, 0x0000000000000000u}, /* 16 */
    {0xb1a2bc2ec5000000u, 0x0000000000000000u}, /* 17 */
    {0xde0b6b3a76400000u, 0x0000000000000000u}, /* 18 */
    {0x8ac7230489e80000u, 0x0000000000000000u}, /* 19 */
    {0xad78ebc5ac620000u, 0x0000000000000000u}, /* 20 */
    {0xd8d726b7177a8000u, 0x0000000000000000u}, /* 21 */
    {0x878678326eac9000u, 0x0000000000000000u}, /* 22 */
    {0xa968163f0a57b400u, 0x0000000000000000u}, /* 23 */
    {0xd3c21bcecceda100u, 0x0000000000000000u}, /* 24 */
    {0x84595161401484a0u, 0x0000000000000000u}, /* 25 */
    {0xa56fa5b99019a5c8u, 0x0000000000000000u}, /* 26 */
    {0xcecb8f27f4200f3au, 0x0000000000000000u}, /* 27 */
    {0x813f3978f8940984u, 0x4000000000000000u}, /* 28 */
    {0xa18f07d736b90be5u, 0x5000000000000000u}, /* 29 */
    {0xc9f2c9cd04674edeu, 0xa400000000000000u}, /* 30 */
    {0xfc6f7c4045812296u, 0x4d00000000000000u}, /* 31 */
    {0x9dc5ada82b70b59du, 0xf020000000000000u}, /* 32 */
    {0xc5371912364ce305u, 0x6c28000000000000u}, /* 33 */
    {0xf684df56c3e01bc6u, 0xc732000000000000u}, /* 34 */
    {0x9a130b963a6c115cu, 0x3c7f400000000000u}, /* 35 */
    {0xc097ce7bc90715b3u, 0x4b9f100000000000u}, /* 36 */
    {0xf0bdc21abb48db20u, 0x1e86d40000000000u}, /* 37 */
    {0x96769950b50d88f4u, 0x1314448000000000u}, /* 38 */
    {0xbc143fa4e250eb31u, 0x17d955a000000000u}, /* 39 */
    {0xeb194f8e1ae525fdu, 0x5dcfab0800000000u}, /* 40 */
};

int nd_json_eisel_lemire(uint64_t m, int64_t q, double *out)
{
    if (q < POW10_MIN || q > POW10_MAX || m == 0)
        return 0;
    const uint64_t *t = POW10_128[q - POW10_MIN];
    const int clz = __builtin_clzll(m);
    m <<= clz;
    /* floor(q * log2(10)) + 64 + bias - clz */
    uint64_t exp2 = (uint64_t)(((217706 * q) >> 16) + 64 + 1023) - (uint64_t)clz;

    unsigned __int128 x = (unsigned __int128)m * t[0];
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    if ((hi & 0x1ff) == 0x1ff && lo + m < m) {
        /* the truncated low half of the power could carry into the bits that decide: look */
        unsigned __int128 y = (unsigned __int128)m * t[1];
        uint64_t yhi = (uint64_t)(y >> 64), ylo = (uint64_t)y;
        uint64_t mhi = hi, mlo = lo + yhi;
        if (mlo < lo)
            mhi++;
        if ((mhi & 0x1ff) == 0x1ff && mlo + 1 == 0 && ylo + m < m)
            return 0;
        hi = mhi;
        lo = mlo;
    }
    const uint64_t msb = hi >> 63;
    uint64_t mant = hi >> (msb + 9);
    exp2 -= 1 ^ msb;
    if (lo == 0 && (hi & 0x1ff) == 0 && (mant & 3) == 1)
        return 0; /* maybe exactly half way: strtod settles it */
    mant += mant & 1;
    mant >>= 1;
    if (mant >> 53) {
        mant >>= 1;
        exp2++;
    }
    if (exp2 - 1 >= 0x7ff - 1)
        return 0; /* subnormal or overflow */
    uint64_t bits = exp2 << 52 | (mant & 0x000fffffffffffffu);
    memcpy(out, &bits, sizeof bits);
    return 1;
}

/* ======================================================================== float32 -> shortest */

/*
 * Schubfach (Raffaello Giulietti, "The Schubfach way to render doubles", 2020; the float variant,
 * as in Java's Float.toString since JDK 19 and in Alexander Bolz's drachennest): the value and
 * its rounding interval's bounds are scaled by one 64-bit power of ten, rounded to odd, so that
 * the decimals with one digit less than the scaled value, or none less, can be tested against
 * the bounds directly: no loop over digits. It gave the same digits as Ryu (Ulf Adams, PLDI 2018)
 * for every float32 magnitude when it replaced it here, in about two thirds of the time.
 *
 * POW10_G[k + 31] = floor(10^k * 2^(63 - floor(log2 10^k))) + 1, an overestimate in [2^63, 2^64)
 * (generated with Python's integers).
 */
static const uint64_t POW10_G[45 + 31 + 1] = { /* 10^-31 .. 10^45 */
    0x81ceb32c4b43fcf5u, 0xa2425ff75e14fc32u, 0xcad2f7f5359a3b3fu, 0xfd87b5f28300ca0eu,
    0x9e74d1b791e07e49u, 0xc612062576589ddbu, 0xf79687aed3eec552u, 0x9abe14cd44753b53u,
    0xc16d9a0095928a28u, 0xf1c90080baf72cb2u, 0x971da05074da7befu, 0xbce5086492111aebu,
    0xec1e4a7db69561a6u, 0x9392ee8e921d5d08u, 0xb877aa3236a4b44au, 0xe69594bec44de15cu,
    0x901d7cf73ab0acdau, 0xb424dc35095cd810u, 0xe12e13424bb40e14u, 0x8cbccc096f5088ccu,
    0xafebff0bcb24aaffu, 0xdbe6fecebdedd5bfu, 0x89705f4136b4a598u, 0xabcc77118461cefdu,
    0xd6bf94d5e57a42bdu, 0x8637bd05af6c69b6u, 0xa7c5ac471b478424u, 0xd1b71758e219652cu,
    0x83126e978d4fdf3cu, 0xa3d70a3d70a3d70bu, 0xcccccccccccccccdu, 0x8000000000000001u,
    0xa000000000000001u, 0xc800000000000001u, 0xfa00000000000001u, 0x9c40000000000001u,
    0xc350000000000001u, 0xf424000000000001u, 0x9896800000000001u, 0xbebc200000000001u,
    0xee6b280000000001u, 0x9502f90000000001u, 0xba43b74000000001u, 0xe8d4a51000000001u,
    0x9184e72a00000001u, 0xb5e620f480000001u, 0xe35fa931a0000001u, 0x8e1bc9bf04000001u,
    0xb1a2bc2ec5000001u, 0xde0b6b3a76400001u, 0x8ac7230489e80001u, 0xad78ebc5ac620001u,
    0xd8d726b7177a8001u, 0x878678326eac9001u, 0xa968163f0a57b401u, 0xd3c21bcecceda101u,
    0x84595161401484a1u, 0xa56fa5b99019a5c9u, 0xcecb8f27f4200f3bu, 0x813f3978f8940985u,
    0xa18f07d736b90be6u, 0xc9f2c9cd04674edfu, 0xfc6f7c4045812297u, 0x9dc5ada82b70b59eu,
    0xc5371912364ce306u, 0xf684df56c3e01bc7u, 0x9a130b963a6c115du, 0xc097ce7bc90715b4u,
    0xf0bdc21abb48db21u, 0x96769950b50d88f5u, 0xbc143fa4e250eb32u, 0xeb194f8e1ae525feu,
    0x92efd1b8d0cf37bfu, 0xb7abc627050305aeu, 0xe596b7b0c643c71au, 0x8f7e32ce7bea5c70u,
    0xb35dbf821ae4f38cu,
};

static inline uint32_t round_to_odd(uint64_t g, uint32_t cp)
{
    const unsigned __int128 p = (unsigned __int128)g * cp;
    const uint32_t y1 = (uint32_t)(p >> 64), y0 = (uint32_t)(p >> 32);
    return y1 | (y0 > 1);
}

static inline __attribute__((always_inline)) void f32_shortest(uint32_t bits, uint32_t *digits,
                                                                int *exp10)
{
    const uint32_t ieee_m = bits & 0x7fffffu, ieee_e = (bits >> 23) & 0xffu;
    uint32_t c, out;
    int q, k;
    /*
     * Schubfach finds the shortest decimal that rounds to the float32 directly (strtof). Our
     * readers round twice, decimal -> double (strtod) -> float32, as the /v1 and v2 parsers and
     * Python with numpy do: a decimal within half a double ulp of the midpoint between two floats
     * lands on that midpoint, which then ties to even. Over all 2^32 patterns
     * (make test-f32-exhaustive) this changes the answer for one pair of neighbours only, written
     * here by hand: 7.038531e-26 lies just below the midpoint above 0x15ae43fd and reads back as
     * 0x15ae43fe.
     */
    if ((bits & 0x7fffffffu) - 0x15ae43fdu < 2) {
        *digits = (bits & 1) ? 70385307 : 7038531; /* 7.0385307e-26, 7.038531e-26 */
        *exp10 = (bits & 1) ? -33 : -32;
        return;
    }
    if (ieee_e != 0) {
        c = (1u << 23) | ieee_m;
        q = (int)ieee_e - 150; /* the value is c * 2^q */
        if (q <= 0 && q > -24 && (c & ((1u << -q) - 1)) == 0) { /* a small integer */
            out = c >> -q;
            k = 0;
            goto strip;
        }
    } else {
        c = ieee_m;
        q = -149;
    }
    {
        const int even = (c & 1) == 0; /* round-half-even reading takes the bounds */
        const int closer = ieee_m == 0 && ieee_e > 1; /* the lower gap is half at powers of 2 */
        const uint32_t cbl = 4 * c - 2 + (uint32_t)closer, cb = 4 * c, cbr = 4 * c + 2;
        /* floor(log10(2^q)), or of 3/4 2^q when the lower bound is closer */
        k = (q * 1262611 - (closer ? 524031 : 0)) >> 22;
        const int h = q + ((-k * 1741647) >> 19) + 1; /* floor(log2(10^-k)): 1..4 */
        const uint64_t g = POW10_G[-k + 31];
        const uint32_t vbl = round_to_odd(g, cbl << h);
        const uint32_t vb = round_to_odd(g, cb << h);
        const uint32_t vbr = round_to_odd(g, cbr << h);
        const uint32_t lower = vbl + !even, upper = vbr - !even;
        const uint32_t s = vb / 4;
        if (s >= 10) { /* one digit less: 10 s' or 10 (s' + 1), if exactly one is inside */
            const uint32_t sp = s / 10;
            const int up_in = lower <= 40 * sp, wp_in = 40 * sp + 40 <= upper;
            if (up_in != wp_in) {
                out = sp + (uint32_t)wp_in;
                k++;
                goto strip;
            }
        }
        /* s or s + 1: the one inside, or the nearer when both are, ties to even (branches measured
         * faster here than selecting without them) */
        const int u_in = lower <= 4 * s, w_in = 4 * s + 4 <= upper;
        if (u_in != w_in) {
            out = s + (uint32_t)w_in;
        } else {
            const uint32_t mid = 4 * s + 2;
            out = s + (vb > mid || (vb == mid && (s & 1)));
        }
    }
strip:
    while (out % 10 == 0) {
        out /= 10;
        k++;
    }
    *digits = out;
    *exp10 = k;
}

void nd_f32_shortest(uint32_t bits, uint32_t *digits, int *exp10)
{
    f32_shortest(bits, digits, exp10);
}

/* The number of decimal digits of 0 < v < 10^9 (comparisons measured faster here than a
 * table indexed by the bit length). */
static inline int decimal_length(uint32_t v)
{
    return v < 10          ? 1
           : v < 100       ? 2
           : v < 1000      ? 3
           : v < 10000     ? 4
           : v < 100000    ? 5
           : v < 1000000   ? 6
           : v < 10000000  ? 7
           : v < 100000000 ? 8
                           : 9;
}

typedef unsigned __int128 u128;

#define ZEROS8 0x3030303030303030ull /* "00000000" */

/*
 * The 8 decimal digits of v < 10^8, leading zeros included, as the bytes of a little-endian word
 * (the first digit in the lowest byte): split into 4-digit halves, then pairs, then digits, each
 * step on all lanes at once (multiplying by a reciprocal: x * 10486 >> 20 == x / 100 for
 * x < 10^4, x * 103 >> 10 == x / 10 for x < 100).
 */
static inline uint64_t ascii8(uint32_t v)
{
    uint64_t y = (uint64_t)(v / 10000) | (uint64_t)(v % 10000) << 32;
    uint64_t z = ((y * 10486) >> 20) & 0x0000007f0000007full;
    z |= (y - z * 100) << 16;
    uint64_t w = ((z * 103) >> 10) & 0x000f000f000f000full;
    w |= (z - w * 10) << 8;
    return w + ZEROS8;
}

/* The n digits of v (exactly n, 1 <= n <= 9) as the low bytes of a 16-byte word, first digit
 * lowest, then '0's. */
static inline u128 digit_word(uint32_t v, int n)
{
    const u128 zeros = (u128)ZEROS8 << 64 | ZEROS8;
    if (n == 9)
        return ascii8(v / 10) | (u128)('0' + v % 10) << 64 | zeros << 72;
    return (ascii8(v) >> (8 * (8 - n))) | zeros << (8 * n);
}

/* w with byte c put in at byte position k (0 <= k < 16), the bytes from k on moved up one. */
static inline u128 insert_byte(u128 w, int k, unsigned char c)
{
    const u128 low = ((u128)1 << (8 * k)) - 1;
    return (w & low) | (u128)c << (8 * k) | (w & ~low) << 8;
}

/*
 * digits * 10^exp10 (0 < digits < 10^9, no trailing zeros) in "%.9g"'s layout, as the low bytes
 * of a 16-byte word (at most 14 of them; the rest are scratch); *len gets the length. Built in
 * registers and stored once by the caller: no loop over the digits, no store of a few bytes read
 * back wider (which stalls the load).
 */
static inline __attribute__((always_inline)) u128 format_word(uint32_t digits, int exp10,
                                                              size_t *len)
{
    const int n = decimal_length(digits);
    const int x = exp10 + n - 1; /* the exponent of the leading digit */
    const u128 w = digit_word(digits, n);
    if (x >= -4 && x <= 8) {
        if (x < 0) { /* "0.", -x - 1 zeros, the digits */
            *len = (size_t)(1 - x + n);
            const uint64_t head = 0x3030303030302e30ull; /* "0.000000" */
            return w << (8 * (1 - x)) | (head & ((1ull << (8 * (1 - x))) - 1));
        }
        if (x >= n - 1) { /* an integer: the digits, then zeros */
            *len = (size_t)x + 1;
            return w;
        }
        *len = (size_t)n + 1; /* the point after x + 1 digits */
        return insert_byte(w, x + 1, '.');
    }
    /* d[.ddd]e+XX */
    const int ax = x < 0 ? -x : x; /* at most 45 for float32; the tables' too */
    const uint64_t e = 'e' | (uint64_t)(x < 0 ? '-' : '+') << 8 |
                       (uint64_t)('0' + ax / 10) << 16 | (uint64_t)('0' + ax % 10) << 24;
    const int m = n > 1 ? n + 1 : 1; /* the mantissa's length */
    const u128 mant = n > 1 ? insert_byte(w, 1, '.') : w;
    *len = (size_t)m + 4;
    return (mant & (((u128)1 << (8 * m)) - 1)) | (u128)e << (8 * m);
}

char *nd_json_put_decimal(char *p, int neg, uint64_t digits, int exp10)
{
    char tmp[16];
    size_t len;
    while (digits % 10 == 0) {
        digits /= 10;
        exp10++;
    }
    if (neg)
        *p++ = '-';
    const u128 w = format_word((uint32_t)digits, exp10, &len);
    memcpy(tmp, &w, 16);
    memcpy(p, tmp, len);
    return p + len;
}

static inline __attribute__((always_inline)) char *put_f32(char *p, float v)
{
    uint32_t bits, digits;
    int exp10;
    size_t len;
    memcpy(&bits, &v, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u) {
        memcpy(p, "null", 4);
        return p + 4;
    }
    if ((bits & 0x7fffffffu) == 0) {
        if (bits >> 31) {
            memcpy(p, "-0.0", 4); /* "-0" would read back as the integer 0 */
            return p + 4;
        }
        *p = '0';
        return p + 1;
    }
    f32_shortest(bits, &digits, &exp10);
    const u128 w = format_word(digits, exp10, &len);
    /* at most 14 bytes were text: room for the sign in front; chosen without a branch */
    const u128 signed_w = w << 8 | '-';
    const size_t neg = bits >> 31;
    memcpy(p, neg ? &signed_w : &w, 16); /* one store, whatever the length (<= 15 bytes) */
    return p + len + neg;
}

char *nd_json_put_f32(char *p, float v)
{
    return put_f32(p, v);
}

/* ======================================================================== float32 arrays */

/*
 * Eight at a time with AVX-512 (F and BW), where the CPU has it: the same Schubfach steps as
 * f32_shortest on eight 64-bit lanes, then the layout as a byte shuffle. Each number's source is
 * 16 bytes: its digits as nine characters with leading zeros (the n digits are the last n), '0',
 * '.', '-', 'e', the exponent's sign and two digits; a pattern from a table indexed by the sign,
 * the leading digit's exponent X (-4..8, or "exponent form") and n picks the text's bytes from
 * it (one vpshufb per four numbers), and a scalar loop stores each number's 16 bytes and moves on
 * by its length. A batch with a lane the vector steps do not cover (zero, subnormal, infinity,
 * NaN, a power of two, a small integer, the pair f32_shortest writes by hand) is written by
 * put_f32 whole. The output is put_f32's byte for byte: tests/test_json_num.c compares the two on
 * random arrays, and make test-f32-exhaustive on all 2^32 patterns.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_F32S_AVX512 1
#include <immintrin.h>

/* The source bytes a pattern picks from (see above). */
enum { SRC_ZERO = 9, SRC_POINT, SRC_MINUS, SRC_E, SRC_ESIGN, SRC_ETENS, SRC_EONES };
enum { FORM_EXP = 13, NFORMS = 14 }; /* forms 0..12: fixed notation, X = form - 4 */
#define PATTERNS (2 * NFORMS * 9)    /* [neg][form][n - 1] */

static uint64_t pattern_lo[PATTERNS], pattern_hi[PATTERNS];
static unsigned char pattern_len[PATTERNS];

/* The patterns: format_word's layouts, spelt as source positions. */
static void patterns_init(void)
{
    for (int neg = 0; neg < 2; neg++)
        for (int form = 0; form < NFORMS; form++)
            for (int n = 1; n <= 9; n++) {
                unsigned char t[16];
                int len = 0;
                const int x = form - 4;
#define DIGIT(i) ((unsigned char)(9 - n + (i)))
                if (neg)
                    t[len++] = SRC_MINUS;
                if (form == FORM_EXP) {
                    t[len++] = DIGIT(0);
                    if (n > 1) {
                        t[len++] = SRC_POINT;
                        for (int i = 1; i < n; i++)
                            t[len++] = DIGIT(i);
                    }
                    t[len++] = SRC_E;
                    t[len++] = SRC_ESIGN;
                    t[len++] = SRC_ETENS;
                    t[len++] = SRC_EONES;
                } else if (x < 0) { /* "0.", -x - 1 zeros, the digits */
                    t[len++] = SRC_ZERO;
                    t[len++] = SRC_POINT;
                    for (int i = 0; i < -x - 1; i++)
                        t[len++] = SRC_ZERO;
                    for (int i = 0; i < n; i++)
                        t[len++] = DIGIT(i);
                } else if (x >= n - 1) { /* an integer: the digits, then zeros */
                    for (int i = 0; i < n; i++)
                        t[len++] = DIGIT(i);
                    for (int i = n - 1; i < x; i++)
                        t[len++] = SRC_ZERO;
                } else { /* the point after x + 1 digits */
                    for (int i = 0; i < n; i++) {
                        t[len++] = DIGIT(i);
                        if (i == x)
                            t[len++] = SRC_POINT;
                    }
                }
#undef DIGIT
                for (int i = len; i < 16; i++)
                    t[i] = 0x80; /* a zero byte: past the end, overwritten by what follows */
                const int k = (neg * NFORMS + form) * 9 + n - 1;
                memcpy(&pattern_lo[k], t, 8);
                memcpy(&pattern_hi[k], t + 8, 8);
                pattern_len[k] = (unsigned char)len;
            }
}

static int f32s_avx512;
static pthread_once_t f32s_once = PTHREAD_ONCE_INIT;

static void f32s_init(void)
{
    __builtin_cpu_init();
    f32s_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    if (f32s_avx512)
        patterns_init();
}

#define AVX512 __attribute__((target("avx512f,avx512bw")))

static inline AVX512 __m512i set1(uint64_t v)
{
    return _mm512_set1_epi64((long long)v);
}

/* round_to_odd on eight lanes: g (64 bits) times cp (< 2^32), bits 64..95 made odd when bits
 * 32..63 are more than 1; as 32 x 32-bit products, the low half's carry through bits 32.. */
static inline AVX512 __m512i round_to_odd8(__m512i g, __m512i cp)
{
    const __m512i a = _mm512_mul_epu32(_mm512_srli_epi64(g, 32), cp);
    const __m512i b = _mm512_mul_epu32(g, cp);
    const __m512i mid = _mm512_add_epi64(a, _mm512_srli_epi64(b, 32)); /* the product >> 32 */
    const __m512i y1 = _mm512_srli_epi64(mid, 32);
    const __mmask8 odd = _mm512_cmpgt_epu64_mask(_mm512_and_si512(mid, set1(0xffffffffu)),
                                                 set1(1));
    return _mm512_mask_or_epi64(y1, odd, y1, set1(1));
}

/* x / d for x < 2^32 (and what the callers pass) as (x * m) >> sh, one 32 x 32 multiply. */
static inline AVX512 __m512i div8(__m512i x, uint32_t m, int sh)
{
    return _mm512_srli_epi64(_mm512_mul_epu32(x, set1(m)), sh);
}

/*
 * The texts of the eight floats at src into p, each followed by a comma. Returns the end, or NULL
 * (nothing written) when a lane needs put_f32.
 */
static AVX512 char *put_f32x8(char *p, const void *src)
{
    const __m512i bits = _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)src));
    const __m512i m = _mm512_and_si512(bits, set1(0x7fffff));
    const __m512i e = _mm512_and_si512(_mm512_srli_epi64(bits, 23), set1(0xff));
    const __m512i c = _mm512_or_si512(m, set1(1u << 23));
    /* the lanes put_f32 writes: e 0 or 255; m 0 (the closer lower bound); small integers, whose
     * bits below 2^(150 - e) are all 0 (a shift by more than 63 gives 0, and c & ~0 is never 0);
     * the pair */
    const __m512i below = _mm512_sllv_epi64(set1(1), _mm512_sub_epi64(set1(150), e));
    const __m512i pair = _mm512_sub_epi64(_mm512_and_si512(bits, set1(0x7fffffff)),
                                          set1(0x15ae43fd));
    const __mmask8 special = _mm512_cmpeq_epi64_mask(e, set1(0)) |
                             _mm512_cmpeq_epi64_mask(e, set1(255)) |
                             _mm512_cmpeq_epi64_mask(m, set1(0)) |
                             _mm512_testn_epi64_mask(c, _mm512_sub_epi64(below, set1(1))) |
                             _mm512_cmplt_epu64_mask(pair, set1(2));
    if (special)
        return NULL;

    /* f32_shortest, closer = 0: k = floor(log10(2^q)), h = floor(log2(10^-k)) + q + 1 */
    const __m512i q = _mm512_sub_epi64(e, set1(150));
    __m512i k = _mm512_srai_epi64(_mm512_mul_epi32(q, set1(1262611)), 22);
    const __m512i log2 = _mm512_srai_epi64(_mm512_mul_epi32(_mm512_sub_epi64(set1(0), k),
                                                            set1(1741647)),
                                           19);
    const __m512i h = _mm512_add_epi64(_mm512_add_epi64(q, log2), set1(1));
    const __m512i g = _mm512_i64gather_epi64(_mm512_sub_epi64(set1(31), k),
                                             (const long long *)POW10_G, 8);
    const __m512i cb = _mm512_slli_epi64(c, 2);
    const __m512i vbl = round_to_odd8(g, _mm512_sllv_epi64(_mm512_sub_epi64(cb, set1(2)), h));
    const __m512i vb = round_to_odd8(g, _mm512_sllv_epi64(cb, h));
    const __m512i vbr = round_to_odd8(g, _mm512_sllv_epi64(_mm512_add_epi64(cb, set1(2)), h));
    const __m512i odd = _mm512_and_si512(c, set1(1)); /* !even */
    const __m512i lower = _mm512_add_epi64(vbl, odd), upper = _mm512_sub_epi64(vbr, odd);
    const __m512i s = _mm512_srli_epi64(vb, 2);
    const __m512i sp = div8(s, 0xcccccccdu, 35);
    const __m512i sp40 = _mm512_mullo_epi32(sp, set1(40)); /* < 2^30: the low half suffices */
    const __mmask8 up_in = _mm512_cmple_epu64_mask(lower, sp40);
    const __mmask8 wp_in = _mm512_cmple_epu64_mask(_mm512_add_epi64(sp40, set1(40)), upper);
    const __mmask8 shorter = _mm512_cmpge_epu64_mask(s, set1(10)) & (up_in ^ wp_in);
    const __m512i s4 = _mm512_slli_epi64(s, 2);
    const __mmask8 u_in = _mm512_cmple_epu64_mask(lower, s4);
    const __mmask8 w_in = _mm512_cmple_epu64_mask(_mm512_add_epi64(s4, set1(4)), upper);
    const __m512i mid = _mm512_add_epi64(s4, set1(2));
    const __mmask8 round_up =
        _mm512_cmpgt_epu64_mask(vb, mid) |
        (_mm512_cmpeq_epi64_mask(vb, mid) & _mm512_test_epi64_mask(s, set1(1)));
    const __mmask8 up = ((u_in ^ w_in) & w_in) | (~(u_in ^ w_in) & round_up);
    __m512i out = _mm512_mask_add_epi64(s, up, s, set1(1));
    out = _mm512_mask_add_epi64(out, shorter, sp, _mm512_maskz_mov_epi64(wp_in, set1(1)));
    k = _mm512_mask_add_epi64(k, shorter, k, set1(1));
    for (;;) { /* trailing zeros off */
        const __m512i tenth = div8(out, 0xcccccccdu, 35);
        const __mmask8 z = _mm512_cmpeq_epi64_mask(_mm512_mullo_epi32(tenth, set1(10)), out);
        if (!z)
            break;
        out = _mm512_mask_mov_epi64(out, z, tenth);
        k = _mm512_mask_add_epi64(k, z, k, set1(1));
    }

    /* n digits, the leading one's exponent x, the pattern */
    __m512i n = set1(1);
    for (uint32_t t = 10; t <= 100000000; t *= 10)
        n = _mm512_mask_add_epi64(n, _mm512_cmpge_epu64_mask(out, set1(t)), n, set1(1));
    const __m512i x = _mm512_sub_epi64(_mm512_add_epi64(k, n), set1(1));
    const __mmask8 fixed = _mm512_cmpge_epi64_mask(x, set1((uint64_t)-4)) &
                           _mm512_cmple_epi64_mask(x, set1(8));
    const __m512i form = _mm512_mask_add_epi64(set1(FORM_EXP), fixed, x, set1(4));
    const __m512i neg = _mm512_srli_epi64(bits, 31);
    const __m512i neg_rows = _mm512_and_si512(_mm512_sub_epi64(set1(0), neg), set1(NFORMS * 9));
    const __m512i form_rows = _mm512_add_epi64(_mm512_slli_epi64(form, 3), form); /* form * 9 */
    const __m512i idx = _mm512_add_epi64(_mm512_add_epi64(neg_rows, form_rows),
                                         _mm512_sub_epi64(n, set1(1)));

    /* the source: out's 9 digits, the first (out / 10^8) alone, the other 8 by ascii8's steps on
     * each lane (the 32-bit halves hold lo / 10^4 and lo % 10^4, then 16-bit lanes the pairs);
     * then '0', '.', '-', 'e', the exponent's sign and its two digits */
    const __m512i hi = div8(out, 1441151881u, 57); /* out < 2^30 */
    const __m512i lo = _mm512_sub_epi64(out, _mm512_mul_epu32(hi, set1(100000000)));
    const __m512i lo_hi = div8(lo, 109951163u, 40); /* lo / 10^4, lo < 10^8 */
    const __m512i lo_lo = _mm512_sub_epi64(lo, _mm512_mul_epu32(lo_hi, set1(10000)));
    const __m512i y = _mm512_or_si512(lo_hi, _mm512_slli_epi64(lo_lo, 32));
    const __m512i y100 = _mm512_srli_epi32(_mm512_mullo_epi32(y, _mm512_set1_epi32(10486)), 20);
    const __m512i y_rem = _mm512_sub_epi32(y, _mm512_mullo_epi32(y100, _mm512_set1_epi32(100)));
    const __m512i z = _mm512_or_si512(y100, _mm512_slli_epi32(y_rem, 16));
    const __m512i z10 = _mm512_srli_epi16(_mm512_mullo_epi16(z, _mm512_set1_epi16(103)), 10);
    const __m512i z_rem = _mm512_sub_epi16(z, _mm512_mullo_epi16(z10, _mm512_set1_epi16(10)));
    const __m512i asc = _mm512_add_epi64(_mm512_or_si512(z10, _mm512_slli_epi16(z_rem, 8)),
                                         set1(ZEROS8));
    const __m512i ax = _mm512_abs_epi64(x);
    const __m512i tens = _mm512_srli_epi64(_mm512_mullo_epi32(ax, set1(205)), 11); /* ax < 100 */
    const __m512i ones = _mm512_sub_epi64(ax, _mm512_mullo_epi32(tens, set1(10)));
    const __m512i esign = _mm512_mask_blend_epi64(_mm512_cmplt_epi64_mask(x, set1(0)), set1('+'),
                                                  set1('-'));
    const __m512i src_lo = _mm512_or_si512(_mm512_add_epi64(hi, set1('0')),
                                           _mm512_slli_epi64(asc, 8));
    const uint64_t fixed_chars = '0' << 8 | '.' << 16 | '-' << 24 | (uint64_t)'e' << 32;
    __m512i src_hi = _mm512_or_si512(_mm512_srli_epi64(asc, 56), set1(fixed_chars));
    src_hi = _mm512_or_si512(src_hi, _mm512_slli_epi64(esign, 40));
    src_hi = _mm512_or_si512(src_hi, _mm512_slli_epi64(_mm512_add_epi64(tens, set1('0')), 48));
    src_hi = _mm512_or_si512(src_hi, _mm512_slli_epi64(_mm512_add_epi64(ones, set1('0')), 56));

    /* numbers 0-3 and 4-7 as 16-byte lanes, source and pattern alike, then the shuffle */
    const __m512i first = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    const __m512i second = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
    const __m512i pat_lo = _mm512_i64gather_epi64(idx, (const long long *)pattern_lo, 8);
    const __m512i pat_hi = _mm512_i64gather_epi64(idx, (const long long *)pattern_hi, 8);
    const __m512i text0 = _mm512_shuffle_epi8(_mm512_permutex2var_epi64(src_lo, first, src_hi),
                                              _mm512_permutex2var_epi64(pat_lo, first, pat_hi));
    const __m512i text1 = _mm512_shuffle_epi8(_mm512_permutex2var_epi64(src_lo, second, src_hi),
                                              _mm512_permutex2var_epi64(pat_lo, second, pat_hi));
    uint64_t ix[8];
    _mm512_storeu_si512(ix, idx);
#define PUT(t, j, i)                                                                             \
    do {                                                                                         \
        _mm_storeu_si128((__m128i *)p, _mm512_extracti32x4_epi32(t, j));                         \
        p += pattern_len[ix[i]];                                                                 \
        *p++ = ',';                                                                              \
    } while (0)
    PUT(text0, 0, 0);
    PUT(text0, 1, 1);
    PUT(text0, 2, 2);
    PUT(text0, 3, 3);
    PUT(text1, 0, 4);
    PUT(text1, 1, 5);
    PUT(text1, 2, 6);
    PUT(text1, 3, 7);
#undef PUT
    return p;
}
#endif /* x86-64 */

char *nd_json_put_f32s(char *p, const void *src, int64_t n)
{
    const char *b = src;
    int64_t i = 0;
    if (n <= 0)
        return p;
#if HAVE_F32S_AVX512
    pthread_once(&f32s_once, f32s_init);
    if (f32s_avx512) {
        /* each number followed by a comma; the last comma taken back at the end */
        for (; i + 8 <= n; i += 8) {
            char *e = put_f32x8(p, b + 4 * i);
            if (e) {
                p = e;
                continue;
            }
            for (int j = 0; j < 8; j++) {
                float f;
                memcpy(&f, b + 4 * (i + j), 4);
                p = put_f32(p, f);
                *p++ = ',';
            }
        }
        for (; i < n; i++) {
            float f;
            memcpy(&f, b + 4 * i, 4);
            p = put_f32(p, f);
            *p++ = ',';
        }
        return p - 1;
    }
#endif
    for (; i < n; i++) {
        float f;
        memcpy(&f, b + 4 * i, 4);
        if (i)
            *p++ = ',';
        p = put_f32(p, f);
    }
    return p;
}
