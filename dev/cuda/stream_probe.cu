/*
 * xent-stream-probe: what the simplest streaming kernels reach on this GPU.
 *
 * bench/NOTES.md measures xent against the device-to-device copy bandwidth
 * (cudaMemcpyAsync). xent writes its gradient in place, so the floor that
 * matters is what a kernel that reads a buffer and writes it back reaches,
 * not what a copy between two buffers does. This probe times, over the same
 * bytes and in one run:
 *
 *   memcpy     cudaMemcpyAsync device to device (the benchmark's baseline);
 *   copy       a kernel: dst = src * s, two buffers;
 *   inplace    a kernel: buf = buf * s, one buffer (what the backward does);
 *
 * each kernel with the load and store hints and the launch shapes the
 * forward can choose from. Every timed run starts after the same untimed L2
 * flush as xent-bench (a 256 MB memset).
 *
 * It also checks that flush: a buffer that fits in L2 is loaded under a
 * given L2 policy, the flush runs, and a read of the buffer is timed. A read
 * as fast as with no flush at all means the flush left the lines in L2.
 *
 * --read: the floor of a forward without gradient instead, which only reads.
 * Read-only kernels (plain and .cs loads, a chunk a block or a persistent
 * grid) over N bytes, after the writing flush and after a reading one, in
 * bytes read over time, against the memcpy xent-bench measures (2 GiB).
 *
 *   xent-stream-probe [--read] [--bytes N] [--iters N] [--warmup N]
 *
 * Prints one line per variant: median ms (p20 / p80), TB/s (bytes read +
 * written over time) and the share of the memcpy's rate in the same run.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH_BYTES ((size_t)256 << 20)
#define MAX_ITERS 200

#define CK(call)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "xent-stream-probe: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return -1;                                                                      \
    }                                                                                 \
  } while (0)

/* Load hints: plain, evict-first in L1 and L2 (.cs), or an L2 evict-first
 * policy. Store hints: plain or .cs. */
enum { LD_PLAIN = 0, LD_CS = 1, LD_L2FIRST = 2 };
enum { ST_PLAIN = 0, ST_CS = 1 };
/* L2 policies for the flush check. */
enum { POL_NORMAL = 0, POL_LAST = 1, POL_FIRST = 2 };

__device__ __forceinline__ uint64_t policy(int which) {
  uint64_t p = 0;
  if (which == POL_LAST)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}

template <int LD>
__device__ __forceinline__ uint4 load16(const uint4 *p, uint64_t pol) {
  uint4 v;
  if (LD == LD_CS) return __ldcs(p);
  if (LD == LD_L2FIRST) {
    asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(pol));
    return v;
  }
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int ST>
__device__ __forceinline__ void store16(uint4 *p, uint4 v) {
  if (ST == ST_CS) __stcs(p, v);
  else *p = v;
}

__device__ __forceinline__ uint4 scale4(uint4 v, float s) {
  v.x = __float_as_uint(__uint_as_float(v.x) * s);
  v.y = __float_as_uint(__uint_as_float(v.y) * s);
  v.z = __float_as_uint(__uint_as_float(v.z) * s);
  v.w = __float_as_uint(__uint_as_float(v.w) * s);
  return v;
}

/* This thread's U vectors of the chunk of blockDim.x * U vectors at
 * `base` (zeros past nvec). */
template <int LD, int U>
__device__ __forceinline__ void load_chunk(uint4 (&v)[U], const uint4 *src, int64_t base,
                                           int64_t nvec, uint64_t pol) {
#pragma unroll
  for (int u = 0; u < U; u++) {
    int64_t j = base + threadIdx.x + (int64_t)u * blockDim.x;
    v[u] = j < nvec ? load16<LD>(src + j, pol) : make_uint4(0, 0, 0, 0);
  }
}

/* Chunks of blockDim.x * U vectors; block b takes chunks b, b + grid, ...
 * Each thread loads its U vectors of a chunk, then scales and stores them.
 * In place when dst == src. */
template <int LD, int ST, int U>
__global__ void stream_kernel(const uint4 *src, uint4 *dst, int64_t nvec, float s) {
  const uint64_t pol = LD == LD_L2FIRST ? policy(POL_FIRST) : 0;
  const int64_t per_chunk = (int64_t)blockDim.x * U;
  for (int64_t base = (int64_t)blockIdx.x * per_chunk; base < nvec;
       base += (int64_t)gridDim.x * per_chunk) {
    uint4 v[U];
    load_chunk<LD>(v, src, base, nvec, pol);
#pragma unroll
    for (int u = 0; u < U; u++) {
      int64_t j = base + threadIdx.x + (int64_t)u * blockDim.x;
      if (j < nvec) store16<ST>(dst + j, scale4(v[u], s));
    }
  }
}

