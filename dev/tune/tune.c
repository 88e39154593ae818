/*
 * tune.c - xent-tune: every launch configuration of the library's CUDA
 * forward kernels on a few shapes, each timed as xent-bench times the
 * default (bench/gpu_timing.c) and checked against the launch table's
 * result, through the experimental interface (xent_experimental.h). What it
 * measured is in bench/NOTES.md and bench/HISTORY.md; the launch table
 * (src/cuda/plan.c) takes the winners.
 *
 *   xent-tune [--nograd] [--vocab N] [--bt N] [--dtype bf16|fp32|all] [--iters N]
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xent_experimental.h"

static const int64_t tune_vocab_values[] = {32000, 50304, 128256, 152064, 262144};

/* The candidates. Two-read: threads, evict-last pass 1. Staged: cluster,
 * consumer threads, vectors a chunk, slots, reuse, hold, evict-last. Warp
 * row (no gradient): threads, warps a row. Segment (no gradient): threads,
 * vectors a thread. */
#define TR(t, h) {XENT_EXPERIMENTAL_TWO_READ, 0, t, 0, 0, 0, 0, 0, h}
#define ST(c, t, v, s, r, hd, h) {XENT_EXPERIMENTAL_STAGED, c, t, v, s, r, hd, 0, h}
#define WR(t, sp) {XENT_EXPERIMENTAL_WARP_ROW, 0, t, 0, 0, 0, 0, sp, 0}
#define SG(t, v) {XENT_EXPERIMENTAL_SEGMENT, 0, t, v, 0, 0, 0, 0, 0}
static const xent_experimental_launch candidates[] = {
    TR(128, 0), TR(256, 0), TR(512, 0), TR(1024, 0), TR(512, 1), TR(1024, 1),
    ST(1, 416, 8, 4, 0, 0, 1), ST(1, 448, 8, 4, 0, 0, 1), ST(1, 480, 4, 6, 0, 0, 1),
    ST(1, 64, 8, 6, 0, 0, 1), ST(1, 128, 8, 6, 0, 0, 1), ST(1, 416, 8, 4, 3, 0, 1),
    ST(1, 416, 8, 4, 4, 0, 1), ST(2, 416, 8, 4, 3, 0, 1), ST(4, 416, 8, 4, 3, 0, 1),
    ST(1, 480, 4, 7, 7, 2, 1), ST(2, 480, 4, 7, 7, 2, 1), ST(2, 416, 4, 8, 8, 1, 1),
    WR(64, 1), WR(128, 1), WR(256, 1), WR(256, 2), WR(256, 4), WR(256, 8),
    SG(256, 8), SG(128, 8), SG(128, 4), SG(64, 8), SG(64, 4)};

static void name_of(const xent_experimental_launch *l, char *out, size_t n) {
  switch (l->path) {
    case XENT_EXPERIMENTAL_TWO_READ:
      snprintf(out, n, "two-read threads=%d%s", l->threads, l->l2_hint ? " l2-hint" : "");
      break;
    case XENT_EXPERIMENTAL_STAGED:
      snprintf(out, n, "staged cluster=%d threads=%d+32 vecs=%d slots=%d reuse=%d hold=%d%s",
               l->cluster, l->threads, l->vecs, l->slots, l->reuse, l->hold,
               l->l2_hint ? " l2-hint" : "");
      break;
    case XENT_EXPERIMENTAL_WARP_ROW:
      snprintf(out, n, "warp threads=%d split=%d", l->threads, l->warp_split);
      break;
    default: snprintf(out, n, "segment threads=%d vecs=%d", l->threads, l->vecs);
  }
}

static int force(const xent_experimental_launch *l) {
  xent_experimental e = xent_experimental_get();
  const xent_experimental_launch table = {XENT_EXPERIMENTAL_TABLE, 0, 0, 0, 0, 0, 0, 0, 0};
  e.forward = l ? *l : table;
  return xent_experimental_set(&e) == XENT_OK ? 0 : -1;
}

