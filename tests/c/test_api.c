/*
 * test_api.c - the public API's contract: every bad argument gets its own
 * status and a message naming it, and leaves the logits and every output
 * bit-for-bit as they were; the rows == 0 cases; defaults, version, info
 * and status strings.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reference.h"
#include "xent.h"

#ifndef XENT_TEST_HAVE_CUDA
#define XENT_TEST_HAVE_CUDA 0
#endif

/* ------------------------------------------------------------------------ */
/* A small problem whose buffers every test shares                           */
/* ------------------------------------------------------------------------ */

#define ROWS 8
#define VOCAB 16
#define SLACK 16 /* extra elements, so misaligned pointers stay inside */

typedef struct fixture {
  float *logits, *logits_orig;          /* ROWS * VOCAB + SLACK */
  int64_t *t64, *t64_orig;              /* ROWS + SLACK         */
  int32_t *t32, *t32_orig;
  float *weights;                       /* VOCAB + SLACK        */
  float *loss, *z, *acc, *lse;          /* ROWS + SLACK         */
  int64_t *pred;
  /* poisoned images of the outputs, to compare against */
  float *poison_f;
  int64_t *poison_i;
} fixture;

static fixture fx;
static long g_errors;

#define NLOGITS (ROWS * VOCAB + SLACK)
#define NOUT (ROWS + SLACK)

static void report(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "  ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  g_errors++;
}

static int fixture_setup(void **state) {
  (void)state;
  xt_rng rng = xt_rng_for("test_api");
  fx.logits = xt_alloc(NLOGITS * sizeof(float));
  fx.logits_orig = xt_alloc(NLOGITS * sizeof(float));
  fx.t64 = xt_alloc(NOUT * sizeof(int64_t));
  fx.t32 = xt_alloc(NOUT * sizeof(int32_t));
  fx.t64_orig = xt_alloc(NOUT * sizeof(int64_t));
  fx.t32_orig = xt_alloc(NOUT * sizeof(int32_t));
  fx.weights = xt_alloc((VOCAB + SLACK) * sizeof(float));
  fx.loss = xt_alloc(NOUT * sizeof(float));
  fx.z = xt_alloc(NOUT * sizeof(float));
  fx.acc = xt_alloc(NOUT * sizeof(float));
  fx.lse = xt_alloc(NOUT * sizeof(float));
  fx.pred = xt_alloc(NOUT * sizeof(int64_t));
  fx.poison_f = xt_alloc(NOUT * sizeof(float));
  fx.poison_i = xt_alloc(NOUT * sizeof(int64_t));
  if (!fx.logits || !fx.logits_orig || !fx.t64 || !fx.t32 || !fx.t64_orig || !fx.t32_orig || !fx.weights || !fx.loss ||
      !fx.z || !fx.acc || !fx.lse || !fx.pred || !fx.poison_f || !fx.poison_i)
    return -1;
  for (int i = 0; i < NLOGITS; i++) fx.logits_orig[i] = (float)(3.0 * xt_normal(&rng));
  for (int r = 0; r < ROWS; r++) {
    fx.t64[r] = xt_randint(&rng, VOCAB);
    fx.t32[r] = (int32_t)fx.t64[r];
  }
  memcpy(fx.t64_orig, fx.t64, NOUT * sizeof(int64_t));
  memcpy(fx.t32_orig, fx.t32, NOUT * sizeof(int32_t));
  for (int j = 0; j < VOCAB + SLACK; j++) fx.weights[j] = (float)(0.5 + xt_uniform(&rng));
  xt_poison_f32(fx.poison_f, NOUT);
  xt_poison_i64(fx.poison_i, NOUT);
  return 0;
}

static int fixture_teardown(void **state) {
  (void)state;
  void *all[] = {fx.logits, fx.logits_orig, fx.t64, fx.t32, fx.t64_orig, fx.t32_orig, fx.weights, fx.loss, fx.z,
                 fx.acc, fx.lse, fx.pred, fx.poison_f, fx.poison_i};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) xt_free(all[i]);
  return 0;
}

static void reset_buffers(void) {
  memcpy(fx.logits, fx.logits_orig, NLOGITS * sizeof(float));
  memcpy(fx.loss, fx.poison_f, NOUT * sizeof(float));
  memcpy(fx.z, fx.poison_f, NOUT * sizeof(float));
  memcpy(fx.acc, fx.poison_f, NOUT * sizeof(float));
  memcpy(fx.lse, fx.poison_f, NOUT * sizeof(float));
  memcpy(fx.pred, fx.poison_i, NOUT * sizeof(int64_t));
}

/* Which buffers changed since reset_buffers(); "" when none. */
static const char *changed_buffers(void) {
  static char buf[128];
  buf[0] = '\0';
  if (memcmp(fx.logits, fx.logits_orig, NLOGITS * sizeof(float))) strcat(buf, " logits");
  if (memcmp(fx.loss, fx.poison_f, NOUT * sizeof(float))) strcat(buf, " loss");
  if (memcmp(fx.z, fx.poison_f, NOUT * sizeof(float))) strcat(buf, " z_loss");
  if (memcmp(fx.acc, fx.poison_f, NOUT * sizeof(float))) strcat(buf, " token_accuracy");
  if (memcmp(fx.lse, fx.poison_f, NOUT * sizeof(float))) strcat(buf, " lse");
  if (memcmp(fx.pred, fx.poison_i, NOUT * sizeof(int64_t))) strcat(buf, " predicted");
  return buf;
}

/* ------------------------------------------------------------------------ */
/* The forward call under test                                               */
/* ------------------------------------------------------------------------ */

typedef struct call {
  xent_input in;
  xent_options opt;
  xent_output out;
  xent_exec ex;
  int null_in, null_opt, null_out, null_ex;
} call;

/* Valid: fp32, int64 targets, none reduction (per-row outputs), CPU. */
static void base_call(call *c) {
  memset(c, 0, sizeof *c);
  c->in.logits = fx.logits;
  c->in.dtype = XENT_FLOAT32;
  c->in.rows = ROWS;
  c->in.vocab = VOCAB;
  c->in.row_stride = 0;
  c->in.targets = fx.t64;
  c->in.target_type = XENT_INT64;
  c->in.weights = NULL;
  c->opt = xent_options_default();
  c->opt.reduction = XENT_REDUCTION_NONE;
  c->out.loss = fx.loss;
  c->out.z_loss = fx.z;
  c->out.token_accuracy = fx.acc;
  c->out.predicted = fx.pred;
  c->out.lse = fx.lse;
  c->ex = xent_exec_default();
  c->ex.backend = XENT_BACKEND_CPU;
}

static xent_status run_call(const call *c, int grad) {
  const xent_input *in = c->null_in ? NULL : &c->in;
  const xent_options *opt = c->null_opt ? NULL : &c->opt;
  const xent_output *out = c->null_out ? NULL : &c->out;
  const xent_exec *ex = c->null_ex ? NULL : &c->ex;
  return grad ? xent_forward_grad(in, opt, out, ex) : xent_forward(in, opt, out, ex);
}

/* Both xent_forward and xent_forward_grad must fail with `want`, say so in
 * a message naming every word of `words` (NULL-terminated) and none of
 * `absent`, and write nothing. */
