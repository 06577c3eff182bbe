/*
 * fuzz_v2.c - libFuzzer entry point for nd_v2_parse_infer and, on success, nd_v2_encode_infer.
 *
 * Input: byte 0 chooses the op; byte 1 how the Inference-Header-Content-Length header is made
 * (mode = byte 1 % 4), byte 2 a number for it; the rest is the body.
 *   0: no header (the body is all JSON)
 *   1: the body's length minus byte 2 (a binary region of up to 255 bytes: valid requests are
 *      easy to reach)
 *   2: byte 2 as a decimal (often past the body or inside the JSON)
 *   3: the first byte 2 % 24 bytes of the body as the header's text (its parser fuzzed), the
 *      rest as the body
 * A parsed request must point only into the body or its own block (a tensor named by a shared
 * memory region has no pointer yet: the server sets it); its answer must be JSON followed by
 * exactly the binary outputs' bytes, an output in shared memory naming its region instead of
 * carrying values.
 * The same body also goes, whole, to the CUDA shared memory register parser (400 with a message,
 * or a handle of at most 64 bytes) and to the base64 decoder, which accepts only canonical text:
 * encoding what it decoded must give the text back, padding aside.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/nd_v2.h"

/* [p, p + n) lies inside [lo, lo + len), or in none of it (the request's own block). */
static void check_inside_or_out(const void *p, size_t n, const void *body, size_t len)
{
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)body;
    if (a + n <= lo || a >= lo + len)
        return;
    if (a < lo || a + n > lo + len)
        abort();
}

static void check_b64(const uint8_t *data, size_t size)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned char out[96];
    long n = nd_b64_decode((const char *)data, size, out, sizeof out);
    if (n < 0)
        return;
    if ((size_t)n > sizeof out)
        abort();
    size_t text = size;
    while (text > 0 && data[text - 1] == '=')
        text--;
    size_t o = 0;
    for (long i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)out[i] << 16 | (i + 1 < n ? (uint32_t)out[i + 1] << 8 : 0) |
                     (i + 2 < n ? out[i + 2] : 0);
        const long chars = n - i >= 3 ? 4 : n - i + 1;
        for (long k = 0; k < chars; k++, o++)
            if (o >= text || data[o] != (uint8_t)abc[(v >> (18 - 6 * k)) & 63])
                abort();
    }
    if (o != text)
        abort();
}

static void check_cuda_register(const uint8_t *data, size_t size)
{
    unsigned char handle[64];
    size_t len = 0;
    int64_t dev = -1;
    uint64_t bytes = 0;
    nd_error err = {{0}};
    int st = nd_v2_parse_cuda_register((const char *)data, size, handle, sizeof handle, &len,
                                       &dev, &bytes, &err);
    if (st == 0 ? len > sizeof handle || dev < 0 : st != 400 || !err.msg[0])
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_b64(data, size);
    check_cuda_register(data, size);
    char header[32];
    const char *hl = NULL;
    nd_v2_request r;
    nd_error err;

    if (size < 3)
        return 0;
    const nd_op op = (nd_op)(data[0] % ND_OP_COUNT);
    const int mode = data[1] % 4;
    const uint8_t arg = data[2];
    data += 3;
    size -= 3;
    if (mode == 1) {
        snprintf(header, sizeof header, "%zu", size >= arg ? size - arg : 0);
        hl = header;
    } else if (mode == 2) {
        snprintf(header, sizeof header, "%u", arg);
        hl = header;
    } else if (mode == 3) {
        size_t n = arg % 24;
        if (n > size)
            n = size;
        memcpy(header, data, n); /* a NUL inside just ends the header early, as in HTTP */
        header[n] = '\0';
        hl = header;
        data += n;
        size -= n;
    }

    /* an exact-size copy so that a read past the body is caught */
    char *body = malloc(size ? size : 1);
    memcpy(body, data, size);
    int rc = nd_v2_parse_infer(op, body, size, hl, 1 << 20, &r, &err);
    if (rc != 0) {
        if (rc != 400 && rc != 413)
            abort();
        if (r.req.owned || r.req.x)
            abort();
        free(body);
        return 0;
    }

    const nd_request *req = &r.req;
    const size_t es = nd_dtype_size(req->dtype);
    const int x_shm = r.in_shm[ND_V2_IN_X].region[0] != '\0';
    if ((req->x == NULL) != x_shm || req->elems != req->outer * req->mid * req->inner ||
        r.noutputs < 1 || r.noutputs > 3)
        abort();
    if (x_shm && r.in_shm[ND_V2_IN_X].byte_size != (uint64_t)req->elems * es)
        abort();
    if (req->x)
        check_inside_or_out(req->x, (size_t)req->elems * es, body, size);
    if (req->gamma)
        check_inside_or_out(req->gamma, (size_t)req->mid * es, body, size);
    if (req->beta)
        check_inside_or_out(req->beta, (size_t)req->mid * es, body, size);
    if (req->alpha)
        check_inside_or_out(req->alpha, (size_t)req->alpha_count * es, body, size);

    /* the answer, with x as y and made-up statistics */
    const int64_t rows = nd_request_stat_rows(req);
    void *y = malloc((size_t)req->elems * es);
    float *stats = calloc((size_t)(rows ? rows : 1), sizeof *stats);
    if (req->x)
        memcpy(y, req->x, (size_t)req->elems * es);
    else
        memset(y, 0, (size_t)req->elems * es);
    char *out;
    size_t len, jl;
    if (nd_v2_encode_infer(&r, y, stats, stats, &out, &len, &jl) == 0) {
        json_error_t jerr;
        json_t *a = json_loadb(out, jl, JSON_REJECT_DUPLICATES, &jerr);
        if (!a)
            abort();
        const json_t *outs = json_object_get(a, "outputs");
        size_t binary = 0;
        if (json_array_size(outs) != (size_t)r.noutputs)
            abort();
        for (size_t i = 0; i < json_array_size(outs); i++) {
            const json_t *o = json_array_get(outs, i), *prm = json_object_get(o, "parameters");
            const json_t *bs = json_object_get(prm, "binary_data_size");
            const int in_shm = json_object_get(prm, "shared_memory_region") != NULL;
            if (in_shm && (bs || json_object_get(o, "data")))
                abort();
            if (bs)
                binary += (size_t)json_integer_value(bs);
            else if (!in_shm && !json_is_array(json_object_get(o, "data")))
                abort();
        }
        if (jl + binary != len)
            abort();
        json_decref(a);
        free(out);
    }
    free(y);
    free(stats);
    nd_v2_request_free(&r);
    free(body);
    return 0;
}
