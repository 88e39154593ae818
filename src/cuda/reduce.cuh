/*
 * reduce.cuh - the reductions every kernel shares: a row's partial
 * statistics (`part`) and how two of them merge, over a warp, a block, a
 * subset of a block and a thread-block cluster; the (max, sum) pairs alone;
 * and plain sums for the small kernels. Every merge runs in a fixed order,
 * so the same inputs give the same bits.
 */
#ifndef XENT_CUDA_REDUCE_CUH
#define XENT_CUDA_REDUCE_CUH

#include <stdint.h>

#include "common/rowmath.h"
#include "cuda/elem.cuh"
#include "cuda/sm90.cuh"

namespace xent {

constexpr int kMaxWarps = 32;

/* ------------------------------------------------------------------------ */
/* Row statistics                                                            */
/* ------------------------------------------------------------------------ */

/* A partial reduction of some elements of a row. */
struct part {
  float m;      /* max of x'                                                  */
  float s;      /* sum exp(x' - m)                                            */
  float sx;     /* sum x' / V                                                 */
  float swx;    /* sum w (x' - m) / V: relative to m, so that no finite row
                   overflows it (sum w x' alone does, near the fp32 range)    */
  float sw;     /* sum w / V of the elements folded (what moves swx to a new m) */
  float am;     /* value of the arg-max (x')                                   */
  int ai;       /* its first index (INT_MAX when none)                        */
};

__device__ __forceinline__ part part_empty() {
  part p;
  p.m = -INFINITY;
  p.s = 0.f;
  p.sx = 0.f;
  p.swx = 0.f;
  p.sw = 0.f;
  p.am = -INFINITY;
  p.ai = 0x7fffffff;
  return p;
}

__device__ __forceinline__ void argmax_merge(float &am, int &ai, float v, int i) {
  if (v > am || (v == am && i < ai)) {
    am = v;
    ai = i;
  }
}

/* sum w (x' - m) / V of a part moved to the larger maximum mn (a part that
 * folded no weight stays 0, whatever its m). */
__device__ __forceinline__ float shift_swx(float swx, float sw, float m, float mn) {
  return sw != 0.0f && m < mn ? fmaf(m - mn, sw, swx) : swx;
}

__device__ __forceinline__ part part_merge(part a, const part &b) {
  const float mn = fmaxf(a.m, b.m);
  a.swx = shift_swx(a.swx, a.sw, a.m, mn) + shift_swx(b.swx, b.sw, b.m, mn);
  a.sw += b.sw;
  xent_merge_max_sum(&a.m, &a.s, b.m, b.s);
  a.sx += b.sx;
  argmax_merge(a.am, a.ai, b.am, b.ai);
  return a;
}

__device__ __forceinline__ part part_shfl_xor(const part &p, int mask) {
  part q;
  q.m = __shfl_xor_sync(0xffffffffu, p.m, mask);
  q.s = __shfl_xor_sync(0xffffffffu, p.s, mask);
  q.sx = __shfl_xor_sync(0xffffffffu, p.sx, mask);
  q.swx = __shfl_xor_sync(0xffffffffu, p.swx, mask);
  q.sw = __shfl_xor_sync(0xffffffffu, p.sw, mask);
  q.am = __shfl_xor_sync(0xffffffffu, p.am, mask);
  q.ai = __shfl_xor_sync(0xffffffffu, p.ai, mask);
  return q;
}

/* Butterfly: every lane ends with the same value, merged in the same order. */
__device__ __forceinline__ part warp_reduce(part p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    part q = part_shfl_xor(p, o);
    /* merge in lane order so both partners compute the identical result */
    p = ((threadIdx.x & o) == 0) ? part_merge(p, q) : part_merge(q, p);
  }
  return p;
}

/* The meeting of threads [0, threads): barrier 1 (NAMED: a subset of the
 * block, a multiple of 32), else __syncthreads. */
template <bool NAMED>
__device__ __forceinline__ void threads_sync(int threads) {
  if (NAMED) asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  else __syncthreads();
}

/* Reduce over threads [0, threads) of the block, all of which call this;
 * the result is returned to each of them. `scratch` holds kMaxWarps + 1
 * parts of shared memory. NAMED: the threads meet at barrier 1 (a subset
 * of the block, a multiple of 32), else at __syncthreads. */
