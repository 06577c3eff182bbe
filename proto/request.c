/*
 * request.c - what both wire formats share: request validation and the (outer, mid, inner) view,
 * the JSON answer encoder, the error body, and small helpers for the server.
 *
 * Messages name the field and say what was wrong with it, in the words the client used
 * ("shape[1]=0: every dimension must be at least 1"); user-supplied strings are shortened and
 * stripped of control bytes before they are echoed.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_num.h"
#include "request.h"

/* ======================================================================== errors and helpers */

int nd_proto_fail(nd_error *err, int status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void nd_proto_quote(char *out, size_t size, const char *s, size_t len)
{
    const size_t keep = 40;
    size_t n = 0;
    if (size == 0)
        return;
    for (size_t i = 0; i < len && i < keep && n + 1 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (c < 0x20 || c == 0x7f || c == '"' || c == '\\') ? '?' : (char)c;
    }
    if (len > keep && n + 4 < size) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

void nd_request_free(nd_request *req)
{
    if (!req)
        return;
    free(req->owned);
    req->owned = NULL;
}

int nd_request_begin(nd_request *req, nd_op op, nd_wire wire, nd_error *err)
{
    memset(req, 0, sizeof *req);
    if ((unsigned)op >= ND_OP_COUNT)
        return nd_proto_fail(err, 400, "unknown operator %d", (int)op);
    req->op = op;
    req->wire = wire;
    req->dtype = ND_FLOAT32;
    req->outputs = ND_OUT_Y;
    return 0;
}

/* ======================================================================== metadata checks */

int nd_request_set_dtype(nd_request *req, const char *name, nd_error *err)
{
    nd_dtype dt;
    if (nd_dtype_from_name(name, &dt) != 0) {
        char q[64];
        nd_proto_quote(q, sizeof q, name, strlen(name));
        return nd_proto_fail(err, 400,
                             "dtype: unknown \"%s\"; expected float32, float16 or bfloat16", q);
    }
    req->dtype = dt;
    return 0;
}

int nd_request_add_output(nd_request *req, const char *name, size_t len, const char *where,
                          nd_error *err)
{
    char q[64];
    if (len == 1 && name[0] == 'y') {
        req->outputs |= ND_OUT_Y;
        return 0;
    }
    if (len == 4 && memcmp(name, "mean", 4) == 0) {
        if (req->op != ND_OP_LAYERNORM)
            return nd_proto_fail(err, 400, "%s: \"mean\" is produced by layernorm only, not %s",
                                 where, nd_op_name(req->op));
        req->outputs |= ND_OUT_MEAN;
        return 0;
    }
    if (len == 4 && memcmp(name, "rstd", 4) == 0) {
        if (!nd_op_is_norm(req->op))
            return nd_proto_fail(err, 400,
                                 "%s: \"rstd\" is produced by layernorm and rmsnorm only, not %s",
                                 where, nd_op_name(req->op));
        req->outputs |= ND_OUT_RSTD;
        return 0;
    }
    nd_proto_quote(q, sizeof q, name, len);
    return nd_proto_fail(err, 400, "%s: unknown output \"%s\"; expected %s", where, q,
                         req->op == ND_OP_LAYERNORM ? "y, mean or rstd"
                         : req->op == ND_OP_RMSNORM ? "y or rstd"
                                                    : "y");
}

int nd_name_ok(const char *name, size_t len)
{
    int ok = len >= 1 && len < ND_PARAMS_NAME_MAX;
    for (size_t i = 0; ok && i < len; i++) {
        char c = name[i];
        ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '.' || c == '-';
    }
    return ok;
}

int nd_request_set_params(nd_request *req, const char *name, size_t len, nd_error *err)
{
    if (!nd_name_ok(name, len)) {
        char q[64];
        nd_proto_quote(q, sizeof q, name, len);
        return nd_proto_fail(err, 400,
                             "params: \"%s\" is not a valid name (1 to %d characters of "
                             "A-Z a-z 0-9 _ . -)",
                             q, ND_PARAMS_NAME_MAX - 1);
    }
    memcpy(req->params, name, len);
    req->params[len] = '\0';
    return 0;
}

int nd_request_set_eps(nd_request *req, double eps, nd_error *err)
{
    float f = (float)eps;
    if (!isfinite(eps) || !(eps > 0))
        return nd_proto_fail(err, 400, "eps=%g: must be a finite number greater than 0", eps);
    if (!(f > 0) || isinf(f))
        return nd_proto_fail(err, 400, "eps=%g: does not fit a positive float32", eps);
    req->eps = f;
    return 0;
}

int nd_request_check_dim(int i, int64_t v, nd_error *err)
{
    if (v < 1)
        return nd_proto_fail(err, 400,
                             "shape[%d]=%lld: every dimension must be at least 1", i,
                             (long long)v);
    return 0;
}

void nd_shape_str(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t n = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    n += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)shape[i]);
    if (n < size)
        snprintf(buf + n, size - n, "]");
}

