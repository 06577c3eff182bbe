/*
 * test_json_num.c - proto/json_num.c: JSON numbers in (decimal -> double, exactly strtod's value)
 * and out (float32 -> the shortest decimal that reads back), and the float16/bfloat16 answer
 * tables (request.c) that share the writer's layout.
 *
 * The reader is compared bit for bit with glibc's strtod on random and adversarial decimals:
 * every double bit pattern at every precision, subnormals, 20+ digit mantissas, exact halfway
 * cases between doubles and their nearest neighbours on both sides, leading zeros, huge and tiny
 * exponents, -0, the overflow edge. The writer's output must read back (strtod, then float) as the
 * same float32, be shortest (no decimal with one digit less reads back: checking the two nearest
 * ones settles it), and be the nearest of the shortest (printf's correctly rounded digits when
 * those read back). `make test-f32-exhaustive` runs the writer's checks over all 2^32 patterns
 * (exhaustive::all_float32, skipped unless ND_F32_EXHAUSTIVE is set).
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../proto/json_num.h"
#include "../proto/request.h"

/* ======================================================================== helpers */

static uint64_t seed0;

static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint64_t rng_init(void)
{
    if (!seed0) {
        const char *env = getenv("ND_TEST_SEED");
        seed0 = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
        if (!seed0)
            seed0 = 1;
    }
    return seed0;
}

static double bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/*
 * Reads text (a NUL-terminated JSON real) with nd_json_read_number and with strtod; both must agree
 * bit for bit, or both refuse (overflow). The reader is handed the text followed by a ']', as in
 * an array.
 */
static void expect_as_strtod(const char *text)
{
    char buf[1600];
    size_t n = strlen(text);
    cr_assert_lt(n, sizeof buf - 1);
    memcpy(buf, text, n);
    buf[n] = ']';
    double got = 0;
    int is_int = -1;
    const char *end = nd_json_read_number(buf, buf + n + 1, &got, &is_int);
    double want = strtod(text, NULL);
    if (isinf(want)) {
        cr_assert_null(end, "seed %llu: %s overflows; the reader took it as %.17g",
                       (unsigned long long)seed0, text, got);
        return;
    }
    cr_assert_eq(end, buf + n, "seed %llu: %s: read %td of %zu bytes", (unsigned long long)seed0,
                 text, end ? end - buf : -1, n);
    cr_assert_eq(is_int, 0, "%s", text);
    cr_assert_eq(f64_bits(got), f64_bits(want), "seed %llu: %s: %a, strtod %a",
                 (unsigned long long)seed0, text, got, want);
}

/* ======================================================================== reading */

Test(read, random_doubles_at_every_precision)
{
    uint64_t s = rng_init();
    char t[64];
    for (int i = 0; i < 400000; i++) {
        double d = bits_f64(rnd(&s) & 0x7fffffffffffffffull);
        if (!isfinite(d))
            continue;
        int prec = 1 + (int)(rnd(&s) % 25);
        snprintf(t, sizeof t, (rnd(&s) & 1) ? "%.*e" : "%.*g", prec - 1 + (prec == 1), d);
        if (!strchr(t, '.') && !strchr(t, 'e'))
            strcat(t, ".0"); /* a real, not an integer */
        expect_as_strtod(t);
        t[0] = '-';
        snprintf(t + 1, sizeof t - 1, "%.*g", prec, d);
        if (strchr(t, '.') || strchr(t, 'e'))
            expect_as_strtod(t);
    }
}

/* What clients send: float32 values as %.9g (numpy, C) and as %.17g of the double (Python). */
Test(read, float32_values_as_clients_write_them)
{
    uint64_t s = rng_init();
    char t[64];
    for (int i = 0; i < 300000; i++) {
        uint32_t u = (uint32_t)rnd(&s);
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f))
            continue;
        snprintf(t, sizeof t, "%.9e", (double)f);
        expect_as_strtod(t);
        snprintf(t, sizeof t, "%.16e", (double)f);
        expect_as_strtod(t);
        snprintf(t, sizeof t, "%.6f", (double)f);
        if (strlen(t) < 60)
            expect_as_strtod(t);
    }
}

