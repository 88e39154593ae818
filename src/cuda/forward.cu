/*
 * forward.cu - the CUDA forward: the order of launches on the caller's
 * stream. A call enqueues:
 *   1. (checked mode, weights, or mean with a gradient) a memset of the
 *      workspace header and count_kernel: N, W, the sum of weights, the first
 *      bad target and weight, and the reduction scales, all left in device
 *      memory (checked mode: the verdict also in pinned host memory, and an
 *      event after it; verdict.cuh);
 *   2. the forward kernel of the plan (plan.h), which reads the scales;
 *   3. on the segment path with rows of two segments, fwd_segment_merge;
 *   4. (mean, sum) finalize_kernel: the reduced outputs (it counts N itself
 *      where step 1 did not run).
 * Checked mode then waits for the event of step 1 alone, with the rest
 * already queued (deferred mode leaves that wait to xent_verdict_wait).
 * In unchecked mode nothing waits for the device, so the
 * sequence can be captured in a CUDA graph. On sm_90+ the kernels after
 * the first are launched programmatically (resident and waiting before the
 * kernel ahead of them ends), but for clustered forward kernels.
 */
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "common/workspace.h"
#include "cuda/cuda.h"
#include "cuda/device.cuh"
#include "cuda/forward.cuh"
#include "cuda/kernel_table.cuh"
#include "cuda/kernels/count.cuh"
#include "cuda/kernels/finalize.cuh"
#include "cuda/kernels/segment_merge.cuh"
#include "cuda/plan.h"
#include "cuda/verdict.cuh"

namespace xent {

namespace {

thread_local char g_last_launch[192] = "none";

/* Resident blocks (clusters) of a persistent kernel, per kernel and shape
 * of launch, asked of the runtime once per thread. The kernel's
 * shared-memory limit is set to `smem_max`, the most this path uses on
 * this GPU, so that every cached shape stays launchable. */
struct resident_entry {
  fwd_kernel k;
  int dev, cluster, threads, smem, units;
};

xent_status resident_units(fwd_kernel k, int cluster, int threads, int smem, int smem_max,
                           const dev_props &dp, int *units) {
  thread_local resident_entry cache[32];
  thread_local int cached = 0;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  for (int i = 0; i < cached; i++) {
    const resident_entry &e = cache[i];
    if (e.k == k && e.dev == dev && e.cluster == cluster && e.threads == threads &&
        e.smem == smem) {
      *units = e.units;
      return XENT_OK;
    }
  }
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  int n = 0;
  if (cluster > 1) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)cluster, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    set_cluster(&cfg, attr, cluster, true);
    CK(cudaOccupancyMaxActiveClusters(&n, k, &cfg));
  } else {
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, (size_t)smem));
    n *= dp.sms;
  }
  if (n < 1)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "no cluster of %d block(s) of %d threads with %d bytes of shared memory "
                     "fits this GPU",
                     cluster, threads, smem);
  if (cached < 32) cache[cached++] = resident_entry{k, dev, cluster, threads, smem, n};
  *units = n;
  return XENT_OK;
}

const char *kernel_name(int kernel) {
  switch (kernel) {
    case XENT_KERNEL_STAGED: return "staged";
    case XENT_KERNEL_SEGMENT: return "segment";
    case XENT_KERNEL_WARP_ROW: return "warp-row";
    default: return "two-read";
  }
}

void describe(const xent_plan &l, const fwd_params &p, long long blocks) {
  const char *v = l.variant == XENT_VARIANT_GENERAL ? " general"
                  : l.variant == XENT_VARIANT_STATS ? " stats"
                                                    : "";
  switch (l.kernel) {
    case XENT_KERNEL_STAGED:
      snprintf(g_last_launch, sizeof g_last_launch,
               "staged cluster=%d threads=%d+32 slots=%d reuse=%d hold=%d chunk=%dKB grid=%lld "
               "ticket%s%s",
               l.cluster, l.threads, l.slots, l.reuse, p.ring_hold, p.ring_chunk_vecs / 64, blocks,
               l.l2_hint ? " l2-hint" : "", v);
      break;
    case XENT_KERNEL_SEGMENT:
      snprintf(g_last_launch, sizeof g_last_launch, "segment threads=%d vecs=%d segments=%d grid=%lld",
               l.threads, l.vecs, p.seg_count, blocks);
      break;
    case XENT_KERNEL_WARP_ROW:
      if (l.warp_split > 1)
        snprintf(g_last_launch, sizeof g_last_launch, "warp cluster=1 threads=%d vecs=%d split=%d",
                 l.threads, l.vecs, l.warp_split);
      else
        snprintf(g_last_launch, sizeof g_last_launch, "warp cluster=1 threads=%d vecs=%d%s",
                 l.threads, l.vecs, v);
      break;
    default:
      snprintf(g_last_launch, sizeof g_last_launch, "two-read cluster=1 threads=%d vecs=0%s%s",
               l.threads, l.l2_hint ? " l2-hint" : "", v);
  }
}

