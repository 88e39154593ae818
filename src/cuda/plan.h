/*
 * plan.h - the one place that chooses how a CUDA forward runs: the kernel,
 * its variant and its geometry, from what the GPU is and what the call is.
 * Plain C, so that tests/c/test_plan.c checks the rules without a GPU.
 *
 * The kernels (src/cuda/kernels/; bench/NOTES.md has each one's idea, floor
 * and standing):
 *   two-read  fwd_tworead: a row per block; pass 1 reads the row, pass 2
 *             re-reads it (much of it from L2) and writes the gradient;
 *             without a gradient pass 1 alone. Any GPU, V and alignment.
 *   staged    fwd_staged (sm_90+): a persistent grid; a producer warp streams
 *             rows through a ring of `slots` shared-memory chunks with bulk
 *             copies while `threads` consumer threads fold, reduce and write;
 *             the gradient pass reads the last `reuse` chunks from the ring,
 *             the first `hold` from registers and the rest again from L2.
 *             Rows come from a counter in the workspace; over a cluster of
 *             `cluster` blocks the lead block takes them and mails them.
 *   warp row  fwd_warprow: without a gradient, a row per warp (or per
 *             `warp_split` warps of the plain kernel), `threads` / 32 warps a
 *             block; the plain kernel pipelines two stages of `vecs` vectors.
 *   segment   fwd_segment (+ fwd_segment_merge for rows of two): without a
 *             gradient, the plain kernel only: a block of `threads` threads
 *             per segment of a row, each thread issuing its `vecs` loads at
 *             once; a row of one segment is finished by its block.
 * Variants: PLAIN (loss, z-loss, lse only), STATS (also accuracy, predicted
 * tokens or label smoothing) and GENERAL (weights or softcap).
 */
#ifndef XENT_CUDA_PLAN_H
#define XENT_CUDA_PLAN_H

#include <stddef.h>

#include "xent_experimental.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  XENT_KERNEL_TWO_READ = 1,
  XENT_KERNEL_STAGED = 2,
  XENT_KERNEL_WARP_ROW = 3,
  XENT_KERNEL_SEGMENT = 4
};

enum { XENT_VARIANT_PLAIN = 0, XENT_VARIANT_STATS = 1, XENT_VARIANT_GENERAL = 2 };

/* Limits the kernels are built with. */
enum {
  XENT_MAX_CLUSTER = 8,
  XENT_MAX_WARP_THREADS = 256,     /* fwd_warprow's launch bounds                 */
  XENT_WARP_STAGE_VECS = 4,        /* fwd_warprow's pipelined stage               */
  XENT_STAGED_MAX_SLOTS = 16,
  XENT_STAGED_MAX_THREADS = 512,   /* fwd_staged's block, producer warp included  */
  XENT_STAGED_STATIC_SMEM = 2560,  /* fwd_staged's barriers, queue, inbox          */
  XENT_STAGED_MAX_HOLD = 2,        /* fwd_staged's chunks held in registers        */
  XENT_SEGMENT_MAX = 2,            /* segments a row: with the target's logit, one
                                      per row array of the workspace               */
  XENT_SEGMENT_MAX_THREADS = 256   /* fwd_segment's launch bounds                 */
};

/* The GPU and the call. */
typedef struct xent_plan_call {
  int sm_major;      /* compute capability major                                 */
  int sms;           /* multiprocessors                                          */
  int smem_optin;    /* the most shared memory one block may have, bytes         */
  int elem_bytes;    /* 2 or 4                                                   */
  long long vocab, rows;
  int write_grad;
  int variant;       /* XENT_VARIANT_*                                           */
} xent_plan_call;

typedef struct xent_plan {
  int kernel;        /* XENT_KERNEL_*                                            */
  int variant;       /* the kernel's variant (the plain kernels take only PLAIN) */
  int cluster;       /* blocks per row (staged)                                  */
  int threads;       /* threads a block; staged: its consumer threads            */
  int vecs;          /* staged: vectors a consumer thread takes of a chunk (4, 8);
                        warp row: the plain kernel's stage (0: unpipelined);
                        segment: loads a thread (4, 8)                           */
  int slots, reuse, hold; /* staged                                              */
  int warp_split;    /* warp row: warps a row (1: none)                          */
  int l2_hint;       /* two-read with a gradient, staged: pass 1 evict-last      */
  int segments;      /* segment: segments a row (1 or 2)                         */
  int programmatic;  /* launched while the kernel ahead runs (sm_90+)            */
  const char *rule;  /* the rule that chose it, in a few words                   */
} xent_plan;

/* The launch table: the plan for a call. Always succeeds. */
void xent_plan_forward(const xent_plan_call *c, xent_plan *p);

/* A launch forced by the experimental settings (path not TABLE): the plan
 * for it, or -1 with the reason in why[n] when it cannot run the call. */
int xent_plan_forced(const xent_plan_call *c, const xent_experimental_launch *f, xent_plan *p,
                     char *why, size_t n);

/* Segments of a row of V elements of `es` bytes in blocks of threads * vecs
 * vectors (one for a row of no whole vector). */
long long xent_plan_segments(int threads, int vecs, int es, long long vocab);

/* Shared memory of a staged block's ring, bytes. */
long long xent_plan_staged_ring_bytes(const xent_plan *p);

#ifdef __cplusplus
}
#endif
#endif
