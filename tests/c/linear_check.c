/*
 * linear_check.c - problems, reference and checks of the fused linear
 * cross-entropy tests (linear_check.h).
 */
#include "linear_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

xt_lin_case xt_lin_default(xent_dtype dt, int64_t rows, int64_t H, int64_t V) {
  xt_lin_case c;
  memset(&c, 0, sizeof c);
  c.dt = dt;
  c.ttype = XENT_INT64;
  c.red = XENT_REDUCTION_MEAN;
  c.rows = rows;
  c.H = H;
  c.V = V;
  c.ignore_frac = 0.1;
  c.ignore_index = -100;
  c.backward = 1;
  c.dx = c.dw = c.db = 1;
  c.gx_dt = c.gw_dt = c.gb_dt = dt;
  c.accum = XENT_ACCUM_GRAD;
  c.go = 1;
  c.want_z = c.want_acc = c.want_pred = c.want_lse = 1;
  c.check = XENT_TARGETS_CHECKED;
  c.sigma = 2.0;
  c.cap = 15.0;
  return c;
}

void xt_lin_desc(const xt_lin_case *c, char *buf, size_t n) {
  snprintf(buf, n,
           "%s %s BT=%" PRId64 " H=%" PRId64 " V=%" PRId64 " pad=%" PRId64 "/%" PRId64
           " chunk=%" PRId64 " budget=%zu%s%s%s%s%s%s ls=%g z=%g%s go=%d grads=%s%s%s(%s/%s/%s)%s%s%s",
           xt_dtype_name(c->dt), xt_reduction_name(c->red), c->rows, c->H, c->V, c->hpad,
           c->wpad, c->chunk_rows, c->budget,
           c->schedule == XENT_SCHEDULE_VOCAB  ? " vocab"
           : c->schedule == XENT_SCHEDULE_ROWS ? " rows"
                                               : "",
           c->bias ? " bias" : "", c->weighted ? " weights" : "",
           c->softcap ? " softcap" : "", c->token_scaling ? " token-scaling" : "",
           c->ttype == XENT_INT32 ? " int32" : "", c->alpha, c->s,
           c->backward ? "" : " forward-only", c->go, c->dx ? "x" : "", c->dw ? "w" : "",
           c->db ? "b" : "", xt_dtype_name(c->gx_dt), xt_dtype_name(c->gw_dt),
           xt_dtype_name(c->gb_dt), c->accumulate ? " accumulate" : "",
           c->accum == XENT_ACCUM_FP32 ? " accum-fp32" : "", c->gpu ? " gpu" : "");
}

static double unit(xent_dtype dt) {
  return dt == XENT_FLOAT32 ? 0x1p-24 : dt == XENT_BFLOAT16 ? 0x1p-8 : 0x1p-11;
}

static void *alloc_dtype(xent_dtype dt, int64_t n, size_t *bytes) {
  size_t b = (size_t)(n > 0 ? n : 1) * xt_dtype_size(dt);
  if (bytes) *bytes = b;
  return xt_alloc(b);
}

/* A rows x cols matrix of dt with row stride ld: values from fill(), the
 * padding poisoned. */
static void fill_matrix(void *m, xent_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                        double scale, xt_rng *rng) {
  xt_poison_dtype(m, dt, rows * ld);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < cols; k++) xt_store(m, dt, r * ld + k, scale * xt_normal(rng));
}