static void expect_fail_words(const char *label, const call *c, xent_status want,
                              const char *const *words, const char *const *absent) {
  for (int grad = 0; grad < 2; grad++) {
    reset_buffers();
    xent_status st = run_call(c, grad);
    const char *msg = xent_last_error();
    const char *fn = grad ? "xent_forward_grad" : "xent_forward";
    if (st != want) {
      report("%s: %s returned %d (%s), want %d (%s); message \"%s\"", label, fn, (int)st,
             xent_status_string(st), (int)want, xent_status_string(want), msg);
    } else {
      if (!msg || !*msg) report("%s: %s: empty xent_last_error()", label, fn);
      for (int i = 0; words && words[i]; i++)
        if (msg && !xt_mentions(msg, words[i]))
          report("%s: %s: message \"%s\" does not name \"%s\"", label, fn, msg, words[i]);
      for (int i = 0; absent && absent[i]; i++)
        if (msg && xt_mentions(msg, absent[i]))
          report("%s: %s: message \"%s\" names \"%s\" (not the first bad one)", label, fn, msg,
                 absent[i]);
    }
    const char *ch = changed_buffers();
    if (*ch) report("%s: %s failed but wrote:%s", label, fn, ch);
  }
}

static void expect_fail(const char *label, const call *c, xent_status want, const char *word) {
  const char *words[] = {word, NULL};
  expect_fail_words(label, c, want, words, NULL);
}

static void expect_ok(const char *label, const call *c) {
  for (int grad = 0; grad < 2; grad++) {
    reset_buffers();
    xent_status st = run_call(c, grad);
    if (st != XENT_OK)
      report("%s: %s returned %d (%s): \"%s\"", label, grad ? "xent_forward_grad" : "xent_forward",
             (int)st, xent_status_string(st), xent_last_error());
  }
}

/* Every test starts from the pristine targets, whatever an earlier test did. */
#define BEGIN()                                                  \
  do {                                                           \
    g_errors = 0;                                                \
    memcpy(fx.t64, fx.t64_orig, NOUT * sizeof(int64_t));         \
    memcpy(fx.t32, fx.t32_orig, NOUT * sizeof(int32_t));         \
  } while (0)
#define END() assert_int_equal(g_errors, 0)

/* ------------------------------------------------------------------------ */
/* Defaults, version, info, status strings                                   */
/* ------------------------------------------------------------------------ */

static void test_defaults(void **state) {
  (void)state;
  xent_options a = xent_options_default();
  xent_options b = XENT_OPTIONS_INIT;
  assert_int_equal(a.reduction, b.reduction);
  assert_int_equal(a.ignore_index, b.ignore_index);
  assert_true(a.label_smoothing == b.label_smoothing);
  assert_true(a.lse_square_scale == b.lse_square_scale);
  assert_int_equal(a.use_softcap, b.use_softcap);
  assert_true(a.softcap == b.softcap);
  assert_int_equal(a.target_check, b.target_check);
  assert_int_equal(a.empty_mean, b.empty_mean);
  assert_int_equal(a.empty_mean, XENT_EMPTY_MEAN_NAN);
  assert_int_equal(a.reduction, XENT_REDUCTION_MEAN);
  assert_int_equal(a.ignore_index, -100);
  assert_true(a.label_smoothing == 0.0f);
  assert_true(a.lse_square_scale == 0.0f);
  assert_int_equal(a.use_softcap, 0);
  assert_int_equal(a.target_check, XENT_TARGETS_CHECKED);

  xent_exec e = xent_exec_default();
  xent_exec f = XENT_EXEC_INIT;
  assert_int_equal(e.backend, f.backend);
  assert_int_equal(e.backend, XENT_BACKEND_AUTO);
  assert_int_equal(e.device, f.device);
  assert_int_equal(e.device, 0);
  assert_null(e.stream);
  assert_null(f.stream);
  assert_null(e.workspace);
  assert_int_equal(e.workspace_bytes, 0);
  assert_int_equal(e.num_threads, f.num_threads);
  assert_int_equal(e.num_threads, 0);

  /* The enum values are part of the ABI. */
  assert_int_equal(XENT_FLOAT32, 0);
  assert_int_equal(XENT_BFLOAT16, 1);
  assert_int_equal(XENT_FLOAT16, 2);
  assert_int_equal(XENT_INT32, 0);
  assert_int_equal(XENT_INT64, 1);
  assert_int_equal(XENT_REDUCTION_MEAN, 0);
  assert_int_equal(XENT_REDUCTION_SUM, 1);
  assert_int_equal(XENT_REDUCTION_NONE, 2);
  assert_int_equal(XENT_F32, XENT_FLOAT32);
  assert_int_equal(XENT_BF16, XENT_BFLOAT16);
  assert_int_equal(XENT_F16, XENT_FLOAT16);
}

static void test_version_and_info(void **state) {
  (void)state;
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", XENT_VERSION_MAJOR, XENT_VERSION_MINOR,
           XENT_VERSION_PATCH);
  assert_non_null(xent_version());
  assert_string_equal(xent_version(), want);
  assert_string_equal(xent_version(), "0.1.0");

  xent_info info;
  memset(&info, 0x5A, sizeof info);
  assert_int_equal(xent_get_info(&info), XENT_OK);
  assert_int_equal(info.version_major, XENT_VERSION_MAJOR);
  assert_int_equal(info.version_minor, XENT_VERSION_MINOR);
  assert_int_equal(info.version_patch, XENT_VERSION_PATCH);
  assert_int_equal(info.cpu_backend, 1);
  assert_true(info.cpu_threads >= 1);
  assert_int_equal(info.cuda_built, XENT_TEST_HAVE_CUDA);
  assert_true(info.cuda_devices >= 0);
  if (!info.cuda_built) {
    assert_int_equal(info.cuda_devices, 0);
    assert_int_equal(info.cuda_runtime_version, 0);
  } else {
    assert_true(info.cuda_runtime_version > 0);
  }
  if (info.cuda_devices > 0) assert_true(info.cuda_driver_version > 0);
  print_message("cpu_threads=%d cuda_built=%d cuda_devices=%d runtime=%d driver=%d\n",
                info.cpu_threads, info.cuda_built, info.cuda_devices, info.cuda_runtime_version,
                info.cuda_driver_version);

  assert_int_equal(xent_get_info(NULL), XENT_ERROR_NULL_POINTER);
  assert_true(xt_mentions(xent_last_error(), "info"));

  xent_device_info d;
  assert_int_equal(xent_get_device_info(0, NULL), XENT_ERROR_NULL_POINTER);
  assert_true(xt_mentions(xent_last_error(), "info"));
  if (!info.cuda_built) {
    assert_int_equal(xent_get_device_info(0, &d), XENT_ERROR_UNSUPPORTED);
    assert_true(*xent_last_error() != '\0');
  } else {
    /* No such device: past the last one, and negative. */
    assert_int_not_equal(xent_get_device_info(info.cuda_devices, &d), XENT_OK);
    assert_true(*xent_last_error() != '\0');
    assert_int_not_equal(xent_get_device_info(-1, &d), XENT_OK);
    if (info.cuda_devices > 0) {
      assert_int_equal(xent_get_device_info(0, &d), XENT_OK);
      assert_true(d.name[0] != '\0');
      assert_true(d.sm_major >= 3);
      assert_true(d.multiprocessors > 0);
      assert_true(d.global_memory > 0);
      assert_int_equal(d.cluster_launch, d.sm_major >= 9);
    }
  }
}

