/*
 * lt_algos.cu - every cuBLASLt configuration of the fused linear loss's three
 * products at one chunk's shape, timed: is there a configuration (algorithm,
 * tile, stages, cluster shape, CTA swizzle, custom option) that runs the
 * weight gradient's product at k = rows near the whole product's rate, where
 * the heuristic's first choice runs it at about 2/3 of it (bench/NOTES.md)?
 *
 *   dev-lt_algos [BT H V rows [product]]   (default 8192 4096 128256 488 dw, bf16)
 *
 * product: dw, dx or logits, the one searched (the others: the heuristic's
 * only).
 *
 * Per product: the heuristic's first algorithm, the best of the 64 it
 * returns, and for dW's the best of the exhaustive search (custom options 0 to 7, the SM90 kernels with the heuristic's stage ids; a
 * configuration more than 1.2x the best so far in one run is not run again),
 * each the median of 5 runs on random inputs (the products' power draw depends on the bits), with
 * TFLOP/s and the configuration; then the ten fastest of the search, split-K
 * included (each with the workspace it takes; up to 64 MiB allowed). The
 * whole products (k or n = BT) with the heuristic's first, for the rate the
 * chunked ones are held to. Workspace 4 MiB, as the library's.
 */
#include "lt_common.cuh"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static cublasLtHandle_t g_h;
static void *g_ws;
static const size_t kWs = 4u << 20;   /* the library's cuBLASLt workspace */
static const size_t kWsMax = 64u << 20; /* what the search lets a configuration take */

struct prod {
  const char *name;
  bool ta, tb;
  long m, n, k, lda, ldb, ldd;
  const void *a, *b;
  void *d;
  float beta;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
};

static void setup(prod &p) {
  lt_describe_product(p.ta, p.tb, p.m, p.n, p.k, p.lda, p.ldb, p.ldd, &p.desc, &p.la, &p.lb, &p.ld);
}

/* Median of `reps` timed runs after 1, in ms; < 0 when the algorithm
 * fails. */
static float time_algo(const prod &p, const cublasLtMatmulAlgo_t *algo, int reps) {
  const float alpha = 1.0f;
  return lt_time(0, 1, reps, [&] {
    if (cublasLtMatmul(g_h, p.desc, &alpha, p.a, p.la, p.b, p.lb, &p.beta, p.d, p.ld, p.d, p.ld,
                       algo, g_ws, kWsMax, 0) == CUBLAS_STATUS_SUCCESS)
      return true;
    cudaGetLastError();
    return false;
  });
}

struct found {
  float ms;
  cublasLtMatmulAlgo_t algo;
  size_t ws;
};

