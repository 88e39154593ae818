/*
 * vp.h - the vocabulary-parallel records (xent.h, "Vocabulary-parallel
 * cross-entropy"): their layout and how P of them combine, for both
 * backends (host and device).
 */
#ifndef XENT_COMMON_VP_H
#define XENT_COMMON_VP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/rowmath.h"
#include "xent.h"

#define XENT_VP_SMALL 4
#define XENT_VP_FULL 8

/* A row's combined statistics. */
typedef struct xent_vp_row {
  float m, s, t, u, wu, sw;
  int32_t idx;
} xent_vp_row;

XENT_HD float xent_vp_int_bits(int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float f;
  memcpy(&f, &i, 4);
  return f;
#endif
}

XENT_HD int32_t xent_vp_bits_int(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  int32_t i;
  memcpy(&i, &f, 4);
  return i;
#endif
}

XENT_HD void xent_vp_write(float *rec, int R, const xent_vp_row *r) {
  rec[0] = r->m;
  rec[1] = r->s;
  rec[2] = r->t;
  rec[3] = r->u;
  if (R == XENT_VP_FULL) {
    rec[4] = r->wu;
    rec[5] = r->sw;
    rec[6] = xent_vp_int_bits(r->idx);
    rec[7] = 0.0f;
  }
}

/* The P records of a row (`rec` points at rank 0's, `pitch` floats between
 * ranks), combined in rank order. An all-zero record (an ignored row)
 * combines to s = 0. */
XENT_HD xent_vp_row xent_vp_combine(const float *rec, int64_t pitch, int ranks, int R) {
  xent_vp_row a;
  a.m = -INFINITY;
  a.s = 0.0f;
  a.t = 0.0f;
  a.u = 0.0f;
  a.wu = 0.0f;
  a.sw = 0.0f;
  a.idx = 0x7fffffff;
  float am = -INFINITY;
  for (int p = 0; p < ranks; p++) {
    const float *b = rec + (int64_t)p * pitch;
    const float bm = b[0];
    if (R == XENT_VP_FULL) {
      const float mn = fmaxf(a.m, bm);
      /* sum w (x' - m) / V moved to the new maximum; a part of no weight adds 0 */
      const float wa = a.sw != 0.0f && a.m < mn ? fmaf(a.m - mn, a.sw, a.wu) : a.wu;
      const float wb = b[5] != 0.0f && bm < mn ? fmaf(bm - mn, b[5], b[4]) : b[4];
      a.wu = wa + wb;
      a.sw += b[5];
      const int32_t bi = xent_vp_bits_int(b[6]);
      if (bm > am || (bm == am && bi < a.idx) || (bm != bm && am == am)) {
        am = bm;
        a.idx = bi;
      }
    }
    xent_merge_max_sum(&a.m, &a.s, bm, b[1]);
    a.t += b[2];
    a.u += b[3];
  }
  return a;
}

#endif
