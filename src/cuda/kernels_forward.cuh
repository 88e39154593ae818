/*
 * kernels_forward.cuh - the forward kernels.
 *
 * fwd_oneread: one read of the logits. A row is held in registers across the
 *   `cluster` blocks of a thread-block cluster (sm_90+; a cluster of 1 is a
 *   plain block and runs anywhere). Each block reduces its slice to a `part`,
 *   the blocks exchange their parts through distributed shared memory, and
 *   every block then writes the gradient of its slice from registers.
 *   HBM traffic: read V, write V per row.
 *
 * fwd_tworead: one block per row, any V. Pass 1 streams the row and keeps an
 *   online (max, sum); pass 2 (only when a gradient is wanted) streams it
 *   again and writes the gradient. Forward without gradient is pass 1 alone,
 *   which is the fewest bytes for it (read V).
 *   With a cluster of K blocks per row (sm_90+), each block takes a K-th of
 *   the row, and the blocks exchange their parts of the statistics by
 *   asynchronous stores into each other's inboxes (cluster_exchange): a
 *   block waits only for its peers' bytes, never on a cluster barrier.
 *   With KEEP, pass 1 also holds the row on chip for pass 2: each thread's
 *   first p.keep_vecs vectors in shared memory (dynamic, keep_vecs * threads
 *   * 16 bytes). Pass 2 re-reads only the rest, the row's tail, which pass 1
 *   read last. When the row fits, HBM traffic is the floor (read V, write V)
 *   with no L2 re-read at all.
 *   STATS: the max pass folds the statistics that accuracy, predicted tokens
 *   and label smoothing need (chosen per call at run time). Without it the
 *   kernel is the plain (max, sum) one, which keeps its 64 registers free of
 *   spills.
 *
 * fwd_warprow: forward without gradient, a row per warp: pass 1 of the
 *   two-read kernel by the warp's 32 lanes, reduced by shuffles alone. The
 *   plain kernel (no weights, softcap or statistics) can pipeline its loads
 *   in two stages instead (PIPE, the launch table's vecs), folded a stage
 *   at a time (fold_stage), and share each row among 2, 4 or 8 warps that
 *   merge their statistics in shared memory (SPLIT, the launch table's
 *   warp_split).
 */
#ifndef XENT_CUDA_KERNELS_FORWARD_CUH
#define XENT_CUDA_KERNELS_FORWARD_CUH

#include "cuda/device_common.cuh"
#include "cuda/launch_table.h"
#include "cuda/sm90.cuh"

namespace xent {


/* ------------------------------------------------------------------------ */
/* One read: the row in registers across a cluster                            */
/* ------------------------------------------------------------------------ */

/* Max pass over a thread's registers (and its extra element). */
template <typename T, int NV, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void oneread_max(const fwd_params &p, const uint4 (&v)[NV],
                                            const row_geom &g, int vbase, int nt, bool has_extra,
                                            float xec, int ej, part &q) {
  constexpr int VN = elem<T>::N;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int j = vbase + i * nt;
    if (j < g.nvec) {
      float f[VN];
      elem<T>::unpack(v[i], f);
#pragma unroll
      for (int e = 0; e < VN; e++) {
        float d, xc = (GENERAL && p.use_softcap) ? cap(p, f[e], &d) : f[e];
        fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, xc, g.head + j * VN + e);
      }
    }
  }
  if (has_extra) fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, xec, ej);
}

template <typename T, int NV, bool GENERAL>
__global__ void __launch_bounds__(512, 1) fwd_oneread(const fwd_params p) {
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  __shared__ part scratch[kMaxWarps + 1];
  __shared__ float xy_shared;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ part exchange; /* this block's part, read by the whole cluster */
#endif

  const int K = p.cluster;
  unsigned rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) rank = cluster_rank();
#else
  if (K > 1) return; /* never launched: the host only picks clusters on sm_90+ */
