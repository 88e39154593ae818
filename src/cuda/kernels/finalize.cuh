/*
 * finalize.cuh - after the forward, for reductions mean and sum:
 * finalize_kernel adds the per-row values in a fixed order (in double) and
 * writes the reduced outputs. Where no count kernel ran (unchecked,
 * unweighted, and no gradient to scale by 1/N) it counts N itself, in the
 * same pass: the forward left -0 as the loss of each ignored row
 * (skipped_row_outputs), and no other row holds -0. fill_kernel writes the
 * reduced outputs of a call with no rows.
 */
#ifndef XENT_CUDA_KERNELS_FINALIZE_CUH
#define XENT_CUDA_KERNELS_FINALIZE_CUH

#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/row.cuh"

namespace xent {

constexpr int kFinalizeThreads = 1024;

__global__ void __launch_bounds__(kFinalizeThreads) finalize_kernel(const finalize_params f) {
  static_assert(kFinalizeThreads == 1024, "block_sums_1024");
  if (kernel_enter(f.verdict)) { /* checked mode, a bad target: write nothing ... */
    if (threadIdx.x == 0 && f.nan_if_rejected) { /* ... but deferred mode's NaN */
      const float nan = __int_as_float(0x7fc00000);
      f.loss[0] = nan;
      if (f.z_loss) f.z_loss[0] = nan;
      if (f.acc) f.acc[0] = nan;
    }
    return;
  }
  __shared__ double sh[4][32];
  const ws_header *h = f.hdr;
  const bool count = !h && f.count; /* N: the rows whose loss is not -0 */
  /* Each thread adds its rows (threadIdx.x + k * 1024) in order, loading U
   * rows' values before it adds them, so that their latencies overlap. */
  constexpr int U = 8;
  double l = 0.0, z = 0.0, a = 0.0, n = 0.0;
  for (int64_t r0 = threadIdx.x; r0 < f.rows; r0 += (int64_t)U * kFinalizeThreads) {
    float lv[U], zv[U], av[U];
    bool nv[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t r = r0 + (int64_t)u * kFinalizeThreads;
      const bool in = r < f.rows;
      lv[u] = in ? f.row_loss[r] : 0.0f;
      zv[u] = in && f.row_z ? f.row_z[r] : 0.0f;
      av[u] = in && f.row_acc ? f.row_acc[r] : 0.0f;
      nv[u] = in && count && __float_as_uint(lv[u]) != 0x80000000u;
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      l += lv[u];
      z += zv[u];
      a += av[u];
      n += nv[u] ? 1.0 : 0.0;
    }
  }
  /* Only the sums the call has, in one reduction. */
  double v[4] = {l, z, a, n};
  const bool on[4] = {true, f.row_z != NULL, f.row_acc != NULL, count};
  block_sums_1024(v, on, sh);
  if (threadIdx.x != 0) return;
  l = v[0], z = v[1], a = v[2], n = v[3];
  if (h) n = (double)h->n;
  double sl = h ? h->scale_loss : 1.0, sz = h ? h->scale_z : 1.0;
  if (f.mean && (h || count)) {
    /* divide in double rather than multiply by the float reciprocals */
    sz = 1.0 / n;
    sl = f.weighted ? 1.0 / (double)h->w : sz; /* weighted: always counted */
  }
  if (f.mean && f.empty_zero && n == 0.0) { /* a mean over no rows, by the caller's rule */
    f.loss[0] = 0.0f;
    if (f.z_loss) f.z_loss[0] = 0.0f;
    if (f.acc) f.acc[0] = 0.0f;
    return;
  }
  f.loss[0] = (float)(l * sl + z * sz);
  if (f.z_loss) f.z_loss[0] = (float)(z * sz);
  if (f.acc) f.acc[0] = (h || count) ? (float)(a / n) : __int_as_float(0x7fc00000);
}

__global__ void fill_kernel(float *loss, float *z_loss, float *acc, float lv, float zv,
                            float av) {
  if (loss) loss[0] = lv;
  if (z_loss) z_loss[0] = zv;
  if (acc) acc[0] = av;
}

}  // namespace xent

#endif
