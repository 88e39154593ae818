/*
 * lt_overlap.cu - the fused linear loss's chunk schedule with its backward
 * products side by side: does dX's product (compute-bound, k = V) beside
 * dW's (k = rows, which reads and writes all of dW per chunk) gain once each
 * is held to its own share of the SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET)?
 * Without the split each of cuBLASLt's persistent products fills the GPU and
 * the second waits for the first one's blocks (bench/NOTES.md, v27).
 *
 *   dev-lt_overlap [BT H V]    (default 8192 4096 128256, bf16)
 *   dev-lt_overlap configs     dW's product with other cuBLASLt configurations
 *                              in the step of each benchmark shape
 *   dev-lt_overlap dxconfigs   the same for dX's product (split-K among them),
 *                              dW's in the library's configuration
 *   dev-lt_overlap dxheur      dX's product as the heuristic ranks it, within
 *                              4 and 32 MiB, at more models' shapes
 *   dev-lt_overlap power       each chunk product alone (a sync after each) and
 *                              back to back, the whole products and the step,
 *                              each for a few seconds, with the SM clock, the
 *                              board's power and its clock-limit reasons read
 *                              through NVML meanwhile: is the step slower than
 *                              its products alone because of the power cap?
 *
 * One step = for each chunk of rows: the logits product into the scratch
 * chunk, a stand-in for the cross-entropy (one read and one write of the
 * chunk, as the forward kernel's gradient pass costs), then dX_c = G W and
 * dW += G^T X_c, either in turn on one stream or forked onto two streams
 * (dX with a SMs, dW with b SMs; 0 = all) and joined before the next chunk's
 * logits overwrite G. Inputs are random (the products' power draw depends on
 * the bits), the three whole products are timed in the same run, and every
 * schedule is the median of 9 steps after 2. The products are the library's
 * (src/cuda/linear.cu, column-major terms).
 */
#include "common/linear.h"
#include "lt_common.cuh"
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


static cublasLtHandle_t g_h;

struct gemm {
  bool ta, tb;
  long m, n, k, lda, ldb, ldd;
  int sms; /* SM_COUNT_TARGET, 0 = the device's */
};

/* A product made ready once: descriptor, layouts and the heuristic's first
 * algorithm, as the library caches them. */
struct ready {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  float beta;
  bool rejected; /* the configuration asked for did not pass cublasLtMatmulAlgoCheck */
  size_t ws;     /* the workspace it takes */
};

/* A configuration of cuBLASLt's SM90 algorithm (id 66) to put in place of
 * the heuristic's: tile 0, cluster kKeep16, custom kKeep32 and splitk 0
 * keep the heuristic's; red is the split-K reduction scheme. */
static const uint16_t kKeep16 = 0xffff;
static const uint32_t kKeep32 = 0xffffffffu;
struct config {
  uint32_t tile;
  uint16_t cluster;
  uint32_t custom;
  int32_t splitk;
  uint32_t red;
};

/* dW's product as the library runs it on sm_90 since v28 (src/cuda/lt.cu):
 * a 256 x 64 tile over clusters of 1 x 2, custom option 2. */
static const config kLibraryDw = {CUBLASLT_MATMUL_TILE_256x64, CUBLASLT_CLUSTER_SHAPE_1x2x1, 2, 0,
                                  0};

static void config_name(const config *c, char *out, size_t n) {
  if (!c) {
    snprintf(out, n, "heuristic");
    return;
  }
  char t[16] = "-", cl[16] = "-", cu[16] = "-";
  if (c->tile) snprintf(t, sizeof t, "%u", c->tile);
  if (c->cluster != kKeep16) snprintf(cl, sizeof cl, "%u", (unsigned)c->cluster);
  if (c->custom != kKeep32) snprintf(cu, sizeof cu, "%u", c->custom);
  snprintf(out, n, "tile %s cluster %s custom %s%s", t, cl, cu, c->splitk > 1 ? " splitK" : "");
  if (c->splitk > 1) {
    const size_t used = strlen(out);
    snprintf(out + used, n - used, " %d", c->splitk);
  }
}

