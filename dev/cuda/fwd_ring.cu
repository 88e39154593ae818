/*
 * fwd_ring.cu - the one-read forward with gradient fed by a ring of bulk
 * copies (sm_90+), or of per-thread copies (lsu).
 *
 * A persistent kernel: a grid of as many clusters as fit on the GPU at once,
 * each looping over rows c, c + clusters, ... A row is split into K slices,
 * one per block of the cluster; a block's slice lives in shared memory.
 *
 * Each block owns a ring of `slots` shared-memory chunks fed by the bulk copy
 * engine. Chunk j of the block's stream (row k of its rows, chunk q of its
 * slice: j = k * chunks + q) goes to slot j % slots; the copy of chunk
 * j + slots is issued as soon as chunk j's gradient has been written. So
 * while a block reduces row k and writes its gradient, the first chunks of
 * row k + 1 are already on their way: no block ever waits for a whole row's
 * latency, and the only per-row stall is the exchange of row statistics.
 *
 * Per row:
 *   A. wait for each chunk, fold it into an online (max, sum);
 *   B. reduce over the block, then (K > 1) send the block's part to every
 *      block of the cluster through distributed shared memory, one cluster
 *      barrier, and merge the K parts in rank order (every block gets the
 *      same bits);
 *   C. per chunk: gradient from shared memory to global memory (streaming
 *      stores), then the chunk's slot is refilled with the next copy.
 * HBM traffic: one read and one write of each logit, the floor.
 *
 * Requirements (the host checks them): sm_90+, a gradient is wanted, the
 * logits' base and row stride are multiples of 16 bytes, V * sizeof(T) is
 * a multiple of 16, a block's slice fits in its ring, and K <= 8.
 *
 * Tried in v4 (bench/HISTORY.md): slower than the two-read kernel at every
 * size (H200, bf16 8192 x 128256: 2.187 ms over clusters of 2 against
 * 1.318 ms; per-thread copies a further 10 % slower). 16 warps a SM move
 * through wait, fold, reduction, exchange and stores in lockstep and cannot
 * hide the latency. The staged kernel keeps the ring and decouples the
 * phases with a producer warp.
 *
 *   fwd_ring [V] [slots] [lsu: 0|1] [fp32|bf16]
 */
#include "common.cuh"

namespace xent {


constexpr int kRingMaxSlots = 16;
constexpr int kRingMaxCluster = 8;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

/* The fixed geometry of one block's stream of chunks. */
struct ring_geom {
  int64_t c, clusters;  /* this cluster, and how many there are            */
  int vb, len;          /* this block's slice: vectors [vb, vb + len)      */
  int chunks;           /* chunks per slice                                */
  int cv, slots;        /* vectors per chunk, slots in the ring            */
};

/* Where stream chunk j comes from and goes to. */
struct ring_chunk {
  const uint4 *src; /* its first vector in global memory  */
  uint4 *dst;       /* its slot                           */
  int slot, nv;     /* slot index, 16-byte vectors         */
};

__device__ __forceinline__ ring_chunk ring_locate(const fwd_params &p, const ring_geom &rg,
                                                  uint4 *ring, int64_t j) {
  const int64_t k = j / rg.chunks;
  const int q = (int)(j - k * rg.chunks);
  const int64_t row = rg.c + k * rg.clusters;
  const int v0 = q * rg.cv;
  ring_chunk ch;
  ch.slot = (int)(j % rg.slots);
  ch.nv = min(rg.cv, rg.len - v0);
  ch.src = (const uint4 *)(p.x + row * p.stride_bytes) + rg.vb + v0;
  ch.dst = ring + (int64_t)ch.slot * rg.cv;
  return ch;
}

/* Issue the bulk copy of stream chunk j into its slot (one thread). */
__device__ __forceinline__ void ring_issue(const fwd_params &p, const ring_geom &rg, uint4 *ring,
                                           uint64_t *full, int64_t j, uint64_t policy) {
  const ring_chunk ch = ring_locate(p, rg, ring, j);
  mbar_arrive_expect(&full[ch.slot], (uint32_t)ch.nv * 16u);
  bulk_load(ch.dst, ch.src, (uint32_t)ch.nv * 16u, &full[ch.slot], policy);
}

/* The same with every thread copying its 16-byte vectors of the chunk
 * (lsu): the barrier then counts one arrival per thread. */
__device__ __forceinline__ void ring_issue_lsu(const fwd_params &p, const ring_geom &rg,
                                               uint4 *ring, uint64_t *full, int64_t j) {
  const ring_chunk ch = ring_locate(p, rg, ring, j);
  for (int i = threadIdx.x; i < ch.nv; i += blockDim.x) copy16_async(ch.dst + i, ch.src + i);
  copies_arrive(&full[ch.slot]);
}

/* Phase A for one chunk: this thread's vectors of it. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void ring_fold(const fwd_params &p, const uint4 *sp, int nv, int jv,
                                          float &m, float &s, part &q) {
  constexpr int VN = elem<T>::N;
#pragma unroll 4
  for (int i = threadIdx.x; i < nv; i += blockDim.x)
    fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, sp[i], (jv + i) * VN, m, s, q);
}

#endif

template <typename T, bool GENERAL>
__global__ void __launch_bounds__(1024, 1) fwd_ring(const fwd_params p, const int lsu) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ __align__(8) uint64_t full[kRingMaxSlots];
  __shared__ part scratch[kMaxWarps + 1];
  __shared__ part xchg[2][kRingMaxCluster]; /* written by the cluster's blocks */

