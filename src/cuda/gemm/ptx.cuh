/*
 * ptx.cuh - the Hopper instructions xent's own GEMM is made of, as inline
 * PTX (sm_90a): mbarriers, TMA loads and stores, shared-memory matrix
 * descriptors and warpgroup matrix multiplies (wgmma). Only code compiled
 * for sm_90a may call them (sm90.cuh guards its kernel's body).
 */
#ifndef XENT_CUDA_GEMM_PTX_CUH
#define XENT_CUDA_GEMM_PTX_CUH

#include <cuda.h> /* CUtensorMap (a 128-byte opaque struct; no driver call is linked) */
#include <stdint.h>

namespace xent {
namespace gemm {

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* ---- mbarriers: a stage's "full" (its TMA bytes arrived) and "empty" (its
 * readers are done) ---------------------------------------------------------- */
__device__ __forceinline__ void bar_init(uint64_t *b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count));
}
/* The producer's arrival, announcing `bytes` of TMA transfers to come. */
__device__ __forceinline__ void bar_expect(uint64_t *b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/* Waits for the phase of parity `parity` to complete. */
__device__ __forceinline__ void bar_wait(uint64_t *b, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}

/* ---- TMA ---------------------------------------------------------------------- */
/* The box of `map` at (c0 inner, c1 outer) into shared memory, its bytes
 * counted on barrier b; what lies outside the tensor reads as zeros. */
__device__ __forceinline__ void tma_load(void *dst, const CUtensorMap *map, int c0, int c1,
                                         uint64_t *b) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(dst)),
      "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(b))
      : "memory");
}
/* The same box multicast to the same place in the shared memory of every
 * block of the cluster named in `mask`, each block's barrier at b's offset
 * counting the bytes that land there. */
__device__ __forceinline__ void tma_load_multicast(void *dst, const CUtensorMap *map, int c0,
                                                   int c1, uint64_t *b, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(smem_u32(dst)),
      "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(b)), "h"(mask)
      : "memory");
}
/* An arrival on the barrier at b's offset in block `rank` of the cluster.
 * Release at the block's scope, not the cluster's: what the arrival
 * publishes is that this warp's tensor-core reads of a stage are over
 * (wgmma's wait said so), and no write of the thread needs ordering before
 * the peer's TMA refills it. ".release.cluster" compiles to MEMBAR.ALL.GPU
 * before every arrival: a consumer warp waited on its memory twice per
 * block of K, and clusters of 2 ran at half the speed of single blocks
 * (bench/NOTES.md v41). */
__device__ __forceinline__ void bar_arrive_cluster(uint64_t *b, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(b)), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
/* Every thread of every block of the cluster (release / acquire). */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

/* A box from shared memory to the tensor at (c0, c1), written or (ADD) added
 * in the tensor's type where it lies in L2; what falls outside is dropped.
 * One bulk group per box. */
template <bool ADD>
__device__ __forceinline__ void tma_store(const CUtensorMap *map, int c0, int c1, const void *src) {
  if (ADD)
    asm volatile(
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
        " [%0, {%1, %2}], [%3];" ::"l"((uint64_t)map),
        "r"(c0), "r"(c1), "r"(smem_u32(src))
        : "memory");
  else
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 ::"l"((uint64_t)map), "r"(c0), "r"(c1), "r"(smem_u32(src))
                 : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* Until at most N of this thread's bulk groups still read shared memory. */
template <int N>
__device__ __forceinline__ void tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/* Shared-memory writes by threads, made visible to the TMA unit. */
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* A barrier of one warpgroup's 128 threads (ids 1 and up; 0 is __syncthreads). */
__device__ __forceinline__ void warpgroup_sync(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

/* ---- wgmma ---------------------------------------------------------------------- */
/* The descriptor of a 128-byte-swizzled operand tile in shared memory: start
 * address, leading and stride byte offsets, swizzle mode 1 (128 bytes).
 * K-major: rows of 64 16-bit values (128 bytes), 8-row atoms 1 KiB apart
 * (SBO); LBO unused. MN-major: K rows of 64 values, 8-row atoms along K 1 KiB
 * apart (SBO), and the next 64 values along M or N at LBO. */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | (uint64_t)(lbo >> 4) << 16 |
         (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
/* Until at most N of the warpgroup's committed groups are in flight. */
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* The accumulators' operand lists for inline PTX (64 and 128 registers). */
#define XENT_WG_REGS_64 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#define XENT_WG_ACC_64(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define XENT_WG_REGS_128 \
  XENT_WG_REGS_64 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

#define XENT_WG_ACC_128(d) \
  XENT_WG_ACC_64(d), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* D (64 x N, fp32 registers) (+)= A (64 x 16) B (16 x N) from shared memory;
 * acc = 0 ignores D's old values. TA, TB: A is M-major, B is N-major. */
#define XENT_WGMMA(NAME, SHAPE, TY, R, REGS, ACC, I0, I1, I2, I3, I4)                    \
  template <int TA, int TB>                                                              \
  __device__ __forceinline__ void NAME(float (&d)[R], uint64_t da, uint64_t db, int acc) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" I2 ", 0;\n"                         \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TY "." TY " {" REGS      \
                 "}, %" I0 ", %" I1 ", p, 1, 1, %" I3 ", %" I4 ";\n}\n"                    \
                 : ACC(d)                                                                \
                 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));                        \
  }
XENT_WGMMA(wgmma_n256_bf16, "m64n256k16", "bf16", 128, XENT_WG_REGS_128, XENT_WG_ACC_128, "128", "129", "130", "131", "132")
XENT_WGMMA(wgmma_n256_f16, "m64n256k16", "f16", 128, XENT_WG_REGS_128, XENT_WG_ACC_128, "128", "129", "130", "131", "132")
XENT_WGMMA(wgmma_n128_bf16, "m64n128k16", "bf16", 64, XENT_WG_REGS_64, XENT_WG_ACC_64, "64", "65", "66", "67", "68")
XENT_WGMMA(wgmma_n128_f16, "m64n128k16", "f16", 64, XENT_WG_REGS_64, XENT_WG_ACC_64, "64", "65", "66", "67", "68")
#undef XENT_WGMMA

}  // namespace gemm
}  // namespace xent

#endif
