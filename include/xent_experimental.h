/*
 * xent_experimental.h - settings for measuring and testing xent's CUDA
 * kernels, outside the stable API of xent.h.
 *
 * Nothing here is needed for correct results, and none of it is promised to
 * stay: the names, the fields and what they select may change with any
 * release. The benchmark and the tests use it to time or check one kernel
 * on a shape the launch table would give another, to launch without the
 * programmatic chaining of kernels, and to take the checked mode's slower
 * verdict path on a GPU that does not need it.
 *
 * Settings are per thread: xent_experimental_set() changes the calls that
 * the calling thread makes afterwards, and no other thread's, so it is as
 * thread-safe as the rest of the library. A forced launch that cannot run a
 * call (a kernel that needs a newer GPU, a row that does not fit its
 * geometry) makes that call fail with XENT_ERROR_UNSUPPORTED, saying why;
 * it never runs another kernel in its place.
 */
#ifndef XENT_EXPERIMENTAL_H
#define XENT_EXPERIMENTAL_H

#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA forward kernels (src/cuda/plan.h describes each). The
 * vocabulary-parallel passes (and the fused linear loss's vocab schedule)
 * take TWO_READ as their block per row and WARP_ROW as their warp per row
 * (plain calls only), whatever the launch's other fields say; SEGMENT as
 * the statistics' block per row with every load issued at once (plain calls
 * whose shard rows fit `threads` x `vecs` vectors; the forward refuses it). */
typedef enum xent_experimental_path {
  XENT_EXPERIMENTAL_TABLE = 0,    /* the launch table chooses (the default)               */
  XENT_EXPERIMENTAL_TWO_READ = 1, /* a row per block, read twice (once without a gradient) */
  XENT_EXPERIMENTAL_STAGED = 2,   /* sm_90+: a producer warp streams rows through a ring   */
  XENT_EXPERIMENTAL_WARP_ROW = 3, /* without a gradient: a row per warp (or per few warps) */
  XENT_EXPERIMENTAL_SEGMENT = 4   /* without a gradient: a block per segment of a row      */
} xent_experimental_path;

/* A forward launch. Fields a path does not use must be 0. */
typedef struct xent_experimental_launch {
  xent_experimental_path path;
  int cluster;      /* staged: blocks that split each row (1, 2, 4 or 8; 0 means 1)      */
  int threads;      /* threads a block; staged: the consumer threads (a producer warp is
                       added); a multiple of 32                                           */
  int vecs;         /* staged: 16-byte vectors a consumer thread takes of each chunk (4 or
                       8); segment: loads a thread issues at once (4 or 8)                */
  int slots;        /* staged: chunks in the ring (2 to 16)                               */
  int reuse;        /* staged: a slice's last chunks that the gradient pass reads from the
                       ring rather than again from memory (0 to slots)                    */
  int hold;         /* staged: of the other chunks, the first ones kept in registers
                       between the passes (0 to 2; plain calls of 4 vectors only)         */
  int warp_split;   /* warp row: warps that share a row (1, 2, 4 or 8; plain calls only)  */
  int l2_hint;      /* two-read with a gradient, staged: the first pass loads evict-last  */
} xent_experimental_launch;

