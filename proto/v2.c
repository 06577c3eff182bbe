/*
 * v2.c - the KServe v2 / Open Inference Protocol (nd_v2.h): the inference request and answer, and
 * the metadata, configuration and statistics documents.
 *
 * An inference request is read in stages, so that each check has what it needs and nothing is
 * allocated before the request is known to be whole:
 *   1. Inference-Header-Content-Length: how much of the body is JSON; the rest is binary tensors.
 *   2. The JSON (json_tensor.h: jansson for all but the inputs' "data" arrays, which our scanner
 *      reads; duplicate keys rejected): id, parameters, each input's name, datatype, shape and
 *      where its values are, then outputs.
 *   3. x's shape and the request parameters through request.h's helpers, exactly as the /v1
 *      parsers use them, so the view, the defaults and the limits are theirs.
 *   4. The parameter tensors' shapes, then every tensor's values: the binary sizes must tile the
 *      binary region exactly; JSON data must have the shape's structure (json_tensor.h, the /v1
 *      JSON parser's own walk, so both round the same decimals to the same bits).
 *   5. One 64-byte aligned block (req.owned) for the tensors sent as JSON, filled number by number.
 * Binary tensors are not copied: they point into the body at whatever alignment their offset
 * gives, which nd_request allows (see binary.c: read them through memcpy).
 *
 * Messages name the field by its JSON path ("inputs[1].shape", "parameters.eps",
 * "outputs[0].parameters.binary_data"); the request.h helpers' messages, which use /v1's names,
 * get that path put in front ("eps=0: ..." becomes "parameters.eps=0: ...").
 *
 * Where the protocol leaves room, Triton's behaviour is followed: all outputs when the request
 * names none (or an empty list), BF16 only as binary, an output's own parameters.binary_data
 * overriding the request's binary_data_output. Unknown keys and unknown parameters are ignored
 * (clients add their own); known ones must have the right type.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_tensor.h"
#include "nd_v2.h"

#define OP(o) (1u << (o))
#define OPS_ALL ((1u << ND_OP_COUNT) - 1)
#define OPS_NORM (OP(ND_OP_LAYERNORM) | OP(ND_OP_RMSNORM))

/* ======================================================================== names */

/* The input tensors, by the name a request gives them. */
enum slot { S_X, S_GAMMA, S_BETA, S_WEIGHT, S_ALPHA, S_COUNT };

static const struct {
    const char *name;
    unsigned ops; /* the operators that take the input */
} slots[] = {
    [S_X] = {"x", OPS_ALL},
    [S_GAMMA] = {"gamma", OP(ND_OP_LAYERNORM)},
    [S_BETA] = {"beta", OP(ND_OP_LAYERNORM)},
    [S_WEIGHT] = {"weight", OP(ND_OP_RMSNORM)},
    [S_ALPHA] = {"alpha", OP(ND_OP_PRELU)},
};
_Static_assert(sizeof slots / sizeof slots[0] == S_COUNT, "slots must list every enum slot");

/* The outputs, in the order an answer lists them when the request names none. */
static const struct {
    const char *name;
    unsigned bit;
    unsigned ops;
} outputs[] = {
    {"y", ND_OUT_Y, OPS_ALL},
    {"mean", ND_OUT_MEAN, OP(ND_OP_LAYERNORM)},
    {"rstd", ND_OUT_RSTD, OPS_NORM},
};
#define NOUTPUTS ((int)(sizeof outputs / sizeof outputs[0]))

static const char *const datatype_names[ND_DTYPE_COUNT] = {
    [ND_FLOAT32] = "FP32",
    [ND_FLOAT16] = "FP16",
    [ND_BFLOAT16] = "BF16",
};
_Static_assert(sizeof datatype_names / sizeof datatype_names[0] == ND_DTYPE_COUNT,
               "a v2 datatype name for every dtype");

const char *nd_v2_datatype_name(nd_dtype dt)
{
    return (unsigned)dt < ND_DTYPE_COUNT ? datatype_names[dt] : "INVALID";
}

static int datatype_from_name(const char *s, nd_dtype *out)
{
    for (int d = 0; d < ND_DTYPE_COUNT; d++)
        if (!strcmp(s, datatype_names[d])) {
            *out = (nd_dtype)d;
            return 0;
        }
    return -1;
}

/* "x, gamma, beta" for the inputs op takes. */
static void input_list(nd_op op, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int s = 0; s < S_COUNT && n < size; s++)
        if (slots[s].ops & OP(op))
            n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? ", " : "", slots[s].name);
}

static unsigned output_bit(const char *name)
{
    for (int k = 0; k < NOUTPUTS; k++)
        if (!strcmp(name, outputs[k].name))
            return outputs[k].bit;
    return 0;
}

/* ND_V2_OUT_* of an output bit (the outputs table's order). */
static int output_index(unsigned bit)
{
    return bit == ND_OUT_Y ? ND_V2_OUT_Y : bit == ND_OUT_MEAN ? ND_V2_OUT_MEAN : ND_V2_OUT_RSTD;
}

static const char *output_name(unsigned bit)
{
    for (int k = 0; k < NOUTPUTS; k++)
        if (outputs[k].bit == bit)
            return outputs[k].name;
    return "?";
}

/* ======================================================================== small helpers */

/* Puts path in front of the message a request.h helper left in err, so that it names the field
 * as v2 spells it. Returns status. */