void nd_request_shape_str(const nd_request *req, char *buf, size_t size)
{
    nd_shape_str(req->shape, req->ndim, buf, size);
}

int nd_request_finish(nd_request *req, int has_axis, int64_t axis, int64_t max_elems,
                      nd_error *err)
{
    const int nd = req->ndim;
    const char *opname = nd_op_name(req->op);
    int64_t elems = 1;
    int64_t bytes;
    char s[ND_MAX_DIMS * 21 + 4];

    if (nd < 1 || nd > ND_MAX_DIMS)
        return nd_proto_fail(err, 400, "shape: must have 1 to %d dimensions, got %d",
                             ND_MAX_DIMS, nd);
    for (int i = 0; i < nd; i++) {
        int rc = nd_request_check_dim(i, req->shape[i], err);
        if (rc)
            return rc;
        if (__builtin_mul_overflow(elems, req->shape[i], &elems)) {
            nd_request_shape_str(req, s, sizeof s);
            return nd_proto_fail(err, 400, "shape %s: the element count overflows 64 bits", s);
        }
    }
    if (__builtin_mul_overflow(elems, (int64_t)nd_dtype_size(req->dtype), &bytes)) {
        nd_request_shape_str(req, s, sizeof s);
        return nd_proto_fail(err, 400, "shape %s: the byte count overflows 64 bits", s);
    }
    if (max_elems > 0 && elems > max_elems) {
        nd_request_shape_str(req, s, sizeof s);
        return nd_proto_fail(err, 413,
                             "shape %s: x has %lld elements, more than the limit of %lld", s,
                             (long long)elems, (long long)max_elems);
    }
    req->elems = elems;

    switch (req->op) {
    case ND_OP_LAYERNORM:
    case ND_OP_RMSNORM:
        if (has_axis && axis != -1 && axis != nd - 1)
            return nd_proto_fail(err, 400,
                                 "axis=%lld: %s normalizes over the last dimension only "
                                 "(axis -1 or %d)",
                                 (long long)axis, opname, nd - 1);
        req->axis = nd - 1;
        req->mid = req->shape[nd - 1];
        req->outer = elems / req->mid;
        req->inner = 1;
        if (req->eps == 0)
            req->eps = req->op == ND_OP_LAYERNORM ? ND_LAYERNORM_EPS_DEFAULT
                                                  : ND_RMSNORM_EPS_DEFAULT;
        break;
    case ND_OP_SOFTMAX:
    case ND_OP_LOG_SOFTMAX: {
        int64_t a = has_axis ? axis : -1;
        if (a < -nd || a >= nd)
            return nd_proto_fail(err, 400,
                                 "axis=%lld is out of range for a tensor of rank %d "
                                 "(expected %d..%d)",
                                 (long long)axis, nd, -nd, nd - 1);
        if (a < 0)
            a += nd;
        req->axis = (int)a;
        req->outer = 1;
        for (int i = 0; i < a; i++)
            req->outer *= req->shape[i];
        req->mid = req->shape[a];
        req->inner = elems / req->outer / req->mid;
        break;
    }
    case ND_OP_PRELU:
        if (has_axis)
            return nd_proto_fail(err, 400, "axis: not accepted by prelu");
        req->axis = nd - 1;
        req->outer = req->shape[0];
        req->mid = nd >= 2 ? req->shape[1] : 1;
        req->inner = elems / req->outer / req->mid;
        break;
    default:
        return nd_proto_fail(err, 400, "unknown operator %d", (int)req->op);
    }
    req->outputs |= ND_OUT_Y;
    return 0;
}

/* ======================================================================== small public helpers */

int64_t nd_request_stat_rows(const nd_request *req)
{
    return nd_op_is_norm(req->op) ? req->outer : 0;
}

void nd_proto_format_shape(const nd_request *req, char *buf, size_t size)
{
    size_t n = 0;
    if (size == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < req->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "",
                              (long long)req->shape[i]);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, cp = c & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

char *nd_json_put_string(char *p, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    *p++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t len;
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            p += sprintf(p, "\\u%04x", c);
            i++;
        } else if ((len = utf8_len(s + i, n - i)) != 0) {
            memcpy(p, s + i, len);
            p += len;
            i += len;
        } else {
            memcpy(p, "\\ufffd", 6);
            p += 6;
            i++;
        }
    }
    *p++ = '"';
    return p;
}