typedef struct xent_experimental {
  xent_experimental_launch forward; /* path XENT_EXPERIMENTAL_TABLE: the launch table     */
  int programmatic;  /* 0: the library's rule; 1: no kernel launched programmatically;
                        2: every kernel, clustered forwards too (sm_90+)                  */
  int verdict_copy;  /* 1: the checked mode fetches the device's verdict with a copy, as
                        on GPUs that cannot map host memory                               */
  int backward_waves; /* the backward's grid in waves of resident blocks: 0 the default,
                        -1 one work item a block                                          */
  int plan_arch;     /* the compute capability (10 x major + minor, 75 to 120) the CUDA plan
                        chooses kernels for, whatever the device is: 80 runs the A100's plan,
                        100 Blackwell's. 0: the environment variable XENT_PLAN_ARCH if set,
                        else the device's (xent_device_info.plan_arch). A plan whose kernels
                        need code this build lacks for the device (the staged kernel or
                        programmatic launches, compute_90 and newer) makes the call fail with
                        XENT_ERROR_UNSUPPORTED, naming the kernel and the device           */
  int products;      /* the CUDA fused linear loss's matrix products: 0 the library's choice
                        (cuBLASLt today), 1 cuBLASLt, 2 xent's own Hopper GEMM wherever it
                        takes the product (xent_experimental_gemm's conditions), cuBLASLt
                        elsewhere. 0: the environment variable XENT_PRODUCTS ("cublaslt" or
                        "xent") if set. xent's products write through TMA and add into a
                        gradient in L2 in its dtype: a 16-bit gradient that a product adds
                        into takes two roundings there (xent.h, "How many roundings").
                        With them, a call that asks for no label smoothing, softcap,
                        token accuracy or predicted tokens takes each chunk's row
                        statistics from the logits' product (its statistics epilogue)
                        and reads the logits once; 3 is 2 without that (the chunk's own
                        statistics pass, for comparisons). 4 and 5 are 2 and 3 with the
                        GEMM's consumers on alternate tiles (xent_experimental_gemm,
                        pingpong); XENT_PRODUCTS "xent_pingpong" is 4. 6 is 2 with dW's
                        product reading a 16-bit gradient's old tile ahead where it runs
                        on single blocks (xent_experimental_gemm, tma_epilogue 2; one
                        rounding a chunk); XENT_PRODUCTS "xent_lc"                       */
} xent_experimental;

#define XENT_EXPERIMENTAL_INIT {{XENT_EXPERIMENTAL_TABLE, 0, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0}

/* Use `settings` for this thread's later calls; NULL restores the defaults.
 * Returns XENT_ERROR_BAD_ENUM or XENT_ERROR_BAD_ARGUMENT (nothing changed)
 * for values outside the ranges above. A success leaves xent_last_error()
 * as it was (the message of the last failed call stays readable). */
XENT_API xent_status xent_experimental_set(const xent_experimental *settings);

/* This thread's settings. */
XENT_API xent_experimental xent_experimental_get(void);

/* The launch of this thread's last CUDA forward, such as "staged cluster=2
 * threads=480+32 slots=7 reuse=7 hold=2 chunk=30KB grid=132 ...", or "none". */
XENT_API const char *xent_experimental_last_launch(void);

/* The launch of this thread's last CUDA backward that ran its kernel. */
XENT_API const char *xent_experimental_last_backward(void);

/* The product this thread queued last (a CUDA fused linear call's last, or
 * xent_experimental_gemm_run's), such as "lt m=4096 n=128256 k=488 Bt
 * measured" ("measured": the weight gradient's product in the configuration
 * src/cuda/lt.cu chose by measurement, not the heuristic's), a description
 * of xent's GEMM's launch (its grid, clusters, tile), or "none". */
XENT_API const char *xent_experimental_last_product(void);

/* How this thread's last fused linear call that passed its checks was cut
 * (xent.h, xent_linear_schedule): "rows chunk=488 chunks=17" or "vocab
 * slab=6416 slabs=20", or "none". */
XENT_API const char *xent_experimental_last_linear(void);

/* One matrix product through xent's own Hopper GEMM or through cuBLASLt, for
 * the tests and the GEMM benchmark (bench/gemm.py): the products the fused
 * linear loss runs, alone. In row-major terms
 *
 *   D (m x n, row stride ldd) (+)= A B^T (+ bias)
 *
 * with A m x k and B n x k, each given K-major (A[i lda + kk]) or, with
 * a_m_major / b_n_major, MN-major (A[kk lda + i]); fp32 accumulation rounded
 * once into D. The fused linear loss's products in these terms, for a chunk
 * X_c of c rows, W (V x H) and G (c x V):
 *   logits  Z = X_c W^T       A = X_c, B = W, both K-major
 *   dX      dX = G W          A = G (K-major), B = W (N-major)
 *   dW      dW (+)= G^T X_c   A = G (M-major), B = X_c (N-major)
 * xent's GEMM (engine XENT_EXPERIMENTAL_GEMM_XENT) runs on compute
 * capability 9.0 with this build's sm_90a code, for bf16 or fp16 operands, D
 * in their type (or fp32 with an M-major A), K-major A with either B or
 * M-major A with N-major B, 16-byte aligned operands and rows; otherwise the
 * call fails with XENT_ERROR_UNSUPPORTED saying why. Queued on `stream` of
 * `device`; nothing waits. */
