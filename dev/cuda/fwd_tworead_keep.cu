/*
 * fwd_tworead_keep.cu - the two-read kernel with what the library's leaves
 * out: KEEP, each thread holding its first `keep` vectors of the row in
 * shared memory from pass 1 to pass 2 (which re-reads only the rest), on a
 * persistent grid or a row per block; and a row split over a cluster of K
 * blocks that exchange their statistics by asynchronous stores into each
 * other's inboxes (cluster_exchange).
 *
 * Tried in v6 to v11 (bench/HISTORY.md, H200): holding the whole row was
 * slower at every size (v6); 13 vectors a thread in shared memory, a row
 * per block, was the table's choice on sm_90 for rows of 80 to 256 KB from
 * v8 to v11 (bf16 8192 x 128256: 1.2941 ms against 1.3257 for two reads;
 * 50304: 0.5033 against 0.5464), until the staged kernel took every row
 * from 60 KB (v12). A row over a cluster of two-read blocks was slower at
 * every size (v2: K = 4, 3.25 ms at bf16 8192 x 128256; v9 with the
 * asynchronous exchange, 2 x 512 threads: 1.4648 ms against the keep
 * path's 1.2970).
 *
 *   fwd_tworead_keep [V] [keep vectors] [cluster] [threads] [fp32|bf16]
 */
#include "common.cuh"

