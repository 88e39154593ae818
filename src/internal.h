/*
 * internal.h - the contract between the API layer (src/xent.c) and the
 * backends (src/cpu, src/cuda). Nothing here is public.
 *
 * The API layer validates every argument, resolves the backend and the
 * device, normalises row_stride (never 0 here), and only then calls a
 * backend. A backend may assume its xent_call is valid except for what the
 * API layer cannot see from the host: the CUDA backend checks targets and
 * weights on the device (see xent_options.target_check). The CPU backend gets
 * targets and weights already checked on the host.
 */
#ifndef XENT_INTERNAL_H
#define XENT_INTERNAL_H

#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xent_call {
  xent_input in;       /* row_stride >= vocab                                   */
  xent_options opt;
  xent_output out;
  xent_exec ex;        /* backend is XENT_BACKEND_CPU or XENT_BACKEND_CUDA      */
  int write_grad;      /* 1: xent_forward_grad, 0: xent_forward                 */
} xent_call;

typedef struct xent_scale_call {
  void *grad;
  xent_dtype dtype;
  int64_t rows, vocab, row_stride;  /* row_stride >= vocab                      */
  const float *grad_output;         /* NULL: use host_scale                     */
  int64_t grad_output_count;        /* 1 or rows when grad_output is set        */
  float host_scale;                 /* used when grad_output is NULL; never 1.0 */
  xent_exec ex;
} xent_scale_call;

/* Record a message for xent_last_error() and return `status`. */
xent_status xent_fail(xent_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void xent_clear_error(void);

/* Size in bytes of one element of `dtype` (0 for an unknown dtype). */
size_t xent_dtype_size(xent_dtype dtype);

/* CPU backend (src/cpu). */
xent_status xent_cpu_forward(const xent_call *c);
xent_status xent_cpu_backward(const xent_scale_call *c);
int xent_cpu_default_threads(void);

/* CUDA backend (src/cuda; src/cuda/stub.c when built without CUDA). */
int xent_cuda_built(void);
xent_status xent_cuda_forward(const xent_call *c);
xent_status xent_cuda_backward(const xent_scale_call *c);
/* Device ordinal that owns `p`, or -1 for host memory / no CUDA. */
int xent_cuda_pointer_device(const void *p);
void xent_cuda_fill_info(xent_info *info);
xent_status xent_cuda_device_info(int device, xent_device_info *info);

#ifdef __cplusplus
}
#endif
#endif