#endif
  const int64_t row = (int64_t)(blockIdx.x / (unsigned)K);
  const int tid = threadIdx.x, nt = blockDim.x;
  char *rowp = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(rowp, p.vocab);
  const int gt = (int)rank * nt + tid; /* thread index within the cluster */
  const int vbase = (int)rank * nt * NV + tid;
  uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);

  const int64_t y64 = load_target(p.targets, p.target64, row);
  const bool bad = target_bad(p, y64);
  const bool ignored = !bad && y64 == p.ignore_index;
  if (ignored || bad) {
    /* Uniform over the cluster: no block touches distributed shared memory. */
    if (rank == 0 && tid == 0) skipped_row_outputs(p, row, bad);
    if (p.write_grad) zero_row<T>(rowp, g, vbase, vbase - tid + nt * NV, nt, gt, K * nt);
    return;
  }
  const int y = (int)y64;

  /* Load: every vector of this thread's share, then the extra element. */
  uint4 v[NV];
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int j = vbase + i * nt;
    if (j < g.nvec) v[i] = __ldcs(vp + j);
  }
  const bool has_extra = gt < g.extras;
  const int ej = has_extra ? extra_index(g, gt) : 0;
  const float xe = has_extra ? elem<T>::load(rowp + (int64_t)ej * ES) : 0.0f;
  if (rank == 0 && tid == 0) xy_shared = load_xy<T, GENERAL>(p, rowp, y);
  float xec = xe;
  if (GENERAL && p.use_softcap && has_extra) {
    float d;
    xec = cap(p, xe, &d);
  }

  /* Local statistics: the max pass, then the sum of exponentials. */
  part q = part_empty();
#define XENT_ONEREAD_MAX(A, S) \
  oneread_max<T, NV, GENERAL, A, S>(p, v, g, vbase, nt, has_extra, xec, ej, q)
  XENT_WITH_FLAGS(p, XENT_ONEREAD_MAX);
#undef XENT_ONEREAD_MAX
  if (q.m != -INFINITY) {
    const float mk = q.m * kLog2e;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < VN; e++) {
          float d, xc = (GENERAL && p.use_softcap) ? cap(p, f[e], &d) : f[e];
          s += fast_exp2(fmaf(xc, kLog2e, -mk));
        }
      }
    }
    if (has_extra) s += fast_exp2(fmaf(xec, kLog2e, -mk));
    q.s = s;
  } else {
    /* Nothing above -inf here (rare): a NaN must still make the row NaN. */
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < VN; e++)
          if (f[e] != f[e]) q.s = f[e];
      }
    }
    if (has_extra && xe != xe) q.s = xe;
  }

  /* Block, then cluster reduction. */
  part r = block_reduce(q, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) r = cluster_combine(r, K, &exchange, scratch);
#endif
  __syncthreads(); /* xy_shared */
  const bool lead = rank == 0 && tid == 0;
  const grad_coef gc = finish_row(p, r, lead ? xy_shared : 0.0f, row, y, lead);

  if (p.write_grad) {
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
        grad_vec<T, GENERAL>(p, gc, f, g.head + j * VN);
        __stcs(vp + j, elem<T>::pack(f));
      }
    }
    if (has_extra) elem<T>::store(rowp + (int64_t)ej * ES, grad_one<GENERAL>(p, gc, xe, ej));
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) cluster_wait();
#endif
}

/* ------------------------------------------------------------------------ */
/* Two reads: a row per block or per cluster, any V                           */
/* ------------------------------------------------------------------------ */

/* Pass 1 leaves the row in L2 (a plain, cache-all load, or with p.l2_hint an
 * evict-last policy) so that pass 2, a moment later, re-reads it from L2
 * rather than HBM; pass 2 reads (evict-first) and writes with streaming hints
 * so that the gradient does not push other rows out. Only about half of
 * pass 2 hits L2 (bench/NOTES.md v2, v3, v7 and the profile after v7); the
 * more rows in flight per SM, the less. */

constexpr int kTwoReadUnroll = XENT_TWOREAD_UNROLL;

