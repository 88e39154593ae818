/*
 * linear.cu - the CUDA fused linear cross-entropy: the rows in chunks, each
 * through three cuBLASLt products and xent's own cross-entropy kernels, all
 * on the caller's stream:
 *
 *   once      count_kernel over every row: N, W, the reduction scales and
 *             (checked mode) the verdict
 *   a chunk   Z = X_c W^T (+ b)          the logits, into the scratch chunk
 *             the forward kernel of the launch plan over Z, which writes the
 *             chunk's gradient G over Z (scaled by the upstream gradient);
 *             with xent's products (xent_experimental.products = 2) the
 *             logits' GEMM leaves each row's statistics per 256 columns and
 *             tile_forward_kernel merges them, one read and one write of Z
 *             dX_c = G W                 (when asked for)
 *             dW (+)= G^T X_c            (when asked for; over the chunks)
 *             db += column sums of G     (when asked for; fp32)
 *   once      finalize_kernel (mean, sum); the fp32 accumulators stored
 *
 * In cuBLAS's column-major terms a row-major R x C matrix is C x R: Z^T =
 * W X_c^T (m = V, n = rows, k = H), dX_c^T = W^T G^T (m = H, n = rows, k =
 * V), dW^T = X_c^T G (m = H, n = V, k = rows).
 *
 * Checked mode: the host waits for the verdict once the first chunk's logits
 * and cross-entropy are queued, before any product that writes the caller's
 * gradients; a bad target returns with nothing of the caller's written (the
 * cross-entropy kernels see the verdict and return at once).
 *
 * The vocab schedule (linear_vocab) cuts the columns instead:
 *   pass 1    per slab: Z_s = X W_s^T (+ b_s), each row's record of the slab
 *   pass 2    per slab: Z_s again, the outputs and G_s from the merged
 *             records, dW_s = G_s^T X, dX (+)= G_s W_s, db_s
 * (Z_s^T = W_s X^T: m = slab, n = rows, k = H; dW_s^T = X^T G_s: m = H, n =
 * slab, k = rows; dX^T (+)= W_s^T G_s^T: m = H, n = rows, k = slab.) Checked
 * mode waits for the verdict between the passes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/workspace.h"
#include "cuda/cuda.h"
#include "cuda/device.cuh"
#include "cuda/forward.cuh"
#include "cuda/gemm/gemm.cuh"
#include "cuda/kernels/linear.cuh"
#include "cuda/kernels/vp.cuh"
#include "cuda/lt.cuh"
#include "cuda/verdict.cuh"

namespace xent {

namespace {

/* XENT_PRODUCTS ("cublaslt", "xent", "xent_pingpong" or "xent_lc"): the
 * products' engine for calls whose settings leave it to the library, read
 * once (0 when unset). */
int env_products() {
  static const int v = [] {
    const char *s = getenv("XENT_PRODUCTS");
    return !s                           ? 0
           : !strcmp(s, "xent")          ? 2
           : !strcmp(s, "xent_pingpong") ? 4
           : !strcmp(s, "xent_lc")       ? 6
           : !strcmp(s, "cublaslt")      ? 1
                                         : 0;
  }();
  return v;
}

int products_mode(const xent_linear_call *lc) {
  return lc->exp.products ? lc->exp.products : env_products();
}

/* Products settings 4 and 5: the GEMM's consumers on alternate tiles. */
bool mode_pingpong(int mode) { return mode == 4 || mode == 5; }

/* Pairs of blocks sharing B (cluster_m 2) where the chunk has many rows, single
 * blocks where it has few. The chunk's rows are m for the logits and dX, k
 * for dW. On an H100 (bench/gemm.py, 2026-12-06, NOTES v43) pairs took 0.92
 * to 0.94 of single blocks' time at 8192 rows and 1.02 to 1.06 at 488; the
 * threshold between them is not measured closer than that. Not with the
 * consumers taking turns (pairs lost there at both sizes). */
