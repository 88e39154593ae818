/*
 * device_common.cuh - what every xent CUDA kernel shares: the parameter
 * blocks, element types and 16-byte vectors, row geometry (the aligned body
 * and the unaligned head and tail of a row), and warp/block reductions of
 * the row statistics.
 */
#ifndef XENT_CUDA_DEVICE_COMMON_CUH
#define XENT_CUDA_DEVICE_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "common/rowmath.h"

/* XENT_DIAG: measurement builds only (scripts/device.sh diag, bench/NOTES.md
 * v8), never a release. Each level removes part of the forward kernels' work
 * and leaves their loads and stores as they are; results are wrong by design.
 *   1  ex2 replaced by an FMA (no SFU work)
 *   2  no arithmetic: pass 1 folds an xor of each vector, pass 2 writes back
 *      what it read
 *   3  as 2, and no block-wide reduction (each thread keeps its statistics)
 *   4  as 2, and no cluster exchange (each block keeps its statistics)
 *   5  as 2, with the two-read kernel's clusters exchanging their statistics
 *      as before v9 (cluster_combine: a cluster barrier per row), to time
 *      against the asynchronous exchange
 *   6  the real kernels, with the logits' 16-byte loads and stores plain
 *      (no evict-first .cs hints)
 *   7  the real kernels, with plain loads and .cs stores
 *   8  the real kernels, with the once-read loads non-coherent, L1 not
 *      allocated, L2 at normal priority (ld.global.nc.L1::no_allocate)
 *   9  as 8, under an L2 evict-first policy (createpolicy, cache_hint)
 *  10  as 8, asking L2 for 256-byte fetches (.L2::256B)
 *  11  .cs loads asking L2 for 256-byte fetches
 *  12  the real kernels, with the row-per-warp kernel's plain pass folding
 *      vector by vector (fold_vec, as in v19) instead of a stage at a time
 *  13  as 2, with the row-per-warp kernel's plain pass loading with
 *      ld.global.cs as before v20
 * Levels 6 to 11 change ld_once, which the row-per-warp kernel's plain pass
 * does not use since v20 (ld_plain). */
#ifndef XENT_DIAG
#define XENT_DIAG 0
#endif
/* Levels 2 to 5 and 13 remove the arithmetic. */
#define XENT_DIAG_NO_MATH ((XENT_DIAG >= 2 && XENT_DIAG <= 5) || XENT_DIAG == 13)

