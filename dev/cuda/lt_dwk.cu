/*
 * lt_dwk.cu - the weight gradient's product, dW (+)= G^T X, by its k (the
 * rows of a chunk): the heuristic's first configuration against the one
 * src/cuda/lt.cu forces (a 256 x 64 tile over clusters of 1 x 2, custom
 * option 2, measured at k = 488 in v28), at k from a default chunk to a
 * whole batch, for the benchmark's heads. Where does the forced one stop
 * paying (bench/NOTES.md, v35)?
 *
 *   dev-lt_dwk [reps]      (default 7; bf16, 4 MiB of workspace, as the library)
 *
 * Each point: D read and written (beta 1) below the whole batch, written
 * fresh (beta 0) at k = BT = 8192, as the library's first chunk; the median
 * of `reps` runs on random inputs, in ms and TFLOP/s, and forced / heuristic.
 */
#include "lt_common.cuh"

#include <string.h>

static const size_t kWs = 4u << 20;

/* The heuristic's first algorithm for the product, and the forced
 * configuration where cuBLASLt accepts it (false when not). */
static bool algos(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                  cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld,
                  cublasLtMatmulAlgo_t *heur, cublasLtMatmulAlgo_t *forced) {
  cublasLtMatmulHeuristicResult_t r;
  if (lt_heuristic(h, desc, la, lb, ld, kWs, 1, &r) < 1) return false;
  *heur = r.algo;
  *forced = r.algo;
  const uint32_t tile = CUBLASLT_MATMUL_TILE_256x64, custom = 2;
  const uint16_t cluster = CUBLASLT_CLUSTER_SHAPE_1x2x1;
  cublasLtMatmulHeuristicResult_t chk;
  return cublasLtMatmulAlgoConfigSetAttribute(forced, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                              sizeof tile) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoConfigSetAttribute(forced, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                              &cluster, sizeof cluster) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoConfigSetAttribute(forced, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom,
                                              sizeof custom) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulAlgoCheck(h, desc, la, lb, ld, ld, forced, &chk) == CUBLAS_STATUS_SUCCESS &&
         chk.workspaceSize <= kWs;
}

int main(int argc, char **argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 7;
  cublasLtHandle_t h;
  LK(cublasLtCreate(&h));
  void *ws;
  CK(cudaMalloc(&ws, kWs));
  const long BT = 8192;
  const long heads[][2] = {{4096, 128256}, {2304, 256000}, {2048, 128256}};
  const long ks[] = {232, 488, 976, 1464, 2048, 2736, 4096, 8192};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("dW (+)= G^T X by k, bf16, %s; ms (TFLOP/s)\n", prop.name);
  printf("%6s %6s %6s  %-16s %-16s %s\n", "H", "V", "k", "heuristic", "forced", "forced/heur");
  for (const auto &hv : heads) {
    const long H = hv[0], V = hv[1], Vs = (V + 7) / 8 * 8;
    lt_operands o = lt_alloc(BT, H, V, BT);
    lt_fill(o.X, (size_t)BT * H, 1.0f, 1u);
    lt_fill(o.Z, (size_t)BT * Vs, 1e-3f, 2u);
    lt_fill(o.dW, (size_t)V * H, 1e-2f, 3u);
    for (long k : ks) {
      /* dW^T (H x V) = X_c^T (H x k) G_c (k x V), column-major as the library */
      cublasLtMatmulDesc_t desc;
      cublasLtMatrixLayout_t la, lb, ld;
      lt_describe_product(false, true, H, V, k, H, Vs, H, &desc, &la, &lb, &ld);
      const float alpha = 1.0f, beta = k < BT ? 1.0f : 0.0f;
      cublasLtMatmulAlgo_t heur, forced;
      const bool have_forced = algos(h, desc, la, lb, ld, &heur, &forced);
      float t[2] = {-1.0f, -1.0f};
      for (int which = 0; which < 2; which++) {
        if (which == 1 && !have_forced) break;
        const cublasLtMatmulAlgo_t *a = which ? &forced : &heur;
        t[which] = lt_time(0, 2, reps, [&] {
          return cublasLtMatmul(h, desc, &alpha, o.X, la, o.Z, lb, &beta, o.dW, ld, o.dW, ld, a,
                                ws, kWs, 0) == CUBLAS_STATUS_SUCCESS;
        });
      }
      const double flop = 2.0 * (double)H * (double)V * (double)k;
      char c0[32], c1[32];
      snprintf(c0, sizeof c0, "%.3f (%.0f)", t[0], t[0] > 0 ? flop / t[0] / 1e9 : 0.0);
      snprintf(c1, sizeof c1, "%.3f (%.0f)", t[1], t[1] > 0 ? flop / t[1] / 1e9 : 0.0);
      printf("%6ld %6ld %6ld  %-16s %-16s %.3f\n", H, V, k, c0, have_forced ? c1 : "n/a",
             t[0] > 0 && t[1] > 0 ? t[1] / t[0] : 0.0);
      cublasLtMatmulDescDestroy(desc);
      cublasLtMatrixLayoutDestroy(la);
      cublasLtMatrixLayoutDestroy(lb);
      cublasLtMatrixLayoutDestroy(ld);
    }
    lt_free(o);
  }
  CK(cudaFree(ws));
  cublasLtDestroy(h);
  return 0;
}
