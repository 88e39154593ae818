/*
 * kernel_table.cuh - the forward kernel a plan names, per dtype. Each dtype's
 * kernels are built in their own translation unit (kernels_f32.cu,
 * kernels_bf16.cu, kernels_f16.cu), so that the builds run side by side.
 */
#ifndef XENT_CUDA_KERNEL_TABLE_CUH
#define XENT_CUDA_KERNEL_TABLE_CUH

#include "cuda/params.cuh"
#include "cuda/plan.h"
#include "xent.h"

namespace xent {

typedef void (*fwd_kernel)(const fwd_params);

/* The kernel of plan `p` for logits of `dtype`; NULL when the plan names a
 * kernel that is not built (a plan.c rule out of step with the kernels). */
fwd_kernel forward_kernel(xent_dtype dtype, const xent_plan &p);

fwd_kernel forward_kernel_f32(const xent_plan &p);
fwd_kernel forward_kernel_bf16(const xent_plan &p);
fwd_kernel forward_kernel_f16(const xent_plan &p);

}  // namespace xent

#endif
