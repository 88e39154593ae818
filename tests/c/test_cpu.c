/*
 * test_cpu.c - the CPU backend against the float64 reference, on fresh
 * random inputs (the seed is printed; XENT_TEST_SEED repeats a run).
 *
 * Every call runs with poisoned outputs and a poisoned padding/guard area
 * around the logits; xt_check() verifies every requested value was written,
 * nothing else was, and every value is within the tolerances of tolerance.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reference.h"
#include "tolerance.h"
#include "xent.h"

static const xent_dtype DTYPES[] = {XENT_FLOAT32, XENT_BFLOAT16, XENT_FLOAT16};
static const xent_reduction REDS[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM,
                                      XENT_REDUCTION_NONE};
static long g_cases;

static xent_exec cpu_exec(int threads) {
  xent_exec ex = xent_exec_default();
  ex.backend = XENT_BACKEND_CPU;
  ex.num_threads = threads;
  return ex;
}

static void describe(const xt_case *c, const char *tag, char *desc, size_t n) {
  char cd[512];
  xt_case_desc(c, cd, sizeof cd);
  snprintf(desc, n, "%s: %s", tag, cd);
}

static xent_status call_forward(xt_problem *pb, xt_outbuf *ob, int threads) {
  xent_input in = xt_problem_input(pb);
  xent_options opt = xt_case_options(&pb->c);
  xent_output out = xt_outbuf_view(ob, &pb->c);
  xent_exec ex = cpu_exec(threads);
  return xt_forward(pb->c.grad, &in, &opt, &out, &ex);
}

/* Run the problem as it is and check everything; returns the error count. */
static long run_problem(xt_problem *pb, const char *tag) {
  char desc[768];
  describe(&pb->c, tag, desc, sizeof desc);
  xt_outbuf ob;
  if (xt_outbuf_make(&ob, &pb->c) != 0) {
    fprintf(stderr, "  [%s] out of memory\n", desc);
    return 1;
  }
  g_cases++;
  long errors;
  xent_status st = call_forward(pb, &ob, pb->c.num_threads);
  if (st != XENT_OK) {
    fprintf(stderr, "  [%s] status %d (%s): %s\n", desc, (int)st, xent_status_string(st),
            xent_last_error());
    errors = 1;
  } else {
    errors = xt_check(pb, &ob, pb->alloc, desc);
  }
  xt_outbuf_free(&ob);
  return errors;
}

static long run_case(const xt_case *c, xt_rng *rng, const char *tag) {
  xt_problem pb;
  if (xt_problem_make(&pb, c, rng) != 0) {
    fprintf(stderr, "  [%s] out of memory\n", tag);
    return 1;
  }
  long e = run_problem(&pb, tag);
  xt_problem_free(&pb);
  return e;
}

/* ------------------------------------------------------------------------ */
/* The helpers and the reference themselves                                  */
/* ------------------------------------------------------------------------ */

static void test_conversions(void **state) {
  (void)state;
  /* fp16: exact values, rounding ties to even, subnormals, overflow. */
  assert_int_equal(xt_f32_to_f16(1.0f), 0x3C00);
  assert_int_equal(xt_f32_to_f16(-2.0f), 0xC000);
  assert_int_equal(xt_f32_to_f16(65504.0f), 0x7BFF);
  assert_int_equal(xt_f32_to_f16(65519.0f), 0x7BFF);
  assert_int_equal(xt_f32_to_f16(65520.0f), 0x7C00);
  assert_int_equal(xt_f32_to_f16(INFINITY), 0x7C00);
  assert_int_equal(xt_f32_to_f16(0x1p-24f), 0x0001);
  assert_int_equal(xt_f32_to_f16(0x1p-25f), 0x0000);       /* tie -> even (0) */
  assert_int_equal(xt_f32_to_f16(0x1.8p-24f), 0x0002);     /* tie -> even (2) */
  assert_int_equal(xt_f32_to_f16(0x1p-14f), 0x0400);
  assert_int_equal(xt_f32_to_f16(0x1.ff8p-15f), 0x03FF);   /* largest subnormal */
  assert_int_equal(xt_f32_to_f16(0x1.ffcp-15f), 0x0400);   /* tie -> even: min normal */
  assert_int_equal(xt_f32_to_f16(1.0f + 0x1p-11f), 0x3C00); /* tie -> even */
  assert_int_equal(xt_f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02);
  assert_int_equal(xt_f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f), 0x3C02); /* tie -> even */
  assert_true(isnan(xt_f16_to_f32(xt_f32_to_f16(NAN))));
  assert_true(xt_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(xt_f16_to_f32(0x7BFF) == 65504.0f);
  assert_true(xt_f16_to_f32(0xFC00) == -INFINITY);
  /* bf16 */
  assert_int_equal(xt_f32_to_bf16(1.0f), 0x3F80);
  assert_int_equal(xt_f32_to_bf16(1.0f + 0x1p-8f), 0x3F80); /* tie -> even */
  assert_int_equal(xt_f32_to_bf16(1.0f + 0x1.8p-7f), 0x3F82);
  assert_int_equal(xt_f32_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3F82); /* tie -> even */
  assert_int_equal(xt_f32_to_bf16(-3.0f), 0xC040);
  assert_true(isnan(xt_bf16_to_f32(xt_f32_to_bf16(NAN))));
  assert_int_equal(xt_f32_to_bf16(3.4e38f), 0x7F80); /* overflows to inf */
  /* Every half value survives the round trip. */
  for (uint32_t h = 0; h < 0x10000u; h++) {
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x03FFu)) continue; /* NaN */
    assert_int_equal(xt_f32_to_f16(xt_f16_to_f32((uint16_t)h)), h);
    if (((h << 16) & 0x7F800000u) == 0x7F800000u && (h & 0x7Fu)) continue;
    assert_int_equal(xt_f32_to_bf16(xt_bf16_to_f32((uint16_t)h)), h);
  }
}

