/*
 * checks.c - argument checks shared by the public entry points.
 */
#include "api/checks.h"

#include <math.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/workspace.h"
#include "cuda/cuda.h"

int xent_aligned(const void *p, size_t alignment) { return ((uintptr_t)p % alignment) == 0; }

xent_status xent_check_layout(const char *name, const char *stride_name, const char *cols_name,
                              const void *p, xent_dtype dtype, int64_t rows, int64_t cols,
                              int64_t *stride, int required) {
  const size_t es = xent_dtype_size(dtype);
  if (*stride == 0) *stride = cols;
  if (*stride < cols)
    return xent_fail(XENT_ERROR_BAD_STRIDE, "%s is %lld, smaller than %s %lld", stride_name,
                     (long long)*stride, cols_name, (long long)cols);
  if (rows > 0 && (uint64_t)(rows - 1) > (uint64_t)((INT64_MAX / (int64_t)es - cols) / *stride))
    return xent_fail(XENT_ERROR_BAD_STRIDE,
                     "rows %lld x %s %lld overflows the addressable extent", (long long)rows,
                     stride_name, (long long)*stride);
  if (required && !p) return xent_fail(XENT_ERROR_NULL_POINTER, "%s is NULL", name);
  if (p && !xent_aligned(p, es))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "%s is not aligned to its %zu-byte element", name,
                     es);
  return XENT_OK;
}

xent_status xent_check_cuda_exec(const xent_exec *ex, int64_t rows, int needs_verdict) {
  if (needs_verdict && !ex->verdict)
    return xent_fail(XENT_ERROR_NULL_POINTER,
                     "exec->verdict is NULL; XENT_TARGETS_DEFERRED on the CUDA backend needs a "
                     "xent_verdict");
  if (ex->workspace && !xent_aligned(ex->workspace, 256))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "workspace is not 256-byte aligned");
  if (ex->workspace && ex->workspace_bytes < xent_ws_bytes(rows))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "workspace_bytes is %zu; %lld rows need xent_workspace_size() = %zu",
                     ex->workspace_bytes, (long long)rows, xent_ws_bytes(rows));
  return XENT_OK;
}

xent_status xent_check_matrix(const char *name, const void *p, xent_dtype dtype, int64_t rows,
                              int64_t vocab, int64_t *stride) {
  if (xent_dtype_size(dtype) == 0)
    return xent_fail(XENT_ERROR_BAD_ENUM, "dtype %d is not a xent_dtype", (int)dtype);
  if (rows < 0)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "rows is %lld; it must be >= 0", (long long)rows);
  if (vocab < 1 || vocab > INT32_MAX)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "vocab is %lld; it must be in [1, %d]",
                     (long long)vocab, INT32_MAX);
  return xent_check_layout(name, "row_stride", "vocab", p, dtype, rows, vocab, stride, rows > 0);
}

xent_status xent_check_options(const xent_options *opt) {
  if (opt->reduction != XENT_REDUCTION_MEAN && opt->reduction != XENT_REDUCTION_SUM &&
      opt->reduction != XENT_REDUCTION_NONE)
    return xent_fail(XENT_ERROR_BAD_ENUM, "reduction %d is not a xent_reduction",
                     (int)opt->reduction);
  if (opt->target_check != XENT_TARGETS_CHECKED && opt->target_check != XENT_TARGETS_UNCHECKED &&
      opt->target_check != XENT_TARGETS_DEFERRED)
    return xent_fail(XENT_ERROR_BAD_ENUM, "target_check %d is not a xent_target_check",
                     (int)opt->target_check);
  if (opt->target_check == XENT_TARGETS_DEFERRED && opt->reduction == XENT_REDUCTION_NONE)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "target_check XENT_TARGETS_DEFERRED needs reduction mean or sum (its "
                     "rejected calls write NaN there); use XENT_TARGETS_CHECKED with none");
  if (!(opt->label_smoothing >= 0.0f && opt->label_smoothing <= 1.0f))
    return xent_fail(XENT_ERROR_BAD_LABEL_SMOOTHING, "label_smoothing is %g; it must be in [0, 1]",
                     (double)opt->label_smoothing);
  if (opt->empty_mean != XENT_EMPTY_MEAN_NAN && opt->empty_mean != XENT_EMPTY_MEAN_ZERO)
    return xent_fail(XENT_ERROR_BAD_ENUM, "empty_mean %d is not a xent_empty_mean",
                     (int)opt->empty_mean);
  if (opt->use_softcap != 0 && opt->use_softcap != 1)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "use_softcap is %d; it must be 0 or 1",
                     opt->use_softcap);
  if (opt->use_softcap && !(opt->softcap > 0.0f && isfinite(opt->softcap)))
    return xent_fail(XENT_ERROR_BAD_SOFTCAP, "softcap is %g; it must be finite and > 0",
                     (double)opt->softcap);
  if (!(opt->lse_square_scale >= 0.0f && isfinite(opt->lse_square_scale)))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "lse_square_scale is %g; it must be finite and >= 0",
                     (double)opt->lse_square_scale);
  return XENT_OK;
}

