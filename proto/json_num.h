/*
 * json_num.h - JSON numbers, both ways (json_num.c); not part of the public API.
 *
 * In: the decimal text of one JSON number becomes a double that is exactly what strtod gives for
 * it (correct rounding, ties to even), with jansson's grammar and limits, so that a body the
 * scanner in json_tensor.c reads means what jansson would have read. Three ways, the first that
 * applies: Clinger's exact path (a mantissa of at most 2^53 and |power of ten| <= 22: one exact
 * multiply or divide, correctly rounded by the FPU), the Eisel-Lemire algorithm (a 64 x 128-bit
 * product with a truncated power of ten, for up to 19 digits and powers 10^-64 .. 10^40, giving up
 * when the product cannot decide the rounding), and strtod in the C locale for the rest (more than
 * 19 digits that the first two cannot settle, subnormal or overflowing results, far exponents).
 *
 * Out: a float32 as the shortest decimal that strtod + (float) reads back as the same float32,
 * the nearest to it among the shortest (Giulietti's Schubfach, which like Ryu assumes a reader that
 * rounds once, so the one pair of floats where rounding through double changes the answer is
 * handled apart: see f32_shortest in json_num.c), laid out as printf's "%.9g" lays out numbers
 * (fixed notation for decimal exponents -4 to 8, d.ddde+XX beyond), with only the digits needed.
 */
#ifndef ND_PROTO_JSON_NUM_H
#define ND_PROTO_JSON_NUM_H

#include <stddef.h>
#include <stdint.h>

/* Exactly what strtod returns for the bytes [s, e) of a valid JSON real number; *ok = 0 when
 * that overflows to infinity (jansson rejects it: "real number overflow"). The byte at e must be
 * readable and not part of a number (every valid number is followed by one). */
double nd_json_strtod(const char *s, const char *e, int *ok);

/* Eisel-Lemire: m * 10^q correctly rounded (m != 0, sign applied by the caller); 0 when it cannot
 * tell (the caller falls back to nd_json_strtod). */
int nd_json_eisel_lemire(uint64_t m, int64_t q, double *out);

/*
 * Reads the JSON number that starts at p (p < end), by jansson's grammar:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. A token with neither fraction nor exponent is an
 * integer, as jansson sees it: it must fit int64 ("too big integer" otherwise) and its double is
 * the integer rounded to odd beyond 2^53 (so that rounding it to a storage dtype afterwards stays a
 * single rounding: see nd_store_f64), and "-0" is +0 as jansson's integer 0 is. Other tokens are
 * reals, valued as strtod values them; one that overflows is refused, as jansson refuses it.
 *
 * Returns the end of the token with *out and *is_int set, or NULL when the bytes are not such a
 * number or the token runs to end (in an array a number is always followed by something).
 */
