/*
 * json_tensor.c - the JSON body with its numeric arrays scanned by us and the rest parsed by
 * jansson (json_tensor.h).
 *
 * The scan is one pass over the body. Outside the numeric arrays it only follows the structure
 * down to the sites the layout names (the root object; for v2 also the "inputs" array and its
 * objects), skipping other values loosely: jansson checks all of that when it parses the
 * envelope. Inside a numeric array it is strict and reads everything itself: numbers
 * (json_num.h), nested arrays (to any depth jansson allows), true, false, null. A string or an
 * object there is always an error for the request, so the scanner only finds its end and has
 * jansson parse the whole body as sent, which decides whether it was valid JSON.
 *
 * Why the envelope is as valid as the body: each replaced range is an array the scanner has read
 * by JSON's grammar, it begins after `"key":` and is followed by `,` or `}` (the scan insists), so
 * the integer put in its place takes the same place in the grammar and joins no neighbouring
 * token. jansson's nesting limit is kept by counting the depth in the arrays; duplicate keys,
 * bad strings and the like outside them are jansson's to find in the envelope. Whenever the body
 * turns out not to be valid, jansson parses it as sent for the message, so its line and column
 * are the client's.
 *
 * An array's tokens are doubles: numbers as themselves, the rest as quiet NaNs with a kind and a
 * payload (JSON numbers are never NaN: a real that overflows is refused). An open mark's payload
 * is the distance to its close mark, so that an entry that is an array is skipped in one step;
 * while the array is still open it links to the enclosing array's open mark instead, which makes
 * the scan's stack. A bit set beside the tokens marks the numbers written as integers, which
 * messages name ("got an integer").
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_num.h"
#include "json_tensor.h"

/* ======================================================================== tokens */

enum { K_NUMBER, K_OPEN, K_CLOSE, K_STRING, K_BOOL, K_NULL, K_OBJECT };

#define MARK_BASE 0x7ff8000000000000ull /* a quiet NaN */
#define PAYLOAD_MASK 0x0000ffffffffffffull
#define NO_PARENT PAYLOAD_MASK

static inline double mark(unsigned kind, uint64_t payload)
{
    uint64_t u = MARK_BASE | (uint64_t)kind << 48 | payload;
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static inline uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline unsigned kind(double d)
{
    return d == d ? K_NUMBER : (unsigned)(bits(d) >> 48) & 7;
}

static inline size_t payload(double d)
{
    return (size_t)(bits(d) & PAYLOAD_MASK);
}

/* The index of the token after the entry at i. */
static inline size_t next_entry(const double *tok, size_t i)
{
    return kind(tok[i]) == K_OPEN ? i + payload(tok[i]) + 1 : i + 1;
}

/* ======================================================================== storage */

static int grow_tokens(nd_json_doc *d, size_t want)
{
    size_t cap = d->tok_cap ? d->tok_cap : 64;
    while (cap < want)
        cap *= 2;
    double *tok = realloc(d->tok, cap * sizeof *tok);
    if (!tok)
        return -1;
    d->tok = tok;
    const size_t words = d->tok_cap ? (d->tok_cap + 63) / 64 : 0, nwords = (cap + 63) / 64;
    uint64_t *ints = realloc(d->ints, nwords * sizeof *ints);
    if (!ints)
        return -1;
    memset(ints + words, 0, (nwords - words) * sizeof *ints);
    d->ints = ints;
    d->tok_cap = cap;
    return 0;
}

static nd_json_tensor *add_tensor(nd_json_doc *d)
{
    if (d->nt == d->t_cap) {
        size_t cap = d->t_cap ? 2 * d->t_cap : 8;
        nd_json_tensor *t = realloc(d->t, cap * sizeof *t);
        if (!t)
            return NULL;
        d->t = t;
        d->t_cap = cap;
    }
    nd_json_tensor *t = &d->t[d->nt++];
    memset(t, 0, sizeof *t);
    return t;
}

void nd_json_doc_free(nd_json_doc *doc)
{
    if (!doc)
        return;
    json_decref(doc->root);
    free(doc->t);
    free(doc->tok);
    free(doc->ints);
    free(doc->envelope);
    memset(doc, 0, sizeof *doc);
}

/* ======================================================================== the scan */

#define MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH: a value nested deeper is refused */

typedef struct scan {
    const char *body, *end;
    nd_json_doc *doc;
    nd_json_layout layout;
    int bad;    /* certainly not valid JSON: jansson will say why */
    int exotic; /* a string or an object inside a numeric array: jansson decides validity */
    int oom;
} scan;

static inline const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* p at '"': the byte after the closing quote, NULL when the string does not close. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\')
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* Past the value at p, loosely (jansson checks it): a string, a container (brackets of both kinds
 * counted, strings skipped) or a run of bytes up to a delimiter. NULL at the end of the body. */
static const char *skip_value(const char *p, const char *end)
{
    if (p == end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < end) {
            const char c = *p;
            if (c == '"') {
                if (!(p = skip_string(p, end)))
                    return NULL;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' &&
           *p != '\r' && *p != '\t')
        p++;
    return p;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = (unsigned char)p[i], h;
        if (c - '0' < 10)
            h = c - '0';
        else if ((c | 0x20) - 'a' < 6)
            h = (c | 0x20) - 'a' + 10;
        else
            return -1;
        v = v * 16 + h;
    }
    *out = v;
    return 0;
}

/*
 * Reads the member name at p (p[0] == '"'), decoding escapes, into key (cap bytes). Returns the
 * byte after the closing quote (NULL when it does not close); *klen is the name's length, or
 * SIZE_MAX when it is longer than cap, not ASCII, or not a valid string (no site is named so, and
 * jansson judges the string in the envelope).
 */
static const char *read_key(const char *p, const char *end, char *key, size_t cap, size_t *klen)
{
    size_t n = 0;
    int ok = 1;
    for (p++; p < end;) {
        unsigned c = (unsigned char)*p++;
        if (c == '"') {
            *klen = ok ? n : SIZE_MAX;
            return p;
        }
        if (c == '\\') {
            if (p == end)
                return NULL;
            switch (*p++) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                if (end - p >= 4 && hex4(p, &c) == 0)
                    p += 4;
                else
                    ok = 0;
                break;
            default:
                ok = 0;
                break;
            }
        }
        if (!ok || c == 0 || c >= 0x80 || n == cap)
            ok = 0;
        else
            key[n++] = (char)c;
    }
    return NULL;
}