namespace xent {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kMaxWarps = 32;

/* ------------------------------------------------------------------------ */
/* Parameter blocks                                                          */
/* ------------------------------------------------------------------------ */

/* The device-side scratch header (the first 256 bytes of the workspace). */
struct ws_header {
  unsigned int ticket;            /* blocks of the count kernel that are done      */
  int pad0;
  unsigned long long bad_target;  /* rows - r for the first bad row r, 0 if none   */
  unsigned long long bad_weight;  /* V - j for the first non-finite weight j       */
  int n;                          /* non-ignored rows                               */
  float w;                        /* sum of w[y] over non-ignored rows              */
  float sum_w;                    /* sum of all class weights                       */
  float scale_loss;               /* 1/N, 1/W or 1                                  */
  float scale_z;                  /* 1/N or 1                                       */
  unsigned long long next_row;    /* fwd_staged: rows handed out so far             */
};

struct fwd_params {
  char *x;                 /* logits (gradient written here)                    */
  int64_t rows;
  int64_t stride_bytes;    /* between row starts                                */
  int vocab;
  int cluster;             /* blocks per row (1: no cluster)                    */
  int ring_slots;          /* fwd_ring, fwd_staged: shared-memory slots of ring_chunk_vecs;
                              fwd_stream: 16-byte slots per thread             */
  int ring_chunk_vecs;     /* fwd_ring, fwd_staged: 16-byte vectors per bulk copy */
  int ring_lsu;            /* fwd_ring: per-thread copies instead of bulk ones */
  int ring_reuse;          /* fwd_staged with a gradient: a slice's last chunks
                              that pass 2 reads from shared memory (<= slots) */
  int ring_hold;           /* fwd_staged with a gradient: of the chunks pass 2 does
                              not reuse, the first ones it takes from registers
                              (capped by the kernel's own maximum)            */
  int keep_vecs;           /* fwd_tworead<KEEP>: 16-byte vectors per thread held
                              in shared memory between the passes             */
  int l2_hint;             /* fwd_tworead with a gradient: pass 1 loads evict-last,
                              pass 2 evict-first (L2 policies, sm_80+);
                              fwd_staged: pass 1 evict-last, not normal      */
  unsigned long long *row_ticket; /* fwd_staged: the workspace's row counter (zero
                              before the launch); NULL: every grid-th row     */
  const void *targets;
  int target64;
  int64_t ignore_index;
  const float *weights;    /* NULL: unweighted                                  */
  xent_consts k;           /* sum_w filled on the device when weighted          */
  int use_softcap;
  float softcap, inv_softcap;
  int write_grad;
  int need_argmax;
  int per_row_out;         /* reduction none: write loss/z/acc per row to out   */
  const ws_header *hdr;    /* scales and sum_w; NULL: scales 1                  */
  const ws_header *verdict; /* checked mode: the count kernel's verdict; with a
                              bad target or weight the kernel returns at once,
                              writing nothing (call_rejected); NULL: unchecked */
  float *row_loss;         /* loss per row: out->loss (none) or workspace       */
  float *row_z;            /* z per row (may be NULL)                           */
  float *row_acc;          /* accuracy per row (may be NULL)                    */
  float *lse_out;          /* optional                                          */
  int64_t *pred_out;       /* optional                                          */
  float *seg_lse;          /* fwd_segment, rows of two segments: segment k of
                              row r leaves its log-sum-exp at
                              seg_lse[k * seg_pitch + r], segment 0 the
                              target's logit at [2 * seg_pitch + r] (for
                              fwd_segment_merge); NULL for rows of one     */
  int64_t seg_pitch;
  int seg_count;           /* fwd_segment: segments a row, of seg_vecs vectors
                              (the last one of a row may hold fewer)          */
  int seg_vecs;
};

struct prep_params {
  const void *targets;
  int target64;
  int64_t rows;
  int vocab;
  int64_t ignore_index;
  const float *weights;
  int mean;                /* reduction mean                                    */
  ws_header *hdr;
  float *partials;         /* 3 floats per block                                */
  unsigned long long *host_verdict; /* checked mode: the last block writes
                              bad_target and bad_weight here (pinned host
                              memory mapped into the device); NULL: not   */
};

struct finalize_params {
  const ws_header *hdr;        /* the count kernel's N, W and scales; NULL: none */
  const ws_header *verdict;    /* as fwd_params::verdict                      */
  int count;                   /* hdr NULL, mean or accuracy: count N here,    */
                               /* the rows of row_loss that are not -0         */
  const float *row_loss, *row_z, *row_acc;
  int64_t rows;
  int mean;
  int weighted;
  float *loss, *z_loss, *acc;  /* outputs (1 value each, optional but loss)    */
};

struct scale_params {
  char *g;
  int64_t rows;
  int64_t stride_bytes;
  int vocab;
  const float *grad_output;  /* NULL: use host_scale                            */
  int per_row;
  float host_scale;
};

/* ------------------------------------------------------------------------ */
/* Element types and 16-byte vectors                                         */
/* ------------------------------------------------------------------------ */

template <typename T> struct elem;

template <> struct elem<float> {
  static constexpr int N = 4; /* per 16-byte vector */
  __device__ static float load(const char *p) { return __ldcs((const float *)p); }
  __device__ static void store(char *p, float v) { __stcs((float *)p, v); }
  __device__ static void unpack(const uint4 &u, float (&f)[4]) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  }
  __device__ static uint4 pack(const float (&f)[4]) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ unsigned bf16_pack2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned *>(&h);
}

