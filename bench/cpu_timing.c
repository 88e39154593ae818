/*
 * cpu_timing.c - timing on the CPU backend: CLOCK_MONOTONIC around each
 * call, the logits refreshed from a pristine copy before it (untimed), and
 * the copy baseline, a memcpy of the same bytes on the same threads.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void cpu_release(cpu_ctx *c) {
  free(c->pristine);
  free(c->logits);
  free(c->targets);
  free(c->row_loss);
  c->pristine = c->logits = NULL;
  c->targets = NULL;
  c->row_loss = NULL;
}

int cpu_prepare(cpu_ctx *c, const point *p, xent_dtype dt, int threads,
                       xent_reduction reduction, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->threads = threads;
  c->bytes = (size_t)p->bt * (size_t)p->vocab * dtype_size(dt);
  c->pristine = host_alloc(c->bytes);
  c->logits = host_alloc(c->bytes);
  c->targets = host_alloc((size_t)p->bt * sizeof(int64_t));
  if (reduction == XENT_REDUCTION_NONE) c->row_loss = host_alloc((size_t)p->bt * sizeof(float));
  if (!c->pristine || !c->logits || !c->targets ||
      (reduction == XENT_REDUCTION_NONE && !c->row_loss)) {
    fprintf(stderr, "xent-bench: host allocation of %zu bytes failed\n", 2 * c->bytes);
    cpu_release(c);
    return -1;
  }
  fill_logits(c->pristine, dt, 0, (size_t)p->bt * (size_t)p->vocab, seed);
  fill_targets(c->targets, p->bt, p->vocab, seed);
  par_memcpy(c->logits, c->pristine, c->bytes, threads); /* first touch */
  c->grad_one = 1.0f;
  c->grad_half = GRAD_OUTPUT_VALUE;
  xent_input in = {c->logits, dt, p->bt, p->vocab, 0, c->targets, XENT_INT64, NULL};
  c->in = in;
  c->opt = xent_options_default();
  c->opt.reduction = reduction;
  xent_output out = {c->row_loss ? c->row_loss : &c->loss, NULL, NULL, NULL, NULL};
  c->out = out;
  c->ex = xent_exec_default();
  c->ex.backend = XENT_BACKEND_CPU;
  c->ex.num_threads = threads;
  return 0;
}

static xent_status cpu_call(cpu_ctx *c, int mode, const char **what) {
  return run_mode(&c->in, &c->opt, &c->out, &c->ex, &c->grad_half, &c->grad_one, mode, what);
}

int cpu_time_mode(cpu_ctx *c, int mode, int iters, int warmup, stats *out) {
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int it = 0; it < warmup + iters; it++) {
    par_memcpy(c->logits, c->pristine, c->bytes, c->threads);
    const char *what = "";
    if (mode == MODE_BACKWARD) {
      xent_status st = xent_forward_grad(&c->in, &c->opt, &c->out, &c->ex);
      if (st) {
        report_xent("xent_forward_grad", st);
        free(t);
        return -1;
      }
    }
    double t0 = now_s();
    xent_status st = cpu_call(c, mode, &what);
    double t1 = now_s();
    if (st) {
      report_xent(what, st);
      free(t);
      return -1;
    }
    if (it >= warmup) t[it - warmup] = (t1 - t0) * 1e3;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}

int cpu_time_copy(cpu_ctx *c, int iters, int warmup, stats *out) {
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int it = 0; it < warmup + iters; it++) {
    double t0 = now_s();
    par_memcpy(c->logits, c->pristine, c->bytes, c->threads);
    double t1 = now_s();
    if (it >= warmup) t[it - warmup] = (t1 - t0) * 1e3;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}
