/*
 * json_oracle.h - the reference for the JSON tensor scanner (proto/json_tensor.c): the jansson
 * walk it replaced, kept as it was (json.c before issue 12), for differential tests. Used by
 * tests/test_json_tensor.c and fuzz/fuzz_json_tensor.c; header-only, every function static.
 *
 * oracle_load parses with jansson as the parsers did; oracle_check / oracle_fill / oracle_fill_flat
 * walk a json_t array with the old messages. What the scanner gives must match: the same status,
 * message and stored bits for every body.
 */
#ifndef ND_FUZZ_JSON_ORACLE_H
#define ND_FUZZ_JSON_ORACLE_H

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../proto/json_tensor.h"

static int oracle_load(const char *body, size_t len, json_t **root, nd_error *err)
{
    json_error_t jerr;
    *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root)
        return nd_proto_fail(err, 400, "invalid JSON at line %d, column %d: %s", jerr.line,
                             jerr.column, jerr.text);
    return 0;
}

static inline int oracle_number_value(const json_t *v, double *out)
{
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        double d = (double)i;
        if (i > ((json_int_t)1 << 53) || i < -((json_int_t)1 << 53)) {
            int exact = fabs(d) < 9223372036854775808.0 && (json_int_t)d == i;
            if (!exact) {
                uint64_t u;
                memcpy(&u, &d, sizeof u);
                if (!(u & 1)) {
                    int away = fabs(d) > 9223372036854775807.0 ||
                               (i > 0 ? (json_int_t)d > i : (json_int_t)d < i);
                    u = away ? u - 1 : u + 1;
                    memcpy(&d, &u, sizeof d);
                }
            }
        }
        *out = d;
        return 0;
    }
    return -1;
}

#define ORACLE_PATH_SIZE (64 + ND_MAX_DIMS * 24)

static int oracle_put_number(const json_t *v, nd_dtype dt, void *dst, int64_t i, const char *path,
                             nd_error *err)
{
    double d;
    if (oracle_number_value(v, &d) != 0)
        return nd_proto_fail(err, 400, "%s: expected a number, got %s", path,
                             nd_json_type_name(v));
    if (!isfinite(d) || nd_store_f64(dt, dst, i, d) != 0)
        return nd_proto_fail(err, 400, "%s=%g is out of range for %s", path, d,
                             nd_dtype_name(dt));
    return 0;
}

static int oracle_fill_flat(const json_t *arr, nd_dtype dt, void *dst, const char *name,
                            nd_error *err)
{
    const size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        double d;
        if (oracle_number_value(v, &d) == 0 && isfinite(d) &&
            nd_store_f64(dt, dst, (int64_t)i, d) == 0)
            continue;
        char path[ORACLE_PATH_SIZE];
        snprintf(path, sizeof path, "%.63s[%zu]", name, i);
        return oracle_put_number(v, dt, dst, (int64_t)i, path, err);
    }
    return 0;
}

static int oracle_fill_nested(const json_t *arr, const int64_t *shape, int ndim, nd_dtype dt,
                              int depth, int64_t *pos, char *path, size_t plen, void *dst,
                              nd_error *err)
{
    const int64_t want = shape[depth];
    const size_t n = json_array_size(arr);
    const size_t psize = ORACLE_PATH_SIZE;
    if ((int64_t)n != want) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%s has %zu entries, shape %s needs %lld there", path, n,
                             s, (long long)want);
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(arr, i);
        if (depth + 1 < ndim) {
            size_t l = plen + (size_t)snprintf(path + plen, psize - plen, "[%zu]", i);
            if (!json_is_array(v)) {
                char s[ND_MAX_DIMS * 21 + 4];
                nd_shape_str(shape, ndim, s, sizeof s);
                return nd_proto_fail(err, 400,
                                     "%s: expected an array (shape %s nests %d deep), got %s",
                                     path, s, ndim, nd_json_type_name(v));
            }
            int rc = oracle_fill_nested(v, shape, ndim, dt, depth + 1, pos, path, l, dst, err);
            if (rc)
                return rc;
            path[plen] = '\0';
        } else if (!dst) {
            if (json_is_array(v)) {
                snprintf(path + plen, psize - plen, "[%zu]", i);
                return nd_proto_fail(err, 400, "%s: expected a number, got an array", path);
            }
        } else {
            double d;
            if (oracle_number_value(v, &d) == 0 && isfinite(d) &&
                nd_store_f64(dt, dst, *pos, d) == 0) {
                ++*pos;
                continue;
            }
            snprintf(path + plen, psize - plen, "[%zu]", i);
            return oracle_put_number(v, dt, dst, *pos, path, err);
        }
    }
    return 0;
}

static int oracle_is_nested(const json_t *arr)
{
    return json_is_array(json_array_get(arr, 0));
}

static int oracle_check(const json_t *arr, const int64_t *shape, int ndim, int64_t elems,
                        const char *name, nd_error *err)
{
    if (oracle_is_nested(arr)) {
        char path[ORACLE_PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return oracle_fill_nested(arr, shape, ndim, ND_FLOAT32, 0, &pos, path,
                                  plen < 64 ? (size_t)plen : 63, NULL, err);
    }
    if ((int64_t)json_array_size(arr) != elems) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%.63s has %zu numbers, shape %s needs %lld", name,
                             json_array_size(arr), s, (long long)elems);
    }
    return 0;
}

static int oracle_fill(const json_t *arr, const int64_t *shape, int ndim, nd_dtype dt, void *dst,
                       const char *name, nd_error *err)
{
    if (oracle_is_nested(arr)) {
        char path[ORACLE_PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return oracle_fill_nested(arr, shape, ndim, dt, 0, &pos, path,
                                  plen < 64 ? (size_t)plen : 63, dst, err);
    }
    return oracle_fill_flat(arr, dt, dst, name, err);
}

/* The entry counts along the first entries, as json.c inferred a shape (nd_json_tensor_dims). */
static int oracle_dims(const json_t *arr, int64_t *dims, int max)
{
    int n = 0;
    const json_t *cur = arr;
    while (n < max && json_is_array(cur)) {
        dims[n] = (int64_t)json_array_size(cur);
        if (dims[n++] == 0)
            break;
        cur = json_array_get(cur, 0);
    }
    return n;
}

#endif /* ND_FUZZ_JSON_ORACLE_H */