/*
 * jansson (2.14) reads one NUL byte right after a number or a literal (true, false, null) as
 * nothing: its lexer reads the byte that ends the token and puts it back, and its input buffer then
 * takes a 0 there for "empty" and reads on. So [1\0,2] is [1,2] to jansson, and to us.
 */
#define NUL_AFTER_TOKEN(p, end) ((p) < (end) && *(p) == '\0')

/*
 * Reads the array at p (p[0] == '['), whose jansson depth is depth (the root value's is 1), into
 * the document's tokens as the tensor at site. Returns the byte after its closing bracket, or
 * NULL with sc->bad (not valid JSON) or sc->oom set.
 */
static const char *scan_array(scan *sc, const char *p, int depth, size_t site)
{
    nd_json_doc *d = sc->doc;
    const char *const end = sc->end;
    const char *const begin = p;
    /* entries of the arrays at level L (0: this array's own) have depth depth + 1 + L */
    const size_t max_level = (size_t)(MAX_DEPTH - 1 - depth);
    size_t level = 0, top = 0;
    const size_t first = d->ntok;

    if (d->tok_cap - d->ntok < 2 &&
        grow_tokens(d, d->ntok + 2 + (size_t)(sc->end - p) / 8)) /* a guess; grows as needed */
        goto oom;
    double *tok = d->tok;
    uint64_t *ints = d->ints;
    size_t n = d->ntok, cap = d->tok_cap;
    size_t open = n; /* the innermost open array's mark */

#define PUSH(v)                                                                                  \
    do {                                                                                         \
        if (n == cap) {                                                                          \
            d->ntok = n;                                                                         \
            if (grow_tokens(d, n + 1))                                                           \
                goto oom;                                                                        \
            tok = d->tok;                                                                        \
            ints = d->ints;                                                                      \
            cap = d->tok_cap;                                                                    \
        }                                                                                        \
        tok[n++] = (v);                                                                          \
    } while (0)

    PUSH(mark(K_OPEN, NO_PARENT));
    p = ws(p + 1, end);
    if (p < end && *p == ']')
        goto close;

value: /* p: the start of an entry, whitespace skipped */
    if (p == end || level > max_level)
        goto bad;
    {
        const char c = *p;
        if (c == '-' || (unsigned)(c - '0') < 10) {
            /* a run of numbers joined by bare commas, the bulk of a tensor, in a tight loop;
             * anything else (whitespace, the end of the array) goes the general way at after: */
            size_t run = 0;
            for (;;) {
                double v;
                int is_int;
                if (!(p = nd_json_read_number(p, end, &v, &is_int)))
                    goto bad;
                PUSH(v);
                if (is_int)
                    ints[(n - 1) >> 6] |= 1ull << ((n - 1) & 63);
                run++;
                /* a number is always followed by a byte (nd_json_read_number) */
                if (*p == '\0' && ++p == end) /* jansson's NUL quirk: see NUL_AFTER_TOKEN */
                    goto bad;
                if (*p != ',' || end - p < 2 || (p[1] != '-' && (unsigned)(p[1] - '0') >= 10))
                    break;
                p++;
            }
            top += level == 0 ? run - 1 : 0; /* the last one is counted at after: */
        } else if (c == '[') {
            PUSH(mark(K_OPEN, open));
            open = n - 1;
            level++;
            p = ws(p + 1, end);
            if (p < end && *p == ']')
                goto close;
            goto value;
        } else if (c == '"' || c == '{') {
            sc->exotic = 1;
            if (!(p = skip_value(p, end)))
                goto bad;
            PUSH(mark(c == '"' ? K_STRING : K_OBJECT, 0));
        } else if (c == 't' && end - p >= 4 && !memcmp(p, "true", 4)) {
            p += 4;
            PUSH(mark(K_BOOL, 1));
            p += NUL_AFTER_TOKEN(p, end);
        } else if (c == 'f' && end - p >= 5 && !memcmp(p, "false", 5)) {
            p += 5;
            PUSH(mark(K_BOOL, 0));
            p += NUL_AFTER_TOKEN(p, end);
        } else if (c == 'n' && end - p >= 4 && !memcmp(p, "null", 4)) {
            p += 4;
            PUSH(mark(K_NULL, 0));
            p += NUL_AFTER_TOKEN(p, end);
        } else {
            goto bad;
        }
    }
after: /* an entry of the array at level has ended at p */
    top += level == 0;
    if (p < end && *p == ',') { /* the common case first: no whitespace */
        p = ws(p + 1, end);
        goto value;
    }
    p = ws(p, end);
    if (p == end)
        goto bad;
    if (*p == ',') {
        p = ws(p + 1, end);
        goto value;
    }
    if (*p != ']')
        goto bad;
close: /* p at the ']' of the array whose mark is at open */
    PUSH(mark(K_CLOSE, 0));
    {
        const size_t parent = payload(tok[open]);
        tok[open] = mark(K_OPEN, n - 1 - open);
        p++;
        if (level > 0) {
            level--;
            open = parent;
            goto after;
        }
    }
#undef PUSH
    d->ntok = n;
    nd_json_tensor *t = add_tensor(d);
    if (!t)
        goto oom;
    t->site = site;
    t->len = top;
    t->first = first;
    t->text_begin = (size_t)(begin - sc->body);
    t->text_end = (size_t)(p - sc->body);
    return p;

bad:
    d->ntok = first;
    sc->bad = 1;
    return NULL;
oom:
    sc->oom = 1;
    return NULL;
}

