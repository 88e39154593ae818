/*
 * simd.h - the 8-lane fp32 vector layer of the CPU backend.
 *
 * Written with GCC/Clang vector extensions so it compiles anywhere; where
 * the build targets AVX2 + FMA (and F16C) a few operations use the matching
 * x86 instructions, with the portable forms as the fallback. Everything here
 * is exact or correctly rounded except vexp and vtanh (a few ulp).
 *
 * Loads and stores take element pointers of any natural alignment; the
 * vectors themselves never need more than that.
 */
#ifndef XENT_CPU_SIMD_H
#define XENT_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define XENT_SIMD_AVX2 1
#endif
#if defined(__F16C__) && defined(__AVX__) && !defined(XENT_CPU_NO_F16C)
#include <immintrin.h>
#define XENT_SIMD_F16C 1
#endif

#define XENT_AI static inline __attribute__((always_inline))

/* Without AVX, GCC notes that 32-byte vectors are passed differently; these
 * functions are all inlined, so the note does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));

/* Element types of the logits, as the backend's template parameter. */
enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 };
/* Bytes of an element, and the address of element j of a row. */
#define ESZ(dt) ((dt) == DT_F32 ? 4 : 2)
#define AT(p, j, dt) ((const void *)((const char *)(p) + (size_t)(j) * ESZ(dt)))
#define AT_W(p, j, dt) ((void *)((char *)(p) + (size_t)(j) * ESZ(dt)))

XENT_AI v8f vsplat(float x) { return (v8f){x, x, x, x, x, x, x, x}; }
XENT_AI v8i vsplati(int32_t x) { return (v8i){x, x, x, x, x, x, x, x}; }

/* Lane-wise comparisons, all ones where true. Without AVX2, GCC 12 lowers a
 * 32-byte comparison lane by lane through scalar compares and branches-free
 * setcc (the x86-64 baseline kernels ran 10x slower than the v3 ones); the
 * two 16-byte halves are compared instead, one SSE2 instruction each. */
#if !defined(__AVX2__) && defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define XENT_SIMD_HALVES 1
#endif
#endif
#ifdef XENT_SIMD_HALVES
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
#define XENT_CMP_HALVES(name, T, H, op)                                                   \
  XENT_AI v8i name(T a, T b) {                                                          \
    const H a0 = __builtin_shufflevector(a, a, 0, 1, 2, 3);                             \
    const H a1 = __builtin_shufflevector(a, a, 4, 5, 6, 7);                             \
    const H b0 = __builtin_shufflevector(b, b, 0, 1, 2, 3);                             \
    const H b1 = __builtin_shufflevector(b, b, 4, 5, 6, 7);                             \
    const v4i r0 = (v4i)(a0 op b0), r1 = (v4i)(a1 op b1);                               \
    return __builtin_shufflevector(r0, r1, 0, 1, 2, 3, 4, 5, 6, 7);                     \
  }
#else
#define XENT_CMP_HALVES(name, T, H, op) \
  XENT_AI v8i name(T a, T b) { return (v8i)(a op b); }
#endif
XENT_CMP_HALVES(vgt, v8f, v4f, >)
XENT_CMP_HALVES(vlt, v8f, v4f, <)
XENT_CMP_HALVES(veq, v8f, v4f, ==)
XENT_CMP_HALVES(vne, v8f, v4f, !=)
XENT_CMP_HALVES(vgti, v8i, v4i, >)
XENT_CMP_HALVES(vlti, v8i, v4i, <)
#undef XENT_CMP_HALVES

/* m ? a : b, lane by lane (m lanes are all ones or all zeros). */
XENT_AI v8f vsel(v8i m, v8f a, v8f b) {
#ifdef XENT_SIMD_AVX2
  return (v8f)_mm256_blendv_ps((__m256)b, (__m256)a, (__m256)m);
#else
  return (v8f)((m & (v8i)a) | (~m & (v8i)b));
#endif
}

/* a > b ? a : b; when either is NaN the result is b. */
XENT_AI v8f vmax(v8f a, v8f b) {
#ifdef XENT_SIMD_AVX2
  return (v8f)_mm256_max_ps((__m256)a, (__m256)b);
#else
  return vsel(vgt(a, b), a, b);
#endif
}