static void test_reference_by_hand(void **state) {
  (void)state;
  /* V = 2, equal logits: loss log 2, gradient (-1/2, 1/2), first arg-max 0. */
  double x[2] = {0.0, 0.0};
  int64_t t[1] = {0};
  xt_params p = {2, -100, XENT_REDUCTION_MEAN, 0.0, 0.0, 0, 0.0, NULL, 0};
  xt_result r;
  assert_int_equal(xt_reference(&p, x, t, 1, 1, &r), 0);
  assert_true(fabs(r.loss - log(2.0)) < 1e-15);
  assert_true(fabs(r.grad[0] + 0.5) < 1e-15 && fabs(r.grad[1] - 0.5) < 1e-15);
  assert_int_equal(r.row[0].argmax, 0);
  assert_true(r.acc == 1.0);
  xt_result_free(&r);
  /* Label smoothing alpha = 1 on equal logits: loss = lse - mean x = log 2. */
  p.alpha = 1.0;
  assert_int_equal(xt_reference(&p, x, t, 1, 1, &r), 0);
  assert_true(fabs(r.loss - log(2.0)) < 1e-15);
  assert_true(fabs(r.grad[0]) < 1e-15 && fabs(r.grad[1]) < 1e-15);
  xt_result_free(&r);
  /* z-loss: s lse^2 on top, mean over N; two rows, one ignored. */
  double x2[4] = {1.0, 3.0, 5.0, 5.0};
  int64_t t2[2] = {1, -100};
  xt_params q = {2, -100, XENT_REDUCTION_MEAN, 0.0, 0.5, 0, 0.0, NULL, 0};
  assert_int_equal(xt_reference(&q, x2, t2, 2, 1, &r), 0);
  double lse = 3.0 + log(1.0 + exp(-2.0));
  assert_true(fabs(r.loss - ((lse - 3.0) + 0.5 * lse * lse)) < 1e-12);
  assert_true(fabs(r.z - 0.5 * lse * lse) < 1e-12);
  assert_int_equal(r.n_valid, 1);
  assert_true(r.grad[2] == 0.0 && r.grad[3] == 0.0);
  xt_result_free(&r);
  /* A target outside [0, V) (the unchecked mode): NaN loss and z, zero
   * gradient, counted in N but not in W, no hit. */
  double w2[2] = {2.0, 3.0};
  int64_t t3[2] = {1, 7};
  xt_params u = {2, -100, XENT_REDUCTION_MEAN, 0.0, 0.0, 0, 0.0, w2, 0};
  assert_int_equal(xt_reference(&u, x2, t3, 2, 1, &r), 0);
  assert_int_equal(r.n_valid, 2);
  assert_true(r.w_valid == 3.0);
  assert_true(isnan(r.row[1].loss) && isnan(r.row[1].z) && !r.row[1].hit);
  assert_true(r.grad[2] == 0.0 && r.grad[3] == 0.0);
  assert_true(isnan(r.loss));
  /* Row 0 is scaled by 1 / W = 1/3: d/dx1 = w_y (p_1 - 1) / W. */
  double p1 = exp(3.0 - lse);
  assert_true(fabs(r.grad[1] - 3.0 * (p1 - 1.0) / 3.0) < 1e-12);
  xt_result_free(&r);
}

/* The reference gradient is the derivative of the reference loss: central
 * differences on every feature and reduction. */
static void test_reference_gradient_by_differences(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_reference_gradient_by_differences");
  enum { R = 5, V = 11 };
  double x[R * V], w[V];
  int64_t t[R];
  for (int j = 0; j < V; j++) w[j] = 0.3 + 1.5 * xt_uniform(&rng);
  for (int i = 0; i < R * V; i++) x[i] = 2.0 * xt_normal(&rng);
  for (int r = 0; r < R; r++) t[r] = xt_randint(&rng, V);
  t[3] = -100;
  long errors = 0;
  for (int red = 0; red < 3; red++)
    for (int feat = 0; feat < 4; feat++) {
      xt_params p = {V, -100, REDS[red], 0.0, 0.0, 0, 0.0, NULL, 0};
      if (feat >= 1) p.alpha = 0.2;
      if (feat >= 2) p.weights = w, p.s = 0.05;
      if (feat >= 3) p.use_softcap = 1, p.cap = 2.5;
      xt_result r0;
      assert_int_equal(xt_reference(&p, x, t, R, 1, &r0), 0);
      for (int i = 0; i < R * V; i++) {
        double keep = x[i], h = 1e-5;
        xt_result rp, rm;
        x[i] = keep + h;
        assert_int_equal(xt_reference(&p, x, t, R, 0, &rp), 0);
        x[i] = keep - h;
        assert_int_equal(xt_reference(&p, x, t, R, 0, &rm), 0);
        x[i] = keep;
        double lp = 0.0, lm = 0.0;
        if (REDS[red] == XENT_REDUCTION_NONE) {
          for (int r = 0; r < R; r++) {
            lp += rp.row[r].loss + rp.row[r].z;
            lm += rm.row[r].loss + rm.row[r].z;
          }
        } else {
          lp = rp.loss;
          lm = rm.loss;
        }
        double fd = (lp - lm) / (2.0 * h);
        if (fabs(fd - r0.grad[i]) > 1e-7 * (1.0 + fabs(fd))) {
          if (errors < 10)
            fprintf(stderr, "  reference gradient %s feat %d elem %d: analytic %.12g, differences %.12g\n",
                    xt_reduction_name(REDS[red]), feat, i, r0.grad[i], fd);
          errors++;
        }
        xt_result_free(&rp);
        xt_result_free(&rm);
      }
      xt_result_free(&r0);
    }
  assert_int_equal(errors, 0);
}

