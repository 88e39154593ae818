/*
 * staged.cuh - fwd_staged, the forward fed by a producer warp (sm_90+).
 *
 * The two-read kernel's time is lost where its loads drain: before every
 * row's block reduction, and between one row and the next (bench/NOTES.md:
 * staged). Here the loads never wait for the arithmetic. A block is one
 * producer warp (the last one) and `threads` consumer threads, on a
 * persistent grid:
 *
 *   producer (one lane): takes rows from a counter in the workspace, announces each in a small queue, and
 *     streams its bytes through a ring of `slots` shared-memory stages of
 *     U 16-byte vectors per consumer thread (U = 4 or 8, a template
 *     parameter) with bulk copies: pass 1 the row's chunks in order, pass 2
 *     (with a gradient) the same chunks again, last first, from L2. A stage
 *     is refilled as soon as the consumers release it, so the next row's
 *     bytes are on their way while the current one is reduced and written.
 *   consumers: load their U vectors of a stage into registers and release
 *     it at once; fold each pass-1 stage into an online (max, sum); reduce
 *     over the consumer warps (a named barrier the producer never joins)
 *     and, over a cluster, exchange the block parts by asynchronous stores
 *     (cluster_exchange); then write the gradient of each pass-2 stage to
 *     global memory, in place.
 *
 * Reuse (p.ring_reuse = R): the consumers keep the slice's last R stages
 * of pass 1 (R <= slots) instead of releasing them, and pass 2 takes those
 * first, from shared memory, oldest first; the producer copies only the
 * other chunks again, last first, into the stages after them. A slice of
 * at most R chunks is read once from global memory.
 *
 * Hold (p.ring_hold = H, the plain kernel of U = 4 only): of the chunks
 * pass 2 does not reuse, the first H (at most 2) stay in the consumers'
 * registers from pass 1 (16 registers a chunk), and pass 2 writes them
 * last; the producer copies only the chunks between them and the reused
 * ones again. A slice of at most R + H chunks is read once.
 *
 * HBM traffic is one read and one write of each logit when pass 2 finds
 * the chunks it copies again in L2: the rows in flight are one per block
 * (a slice of a row over a cluster), and of each only the chunks pass 2
 * does not reuse need to stay in L2 until it comes back for them.
 *
 * Rows from the counter over a cluster: the lead block's producer takes
 * them and mails each to its peers' producers (an asynchronous store into
 * their shared memory, counted on their barrier), which acknowledge each
 * read with a remote arrival; a cluster's blocks thus take the same rows in
 * the same order, and a cluster that streams faster simply takes more rows.
 * The blocks meet on a cluster barrier before they exit, so that no late
 * acknowledgement lands in a block that has gone.
 *
 * Rows may have any alignment: the copies take a row's whole 16-byte
 * vectors, and the elements before and after them (at most 2 * (16 /
 * sizeof(T) - 1)) go through the lead block's consumers directly.
 * Ignored rows and rows with a bad target are announced but never copied:
 * the consumers write their zero gradient and outputs.
 */
#ifndef XENT_CUDA_KERNELS_STAGED_CUH
#define XENT_CUDA_KERNELS_STAGED_CUH

#include "cuda/plan.h"
#include "cuda/row.cuh"
#include "cuda/sm90.cuh"

