/*
 * stub.c - the CUDA entry points of a build without nvcc. Every GPU request
 * fails with XENT_ERROR_UNSUPPORTED; pointers are always host memory.
 */
#include "internal.h"

int xent_cuda_built(void) { return 0; }

xent_status xent_cuda_forward(const xent_call *c) {
  (void)c;
  return xent_fail(XENT_ERROR_UNSUPPORTED, "this build of xent has no CUDA backend");
}

xent_status xent_cuda_backward(const xent_scale_call *c) {
  (void)c;
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

#include "cuda/tune.h"

void xent_tune_override(int path, int cluster, int threads, int size) {
  (void)path;
  (void)cluster;
  (void)threads;
  (void)size;
}

const char *xent_tune_last_launch(void) { return "cpu"; }

void xent_tune_backward(int waves) { (void)waves; }
void xent_tune_verdict_copy(int on) { (void)on; }
void xent_tune_pdl(int on) { (void)on; }

const char *xent_tune_last_backward(void) { return "cpu"; }

int xent_tune_l2_normal(const void *p, size_t bytes, void *stream) {
  (void)p;
  (void)bytes;
  (void)stream;
  return 0;
}

int xent_tune_l2_read(const void *p, size_t bytes, void *stream) {
  (void)p;
  (void)bytes;
  (void)stream;
  return 0;
}