/* Reads n vectors under an L2 policy and folds them into *sink (so that the
 * loads are not removed). */
template <int POL>
__global__ void read_kernel(const uint4 *p, int64_t n, unsigned *sink) {
  const uint64_t pol = POL == POL_NORMAL ? 0 : policy(POL);
  unsigned acc = 0;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
       j += (int64_t)gridDim.x * blockDim.x) {
    uint4 v;
    if (POL == POL_NORMAL) {
      v = load16<LD_PLAIN>(p + j, 0);
    } else {
      asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "l"(p + j), "l"(pol));
    }
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

/* A forward without gradient's floor: chunks of blockDim.x * U vectors,
 * block b taking chunks b, b + grid, ...; each thread loads its U vectors of
 * a chunk, then folds them into an xor (kept, so that no load is removed). */
template <int LD, int U>
__global__ void read_only_kernel(const uint4 *src, int64_t nvec, unsigned *sink) {
  const int64_t per_chunk = (int64_t)blockDim.x * U;
  unsigned acc = 0;
  for (int64_t base = (int64_t)blockIdx.x * per_chunk; base < nvec;
       base += (int64_t)gridDim.x * per_chunk) {
    uint4 v[U];
    load_chunk<LD>(v, src, base, nvec, 0);
#pragma unroll
    for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

/* Sets the L2 eviction priority of n vectors' lines back to normal. */
__global__ void normal_priority_kernel(const uint4 *p, int64_t n) {
  for (int64_t j = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; j < n;
       j += (int64_t)gridDim.x * blockDim.x * 8)
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;" ::"l"(p + j) : "memory");
}

typedef struct {
  cudaStream_t stream;
  cudaEvent_t ev0[MAX_ITERS], ev1[MAX_ITERS];
  void *flush;
  int iters, warmup, sms;
  unsigned *sink; /* where the read kernels fold what they read */
} probe;

typedef struct {
  double p20, p50, p80;
} stats;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static stats summarize(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  stats s = {t[n / 5], t[n / 2], t[(4 * n) / 5 < n ? (4 * n) / 5 : n - 1]};
  return s;
}

/* Waits for the stream, then the median and spread of the timed runs. */
static int collect_times(probe *p, stats *out) {
  double t[MAX_ITERS];
  CK(cudaStreamSynchronize(p->stream));
  for (int k = 0; k < p->iters; k++) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, p->ev0[k], p->ev1[k]));
    t[k] = ms;
  }
  *out = summarize(t, p->iters);
  return 0;
}

/* What one timed run launches. */
typedef struct {
  int kind; /* 0 memcpy, 1 stream kernel */
  void (*launch)(const uint4 *, uint4 *, int64_t, float, int, int, cudaStream_t);
  const uint4 *src;
  uint4 *dst;
  int64_t nvec;
  int threads, grid;
} job;

template <int LD, int ST, int U>
static void launch_stream(const uint4 *src, uint4 *dst, int64_t nvec, float s, int threads,
                          int grid, cudaStream_t st) {
  stream_kernel<LD, ST, U><<<grid, threads, 0, st>>>(src, dst, nvec, s);
}

/* Times a job: `warmup` untimed then `iters` timed runs, each after the L2
 * flush; median and spread in ms. */
static int time_job(probe *p, const job *j, stats *out) {
  for (int it = 0; it < p->warmup + p->iters; it++) {
    const int k = it - p->warmup;
    CK(cudaMemsetAsync(p->flush, it & 0xff, FLUSH_BYTES, p->stream));
    if (k >= 0) CK(cudaEventRecord(p->ev0[k], p->stream));
    if (j->kind == 0)
      CK(cudaMemcpyAsync(j->dst, j->src, (size_t)j->nvec * 16, cudaMemcpyDeviceToDevice,
                         p->stream));
    else
      j->launch(j->src, j->dst, j->nvec, 0.999f, j->threads, j->grid, p->stream);
    CK(cudaGetLastError());
    if (k >= 0) CK(cudaEventRecord(p->ev1[k], p->stream));
  }
  return collect_times(p, out);
}

static void print_row(const char *name, const stats *s, double bytes, double ref_tbs) {
  const double tbs = bytes / (s->p50 * 1e-3) / 1e12;
  printf("%-40s %9.4f (%.4f / %.4f) %7.3f %7.3f\n", name, s->p50, s->p20, s->p80, tbs,
         ref_tbs > 0 ? tbs / ref_tbs : 1.0);
  fflush(stdout);
}