namespace xent {

constexpr int kStagedQueue = 8; /* rows the producer may announce ahead */
constexpr int kStagedMail = 8;  /* rows the lead producer may mail ahead of its peers */

/* A row as the producer announces it. */
struct staged_row {
  int64_t row; /* -1: no more rows for this block */
  int64_t y;
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

struct staged_smem {
  uint64_t full[XENT_STAGED_MAX_SLOTS];  /* stage landed (producer's bytes)           */
  uint64_t empty[XENT_STAGED_MAX_SLOTS]; /* stage released (every consumer thread)    */
  uint64_t qfull[kStagedQueue];     /* queue entry written                      */
  uint64_t qempty[kStagedQueue];    /* queue entry read (one arrival per warp)  */
  staged_row queue[kStagedQueue];
  uint64_t mfull[kStagedMail];  /* peers: mail entry landed (the lead's store)           */
  uint64_t mempty[kStagedMail]; /* lead: mail entry read by every peer (K - 1 arrivals)   */
  long long mail[kStagedMail];  /* peers: the lead's rows                                 */
  part scratch[kMaxWarps + 1];
  cluster_inbox inbox;
};
static_assert(sizeof(staged_smem) <= XENT_STAGED_STATIC_SMEM,
              "the host reserves XENT_STAGED_STATIC_SMEM for fwd_staged's static shared memory");

/* A block's slice of a row: vectors [jb, je) of the row's aligned body. */
struct staged_slice {
  char *rowp;
  row_geom g;
  int jb, je, chunks;
};

template <typename T>
__device__ __forceinline__ staged_slice staged_locate(const fwd_params &p, int64_t row, int K,
                                                      unsigned rank) {
  staged_slice sl;
  sl.rowp = p.x + row * p.stride_bytes;
  sl.g = make_geom<T>(sl.rowp, p.vocab);
  const int share = (sl.g.nvec + K - 1) / K;
  sl.jb = min((int)rank * share, sl.g.nvec);
  sl.je = min(sl.jb + share, sl.g.nvec);
  sl.chunks = (sl.je - sl.jb + p.ring_chunk_vecs - 1) / p.ring_chunk_vecs;
  return sl;
}

/* Chunk c of a slice: its first vector v0 (of the row's aligned body) and
 * its vectors nv (ring_chunk_vecs; the slice's last chunk may have fewer). */
struct staged_chunk {
  int v0, nv;
};

__device__ __forceinline__ staged_chunk staged_chunk_at(const fwd_params &p,
                                                        const staged_slice &sl, int c) {
  staged_chunk k;
  k.v0 = sl.jb + c * p.ring_chunk_vecs;
  k.nv = min(p.ring_chunk_vecs, sl.je - k.v0);
  return k;
}

/* A position in the ring: the slot and the parity of its current use,
 * advanced one stage at a time (no division per stage). */
struct ring_pos {
  uint32_t slot, phase;
};

__device__ __forceinline__ void ring_next(ring_pos &r, uint32_t slots) {
  if (++r.slot == slots) {
    r.slot = 0;
    r.phase ^= 1u;
  }
}

/* The position n stages before r (n <= slots). */
__device__ __forceinline__ ring_pos ring_back(ring_pos r, uint32_t n, uint32_t slots) {
  if (n == 0) return r;
  if (r.slot >= n) {
    r.slot -= n;
  } else {
    r.slot = r.slot + slots - n;
    r.phase ^= 1u;
  }
  return r;
}

/* Stages of a slice of `chunks` that pass 2 reads from shared memory. */
__device__ __forceinline__ int staged_reused(const fwd_params &p, int chunks) {
  return p.write_grad ? min(p.ring_reuse, chunks) : 0;
}

/* The chunks a kernel may hold in registers between the passes: the plain
 * kernel of 4 vectors a thread, whose 80 (fp32) to 95 (bf16) registers
 * left room for 32 more (122 and 127 with them, no spills, sm_90a); the
 * general and statistics kernels already use 116 to 128. */
template <int U, bool GENERAL, bool STATS>
struct staged_hold_max {
  static constexpr int value = U == 4 && !GENERAL && !STATS ? XENT_STAGED_MAX_HOLD : 0;
};

/* Of the first `kept` chunks of a slice (those pass 2 does not reuse), the
 * ones pass 2 takes from registers: chunks 0 to held - 1. The producer and
 * the consumers compute it alike. */
template <int HM>
__device__ __forceinline__ int staged_held(const fwd_params &p, int kept) {
  return p.write_grad ? min(min(p.ring_hold, HM), kept) : 0;
}

/* The producer's copy of chunk c of a slice into the slot at r (one lane).
 * `used`: the slot has been filled before, so wait for its release. */
__device__ __forceinline__ void staged_issue(const fwd_params &p, staged_smem &sm, uint4 *ring,
                                             const uint4 *vp, const staged_slice &sl, int c,
                                             ring_pos &r, bool &used, uint64_t pol) {
  const staged_chunk k = staged_chunk_at(p, sl, c);
  if (used) {
    mbar_wait(&sm.empty[r.slot], r.phase ^ 1u);
    /* The consumers read the slot through the generic proxy; the copy that
     * overwrites it writes through the async proxy. */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  mbar_arrive_expect(&sm.full[r.slot], (uint32_t)k.nv * 16u);
  bulk_load(ring + (size_t)r.slot * p.ring_chunk_vecs, vp + k.v0, (uint32_t)k.nv * 16u,
            &sm.full[r.slot], pol);
  ring_next(r, (uint32_t)p.ring_slots);
  if (r.slot == 0) used = true;
}

template <typename T, int HM>
__device__ void staged_produce(const fwd_params &p, staged_smem &sm, uint4 *ring, int K,
                               unsigned rank) {
  constexpr int ES = (int)sizeof(T);
  /* Pass 1 evict-last (p.l2_hint) or normal, pass 2 evict-first; the
   * chunks pass 2 reuses from shared memory or registers normal. */
  uint64_t pol1, poln;
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(poln));
  if (p.l2_hint && p.write_grad) /* every line read evict-last is written evict-first */
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol1));
  else
    pol1 = poln;
  const uint64_t pol2 = evict_first_policy();
  /* Over a cluster, the lead takes the rows and mails them. */
  const bool mailed = K > 1, takes = !mailed || rank == 0;
  int64_t row = takes ? (int64_t)atomicAdd(p.row_ticket, 1ull) : 0;
  ring_pos r = {0, 0}; /* the next stage's slot */
  bool used = false;    /* every slot has been filled once */
  for (uint32_t n = 0;; n++) {
    const int qi = (int)(n % kStagedQueue);
    if (n >= (uint32_t)kStagedQueue) mbar_wait(&sm.qempty[qi], (n / kStagedQueue - 1) & 1u);
    staged_row e;
    const int mi = (int)(n % kStagedMail);
    if (takes) {
      e.row = row < p.rows ? row : -1;
      if (mailed) {
        /* Entry n reuses entry n - kStagedMail's place: wait until every
         * peer has read that one. */
        if (n >= (uint32_t)kStagedMail)
          mbar_wait<true>(&sm.mempty[mi], (n / kStagedMail - 1) & 1u);
        for (int k = 1; k < K; k++)
          st_async_s64(map_shared(&sm.mail[mi], (unsigned)k), (long long)e.row,
                       map_shared(&sm.mfull[mi], (unsigned)k));
      }
    } else {
      mbar_arrive_expect(&sm.mfull[mi], 8u);
      mbar_wait<true>(&sm.mfull[mi], (n / kStagedMail) & 1u);
      e.row = *(volatile long long *)&sm.mail[mi];
      /* The last entry (-1) is not acknowledged: the lead sends nothing after it. */
      if (e.row >= 0) mbar_arrive_cluster(map_shared(&sm.mempty[mi], 0u));
    }
    e.y = e.row >= 0 ? load_target(p.targets, p.target64, e.row) : 0;
    sm.queue[qi] = e;
    mbar_arrive(&sm.qfull[qi]); /* releases the entry to the consumers */
    if (e.row < 0) return;
    /* The next row now, so that the counter's round trip overlaps this row. */
    if (takes) row = (int64_t)atomicAdd(p.row_ticket, 1ull);
    if (e.y == p.ignore_index || target_bad(p, e.y)) continue; /* nothing to read */
    const staged_slice sl = staged_locate<T>(p, e.row, K, rank);
    const uint4 *vp = (const uint4 *)(sl.rowp + (int64_t)sl.g.head * ES);
    /* pass 2 copies chunks held to kept - 1 again */
    const int kept = sl.chunks - staged_reused(p, sl.chunks);
    const int held = staged_held<HM>(p, kept);
    for (int c = 0; c < sl.chunks; c++)
      staged_issue(p, sm, ring, vp, sl, c, r, used, c >= held && c < kept ? pol1 : poln);
    if (p.write_grad)
      for (int c = kept - 1; c >= held; c--) staged_issue(p, sm, ring, vp, sl, c, r, used, pol2);
  }
}

