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
#include <string.h>

#include "common/workspace.h"
#include "xent.h"
#include "xent_experimental.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA scratch area of a call, in this order, each part 256-byte
 * aligned:
 *   ce       the cross-entropy workspace over all rows (workspace.h)
 *   logits   one piece of logits in the input's dtype: chunk x V (rows
 *            schedule) or rows x slab (vocab); its gradient is written over it
 *   lt       cuBLASLt's workspace: lt_dx_bytes, of which the logits' and dW's
 *            products take the first lt_bytes
 *   bias     fp32 sums of the bias gradient (V floats), when asked for
 *   weight   the fp32 accumulator of XENT_ACCUM_FP32 (V x H floats), rows
 *            schedule, when grad_weight is not fp32 already
 *   records  vocab schedule: a record per row and slab (slabs x rows x record
 *            floats, the vocabulary-parallel layout with the slabs as ranks)
 *   hidden   vocab schedule: the fp32 accumulator of XENT_ACCUM_FP32 (rows x H
 *            floats), when grad_hidden is not fp32 already */
typedef struct xent_linear_plan {
  int by_vocab;         /* 1: the vocab schedule (xent.h)                        */
  int64_t chunk;        /* rows per piece: rows schedule >= 1; vocab: all rows;
                           0 for rows == 0                                       */
  int64_t slab;         /* columns per piece: V (rows schedule) or the slab      */
  int64_t slabs;        /* pieces of the vocabulary: 1 (rows schedule) or more   */
  int64_t chunk_stride; /* elements between the piece's rows: its columns rounded
                           up to 16 bytes, for vector loads and cuBLASLt's TMA   */
  int record;           /* floats per record (vocab schedule)                    */
  size_t ce, logits, lt, bias, weight, records, hidden; /* offsets               */
  size_t lt_bytes;      /* cuBLASLt's workspace for the logits' and dW's products */
  size_t lt_dx_bytes;   /* for dX's: lt_bytes, or more where it splits k (the
                           part's size)                                          */
  size_t total;         /* bytes                                                 */
} xent_linear_plan;

/* What the plan depends on. */
typedef struct xent_linear_facts {
  int64_t rows, vocab, hidden;
  size_t elem_bytes;      /* of the input's dtype                                 */
  size_t weight_grad;     /* bytes of dW's element, 0 when no dW is asked for     */
  size_t hidden_grad;     /* bytes of dX's element, 0 when no dX is asked for     */
  int bias_grad;          /* db is asked for                                      */
  int accum_fp32;         /* XENT_ACCUM_FP32                                      */
  int record;             /* floats per vocabulary-parallel record                */
  double flop_per_byte;   /* the backend's GEMM rate over its memory bandwidth,
                             for XENT_SCHEDULE_AUTO; 0: auto takes rows          */
  int dx_split;           /* the backend's dX product may split k = V this many
                             ways over a small chunk, in fp32 partials (the CUDA
                             backend's XENT_LINEAR_CUDA_DX_SPLIT); 0: never      */
} xent_linear_facts;

/* The CUDA backend's flop_per_byte: the rate the vocab schedule's extra
 * logits product reaches among its slabs' products on an H200 (about 380
 * TFLOP/s, not the 690 of one large GEMM) over the copy bandwidth (4.2
 * TB/s), both measured (bench/NOTES.md, v30). */
#define XENT_LINEAR_CUDA_FLOP_PER_BYTE 90.0

/* dX's product over a chunk, G_c W (chunk x V times V x H), has k = V and an
 * output of chunk x H: at the default budget a chunk of 488 rows and H = 2304
 * make 36 tiles of 128 x 256 for 132 SMs, and cuBLASLt then runs it at 410
 * TFLOP/s, 600 once it may split k into fp32 partials (its heuristic takes
 * 7 or 8 ways, given the room; bench/NOTES.md, v32). The room, chunk x H x 4
 * bytes a split, comes out of the chunk's rows, so it is reserved only where
 * the output is that small and the room a small share of a logits row. */