/* Long mantissas: more digits than 64 bits hold, the value decided by digits far to the right. */
Test(read, long_mantissas)
{
    uint64_t s = rng_init();
    char t[1200];
    for (int i = 0; i < 100000; i++) {
        int nd = 20 + (int)(rnd(&s) % 60), k = 0;
        if (rnd(&s) & 1)
            t[k++] = '-';
        t[k++] = (char)('1' + rnd(&s) % 9);
        int point = (int)(rnd(&s) % (uint64_t)nd);
        for (int j = 1; j < nd; j++) {
            if (j == point)
                t[k++] = '.';
            /* runs of 0s and 9s sit next to rounding boundaries */
            uint64_t r = rnd(&s) % 10;
            t[k++] = r < 3 ? '0' : r < 6 ? '9' : (char)('0' + rnd(&s) % 10);
        }
        if (point == 0) {
            t[k++] = '.';
            t[k++] = '5';
        }
        k += sprintf(t + k, "e%d", (int)(rnd(&s) % 700) - 350);
        t[k] = '\0';
        expect_as_strtod(t);
    }
    /* 19 and 20 significant digits, where the reader stops keeping all of them */
    for (int i = 0; i < 100000; i++) {
        snprintf(t, sizeof t, "%llu%010llue%d",
                 (unsigned long long)(rnd(&s) % 9000000000ull + 1000000000ull),
                 (unsigned long long)(rnd(&s) % 10000000000ull), (int)(rnd(&s) % 80) - 60);
        expect_as_strtod(t);
        snprintf(t, sizeof t, "0.%019llue%d",
                 (unsigned long long)(rnd(&s) % 10000000000000000000ull), (int)(rnd(&s) % 80) - 40);
        expect_as_strtod(t);
    }
}

/* The exact decimal of x (a long double holding a value between two doubles exactly) and the
 * decimals just above and just below it. */
static void halfway_cases(long double x)
{
    char t[1500], u[3100];
    int n = snprintf(t, sizeof t, "%.1100Le", x);
    char *e = strchr(t, 'e');
    char exp[16];
    snprintf(exp, sizeof exp, "%s", e);
    char *last = e - 1;
    while (*last == '0')
        last--;
    last[1] = '\0'; /* the exact digits */
    snprintf(u, sizeof u, "%s%s", t, exp);
    expect_as_strtod(u); /* ties to even */
    snprintf(u, sizeof u, "%s000000000000000000000001%s", t, exp);
    expect_as_strtod(u); /* just above */
    /* just below: the last digit one less, then nines */
    char *d = last;
    while (*d == '0' || *d == '.')
        d--;
    if (*d >= '1' && *d <= '9') {
        (*d)--;
        snprintf(u, sizeof u, "%s999999999999999999999999%s", t, exp);
        expect_as_strtod(u);
    }
    (void)n;
}

Test(read, exact_halfway_between_doubles)
{
    uint64_t s = rng_init();
    for (int i = 0; i < 20000; i++) {
        /* normal doubles of moderate exponent, and subnormals (where halfway is exact too) */
        uint64_t u = rnd(&s);
        int sub = i % 4 == 0;
        u = sub ? u & 0x000fffffffffffffull
                : (u & 0x800fffffffffffffull) | (uint64_t)(1023 - 80 + rnd(&s) % 160) << 52;
        double d = bits_f64(u), up = nextafter(d, copysign(INFINITY, d));
        long double mid = ((long double)d + (long double)up) / 2;
        halfway_cases(fabsl(mid));
    }
    /* the halfway points between float32 values, which %.9g readers round through double */
    for (int i = 0; i < 20000; i++) {
        uint32_t u = (uint32_t)(rnd(&s) & 0x7effffffu);
        float f, g;
        memcpy(&f, &u, 4);
        g = nextafterf(f, INFINITY);
        halfway_cases(((long double)f + (long double)g) / 2);
    }
}

