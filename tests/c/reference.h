/*
 * reference.h - an independent float64 reference of xent's math, and the
 * helpers the C tests share: dtype conversions, element access, random
 * fills with a reproducible seed, and poison fills for outputs.
 *
 * The reference follows the math of the design notes and of xent.h line by
 * line, in double precision, with no code shared with the library.
 */
#ifndef XENT_TEST_REFERENCE_H
#define XENT_TEST_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Scalar conversions (round to nearest even; NaN stays NaN)                 */
/* ------------------------------------------------------------------------ */

float xt_bf16_to_f32(uint16_t h);
uint16_t xt_f32_to_bf16(float f);
float xt_f16_to_f32(uint16_t h);
uint16_t xt_f32_to_f16(float f);

uint32_t xt_f32_bits(float f);
float xt_bits_f32(uint32_t u);

/* Bytes of one element. */
size_t xt_dtype_size(xent_dtype dt);
const char *xt_dtype_name(xent_dtype dt);
const char *xt_reduction_name(xent_reduction r);

/* Element i of a dtype array, as a double (exact). */
double xt_load(const void *base, xent_dtype dt, int64_t i);
/* Store v rounded to the dtype (double -> float -> dtype). */
void xt_store(void *base, xent_dtype dt, int64_t i, double v);
/* v rounded to what the dtype can hold, as a double. */
double xt_round(double v, xent_dtype dt);
/* The raw bits of element i (for bit-exact comparisons). */
uint32_t xt_raw(const void *base, xent_dtype dt, int64_t i);

/* ------------------------------------------------------------------------ */
/* Random numbers                                                            */
/* ------------------------------------------------------------------------ */

typedef struct xt_rng {
  uint64_t s;
} xt_rng;

/* The run's base seed: XENT_TEST_SEED when set, else taken from the clock.
 * Printed once, the first time it is asked for. */
uint64_t xt_base_seed(void);
/* A generator for one test: base seed mixed with the test's name, so a
 * single test can be rerun alone with the same data. */
xt_rng xt_rng_for(const char *test_name);
uint64_t xt_next(xt_rng *r);
double xt_uniform(xt_rng *r);                 /* [0, 1)     */
double xt_normal(xt_rng *r);                  /* N(0, 1)    */
int64_t xt_randint(xt_rng *r, int64_t n);     /* [0, n)     */

/* ------------------------------------------------------------------------ */
/* Poison                                                                    */
/* ------------------------------------------------------------------------ */

#define XT_POISON_F32 0x7FF0DEADu     /* a quiet NaN no arithmetic produces */
#define XT_POISON_BF16 0x7FD5u
#define XT_POISON_F16 0x7E5Au
#define XT_POISON_I64 0x7F7F7F7F7F7F7F7FLL

void xt_poison_f32(float *p, int64_t n);
void xt_poison_i64(int64_t *p, int64_t n);
/* Fill n elements of a dtype array with its poison pattern. */
void xt_poison_dtype(void *p, xent_dtype dt, int64_t n);
int xt_is_poison_f32(float v);
int xt_is_poison_dtype(const void *base, xent_dtype dt, int64_t i);

/* ------------------------------------------------------------------------ */
/* Aligned host buffers with room for an element offset                      */
/* ------------------------------------------------------------------------ */

/* 64-byte aligned, zeroed; NULL on failure. Free with xt_free. */
void *xt_alloc(size_t bytes);
void xt_free(void *p);

/* ------------------------------------------------------------------------ */
/* The reference                                                             */
/* ------------------------------------------------------------------------ */

typedef struct xt_params {
  int64_t vocab;
  int64_t ignore_index;
  xent_reduction reduction;
  double alpha;              /* label smoothing                          */
  double s;                  /* lse_square_scale                         */
  int use_softcap;
  double cap;
  const double *weights;     /* vocab values or NULL                     */
  int empty_zero;            /* a mean over no rows is 0, not NaN        */
} xt_params;

/* What one row gives. All values before the reduction unless noted. */
typedef struct xt_row {
  int ignored;
  int finite;                /* the row's logits are all finite           */
  double lse;                /* 0 when ignored                            */
  double loss;               /* loss_r without z                          */
  double z;                  /* s * lse^2                                 */
  double mag;                /* size of the terms that cancel in loss_r   */
  int64_t argmax;            /* first arg-max of x' (-1 when ignored)     */
  double xmax;               /* x'[argmax]                                */
  double tie_delta;          /* > 0: indices with x' >= xmax - tie_delta
                                are acceptable arg-maxes (softcap rounds
                                distinct logits together in fp32)       */
  int ambiguous;             /* another index is within tie_delta         */
  int hit;                   /* argmax == target                          */
  double gscale;             /* sum of |gradient coefficients| of the row,
                                after the reduction scale                 */
} xt_row;

typedef struct xt_result {
  int64_t rows;
  xt_row *row;               /* rows entries                              */
  double *grad;              /* rows x vocab (packed) or NULL             */
  int64_t n_valid;           /* N: rows not ignored                       */
  double w_valid;            /* W: sum of w[y] over them (N unweighted)   */
  double scale_loss;         /* 1/N, 1/W or 1                             */
  double scale_z;            /* 1/N or 1                                  */
  /* Reduced values (mean, sum): */
  double loss;               /* includes z                                */
  double z;
  double acc;                /* fraction of non-ignored rows hit          */
  double loss_mag;           /* size of the terms summed into loss        */
  int64_t hits;              /* rows hit, counting none of the ambiguous  */
  int64_t ambiguous;         /* rows whose arg-max is ambiguous           */
  int all_finite;
} xt_result;

/* x' of one logit. */
double xt_xprime(const xt_params *p, double x);

/* N, W and the two reduction scales for these targets. */
void xt_scales(const xt_params *p, const int64_t *targets, int64_t rows, int64_t *n_valid,
               double *w_valid, double *scale_loss, double *scale_z);

/* One row: x holds vocab logits (as doubles), y its target. grad (vocab
 * values, may be NULL) receives d(reduced loss)/dx for upstream gradient 1,
 * using the given scales. */
void xt_ref_row(const xt_params *p, const double *x, int64_t y, double scale_loss,
                double scale_z, xt_row *out, double *grad);

/* The whole problem: x is rows x vocab packed doubles. want_grad allocates
 * res->grad. Returns 0 on success, -1 when out of memory. */
int xt_reference(const xt_params *p, const double *x, const int64_t *targets, int64_t rows,
                 int want_grad, xt_result *res);
void xt_result_free(xt_result *res);

/* Is `pred` an acceptable first arg-max for this row (x = its logits)? */
int xt_argmax_ok(const xt_params *p, const xt_row *r, const double *x, int64_t pred);

#ifdef __cplusplus
}
#endif
#endif
