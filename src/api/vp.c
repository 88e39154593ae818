/*
 * vp.c - the public vocabulary-parallel calls: argument checks and dispatch.
 * Everything the host can see is checked before anything is written.
 */
#include <string.h>

#include "api/checks.h"
#include "api/experimental.h"
#include "common/error.h"
#include "common/vp.h"
#include "cpu/cpu.h"
#include "cuda/cuda.h"

int xent_vp_record_floats(const xent_options *opt, const float *weights,
                          const xent_output *out) {
  const int smoothing_weights = opt && weights && opt->label_smoothing > 0.0f;
  const int argmax = out && (out->token_accuracy || out->predicted);
  return smoothing_weights || argmax ? XENT_VP_FULL : XENT_VP_SMALL;
}

static xent_status vp_common(xent_vp_call *v, const xent_input *in, int64_t vocab,
                             int64_t offset, const xent_options *opt, const xent_output *out,
                             const xent_exec *exec, int forward) {
  xent_clear_error();
  if (!in) return xent_fail(XENT_ERROR_NULL_POINTER, "in (xent_input) is NULL");
  if (!opt) return xent_fail(XENT_ERROR_NULL_POINTER, "opt (xent_options) is NULL");
  if (!out) return xent_fail(XENT_ERROR_NULL_POINTER, "out (xent_output) is NULL");
  if (!exec) return xent_fail(XENT_ERROR_NULL_POINTER, "exec (xent_exec) is NULL");
  xent_call *c = &v->c;
  memset(c, 0, sizeof *c);
  c->in = *in;
  c->opt = *opt;
  c->out = *out;
  c->ex = *exec;
  c->exp = xent_experimental_current();
  xent_status st = xent_check_matrix("logits", in->logits, in->dtype, in->rows, in->vocab,
                                     &c->in.row_stride);
  if (st) return st;
  if (vocab < in->vocab || vocab > INT32_MAX)
    return xent_fail(XENT_ERROR_BAD_SHAPE,
                     "vocab (the global V) is %lld; it must be in [the shard's width %lld, %d]",
                     (long long)vocab, (long long)in->vocab, INT32_MAX);
  if (offset < 0 || offset > vocab - in->vocab)
    return xent_fail(XENT_ERROR_BAD_SHAPE,
                     "offset %lld with width %lld does not lie within [0, vocab %lld)",
                     (long long)offset, (long long)in->vocab, (long long)vocab);
  if ((st = xent_check_targets(in->targets, in->target_type, in->rows))) return st;
  if (in->weights && !xent_aligned(in->weights, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "weights is not 4-byte aligned");
  if ((st = xent_check_options(opt))) return st;
  if (forward && (st = xent_check_outputs(out, opt->reduction, in->rows))) return st;
  v->vocab = vocab;
  v->offset = offset;
  v->record = xent_vp_record_floats(opt, in->weights, out);
  return XENT_OK;
}

static xent_status vp_resolve(xent_vp_call *v, const float *records, const char *records_name,
                              int forward) {
  xent_call *c = &v->c;
  xent_sides sides = {0};
  xent_sides_add(&sides, "logits", c->in.logits);
  xent_sides_add(&sides, "targets", c->in.targets);
  xent_sides_add(&sides, "weights", c->in.weights);
  xent_sides_add(&sides, records_name, records);
  xent_sides_add(&sides, "out->loss", c->out.loss);
  xent_sides_add(&sides, "out->z_loss", c->out.z_loss);
  xent_sides_add(&sides, "out->token_accuracy", c->out.token_accuracy);
  xent_sides_add(&sides, "out->predicted", c->out.predicted);
  xent_sides_add(&sides, "out->lse", c->out.lse);
  xent_status st = xent_resolve(&c->ex, &sides);
  if (st) return st;
  if (c->ex.backend == XENT_BACKEND_CPU)
    return xent_check_host_targets(c->in.targets, c->in.target_type, c->in.rows, v->vocab,
                                   c->opt.ignore_index, c->in.weights, "weights");
  /* Deferred mode: step 3 checks on the device and leaves the verdict;
   * step 1 checks nothing (its bad rows' records are zeros). */
  return xent_check_cuda_exec(&c->ex, c->in.rows,
                              forward && c->opt.target_check == XENT_TARGETS_DEFERRED);
}

xent_status xent_vp_stats(const xent_input *in, int64_t vocab, int64_t offset,
                          const xent_options *opt, const xent_output *out, float *records,
                          const xent_exec *exec) {
  xent_vp_call v;
  memset(&v, 0, sizeof v);
  xent_status st = vp_common(&v, in, vocab, offset, opt, out, exec, 0);
  if (st) return st;
  if (in->rows > 0 && !records) return xent_fail(XENT_ERROR_NULL_POINTER, "records is NULL");
  if (records && !xent_aligned(records, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "records is not 4-byte aligned");
  v.records = records;
  if ((st = vp_resolve(&v, records, "records", 0))) return st;
  if (in->rows == 0) return XENT_OK;
  return v.c.ex.backend == XENT_BACKEND_CPU ? xent_cpu_vp_stats(&v) : xent_cuda_vp_stats(&v);
}

xent_status xent_vp_forward(const xent_input *in, int64_t vocab, int64_t offset,
                            const xent_options *opt, const float *gathered, int ranks,
                            const xent_output *out, int write_grad, const xent_exec *exec) {
  xent_vp_call v;
  memset(&v, 0, sizeof v);
  xent_status st = vp_common(&v, in, vocab, offset, opt, out, exec, 1);
  if (st) return st;
  if (ranks < 1)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "ranks is %d; it must be >= 1", ranks);
  if (in->rows > 0 && !gathered) return xent_fail(XENT_ERROR_NULL_POINTER, "gathered is NULL");
  if (gathered && !xent_aligned(gathered, 4))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "gathered is not 4-byte aligned");
  if (write_grad != 0 && write_grad != 1)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "write_grad is %d; it must be 0 or 1", write_grad);
  v.gathered = gathered;
  v.ranks = ranks;
  v.c.write_grad = write_grad;
  if ((st = vp_resolve(&v, gathered, "gathered", 1))) return st;
  return v.c.ex.backend == XENT_BACKEND_CPU ? xent_cpu_vp_forward(&v) : xent_cuda_vp_forward(&v);
}
