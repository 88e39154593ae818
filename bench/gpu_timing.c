/*
 * gpu_timing.c - timing on the CUDA backend: CUDA events around each call on
 * a private stream, with XENT_TARGETS_UNCHECKED (graph-safe: no host
 * synchronisation inside the region; --checked: the default checked mode)
 * and an explicit workspace. Before every iteration, untimed, the logits
 * are refreshed from a pristine copy and 256 MiB of scratch are written so
 * that L2 holds none of them. The copy baseline: cudaMemcpyAsync of a 2 GiB
 * buffer, bytes read + written over the median time.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "xent-bench: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), \
              __FILE__, __LINE__);                                                         \
      return -1;                                                                           \
    }                                                                                      \
  } while (0)

int gpu_init(gpu_ctx *g, int device, int n_events) {
  memset(g, 0, sizeof *g);
  g->device = device;
  CUDA_OK(cudaSetDevice(device));
  CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&g->flush, FLUSH_BYTES));
  g->ev0 = calloc((size_t)n_events, sizeof(cudaEvent_t));
  g->ev1 = calloc((size_t)n_events, sizeof(cudaEvent_t));
  if (!g->ev0 || !g->ev1) return -1;
  for (int i = 0; i < n_events; i++) {
    CUDA_OK(cudaEventCreate(&g->ev0[i]));
    CUDA_OK(cudaEventCreate(&g->ev1[i]));
    g->n_events = i + 1;
  }
  return 0;
}

void gpu_shutdown(gpu_ctx *g) {
  for (int i = 0; i < g->n_events; i++) {
    cudaEventDestroy(g->ev0[i]);
    cudaEventDestroy(g->ev1[i]);
  }
  free(g->ev0);
  free(g->ev1);
  if (g->flush) cudaFree(g->flush);
  if (g->stream) cudaStreamDestroy(g->stream);
}

void gpu_release(gpu_ctx *g) {
  cudaStreamSynchronize(g->stream);
  if (g->pristine) cudaFree(g->pristine);
  if (g->logits) cudaFree(g->logits);
  if (g->targets) cudaFree(g->targets);
  if (g->scalars) cudaFree(g->scalars);
  if (g->workspace) cudaFree(g->workspace);
  if (g->row_loss) cudaFree(g->row_loss);
  g->pristine = g->logits = g->workspace = NULL;
  g->row_loss = NULL;
  g->targets = NULL;
  g->scalars = NULL;
}

/* Bytes a point needs on the device (pristine + logits + the small rest). */
size_t gpu_need_bytes(const point *p, xent_dtype dt) {
  size_t x = (size_t)p->bt * (size_t)p->vocab * dtype_size(dt);
  return 2 * x + (size_t)p->bt * 8 + xent_workspace_size(p->bt) + ((size_t)64 << 20);
}

int gpu_fits(const point *p, xent_dtype dt, size_t *free_out) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  *free_out = free_b;
  return gpu_need_bytes(p, dt) <= free_b;
}

