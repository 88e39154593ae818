/*
 * check.h - random problems and the comparison of a call's results with the
 * float64 reference, shared by the CPU and the CUDA tests.
 *
 * A problem is a host copy of everything a call reads (logits in their
 * dtype and layout, with poisoned padding and guard elements around them,
 * targets, weights), the decoded logits as doubles and the reference
 * result. The caller runs a backend on it (on these buffers, or on device
 * copies of them) and hands the results back to xt_check().
 */
#ifndef XENT_TEST_CHECK_H
#define XENT_TEST_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "tolerance.h"
#include "xent.h"

typedef struct xt_case {
  xent_dtype dtype;
  xent_index_type ttype;
  xent_reduction reduction;
  int64_t rows, vocab;
  int64_t stride;            /* 0: packed                                          */
  int offset;                /* the logits start this many elements past an
                                aligned address (1: not 16-byte aligned)            */
  int weighted;
  double alpha;              /* label smoothing                                    */
  double s;                  /* lse_square_scale                                   */
  int use_softcap;
  double cap;
  int64_t ignore_index;
  double ignore_frac;        /* fraction of rows whose target is ignore_index      */
  int grad;                  /* 1: xent_forward_grad, 0: xent_forward              */
  int want_z, want_acc, want_pred, want_lse;
  double sigma;              /* logits: shift_r + sigma * N(0,1) ...               */
  double shift;              /* ... shift_r uniform in [-shift, shift]             */
  double base;               /* ... plus this constant (large offsets)             */
  int ties;                  /* plant exact ties at the row maximum in some rows   */
  int peaked;                /* give some rows a target probability near 1         */
  int nan_ignored;           /* NaN logits in ignored rows (they must not be read) */
  int bad_targets;           /* unchecked mode: this many rows get targets outside
                                [0, V) (the first at row 0 when rows > 0)          */
  xent_target_check check;
  int empty_zero;            /* empty_mean XENT_EMPTY_MEAN_ZERO: a mean over no rows is 0 */
  int num_threads;
} xt_case;

/* A case with the common defaults: mean, int64, everything off, all
 * optional outputs requested, sigma 2, shift 3, ignore_index -100, 10% of
 * rows ignored, gradient on. */
xt_case xt_case_default(xent_dtype dt, int64_t rows, int64_t vocab);

/* "bf16 mean int64 BT=37 V=4095 stride=4095 off=0 grad ls=0.1 ..." */
void xt_case_desc(const xt_case *c, char *buf, size_t n);

/* Every feature at once: weights, smoothing 0.1, z-loss 0.02, softcap 15,
 * planted ties, 15% of rows ignored. */
void xt_everything(xt_case *c);

/* The feature tests' variation with the case number k: target type and
 * which optional outputs are requested. */
void xt_vary_outputs(xt_case *c, int k);

/* The backward tests' case: every feature, padded rows (stride V + 5) and a
 * base one element past alignment. */
xt_case xt_backward_case(xent_dtype dt, int64_t rows, int64_t vocab, xent_reduction red);

/* Per-row upstream gradients for the backward tests: uniform in [-3, 3),
 * with 1, 0 and -1 in the first rows (rows >= 3). */
void xt_grad_outputs(float *go, int64_t rows, xt_rng *rng);

/* The feature combinations the CPU and CUDA feature tests both run: applies
 * combination `combo` (0 <= combo < XT_FEATURE_COMBOS) to c and returns its
 * name ("smoothing", "weights+smoothing", ..., "everything" with a padded
 * stride and an unaligned base, "smoothing=1", ...). */
enum { XT_FEATURE_COMBOS = 11 };
const char *xt_feature_combo(xt_case *c, int combo);

typedef struct xt_problem {
  xt_case c;
  int64_t stride;            /* normalised (>= vocab)                              */
  size_t esize;
  size_t alloc_elems;        /* offset + rows * stride + guard                     */
  void *alloc;               /* the whole host buffer (64-byte aligned)            */
  void *logits;              /* alloc + offset elements                            */
  void *orig;                /* a copy of alloc as generated                       */
  double *x;                 /* rows x vocab, the logits decoded                   */
  void *targets;             /* rows int32 or int64                                */
  int64_t *t64;              /* the same as int64                                  */
  float *weights;            /* vocab floats or NULL                               */
  double *wd;
  xt_params params;
  xt_result ref;
} xt_problem;

#define XT_GUARD_ELEMS 64

/* Generate a problem (and its reference). Returns 0, or -1 when out of memory. */
int xt_problem_make(xt_problem *pb, const xt_case *c, xt_rng *rng);
/* Change logit (r, j) (buffer, decoded copy and the pristine copy) or a
 * target; call xt_problem_rereference() afterwards. */
