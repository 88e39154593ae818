/*
 * ce.h - the CPU cross-entropy over rows of logits, in three steps that
 * both the loss over logits (forward.c) and the fused linear loss
 * (linear.c, a chunk of rows at a time) use:
 *   xent_cpu_ce_init     constants, N and W from the targets of all rows
 *   xent_cpu_ce_rows     the rows of one call (or chunk): results per row,
 *                        the gradient over the logits when asked for
 *   xent_cpu_ce_outputs  the reduced or per-row outputs from the results
 */
#ifndef XENT_CPU_CE_H
#define XENT_CPU_CE_H

#include <stdint.h>

#include "common/call.h"
#include "common/rowmath.h"
#include "cpu/isa.h"

typedef struct xent_cpu_row {
  float loss; /* loss terms before any reduction scale (z excluded) */
  float z;
  float lse;
  int32_t correct;
  int64_t pred;
} xent_cpu_row;

typedef struct xent_cpu_ce {
  const xent_call *c; /* the rows xent_cpu_ce_rows covers                  */
  xent_consts k;
  float scale_loss, scale_z;
  float cap, inv_cap;
  int mode;      /* 0: no sums, 1: sum x, 2: sum x and sum w x             */
  int want_pred; /* predicted or token_accuracy requested                  */
  int prefetch;  /* prefetch the next row during pass 2                    */
  int64_t n_valid;
  double w_valid;
  /* the fused linear loss: */
  float grad_scale;            /* multiplies every gradient (1)            */
  const float *row_grad_scale; /* per row of c, multiplies its gradient    */
  int token_scaling;           /* row loss, z and gradient times p_y       */
} xent_cpu_ce;

/* Row r's target as int64. */
static inline int64_t xent_cpu_target(const xent_call *c, int64_t r) {
  return c->in.target_type == XENT_INT32 ? (int64_t)((const int32_t *)c->in.targets)[r]
                                         : ((const int64_t *)c->in.targets)[r];
}

/* Everything fixed before any row, from c (all rows' targets). */
void xent_cpu_ce_init(xent_cpu_ce *f, const xent_call *c);

/* Every row of f->c, results to res[0 .. rows). */
xent_status xent_cpu_ce_rows(const xent_cpu_ce *f, xent_cpu_row *res);

/* The outputs of c from the results of all its rows. */
void xent_cpu_ce_outputs(const xent_cpu_ce *f, const xent_call *c, const xent_cpu_row *res);

/* vp.c: a shard's rows from the gathered records of v (its logits, targets
 * and options in v->c): each row's results into res and, with
 * v->c.write_grad, its gradient over the shard in place, times f's factors
 * (grad_scale, row_grad_scale, token_scaling); f is of the whole vocabulary. */
void xent_cpu_vp_rows(const xent_vp_call *v, const xent_cpu_ce *f, xent_cpu_row *res);

#endif
