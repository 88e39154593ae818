/*
 * linear.h - a fused linear cross-entropy call as the API layer hands it to
 * a backend, and its plan: the rows of a chunk and the layout of the CUDA
 * scratch area. The API layer computes the plan (xent_linear_workspace_size
 * reports it), so the caller's size and the backend's layout agree.
 */
#ifndef XENT_COMMON_LINEAR_H
#define XENT_COMMON_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "common/workspace.h"
#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA scratch area of a call, in this order, each part 256-byte
 * aligned:
 *   ce       the cross-entropy workspace over all rows (workspace.h)
 *   logits   one chunk of logits, chunk x V in the input's dtype; the
 *            chunk's gradient is written over it
 *   lt       cuBLASLt's workspace
 *   bias     fp32 sums of the bias gradient (V floats), when asked for
 *   weight   the fp32 accumulator of XENT_ACCUM_FP32 (V x H floats), when
 *            grad_weight is not fp32 already */
typedef struct xent_linear_plan {
  int64_t chunk;        /* rows per chunk, >= 1 (0 for rows == 0)            */
  int64_t chunk_stride; /* elements between the chunk's rows: V rounded up to
                           16 bytes, for vector loads and cuBLASLt's TMA     */
  size_t ce, logits, lt, bias, weight; /* offsets                            */
  size_t lt_bytes;
  size_t total;         /* bytes                                              */
} xent_linear_plan;

typedef struct xent_linear_call {
  xent_linear_input in;  /* strides normalised (never 0)                       */
  xent_options opt;
  xent_linear_options lo;
  xent_output out;
  xent_linear_grads g;   /* strides normalised; all NULL for a forward         */
  int backward;          /* some gradient is asked for                         */
  xent_exec ex;          /* backend resolved                                   */
  xent_linear_plan plan;
} xent_linear_call;

#define XENT_LINEAR_MIN_CHUNK 64
#define XENT_LINEAR_LT_BYTES ((size_t)4 << 20)

static inline size_t xent_linear_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* The plan of a call whose arguments are valid. Returns 0, or -1 when an
 * explicit memory_budget cannot hold one row. */
static inline int xent_linear_make_plan(int64_t rows, int64_t vocab, int64_t hidden,
                                        size_t elem_bytes, const xent_linear_options *lo,
                                        int bias_grad, int fp32_accumulator,
                                        xent_linear_plan *p) {
  const int64_t per16 = (int64_t)(16 / elem_bytes);
  const int64_t stride = (vocab + per16 - 1) / per16 * per16;
  const size_t row_bytes = (size_t)stride * elem_bytes;
  const size_t ce = xent_linear_align(xent_ws_bytes(rows));
  const size_t bias = bias_grad ? xent_linear_align((size_t)vocab * 4) : 0;
  int64_t chunk = lo->chunk_rows;
  size_t lt = XENT_LINEAR_LT_BYTES;
  if (chunk <= 0) {
    size_t budget = lo->memory_budget;
    const int explicit_budget = budget > 0;
    if (!explicit_budget) budget = (size_t)rows * (size_t)vocab * elem_bytes / 16;
    if (budget / 4 < lt) lt = xent_linear_align(budget / 4);
    const size_t fixed = ce + bias + lt;
    int64_t fit = budget > fixed ? (int64_t)((budget - fixed) / row_bytes) : 0;
    if (explicit_budget && fit < 1) return -1;
    if (!explicit_budget && fit < XENT_LINEAR_MIN_CHUNK) fit = XENT_LINEAR_MIN_CHUNK;
    if (fit > rows) fit = rows;
    /* Chunks of equal size (the last one no smaller than the others by
     * more than 8 rows), in multiples of 8 rows past 64. */
    if (fit >= 1 && fit < rows) {
      const int64_t n = (rows + fit - 1) / fit;
      int64_t even = (rows + n - 1) / n;
      if (even > 64) even = (even + 7) / 8 * 8;
      if (even <= fit) fit = even;
    }
    chunk = fit;
  } else if (chunk > rows) {
    chunk = rows;
  }
  if (rows == 0) chunk = 0;
  p->chunk = chunk;
  p->chunk_stride = stride;
  p->ce = 0;
  p->logits = ce;
  p->lt = p->logits + xent_linear_align((size_t)chunk * row_bytes);
  p->lt_bytes = lt;
  p->bias = p->lt + lt;
  p->weight = p->bias + bias;
  p->total = p->weight + (fp32_accumulator ? xent_linear_align((size_t)vocab * (size_t)hidden * 4) : 0);
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