/* The checker itself: each kind of damage to a correct result is reported. */
static void test_checker_catches(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_checker_catches");
  for (int d = 0; d < 3; d++) {
    xt_case c = xt_case_default(DTYPES[d], 12, 100);
    c.reduction = XENT_REDUCTION_NONE;
    c.stride = 104;
    c.ignore_frac = 0.3;
    xt_problem pb;
    assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
    int64_t ign = -1, kept = -1;
    for (int64_t r = 0; r < c.rows; r++) {
      if (pb.ref.row[r].ignored && ign < 0) ign = r;
      if (!pb.ref.row[r].ignored && kept < 0) kept = r;
    }
    if (ign < 0) { /* make sure one row is ignored */
      ign = c.rows - 1;
      xt_problem_set_target(&pb, ign, c.ignore_index);
      assert_int_equal(xt_problem_rereference(&pb), 0);
    }
    assert_true(kept >= 0 && kept != ign);
    xt_outbuf ob, ob2;
    assert_int_equal(xt_outbuf_make(&ob, &c), 0);
    assert_int_equal(xt_outbuf_make(&ob2, &c), 0);
    assert_int_equal(call_forward(&pb, &ob, 0), XENT_OK);
    size_t bytes = pb.alloc_elems * pb.esize;
    void *good = xt_alloc(bytes);
    assert_non_null(good);
    memcpy(good, pb.alloc, bytes);
    assert_int_equal(xt_check(&pb, &ob, pb.alloc, "checker"), 0);

    xt_set_quiet(1);
    void *lg = (char *)pb.alloc + (size_t)c.offset * pb.esize;
    int64_t at = kept * pb.stride + pb.t64[kept];
    /* A gradient element off by a few units in the last place. */
    double g = xt_load(lg, c.dtype, at);
    xt_store(lg, c.dtype, at, g * (1.0 + 0x1p-5));
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    memcpy(pb.alloc, good, bytes);
    /* A nonzero gradient in an ignored row. */
    xt_store(lg, c.dtype, ign * pb.stride + 3, 1e-3);
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    memcpy(pb.alloc, good, bytes);
    /* Padding, and the guard after the last row. */
    ((unsigned char *)lg)[(size_t)(kept * pb.stride + c.vocab) * pb.esize] ^= 1;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    memcpy(pb.alloc, good, bytes);
    ((unsigned char *)pb.alloc)[bytes - 1] ^= 1;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    memcpy(pb.alloc, good, bytes);
    /* Outputs: a canary written, a value not written, a wrong value. */
    float keep = ob.loss[ob.count];
    ob.loss[ob.count] = 0.0f;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.loss[ob.count] = keep;
    keep = ob.lse[kept];
    xt_poison_f32(&ob.lse[kept], 1);
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.lse[kept] = keep;
    keep = ob.loss[kept];
    ob.loss[kept] = keep * (1.0f + 1e-3f);
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.loss[kept] = keep;
    int64_t kp = ob.pred[ign];
    ob.pred[ign] = 0;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.pred[ign] = kp;
    kp = ob.pred[kept];
    ob.pred[kept] = (kp + 1) % c.vocab;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.pred[kept] = kp;
    keep = ob.acc[kept];
    ob.acc[kept] = 1.0f - keep;
    assert_true(xt_check(&pb, &ob, pb.alloc, "checker") > 0);
    ob.acc[kept] = keep;
    assert_int_equal(xt_check(&pb, &ob, pb.alloc, "checker"), 0);
    /* Bitwise comparison. */
    memcpy(ob2.loss, ob.loss, (size_t)(ob.count + 1) * 4);
    memcpy(ob2.z, ob.z, (size_t)(ob.count + 1) * 4);
    memcpy(ob2.acc, ob.acc, (size_t)(ob.count + 1) * 4);
    memcpy(ob2.lse, ob.lse, (size_t)(ob.rows + 1) * 4);
    memcpy(ob2.pred, ob.pred, (size_t)(ob.rows + 1) * 8);
    assert_int_equal(xt_compare_bits(&pb, &ob, good, &ob2, pb.alloc, "checker"), 0);
    ((unsigned char *)lg)[3] ^= 1;
    assert_true(xt_compare_bits(&pb, &ob, good, &ob2, pb.alloc, "checker") > 0);
    memcpy(pb.alloc, good, bytes);
    ob2.z[0] = xt_bits_f32(xt_f32_bits(ob2.z[0]) ^ 1u);
    assert_true(xt_compare_bits(&pb, &ob, good, &ob2, pb.alloc, "checker") > 0);
    /* A backward scaled by the wrong value in one row. */
    float go[12];
    for (int i = 0; i < 12; i++) go[i] = 0.5f;
    xent_exec ex = cpu_exec(0);
    assert_int_equal(xent_backward(pb.logits, c.dtype, c.rows, c.vocab, c.stride, go, c.rows, &ex), XENT_OK);
    assert_int_equal(xt_check_scaled(&pb, good, pb.alloc, go, c.rows, "checker"), 0);
    go[kept] = 0.25f;
    assert_true(xt_check_scaled(&pb, good, pb.alloc, go, c.rows, "checker") > 0);
    xt_set_quiet(0);

    xt_free(good);
    xt_outbuf_free(&ob);
    xt_outbuf_free(&ob2);
    xt_problem_free(&pb);
  }
}

