/*
 * sm80.cuh - loads under an L2 eviction priority (sm_80+), as thin PTX
 * wrappers; below sm_80 plain cached loads.
 */
#ifndef XENT_CUDA_SM80_CUH
#define XENT_CUDA_SM80_CUH

#include <stdint.h>

namespace xent {

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
