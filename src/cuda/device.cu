/*
 * device.cu - the CUDA backend's host-side helpers (device.cuh).
 */
#include "cuda/device.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace xent {

namespace {

/* Compiled like every kernel of the library, with the same targets: its
 * PTX version is that of the code the driver picked for the device. */
__global__ void code_probe_kernel() {}

/* XENT_PLAN_ARCH: a plan's compute capability for every call that sets
 * none, read once (0 when unset or out of range). */
int env_plan_arch() {
  static const int v = [] {
    const char *s = getenv("XENT_PLAN_ARCH");
    const int a = s ? atoi(s) : 0;
    return a >= 75 && a <= 129 ? a : 0;
  }();
  return v;
}

}  // namespace

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

/* The device's own properties and its code's version, once per thread. */
static xent_status device_props(int dev, dev_props *out) {
  constexpr int kCached = 64;
  thread_local dev_props cache[kCached];
  thread_local bool ready[kCached];
  if (dev >= 0 && dev < kCached && ready[dev]) {
    *out = cache[dev];
    return XENT_OK;
  }
  dev_props p = {0, 0, 0, 0, 0, 0};
  int major = 0, minor = 0;
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  CK(cudaDeviceGetAttribute(&p.sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaDeviceGetAttribute(&p.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  p.device_arch = 10 * major + minor;
  int cur = 0;
  CK(cudaGetDevice(&cur));
  if (cur != dev) CK(cudaSetDevice(dev));
  cudaFuncAttributes fa;
  const cudaError_t e = cudaFuncGetAttributes(&fa, code_probe_kernel);
  if (cur != dev) (void)cudaSetDevice(cur);
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidKernelImage ||
      e == cudaErrorUnsupportedPtxVersion) {
    (void)cudaGetLastError();
    return xent_fail(XENT_ERROR_UNSUPPORTED,
                     "this build of xent has no code for device %d (compute capability %d.%d): "
                     "%s; build it with that GPU in XENT_CUDA_ARCHITECTURES",
                     dev, major, minor, cudaGetErrorString(e));
  }
  if (e != cudaSuccess) return cuda_fail(e, "cudaFuncGetAttributes");
  p.code_arch = fa.ptxVersion;
  if (dev >= 0 && dev < kCached) {
    cache[dev] = p;
    ready[dev] = true;
  }
  *out = p;
  return XENT_OK;
}

xent_status get_props(int dev, const xent_experimental &exp, dev_props *out) {
  xent_status st = device_props(dev, out);
  if (st) return st;
  int arch = exp.plan_arch ? exp.plan_arch : env_plan_arch();
  if (!arch) arch = out->device_arch < out->code_arch ? out->device_arch : out->code_arch;
  out->plan_arch = arch;
  out->sm_major = arch / 10;
  return XENT_OK;
}

xent_status check_kernel_code(const void *k, const char *name, int needs, const dev_props &dp) {
  constexpr int kCached = 64;
  thread_local struct {
    const void *k;
    int dev, ptx;
  } cache[kCached];
  thread_local int count = 0;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  int ptx = -1;
  for (int i = 0; i < count; i++)
    if (cache[i].k == k && cache[i].dev == dev) ptx = cache[i].ptx;
  if (ptx < 0) {
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, k));
    ptx = fa.ptxVersion;
    cache[count < kCached ? count++ : (int)((uintptr_t)k % kCached)] = {k, dev, ptx};
  }
  if (ptx >= needs) return XENT_OK;
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(prop.name, sizeof prop.name, "?");
  }
  return xent_fail(XENT_ERROR_UNSUPPORTED,
                   "the launch plan for compute capability %d.%d chose %s, which needs code for "
                   "compute_%d or newer; this build runs compute_%d code on device %d (%s, "
                   "compute capability %d.%d), where that kernel's body is compiled out. Leave "
                   "the plan's compute capability to the device (plan_arch 0, XENT_PLAN_ARCH "
                   "unset) or build xent with the device in XENT_CUDA_ARCHITECTURES",
                   dp.plan_arch / 10, dp.plan_arch % 10, name, needs, ptx, dev, prop.name,
                   dp.device_arch / 10, dp.device_arch % 10);
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