typedef struct tune_ref {
  float loss;
  float *rows; /* 3 rows of the gradient, as float */
  int64_t vocab;
} tune_ref;

static float elem_as_float(const void *base, size_t i, xent_dtype dt) {
  if (dt == XENT_FLOAT32) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  if (dt == XENT_BFLOAT16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  /* fp16 */
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, u;
  if (em >= 0x0400u) u = (em << 13) + (112u << 23);
  else {
    float m = (float)em * 0x1p-24f;
    memcpy(&u, &m, 4);
  }
  u |= sign;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Read back the loss and rows 0, BT/2, BT-1 of the gradient. */
static int tune_snapshot(gpu_ctx *g, tune_ref *r) {
  size_t es = dtype_size(g->in.dtype), v = (size_t)g->in.vocab;
  int64_t rows[3] = {0, g->in.rows / 2, g->in.rows - 1};
  void *tmp = host_alloc(v * es);
  if (!tmp) return -1;
  if (!r->rows || r->vocab != g->in.vocab) {
    free(r->rows);
    r->rows = malloc(3 * v * sizeof(float));
  }
  r->vocab = g->in.vocab;
  if (!r->rows) {
    free(tmp);
    return -1;
  }
  int rc = 0;
  if (cudaStreamSynchronize(g->stream) != cudaSuccess ||
      cudaMemcpy(&r->loss, &g->scalars[0], sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
    rc = -1;
  for (int k = 0; rc == 0 && k < 3; k++) {
    if (cudaMemcpy(tmp, (char *)g->logits + (size_t)rows[k] * v * es, v * es,
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      rc = -1;
      break;
    }
    for (size_t j = 0; j < v; j++) r->rows[(size_t)k * v + j] = elem_as_float(tmp, j, g->in.dtype);
  }
  free(tmp);
  return rc;
}

/* 1 when the candidate's loss and sampled gradient rows agree with the
 * default launch's. */
static int tune_agrees(const tune_ref *ref, const tune_ref *got, xent_dtype dt) {
  if (!(fabsf(got->loss - ref->loss) <= 1e-4f * fabsf(ref->loss) + 1e-6f)) return 0;
  double tol = dt == XENT_FLOAT32 ? 1e-4 : 2e-2;
  size_t v = (size_t)ref->vocab;
  for (int k = 0; k < 3; k++) {
    const float *a = ref->rows + (size_t)k * v, *b = got->rows + (size_t)k * v;
    double row_max = 0.0, worst = 0.0;
    for (size_t j = 0; j < v; j++) {
      double d = fabs((double)a[j] - (double)b[j]);
      if (!(d <= worst)) worst = d; /* also catches NaN */
      if (fabs((double)a[j]) > row_max) row_max = fabs((double)a[j]);
    }
    if (!(worst <= tol * row_max)) return 0;
  }
  return 1;
}

typedef struct tune_best {
  char shape[64];
  char default_launch[128];
  double default_ms;
  char best[96];
  double best_ms;
} tune_best;

int main(int argc, char **argv) {
  int nograd = 0, iters = 20, warmup = 5;
  int64_t bt = 8192, vocab = 0;
  xent_dtype dtypes[2] = {XENT_BFLOAT16, XENT_FLOAT32};
  int n_dtypes = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--nograd")) nograd = 1;
    else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--bt") && i + 1 < argc) bt = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      const char *d = argv[++i];
      n_dtypes = 1;
      if (!strcmp(d, "bf16")) dtypes[0] = XENT_BFLOAT16;
      else if (!strcmp(d, "fp32")) dtypes[0] = XENT_FLOAT32;
      else n_dtypes = 2;
    } else {
      fprintf(stderr, "usage: xent-tune [--nograd] [--vocab N] [--bt N] [--dtype bf16|fp32|all] "
                      "[--iters N]\n");
      return 2;
    }
  }
  gpu_ctx g;
  if (gpu_init(&g, 0, iters > 20 ? iters : 20)) return 1;
  const int mode = nograd ? MODE_FORWARD_NOGRAD : MODE_FORWARD;
  const int64_t *vocabs = vocab ? &vocab : tune_vocab_values;
  const int n_vocabs = vocab ? 1 : (int)(sizeof tune_vocab_values / sizeof *tune_vocab_values);
  tune_best summary[2 * sizeof tune_vocab_values / sizeof *tune_vocab_values];
  int n_summary = 0, rc = 0;
  tune_ref ref = {0}, got = {0};
  printf("xent-tune: %s, BT=%lld, median of %d after %d\n", nograd ? "forward" : "fwd+grad",
         (long long)bt, iters, warmup);
  for (int d = 0; d < n_dtypes && !rc; d++) {
    for (int vi = 0; vi < n_vocabs && !rc; vi++) {
      point p = {bt, vocabs[vi], "V"};
      const xent_dtype dt = dtypes[d];
      size_t free_b = 0;
      if (!gpu_fits(&p, dt, &free_b)) {
        print_skip(&p, dt, (double)gpu_need_bytes(&p, dt), (double)free_b, 1);
        continue;
      }
      if (gpu_prepare(&g, &p, dt, 1234)) {
        rc = -1;
        break;
      }
      tune_best *tb = &summary[n_summary++];
      snprintf(tb->shape, sizeof tb->shape, "BT=%lld V=%lld %s", (long long)p.bt,
               (long long)p.vocab, dtype_short(dt));
      printf("\n%s\n", tb->shape);
      stats s;
      xent_status st;
      force(NULL);
      if (gpu_time_mode(&g, mode, 0, iters, warmup, &s, &st) || tune_snapshot(&g, &ref)) {
        gpu_release(&g);
        rc = -1;
        break;
      }
      snprintf(tb->default_launch, sizeof tb->default_launch, "%s",
               xent_experimental_last_launch());
      tb->default_ms = tb->best_ms = s.p50;
      snprintf(tb->best, sizeof tb->best, "default");
      printf("  %-58s %9.4f ms  (%s)\n", "default", s.p50, tb->default_launch);
      for (size_t ci = 0; ci < sizeof candidates / sizeof *candidates; ci++) {
        char name[96];
        name_of(&candidates[ci], name, sizeof name);
        if (force(&candidates[ci])) continue;
        if (gpu_time_mode(&g, mode, 0, iters, warmup, &s, &st)) {
          if (st == XENT_ERROR_UNSUPPORTED) {
            printf("  %-58s %12s\n", name, "unsupported");
            continue;
          }
          printf("  %-58s failed (%s)\n", name, xent_status_string(st));
          rc = st == XENT_ERROR_CUDA ? -1 : 0;
          if (rc) break;
          continue;
        }
        if (tune_snapshot(&g, &got)) {
          rc = -1;
          break;
        }
        const int ok = tune_agrees(&ref, &got, dt);
        printf("  %-58s %9.4f ms  (%8.4f / %8.4f)  x%.3f%s\n", name, s.p50, s.p20, s.p80,
               tb->default_ms / s.p50, ok ? "" : "  RESULT MISMATCH");
        if (ok && s.p50 < tb->best_ms) {
          tb->best_ms = s.p50;
          snprintf(tb->best, sizeof tb->best, "%s", name);
        }
      }
      force(NULL);
      gpu_release(&g);
    }
  }
  free(ref.rows);
  free(got.rows);
  printf("\n%-22s %-40s %10s  %-58s %10s %7s\n", "shape", "default launch", "ms", "best", "ms",
         "gain");
  for (int i = 0; i < n_summary; i++)
    printf("%-22s %-40s %10.4f  %-58s %10.4f %7.3f\n", summary[i].shape,
           summary[i].default_launch, summary[i].default_ms, summary[i].best, summary[i].best_ms,
           summary[i].default_ms / summary[i].best_ms);
  gpu_shutdown(&g);
  return rc ? 1 : 0;
}
