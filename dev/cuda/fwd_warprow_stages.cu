/*
 * fwd_warprow_stages.cu - the row-per-warp forward without gradient with the
 * pipelined pass in stages of 6 or 8 vectors a lane, and the plain kernel's
 * unpipelined pass (8 vectors in flight, then folded), beside the library's
 * stages of 4.
 *
 * Tried in v17 (bench/HISTORY.md, H200): stages of 6 were even with 4, of 8
 * slower at BT = 8192 but for fp32; stages of 4 against the unpipelined pass,
 * BT = 8192: bf16 V = 32000 1.012x, 128256 1.014x, fp16 32000 1.018x, fp32
 * 128256 1.008x; bf16 128256 at BT = 2048 1.043x.
 *
 *   fwd_warprow_stages [V] [stage vectors: 0, 4, 6, 8] [threads] [fp32|bf16]
 */
#include "common.cuh"
#include "cuda/kernels/tworead.cuh"

namespace xent {

constexpr int kStagesUnroll = 8;

/* This lane's vectors j0, j0 + W, ... (U of them, those below n) of a row,
 * W the lanes that share the row (32 a warp). Plain loads, not ld_once's
 * evict-first ones: those cost this pass 2 to 4 % (bench/HISTORY.md v20). */
template <int U, int W = 32>
__device__ __forceinline__ void stages_load(uint4 (&v)[U], const uint4 *vp, int j0, int n) {
#pragma unroll
  for (int u = 0; u < U; u++)
    if (j0 + u * W < n) v[u] = ld_plain(vp + j0 + u * W);
}

template <typename T, int U, int W = 32>
__device__ __forceinline__ void stages_fold(const fwd_params &p, const uint4 (&v)[U],
                                             const row_geom &g, int j0, float &m, float &s,
                                             part &q) {
  if (j0 + (U - 1) * W < g.nvec) { /* the whole stage: the row's body */
    fold_stage<T, U>(v, m, s);
    return;
  }
#pragma unroll
  for (int u = 0; u < U; u++) {
    const int j = j0 + u * W;
    if (j < g.nvec) fold_vec<T, false, false, false>(p, v[u], g.head + j * elem<T>::N, m, s, q);
  }
}

/* Each warp reads one row and reduces it with shuffles alone: no block
 * barrier, so no warp waits for another and an SM's loads never drain for a
 * reduction. Rows go to warps in order, blockDim / 32 rows a block, a block
 * per group of rows (the hardware hands them out). Forward without gradient
 * only: a gradient would have pass 2 re-read a block's rows, 32 times the
 * bytes of a row per SM in flight, from HBM.
 *
 * PIPE = 0: pass 1 of the two-read kernel, 8 vectors a lane in flight, then
 * folded (any flags). PIPE = U > 0 (the plain kernel only): two stages of U
 * vectors a lane, one in flight while the other is folded, the first two
 * issued beside the target's load rather than after it; plain loads, and
 * each whole stage folded at once (fold_stage: one max, one rescale).
 *
 * SPLIT > 1 (the pipelined pass only): SPLIT neighbouring warps share a row,
 * their lanes interleaved over it as one of 32 * SPLIT lanes, and meet at a
 * named barrier of their own to merge their statistics (in warp order): a
 * warp's share of the work is a fraction of a row, so the last rows of the
 * grid end sooner. */
template <typename T, bool GENERAL, bool STATS, int PIPE, int SPLIT = 1>
__global__ void __launch_bounds__(256) fwd_warprow_stages(const fwd_params p) {
  static_assert(PIPE == 0 || (!GENERAL && !STATS), "the pipelined pass is the plain one");
  static_assert(SPLIT == 1 || (PIPE > 0 && 32 * SPLIT <= 256), "a split row is pipelined");
  constexpr int W = 32 * SPLIT; /* lanes that share a row */
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = warp % SPLIT, vl = sub * 32 + lane; /* this lane among the row's W */
  const int64_t row = (int64_t)blockIdx.x * ((blockDim.x >> 5) / SPLIT) + warp / SPLIT;
  if (row >= p.rows) return; /* uniform over the row's warps */
  const int64_t y64 = load_target(p.targets, p.target64, row);
  const char *rowp = p.x + row * p.stride_bytes;
  const row_geom g = make_geom<T>(rowp, p.vocab);
  constexpr int UA = PIPE > 0 ? PIPE : 1;
  const uint4 *vp = (const uint4 *)(rowp + (int64_t)g.head * (int)sizeof(T));
  uint4 a[UA], b[UA];
  if (PIPE > 0) { /* read whatever the target says: an ignored row wastes these */
    stages_load<UA, W>(a, vp, vl, g.nvec);
    stages_load<UA, W>(b, vp, vl + UA * W, g.nvec);
  }
  const bool bad = target_bad(p, y64);
  if (bad || y64 == p.ignore_index) { /* every warp of the row returns */
    if (vl == 0) skipped_row_outputs(p, row, bad);
    return;
  }
  const int y = (int)y64;
  const float xy = vl == 0 ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;
  part q = part_empty();
  if (PIPE > 0) {
    float m = -INFINITY, s = 0.0f;
    constexpr int step = 2 * UA * W;
    for (int ja = vl, jb = vl + UA * W;; ja += step, jb += step) {
      if (ja >= g.nvec) break;
      stages_fold<T, UA, W>(p, a, g, ja, m, s, q);
      stages_load<UA, W>(a, vp, ja + step, g.nvec);
      if (jb >= g.nvec) break;
      stages_fold<T, UA, W>(p, b, g, jb, m, s, q);
      stages_load<UA, W>(b, vp, jb + step, g.nvec);
    }
    fold_extras<T, false, false, false>(p, rowp, g, vl, W, m, s, q);
    q.m = m;
    q.s = s;
  } else {
#define XENT_WARPROW_PASS(A, S)                                                            \
  tworead_pass1<T, GENERAL, A, S, kStagesUnroll>(p, rowp, g, 0, g.nvec, true, q, lane, 32)
    if (STATS) XENT_WITH_FLAGS(p, XENT_WARPROW_PASS);
    else XENT_WARPROW_PASS(false, false);
#undef XENT_WARPROW_PASS
  }
  part r = warp_reduce(q);
  if (SPLIT > 1) {
    __shared__ part shared_parts[256 / 32];
    if (lane == 0) shared_parts[warp] = r;
    /* barrier 1 + the row's index in the block: the row's warps alone */
    asm volatile("bar.sync %0, %1;" ::"r"(1 + warp / SPLIT), "r"(W) : "memory");
    if (sub != 0) return;
#pragma unroll
    for (int k = 1; k < SPLIT; k++) r = part_merge(r, shared_parts[warp + k]);
  }
  finish_row(p, r, xy, row, y, lane == 0);
}

}  // namespace xent