typedef enum xent_experimental_gemm_engine {
  XENT_EXPERIMENTAL_GEMM_XENT = 0,     /* xent's own (src/cuda/gemm/)        */
  XENT_EXPERIMENTAL_GEMM_CUBLASLT = 1, /* cuBLASLt's heuristic, as lt.cu     */
  /* cuBLASLt configured as the fused linear loss configures it: an
   * accumulating product with an M-major A (dW over a chunk) takes the
   * configuration lt.cu measured for chunks where it applies */
  XENT_EXPERIMENTAL_GEMM_CUBLASLT_LOSS = 2
} xent_experimental_gemm_engine;

typedef struct xent_experimental_gemm {
  xent_experimental_gemm_engine engine;
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  int a_m_major;
  const void *b;
  int64_t ldb;
  int b_n_major;
  xent_dtype dtype;       /* A's and B's: XENT_BFLOAT16 or XENT_FLOAT16            */
  void *d;
  int64_t ldd;
  xent_dtype d_dtype;     /* dtype or XENT_FLOAT32                                  */
  const void *bias;       /* n values of d_dtype added to every row, or NULL        */
  int accumulate;         /* 1: D is read and added to                              */
  int tile_n;             /* xent: the tile's columns, 128 or 256; 0: the rule      */
  int tma_epilogue;       /* xent: 1 writes D through TMA boxes, and when
                             accumulating adds in L2 in D's type (a 16-bit D is
                             then rounded twice: the product's part, the sum);
                             2, accumulating into a 16-bit D in the weight
                             gradient's layout (a_m_major, b_n_major) on single
                             blocks: D's old tile is read into shared memory while
                             the product runs and the sum stored whole (one
                             rounding). Where n values of D are not a multiple of
                             16 bytes, D goes through registers all the same        */
  int cluster_m;          /* xent: 2 runs pairs of blocks on vertically adjacent tiles
                             that share B's loads (TMA multicast; either tile width);
                             0 or 1: none                                           */
  float *stats;           /* xent, or NULL: the statistics epilogue (the fused linear
                             loss's logits). Row i's (max, sum of exp(D[i][j] - max))
                             over the j of column tile t, taken over D as stored, at
                             stats[2 (i ceil(n / tile_n) + t)] and the float after;
                             needs tile_n, a D of the operands' type, no accumulate */
  int pingpong;           /* xent: 1 gives each consumer warpgroup tiles of 64 rows of its
                             own, taken in turns, so that one writes its tile while the
                             other multiplies (with cluster_m 2, over pairs of blocks);
                             0: both share each 128-row tile */
  int device;
  void *stream;           /* a cudaStream_t; NULL: the default stream              */
  void *workspace;        /* cuBLASLt's workspace on the device, or NULL            */
  size_t workspace_bytes;
} xent_experimental_gemm;

/* Queues the product. XENT_ERROR_NULL_POINTER (A, B or D), _BAD_SHAPE (an
 * extent below 1), _BAD_STRIDE (a leading dimension below its row's
 * extent), _BAD_ENUM (engine or a type) or _BAD_ARGUMENT (a flag not 0 or
 * 1, tile_n; stats without tile_n) with nothing queued; XENT_ERROR_UNSUPPORTED where the engine
 * cannot take the product (xent's: the reason), or without a CUDA backend. */
XENT_API xent_status xent_experimental_gemm_run(const xent_experimental_gemm *g);

#ifdef __cplusplus
}
#endif
#endif
