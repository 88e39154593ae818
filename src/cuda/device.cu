/*
 * device.cu - the CUDA backend's host-side helpers (device.cuh).
 */
#include "cuda/device.cuh"

#include <string.h>

namespace xent {

xent_status cuda_fail(cudaError_t e, const char *what) {
  (void)cudaGetLastError(); /* clear a non-sticky error */
  xent_status st = e == cudaErrorMemoryAllocation ? XENT_ERROR_OUT_OF_MEMORY : XENT_ERROR_CUDA;
  return xent_fail(st, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

int device_count() {
  thread_local int count = -1;
  if (count < 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    count = n;
  }
  return count;
}

xent_status get_props(int dev, dev_props *out) {
  constexpr int kCached = 64;
  thread_local dev_props cache[kCached];
  thread_local bool ready[kCached];
  if (dev >= 0 && dev < kCached && ready[dev]) {
    *out = cache[dev];
    return XENT_OK;
  }
  dev_props p = {0, 0, 0};
  CK(cudaDeviceGetAttribute(&p.sm_major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&p.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (dev >= 0 && dev < kCached) {
    cache[dev] = p;
    ready[dev] = true;
  }
  *out = p;
  return XENT_OK;
}

xent_status enter_device(int dev, device_scope *s) {
  int n = device_count();
  if (n == 0)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "no CUDA device (or no driver) on this machine");
  if (dev >= n)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "device is %d but only %d CUDA device(s) exist", dev,
                     n);
  s->dev = dev;
  CK(cudaGetDevice(&s->prev));
  if (s->prev != dev) CK(cudaSetDevice(dev));
  return XENT_OK;
}

void leave_device(const device_scope *s) {
  if (s->prev != s->dev) (void)cudaSetDevice(s->prev);
}

void set_cluster(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int K, bool always) {
  if (K <= 1 && !always) return;
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = (unsigned)K;
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg->attrs = attr;
  cfg->numAttrs = 1;
}

void set_pdl(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int sm_major,
             const xent_experimental &exp) {
  if (exp.programmatic == 1 || sm_major < 9) return;
  cudaLaunchAttribute *a = attr + cfg->numAttrs;
  a->id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a->val.programmaticStreamSerializationAllowed = 1;
  cfg->attrs = attr;
  cfg->numAttrs++;
}

cudaLaunchConfig_t plain_config(unsigned grid, unsigned threads, cudaStream_t stream,
                                cudaLaunchAttribute *attr, int sm_major,
                                const xent_experimental &exp) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid, 1, 1);
  cfg.blockDim = dim3(threads, 1, 1);
  cfg.stream = stream;
  set_pdl(&cfg, attr, sm_major, exp);
  return cfg;
}

}  // namespace xent