static ready prepare(const gemm &g, float beta, size_t ws, const config *cfg = NULL,
                     size_t heur_ws = 4u << 20, int pick = 0) {
  ready r;
  r.beta = beta;
  r.rejected = false;
  r.ws = 0;
  lt_describe_product(g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, &r.desc, &r.la, &r.lb, &r.ld);
  if (g.sms > 0) {
    const int32_t s = g.sms;
    LK(cublasLtMatmulDescSetAttribute(r.desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &s, sizeof s));
  }
  cublasLtMatmulHeuristicResult_t res;
  /* the heuristic within heur_ws (the library's 4 MiB unless asked), its
   * result `pick`; a configuration may take up to ws */
  const size_t hws = ws < heur_ws ? ws : heur_ws;
  cublasLtMatmulHeuristicResult_t all[8];
  const int found = lt_heuristic(g_h, r.desc, r.la, r.lb, r.ld, hws, 8, all);
  if (found < 1) {
    fprintf(stderr, "no algorithm for %ld x %ld x %ld\n", g.m, g.n, g.k);
    exit(1);
  }
  if (pick >= found) {
    r.rejected = true;
    pick = 0;
  }
  res = all[pick];
  r.algo = res.algo;
  r.ws = res.workspaceSize;
  if (cfg) {
    int id = 0;
    size_t w = 0;
    cublasLtMatmulAlgo_t x = r.algo;
    cublasLtMatmulAlgoConfigGetAttribute(&x, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    bool ok = id == 66;
    if (ok && cfg->tile)
      ok = cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_TILE_ID, &cfg->tile, 4) ==
           CUBLAS_STATUS_SUCCESS;
    if (ok && cfg->cluster != kKeep16)
      ok = cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID,
                                                &cfg->cluster, 2) == CUBLAS_STATUS_SUCCESS;
    if (ok && cfg->custom != kKeep32)
      ok = cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
                                                &cfg->custom, 4) == CUBLAS_STATUS_SUCCESS;
    if (ok && cfg->splitk > 0)
      ok = cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &cfg->splitk,
                                                4) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                &cfg->red, 4) == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulHeuristicResult_t chk;
    if (ok && cublasLtMatmulAlgoCheck(g_h, r.desc, r.la, r.lb, r.ld, r.ld, &x, &chk) ==
                  CUBLAS_STATUS_SUCCESS &&
        chk.workspaceSize <= ws) {
      r.algo = x;
      r.ws = chk.workspaceSize;
    } else {
      r.rejected = true;
    }
  }
  return r;
}

static void queue(const ready &r, const void *a, const void *b, void *d, void *ws, size_t wsb,
                  cudaStream_t s) {
  const float alpha = 1.0f;
  LK(cublasLtMatmul(g_h, r.desc, &alpha, a, r.la, b, r.lb, &r.beta, d, r.ld, d, r.ld, &r.algo, ws,
                    wsb, s));
}

/* The cross-entropy's stand-in: every element of the chunk read and
 * rewritten once (the forward kernel's gradient pass moves these bytes). */
__global__ void touch_kernel(__nv_bfloat16 *z, long rows, long cols, long ld) {
  const long per = cols / 8; /* 8 bf16 per 16 bytes; cols is a multiple of 8 */
  const long n = rows * per;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    const long r = i / per, c = (i % per) * 8;
    uint4 *q = (uint4 *)(z + r * ld + c);
    uint4 v = *q;
    v.x ^= 0x80008000u; /* a sign flip: new bits, same magnitudes */
    v.y ^= 0x80008000u;
    v.z ^= 0x80008000u;
    v.w ^= 0x80008000u;
    *q = v;
  }
}

struct bufs : lt_operands {
  void *ws0, *ws1;
  size_t wsb;
  cudaStream_t s0, s1, s2;
  cudaEvent_t g_ready, x_done, w_done;
};

/* One schedule: chunk rows, fork or not, SM targets for dX and dW. */
static float step_ms(const bufs &B, long BT, long H, long V, long Vs, long chunk, bool fork, int sx,
                     int sw) {
  const long count = (BT + chunk - 1) / chunk;
  const long last = BT - (count - 1) * chunk;
  ready lg[2], dx[2], dw[2], dw0[2];
  const long ns[2] = {chunk, last};
  const size_t wsb = fork ? B.wsb / 2 : B.wsb;
  for (int i = 0; i < 2; i++) {
    const long n = ns[i];
    lg[i] = prepare({true, false, V, n, H, H, H, Vs, 0}, 0.0f, B.wsb);
    dx[i] = prepare({false, false, H, n, V, H, Vs, H, fork ? sx : 0}, 0.0f, wsb);
    dw[i] = prepare({false, true, H, V, n, H, Vs, H, fork ? sw : 0}, 1.0f, wsb);
    dw0[i] = prepare({false, true, H, V, n, H, Vs, H, fork ? sw : 0}, 0.0f, wsb);
  }
  return lt_time(B.s0, 2, 9, [&] {
    for (long c = 0; c < count; c++) {
      const int i = c == count - 1 ? 1 : 0;
      const long n = ns[i];
      const __nv_bfloat16 *xc = B.X + c * chunk * H;
      queue(lg[i], B.W, xc, B.Z, B.ws0, B.wsb, B.s0);
      touch_kernel<<<132 * 8, 256, 0, B.s0>>>(B.Z, n, Vs, Vs);
      CK(cudaGetLastError());
      if (!fork) {
        queue(dx[i], B.W, B.Z, B.dX + c * chunk * H, B.ws0, wsb, B.s0);
        queue(c ? dw[i] : dw0[i], xc, B.Z, B.dW, B.ws0, wsb, B.s0);
        continue;
      }
      CK(cudaEventRecord(B.g_ready, B.s0));
      CK(cudaStreamWaitEvent(B.s1, B.g_ready, 0));
      CK(cudaStreamWaitEvent(B.s2, B.g_ready, 0));
      queue(dx[i], B.W, B.Z, B.dX + c * chunk * H, B.ws0, wsb, B.s1);
      queue(c ? dw[i] : dw0[i], xc, B.Z, B.dW, B.ws1, wsb, B.s2);
      CK(cudaEventRecord(B.x_done, B.s1));
      CK(cudaEventRecord(B.w_done, B.s2));
      CK(cudaStreamWaitEvent(B.s0, B.x_done, 0));
      CK(cudaStreamWaitEvent(B.s0, B.w_done, 0));
    }
    return true;
  });
}

