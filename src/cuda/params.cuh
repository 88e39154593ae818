/*
 * params.cuh - what the host hands the CUDA kernels: the workspace header
 * and the parameter block of each kind of kernel.
 */
#ifndef XENT_CUDA_PARAMS_CUH
#define XENT_CUDA_PARAMS_CUH

#include <stdint.h>

#include "common/rowmath.h"

namespace xent {

/* The device-side scratch header (the first 256 bytes of the workspace). */
struct ws_header {
  unsigned int ticket;            /* blocks of the count kernel that are done      */
  int pad0;
  unsigned long long bad_target;  /* rows - r for the first bad row r, 0 if none   */
  unsigned long long bad_weight;  /* V - j for the first non-finite weight j       */
  int n;                          /* non-ignored rows                               */
  float w;                        /* sum of w[y] over non-ignored rows              */
  float sum_w;                    /* sum of all class weights                       */
  float scale_loss;               /* 1/N, 1/W or 1                                  */
  float scale_z;                  /* 1/N or 1                                       */
  unsigned long long next_row;    /* fwd_staged: rows handed out so far             */
};

struct fwd_params {
  char *x;                 /* logits (gradient written here)                    */
  int64_t rows;
  int64_t stride_bytes;    /* between row starts                                */
  int vocab;
  int cluster;             /* fwd_staged: blocks per row (1: no cluster)          */
  int ring_slots;          /* fwd_staged: shared-memory chunks of ring_chunk_vecs */
  int ring_chunk_vecs;     /* fwd_staged: 16-byte vectors per bulk copy          */
  int ring_reuse;          /* fwd_staged with a gradient: a slice's last chunks
                              that pass 2 reads from shared memory (<= slots) */
  int ring_hold;           /* fwd_staged with a gradient: of the chunks pass 2 does
                              not reuse, the first ones it takes from registers
                              (capped by the kernel's own maximum)            */
  int l2_hint;             /* fwd_tworead with a gradient: pass 1 loads evict-last,
                              pass 2 evict-first (L2 policies, sm_80+);
                              fwd_staged: pass 1 evict-last, not normal      */
  unsigned long long *row_ticket; /* fwd_staged: the workspace's row counter (zero
                              before the launch)                               */
  const void *targets;
  int target64;
  int64_t ignore_index;
  const float *weights;    /* NULL: unweighted                                  */
  xent_consts k;           /* sum_w filled on the device when weighted          */
  int use_softcap;
  float softcap, inv_softcap;
  int write_grad;
  int need_argmax;
  int per_row_out;         /* reduction none: write loss/z/acc per row to out   */
  const ws_header *hdr;    /* scales and sum_w; NULL: scales 1                  */
  const ws_header *verdict; /* checked mode: the count kernel's verdict; with a
                              bad target or weight the kernel returns at once,
                              writing nothing (call_rejected); NULL: unchecked */
  int zero_if_rejected;    /* deferred mode with a gradient: a rejected call
                              clears the gradient instead (reject_rows)         */
  float *row_loss;         /* loss per row: out->loss (none) or workspace       */
  float *row_z;            /* z per row (may be NULL)                           */
  float *row_acc;          /* accuracy per row (may be NULL)                    */
  float *lse_out;          /* optional                                          */
  int64_t *pred_out;       /* optional                                          */
  float *seg_stats;        /* fwd_segment, rows of two segments: segment k of
                              row r leaves its max at seg_stats[2k * seg_pitch
                              + r] and its sum at [(2k + 1) * seg_pitch + r],
                              segment 0 the target's logit at [4 * seg_pitch
                              + r] (for fwd_segment_merge); NULL for rows of
                              one                                             */
  int64_t seg_pitch;
  /* the fused linear loss (linear.cu); NULL, NULL, 0 otherwise: */
  const float *grad_scale;     /* the upstream gradient (1 value), times every
                                  gradient coefficient                         */
  const float *row_grad_scale; /* reduction none: one per row, times the row's */
  int token_scaling;           /* row loss, z and gradient times p_y (every
                                  thread of a row loads x'_y then)             */
  int seg_count;           /* fwd_segment: segments a row, of seg_vecs vectors
                              (the last one of a row may hold fewer)          */
  int seg_vecs;
};

struct prep_params {
  const void *targets;
  int target64;
  int64_t rows;
  int vocab;
  int64_t ignore_index;
  const float *weights;
  int mean;                /* reduction mean                                    */
  ws_header *hdr;
  float *partials;         /* 3 floats per block                                */
  unsigned long long *host_verdict; /* checked mode: the last block writes
                              bad_target and bad_weight here (pinned host
                              memory mapped into the device); NULL: not   */
};

struct finalize_params {
  const ws_header *hdr;        /* the count kernel's N, W and scales; NULL: none */
  const ws_header *verdict;    /* as fwd_params::verdict                      */
  int count;                   /* hdr NULL, mean or accuracy: count N here,    */
                               /* the rows of row_loss that are not -0         */
  const float *row_loss, *row_z, *row_acc;
  int64_t rows;
  int mean;
  int empty_zero;              /* a mean over no rows is 0, not NaN            */
  int nan_if_rejected;         /* deferred mode: a rejected call's outputs NaN */
  int weighted;
  float *loss, *z_loss, *acc;  /* outputs (1 value each, optional but loss)    */
};

struct scale_params {
  char *g;
  int64_t rows;
  int64_t stride_bytes;
  int vocab;
  const float *grad_output;  /* NULL: use host_scale                            */
  const float *applied;      /* rescale: divide grad_output by it; NULL: do not */
  int per_row;
  float host_scale;
};

}  // namespace xent

#endif
