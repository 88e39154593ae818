/*
 * isa.h - the CPU kernels' entry points under the x86-64 level they were
 * compiled for.
 *
 * A portable build (XENT_CPU_DISPATCH, the wheel's) compiles the kernels
 * (forward.c, backward.c, linear.c, vp.c) once per level, each time with
 * XENT_CPU_ISA set to the level's suffix (_base: x86-64; _v3: AVX2, FMA and
 * F16C; _v4: AVX-512 too), so every function they share gets that suffix, and dispatch.c
 * calls the set the CPU runs best. A build for its own machine (XENT_NATIVE,
 * the default from source) compiles them once, unsuffixed.
 */
#ifndef XENT_CPU_ISA_H
#define XENT_CPU_ISA_H

#ifdef XENT_CPU_ISA
#define XENT_CPU_CAT2(a, b) a##b
#define XENT_CPU_CAT(a, b) XENT_CPU_CAT2(a, b)
#define XENT_CPU_LEVEL_NAME(f) XENT_CPU_CAT(f, XENT_CPU_ISA)
#define xent_cpu_forward XENT_CPU_LEVEL_NAME(xent_cpu_forward)
#define xent_cpu_backward XENT_CPU_LEVEL_NAME(xent_cpu_backward)
#define xent_cpu_linear XENT_CPU_LEVEL_NAME(xent_cpu_linear)
#define xent_cpu_vp_stats XENT_CPU_LEVEL_NAME(xent_cpu_vp_stats)
#define xent_cpu_vp_forward XENT_CPU_LEVEL_NAME(xent_cpu_vp_forward)
#define xent_cpu_ce_init XENT_CPU_LEVEL_NAME(xent_cpu_ce_init)
#define xent_cpu_ce_rows XENT_CPU_LEVEL_NAME(xent_cpu_ce_rows)
#define xent_cpu_ce_outputs XENT_CPU_LEVEL_NAME(xent_cpu_ce_outputs)
#define xent_cpu_vp_rows XENT_CPU_LEVEL_NAME(xent_cpu_vp_rows)
#endif

#endif
