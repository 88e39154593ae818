/*
 * xent.c - the public cross-entropy API: argument checking and dispatch to a
 * backend.
 *
 * Order of work in every entry point: check every argument that the host can
 * see, resolve the backend, check the host-side data (targets, weights) for
 * the CPU backend, and only then hand over to the backend. Nothing the caller
 * owns is written before all checks have passed.
 */
#include <math.h>
#include <string.h>

#include "api/checks.h"
#include "api/experimental.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/workspace.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"

/* ------------------------------------------------------------------------ */
/* Defaults and queries                                                      */
/* ------------------------------------------------------------------------ */

xent_options xent_options_default(void) {
  xent_options o = XENT_OPTIONS_INIT;
  return o;
}

xent_exec xent_exec_default(void) {
  xent_exec e = XENT_EXEC_INIT;
  return e;
}

const char *xent_version(void) {
#define XENT_STR2(x) #x
#define XENT_STR(x) XENT_STR2(x)
  return XENT_STR(XENT_VERSION_MAJOR) "." XENT_STR(XENT_VERSION_MINOR) "." XENT_STR(
      XENT_VERSION_PATCH);
}

size_t xent_workspace_size(int64_t rows) { return xent_ws_bytes(rows); }

xent_status xent_get_info(xent_info *info) {
  xent_clear_error();
  if (!info) return xent_fail(XENT_ERROR_NULL_POINTER, "info is NULL");
  memset(info, 0, sizeof *info);
  info->version_major = XENT_VERSION_MAJOR;
  info->version_minor = XENT_VERSION_MINOR;
  info->version_patch = XENT_VERSION_PATCH;
  info->cpu_backend = 1;
  info->cpu_threads = xent_cpu_default_threads();
  info->cpu_level = xent_cpu_level();
  info->cuda_built = xent_cuda_built();
  xent_cuda_fill_info(info);
  return XENT_OK;
}