/* ------------------------------------------------------------------------ */
/* Coverage of the input space                                               */
/* ------------------------------------------------------------------------ */

/* dtype x reduction x target type x {forward, forward_grad}. */
static void test_matrix(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_matrix");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++)
      for (int tt = 0; tt < 2; tt++)
        for (int grad = 0; grad < 2; grad++) {
          xt_case c = xt_case_default(DTYPES[d], 37, 4095);
          c.reduction = REDS[r];
          c.ttype = tt ? XENT_INT64 : XENT_INT32;
          c.grad = grad;
          c.ties = 1;
          if ((d + r + tt) % 2) c.stride = 4095; /* explicit packed stride */
          errors += run_case(&c, &rng, "matrix");
        }
  assert_int_equal(errors, 0);
}

/* Each feature and the combinations, per dtype and reduction. */
static void test_features(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_features");
  long errors = 0;
  int k = 0;
  for (int combo = 0; combo < XT_FEATURE_COMBOS; combo++)
    for (int d = 0; d < 3; d++)
      for (int r = 0; r < 3; r++, k++) {
        int64_t V = (k % 3 == 0) ? 7 : (k % 3 == 1) ? 1000 : 3001;
        xt_case c = xt_case_default(DTYPES[d], 29, V);
        c.reduction = REDS[r];
        xt_vary_outputs(&c, k);
        const char *name = xt_feature_combo(&c, combo);
        if (combo == 8) c.check = XENT_TARGETS_UNCHECKED; /* valid targets: same results */
        char tag[64];
        snprintf(tag, sizeof tag, "features %s", name);
        errors += run_case(&c, &rng, tag);
      }
  assert_int_equal(errors, 0);
}

static void test_vocab_sizes(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_vocab_sizes");
  long errors = 0;
  const int64_t vocabs[] = {1, 7, 4095, 32000};
  int k = 0;
  for (int v = 0; v < 4; v++)
    for (int d = 0; d < 3; d++)
      for (int all = 0; all < 2; all++, k++) {
        int64_t V = vocabs[v];
        xt_case c = xt_case_default(DTYPES[d], V >= 32000 ? 24 : 64, V);
        c.reduction = REDS[k % 3];
        c.ttype = (k % 2) ? XENT_INT32 : XENT_INT64;
        c.ties = 1;
        if (all) xt_everything(&c);
        errors += run_case(&c, &rng, "vocab");
      }
  assert_int_equal(errors, 0);
}

/* Rows padded past V: the padding is never written, also by the backward. */
static void test_padded_stride(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_padded_stride");
  long errors = 0;
  const int64_t shapes[][2] = {{7, 16}, {4095, 4095 + 13}, {32000, 32768}, {1, 9}};
  int k = 0;
  for (int s = 0; s < 4; s++)
    for (int d = 0; d < 3; d++)
      for (int grad = 0; grad < 2; grad++, k++) {
        xt_case c = xt_case_default(DTYPES[d], shapes[s][0] >= 32000 ? 12 : 31, shapes[s][0]);
        c.stride = shapes[s][1];
        c.grad = grad;
        c.reduction = REDS[k % 3];
        if (k % 2) xt_everything(&c);
        errors += run_case(&c, &rng, "padded stride");
      }
  assert_int_equal(errors, 0);
}

/* The logits start one element past an aligned address (and rows with an odd
 * stride start anywhere). */
static void test_unaligned_base(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_unaligned_base");
  long errors = 0;
  int k = 0;
  for (int d = 0; d < 3; d++)
    for (int grad = 0; grad < 2; grad++)
      for (int odd = 0; odd < 2; odd++, k++) {
        xt_case c = xt_case_default(DTYPES[d], 33, odd ? 4095 : 4096);
        c.offset = 1;
        c.stride = odd ? 4097 : 0;
        c.grad = grad;
        c.reduction = REDS[k % 3];
        if (k % 2) xt_everything(&c);
        errors += run_case(&c, &rng, "unaligned base");
      }
  assert_int_equal(errors, 0);
}