enum object_kind { ROOT_V1, ROOT_V2, V2_INPUT };

static const char *const v1_sites[ND_JSON_V1_SITES] = {
    [ND_JSON_SITE_DATA] = "data",   [ND_JSON_SITE_GAMMA] = "gamma", [ND_JSON_SITE_BETA] = "beta",
    [ND_JSON_SITE_WEIGHT] = "weight", [ND_JSON_SITE_ALPHA] = "alpha",
};

static int key_is(const char *key, size_t klen, const char *name)
{
    return klen == strlen(name) && !memcmp(key, name, klen);
}

static const char *skim_inputs(scan *sc, const char *p, int depth);

/*
 * Follows the object at p (p[0] == '{', jansson depth depth) down to its sites: /v1's root
 * members, v2's "inputs", or an input's "data" (the input's index in site). Returns the byte after
 * its closing brace, or NULL with sc->bad or sc->oom set.
 */
static const char *skim_object(scan *sc, const char *p, int depth, enum object_kind kind,
                               size_t input)
{
    const char *const end = sc->end;
    char key[8];
    size_t klen;
    p = ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        if (p == end || *p != '"' || !(p = read_key(p, end, key, sizeof key, &klen)))
            goto bad;
        p = ws(p, end);
        if (p == end || *p != ':')
            goto bad;
        p = ws(p + 1, end);
        if (p == end)
            goto bad;
        size_t site = SIZE_MAX;
        if (*p == '[') {
            if (kind == ROOT_V1) {
                for (size_t s = 0; s < ND_JSON_V1_SITES; s++)
                    if (key_is(key, klen, v1_sites[s]))
                        site = s;
            } else if (kind == V2_INPUT && key_is(key, klen, "data")) {
                site = input;
            }
        }
        if (site != SIZE_MAX)
            p = scan_array(sc, p, depth + 1, site);
        else if (kind == ROOT_V2 && *p == '[' && key_is(key, klen, "inputs"))
            p = skim_inputs(sc, p, depth + 1);
        else if (!(p = skip_value(p, end)))
            goto bad;
        if (!p)
            return NULL;
        p = ws(p, end);
        if (p == end)
            goto bad;
        if (*p == '}')
            return p + 1;
        if (*p != ',')
            goto bad; /* also what keeps an integer in an array's place from joining a token */
        p = ws(p + 1, end);
    }
