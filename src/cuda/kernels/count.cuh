/*
 * count.cuh - count_kernel, before the forward kernel where something must
 * be known first: counts the non-ignored rows N, sums w[y] over them (W)
 * and all weights, finds the first bad target and the first non-finite
 * weight, and leaves the reduction scales in the workspace header for the
 * forward kernel to read: no host round trip. Deterministic: fixed
 * per-thread assignment, fixed trees, and the last block adds the block
 * partials in block order. In checked mode it also writes the verdict into
 * pinned host memory mapped into the device.
 */
#ifndef XENT_CUDA_KERNELS_COUNT_CUH
#define XENT_CUDA_KERNELS_COUNT_CUH

#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/row.cuh"

namespace xent {

constexpr int kCountThreads = 256;
constexpr int kCountMaxBlocks = 256;
__global__ void __launch_bounds__(kCountThreads) count_kernel(const prep_params q) {
  __shared__ float shf[kCountThreads];
  __shared__ int shi[kCountThreads];
  __shared__ bool last;
  kernel_enter(NULL); /* the forward kernel behind it may launch now */
  const int64_t gstride = (int64_t)gridDim.x * kCountThreads;
  const int64_t gid = (int64_t)blockIdx.x * kCountThreads + threadIdx.x;
  int n = 0;
  float w = 0.0f, sw = 0.0f;
  for (int64_t r = gid; r < q.rows; r += gstride) {
    int64_t y = load_target(q.targets, q.target64, r);
    if (y == q.ignore_index) continue;
    n++; /* a bad target still counts: unchecked mode gives its row a NaN loss */
    if (y < 0 || y >= q.vocab) {
      atomicMax(&q.hdr->bad_target, (unsigned long long)(q.rows - r));
      continue;
    }
    if (q.weights) w += q.weights[y];
  }
  if (q.weights) {
    for (int64_t j = gid; j < q.vocab; j += gstride) {
      float wj = q.weights[j];
      if (!isfinite(wj)) atomicMax(&q.hdr->bad_weight, (unsigned long long)(q.vocab - j));
      sw += wj;
    }
  }
  n = block_sum<int, kCountThreads>(n, shi);
  w = block_sum<float, kCountThreads>(w, shf);
  sw = block_sum<float, kCountThreads>(sw, shf);
  if (threadIdx.x == 0) {
    float *pp = q.partials + 3 * blockIdx.x;
    pp[0] = __int_as_float(n);
    pp[1] = w;
    pp[2] = sw;
    __threadfence();
    last = atomicAdd(&q.hdr->ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  int tn = 0;
  double tw = 0.0, tsw = 0.0;
  for (unsigned b = 0; b < gridDim.x; b++) {
    const float *pp = q.partials + 3 * b;
    tn += __float_as_int(__ldcg(pp));
    tw += __ldcg(pp + 1);
    tsw += __ldcg(pp + 2);
  }
  ws_header *h = q.hdr;
  h->n = tn;
  h->w = (float)tw;
  h->sum_w = (float)tsw;
  if (q.mean) {
    h->scale_z = 1.0f / (float)tn;
    h->scale_loss = q.weights ? (float)(1.0 / tw) : h->scale_z;
  } else {
    h->scale_z = 1.0f;
    h->scale_loss = 1.0f;
  }
  if (q.host_verdict) { /* read from L2, where every block's atomics landed */
    q.host_verdict[0] = __ldcg(&h->bad_target);
    q.host_verdict[1] = __ldcg(&h->bad_weight);
  }
}

}  // namespace xent

#endif