xent_status launch_forward(const xent_plan &l, const dev_props &dp, xent_dtype dt, fwd_params p,
                           cudaStream_t stream, const xent_experimental &exp) {
  fwd_kernel k = forward_kernel(dt, l);
  if (!k)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "no kernel is built for plan %d (variant %d, vecs %d)",
                     l.kernel, l.variant, l.vecs);
  /* The staged kernel, clusters and programmatic launches need sm_90 code:
   * a kernel whose body is compiled out below it would write nothing. */
  const bool pdl =
      (l.programmatic || exp.programmatic == 2) && exp.programmatic != 1 && dp.sm_major >= 9;
  const int needs = l.kernel == XENT_KERNEL_STAGED || l.cluster > 1 || pdl ? 90 : 0;
  if (needs) {
    char name[64];
    snprintf(name, sizeof name, "the %s kernel (%s)", kernel_name(l.kernel),
             dt == XENT_FLOAT32 ? "fp32" : dt == XENT_BFLOAT16 ? "bf16" : "fp16");
    xent_status st = check_kernel_code((const void *)k, name, needs, dp);
    if (st) return st;
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  int64_t blocks = p.rows;
  int threads = l.threads;
  if (l.kernel == XENT_KERNEL_STAGED) {
    threads = l.threads + 32; /* the producer warp */
    p.cluster = l.cluster;
    p.ring_chunk_vecs = l.vecs * l.threads;
    p.ring_slots = l.slots;
    p.ring_reuse = l.reuse;
    /* nothing to hold without a gradient (the kernel caps it too) */
    p.ring_hold = p.write_grad ? l.hold : 0;
    const int smem = (int)xent_plan_staged_ring_bytes(&l);
    int units = 0;
    xent_status st = resident_units(k, l.cluster, threads, smem,
                                    dp.smem_optin - XENT_STAGED_STATIC_SMEM, dp, &units);
    if (st) return st;
    blocks = (p.rows < units ? p.rows : units) * (int64_t)l.cluster;
    cfg.dynamicSmemBytes = (size_t)smem;
  }
  if (l.kernel == XENT_KERNEL_WARP_ROW) {
    const int64_t per_block = l.threads / 32 / l.warp_split;
    blocks = (p.rows + per_block - 1) / per_block;
  }
  if (l.kernel == XENT_KERNEL_SEGMENT) blocks = p.rows * p.seg_count;
  if (blocks > 0x7fffffffLL) /* a row (or a group of rows) per block or cluster */
    return xent_fail(XENT_ERROR_UNSUPPORTED, "rows = %lld is more than one launch can hold",
                     (long long)p.rows);
  p.l2_hint = l.l2_hint;
  cfg.gridDim = dim3((unsigned)blocks, 1, 1);
  cfg.blockDim = dim3((unsigned)threads, 1, 1);
  cfg.stream = stream;
  set_cluster(&cfg, attr, l.cluster, false);
  if (l.programmatic || exp.programmatic == 2) set_pdl(&cfg, attr, dp.sm_major, exp);
  CK(cudaLaunchKernelEx(&cfg, k, p));
  describe(l, p, (long long)blocks);
  return XENT_OK;
}

}  // namespace

xent_status launch_empty_outputs(const xent_options &opt, const xent_output &out,
                                cudaStream_t stream) {
  if (opt.reduction == XENT_REDUCTION_NONE) return XENT_OK;
  const float nan = __builtin_nanf("");
  const float empty = opt.empty_mean == XENT_EMPTY_MEAN_ZERO ? 0.0f : nan;
  const float lv = opt.reduction == XENT_REDUCTION_MEAN ? empty : 0.0f;
  fill_kernel<<<1, 1, 0, stream>>>(out.loss, out.z_loss, out.token_accuracy, lv, lv, empty);
  CK(cudaGetLastError());
  return XENT_OK;
}