/* Pass 1 over vectors [j_begin, j_end) (and the extra elements when
 * do_extras), by `nt` threads of which this is number `tid`, U vectors a
 * thread in flight: an online (max, sum) and the max-pass statistics. With
 * KEEP, the thread's first `ks_vecs` vectors go to shared memory `ks`
 * (vector k of thread t at ks[k * nt + t]); those are read evict-first
 * (pass 2 will not ask L2 for them), the rest cache-all. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH, bool KEEP, int U = kTwoReadUnroll>
__device__ __forceinline__ void tworead_pass1(const fwd_params &p, const char *rowp,
                                              const row_geom &g, int j_begin, int j_end,
                                              bool do_extras, part &q, uint4 *ks, int ks_vecs,
                                              int tid, int nt) {
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * ES);
  float m = -INFINITY, s = 0.0f;
  const bool hint = !KEEP && p.l2_hint && p.write_grad;
  const uint64_t pol = hint ? l2_policy(true) : 0;
  int it = 0;
  for (int j0 = j_begin + tid; j0 < j_end; j0 += U * nt, it++) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end) {
        if (KEEP) {
          v[u] = it * U + u < ks_vecs ? ld_once(vp + j) : __ldca(vp + j);
        } else if (hint) {
          v[u] = ld_l2(vp + j, pol);
        } else {
          v[u] = p.write_grad ? __ldca(vp + j) : ld_once(vp + j);
        }
      }
    }
    if (KEEP && it * U < ks_vecs) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int k = it * U + u;
        if (k < ks_vecs && j0 + u * nt < j_end) ks[k * nt + tid] = v[u];
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end) fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, v[u], g.head + j * VN, m, s, q);
    }
  }
  if (do_extras) fold_extras<T, GENERAL, ARGMAX, SMOOTH>(p, rowp, g, tid, nt, m, s, q);
  q.m = m;
  q.s = s;
}

/* Where pass 2 reads a row: vectors [j_begin, j_end) from vp (per_iter =
 * U * threads per group), under L2 policy `pol` when `hint`; with KEEP each
 * thread's first keep_vecs from shared memory. */
struct tworead_walk {
  uint4 *vp;
  int j_begin, j_end, per_iter;
  bool hint;
  uint64_t pol;
  const uint4 *keep_smem;
  int keep_vecs;
};

/* This thread's vectors of pass 2's group `it`. */
template <bool KEEP>
__device__ __forceinline__ void tworead_load2(const tworead_walk &w, int it,
                                              uint4 (&v)[kTwoReadUnroll]) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int j0 = w.j_begin + it * w.per_iter + tid;
#pragma unroll
  for (int u = 0; u < kTwoReadUnroll; u++) {
    const int j = j0 + u * nt;
    if (j < w.j_end) {
      if (KEEP) {
        const int k = it * kTwoReadUnroll + u;
        v[u] = k < w.keep_vecs ? w.keep_smem[k * nt + tid] : ld_once(w.vp + j);
      } else if (w.hint) {
        v[u] = ld_l2(w.vp + j, w.pol);
      } else {
        v[u] = ld_once(w.vp + j);
      }
    }
  }
}

