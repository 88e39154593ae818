/*
 * vp.cu - the CUDA vocabulary-parallel calls on the caller's stream:
 *   stats    (checked mode: the count kernel's verdict first) a block per
 *            row issuing all its loads at once or a warp per row (plain
 *            calls), or a block per row, writes the row's record
 *   forward  the count kernel (N, W, the scales, the sum of all weights),
 *            a warp (plain calls, short rows) or a block per row (combine,
 *            outputs, the shard's gradient), and for mean and sum the
 *            finalize kernel
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

/* Which kernel runs a pass (kernels/vp.cuh). */
enum vp_kernel { VP_BLOCK, VP_WARP, VP_SEGMENT };

struct vp_choice {
  vp_kernel kernel;
  int threads, vecs; /* VP_SEGMENT: the block's threads and the loads each issues */
};

/* The segment statistics for plain rows of 4 to 32 KB on sm_90 with at least
 * 7 rows a SM (the single-GPU forward's rule for its segment kernel; measured
 * here at 14 and 31 KB rows, bench/NOTES.md v46): 64, 128 or 256 threads of
 * 8 vectors. */
bool segment_rows(const vp_params &vp, int elem_bytes, const dev_props &dp, int *threads) {
  const long long row = vp.p.vocab * (long long)elem_bytes;
  if (dp.sm_major != 9 || row < 4 * 1024 || row > 32 * 1024 ||
      vp.p.rows < 7LL * (dp.sms > 0 ? dp.sms : 1))
    return false;
  *threads = row <= 8 * 1024 ? 64 : row <= 16 * 1024 ? 128 : 256;
  return true;
}

/* Rows of at most this many bytes take the forward's warp per row. */
constexpr long long kVpWarpForwardMaxRowBytes = 16 * 1024;

/* The kernel of a pass: for plain calls a block per row segment (the
 * statistics, segment_rows) or a warp per row (the forward on rows of at
 * most 16 KB whose records fit a warp's staging; the statistics otherwise),
 * a block per row for the rest. The experimental forward path TWO_READ
 * keeps the block per row; WARP_ROW and SEGMENT insist on theirs (SEGMENT:
 * the statistics only, with the path's threads and vecs),
 * XENT_ERROR_UNSUPPORTED where it cannot run. */
xent_status choose(bool stats, const vp_params &vp, int elem_bytes, const dev_props &dp,
                   const xent_experimental &exp, vp_choice *out) {
  const fwd_params &p = vp.p;
  const bool plain = !p.use_softcap && !p.weights &&
                     (!stats || (!p.need_argmax && !p.k.smoothing)) &&
                     (stats || vp.ranks * vp.record <= kVpWarpRecordFloats);
  const xent_experimental_launch &f = exp.forward;
  out->kernel = VP_BLOCK;
  out->threads = kVpThreads;
  out->vecs = 0;
  const char *plain_calls = "calls without class weights, softcap, token accuracy, predicted "
                            "tokens or label smoothing";
  if (f.path == XENT_EXPERIMENTAL_SEGMENT) {
    const long long vecs = (p.vocab * (long long)elem_bytes + 15) / 16;
    if (!stats)
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "the vocabulary-parallel forward has no segment kernel (experimental "
                       "forward path SEGMENT: the statistics pass only)");
    if (!plain)
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "the segment vocabulary-parallel statistics kernel takes %s (experimental "
                       "forward path SEGMENT)", plain_calls);
    if (f.threads > kVpSegmentMaxThreads || vecs > (long long)f.threads * f.vecs)
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "the segment vocabulary-parallel statistics kernel reads a row of %lld "
                       "16-byte vectors in one block: forward.threads (%d, at most %d) x "
                       "forward.vecs (%d) is too few (experimental forward path SEGMENT)",
                       vecs, f.threads, kVpSegmentMaxThreads, f.vecs);
    out->kernel = VP_SEGMENT;
    out->threads = f.threads;
    out->vecs = f.vecs;
    return XENT_OK;
  }
  if (f.path == XENT_EXPERIMENTAL_WARP_ROW && !plain)
    return stats ? xent_fail(XENT_ERROR_UNSUPPORTED,
                             "the warp-per-row vocabulary-parallel statistics kernel takes %s "
                             "(experimental forward path WARP_ROW)", plain_calls)
                 : xent_fail(XENT_ERROR_UNSUPPORTED,
                             "the warp-per-row vocabulary-parallel forward kernel takes calls "
                             "without class weights or softcap whose records fit 256 floats a "
                             "row (ranks x record floats) (experimental forward path WARP_ROW)");
  if (!plain || f.path == XENT_EXPERIMENTAL_TWO_READ) return XENT_OK;
  int threads = 0;
  if (stats && f.path == XENT_EXPERIMENTAL_TABLE && segment_rows(vp, elem_bytes, dp, &threads)) {
    out->kernel = VP_SEGMENT;
    out->threads = threads;
    out->vecs = 8;
    return XENT_OK;
  }
  /* The forward's warp per row where rows are short (the vocab schedule's
   * slabs); from 32 KB a row the block's was 2 to 8 % faster (bench/vp.py,
   * H100, bench/NOTES.md v46). */
  if (!stats && f.path == XENT_EXPERIMENTAL_TABLE &&
      p.vocab * (long long)elem_bytes > kVpWarpForwardMaxRowBytes)
    return XENT_OK;
  out->kernel = VP_WARP;
  return XENT_OK;
}

template <typename T>
void *kernel_for(bool stats, const vp_params &vp, const vp_choice &c) {
  const bool general = vp.p.use_softcap || vp.p.weights;
  switch (c.kernel) {
  case VP_SEGMENT:
    return c.vecs == 4 ? (void *)vp_stats_segment_kernel<T, 4>
                       : (void *)vp_stats_segment_kernel<T, 8>;
  case VP_WARP:
    return stats ? (void *)vp_stats_warp_kernel<T> : (void *)vp_forward_warp_kernel<T>;
  default:
    if (stats) return general ? stats_kernel<T, true>(vp.p) : stats_kernel<T, false>(vp.p);
    return general ? (void *)vp_forward_kernel<T, true> : (void *)vp_forward_kernel<T, false>;
  }
}

template <typename T>
xent_status launch(bool stats, const vp_params &vp, cudaStream_t stream, const dev_props &dp,
                   const xent_experimental &exp) {
  vp_choice c;
  xent_status st = choose(stats, vp, (int)sizeof(T), dp, exp, &c);
  if (st) return st;
  cudaLaunchAttribute attr[1];
  const unsigned grid = c.kernel == VP_WARP
                            ? (unsigned)((vp.p.rows + kVpWarpRows - 1) / kVpWarpRows)
                            : (unsigned)vp.p.rows;
  const cudaLaunchConfig_t cfg =
      plain_config(grid, (unsigned)c.threads, stream, attr, dp.sm_major, exp);
  void *args[] = {(void *)&vp};
  cudaError_t e = cudaLaunchKernelExC(&cfg, kernel_for<T>(stats, vp, c), args);
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
