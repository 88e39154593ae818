/*
 * kernels_f32.cu - the forward kernels for float logits.
 */
#include "cuda/kernels/select.cuh"

namespace xent {

fwd_kernel forward_kernel_f32(const xent_plan &p) { return select_forward<float>(p); }

}  // namespace xent
