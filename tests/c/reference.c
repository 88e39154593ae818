/*
 * reference.c - the float64 reference of xent's math and the test helpers.
 * See reference.h.
 */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Scalar conversions                                                        */
/* ------------------------------------------------------------------------ */

uint32_t xt_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

float xt_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float xt_bf16_to_f32(uint16_t h) { return xt_bits_f32((uint32_t)h << 16); }

uint16_t xt_f32_to_bf16(float f) {
  uint32_t u = xt_f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep it a quiet NaN */
    return (uint16_t)((u >> 16) | 0x0040u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb; /* ties go to the even neighbour; overflow becomes inf */
  return (uint16_t)(u >> 16);
}

float xt_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu;
  uint32_t m = h & 0x3FFu;
  if (e == 0) {
    float v = (float)m * 0x1p-24f; /* zero or subnormal: exact */
    return sign ? -v : v;
  }
  if (e == 31) return xt_bits_f32(sign | 0x7F800000u | (m << 13));
  return xt_bits_f32(sign | ((e - 15u + 127u) << 23) | (m << 13));
}

uint16_t xt_f32_to_f16(float f) {
  uint32_t u = xt_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) /* NaN */
    return (uint16_t)(sign | 0x7C00u | 0x0200u | ((a >> 13) & 0x03FFu));
  if (a == 0x7F800000u) return (uint16_t)(sign | 0x7C00u);
  /* 65520 is half way between 65504 (odd mantissa) and 65536: it and
   * everything above round to infinity. */
  if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
  if (a < 0x38800000u) {
    /* Below 2^-14: a subnormal half (or zero). Count units of 2^-24; the
     * scaling by 2^24 is exact, rint rounds to nearest even. */
    float units = rintf(xt_bits_f32(a) * 0x1p24f);
    return (uint16_t)(sign | (uint16_t)units); /* 1024 is the smallest normal */
  }
  uint32_t e = (a >> 23) - 127u + 15u;
  uint32_t m = a & 0x7FFFFFu;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rest = m & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* carries into e */
  return (uint16_t)(sign | h);
}

size_t xt_dtype_size(xent_dtype dt) { return dt == XENT_FLOAT32 ? 4 : 2; }

const char *xt_dtype_name(xent_dtype dt) {
  switch (dt) {
    case XENT_FLOAT32: return "fp32";
    case XENT_BFLOAT16: return "bf16";
    case XENT_FLOAT16: return "fp16";
  }
  return "?";
}

const char *xt_reduction_name(xent_reduction r) {
  switch (r) {
    case XENT_REDUCTION_MEAN: return "mean";
    case XENT_REDUCTION_SUM: return "sum";
    case XENT_REDUCTION_NONE: return "none";
  }
  return "?";
}

double xt_load(const void *base, xent_dtype dt, int64_t i) {
  switch (dt) {
    case XENT_FLOAT32: return ((const float *)base)[i];
    case XENT_BFLOAT16: return xt_bf16_to_f32(((const uint16_t *)base)[i]);
    case XENT_FLOAT16: return xt_f16_to_f32(((const uint16_t *)base)[i]);
  }
  return NAN;
}

void xt_store(void *base, xent_dtype dt, int64_t i, double v) {
  float f = (float)v;
  switch (dt) {
    case XENT_FLOAT32: ((float *)base)[i] = f; break;
    case XENT_BFLOAT16: ((uint16_t *)base)[i] = xt_f32_to_bf16(f); break;
    case XENT_FLOAT16: ((uint16_t *)base)[i] = xt_f32_to_f16(f); break;
  }
}

double xt_round(double v, xent_dtype dt) {
  float f = (float)v;
  switch (dt) {
    case XENT_FLOAT32: return f;
    case XENT_BFLOAT16: return xt_bf16_to_f32(xt_f32_to_bf16(f));
    case XENT_FLOAT16: return xt_f16_to_f32(xt_f32_to_f16(f));
  }
  return NAN;
}

uint32_t xt_raw(const void *base, xent_dtype dt, int64_t i) {
  if (dt == XENT_FLOAT32) {
    uint32_t u;
    memcpy(&u, (const char *)base + 4 * i, 4);
    return u;
  }
  return ((const uint16_t *)base)[i];
}

