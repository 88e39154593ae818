/*
 * vp.c - the CPU backend's vocabulary-parallel calls: a shard's records
 * (step 1 of xent.h's vocabulary-parallel calls) and, from the gathered records,
 * the outputs and the shard's gradient (step 3). A row per thread at a time, sums in
 * double, so results do not depend on the thread count.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/vp.h"
#include "cpu/ce.h"
#include "cpu/cpu.h"
#include "cpu/simd.h"
#include "cpu/threads.h"

/* simd.h's element types are the public dtypes' values */
_Static_assert(DT_F32 == (int)XENT_FLOAT32 && DT_BF16 == (int)XENT_BFLOAT16 &&
                   DT_F16 == (int)XENT_FLOAT16,
               "DT_* and xent_dtype");

static double xprime(const xent_call *c, double x) {
  return c->opt.use_softcap ? c->opt.softcap * tanh(x / c->opt.softcap) : x;
}

xent_status xent_cpu_vp_stats(const xent_vp_call *v) {
  const xent_call *c = &v->c;
  const int64_t rows = c->in.rows, W = c->in.vocab, V = v->vocab, off = v->offset;
  const size_t es = xent_dtype_size(c->in.dtype);
  const float *w = c->in.weights;
  const int R = v->record;
  const int smooth = c->opt.label_smoothing > 0.0f;
  const int nt = xent_cpu_pick_threads(c->ex.num_threads, rows, rows * W);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt) if (nt > 1)
#endif
  for (int64_t r = 0; r < rows; r++) {
    float *rec = v->records + r * R;
    memset(rec, 0, (size_t)R * sizeof(float));
    const int64_t y = xent_cpu_target(c, r);
    if (y == c->opt.ignore_index || y < 0 || y >= V) continue; /* bad: unchecked mode only */
    const void *x = (const char *)c->in.logits + (size_t)(r * c->in.row_stride) * es;
    double m = -INFINITY;
    int64_t am = -1;
    int nan = 0;
    for (int64_t j = 0; j < W; j++) {
      const double xp = xprime(c, load_one(x, j, (int)c->in.dtype));
      if (xp != xp) {
        if (!nan) am = j;
        nan = 1;
      } else if (xp > m) {
        m = xp;
        if (!nan) am = j;
      }
    }
    double s = 0.0, u = 0.0, wu = 0.0, sw = 0.0;
    for (int64_t j = 0; j < W; j++) {
      const double xp = xprime(c, load_one(x, j, (int)c->in.dtype));
      s += m == -INFINITY ? 0.0 : exp(xp - m);
      if (smooth) u += xp / (double)V;
      if (smooth && w) {
        wu += (double)w[off + j] * (xp == -INFINITY ? xp : xp - m) / (double)V; /* xent_shifted */
        sw += (double)w[off + j] / (double)V;
      }
    }
    xent_vp_row o;
    o.m = nan ? NAN : (float)m;
    o.s = nan ? NAN : (float)s;
    o.t = y >= off && y < off + W ? (float)xprime(c, load_one(x, y - off, (int)c->in.dtype)) : 0.0f;
    o.u = (float)u;
    o.wu = (float)wu;
    o.sw = (float)sw;
    o.idx = (int32_t)(am < 0 ? off : off + am);
    xent_vp_write(rec, R, &o);
  }
  return XENT_OK;
}

void xent_cpu_vp_rows(const xent_vp_call *v, const xent_cpu_ce *f, xent_cpu_row *res) {
  const xent_call *c = &v->c;
  const int64_t rows = c->in.rows, W = c->in.vocab, V = v->vocab, off = v->offset;
  const size_t es = xent_dtype_size(c->in.dtype);
  const int R = v->record;
  const float *w = c->in.weights;
  const int weighted_smoothing = w && c->opt.label_smoothing > 0.0f;
  const int nt = xent_cpu_pick_threads(c->ex.num_threads, rows, rows * W);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt) if (nt > 1)
#endif
  for (int64_t r = 0; r < rows; r++) {
    xent_cpu_row *o = &res[r];
    void *x = (char *)c->in.logits + (size_t)(r * c->in.row_stride) * es;
    const int64_t y = xent_cpu_target(c, r);
    memset(o, 0, sizeof *o);
    o->pred = -1;
    if (y == c->opt.ignore_index || y < 0 || y >= V) {
      if (y != c->opt.ignore_index) o->loss = o->z = NAN; /* unchecked mode's bad row */
      if (c->write_grad)
        for (int64_t j = 0; j < W; j++) store_one(x, j, 0.0f, (int)c->in.dtype);
      continue;
    }
    const xent_vp_row a = xent_vp_combine(v->gathered + r * R, rows * R, v->ranks, R);
    xent_row_stats st;
    st.m = a.m;
    st.log_s = logf(a.s);
    st.xy = a.t;
    st.mean_x = a.u;
    st.mean_wx = a.wu;
    st.wy = w ? w[y] : 1.0f;
    o->lse = xent_row_lse(&st);
    o->loss = xent_row_loss(&f->k, &st);
    o->z = xent_row_z(&f->k, o->lse);
    o->pred = a.idx;
    o->correct = a.idx == y;
    /* the fused linear loss's factors: p_y (a constant to the gradient) and
     * the upstream gradient */
    double gs = f->row_grad_scale ? (double)f->grad_scale * f->row_grad_scale[r] : f->grad_scale;
    if (f->token_scaling) {
      const float py = expf((a.t - a.m) - st.log_s);
      o->loss *= py;
      o->z *= py;
      gs *= py;
    }
    if (!c->write_grad) continue;
    const xent_row_coef g = xent_row_coefficients(&f->k, &st, f->scale_loss, f->scale_z);
    const double as = gs * (double)g.a / a.s, gb = gs * (double)g.b, gc = gs * (double)g.c;
    for (int64_t j = 0; j < W; j++) {
      const double xr = load_one(x, j, (int)c->in.dtype);
      double xp = xr, dfac = 1.0;
      if (c->opt.use_softcap) {
        const double t = tanh(xr / c->opt.softcap);
        xp = c->opt.softcap * t;
        dfac = 1.0 - t * t;
      }
      double gj = as * exp(xp - a.m) - gb * (weighted_smoothing ? w[off + j] : 1.0);
      if (off + j == y) gj -= gc;
      store_one(x, j, (float)(gj * dfac), (int)c->in.dtype);
    }
  }
}

xent_status xent_cpu_vp_forward(const xent_vp_call *v) {
  const xent_call *c = &v->c;
  const int64_t rows = c->in.rows;
  /* The constants, N and W of the whole vocabulary and every row. */
  xent_call full = *c;
  full.in.vocab = v->vocab;
  xent_cpu_ce f;
  xent_cpu_ce_init(&f, &full);
  xent_cpu_row *res = rows > 0 ? (xent_cpu_row *)malloc((size_t)rows * sizeof *res) : NULL;
  if (rows > 0 && !res)
    return xent_fail(XENT_ERROR_OUT_OF_MEMORY, "CPU backend: cannot allocate %lld rows of results",
                     (long long)rows);
  xent_cpu_vp_rows(v, &f, res);
  xent_cpu_ce_outputs(&f, &full, res);
  free(res);
  return XENT_OK;
}
