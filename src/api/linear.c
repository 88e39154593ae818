/*
 * linear.c - the public fused linear cross-entropy API: argument checking,
 * the chunk plan, and dispatch to a backend. As in xent.c, every argument
 * the host can see is checked before anything the caller owns is written.
 */
#include <stdio.h>
#include <string.h>

#include "api/checks.h"
#include "api/experimental.h"
#include "common/dtype.h"
#include "common/error.h"
#include "common/linear.h"
#include "common/vp.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"
#include "xent_experimental.h"

static _Thread_local char last_linear[64] = "none";

const char *xent_experimental_last_linear(void) { return last_linear; }

static const char *dtype_name(xent_dtype d) {
  return d == XENT_FLOAT32 ? "float32" : d == XENT_BFLOAT16 ? "bfloat16" : "float16";
}

/* A gradient's dtype: the input's, or fp32. */
static xent_status check_grad_dtype(const char *name, xent_dtype g, xent_dtype in) {
  if (xent_dtype_size(g) == 0)
    return xent_fail(XENT_ERROR_BAD_ENUM, "%s %d is not a xent_dtype", name, (int)g);
  if (g != in && g != XENT_FLOAT32)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "%s is %s; it must be the input's dtype (%s) or float32", name,
                     dtype_name(g), dtype_name(in));
  return XENT_OK;
}

/* What the plan needs to know of a call (grads NULL: a forward); cuda: the
 * CUDA backend's facts (its rate for the auto schedule, its dX split), else
 * the CPU's. */
static xent_linear_facts plan_facts(const xent_linear_input *in, const xent_linear_grads *g,
                                    int cuda) {
  xent_linear_facts f;
  memset(&f, 0, sizeof f);
  f.rows = in->rows;
  f.vocab = in->vocab;
  f.hidden = in->hidden_size;
  f.elem_bytes = xent_dtype_size(in->dtype);
  if (g) {
    f.weight_grad = g->weight ? xent_dtype_size(g->weight_dtype) : 0;
    f.hidden_grad = g->hidden ? xent_dtype_size(g->hidden_dtype) : 0;
    f.bias_grad = g->bias != NULL;
    f.accum_fp32 = g->weight_accum == XENT_ACCUM_FP32;
  }
  /* the full record whatever the options: the plan, and so the workspace's
   * size, depends on the shapes and the gradients only */
  f.record = XENT_VP_FULL;
  f.flop_per_byte = cuda ? XENT_LINEAR_CUDA_FLOP_PER_BYTE : 0.0;
  f.dx_split = cuda ? XENT_LINEAR_CUDA_DX_SPLIT : 0;
  return f;
}

static xent_status check_schedule(const xent_linear_options *lo) {
  if (lo->schedule != XENT_SCHEDULE_AUTO && lo->schedule != XENT_SCHEDULE_ROWS &&
      lo->schedule != XENT_SCHEDULE_VOCAB)
    return xent_fail(XENT_ERROR_BAD_ENUM, "schedule %d is not a xent_linear_schedule",
                     (int)lo->schedule);
  if (lo->schedule == XENT_SCHEDULE_VOCAB && lo->chunk_rows > 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "chunk_rows is %lld with schedule XENT_SCHEDULE_VOCAB; chunk_rows sets the "
                     "rows schedule's chunks (use memory_budget, or 0)",
                     (long long)lo->chunk_rows);
  return XENT_OK;
}

/* Everything of in, lopt and grads that the plan depends on or that a call
 * would refuse: shapes, strides and extents, dtypes, enums and flags, the
 * alignment of each pointer given. The size query and the calls share it;
 * `call` also asks for the pointers a call reads (a size may be asked for
 * before the buffers exist). On success c->in, c->lo and c->g hold the
 * arguments with their strides normalised, c->backward whether a gradient
 * is asked for. */