/* Wait for the stage at r; returns its slot's vectors. */
__device__ __forceinline__ const uint4 *staged_wait(const fwd_params &p, staged_smem &sm,
                                                    const uint4 *ring, const ring_pos &r) {
  mbar_wait(&sm.full[r.slot], r.phase);
  return ring + (size_t)r.slot * p.ring_chunk_vecs;
}

/* Hand the stage at r back to the producer, and move r to the next one.
 * Every consumer thread arrives itself (the barrier counts them all), so
 * that each thread's release orders its own reads of the slot before the
 * bulk copy that refills it. One lane arriving for its warp after
 * __syncwarp was no faster, and compute-sanitizer's racecheck reported
 * that hand-off as a hazard (bench/HISTORY.md v11, v12). */
__device__ __forceinline__ void staged_release(const fwd_params &p, staged_smem &sm,
                                               ring_pos &r) {
  mbar_arrive(&sm.empty[r.slot]);
  ring_next(r, (uint32_t)p.ring_slots);
}

/* Pass 1 for chunk c of a slice, its stage at r: this thread's U vectors
 * into v (-inf past the slice's end), folded into (m, s) and the max-pass
 * statistics. Thread t takes vectors t, t + nc, ..., t + (U - 1) nc of each
 * stage (a stage holds U * nc vectors, the last one of a slice fewer).
 * Stages from chunk `kept` on stay unreleased, for pass 2. */
