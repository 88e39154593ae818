/*
 * experimental.c - the experimental settings, per thread: a call copies
 * them when it starts, so no thread sees another's and none needs a lock.
 */
#include "api/experimental.h"

#include "common/error.h"
#include "cuda/cuda.h"

static _Thread_local xent_experimental current = XENT_EXPERIMENTAL_INIT;

xent_experimental xent_experimental_current(void) { return current; }

static int in_range(int v, int lo, int hi) { return v >= lo && v <= hi; }

/* The ranges xent_experimental.h gives; what a path cannot run on a given
 * call is the CUDA backend's to say (src/cuda/plan.c). */
static xent_status check_launch(const xent_experimental_launch *l) {
  if (!in_range((int)l->path, XENT_EXPERIMENTAL_TABLE, XENT_EXPERIMENTAL_SEGMENT))
    return xent_fail(XENT_ERROR_BAD_ENUM, "forward.path %d is not a xent_experimental_path",
                     (int)l->path);
  if (l->path == XENT_EXPERIMENTAL_TABLE) {
    if (l->cluster || l->threads || l->vecs || l->slots || l->reuse || l->hold ||
        l->warp_split || l->l2_hint)
      return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                       "forward.path is XENT_EXPERIMENTAL_TABLE: its other fields must be 0");
    return XENT_OK;
  }
  if (!in_range(l->threads, 32, 1024) || l->threads % 32)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.threads is %d; it must be a multiple of 32 from 32 to 1024",
                     l->threads);
  if (!(l->cluster == 0 || l->cluster == 1 || l->cluster == 2 || l->cluster == 4 ||
        l->cluster == 8))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "forward.cluster is %d; it must be 0, 1, 2, 4 or 8",
                     l->cluster);
  if (!in_range(l->l2_hint, 0, 1))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "forward.l2_hint is %d; it must be 0 or 1",
                     l->l2_hint);
  const int staged = l->path == XENT_EXPERIMENTAL_STAGED;
  const int segment = l->path == XENT_EXPERIMENTAL_SEGMENT;
  const int warp = l->path == XENT_EXPERIMENTAL_WARP_ROW;
  if (l->cluster > 1 && !staged)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "forward.cluster > 1 needs the staged path");
  if ((staged || segment) ? !(l->vecs == 4 || l->vecs == 8) : l->vecs != 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.vecs is %d; it must be 4 or 8 for the staged and segment paths "
                     "and 0 otherwise",
                     l->vecs);
  if (staged ? !in_range(l->slots, 2, 16) : l->slots != 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.slots is %d; it must be 2 to 16 on the staged path and 0 otherwise",
                     l->slots);
  if (staged ? !in_range(l->reuse, 0, l->slots) : l->reuse != 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.reuse is %d; it must be 0 to slots on the staged path and 0 "
                     "otherwise",
                     l->reuse);
  if (staged ? !in_range(l->hold, 0, 2) || (l->hold && l->vecs != 4) : l->hold != 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.hold is %d; it must be 0 to 2 (with vecs 4) on the staged path and "
                     "0 otherwise",
                     l->hold);
  if (warp ? !(l->warp_split == 0 || l->warp_split == 1 || l->warp_split == 2 ||
               l->warp_split == 4 || l->warp_split == 8)
           : l->warp_split != 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.warp_split is %d; it must be 0, 1, 2, 4 or 8 on the warp-row path "
                     "and 0 otherwise",
                     l->warp_split);
  if (l->l2_hint && !(staged || l->path == XENT_EXPERIMENTAL_TWO_READ))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "forward.l2_hint applies to the two-read and staged paths only");
  return XENT_OK;
}

/* Unlike the other entry points, a successful set leaves xent_last_error()
 * alone: a test sets and restores settings around a failing call and then
 * reads that call's message. */
