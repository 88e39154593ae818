/*
 * sm90.cuh - Hopper (sm_90+) instructions the kernels use, as thin PTX
 * wrappers: thread-block clusters and distributed shared memory, the bulk
 * copy engine (cp.async.bulk), the shared-memory barriers (mbarrier) that
 * count its bytes, and asynchronous stores into a peer block. Everything
 * here compiles to nothing below sm_90; the host never launches a kernel
 * that needs it there.
 */
#ifndef XENT_CUDA_SM90_CUH
#define XENT_CUDA_SM90_CUH

#include <stdint.h>

namespace xent {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ------------------------------------------------------------------------ */
/* Clusters                                                                  */
/* ------------------------------------------------------------------------ */

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
/* ------------------------------------------------------------------------ */
/* Barriers and bulk copies                                                  */
/* ------------------------------------------------------------------------ */

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
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

/* ------------------------------------------------------------------------ */
/* Asynchronous stores into a peer block's shared memory                     */
/* ------------------------------------------------------------------------ */

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
#endif

}  // namespace xent

#endif