bad:
    sc->bad = 1;
    return NULL;
}

/* v2's "inputs" array at p (p[0] == '['): each object's "data" is a site. */
static const char *skim_inputs(scan *sc, const char *p, int depth)
{
    const char *const end = sc->end;
    p = ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    for (size_t i = 0;; i++) {
        if (p < end && *p == '{')
            p = skim_object(sc, p, depth + 1, V2_INPUT, i);
        else if (!(p = skip_value(p, end)))
            sc->bad = 1;
        if (!p)
            return NULL;
        p = ws(p, end);
        if (p < end && *p == ']')
            return p + 1;
        if (p == end || *p != ',') {
            sc->bad = 1;
            return NULL;
        }
        p = ws(p + 1, end);
    }
}

/* The body is not valid JSON: jansson's message for it as sent. */
static int invalid_json(const char *body, size_t len, nd_error *err)
{
    json_error_t jerr;
    json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (v) {
        json_decref(v);
        return nd_proto_fail(err, 500, "internal error: the JSON scanner refused a body that "
                                       "jansson accepts");
    }
    return nd_proto_fail(err, 400, "invalid JSON at line %d, column %d: %s", jerr.line,
                         jerr.column, jerr.text);
}

/* Whether jansson holds an array where the scanner should have taken one (it never should). */
static int missed_array(const nd_json_doc *d, nd_json_layout layout)
{
    if (!json_is_object(d->root))
        return 0;
    if (layout == ND_JSON_V1) {
        for (int s = 0; s < ND_JSON_V1_SITES; s++)
            if (json_is_array(json_object_get(d->root, v1_sites[s])))
                return 1;
        return 0;
    }
    const json_t *inputs = json_object_get(d->root, "inputs");
    for (size_t i = 0; i < json_array_size(inputs); i++)
        if (json_is_array(json_object_get(json_array_get(inputs, i), "data")))
            return 1;
    return 0;
}