/* The plan of a call: the launch table, or the experimental settings' forced
 * launch. */
xent_status plan_call(const xent_call *c, const dev_props &dp, xent_plan *l) {
  const bool general = c->in.weights || c->opt.use_softcap;
  const bool stats = c->out.token_accuracy || c->out.predicted || c->opt.label_smoothing > 0.0f;
  xent_plan_call pc;
  pc.sm_major = dp.sm_major;
  pc.sms = dp.sms;
  pc.smem_optin = dp.smem_optin;
  pc.elem_bytes = (int)xent_dtype_size(c->in.dtype);
  pc.vocab = c->in.vocab;
  pc.rows = c->in.rows;
  pc.write_grad = c->write_grad;
  pc.variant = general ? XENT_VARIANT_GENERAL : stats ? XENT_VARIANT_STATS : XENT_VARIANT_PLAIN;
  if (c->exp.forward.path == XENT_EXPERIMENTAL_TABLE) {
    xent_plan_forward(&pc, l);
    return XENT_OK;
  }
  char why[256];
  if (xent_plan_forced(&pc, &c->exp.forward, l, why, sizeof why))
    return xent_fail(XENT_ERROR_UNSUPPORTED, "experimental launch: %s", why);
  return XENT_OK;
}

ce_workspace carve_workspace(char *ws, int64_t rows) {
  ce_workspace w;
  w.hdr = (ws_header *)ws;
  w.arr = xent_ws_row_array_bytes(rows);
  w.partials = ws ? (float *)(ws + XENT_WS_HEADER_BYTES) : NULL;
  w.loss = ws ? (float *)(ws + XENT_WS_HEADER_BYTES + XENT_WS_PARTIAL_BYTES) : NULL;
  w.z = ws ? (float *)((char *)w.loss + w.arr) : NULL;
  w.acc = ws ? (float *)((char *)w.z + w.arr) : NULL;
  return w;
}

xent_status launch_count(const xent_call *c, const ce_workspace &w, xent_verdict *verdict,
                         cudaStream_t stream) {
  const xent_input *in = &c->in;
  CK(cudaMemsetAsync(w.hdr, 0, XENT_WS_HEADER_BYTES, stream));
  prep_params q;
  q.targets = in->targets;
  q.target64 = in->target_type == XENT_INT64;
  q.rows = in->rows;
  q.vocab = (int)in->vocab;
  q.ignore_index = c->opt.ignore_index;
  q.weights = in->weights;
  q.mean = c->opt.reduction == XENT_REDUCTION_MEAN;
  q.hdr = w.hdr;
  q.partials = w.partials;
  q.host_verdict = NULL;
  xent_status st;
  if (verdict && (st = verdict_prepare(verdict, c->exp.verdict_copy != 0, &q.host_verdict)))
    return st;
  int64_t span = in->rows > in->vocab || !in->weights ? in->rows : in->vocab;
  int64_t blocks = (span + kCountThreads - 1) / kCountThreads;
  if (blocks > kCountMaxBlocks) blocks = kCountMaxBlocks;
  if (blocks < 1) blocks = 1;
  count_kernel<<<(unsigned)blocks, kCountThreads, 0, stream>>>(q);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return cuda_fail(e, "count_kernel launch");
  if (verdict && (st = verdict_mark(verdict, w.hdr, stream))) return st;
  return XENT_OK;
}