template <> struct elem<__nv_bfloat16> {
  static constexpr int N = 8;
  __device__ static float load(const char *p) {
    unsigned short s = __ldcs((const unsigned short *)p);
    return __uint_as_float((unsigned)s << 16);
  }
  __device__ static void store(char *p, float v) {
    __nv_bfloat16 h = __float2bfloat16_rn(v);
    __stcs((unsigned short *)p, *reinterpret_cast<unsigned short *>(&h));
  }
  __device__ static void unpack(const uint4 &u, float (&f)[8]) {
    f[0] = bf16_lo(u.x); f[1] = bf16_hi(u.x);
    f[2] = bf16_lo(u.y); f[3] = bf16_hi(u.y);
    f[4] = bf16_lo(u.z); f[5] = bf16_hi(u.z);
    f[6] = bf16_lo(u.w); f[7] = bf16_hi(u.w);
  }
  __device__ static uint4 pack(const float (&f)[8]) {
    return make_uint4(bf16_pack2(f[0], f[1]), bf16_pack2(f[2], f[3]), bf16_pack2(f[4], f[5]),
                      bf16_pack2(f[6], f[7]));
  }
};

__device__ __forceinline__ float2 h2_unpack(unsigned w) {
  __half2 h = *reinterpret_cast<__half2 *>(&w);
  return __half22float2(h);
}
__device__ __forceinline__ unsigned h2_pack(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned *>(&h);
}

template <> struct elem<__half> {
  static constexpr int N = 8;
  __device__ static float load(const char *p) {
    unsigned short s = __ldcs((const unsigned short *)p);
    return __half2float(*reinterpret_cast<__half *>(&s));
  }
  __device__ static void store(char *p, float v) {
    __half h = __float2half_rn(v);
    __stcs((unsigned short *)p, *reinterpret_cast<unsigned short *>(&h));
  }
  __device__ static void unpack(const uint4 &u, float (&f)[8]) {
    float2 a = h2_unpack(u.x), b = h2_unpack(u.y), c = h2_unpack(u.z), d = h2_unpack(u.w);
    f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
    f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
  }
  __device__ static uint4 pack(const float (&f)[8]) {
    return make_uint4(h2_pack(f[0], f[1]), h2_pack(f[2], f[3]), h2_pack(f[4], f[5]),
                      h2_pack(f[6], f[7]));
  }
};

/* ------------------------------------------------------------------------ */
/* Row geometry: elements [0, head) and [tail, V) are single elements, the   */
/* rest is nvec aligned 16-byte vectors starting at element head.            */
/* ------------------------------------------------------------------------ */

struct row_geom {
  int head;    /* elements before the first 16-byte boundary                 */
  int nvec;    /* whole vectors                                             */
  int tail;    /* first element after the vectors                           */
  int extras;  /* head + (V - tail): at most 2 * (N - 1)                     */
};

template <typename T>
__device__ __forceinline__ row_geom make_geom(const char *row, int vocab) {
  constexpr int es = (int)sizeof(T);
  row_geom g;
  int mis = (int)((uintptr_t)row & 15u);
  int head = mis ? (16 - mis) / es : 0;
  if (head > vocab) head = vocab;
  g.head = head;
  g.nvec = (vocab - head) / elem<T>::N;
  g.tail = head + g.nvec * elem<T>::N;
  g.extras = head + (vocab - g.tail);
  return g;
}

/* Element index of extra slot e (e < extras). */
__device__ __forceinline__ int extra_index(const row_geom &g, int e) {
  return e < g.head ? e : g.tail + (e - g.head);
}

__device__ __forceinline__ int64_t load_target(const void *t, int t64, int64_t r) {
  return t64 ? ((const int64_t *)t)[r] : (int64_t)((const int32_t *)t)[r];
}

/* The forward's 16-byte loads of the logits that no later pass asks L2 for
 * again, and its 16-byte stores of the gradient (evict-first hints). */
__device__ __forceinline__ uint4 ld_once(const uint4 *p) {
#if XENT_DIAG == 6 || XENT_DIAG == 7
  return __ldca(p);
#elif XENT_DIAG >= 8 && XENT_DIAG <= 11
  uint4 v;
#if XENT_DIAG == 8
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#elif XENT_DIAG == 9
  uint64_t pol;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(pol));
#elif XENT_DIAG == 10
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#else
  asm volatile("ld.global.cs.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#endif
  return v;
#else
  return __ldcs(p);
#endif
}
/* A plain 16-byte load (default caching), for reads that no evict-first
 * hint helps. */
