/*
 * cuda_backend.cu - the CUDA backend's host side: device queries, the
 * workspace, the order of launches on the caller's stream, and the checked
 * mode's one round trip.
 *
 * A forward call enqueues, on the caller's stream:
 *   1. (checked mode, weights, or mean with a gradient) memset of the
 *      workspace header + count_kernel: N, W, sum of weights, first bad
 *      target/weight, and the reduction scales, all left in device memory;
 *   2. checked mode only: an event after the count kernel, which has written
 *      its verdict into pinned host memory (verdict_slot);
 *   3. the forward kernel (the path launch_table.h picks), which reads the
 *      scales from the header;
 *   4. (mean, sum) finalize_kernel: the reduced outputs (it counts N itself
 *      where step 1 did not run). On the segment path (forward without
 *      gradient) with rows of two segments, fwd_segment_merge, which merges
 *      each row's segments and writes its outputs, runs between steps 3
 *      and 4.
 * Checked mode then waits for the event of step 2 alone, with steps 3 and 4
 * already queued: they read the same verdict and return at once on a bad
 * target or weight, and the call returns its error. In unchecked mode
 * nothing waits for the device, so the sequence can be captured in a CUDA
 * graph. On sm_90+ steps 3 and 4 and the backward's scale kernel are
 * programmatic launches (resident and waiting before the kernel ahead of
 * them ends), except forward kernels launched in clusters
 * (xent_launch_programmatic in launch_table.h).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/workspace.h"
#include "cuda/kernels_aux.cuh"
#include "cuda/kernels_forward.cuh"
#include "cuda/kernels_ring.cuh"
#include "cuda/kernels_segment.cuh"
#include "cuda/kernels_staged.cuh"
#include "cuda/kernels_stream.cuh"
#include "cuda/launch_table.h"
#include "cuda/tune.h"
#include "internal.h"

using namespace xent;

namespace {

/* ------------------------------------------------------------------------ */
/* Errors and devices                                                        */
/* ------------------------------------------------------------------------ */

