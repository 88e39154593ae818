/*
 * checks.h - argument checks that every public entry point shares: matrix
 * shapes and strides, options, and where each pointer lives.
 */
#ifndef XENT_API_CHECKS_H
#define XENT_API_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#include "xent.h"

int xent_aligned(const void *p, size_t alignment);

/* Stride, extent, presence (when `required`) and alignment of a rows x
 * cols matrix named `name` whose stride field is `stride_name`; *stride is
 * normalised (0 becomes cols). The shape itself is the caller's to check. */
xent_status xent_check_layout(const char *name, const char *stride_name, const char *cols_name,
                              const void *p, xent_dtype dtype, int64_t rows, int64_t cols,
                              int64_t *stride, int required);

/* What a CUDA cross-entropy call needs of exec beyond its pointers: a
 * verdict where `needs_verdict` (XENT_TARGETS_DEFERRED), and a caller's
 * workspace 256-byte aligned and of xent_workspace_size(rows) bytes. */
xent_status xent_check_cuda_exec(const xent_exec *ex, int64_t rows, int needs_verdict);

/* Shape, stride and extent of a rows x vocab matrix of `dtype` named `name`;
 * *stride is normalised (0 becomes vocab). */
xent_status xent_check_matrix(const char *name, const void *p, xent_dtype dtype, int64_t rows,
                              int64_t vocab, int64_t *stride);

/* Every field of a xent_options. */
xent_status xent_check_options(const xent_options *opt);

/* The target pointer and type of a call with `rows` rows. */
xent_status xent_check_targets(const void *targets, xent_index_type type, int64_t rows);

/* The outputs of a forward: loss present (but for none over no rows), each
 * aligned to its element. */
xent_status xent_check_outputs(const xent_output *out, xent_reduction reduction, int64_t rows);

/* Targets and class weights in host memory, read (the CPU backend's check). */
xent_status xent_check_host_targets(const void *targets, xent_index_type type, int64_t rows,
                                    int64_t vocab, int64_t ignore_index, const float *weights,
                                    const char *weights_name);

/* The pointers of one call, each classified once (host memory, or the device
 * that owns it). */
enum { XENT_MAX_SIDES = 16 };
typedef struct xent_sides {
  int n;
  const char *name[XENT_MAX_SIDES];
  const void *ptr[XENT_MAX_SIDES];
  int dev[XENT_MAX_SIDES]; /* -1: host memory (or no CUDA)             */
} xent_sides;

/* Add a pointer (NULL pointers are skipped). The first one added decides
 * the backend under XENT_BACKEND_AUTO. */
void xent_sides_add(xent_sides *s, const char *name, const void *p);

/* Resolve ex's backend and device from the pointers in `s` (classified here,
 * once each) and check that every one of them lives on that side. */
xent_status xent_resolve(xent_exec *ex, xent_sides *s);

#endif