static int prefixed(int status, nd_error *err, const char *path)
{
    if (status && err) {
        char tmp[sizeof err->msg];
        size_t n = strlen(path);
        if (n >= sizeof tmp)
            n = sizeof tmp - 1;
        memcpy(tmp, path, n);
        snprintf(tmp + n, sizeof tmp - n, "%s", err->msg);
        memcpy(err->msg, tmp, sizeof tmp);
    }
    return status;
}

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The member key of object o, with JSON null taken as absent (clients serialize None that way). */
static const json_t *member(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

/*
 * The Inference-Header-Content-Length value: digits only (no sign, no spaces, nothing after), at
 * most len. Values too long for 64 bits are caught by the comparison with len, which stops the
 * accumulation before it can overflow.
 */
static int read_header_len(const char *h, size_t len, size_t *out, nd_error *err)
{
    const size_t hl = strlen(h);
    char q[64];
    uint64_t v = 0;
    int past = 0;
    nd_proto_quote(q, sizeof q, h, hl);
    if (hl == 0)
        return nd_proto_fail(err, 400, "Inference-Header-Content-Length: empty; expected the "
                                       "length of the body's JSON part in bytes");
    for (size_t i = 0; i < hl; i++)
        if (h[i] < '0' || h[i] > '9')
            return nd_proto_fail(err, 400,
                                 "Inference-Header-Content-Length: \"%s\" is not a byte count "
                                 "(a decimal integer, no sign or spaces)",
                                 q);
    for (size_t i = 0; i < hl && !past; i++) {
        v = v * 10 + (uint64_t)(h[i] - '0');
        past = v > (uint64_t)len;
    }
    if (past)
        return nd_proto_fail(err, 400,
                             "Inference-Header-Content-Length: %s is more than the body's %zu "
                             "bytes",
                             q, len);
    *out = (size_t)v;
    return 0;
}

/* ======================================================================== inputs */

/* What the JSON says about one input tensor. */
typedef struct input {
    int index; /* position in "inputs"; -1 when the request has no such input */
    nd_dtype dtype;
    int ndim;
    int64_t shape[ND_MAX_DIMS];
    const nd_json_tensor *data; /* NULL when the values are binary or in shared memory */
    int64_t binary_size; /* parameters.binary_data_size; -1 when absent */
    nd_v2_shm_ref shm;   /* parameters.shared_memory_*; region "" when absent */
} input;

/* Where each input slot goes in nd_v2_request.in_shm (rmsnorm's weight is gamma's place). */
static const int slot_shm[S_COUNT] = {
    [S_X] = ND_V2_IN_X,         [S_GAMMA] = ND_V2_IN_GAMMA, [S_BETA] = ND_V2_IN_BETA,
    [S_WEIGHT] = ND_V2_IN_GAMMA, [S_ALPHA] = ND_V2_IN_ALPHA,
};

/* A non-negative integer parameter; 0 when absent (*v untouched), else 0 or 400. */
static int read_count(const json_t *params, const char *key, const char *where, size_t i,
                      uint64_t *v, nd_error *err)
{
    const json_t *n = member(params, key);
    if (!n)
        return 0;
    if (!json_is_integer(n))
        return nd_proto_fail(err, 400, "%s[%zu].parameters.%s: expected an integer, got %s",
                             where, i, key, nd_json_type_name(n));
    if (json_integer_value(n) < 0)
        return nd_proto_fail(err, 400, "%s[%zu].parameters.%s=%lld: must be at least 0", where,
                             i, key, (long long)json_integer_value(n));
    *v = (uint64_t)json_integer_value(n);
    return 0;
}

/* The shared memory extension's parameters of inputs[i] or outputs[i] (where: "inputs" or
 * "outputs"): shared_memory_region and shared_memory_byte_size together or neither, and
 * shared_memory_offset only with them. ref->region stays "" when the tensor is not in shared
 * memory. */
static int read_shm(const json_t *params, const char *where, size_t i, nd_v2_shm_ref *ref,
                    nd_error *err)
{
    const json_t *region = member(params, "shared_memory_region");
    const json_t *size = member(params, "shared_memory_byte_size");
    const json_t *off = member(params, "shared_memory_offset");
    if (!region && !size && !off)
        return 0;
    if (!region || !size)
        return nd_proto_fail(err, 400,
                             "%s[%zu].parameters: shared_memory_region and "
                             "shared_memory_byte_size go together (%s is missing)",
                             where, i, region ? "shared_memory_byte_size" : "shared_memory_region");
    if (!json_is_string(region))
        return nd_proto_fail(err, 400,
                             "%s[%zu].parameters.shared_memory_region: expected a string, got %s",
                             where, i, nd_json_type_name(region));
    size_t n = json_string_length(region);
    if (n == 0 || n >= sizeof ref->region)
        return nd_proto_fail(err, 400,
                             "%s[%zu].parameters.shared_memory_region: a region name has 1 to %zu "
                             "bytes, got %zu",
                             where, i, sizeof ref->region - 1, n);
    int rc;
    if ((rc = read_count(params, "shared_memory_byte_size", where, i, &ref->byte_size, err)) ||
        (rc = read_count(params, "shared_memory_offset", where, i, &ref->offset, err)))
        return rc;
    memcpy(ref->region, json_string_value(region), n + 1);
    ref->index = (int)i;
    return 0;
}

/* Reads inputs[i] into the slot its name gives; checks the name, datatype and shape's form. */
static int read_input(const nd_json_doc *doc, nd_op op, const json_t *in, size_t i,
                      input *in_slot, nd_error *err)
{
    char q[64], list[64];
    if (!json_is_object(in))
        return nd_proto_fail(err, 400, "inputs[%zu]: expected an object, got %s", i,
                             nd_json_type_name(in));

    const json_t *name = member(in, "name");
    if (!name)
        return nd_proto_fail(err, 400, "inputs[%zu].name: required", i);
    if (!json_is_string(name))
        return nd_proto_fail(err, 400, "inputs[%zu].name: expected a string, got %s", i,
                             nd_json_type_name(name));
    const char *nm = json_string_value(name);
    int s = 0;
    while (s < S_COUNT && !((slots[s].ops & OP(op)) && !strcmp(nm, slots[s].name)))
        s++;
    nd_proto_quote(q, sizeof q, nm, json_string_length(name));
    if (s == S_COUNT) {
        input_list(op, list, sizeof list);
        return nd_proto_fail(err, 400, "inputs[%zu].name: unknown input \"%s\"; %s takes %s", i,
                             q, nd_op_name(op), list);
    }
    input *t = &in_slot[s];
    if (t->index >= 0)
        return nd_proto_fail(err, 400, "inputs[%zu].name: \"%s\" given twice (also inputs[%d])",
                             i, q, t->index);
    t->index = (int)i;

    const json_t *dt = member(in, "datatype");
    if (!dt)
        return nd_proto_fail(err, 400, "inputs[%zu].datatype: required (FP32, FP16 or BF16)", i);
    if (!json_is_string(dt))
        return nd_proto_fail(err, 400, "inputs[%zu].datatype: expected a string, got %s", i,
                             nd_json_type_name(dt));
    if (datatype_from_name(json_string_value(dt), &t->dtype) != 0) {
        nd_proto_quote(q, sizeof q, json_string_value(dt), json_string_length(dt));
        return nd_proto_fail(err, 400,
                             "inputs[%zu].datatype: \"%s\" is not supported; expected FP32, FP16 "
                             "or BF16",
                             i, q);
    }

    const json_t *shape = member(in, "shape");
    if (!shape)
        return nd_proto_fail(err, 400, "inputs[%zu].shape: required", i);
    if (!json_is_array(shape))
        return nd_proto_fail(err, 400, "inputs[%zu].shape: expected an array of integers, got %s",
                             i, nd_json_type_name(shape));
    size_t nd = json_array_size(shape);
    if (nd < 1 || nd > ND_MAX_DIMS)
        return nd_proto_fail(err, 400, "inputs[%zu].shape: must have 1 to %d dimensions, got %zu",
                             i, ND_MAX_DIMS, nd);
    for (size_t k = 0; k < nd; k++) {
        const json_t *d = json_array_get(shape, k);
        char path[32];
        if (!json_is_integer(d))
            return nd_proto_fail(err, 400, "inputs[%zu].shape[%zu]: expected an integer, got %s",
                                 i, k, nd_json_type_name(d));
        snprintf(path, sizeof path, "inputs[%zu].", i);
        int rc = prefixed(nd_request_check_dim((int)k, json_integer_value(d), err), err, path);
        if (rc)
            return rc;
        t->shape[k] = json_integer_value(d);
    }
    t->ndim = (int)nd;

    t->binary_size = -1;
    const json_t *params = member(in, "parameters");
    if (params) {
        if (!json_is_object(params))
            return nd_proto_fail(err, 400, "inputs[%zu].parameters: expected an object, got %s",
                                 i, nd_json_type_name(params));
        const json_t *bs = member(params, "binary_data_size");
        if (bs) {
            if (!json_is_integer(bs))
                return nd_proto_fail(err, 400,
                                     "inputs[%zu].parameters.binary_data_size: expected an "
                                     "integer, got %s",
                                     i, nd_json_type_name(bs));
            if (json_integer_value(bs) < 0)
                return nd_proto_fail(err, 400,
                                     "inputs[%zu].parameters.binary_data_size=%lld: must be at "
                                     "least 0",
                                     i, (long long)json_integer_value(bs));
            t->binary_size = json_integer_value(bs);
        }
        int rc = read_shm(params, "inputs", i, &t->shm, err);
        if (rc)
            return rc;
    }

    const json_t *data = member(in, "data");
    const int ways = (data != NULL) + (t->binary_size >= 0) + (t->shm.region[0] != '\0');
    if (ways > 1)
        return nd_proto_fail(err, 400,
                             "inputs[%zu]: has %s; send the values one way",
                             i, !data ? "both parameters.binary_data_size and "
                                        "parameters.shared_memory_region"
                                : t->binary_size >= 0 ? "both data and "
                                                        "parameters.binary_data_size"
                                                      : "both data and "
                                                        "parameters.shared_memory_region");
    if (data && !(t->data = nd_json_doc_tensor(doc, i, data)))
        return nd_proto_fail(err, 400, "inputs[%zu].data: expected an array of numbers, got %s",
                             i, nd_json_type_name(data));
    return 0;
}

/* A parameter tensor's shape must be [count] (or, for alpha, [1] or [channels]). */
static int check_param_shape(const nd_request *req, int s, const input *t, nd_error *err)
{
    const int64_t c = req->mid;
    char got[ND_MAX_DIMS * 21 + 4];
    if (t->ndim == 1 && (t->shape[0] == c || (s == S_ALPHA && t->shape[0] == 1)))
        return 0;
    nd_shape_str(t->shape, t->ndim, got, sizeof got);
    if (s != S_ALPHA)
        return nd_proto_fail(err, 400,
                             "inputs[%d].shape: %s must be [%lld] (x's last dimension), got %s",
                             t->index, slots[s].name, (long long)c, got);
    if (c == 1)
        return nd_proto_fail(err, 400, "inputs[%d].shape: alpha must be [1], got %s", t->index,
                             got);
    return nd_proto_fail(err, 400,
                         "inputs[%d].shape: alpha must be [1] (shared) or [%lld] (one per "
                         "channel: x's dimension 1), got %s",
                         t->index, (long long)c, got);
}

static int64_t shape_elems(const input *t)
{
    int64_t n = 1;
    for (int k = 0; k < t->ndim; k++)
        n *= t->shape[k]; /* x: checked by nd_request_finish; parameters: [count] */
    return n;
}

/* ======================================================================== request parameters */

typedef struct req_params {
    int has_axis;
    int64_t axis;
    int binary_output; /* parameters.binary_data_output */
} req_params;

static int read_parameters(const json_t *p, nd_v2_request *r, req_params *rp, nd_error *err)
{
    nd_request *req = &r->req;
    const json_t *v;
    int rc;
    if (!json_is_object(p))
        return nd_proto_fail(err, 400, "parameters: expected an object, got %s",
                             nd_json_type_name(p));

    if ((v = member(p, "eps"))) {
        if (!json_is_number(v))
            return nd_proto_fail(err, 400, "parameters.eps: expected a number, got %s",
                                 nd_json_type_name(v));
        if (!nd_op_is_norm(req->op))
            return nd_proto_fail(err, 400, "parameters.eps: not accepted by %s",
                                 nd_op_name(req->op));
        if ((rc = prefixed(nd_request_set_eps(req, json_number_value(v), err), err,
                           "parameters.")))
            return rc;
    }
    if ((v = member(p, "axis"))) {
        /* checked against the op and x's rank by nd_request_finish, as /v1's axis */
        if (!json_is_integer(v))
            return nd_proto_fail(err, 400, "parameters.axis: expected an integer, got %s",
                                 nd_json_type_name(v));
        rp->has_axis = 1;
        rp->axis = json_integer_value(v);
    }
    if ((v = member(p, "params"))) {
        if (!json_is_string(v))
            return nd_proto_fail(err, 400, "parameters.params: expected a string, got %s",
                                 nd_json_type_name(v));
        if ((rc = prefixed(nd_request_set_params(req, json_string_value(v), json_string_length(v),
                                                 err),
                           err, "parameters.")))
            return rc;
    }
    if ((v = member(p, "timeout"))) {
        if (!json_is_integer(v))
            return nd_proto_fail(err, 400,
                                 "parameters.timeout: expected an integer (microseconds), got %s",
                                 nd_json_type_name(v));
        if (json_integer_value(v) < 0)
            return nd_proto_fail(err, 400,
                                 "parameters.timeout=%lld: must be at least 0 (microseconds)",
                                 (long long)json_integer_value(v));
        r->timeout_us = json_integer_value(v);
    }
    if ((v = member(p, "binary_data_output"))) {
        if (!json_is_boolean(v))
            return nd_proto_fail(err, 400,
                                 "parameters.binary_data_output: expected a boolean, got %s",
                                 nd_json_type_name(v));
        rp->binary_output = json_is_true(v);
    }
    return 0;
}

/* ======================================================================== outputs */

/* Fills req.outputs, output_order, noutputs and binary_outputs from "outputs" (NULL: absent). */
static int read_outputs(const json_t *outs, nd_v2_request *r, int binary_default, nd_error *err)
{
    nd_request *req = &r->req;
    const nd_op op = req->op;
    unsigned seen = 0;
    int rc;

    if (outs && !json_is_array(outs))
        return nd_proto_fail(err, 400, "outputs: expected an array of objects, got %s",
                             nd_json_type_name(outs));
    if (!outs || json_array_size(outs) == 0) {
        for (int k = 0; k < NOUTPUTS; k++) {
            if (!(outputs[k].ops & OP(op)))
                continue;
            req->outputs |= outputs[k].bit;
            r->output_order[r->noutputs++] = outputs[k].bit;
            if (binary_default)
                r->binary_outputs |= outputs[k].bit;
        }
        return 0;
    }

    for (size_t i = 0; i < json_array_size(outs); i++) {
        const json_t *o = json_array_get(outs, i);
        char where[48];
        if (!json_is_object(o))
            return nd_proto_fail(err, 400, "outputs[%zu]: expected an object, got %s", i,
                                 nd_json_type_name(o));
        const json_t *name = member(o, "name");
        if (!name)
            return nd_proto_fail(err, 400, "outputs[%zu].name: required", i);
        if (!json_is_string(name))
            return nd_proto_fail(err, 400, "outputs[%zu].name: expected a string, got %s", i,
                                 nd_json_type_name(name));
        /* the name's checks and messages are /v1's ("unknown output ...; expected y or rstd") */
        snprintf(where, sizeof where, "outputs[%zu].name", i);
        if ((rc = nd_request_add_output(req, json_string_value(name), json_string_length(name),
                                        where, err)))
            return rc;
        unsigned bit = output_bit(json_string_value(name));
        if (seen & bit)
            return nd_proto_fail(err, 400, "outputs[%zu].name: \"%s\" named twice", i,
                                 output_name(bit));
        seen |= bit;

        int binary = binary_default;
        const json_t *params = member(o, "parameters");
        if (params) {
            const json_t *b;
            if (!json_is_object(params))
                return nd_proto_fail(err, 400, "outputs[%zu].parameters: expected an object, "
                                               "got %s",
                                     i, nd_json_type_name(params));
            if ((b = member(params, "binary_data"))) {
                if (!json_is_boolean(b))
                    return nd_proto_fail(err, 400,
                                         "outputs[%zu].parameters.binary_data: expected a "
                                         "boolean, got %s",
                                         i, nd_json_type_name(b));
                binary = json_is_true(b);
            }
            const int k = output_index(bit);
            nd_v2_shm_ref *ref = &r->out_shm[k];
            if ((rc = read_shm(params, "outputs", i, ref, err)))
                return rc;
            if (ref->region[0]) {
                const uint64_t need = nd_v2_output_bytes(&r->req, k);
                if (ref->byte_size < need)
                    return nd_proto_fail(err, 400,
                                         "outputs[%zu].parameters.shared_memory_byte_size=%llu: "
                                         "%s is %llu bytes",
                                         i, (unsigned long long)ref->byte_size, output_name(bit),
                                         (unsigned long long)need);
                binary = 0; /* the values go to the region, not into the answer */
                r->nshm++;
            }
        }
        r->output_order[r->noutputs++] = bit;
        if (binary)
            r->binary_outputs |= bit;
    }
    return 0;
}

uint64_t nd_v2_output_bytes(const nd_request *req, int k)
{
    if (k == ND_V2_OUT_Y)
        return (uint64_t)req->elems * nd_dtype_size(req->dtype);
    return (uint64_t)nd_request_stat_rows(req) * sizeof(float);
}

/* JSON has no bfloat16 (as Triton says); a BF16 y must be answered in binary (or go to shared
 * memory). */
static int check_bf16_output(const nd_v2_request *r, const json_t *outs, nd_error *err)
{
    if (r->req.dtype != ND_BFLOAT16 || (r->binary_outputs & ND_OUT_Y) ||
        r->out_shm[ND_V2_OUT_Y].region[0])
        return 0;
    for (int k = 0; k < r->noutputs; k++) {
        if (r->output_order[k] != ND_OUT_Y)
            continue;
        if (outs && json_array_size(outs) > 0)
            return nd_proto_fail(err, 400,
                                 "outputs[%d]: a BF16 y travels only as binary; set its "
                                 "parameters.binary_data to true (or the request's "
                                 "parameters.binary_data_output)",
                                 k);
        return nd_proto_fail(err, 400,
                             "outputs: a BF16 y travels only as binary; set "
                             "parameters.binary_data_output to true (or ask for y with "
                             "parameters.binary_data true)");
    }
    return 0;
}

/* ======================================================================== parse */

int nd_v2_parse_infer(nd_op op, const char *body, size_t len, const char *header_len,
                      int64_t max_elems, nd_v2_request *out, nd_error *err)
{
    nd_request *req = &out->req;
    nd_json_doc doc = {0};
    json_t *root;
    input in[S_COUNT];
    req_params rp = {0};
    size_t jlen = len;
    char path[48];
    int rc;

    memset(out, 0, sizeof *out);
    memset(in, 0, sizeof in);
    for (int s = 0; s < S_COUNT; s++)
        in[s].index = -1;
    if ((rc = nd_request_begin(req, op, ND_WIRE_JSON, err)))
        return rc;
    if (!body) { /* nothing to read, whatever len says */
        body = "";
        len = 0;
    }
    if (header_len && (rc = read_header_len(header_len, len, &jlen, err)))
        return rc;

    if ((rc = nd_json_doc_load(&doc, ND_JSON_V2, body, jlen, err)))
        goto fail;
    root = doc.root;
    if (!json_is_object(root)) {
        rc = nd_proto_fail(err, 400, "body: expected a JSON object, got %s",
                           nd_json_type_name(root));
        goto fail;
    }

    /* ---- id and request parameters ---- */
    const json_t *id = member(root, "id");
    if (id) {
        if (!json_is_string(id)) {
            rc = nd_proto_fail(err, 400, "id: expected a string, got %s", nd_json_type_name(id));
            goto fail;
        }
        if (json_string_length(id) >= ND_V2_ID_MAX) {
            rc = nd_proto_fail(err, 400, "id: %zu bytes, more than the %d allowed",
                               json_string_length(id), ND_V2_ID_MAX - 1);
            goto fail;
        }
        /* jansson refuses \u0000 in strings (no JSON_ALLOW_NUL): the id is a C string */
        memcpy(out->id, json_string_value(id), json_string_length(id) + 1);
        out->has_id = 1;
    }
    const json_t *params = member(root, "parameters");
    if (params && (rc = read_parameters(params, out, &rp, err)))
        goto fail;

    /* ---- inputs: names, datatypes, shapes ---- */
    const json_t *inputs = member(root, "inputs");
    if (!inputs) {
        rc = nd_proto_fail(err, 400, "inputs: required (an array with at least the input x)");
        goto fail;
    }
    if (!json_is_array(inputs)) {
        rc = nd_proto_fail(err, 400, "inputs: expected an array of objects, got %s",
                           nd_json_type_name(inputs));
        goto fail;
    }
    for (size_t i = 0; i < json_array_size(inputs); i++)
        if ((rc = read_input(&doc, op, json_array_get(inputs, i), i, in, err)))
            goto fail;
    if (in[S_X].index < 0) {
        rc = nd_proto_fail(err, 400, "inputs: no input named \"x\" (required)");
        goto fail;
    }
    const input *x = &in[S_X];
    for (int s = 0; s < S_COUNT; s++)
        if (in[s].index >= 0 && in[s].dtype != x->dtype) {
            rc = nd_proto_fail(err, 400,
                               "inputs[%d].datatype: %s, but x is %s; every input must have x's "
                               "datatype",
                               in[s].index, nd_v2_datatype_name(in[s].dtype),
                               nd_v2_datatype_name(x->dtype));
            goto fail;
        }
    for (int s = 0; s < S_COUNT; s++)
        if (in[s].index >= 0 && in[s].dtype == ND_BFLOAT16 && in[s].data) {
            rc = nd_proto_fail(err, 400,
                               "inputs[%d].data: BF16 travels only as binary, as in Triton (JSON "
                               "has no bfloat16): send the values after the JSON with "
                               "parameters.binary_data_size",
                               in[s].index);
            goto fail;
        }
    if (req->params[0])
        for (int s = S_GAMMA; s < S_COUNT; s++)
            if (in[s].index >= 0) {
                rc = nd_proto_fail(err, 400,
                                   "parameters.params: cannot be combined with input %s "
                                   "(inputs[%d]); send one or the other",
                                   slots[s].name, in[s].index);
                goto fail;
            }

    /* ---- x's view, as the /v1 parsers make it ---- */
    req->dtype = x->dtype;
    req->ndim = x->ndim;
    memcpy(req->shape, x->shape, sizeof x->shape);
    if ((rc = nd_request_finish(req, rp.has_axis, rp.axis, max_elems, err))) {
        /* its messages start with the field they are about: "axis..." or "shape ..." */
        if (!strncmp(err ? err->msg : "", "axis", 4))
            rc = prefixed(rc, err, "parameters.");
        else {
            snprintf(path, sizeof path, "inputs[%d].", x->index);
            rc = prefixed(rc, err, path);
        }
        goto fail;
    }
    if (op == ND_OP_PRELU && !req->params[0] && in[S_ALPHA].index < 0) {
        rc = nd_proto_fail(err, 400, "inputs: prelu needs an input named \"alpha\" (or a "
                                     "registered parameter set named in parameters.params)");
        goto fail;
    }
    for (int s = S_GAMMA; s < S_COUNT; s++)
        if (in[s].index >= 0 && (rc = check_param_shape(req, s, &in[s], err)))
            goto fail;

    /* ---- outputs (after the dtype, which decides whether y may be JSON) ---- */
    const json_t *outs = member(root, "outputs");
    if ((rc = read_outputs(outs, out, rp.binary_output, err)))
        goto fail;
    if ((rc = check_bf16_output(out, outs, err)))
        goto fail;

    /* ---- where the values are: the binary region, in input order, or "data" ---- */
    const uint64_t esize = nd_dtype_size(req->dtype);
    const uint64_t region = (uint64_t)(len - jlen);
    uint64_t offset[S_COUNT] = {0}; /* binary: from the region's start; JSON: in req->owned */
    uint64_t binary_total = 0;
    size_t owned_total = 0;
    for (size_t i = 0; i < json_array_size(inputs); i++) {
        int s = 0;
        while (in[s].index != (int)i)
            s++;
        const input *t = &in[s];
        const int64_t n = shape_elems(t);
        const uint64_t bytes = (uint64_t)n * esize; /* x: checked by nd_request_finish */
        char shp[ND_MAX_DIMS * 21 + 4];
        if (t->shm.region[0]) {
            if (t->shm.byte_size != bytes) {
                nd_shape_str(t->shape, t->ndim, shp, sizeof shp);
                rc = nd_proto_fail(err, 400,
                                   "inputs[%zu].parameters.shared_memory_byte_size=%llu: shape "
                                   "%s of %s is %llu bytes",
                                   i, (unsigned long long)t->shm.byte_size, shp,
                                   nd_v2_datatype_name(req->dtype), (unsigned long long)bytes);
                goto fail;
            }
            out->in_shm[slot_shm[s]] = t->shm; /* the server sets the pointer */
            out->nshm++;
            continue;
        }
        if (t->binary_size >= 0) {
            if (!header_len) {
                rc = nd_proto_fail(err, 400,
                                   "inputs[%zu].parameters.binary_data_size: binary data needs "
                                   "the Inference-Header-Content-Length header (the length of "
                                   "the body's JSON part)",
                                   i);
                goto fail;
            }
            if ((uint64_t)t->binary_size != bytes) {
                nd_shape_str(t->shape, t->ndim, shp, sizeof shp);
                rc = nd_proto_fail(err, 400,
                                   "inputs[%zu].parameters.binary_data_size=%lld: shape %s of %s "
                                   "is %llu bytes",
                                   i, (long long)t->binary_size, shp,
                                   nd_v2_datatype_name(req->dtype), (unsigned long long)bytes);
                goto fail;
            }
            offset[s] = binary_total;
            binary_total += bytes; /* at most four tensors of at most 2^63 bytes: no overflow */
            continue;
        }
        if (!t->data) {
            rc = nd_proto_fail(err, 400,
                               "inputs[%zu].data: required (or parameters.binary_data_size, with "
                               "the values after the JSON, or parameters.shared_memory_region)",
                               i);
            goto fail;
        }
        snprintf(path, sizeof path, "inputs[%zu].data", i);
        if ((rc = nd_json_tensor_check(t->data, t->shape, t->ndim, n, path, err)))
            goto fail;
        /* the structure matched, so there is at least one JSON number per element: the block
         * is bounded by the body's size */
        offset[s] = owned_total;
        owned_total += align64((size_t)bytes);
    }
    if (binary_total != region) { /* only with the header: without it both are 0 */
        rc = nd_proto_fail(err, 400,
                           "binary data: the inputs' binary_data_size add up to %llu bytes, but "
                           "%llu bytes follow the %zu-byte JSON part "
                           "(Inference-Header-Content-Length)",
                           (unsigned long long)binary_total, (unsigned long long)region, jlen);
        goto fail;
    }

    /* ---- the values ---- */
    if (owned_total) {
        req->owned = aligned_alloc(64, owned_total);
        if (!req->owned) {
            rc = nd_proto_fail(err, 500, "out of memory for %zu bytes", owned_total);
            goto fail;
        }
    }
    const void *ptr[S_COUNT] = {0};
    for (int s = 0; s < S_COUNT; s++) {
        const input *t = &in[s];
        if (t->index < 0 || t->shm.region[0])
            continue;
        if (t->binary_size >= 0) {
            ptr[s] = body + jlen + offset[s];
            continue;
        }
        char *dst = (char *)req->owned + offset[s];
        snprintf(path, sizeof path, "inputs[%d].data", t->index);
        if ((rc = nd_json_tensor_fill(t->data, t->shape, t->ndim, req->dtype, dst, path, err)))
            goto fail;
        ptr[s] = dst;
    }
    req->wire = x->binary_size >= 0 || x->shm.region[0] ? ND_WIRE_BINARY : ND_WIRE_JSON;
    req->x = ptr[S_X];
    req->gamma = op == ND_OP_RMSNORM ? ptr[S_WEIGHT] : ptr[S_GAMMA];
    req->beta = ptr[S_BETA];
    if (in[S_ALPHA].index >= 0) {
        req->alpha = ptr[S_ALPHA];
        req->alpha_count = in[S_ALPHA].shape[0];
    }

    nd_json_doc_free(&doc);
    return 0;

fail:
    nd_json_doc_free(&doc);
    nd_v2_request_free(out);
    memset(out, 0, sizeof *out);
    return rc;
}

void nd_v2_request_free(nd_v2_request *r)
{
    if (!r)
        return;
    nd_request_free(&r->req);
    r->req.x = r->req.gamma = r->req.beta = r->req.alpha = NULL;
}

/* ======================================================================== encode */

/* One output of an answer. */
typedef struct answer_output {
    const char *name;
    nd_dtype dtype;
    const void *data;
    int64_t n;
    int ndim;
    const int64_t *shape;
    int binary;
    const nd_v2_shm_ref *shm; /* the output went to this region; NULL when it did not */
} answer_output;

int nd_v2_encode_infer(const nd_v2_request *r, const void *y, const float *mean,
                       const float *rstd, char **out, size_t *out_len, size_t *json_len)
{
    return nd_v2_encode_infer_room(r, (void *)y, 0, mean, rstd, out, out_len, json_len);
}

int nd_v2_encode_infer_room(const nd_v2_request *r, void *y, size_t y_room, const float *mean,
                            const float *rstd, char **out, size_t *out_len, size_t *json_len)
{
    const nd_request *req = &r->req;
    const int64_t rows = nd_request_stat_rows(req);
    /* The statistics have x's shape without its last dimension: one per row; [1] for a rank-1 x
     * rather than a scalar [], which some clients do not take. */
    const int64_t one = 1;
    const int64_t *stat_shape = req->ndim > 1 ? req->shape : &one;
    const int stat_ndim = req->ndim > 1 ? req->ndim - 1 : 1;
    unsigned order[NOUTPUTS];
    int norder = 0;
    answer_output o[NOUTPUTS];
    int no = 0;

    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (json_len)
        *json_len = 0;

    if (r->noutputs > 0) {
        for (int k = 0; k < r->noutputs && k < NOUTPUTS; k++)
            order[norder++] = r->output_order[k];
    } else { /* a request not made by nd_v2_parse_infer: what req.outputs says */
        for (int k = 0; k < NOUTPUTS; k++)
            if (req->outputs & outputs[k].bit)
                order[norder++] = outputs[k].bit;
    }
    for (int k = 0; k < norder; k++) {
        answer_output *a = &o[no];
        const nd_v2_shm_ref *shm = &r->out_shm[output_index(order[k])];
        a->name = output_name(order[k]);
        a->shm = shm->region[0] ? shm : NULL;
        a->binary = !a->shm && (r->binary_outputs & order[k]) != 0;
        if (order[k] == ND_OUT_Y) {
            a->dtype = req->dtype;
            a->data = y;
            a->n = req->elems;
            a->ndim = req->ndim;
            a->shape = req->shape;
        } else {
            a->dtype = ND_FLOAT32;
            a->data = order[k] == ND_OUT_MEAN ? (const void *)mean : (const void *)rstd;
            a->n = rows;
            a->ndim = stat_ndim;
            a->shape = stat_shape;
            if (rows <= 0 || (order[k] == ND_OUT_MEAN && req->op != ND_OP_LAYERNORM))
                continue;
        }
        /* an output not computed is left out, as nd_proto_encode_json does; one in shared
         * memory was written there (its data pointer may be NULL) */
        if (a->data || a->shm)
            no++;
    }

    /* Upper bounds, so that the writing below needs no checks: the JSON part (fixed text, the id
     * escaped, then per output its fixed text, shape, and numbers or binary size) and the binary
     * outputs' bytes. */
    const size_t idlen = r->has_id ? strnlen(r->id, sizeof r->id) : 0;
    size_t cap = 128 + strlen(nd_op_name(req->op)) + 2 + 6 * idlen, bin = 0;
    int nbinary = 0, y_binary = 0;
    for (int k = 0; k < no; k++) {
        size_t bytes, text = 48;
        if (__builtin_mul_overflow((size_t)o[k].n, nd_dtype_size(o[k].dtype), &bytes))
            return -1;
        if (o[k].shm) {
            text = 96 + 6 * strnlen(o[k].shm->region, sizeof o[k].shm->region);
        } else if (o[k].binary) {
            nbinary++;
            y_binary |= o[k].data == y;
            if (__builtin_add_overflow(bin, bytes, &bin))
                return -1;
        } else if (__builtin_mul_overflow((size_t)o[k].n, (size_t)ND_JSON_NUMBER_MAX, &text))
            return -1;
        if (__builtin_add_overflow(cap, text + 96 + (size_t)o[k].ndim * 21, &cap))
            return -1;
    }
    /* The answer in y's own buffer: the JSON part goes into the room before y, and y's bytes are
     * already where they belong (no allocation, no copy of y). */
    const int in_room = y_room > 0 && nbinary == 1 && y_binary && cap <= y_room;
    char *buf = NULL;
    if (in_room)
        buf = (char *)y - y_room;
    else if (__builtin_add_overflow(cap, bin, &cap) || !(buf = malloc(cap + 1)))
        return -1;

    char *p = buf;
    p += sprintf(p, "{\"model_name\":\"%s\",\"model_version\":\"%s\"", nd_op_name(req->op),
                 ND_V2_VERSION);
    if (r->has_id) {
        p += sprintf(p, ",\"id\":");
        p = nd_json_put_string(p, r->id, idlen);
    }
    p += sprintf(p, ",\"outputs\":[");
    for (int k = 0; k < no; k++) {
        const answer_output *a = &o[k];
        p += sprintf(p, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":[", k ? "," : "",
                     a->name, nd_v2_datatype_name(a->dtype));
        for (int d = 0; d < a->ndim; d++)
            p += sprintf(p, "%s%lld", d ? "," : "", (long long)a->shape[d]);
        if (a->shm) {
            p += sprintf(p, "],\"parameters\":{\"shared_memory_region\":");
            p = nd_json_put_string(p, a->shm->region,
                                   strnlen(a->shm->region, sizeof a->shm->region));
            p += sprintf(p, ",\"shared_memory_byte_size\":%zu}}",
                         (size_t)a->n * nd_dtype_size(a->dtype));
        } else if (a->binary) {
            p += sprintf(p, "],\"parameters\":{\"binary_data_size\":%zu}}",
                         (size_t)a->n * nd_dtype_size(a->dtype));
        } else {
            p += sprintf(p, "],\"data\":[");
            p = nd_json_put_numbers(p, a->dtype, a->data, a->n);
            p += sprintf(p, "]}");
        }
    }
    p += sprintf(p, "]}");
    const size_t jl = (size_t)(p - buf);
    if (in_room) {
        char *start = (char *)y - jl;
        memmove(start, buf, jl);
        *out = start;
        if (out_len)
            *out_len = jl + bin;
        if (json_len)
            *json_len = jl;
        return 0;
    }
    for (int k = 0; k < no; k++) {
        if (!o[k].binary)
            continue;
        size_t bytes = (size_t)o[k].n * nd_dtype_size(o[k].dtype);
        memcpy(p, o[k].data, bytes);
        p += bytes;
    }
    *p = '\0'; /* for callers that print an all-JSON answer; not counted */
    *out = buf;
    if (out_len)
        *out_len = (size_t)(p - buf);
    if (json_len)
        *json_len = jl;
    return 0;
}

/* ======================================================================== documents */

/* Dumps and releases doc; NULL when doc is (a json_pack that failed). */
static char *dump(json_t *doc)
{
    char *s;
    if (!doc)
        return NULL;
    s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    return s;
}

/* json_array_append_new that also fails when v is NULL (jansson's own calls take NULL as a
 * failed allocation and return -1; kept explicit for the reader). */
static int append(json_t *arr, json_t *v)
{
    return v ? json_array_append_new(arr, v) : -1;
}

char *nd_v2_server_metadata_json(const char *version, int system_shared_memory,
                                 int cuda_shared_memory)
{
    json_t *doc = json_pack("{s:s, s:s, s:[s,s,s]}", "name", "normd", "version",
                            version ? version : "", "extensions", "binary_tensor_data",
                            "statistics", "model_configuration");
    json_t *ext = doc ? json_object_get(doc, "extensions") : NULL;
    if (doc && ((system_shared_memory && append(ext, json_string("system_shared_memory"))) ||
                (cuda_shared_memory && append(ext, json_string("cuda_shared_memory"))))) {
        json_decref(doc);
        return NULL;
    }
    return dump(doc);
}

/* x and y have any rank from 1 to ND_MAX_DIMS; a v2 shape cannot say "any rank", so they are
 * described as the common [-1,-1] (rows, columns). The statistics have one value per row. */
static json_t *dims_x(void)
{
    return json_pack("[i,i]", -1, -1);
}

static json_t *dims_vec(void)
{
    return json_pack("[i]", -1);
}

/*
 * The tensors of op as metadata (config = 0: {"name","datatype","shape"}) or model configuration
 * entries (config = 1: {"name","data_type","dims"}, parameter inputs "optional"). Metadata allows
 * one datatype per tensor: FP32 is said, and FP16 and BF16 are accepted as well (the
 * configuration's parameters.datatypes lists them); mean and rstd are always FP32.
 */
static json_t *tensor_list(nd_op op, int want_outputs, int config)
{
    json_t *arr = json_array();
    const char *ktype = config ? "data_type" : "datatype";
    const char *kdims = config ? "dims" : "shape";
    const char *fp32 = config ? "TYPE_FP32" : "FP32";
    if (!arr)
        return NULL;
    if (!want_outputs) {
        for (int s = 0; s < S_COUNT; s++) {
            if (!(slots[s].ops & OP(op)))
                continue;
            json_t *t = json_pack("{s:s, s:s, s:o}", "name", slots[s].name, ktype, fp32, kdims,
                                  s == S_X ? dims_x() : dims_vec());
            if (t && config && s != S_X && json_object_set_new(t, "optional", json_true())) {
                json_decref(t);
                t = NULL;
            }
            if (append(arr, t))
                goto fail;
        }
        return arr;
    }
    for (int k = 0; k < NOUTPUTS; k++) {
        if (!(outputs[k].ops & OP(op)))
            continue;
        if (append(arr, json_pack("{s:s, s:s, s:o}", "name", outputs[k].name, ktype, fp32, kdims,
                                  outputs[k].bit == ND_OUT_Y ? dims_x() : dims_vec())))
            goto fail;
    }
    return arr;
fail:
    json_decref(arr);
    return NULL;
}

char *nd_v2_model_metadata_json(nd_op op)
{
    if ((unsigned)op >= ND_OP_COUNT)
        return NULL;
    return dump(json_pack("{s:s, s:[s], s:s, s:o, s:o}", "name", nd_op_name(op), "versions",
                          ND_V2_VERSION, "platform", "normd", "inputs", tensor_list(op, 0, 0),
                          "outputs", tensor_list(op, 1, 0)));
}

char *nd_v2_model_config_json(nd_op op, const nd_v2_model_policy *policy)
{
    char rows[24];
    const nd_v2_model_policy none = {0};
    if ((unsigned)op >= ND_OP_COUNT)
        return NULL;
    if (!policy)
        policy = &none;
    snprintf(rows, sizeof rows, "%lld", (long long)policy->max_batch_rows);
    /* max_batch_size 0: normd batches by rows of any request shape, not along a batch dimension
     * the client sees; the row limit and the queue delay are reported as they are. */
    return dump(json_pack(
        "{s:s, s:s, s:s, s:i, s:o, s:o, s:{s:I, s:{s:i}}, s:{s:{s:s}, s:{s:s}}}", "name",
        nd_op_name(op), "platform", "normd", "backend", "normd", "max_batch_size", 0, "input",
        tensor_list(op, 0, 1), "output", tensor_list(op, 1, 1), "dynamic_batching",
        "max_queue_delay_microseconds", (json_int_t)policy->max_delay_us, "default_queue_policy",
        "max_queue_size", policy->queue_limit > 0 ? policy->queue_limit : 0, "parameters",
        "datatypes", "string_value", "FP32,FP16,BF16", "max_batch_rows", "string_value", rows));
}

/* JSON integers are signed 64-bit in jansson; counters past that are shown as its maximum. */
static json_int_t u64(uint64_t v)
{
    return v > (uint64_t)INT64_MAX ? (json_int_t)INT64_MAX : (json_int_t)v;
}

static json_t *duration(uint64_t count, uint64_t ns)
{
    return json_pack("{s:I, s:I}", "count", u64(count), "ns", u64(ns));
}

char *nd_v2_stats_json(const nd_op *ops, const nd_v2_stats *stats, int nops)
{
    json_t *list = json_array();
    if (!list)
        return NULL;
    for (int k = 0; k < nops; k++) {
        const nd_v2_stats *st = &stats[k];
        if ((unsigned)ops[k] >= ND_OP_COUNT)
            continue;
        json_t *m = json_pack(
            "{s:s, s:s, s:I, s:I, s:I, s:{s:o, s:o, s:o, s:o, s:o, s:o}, s:[]}", "name",
            nd_op_name(ops[k]), "version", ND_V2_VERSION, "last_inference",
            u64(st->last_inference_ms), "inference_count", u64(st->inference_count),
            "execution_count", u64(st->execution_count), "inference_stats", "success",
            duration(st->success_count, st->success_ns), "fail",
            duration(st->fail_count, st->fail_ns), "queue", duration(st->queue_count, st->queue_ns),
            "compute_input", duration(st->compute_input_count, st->compute_input_ns),
            "compute_infer", duration(st->compute_infer_count, st->compute_infer_ns),
            "compute_output", duration(st->compute_output_count, st->compute_output_ns),
            "batch_stats");
        if (append(list, m)) {
            json_decref(list);
            return NULL;
        }
    }
    return dump(json_pack("{s:o}", "model_stats", list));
}

/* ---- the CUDA shared memory extension's register body ---- */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

long nd_b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t pad = 0;
    while (pad < 2 && n > pad && in[n - 1 - pad] == '=')
        pad++;
    if (pad && n % 4)
        return -1; /* padded text comes in quads */
    n -= pad;
    if (n % 4 == 1)
        return -1; /* one character holds only six bits: no whole byte */
    size_t got = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (got == cap)
                return -1;
            out[got++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0)
        return -1; /* bits left over must be zero (a canonical encoding) */
    if (pad && (n % 4) + pad != 4)
        return -1;
    return (long)got;
}