xent_status cuda_fail(cudaError_t e, const char *what) {
  (void)cudaGetLastError(); /* clear a non-sticky error */
  xent_status st = e == cudaErrorMemoryAllocation ? XENT_ERROR_OUT_OF_MEMORY : XENT_ERROR_CUDA;
  return xent_fail(st, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CK(call)                                              \
  do {                                                        \
    cudaError_t e_ = (call);                                  \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call);       \
  } while (0)

int device_count() {
  static int count = -1;
  if (count < 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    count = n;
  }
  return count;
}

struct dev_props {
  int ready;
  int sm_major;
  int sms;
  int ring_slots; /* 16 KB ring chunks that fit one block's shared memory */
  int smem_optin; /* the most shared memory one block may have            */
};
dev_props g_props[64];

xent_status get_props(int dev, dev_props *out) {
  if (dev >= 0 && dev < 64 && g_props[dev].ready) {
    *out = g_props[dev];
    return XENT_OK;
  }
  dev_props p = {0, 0, 0, 0, 0};
  int smem_optin = 0;
  CK(cudaDeviceGetAttribute(&p.sm_major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  /* fwd_ring's static shared memory (barriers, reductions) is under 2 KB. */
  p.ring_slots = (smem_optin - 2048) / (XENT_RING_CHUNK_VECS * 16);
  if (p.ring_slots > XENT_RING_MAX_SLOTS) p.ring_slots = XENT_RING_MAX_SLOTS;
  if (p.ring_slots < 0) p.ring_slots = 0;
  p.smem_optin = smem_optin;
  p.ready = 1;
  if (dev >= 0 && dev < 64) g_props[dev] = p;
  *out = p;
  return XENT_OK;
}

/* Set the calling thread's device for the duration of a call. */
struct device_scope {
  int prev, dev;
};

xent_status enter_device(int dev, device_scope *s) {
  int n = device_count();
  if (n == 0)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "no CUDA device (or no driver) on this machine");
  if (dev >= n)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "device is %d but only %d CUDA device(s) exist", dev,
                     n);
  s->dev = dev;
  CK(cudaGetDevice(&s->prev));
  if (s->prev != dev) CK(cudaSetDevice(dev));
  return XENT_OK;
}

void leave_device(const device_scope *s) {
  if (s->prev != s->dev) (void)cudaSetDevice(s->prev);
}

/* ------------------------------------------------------------------------ */
/* Tuning override (xent-bench --tune)                                       */
/* ------------------------------------------------------------------------ */

xent_launch g_override = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
int g_override_on = 0;
thread_local char g_last_launch[160] = "none";
thread_local char g_last_scale[96] = "none";

/* ------------------------------------------------------------------------ */
/* Kernel selection                                                          */
/* ------------------------------------------------------------------------ */

typedef void (*fwd_kernel)(const fwd_params);

template <typename T, bool G>
fwd_kernel pick_oneread(int vecs) {
  switch (vecs) {
    case 2: return fwd_oneread<T, 2, G>;
    case 4: return fwd_oneread<T, 4, G>;
    case 8: return fwd_oneread<T, 8, G>;
    case 16: return fwd_oneread<T, 16, G>;
  }
  return nullptr;
}

/* The two-read kernel (with KEEP the keep path): the general one (weights,
 * softcap) always folds the statistics flags; the plain one only with
 * `stats`. */
template <typename T, bool KEEP>
fwd_kernel pick_tworead(bool general, bool stats) {
  if (general) return fwd_tworead<T, true, KEEP, true>;
  return stats ? fwd_tworead<T, false, KEEP, true> : fwd_tworead<T, false, KEEP, false>;
}

/* Warps that share a row in a warp launch of this call: l.warp_split for
 * the plain kernel of 4 vectors a stage, else 1. */
int warp_split(const xent_launch &l, bool general, bool stats) {
  return l.path == XENT_PATH_WARP && !general && !stats && l.vecs == 4 && l.warp_split > 1
             ? l.warp_split
             : 1;
}

template <typename T>
fwd_kernel pick_kernel(const xent_launch &l, bool general, bool stats) {
  switch (l.path) {
    case XENT_PATH_RING: return general ? fwd_ring<T, true> : fwd_ring<T, false>;
    case XENT_PATH_STREAM: return general ? fwd_stream<T, true> : fwd_stream<T, false>;
    case XENT_PATH_ONEREAD:
      return general ? pick_oneread<T, true>(l.vecs) : pick_oneread<T, false>(l.vecs);
    case XENT_PATH_KEEP: return pick_tworead<T, true>(general, stats);
    case XENT_PATH_WARP:
      if (general) return fwd_warprow<T, true, true, 0>;
      if (stats) return fwd_warprow<T, false, true, 0>;
      switch (l.vecs) { /* the plain kernel's pipelined pass: vecs a stage */
        case 4:
          switch (warp_split(l, general, stats)) {
            case 2: return fwd_warprow<T, false, false, 4, 2>;
            case 4: return fwd_warprow<T, false, false, 4, 4>;
            case 8: return fwd_warprow<T, false, false, 4, 8>;
          }
          return fwd_warprow<T, false, false, 4>;
        case 6: return fwd_warprow<T, false, false, 6>;
        case 8: return fwd_warprow<T, false, false, 8>;
      }
      return fwd_warprow<T, false, false, 0>;
    case XENT_PATH_SEGMENT: /* the plain kernel only (choose_launch) */
      if (general || stats) return nullptr;
      return l.vecs == 8 ? fwd_segment<T, 8> : fwd_segment<T, 4>;
    case XENT_PATH_STAGED:
      if (general) return fwd_staged<T, 4, true, true>;
      if (stats) return fwd_staged<T, 4, false, true>;
      return l.vecs == 8 ? fwd_staged<T, 8, false, false> : fwd_staged<T, 4, false, false>;
  }
  return pick_tworead<T, false>(general, stats);
}

fwd_kernel pick_kernel_dtype(xent_dtype dt, const xent_launch &l, bool general, bool stats) {
  switch (dt) {
    case XENT_FLOAT32: return pick_kernel<float>(l, general, stats);
    case XENT_BFLOAT16: return pick_kernel<__nv_bfloat16>(l, general, stats);
    case XENT_FLOAT16: return pick_kernel<__half>(l, general, stats);
  }
  return nullptr;
}

bool rows_aligned(const xent_input *in) {
  return ((uintptr_t)in->logits & 15u) == 0 &&
         (in->row_stride * (int64_t)xent_dtype_size(in->dtype)) % 16 == 0;
}

xent_status choose_launch(const xent_call *c, const dev_props *dp, xent_launch *l) {
  const int es = (int)xent_dtype_size(c->in.dtype);
  /* as launch_forward picks the kernel: general, or the statistics flags */
  const bool plain = !c->in.weights && !c->opt.use_softcap && c->opt.label_smoothing == 0.0f &&
                     !c->out.token_accuracy && !c->out.predicted;
  if (g_override_on && (c->write_grad || g_override.path != XENT_PATH_RING)) {
    const int aligned = rows_aligned(&c->in);
    xent_launch o = g_override;
    bool ok = o.threads >= 32 && o.threads % 32 == 0 && o.threads <= 1024;
    if (o.path == XENT_PATH_STREAM) {
      o.cluster = 1;
      ok = ok && xent_stream_fits(&o, dp->sm_major, es, c->in.vocab, aligned, dp->smem_optin);
    } else if (o.path == XENT_PATH_RING) {
      if (o.cluster == 0) /* the ring's own choice for this many slots */
        o.cluster = xent_ring_cluster(dp->sm_major, o.slots, es, c->in.vocab, aligned);
      o.chunk_vecs = XENT_RING_CHUNK_VECS;
      ok = ok && o.slots <= dp->ring_slots &&
           xent_ring_fits(&o, dp->sm_major, es, c->in.vocab, aligned);
    } else {
      if (o.cluster < 1) o.cluster = 1;
      ok = ok && o.cluster <= XENT_MAX_CLUSTER && (o.cluster == 1 || dp->sm_major >= 9);
      if (o.path == XENT_PATH_KEEP)
        ok = ok && xent_keep_fits(&o, es, c->in.vocab, dp->smem_optin);
      if (o.hint) /* L2 policies: sm_80+ (only path 1 sets it) */
        ok = ok && dp->sm_major >= 8;
      if (o.path == XENT_PATH_STAGED) {
        ok = ok && xent_staged_fits(&o, dp->sm_major, dp->smem_optin);
      }
      if (o.path == XENT_PATH_WARP) /* no gradient; the kernel's launch bounds */
        ok = ok && !c->write_grad && o.cluster == 1 && o.threads <= XENT_MAX_WARP_THREADS &&
             (o.vecs == 0 || o.vecs == 4 || o.vecs == 6 || o.vecs == 8) &&
             (o.warp_split <= 1 ||
              ((o.warp_split == 2 || o.warp_split == 4 || o.warp_split == 8) && o.vecs == 4 &&
               o.threads % (32 * o.warp_split) == 0));
      if (o.path == XENT_PATH_SEGMENT) /* no gradient; the plain kernel's rows must fit */
        ok = ok && !c->write_grad && o.cluster == 1 &&
             (!plain || (xent_segment_fits(&o, es, c->in.vocab) &&
                         c->in.rows * xent_segment_count(&o, es, c->in.vocab) <= 0x7fffffffLL));
      if (o.path == XENT_PATH_ONEREAD)
        ok = ok && o.threads <= XENT_MAX_ONEREAD_THREADS &&
             (o.vecs == 2 || o.vecs == 4 || o.vecs == 8 || o.vecs == 16) &&
             xent_launch_fits(&o, es, c->in.vocab);
    }
    if (!ok)
      return xent_fail(XENT_ERROR_UNSUPPORTED,
                       "tune: path %d cluster %d threads %d vecs %d slots %d keep %d cannot run "
                       "V = %lld here",
                       o.path, o.cluster, o.threads, o.vecs, o.slots, o.keep,
                       (long long)c->in.vocab);
    *l = o;
    /* the plain kernel's path alone: other calls as the table maps them */
    if (o.path == XENT_PATH_SEGMENT && !plain)
      *l = xent_launch_nograd_general(o, es, c->in.vocab, c->in.rows, dp->sms);
    return XENT_OK;
  }
  *l = xent_launch_pick(dp->sm_major, es, c->in.vocab, c->write_grad, c->in.rows, dp->sms);
  if (!c->write_grad && !plain)
    *l = xent_launch_nograd_general(*l, es, c->in.vocab, c->in.rows, dp->sms);
  if (l->path == XENT_PATH_STAGED) {
    /* The table assumes an H200's 227 KB a block: with less, fewer chunks,
     * and failing that the kernels of GPUs without the staged path. */
    while (l->slots > 2 && !xent_staged_fits(l, dp->sm_major, dp->smem_optin)) {
      l->slots--;
      if (l->reuse > l->slots) l->reuse = l->slots;
    }
    if (!xent_staged_fits(l, dp->sm_major, dp->smem_optin))
      *l = xent_launch_pick(8, es, c->in.vocab, c->write_grad, c->in.rows, dp->sms);
  }
  return XENT_OK;
}

/* Launch as clusters of K blocks, with `attr` as the storage; K = 1 only
 * when `always` (the cluster occupancy query needs the attribute). */
void set_cluster(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int K, bool always) {
  if (K <= 1 && !always) return;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = (unsigned)K;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

int g_pdl = 1; /* xent_tune_pdl: 0 none, 1 the rule below, 2 every launch */

/* A programmatic launch (sm_90+): the kernel may start before the one ahead
 * of it in the stream has ended, and waits for it in kernel_enter. `attr`
 * is the storage of cfg's attributes, with room for one more. */
void set_pdl(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int sm_major) {
  if (!g_pdl || sm_major < 9) return;
  cudaLaunchAttribute *a = attr + cfg->numAttrs;
  a->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a->val.programmaticStreamSerializationAllowed = 1;
  cfg->attrs = attr;
  cfg->numAttrs++;
}

/* A launch of `grid` blocks of `threads` threads on `stream`, programmatic
 * where set_pdl allows it; `attr` is the storage of its one attribute. */
cudaLaunchConfig_t plain_config(unsigned grid, unsigned threads, cudaStream_t stream,
                                cudaLaunchAttribute *attr, int sm_major) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.stream = stream;
  set_pdl(&cfg, attr, sm_major);
  return cfg;
}

/* A persistent kernel's grid: as many clusters of l.cluster blocks (the
 * ring) or blocks (the stream kernel, which also runs below sm_90, where the
 * cluster query does not exist) as can be resident at once, cached per
 * kernel and shape of launch. The kernel's shared-memory limit is set to
 * `smem_max`, the largest this path uses on this GPU, so that every cached
 * configuration stays launchable. */
struct resident_entry {
  fwd_kernel k;
  int dev, cluster, threads, smem, units;
};
resident_entry g_resident[32];
int g_resident_n = 0;

/* Threads per block of a launch: the staged path's producer warp on top of
 * its consumer threads. */
int block_threads(const xent_launch &l) {
  return l.threads + (l.path == XENT_PATH_STAGED ? 32 : 0);
}

xent_status resident_units(fwd_kernel k, const xent_launch &l, const dev_props *dp, int smem,
                           int smem_max, int *units) {
  const bool clusters = l.path == XENT_PATH_RING || l.cluster > 1;
  const int threads = block_threads(l);
  int dev = 0;
  CK(cudaGetDevice(&dev));
  for (int i = 0; i < g_resident_n; i++) {
    const resident_entry &e = g_resident[i];
    if (e.k == k && e.dev == dev && e.cluster == l.cluster && e.threads == threads &&
        e.smem == smem) {
      *units = e.units;
      return XENT_OK;
    }
  }
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
  int n = 0;
  if (clusters) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = dim3((unsigned)l.cluster, 1, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    set_cluster(&cfg, attr, l.cluster, true);
    CK(cudaOccupancyMaxActiveClusters(&n, k, &cfg));
  } else {
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, threads, (size_t)smem));
    n *= dp->sms;
  }
  if (n < 1 && clusters)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "no cluster of %d blocks with %d bytes of shared memory fits this GPU",
                     l.cluster, smem);
  if (n < 1)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "no block of %d threads with %d bytes of shared memory fits this GPU",
                     threads, smem);
  if (g_resident_n < 32) {
    resident_entry e = {k, dev, l.cluster, threads, smem, n};
    g_resident[g_resident_n++] = e;
  }
  *units = n;
  return XENT_OK;
}

