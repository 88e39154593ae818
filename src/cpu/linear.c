/*
 * linear.c - the CPU backend's fused linear cross-entropy. Chunks of rows,
 * as on the GPU: for each, the logits Z = X_c W^T (+ b) in fp32 through the
 * CBLAS library (blas.h), the cross-entropy of ce.h over them with the
 * gradient G written over Z, then dX_c = G W, dW += G^T X_c and db += the
 * column sums of G. Every product is in fp32 (bf16/fp16 inputs are widened
 * once: the weight whole, the hidden states a chunk at a time), and the
 * weight and bias gradients add up in fp32 whatever xent_accum says, rounded
 * to their dtype once at the end. The vocab schedule (linear_vocab) cuts the
 * vocabulary instead.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/linear.h"
#include "cpu/blas.h"
#include "cpu/ce.h"
#include "cpu/cpu.h"
#include "cpu/simd.h"
#include "cpu/threads.h"

/* rows x cols of src (dtype dt, row stride ld) widened into dst (fp32, ldd). */
XENT_AI void widen_rows(float *dst, int64_t ldd, const void *src, int64_t ld, int64_t rows,
                        int64_t cols, const int dt, int nt) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) if (nt > 1 && rows * cols > 65536)
#endif
  for (int64_t r = 0; r < rows; r++) {
    const void *s = AT(src, r * ld, dt);
    float *d = dst + r * ldd;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      v8f v = vload(AT(s, j, dt), dt);
      memcpy(d + j, &v, 32);
    }
    if (j < cols) vstore_part(d + j, vload_part(AT(s, j, dt), (int)(cols - j), dt),
                              (int)(cols - j), DT_F32);
  }
  (void)nt;
}

/* dst (dtype dt, ld) = src (fp32, lds), or dst += src when add. */
XENT_AI void store_rows(void *dst, int64_t ld, const float *src, int64_t lds, int64_t rows,
                        int64_t cols, int add, const int dt, int nt) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) if (nt > 1 && rows * cols > 65536)
#endif
  for (int64_t r = 0; r < rows; r++) {
    void *d = AT_W(dst, r * ld, dt);
    const float *s = src + r * lds;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      v8f v;
      memcpy(&v, s + j, 32);
      if (add) v += vload(AT(d, j, dt), dt);
      vstore(AT_W(d, j, dt), v, dt);
    }
    if (j < cols) {
      const int n = (int)(cols - j);
      v8f v = vload_part(s + j, n, DT_F32);
      if (add) v += vload_part(AT(d, j, dt), n, dt);
      vstore_part(AT_W(d, j, dt), v, n, dt);
    }
  }
  (void)nt;
}

static void widen(float *dst, int64_t ldd, const void *src, int64_t ld, int64_t rows,
                  int64_t cols, xent_dtype dt, int nt) {
  if (dt == XENT_BFLOAT16) widen_rows(dst, ldd, src, ld, rows, cols, DT_BF16, nt);
  else if (dt == XENT_FLOAT16) widen_rows(dst, ldd, src, ld, rows, cols, DT_F16, nt);
  else widen_rows(dst, ldd, src, ld, rows, cols, DT_F32, nt);
}

static void store(void *dst, int64_t ld, const float *src, int64_t lds, int64_t rows,
                  int64_t cols, int add, xent_dtype dt, int nt) {
  if (dt == XENT_BFLOAT16) store_rows(dst, ld, src, lds, rows, cols, add, DT_BF16, nt);
  else if (dt == XENT_FLOAT16) store_rows(dst, ld, src, lds, rows, cols, add, DT_F16, nt);
  else store_rows(dst, ld, src, lds, rows, cols, add, DT_F32, nt);
}

/* The gradient block d (p.m x p.n of dtype dt, row stride ld) = op(A) op(B),
 * or += with add: straight into d when it is fp32, else into the fp32
 * scratch tmp (row stride p.n) and rounded into d once. */
static void product_into(xent_sgemm p, void *d, int64_t ld, xent_dtype dt, int add, float *tmp,
                         int nt) {
  if (dt == XENT_FLOAT32) {
    p.c = (float *)d, p.ldc = ld, p.beta = add ? 1.0f : 0.0f;
    xent_blas_sgemm(&p);
    return;
  }
  p.c = tmp, p.ldc = p.n, p.beta = 0.0f;
  xent_blas_sgemm(&p);
  store(d, ld, tmp, p.n, p.m, p.n, add, dt, nt);
}

/* Zero rows x cols of a matrix of dtype dt. */
static void zero_rows(void *dst, int64_t ld, int64_t rows, int64_t cols, xent_dtype dt) {
  const size_t es = xent_dtype_size(dt);
  for (int64_t r = 0; r < rows; r++) memset((char *)dst + (size_t)(r * ld) * es, 0, (size_t)cols * es);
}

