/*
 * fwd_oneread.cu - one read of the logits: a row held in registers across a
 * cluster of K blocks (sm_90+; K = 1 is a plain block), each block reducing
 * its slice, the blocks merging their statistics through distributed
 * shared memory, then writing the gradient from registers.
 *
 * Tried in v1 and v2 (bench/HISTORY.md): far off. bf16 8192 x 128256 took
 * 2.04 ms (0.48 of copy) against 1.58 ms for two reads; every block lives
 * about 11 us whatever its size, and 2 or 3 register-heavy blocks a SM
 * cannot overlap one block's compute with another's loads. Won only at bf16
 * V = 32000 with one 256-thread block holding the row (0.37 ms against
 * 0.41). The staged kernel took its place.
 *
 *   fwd_oneread [V] [vecs: 2, 4, 8, 16] [cluster] [fp32|bf16]
 */
#include "common.cuh"

namespace xent {

/* Max pass over a thread's registers (and its extra element). */
template <typename T, int NV, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void oneread_max(const fwd_params &p, const uint4 (&v)[NV],
                                            const row_geom &g, int vbase, int nt, bool has_extra,
                                            float xec, int ej, part &q) {
  constexpr int VN = elem<T>::N;
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int j = vbase + i * nt;
    if (j < g.nvec) {
      float f[VN];
      elem<T>::unpack(v[i], f);
#pragma unroll
      for (int e = 0; e < VN; e++) {
        float d, xc = (GENERAL && p.use_softcap) ? cap(p, f[e], &d) : f[e];
        fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, xc, g.head + j * VN + e);
      }
    }
  }
  if (has_extra) fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, xec, ej);
}

template <typename T, int NV, bool GENERAL>
__global__ void __launch_bounds__(512, 1) fwd_oneread(const fwd_params p) {
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  __shared__ part scratch[kMaxWarps + 1];
  __shared__ float xy_shared;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ part exchange; /* this block's part, read by the whole cluster */
#endif

  const int K = p.cluster;
  unsigned rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) rank = cluster_rank();
#else
  if (K > 1) return; /* never launched: the host only picks clusters on sm_90+ */
#endif
  const int64_t row = (int64_t)(blockIdx.x / (unsigned)K);
  const int tid = threadIdx.x, nt = blockDim.x;
  char *rowp = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(rowp, p.vocab);
  const int gt = (int)rank * nt + tid; /* thread index within the cluster */
  const int vbase = (int)rank * nt * NV + tid;
  uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);

  const int64_t y64 = load_target(p.targets, p.target64, row);
  const bool bad = target_bad(p, y64);
  const bool ignored = !bad && y64 == p.ignore_index;
  if (ignored || bad) {
    /* Uniform over the cluster: no block touches distributed shared memory. */
    if (rank == 0 && tid == 0) skipped_row_outputs(p, row, bad);
    if (p.write_grad) zero_row<T>(rowp, g, vbase, vbase - tid + nt * NV, nt, gt, K * nt);
    return;
  }
  const int y = (int)y64;

  /* Load: every vector of this thread's share, then the extra element. */
  uint4 v[NV];
#pragma unroll
  for (int i = 0; i < NV; i++) {
    int j = vbase + i * nt;
    if (j < g.nvec) v[i] = __ldcs(vp + j);
  }
  const bool has_extra = gt < g.extras;
  const int ej = has_extra ? extra_index(g, gt) : 0;
  const float xe = has_extra ? elem<T>::load(rowp + (int64_t)ej * ES) : 0.0f;
  if (rank == 0 && tid == 0) xy_shared = load_xy<T, GENERAL>(p, rowp, y);
  float xec = xe;
  if (GENERAL && p.use_softcap && has_extra) {
    float d;
    xec = cap(p, xe, &d);
  }

  /* Local statistics: the max pass, then the sum of exponentials. */
  part q = part_empty();
#define XENT_ONEREAD_MAX(A, S) \
  oneread_max<T, NV, GENERAL, A, S>(p, v, g, vbase, nt, has_extra, xec, ej, q)
  XENT_WITH_FLAGS(p, XENT_ONEREAD_MAX);
#undef XENT_ONEREAD_MAX
  if (q.m != -INFINITY) {
    const float mk = q.m * kLog2e;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < VN; e++) {
          float d, xc = (GENERAL && p.use_softcap) ? cap(p, f[e], &d) : f[e];
          s += fast_exp2(fmaf(xc, kLog2e, -mk));
        }
      }
    }
    if (has_extra) s += fast_exp2(fmaf(xec, kLog2e, -mk));
    q.s = s;
  } else {
    /* Nothing above -inf here (rare): a NaN must still make the row NaN. */
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < VN; e++)
          if (f[e] != f[e]) q.s = f[e];
      }
    }
    if (has_extra && xe != xe) q.s = xe;
  }

  /* Block, then cluster reduction. */
  part r = block_reduce(q, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) r = cluster_combine(r, K, &exchange, scratch);
#endif
  __syncthreads(); /* xy_shared */
  const bool lead = rank == 0 && tid == 0;
  const grad_coef gc = finish_row(p, r, lead ? xy_shared : 0.0f, row, y, lead);

  if (p.write_grad) {
#pragma unroll
    for (int i = 0; i < NV; i++) {
      int j = vbase + i * nt;
      if (j < g.nvec) {
        float f[VN];
        elem<T>::unpack(v[i], f);
        grad_vec<T, GENERAL>(p, gc, f, g.head + j * VN);
        st_grad(vp + j, elem<T>::pack(f));
      }
    }
    if (has_extra) elem<T>::store(rowp + (int64_t)ej * ES, grad_one<GENERAL>(p, gc, xe, ej));
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (K > 1) cluster_wait();
#endif
}

}  // namespace xent

using namespace xent;

template <typename T>
static fwd_kernel_t pick(int vecs) {
  switch (vecs) {
    case 2: return fwd_oneread<T, 2, false>;
    case 4: return fwd_oneread<T, 4, false>;
    case 8: return fwd_oneread<T, 8, false>;
    case 16: return fwd_oneread<T, 16, false>;
  }
  return nullptr;
}

static int launch(const fwd_params &p0, const dev_extra &x, int dtype, cudaStream_t stream) {
  fwd_params p = p0;
  p.cluster = x.size > 0 ? x.size : 1;
  const int threads = 256, vn = dtype ? 8 : 4;
  if ((long long)p.cluster * threads * x.keep_vecs * vn < p.vocab) return -1; /* row does not fit */
  fwd_kernel_t k = dtype ? pick<__nv_bfloat16>(x.keep_vecs) : pick<float>(x.keep_vecs);
  if (!k) return -1;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3((unsigned)(p.rows * p.cluster), 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.stream = stream;
  if (p.cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)p.cluster;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, k, p) == cudaSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  const int V = argc > 1 ? atoi(argv[1]) : 32000;
  dev_extra x = {0, argc > 2 ? atoi(argv[2]) : 16, argc > 3 ? atoi(argv[3]) : 1};
  const int dtype = argc > 4 && !strcmp(argv[4], "fp32") ? 0 : 1;
  return dev_run("one-read", launch, x, 1, dtype, V, 8192);
}