#define XENT_LINEAR_CUDA_DX_SPLIT 8
#define XENT_LINEAR_SPLIT_TILES 40
#define XENT_LINEAR_SPLIT_SHARE 6 /* the room at most 1/6 of a logits row */

typedef struct xent_linear_call {
  xent_linear_input in;  /* strides normalised (never 0)                       */
  xent_options opt;
  xent_linear_options lo;
  xent_output out;
  xent_linear_grads g;   /* strides normalised; all NULL for a forward         */
  int backward;          /* some gradient is asked for                         */
  xent_exec ex;          /* backend resolved                                   */
  xent_experimental exp; /* the calling thread's settings (the CUDA plan's
                            compute capability; the rest stay the defaults)  */
  xent_linear_plan plan;
} xent_linear_call;

#define XENT_LINEAR_MIN_CHUNK 64
#define XENT_LINEAR_MIN_SLAB 256
#define XENT_LINEAR_LT_BYTES ((size_t)4 << 20)

static inline size_t xent_linear_align(size_t n) { return (n + 255) & ~(size_t)255; }

static inline int64_t xent_linear_round8(int64_t n) { return (n + 7) / 8 * 8; }

/* Pieces of equal size, at most `fit` each, in multiples of `step` past 64:
 * the size of each. */
static inline int64_t xent_linear_even(int64_t total, int64_t fit, int64_t step) {
  if (fit < 1 || fit >= total) return fit < 1 ? fit : total;
  const int64_t n = (total + fit - 1) / fit;
  int64_t even = (total + n - 1) / n;
  if (even > 64) even = (even + step - 1) / step * step;
  return even <= fit ? even : fit;
}

/* The rows schedule: the chunk's rows. Returns -1 when an explicit budget
 * cannot hold one row. */
static inline int64_t xent_linear_rows_chunk(const xent_linear_facts *f,
                                             const xent_linear_options *lo, size_t row_bytes,
                                             size_t fixed, size_t budget, int explicit_budget) {
  int64_t chunk = lo->chunk_rows;
  if (chunk > 0) return chunk > f->rows ? f->rows : chunk;
  int64_t fit = budget > fixed ? (int64_t)((budget - fixed) / row_bytes) : 0;
  if (explicit_budget && fit < 1) return -1;
  if (!explicit_budget && fit < XENT_LINEAR_MIN_CHUNK) fit = XENT_LINEAR_MIN_CHUNK;
  if (fit > f->rows) fit = f->rows;
  return xent_linear_even(f->rows, fit, 8);
}

/* The vocab schedule: the slab's columns (a multiple of 8), or 0 when the
 * budget cannot hold a slab of XENT_LINEAR_MIN_SLAB columns (or V) beside
 * the slabs' records (with the default budget: that least slab). */
static inline int64_t xent_linear_vocab_slab(const xent_linear_facts *f, size_t fixed,
                                             size_t budget, int explicit_budget) {
  const int64_t V = f->vocab, rows = f->rows;
  const size_t col = (size_t)rows * f->elem_bytes;         /* a column of the slab  */
  const size_t rec = (size_t)rows * (size_t)f->record * 4; /* a slab's records      */
  const int64_t least = xent_linear_round8(V < XENT_LINEAR_MIN_SLAB ? V : XENT_LINEAR_MIN_SLAB);
  const size_t avail = budget > fixed ? budget - fixed : 0;
  /* the fewest slabs whose width and records fit: the width falls as 1/n,
   * the records grow as n */
  const double n0 = (double)V * (double)col / (double)(avail > 0 ? avail : 1);
  int64_t n = n0 < 1.0 ? 1 : n0 >= (double)V ? V : (int64_t)n0; /* more slabs than columns
                                                                    fit nothing */
  for (;; n++) {
    const int64_t w = xent_linear_round8((V + n - 1) / n);
    if (w < least) break;
    if ((double)w * (double)col + (double)n * (double)rec + 256.0 * (double)(n + 2) <=
        (double)avail)
      return w;
    if ((double)n * (double)rec >= (double)avail) break;
  }
  if (explicit_budget) return 0;
  return least; /* the default budget of a small call: the least slab, as rows take 64 */
}