/* Copy a host-generated stream of logits to the device in chunks. */
static int gpu_fill_pristine(gpu_ctx *g, xent_dtype dt, size_t count, uint64_t seed) {
  const size_t chunk = (size_t)64 << 20; /* elements, a multiple of FILL_BLOCK */
  size_t es = dtype_size(dt);
  size_t n = count < chunk ? count : chunk;
  void *host = NULL;
  int pinned = cudaMallocHost(&host, n * es) == cudaSuccess;
  if (!pinned) {
    cudaGetLastError();
    host = host_alloc(n * es);
    if (!host) return -1;
  }
  int rc = 0;
  for (size_t first = 0; first < count; first += chunk) {
    size_t m = count - first < chunk ? count - first : chunk;
    fill_logits(host, dt, first, m, seed);
    if (cudaMemcpy((char *)g->pristine + first * es, host, m * es, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      fprintf(stderr, "xent-bench: copying the logits to the device failed\n");
      rc = -1;
      break;
    }
  }
  if (pinned) cudaFreeHost(host);
  else free(host);
  return rc;
}

int gpu_prepare(gpu_ctx *g, const point *p, xent_dtype dt, uint64_t seed) {
  size_t count = (size_t)p->bt * (size_t)p->vocab;
  g->bytes = count * dtype_size(dt);
  g->workspace_bytes = xent_workspace_size(p->bt);
  CUDA_OK(cudaMalloc(&g->pristine, g->bytes));
  CUDA_OK(cudaMalloc(&g->logits, g->bytes));
  CUDA_OK(cudaMalloc((void **)&g->targets, (size_t)p->bt * sizeof(int64_t) + 8));
  CUDA_OK(cudaMalloc((void **)&g->scalars, 4 * sizeof(float)));
  CUDA_OK(cudaMalloc(&g->workspace, g->workspace_bytes));
  if (g->reduction == XENT_REDUCTION_NONE)
    CUDA_OK(cudaMalloc((void **)&g->row_loss, (size_t)p->bt * sizeof(float)));
  if (gpu_fill_pristine(g, dt, count, seed)) return -1;

  int64_t *ht = host_alloc((size_t)p->bt * sizeof(int64_t));
  if (!ht) return -1;
  fill_targets(ht, p->bt, p->vocab, seed);
  cudaError_t e = cudaMemcpy(g->targets, ht, (size_t)p->bt * sizeof(int64_t),
                             cudaMemcpyHostToDevice);
  free(ht);
  CUDA_OK(e);
  float hs[4] = {0.0f, 1.0f, GRAD_OUTPUT_VALUE, 0.0f};
  CUDA_OK(cudaMemcpy(g->scalars, hs, sizeof hs, cudaMemcpyHostToDevice));

  xent_input in = {g->logits, dt, p->bt, p->vocab, 0, g->targets, XENT_INT64, NULL};
  g->in = in;
  g->opt = xent_options_default();
  g->opt.target_check = g->checked ? XENT_TARGETS_CHECKED : XENT_TARGETS_UNCHECKED;
  g->opt.reduction = g->reduction;
  xent_output out = {g->row_loss ? g->row_loss : &g->scalars[0], NULL, NULL, NULL, NULL};
  g->out = out;
  g->ex = xent_exec_default();
  g->ex.backend = XENT_BACKEND_CUDA;
  g->ex.device = g->device;
  g->ex.stream = (void *)g->stream;
  g->ex.workspace = g->workspace;
  g->ex.workspace_bytes = g->workspace_bytes;
  return 0;
}

static xent_status gpu_call(gpu_ctx *g, int mode, const char **what) {
  return run_mode(&g->in, &g->opt, &g->out, &g->ex, &g->scalars[2], &g->scalars[1], mode, what);
}

/* Evict the L2: the logits' lines go back to normal L2 priority, then 256
 * MiB of scratch are written (or, with --flush read, read: the L2 is left
 * holding clean lines, none for the timed call to write back). Without the
 * first step, lines a forward loaded evict-last outlive the flush
 * (bench/HISTORY.md v10). */
static int gpu_flush(gpu_ctx *g, int it) {
  if (bench_l2_normal(g->logits, g->bytes, g->stream)) return -1;
  if (g->flush_read) {
    if (bench_l2_read(g->flush, FLUSH_BYTES, g->stream)) return -1;
  } else {
    CUDA_OK(cudaMemsetAsync(g->flush, it & 0xff, FLUSH_BYTES, g->stream));
  }
  return 0;
}

/* Refresh the logits from the pristine copy and evict the L2: untimed. */
static int gpu_refresh(gpu_ctx *g, int it) {
  CUDA_OK(cudaMemcpyAsync(g->logits, g->pristine, g->bytes, cudaMemcpyDeviceToDevice, g->stream));
  return gpu_flush(g, it);
}

/* Time `mode` (or, with backward_one, xent_backward with grad_output 1). */
int gpu_time_mode(gpu_ctx *g, int mode, int backward_one, int iters, int warmup,
                         stats *out, xent_status *st_out) {
  if (iters > g->n_events) iters = g->n_events;
  *st_out = XENT_OK;
  for (int it = 0; it < warmup + iters; it++) {
    if (gpu_refresh(g, it)) return -1;
    if (mode == MODE_BACKWARD) {
      xent_status st = xent_forward_grad(&g->in, &g->opt, &g->out, &g->ex);
      if (st) {
        report_xent("xent_forward_grad", st);
        *st_out = st;
        return -1;
      }
      if (gpu_flush(g, it + 1)) return -1;
    }
    int timed = it >= warmup;
    if (timed) CUDA_OK(cudaEventRecord(g->ev0[it - warmup], g->stream));
    const char *what = "";
    xent_status st;
    if (backward_one) {
      what = "xent_backward";
      st = xent_backward(g->logits, g->in.dtype, g->in.rows, g->in.vocab, 0, &g->scalars[1], 1,
                         &g->ex);
    } else {
      st = gpu_call(g, mode, &what);
    }
    if (st) {
      if (st != XENT_ERROR_UNSUPPORTED) report_xent(what, st);
      *st_out = st;
      cudaStreamSynchronize(g->stream);
      return -1;
    }
    if (timed) CUDA_OK(cudaEventRecord(g->ev1[it - warmup], g->stream));
  }
  CUDA_OK(cudaStreamSynchronize(g->stream));
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int i = 0; i < iters; i++) {
    float ms = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&ms, g->ev0[i], g->ev1[i]);
    if (e != cudaSuccess) {
      fprintf(stderr, "xent-bench: cudaEventElapsedTime failed: %s\n", cudaGetErrorString(e));
      free(t);
      return -1;
    }
    t[i] = ms;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}

