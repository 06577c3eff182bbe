/*
 * fuzz_json.c - libFuzzer entry point for nd_proto_parse_json and, on success, the JSON encoder.
 *
 * Input: one byte choosing the op, then the body. A parsed request is encoded back with x as its
 * output (same dtype and size) and the answer parsed again: it must give x back bit for bit.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../proto/nd_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nd_request req, back;
    nd_error err;
    char *out;
    size_t out_len;
    float stats[64];

    if (size < 1)
        return 0;
    nd_op op = (nd_op)(data[0] % ND_OP_COUNT);
    /* an exact-size copy so that a read past the body is caught */
    char *body = malloc(size - 1 ? size - 1 : 1);
    memcpy(body, data + 1, size - 1);
    int rc = nd_proto_parse_json(op, body, size - 1, 1 << 20, &req, &err);
    if (rc == 0) {
        int64_t rows = nd_request_stat_rows(&req);
        size_t es = nd_dtype_size(req.dtype);
        for (int i = 0; i < 64; i++)
            stats[i] = (float)i;
        if (nd_proto_encode_json(&req, req.x, NULL, NULL, &out, &out_len) == 0) {
            /* x holds finite values only, so the answer is a valid softmax request with x */
            if (nd_proto_parse_json(ND_OP_SOFTMAX, out, out_len, 0, &back, &err) != 0)
                abort();
            if (back.dtype != req.dtype || back.elems != req.elems ||
                memcmp(back.x, req.x, (size_t)req.elems * es) != 0)
                abort();
            nd_request_free(&back);
            free(out);
        }
        if (rows <= 64 && nd_proto_encode_json(&req, req.x, stats, stats, &out, &out_len) == 0)
            free(out);
        nd_request_free(&req);
    } else if (rc != 400 && rc != 413) {
        abort();
    }
    free(body);
    return 0;
}