static xent_status check_linear_args(const xent_linear_input *in,
                                     const xent_linear_options *lopt,
                                     const xent_linear_grads *grads, int call,
                                     xent_linear_call *c) {
  c->in = *in;
  xent_linear_options lo = XENT_LINEAR_OPTIONS_INIT;
  if (lopt) lo = *lopt;
  c->lo = lo;
  const size_t es = xent_dtype_size(in->dtype);
  if (es == 0)
    return xent_fail(XENT_ERROR_BAD_ENUM, "dtype %d is not a xent_dtype", (int)in->dtype);
  if (in->rows < 0)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "rows is %lld; it must be >= 0", (long long)in->rows);
  if (in->hidden_size < 1 || in->hidden_size > INT32_MAX)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "hidden_size is %lld; it must be in [1, %d]",
                     (long long)in->hidden_size, INT32_MAX);
  if (in->vocab < 1 || in->vocab > INT32_MAX)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "vocab is %lld; it must be in [1, %d]",
                     (long long)in->vocab, INT32_MAX);
  const int64_t rows = in->rows, H = in->hidden_size, V = in->vocab;
  /* the logits are never held whole, but the plan sizes its pieces from them */
  if ((double)rows * (double)V * (double)es >= 0x1p62)
    return xent_fail(XENT_ERROR_BAD_SHAPE,
                     "rows %lld x vocab %lld: the logits' extent overflows what the plan can "
                     "count", (long long)rows, (long long)V);
  xent_status st;
  if ((st = xent_check_layout("hidden", "hidden_stride", "hidden_size", in->hidden, in->dtype,
                              rows, H, &c->in.hidden_stride, call && rows > 0)))
    return st;
  if ((st = xent_check_layout("weight", "weight_stride", "hidden_size", in->weight, in->dtype,
                              V, H, &c->in.weight_stride, call)))
    return st;
  if (in->bias && !xent_aligned(in->bias, es))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "bias is not aligned to its element");
  if (lo.use_token_scaling != 0 && lo.use_token_scaling != 1)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "use_token_scaling is %d; it must be 0 or 1",
                     lo.use_token_scaling);
  if (lo.chunk_rows < 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "chunk_rows is %lld; it must be >= 0",
                     (long long)lo.chunk_rows);
  if ((st = check_schedule(&lo))) return st;
  if (!grads) return XENT_OK;

  xent_linear_grads g = *grads;
  /* the accumulation mode decides the plan whichever gradient it applies to */
  if (g.weight_accum != XENT_ACCUM_GRAD && g.weight_accum != XENT_ACCUM_FP32)
    return xent_fail(XENT_ERROR_BAD_ENUM, "grads->weight_accum %d is not a xent_accum",
                     (int)g.weight_accum);
  if (g.hidden) {
    if ((st = check_grad_dtype("grads->hidden_dtype", g.hidden_dtype, in->dtype))) return st;
    if ((st = xent_check_layout("grads->hidden", "grads->hidden_stride", "hidden_size",
                                g.hidden, g.hidden_dtype, rows, H, &g.hidden_stride, 0)))
      return st;
  }
  if (g.weight) {
    if ((st = check_grad_dtype("grads->weight_dtype", g.weight_dtype, in->dtype))) return st;
    if ((st = xent_check_layout("grads->weight", "grads->weight_stride", "hidden_size",
                                g.weight, g.weight_dtype, V, H, &g.weight_stride, 0)))
      return st;
  }
  if (g.bias) {
    if (!in->bias)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grads->bias is set but the input has no bias");
    if ((st = check_grad_dtype("grads->bias_dtype", g.bias_dtype, in->dtype))) return st;
    if (!xent_aligned(g.bias, xent_dtype_size(g.bias_dtype)))
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grads->bias is not aligned to its element");
  }
  if (g.accumulate != 0 && g.accumulate != 1)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grads->accumulate is %d; it must be 0 or 1",
                     g.accumulate);
  if (g.grad_output) {
    if (g.grad_output_count != 1 && g.grad_output_count != rows)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "grads->grad_output_count is %lld; it must be 1 (reduction mean or sum) "
                       "or rows = %lld (reduction none)",
                       (long long)g.grad_output_count, (long long)rows);
    if (!xent_aligned(g.grad_output, 4))
      return xent_fail(XENT_ERROR_BAD_ARGUMENT, "grads->grad_output is not 4-byte aligned");
  }
  c->g = g;
  c->backward = g.hidden || g.weight || g.bias;
  return XENT_OK;
}

/* The message of a plan that does not fit an explicit budget. */
static xent_status budget_fail(const xent_linear_call *c) {
  const int64_t rows = c->in.rows, V = c->in.vocab;
  const size_t es = xent_dtype_size(c->in.dtype);
  if (c->lo.schedule == XENT_SCHEDULE_VOCAB && c->backward)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "memory_budget %zu bytes cannot hold a slab of %d columns of every row "
                     "(%lld bytes each) and the fixed scratch", c->lo.memory_budget,
                     XENT_LINEAR_MIN_SLAB, (long long)(rows * (int64_t)es));
  return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                   "memory_budget %zu bytes cannot hold one row of logits (%lld bytes) and "
                   "the fixed scratch", c->lo.memory_budget, (long long)(V * (int64_t)es));
}

size_t xent_linear_workspace_size(const xent_linear_input *in, const xent_linear_options *lopt,
                                  const xent_linear_grads *grads) {
  xent_clear_error();
  if (!in) {
    xent_fail(XENT_ERROR_NULL_POINTER, "in (xent_linear_input) is NULL");
    return 0;
  }
  xent_linear_call c;
  memset(&c, 0, sizeof c);
  if (check_linear_args(in, lopt, grads, 0, &c)) return 0;
  /* the CUDA backend's scratch, so its plan */
  const xent_linear_facts f = plan_facts(&c.in, grads ? &c.g : NULL, 1);
  xent_linear_plan plan;
  if (xent_linear_make_plan(&f, &c.lo, &plan)) {
    budget_fail(&c);
    return 0;
  }
  return plan.total;
}