static int by_time(const void *x, const void *y) {
  const float a = ((const found *)x)->ms, b = ((const found *)y)->ms;
  return a < b ? -1 : a > b;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Each product's search stops after this long (seconds). */
static const double kSearchS = 70.0;

static void search(prod &p, bool exhaustive) {
  const double t0 = now_s();
  bool stopped = false;
  setup(p);
  const double flop = 2.0 * (double)p.m * p.n * p.k;
  char desc[160];
  cublasLtMatmulHeuristicResult_t hr[64];
  const int nh = lt_heuristic(g_h, p.desc, p.la, p.lb, p.ld, kWs, 64, hr);
  printf("\n%s: m=%ld n=%ld k=%ld%s%s beta %.0f (%.1f GFLOP)\n", p.name, p.m, p.n, p.k,
         p.ta ? " At" : "", p.tb ? " Bt" : "", p.beta, flop / 1e9);
  float first = -1, hbest = 1e30f;
  int hbi = -1;
  for (int i = 0; i < nh; i++) {
    const float t = time_algo(p, &hr[i].algo, 5);
    if (i == 0) first = t;
    if (t > 0 && t < hbest) hbest = t, hbi = i;
  }
  lt_describe_algo(&hr[0].algo, desc, sizeof desc);
  printf("  heuristic first     %8.4f ms %5.0f TF/s  %s\n", first, flop / first / 1e9, desc);
  if (hbi >= 0) {
    lt_describe_algo(&hr[hbi].algo, desc, sizeof desc);
    printf("  best of %2d returned %8.4f ms %5.0f TF/s  #%d %s\n", nh, hbest, flop / hbest / 1e9,
           hbi, desc);
  }
  if (!exhaustive) return;
  /* The exhaustive search. */
  int ids[256], nid = 0;
  LK(cublasLtMatmulAlgoGetIds(g_h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                              CUDA_R_16BF, CUDA_R_16BF, 256, ids, &nid));
  /* the heuristic's own algorithms first, in its order: the time limit cuts the rest */
  int front = 0;
  for (int i = 0; i < nh; i++) {
    int id = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    for (int j = front; j < nid; j++)
      if (ids[j] == id) {
        ids[j] = ids[front];
        ids[front++] = id;
        break;
      }
  }
  static found all[20000];
  int nall = 0, tried = 0;
  float best = 1e30f;
  const uint16_t clusters[] = {CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                               CUBLASLT_CLUSTER_SHAPE_1x2x1, CUBLASLT_CLUSTER_SHAPE_AUTO};
  for (int a = 0; a < nid; a++) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(g_h, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, CUDA_R_16BF, ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
      continue;
    size_t w = 0;
    static uint32_t tiles[2048], stages[512];
    int nt = 0, ns = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, NULL, 0, &w) ==
            CUBLAS_STATUS_SUCCESS && w / 4 <= 2048) {
      nt = (int)(w / 4);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, w, &w);
    }
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, NULL, 0, &w) ==
            CUBLAS_STATUS_SUCCESS && w / 4 <= 512) {
      ns = (int)(w / 4);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, w, &w);
    }
    /* An algorithm with many stage ids (the SM90 kernels') is searched with
     * the stage ids the heuristic chose for it only. */
    if (ns > 8) {
      int keep = 0;
      for (int i = 0; i < nh; i++) {
        int id = 0;
        uint32_t st = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
        cublasLtMatmulAlgoConfigGetAttribute(&hr[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st,
                                             sizeof st, &w);
        bool dup = false;
        for (int j = 0; j < keep; j++) dup = dup || stages[j] == st;
        if (id == ids[a] && !dup) stages[keep++] = st;
      }
      if (keep) ns = keep;
    }
    printf("  algorithm %d: %d tiles, %d stage ids\n", ids[a], nt, ns);
    if (nt == 0) tiles[nt++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
    if (ns == 0) stages[ns++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
    int32_t swz_ok = 0, custom_max = 0, splitk_ok = 0;
    uint32_t red_mask = 0;
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok,
                                      sizeof splitk_ok, &w);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask,
                                      sizeof red_mask, &w);
    /* split-K: 1, or 2, 4, 8 with each reduction scheme the algorithm has */
    struct split {
      int32_t n;
      uint32_t red;
    } splits[16];
    int nsplit = 0;
    splits[nsplit++] = {1, CUBLASLT_REDUCTION_SCHEME_NONE};
    if (splitk_ok)
      for (int32_t k2 = 2; k2 <= 8; k2 *= 2)
        for (uint32_t r = 1; r <= 4; r <<= 1)
          if (red_mask & r) splits[nsplit++] = {k2, r};
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz_ok,
                                      sizeof swz_ok, &w);
    cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max,
                                      sizeof custom_max, &w);
    if (custom_max > 7) custom_max = 7;
    for (int t = 0; t < nt; t++)
      for (int s = 0; s < ns; s++)
        for (int c = 0; c < 4; c++)
          for (uint32_t swz = 0; swz <= (swz_ok ? 1u : 0u); swz++)
            for (uint32_t cu = 0; cu <= (uint32_t)custom_max; cu++)
            for (int sp = 0; sp < nsplit; sp++) {
              cublasLtMatmulAlgo_t x = algo;
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_TILE_ID, &tiles[t], 4);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages[s], 4);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                   &splits[sp].n, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                   &splits[sp].red, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, 4);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &cu, 4);
              if (cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                       &clusters[c], 2) != CUBLAS_STATUS_SUCCESS)
                continue;
              cublasLtMatmulHeuristicResult_t r;
              if (cublasLtMatmulAlgoCheck(g_h, p.desc, p.la, p.lb, p.ld, p.ld, &x, &r) !=
                      CUBLAS_STATUS_SUCCESS || r.workspaceSize > kWsMax)
                continue;
              if (nall >= 20000 || stopped) continue;
              if (now_s() - t0 > kSearchS) {
                stopped = true;
                continue;
              }
              tried++;
              /* one run first: only those near the best so far get five */
              const float quick = time_algo(p, &x, 1);
              if (quick < 0) continue;
              if (nall > 0 && quick > 1.2f * best) {
                all[nall++] = {quick, x, r.workspaceSize};
                continue;
              }
              const float ms = time_algo(p, &x, 5);
              if (ms > 0) {
                all[nall++] = {ms, x, r.workspaceSize};
                if (ms < best) best = ms;
              }
            }
  }
  qsort(all, (size_t)nall, sizeof all[0], by_time);
  printf("  search: %d algorithm ids, %d configurations ran, %d succeeded%s\n", nid, tried, nall,
         stopped ? " (stopped at the time limit)" : "");
  for (int i = 0; i < nall && i < 10; i++) {
    lt_describe_algo(&all[i].algo, desc, sizeof desc);
    printf("  %2d  %8.4f ms %5.0f TF/s  %s  workspace %zu KiB\n", i + 1, all[i].ms,
           flop / all[i].ms / 1e9, desc, all[i].ws >> 10);
  }
}

