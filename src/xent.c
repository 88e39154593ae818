/*
 * xent.c - the public API: argument checking and dispatch to a backend.
 *
 * Order of work in every entry point: check every argument that the host can
 * see, resolve the backend, check the host-side data (targets, weights) for
 * the CPU backend, and only then hand over to the backend. Nothing the caller
 * owns is written before all checks have passed.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/workspace.h"
#include "internal.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

static _Thread_local char last_error[512];

xent_status xent_fail(xent_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

void xent_clear_error(void) { last_error[0] = '\0'; }

const char *xent_last_error(void) { return last_error; }

const char *xent_status_string(xent_status status) {
  switch (status) {
    case XENT_OK: return "success";
    case XENT_ERROR_NULL_POINTER: return "a required pointer is NULL";
    case XENT_ERROR_BAD_SHAPE: return "bad shape (rows < 0, vocab < 1 or vocab > INT32_MAX)";
    case XENT_ERROR_BAD_STRIDE: return "bad row stride (smaller than vocab, or the extent overflows)";
    case XENT_ERROR_BAD_TARGET: return "a target is outside [0, vocab) and is not ignore_index";
    case XENT_ERROR_BAD_LABEL_SMOOTHING: return "label_smoothing is outside [0, 1]";
    case XENT_ERROR_BAD_SOFTCAP: return "softcap must be finite and > 0 when enabled";
    case XENT_ERROR_BAD_WEIGHT: return "a class weight is NaN or infinite";
    case XENT_ERROR_BAD_ENUM: return "an enum argument has an unknown value";
    case XENT_ERROR_BAD_ARGUMENT: return "bad argument";
    case XENT_ERROR_UNSUPPORTED: return "not supported by this build or machine";
    case XENT_ERROR_CUDA: return "CUDA runtime error";
    case XENT_ERROR_OUT_OF_MEMORY: return "out of memory";
  }
  return "unknown status";
}

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

size_t xent_dtype_size(xent_dtype dtype) {
  switch (dtype) {
    case XENT_FLOAT32: return 4;
    case XENT_BFLOAT16:
    case XENT_FLOAT16: return 2;
  }
  return 0;
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
/* Checks shared by forward and backward                                     */
/* ------------------------------------------------------------------------ */

static int aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Shape, stride and extent of a logits-like matrix. *stride is normalised. */
static xent_status check_matrix(const char *name, const void *p, xent_dtype dtype, int64_t rows,
                                int64_t vocab, int64_t *stride) {
  size_t es = xent_dtype_size(dtype);
  if (es == 0) return xent_fail(XENT_ERROR_BAD_ENUM, "dtype %d is not a xent_dtype", (int)dtype);
  if (rows < 0)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "rows is %lld; it must be >= 0", (long long)rows);
  if (vocab < 1 || vocab > INT32_MAX)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "vocab is %lld; it must be in [1, %d]",
                     (long long)vocab, INT32_MAX);
  if (*stride == 0) *stride = vocab;
  if (*stride < vocab)
    return xent_fail(XENT_ERROR_BAD_STRIDE, "row_stride is %lld, smaller than vocab %lld",
                     (long long)*stride, (long long)vocab);
  if (rows > 0 && (uint64_t)(rows - 1) > (uint64_t)((INT64_MAX / (int64_t)es - vocab) / *stride))
    return xent_fail(XENT_ERROR_BAD_STRIDE,
                     "rows %lld x row_stride %lld overflows the addressable extent",
                     (long long)rows, (long long)*stride);
  if (rows > 0 && !p) return xent_fail(XENT_ERROR_NULL_POINTER, "%s is NULL", name);
  if (p && !aligned(p, es))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "%s is not aligned to its %zu-byte element", name,
                     es);
  return XENT_OK;
}