static void test_ignored_rows(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_ignored_rows");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      /* A real class index as ignore_index, half the rows ignored. */
      xt_case c = xt_case_default(DTYPES[d], 40, 300);
      c.reduction = REDS[r];
      c.ignore_index = 3;
      c.ignore_frac = 0.5;
      c.ttype = r % 2 ? XENT_INT32 : XENT_INT64;
      if (r == 1) xt_everything(&c), c.ignore_frac = 0.5;
      errors += run_case(&c, &rng, "ignore_index = class 3");
      /* Every row ignored: mean NaN (or 0 by the rule of 0), sum 0, none
       * zeros, gradient zero. */
      for (int zero = 0; zero < 2; zero++) {
        c = xt_case_default(DTYPES[d], 17, 300);
        c.reduction = REDS[r];
        c.ignore_frac = 1.0;
        c.empty_zero = zero;
        errors += run_case(&c, &rng, "all rows ignored");
        xt_everything(&c);
        c.ignore_frac = 1.0;
        errors += run_case(&c, &rng, "all rows ignored, everything on");
      }
      /* Ignored rows' logits are not read: NaN there changes nothing. */
      c = xt_case_default(DTYPES[d], 40, 500);
      c.reduction = REDS[r];
      c.ignore_frac = 0.3;
      c.nan_ignored = 1;
      if (r == 2) xt_everything(&c), c.ignore_frac = 0.3;
      errors += run_case(&c, &rng, "NaN logits in ignored rows");
    }
  /* Odd ignore_index values. */
  xt_case c = xt_case_default(XENT_FLOAT32, 40, 100);
  c.ignore_index = INT64_MIN;
  c.ignore_frac = 0.3;
  errors += run_case(&c, &rng, "ignore_index INT64_MIN");
  c.ignore_index = (int64_t)1 << 40;
  errors += run_case(&c, &rng, "ignore_index 2^40");
  c.ignore_index = -1;
  c.ttype = XENT_INT32;
  errors += run_case(&c, &rng, "ignore_index -1 (int32)");
  c.ignore_index = 99; /* the last class */
  errors += run_case(&c, &rng, "ignore_index V-1 (int32)");
  assert_int_equal(errors, 0);
}

/* -inf logits are masked classes: exact results. */
static void test_masked_logits(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_masked_logits");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++)
      for (int cap = 0; cap < 3; cap++) {
        xt_case c = xt_case_default(DTYPES[d], 20, 257);
        c.reduction = REDS[r];
        c.ignore_frac = 0.1;
        if (cap == 1) c.use_softcap = 1, c.cap = 8.0, c.weighted = 1, c.s = 0.01;
        /* weighted smoothing takes the -inf logits: +inf losses (xent.h) */
        if (cap == 2) c.weighted = 1, c.alpha = 0.1;
        xt_problem pb;
        assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
        for (int64_t row = 0; row < c.rows; row++)
          for (int64_t j = 0; j < c.vocab; j++)
            if (j != pb.t64[row] && xt_uniform(&rng) < 0.3) xt_problem_set(&pb, row, j, -INFINITY);
        assert_int_equal(xt_problem_rereference(&pb), 0);
        errors += run_problem(&pb, "masked -inf logits");
        xt_problem_free(&pb);
      }
  assert_int_equal(errors, 0);
}

/* NaN / +inf logits: that row's loss is NaN (non-finite for +inf), a
 * reduction over it NaN; no crash; the other rows are unaffected. */
static void test_nonfinite_logits(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_nonfinite_logits");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      xt_case c = xt_case_default(DTYPES[d], 8, 100);
      c.reduction = REDS[r];
      c.ignore_frac = 0.0;
      if (r == 1) c.alpha = 0.1, c.weighted = 1;
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      xt_problem_set(&pb, 2, 17, NAN);
      xt_problem_set(&pb, 5, 3, INFINITY);
      xt_problem_set(&pb, 6, pb.t64[6], NAN); /* NaN at the target itself */
      assert_int_equal(xt_problem_rereference(&pb), 0);
      char desc[768];
      describe(&pb.c, "NaN/inf logits", desc, sizeof desc);
      errors += run_problem(&pb, "NaN/inf logits");
      /* Explicitly: NaN for the NaN rows and for any reduction. */
      xt_problem_restore(&pb);
      xt_outbuf ob;
      assert_int_equal(xt_outbuf_make(&ob, &c), 0);
      assert_int_equal(call_forward(&pb, &ob, 0), XENT_OK);
      if (c.reduction == XENT_REDUCTION_NONE) {
        if (!isnan(ob.loss[2]) || !isnan(ob.loss[6]) || isfinite(ob.loss[5])) {
          fprintf(stderr, "  [%s] per-row loss NaN rows: %g %g, +inf row: %g\n", desc,
                  (double)ob.loss[2], (double)ob.loss[6], (double)ob.loss[5]);
          errors++;
        }
      } else if (!isnan(ob.loss[0])) {
        fprintf(stderr, "  [%s] reduced loss %g, want NaN\n", desc, (double)ob.loss[0]);
        errors++;
      }
      xt_outbuf_free(&ob);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* Rows whose target probability is near 1: the gradient at the target must
 * be folded in fp32 (rounding p_y to bf16/fp16 first loses it). */
static void test_peaked_rows(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_peaked_rows");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      xt_case c = xt_case_default(DTYPES[d], 30, 4095);
      c.reduction = REDS[r];
      c.peaked = 1;
      c.sigma = 1.0;
      errors += run_case(&c, &rng, "peaked rows");
      c.alpha = 0.05;
      c.weighted = 1;
      errors += run_case(&c, &rng, "peaked rows, weights+smoothing");
    }
  assert_int_equal(errors, 0);
}