Test(read, edges)
{
    static const char *const cases[] = {
        /* zeros and signs */
        "0.0", "-0.0", "0e0", "-0e-0", "0e999999999999999999", "-0.000e-99999", "0.000000000",
        /* leading zeros after the point */
        "0.000000000000000000000000000000000000000000001401298464324817",
        "0.00000000000000000000000000000000000000001175494350822287507968736537222245677819",
        /* double's extremes */
        "1.7976931348623157e308", "1.7976931348623158e308", "1.797693134862315807e308",
        "1.7976931348623159e308", "1.8e308", "1e309", "-1e309", "1e999999999999999999999",
        "2.2250738585072014e-308", "2.2250738585072011e-308", "2.2250738585072012e-308",
        "4.9406564584124654e-324", "4.9e-324", "2.4703282292062328e-324",
        "2.4703282292062327e-324", "2.4703282292062327208e-324", "1e-324", "1e-400",
        "-1e-99999999999999999999",
        /* float32's extremes, as doubles */
        "3.4028234663852886e38", "3.40282356779733661637539395458142568448e38",
        "1.1754943508222875e-38", "1.401298464324817e-45", "7.006492321624085e-46",
        /* the Clinger bounds */
        "9007199254740992.0", "9007199254740993.0", "9007199254740993e0", "1e22", "1e23",
        "123456789e22", "123456789e-22", "1e-22", "1e-23", "4.35e-22", "8.1e22",
        "9007199254740992e22", "9007199254740992e-22", "9007199254740993e-22",
        /* historic strtod trouble */
        "2.2250738585072011e-308", "0.1", "0.3", "1.1", "3.14159265358979323846264338327950288",
        "7.038531e-26", "9214843084008499.0", "30078505129381147446200.0",
        "1777820000000000000001.0", "0.500000000000000166533453693773481063544750213623046875",
        "3.518437208883201171875e13", "62.5364939768271845828",
        "8.10109172351e-10", "1.00000005960464477550", "1.0000000596046447755e0",
        "7.7071415122410133e-292", "1.8254370980144905e-281", "5e-324", "1e-45",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_as_strtod(cases[i]);
}

/* JSON's grammar, as jansson applies it: what is no number is refused (NULL), or read only up
 * to where it stops being one (the scanner then finds no ',' or ']' there). */
Test(read, grammar)
{
    static const char *const bad[] = {"-",    "+1",   "01",  "-01", "00",  "1.",   ".5",
                                      "1e",   "1e+",  "1e-", "--1", "-.5", "1.e5", "0x10",
                                      "-a",   "e5",   "Infinity",  "NaN", "1E",  "-0.", "- 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[32];
        double v;
        int is_int;
        size_t n = (size_t)snprintf(buf, sizeof buf, "%s]", bad[i]);
        const char *e = nd_json_read_number(buf, buf + n, &v, &is_int);
        cr_assert(!e || e < buf + n - 1, "%s", bad[i]);
    }
    /* a number at the very end of the input is incomplete (an array always closes after it) */
    double v;
    int is_int;
    cr_assert_null(nd_json_read_number("12", (const char *)"12" + 2, &v, &is_int));
    cr_assert_null(nd_json_read_number("1.5", (const char *)"1.5" + 3, &v, &is_int));
    /* eight fraction digits that end the text exactly (the eight-digit step once read a byte
     * past them; fuzz_json_tensor found it): an exact-size buffer, for AddressSanitizer */
    static const char *const tails[] = {"0.12345678", "-1.87654321", "3.1415926535897932"};
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        size_t n = strlen(tails[i]);
        char *t = malloc(n);
        memcpy(t, tails[i], n);
        cr_assert_null(nd_json_read_number(t, t + n, &v, &is_int), "%s", tails[i]);
        free(t);
    }
}

