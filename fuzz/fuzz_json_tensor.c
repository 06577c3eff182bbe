/*
 * fuzz_json_tensor.c - libFuzzer differential target for the JSON tensor scanner
 * (proto/json_tensor.c) against the jansson walk it replaced (json_oracle.h).
 *
 * Input: one byte choosing the layout (/v1 or v2) and the dtype, then the body. Both readers must
 * agree: a body is valid for both or neither (then with jansson's message, word for word), every
 * site holds an array for both or the same non-array, and each array gives the same length, the
 * same first-entry counts, the same check and fill results (status, message, stored bits) for a
 * flat shape and for the shape its first entries suggest. Then the same bytes, read as float32
 * values, go through the number writer both ways: nd_json_put_f32s (eight at a time where the CPU
 * can) must write what nd_json_put_f32 writes one at a time. Any disagreement aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/json_num.h"
#include "json_oracle.h"

static void same(int r1, const nd_error *e1, int r2, const nd_error *e2)
{
    if (r1 != r2 || (r1 && strcmp(e1->msg, e2->msg)))
        abort();
}

static void compare_tensor(const nd_json_tensor *t, const json_t *arr, nd_dtype dt)
{
    if (!t || nd_json_tensor_len(t) != json_array_size(arr) ||
        nd_json_tensor_nested(t) != oracle_is_nested(arr))
        abort();
    int64_t d1[ND_MAX_DIMS + 1], d2[ND_MAX_DIMS + 1];
    int l1 = nd_json_tensor_dims(t, d1, ND_MAX_DIMS + 1);
    if (l1 != oracle_dims(arr, d2, ND_MAX_DIMS + 1) || memcmp(d1, d2, (size_t)l1 * sizeof *d1))
        abort();
    /* shapes: [len], and the first-entry counts (what json.c infers), capped in size */
    int64_t shapes[2][ND_MAX_DIMS];
    int ndims[2] = {1, l1 < ND_MAX_DIMS ? l1 : ND_MAX_DIMS};
    shapes[0][0] = d1[0];
    memcpy(shapes[1], d1, (size_t)ndims[1] * sizeof *d1);
    for (int k = 0; k < 2; k++) {
        int64_t elems = 1;
        int ok = 1;
        for (int i = 0; i < ndims[k]; i++) {
            if (shapes[k][i] < 1 || shapes[k][i] > 4096 || elems > 4096)
                ok = 0;
            elems *= shapes[k][i] < 1 ? 1 : shapes[k][i];
        }
        if (!ok || elems > 65536)
            continue;
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_tensor_check(t, shapes[k], ndims[k], elems, "data", &e1);
        int r2 = oracle_check(arr, shapes[k], ndims[k], elems, "data", &e2);
        same(r1, &e1, r2, &e2);
        if (r1)
            continue;
        size_t bytes = (size_t)elems * 4 + 4;
        char *b1 = calloc(1, bytes), *b2 = calloc(1, bytes);
        r1 = nd_json_tensor_fill(t, shapes[k], ndims[k], dt, b1, "data", &e1);
        r2 = oracle_fill(arr, shapes[k], ndims[k], dt, b2, "data", &e2);
        same(r1, &e1, r2, &e2);
        if (!r1 && memcmp(b1, b2, (size_t)elems * nd_dtype_size(dt)))
            abort();
        free(b1);
        free(b2);
    }
    if (json_array_size(arr) <= 65536) {
        size_t bytes = json_array_size(arr) * 4 + 4;
        char *b1 = calloc(1, bytes), *b2 = calloc(1, bytes);
        nd_error e1 = {{0}}, e2 = {{0}};
        int r1 = nd_json_tensor_fill_flat(t, dt, b1, "gamma", &e1);
        int r2 = oracle_fill_flat(arr, dt, b2, "gamma", &e2);
        same(r1, &e1, r2, &e2);
        if (!r1 && memcmp(b1, b2, json_array_size(arr) * nd_dtype_size(dt)))
            abort();
        free(b1);
        free(b2);
    }
}

/* A site's value both ways: an array read alike, or the same kind of non-array. */
static void compare_site(const nd_json_doc *doc, size_t site, const json_t *v, const json_t *o,
                         nd_dtype dt)
{
    const nd_json_tensor *t = nd_json_doc_tensor(doc, site, v);
    if (json_is_array(o)) {
        compare_tensor(t, o, dt);
        return;
    }
    if (t || !v != !o || (o && strcmp(nd_json_type_name(v), nd_json_type_name(o))))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const v1_names[] = {"data", "gamma", "beta", "weight", "alpha"};
    if (size < 1)
        return 0;
    const int v2 = data[0] & 1;
    const nd_dtype dt = (nd_dtype)((data[0] >> 1) % ND_DTYPE_COUNT);
    /* an exact-size copy so that a read past the body is caught */
    char *body = malloc(size - 1 ? size - 1 : 1);
    memcpy(body, data + 1, size - 1);

    nd_json_doc doc;
    json_t *oroot = NULL;
    nd_error e1 = {{0}}, e2 = {{0}};
    int r1 = nd_json_doc_load(&doc, v2 ? ND_JSON_V2 : ND_JSON_V1, body, size - 1, &e1);
    int r2 = oracle_load(body, size - 1, &oroot, &e2);
    same(r1, &e1, r2, &e2);
    if (r1 == 0 && json_is_object(oroot)) {
        if (!v2) {
            for (size_t k = 0; k < 5; k++)
                compare_site(&doc, k, json_object_get(doc.root, v1_names[k]),
                             json_object_get(oroot, v1_names[k]), dt);
        } else {
            const json_t *in = json_object_get(doc.root, "inputs");
            const json_t *oin = json_object_get(oroot, "inputs");
            for (size_t i = 0; i < json_array_size(oin); i++)
                compare_site(&doc, i, json_object_get(json_array_get(in, i), "data"),
                             json_object_get(json_array_get(oin, i), "data"), dt);
        }
    }
    nd_json_doc_free(&doc);
    json_decref(oroot);

    /* the writer: the body's bytes as float32 values, into an exact-size buffer */
    const size_t n = (size - 1) / 4;
    if (n) {
        char *got = malloc(n * (ND_JSON_F32_MAX + 1)), *want = malloc(n * 32), *w = want;
        const char *e = nd_json_put_f32s(got, body, (int64_t)n);
        for (size_t i = 0; i < n; i++) {
            float f;
            memcpy(&f, body + 4 * i, 4);
            if (i)
                *w++ = ',';
            w = nd_json_put_f32(w, f);
        }
        if (e - got != w - want || memcmp(got, want, (size_t)(w - want)))
            abort();
        free(got);
        free(want);
    }
    free(body);
    return 0;
}
