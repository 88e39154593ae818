/*
 * backend.cu - the CUDA backend's queries for the API layer: whether it is
 * built, which device owns a pointer, and what the driver and devices are.
 */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/device.cuh"

using xent::device_count;

using xent::cuda_fail;

extern "C" {

int xent_cuda_built(void) { return 1; }

int xent_cuda_pointer_device(const void *p) {
  if (!p || device_count() == 0) return -1;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return a.device;
  return -1;
}

void xent_cuda_fill_info(xent_info *info) {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) info->cuda_runtime_version = v;
  v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) info->cuda_driver_version = v;
  (void)cudaGetLastError();
  info->cuda_devices = device_count();
}

xent_status xent_cuda_device_info(int device, xent_device_info *info) {
  int n = device_count();
  if (device < 0 || device >= n)
    return xent_fail(XENT_ERROR_UNSUPPORTED, "device is %d but %d CUDA device(s) exist", device,
                     n);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, device));
  memset(info, 0, sizeof *info);
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->sm_major = prop.major;
  info->sm_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
  int cl = 0;
  if (cudaDeviceGetAttribute(&cl, cudaDevAttrClusterLaunch, device) != cudaSuccess) {
    (void)cudaGetLastError();
    cl = 0;
  }
  info->cluster_launch = cl;
  info->global_memory = prop.totalGlobalMem;
  info->shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  /* the code and the plan as a call with the default settings sees them */
  const xent_experimental defaults = XENT_EXPERIMENTAL_INIT;
  xent::dev_props dp;
  if (xent::get_props(device, defaults, &dp) == XENT_OK) {
    info->code_arch = dp.code_arch;
    info->plan_arch = dp.plan_arch;
  }
  xent_clear_error(); /* no code for the device: code_arch 0 says so */
  return XENT_OK;
}

}  /* extern "C" */