typedef void (*launch_fn)(const uint4 *, uint4 *, int64_t, float, int, int, cudaStream_t);

typedef struct {
  const char *name;
  launch_fn fn;
  const void *kernel; /* for the occupancy query */
  int unroll;
} variant;

#define VARIANT(name, LD, ST, U) \
  { name, launch_stream<LD, ST, U>, (const void *)stream_kernel<LD, ST, U>, U }
static const variant kVariants[] = {
    VARIANT("plain/plain u4", LD_PLAIN, ST_PLAIN, 4),
    VARIANT("plain/plain u8", LD_PLAIN, ST_PLAIN, 8),
    VARIANT("cs/cs u4", LD_CS, ST_CS, 4),
    VARIANT("cs/cs u8", LD_CS, ST_CS, 8),
    VARIANT("cs/plain u4", LD_CS, ST_PLAIN, 4),
    VARIANT("plain/cs u4", LD_PLAIN, ST_CS, 4),
    VARIANT("l2first/plain u4", LD_L2FIRST, ST_PLAIN, 4),
    VARIANT("l2first/cs u4", LD_L2FIRST, ST_CS, 4),
    VARIANT("plain/plain u16", LD_PLAIN, ST_PLAIN, 16),
};
#undef VARIANT

/* The flush check: load `n` vectors under `pol`, optionally reset their
 * priority, flush (or not), and time a plain read of them. */
static int flush_check(probe *p, uint4 *buf, int64_t n, int pol, int reset, int do_flush,
                       stats *out) {
  const int grid = p->sms * 4, threads = 512;
  unsigned *sink = p->sink;
  for (int it = 0; it < p->warmup + p->iters; it++) {
    const int k = it - p->warmup;
    if (pol == POL_NORMAL) read_kernel<POL_NORMAL><<<grid, threads, 0, p->stream>>>(buf, n, sink);
    else if (pol == POL_LAST) read_kernel<POL_LAST><<<grid, threads, 0, p->stream>>>(buf, n, sink);
    else read_kernel<POL_FIRST><<<grid, threads, 0, p->stream>>>(buf, n, sink);
    if (reset) normal_priority_kernel<<<grid, threads, 0, p->stream>>>(buf, n);
    if (do_flush) CK(cudaMemsetAsync(p->flush, it & 0xff, FLUSH_BYTES, p->stream));
    if (k >= 0) CK(cudaEventRecord(p->ev0[k], p->stream));
    read_kernel<POL_NORMAL><<<grid, threads, 0, p->stream>>>(buf, n, sink);
    CK(cudaGetLastError());
    if (k >= 0) CK(cudaEventRecord(p->ev1[k], p->stream));
  }
  return collect_times(p, out);
}

typedef void (*read_fn)(const uint4 *, int64_t, unsigned *, int, int, cudaStream_t);

template <int LD, int U>
static void launch_read(const uint4 *src, int64_t nvec, unsigned *sink, int threads, int grid,
                        cudaStream_t st) {
  read_only_kernel<LD, U><<<grid, threads, 0, st>>>(src, nvec, sink);
}

/* Times a read-only kernel over `nvec` vectors after the writing flush (a
 * memset, as xent-bench's default) or a reading one (`--flush read`). */
static int time_read(probe *p, read_fn fn, const uint4 *src, int64_t nvec, int threads, int grid,
                     int read_flush, stats *out) {
  const int fgrid = p->sms * 4;
  const int64_t fvec = (int64_t)(FLUSH_BYTES / 16);
  for (int it = 0; it < p->warmup + p->iters; it++) {
    const int k = it - p->warmup;
    if (read_flush)
      read_kernel<POL_NORMAL><<<fgrid, 512, 0, p->stream>>>((const uint4 *)p->flush, fvec, p->sink);
    else
      CK(cudaMemsetAsync(p->flush, it & 0xff, FLUSH_BYTES, p->stream));
    if (k >= 0) CK(cudaEventRecord(p->ev0[k], p->stream));
    fn(src, nvec, p->sink, threads, grid, p->stream);
    CK(cudaGetLastError());
    if (k >= 0) CK(cudaEventRecord(p->ev1[k], p->stream));
  }
  return collect_times(p, out);
}

/* --read: the floor of a kernel that only reads `bytes`, against the memcpy
 * of 2 GiB that xent-bench's ratios use. */
