/*
 * scale.cuh - scale_kernel, the backward: the gradient the forward left
 * over the logits times grad_output (or grad_output / applied, for a second
 * backward), in place, the factor read on the device; rows whose factor is
 * exactly 1 are skipped.
 */
#ifndef XENT_CUDA_KERNELS_SCALE_CUH
#define XENT_CUDA_KERNELS_SCALE_CUH

#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/row.cuh"

namespace xent {

constexpr int kScaleMaxThreads = 512;
constexpr int kScaleUnroll = 16; /* vectors a thread loads before it stores */

/* Work item i of the scale kernel: row i / chunks, vectors of chunk
 * i % chunks, blockDim.x * kScaleUnroll of them a chunk. Each thread loads
 * all its vectors of the item, then scales and stores them; plain loads and
 * stores (evict-first hints were 3 % slower, bench/HISTORY.md v10). The host
 * sizes the grid (launch_scale). */
template <typename T>
__global__ void __launch_bounds__(kScaleMaxThreads) scale_kernel(const scale_params s,
                                                                 int chunks) {
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  constexpr int U = kScaleUnroll;
  const int nt = blockDim.x;
  /* A scalar factor is read once; when it is 1 there is nothing to do. */
  kernel_enter(NULL);
  const float g0 = s.per_row        ? 0.0f
                   : !s.grad_output ? s.host_scale
                   : s.applied      ? s.grad_output[0] / s.applied[0]
                                    : s.grad_output[0];
  if (!s.per_row && g0 == 1.0f) return;
  const int64_t items = s.rows * (int64_t)chunks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / chunks;
    const int chunk = (int)(item - row * chunks);
    /* A per-row factor is loaded alongside the row's vectors, not before
     * them: no branch on it, so its latency overlaps theirs (a factor of 1
     * rewrites the same bits). */
    const float gfac = !s.per_row  ? g0
                       : s.applied ? s.grad_output[row] / s.applied[row]
                                   : s.grad_output[row];
    char *rowp = s.g + row * s.stride_bytes;
    const row_geom g = make_geom<T>(rowp, s.vocab);
    uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);
    const int j0 = chunk * nt * U + threadIdx.x;
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * nt;
      if (j < g.nvec) v[u] = __ldca(vp + j);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int j = j0 + u * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[u], f);
#pragma unroll
        for (int e = 0; e < VN; e++) f[e] *= gfac;
        vp[j] = elem<T>::pack(f);
      }
    }
    if (chunk == 0) {
      for (int e = threadIdx.x; e < g.extras; e += nt) {
        char *ep = rowp + (int64_t)extra_index(g, e) * ES;
        elem<T>::store(ep, elem<T>::load(ep) * gfac);
      }
    }
  }
}

}  // namespace xent

#endif