xent_status xent_check_targets(const void *targets, xent_index_type type, int64_t rows) {
  if (type != XENT_INT32 && type != XENT_INT64)
    return xent_fail(XENT_ERROR_BAD_ENUM, "target_type %d is not a xent_index_type", (int)type);
  if (rows > 0 && !targets) return xent_fail(XENT_ERROR_NULL_POINTER, "targets is NULL");
  if (targets && !xent_aligned(targets, type == XENT_INT32 ? 4 : 8))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "targets is not aligned to its element size");
  return XENT_OK;
}

xent_status xent_check_outputs(const xent_output *out, xent_reduction reduction, int64_t rows) {
  if (!out->loss && !(reduction == XENT_REDUCTION_NONE && rows == 0))
    return xent_fail(XENT_ERROR_NULL_POINTER, "out->loss is NULL");
  const char *names[] = {"out->loss", "out->z_loss", "out->token_accuracy", "out->lse",
                         "out->predicted"};
  const void *ptrs[] = {out->loss, out->z_loss, out->token_accuracy, out->lse, out->predicted};
  for (int i = 0; i < 5; i++)
    if (ptrs[i] && !xent_aligned(ptrs[i], i == 4 ? 8 : 4))
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "%s is not aligned to its %d-byte element",
                       names[i], i == 4 ? 8 : 4);
  return XENT_OK;
}

static int64_t target_at(const void *t, xent_index_type type, int64_t r) {
  return type == XENT_INT32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

xent_status xent_check_host_targets(const void *targets, xent_index_type type, int64_t rows,
                                    int64_t vocab, int64_t ignore_index, const float *weights,
                                    const char *weights_name) {
  for (int64_t r = 0; r < rows; r++) {
    int64_t y = target_at(targets, type, r);
    if (y == ignore_index) continue;
    if (y < 0 || y >= vocab)
      return xent_fail(XENT_ERROR_BAD_TARGET,
                       "targets[%lld] = %lld is outside [0, %lld) and is not ignore_index %lld",
                       (long long)r, (long long)y, (long long)vocab, (long long)ignore_index);
  }
  if (weights) {
    for (int64_t j = 0; j < vocab; j++)
      if (!isfinite(weights[j]))
        return xent_fail(XENT_ERROR_BAD_WEIGHT, "%s[%lld] = %g is not finite", weights_name,
                         (long long)j, (double)weights[j]);
  }
  return XENT_OK;
}

void xent_sides_add(xent_sides *s, const char *name, const void *p) {
  if (!p || s->n == XENT_MAX_SIDES) return;
  s->name[s->n] = name;
  s->ptr[s->n] = p;
  s->dev[s->n] = -1;
  s->n++;
}

xent_status xent_resolve(xent_exec *ex, xent_sides *s) {
  const int cuda = xent_cuda_built();
  if (ex->num_threads < 0) /* whatever the backend: AUTO may resolve to the CPU */
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "num_threads is %d; it must be >= 0",
                     ex->num_threads);
  if (cuda)
    for (int i = 0; i < s->n; i++) s->dev[i] = xent_cuda_pointer_device(s->ptr[i]);
  switch (ex->backend) {
    case XENT_BACKEND_AUTO:
      if (s->n > 0 && s->dev[0] >= 0) {
        ex->backend = XENT_BACKEND_CUDA;
        ex->device = s->dev[0];
      } else {
        ex->backend = XENT_BACKEND_CPU;
      }
      break;
    case XENT_BACKEND_CPU: break;
    case XENT_BACKEND_CUDA:
      if (!cuda)
        return xent_fail(XENT_ERROR_UNSUPPORTED,
                         "backend CUDA requested but this build of xent has no CUDA backend");
      if (ex->device < 0)
        return xent_fail(XENT_ERROR_BAD_ARGUMENT, "device is %d; it must be >= 0", ex->device);
      break;
    default:
      return xent_fail(XENT_ERROR_BAD_ENUM, "backend %d is not a xent_backend", (int)ex->backend);
  }
  if (!cuda) return XENT_OK; /* every pointer is host memory */
  for (int i = 0; i < s->n; i++) {
    if (ex->backend == XENT_BACKEND_CUDA && s->dev[i] < 0)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "%s is host memory but the backend is CUDA: pass device memory",
                       s->name[i]);
    if (ex->backend == XENT_BACKEND_CPU && s->dev[i] >= 0)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "%s is device memory (device %d) but the backend is CPU", s->name[i],
                       s->dev[i]);
  }
  return XENT_OK;
}