template <typename T, int U, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void staged_fold_chunk(const fwd_params &p, staged_smem &sm,
                                                  const uint4 *ring, const staged_slice &sl,
                                                  ring_pos &r, int nc, int kept, int c,
                                                  uint4 (&v)[U], float &m, float &s, part &q) {
  constexpr int VN = elem<T>::N;
  constexpr bool PLAIN = !GENERAL && !ARGMAX && !SMOOTH;
  const int tid = threadIdx.x;
  const uint4 *sp = staged_wait(p, sm, ring, r) + tid;
  const staged_chunk k = staged_chunk_at(p, sl, c);
  if (k.nv == p.ring_chunk_vecs) {
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = sp[u * nc];
  } else {
#pragma unroll
    for (int u = 0; u < U; u++) {
      constexpr uint32_t ni = word_max<T>::kNegInf;
      v[u] = tid + u * nc < k.nv ? sp[u * nc] : make_uint4(ni, ni, ni, ni);
    }
  }
  if (c < kept) staged_release(p, sm, r);
  else ring_next(r, (uint32_t)p.ring_slots); /* kept for pass 2 */
  if (PLAIN) {
    fold_stage<T, U>(v, m, s);
  } else {
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int i = tid + u * nc;
      if (i < k.nv)
        fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, v[u], sl.g.head + (k.v0 + i) * VN, m, s, q);
    }
  }
}

/* Pass 1 over a slice's stages from r on: an online (max, sum) and the
 * max-pass statistics, the lead block's extra elements included. The
 * vectors of chunks 0 to held - 1 stay in `hold` for pass 2 (HM: the most
 * the kernel holds; the indices are constants, so `hold` stays in
 * registers). */
template <typename T, int U, int HM, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ part staged_pass1(const fwd_params &p, staged_smem &sm,
                                             const uint4 *ring, const staged_slice &sl,
                                             bool lead, ring_pos &r, int nc, int kept, int held,
                                             uint4 (&hold)[HM > 0 ? HM : 1][U]) {
  float m = -INFINITY, s = 0.0f;
  part q = part_empty();
  if (lead) fold_extras<T, GENERAL, ARGMAX, SMOOTH>(p, sl.rowp, sl.g, threadIdx.x, nc, m, s, q);
#pragma unroll
  for (int h = 0; h < HM; h++)
    if (h < held)
      staged_fold_chunk<T, U, GENERAL, ARGMAX, SMOOTH>(p, sm, ring, sl, r, nc, kept, h, hold[h],
                                                       m, s, q);
  for (int c = held; c < sl.chunks; c++) {
    uint4 v[U];
    staged_fold_chunk<T, U, GENERAL, ARGMAX, SMOOTH>(p, sm, ring, sl, r, nc, kept, c, v, m, s, q);
  }
  q.m = m;
  q.s = s;
  return q;
}

/* The gradient of this thread's U vectors v of a chunk to global memory
 * `gp` (already offset by the thread), element index j0 for the first;
 * `left`: vectors of the chunk from the thread's first on. FULL: the chunk
 * is whole, no bounds checks. */
template <typename T, int U, bool GENERAL, bool FULL>
__device__ __forceinline__ void staged_write(const fwd_params &p, const grad_coef &gc,
                                             const uint4 (&v)[U], uint4 *gp, int j0, int nc,
                                             int left) {
  constexpr int VN = elem<T>::N;
#pragma unroll
  for (int u = 0; u < U; u++) {
    if (FULL || u * nc < left) {
      float f[VN];
      elem<T>::unpack(v[u], f);
      grad_vec<T, GENERAL>(p, gc, f, j0 + u * nc * VN);
      st_grad(gp + u * nc, elem<T>::pack(f));
    }
  }
}

