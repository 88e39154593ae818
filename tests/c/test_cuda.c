/*
 * test_cuda.c - the CUDA backend against the float64 reference and against
 * the CPU backend, on fresh random inputs (the seed is printed;
 * XENT_TEST_SEED repeats a run).
 *
 * Everything runs on device 0, on a stream this program creates, with
 * device buffers that are poisoned (outputs) or guarded (padding and guard
 * elements around the logits) before every call and copied back whole
 * afterwards. Without a GPU every test skips and the program exits with 77.
 *
 * XENT_TEST_ONLY=pattern runs only the matching tests.
 * XENT_TEST_QUICK=1 runs a small subset (small shapes, every feature once,
 * every kernel of the launch table) for compute-sanitizer runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "reference.h"
#include "tolerance.h"
#include "xent.h"
#include "xent_experimental.h"

static const xent_dtype DTYPES[] = {XENT_FLOAT32, XENT_BFLOAT16, XENT_FLOAT16};
static const xent_reduction REDS[] = {XENT_REDUCTION_MEAN, XENT_REDUCTION_SUM,
                                      XENT_REDUCTION_NONE};

static int g_devices;
static int g_quick;
static int g_shard, g_shards = 1; /* XENT_TEST_SHARD=k/n: every n-th forced case from k */
static long g_cases;
static cudaStream_t g_stream;

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess)                                                                \
      fail_msg("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
  } while (0)

static void require_gpu(void) {
  if (g_devices == 0) skip();
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static void h2d(void *dst, const void *src, size_t n) {
  if (n) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g_stream));
}

static void d2h(void *dst, const void *src, size_t n) {
  if (n) CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g_stream));
}

static void sync_stream(void) { CK(cudaStreamSynchronize(g_stream)); }

/* Where this program's XENT_TARGETS_DEFERRED calls leave their verdicts. */
static xent_verdict *g_verdict;

static xent_status check_deferred(void) { return xent_verdict_wait(g_verdict); }

static xent_exec cuda_exec(void *ws, size_t ws_bytes) {
  xent_exec ex = xent_exec_default();
  ex.verdict = g_verdict;
  ex.backend = XENT_BACKEND_CUDA;
  ex.device = 0;
  ex.stream = (void *)g_stream;
  ex.workspace = ws;
  ex.workspace_bytes = ws_bytes;
  return ex;
}

static xent_exec cpu_exec(void) {
  xent_exec ex = xent_exec_default();
  ex.backend = XENT_BACKEND_CPU;
  return ex;
}

/* Force one forward launch for this thread's calls (xent_experimental.h);
 * path XENT_EXPERIMENTAL_TABLE restores the launch table. The other
 * settings stay as they are. */
static void force_launch(xent_experimental_launch l) {
  xent_experimental e = xent_experimental_get();
  e.forward = l;
  if (xent_experimental_set(&e) != XENT_OK)
    fail_msg("xent_experimental_set: %s", xent_last_error());
}

/* The paths of the forward: 0 the built-in launch table, 1 the two-read
 * path forced (256 threads). */
static void force_two_read(int on) {
  xent_experimental_launch l = {XENT_EXPERIMENTAL_TABLE, 0, 0, 0, 0, 0, 0, 0, 0};
  if (on) {
    l.path = XENT_EXPERIMENTAL_TWO_READ;
    l.threads = 256;
  }
  force_launch(l);
}

/* One experimental setting other than the forward launch. */
static void set_programmatic(int v) {
  xent_experimental e = xent_experimental_get();
  e.programmatic = v;
  assert_int_equal(xent_experimental_set(&e), XENT_OK);
}

static void set_verdict_copy(int v) {
  xent_experimental e = xent_experimental_get();
  e.verdict_copy = v;
  assert_int_equal(xent_experimental_set(&e), XENT_OK);
}

static void describe(const xt_case *c, const char *tag, char *desc, size_t n) {
  char cd[512];
  xt_case_desc(c, cd, sizeof cd);
  snprintf(desc, n, "%s: %s", tag, cd);
}

/* ------------------------------------------------------------------------ */
/* A problem on the device                                                   */
/* ------------------------------------------------------------------------ */

typedef struct dev_buf {
  size_t alloc_bytes, target_bytes;
  int64_t count, rows, vocab;
  void *alloc, *logits, *targets;
  float *weights, *loss, *z, *acc, *lse;
  int64_t *pred;
} dev_buf;

/* Copy the host problem (as it is now) and the host outputs (poisoned) to
 * the device. */
static void dev_put(dev_buf *d, const xt_problem *pb, const xt_outbuf *ob) {
  h2d(d->alloc, pb->alloc, d->alloc_bytes);
  h2d(d->targets, pb->targets, d->target_bytes);
  if (d->weights) h2d(d->weights, pb->weights, (size_t)d->vocab * sizeof(float));
  h2d(d->loss, ob->loss, (size_t)(d->count + 1) * sizeof(float));
  h2d(d->z, ob->z, (size_t)(d->count + 1) * sizeof(float));
  h2d(d->acc, ob->acc, (size_t)(d->count + 1) * sizeof(float));
  h2d(d->lse, ob->lse, (size_t)(d->rows + 1) * sizeof(float));
  h2d(d->pred, ob->pred, (size_t)(d->rows + 1) * sizeof(int64_t));
  sync_stream();
}

static void dev_make(dev_buf *d, const xt_problem *pb, const xt_outbuf *ob) {
  memset(d, 0, sizeof *d);
  d->alloc_bytes = pb->alloc_elems * pb->esize;
  d->rows = pb->c.rows;
  d->vocab = pb->c.vocab;
  d->count = ob->count;
  d->target_bytes = (size_t)(pb->c.rows > 0 ? pb->c.rows : 1) * (pb->c.ttype == XENT_INT32 ? 4 : 8);
  CK(cudaMalloc(&d->alloc, d->alloc_bytes));
  d->logits = (char *)d->alloc + (size_t)pb->c.offset * pb->esize;
  CK(cudaMalloc(&d->targets, d->target_bytes));
  if (pb->weights) CK(cudaMalloc((void **)&d->weights, (size_t)pb->c.vocab * sizeof(float)));
  CK(cudaMalloc((void **)&d->loss, (size_t)(d->count + 1) * sizeof(float)));
  CK(cudaMalloc((void **)&d->z, (size_t)(d->count + 1) * sizeof(float)));
  CK(cudaMalloc((void **)&d->acc, (size_t)(d->count + 1) * sizeof(float)));
  CK(cudaMalloc((void **)&d->lse, (size_t)(d->rows + 1) * sizeof(float)));
  CK(cudaMalloc((void **)&d->pred, (size_t)(d->rows + 1) * sizeof(int64_t)));
  dev_put(d, pb, ob);
}

/* Everything back to the host: the whole logits allocation and the outputs. */
static void dev_get(const dev_buf *d, xt_outbuf *ob, void *alloc_host) {
  sync_stream();
  d2h(alloc_host, d->alloc, d->alloc_bytes);
  d2h(ob->loss, d->loss, (size_t)(d->count + 1) * sizeof(float));
  d2h(ob->z, d->z, (size_t)(d->count + 1) * sizeof(float));
  d2h(ob->acc, d->acc, (size_t)(d->count + 1) * sizeof(float));
  d2h(ob->lse, d->lse, (size_t)(d->rows + 1) * sizeof(float));
  d2h(ob->pred, d->pred, (size_t)(d->rows + 1) * sizeof(int64_t));
  sync_stream();
}

static void dev_free(dev_buf *d) {
  CK(cudaFree(d->alloc));
  CK(cudaFree(d->targets));
  if (d->weights) CK(cudaFree(d->weights));
  CK(cudaFree(d->loss));
  CK(cudaFree(d->z));
  CK(cudaFree(d->acc));
  CK(cudaFree(d->lse));
  CK(cudaFree(d->pred));
  memset(d, 0, sizeof *d);
}

static xent_input dev_input(const dev_buf *d, const xt_problem *pb) {
  xent_input in = xt_problem_input(pb);
  in.logits = d->logits;
  in.targets = d->targets;
  in.weights = d->weights;
  return in;
}

static xent_output dev_output(const dev_buf *d, const xt_case *c) {
  return xt_output_view(c, d->loss, d->z, d->acc, d->lse, d->pred);
}

static xent_status dev_call(const dev_buf *d, const xt_problem *pb, const xent_exec *ex) {
  xent_input in = dev_input(d, pb);
  xent_options opt = xt_case_options(&pb->c);
  xent_output out = dev_output(d, &pb->c);
  return xt_forward(pb->c.grad, &in, &opt, &out, ex);
}

/* The CPU backend on the host copy of the problem (restored afterwards). */
static long compare_with_cpu(xt_problem *pb, const xt_outbuf *ob, const void *alloc_dev,
                             const char *desc) {
  xt_outbuf cob;
  if (xt_outbuf_make(&cob, &pb->c) != 0) return 1;
  xt_problem_restore(pb);
  xent_input in = xt_problem_input(pb);
  xent_options opt = xt_case_options(&pb->c);
  xent_output out = xt_outbuf_view(&cob, &pb->c);
  xent_exec ex = cpu_exec();
  xent_status st = xt_forward(pb->c.grad, &in, &opt, &out, &ex);
  long errors = 0;
  char d2[1300];
  snprintf(d2, sizeof d2, "%s (CUDA vs CPU)", desc);
  if (st != XENT_OK) {
    fprintf(stderr, "  [%s] CPU backend: %s\n", d2, xent_last_error());
    errors = 1;
  } else {
    errors = xt_compare_results(pb, ob, alloc_dev, &cob, pb->alloc, d2);
  }
  xt_problem_restore(pb);
  xt_outbuf_free(&cob);
  return errors;
}

enum {
  RUN_COMPARE_CPU = 1,
  RUN_TWO_READ = 2,
  RUN_WORKSPACE = 4,
  RUN_WARP = 8,
  RUN_STAGED = 16,
  RUN_SEGMENT = 32
};

/* The launch RUN_WARP, RUN_SEGMENT and RUN_STAGED force: blocks per row,
 * threads, and the path's size, packed as the shape tables below write it
 * (warp: split * 100 + 4; segment: vectors a thread; staged: hold * 1000000
 * + reuse * 100000 + hint * 10000 + vectors a thread and chunk * 100 +
 * slots). */
static struct {
  int cluster, threads, size;
} g_launch = {1, 256, 4};

/* The launch a run forces, or the launch table. */
static void force_path(int flags) {
  xent_experimental_launch l = {XENT_EXPERIMENTAL_TABLE, 0, 0, 0, 0, 0, 0, 0, 0};
  const int size = g_launch.size;
  if (flags & RUN_WARP) {
    l.path = XENT_EXPERIMENTAL_WARP_ROW;
    l.threads = g_launch.threads;
    l.warp_split = size / 100 > 1 ? size / 100 : 1;
  } else if (flags & RUN_SEGMENT) {
    l.path = XENT_EXPERIMENTAL_SEGMENT;
    l.threads = g_launch.threads;
    l.vecs = size;
  } else if (flags & RUN_STAGED) {
    l.path = XENT_EXPERIMENTAL_STAGED;
    l.cluster = g_launch.cluster;
    l.threads = g_launch.threads;
    l.slots = size % 100;
    l.vecs = size / 100 % 100;
    l.l2_hint = size / 10000 % 10 != 0;
    l.reuse = size / 100000 % 10;
    l.hold = size / 1000000 % 10;
  } else if (flags & RUN_TWO_READ) {
    l.path = XENT_EXPERIMENTAL_TWO_READ;
    l.threads = 256;
  }
  force_launch(l);
}

/* The row maximum of a huge-logit problem (xt_problem_make_huge), whose
 * results cuda_run_problem also checks tightly; 0 otherwise. */
static double g_huge_M;

/* Run a problem on the device and check everything. */
static long cuda_run_problem(xt_problem *pb, const char *tag, int flags) {
  char desc[900];
  describe(&pb->c, tag, desc, sizeof desc);
  xt_outbuf ob;
  if (xt_outbuf_make(&ob, &pb->c) != 0) return 1;
  void *after = xt_alloc(pb->alloc_elems * pb->esize);
  if (!after) return 1;
  dev_buf d;
  dev_make(&d, pb, &ob);
  void *ws = NULL;
  size_t wsb = 0;
  if (flags & RUN_WORKSPACE) {
    wsb = xent_workspace_size(pb->c.rows);
    CK(cudaMalloc(&ws, wsb));
  }
  xent_exec ex = cuda_exec(ws, wsb);
  force_path(flags);
  xent_status st = dev_call(&d, pb, &ex);
  force_two_read(0);
  g_cases++;
  long errors = 0;
  char full[1100];
  snprintf(full, sizeof full, "%s%s%s launch=[%s]", desc,
           (flags & RUN_TWO_READ)  ? " two-read"
           : (flags & RUN_WARP)    ? " warp"
           : (flags & RUN_SEGMENT) ? " segment"
           : (flags & RUN_STAGED)  ? " staged"
                                   : "",
           (flags & RUN_WORKSPACE) ? " workspace" : "", xent_experimental_last_launch());
  if (st != XENT_OK) {
    fprintf(stderr, "  [%s] status %d (%s): %s\n", full, (int)st, xent_status_string(st),
            xent_last_error());
    errors = 1;
  } else {
    dev_get(&d, &ob, after);
    errors = xt_check(pb, &ob, after, full);
    if (g_huge_M != 0.0) errors += xt_check_huge(pb, &ob, g_huge_M, full);
    if (errors == 0 && (flags & RUN_COMPARE_CPU)) errors += compare_with_cpu(pb, &ob, after, full);
  }
  if (ws) CK(cudaFree(ws));
  dev_free(&d);
  xt_free(after);
  xt_outbuf_free(&ob);
  return errors;
}