void fill_params(fwd_params *p, const xent_call *c) {
  const xent_input *in = &c->in;
  const xent_options *opt = &c->opt;
  const xent_output *out = &c->out;
  const int es = (int)xent_dtype_size(in->dtype);
  memset(p, 0, sizeof *p);
  p->x = (char *)in->logits;
  p->rows = in->rows;
  p->stride_bytes = in->row_stride * (int64_t)es;
  p->vocab = (int)in->vocab;
  p->cluster = 1;
  p->targets = in->targets;
  p->target64 = in->target_type == XENT_INT64;
  p->ignore_index = opt->ignore_index;
  p->weights = in->weights;
  p->k.alpha = opt->label_smoothing;
  p->k.eps = opt->label_smoothing / (float)in->vocab;
  p->k.inv_vocab = 1.0f / (float)in->vocab;
  p->k.s = opt->lse_square_scale;
  p->k.sum_w = 0.0f;
  p->k.weighted = in->weights != NULL;
  p->k.smoothing = opt->label_smoothing > 0.0f;
  p->use_softcap = opt->use_softcap;
  p->softcap = opt->softcap;
  p->inv_softcap = opt->use_softcap ? 1.0f / opt->softcap : 0.0f;
  p->write_grad = c->write_grad;
  p->need_argmax = out->token_accuracy || out->predicted;
  p->per_row_out = opt->reduction == XENT_REDUCTION_NONE;
  p->lse_out = out->lse;
  p->pred_out = out->predicted;
}

xent_status launch_rows(const xent_plan &l, const dev_props &dp, const xent_call *c, fwd_params p,
                        float *seg_base, size_t seg_pitch_bytes, cudaStream_t stream) {
  const long long segs = l.kernel == XENT_KERNEL_SEGMENT ? l.segments : 0;
  const bool merge = segs > 1;
  if (segs > 0) { /* equal segments of the rows' whole vectors */
    const long long nvec = c->in.vocab * (long long)xent_dtype_size(c->in.dtype) / 16;
    p.seg_stats = merge ? seg_base : NULL;
    p.seg_pitch = (int64_t)(seg_pitch_bytes / sizeof(float));
    p.seg_count = (int)segs;
    p.seg_vecs = (int)((nvec + segs - 1) / segs);
  }
  xent_status st = launch_forward(l, dp, c->in.dtype, p, stream, c->exp);
  if (st || !merge) return st;
  /* the segments merged, a thread per row */
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = plain_config((unsigned)((c->in.rows + 255) / 256), 256, stream,
                                              attr, dp.sm_major, c->exp);
  cudaError_t e = cudaLaunchKernelEx(&cfg, fwd_segment_merge, p);
  if (e != cudaSuccess) return cuda_fail(e, "fwd_segment_merge launch");
  return XENT_OK;
}

finalize_params finalize_for(const xent_call *c, const fwd_params &p, const ce_workspace &w) {
  finalize_params f;
  const bool mean = c->opt.reduction == XENT_REDUCTION_MEAN;
  f.hdr = p.hdr;
  f.verdict = p.verdict;
  f.count = !p.hdr && (mean || c->out.token_accuracy);
  f.row_loss = w.loss;
  f.row_z = (c->opt.lse_square_scale > 0.0f || c->out.z_loss) ? w.z : NULL;
  f.row_acc = c->out.token_accuracy ? w.acc : NULL;
  f.rows = c->in.rows;
  f.mean = mean;
  f.empty_zero = c->opt.empty_mean == XENT_EMPTY_MEAN_ZERO;
  f.nan_if_rejected = c->opt.target_check == XENT_TARGETS_DEFERRED;
  f.weighted = c->in.weights != NULL;
  f.loss = c->out.loss;
  f.z_loss = c->out.z_loss;
  f.acc = c->out.token_accuracy;
  return f;
}

xent_status launch_finalize(const finalize_params &f, const dev_props &dp,
                            const xent_experimental &exp, cudaStream_t stream) {
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = plain_config(1, kFinalizeThreads, stream, attr, dp.sm_major, exp);
  cudaError_t e = cudaLaunchKernelEx(&cfg, finalize_kernel, f);
  if (e != cudaSuccess) return cuda_fail(e, "finalize_kernel launch");
  return XENT_OK;
}

