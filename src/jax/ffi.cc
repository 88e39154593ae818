/*
 * ffi.cc - xent's calls as XLA FFI handlers, for JAX (python/xent/jax/).
 *
 * Each handler reads XLA's buffers and attributes into xent's structs and
 * calls the public C API (include/xent.h) on the call's stream, or on the
 * CPU; nothing here computes, and nothing below the API is reached. The
 * same handler serves both platforms; the CUDA symbols add the stream and
 * XLA's scratch allocator for the workspace. An empty buffer (no elements)
 * stands for an argument or output that is not given (NULL in the C API).
 *
 *   xent_jax_ce_{cpu,cuda}          xent_forward, or xent_forward_grad with
 *                                   the gradient written over the logits'
 *                                   buffer, which the gradient output aliases
 *   xent_jax_linear_{cpu,cuda}      xent_linear_forward(_backward)
 *   xent_jax_vp_stats_{cpu,cuda}    xent_vp_stats
 *   xent_jax_vp_forward_{cpu,cuda}  xent_vp_forward, the shard's gradient as
 *                                   the loss's
 *
 * The options come as attributes (xent_options' fields by name, softcap 0
 * for none); errors come back as the call's error with xent's message.
 */
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "xent.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

/* Where a handler runs: the CPU, or a CUDA stream with XLA's scratch. */
struct Where {
  bool cuda;
  void *stream;
  ffi::ScratchAllocator *scratch;
};

ffi::Error failed(xent_status st) {
  const bool user = st == XENT_ERROR_BAD_TARGET || st == XENT_ERROR_BAD_WEIGHT ||
                    st == XENT_ERROR_BAD_SHAPE || st == XENT_ERROR_BAD_ARGUMENT ||
                    st == XENT_ERROR_BAD_LABEL_SMOOTHING || st == XENT_ERROR_BAD_SOFTCAP ||
                    st == XENT_ERROR_BAD_STRIDE || st == XENT_ERROR_BAD_ENUM;
  return ffi::Error(user ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal,
                    std::string("xent: ") + xent_status_string(st) + ": " + xent_last_error());
}

ffi::Error invalid(const std::string &what) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "xent: " + what);
}

/* The logits' (or hidden states', weight's) dtype, or nothing. */
std::optional<xent_dtype> float_dtype(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32: return XENT_FLOAT32;
    case ffi::DataType::BF16: return XENT_BFLOAT16;
    case ffi::DataType::F16: return XENT_FLOAT16;
    default: return std::nullopt;
  }
}

std::optional<xent_index_type> index_type(ffi::DataType t) {
  if (t == ffi::DataType::S32) return XENT_INT32;
  if (t == ffi::DataType::S64) return XENT_INT64;
  return std::nullopt;
}

/* The buffer's data, or NULL for an empty buffer (not given). */
void *data(const ffi::AnyBuffer &b) { return b.element_count() ? b.untyped_data() : nullptr; }

/* An attribute, or `fallback` when the call does not set it. */
template <typename T>
T attr(const ffi::Dictionary &d, std::string_view name, T fallback) {
  if (!d.contains(name)) return fallback;
  auto v = d.get<T>(name);
  return v.has_value() ? *v : fallback;
}

/* xent_options from the attributes. */
xent_options options(const ffi::Dictionary &d) {
  xent_options o = xent_options_default();
  o.reduction = (xent_reduction)attr<int64_t>(d, "reduction", XENT_REDUCTION_MEAN);
  o.ignore_index = attr<int64_t>(d, "ignore_index", -100);
  o.label_smoothing = attr<float>(d, "label_smoothing", 0.0f);
  o.lse_square_scale = attr<float>(d, "lse_square_scale", 0.0f);
  const float cap = attr<float>(d, "softcap", 0.0f);
  o.use_softcap = cap != 0.0f;
  o.softcap = cap;
  o.target_check = (xent_target_check)attr<int64_t>(d, "target_check", XENT_TARGETS_CHECKED);
  o.empty_mean = (xent_empty_mean)attr<int64_t>(d, "empty_mean", XENT_EMPTY_MEAN_NAN);
  return o;
}