static long cuda_run_case(const xt_case *c, xt_rng *rng, const char *tag, int flags) {
  xt_problem pb;
  if (xt_problem_make(&pb, c, rng) != 0) {
    fprintf(stderr, "  [%s] out of host memory\n", tag);
    return 1;
  }
  long e = cuda_run_problem(&pb, tag, flags);
  xt_problem_free(&pb);
  return e;
}

/* ------------------------------------------------------------------------ */
/* The input space                                                           */
/* ------------------------------------------------------------------------ */

/* dtype x reduction x target type x {forward, forward_grad}, on both paths. */
static void test_cuda_matrix(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_matrix");
  long errors = 0;
  const int64_t V = g_quick ? 1000 : 4095, R = g_quick ? 16 : 64;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++)
      for (int tt = 0; tt < 2; tt++)
        for (int grad = 0; grad < 2; grad++) {
          if (g_quick && (tt + grad + r) % 2) continue;
          xt_case c = xt_case_default(DTYPES[d], R, V);
          c.reduction = REDS[r];
          c.ttype = tt ? XENT_INT64 : XENT_INT32;
          c.grad = grad;
          c.ties = 1;
          /* Unchecked too: without a gradient its finalize counts N itself. */
          c.check = (d + r) % 2 ? XENT_TARGETS_CHECKED : XENT_TARGETS_UNCHECKED;
          int flags = RUN_COMPARE_CPU | (((d + r + tt + grad) % 2) ? RUN_TWO_READ : 0);
          errors += cuda_run_case(&c, &rng, "cuda matrix", flags);
        }
  assert_int_equal(errors, 0);
}

static void test_cuda_features(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_features");
  long errors = 0;
  int k = 0;
  for (int combo = 0; combo < XT_FEATURE_COMBOS; combo++)
    for (int d = 0; d < 3; d++)
      for (int r = 0; r < 3; r++, k++) {
        if (g_quick && (d + r) % 3 != combo % 3) continue; /* each feature once per dtype */
        int64_t V = (k % 3 == 0) ? 7 : (k % 3 == 1) ? 4095 : (g_quick ? 1000 : 50257);
        xt_case c = xt_case_default(DTYPES[d], g_quick ? 12 : 48, V);
        c.reduction = REDS[r];
        xt_vary_outputs(&c, k);
        const char *name = xt_feature_combo(&c, combo);
        char tag[64];
        snprintf(tag, sizeof tag, "cuda features %s", name);
        int flags = RUN_COMPARE_CPU | ((k % 2) ? RUN_TWO_READ : 0);
        errors += cuda_run_case(&c, &rng, tag, flags);
      }
  assert_int_equal(errors, 0);
}

/* Rows per call for a vocabulary: the float64 reference stays affordable. */
static int64_t rows_for(int64_t V) {
  if (g_quick) return V >= 262144 ? 2 : V >= 32000 ? 4 : 16;
  if (V >= 1048576) return 4;
  if (V >= 262144) return 24;
  if (V >= 50257) return 64;
  if (V >= 32000) return 128;
  return 256;
}

/* Rows per call for a path with a persistent grid, enough that its blocks
 * take several each: 200 (V >= 200000) or 300 (V >= 100000), a quarter of
 * that in the quick set, and `small` (`small_quick`) below. */
static int64_t persistent_rows(int64_t V, int64_t small, int64_t small_quick) {
  if (V >= 100000) return (V >= 200000 ? 200 : 300) / (g_quick ? 4 : 1);
  return g_quick ? small_quick : small;
}

static void test_cuda_vocab_sizes(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_vocab_sizes");
  long errors = 0;
  const int64_t vocabs[] = {1, 7, 4095, 32000, 50257, 128256, 262144, 1048576};
  int k = 0;
  for (int v = 0; v < 8; v++)
    for (int d = 0; d < 3; d++)
      for (int all = 0; all < 2; all++, k++) {
        int64_t V = vocabs[v];
        if (g_quick && (V > 50257 ? (d != 1 || all) : (d + all) % 2)) continue;
        xt_case c = xt_case_default(DTYPES[d], rows_for(V), V);
        c.reduction = REDS[k % 3];
        c.ttype = (k % 2) ? XENT_INT32 : XENT_INT64;
        c.ties = 1;
        if (all) xt_everything(&c);
        /* Large vocabularies compare with the CPU only once per size. */
        int flags = (V <= 50257 || (d == 1 && !all)) ? RUN_COMPARE_CPU : 0;
        errors += cuda_run_case(&c, &rng, "cuda vocab", flags);
        /* The same on the two-read kernel with 256 threads (the table takes
         * other kernels, or 512 or 1024 threads). */
        if (k % 3 == 0 || g_quick || V * (int64_t)xt_dtype_size(DTYPES[d]) <= 256 * 16 * 16)
          errors += cuda_run_case(&c, &rng, "cuda vocab", RUN_TWO_READ);
      }
  assert_int_equal(errors, 0);
}

/* Does device 0's plan go by compute capability `major` or newer? The
 * plan's, not the device's: a build of compute_80 PTX alone runs the A100's
 * plan on an H100, and XENT_PLAN_ARCH chooses another (xent_device_info). */
static int has_sm(int major) {
  xent_device_info info;
  return xent_get_device_info(0, &info) == XENT_OK && info.plan_arch / 10 >= major;
}

/* Skip the test below compute capability `major`. */
static void require_sm(int major, const char *what) {
  if (!has_sm(major)) {
    print_message("%s needs sm_%d0 or newer\n", what, major);
    skip();
  }
}

/* 1 (and a message) when the last forward's launch was not `kernel`: the
 * launch's description starts with its first word, and contains the rest
 * (such as "staged hold=2"). */
static long not_launched(const char *kernel, int64_t V) {
  const char *launch = xent_experimental_last_launch(), *rest = strchr(kernel, ' ');
  const size_t head = rest ? (size_t)(rest - kernel) : strlen(kernel);
  if (strncmp(launch, kernel, head) == 0 && (!rest || strstr(launch, rest + 1))) return 0;
  print_message("V=%lld: expected the %s kernel, ran %s\n", (long long)V, kernel,
                xent_experimental_last_launch());
  return 1;
}

/* One case of a forced-path sweep: case index k picks the reduction and
 * the kernel (ties always, gradient as given): odd k every feature at once
 * (the general kernel); k = 0 mod 4 no accuracy and no predicted tokens
 * (the plain kernel, the one the benchmark times); k = 2 mod 4 both (the
 * statistics kernel). The case runs on the path `flags` forces and must
 * have run `kernel`. */
static long run_forced_case(xt_case *c, xt_rng *rng, int k, int grad, int flags,
                            const char *tag, const char *kernel) {
  c->reduction = REDS[k % 3];
  c->ties = 1;
  c->grad = grad;
  if (k % 2) xt_everything(c);
  else if (k % 4 == 0) c->want_acc = c->want_pred = 0;
  /* A quarter of the calls without a gradient unchecked (k = 0, 1 mod 8):
   * no count kernel, so the finalize kernel counts N from the losses the
   * forward kernel left. */
  if (!grad && k % 8 < 2) c->check = XENT_TARGETS_UNCHECKED;
  long errors = cuda_run_case(c, rng, tag, flags);
  return errors + not_launched(kernel, c->vocab);
}

/* One shape of a forced-launch sweep: V, dtype (an index into DTYPES),
 * g_launch's cluster, threads and size, and the case's stride and offset. */
typedef struct forced_shape {
  int64_t V;
  int d, cluster, threads, size;
  int64_t stride;
  int offset;
} forced_shape;

/* The case of shape `sh` with `rows` rows, a tenth of them ignored, and the
 * launch it forces (g_launch). */
static xt_case forced_case(const forced_shape *sh, int64_t rows) {
  xt_case c = xt_case_default(DTYPES[sh->d], rows, sh->V);
  c.stride = sh->stride;
  c.offset = sh->offset;
  c.ignore_frac = 0.1;
  g_launch.cluster = sh->cluster;
  g_launch.threads = sh->threads;
  g_launch.size = sh->size;
  return c;
}

/* Each shape with and without a gradient (half of them in the quick set;
 * RUN_WARP: without, all of them),
 * rows(V) rows of which a tenth are ignored, on the launch `flags` forces,
 * which must have run `kernel`; the first three shapes are also compared
 * with the CPU backend. Shapes over a cluster skip below sm_90. */
static long run_forced_shapes(const forced_shape *shapes, int n, int64_t (*rows)(int64_t),
                              int flags, const char *tag, const char *kernel, xt_rng *rng) {
  long errors = 0;
  int picked = 0;
  for (int i = 0; i < n; i++) {
    for (int grad = 0; grad < 2; grad++) {
      if (grad && (flags & RUN_WARP)) continue; /* forward without gradient only */
      if (g_quick && (i + grad) % 2 && !(flags & RUN_WARP)) continue;
      if (picked++ % g_shards != g_shard) continue; /* another shard's case */
      const forced_shape *sh = &shapes[i];
      if (sh->cluster > 1 && !has_sm(9)) continue; /* clusters need sm_90 */
      xt_case c = forced_case(sh, rows(sh->V));
      errors += run_forced_case(&c, rng, i + grad, grad, flags | (i < 3 ? RUN_COMPARE_CPU : 0),
                                tag, kernel);
    }
  }
  return errors;
}

/* Rows for the row-per-warp path: not a multiple of any block's 2 to 8. */
static int64_t warp_rows(int64_t V) { return V >= 1000000 ? 37 : V >= 100000 ? 203 : 1001; }

/* A row per warp (the forward without gradient): tiny rows to 1 M elements,
 * every dtype, packed, padded and unaligned, rows not filling the last
 * block, ignored rows among them; 2, 4 and 8 warps a block. */
static void test_cuda_warp(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_warp");
  /* V, dtype, -, threads, - (a row a warp), stride, offset. Entries 0, 4,
   * 8... ask for no accuracy and no predicted tokens: the plain kernel, with
   * its pipelined pass; the others for statistics or every feature, which
   * fold unpipelined (run_forced_case). */
  const forced_shape shapes[] = {
      {1, 0, 1, 256, 4, 0, 0},           {8, 1, 1, 64, 0, 0, 1},
      {7, 2, 1, 128, 6, 9, 0},           {4095, 1, 1, 256, 0, 0, 1},
      {32000, 1, 1, 256, 8, 0, 0},       {32000, 0, 1, 128, 0, 32000 + 5, 0},
      {50257, 2, 1, 256, 4, 50264, 1},   {50304, 0, 1, 64, 0, 0, 0},
      {128256, 1, 1, 256, 6, 0, 0},      {262144, 0, 1, 128, 0, 0, 1},
      {1048576, 1, 1, 256, 8, 0, 0},     {8, 0, 1, 32, 0, 0, 0},
      {50257, 1, 1, 128, 0, 50260, 1},   {33, 2, 1, 96, 0, 0, 1},
      {4095, 2, 1, 128, 8, 4100, 1},     {1000, 0, 1, 128, 0, 0, 0},
      {32000, 0, 1, 128, 4, 0, 1}};
  long errors = run_forced_shapes(shapes, (int)(sizeof shapes / sizeof shapes[0]), warp_rows,
                                  RUN_WARP, "cuda warp", "warp", &rng);
  assert_int_equal(errors, 0);
}

/* A forced shape and its rows. */
typedef struct sized_shape {
  forced_shape sh;
  int64_t rows;
} sized_shape;

/* Each shape without a gradient, plain unchecked, plain checked and with
 * every feature (k = 0, 4, 1 mod 8; half of them in the quick set), on the
 * launch `flags` forces, plus `odd_flags` for odd shapes and a comparison
 * with the CPU backend for the first `cpu_first`. The plain calls must have
 * run `plain_kernel`, the others `other_kernel` ("": any). */
static long run_plain_and_general(const sized_shape *shapes, int n, int flags, int odd_flags,
                                  int cpu_first, const char *tag, const char *plain_kernel,
                                  const char *other_kernel, xt_rng *rng) {
  const int kinds[] = {0, 4, 1};
  long errors = 0;
  for (int i = 0; i < n; i++) {
    for (int kd = 0; kd < 3; kd++) {
      if (g_quick && (i + kd) % 2) continue;
      xt_case c = forced_case(&shapes[i].sh, shapes[i].rows);
      const int f = flags | (i % 2 ? odd_flags : 0) | (i < cpu_first ? RUN_COMPARE_CPU : 0);
      const char *kernel = kinds[kd] % 4 == 0 ? plain_kernel : other_kernel;
      errors += run_forced_case(&c, rng, 8 * i + kinds[kd], 0, f, tag, kernel);
    }
  }
  return errors;
}

/* Rows shared by 2, 4 or 8 warps (the plain kernel's pipelined pass, 4
 * vectors a stage), which merge their statistics at a barrier of their own:
 * tiny rows (fewer vectors than lanes) to 1 M elements, every dtype,
 * packed, padded and unaligned, ignored rows among them (every warp of the
 * row leaves before the barrier), rows not filling the last block, 1 to 4
 * rows a block. Each shape plain unchecked and checked, and with every
 * feature (which keeps a row per warp). */
