/*
 * test_gemm.c - the matrix products of the fused linear loss, alone
 * (xent_experimental_gemm_run): xent's own Hopper GEMM and cuBLASLt against
 * a float64 reference, on shapes that are multiples of no tile, in each
 * layout the loss uses, bf16 and fp16, fp32 and 16-bit D, with and without
 * a bias, written fresh or accumulated; the argument checks; the refusals.
 *
 * xent's GEMM runs on compute capability 9.0 only: elsewhere its calls must
 * fail with XENT_ERROR_UNSUPPORTED, and that is what is checked there.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reference.h"
#include "xent.h"
#include "xent_experimental.h"

#ifdef XENT_TEST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* The three layouts of the fused linear loss's products (xent_experimental.h). */
enum { KK = 0, KN = 1, MN = 2 };

typedef struct gcase {
  int64_t m, n, k;
  int layout;
  xent_dtype dt, ddt;
  int bias, accumulate, tile_n, tma;
  int cluster; /* cluster_m */
  int stats;   /* the statistics epilogue (xent's engine, the logits' layout) */
  int pingpong; /* the consumers' alternate tiles (xent's engine) */
} gcase;

static xent_experimental_gemm describe(const gcase *c, int engine) {
  xent_experimental_gemm g;
  memset(&g, 0, sizeof g);
  g.engine = (xent_experimental_gemm_engine)engine;
  g.m = c->m;
  g.n = c->n;
  g.k = c->k;
  g.a_m_major = c->layout == MN;
  g.b_n_major = c->layout != KK;
  /* rows padded to the next multiple of 8 values, plus 8 (16-byte aligned) */
  g.lda = ((g.a_m_major ? c->m : c->k) + 7) / 8 * 8 + 8;
  g.ldb = ((g.b_n_major ? c->n : c->k) + 7) / 8 * 8 + 8;
  g.ldd = (c->n + 7) / 8 * 8 + 8;
  g.dtype = c->dt;
  g.d_dtype = c->ddt;
  g.accumulate = c->accumulate;
  g.tile_n = c->tile_n;
  g.tma_epilogue = c->tma;
  g.cluster_m = c->cluster;
  g.pingpong = c->pingpong;
  return g;
}

static void test_gemm_args(void **state) {
  (void)state;
  /* the arguments are checked before any backend is asked: host pointers do */
  static uint16_t a[64], b[64], d[64];
  gcase c = {4, 4, 4, KK, XENT_BFLOAT16, XENT_BFLOAT16, 0, 0, 0, 0, 0, 0, 0};
  xent_experimental_gemm g = describe(&c, XENT_EXPERIMENTAL_GEMM_XENT);
  g.lda = g.ldb = g.ldd = 4;
  g.a = a;
  g.b = b;
  g.d = d;
  memset(d, 0x5A, sizeof d);
  xent_experimental_gemm x;
  assert_int_equal(xent_experimental_gemm_run(NULL), XENT_ERROR_NULL_POINTER);
  x = g; x.a = NULL;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_NULL_POINTER);
  x = g; x.d = NULL;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_NULL_POINTER);
  x = g; x.m = 0;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_SHAPE);
  x = g; x.k = -1;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_SHAPE);
  x = g; x.lda = 3;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_STRIDE);
  x = g; x.ldd = 3;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_STRIDE);
  x = g; x.a_m_major = 1; x.m = 5; /* an M-major A's rows hold m values */
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_STRIDE);
  x = g; x.engine = (xent_experimental_gemm_engine)3;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ENUM);
  x = g; x.dtype = XENT_FLOAT32;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ENUM);
  x = g; x.d_dtype = XENT_FLOAT16;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ENUM);
  x = g; x.accumulate = 2;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  x = g; x.tile_n = 64;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  x = g; x.cluster_m = 3;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  x = g; x.tma_epilogue = 3;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  x = g; x.pingpong = 2;
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  static float st[8];
  x = g; x.stats = st; /* without tile_n: the layout has no tile */
  assert_int_equal(xent_experimental_gemm_run(&x), XENT_ERROR_BAD_ARGUMENT);
  for (size_t i = 0; i < 64; i++) assert_int_equal(d[i], 0x5A5A); /* D untouched */
  /* the fused linear loss's choice of engine (xent_experimental.products): 0 to 6 */
  xent_experimental e = XENT_EXPERIMENTAL_INIT;
  e.products = 7;
  assert_int_equal(xent_experimental_set(&e), XENT_ERROR_BAD_ARGUMENT);
  assert_int_equal(xent_experimental_get().products, 0);
  e.products = 2;
  assert_int_equal(xent_experimental_set(&e), XENT_OK);
  assert_int_equal(xent_experimental_get().products, 2);
  assert_int_equal(xent_experimental_set(NULL), XENT_OK);
  assert_int_equal(xent_experimental_get().products, 0);
}