/* The call's exec, with a workspace of `bytes` from XLA's scratch on CUDA:
 * asked for with 16-byte alignment (XLA refuses any larger one, and then
 * gives nothing) and aligned to xent's 256 here. Where XLA has no scratch to
 * give, xent takes its workspace stream-ordered itself (ex.workspace NULL),
 * as it does for any caller that passes none. */
xent_exec exec_for(const Where &w, size_t bytes) {
  xent_exec ex = xent_exec_default();
  ex.backend = w.cuda ? XENT_BACKEND_CUDA : XENT_BACKEND_CPU;
  if (!w.cuda) return ex;
  ex.stream = w.stream;
  if (bytes > 0 && w.scratch) {
    std::optional<void *> p = w.scratch->Allocate(bytes + 256, 16);
    if (p.has_value() && *p) {
      const uintptr_t a = ((uintptr_t)*p + 255) & ~(uintptr_t)255;
      ex.workspace = (void *)a;
      ex.workspace_bytes = bytes;
    }
  }
  return ex;
}

/* The outputs of a forward, rets[first ...]: loss, z-loss, accuracy, lse,
 * predicted (int32 pairs holding the int64 values; the low word is the
 * value for JAX without 64-bit types). */
std::optional<xent_output> outputs(ffi::RemainingRets &rets, size_t first) {
  xent_output out = {nullptr, nullptr, nullptr, nullptr, nullptr};
  void *p[5];
  for (size_t i = 0; i < 5; i++) {
    auto r = rets.get<ffi::AnyBuffer>(first + i);
    if (!r.has_value()) return std::nullopt;
    p[i] = data(**r);
  }
  out.loss = (float *)p[0];
  out.z_loss = (float *)p[1];
  out.token_accuracy = (float *)p[2];
  out.lse = (float *)p[3];
  out.predicted = (int64_t *)p[4];
  return out;
}

/* logits (..., V) as rows x V: the shape's checks. */
ffi::Error rows_of(const ffi::AnyBuffer &b, const char *name, int64_t *rows, int64_t *cols) {
  auto dims = b.dimensions();
  if (dims.size() < 1) return invalid(std::string(name) + " must have at least one dimension");
  *cols = dims.back();
  *rows = 1;
  for (size_t i = 0; i + 1 < dims.size(); i++) *rows *= dims[i];
  return ffi::Error::Success();
}

/* xent_input of a (shard of) logits `x`, its targets and class weights. */
ffi::Error input_of(const ffi::AnyBuffer &x, void *logits, const ffi::AnyBuffer &targets,
                    const ffi::AnyBuffer &weights, xent_input *in) {
  auto dt = float_dtype(x.element_type());
  auto tt = index_type(targets.element_type());
  if (!dt) return invalid("logits must be float32, bfloat16 or float16");
  if (!tt) return invalid("targets must be int32 or int64");
  if (data(weights) && weights.element_type() != ffi::DataType::F32)
    return invalid("weights must be float32");
  int64_t rows = 0, cols = 0;
  ffi::Error e = rows_of(x, "logits", &rows, &cols);
  if (e.failure()) return e;
  if ((int64_t)targets.element_count() != rows)
    return invalid("targets must hold one index per row of logits");
  *in = {logits, *dt, rows, cols, 0, data(targets), *tt, (const float *)data(weights)};
  return ffi::Error::Success();
}

/* The gradient output of rets[0], which must alias the logits (input 0). */
ffi::Error aliased(ffi::RemainingRets &rets, const ffi::AnyBuffer &x, void **grad) {
  auto r = rets.get<ffi::AnyBuffer>(0);
  if (!r.has_value()) return invalid("the gradient output is missing");
  *grad = (**r).untyped_data();
  if (*grad != x.untyped_data() && x.element_count() > 0)
    return ffi::Error::Internal(
        "xent: the gradient output does not alias the logits (input_output_aliases)");
  return ffi::Error::Success();
}