static void test_cuda_warp_split(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_warp_split");
  /* size: split * 100 + 4 (force_path) */
  const sized_shape shapes[] = {
      {{32000, 1, 1, 128, 204, 0, 0}, 1001},     {{7, 2, 1, 64, 204, 9, 0}, 2001},
      {{4095, 0, 1, 256, 404, 4100, 1}, 1001},   {{1000, 0, 1, 128, 404, 0, 0}, 3001},
      {{50257, 1, 1, 192, 204, 50264, 1}, 1001}, {{128256, 2, 1, 256, 204, 0, 0}, 203},
      {{1048576, 1, 1, 128, 404, 0, 1}, 37},     {{33, 1, 1, 128, 404, 0, 1}, 999},
      {{262144, 0, 1, 256, 404, 0, 0}, 101},     {{32000, 1, 1, 256, 804, 0, 0}, 1003},
      {{4095, 2, 1, 256, 804, 4100, 1}, 777}};
  /* the plain kernel must have split the rows; every feature keeps a row a warp */
  const long errors =
      run_plain_and_general(shapes, (int)(sizeof shapes / sizeof shapes[0]), RUN_WARP, 0, 0,
                            "cuda warp split", "warp split=", "warp", &rng);
  assert_int_equal(errors, 0);
}

/* The segment path (the plain kernel without gradient): rows of one
 * segment (finished by their block) and of two (merged), segments holding
 * fewer vectors than threads, two segments of exactly a block each, rows of
 * extra elements alone, every dtype, packed, padded and unaligned (segment
 * 0 folds the extras), ignored rows among them, with and without a
 * workspace of the caller's (the merge's values live in its row arrays),
 * every reduction. Calls the plain kernel does not take (every feature at
 * once) run a row per warp or the two-read kernel instead, as the launch
 * table maps them. */
static void test_cuda_segment(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_segment");
  /* V, dtype, -, threads, vectors a thread, stride, offset; rows */
  const sized_shape shapes[] = {
      {{32000, 1, 1, 256, 8, 0, 0}, 1001},    {{1, 0, 1, 256, 8, 0, 0}, 1001},
      {{7, 2, 1, 64, 4, 9, 0}, 2001},         {{4095, 1, 1, 128, 8, 4100, 1}, 777},
      {{16000, 1, 1, 256, 4, 0, 1}, 501},     {{16384, 0, 1, 256, 8, 0, 0}, 301},
      {{16000, 2, 1, 256, 8, 16008, 1}, 401}, {{1000, 0, 1, 32, 4, 1003, 1}, 999},
      {{33, 1, 1, 64, 4, 0, 1}, 1999},        {{20000, 2, 1, 192, 8, 20000 + 5, 0}, 603},
      {{12000, 1, 1, 256, 8, 0, 0}, 1001},    {{3000, 1, 1, 64, 8, 0, 1}, 2001}};
  /* every feature: whichever kernel the table maps the call to */
  const long errors =
      run_plain_and_general(shapes, (int)(sizeof shapes / sizeof shapes[0]), RUN_SEGMENT,
                            RUN_WORKSPACE, 2, "cuda segment", "segment", "", &rng);
  assert_int_equal(errors, 0);
}

/* Enough rows that every block of the staged path's persistent grid (one
 * or more per SM, or per cluster) takes several: its ring wraps within and across
 * rows, and the producer announces rows ahead of the consumers. */
static int64_t staged_rows(int64_t V) { return persistent_rows(V, 1500, 700); }

/* The staged path (sm_90+; a producer warp feeding the consumer warps
 * through a ring of bulk copies): rows of one chunk or less, of many chunks
 * and of more chunks than slots; rings of 2 to 16 chunks of 2 to 64 KB;
 * over one block and clusters of 2 and 4; every dtype, packed, padded and
 * unaligned (the extra elements outside the copies), ignored rows among
 * them (announced, never copied); pass 1 with and without evict-last; pass 2 reusing none,
 * some and all of a slice's chunks from shared memory (slices of fewer
 * chunks than the reuse count, and reuse = slots). */
static void test_cuda_staged(void **state) {
  (void)state;
  require_gpu();
  require_sm(9, "the staged kernel");
  xt_rng rng = xt_rng_for("test_cuda_staged");
  /* V, dtype, cluster, consumer threads, size (reuse * 100000 + hint * 10000 + vectors
   * per thread and chunk * 100 + slots), stride, offset. */
  const forced_shape shapes[] = {
      {1, 0, 1, 64, 404, 0, 0},              {7, 2, 1, 128, 100402, 9, 1},
      {4095, 1, 1, 32, 200802, 0, 1},        {32000, 1, 1, 480, 200803, 0, 0},
      {32000, 0, 1, 480, 403, 32000 + 5, 0}, {50257, 2, 1, 256, 610806, 50264, 1},
      {128256, 1, 1, 448, 804, 0, 0},        {128256, 0, 2, 480, 410406, 0, 1},
      {131072, 2, 1, 416, 300404, 0, 0},     {262144, 1, 2, 256, 600806, 262144 + 8, 0},
      {262144, 0, 4, 384, 200408, 0, 0},     {128256, 1, 1, 416, 310804, 0, 1},
      {262144, 0, 2, 416, 10804, 0, 0},      {65536, 0, 1, 416, 400404, 0, 0},
      /* the launch table's fp32 shapes: 128 x 8 x 6 without a gradient, 416 x 4 x 8 */
      {32000, 0, 1, 128, 806, 0, 0},         {50304, 0, 1, 416, 710408, 0, 0},
      /* clusters with enough rows each (10 to 20) that the lead's row mail wraps */
      {4095, 0, 2, 128, 100402, 0, 1},       {32000, 1, 2, 256, 200404, 0, 0},
      {50257, 2, 4, 128, 200404, 50264, 1}};
  const int n = (int)(sizeof shapes / sizeof shapes[0]);
  long errors = run_forced_shapes(shapes, n, staged_rows, RUN_STAGED, "cuda staged", "staged",
                                  &rng);
  assert_int_equal(errors, 0);
}

/* The staged path's chunks held in registers between the passes (the
 * plain kernel of 4 vectors a thread, with a gradient): the launch table's
 * bf16 launch (every chunk pass 2 does not reuse held: each row is read
 * once) and fp32 one (1 of 2 held), one chunk held and others copied
 * again, fewer chunks not reused than the hold count, a held chunk that is
 * the slice's partial last one, and clusters of 2 and 4 (mailed rows);
 * packed, padded and unaligned, ignored rows among them; no accuracy or
 * predicted tokens, so that the plain kernel runs. Each shape also runs
 * with every feature (the general kernel, which holds none) and without a
 * gradient (nothing to hold); the launch must report the chunks it may
 * hold. */
static void test_cuda_staged_hold(void **state) {
  (void)state;
  require_gpu();
  require_sm(9, "the staged kernel");
  xt_rng rng = xt_rng_for("test_cuda_staged_hold");
  /* V, dtype, cluster, consumer threads, size (hold * 1000000 + reuse * 100000 + hint *
   * 10000 + vectors per thread and chunk * 100 + slots), stride, offset. */
  const forced_shape shapes[] = {
      {128256, 1, 1, 480, 2710407, 0, 0},      /* 9 chunks: 7 reused, 2 held     */
      {128256, 0, 2, 416, 1810408, 0, 1},      /* fp32 over 2 blocks: 1 of 2 held */
      {50257, 2, 1, 256, 1200404, 50264, 1},   /* 7 chunks: 2 reused, 1 held     */
      {4095, 0, 1, 128, 2000402, 0, 0},        /* 2 chunks, both held, 1 partial */
      {4095, 1, 1, 32, 2300404, 0, 1},         /* 4 chunks: 3 reused, 1 of 2 held */
      {262144, 0, 4, 384, 2200408, 0, 0},      /* 11 chunks: 2 reused, 2 held    */
      {32000, 0, 1, 480, 2410407, 0, 0},       /* 5 chunks: 4 reused, 1 held     */
      {262144, 1, 2, 480, 2710407, 262144 + 8, 0}};
  const int n = (int)(sizeof shapes / sizeof shapes[0]);
  long errors = 0;
  int picked = 0;
  for (int i = 0; i < n; i++) {
    /* 0: plain with a gradient; 1: every feature; 2: plain without a gradient */
    for (int variant = 0; variant < 3; variant++) {
      if (g_quick && variant != 0 && (i + variant) % 2) continue;
      if (picked++ % g_shards != g_shard) continue; /* another shard's case */
      const forced_shape *sh = &shapes[i];
      xt_case c = forced_case(sh, staged_rows(sh->V));
      c.reduction = REDS[(i + variant) % 3];
      c.ties = 1;
      c.grad = variant != 2;
      /* no accuracy or predicted tokens: the statistics kernel holds none */
      c.want_acc = c.want_pred = variant == 1;
      if (variant == 1) xt_everything(&c);
      const int flags = RUN_STAGED | (i < 2 ? RUN_COMPARE_CPU : 0);
      errors += cuda_run_case(&c, &rng, "cuda staged hold", flags);
      char kernel[32];
      snprintf(kernel, sizeof kernel, "staged hold=%d", variant == 0 ? sh->size / 1000000 : 0);
      errors += not_launched(kernel, sh->V);
    }
  }
  assert_int_equal(errors, 0);
}

/* Padded strides and unaligned bases (logits one element past an aligned
 * address; with an odd stride every row starts anywhere). */
static void test_cuda_layouts(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_layouts");
  long errors = 0;
  const int64_t shapes[][3] = {
      /* V, stride, offset */
      {7, 16, 0},         {4095, 4095 + 13, 0}, {32000, 32768, 0}, {4095, 0, 1},
      {4096, 4097, 1},    {50257, 50264, 1},    {128256, 128256 + 1, 0},
      {128256, 0, 1},     {1, 9, 1},
  };
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  int k = 0;
  for (int s = 0; s < nshapes; s++)
    for (int d = 0; d < 3; d++)
      for (int grad = 0; grad < 2; grad++, k++) {
        if (g_quick && (shapes[s][0] > 50257 || (d + grad + s) % 3)) continue;
        xt_case c = xt_case_default(DTYPES[d], rows_for(shapes[s][0]) / 2 + 1, shapes[s][0]);
        c.stride = shapes[s][1];
        c.offset = (int)shapes[s][2];
        c.grad = grad;
        c.reduction = REDS[k % 3];
        if (k % 2) xt_everything(&c);
        errors += cuda_run_case(&c, &rng, "cuda layout", (k % 4 == 1) ? RUN_TWO_READ : 0);
      }
  assert_int_equal(errors, 0);
}

static void test_cuda_ignored_rows(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_ignored_rows");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      if (g_quick && d != r) continue;
      xt_case c = xt_case_default(DTYPES[d], 40, 3001);
      c.reduction = REDS[r];
      c.ignore_index = 3; /* a real class */
      c.ignore_frac = 0.5;
      c.ttype = r % 2 ? XENT_INT32 : XENT_INT64;
      errors += cuda_run_case(&c, &rng, "cuda ignore_index = class 3", RUN_COMPARE_CPU);
      c.grad = 0; /* no count kernel: the finalize kernel counts N */
      c.check = XENT_TARGETS_UNCHECKED;
      errors += cuda_run_case(&c, &rng, "cuda ignore_index = class 3, unchecked", 0);
      c = xt_case_default(DTYPES[d], 17, 3001);
      c.reduction = REDS[r];
      c.ignore_frac = 1.0;
      errors += cuda_run_case(&c, &rng, "cuda all rows ignored", 0);
      c.grad = 0;
      c.check = XENT_TARGETS_UNCHECKED;
      errors += cuda_run_case(&c, &rng, "cuda all rows ignored, unchecked", 0);
      c.grad = 1;
      c.check = XENT_TARGETS_CHECKED;
      xt_everything(&c);
      c.ignore_frac = 1.0;
      errors += cuda_run_case(&c, &rng, "cuda all rows ignored, everything", RUN_TWO_READ);
      /* the rule of 0: with and without the count kernel */
      c.empty_zero = 1;
      errors += cuda_run_case(&c, &rng, "cuda all rows ignored, mean of none 0", 0);
      c.grad = 0;
      c.check = XENT_TARGETS_UNCHECKED;
      errors += cuda_run_case(&c, &rng, "cuda all rows ignored, mean of none 0, unchecked", 0);
      c.empty_zero = 0;
      c.grad = 1;
      c.check = XENT_TARGETS_CHECKED;
      c = xt_case_default(DTYPES[d], 40, 5000);
      c.reduction = REDS[r];
      c.ignore_frac = 0.3;
      c.nan_ignored = 1;
      if (r == 2) xt_everything(&c), c.ignore_frac = 0.3;
      errors += cuda_run_case(&c, &rng, "cuda NaN logits in ignored rows", r == 1 ? RUN_TWO_READ : 0);
    }
  xt_case c = xt_case_default(XENT_BFLOAT16, 40, 100);
  c.ignore_index = INT64_MIN;
  c.ignore_frac = 0.3;
  errors += cuda_run_case(&c, &rng, "cuda ignore_index INT64_MIN", 0);
  c.ignore_index = -1;
  c.ttype = XENT_INT32;
  errors += cuda_run_case(&c, &rng, "cuda ignore_index -1 (int32)", 0);
  assert_int_equal(errors, 0);
}

/* Masks about 30 % of each row's classes (-inf), never its target. */
static void mask_classes(xt_problem *pb, xt_rng *rng) {
  for (int64_t row = 0; row < pb->c.rows; row++)
    for (int64_t j = 0; j < pb->c.vocab; j++)
      if (j != pb->t64[row] && xt_uniform(rng) < 0.3) xt_problem_set(pb, row, j, -INFINITY);
  assert_int_equal(xt_problem_rereference(pb), 0);
}