static void test_status_strings(void **state) {
  (void)state;
  const xent_status all[] = {XENT_OK,
                             XENT_ERROR_NULL_POINTER,
                             XENT_ERROR_BAD_SHAPE,
                             XENT_ERROR_BAD_STRIDE,
                             XENT_ERROR_BAD_TARGET,
                             XENT_ERROR_BAD_LABEL_SMOOTHING,
                             XENT_ERROR_BAD_SOFTCAP,
                             XENT_ERROR_BAD_WEIGHT,
                             XENT_ERROR_BAD_ENUM,
                             XENT_ERROR_BAD_ARGUMENT,
                             XENT_ERROR_UNSUPPORTED,
                             XENT_ERROR_CUDA,
                             XENT_ERROR_OUT_OF_MEMORY};
  const int n = (int)(sizeof all / sizeof all[0]);
  for (int i = 0; i < n; i++) {
    assert_int_equal((int)all[i], i); /* the codes are the ABI: 0..12 */
    const char *s = xent_status_string(all[i]);
    assert_non_null(s);
    assert_true(strlen(s) > 0);
    const char *unknown = xent_status_string((xent_status)1000);
    assert_string_not_equal(s, unknown);
    for (int j = 0; j < i; j++) assert_string_not_equal(s, xent_status_string(all[j]));
  }
  assert_non_null(xent_status_string((xent_status)-1));
  assert_non_null(xent_status_string((xent_status)13));
  assert_true(strlen(xent_status_string((xent_status)13)) > 0);
}

static void *thread_error(void *arg) {
  const char **out = (const char **)arg;
  static char copy_before[512], copy_after[512];
  snprintf(copy_before, sizeof copy_before, "%s", xent_last_error());
  xent_options opt = xent_options_default();
  xent_output o = {fx.loss, NULL, NULL, NULL, NULL};
  xent_exec ex = xent_exec_default();
  xent_status st = xent_forward(NULL, &opt, &o, &ex); /* "in" is NULL */
  (void)st;
  snprintf(copy_after, sizeof copy_after, "%s", xent_last_error());
  out[0] = copy_before;
  out[1] = copy_after;
  return NULL;
}

static void test_last_error_per_thread(void **state) {
  (void)state;
  /* An error on this thread ... */
  call c;
  base_call(&c);
  c.opt.label_smoothing = -1.0f;
  reset_buffers();
  assert_int_equal(run_call(&c, 0), XENT_ERROR_BAD_LABEL_SMOOTHING);
  char mine[512];
  snprintf(mine, sizeof mine, "%s", xent_last_error());
  assert_true(xt_mentions(mine, "label_smoothing"));
  /* ... is not seen by a new thread, whose own error does not change it. */
  const char *seen[2] = {NULL, NULL};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, thread_error, seen), 0);
  assert_int_equal(pthread_join(th, NULL), 0);
  assert_string_equal(seen[0], "");
  assert_true(xt_mentions(seen[1], "in"));
  assert_string_equal(xent_last_error(), mine);
}

static void test_workspace_size(void **state) {
  (void)state;
  size_t prev = xent_workspace_size(0);
  assert_true(prev > 0);
  assert_true(xent_workspace_size(-5) > 0);
  int64_t sizes[] = {1, 2, 7, 64, 1000, 8192, 65536, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t w = xent_workspace_size(sizes[i]);
    assert_true(w >= prev);
    /* O(rows): a few words per row plus a fixed part, never rows x vocab. */
    assert_true(w <= (size_t)sizes[i] * 64 + ((size_t)1 << 20));
    prev = w;
  }
}

/* ------------------------------------------------------------------------ */
/* Bad arguments of the forward                                              */
/* ------------------------------------------------------------------------ */

static void test_null_pointers(void **state) {
  (void)state;
  BEGIN();
  call c;
  base_call(&c);
  c.null_in = 1;
  expect_fail("in NULL", &c, XENT_ERROR_NULL_POINTER, "in");
  base_call(&c);
  c.null_opt = 1;
  expect_fail("opt NULL", &c, XENT_ERROR_NULL_POINTER, "opt");
  base_call(&c);
  c.null_out = 1;
  expect_fail("out NULL", &c, XENT_ERROR_NULL_POINTER, "out");
  base_call(&c);
  c.null_ex = 1;
  expect_fail("exec NULL", &c, XENT_ERROR_NULL_POINTER, "exec");
  base_call(&c);
  c.in.logits = NULL;
  expect_fail("logits NULL", &c, XENT_ERROR_NULL_POINTER, "logits");
  base_call(&c);
  c.in.targets = NULL;
  expect_fail("targets NULL", &c, XENT_ERROR_NULL_POINTER, "targets");
  xent_reduction reds[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM, XENT_REDUCTION_NONE};
  for (int i = 0; i < 3; i++) {
    base_call(&c);
    c.opt.reduction = reds[i];
    c.out.loss = NULL;
    expect_fail("loss NULL", &c, XENT_ERROR_NULL_POINTER, "loss");
  }
  /* The optional outputs may all be NULL. */
  base_call(&c);
  c.out.z_loss = NULL;
  c.out.token_accuracy = NULL;
  c.out.predicted = NULL;
  c.out.lse = NULL;
  expect_ok("optional outputs NULL", &c);
  END();
}

static void test_bad_shapes(void **state) {
  (void)state;
  BEGIN();
  call c;
  int64_t bad_rows[] = {-1, -1000, INT64_MIN};
  for (int i = 0; i < 3; i++) {
    base_call(&c);
    c.in.rows = bad_rows[i];
    expect_fail("rows < 0", &c, XENT_ERROR_BAD_SHAPE, "rows");
  }
  int64_t bad_vocab[] = {0, -1, INT64_MIN, (int64_t)INT32_MAX + 1, INT64_MAX};
  for (int i = 0; i < 5; i++) {
    base_call(&c);
    c.in.vocab = bad_vocab[i];
    c.in.row_stride = 0;
    expect_fail("bad vocab", &c, XENT_ERROR_BAD_SHAPE, "vocab");
  }
  int64_t bad_stride[] = {1, VOCAB - 1, -1, -VOCAB, INT64_MIN};
  for (int i = 0; i < 5; i++) {
    base_call(&c);
    c.in.row_stride = bad_stride[i];
    expect_fail("row_stride < vocab", &c, XENT_ERROR_BAD_STRIDE, "row_stride");
  }
  /* An extent that overflows 64-bit byte offsets: rejected before anything
   * (targets included) is read. */
  base_call(&c);
  c.in.rows = (int64_t)1 << 40;
  c.in.row_stride = (int64_t)1 << 30;
  expect_fail("extent overflow", &c, XENT_ERROR_BAD_STRIDE, "row_stride");
  base_call(&c);
  c.in.rows = INT64_MAX;
  expect_fail("extent overflow (rows)", &c, XENT_ERROR_BAD_STRIDE, "rows");
  /* A stride of exactly vocab, and larger ones, are fine. */
  base_call(&c);
  c.in.row_stride = VOCAB;
  expect_ok("row_stride == vocab", &c);
  base_call(&c);
  c.in.rows = ROWS / 2;
  c.in.row_stride = 2 * VOCAB - 1;
  expect_ok("row_stride > vocab", &c);
  END();
}