int xt_lin_make(xt_lin *p, const xt_lin_case *c, xt_rng *rng) {
  memset(p, 0, sizeof *p);
  p->c = *c;
  const int64_t rows = c->rows, H = c->H, V = c->V;
  p->hs = H + c->hpad;
  p->ws = H + c->wpad;
  p->gxs = H + c->gxpad;
  p->gws = H + c->gwpad;
  p->hidden = alloc_dtype(c->dt, rows * p->hs, NULL);
  p->weight = alloc_dtype(c->dt, V * p->ws, NULL);
  p->bias = c->bias ? alloc_dtype(c->dt, V, NULL) : NULL;
  p->targets = xt_alloc((size_t)(rows > 0 ? rows : 1) * 8);
  p->t64 = (int64_t *)xt_alloc((size_t)(rows > 0 ? rows : 1) * 8);
  p->cw = c->weighted ? (float *)xt_alloc((size_t)V * 4) : NULL;
  p->go = (float *)xt_alloc((size_t)(rows > 0 ? rows : 1) * 4);
  p->gx0 = alloc_dtype(c->gx_dt, rows * p->gxs, &p->gx_bytes);
  p->gw0 = alloc_dtype(c->gw_dt, V * p->gws, &p->gw_bytes);
  p->gb0 = alloc_dtype(c->gb_dt, V, &p->gb_bytes);
  const size_t nz = (size_t)(rows > 0 ? rows : 1) * (size_t)V;
  p->Z = (double *)malloc(nz * sizeof(double));
  p->dx = (double *)calloc((size_t)(rows > 0 ? rows : 1) * (size_t)H, sizeof(double));
  p->dxa = (double *)calloc((size_t)(rows > 0 ? rows : 1) * (size_t)H, sizeof(double));
  p->dw = (double *)calloc((size_t)V * (size_t)H, sizeof(double));
  p->dwa = (double *)calloc((size_t)V * (size_t)H, sizeof(double));
  p->db = (double *)calloc((size_t)V, sizeof(double));
  p->wcol = (double *)calloc((size_t)H, sizeof(double));
  p->xcol = (double *)calloc((size_t)H, sizeof(double));
  p->dba = (double *)calloc((size_t)V, sizeof(double));
  p->row_loss = (double *)calloc((size_t)(rows > 0 ? rows : 1), sizeof(double));
  p->row_z = (double *)calloc((size_t)(rows > 0 ? rows : 1), sizeof(double));
  double *X = (double *)malloc((size_t)(rows > 0 ? rows : 1) * (size_t)H * sizeof(double));
  double *W = (double *)malloc((size_t)V * (size_t)H * sizeof(double));
  double *B = (double *)calloc((size_t)V, sizeof(double));
  double *wd = c->weighted ? (double *)malloc((size_t)V * sizeof(double)) : NULL;
  double *G = (double *)malloc(nz * sizeof(double));
  if (!p->hidden || !p->weight || (c->bias && !p->bias) || !p->targets || !p->t64 ||
      (c->weighted && (!p->cw || !wd)) || !p->go || !p->gx0 || !p->gw0 || !p->gb0 || !p->Z ||
      !p->dx || !p->dxa || !p->wcol || !p->xcol || !p->dw || !p->dwa || !p->db || !p->dba || !p->row_loss ||
      !p->row_z || !X || !W || !B || !G) {
    free(X), free(W), free(B), free(wd), free(G);
    return -1;
  }

  /* Inputs: logits of spread about sigma. */
  fill_matrix(p->hidden, c->dt, rows, H, p->hs, 1.0, rng);
  fill_matrix(p->weight, c->dt, V, H, p->ws, c->sigma / sqrt((double)H), rng);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < H; k++) X[r * H + k] = xt_load(p->hidden, c->dt, r * p->hs + k);
  for (int64_t j = 0; j < V; j++)
    for (int64_t k = 0; k < H; k++) W[j * H + k] = xt_load(p->weight, c->dt, j * p->ws + k);
  if (c->bias)
    for (int64_t j = 0; j < V; j++) {
      xt_store(p->bias, c->dt, j, 0.5 * xt_normal(rng));
      B[j] = xt_load(p->bias, c->dt, j);
    }
  for (int64_t r = 0; r < rows; r++) {
    int64_t y = xt_uniform(rng) < c->ignore_frac ? c->ignore_index : xt_randint(rng, V);
    p->t64[r] = y;
    if (c->ttype == XENT_INT32) ((int32_t *)p->targets)[r] = (int32_t)y;
    else ((int64_t *)p->targets)[r] = y;
  }
  if (c->weighted)
    for (int64_t j = 0; j < V; j++) {
      p->cw[j] = (float)(0.5 + 1.5 * xt_uniform(rng));
      wd[j] = p->cw[j];
    }
  p->go_count = c->go == 2 ? rows : 1;
  for (int64_t r = 0; r < (c->go == 2 ? rows : 1); r++)
    p->go[r] = c->go == 0 ? 1.0f : (float)(4.0 * xt_uniform(rng) - 2.0);
  if (c->go == 1 && fabsf(p->go[0]) < 0.25f) p->go[0] = 1.5f;

  /* The gradients' buffers: poison, or (accumulate) small values to add to. */
  xt_poison_dtype(p->gx0, c->gx_dt, rows * p->gxs);
  xt_poison_dtype(p->gw0, c->gw_dt, V * p->gws);
  xt_poison_dtype(p->gb0, c->gb_dt, V);
  if (c->accumulate) {
    fill_matrix(p->gx0, c->gx_dt, rows, H, p->gxs, 0.01, rng);
    fill_matrix(p->gw0, c->gw_dt, V, H, p->gws, 0.01, rng);
    fill_matrix(p->gb0, c->gb_dt, 1, V, V, 0.01, rng);
  }

  /* The reference: logits, cross-entropy, token scaling, upstream gradient. */
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < V; j++) {
      double s = B[j];
      for (int64_t k = 0; k < H; k++) s += X[r * H + k] * W[j * H + k];
      p->Z[r * V + j] = c->gpu ? xt_round(s, c->dt) : s;
    }
  xt_params *pa = &p->params;
  pa->vocab = V;
  pa->ignore_index = c->ignore_index;
  pa->reduction = c->red;
  pa->alpha = c->alpha;
  pa->s = c->s;
  pa->use_softcap = c->softcap;
  pa->cap = c->cap;
  pa->weights = wd;
  pa->empty_zero = c->empty_zero;
  if (xt_reference(pa, p->Z, p->t64, rows, 1, &p->res) != 0) {
    free(X), free(W), free(B), free(wd), free(G);
    return -1;
  }
  pa->weights = NULL; /* wd is freed below; the checks need no weights */
  const int none = c->red == XENT_REDUCTION_NONE;
  double sl = 0.0, sz = 0.0, zt = 0.0, zall = 0.0;
  p->n_valid = p->res.n_valid;
  for (int64_t r = 0; r < rows; r++) {
    const xt_row *o = &p->res.row[r];
    double f = 0.0;
    if (!o->ignored) {
      f = c->token_scaling ? exp(xt_xprime(pa, p->Z[r * V + p->t64[r]]) - o->lse) : 1.0;
      if (o->hit && !o->ambiguous) p->hits++;
    }
    p->row_loss[r] = o->loss * f;
    p->row_z[r] = o->z * f;
    sl += p->row_loss[r];
    sz += p->row_z[r];
    double zmax = 0.0;
    for (int64_t j = 0; j < V; j++) zmax = fmax(zmax, fabs(p->Z[r * V + j]));
    zt += (c->gpu ? 2.0 * unit(c->dt) : 1e-5) * (zmax + 1.0);
    zall = fmax(zall, zmax);
    const double g = (c->go == 2 ? p->go[r] : p->go[0]) * f;
    for (int64_t j = 0; j < V; j++) G[r * V + j] = p->res.grad[r * V + j] * g;
  }
  p->lse_err = c->gpu ? 2.0 * unit(c->dt) : 1e-5;
  p->p_err = p->lse_err * (zall + 1.0);
  if (c->red == XENT_REDUCTION_MEAN) {
    if (p->n_valid == 0) {
      p->loss = p->z = p->acc = c->empty_zero ? 0.0 : NAN;
    } else {
      p->loss = sl * p->res.scale_loss + sz * p->res.scale_z;
      p->z = sz * p->res.scale_z;
    }
    zt *= p->n_valid ? fabs(p->res.scale_loss) : 0.0;
  } else if (!none) {
    p->loss = sl + sz;
    p->z = sz;
    p->acc = NAN; /* a fraction of no rows: the empty-mean rule is the mean's alone */
  }
  if (!none) p->acc = p->n_valid ? (double)p->hits / (double)p->n_valid : p->acc;
  p->loss_mag = p->res.loss_mag + zt;

  for (int64_t k = 0; k < H; k++) {
    for (int64_t j = 0; j < V; j++) p->wcol[k] += W[j * H + k] * W[j * H + k];
    for (int64_t r = 0; r < rows; r++) p->xcol[k] += X[r * H + k] * X[r * H + k];
    p->wcol[k] = sqrt(p->wcol[k]);
    p->xcol[k] = sqrt(p->xcol[k]);
  }
  /* dX = G W, dW = G^T X, db = sum_r G, with their magnitudes. */
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < V; j++) {
      const double gv = G[r * V + j];
      if (gv == 0.0) continue;
      for (int64_t k = 0; k < H; k++) {
        p->dx[r * H + k] += gv * W[j * H + k];
        p->dxa[r * H + k] += fabs(gv * W[j * H + k]);
        p->dw[j * H + k] += gv * X[r * H + k];
        p->dwa[j * H + k] += fabs(gv * X[r * H + k]);
      }
      p->db[j] += gv;
      p->dba[j] += fabs(gv);
    }
  if (c->accumulate) { /* the running sums' roundings scale with what they add to */
    for (int64_t r = 0; r < rows; r++)
      for (int64_t k = 0; k < H; k++) {
        const double v0 = xt_load(p->gx0, c->gx_dt, r * p->gxs + k);
        p->dx[r * H + k] += v0;
        p->dxa[r * H + k] += fabs(v0);
      }
    for (int64_t j = 0; j < V; j++) {
      for (int64_t k = 0; k < H; k++) {
        const double v0 = xt_load(p->gw0, c->gw_dt, j * p->gws + k);
        p->dw[j * H + k] += v0;
        p->dwa[j * H + k] += fabs(v0);
      }
      const double b0 = xt_load(p->gb0, c->gb_dt, j);
      p->db[j] += b0;
      p->dba[j] += fabs(b0);
    }
  }
  free(X), free(W), free(B), free(wd), free(G);
  return 0;
}

