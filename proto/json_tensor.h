/*
 * json_tensor.h - a JSON request body with its numeric arrays read by our own scanner
 * (json_tensor.c); not part of the public API.
 *
 * jansson builds one heap object per value; for a tensor of numbers that is most of the work of a
 * request. So before jansson sees a body, a scanner walks it, finds the numeric arrays at the
 * places a layout names (/v1: the root's "data", "gamma", "beta", "weight", "alpha"; v2: each
 * "inputs" entry's "data"), reads each into a flat run of doubles (json_num.h: exactly strtod's
 * values) and puts a small integer in its place; jansson then parses only this envelope. The
 * /v1 parser (json.c) and the v2 parser (v2.c) read their tensors through the calls below, so
 * that the same numbers become the same bits and bad data gets the same message in both.
 *
 * What a client sees is what jansson alone gave: a body is valid exactly when jansson accepts it
 * (the scanner is strict inside the arrays it takes, down to jansson's integer and overflow
 * limits and its nesting depth, and whenever the body is not valid jansson parses it as sent, so
 * the "invalid JSON at line L, column C: ..." message is jansson's own); the arrays' values are
 * those jansson would have given (integers beyond 2^53 rounded to odd, see nd_store_f64).
 *
 * A tensor is a JSON array, either flat (as many numbers as the shape's product) or nested
 * exactly as the shape; which one is decided by its first entry being an array. Each number is
 * rounded once to the dtype (nd_store_f64); one that does not fit is an error naming its index.
 */
#ifndef ND_PROTO_JSON_TENSOR_H
#define ND_PROTO_JSON_TENSOR_H

#include <jansson.h>

#include "request.h"

/* "an array", "a string", "null", ... for messages. */
const char *nd_json_type_name(const json_t *v);

/* Where a body's numeric arrays are. */
typedef enum nd_json_layout {
    ND_JSON_V1, /* the root object's members, sites ND_JSON_SITE_* */
    ND_JSON_V2, /* "data" of the objects in the root's "inputs"; the site is the index there */
} nd_json_layout;

/* /v1's sites, in the order json.c's fields list them. */
enum {
    ND_JSON_SITE_DATA,
    ND_JSON_SITE_GAMMA,
    ND_JSON_SITE_BETA,
    ND_JSON_SITE_WEIGHT,
    ND_JSON_SITE_ALPHA,
    ND_JSON_V1_SITES
};

/* One scanned array. Its tokens: an open mark, the entries (numbers as doubles; marks for nested
 * arrays, strings, booleans, null and objects), a close mark. */
typedef struct nd_json_tensor {
    size_t site;
    size_t len;          /* entries at the top level */
    const double *tok;   /* set when the scan is done */
    size_t first;        /* tok's index in the document's token run */
    size_t text_begin;   /* the array's bytes in the body: [text_begin, text_end) */
    size_t text_end;
    const uint64_t *ints; /* the document's bit set: bit (first + i) marks an integer token */
} nd_json_tensor;

typedef struct nd_json_doc {
    json_t *root; /* the envelope as jansson parsed it: each scanned array replaced by its index */
    /* private */
    nd_json_tensor *t;
    size_t nt, t_cap;
    double *tok;
    uint64_t *ints;
    size_t ntok, tok_cap;
    char *envelope;
} nd_json_doc;

/*
 * Parses body (len bytes, need not be NUL-terminated) as layout says. Returns 0 with doc->root
 * set (a JSON value of any kind), or 400 "invalid JSON at line L, column C: ..." (jansson's
 * message for the body as sent), or 500 on allocation failure; doc must be released with
 * nd_json_doc_free either way. Duplicate keys are rejected, as with JSON_REJECT_DUPLICATES.
 */
int nd_json_doc_load(nd_json_doc *doc, nd_json_layout layout, const char *body, size_t len,
                     nd_error *err);
void nd_json_doc_free(nd_json_doc *doc);

/* The array that was at site, when v (the value jansson now holds there) is its stand-in; NULL
 * when v is something else (absent, null, a string, ...: what the client sent there). */
const nd_json_tensor *nd_json_doc_tensor(const nd_json_doc *doc, size_t site, const json_t *v);

/* Number of entries at the top level (json_array_size). */
static inline size_t nd_json_tensor_len(const nd_json_tensor *t)
{
    return t->len;
}

/* Whether the first entry is an array (the tensor is written nested). */
int nd_json_tensor_nested(const nd_json_tensor *t);

/* The entry counts along the first entries: dims[0] = the tensor's length, dims[1] = that of its
 * first entry when that is an array, and so on, at most max levels; stops after a count of 0.
 * Returns the number of levels written. */
int nd_json_tensor_dims(const nd_json_tensor *t, int64_t *dims, int max);

/*
 * Checks the structure of t against shape (ndim dims, elems their product): its number of
 * entries when flat, every level's length and depth when nested. Numbers are checked by
 * nd_json_tensor_fill. name starts the messages ("data", "inputs[0].data"; at most 63 bytes are
 * used). Returns 0 or 400 with a message in err.
 */
int nd_json_tensor_check(const nd_json_tensor *t, const int64_t *shape, int ndim, int64_t elems,
                         const char *name, nd_error *err);

/*
 * Writes t's elements, checked by nd_json_tensor_check, into dst as dtype dt. Returns 0, or 400
 * naming the element ("data[1][2]: expected a number, got a string", "data[3]=1e+06 is out of
 * range for float16").
 */
int nd_json_tensor_fill(const nd_json_tensor *t, const int64_t *shape, int ndim, nd_dtype dt,
                        void *dst, const char *name, nd_error *err);

/* Writes the len entries of t into dst as dt, each of which must be a number (a parameter
 * vector: the caller has checked the length). Messages as nd_json_tensor_fill's. */
int nd_json_tensor_fill_flat(const nd_json_tensor *t, nd_dtype dt, void *dst, const char *name,
                             nd_error *err);

#endif /* ND_PROTO_JSON_TENSOR_H */
