/*
 * tolerance.h - the tolerances of the C tests, stated once.
 *
 * Every backend accumulates in fp32 from logits that the reference decodes
 * exactly, so the error budget is fp32 arithmetic (about 6e-8 per operation,
 * a few units of 1e-6 for the log-sum-exp of a long row) plus, for the
 * gradient, one rounding to the storage dtype. The gradient is compared with
 * the float64 reference rounded to the dtype:
 *
 *   |g - rd(g_ref)| <= grad_atol * gscale_r + grad_rtol * |rd(g_ref)| + grad_abs
 *
 * where gscale_r is the sum of the magnitudes of the row's gradient
 * coefficients after the reduction scale (xt_row.gscale): an error in the
 * row's lse moves every element by at most that much times the error, and
 * cancellation (p_j - eps, p_y - 1 near 1) is measured against it rather
 * than against the small difference. grad_rtol is one unit in the last place
 * of the dtype (a rounding that falls the other way) plus the fp32 error;
 * grad_abs is the spacing of the dtype's subnormals (fp16 gradients of long
 * rows with mean reduction are subnormal). On top of the elementwise bound,
 * the whole gradient must satisfy ||g - rd(g_ref)||_2 <= grad_norm *
 * ||rd(g_ref)||_2.
 *
 * Losses (fp32 outputs) are compared as
 *
 *   |l - l_ref| <= loss_rtol * (|l_ref| + 1) + loss_mag * mag
 *
 * with mag the size of the terms that cancel (lse and x'_y, the smoothing
 * sums, the z-loss). What these catch, with margins of 30x or more: a wrong
 * 1/N or 1/W (>= 0.1% with the row counts the tests use), a missing
 * smoothing or z-loss term, a sign, a row shifted by one, an unfolded p_y - 1
 * in bf16 or fp16 (the peaked-row tests), a missing softcap derivative.
 */
#ifndef XENT_TEST_TOLERANCE_H
#define XENT_TEST_TOLERANCE_H

#include <math.h>

#include "xent.h"

typedef struct xt_tol {
  double loss_rtol;  /* loss, z-loss, lse: relative part, against |ref| + 1    */
  double loss_mag;   /* loss: part proportional to the cancelling terms      */
  double grad_atol;  /* gradient: times the row's coefficient scale (gscale) */
  double grad_rtol;  /* gradient: times |reference rounded to the dtype|     */
  double grad_abs;   /* gradient: absolute floor (subnormal spacing)         */
  double grad_norm;  /* gradient: ||g - ref||_2 / ||ref||_2                  */
  double scale_rtol; /* backward: |g*go (stored) - g*go (exact)| / |g*go|    */
  double acc_rtol;   /* token accuracy (a count divided by N in fp32)        */
} xt_tol;

#define XT_TOL_LOSS_RTOL 3e-5
#define XT_TOL_LOSS_MAG 2e-6
#define XT_TOL_GRAD_ATOL 3e-6
#define XT_TOL_FP32_ERR 3e-5 /* relative fp32 error of an element (exp, lse)  */
#define XT_TOL_ACC_RTOL 1e-6

static inline xt_tol xt_tol_for(xent_dtype dt) {
  xt_tol t;
  t.loss_rtol = XT_TOL_LOSS_RTOL;
  t.loss_mag = XT_TOL_LOSS_MAG;
  t.grad_atol = XT_TOL_GRAD_ATOL;
  t.acc_rtol = XT_TOL_ACC_RTOL;
  switch (dt) {
    case XENT_BFLOAT16:            /* 8 significant bits                        */
      t.grad_rtol = 0x1p-7 + XT_TOL_FP32_ERR;
      t.grad_abs = 0x1p-126;
      t.grad_norm = 3e-3;
      t.scale_rtol = 0x1p-7;
      break;
    case XENT_FLOAT16:             /* 11 significant bits, subnormals at 2^-24  */
      t.grad_rtol = 0x1p-10 + XT_TOL_FP32_ERR;
      t.grad_abs = 0x1p-24;
      t.grad_norm = 5e-4;
      t.scale_rtol = 0x1p-10;
      break;
    case XENT_FLOAT32:
    default:
      t.grad_rtol = XT_TOL_FP32_ERR;
      t.grad_abs = 0x1p-126;
      t.grad_norm = 2e-5;
      t.scale_rtol = 0x1p-23;
      break;
  }
  return t;
}

/* Loss-like values (loss, z-loss, lse). NaN matches NaN. */
static inline int xt_loss_close(const xt_tol *t, double got, double ref, double mag) {
  if (isnan(ref)) return isnan(got);
  if (isinf(ref)) return got == ref;
  return fabs(got - ref) <= t->loss_rtol * (fabs(ref) + 1.0) + t->loss_mag * fabs(mag);
}

static inline double xt_loss_bound(const xt_tol *t, double ref, double mag) {
  return t->loss_rtol * (fabs(ref) + 1.0) + t->loss_mag * fabs(mag);
}

/* One gradient element against the reference already rounded to the dtype. */
static inline double xt_grad_bound(const xt_tol *t, double ref_rounded, double gscale) {
  return t->grad_atol * gscale + t->grad_rtol * fabs(ref_rounded) + t->grad_abs;
}

static inline int xt_grad_close(const xt_tol *t, double got, double ref_rounded,
                                double gscale) {
  if (isnan(got)) return 0;
  return fabs(got - ref_rounded) <= xt_grad_bound(t, ref_rounded, gscale);
}

/* A backward pass: got is the stored product, exact = stored gradient times
 * the upstream gradient in double. */
static inline int xt_scale_close(const xt_tol *t, double got, double exact) {
  if (isnan(exact)) return isnan(got);
  return fabs(got - exact) <= t->scale_rtol * fabs(exact) + t->grad_abs;
}

#endif
