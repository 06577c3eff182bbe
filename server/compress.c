/*
 * compress.c - gzip and deflate bodies through zlib.
 */
#include "compress.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

int nd_encoding_from_name(const char *name)
{
    if (!strcasecmp(name, "identity") || !*name)
        return ND_ENC_IDENTITY;
    if (!strcasecmp(name, "gzip") || !strcasecmp(name, "x-gzip"))
        return ND_ENC_GZIP;
    if (!strcasecmp(name, "deflate"))
        return ND_ENC_DEFLATE;
    return -1;
}

/* One inflate pass with the given window bits; see nd_decompress for the statuses. */
static int inflate_with(const void *in, size_t len, int window_bits, size_t max_out, void **out,
                        size_t *out_len, nd_error *err)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, window_bits) != Z_OK)
        return nd_error_set(err, ND_ENOMEM, "cannot start zlib"), 500;
    size_t cap = len * 4 + 1024, n = 0;
    if (cap > max_out + 1)
        cap = max_out + 1;
    char *buf = malloc(cap + 1);
    int status = 0;
    if (!buf) {
        status = 500;
        goto done;
    }
    z.next_in = (Bytef *)in;
    size_t left = len;
    for (;;) {
        /* zlib counts in uInt: feed and drain in pieces it can count */
        if (z.avail_in == 0 && left) {
            z.avail_in = left > (1u << 30) ? (1u << 30) : (uInt)left;
            left -= z.avail_in;
        }
        if (n == cap) {
            if (cap > max_out) {
                status = 413;
                nd_error_set(err, ND_EINVAL, "body inflates past the limit of %zu bytes "
                                             "(--max-body-bytes)", max_out);
                goto done;
            }
            size_t ncap = cap * 2 > max_out + 1 ? max_out + 1 : cap * 2;
            char *p = realloc(buf, ncap + 1);
            if (!p) {
                status = 500;
                goto done;
            }
            buf = p;
            cap = ncap;
        }
        size_t room = cap - n > (1u << 30) ? (1u << 30) : cap - n;
        z.next_out = (Bytef *)buf + n;
        z.avail_out = (uInt)room;
        int rc = inflate(&z, Z_NO_FLUSH);
        n += room - z.avail_out;
        if (rc == Z_STREAM_END) {
            if (z.avail_in || left) {
                status = 400;
                nd_error_set(err, ND_EINVAL, "body: bytes after the end of the compressed data");
            }
            break;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0 && !left) {
            status = 400;
            nd_error_set(err, ND_EINVAL, "body: compressed data is truncated");
            break;
        }
        if (rc != Z_OK && rc != Z_BUF_ERROR) {
            status = rc == Z_MEM_ERROR ? 500 : 400;
            nd_error_set(err, ND_EINVAL, "body: not valid compressed data (%s)",
                         z.msg ? z.msg : "zlib error");
            break;
        }
    }
    if (n > max_out && !status) {
        status = 413;
        nd_error_set(err, ND_EINVAL, "body inflates past the limit of %zu bytes "
                                     "(--max-body-bytes)", max_out);
    }
done:
    inflateEnd(&z);
    if (status) {
        if (status == 500)
            nd_error_set(err, ND_ENOMEM, "out of memory inflating the body");
        free(buf);
        return status;
    }
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
}

int nd_decompress(const void *in, size_t len, int enc, size_t max_out, void **out,
                  size_t *out_len, nd_error *err)
{
    if (enc == ND_ENC_GZIP)
        return inflate_with(in, len, 16 + MAX_WBITS, max_out, out, out_len, err);
    int st = inflate_with(in, len, MAX_WBITS, max_out, out, out_len, err);
    if (st == 400) /* not zlib-wrapped: try raw deflate */
        st = inflate_with(in, len, -MAX_WBITS, max_out, out, out_len, err);
    return st;
}

int nd_compress(const void *in, size_t len, int enc, void **out, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    int bits = enc == ND_ENC_GZIP ? 16 + MAX_WBITS : MAX_WBITS;
    if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    size_t cap = deflateBound(&z, (uLong)len);
    char *buf = malloc(cap);
    if (!buf || len > (1u << 30)) {
        free(buf);
        deflateEnd(&z);
        return -1;
    }
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    size_t n = cap - z.avail_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = n;
    return 0;
}
