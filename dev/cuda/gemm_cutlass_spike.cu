/*
 * gemm_cutlass_spike.cu - the spike of issue 56's first step: the fused linear
 * loss's three products through CUTLASS 3's Hopper GEMMs (TMA loads, wgmma,
 * warp-specialized persistent kernels, clusters), against cuBLASLt's on the
 * same operands, at the benchmark's chunk and whole-batch shapes. It answers
 * the spike's questions for the CuTe/CUTLASS route: the rate against cuBLAS
 * at each product shape, and the compile time (bench/NOTES.md, v35); the
 * plain CUDA route is the other candidate.
 *
 *   dev-gemm_cutlass_spike [BT H V chunk]   (default 8192 4096 128256 488; bf16)
 *
 * Built only with XENT_CUTLASS_DIR set to CUTLASS's include folder (the
 * nvidia-cutlass package on PyPI ships it under cutlass_library/source/
 * include); nothing of CUTLASS is in the repository.
 *
 * In row-major terms, for a chunk of `c` rows (X_c: c x H, W: V x H, G: c x V):
 *   logits  Z = X_c W^T   A = X_c (K-major), B = W (K-major), D = Z
 *   dX      dX = G W      A = G (K-major),   B = W (N-major),  D = dX
 *   dW      dW += G^T X_c A = G^T (M-major), B = X_c (N-major), D = dW (beta 1)
 * Each product: the CUTLASS kernel's output against cuBLASLt's (the relative
 * norm of the difference, both fp32-accumulated), then the median of 9 timed
 * runs of each, TFLOP/s, and CUTLASS / cuBLASLt.
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "lt_common.cuh" /* CK, LK */

using namespace cute;
using bf16 = cutlass::bfloat16_t;

/* One Hopper GEMM: D = alpha A B + beta C, bf16 operands and output, fp32
 * accumulation; A is M x K, B is K x N (CUTLASS's B: N x K in its layout
 * tag's terms), D row-major. The cooperative warp-specialized persistent
 * kernel, 128 x 256 tiles of 64 deep, clusters of 2 along M. (The builders
 * are instantiated at namespace scope: inside a class template GCC reads
 * their dependent member types as values.) */
using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_2, _1, _1>;
using EpilogueOp = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float, bf16,
    cutlass::layout::RowMajor, 8, bf16, cutlass::layout::RowMajor, 8,
    cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
#define XENT_SPIKE_KERNEL(name, LayoutA, LayoutB)                                              \
  using name##Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<                 \
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, bf16, LayoutA, 8, bf16, LayoutB, 8, \
      float, TileShape, ClusterShape,                                                          \
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(                      \
          sizeof(typename EpilogueOp::SharedStorage))>,                                        \
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;                       \
  using name##Kernel =                                                                         \
      cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, name##Mainloop, EpilogueOp>;
XENT_SPIKE_KERNEL(Logits, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor)
XENT_SPIKE_KERNEL(Dx, cutlass::layout::RowMajor, cutlass::layout::RowMajor)
XENT_SPIKE_KERNEL(Dw, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor)

template <class Kernel, class LayoutA, class LayoutB>
struct HopperGemm {
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  Gemm gemm;
  void *ws = nullptr;
  size_t ws_bytes = 0;

  /* Set up D (M x N, ldd) = A B (+ D when beta is 1): A with leading
   * dimension lda, B with ldb, in the layouts of the type. */
  bool setup(int M, int N, int K, const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb,
             bf16 *D, int64_t ldd, float beta) {
    using SA = typename Kernel::StrideA;
    using SB = typename Kernel::StrideB;
    using SC = typename Kernel::StrideC;
    using SD = typename Kernel::StrideD;
    SA sa = cutlass::make_cute_packed_stride(SA{}, cute::make_shape(M, K, 1));
    SB sb = cutlass::make_cute_packed_stride(SB{}, cute::make_shape(N, K, 1));
    SC sc = cutlass::make_cute_packed_stride(SC{}, cute::make_shape(M, N, 1));
    SD sd = cutlass::make_cute_packed_stride(SD{}, cute::make_shape(M, N, 1));
    /* the leading dimensions the call gives (padded rows) */
    if constexpr (cute::is_same_v<LayoutA, cutlass::layout::RowMajor>) cute::get<0>(sa) = lda;
    else cute::get<1>(sa) = lda;
    if constexpr (cute::is_same_v<LayoutB, cutlass::layout::ColumnMajor>) cute::get<0>(sb) = ldb;
    else cute::get<1>(sb) = ldb;
    cute::get<0>(sc) = ldd;
    cute::get<0>(sd) = ldd;
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {M, N, K, 1},
                                  {A, sa, B, sb},
                                  {{1.0f, beta}, D, sc, D, sd}};
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
    ws_bytes = Gemm::get_workspace_size(args);
    if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
    return gemm.initialize(args, ws) == cutlass::Status::kSuccess;
  }
  bool run() { return gemm.run() == cutlass::Status::kSuccess; }
};

