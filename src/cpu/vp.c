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
#include "cpu/threads.h"

static double load(const void *row, int64_t j, xent_dtype dt) {
  if (dt == XENT_FLOAT32) return ((const float *)row)[j];
  uint16_t h = ((const uint16_t *)row)[j];
  uint32_t u;
  if (dt == XENT_BFLOAT16) {
    u = (uint32_t)h << 16;
  } else { /* fp16 */
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    float mag;
    if (em >= 0x7c00u) {
      uint32_t b = (em << 13) | 0x7f800000u;
      memcpy(&mag, &b, 4);
    } else if (em >= 0x0400u) {
      uint32_t b = (em << 13) + (112u << 23);
      memcpy(&mag, &b, 4);
    } else {
      mag = (float)em * 0x1p-24f;
    }
    memcpy(&u, &mag, 4);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void store(void *row, int64_t j, float v, xent_dtype dt) {
  if (dt == XENT_FLOAT32) {
    ((float *)row)[j] = v;
    return;
  }
  uint32_t u;
  memcpy(&u, &v, 4);
  uint16_t h;
  if (dt == XENT_BFLOAT16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) h = (uint16_t)((u >> 16) | 0x40u); /* NaN */
    else h = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);            /* nearest even */
  } else {
    const uint32_t sign = (u >> 16) & 0x8000u;
    const float a = fabsf(v);
    if (a != a) h = (uint16_t)(sign | 0x7e00u);
    else if (a >= 65520.0f) h = (uint16_t)(sign | 0x7c00u);
    else if (a < 0x1p-14f) h = (uint16_t)(sign | (uint32_t)lrintf(a * 0x1p24f)); /* subnormal */
    else {
      uint32_t b;
      memcpy(&b, &a, 4);
      const uint32_t r = b + 0xfffu + ((b >> 13) & 1u);
      h = (uint16_t)(sign | ((r - (112u << 23)) >> 13));
    }
  }
  ((uint16_t *)row)[j] = h;
}

static int64_t target_of(const xent_call *c, int64_t r) {
  return c->in.target_type == XENT_INT32 ? (int64_t)((const int32_t *)c->in.targets)[r]
                                         : ((const int64_t *)c->in.targets)[r];
}

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
    const int64_t y = target_of(c, r);
    if (y == c->opt.ignore_index || y < 0 || y >= V) continue; /* bad: unchecked mode only */
    const void *x = (const char *)c->in.logits + (size_t)(r * c->in.row_stride) * es;
    double m = -INFINITY;
    int64_t am = -1;
    int nan = 0;
    for (int64_t j = 0; j < W; j++) {
      const double xp = xprime(c, load(x, j, c->in.dtype));
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
      const double xp = xprime(c, load(x, j, c->in.dtype));
      s += m == -INFINITY ? 0.0 : exp(xp - m);
      if (smooth) u += xp / (double)V;
      if (smooth && w) {
        wu += (double)w[off + j] * (xp - m) / (double)V;
        sw += (double)w[off + j] / (double)V;
      }
    }
    xent_vp_row o;
    o.m = nan ? NAN : (float)m;
    o.s = nan ? NAN : (float)s;
    o.t = y >= off && y < off + W ? (float)xprime(c, load(x, y - off, c->in.dtype)) : 0.0f;
    o.u = (float)u;
    o.wu = (float)wu;
    o.sw = (float)sw;
    o.idx = (int32_t)(am < 0 ? off : off + am);
    xent_vp_write(rec, R, &o);
  }
  return XENT_OK;
}

xent_status xent_cpu_vp_forward(const xent_vp_call *v) {
  const xent_call *c = &v->c;
  const int64_t rows = c->in.rows, W = c->in.vocab, V = v->vocab, off = v->offset;
  const size_t es = xent_dtype_size(c->in.dtype);
  const int R = v->record;
  /* The constants, N and W of the whole vocabulary and every row. */
  xent_call full = *c;
  full.in.vocab = V;
  xent_cpu_ce f;
  xent_cpu_ce_init(&f, &full);
  const float *w = c->in.weights;
  const int weighted_smoothing = w && c->opt.label_smoothing > 0.0f;
  xent_cpu_row *res = rows > 0 ? (xent_cpu_row *)malloc((size_t)rows * sizeof *res) : NULL;
  if (rows > 0 && !res)
    return xent_fail(XENT_ERROR_OUT_OF_MEMORY, "CPU backend: cannot allocate %lld rows of results",
                     (long long)rows);
  const int nt = xent_cpu_pick_threads(c->ex.num_threads, rows, rows * W);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 4) num_threads(nt) if (nt > 1)
#endif
  for (int64_t r = 0; r < rows; r++) {
    xent_cpu_row *o = &res[r];
    void *x = (char *)c->in.logits + (size_t)(r * c->in.row_stride) * es;
    const int64_t y = target_of(c, r);
    memset(o, 0, sizeof *o);
    o->pred = -1;
    if (y == c->opt.ignore_index || y < 0 || y >= V) {
      if (y != c->opt.ignore_index) o->loss = o->z = NAN; /* unchecked mode's bad row */
      if (c->write_grad)
        for (int64_t j = 0; j < W; j++) store(x, j, 0.0f, c->in.dtype);
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
    o->loss = xent_row_loss(&f.k, &st);
    o->z = xent_row_z(&f.k, o->lse);
    o->pred = a.idx;
    o->correct = a.idx == y;
    if (!c->write_grad) continue;
    const xent_row_coef g = xent_row_coefficients(&f.k, &st, f.scale_loss, f.scale_z);
    const double as = (double)g.a / a.s;
    for (int64_t j = 0; j < W; j++) {
      const double xr = load(x, j, c->in.dtype);
      double xp = xr, dfac = 1.0;
      if (c->opt.use_softcap) {
        const double t = tanh(xr / c->opt.softcap);
        xp = c->opt.softcap * t;
        dfac = 1.0 - t * t;
      }
      double gj = as * exp(xp - a.m) - g.b * (weighted_smoothing ? w[off + j] : 1.0);
      if (off + j == y) gj -= g.c;
      store(x, j, (float)(gj * dfac), c->in.dtype);
    }
  }
  xent_cpu_ce_outputs(&f, &full, res);
  free(res);
  return XENT_OK;
}