  const int K = p.cluster;
  const unsigned rank = K > 1 ? cluster_rank() : 0u;
  const int tid = threadIdx.x;
  ring_geom rg;
  rg.clusters = gridDim.x / (unsigned)K;
  rg.c = blockIdx.x / (unsigned)K;
  rg.cv = p.ring_chunk_vecs;
  rg.slots = p.ring_slots;
  {
    const int nvec = p.vocab / VN, sv = (nvec + K - 1) / K;
    rg.vb = min((int)rank * sv, nvec);
    rg.len = min(rg.vb + sv, nvec) - rg.vb;
    rg.chunks = (rg.len + rg.cv - 1) / rg.cv;
  }
  const int64_t my_rows = rg.c < p.rows ? (p.rows - 1 - rg.c) / rg.clusters + 1 : 0;
  const int64_t total = rg.chunks > 0 ? my_rows * rg.chunks : 0;
  const uint64_t policy = evict_first_policy();
  const row_scales scales = load_scales(p);

  if (tid == 0) {
    for (int i = 0; i < rg.slots; i++) mbar_init(&full[i], lsu ? blockDim.x : 1u);
    mbar_init_fence();
  }
  /* Every block of the cluster must have started before any writes into
   * another's shared memory (the first row's exchange); a block barrier
   * suffices without a cluster. */
  if (K > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  for (int64_t j = 0; j < total && j < rg.slots; j++) {
    if (lsu) ring_issue_lsu(p, rg, ring, full, j);
    else if (tid == 0) ring_issue(p, rg, ring, full, j, policy);
  }

  int exchanges = 0;
  /* Each row's target is loaded a row ahead, off the critical path. */
  int64_t y_next = my_rows > 0 ? load_target(p.targets, p.target64, rg.c) : 0;
  for (int64_t k = 0; k < my_rows; k++) {
    const int64_t row = rg.c + k * rg.clusters;
    char *rowp = p.x + row * p.stride_bytes;
    const int64_t y64 = y_next;
    if (k + 1 < my_rows) y_next = load_target(p.targets, p.target64, row + rg.clusters);
    const bool bad = target_bad(p, y64);
    const bool ignored = !bad && y64 == p.ignore_index;
    const bool skip = ignored || bad; /* the same in every block of the cluster */
    const int y = skip ? 0 : (int)y64;
    const bool lead = rank == 0 && tid == 0;
    const float xy = lead && !skip ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;

    /* A: fold each chunk as it lands. */
    part q = part_empty();
    float m = -INFINITY, s = 0.0f;
    for (int qc = 0; qc < rg.chunks; qc++) {
      const int64_t j = k * rg.chunks + qc;
      const int slot = (int)(j % rg.slots);
      mbar_wait(&full[slot], (unsigned)((j / rg.slots) & 1));
      if (!skip) {
        const uint4 *sp = ring + (int64_t)slot * rg.cv;
        const int nv = min(rg.cv, rg.len - qc * rg.cv);
        const int jv = rg.vb + qc * rg.cv;
#define XENT_RING_FOLD(A, S) ring_fold<T, GENERAL, A, S>(p, sp, nv, jv, m, s, q)
        XENT_WITH_FLAGS(p, XENT_RING_FOLD);
#undef XENT_RING_FOLD
      }
    }
    q.m = m;
    q.s = s;

    /* B: the row's statistics. */
    grad_coef gc = {};
    if (!skip) {
      part r = block_reduce(q, scratch);
      if (K > 1) {
        part *slot = &xchg[exchanges & 1][rank];
        if (tid < K) st_dsmem_part(slot, (unsigned)tid, r);
        cluster_sync();
        part t = part_empty();
        for (int i = 0; i < K; i++) t = part_merge(t, xchg[exchanges & 1][i]);
        r = t;
        exchanges++;
      }
      gc = finish_row(p, scales, r, xy, row, y, lead);
    } else if (lead) {
      skipped_row_outputs(p, row, bad);
    }

    /* C: the gradient, chunk by chunk; each slot is refilled once read. */
    for (int qc = 0; qc < rg.chunks; qc++) {
      const int64_t j = k * rg.chunks + qc;
      const int slot = (int)(j % rg.slots);
      const uint4 *sp = ring + (int64_t)slot * rg.cv;
      const int nv = min(rg.cv, rg.len - qc * rg.cv);
      const int jv = rg.vb + qc * rg.cv;
      uint4 *gp = (uint4 *)rowp + jv;
      if (!skip) {
#pragma unroll 2
        for (int i = tid; i < nv; i += blockDim.x) {
          float f[VN];
          elem<T>::unpack(sp[i], f);
          grad_vec<T, GENERAL>(p, gc, f, (jv + i) * VN);
          __stcs(gp + i, elem<T>::pack(f));
        }
      } else {
        for (int i = tid; i < nv; i += blockDim.x) __stcs(gp + i, make_uint4(0, 0, 0, 0));
      }
      __syncthreads(); /* every thread is done with the slot */
      /* No proxy fence here: the barrier already orders the slot's reads
       * before the copy that overwrites it, and a fence would also wait for
       * this thread's gradient stores to land (about 2 us a chunk). */
      if (j + rg.slots < total) {
        if (lsu) ring_issue_lsu(p, rg, ring, full, j + rg.slots);
        else if (tid == 0) ring_issue(p, rg, ring, full, j + rg.slots, policy);
      }
    }
  }
  if (K > 1) {
    /* No block leaves while another may still write its exchange slots. */
    cluster_sync();
  }
#endif
}

}  // namespace xent