/* The room per row for dX's split product, or 0 where it is not reserved:
 * a 16-bit call with dX whose chunk's output has few tiles and a vocabulary
 * long against H (XENT_LINEAR_CUDA_DX_SPLIT). */
static inline size_t xent_linear_split_room(const xent_linear_facts *f, int64_t chunk) {
  if (f->dx_split < 2 || !f->hidden_grad || f->elem_bytes != 2 || chunk < 1) return 0;
  const int64_t tiles = (chunk + 127) / 128 * ((f->hidden + 255) / 256);
  const size_t room = (size_t)f->hidden * 4 * (size_t)f->dx_split;
  if (tiles > XENT_LINEAR_SPLIT_TILES ||
      room * XENT_LINEAR_SPLIT_SHARE > (size_t)f->vocab * f->elem_bytes)
    return 0;
  return room;
}

/* A piece's fixed cost (its launches and their tails, about 4 us), in bytes
 * of traffic at the copy bandwidth: what decides for small calls. */
#define XENT_LINEAR_PIECE_BYTES (16.0 * 1048576.0)

/* The shares of the rows schedule's weight traffic a chunk does not hide
 * under its products: W's reads (by the logits' and dX's products, k = H
 * and V) and dW's read and write (by a product of k = the chunk's rows,
 * which hides less), as measured on an H200 over BT = 1024 ... 8192 at
 * H = 4096, V = 128256 with and without dX and dW (bench/NOTES.md, v30
 * and v31). */
#define XENT_LINEAR_W_EXPOSED 0.55
#define XENT_LINEAR_DW_EXPOSED 0.83

/* XENT_SCHEDULE_AUTO's choice between a rows plan of `chunks` chunks and a
 * vocab plan of `slabs` slabs, by what each adds to the three products of
 * the step, in bytes of memory traffic. Rows: per chunk W is read by the
 * logits' product and, when dX is asked, by dX's, and dW read and written
 * (in its accumulator's dtype; the first chunk only writes), of which
 * the shares above show. Vocab: the logits' product a second time
 * (2 BT V H flops, flop_per_byte to a byte), dX (when asked) read and
 * written once per slab after the first, two pieces a slab. A frozen head
 * (no dW) pays rows only W's reads, so vocab wins there at smaller BT. */
static inline int xent_linear_auto_vocab(const xent_linear_facts *f, int64_t chunks,
                                         int64_t slabs) {
  if (f->flop_per_byte <= 0 || chunks < 2) return 0;
  const double V = (double)f->vocab, H = (double)f->hidden, BT = (double)f->rows;
  const double w = (double)f->elem_bytes;
  const double dw = !f->weight_grad ? 0.0 : f->accum_fp32 ? 4.0 : (double)f->weight_grad;
  const double dx = !f->hidden_grad ? 0.0 : f->accum_fp32 ? 4.0 : (double)f->hidden_grad;
  const double w_reads = f->hidden_grad ? 2.0 : 1.0;
  const double rows_cost = XENT_LINEAR_W_EXPOSED * (double)chunks * w_reads * V * H * w +
                           XENT_LINEAR_DW_EXPOSED * (double)(chunks - 1) * 2.0 * V * H * dw +
                           (double)chunks * XENT_LINEAR_PIECE_BYTES;
  const double vocab_cost = 2.0 * BT * V * H / f->flop_per_byte +
                            (double)(slabs - 1) * 2.0 * BT * H * dx +
                            2.0 * (double)slabs * XENT_LINEAR_PIECE_BYTES;
  return vocab_cost < rows_cost;
}

/* The plan of a call whose arguments are valid: the pieces (both backends)
 * and the CUDA scratch's layout. Returns 0, or -1 when an explicit
 * memory_budget cannot hold one row (rows) or one slab (vocab). */