using RM = cutlass::layout::RowMajor;
using CM = cutlass::layout::ColumnMajor;
using LogitsGemm = HopperGemm<LogitsKernel, RM, CM>; /* A K-major, B K-major */
using DxGemm = HopperGemm<DxKernel, RM, RM>;         /* A K-major, B N-major */
using DwGemm = HopperGemm<DwKernel, CM, RM>;         /* A M-major, B N-major */

/* lt_common.cuh's random fill (cutlass::bfloat16_t is __nv_bfloat16's layout) */
static void fill_bf16(bf16 *p, size_t n, float scale, uint32_t seed) {
  lt_fill(reinterpret_cast<__nv_bfloat16 *>(p), n, scale, seed);
}

__global__ void diff_kernel(const bf16 *a, const bf16 *b, size_t n, double *out) {
  double d = 0, r = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const double x = (float)a[i], y = (float)b[i];
    d += (x - y) * (x - y);
    r += y * y;
  }
  atomicAdd(out, d); /* a check, not a result: order does not matter */
  atomicAdd(out + 1, r);
}

/* cuBLASLt's heuristic product in the same terms (column-major: D^T = B^T A^T). */
struct LtGemm {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  const void *a, *b;
  void *d;
  float beta;
  void *ws;
};

static LtGemm lt_setup(cublasLtHandle_t h, bool a_rowmajor, bool b_colmajor, int M, int N, int K,
                       const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb, bf16 *D,
                       int64_t ldd, float beta, void *ws, size_t ws_bytes) {
  /* row-major D (M x N) is column-major D^T (N x M) = B^T (N x K) A^T (K x M) */
  LtGemm g;
  LK(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t ta = b_colmajor ? CUBLAS_OP_T : CUBLAS_OP_N;  /* B^T from B's storage */
  const int32_t tb = a_rowmajor ? CUBLAS_OP_N : CUBLAS_OP_T;  /* A^T from A's storage */
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LK(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  LK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, b_colmajor ? K : N, b_colmajor ? N : K, ldb));
  LK(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, a_rowmajor ? K : M, a_rowmajor ? M : K, lda));
  LK(cublasLtMatrixLayoutCreate(&g.ld, CUDA_R_16BF, N, M, ldd));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t r;
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(h, g.desc, g.la, g.lb, g.ld, g.ld, pref, 1, &r, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found < 1) {
    fprintf(stderr, "cuBLASLt: no algorithm\n");
    exit(1);
  }
  g.algo = r.algo;
  g.a = B;
  g.b = A;
  g.d = D;
  g.beta = beta;
  g.ws = ws;
  return g;
}

static void lt_run(cublasLtHandle_t h, const LtGemm &g, size_t ws_bytes) {
  const float alpha = 1.0f;
  LK(cublasLtMatmul(h, g.desc, &alpha, g.a, g.la, g.b, g.lb, &g.beta, g.d, g.ld, g.d, g.ld,
                    &g.algo, g.ws, ws_bytes, 0));
}

