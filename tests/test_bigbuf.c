/* test_bigbuf.c - the request buffer cache: contents survive realloc, freed mappings are kept up
 * to the cap and handed out again, trim and a smaller cap give them back. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../server/bigbuf.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((i * 2654435761u + seed) >> 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)((i * 2654435761u + seed) >> 7))
            return 0;
    return 1;
}

static void reset(void)
{
    nd_bigbuf_set_cap(0);
    nd_bigbuf_trim();
}

TestSuite(bigbuf, .init = reset, .fini = reset);

Test(bigbuf, sizes_are_usable_and_aligned)
{
    static const size_t sizes[] = {0, 1, 100, 4096, BIGBUF_MIN - 1, BIGBUF_MIN, BIGBUF_MIN + 1,
                                   (size_t)1 << 20, ((size_t)5 << 20) + 3, (size_t)40 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = nd_bigbuf_alloc(sizes[i]);
        cr_assert_not_null(p, "%zu bytes", sizes[i]);
        cr_assert_eq((uintptr_t)p % 16, 0, "%zu bytes at %p", sizes[i], (void *)p);
        if (sizes[i] >= BIGBUF_MIN)
            cr_assert_eq((uintptr_t)p % 64, 0);
        fill(p, sizes[i], (unsigned)i);
        cr_assert(same(p, sizes[i], (unsigned)i));
        nd_bigbuf_free(p);
    }
    nd_bigbuf_free(NULL);
}

/* realloc keeps the contents across every kind of move: small to small, small to mapped, mapped
 * to a larger mapping, in place, and mapped back to small. */
Test(bigbuf, realloc_keeps_the_contents)
{
    nd_bigbuf_set_cap((size_t)64 << 20);
    static const size_t steps[] = {10, 5000, 200000, 190000, 3000000, 100, 7};
    unsigned char *p = nd_bigbuf_realloc(NULL, steps[0]);
    fill(p, steps[0], 3);
    size_t have = steps[0];
    for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
        p = nd_bigbuf_realloc(p, steps[i]);
        cr_assert_not_null(p);
        size_t kept = have < steps[i] ? have : steps[i];
        cr_assert(same(p, kept, 3), "step %zu: %zu -> %zu bytes", i, have, steps[i]);
        fill(p, steps[i], 3);
        have = steps[i];
    }
    nd_bigbuf_free(p);
}

Test(bigbuf, freed_mappings_are_cached_up_to_the_cap_and_reused)
{
    const size_t n = (size_t)512 << 10; /* a 64x4096 float16 body */
    void *a = nd_bigbuf_alloc(n), *b = nd_bigbuf_alloc(n);
    nd_bigbuf_free(a); /* cap 0: unmapped */
    cr_assert_eq(nd_bigbuf_cached(), 0);

    nd_bigbuf_set_cap(n * 3 / 2 + 4096 * 4); /* room for one mapping of this size, not two */
    void *c = nd_bigbuf_alloc(n);
    nd_bigbuf_free(b);
    size_t one = nd_bigbuf_cached();
    cr_assert(one >= n && one <= n + n / 4 + 4096, "cached %zu for a %zu-byte buffer", one, n);
    nd_bigbuf_free(c);
    cr_assert_eq(nd_bigbuf_cached(), one, "the cap let a second one in");

    /* the next buffer of about that size is the cached one, its contents as left */
    memset(b, 0xab, 64);
    void *d = nd_bigbuf_alloc(n + 1000); /* same class: 512 KiB + header rounds up to 640 KiB */
    cr_assert_eq(d, b, "a cached mapping of the same class was not reused");
    cr_assert_eq(nd_bigbuf_cached(), 0);
    /* a much larger request is not served from a smaller class */
    nd_bigbuf_free(d);
    void *e = nd_bigbuf_alloc(n * 2);
    cr_assert_neq(e, d);
    nd_bigbuf_free(e);
}

Test(bigbuf, trim_and_a_lower_cap_give_everything_back)
{
    nd_bigbuf_set_cap((size_t)256 << 20);
    void *p[20];
    for (int i = 0; i < 20; i++)
        p[i] = nd_bigbuf_alloc(((size_t)1 << 20) * (size_t)(1 + i % 5));
    for (int i = 0; i < 20; i++)
        nd_bigbuf_free(p[i]);
    cr_assert_geq(nd_bigbuf_cached(), (size_t)60 << 20);
    nd_bigbuf_set_cap((size_t)8 << 20);
    cr_assert_eq(nd_bigbuf_cached(), 0, "a lower cap than held should empty the cache");
    nd_bigbuf_set_cap((size_t)256 << 20);
    p[0] = nd_bigbuf_alloc((size_t)3 << 20);
    nd_bigbuf_free(p[0]);
    cr_assert_gt(nd_bigbuf_cached(), 0);
    nd_bigbuf_trim();
    cr_assert_eq(nd_bigbuf_cached(), 0);
}
