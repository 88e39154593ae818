/*
 * segment_merge.cuh - fwd_segment_merge, after fwd_segment for rows of two
 * segments: a thread per row merges the segments' statistics the workspace
 * holds and writes the row's outputs. Not a template: one kernel for every
 * dtype, built once (forward.cu).
 */
#ifndef XENT_CUDA_KERNELS_SEGMENT_MERGE_CUH
#define XENT_CUDA_KERNELS_SEGMENT_MERGE_CUH

#include "cuda/plan.h"
#include "cuda/row.cuh"

namespace xent {

/* A thread per row of two segments: the segments merged, then the row's
 * outputs; the finalize kernel follows for mean and sum. Every load is
 * issued at once: the target, both segments' (max, sum) and the target's
 * logit (so one kernel serves every dtype). */
__global__ void __launch_bounds__(256) fwd_segment_merge(const fwd_params p) {
  if (kernel_enter(p.verdict, true)) return; /* the finalize kernel launches now */
  const int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.rows) return;
  /* read before any output of the row is written: they may share arrays */
  float sm[XENT_SEGMENT_MAX], ss[XENT_SEGMENT_MAX];
#pragma unroll
  for (int k = 0; k < XENT_SEGMENT_MAX; k++) {
    sm[k] = p.seg_stats[2 * k * p.seg_pitch + row];
    ss[k] = p.seg_stats[(2 * k + 1) * p.seg_pitch + row];
  }
  const float xy = p.seg_stats[2 * XENT_SEGMENT_MAX * p.seg_pitch + row];
  const int64_t y64 = load_target(p.targets, p.target64, row);
  const bool bad = target_bad(p, y64);
  if (bad || y64 == p.ignore_index) {
    skipped_row_outputs(p, row, bad);
    return;
  }
  /* -inf adds nothing; a NaN is carried by the sum, where
   * xent_merge_max_sum keeps it */
  part r = part_empty();
#pragma unroll
  for (int k = 0; k < XENT_SEGMENT_MAX; k++) xent_merge_max_sum(&r.m, &r.s, sm[k], ss[k]);
  finish_row(p, r, xy, row, (int)y64, true);
}

}  // namespace xent

#endif