/* Integers are jansson's: int64 only, rounded to odd beyond 2^53 (one rounding later), -0 is 0. */
Test(read, integers)
{
    uint64_t s = rng_init();
    char t[40];
    for (int i = 0; i < 300000; i++) {
        int64_t v = (int64_t)(rnd(&s) >> (rnd(&s) % 64));
        if ((rnd(&s) & 1) && v != INT64_MIN)
            v = -v;
        int n = snprintf(t, sizeof t, "%lld]", (long long)v);
        double got;
        int is_int = 0;
        const char *end = nd_json_read_number(t, t + n, &got, &is_int);
        cr_assert_eq(end, t + n - 1, "%s", t);
        cr_assert_eq(is_int, 1);
        /* exact, or the odd one of the two doubles around v */
        long double lv = (long double)v, lg = (long double)got;
        if (lg != lv) {
            cr_assert(f64_bits(got) & 1, "%s -> %a is not odd", t, got);
            double other = nextafter(got, lg < lv ? INFINITY : -INFINITY);
            cr_assert((lg < lv) == (lv < (long double)other), "%s -> %a: not a neighbour", t, got);
        }
    }
    static const struct {
        const char *text;
        int ok;
    } cases[] = {{"9223372036854775807", 1},  {"-9223372036854775808", 1},
                 {"9223372036854775808", 0},  {"-9223372036854775809", 0},
                 {"18446744073709551616", 0}, {"100000000000000000000", 0},
                 {"-0", 1},                   {"0", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = snprintf(t, sizeof t, "%s,", cases[i].text);
        double got = 1;
        int is_int;
        const char *end = nd_json_read_number(t, t + n, &got, &is_int);
        cr_assert_eq(end != NULL, cases[i].ok, "%s", cases[i].text);
        if (!strcmp(cases[i].text, "-0"))
            cr_assert(got == 0 && !signbit(got), "-0 is the integer 0");
    }
    /* 2^60 + 2^36 + 1 lies just above a float tie: rounded to odd, it still rounds up to float */
    double got;
    int is_int;
    nd_json_read_number("1152921573326323713]", (const char *)"1152921573326323713]" + 20, &got,
                        &is_int);
    uint32_t fb;
    float f = (float)got;
    memcpy(&fb, &f, 4);
    cr_assert_eq(fb, 0x5d800001u);
}

/* ======================================================================== writing */

/* The significant digits and exponent of a decimal text: value = *digits * 10^*exp10. */
static int decimal_parts(const char *t, uint64_t *digits, int *exp10)
{
    uint64_t d = 0;
    int e = 0, nd = 0, point = 0;
    for (; *t && *t != 'e'; t++) {
        if (*t == '-')
            continue;
        if (*t == '.') {
            point = 1;
            continue;
        }
        if (d == 0 && *t == '0') {
            if (point)
                e--;
            continue;
        }
        d = d * 10 + (uint64_t)(*t - '0');
        nd++;
        if (point)
            e--;
    }
    if (*t == 'e')
        e += atoi(t + 1);
    while (d && d % 10 == 0) {
        d /= 10;
        e++;
        nd--;
    }
    *digits = d;
    *exp10 = e;
    return nd;
}

/* Whether digits * 10^exp10 reads back (strtod, then float) as the float32 with these bits. */
static int f32_reads_back(uint64_t digits, int exp10, uint32_t bits)
{
    char t[48];
    snprintf(t, sizeof t, "%llue%d", (unsigned long long)digits, exp10);
    float f = (float)strtod(t, NULL);
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == (bits & 0x7fffffffu);
}

/*
 * Checks text, written for the finite float32 with these bits: it reads back as the same float32,
 * no decimal with fewer digits does (the nearest ones on either side, with one digit less, stand
 * for all of them: if one of fewer digits fitted, the interval would hold one of those), and it
 * has printf's "%.9g" layout. Returns the number of significant digits.
 */
static int check_f32_text(const char *text, uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    float back = (float)strtod(text, NULL);
    cr_assert(back == f && signbit(back) == signbit(f), "0x%08x: \"%s\" reads back as %a, not %a",
              bits, text, (double)back, (double)f);
    uint64_t digits;
    int exp10;
    int nd = decimal_parts(text, &digits, &exp10);
    cr_assert(nd >= 1 && nd <= 9, "0x%08x: \"%s\"", bits, text);
    if (nd > 1) {
        uint64_t lo = digits / 10;
        cr_assert(!(lo && f32_reads_back(lo, exp10 + 1, bits)),
                  "0x%08x: \"%s\" is not the shortest: %llue%d", bits, text,
                  (unsigned long long)lo, exp10 + 1);
        cr_assert(!f32_reads_back(lo + 1, exp10 + 1, bits),
                  "0x%08x: \"%s\" is not the shortest: %llue%d", bits, text,
                  (unsigned long long)lo + 1, exp10 + 1);
    }
    /* layout: %.9g's (fixed for leading-digit exponents -4..8, else d.ddde+XX), which is
     * "%.<nd>g" except for integers of nd < 9 digits that %.<nd>g would write as d.ddde+XX */
    const int x = exp10 + nd - 1;
    char want[48];
    if (x >= nd && x <= 8)
        snprintf(want, sizeof want, "%s%llu%0*d", signbit(f) ? "-" : "",
                 (unsigned long long)digits, exp10, 0);
    else
        snprintf(want, sizeof want, "%.*g", nd,
                 (signbit(f) ? -1.0 : 1.0) * (double)digits * pow(10, exp10));
    cr_assert_str_eq(text, want, "0x%08x: layout", bits);
    cr_assert_leq(strlen(text), ND_JSON_F32_MAX);
    return nd;
}

static const char *put(float f, char *buf)
{
    char *e = nd_json_put_f32(buf, f);
    *e = '\0';
    return buf;
}

Test(write, special_values)
{
    char buf[32];
    cr_assert_str_eq(put(0.0f, buf), "0");
    cr_assert_str_eq(put(-0.0f, buf), "-0.0");
    cr_assert_str_eq(put(INFINITY, buf), "null");
    cr_assert_str_eq(put(-INFINITY, buf), "null");
    cr_assert_str_eq(put(NAN, buf), "null");
    cr_assert_str_eq(put(0.1f, buf), "0.1");
    cr_assert_str_eq(put(1.0f, buf), "1");
    cr_assert_str_eq(put(-2.5f, buf), "-2.5");
    cr_assert_str_eq(put(100.0f, buf), "100");
    cr_assert_str_eq(put(123456792.0f, buf), "123456790");
    cr_assert_str_eq(put(1e9f, buf), "1e+09");
    cr_assert_str_eq(put(0.0001f, buf), "0.0001");
    cr_assert_str_eq(put(0.00001f, buf), "1e-05");
    cr_assert_str_eq(put(1.5e-5f, buf), "1.5e-05");
    cr_assert_str_eq(put(FLT_MAX, buf), "3.4028235e+38");
    cr_assert_str_eq(put(FLT_MIN, buf), "1.1754944e-38");
    cr_assert_str_eq(put(1e-45f, buf), "1e-45");
    cr_assert_str_eq(put(-FLT_TRUE_MIN * 3, buf), "-4e-45");
    cr_assert_str_eq(put(16777216.0f, buf), "16777216");
    cr_assert_str_eq(put(0.3f, buf), "0.3");
    cr_assert_str_eq(put(2.0f / 3.0f, buf), "0.6666667");
    /* the pair where reading through double (strtod, then float) changes the shortest: the
     * shortest for a reader that rounds once, "7.038531e-26" for 0x15ae43fd, reads back here as
     * 0x15ae43fe, whose own shortest it becomes */
    const uint32_t pair[2] = {0x15ae43fdu, 0x95ae43feu};
    const char *const want[2] = {"7.0385307e-26", "-7.038531e-26"};
    for (int i = 0; i < 2; i++) {
        float f;
        memcpy(&f, &pair[i], 4);
        cr_assert_str_eq(put(f, buf), want[i]);
        check_f32_text(buf, pair[i]);
    }
}

/* Powers of two (where the lower half of the rounding interval is narrower), of ten, integers */
Test(write, powers_and_integers)
{
    char buf[32];
    for (int e = -149; e <= 127; e++) {
        float f = ldexpf(1.0f, e);
        uint32_t u;
        memcpy(&u, &f, 4);
        check_f32_text(put(f, buf), u);
        f = -f;
        memcpy(&u, &f, 4);
        check_f32_text(put(f, buf), u);
    }
    for (int e = -45; e <= 38; e++) {
        float f = (float)pow(10, e);
        uint32_t u;
        memcpy(&u, &f, 4);
        if (f != 0 && isfinite(f))
            check_f32_text(put(f, buf), u);
    }
    for (int i = 1; i < 200000; i++) {
        float f = (float)i * 7;
        uint32_t u;
        memcpy(&u, &f, 4);
        check_f32_text(put(f, buf), u);
    }
}

/* A large random sample of all float32 patterns: round trip, shortest, layout, and the nearest
 * of the shortest (printf's correctly rounded digits, whenever those read back). */
Test(write, random_float32)
{
    uint64_t s = rng_init();
    char buf[32], ref[48];
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)rnd(&s);
        if (i % 2)
            u = (u & 0x807fffffu) | (uint32_t)(100 + rnd(&s) % 60) << 23; /* ordinary sizes */
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f) || f == 0)
            continue;
        put(f, buf);
        int nd = check_f32_text(buf, u);
        if (i % 8 == 0) {
            snprintf(ref, sizeof ref, "%.*e", nd - 1, (double)f);
            if ((float)strtod(ref, NULL) == f)
                cr_assert_eq(strtod(buf, NULL), strtod(ref, NULL),
                             "0x%08x: \"%s\" is not the nearest %d-digit decimal \"%s\"", u, buf,
                             nd, ref);
        }
    }
}