__device__ __forceinline__ uint4 ld_plain(const uint4 *p) {
#if XENT_DIAG == 13
  return __ldcs(p);
#else
  return __ldca(p);
#endif
}
__device__ __forceinline__ void st_grad(uint4 *p, uint4 v) {
#if XENT_DIAG == 6
  *p = v;
#else
  __stcs(p, v);
#endif
}

__device__ __forceinline__ float fast_exp2(float x) {
#if XENT_DIAG == 1
  return fmaf(x, 1e-4f, 1.0f);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/* ------------------------------------------------------------------------ */
/* Row statistics and their reduction                                        */
/* ------------------------------------------------------------------------ */

/* A partial reduction of some elements of a row. */
struct part {
  float m;      /* max of x'                                                  */
  float s;      /* sum exp(x' - m)                                            */
  float sx;     /* sum x'                                                     */
  float swx;    /* sum w x'                                                   */
  float am;     /* value of the arg-max (x')                                   */
  int ai;       /* its first index (INT_MAX when none)                        */
};

__device__ __forceinline__ part part_empty() {
  part p;
  p.m = -INFINITY;
  p.s = 0.f;
  p.sx = 0.f;
  p.swx = 0.f;
  p.am = -INFINITY;
  p.ai = 0x7fffffff;
  return p;
}

__device__ __forceinline__ void argmax_merge(float &am, int &ai, float v, int i) {
  if (v > am || (v == am && i < ai)) {
    am = v;
    ai = i;
  }
}

__device__ __forceinline__ part part_merge(part a, const part &b) {
  xent_merge_max_sum(&a.m, &a.s, b.m, b.s);
  a.sx += b.sx;
  a.swx += b.swx;
  argmax_merge(a.am, a.ai, b.am, b.ai);
  return a;
}

__device__ __forceinline__ part part_shfl_xor(const part &p, int mask) {
  part q;
  q.m = __shfl_xor_sync(0xffffffffu, p.m, mask);
  q.s = __shfl_xor_sync(0xffffffffu, p.s, mask);
  q.sx = __shfl_xor_sync(0xffffffffu, p.sx, mask);
  q.swx = __shfl_xor_sync(0xffffffffu, p.swx, mask);
  q.am = __shfl_xor_sync(0xffffffffu, p.am, mask);
  q.ai = __shfl_xor_sync(0xffffffffu, p.ai, mask);
  return q;
}

/* Butterfly: every lane ends with the same value, merged in the same order. */
__device__ __forceinline__ part warp_reduce(part p) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    part q = part_shfl_xor(p, o);
    /* merge in lane order so both partners compute the identical result */
    p = ((threadIdx.x & o) == 0) ? part_merge(p, q) : part_merge(q, p);
  }
  return p;
}

/* Reduce over threads [0, threads) of the block, all of which call this;
 * the result is returned to each of them. `scratch` holds kMaxWarps + 1
 * parts of shared memory. NAMED: the threads meet at barrier 1 (a subset
 * of the block, a multiple of 32), else at __syncthreads. */
template <bool NAMED>
__device__ __forceinline__ part threads_reduce(part p, part *scratch, int threads) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned nwarps = ((unsigned)threads + 31u) >> 5;
  p = warp_reduce(p);
  if (lane == 0) scratch[warp] = p;
  if (NAMED) asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  else __syncthreads();
  if (warp == 0) {
    part q = (unsigned)lane < nwarps ? scratch[lane] : part_empty();
    q = warp_reduce(q);
    if (lane == 0) scratch[kMaxWarps] = q;
  }
  if (NAMED) asm volatile("bar.sync 1, %0;" ::"r"(threads) : "memory");
  else __syncthreads();
  return scratch[kMaxWarps];
}

/* Reduce over the block; the result is returned to every thread. */
__device__ __forceinline__ part block_reduce(part p, part *scratch) {
  return threads_reduce<false>(p, scratch, (int)blockDim.x);
}

/* ------------------------------------------------------------------------ */
/* Per-element math                                                          */
/* ------------------------------------------------------------------------ */

/* x' from x, and the softcap derivative factor 1 - tanh^2. */
__device__ __forceinline__ float cap(const fwd_params &p, float x, float *dfac) {
  float t = tanhf(x * p.inv_softcap);
  *dfac = 1.0f - t * t;
  return p.softcap * t;
}