int nd_json_doc_load(nd_json_doc *doc, nd_json_layout layout, const char *body, size_t len,
                     nd_error *err)
{
    memset(doc, 0, sizeof *doc);
    if (!body) {
        body = "";
        len = 0;
    }
    scan sc = {.body = body, .end = body + len, .doc = doc, .layout = layout};
    const char *p = ws(body, sc.end);
    if (p < sc.end && *p == '{')
        skim_object(&sc, p, 1, layout == ND_JSON_V1 ? ROOT_V1 : ROOT_V2, 0);
    /* else: not an object; jansson reads it as it is, and the caller says what it wanted */
    if (sc.oom)
        return nd_proto_fail(err, 500, "out of memory reading a %zu-byte JSON body", len);
    if (sc.bad)
        return invalid_json(body, len, err);
    if (sc.exotic) {
        json_error_t jerr;
        json_t *v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!v)
            return nd_proto_fail(err, 400, "invalid JSON at line %d, column %d: %s", jerr.line,
                                 jerr.column, jerr.text);
        json_decref(v);
    }

    /* the envelope: the body with each array replaced by its index */
    const char *env = body;
    size_t elen = len;
    if (doc->nt) {
        size_t cap = len + 1;
        for (size_t k = 0; k < doc->nt; k++)
            cap += 21;
        char *e = doc->envelope = malloc(cap);
        if (!e)
            return nd_proto_fail(err, 500, "out of memory reading a %zu-byte JSON body", len);
        size_t at = 0;
        for (size_t k = 0; k < doc->nt; k++) {
            nd_json_tensor *t = &doc->t[k];
            memcpy(e, body + at, t->text_begin - at);
            e += t->text_begin - at;
            e += sprintf(e, "%zu", k);
            at = t->text_end;
            t->tok = doc->tok + t->first;
            t->ints = doc->ints;
        }
        memcpy(e, body + at, len - at);
        e += len - at;
        *e = '\0'; /* for a reader's convenience (jansson is given the length) */
        env = doc->envelope;
        elen = (size_t)(e - doc->envelope);
    }
    json_error_t jerr;
    doc->root = json_loadb(env, elen, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc->root)
        return invalid_json(body, len, err);
    if (missed_array(doc, layout))
        return nd_proto_fail(err, 500, "internal error: the JSON scanner missed an array");
    return 0;
}

const nd_json_tensor *nd_json_doc_tensor(const nd_json_doc *doc, size_t site, const json_t *v)
{
    if (!json_is_integer(v))
        return NULL;
    json_int_t k = json_integer_value(v);
    if (k < 0 || (uint64_t)k >= doc->nt || doc->t[k].site != site)
        return NULL;
    return &doc->t[k];
}

/* ======================================================================== reading tensors */

/* What entry i of t is, for messages: "an integer", "an array", ... */
static const char *entry_type(const nd_json_tensor *t, size_t i)
{
    switch (kind(t->tok[i])) {
    case K_NUMBER: {
        const size_t b = t->first + i;
        return (t->ints[b >> 6] >> (b & 63)) & 1 ? "an integer" : "a real number";
    }
    case K_OPEN:
        return "an array";
    case K_STRING:
        return "a string";
    case K_BOOL:
        return "a boolean";
    case K_NULL:
        return "null";
    default:
        return "an object";
    }
}

static size_t count_entries(const double *tok, size_t open)
{
    size_t n = 0;
    for (size_t i = open + 1; kind(tok[i]) != K_CLOSE; i = next_entry(tok, i))
        n++;
    return n;
}

int nd_json_tensor_nested(const nd_json_tensor *t)
{
    return kind(t->tok[1]) == K_OPEN;
}

int nd_json_tensor_dims(const nd_json_tensor *t, int64_t *dims, int max)
{
    size_t open = 0;
    int n = 0;
    while (n < max) {
        dims[n] = (int64_t)(n == 0 ? t->len : count_entries(t->tok, open));
        if (dims[n++] == 0 || kind(t->tok[open + 1]) != K_OPEN)
            break;
        open++;
    }
    return n;
}

/*
 * Stores the n entries tok[0..n) into dst (elements 0..n) as dt while they are numbers that fit.
 * Returns how many were stored: n, or the index of the entry that is not a number or too large.
 */
static size_t store_run(const double *tok, size_t n, nd_dtype dt, void *dst)
{
    size_t i = 0;
    if (dt == ND_FLOAT32) {
        float *out = dst;
        for (; i < n; i++) {
            const float f = (float)tok[i];
            if (!(fabsf(f) <= FLT_MAX)) /* infinity, or a mark (NaN) */
                break;
            out[i] = f;
        }
        return i;
    }
    for (; i < n; i++) {
        const double v = tok[i];
        if (v != v || nd_store_f64(dt, dst, (int64_t)i, v) != 0)
            break;
    }
    return i;
}

/* The message for entry i of t that store_run stopped at; path names it. */
static int entry_error(const nd_json_tensor *t, size_t i, nd_dtype dt, const char *path,
                       nd_error *err)
{
    const double v = t->tok[i];
    if (kind(v) != K_NUMBER)
        return nd_proto_fail(err, 400, "%s: expected a number, got %s", path, entry_type(t, i));
    return nd_proto_fail(err, 400, "%s=%g is out of range for %s", path, v, nd_dtype_name(dt));
}