/* nd_json_put_numbers writes float32 through the writer, comma separated. */
Test(write, numbers_list)
{
    const float v[5] = {0.5f, -0.0f, INFINITY, 1e-45f, 3.0f};
    char buf[5 * ND_JSON_NUMBER_MAX + 1];
    char *e = nd_json_put_numbers(buf, ND_FLOAT32, v, 5);
    *e = '\0';
    cr_assert_str_eq(buf, "0.5,-0.0,null,1e-45,3");
}

/* Whether put_f32s's eight-at-a-time path (json_num.c) hands the batch holding this pattern to
 * put_f32: zero, subnormal, infinity, NaN, a power of two, a small integer, the hand-written pair.
 * Only for coverage: the tests below replace such lanes so that the others take the vector path. */
static int vector_special(uint32_t u)
{
    const uint32_t m = u & 0x7fffffu, e = (u >> 23) & 0xffu, c = m | 1u << 23;
    if (e == 0 || e == 255 || m == 0 || (u & 0x7fffffffu) - 0x15ae43fdu < 2)
        return 1;
    return e >= 127 && e <= 150 && (c & ((1u << (150 - e)) - 1)) == 0;
}

/* nd_json_put_f32s(v, n) must be nd_json_put_f32 of each, comma separated, within n * 16 bytes
 * (beyond 8 numbers a buffer of exactly that size, for AddressSanitizer; up to 8, as the
 * exhaustive sweep passes them, on the stack). Returns 0 or -1 (message in msg). */
