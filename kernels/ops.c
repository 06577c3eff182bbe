/*
 * ops.c - what every backend shares: the dtype and operator name tables, the error helper and the
 * argument checks.
 *
 * The checks run before any backend touches memory, so a backend may assume: every size is at
 * least 1, the element count and the byte count of every tensor fit in int64, the required
 * pointers are present and the dtype is one of ND_DTYPE_COUNT.
 */
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nd_ops.h"

/* ---------------------------------------------------------------------------------------------
 * Name tables
 * ------------------------------------------------------------------------------------------- */

static const char *const dtype_names[] = {"float32", "float16", "bfloat16"};
static const size_t dtype_sizes[] = {4, 2, 2};
static_assert(sizeof dtype_names / sizeof dtype_names[0] == ND_DTYPE_COUNT,
              "dtype_names must list every nd_dtype");
static_assert(sizeof dtype_sizes / sizeof dtype_sizes[0] == ND_DTYPE_COUNT,
              "dtype_sizes must list every nd_dtype");

static const char *const op_names[] = {"layernorm", "rmsnorm", "softmax", "log_softmax", "prelu"};
static_assert(sizeof op_names / sizeof op_names[0] == ND_OP_COUNT,
              "op_names must list every nd_op");

const char *nd_dtype_name(nd_dtype dt)
{
    return (unsigned)dt < ND_DTYPE_COUNT ? dtype_names[dt] : "unknown";
}

size_t nd_dtype_size(nd_dtype dt)
{
    return (unsigned)dt < ND_DTYPE_COUNT ? dtype_sizes[dt] : 0;
}

int nd_dtype_from_name(const char *name, nd_dtype *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < ND_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_names[i]) == 0) {
            if (out)
                *out = (nd_dtype)i;
            return 0;
        }
    }
    return -1;
}

const char *nd_op_name(nd_op op)
{
    return (unsigned)op < ND_OP_COUNT ? op_names[op] : "unknown";
}

int nd_op_from_name(const char *name, nd_op *out)
{
    if (!name)
        return -1;
    for (int i = 0; i < ND_OP_COUNT; i++) {
        if (strcmp(name, op_names[i]) == 0) {
            if (out)
                *out = (nd_op)i;
            return 0;
        }
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

nd_status nd_error_set(nd_error *err, nd_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Argument checks
 * ------------------------------------------------------------------------------------------- */

static nd_status check_dtype(nd_dtype dt, nd_error *err)
{
    if ((unsigned)dt >= ND_DTYPE_COUNT)
        return nd_error_set(err, ND_EINVAL, "dtype=%d: must be float32, float16 or bfloat16",
                            (int)dt);
    return ND_OK;
}

static nd_status check_size(const char *field, int64_t v, nd_error *err)
{
    if (v < 1)
        return nd_error_set(err, ND_EINVAL, "%s=%lld: must be at least 1", field, (long long)v);
    return ND_OK;
}

/* *acc *= v unless the product or its byte count (times elem_size) would pass INT64_MAX.
 * Both factors are >= 1 here. */
static nd_status mul_checked(int64_t *acc, int64_t v, size_t elem_size, const char *what,
                             nd_error *err)
{
    if (*acc > INT64_MAX / v || *acc * v > INT64_MAX / (int64_t)elem_size)
        return nd_error_set(err, ND_EINVAL, "%s: tensor too large (element or byte count "
                            "overflows int64)", what);
    *acc *= v;
    return ND_OK;
}

static nd_status check_ptr(const char *field, const void *p, nd_error *err)
{
    if (!p)
        return nd_error_set(err, ND_EINVAL, "%s: must not be NULL", field);
    return ND_OK;
}

nd_status nd_norm_args_check(const nd_norm_args *a, nd_error *err)
{
    nd_status st;
    if (!a)
        return nd_error_set(err, ND_EINVAL, "args: must not be NULL");
    if ((st = check_dtype(a->dtype, err)) || (st = check_size("rows", a->rows, err)) ||
        (st = check_size("cols", a->cols, err)))
        return st;
    int64_t n = a->rows;
    if ((st = mul_checked(&n, a->cols, nd_dtype_size(a->dtype), "rows*cols", err)))
        return st;
    /* mean and rstd hold rows float32 values; with a 2-byte dtype and cols 1 the check above
     * does not cover their byte count. */
    if (a->rows > INT64_MAX / 4)
        return nd_error_set(err, ND_EINVAL, "rows=%lld: too large", (long long)a->rows);
    if ((st = check_ptr("x", a->x, err)) || (st = check_ptr("y", a->y, err)))
        return st;
    if (!isfinite(a->eps) || a->eps < 0.0f)
        return nd_error_set(err, ND_EINVAL, "eps=%g: must be finite and >= 0", (double)a->eps);
    return ND_OK;
}

nd_status nd_softmax_args_check(const nd_softmax_args *a, nd_error *err)
{
    nd_status st;
    if (!a)
        return nd_error_set(err, ND_EINVAL, "args: must not be NULL");
    if ((st = check_dtype(a->dtype, err)) || (st = check_size("outer", a->outer, err)) ||
        (st = check_size("dim", a->dim, err)) || (st = check_size("inner", a->inner, err)))
        return st;
    size_t es = nd_dtype_size(a->dtype);
    int64_t n = a->outer;
    if ((st = mul_checked(&n, a->dim, es, "outer*dim*inner", err)) ||
        (st = mul_checked(&n, a->inner, es, "outer*dim*inner", err)))
        return st;
    if ((st = check_ptr("x", a->x, err)) || (st = check_ptr("y", a->y, err)))
        return st;
    return ND_OK;
}

nd_status nd_prelu_args_check(const nd_prelu_args *a, nd_error *err)
{
    nd_status st;
    if (!a)
        return nd_error_set(err, ND_EINVAL, "args: must not be NULL");
    if ((st = check_dtype(a->dtype, err)) || (st = check_size("outer", a->outer, err)) ||
        (st = check_size("channels", a->channels, err)) ||
        (st = check_size("inner", a->inner, err)))
        return st;
    size_t es = nd_dtype_size(a->dtype);
    int64_t n = a->outer;
    if ((st = mul_checked(&n, a->channels, es, "outer*channels*inner", err)) ||
        (st = mul_checked(&n, a->inner, es, "outer*channels*inner", err)))
        return st;
    if (a->alpha_count != 1 && a->alpha_count != a->channels)
        return nd_error_set(err, ND_EINVAL,
                            "alpha_count=%lld: must be 1 (shared) or channels=%lld",
                            (long long)a->alpha_count, (long long)a->channels);
    if ((st = check_ptr("x", a->x, err)) || (st = check_ptr("y", a->y, err)) ||
        (st = check_ptr("alpha", a->alpha, err)))
        return st;
    return ND_OK;
}
