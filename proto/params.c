/*
 * params.c - the wire forms of a parameter set (PUT /v1/params/{name}).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

static const char *const names[ND_PARAM_TENSORS] = {"gamma", "beta", "weight", "alpha"};

static int tensor_index(const char *key)
{
    for (int k = 0; k < ND_PARAM_TENSORS; k++)
        if (!strcmp(key, names[k]))
            return k;
    return -1;
}

void nd_params_body_free(nd_params_body *pb)
{
    free(pb->owned);
    memset(pb, 0, sizeof *pb);
}

int nd_proto_parse_params_json(const char *body, size_t len, nd_params_body *out, nd_error *err)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return nd_proto_fail(err, 400, "invalid JSON at line %d column %d: %s", jerr.line,
                             jerr.column, jerr.text);
    int st = 0;
    const json_t *arrays[ND_PARAM_TENSORS] = {0};
    if (!json_is_object(root)) {
        st = nd_proto_fail(err, 400, "the body must be a JSON object");
        goto done;
    }
    const char *key;
    json_t *v;
    out->dtype = ND_FLOAT32;
    json_object_foreach(root, key, v)
    {
        int k = tensor_index(key);
        if (!strcmp(key, "dtype")) {
            if (!json_is_string(v) || nd_dtype_from_name(json_string_value(v), &out->dtype)) {
                st = nd_proto_fail(err, 400, "dtype: expected \"float32\", \"float16\" or "
                                             "\"bfloat16\"");
                goto done;
            }
        } else if (k >= 0) {
            if (!json_is_array(v) || json_array_size(v) == 0) {
                st = nd_proto_fail(err, 400, "%s: expected a non-empty array of numbers", key);
                goto done;
            }
            arrays[k] = v;
        } else {
            char q[64];
            nd_proto_quote(q, sizeof q, key, strlen(key));
            st = nd_proto_fail(err, 400, "unknown field \"%s\"; a parameter set has dtype, "
                                         "gamma, beta, weight, alpha", q);
            goto done;
        }
    }
    size_t esz = nd_dtype_size(out->dtype), total = 0;
    for (int k = 0; k < ND_PARAM_TENSORS; k++)
        if (arrays[k])
            total += json_array_size(arrays[k]) * esz;
    if (total == 0) {
        st = nd_proto_fail(err, 400, "a parameter set needs at least one of gamma, beta, weight, "
                                     "alpha");
        goto done;
    }
    char *p = malloc(total);
    if (!p) {
        st = nd_proto_fail(err, 500, "out of memory");
        goto done;
    }
    out->owned = p;
    for (int k = 0; k < ND_PARAM_TENSORS; k++) {
        if (!arrays[k])
            continue;
        size_t n = json_array_size(arrays[k]);
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(arrays[k], i);
            if (!json_is_number(e)) {
                st = nd_proto_fail(err, 400, "%s[%zu]: expected a number", names[k], i);
                goto done;
            }
            double d = json_number_value(e);
            if (nd_store_f64(out->dtype, p, (int64_t)i, d) < 0) {
                st = nd_proto_fail(err, 400, "%s[%zu]=%g is out of range for %s", names[k], i, d,
                                   nd_dtype_name(out->dtype));
                goto done;
            }
        }
        out->tensor[k] = p;
        out->count[k] = (int64_t)n;
        p += n * esz;
    }
done:
    json_decref(root);
    if (st)
        nd_params_body_free(out);
    return st;
}

int nd_proto_parse_params_binary(const nd_kv *query, size_t nquery, const void *body, size_t len,
                                 nd_params_body *out, nd_error *err)
{
    memset(out, 0, sizeof *out);
    out->dtype = ND_FLOAT32;
    for (size_t i = 0; i < nquery; i++) {
        const char *key = query[i].key, *val = query[i].value;
        int k = tensor_index(key);
        if (!strcmp(key, "dtype")) {
            if (nd_dtype_from_name(val, &out->dtype))
                return nd_proto_fail(err, 400, "dtype: expected float32, float16 or bfloat16");
        } else if (k >= 0) {
            char *end;
            long long n = strtoll(val, &end, 10);
            if (end == val || *end || n < 1 || n > (INT64_C(1) << 40))
                return nd_proto_fail(err, 400, "%s=%s: expected the tensor's element count",
                                     key, val);
            out->count[k] = n;
        } else {
            char q[64];
            nd_proto_quote(q, sizeof q, key, strlen(key));
            return nd_proto_fail(err, 400, "unknown query parameter \"%s\"; expected dtype and "
                                           "element counts gamma, beta, weight, alpha", q);
        }
    }
    size_t esz = nd_dtype_size(out->dtype), want = 0;
    for (int k = 0; k < ND_PARAM_TENSORS; k++)
        want += (size_t)out->count[k] * esz;
    if (want == 0)
        return nd_proto_fail(err, 400, "name at least one tensor and its element count in the "
                                       "query, e.g. ?dtype=float16&gamma=4096&beta=4096");
    if (len != want)
        return nd_proto_fail(err, 400, "body has %zu bytes, the query describes %zu", len, want);
    const char *p = body;
    for (int k = 0; k < ND_PARAM_TENSORS; k++)
        if (out->count[k]) {
            out->tensor[k] = p;
            p += (size_t)out->count[k] * esz;
        }
    return 0;
}
