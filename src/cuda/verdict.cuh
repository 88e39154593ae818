/*
 * verdict.cuh - the checked modes' host side. The count kernel finds the
 * first bad target and weight on the device and writes that verdict into
 * pinned host memory mapped into the device (or, on GPUs that cannot map
 * host memory, a copy behind it fetches it); an event marks the point. The
 * rest of the call is queued before anyone waits for that event: its
 * kernels read the same verdict on the device and return at once on a bad
 * target (call_rejected), so the GPU never idles for the round trip and a
 * rejected call writes nothing. XENT_TARGETS_CHECKED waits for the event at
 * the end of the call, in a verdict of the calling thread's own;
 * XENT_TARGETS_DEFERRED leaves it in the caller's xent_verdict for
 * xent_verdict_wait(), from any thread.
 */
#ifndef XENT_CUDA_VERDICT_CUH
#define XENT_CUDA_VERDICT_CUH

#include <cuda_runtime.h>

#include "common/call.h"
#include "cuda/params.cuh"

namespace xent {

/* The verdict a checked or deferred call uses. */
xent_verdict *verdict_for(const xent_call *c);

/* Before the count kernel: an earlier deferred verdict in `v` checked (its
 * error returned), the memory and event for the current device; *dev_view
 * is where the count kernel writes, NULL when a copy must fetch it (always
 * so with force_copy). */
xent_status verdict_prepare(xent_verdict *v, bool force_copy, unsigned long long **dev_view);

/* After the count kernel: the copy where one is needed, and the event. */
xent_status verdict_mark(xent_verdict *v, const ws_header *dh, cudaStream_t stream);

/* Once the call's kernels are queued: wait for the verdict and turn a bad
 * target or weight into the call's error; with `deferred`, keep it in `v`
 * for xent_verdict_wait() instead. */
xent_status check_verdict(xent_verdict *v, const xent_call *c, bool deferred);

}  // namespace xent

#endif