static void test_bad_enums(void **state) {
  (void)state;
  BEGIN();
  call c;
  int bad_dtypes[] = {3, -1, 100};
  for (int i = 0; i < 3; i++) {
    base_call(&c);
    c.in.dtype = (xent_dtype)bad_dtypes[i];
    expect_fail("bad dtype", &c, XENT_ERROR_BAD_ENUM, "dtype");
  }
  base_call(&c);
  c.in.target_type = (xent_index_type)2;
  expect_fail("bad target_type", &c, XENT_ERROR_BAD_ENUM, "target_type");
  base_call(&c);
  c.in.target_type = (xent_index_type)-1;
  expect_fail("bad target_type", &c, XENT_ERROR_BAD_ENUM, "target_type");
  base_call(&c);
  c.opt.reduction = (xent_reduction)3;
  expect_fail("bad reduction", &c, XENT_ERROR_BAD_ENUM, "reduction");
  base_call(&c);
  c.opt.reduction = (xent_reduction)-1;
  expect_fail("bad reduction", &c, XENT_ERROR_BAD_ENUM, "reduction");
  base_call(&c);
  c.opt.target_check = (xent_target_check)3;
  expect_fail("bad target_check", &c, XENT_ERROR_BAD_ENUM, "target_check");
  /* deferred checks want a reduced loss (the base call's is none) */
  base_call(&c);
  c.opt.target_check = XENT_TARGETS_DEFERRED;
  expect_fail("deferred with reduction none", &c, XENT_ERROR_BAD_ARGUMENT, "target_check");
  base_call(&c);
  c.opt.target_check = XENT_TARGETS_DEFERRED;
  c.opt.reduction = XENT_REDUCTION_SUM;
  /* the CPU checks at once: no verdict needed (the CUDA tests check that
   * the CUDA backend asks for one) */
  expect_ok("deferred without a verdict on the CPU", &c);
  xent_verdict *v = NULL;
  assert_int_equal(xent_verdict_create(&v), XENT_OK);
  c.ex.verdict = v;
  expect_ok("deferred with reduction sum (the CPU checks at once)", &c);
  assert_int_equal(xent_verdict_ready(v), 1); /* nothing pending: the CPU checked */
  assert_int_equal(xent_verdict_wait(v), XENT_OK);
  xent_verdict_destroy(v);
  assert_int_equal(xent_verdict_wait(NULL), XENT_ERROR_NULL_POINTER);
  assert_int_equal(xent_verdict_ready(NULL), 0);
  base_call(&c);
  c.ex.backend = (xent_backend)3;
  expect_fail("bad backend", &c, XENT_ERROR_BAD_ENUM, "backend");
  base_call(&c);
  c.ex.backend = (xent_backend)-7;
  expect_fail("bad backend", &c, XENT_ERROR_BAD_ENUM, "backend");
  END();
}