#ifdef XENT_TEST_HAVE_CUDA

static const char *layout_name[3] = {"logits (A, B K-major)", "dX (B N-major)",
                                     "dW (A M-major, B N-major)"};

#define CK(call)                                                              \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

static int have_gpu(void) {
  static int g = -1;
  if (g < 0) {
    int n = 0;
    g = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();
  }
  return g;
}

/* Does xent's GEMM run on device 0 (compute capability 9.0 running sm_90
 * code)? Where it does not, its calls must be refused. */
static int xent_gemm_expected(void) {
  xent_device_info info;
  assert_int_equal(xent_get_device_info(0, &info), XENT_OK);
  return info.sm_major == 9 && info.sm_minor == 0 && info.code_arch == 90;
}

static double unit_roundoff(xent_dtype t) {
  return t == XENT_FLOAT32 ? 0x1p-24 : t == XENT_FLOAT16 ? 0x1p-11 : 0x1p-8;
}

/* Runs case c on `engine` from fresh random operands and a poisoned D
 * (accumulating: random D inside the product's m x n, poison in the padding
 * of each row), and compares with the float64 reference. Returns the call's
 * status; on XENT_OK every value was within its bound and the padding kept
 * its poison. */
static xent_status run_case(const gcase *c, int engine, xt_rng *rng, double *worst) {
  xent_experimental_gemm g = describe(c, engine);
  const size_t es = xt_dtype_size(c->dt), eds = xt_dtype_size(c->ddt);
  const int64_t arows = g.a_m_major ? c->k : c->m, brows = g.b_n_major ? c->k : c->n;
  const size_t na = (size_t)(arows * g.lda), nb = (size_t)(brows * g.ldb),
               nd = (size_t)(c->m * g.ldd);
  void *ha = malloc(na * es), *hb = malloc(nb * es), *hd = malloc(nd * eds),
       *hd0 = malloc(nd * eds), *hbias = malloc((size_t)c->n * eds);
  assert_non_null(ha);
  assert_non_null(hb);
  assert_non_null(hd);
  assert_non_null(hd0);
  assert_non_null(hbias);
  xt_poison_dtype(ha, c->dt, (int64_t)na);
  xt_poison_dtype(hb, c->dt, (int64_t)nb);
  /* a(i, kk), b(j, kk) at their layout's places; the padding stays poison,
   * which a product that read it would carry into D */
  for (int64_t i = 0; i < c->m; i++)
    for (int64_t kk = 0; kk < c->k; kk++)
      xt_store(ha, c->dt, g.a_m_major ? kk * g.lda + i : i * g.lda + kk, xt_normal(rng));
  for (int64_t j = 0; j < c->n; j++)
    for (int64_t kk = 0; kk < c->k; kk++)
      xt_store(hb, c->dt, g.b_n_major ? kk * g.ldb + j : j * g.ldb + kk, xt_normal(rng));
  for (int64_t j = 0; j < c->n; j++) xt_store(hbias, c->ddt, j, xt_normal(rng));
  /* with the statistics, a first column tile masked whole by a -inf bias
   * (a vocabulary's masked entries): its statistics are (-inf, 0) */
  if (c->stats && c->tile_n)
    for (int64_t j = 0; j < c->n && j < c->tile_n; j++) xt_store(hbias, c->ddt, j, -INFINITY);
  xt_poison_dtype(hd0, c->ddt, (int64_t)nd);
  if (c->accumulate)
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t j = 0; j < c->n; j++) xt_store(hd0, c->ddt, i * g.ldd + j, xt_normal(rng));
  void *da, *db, *dd, *dbias = NULL;
  CK(cudaMalloc(&da, na * es));
  CK(cudaMalloc(&db, nb * es));
  CK(cudaMalloc(&dd, nd * eds));
  CK(cudaMemcpy(da, ha, na * es, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb, nb * es, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dd, hd0, nd * eds, cudaMemcpyHostToDevice));
  if (c->bias) {
    CK(cudaMalloc(&dbias, (size_t)c->n * eds));
    CK(cudaMemcpy(dbias, hbias, (size_t)c->n * eds, cudaMemcpyHostToDevice));
  }
  /* the statistics: poisoned (NaN), each (row, column tile) written once */
  const int64_t tiles = c->stats ? (c->n + c->tile_n - 1) / c->tile_n : 0;
  float *dstats = NULL, *hstats = NULL;
  if (c->stats) {
    CK(cudaMalloc((void **)&dstats, (size_t)(c->m * tiles) * 8));
    CK(cudaMemset(dstats, 0xFF, (size_t)(c->m * tiles) * 8));
    hstats = malloc((size_t)(c->m * tiles) * 8);
    assert_non_null(hstats);
  }
  g.stats = dstats;
  void *ws = NULL;
  const size_t ws_bytes = 4u << 20;
  CK(cudaMalloc(&ws, ws_bytes));
  g.a = da;
  g.b = db;
  g.d = dd;
  g.bias = dbias;
  g.workspace = ws;
  g.workspace_bytes = ws_bytes;
  const xent_status st = xent_experimental_gemm_run(&g);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hd, dd, nd * eds, cudaMemcpyDeviceToHost));
  if (st == XENT_OK) {
    /* |D - ref| <= u_D |ref| + (k + 2) 2^-22 (sum |a b| + |bias| + |D0|): one
     * rounding of an fp32 sum (with room for the tensor cores' order). Two
     * roundings where the new part is rounded to D's type before D0 is
     * added: the TMA epilogue's add in L2, and cuBLASLt accumulating into a
     * 16-bit D (measured: H100, 2026-12-05); then also u_D |ref - D0|. */
    const double u = unit_roundoff(c->ddt);
    const double sub = c->ddt == XENT_FLOAT16    ? 0x1p-24 /* the subnormals' spacing */
                       : c->ddt == XENT_BFLOAT16 ? 0x1p-133
                                                 : 0x1p-149;
    const int twice = c->accumulate && c->ddt != XENT_FLOAT32 &&
                      (c->tma == 1 || engine != XENT_EXPERIMENTAL_GEMM_XENT);
    /* cuBLASLt accumulating into a 16-bit D: errors past two roundings and the
     * sum's (k + 2) 2^-22 of the magnitudes seen (H100, 2026-12-06: 1.5 ulps of
     * D; then 1.08x the whole bound at 300 x 1000 x 72, a sum cancelling to
     * 0.2 % of its magnitudes; later runs, bf16 at k = 1 where D0 + a b
     * cancels: 0.0625 for 0.0597, about 4 u |D0|); the whole bound is
     * doubled for it and takes 16 u (|ref| + |D0|) more (it is the
     * comparison, not the subject: a wrong layout or operand errs by O(1)) */
    const int lt_acc = engine != XENT_EXPERIMENTAL_GEMM_XENT && twice;
    const double slack = lt_acc ? 2.0 : 1.0;
    /* cuBLASLt's bias epilogue into a 16-bit D rounds A B to D's type
     * before it adds the bias (H100, 2026-12-06, k = 1, 130 x 260, D0 +
     * bias + a b cancelling: D 0.015625 for 0.0180 where |a b| and |bias|
     * were near 1.9, an error of 0.6 u |a b|): u of the magnitudes more */
    const int lt_bias = engine != XENT_EXPERIMENTAL_GEMM_XENT && c->bias &&
                        c->ddt != XENT_FLOAT32;
    /* A and B in float64, k contiguous for both: the reference's inner loop
     * at memory speed (the loads by layout and dtype took most of the test's
     * time) */
    double *ra = malloc((size_t)(c->m * c->k + 1) * sizeof(double));
    double *rb = malloc((size_t)(c->n * c->k + 1) * sizeof(double));
    assert_non_null(ra);
    assert_non_null(rb);
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t kk = 0; kk < c->k; kk++)
        ra[i * c->k + kk] = xt_load(ha, c->dt, g.a_m_major ? kk * g.lda + i : i * g.lda + kk);
    for (int64_t j = 0; j < c->n; j++)
      for (int64_t kk = 0; kk < c->k; kk++)
        rb[j * c->k + kk] = xt_load(hb, c->dt, g.b_n_major ? kk * g.ldb + j : j * g.ldb + kk);
    for (int64_t i = 0; i < c->m; i++)
      for (int64_t j = 0; j < g.ldd; j++) {
        const int64_t at = i * g.ldd + j;
        if (j >= c->n) {
          if (!xt_is_poison_dtype(hd, c->ddt, at)) {
            int64_t last = j; /* how far the writes went past n in this row */
            for (int64_t jj = j; jj < g.ldd; jj++)
              if (!xt_is_poison_dtype(hd, c->ddt, i * g.ldd + jj)) last = jj;
            fail_msg("%s %s m=%lld n=%lld k=%lld engine %d tile %d tma %d accumulate %d: D's "
                     "padding at row %lld columns %lld to %lld (of %lld) was written",
                     layout_name[c->layout], xt_dtype_name(c->dt), (long long)c->m,
                     (long long)c->n, (long long)c->k, engine, c->tile_n, c->tma, c->accumulate,
                     (long long)i, (long long)j, (long long)last, (long long)g.ldd);
          }
          continue;
        }
        double ref = 0, mag = 0;
        const double *ai = ra + i * c->k, *bj = rb + j * c->k;
        for (int64_t kk = 0; kk < c->k; kk++) {
          const double p = ai[kk] * bj[kk];
          ref += p;
          mag += fabs(p);
        }
        if (c->bias) {
          ref += xt_load(hbias, c->ddt, j);
          mag += fabs(xt_load(hbias, c->ddt, j));
        }
        if (c->accumulate) {
          ref += xt_load(hd0, c->ddt, at);
          mag += fabs(xt_load(hd0, c->ddt, at));
        }
        const double got = xt_load(hd, c->ddt, at), err = fabs(got - ref);
        if (isinf(ref)) { /* a -inf bias: D is -inf itself */
          if (got != ref)
            fail_msg("%s m=%lld n=%lld k=%lld: D[%lld][%lld] = %.9g, reference %g",
                     layout_name[c->layout], (long long)c->m, (long long)c->n, (long long)c->k,
                     (long long)i, (long long)j, got, ref);
          continue;
        }
        const double d0 = c->accumulate ? xt_load(hd0, c->ddt, at) : 0.0;
        /* below D's least normal a rounding errs by up to half the subnormal
         * spacing, not u |ref| (fp16 products of k = 1 land there) */
        const double tol = slack * (u * fabs(ref) + (twice ? u * fabs(ref - d0) : 0.0) +
                                    (twice ? 2 : 1) * 0.5 * sub +
                                    (double)(c->k + 2) * 0x1p-22 * mag) +
                           (lt_acc ? 16.0 * u * (fabs(ref) + fabs(d0)) : 0.0) +
                           (lt_bias ? u * mag : 0.0) + 1e-30;
        if (!(err <= tol))
          fail_msg("%s %s m=%lld n=%lld k=%lld engine %d: D[%lld][%lld] = %.9g, reference %.9g "
                   "(error %.3g > bound %.3g; D0 %.9g, sum of |a b| %.9g)",
                   layout_name[c->layout], xt_dtype_name(c->dt), (long long)c->m,
                   (long long)c->n, (long long)c->k, engine, (long long)i, (long long)j, got,
                   ref, err, tol, d0, mag);
        if (err / (tol + 1e-300) > *worst) *worst = err / tol;
      }
    free(ra);
    free(rb);
    if (c->stats) {
      /* each tile's (max, sum of exp(D - max)) over D as stored (checked
       * above): the max exactly, the sum to the fp32 additions of its
       * terms and the exponentials' approximation */
      CK(cudaMemcpy(hstats, dstats, (size_t)(c->m * tiles) * 8, cudaMemcpyDeviceToHost));
      for (int64_t i = 0; i < c->m; i++)
        for (int64_t t = 0; t < tiles; t++) {
          double mx = -INFINITY, sum = 0;
          const int64_t j1 = (t + 1) * c->tile_n < c->n ? (t + 1) * c->tile_n : c->n;
          for (int64_t j = t * c->tile_n; j < j1; j++)
            mx = fmax(mx, xt_load(hd, c->ddt, i * g.ldd + j));
          for (int64_t j = t * c->tile_n; j < j1 && mx != -INFINITY; j++)
            sum += exp(xt_load(hd, c->ddt, i * g.ldd + j) - mx);
          const float *got = hstats + 2 * (i * tiles + t);
          if ((double)got[0] != mx || !(fabs(got[1] - sum) <= (c->tile_n + 4) * 0x1p-22 * sum))
            fail_msg("stats m=%lld n=%lld tile %d: row %lld tile %lld: (%.9g, %.9g), reference "
                     "(%.9g, %.9g)",
                     (long long)c->m, (long long)c->n, c->tile_n, (long long)i, (long long)t,
                     got[0], got[1], mx, sum);
        }
    }
  } else {
    /* refused: D as it was */
    assert_memory_equal(hd, hd0, nd * eds);
  }
  if (dstats) CK(cudaFree(dstats));
  free(hstats);
  CK(cudaFree(da));
  CK(cudaFree(db));
  CK(cudaFree(dd));
  CK(cudaFree(ws));
  if (dbias) CK(cudaFree(dbias));
  free(ha);
  free(hb);
  free(hd);
  free(hd0);
  free(hbias);
  return st;
}