void xt_lin_free(xt_lin *p) {
  xt_free(p->hidden);
  xt_free(p->weight);
  xt_free(p->bias);
  xt_free(p->targets);
  xt_free(p->t64);
  xt_free(p->cw);
  xt_free(p->go);
  xt_free(p->gx0);
  xt_free(p->gw0);
  xt_free(p->gb0);
  free(p->Z);
  free(p->dx);
  free(p->dxa);
  free(p->dw);
  free(p->dwa);
  free(p->db);
  free(p->dba);
  free(p->wcol);
  free(p->xcol);
  free(p->row_loss);
  free(p->row_z);
  xt_result_free(&p->res);
  memset(p, 0, sizeof *p);
}

int xt_lin_out_make(const xt_lin *p, xt_lin_out *o) {
  memset(o, 0, sizeof *o);
  const int64_t rows = p->c.rows;
  o->count = p->c.red == XENT_REDUCTION_NONE ? rows : 1;
  o->loss = (float *)xt_alloc((size_t)(o->count + 1) * 4);
  o->z = (float *)xt_alloc((size_t)(o->count + 1) * 4);
  o->acc = (float *)xt_alloc((size_t)(o->count + 1) * 4);
  o->lse = (float *)xt_alloc((size_t)(rows + 1) * 4);
  o->pred = (int64_t *)xt_alloc((size_t)(rows + 1) * 8);
  o->gx = xt_alloc(p->gx_bytes);
  o->gw = xt_alloc(p->gw_bytes);
  o->gb = xt_alloc(p->gb_bytes);
  if (!o->loss || !o->z || !o->acc || !o->lse || !o->pred || !o->gx || !o->gw || !o->gb) return -1;
  xt_poison_f32(o->loss, o->count + 1);
  xt_poison_f32(o->z, o->count + 1);
  xt_poison_f32(o->acc, o->count + 1);
  xt_poison_f32(o->lse, rows + 1);
  xt_poison_i64(o->pred, rows + 1);
  memcpy(o->gx, p->gx0, p->gx_bytes);
  memcpy(o->gw, p->gw0, p->gw_bytes);
  memcpy(o->gb, p->gb0, p->gb_bytes);
  return 0;
}

