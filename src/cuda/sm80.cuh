/*
 * sm80.cuh - per-thread asynchronous copies (sm_80+), as thin PTX wrappers:
 * a thread copies 16 bytes from global to shared memory without holding
 * them in registers, groups its copies, and waits until all but its newest
 * n groups have landed. Compiles to nothing below sm_80; the host never
 * launches a kernel that needs it there.
 */
#ifndef XENT_CUDA_SM80_CUH
#define XENT_CUDA_SM80_CUH

#include <stdint.h>

namespace xent {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes, both addresses 16-byte aligned, through L2 only (not L1). */
__device__ __forceinline__ void copy16_async(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
/* Close a group of this thread's copies (one with no copies is allowed). */
__device__ __forceinline__ void copies_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Wait until at most `n` of this thread's newest groups are still in flight
 * (n is clamped to 0..15; the instruction takes it as an immediate). */
__device__ __forceinline__ void copies_wait_pending(int n) {
#define XENT_WAIT_CASE(k) \
  case k: asm volatile("cp.async.wait_group " #k ";" ::: "memory"); break;
  switch (n) {
    XENT_WAIT_CASE(1) XENT_WAIT_CASE(2) XENT_WAIT_CASE(3) XENT_WAIT_CASE(4)
    XENT_WAIT_CASE(5) XENT_WAIT_CASE(6) XENT_WAIT_CASE(7) XENT_WAIT_CASE(8)
    XENT_WAIT_CASE(9) XENT_WAIT_CASE(10) XENT_WAIT_CASE(11) XENT_WAIT_CASE(12)
    XENT_WAIT_CASE(13) XENT_WAIT_CASE(14) XENT_WAIT_CASE(15)
    default:
      if (n > 15) asm volatile("cp.async.wait_group 15;" ::: "memory");
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
#undef XENT_WAIT_CASE
}
#endif

/* ------------------------------------------------------------------------ */
/* Loads with an L2 eviction priority (sm_80+; plain hinted loads below)     */
/* ------------------------------------------------------------------------ */

/* A policy for the accesses that carry it: keep the lines in L2 in
 * preference to others (last = 1) or evict them first (last = 0). */
__device__ __forceinline__ uint64_t l2_policy(bool last) {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#else
  (void)last;
#endif
  return pol;
}

/* 16 bytes from global memory under an L2 policy from l2_policy(); below
 * sm_80 a cache-all load. Volatile: two loads of one address (the two passes
 * over a row) must both happen. */
__device__ __forceinline__ uint4 ld_l2(const uint4 *p, uint64_t pol) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 v;
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(pol));
  return v;
#else
  (void)pol;
  return __ldca(p);
#endif
}

}  // namespace xent

#endif