/* Pass 2 for one stage: this thread's U vectors from shared memory `sp`
 * (already offset by the thread), their gradient as staged_write. The slot
 * goes back to the producer as soon as the vectors are loaded. */
template <typename T, int U, bool GENERAL, bool FULL>
__device__ __forceinline__ void staged_grad(const fwd_params &p, staged_smem &sm,
                                            const grad_coef &gc, const uint4 *sp, uint4 *gp,
                                            int j0, int nc, int left, ring_pos &r) {
  uint4 v[U];
#pragma unroll
  for (int u = 0; u < U; u++)
    if (FULL || u * nc < left) v[u] = sp[u * nc];
  staged_release(p, sm, r);
  staged_write<T, U, GENERAL, FULL>(p, gc, v, gp, j0, nc, left);
}

/* Pass 2 for chunk c of a slice: its stage at `sp` (already offset by the
 * thread) and ring position r, the slice's vectors from `vp`; whole chunks
 * without bounds checks. */
template <typename T, int U, bool GENERAL>
__device__ __forceinline__ void staged_grad_chunk(const fwd_params &p, staged_smem &sm,
                                                  const grad_coef &gc, const uint4 *sp, uint4 *vp,
                                                  const staged_slice &sl, int c, int nc,
                                                  ring_pos &r) {
  constexpr int VN = elem<T>::N;
  const int tid = threadIdx.x;
  const staged_chunk k = staged_chunk_at(p, sl, c);
  uint4 *gp = vp + k.v0 + tid;
  const int j0 = sl.g.head + (k.v0 + tid) * VN;
  if (k.nv == p.ring_chunk_vecs)
    staged_grad<T, U, GENERAL, true>(p, sm, gc, sp, gp, j0, nc, k.nv - tid, r);
  else staged_grad<T, U, GENERAL, false>(p, sm, gc, sp, gp, j0, nc, k.nv - tid, r);
}

/* Pass 2 for chunk c of a slice held in this thread's registers `v` since
 * pass 1 (-inf past the slice's end, never written). */
template <typename T, int U, bool GENERAL>
__device__ __forceinline__ void staged_grad_held(const fwd_params &p, const grad_coef &gc,
                                                 const uint4 (&v)[U], uint4 *vp,
                                                 const staged_slice &sl, int c, int nc) {
  constexpr int VN = elem<T>::N;
  const int tid = threadIdx.x;
  const staged_chunk k = staged_chunk_at(p, sl, c);
  uint4 *gp = vp + k.v0 + tid;
  const int j0 = sl.g.head + (k.v0 + tid) * VN;
  if (k.nv == p.ring_chunk_vecs)
    staged_write<T, U, GENERAL, true>(p, gc, v, gp, j0, nc, k.nv - tid);
  else staged_write<T, U, GENERAL, false>(p, gc, v, gp, j0, nc, k.nv - tid);
}

#endif