void xt_lin_out_free(xt_lin_out *o) {
  xt_free(o->loss);
  xt_free(o->z);
  xt_free(o->acc);
  xt_free(o->lse);
  xt_free(o->pred);
  xt_free(o->gx);
  xt_free(o->gw);
  xt_free(o->gb);
  memset(o, 0, sizeof *o);
}

xent_linear_input xt_lin_input(const xt_lin *p, const void *hidden, const void *weight,
                               const void *bias, const void *targets, const float *cw) {
  xent_linear_input in;
  memset(&in, 0, sizeof in);
  in.hidden = hidden;
  in.rows = p->c.rows;
  in.hidden_size = p->c.H;
  in.hidden_stride = p->c.hpad ? p->hs : 0;
  in.weight = weight;
  in.vocab = p->c.V;
  in.weight_stride = p->c.wpad ? p->ws : 0;
  in.bias = p->c.bias ? bias : NULL;
  in.dtype = p->c.dt;
  in.targets = targets;
  in.target_type = p->c.ttype;
  in.class_weights = p->c.weighted ? cw : NULL;
  return in;
}

xent_options xt_lin_options(const xt_lin *p) {
  xent_options o = xent_options_default();
  o.reduction = p->c.red;
  o.ignore_index = p->c.ignore_index;
  o.label_smoothing = (float)p->c.alpha;
  o.lse_square_scale = (float)p->c.s;
  o.use_softcap = p->c.softcap;
  o.softcap = p->c.softcap ? (float)p->c.cap : 0.0f;
  o.target_check = p->c.check;
  o.empty_mean = p->c.empty_zero ? XENT_EMPTY_MEAN_ZERO : XENT_EMPTY_MEAN_NAN;
  return o;
}

