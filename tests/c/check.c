/*
 * check.c - random problems and result checking for the C tests; see check.h.
 */
#include "check.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Reporting: at most a few lines per check, then a count                    */
/* ------------------------------------------------------------------------ */

typedef struct report {
  const char *desc;
  long errors;
} report;

#define XT_MAX_LINES 12

static int quiet;
void xt_set_quiet(int on) { quiet = on; }


static void bad(report *rp, const char *fmt, ...) {
  if (quiet) {
    rp->errors++;
    return;
  }
  if (rp->errors < XT_MAX_LINES) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  [%s] ", rp->desc);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  } else if (rp->errors == XT_MAX_LINES) {
    fprintf(stderr, "  [%s] ... (more differences not shown)\n", rp->desc);
  }
  rp->errors++;
}

/* The largest fraction of a tolerance any checked value used (not counting
 * the checker's self-tests, which run quiet). */
static double worst_grad, worst_loss, worst_norm;

static void note(double *worst, double err, double bound) {
  if (!quiet && bound > 0.0 && isfinite(err) && err / bound > *worst) *worst = err / bound;
}

void xt_report_margins(void) {
  printf("[ MARGINS  ] worst use of a tolerance: gradient element %.3f, gradient norm %.3f, "
         "loss/lse %.3f\n", worst_grad, worst_norm, worst_loss);
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                     */
/* ------------------------------------------------------------------------ */

xt_case xt_case_default(xent_dtype dt, int64_t rows, int64_t vocab) {
  xt_case c;
  memset(&c, 0, sizeof c);
  c.dtype = dt;
  c.ttype = XENT_INT64;
  c.reduction = XENT_REDUCTION_MEAN;
  c.rows = rows;
  c.vocab = vocab;
  c.ignore_index = -100;
  c.ignore_frac = 0.1;
  c.grad = 1;
  c.want_z = c.want_acc = c.want_pred = c.want_lse = 1;
  c.sigma = 2.0;
  c.shift = 3.0;
  c.check = XENT_TARGETS_CHECKED;
  return c;
}

void xt_everything(xt_case *c) {
  c->weighted = 1;
  c->alpha = 0.1;
  c->s = 0.02;
  c->use_softcap = 1;
  c->cap = 15.0;
  c->ties = 1;
  c->ignore_frac = 0.15;
}

void xt_vary_outputs(xt_case *c, int k) {
  c->ttype = (k % 2) ? XENT_INT32 : XENT_INT64;
  c->want_z = (k % 3 != 1);
  c->want_acc = (k % 4 != 2);
  c->want_pred = (k % 2 == 0);
  c->want_lse = (k % 5 != 3);
}

xt_case xt_backward_case(xent_dtype dt, int64_t rows, int64_t vocab, xent_reduction red) {
  xt_case c = xt_case_default(dt, rows, vocab);
  c.reduction = red;
  c.stride = vocab + 5;
  c.offset = 1;
  xt_everything(&c);
  return c;
}

void xt_grad_outputs(float *go, int64_t rows, xt_rng *rng) {
  for (int64_t i = 0; i < rows; i++) go[i] = (float)(6.0 * xt_uniform(rng) - 3.0);
  go[0] = 1.0f;
  go[1] = 0.0f;
  go[2] = -1.0f;
}

const char *xt_feature_combo(xt_case *c, int combo) {
  switch (combo) {
    case 0: c->alpha = 0.1; return "smoothing";
    case 1: c->weighted = 1; return "weights";
    case 2: c->weighted = 1, c->alpha = 0.2; return "weights+smoothing";
    case 3: c->s = 0.05; return "z-loss";
    case 4: c->s = 0.01, c->alpha = 0.1, c->weighted = 1; return "z+smoothing+weights";
    case 5: c->use_softcap = 1, c->cap = 7.0; return "softcap";
    case 6: c->use_softcap = 1, c->cap = 10.0, c->weighted = 1; return "softcap+weights";
    case 7: c->use_softcap = 1, c->cap = 5.0, c->alpha = 0.3, c->s = 0.03; return "softcap+smoothing+z";
    case 8:
      xt_everything(c);
      c->stride = c->vocab + 3;
      c->offset = 1;
      return "everything";
    case 9: c->alpha = 1.0; return "smoothing=1";
    case 10: c->alpha = 1.0, c->weighted = 1; return "weights+smoothing=1";
  }
  return "none";
}

void xt_case_desc(const xt_case *c, char *buf, size_t n) {
  snprintf(buf, n,
           "%s %s %s BT=%" PRId64 " V=%" PRId64 " stride=%" PRId64
           " off=%d %s%s ls=%g z=%g%s%s cap=%g ign=%" PRId64 "/%.2f base=%g%s%s%s%s%s%s thr=%d",
           xt_dtype_name(c->dtype), xt_reduction_name(c->reduction),
           c->ttype == XENT_INT32 ? "i32" : "i64", c->rows, c->vocab, c->stride, c->offset,
           c->grad ? "grad" : "fwd", c->weighted ? " weighted" : "", c->alpha, c->s,
           c->use_softcap ? " softcap" : "", c->use_softcap ? "" : "(off)", c->cap,
           c->ignore_index, c->ignore_frac, c->base, c->ties ? " ties" : "", c->peaked ? " peaked" : "",
           c->nan_ignored ? " nan-ignored" : "", c->bad_targets ? " bad-targets" : "",
           c->check == XENT_TARGETS_UNCHECKED ? " unchecked" : "",
           c->empty_zero ? " empty-mean-0" : "", c->num_threads);
}

/* ------------------------------------------------------------------------ */
/* Problems                                                                  */
/* ------------------------------------------------------------------------ */

static void set_target(xt_problem *pb, int64_t r, int64_t y) {
  pb->t64[r] = y;
  if (pb->c.ttype == XENT_INT32)
    ((int32_t *)pb->targets)[r] = (int32_t)y;
  else
    ((int64_t *)pb->targets)[r] = y;
}

/* Copy element src to element dst of row r, raw bits (an exact tie). */
static void copy_elem(xt_problem *pb, int64_t r, int64_t dst, int64_t src) {
  char *row = (char *)pb->logits + (size_t)(r * pb->stride) * pb->esize;
  memcpy(row + (size_t)dst * pb->esize, row + (size_t)src * pb->esize, pb->esize);
  pb->x[r * pb->c.vocab + dst] = pb->x[r * pb->c.vocab + src];
}

static void set_elem(xt_problem *pb, int64_t r, int64_t j, double v) {
  int64_t at = r * pb->stride + j;
  xt_store(pb->logits, pb->c.dtype, at, v);
  pb->x[r * pb->c.vocab + j] = xt_load(pb->logits, pb->c.dtype, at);
}

static int64_t bad_target_value(const xt_case *c, int k) {
  int64_t V = c->vocab;
  int64_t list[5];
  list[0] = V;
  list[1] = -7;
  list[2] = V + 12345;
  list[3] = c->ttype == XENT_INT64 ? ((int64_t)1 << 32) + 1 : (int64_t)INT32_MAX;
  list[4] = c->ttype == XENT_INT64 ? INT64_MIN : (int64_t)INT32_MIN;
  for (int t = 0; t < 5; t++) {
    int64_t v = list[(k + t) % 5];
    if (v != c->ignore_index) return v;
  }
  return V;
}

int xt_problem_make(xt_problem *pb, const xt_case *c, xt_rng *rng) {
  memset(pb, 0, sizeof *pb);
  pb->c = *c;
  const int64_t R = c->rows, V = c->vocab;
  pb->stride = c->stride ? c->stride : V;
  pb->esize = xt_dtype_size(c->dtype);
  pb->alloc_elems = (size_t)c->offset + (size_t)(R * pb->stride) + XT_GUARD_ELEMS;
  pb->alloc = xt_alloc(pb->alloc_elems * pb->esize);
  pb->orig = xt_alloc(pb->alloc_elems * pb->esize);
  pb->x = (double *)malloc((size_t)(R > 0 ? R : 1) * (size_t)V * sizeof(double));
  pb->targets = xt_alloc((size_t)(R > 0 ? R : 1) * 8);
  pb->t64 = (int64_t *)malloc((size_t)(R > 0 ? R : 1) * sizeof(int64_t));
  if (!pb->alloc || !pb->orig || !pb->x || !pb->targets || !pb->t64) {
    xt_problem_free(pb);
    return -1;
  }
  pb->logits = (char *)pb->alloc + (size_t)c->offset * pb->esize;
  xt_poison_dtype(pb->alloc, c->dtype, (int64_t)pb->alloc_elems);

  if (c->weighted) {
    pb->weights = (float *)xt_alloc((size_t)V * sizeof(float));
    pb->wd = (double *)malloc((size_t)V * sizeof(double));
    if (!pb->weights || !pb->wd) {
      xt_problem_free(pb);
      return -1;
    }
    for (int64_t j = 0; j < V; j++) {
      pb->weights[j] = (float)(0.25 + 1.75 * xt_uniform(rng));
      pb->wd[j] = pb->weights[j];
    }
  }

  for (int64_t r = 0; r < R; r++) {
    int64_t y = xt_uniform(rng) < c->ignore_frac ? c->ignore_index : xt_randint(rng, V);
    set_target(pb, r, y);
    double shift = c->base + c->shift * (2.0 * xt_uniform(rng) - 1.0);
    for (int64_t j = 0; j < V; j++) set_elem(pb, r, j, shift + c->sigma * xt_normal(rng));
    int ignored = (y == c->ignore_index);
    if (ignored && c->nan_ignored) {
      for (int64_t j = 0; j < V; j++) set_elem(pb, r, j, NAN);
      continue;
    }
    if (ignored) continue;
    if (c->peaked && r % 3 == 0) {
      set_elem(pb, r, y, shift + 16.0);
      continue;
    }
    if (c->ties && V >= 2 && (r % 4 == 1 || r % 4 == 3)) {
      const double *xr = pb->x + r * V;
      int64_t am = 0;
      for (int64_t j = 1; j < V; j++)
        if (xr[j] > xr[am]) am = j;
      if (am == 0) { /* move the maximum later so an earlier copy can tie */
        copy_elem(pb, r, V - 1, 0);
        am = V - 1;
      }
      int64_t k = xt_randint(rng, am);
      copy_elem(pb, r, k, am);
      /* r % 4 == 1: the target is the later copy (first arg-max misses it);
       * r % 4 == 3: the target is the earlier copy (a hit). */
      set_target(pb, r, (r % 4 == 1) ? am : k);
    }
  }
  if (c->bad_targets > 0 && R > 0) {
    for (int k = 0; k < c->bad_targets; k++) {
      int64_t r = (int64_t)k * R / c->bad_targets;
      set_target(pb, r, bad_target_value(c, k));
    }
  }
  memcpy(pb->orig, pb->alloc, pb->alloc_elems * pb->esize);

  pb->params.vocab = V;
  pb->params.ignore_index = c->ignore_index;
  pb->params.reduction = c->reduction;
  /* The library receives floats: the reference uses exactly those values. */
  pb->params.alpha = (double)(float)c->alpha;
  pb->params.s = (double)(float)c->s;
  pb->params.use_softcap = c->use_softcap;
  pb->params.cap = (double)(float)c->cap;
  pb->params.weights = pb->wd;
  pb->params.empty_zero = c->empty_zero && c->reduction == XENT_REDUCTION_MEAN;
  if (xt_reference(&pb->params, pb->x, pb->t64, R, c->grad, &pb->ref) != 0) {
    xt_problem_free(pb);
    return -1;
  }
  return 0;
}

/* The largest finite magnitude of a dtype. */
static double dtype_max(xent_dtype dt) {
  return dt == XENT_FLOAT16 ? 65504.0 : dt == XENT_BFLOAT16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
}

int xt_problem_make_huge(xt_problem *pb, const xt_case *c, double M, xt_rng *rng) {
  if (xt_problem_make(pb, c, rng) != 0) return -1;
  const int64_t R = c->rows, V = c->vocab;
  const double am = fabs(M), top = dtype_max(c->dtype);
  /* Below the maximum by up to 5 % of it, as far as the dtype reaches. */
  double spread = 0.05;
  if (am * (1.0 + spread) > top) spread = (top - am) / am;
  const int bits = c->dtype == XENT_FLOAT32 ? 23 : c->dtype == XENT_BFLOAT16 ? 7 : 10;
  const double ulp = ldexp(am, -bits);
  for (int64_t r = 0; r < R; r++) {
    if (pb->t64[r] == c->ignore_index) continue;
    for (int64_t j = 0; j < V; j++) set_elem(pb, r, j, M - am * spread * xt_uniform(rng));
    /* 1 to 3 exact maxima, and the next values below it */
    const int ties = 1 + (int)(r % 3);
    int64_t at[3];
    for (int k = 0; k < ties; k++) {
      at[k] = xt_randint(rng, V);
      set_elem(pb, r, at[k], M);
    }
    for (int k = 1; k <= 3; k++)
      if (fabs(M - k * ulp) <= top) set_elem(pb, r, xt_randint(rng, V), M - k * ulp);
    /* the target at a maximum, next to it, or anywhere */
    const int64_t y = r % 4 == 0 ? at[0] : r % 4 == 1 ? at[ties - 1] : xt_randint(rng, V);
    set_target(pb, r, y);
  }
  memcpy(pb->orig, pb->alloc, pb->alloc_elems * pb->esize);
  return xt_problem_rereference(pb);
}

double xt_huge_case(xt_case *c, xent_dtype dt, int k, int64_t rows, int64_t vocab) {
  /* 1.1e7 and -1.2e7: either side of where the GPU kernels' one-FFMA exponent stops */
  static const double wide[] = {1e4,  -1e4,  1.1e7, -1.2e7, 1e10,
                                -1e10, 1e20, 1e30,  -1e30,  3e38, -3e38};
  static const double half[] = {1e3, -1e3, 6e4, 65504.0, -6e4, -65504.0};
  const int nw = (int)(sizeof wide / sizeof wide[0]), nh = (int)(sizeof half / sizeof half[0]);
  const int n = dt == XENT_FLOAT16 ? nh : nw;
  if (k < 0 || k >= 6 * n) return 0.0;
  const double M = dt == XENT_FLOAT16 ? half[k / 6] : wide[k / 6];
  *c = xt_case_default(dt, rows, vocab);
  c->ignore_frac = 0.1;
  c->want_acc = c->want_pred = c->want_z = c->want_lse = 0;
  switch (k % 6) {
    case 0: c->reduction = XENT_REDUCTION_MEAN; break;
    case 1: c->reduction = XENT_REDUCTION_SUM; c->alpha = 0.1; break;
    case 2: c->reduction = XENT_REDUCTION_NONE; c->alpha = 0.1; c->weighted = 1; break;
    case 3: /* z-loss where s M^2 stays finite in fp32 */
      c->reduction = XENT_REDUCTION_MEAN;
      c->s = fabs(M) <= 1e17 ? 1e-4 : 0.0;
      c->want_z = 1;
      break;
    case 4: c->reduction = XENT_REDUCTION_NONE; c->use_softcap = 1; c->cap = 30.0; break;
    default: c->reduction = XENT_REDUCTION_NONE; c->want_acc = c->want_pred = c->want_lse = 1;
  }
  return M;
}

long xt_check_huge(const xt_problem *pb, const xt_outbuf *ob, double M, const char *desc) {
  const xt_case *c = &pb->c;
  const xt_result *ref = &pb->ref;
  report rp = {desc, 0};
  /* fp32 rounding of each term: the nll and log s to a few ulp of
   * themselves, the smoothing sums to a few ulp of |M| times alpha */
  const double rel = 4e-6, smooth = 4e-6 * (double)(float)c->alpha * fabs(M);
  char what[64];
  if (c->reduction == XENT_REDUCTION_NONE) {
    for (int64_t r = 0; r < c->rows; r++) {
      const xt_row *W = &ref->row[r];
      if (W->ignored) continue;
      const double want = W->loss + W->z, got = ob->loss[r];
      if (!isfinite(want)) {
        bad(&rp, "loss[%lld]: the reference is %g (a case that cannot be represented)",
            (long long)r, want);
      } else if (!(fabs(got - want) <= rel * (1.0 + fabs(want)) + smooth))
        bad(&rp, "loss[%lld] = %.9g, want %.9g (|M| = %g)", (long long)r, got, want, fabs(M));
      if (c->want_lse && !(fabs(ob->lse[r] - W->lse) <= rel * (1.0 + fabs(W->lse))))
        bad(&rp, "lse[%lld] = %.9g, want %.9g", (long long)r, (double)ob->lse[r], W->lse);
    }
  } else {
    /* a sum carries every counted row's smoothing error; a mean their average */
    double counted = 0.0;
    for (int64_t r = 0; r < c->rows; r++) counted += !ref->row[r].ignored;
    const double tol_smooth = c->reduction == XENT_REDUCTION_SUM ? smooth * counted : smooth;
    const double want = ref->loss, got = ob->loss[0];
    snprintf(what, sizeof what, "loss");
    if (!(fabs(got - want) <= rel * (1.0 + fabs(want)) + tol_smooth))
      bad(&rp, "%s = %.9g, want %.9g (|M| = %g)", what, got, want, fabs(M));
  }
  return rp.errors;
}

void xt_problem_set(xt_problem *pb, int64_t r, int64_t j, double v) {
  set_elem(pb, r, j, v);
  int64_t at = r * pb->stride + j;
  char *o = (char *)pb->orig + (size_t)pb->c.offset * pb->esize;
  memcpy(o + (size_t)at * pb->esize, (char *)pb->logits + (size_t)at * pb->esize, pb->esize);
}

void xt_problem_set_target(xt_problem *pb, int64_t r, int64_t y) { set_target(pb, r, y); }

int xt_problem_rereference(xt_problem *pb) {
  xt_result_free(&pb->ref);
  return xt_reference(&pb->params, pb->x, pb->t64, pb->c.rows, pb->c.grad, &pb->ref);
}

void xt_problem_restore(xt_problem *pb) {
  memcpy(pb->alloc, pb->orig, pb->alloc_elems * pb->esize);
}

void xt_problem_free(xt_problem *pb) {
  xt_free(pb->alloc);
  xt_free(pb->orig);
  free(pb->x);
  xt_free(pb->targets);
  free(pb->t64);
  xt_free(pb->weights);
  free(pb->wd);
  xt_result_free(&pb->ref);
  memset(pb, 0, sizeof *pb);
}

xent_input xt_problem_input(const xt_problem *pb) {
  xent_input in;
  in.logits = pb->logits;
  in.dtype = pb->c.dtype;
  in.rows = pb->c.rows;
  in.vocab = pb->c.vocab;
  in.row_stride = pb->c.stride;
  in.targets = pb->targets;
  in.target_type = pb->c.ttype;
  in.weights = pb->weights;
  return in;
}

xent_options xt_case_options(const xt_case *c) {
  xent_options o = xent_options_default();
  o.reduction = c->reduction;
  o.ignore_index = c->ignore_index;
  o.label_smoothing = (float)c->alpha;
  o.lse_square_scale = (float)c->s;
  o.use_softcap = c->use_softcap;
  o.softcap = (float)c->cap;
  o.target_check = c->check;
  o.empty_mean = c->empty_zero ? XENT_EMPTY_MEAN_ZERO : XENT_EMPTY_MEAN_NAN;
  return o;
}

/* ------------------------------------------------------------------------ */
/* Output buffers                                                            */
/* ------------------------------------------------------------------------ */

int xt_outbuf_make(xt_outbuf *ob, const xt_case *c) {
  memset(ob, 0, sizeof *ob);
  ob->rows = c->rows;
  ob->count = c->reduction == XENT_REDUCTION_NONE ? c->rows : 1;
  size_t n = (size_t)ob->count + 1, nr = (size_t)c->rows + 1;
  ob->loss = (float *)xt_alloc(n * sizeof(float));
  ob->z = (float *)xt_alloc(n * sizeof(float));
  ob->acc = (float *)xt_alloc(n * sizeof(float));
  ob->lse = (float *)xt_alloc(nr * sizeof(float));
  ob->pred = (int64_t *)xt_alloc(nr * sizeof(int64_t));
  if (!ob->loss || !ob->z || !ob->acc || !ob->lse || !ob->pred) {
    xt_outbuf_free(ob);
    return -1;
  }
  xt_outbuf_poison(ob);
  return 0;
}

void xt_outbuf_poison(xt_outbuf *ob) {
  xt_poison_f32(ob->loss, ob->count + 1);
  xt_poison_f32(ob->z, ob->count + 1);
  xt_poison_f32(ob->acc, ob->count + 1);
  xt_poison_f32(ob->lse, ob->rows + 1);
  xt_poison_i64(ob->pred, ob->rows + 1);
}

void xt_outbuf_free(xt_outbuf *ob) {
  xt_free(ob->loss);
  xt_free(ob->z);
  xt_free(ob->acc);
  xt_free(ob->lse);
  xt_free(ob->pred);
  memset(ob, 0, sizeof *ob);
}

xent_output xt_output_view(const xt_case *c, float *loss, float *z, float *acc, float *lse,
                           int64_t *pred) {
  xent_output o;
  o.loss = loss;
  o.z_loss = c->want_z ? z : NULL;
  o.token_accuracy = c->want_acc ? acc : NULL;
  o.predicted = c->want_pred ? pred : NULL;
  o.lse = c->want_lse ? lse : NULL;
  return o;
}

xent_output xt_outbuf_view(const xt_outbuf *ob, const xt_case *c) {
  return xt_output_view(c, ob->loss, ob->z, ob->acc, ob->lse, ob->pred);
}

xent_status xt_forward(int grad, const xent_input *in, const xent_options *opt,
                       const xent_output *out, const xent_exec *ex) {
  return grad ? xent_forward_grad(in, opt, out, ex) : xent_forward(in, opt, out, ex);
}

static int is_word_char(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

int xt_mentions(const char *msg, const char *word) {
  size_t n = strlen(word);
  if (n == 0) return 1;
  for (const char *p = strstr(msg, word); p; p = strstr(p + 1, word)) {
    int left_ok = (p == msg) || !is_word_char(p[-1]) || !is_word_char(word[0]);
    int right_ok = !is_word_char(p[n]) || !is_word_char(word[n - 1]);
    /* A number must not be the tail of a longer number ("-37" is not "37"
     * when the word is a bare number). */
    if (left_ok && isdigit((unsigned char)word[0]) && p > msg && p[-1] == '-') left_ok = 0;
    if (left_ok && right_ok) return 1;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Checks                                                                    */
/* ------------------------------------------------------------------------ */

static int target_bad(const xt_problem *pb, int64_t r) {
  int64_t y = pb->t64[r];
  return y != pb->c.ignore_index && (y < 0 || y >= pb->c.vocab);
}

/* The bytes of the logits buffer that are not row elements. */
static void check_outside_rows(const xt_problem *pb, const void *after, report *rp) {
  const char *a = (const char *)after, *o = (const char *)pb->orig;
  size_t es = pb->esize;
  size_t head = (size_t)pb->c.offset * es;
  if (memcmp(a, o, head) != 0) bad(rp, "elements before the logits were written");
  for (int64_t r = 0; r < pb->c.rows; r++) {
    size_t start = head + (size_t)(r * pb->stride + pb->c.vocab) * es;
    size_t len = (size_t)(pb->stride - pb->c.vocab) * es;
    if (len && memcmp(a + start, o + start, len) != 0)
      bad(rp, "row %" PRId64 ": padding between vocab and row_stride was written", r);
  }
  size_t tail = head + (size_t)(pb->c.rows * pb->stride) * es;
  if (memcmp(a + tail, o + tail, pb->alloc_elems * es - tail) != 0)
    bad(rp, "elements after the last row were written");
}

static void check_grad(const xt_problem *pb, const void *after, report *rp) {
  const xt_case *c = &pb->c;
  const int64_t V = c->vocab;
  xt_tol t = xt_tol_for(c->dtype);
  const void *lg = (const char *)after + (size_t)c->offset * pb->esize;
  double diff2 = 0.0, ref2 = 0.0;
  for (int64_t r = 0; r < c->rows; r++) {
    const xt_row *R = &pb->ref.row[r];
    int zero_row = R->ignored || target_bad(pb, r);
    if (!zero_row && !R->finite) continue; /* NaN / +inf logits: unspecified */
    for (int64_t j = 0; j < V; j++) {
      double got = xt_load(lg, c->dtype, r * pb->stride + j);
      if (zero_row) {
        if (got != 0.0)
          bad(rp, "grad[%" PRId64 "][%" PRId64 "] = %.9g, want 0 (%s row)", r, j, got,
              R->ignored ? "ignored" : "bad-target");
        continue;
      }
      double ref = xt_round(pb->ref.grad[r * V + j], c->dtype);
      note(&worst_grad, fabs(got - ref), xt_grad_bound(&t, ref, R->gscale));
      if (getenv("XENT_TEST_SHOW_MARGINS") && fabs(got - ref) > 0.5 * xt_grad_bound(&t, ref, R->gscale))
        fprintf(stderr, "MARGIN %s r%lld j%lld got %.9g ref %.9g exact %.12g gscale %.3g bound %.3g\n", rp->desc, (long long)r, (long long)j, got, ref, pb->ref.grad[r * V + j], R->gscale, xt_grad_bound(&t, ref, R->gscale));
      if (!xt_grad_close(&t, got, ref, R->gscale))
        bad(rp, "grad[%" PRId64 "][%" PRId64 "] = %.9g, want %.9g (exact %.9g, bound %.3g, y=%" PRId64 ")",
            r, j, got, ref, pb->ref.grad[r * V + j], xt_grad_bound(&t, ref, R->gscale),
            pb->t64[r]);
      diff2 += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
  }
  if (ref2 > 0.0) note(&worst_norm, sqrt(diff2), t.grad_norm * sqrt(ref2));
  if (ref2 > 0.0 && !(sqrt(diff2) <= t.grad_norm * sqrt(ref2)))
    bad(rp, "gradient: ||g - ref|| / ||ref|| = %.3g > %.3g", sqrt(diff2 / ref2), t.grad_norm);
}

long xt_check_logits(const xt_problem *pb, const void *alloc_after, const char *desc) {
  report rp = {desc, 0};
  if (!pb->c.grad) {
    if (memcmp(alloc_after, pb->orig, pb->alloc_elems * pb->esize) != 0) {
      const void *lg = (const char *)alloc_after + (size_t)pb->c.offset * pb->esize;
      for (int64_t i = 0; i < (int64_t)pb->alloc_elems - pb->c.offset; i++) {
        if (xt_raw(lg, pb->c.dtype, i) !=
            xt_raw((const char *)pb->orig + (size_t)pb->c.offset * pb->esize, pb->c.dtype, i)) {
          bad(&rp, "forward without gradient changed logits element %" PRId64, i);
          break;
        }
      }
      if (rp.errors == 0) bad(&rp, "forward without gradient changed the logits buffer");
    }
    return rp.errors;
  }
  check_outside_rows(pb, alloc_after, &rp);
  check_grad(pb, alloc_after, &rp);
  return rp.errors;
}

static void check_scalar_f32(report *rp, const char *what, float got, double ref, double mag,
                             const xt_tol *t) {
  if (xt_is_poison_f32(got)) {
    bad(rp, "%s was not written", what);
    return;
  }
  if (isfinite(ref)) note(&worst_loss, fabs(got - ref), xt_loss_bound(t, ref, mag));
  if (!xt_loss_close(t, got, ref, mag))
    bad(rp, "%s = %.9g, want %.9g (bound %.3g)", what, (double)got, ref,
        xt_loss_bound(t, ref, mag));
}

long xt_check(const xt_problem *pb, const xt_outbuf *ob, const void *alloc_after,
              const char *desc) {
  report rp = {desc, 0};
  const xt_case *c = &pb->c;
  const xt_result *ref = &pb->ref;
  xt_tol t = xt_tol_for(c->dtype);
  const int64_t R = c->rows;
  const int none = c->reduction == XENT_REDUCTION_NONE;
  char what[96];

  /* Canaries: nothing written past the values asked for. */
  if (!xt_is_poison_f32(ob->loss[ob->count])) bad(&rp, "loss written past its %" PRId64 " values", ob->count);
  if (!xt_is_poison_f32(ob->z[ob->count])) bad(&rp, "z_loss written past its end (or when not asked)");
  if (!xt_is_poison_f32(ob->acc[ob->count])) bad(&rp, "token_accuracy written past its end");
  if (!xt_is_poison_f32(ob->lse[R])) bad(&rp, "lse written past its end");
  if (ob->pred[R] != XT_POISON_I64) bad(&rp, "predicted written past its end");
  /* Outputs not asked for are not written. */
  if (!c->want_z)
    for (int64_t i = 0; i < ob->count; i++)
      if (!xt_is_poison_f32(ob->z[i])) {
        bad(&rp, "z_loss written though not asked for");
        break;
      }
  if (!c->want_acc)
    for (int64_t i = 0; i < ob->count; i++)
      if (!xt_is_poison_f32(ob->acc[i])) {
        bad(&rp, "token_accuracy written though not asked for");
        break;
      }
  if (!c->want_lse)
    for (int64_t i = 0; i < R; i++)
      if (!xt_is_poison_f32(ob->lse[i])) {
        bad(&rp, "lse written though not asked for");
        break;
      }
  if (!c->want_pred)
    for (int64_t i = 0; i < R; i++)
      if (ob->pred[i] != XT_POISON_I64) {
        bad(&rp, "predicted written though not asked for");
        break;
      }

  /* Per-row outputs. */
  for (int64_t r = 0; r < R; r++) {
    const xt_row *W = &ref->row[r];
    const double *xr = pb->x + r * c->vocab;
    int badt = target_bad(pb, r);
    int64_t pred = ob->pred[r];
    if (c->want_pred) {
      snprintf(what, sizeof what, "predicted[%" PRId64 "]", r);
      if (pred == XT_POISON_I64)
        bad(&rp, "%s was not written", what);
      else if (W->ignored && pred != -1)
        bad(&rp, "%s = %" PRId64 " for an ignored row, want -1", what, pred);
      else if (!W->ignored && !badt && W->finite && !xt_argmax_ok(&pb->params, W, xr, pred))
        bad(&rp, "%s = %" PRId64 ", want %" PRId64 " (the first arg-max)", what, pred, W->argmax);
      else if (!W->ignored && !badt && (pred < 0 || pred >= c->vocab))
        bad(&rp, "%s = %" PRId64 " is outside [0, V)", what, pred);
    }
    if (c->want_lse) {
      float v = ob->lse[r];
      snprintf(what, sizeof what, "lse[%" PRId64 "]", r);
      if (xt_is_poison_f32(v))
        bad(&rp, "%s was not written", what);
      else if (W->ignored && v != 0.0f)
        bad(&rp, "%s = %.9g for an ignored row, want 0", what, (double)v);
      else if (!W->ignored && !badt && W->finite)
        check_scalar_f32(&rp, what, v, W->lse, fabs(W->lse) + fabs(W->xmax), &t);
    }
    if (!none) continue;
    float l = ob->loss[r];
    snprintf(what, sizeof what, "loss[%" PRId64 "]", r);
    if (xt_is_poison_f32(l))
      bad(&rp, "%s was not written", what);
    else if (W->ignored) {
      if (l != 0.0f) bad(&rp, "%s = %.9g for an ignored row, want 0", what, (double)l);
    } else if (badt) {
      if (!isnan(l)) bad(&rp, "%s = %.9g for a bad target, want NaN", what, (double)l);
    } else if (!W->finite) {
      if (isfinite(l)) bad(&rp, "%s = %.9g for a row with NaN/inf logits, want non-finite", what, (double)l);
    } else {
      check_scalar_f32(&rp, what, l, W->loss + W->z, W->mag + fabs(W->z), &t);
    }
    if (c->want_z) {
      float z = ob->z[r];
      snprintf(what, sizeof what, "z_loss[%" PRId64 "]", r);
      if (xt_is_poison_f32(z))
        bad(&rp, "%s was not written", what);
      else if (W->ignored) {
        if (z != 0.0f) bad(&rp, "%s = %.9g for an ignored row, want 0", what, (double)z);
      } else if (badt) {
        if (!isnan(z)) bad(&rp, "%s = %.9g for a bad target, want NaN", what, (double)z);
      } else if (W->finite) {
        check_scalar_f32(&rp, what, z, W->z, fabs(W->z), &t);
      }
    }
    if (c->want_acc) {
      float a = ob->acc[r];
      snprintf(what, sizeof what, "token_accuracy[%" PRId64 "]", r);
      if (xt_is_poison_f32(a))
        bad(&rp, "%s was not written", what);
      else if (W->ignored || badt) {
        if (a != 0.0f) bad(&rp, "%s = %.9g, want 0 (%s row)", what, (double)a, W->ignored ? "ignored" : "bad-target");
      } else if (!(a == 0.0f || a == 1.0f)) {
        bad(&rp, "%s = %.9g, want 0 or 1", what, (double)a);
      } else if (W->finite && !W->ambiguous && a != (float)W->hit) {
        bad(&rp, "%s = %g, want %d (arg-max %" PRId64 ", target %" PRId64 ")", what, (double)a,
            W->hit, W->argmax, pb->t64[r]);
      } else if (W->finite && c->want_pred && a != (float)(pred == pb->t64[r])) {
        bad(&rp, "%s = %g disagrees with predicted %" PRId64 " (target %" PRId64 ")", what,
            (double)a, pred, pb->t64[r]);
      }
    }
  }

  /* Reduced outputs. */
  if (!none) {
    if (ref->all_finite || ref->n_valid == 0) {
      check_scalar_f32(&rp, "loss", ob->loss[0], ref->loss, ref->loss_mag, &t);
      if (c->want_z) check_scalar_f32(&rp, "z_loss", ob->z[0], ref->z, fabs(ref->z), &t);
    } else {
      /* A row with NaN or +inf logits: the reduced loss is not finite. */
      if (xt_is_poison_f32(ob->loss[0]))
        bad(&rp, "loss was not written");
      else if (isfinite(ob->loss[0]))
        bad(&rp, "loss = %.9g with NaN/inf logits in a row, want non-finite", (double)ob->loss[0]);
      if (c->want_z && xt_is_poison_f32(ob->z[0])) bad(&rp, "z_loss was not written");
    }
    if (c->want_acc) {
      float a = ob->acc[0];
      if (xt_is_poison_f32(a)) {
        bad(&rp, "token_accuracy was not written");
      } else if (ref->n_valid == 0) {
        if (c->empty_zero && c->reduction == XENT_REDUCTION_MEAN ? a != 0.0f : !isnan(a))
          bad(&rp, "token_accuracy = %.9g with no counted rows, want %s", (double)a,
              c->empty_zero ? "0" : "NaN");
      } else if (ref->all_finite) {
        double lo = (double)ref->hits / (double)ref->n_valid;
        double hi = (double)(ref->hits + ref->ambiguous) / (double)ref->n_valid;
        double tol = t.acc_rtol * hi + 1e-7;
        if (!(a >= lo - tol && a <= hi + tol))
          bad(&rp, "token_accuracy = %.9g, want %.9g (%" PRId64 " of %" PRId64 " rows%s)", (double)a,
              lo, ref->hits, ref->n_valid, ref->ambiguous ? ", some ambiguous" : "");
      }
    }
  }

  rp.errors += xt_check_logits(pb, alloc_after, desc);
  return rp.errors;
}

long xt_compare_bits(const xt_problem *pb, const xt_outbuf *a, const void *alloc_a,
                     const xt_outbuf *b, const void *alloc_b, const char *desc) {
  report rp = {desc, 0};
  if (alloc_a && alloc_b && memcmp(alloc_a, alloc_b, pb->alloc_elems * pb->esize) != 0)
    bad(&rp, "the logits / gradient buffers differ bitwise");
  if (memcmp(a->loss, b->loss, (size_t)(a->count + 1) * sizeof(float)) != 0)
    bad(&rp, "loss differs bitwise");
  if (memcmp(a->z, b->z, (size_t)(a->count + 1) * sizeof(float)) != 0)
    bad(&rp, "z_loss differs bitwise");
  if (memcmp(a->acc, b->acc, (size_t)(a->count + 1) * sizeof(float)) != 0)
    bad(&rp, "token_accuracy differs bitwise");
  if (memcmp(a->lse, b->lse, (size_t)(a->rows + 1) * sizeof(float)) != 0)
    bad(&rp, "lse differs bitwise");
  if (memcmp(a->pred, b->pred, (size_t)(a->rows + 1) * sizeof(int64_t)) != 0)
    bad(&rp, "predicted differs");
  return rp.errors;
}

long xt_check_scaled(const xt_problem *pb, const void *alloc_grad, const void *alloc_after,
                     const float *go, int64_t go_count, const char *desc) {
  report rp = {desc, 0};
  const xt_case *c = &pb->c;
  xt_tol t = xt_tol_for(c->dtype);
  size_t off = (size_t)c->offset * pb->esize;
  const void *g = (const char *)alloc_grad + off, *a = (const char *)alloc_after + off;
  /* Everything that is not a row element: unchanged from before the backward. */
  {
    const char *pa = (const char *)alloc_after, *pg = (const char *)alloc_grad;
    if (memcmp(pa, pg, off) != 0) bad(&rp, "elements before the gradient were written");
    for (int64_t r = 0; r < c->rows; r++) {
      size_t start = off + (size_t)(r * pb->stride + c->vocab) * pb->esize;
      size_t len = (size_t)(pb->stride - c->vocab) * pb->esize;
      if (len && memcmp(pa + start, pg + start, len) != 0)
        bad(&rp, "row %" PRId64 ": padding written by the backward", r);
    }
    size_t tail = off + (size_t)(c->rows * pb->stride) * pb->esize;
    if (memcmp(pa + tail, pg + tail, pb->alloc_elems * pb->esize - tail) != 0)
      bad(&rp, "elements after the last row written by the backward");
  }
  for (int64_t r = 0; r < c->rows; r++) {
    float s = go[go_count == 1 ? 0 : r];
    for (int64_t j = 0; j < c->vocab; j++) {
      int64_t i = r * pb->stride + j;
      double gv = xt_load(g, c->dtype, i), av = xt_load(a, c->dtype, i);
      if (s == 1.0f) {
        if (xt_raw(g, c->dtype, i) != xt_raw(a, c->dtype, i))
          bad(&rp, "row %" PRId64 " col %" PRId64 ": grad_output 1 changed the gradient", r, j);
        continue;
      }
      double exact = gv * (double)s;
      if (isnan(gv)) continue;
      if (!xt_scale_close(&t, av, exact))
        bad(&rp, "row %" PRId64 " col %" PRId64 ": %.9g * %.9g stored as %.9g", r, j, gv,
            (double)s, av);
    }
  }
  return rp.errors;
}

long xt_compare_results(const xt_problem *pb, const xt_outbuf *a, const void *alloc_a,
                        const xt_outbuf *b, const void *alloc_b, const char *desc) {
  report rp = {desc, 0};
  const xt_case *c = &pb->c;
  const xt_result *ref = &pb->ref;
  xt_tol t = xt_tol_for(c->dtype);
  const int none = c->reduction == XENT_REDUCTION_NONE;
  for (int64_t r = 0; r < c->rows; r++) {
    const xt_row *W = &ref->row[r];
    if (W->ignored || target_bad(pb, r) || !W->finite) continue;
    if (c->want_pred && !W->ambiguous && a->pred[r] != b->pred[r])
      bad(&rp, "predicted[%" PRId64 "]: %" PRId64 " vs %" PRId64, r, a->pred[r], b->pred[r]);
    if (c->want_lse && !(fabs(a->lse[r] - b->lse[r]) <= 2.0 * xt_loss_bound(&t, W->lse, fabs(W->lse) + fabs(W->xmax))))
      bad(&rp, "lse[%" PRId64 "]: %.9g vs %.9g", r, (double)a->lse[r], (double)b->lse[r]);
    if (!none) continue;
    double lb = 2.0 * xt_loss_bound(&t, W->loss + W->z, W->mag + fabs(W->z));
    if (!(fabs(a->loss[r] - b->loss[r]) <= lb))
      bad(&rp, "loss[%" PRId64 "]: %.9g vs %.9g", r, (double)a->loss[r], (double)b->loss[r]);
    if (c->want_z && !(fabs(a->z[r] - b->z[r]) <= 2.0 * xt_loss_bound(&t, W->z, fabs(W->z))))
      bad(&rp, "z_loss[%" PRId64 "]: %.9g vs %.9g", r, (double)a->z[r], (double)b->z[r]);
    if (c->want_acc && !W->ambiguous && a->acc[r] != b->acc[r])
      bad(&rp, "token_accuracy[%" PRId64 "]: %g vs %g", r, (double)a->acc[r], (double)b->acc[r]);
  }
  if (!none && ref->all_finite && ref->n_valid > 0) {
    double lb = 2.0 * xt_loss_bound(&t, ref->loss, ref->loss_mag);
    if (!(fabs(a->loss[0] - b->loss[0]) <= lb))
      bad(&rp, "loss: %.9g vs %.9g (bound %.3g)", (double)a->loss[0], (double)b->loss[0], lb);
    if (c->want_z && !(fabs(a->z[0] - b->z[0]) <= 2.0 * xt_loss_bound(&t, ref->z, fabs(ref->z))))
      bad(&rp, "z_loss: %.9g vs %.9g", (double)a->z[0], (double)b->z[0]);
    if (c->want_acc) {
      double tol = (double)ref->ambiguous / (double)ref->n_valid + 2e-7;
      if (!(fabs(a->acc[0] - b->acc[0]) <= tol))
        bad(&rp, "token_accuracy: %.9g vs %.9g", (double)a->acc[0], (double)b->acc[0]);
    }
  }
  if (c->grad && alloc_a && alloc_b) {
    const void *ga = (const char *)alloc_a + (size_t)c->offset * pb->esize;
    const void *gb = (const char *)alloc_b + (size_t)c->offset * pb->esize;
    for (int64_t r = 0; r < c->rows; r++) {
      const xt_row *W = &ref->row[r];
      if (!W->finite && !W->ignored) continue;
      for (int64_t j = 0; j < c->vocab; j++) {
        int64_t i = r * pb->stride + j;
        double va = xt_load(ga, c->dtype, i), vb = xt_load(gb, c->dtype, i);
        double refr = W->ignored || target_bad(pb, r) ? 0.0 : xt_round(ref->grad[r * c->vocab + j], c->dtype);
        double bound = 2.0 * xt_grad_bound(&t, refr, W->gscale);
        if (!(fabs(va - vb) <= bound))
          bad(&rp, "grad[%" PRId64 "][%" PRId64 "]: %.9g vs %.9g (bound %.3g)", r, j, va, vb, bound);
      }
    }
  }
  return rp.errors;
}