char *nd_proto_error_json(const char *msg)
{
    static const char head[] = "{\"error\":";
    static const char tail[] = "}";
    const char *s = msg ? msg : "unknown error";
    size_t n = strlen(s);
    /* worst case: every byte becomes \ufffd or \u00XX (6 bytes) */
    char *out = malloc(sizeof head + 2 + n * 6 + sizeof tail);
    char *p;
    if (!out)
        return NULL;
    p = out;
    memcpy(p, head, sizeof head - 1);
    p += sizeof head - 1;
    p = nd_json_put_string(p, s, n);
    memcpy(p, tail, sizeof tail);
    return out;
}

/* ======================================================================== JSON answers */

/*
 * float32 goes through Schubfach (json_num.c). float16 and bfloat16 have 65536 values each, so
 * their shortest decimals are found once per bit pattern, on first use, into a table; encoding is
 * then a copy per element. The search reads candidates back with the parser's own rounding
 * (nd_store_f64 of strtod's double), so what we print is what nd_proto_parse_json takes back bit
 * for bit: for each precision P from 1 up, printf's correctly rounded P digits and, when those
 * miss, their neighbours one unit away (at a power of two the lower half of the rounding interval
 * is half as wide, so the nearest P-digit decimal can miss while the one on the other side fits).
 * The first P that fits is the shortest: the interval holds a P-digit decimal only if it holds
 * the nearest one on one side of the value or the other.
 */
typedef struct short_str {
    char s[23];
    unsigned char len;
} short_str;

static short_str half_table[65536];
static short_str bf16_table[65536];
static pthread_once_t half_once = PTHREAD_ONCE_INIT;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

/* Whether digits * 10^exp10 reads back as h. */
static int reads_back(nd_dtype dt, uint16_t h, uint64_t digits, int exp10)
{
    char t[48];
    uint16_t back = 0;
    snprintf(t, sizeof t, "%llue%d", (unsigned long long)digits, exp10);
    nd_store_f64(dt, &back, 0, strtod(t, NULL));
    return back == (h & 0x7fffu);
}

static void table_fill(nd_dtype dt, short_str *table)
{
    for (uint32_t bits = 0; bits < 65536; bits++) {
        uint16_t h = (uint16_t)bits;
        float v = dt == ND_FLOAT16 ? nd_half_to_float(h) : nd_bf16_to_float(h);
        short_str *e = &table[bits];
        if (!isfinite(v) || v == 0) {
            /* null: JSON has no infinity or NaN; "-0.0": a reader may take "-0" as integer 0 */
            const char *t = !isfinite(v) ? "null" : signbit(v) ? "-0.0" : "0";
            e->len = (unsigned char)strlen(t);
            memcpy(e->s, t, e->len);
            continue;
        }
        uint64_t digits = 0;
        int exp10 = 0;
        for (int prec = 1; prec <= 9 && !digits; prec++) {
            char t[48];
            int x;
            /* "d.ddde+X": the nearest prec-digit decimal to |v| */
            snprintf(t, sizeof t, "%.*e", prec - 1, fabs((double)v));
            uint64_t d = (uint64_t)(t[0] - '0');
            for (int k = 2; k <= prec; k++)
                d = d * 10 + (uint64_t)(t[k] - '0');
            x = atoi(strchr(t, 'e') + 1) - (prec - 1);
            if (reads_back(dt, h, d, x))
                digits = d, exp10 = x;
            else if (d > 1 && reads_back(dt, h, d - 1, x))
                digits = d - 1, exp10 = x;
            else if (reads_back(dt, h, d + 1, x))
                digits = d + 1, exp10 = x;
        }
        e->len = (unsigned char)(nd_json_put_decimal(e->s, signbit(v) != 0, digits, exp10) - e->s);
    }
}

static void half_init(void)
{
    table_fill(ND_FLOAT16, half_table);
}

static void bf16_init(void)
{
    table_fill(ND_BFLOAT16, bf16_table);
}

_Static_assert(ND_JSON_F32_MAX + 1 <= ND_JSON_NUMBER_MAX, "a float32 and its comma");

char *nd_json_put_numbers(char *p, nd_dtype dt, const void *src, int64_t n)
{
    const char *b = src;
    if (dt == ND_FLOAT16 || dt == ND_BFLOAT16) {
        const short_str *table;
        if (dt == ND_FLOAT16) {
            pthread_once(&half_once, half_init);
            table = half_table;
        } else {
            pthread_once(&bf16_once, bf16_init);
            table = bf16_table;
        }
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 2 * i, 2); /* a plain load where aligned; src need not be */
            const short_str *e = &table[h];
            if (i)
                *p++ = ',';
            memcpy(p, e->s, e->len);
            p += e->len;
        }
        return p;
    }
    return nd_json_put_f32s(p, src, n);
}