static inline int xent_linear_make_plan(const xent_linear_facts *f, const xent_linear_options *lo,
                                        xent_linear_plan *p) {
  const int64_t rows = f->rows, V = f->vocab, H = f->hidden;
  const size_t es = f->elem_bytes;
  const int64_t per16 = (int64_t)(16 / es);
  const int64_t stride = (V + per16 - 1) / per16 * per16;
  const size_t row_bytes = (size_t)stride * es;
  const size_t ce = xent_linear_align(xent_ws_bytes(rows));
  const size_t bias = f->bias_grad ? xent_linear_align((size_t)V * 4) : 0;
  size_t budget = lo->memory_budget;
  const int explicit_budget = budget > 0;
  if (!explicit_budget) budget = (size_t)rows * (size_t)V * es / 16;
  size_t lt = XENT_LINEAR_LT_BYTES;
  if (lo->chunk_rows <= 0 && budget / 4 < lt) lt = xent_linear_align(budget / 4);
  memset(p, 0, sizeof *p);
  p->record = f->record;

  const int64_t chunk = xent_linear_rows_chunk(f, lo, row_bytes, ce + bias + lt, budget,
                                               explicit_budget);

  /* The vocab schedule: where asked for, for a call with gradients. */
  const int backward = f->weight_grad || f->hidden_grad || f->bias_grad;
  const size_t hacc = f->accum_fp32 && f->hidden_grad && f->hidden_grad != 4
                          ? xent_linear_align((size_t)rows * (size_t)H * 4) : 0;
  int64_t slab = 0;
  if (lo->schedule != XENT_SCHEDULE_ROWS && rows > 0 && backward && lo->chunk_rows <= 0) {
    /* the fp32 accumulator is beside the budget, as the rows schedule's is */
    const int64_t s = xent_linear_vocab_slab(f, ce + bias + lt, budget, explicit_budget);
    if (lo->schedule == XENT_SCHEDULE_VOCAB) {
      if (s == 0) return -1; /* an explicit budget too small for a slab */
      slab = s;
    } else if (s > 0 && chunk > 0 &&
               xent_linear_auto_vocab(f, (rows + chunk - 1) / chunk, (V + s - 1) / s)) {
      slab = s;
    }
  }
  if (slab > 0) {
    p->by_vocab = 1;
    p->chunk = rows;
    p->slab = slab;
    p->slabs = (V + slab - 1) / slab;
    p->chunk_stride = slab;
    p->ce = 0;
    p->logits = ce;
    p->lt = p->logits + xent_linear_align((size_t)rows * (size_t)slab * es);
    p->lt_bytes = p->lt_dx_bytes = lt;
    p->bias = p->lt + lt;
    p->weight = p->bias + bias;
    p->records = p->weight;
    p->hidden = p->records + xent_linear_align((size_t)p->slabs * (size_t)rows *
                                               (size_t)f->record * 4);
    p->total = p->hidden + hacc;
    return 0;
  }
  if (chunk < 0) return -1; /* an explicit budget too small for a row */
  int64_t c = rows == 0 ? 0 : chunk;
  /* dX's split room: the chunk again with it in every row (an explicit
   * chunk_rows stays, the room beside it; a budget that then holds no row
   * goes without) */
  size_t lt_dx = lt;
  const size_t room = xent_linear_split_room(f, c);
  if (room) {
    const int64_t c2 = xent_linear_rows_chunk(f, lo, row_bytes + room, ce + bias + lt, budget,
                                              explicit_budget);
    if (c2 > 0) {
      c = c2;
      lt_dx = lt + xent_linear_align((size_t)c * room); /* c <= rows, as rows_chunk gives */
    }
  }
  const int wacc = f->accum_fp32 && f->weight_grad && f->weight_grad != 4;
  p->chunk = c > rows ? rows : c;
  p->slab = V;
  p->slabs = 1;
  p->chunk_stride = stride;
  p->ce = 0;
  p->logits = ce;
  p->lt = p->logits + xent_linear_align((size_t)p->chunk * row_bytes);
  p->lt_bytes = lt;
  p->lt_dx_bytes = lt_dx;
  p->bias = p->lt + lt_dx;
  p->weight = p->bias + bias;
  p->records = p->hidden = p->weight + (wacc ? xent_linear_align((size_t)V * (size_t)H * 4) : 0);
  p->total = p->records;
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
