/*
 * rowmath.h - the per-row formulas every backend shares (host and device).
 *
 * A backend reduces each row to a few statistics (xent_row_stats), then asks
 * these functions for the row's loss terms and for the three coefficients of
 * its gradient:
 *
 *     g_j = a * p_j - b * (weighted smoothing ? w_j : 1) - (j == y ? c : 0)
 *     g_j *= 1 - t_j^2            when softcap is on (t_j = tanh(x_j / cap))
 *
 * The -c at the target is folded in fp32 before rounding to the storage type
 * (p_y - 1 cancels badly when p_y is near 1).
 */
#ifndef XENT_ROWMATH_H
#define XENT_ROWMATH_H

#include <math.h>

#if defined(__CUDACC__)
#define XENT_HD __host__ __device__ __forceinline__
#else
#define XENT_HD static inline
#endif

/* Call-wide constants, fixed before any row is processed. */
typedef struct xent_consts {
  float alpha;       /* label smoothing                                      */
  float eps;         /* alpha / V                                            */
  float inv_vocab;   /* 1 / V                                                */
  float s;           /* lse_square_scale                                     */
  float sum_w;       /* sum of all class weights (weighted calls only)       */
  int weighted;      /* class weights given                                  */
  int smoothing;     /* alpha > 0                                            */
} xent_consts;

/* What a row reduces to. */
typedef struct xent_row_stats {
  float lse;         /* log sum exp x'                                       */
  float xy;          /* x'_y                                                 */
  float sum_x;       /* sum_j x'_j       (needed when smoothing)             */
  float sum_wx;      /* sum_j w_j x'_j   (needed when weighted smoothing)    */
  float wy;          /* w_y (1 when unweighted)                              */
} xent_row_stats;

typedef struct xent_row_coef {
  float a, b, c;
} xent_row_coef;

/* The loss terms of one row, before any reduction scale (z excluded). */
XENT_HD float xent_row_loss(const xent_consts *k, const xent_row_stats *r) {
  float nll = r->lse - r->xy;
  if (!k->weighted) {
    float loss = (1.0f - k->alpha) * nll;
    if (k->smoothing) loss += k->alpha * (r->lse - r->sum_x * k->inv_vocab);
    return loss;
  }
  float loss = (1.0f - k->alpha) * r->wy * nll;
  if (k->smoothing) loss += k->eps * (r->lse * k->sum_w - r->sum_wx);
  return loss;
}

/* The z-loss of one row, before any reduction scale. */
XENT_HD float xent_row_z(const xent_consts *k, float lse) { return k->s * lse * lse; }

/* Gradient coefficients. scale_loss multiplies the loss terms (1/N, 1/W or
 * 1), scale_z the z-loss term (1/N or 1). */
XENT_HD xent_row_coef xent_row_coefficients(const xent_consts *k, const xent_row_stats *r,
                                            float scale_loss, float scale_z) {
  xent_row_coef g;
  float zterm = scale_z * 2.0f * k->s * r->lse;
  if (!k->weighted) {
    g.a = scale_loss + zterm;
    g.b = scale_loss * k->eps;
    g.c = scale_loss * (1.0f - k->alpha);
  } else {
    g.a = scale_loss * ((1.0f - k->alpha) * r->wy + k->eps * k->sum_w) + zterm;
    g.b = scale_loss * k->eps; /* times w_j per element */
    g.c = scale_loss * (1.0f - k->alpha) * r->wy;
  }
  return g;
}

/* Merge two partial (max, sum of exp(x - max)) pairs. A part with max -inf
 * is empty or all -inf (sum 0) or saw only NaN (sum NaN): its sum is added
 * as it is, so a NaN anywhere in the row makes the row's sum NaN. */
XENT_HD void xent_merge_max_sum(float *m, float *s, float m2, float s2) {
  float mn = fmaxf(*m, m2);
  if (mn == -INFINITY) {
    *s += s2;
    return;
  }
  float s1 = (*m == -INFINITY) ? *s : *s * expf(*m - mn);
  float t2 = (m2 == -INFINITY) ? s2 : s2 * expf(m2 - mn);
  *m = mn;
  *s = s1 + t2;
}

/* Fold one element into a (max, sum) pair. */
XENT_HD void xent_merge_element(float *m, float *s, float x) {
  if (x != x) {
    *s = x;
  } else if (x != -INFINITY) {
    xent_merge_max_sum(m, s, x, 1.0f);
  }
}

#endif
