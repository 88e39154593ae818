/*
 * linear_check.h - random fused linear cross-entropy problems, their
 * float64 reference, and the comparison of a call's results with it, for
 * the CPU and the CUDA tests of test_linear.c.
 *
 * The reference computes the logits Z = X W^T + b in double from the
 * inputs as stored (rounded to the dtype, as the GPU stores them, when the
 * case says so), the cross-entropy of reference.h over them, the token
 * scaling and the upstream gradient, then dX = G W, dW = G^T X and db =
 * sum_r G in double, with the magnitudes sum |G||W| etc. that bound the
 * rounding of each element:
 *
 *   |out - ref| <= rel * |ref| + mag_tol * magnitude + abs_floor
 *
 * rel is two roundings of the gradient's dtype; mag_tol covers the dtype's
 * rounding of G (GPU) and fp32 accumulation, times the number of chunks
 * when the weight gradient adds up in bf16/fp16.
 */
#ifndef XENT_TEST_LINEAR_CHECK_H
#define XENT_TEST_LINEAR_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "xent.h"

typedef struct xt_lin_case {
  xent_dtype dt;
  xent_index_type ttype;
  xent_reduction red;
  int64_t rows, H, V;
  int64_t hpad, wpad;          /* extra elements a row of hidden / weight     */
  int bias, weighted;
  double alpha, s;             /* label smoothing, z-loss                     */
  int softcap;
  double cap;
  int token_scaling;
  double ignore_frac;
  int64_t ignore_index;
  int64_t chunk_rows;
  size_t budget;
  xent_linear_schedule schedule;
  int backward;                /* xent_linear_forward_backward, else forward  */
  int dx, dw, db;              /* the gradients asked for                     */
  xent_dtype gx_dt, gw_dt, gb_dt;
  int64_t gxpad, gwpad;
  int accumulate;
  xent_accum accum;
  int go;                      /* upstream gradient: 0 NULL, 1 one value, 2 per row */
  int want_z, want_acc, want_pred, want_lse;
  int gpu;                     /* the logits are rounded to the dtype (GPU)   */
  int empty_zero;
  xent_target_check check;
  double sigma;                /* the logits' spread                          */
} xt_lin_case;

/* mean, bf16, int64, 10% ignored, all outputs, dX dW db, go scalar. */
xt_lin_case xt_lin_default(xent_dtype dt, int64_t rows, int64_t H, int64_t V);
void xt_lin_desc(const xt_lin_case *c, char *buf, size_t n);

typedef struct xt_lin {
  xt_lin_case c;
  int64_t hs, ws, gxs, gws;    /* strides (elements)                          */
  void *hidden, *weight, *bias;
  void *targets;
  int64_t *t64;
  float *cw;                   /* class weights or NULL                       */
  float *go;
  int64_t go_count;
  void *gx0, *gw0, *gb0;       /* the gradient buffers before the call        */
  size_t gx_bytes, gw_bytes, gb_bytes;
  double *Z;                   /* rows x V, the reference's logits            */
  double *dx, *dw, *db;        /* reference gradients (with the initial values
                                  when accumulating)                          */
  double *dxa, *dwa, *dba;     /* their magnitudes (with the initial values') */
  double *wcol, *xcol;         /* the l2 norms of W's and X's columns: how
                                  independent absolute errors of G's elements add
                                  up in dX and dW (fp16's subnormal G, GPU)       */
  xt_params params;
  xt_result res;               /* per-row values of the cross-entropy         */
  double *row_loss, *row_z;    /* per row, token scaling applied              */
  double loss, z, acc, loss_mag;
  int64_t n_valid, hits, near_ties;
  double lse_err;              /* tolerance of lse from the logits' rounding  */
  double p_err;                /* relative error of every p_j from the same:
                                  lse_err (max |Z| + 1)                       */
} xt_lin;

int xt_lin_make(xt_lin *p, const xt_lin_case *c, xt_rng *rng);
void xt_lin_free(xt_lin *p);

/* Result buffers on the host: outputs poisoned, gradients as gx0/gw0/gb0. */
typedef struct xt_lin_out {
  int64_t count;
  float *loss, *z, *acc, *lse;
  int64_t *pred;
  void *gx, *gw, *gb;
} xt_lin_out;

int xt_lin_out_make(const xt_lin *p, xt_lin_out *o);
void xt_lin_out_free(xt_lin_out *o);

/* The call's arguments over the given buffers (host or device copies). */
xent_linear_input xt_lin_input(const xt_lin *p, const void *hidden, const void *weight,
                               const void *bias, const void *targets, const float *cw);
xent_options xt_lin_options(const xt_lin *p);
xent_linear_options xt_lin_loptions(const xt_lin *p);
xent_output xt_lin_output(const xt_lin *p, float *loss, float *z, float *acc, float *lse,
                          int64_t *pred);
xent_linear_grads xt_lin_grads(const xt_lin *p, void *gx, void *gw, void *gb, const float *go);

/* Compare with the reference; nchunks: the row chunks the call used (dW adds
 * up over them), nslabs: the vocabulary's slabs (dX adds up over them).
 * Returns the number of problems found (printed with desc). */
long xt_lin_check(const xt_lin *p, const xt_lin_out *o, int64_t nchunks, int64_t nslabs,
                  const char *desc);

/* Every output and gradient buffer exactly as before the call. */
long xt_lin_check_untouched(const xt_lin *p, const xt_lin_out *o, const char *desc);

#endif