xent_status xent_get_device_info(int device, xent_device_info *info) {
  xent_clear_error();
  if (!info) return xent_fail(XENT_ERROR_NULL_POINTER, "info is NULL");
  if (!xent_cuda_built())
    return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
  return xent_cuda_device_info(device, info);
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */
/* ------------------------------------------------------------------------ */

static xent_status forward_common(const xent_input *in, const xent_options *opt,
                                  const xent_output *out, const xent_exec *exec, int write_grad) {
  xent_clear_error();
  if (!in) return xent_fail(XENT_ERROR_NULL_POINTER, "in (xent_input) is NULL");
  if (!opt) return xent_fail(XENT_ERROR_NULL_POINTER, "opt (xent_options) is NULL");
  if (!out) return xent_fail(XENT_ERROR_NULL_POINTER, "out (xent_output) is NULL");
  if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");

  xent_call c;
  c.in = *in;
  c.opt = *opt;
  c.out = *out;
  c.ex = *exec;
  c.write_grad = write_grad;
  c.exp = xent_experimental_current();

  xent_status st = xent_check_matrix("logits", in->logits, in->dtype, in->rows, in->vocab,
                                     &c.in.row_stride);
  if (st) return st;
  if ((st = xent_check_targets(in->targets, in->target_type, in->rows))) return st;
  if (in->weights && !xent_aligned(in->weights, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "weights is not 4-byte aligned");
  if ((st = xent_check_options(opt))) return st;
  if ((st = xent_check_outputs(out, opt->reduction, in->rows))) return st;

  xent_sides sides = {0};
  xent_sides_add(&sides, "logits", in->logits);
  xent_sides_add(&sides, "targets", in->targets);
  xent_sides_add(&sides, "weights", in->weights);
  xent_sides_add(&sides, "out->loss", out->loss);
  xent_sides_add(&sides, "out->z_loss", out->z_loss);
  xent_sides_add(&sides, "out->token_accuracy", out->token_accuracy);
  xent_sides_add(&sides, "out->predicted", out->predicted);
  xent_sides_add(&sides, "out->lse", out->lse);
  if ((st = xent_resolve(&c.ex, &sides))) return st;

  if (c.ex.backend == XENT_BACKEND_CPU) {
    if ((st = xent_check_host_targets(in->targets, in->target_type, in->rows, in->vocab,
                                      opt->ignore_index, in->weights, "weights")))
      return st;
    return xent_cpu_forward(&c);
  }
  if ((st = xent_check_cuda_exec(&c.ex, in->rows,
                                  opt->target_check == XENT_TARGETS_DEFERRED)))
    return st;
  return xent_cuda_forward(&c);
}

xent_status xent_forward(const xent_input *in, const xent_options *opt, const xent_output *out,
                         const xent_exec *exec) {
  return forward_common(in, opt, out, exec, 0);
}

xent_status xent_forward_grad(const xent_input *in, const xent_options *opt,
                              const xent_output *out, const xent_exec *exec) {
  return forward_common(in, opt, out, exec, 1);
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */
/* ------------------------------------------------------------------------ */

static xent_status backward_common(xent_scale_call *c, const xent_exec *exec) {
  if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");
  c->ex = *exec;
  c->exp = xent_experimental_current();
  xent_status st =
      xent_check_matrix("grad", c->grad, c->dtype, c->rows, c->vocab, &c->row_stride);
  if (st) return st;
  if (c->grad_output) {
    if (c->grad_output_count != 1 && c->grad_output_count != c->rows)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "grad_output_count is %lld; it must be 1 (mean, sum) or rows = %lld (none)",
                       (long long)c->grad_output_count, (long long)c->rows);
    if (!xent_aligned(c->grad_output, 4))
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grad_output is not 4-byte aligned");
  }
  xent_sides sides = {0};
  xent_sides_add(&sides, "grad", c->grad);
  xent_sides_add(&sides, "grad_output", c->grad_output);
  xent_sides_add(&sides, "applied", c->applied);
  if ((st = xent_resolve(&c->ex, &sides))) return st;
  if (c->rows == 0) return XENT_OK;
  return c->ex.backend == XENT_BACKEND_CPU ? xent_cpu_backward(c) : xent_cuda_backward(c);
}

xent_status xent_backward(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                          int64_t row_stride, const float *grad_output, int64_t grad_output_count,
                          const xent_exec *exec) {
  xent_clear_error();
  if (!grad_output) return xent_fail(XENT_ERROR_NULL_POINTER, "grad_output is NULL");
  xent_scale_call c = {grad, dtype, rows, vocab, row_stride, grad_output, grad_output_count,
                       1.0f, XENT_EXEC_INIT, XENT_EXPERIMENTAL_INIT, NULL};
  return backward_common(&c, exec);
}

xent_status xent_verdict_create(xent_verdict **verdict) {
  xent_clear_error();
  if (!verdict) return xent_fail(XENT_ERROR_NULL_POINTER, "verdict is NULL");
  return xent_cuda_verdict_create(verdict);
}

void xent_verdict_destroy(xent_verdict *verdict) {
  if (verdict) xent_cuda_verdict_destroy(verdict);
}

xent_status xent_verdict_wait(xent_verdict *verdict) {
  xent_clear_error();
  if (!verdict) return xent_fail(XENT_ERROR_NULL_POINTER, "verdict is NULL");
  return xent_cuda_verdict_wait(verdict);
}

int xent_verdict_ready(const xent_verdict *verdict) {
  return verdict ? xent_cuda_verdict_ready(verdict) : 0;
}

xent_status xent_backward_rescale(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                                  int64_t row_stride, const float *grad_output, float *applied,
                                  int64_t count, const xent_exec *exec) {
  xent_clear_error();
  if (!grad_output) return xent_fail(XENT_ERROR_NULL_POINTER, "grad_output is NULL");
  if (!applied) return xent_fail(XENT_ERROR_NULL_POINTER, "applied is NULL");
  if (!xent_aligned(applied, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "applied is not 4-byte aligned");
  xent_scale_call c = {grad, dtype, rows, vocab, row_stride, grad_output, count, 1.0f,
                       XENT_EXEC_INIT, XENT_EXPERIMENTAL_INIT, NULL};
  c.applied = applied;
  return backward_common(&c, exec);
}

xent_status xent_backward_scale(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                                int64_t row_stride, float grad_output, const xent_exec *exec) {
  xent_clear_error();
  xent_scale_call c = {grad, dtype, rows, vocab, row_stride, NULL, 0, grad_output,
                       XENT_EXEC_INIT, XENT_EXPERIMENTAL_INIT, NULL};
  if (grad_output == 1.0f) {
    /* Nothing to do, but still report bad arguments. */
    if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");
    xent_exec ex = *exec;
    int64_t stride = row_stride;
    xent_status st = xent_check_matrix("grad", grad, dtype, rows, vocab, &stride);
    if (st) return st;
    xent_sides sides = {0};
    xent_sides_add(&sides, "grad", grad);
    return xent_resolve(&ex, &sides);
  }
  return backward_common(&c, exec);
}