/* Fold one element x' (index j) into a partial's max pass. ARGMAX and SMOOTH
 * are compile-time so the common case carries no per-element branches. */
template <bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_max(const fwd_params &p, part &q, float xc, int j) {
  if (ARGMAX) argmax_merge(q.am, q.ai, xc, j);
  q.m = fmaxf(q.m, xc);
  if (SMOOTH) {
    q.sx += xc;
    if (GENERAL && p.weights) q.swx += __ldg(p.weights + j) * xc;
  }
}

/* Fold one 16-byte vector v (elements j0 .. j0 + N - 1) into an online
 * (max m, sum s) and the max-pass statistics q: one exponential per element,
 * and one rescale of s when the vector raises the max. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_vec(const fwd_params &p, const uint4 &v, int j0, float &m,
                                         float &s, part &q) {
  constexpr int VN = elem<T>::N;
#if XENT_DIAG_NO_MATH
  (void)p, (void)j0, (void)q, (void)VN;
  m = 0.0f;
  s += __uint_as_float((v.x ^ v.y ^ v.z ^ v.w) & 0x3fffffffu);
#else
  float f[VN];
  elem<T>::unpack(v, f);
  float cm = -INFINITY;
#pragma unroll
  for (int e = 0; e < VN; e++) {
    float d;
    if (GENERAL && p.use_softcap) f[e] = cap(p, f[e], &d);
    fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, f[e], j0 + e);
    cm = fmaxf(cm, f[e]);
  }
  if (cm > m) {
    s *= fast_exp2((m - cm) * kLog2e); /* 0 while m was -inf; NaN stays NaN */
    m = cm;
  }
  if (m != -INFINITY) {
    const float mk = m * kLog2e;
#pragma unroll
    for (int e = 0; e < VN; e++) s += fast_exp2(fmaf(f[e], kLog2e, -mk));
  } else {
#pragma unroll
    for (int e = 0; e < VN; e++)
      if (f[e] != f[e]) s = f[e];
  }
#endif
}

/* Packed maximum of two 32-bit words of elements (two bf16 or fp16, one
 * fp32), NaN-ignoring like fmaxf; and the word of -inf. One instruction for
 * a pair on sm_80 and newer. */
template <typename T> struct word_max;
template <> struct word_max<__nv_bfloat16> {
  static constexpr uint32_t kNegInf = 0xff80ff80u;
  __device__ static uint32_t of(uint32_t a, uint32_t b) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    uint32_t d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else /* widened to fp32, where fmaxf returns one of its inputs bit for bit */
    const uint32_t lo = __float_as_uint(fmaxf(bf16_lo(a), bf16_lo(b)));
    const uint32_t hi = __float_as_uint(fmaxf(bf16_hi(a), bf16_hi(b)));
    return (hi & 0xffff0000u) | (lo >> 16);
#endif
  }
  __device__ static float to_float(uint32_t w) { return fmaxf(bf16_lo(w), bf16_hi(w)); }
};
template <> struct word_max<__half> {
  static constexpr uint32_t kNegInf = 0xfc00fc00u;
  __device__ static uint32_t of(uint32_t a, uint32_t b) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    uint32_t d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
#else /* widened to fp32 and back: exact for values that came from fp16 */
    const float2 x = h2_unpack(a), y = h2_unpack(b);
    return h2_pack(fmaxf(x.x, y.x), fmaxf(x.y, y.y));
#endif
  }
  __device__ static float to_float(uint32_t w) {
    const float2 f = h2_unpack(w);
    return fmaxf(f.x, f.y);
  }
};
template <> struct word_max<float> {
  static constexpr uint32_t kNegInf = 0xff800000u;
  __device__ static uint32_t of(uint32_t a, uint32_t b) {
    return __float_as_uint(fmaxf(__uint_as_float(a), __uint_as_float(b)));
  }
  __device__ static float to_float(uint32_t w) { return __uint_as_float(w); }
};

/* Fold a thread's U vectors of a stage into its online (max m, sum s), for
 * calls that need nothing but the two (no softcap, weights, accuracy or
 * smoothing): the stage's maximum first, on packed pairs, then one rescale
 * and U * N exponentials summed in four independent chains. Vectors past
 * the stage's end hold -inf and add nothing. The same result as fold_vec
 * up to the order of the additions. */
