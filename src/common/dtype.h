/*
 * dtype.h - element sizes of the public dtypes, for every layer.
 */
#ifndef XENT_COMMON_DTYPE_H
#define XENT_COMMON_DTYPE_H

#include <stddef.h>

#include "xent.h"

/* Bytes of one element of `dtype`; 0 for a value that is not a xent_dtype. */
static inline size_t xent_dtype_size(xent_dtype dtype) {
  switch (dtype) {
    case XENT_FLOAT32: return 4;
    case XENT_BFLOAT16:
    case XENT_FLOAT16: return 2;
  }
  return 0;
}

#endif
