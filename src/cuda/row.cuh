/*
 * row.cuh - the per-element and per-row work of the forward kernels: folding
 * elements into a row's statistics, the gradient of an element, a finished
 * row's outputs, skipped rows, and the entry every kernel makes.
 */
#ifndef XENT_CUDA_ROW_CUH
#define XENT_CUDA_ROW_CUH

#include <stdint.h>

#include "common/rowmath.h"
#include "cuda/elem.cuh"
#include "cuda/params.cuh"
#include "cuda/reduce.cuh"

namespace xent {

/* ------------------------------------------------------------------------ */
/* Per-element math                                                          */
/* ------------------------------------------------------------------------ */

/* x' from x, and the softcap derivative factor 1 - tanh^2. */
__device__ __forceinline__ float cap(const fwd_params &p, float x, float *dfac) {
  float t = tanhf(x * p.inv_softcap);
  *dfac = 1.0f - t * t;
  return p.softcap * t;
}

/* Fold one element x' (index j) into a partial's max pass. ARGMAX and SMOOTH
 * are compile-time so the common case carries no per-element branches. */
template <bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_max(const fwd_params &p, part &q, float xc, int j) {
  if (ARGMAX) argmax_merge(q.am, q.ai, xc, j);
  const float mn = fmaxf(q.m, xc);
  if (SMOOTH) { /* over V, so that no finite row overflows them */
    q.sx = fmaf(xc, p.k.inv_vocab, q.sx);
    if (GENERAL && p.weights) { /* sum w (x' - m) / V, moved along as m grows */
      const float wv = __ldg(p.weights + j) * p.k.inv_vocab;
      q.swx = fmaf(wv, xent_shifted(xc, mn), shift_swx(q.swx, q.sw, q.m, mn));
      q.sw += wv;
    }
  }
  q.m = mn;
}

/* Fold one 16-byte vector v (elements j0 .. j0 + N - 1) into an online
 * (max m, sum s) and the max-pass statistics q: one exponential per element,
 * and one rescale of s when the vector raises the max. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_vec(const fwd_params &p, const uint4 &v, int j0, float &m,
                                         float &s, part &q) {
  constexpr int VN = elem<T>::N;
  float f[VN];
  elem<T>::unpack(v, f);
  float cm = -INFINITY;
#pragma unroll
  for (int e = 0; e < VN; e++) {
    float d;
    if (GENERAL && p.use_softcap) f[e] = cap(p, f[e], &d);
    fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, f[e], j0 + e);
    cm = fmaxf(cm, f[e]);
  }
  if (cm > m) {
    s *= fast_exp2((m - cm) * kLog2e); /* 0 while m was -inf; NaN stays NaN */
    m = cm;
  }
  if (m != -INFINITY) {
#pragma unroll
    for (int e = 0; e < VN; e++) s += fast_exp2((f[e] - m) * kLog2e);
  } else {
#pragma unroll
    for (int e = 0; e < VN; e++)
      if (f[e] != f[e]) s = f[e];
  }
}

/* Fold a thread's U vectors of a stage into its online (max m, sum s), for
 * calls that need nothing but the two (no softcap, weights, accuracy or
 * smoothing): the stage's maximum first, on packed pairs, then one rescale
 * and U * N exponentials summed in four independent chains. Vectors past
 * the stage's end hold -inf and add nothing. The same result as fold_vec
 * up to the order of the additions.
 *
 * FMA: each exponent as one FFMA, x log2(e) - k with k = round(m log2(e)),
 * instead of the difference (x - m) log2(e). It is exact up to the offset
 * m log2(e) - k, which an FMA gives exactly and which scales the stage's
 * sum by 2^offset, taken back once; while |k| < 2^24 the offset is at most
 * 1/2, beyond it the difference form runs. The forward without a gradient
 * (fwd_segment) is faster so, the staged kernel slower (bench/NOTES.md:
 * numerics). */
