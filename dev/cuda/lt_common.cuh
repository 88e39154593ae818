/*
 * lt_common.cuh - what the cuBLASLt experiments in dev/cuda (lt_*.cu)
 * share: error checks that end the program, random bf16 inputs, and the
 * median of a few timings (lt_time). (The library's own cuBLASLt calls are
 * src/cuda/lt.cu; these programs link cuBLASLt directly.)
 */
#ifndef XENT_DEV_CUDA_LT_COMMON_CUH
#define XENT_DEV_CUDA_LT_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#define LK(x)                                                                     \
  do {                                                                            \
    cublasStatus_t s_ = (x);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      fprintf(stderr, "%s:%d cublasLt status %d\n", __FILE__, __LINE__, (int)s_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* Uniform in [-scale, scale), from a hash of the index: random bits, since
 * the products' power draw (and so their clocks) depends on them. */
__global__ void lt_fill_kernel(__nv_bfloat16 *p, size_t n, float scale, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = __float2bfloat16(((float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f) * scale);
  }
}

static inline void lt_fill(__nv_bfloat16 *p, size_t n, float scale, uint32_t seed) {
  lt_fill_kernel<<<1024, 256>>>(p, n, scale, seed);
  CK(cudaGetLastError());
}

/* The three products' operands in bf16: X (BT x H), W (V x H), the logits
 * Z (zrows x V rounded up to 8, as the library pads a chunk's rows), dX
 * (BT x H) and dW (V x H); not filled. */
struct lt_operands {
  __nv_bfloat16 *X, *W, *Z, *dX, *dW;
};

static inline lt_operands lt_alloc(long BT, long H, long V, long zrows) {
  const long Vs = (V + 7) / 8 * 8;
  lt_operands o;
  CK(cudaMalloc((void **)&o.X, (size_t)BT * H * 2));
  CK(cudaMalloc((void **)&o.W, (size_t)V * H * 2));
  CK(cudaMalloc((void **)&o.Z, (size_t)zrows * Vs * 2));
  CK(cudaMalloc((void **)&o.dX, (size_t)BT * H * 2));
  CK(cudaMalloc((void **)&o.dW, (size_t)V * H * 2));
  return o;
}

static inline void lt_free(lt_operands &o) {
  CK(cudaFree(o.X));
  CK(cudaFree(o.W));
  CK(cudaFree(o.Z));
  CK(cudaFree(o.dX));
  CK(cudaFree(o.dW));
}

static inline int lt_cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The median of v[0 .. n-1] (sorts v). */
static inline float lt_median(float *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], lt_cmp_float);
  return v[n / 2];
}

/* The median of `reps` (at most 16) timed runs of what queue_once() puts on
 * stream s, after `warm` untimed ones, in ms: events around each run. -1
 * when queue_once() returns false (a product that cannot run). */
template <typename F>
static float lt_time(cudaStream_t s, int warm, int reps, F queue_once) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float ms[16];
  bool ok = reps >= 1 && reps <= 16;
  for (int rep = 0; ok && rep < warm + reps; rep++) {
    CK(cudaEventRecord(e0, s));
    ok = queue_once();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    if (ok && rep >= warm) CK(cudaEventElapsedTime(&ms[rep - warm], e0, e1));
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return ok ? lt_median(ms, reps) : -1.0f;
}

/* A bf16 product's descriptor (fp32 accumulation) and layouts, in cuBLAS's
 * column-major terms: D (m x n) = op(A) (m x k) op(B) (k x n). */
static inline void lt_describe_product(bool ta, bool tb, long m, long n, long k, long lda,
                                       long ldb, long ldd, cublasLtMatmulDesc_t *desc,
                                       cublasLtMatrixLayout_t *la, cublasLtMatrixLayout_t *lb,
                                       cublasLtMatrixLayout_t *ld) {
  LK(cublasLtMatmulDescCreate(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LK(cublasLtMatmulDescSetAttribute(*desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  LK(cublasLtMatrixLayoutCreate(la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda));
  LK(cublasLtMatrixLayoutCreate(lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb));
  LK(cublasLtMatrixLayoutCreate(ld, CUDA_R_16BF, m, n, ldd));
}

/* Up to `want` of the heuristic's algorithms within `ws` bytes of
 * workspace; returns how many it gave. */
static inline int lt_heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                               cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                               cublasLtMatrixLayout_t ld, size_t ws, int want,
                               cublasLtMatmulHeuristicResult_t *out) {
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                          sizeof ws));
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, want, out, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  return found;
}

/* An algorithm's configuration in one line. */
static inline void lt_describe_algo(const cublasLtMatmulAlgo_t *algo, char *out, size_t n) {
  int id = 0, splitk = 0;
  uint32_t tile = 0, stages = 0, swz = 0, custom = 0, red = 0;
  uint16_t cluster = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                       sizeof stages, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                       sizeof splitk, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz,
                                       &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                       sizeof custom, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof cluster, &w);
  cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                       sizeof red, &w);
  snprintf(out, n, "algo %d tile %u stages %u cluster %u swizzle %u custom %u splitK %d red %u", id,
           tile, stages, (unsigned)cluster, swz, custom, splitk, red);
}

#endif
