/*
 * compress.h - Content-Encoding for request bodies and answers (gzip and deflate, through zlib),
 * as Triton's HTTP endpoint offers them.
 */
#ifndef ND_COMPRESS_H
#define ND_COMPRESS_H

#include <stddef.h>

#include "../kernels/nd_ops.h"

enum { ND_ENC_IDENTITY = 0, ND_ENC_GZIP, ND_ENC_DEFLATE };

/* ND_ENC_* for a Content-Encoding value ("gzip", "x-gzip", "deflate", "identity"; case does not
 * matter), -1 for anything else. */
int nd_encoding_from_name(const char *name);

/*
 * Inflates len bytes of enc into a new malloc'ed buffer (one spare byte past *out_len, for a
 * terminating NUL). Returns 0, 400 when the data is not valid enc (message in err), 413 when it
 * inflates past max_out bytes, 500 when memory runs out. "deflate" is accepted as zlib-wrapped
 * (RFC 1950, what the HTTP spec means) or raw (what some clients send).
 */
int nd_decompress(const void *in, size_t len, int enc, size_t max_out, void **out,
                  size_t *out_len, nd_error *err);

/* Compresses len bytes into a new malloc'ed buffer as enc (gzip or zlib-wrapped deflate), at the
 * fastest level: answers are mostly float bits, which compress little whatever the effort.
 * Returns 0, or -1 on failure (the caller sends the answer uncompressed). */
int nd_compress(const void *in, size_t len, int enc, void **out, size_t *out_len);

#endif /* ND_COMPRESS_H */
