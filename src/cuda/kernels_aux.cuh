/*
 * kernels_aux.cuh - the small kernels around the forward pass, and the
 * backward scale.
 *
 * count_kernel:    before the forward kernel. Counts the non-ignored rows N,
 *                  sums w[y] over them (W) and all weights, finds the first bad
 *                  target and the first non-finite weight, and leaves the
 *                  reduction scales in the workspace header for the forward
 *                  kernel to read: no host round trip. Deterministic: fixed
 *                  per-thread assignment, fixed trees, and the last block adds
 *                  the block partials in block order.
 * finalize_kernel: after it, for mean and sum: adds the per-row values in a
 *                  fixed order (in double) and writes the reduced outputs.
 *                  Where no count kernel ran (unchecked, unweighted, and no
 *                  gradient to scale by 1/N) it counts N itself, in the same
 *                  pass: the forward left -0 as the loss of each ignored row
 *                  (skipped_row_outputs), and no other row holds -0.
 * scale_kernel:    the backward: gradient *= grad_output in place, read on the
 *                  device; rows whose factor is exactly 1 are skipped.
 * fill_kernel:     writes the reduced outputs of a call with no rows.
 * l2_normal_kernel, l2_read_kernel: the benchmark's L2 flush helpers
 *                  (tune.h), not the loss.
 */
#ifndef XENT_CUDA_KERNELS_AUX_CUH
#define XENT_CUDA_KERNELS_AUX_CUH

#include "cuda/device_common.cuh"

namespace xent {

constexpr int kCountThreads = 256;
constexpr int kCountMaxBlocks = 256;
constexpr int kFinalizeThreads = 1024;

template <typename V, int NT>
__device__ __forceinline__ V block_sum(V v, V *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int o = NT / 2; o > 0; o >>= 1) {
    if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
    __syncthreads();
  }
  V r = sh[0];
  __syncthreads();
  return r;
}

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

/* Adds each v[k] whose on[k] is set over the warp, in a fixed tree; the
 * sums are in lane 0. */
template <int K>
__device__ __forceinline__ void warp_sums(double (&v)[K], const bool (&on)[K]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < K; k++)
      if (on[k]) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
}

/* Sums the values v[k] whose on[k] is set (uniform over the block) over a
 * 1024-thread block in a fixed tree (shuffles within each warp, then across
 * the warps' sums in warp 0), all of them in the same steps and at one
 * barrier: deterministic. The results are in thread 0. `sh` holds 32 values
 * for each k. */
template <int K>
__device__ __forceinline__ void block_sums_1024(double (&v)[K], const bool (&on)[K],
                                                double (*sh)[32]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_sums(v, on);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < K; k++) sh[k][warp] = v[k];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int k = 0; k < K; k++) v[k] = on[k] ? sh[k][lane] : 0.0;
  warp_sums(v, on);
}

__global__ void __launch_bounds__(kFinalizeThreads) finalize_kernel(const finalize_params f) {
  static_assert(kFinalizeThreads == 1024, "block_sums_1024");
  if (kernel_enter(f.verdict)) return; /* checked mode, a bad target: write nothing */
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

constexpr int kScaleMaxThreads = 512;
constexpr int kScaleUnroll = 16; /* vectors a thread loads before it stores */

/* Work item i of the scale kernel: row i / chunks, vectors of chunk
 * i % chunks, blockDim.x * kScaleUnroll of them a chunk. Each thread loads
 * all its vectors of the item, then scales and stores them; plain loads and
 * stores (evict-first hints were 3 % slower, bench/NOTES.md v10). The host
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
  const float g0 = s.per_row ? 0.0f : (s.grad_output ? s.grad_output[0] : s.host_scale);
  if (!s.per_row && g0 == 1.0f) return;
  const int64_t items = s.rows * (int64_t)chunks;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t row = item / chunks;
    const int chunk = (int)(item - row * chunks);
    /* A per-row factor is loaded alongside the row's vectors, not before
     * them: no branch on it, so its latency overlaps theirs (a factor of 1
     * rewrites the same bits). */
    const float gfac = s.per_row ? s.grad_output[row] : g0;
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

/* Sets the L2 eviction priority of the lines of [p, p + bytes) back to
 * normal (xent_tune_l2_normal; the benchmark's flush, not the loss). */
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
 * (xent_tune_l2_read; the benchmark's flush, not the loss). The loads are
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

}  // namespace xent

#endif