template <typename T, bool GENERAL, bool KEEP, bool STATS>
__global__ void __launch_bounds__(1024) fwd_tworead(const fwd_params p) {
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  constexpr int U = kTwoReadUnroll;
  __shared__ part scratch[kMaxWarps + 1];
  const int K = p.cluster;
  unsigned rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if XENT_DIAG == 5
  __shared__ part exchange;
#else
  __shared__ cluster_inbox inbox;
  unsigned exchanged = 0; /* rows exchanged; at 0 the cluster barrier is not waited yet */
  if (K > 1) inbox_init(&inbox);
#endif
  if (K > 1) rank = cluster_rank();
#else
  if (K > 1) return; /* never launched: the host only picks clusters on sm_90+ */
#endif
  const int tid = threadIdx.x, nt = blockDim.x;
  const bool lead = rank == 0;
  extern __shared__ uint4 keep_smem[]; /* KEEP: the held vectors */
  const int ks_vecs = KEEP ? p.keep_vecs : 0;
  /* A block (cluster) per row, or with a smaller grid (the keep path) each
   * takes every (grid / K)-th row, loading the next row's target early. */
  const int64_t row_step = (int64_t)(gridDim.x / (unsigned)K);
  int64_t row = (int64_t)(blockIdx.x / (unsigned)K);
  int64_t y_next = row < p.rows ? load_target(p.targets, p.target64, row) : 0;
  for (; row < p.rows; row += row_step) {
    const int64_t y64 = y_next;
    if (row + row_step < p.rows) y_next = load_target(p.targets, p.target64, row + row_step);
    char *rowp = p.x + row * p.stride_bytes;
    const row_geom g = make_geom<T>(rowp, p.vocab);
    uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);
    /* This block's vectors: a contiguous share of the row. */
    const int chunk = (g.nvec + K - 1) / K;
    const int j_begin = min((int)rank * chunk, g.nvec);
    const int j_end = min(j_begin + chunk, g.nvec);

    const bool bad = target_bad(p, y64);
    const bool ignored = !bad && y64 == p.ignore_index;
    if (ignored || bad) {
      /* Uniform over the cluster: no block touches distributed shared memory. */
      if (lead && tid == 0) skipped_row_outputs(p, row, bad);
      if (p.write_grad)
        zero_row<T>(rowp, g, j_begin + tid, j_end, nt, lead ? tid : 0x7fffffff, nt);
      continue;
    }
    const int y = (int)y64;
    /* x'_y, loaded early by the thread that writes the row's outputs. It
     * stays in that thread's registers: in shared memory, the next row's
     * write could race with a late reader of this one (persistent grid). */
    const bool writer = lead && tid == 0;
    const float xy = writer ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;

    part q = part_empty();
#define XENT_TWOREAD_PASS1(A, S) \
  tworead_pass1<T, GENERAL, A, S, KEEP>(p, rowp, g, j_begin, j_end, lead, q, keep_smem, ks_vecs, \
                                        tid, nt)
    if (STATS) XENT_WITH_FLAGS(p, XENT_TWOREAD_PASS1);
    else XENT_TWOREAD_PASS1(false, false);
#undef XENT_TWOREAD_PASS1

    /* Pass 2 walks the row backwards, a group of U vectors per thread at a
     * time: the vectors pass 1 read last are the likeliest still in L2, and
     * reading them first keeps the older ones from being evicted in between
     * (a forward re-walk of a row a little larger than its L2 share would
     * miss on every line). With KEEP the held vectors come from shared
     * memory, and only the tail is read again. Its first group is loaded
     * before the row reduction, so that the thread has loads in flight while
     * it waits for the block (bench/NOTES.md v8; loading every next group
     * ahead as well spills registers and was slower). */
    const bool hint2 = !KEEP && p.l2_hint;
    const tworead_walk w = {vp, j_begin, j_end, U * nt, hint2, hint2 ? l2_policy(false) : 0,
                            keep_smem, ks_vecs};
    const int last = (j_end - j_begin + w.per_iter - 1) / w.per_iter - 1;
    uint4 v[U];
    if (p.write_grad && last >= 0) tworead_load2<KEEP>(w, last, v);

    part r = XENT_DIAG == 3 ? q : block_reduce(q, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if XENT_DIAG == 5
    if (K > 1) r = cluster_combine(r, K, &exchange, scratch);
#else
    if (K > 1 && XENT_DIAG != 4) {
      if (exchanged == 0) cluster_wait(); /* once: every peer's inbox is initialised */
      r = cluster_exchange(r, K, rank, &inbox, exchanged++);
    }
#endif
#endif
    const grad_coef gc = finish_row(p, r, xy, row, y, writer);

    if (p.write_grad) {
      for (int it = last; it >= 0; it--) {
        if (it != last) tworead_load2<KEEP>(w, it, v);
        const int j0 = j_begin + it * w.per_iter + tid;
#pragma unroll
        for (int u = 0; u < U; u++) {
          int j = j0 + u * nt;
          if (j < j_end) {
            float f[VN];
            elem<T>::unpack(v[u], f);
            grad_vec<T, GENERAL>(p, gc, f, g.head + j * VN);
            st_grad(vp + j, elem<T>::pack(f));
          }
        }
      }
      if (lead) grad_extras<T, GENERAL>(p, gc, rowp, g, tid, nt);
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && XENT_DIAG == 5
    if (K > 1) cluster_wait(); /* peers are done with this row's exchange */
#endif
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && XENT_DIAG != 5
  /* A block that exchanged nothing (every row skipped) still completes the
   * barrier it arrived on. No peer touches this block's shared memory after
   * its last exchange: each peer's stores have landed once that returns. */
  if (K > 1 && exchanged == 0) cluster_wait();
#endif
}

/* ------------------------------------------------------------------------ */
/* A row per warp: the forward without gradient                               */
/* ------------------------------------------------------------------------ */

constexpr int kWarpRowUnroll = 8;

/* This lane's vectors j0, j0 + W, ... (U of them, those below n) of a row,
 * W the lanes that share the row (32 a warp). Plain loads, not ld_once's
 * evict-first ones: those cost this pass 2 to 4 % (bench/NOTES.md v20). */
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
#if !XENT_DIAG_NO_MATH && XENT_DIAG != 12
  if (j0 + (U - 1) * W < g.nvec) { /* the whole stage: the row's body */
    fold_stage<T, U>(v, m, s);
    return;
  }
#endif
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int j = j0 + u * W;
    if (j < g.nvec) fold_vec<T, false, false, false>(p, v[u], g.head + j * elem<T>::N, m, s, q);
  }
}