/* The shapes: single values, one less and one more than a tile, a K of one
 * block and of many stages (the ring's phases wrap), more tiles than SMs
 * (the persistent walk), each in every layout. */
static const int64_t shapes[][3] = {{1, 1, 1},     {7, 129, 129},  {129, 7, 300},
                                    {300, 1000, 72}, {130, 260, 1}, {257, 520, 4100},
                                    {2000, 1100, 64}, {64, 256, 64}, {4100, 1030, 300}};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* A product that ran where xent's GEMM is expected to take it (counted in
 * *ran), refused everywhere else. */
static void expect_ran(xent_status st, int expected, const gcase *c, int *ran) {
  if (expected) {
    if (st != XENT_OK)
      fail_msg("%s m=%lld n=%lld k=%lld: %s", layout_name[c->layout], (long long)c->m,
               (long long)c->n, (long long)c->k, xent_last_error());
    (*ran)++;
  } else {
    assert_int_equal(st, XENT_ERROR_UNSUPPORTED);
  }
}

static void cuda_products(int engine, int cluster, int pingpong, const char *test) {
  if (!have_gpu()) skip();
  xt_rng rng = xt_rng_for(test);
  const int expected = engine != XENT_EXPERIMENTAL_GEMM_XENT || xent_gemm_expected();
  double worst = 0;
  int ran = 0;
  for (int s = 0; s < NSHAPES; s++)
    for (int layout = 0; layout < 3; layout++) {
      const int v = s * 3 + layout;
      gcase c = {shapes[s][0], shapes[s][1], shapes[s][2], layout,
                 v % 2 ? XENT_FLOAT16 : XENT_BFLOAT16, XENT_BFLOAT16, (v / 2) % 2, (v / 3) % 2,
                 (int[]){0, 128, 256}[v % 3], 0, 0, 0, 0};
      c.ddt = c.dt;
      if (layout == MN && v % 4 == 1) c.ddt = XENT_FLOAT32; /* the fp32 weight gradient */
      if (layout == MN) c.accumulate = v % 5 != 0;           /* dW adds up over chunks  */
      if (engine == XENT_EXPERIMENTAL_GEMM_XENT) c.tma = (v / 4) % 2;
      if (engine != XENT_EXPERIMENTAL_GEMM_XENT) c.tile_n = 0, c.tma = 0;
      if (cluster) c.cluster = cluster; /* pairs of 128- and 256-column tiles, and the rule's */
      c.pingpong = pingpong;
      if (engine == XENT_EXPERIMENTAL_GEMM_XENT && layout == KK && !c.accumulate) {
        c.tile_n = (s / 2) % 2 ? 256 : 128; /* the statistics' layout is by tile */
        c.stats = 1; /* the logits' statistics epilogue */
      }
      expect_ran(run_case(&c, engine, &rng, &worst), expected, &c, &ran);
    }
  print_message("%s: %d products checked, worst error %.2f of its bound\n", test, ran, worst);
}

