/*
 * sm90.cuh - Hopper (sm_90+) primitives the kernels use, as thin PTX
 * wrappers: thread-block clusters and distributed shared memory, and the
 * asynchronous bulk copy engine (cp.async.bulk) with the shared-memory
 * barriers (mbarrier) that count its bytes. Everything here compiles to
 * nothing for older architectures; the host never launches a kernel that
 * needs it on a GPU below sm_90.
 */
#ifndef XENT_CUDA_SM90_CUH
#define XENT_CUDA_SM90_CUH

#include "cuda/device_common.cuh"
#include "cuda/launch_table.h"
#include "cuda/sm80.cuh"

namespace xent {

/* ------------------------------------------------------------------------ */
/* Cluster primitives (PTX, sm_90+)                                          */
/* ------------------------------------------------------------------------ */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
/* Arrive and wait: every thread of every block of the cluster meets here. */
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
/* Address of the same shared variable in block `rank` of this cluster. */
__device__ __forceinline__ uint32_t map_shared(const void *p, unsigned rank) {
  uint32_t local = (uint32_t)__cvta_generic_to_shared(p), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ float ld_dsmem_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ int ld_dsmem_s32(uint32_t a) {
  int v;
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ part ld_dsmem_part(const part *local, unsigned rank) {
  uint32_t a = map_shared(local, rank);
  part q;
  q.m = ld_dsmem_f32(a + offsetof(part, m));
  q.s = ld_dsmem_f32(a + offsetof(part, s));
  q.sx = ld_dsmem_f32(a + offsetof(part, sx));
  q.swx = ld_dsmem_f32(a + offsetof(part, swx));
  q.am = ld_dsmem_f32(a + offsetof(part, am));
  q.ai = ld_dsmem_s32(a + offsetof(part, ai));
  return q;
}

__device__ __forceinline__ void st_dsmem_f32(uint32_t a, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void st_dsmem_s32(uint32_t a, int v) {
  asm volatile("st.shared::cluster.s32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
/* Store q into the shared variable `local` of block `rank` of this cluster. */
__device__ __forceinline__ void st_dsmem_part(part *local, unsigned rank, const part &q) {
  uint32_t a = map_shared(local, rank);
  st_dsmem_f32(a + offsetof(part, m), q.m);
  st_dsmem_f32(a + offsetof(part, s), q.s);
  st_dsmem_f32(a + offsetof(part, sx), q.sx);
  st_dsmem_f32(a + offsetof(part, swx), q.swx);
  st_dsmem_f32(a + offsetof(part, am), q.am);
  st_dsmem_s32(a + offsetof(part, ai), q.ai);
}

/* Combine the block results `r` of the K blocks of this cluster: every block
 * gets the same merge, in rank order. Called by all threads of every block.
 * Leaves the cluster barrier armed: call cluster_wait() before exiting, so no
 * block's shared memory goes away while another block still reads it. */
__device__ __forceinline__ part cluster_combine(part r, int K, part *exchange, part *scratch) {
  if (threadIdx.x == 0) *exchange = r;
  cluster_sync();
  if (threadIdx.x < 32) {
    part t = (int)threadIdx.x < K ? ld_dsmem_part(exchange, threadIdx.x) : part_empty();
    t = warp_reduce(t);
    if (threadIdx.x == 0) scratch[kMaxWarps] = t;
  }
  cluster_arrive();
  __syncthreads();
  return scratch[kMaxWarps];
}
#endif

/* ------------------------------------------------------------------------ */
/* Bulk asynchronous copies into shared memory (PTX, sm_90+)                 */
/* ------------------------------------------------------------------------ */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* A barrier that completes when `count` threads have arrived and the
 * announced bytes have landed. */
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}
/* Make initialised barriers visible to the copy engine and the cluster. */
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* Arrive on `bar` (one of its `count` arrivals). */
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
/* Arrive on `bar` announcing `bytes` still to land in its current phase. */
__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
/* Wait until phase `parity` of `bar` has completed. CLUSTER: acquire at
 * cluster scope, for a barrier that peers' stores complete (their bytes are
 * then visible). */
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done;
  do {
    if (CLUSTER)
      asm volatile(
          "{\n\t.reg .pred p;\n\t"
          "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
          "selp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(a), "r"(parity)
          : "memory");
    else
      asm volatile(
          "{\n\t.reg .pred p;\n\t"
          "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
          "selp.u32 %0, 1, 0, p;\n\t}"
          : "=r"(done)
          : "r"(a), "r"(parity)
          : "memory");
  } while (!done);
}
/* Copy `bytes` (a multiple of 16, both addresses 16-byte aligned) from
 * global to this block's shared memory; completion is counted on `bar`.
 * The L2 policy marks the lines evict-first: they are read once. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes,
                                          uint64_t *bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
      : "memory");
}
/* The per-thread alternative to bulk copies (copy16_async, sm80.cuh): an
 * arrival on `bar` once all of this thread's earlier copies have landed (the
 * barrier counts one per thread). */
__device__ __forceinline__ void copies_arrive(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

/* ------------------------------------------------------------------------ */
/* Row statistics across a cluster without a cluster barrier (sm_90+)       */
/* ------------------------------------------------------------------------ */

/* One block's part as it travels to the other blocks of its cluster: two
 * asynchronous stores (16 + 8 bytes) into each peer's inbox, each counted in
 * bytes on the peer's barrier for that row. */
constexpr int kMaxClusterParts = 8; /* XENT_MAX_CLUSTER */
struct __align__(16) part_msg {
  float m, s, sx, swx, am;
  int ai;
  int pad[2];
};
constexpr uint32_t kPartMsgBytes = 24; /* what travels of a part_msg */
static_assert(kMaxClusterParts >= XENT_MAX_CLUSTER, "an inbox slot for every block of a cluster");

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

__device__ __forceinline__ void st_async_v4(uint32_t addr, float a, float b, float c, float d,
                                            uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];"
      ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void st_async_v2(uint32_t addr, float a, int b, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
      ::"r"(addr), "r"(__float_as_int(a)), "r"(b), "r"(bar)
      : "memory");
}
/* An 8-byte asynchronous store into a peer's shared memory, counted on the
 * peer's barrier `bar` (both cluster addresses, map_shared). */
__device__ __forceinline__ void st_async_s64(uint32_t addr, long long v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];"
               ::"r"(addr), "l"(v), "r"(bar)
               : "memory");
}
/* Arrive on a barrier in a peer's shared memory (a cluster address),
 * releasing this thread's earlier accesses at cluster scope. */
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar)
               : "memory");
}
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
      st_async_v2(a + 16, r.am, r.ai, bar);
    }
    if (lane == 0) {
      mine->m = r.m;
      mine->s = r.s;
      mine->sx = r.sx;
      mine->swx = r.swx;
      mine->am = r.am;
      mine->ai = r.ai;
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
    t = part_merge(t, q);
  }
  return t;
}
#endif

}  // namespace xent

#endif
