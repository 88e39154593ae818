/*
 * blas.c - loading a CBLAS library and calling its sgemm (blas.h).
 */
#define _GNU_SOURCE
#include "cpu/blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* The CBLAS enumerations (cblas.h), by value. */
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                         const float *a, int lda, const float *b, int ldb, float beta, float *c,
                         int ldc);
typedef void (*threads_fn)(int n);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static sgemm_fn g_sgemm;
static threads_fn g_threads;
static char g_tried[512];

static void load_once(void) {
  const char *env = getenv("XENT_BLAS");
  const char *names[] = {env, "libopenblas.so.0", "libopenblas.so", "libblas.so.3",
                         "libcblas.so.3"};
  size_t used = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!names[i] || !names[i][0]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      sgemm_fn f = (sgemm_fn)dlsym(h, "cblas_sgemm");
      if (f) {
        g_sgemm = f;
        g_threads = (threads_fn)dlsym(h, "openblas_set_num_threads");
        return;
      }
      dlclose(h);
    }
    int n = snprintf(g_tried + used, sizeof g_tried - used, "%s%s", used ? ", " : "", names[i]);
    if (n > 0 && (size_t)n < sizeof g_tried - used) used += (size_t)n;
  }
}

/* The BLAS library's thread count is one setting for the whole process, and
 * its products' bits depend on it: a call sets it and holds it until the
 * call ends, so that no call sees another's (xent_blas_begin). */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

xent_status xent_blas_begin(int threads) {
  pthread_once(&g_once, load_once);
  if (!g_sgemm)
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "the fused linear loss on the CPU needs a CBLAS library (cblas_sgemm); "
                     "none could be loaded (tried %s): install OpenBLAS (libopenblas0) or set "
                     "XENT_BLAS to the library's file",
                     g_tried);
  pthread_mutex_lock(&g_lock);
  if (g_threads) g_threads(threads > 0 ? threads : 1);
  return XENT_OK;
}

void xent_blas_end(void) { pthread_mutex_unlock(&g_lock); }

void xent_blas_sgemm(const xent_sgemm *g) {
  g_sgemm(kRowMajor, g->trans_a ? kTrans : kNoTrans, g->trans_b ? kTrans : kNoTrans, (int)g->m,
          (int)g->n, (int)g->k, g->alpha, g->a, (int)g->lda, g->b, (int)g->ldb, g->beta, g->c,
          (int)g->ldc);
}
