/*
 * nd_v2.h - the KServe v2 / Open Inference Protocol wire format: bytes in, a validated request
 * out; results in, bytes out. No I/O, no HTTP library, no GPU (like nd_proto.h, which it builds on).
 *
 * Each operator is a "model" named after it (layernorm, rmsnorm, softmax, log_softmax, prelu),
 * version "1". An inference request names its tensors:
 *   inputs:  "x" (required), and the optional parameter tensors "gamma", "beta" (layernorm),
 *            "weight" (rmsnorm), "alpha" (prelu: 1 element, or one per channel)
 *   outputs: "y"; "mean", "rstd" (layernorm, float32 per row); "rstd" (rmsnorm)
 * Request parameters: "eps", "axis", "params" (a registered parameter set), "timeout"
 * (microseconds, as Triton), "binary_data_output". Datatypes FP32, FP16, BF16; BF16 travels only
 * as binary, as in Triton.
 *
 * The binary tensor data extension, as Triton defines it: when the HTTP header
 * Inference-Header-Content-Length is present, the body is that many bytes of JSON followed by the
 * tensors' bytes, in input order, each input saying its size in parameters.binary_data_size.
 * Outputs go back in binary when the output asks parameters.binary_data=true or the request sets
 * parameters.binary_data_output=true; the answer is then a JSON header (its length returned for the
 * Inference-Header-Content-Length response header) followed by the outputs' bytes in the order of
 * the JSON's "outputs". Little-endian, row-major.
 */
#ifndef ND_V2_H
#define ND_V2_H

#include <stddef.h>
#include <stdint.h>

#include "nd_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ND_V2_ID_MAX 256
#define ND_V2_VERSION "1"

/* The system shared memory extension (Triton's): a tensor named by a registered region instead
 * of carried in the body. An input or output with parameters.shared_memory_region (and
 * shared_memory_byte_size, and optionally shared_memory_offset) is read from or written to that
 * region. The parser only records the reference; the server resolves the region's name. */
/* bytes of a region name, NUL included: region names follow parameter sets' (nd_name_ok) */
#define ND_V2_SHM_NAME_MAX ND_PARAMS_NAME_MAX

typedef struct nd_v2_shm_ref {
    char region[ND_V2_SHM_NAME_MAX]; /* "" when the tensor is not in shared memory */
    uint64_t offset;                 /* into the region */
    uint64_t byte_size;              /* as the request says: an input's exact size; at least the
                                      * output's size for an output */
    int index;                       /* position in "inputs" / "outputs", for messages */
} nd_v2_shm_ref;

/* The inputs that may live in shared memory (rmsnorm's weight takes gamma's place, as in
 * nd_request), and the outputs. */
enum { ND_V2_IN_X, ND_V2_IN_GAMMA, ND_V2_IN_BETA, ND_V2_IN_ALPHA, ND_V2_IN_COUNT };
enum { ND_V2_OUT_Y, ND_V2_OUT_MEAN, ND_V2_OUT_RSTD, ND_V2_OUT_COUNT };

/* A parsed v2 inference request: the operator request both protocols share, plus what only v2
 * has. */
typedef struct nd_v2_request {
    nd_request req;         /* req.outputs: the outputs asked for (all the op has when the request
                             * names none, as Triton), always with ND_OUT_Y: y is computed even
                             * when not answered. req.wire: ND_WIRE_BINARY when x came as binary
                             * data. */
    char id[ND_V2_ID_MAX];  /* echoed in the answer; "" when the request had none */
    int has_id;
    unsigned binary_outputs; /* ND_OUT_* mask: the outputs to answer in binary (an output's own
                              * parameters.binary_data, else the request's binary_data_output) */
    unsigned output_order[3]; /* the outputs to answer, as ND_OUT_* bits, in the order the request
                               * named them; when it named none (or []): y, mean, rstd, those the
                               * op has. noutputs entries */
    int noutputs;
    int64_t timeout_us;     /* the "timeout" request parameter, 0 when absent */
    /* Tensors in shared memory. An input here has its req pointer (x, gamma, beta, alpha) left
     * NULL for the server to set; an output here is answered with its region's parameters and
     * no data, and is never in binary_outputs. */
    nd_v2_shm_ref in_shm[ND_V2_IN_COUNT];
    nd_v2_shm_ref out_shm[ND_V2_OUT_COUNT];
    int nshm;               /* how many of the above name a region */
} nd_v2_request;

/* The byte size of output ND_V2_OUT_* k of a request (y: x's size; mean, rstd: one float per
 * row). */
uint64_t nd_v2_output_bytes(const nd_request *req, int k);

/*
 * Parse POST /v2/models/{op}/infer. header_len is the Inference-Header-Content-Length header's
 * value as sent (NULL when absent: the whole body is JSON). 400 for a header that is not a
 * non-negative decimal integer or runs past the body, an unknown or duplicate input name, a missing
 * x, a datatype other than FP32/FP16/BF16 or inputs of different datatypes, a shape and data size
 * that disagree, binary sizes that do not add up to the body, BF16 as JSON data, an output name
 * the op does not have, shared memory parameters that are incomplete, combined with data or
 * binary_data_size, or of the wrong size (an input's byte size must be its tensor's; an output's
 * at least its tensor's); 413 past max_elems (as nd_proto_parse_json). Tensors in binary point into
 * body, which must outlive the request, at whatever alignment their offset gives (read them through
 * memcpy, as the /v1 binary form's); JSON data is copied into req.owned. Returns 0 or an HTTP
 * status with a message in err naming the field ("inputs[1].shape: ..."); on failure *out is
 * zeroed and owns nothing.
 */
