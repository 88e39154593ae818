/*
 * cuda.h - the CUDA backend's entry points, called by the API layer;
 * src/cuda/stub.c stands in for them in a build without nvcc.
 */
#ifndef XENT_CUDA_H
#define XENT_CUDA_H

#include "common/call.h"
#include "common/linear.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the backend is compiled in. */
int xent_cuda_built(void);
xent_status xent_cuda_forward(const xent_call *c);
xent_status xent_cuda_backward(const xent_scale_call *c);
xent_status xent_cuda_linear(const xent_linear_call *c);
xent_status xent_cuda_vp_stats(const xent_vp_call *v);
xent_status xent_cuda_vp_forward(const xent_vp_call *v);
/* Device ordinal that owns `p`, or -1 for host memory, NULL or no CUDA. */
int xent_cuda_pointer_device(const void *p);
void xent_cuda_fill_info(xent_info *info);
xent_status xent_cuda_device_info(int device, xent_device_info *info);
/* The deferred mode's verdicts: made, destroyed and waited for. */
xent_status xent_cuda_verdict_create(xent_verdict **verdict);
void xent_cuda_verdict_destroy(xent_verdict *verdict);
xent_status xent_cuda_verdict_wait(xent_verdict *verdict);
int xent_cuda_verdict_ready(const xent_verdict *verdict);
/* The launch descriptions behind xent_experimental_last_launch/_backward. */
const char *xent_cuda_last_launch(void);
const char *xent_cuda_last_backward(void);
/* ... and behind xent_experimental_last_product. */
const char *xent_cuda_last_product(void);
/* One product of xent_experimental_gemm_run, its arguments checked. */
xent_status xent_cuda_gemm(const xent_experimental_gemm *g);

#ifdef __cplusplus
}
#endif
#endif
