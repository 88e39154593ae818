/*
 * test_vp.c - the vocabulary-parallel calls: a problem's logits split into
 * P shards of uneven widths in one process, each shard's records computed,
 * gathered in rank order, and each shard's outputs and gradient written in
 * place over the same buffer; the result must match the float64 reference
 * of the whole vocabulary (xt_check: outputs, gradient, padding) and every
 * rank's outputs the same bits. CPU always; CUDA with a GPU (skipped
 * otherwise).
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

#ifdef XENT_TEST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "check.h"
#include "reference.h"
#include "xent.h"
#include "xent_experimental.h"

static long g_cases;
/* Experimental settings for the statistics calls alone (the segment
 * kernel's test: the forward has no segment kernel); NULL: none. */
static const xent_experimental *g_stats_settings;

static int have_gpu(void) {
#ifdef XENT_TEST_HAVE_CUDA
  int n = 0;
  int ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
#else
  return 0;
#endif
}

/* Shard widths for P ranks over V: uneven (the first ranks wider). */
static void split(int64_t V, int P, int64_t *off, int64_t *wid) {
  int64_t o = 0;
  for (int p = 0; p < P; p++) {
    wid[p] = V / P + (p < V % P ? 1 : 0) + (p == 0 && P > 1 && V > P + 3 ? 3 : 0) -
             (p == P - 1 && P > 1 && V > P + 3 ? 3 : 0);
    off[p] = o;
    o += wid[p];
  }
}

typedef struct bufs {
  void *alloc, *targets;
  float *weights, *records, *gathered;
  float *loss[8], *z[8], *acc[8], *lse[8];
  int64_t *pred[8];
} bufs;

/* Run the P shards on `cuda` (0: host buffers) over the problem; the
 * outputs of rank 0 go to ob, the gradient over pb's buffer (alloc_after). */
