/*
 * fwd_stream.cu - fwd_stream, a persistent forward (sm_80+) in which
 * every thread streams its own vectors through a private ring in shared
 * memory.
 *
 * A grid of as many blocks as fit on the GPU at once; block b takes rows b,
 * b + grid, ... Thread t of a block owns vectors t, t + threads, ... of every
 * row (nk of them) and a ring of `slots` 16-byte slots. It copies its
 * vectors into the ring with per-thread asynchronous copies, in row order
 * and across rows, as far ahead as free slots allow, and reads each one once
 * it has landed. No thread waits for another's copies, so there is no
 * barrier per chunk (the ring kernel's cost, bench/HISTORY.md v4); the only
 * block-wide step is the reduction of each row's statistics.
 *
 * Per row, with a gradient:
 *   pass 1  fold every vector into an online (max, sum). The row's last
 *           `keep` = min(nk, slots) vectors stay in their slots; the earlier
 *           ones free theirs at once, which the next copies reuse.
 *   reduce  over the block (two barriers), then the row's coefficients.
 *   pass 2  the kept vectors' gradient from shared memory, each freed slot
 *           refilled at once with the next row's copies; then the earlier
 *           vectors, re-read from L2 newest first, and their gradient.
 * When a thread's share of a row fits its ring (nk <= slots) the row is read
 * from HBM once; beyond, only the part that does not fit is read twice, and
 * that part comes back from L2 (one row in flight per SM keeps it there).
 * Without a gradient every slot is freed in pass 1 and the ring simply runs
 * ahead across rows.
 *
 * Requirements (the host checks them): sm_80+, the logits' base and row
 * stride are multiples of 16 bytes, V * sizeof(T) is a multiple of 16, and
 * 1 <= slots <= 16.
 *
 * Tried in v5 (bench/HISTORY.md): slower than the two-read kernel at every
 * size (H200, bf16 8192 x 128256: 1.461 ms with a gradient against 1.315,
 * 0.832 without against 0.591): the ring's bookkeeping for every 8 bf16
 * elements, on top of the same arithmetic.
 *
 *   fwd_stream [V] [slots] [threads] [fp32|bf16]
 */
#include "common.cuh"

namespace xent {


constexpr int kStreamUnroll = 4; /* pass 2's re-reads in flight per thread */

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

/* One thread's ring. Slots are filled and freed in the same order (the
 * order of the thread's vectors over its rows), so three indices and two
 * counts describe it. */
struct stream_ring {
  uint4 *base;     /* slot i is base[i * threads]                          */
  int slots, nt;
  int nk;          /* this thread's vectors per row                        */
  int fill_slot;   /* where the next copy goes                             */
  int read_slot;   /* the next vector pass 1 reads                         */
  int free_slot;   /* the next slot to be freed                            */
  int used;        /* copies issued and not yet freed                      */
  int ahead;       /* copies issued and not yet read by pass 1             */
  int64_t row;     /* the next copy's row (>= rows: nothing left to copy)  */
  int k;           /* and its index among this thread's vectors of the row */
};

/* Does a row's forward read its logits? (Ignored rows and rows with a bad
 * target, unchecked mode, only get zeros.) */
__device__ __forceinline__ bool stream_row_reads(const fwd_params &p, int64_t row) {
  const int64_t y = load_target(p.targets, p.target64, row);
  return y != p.ignore_index && !target_bad(p, y);
}

__device__ __forceinline__ void stream_next_row(const fwd_params &p, stream_ring &r) {
  do r.row += gridDim.x;
  while (r.row < p.rows && !stream_row_reads(p, r.row));
}

/* Issue copies while slots are free. */
__device__ __forceinline__ void stream_fill(const fwd_params &p, stream_ring &r) {
  while (r.used < r.slots && r.row < p.rows) {
    const uint4 *src =
        (const uint4 *)(p.x + r.row * p.stride_bytes) + threadIdx.x + (int64_t)r.k * r.nt;
    copy16_async(r.base + r.fill_slot * r.nt, src);
    copies_commit();
    r.used++;
    r.ahead++;
    r.fill_slot = r.fill_slot + 1 == r.slots ? 0 : r.fill_slot + 1;
    if (++r.k == r.nk) {
      r.k = 0;
      stream_next_row(p, r);
    }
  }
}

__device__ __forceinline__ void stream_free(const fwd_params &p, stream_ring &r) {
  r.used--;
  r.free_slot = r.free_slot + 1 == r.slots ? 0 : r.free_slot + 1;
  stream_fill(p, r);
}

/* Pass 1 of one row: fold this thread's vectors as they land. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void stream_pass1(const fwd_params &p, stream_ring &r, int keep,
                                             part &q) {
  constexpr int VN = elem<T>::N;
  float m = -INFINITY, s = 0.0f;
  for (int k = 0; k < r.nk; k++) {
    copies_wait_pending(r.ahead - 1);
    const uint4 v = r.base[r.read_slot * r.nt];
    r.ahead--;
    r.read_slot = r.read_slot + 1 == r.slots ? 0 : r.read_slot + 1;
    fold_vec<T, GENERAL, ARGMAX, SMOOTH>(p, v, ((int)threadIdx.x + k * r.nt) * VN, m, s, q);
    if (k < r.nk - keep) stream_free(p, r);
  }
  q.m = m;
  q.s = s;
}

#endif

template <typename T, bool GENERAL>
__global__ void __launch_bounds__(1024, 1) fwd_stream(const fwd_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (kernel_enter(p.verdict)) return; /* checked mode, a bad target: write nothing */
  constexpr int VN = elem<T>::N;
  constexpr int U = kStreamUnroll;
  extern __shared__ __align__(16) uint4 stream_slots[];
  __shared__ part scratch[kMaxWarps + 1];

