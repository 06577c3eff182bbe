/*
 * json_tensor.h - a tensor read out of a jansson array (json.c); not part of the public API.
 *
 * The /v1 JSON parser (json.c) and the v2 parser (v2.c) both read tensors through these two calls,
 * so that the same numbers become the same bits and bad data gets the same message in both; a
 * faster reader can later replace them for both at once.
 *
 * A tensor's data is a JSON array, either flat (as many numbers as the shape's product) or nested
 * exactly as the shape; which one is decided by its first entry being an array. Each number is
 * rounded once to the dtype (nd_store_f64); one that does not fit is an error naming its index.
 */
#ifndef ND_PROTO_JSON_TENSOR_H
#define ND_PROTO_JSON_TENSOR_H

#include <jansson.h>

#include "request.h"

/* "an array", "a string", "null", ... for messages. */
const char *nd_json_type_name(const json_t *v);

/*
 * Checks the structure of arr against shape (ndim dims, elems their product): its number of
 * entries when flat, every level's length and depth when nested. Numbers are checked by
 * nd_json_tensor_fill. name starts the messages ("data", "inputs[0].data"; at most 63 bytes are
 * used). Returns 0 or 400 with a message in err.
 */
int nd_json_tensor_check(const json_t *arr, const int64_t *shape, int ndim, int64_t elems,
                         const char *name, nd_error *err);

/*
 * Writes arr's elements, checked by nd_json_tensor_check, into dst as dtype dt. Returns 0, or 400
 * naming the element ("data[1][2]: expected a number, got a string", "data[3]=1e+06 is out of
 * range for float16").
 */
int nd_json_tensor_fill(const json_t *arr, const int64_t *shape, int ndim, nd_dtype dt,
                        void *dst, const char *name, nd_error *err);

#endif /* ND_PROTO_JSON_TENSOR_H */
