/*
 * host.c - xent-bench's host memory (aligned allocations, a copy split over
 * threads, what the kernel says is available) and the CPU's name.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"

void *host_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  return aligned_alloc(64, rounded);
}

void par_memcpy(void *dst, const void *src, size_t n, int threads) {
#ifdef _OPENMP
  if (threads > 1 && n >= ((size_t)1 << 20)) {
#pragma omp parallel num_threads(threads)
    {
      size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
      size_t chunk = ((n + nt - 1) / nt + 4095) & ~(size_t)4095;
      size_t lo = t * chunk;
      if (lo < n) {
        size_t len = lo + chunk < n ? chunk : n - lo;
        memcpy((char *)dst + lo, (const char *)src + lo, len);
      }
    }
    return;
  }
#else
  (void)threads;
#endif
  memcpy(dst, src, n);
}

/* Bytes of memory the kernel says are available (MemAvailable), or 0. */
size_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kb = (size_t)v;
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

void cpu_model(char *out, size_t n) {
  snprintf(out, n, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, "\r\n");
        if (len >= n) len = n - 1;
        memcpy(out, p, len);
        out[len] = '\0';
      }
      break;
    }
  }
  fclose(f);
}