int nd_v2_parse_infer(nd_op op, const char *body, size_t len, const char *header_len,
                      int64_t max_elems, nd_v2_request *out, nd_error *err);

/* Releases what the request owns (nd_request_free of out->req). */
void nd_v2_request_free(nd_v2_request *r);

/*
 * The answer to an inference request: {"model_name", "model_version", "id" (when the request had
 * one), "outputs": [{"name", "datatype", "shape", "data" | "parameters": {"binary_data_size"}}]}
 * followed, for binary outputs, by their bytes. y holds req.elems elements of req.dtype; mean and
 * rstd nd_request_stat_rows floats each (NULL when not computed: the output is then left out, as
 * nd_proto_encode_json does); none need be aligned. The outputs are output_order's (req.outputs's
 * when noutputs is 0). mean and rstd have x's shape without its last dimension ([1] for a rank-1
 * x). Numbers are written as nd_proto_encode_json writes them. *json_len is the length of the JSON
 * part (== *out_len when nothing is binary). Returns 0, or -1 on allocation failure. *out is
 * malloc'ed, with a NUL after *out_len bytes.
 */
int nd_v2_encode_infer(const nd_v2_request *r, const void *y, const float *mean,
                       const float *rstd, char **out, size_t *out_len, size_t *json_len);

/*
 * nd_v2_encode_infer for an answer that may be written into y's own buffer: y_room bytes before
 * y are the caller's to overwrite. When y is the only output sent in binary and the JSON part
 * fits in that room, the JSON is written just before y and *out = (char *)y - *json_len: nothing
 * is allocated or copied, *out is not to be freed on its own (it lies in y's allocation) and no
 * NUL follows it. Otherwise (or with y_room 0) it is nd_v2_encode_infer, *out malloc'ed.
 */
int nd_v2_encode_infer_room(const nd_v2_request *r, void *y, size_t y_room, const float *mean,
                            const float *rstd, char **out, size_t *out_len, size_t *json_len);

/* The CUDA shared memory extension's register body (Triton's):
 *   {"raw_handle": {"b64": "<base64 of a cudaIpcMemHandle_t>"}, "device_id": 0, "byte_size": N}
 * The handle's bytes go to handle (at most cap; *handle_len of them), device_id and byte_size
 * (both required, non-negative integers) to *device_id and *byte_size. Returns 0, or 400 with a
 * message in err that names the field. */
int nd_v2_parse_cuda_register(const char *body, size_t len, unsigned char *handle, size_t cap,
                              size_t *handle_len, int64_t *device_id, uint64_t *byte_size,
                              nd_error *err);

/* Standard base64 (RFC 4648, '+' and '/', padding optional) of n characters into out (at most
 * cap bytes); returns the bytes decoded, or -1 for a character outside the alphabet, a bad
 * length or padding, or more than cap bytes. */
long nd_b64_decode(const char *in, size_t n, unsigned char *out, size_t cap);

/* ---- the other documents, each malloc'ed and NUL-terminated (NULL on allocation failure) ----
 * They come from jansson's json_dumps: free() them unless jansson's allocator is replaced. */

/* GET /v2: {"name":"normd","version":version,"extensions":[...]}; "system_shared_memory" and
 * "cuda_shared_memory" are among the extensions when their arguments are not 0. */
char *nd_v2_server_metadata_json(const char *version, int system_shared_memory,
                                 int cuda_shared_memory);

/* GET /v2/models/{op}: {"name","versions":["1"],"platform":"normd","inputs":[...],"outputs":[...]}
 * with -1 for variable dims. */
char *nd_v2_model_metadata_json(nd_op op);

/* The batching policy a model configuration reports. */
typedef struct nd_v2_model_policy {
    int64_t max_batch_rows;
    int64_t max_delay_us;
    int queue_limit;
} nd_v2_model_policy;

/* GET /v2/models/{op}/config: Triton's model configuration (name, platform, backend,
 * max_batch_size 0, input, output, dynamic_batching, parameters). */
char *nd_v2_model_config_json(nd_op op, const nd_v2_model_policy *policy);

/* Per-model statistics for the statistics extension, cumulative since start. */
typedef struct nd_v2_stats {
    uint64_t last_inference_ms;   /* wall clock, ms since the epoch; 0 when none */
    uint64_t inference_count;     /* requests run (Triton: inferences) */
    uint64_t execution_count;     /* batches run */
    uint64_t success_count, success_ns;
    uint64_t fail_count, fail_ns;
    uint64_t queue_count, queue_ns;
    uint64_t compute_input_count, compute_input_ns;
    uint64_t compute_infer_count, compute_infer_ns;
    uint64_t compute_output_count, compute_output_ns;
} nd_v2_stats;

/* GET /v2/models/stats and /v2/models/{op}/stats: {"model_stats":[...]} for the nops models in
 * ops, stats[i] belonging to ops[i]. */
char *nd_v2_stats_json(const nd_op *ops, const nd_v2_stats *stats, int nops);

/* "FP32", "FP16", "BF16". */
const char *nd_v2_datatype_name(nd_dtype dt);

#ifdef __cplusplus
}
#endif

#endif /* ND_V2_H */