/* A path in messages: the tensor's name (at most 63 bytes) and up to ND_MAX_DIMS "[index]". */
#define PATH_SIZE (64 + ND_MAX_DIMS * 24)

int nd_json_tensor_fill_flat(const nd_json_tensor *t, nd_dtype dt, void *dst, const char *name,
                             nd_error *err)
{
    const size_t done = store_run(t->tok + 1, t->len, dt, dst);
    if (done == t->len)
        return 0;
    char path[PATH_SIZE];
    snprintf(path, sizeof path, "%.63s[%zu]", name, done);
    return entry_error(t, 1 + done, dt, path, err);
}

/*
 * Walks the array whose open mark is at tok[open], nested as shape from level depth on, writing
 * elements from *pos on. With dst NULL it checks the nesting only, so that nothing is allocated for
 * a shape the data does not fill. path (PATH_SIZE bytes) holds plen bytes: the name and the
 * indices down to this level. The messages are those the jansson walk this replaced gave.
 */
static int walk(const nd_json_tensor *t, size_t open, const int64_t *shape, int ndim,
                nd_dtype dt, int depth, int64_t *pos, char *path, size_t plen, void *dst,
                nd_error *err)
{
    const double *tok = t->tok;
    const int64_t want = shape[depth];
    const size_t n = open == 0 ? t->len : count_entries(tok, open);
    const size_t psize = PATH_SIZE;
    if ((int64_t)n != want) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%s has %zu entries, shape %s needs %lld there", path, n,
                             s, (long long)want);
    }
    if (depth + 1 == ndim && dst) { /* the leaves: a run of numbers, unless something is wrong */
        const size_t esize = nd_dtype_size(dt);
        const size_t done = store_run(tok + open + 1, n, dt, (char *)dst + *pos * esize);
        *pos += (int64_t)done;
        if (done == n)
            return 0;
        snprintf(path + plen, psize - plen, "[%zu]", done);
        return entry_error(t, open + 1 + done, dt, path, err);
    }
    size_t at = open + 1;
    for (size_t i = 0; i < n; i++, at = next_entry(tok, at)) {
        const unsigned k = kind(tok[at]);
        if (depth + 1 < ndim) {
            size_t l = plen + (size_t)snprintf(path + plen, psize - plen, "[%zu]", i);
            if (k != K_OPEN) {
                char s[ND_MAX_DIMS * 21 + 4];
                nd_shape_str(shape, ndim, s, sizeof s);
                return nd_proto_fail(err, 400,
                                     "%s: expected an array (shape %s nests %d deep), got %s",
                                     path, s, ndim, entry_type(t, at));
            }
            int rc = walk(t, at, shape, ndim, dt, depth + 1, pos, path, l, dst, err);
            if (rc)
                return rc;
            path[plen] = '\0';
        } else if (k == K_OPEN) { /* checking only: an array where a number belongs */
            snprintf(path + plen, psize - plen, "[%zu]", i);
            return nd_proto_fail(err, 400, "%s: expected a number, got an array", path);
        }
    }
    return 0;
}

int nd_json_tensor_check(const nd_json_tensor *t, const int64_t *shape, int ndim, int64_t elems,
                         const char *name, nd_error *err)
{
    if (nd_json_tensor_nested(t)) {
        char path[PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return walk(t, 0, shape, ndim, ND_FLOAT32, 0, &pos, path, plen < 64 ? (size_t)plen : 63,
                    NULL, err);
    }
    if ((int64_t)t->len != elems) {
        char s[ND_MAX_DIMS * 21 + 4];
        nd_shape_str(shape, ndim, s, sizeof s);
        return nd_proto_fail(err, 400, "%.63s has %zu numbers, shape %s needs %lld", name, t->len,
                             s, (long long)elems);
    }
    return 0;
}

int nd_json_tensor_fill(const nd_json_tensor *t, const int64_t *shape, int ndim, nd_dtype dt,
                        void *dst, const char *name, nd_error *err)
{
    if (nd_json_tensor_nested(t)) {
        char path[PATH_SIZE];
        int64_t pos = 0;
        int plen = snprintf(path, 64, "%s", name);
        return walk(t, 0, shape, ndim, dt, 0, &pos, path, plen < 64 ? (size_t)plen : 63, dst,
                    err);
    }
    return nd_json_tensor_fill_flat(t, dt, dst, name, err);
}