xent_linear_options xt_lin_loptions(const xt_lin *p) {
  xent_linear_options lo = XENT_LINEAR_OPTIONS_INIT;
  lo.use_token_scaling = p->c.token_scaling;
  lo.chunk_rows = p->c.chunk_rows;
  lo.memory_budget = p->c.budget;
  lo.schedule = p->c.schedule;
  return lo;
}

xent_output xt_lin_output(const xt_lin *p, float *loss, float *z, float *acc, float *lse,
                          int64_t *pred) {
  xent_output o = {loss, p->c.want_z ? z : NULL, p->c.want_acc ? acc : NULL,
                   p->c.want_pred ? pred : NULL, p->c.want_lse ? lse : NULL};
  return o;
}

xent_linear_grads xt_lin_grads(const xt_lin *p, void *gx, void *gw, void *gb, const float *go) {
  xent_linear_grads g;
  memset(&g, 0, sizeof g);
  g.hidden = p->c.dx ? gx : NULL;
  g.hidden_stride = p->c.gxpad ? p->gxs : 0;
  g.hidden_dtype = p->c.gx_dt;
  g.weight = p->c.dw ? gw : NULL;
  g.weight_stride = p->c.gwpad ? p->gws : 0;
  g.weight_dtype = p->c.gw_dt;
  g.bias = p->c.db && p->c.bias ? gb : NULL;
  g.bias_dtype = p->c.gb_dt;
  g.accumulate = p->c.accumulate;
  g.weight_accum = p->c.accum;
  g.grad_output = p->c.go ? go : NULL;
  g.grad_output_count = p->go_count;
  return g;
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                    */
/* ------------------------------------------------------------------------ */

static long g_max_reports = 8;

static long report(long *errs, const char *desc, const char *fmt, double a, double b, double t,
                   int64_t i) {
  if (*errs < g_max_reports)
    fprintf(stderr, "  [%s] %s [%" PRId64 "]: got %.9g want %.9g (tol %.3g)\n", desc, fmt, i, a, b,
            t);
  return ++*errs;
}

static void check_value(long *errs, const char *desc, const char *what, double got, double want,
                        double tol, int64_t i) {
  if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= tol))
    report(errs, desc, what, got, want, tol, i);
}

/* Does another class of row r come within the logits' rounding of its
 * maximum (so that either may be the arg-max)? */
static int near_tie(const xt_lin *p, int64_t r) {
  const xt_row *w = &p->res.row[r];
  if (w->ignored) return 0;
  const int64_t V = p->c.V;
  const double xm = xt_xprime(&p->params, p->Z[r * V + w->argmax]);
  const double d = 2.0 * p->lse_err * (fabs(xm) + 1.0);
  for (int64_t j = 0; j < V; j++)
    if (j != w->argmax && xt_xprime(&p->params, p->Z[r * V + j]) >= xm - d) return 1;
  return 0;
}