static void test_bad_targets_int32(void **state) {
  (void)state;
  BEGIN();
  call c;
  struct {
    int row;
    int32_t value;
    const char *row_s, *value_s;
  } cases[] = {
      {3, -1, "3", "-1"},
      {5, VOCAB, "5", "16"},
      {0, 17, "0", "17"},
      {7, INT32_MAX, "7", "2147483647"},
      {6, INT32_MIN, "6", "-2147483648"},
      {2, -101, "2", "-101"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int32_t saved = fx.t32[cases[i].row];
    fx.t32[cases[i].row] = cases[i].value;
    base_call(&c);
    c.in.targets = fx.t32;
    c.in.target_type = XENT_INT32;
    const char *words[] = {"targets", cases[i].row_s, cases[i].value_s, NULL};
    char label[64];
    snprintf(label, sizeof label, "int32 targets[%d] = %d", cases[i].row, (int)cases[i].value);
    expect_fail_words(label, &c, XENT_ERROR_BAD_TARGET, words, NULL);
    fx.t32[cases[i].row] = saved;
  }
  /* Two bad rows: the first is named, not the second. */
  int32_t s1 = fx.t32[1], s2 = fx.t32[6];
  fx.t32[1] = -9;
  fx.t32[6] = 4321;
  base_call(&c);
  c.in.targets = fx.t32;
  c.in.target_type = XENT_INT32;
  {
    const char *words[] = {"1", "-9", NULL};
    const char *absent[] = {"6", "4321", NULL};
    expect_fail_words("int32 first bad row", &c, XENT_ERROR_BAD_TARGET, words, absent);
  }
  fx.t32[1] = s1;
  fx.t32[6] = s2;
  /* ignore_index does not reach beyond the int32 range by truncation:
   * -100 is not 2^32 - 100. */
  s1 = fx.t32[4];
  fx.t32[4] = -100;
  base_call(&c);
  c.in.targets = fx.t32;
  c.in.target_type = XENT_INT32;
  c.opt.ignore_index = ((int64_t)1 << 32) - 100;
  {
    const char *words[] = {"4", "-100", NULL};
    expect_fail_words("int32 -100 vs ignore_index 2^32-100", &c, XENT_ERROR_BAD_TARGET, words,
                      NULL);
  }
  fx.t32[4] = s1;
  END();
}

static void test_bad_targets_int64(void **state) {
  (void)state;
  BEGIN();
  call c;
  struct {
    int row;
    int64_t value;
    const char *row_s, *value_s;
  } cases[] = {
      {3, -1, "3", "-1"},
      {5, VOCAB, "5", "16"},
      {7, 5000000000LL, "7", "5000000000"},
      /* in range once truncated to 32 bits: must still be caught */
      {2, ((int64_t)1 << 32) + 3, "2", "4294967299"},
      {0, INT64_MIN, "0", "-9223372036854775808"},
      {6, INT64_MAX, "6", "9223372036854775807"},
      {4, -99, "4", "-99"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t saved = fx.t64[cases[i].row];
    fx.t64[cases[i].row] = cases[i].value;
    base_call(&c);
    const char *words[] = {"targets", cases[i].row_s, cases[i].value_s, NULL};
    char label[80];
    snprintf(label, sizeof label, "int64 targets[%d] = %" PRId64, cases[i].row, cases[i].value);
    expect_fail_words(label, &c, XENT_ERROR_BAD_TARGET, words, NULL);
    /* And with every reduction and option mix: still checked first. */
    c.opt.reduction = XENT_REDUCTION_MEAN;
    c.opt.label_smoothing = 0.1f;
    c.in.weights = fx.weights;
    expect_fail_words(label, &c, XENT_ERROR_BAD_TARGET, words, NULL);
    fx.t64[cases[i].row] = saved;
  }
  int64_t s1 = fx.t64[2], s2 = fx.t64[5];
  fx.t64[2] = 70000;
  fx.t64[5] = -3;
  base_call(&c);
  {
    const char *words[] = {"2", "70000", NULL};
    const char *absent[] = {"5", "-3", NULL};
    expect_fail_words("int64 first bad row", &c, XENT_ERROR_BAD_TARGET, words, absent);
  }
  fx.t64[2] = s1;
  fx.t64[5] = s2;
  END();
}

/* ignore_index is exempt from the range check whatever its value, and a
 * real class index used as ignore_index makes those rows ignored. */
static void test_ignore_index_exempt(void **state) {
  (void)state;
  BEGIN();
  call c;
  int64_t saved64[ROWS];
  int32_t saved32[ROWS];
  memcpy(saved64, fx.t64, sizeof saved64);
  memcpy(saved32, fx.t32, sizeof saved32);

  int64_t values64[] = {-100, -1, 3, VOCAB, 123456789, INT64_MIN, INT64_MAX,
                        ((int64_t)1 << 32) + 3};
  for (size_t i = 0; i < sizeof values64 / sizeof values64[0]; i++) {
    memcpy(fx.t64, saved64, sizeof saved64);
    fx.t64[1] = fx.t64[6] = values64[i];
    base_call(&c);
    c.opt.ignore_index = values64[i];
    char label[64];
    snprintf(label, sizeof label, "int64 ignore_index %" PRId64, values64[i]);
    expect_ok(label, &c);
    /* Ignored rows: loss 0, z 0, accuracy 0, predicted -1, lse 0. */
    for (int r = 0; r < ROWS; r++) {
      int ign = fx.t64[r] == values64[i];
      if (ign && (fx.loss[r] != 0.0f || fx.z[r] != 0.0f || fx.acc[r] != 0.0f ||
                  fx.pred[r] != -1 || fx.lse[r] != 0.0f))
        report("%s: row %d is not ignored (loss %g, pred %" PRId64 ")", label, r,
               (double)fx.loss[r], fx.pred[r]);
      if (!ign && !(fx.loss[r] > 0.0f && fx.pred[r] >= 0 && fx.pred[r] < VOCAB))
        report("%s: row %d looks ignored or wrong (loss %g, pred %" PRId64 ")", label, r,
               (double)fx.loss[r], fx.pred[r]);
      /* The forward_grad ran last: an ignored row's gradient is zero. */
      for (int j = 0; ign && j < VOCAB; j++)
        if (fx.logits[r * VOCAB + j] != 0.0f) {
          report("%s: gradient of ignored row %d is not zero", label, r);
          break;
        }
    }
  }
  int32_t values32[] = {-100, -1, 3, VOCAB, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof values32 / sizeof values32[0]; i++) {
    memcpy(fx.t32, saved32, sizeof saved32);
    fx.t32[0] = fx.t32[7] = values32[i];
    base_call(&c);
    c.in.targets = fx.t32;
    c.in.target_type = XENT_INT32;
    c.opt.ignore_index = values32[i];
    char label[64];
    snprintf(label, sizeof label, "int32 ignore_index %d", (int)values32[i]);
    expect_ok(label, &c);
    for (int r = 0; r < ROWS; r++) {
      int ign = fx.t32[r] == values32[i];
      if (ign && (fx.loss[r] != 0.0f || fx.pred[r] != -1))
        report("%s: row %d is not ignored", label, r);
    }
  }
  memcpy(fx.t64, saved64, sizeof saved64);
  memcpy(fx.t32, saved32, sizeof saved32);
  END();
}

static void test_bad_label_smoothing(void **state) {
  (void)state;
  BEGIN();
  call c;
  float bad[] = {-0.1f, -1e-30f, nextafterf(1.0f, 2.0f), 2.0f, NAN, -NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base_call(&c);
    c.opt.label_smoothing = bad[i];
    char label[64];
    snprintf(label, sizeof label, "label_smoothing %g", (double)bad[i]);
    expect_fail(label, &c, XENT_ERROR_BAD_LABEL_SMOOTHING, "label_smoothing");
  }
  float good[] = {0.0f, -0.0f, 1.0f, 0.5f, 1e-30f};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    base_call(&c);
    c.opt.label_smoothing = good[i];
    expect_ok("label_smoothing in [0, 1]", &c);
  }
  END();
}

static void test_bad_softcap(void **state) {
  (void)state;
  BEGIN();
  call c;
  float bad[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base_call(&c);
    c.opt.use_softcap = 1;
    c.opt.softcap = bad[i];
    char label[64];
    snprintf(label, sizeof label, "softcap %g", (double)bad[i]);
    expect_fail(label, &c, XENT_ERROR_BAD_SOFTCAP, "softcap");
  }
  /* Off: the value is not looked at. */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base_call(&c);
    c.opt.use_softcap = 0;
    c.opt.softcap = bad[i];
    expect_ok("softcap off with any value", &c);
  }
  base_call(&c);
  c.opt.use_softcap = 1;
  c.opt.softcap = 1e-3f;
  expect_ok("softcap 1e-3", &c);
  /* use_softcap is 0 or 1, nothing else. */
  const int flags[] = {2, -1, 100};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    base_call(&c);
    c.opt.use_softcap = flags[i];
    c.opt.softcap = 10.0f;
    char label[64];
    snprintf(label, sizeof label, "use_softcap %d", flags[i]);
    expect_fail(label, &c, XENT_ERROR_BAD_ARGUMENT, "use_softcap");
  }
  END();
}

/* empty_mean: the two rules, nothing else; each on a mean over no rows
 * (every target ignored, and no rows at all) with a zero gradient, while a
 * sum stays 0 and a mean over rows is the same under both. */
static void test_empty_mean(void **state) {
  (void)state;
  BEGIN();
  call c;
  const int bad[] = {2, -1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base_call(&c);
    c.opt.empty_mean = (xent_empty_mean)bad[i];
    expect_fail("empty_mean out of range", &c, XENT_ERROR_BAD_ENUM, "empty_mean");
  }
  int64_t ignored[ROWS];
  for (int rule = 0; rule < 2; rule++)
    for (int rows0 = 0; rows0 < 2; rows0++) {
      base_call(&c);
      c.opt.reduction = XENT_REDUCTION_MEAN;
      c.opt.empty_mean = rule ? XENT_EMPTY_MEAN_ZERO : XENT_EMPTY_MEAN_NAN;
      c.opt.lse_square_scale = 1e-3f;
      for (int r = 0; r < ROWS; r++) ignored[r] = c.opt.ignore_index;
      c.in.targets = ignored;
      c.in.target_type = XENT_INT64;
      c.out.token_accuracy = fx.acc;
      c.out.z_loss = fx.z;
      if (rows0) c.in.rows = 0;
      reset_buffers();
      xent_status st = run_call(&c, 1);
      const char *what = rows0 ? "no rows" : "every row ignored";
      if (st != XENT_OK) {
        report("empty mean, %s: status %d (%s)", what, (int)st, xent_last_error());
        continue;
      }
      const float got[3] = {fx.loss[0], fx.z[0], fx.acc[0]};
      const char *names[3] = {"loss", "z_loss", "token_accuracy"};
      for (int k = 0; k < 3; k++)
        if (rule ? got[k] != 0.0f : !isnan(got[k]) || xt_is_poison_f32(got[k]))
          report("empty mean rule %d, %s: %s %g, want %s", rule, what, names[k], (double)got[k],
                 rule ? "0" : "NaN");
      for (int i = 0; !rows0 && i < ROWS * VOCAB; i++)
        if (fx.logits[i] != 0.0f) {
          report("empty mean rule %d: gradient[%d] = %g, want 0", rule, i, (double)fx.logits[i]);
          break;
        }
    }
  reset_buffers();
  END();
}

/* What lse is for non-finite rows (xent.h, "Non-finite logits"): NaN for a
 * row holding a NaN or +inf, -inf for a row of nothing but -inf; the loss of
 * each is NaN. */