static int check_f32s(const uint32_t *v, int n, char *msg, size_t size)
{
    char got_8[8 * (ND_JSON_F32_MAX + 1)], want_8[8 * 32];
    const int heap = n > 8;
    char *got = heap ? malloc((size_t)n * (ND_JSON_F32_MAX + 1)) : got_8;
    char *want = heap ? malloc((size_t)n * 32) : want_8;
    char *e = nd_json_put_f32s(got, v, n), *w = want;
    for (int i = 0; i < n; i++) {
        float f;
        memcpy(&f, &v[i], 4);
        if (i)
            *w++ = ',';
        w = nd_json_put_f32(w, f);
    }
    int rc = 0;
    if (e - got != w - want || memcmp(got, want, (size_t)(w - want))) {
        size_t k = 0;
        while (k < (size_t)(e - got) && k < (size_t)(w - want) && got[k] == want[k])
            k++;
        snprintf(msg, size, "%d numbers: \"%.*s\" where one at a time gives \"%.*s\"", n,
                 (int)((size_t)(e - got) - k < 24 ? (size_t)(e - got) - k : 24), got + k,
                 (int)((size_t)(w - want) - k < 24 ? (size_t)(w - want) - k : 24), want + k);
        rc = -1;
    }
    if (heap) {
        free(got);
        free(want);
    }
    return rc;
}

/* Arrays come out as the numbers one at a time would: random lengths and patterns, ordinary
 * values (the vector path where the CPU has one), and some special lanes among them. */
Test(write, arrays_as_one_at_a_time)
{
    uint64_t s = rng_init();
    static uint32_t v[3000];
    char msg[256];
    for (int iter = 0; iter < 20000; iter++) {
        const int n = iter < 100 ? iter + 1 : 1 + (int)(rnd(&s) % 3000);
        const int mode = iter % 5;
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)rnd(&s);
            if (mode == 1 || (mode == 4 && rnd(&s) % 64)) /* ordinary sizes */
                u = (u & 0x807fffffu) | (uint32_t)(100 + rnd(&s) % 60) << 23;
            else if (mode == 2) /* every exponent */
                u = (u & 0x807fffffu) | (uint32_t)(1 + rnd(&s) % 254) << 23;
            else if (mode == 3) { /* activations */
                float f = (float)((double)(int64_t)rnd(&s) * 0x1p-63 * 4);
                memcpy(&u, &f, 4);
            } else if (mode == 4) { /* a special one now and then */
                static const uint32_t sp[] = {0, 0x80000000u, 0x7f800000u, 0x7fc00000u,
                                              0x3f800000u, 0x40400000u, 0x15ae43fdu, 0x95ae43feu,
                                              1, 0x807fffffu, 0x4b7fffffu};
                u = sp[rnd(&s) % (sizeof sp / sizeof sp[0])];
            }
            v[i] = u;
        }
        if (check_f32s(v, n, msg, sizeof msg))
            cr_assert_fail("seed %llu: %s", (unsigned long long)seed0, msg);
    }
}