/* A persistent kernel's grid: one block (cluster of l.cluster blocks) per
 * slot the GPU holds at once, and no more than one per row. */
xent_status persistent_grid(fwd_kernel k, const xent_launch &l, const dev_props *dp, int smem,
                            int smem_max, int64_t rows, int64_t *blocks) {
  int units = 0;
  xent_status st = resident_units(k, l, dp, smem, smem_max, &units);
  if (st) return st;
  *blocks = (rows < units ? rows : units) * (int64_t)l.cluster;
  return XENT_OK;
}

xent_status launch_forward(const xent_launch &l, const dev_props *dp, xent_dtype dt, bool general,
                           fwd_params p, cudaStream_t stream) {
  const bool stats = p.need_argmax || p.k.smoothing || l.stats;
  fwd_kernel k = pick_kernel_dtype(dt, l, general, stats);
  if (!k) return xent_fail(XENT_ERROR_UNSUPPORTED, "no kernel for vecs = %d", l.vecs);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  int64_t blocks = p.rows * l.cluster;
  cfg.dynamicSmemBytes = 0;
  if (l.path == XENT_PATH_RING) {
    const int smem = l.slots * l.chunk_vecs * 16;
    xent_status st = persistent_grid(k, l, dp, smem, dp->ring_slots * XENT_RING_CHUNK_VECS * 16,
                                     p.rows, &blocks);
    if (st) return st;
    cfg.dynamicSmemBytes = (size_t)smem;
    p.ring_slots = l.slots;
    p.ring_chunk_vecs = l.chunk_vecs;
    p.ring_lsu = l.lsu;
  } else if (l.path == XENT_PATH_STREAM) {
    const int smem = l.slots * l.threads * 16; /* cluster 1 (choose_launch) */
    xent_status st = persistent_grid(k, l, dp, smem, dp->smem_optin - XENT_STREAM_STATIC_SMEM,
                                     p.rows, &blocks);
    if (st) return st;
    cfg.dynamicSmemBytes = (size_t)smem;
    p.ring_slots = l.slots;
  } else if (l.path == XENT_PATH_STAGED) {
    p.ring_chunk_vecs = (general || stats ? 4 : l.vecs) * l.threads; /* as pick_kernel */
    const int smem = l.slots * p.ring_chunk_vecs * 16;
    xent_status st = persistent_grid(k, l, dp, smem, dp->smem_optin - XENT_STAGED_STATIC_SMEM,
                                     p.rows, &blocks);
    if (st) return st;
    cfg.dynamicSmemBytes = (size_t)smem;
    p.ring_slots = l.slots;
    p.ring_reuse = l.reuse;
    /* as the kernel caps it: nothing to hold without a gradient, no room
     * in the general and statistics kernels */
    p.ring_hold = general || stats || !p.write_grad ? 0 : l.hold;
  } else if (l.path == XENT_PATH_KEEP) {
    const int es = (int)xent_dtype_size(dt);
    p.keep_vecs = xent_keep_vecs(&l, es, p.vocab);
    const int smem = p.keep_vecs * l.threads * 16;
    int64_t grid = 0; /* also sets the kernel's shared-memory limit */
    xent_status st = persistent_grid(k, l, dp, smem, dp->smem_optin - XENT_TWOREAD_STATIC_SMEM,
                                     p.rows, &grid);
    if (st) return st;
    if (!l.per_row) blocks = grid;
    cfg.dynamicSmemBytes = (size_t)smem;
  }
  const int split = warp_split(l, general, stats);
  if (l.path == XENT_PATH_WARP) {
    const int64_t per_block = l.threads / 32 / split;
    blocks = (p.rows + per_block - 1) / per_block;
  }
  if (l.path == XENT_PATH_SEGMENT) blocks = p.rows * p.seg_count; /* forward_impl's segments */
  if (blocks > 0x7fffffffLL) /* a row (or a group of rows) per block or cluster */
    return xent_fail(XENT_ERROR_UNSUPPORTED, "rows = %lld is more than one launch can hold",
                     (long long)p.rows);
  p.l2_hint = l.hint;
  cfg.gridDim = dim3((unsigned)blocks, 1, 1);
  cfg.blockDim = dim3((unsigned)block_threads(l), 1, 1);
  cfg.stream = stream;
  set_cluster(&cfg, attr, l.cluster, false);
  if (xent_launch_programmatic(&l, dp->sm_major) || g_pdl == 2) set_pdl(&cfg, attr, dp->sm_major);
  CK(cudaLaunchKernelEx(&cfg, k, p));
  const char *name = l.path == XENT_PATH_RING      ? (l.lsu ? "ring-lsu" : "ring")
                     : l.path == XENT_PATH_ONEREAD ? "one-read"
                     : l.path == XENT_PATH_STREAM  ? "stream"
                     : l.path == XENT_PATH_KEEP    ? "keep"
                     : l.path == XENT_PATH_WARP    ? "warp"
                     : l.path == XENT_PATH_STAGED  ? "staged"
                     : l.path == XENT_PATH_SEGMENT ? "segment"
                                                   : "two-read";
  if (l.path == XENT_PATH_STREAM)
    snprintf(g_last_launch, sizeof g_last_launch, "%s threads=%d slots=%d grid=%lld%s", name,
             l.threads, l.slots, (long long)blocks, general ? " general" : "");
  else if (l.path == XENT_PATH_RING)
    snprintf(g_last_launch, sizeof g_last_launch, "%s cluster=%d threads=%d slots=%d grid=%lld%s",
             name, l.cluster, l.threads, l.slots, (long long)blocks, general ? " general" : "");
  else if (l.path == XENT_PATH_STAGED)
    snprintf(g_last_launch, sizeof g_last_launch,
             "%s cluster=%d threads=%d+32 slots=%d reuse=%d hold=%d chunk=%dKB grid=%lld%s%s%s",
             name, l.cluster, l.threads, l.slots, l.reuse, p.ring_hold, p.ring_chunk_vecs / 64,
             (long long)blocks, p.row_ticket ? " ticket" : "", l.hint ? " l2-hint" : "",
             general ? " general" : "");
  else if (l.path == XENT_PATH_KEEP)
    snprintf(g_last_launch, sizeof g_last_launch,
             "%s cluster=%d threads=%d smem_vecs=%d grid=%lld%s%s", name, l.cluster, l.threads,
             p.keep_vecs, (long long)blocks, l.per_row ? " per-row" : "",
             general ? " general" : "");
  else if (l.path == XENT_PATH_SEGMENT)
    snprintf(g_last_launch, sizeof g_last_launch, "%s threads=%d vecs=%d segments=%d grid=%lld",
             name, l.threads, l.vecs, p.seg_count, (long long)blocks);
  else if (split > 1)
    snprintf(g_last_launch, sizeof g_last_launch, "%s cluster=%d threads=%d vecs=%d split=%d",
             name, l.cluster, l.threads, l.vecs, split);
  else
    snprintf(g_last_launch, sizeof g_last_launch, "%s cluster=%d threads=%d vecs=%d%s%s%s", name,
             l.cluster, l.threads, l.vecs, p.l2_hint ? " l2-hint" : "", stats ? " stats" : "",
             general ? " general" : "");
  return XENT_OK;
}