/* A forward over (a shard of) logits: the gradient over the logits' buffer
 * when the call asks for one, the outputs, the exec with its workspace. */
struct Forward {
  bool grad;
  xent_input in;
  xent_options opt;
  xent_output out;
  xent_exec ex;
};

ffi::Error forward_of(const Where &w, const ffi::AnyBuffer &x, const ffi::AnyBuffer &targets,
                      const ffi::AnyBuffer &weights, ffi::RemainingRets &rets,
                      const ffi::Dictionary &attrs, Forward *f) {
  f->grad = attr<int64_t>(attrs, "grad", 0) != 0;
  void *logits = x.untyped_data();
  if (f->grad) {
    ffi::Error e = aliased(rets, x, &logits);
    if (e.failure()) return e;
  }
  ffi::Error e = input_of(x, logits, targets, weights, &f->in);
  if (e.failure()) return e;
  f->opt = options(attrs);
  auto out = outputs(rets, f->grad ? 1 : 0);
  if (!out) return invalid("the loss's outputs are missing");
  f->out = *out;
  f->ex = exec_for(w, xent_workspace_size(f->in.rows));
  return ffi::Error::Success();
}

ffi::Error Ce(const Where &w, ffi::AnyBuffer x, ffi::AnyBuffer targets, ffi::AnyBuffer weights,
              ffi::RemainingRets rets, ffi::Dictionary attrs) {
  Forward f;
  ffi::Error e = forward_of(w, x, targets, weights, rets, attrs, &f);
  if (e.failure()) return e;
  const xent_status st = f.grad ? xent_forward_grad(&f.in, &f.opt, &f.out, &f.ex)
                                : xent_forward(&f.in, &f.opt, &f.out, &f.ex);
  return st ? failed(st) : ffi::Error::Success();
}

ffi::Error Linear(const Where &w, ffi::AnyBuffer hidden, ffi::AnyBuffer weight,
                  ffi::AnyBuffer bias, ffi::AnyBuffer targets, ffi::AnyBuffer class_weights,
                  ffi::AnyBuffer grad_output, ffi::RemainingRets rets, ffi::Dictionary attrs) {
  auto dt = float_dtype(hidden.element_type());
  auto tt = index_type(targets.element_type());
  if (!dt || weight.element_type() != hidden.element_type() ||
      (data(bias) && bias.element_type() != hidden.element_type()))
    return invalid("hidden, weight and bias must share one of float32, bfloat16, float16");
  if (!tt) return invalid("targets must be int32 or int64");
  int64_t rows = 0, H = 0, V = 0, H2 = 0;
  ffi::Error e = rows_of(hidden, "hidden", &rows, &H);
  if (e.failure()) return e;
  if ((e = rows_of(weight, "weight", &V, &H2)).failure()) return e;
  if (H2 != H || weight.dimensions().size() != 2)
    return invalid("weight must be (vocab, hidden_size)");
  xent_linear_input in;
  in.hidden = data(hidden);
  in.rows = rows;
  in.hidden_size = H;
  in.hidden_stride = 0;
  in.weight = weight.untyped_data();
  in.vocab = V;
  in.weight_stride = 0;
  in.bias = data(bias);
  in.dtype = *dt;
  in.targets = data(targets);
  in.target_type = *tt;
  in.class_weights = (const float *)data(class_weights);
  const xent_options opt = options(attrs);
  xent_linear_options lo = XENT_LINEAR_OPTIONS_INIT;
  lo.use_token_scaling = (int)attr<int64_t>(attrs, "token_scaling", 0);
  lo.chunk_rows = attr<int64_t>(attrs, "chunk_rows", 0);
  lo.memory_budget = (size_t)attr<int64_t>(attrs, "memory_budget", 0);
  lo.schedule = (xent_linear_schedule)attr<int64_t>(attrs, "schedule", XENT_SCHEDULE_AUTO);
  auto out = outputs(rets, 0);
  if (!out) return invalid("the loss's outputs are missing");
  void *gp[3];
  xent_dtype gdt[3];
  for (size_t i = 0; i < 3; i++) { /* dX, dW, db */
    auto r = rets.get<ffi::AnyBuffer>(5 + i);
    if (!r.has_value()) return invalid("the gradient outputs are missing");
    const ffi::AnyBuffer b = **r;
    gp[i] = data(b);
    gdt[i] = float_dtype(b.element_type()).value_or(*dt);
  }
  xent_linear_grads g;
  g.hidden = gp[0];
  g.hidden_stride = 0;
  g.hidden_dtype = gdt[0];
  g.weight = gp[1];
  g.weight_stride = 0;
  g.weight_dtype = gdt[1];
  g.bias = gp[2];
  g.bias_dtype = gdt[2];
  g.accumulate = 0;
  g.weight_accum = attr<int64_t>(attrs, "accum_fp32", 0) ? XENT_ACCUM_FP32 : XENT_ACCUM_GRAD;
  g.grad_output = (const float *)data(grad_output);
  g.grad_output_count = (int64_t)grad_output.element_count();
  const bool backward = g.hidden || g.weight || g.bias;
  const size_t bytes = w.cuda ? xent_linear_workspace_size(&in, &lo, backward ? &g : nullptr) : 0;
  if (w.cuda && bytes == 0) return failed(XENT_ERROR_BAD_ARGUMENT);
  const xent_exec ex = exec_for(w, bytes);
  const xent_status st = backward ? xent_linear_forward_backward(&in, &opt, &lo, &*out, &g, &ex)
                                  : xent_linear_forward(&in, &opt, &lo, &*out, &ex);
  return st ? failed(st) : ffi::Error::Success();
}