template <typename T, int U>
__device__ __forceinline__ void fold_stage(const uint4 (&v)[U], float &m, float &s) {
  constexpr int VN = elem<T>::N;
  using W = word_max<T>;
  uint32_t w[U];
#pragma unroll
  for (int u = 0; u < U; u++) w[u] = W::of(W::of(v[u].x, v[u].y), W::of(v[u].z, v[u].w));
#pragma unroll
  for (int h = 1; h < U; h *= 2)
#pragma unroll
    for (int u = 0; u + h < U; u += 2 * h) w[u] = W::of(w[u], w[u + h]);
  const float cm = W::to_float(w[0]);
  if (cm > m) {
    s *= fast_exp2((m - cm) * kLog2e); /* 0 while m was -inf; NaN stays NaN */
    m = cm;
  }
  if (m == -INFINITY) { /* every element so far -inf or NaN: keep a NaN */
#pragma unroll
    for (int u = 0; u < U; u++) {
      float f[VN];
      elem<T>::unpack(v[u], f);
#pragma unroll
      for (int e = 0; e < VN; e++)
        if (f[e] != f[e]) s = f[e];
    }
    return;
  }
  const float mk = m * kLog2e;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int u = 0; u < U; u++) {
    float f[VN];
    elem<T>::unpack(v[u], f);
#pragma unroll
    for (int e = 0; e < VN; e++) acc[e & 3] += fast_exp2(fmaf(f[e], kLog2e, -mk));
  }
  s += (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Runs CALL(ARGMAX, SMOOTH) with the compile-time flags matching this call. */
#define XENT_WITH_FLAGS(p, CALL)                       \
  do {                                                 \
    if ((p).need_argmax) {                             \
      if ((p).k.smoothing) CALL(true, true);           \
      else CALL(true, false);                          \
    } else {                                           \
      if ((p).k.smoothing) CALL(false, true);          \
      else CALL(false, false);                         \
    }                                                  \
  } while (0)

/* Row-wide constants the gradient needs. */
struct grad_coef {
  float a, b, c;  /* g_j = a p_j - b (w_j) - [j == y] c                        */
  float lse;
  float lse2;     /* lse * log2(e)                                             */
  int y;
};

/* The gradient of one element x (raw logit) with index j, before the
 * target's -c (applied per vector by fix_target). */
template <bool GENERAL>
__device__ __forceinline__ float grad_elem(const fwd_params &p, const grad_coef &gc, float x,
                                           int j, float *dfac) {
  float xc = x;
  *dfac = 1.0f;
  if (GENERAL && p.use_softcap) xc = cap(p, x, dfac);
  float pj = fast_exp2(fmaf(xc, kLog2e, -gc.lse2));
  float bj = (GENERAL && p.weights) ? gc.b * __ldg(p.weights + j) : gc.b;
  float g = fmaf(gc.a, pj, -bj);
  if (GENERAL) g *= *dfac;
  return g;
}

/* Gradients of a vector of N elements starting at index j0, in place in f. */
template <typename T, bool GENERAL>
__device__ __forceinline__ void grad_vec(const fwd_params &p, const grad_coef &gc,
                                         float (&f)[elem<T>::N], int j0) {
  constexpr int VN = elem<T>::N;
#if XENT_DIAG_NO_MATH
  (void)p, (void)gc, (void)f, (void)j0, (void)VN;
#else
  float dfac[VN];
#pragma unroll
  for (int e = 0; e < VN; e++) f[e] = grad_elem<GENERAL>(p, gc, f[e], j0 + e, &dfac[e]);
  const unsigned off = (unsigned)(gc.y - j0);
  if (off < (unsigned)VN) {
#pragma unroll
    for (int e = 0; e < VN; e++)
      if (e == (int)off) f[e] -= GENERAL ? gc.c * dfac[e] : gc.c;
  }
#endif
}

/* The gradient of a single element (head or tail of a row). */
template <bool GENERAL>
__device__ __forceinline__ float grad_one(const fwd_params &p, const grad_coef &gc, float x,
                                          int j) {
  float dfac;
  float g = grad_elem<GENERAL>(p, gc, x, j, &dfac);
  if (j == gc.y) g -= GENERAL ? gc.c * dfac : gc.c;
  return g;
}

/* Checked mode: did the count kernel find a bad target or weight? Then every
 * kernel of the call returns before it writes anything (or waits on any
 * barrier: the verdict is the same for every block), so the host can queue
 * the whole call before it reads the verdict, and still leave the logits and
 * the outputs as they were. */
__device__ __forceinline__ bool call_rejected(const ws_header *verdict) {
  return verdict && (verdict->bad_target | verdict->bad_weight) != 0;
}

/* The first statement of the forward, finalize and scale kernels. On sm_90+
 * the host launches them programmatically (set_pdl): such a kernel may
 * start while the kernel ahead of it in the stream still runs, so it first
 * waits for that grid to finish and its writes to land (a no-op after an
 * ordinary launch). It then lets the kernel behind it launch, whose blocks
 * wait, resident, for this grid's end: no launch gap between the two. The
 * wait comes before every read, the verdict's included. Returns
 * call_rejected(verdict).
 *
 * early: let the kernel behind launch before the wait, for a grid that is
 * all resident while the kernel ahead still runs (the segment path's merge
 * kernel), so that the next one is resident too when the grid ahead ends,
 * not launched only once this one's wait is over. (The hardware launches a
 * dependent grid once every block of this one has started, so a larger
 * grid gains nothing. With this order in every kernel the full step at
 * V = 32000 was 0.2 to 0.7 % slower, bench/NOTES.md v23.) */
__device__ __forceinline__ bool kernel_enter(const ws_header *verdict, bool early = false) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (!early) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#else
  (void)early;
#endif
  return call_rejected(verdict);
}

