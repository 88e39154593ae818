/*
 * inputs.c - xent-bench's inputs: logits of about N(0, 2) from a
 * counter-based generator (the same values whatever the thread count) and
 * uniform targets.
 */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct rng {
  uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
  uint64_t sm = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&sm);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) { /* xoshiro256** */
  uint64_t *s = r->s;
  const uint64_t out = rotl64(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return out;
}

/* About N(0, 2): the sum of four 16-bit uniforms, scaled to a standard
 * deviation of 2 (range about +-6.9). One 64-bit draw per value. */
static inline float normalish(uint64_t r) {
  float acc = 0.0f;
  for (int k = 0; k < 4; k++) acc += ((float)((r >> (16 * k)) & 0xffffu) + 0.5f) * (1.0f / 65536.0f);
  return (acc - 2.0f) * 3.4641016f;
}

static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Finite values in the normal fp16 range only (the generator stays there). */
static inline uint16_t to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a < 0x38800000u) return (uint16_t)sign; /* below the normal range: 0 */
  a += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)((a >> 13) | sign);
}

#define FILL_BLOCK 4096 /* elements per independently seeded block */

/* Fill dst with elements [first, first + count) of the logits stream. The
 * result does not depend on the thread count. first is a multiple of
 * FILL_BLOCK. */
void fill_logits(void *dst, xent_dtype dt, size_t first, size_t count, uint64_t seed) {
  size_t nblocks = (count + FILL_BLOCK - 1) / FILL_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (long long b = 0; b < (long long)nblocks; b++) {
    rng r;
    rng_seed(&r, seed ^ (0xd1b54a32d192ed03ull * ((first / FILL_BLOCK) + (uint64_t)b + 1)));
    size_t lo = (size_t)b * FILL_BLOCK;
    size_t hi = lo + FILL_BLOCK < count ? lo + FILL_BLOCK : count;
    for (size_t i = lo; i < hi; i++) {
      float x = normalish(rng_next(&r));
      if (dt == XENT_FLOAT32) ((float *)dst)[i] = x;
      else if (dt == XENT_BFLOAT16) ((uint16_t *)dst)[i] = to_bf16(x);
      else ((uint16_t *)dst)[i] = to_f16(x);
    }
  }
}

void fill_targets(int64_t *t, int64_t bt, int64_t vocab, uint64_t seed) {
  rng r;
  rng_seed(&r, seed ^ 0x5851f42d4c957f2dull);
  for (int64_t i = 0; i < bt; i++) t[i] = (int64_t)(rng_next(&r) % (uint64_t)vocab);
}