/* ------------------------------------------------------------------------ */
/* Forward                                                                   */
/* ------------------------------------------------------------------------ */

const float kNaN = __builtin_nanf("");

xent_status forward_rows0(const xent_call *c, cudaStream_t stream) {
  if (c->opt.reduction == XENT_REDUCTION_NONE) return XENT_OK;
  float lv = c->opt.reduction == XENT_REDUCTION_MEAN ? kNaN : 0.0f;
  fill_kernel<<<1, 1, 0, stream>>>(c->out.loss, c->out.z_loss, c->out.token_accuracy, lv, lv,
                                   kNaN);
  CK(cudaGetLastError());
  return XENT_OK;
}

/* Checked mode's host side: the count kernel's verdict (first bad target,
 * first bad weight) in pinned host memory and an event after the count
 * kernel, one pair per host thread (made again when its calls move to
 * another device). The count kernel writes the verdict straight into the
 * pinned memory, mapped into the device; where a GPU cannot map host memory,
 * a copy behind the count kernel fetches it. Either way the rest of the call
 * is queued before the host waits: its kernels read the same verdict on the
 * device and return at once on a bad target (call_rejected), so the GPU
 * never idles for the round trip and a rejected call writes nothing. */
struct verdict_slot {
  unsigned long long *host = nullptr; /* [0] bad_target, [1] bad_weight         */
  unsigned long long *mapped = nullptr; /* the same memory seen from the device,
                                         NULL where the GPU cannot map it        */
  cudaEvent_t done = nullptr;
  int dev = -1;
  bool copy = false; /* this call fetches the verdict with a copy       */
  ~verdict_slot() { /* at thread exit; errors (a runtime already gone) are moot */
    if (done) (void)cudaEventDestroy(done);
    if (host) (void)cudaFreeHost(host);
  }
};
thread_local verdict_slot g_verdict;
bool g_verdict_copy = false; /* xent_tune_verdict_copy: the copy even where mapped */
static_assert(offsetof(ws_header, bad_weight) == offsetof(ws_header, bad_target) + 8,
              "verdict_mark copies the two verdict fields as one");