/* Every float16 and bfloat16 pattern: the table's text reads back (the parser's own rounding),
 * is the shortest, and is laid out as float32 text is. */
Test(write, every_16_bit_value_shortest)
{
    for (int d = 0; d < 2; d++) {
        const nd_dtype dt = d ? ND_BFLOAT16 : ND_FLOAT16;
        for (uint32_t h = 0; h < 65536; h++) {
            uint16_t x = (uint16_t)h;
            char buf[ND_JSON_NUMBER_MAX + 1];
            char *e = nd_json_put_numbers(buf, dt, &x, 1);
            *e = '\0';
            float v = dt == ND_FLOAT16 ? nd_half_to_float(x) : nd_bf16_to_float(x);
            if (!isfinite(v)) {
                cr_assert_str_eq(buf, "null");
                continue;
            }
            if (v == 0) {
                cr_assert_str_eq(buf, signbit(v) ? "-0.0" : "0");
                continue;
            }
            uint16_t back = 0;
            cr_assert_eq(nd_store_f64(dt, &back, 0, strtod(buf, NULL)), 0);
            cr_assert_eq(back, x, "%s 0x%04x: \"%s\" reads back as 0x%04x", nd_dtype_name(dt), h,
                         buf, back);
            uint64_t digits;
            int exp10;
            int nd = decimal_parts(buf, &digits, &exp10);
            if (nd > 1) {
                for (uint64_t c = digits / 10; c <= digits / 10 + 1; c++) {
                    char t[48];
                    if (!c)
                        continue;
                    snprintf(t, sizeof t, "%llue%d", (unsigned long long)c, exp10 + 1);
                    uint16_t b2 = 0;
                    int out = nd_store_f64(dt, &b2, 0, strtod(t, NULL));
                    cr_assert(out != 0 || b2 != (x & 0x7fff),
                              "%s 0x%04x: \"%s\" is not the shortest (%s)", nd_dtype_name(dt), h,
                              buf, t);
                }
            }
            /* the same layout as float32 text of the same digits */
            char want[32];
            char *w = nd_json_put_decimal(want, signbit(v) != 0, digits, exp10);
            *w = '\0';
            cr_assert_str_eq(buf, want);
        }
    }
}

/* ======================================================================== exhaustive */

typedef struct sweep {
    uint64_t from, to; /* patterns [from, to) */
    uint64_t checked, failures;
    uint32_t first_failure;
    uint64_t batches, batch_failures; /* nd_json_put_f32s, eight patterns at a time */
    uint32_t first_batch_failure;
} sweep;

/* "<c>e<x>]" at p (c > 0), without printf: the sweep writes two per pattern. */
static size_t probe_text(char *p, uint64_t c, int x)
{
    char tmp[24];
    size_t n = 0, k = 0;
    do
        tmp[k++] = (char)('0' + c % 10);
    while ((c /= 10));
    while (k)
        p[n++] = tmp[--k];
    p[n++] = 'e';
    if (x < 0) {
        p[n++] = '-';
        x = -x;
    }
    do
        tmp[k++] = (char)('0' + x % 10);
    while ((x /= 10));
    while (k)
        p[n++] = tmp[--k];
    p[n++] = ']';
    return n;
}

/* Round trip, shortness and length for each pattern; failures counted (the first one kept) so
 * that a run reports them all at once. Reads with strtod for the round trip and with the reader
 * (itself checked against strtod above) for the shortness probes. Then the patterns eight at a
 * time through nd_json_put_f32s, which must give the same text; where a batch holds a pattern its
 * vector path leaves to put_f32, once more with those replaced by 1.5, so that every other
 * pattern is written by the vector path too (where the CPU has it). */