ffi::Error VpStats(const Where &w, ffi::AnyBuffer x, ffi::AnyBuffer targets,
                   ffi::AnyBuffer weights, ffi::RemainingRets rets, ffi::Dictionary attrs) {
  xent_input in;
  ffi::Error e = input_of(x, x.untyped_data(), targets, weights, &in);
  if (e.failure()) return e;
  auto r = rets.get<ffi::AnyBuffer>(0);
  if (!r.has_value()) return invalid("the records output is missing");
  float *records = (float *)(**r).untyped_data();
  const xent_options opt = options(attrs);
  /* The record's size follows from whether an arg-max output will be asked
   * for in step 3; step 1 only reads whether the pointer is set, so any
   * pointer on the records' side stands for it. */
  xent_output out = {nullptr, nullptr, nullptr, nullptr, nullptr};
  if (attr<int64_t>(attrs, "argmax", 0)) out.token_accuracy = records;
  const int R = xent_vp_record_floats(&opt, in.weights, &out);
  if ((int64_t)(**r).element_count() != in.rows * R)
    return invalid("records must hold " + std::to_string(R) + " floats a row");
  const xent_exec ex = exec_for(w, 0);
  const xent_status st = xent_vp_stats(&in, attr<int64_t>(attrs, "vocab", 0),
                                       attr<int64_t>(attrs, "offset", 0), &opt, &out,
                                       records, &ex);
  return st ? failed(st) : ffi::Error::Success();
}

ffi::Error VpForward(const Where &w, ffi::AnyBuffer x, ffi::AnyBuffer targets,
                     ffi::AnyBuffer weights, ffi::AnyBuffer gathered, ffi::RemainingRets rets,
                     ffi::Dictionary attrs) {
  Forward f;
  ffi::Error e = forward_of(w, x, targets, weights, rets, attrs, &f);
  if (e.failure()) return e;
  const xent_status st = xent_vp_forward(
      &f.in, attr<int64_t>(attrs, "vocab", 0), attr<int64_t>(attrs, "offset", 0), &f.opt,
      (const float *)gathered.untyped_data(), (int)attr<int64_t>(attrs, "ranks", 1), &f.out,
      f.grad ? 1 : 0, &f.ex);
  return st ? failed(st) : ffi::Error::Success();
}