typedef struct bufs {
  float *w, *bias, *x, *z, *dx, *dw, *db;
  xent_cpu_row *res;
} bufs;

static void free_bufs(bufs *b) {
  free(b->w);
  free(b->bias);
  free(b->x);
  free(b->z);
  free(b->dx);
  free(b->dw);
  free(b->db);
  free(b->res);
}

static float *alloc_floats(size_t n, int *failed) {
  if (n == 0) return NULL;
  float *p = (float *)malloc(n * sizeof(float));
  if (!p) *failed = 1;
  return p;
}

/* The vocab schedule (xent.h): slabs of the vocabulary over every row, two
 * passes, as on the GPU. Pass 1 leaves a record per row and slab
 * (xent_cpu_vp_stats, the slabs as shards); pass 2 recomputes each slab's
 * logits, its gradient from the merged records (xent_cpu_vp_rows), dW_s =
 * G_s^T X (written once), dX += G_s W_s and the bias sums. dX adds up in
 * fp32 here whatever xent_accum says, as dW does over the rows' chunks. */
static xent_status linear_vocab(const xent_linear_call *lc, xent_cpu_ce *f, const xent_call *full,
                                int nt) {
  const xent_linear_input *in = &lc->in;
  const xent_linear_grads *g = &lc->g;
  const int64_t rows = in->rows, H = in->hidden_size, V = in->vocab;
  const int64_t slab = lc->plan.slab, slabs = lc->plan.slabs;
  const int R = lc->plan.record;
  const xent_dtype dt = in->dtype;
  const int f32 = dt == XENT_FLOAT32;
  const int dw_direct = g->weight && g->weight_dtype == XENT_FLOAT32;
  const int dx_direct = g->hidden && g->hidden_dtype == XENT_FLOAT32;
  bufs b;
  memset(&b, 0, sizeof b);
  float *records = NULL;
  int failed = 0;
  b.res = (xent_cpu_row *)malloc((size_t)rows * sizeof(xent_cpu_row));
  if (!b.res) failed = 1;
  if (!f32) {
    b.w = alloc_floats((size_t)V * (size_t)H, &failed);
    b.x = alloc_floats((size_t)rows * (size_t)H, &failed);
  }
  if (in->bias) b.bias = alloc_floats((size_t)V, &failed);
  b.z = alloc_floats((size_t)rows * (size_t)slab, &failed);
  records = alloc_floats((size_t)slabs * (size_t)rows * (size_t)R, &failed);
  if (g->hidden && !dx_direct) b.dx = alloc_floats((size_t)rows * (size_t)H, &failed);
  if (g->weight && !dw_direct) b.dw = alloc_floats((size_t)slab * (size_t)H, &failed);
  if (g->bias) b.db = alloc_floats((size_t)V, &failed);
  if (failed) {
    free_bufs(&b);
    free(records);
    return xent_fail(XENT_ERROR_OUT_OF_MEMORY,
                     "CPU backend: cannot allocate the fused linear loss's scratch (%lld rows, "
                     "slabs of %lld columns, V = %lld, H = %lld)",
                     (long long)rows, (long long)slab, (long long)V, (long long)H);
  }
  const float *w = f32 ? (const float *)in->weight : b.w;
  const int64_t ldw = f32 ? in->weight_stride : H;
  if (!f32) widen(b.w, H, in->weight, in->weight_stride, V, H, dt, nt);
  if (b.bias) widen(b.bias, V, in->bias, V, 1, V, dt, 1);
  const float *x = f32 ? (const float *)in->hidden : b.x;
  const int64_t ldx = f32 ? in->hidden_stride : H;
  if (!f32) widen(b.x, H, in->hidden, in->hidden_stride, rows, H, dt, nt);

  xent_vp_call v;
  memset(&v, 0, sizeof v);
  v.c = *full;
  v.c.in.logits = b.z;
  v.c.in.row_stride = slab;
  v.vocab = V;
  v.record = R;
  v.gathered = records;
  v.ranks = (int)slabs;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t s = 0; s < slabs; s++) {
      const int64_t j0 = s * slab, n = V - j0 < slab ? V - j0 : slab;
      const float *ws = w + j0 * ldw;
      /* Z_s = X W_s^T + b_s */
      if (b.bias)
        for (int64_t r = 0; r < rows; r++)
          memcpy(b.z + r * slab, b.bias + j0, (size_t)n * sizeof(float));
      xent_sgemm p1 = {0, 1, rows, n, H, x, ldx, ws, ldw, b.z, slab, 1.0f, b.bias ? 1.0f : 0.0f};
      xent_blas_sgemm(&p1);
      v.c.in.vocab = n;
      v.offset = j0;
      if (pass == 0) {
        v.records = records + (size_t)s * (size_t)rows * (size_t)R;
        xent_cpu_vp_stats(&v);
        continue;
      }
      xent_cpu_vp_rows(&v, f, b.res); /* every slab the same results; G_s over Z_s */
      if (g->weight) { /* dW_s (+)= G_s^T X */
        const size_t gs = xent_dtype_size(g->weight_dtype);
        const xent_sgemm p3 = {1, 0, n, H, rows, b.z, slab, x, ldx, NULL, 0, 1.0f, 0.0f};
        product_into(p3, (char *)g->weight + (size_t)(j0 * g->weight_stride) * gs,
                     g->weight_stride, g->weight_dtype, g->accumulate, b.dw, nt);
      }
      if (g->hidden) { /* dX (+)= G_s W_s */
        float *d = dx_direct ? (float *)g->hidden : b.dx;
        const int64_t ldd = dx_direct ? g->hidden_stride : H;
        const float beta = s > 0 || (dx_direct && g->accumulate) ? 1.0f : 0.0f;
        xent_sgemm p2 = {0, 0, rows, H, n, b.z, slab, ws, ldw, d, ldd, 1.0f, beta};
        xent_blas_sgemm(&p2);
      }
      if (b.db) /* db_s = column sums of G_s */
        for (int64_t j = 0; j < n; j++) {
          float sum = 0.0f;
          for (int64_t r = 0; r < rows; r++) sum += b.z[r * slab + j];
          b.db[j0 + j] = sum;
        }
    }
  xent_cpu_ce_outputs(f, full, b.res);
  if (b.dx) store(g->hidden, g->hidden_stride, b.dx, H, rows, H, g->accumulate, g->hidden_dtype,
                  nt);
  if (b.db) store(g->bias, V, b.db, V, 1, V, g->accumulate, g->bias_dtype, 1);
  free_bufs(&b);
  free(records);
  return XENT_OK;
}