/* The plan's compute capability against the code this build runs on the
 * device (no silent no-ops): by default the plan is the device's capped at
 * the code's, and gives right results; a plan forced past the code (sm_90's
 * staged kernel over compute_80 PTX, as scripts/device.sh's proxy build
 * runs it on a Hopper GPU) fails with XENT_ERROR_UNSUPPORTED naming the
 * kernel and the device, writing nothing. Over sm_90 code the A100's plan
 * (80) and Blackwell's (100) run and give right results. */
static void test_cuda_code_and_plan(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_code_and_plan");
  xent_device_info di;
  assert_int_equal(xent_get_device_info(0, &di), XENT_OK);
  const int device = 10 * di.sm_major + di.sm_minor;
  print_message("device sm_%d, code compute_%d, plan sm_%d\n", device, di.code_arch,
                di.plan_arch);
  assert_true(di.code_arch >= 75);
  if (!getenv("XENT_PLAN_ARCH"))
    assert_int_equal(di.plan_arch, device < di.code_arch ? device : di.code_arch);
  long errors = 0;
  xt_case c = xt_case_default(XENT_BFLOAT16, 64, 128256); /* the staged kernel's on sm_90 */
  const xent_experimental saved = xent_experimental_get();
  if (di.code_arch < 90) {
    xent_experimental e = saved;
    e.plan_arch = 90;
    assert_int_equal(xent_experimental_set(&e), XENT_OK);
    xt_problem pb;
    assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
    xt_outbuf ob;
    assert_int_equal(xt_outbuf_make(&ob, &c), 0);
    void *after = xt_alloc(pb.alloc_elems * pb.esize);
    dev_buf d;
    dev_make(&d, &pb, &ob);
    xent_exec ex = cuda_exec(NULL, 0);
    const xent_status st = dev_call(&d, &pb, &ex);
    const char *msg = xent_last_error();
    print_message("plan sm_90 over compute_%d: %s\n", di.code_arch, msg);
    assert_int_equal(st, XENT_ERROR_UNSUPPORTED);
    assert_true(xt_mentions(msg, "staged") && xt_mentions(msg, "compute_90"));
    dev_get(&d, &ob, after);
    for (int64_t i = 0; i <= ob.count; i++) assert_true(xt_is_poison_f32(ob.loss[i]));
    dev_free(&d);
    xt_free(after);
    xt_outbuf_free(&ob);
    xt_problem_free(&pb);
    assert_int_equal(xent_experimental_set(&saved), XENT_OK);
    errors += cuda_run_case(&c, &rng, "the plan of the code", RUN_COMPARE_CPU);
  } else {
    const int archs[] = {80, 100};
    for (int a = 0; a < 2; a++) {
      xent_experimental e = saved;
      e.plan_arch = archs[a];
      assert_int_equal(xent_experimental_set(&e), XENT_OK);
      for (int d = 0; d < 3; d++)
        for (int grad = 0; grad < 2; grad++) {
          xt_case k = xt_case_default(DTYPES[d], 64, d == 1 ? 128256 : 50257);
          k.grad = grad;
          if (d == 2) xt_everything(&k);
          errors += cuda_run_case(&k, &rng, archs[a] == 80 ? "plan sm_80" : "plan sm_100", 0);
          if (strncmp(xent_experimental_last_launch(), "staged", 6) == 0) {
            print_message("plan sm_%d launched %s\n", archs[a], xent_experimental_last_launch());
            errors++;
          }
        }
    }
    assert_int_equal(xent_experimental_set(&saved), XENT_OK);
  }
  assert_int_equal(errors, 0);
}

static void test_cuda_special_values(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_special_values");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      if (g_quick && d != r) continue;
      /* Masked classes (-inf). */
      xt_case c = xt_case_default(DTYPES[d], 20, 2049);
      c.reduction = REDS[r];
      if (r == 1) c.use_softcap = 1, c.cap = 8.0, c.weighted = 1, c.s = 0.01;
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      mask_classes(&pb, &rng);
      errors += cuda_run_problem(&pb, "cuda masked -inf", RUN_COMPARE_CPU);
      errors += cuda_run_problem(&pb, "cuda masked -inf", RUN_TWO_READ);
      xt_problem_free(&pb);
      /* Masked classes under weighted smoothing: the loss +inf, as on the CPU
       * and in the reference (xent.h, "Non-finite logits"), on every path. */
      if (d != 1 && r != 1)
        for (int v = 0; v < 2; v++) {
          if (g_quick && v) continue;
          c = xt_case_default(DTYPES[d], 12, v ? 50257 : 4095);
          c.reduction = REDS[r];
          c.weighted = 1, c.alpha = 0.1;
          assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
          mask_classes(&pb, &rng);
          errors += cuda_run_problem(&pb, "cuda masked -inf, weighted smoothing", 0);
          errors += cuda_run_problem(&pb, "cuda masked -inf, weighted smoothing", RUN_TWO_READ);
          xt_problem_free(&pb);
          c.grad = 0; /* the forward's own kernels (rows per warp on sm_90) */
          assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
          mask_classes(&pb, &rng);
          errors += cuda_run_problem(&pb, "cuda masked -inf, weighted smoothing, no grad", 0);
          xt_problem_free(&pb);
        }
      /* NaN / +inf rows. */
      c = xt_case_default(DTYPES[d], 8, 1000);
      c.reduction = REDS[r];
      c.ignore_frac = 0.0;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      xt_problem_set(&pb, 2, 17, NAN);
      xt_problem_set(&pb, 5, 3, INFINITY);
      xt_problem_set(&pb, 6, pb.t64[6], NAN);
      assert_int_equal(xt_problem_rereference(&pb), 0);
      errors += cuda_run_problem(&pb, "cuda NaN/inf logits", 0);
      errors += cuda_run_problem(&pb, "cuda NaN/inf logits", RUN_TWO_READ);
      xt_problem_free(&pb);
      /* Peaked rows (the fold of -c at the target) and large offsets. */
      c = xt_case_default(DTYPES[d], 30, 4095);
      c.reduction = REDS[r];
      c.peaked = 1;
      c.sigma = 1.0;
      errors += cuda_run_case(&c, &rng, "cuda peaked rows", RUN_COMPARE_CPU);
      c = xt_case_default(DTYPES[d], 19, 2000);
      c.reduction = REDS[r];
      c.base = r == 0 ? 200.0 : r == 1 ? -200.0 : 90.0;
      errors += cuda_run_case(&c, &rng, "cuda large offset", RUN_COMPARE_CPU);
    }
  assert_int_equal(errors, 0);
}

/* Row maxima from 1e4 to the edge of each dtype's range (+-3e38 in fp32 and
 * bf16, +-65504 in fp16), ties among them, every option: on the launch
 * table's kernel, the two-read kernel, the staged kernel (sm_90+, with and
 * without chunks held in registers) and, without a gradient, the row per
 * warp (split and not) and the segment path (fp32 rows of two segments). The
 * loss must be accurate to its own size (a tie's log 2 survives a maximum of
 * 1e30), never a NaN or an inf. */
