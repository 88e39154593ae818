/*
 * vp.cuh - the vocabulary-parallel kernels (vp.cu): a block per row, or a
 * warp per row for plain calls (vp_stats_warp_kernel, vp_forward_warp_kernel).
 * vp_stats_kernel reduces the row's shard to its record (plain calls: a
 * warp per row, or a block issuing all the row's loads at once,
 * vp_stats_segment_kernel); vp_forward_kernel
 * combines the row's P records, writes the row's outputs and the shard's
 * gradient. 16-byte loads and stores over any shard width and alignment
 * (row.cuh's per-vector math), so that both stream the shard near the copy
 * bandwidth (bench/NOTES.md: the vocab schedule's passes).
 */
#ifndef XENT_CUDA_KERNELS_VP_CUH
#define XENT_CUDA_KERNELS_VP_CUH

#include "common/vp.h"
#include "cuda/device.cuh"
#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/kernels/segment.cuh"
#include "cuda/kernels/tworead.cuh"
#include "cuda/kernels/warprow.cuh"
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

/* 16-byte vectors a thread has in flight. Every index the per-element math
 * takes is the global column (offset + j), so that class weights, the
 * arg-max and the target's column need no shift. */
constexpr int kVpUnroll = kTwoReadUnroll;

/* A row's record: its fold's (max, sum) and other sums in r, the target's
 * logit t (0 where the target is in another shard). */
__device__ __forceinline__ void vp_write_record(float *rec, int R, const part &r, float t) {
  xent_vp_row o;
  o.m = r.m;
  o.s = r.s;
  o.t = t;
  o.u = r.sx;
  o.wu = r.swx;
  o.sw = r.sw;
  o.idx = r.ai;
  xent_vp_write(rec, R, &o);
}

/* This thread's first U vectors of a row (those below nvec), the thread
 * `tid` of the `nt` that share the row (a block's, or a warp's lanes). */
template <typename T>
__device__ __forceinline__ void vp_first_vectors(const char *x, const row_geom &g,
                                                 uint4 (&a)[kVpUnroll], int tid, int nt) {
  const uint4 *vp = (const uint4 *)(x + (int64_t)g.head * (int)sizeof(T));
#pragma unroll
  for (int u = 0; u < kVpUnroll; u++)
    if (tid + u * nt < g.nvec) a[u] = ld_once(vp + tid + u * nt);
}

/* A row's fold over the shard in the two-read kernel's first-pass order:
 * this thread's first U vectors, already in `a`, then the rest by
 * tworead_pass1 (a pass without a gradient reads each vector once). */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ part vp_fold_row(const fwd_params &p, const char *x, const row_geom &g,
                                            int offset, const uint4 (&a)[kVpUnroll]) {
  constexpr int VN = elem<T>::N, U = kVpUnroll;
  const int tid = threadIdx.x, nt = blockDim.x, base = offset + g.head;
  part q = part_empty();
  float m = q.m, s = q.s;
#pragma unroll
  for (int u = 0; u < U; u++)
    if (tid + u * nt < g.nvec)
      fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, a[u], base + (tid + u * nt) * VN, m, s, q);
  q.m = m;
  q.s = s;
  tworead_pass1<T, GENERAL, ARGMAX, SMOOTH, U>(p, x, g, U * nt, g.nvec, true, q, tid, nt, offset);
  return q;
}

/* A row's record. Its life at a narrow shard is a chain of latencies, not
 * bytes (bench/NOTES.md v41), so nothing waits that need not: the row's
 * first round of loads goes out before its target is known (a skipped
 * row's record is zeroed after; a longer row is skipped after that first
 * round), the target's logit is on its way while the row is folded, and a
 * call that folds nothing but (max, sum) reduces those two alone. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__global__ void __launch_bounds__(kVpThreads) vp_stats_kernel(const vp_params v) {
  __shared__ part scratch[kMaxWarps + 1];
  const fwd_params &p = v.p;
  if (kernel_enter(p.verdict)) return;
  const int64_t row = blockIdx.x;
  const char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  uint4 a[kVpUnroll];
  vp_first_vectors<T>(x, g, a, (int)threadIdx.x, (int)blockDim.x);
  const int64_t y = load_target(p.targets, p.target64, row);
  float *rec = v.records + row * v.record;
  const bool skip = y == p.ignore_index || y < 0 || y >= v.vocab;
  const bool one_round = g.nvec <= kVpUnroll * (int)blockDim.x;
  if (!one_round && skip) {
    if (threadIdx.x < (unsigned)v.record) rec[threadIdx.x] = 0.0f;
    return;
  }
  const bool here = threadIdx.x == 0 && !skip && y >= v.offset && y < v.offset + p.vocab;
  const float xy = here ? elem<T>::load(x + (y - v.offset) * (int64_t)sizeof(T)) : 0.0f;
  const part q = vp_fold_row<T, GENERAL, ARGMAX, SMOOTH>(p, x, g, (int)v.offset, a);
  const part r = ARGMAX || SMOOTH ? block_reduce(q, scratch)
                                  : threads_reduce_max_sum<false>(q, scratch, (int)blockDim.x);
  if (skip) {
    if (threadIdx.x < (unsigned)v.record) rec[threadIdx.x] = 0.0f;
    return;
  }
  if (threadIdx.x != 0) return;
  float d;
  vp_write_record(rec, v.record, r, !here ? 0.0f : GENERAL && p.use_softcap ? cap(p, xy, &d) : xy);
}

/* The gradient of a shard row in place, from its coefficients (gc.y the
 * global target column; `offset` the shard's first global column), its
 * first U vectors a thread already in `a`: one read and one write, by the
 * `nt` threads that share the row (`tid` this one). */