/* The call, with the BLAS library held (xent_cpu_linear). */
static xent_status linear_call(const xent_linear_call *lc) {
  const xent_linear_input *in = &lc->in;
  const xent_linear_grads *g = &lc->g;
  const int64_t rows = in->rows, H = in->hidden_size, V = in->vocab;
  const int64_t chunk = lc->plan.chunk;
  const xent_dtype dt = in->dtype;
  const int f32 = dt == XENT_FLOAT32;
  const int nt = xent_cpu_pick_threads(lc->ex.num_threads, rows > 0 ? rows : 1, rows * V);

  /* The call the cross-entropy sees: all rows, fp32 logits. */
  xent_call full;
  memset(&full, 0, sizeof full);
  full.in.dtype = XENT_FLOAT32;
  full.in.rows = rows;
  full.in.vocab = V;
  full.in.row_stride = V;
  full.in.targets = in->targets;
  full.in.target_type = in->target_type;
  full.in.weights = in->class_weights;
  full.opt = lc->opt;
  full.out = lc->out;
  full.ex = lc->ex;
  full.write_grad = lc->backward;
  xent_cpu_ce f;
  xent_cpu_ce_init(&f, &full);
  f.token_scaling = lc->lo.use_token_scaling;
  const float *row_scale = NULL;
  if (g->grad_output) {
    if (g->grad_output_count == 1) f.grad_scale = g->grad_output[0];
    else row_scale = g->grad_output;
  }

  if (rows > 0) {
    const int64_t lim = INT32_MAX;
    if (in->hidden_stride > lim || in->weight_stride > lim || g->hidden_stride > lim ||
        g->weight_stride > lim || (int64_t)chunk * lc->plan.slab > ((int64_t)1 << 40))
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "CPU backend: a stride above 2^31 - 1 elements is more than CBLAS takes");
  }

  if (lc->plan.by_vocab && rows > 0) {
    f.row_grad_scale = row_scale; /* every row in each slab */
    return linear_vocab(lc, &f, &full, nt);
  }

  bufs b;
  memset(&b, 0, sizeof b);
  int failed = 0;
  const int dw_direct = g->weight && g->weight_dtype == XENT_FLOAT32;
  const int dx_direct = g->hidden && g->hidden_dtype == XENT_FLOAT32;
  if (rows > 0) {
    b.res = (xent_cpu_row *)malloc((size_t)rows * sizeof(xent_cpu_row));
    if (!b.res) failed = 1;
    if (!f32) {
      b.w = alloc_floats((size_t)V * (size_t)H, &failed);
      b.x = alloc_floats((size_t)chunk * (size_t)H, &failed);
    }
    if (in->bias) b.bias = alloc_floats((size_t)V, &failed);
    b.z = alloc_floats((size_t)chunk * (size_t)V, &failed);
    if (g->hidden && !dx_direct) b.dx = alloc_floats((size_t)chunk * (size_t)H, &failed);
  }
  if (g->weight && !dw_direct && rows > 0) b.dw = alloc_floats((size_t)V * (size_t)H, &failed);
  if (g->bias) {
    b.db = alloc_floats((size_t)V, &failed);
    if (b.db) memset(b.db, 0, (size_t)V * sizeof(float));
  }
  if (failed) {
    free_bufs(&b);
    return xent_fail(XENT_ERROR_OUT_OF_MEMORY,
                     "CPU backend: cannot allocate the fused linear loss's scratch (%lld rows a "
                     "chunk, V = %lld, H = %lld)",
                     (long long)chunk, (long long)V, (long long)H);
  }

  /* The weight (and bias) in fp32, once. */
  const float *w = f32 ? (const float *)in->weight : b.w;
  const int64_t ldw = f32 ? in->weight_stride : H;
  if (!f32 && rows > 0) widen(b.w, H, in->weight, in->weight_stride, V, H, dt, nt);
  if (b.bias) widen(b.bias, V, in->bias, V, 1, V, dt, 1);

  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = rows - r0 < chunk ? rows - r0 : chunk;
    const size_t es = xent_dtype_size(dt);
    const float *x = f32 ? (const float *)in->hidden + r0 * in->hidden_stride : b.x;
    const int64_t ldx = f32 ? in->hidden_stride : H;
    if (!f32) widen(b.x, H, (const char *)in->hidden + (size_t)(r0 * in->hidden_stride) * es,
                    in->hidden_stride, n, H, dt, nt);
    /* Z = X_c W^T + b */
    if (b.bias)
      for (int64_t r = 0; r < n; r++) memcpy(b.z + r * V, b.bias, (size_t)V * sizeof(float));
    xent_sgemm p1 = {0, 1, n, V, H, x, ldx, w, ldw, b.z, V, 1.0f, b.bias ? 1.0f : 0.0f};
    xent_blas_sgemm(&p1);

    xent_call cc = full;
    cc.in.logits = b.z;
    cc.in.rows = n;
    cc.in.targets = (const char *)in->targets +
                    (size_t)r0 * (in->target_type == XENT_INT32 ? 4u : 8u);
    xent_cpu_ce fc = f;
    fc.c = &cc;
    fc.row_grad_scale = row_scale ? row_scale + r0 : NULL;
    xent_status st = xent_cpu_ce_rows(&fc, b.res + r0);
    if (st) {
      free_bufs(&b);
      return st;
    }
    if (!lc->backward) continue;

    if (g->hidden) { /* dX_c = G W */
      const size_t gs = xent_dtype_size(g->hidden_dtype);
      const xent_sgemm p2 = {0, 0, n, H, V, b.z, V, w, ldw, NULL, 0, 1.0f, 0.0f};
      product_into(p2, (char *)g->hidden + (size_t)(r0 * g->hidden_stride) * gs,
                   g->hidden_stride, g->hidden_dtype, g->accumulate, b.dx, nt);
    }
    if (g->weight) { /* dW += G^T X_c */
      float *d = dw_direct ? (float *)g->weight : b.dw;
      const int64_t ldd = dw_direct ? g->weight_stride : H;
      const float beta = r0 > 0 || (dw_direct && g->accumulate) ? 1.0f : 0.0f;
      xent_sgemm p3 = {1, 0, V, H, n, b.z, V, x, ldx, d, ldd, 1.0f, beta};
      xent_blas_sgemm(&p3);
    }
    if (b.db) /* db += column sums of G */
      for (int64_t r = 0; r < n; r++) {
        const float *zr = b.z + r * V;
        for (int64_t j = 0; j < V; j++) b.db[j] += zr[j];
      }
  }

  xent_cpu_ce_outputs(&f, &full, b.res);
  if (g->weight && !dw_direct) {
    if (rows > 0) store(g->weight, g->weight_stride, b.dw, H, V, H, g->accumulate,
                        g->weight_dtype, nt);
    else if (!g->accumulate) zero_rows(g->weight, g->weight_stride, V, H, g->weight_dtype);
  }
  if (g->weight && dw_direct && rows == 0 && !g->accumulate)
    zero_rows(g->weight, g->weight_stride, V, H, XENT_FLOAT32);
  if (b.db) store(g->bias, V, b.db, V, 1, V, g->accumulate, g->bias_dtype, 1);
  free_bufs(&b);
  return XENT_OK;
}

xent_status xent_cpu_linear(const xent_linear_call *lc) {
  if (lc->in.rows == 0) return linear_call(lc);
  /* the products' threads: the call's own count, 0 every core, as OpenMP's */
  const int req = lc->ex.num_threads;
  xent_status st = xent_blas_begin(req > 0 ? req : xent_cpu_default_threads());
  if (st) return st;
  st = linear_call(lc);
  xent_blas_end();
  return st;
}