/* The in-turn step at 488 rows with an event between every kernel: where the
 * sustained step's time goes, product by product (ms over the step, median
 * step of 9). */
static float breakdown(const bufs &B, long BT, long H, long V, long Vs, long chunk,
                       const config *cfg = NULL, const config *xcfg = NULL,
                       size_t xws = 4u << 20, int xpick = -1, size_t xhws = 4u << 20) {
  const long count = (BT + chunk - 1) / chunk;
  const long last = BT - (count - 1) * chunk;
  const long ns[2] = {chunk, last};
  ready lg[2], dx[2], dw[2], dw0[2];
  for (int i = 0; i < 2; i++) {
    lg[i] = prepare({true, false, V, ns[i], H, H, H, Vs, 0}, 0.0f, B.wsb);
    dx[i] = prepare({false, false, H, ns[i], V, H, Vs, H, 0}, 0.0f, xws, xcfg, xhws,
                    xpick > 0 ? xpick : 0);
    dw[i] = prepare({false, true, H, V, ns[i], H, Vs, H, 0}, 1.0f, B.wsb, cfg);
    dw0[i] = prepare({false, true, H, V, ns[i], H, Vs, H, 0}, 0.0f, B.wsb, cfg);
  }
  char who[64], xwho[64];
  config_name(cfg, who, sizeof who);
  config_name(xcfg, xwho, sizeof xwho);
  if (xpick >= 0) snprintf(xwho, sizeof xwho, "heuristic %d of %zu MiB", xpick, xhws >> 20);
  if (dw[0].rejected || dw[1].rejected || dw0[0].rejected || dw0[1].rejected || dx[0].rejected ||
      dx[1].rejected) {
    printf("  dW %s, dX %s: rejected by cuBLASLt\n", who, xwho);
    return -1.0f;
  }
  static cudaEvent_t ev[128][5];
  for (long c = 0; c < count; c++)
    for (int j = 0; j < 5; j++) CK(cudaEventCreate(&ev[c][j]));
  float sums[9][4], total[9];
  for (int rep = 0; rep < 11; rep++) {
    for (long c = 0; c < count; c++) {
      const int i = c == count - 1 ? 1 : 0;
      const __nv_bfloat16 *xc = B.X + c * chunk * H;
      CK(cudaEventRecord(ev[c][0], B.s0));
      queue(lg[i], B.W, xc, B.Z, B.ws0, B.wsb, B.s0);
      CK(cudaEventRecord(ev[c][1], B.s0));
      touch_kernel<<<132 * 8, 256, 0, B.s0>>>(B.Z, ns[i], Vs, Vs);
      CK(cudaEventRecord(ev[c][2], B.s0));
      queue(dx[i], B.W, B.Z, B.dX + c * chunk * H, B.ws0, xws, B.s0);
      CK(cudaEventRecord(ev[c][3], B.s0));
      queue(c ? dw[i] : dw0[i], xc, B.Z, B.dW, B.ws0, B.wsb, B.s0);
      CK(cudaEventRecord(ev[c][4], B.s0));
    }
    CK(cudaEventSynchronize(ev[count - 1][4]));
    if (rep < 2) continue;
    float *s = sums[rep - 2];
    s[0] = s[1] = s[2] = s[3] = 0;
    for (long c = 0; c < count; c++)
      for (int j = 0; j < 4; j++) {
        float ms;
        CK(cudaEventElapsedTime(&ms, ev[c][j], ev[c][j + 1]));
        s[j] += ms;
      }
    CK(cudaEventElapsedTime(&total[rep - 2], ev[0][0], ev[count - 1][4]));
  }
  int order[9];
  for (int r = 0; r < 9; r++) order[r] = r;
  for (int a = 0; a < 9; a++)
    for (int b = a + 1; b < 9; b++)
      if (total[order[b]] < total[order[a]]) {
        int t = order[a];
        order[a] = order[b];
        order[b] = t;
      }
  const int m = order[4];
  const double f = 2.0 * (double)BT * H * V / 1e9;
  if (xcfg || xpick >= 0) {
    char algo[160];
    lt_describe_algo(&dx[0].algo, algo, sizeof algo);
    printf("  chunk %4ld, dX %-36s (workspace %5zu KiB) step %7.3f ms = logits %6.3f (%3.0f "
           "TF/s) + stand-in %5.3f + dX %6.3f (%3.0f) + dW %6.3f (%3.0f)\n      dX: %s\n", chunk,
           xwho, dx[0].ws >> 10, total[m], sums[m][0], f / sums[m][0], sums[m][1], sums[m][2],
           f / sums[m][2], sums[m][3], f / sums[m][3], algo);
  }
  else
    printf("  chunk %4ld, dW %-28s step %7.3f ms = logits %6.3f (%3.0f TF/s) + stand-in %5.3f + "
           "dX %6.3f (%3.0f) + dW %6.3f (%3.0f)\n", chunk, who, total[m], sums[m][0],
           f / sums[m][0], sums[m][1], sums[m][2], f / sums[m][2], sums[m][3], f / sums[m][3]);
  for (long c = 0; c < count; c++)
    for (int j = 0; j < 5; j++) CK(cudaEventDestroy(ev[c][j]));
  return total[m];
}