/* a < b ? a : b; when either is NaN the result is b. */
XENT_AI v8f vmin(v8f a, v8f b) {
#ifdef XENT_SIMD_AVX2
  return (v8f)_mm256_min_ps((__m256)a, (__m256)b);
#else
  return vsel(vlt(a, b), a, b);
#endif
}

/* a * b + c, fused where the hardware can. */
XENT_AI v8f vfma(v8f a, v8f b, v8f c) {
#ifdef XENT_SIMD_AVX2
  return (v8f)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif defined(__clang__) && __has_builtin(__builtin_elementwise_fma)
  return __builtin_elementwise_fma(a, b, c);
#else
  return a * b + c;
#endif
}

/* Lane sums and maxima, always in the same order. */
XENT_AI float vhsum(v8f v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

XENT_AI float vhmax(v8f v) {
  float m = v[0];
  for (int i = 1; i < 8; i++) m = m > v[i] ? m : v[i];
  return m;
}

/* Any lane of a mask set. */
XENT_AI int vany(v8i m) {
#ifdef XENT_SIMD_AVX2
  return _mm256_movemask_ps((__m256)m) != 0;
#else
  int32_t a = 0;
  for (int i = 0; i < 8; i++) a |= m[i];
  return a != 0;
#endif
}

/* Every lane of a mask set. */
XENT_AI int vall(v8i m) {
#ifdef XENT_SIMD_AVX2
  return _mm256_movemask_ps((__m256)m) == 0xff;
#else
  int32_t a = -1;
  for (int i = 0; i < 8; i++) a &= m[i];
  return a == -1;
#endif
}

/* Lanes where a or b is NaN. */
XENT_AI v8i vunord(v8f a, v8f b) {
#ifdef XENT_SIMD_AVX2
  return (v8i)_mm256_cmp_ps((__m256)a, (__m256)b, _CMP_UNORD_Q);
#else
  return vne(a, a) | vne(b, b);
#endif
}

/* Lanes [0, n) all ones, the rest zero. */
XENT_AI v8i vlanes_below(int n) {
  const v8i idx = {0, 1, 2, 3, 4, 5, 6, 7};
  return vlti(idx, vsplati(n));
}

/* ------------------------------------------------------------------------ */
/* bf16 and fp16 conversion                                                  */
/* ------------------------------------------------------------------------ */

XENT_AI v8f bf16x8_to_f32(const void *p) {
#ifdef XENT_SIMD_AVX2
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  return (v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
#else
  v8h h;
  memcpy(&h, p, sizeof h);
  return (v8f)(__builtin_convertvector(h, v8u) << 16);
#endif
}

/* Round to nearest even; NaN stays NaN (quietened). */
XENT_AI v8u f32_to_bf16_bits(v8f v) {
  v8u u = (v8u)v;
  v8u hi = u >> 16;
  v8u r = (u + 0x7fffu + (hi & 1u)) >> 16;
  return (v8u)vsel(vunord(v, v), (v8f)(hi | 0x40u), (v8f)r);
}

XENT_AI void f32_to_bf16x8(void *p, v8f v) {
  v8u r = f32_to_bf16_bits(v);
#ifdef XENT_SIMD_AVX2
  __m256i pk = _mm256_packus_epi32((__m256i)r, (__m256i)r);
  __m128i lo = _mm256_castsi256_si128(_mm256_permute4x64_epi64(pk, 0x08));
  _mm_storeu_si128((__m128i *)p, lo);
#else
  v8h h = __builtin_convertvector(r, v8h);
  memcpy(p, &h, sizeof h);
#endif
}

/* Round to nearest even, for values whose NaNs (if any) are default NaNs
 * of arithmetic (only the quiet bit set): those stay NaN without the
 * special case. Any other NaN may come out as inf or -0. */
XENT_AI v8u f32_to_bf16_bits_arith(v8f v) {
  v8u u = (v8u)v;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* Two vectors at once: 16 bf16 values, one 32-byte store. arith: the
 * values come from arithmetic (see f32_to_bf16_bits_arith). */
XENT_AI void f32_to_bf16x16(void *p, v8f a, v8f b, const int arith) {
#ifdef XENT_SIMD_AVX2
  v8u ra = arith ? f32_to_bf16_bits_arith(a) : f32_to_bf16_bits(a);
  v8u rb = arith ? f32_to_bf16_bits_arith(b) : f32_to_bf16_bits(b);
  __m256i pk = _mm256_packus_epi32((__m256i)ra, (__m256i)rb);
  pk = _mm256_permute4x64_epi64(pk, 0xD8);
  _mm256_storeu_si256((__m256i *)p, pk);
#else
  (void)arith; /* the general conversion gives the same bits */
  f32_to_bf16x8(p, a);
  f32_to_bf16x8((char *)p + 16, b);
#endif
}

/* 16 bf16 values as two vectors, the even-indexed elements and the odd
 * ones: half the work of bf16x8_to_f32 twice, for passes that do not care
 * about the order (or undo it with f32_to_bf16x16_eo). Little-endian. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define XENT_SIMD_BF16_EO 1
#else
#define XENT_SIMD_BF16_EO 0
#endif

XENT_AI void bf16x16_to_f32_eo(const void *p, v8f *even, v8f *odd) {
  v8u w;
  memcpy(&w, p, sizeof w);
  *even = (v8f)(w << 16);
  *odd = (v8f)(w & 0xffff0000u);
}

/* The inverse: even- and odd-indexed values to 16 bf16, rounded to nearest
 * even, for values from arithmetic (see f32_to_bf16_bits_arith). */
XENT_AI void f32_to_bf16x16_eo(void *p, v8f even, v8f odd) {
  v8u e = f32_to_bf16_bits_arith(even);
  v8u o = (v8u)odd;
  o = (o + 0x7fffu + ((o >> 16) & 1u)) & 0xffff0000u;
  v8u w = e | o;
  memcpy(p, &w, sizeof w);
}

/* fp16 -> fp32, exact for every input (normals, subnormals, inf, NaN) and
 * independent of the floating-point environment (no denormal arithmetic). */
XENT_AI v8f f16x8_to_f32(const void *p) {
#ifdef XENT_SIMD_F16C
  return (v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
  v8h h;
  memcpy(&h, p, sizeof h);
  v8u x = __builtin_convertvector(h, v8u);
  v8u sign = (x & 0x8000u) << 16;
  v8i em = (v8i)(x & 0x7fffu);
  v8i normal = (v8i)((v8u)(em << 13) + (112u << 23));
  v8i special = (em << 13) | 0x7f800000;
  v8f sub = __builtin_convertvector(em, v8f) * vsplat(0x1p-24f);
  v8i is_sub = vlti(em, vsplati(0x0400)), is_special = ~vlti(em, vsplati(0x7c00));
  v8i mag = (is_sub & (v8i)sub) | (is_special & special) | (~(is_sub | is_special) & normal);
  return (v8f)((v8u)mag | sign);
#endif
}

/* fp32 -> fp16 bits, round to nearest even; overflow to inf, NaN stays NaN. */
XENT_AI v8u f32_to_f16_bits(v8f v) {
  v8u u = (v8u)v;
  v8u sign = (u >> 16) & 0x8000u;
  v8i a = (v8i)(u & 0x7fffffffu);
  /* too large (inf above 65520 after rounding) and NaN */
  v8i big = ~vlti(a, vsplati(0x47800000));
  v8i nan = vgti(a, vsplati(0x7f800000));
  v8i rbig = (nan & vsplati(0x7e00)) | (~nan & vsplati(0x7c00));
  /* subnormal results: an fp32 add of 0.5 does the rounding */
  v8i small = vlti(a, vsplati(0x38800000));
  v8i rsmall = (v8i)((v8u)((v8f)a + vsplat(0.5f)) - 0x3f000000u);
  /* normal results */
  v8u au = (v8u)a;
  v8u rn = (au + (((uint32_t)(15 - 127) << 23) + 0xfffu) + ((au >> 13) & 1u)) >> 13;
  v8i rnorm = (v8i)rn;
  v8i r = (big & rbig) | (small & rsmall) | (~(big | small) & rnorm);
  return (v8u)r | sign;
}

XENT_AI void f32_to_f16x8(void *p, v8f v) {
#ifdef XENT_SIMD_F16C
  _mm_storeu_si128((__m128i *)p,
                   _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
  v8h h = __builtin_convertvector(f32_to_f16_bits(v), v8h);
  memcpy(p, &h, sizeof h);
#endif
}

/* Load / store 8 elements of type dt at p (element pointer, any natural
 * alignment). dt is a compile-time constant at every call site. */
XENT_AI v8f vload(const void *p, const int dt) {
  if (dt == DT_BF16) return bf16x8_to_f32(p);
  if (dt == DT_F16) return f16x8_to_f32(p);
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}

XENT_AI void vstore(void *p, v8f v, const int dt) {
  if (dt == DT_BF16) f32_to_bf16x8(p, v);
  else if (dt == DT_F16) f32_to_f16x8(p, v);
  else memcpy(p, &v, sizeof v);
}

/* The first n < 8 elements; the other lanes are 0. */
XENT_AI v8f vload_part(const void *p, int n, const int dt) {
  unsigned char buf[32] __attribute__((aligned(32))) = {0};
  memcpy(buf, p, (size_t)n * (dt == DT_F32 ? 4u : 2u));
  return vload(buf, dt);
}

XENT_AI void vstore_part(void *p, v8f v, int n, const int dt) {
  unsigned char buf[32] __attribute__((aligned(32)));
  vstore(buf, v, dt);
  memcpy(p, buf, (size_t)n * (dt == DT_F32 ? 4u : 2u));
}

/* ------------------------------------------------------------------------ */
/* Scalar conversions (single elements: a target, a shard's column)          */
/* ------------------------------------------------------------------------ */

XENT_AI float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

XENT_AI uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

XENT_AI float load_one(const void *row, int64_t j, int dt) {
  if (dt == DT_F32) return ((const float *)row)[j];
  uint16_t h = ((const uint16_t *)row)[j];
  if (dt == DT_BF16) return bits_f32((uint32_t)h << 16);
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
  float mag;
  if (em >= 0x7c00u) mag = bits_f32((em << 13) | 0x7f800000u);
  else if (em >= 0x0400u) mag = bits_f32((em << 13) + (112u << 23));
  else mag = (float)em * 0x1p-24f;
  return bits_f32(f32_bits(mag) | sign);
}

XENT_AI void store_one(void *row, int64_t j, float v, int dt) {
  if (dt == DT_F32) {
    ((float *)row)[j] = v;
    return;
  }
  /* Through the vector conversion, so both paths round identically. */
  uint16_t buf[8];
  if (dt == DT_BF16) f32_to_bf16x8(buf, vsplat(v));
  else f32_to_f16x8(buf, vsplat(v));
  ((uint16_t *)row)[j] = buf[0];
}

/* ------------------------------------------------------------------------ */
/* exp and tanh                                                              */
/* ------------------------------------------------------------------------ */

/* e^x for x <= 0, within 2 ulp: the softmax numerators. Arguments below
 * ln(FLT_MIN) (and -inf) give 0, NaN gives NaN. (Up to 88 it still works;
 * above that the result is not meaningful.) */
XENT_AI v8f vexp(v8f x) {
  const v8f lo = vsplat(-87.33654475f);
  const v8f xc = vmax(lo, x); /* NaN stays NaN (second operand) */
  const v8f magic = vsplat(0x1.8p23f);
  const v8f t = vfma(xc, vsplat(1.44269504088896341f), magic);
  const v8f n = t - magic;            /* round(x / ln2) */
  const v8u ni = (v8u)t << 23;        /* n in the exponent field (t's low bits hold n) */
  v8f r = vfma(n, vsplat(-0.693145751953125f), xc); /* ln2 in two parts */
  r = vfma(n, vsplat(-1.428606765330187e-06f), r);
  /* Degree-5 minimax fit of e^r on |r| <= ln2 / 2 (relative error 9.2e-8). */
  v8f p = vsplat(8.290314674901e-03f);
  p = vfma(p, r, vsplat(4.189792930734e-02f));
  p = vfma(p, r, vsplat(1.666763619541e-01f));
  p = vfma(p, r, vsplat(4.999914953060e-01f));
  p = vfma(p, r, vsplat(9.999997071893e-01f));
  p = vfma(p, r, vsplat(1.0f));
  const v8f y = p * (v8f)(ni + (127u << 23)); /* times 2^n, n in [-126, 127] */
  return (v8f)(~vlt(x, lo) & (v8i)y);
}

/* 2^t for t <= 127 that is not NaN, within 2 ulp; t < -126 (and -inf)
 * gives 0. Cheaper than vexp: the caller folds the scale by log2(e) into
 * its own fma, there is no clamp, and 2^n goes straight into the exponent
 * field. NaN arguments give unspecified results: callers rule them out. */
XENT_AI v8f vexp2_nonan(v8f t) {
  const v8f magic = vsplat(0x1.8p23f);
  const v8f tm = t + magic;       /* round(t) in the low mantissa bits */
  const v8f n = tm - magic;
  const v8f f = t - n;            /* exact, in [-1/2, 1/2] */
  const v8u ni = (v8u)tm << 23;   /* n in the exponent field */
  /* Degree-5 minimax fit of 2^f on |f| <= 1/2 (relative error 9.2e-8). */
  v8f p = vsplat(1.326472712559e-03f);
  p = vfma(p, f, vsplat(9.671512641227e-03f));
  p = vfma(p, f, vsplat(5.550733743479e-02f));
  p = vfma(p, f, vsplat(2.402224208534e-01f));
  p = vfma(p, f, vsplat(6.931469775990e-01f));
  p = vfma(p, f, vsplat(1.0f));
  /* t >= -126 means n >= -126 and f >= 0 when n = -126: the result is
   * normal and adding n to p's exponent field is exact. */
  const v8f y = (v8f)((v8u)p + ni);
  return (v8f)(~vlt(t, vsplat(-126.0f)) & (v8i)y);
}

/* tanh(u), and 1 - tanh(u)^2 computed without cancellation. Within 2 ulp
 * (1 - tanh^2 within 3); NaN for NaN; +-1 and 0 for +-inf. */
XENT_AI void vtanh(v8f u, v8f *t_out, v8f *d_out) {
  const v8i sign = (v8i)u & vsplati((int32_t)0x80000000u);
  const v8f a = (v8f)((v8i)u & vsplati(0x7fffffff));
  /* |u| < 0.55: an odd minimax polynomial (relative error 1e-9). */
  const v8f u2 = a * a;
  v8f q = vsplat(-6.274263809719e-03f);
  q = vfma(q, u2, vsplat(2.107169729305e-02f));
  q = vfma(q, u2, vsplat(-5.385231465904e-02f));
  q = vfma(q, u2, vsplat(1.333258618766e-01f));
  q = vfma(q, u2, vsplat(-3.333331756128e-01f));
  const v8f ts = vfma(q * u2, a, a);
  const v8f fs = vfma(-ts, ts, vsplat(1.0f));
  const v8i small = vlt(a, vsplat(0.55f));
  if (vall(small)) { /* the common case for logits well inside the cap */
    *t_out = (v8f)((v8i)ts | sign);
    *d_out = fs;
    return;
  }
  /* |u| >= 0.55: tanh = 1 - d, d = 2 q / (1 + q) with q = e^{-2|u|};
   * 1 - tanh^2 = d (2 - d) */
  const v8f e2 = vexp(-(a + a));
  const v8f d = (e2 + e2) / (e2 + vsplat(1.0f));
  const v8f tb = vsplat(1.0f) - d;
  const v8f fb = d * (vsplat(2.0f) - d);
  *t_out = (v8f)((v8i)vsel(small, ts, tb) | sign);
  *d_out = vsel(small, fs, fb);
}

#endif