static long run_shards(xt_problem *pb, xt_outbuf *ob, int P, int cuda, void *alloc_after) {
  const xt_case *c = &pb->c;
  const int64_t rows = c->rows, V = c->vocab, S = pb->stride;
  const size_t es = pb->esize;
  int64_t off[8], wid[8];
  split(V, P, off, wid);
  xent_options opt = xt_case_options(c);
  xent_output probe = xt_outbuf_view(ob, c);
  const int R = xent_vp_record_floats(&opt, pb->weights, &probe);
  const size_t rec_bytes = (size_t)(rows > 0 ? rows : 1) * (size_t)R * 4;
  const int64_t count = ob->count;
  bufs b;
  memset(&b, 0, sizeof b);
  const size_t alloc_bytes = pb->alloc_elems * es, tbytes = (size_t)(rows > 0 ? rows : 1) * 8;
  xent_exec ex = xent_exec_default();
  ex.backend = cuda ? XENT_BACKEND_CUDA : XENT_BACKEND_CPU;
  long errs = 0;
#define ALLOC(ptr, n) (cuda ? (void)CKA(&(ptr), n) : (void)((ptr) = xt_alloc(n)))
#ifdef XENT_TEST_HAVE_CUDA
#define CKA(pp, n) cudaMalloc((void **)(pp), (n))
#define PUT(d, h, n) (cuda ? (void)cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) : (void)memcpy(d, h, n))
#define GET(h, d, n) (cuda ? (void)cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) : (void)memcpy(h, d, n))
#define FREE(p) (cuda ? (void)cudaFree(p) : xt_free(p))
#else
#define CKA(pp, n) (*(pp) = NULL, 0)
#define PUT(d, h, n) memcpy(d, h, n)
#define GET(h, d, n) memcpy(h, d, n)
#define FREE(p) xt_free(p)
#endif
  ALLOC(b.alloc, alloc_bytes);
  ALLOC(b.targets, tbytes);
  ALLOC(b.records, rec_bytes);
  ALLOC(b.gathered, rec_bytes * (size_t)P);
  if (pb->weights) ALLOC(b.weights, (size_t)V * 4);
  PUT(b.alloc, pb->alloc, alloc_bytes);
  PUT(b.targets, pb->targets, tbytes);
  if (pb->weights) PUT(b.weights, pb->weights, (size_t)V * 4);
  for (int p = 0; p < P; p++) {
    ALLOC(b.loss[p], (size_t)(count + 1) * 4);
    ALLOC(b.z[p], (size_t)(count + 1) * 4);
    ALLOC(b.acc[p], (size_t)(count + 1) * 4);
    ALLOC(b.lse[p], (size_t)(rows + 1) * 4);
    ALLOC(b.pred[p], (size_t)(rows + 1) * 8);
    PUT(b.loss[p], ob->loss, (size_t)(count + 1) * 4);
    PUT(b.z[p], ob->z, (size_t)(count + 1) * 4);
    PUT(b.acc[p], ob->acc, (size_t)(count + 1) * 4);
    PUT(b.lse[p], ob->lse, (size_t)(rows + 1) * 4);
    PUT(b.pred[p], ob->pred, (size_t)(rows + 1) * 8);
  }
  const char *logits0 = (const char *)b.alloc + ((const char *)pb->logits - (const char *)pb->alloc);
  /* step 1 on every rank, step 2 (the gather) by copying */
  const xent_experimental settings = xent_experimental_get();
  if (g_stats_settings && xent_experimental_set(g_stats_settings) != XENT_OK) errs++;
  for (int p = 0; p < P && !errs; p++) {
    xent_input in = {(char *)logits0 + (size_t)off[p] * es, c->dtype, rows, wid[p], S,
                     b.targets, c->ttype, b.weights};
    xent_output out = xt_output_view(c, b.loss[p], b.z[p], b.acc[p], b.lse[p], b.pred[p]);
    xent_status st = xent_vp_stats(&in, V, off[p], &opt, &out, b.records, &ex);
    if (st) {
      fprintf(stderr, "  xent_vp_stats rank %d: %s\n", p, xent_last_error());
      errs++;
      break;
    }
#ifdef XENT_TEST_HAVE_CUDA
    if (cuda) cudaMemcpy((char *)b.gathered + rec_bytes * (size_t)p, b.records, rec_bytes,
                         cudaMemcpyDeviceToDevice);
    else
#endif
      memcpy((char *)b.gathered + rec_bytes * (size_t)p, b.records, rec_bytes);
  }
  xent_experimental_set(&settings);
  /* step 3 on every rank */
  for (int p = 0; p < P && !errs; p++) {
    xent_input in = {(char *)logits0 + (size_t)off[p] * es, c->dtype, rows, wid[p], S,
                     b.targets, c->ttype, b.weights};
    xent_output out = xt_output_view(c, b.loss[p], b.z[p], b.acc[p], b.lse[p], b.pred[p]);
    xent_status st = xent_vp_forward(&in, V, off[p], &opt, b.gathered, P, &out, c->grad, &ex);
    if (st) {
      fprintf(stderr, "  xent_vp_forward rank %d: %s\n", p, xent_last_error());
      errs++;
    }
  }
#ifdef XENT_TEST_HAVE_CUDA
  if (cuda) cudaDeviceSynchronize();
#endif
  if (!errs) {
    GET(alloc_after, b.alloc, alloc_bytes);
    GET(ob->loss, b.loss[0], (size_t)(count + 1) * 4);
    GET(ob->z, b.z[0], (size_t)(count + 1) * 4);
    GET(ob->acc, b.acc[0], (size_t)(count + 1) * 4);
    GET(ob->lse, b.lse[0], (size_t)(rows + 1) * 4);
    GET(ob->pred, b.pred[0], (size_t)(rows + 1) * 8);
    /* every rank's outputs: the same bits */
    float *tmp = (float *)xt_alloc((size_t)(rows + 2) * 8);
    for (int p = 1; p < P; p++) {
      GET(tmp, b.loss[p], (size_t)(count + 1) * 4);
      if (memcmp(tmp, ob->loss, (size_t)count * 4)) {
        fprintf(stderr, "  rank %d's loss differs from rank 0's\n", p);
        errs++;
      }
      GET(tmp, b.lse[p], (size_t)rows * 4);
      if (memcmp(tmp, ob->lse, (size_t)rows * 4)) {
        fprintf(stderr, "  rank %d's lse differs from rank 0's\n", p);
        errs++;
      }
    }
    xt_free(tmp);
  }
  FREE(b.alloc);
  FREE(b.targets);
  FREE(b.records);
  FREE(b.gathered);
  if (b.weights) FREE(b.weights);
  for (int p = 0; p < P; p++) {
    FREE(b.loss[p]);
    FREE(b.z[p]);
    FREE(b.acc[p]);
    FREE(b.lse[p]);
    FREE(b.pred[p]);
  }
  return errs;
}

