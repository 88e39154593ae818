/*
 * segment.cuh - the forward without gradient in segments: each row
 * cut into one or two segments, a block per segment (XENT_SEGMENT_MAX).
 *
 * fwd_segment: every thread issues all of its `U` 16-byte loads of the
 *   segment at once (the bare read's shape), folds them into an online
 *   (max, sum), and the block reduces those to the segment's. Blocks are
 *   short (a few us), so the hardware's block scheduler keeps every SM busy
 *   to the end of the grid: the faster SMs take more segments. Segment 0
 *   also folds the row's extra elements (before its first and after its
 *   last whole vector), and reads the target and its logit. A row of one
 *   segment is finished there: its outputs written. A row of two leaves
 *   each segment's log-sum-exp and the target's logit in the workspace, and
 * fwd_segment_merge (segment_merge.cuh), a thread per row, merges the two
 *   and writes the row's outputs.
 * For mean and sum the finalize kernel follows, as after every forward
 * kernel. (One block merging and adding every row, in one launch, was 10 us
 * slower at 8192 rows, with the merge's loads chained; a row's segments
 * meeting in a thread-block cluster instead of a merge kernel was 6 %
 * slower at bf16 8192 x 32000: bench/HISTORY.md v22, v23.)
 *
 * The workspace's row arrays (common/workspace.h) hold segment 0's max and
 * sum, segment 1's and the target's logit, in that order. (max, sum) pairs,
 * not log-sum-exps: m + log s rounds log s away once |m| is large. The merge
 * writes a row's outputs, which may go to the same arrays, only after it has
 * read that row's values, in the same thread.
 */
#ifndef XENT_CUDA_KERNELS_SEGMENT_CUH
#define XENT_CUDA_KERNELS_SEGMENT_CUH

#include "common/workspace.h"
#include "cuda/plan.h"
#include "cuda/row.cuh"

namespace xent {

static_assert(2 * XENT_SEGMENT_MAX + 1 <= XENT_WS_ROW_ARRAYS,
              "two segments' (max, sum) and the target's logit: five row arrays");

/* This thread's U vectors of a row's segment, j0, j0 + blockDim.x, ...: all
 * issued at once, -inf from jend on (adds nothing to a fold). */
template <typename T, int U>
__device__ __forceinline__ void segment_load(uint4 (&v)[U], const uint4 *vp, int j0, int jend) {
  constexpr uint32_t ni = word_max<T>::kNegInf;
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int j = j0 + u * (int)blockDim.x;
    v[u] = j < jend ? ld_plain(vp + j) : make_uint4(ni, ni, ni, ni);
  }
}

/* One segment of one row a block: blockIdx.x = row * seg_count + segment.
 * At most 48 registers (5 blocks of 256 threads a SM; 54 unbounded), none
 * spilled. */
template <typename T, int U>
__global__ void __launch_bounds__(XENT_SEGMENT_MAX_THREADS, 5) fwd_segment(const fwd_params p) {
  if (forward_enter<T>(p)) return; /* rejected: nothing written (deferred: no gradient) */
  const int64_t row = blockIdx.x / (unsigned)p.seg_count;
  const int seg = (int)(blockIdx.x - row * p.seg_count);
  const char *rowp = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(rowp, p.vocab);
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * (int)sizeof(T));
  const int j0 = seg * p.seg_vecs + (int)threadIdx.x;
  const int jend = min((seg + 1) * p.seg_vecs, g.nvec);
  uint4 v[U];
  segment_load<T, U>(v, vp, j0, jend);
  /* Segment 0's thread 0 reads the target beside its loads, and the
   * target's logit once they are in: the merge then has no load that waits
   * for another, and the end of the grid no latency it cannot hide. */
  const bool lead = seg == 0 && threadIdx.x == 0;
  const int64_t y64 = lead ? load_target(p.targets, p.target64, row) : 0;
  float m = -INFINITY, s = 0.0f;
  fold_stage<T, U, true>(v, m, s);
  if (seg == 0) {
    part unused = part_empty();
    fold_extras<T, false, false, false>(p, rowp, g, (int)threadIdx.x, (int)blockDim.x, m, s,
                                        unused);
  }
  const bool bad = lead && target_bad(p, y64);
  const bool skip = !lead || bad || y64 == p.ignore_index;
  const float xy = skip ? 0.0f : load_xy<T, false>(p, rowp, (int)y64);
  __shared__ float2 scratch[XENT_SEGMENT_MAX_THREADS / 32];
  block_max_sum(m, s, scratch);
  if (threadIdx.x != 0) return;
  if (p.seg_count == 1) { /* the whole row: its outputs, no merge */
    if (skip) {
      skipped_row_outputs(p, row, bad);
      return;
    }
    part r = part_empty();
    r.m = m;
    r.s = s;
    finish_row(p, r, xy, row, (int)y64, true);
    return;
  }
  /* the segment's (max, sum): max -inf for a segment of -inf alone, sum NaN
   * for one holding a NaN */
  p.seg_stats[2 * seg * p.seg_pitch + row] = m;
  p.seg_stats[(2 * seg + 1) * p.seg_pitch + row] = s;
  if (seg == 0) p.seg_stats[2 * XENT_SEGMENT_MAX * p.seg_pitch + row] = xy;
}

}  // namespace xent

#endif
