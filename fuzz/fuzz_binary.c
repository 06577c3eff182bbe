/*
 * fuzz_binary.c - libFuzzer entry point for nd_proto_parse_binary.
 *
 * Input: one byte choosing the op, a query string up to the first newline ("shape=2,3&dtype=..."),
 * then the body. On success every byte of every tensor the request points at is read, from an
 * exact-size copy of the body, so a pointer or length past the body is caught by ASan.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/nd_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nd_kv kv[16];
    size_t nkv = 0;
    nd_request req;
    nd_error err;

    if (size < 1)
        return 0;
    nd_op op = (nd_op)(data[0] % ND_OP_COUNT);
    data++, size--;
    const uint8_t *nl = memchr(data, '\n', size);
    size_t qlen = nl ? (size_t)(nl - data) : size;
    char *qs = malloc(qlen + 1);
    memcpy(qs, data, qlen);
    qs[qlen] = '\0';
    size_t blen = nl ? size - qlen - 1 : 0;
    char *body = malloc(blen ? blen : 1);
    if (blen)
        memcpy(body, nl + 1, blen);

    for (char *save = NULL, *tok = strtok_r(qs, "&", &save); tok && nkv < 16;
         tok = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(tok, '=');
        if (eq)
            *eq = '\0';
        kv[nkv++] = (nd_kv){tok, eq ? eq + 1 : NULL};
    }

    int rc = nd_proto_parse_binary(op, kv, nkv, body, blen, 1 << 20, &req, &err);
    if (rc == 0) {
        size_t es = nd_dtype_size(req.dtype);
        volatile unsigned char sum = 0;
        const unsigned char *p = req.x;
        for (size_t i = 0; i < (size_t)req.elems * es; i++)
            sum ^= p[i];
        const void *params[3] = {req.gamma, req.beta, req.alpha};
        size_t counts[3] = {(size_t)req.mid, (size_t)req.mid, (size_t)req.alpha_count};
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; params[k] && i < counts[k] * es; i++)
                sum ^= ((const unsigned char *)params[k])[i];
        char shape[8 * 21];
        nd_proto_format_shape(&req, shape, sizeof shape);
        (void)sum;
        nd_request_free(&req);
    } else {
        if (rc != 400 && rc != 413)
            abort();
        char *j = nd_proto_error_json(err.msg);
        free(j);
    }
    free(qs);
    free(body);
    return 0;
}