int pairs_for(const gemm_product &p) {
  const int64_t rows = p.a_mn ? p.k : p.m;
  return !p.pingpong && rows >= 2048 ? 2 : 0;
}

/* One of the loss's products: xent's own Hopper GEMM (TMA epilogue) where the
 * experimental setting asks for it and it takes the product, cuBLASLt
 * otherwise (xent_experimental.h, products). */
xent_status product(const xent_linear_call *lc, const dev_props &dp, const lt_gemm &g, void *ws,
                    size_t ws_bytes, cudaStream_t stream) {
  const int mode = products_mode(lc);
  gemm_product p;
  if (mode >= 2 && gemm_from_lt(g, true, &p) && !gemm_sm90_refusal(p, dp)) {
    p.pingpong = mode_pingpong(mode);
    p.cluster_m = pairs_for(p);
    /* 6: dW's product (M-major A) adding into a 16-bit gradient reads its old
     * tile ahead (single blocks only) */
    p.load_c = mode == 6 && p.a_mn && p.accumulate && p.d_type != XENT_FLOAT32 &&
               p.cluster_m != 2;
    const xent_status st = gemm_sm90(p, dp, stream);
    char what[160];
    snprintf(what, sizeof what, "xent m=%lld n=%lld k=%lld%s%s%s tma%s%s", (long long)p.m,
             (long long)p.n, (long long)p.k, p.a_mn ? " A-M" : "", p.b_mn ? " B-N" : "",
             p.accumulate ? " add" : "", p.pingpong ? " pingpong" : "",
             p.cluster_m == 2 ? " pairs" : p.load_c ? " loaded ahead" : "");
    if (!st) lt_set_last(what);
    return st;
  }
  return lt_matmul(g, ws, ws_bytes, stream);
}

/* The columns of a tile of the logits' statistics epilogue. */
constexpr int kStatsTile = 256;

/* The logits' product with the statistics epilogue, `tiles` pairs a row (in
 * cuBLASLt's workspace, which xent's products leave unused), or false where
 * it does not run: the products are not xent's with it (products 2, 4 or 6;
 * 3 and 5 are 2 and 4 without it), the call folds more than (max, sum)
 * (smoothing, softcap, an arg-max), the chunk's pairs do not fit the
 * workspace, or the GEMM refuses the product. */
bool logits_with_stats(const xent_linear_call *lc, const dev_props &dp, const lt_gemm &g1,
                       int64_t tiles, void *ws, size_t ws_bytes, gemm_product *out) {
  const xent_options &o = lc->opt;
  const int mode = products_mode(lc);
  if ((mode != 2 && mode != 4 && mode != 6) || o.label_smoothing != 0.0f || o.softcap != 0.0f ||
      lc->out.predicted || lc->out.token_accuracy)
    return false;
  if ((size_t)(lc->plan.chunk * tiles) * 8 > ws_bytes || !gemm_from_lt(g1, true, out))
    return false;
  out->bn = kStatsTile;
  out->stats = (float *)ws;
  out->pingpong = mode_pingpong(mode);
  out->cluster_m = pairs_for(*out);
  return gemm_sm90_refusal(*out, dp) == nullptr;
}

template <typename T>
xent_status launch_tile_forward(const fwd_params &p, const float *stats, int tiles,
                                const dev_props &dp, const xent_experimental &exp,
                                cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      plain_config((unsigned)p.rows, kVpThreads, stream, attr, dp.sm_major, exp);
  CK(cudaLaunchKernelEx(&cfg, tile_forward_kernel<T>, p, (const float2 *)stats, tiles));
  return XENT_OK;
}

xent_status launch_colsum(xent_dtype dt, const char *g, int64_t rows, int vocab, int64_t stride_bytes,
                          float *acc, cudaStream_t stream) {
  const unsigned blocks = (unsigned)((vocab + kColsumThreads - 1) / kColsumThreads);
  if (dt == XENT_FLOAT32)
    colsum_kernel<float><<<blocks, kColsumThreads, 0, stream>>>(g, rows, vocab, stride_bytes, acc);
  else if (dt == XENT_BFLOAT16)
    colsum_kernel<__nv_bfloat16>
        <<<blocks, kColsumThreads, 0, stream>>>(g, rows, vocab, stride_bytes, acc);
  else
    colsum_kernel<__half><<<blocks, kColsumThreads, 0, stream>>>(g, rows, vocab, stride_bytes, acc);
  CK(cudaGetLastError());
  return XENT_OK;
}