/* Device-to-device copy of a large buffer: returns the median stats, and the
 * bytes read + written per copy in *bytes_out. */
int gpu_copy_bandwidth(gpu_ctx *g, int iters, int warmup, stats *out, double *bytes_out) {
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  size_t n = COPY_BYTES;
  while (n > ((size_t)64 << 20) && 2 * n + ((size_t)256 << 20) > free_b) n /= 2;
  void *a = NULL, *b = NULL;
  CUDA_OK(cudaMalloc(&a, n));
  if (cudaMalloc(&b, n) != cudaSuccess) {
    cudaFree(a);
    fprintf(stderr, "xent-bench: no room for the copy baseline\n");
    return -1;
  }
  CUDA_OK(cudaMemset(a, 1, n));
  CUDA_OK(cudaMemset(b, 2, n));
  if (iters > g->n_events) iters = g->n_events;
  int rc = 0;
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) rc = -1;
  for (int it = 0; rc == 0 && it < warmup + iters; it++) {
    int timed = it >= warmup;
    if (timed && cudaEventRecord(g->ev0[it - warmup], g->stream) != cudaSuccess) rc = -1;
    if (cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess) rc = -1;
    if (timed && cudaEventRecord(g->ev1[it - warmup], g->stream) != cudaSuccess) rc = -1;
  }
  if (rc == 0 && cudaStreamSynchronize(g->stream) != cudaSuccess) rc = -1;
  for (int i = 0; rc == 0 && i < iters; i++) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, g->ev0[i], g->ev1[i]) != cudaSuccess) rc = -1;
    t[i] = ms;
  }
  if (rc == 0) {
    *out = summarize(t, iters);
    *bytes_out = 2.0 * (double)n;
  } else {
    fprintf(stderr, "xent-bench: the copy baseline failed\n");
  }
  free(t);
  cudaFree(a);
  cudaFree(b);
  return rc;
}
