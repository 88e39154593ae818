/*
 * backward.cu - the CUDA backward: the gradient left by the forward scaled
 * in place by the upstream gradient (kernels/scale.cuh).
 */
#include <stdio.h>
#include <string.h>

#include "common/dtype.h"
#include "cuda/cuda.h"
#include "cuda/device.cuh"
#include "cuda/kernels/scale.cuh"

namespace xent {

namespace {

/* The backward's grid, in waves of the blocks the GPU holds at once (the
 * experimental settings' backward_waves instead when set; -1: one item a
 * block). */
constexpr int kScaleWaves = 8;
thread_local char g_last_scale[96] = "none";

/* The scale kernel's launch. A block takes up to kScaleMaxThreads threads, as
 * few as cover a row in one item where rows are short. The grid is at most
 * `waves` times the blocks the GPU holds at once: a block then takes a few
 * items, and blocks finishing early take the next ones, so that SMs that
 * stream slower get less of the work (a persistent grid, one block per slot,
 * was 4 % slower on an H200: bench/HISTORY.md v10). Few waves also keep the
 * skip cheap: with a scalar factor of 1 every block reads it and returns. */
template <typename T>
xent_status launch_scale(const scale_params &s, const dev_props &dp, cudaStream_t stream,
                         const xent_experimental &exp) {
  const int sms = dp.sms;
  const int vn = 16 / (int)sizeof(T);
  const int64_t nvec = s.vocab / vn;
  int64_t threads = (nvec + kScaleUnroll - 1) / kScaleUnroll;
  threads = (threads + 31) / 32 * 32;
  if (threads < 32) threads = 32;
  if (threads > kScaleMaxThreads) threads = kScaleMaxThreads;
  const int64_t per_chunk = threads * kScaleUnroll;
  int64_t chunks = (nvec + per_chunk - 1) / per_chunk;
  if (chunks < 1) chunks = 1;
  /* Resident blocks per SM of this kernel, by block size (a multiple of 32
   * up to 512), asked of the runtime once per thread and device. */
  thread_local int resident[kScaleMaxThreads / 32], resident_dev = -1;
  const int slot = (int)threads / 32 - 1;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (resident_dev != dev) {
    memset(resident, 0, sizeof resident);
    resident_dev = dev;
  }
  if (resident[slot] < 1) {
    int n = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, scale_kernel<T>, (int)threads, 0));
    resident[slot] = n < 1 ? 1 : n;
  }
  const int per_sm = resident[slot];
  const int waves = exp.backward_waves > 0 ? exp.backward_waves : kScaleWaves;
  int64_t items = s.rows * chunks, grid = (int64_t)(sms > 0 ? sms : 132) * per_sm * waves;
  if (exp.backward_waves < 0 || grid > items) grid = items;
  if (grid > 0x7fffffffLL) grid = 0x7fffffffLL;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      plain_config((unsigned)grid, (unsigned)threads, stream, attr, dp.sm_major, exp);
  CK(cudaLaunchKernelEx(&cfg, scale_kernel<T>, s, (int)chunks));
  snprintf(g_last_scale, sizeof g_last_scale, "scale threads=%d unroll=%d grid=%lld",
           (int)threads, kScaleUnroll, (long long)grid);
  return XENT_OK;
}

}  // namespace

}  // namespace xent

extern "C" xent_status xent_cuda_backward(const xent_scale_call *c) {
  using namespace xent;
  device_scope scope;
  xent_status st = enter_device(c->ex.device, &scope);
  if (st) return st;
  scale_params s;
  s.g = (char *)c->grad;
  s.rows = c->rows;
  s.stride_bytes = c->row_stride * (int64_t)xent_dtype_size(c->dtype);
  s.vocab = (int)c->vocab;
  s.grad_output = c->grad_output;
  s.per_row = c->grad_output && c->grad_output_count == c->rows && c->rows != 1;
  s.host_scale = c->host_scale;
  s.applied = c->applied;
  cudaStream_t stream = (cudaStream_t)c->ex.stream;
  dev_props props;
  st = get_props(c->ex.device, c->exp, &props);
  if (!st) {
    switch (c->dtype) {
      case XENT_FLOAT32: st = launch_scale<float>(s, props, stream, c->exp); break;
      case XENT_BFLOAT16: st = launch_scale<__nv_bfloat16>(s, props, stream, c->exp); break;
      case XENT_FLOAT16: st = launch_scale<__half>(s, props, stream, c->exp); break;
    }
  }
  /* rescale: the factor now applied, once every block has read the old one */
  if (!st && c->applied) {
    const cudaError_t e =
        cudaMemcpyAsync(c->applied, c->grad_output, (size_t)c->grad_output_count * sizeof(float),
                        cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) st = cuda_fail(e, "cudaMemcpyAsync");
  }
  leave_device(&scope);
  return st;
}

extern "C" const char *xent_cuda_last_backward(void) { return xent::g_last_scale; }