static int run_read(probe *p, long long bytes) {
  const int64_t nvec = bytes / 16;
  const size_t copy_bytes = (size_t)2 << 30;
  uint4 *a = NULL, *c0 = NULL, *c1 = NULL;
  CK(cudaMalloc(&a, (size_t)nvec * 16));
  CK(cudaMemset(a, 0x3f, (size_t)nvec * 16));
  CK(cudaMalloc(&c0, copy_bytes));
  CK(cudaMalloc(&c1, copy_bytes));
  CK(cudaMemset(c0, 0x3f, copy_bytes));
  stats s;
  job j = {0, NULL, c0, c1, (int64_t)(copy_bytes / 16), 0, 0};
  if (time_job(p, &j, &s)) return -1;
  const double ref = 2.0 * (double)copy_bytes / (s.p50 * 1e-3) / 1e12;
  printf("%-40s %9s %-19s %7s %7s\n", "variant (bytes read over time)", "ms", "(p20 / p80)",
         "TB/s", "share");
  print_row("memcpy 2 GiB (read + written)", &s, 2.0 * (double)copy_bytes, ref);
  CK(cudaFree(c0));
  CK(cudaFree(c1));
  const struct {
    const char *name;
    read_fn fn;
    const void *kernel;
    int unroll;
  } vs[] = {
      {"plain u4", launch_read<LD_PLAIN, 4>, (const void *)read_only_kernel<LD_PLAIN, 4>, 4},
      {"plain u8", launch_read<LD_PLAIN, 8>, (const void *)read_only_kernel<LD_PLAIN, 8>, 8},
      {"cs u4", launch_read<LD_CS, 4>, (const void *)read_only_kernel<LD_CS, 4>, 4},
      {"cs u8", launch_read<LD_CS, 8>, (const void *)read_only_kernel<LD_CS, 8>, 8},
  };
  const int threads_list[] = {128, 256, 512};
  for (int read_flush = 0; read_flush < 2; read_flush++) {
    printf("-- after a %s flush of %d MB\n", read_flush ? "reading" : "writing",
           (int)(FLUSH_BYTES >> 20));
    for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
      for (int ti = 0; ti < 3; ti++) {
        const int threads = threads_list[ti];
        int per_sm = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vs[vi].kernel, threads, 0));
        if (per_sm < 1) continue;
        const int64_t chunks = (nvec + (int64_t)threads * vs[vi].unroll - 1) /
                               ((int64_t)threads * vs[vi].unroll);
        const int grids[2] = {p->sms * per_sm, chunks < (1LL << 30) ? (int)chunks : (1 << 30)};
        for (int gi = 0; gi < 2; gi++) {
          if (time_read(p, vs[vi].fn, a, nvec, threads, grids[gi], read_flush, &s)) return -1;
          char name[96];
          snprintf(name, sizeof name, "read %s %d thr %s", vs[vi].name, threads,
                   gi ? "one chunk a block" : "persistent");
          print_row(name, &s, (double)nvec * 16, ref);
        }
      }
    }
  }
  CK(cudaFree(a));
  return 0;
}

static int parse_long(const char *s, long long lo, long long *v) {
  char *end = NULL;
  long long x = strtoll(s, &end, 10);
  if (!s[0] || *end || x < lo) return -1;
  *v = x;
  return 0;
}

