/*
 * kernels_f16.cu - the forward kernels for __half logits.
 */
#include "cuda/kernels/select.cuh"

namespace xent {

fwd_kernel forward_kernel_f16(const xent_plan &p) { return select_forward<__half>(p); }

}  // namespace xent