xent_status xent_experimental_set(const xent_experimental *settings) {
  if (!settings) {
    const xent_experimental defaults = XENT_EXPERIMENTAL_INIT;
    current = defaults;
    return XENT_OK;
  }
  xent_status st = check_launch(&settings->forward);
  if (st) return st;
  if (!in_range(settings->programmatic, 0, 2))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "programmatic is %d; it must be 0, 1 or 2",
                     settings->programmatic);
  if (!in_range(settings->verdict_copy, 0, 1))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "verdict_copy is %d; it must be 0 or 1",
                     settings->verdict_copy);
  if (!in_range(settings->backward_waves, -1, 1024))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "backward_waves is %d; it must be -1 to 1024",
                     settings->backward_waves);
  if (settings->plan_arch != 0 && !in_range(settings->plan_arch, 75, 129))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "plan_arch is %d; it must be 0 or a compute capability from 75 to 129",
                     settings->plan_arch);
  if (!in_range(settings->products, 0, 6))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "products is %d; it must be 0 to 6",
                     settings->products);
  current = *settings;
  return XENT_OK;
}

xent_experimental xent_experimental_get(void) { return current; }

const char *xent_experimental_last_launch(void) { return xent_cuda_last_launch(); }

const char *xent_experimental_last_backward(void) { return xent_cuda_last_backward(); }

const char *xent_experimental_last_product(void) { return xent_cuda_last_product(); }

static int is_16bit(xent_dtype t) { return t == XENT_BFLOAT16 || t == XENT_FLOAT16; }

xent_status xent_experimental_gemm_run(const xent_experimental_gemm *g) {
  if (!g) return xent_fail(XENT_ERROR_NULL_POINTER, "the product's description is NULL");
  if (!g->a || !g->b || !g->d)
    return xent_fail(XENT_ERROR_NULL_POINTER, "A, B and D must not be NULL");
  if (!in_range((int)g->engine, XENT_EXPERIMENTAL_GEMM_XENT, XENT_EXPERIMENTAL_GEMM_CUBLASLT_LOSS))
    return xent_fail(XENT_ERROR_BAD_ENUM, "engine %d is not a xent_experimental_gemm_engine",
                     (int)g->engine);
  if (g->m < 1 || g->n < 1 || g->k < 1)
    return xent_fail(XENT_ERROR_BAD_SHAPE, "m, n and k are %lld, %lld and %lld; each must be >= 1",
                     (long long)g->m, (long long)g->n, (long long)g->k);
  const int64_t arow = g->a_m_major ? g->m : g->k, brow = g->b_n_major ? g->n : g->k;
  if (g->lda < arow || g->ldb < brow || g->ldd < g->n)
    return xent_fail(XENT_ERROR_BAD_STRIDE,
                     "lda %lld, ldb %lld, ldd %lld: each must be at least its row's extent "
                     "(%lld, %lld, %lld)",
                     (long long)g->lda, (long long)g->ldb, (long long)g->ldd, (long long)arow,
                     (long long)brow, (long long)g->n);
  if (!is_16bit(g->dtype))
    return xent_fail(XENT_ERROR_BAD_ENUM, "dtype %d: A and B are bf16 or fp16", (int)g->dtype);
  if (g->d_dtype != g->dtype && g->d_dtype != XENT_FLOAT32)
    return xent_fail(XENT_ERROR_BAD_ENUM, "d_dtype %d: D is A's type or fp32", (int)g->d_dtype);
  if (!in_range(g->a_m_major, 0, 1) || !in_range(g->b_n_major, 0, 1) ||
      !in_range(g->accumulate, 0, 1) || !in_range(g->pingpong, 0, 1))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "a_m_major, b_n_major, accumulate and pingpong are 0 or 1");
  if (!in_range(g->tma_epilogue, 0, 2))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "tma_epilogue is %d; it must be 0, 1 or 2",
                     g->tma_epilogue);
  if (g->tile_n != 0 && g->tile_n != 128 && g->tile_n != 256)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "tile_n is %d; it must be 0, 128 or 256", g->tile_n);
  if (!in_range(g->cluster_m, 0, 2))
    return xent_fail(XENT_ERROR_BAD_ARGUMENT, "cluster_m is %d; it must be 0, 1 or 2",
                     g->cluster_m);
  if (g->stats && g->tile_n == 0)
    return xent_fail(XENT_ERROR_BAD_ARGUMENT,
                     "stats needs tile_n (128 or 256): its layout is by column tile");
  return xent_cuda_gemm(g);
}