template <typename T, bool GENERAL>
__device__ __forceinline__ void vp_grad_row(const fwd_params &p, const grad_coef &gc, char *x,
                                            const row_geom &g, int offset,
                                            uint4 (&a)[kVpUnroll], int tid, int nt) {
  constexpr int VN = elem<T>::N, U = kVpUnroll;
  uint4 *vp = (uint4 *)(x + (int64_t)g.head * (int)sizeof(T));
  const int base = offset + g.head;
  for (int j0 = tid;; j0 += U * nt) {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(a[u], f);
        grad_vec<T, GENERAL>(p, gc, f, base + j * VN);
        st_grad(vp + j, elem<T>::pack(f));
      }
    }
    if (j0 + U * nt >= g.nvec) break;
#pragma unroll
    for (int u = 0; u < U; u++)
      if (j0 + (U + u) * nt < g.nvec) a[u] = ld_once(vp + j0 + (U + u) * nt);
  }
  grad_extras<T, GENERAL>(p, gc, x, g, tid, nt, offset);
}

/* A row's gradient once its coefficients are shared: written in place,
 * zeros for a skipped (ignored or bad) row, nothing without a gradient. */
template <typename T, bool GENERAL>
__device__ __forceinline__ void vp_row_gradient(const fwd_params &p, bool skip, const grad_coef &gc,
                                                char *x, const row_geom &g, int offset,
                                                uint4 (&a)[kVpUnroll], int tid, int nt) {
  if (!p.write_grad) return;
  if (skip) {
    zero_row<T>(x, g, tid, g.nvec, nt, tid, nt);
    return;
  }
  vp_grad_row<T, GENERAL>(p, gc, x, g, offset, a, tid, nt);
}

/* A row's combined records as the reduction finish_row takes. */
__device__ __forceinline__ void vp_row_part(const xent_vp_row &c, part &r) {
  r = part_empty();
  r.m = c.m;
  r.s = c.s;
  r.sx = c.u;
  r.swx = c.wu;
  r.ai = c.idx;
}

/* Floats of a row's P records that the forward stages in shared memory (P
 * up to 256 full records): loaded by all threads at once rather than one
 * rank after another by the thread that combines them. */
constexpr int kVpStagedFloats = 2048;

/* The row's records combined, its outputs, and the shard's gradient in
 * place: one read and one write of the shard, its first vectors and the
 * records loaded before the records are combined (in rank order, by one
 * thread, as on the host). */
template <typename T, bool GENERAL>
__global__ void __launch_bounds__(kVpThreads) vp_forward_kernel(const vp_params v) {
  __shared__ grad_coef shared_gc;
  __shared__ int skip;
  __shared__ float recs[kVpStagedFloats];
  const fwd_params &p = v.p;
  if (forward_enter<T>(p)) return; /* rejected (deferred: the shard's gradient cleared) */
  const int64_t row = blockIdx.x;
  char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  const int offset = (int)v.offset;
  uint4 a[kVpUnroll];
  if (p.write_grad) vp_first_vectors<T>(x, g, a, (int)threadIdx.x, (int)blockDim.x);
  /* the target on its way beside the records, used after they are staged */
  const int64_t y = threadIdx.x == 0 ? load_target(p.targets, p.target64, row) : 0;
  const int R = v.record, staged = v.ranks * R <= kVpStagedFloats;
  const int64_t pitch = p.rows * (int64_t)R;
  if (staged) {
    for (int i = threadIdx.x; i < v.ranks * R; i += blockDim.x)
      recs[i] = v.gathered[(i / R) * pitch + row * R + i % R];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const bool bad = y != p.ignore_index && (y < 0 || y >= v.vocab);
    skip = bad || y == p.ignore_index;
    if (skip) {
      skipped_row_outputs(p, row, bad);
    } else {
      const xent_vp_row c = staged ? xent_vp_combine(recs, R, v.ranks, R)
                                   : xent_vp_combine(v.gathered + row * R, pitch, v.ranks, R);
      part r;
      vp_row_part(c, r);
      shared_gc = finish_row(p, r, c.t, row, (int)y, true);
    }
  }
  __syncthreads();
  vp_row_gradient<T, GENERAL>(p, skip, shared_gc, x, g, offset, a, (int)threadIdx.x,
                              (int)blockDim.x);
}

