/*
 * verdict.cu - the checked mode's one round trip, and the deferred mode's
 * verdicts read later (verdict.cuh).
 */
#include "cuda/verdict.cuh"

#include <new>
#include <stddef.h>

#include "cuda/device.cuh"

/* A verdict: pinned host memory the count kernel writes, the event after
 * it, and what the message of a bad call needs. The checked mode uses one
 * per host thread; the deferred mode the caller's (xent_verdict_create). */
struct xent_verdict {
  unsigned long long *host = nullptr;   /* [0] bad_target, [1] bad_weight       */
  unsigned long long *mapped = nullptr; /* the same memory seen from the device,
                                           NULL where the GPU cannot map it      */
  cudaEvent_t done = nullptr;
  int dev = -1;
  bool copy = false;    /* this call fetches the verdict with a copy            */
  bool pending = false; /* a deferred call whose verdict nobody has read yet     */
  const void *targets = nullptr;
  const float *weights = nullptr;
  int target64 = 0;
  int64_t rows = 0, vocab = 0, ignore_index = 0;
  ~xent_verdict() { /* errors (a runtime already gone at thread exit) are moot */
    if (done) (void)cudaEventDestroy(done);
    if (host) (void)cudaFreeHost(host);
  }
};

namespace xent {

namespace {

thread_local xent_verdict g_thread_verdict;
static_assert(offsetof(ws_header, bad_weight) == offsetof(ws_header, bad_target) + 8,
              "verdict_mark copies the two verdict fields as one");

/* Wait for the verdict and turn a bad target or weight into its call's
 * error, with `prefix` before the message. */
xent_status resolve(const xent_verdict *v, const char *prefix) {
  CK(cudaEventSynchronize(v->done));
  const unsigned long long bad_target = ((volatile unsigned long long *)v->host)[0];
  const unsigned long long bad_weight = ((volatile unsigned long long *)v->host)[1];
  if (bad_target) {
    long long r = (long long)(v->rows - (int64_t)bad_target);
    long long y = 0;
    if (!v->target64) {
      int32_t t;
      CK(cudaMemcpy(&t, (const int32_t *)v->targets + r, 4, cudaMemcpyDeviceToHost));
      y = t;
    } else {
      int64_t t;
      CK(cudaMemcpy(&t, (const int64_t *)v->targets + r, 8, cudaMemcpyDeviceToHost));
      y = t;
    }
    return xent_fail(XENT_ERROR_BAD_TARGET,
                     "%stargets[%lld] = %lld is outside [0, %lld) and is not ignore_index %lld",
                     prefix, r, y, (long long)v->vocab, (long long)v->ignore_index);
  }
  if (bad_weight) {
    long long j = (long long)(v->vocab - (int64_t)bad_weight);
    float w;
    CK(cudaMemcpy(&w, v->weights + j, 4, cudaMemcpyDeviceToHost));
    return xent_fail(XENT_ERROR_BAD_WEIGHT, "%sweights[%lld] = %g is not finite", prefix, j,
                     (double)w);
  }
  return XENT_OK;
}

}  // namespace

xent_verdict *verdict_for(const xent_call *c) {
  return c->opt.target_check == XENT_TARGETS_DEFERRED ? c->ex.verdict : &g_thread_verdict;
}

xent_status verdict_prepare(xent_verdict *v, bool force_copy, unsigned long long **dev_view) {
  if (v->pending) { /* an earlier deferred call, checked before its memory is reused */
    v->pending = false;
    xent_status st = resolve(v, "an earlier XENT_TARGETS_DEFERRED call with this verdict: ");
    if (st) return st;
  }
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

xent_status verdict_mark(xent_verdict *v, const ws_header *dh, cudaStream_t stream) {
  if (v->copy)
    CK(cudaMemcpyAsync(v->host, &dh->bad_target, 2 * sizeof *v->host, cudaMemcpyDeviceToHost,
                       stream));
  CK(cudaEventRecord(v->done, stream));
  return XENT_OK;
}

xent_status check_verdict(xent_verdict *v, const xent_call *c, bool deferred) {
  v->targets = c->in.targets;
  v->weights = c->in.weights;
  v->target64 = c->in.target_type == XENT_INT64;
  v->rows = c->in.rows;
  v->vocab = c->in.vocab;
  v->ignore_index = c->opt.ignore_index;
  if (deferred) {
    v->pending = true;
    return XENT_OK;
  }
  return resolve(v, "");
}

}  // namespace xent

extern "C" {

xent_status xent_cuda_verdict_create(xent_verdict **out) {
  xent_verdict *v = new (std::nothrow) xent_verdict();
  if (!v) return xent_fail(XENT_ERROR_OUT_OF_MEMORY, "xent_verdict_create: out of host memory");
  *out = v;
  return XENT_OK;
}

void xent_cuda_verdict_destroy(xent_verdict *v) { delete v; }

xent_status xent_cuda_verdict_wait(xent_verdict *v) {
  if (!v->pending) return XENT_OK;
  v->pending = false;
  return xent::resolve(v, "");
}

int xent_cuda_verdict_ready(const xent_verdict *v) {
  if (!v->pending) return 1;
  const cudaError_t e = cudaEventQuery(v->done);
  if (e == cudaErrorNotReady) return 0;
  /* done, or an error that xent_verdict_wait reports; the query's own error
   * must not stay behind for the caller's next CUDA call */
  if (e != cudaSuccess) (void)cudaGetLastError();
  return 1;
}

}  /* extern "C" */
