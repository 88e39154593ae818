/*
 * warprow.cuh - fwd_warprow, the forward without gradient a row per warp:
 * pass 1 of the two-read kernel by the warp's 32 lanes, reduced by shuffles
 * alone. The plain kernel (no weights, softcap or statistics) pipelines its
 * loads in two stages instead, folded a stage at a time (fold_stage), and
 * may share each row among 2, 4 or 8 warps that merge their statistics in
 * shared memory (SPLIT). bench/NOTES.md: row per warp.
 */
#ifndef XENT_CUDA_KERNELS_WARPROW_CUH
#define XENT_CUDA_KERNELS_WARPROW_CUH

#include "cuda/kernels/tworead.cuh"
#include "cuda/row.cuh"

namespace xent {

constexpr int kWarpRowUnroll = 8;

/* This lane's vectors j0, j0 + W, ... (U of them, those below n) of a row,
 * W the lanes that share the row (32 a warp). Plain loads, not ld_once's
 * evict-first ones: those cost this pass 2 to 4 % (bench/HISTORY.md v20). */
template <int U, int W = 32>
__device__ __forceinline__ void warprow_load(uint4 (&v)[U], const uint4 *vp, int j0, int n) {
#pragma unroll
  for (int u = 0; u < U; u++)
    if (j0 + u * W < n) v[u] = ld_plain(vp + j0 + u * W);
}

template <typename T, int U, int W = 32>
__device__ __forceinline__ void warprow_fold(const fwd_params &p, const uint4 (&v)[U],
                                             const row_geom &g, int j0, float &m, float &s,
                                             part &q) {
  if (j0 + (U - 1) * W < g.nvec) { /* the whole stage: the row's body */
    fold_stage<T, U>(v, m, s);
    return;
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int j = j0 + u * W;
    if (j < g.nvec) fold_vec<T, false, false, false>(p, v[u], g.head + j * elem<T>::N, m, s, q);
  }
}

/* The pipelined fold of a row's vectors by its W lanes (this one vl): the
 * stages a and b, already issued at vl and vl + U W, folded in turn while
 * the other's next stage is in flight. */
template <typename T, int U, int W>
__device__ __forceinline__ void warprow_fold_row(const fwd_params &p, const uint4 *vp,
                                                 const row_geom &g, int vl, uint4 (&a)[U],
                                                 uint4 (&b)[U], float &m, float &s, part &q) {
  constexpr int step = 2 * U * W;
  for (int ja = vl, jb = vl + U * W;; ja += step, jb += step) {
    if (ja >= g.nvec) break;
    warprow_fold<T, U, W>(p, a, g, ja, m, s, q);
    warprow_load<U, W>(a, vp, ja + step, g.nvec);
    if (jb >= g.nvec) break;
    warprow_fold<T, U, W>(p, b, g, jb, m, s, q);
    warprow_load<U, W>(b, vp, jb + step, g.nvec);
  }
}

/* Each warp reads one row and reduces it with shuffles alone: no block
 * barrier, so no warp waits for another and an SM's loads never drain for a
 * reduction. Rows go to warps in order, blockDim / 32 rows a block, a block
 * per group of rows (the hardware hands them out). Forward without gradient
 * only: a gradient would have pass 2 re-read a block's rows, 32 times the
 * bytes of a row per SM in flight, from HBM.
 *
 * PIPE = 0 (the kernels with weights, softcap or statistics): pass 1 of the
 * two-read kernel, 8 vectors a lane in flight, then folded. PIPE = U > 0
 * (the plain kernel; the launch table takes U = 4): two stages of U vectors
 * a lane, one in flight while the other is folded, the first two
 * issued beside the target's load rather than after it; plain loads, and
 * each whole stage folded at once (fold_stage: one max, one rescale).
 *
 * SPLIT > 1 (the pipelined pass only): SPLIT neighbouring warps share a row,
 * their lanes interleaved over it as one of 32 * SPLIT lanes, and meet at a
 * named barrier of their own to merge their statistics (in warp order): a
 * warp's share of the work is a fraction of a row, so the last rows of the
 * grid end sooner. */
template <typename T, bool GENERAL, bool STATS, int PIPE, int SPLIT = 1>
__global__ void __launch_bounds__(256) fwd_warprow(const fwd_params p) {
  static_assert((PIPE == 0) == (GENERAL || STATS), "the plain kernel is the pipelined one");
  static_assert(SPLIT == 1 || (PIPE > 0 && 32 * SPLIT <= 256), "a split row is pipelined");
  constexpr int W = 32 * SPLIT; /* lanes that share a row */
  if (forward_enter<T>(p)) return; /* rejected: nothing written (deferred: no gradient) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = warp % SPLIT, vl = sub * 32 + lane; /* this lane among the row's W */
  const int64_t row = (int64_t)blockIdx.x * ((blockDim.x >> 5) / SPLIT) + warp / SPLIT;
  if (row >= p.rows) return; /* uniform over the row's warps */
  const int64_t y64 = load_target(p.targets, p.target64, row);
  const char *rowp = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(rowp, p.vocab);
  constexpr int UA = PIPE > 0 ? PIPE : 1;
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * (int)sizeof(T));
  uint4 a[UA], b[UA];
  if (PIPE > 0) { /* read whatever the target says: an ignored row wastes these */
    warprow_load<UA, W>(a, vp, vl, g.nvec);
    warprow_load<UA, W>(b, vp, vl + UA * W, g.nvec);
  }
  const bool bad = target_bad(p, y64);
  if (bad || y64 == p.ignore_index) { /* every warp of the row returns */
    if (vl == 0) skipped_row_outputs(p, row, bad);
    return;
  }
  const int y = (int)y64;
  const float xy = vl == 0 ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;
  part q = part_empty();
  if (PIPE > 0) {
    float m = -INFINITY, s = 0.0f;
    warprow_fold_row<T, UA, W>(p, vp, g, vl, a, b, m, s, q);
    fold_extras<T, false, false, false>(p, rowp, g, vl, W, m, s, q);
    q.m = m;
    q.s = s;
  } else {
#define XENT_WARPROW_PASS(A, S)                                                            \
  tworead_pass1<T, GENERAL, A, S, kWarpRowUnroll>(p, rowp, g, 0, g.nvec, true, q, lane, 32)
    if (STATS) XENT_WITH_FLAGS(p, XENT_WARPROW_PASS);
    else XENT_WARPROW_PASS(false, false);
#undef XENT_WARPROW_PASS
  }
  part r = warp_reduce(q);
  if (SPLIT > 1) {
    __shared__ part shared_parts[256 / 32];
    if (lane == 0) shared_parts[warp] = r;
    /* barrier 1 + the row's index in the block: the row's warps alone */
    asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / SPLIT), "r"(W) : "memory");
    if (sub != 0) return;
#pragma unroll
    for (int k = 1; k < SPLIT; k++) r = part_merge(r, shared_parts[warp + k]);
  }
  finish_row(p, r, xy, row, y, lane == 0);
}

}  // namespace xent

#endif
