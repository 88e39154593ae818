/*
 * forward.c - the CPU backend's fused cross-entropy forward, with the
 * gradient written over the logits in place. OpenMP threads over rows; each row is handled by one thread, start
 * to end, so results do not depend on the thread count.
 *
 * One row, three passes (the row stays in L2 after the first):
 *   1. read x: max, NaN check (and sum x', sum w x' for label smoothing);
 *      with softcap x' = cap tanh(x / cap) and 1 - tanh^2 go to a
 *      per-thread fp32 scratch
 *   2. e_j = exp(x'_j - max), sum e; e goes over fp32 logits in place, or to
 *      the scratch for bf16/fp16 and softcap (nothing is stored without a
 *      gradient); meanwhile the next row is prefetched towards L2
 *   3. g_j = a e_j / sum - b (w_j) [times 1 - tanh^2], rounded to the
 *      logits' dtype; the target element is then recomputed in fp32 with
 *      its -c folded in before rounding
 * One exp per element, fp32 accumulation (sums in blocks, then blocks
 * summed), bf16/fp16 converted in registers. The per-row formulas come from
 * common/rowmath.h. Per-row results go to an O(rows) buffer that is reduced
 * in row order, in double, at the end. Rows with a NaN, a +inf, or nothing
 * but -inf get a NaN loss and a NaN gradient row.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/rowmath.h"
#include "cpu/ce.h"
#include "cpu/cpu.h"
#include "cpu/simd.h"
#include "cpu/threads.h"

/* Elements per block of the two-level (block, then row) fp32 sums. */
#define SUM_BLOCK 1024

/* ------------------------------------------------------------------------ */
/* Forward: the passes over one row                                          */
/* ------------------------------------------------------------------------ */

/* bf16 rows without softcap or weighted smoothing are read 16 at a time as
 * even and odd elements (see bf16x16_to_f32_eo): pass 2 stores e in that
 * order within each full block of 16, and pass 3 restores it. */
#define EO(dt, eo) ((dt) == DT_BF16 && (eo) && XENT_SIMD_BF16_EO)

typedef struct pass1_out {
  float m, sum_x; /* sum x' / V */
  int nan; /* some x' is NaN */
} pass1_out;

/* Pass 1 without softcap: max; mode 1 adds sum x / V, mode 2 also sum w x / V
 * (never with eo). Over V, so that no finite row overflows the sums. */