/* A case over P shards; mask_last: every logit of the last shard -inf but
 * the targets (a shard whose maximum is -inf, some rows' x' - m = -inf - -inf
 * there). */
static long run_case_masked(const xt_case *c, int P, int cuda, xt_rng *rng, int mask_last) {
  char desc[600], cd[500];
  xt_case_desc(c, cd, sizeof cd);
  snprintf(desc, sizeof desc, "%s P=%d %s%s", cuda ? "cuda" : "cpu", P, cd,
           mask_last ? " last shard -inf" : "");
  xt_problem pb;
  xt_outbuf ob;
  if (xt_problem_make(&pb, c, rng) != 0 || xt_outbuf_make(&ob, c) != 0) return 1;
  if (mask_last) {
    int64_t off[8], wid[8];
    split(c->vocab, P, off, wid);
    for (int64_t r = 0; r < c->rows; r++)
      for (int64_t j = off[P - 1]; j < c->vocab; j++)
        if (j != pb.t64[r]) xt_problem_set(&pb, r, j, -INFINITY);
    if (xt_problem_rereference(&pb) != 0) return 1;
  }
  xt_outbuf_poison(&ob);
  void *after = xt_alloc(pb.alloc_elems * pb.esize);
  long errs = run_shards(&pb, &ob, P, cuda, after);
  if (!errs) errs = xt_check(&pb, &ob, after, desc);
  else fprintf(stderr, "  [%s] failed to run\n", desc);
  g_cases++;
  xt_free(after);
  xt_outbuf_free(&ob);
  xt_problem_free(&pb);
  return errs;
}

static long run_case(const xt_case *c, int P, int cuda, xt_rng *rng) {
  return run_case_masked(c, P, cuda, rng, 0);
}

/* Plain calls (no class weights, softcap, smoothing, token accuracy or
 * predicted tokens), which the CUDA backend gives a warp per row: row
 * counts that fill no whole block, shard rows off the 16-byte grid, one
 * round of a warp's loads and many, every row ignored, a shard of -inf. */
static long plain_sweep(int cuda, xt_rng *rng) {
  const xent_dtype dts[] = {XENT_FLOAT32, XENT_BFLOAT16, XENT_FLOAT16};
  const xent_reduction reds[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM, XENT_REDUCTION_NONE};
  const int64_t widths[] = {64, 1000, 7128, 20000};
  const int ps[] = {1, 2, 3, 4, 7};
  long errs = 0;
  for (int i = 0; i < 12; i++) {
    xt_case c = xt_case_default(dts[i % 3], 5 + 13 * i, widths[i % 4]);
    c.want_acc = c.want_pred = 0;
    c.reduction = reds[(i / 3) % 3];
    c.s = i % 2 ? 0.02 : 0.0;
    if (i % 4 == 1) c.stride = c.vocab + 3, c.offset = 1;
    c.ignore_frac = i % 5 == 4 ? 1.0 : 0.2;
    errs += run_case_masked(&c, ps[i % 5], cuda, rng, i % 6 == 5);
  }
  return errs;
}