xent_status launch_store(xent_dtype dt, void *dst, int64_t ld, const float *src, int64_t lds,
                         int64_t rows, int64_t cols, int add, const dev_props &dp,
                         cudaStream_t stream) {
  const int64_t n = rows * cols;
  int64_t blocks = (n + kStoreThreads - 1) / kStoreThreads;
  if (blocks > (int64_t)dp.sms * 16) blocks = (int64_t)dp.sms * 16;
  if (blocks < 1) blocks = 1;
  const int64_t ldb = ld * (int64_t)xent_dtype_size(dt);
  char *d = (char *)dst;
  if (dt == XENT_FLOAT32)
    store_kernel<float><<<(unsigned)blocks, kStoreThreads, 0, stream>>>(d, ldb, src, lds, rows, cols, add);
  else if (dt == XENT_BFLOAT16)
    store_kernel<__nv_bfloat16>
        <<<(unsigned)blocks, kStoreThreads, 0, stream>>>(d, ldb, src, lds, rows, cols, add);
  else
    store_kernel<__half><<<(unsigned)blocks, kStoreThreads, 0, stream>>>(d, ldb, src, lds, rows, cols, add);
  CK(cudaGetLastError());
  return XENT_OK;
}

/* The cross-entropy's view of a call: every row, the logits in the piece's
 * scratch (its row stride the plan's), the default experimental settings. */
xent_call ce_view(const xent_linear_call *lc) {
  xent_call c;
  memset(&c, 0, sizeof c);
  c.in.dtype = lc->in.dtype;
  c.in.rows = lc->in.rows;
  c.in.vocab = lc->in.vocab;
  c.in.row_stride = lc->plan.chunk_stride;
  c.in.targets = lc->in.targets;
  c.in.target_type = lc->in.target_type;
  c.in.weights = lc->in.class_weights;
  c.opt = lc->opt;
  c.out = lc->out;
  c.ex = lc->ex;
  c.write_grad = lc->backward;
  const xent_experimental exp0 = XENT_EXPERIMENTAL_INIT;
  c.exp = exp0;
  c.exp.plan_arch = lc->exp.plan_arch;
  return c;
}

/* The plan's scratch area (xent_linear_plan): the caller's, or taken
 * stream-ordered for the call. */
struct scratch {
  char *base;
  bool owned;
  ce_workspace w;
  char *z;      /* the piece's logits, then their gradient */
  void *lt;     /* cuBLASLt's workspace                    */
  float *db;    /* the bias gradient's fp32 sums, or NULL  */
};

/* The call's end: a scratch area it took, given back stream-ordered. */
xent_status release(const scratch &s, xent_status st, cudaStream_t stream) {
  if (s.owned) {
    cudaError_t e = cudaFreeAsync(s.base, stream);
    if (e != cudaSuccess && st == XENT_OK) st = cuda_fail(e, "cudaFreeAsync");
  }
  return st;
}

/* The start of both schedules: the scratch, the count kernel over every row
 * (N, W, the scales; the verdict in checked mode), the bias sums zeroed. On
 * a failure the scratch is already given back. */
xent_status begin(const xent_linear_call *lc, const xent_call &c, xent_verdict *verdict,
                  cudaStream_t stream, scratch *s) {
  s->base = (char *)lc->ex.workspace;
  s->owned = s->base == NULL;
  if (s->owned) {
    cudaError_t e = cudaMallocAsync((void **)&s->base, lc->plan.total, stream);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMallocAsync");
  }
  s->w = carve_workspace(s->base + lc->plan.ce, lc->in.rows);
  s->z = s->base + lc->plan.logits;
  s->lt = s->base + lc->plan.lt;
  s->db = lc->g.bias ? (float *)(s->base + lc->plan.bias) : NULL;
  xent_status st = launch_count(&c, s->w, verdict, stream);
  if (!st && s->db && cudaMemsetAsync(s->db, 0, (size_t)lc->in.vocab * 4, stream) != cudaSuccess)
    st = cuda_fail(cudaGetLastError(), "cudaMemsetAsync");
  return st ? release(*s, st, stream) : XENT_OK;
}