template <typename T, int U, bool FMA = false>
__device__ __forceinline__ void fold_stage(const uint4 (&v)[U], float &m, float &s) {
  constexpr int VN = elem<T>::N;
  using W = word_max<T>;
  uint32_t w[U];
#pragma unroll
  for (int u = 0; u < U; u++) w[u] = W::of(W::of(v[u].x, v[u].y), W::of(v[u].z, v[u].w));
#pragma unroll
  for (int h = 1; h < U; h *= 2)
#pragma unroll
    for (int u = 0; u + h < U; u += 2 * h) w[u] = W::of(w[u], w[u + h]);
  const float cm = W::to_float(w[0]);
  if (cm > m) {
    s *= fast_exp2((m - cm) * kLog2e); /* 0 while m was -inf; NaN stays NaN */
    m = cm;
  }
  if (m == -INFINITY) { /* every element so far -inf or NaN: keep a NaN */
#pragma unroll
    for (int u = 0; u < U; u++) {
      float f[VN];
      elem<T>::unpack(v[u], f);
#pragma unroll
      for (int e = 0; e < VN; e++)
        if (f[e] != f[e]) s = f[e];
    }
    return;
  }
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float k = m * kLog2e;
  if (FMA && fabsf(k) < 16777216.0f) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      float f[VN];
      elem<T>::unpack(v[u], f);
#pragma unroll
      for (int e = 0; e < VN; e++) acc[e & 3] += fast_exp2(fmaf(f[e], kLog2e, -k));
    }
    const float offset = fmaf(m, kLog2e, -k); /* m log2(e) - k, exactly */
    s = fmaf((acc[0] + acc[1]) + (acc[2] + acc[3]), fast_exp2(-offset), s);
    return;
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    float f[VN];
    elem<T>::unpack(v[u], f);
#pragma unroll
    for (int e = 0; e < VN; e++) acc[e & 3] += fast_exp2((f[e] - m) * kLog2e);
  }
  s += (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Runs CALL(ARGMAX, SMOOTH) with the compile-time flags matching this call. */
#define XENT_WITH_FLAGS(p, CALL)                       \
  do {                                                 \
    if ((p).need_argmax) {                             \
      if ((p).k.smoothing) CALL(true, true);           \
      else CALL(true, false);                          \
    } else {                                           \
      if ((p).k.smoothing) CALL(false, true);          \
      else CALL(false, false);                         \
    }                                                  \
  } while (0)

/* Row-wide constants the gradient needs: g_j = a_s e_j - b (w_j) - [j == y] c
 * with e_j = exp(x'_j - m), a_s = a / s (rowmath.h). The exponent is the
 * difference (x'_j - m) log2(e), accurate for any finite row; the one-FFMA
 * form x' log2(e) - m log2(e) is off by the rounding of the products, and
 * its exact variants (the per-row offset taken back) measured slower
 * (bench/NOTES.md: numerics). */
struct grad_coef {
  float a_s, b, c;
  float m;
  int y;
};

/* The gradient of one element x (raw logit) with index j, before the
 * target's -c (applied per vector by fix_target). */
template <bool GENERAL>
__device__ __forceinline__ float grad_elem(const fwd_params &p, const grad_coef &gc, float x,
                                           int j, float *dfac) {
  float xc = x;
  *dfac = 1.0f;
  if (GENERAL && p.use_softcap) xc = cap(p, x, dfac);
  float ej = fast_exp2((xc - gc.m) * kLog2e);
  float bj = (GENERAL && p.weights) ? gc.b * __ldg(p.weights + j) : gc.b;
  float g = fmaf(gc.a_s, ej, -bj);
  if (GENERAL) g *= *dfac;
  return g;
}

/* Gradients of a vector of N elements starting at index j0, in place in f. */
template <typename T, bool GENERAL>
__device__ __forceinline__ void grad_vec(const fwd_params &p, const grad_coef &gc,
                                         float (&f)[elem<T>::N], int j0) {
  constexpr int VN = elem<T>::N;
  float dfac[VN];
#pragma unroll
  for (int e = 0; e < VN; e++) f[e] = grad_elem<GENERAL>(p, gc, f[e], j0 + e, &dfac[e]);
  const unsigned off = (unsigned)(gc.y - j0);
  if (off < (unsigned)VN) {
#pragma unroll
    for (int e = 0; e < VN; e++)
      if (e == (int)off) f[e] -= GENERAL ? gc.c * dfac[e] : gc.c;
  }
}

/* The gradient of a single element (head or tail of a row). */
template <bool GENERAL>
__device__ __forceinline__ float grad_one(const fwd_params &p, const grad_coef &gc, float x,
                                          int j) {
  float dfac;
  float g = grad_elem<GENERAL>(p, gc, x, j, &dfac);
  if (j == gc.y) g -= GENERAL ? gc.c * dfac : gc.c;
  return g;
}

/* Checked mode: did the count kernel find a bad target or weight? Then every
 * kernel of the call returns before it writes anything (or waits on any
 * barrier: the verdict is the same for every block), so the host can queue
 * the whole call before it reads the verdict, and still leave the logits and
 * the outputs as they were. */
__device__ __forceinline__ bool call_rejected(const ws_header *verdict) {
  return verdict && (verdict->bad_target | verdict->bad_weight) != 0;
}

/* The first statement of the forward, finalize and scale kernels. On sm_90+
 * the host launches them programmatically (set_pdl): such a kernel may
 * start while the kernel ahead of it in the stream still runs, so it first
 * waits for that grid to finish and its writes to land (a no-op after an
 * ordinary launch). It then lets the kernel behind it launch, whose blocks
 * wait, resident, for this grid's end: no launch gap between the two. The
 * wait comes before every read, the verdict's included. Returns
 * call_rejected(verdict).
 *
 * early: let the kernel behind launch before the wait, for a grid that is
 * all resident while the kernel ahead still runs (the segment path's merge
 * kernel), so that the next one is resident too when the grid ahead ends,
 * not launched only once this one's wait is over. (The hardware launches a
 * dependent grid once every block of this one has started, so a larger
 * grid gains nothing. With this order in every kernel the full step at
 * V = 32000 was 0.2 to 0.7 % slower, bench/HISTORY.md v23.) */
__device__ __forceinline__ bool kernel_enter(const ws_header *verdict, bool early = false) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#else
  (void)early;
#endif
  return call_rejected(verdict);
}