XENT_AI pass1_out pass1_plain(const void *x, int64_t V, const int mode, float inv_v,
                              const int dt, const int eo) {
  const v8f ninf = vsplat(-__builtin_inff()), vinv = vsplat(inv_v);
  v8f m0 = ninf, m1 = ninf, m2 = ninf, m3 = ninf;
  v8f sx = vsplat(0.0f);
  v8i nan = vsplati(0);
  for (int64_t jb = 0; jb < V; jb += SUM_BLOCK) {
    const int64_t je = jb + SUM_BLOCK < V ? jb + SUM_BLOCK : V;
    v8f s0 = vsplat(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int64_t j = jb;
    for (; j + 32 <= je; j += 32) {
      v8f a, b, c, d;
      if (EO(dt, eo)) {
        bf16x16_to_f32_eo(AT(x, j, dt), &a, &b);
        bf16x16_to_f32_eo(AT(x, j + 16, dt), &c, &d);
      } else {
        a = vload(AT(x, j, dt), dt);
        b = vload(AT(x, j + 8, dt), dt);
        c = vload(AT(x, j + 16, dt), dt);
        d = vload(AT(x, j + 24, dt), dt);
      }
      m0 = vmax(m0, a);
      m1 = vmax(m1, b);
      m2 = vmax(m2, c);
      m3 = vmax(m3, d);
      nan |= vunord(a, b) | vunord(c, d);
      if (mode >= 1) {
        s0 = vfma(a, vinv, s0);
        s1 = vfma(b, vinv, s1);
        s2 = vfma(c, vinv, s2);
        s3 = vfma(d, vinv, s3);
      }
    }
    for (; j + 8 <= je; j += 8) {
      v8f a = vload(AT(x, j, dt), dt);
      m0 = vmax(m0, a);
      nan |= vunord(a, a);
      if (mode >= 1) s0 = vfma(a, vinv, s0);
    }
    if (j < je) {
      int n = (int)(je - j);
      v8f a = vload_part(AT(x, j, dt), n, dt);
      m0 = vmax(m0, vsel(vlanes_below(n), a, ninf));
      nan |= vunord(a, a); /* lanes >= n are 0 */
      if (mode >= 1) s0 = vfma(a, vinv, s0); /* lanes >= n are 0 */
    }
    if (mode >= 1) sx += (s0 + s1) + (s2 + s3);
  }
  pass1_out o;
  o.m = vhmax(vmax(vmax(m0, m1), vmax(m2, m3)));
  o.nan = vany(nan);
  o.sum_x = mode >= 1 ? vhsum(sx) : 0.0f;
  return o;
}

/* Pass 1 with softcap: also writes x' to E and, when F is set, 1 - tanh^2. */
XENT_AI pass1_out pass1_cap(const void *x, int64_t V, const int mode, float inv_v, float cap,
                            float inv_cap, float *E, float *F, const int dt) {
  const v8f ninf = vsplat(-__builtin_inff()), vinv_v = vsplat(inv_v);
  const v8f vcap = vsplat(cap), vinv = vsplat(inv_cap);
  v8f m0 = ninf, sx = vsplat(0.0f);
  v8i nan = vsplati(0);
  for (int64_t jb = 0; jb < V; jb += SUM_BLOCK) {
    const int64_t je = jb + SUM_BLOCK < V ? jb + SUM_BLOCK : V;
    v8f s0 = vsplat(0.0f);
    for (int64_t j = jb; j < je; j += 8) {
      int n = je - j >= 8 ? 8 : (int)(je - j);
      v8f a = n == 8 ? vload(AT(x, j, dt), dt) : vload_part(AT(x, j, dt), n, dt);
      v8f t, fac;
      vtanh(a * vinv, &t, &fac);
      v8f xp = vcap * t;
      nan |= vunord(xp, xp); /* padded lanes: tanh(0) = 0 */
      if (n == 8) {
        memcpy(E + j, &xp, 32);
        if (F) memcpy(F + j, &fac, 32);
        m0 = vmax(m0, xp);
      } else {
        vstore_part(E + j, xp, n, DT_F32);
        if (F) vstore_part(F + j, fac, n, DT_F32);
        m0 = vmax(m0, vsel(vlanes_below(n), xp, ninf));
      }
      if (mode >= 1) s0 = vfma(xp, vinv_v, s0); /* padded lanes: tanh(0) = 0 */
    }
    sx += s0;
  }
  pass1_out o;
  o.m = vhmax(m0);
  o.nan = vany(nan);
  o.sum_x = mode >= 1 ? vhsum(sx) : 0.0f;
  return o;
}

/* Pass 2: e_j = 2^((x_j - m) log2(e)) = exp(x_j - m); returns sum e, and
 * stores e in dst when set. The exponent is a difference, exact where it
 * matters: x_j log2(e) - m log2(e) rounds the product, which for a large m
 * is off by up to half its ulp and would scale the whole row by 2^that. No
 * x is NaN and m is finite (the caller checks), so the exponents are <= 0
 * or -inf.
 * pf, when set, is the next row (pf_es bytes per element): its lines are
 * prefetched towards L2 along the way, so its pass 1 does not wait on DRAM. */
XENT_AI float pass2(const void *x, int64_t V, float m, float *dst, const char *pf, int pf_es,
                    const int dt, const int eo) {
  const v8f vl = vsplat(1.44269504088896341f), vm = vsplat(m);
  v8f tot = vsplat(0.0f);
  for (int64_t jb = 0; jb < V; jb += SUM_BLOCK) {
    const int64_t je = jb + SUM_BLOCK < V ? jb + SUM_BLOCK : V;
    v8f s0 = vsplat(0.0f), s1 = s0;
    int64_t j = jb;
    for (; j + 16 <= je; j += 16) {
      if (pf) __builtin_prefetch(pf + (size_t)j * (size_t)pf_es, 0, 2);
      v8f xa, xb;
      if (EO(dt, eo)) {
        bf16x16_to_f32_eo(AT(x, j, dt), &xa, &xb);
      } else {
        xa = vload(AT(x, j, dt), dt);
        xb = vload(AT(x, j + 8, dt), dt);
      }
      v8f a = vexp2_nonan((xa - vm) * vl);
      v8f b = vexp2_nonan((xb - vm) * vl);
      if (dst) {
        memcpy(dst + j, &a, 32);
        memcpy(dst + j + 8, &b, 32);
      }
      s0 += a;
      s1 += b;
    }
    if (j + 8 <= je) {
      v8f a = vexp2_nonan((vload(AT(x, j, dt), dt) - vm) * vl);
      if (dst) memcpy(dst + j, &a, 32);
      s0 += a;
      j += 8;
    }
    if (j < je) {
      int n = (int)(je - j);
      v8f a = vexp2_nonan((vload_part(AT(x, j, dt), n, dt) - vm) * vl);
      a = (v8f)(vlanes_below(n) & (v8i)a);
      if (dst) vstore_part(dst + j, a, n, DT_F32);
      s1 += a;
    }
    tot += s0 + s1;
  }
  if (pf) __builtin_prefetch(pf + (size_t)V * (size_t)pf_es - 1, 0, 2);
  return vhsum(tot);
}

/* sum_j (w_j / V) (x_j - m) for weighted smoothing: relative to the row's
 * maximum m, which sum_j w_j x_j / V alone can overflow near the fp32 range.
 * A pass of its own over the row (in L2 by now); m is finite. */
XENT_AI float weighted_shifted_mean(const void *x, int64_t V, const float *w, float m,
                                    float inv_v, const int dt) {
  const v8f vm = vsplat(m), vinv = vsplat(inv_v);
  v8f tot = vsplat(0.0f);
  for (int64_t jb = 0; jb < V; jb += SUM_BLOCK) {
    const int64_t je = jb + SUM_BLOCK < V ? jb + SUM_BLOCK : V;
    v8f s0 = vsplat(0.0f);
    for (int64_t j = jb; j < je; j += 8) {
      const int n = je - j >= 8 ? 8 : (int)(je - j);
      const v8f a = n == 8 ? vload(AT(x, j, dt), dt) : vload_part(AT(x, j, dt), n, dt);
      const v8f wa = n == 8 ? vload(w + j, DT_F32) : vload_part(w + j, n, DT_F32);
      s0 = vfma(wa * vinv, a - vm, s0); /* padded lanes: w = 0 */
    }
    tot += s0;
  }
  return vhsum(tot);
}

/* 8 gradient values from e (and w, fac when given). */
XENT_AI v8f grad8(const float *e, const float *w, const float *fac, v8f va, v8f vnb) {
  v8f ev, g;
  memcpy(&ev, e, 32);
  if (w) {
    v8f wv;
    memcpy(&wv, w, 32);
    g = vfma(vnb, wv, va * ev);
  } else {
    g = vfma(va, ev, vnb);
  }
  if (fac) {
    v8f fv;
    memcpy(&fv, fac, 32);
    g *= fv;
  }
  return g;
}

/* Pass 3: g_j = (ap e_j - b w_j) fac_j into the row (w, F optional). */
XENT_AI void pass3(const float *E, int64_t V, float ap, float b, const float *w, const float *F,
                   void *row, const int dt, const int eo) {
  const v8f va = vsplat(ap), vnb = vsplat(-b);
  int64_t j = 0;
  for (; j + 16 <= V; j += 16) {
    v8f g0 = grad8(E + j, w ? w + j : NULL, F ? F + j : NULL, va, vnb);
    v8f g1 = grad8(E + j + 8, w ? w + j + 8 : NULL, F ? F + j + 8 : NULL, va, vnb);
    if (EO(dt, eo)) {
      f32_to_bf16x16_eo(AT_W(row, j, dt), g0, g1);
    } else if (dt == DT_BF16) {
      f32_to_bf16x16(AT_W(row, j, dt), g0, g1, 1);
    } else {
      vstore(AT_W(row, j, dt), g0, dt);
      vstore(AT_W(row, j + 8, dt), g1, dt);
    }
  }
  for (; j + 8 <= V; j += 8)
    vstore(AT_W(row, j, dt), grad8(E + j, w ? w + j : NULL, F ? F + j : NULL, va, vnb), dt);
  if (j < V) {
    int n = (int)(V - j);
    v8f e = vload_part(E + j, n, DT_F32), g;
    if (w) g = vfma(vnb, vload_part(w + j, n, DT_F32), va * e);
    else g = vfma(va, e, vnb);
    if (F) g *= vload_part(F + j, n, DT_F32);
    vstore_part(AT_W(row, j, dt), g, n, dt);
  }
}

/* Every element of the row set to v. */
XENT_AI void fill_row(void *row, int64_t V, float v, const int dt) {
  int64_t j = 0;
  for (; j + 8 <= V; j += 8) vstore(AT_W(row, j, dt), vsplat(v), dt);
  if (j < V) vstore_part(AT_W(row, j, dt), vsplat(v), (int)(V - j), dt);
}

/* First j with x_j == m, or -1. */
XENT_AI int64_t first_equal(const void *x, int64_t V, float m, const int dt) {
  const v8f vm = vsplat(m);
  int64_t j = 0;
  for (; j + 8 <= V; j += 8) {
    if (vany(veq(vload(AT(x, j, dt), dt), vm))) break;
  }
  for (; j < V; j++)
    if (load_one(x, j, dt) == m) return j;
  return -1;
}

/* First NaN, or 0 when there is none. */
static int64_t first_nan(const void *x, int64_t V, int dt) {
  for (int64_t j = 0; j < V; j++)
    if (isnan(load_one(x, j, dt))) return j;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Forward: rows                                                             */
/* ------------------------------------------------------------------------ */

typedef xent_cpu_row row_res;
typedef xent_cpu_ce fwd_ctx;

/* One non-ignored row of logits x (dtype dt). E, F: per-thread scratch of
 * V floats each: E for x' or e unless they go over fp32 logits in place
 * (NULL then), F only with softcap and a gradient. */
XENT_AI void row_forward(const fwd_ctx *f, void *x, int64_t y, float *E, float *F, row_res *o,
                         const void *next, float grad_scale, const int dt) {
  const xent_call *c = f->c;
  const int64_t V = c->in.vocab;
  const float *w = c->in.weights;
  const int grad = c->write_grad, softcap = c->opt.use_softcap;
  const float *w_sm = f->mode == 2 ? w : NULL;
  const int eo = EO(dt, !softcap && f->mode != 2);

  /* Pass 1, then what needs x' before pass 2 may overwrite it. */
  pass1_out p;
  const void *xp;  /* x' as pass 2 reads it */
  int xp_dt;
  if (softcap) {
    /* x' goes over fp32 logits in place when they get the gradient anyway. */
    if (dt == DT_F32 && grad) E = (float *)x;
    const float iv = f->k.inv_vocab;
    if (f->mode == 0) p = pass1_cap(x, V, 0, iv, f->cap, f->inv_cap, E, F, dt);
    else p = pass1_cap(x, V, 1, iv, f->cap, f->inv_cap, E, F, dt);
    xp = E;
    xp_dt = DT_F32;
  } else {
    const float iv = f->k.inv_vocab;
    if (f->mode == 0) p = pass1_plain(x, V, 0, iv, dt, 1);
    else if (f->mode == 1) p = pass1_plain(x, V, 1, iv, dt, 1);
    else p = pass1_plain(x, V, 2, iv, dt, 0);
    xp = x;
    xp_dt = dt;
  }
  const float m = p.m;
  const float xy = xp_dt == DT_F32 ? ((const float *)xp)[y] : load_one(xp, y, dt);
  int64_t pred = 0;
  if (f->want_pred) {
    /* NaN counts as the largest value, as in torch.argmax. */
    if (p.nan) pred = first_nan(xp, V, xp_dt);
    else if (xp_dt == DT_F32) pred = first_equal(xp, V, m, DT_F32);
    else pred = first_equal(xp, V, m, dt);
    if (pred < 0) pred = 0; /* not reached: m is one of the values */
  }

  /* A NaN, a +inf (x - m would be NaN) or a row of -inf: the exact formulas
   * give a NaN loss and a NaN gradient row, and so does this. */
  const int bad = p.nan || !(m > -INFINITY && m < INFINITY);

  /* Before pass 2 may overwrite x' with e. */
  const float mean_wx =
      w_sm && !bad ? weighted_shifted_mean(xp, V, w_sm, m, f->k.inv_vocab, xp_dt) : 0.0f;

  /* Pass 2: exponentials into E (fp32 logits: in place) when a gradient follows. */
  float *dst = NULL;
  if (grad) dst = dt == DT_F32 ? (float *)x : E;
  float s = NAN;
  if (bad) dst = NULL;
  else if (xp_dt == DT_F32) s = pass2(xp, V, m, dst, (const char *)next, ESZ(dt), DT_F32, 0);
  else if (eo) s = pass2(xp, V, m, dst, (const char *)next, ESZ(dt), dt, 1);
  else s = pass2(xp, V, m, dst, (const char *)next, ESZ(dt), dt, 0);

  xent_row_stats st;
  st.m = m;
  st.log_s = logf(s);
  st.xy = xy;
  st.mean_x = p.sum_x;
  st.mean_wx = mean_wx;
  st.wy = w ? w[y] : 1.0f;
  /* a row of nothing but -inf: lse -inf (its loss and gradient stay NaN) */
  const float lse = !p.nan && m == -INFINITY ? -INFINITY : xent_row_lse(&st);
  o->loss = xent_row_loss(&f->k, &st);
  o->z = xent_row_z(&f->k, lse);
  if (f->token_scaling) { /* times p_y, a constant to the gradient */
    const float py = expf((xy - m) - st.log_s);
    o->loss *= py;
    o->z *= py;
    grad_scale *= py;
  }
  o->lse = lse;
  o->pred = pred;
  o->correct = pred == y;

  if (!grad) return;
  if (bad) {
    fill_row(x, V, NAN, dt);
    return;
  }
  /* Pass 3. */
  xent_row_coef g = xent_row_coefficients(&f->k, &st, f->scale_loss, f->scale_z);
  g.a *= grad_scale;
  g.b *= grad_scale;
  g.c *= grad_scale;
  const float ap = g.a / s;
  const int64_t ye = eo && y < (V & ~(int64_t)15)
                        ? (y & ~(int64_t)15) + ((y & 1) << 3) + ((y & 15) >> 1)
                        : y; /* where e_y is */
  const float ey = dst[ye];
  const float *Ff = softcap ? F : NULL;
  if (eo) pass3(dst, V, ap, g.b, NULL, NULL, x, dt, 1);
  else pass3(dst, V, ap, g.b, w_sm, Ff, x, dt, 0);
  /* The target, with -c folded in fp32 before rounding. */
  float gy = w_sm ? fmaf(-g.b, w[y], ap * ey) : fmaf(ap, ey, -g.b);
  gy -= g.c;
  if (Ff) gy *= Ff[y];
  store_one(x, y, gy, dt);
}

/* Rows [r0, r1) of one thread. */
XENT_AI void rows_forward(const fwd_ctx *f, int64_t r0, int64_t r1, float *E, float *F,
                          row_res *res, const int dt) {
  const xent_call *c = f->c;
  const int64_t V = c->in.vocab, S = c->in.row_stride;
  for (int64_t r = r0; r < r1; r++) {
    void *x = (char *)c->in.logits + (size_t)r * (size_t)S * ESZ(dt);
    int64_t y = xent_cpu_target(c, r);
    row_res *o = &res[r];
    if (y == c->opt.ignore_index) {
      o->loss = 0.0f;
      o->z = 0.0f;
      o->lse = 0.0f;
      o->pred = -1;
      o->correct = 0;
      if (c->write_grad) memset(x, 0, (size_t)V * ESZ(dt));
      continue;
    }
    const void *next = NULL;
    if (f->prefetch && r + 1 < r1 && xent_cpu_target(c, r + 1) != c->opt.ignore_index)
      next = (const char *)x + (size_t)S * ESZ(dt);
    const float gs = f->row_grad_scale ? f->grad_scale * f->row_grad_scale[r] : f->grad_scale;
    row_forward(f, x, y, E, F, o, next, gs, dt);
  }
}

static void rows_f32(const fwd_ctx *f, int64_t r0, int64_t r1, float *E, float *F,
                     row_res *res) {
  rows_forward(f, r0, r1, E, F, res, DT_F32);
}
static void rows_bf16(const fwd_ctx *f, int64_t r0, int64_t r1, float *E, float *F,
                      row_res *res) {
  rows_forward(f, r0, r1, E, F, res, DT_BF16);
}
static void rows_f16(const fwd_ctx *f, int64_t r0, int64_t r1, float *E, float *F,
                     row_res *res) {
  rows_forward(f, r0, r1, E, F, res, DT_F16);
}

void xent_cpu_ce_init(fwd_ctx *f, const xent_call *c) {
  const int64_t rows = c->in.rows, V = c->in.vocab;
  const float *w = c->in.weights;
  memset(f, 0, sizeof *f);
  f->c = c;
  f->k.alpha = c->opt.label_smoothing;
  f->k.eps = c->opt.label_smoothing / (float)V;
  f->k.inv_vocab = 1.0f / (float)V;
  f->k.s = c->opt.lse_square_scale;
  f->k.weighted = w != NULL;
  f->k.smoothing = c->opt.label_smoothing > 0.0f;
  if (w) {
    double sw = 0.0;
    for (int64_t j = 0; j < V; j++) sw += w[j];
    f->k.sum_w = (float)sw;
  }
  f->mode = !f->k.smoothing ? 0 : (w ? 2 : 1);
  f->want_pred = c->out.predicted != NULL || c->out.token_accuracy != NULL;
  f->cap = c->opt.softcap;
  f->inv_cap = c->opt.use_softcap ? 1.0f / c->opt.softcap : 0.0f;
  f->grad_scale = 1.0f;

  /* N and W come from the targets alone (row order, double), so the
   * gradient scale is known before any row is processed. */
  int64_t n_valid = 0;
  double w_valid = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t y = xent_cpu_target(c, r);
    if (y == c->opt.ignore_index) continue;
    n_valid++;
    if (w) w_valid += w[y];
  }
  f->n_valid = n_valid;
  f->w_valid = w_valid;
  f->scale_loss = 1.0f;
  f->scale_z = 1.0f;
  if (c->opt.reduction == XENT_REDUCTION_MEAN && n_valid > 0) {
    f->scale_loss = (float)(1.0 / (w ? w_valid : (double)n_valid));
    f->scale_z = (float)(1.0 / (double)n_valid);
  }
}

xent_status xent_cpu_ce_rows(const fwd_ctx *fc, row_res *res) {
  fwd_ctx f = *fc;
  const xent_call *c = f.c;
  const int64_t rows = c->in.rows, V = c->in.vocab;
  if (rows == 0) return XENT_OK;

  /* Scratch: per thread, x' or e (V floats) unless they can go over fp32
   * logits in place, and with softcap and a gradient 1 - tanh^2. */
  const int nt = xent_cpu_pick_threads(c->ex.num_threads, rows, rows * V);
  const int softcap = c->opt.use_softcap;
  const int need_e = c->in.dtype == XENT_FLOAT32 ? softcap && !c->write_grad
                                                 : softcap || c->write_grad;
  const int need_f = softcap && c->write_grad;
  const size_t vpad = ((size_t)V + 15) & ~(size_t)15; /* 64-byte multiples */
  const size_t per_thread = vpad * (size_t)(need_e + need_f);
  /* Prefetch the next row while this one is in L2 when both rows and the
   * scratch fit in a typical L2 (two rows and scratch within 384 KiB). */
  f.prefetch = 2 * (size_t)V * xent_dtype_size(c->in.dtype) + per_thread * sizeof(float) <=
               ((size_t)384 << 10);
  void *scratch_raw = NULL;
  float *scratch = NULL;
  if (per_thread) {
    scratch_raw = malloc(per_thread * (size_t)nt * sizeof(float) + 64);
    if (!scratch_raw)
      return xent_fail(XENT_ERROR_OUT_OF_MEMORY,
                       "CPU backend: cannot allocate %zu bytes of scratch",
                       per_thread * (size_t)nt * sizeof(float));
    scratch = (float *)(((uintptr_t)scratch_raw + 63) & ~(uintptr_t)63);
  }

  void (*rows_fn)(const fwd_ctx *, int64_t, int64_t, float *, float *, row_res *) =
      c->in.dtype == XENT_BFLOAT16 ? rows_bf16 : c->in.dtype == XENT_FLOAT16 ? rows_f16 : rows_f32;

  /* Chunks of rows handed out dynamically (ignored rows cost nothing). */
  int64_t chunk = rows / ((int64_t)nt * 16);
  if (chunk < 1) chunk = 1;
  if (chunk > 64) chunk = 64;
  const int64_t nchunks = (rows + chunk - 1) / chunk;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
#ifdef _OPENMP
    const int tid = omp_get_thread_num();
#else
    const int tid = 0;
#endif
    float *E = need_e ? scratch + per_thread * (size_t)tid : NULL;
    float *F = need_f ? scratch + per_thread * (size_t)tid + vpad * (size_t)need_e : NULL;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (int64_t k = 0; k < nchunks; k++) {
      int64_t r0 = k * chunk, r1 = r0 + chunk < rows ? r0 + chunk : rows;
      rows_fn(&f, r0, r1, E, F, res);
    }
  }
  free(scratch_raw);
  return XENT_OK;
}

