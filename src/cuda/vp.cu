/*
 * vp.cu - the CUDA vocabulary-parallel calls on the caller's stream:
 *   stats    (checked mode: the count kernel's verdict first) a warp per
 *            row (plain calls) or a block per row writes the row's record
 *   forward  the count kernel (N, W, the scales, the sum of all weights),
 *            a warp or a block per row (combine, outputs, the shard's
 *            gradient), and for mean and sum the finalize kernel
 * Checked mode waits for the verdict once the stats are queued, as the
 * single-GPU forward does. Deferred mode checks in the forward instead and
 * leaves the verdict in exec->verdict: its stats check nothing (a bad row's
 * record is zeros), so every rank reaches the collective, and a rejected
 * forward writes NaN reductions and clears the shard's gradient.
 */
#include <string.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/workspace.h"
#include "cuda/cuda.h"
#include "cuda/device.cuh"
#include "cuda/forward.cuh"
#include "cuda/kernels/vp.cuh"
#include "cuda/verdict.cuh"

namespace xent {

namespace {

/* The shard as a call over the whole vocabulary: what the count kernel and
 * the constants (eps = alpha / V, the sum of all weights) need. */
xent_call global_view(const xent_vp_call *v) {
  xent_call g = v->c;
  g.in.vocab = v->vocab;
  return g;
}

/* The stats kernel's variant: what the call's options fold (row.cuh). */
template <typename T, bool G>
void *stats_kernel(const fwd_params &p) {
  if (p.need_argmax)
    return p.k.smoothing ? (void *)vp_stats_kernel<T, G, true, true>
                         : (void *)vp_stats_kernel<T, G, true, false>;
  return p.k.smoothing ? (void *)vp_stats_kernel<T, G, false, true>
                       : (void *)vp_stats_kernel<T, G, false, false>;
}

/* Whether a call takes the warp-per-row kernels (kernels/vp.cuh): the
 * plain calls, and for the forward records that fit a warp's staging. The
 * experimental forward path TWO_READ keeps the block per row; WARP_ROW
 * insists on the warp's (XENT_ERROR_UNSUPPORTED where it cannot run). */
xent_status warp_rows(bool stats, const vp_params &vp, const xent_experimental &exp,
                      bool *warp) {
  const fwd_params &p = vp.p;
  const bool plain = !p.use_softcap && !p.weights &&
                     (!stats || (!p.need_argmax && !p.k.smoothing)) &&
                     (stats || vp.ranks * vp.record <= kVpWarpRecordFloats);
  const xent_experimental_path path = exp.forward.path;
  *warp = plain && path != XENT_EXPERIMENTAL_TWO_READ;
  if (path == XENT_EXPERIMENTAL_WARP_ROW && !plain)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "%s (experimental forward path WARP_ROW)",
                     stats ? "the warp-per-row vocabulary-parallel statistics kernel takes "
                             "calls without class weights, softcap, token accuracy, predicted "
                             "tokens or label smoothing"
                           : "the warp-per-row vocabulary-parallel forward kernel takes calls "
                             "without class weights or softcap whose records fit 256 floats "
                             "a row (ranks x record floats)");
  return XENT_OK;
}

template <typename T>
xent_status launch(bool stats, const vp_params &vp, cudaStream_t stream, const dev_props &dp,
                   const xent_experimental &exp) {
  bool warp = false;
  xent_status st = warp_rows(stats, vp, exp, &warp);
  if (st) return st;
  cudaLaunchAttribute attr[1];
  const unsigned grid = warp ? (unsigned)((vp.p.rows + kVpWarpRows - 1) / kVpWarpRows)
                             : (unsigned)vp.p.rows;
  const cudaLaunchConfig_t cfg = plain_config(grid, kVpThreads, stream, attr, dp.sm_major, exp);
  const bool general = vp.p.use_softcap || vp.p.weights;
  void *k = warp    ? stats ? (void *)vp_stats_warp_kernel<T> : (void *)vp_forward_warp_kernel<T>
            : stats ? (general ? stats_kernel<T, true>(vp.p) : stats_kernel<T, false>(vp.p))
            : general ? (void *)vp_forward_kernel<T, true>
                      : (void *)vp_forward_kernel<T, false>;
  void *args[] = {(void *)&vp};
  cudaError_t e = cudaLaunchKernelExC(&cfg, k, args);
  if (e != cudaSuccess) return cuda_fail(e, stats ? "vp_stats_kernel launch" : "vp_forward_kernel launch");
  return XENT_OK;
}

}  // namespace

