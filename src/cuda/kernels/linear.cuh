/*
 * linear.cuh - the small kernels of the fused linear loss (linear.cu):
 * the column sums of a chunk's gradient (the bias gradient) and the store
 * of an fp32 accumulator into a gradient of another dtype.
 */
#ifndef XENT_CUDA_KERNELS_LINEAR_CUH
#define XENT_CUDA_KERNELS_LINEAR_CUH

#include <stdint.h>

#include "cuda/elem.cuh"

namespace xent {

constexpr int kColsumThreads = 256;

/* acc[j] += sum over the rows of g[r][j]: a thread per column, the rows in
 * order (four partial sums, then added), so the result is deterministic. */
template <typename T>
__global__ void __launch_bounds__(kColsumThreads)
    colsum_kernel(const char *g, int64_t rows, int vocab, int64_t stride_bytes, float *acc) {
  const int j = blockIdx.x * kColsumThreads + threadIdx.x;
  if (j >= vocab) return;
  const char *p = g + (int64_t)j * (int64_t)sizeof(T);
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
#pragma unroll
    for (int u = 0; u < 4; u++) s[u] += elem<T>::load(p + (r + u) * stride_bytes);
  for (; r < rows; r++) s[0] += elem<T>::load(p + r * stride_bytes);
  acc[j] += (s[0] + s[1]) + (s[2] + s[3]);
}

constexpr int kStoreThreads = 256;

/* dst (rows x cols of T, ld_bytes between rows) = src (fp32, lds), or
 * dst += src when `add`. */
template <typename T>
__global__ void __launch_bounds__(kStoreThreads)
    store_kernel(char *dst, int64_t ld_bytes, const float *src, int64_t lds, int64_t rows,
                 int64_t cols, int add) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * kStoreThreads + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * kStoreThreads) {
    const int64_t r = i / cols, c = i - r * cols;
    char *d = dst + r * ld_bytes + c * (int64_t)sizeof(T);
    float v = src[r * lds + c];
    if (add) v += elem<T>::load(d);
    elem<T>::store(d, v);
  }
}

}  // namespace xent

#endif