/* Checked mode, before the count kernel: the slot for this device; returns
 * in *dev_view where the count kernel writes the verdict (NULL: copy it). */
xent_status verdict_prepare(unsigned long long **dev_view) {
  verdict_slot *v = &g_verdict;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (!v->host &&
      cudaHostAlloc((void **)&v->host, 2 * sizeof *v->host,
                    cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError(); /* no mapped memory here: plain pinned memory and the copy */
    v->host = nullptr;
    CK(cudaMallocHost((void **)&v->host, 2 * sizeof *v->host));
  }
  if (v->dev != dev) {
    if (v->done) (void)cudaEventDestroy(v->done);
    v->done = nullptr;
    v->mapped = nullptr;
    CK(cudaEventCreateWithFlags(&v->done, cudaEventDisableTiming));
    v->dev = dev;
    int can_map = 0;
    CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
    if (can_map && cudaHostGetDevicePointer((void **)&v->mapped, v->host, 0) != cudaSuccess) {
      (void)cudaGetLastError(); /* not mapped for this device: the copy instead */
      v->mapped = nullptr;
    }
  }
  v->copy = g_verdict_copy || !v->mapped;
  *dev_view = v->copy ? nullptr : v->mapped;
  return XENT_OK;
}

/* Checked mode, after the count kernel: fetch the verdict if the kernel
 * could not write it, and mark the point the host waits for. */
xent_status verdict_mark(const ws_header *dh, cudaStream_t stream) {
  verdict_slot *v = &g_verdict;
  if (v->copy)
    CK(cudaMemcpyAsync(v->host, &dh->bad_target, 2 * sizeof *v->host, cudaMemcpyDeviceToHost,
                       stream));
  CK(cudaEventRecord(v->done, stream));
  return XENT_OK;
}

/* Checked mode, once the call's kernels are queued: wait for the verdict
 * and turn a bad target or weight into the call's error. */
xent_status check_verdict(const xent_call *c) {
  CK(cudaEventSynchronize(g_verdict.done));
  ws_header h;
  h.bad_target = ((volatile unsigned long long *)g_verdict.host)[0];
  h.bad_weight = ((volatile unsigned long long *)g_verdict.host)[1];
  if (h.bad_target) {
    long long r = (long long)(c->in.rows - (int64_t)h.bad_target);
    long long y = 0;
    if (c->in.target_type == XENT_INT32) {
      int32_t v;
      CK(cudaMemcpy(&v, (const int32_t *)c->in.targets + r, 4, cudaMemcpyDeviceToHost));
      y = v;
    } else {
      int64_t v;
      CK(cudaMemcpy(&v, (const int64_t *)c->in.targets + r, 8, cudaMemcpyDeviceToHost));
      y = v;
    }
    return xent_fail(XENT_ERROR_BAD_TARGET,
                     "targets[%lld] = %lld is outside [0, %lld) and is not ignore_index %lld", r,
                     y, (long long)c->in.vocab, (long long)c->opt.ignore_index);
  }
  if (h.bad_weight) {
    long long j = (long long)(c->in.vocab - (int64_t)h.bad_weight);
    float w;
    CK(cudaMemcpy(&w, c->in.weights + j, 4, cudaMemcpyDeviceToHost));
    return xent_fail(XENT_ERROR_BAD_WEIGHT, "weights[%lld] = %g is not finite", j, (double)w);
  }
  return XENT_OK;
}

xent_status forward_impl(const xent_call *c, const dev_props *dp) {
  const xent_input *in = &c->in;
  const xent_options *opt = &c->opt;
  const xent_output *out = &c->out;
  cudaStream_t stream = (cudaStream_t)c->ex.stream;
  const bool checked = opt->target_check == XENT_TARGETS_CHECKED;

  if (checked) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    CK(cudaStreamIsCapturing(stream, &cs));
    if (cs != cudaStreamCaptureStatusNone)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "target_check is XENT_TARGETS_CHECKED, which waits for the device, but the "
                       "stream is being captured: use XENT_TARGETS_UNCHECKED in CUDA graphs");
  }
  if (in->rows == 0) return forward_rows0(c, stream);

  const bool mean = opt->reduction == XENT_REDUCTION_MEAN;
  const bool per_row = opt->reduction == XENT_REDUCTION_NONE;
  const bool weighted = in->weights != NULL;
  /* The count kernel runs where something must know N, W or the verdict
   * before the forward kernel: the checked mode, weights, or a gradient
   * scaled by 1/N. Otherwise the finalize kernel counts N itself (one memset
   * and one launch fewer: the forward without gradient, most of all). */
  const bool need_count = weighted || checked || (c->write_grad && mean);
  const bool general = weighted || opt->use_softcap;

  xent_launch l;
  xent_status st = choose_launch(c, dp, &l);
  if (st) return st;
  /* The staged path's row counter lives in the workspace header, zeroed
   * with it. */
  const bool ticket = l.path == XENT_PATH_STAGED && l.ticket;
  /* The segment path: rows of two segments leave theirs in the row arrays,
   * for the merge kernel; a row of one is finished by its block. */
  const int es = (int)xent_dtype_size(in->dtype);
  const long long segs =
      l.path == XENT_PATH_SEGMENT ? xent_segment_count(&l, es, in->vocab) : 0;
  const bool merge = segs > 1;
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
  ws_header *hdr = (ws_header *)ws;
  const size_t arr = xent_ws_row_array_bytes(in->rows);
  float *ws_loss = ws ? (float *)(ws + XENT_WS_HEADER_BYTES + XENT_WS_PARTIAL_BYTES) : NULL;
  float *ws_z = ws ? (float *)((char *)ws_loss + arr) : NULL;
  float *ws_acc = ws ? (float *)((char *)ws_z + arr) : NULL;

  st = XENT_OK;
  do {
    if (need_count || ticket) {
      cudaError_t e = cudaMemsetAsync(hdr, 0, XENT_WS_HEADER_BYTES, stream);
      if (e != cudaSuccess) {
        st = cuda_fail(e, "cudaMemsetAsync");
        break;
      }
    }
    if (need_count) {
      cudaError_t e;
      prep_params q;
      q.targets = in->targets;
      q.target64 = in->target_type == XENT_INT64;
      q.rows = in->rows;
      q.vocab = (int)in->vocab;
      q.ignore_index = opt->ignore_index;
      q.weights = in->weights;
      q.mean = mean;
      q.hdr = hdr;
      q.partials = (float *)(ws + XENT_WS_HEADER_BYTES);
      q.host_verdict = NULL;
      if (checked && (st = verdict_prepare(&q.host_verdict))) break;
      int64_t span = in->rows > in->vocab || !weighted ? in->rows : in->vocab;
      int64_t blocks = (span + kCountThreads - 1) / kCountThreads;
      if (blocks > kCountMaxBlocks) blocks = kCountMaxBlocks;
      if (blocks < 1) blocks = 1;
      count_kernel<<<(unsigned)blocks, kCountThreads, 0, stream>>>(q);
      if ((e = cudaGetLastError()) != cudaSuccess) {
        st = cuda_fail(e, "count_kernel launch");
        break;
      }
      if (checked && (st = verdict_mark(hdr, stream))) break;
    }

    fwd_params p;
    memset(&p, 0, sizeof p);
    p.x = (char *)in->logits;
    p.rows = in->rows;
    p.stride_bytes = in->row_stride * (int64_t)xent_dtype_size(in->dtype);
    p.vocab = (int)in->vocab;
    p.cluster = l.cluster;
    p.targets = in->targets;
    p.target64 = in->target_type == XENT_INT64;
    p.ignore_index = opt->ignore_index;
    p.weights = in->weights;
    p.k.alpha = opt->label_smoothing;
    p.k.eps = opt->label_smoothing / (float)in->vocab;
    p.k.inv_vocab = 1.0f / (float)in->vocab;
    p.k.s = opt->lse_square_scale;
    p.k.sum_w = 0.0f;
    p.k.weighted = weighted;
    p.k.smoothing = opt->label_smoothing > 0.0f;
    p.use_softcap = opt->use_softcap;
    p.softcap = opt->softcap;
    p.inv_softcap = opt->use_softcap ? 1.0f / opt->softcap : 0.0f;
    p.write_grad = c->write_grad;
    p.need_argmax = out->token_accuracy || out->predicted;
    p.per_row_out = per_row;
    p.hdr = need_count ? hdr : NULL;
    p.verdict = checked ? hdr : NULL;
    p.row_ticket = ticket ? &hdr->next_row : NULL;
    p.row_loss = per_row ? out->loss : ws_loss;
    p.row_z = per_row ? out->z_loss : ((opt->lse_square_scale > 0.0f || out->z_loss) ? ws_z : NULL);
    p.row_acc = per_row ? out->token_accuracy : (out->token_accuracy ? ws_acc : NULL);
    p.lse_out = out->lse;
    p.pred_out = out->predicted;
    if (segs > 0) { /* equal segments of the rows' whole vectors */
      const long long nvec = in->vocab * es / 16;
      p.seg_lse = merge ? ws_loss : NULL;
      p.seg_pitch = (int64_t)(arr / sizeof(float));
      p.seg_count = (int)segs;
      p.seg_vecs = (int)((nvec + segs - 1) / segs);
    }
    if ((st = launch_forward(l, dp, in->dtype, general, p, stream))) break;

    if (merge) { /* the segments merged, a thread per row */
      cudaLaunchAttribute attr[1];
      const cudaLaunchConfig_t cfg =
          plain_config((unsigned)((in->rows + 255) / 256), 256, stream, attr, dp->sm_major);
      cudaError_t e = cudaLaunchKernelEx(&cfg, fwd_segment_merge, p);
      if (e != cudaSuccess) {
        st = cuda_fail(e, "fwd_segment_merge launch");
        break;
      }
    }
    if (!per_row) {
      finalize_params f;
      f.hdr = p.hdr;
      f.verdict = p.verdict;
      f.count = !p.hdr && (mean || out->token_accuracy);
      f.row_loss = ws_loss;
      f.row_z = p.row_z;
      f.row_acc = p.row_acc;
      f.rows = in->rows;
      f.mean = mean;
      f.weighted = weighted;
      f.loss = out->loss;
      f.z_loss = out->z_loss;
      f.acc = out->token_accuracy;
      cudaLaunchAttribute attr[1];
      const cudaLaunchConfig_t cfg = plain_config(1, kFinalizeThreads, stream, attr, dp->sm_major);
      cudaError_t e = cudaLaunchKernelEx(&cfg, finalize_kernel, f);
      if (e != cudaSuccess) {
        st = cuda_fail(e, "finalize_kernel launch");
        break;
      }
    }
  } while (0);
  /* Every kernel of the call is queued behind the verdict (written by the
   * count kernel, or copied back, before them). */
  if (checked && st == XENT_OK) st = check_verdict(c);

  if (owned) {
    cudaError_t e = cudaFreeAsync(ws, stream);
    if (e != cudaSuccess && st == XENT_OK) st = cuda_fail(e, "cudaFreeAsync");
  }
  return st;
}