/* ------------------------------------------------------------------------ */
/* Random numbers                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t xt_base_seed(void) {
  static int have = 0;
  static uint64_t seed = 0;
  if (!have) {
    const char *env = getenv("XENT_TEST_SEED");
    if (env && *env) {
      seed = strtoull(env, NULL, 0);
    } else {
      struct timespec ts;
      timespec_get(&ts, TIME_UTC);
      uint64_t t = (uint64_t)ts.tv_sec * 1000000007ull + (uint64_t)ts.tv_nsec;
      seed = splitmix(&t) % 1000000000000ull; /* short enough to retype */
    }
    have = 1;
    printf("[ SEED     ] XENT_TEST_SEED=%llu (set it to rerun with the same data)\n",
           (unsigned long long)seed);
    fflush(stdout);
  }
  return seed;
}

xt_rng xt_rng_for(const char *test_name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the name */
  for (const char *c = test_name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  xt_rng r;
  r.s = xt_base_seed() ^ h;
  splitmix(&r.s);
  return r;
}

uint64_t xt_next(xt_rng *r) { return splitmix(&r->s); }

double xt_uniform(xt_rng *r) { return (double)(xt_next(r) >> 11) * 0x1p-53; }

double xt_normal(xt_rng *r) {
  double u1 = 1.0 - xt_uniform(r); /* (0, 1] */
  double u2 = xt_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t xt_randint(xt_rng *r, int64_t n) {
  if (n <= 0) return 0;
  return (int64_t)(xt_next(r) % (uint64_t)n);
}

/* ------------------------------------------------------------------------ */
/* Poison                                                                    */
/* ------------------------------------------------------------------------ */

void xt_poison_f32(float *p, int64_t n) {
  float v = xt_bits_f32(XT_POISON_F32);
  for (int64_t i = 0; i < n; i++) p[i] = v;
}

void xt_poison_i64(int64_t *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = XT_POISON_I64;
}

void xt_poison_dtype(void *p, xent_dtype dt, int64_t n) {
  if (dt == XENT_FLOAT32) {
    xt_poison_f32((float *)p, n);
    return;
  }
  uint16_t v = dt == XENT_BFLOAT16 ? (uint16_t)XT_POISON_BF16 : (uint16_t)XT_POISON_F16;
  for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = v;
}

int xt_is_poison_f32(float v) { return xt_f32_bits(v) == XT_POISON_F32; }

int xt_is_poison_dtype(const void *base, xent_dtype dt, int64_t i) {
  uint32_t u = xt_raw(base, dt, i);
  switch (dt) {
    case XENT_FLOAT32: return u == XT_POISON_F32;
    case XENT_BFLOAT16: return u == XT_POISON_BF16;
    case XENT_FLOAT16: return u == XT_POISON_F16;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                   */
/* ------------------------------------------------------------------------ */

void *xt_alloc(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  if (n == 0) n = 64;
  void *p = aligned_alloc(64, n);
  if (p) memset(p, 0, n);
  return p;
}

void xt_free(void *p) { free(p); }

/* ------------------------------------------------------------------------ */
/* The reference                                                             */
/* ------------------------------------------------------------------------ */

double xt_xprime(const xt_params *p, double x) {
  return p->use_softcap ? p->cap * tanh(x / p->cap) : x;
}

static double weight_of(const xt_params *p, int64_t j) { return p->weights ? p->weights[j] : 1.0; }

void xt_scales(const xt_params *p, const int64_t *targets, int64_t rows, int64_t *n_valid,
               double *w_valid, double *scale_loss, double *scale_z) {
  int64_t n = 0;
  double w = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    int64_t y = targets[r];
    if (y == p->ignore_index) continue;
    n++;
    /* A target outside [0, V) only reaches here in the unchecked mode; such
     * a row counts in N and reads no weight. */
    if (y >= 0 && y < p->vocab) w += weight_of(p, y);
  }
  *n_valid = n;
  *w_valid = p->weights ? w : (double)n;
  if (p->reduction == XENT_REDUCTION_MEAN) {
    *scale_loss = 1.0 / *w_valid; /* inf when there are none: no row uses it */
    *scale_z = 1.0 / (double)n;
  } else {
    *scale_loss = 1.0;
    *scale_z = 1.0;
  }
}

void xt_ref_row(const xt_params *p, const double *x, int64_t y, double scale_loss,
                double scale_z, xt_row *out, double *grad) {
  const int64_t V = p->vocab;
  memset(out, 0, sizeof *out);
  out->argmax = -1;
  out->finite = 1;
  if (y == p->ignore_index) {
    out->ignored = 1;
    if (grad)
      for (int64_t j = 0; j < V; j++) grad[j] = 0.0;
    return;
  }
  const double alpha = p->alpha, eps = p->alpha / (double)V, s = p->s;

  /* Pass 1: max, first arg-max, the sums smoothing needs. */
  double m = -INFINITY, sum_x = 0.0, sum_abs_x = 0.0, sum_wx = 0.0, sum_abs_wx = 0.0;
  double sum_w = 0.0, sum_abs_w = 0.0, max_abs_w = 0.0;
  int64_t am = -1;
  for (int64_t j = 0; j < V; j++) {
    if (isnan(x[j]) || x[j] == INFINITY) out->finite = 0;
    double xp = xt_xprime(p, x[j]);
    if (am < 0 || xp > m) { /* strictly greater: the first arg-max wins */
      m = xp;
      am = j;
    }
    double w = weight_of(p, j);
    sum_x += xp;
    sum_abs_x += fabs(xp);
    sum_wx += w * xp;
    sum_abs_wx += fabs(w * xp);
    sum_w += w;
    sum_abs_w += fabs(w);
    if (fabs(w) > max_abs_w) max_abs_w = fabs(w);
  }
  out->argmax = am;
  out->xmax = m;
  out->tie_delta = p->use_softcap ? 1e-6 * fmax(1.0, fabs(m)) : 0.0;

  /* Pass 2: the sum of exponentials; ambiguous arg-maxes. */
  double sum_e = 0.0;
  for (int64_t j = 0; j < V; j++) {
    double xp = xt_xprime(p, x[j]);
    sum_e += exp(xp - m);
    if (out->tie_delta > 0.0 && j != am && x[j] != x[am] && xp >= m - out->tie_delta)
      out->ambiguous = 1;
  }
  /* lse as its two parts: m + log(sum_e) rounds log(sum_e) away once |m|
   * passes about 1e15, even in double, and the loss is their difference
   * with x'_y. */
  const double log_s = log(sum_e);
  double lse = m + log_s;
  if (m == -INFINITY) lse = -INFINITY;
  out->lse = lse;
  out->hit = (am == y);

  int64_t yc = (y >= 0 && y < V) ? y : -1;
  if (yc < 0) {
    /* Unchecked mode, bad target: NaN loss and z, zero gradient. */
    out->loss = NAN;
    out->z = NAN;
    out->mag = 0.0;
    out->hit = 0;
    out->gscale = 0.0;
    if (grad)
      for (int64_t j = 0; j < V; j++) grad[j] = 0.0;
    return;
  }
  double xy = xt_xprime(p, x[yc]);
  double wy = weight_of(p, yc);

  /* The smoothing terms only exist when alpha > 0 (with masked -inf logits
   * 0 * inf would otherwise poison the row). */
  const double nll = (m - xy) + log_s;
  if (!p->weights) {
    out->loss = (1.0 - alpha) * nll;
    out->mag = (1.0 - alpha) * (fabs(lse) + fabs(xy));
    if (alpha > 0.0) {
      out->loss += alpha * log_s + (alpha * m - eps * sum_x);
      out->mag += alpha * fabs(lse) + eps * sum_abs_x;
    }
  } else {
    out->loss = (1.0 - alpha) * wy * nll;
    out->mag = (1.0 - alpha) * fabs(wy) * (fabs(lse) + fabs(xy));
    if (alpha > 0.0) {
      out->loss += eps * (log_s * sum_w + (m * sum_w - sum_wx));
      out->mag += eps * (fabs(lse) * sum_abs_w + sum_abs_wx);
    }
  }
  out->z = s * lse * lse;

  double zcoef = scale_z * 2.0 * s * lse;
  if (!p->weights)
    out->gscale = fabs(scale_loss) * (1.0 + eps + (1.0 - alpha)) + fabs(zcoef);
  else
    out->gscale = fabs(scale_loss) * (2.0 * (1.0 - alpha) * fabs(wy) + eps * (sum_abs_w + max_abs_w)) +
                  fabs(zcoef);
  if (!grad) return;

  /* Pass 3: the gradient. */
  for (int64_t j = 0; j < V; j++) {
    double xp = xt_xprime(p, x[j]);
    double pj = exp((xp - m) - log_s);
    double onehot = (j == yc) ? 1.0 : 0.0;
    double g;
    if (!p->weights) {
      g = scale_loss * (pj - eps - (1.0 - alpha) * onehot);
    } else {
      g = scale_loss * ((1.0 - alpha) * wy * (pj - onehot) + eps * (pj * sum_w - weight_of(p, j)));
    }
    g += zcoef * pj;
    if (p->use_softcap) {
      double t = tanh(x[j] / p->cap);
      g *= 1.0 - t * t;
    }
    grad[j] = g;
  }
}

int xt_reference(const xt_params *p, const double *x, const int64_t *targets, int64_t rows,
                 int want_grad, xt_result *res) {
  memset(res, 0, sizeof *res);
  res->rows = rows;
  res->row = (xt_row *)calloc(rows > 0 ? (size_t)rows : 1, sizeof(xt_row));
  if (!res->row) return -1;
  if (want_grad) {
    res->grad = (double *)malloc((rows > 0 ? (size_t)rows : 1) * (size_t)p->vocab * sizeof(double));
    if (!res->grad) {
      free(res->row);
      res->row = NULL;
      return -1;
    }
  }
  xt_scales(p, targets, rows, &res->n_valid, &res->w_valid, &res->scale_loss, &res->scale_z);
  double row_scale_loss = p->reduction == XENT_REDUCTION_NONE ? 1.0 : res->scale_loss;
  double row_scale_z = p->reduction == XENT_REDUCTION_NONE ? 1.0 : res->scale_z;

  double sum_loss = 0.0, sum_z = 0.0, sum_mag = 0.0;
  res->all_finite = 1;
  for (int64_t r = 0; r < rows; r++) {
    xt_row *o = &res->row[r];
    xt_ref_row(p, x + r * p->vocab, targets[r], row_scale_loss, row_scale_z, o,
               want_grad ? res->grad + r * p->vocab : NULL);
    if (o->ignored) continue;
    if (!o->finite) res->all_finite = 0;
    sum_loss += o->loss;
    sum_z += o->z;
    sum_mag += o->mag;
    if (o->ambiguous)
      res->ambiguous++;
    else if (o->hit)
      res->hits++;
  }
  if (p->reduction == XENT_REDUCTION_MEAN) {
    if (res->n_valid == 0) {
      res->loss = res->z = p->empty_zero ? 0.0 : NAN;
      res->loss_mag = 0.0;
    } else {
      res->loss = sum_loss * res->scale_loss + sum_z * res->scale_z;
      res->z = sum_z * res->scale_z;
      res->loss_mag = sum_mag * fabs(res->scale_loss) + fabs(sum_z) * res->scale_z;
    }
  } else {
    res->loss = sum_loss + sum_z;
    res->z = sum_z;
    res->loss_mag = sum_mag + fabs(sum_z);
  }
  res->acc = res->n_valid > 0 ? (double)res->hits / (double)res->n_valid
             : p->empty_zero    ? 0.0
                                : NAN;
  return 0;
}

void xt_result_free(xt_result *res) {
  free(res->row);
  free(res->grad);
  res->row = NULL;
  res->grad = NULL;
}

int xt_argmax_ok(const xt_params *p, const xt_row *r, const double *x, int64_t pred) {
  if (r->ignored) return pred == -1;
  if (pred == r->argmax) return 1;
  if (pred < 0 || pred >= p->vocab || r->tie_delta <= 0.0) return 0;
  return xt_xprime(p, x[pred]) >= r->xmax - r->tie_delta;
}
