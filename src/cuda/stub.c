/*
 * stub.c - the CUDA entry points of a build without nvcc. Every GPU request
 * fails with XENT_ERROR_UNSUPPORTED; pointers are always host memory.
 */
#include "common/error.h"
#include "cuda/cuda.h"

int xent_cuda_built(void) { return 0; }

xent_status xent_cuda_forward(const xent_call *c) {
  (void)c;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

xent_status xent_cuda_backward(const xent_scale_call *c) {
  (void)c;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

xent_status xent_cuda_linear(const xent_linear_call *c) {
  (void)c;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

xent_status xent_cuda_vp_stats(const xent_vp_call *v) {
  (void)v;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

xent_status xent_cuda_vp_forward(const xent_vp_call *v) {
  (void)v;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

int xent_cuda_pointer_device(const void *p) {
  (void)p;
  return -1;
}

void xent_cuda_fill_info(xent_info *info) { (void)info; }

xent_status xent_cuda_device_info(int device, xent_device_info *info) {
  (void)device;
  (void)info;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

const char *xent_cuda_last_launch(void) { return "none"; }

const char *xent_cuda_last_backward(void) { return "none"; }

const char *xent_cuda_last_product(void) { return "none"; }

/* Without CUDA every call checks its targets on the host: a verdict holds
 * nothing to wait for. */
struct xent_verdict {
  int unused;
};

xent_status xent_cuda_verdict_create(xent_verdict **verdict) {
  static struct xent_verdict none;
  *verdict = &none;
  return XENT_OK;
}

void xent_cuda_verdict_destroy(xent_verdict *verdict) { (void)verdict; }

xent_status xent_cuda_verdict_wait(xent_verdict *verdict) {
  (void)verdict;
  return XENT_OK;
}

int xent_cuda_verdict_ready(const xent_verdict *verdict) {
  (void)verdict;
  return 1;
}

xent_status xent_cuda_gemm(const xent_experimental_gemm *g) {
  (void)g;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}