int main(int argc, char **argv) {
  long BT = 8192, H = 4096, V = 128256, n = 488;
  const char *which = "dw";
  if (argc >= 5) {
    BT = atol(argv[1]);
    H = atol(argv[2]);
    V = atol(argv[3]);
    n = atol(argv[4]);
  }
  if (argc >= 6) which = argv[5];
  LK(cublasLtCreate(&g_h));
  CK(cudaMalloc(&g_ws, kWsMax));
  const long Vs = (V + 7) / 8 * 8;
  const lt_operands o = lt_alloc(BT, H, V, BT);
  __nv_bfloat16 *X = o.X, *W = o.W, *Z = o.Z, *dX = o.dX, *dW = o.dW;
  lt_fill(X, (size_t)BT * H, 1.7f, 1u);
  lt_fill(W, (size_t)V * H, 1.7f / 32.0f, 2u);
  lt_fill(Z, (size_t)BT * Vs, 1.0f, 3u);
  lt_fill(dW, (size_t)V * H, 1.0f, 4u);
  CK(cudaDeviceSynchronize());
  printf("lt_algos BT=%ld H=%ld V=%ld, chunk %ld rows, bf16, fp32 accumulation, workspace 4 MiB "
         "(search: up to 64), searched: %s\n", BT, H, V, n, which);
  prod ps[] = {
      {"dW (chunk)", false, true, H, V, n, H, Vs, H, X, Z, dW, 1.0f, 0, 0, 0, 0},
      {"logits (chunk)", true, false, V, n, H, H, H, Vs, W, X, Z, 0.0f, 0, 0, 0, 0},
      {"dX (chunk)", false, false, H, n, V, H, Vs, H, W, Z, dX, 0.0f, 0, 0, 0, 0},
  };
  const char *keys[3] = {"dw", "logits", "dx"};
  for (int i = 0; i < 3; i++) search(ps[i], strcmp(which, keys[i]) == 0);
  /* The whole products, the heuristic's first, for the rate to be held to. */
  prod whole[] = {
      {"logits (whole)", true, false, V, BT, H, H, H, Vs, W, X, Z, 0.0f, 0, 0, 0, 0},
      {"dX (whole)", false, false, H, BT, V, H, Vs, H, W, Z, dX, 0.0f, 0, 0, 0, 0},
      {"dW (whole)", false, true, H, V, BT, H, Vs, H, X, Z, dW, 0.0f, 0, 0, 0, 0},
  };
  printf("\n");
  for (prod &p : whole) {
    setup(p);
    cublasLtMatmulHeuristicResult_t r;
    if (lt_heuristic(g_h, p.desc, p.la, p.lb, p.ld, kWs, 1, &r) < 1) continue;
    const float t = time_algo(p, &r.algo, 5);
    char desc[160];
    lt_describe_algo(&r.algo, desc, sizeof desc);
    printf("%-15s %8.3f ms %5.0f TF/s  %s\n", p.name, t,
           2.0 * (double)p.m * p.n * p.k / t / 1e9, desc);
  }
  return 0;
}