template <bool NAMED>
__device__ __forceinline__ part threads_reduce(part p, part *scratch, int threads) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned nwarps = ((unsigned)threads + 31u) >> 5;
  p = warp_reduce(p);
  if (lane == 0) scratch[warp] = p;
  threads_sync<NAMED>(threads);
  if (warp == 0) {
    part q = (unsigned)lane < nwarps ? scratch[lane] : part_empty();
    q = warp_reduce(q);
    if (lane == 0) scratch[kMaxWarps] = q;
  }
  threads_sync<NAMED>(threads);
  return scratch[kMaxWarps];
}

/* (max, sum) alone over a warp, in warp_reduce's order of merges: every
 * lane ends with the same bits. */
__device__ __forceinline__ void warp_max_sum(float &m, float &s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & o) == 0) {
      xent_merge_max_sum(&m, &s, m2, s2);
    } else {
      float mm = m2, ss = s2;
      xent_merge_max_sum(&mm, &ss, m, s);
      m = mm;
      s = ss;
    }
  }
}

/* threads_reduce for a part whose other fields nobody set (no accuracy,
 * smoothing or weights): the (max, sum) pair alone goes through the
 * shuffles and shared memory, two values instead of seven, and the rest of
 * the result is part_empty's, as the full reduction would leave it. The
 * same merges in the same order: the same bits. A row's reduction is a
 * visible share of the row at V = 32000 (bench/HISTORY.md v25). */
template <bool NAMED>
__device__ __forceinline__ part threads_reduce_max_sum(const part &p, part *scratch,
                                                       int threads) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned nwarps = ((unsigned)threads + 31u) >> 5;
  float m = p.m, s = p.s;
  warp_max_sum(m, s);
  if (lane == 0) {
    scratch[warp].m = m;
    scratch[warp].s = s;
  }
  threads_sync<NAMED>(threads);
  if (warp == 0) {
    float m2 = -INFINITY, s2 = 0.0f;
    if ((unsigned)lane < nwarps) {
      m2 = scratch[lane].m;
      s2 = scratch[lane].s;
    }
    warp_max_sum(m2, s2);
    if (lane == 0) {
      scratch[kMaxWarps].m = m2;
      scratch[kMaxWarps].s = s2;
    }
  }
  threads_sync<NAMED>(threads);
  part r = part_empty();
  r.m = scratch[kMaxWarps].m;
  r.s = scratch[kMaxWarps].s;
  return r;
}

/* Reduce over the block; the result is returned to every thread. */
__device__ __forceinline__ part block_reduce(part p, part *scratch) {
  return threads_reduce<false>(p, scratch, (int)blockDim.x);
}

/* ------------------------------------------------------------------------ */
/* (max, sum) pairs alone                                                    */
/* ------------------------------------------------------------------------ */

/* xent_merge_max_sum with the hardware's exp2: (m, s) += (m2, s2), a NaN
 * in either sum kept. */
__device__ __forceinline__ void merge_max_sum_fast(float &m, float &s, float m2, float s2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) {
    s += s2;
    return;
  }
  s = s * fast_exp2((m - mn) * kLog2e) + s2 * fast_exp2((m2 - mn) * kLog2e);
  m = mn;
}

/* The block's (max, sum) pairs merged into thread 0's, in a fixed order
 * (a butterfly; each lane merges its partner's into its own), so the same
 * inputs give the same bits. At most 8 warps (XENT_SEGMENT_MAX_THREADS).
 * `scratch`: 8 pairs. */
__device__ __forceinline__ void block_max_sum(float &m, float &s, float2 *scratch) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    merge_max_sum_fast(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                       __shfl_xor_sync(0xffffffffu, s, o));
  if (lane == 0) scratch[warp] = make_float2(m, s);
  __syncthreads();
  if (warp != 0) return;
  const float2 q = lane < (int)(blockDim.x >> 5) ? scratch[lane] : make_float2(-INFINITY, 0.0f);
  m = q.x;
  s = q.y;
#pragma unroll
  for (int o = 4; o > 0; o >>= 1)
    merge_max_sum_fast(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                       __shfl_xor_sync(0xffffffffu, s, o));
}

/* ------------------------------------------------------------------------ */
/* Across a thread-block cluster without a cluster barrier (sm_90+)          */
/* ------------------------------------------------------------------------ */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* One block's part as it travels to the other blocks of its cluster: two
 * asynchronous 16-byte stores into each peer's inbox, each counted in bytes
 * on the peer's barrier for that row. */