/* Each warp reads one row and reduces it with shuffles alone: no block
 * barrier, so no warp waits for another and an SM's loads never drain for a
 * reduction. Rows go to warps in order, blockDim / 32 rows a block, a block
 * per group of rows (the hardware hands them out). Forward without gradient
 * only: a gradient would have pass 2 re-read a block's rows, 32 times the
 * bytes of a row per SM in flight, from HBM.
 *
 * PIPE = 0: pass 1 of the two-read kernel, 8 vectors a lane in flight, then
 * folded (any flags). PIPE = U > 0 (the plain kernel only): two stages of U
 * vectors a lane, one in flight while the other is folded, the first two
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
  static_assert(PIPE == 0 || (!GENERAL && !STATS), "the pipelined pass is the plain one");
  static_assert(SPLIT == 1 || (PIPE > 0 && 32 * SPLIT <= 256), "a split row is pipelined");
  constexpr int W = 32 * SPLIT; /* lanes that share a row */
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
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
    constexpr int step = 2 * UA * W;
    for (int ja = vl, jb = vl + UA * W;; ja += step, jb += step) {
      if (ja >= g.nvec) break;
      warprow_fold<T, UA, W>(p, a, g, ja, m, s, q);
      warprow_load<UA, W>(a, vp, ja + step, g.nvec);
      if (jb >= g.nvec) break;
      warprow_fold<T, UA, W>(p, b, g, jb, m, s, q);
      warprow_load<UA, W>(b, vp, jb + step, g.nvec);
    }
    fold_extras<T, false, false, false>(p, rowp, g, vl, W, m, s, q);
    q.m = m;
    q.s = s;
  } else {
#define XENT_WARPROW_PASS(A, S)                                                            \
  tworead_pass1<T, GENERAL, A, S, false, kWarpRowUnroll>(p, rowp, g, 0, g.nvec, true, q,   \
                                                          nullptr, 0, lane, 32)
    if (STATS) XENT_WITH_FLAGS(p, XENT_WARPROW_PASS);
    else XENT_WARPROW_PASS(false, false);
#undef XENT_WARPROW_PASS
  }
  part r = XENT_DIAG == 3 ? q : warp_reduce(q);
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
