/*
 * verdict.cu - the checked mode's one round trip (verdict.cuh).
 */
#include "cuda/verdict.cuh"

#include <stddef.h>

#include "cuda/device.cuh"

namespace xent {

/* A thread's verdict: pinned host memory and the event after the count
 * kernel. */
struct verdict_slot {
  unsigned long long *host = nullptr; /* [0] bad_target, [1] bad_weight         */
  unsigned long long *mapped = nullptr; /* the same memory seen from the device,
                                         NULL where the GPU cannot map it        */
  cudaEvent_t done = nullptr;
  int dev = -1;
  bool copy = false; /* this call fetches the verdict with a copy       */
  ~verdict_slot() { /* at thread exit; errors (a runtime already gone) are moot */
    if (done) (void)cudaEventDestroy(done);
    if (host) (void)cudaFreeHost(host);
  }
};
thread_local verdict_slot g_verdict;
static_assert(offsetof(ws_header, bad_weight) == offsetof(ws_header, bad_target) + 8,
              "verdict_mark copies the two verdict fields as one");

xent_status verdict_prepare(bool force_copy, unsigned long long **dev_view) {
  verdict_slot *v = &g_verdict;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  if (!v->host &&
      cudaHostAlloc((void **)&v->host, 2 * sizeof *v->host,
                    cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError(); /* no mapped memory here: plain pinned memory and the copy */
    v->host = nullptr;
    CK(cudaMallocHost((void **)&v->host, 2 * sizeof *v->host));
  }
  if (v->dev != dev) {
    if (v->done) (void)cudaEventDestroy(v->done);
    v->done = nullptr;
    v->mapped = nullptr;
    CK(cudaEventCreateWithFlags(&v->done, cudaEventDisableTiming));
    v->dev = dev;
    int can_map = 0;
    CK(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, dev));
    if (can_map && cudaHostGetDevicePointer((void **)&v->mapped, v->host, 0) != cudaSuccess) {
      (void)cudaGetLastError(); /* not mapped for this device: the copy instead */
      v->mapped = nullptr;
    }
  }
  v->copy = force_copy || !v->mapped;
  *dev_view = v->copy ? nullptr : v->mapped;
  return XENT_OK;
}

xent_status verdict_mark(const ws_header *dh, cudaStream_t stream) {
  verdict_slot *v = &g_verdict;
  if (v->copy)
    CK(cudaMemcpyAsync(v->host, &dh->bad_target, 2 * sizeof *v->host, cudaMemcpyDeviceToHost,
                       stream));
  CK(cudaEventRecord(v->done, stream));
  return XENT_OK;
}

xent_status check_verdict(const xent_call *c) {
  CK(cudaEventSynchronize(g_verdict.done));
  ws_header h;
  h.bad_target = ((volatile unsigned long long *)g_verdict.host)[0];
  h.bad_weight = ((volatile unsigned long long *)g_verdict.host)[1];
  if (h.bad_target) {
    long long r = (long long)(c->in.rows - (int64_t)h.bad_target);
    long long y = 0;
    if (c->in.target_type == XENT_INT32) {
      int32_t v;
      CK(cudaMemcpy(&v, (const int32_t *)c->in.targets + r, 4, cudaMemcpyDeviceToHost));
      y = v;
    } else {
      int64_t v;
      CK(cudaMemcpy(&v, (const int64_t *)c->in.targets + r, 8, cudaMemcpyDeviceToHost));
      y = v;
    }
    return xent_fail(XENT_ERROR_BAD_TARGET,
                     "targets[%lld] = %lld is outside [0, %lld) and is not ignore_index %lld", r,
                     y, (long long)c->in.vocab, (long long)c->opt.ignore_index);
  }
  if (h.bad_weight) {
    long long j = (long long)(c->in.vocab - (int64_t)h.bad_weight);
    float w;
    CK(cudaMemcpy(&w, c->in.weights + j, 4, cudaMemcpyDeviceToHost));
    return xent_fail(XENT_ERROR_BAD_WEIGHT, "weights[%lld] = %g is not finite", j, (double)w);
  }
  return XENT_OK;
}

}  // namespace xent
