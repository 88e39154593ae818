/*
 * kernels_bf16.cu - the forward kernels for __nv_bfloat16 logits.
 */
#include "cuda/kernels/select.cuh"

namespace xent {

fwd_kernel forward_kernel_bf16(const xent_plan &p) { return select_forward<__nv_bfloat16>(p); }

}  // namespace xent