static void test_cuda_huge_logits(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_huge_logits");
  long errors = 0;
  struct {
    int flags, cluster, threads, size, grad, sm;
  } paths[] = {{0, 1, 0, 0, 1, 0},           {0, 1, 0, 0, 0, 0},
               {RUN_TWO_READ, 1, 0, 0, 1, 0}, {RUN_TWO_READ, 1, 0, 0, 0, 0},
               {RUN_STAGED, 1, 128, 210804, 1, 9}, {RUN_STAGED, 2, 64, 2000402, 1, 9},
               {RUN_WARP, 1, 128, 0, 0, 0},   {RUN_WARP, 1, 256, 404, 0, 0},
               {RUN_SEGMENT, 1, 64, 4, 0, 0}};
  const int np = (int)(sizeof paths / sizeof paths[0]);
  int n = 0;
  for (int d = 0; d < 3; d++) {
    xt_case c;
    double M;
    /* V = 1500 + k: fp32 rows of two segments of 64 x 4 vectors, bf16 of one */
    for (int k = 0; (M = xt_huge_case(&c, DTYPES[d], k, 13, 1500 + k)) != 0.0; k++) {
      for (int pi = 0; pi < np; pi++, n++) {
        if (g_quick && n % 4) continue;
        if (paths[pi].sm && !has_sm(paths[pi].sm)) continue;
        c.grad = paths[pi].grad;
        xt_problem pb;
        assert_int_equal(xt_problem_make_huge(&pb, &c, M, &rng), 0);
        g_launch.cluster = paths[pi].cluster;
        g_launch.threads = paths[pi].threads;
        g_launch.size = paths[pi].size;
        char tag[64];
        snprintf(tag, sizeof tag, "cuda huge logits M=%g", M);
        g_huge_M = M;
        errors += cuda_run_problem(&pb, tag, paths[pi].flags);
        g_huge_M = 0.0;
        xt_problem_free(&pb);
      }
    }
  }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Target checking                                                           */
/* ------------------------------------------------------------------------ */

/* Launches a checked call with a bad target is tried on: every kernel path
 * must return before it writes anything, since the host reads the verdict
 * only after the whole call is queued. nograd_only: forward calls without
 * gradient alone; plain: calls the plain kernel takes alone (no accuracy,
 * no predicted tokens), which the case is narrowed to. */
static const struct {
  xent_experimental_launch launch;
  int sm, nograd_only, plain;
  const char *name;
} CHECKED_LAUNCHES[] = {
    {{XENT_EXPERIMENTAL_TABLE, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, "the table"},
    {{XENT_EXPERIMENTAL_TWO_READ, 0, 256, 0, 0, 0, 0, 0, 0}, 0, 0, 0, "two-read"},
    {{XENT_EXPERIMENTAL_WARP_ROW, 0, 128, 0, 0, 0, 0, 1, 0}, 0, 1, 0, "warp"},
    {{XENT_EXPERIMENTAL_WARP_ROW, 0, 256, 0, 0, 0, 0, 4, 0}, 0, 1, 1, "warp split 4"},
    {{XENT_EXPERIMENTAL_STAGED, 1, 128, 8, 3, 1, 0, 0, 0}, 9, 0, 0, "staged"},
    {{XENT_EXPERIMENTAL_STAGED, 2, 128, 8, 3, 0, 0, 0, 0}, 9, 0, 0, "staged cluster 2"},
    {{XENT_EXPERIMENTAL_SEGMENT, 0, 256, 8, 0, 0, 0, 0, 0}, 0, 1, 1, "segment"},
    {{XENT_EXPERIMENTAL_SEGMENT, 0, 32, 4, 0, 0, 0, 0, 0}, 0, 1, 1,
     "segment of 32 threads (fp32: two segments)"},
};

/* One call on launch CHECKED_LAUNCHES[li], its verdict copied back (`copy`)
 * or written into mapped memory; both settings are undone after it. */
static xent_status checked_call(const dev_buf *d, const xt_problem *pb, int li, int copy) {
  xent_exec ex = cuda_exec(NULL, 0);
  xt_problem plain = *pb;
  if (CHECKED_LAUNCHES[li].plain) {
    plain.c.want_acc = plain.c.want_pred = 0;
    pb = &plain;
  }
  force_launch(CHECKED_LAUNCHES[li].launch);
  set_verdict_copy(copy);
  xent_status st = dev_call(d, pb, &ex);
  set_verdict_copy(0);
  force_two_read(0);
  return st;
}

/* Checked mode: a bad target makes the call fail naming the first bad row
 * and its value; logits and outputs stay bit-for-bit as they were, on every
 * kernel path. */
static void test_cuda_bad_target_checked(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_bad_target_checked");
  const int nl = (int)(sizeof CHECKED_LAUNCHES / sizeof CHECKED_LAUNCHES[0]);
  long errors = 0;
  struct {
    xent_dtype dt;
    xent_index_type tt;
    int64_t value;
    const char *value_s;
  } cases[] = {
      {XENT_BFLOAT16, XENT_INT64, 1005, "1005"},
      {XENT_FLOAT32, XENT_INT64, -3, "-3"},
      {XENT_FLOAT16, XENT_INT64, ((int64_t)1 << 32) + 1, "4294967297"},
      {XENT_BFLOAT16, XENT_INT64, INT64_MIN, "-9223372036854775808"},
      {XENT_BFLOAT16, XENT_INT32, 1000, "1000"},
      {XENT_FLOAT32, XENT_INT32, INT32_MIN, "-2147483648"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (g_quick && i % 2) continue;
    xt_case c = xt_case_default(cases[i].dt, 64, 1000);
    c.ttype = cases[i].tt;
    c.reduction = REDS[i % 3];
    c.ignore_frac = 0.0;
    xt_problem pb;
    assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
    xt_problem_set_target(&pb, 37, cases[i].value);
    xt_problem_set_target(&pb, 50, 77777); /* a later bad row: not the one named */
    xt_outbuf ob, back;
    assert_int_equal(xt_outbuf_make(&ob, &c), 0);
    assert_int_equal(xt_outbuf_make(&back, &c), 0);
    void *after = xt_alloc(pb.alloc_elems * pb.esize);
    assert_non_null(after);
    dev_buf d;
    dev_make(&d, &pb, &ob);
    for (int grad = 0; grad < 2; grad++)
      for (int li = 0; li < nl; li++) {
        if (!has_sm(CHECKED_LAUNCHES[li].sm) || (grad && CHECKED_LAUNCHES[li].nograd_only))
          continue;
        pb.c.grad = grad;
        dev_put(&d, &pb, &ob);
        const int copy = (li + grad) % 2; /* the verdict copied back, not mapped */
        xent_status st = checked_call(&d, &pb, li, copy);
        const char *msg = xent_last_error();
        char label[160];
        snprintf(label, sizeof label, "checked bad target %s targets[37] = %s (%s, %s%s)",
                 c.ttype == XENT_INT32 ? "int32" : "int64", cases[i].value_s,
                 grad ? "forward_grad" : "forward", CHECKED_LAUNCHES[li].name,
                 copy ? ", verdict copied" : "");
        if (st != XENT_ERROR_BAD_TARGET) {
          fprintf(stderr, "  [%s] status %d (%s), want XENT_ERROR_BAD_TARGET: %s\n", label,
                  (int)st, xent_status_string(st), msg);
          errors++;
        } else if (!xt_mentions(msg, "37") || !xt_mentions(msg, cases[i].value_s) ||
                   xt_mentions(msg, "50") || xt_mentions(msg, "77777")) {
          fprintf(stderr, "  [%s] message \"%s\" should name row 37 and %s only\n", label, msg,
                  cases[i].value_s);
          errors++;
        }
        dev_get(&d, &back, after);
        if (memcmp(after, pb.orig, pb.alloc_elems * pb.esize) != 0) {
          fprintf(stderr, "  [%s] logits written\n", label);
          errors++;
        }
        if (memcmp(back.loss, ob.loss, (size_t)(ob.count + 1) * 4) ||
            memcmp(back.z, ob.z, (size_t)(ob.count + 1) * 4) ||
            memcmp(back.acc, ob.acc, (size_t)(ob.count + 1) * 4) ||
            memcmp(back.lse, ob.lse, (size_t)(ob.rows + 1) * 4) ||
            memcmp(back.pred, ob.pred, (size_t)(ob.rows + 1) * 8)) {
          fprintf(stderr, "  [%s] outputs written\n", label);
          errors++;
        }
      }
    dev_free(&d);
    xt_free(after);
    xt_outbuf_free(&ob);
    xt_outbuf_free(&back);
    xt_problem_free(&pb);
  }
  /* A bad class weight, checked on the device. */
  {
    xt_case c = xt_case_default(XENT_BFLOAT16, 16, 3000);
    c.weighted = 1;
    xt_problem pb;
    assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
    pb.weights[1234] = NAN;
    xt_outbuf ob, back;
    assert_int_equal(xt_outbuf_make(&ob, &c), 0);
    assert_int_equal(xt_outbuf_make(&back, &c), 0);
    void *after = xt_alloc(pb.alloc_elems * pb.esize);
    assert_non_null(after);
    dev_buf d;
    dev_make(&d, &pb, &ob);
    for (int li = 0; li < nl; li++) { /* the general (weighted) kernels */
      if (!has_sm(CHECKED_LAUNCHES[li].sm)) continue;
      pb.c.grad = !CHECKED_LAUNCHES[li].nograd_only;
      dev_put(&d, &pb, &ob);
      xent_status st = checked_call(&d, &pb, li, li % 2);
      if (st != XENT_ERROR_BAD_WEIGHT || !xt_mentions(xent_last_error(), "weights")) {
        fprintf(stderr, "  [checked NaN weight, %s] status %d: \"%s\"\n",
                CHECKED_LAUNCHES[li].name, (int)st, xent_last_error());
        errors++;
      }
      dev_get(&d, &back, after);
      if (memcmp(after, pb.orig, pb.alloc_elems * pb.esize) != 0 ||
          memcmp(back.loss, ob.loss, (size_t)(ob.count + 1) * 4) != 0) {
        fprintf(stderr, "  [checked NaN weight, %s] buffers written on error\n",
                CHECKED_LAUNCHES[li].name);
        errors++;
      }
    }
    /* Valid input: the verdict copied back and the mapped one give the same
     * successful call, bit for bit. */
    pb.weights[1234] = 0.5f;
    pb.c.grad = 1;
    void *first = xt_alloc(pb.alloc_elems * pb.esize);
    assert_non_null(first);
    float loss[2];
    for (int copy = 0; copy < 2; copy++) {
      dev_put(&d, &pb, &ob);
      xent_status st = checked_call(&d, &pb, 0, copy); /* 0: the table */
      if (st != XENT_OK) {
        fprintf(stderr, "  [checked valid, verdict %s] status %d: %s\n",
                copy ? "copied" : "mapped", (int)st, xent_last_error());
        errors++;
      }
      dev_get(&d, &back, copy ? after : first);
      loss[copy] = back.loss[0];
    }
    if (!isfinite(loss[0]) || memcmp(&loss[0], &loss[1], sizeof loss[0]) != 0 ||
        memcmp(first, after, pb.alloc_elems * pb.esize) != 0) {
      fprintf(stderr, "  [checked valid] verdict mapped and copied differ: loss %.9g / %.9g\n",
              (double)loss[0], (double)loss[1]);
      errors++;
    }
    xt_free(first);
    dev_free(&d);
    xt_free(after);
    xt_outbuf_free(&ob);
    xt_outbuf_free(&back);
    xt_problem_free(&pb);
  }
  assert_int_equal(errors, 0);
}

/* Unchecked mode: a bad target is never used as an index; the call succeeds,
 * that row's loss is NaN (so a reduced loss is NaN), its gradient row zero,
 * and it counts in N (not in W). */
static void test_cuda_bad_target_unchecked(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_bad_target_unchecked");
  long errors = 0;
  int k = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++)
      for (int tt = 0; tt < 2; tt++, k++) {
        if (g_quick && (d + r + tt) % 3) continue;
        xt_case c = xt_case_default(DTYPES[d], 45, k % 2 ? 4095 : 50257);
        c.reduction = REDS[r];
        c.ttype = tt ? XENT_INT64 : XENT_INT32;
        c.check = XENT_TARGETS_UNCHECKED;
        c.bad_targets = 5;
        if (k % 3 == 1) xt_everything(&c);
        errors += cuda_run_case(&c, &rng, "cuda unchecked bad targets", (k % 2) ? RUN_TWO_READ : 0);
        /* Valid targets in unchecked mode: the same results as checked. */
        c.bad_targets = 0;
        errors += cuda_run_case(&c, &rng, "cuda unchecked valid targets", RUN_COMPARE_CPU);
      }
  assert_int_equal(errors, 0);
}

/* The elements of a deferred call's buffer that differ from what a rejected
 * call leaves: with a gradient, zero over every row's V logits and the
 * padding and guards as generated; without one, the logits as they were. */
static long rejected_buffer_errors(const xt_problem *pb, const void *after) {
  const int64_t off = (int64_t)((const char *)pb->logits - (const char *)pb->alloc) /
                      (int64_t)pb->esize;
  long bad = 0;
  for (int64_t i = 0; i < (int64_t)pb->alloc_elems; i++) {
    const int64_t k = i - off, r = k / pb->stride, j = k % pb->stride;
    const int row = k >= 0 && r < pb->c.rows && j < pb->c.vocab;
    const double want = pb->c.grad && row ? 0.0 : xt_load(pb->orig, pb->c.dtype, i);
    const double got = xt_load(after, pb->c.dtype, i);
    if (!(got == want || (isnan(got) && isnan(want)))) bad++;
  }
  return bad;
}

/* Deferred checks: valid targets give the checked mode's results and a
 * clean verdict; a bad target makes the loss NaN and the gradient zero (the
 * logits as they were without one), the call returns XENT_OK, and
 * xent_verdict_ready() turns 1 and xent_verdict_wait() names the first bad
 * row; a second deferred call before the check returns the first one's
 * error and writes nothing of its own. */
static void test_cuda_deferred(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_deferred");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 2; r++) { /* mean, sum */
      xt_case c = xt_case_default(DTYPES[d], 40, d == 1 ? 32000 : 4095);
      c.reduction = REDS[r];
      c.grad = (d + r) % 2 == 0 || d == 1; /* both, and the staged path's grad */
      c.check = XENT_TARGETS_DEFERRED;
      if (d == 2) xt_everything(&c);
      errors += cuda_run_case(&c, &rng, "cuda deferred, valid targets", RUN_COMPARE_CPU);
      if (check_deferred() != XENT_OK) {
        fprintf(stderr, "  deferred, valid targets: %s\n", xent_last_error());
        errors++;
      }
      /* a bad target: the framework's unchecked problem, run deferred */
      c.check = XENT_TARGETS_UNCHECKED;
      c.bad_targets = 1;
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      pb.c.check = XENT_TARGETS_DEFERRED;
      xt_outbuf ob;
      assert_int_equal(xt_outbuf_make(&ob, &pb.c), 0);
      dev_buf dv;
      dev_make(&dv, &pb, &ob);
      void *after = xt_alloc(pb.alloc_elems * pb.esize);
      xent_exec ex = cuda_exec(NULL, 0);
      /* call 0 leaves its bad verdict pending; call 1 finds it, fails with
       * it and runs nothing; call 2 runs and leaves its own pending */
      for (int k = 0; k < 3; k++) {
        xent_status st = dev_call(&dv, &pb, &ex);
        if (st != (k == 1 ? XENT_ERROR_BAD_TARGET : XENT_OK) ||
            (k == 1 && !strstr(xent_last_error(), "earlier"))) {
          fprintf(stderr, "  deferred, bad target, call %d: status %d: %s\n", k, (int)st,
                  xent_last_error());
          errors++;
        }
      }
      dev_get(&dv, &ob, after);
      const long wrong = rejected_buffer_errors(&pb, after);
      if (wrong) {
        fprintf(stderr, "  deferred, bad target, grad %d: %ld elements not as rejected\n",
                pb.c.grad, wrong);
        errors++;
      }
      if (!xent_verdict_ready(g_verdict)) { /* dev_get synchronised */
        fprintf(stderr, "  deferred, bad target: verdict not ready after a sync\n");
        errors++;
      }
      if (!isnan(ob.loss[0]) || xt_is_poison_f32(ob.loss[0])) {
        fprintf(stderr, "  deferred, bad target: loss %g, want NaN\n", (double)ob.loss[0]);
        errors++;
      }
      /* the second call resolved the first; what is pending is the third's */
      xent_status st = check_deferred();
      if (st != XENT_ERROR_BAD_TARGET || !strstr(xent_last_error(), "targets[0]")) {
        fprintf(stderr, "  deferred, bad target: check %d: %s\n", (int)st, xent_last_error());
        errors++;
      }
      assert_int_equal(check_deferred(), XENT_OK); /* nothing pending now */
      xt_free(after);
      dev_free(&dv);
      xt_outbuf_free(&ob);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* xent_backward_rescale: a second backward with another upstream gradient
 * (per row and scalar) gives the gradient times the new one, and leaves it
 * as the factor applied; a factor equal to the applied one changes nothing. */
static void test_cuda_backward_rescale(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_backward_rescale");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int per_row = 0; per_row < 2; per_row++) {
      const int64_t R = 37, V = 5003;
      const size_t es = d == 0 ? 4 : 2, bytes = (size_t)R * V * es;
      void *h = xt_alloc(bytes), *h2 = xt_alloc(bytes), *dg;
      for (int64_t i = 0; i < R * V; i++) xt_store(h, DTYPES[d], i, xt_normal(&rng));
      CK(cudaMalloc(&dg, bytes));
      h2d(dg, h, bytes);
      const int64_t n = per_row ? R : 1;
      float go1[37], go2[37], ap[37];
      for (int64_t i = 0; i < n; i++) {
        go1[i] = (float)(0.5 + xt_uniform(&rng));
        go2[i] = i % 5 == 0 ? go1[i] : (float)(2.0 * xt_uniform(&rng) - 1.0);
        ap[i] = 1.0f;
      }
      float *dgo, *dap;
      CK(cudaMalloc((void **)&dgo, 2 * 37 * sizeof(float)));
      dap = dgo + 37;
      xent_exec ex = cuda_exec(NULL, 0);
      h2d(dap, ap, (size_t)n * 4);
      h2d(dgo, go1, (size_t)n * 4);
      assert_int_equal(xent_backward_rescale(dg, DTYPES[d], R, V, 0, dgo, dap, n, &ex), XENT_OK);
      h2d(dgo, go2, (size_t)n * 4);
      assert_int_equal(xent_backward_rescale(dg, DTYPES[d], R, V, 0, dgo, dap, n, &ex), XENT_OK);
      sync_stream();
      d2h(h2, dg, bytes);
      d2h(ap, dap, (size_t)n * 4);
      sync_stream();
      const xt_tol t = xt_tol_for(DTYPES[d]);
      for (int64_t i = 0; i < n; i++)
        if (ap[i] != go2[i]) {
          fprintf(stderr, "  rescale: applied[%lld] = %g, want %g\n", (long long)i, (double)ap[i],
                  (double)go2[i]);
          errors++;
        }
      for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < V; j++) {
          const double x = xt_load(h, DTYPES[d], r * V + j), g = per_row ? go2[r] : go2[0];
          const double got = xt_load(h2, DTYPES[d], r * V + j);
          if (!(fabs(got - x * g) <= 3.0 * t.scale_rtol * fabs(x * g) + t.grad_abs)) {
            fprintf(stderr, "  rescale %s: [%lld, %lld] = %g, want %g\n", xt_dtype_name(DTYPES[d]),
                    (long long)r, (long long)j, got, x * g);
            errors++;
            r = R;
            break;
          }
        }
      CK(cudaFree(dg));
      CK(cudaFree(dgo));
      xt_free(h);
      xt_free(h2);
    }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */
/* ------------------------------------------------------------------------ */

static void test_cuda_backward(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_backward");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      if (g_quick && d != r) continue;
      const int64_t vocabs[] = {4095, 7, 50257, 1};
      const int64_t V = vocabs[(d * 3 + r) % 4];
      xt_case c = xt_backward_case(DTYPES[d], 33, V, REDS[r]);
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      char desc[900];
      describe(&c, "cuda backward", desc, sizeof desc);
      xt_outbuf ob;
      assert_int_equal(xt_outbuf_make(&ob, &c), 0);
      size_t bytes = pb.alloc_elems * pb.esize;
      void *grad = xt_alloc(bytes), *after = xt_alloc(bytes), *first = xt_alloc(bytes);
      assert_true(grad && after && first);
      dev_buf dv;
      dev_make(&dv, &pb, &ob);
      xent_exec ex = cuda_exec(NULL, 0);
      assert_int_equal(dev_call(&dv, &pb, &ex), XENT_OK);
      dev_get(&dv, &ob, grad); /* the gradient, checked once here */
      errors += xt_check(&pb, &ob, grad, desc);
      const int64_t R = c.rows;
      float *d_go;
      CK(cudaMalloc((void **)&d_go, (size_t)R * sizeof(float)));

      if (c.reduction != XENT_REDUCTION_NONE) {
        const float scalars[] = {0.37f, -2.5f, 0.0f, 1e-3f, 1.0f, 3.0e4f};
        for (int i = 0; i < 6; i++) {
          if (g_quick && i % 2) continue;
          float go = scalars[i];
          /* Device scalar. */
          h2d(dv.alloc, grad, bytes);
          h2d(d_go, &go, sizeof go);
          xent_status st = xent_backward(dv.logits, c.dtype, R, V, c.stride, d_go, 1, &ex);
          dev_get(&dv, &ob, after);
          if (st != XENT_OK) {
            fprintf(stderr, "  [%s] xent_backward(%g): %s\n", desc, (double)go, xent_last_error());
            errors++;
            continue;
          }
          errors += xt_check_scaled(&pb, grad, after, &go, 1, desc); /* 1: bit-identical */
          memcpy(first, after, bytes);
          /* Host scalar: the same bits. */
          h2d(dv.alloc, grad, bytes);
          st = xent_backward_scale(dv.logits, c.dtype, R, V, c.stride, go, &ex);
          dev_get(&dv, &ob, after);
          if (st != XENT_OK || memcmp(first, after, bytes) != 0) {
            fprintf(stderr, "  [%s] xent_backward_scale(%g) differs from the device scalar (%s)\n",
                    desc, (double)go, st ? xent_last_error() : "bits");
            errors++;
          }
        }
      } else {
        float *go = xt_alloc((size_t)R * sizeof(float));
        assert_non_null(go);
        xt_grad_outputs(go, R, &rng);
        h2d(dv.alloc, grad, bytes);
        h2d(d_go, go, (size_t)R * sizeof(float));
        xent_status st = xent_backward(dv.logits, c.dtype, R, V, c.stride, d_go, R, &ex);
        dev_get(&dv, &ob, after);
        if (st != XENT_OK) {
          fprintf(stderr, "  [%s] xent_backward(per row): %s\n", desc, xent_last_error());
          errors++;
        } else {
          errors += xt_check_scaled(&pb, grad, after, go, R, desc);
        }
        for (int64_t i = 0; i < R; i++) go[i] = 1.0f;
        h2d(dv.alloc, grad, bytes);
        h2d(d_go, go, (size_t)R * sizeof(float));
        st = xent_backward(dv.logits, c.dtype, R, V, c.stride, d_go, R, &ex);
        dev_get(&dv, &ob, after);
        if (st != XENT_OK || memcmp(after, grad, bytes) != 0) {
          fprintf(stderr, "  [%s] per-row grad_output of ones changed the gradient\n", desc);
          errors++;
        }
        xt_free(go);
      }
      /* Bad backward arguments on the device side. */
      {
        h2d(dv.alloc, grad, bytes);
        sync_stream();
        float host_go = 2.0f;
        xent_status st = xent_backward(dv.logits, c.dtype, R, V, c.stride, &host_go, 1, &ex);
        if (st != XENT_ERROR_BAD_ARGUMENT || !xt_mentions(xent_last_error(), "grad_output")) {
          fprintf(stderr, "  [%s] host grad_output with backend CUDA: status %d \"%s\"\n", desc,
                  (int)st, xent_last_error());
          errors++;
        }
        dev_get(&dv, &ob, after);
        if (memcmp(after, grad, bytes) != 0) {
          fprintf(stderr, "  [%s] failed backward wrote the gradient\n", desc);
          errors++;
        }
      }
      CK(cudaFree(d_go));
      dev_free(&dv);
      xt_free(grad);
      xt_free(after);
      xt_free(first);
      xt_outbuf_free(&ob);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Workspace, determinism, argument checks on the device side                */
/* ------------------------------------------------------------------------ */

/* Run pb (restored) on the device; results into ob / after. */
static xent_status run_into(xt_problem *pb, dev_buf *d, xt_outbuf *ob, void *after,
                            const xent_exec *ex) {
  xt_problem_restore(pb);
  xt_outbuf_poison(ob);
  dev_put(d, pb, ob);
  xent_status st = dev_call(d, pb, ex);
  dev_get(d, ob, after);
  return st;
}

static void test_cuda_workspace_and_determinism(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_workspace_and_determinism");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r++) {
      if (g_quick && d != r) continue;
      xt_case c = xt_case_default(DTYPES[d], g_quick ? 16 : 96, (r == 1) ? 4095 : 32000);
      c.reduction = REDS[r];
      xt_everything(&c);
      xt_problem pb;
      assert_int_equal(xt_problem_make(&pb, &c, &rng), 0);
      char desc[900];
      describe(&c, "cuda workspace/determinism", desc, sizeof desc);
      size_t bytes = pb.alloc_elems * pb.esize;
      xt_outbuf a, b;
      assert_int_equal(xt_outbuf_make(&a, &c), 0);
      assert_int_equal(xt_outbuf_make(&b, &c), 0);
      void *aa = xt_alloc(bytes), *bb = xt_alloc(bytes);
      assert_true(aa && bb);
      dev_buf dv;
      dev_make(&dv, &pb, &a);
      size_t wsb = xent_workspace_size(c.rows);
      void *ws;
      CK(cudaMalloc(&ws, wsb));
      CK(cudaMemsetAsync(ws, 0x7F, wsb, g_stream)); /* garbage in the workspace */

      xent_exec ex_null = cuda_exec(NULL, 0), ex_ws = cuda_exec(ws, wsb);
      assert_int_equal(run_into(&pb, &dv, &a, aa, &ex_null), XENT_OK);
      errors += xt_check(&pb, &a, aa, desc);
      for (int two = 0; two < 2; two++) {
        force_two_read(two);
        char d2[1000];
        if (two) { /* the reference run of this path */
          assert_int_equal(run_into(&pb, &dv, &a, aa, &ex_null), XENT_OK);
          snprintf(d2, sizeof d2, "%s two-read", desc);
          errors += xt_check(&pb, &a, aa, d2);
        }
        /* Workspace given vs NULL: bit-identical. */
        assert_int_equal(run_into(&pb, &dv, &b, bb, &ex_ws), XENT_OK);
        snprintf(d2, sizeof d2, "%s%s: workspace vs NULL", desc, two ? " two-read" : "");
        errors += xt_compare_bits(&pb, &a, aa, &b, bb, d2);
        /* Run again: bit-identical. */
        assert_int_equal(run_into(&pb, &dv, &b, bb, &ex_null), XENT_OK);
        snprintf(d2, sizeof d2, "%s%s: second run", desc, two ? " two-read" : "");
        errors += xt_compare_bits(&pb, &a, aa, &b, bb, d2);
        /* Ordinary launches instead of programmatic ones (sm_90+), and every
         * launch programmatic (clustered forwards too): the same bits. */
        for (int pdl = 1; pdl <= 2; pdl++) {
          set_programmatic(pdl);
          xent_status pst = run_into(&pb, &dv, &b, bb, &ex_ws);
          set_programmatic(0);
          assert_int_equal(pst, XENT_OK);
          snprintf(d2, sizeof d2, "%s%s: %s launches", desc, two ? " two-read" : "",
                   pdl == 2 ? "all programmatic" : "ordinary");
          errors += xt_compare_bits(&pb, &a, aa, &b, bb, d2);
        }
        /* The legacy default stream gives the same bits. */
        xent_exec ex_legacy = cuda_exec(NULL, 0);
        ex_legacy.stream = NULL;
        xt_problem_restore(&pb);
        xt_outbuf_poison(&b);
        dev_put(&dv, &pb, &b);
        xent_status st = dev_call(&dv, &pb, &ex_legacy);
        CK(cudaDeviceSynchronize());
        dev_get(&dv, &b, bb);
        assert_int_equal(st, XENT_OK);
        snprintf(d2, sizeof d2, "%s%s: legacy stream", desc, two ? " two-read" : "");
        errors += xt_compare_bits(&pb, &a, aa, &b, bb, d2);
        force_two_read(0);
      }

      /* A workspace that is too small or misaligned is refused, nothing written. */
      {
        xt_problem_restore(&pb);
        xt_outbuf_poison(&b);
        dev_put(&dv, &pb, &b);
        xent_exec bad1 = cuda_exec(ws, wsb - 1);
        xent_exec bad2 = cuda_exec((char *)ws + 128, wsb - 128);
        xent_status s1 = dev_call(&dv, &pb, &bad1);
        char m1[512];
        snprintf(m1, sizeof m1, "%s", xent_last_error());
        xent_status s2 = dev_call(&dv, &pb, &bad2);
        char m2[512];
        snprintf(m2, sizeof m2, "%s", xent_last_error());
        if (s1 != XENT_ERROR_BAD_ARGUMENT || !xt_mentions(m1, "workspace_bytes")) {
          fprintf(stderr, "  [%s] small workspace: status %d \"%s\"\n", desc, (int)s1, m1);
          errors++;
        }
        if (s2 != XENT_ERROR_BAD_ARGUMENT || !xt_mentions(m2, "workspace")) {
          fprintf(stderr, "  [%s] misaligned workspace: status %d \"%s\"\n", desc, (int)s2, m2);
          errors++;
        }
        /* A host pointer among device pointers is refused too. */
        xent_input in = dev_input(&dv, &pb);
        xent_options opt = xt_case_options(&c);
        xent_output out = dev_output(&dv, &c);
        out.lse = b.lse; /* host memory */
        xent_status s3 = xent_forward_grad(&in, &opt, &out, &ex_null);
        if (s3 != XENT_ERROR_BAD_ARGUMENT || !xt_mentions(xent_last_error(), "lse")) {
          fprintf(stderr, "  [%s] host lse with device logits: status %d \"%s\"\n", desc, (int)s3,
                  xent_last_error());
          errors++;
        }
        xt_outbuf back;
        assert_int_equal(xt_outbuf_make(&back, &c), 0);
        dev_get(&dv, &back, bb);
        if (memcmp(bb, pb.orig, bytes) != 0 ||
            memcmp(back.loss, b.loss, (size_t)(b.count + 1) * 4) != 0 ||
            !xt_is_poison_f32(b.lse[0])) {
          fprintf(stderr, "  [%s] a refused call wrote something\n", desc);
          errors++;
        }
        xt_outbuf_free(&back);
      }
      /* AUTO finds the device from the logits pointer (default launch table,
       * compared with a fresh default-path run). */
      assert_int_equal(run_into(&pb, &dv, &a, aa, &ex_null), XENT_OK);
      {
        xent_exec ex_auto = xent_exec_default();
        ex_auto.stream = (void *)g_stream;
        xt_problem_restore(&pb);
        xt_outbuf_poison(&b);
        dev_put(&dv, &pb, &b);
        xent_status st = dev_call(&dv, &pb, &ex_auto);
        dev_get(&dv, &b, bb);
        if (st != XENT_OK) {
          fprintf(stderr, "  [%s] AUTO backend: %s\n", desc, xent_last_error());
          errors++;
        } else {
          char d2[1000];
          snprintf(d2, sizeof d2, "%s: AUTO", desc);
          errors += xt_compare_bits(&pb, &a, aa, &b, bb, d2);
        }
      }
      CK(cudaFree(ws));
      dev_free(&dv);
      xt_free(aa);
      xt_free(bb);
      xt_outbuf_free(&a);
      xt_outbuf_free(&b);
      xt_problem_free(&pb);
    }
  assert_int_equal(errors, 0);
}

/* rows == 0 on the device: mean NaN, sum 0, none writes nothing. */
static void test_cuda_rows_zero(void **state) {
  (void)state;
  require_gpu();
  long errors = 0;
  float *d_out;
  CK(cudaMalloc((void **)&d_out, 4 * 2 * sizeof(float)));
  void *d_logits;
  CK(cudaMalloc(&d_logits, 256));
  /* backend CUDA; AUTO with device logits; AUTO with no logits at all (the
   * outputs decide); every reduction; the mean's two rules */
  for (int how = 0; how < 3; how++)
  for (int r = 0; r < 4; r++)
    for (int grad = 0; grad < 2; grad++) {
      float host[8];
      xt_poison_f32(host, 8);
      h2d(d_out, host, sizeof host);
      sync_stream();
      xent_input in = {how == 2 ? NULL : d_logits, XENT_BFLOAT16, 0, 100, 0, NULL, XENT_INT64,
                       NULL};
      xent_options opt = xent_options_default();
      opt.reduction = REDS[r % 3];
      const int zero_rule = r == 3; /* a mean, by the rule of 0 */
      if (zero_rule) opt.empty_mean = XENT_EMPTY_MEAN_ZERO;
      xent_output out = {d_out, d_out + 2, d_out + 4, NULL, NULL};
      xent_exec ex = cuda_exec(NULL, 0);
      if (how) {
        ex.backend = XENT_BACKEND_AUTO;
        ex.device = 0;
      }
      xent_status st = xt_forward(grad, &in, &opt, &out, &ex);
      sync_stream();
      d2h(host, d_out, sizeof host);
      sync_stream();
      const char *rn = xt_reduction_name(REDS[r % 3]);
      if (st != XENT_OK) {
        fprintf(stderr, "  [rows 0 %s, %s] status %d: %s\n", rn,
                how == 0 ? "CUDA" : how == 1 ? "AUTO" : "AUTO, no logits", (int)st,
                xent_last_error());
        errors++;
        continue;
      }
      if (REDS[r % 3] == XENT_REDUCTION_NONE) {
        for (int i = 0; i < 8; i++)
          if (!xt_is_poison_f32(host[i])) {
            fprintf(stderr, "  [rows 0 none] wrote output %d\n", i);
            errors++;
            break;
          }
        continue;
      }
      int mean = REDS[r % 3] == XENT_REDUCTION_MEAN && !zero_rule;
      int ok_loss = mean ? (isnan(host[0]) && !xt_is_poison_f32(host[0])) : host[0] == 0.0f;
      int ok_z = mean ? (isnan(host[2]) && !xt_is_poison_f32(host[2])) : host[2] == 0.0f;
      int ok_acc = zero_rule ? host[4] == 0.0f : isnan(host[4]) && !xt_is_poison_f32(host[4]);
      int canaries = xt_is_poison_f32(host[1]) && xt_is_poison_f32(host[3]) && xt_is_poison_f32(host[5]);
      if (!ok_loss || !ok_z || !ok_acc || !canaries) {
        fprintf(stderr, "  [rows 0 %s] loss %g z %g acc %g (canaries %s)\n", rn, (double)host[0],
                (double)host[2], (double)host[4], canaries ? "ok" : "written");
        errors++;
      }
    }
  CK(cudaFree(d_out));
  CK(cudaFree(d_logits));
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* CUDA graphs                                                               */
/* ------------------------------------------------------------------------ */

/* Capture forward_grad + backward (device grad_output, unchecked targets) on
 * the stream, then replay it with new data copied into the same buffers; each
 * replay must give what an eager call gives, scaled by grad_output. */
static long graph_case(xent_dtype dt, xent_reduction red, int explicit_ws, xt_rng *rng) {
  long errors = 0;
  const int64_t R = g_quick ? 24 : 64, V = g_quick ? 4095 : 32000;
  xt_case c = xt_case_default(dt, R, V);
  xt_everything(&c);
  c.reduction = red;
  c.check = XENT_TARGETS_UNCHECKED;
  c.stride = V + 8;
  char desc[900];
  describe(&c, explicit_ws ? "cuda graph (workspace)" : "cuda graph (NULL workspace)", desc,
           sizeof desc);

  xt_problem pb;
  if (xt_problem_make(&pb, &c, rng) != 0) return 1;
  size_t bytes = pb.alloc_elems * pb.esize;
  xt_outbuf ob, eager, replay;
  assert_int_equal(xt_outbuf_make(&ob, &c), 0);
  assert_int_equal(xt_outbuf_make(&eager, &c), 0);
  assert_int_equal(xt_outbuf_make(&replay, &c), 0);
  void *g_eager = xt_alloc(bytes), *g_replay = xt_alloc(bytes);
  assert_true(g_eager && g_replay);
  dev_buf d;
  dev_make(&d, &pb, &ob);
  const int64_t count = red == XENT_REDUCTION_NONE ? R : 1;
  float *d_go, *go = xt_alloc((size_t)R * sizeof(float));
  assert_non_null(go);
  CK(cudaMalloc((void **)&d_go, (size_t)R * sizeof(float)));
  for (int64_t i = 0; i < R; i++) go[i] = 1.0f;
  h2d(d_go, go, (size_t)R * sizeof(float));
  void *ws = NULL;
  size_t wsb = 0;
  if (explicit_ws) {
    wsb = xent_workspace_size(R);
    CK(cudaMalloc(&ws, wsb));
  }
  xent_exec ex = cuda_exec(ws, wsb);
  xent_input in = dev_input(&d, &pb);
  xent_options opt = xt_case_options(&c);
  xent_output out = dev_output(&d, &c);

  /* Warm up eagerly (module loading, first-call work), then capture. */
  assert_int_equal(xent_forward_grad(&in, &opt, &out, &ex), XENT_OK);
  assert_int_equal(xent_backward(d.logits, dt, R, V, c.stride, d_go, count, &ex), XENT_OK);
  sync_stream();

  cudaGraph_t graph = NULL;
  cudaGraphExec_t gexec = NULL;
  CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
  xent_status s1 = xent_forward_grad(&in, &opt, &out, &ex);
  char m1[512];
  snprintf(m1, sizeof m1, "%s", xent_last_error());
  xent_status s2 = xent_backward(d.logits, dt, R, V, c.stride, d_go, count, &ex);
  char m2[512];
  snprintf(m2, sizeof m2, "%s", xent_last_error());
  cudaError_t ce = cudaStreamEndCapture(g_stream, &graph);
  if (s1 != XENT_OK || s2 != XENT_OK || ce != cudaSuccess) {
    fprintf(stderr, "  [%s] capture failed: forward_grad %d \"%s\", backward %d \"%s\", end capture: %s\n",
            desc, (int)s1, m1, (int)s2, m2, cudaGetErrorString(ce));
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    errors++;
    goto done;
  }
  CK(cudaGraphInstantiate(&gexec, graph, 0));

  for (int rep = 0; rep < (g_quick ? 2 : 4); rep++) {
    /* New data of the same shape in the same buffers. */
    xt_problem_free(&pb);
    c.ignore_frac = 0.05 + 0.15 * rep;
    c.bad_targets = (rep == 2) ? 2 : 0;
    if (xt_problem_make(&pb, &c, rng) != 0) {
      errors++;
      break;
    }
    for (int64_t i = 0; i < R; i++) go[i] = (float)(0.25 + 2.0 * xt_uniform(rng));
    if (rep == 1)
      for (int64_t i = 0; i < R; i++) go[i] = 1.0f; /* grad_output 1: bit-identical */
    char d2[1000];
    snprintf(d2, sizeof d2, "%s replay %d", desc, rep);

    /* Eager: forward_grad only, checked against the reference. */
    xt_outbuf_poison(&eager);
    dev_put(&d, &pb, &eager);
    xent_status st = xent_forward_grad(&in, &opt, &out, &ex);
    dev_get(&d, &eager, g_eager);
    if (st != XENT_OK) {
      fprintf(stderr, "  [%s] eager forward_grad: %s\n", d2, xent_last_error());
      errors++;
      continue;
    }
    errors += xt_check(&pb, &eager, g_eager, d2);

    /* The graph: forward_grad + backward. */
    xt_problem_restore(&pb);
    xt_outbuf_poison(&replay);
    h2d(d_go, go, (size_t)R * sizeof(float));
    dev_put(&d, &pb, &replay);
    CK(cudaGraphLaunch(gexec, g_stream));
    dev_get(&d, &replay, g_replay);
    errors += xt_compare_bits(&pb, &eager, NULL, &replay, NULL, d2);
    errors += xt_check_scaled(&pb, g_eager, g_replay, go, count, d2);
  }

done:
  if (gexec) CK(cudaGraphExecDestroy(gexec));
  if (graph) CK(cudaGraphDestroy(graph));
  if (ws) CK(cudaFree(ws));
  CK(cudaFree(d_go));
  xt_free(go);
  dev_free(&d);
  xt_free(g_eager);
  xt_free(g_replay);
  xt_outbuf_free(&ob);
  xt_outbuf_free(&eager);
  xt_outbuf_free(&replay);
  xt_problem_free(&pb);
  return errors;
}

static void test_cuda_graph(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_graph");
  long errors = 0;
  for (int d = 0; d < 3; d++)
    for (int r = 0; r < 3; r += 2) /* mean (scalar) and none (per row) */
      for (int ws = 0; ws < 2; ws++) {
        if (g_quick && d != 1) continue;
        errors += graph_case(DTYPES[d], REDS[r], ws, &rng);
      }
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* Memory: O(BT) scratch, never a BT x V buffer                              */
/* ------------------------------------------------------------------------ */

static void fill_bf16_random(uint16_t *p, size_t n, xt_rng *rng) {
  for (size_t i = 0; i < n; i++) p[i] = xt_f32_to_bf16((float)(2.0 * xt_normal(rng)));
}

static void test_cuda_peak_memory(void **state) {
  (void)state;
  require_gpu();
  xt_rng rng = xt_rng_for("test_cuda_peak_memory");
  long errors = 0;
  /* Large enough (131 MB) that a BT x V buffer cannot hide in the pool's
   * allocation granularity, also in the quick subset. */
  const int64_t R = 512, V = 128256;
  const size_t buf = (size_t)R * (size_t)V * 2;
  uint16_t *host = xt_alloc(buf);
  int64_t *t = xt_alloc((size_t)R * 8);
  assert_true(host && t);
  fill_bf16_random(host, (size_t)R * (size_t)V, &rng);
  for (int64_t r = 0; r < R; r++) t[r] = r % 10 == 0 ? -100 : xt_randint(&rng, V);
  void *d_x, *d_t;
  float *d_loss, *d_go;
  CK(cudaMalloc(&d_x, buf));
  CK(cudaMalloc(&d_t, (size_t)R * 8));
  CK(cudaMalloc((void **)&d_loss, 2 * sizeof(float)));
  CK(cudaMalloc((void **)&d_go, sizeof(float)));
  float half = 0.5f;
  h2d(d_t, t, (size_t)R * 8);
  h2d(d_go, &half, sizeof half);
  xent_input in = {d_x, XENT_BFLOAT16, R, V, 0, d_t, XENT_INT64, NULL};
  xent_options opt = xent_options_default();
  opt.label_smoothing = 0.1f;
  opt.lse_square_scale = 1e-4f;
  xent_output out = {d_loss, NULL, NULL, NULL, NULL};

  cudaMemPool_t pool;
  CK(cudaDeviceGetDefaultMemPool(&pool, 0));
  const size_t ws_size = xent_workspace_size(R);

  for (int explicit_ws = 0; explicit_ws < 2; explicit_ws++) {
    void *ws = NULL;
    if (explicit_ws) CK(cudaMalloc(&ws, ws_size));
    xent_exec ex = cuda_exec(ws, explicit_ws ? ws_size : 0);
    /* Warm-up (module loading happens once). */
    h2d(d_x, host, buf);
    assert_int_equal(xent_forward_grad(&in, &opt, &out, &ex), XENT_OK);
    assert_int_equal(xent_backward(d_x, XENT_BFLOAT16, R, V, 0, d_go, 1, &ex), XENT_OK);
    h2d(d_x, host, buf);
    sync_stream();

    uint64_t zero = 0, used_high = 0, reserved_high = 0;
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
    size_t free0, free1, free2, total;
    CK(cudaMemGetInfo(&free0, &total));
    xent_status s1 = xent_forward_grad(&in, &opt, &out, &ex);
    xent_status s2 = xent_backward(d_x, XENT_BFLOAT16, R, V, 0, d_go, 1, &ex);
    CK(cudaMemGetInfo(&free1, &total));
    sync_stream();
    CK(cudaMemGetInfo(&free2, &total));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high));
    CK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high));
    float loss;
    d2h(&loss, d_loss, sizeof loss);
    sync_stream();
    long long drop = (long long)free0 - (long long)(free1 < free2 ? free1 : free2);
    print_message("peak memory (%s workspace, BT=%" PRId64 " V=%" PRId64 ", buffer %zu bytes): "
                  "pool used high %llu, reserved high %llu, workspace_size %zu, free-memory drop %lld\n",
                  explicit_ws ? "explicit" : "NULL", R, V, buf, (unsigned long long)used_high,
                  (unsigned long long)reserved_high, ws_size, drop);
    if (s1 != XENT_OK || s2 != XENT_OK || !isfinite(loss)) {
      fprintf(stderr, "  [peak memory] calls: %d %d (%s), loss %g\n", (int)s1, (int)s2,
              xent_last_error(), (double)loss);
      errors++;
    }
    if (explicit_ws) {
      if (used_high != 0) {
        fprintf(stderr, "  [peak memory] with a workspace the pool was used: %llu bytes\n",
                (unsigned long long)used_high);
        errors++;
      }
    } else if (used_high > ws_size) {
      fprintf(stderr, "  [peak memory] pool high-water mark %llu > xent_workspace_size(%" PRId64 ") = %zu\n",
              (unsigned long long)used_high, R, ws_size);
      errors++;
    }
    if (reserved_high >= buf / 2) {
      fprintf(stderr, "  [peak memory] pool reserved %llu bytes: a BT x V buffer?\n",
              (unsigned long long)reserved_high);
      errors++;
    }
    if (drop >= (long long)(buf / 2)) {
      fprintf(stderr, "  [peak memory] free device memory dropped by %lld bytes (buffer %zu)\n",
              drop, buf);
      errors++;
    }
    if (ws) CK(cudaFree(ws));
  }
  CK(cudaFree(d_x));
  CK(cudaFree(d_t));
  CK(cudaFree(d_loss));
  CK(cudaFree(d_go));
  xt_free(host);
  xt_free(t);
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */
/* BT x V beyond 2^31 elements                                               */
/* ------------------------------------------------------------------------ */

/* Fill rows [0, R) of the device logits with pool[r % P]. */
static void fill_from_pool(void *d_x, const uint16_t *pool, int64_t P, int64_t R, int64_t V) {
  const size_t row_bytes = (size_t)V * 2;
  for (int64_t r0 = 0; r0 < R; r0 += P) {
    int64_t n = R - r0 < P ? R - r0 : P;
    h2d((char *)d_x + (size_t)r0 * row_bytes, pool, (size_t)n * row_bytes);
  }
  sync_stream();
}

static void test_cuda_large_extent(void **state) {
  (void)state;
  require_gpu();
  if (g_quick) skip();
  const int64_t V = 131072, R = 16400, P = 97; /* R x V = 2,149,580,800 > 2^31 */
  const size_t elems = (size_t)R * (size_t)V, guard = 4096;
  const size_t bytes = elems * 2 + guard;
  size_t free0, total;
  CK(cudaMemGetInfo(&free0, &total));
  if (free0 < bytes + ((size_t)1 << 30)) {
    print_message("large extent: %zu bytes free, %zu needed: skipped\n", free0, bytes);
    skip();
  }
  xt_rng rng = xt_rng_for("test_cuda_large_extent");
  long errors = 0;
  xt_tol tol = xt_tol_for(XENT_BFLOAT16);

  /* P distinct rows; row r of the problem is pool row r % P (97 is prime, so
   * rows 2^14 apart, where a 32-bit element offset would wrap, differ). */
  uint16_t *pool = xt_alloc((size_t)P * (size_t)V * 2);
  double *xd = malloc((size_t)P * (size_t)V * sizeof(double));
  int64_t *t = xt_alloc((size_t)R * 8);
  float *row_loss = xt_alloc((size_t)(R + 1) * sizeof(float));
  float *lse = xt_alloc((size_t)(R + 1) * sizeof(float));
  uint16_t *grow = xt_alloc((size_t)V * 2);
  double *gref = malloc((size_t)V * sizeof(double));
  unsigned char *guard_host = xt_alloc(guard);
  assert_true(pool && xd && t && row_loss && lse && grow && gref && guard_host);
  fill_bf16_random(pool, (size_t)P * (size_t)V, &rng);
  for (size_t i = 0; i < (size_t)P * (size_t)V; i++) xd[i] = xt_bf16_to_f32(pool[i]);
  for (int64_t r = 0; r < R; r++) t[r] = xt_uniform(&rng) < 0.05 ? -100 : xt_randint(&rng, V);

  void *d_x, *d_t;
  float *d_loss, *d_lse;
  CK(cudaMalloc(&d_x, bytes));
  CK(cudaMalloc(&d_t, (size_t)R * 8));
  CK(cudaMalloc((void **)&d_loss, (size_t)(R + 1) * sizeof(float)));
  CK(cudaMalloc((void **)&d_lse, (size_t)(R + 1) * sizeof(float)));
  h2d(d_t, t, (size_t)R * 8);
  CK(cudaMemsetAsync((char *)d_x + elems * 2, 0x7F, guard, g_stream));
  fill_from_pool(d_x, pool, P, R, V);
  xt_poison_f32(row_loss, R + 1);
  xt_poison_f32(lse, R + 1);
  h2d(d_loss, row_loss, (size_t)(R + 1) * sizeof(float));
  h2d(d_lse, lse, (size_t)(R + 1) * sizeof(float));

  xt_params p = {V, -100, XENT_REDUCTION_MEAN, (double)0.1f, (double)1e-4f, 0, 0.0, NULL, 0};
  xent_input in = {d_x, XENT_BFLOAT16, R, V, 0, d_t, XENT_INT64, NULL};
  xent_options opt = xent_options_default();
  opt.label_smoothing = 0.1f;
  opt.lse_square_scale = 1e-4f;
  xent_output out = {d_loss, NULL, NULL, NULL, d_lse};
  xent_exec ex = cuda_exec(NULL, 0);

  /* 1. mean with the gradient. */
  xent_status st = xent_forward_grad(&in, &opt, &out, &ex);
  float mean_loss = NAN;
  d2h(&mean_loss, d_loss, sizeof(float));
  d2h(lse, d_lse, (size_t)(R + 1) * sizeof(float));
  sync_stream();
  if (st != XENT_OK) {
    fprintf(stderr, "  [large extent] forward_grad: %s\n", xent_last_error());
    errors++;
    goto out;
  }
  int64_t n_valid;
  double w_valid, scale_loss, scale_z;
  xt_scales(&p, t, R, &n_valid, &w_valid, &scale_loss, &scale_z);
  int64_t sample[24] = {0, 1, 2, 96, 97, 8191, 8192, 16383, 16384, 16385, 16386, 16398, 16399, R / 2};
  int ns = 14;
  while (ns < 24) sample[ns++] = xt_randint(&rng, R);
  double mag_sum = 0.0;
  for (int i = 0; i < ns; i++) {
    int64_t r = sample[i];
    const double *x = xd + (r % P) * V;
    xt_row W;
    xt_ref_row(&p, x, t[r], scale_loss, scale_z, &W, gref);
    d2h(grow, (char *)d_x + (size_t)r * (size_t)V * 2, (size_t)V * 2);
    sync_stream();
    long bad = 0;
    for (int64_t j = 0; j < V; j++) {
      double got = xt_bf16_to_f32(grow[j]);
      double want = xt_round(gref[j], XENT_BFLOAT16);
      if (W.ignored ? got != 0.0 : !xt_grad_close(&tol, got, want, W.gscale)) {
        if (bad < 5)
          fprintf(stderr, "  [large extent] row %" PRId64 " col %" PRId64 ": %.9g, want %.9g\n", r,
                  j, got, want);
        bad++;
      }
    }
    errors += bad;
    if (W.ignored ? lse[r] != 0.0f : !xt_loss_close(&tol, lse[r], W.lse, fabs(W.lse) + fabs(W.xmax))) {
      fprintf(stderr, "  [large extent] lse[%" PRId64 "] = %.9g, want %.9g\n", r, (double)lse[r], W.lse);
      errors++;
    }
  }
  if (!xt_is_poison_f32(lse[R])) {
    fprintf(stderr, "  [large extent] lse written past its end\n");
    errors++;
  }
  d2h(guard_host, (char *)d_x + elems * 2, guard);
  sync_stream();
  for (size_t i = 0; i < guard; i++)
    if (guard_host[i] != 0x7F) {
      fprintf(stderr, "  [large extent] guard byte %zu after the logits written\n", i);
      errors++;
      break;
    }

  /* 2. none, on the original logits: per-row losses; their double sum / N
   * is the mean of step 1. */
  fill_from_pool(d_x, pool, P, R, V);
  opt.reduction = XENT_REDUCTION_NONE;
  st = xent_forward(&in, &opt, &out, &ex);
  d2h(row_loss, d_loss, (size_t)(R + 1) * sizeof(float));
  sync_stream();
  if (st != XENT_OK) {
    fprintf(stderr, "  [large extent] forward none: %s\n", xent_last_error());
    errors++;
    goto out;
  }
  double sum = 0.0, abs_sum = 0.0;
  for (int64_t r = 0; r < R; r++) {
    if (xt_is_poison_f32(row_loss[r])) {
      fprintf(stderr, "  [large extent] loss[%" PRId64 "] not written\n", r);
      errors++;
      break;
    }
    sum += row_loss[r];
    abs_sum += fabs(row_loss[r]);
  }
  for (int i = 0; i < ns; i++) {
    int64_t r = sample[i];
    xt_row W;
    xt_ref_row(&p, xd + (r % P) * V, t[r], 1.0, 1.0, &W, NULL);
    double want = W.ignored ? 0.0 : W.loss + W.z;
    mag_sum += W.mag;
    if (W.ignored ? row_loss[r] != 0.0f : !xt_loss_close(&tol, row_loss[r], want, W.mag + W.z)) {
      fprintf(stderr, "  [large extent] loss[%" PRId64 "] = %.9g, want %.9g\n", r,
              (double)row_loss[r], want);
      errors++;
    }
  }
  double mean_ref = sum / (double)n_valid;
  double mag = abs_sum / (double)n_valid + mag_sum / ns;
  print_message("large extent: BT=%" PRId64 " V=%" PRId64 " (%zu elements): mean %.9g, "
                "double sum of the rows / N %.9g (N = %" PRId64 ")\n",
                R, V, elems, (double)mean_loss, mean_ref, n_valid);
  if (!xt_loss_close(&tol, mean_loss, mean_ref, mag)) {
    fprintf(stderr, "  [large extent] mean %.9g, rows summed in double give %.9g\n",
            (double)mean_loss, mean_ref);
    errors++;
  }

out:
  CK(cudaFree(d_x));
  CK(cudaFree(d_t));
  CK(cudaFree(d_loss));
  CK(cudaFree(d_lse));
  xt_free(pool);
  free(xd);
  xt_free(t);
  xt_free(row_loss);
  xt_free(lse);
  xt_free(grow);
  free(gref);
  xt_free(guard_host);
  assert_int_equal(errors, 0);
}

/* ------------------------------------------------------------------------ */

static int group_setup(void **state) {
  (void)state;
  if (g_devices == 0) return 0;
  if (cudaSetDevice(0) != cudaSuccess) return -1;
  if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) return -1;
  return xent_verdict_create(&g_verdict) == XENT_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  if (g_devices == 0) return 0;
  force_two_read(0);
  xent_verdict_destroy(g_verdict);
  return cudaStreamDestroy(g_stream) == cudaSuccess ? 0 : -1;
}