void xent_cpu_ce_outputs(const fwd_ctx *f, const xent_call *c, const row_res *res) {
  const int64_t rows = c->in.rows;
  const xent_output *out = &c->out;
  const int64_t n_valid = f->n_valid;
  const double w_valid = f->w_valid;
  const float *w = c->in.weights;
  if (c->opt.reduction == XENT_REDUCTION_NONE) {
    for (int64_t r = 0; r < rows; r++) {
      out->loss[r] = res[r].loss + res[r].z;
      if (out->z_loss) out->z_loss[r] = res[r].z;
      if (out->token_accuracy) out->token_accuracy[r] = (float)res[r].correct;
    }
  } else {
    /* a mean over no rows: NaN, or 0 by the caller's rule (the accuracy of a
     * sum over no rows stays NaN) */
    const int mean = c->opt.reduction == XENT_REDUCTION_MEAN;
    const double empty = mean && c->opt.empty_mean == XENT_EMPTY_MEAN_ZERO ? 0.0 : (double)NAN;
    double ls = 0.0, zs = 0.0;
    int64_t correct = 0;
    for (int64_t r = 0; r < rows; r++) {
      ls += res[r].loss;
      zs += res[r].z;
      correct += res[r].correct;
    }
    double loss, z;
    if (mean) {
      double d = w ? w_valid : (double)n_valid;
      loss = n_valid ? ls / d + zs / (double)n_valid : empty;
      z = n_valid ? zs / (double)n_valid : empty;
    } else {
      loss = ls + zs;
      z = zs;
    }
    out->loss[0] = (float)loss;
    if (out->z_loss) out->z_loss[0] = (float)z;
    if (out->token_accuracy)
      out->token_accuracy[0] =
          n_valid ? (float)((double)correct / (double)n_valid) : (float)empty;
  }
  if (out->predicted)
    for (int64_t r = 0; r < rows; r++) out->predicted[r] = res[r].pred;
  if (out->lse)
    for (int64_t r = 0; r < rows; r++) out->lse[r] = res[r].lse;
}

xent_status xent_cpu_forward(const xent_call *c) {
  fwd_ctx f;
  xent_cpu_ce_init(&f, c);
  row_res *res = NULL;
  if (c->in.rows > 0) {
    res = (row_res *)malloc((size_t)c->in.rows * sizeof(row_res));
    if (!res)
      return xent_fail(XENT_ERROR_OUT_OF_MEMORY, "CPU backend: cannot allocate %lld rows of results",
                       (long long)c->in.rows);
  }
  xent_status st = xent_cpu_ce_rows(&f, res);
  if (st == XENT_OK) xent_cpu_ce_outputs(&f, c, res);
  free(res);
  return st;
}