namespace xent {

constexpr int kTwoReadUnroll = 4;

/* Pass 1 over vectors [j_begin, j_end) (and the extra elements when
 * do_extras), by `nt` threads of which this is number `tid`, U vectors a
 * thread in flight: an online (max, sum) and the max-pass statistics. With
 * KEEP, the thread's first `ks_vecs` vectors go to shared memory `ks`
 * (vector k of thread t at ks[k * nt + t]); those are read evict-first
 * (pass 2 will not ask L2 for them), the rest cache-all. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH, bool KEEP, int U = kTwoReadUnroll>
__device__ __forceinline__ void keep_pass1(const fwd_params &p, const char *rowp,
                                              const row_geom &g, int j_begin, int j_end,
                                              bool do_extras, part &q, uint4 *ks, int ks_vecs,
                                              int tid, int nt) {
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * ES);
  float m = -INFINITY, s = 0.0f;
  const bool hint = !KEEP && p.l2_hint && p.write_grad;
  const uint64_t pol = hint ? l2_policy(true) : 0;
  int it = 0;
  for (int j0 = j_begin + tid; j0 < j_end; j0 += U * nt, it++) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end) {
        if (KEEP) {
          v[u] = it * U + u < ks_vecs ? ld_once(vp + j) : __ldca(vp + j);
        } else if (hint) {
          v[u] = ld_l2(vp + j, pol);
        } else {
          v[u] = p.write_grad ? __ldca(vp + j) : ld_once(vp + j);
        }
      }
    }
    if (KEEP && it * U < ks_vecs) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int k = it * U + u;
        if (k < ks_vecs && j0 + u * nt < j_end) ks[k * nt + tid] = v[u];
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      int j = j0 + u * nt;
      if (j < j_end) fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, v[u], g.head + j * VN, m, s, q);
    }
  }
  if (do_extras) fold_extras<T, GENERAL, ARGMAX, SMOOTH>(p, rowp, g, tid, nt, m, s, q);
  q.m = m;
  q.s = s;
}

/* Where pass 2 reads a row: vectors [j_begin, j_end) from vp (per_iter =
 * U * threads per group), under L2 policy `pol` when `hint`; with KEEP each
 * thread's first keep_vecs from shared memory. */
struct keep_walk {
  uint4 *vp;
  int j_begin, j_end, per_iter;
  bool hint;
  uint64_t pol;
  const uint4 *keep_smem;
  int keep_vecs;
};

/* This thread's vectors of pass 2's group `it`. */
template <bool KEEP>
__device__ __forceinline__ void keep_load2(const keep_walk &w, int it,
                                              uint4 (&v)[kTwoReadUnroll]) {
  const int nt = blockDim.x, tid = threadIdx.x;
  const int j0 = w.j_begin + it * w.per_iter + tid;
#pragma unroll
  for (int u = 0; u < kTwoReadUnroll; u++) {
    const int j = j0 + u * nt;
    if (j < w.j_end) {
      if (KEEP) {
        const int k = it * kTwoReadUnroll + u;
        v[u] = k < w.keep_vecs ? w.keep_smem[k * nt + tid] : ld_once(w.vp + j);
      } else if (w.hint) {
        v[u] = ld_l2(w.vp + j, w.pol);
      } else {
        v[u] = ld_once(w.vp + j);
      }
    }
  }
}

template <typename T, bool GENERAL, bool KEEP, bool STATS>
__global__ void __launch_bounds__(1024) fwd_tworead_keep(const fwd_params p, const int keep_vecs) {
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  constexpr int ES = (int)sizeof(T);
  constexpr int U = kTwoReadUnroll;
  __shared__ part scratch[kMaxWarps + 1];
  const int K = p.cluster;
  unsigned rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ cluster_inbox inbox;
  unsigned exchanged = 0; /* rows exchanged; at 0 the cluster barrier is not waited yet */
  if (K > 1) inbox_init(&inbox);
  if (K > 1) rank = cluster_rank();
#else
  if (K > 1) return; /* never launched: the host only picks clusters on sm_90+ */
#endif
  const int tid = threadIdx.x, nt = blockDim.x;
  const bool lead = rank == 0;
  extern __shared__ uint4 keep_smem[]; /* KEEP: the held vectors */
  const int ks_vecs = KEEP ? keep_vecs : 0;
  /* A block (cluster) per row, or with a smaller grid (the keep path) each
   * takes every (grid / K)-th row, loading the next row's target early. */
  const int64_t row_step = (int64_t)(gridDim.x / (unsigned)K);
  int64_t row = (int64_t)(blockIdx.x / (unsigned)K);
  int64_t y_next = row < p.rows ? load_target(p.targets, p.target64, row) : 0;
  for (; row < p.rows; row += row_step) {
    const int64_t y64 = y_next;
    if (row + row_step < p.rows) y_next = load_target(p.targets, p.target64, row + row_step);
    char *rowp = p.x + row * p.stride_bytes;
    const row_geom g = make_geom<T>(rowp, p.vocab);
    uint4 *vp = (uint4 *)(rowp + (int64_t)g.head * ES);
    /* This block's vectors: a contiguous share of the row. */
    const int chunk = (g.nvec + K - 1) / K;
    const int j_begin = min((int)rank * chunk, g.nvec);
    const int j_end = min(j_begin + chunk, g.nvec);

    const bool bad = target_bad(p, y64);
    const bool ignored = !bad && y64 == p.ignore_index;
    if (ignored || bad) {
      /* Uniform over the cluster: no block touches distributed shared memory. */
      if (lead && tid == 0) skipped_row_outputs(p, row, bad);
      if (p.write_grad)
        zero_row<T>(rowp, g, j_begin + tid, j_end, nt, lead ? tid : 0x7fffffff, nt);
      continue;
    }
    const int y = (int)y64;
    /* x'_y, loaded early by the thread that writes the row's outputs. It
     * stays in that thread's registers: in shared memory, the next row's
     * write could race with a late reader of this one (persistent grid). */
    const bool writer = lead && tid == 0;
    const float xy = writer ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;

    part q = part_empty();
#define XENT_TWOREAD_PASS1(A, S) \
  keep_pass1<T, GENERAL, A, S, KEEP>(p, rowp, g, j_begin, j_end, lead, q, keep_smem, ks_vecs, \
                                        tid, nt)
    if (STATS) XENT_WITH_FLAGS(p, XENT_TWOREAD_PASS1);
    else XENT_TWOREAD_PASS1(false, false);
#undef XENT_TWOREAD_PASS1

    /* Pass 2 walks the row backwards, a group of U vectors per thread at a
     * time: the vectors pass 1 read last are the likeliest still in L2, and
     * reading them first keeps the older ones from being evicted in between
     * (a forward re-walk of a row a little larger than its L2 share would
     * miss on every line). With KEEP the held vectors come from shared
     * memory, and only the tail is read again. Its first group is loaded
     * before the row reduction, so that the thread has loads in flight while
     * it waits for the block (bench/HISTORY.md v8; loading every next group
     * ahead as well spills registers and was slower). */
    const bool hint2 = !KEEP && p.l2_hint;
    const keep_walk w = {vp, j_begin, j_end, U * nt, hint2, hint2 ? l2_policy(false) : 0,
                            keep_smem, ks_vecs};
    const int last = (j_end - j_begin + w.per_iter - 1) / w.per_iter - 1;
    uint4 v[U];
    if (p.write_grad && last >= 0) keep_load2<KEEP>(w, last, v);

    part r = block_reduce(q, scratch);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (K > 1) {
      if (exchanged == 0) cluster_wait(); /* once: every peer's inbox is initialised */
      r = cluster_exchange(r, K, rank, &inbox, exchanged++);
    }
#endif
    const grad_coef gc = finish_row(p, r, xy, row, y, writer);

    if (p.write_grad) {
      for (int it = last; it >= 0; it--) {
        if (it != last) keep_load2<KEEP>(w, it, v);
        const int j0 = j_begin + it * w.per_iter + tid;
#pragma unroll
        for (int u = 0; u < U; u++) {
          int j = j0 + u * nt;
          if (j < j_end) {
            float f[VN];
            elem<T>::unpack(v[u], f);
            grad_vec<T, GENERAL>(p, gc, f, g.head + j * VN);
            st_grad(vp + j, elem<T>::pack(f));
          }
        }
      }
      if (lead) grad_extras<T, GENERAL>(p, gc, rowp, g, tid, nt);
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* A block that exchanged nothing (every row skipped) still completes the
   * barrier it arrived on. No peer touches this block's shared memory after
   * its last exchange: each peer's stores have landed once that returns. */
  if (K > 1 && exchanged == 0) cluster_wait();
#endif
}

}  // namespace xent

using namespace xent;

static int launch(const fwd_params &p0, const dev_extra &x, int dtype, cudaStream_t stream) {
  fwd_params p = p0;
  p.cluster = x.size > 0 ? x.size : 1;
  const int threads = x.ring_lsu > 0 ? x.ring_lsu : 1024;
  const long long nvec = (long long)p.vocab * (dtype ? 2 : 4) / 16;
  const long long per_thread = ((nvec + p.cluster - 1) / p.cluster + threads - 1) / threads;
  const int keep = per_thread < x.keep_vecs ? (int)per_thread : x.keep_vecs;
  void (*k)(const fwd_params, const int) =
      dtype ? (keep ? fwd_tworead_keep<__nv_bfloat16, false, true, false>
                    : fwd_tworead_keep<__nv_bfloat16, false, false, false>)
            : (keep ? fwd_tworead_keep<float, false, true, false>
                    : fwd_tworead_keep<float, false, false, false>);
  const int smem = keep * threads * 16;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return -1;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.gridDim = dim3((unsigned)(p.rows * p.cluster), 1, 1); /* a row per block (cluster) */
  cfg.blockDim = dim3((unsigned)threads, 1, 1);
  cfg.dynamicSmemBytes = (size_t)smem;
  cfg.stream = stream;
  if (p.cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)p.cluster;
    attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, k, p, keep) == cudaSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  const int V = argc > 1 ? atoi(argv[1]) : 128256;
  dev_extra x = {argc > 4 ? atoi(argv[4]) : 1024, argc > 2 ? atoi(argv[2]) : 13,
                 argc > 3 ? atoi(argv[3]) : 1};
  const int dtype = argc > 5 && !strcmp(argv[5], "fp32") ? 0 : 1;
  return dev_run("two-read keep/cluster", launch, x, 1, dtype, V, 8192);
}