static long sweep(int cuda, const char *name) {
  xt_rng rng = xt_rng_for(name);
  const xent_dtype dts[] = {XENT_FLOAT32, XENT_BFLOAT16, XENT_FLOAT16};
  const xent_reduction reds[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM, XENT_REDUCTION_NONE};
  const int ps[] = {1, 2, 3, 4, 7};
  long errs = 0;
  int k = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++)
      for (int combo = 0; combo < XT_FEATURE_COMBOS; combo++, k++) {
        xt_case c = xt_case_default(dts[d], 17 + (k % 4) * 9, 600 + 37 * (k % 7));
        c.reduction = reds[r];
        xt_feature_combo(&c, combo);
        xt_vary_outputs(&c, k);
        errs += run_case(&c, ps[k % 5], cuda, &rng);
      }
  /* every row ignored; a single rank holding one column; no gradient */
  xt_case c = xt_case_default(XENT_BFLOAT16, 12, 64);
  c.ignore_frac = 1.0;
  errs += run_case(&c, 4, cuda, &rng);
  c.empty_zero = 1;
  errs += run_case(&c, 3, cuda, &rng);
  c = xt_case_default(XENT_FLOAT32, 9, 5);
  errs += run_case(&c, 5, cuda, &rng);
  /* shards wider than one round of a block's loads (the CUDA statistics pass
   * skips their ignored rows after the first round; narrower ones are read,
   * then zeroed) */
  c = xt_case_default(XENT_FLOAT32, 16, 20000);
  c.ignore_frac = 0.3;
  errs += run_case(&c, 2, cuda, &rng);
  c = xt_case_default(XENT_BFLOAT16, 16, 20000);
  c.ignore_frac = 0.3;
  errs += run_case(&c, 2, cuda, &rng);
  c = xt_case_default(XENT_FLOAT32, 30, 1000);
  c.grad = 0;
  xt_everything(&c);
  errs += run_case(&c, 3, cuda, &rng);
  /* a shard of nothing but -inf under weighted smoothing: +inf losses, as on
   * one device (xent.h, "Non-finite logits") */
  for (int d = 0; d < 2; d++)
    for (int r = 0; r < 2; r++) {
      c = xt_case_default(d ? XENT_FLOAT16 : XENT_FLOAT32, 11, 300);
      c.reduction = r ? XENT_REDUCTION_NONE : XENT_REDUCTION_MEAN;
      c.weighted = 1, c.alpha = 0.1;
      errs += run_case_masked(&c, 3, cuda, &rng, 1);
    }
  return errs + plain_sweep(cuda, &rng);
}

static void test_cpu_vp(void **state) {
  (void)state;
  assert_int_equal(sweep(0, "test_cpu_vp"), 0);
}

static void test_cuda_vp(void **state) {
  (void)state;
  if (!have_gpu()) skip();
  assert_int_equal(sweep(1, "test_cuda_vp"), 0);
}

#ifdef XENT_TEST_HAVE_CUDA
static int set_path(xent_experimental_path path) {
  xent_experimental e = XENT_EXPERIMENTAL_INIT;
  e.forward.path = path;
  e.forward.threads = 256; /* a forced path names them; the vocabulary-parallel kernels take 256 */
  return xent_experimental_set(&e) == XENT_OK;
}
#endif

/* The block per row for every call (the experimental forward path
 * TWO_READ), where the launch table gives the plain calls a warp per row. */
static void test_cuda_vp_block_rows(void **state) {
  (void)state;
  if (!have_gpu()) skip();
#ifdef XENT_TEST_HAVE_CUDA
  assert_true(set_path(XENT_EXPERIMENTAL_TWO_READ));
  const long errs = sweep(1, "test_cuda_vp_block_rows");
  xent_experimental_set(NULL);
  assert_int_equal(errs, 0);
#endif
}

/* The warp per row forced (WARP_ROW): the plain calls run; a call that
 * needs the arg-max (token accuracy) or smoothing is refused, not run by
 * another kernel. */
static void test_cuda_vp_warp_rows(void **state) {
  (void)state;
  if (!have_gpu()) skip();
#ifdef XENT_TEST_HAVE_CUDA
  xt_rng rng = xt_rng_for("test_cuda_vp_warp_rows");
  assert_true(set_path(XENT_EXPERIMENTAL_WARP_ROW));
  long errs = plain_sweep(1, &rng);
  xt_case c = xt_case_default(XENT_BFLOAT16, 20, 3000);
  c.want_pred = 0;
  c.alpha = 0.1;
  const long refused = run_case(&c, 2, 1, &rng);
  const int named = xt_mentions(xent_last_error(), "WARP_ROW");
  xent_experimental_set(NULL);
  assert_int_equal(errs, 0);
  assert_int_equal(refused, 1);
  assert_true(named);
#endif
}