static int run(long long bytes, int iters, int warmup, int read_only) {
  probe p;
  memset(&p, 0, sizeof p);
  p.iters = iters;
  p.warmup = warmup;
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  p.sms = prop.multiProcessorCount;
  printf("device: %s, %d SMs, L2 %d MB; buffer %.3f GB; median of %d after %d warm-up\n",
         prop.name, p.sms, prop.l2CacheSize >> 20, bytes / 1e9, iters, warmup);
  CK(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  for (int i = 0; i < iters; i++) {
    CK(cudaEventCreate(&p.ev0[i]));
    CK(cudaEventCreate(&p.ev1[i]));
  }
  const int64_t nvec = bytes / 16;
  uint4 *a = NULL, *b = NULL;
  CK(cudaMalloc(&p.flush, FLUSH_BYTES));
  CK(cudaMalloc(&p.sink, sizeof(unsigned)));
  if (read_only) {
    const int rc = run_read(&p, bytes);
    cudaFree(p.sink);
    cudaFree(p.flush);
    return rc;
  }
  CK(cudaMalloc(&a, (size_t)nvec * 16));
  CK(cudaMalloc(&b, (size_t)nvec * 16));
  /* 0x3f3f3f3f: a normal float (0.747), so scaling never meets NaN or zero. */
  CK(cudaMemset(a, 0x3f, (size_t)nvec * 16));
  CK(cudaMemset(b, 0x3f, (size_t)nvec * 16));

  printf("%-40s %9s %-19s %7s %7s\n", "variant", "ms", "(p20 / p80)", "TB/s", "share");
  const double rw = 2.0 * (double)nvec * 16;
  stats s;
  job j = {0, NULL, a, b, nvec, 0, 0};
  if (time_job(&p, &j, &s)) return -1;
  const double ref = rw / (s.p50 * 1e-3) / 1e12;
  print_row("memcpy", &s, rw, ref);

  const int threads_list[] = {256, 512, 1024};
  for (size_t vi = 0; vi < sizeof kVariants / sizeof kVariants[0]; vi++) {
    const variant *v = &kVariants[vi];
    for (int ti = 0; ti < 3; ti++) {
      const int threads = threads_list[ti];
      int per_sm = 0;
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, v->kernel, threads, 0));
      if (per_sm < 1) continue;
      const int64_t per_chunk = (int64_t)threads * v->unroll;
      const int64_t chunks = (nvec + per_chunk - 1) / per_chunk;
      const int grids[2] = {p.sms * per_sm, chunks < (1LL << 31) - 1 ? (int)chunks : (1 << 30)};
      const char *gname[2] = {"persistent", "one chunk a block"};
      for (int gi = 0; gi < 2; gi++) {
        for (int inplace = 0; inplace < 2; inplace++) {
          job k = {1, v->fn, a, inplace ? a : b, nvec, threads, grids[gi]};
          if (time_job(&p, &k, &s)) return -1;
          char name[96];
          snprintf(name, sizeof name, "%s %s %d thr %s", inplace ? "inplace" : "copy   ", v->name,
                   threads, gname[gi]);
          print_row(name, &s, rw, ref);
        }
      }
    }
  }

  /* The flush check, on a buffer of a third of L2. */
  const int64_t small = ((int64_t)prop.l2CacheSize / 3) / 16;
  const double rb = (double)small * 16;
  printf("\nL2 flush check: read %.1f MB after a load under a policy, then the %d MB memset\n",
         rb / 1e6, (int)(FLUSH_BYTES >> 20));
  printf("%-40s %9s %-19s %7s\n", "load before", "ms", "(p20 / p80)", "TB/s");
  const struct {
    const char *name;
    int pol, reset, flush;
  } checks[] = {
      {"normal, no flush (L2 hit)", POL_NORMAL, 0, 0},
      {"normal, flush", POL_NORMAL, 0, 1},
      {"evict-first, flush", POL_FIRST, 0, 1},
      {"evict-last, flush", POL_LAST, 0, 1},
      {"evict-last, reset to normal, flush", POL_LAST, 1, 1},
  };
  for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++) {
    if (flush_check(&p, a, small, checks[c].pol, checks[c].reset, checks[c].flush, &s))
      return -1;
    printf("%-40s %9.4f (%.4f / %.4f) %7.3f\n", checks[c].name, s.p50, s.p20, s.p80,
           rb / (s.p50 * 1e-3) / 1e12);
  }
  cudaFree(a);
  cudaFree(b);
  cudaFree(p.sink);
  cudaFree(p.flush);
  return 0;
}

int main(int argc, char **argv) {
  long long bytes = 8192LL * 128256 * 2, iters = 20, warmup = 5;
  int read_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help")) {
      printf("usage: xent-stream-probe [--read] [--bytes N] [--iters N] [--warmup N]\n"
             "Times in-place and copy kernels against cudaMemcpy over N bytes (default: bf16\n"
             "8192 x 128256), median of --iters after --warmup, and checks the L2 flush.\n"
             "--read: read-only kernels over N bytes instead, after a writing and a reading\n"
             "flush, against a memcpy of 2 GiB (the floor of a forward without gradient).\n");
      return 0;
    }
    if (!strcmp(argv[i], "--read")) {
      read_only = 1;
      continue;
    }
    long long *dst = NULL;
    if (!strcmp(argv[i], "--bytes")) dst = &bytes;
    else if (!strcmp(argv[i], "--iters")) dst = &iters;
    else if (!strcmp(argv[i], "--warmup")) dst = &warmup;
    const long long lo = dst == &bytes ? 16 : dst == &iters ? 1 : 0; /* the least each takes */
    if (!dst || i + 1 >= argc || parse_long(argv[i + 1], lo, dst)) {
      fprintf(stderr, "usage: xent-stream-probe [--read] [--bytes N] [--iters N] [--warmup N]\n");
      return 2;
    }
    i++;
  }
  if (iters > MAX_ITERS) iters = MAX_ITERS;
  bytes -= bytes % 16;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    fprintf(stderr, "xent-stream-probe: no CUDA device\n");
    return 1;
  }
  return run(bytes, (int)iters, (int)warmup, read_only) ? 1 : 0;
}
