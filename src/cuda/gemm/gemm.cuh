/*
 * gemm.cuh - xent's own matrix products on Hopper (sm90.cuh), for the fused
 * linear loss's three products where they are faster than cuBLASLt (lt.cuh
 * serves every other GPU, type and shape).
 *
 * One product, in row-major terms: D (m x n, ldd) (+)= A B^T (+ bias), with
 * A m x k and B n x k given in memory either K-major (A[i lda + kk]) or
 * MN-major (A[kk lda + i]), 16-bit values, fp32 accumulation rounded once
 * into D (except the experimental TMA epilogue's add, which rounds twice).
 */
#ifndef XENT_CUDA_GEMM_GEMM_CUH
#define XENT_CUDA_GEMM_GEMM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/device.cuh"
#include "cuda/lt.cuh"
#include "xent.h"

namespace xent {

struct gemm_product {
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  bool a_mn; /* A is M-major: A[kk lda + i] */
  const void *b;
  int64_t ldb;
  bool b_mn; /* B is N-major: B[kk ldb + j] */
  xent_dtype ab_type; /* XENT_BFLOAT16 or XENT_FLOAT16 */
  void *d;
  int64_t ldd;
  xent_dtype d_type; /* ab_type, or XENT_FLOAT32 (M-major A and N-major B only) */
  const void *bias;  /* n values of d_type added to every row, or NULL */
  bool accumulate;   /* D is read and added to */
  int bn;            /* the tile's columns: 128 or 256; 0: the rule (gemm.cu) */
  int group_m;       /* row tiles walked together; 0: the rule */
  bool tma_epilogue; /* D through TMA boxes: stored, or added in L2 in D's type (where
                        D's rows end on a 16-byte boundary; elsewhere through registers) */
  int cluster_m;     /* 2: pairs of blocks along M sharing B by multicast; 0 or 1: none */
  float *stats;      /* or NULL: row i's (max, sum of exp(D - max)) over column tile t of
                        D as stored at stats[2 (i ceil(n / bn) + t)] and + 1 (bn given; a
                        16-bit D, no accumulate) */
  bool pingpong;     /* the consumers take alternate 64-row tiles, one writing while the
                        other multiplies (sm90.cuh, PP) */
  bool load_c;       /* accumulating through the TMA epilogue: D's old tile loaded into
                        shared memory while the products run, the sum stored whole (one
                        rounding; sm90.cuh, LC). The weight gradient's layout, a 16-bit
                        D, single blocks, consumers on halves of a tile */
};

/* The product of `g` (cuBLAS's column-major terms, as lt_matmul takes it)
 * in row-major terms: D^T = op(B)^T op(A)^T, so A is op(B) read as rows and
 * B is op(A). False when it has no such form here (alpha not 1, beta not 0
 * or 1). */
bool gemm_from_lt(const lt_gemm &g, bool tma_epilogue, gemm_product *p);

/* NULL when xent's GEMM can take the product on this device (sm_90a code for
 * a compute capability 9.0 device, the operands' types, layouts, alignment
 * and sizes it is built for), else why not: a static sentence. */
const char *gemm_sm90_refusal(const gemm_product &p, const dev_props &dp);

/* Queues the product on `stream`; XENT_ERROR_UNSUPPORTED (with the refusal)
 * when it cannot take it. */
xent_status gemm_sm90(const gemm_product &p, const dev_props &dp, cudaStream_t stream);

}  // namespace xent

#endif
