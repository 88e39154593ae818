/*
 * linear.cuh - the small kernels of the fused linear loss (linear.cu):
 * the column sums of a chunk's gradient (the bias gradient), the store of
 * an fp32 accumulator into a gradient of another dtype, and the chunk's
 * cross-entropy from the statistics its logits' product left.
 */
#ifndef XENT_CUDA_KERNELS_LINEAR_CUH
#define XENT_CUDA_KERNELS_LINEAR_CUH

#include <stdint.h>

#include "cuda/elem.cuh"
#include "cuda/kernels/vp.cuh"

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

/* The cross-entropy of a chunk whose logits' product (xent's GEMM, its
 * statistics epilogue) left each row's (max, sum of exponentials) per tile
 * of columns: a block per row merges the row's `tiles` pairs, writes the
 * row's outputs and its gradient in place, one read and one write of the
 * logits. For calls that fold nothing else (no smoothing, softcap or
 * arg-max: the plan's other kernels take those). */
template <typename T>
__global__ void __launch_bounds__(kVpThreads)
    tile_forward_kernel(const fwd_params p, const float2 *stats, int tiles) {
  __shared__ part scratch[kMaxWarps + 1];
  __shared__ grad_coef shared_gc;
  __shared__ int skip;
  if (forward_enter<T>(p)) return; /* rejected: nothing written */
  const int64_t row = blockIdx.x;
  char *x = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(x, p.vocab);
  uint4 a[kVpUnroll];
  if (p.write_grad) vp_first_vectors<T>(x, g, a, (int)threadIdx.x, (int)blockDim.x);
  part q = part_empty();
  const float2 *rs = stats + row * (int64_t)tiles;
  for (int t = threadIdx.x; t < tiles; t += blockDim.x) {
    const float2 r = rs[t];
    merge_max_sum_fast(q.m, q.s, r.x, r.y);
  }
  const part r = block_reduce(q, scratch);
  if (threadIdx.x == 0) {
    const int64_t y = load_target(p.targets, p.target64, row);
    const bool bad = target_bad(p, y);
    skip = bad || y == p.ignore_index;
    if (skip) skipped_row_outputs(p, row, bad);
    else shared_gc = finish_row(p, r, elem<T>::load(x + y * (int64_t)sizeof(T)), row, (int)y, true);
  }
  __syncthreads();
  vp_row_gradient<T, false>(p, skip, shared_gc, x, g, 0, a, (int)threadIdx.x, (int)blockDim.x);
}

}  // namespace xent

#endif
