/*
 * threads.c - the CPU backend's default thread count.
 */
#include "cpu/threads.h"

int xent_cpu_default_threads(void) {
#ifdef _OPENMP
  int n = omp_get_max_threads();
  return n > 0 ? n : 1;
#else
  return 1;
#endif
}