void xt_problem_set(xt_problem *pb, int64_t r, int64_t j, double v);
void xt_problem_set_target(xt_problem *pb, int64_t r, int64_t y);
/* Recompute the reference after the caller changed pb->x / targets. */
int xt_problem_rereference(xt_problem *pb);
void xt_problem_free(xt_problem *pb);
/* Put the generated logits back (after a forward_grad overwrote them). */
void xt_problem_restore(xt_problem *pb);

typedef struct xt_outbuf {
  int64_t count;             /* values per output: rows (none) or 1                */
  int64_t rows;
  float *loss, *z, *acc, *lse; /* count + 1 or rows + 1 (the last is a canary)     */
  int64_t *pred;             /* rows + 1                                           */
} xt_outbuf;

/* A problem whose rows have their maximum at M (any finite value the dtype
 * holds): every element within 5 % of |M| below it, 1 to 3 exact ties at
 * M, the next representable values below it, targets at a maximum or
 * anywhere. Returns 0, or -1 when out of memory. */
int xt_problem_make_huge(xt_problem *pb, const xt_case *c, double M, xt_rng *rng);
/* The huge-logit cases both backends run: case k (from 0 until it returns
 * 0) of dtype dt, rows x vocab, into c; returns its maximum M. Six option
 * sets per M: plain mean, smoothing sum, weights and smoothing none, z-loss
 * mean (where s M^2 stays finite), softcap none, the statistics none. */
double xt_huge_case(xt_case *c, xent_dtype dt, int k, int64_t rows, int64_t vocab);
/* Tight checks for such a problem: the loss (each row's, or the reduced
 * one) and lse within fp32 rounding of their own size, not of |M|. */
long xt_check_huge(const xt_problem *pb, const xt_outbuf *ob, double M, const char *desc);

int xt_outbuf_make(xt_outbuf *ob, const xt_case *c);
void xt_outbuf_poison(xt_outbuf *ob);
void xt_outbuf_free(xt_outbuf *ob);
/* The xent_output for these buffers: loss always, the rest when wanted. */
xent_output xt_outbuf_view(const xt_outbuf *ob, const xt_case *c);
/* The same for any buffers (device copies, say). */
xent_output xt_output_view(const xt_case *c, float *loss, float *z, float *acc, float *lse,
                           int64_t *pred);

/* xent_forward_grad when grad, else xent_forward. */
xent_status xt_forward(int grad, const xent_input *in, const xent_options *opt,
                       const xent_output *out, const xent_exec *ex);

/* Does `word` occur in `msg` as a whole token (not inside a longer word or
 * number)? Word characters: letters, digits, '_'. */
int xt_mentions(const char *msg, const char *word);

xent_input xt_problem_input(const xt_problem *pb);
xent_options xt_case_options(const xt_case *c);

/* Compare the results of a call with the reference. logits_after is the
 * whole buffer (same layout as pb->alloc) after the call. Prints what
 * differs, prefixed with `desc`. Returns the number of problems found. */
long xt_check(const xt_problem *pb, const xt_outbuf *ob, const void *alloc_after,
              const char *desc);

/* Only the logits buffer: with grad, gradient vs reference and padding /
 * guards unchanged; without, every byte unchanged. */
long xt_check_logits(const xt_problem *pb, const void *alloc_after, const char *desc);

/* Bit-for-bit equality of two result sets (determinism); counts differences.
 * NULL allocs: only the outputs are compared. */
long xt_compare_bits(const xt_problem *pb, const xt_outbuf *a, const void *alloc_a,
                     const xt_outbuf *b, const void *alloc_b, const char *desc);

/* Two result sets of the same problem (two backends) agree within twice the
 * tolerances (arg-maxes exactly, except ambiguous rows). NULL allocs: the
 * gradient is not compared. */
long xt_compare_results(const xt_problem *pb, const xt_outbuf *a, const void *alloc_a,
                        const xt_outbuf *b, const void *alloc_b, const char *desc);

/* A stored gradient after a backward pass: alloc_after must equal the
 * gradient in alloc_grad times go[row] (go_count 1: go[0] for every row),
 * within one rounding, with padding and guards unchanged. */
long xt_check_scaled(const xt_problem *pb, const void *alloc_grad, const void *alloc_after,
                     const float *go, int64_t go_count, const char *desc);

/* 1: the checks count problems without printing them (self-tests of the
 * checker). */
void xt_set_quiet(int on);

/* Print the largest fraction of each tolerance that any check used. With
 * XENT_TEST_SHOW_MARGINS set, every gradient element using more than half of
 * its bound is printed as it is checked. */
void xt_report_margins(void);

#endif