/* The three whole products, as the benchmark's floor runs them, over logits
 * Z of all BT rows (random, allocated here). */
struct whole {
  ready lg, dx, dw;
  __nv_bfloat16 *Z;
};

static whole whole_prepare(const bufs &B, long BT, long H, long V) {
  whole w;
  w.lg = prepare({true, false, V, BT, H, H, H, V, 0}, 0.0f, B.wsb);
  w.dx = prepare({false, false, H, BT, V, H, V, H, 0}, 0.0f, B.wsb);
  w.dw = prepare({false, true, H, V, BT, H, V, H, 0}, 0.0f, B.wsb);
  CK(cudaMalloc((void **)&w.Z, (size_t)BT * V * 2));
  lt_fill(w.Z, (size_t)BT * V, 1.0f, 99u);
  return w;
}

static void whole_queue(const whole &w, const bufs &B, cudaStream_t s) {
  queue(w.lg, B.W, B.X, w.Z, B.ws0, B.wsb, s);
  queue(w.dx, B.W, w.Z, B.dX, B.ws0, B.wsb, s);
  queue(w.dw, B.X, w.Z, B.dW, B.ws0, B.wsb, s);
}

static float whole_ms(const bufs &B, long BT, long H, long V) {
  const whole w = whole_prepare(B, BT, H, V);
  const float ms = lt_time(B.s0, 2, 9, [&] {
    whole_queue(w, B, B.s0);
    return true;
  });
  CK(cudaFree(w.Z));
  return ms;
}

static void alloc(bufs &B, long BT, long H, long V, long zrows) {
  static_cast<lt_operands &>(B) = lt_alloc(BT, H, V, zrows);
  lt_fill(B.X, (size_t)BT * H, 1.7f, 1u);
  lt_fill(B.W, (size_t)V * H, 1.7f / 32.0f, 2u);
  CK(cudaDeviceSynchronize());
}

static void release(bufs &B) { lt_free(B); }

/* The schedules at one shape: in turn, forked, SM splits, chunk sizes. */
static void schedules(bufs &B, long BT, long H, long V) {
  const long Vs = (V + 7) / 8 * 8;
  alloc(B, BT, H, V, 1024);
  const float whole = whole_ms(B, BT, H, V);
  printf("whole products          %8.3f ms\n", whole);
  breakdown(B, BT, H, V, Vs, 488);
  breakdown(B, BT, H, V, Vs, 1024);
  struct sched {
    long chunk;
    bool fork;
    int sx, sw;
  };
  const sched list[] = {
      {488, false, 0, 0}, {488, true, 0, 0}, {488, true, 66, 66}, {488, true, 44, 88},
      {512, false, 0, 0}, {1024, false, 0, 0}, {488, false, 0, 0},
  };
  for (const sched &s : list) {
    const float t = step_ms(B, BT, H, V, Vs, s.chunk, s.fork, s.sx, s.sw);
    char how[48];
    if (s.fork)
      snprintf(how, sizeof how, "forked dX %d / dW %d SMs", s.sx, s.sw);
    else
      snprintf(how, sizeof how, "in turn");
    printf("chunk %4ld %-28s %8.3f ms  %.3fx whole\n", s.chunk, how, t, t / whole);
  }
  printf("whole products again    %8.3f ms\n", whole_ms(B, BT, H, V));
  release(B);
}