/* A forward kernel's exit when the call is rejected. In deferred mode the
 * host reads the verdict later and may hand the gradient on before it does,
 * so a call that writes one clears every row (rows blockIdx.x, + gridDim.x,
 * ...: each once, whatever the kernel's own mapping) rather than leave the
 * logits there. Inlined: a call that takes the parameters by reference puts
 * them in local memory for the whole kernel (3.5x slower, bench/HISTORY.md v25). */
template <typename T>
__device__ __forceinline__ void reject_rows(const fwd_params &p) {
  if (!p.zero_if_rejected) return;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x)
    for (int j = (int)threadIdx.x; j < p.vocab; j += (int)blockDim.x)
      elem<T>::store(p.x + r * p.stride_bytes + (int64_t)j * (int64_t)sizeof(T), 0.0f);
}

/* The first statement of the forward kernels: kernel_enter, and on a
 * rejected call reject_rows. True: the kernel returns. */
template <typename T>
__device__ __forceinline__ bool forward_enter(const fwd_params &p) {
  if (!kernel_enter(p.verdict)) return false;
  reject_rows<T>(p);
  return true;
}

/* The reduction scales the count kernel left in the workspace header (1
 * without one), and the constants with the device's sum of weights. A
 * persistent kernel reads them once, not once per row. */
struct row_scales {
  xent_consts k;
  float loss, z;
};

__device__ __forceinline__ row_scales load_scales(const fwd_params &p) {
  row_scales rs;
  rs.k = p.k;
  rs.loss = 1.0f;
  rs.z = 1.0f;
  if (p.hdr) {
    if (p.weights) rs.k.sum_w = p.hdr->sum_w;
    rs.loss = p.hdr->scale_loss;
    rs.z = p.hdr->scale_z;
  }
  if (p.grad_scale) { /* only the gradient's scales: the outputs take theirs later */
    const float g = __ldg(p.grad_scale);
    rs.loss *= g;
    rs.z *= g;
  }
  return rs;
}

/* Statistics of a finished row -> gradient coefficients and row outputs.
 * Called with the row's full reduction; `xy` is x'_y. */
__device__ __forceinline__ grad_coef finish_row(const fwd_params &p, const row_scales &rs,
                                                const part &r, float xy, int64_t row, int y,
                                                bool write_outputs) {
  const xent_consts &k = rs.k;
  const float scale_loss = rs.loss, scale_z = rs.z;
  xent_row_stats st;
  st.m = r.m;
  st.log_s = logf(r.s);
  st.xy = xy;
  st.mean_x = r.sx;
  st.mean_wx = r.swx; /* relative to r.m, the row's maximum */
  st.wy = p.weights ? __ldg(p.weights + y) : 1.0f;
  const float lse = xent_row_lse(&st);
  xent_row_coef c = xent_row_coefficients(&k, &st, scale_loss, scale_z);
  /* the fused linear loss's factors: p_y (detached) and the row's upstream
   * gradient */
  const float py = p.token_scaling ? expf((xy - r.m) - st.log_s) : 1.0f;
  const float f = p.row_grad_scale ? py * __ldg(p.row_grad_scale + row) : py;
  grad_coef gc;
  gc.a_s = c.a * f / r.s;
  gc.b = c.b * f;
  gc.c = c.c * f;
  gc.m = r.m;
  gc.y = y;
  if (write_outputs) {
    float lp = xent_row_loss(&k, &st) * py;
    float z = xent_row_z(&k, lse) * py;
    float acc = (r.ai == y) ? 1.0f : 0.0f;
    if (p.per_row_out) {
      p.row_loss[row] = lp + z;
    } else {
      /* + 0 turns a -0 into +0 and leaves every other value as it is: in
       * the workspace, -0 marks an ignored row (skipped_row_outputs) */
      p.row_loss[row] = __fadd_rn(lp, 0.0f);
    }
    if (p.row_z) p.row_z[row] = z;
    if (p.row_acc) p.row_acc[row] = acc;
    if (p.lse_out) p.lse_out[row] = lse;
    if (p.pred_out) p.pred_out[row] = r.ai;
  }
  return gc;
}