/* A gradient: elements within their bounds, padding as before. */
static void check_grad(long *errs, const char *desc, const char *what, const void *got,
                       const void *before, xent_dtype dt, int64_t rows, int64_t cols, int64_t ld,
                       const double *ref, const double *mag, double mag_tol,
                       const double *col_abs, double g_abs) {
  const double rel = 2.0 * unit(dt) + 1e-6;
  const double floor = dt == XENT_FLOAT16 ? 0x1p-24 : 1e-30;
  double worst = 0.0;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t k = 0; k < cols; k++) {
      const double g = xt_load(got, dt, r * ld + k), w = ref[r * cols + k];
      const double tol = rel * fabs(w) + mag_tol * mag[r * cols + k] + floor +
                         (col_abs ? g_abs * col_abs[k] : g_abs);
      if (!(fabs(g - w) <= tol)) report(errs, desc, what, g, w, tol, r * cols + k);
      if (tol > 0.0) worst = fmax(worst, fabs(g - w) / tol);
    }
    for (int64_t k = cols; k < ld; k++)
      if (xt_raw(got, dt, r * ld + k) != xt_raw(before, dt, r * ld + k))
        report(errs, desc, "padding written", xt_load(got, dt, r * ld + k), 0.0, 0.0, r * ld + k);
  }
  if (getenv("XENT_TEST_SHOW_MARGINS"))
    fprintf(stderr, "  [%s] %s: %.3f of the tolerance\n", desc, what, worst);
}

long xt_lin_check(const xt_lin *p, const xt_lin_out *o, int64_t nchunks, int64_t nslabs,
                  const char *desc) {
  const xt_lin_case *c = &p->c;
  const int64_t rows = c->rows, V = c->V, H = c->H;
  const int none = c->red == XENT_REDUCTION_NONE;
  long errs = 0;
  /* canaries past every output */
  if (!xt_is_poison_f32(o->loss[o->count])) report(&errs, desc, "loss canary", 0, 0, 0, o->count);
  if (!xt_is_poison_f32(o->lse[rows])) report(&errs, desc, "lse canary", 0, 0, 0, rows);
  if (o->pred[rows] != XT_POISON_I64) report(&errs, desc, "pred canary", 0, 0, 0, rows);
  const double lrt = 3e-5;
  if (none) {
    for (int64_t r = 0; r < rows; r++) {
      const xt_row *w = &p->res.row[r];
      const double want = p->row_loss[r] + p->row_z[r];
      double zmax = 0.0;
      for (int64_t j = 0; j < V; j++) zmax = fmax(zmax, fabs(p->Z[r * V + j]));
      const double tol = lrt * (fabs(want) + 1.0) + 2e-6 * w->mag + p->lse_err * (zmax + 1.0);
      check_value(&errs, desc, "loss", o->loss[r], want, tol, r);
      if (c->want_z) check_value(&errs, desc, "z_loss", o->z[r], p->row_z[r], tol, r);
      if (c->want_acc && !near_tie(p, r))
        check_value(&errs, desc, "token_accuracy", o->acc[r], w->hit ? 1.0 : 0.0, 0.0, r);
    }
  } else {
    const double tol = lrt * (fabs(p->loss) + 1.0) + 2e-6 * p->loss_mag;
    check_value(&errs, desc, "loss", o->loss[0], p->loss, isnan(p->loss) ? 0 : tol, 0);
    if (c->want_z) check_value(&errs, desc, "z_loss", o->z[0], p->z, isnan(p->z) ? 0 : tol, 0);
    if (c->want_acc && p->n_valid == 0) /* NaN, or 0 by the empty-mean rule */
      check_value(&errs, desc, "token_accuracy", o->acc[0], p->acc, 0.0, 0);
    if (c->want_acc && p->n_valid > 0) {
      int64_t amb = 0;
      for (int64_t r = 0; r < rows; r++) amb += near_tie(p, r) || p->res.row[r].ambiguous;
      const double t = ((double)amb + 0.5) / (double)p->n_valid;
      check_value(&errs, desc, "token_accuracy", o->acc[0], p->acc, t, 0);
    }
  }
  for (int64_t r = 0; r < rows; r++) {
    const xt_row *w = &p->res.row[r];
    if (c->want_lse) {
      double zmax = 0.0;
      for (int64_t j = 0; j < V; j++) zmax = fmax(zmax, fabs(p->Z[r * V + j]));
      const double want = w->ignored ? 0.0 : w->lse;
      check_value(&errs, desc, "lse", o->lse[r], want, lrt * (fabs(want) + 1.0) + p->lse_err * (zmax + 1.0), r);
    }
    if (c->want_pred) {
      const int64_t pr = o->pred[r];
      int ok;
      if (w->ignored) {
        ok = pr == -1;
      } else if (pr < 0 || pr >= V) {
        ok = 0;
      } else { /* a maximum of x', up to the logits' own rounding */
        const double xm = xt_xprime(&p->params, p->Z[r * V + w->argmax]);
        const double xp = xt_xprime(&p->params, p->Z[r * V + pr]);
        ok = xp >= xm - p->lse_err * (fabs(xm) + 1.0) * 2.0;
      }
      if (!ok) report(&errs, desc, "predicted", (double)pr, (double)w->argmax, 0, r);
    }
  }
  if (!c->backward) {
    if (memcmp(o->gx, p->gx0, p->gx_bytes) || memcmp(o->gw, p->gw0, p->gw_bytes) ||
        memcmp(o->gb, p->gb0, p->gb_bytes))
      report(&errs, desc, "a forward wrote a gradient buffer", 0, 0, 0, 0);
    return errs;
  }

  /* The GPU rounds the logits Z to the input dtype before the softmax, so
   * every p_j carries a relative error up to p_err, which dX, dW and db sum
   * weighted as their magnitudes are (seen at fp16 with |Z| of a few: 2x
   * the rounding of G alone). */
  const double ce_err = 3e-5 + p->p_err;
  const double u_in = c->gpu ? 2.0 * unit(c->dt) : 0.0;
  /* fp16 on the GPU: G itself is fp16, its small elements subnormal, each
   * rounded to a multiple of 2^-24: independent errors of standard deviation
   * 2^-24 / sqrt(12), whose sum over a column grows as its l2 norm; allowed:
   * 8 standard deviations. Independent only while a column's elements spread
   * over many units of 2^-24: a mean over thousands of rows puts most of them
   * within a unit or two of zero, where they round alike and their errors add
   * (bench/NOTES.md v43), so cases of that size take a sum. */
  const double g_abs = c->gpu && c->dt == XENT_FLOAT16 ? 8.0 * 0x1p-24 / sqrt(12.0) : 0.0;
  if (c->dx) {
    double t = ce_err + u_in;
    if (c->gpu && nslabs > 1 && c->gx_dt != XENT_FLOAT32 && c->accum == XENT_ACCUM_GRAD)
      t += (double)(nslabs + 1) * unit(c->gx_dt);
    check_grad(&errs, desc, "grad hidden", o->gx, p->gx0, c->gx_dt, rows, H, p->gxs, p->dx, p->dxa,
               t, p->wcol, g_abs);
  }
  if (c->dw) {
    double t = ce_err + u_in;
    if (c->gpu && c->gw_dt != XENT_FLOAT32 && c->accum == XENT_ACCUM_GRAD)
      t += (double)(nchunks + 1) * unit(c->gw_dt);
    check_grad(&errs, desc, "grad weight", o->gw, p->gw0, c->gw_dt, V, H, p->gws, p->dw, p->dwa, t,
               p->xcol, g_abs);
  }
  if (c->db && c->bias)
    check_grad(&errs, desc, "grad bias", o->gb, p->gb0, c->gb_dt, 1, V, V, p->db, p->dba,
               ce_err + u_in + (c->gpu ? 1e-6 * (double)nchunks : 0.0), NULL,
               g_abs * sqrt((double)rows));
  return errs;
}