constexpr int kMaxClusterParts = 8; /* XENT_MAX_CLUSTER */
struct __align__(16) part_msg {
  float m, s, sx, swx, am;
  int ai;
  float sw;
  int pad;
};
constexpr uint32_t kPartMsgBytes = 32; /* what travels of a part_msg */

/* A block's inbox, double-buffered by row parity: slot[b][k] holds block k's
 * part of the block's b-th (mod 2) exchanged row, and bar[b] completes when
 * this block has arrived and the K - 1 peers' bytes have landed.
 *
 * Why two slots are enough: a block sends row n + 2 only after it has
 * received every peer's row n + 1, and a peer sends row n + 1 only after its
 * block reduction of that row, which all of its threads reach after reading
 * their row n slots. */
struct cluster_inbox {
  part_msg slot[2][kMaxClusterParts];
  uint64_t bar[2];
};

/* Set up the inbox and arrive on the cluster barrier (all threads). Before
 * its first exchange the block waits on that barrier (cluster_wait), so no
 * peer stores into an inbox that is not initialised yet. */
__device__ __forceinline__ void inbox_init(cluster_inbox *ib) {
  if (threadIdx.x == 0) {
    mbar_init(&ib->bar[0], 1);
    mbar_init(&ib->bar[1], 1);
    mbar_init_fence();
  }
  cluster_arrive();
}

/* The K blocks' parts of a row merged in rank order (the same bits in every
 * block), for the block's n-th exchanged row. Called by all threads; `r` is
 * the block's part (block_reduce's result). Lane k of warp 0 sends it to
 * peer k, lane 0 announces the bytes the block expects; everyone waits for
 * the barrier, never for the whole cluster. */
__device__ __forceinline__ part cluster_exchange(part r, int K, unsigned rank,
                                                 cluster_inbox *ib, unsigned n) {
  const unsigned b = n & 1u;
  if (threadIdx.x < 32) {
    /* lane k sends to peer k, lane 0 also to this block's own slot */
    const unsigned lane = threadIdx.x;
    part_msg *mine = &ib->slot[b][rank];
    if ((int)lane < K && lane != rank) {
      const uint32_t a = map_shared(mine, lane), bar = map_shared(&ib->bar[b], lane);
      st_async_v4(a, r.m, r.s, r.sx, r.swx, bar);
      st_async_v4(a + 16, r.am, __int_as_float(r.ai), r.sw, 0.0f, bar);
    }
    if (lane == 0) {
      mine->m = r.m;
      mine->s = r.s;
      mine->sx = r.sx;
      mine->swx = r.swx;
      mine->am = r.am;
      mine->ai = r.ai;
      mine->sw = r.sw;
      mbar_arrive_expect(&ib->bar[b], (uint32_t)(K - 1) * kPartMsgBytes);
    }
  }
  mbar_wait<true>(&ib->bar[b], (n >> 1) & 1u);
  part t = part_empty();
  for (int k = 0; k < K; k++) {
    const part_msg &g = ib->slot[b][k];
    part q;
    q.m = g.m;
    q.s = g.s;
    q.sx = g.sx;
    q.swx = g.swx;
    q.am = g.am;
    q.ai = g.ai;
    q.sw = g.sw;
    t = part_merge(t, q);
  }
  return t;
}
#endif

/* ------------------------------------------------------------------------ */
/* Plain sums (the count and finalize kernels)                               */
/* ------------------------------------------------------------------------ */

template <typename V, int NT>
__device__ __forceinline__ V block_sum(V v, V *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int o = NT / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  V r = sh[0];
  __syncthreads();
  return r;
}

/* Adds each v[k] whose on[k] is set over the warp, in a fixed tree; the
 * sums are in lane 0. */
template <int K>
__device__ __forceinline__ void warp_sums(double (&v)[K], const bool (&on)[K]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < K; k++)
      if (on[k]) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
}

/* Sums the values v[k] whose on[k] is set (uniform over the block) over a
 * 1024-thread block in a fixed tree (shuffles within each warp, then across
 * the warps' sums in warp 0), all of them in the same steps and at one
 * barrier: deterministic. The results are in thread 0. `sh` holds 32 values
 * for each k. */
template <int K>
__device__ __forceinline__ void block_sums_1024(double (&v)[K], const bool (&on)[K],
                                                double (*sh)[32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_sums(v, on);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; k++) sh[k][warp] = v[k];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int k = 0; k < K; k++) v[k] = on[k] ? sh[k][lane] : 0.0;
  warp_sums(v, on);
}

}  // namespace xent

#endif
