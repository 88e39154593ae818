/*
 * verdict.cuh - the checked mode's host side. The count kernel finds the
 * first bad target and weight on the device and writes that verdict into
 * pinned host memory mapped into the device (or, on GPUs that cannot map
 * host memory, a copy behind it fetches it); an event marks the point. The
 * rest of the call is queued before the host waits for that event alone:
 * its kernels read the same verdict on the device and return at once on a
 * bad target (call_rejected), so the GPU never idles for the round trip and
 * a rejected call writes nothing. One slot per host thread, made again when
 * the thread's calls move to another device. In XENT_TARGETS_DEFERRED mode
 * the host does not wait: the slot keeps the call until check_deferred(),
 * or until the thread's next checked or deferred call checks it first.
 */
#ifndef XENT_CUDA_VERDICT_CUH
#define XENT_CUDA_VERDICT_CUH

#include <cuda_runtime.h>

#include "common/call.h"
#include "cuda/params.cuh"

namespace xent {

/* Before the count kernel: this thread's slot for the current device;
 * *dev_view is where the count kernel writes the verdict, NULL when a copy
 * must fetch it (always so with force_copy). */
xent_status verdict_prepare(bool force_copy, unsigned long long **dev_view);

/* After the count kernel: the copy where one is needed, and the event the
 * host waits for. */
xent_status verdict_mark(const ws_header *dh, cudaStream_t stream);

/* Once the call's kernels are queued: wait for the verdict and turn a bad
 * target or weight into the call's error; with `deferred`, keep the call
 * for check_deferred() (or the thread's next checked call) instead. */
xent_status check_verdict(const xent_call *c, bool deferred);

/* The thread's pending deferred verdict: wait for it and return its
 * call's error, or XENT_OK (also when none is pending). */
xent_status check_deferred();

}  // namespace xent

#endif
