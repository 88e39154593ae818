/*
 * forward.cuh - the steps of the CUDA forward (forward.cu), for the
 * cross-entropy over logits and for the fused linear loss (linear.cu), which
 * runs the same steps with the rows in chunks: the count kernel once over
 * every row, the forward kernels once per chunk, the finalize kernel once.
 */
#ifndef XENT_CUDA_FORWARD_CUH
#define XENT_CUDA_FORWARD_CUH

#include <cuda_runtime.h>

#include "common/call.h"
#include "cuda/device.cuh"
#include "cuda/params.cuh"
#include "cuda/plan.h"

namespace xent {

/* The cross-entropy workspace (common/workspace.h) carved up. */
struct ce_workspace {
  ws_header *hdr;
  float *partials;
  float *loss, *z, *acc; /* the first three row arrays */
  size_t arr;            /* bytes between row arrays   */
};

ce_workspace carve_workspace(char *ws, int64_t rows);

/* The launch plan of a call (the table, or the experimental forced launch). */
xent_status plan_call(const xent_call *c, const dev_props &dp, xent_plan *l);

/* The header zeroed and the count kernel over c's rows; with `verdict`
 * (checked modes) the verdict too. */
xent_status launch_count(const xent_call *c, const ce_workspace &w, xent_verdict *verdict,
                         cudaStream_t stream);

/* The parameters that follow from the call alone; the workspace pointers
 * (hdr, verdict, row_ticket, row arrays) are the caller's to set. */
void fill_params(fwd_params *p, const xent_call *c);

/* The forward kernel of plan l over c's rows, and on the segment path the
 * merge kernel, with row arrays from seg_base, seg_pitch_bytes apart. */
xent_status launch_rows(const xent_plan &l, const dev_props &dp, const xent_call *c, fwd_params p,
                        float *seg_base, size_t seg_pitch_bytes, cudaStream_t stream);

/* The finalize kernel's parameters for c (mean, sum) over w's row arrays. */
finalize_params finalize_for(const xent_call *c, const fwd_params &p, const ce_workspace &w);
xent_status launch_finalize(const finalize_params &f, const dev_props &dp,
                            const xent_experimental &exp, cudaStream_t stream);

/* The reduced outputs of a call with no rows (mean: NaN or 0, sum: 0). */
xent_status launch_empty_outputs(const xent_options &opt, const xent_output &out,
                                 cudaStream_t stream);

/* XENT_ERROR_BAD_ARGUMENT when `stream` is being captured (checked modes). */
xent_status refuse_capture(cudaStream_t stream);

}  // namespace xent

#endif