/* The reduction scales the count kernel left in the workspace header (1
 * without one), and the constants with the device's sum of weights. A
 * persistent kernel reads them once, not once per row. */
struct row_scales {
  xent_consts k;
  float loss, z;
};

__device__ __forceinline__ row_scales load_scales(const fwd_params &p) {
  row_scales rs;
  rs.k = p.k;
  rs.loss = 1.0f;
  rs.z = 1.0f;
  if (p.hdr) {
    if (p.weights) rs.k.sum_w = p.hdr->sum_w;
    rs.loss = p.hdr->scale_loss;
    rs.z = p.hdr->scale_z;
  }
  return rs;
}

/* Statistics of a finished row -> gradient coefficients and row outputs.
 * Called with the row's full reduction; `xy` is x'_y. */
__device__ __forceinline__ grad_coef finish_row(const fwd_params &p, const row_scales &rs,
                                                const part &r, float xy, int64_t row, int y,
                                                bool write_outputs) {
  const xent_consts &k = rs.k;
  const float scale_loss = rs.loss, scale_z = rs.z;
  xent_row_stats st;
  st.lse = r.m + logf(r.s);
  st.xy = xy;
  st.sum_x = r.sx;
  st.sum_wx = r.swx;
  st.wy = p.weights ? __ldg(p.weights + y) : 1.0f;
  xent_row_coef c = xent_row_coefficients(&k, &st, scale_loss, scale_z);
  grad_coef gc;
  gc.a = c.a;
  gc.b = c.b;
  gc.c = c.c;
  gc.lse = st.lse;
  gc.lse2 = st.lse * kLog2e;
  gc.y = y;
  if (write_outputs) {
    float lp = xent_row_loss(&k, &st);
    float z = xent_row_z(&k, st.lse);
    float acc = (r.ai == y) ? 1.0f : 0.0f;
    if (p.per_row_out) {
      p.row_loss[row] = lp + z;
    } else {
      /* + 0 turns a -0 into +0 and leaves every other value as it is: in
       * the workspace, -0 marks an ignored row (skipped_row_outputs) */
      p.row_loss[row] = __fadd_rn(lp, 0.0f);
    }
    if (p.row_z) p.row_z[row] = z;
    if (p.row_acc) p.row_acc[row] = acc;
    if (p.lse_out) p.lse_out[row] = st.lse;
    if (p.pred_out) p.pred_out[row] = r.ai;
  }
  return gc;
}

