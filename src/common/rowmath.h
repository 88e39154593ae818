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
 * with p_j = exp(x'_j - m) / s. Every exponent is a difference x' - m,
 * never x' log2(e) - m log2(e): the rounding of a large product would scale
 * a whole row by up to 2^(ulp/2) and overflow (bench/NOTES.md: numerics).
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

/* What a row reduces to. The log-sum-exp is kept as its two parts, the
 * maximum m and log s with s = sum_j exp(x'_j - m) in [1, V], so that the
 * loss m - x'_y + log s stays accurate however large the logits are (m + log
 * s rounds log s away once |m| is large). The smoothing sums are taken over
 * x' / V, which cannot overflow for any finite x'. */
typedef struct xent_row_stats {
  float m;           /* max_j x'_j                                           */
  float log_s;       /* log sum_j exp(x'_j - m)                              */
  float xy;          /* x'_y                                                 */
  float mean_x;      /* sum_j x'_j / V        (needed when smoothing)        */
  float mean_wx;     /* sum_j w_j (x'_j - m) / V (weighted smoothing): relative
                        to m, which sum_j w_j x'_j / V alone can overflow     */
  float wy;          /* w_y (1 when unweighted)                              */
} xent_row_stats;

typedef struct xent_row_coef {
  float a, b, c;
} xent_row_coef;

/* The row's log-sum-exp. */
XENT_HD float xent_row_lse(const xent_row_stats *r) { return r->m + r->log_s; }

/* The loss terms of one row, before any reduction scale (z excluded). Each
 * difference of large numbers is taken before it meets the small log s. */
XENT_HD float xent_row_loss(const xent_consts *k, const xent_row_stats *r) {
  const float nll = (r->m - r->xy) + r->log_s;
  if (!k->weighted) {
    float loss = (1.0f - k->alpha) * nll;
    /* alpha (lse - mean x) = alpha log s + (alpha m - alpha mean x) */
    if (k->smoothing) loss += fmaf(k->alpha, r->log_s, fmaf(k->alpha, r->m, -k->alpha * r->mean_x));
    return loss;
  }
  float loss = (1.0f - k->alpha) * r->wy * nll;
  if (k->smoothing) /* eps sum_j w_j (lse - x'_j) = alpha (log s sum_w / V - mean_wx) */
    loss += k->alpha * fmaf(r->log_s, k->sum_w * k->inv_vocab, -r->mean_wx);
  return loss;
}

/* The z-loss of one row, before any reduction scale. */
XENT_HD float xent_row_z(const xent_consts *k, float lse) { return k->s * lse * lse; }

/* Gradient coefficients. scale_loss multiplies the loss terms (1/N, 1/W or
 * 1), scale_z the z-loss term (1/N or 1). */
XENT_HD xent_row_coef xent_row_coefficients(const xent_consts *k, const xent_row_stats *r,
                                            float scale_loss, float scale_z) {
  xent_row_coef g;
  float zterm = scale_z * 2.0f * k->s * xent_row_lse(r);
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

/* x' - m as the weighted smoothing sum takes it, sum_j w_j (x'_j - m), over
 * a part whose maximum so far is m: -inf stays -inf where m is -inf too (a
 * part of nothing but -inf so far), as the row's final, finite maximum
 * would give, instead of the NaN of -inf - -inf. */
XENT_HD float xent_shifted(float x, float m) { return x == -INFINITY ? x : x - m; }

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