static void test_cuda_gemm_xent(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_XENT, 0, 0, "test_cuda_gemm_xent");
}

/* The consumers on alternate tiles, taking turns: the same products (the
 * last shape gives each block several tiles, so each consumer waits for the
 * other's turn over a ring that wraps within a tile). */
static void test_cuda_gemm_xent_pingpong(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_XENT, 0, 1, "test_cuda_gemm_xent_pingpong");
}

/* Pairs of blocks sharing B by multicast: the same products (an odd number
 * of row tiles leaves the second block of the last pair with rows past m). */
static void test_cuda_gemm_xent_clusters(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_XENT, 2, 0, "test_cuda_gemm_xent_clusters");
}

/* The consumers taking turns over pairs of blocks: the same products. */
static void test_cuda_gemm_xent_pingpong_clusters(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_XENT, 2, 1, "test_cuda_gemm_xent_pingpong_clusters");
}

/* D loaded ahead (tma_epilogue 2), the weight gradient's layout: accumulating
 * or writing fresh, both tile widths and the rule's, rows of D on 16 bytes
 * (the TMA path) and not (registers), one rounding allowed; more tiles than
 * blocks, so that the barriers of D's rows go through their phases. Refused
 * for another layout, an fp32 D, pairs and pingpong. */
static void test_cuda_gemm_xent_load_c(void **state) {
  (void)state;
  if (!have_gpu()) skip();
  xt_rng rng = xt_rng_for("test_cuda_gemm_xent_load_c");
  const int expected = xent_gemm_expected();
  static const int64_t lc_shapes[][3] = {{300, 1000, 72}, {257, 520, 4100}, {64, 256, 64},
                                         {4100, 2048, 300}, {2100, 2048, 64}, {1000, 512, 488},
                                         {130, 264, 1},     {129, 8, 300},    {7, 129, 129}};
  double worst = 0;
  int ran = 0;
  for (int s = 0; s < (int)(sizeof lc_shapes / sizeof lc_shapes[0]); s++) {
    gcase c = {lc_shapes[s][0], lc_shapes[s][1], lc_shapes[s][2], MN,
               s % 2 ? XENT_FLOAT16 : XENT_BFLOAT16, XENT_BFLOAT16, s == 2, s != 5,
               (int[]){128, 256, 0}[s % 3], 2, 0, 0, 0};
    c.ddt = c.dt;
    expect_ran(run_case(&c, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst), expected, &c, &ran);
  }
  if (expected) {
    gcase c = {64, 64, 64, KK, XENT_BFLOAT16, XENT_BFLOAT16, 0, 1, 0, 2, 0, 0, 0};
    assert_int_equal(run_case(&c, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst),
                     XENT_ERROR_UNSUPPORTED);
    assert_non_null(strstr(xent_last_error(), "loaded ahead"));
    c.layout = MN;
    c.ddt = XENT_FLOAT32;
    assert_int_equal(run_case(&c, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst),
                     XENT_ERROR_UNSUPPORTED);
    c.ddt = XENT_BFLOAT16;
    c.cluster = 2;
    assert_int_equal(run_case(&c, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst),
                     XENT_ERROR_UNSUPPORTED);
    c.cluster = 0;
    c.pingpong = 1;
    assert_int_equal(run_case(&c, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst),
                     XENT_ERROR_UNSUPPORTED);
  }
  print_message("test_cuda_gemm_xent_load_c: %d products checked, worst error %.2f of its bound\n",
                ran, worst);
}