static inline const char *nd_json_read_number(const char *p, const char *end, double *out,
                                              int *is_int)
{
    static const double pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                     1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const uint64_t m_full = 1000000000000000000ull; /* m stays below 10^19: 19 digits */
    const char *s = p;
    const int neg = *p == '-';
    uint64_t m = 0;      /* the digits read, leading zeros included (they add nothing) */
    int64_t q = 0;       /* value = m * 10^q, when nothing was dropped */
    int dropped = 0;     /* digits past the 19th significant one were left out of m */
    int slow = 0;        /* the exponent is too far to track: strtod decides */
    unsigned d;

    p += neg;
    if (p == end)
        return NULL;
    if (*p == '0') {
        if (++p == end || (unsigned)(*p - '0') < 10)
            return NULL; /* a leading zero, or nothing after it */
    } else if ((d = (unsigned)(*p - '0')) < 10) {
        do {
            if (m < m_full)
                m = m * 10 + d;
            else
                q++, dropped = 1;
            if (++p == end)
                return NULL;
        } while ((d = (unsigned)(*p - '0')) < 10);
    } else {
        return NULL;
    }

    if (*p != '.' && (*p | 0x20) != 'e') {
        /* an integer: jansson's strtoll must take it */
        *is_int = 1;
        if (dropped || m > (uint64_t)INT64_MAX + (uint64_t)neg)
            return NULL;
        double v = (double)m; /* rounded to nearest even; to odd below when that lost bits */
        if (m > ((uint64_t)1 << 53)) {
            const uint64_t back = (uint64_t)v; /* v <= 2^63 */
            uint64_t u;
            __builtin_memcpy(&u, &v, sizeof u);
            if (back != m && !(u & 1)) {
                u = back > m ? u - 1 : u + 1;
                __builtin_memcpy(&v, &u, sizeof v);
            }
        }
        *out = m == 0 ? 0.0 : neg ? -v : v; /* "-0" is the integer 0: +0.0 */
        return p;
    }

    *is_int = 0;
    if (*p == '.') {
        if (++p == end || (d = (unsigned)(*p - '0')) >= 10)
            return NULL;
        /* eight digits at a time while they fit (SWAR, as in simdjson and fast_float) */
        while (end - p >= 8 && m < 100000000000ull) {
            uint64_t w;
            __builtin_memcpy(&w, p, 8);
            if (((w + 0x4646464646464646ull) | (w - 0x3030303030303030ull)) &
                0x8080808080808080ull)
                break; /* not eight digits */
            w -= 0x3030303030303030ull;
            w = w * 10 + (w >> 8);
            w = ((w & 0x000000ff000000ffull) * 0x000f424000000064ull +
                 ((w >> 16) & 0x000000ff000000ffull) * 0x0000271000000001ull) >> 32;
            m = m * 100000000 + (uint32_t)w;
            q -= 8;
            p += 8;
        }
        if (p == end) /* the eight-digit steps ran to the end of the text */
            return NULL;
        while ((d = (unsigned)(*p - '0')) < 10) {
            if (m < m_full)
                m = m * 10 + d, q--;
            else
                dropped = 1;
            if (++p == end)
                return NULL;
        }
    }
    if ((*p | 0x20) == 'e') {
        int eneg = 0;
        int64_t e = 0;
        if (++p == end)
            return NULL;
        if (*p == '+' || *p == '-') {
            eneg = *p == '-';
            if (++p == end)
                return NULL;
        }
        if ((d = (unsigned)(*p - '0')) >= 10)
            return NULL;
        do {
            if (e < 100000000)
                e = e * 10 + d;
            else
                slow = 1;
            if (++p == end)
                return NULL;
        } while ((d = (unsigned)(*p - '0')) < 10);
        q += eneg ? -e : e;
    }

    double v;
    if (m == 0 && !dropped) {
        v = 0.0; /* any exponent: strtod gives zero, and no overflow */
    } else if (!dropped && !slow && m <= ((uint64_t)1 << 53) && q >= -22 && q <= 22) {
        /* Clinger: both operands exact, so the one operation rounds correctly */
        v = q >= 0 ? (double)m * pow10[q] : (double)m / pow10[-q];
    } else {
        int ok = 0;
        if (!slow && m) {
            double lo, hi;
            ok = nd_json_eisel_lemire(m, q, &lo);
            /* digits were dropped: m and m + 1 bracket the value; one answer for both settles it */
            if (ok && dropped)
                ok = nd_json_eisel_lemire(m + 1, q, &hi) && hi == lo;
            v = lo;
        }
        if (!ok) {
            v = nd_json_strtod(s + neg, p, &ok);
            if (!ok)
                return NULL; /* "real number overflow" */
        }
    }
    *out = neg ? -v : v;
    return p;
}

/* The most bytes nd_json_put_f32 writes: "-1.17549435e-38" and the like. */
#define ND_JSON_F32_MAX 15

/*
 * Writes v as the shortest decimal that reads back (strtod, then rounded to float32) as v itself,
 * the nearest to v among those ("0.1", "1e-45", "3.4028235e+38", "100", "0.0001", "1e+09");
 * "null" for infinities and NaN (JSON has neither), "-0.0" for -0 (a reader may take "-0" as the
 * integer 0). Returns the end; no NUL is written. p needs room for ND_JSON_F32_MAX + 1 bytes: the
 * text is copied there in one 16-byte store, whatever its length.
 */
char *nd_json_put_f32(char *p, float v);

/* Writes n float32 values from src (which need not be aligned) as nd_json_put_f32 does, comma
 * separated, the same text byte for byte; eight at a time with AVX-512 where the CPU has it
 * (json_num.c). p needs room for n * (ND_JSON_F32_MAX + 1) bytes. Returns the end. */
char *nd_json_put_f32s(char *p, const void *src, int64_t n);

/*
 * Writes digits * 10^exp10 (digits > 0 with at most 9 digits, its leading digit's decimal
 * exponent X within +-99; neg for a minus sign) in "%.9g"'s layout without trailing zeros: fixed
 * notation for -4 <= X <= 8 ("0.00012", "12.5", "120000"), else d[.ddd]e+XX / e-XX with two
 * exponent digits ("1.5e-05", "3e+38"). Used by nd_json_put_f32 and by the float16/bfloat16 tables
 * (request.c), so that every answer looks alike. At most ND_JSON_F32_MAX bytes.
 */
char *nd_json_put_decimal(char *p, int neg, uint64_t digits, int exp10);

/* The shortest decimal for float32 bits (finite, nonzero, any sign ignored): *digits * 10^*exp10,
 * digits without trailing zeros. */
void nd_f32_shortest(uint32_t bits, uint32_t *digits, int *exp10);

#endif /* ND_PROTO_JSON_NUM_H */