/* The benchmark shapes at the library's default chunk. */
struct shape {
  long BT, H, V, chunk;
};
static const shape kShapes[] = {
    {8192, 4096, 128256, 488}, {8192, 2304, 256000, 488}, {4096, 4096, 128256, 232},
    {8192, 2048, 128256, 488}, {2048, 4096, 128256, 112}, {32768, 4096, 128256, 1928},
};

/* At each benchmark shape: the step as a base (dW in `dw`, NULL for the
 * heuristic's; dX in the heuristic's), then with each of `n` configurations
 * in place of dW's (for_dx false) or of dX's (true: up to 64 MiB of
 * workspace, where the library gives 4), then the base again for the
 * drift over the shape's runs. */
static void sweep(bufs &B, const config *dw, const config *cfgs, int n, bool for_dx) {
  for (const shape &sh : kShapes) {
    const long Vs = (sh.V + 7) / 8 * 8;
    alloc(B, sh.BT, sh.H, sh.V, sh.chunk);
    printf("BT=%ld H=%ld V=%ld, whole products %.3f ms\n", sh.BT, sh.H, sh.V,
           whole_ms(B, sh.BT, sh.H, sh.V));
    const float base = breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, dw);
    for (int i = 0; i < n; i++) {
      const float t = for_dx ? breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, dw, &cfgs[i], 64u << 20)
                             : breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, &cfgs[i]);
      if (t > 0) printf("    %.3fx the base step\n", t / base);
    }
    breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, dw);
    release(B);
  }
}

/* dW's product with the heuristic's choice against the configurations the
 * exhaustive search (dev-lt_algos) ranked first at 488 rows. */
static void configs(bufs &B) {
  const config cfgs[] = {
      {CUBLASLT_MATMUL_TILE_256x64, CUBLASLT_CLUSTER_SHAPE_1x2x1, 2, 0, 0},
      {CUBLASLT_MATMUL_TILE_256x64, CUBLASLT_CLUSTER_SHAPE_1x2x1, 0, 0, 0},
      {CUBLASLT_MATMUL_TILE_192x112, CUBLASLT_CLUSTER_SHAPE_2x1x1, 3, 0, 0},
      {CUBLASLT_MATMUL_TILE_320x64, CUBLASLT_CLUSTER_SHAPE_1x2x1, 2, 0, 0},
      {CUBLASLT_MATMUL_TILE_128x128, CUBLASLT_CLUSTER_SHAPE_2x1x1, 0, 0, 0},
  };
  sweep(B, NULL, cfgs, (int)(sizeof cfgs / sizeof cfgs[0]), false);
}

/* dX's product in other configurations (split-K among them), dW's in the
 * library's since v28; each with the workspace it takes. */
static void dxconfigs(bufs &B) {
  const config &dw = kLibraryDw;
  const uint32_t kRed = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const config cfgs[] = {
      {0, CUBLASLT_CLUSTER_SHAPE_4x1x1, kKeep32, 0, 0},
      {0, kKeep16, kKeep32, 2, kRed},
      {0, kKeep16, kKeep32, 4, kRed},
      {CUBLASLT_MATMUL_TILE_256x128, CUBLASLT_CLUSTER_SHAPE_1x2x1, 6, 4, kRed},
      {CUBLASLT_MATMUL_TILE_144x256, CUBLASLT_CLUSTER_SHAPE_1x1x1, 4, 4, kRed},
      {CUBLASLT_MATMUL_TILE_128x256, CUBLASLT_CLUSTER_SHAPE_1x1x1, 4, 2, kRed},
      {CUBLASLT_MATMUL_TILE_64x168, CUBLASLT_CLUSTER_SHAPE_4x1x1, 1, 0, 0},
      {CUBLASLT_MATMUL_TILE_128x80, CUBLASLT_CLUSTER_SHAPE_4x1x1, 1, 0, 0},
  };
  sweep(B, &dw, cfgs, (int)(sizeof cfgs / sizeof cfgs[0]), true);
}

/* dX's product as cuBLASLt's heuristic ranks it: each of its first 8 results
 * within the library's 4 MiB and within 32 MiB, and the two split-K
 * configurations of dxconfigs, in the step of the benchmark shapes and of
 * other models' heads, each at the chunk the library's default budget gives
 * with 4 MiB for cuBLASLt (the chunk held fixed, so a larger workspace is
 * timed without the rows it would take from the chunk). */
