/*
 * dispatch.c - the CPU backend's entry points in a portable build
 * (XENT_CPU_DISPATCH): the kernels are compiled once per x86-64 level
 * (isa.h), and each call goes to the set the CPU runs. The level is read
 * once; XENT_CPU_LEVEL (1, 3 or 4) in the environment caps it, so that the
 * tests run every set on one CPU.
 */
#include <pthread.h>
#include <stdlib.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "cpu/cpu.h"

#define XENT_CPU_SET(level)                                              \
  xent_status xent_cpu_forward_##level(const xent_call *c);             \
  xent_status xent_cpu_backward_##level(const xent_scale_call *c);      \
  xent_status xent_cpu_linear_##level(const xent_linear_call *c);       \
  xent_status xent_cpu_vp_stats_##level(const xent_vp_call *v);         \
  xent_status xent_cpu_vp_forward_##level(const xent_vp_call *v);
XENT_CPU_SET(base)
XENT_CPU_SET(v3)
XENT_CPU_SET(v4)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_level = 1;

/* The x86-64 level the CPU and the OS (which must save the vector
 * registers) run: 4 for what -march=x86-64-v4 lets the compiler use
 * (AVX-512 F, BW, CD, DQ, VL on top of 3), 3 for -march=x86-64-v3 (AVX,
 * AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE), else 1. Read from cpuid,
 * which every compiler of the build has. */
static int x86_64_level(void) {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 1;
  const unsigned need1 = (1u << 12) | (1u << 22) | (1u << 27) | (1u << 28) | (1u << 29);
  if ((c & need1) != need1) return 1; /* FMA, MOVBE, OSXSAVE, AVX, F16C */
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  if ((lo & 0x6u) != 0x6u) return 1; /* the OS saves the SSE and AVX state */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 1;
  const unsigned need7 = (1u << 3) | (1u << 5) | (1u << 8);
  if ((b & need7) != need7) return 1; /* BMI1, AVX2, BMI2 */
  const unsigned leaf7 = b;
  if (!__get_cpuid(0x80000001u, &a, &b, &c, &d) || !(c & (1u << 5))) return 1; /* LZCNT */
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
  if ((leaf7 & avx512) == avx512 && (lo & 0xe6u) == 0xe6u) return 4; /* and the ZMM state */
  return 3;
#else
  return 1;
#endif
}

static void pick_level(void) {
  const char *env = getenv("XENT_CPU_LEVEL");
  const int cap = env && *env ? atoi(env) : 4;
  const int level = x86_64_level();
  g_level = level < cap ? level : cap >= 4 ? 4 : cap >= 3 ? 3 : 1;
}

int xent_cpu_level(void) {
  pthread_once(&g_once, pick_level);
  return g_level;
}

#define XENT_CPU_DISPATCH_TO(name, type)                                          \
  xent_status name(type x) {                                                      \
    const int level = xent_cpu_level();                                           \
    return level == 4 ? name##_v4(x) : level == 3 ? name##_v3(x) : name##_base(x); \
  }
XENT_CPU_DISPATCH_TO(xent_cpu_forward, const xent_call *)
XENT_CPU_DISPATCH_TO(xent_cpu_backward, const xent_scale_call *)
XENT_CPU_DISPATCH_TO(xent_cpu_linear, const xent_linear_call *)
XENT_CPU_DISPATCH_TO(xent_cpu_vp_stats, const xent_vp_call *)
XENT_CPU_DISPATCH_TO(xent_cpu_vp_forward, const xent_vp_call *)
