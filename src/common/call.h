/*
 * call.h - a call as the API layer (src/api) hands it to a backend
 * (src/cpu, src/cuda): every argument the host can see already checked, the
 * backend and the device resolved, row_stride normalised (never 0). Nothing
 * here is public.
 *
 * A backend may assume its call is valid except for what the API layer
 * cannot see from the host: the CUDA backend checks targets and weights on
 * the device (xent_options.target_check). The CPU backend gets them already
 * checked.
 */
#ifndef XENT_COMMON_CALL_H
#define XENT_COMMON_CALL_H

#include "xent.h"
#include "xent_experimental.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xent_call {
  xent_input in;        /* row_stride >= vocab                                       */
  xent_options opt;
  xent_output out;
  xent_exec ex;         /* backend is XENT_BACKEND_CPU or XENT_BACKEND_CUDA          */
  int write_grad;       /* 1: xent_forward_grad, 0: xent_forward                     */
  xent_experimental exp; /* the calling thread's experimental settings               */
} xent_call;

typedef struct xent_scale_call {
  void *grad;
  xent_dtype dtype;
  int64_t rows, vocab, row_stride;  /* row_stride >= vocab                          */
  const float *grad_output;         /* NULL: use host_scale                         */
  int64_t grad_output_count;        /* 1 or rows when grad_output is set            */
  float host_scale;                 /* used when grad_output is NULL; never 1.0     */
  xent_exec ex;
  xent_experimental exp;
  float *applied;                   /* xent_backward_rescale: the factor applied so
                                       far (grad_output_count values); NULL else    */
} xent_scale_call;

/* A vocabulary-parallel call (xent_vp_stats, xent_vp_forward): `c` is the
 * shard as an ordinary call (c.in.vocab its width, c.in.weights all V
 * weights), with the global V and the shard's first column beside it. */
typedef struct xent_vp_call {
  xent_call c;
  int64_t vocab;          /* the global V                                        */
  int64_t offset;         /* the shard's first column                            */
  int record;             /* floats per record (4 or 8)                          */
  float *records;         /* xent_vp_stats: rows x record floats                 */
  const float *gathered;  /* xent_vp_forward: ranks x rows x record floats       */
  int ranks;
} xent_vp_call;

#ifdef __cplusplus
}
#endif
#endif