/* The two platforms' entry points of each handler. */
ffi::Error CeCpu(ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer wt, ffi::RemainingRets r,
                 ffi::Dictionary a) {
  return Ce({false, nullptr, nullptr}, x, t, wt, r, a);
}
ffi::Error CeCuda(void *stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x, ffi::AnyBuffer t,
                  ffi::AnyBuffer wt, ffi::RemainingRets r, ffi::Dictionary a) {
  return Ce({true, stream, &scratch}, x, t, wt, r, a);
}
ffi::Error LinearCpu(ffi::AnyBuffer h, ffi::AnyBuffer wt, ffi::AnyBuffer b, ffi::AnyBuffer t,
                     ffi::AnyBuffer cw, ffi::AnyBuffer go, ffi::RemainingRets r,
                     ffi::Dictionary a) {
  return Linear({false, nullptr, nullptr}, h, wt, b, t, cw, go, r, a);
}
ffi::Error LinearCuda(void *stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer h,
                      ffi::AnyBuffer wt, ffi::AnyBuffer b, ffi::AnyBuffer t, ffi::AnyBuffer cw,
                      ffi::AnyBuffer go, ffi::RemainingRets r, ffi::Dictionary a) {
  return Linear({true, stream, &scratch}, h, wt, b, t, cw, go, r, a);
}
ffi::Error VpStatsCpu(ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer wt, ffi::RemainingRets r,
                      ffi::Dictionary a) {
  return VpStats({false, nullptr, nullptr}, x, t, wt, r, a);
}
ffi::Error VpStatsCuda(void *stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                       ffi::AnyBuffer t, ffi::AnyBuffer wt, ffi::RemainingRets r,
                       ffi::Dictionary a) {
  return VpStats({true, stream, &scratch}, x, t, wt, r, a);
}
ffi::Error VpForwardCpu(ffi::AnyBuffer x, ffi::AnyBuffer t, ffi::AnyBuffer wt, ffi::AnyBuffer gat,
                        ffi::RemainingRets r, ffi::Dictionary a) {
  return VpForward({false, nullptr, nullptr}, x, t, wt, gat, r, a);
}
ffi::Error VpForwardCuda(void *stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer x,
                         ffi::AnyBuffer t, ffi::AnyBuffer wt, ffi::AnyBuffer gat,
                         ffi::RemainingRets r, ffi::Dictionary a) {
  return VpForward({true, stream, &scratch}, x, t, wt, gat, r, a);
}

}  // namespace

#define XENT_JAX_ARGS_CE Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>().Arg<ffi::AnyBuffer>()
/* hidden, weight, bias, targets, class weights, upstream gradient */
#define XENT_JAX_ARGS_LINEAR XENT_JAX_ARGS_CE.XENT_JAX_ARGS_CE
#define XENT_JAX_CUDA_CTX Ctx<ffi::PlatformStream<void *>>().Ctx<ffi::ScratchAllocator>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_ce_cpu, CeCpu,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_ARGS_CE.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_ce_cuda, CeCuda,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_CUDA_CTX.XENT_JAX_ARGS_CE.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_linear_cpu, LinearCpu,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_ARGS_LINEAR.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_linear_cuda, LinearCuda,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_CUDA_CTX.XENT_JAX_ARGS_LINEAR.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_vp_stats_cpu, VpStatsCpu,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_ARGS_CE.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_vp_stats_cuda, VpStatsCuda,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_CUDA_CTX.XENT_JAX_ARGS_CE.RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_vp_forward_cpu, VpForwardCpu,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_ARGS_CE.Arg<ffi::AnyBuffer>()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(xent_jax_vp_forward_cuda, VpForwardCuda,
                              ffi::Ffi::Bind()
                                  .XENT_JAX_CUDA_CTX.XENT_JAX_ARGS_CE.Arg<ffi::AnyBuffer>()
                                  .RemainingRets()
                                  .Attrs<ffi::Dictionary>());
