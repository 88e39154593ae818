/*
 * lt.cuh - the CUDA backend's matrix products: cuBLASLt, loaded on first
 * use (libcublasLt of the toolkit xent was built with; XENT_CUBLASLT names
 * another file), so that libxent loads on machines without it.
 *
 * One product, in cuBLAS's column-major terms: D (m x n, ldd) = alpha op(A)
 * op(B) + beta D, with op(A) m x k and op(B) k x n, fp32 accumulation, and
 * optionally a bias of m values added to every column (the epilogue). The
 * descriptors and the chosen algorithm are cached per thread and shape.
 */
#ifndef XENT_CUDA_LT_CUH
#define XENT_CUDA_LT_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "xent.h"

namespace xent {

struct lt_gemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  xent_dtype a_type;
  const void *b;
  int64_t ldb;
  xent_dtype b_type;
  void *d;
  int64_t ldd;
  xent_dtype d_type;
  float alpha, beta;
  const void *bias; /* m values of d_type, or NULL */
  /* The weight gradient's product over a chunk: k is the chunk's rows and D
   * is read and written whole. Its configuration is chosen by measurement
   * where that applies (lt.cu), the heuristic's otherwise. */
  bool chunk_k;
};

/* Queues the product on `stream` with `ws_bytes` of cuBLASLt workspace. */
xent_status lt_matmul(const lt_gemm &g, void *ws, size_t ws_bytes, cudaStream_t stream);

/* What the last product ran (for the experimental launch description), and
 * its replacement by another engine's description. */
const char *lt_last(void);
void lt_set_last(const char *what);

}  // namespace xent

#endif