/* ------------------------------------------------------------------------ */
/* Backward                                                                  */
/* ------------------------------------------------------------------------ */

/* The backward's grid, in waves of the blocks the GPU holds at once:
 * kScaleWaves, or what xent_tune_backward set (-1: one item a block). */
constexpr int kScaleWaves = 8;
int g_scale_waves = 0;

/* The scale kernel's launch. A block takes up to kScaleMaxThreads threads, as
 * few as cover a row in one item where rows are short. The grid is at most
 * `waves` times the blocks the GPU holds at once: a block then takes a few
 * items, and blocks finishing early take the next ones, so that SMs that
 * stream slower get less of the work (a persistent grid, one block per slot,
 * was 4 % slower on an H200: bench/NOTES.md v10). Few waves also keep the
 * skip cheap: with a scalar factor of 1 every block reads it and returns. */
template <typename T>
xent_status launch_scale(const scale_params &s, const dev_props &dp, cudaStream_t stream) {
  const int sms = dp.sms;
  const int vn = 16 / (int)sizeof(T);
  const int64_t nvec = s.vocab / vn;
  int64_t threads = (nvec + kScaleUnroll - 1) / kScaleUnroll;
  threads = (threads + 31) / 32 * 32;
  if (threads < 32) threads = 32;
  if (threads > kScaleMaxThreads) threads = kScaleMaxThreads;
  const int64_t per_chunk = threads * kScaleUnroll;
  int64_t chunks = (nvec + per_chunk - 1) / per_chunk;
  if (chunks < 1) chunks = 1;
  /* Resident blocks per SM of this kernel, by block size (a multiple of 32
   * up to 512), asked of the runtime once per thread and device. */
  thread_local int resident[kScaleMaxThreads / 32], resident_dev = -1;
  const int slot = (int)threads / 32 - 1;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (resident_dev != dev) {
    memset(resident, 0, sizeof resident);
    resident_dev = dev;
  }
  if (resident[slot] < 1) {
    int n = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, scale_kernel<T>, (int)threads, 0));
    resident[slot] = n < 1 ? 1 : n;
  }
  const int per_sm = resident[slot];
  const int waves = g_scale_waves > 0 ? g_scale_waves : kScaleWaves;
  int64_t items = s.rows * chunks, grid = (int64_t)(sms > 0 ? sms : 132) * per_sm * waves;
  if (g_scale_waves < 0 || grid > items) grid = items;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      plain_config((unsigned)grid, (unsigned)threads, stream, attr, dp.sm_major);
  CK(cudaLaunchKernelEx(&cfg, scale_kernel<T>, s, (int)chunks));
  snprintf(g_last_scale, sizeof g_last_scale, "scale threads=%d unroll=%d grid=%lld",
           (int)threads, kScaleUnroll, (long long)grid);
  return XENT_OK;
}

}  // namespace

