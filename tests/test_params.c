/*
 * test_params.c - the parameter registry: registration, replacement, lookup, deletion, and the
 * lifetime rule (a set is freed, and detached from the engine, only when its last user lets go).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../server/params.h"

static int attached, detached;

static nd_status count_attach(nd_engine *e, nd_param_set *p, nd_error *err)
{
    attached++;
    return ND_OK;
}

static void count_detach(nd_engine *e, nd_param_set *p)
{
    detached++;
}

static const nd_engine_vt counting_vt = {
    .name = "counting", .param_attach = count_attach, .param_detach = count_detach};
static nd_engine counting = {.vt = &counting_vt};

static int put(nd_params *r, const char *name, const float *gamma, int64_t n)
{
    const void *t[ND_PARAM_COUNT] = {gamma, NULL, NULL, NULL};
    int64_t c[ND_PARAM_COUNT] = {n, 0, 0, 0};
    nd_error err;
    return nd_params_put(r, name, ND_FLOAT32, t, c, &err);
}

Test(params, a_registered_set_is_copied_and_found_by_name)
{
    attached = detached = 0;
    nd_params *r = nd_params_create(&counting);
    float g[3] = {1, 2, 3};
    cr_assert_eq(put(r, "ln.0", g, 3), 0);
    g[0] = 99; /* the registry holds its own copy */
    nd_param_set *p = nd_params_acquire(r, "ln.0");
    cr_assert_not_null(p);
    cr_assert_eq(((const float *)p->host[ND_PARAM_GAMMA])[0], 1.0f);
    cr_assert_eq(p->count[ND_PARAM_GAMMA], 3);
    cr_assert_null(p->host[ND_PARAM_BETA]);
    cr_assert_null(nd_params_acquire(r, "ln.1"));
    nd_params_release(r, p);
    char *list = nd_params_list_json(r);
    cr_assert(strstr(list, "\"name\":\"ln.0\"") && strstr(list, "\"gamma\":3"), "%s", list);
    free(list);
    cr_assert_eq(attached, 1);
    nd_params_destroy(r);
    cr_assert_eq(detached, 1);
}

Test(params, delete_waits_for_the_last_user)
{
    attached = detached = 0;
    nd_params *r = nd_params_create(&counting);
    float g[2] = {1, 2};
    cr_assert_eq(put(r, "w", g, 2), 0);
    nd_param_set *held = nd_params_acquire(r, "w");
    nd_error err;
    cr_assert_eq(nd_params_delete(r, "w", &err), 0);
    cr_assert_null(nd_params_acquire(r, "w"), "a deleted set is still found");
    cr_assert_eq(detached, 0, "freed while a request still held it");
    cr_assert_eq(((const float *)held->host[ND_PARAM_GAMMA])[1], 2.0f);
    nd_params_release(r, held);
    cr_assert_eq(detached, 1);
    cr_assert_eq(nd_params_delete(r, "w", &err), 404);
    nd_params_destroy(r);
}

Test(params, replacing_a_set_gives_a_new_generation_and_keeps_the_old_alive_for_its_users)
{
    attached = detached = 0;
    nd_params *r = nd_params_create(&counting);
    float a[2] = {1, 2}, b[2] = {3, 4};
    cr_assert_eq(put(r, "w", a, 2), 0);
    nd_param_set *old = nd_params_acquire(r, "w");
    cr_assert_eq(put(r, "w", b, 2), 0);
    nd_param_set *cur = nd_params_acquire(r, "w");
    cr_assert_neq(old->generation, cur->generation);
    cr_assert_eq(((const float *)cur->host[ND_PARAM_GAMMA])[0], 3.0f);
    cr_assert_eq(((const float *)old->host[ND_PARAM_GAMMA])[0], 1.0f);
    cr_assert_eq(detached, 0);
    nd_params_release(r, old);
    cr_assert_eq(detached, 1);
    nd_params_release(r, cur);
    nd_params_destroy(r);
    cr_assert_eq(detached, 2);
}

Test(params, invalid_names_and_empty_sets_are_refused)
{
    nd_params *r = nd_params_create(NULL);
    float g[1] = {1};
    nd_error err;
    const char *bad[] = {"", "a/b", "with space", "x?y"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(put(r, bad[i], g, 1), 400, "name \"%s\" accepted", bad[i]);
    char longname[100];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    cr_assert_eq(put(r, longname, g, 1), 400);
    const void *none[ND_PARAM_COUNT] = {0};
    int64_t zero[ND_PARAM_COUNT] = {0};
    cr_assert_eq(nd_params_put(r, "empty", ND_FLOAT32, none, zero, &err), 400);
    cr_assert(strstr(err.msg, "at least one"), "%s", err.msg);
    nd_params_destroy(r);
}

Test(params, limits_on_count_and_bytes)
{
    nd_params *r = nd_params_create(NULL);
    nd_params_set_limits(r, 2, 64); /* two sets, 64 bytes (16 float32) together */
    float g[20] = {0};
    const void *t[ND_PARAM_COUNT] = {g, NULL, NULL, NULL};
    int64_t c[ND_PARAM_COUNT] = {8, 0, 0, 0};
    nd_error err = {{0}};
    cr_assert_eq(nd_params_put(r, "a", ND_FLOAT32, t, c, &err), 0);
    c[0] = 4;
    cr_assert_eq(nd_params_put(r, "b", ND_FLOAT32, t, c, &err), 0);
    cr_assert_eq(nd_params_put(r, "c", ND_FLOAT32, t, c, &err), 507);
    cr_assert(strstr(err.msg, "max-param-sets"), "%s", err.msg);
    c[0] = 13; /* replacing a: 52 + 16 > 64 */
    cr_assert_eq(nd_params_put(r, "a", ND_FLOAT32, t, c, &err), 507);
    cr_assert(strstr(err.msg, "max-param-bytes"), "%s", err.msg);
    c[0] = 12; /* 48 + 16 = 64: fits, in place of the old a */
    cr_assert_eq(nd_params_put(r, "a", ND_FLOAT32, t, c, &err), 0, "%s", err.msg);
    c[0] = 17; /* alone over the limit */
    cr_assert_eq(nd_params_put(r, "d", ND_FLOAT32, t, c, &err), 413);
    cr_assert_eq(nd_params_delete(r, "b", &err), 0);
    c[0] = 4;
    cr_assert_eq(nd_params_put(r, "c", ND_FLOAT32, t, c, &err), 0, "%s", err.msg);
    nd_params_destroy(r);
}