static void dxheur(bufs &B) {
  const config &dw = kLibraryDw;
  const uint32_t kRed = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const config split[] = {
      {CUBLASLT_MATMUL_TILE_256x128, CUBLASLT_CLUSTER_SHAPE_1x2x1, 6, 4, kRed},
      {CUBLASLT_MATMUL_TILE_144x256, CUBLASLT_CLUSTER_SHAPE_1x1x1, 4, 4, kRed},
  };
  const shape more[] = {
      {8192, 4096, 128256, 0}, {8192, 2304, 256000, 0}, {8192, 2048, 128256, 0},
      {4096, 4096, 128256, 0}, {8192, 3072, 128256, 0}, {8192, 5120, 152064, 0},
      {8192, 8192, 128256, 0}, {16384, 2304, 256000, 0}, {4096, 2304, 256000, 0},
      {16384, 4096, 128256, 0},
  };
  for (const shape &s0 : more) {
    shape sh = s0;
    /* the library's default chunk: 1/16 of the logits less cuBLASLt's 4 MiB
     * and the cross-entropy's workspace, in equal chunks (src/common/linear.h) */
    xent_linear_facts f;
    memset(&f, 0, sizeof f);
    f.rows = sh.BT, f.vocab = sh.V, f.hidden = sh.H, f.elem_bytes = 2;
    f.weight_grad = f.hidden_grad = 2;
    xent_linear_options lo;
    memset(&lo, 0, sizeof lo);
    lo.schedule = XENT_SCHEDULE_ROWS;
    xent_linear_plan p;
    if (xent_linear_make_plan(&f, &lo, &p) != 0) exit(1);
    sh.chunk = p.chunk;
    const long Vs = (sh.V + 7) / 8 * 8;
    alloc(B, sh.BT, sh.H, sh.V, sh.chunk);
    printf("BT=%ld H=%ld V=%ld, chunk %ld, whole products %.3f ms\n", sh.BT, sh.H, sh.V,
           sh.chunk, whole_ms(B, sh.BT, sh.H, sh.V));
    const float base = breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, &dw, NULL, 4u << 20, 0);
    for (int mib = 4; mib <= 32; mib *= 8)
      for (int k = mib == 4 ? 1 : 0; k < 8; k++) {
        const float t = breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, &dw, NULL, 64u << 20, k,
                                  (size_t)mib << 20);
        if (t > 0) printf("    %.3fx the base step\n", t / base);
      }
    for (const config &c : split) {
      const float t = breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, &dw, &c, 64u << 20);
      if (t > 0) printf("    %.3fx the base step\n", t / base);
    }
    breakdown(B, sh.BT, sh.H, sh.V, Vs, sh.chunk, &dw, NULL, 4u << 20, 0);
    release(B);
  }
}

/* ---- power: the card's state while each kind of work runs ---------------
 * NVML is the driver's library (libnvidia-ml.so.1); the toolkit ships no
 * header for it here, so the few calls are declared by hand (nvml.h's
 * signatures: the device handle is a pointer, the rest unsigned). */
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(unsigned, void **);
typedef int (*nvml_clock_fn)(void *, int, unsigned *);
typedef int (*nvml_power_fn)(void *, unsigned *);
typedef int (*nvml_reasons_fn)(void *, unsigned long long *);
typedef int (*nvml_temp_fn)(void *, int, unsigned *);

struct probe {
  void *dev;
  nvml_clock_fn clock;
  nvml_power_fn power;
  nvml_reasons_fn reasons;
  nvml_temp_fn temp;
  volatile int run, measure; /* the sampler's switches */
  /* sums over the samples taken while measure is on */
  double mhz, watts, celsius;
  long n, capped, slowed;
  unsigned long long seen;
  pthread_mutex_t mu;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* One sample every 10 ms. Reasons (nvml.h): 0x1 idle, 0x4 the software power
 * cap, 0x8 | 0x40 | 0x80 hardware slowdowns, 0x20 software thermal. */
static void *sampler(void *arg) {
  probe *p = (probe *)arg;
  while (p->run) {
    unsigned mhz = 0, mw = 0, c = 0;
    unsigned long long r = 0;
    p->clock(p->dev, 1 /* NVML_CLOCK_SM */, &mhz);
    p->power(p->dev, &mw);
    p->reasons(p->dev, &r);
    p->temp(p->dev, 0 /* NVML_TEMPERATURE_GPU */, &c);
    pthread_mutex_lock(&p->mu);
    if (p->measure) {
      p->mhz += mhz, p->watts += mw / 1000.0, p->celsius += c;
      p->n++;
      p->capped += (r & 0x4) != 0;
      p->slowed += (r & 0xe8) != 0;
      p->seen |= r;
    }
    pthread_mutex_unlock(&p->mu);
    usleep(10000);
  }
  return NULL;
}

static bool probe_open(probe &p) {
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (!lib) return false;
  nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
  nvml_handle_fn handle = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
  p.clock = (nvml_clock_fn)dlsym(lib, "nvmlDeviceGetClockInfo");
  p.power = (nvml_power_fn)dlsym(lib, "nvmlDeviceGetPowerUsage");
  p.reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!p.reasons) p.reasons = (nvml_reasons_fn)dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
  p.temp = (nvml_temp_fn)dlsym(lib, "nvmlDeviceGetTemperature");
  if (!init || !handle || !p.clock || !p.power || !p.reasons || !p.temp) return false;
  if (init() != 0 || handle(0, &p.dev) != 0) return false;
  unsigned mw = 0;
  nvml_power_fn limit = (nvml_power_fn)dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
  if (limit && limit(p.dev, &mw) == 0) printf("power limit %.0f W\n", mw / 1000.0);
  return true;
}