/* Logits far from 0: the maximum must be subtracted. */
static void test_large_offsets(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_large_offsets");
  long errors = 0;
  const double bases[] = {200.0, -200.0, 90.0};
  for (int d = 0; d < 3; d++)
    for (int b = 0; b < 3; b++) {
      xt_case c = xt_case_default(DTYPES[d], 19, 2000);
      c.base = bases[b];
      c.reduction = REDS[b];
      c.alpha = b == 2 ? 0.1 : 0.0;
      c.s = b == 1 ? 1e-4 : 0.0;
      errors += run_case(&c, &rng, "large offset");
    }
  assert_int_equal(errors, 0);
}

/* Row maxima from 1e4 to the edge of each dtype's range (+-3e38 in fp32 and
 * bf16, +-65504 in fp16), ties at the maximum among them: every option gives
 * fp32-accurate results, the loss accurate to its own size (a tie's log 2
 * survives a maximum of 1e30), never a NaN or an inf. */
static void test_huge_logits(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_huge_logits");
  long errors = 0;
  for (int d = 0; d < 3; d++) {
    xt_case c;
    double M;
    for (int k = 0; (M = xt_huge_case(&c, DTYPES[d], k, 13, 300 + k)) != 0.0; k++) {
      xt_problem pb;
      assert_int_equal(xt_problem_make_huge(&pb, &c, M, &rng), 0);
      char desc[768];
      snprintf(desc, sizeof desc, "huge logits M=%g", M);
      xt_outbuf ob;
      assert_int_equal(xt_outbuf_make(&ob, &c), 0);
      xent_status st = call_forward(&pb, &ob, 1);
      if (st != XENT_OK) {
        fprintf(stderr, "  [%s] status %d: %s\n", desc, (int)st, xent_last_error());
        errors++;
      } else {
        errors += xt_check(&pb, &ob, pb.alloc, desc) + xt_check_huge(&pb, &ob, M, desc);
      }
      xt_outbuf_free(&ob);
      xt_problem_free(&pb);
    }
  }
  assert_int_equal(errors, 0);
}

/* Many short rows (the row partitioning across threads). */
static void test_many_rows(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_many_rows");
  long errors = 0;
  const int threads[] = {1, 2, 3, 0};
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      xt_case c = xt_case_default(DTYPES[d], 1001, 64);
      c.reduction = REDS[r];
      c.num_threads = threads[(d + r) % 4];
      if (r == 2) xt_everything(&c);
      errors += run_case(&c, &rng, "many rows");
      c.rows = 1;
      errors += run_case(&c, &rng, "one row");
    }
  assert_int_equal(errors, 0);
}

/* The same bits for every thread count (xent.h, "Results are deterministic"):
 * rows split over 1, 2, 3 threads or every core, every option. */