__device__ __forceinline__ grad_coef finish_row(const fwd_params &p, const part &r, float xy,
                                                int64_t row, int y, bool write_outputs) {
  return finish_row(p, load_scales(p), r, xy, row, y, write_outputs);
}

/* Is target y outside [0, V) without being ignore_index? The forward
 * kernels skip such a row (unchecked mode; checked mode never launches
 * them with one) as they skip an ignored row: zero gradient, and the
 * outputs of skipped_row_outputs. */
__device__ __forceinline__ bool target_bad(const fwd_params &p, int64_t y) {
  return y != p.ignore_index && (y < 0 || y >= p.vocab);
}

/* x'_y: the target's logit of a row, soft-capped when the call asks for it
 * (GENERAL kernels only). Read by the one thread that writes the row's
 * outputs. */
template <typename T, bool GENERAL>
__device__ __forceinline__ float load_xy(const fwd_params &p, const char *rowp, int y) {
  float d, xy = elem<T>::load(rowp + (int64_t)y * sizeof(T));
  if (GENERAL && p.use_softcap) xy = cap(p, xy, &d);
  return xy;
}

/* Outputs of an ignored row (bad = 0) or of a row with a bad target (bad = 1,
 * unchecked mode only). */
__device__ __forceinline__ void skipped_row_outputs(const fwd_params &p, int64_t row, bool bad) {
  float v = bad ? __int_as_float(0x7fc00000) : 0.0f;
  /* The caller sees 0 for an ignored row. The workspace's copy is -0, which
   * no other row leaves there (finish_row), so that the finalize kernel
   * counts N from the values it adds rather than from the targets. */
  p.row_loss[row] = bad || p.per_row_out ? v : -0.0f;
  if (p.row_z) p.row_z[row] = v;
  if (p.row_acc) p.row_acc[row] = 0.0f;
  if (p.lse_out) p.lse_out[row] = 0.0f;
  if (p.pred_out) p.pred_out[row] = -1;
}

/* Zero this thread's share of a skipped row's gradient: vectors j0, j0 +
 * step, ... below jend, and extra slots e0, e0 + estep, ... */
template <typename T>
__device__ __forceinline__ void zero_row(char *row, const row_geom &g, int j0, int jend, int step,
                                         int e0, int estep) {
  uint4 *vp = (uint4 *)(row + (int64_t)g.head * sizeof(T));
  if (jend > g.nvec) jend = g.nvec;
  for (int j = j0; j < jend; j += step) st_grad(vp + j, make_uint4(0, 0, 0, 0));
  for (int e = e0; e < g.extras; e += estep)
    elem<T>::store(row + (int64_t)extra_index(g, e) * sizeof(T), 0.0f);
}

/* Fold this thread's extra elements of a row (slots e0, e0 + step, ...)
 * into an online (max m, sum s) and the max-pass statistics q. `base`: the
 * column of the row's element 0 (a shard's offset; 0 for a whole row). */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_extras(const fwd_params &p, const char *rowp,
                                            const row_geom &g, int e0, int step, float &m,
                                            float &s, part &q, int base = 0) {
  for (int e = e0; e < g.extras; e += step) {
    const int ej = extra_index(g, e);
    float x = elem<T>::load(rowp + (int64_t)ej * sizeof(T)), d;
    if (GENERAL && p.use_softcap) x = cap(p, x, &d);
    fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, x, base + ej);
    xent_merge_element(&m, &s, x);
  }
}

/* The gradient of this thread's extra elements of a row (slots e0, e0 +
 * step, ...), in place; `base` as fold_extras's. */
template <typename T, bool GENERAL>
__device__ __forceinline__ void grad_extras(const fwd_params &p, const grad_coef &gc, char *rowp,
                                            const row_geom &g, int e0, int step, int base = 0) {
  for (int e = e0; e < g.extras; e += step) {
    const int ej = extra_index(g, e);
    char *ep = rowp + (int64_t)ej * sizeof(T);
    elem<T>::store(ep, grad_one<GENERAL>(p, gc, elem<T>::load(ep), base + ej));
  }
}

}  // namespace xent

#endif