xent_status refuse_capture(cudaStream_t stream) {
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CK(cudaStreamIsCapturing(stream, &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "target_check is XENT_TARGETS_CHECKED or DEFERRED, which wait for the "
                     "device, but the stream is being captured: use XENT_TARGETS_UNCHECKED in "
                     "CUDA graphs");
  return XENT_OK;
}

namespace {

xent_status forward_impl(const xent_call *c, const dev_props &dp) {
  const xent_input *in = &c->in;
  const xent_options *opt = &c->opt;
  const xent_output *out = &c->out;
  cudaStream_t stream = (cudaStream_t)c->ex.stream;
  /* deferred: checked on the device, the verdict read later (verdict.cuh) */
  const bool deferred = opt->target_check == XENT_TARGETS_DEFERRED;
  const bool checked = opt->target_check == XENT_TARGETS_CHECKED || deferred;
  xent_verdict *verdict = checked ? verdict_for(c) : NULL;
  xent_status st;
  if (checked && (st = refuse_capture(stream))) return st;
  if (in->rows == 0) return launch_empty_outputs(c->opt, c->out, stream);

  const bool mean = opt->reduction == XENT_REDUCTION_MEAN;
  const bool per_row = opt->reduction == XENT_REDUCTION_NONE;
  const bool weighted = in->weights != NULL;
  /* The count kernel runs where something must know N, W or the verdict
   * before the forward kernel: the checked mode, weights, or a gradient
   * scaled by 1/N. Otherwise the finalize kernel counts N itself (one memset
   * and one launch fewer: the forward without gradient, most of all). */
  const bool need_count = weighted || checked || (c->write_grad && mean);

  xent_plan l;
  if ((st = plan_call(c, dp, &l))) return st;
  /* The staged path's row counter lives in the workspace header, zeroed
   * with it. */
  const bool ticket = l.kernel == XENT_KERNEL_STAGED;
  /* The segment path: rows of two segments leave theirs in the row arrays,
   * for the merge kernel; a row of one is finished by its block. */
  const bool merge = l.kernel == XENT_KERNEL_SEGMENT && l.segments > 1;
  const bool need_ws = need_count || !per_row || ticket || merge;

  char *ws = NULL;
  bool owned = false;
  if (need_ws) {
    if (c->ex.workspace) {
      ws = (char *)c->ex.workspace;
    } else {
      CK(cudaMallocAsync((void **)&ws, xent_ws_bytes(in->rows), stream));
      owned = true;
    }
  }
  const ce_workspace w = carve_workspace(ws, in->rows);

  st = XENT_OK;
  do {
    if (need_count) {
      if ((st = launch_count(c, w, verdict, stream))) break;
    } else if (ticket) {
      cudaError_t e = cudaMemsetAsync(w.hdr, 0, XENT_WS_HEADER_BYTES, stream);
      if (e != cudaSuccess) {
        st = cuda_fail(e, "cudaMemsetAsync");
        break;
      }
    }
    fwd_params p;
    fill_params(&p, c);
    p.hdr = need_count ? w.hdr : NULL;
    p.verdict = checked ? w.hdr : NULL;
    p.zero_if_rejected = deferred && c->write_grad;
    p.row_ticket = ticket ? &w.hdr->next_row : NULL;
    p.row_loss = per_row ? out->loss : w.loss;
    p.row_z = per_row ? out->z_loss : ((opt->lse_square_scale > 0.0f || out->z_loss) ? w.z : NULL);
    p.row_acc = per_row ? out->token_accuracy : (out->token_accuracy ? w.acc : NULL);
    if ((st = launch_rows(l, dp, c, p, w.loss, w.arr, stream))) break;
    if (!per_row && (st = launch_finalize(finalize_for(c, p, w), dp, c->exp, stream))) break;
  } while (0);
  /* Every kernel of the call is queued behind the verdict (written by the
   * count kernel, or copied back, before them). */
  if (checked && st == XENT_OK) st = check_verdict(verdict, c, deferred);

  if (owned) {
    cudaError_t e = cudaFreeAsync(ws, stream);
    if (e != cudaSuccess && st == XENT_OK) st = cuda_fail(e, "cudaFreeAsync");
  }
  return st;
}

}  // namespace

fwd_kernel forward_kernel(xent_dtype dtype, const xent_plan &p) {
  switch (dtype) {
    case XENT_FLOAT32: return forward_kernel_f32(p);
    case XENT_BFLOAT16: return forward_kernel_bf16(p);
    case XENT_FLOAT16: return forward_kernel_f16(p);
  }
  return nullptr;
}

}  // namespace xent

extern "C" xent_status xent_cuda_forward(const xent_call *c) {
  using namespace xent;
  device_scope scope;
  xent_status st = enter_device(c->ex.device, &scope);
  if (st) return st;
  dev_props props;
  st = get_props(c->ex.device, c->exp, &props);
  if (!st) st = forward_impl(c, props);
  leave_device(&scope);
  return st;
}

extern "C" const char *xent_cuda_last_launch(void) { return xent::g_last_launch; }