static void test_threads_same_bits(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_threads_same_bits");
  long errors = 0;
  const int threads[] = {1, 2, 3, 0};
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      xt_case c = xt_case_default(DTYPES[d], 203, 1031);
      c.reduction = REDS[r];
      xt_everything(&c);
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      xt_outbuf first;
      void *grad0 = xt_alloc(pb.alloc_elems * pb.esize);
      assert_int_equal(xt_outbuf_make(&first, &c), 0);
      for (int t = 0; t < 4; t++) {
        xt_outbuf ob;
        assert_int_equal(xt_outbuf_make(&ob, &c), 0);
        xt_problem_restore(&pb);
        assert_int_equal(call_forward(&pb, t ? &ob : &first, threads[t]), XENT_OK);
        if (t == 0) memcpy(grad0, pb.alloc, pb.alloc_elems * pb.esize);
        else errors += xt_compare_bits(&pb, &first, grad0, &ob, pb.alloc, "threads");
        xt_outbuf_free(&ob);
      }
      xt_free(grad0);
      xt_outbuf_free(&first);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* All logits equal: the first index is the arg-max. */
static void test_first_argmax(void **state) {
  (void)state;
  long errors = 0;
  for (int d = 0; d < 3; d++) {
    xt_rng rng = xt_rng_for("test_first_argmax");
    xt_case c = xt_case_default(DTYPES[d], 6, 9);
    c.reduction = XENT_REDUCTION_NONE;
    c.ignore_frac = 0.0;
    xt_problem pb;
    assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
    for (int64_t r = 0; r < c.rows; r++) {
      for (int64_t j = 0; j < c.vocab; j++) xt_problem_set(&pb, r, j, 1.5);
      xt_problem_set_target(&pb, r, r % 3); /* row 0, 3: target 0 = hit */
    }
    assert_int_equal(xt_problem_rereference(&pb), 0);
    errors += run_problem(&pb, "all equal");
    xt_problem_restore(&pb);
    xt_outbuf ob;
    assert_int_equal(xt_outbuf_make(&ob, &c), 0);
    assert_int_equal(call_forward(&pb, &ob, 0), XENT_OK);
    for (int64_t r = 0; r < c.rows; r++) {
      if (ob.pred[r] != 0 || ob.acc[r] != (r % 3 == 0 ? 1.0f : 0.0f)) {
        fprintf(stderr, "  all equal %s row %" PRId64 ": predicted %" PRId64 " acc %g\n",
                xt_dtype_name(DTYPES[d]), r, ob.pred[r], (double)ob.acc[r]);
        errors++;
      }
      double want = log(9.0);
      if (fabs(ob.loss[r] - want) > 1e-5 || fabs(ob.lse[r] - (1.5 + want)) > 1e-5) {
        fprintf(stderr, "  all equal row %" PRId64 ": loss %.9g want %.9g\n", r, (double)ob.loss[r], want);
        errors++;
      }
    }
    xt_outbuf_free(&ob);
    xt_problem_free(&pb);
  }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */
/* ------------------------------------------------------------------------ */

static void test_backward(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_backward");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      /* Vocabularies with and without a partial vector at the row end. */
      const int64_t vocabs[] = {1003, 7, 1024, 1};
      const int64_t V = vocabs[(d * 3 + r) % 4];
      xt_case c = xt_backward_case(DTYPES[d], 23, V, REDS[r]);
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      char desc[768];
      describe(&c, "backward", desc, sizeof desc);
      errors += run_problem(&pb, "backward: forward_grad"); /* leaves the gradient in pb.alloc */
      size_t bytes = pb.alloc_elems * pb.esize;
      void *grad = xt_alloc(bytes), *first = xt_alloc(bytes);
      assert_non_null(grad);
      assert_non_null(first);
      memcpy(grad, pb.alloc, bytes);
      xent_exec ex = cpu_exec(0);
      const int64_t R = c.rows;

      if (c.reduction != XENT_REDUCTION_NONE) {
        const float scalars[] = {0.37f, -2.5f, 0.0f, 1e-3f, 1.0f, 3.0e4f};
        for (int i = 0; i < 6; i++) {
          float go = scalars[i];
          memcpy(pb.alloc, grad, bytes);
          xent_status st = xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, &go, 1, &ex);
          if (st != XENT_OK) {
            fprintf(stderr, "  [%s] xent_backward(%g): %s\n", desc, (double)go, xent_last_error());
            errors++;
            continue;
          }
          errors += xt_check_scaled(&pb, grad, pb.alloc, &go, 1, desc);
          memcpy(first, pb.alloc, bytes);
          /* The host-scalar form gives the same bits. */
          memcpy(pb.alloc, grad, bytes);
          st = xent_backward_scale(pb.logits, c.dtype, R, c.vocab, c.stride, go, &ex);
          if (st != XENT_OK || memcmp(first, pb.alloc, bytes) != 0) {
            fprintf(stderr, "  [%s] xent_backward_scale(%g) differs from xent_backward (%s)\n",
                    desc, (double)go, xent_last_error());
            errors++;
          }
          /* One thread or two: the same bits. */
          xent_exec ex1 = cpu_exec(1);
          memcpy(pb.alloc, grad, bytes);
          st = xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, &go, 1, &ex1);
          if (st != XENT_OK || memcmp(first, pb.alloc, bytes) != 0) {
            fprintf(stderr, "  [%s] xent_backward(%g) on 1 thread differs\n", desc, (double)go);
            errors++;
          }
        }
        /* grad_output 1 leaves the gradient bit-identical. */
        memcpy(pb.alloc, grad, bytes);
        float one = 1.0f;
        if (xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, &one, 1, &ex) != XENT_OK ||
            memcmp(pb.alloc, grad, bytes) != 0) {
          fprintf(stderr, "  [%s] xent_backward(1) changed the gradient\n", desc);
          errors++;
        }
        if (xent_backward_scale(pb.logits, c.dtype, R, c.vocab, c.stride, 1.0f, &ex) != XENT_OK ||
            memcmp(pb.alloc, grad, bytes) != 0) {
          fprintf(stderr, "  [%s] xent_backward_scale(1) changed the gradient\n", desc);
          errors++;
        }
      } else {
        float *go = xt_alloc((size_t)R * sizeof(float));
        assert_non_null(go);
        xt_grad_outputs(go, R, &rng);
        memcpy(pb.alloc, grad, bytes);
        xent_status st = xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, go, R, &ex);
        if (st != XENT_OK) {
          fprintf(stderr, "  [%s] xent_backward(per row): %s\n", desc, xent_last_error());
          errors++;
        } else {
          errors += xt_check_scaled(&pb, grad, pb.alloc, go, R, desc);
          memcpy(first, pb.alloc, bytes);
          xent_exec ex1 = cpu_exec(1);
          memcpy(pb.alloc, grad, bytes);
          st = xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, go, R, &ex1);
          if (st != XENT_OK || memcmp(first, pb.alloc, bytes) != 0) {
            fprintf(stderr, "  [%s] per-row backward on 1 thread differs\n", desc);
            errors++;
          }
        }
        /* All ones: bit-identical. */
        for (int64_t i = 0; i < R; i++) go[i] = 1.0f;
        memcpy(pb.alloc, grad, bytes);
        if (xent_backward(pb.logits, c.dtype, R, c.vocab, c.stride, go, R, &ex) != XENT_OK ||
            memcmp(pb.alloc, grad, bytes) != 0) {
          fprintf(stderr, "  [%s] per-row grad_output of ones changed the gradient\n", desc);
          errors++;
        }
        xt_free(go);
      }
      xt_free(grad);
      xt_free(first);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Determinism                                                               */
