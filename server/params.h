/*
 * params.h - registered parameter sets (PUT /v1/params/{name}).
 *
 * A sidecar uploads gamma/beta/weight/alpha once and then sends only activations. A set is
 * immutable once registered: PUT under an existing name installs a new set (a new generation),
 * and requests already holding the old one finish with it. Sets are reference counted, so DELETE
 * never frees a set a queued or running batch still uses; the engine's device copies are released
 * with the last reference.
 */
#ifndef ND_PARAMS_H
#define ND_PARAMS_H

#include <stdint.h>

#include "../kernels/nd_ops.h"
#include "../proto/nd_proto.h"
#include "engine.h"

/* The same order as the wire form's tensors (nd_params_body). */
enum { ND_PARAM_GAMMA = 0, ND_PARAM_BETA, ND_PARAM_WEIGHT, ND_PARAM_ALPHA, ND_PARAM_COUNT };
_Static_assert(ND_PARAM_COUNT == ND_PARAM_TENSORS, "parameter tensors out of step with proto");

typedef struct nd_param_set {
    char name[ND_PARAMS_NAME_MAX];
    nd_dtype dtype;
    uint64_t generation;            /* unique per registration: part of the batch key */
    const void *host[ND_PARAM_COUNT]; /* NULL when the set has no such tensor */
    int64_t count[ND_PARAM_COUNT];
    void *device[ND_MAX_DEVICES][ND_PARAM_COUNT]; /* engine-owned copies, by device */
    /* private */
    int refs;
    void *block;
} nd_param_set;

typedef struct nd_params nd_params;

nd_params *nd_params_create(nd_engine *engine);
void nd_params_destroy(nd_params *r);

/*
 * Register (or replace) a set. tensors[k] holds count[k] elements of dtype, or is NULL. The data
 * is copied. Returns 0, or an HTTP status with a message (400 for an invalid name or set, 500
 * when the engine could not take it).
 */
int nd_params_put(nd_params *r, const char *name, nd_dtype dtype,
                  const void *const tensors[ND_PARAM_COUNT], const int64_t count[ND_PARAM_COUNT],
                  nd_error *err);
/* At most max_sets sets of max_bytes bytes together (their tensors); nd_params_put answers 507
 * beyond either (413 for one set alone over max_bytes). A set that replaces one under the same
 * name is counted in place of it. Default: no limits. */
void nd_params_set_limits(nd_params *r, int max_sets, size_t max_bytes);
/* Removes the name; returns 0, or 404 when there is no such set. */
int nd_params_delete(nd_params *r, const char *name, nd_error *err);
/* The set registered under name with one reference taken for the caller, or NULL. */
nd_param_set *nd_params_acquire(nd_params *r, const char *name);
void nd_params_release(nd_params *r, nd_param_set *p);
/* {"params":[{"name":..,"dtype":..,"tensors":{"gamma":4096,...}}, ...]}, malloc'ed. */
char *nd_params_list_json(nd_params *r);
/* One set as JSON (with its values), malloc'ed; NULL when there is no such set. */
char *nd_params_get_json(nd_params *r, const char *name);

const char *nd_param_tensor_name(int k);

#endif /* ND_PARAMS_H */
