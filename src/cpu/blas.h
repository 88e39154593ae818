/*
 * blas.h - the CPU backend's matrix product: cblas_sgemm of a CBLAS library
 * loaded on first use (OpenBLAS by default; the environment variable
 * XENT_BLAS names another library file). Loaded rather than linked, so
 * that libxent loads, and its other calls work, on machines without one.
 */
#ifndef XENT_CPU_BLAS_H
#define XENT_CPU_BLAS_H

#include <stdint.h>

#include "xent.h"

/* C (m x n, row-major, ldc) = alpha op(A) op(B) + beta C, with op(A) m x k
 * and op(B) k x n, A and B row-major; trans_a / trans_b: use A^T / B^T. */
typedef struct xent_sgemm {
  int trans_a, trans_b;
  int64_t m, n, k;
  const float *a;
  int64_t lda;
  const float *b;
  int64_t ldb;
  float *c;
  int64_t ldc;
  float alpha, beta;
} xent_sgemm;

/* Loads the library once (thread-safe; XENT_ERROR_UNSUPPORTED naming what
 * was tried when there is none), then takes the library for one call: its
 * thread count set to `threads` for the products that follow (where the
 * library lets it be set), until xent_blas_end(). Calls of other threads
 * wait meanwhile, so that each product's bits depend on its own call's
 * count alone. */
xent_status xent_blas_begin(int threads);
void xent_blas_end(void);
void xent_blas_sgemm(const xent_sgemm *g);

#endif
