/*
 * common.cuh - the harness every experiment in dev/cuda shares, and the
 * device helpers only experiments use.
 *
 * An experiment is one program: its kernel, a launch function, and main()
 * calling dev_run(), which makes random logits and targets on the device,
 * runs the kernel once on a small problem and checks the loss and gradient of
 * every row against a float64 reference on the host (sum reduction, as the
 * kernels compute it without a count kernel), then times it on a large
 * problem: the median of 20 launches, the logits refreshed from a pristine
 * copy before each (untimed), against a device-to-device copy of the same
 * bytes. The kernels build on the library's device headers (src/cuda), so
 * that an experiment computes what the library computes.
 */
#ifndef XENT_DEV_CUDA_COMMON_CUH
#define XENT_DEV_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/params.cuh"
#include "cuda/reduce.cuh"
#include "cuda/row.cuh"
#include "cuda/sm80.cuh"
#include "cuda/sm90.cuh"

#define DEV_CK(call)                                                                   \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
              cudaGetErrorString(e_));                                                 \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

namespace xent {

/* ------------------------------------------------------------------------ */
/* Device helpers only the experiments use                                   */
/* ------------------------------------------------------------------------ */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
/* 16 bytes from global to shared memory without registers (cp.async). */
__device__ __forceinline__ void copy16_async(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(dst)),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void copies_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
/* Wait until at most `n` (0 to 15, clamped) of this thread's newest groups
 * are in flight. */
__device__ __forceinline__ void copies_wait_pending(int n) {
#define DEV_WAIT_CASE(k) \
  case k: asm volatile("cp.async.wait_group " #k ";" ::: "memory"); break;
  switch (n) {
    DEV_WAIT_CASE(1) DEV_WAIT_CASE(2) DEV_WAIT_CASE(3) DEV_WAIT_CASE(4) DEV_WAIT_CASE(5)
    DEV_WAIT_CASE(6) DEV_WAIT_CASE(7) DEV_WAIT_CASE(8) DEV_WAIT_CASE(9) DEV_WAIT_CASE(10)
    DEV_WAIT_CASE(11) DEV_WAIT_CASE(12) DEV_WAIT_CASE(13) DEV_WAIT_CASE(14) DEV_WAIT_CASE(15)
    default:
      if (n > 15) asm volatile("cp.async.wait_group 15;" ::: "memory");
      else asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
#undef DEV_WAIT_CASE
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* An arrival on `bar` once this thread's earlier cp.async copies landed. */
__device__ __forceinline__ void copies_arrive(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ void st_dsmem_f32(uint32_t a, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(a), "f"(v) : "memory");
}
__device__ __forceinline__ void st_dsmem_s32(uint32_t a, int v) {
  asm volatile("st.shared::cluster.s32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
}
__device__ __forceinline__ float ld_dsmem_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a));
  return v;
}
__device__ __forceinline__ int ld_dsmem_s32(uint32_t a) {
  int v;
  asm volatile("ld.shared::cluster.s32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
/* q into the shared variable `local` of block `rank` of this cluster. */
__device__ __forceinline__ void st_dsmem_part(part *local, unsigned rank, const part &q) {
  uint32_t a = map_shared(local, rank);
  st_dsmem_f32(a + offsetof(part, m), q.m);
  st_dsmem_f32(a + offsetof(part, s), q.s);
  st_dsmem_f32(a + offsetof(part, sx), q.sx);
  st_dsmem_f32(a + offsetof(part, swx), q.swx);
  st_dsmem_f32(a + offsetof(part, am), q.am);
  st_dsmem_s32(a + offsetof(part, ai), q.ai);
}
__device__ __forceinline__ part ld_dsmem_part(const part *local, unsigned rank) {
  uint32_t a = map_shared(local, rank);
  part q;
  q.m = ld_dsmem_f32(a + offsetof(part, m));
  q.s = ld_dsmem_f32(a + offsetof(part, s));
  q.sx = ld_dsmem_f32(a + offsetof(part, sx));
  q.swx = ld_dsmem_f32(a + offsetof(part, swx));
  q.am = ld_dsmem_f32(a + offsetof(part, am));
  q.ai = ld_dsmem_s32(a + offsetof(part, ai));
  return q;
}
/* The K blocks' results merged in rank order through a cluster barrier;
 * leaves the barrier armed: cluster_wait() before the block exits. */
__device__ __forceinline__ part cluster_combine(part r, int K, part *exchange, part *scratch) {
  if (threadIdx.x == 0) *exchange = r;
  cluster_sync();
  if (threadIdx.x < 32) {
    part t = (int)threadIdx.x < K ? ld_dsmem_part(exchange, threadIdx.x) : part_empty();
    t = warp_reduce(t);
    if (threadIdx.x == 0) scratch[kMaxWarps] = t;
  }
  cluster_arrive();
  __syncthreads();
  return scratch[kMaxWarps];
}
#endif

}  // namespace xent

/* ------------------------------------------------------------------------ */
/* The harness                                                               */
/* ------------------------------------------------------------------------ */

typedef void (*fwd_kernel_t)(const xent::fwd_params);

/* Fields of an experiment's launch that the library's parameters lack. */
typedef struct dev_extra {
  int ring_lsu;  /* fwd_ring: per-thread copies instead of bulk ones        */
  int keep_vecs; /* fwd_tworead_keep: vectors a thread holds in shared memory */
  int size;      /* the experiment's own size argument                       */
} dev_extra;

/* What an experiment provides: launch the kernel on `p` (logits of `dtype`
 * 0 fp32, 1 bf16) on `stream`; return 0, or -1 when it cannot run it. */
typedef int (*dev_launch_fn)(const xent::fwd_params &p, const dev_extra &x, int dtype,
                             cudaStream_t stream);

typedef struct dev_problem {
  int64_t rows;
  int vocab, dtype, es;
  size_t bytes;
  void *logits, *pristine;
  int64_t *targets;
  float *row_loss, *lse;
  int64_t *host_targets;
} dev_problem;

static inline float dev_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t dev_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static uint64_t dev_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline dev_problem dev_make(int64_t rows, int vocab, int dtype, uint64_t seed) {
  dev_problem d;
  memset(&d, 0, sizeof d);
  d.rows = rows;
  d.vocab = vocab;
  d.dtype = dtype;
  d.es = dtype ? 2 : 4;
  d.bytes = (size_t)rows * (size_t)vocab * (size_t)d.es;
  void *host = malloc(d.bytes);
  d.host_targets = (int64_t *)malloc((size_t)rows * sizeof(int64_t));
  if (!host || !d.host_targets) {
    fprintf(stderr, "out of host memory\n");
    exit(1);
  }
  for (size_t i = 0; i < (size_t)rows * (size_t)vocab; i++) {
    const uint64_t r = dev_next(&seed);
    const float x = ((float)(r & 0xffffff) / 16777216.0f - 0.5f) * 12.0f;
    if (dtype) ((uint16_t *)host)[i] = dev_f32_to_bf16(x);
    else ((float *)host)[i] = x;
  }
  for (int64_t r = 0; r < rows; r++) {
    const uint64_t u = dev_next(&seed);
    d.host_targets[r] = (u % 10 == 0) ? -100 : (int64_t)(u % (uint64_t)vocab);
  }
  DEV_CK(cudaMalloc(&d.logits, d.bytes));
  DEV_CK(cudaMalloc(&d.pristine, d.bytes));
  DEV_CK(cudaMalloc((void **)&d.targets, (size_t)rows * sizeof(int64_t)));
  DEV_CK(cudaMalloc((void **)&d.row_loss, (size_t)rows * sizeof(float)));
  DEV_CK(cudaMalloc((void **)&d.lse, (size_t)rows * sizeof(float)));
  DEV_CK(cudaMemcpy(d.pristine, host, d.bytes, cudaMemcpyHostToDevice));
  DEV_CK(cudaMemcpy(d.logits, host, d.bytes, cudaMemcpyHostToDevice));
  DEV_CK(cudaMemcpy(d.targets, d.host_targets, (size_t)rows * sizeof(int64_t),
                    cudaMemcpyHostToDevice));
  free(host);
  return d;
}

static inline void dev_free(dev_problem *d) {
  cudaFree(d->logits);
  cudaFree(d->pristine);
  cudaFree(d->targets);
  cudaFree(d->row_loss);
  cudaFree(d->lse);
  free(d->host_targets);
}

/* The parameters of a sum-reduced call with the per-row losses and lse as
 * outputs (no count kernel: scales 1, unchecked). */
static inline xent::fwd_params dev_params(const dev_problem &d, int grad) {
  xent::fwd_params p;
  memset(&p, 0, sizeof p);
  p.x = (char *)d.logits;
  p.rows = d.rows;
  p.stride_bytes = (int64_t)d.vocab * d.es;
  p.vocab = d.vocab;
  p.cluster = 1;
  p.targets = d.targets;
  p.target64 = 1;
  p.ignore_index = -100;
  p.k.inv_vocab = 1.0f / (float)d.vocab;
  p.write_grad = grad;
  p.per_row_out = 1;
  p.row_loss = d.row_loss;
  p.lse_out = d.lse;
  return p;
}

/* Check every row's loss and gradient against float64: 0 when they agree. */
static inline int dev_check(const dev_problem &d, int grad) {
  const size_t n = (size_t)d.rows * (size_t)d.vocab;
  void *x = malloc(d.bytes), *g = malloc(d.bytes);
  float *loss = (float *)malloc((size_t)d.rows * sizeof(float));
  DEV_CK(cudaDeviceSynchronize());
  DEV_CK(cudaMemcpy(x, d.pristine, d.bytes, cudaMemcpyDeviceToHost));
  DEV_CK(cudaMemcpy(g, d.logits, d.bytes, cudaMemcpyDeviceToHost));
  DEV_CK(cudaMemcpy(loss, d.row_loss, (size_t)d.rows * sizeof(float), cudaMemcpyDeviceToHost));
  int bad = 0;
  const double gtol = d.dtype ? 1e-2 : 1e-5;
  for (int64_t r = 0; r < d.rows && bad < 5; r++) {
    const int64_t y = d.host_targets[r];
    const size_t o = (size_t)r * (size_t)d.vocab;
    double m = -INFINITY, s = 0.0;
    for (int j = 0; j < d.vocab; j++) {
      const double v = d.dtype ? dev_bf16_to_f32(((uint16_t *)x)[o + j]) : ((float *)x)[o + j];
      m = v > m ? v : m;
    }
    for (int j = 0; j < d.vocab; j++) {
      const double v = d.dtype ? dev_bf16_to_f32(((uint16_t *)x)[o + j]) : ((float *)x)[o + j];
      s += exp(v - m);
    }
    const double lse = m + log(s);
    const double xy = y < 0 ? 0.0
                      : d.dtype ? dev_bf16_to_f32(((uint16_t *)x)[o + y])
                                : ((float *)x)[o + y];
    const double want = y < 0 ? 0.0 : lse - xy;
    if (!(fabs(loss[r] - want) <= 1e-4 * (1.0 + fabs(want)))) {
      fprintf(stderr, "  row %lld: loss %.7g, want %.7g\n", (long long)r, loss[r], want);
      bad++;
    }
    if (!grad) continue;
    for (int j = 0; j < d.vocab; j++) {
      const double v = d.dtype ? dev_bf16_to_f32(((uint16_t *)x)[o + j]) : ((float *)x)[o + j];
      const double gw = y < 0 ? 0.0 : exp(v - lse) - (j == y ? 1.0 : 0.0);
      const double gg = d.dtype ? dev_bf16_to_f32(((uint16_t *)g)[o + j]) : ((float *)g)[o + j];
      if (!(fabs(gg - gw) <= gtol * (1e-3 + fabs(gw)) + 1e-6)) {
        fprintf(stderr, "  row %lld, column %d: gradient %.7g, want %.7g\n", (long long)r, j, gg,
                gw);
        bad++;
        break;
      }
    }
  }
  (void)n;
  free(x);
  free(g);
  free(loss);
  return bad;
}

static int dev_cmp(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Check on a small problem, then time on a large one; prints one line per
 * size. Returns the process exit code. */
static inline int dev_run(const char *name, dev_launch_fn launch, const dev_extra &x, int grad,
                          int dtype, int vocab, int64_t rows) {
  cudaStream_t stream;
  DEV_CK(cudaStreamCreate(&stream));
  dev_problem small = dev_make(64, vocab, dtype, 1);
  xent::fwd_params p = dev_params(small, grad);
  if (launch(p, x, dtype, stream)) {
    printf("%s: cannot run V = %d %s\n", name, vocab, dtype ? "bf16" : "fp32");
    return 2;
  }
  DEV_CK(cudaGetLastError());
  const int bad = dev_check(small, grad);
  dev_free(&small);
  if (bad) {
    printf("%s: V = %d %s: WRONG (%d rows)\n", name, vocab, dtype ? "bf16" : "fp32", bad);
    return 1;
  }
  dev_problem big = dev_make(rows, vocab, dtype, 2);
  p = dev_params(big, grad);
  enum { N = 20 };
  float t[N], c[N];
  cudaEvent_t e0, e1;
  DEV_CK(cudaEventCreate(&e0));
  DEV_CK(cudaEventCreate(&e1));
  for (int i = -3; i < N; i++) {
    DEV_CK(cudaMemcpyAsync(big.logits, big.pristine, big.bytes, cudaMemcpyDeviceToDevice, stream));
    DEV_CK(cudaEventRecord(e0, stream));
    launch(p, x, dtype, stream);
    DEV_CK(cudaEventRecord(e1, stream));
    DEV_CK(cudaEventSynchronize(e1));
    if (i >= 0) DEV_CK(cudaEventElapsedTime(&t[i], e0, e1));
    DEV_CK(cudaEventRecord(e0, stream));
    DEV_CK(cudaMemcpyAsync(big.logits, big.pristine, big.bytes, cudaMemcpyDeviceToDevice, stream));
    DEV_CK(cudaEventRecord(e1, stream));
    DEV_CK(cudaEventSynchronize(e1));
    if (i >= 0) DEV_CK(cudaEventElapsedTime(&c[i], e0, e1));
  }
  DEV_CK(cudaGetLastError());
  qsort(t, N, sizeof t[0], dev_cmp);
  qsort(c, N, sizeof c[0], dev_cmp);
  const double bytes = (grad ? 2.0 : 1.0) * (double)big.bytes;
  printf("%s: BT = %lld V = %d %s %s: %.4f ms, %.3f TB/s, %.3f of the copy (%.3f TB/s)\n", name,
         (long long)rows, vocab, dtype ? "bf16" : "fp32", grad ? "fwd+grad" : "forward",
         t[N / 2], bytes / (t[N / 2] * 1e-3) / 1e12,
         (bytes / t[N / 2]) / (2.0 * (double)big.bytes / c[N / 2]),
         2.0 * (double)big.bytes / (c[N / 2] * 1e-3) / 1e12);
  dev_free(&big);
  return 0;
}

#endif