/* A call with no rows: the reduced outputs of an empty batch, and the
 * weight and bias gradients zeroed unless they accumulate. */
xent_status linear_rows0(const xent_linear_call *lc, cudaStream_t stream) {
  const xent_options &opt = lc->opt;
  const xent_linear_grads &g = lc->g;
  xent_status st = launch_empty_outputs(opt, lc->out, stream);
  if (st) return st;
  if (g.accumulate) return XENT_OK;
  if (g.weight) {
    const size_t es = xent_dtype_size(g.weight_dtype);
    CK(cudaMemset2DAsync(g.weight, (size_t)g.weight_stride * es, 0,
                         (size_t)lc->in.hidden_size * es, (size_t)lc->in.vocab, stream));
  }
  if (g.bias)
    CK(cudaMemsetAsync(g.bias, 0, (size_t)lc->in.vocab * xent_dtype_size(g.bias_dtype), stream));
  return XENT_OK;
}

xent_status linear_impl(const xent_linear_call *lc, const dev_props &dp) {
  const xent_linear_input &in = lc->in;
  const xent_linear_grads &g = lc->g;
  const xent_options &opt = lc->opt;
  const xent_linear_plan &plan = lc->plan;
  const int64_t rows = in.rows, H = in.hidden_size, V = in.vocab;
  const size_t es = xent_dtype_size(in.dtype);
  const size_t ts = in.target_type == XENT_INT32 ? 4 : 8;
  cudaStream_t stream = (cudaStream_t)lc->ex.stream;
  const bool checked = opt.target_check == XENT_TARGETS_CHECKED;
  const bool per_row = opt.reduction == XENT_REDUCTION_NONE;
  xent_status st;
  xent_call c = ce_view(lc);
  xent_verdict *verdict = checked ? verdict_for(&c) : NULL;

  scratch sc;
  if ((st = begin(lc, c, verdict, stream, &sc))) return st;
  char *ws = sc.base;
  const ce_workspace &w = sc.w;
  char *zbuf = sc.z;
  void *ltws = sc.lt;
  float *db = sc.db;
  const bool fp32acc = g.weight && g.weight_accum == XENT_ACCUM_FP32 &&
                       g.weight_dtype != XENT_FLOAT32;
  float *dw = fp32acc ? (float *)(ws + plan.weight) : NULL;
  const bool z_rows = opt.lse_square_scale > 0.0f || lc->out.z_loss;
  const bool scalar_go = g.grad_output && g.grad_output_count == 1;

  fwd_params p0;
  memset(&p0, 0, sizeof p0);
  p0.hdr = w.hdr;
  p0.verdict = checked ? w.hdr : NULL;
  bool verdict_read = false;

  xent_plan l;
  int64_t planned = -1;
  const int64_t tiles = (V + kStatsTile - 1) / kStatsTile;
  for (int64_t r0 = 0; st == XENT_OK && r0 < rows; r0 += plan.chunk) {
    const int64_t n = rows - r0 < plan.chunk ? rows - r0 : plan.chunk;
    const char *xc = (const char *)in.hidden + (size_t)(r0 * in.hidden_stride) * es;

    /* Z = X_c W^T + b (with each row's statistics per column tile, where
     * xent's GEMM leaves them) */
    lt_gemm g1 = {true, false, V, n, H, in.weight, in.weight_stride, in.dtype,
                  xc, in.hidden_stride, in.dtype, zbuf, plan.chunk_stride, in.dtype,
                  1.0f, 0.0f, in.bias, false};
    gemm_product ps;
    const bool tiled = logits_with_stats(lc, dp, g1, tiles, ltws, plan.lt_bytes, &ps);
    if (tiled) {
      if ((st = gemm_sm90(ps, dp, stream))) break;
      lt_set_last(ps.pingpong         ? "xent logits with statistics pingpong"
                  : ps.cluster_m == 2 ? "xent logits with statistics pairs"
                                      : "xent logits with statistics");
    } else if ((st = product(lc, dp, g1, ltws, plan.lt_bytes, stream))) {
      break;
    }

    /* the cross-entropy of the chunk's rows */
    xent_call cc = c;
    cc.in.logits = zbuf;
    cc.in.rows = n;
    cc.in.targets = (const char *)in.targets + (size_t)r0 * ts;
    xent_output &o = cc.out;
    if (per_row) {
      o.loss += r0;
      if (o.z_loss) o.z_loss += r0;
      if (o.token_accuracy) o.token_accuracy += r0;
    }
    if (o.lse) o.lse += r0;
    if (o.predicted) o.predicted += r0;
    if (!tiled && n != planned && (st = plan_call(&cc, dp, &l))) break;
    planned = tiled ? -1 : n;
    fwd_params p;
    fill_params(&p, &cc);
    p.hdr = w.hdr;
    p.verdict = p0.verdict;
    if (!tiled && l.kernel == XENT_KERNEL_STAGED) {
      if (cudaMemsetAsync(&w.hdr->next_row, 0, sizeof w.hdr->next_row, stream) != cudaSuccess) {
        st = cuda_fail(cudaGetLastError(), "cudaMemsetAsync");
        break;
      }
      p.row_ticket = &w.hdr->next_row;
    }
    p.row_loss = per_row ? o.loss : w.loss + r0;
    p.row_z = per_row ? o.z_loss : (z_rows ? w.z + r0 : NULL);
    p.row_acc = per_row ? o.token_accuracy : (lc->out.token_accuracy ? w.acc + r0 : NULL);
    p.grad_scale = scalar_go ? g.grad_output : NULL;
    p.row_grad_scale = g.grad_output && !scalar_go ? g.grad_output + r0 : NULL;
    p.token_scaling = lc->lo.use_token_scaling;
    if (tiled) {
      st = in.dtype == XENT_FLOAT16
               ? launch_tile_forward<__half>(p, (const float *)ltws, (int)tiles, dp, c.exp, stream)
               : launch_tile_forward<__nv_bfloat16>(p, (const float *)ltws, (int)tiles, dp,
                                                     c.exp, stream);
      if (st) break;
    } else if ((st = launch_rows(l, dp, &cc, p, w.loss + r0, w.arr, stream))) {
      break;
    }

    if (!lc->backward) continue;
    if (checked && !verdict_read) { /* before the first write to the caller's gradients */
      verdict_read = true;
      if ((st = check_verdict(verdict, &c, false))) break;
    }
    if (g.hidden) { /* dX_c = G W */
      const size_t gs = xent_dtype_size(g.hidden_dtype);
      lt_gemm g2 = {false, false, H, n, V, in.weight, in.weight_stride, in.dtype,
                    zbuf, plan.chunk_stride, in.dtype,
                    (char *)g.hidden + (size_t)(r0 * g.hidden_stride) * gs, g.hidden_stride,
                    g.hidden_dtype, 1.0f, g.accumulate ? 1.0f : 0.0f, NULL, false};
      if ((st = product(lc, dp, g2, ltws, plan.lt_dx_bytes, stream))) break;
    }
    if (g.weight) { /* dW (+)= G^T X_c */
      const bool more = r0 > 0 || (!fp32acc && g.accumulate);
      lt_gemm g3 = {false, true, H, V, n, xc, in.hidden_stride, in.dtype,
                    zbuf, plan.chunk_stride, in.dtype,
                    fp32acc ? (void *)dw : g.weight, fp32acc ? H : g.weight_stride,
                    fp32acc ? XENT_FLOAT32 : g.weight_dtype, 1.0f, more ? 1.0f : 0.0f, NULL,
                    true};
      if ((st = product(lc, dp, g3, ltws, plan.lt_bytes, stream))) break;
    }
    if (db && (st = launch_colsum(in.dtype, zbuf, n, (int)V, plan.chunk_stride * (int64_t)es, db,
                                  stream)))
      break;
  }
  if (!st && !per_row) st = launch_finalize(finalize_for(&c, p0, w), dp, c.exp, stream);
  if (!st && fp32acc)
    st = launch_store(g.weight_dtype, g.weight, g.weight_stride, dw, H, V, H, g.accumulate, dp,
                      stream);
  if (!st && db) st = launch_store(g.bias_dtype, g.bias, V, db, V, 1, V, g.accumulate, dp, stream);
  if (!st && checked && !verdict_read) st = check_verdict(verdict, &c, false);
  return release(sc, st, stream);
}