/* cuBLASLt as the fused linear loss runs it: dW's chunk products (bf16, k up
 * to 640) in lt.cu's measured configuration rather than the heuristic's */
static void test_cuda_gemm_cublaslt_loss(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_CUBLASLT_LOSS, 0, 0, "test_cuda_gemm_cublaslt_loss");
}

static void test_cuda_gemm_cublaslt(void **state) {
  (void)state;
  cuda_products(XENT_EXPERIMENTAL_GEMM_CUBLASLT, 0, 0, "test_cuda_gemm_cublaslt");
}

/* What xent's GEMM does not take is refused with a reason and D untouched:
 * an fp32 D with a K-major A, an M-major A with a K-major B, a misaligned
 * operand or row. */
static void test_cuda_gemm_refusals(void **state) {
  (void)state;
  if (!have_gpu()) skip();
  xt_rng rng = xt_rng_for("test_cuda_gemm_refusals");
  double worst = 0;
  const gcase bad = {64, 64, 64, KK, XENT_BFLOAT16, XENT_FLOAT32, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(run_case(&bad, XENT_EXPERIMENTAL_GEMM_XENT, &rng, &worst),
                   XENT_ERROR_UNSUPPORTED);
  uint16_t *d;
  CK(cudaMalloc((void **)&d, 64 * 72 * 2));
  gcase c = {64, 64, 64, KK, XENT_BFLOAT16, XENT_BFLOAT16, 0, 0, 0, 0, 0, 0, 0};
  xent_experimental_gemm g = describe(&c, XENT_EXPERIMENTAL_GEMM_XENT);
  g.a = g.b = g.d = d;
  g.lda = g.ldb = g.ldd = 64;
  g.a_m_major = 1; /* with a K-major B: not built */
  assert_int_equal(xent_experimental_gemm_run(&g), XENT_ERROR_UNSUPPORTED);
  g.a_m_major = 0;
  /* a leading dimension that is not a multiple of 8 values (rows not 16-byte aligned) */
  g.lda = g.ldb = 66;
  g.ldd = 66;
  const int expected = xent_gemm_expected(); /* before the call: it sets the last error */
  assert_int_equal(xent_experimental_gemm_run(&g), XENT_ERROR_UNSUPPORTED);
  assert_non_null(strstr(xent_last_error(), expected ? "aligned" : ""));
  g.lda = g.ldb = g.ldd = 64;
  g.a = d + 1; /* 2 bytes past alignment */
  assert_int_equal(xent_experimental_gemm_run(&g), XENT_ERROR_UNSUPPORTED);
  CK(cudaFree(d));
}

#else
static void test_cuda_gemm_xent(void **state) { (void)state; skip(); }
static void test_cuda_gemm_xent_clusters(void **state) { (void)state; skip(); }
static void test_cuda_gemm_xent_pingpong_clusters(void **state) { (void)state; skip(); }
static void test_cuda_gemm_xent_load_c(void **state) { (void)state; skip(); }
static void test_cuda_gemm_xent_pingpong(void **state) { (void)state; skip(); }
static void test_cuda_gemm_cublaslt_loss(void **state) { (void)state; skip(); }
static void test_cuda_gemm_cublaslt(void **state) { (void)state; skip(); }
static void test_cuda_gemm_refusals(void **state) { (void)state; skip(); }
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm_args),
      cmocka_unit_test(test_cuda_gemm_xent),
      cmocka_unit_test(test_cuda_gemm_xent_pingpong),
      cmocka_unit_test(test_cuda_gemm_cublaslt),
      cmocka_unit_test(test_cuda_gemm_cublaslt_loss),
      cmocka_unit_test(test_cuda_gemm_refusals),
      /* last: a hang of the pairs leaves the rest reported */
      cmocka_unit_test(test_cuda_gemm_xent_clusters),
      cmocka_unit_test(test_cuda_gemm_xent_pingpong_clusters),
      cmocka_unit_test(test_cuda_gemm_xent_load_c),
  };
  /* XENT_TEST_ONLY=pattern (cmocka's wildcards): the sanitizer's runs */
  const char *only = getenv("XENT_TEST_ONLY");
  if (only && *only) cmocka_set_test_filter(only);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
