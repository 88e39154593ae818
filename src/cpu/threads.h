/*
 * threads.h - how many OpenMP threads a CPU call uses.
 */
#ifndef XENT_CPU_THREADS_H
#define XENT_CPU_THREADS_H

#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/cpu.h"

/* Threads for `rows` rows of `work` elements in all. */
static inline int xent_cpu_pick_threads(int requested, int64_t rows, int64_t work) {
  int nt = requested > 0 ? requested : xent_cpu_default_threads();
  if ((int64_t)nt > rows) nt = (int)(rows > 0 ? rows : 1);
  if (work < ((int64_t)1 << 15)) nt = 1; /* not worth waking a team */
  return nt < 1 ? 1 : nt;
}

#endif