/* A required non-negative integer member of doc. */
static int register_int(const json_t *doc, const char *key, int64_t *v, nd_error *err)
{
    const json_t *n = json_object_get(doc, key);
    if (!n)
        return nd_proto_fail(err, 400, "%s: required", key);
    if (!json_is_integer(n) || json_integer_value(n) < 0)
        return nd_proto_fail(err, 400, "%s: expected a non-negative integer", key);
    *v = (int64_t)json_integer_value(n);
    return 0;
}

int nd_v2_parse_cuda_register(const char *body, size_t len, unsigned char *handle, size_t cap,
                              size_t *handle_len, int64_t *device_id, uint64_t *byte_size,
                              nd_error *err)
{
    json_error_t jerr;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return nd_proto_fail(err, 400, "body: not JSON (%s); expected {\"raw_handle\": "
                                       "{\"b64\": \"...\"}, \"device_id\": 0, "
                                       "\"byte_size\": N}", jerr.text);
    int st = 0;
    int64_t size = 0;
    const json_t *raw = json_object_get(doc, "raw_handle");
    const json_t *b64 = json_is_object(raw) ? json_object_get(raw, "b64") : NULL;
    if (!json_is_object(doc))
        st = nd_proto_fail(err, 400, "body: expected a JSON object");
    else if (!json_is_string(b64))
        st = nd_proto_fail(err, 400, "raw_handle: required, {\"b64\": \"<base64 of the "
                                     "cudaIpcMemHandle_t>\"}");
    else if (!(st = register_int(doc, "device_id", device_id, err)) &&
             !(st = register_int(doc, "byte_size", &size, err))) {
        long n = nd_b64_decode(json_string_value(b64), json_string_length(b64), handle, cap);
        if (n < 0)
            st = nd_proto_fail(err, 400, "raw_handle.b64: not the base64 of a "
                                         "cudaIpcMemHandle_t (%zu bytes at most)", cap);
        else {
            *handle_len = (size_t)n;
            *byte_size = (uint64_t)size;
        }
    }
    json_decref(doc);
    return st;
}
