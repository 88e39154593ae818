/*
 * threads.c - the CPU backend's default thread count.
 */
#include "cpu/threads.h"

#ifndef XENT_CPU_DISPATCH
/* A build for its own machine: one set of kernels (dispatch.c otherwise). */
int xent_cpu_level(void) { return 0; }
#endif

int xent_cpu_default_threads(void) {
#ifdef _OPENMP
  int n = omp_get_max_threads();
  return n > 0 ? n : 1;
#else
  return 1;
#endif
}