int main(void) {
  xt_base_seed();
  const char *quick = getenv("XENT_TEST_QUICK");
  g_quick = quick && *quick && strcmp(quick, "0") != 0;
  /* XENT_TEST_FILTER: run only the tests whose names match (cmocka's '*' and '?'). */
  const char *filter = getenv("XENT_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  /* XENT_TEST_SHARD=k/n: the tests of forced launches (staged, warp, keep,
   * stream...) run only their cases k, k + n, ...: n processes share one such test. */
  const char *shard = getenv("XENT_TEST_SHARD");
  if (shard && *shard) {
    int k = -1, n = 0;
    if (sscanf(shard, "%d/%d", &k, &n) != 2 || n < 1 || k < 0 || k >= n) {
      fprintf(stderr, "XENT_TEST_SHARD=%s: expected k/n with 0 <= k < n\n", shard);
      return 2;
    }
    g_shard = k;
    g_shards = n;
  }
  xent_info info;
  if (xent_get_info(&info) != XENT_OK) {
    fprintf(stderr, "xent_get_info failed: %s\n", xent_last_error());
    return 1;
  }
  g_devices = info.cuda_built ? info.cuda_devices : 0;
  if (g_devices == 0) {
    print_message("no CUDA device (cuda_built=%d, devices=%d): every test is skipped\n",
                  info.cuda_built, info.cuda_devices);
  } else {
    xent_device_info di;
    if (xent_get_device_info(0, &di) == XENT_OK)
      print_message("device 0: %s, sm_%d%d, %d SMs, clusters %d%s\n", di.name, di.sm_major,
                    di.sm_minor, di.multiprocessors, di.cluster_launch,
                    g_quick ? " (quick subset)" : "");
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_code_and_plan),
      cmocka_unit_test(test_cuda_matrix),
      cmocka_unit_test(test_cuda_features),
      cmocka_unit_test(test_cuda_vocab_sizes),
      cmocka_unit_test(test_cuda_staged),
      cmocka_unit_test(test_cuda_staged_hold),
      cmocka_unit_test(test_cuda_warp),
      cmocka_unit_test(test_cuda_warp_split),
      cmocka_unit_test(test_cuda_segment),
      cmocka_unit_test(test_cuda_layouts),
      cmocka_unit_test(test_cuda_ignored_rows),
      cmocka_unit_test(test_cuda_special_values),
      cmocka_unit_test(test_cuda_huge_logits),
      cmocka_unit_test(test_cuda_bad_target_checked),
      cmocka_unit_test(test_cuda_bad_target_unchecked),
      cmocka_unit_test(test_cuda_deferred),
      cmocka_unit_test(test_cuda_backward_rescale),
      cmocka_unit_test(test_cuda_backward),
      cmocka_unit_test(test_cuda_workspace_and_determinism),
      cmocka_unit_test(test_cuda_rows_zero),
      cmocka_unit_test(test_cuda_graph),
      cmocka_unit_test(test_cuda_peak_memory),
      cmocka_unit_test(test_cuda_large_extent),
  };
  /* XENT_TEST_ONLY=pattern: run the tests whose names match (cmocka's
   * wildcards), e.g. test_cuda_stream. */
  const char *only = getenv("XENT_TEST_ONLY");
  if (only && *only) cmocka_set_test_filter(only);
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  printf("[ CASES    ] %ld CUDA calls checked against the reference\n", g_cases);
  xt_report_margins();
  if (failed == 0 && g_devices == 0) return 77; /* CTest: skipped */
  return failed;
}