/* Runs queue_once() for about `seconds` (a sync after each call when
 * sync_each, else in batches of 16 calls queued back to back), the sampler
 * measuring from 0.5 s in (the board's power reading lags), and prints the
 * median call's time and rate beside the card's mean state. */
template <typename F>
static void phase(probe &p, const char *name, double seconds, double gflop, bool sync_each,
                  F queue_once) {
  static float ms[100000];
  int n = 0;
  cudaEvent_t ev[17];
  for (int i = 0; i < 17; i++) CK(cudaEventCreate(&ev[i]));
  for (int w = 0; w < 2; w++) queue_once();
  CK(cudaDeviceSynchronize());
  pthread_mutex_lock(&p.mu);
  p.mhz = p.watts = p.celsius = 0;
  p.n = p.capped = p.slowed = 0;
  p.seen = 0;
  pthread_mutex_unlock(&p.mu);
  const double t0 = now_s();
  bool on = false;
  while (now_s() - t0 < seconds && n < 100000 - 16) {
    if (!on && now_s() - t0 > 0.5) on = true, p.measure = 1;
    const int batch = sync_each ? 1 : 16;
    for (int i = 0; i < batch; i++) {
      CK(cudaEventRecord(ev[i], 0));
      if (gflop > 0) queue_once();
    }
    CK(cudaEventRecord(ev[batch], 0));
    CK(cudaEventSynchronize(ev[batch]));
    for (int i = 0; i < batch; i++) CK(cudaEventElapsedTime(&ms[n++], ev[i], ev[i + 1]));
    if (gflop <= 0) usleep(10000);
  }
  p.measure = 0;
  for (int i = 0; i < 17; i++) CK(cudaEventDestroy(ev[i]));
  const float med = lt_median(ms, n);
  pthread_mutex_lock(&p.mu);
  const double k = p.n ? 1.0 / p.n : 0;
  if (gflop > 0)
    printf("%-34s %6d calls  median %8.4f ms  %4.0f TF/s  | SM %4.0f MHz  %3.0f W  %2.0f C  "
           "power cap %3.0f %%  slowdown %3.0f %%  reasons 0x%llx\n",
           name, n, med, gflop / med, p.mhz * k, p.watts * k, p.celsius * k, 100.0 * p.capped * k,
           100.0 * p.slowed * k, p.seen);
  else
    printf("%-34s %6s                                   | SM %4.0f MHz  %3.0f W  %2.0f C  "
           "reasons 0x%llx\n", name, "", p.mhz * k, p.watts * k, p.celsius * k, p.seen);
  pthread_mutex_unlock(&p.mu);
  fflush(stdout);
}

/* The card's state through the first shape's work, kind by kind: the chunk
 * products alone (a sync after each, as lt_algos times them) and back to
 * back (as the step runs them), the whole products, the step; then the same
 * on constant inputs, whose bits draw less power (lt_chunk_gemms's inputs). */