using namespace xent;

static int launch(const fwd_params &p0, const dev_extra &x, int dtype, cudaStream_t stream) {
  fwd_params p = p0;
  const int slots = x.size > 0 ? x.size : 8, chunk = 1024; /* 16 KB a copy */
  const long long nvec = (long long)p.vocab * (dtype ? 2 : 4) / 16;
  int K = 1;
  while (K < 8 && (nvec + K - 1) / K > (long long)slots * chunk) K *= 2;
  if ((nvec + K - 1) / K > (long long)slots * chunk || (p.vocab * (dtype ? 2 : 4)) % 16) return -1;
  p.cluster = K;
  p.ring_slots = slots;
  p.ring_chunk_vecs = chunk;
  void (*k)(const fwd_params, const int) =
      dtype ? fwd_ring<__nv_bfloat16, false> : fwd_ring<float, false>;
  const int smem = slots * chunk * 16;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return -1;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = (unsigned)K;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cfg.blockDim = dim3(512, 1, 1);
  cfg.dynamicSmemBytes = (size_t)smem;
  cfg.gridDim = dim3((unsigned)K, 1, 1);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, k, &cfg) != cudaSuccess || clusters < 1) return -1;
  if (clusters > p.rows) clusters = (int)p.rows;
  cfg.gridDim = dim3((unsigned)(clusters * K), 1, 1);
  cfg.stream = stream;
  return cudaLaunchKernelEx(&cfg, k, p, x.ring_lsu) == cudaSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  const int V = argc > 1 ? atoi(argv[1]) : 128256;
  dev_extra x = {argc > 3 ? atoi(argv[3]) : 0, 0, argc > 2 ? atoi(argv[2]) : 8};
  const int dtype = argc > 4 && !strcmp(argv[4], "fp32") ? 0 : 1;
  return dev_run(x.ring_lsu ? "ring (per-thread copies)" : "ring", launch, x, 1, dtype, V, 8192);
}
