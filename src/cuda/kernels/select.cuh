/*
 * select.cuh - the instantiation of every forward kernel the launch table
 * reaches, for one element type, and the choice among them by plan. Included
 * once per dtype (kernels_<dtype>.cu).
 */
#ifndef XENT_CUDA_KERNELS_SELECT_CUH
#define XENT_CUDA_KERNELS_SELECT_CUH

#include "cuda/kernel_table.cuh"
#include "cuda/kernels/segment.cuh"
#include "cuda/kernels/staged.cuh"
#include "cuda/kernels/tworead.cuh"
#include "cuda/kernels/warprow.cuh"

namespace xent {

template <typename T>
fwd_kernel select_forward(const xent_plan &p) {
  const bool general = p.variant == XENT_VARIANT_GENERAL, stats = p.variant == XENT_VARIANT_STATS;
  switch (p.kernel) {
    case XENT_KERNEL_TWO_READ:
      if (general) return fwd_tworead<T, true, true>;
      return stats ? fwd_tworead<T, false, true> : fwd_tworead<T, false, false>;
    case XENT_KERNEL_STAGED:
      if (general) return fwd_staged<T, 4, true, true>;
      if (stats) return fwd_staged<T, 4, false, true>;
      return p.vecs == 8 ? fwd_staged<T, 8, false, false> : fwd_staged<T, 4, false, false>;
    case XENT_KERNEL_WARP_ROW:
      if (general) return fwd_warprow<T, true, true, 0>;
      if (stats) return fwd_warprow<T, false, true, 0>;
      if (p.vecs != XENT_WARP_STAGE_VECS) return nullptr;
      switch (p.warp_split) {
        case 1: return fwd_warprow<T, false, false, XENT_WARP_STAGE_VECS>;
        case 2: return fwd_warprow<T, false, false, XENT_WARP_STAGE_VECS, 2>;
        case 4: return fwd_warprow<T, false, false, XENT_WARP_STAGE_VECS, 4>;
        case 8: return fwd_warprow<T, false, false, XENT_WARP_STAGE_VECS, 8>;
      }
      return nullptr;
    case XENT_KERNEL_SEGMENT:
      if (general || stats) return nullptr;
      return p.vecs == 8 ? fwd_segment<T, 8> : p.vecs == 4 ? fwd_segment<T, 4> : nullptr;
  }
  return nullptr;
}

}  // namespace xent

#endif