static void power(bufs &B) {
  probe p;
  memset(&p, 0, sizeof p);
  pthread_mutex_init(&p.mu, NULL);
  if (!probe_open(p)) {
    const char *why = dlerror();
    printf("NVML not available%s%s\n", why ? ": " : "", why ? why : "");
    return;
  }
  p.run = 1;
  pthread_t th;
  pthread_create(&th, NULL, sampler, &p);
  const long BT = 8192, H = 4096, V = 128256, chunk = 488;
  const long Vs = (V + 7) / 8 * 8, count = (BT + chunk - 1) / chunk;
  alloc(B, BT, H, V, chunk);
  lt_fill(B.Z, (size_t)chunk * Vs, 1.0f, 3u);
  lt_fill(B.dW, (size_t)V * H, 1.0f, 4u);
  const whole wh = whole_prepare(B, BT, H, V);
  CK(cudaDeviceSynchronize());
  const ready lg = prepare({true, false, V, chunk, H, H, H, Vs, 0}, 0.0f, B.wsb);
  const ready dx = prepare({false, false, H, chunk, V, H, Vs, H, 0}, 0.0f, B.wsb);
  const ready dw = prepare({false, true, H, V, chunk, H, Vs, H, 0}, 1.0f, B.wsb, &kLibraryDw);
  const double g1 = 2.0 * chunk * H * V / 1e9, g3 = 6.0 * BT * H * V / 1e9;
  long c = 0; /* the chunk of X the next product takes, round robin */
  auto logits = [&] {
    queue(lg, B.W, B.X + (c++ % (count - 1)) * chunk * H, B.Z, B.ws0, B.wsb, 0);
    return true;
  };
  auto dxp = [&] {
    queue(dx, B.W, B.Z, B.dX + (c++ % (count - 1)) * chunk * H, B.ws0, B.wsb, 0);
    return true;
  };
  auto dwp = [&] {
    queue(dw, B.X + (c++ % (count - 1)) * chunk * H, B.Z, B.dW, B.ws0, B.wsb, 0);
    return true;
  };
  auto wholes = [&] {
    whole_queue(wh, B, 0);
    return true;
  };
  auto step = [&] { /* 16 full chunks: the step's products and stand-in, in turn */
    for (long k = 0; k < count - 1; k++) {
      const __nv_bfloat16 *xc = B.X + k * chunk * H;
      queue(lg, B.W, xc, B.Z, B.ws0, B.wsb, 0);
      touch_kernel<<<132 * 8, 256, 0, 0>>>(B.Z, chunk, Vs, Vs);
      queue(dx, B.W, B.Z, B.dX + k * chunk * H, B.ws0, B.wsb, 0);
      queue(dw, xc, B.Z, B.dW, B.ws0, B.wsb, 0);
    }
    return true;
  };
  const double sec = 4.0;
  printf("power BT=%ld H=%ld V=%ld bf16, chunk %ld; each line ~%.0f s, the card read every 10 "
         "ms from 0.5 s in\n", BT, H, V, chunk, sec);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) { /* constant bits, as lt_chunk_gemms's memset inputs */
      CK(cudaMemset(B.X, 0x3c, (size_t)BT * H * 2));
      CK(cudaMemset(B.W, 0x3c, (size_t)V * H * 2));
      CK(cudaMemset(B.Z, 0x3c, (size_t)chunk * Vs * 2));
      CK(cudaMemset(wh.Z, 0x3c, (size_t)BT * V * 2));
      CK(cudaMemset(B.dW, 0, (size_t)V * H * 2));
      CK(cudaDeviceSynchronize());
      printf("-- constant inputs (bytes 0x3c)\n");
    }
    phase(p, "idle", 2.0, 0, true, [] { return true; });
    phase(p, "logits chunk, a sync after each", sec, g1, true, logits);
    phase(p, "logits chunk, back to back", sec, g1, false, logits);
    phase(p, "dX chunk, a sync after each", sec, g1, true, dxp);
    phase(p, "dX chunk, back to back", sec, g1, false, dxp);
    phase(p, "dW chunk, a sync after each", sec, g1, true, dwp);
    phase(p, "dW chunk, back to back", sec, g1, false, dwp);
    phase(p, "whole products (3)", sec, g3, false, wholes);
    phase(p, "step, 16 chunks in turn (3 products)", sec, g3 * (count - 1) * chunk / BT, false,
          step);
    phase(p, "logits chunk, a sync after each", sec, g1, true, logits);
  }
  p.run = 0;
  pthread_join(th, NULL);
  CK(cudaFree(wh.Z));
  release(B);
}

int main(int argc, char **argv) {
  const bool dx_mode = argc > 1 && strcmp(argv[1], "dxconfigs") == 0;
  const bool heur_mode = argc > 1 && strcmp(argv[1], "dxheur") == 0;
  const bool power_mode = argc > 1 && strcmp(argv[1], "power") == 0;
  const bool cfg_mode = dx_mode || heur_mode || (argc > 1 && strcmp(argv[1], "configs") == 0);
  long BT = 8192, H = 4096, V = 128256;
  if (!cfg_mode && !power_mode && argc == 4) {
    BT = atol(argv[1]);
    H = atol(argv[2]);
    V = atol(argv[3]);
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  LK(cublasLtCreate(&g_h));
  bufs B;
  B.wsb = 4u << 20; /* the library's cuBLASLt workspace */
  CK(cudaMalloc(&B.ws0, 64u << 20)); /* dxconfigs lets dX's product take up to 64 MiB */
  CK(cudaMalloc(&B.ws1, B.wsb));
  CK(cudaStreamCreateWithFlags(&B.s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&B.s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&B.s2, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&B.g_ready, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&B.x_done, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&B.w_done, cudaEventDisableTiming));
  if (power_mode) {
    power(B);
    return 0;
  }
  if (cfg_mode) {
    printf("lt_overlap %s: bf16, %d SMs, cuBLASLt workspace 4 MiB, steps in turn\n",
           heur_mode ? "dxheur" : dx_mode ? "dxconfigs" : "configs", sms);
    if (heur_mode)
      dxheur(B);
    else if (dx_mode)
      dxconfigs(B);
    else
      configs(B);
    return 0;
  }
  printf("lt_overlap BT=%ld H=%ld V=%ld bf16, %d SMs, cuBLASLt workspace 4 MiB (halves when "
         "forked)\n", BT, H, V, sms);
  schedules(B, BT, H, V);
  return 0;
}
