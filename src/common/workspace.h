/*
 * workspace.h - layout of the CUDA backend's scratch area, shared by the API
 * layer (which reports its size) and the CUDA backend (which carves it up).
 *
 *   [0, 256)                 header: counters, error slots, reduction scales
 *   [256, 4352)              per-block partials of the count kernel
 *   then 5 arrays of `rows` floats, each 256-byte aligned:
 *                            loss terms, z-loss, accuracy per row (the first
 *                            three); on the CUDA segment path first the (max,
 *                            sum) of a row's segments 0 and 1 and its
 *                            target's logit (cuda/kernels/segment.cuh)
 */
#ifndef XENT_WORKSPACE_H
#define XENT_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#define XENT_WS_HEADER_BYTES 256
#define XENT_WS_PARTIAL_BYTES 4096
#define XENT_WS_ROW_ARRAYS 5

static inline size_t xent_ws_row_array_bytes(int64_t rows) {
  if (rows < 0) rows = 0;
  return ((size_t)rows * sizeof(float) + 255) & ~(size_t)255;
}

static inline size_t xent_ws_bytes(int64_t rows) {
  return XENT_WS_HEADER_BYTES + XENT_WS_PARTIAL_BYTES +
         XENT_WS_ROW_ARRAYS * xent_ws_row_array_bytes(rows);
}

#endif