long xt_lin_check_untouched(const xt_lin *p, const xt_lin_out *o, const char *desc) {
  long errs = 0;
  const int64_t rows = p->c.rows;
  for (int64_t i = 0; i <= o->count; i++) {
    if (!xt_is_poison_f32(o->loss[i])) report(&errs, desc, "loss written", o->loss[i], 0, 0, i);
    if (!xt_is_poison_f32(o->z[i])) report(&errs, desc, "z_loss written", o->z[i], 0, 0, i);
    if (!xt_is_poison_f32(o->acc[i])) report(&errs, desc, "accuracy written", o->acc[i], 0, 0, i);
  }
  for (int64_t r = 0; r <= rows; r++) {
    if (!xt_is_poison_f32(o->lse[r])) report(&errs, desc, "lse written", o->lse[r], 0, 0, r);
    if (o->pred[r] != XT_POISON_I64) report(&errs, desc, "predicted written", 0, 0, 0, r);
  }
  if (memcmp(o->gx, p->gx0, p->gx_bytes)) report(&errs, desc, "grad hidden written", 0, 0, 0, 0);
  if (memcmp(o->gw, p->gw0, p->gw_bytes)) report(&errs, desc, "grad weight written", 0, 0, 0, 0);
  if (memcmp(o->gb, p->gb0, p->gb_bytes)) report(&errs, desc, "grad bias written", 0, 0, 0, 0);
  return errs;
}