static void test_nonfinite_lse(void **state) {
  (void)state;
  BEGIN();
  float x[3][4] = {{1.0f, NAN, 0.0f, 2.0f},
                   {1.0f, INFINITY, 0.0f, 2.0f},
                   {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
  int64_t t[3] = {0, 0, 0};
  float loss[3], lse[3];
  xent_input in = {x, XENT_FLOAT32, 3, 4, 0, t, XENT_INT64, NULL};
  xent_options opt = xent_options_default();
  opt.reduction = XENT_REDUCTION_NONE;
  xent_output out = {loss, NULL, NULL, NULL, lse};
  xent_exec ex = xent_exec_default();
  assert_int_equal(xent_forward(&in, &opt, &out, &ex), XENT_OK);
  if (!isnan(lse[0]) || !isnan(lse[1]) || !(isinf(lse[2]) && lse[2] < 0))
    report("lse of non-finite rows: %g %g %g, want nan nan -inf", (double)lse[0],
           (double)lse[1], (double)lse[2]);
  for (int r = 0; r < 3; r++)
    if (!isnan(loss[r])) report("loss of non-finite row %d: %g, want NaN", r, (double)loss[r]);
  END();
}

static void test_bad_lse_square_scale(void **state) {
  (void)state;
  BEGIN();
  call c;
  float bad[] = {-1.0f, -1e-30f, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    base_call(&c);
    c.opt.lse_square_scale = bad[i];
    char label[64];
    snprintf(label, sizeof label, "lse_square_scale %g", (double)bad[i]);
    expect_fail(label, &c, XENT_ERROR_BAD_ARGUMENT, "lse_square_scale");
  }
  base_call(&c);
  c.opt.lse_square_scale = 1e-4f;
  expect_ok("lse_square_scale 1e-4", &c);
  END();
}

static void test_bad_weights(void **state) {
  (void)state;
  BEGIN();
  enum { V2 = 2000, R2 = 3 };
  float *logits = xt_alloc(R2 * V2 * sizeof(float));
  float *w = xt_alloc(V2 * sizeof(float));
  int64_t t[R2] = {5, 1999, 0};
  float loss[R2 + 1];
  assert_non_null(logits);
  assert_non_null(w);
  xt_rng rng = xt_rng_for("test_bad_weights");
  for (int i = 0; i < R2 * V2; i++) logits[i] = (float)xt_normal(&rng);
  struct {
    int index;
    float value;
    const char *index_s;
  } cases[] = {{1234, NAN, "1234"}, {0, INFINITY, "0"}, {V2 - 1, -INFINITY, "1999"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    for (int j = 0; j < V2; j++) w[j] = 1.0f;
    w[cases[i].index] = cases[i].value;
    for (int grad = 0; grad < 2; grad++) {
      float *before = xt_alloc(R2 * V2 * sizeof(float));
      assert_non_null(before);
      memcpy(before, logits, R2 * V2 * sizeof(float));
      xt_poison_f32(loss, R2 + 1);
      xent_input in = {logits, XENT_FLOAT32, R2, V2, 0, t, XENT_INT64, w};
      xent_options opt = xent_options_default();
      opt.reduction = XENT_REDUCTION_NONE;
      xent_output out = {loss, NULL, NULL, NULL, NULL};
      xent_exec ex = xent_exec_default();
      xent_status st = xt_forward(grad, &in, &opt, &out, &ex);
      const char *msg = xent_last_error();
      if (st != XENT_ERROR_BAD_WEIGHT)
        report("weights[%d] = %g: status %d, want XENT_ERROR_BAD_WEIGHT (%s)", cases[i].index,
               (double)cases[i].value, (int)st, msg);
      else if (!xt_mentions(msg, "weights") || !xt_mentions(msg, cases[i].index_s))
        report("weights[%d]: message \"%s\" does not name weights and the index", cases[i].index,
               msg);
      if (memcmp(before, logits, R2 * V2 * sizeof(float)) != 0)
        report("weights[%d]: logits written on error", cases[i].index);
      for (int r = 0; r <= R2; r++)
        if (!xt_is_poison_f32(loss[r])) {
          report("weights[%d]: loss written on error", cases[i].index);
          break;
        }
      xt_free(before);
    }
  }
  /* Two bad weights: the first is named. */
  for (int j = 0; j < V2; j++) w[j] = 1.0f;
  w[17] = NAN;
  w[1500] = INFINITY;
  {
    xent_input in = {logits, XENT_FLOAT32, R2, V2, 0, t, XENT_INT64, w};
    xent_options opt = xent_options_default();
    xent_output out = {loss, NULL, NULL, NULL, NULL};
    xent_exec ex = xent_exec_default();
    assert_int_equal(xent_forward(&in, &opt, &out, &ex), XENT_ERROR_BAD_WEIGHT);
    if (!xt_mentions(xent_last_error(), "17") || xt_mentions(xent_last_error(), "1500"))
      report("two bad weights: message \"%s\" should name index 17 only", xent_last_error());
  }
  xt_free(logits);
  xt_free(w);
  END();
}

static void test_misaligned_inputs(void **state) {
  (void)state;
  BEGIN();
  call c;
  base_call(&c);
  c.in.logits = (char *)fx.logits + 1;
  expect_fail("logits + 1 byte (fp32)", &c, XENT_ERROR_BAD_ARGUMENT, "logits");
  base_call(&c);
  c.in.logits = (char *)fx.logits + 2;
  expect_fail("logits + 2 bytes (fp32)", &c, XENT_ERROR_BAD_ARGUMENT, "logits");
  base_call(&c);
  c.in.logits = (char *)fx.logits + 1;
  c.in.dtype = XENT_BFLOAT16;
  expect_fail("logits + 1 byte (bf16)", &c, XENT_ERROR_BAD_ARGUMENT, "logits");
  base_call(&c);
  c.in.logits = (char *)fx.logits + 1;
  c.in.dtype = XENT_FLOAT16;
  expect_fail("logits + 1 byte (fp16)", &c, XENT_ERROR_BAD_ARGUMENT, "logits");
  base_call(&c);
  c.in.targets = (char *)fx.t64 + 4;
  expect_fail("int64 targets + 4 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "targets");
  base_call(&c);
  c.in.targets = (char *)fx.t32 + 2;
  c.in.target_type = XENT_INT32;
  expect_fail("int32 targets + 2 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "targets");
  base_call(&c);
  c.in.weights = (const float *)((const char *)fx.weights + 2);
  expect_fail("weights + 2 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "weights");
  /* Natural alignment is enough: a 2-byte dtype one element in. */
  base_call(&c);
  c.in.logits = (char *)fx.logits + 2;
  c.in.dtype = XENT_BFLOAT16;
  c.in.rows = 1;
  {
    /* Finite bf16 values there: write some. */
    uint16_t *h = (uint16_t *)fx.logits_orig;
    for (int j = 0; j < 2 * VOCAB + 2; j++) h[j] = xt_f32_to_bf16((float)(j % 5) - 2.0f);
    expect_ok("bf16 logits + 1 element", &c);
    xt_rng rng = xt_rng_for("test_api");
    for (int i = 0; i < NLOGITS; i++) fx.logits_orig[i] = (float)(3.0 * xt_normal(&rng));
  }
  END();
}

/* Each misaligned output is refused with a message naming that output. */
static void test_misaligned_outputs(void **state) {
  (void)state;
  BEGIN();
  call c;
  base_call(&c);
  c.out.loss = (float *)((char *)fx.loss + 2);
  expect_fail("loss + 2 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "loss");
  base_call(&c);
  c.out.z_loss = (float *)((char *)fx.z + 2);
  expect_fail("z_loss + 2 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "z_loss");
  base_call(&c);
  c.out.token_accuracy = (float *)((char *)fx.acc + 1);
  expect_fail("token_accuracy + 1 byte", &c, XENT_ERROR_BAD_ARGUMENT, "token_accuracy");
  base_call(&c);
  c.out.lse = (float *)((char *)fx.lse + 2);
  expect_fail("lse + 2 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "lse");
  base_call(&c);
  c.out.predicted = (int64_t *)((char *)fx.pred + 4);
  expect_fail("predicted + 4 bytes", &c, XENT_ERROR_BAD_ARGUMENT, "predicted");
  END();
}

static void test_bad_exec(void **state) {
  (void)state;
  BEGIN();
  call c;
  base_call(&c);
  c.ex.num_threads = -1;
  expect_fail("num_threads -1", &c, XENT_ERROR_BAD_ARGUMENT, "num_threads");
  base_call(&c);
  c.ex.backend = XENT_BACKEND_AUTO; /* which resolves to the CPU here */
  c.ex.num_threads = -1;
  expect_fail("num_threads -1 under AUTO", &c, XENT_ERROR_BAD_ARGUMENT, "num_threads");
  xent_info info;
  assert_int_equal(xent_get_info(&info), XENT_OK);
  base_call(&c);
  c.ex.backend = XENT_BACKEND_CUDA;
  if (!info.cuda_built) {
    expect_fail("CUDA backend, not built", &c, XENT_ERROR_UNSUPPORTED, NULL);
    c.ex.device = -1;
    expect_fail("CUDA backend, not built, device -1", &c, XENT_ERROR_UNSUPPORTED, NULL);
  } else {
    /* Host pointers given to the CUDA backend. */
    for (int grad = 0; grad < 2; grad++) {
      reset_buffers();
      xent_status st = run_call(&c, grad);
      if (st != XENT_ERROR_BAD_ARGUMENT && st != XENT_ERROR_UNSUPPORTED)
        report("host logits with backend CUDA: status %d (%s)", (int)st, xent_last_error());
      if (*changed_buffers()) report("host logits with backend CUDA: wrote%s", changed_buffers());
    }
    c.ex.device = -1;
    expect_fail("CUDA device -1", &c, XENT_ERROR_BAD_ARGUMENT, "device");
  }
  /* AUTO with host memory runs on the CPU. */
  base_call(&c);
  c.ex.backend = XENT_BACKEND_AUTO;
  expect_ok("AUTO with host pointers", &c);
  END();
}

/* ------------------------------------------------------------------------ */
/* rows == 0                                                                 */
/* ------------------------------------------------------------------------ */

static void test_rows_zero(void **state) {
  (void)state;
  BEGIN();
  xent_reduction reds[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM, XENT_REDUCTION_NONE};
  /* kind 1: bf16, 2: softcap (the calls that take per-thread scratch) */
  for (int kind = 0; kind < 3; kind++)
  for (int nullbufs = 0; nullbufs < 2; nullbufs++)
    for (int i = 0; i < 3; i++)
      for (int grad = 0; grad < 2; grad++) {
        call c;
        base_call(&c);
        c.in.rows = 0;
        c.opt.reduction = reds[i];
        c.opt.label_smoothing = 0.1f;
        c.opt.lse_square_scale = 1e-3f;
        if (kind == 1) c.in.dtype = XENT_BFLOAT16; /* no row is read */
        if (kind == 2) {
          c.opt.use_softcap = 1;
          c.opt.softcap = 20.0f;
        }
        if (nullbufs) { /* no logits or targets at all */
          c.in.logits = NULL;
          c.in.targets = NULL;
        }
        reset_buffers();
        xent_status st = run_call(&c, grad);
        const char *label = xt_reduction_name(reds[i]);
        if (st != XENT_OK) {
          report("rows 0 %s: status %d (%s)", label, (int)st, xent_last_error());
          continue;
        }
        if (memcmp(fx.logits, fx.logits_orig, NLOGITS * sizeof(float)))
          report("rows 0 %s: logits written", label);
        if (memcmp(fx.lse, fx.poison_f, NOUT * sizeof(float)))
          report("rows 0 %s: lse written", label);
        if (memcmp(fx.pred, fx.poison_i, NOUT * sizeof(int64_t)))
          report("rows 0 %s: predicted written", label);
        if (reds[i] == XENT_REDUCTION_NONE) {
          if (*changed_buffers()) report("rows 0 none: wrote%s", changed_buffers());
        } else {
          int mean = reds[i] == XENT_REDUCTION_MEAN;
          if (mean ? !isnan(fx.loss[0]) || xt_is_poison_f32(fx.loss[0]) : fx.loss[0] != 0.0f)
            report("rows 0 %s: loss %g, want %s", label, (double)fx.loss[0], mean ? "NaN" : "0");
          if (mean ? !isnan(fx.z[0]) || xt_is_poison_f32(fx.z[0]) : fx.z[0] != 0.0f)
            report("rows 0 %s: z_loss %g, want %s", label, (double)fx.z[0], mean ? "NaN" : "0");
          if (!isnan(fx.acc[0]) || xt_is_poison_f32(fx.acc[0]))
            report("rows 0 %s: token_accuracy %g, want NaN", label, (double)fx.acc[0]);
          if (!xt_is_poison_f32(fx.loss[1]) || !xt_is_poison_f32(fx.z[1]) ||
              !xt_is_poison_f32(fx.acc[1]))
            report("rows 0 %s: more than one value written", label);
        }
      }
  /* none with rows 0 may pass no loss buffer at all. */
  call c;
  base_call(&c);
  c.in.rows = 0;
  c.out.loss = NULL;
  expect_ok("rows 0 none, loss NULL", &c);
  if (*changed_buffers()) report("rows 0 none, loss NULL: wrote%s", changed_buffers());
  /* The backward over zero rows does nothing. */
  float go = 2.0f;
  xent_exec ex = xent_exec_default();
  reset_buffers();
  if (xent_backward(fx.logits, XENT_FLOAT32, 0, VOCAB, 0, &go, 1, &ex) != XENT_OK)
    report("backward rows 0: %s", xent_last_error());
  if (xent_backward(NULL, XENT_FLOAT32, 0, VOCAB, 0, &go, 1, &ex) != XENT_OK)
    report("backward rows 0, grad NULL: %s", xent_last_error());
  if (xent_backward(NULL, XENT_FLOAT32, 0, VOCAB, 0, &go, 0, &ex) != XENT_OK)
    report("backward rows 0, count 0 (= rows): %s", xent_last_error());
  if (xent_backward_scale(fx.logits, XENT_FLOAT32, 0, VOCAB, 0, 3.0f, &ex) != XENT_OK)
    report("backward_scale rows 0: %s", xent_last_error());
  if (*changed_buffers()) report("backward rows 0 wrote%s", changed_buffers());
  END();
}

/* ------------------------------------------------------------------------ */
/* Backward arguments                                                        */
/* ------------------------------------------------------------------------ */

typedef struct bcall {
  void *grad;
  xent_dtype dtype;
  int64_t rows, vocab, stride;
  const float *go;
  int64_t count;
  float scale;
  int null_ex;
  xent_exec ex;
} bcall;

static void base_bcall(bcall *b, const float *go) {
  memset(b, 0, sizeof *b);
  b->grad = fx.logits;
  b->dtype = XENT_FLOAT32;
  b->rows = ROWS;
  b->vocab = VOCAB;
  b->stride = 0;
  b->go = go;
  b->count = 1;
  b->scale = 0.5f;
  b->ex = xent_exec_default();
  b->ex.backend = XENT_BACKEND_CPU;
}

/* which: 0 xent_backward, 1 xent_backward_scale(scale), 2 xent_backward_scale(1). */
static void expect_bfail(const char *label, const bcall *b, int which, xent_status want,
                         const char *word) {
  reset_buffers();
  const xent_exec *ex = b->null_ex ? NULL : &b->ex;
  xent_status st;
  const char *fn;
  if (which == 0) {
    st = xent_backward(b->grad, b->dtype, b->rows, b->vocab, b->stride, b->go, b->count, ex);
    fn = "xent_backward";
  } else {
    st = xent_backward_scale(b->grad, b->dtype, b->rows, b->vocab, b->stride,
                             which == 1 ? b->scale : 1.0f, ex);
    fn = which == 1 ? "xent_backward_scale" : "xent_backward_scale(1)";
  }
  const char *msg = xent_last_error();
  if (st != want)
    report("%s: %s returned %d (%s), want %d; \"%s\"", label, fn, (int)st, xent_status_string(st),
           (int)want, msg);
  else if (word && !xt_mentions(msg, word))
    report("%s: %s: message \"%s\" does not name \"%s\"", label, fn, msg, word);
  if (*changed_buffers()) report("%s: %s failed but wrote:%s", label, fn, changed_buffers());
}

static void expect_bfail_all(const char *label, const bcall *b, xent_status want,
                             const char *word) {
  for (int which = 0; which < 3; which++) expect_bfail(label, b, which, want, word);
}

static void test_backward_errors(void **state) {
  (void)state;
  BEGIN();
  float *go = xt_alloc((ROWS + 4) * sizeof(float));
  assert_non_null(go);
  for (int i = 0; i < ROWS + 4; i++) go[i] = 0.5f;
  bcall b;

  base_bcall(&b, go);
  b.grad = NULL;
  expect_bfail_all("grad NULL", &b, XENT_ERROR_NULL_POINTER, "grad");
  base_bcall(&b, go);
  b.null_ex = 1;
  expect_bfail_all("exec NULL", &b, XENT_ERROR_NULL_POINTER, "exec");
  base_bcall(&b, NULL);
  expect_bfail("grad_output NULL", &b, 0, XENT_ERROR_NULL_POINTER, "grad_output");
  int64_t bad_counts[] = {0, 2, ROWS + 1, -1, ROWS - 1};
  for (int i = 0; i < 5; i++) {
    base_bcall(&b, go);
    b.count = bad_counts[i];
    char label[64];
    snprintf(label, sizeof label, "grad_output_count %" PRId64, bad_counts[i]);
    expect_bfail(label, &b, 0, XENT_ERROR_BAD_ARGUMENT, "grad_output_count");
  }
  base_bcall(&b, go);
  b.count = ROWS;
  reset_buffers();
  if (xent_backward(b.grad, b.dtype, b.rows, b.vocab, 0, go, ROWS, &b.ex) != XENT_OK)
    report("grad_output_count == rows: %s", xent_last_error());

  base_bcall(&b, go);
  b.grad = (char *)fx.logits + 2;
  expect_bfail_all("grad + 2 bytes (fp32)", &b, XENT_ERROR_BAD_ARGUMENT, "grad");
  base_bcall(&b, go);
  b.grad = (char *)fx.logits + 1;
  b.dtype = XENT_BFLOAT16;
  expect_bfail_all("grad + 1 byte (bf16)", &b, XENT_ERROR_BAD_ARGUMENT, "grad");
  base_bcall(&b, (const float *)((const char *)go + 2));
  expect_bfail("grad_output + 2 bytes", &b, 0, XENT_ERROR_BAD_ARGUMENT, "grad_output");

  base_bcall(&b, go);
  b.dtype = (xent_dtype)3;
  expect_bfail_all("bad dtype", &b, XENT_ERROR_BAD_ENUM, "dtype");
  base_bcall(&b, go);
  b.rows = -1;
  expect_bfail_all("rows -1", &b, XENT_ERROR_BAD_SHAPE, "rows");
  base_bcall(&b, go);
  b.vocab = 0;
  expect_bfail_all("vocab 0", &b, XENT_ERROR_BAD_SHAPE, "vocab");
  base_bcall(&b, go);
  b.vocab = (int64_t)INT32_MAX + 1;
  expect_bfail_all("vocab 2^31", &b, XENT_ERROR_BAD_SHAPE, "vocab");
  base_bcall(&b, go);
  b.stride = VOCAB - 1;
  expect_bfail_all("row_stride < vocab", &b, XENT_ERROR_BAD_STRIDE, "row_stride");
  base_bcall(&b, go);
  b.stride = -3;
  expect_bfail_all("row_stride -3", &b, XENT_ERROR_BAD_STRIDE, "row_stride");
  base_bcall(&b, go);
  b.rows = (int64_t)1 << 40;
  b.stride = (int64_t)1 << 30;
  expect_bfail_all("extent overflow", &b, XENT_ERROR_BAD_STRIDE, "row_stride");
  base_bcall(&b, go);
  b.ex.backend = (xent_backend)9;
  expect_bfail_all("bad backend", &b, XENT_ERROR_BAD_ENUM, "backend");
  base_bcall(&b, go);
  b.ex.num_threads = -2;
  /* xent_backward_scale(1) has nothing to run: num_threads is still checked. */
  expect_bfail_all("num_threads -2", &b, XENT_ERROR_BAD_ARGUMENT, "num_threads");
  xt_free(go);
  END();
}

int main(void) {
  xt_base_seed();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_version_and_info),
      cmocka_unit_test(test_status_strings),
      cmocka_unit_test(test_last_error_per_thread),
      cmocka_unit_test(test_workspace_size),
      cmocka_unit_test(test_null_pointers),
      cmocka_unit_test(test_bad_shapes),
      cmocka_unit_test(test_bad_enums),
      cmocka_unit_test(test_bad_targets_int32),
      cmocka_unit_test(test_bad_targets_int64),
      cmocka_unit_test(test_ignore_index_exempt),
      cmocka_unit_test(test_bad_label_smoothing),
      cmocka_unit_test(test_bad_softcap),
      cmocka_unit_test(test_bad_lse_square_scale),
      cmocka_unit_test(test_bad_weights),
      cmocka_unit_test(test_misaligned_inputs),
      cmocka_unit_test(test_misaligned_outputs),
      cmocka_unit_test(test_bad_exec),
      cmocka_unit_test(test_rows_zero),
      cmocka_unit_test(test_empty_mean),
      cmocka_unit_test(test_nonfinite_lse),
      cmocka_unit_test(test_backward_errors),
  };
  return cmocka_run_group_tests(tests, fixture_setup, fixture_teardown);
}
