/*
 * nd_testutil.h - what every correctness test shares: random inputs, a float64 reference written
 * independently of the backends, and one tolerance rule.
 *
 * The tolerance rule (the same for the CPU and CUDA backends):
 *   float32:           |got - ref| <= 1e-5 * max(1, |ref|)
 *   float16, bfloat16: got is within 1 ulp of the correctly rounded value of ref (the rounded
 *                      value itself, or either neighbour on the dtype's grid), or
 *                      |got - ref| <= 1e-5 (an absolute floor: where a result cancels to near
 *                      zero, e.g. gamma * xhat + beta ~ 0, float32 arithmetic cannot reach the
 *                      dtype's ulp there, which shrinks with |ref|)
 * Statistics (mean, rstd) are float32 and use the float32 rule.
 */
#ifndef ND_TESTUTIL_H
#define ND_TESTUTIL_H

#include <stdint.h>

#include "../../kernels/nd_ops.h"

/* ---- random inputs (xorshift; deterministic for a given seed) ---- */
uint64_t nd_rand_u64(uint64_t *state);
double nd_rand_uniform(uint64_t *state);               /* [0, 1) */
double nd_rand_normal(uint64_t *state);                /* mean 0, std 1 */
/* n values of mean + std * N(0,1), rounded to dt and stored in buf; when f64 is not NULL it gets
 * the stored (rounded) values widened to double, i.e. exactly what a backend will read. */
void nd_fill_random(nd_dtype dt, void *buf, int64_t n, double mean, double std, uint64_t *state,
                    double *f64);
/* Widen n stored values of dt to double. */
void nd_to_f64(nd_dtype dt, const void *buf, int64_t n, double *out);
/* Fill n elements of dt with a recognisable NaN so an element a backend never wrote fails. */
void nd_poison(nd_dtype dt, void *buf, int64_t n);
/* Mask (outer, dim, inner) in place as attention scores are masked, setting elements to -inf in
 * buf (stored as dt) and in its float64 copy f64. Column c = o * inner + i, by c % 5: 0 and 1 keep
 * a prefix of 1 + (c * 7919) % dim elements and mask the rest (causal); 2 and 3 mask each element
 * with probability 1/3; 4 masks the whole column, whose softmax is NaN (as PyTorch's). */
void nd_mask_attention(nd_dtype dt, void *buf, double *f64, int64_t outer, int64_t dim,
                       int64_t inner, uint64_t *state);
/* After nd_mask_attention: half of its causal and scattered columns also carry one non-finite
 * score, as overflowed logits do, placed among the masked ones: a causal column (c % 5 = 0 or 1)
 * its last element, NaN or +inf by c % 5, and a scattered one (c % 5 = 2) a NaN in place of its
 * last masked element. Such a column's softmax is NaN throughout (as PyTorch's), whichever thread,
 * lane or block holds the score among masked ones. */
void nd_mask_nonfinite(nd_dtype dt, void *buf, double *f64, int64_t outer, int64_t dim,
                       int64_t inner);

/* ---- float64 reference ---- */
/* gamma/beta may be NULL; mean/rstd may be NULL. Biased variance, as PyTorch. */
void nd_ref_layernorm(const double *x, int64_t rows, int64_t cols, const double *gamma,
                      const double *beta, double eps, double *y, double *mean, double *rstd);
void nd_ref_rmsnorm(const double *x, int64_t rows, int64_t cols, const double *weight, double eps,
                    double *y, double *rstd);
void nd_ref_softmax(const double *x, int64_t outer, int64_t dim, int64_t inner, int log,
                    double *y);
void nd_ref_prelu(const double *x, int64_t outer, int64_t channels, int64_t inner,
                  const double *alpha, int64_t alpha_count, double *y);

/* ---- tolerance ---- */
/* 1 when got (an element stored as dt) is within tolerance of ref, 0 otherwise (NaN never is,
 * unless ref is NaN too). */
int nd_close(nd_dtype dt, double got, double ref);
/* Compare n stored values of dt against ref. Returns the number of mismatches and, for the first,
 * writes a message "what[i]=got, reference ref" into msg. */
int64_t nd_compare(nd_dtype dt, const void *got, const double *ref, int64_t n, const char *what,
                   char *msg, size_t msg_size);
/* Same for float32 statistics. */
int64_t nd_compare_f32(const float *got, const double *ref, int64_t n, const char *what,
                       char *msg, size_t msg_size);

/* ---- base64 ---- */
/* The textbook base64 of n bytes (3 bytes -> 4 characters of A-Z a-z 0-9 + /, '=' padding when pad
 * is not 0) into out, NUL-terminated (room for 4 * ((n + 2) / 3) + 1 bytes); returns its length.
 * Written apart from proto's decoder, which the tests check against it. */
size_t nd_b64_encode(const void *in, size_t n, char *out, int pad);

#endif /* ND_TESTUTIL_H */