/* The segment statistics kernel (a block per row, every load issued at
 * once) forced for the statistics at each of its shapes, on plain calls
 * whose widest shard fills most of a block's loads: fp32, bf16 and fp16,
 * rows off the 16-byte grid, ignored and -inf rows, 1 to 7 ranks; a shard
 * wider than the block's loads and a call with label smoothing refused,
 * with the path named. */
static void test_cuda_vp_segment_rows(void **state) {
  (void)state;
  if (!have_gpu()) skip();
#ifdef XENT_TEST_HAVE_CUDA
  xt_rng rng = xt_rng_for("test_cuda_vp_segment_rows");
  const xent_dtype dts[] = {XENT_FLOAT32, XENT_BFLOAT16, XENT_FLOAT16};
  const int shapes[][2] = {{64, 4}, {128, 8}, {256, 8}, {64, 8}}; /* threads, vecs */
  const int ps[] = {1, 2, 3, 4, 7};
  xent_experimental e = XENT_EXPERIMENTAL_INIT;
  e.forward.path = XENT_EXPERIMENTAL_SEGMENT;
  long errs = 0;
  for (int i = 0; i < 12; i++) {
    e.forward.threads = shapes[i % 4][0];
    e.forward.vecs = shapes[i % 4][1];
    const xent_dtype dt = dts[i % 3];
    const int64_t per_vec = dt == XENT_FLOAT32 ? 4 : 8, P = ps[i % 5];
    /* the widest shard (V / P + 4 with split's skew) one vector short of the block's loads */
    const int64_t fill = (int64_t)e.forward.threads * e.forward.vecs * per_vec - per_vec;
    xt_case c = xt_case_default(dt, 5 + 13 * i, P * (fill - 5) - (int64_t)(i % 3));
    c.want_acc = c.want_pred = 0;
    c.reduction = i % 3 == 0 ? XENT_REDUCTION_MEAN : i % 3 == 1 ? XENT_REDUCTION_SUM
                                                                : XENT_REDUCTION_NONE;
    if (i % 4 == 1) c.stride = c.vocab + 3, c.offset = 1;
    c.ignore_frac = i % 5 == 4 ? 1.0 : 0.2;
    g_stats_settings = &e;
    errs += run_case_masked(&c, (int)P, 1, &rng, i % 6 == 5);
  }
  /* refusals: a shard one vector past the block's loads; smoothing */
  e.forward.threads = 64;
  e.forward.vecs = 4;
  xt_case c = xt_case_default(XENT_BFLOAT16, 9, 64 * 4 * 8 + 1);
  c.want_acc = c.want_pred = 0;
  const long too_wide = run_case(&c, 1, 1, &rng);
  const int named_wide = xt_mentions(xent_last_error(), "SEGMENT");
  c = xt_case_default(XENT_BFLOAT16, 9, 1000);
  c.want_acc = c.want_pred = 0;
  c.alpha = 0.1;
  const long smoothing = run_case(&c, 2, 1, &rng);
  const int named_smoothing = xt_mentions(xent_last_error(), "SEGMENT");
  g_stats_settings = NULL;
  assert_int_equal(errs, 0);
  assert_int_equal(too_wide, 1);
  assert_true(named_wide);
  assert_int_equal(smoothing, 1);
  assert_true(named_smoothing);
#endif
}