xent_status launch_vp(bool stats, xent_dtype dt, const vp_params &vp, cudaStream_t stream,
                      const dev_props &dp, const xent_experimental &exp) {
  if (dt == XENT_FLOAT32) return launch<float>(stats, vp, stream, dp, exp);
  if (dt == XENT_BFLOAT16) return launch<__nv_bfloat16>(stats, vp, stream, dp, exp);
  return launch<__half>(stats, vp, stream, dp, exp);
}

namespace {

xent_status vp_impl(const xent_vp_call *v, bool stats, const dev_props &dp) {
  const xent_call *c = &v->c;
  cudaStream_t stream = (cudaStream_t)c->ex.stream;
  const bool deferred = !stats && c->opt.target_check == XENT_TARGETS_DEFERRED;
  const bool checked = (stats && c->opt.target_check == XENT_TARGETS_CHECKED) || deferred;
  xent_status st;
  if (checked && (st = refuse_capture(stream))) return st;
  const int64_t rows = c->in.rows;
  if (rows == 0) return stats ? XENT_OK : launch_empty_outputs(c->opt, c->out, stream);
  const xent_call g = global_view(v);
  xent_verdict *verdict = checked ? verdict_for(&g) : NULL;
  const bool need_ws = checked || !stats;

  char *ws = NULL;
  bool owned = false;
  if (need_ws) {
    if (c->ex.workspace) {
      ws = (char *)c->ex.workspace;
    } else {
      CK(cudaMallocAsync((void **)&ws, xent_ws_bytes(rows), stream));
      owned = true;
    }
  }
  const ce_workspace w = carve_workspace(ws, rows);
  const bool per_row = c->opt.reduction == XENT_REDUCTION_NONE;
  st = XENT_OK;
  do {
    if (need_ws && (st = launch_count(&g, w, verdict, stream))) break;
    vp_params vp;
    fill_params(&vp.p, &g); /* constants over the global V ... */
    vp.p.vocab = (int)c->in.vocab; /* ... then the shard's width */
    vp.p.hdr = need_ws ? w.hdr : NULL;
    vp.p.verdict = checked ? w.hdr : NULL;
    vp.p.zero_if_rejected = deferred && c->write_grad;
    vp.p.row_loss = per_row ? c->out.loss : w.loss;
    vp.p.row_z = per_row ? c->out.z_loss
                         : ((c->opt.lse_square_scale > 0.0f || c->out.z_loss) ? w.z : NULL);
    vp.p.row_acc = per_row ? c->out.token_accuracy : (c->out.token_accuracy ? w.acc : NULL);
    vp.vocab = v->vocab;
    vp.offset = v->offset;
    vp.record = v->record;
    vp.records = v->records;
    vp.gathered = v->gathered;
    vp.ranks = v->ranks;
    if ((st = launch_vp(stats, c->in.dtype, vp, stream, dp, c->exp))) break;
    if (!stats && !per_row &&
        (st = launch_finalize(finalize_for(&g, vp.p, w), dp, c->exp, stream)))
      break;
  } while (0);
  if (checked && st == XENT_OK) st = check_verdict(verdict, &g, deferred);
  if (owned) {
    cudaError_t e = cudaFreeAsync(ws, stream);
    if (e != cudaSuccess && st == XENT_OK) st = cuda_fail(e, "cudaFreeAsync");
  }
  return st;
}

xent_status vp_entry(const xent_vp_call *v, bool stats) {
  device_scope scope;
  xent_status st = enter_device(v->c.ex.device, &scope);
  if (st) return st;
  dev_props props;
  st = get_props(v->c.ex.device, v->c.exp, &props);
  if (!st) st = vp_impl(v, stats, props);
  leave_device(&scope);
  return st;
}

}  // namespace

}  // namespace xent

extern "C" xent_status xent_cuda_vp_stats(const xent_vp_call *v) { return xent::vp_entry(v, true); }

extern "C" xent_status xent_cuda_vp_forward(const xent_vp_call *v) {
  return xent::vp_entry(v, false);
}
