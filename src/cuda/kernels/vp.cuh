/*
 * vp.cuh - the vocabulary-parallel kernels (vp.cu): a block per row.
 * vp_stats_kernel reduces the row's shard to its record; vp_forward_kernel
 * combines the row's P records, writes the row's outputs and the shard's
 * gradient. Plain element loads (any width, any alignment): these serve the
 * shard calls, not the single-GPU kernels' launch table.
 */
#ifndef XENT_CUDA_KERNELS_VP_CUH
#define XENT_CUDA_KERNELS_VP_CUH

#include "common/vp.h"
#include "cuda/device.cuh"
#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/row.cuh"

namespace xent {

constexpr int kVpThreads = 256;

struct vp_params {
  fwd_params p;       /* the shard: x, rows, stride, vocab = its width, targets, options,
                         outputs, row arrays, hdr (scales, sum of weights), verdict */
  int64_t vocab;      /* the global V                                          */
  int64_t offset;
  int record;         /* floats per record                                     */
  float *records;     /* stats: rows x record                                  */
  const float *gathered; /* forward: ranks x rows x record                     */
  int ranks;
};

template <typename T>
__global__ void __launch_bounds__(kVpThreads) vp_stats_kernel(const vp_params v) {
  __shared__ part scratch[kMaxWarps + 1];
  const fwd_params &p = v.p;
  if (kernel_enter(p.verdict)) return;
  const int64_t row = blockIdx.x;
  const int64_t y = load_target(p.targets, p.target64, row);
  float *rec = v.records + row * v.record;
  if (y == p.ignore_index || y < 0 || y >= v.vocab) {
    if (threadIdx.x < (unsigned)v.record) rec[threadIdx.x] = 0.0f;
    return;
  }
  const char *x = p.x + row * p.stride_bytes;
  part q = part_empty();
  for (int j = threadIdx.x; j < p.vocab; j += blockDim.x) {
    float d, xc = elem<T>::load(x + (int64_t)j * sizeof(T));
    if (p.use_softcap) xc = cap(p, xc, &d);
    argmax_merge(q.am, q.ai, xc, (int)(v.offset + j));
    if (p.k.smoothing) {
      q.sx = fmaf(xc, p.k.inv_vocab, q.sx);
      if (p.weights) {
        const float mn = fmaxf(q.m, xc);
        const float wv = __ldg(p.weights + v.offset + j) * p.k.inv_vocab;
        q.swx = fmaf(wv, xent_shifted(xc, mn), shift_swx(q.swx, q.sw, q.m, mn));
        q.sw += wv;
      }
    }
    xent_merge_element(&q.m, &q.s, xc);
  }
  const part r = block_reduce(q, scratch);
  if (threadIdx.x != 0) return;
  xent_vp_row o;
  o.m = r.m;
  o.s = r.s;
  o.t = 0.0f;
  if (y >= v.offset && y < v.offset + p.vocab) {
    float d, xy = elem<T>::load(x + (y - v.offset) * (int64_t)sizeof(T));
    o.t = p.use_softcap ? cap(p, xy, &d) : xy;
  }
  o.u = r.sx;
  o.wu = r.swx;
  o.sw = r.sw;
  o.idx = r.ai;
  xent_vp_write(rec, v.record, &o);
}

template <typename T>
__global__ void __launch_bounds__(kVpThreads) vp_forward_kernel(const vp_params v) {
  __shared__ grad_coef shared_gc;
  __shared__ int skip;
  const fwd_params &p = v.p;
  if (forward_enter<T>(p)) return; /* rejected (deferred: the shard's gradient cleared) */
  const int64_t row = blockIdx.x;
  char *x = p.x + row * p.stride_bytes;
  if (threadIdx.x == 0) {
    const int64_t y = load_target(p.targets, p.target64, row);
    const bool bad = y != p.ignore_index && (y < 0 || y >= v.vocab);
    skip = bad || y == p.ignore_index;
    if (skip) {
      skipped_row_outputs(p, row, bad);
    } else {
      const xent_vp_row a = xent_vp_combine(v.gathered + row * v.record,
                                            p.rows * (int64_t)v.record, v.ranks, v.record);
      part r = part_empty();
      r.m = a.m;
      r.s = a.s;
      r.sx = a.u;
      r.swx = a.wu;
      r.ai = a.idx;
      shared_gc = finish_row(p, r, a.t, row, (int)y, true);
    }
  }
  __syncthreads();
  if (!p.write_grad) return;
  if (skip) {
    for (int j = threadIdx.x; j < p.vocab; j += blockDim.x)
      elem<T>::store(x + (int64_t)j * sizeof(T), 0.0f);
    return;
  }
  grad_coef gc = shared_gc;
  gc.y = (int)(gc.y - v.offset); /* the target's column in the shard (may lie outside) */
  for (int j = threadIdx.x; j < p.vocab; j += blockDim.x) {
    char *ep = x + (int64_t)j * sizeof(T);
    float dfac, g;
    const float xr = elem<T>::load(ep);
    float xc = xr;
    dfac = 1.0f;
    if (p.use_softcap) xc = cap(p, xr, &dfac);
    const float ej = fast_exp2((xc - gc.m) * kLog2e);
    const float bj = p.weights && p.k.smoothing ? gc.b * __ldg(p.weights + v.offset + j) : gc.b;
    g = fmaf(gc.a_s, ej, -bj);
    if (j == gc.y) g -= gc.c;
    elem<T>::store(ep, g * dfac);
  }
}

/* vp.cu: either kernel over vp.p.rows rows (a block each), for dtype dt. */
xent_status launch_vp(bool stats, xent_dtype dt, const vp_params &vp, cudaStream_t stream,
                      const dev_props &dp, const xent_experimental &exp);

}  // namespace xent

#endif
