/*
 * elem.cuh - element types and 16-byte vectors of the logits, the geometry
 * of a row (an aligned body of vectors between single head and tail
 * elements), and the loads and stores the kernels make.
 */
#ifndef XENT_CUDA_ELEM_CUH
#define XENT_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace xent {

constexpr float kLog2e = 1.4426950408889634f;

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
__device__ __forceinline__ uint4 ld_once(const uint4 *p) { return __ldcs(p); }
/* A plain 16-byte load (default caching), for reads that no evict-first
 * hint helps. */
__device__ __forceinline__ uint4 ld_plain(const uint4 *p) { return __ldca(p); }
__device__ __forceinline__ void st_grad(uint4 *p, uint4 v) { __stcs(p, v); }

/* 2^x on the special-function unit (flushes subnormal results to 0). */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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

}  // namespace xent

#endif