/* ------------------------------------------------------------------------ */

/* xent_backward_rescale on the CPU: a second backward with another
 * upstream gradient (scalar and per row) gives the gradient times the new
 * one, and leaves it as the factor applied. */
static void test_backward_rescale(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_backward_rescale");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int per_row = 0; per_row < 2; per_row++) {
      enum { R = 9, V = 1001 };
      const size_t bytes = (size_t)R * V * xt_dtype_size(DTYPES[d]);
      void *g = xt_alloc(bytes), *g0 = xt_alloc(bytes);
      for (int64_t i = 0; i < R * V; i++) xt_store(g, DTYPES[d], i, xt_normal(&rng));
      memcpy(g0, g, bytes);
      const int64_t n = per_row ? R : 1;
      float go1[R], go2[R], ap[R];
      for (int64_t i = 0; i < n; i++) {
        go1[i] = (float)(0.5 + xt_uniform(&rng));
        go2[i] = i % 4 == 0 ? go1[i] : (float)(2.0 * xt_uniform(&rng) - 1.0);
        ap[i] = 1.0f;
      }
      xent_exec ex = cpu_exec(0);
      assert_int_equal(xent_backward_rescale(g, DTYPES[d], R, V, 0, go1, ap, n, &ex), XENT_OK);
      assert_int_equal(xent_backward_rescale(g, DTYPES[d], R, V, 0, go2, ap, n, &ex), XENT_OK);
      const xt_tol t = xt_tol_for(DTYPES[d]);
      for (int64_t i = 0; i < n; i++)
        if (ap[i] != go2[i]) errors++;
      for (int64_t i = 0; i < R * V; i++) {
        const double x = xt_load(g0, DTYPES[d], i), f = per_row ? go2[i / V] : go2[0];
        const double got = xt_load(g, DTYPES[d], i);
        if (!(fabs(got - x * f) <= 3.0 * t.scale_rtol * fabs(x * f) + t.grad_abs)) {
          fprintf(stderr, "  rescale %s [%lld] = %g, want %g\n", xt_dtype_name(DTYPES[d]),
                  (long long)i, got, x * f);
          errors++;
          break;
        }
      }
      xt_free(g);
      xt_free(g0);
    }
  assert_int_equal(errors, 0);
}

static void test_determinism(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_determinism");
  long errors = 0;
  const int threads[] = {2, 7, 0, 1};
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      xt_case c = xt_case_default(DTYPES[d], 64, 4095);
      c.reduction = REDS[r];
      xt_everything(&c);
      c.num_threads = 1;
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      char desc[768];
      describe(&c, "determinism", desc, sizeof desc);
      errors += run_problem(&pb, "determinism (1 thread)");
      size_t bytes = pb.alloc_elems * pb.esize;
      void *first = xt_alloc(bytes);
      assert_non_null(first);
      memcpy(first, pb.alloc, bytes);
      xt_outbuf a, b;
      assert_int_equal(xt_outbuf_make(&a, &c), 0);
      assert_int_equal(xt_outbuf_make(&b, &c), 0);
      xt_problem_restore(&pb);
      assert_int_equal(call_forward(&pb, &a, 1), XENT_OK);
      if (memcmp(first, pb.alloc, bytes) != 0) {
        fprintf(stderr, "  [%s] two runs on 1 thread differ\n", desc);
        errors++;
      }
      for (int t = 0; t < 4; t++) {
        xt_problem_restore(&pb);
        xt_outbuf_poison(&b);
        assert_int_equal(call_forward(&pb, &b, threads[t]), XENT_OK);
        char d2[800];
        snprintf(d2, sizeof d2, "%s: 1 vs %d threads", desc, threads[t]);
        errors += xt_compare_bits(&pb, &a, first, &b, pb.alloc, d2);
      }
      xt_outbuf_free(&a);
      xt_outbuf_free(&b);
      xt_free(first);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

int main(void) {
  xt_base_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conversions),
      cmocka_unit_test(test_reference_by_hand),
      cmocka_unit_test(test_reference_gradient_by_differences),
      cmocka_unit_test(test_checker_catches),
      cmocka_unit_test(test_matrix),
      cmocka_unit_test(test_features),
      cmocka_unit_test(test_vocab_sizes),
      cmocka_unit_test(test_padded_stride),
      cmocka_unit_test(test_unaligned_base),
      cmocka_unit_test(test_ignored_rows),
      cmocka_unit_test(test_masked_logits),
      cmocka_unit_test(test_nonfinite_logits),
      cmocka_unit_test(test_peaked_rows),
      cmocka_unit_test(test_large_offsets),
      cmocka_unit_test(test_huge_logits),
      cmocka_unit_test(test_many_rows),
      cmocka_unit_test(test_threads_same_bits),
      cmocka_unit_test(test_first_argmax),
      cmocka_unit_test(test_backward),
      cmocka_unit_test(test_backward_rescale),
      cmocka_unit_test(test_determinism),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  printf("[ CASES    ] %ld CPU calls checked against the reference\n", g_cases);
  xt_report_margins();
  return failed;
}
