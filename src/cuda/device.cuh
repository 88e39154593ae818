/*
 * device.cuh - the CUDA backend's host-side helpers shared by its files:
 * errors from the runtime, the properties of a device, making a device
 * current for a call, and the attributes of a launch.
 */
#ifndef XENT_CUDA_DEVICE_CUH
#define XENT_CUDA_DEVICE_CUH

#include <cuda_runtime.h>

#include "common/error.h"
#include "xent_experimental.h"

namespace xent {

/* A runtime error as the call's status and message (a non-sticky error is
 * cleared). */
xent_status cuda_fail(cudaError_t e, const char *what);

#define CK(call)                                          \
  do {                                                    \
    cudaError_t e_ = (call);                              \
    if (e_ != cudaSuccess) return cuda_fail(e_, #call);   \
  } while (0)

/* Devices the driver reports (0 without a driver). */
int device_count();

struct dev_props {
  int sm_major;    /* the plan's compute capability major (plan_arch / 10): what the
                      launch table, programmatic launches and clusters go by          */
  int plan_arch;   /* 10 x major + minor the plan chooses for                         */
  int device_arch; /* the device's own compute capability, 10 x major + minor          */
  int code_arch;   /* of the code this build runs on the device (its PTX version)     */
  int sms;
  int smem_optin;  /* the most shared memory one block may have */
};

/* The properties of `dev` (the device's queried once per thread and device)
 * and the plan's compute capability for a call with settings `exp`: its
 * plan_arch, else XENT_PLAN_ARCH, else the device's capped at the code's.
 * XENT_ERROR_UNSUPPORTED when this build carries no code for the device. */
xent_status get_props(int dev, const xent_experimental &exp, dev_props *out);

/* XENT_OK when kernel `k` (named `name`) has code for the plan's features
 * on this device: `needs` is the least compute capability its launch
 * relies on (90 for the staged kernel, clusters and programmatic launches;
 * their code is compiled out below). Else XENT_ERROR_UNSUPPORTED naming the
 * kernel and the device: a kernel whose body was compiled out would return
 * having written nothing. Cached per thread and kernel. */
xent_status check_kernel_code(const void *k, const char *name, int needs, const dev_props &dp);

/* The calling thread's device, made `dev` for the duration of a call. */
struct device_scope {
  int prev, dev;
};
xent_status enter_device(int dev, device_scope *s);
void leave_device(const device_scope *s);

/* Launch as clusters of K blocks, with `attr` as the storage; K = 1 only
 * when `always` (the cluster occupancy query needs the attribute). */
void set_cluster(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int K, bool always);

/* A programmatic launch (sm_90+): the kernel may start before the one ahead
 * of it in the stream has ended, and waits for it in kernel_enter. `attr`
 * is the storage of cfg's attributes, with room for one more. Nothing when
 * the experimental settings turn programmatic launches off. */
void set_pdl(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int sm_major,
             const xent_experimental &exp);

/* A launch of `grid` blocks of `threads` threads on `stream`, programmatic
 * where set_pdl allows it; `attr` is the storage of its one attribute. */
cudaLaunchConfig_t plain_config(unsigned grid, unsigned threads, cudaStream_t stream,
                                cudaLaunchAttribute *attr, int sm_major,
                                const xent_experimental &exp);

}  // namespace xent

#endif