/*
 * An answer starts with room for what numbers usually take, comma included: float32's shortest
 * have 8 or 9 digits with a sign, a point and sometimes an exponent (about 11 bytes), 16-bit ones
 * at most 8. It grows, block by block, only when a block's worst case (ND_JSON_NUMBER_MAX each)
 * might not fit. Sizing every answer for its worst case would put the 8x1024 float32 answers of
 * bench/service (about 90 KB) at 139 KB, past the 128 KiB mmap threshold that server/main.c
 * keeps: a fresh mapping per answer, its page faults, and a TLB shootdown when it is unmapped.
 */
#define JSON_NUMBER_TYPICAL 12
#define JSON_BLOCK 1024

/* An answer being written: buf[0..cap), p the end so far. */
typedef struct jout {
    char *buf, *p;
    size_t cap;
} jout;

/* Makes room for more bytes after p; 0, or -1 with the buffer released. */
static int jout_room(jout *o, size_t more)
{
    const size_t used = (size_t)(o->p - o->buf);
    size_t cap = o->cap;
    if (cap - used >= more)
        return 0;
    if (__builtin_add_overflow(used, more, &cap))
        goto fail;
    if (cap < o->cap / 2 * 3)
        cap = o->cap / 2 * 3;
    char *b = realloc(o->buf, cap);
    if (!b)
        goto fail;
    o->buf = b;
    o->p = b + used;
    o->cap = cap;
    return 0;
fail:
    free(o->buf);
    o->buf = o->p = NULL;
    return -1;
}

/* n numbers of dt from src, comma separated, a block at a time; 0 or -1 (buffer released). */
static int jout_numbers(jout *o, nd_dtype dt, const void *src, int64_t n)
{
    const size_t es = nd_dtype_size(dt);
    for (int64_t i = 0; i < n; i += JSON_BLOCK) {
        const int64_t k = n - i < JSON_BLOCK ? n - i : JSON_BLOCK;
        if (jout_room(o, (size_t)k * ND_JSON_NUMBER_MAX + 1))
            return -1;
        if (i)
            *o->p++ = ',';
        o->p = nd_json_put_numbers(o->p, dt, (const char *)src + (size_t)i * es, k);
    }
    return 0;
}

/* ,"name":[numbers] */
static int jout_stats(jout *o, const char *name, const float *v, int64_t n)
{
    if (jout_room(o, 16))
        return -1;
    o->p += sprintf(o->p, ",\"%s\":[", name);
    if (jout_numbers(o, ND_FLOAT32, v, n) || jout_room(o, 1))
        return -1;
    *o->p++ = ']';
    return 0;
}

int nd_proto_encode_json(const nd_request *req, const void *y, const float *mean,
                         const float *rstd, char **out, size_t *out_len)
{
    const int64_t n = req->elems;
    const int64_t stats = nd_request_stat_rows(req);
    const int want_mean = (req->outputs & ND_OUT_MEAN) && mean && stats > 0;
    const int want_rstd = (req->outputs & ND_OUT_RSTD) && rstd && stats > 0;
    /* the fixed text and the shape: what the sprintf calls below write, and a margin */
    const size_t extra = 64 + (size_t)ND_MAX_DIMS * 21 + 32;
    size_t count, cap;
    jout o;

    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (__builtin_add_overflow((size_t)n, (size_t)(want_mean + want_rstd) * (size_t)stats,
                               &count) ||
        __builtin_mul_overflow(count, (size_t)JSON_NUMBER_TYPICAL, &cap) ||
        __builtin_add_overflow(cap, extra, &cap))
        return -1;
    o.buf = o.p = malloc(cap);
    o.cap = cap;
    if (!o.buf)
        return -1;

    o.p += sprintf(o.p, "{\"shape\":[");
    for (int i = 0; i < req->ndim; i++)
        o.p += sprintf(o.p, "%s%lld", i ? "," : "", (long long)req->shape[i]);
    o.p += sprintf(o.p, "],\"dtype\":\"%s\",\"data\":[", nd_dtype_name(req->dtype));
    if (jout_numbers(&o, req->dtype, y, n) || jout_room(&o, 1))
        return -1;
    *o.p++ = ']';
    if (want_mean && jout_stats(&o, "mean", mean, stats))
        return -1;
    if (want_rstd && jout_stats(&o, "rstd", rstd, stats))
        return -1;
    if (jout_room(&o, 2))
        return -1;
    *o.p++ = '}';
    *o.p = '\0';
    *out = o.buf;
    if (out_len)
        *out_len = (size_t)(o.p - o.buf);
    return 0;
}
