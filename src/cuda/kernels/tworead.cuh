/*
 * tworead.cuh - fwd_tworead: a row per block, any V, any alignment, any GPU.
 *
 * Pass 1 streams the row and keeps an online (max, sum); pass 2 (with a
 * gradient) streams it again, backwards, and writes the gradient in place.
 * Without a gradient the kernel is pass 1 alone: one read, the floor.
 * Pass 1 leaves the row in L2 (a cache-all load, or with p.l2_hint an
 * evict-last policy) so that pass 2 re-reads much of it from L2; pass 2
 * reads evict-first and writes with streaming hints so that the gradient
 * does not push other rows out (bench/NOTES.md: two-read).
 *
 * STATS: the max pass folds what accuracy, predicted tokens and label
 * smoothing need (chosen per call at run time). Without it the kernel is
 * the plain (max, sum) one, which keeps its 64 registers free of spills.
 * GENERAL: weights and softcap.
 */
#ifndef XENT_CUDA_KERNELS_TWOREAD_CUH
#define XENT_CUDA_KERNELS_TWOREAD_CUH

#include "cuda/row.cuh"
#include "cuda/sm80.cuh"

namespace xent {

constexpr int kTwoReadUnroll = 4; /* vectors a thread has in flight */

/* Pass 1 over vectors [j_begin, j_end) (and the extra elements when
 * do_extras), by `nt` threads of which this is number `tid`, U vectors a
 * thread in flight: the online (max, sum) that q holds (part_empty's to
 * start) and the max-pass statistics, continued.
 * `base`: the column of the row's element 0 (a shard's offset), for the
 * weights and the arg-max. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH, int U = kTwoReadUnroll>
__device__ __forceinline__ void tworead_pass1(const fwd_params &p, const char *rowp,
                                              const row_geom &g, int j_begin, int j_end,
                                              bool do_extras, part &q, int tid, int nt,
                                              int base = 0) {
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * ES);
  float m = q.m, s = q.s;
  const bool hint = p.l2_hint && p.write_grad;
  const uint64_t pol = hint ? l2_policy(true) : 0;
  for (int j0 = j_begin + tid; j0 < j_end; j0 += U * nt) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end) {
        if (hint) v[u] = ld_l2(vp + j, pol);
        else v[u] = p.write_grad ? __ldca(vp + j) : ld_once(vp + j);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end)
        fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, v[u], base + g.head + j * VN, m, s, q);
    }
  }
  if (do_extras) fold_extras<T, GENERAL, ARGMAX, SMOOTH>(p, rowp, g, tid, nt, m, s, q, base);
  q.m = m;
  q.s = s;
}

/* Where pass 2 reads a row: vectors [0, nvec) from vp, per_iter = U *
 * threads at a time, under L2 policy `pol` when `hint`. */
struct tworead_walk {
  uint4 *vp;
  int nvec, per_iter;
  bool hint;
  uint64_t pol;
};

/* This thread's vectors of pass 2's group `it`. */
__device__ __forceinline__ void tworead_load2(const tworead_walk &w, int it,
                                              uint4 (&v)[kTwoReadUnroll]) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int j0 = it * w.per_iter + tid;
#pragma unroll
  for (int u = 0; u < kTwoReadUnroll; u++) {
    const int j = j0 + u * nt;
    if (j < w.nvec) v[u] = w.hint ? ld_l2(w.vp + j, w.pol) : ld_once(w.vp + j);
  }
}

template <typename T, bool GENERAL, bool STATS>
__global__ void __launch_bounds__(1024) fwd_tworead(const fwd_params p) {
  if (forward_enter<T>(p)) return; /* rejected: nothing written (deferred: no gradient) */
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  constexpr int U = kTwoReadUnroll;
  __shared__ part scratch[kMaxWarps + 1];
  const int tid = threadIdx.x, nt = blockDim.x;
  /* A block per row (the grid may be smaller: each block then takes every
   * gridDim-th row), the next row's target loaded early. */
  const int64_t row_step = (int64_t)gridDim.x;
  int64_t row = (int64_t)blockIdx.x;
  int64_t y_next = row < p.rows ? load_target(p.targets, p.target64, row) : 0;
  for (; row < p.rows; row += row_step) {
    const int64_t y64 = y_next;
    if (row + row_step < p.rows) y_next = load_target(p.targets, p.target64, row + row_step);
    char *rowp = p.x + row * p.stride_bytes;
    const row_geom g = make_geom<T>(rowp, p.vocab);
    uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);

    const bool bad = target_bad(p, y64);
    const bool ignored = !bad && y64 == p.ignore_index;
    if (ignored || bad) {
      if (tid == 0) skipped_row_outputs(p, row, bad);
      if (p.write_grad) zero_row<T>(rowp, g, tid, g.nvec, nt, tid, nt);
      continue;
    }
    const int y = (int)y64;
    /* x'_y, loaded early by the thread that writes the row's outputs. It
     * stays in that thread's registers: in shared memory, the next row's
     * write could race with a late reader of this one. */
    const bool writer = tid == 0;
    const float xy = writer || p.token_scaling ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;

    part q = part_empty();
#define XENT_TWOREAD_PASS1(A, S) \
  tworead_pass1<T, GENERAL, A, S>(p, rowp, g, 0, g.nvec, true, q, tid, nt)
    if (STATS) XENT_WITH_FLAGS(p, XENT_TWOREAD_PASS1);
    else XENT_TWOREAD_PASS1(false, false);
#undef XENT_TWOREAD_PASS1

    /* Pass 2 walks the row backwards, a group of U vectors per thread at a
     * time: the vectors pass 1 read last are the likeliest still in L2.
     * Its first group is loaded before the row reduction, so that the
     * thread has loads in flight while it waits for the block (v3, v8). */
    const bool hint2 = p.l2_hint;
    const tworead_walk w = {vp, g.nvec, U * nt, hint2, hint2 ? l2_policy(false) : 0};
    const int last = (g.nvec + w.per_iter - 1) / w.per_iter - 1;
    uint4 v[U];
    if (p.write_grad && last >= 0) tworead_load2(w, last, v);

    const part r = block_reduce(q, scratch);
    const grad_coef gc = finish_row(p, r, xy, row, y, writer);

    if (p.write_grad) {
      for (int it = last; it >= 0; it--) {
        if (it != last) tworead_load2(w, it, v);
        const int j0 = it * w.per_iter + tid;
#pragma unroll
        for (int u = 0; u < U; u++) {
          int j = j0 + u * nt;
          if (j < g.nvec) {
            float f[VN];
            elem<T>::unpack(v[u], f);
            grad_vec<T, GENERAL>(p, gc, f, g.head + j * VN);
            st_grad(vp + j, elem<T>::pack(f));
          }
        }
      }
      grad_extras<T, GENERAL>(p, gc, rowp, g, tid, nt);
    }
  }
}

}  // namespace xent

#endif
