/*
 * gpu_flush.cu - the kernels of xent-bench's L2 flush (bench.h). Without
 * the first, lines a forward loaded evict-last outlive a flush that writes
 * 256 MiB (bench/HISTORY.md v10); the second leaves L2 holding clean lines
 * (--flush read).
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "bench.h"

namespace {

/* Sets the L2 eviction priority of the lines of [p, p + bytes) back to
 * normal. */
__global__ void l2_normal_kernel(const char *p, size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const size_t lines = (bytes + 127) / 128;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < lines;
       i += (size_t)gridDim.x * blockDim.x)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + i * 128)
                 : "memory");
#else
  (void)p, (void)bytes;
#endif
}

/* Reads n 16-byte vectors from p (16-byte aligned) and writes nothing
 * The loads are
 * relaxed (volatile before sm_70): the compiler removes plain ones whose
 * values go unused. */
__global__ void l2_read_kernel(const uint4 *p, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("{ .reg .u32 t<4>; ld.relaxed.gpu.global.v4.u32 {t0, t1, t2, t3}, [%0]; }"
                 ::"l"(p + i)
                 : "memory");
#else
    asm volatile("{ .reg .u32 t<4>; ld.volatile.global.v4.u32 {t0, t1, t2, t3}, [%0]; }"
                 ::"l"(p + i)
                 : "memory");
#endif
  }
}

}  // namespace

extern "C" int bench_l2_normal(const void *p, size_t bytes, cudaStream_t stream) {
  if (!p || bytes == 0) return 0; /* nothing to set */
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (major < 8) return 0;
  /* applypriority needs a 128-byte aligned line address */
  const uintptr_t a = (uintptr_t)p & ~(uintptr_t)127;
  bytes += (uintptr_t)p - a;
  l2_normal_kernel<<<1024, 256, 0, stream>>>((const char *)a, bytes);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" int bench_l2_read(const void *p, size_t bytes, cudaStream_t stream) {
  if (!p || bytes < 16) return 0;
  l2_read_kernel<<<1024, 256, 0, stream>>>((const uint4 *)p, bytes / 16);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