static void test_vp_errors(void **state) {
  (void)state;
  float logits[4 * 10] = {0}, records[4 * 8], loss[4];
  int64_t t[4] = {1, 2, 3, 9};
  xent_input in = {logits, XENT_FLOAT32, 4, 5, 10, t, XENT_INT64, NULL};
  xent_options opt = xent_options_default();
  xent_output out = {loss, NULL, NULL, NULL, NULL};
  xent_exec ex = xent_exec_default();
  for (int i = 0; i < 32; i++) records[i] = -7.0f;
  assert_int_equal(xent_vp_stats(&in, 4, 0, &opt, &out, records, &ex), XENT_ERROR_BAD_SHAPE);
  assert_int_equal(xent_vp_stats(&in, 10, 6, &opt, &out, records, &ex), XENT_ERROR_BAD_SHAPE);
  assert_int_equal(xent_vp_stats(&in, 10, -1, &opt, &out, records, &ex), XENT_ERROR_BAD_SHAPE);
  t[3] = 10; /* outside the global V */
  assert_int_equal(xent_vp_stats(&in, 10, 5, &opt, &out, records, &ex), XENT_ERROR_BAD_TARGET);
  assert_true(xt_mentions(xent_last_error(), "3"));
  /* deferred on the CPU: checked on the host at once, in either step, the
   * error returned by the call (xent.h: every rank holds the same targets,
   * so every rank stops at step 1) */
  opt.target_check = XENT_TARGETS_DEFERRED;
  assert_int_equal(xent_vp_stats(&in, 10, 5, &opt, &out, records, &ex), XENT_ERROR_BAD_TARGET);
  assert_true(xt_mentions(xent_last_error(), "3"));
  assert_int_equal(xent_vp_forward(&in, 10, 5, &opt, records, 1, &out, 1, &ex),
                   XENT_ERROR_BAD_TARGET);
  t[3] = 9;
  opt.reduction = XENT_REDUCTION_NONE; /* deferred mode writes NaN into a reduction */
  assert_int_equal(xent_vp_stats(&in, 10, 5, &opt, &out, records, &ex), XENT_ERROR_BAD_ARGUMENT);
  opt = xent_options_default();
  assert_int_equal(xent_vp_forward(&in, 10, 5, &opt, records, 0, &out, 1, &ex),
                   XENT_ERROR_BAD_ARGUMENT);
  for (int i = 0; i < 32; i++) assert_true(records[i] == -7.0f); /* nothing written */
  for (int i = 0; i < 40; i++) assert_true(logits[i] == 0.0f);
}

#ifdef XENT_TEST_HAVE_CUDA
/* Deferred mode on the device, two shards of a 6 x 40 fp32 problem: with
 * good targets the same bits as the checked mode; with a bad one both
 * steps return XENT_OK (every rank reaches its collective), the loss is NaN,
 * both shards' gradients are zero, and the verdict names the row. */