__device__ __forceinline__ grad_coef finish_row(const fwd_params &p, const part &r, float xy,
                                                int64_t row, int y, bool write_outputs) {
  return finish_row(p, load_scales(p), r, xy, row, y, write_outputs);
}

/* Is target y outside [0, V) without being ignore_index? The forward
 * kernels skip such a row (unchecked mode; checked mode never launches
 * them with one) as they skip an ignored row: zero gradient, and the
 * outputs of skipped_row_outputs. */
__device__ __forceinline__ bool target_bad(const fwd_params &p, int64_t y) {
  return y != p.ignore_index && (y < 0 || y >= p.vocab);
}

/* x'_y: the target's logit of a row, soft-capped when the call asks for it
 * (GENERAL kernels only). Read by the one thread that writes the row's
 * outputs. */
template <typename T, bool GENERAL>
__device__ __forceinline__ float load_xy(const fwd_params &p, const char *rowp, int y) {
  float d, xy = elem<T>::load(rowp + (int64_t)y * sizeof(T));
  if (GENERAL && p.use_softcap) xy = cap(p, xy, &d);
  return xy;
}

/* Outputs of an ignored row (bad = 0) or of a row with a bad target (bad = 1,
 * unchecked mode only). */
__device__ __forceinline__ void skipped_row_outputs(const fwd_params &p, int64_t row, bool bad) {
  float v = bad ? __int_as_float(0x7fc00000) : 0.0f;
  /* The caller sees 0 for an ignored row. The workspace's copy is -0, which
   * no other row leaves there (finish_row), so that the finalize kernel
   * counts N from the values it adds rather than from the targets. */
  p.row_loss[row] = bad || p.per_row_out ? v : -0.0f;
  if (p.row_z) p.row_z[row] = v;
  if (p.row_acc) p.row_acc[row] = 0.0f;
  if (p.lse_out) p.lse_out[row] = 0.0f;
  if (p.pred_out) p.pred_out[row] = -1;
}

/* Zero this thread's share of a skipped row's gradient: vectors j0, j0 +
 * step, ... below jend, and extra slots e0, e0 + estep, ... */
template <typename T>
__device__ __forceinline__ void zero_row(char *row, const row_geom &g, int j0, int jend, int step,
                                         int e0, int estep) {
  uint4 *vp = (uint4 *)(row + (int64_t)g.head * sizeof(T));
  if (jend > g.nvec) jend = g.nvec;
  for (int j = j0; j < jend; j += step) st_grad(vp + j, make_uint4(0, 0, 0, 0));
  for (int e = e0; e < g.extras; e += estep)
    elem<T>::store(row + (int64_t)extra_index(g, e) * sizeof(T), 0.0f);
}

/* Fold this thread's extra elements of a row (slots e0, e0 + step, ...)
 * into an online (max m, sum s) and the max-pass statistics q. */
template <typename T, bool GENERAL, bool ARGMAX, bool SMOOTH>
__device__ __forceinline__ void fold_extras(const fwd_params &p, const char *rowp,
                                            const row_geom &g, int e0, int step, float &m,
                                            float &s, part &q) {
  for (int e = e0; e < g.extras; e += step) {
    const int ej = extra_index(g, e);
    float x = elem<T>::load(rowp + (int64_t)ej * sizeof(T)), d;
    if (GENERAL && p.use_softcap) x = cap(p, x, &d);
    fold_max<GENERAL, ARGMAX, SMOOTH>(p, q, x, ej);
    xent_merge_element(&m, &s, x);
  }
}

/* The gradient of this thread's extra elements of a row (slots e0, e0 +
 * step, ...), in place. */
template <typename T, bool GENERAL>
__device__ __forceinline__ void grad_extras(const fwd_params &p, const grad_coef &gc, char *rowp,
                                            const row_geom &g, int e0, int step) {
  for (int e = e0; e < g.extras; e += step) {
    const int ej = extra_index(g, e);
    char *ep = rowp + (int64_t)ej * sizeof(T);
    elem<T>::store(ep, grad_one<GENERAL>(p, gc, elem<T>::load(ep), ej));
  }
}

}  // namespace xent

#endif