/* ------------------------------------------------------------------------ */
/* Entry points (internal.h)                                                 */
/* ------------------------------------------------------------------------ */

extern "C" {

int xent_cuda_built(void) { return 1; }

int xent_cuda_pointer_device(const void *p) {
  if (!p || device_count() == 0) return -1;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return a.device;
  return -1;
}

void xent_cuda_fill_info(xent_info *info) {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info->cuda_runtime_version = v;
  v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) info->cuda_driver_version = v;
  (void)cudaGetLastError();
  info->cuda_devices = device_count();
}

xent_status xent_cuda_device_info(int device, xent_device_info *info) {
  int n = device_count();
  if (device < 0 || device >= n)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "device is %d but %d CUDA device(s) exist", device,
                     n);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, device));
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->sm_major = prop.major;
  info->sm_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
  int cl = 0;
  if (cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
    (void)cudaGetLastError();
    cl = 0;
  }
  info->cluster_launch = cl;
  info->global_memory = prop.totalGlobalMem;
  info->shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  return XENT_OK;
}

xent_status xent_cuda_forward(const xent_call *c) {
  device_scope scope;
  xent_status st = enter_device(c->ex.device, &scope);
  if (st) return st;
  dev_props props = {0, 0, 0, 0, 0};
  st = get_props(c->ex.device, &props);
  if (!st) st = forward_impl(c, &props);
  leave_device(&scope);
  return st;
}