/* The vocab schedule (xent.h): the vocabulary in slabs over every row, two
 * passes. Pass 1 leaves a record per row and slab (vp_stats_kernel, the slabs
 * as the vocabulary-parallel loss's shards); pass 2 recomputes each slab's
 * logits, writes the row outputs and the slab's gradient from the merged
 * records (vp_forward_kernel), and turns it into dW_s (written once), dX (+)=
 * and the bias sums. */
xent_status linear_vocab(const xent_linear_call *lc, const dev_props &dp) {
  const xent_linear_input &in = lc->in;
  const xent_linear_grads &g = lc->g;
  const xent_options &opt = lc->opt;
  const xent_linear_plan &plan = lc->plan;
  const int64_t rows = in.rows, H = in.hidden_size, V = in.vocab;
  const size_t es = xent_dtype_size(in.dtype);
  cudaStream_t stream = (cudaStream_t)lc->ex.stream;
  const bool checked = opt.target_check == XENT_TARGETS_CHECKED;
  const bool per_row = opt.reduction == XENT_REDUCTION_NONE;
  xent_status st;
  xent_call c = ce_view(lc);
  xent_verdict *verdict = checked ? verdict_for(&c) : NULL;

  scratch sc;
  if ((st = begin(lc, c, verdict, stream, &sc))) return st;
  char *ws = sc.base;
  const ce_workspace &w = sc.w;
  char *zbuf = sc.z;
  c.in.logits = zbuf;
  void *ltws = sc.lt;
  float *db = sc.db;
  float *records = (float *)(ws + plan.records);
  const bool fp32acc = g.hidden && g.weight_accum == XENT_ACCUM_FP32 &&
                       g.hidden_dtype != XENT_FLOAT32;
  float *dx = fp32acc ? (float *)(ws + plan.hidden) : NULL;
  const size_t wes = g.weight ? xent_dtype_size(g.weight_dtype) : 0;
  const bool scalar_go = g.grad_output && g.grad_output_count == 1;

  vp_params vp;
  memset(&vp, 0, sizeof vp);
  fill_params(&vp.p, &c); /* the constants over the whole vocabulary */
  vp.p.hdr = w.hdr;
  vp.p.verdict = checked ? w.hdr : NULL;
  vp.p.row_loss = per_row ? c.out.loss : w.loss;
  vp.p.row_z = per_row ? c.out.z_loss
                       : ((opt.lse_square_scale > 0.0f || c.out.z_loss) ? w.z : NULL);
  vp.p.row_acc = per_row ? c.out.token_accuracy : (c.out.token_accuracy ? w.acc : NULL);
  vp.p.grad_scale = scalar_go ? g.grad_output : NULL;
  vp.p.row_grad_scale = g.grad_output && !scalar_go ? g.grad_output : NULL;
  vp.p.token_scaling = lc->lo.use_token_scaling;
  vp.vocab = V;
  vp.record = plan.record;
  vp.gathered = records;
  vp.ranks = (int)plan.slabs;

  for (int pass = 0; st == XENT_OK && pass < 2; pass++) {
    if (pass == 1 && checked && (st = check_verdict(verdict, &c, false))) break;
    for (int64_t s = 0; st == XENT_OK && s < plan.slabs; s++) {
      const int64_t j0 = s * plan.slab;
      const int64_t n = V - j0 < plan.slab ? V - j0 : plan.slab;
      const char *wj = (const char *)in.weight + (size_t)(j0 * in.weight_stride) * es;

      /* Z_s = X W_s^T + b_s */
      lt_gemm g1 = {true, false, n, rows, H, wj, in.weight_stride, in.dtype,
                    in.hidden, in.hidden_stride, in.dtype, zbuf, plan.slab, in.dtype,
                    1.0f, 0.0f, in.bias ? (const char *)in.bias + (size_t)j0 * es : NULL, false};
      if ((st = product(lc, dp, g1, ltws, plan.lt_bytes, stream))) break;

      vp_params v = vp;
      v.p.vocab = (int)n;
      v.offset = j0;
      if (pass == 0) {
        v.p.write_grad = 0;
        v.records = records + (size_t)s * (size_t)rows * (size_t)plan.record;
        if ((st = launch_vp(true, in.dtype, v, stream, dp, c.exp))) break;
        continue;
      }
      /* every slab writes the same row outputs; the gradient is the slab's */
      if ((st = launch_vp(false, in.dtype, v, stream, dp, c.exp))) break;

      if (g.weight) { /* dW_s (+)= G_s^T X */
        lt_gemm g3 = {false, true, H, n, rows, in.hidden, in.hidden_stride, in.dtype,
                      zbuf, plan.slab, in.dtype,
                      (char *)g.weight + (size_t)(j0 * g.weight_stride) * wes, g.weight_stride,
                      g.weight_dtype, 1.0f, g.accumulate ? 1.0f : 0.0f, NULL, false};
        if ((st = product(lc, dp, g3, ltws, plan.lt_bytes, stream))) break;
      }
      if (g.hidden) { /* dX (+)= G_s W_s */
        const bool more = s > 0 || (!fp32acc && g.accumulate);
        lt_gemm g2 = {false, false, H, rows, n, wj, in.weight_stride, in.dtype,
                      zbuf, plan.slab, in.dtype,
                      fp32acc ? (void *)dx : g.hidden, fp32acc ? H : g.hidden_stride,
                      fp32acc ? XENT_FLOAT32 : g.hidden_dtype, 1.0f, more ? 1.0f : 0.0f, NULL,
                      false};
        if ((st = product(lc, dp, g2, ltws, plan.lt_bytes, stream))) break;
      }
      if (db && (st = launch_colsum(in.dtype, zbuf, rows, (int)n, plan.slab * (int64_t)es,
                                    db + j0, stream)))
        break;
    }
  }
  if (!st && !per_row) st = launch_finalize(finalize_for(&c, vp.p, w), dp, c.exp, stream);
  if (!st && fp32acc)
    st = launch_store(g.hidden_dtype, g.hidden, g.hidden_stride, dx, H, rows, H, g.accumulate, dp,
                      stream);
  if (!st && db) st = launch_store(g.bias_dtype, g.bias, V, db, V, 1, V, g.accumulate, dp, stream);
  return release(sc, st, stream);
}

}  // namespace

}  // namespace xent

extern "C" xent_status xent_cuda_linear(const xent_linear_call *lc) {
  using namespace xent;
  device_scope scope;
  xent_status st = enter_device(lc->ex.device, &scope);
  if (st) return st;
  dev_props props;
  st = get_props(lc->ex.device, lc->exp, &props);
  cudaStream_t stream = (cudaStream_t)lc->ex.stream;
  if (!st && lc->opt.target_check == XENT_TARGETS_CHECKED) st = refuse_capture(stream);
  if (!st)
    st = lc->in.rows == 0    ? linear_rows0(lc, stream)
         : lc->plan.by_vocab ? linear_vocab(lc, props)
                             : linear_impl(lc, props);
  leave_device(&scope);
  return st;
}