static void *sweep_run(void *arg)
{
    sweep *w = arg;
    char buf[32];
    for (uint64_t b = w->from; b < w->to; b++) {
        const uint32_t u = (uint32_t)b;
        float f;
        memcpy(&f, &u, 4);
        if ((b & 7) == 0 && b + 8 <= w->to) {
            uint32_t v[8];
            int special = 0;
            char msg[256];
            for (int i = 0; i < 8; i++) {
                v[i] = (uint32_t)(b + (uint64_t)i);
                special |= vector_special(v[i]);
            }
            int bad = check_f32s(v, 8, msg, sizeof msg);
            if (special) {
                for (int i = 0; i < 8; i++)
                    if (vector_special(v[i]))
                        v[i] = 0x3fc00000u;
                bad |= check_f32s(v, 8, msg, sizeof msg);
            }
            w->batches++;
            if (bad && !w->batch_failures++)
                w->first_batch_failure = u;
        }
        if ((u & 0x7f800000u) == 0x7f800000u || (u & 0x7fffffffu) == 0)
            continue;
        char *e = nd_json_put_f32(buf, f);
        const size_t len = (size_t)(e - buf);
        *e = '\0';
        int bad = len > ND_JSON_F32_MAX;
        float back = (float)strtod(buf, NULL);
        bad |= memcmp(&back, &f, 4) != 0;
        uint64_t digits;
        int exp10;
        int nd = decimal_parts(buf, &digits, &exp10);
        bad |= nd < 1 || nd > 9;
        if (nd > 1) {
            for (uint64_t c = digits / 10; c <= digits / 10 + 1; c++) {
                char t[48];
                double v = 0;
                int is_int;
                if (!c)
                    continue;
                size_t n = probe_text(t, c, exp10 + 1);
                nd_json_read_number(t, t + n, &v, &is_int);
                float g = (float)v;
                uint32_t gu;
                memcpy(&gu, &g, 4);
                bad |= gu == (u & 0x7fffffffu);
            }
        }
        w->checked++;
        if (bad && !w->failures++)
            w->first_failure = u;
    }
    return NULL;
}

Test(exhaustive, all_float32)
{
    if (!getenv("ND_F32_EXHAUSTIVE"))
        cr_skip_test("all 2^32 float32 patterns: make test-f32-exhaustive (ND_F32_EXHAUSTIVE=1)");
    long nthreads = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("ND_THREADS");
    if (env)
        nthreads = atol(env);
    if (nthreads < 1 || nthreads > 256)
        nthreads = 1;
    /* slices interleaved in chunks, so that threads share the slow (subnormal) ranges */
    const uint64_t chunks = 4096, per = (1ull << 32) / chunks;
    sweep *w = calloc(chunks, sizeof *w);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint64_t c = 0; c < chunks; c += (uint64_t)nthreads) {
        long k = 0;
        for (; k < nthreads && c + (uint64_t)k < chunks; k++) {
            w[c + k].from = (c + (uint64_t)k) * per;
            w[c + k].to = w[c + k].from + per;
            pthread_create(&th[k], NULL, sweep_run, &w[c + k]);
        }
        for (long j = 0; j < k; j++)
            pthread_join(th[j], NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t checked = 0, failures = 0, batches = 0, batch_failures = 0;
    uint32_t first = 0, first_batch = 0;
    for (uint64_t c = 0; c < chunks; c++) {
        checked += w[c].checked;
        if (w[c].failures && !failures)
            first = w[c].first_failure;
        failures += w[c].failures;
        batches += w[c].batches;
        if (w[c].batch_failures && !batch_failures)
            first_batch = w[c].first_batch_failure;
        batch_failures += w[c].batch_failures;
    }
    printf("exhaustive float32: %llu finite nonzero patterns checked, %llu failures; %llu batches "
           "of 8 through nd_json_put_f32s, %llu failures; %.0f s on %ld threads\n",
           (unsigned long long)checked, (unsigned long long)failures, (unsigned long long)batches,
           (unsigned long long)batch_failures,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec), nthreads);
    fflush(stdout);
    /* all but the two zeros and the 2^24 infinities and NaNs */
    cr_assert_eq(checked, (1ull << 32) - (1ull << 24) - 2, "patterns");
    cr_assert_eq(failures, 0, "first failure: 0x%08x", first);
    cr_assert_eq(batches, 1ull << 29, "batches");
    cr_assert_eq(batch_failures, 0, "first failing batch: 0x%08x..", first_batch);
    free(w);
    free(th);
}