template <class F>
static float median_ms(F run, int reps = 9) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  run();
  run();
  std::vector<float> t;
  for (int i = 0; i < reps; i++) {
    CK(cudaEventRecord(e0));
    run();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

template <class G>
static void run_product(const char *name, cublasLtHandle_t h, bool a_rm, bool b_cm, int M, int N,
                    int K, const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb, bf16 *D1,
                    bf16 *D2, int64_t ldd, float beta, void *ws, size_t ws_bytes,
                    double *acc) {
  G cg;
  if (!cg.setup(M, N, K, A, lda, B, ldb, D1, ldd, beta)) {
    printf("%-8s %6d x %6d x %6d  CUTLASS cannot run it\n", name, M, N, K);
    return;
  }
  LtGemm lg = lt_setup(h, a_rm, b_cm, M, N, K, A, lda, B, ldb, D2, ldd, beta, ws, ws_bytes);
  /* the same starting D for beta 1, one product each, then the outputs compared */
  const size_t n = (size_t)M * ldd;
  fill_bf16(D1, n, 1e-2f, 7u);
  fill_bf16(D2, n, 1e-2f, 7u);
  if (!cg.run()) {
    printf("%-8s CUTLASS run failed\n", name);
    return;
  }
  lt_run(h, lg, ws_bytes);
  CK(cudaMemset(acc, 0, 2 * sizeof(double)));
  diff_kernel<<<1024, 256>>>(D1, D2, n, acc);
  double hd[2];
  CK(cudaMemcpy(hd, acc, sizeof hd, cudaMemcpyDeviceToHost));
  const float tc = median_ms([&] { cg.run(); });
  const float tl = median_ms([&] { lt_run(h, lg, ws_bytes); });
  const double flop = 2.0 * M * (double)N * K;
  printf("%-8s %6d x %6d x %6d  diff %.2e  CUTLASS %8.3f ms %6.1f TF/s  cuBLASLt %8.3f ms %6.1f "
         "TF/s  ratio %.3f\n",
         name, M, N, K, sqrt(hd[0] / (hd[1] + 1e-300)), tc, flop / tc / 1e9, tl,
         flop / tl / 1e9, tc / tl);
  if (cg.ws) CK(cudaFree(cg.ws));
}

int main(int argc, char **argv) {
  const int BT = argc > 1 ? atoi(argv[1]) : 8192, H = argc > 2 ? atoi(argv[2]) : 4096;
  const int V = argc > 3 ? atoi(argv[3]) : 128256, chunk = argc > 4 ? atoi(argv[4]) : 488;
  const int Vs = (V + 7) / 8 * 8; /* the library's logits row stride */
  bf16 *X, *W, *Z, *Z2, *Z3, *dX, *dX2, *dW, *dW2;
  double *acc;
  void *ws;
  const size_t ws_bytes = 32u << 20;
  CK(cudaMalloc(&X, (size_t)BT * H * 2));
  CK(cudaMalloc(&W, (size_t)V * H * 2));
  CK(cudaMalloc(&Z, (size_t)BT * Vs * 2));
  CK(cudaMalloc(&Z2, (size_t)BT * Vs * 2));
  CK(cudaMalloc(&Z3, (size_t)BT * Vs * 2));
  CK(cudaMalloc(&dX, (size_t)BT * H * 2));
  CK(cudaMalloc(&dX2, (size_t)BT * H * 2));
  CK(cudaMalloc(&dW, (size_t)V * H * 2));
  CK(cudaMalloc(&dW2, (size_t)V * H * 2));
  CK(cudaMalloc(&acc, 2 * sizeof(double)));
  CK(cudaMalloc(&ws, ws_bytes));
  fill_bf16(X, (size_t)BT * H, 1.0f, 1u);
  fill_bf16(W, (size_t)V * H, 0.03f, 2u);
  cublasLtHandle_t h;
  LK(cublasLtCreate(&h));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("the fused linear loss's products, bf16, %s: BT %d, H %d, V %d, chunk %d\n", prop.name,
         BT, H, V, chunk);
  for (int rows : {chunk, BT}) {
    /* G: the logits' buffer, filled as a gradient would be (small values) */
    fill_bf16(Z, (size_t)rows * Vs, 1e-4f, 3u);
    run_product<LogitsGemm>("logits", h, true, true, rows, V, H, X, H, W, H, Z2, Z3, Vs, 0.0f, ws,
                        ws_bytes, acc);
    run_product<DxGemm>("dX", h, true, false, rows, H, V, Z, Vs, W, H, dX, dX2, H, 0.0f, ws,
                    ws_bytes, acc);
    run_product<DwGemm>("dW", h, false, false, V, H, rows, Z, Vs, X, H, dW, dW2, H, 1.0f, ws,
                    ws_bytes, acc);
  }
  cublasLtDestroy(h);
  return 0;
}