xent_status xent_cuda_backward(const xent_scale_call *c) {
  device_scope scope;
  xent_status st = enter_device(c->ex.device, &scope);
  if (st) return st;
  scale_params s;
  s.g = (char *)c->grad;
  s.rows = c->rows;
  s.stride_bytes = c->row_stride * (int64_t)xent_dtype_size(c->dtype);
  s.vocab = (int)c->vocab;
  s.grad_output = c->grad_output;
  s.per_row = c->grad_output && c->grad_output_count == c->rows && c->rows != 1;
  s.host_scale = c->host_scale;
  cudaStream_t stream = (cudaStream_t)c->ex.stream;
  dev_props props = {0, 0, 0, 0, 0};
  st = get_props(c->ex.device, &props);
  if (!st) {
    switch (c->dtype) {
      case XENT_FLOAT32: st = launch_scale<float>(s, props, stream); break;
      case XENT_BFLOAT16: st = launch_scale<__nv_bfloat16>(s, props, stream); break;
      case XENT_FLOAT16: st = launch_scale<__half>(s, props, stream); break;
    }
  }
  leave_device(&scope);
  return st;
}

void xent_tune_override(int path, int cluster, int threads, int size) {
  xent_launch o = {path, cluster, threads, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (path == XENT_PATH_TWOREAD) {
    o.hint = size & 1;
    o.stats = (size >> 1) & 1;
  }
  if (path == XENT_PATH_ONEREAD) o.vecs = size;
  if (path == XENT_PATH_KEEP || path == XENT_PATH_KEEP + 1) o.keep = size;
  if (path == XENT_PATH_KEEP + 1) { /* 7: the keep path, a row per block */
    o.path = XENT_PATH_KEEP;
    o.per_row = 1;
  }
  if (path == XENT_PATH_SEGMENT) o.vecs = size;
  if (path == XENT_PATH_WARP) { /* size = split * 100 + vecs (0, or 4, 6, 8) */
    o.vecs = size % 100;
    o.warp_split = size / 100;
  }
  if (path == XENT_PATH_STAGED || path == XENT_PATH_STAGED + 1) {
    /* size = hold * 1000000 + reuse * 100000 + hint * 10000 + vecs * 100 +
     * slots; 10: no row counter */
    o.path = XENT_PATH_STAGED;
    o.slots = size % 100;
    o.vecs = size / 100 % 100;
    o.hint = size / 10000 % 10 != 0;
    o.reuse = size / 100000 % 10;
    o.hold = size / 1000000 % 10;
    o.ticket = path == XENT_PATH_STAGED;
  }
  if (path == XENT_PATH_RING || path == XENT_PATH_RING + 1 || path == XENT_PATH_STREAM)
    o.slots = size;
  if (path == XENT_PATH_RING + 1) { /* 4: the ring with per-thread copies */
    o.path = XENT_PATH_RING;
    o.lsu = 1;
  }
  g_override = o;
  g_override_on = path >= XENT_PATH_TWOREAD && path <= XENT_PATH_SEGMENT;
}

const char *xent_tune_last_launch(void) { return g_last_launch; }

void xent_tune_backward(int waves) { g_scale_waves = waves; }

void xent_tune_verdict_copy(int on) { g_verdict_copy = on != 0; }

void xent_tune_pdl(int on) { g_pdl = on == 0 ? 0 : on == 2 ? 2 : 1; }

int xent_tune_l2_normal(const void *p, size_t bytes, void *stream) {
  if (!p || bytes == 0) return 0; /* nothing to set */
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (major < 8) return 0;
  /* applypriority needs a 128-byte aligned line address */
  const uintptr_t a = (uintptr_t)p & ~(uintptr_t)127;
  bytes += (uintptr_t)p - a;
  l2_normal_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((const char *)a, bytes);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

int xent_tune_l2_read(const void *p, size_t bytes, void *stream) {
  if (!p || bytes < 16) return 0;
  l2_read_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>((const uint4 *)p, bytes / 16);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

const char *xent_tune_last_backward(void) { return g_last_scale; }

}  /* extern "C" */
