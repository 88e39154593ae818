/*
 * lt_chunk_gemms.cu - the fused linear loss's three products per chunk of
 * rows, timed alone for each algorithm cuBLASLt's heuristic offers: is the
 * gap between the chunked step and the three whole products the products'
 * own cost at a chunk's shape (the weight gradient's read-modify-write of
 * all of dW per chunk), and does another algorithm hide it?
 *
 *   dev-lt_chunk_gemms [BT H V]    (default 8192 4096 128256, bf16)
 *
 * For each chunk size: per product, the heuristic's first algorithm and the
 * fastest of up to 8 it returns (ms per chunk, TFLOP/s, its tile and
 * split-K), and the step the chunks add up to against the whole products.
 * The products are the library's (src/cuda/linear.cu, column-major terms):
 *   logits  Z^T (V x n)  = W (V x H)^T-view  X_c^T        m=V n=n k=H, A transposed
 *   dX      dX_c^T (H x n) = W^T-view G^T                  m=H n=n k=V
 *   dW      dW^T (H x V) += X_c^T G                        m=H n=V k=n, B transposed
 */
#include "lt_common.cuh"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static cublasLtHandle_t g_h;
static void *g_ws;
static const size_t kWs = 64u << 20;

struct gemm {
  bool ta, tb;
  long m, n, k, lda, ldb, ldd;
  const void *a, *b;
  void *d;
  float beta;
};

struct timed {
  float first_ms, best_ms;
  int best_i, count;
  char best_desc[96];
};

static timed run(const gemm &g, int reps) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  lt_describe_product(g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, &desc, &la, &lb, &ld);
  cublasLtMatmulHeuristicResult_t r[8];
  const int found = lt_heuristic(g_h, desc, la, lb, ld, kWs, 8, r);
  timed t;
  memset(&t, 0, sizeof t);
  t.count = found;
  t.best_ms = 1e30f;
  const float alpha = 1.0f;
  for (int i = 0; i < found; i++) {
    const float med = lt_time(0, 2, reps, [&] {
      return cublasLtMatmul(g_h, desc, &alpha, g.a, la, g.b, lb, &g.beta, g.d, ld, g.d, ld,
                            &r[i].algo, g_ws, kWs, 0) == CUBLAS_STATUS_SUCCESS;
    });
    if (med < 0.0f) continue;
    if (i == 0) t.first_ms = med;
    if (med < t.best_ms) {
      t.best_ms = med;
      t.best_i = i;
      lt_describe_algo(&r[i].algo, t.best_desc, sizeof t.best_desc);
    }
  }
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(desc);
  return t;
}

int main(int argc, char **argv) {
  long BT = 8192, H = 4096, V = 128256;
  if (argc == 4) {
    BT = atol(argv[1]);
    H = atol(argv[2]);
    V = atol(argv[3]);
  }
  LK(cublasLtCreate(&g_h));
  CK(cudaMalloc(&g_ws, kWs));
  const long Vs = (V + 7) / 8 * 8; /* the chunk's row stride, as the library pads it */
  const lt_operands o = lt_alloc(BT, H, V, BT);
  __nv_bfloat16 *X = o.X, *W = o.W, *Z = o.Z, *dX = o.dX, *dW = o.dW;
  /* small values: no infinities in the products */
  CK(cudaMemset(X, 0x3c, (size_t)BT * H * 2));
  CK(cudaMemset(W, 0x3c, (size_t)V * H * 2));
  CK(cudaMemset(Z, 0x3c, (size_t)BT * Vs * 2));
  CK(cudaMemset(dW, 0, (size_t)V * H * 2));
  printf("lt_chunk_gemms BT=%ld H=%ld V=%ld bf16, fp32 accumulation, workspace %zu MiB\n", BT, H,
         V, kWs >> 20);
  const long chunks[] = {456, 1024, 2048, 4096, 8192};
  double whole_first = 0, whole_best = 0;
  for (int ci = 0; ci < 5; ci++) {
    const long n = chunks[ci] < BT ? chunks[ci] : BT;
    const long count = (BT + n - 1) / n;
    const gemm gs[3] = {
        {true, false, V, n, H, H, H, Vs, W, X, Z, 0.0f},
        {false, false, H, n, V, H, Vs, H, W, Z, dX, 0.0f},
        {false, true, H, V, n, H, Vs, H, X, Z, dW, 1.0f},
    };
    const char *names[3] = {"logits", "dX", "dW"};
    double step_first = 0, step_best = 0;
    printf("\nchunk %ld rows (%ld chunks)\n", n, count);
    for (int k = 0; k < 3; k++) {
      const timed t = run(gs[k], 7);
      const double flop = 2.0 * (double)gs[k].m * gs[k].n * gs[k].k;
      printf("  %-6s first %.4f ms (%.0f TF/s)  best of %d %.4f ms (%.0f TF/s, #%d: %s)\n",
             names[k], t.first_ms, flop / t.first_ms / 1e9, t.count, t.best_ms,
             flop / t.best_ms / 1e9, t.best_i, t.best_desc);
      step_first += t.first_ms * count;
      step_best += t.best_ms * count;
    }
    printf("  step over %ld chunks: %.2f ms (heuristic's first), %.2f ms (best)\n", count,
           step_first, step_best);
    if (n == BT) {
      whole_first = step_first;
      whole_best = step_best;
    }
  }
  printf("\nwhole products (one chunk): %.2f ms first, %.2f ms best\n", whole_first, whole_best);
  return 0;
}