static xent_status linear_common(const xent_linear_input *in, const xent_options *opt,
                                 const xent_linear_options *lopt, const xent_output *out,
                                 const xent_linear_grads *grads, const xent_exec *exec) {
  xent_clear_error();
  if (!in) return xent_fail(XENT_ERROR_NULL_POINTER, "in (xent_linear_input) is NULL");
  if (!opt) return xent_fail(XENT_ERROR_NULL_POINTER, "opt (xent_options) is NULL");
  if (!out) return xent_fail(XENT_ERROR_NULL_POINTER, "out (xent_output) is NULL");
  if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");

  xent_linear_call c;
  memset(&c, 0, sizeof c);
  c.opt = *opt;
  c.out = *out;
  c.ex = *exec;
  c.exp = xent_experimental_current();
  xent_status st = check_linear_args(in, lopt, grads, 1, &c);
  if (st) return st;
  const int64_t rows = in->rows, V = in->vocab;
  if ((st = xent_check_targets(in->targets, in->target_type, rows))) return st;
  if (in->class_weights && !xent_aligned(in->class_weights, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "class_weights is not 4-byte aligned");
  if ((st = xent_check_options(opt))) return st;
  if (opt->target_check == XENT_TARGETS_DEFERRED)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "target_check XENT_TARGETS_DEFERRED is not available for the fused linear "
                     "loss; use XENT_TARGETS_CHECKED or XENT_TARGETS_UNCHECKED");
  if ((st = xent_check_outputs(out, opt->reduction, rows))) return st;
  if (c.g.grad_output && c.g.grad_output_count != 1 && opt->reduction != XENT_REDUCTION_NONE)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "grads->grad_output_count is %lld; it must be 1 with reduction mean or sum",
                     (long long)c.g.grad_output_count);

  xent_sides sides = {0};
  xent_sides_add(&sides, "weight", in->weight);
  xent_sides_add(&sides, "hidden", in->hidden);
  xent_sides_add(&sides, "bias", in->bias);
  xent_sides_add(&sides, "targets", in->targets);
  xent_sides_add(&sides, "class_weights", in->class_weights);
  xent_sides_add(&sides, "out->loss", out->loss);
  xent_sides_add(&sides, "out->z_loss", out->z_loss);
  xent_sides_add(&sides, "out->token_accuracy", out->token_accuracy);
  xent_sides_add(&sides, "out->predicted", out->predicted);
  xent_sides_add(&sides, "out->lse", out->lse);
  xent_sides_add(&sides, "grads->hidden", c.g.hidden);
  xent_sides_add(&sides, "grads->weight", c.g.weight);
  xent_sides_add(&sides, "grads->bias", c.g.bias);
  xent_sides_add(&sides, "grads->grad_output", c.g.grad_output);
  if ((st = xent_resolve(&c.ex, &sides))) return st;

  /* auto takes rows on the CPU: its vocab schedule was slower at every shape
   * measured (bench/NOTES.md, v29) */
  const xent_linear_facts facts =
      plan_facts(&c.in, grads ? &c.g : NULL, c.ex.backend != XENT_BACKEND_CPU);
  if (xent_linear_make_plan(&facts, &c.lo, &c.plan)) return budget_fail(&c);

  if (c.plan.by_vocab)
    snprintf(last_linear, sizeof last_linear, "vocab slab=%lld slabs=%lld",
             (long long)c.plan.slab, (long long)c.plan.slabs);
  else
    snprintf(last_linear, sizeof last_linear, "rows chunk=%lld chunks=%lld",
             (long long)c.plan.chunk,
             (long long)(c.plan.chunk > 0 ? (rows + c.plan.chunk - 1) / c.plan.chunk : 0));
  if (c.ex.backend == XENT_BACKEND_CPU) {
    if ((st = xent_check_host_targets(in->targets, in->target_type, rows, V, opt->ignore_index,
                                      in->class_weights, "class_weights")))
      return st;
    return xent_cpu_linear(&c);
  }
  if (c.ex.workspace && !xent_aligned(c.ex.workspace, 256))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "workspace is not 256-byte aligned");
  if (c.ex.workspace && c.ex.workspace_bytes < c.plan.total)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "workspace_bytes is %zu; this call needs xent_linear_workspace_size() = %zu",
                     c.ex.workspace_bytes, c.plan.total);
  return xent_cuda_linear(&c);
}

xent_status xent_linear_forward(const xent_linear_input *in, const xent_options *opt,
                                const xent_linear_options *lopt, const xent_output *out,
                                const xent_exec *exec) {
  return linear_common(in, opt, lopt, out, NULL, exec);
}

xent_status xent_linear_forward_backward(const xent_linear_input *in, const xent_options *opt,
                                         const xent_linear_options *lopt,
                                         const xent_output *out, const xent_linear_grads *grads,
                                         const xent_exec *exec) {
  return linear_common(in, opt, lopt, out, grads, exec);
}
