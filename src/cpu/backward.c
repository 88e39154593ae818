/*
 * backward.c - the CPU backend's backward: the gradient the forward left
 * over the logits multiplied in place by the upstream gradient (a scalar,
 * or one factor per row).
 */
#include <stdint.h>
#include <string.h>

#include "common/dtype.h"
#include "cpu/cpu.h"
#include "cpu/simd.h"
#include "cpu/threads.h"

XENT_AI void scale_row(void *g, int64_t V, float s, const int dt) {
  const v8f vs = vsplat(s);
  int64_t j = 0;
  for (; j + 16 <= V; j += 16) {
    v8f a = vload(AT(g, j, dt), dt) * vs, b = vload(AT(g, j + 8, dt), dt) * vs;
    if (dt == DT_BF16) {
      f32_to_bf16x16(AT_W(g, j, dt), a, b, 0);
    } else {
      vstore(AT_W(g, j, dt), a, dt);
      vstore(AT_W(g, j + 8, dt), b, dt);
    }
  }
  for (; j + 8 <= V; j += 8) vstore(AT_W(g, j, dt), vload(AT(g, j, dt), dt) * vs, dt);
  if (j < V) {
    int n = (int)(V - j);
    vstore_part(AT_W(g, j, dt), vload_part(AT(g, j, dt), n, dt) * vs, n, dt);
  }
}

static void scale_row_f32(void *g, int64_t V, float s) { scale_row(g, V, s, DT_F32); }
static void scale_row_bf16(void *g, int64_t V, float s) { scale_row(g, V, s, DT_BF16); }
static void scale_row_f16(void *g, int64_t V, float s) { scale_row(g, V, s, DT_F16); }

xent_status xent_cpu_backward(const xent_scale_call *c) {
  const int64_t rows = c->rows, V = c->vocab, S = c->row_stride;
  const size_t es = xent_dtype_size(c->dtype);
  const float *go = NULL;
  float scalar = c->host_scale;
  /* rescale (c->applied): by grad_output / applied, then applied = grad_output */
  const float *ap = c->applied;
  if (c->grad_output) {
    if (c->grad_output_count == 1) scalar = ap ? c->grad_output[0] / ap[0] : c->grad_output[0];
    else go = c->grad_output;
  }
  if (!go && scalar == 1.0f) {
    if (ap) c->applied[0] = c->grad_output[0];
    return XENT_OK;
  }
  void (*fn)(void *, int64_t, float) = c->dtype == XENT_BFLOAT16  ? scale_row_bf16
                                       : c->dtype == XENT_FLOAT16 ? scale_row_f16
                                                                  : scale_row_f32;
  const int nt = xent_cpu_pick_threads(c->ex.num_threads, rows, rows * V);
  (void)nt;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
  for (int64_t r = 0; r < rows; r++) {
    float s = go ? (ap ? go[r] / ap[r] : go[r]) : scalar;
    if (s == 1.0f) continue;
    fn((char *)c->grad + (size_t)r * (size_t)S * es, V, s);
  }
  if (ap) memcpy(c->applied, c->grad_output, (size_t)c->grad_output_count * sizeof(float));
  return XENT_OK;
}