using namespace xent;

template <typename T>
static fwd_kernel_t pick(int stage) {
  switch (stage) {
    case 0: return fwd_warprow_stages<T, false, false, 0>;
    case 4: return fwd_warprow_stages<T, false, false, 4>;
    case 6: return fwd_warprow_stages<T, false, false, 6>;
    case 8: return fwd_warprow_stages<T, false, false, 8>;
  }
  return nullptr;
}

static int launch(const fwd_params &p, const dev_extra &x, int dtype, cudaStream_t stream) {
  const int threads = x.ring_lsu > 0 ? x.ring_lsu : 128;
  fwd_kernel_t k = dtype ? pick<__nv_bfloat16>(x.size) : pick<float>(x.size);
  if (!k || threads > 256) return -1;
  const long long per_block = threads / 32;
  k<<<(unsigned)((p.rows + per_block - 1) / per_block), threads, 0, stream>>>(p);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  const int V = argc > 1 ? atoi(argv[1]) : 32000;
  dev_extra x = {argc > 3 ? atoi(argv[3]) : 128, 0, argc > 2 ? atoi(argv[2]) : 6};
  const int dtype = argc > 4 && !strcmp(argv[4], "fp32") ? 0 : 1;
  return dev_run("warp row stages", launch, x, 0, dtype, V, 8192);
}