/* Fill in backend and device; checks that the backend exists here. */
static xent_status resolve_exec(xent_exec *ex, const void *data) {
  switch (ex->backend) {
    case XENT_BACKEND_AUTO: {
      int dev = data ? xent_cuda_pointer_device(data) : -1;
      if (dev >= 0) {
        ex->backend = XENT_BACKEND_CUDA;
        ex->device = dev;
      } else {
        ex->backend = XENT_BACKEND_CPU;
      }
      return XENT_OK;
    }
    case XENT_BACKEND_CPU:
      if (ex->num_threads < 0)
        return xent_fail(XENT_ERROR_BAD_ARGUMENT, "num_threads is %d; it must be >= 0",
                         ex->num_threads);
      return XENT_OK;
    case XENT_BACKEND_CUDA:
      if (!xent_cuda_built())
        return xent_fail(XENT_ERROR_UNSUPPORTED,
                         "backend CUDA requested but this build of xent has no CUDA backend");
      if (ex->device < 0)
        return xent_fail(XENT_ERROR_BAD_ARGUMENT, "device is %d; it must be >= 0", ex->device);
      return XENT_OK;
  }
  return xent_fail(XENT_ERROR_BAD_ENUM, "backend %d is not a xent_backend", (int)ex->backend);
}

/* Pointers given to the CUDA backend must be device memory (or managed). */
static xent_status check_side(const xent_exec *ex, const char *name, const void *p) {
  if (!p) return XENT_OK;
  int dev = xent_cuda_pointer_device(p);
  if (ex->backend == XENT_BACKEND_CUDA && dev < 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "%s is host memory but the backend is CUDA: pass device memory", name);
  if (ex->backend == XENT_BACKEND_CPU && dev >= 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "%s is device memory (device %d) but the backend is CPU", name, dev);
  return XENT_OK;
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */
/* ------------------------------------------------------------------------ */

static int64_t target_at(const void *t, xent_index_type type, int64_t r) {
  return type == XENT_INT32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

static xent_status check_host_data(const xent_call *c) {
  const xent_input *in = &c->in;
  for (int64_t r = 0; r < in->rows; r++) {
    int64_t y = target_at(in->targets, in->target_type, r);
    if (y == c->opt.ignore_index) continue;
    if (y < 0 || y >= in->vocab)
      return xent_fail(XENT_ERROR_BAD_TARGET,
                       "targets[%lld] = %lld is outside [0, %lld) and is not ignore_index %lld",
                       (long long)r, (long long)y, (long long)in->vocab,
                       (long long)c->opt.ignore_index);
  }
  if (in->weights) {
    for (int64_t j = 0; j < in->vocab; j++)
      if (!isfinite(in->weights[j]))
        return xent_fail(XENT_ERROR_BAD_WEIGHT, "weights[%lld] = %g is not finite",
                         (long long)j, (double)in->weights[j]);
  }
  return XENT_OK;
}

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

  xent_status st = check_matrix("logits", in->logits, in->dtype, in->rows, in->vocab,
                                &c.in.row_stride);
  if (st) return st;
  if (in->target_type != XENT_INT32 && in->target_type != XENT_INT64)
    return xent_fail(XENT_ERROR_BAD_ENUM, "target_type %d is not a xent_index_type",
                     (int)in->target_type);
  if (in->rows > 0 && !in->targets)
    return xent_fail(XENT_ERROR_NULL_POINTER, "targets is NULL");
  if (in->targets && !aligned(in->targets, in->target_type == XENT_INT32 ? 4 : 8))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "targets is not aligned to its element size");
  if (in->weights && !aligned(in->weights, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "weights is not 4-byte aligned");

  if (opt->reduction != XENT_REDUCTION_MEAN && opt->reduction != XENT_REDUCTION_SUM &&
      opt->reduction != XENT_REDUCTION_NONE)
    return xent_fail(XENT_ERROR_BAD_ENUM, "reduction %d is not a xent_reduction",
                     (int)opt->reduction);
  if (opt->target_check != XENT_TARGETS_CHECKED && opt->target_check != XENT_TARGETS_UNCHECKED)
    return xent_fail(XENT_ERROR_BAD_ENUM, "target_check %d is not a xent_target_check",
                     (int)opt->target_check);
  if (!(opt->label_smoothing >= 0.0f && opt->label_smoothing <= 1.0f))
    return xent_fail(XENT_ERROR_BAD_LABEL_SMOOTHING, "label_smoothing is %g; it must be in [0, 1]",
                     (double)opt->label_smoothing);
  if (opt->use_softcap && !(opt->softcap > 0.0f && isfinite(opt->softcap)))
    return xent_fail(XENT_ERROR_BAD_SOFTCAP, "softcap is %g; it must be finite and > 0",
                     (double)opt->softcap);
  if (!(opt->lse_square_scale >= 0.0f && isfinite(opt->lse_square_scale)))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "lse_square_scale is %g; it must be finite and >= 0",
                     (double)opt->lse_square_scale);

  int per_row = opt->reduction == XENT_REDUCTION_NONE;
  if (!out->loss && !(per_row && in->rows == 0))
    return xent_fail(XENT_ERROR_NULL_POINTER, "out->loss is NULL");
  {
    const char *names[] = {"out->loss", "out->z_loss", "out->token_accuracy", "out->lse",
                           "out->predicted"};
    const void *ptrs[] = {out->loss, out->z_loss, out->token_accuracy, out->lse, out->predicted};
    for (int i = 0; i < 5; i++)
      if (ptrs[i] && !aligned(ptrs[i], i == 4 ? 8 : 4))
        return xent_fail(XENT_ERROR_BAD_ARGUMENT, "%s is not aligned to its %d-byte element",
                         names[i], i == 4 ? 8 : 4);
  }

  st = resolve_exec(&c.ex, in->rows > 0 ? in->logits : NULL);
  if (st) return st;
  if (xent_cuda_built()) {
    const char *names[] = {"logits", "targets", "weights", "out->loss", "out->z_loss",
                           "out->token_accuracy", "out->predicted", "out->lse"};
    const void *ptrs[] = {in->logits, in->targets, in->weights, out->loss, out->z_loss,
                          out->token_accuracy, out->predicted, out->lse};
    for (int i = 0; i < 8; i++)
      if ((st = check_side(&c.ex, names[i], ptrs[i]))) return st;
  }

  if (c.ex.backend == XENT_BACKEND_CPU) {
    if ((st = check_host_data(&c))) return st;
    return xent_cpu_forward(&c);
  }
  if (c.ex.workspace && !aligned(c.ex.workspace, 256))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "workspace is not 256-byte aligned");
  if (c.ex.workspace && c.ex.workspace_bytes < xent_workspace_size(in->rows))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "workspace_bytes is %zu; %lld rows need xent_workspace_size() = %zu",
                     c.ex.workspace_bytes, (long long)in->rows, xent_workspace_size(in->rows));
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
  xent_status st = check_matrix("grad", c->grad, c->dtype, c->rows, c->vocab, &c->row_stride);
  if (st) return st;
  if (c->grad_output) {
    if (c->grad_output_count != 1 && c->grad_output_count != c->rows)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "grad_output_count is %lld; it must be 1 (mean, sum) or rows = %lld (none)",
                       (long long)c->grad_output_count, (long long)c->rows);
    if (!aligned(c->grad_output, 4))
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grad_output is not 4-byte aligned");
  }
  if ((st = resolve_exec(&c->ex, c->rows > 0 ? c->grad : NULL))) return st;
  if (xent_cuda_built()) {
    if ((st = check_side(&c->ex, "grad", c->grad))) return st;
    if ((st = check_side(&c->ex, "grad_output", c->grad_output))) return st;
  }
  if (c->rows == 0) return XENT_OK;
  return c->ex.backend == XENT_BACKEND_CPU ? xent_cpu_backward(c) : xent_cuda_backward(c);
}

xent_status xent_backward(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                          int64_t row_stride, const float *grad_output, int64_t grad_output_count,
                          const xent_exec *exec) {
  xent_clear_error();
  if (!grad_output) return xent_fail(XENT_ERROR_NULL_POINTER, "grad_output is NULL");
  xent_scale_call c = {grad, dtype, rows, vocab, row_stride, grad_output, grad_output_count,
                       1.0f, XENT_EXEC_INIT};
  return backward_common(&c, exec);
}

xent_status xent_backward_scale(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                                int64_t row_stride, float grad_output, const xent_exec *exec) {
  xent_clear_error();
  xent_scale_call c = {grad, dtype, rows, vocab, row_stride, NULL, 0, grad_output,
                       XENT_EXEC_INIT};
  if (grad_output == 1.0f) {
    /* Nothing to do, but still report bad arguments. */
    xent_exec ex = exec ? *exec : xent_exec_default();
    int64_t stride = row_stride;
    if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");
    xent_status st = check_matrix("grad", grad, dtype, rows, vocab, &stride);
    if (st) return st;
    return resolve_exec(&ex, rows > 0 ? grad : NULL);
  }
  return backward_common(&c, exec);
}