  const int tid = threadIdx.x, nt = blockDim.x;
  const int nvec = p.vocab / VN;
  stream_ring r;
  r.base = stream_slots + tid;
  r.slots = p.ring_slots;
  r.nt = nt;
  r.nk = tid < nvec ? (nvec - 1 - tid) / nt + 1 : 0;
  r.fill_slot = r.read_slot = r.free_slot = 0;
  r.used = r.ahead = 0;
  r.k = 0;
  r.row = blockIdx.x;
  if (r.nk == 0) r.row = p.rows; /* V smaller than the block: nothing to copy */
  else if (r.row < p.rows && !stream_row_reads(p, r.row)) stream_next_row(p, r);
  const int keep = p.write_grad ? min(r.nk, r.slots) : 0;
  const row_scales scales = load_scales(p);

  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    char *rowp = p.x + row * p.stride_bytes;
    uint4 *vp = (uint4 *)rowp + tid;
    const int64_t y64 = load_target(p.targets, p.target64, row);
    const bool bad = target_bad(p, y64);
    const bool ignored = !bad && y64 == p.ignore_index;
    if (ignored || bad) { /* no copies were issued for this row */
      if (tid == 0) skipped_row_outputs(p, row, bad);
      if (p.write_grad)
        for (int k = 0; k < r.nk; k++) __stcs(vp + (int64_t)k * nt, make_uint4(0, 0, 0, 0));
      continue;
    }
    const int y = (int)y64;
    const float xy = tid == 0 ? load_xy<T, GENERAL>(p, rowp, y) : 0.0f;

    stream_fill(p, r);
    part q = part_empty();
#define XENT_STREAM_PASS1(A, S) stream_pass1<T, GENERAL, A, S>(p, r, keep, q)
    XENT_WITH_FLAGS(p, XENT_STREAM_PASS1);
#undef XENT_STREAM_PASS1
    const part red = block_reduce(q, scratch);
    const grad_coef gc = finish_row(p, scales, red, xy, row, y, tid == 0);
    if (!p.write_grad) continue;

    /* Pass 2a: the kept vectors, from shared memory. */
    for (int k = r.nk - keep; k < r.nk; k++) {
      float f[VN];
      elem<T>::unpack(r.base[r.free_slot * nt], f);
      grad_vec<T, GENERAL>(p, gc, f, (tid + k * nt) * VN);
      __stcs(vp + (int64_t)k * nt, elem<T>::pack(f));
      stream_free(p, r);
    }
    /* Pass 2b: the rest, re-read from L2, newest first. */
    for (int k0 = r.nk - keep - 1; k0 >= 0; k0 -= U) {
      uint4 v[U];
#pragma unroll
      for (int u = 0; u < U; u++)
        if (k0 - u >= 0) v[u] = __ldcs(vp + (int64_t)(k0 - u) * nt);
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int k = k0 - u;
        if (k >= 0) {
          float f[VN];
          elem<T>::unpack(v[u], f);
          grad_vec<T, GENERAL>(p, gc, f, (tid + k * nt) * VN);
          __stcs(vp + (int64_t)k * nt, elem<T>::pack(f));
        }
      }
    }
  }
#endif
}

}  // namespace xent

using namespace xent;

static int launch(const fwd_params &p0, const dev_extra &x, int dtype, cudaStream_t stream) {
  fwd_params p = p0;
  const int threads = x.keep_vecs > 0 ? x.keep_vecs : 1024, slots = x.size > 0 ? x.size : 8;
  if ((p.vocab * (dtype ? 2 : 4)) % 16) return -1;
  p.ring_slots = slots;
  fwd_kernel_t k = dtype ? fwd_stream<__nv_bfloat16, false> : fwd_stream<float, false>;
  const int smem = slots * threads * 16;
  if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return -1;
  int per_sm = 0, sms = 0, dev = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, threads, smem) != cudaSuccess ||
      per_sm < 1)
    return -1;
  long long grid = (long long)per_sm * sms;
  if (grid > p.rows) grid = p.rows;
  k<<<(unsigned)grid, threads, smem, stream>>>(p);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

int main(int argc, char **argv) {
  const int V = argc > 1 ? atoi(argv[1]) : 128256;
  dev_extra x = {0, argc > 3 ? atoi(argv[3]) : 1024, argc > 2 ? atoi(argv[2]) : 8};
  const int dtype = argc > 4 && !strcmp(argv[4], "fp32") ? 0 : 1;
  return dev_run("stream", launch, x, 1, dtype, V, 8192);
}