/* The plain calls' kernels (no weights, softcap, arg-max or smoothing): a
 * row per warp, kVpThreads / 32 rows a block. A block per row of a narrow
 * shard (the vocab schedule's slabs: 7128 columns at 4096 x 4096 x 128256)
 * spends its life in a chain of latencies and barriers: the statistics
 * pass took 0.54 of the copy's rate there and the forward 0.75, a warp per
 * row 0.70 and 0.86 (H100, bench/NOTES.md v45; the statistics now take the
 * segment kernel below where it is faster). A warp's lanes share nothing
 * but shuffles, so no warp waits for another, and an SM holds up to 64 rows
 * in flight. */
constexpr int kVpWarpRows = kVpThreads / 32;
/* Floats of a row's records a warp stages for its combine (ranks x record);
 * calls with more take the block kernel. */
constexpr int kVpWarpRecordFloats = 256;

/* A row's record by a warp: two stages of kWarpRowUnroll / 2 vectors a
 * lane, one in flight while the other is folded (fold_stage: one max, one
 * rescale a stage), issued before the target is known (a skipped row's
 * record is zeroed). */
template <typename T>
__global__ void __launch_bounds__(kVpThreads) vp_stats_warp_kernel(const vp_params v) {
  constexpr int U = kWarpRowUnroll / 2, W = 32;
  const fwd_params &p = v.p;
  if (kernel_enter(p.verdict)) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t)blockIdx.x * kVpWarpRows + (threadIdx.x >> 5);
  if (row >= p.rows) return; /* the warp's lanes alike */
  const char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  const uint4 *vp = (const uint4 *)(x + (int64_t)g.head * (int)sizeof(T));
  uint4 a[U], b[U];
  warprow_load<U, W>(a, vp, lane, g.nvec);
  warprow_load<U, W>(b, vp, lane + U * W, g.nvec);
  const int64_t y = load_target(p.targets, p.target64, row);
  float *rec = v.records + row * v.record;
  if (y == p.ignore_index || y < 0 || y >= v.vocab) {
    if (lane < v.record) rec[lane] = 0.0f;
    return;
  }
  const bool here = lane == 0 && y >= v.offset && y < v.offset + p.vocab;
  const float xy = here ? elem<T>::load(x + (y - v.offset) * (int64_t)sizeof(T)) : 0.0f;
  /* the plain folds touch (m, s) alone: the record's other sums stay
   * part_empty's, as the block kernel's (max, sum) reduction leaves them */
  part q = part_empty();
  float m = -INFINITY, s = 0.0f;
  warprow_fold_row<T, U, W>(p, vp, g, lane, a, b, m, s, q);
  fold_extras<T, false, false, false>(p, x, g, lane, W, m, s, q);
  warp_max_sum(m, s);
  if (lane != 0) return;
  q.m = m;
  q.s = s;
  vp_write_record(rec, v.record, q, here ? xy : 0.0f);
}

/* A row's record by a block of `blockDim.x` threads that issue every load
 * of the row at once, U vectors each (the forward without gradient's
 * segment kernel, segment.cuh, on rows of one segment): blocks of a few
 * microseconds, which the block scheduler hands to whichever SM is free,
 * where a warp per row holds a narrow shard's 4096 rows in one wave whose
 * loads start together and whose tail ends together (bench/NOTES.md v46).
 * Rows of at most blockDim.x * U vectors; vp.cu picks the threads. */