template <typename T, int U, bool GENERAL, bool STATS>
__global__ void __launch_bounds__(XENT_STAGED_MAX_THREADS, 1) fwd_staged(const fwd_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (forward_enter<T>(p)) return; /* rejected: nothing written (deferred: no gradient) */
  constexpr int ES = (int)sizeof(T);
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ staged_smem sm;
  constexpr int HM = staged_hold_max<U, GENERAL, STATS>::value;
  const int K = p.cluster;
  const int nc = (int)blockDim.x - 32; /* consumer threads; the last warp produces */
  const int tid = threadIdx.x;
  const unsigned rank = K > 1 ? cluster_rank() : 0u;
  const bool lead = rank == 0;
  if (tid == 0) {
    for (int i = 0; i < p.ring_slots; i++) {
      mbar_init(&sm.full[i], 1);
      mbar_init(&sm.empty[i], (unsigned)nc);
    }
    for (int i = 0; i < kStagedQueue; i++) {
      mbar_init(&sm.qfull[i], 1);
      mbar_init(&sm.qempty[i], (unsigned)nc / 32u);
    }
    for (int i = 0; i < kStagedMail; i++) {
      mbar_init(&sm.mfull[i], 1);
      mbar_init(&sm.mempty[i], (unsigned)(K > 1 ? K - 1 : 1));
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (K > 1) {
    inbox_init(&sm.inbox); /* arrives on the cluster barrier */
    cluster_wait();        /* every peer's inbox is ready */
  }
  /* Mailed rows: peers acknowledge in the lead's shared memory until their
   * last row, so every block waits for the whole cluster before it exits. */
  const bool meet = K > 1;
  if (tid >= nc) {
    if (tid == nc) staged_produce<T, HM>(p, sm, ring, K, rank);
    if (meet) {
      __syncwarp(); /* the barrier's .aligned form: the whole warp at once */
      cluster_sync();
    }
    return;
  }

  const int CV = p.ring_chunk_vecs;
  const row_scales rs = load_scales(p);
  const bool writer = lead && tid == 0;
  ring_pos r = {0, 0};    /* the next stage to consume */
  unsigned exchanged = 0; /* rows exchanged over the cluster */
  for (uint32_t n = 0;; n++) {
    const int qi = (int)(n % kStagedQueue);
    mbar_wait(&sm.qfull[qi], (n / kStagedQueue) & 1u);
    const staged_row e = sm.queue[qi];
    __syncwarp();
    if ((tid & 31) == 0) mbar_arrive(&sm.qempty[qi]);
    if (e.row < 0) break;
    const bool bad = target_bad(p, e.y);
    const staged_slice sl = staged_locate<T>(p, e.row, K, rank);
    if (bad || e.y == p.ignore_index) {
      if (writer) skipped_row_outputs(p, e.row, bad);
      if (p.write_grad)
        zero_row<T>(sl.rowp, sl.g, sl.jb + tid, sl.je, nc, lead ? tid : 0x7fffffff, nc);
      continue;
    }
    const int y = (int)e.y;
    const float xy = writer || p.token_scaling ? load_xy<T, GENERAL>(p, sl.rowp, y) : 0.0f;
    const int kept = sl.chunks - staged_reused(p, sl.chunks);
    const int held = staged_held<HM>(p, kept);
    uint4 hold[HM > 0 ? HM : 1][U]; /* chunks 0 to held - 1, for pass 2 */
    part q;
#define XENT_STAGED_PASS1(A, S) \
  q = staged_pass1<T, U, HM, GENERAL, A, S>(p, sm, ring, sl, lead, r, nc, kept, held, hold)
    if (STATS) XENT_WITH_FLAGS(p, XENT_STAGED_PASS1);
    else XENT_STAGED_PASS1(false, false);
#undef XENT_STAGED_PASS1
    /* over the consumer threads, at barrier 1: the producer warp never joins;
     * without the max pass's statistics, the (max, sum) pair alone */
    part t = STATS ? threads_reduce<true>(q, sm.scratch, nc)
                   : threads_reduce_max_sum<true>(q, sm.scratch, nc);
    if (K > 1) t = cluster_exchange(t, K, rank, &sm.inbox, exchanged++);
    const grad_coef gc = finish_row(p, rs, t, xy, e.row, y, writer);
    if (!p.write_grad) continue;

    uint4 *vp = (uint4 *)(sl.rowp + (int64_t)sl.g.head * ES);
    /* The kept stages first, oldest first (the producer's next copy waits
     * for the oldest), from shared memory; then the ones copied again, last
     * first; then the held ones, from registers (no slot waits for them). */
    ring_pos b = ring_back(r, (uint32_t)(sl.chunks - kept), (uint32_t)p.ring_slots);
    for (int c = kept; c < sl.chunks; c++)
      staged_grad_chunk<T, U, GENERAL>(p, sm, gc, ring + (size_t)b.slot * CV + tid, vp, sl, c, nc,
                                       b);
    for (int c = kept - 1; c >= held; c--)
      staged_grad_chunk<T, U, GENERAL>(p, sm, gc, staged_wait(p, sm, ring, r) + tid, vp, sl, c,
                                       nc, r);
#pragma unroll
    for (int h = HM - 1; h >= 0; h--)
      if (h < held) staged_grad_held<T, U, GENERAL>(p, gc, hold[h], vp, sl, h, nc);
    if (lead) grad_extras<T, GENERAL>(p, gc, sl.rowp, sl.g, tid, nc);
  }
  if (meet) cluster_sync();
#elif defined(__CUDA_ARCH__)
  /* Compiled out below sm_90: the host checks a kernel's code before it
   * launches this one (check_kernel_code); if that ever failed, stop the
   * grid rather than return having written nothing. */
  (void)p;
  __trap();
#else
  (void)p;
#endif
}

}  // namespace xent

#endif