static long deferred_case(int bad, xent_verdict *verdict[2], float *loss_out, float *grad_out,
                          xent_target_check mode, xent_status verdict_st[2]) {
  enum { ROWS = 6, V = 40, W0 = 23 };
  float h[ROWS * V];
  int64_t t[ROWS] = {0, 39, 22, 23, 5, -100};
  xt_rng rng = xt_rng_for("test_cuda_vp_deferred");
  for (int i = 0; i < ROWS * V; i++) h[i] = (float)(xt_uniform(&rng) * 8.0 - 4.0);
  if (bad) t[3] = V;
  float *x, *rec, *gat, *loss;
  int64_t *dt;
  cudaMalloc((void **)&x, sizeof h);
  cudaMalloc((void **)&dt, sizeof t);
  cudaMalloc((void **)&rec, ROWS * 4 * 4);
  cudaMalloc((void **)&gat, 2 * ROWS * 4 * 4);
  cudaMalloc((void **)&loss, 4);
  cudaMemcpy(x, h, sizeof h, cudaMemcpyHostToDevice);
  cudaMemcpy(dt, t, sizeof t, cudaMemcpyHostToDevice);
  cudaMemset(loss, 0x7f, 4);
  xent_options opt = xent_options_default();
  opt.target_check = mode;
  xent_output out = {loss, NULL, NULL, NULL, NULL};
  xent_exec ex = xent_exec_default();
  ex.backend = XENT_BACKEND_CUDA;
  const int64_t off[2] = {0, W0}, wid[2] = {W0, V - W0};
  long errs = 0;
  for (int p = 0; p < 2; p++) {
    xent_input in = {x + off[p], XENT_FLOAT32, ROWS, wid[p], V, dt, XENT_INT64, NULL};
    if (xent_vp_stats(&in, V, off[p], &opt, &out, rec, &ex)) {
      fprintf(stderr, "  deferred stats rank %d: %s\n", p, xent_last_error());
      errs++;
    }
    cudaMemcpy(gat + p * ROWS * 4, rec, ROWS * 4 * 4, cudaMemcpyDeviceToDevice);
  }
  for (int p = 0; p < 2; p++) {
    xent_input in = {x + off[p], XENT_FLOAT32, ROWS, wid[p], V, dt, XENT_INT64, NULL};
    ex.verdict = verdict[p]; /* each rank its own, as each process has */
    if (xent_vp_forward(&in, V, off[p], &opt, gat, 2, &out, 1, &ex)) {
      fprintf(stderr, "  deferred forward rank %d: %s\n", p, xent_last_error());
      errs++;
    }
  }
  for (int p = 1; p >= 0; p--) /* rank 0's message last, for xent_last_error() */
    verdict_st[p] = mode == XENT_TARGETS_DEFERRED ? xent_verdict_wait(verdict[p]) : XENT_OK;
  cudaMemcpy(loss_out, loss, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(grad_out, x, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(x);
  cudaFree(dt);
  cudaFree(rec);
  cudaFree(gat);
  cudaFree(loss);
  return errs;
}
#endif

static void test_cuda_vp_deferred(void **state) {
  (void)state;
  if (!have_gpu()) skip();
#ifdef XENT_TEST_HAVE_CUDA
  xent_verdict *v[2] = {NULL, NULL};
  assert_int_equal(xent_verdict_create(&v[0]), XENT_OK);
  assert_int_equal(xent_verdict_create(&v[1]), XENT_OK);
  float la, lb, ga[240], gb[240];
  xent_status sa[2], sb[2];
  /* good targets: the checked mode's bits */
  assert_int_equal(deferred_case(0, v, &la, ga, XENT_TARGETS_CHECKED, sa), 0);
  assert_int_equal(deferred_case(0, v, &lb, gb, XENT_TARGETS_DEFERRED, sb), 0);
  assert_int_equal(sb[0], XENT_OK);
  assert_int_equal(sb[1], XENT_OK);
  assert_true(la == lb && la > 0.0f);
  assert_memory_equal(ga, gb, sizeof ga);
  /* a bad target: queued without error, rejected on the device by every rank */
  assert_int_equal(deferred_case(1, v, &lb, gb, XENT_TARGETS_DEFERRED, sb), 0);
  assert_int_equal(sb[0], XENT_ERROR_BAD_TARGET);
  assert_int_equal(sb[1], XENT_ERROR_BAD_TARGET);
  assert_true(xt_mentions(xent_last_error(), "3"));
  assert_true(lb != lb);
  for (int i = 0; i < 240; i++) assert_true(gb[i] == 0.0f);
  /* deferred without a verdict: refused before anything is written */
  float *x, *rec;
  int64_t *dt, t[2] = {0, 1};
  cudaMalloc((void **)&x, 8 * 4);
  cudaMalloc((void **)&rec, 2 * 4 * 4);
  cudaMalloc((void **)&dt, sizeof t);
  cudaMemset(x, 0, 8 * 4);
  cudaMemcpy(dt, t, sizeof t, cudaMemcpyHostToDevice);
  xent_input in = {x, XENT_FLOAT32, 2, 4, 4, dt, XENT_INT64, NULL};
  xent_options opt = xent_options_default();
  opt.target_check = XENT_TARGETS_DEFERRED;
  xent_output out = {rec, NULL, NULL, NULL, NULL};
  xent_exec ex = xent_exec_default();
  ex.backend = XENT_BACKEND_CUDA;
  assert_int_equal(xent_vp_forward(&in, 4, 0, &opt, rec, 1, &out, 1, &ex),
                   XENT_ERROR_NULL_POINTER);
  assert_true(xt_mentions(xent_last_error(), "verdict"));
  cudaFree(x);
  cudaFree(rec);
  cudaFree(dt);
  xent_verdict_destroy(v[0]);
  xent_verdict_destroy(v[1]);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vp_errors),
      cmocka_unit_test(test_cpu_vp),
      cmocka_unit_test(test_cuda_vp),
      cmocka_unit_test(test_cuda_vp_block_rows),
      cmocka_unit_test(test_cuda_vp_warp_rows),
      cmocka_unit_test(test_cuda_vp_segment_rows),
      cmocka_unit_test(test_cuda_vp_deferred),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  printf("[ CASES    ] %ld sharded calls checked against the reference\n", g_cases);
  return failed;
}