constexpr int kVpSegmentMaxThreads = 256;
template <typename T, int U>
__global__ void __launch_bounds__(kVpSegmentMaxThreads, 5) vp_stats_segment_kernel(
    const vp_params v) {
  const fwd_params &p = v.p;
  if (kernel_enter(p.verdict)) return;
  const int64_t row = blockIdx.x;
  const char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  const uint4 *vp = (const uint4 *)(x + (int64_t)g.head * (int)sizeof(T));
  const int tid = (int)threadIdx.x, nt = (int)blockDim.x;
  uint4 a[U];
  segment_load<T, U>(a, vp, tid, g.nvec);
  const bool lead = tid == 0;
  const int64_t y = lead ? load_target(p.targets, p.target64, row) : 0;
  float m = -INFINITY, s = 0.0f;
  fold_stage<T, U, true>(a, m, s);
  part q = part_empty(); /* the plain folds touch (m, s) alone */
  fold_extras<T, false, false, false>(p, x, g, tid, nt, m, s, q);
  const bool take = lead && y != p.ignore_index && y >= 0 && y < v.vocab;
  const bool here = take && y >= v.offset && y < v.offset + p.vocab;
  const float xy = here ? elem<T>::load(x + (y - v.offset) * (int64_t)sizeof(T)) : 0.0f;
  __shared__ float2 scratch[kVpSegmentMaxThreads / 32];
  block_max_sum(m, s, scratch);
  if (!lead) return;
  float *rec = v.records + row * v.record;
  if (!take) { /* an ignored or bad row: a record of zeros, as the other kernels */
    for (int i = 0; i < v.record; i++) rec[i] = 0.0f;
    return;
  }
  q.m = m;
  q.s = s;
  vp_write_record(rec, v.record, q, here ? xy : 0.0f);
}

/* The row's records combined, its outputs and the shard's gradient by a
 * warp: the lanes stage the records in shared memory, lane 0 combines them
 * in rank order (the block kernel's bits), and the coefficients go to the
 * lanes by shuffles. */
template <typename T>
__global__ void __launch_bounds__(kVpThreads) vp_forward_warp_kernel(const vp_params v) {
  __shared__ float recs[kVpWarpRows][kVpWarpRecordFloats];
  const fwd_params &p = v.p;
  if (forward_enter<T>(p)) return; /* rejected (deferred: the shard's gradient cleared) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = (int64_t)blockIdx.x * kVpWarpRows + warp;
  if (row >= p.rows) return; /* the warp's lanes alike */
  char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  uint4 a[kVpUnroll];
  if (p.write_grad) vp_first_vectors<T>(x, g, a, lane, 32);
  const int64_t y = lane == 0 ? load_target(p.targets, p.target64, row) : 0;
  const int R = v.record;
  const int64_t pitch = p.rows * (int64_t)R;
  float *wr = recs[warp];
  for (int i = lane; i < v.ranks * R; i += 32) wr[i] = v.gathered[(i / R) * pitch + row * R + i % R];
  __syncwarp();
  int skip = 0;
  grad_coef gc;
  gc.a_s = gc.b = gc.c = gc.m = 0.0f;
  gc.y = 0;
  if (lane == 0) {
    const bool bad = y != p.ignore_index && (y < 0 || y >= v.vocab);
    skip = bad || y == p.ignore_index;
    if (skip) {
      skipped_row_outputs(p, row, bad);
    } else {
      const xent_vp_row c = xent_vp_combine(wr, R, v.ranks, R);
      part r;
      vp_row_part(c, r);
      gc = finish_row(p, r, c.t, row, (int)y, true);
    }
  }
  /* The lanes' stride as a value the compiler cannot see: with nt = 32 known,
   * nvcc 13 built vp_grad_row's loop for 16-bit rows so that each group's
   * first vector was loaded from the group before, which the stores had
   * just overwritten (test_vp, bench/NOTES.md v45). */
  int lanes;
  asm volatile("mov.u32 %0, 32;" : "=r"(lanes));
  skip = __shfl_sync(0xffffffffu, skip, 0);
  gc.a_s = __shfl_sync(0xffffffffu, gc.a_s, 0);
  gc.b = __shfl_sync(0xffffffffu, gc.b, 0);
  gc.c = __shfl_sync(0xffffffffu, gc.c, 0);
  gc.m = __shfl_sync(0xffffffffu, gc.m, 0);
  gc.y = __shfl_sync(0xffffffffu, gc.y, 0);
  vp_row_gradient<T, false>(p, skip, gc, x, g, (int)v.offset, a, lane, lanes);
}

/* vp.cu: either pass over vp.p.rows rows (a warp each for plain calls, a
 * block each otherwise), for dtype dt. */
xent_status launch_vp(bool stats, xent_dtype dt, const vp_params &vp, cudaStream_t stream,
                      const dev_props &dp, const xent_experimental &exp);

}  // namespace xent

#endif
