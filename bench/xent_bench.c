/*
 * xent_bench.c - the benchmark driver of xent (executable xent-bench).
 *
 * Times the fused cross-entropy on the best backend of the machine (the GPU
 * when the library reports a CUDA device, else the CPU) and prints, for each
 * point, the median time with its 20th and 80th percentiles, the effective
 * bandwidth on the fewest bytes the operation must move, and the ratio of that
 * bandwidth to a plain copy measured in the same run.
 *
 * Modes (what one timed iteration is):
 *   forward         xent_forward_grad: loss and the gradient written in place
 *   backward        xent_backward with a device/host grad_output of 0.5 over the
 *                   gradient left by an untimed xent_forward_grad
 *   full            xent_forward_grad + xent_backward with grad_output 1, the
 *                   standard last-layer step (the backward then skips its pass)
 *   forward_nograd  xent_forward: the loss only, logits read-only
 *
 * Fewest bytes (one definition for every mode and provider):
 *   forward, backward, full: 2 * BT * V * sizeof(dtype)  (read X, write dX)
 *   forward_nograd:              BT * V * sizeof(dtype)  (read X)
 *
 * Method. Inputs are random (approximately N(0, 2) logits, uniform targets),
 * made on the host with a counter-based generator and copied once into a
 * pristine buffer. Before every iteration, outside the timed region, the
 * logits are refreshed from that pristine copy (the forward overwrites them
 * with the gradient) and, on the GPU, a 256 MiB scratch buffer is written so
 * the L2 holds none of the logits (after their lines' L2 priority is set
 * back to normal, so that lines loaded evict-last go too). GPU times come
 * from CUDA events around the call on a private stream, with
 * XENT_TARGETS_UNCHECKED and an explicit workspace (graph-safe mode: no host
 * synchronisation inside the region; --checked: the default checked mode,
 * whose wait for the target check is then inside it). CPU times come from
 * CLOCK_MONOTONIC.
 * Percentiles interpolate linearly between the sorted samples.
 *
 * Copy bandwidth. GPU: cudaMemcpyAsync device-to-device of a 2 GiB buffer,
 * bytes read + written over the median time. CPU: a memcpy of the point's
 * BT * V elements, split over the same number of threads as the benchmark
 * (OpenMP when available), read + written over the median time.
 *
 * Memory (the CSV's "memory" rows, for modes forward and full): the bytes the
 * loss holds on the device or the host during a step: logits + targets + the
 * fp32 loss (+ workspace on the GPU). xent never allocates a BT x V buffer, so
 * this is exact; the benchmark's own pristine copy is not counted.
 *
 * Run xent-bench --help for the flags.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cuda/tune.h"
#include "xent.h"

#ifdef XENT_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

enum { MODE_FORWARD, MODE_BACKWARD, MODE_FULL, MODE_FORWARD_NOGRAD, MODE_COUNT };
static const char *const mode_names[MODE_COUNT] = {"forward", "backward", "full",
                                                   "forward_nograd"};

#define MAX_POINTS 64
#define MAX_DTYPES 3
#define MAX_LAUNCHES 32 /* --launch candidates for --tune */
#define GRAD_OUTPUT_VALUE 0.5f /* the backward mode's upstream gradient (!= 1) */
#define FLUSH_BYTES ((size_t)256 << 20)
#define COPY_BYTES ((size_t)2 << 30)

typedef struct point {
  int64_t bt, vocab;
  const char *x_name; /* "V" or "BT": which of the two the sweep varies */
} point;

typedef struct config {
  int force_cpu, force_gpu;
  int threads;        /* CPU threads; 0: the library's default            */
  int iters, warmup;  /* -1: not given                                     */
  int quick, tune;
  int launch[MAX_LAUNCHES][4]; /* --launch: path, cluster, threads, size  */
  int launch_given;   /* how many --launch gave (several only with --tune) */
  int scale_waves;    /* --scale-waves: the backward's grid (0: default)   */
  int checked;        /* --checked: XENT_TARGETS_CHECKED (GPU)             */
  xent_reduction reduction; /* --reduction (default mean)                  */
  int flush_read;     /* --flush read: the L2 flush reads, leaving it clean */
  int pdl;            /* --pdl N / --no-pdl: xent_tune_pdl(N); -1: default */
  int modes[MODE_COUNT];
  int modes_given;
  xent_dtype dtypes[MAX_DTYPES];
  int n_dtypes;
  int sweep_vocab, sweep_bt;
  int64_t bt, vocab;  /* 0: not given                                      */
  const char *csv_path;
  uint64_t seed;
} config;

typedef struct stats {
  double p50, p20, p80;
} stats;

static const int64_t sweep_vocab_values[] = {32000, 50304, 102400, 128256, 152064, 201088, 262144};
static const int64_t sweep_bt_values[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Linear interpolation between order statistics, q in [0, 1]. */
static double quantile_sorted(const double *v, int n, double q) {
  if (n <= 0) return NAN;
  double pos = q * (double)(n - 1);
  int lo = (int)floor(pos);
  int hi = lo + 1 < n ? lo + 1 : n - 1;
  double frac = pos - (double)lo;
  return v[lo] + (v[hi] - v[lo]) * frac;
}

static stats summarize(double *samples, int n) {
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  stats s = {quantile_sorted(samples, n, 0.5), quantile_sorted(samples, n, 0.2),
             quantile_sorted(samples, n, 0.8)};
  return s;
}

static size_t dtype_size(xent_dtype dt) { return dt == XENT_FLOAT32 ? 4 : 2; }

static const char *dtype_name(xent_dtype dt) {
  switch (dt) {
    case XENT_FLOAT32: return "float32";
    case XENT_BFLOAT16: return "bfloat16";
    case XENT_FLOAT16: return "float16";
  }
  return "?";
}

static const char *dtype_short(xent_dtype dt) {
  switch (dt) {
    case XENT_FLOAT32: return "fp32";
    case XENT_BFLOAT16: return "bf16";
    case XENT_FLOAT16: return "fp16";
  }
  return "?";
}

/* The fewest bytes a mode must move (see the file comment). */
static double fewest_bytes(int mode, int64_t bt, int64_t vocab, xent_dtype dt) {
  double x = (double)bt * (double)vocab * (double)dtype_size(dt);
  return mode == MODE_FORWARD_NOGRAD ? x : 2.0 * x;
}

static void die_usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "xent-bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(run xent-bench --help for the flags)\n");
  va_end(ap);
  exit(2);
}

static void report_xent(const char *what, xent_status st) {
  fprintf(stderr, "xent-bench: %s failed: %s: %s\n", what, xent_status_string(st),
          xent_last_error());
}

static void *host_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) & ~(size_t)63;
  if (rounded == 0) rounded = 64;
  return aligned_alloc(64, rounded);
}

/* ------------------------------------------------------------------------ */
/* Random inputs                                                             */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct rng {
  uint64_t s[4];
} rng;

static void rng_seed(rng *r, uint64_t seed) {
  uint64_t sm = seed;
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&sm);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(rng *r) { /* xoshiro256** */
  uint64_t *s = r->s;
  uint64_t result = rotl64(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return result;
}

/* About N(0, 2): the sum of four 16-bit uniforms, scaled to a standard
 * deviation of 2 (range about +-6.9). One 64-bit draw per value. */
static inline float normalish(uint64_t r) {
  float acc = 0.0f;
  for (int k = 0; k < 4; k++) acc += ((float)((r >> (16 * k)) & 0xffffu) + 0.5f) * (1.0f / 65536.0f);
  return (acc - 2.0f) * 3.4641016f;
}

static inline uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Finite values in the normal fp16 range only (the generator stays there). */
static inline uint16_t to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a < 0x38800000u) return (uint16_t)sign; /* below the normal range: 0 */
  a += ((uint32_t)(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u);
  return (uint16_t)((a >> 13) | sign);
}

#define FILL_BLOCK 4096 /* elements per independently seeded block */

/* Fill dst with elements [first, first + count) of the logits stream. The
 * result does not depend on the thread count. first is a multiple of
 * FILL_BLOCK. */
static void fill_logits(void *dst, xent_dtype dt, size_t first, size_t count, uint64_t seed) {
  size_t nblocks = (count + FILL_BLOCK - 1) / FILL_BLOCK;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (long long b = 0; b < (long long)nblocks; b++) {
    rng r;
    rng_seed(&r, seed ^ (0xd1b54a32d192ed03ull * ((first / FILL_BLOCK) + (uint64_t)b + 1)));
    size_t lo = (size_t)b * FILL_BLOCK;
    size_t hi = lo + FILL_BLOCK < count ? lo + FILL_BLOCK : count;
    for (size_t i = lo; i < hi; i++) {
      float x = normalish(rng_next(&r));
      if (dt == XENT_FLOAT32) ((float *)dst)[i] = x;
      else if (dt == XENT_BFLOAT16) ((uint16_t *)dst)[i] = to_bf16(x);
      else ((uint16_t *)dst)[i] = to_f16(x);
    }
  }
}

static void fill_targets(int64_t *t, int64_t bt, int64_t vocab, uint64_t seed) {
  rng r;
  rng_seed(&r, seed ^ 0x5851f42d4c957f2dull);
  for (int64_t i = 0; i < bt; i++) t[i] = (int64_t)(rng_next(&r) % (uint64_t)vocab);
}

/* ------------------------------------------------------------------------ */
/* Host memory and threads                                                   */
/* ------------------------------------------------------------------------ */

static void par_memcpy(void *dst, const void *src, size_t n, int threads) {
#ifdef _OPENMP
  if (threads > 1 && n >= ((size_t)1 << 20)) {
#pragma omp parallel num_threads(threads)
    {
      size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
      size_t chunk = ((n + nt - 1) / nt + 4095) & ~(size_t)4095;
      size_t lo = t * chunk;
      if (lo < n) {
        size_t len = lo + chunk < n ? chunk : n - lo;
        memcpy((char *)dst + lo, (const char *)src + lo, len);
      }
    }
    return;
  }
#else
  (void)threads;
#endif
  memcpy(dst, src, n);
}

/* Bytes of memory the kernel says are available (MemAvailable), or 0. */
static size_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long v;
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kb = (size_t)v;
      break;
    }
  }
  fclose(f);
  return kb * 1024;
}

static void cpu_model(char *out, size_t n) {
  snprintf(out, n, "cpu");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) == 0) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t len = strcspn(p, "\r\n");
        if (len >= n) len = n - 1;
        memcpy(out, p, len);
        out[len] = '\0';
      }
      break;
    }
  }
  fclose(f);
}

/* ------------------------------------------------------------------------ */
/* CSV                                                                       */
/* ------------------------------------------------------------------------ */

typedef struct csv_out {
  FILE *f;
  const char *provider;
  char device[256];
  char timestamp[32];
} csv_out;

static const char *csv_header =
    "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,"
    "x_value,y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,"
    "xent_version\n";

static void csv_field(FILE *f, const char *s) {
  if (strpbrk(s, ",\"\n\r") == NULL) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void csv_row(const csv_out *c, const char *mode, const char *metric, const char *unit,
                    const point *p, double y50, double y20, double y80, const char *extra) {
  if (!c->f) return;
  FILE *f = c->f;
  int by_vocab = strcmp(p->x_name, "V") == 0;
  fprintf(f, "cross_entropy,%s,%s,%s,%s,%s,%s,%lld,%.6g,%.6g,%.6g,", c->provider, mode, metric,
          unit, p->x_name, by_vocab ? "vocab size" : "B x T",
          (long long)(by_vocab ? p->vocab : p->bt), y50, y20, y80);
  csv_field(f, extra);
  fputc(',', f);
  csv_field(f, c->device);
  fprintf(f, ",%s,%s\n", c->timestamp, xent_version());
  fflush(f);
}

/* ------------------------------------------------------------------------ */
/* Results: table line and CSV rows for one (point, dtype, mode)             */
/* ------------------------------------------------------------------------ */

typedef struct result {
  stats ms;          /* time per call                                       */
  stats copy_ms;     /* the copy baseline's time for copy_bytes             */
  double copy_bytes; /* bytes read + written by the baseline copy           */
  double mem_bytes;  /* see "Memory" in the file comment                    */
} result;

static void print_table_header(int gpu) {
  printf("\n%-20s %-5s %-15s %10s  %-21s %9s %10s %6s\n", "shape", "dtype", "mode", "median ms",
         "(p20 / p80)", gpu ? "eff TB/s" : "eff GB/s", gpu ? "copy TB/s" : "copy GB/s",
         "ratio");
}

static void emit_result(const csv_out *csv, int gpu, const point *p, xent_dtype dt, int mode,
                        const result *r, const char *extra) {
  double bytes = fewest_bytes(mode, p->bt, p->vocab, dt);
  double eff50 = bytes / (r->ms.p50 * 1e-3), eff20 = bytes / (r->ms.p80 * 1e-3),
         eff80 = bytes / (r->ms.p20 * 1e-3);
  double cp50 = r->copy_bytes / (r->copy_ms.p50 * 1e-3),
         cp20 = r->copy_bytes / (r->copy_ms.p80 * 1e-3),
         cp80 = r->copy_bytes / (r->copy_ms.p20 * 1e-3);
  double unit = gpu ? 1e12 : 1e9;
  char shape[48];
  snprintf(shape, sizeof shape, "BT=%lld V=%lld", (long long)p->bt, (long long)p->vocab);
  printf("%-20s %-5s %-15s %10.4f  (%8.4f / %8.4f) %9.3f %10.3f %6.3f\n", shape, dtype_short(dt),
         mode_names[mode], r->ms.p50, r->ms.p20, r->ms.p80, eff50 / unit, cp50 / unit,
         eff50 / cp50);
  fflush(stdout);

  const char *m = mode_names[mode];
  double mb = r->mem_bytes / (1024.0 * 1024.0);
  csv_row(csv, m, "speed", "ms", p, r->ms.p50, r->ms.p20, r->ms.p80, extra);
  if (mode == MODE_FORWARD || mode == MODE_FULL) /* as the peer: the memory of a step */
    csv_row(csv, m, "memory", "MB", p, mb, mb, mb, extra);
  csv_row(csv, m, "eff_bandwidth", "TB/s", p, eff50 / 1e12, eff20 / 1e12, eff80 / 1e12, extra);
  csv_row(csv, m, "copy_bandwidth", "TB/s", p, cp50 / 1e12, cp20 / 1e12, cp80 / 1e12, extra);
  csv_row(csv, m, "copy_share", "ratio", p, eff50 / cp50, eff20 / cp50, eff80 / cp50, extra);
}

static void progress(int i, int n, const point *p, xent_dtype dt, double t0) {
  int tty = isatty(STDERR_FILENO);
  fprintf(stderr, "%s[%d/%d] BT=%lld V=%lld %s  elapsed %.1f s%s", tty ? "\r\033[K" : "", i, n,
          (long long)p->bt, (long long)p->vocab, dtype_short(dt), now_s() - t0, tty ? "" : "\n");
  fflush(stderr);
}

static void progress_done(void) {
  if (isatty(STDERR_FILENO)) fprintf(stderr, "\r\033[K");
}

/* ------------------------------------------------------------------------ */
/* CPU runner                                                                */
/* ------------------------------------------------------------------------ */

typedef struct cpu_ctx {
  void *pristine, *logits;
  int64_t *targets;
  float loss, grad_one, grad_half;
  float *row_loss; /* BT losses when the reduction is none */
  size_t bytes;
  xent_input in;
  xent_options opt;
  xent_output out;
  xent_exec ex;
  int threads;
} cpu_ctx;

static void cpu_release(cpu_ctx *c) {
  free(c->pristine);
  free(c->logits);
  free(c->targets);
  free(c->row_loss);
  c->pristine = c->logits = NULL;
  c->targets = NULL;
  c->row_loss = NULL;
}

static int cpu_prepare(cpu_ctx *c, const point *p, xent_dtype dt, int threads,
                       xent_reduction reduction, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->threads = threads;
  c->bytes = (size_t)p->bt * (size_t)p->vocab * dtype_size(dt);
  c->pristine = host_alloc(c->bytes);
  c->logits = host_alloc(c->bytes);
  c->targets = host_alloc((size_t)p->bt * sizeof(int64_t));
  if (reduction == XENT_REDUCTION_NONE) c->row_loss = host_alloc((size_t)p->bt * sizeof(float));
  if (!c->pristine || !c->logits || !c->targets ||
      (reduction == XENT_REDUCTION_NONE && !c->row_loss)) {
    fprintf(stderr, "xent-bench: host allocation of %zu bytes failed\n", 2 * c->bytes);
    cpu_release(c);
    return -1;
  }
  fill_logits(c->pristine, dt, 0, (size_t)p->bt * (size_t)p->vocab, seed);
  fill_targets(c->targets, p->bt, p->vocab, seed);
  par_memcpy(c->logits, c->pristine, c->bytes, threads); /* first touch */
  c->grad_one = 1.0f;
  c->grad_half = GRAD_OUTPUT_VALUE;
  xent_input in = {c->logits, dt, p->bt, p->vocab, 0, c->targets, XENT_INT64, NULL};
  c->in = in;
  c->opt = xent_options_default();
  c->opt.reduction = reduction;
  xent_output out = {c->row_loss ? c->row_loss : &c->loss, NULL, NULL, NULL, NULL};
  c->out = out;
  c->ex = xent_exec_default();
  c->ex.backend = XENT_BACKEND_CPU;
  c->ex.num_threads = threads;
  return 0;
}

/* One timed operation of `mode` on an already prepared call. go_half is the
 * backward mode's grad_output (!= 1), go_one the full mode's (1, skipped);
 * both live on the same side as the logits. */
static xent_status run_mode(const xent_input *in, const xent_options *opt, const xent_output *out,
                            const xent_exec *ex, const float *go_half, const float *go_one,
                            int mode, const char **what) {
  xent_status st;
  switch (mode) {
    case MODE_FORWARD:
      *what = "xent_forward_grad";
      return xent_forward_grad(in, opt, out, ex);
    case MODE_BACKWARD:
      *what = "xent_backward";
      return xent_backward(in->logits, in->dtype, in->rows, in->vocab, 0, go_half, 1, ex);
    case MODE_FULL:
      *what = "xent_forward_grad";
      st = xent_forward_grad(in, opt, out, ex);
      if (st) return st;
      *what = "xent_backward";
      return xent_backward(in->logits, in->dtype, in->rows, in->vocab, 0, go_one, 1, ex);
    default:
      *what = "xent_forward";
      return xent_forward(in, opt, out, ex);
  }
}

static xent_status cpu_call(cpu_ctx *c, int mode, const char **what) {
  return run_mode(&c->in, &c->opt, &c->out, &c->ex, &c->grad_half, &c->grad_one, mode, what);
}

static int cpu_time_mode(cpu_ctx *c, int mode, int iters, int warmup, stats *out) {
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int it = 0; it < warmup + iters; it++) {
    par_memcpy(c->logits, c->pristine, c->bytes, c->threads);
    const char *what = "";
    if (mode == MODE_BACKWARD) {
      xent_status st = xent_forward_grad(&c->in, &c->opt, &c->out, &c->ex);
      if (st) {
        report_xent("xent_forward_grad", st);
        free(t);
        return -1;
      }
    }
    double t0 = now_s();
    xent_status st = cpu_call(c, mode, &what);
    double t1 = now_s();
    if (st) {
      report_xent(what, st);
      free(t);
      return -1;
    }
    if (it >= warmup) t[it - warmup] = (t1 - t0) * 1e3;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}

static int cpu_time_copy(cpu_ctx *c, int iters, int warmup, stats *out) {
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int it = 0; it < warmup + iters; it++) {
    double t0 = now_s();
    par_memcpy(c->logits, c->pristine, c->bytes, c->threads);
    double t1 = now_s();
    if (it >= warmup) t[it - warmup] = (t1 - t0) * 1e3;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}

/* ------------------------------------------------------------------------ */
/* GPU runner                                                                */
/* ------------------------------------------------------------------------ */

#ifdef XENT_BENCH_CUDA

#define CUDA_OK(call)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "xent-bench: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), \
              __FILE__, __LINE__);                                                         \
      return -1;                                                                           \
    }                                                                                      \
  } while (0)

typedef struct gpu_ctx {
  int device;
  cudaStream_t stream;
  void *flush;           /* FLUSH_BYTES of scratch that evicts the L2      */
  cudaEvent_t *ev0, *ev1;
  int n_events;
  /* per point */
  void *pristine, *logits;
  int64_t *targets;
  float *scalars;        /* [0] loss, [1] 1.0, [2] GRAD_OUTPUT_VALUE        */
  void *workspace;
  size_t workspace_bytes, bytes;
  xent_input in;
  xent_options opt;
  xent_output out;
  xent_exec ex;
  int checked;           /* XENT_TARGETS_CHECKED instead of UNCHECKED       */
  xent_reduction reduction;
  float *row_loss;       /* BT losses when the reduction is none            */
  int flush_read;        /* flush by reading FLUSH_BYTES, not writing them  */
} gpu_ctx;

static int gpu_init(gpu_ctx *g, int device, int n_events) {
  memset(g, 0, sizeof *g);
  g->device = device;
  CUDA_OK(cudaSetDevice(device));
  CUDA_OK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&g->flush, FLUSH_BYTES));
  g->ev0 = calloc((size_t)n_events, sizeof(cudaEvent_t));
  g->ev1 = calloc((size_t)n_events, sizeof(cudaEvent_t));
  if (!g->ev0 || !g->ev1) return -1;
  for (int i = 0; i < n_events; i++) {
    CUDA_OK(cudaEventCreate(&g->ev0[i]));
    CUDA_OK(cudaEventCreate(&g->ev1[i]));
    g->n_events = i + 1;
  }
  return 0;
}

static void gpu_shutdown(gpu_ctx *g) {
  for (int i = 0; i < g->n_events; i++) {
    cudaEventDestroy(g->ev0[i]);
    cudaEventDestroy(g->ev1[i]);
  }
  free(g->ev0);
  free(g->ev1);
  if (g->flush) cudaFree(g->flush);
  if (g->stream) cudaStreamDestroy(g->stream);
}

static void gpu_release(gpu_ctx *g) {
  cudaStreamSynchronize(g->stream);
  if (g->pristine) cudaFree(g->pristine);
  if (g->logits) cudaFree(g->logits);
  if (g->targets) cudaFree(g->targets);
  if (g->scalars) cudaFree(g->scalars);
  if (g->workspace) cudaFree(g->workspace);
  if (g->row_loss) cudaFree(g->row_loss);
  g->pristine = g->logits = g->workspace = NULL;
  g->row_loss = NULL;
  g->targets = NULL;
  g->scalars = NULL;
}

/* Bytes a point needs on the device (pristine + logits + the small rest). */
static size_t gpu_need_bytes(const point *p, xent_dtype dt) {
  size_t x = (size_t)p->bt * (size_t)p->vocab * dtype_size(dt);
  return 2 * x + (size_t)p->bt * 8 + xent_workspace_size(p->bt) + ((size_t)64 << 20);
}

static int gpu_fits(const point *p, xent_dtype dt, size_t *free_out) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  *free_out = free_b;
  return gpu_need_bytes(p, dt) <= free_b;
}

/* Copy a host-generated stream of logits to the device in chunks. */
static int gpu_fill_pristine(gpu_ctx *g, xent_dtype dt, size_t count, uint64_t seed) {
  const size_t chunk = (size_t)64 << 20; /* elements, a multiple of FILL_BLOCK */
  size_t es = dtype_size(dt);
  size_t n = count < chunk ? count : chunk;
  void *host = NULL;
  int pinned = cudaMallocHost(&host, n * es) == cudaSuccess;
  if (!pinned) {
    cudaGetLastError();
    host = host_alloc(n * es);
    if (!host) return -1;
  }
  int rc = 0;
  for (size_t first = 0; first < count; first += chunk) {
    size_t m = count - first < chunk ? count - first : chunk;
    fill_logits(host, dt, first, m, seed);
    if (cudaMemcpy((char *)g->pristine + first * es, host, m * es, cudaMemcpyHostToDevice) !=
        cudaSuccess) {
      fprintf(stderr, "xent-bench: copying the logits to the device failed\n");
      rc = -1;
      break;
    }
  }
  if (pinned) cudaFreeHost(host);
  else free(host);
  return rc;
}

static int gpu_prepare(gpu_ctx *g, const point *p, xent_dtype dt, uint64_t seed) {
  size_t count = (size_t)p->bt * (size_t)p->vocab;
  g->bytes = count * dtype_size(dt);
  g->workspace_bytes = xent_workspace_size(p->bt);
  CUDA_OK(cudaMalloc(&g->pristine, g->bytes));
  CUDA_OK(cudaMalloc(&g->logits, g->bytes));
  CUDA_OK(cudaMalloc((void **)&g->targets, (size_t)p->bt * sizeof(int64_t) + 8));
  CUDA_OK(cudaMalloc((void **)&g->scalars, 4 * sizeof(float)));
  CUDA_OK(cudaMalloc(&g->workspace, g->workspace_bytes));
  if (g->reduction == XENT_REDUCTION_NONE)
    CUDA_OK(cudaMalloc((void **)&g->row_loss, (size_t)p->bt * sizeof(float)));
  if (gpu_fill_pristine(g, dt, count, seed)) return -1;

  int64_t *ht = host_alloc((size_t)p->bt * sizeof(int64_t));
  if (!ht) return -1;
  fill_targets(ht, p->bt, p->vocab, seed);
  cudaError_t e = cudaMemcpy(g->targets, ht, (size_t)p->bt * sizeof(int64_t),
                             cudaMemcpyHostToDevice);
  free(ht);
  CUDA_OK(e);
  float hs[4] = {0.0f, 1.0f, GRAD_OUTPUT_VALUE, 0.0f};
  CUDA_OK(cudaMemcpy(g->scalars, hs, sizeof hs, cudaMemcpyHostToDevice));

  xent_input in = {g->logits, dt, p->bt, p->vocab, 0, g->targets, XENT_INT64, NULL};
  g->in = in;
  g->opt = xent_options_default();
  g->opt.target_check = g->checked ? XENT_TARGETS_CHECKED : XENT_TARGETS_UNCHECKED;
  g->opt.reduction = g->reduction;
  xent_output out = {g->row_loss ? g->row_loss : &g->scalars[0], NULL, NULL, NULL, NULL};
  g->out = out;
  g->ex = xent_exec_default();
  g->ex.backend = XENT_BACKEND_CUDA;
  g->ex.device = g->device;
  g->ex.stream = (void *)g->stream;
  g->ex.workspace = g->workspace;
  g->ex.workspace_bytes = g->workspace_bytes;
  return 0;
}

static xent_status gpu_call(gpu_ctx *g, int mode, const char **what) {
  return run_mode(&g->in, &g->opt, &g->out, &g->ex, &g->scalars[2], &g->scalars[1], mode, what);
}

/* Evict the L2: the logits' lines go back to normal L2 priority, then 256
 * MiB of scratch are written (or, with --flush read, read: the L2 is left
 * holding clean lines, none for the timed call to write back). Without the
 * first step, lines a forward loaded evict-last outlive the flush
 * (bench/NOTES.md v10). */
static int gpu_flush(gpu_ctx *g, int it) {
  if (xent_tune_l2_normal(g->logits, g->bytes, g->stream)) return -1;
  if (g->flush_read) {
    if (xent_tune_l2_read(g->flush, FLUSH_BYTES, g->stream)) return -1;
  } else {
    CUDA_OK(cudaMemsetAsync(g->flush, it & 0xff, FLUSH_BYTES, g->stream));
  }
  return 0;
}

/* Refresh the logits from the pristine copy and evict the L2: untimed. */
static int gpu_refresh(gpu_ctx *g, int it) {
  CUDA_OK(cudaMemcpyAsync(g->logits, g->pristine, g->bytes, cudaMemcpyDeviceToDevice, g->stream));
  return gpu_flush(g, it);
}

/* Time `mode` (or, with backward_one, xent_backward with grad_output 1). */
static int gpu_time_mode(gpu_ctx *g, int mode, int backward_one, int iters, int warmup,
                         stats *out, xent_status *st_out) {
  if (iters > g->n_events) iters = g->n_events;
  *st_out = XENT_OK;
  for (int it = 0; it < warmup + iters; it++) {
    if (gpu_refresh(g, it)) return -1;
    if (mode == MODE_BACKWARD) {
      xent_status st = xent_forward_grad(&g->in, &g->opt, &g->out, &g->ex);
      if (st) {
        report_xent("xent_forward_grad", st);
        *st_out = st;
        return -1;
      }
      if (gpu_flush(g, it + 1)) return -1;
    }
    int timed = it >= warmup;
    if (timed) CUDA_OK(cudaEventRecord(g->ev0[it - warmup], g->stream));
    const char *what = "";
    xent_status st;
    if (backward_one) {
      what = "xent_backward";
      st = xent_backward(g->logits, g->in.dtype, g->in.rows, g->in.vocab, 0, &g->scalars[1], 1,
                         &g->ex);
    } else {
      st = gpu_call(g, mode, &what);
    }
    if (st) {
      if (st != XENT_ERROR_UNSUPPORTED) report_xent(what, st);
      *st_out = st;
      cudaStreamSynchronize(g->stream);
      return -1;
    }
    if (timed) CUDA_OK(cudaEventRecord(g->ev1[it - warmup], g->stream));
  }
  CUDA_OK(cudaStreamSynchronize(g->stream));
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) return -1;
  for (int i = 0; i < iters; i++) {
    float ms = 0.0f;
    cudaError_t e = cudaEventElapsedTime(&ms, g->ev0[i], g->ev1[i]);
    if (e != cudaSuccess) {
      fprintf(stderr, "xent-bench: cudaEventElapsedTime failed: %s\n", cudaGetErrorString(e));
      free(t);
      return -1;
    }
    t[i] = ms;
  }
  *out = summarize(t, iters);
  free(t);
  return 0;
}

/* Device-to-device copy of a large buffer: returns the median stats, and the
 * bytes read + written per copy in *bytes_out. */
static int gpu_copy_bandwidth(gpu_ctx *g, int iters, int warmup, stats *out, double *bytes_out) {
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  size_t n = COPY_BYTES;
  while (n > ((size_t)64 << 20) && 2 * n + ((size_t)256 << 20) > free_b) n /= 2;
  void *a = NULL, *b = NULL;
  CUDA_OK(cudaMalloc(&a, n));
  if (cudaMalloc(&b, n) != cudaSuccess) {
    cudaFree(a);
    fprintf(stderr, "xent-bench: no room for the copy baseline\n");
    return -1;
  }
  CUDA_OK(cudaMemset(a, 1, n));
  CUDA_OK(cudaMemset(b, 2, n));
  if (iters > g->n_events) iters = g->n_events;
  int rc = 0;
  double *t = malloc(sizeof(double) * (size_t)iters);
  if (!t) rc = -1;
  for (int it = 0; rc == 0 && it < warmup + iters; it++) {
    int timed = it >= warmup;
    if (timed && cudaEventRecord(g->ev0[it - warmup], g->stream) != cudaSuccess) rc = -1;
    if (cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, g->stream) != cudaSuccess) rc = -1;
    if (timed && cudaEventRecord(g->ev1[it - warmup], g->stream) != cudaSuccess) rc = -1;
  }
  if (rc == 0 && cudaStreamSynchronize(g->stream) != cudaSuccess) rc = -1;
  for (int i = 0; rc == 0 && i < iters; i++) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, g->ev0[i], g->ev1[i]) != cudaSuccess) rc = -1;
    t[i] = ms;
  }
  if (rc == 0) {
    *out = summarize(t, iters);
    *bytes_out = 2.0 * (double)n;
  } else {
    fprintf(stderr, "xent-bench: the copy baseline failed\n");
  }
  free(t);
  cudaFree(a);
  cudaFree(b);
  return rc;
}

#endif /* XENT_BENCH_CUDA */

/* The line for a point that does not fit: `need` and `have` bytes on the
 * device (gpu) or in host memory. */
static void print_skip(const point *p, xent_dtype dt, double need, double have, int gpu) {
  printf("BT=%lld V=%lld %s: skipped, needs %.1f GB %s and %.1f GB are %s\n", (long long)p->bt,
         (long long)p->vocab, dtype_short(dt), need / 1e9, gpu ? "on the device" : "of host memory",
         have / 1e9, gpu ? "free" : "available");
}

/* ------------------------------------------------------------------------ */
/* Tuning (GPU)                                                              */
/* ------------------------------------------------------------------------ */

#ifdef XENT_BENCH_CUDA

static const int64_t tune_vocab_values[] = {32000, 50304, 128256, 152064, 262144};
/* Launch candidates for --tune: {path, cluster, threads, size}, as
 * xent_tune_override takes them. Path 1 two-read (a row per cluster of
 * `cluster` blocks; size bit 0: L2 eviction policies, bit 1: the kernel that
 * reads the statistics flags at run time), 6 keep (two-read holding each
 * thread's first `size` vectors in shared memory; over a cluster, each
 * block's slice of the row; 7: the same with a row per block or cluster
 * instead of a persistent grid), 8 a row per warp (forward without gradient
 * only; with one it reports unsupported), 9 staged (size = chunks held in
 * registers * 1000000 + chunks pass 2 reuses from shared memory * 100000 +
 * hint * 10000 + vectors per thread and chunk * 100 + chunks; 10: every
 * grid-th row, no row counter), 11 segment (forward without gradient only,
 * the plain kernel; size = vectors a thread, 4 or 8). The
 * one-read (2), ring (3, 4) and stream (5) kernels lost to two-read at every size measured
 * (bench/NOTES.md v1, v4, v5) and are left out of the sweep;
 * xent_tune_override still runs them. */
static const int tune_candidates[][4] = {
    {1, 1, 256, 0},  {1, 1, 512, 0},   {1, 1, 1024, 0}, {1, 1, 512, 2},
    {1, 1, 1024, 3}, {1, 1, 512, 1},   {1, 1, 1024, 1}, {6, 1, 256, 13},
    {6, 1, 512, 13}, {6, 1, 1024, 14}, {6, 1, 512, 0},  {6, 1, 1024, 0},
    {1, 2, 512, 0},  {1, 2, 1024, 0},  {1, 4, 512, 0},  {6, 2, 512, 13},
    {6, 2, 1024, 14}, {6, 4, 512, 13}, {7, 1, 512, 13}, {7, 2, 512, 13},
    {7, 4, 512, 13}, {7, 1, 256, 13}, {1, 1, 128, 0},  {7, 1, 128, 13},
    {8, 1, 64, 0},   {8, 1, 128, 0},   {8, 1, 256, 0},  {9, 1, 416, 10804},
    {9, 1, 448, 10804}, {9, 1, 480, 10406}, {10, 1, 416, 10804}, {10, 2, 416, 10804},
    {10, 4, 416, 10804}, {9, 1, 64, 10806}, {9, 1, 128, 10806}, {9, 1, 416, 310804},
    {9, 1, 416, 410804}, {10, 2, 416, 310804}, {10, 4, 416, 310804}, {9, 1, 416, 200804},
    {11, 1, 256, 8},  {11, 1, 128, 8}, {11, 1, 128, 4}, {11, 1, 64, 8}, {11, 1, 64, 4}};

typedef struct tune_ref {
  float loss;
  float *rows; /* 3 rows of the gradient, as float */
  int64_t vocab;
} tune_ref;

static float elem_as_float(const void *base, size_t i, xent_dtype dt) {
  if (dt == XENT_FLOAT32) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  if (dt == XENT_BFLOAT16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  /* fp16 */
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu, u;
  if (em >= 0x0400u) u = (em << 13) + (112u << 23);
  else {
    float m = (float)em * 0x1p-24f;
    memcpy(&u, &m, 4);
  }
  u |= sign;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Read back the loss and rows 0, BT/2, BT-1 of the gradient. */
static int tune_snapshot(gpu_ctx *g, tune_ref *r) {
  size_t es = dtype_size(g->in.dtype), v = (size_t)g->in.vocab;
  int64_t rows[3] = {0, g->in.rows / 2, g->in.rows - 1};
  void *tmp = host_alloc(v * es);
  if (!tmp) return -1;
  if (!r->rows || r->vocab != g->in.vocab) {
    free(r->rows);
    r->rows = malloc(3 * v * sizeof(float));
  }
  r->vocab = g->in.vocab;
  if (!r->rows) {
    free(tmp);
    return -1;
  }
  int rc = 0;
  if (cudaStreamSynchronize(g->stream) != cudaSuccess ||
      cudaMemcpy(&r->loss, &g->scalars[0], sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
    rc = -1;
  for (int k = 0; rc == 0 && k < 3; k++) {
    if (cudaMemcpy(tmp, (char *)g->logits + (size_t)rows[k] * v * es, v * es,
                   cudaMemcpyDeviceToHost) != cudaSuccess) {
      rc = -1;
      break;
    }
    for (size_t j = 0; j < v; j++) r->rows[(size_t)k * v + j] = elem_as_float(tmp, j, g->in.dtype);
  }
  free(tmp);
  return rc;
}

/* 1 when the candidate's loss and sampled gradient rows agree with the
 * default launch's. */
static int tune_agrees(const tune_ref *ref, const tune_ref *got, xent_dtype dt) {
  if (!(fabsf(got->loss - ref->loss) <= 1e-4f * fabsf(ref->loss) + 1e-6f)) return 0;
  double tol = dt == XENT_FLOAT32 ? 1e-4 : 2e-2;
  size_t v = (size_t)ref->vocab;
  for (int k = 0; k < 3; k++) {
    const float *a = ref->rows + (size_t)k * v, *b = got->rows + (size_t)k * v;
    double row_max = 0.0, worst = 0.0;
    for (size_t j = 0; j < v; j++) {
      double d = fabs((double)a[j] - (double)b[j]);
      if (!(d <= worst)) worst = d; /* also catches NaN */
      if (fabs((double)a[j]) > row_max) row_max = fabs((double)a[j]);
    }
    if (!(worst <= tol * row_max)) return 0;
  }
  return 1;
}

typedef struct tune_best {
  char shape[64];
  char default_launch[128];
  double default_ms;
  char best[96];
  double best_ms;
} tune_best;

static int run_tune(gpu_ctx *g, const config *cfg, int iters, int warmup) {
  const int mode = cfg->modes_given && cfg->modes[MODE_FORWARD_NOGRAD] && !cfg->modes[MODE_FORWARD]
                       ? MODE_FORWARD_NOGRAD
                       : MODE_FORWARD;
  /* --vocab N: that V alone; --dtype: those dtypes (default bf16, fp32). */
  const int64_t *vocabs = cfg->vocab ? &cfg->vocab : tune_vocab_values;
  const int n_vocabs =
      cfg->vocab ? 1 : (int)(sizeof tune_vocab_values / sizeof tune_vocab_values[0]);
  int64_t bt = cfg->bt ? cfg->bt : 8192;
  tune_best summary[MAX_DTYPES * (sizeof tune_vocab_values / sizeof tune_vocab_values[0])];
  int n_summary = 0;
  double t0 = now_s();
  int n_shapes = cfg->n_dtypes * n_vocabs;
  int shape_i = 0;
  tune_ref ref = {0}, got = {0};
  int rc = 0;

  printf("\ntuning: %s, BT=%lld, %d timed iterations after %d warm-up per candidate\n",
         mode == MODE_FORWARD ? "fwd+grad" : "forward without gradient", (long long)bt, iters,
         warmup);
  for (int d = 0; d < cfg->n_dtypes; d++) {
    for (int vi = 0; vi < n_vocabs; vi++) {
      point p = {bt, vocabs[vi], "V"};
      xent_dtype dt = cfg->dtypes[d];
      size_t free_b = 0;
      progress(++shape_i, n_shapes, &p, dt, t0);
      if (!gpu_fits(&p, dt, &free_b)) {
        progress_done();
        printf("\n");
        print_skip(&p, dt, (double)gpu_need_bytes(&p, dt), (double)free_b, 1);
        continue;
      }
      if (gpu_prepare(g, &p, dt, cfg->seed)) {
        gpu_release(g);
        rc = -1;
        break;
      }
      progress_done();
      tune_best *tb = &summary[n_summary++];
      snprintf(tb->shape, sizeof tb->shape, "BT=%lld V=%lld %s", (long long)p.bt,
               (long long)p.vocab, dtype_short(dt));
      printf("\n%s\n", tb->shape);

      stats s;
      xent_status st;
      xent_tune_override(0, 0, 0, 0);
      if (gpu_time_mode(g, mode, 0, iters, warmup, &s, &st) || tune_snapshot(g, &ref)) {
        gpu_release(g);
        rc = -1;
        break;
      }
      snprintf(tb->default_launch, sizeof tb->default_launch, "%s", xent_tune_last_launch());
      tb->default_ms = s.p50;
      snprintf(tb->best, sizeof tb->best, "default");
      tb->best_ms = s.p50;
      printf("  %-34s %9.4f ms  (%s)\n", "default", s.p50, tb->default_launch);

      /* --launch with --tune: those candidates instead of the list */
      const size_t n_cand = cfg->launch_given ? (size_t)cfg->launch_given
                                              : sizeof tune_candidates / sizeof tune_candidates[0];
      for (size_t ci = 0; ci < n_cand; ci++) {
        const int *cand = cfg->launch_given ? cfg->launch[ci] : tune_candidates[ci];
        int pa = cand[0], cl = cand[1], th = cand[2], sz = cand[3];
        char name[96];
        if (pa == 1)
          snprintf(name, sizeof name, "two-read cluster=%d threads=%d%s%s", cl, th,
                   (sz & 1) ? " l2-hint" : "", (sz & 2) ? " stats" : "");
        else if (pa == 6 || pa == 7)
          snprintf(name, sizeof name, "keep cluster=%d threads=%d smem<=%d%s", cl, th, sz,
                   pa == 7 ? " per-row" : "");
        else if (pa == 9 || pa == 10)
          snprintf(name, sizeof name,
                   "staged cluster=%d threads=%d+32 vecs=%d slots=%d reuse=%d hold=%d%s%s", cl,
                   th, sz / 100 % 100, sz % 100, sz / 100000 % 10, sz / 1000000 % 10,
                   sz / 10000 % 10 ? " l2-hint" : "", pa == 10 ? " static" : "");
        else if (pa == 11)
          snprintf(name, sizeof name, "segment threads=%d vecs=%d", th, sz);
        else if (pa == 8)
          snprintf(name, sizeof name, "warp threads=%d vecs=%d split=%d", th, sz % 100,
                   sz / 100 > 1 ? sz / 100 : 1);
        else /* only --launch reaches the others (2 to 5) */
          snprintf(name, sizeof name, "path %d cluster=%d threads=%d size=%d", pa, cl, th, sz);
        xent_tune_override(pa, cl, th, sz);
        if (gpu_time_mode(g, mode, 0, iters, warmup, &s, &st)) {
          if (st == XENT_ERROR_UNSUPPORTED) {
            printf("  %-34s %12s\n", name, "unsupported");
            continue;
          }
          printf("  %-34s failed (%s)\n", name, xent_status_string(st));
          if (st == XENT_ERROR_CUDA || st == XENT_OK) {
            rc = -1;
            goto done_shape;
          }
          continue;
        }
        if (tune_snapshot(g, &got)) {
          rc = -1;
          goto done_shape;
        }
        int ok = tune_agrees(&ref, &got, dt);
        printf("  %-34s %9.4f ms  (%8.4f / %8.4f)  x%.3f%s  [%s]\n", name, s.p50, s.p20, s.p80,
               tb->default_ms / s.p50, ok ? "" : "  RESULT MISMATCH", xent_tune_last_launch());
        if (ok && s.p50 < tb->best_ms) {
          tb->best_ms = s.p50;
          snprintf(tb->best, sizeof tb->best, "%s", name);
        }
      }
    done_shape:
      xent_tune_override(0, 0, 0, 0);
      printf("  best: %s  %.4f ms (default %.4f ms, %s)\n", tb->best, tb->best_ms, tb->default_ms,
             tb->default_launch);
      gpu_release(g);
      if (rc) break;
    }
    if (rc) break;
  }
  xent_tune_override(0, 0, 0, 0);
  free(ref.rows);
  free(got.rows);

  printf("\n%-22s %-40s %10s  %-34s %10s %7s\n", "shape", "default launch", "ms", "best", "ms",
         "gain");
  for (int i = 0; i < n_summary; i++)
    printf("%-22s %-40s %10.4f  %-34s %10.4f %7.3f\n", summary[i].shape,
           summary[i].default_launch, summary[i].default_ms, summary[i].best, summary[i].best_ms,
           summary[i].default_ms / summary[i].best_ms);
  return rc;
}

#endif /* XENT_BENCH_CUDA */

/* ------------------------------------------------------------------------ */
/* Arguments                                                                 */
/* ------------------------------------------------------------------------ */

static void usage(void) {
  printf(
      "usage: xent-bench [flags]\n"
      "\n"
      "Times xent's fused cross-entropy on the GPU when there is one, else on the CPU.\n"
      "Without flags: fwd+grad at BT=8192, V = 32000, 128256, 262144 (GPU) or BT=4096,\n"
      "V=32000 (CPU), bf16 and fp32.\n"
      "\n"
      "  --cpu | --gpu             force the backend\n"
      "  --sweep vocab|bt|all      V in {32000 ... 262144} at BT=8192, BT in {1024 ... 65536}\n"
      "                            at V=128256; points that do not fit are skipped\n"
      "  --mode M[,M...]           forward | backward | full | forward_nograd | all\n"
      "                            (default forward; all for --quick)\n"
      "  --dtype D[,D...]          bf16 | fp32 | fp16 | all (= bf16,fp32; default all)\n"
      "  --bt N, --vocab N         a single point (the other one defaults)\n"
      "  --iters N, --warmup N     timed and warm-up iterations (default 40 and 20;\n"
      "                            --tune: 20 and 5; --quick: 5 and 3)\n"
      "  --threads N               CPU threads (default: the library's)\n"
      "  --csv FILE                write the results as CSV\n"
      "  --quick                   tiny shapes, few iterations (a smoke test)\n"
      "  --tune                    GPU: time every launch configuration of fwd+grad\n"
      "                            (--mode forward_nograd: of the forward alone;\n"
      "                            --vocab N: that V only; --dtype as above)\n"
      "  --launch P,C,T,S          GPU: force one launch of the forward kernels, as\n"
      "                            xent_tune_override(path, cluster, threads, size)\n"
      "                            takes it (src/cuda/tune.h); a point it cannot run\n"
      "                            fails. With --tune, a list 'P,C,T,S;P,C,T,S;...'\n"
      "                            (up to 32) replaces the built-in candidates\n"
      "  --scale-waves N           GPU: the backward's grid in waves of resident\n"
      "                            blocks (xent_tune_backward; -1: a block per item)\n"
      "  --checked                 GPU: the default checked mode (the forward waits\n"
      "                            for the device's target check) instead of\n"
      "                            XENT_TARGETS_UNCHECKED\n"
      "  --reduction mean|sum|none the loss's reduction (default mean); none writes\n"
      "                            BT losses (no finalize kernel after the forward)\n"
      "  --flush write|read        GPU: the L2 flush before each timed call writes\n"
      "                            256 MiB (default) or reads them, which leaves no\n"
      "                            dirty lines for the timed call to write back\n"
      "  --no-pdl                  GPU: launch every kernel in the ordinary way, not\n"
      "                            programmatically behind the one ahead (sm_90+)\n"
      "  --pdl N                   GPU: 0 as --no-pdl, 1 the library's rule (default),\n"
      "                            2 every launch programmatic, clustered forwards too\n"
      "  --seed N                  random inputs' seed (default 1234)\n"
      "  --help\n");
}

static long long parse_int(const char *flag, const char *s, long long lo, long long hi) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !end || *end || v < lo || v > hi)
    die_usage("%s wants an integer in [%lld, %lld], got '%s'", flag, lo, hi, s);
  return v;
}

/* --launch P,C,T,S[;P,C,T,S...]: four integers for xent_tune_override,
 * each; several (with --tune) are the candidates to time. */
static void parse_launch(config *c, const char *s) {
  static const long long lo[4] = {1, 0, 32, 0}, hi[4] = {11, 8, 1024, 9999999};
  static const char *what[4] = {"path", "cluster", "threads", "size"};
  char list[MAX_LAUNCHES * 32];
  if (strlen(s) >= sizeof list) die_usage("--launch: list too long, got '%s'", s);
  strcpy(list, s);
  c->launch_given = 0;
  char *lsave = NULL;
  for (char *one = strtok_r(list, ";", &lsave); one; one = strtok_r(NULL, ";", &lsave)) {
    if (c->launch_given == MAX_LAUNCHES)
      die_usage("--launch takes at most %d launches, got '%s'", MAX_LAUNCHES, s);
    int *l = c->launch[c->launch_given++];
    char *save = NULL, *tok = strtok_r(one, ",", &save);
    for (int k = 0; k < 4; k++, tok = strtok_r(NULL, ",", &save)) {
      if (!tok) die_usage("--launch wants four integers P,C,T,S, got '%s'", s);
      char flag[32];
      snprintf(flag, sizeof flag, "--launch %s", what[k]);
      l[k] = (int)parse_int(flag, tok, lo[k], hi[k]);
    }
    if (tok) die_usage("--launch wants four integers P,C,T,S, got '%s'", s);
  }
  if (!c->launch_given) die_usage("--launch wants P,C,T,S, got '%s'", s);
}

static void parse_dtypes(config *c, const char *s) {
  c->n_dtypes = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "all")) {
      c->dtypes[0] = XENT_BFLOAT16;
      c->dtypes[1] = XENT_FLOAT32;
      c->n_dtypes = 2;
      continue;
    }
    xent_dtype dt;
    if (!strcmp(tok, "bf16") || !strcmp(tok, "bfloat16")) dt = XENT_BFLOAT16;
    else if (!strcmp(tok, "fp32") || !strcmp(tok, "float32") || !strcmp(tok, "f32"))
      dt = XENT_FLOAT32;
    else if (!strcmp(tok, "fp16") || !strcmp(tok, "float16") || !strcmp(tok, "f16"))
      dt = XENT_FLOAT16;
    else die_usage("unknown dtype '%s'", tok);
    int dup = 0;
    for (int i = 0; i < c->n_dtypes; i++) dup |= c->dtypes[i] == dt;
    if (!dup && c->n_dtypes < MAX_DTYPES) c->dtypes[c->n_dtypes++] = dt;
  }
  if (c->n_dtypes == 0) die_usage("--dtype needs a value");
}

static void parse_modes(config *c, const char *s) {
  memset(c->modes, 0, sizeof c->modes);
  c->modes_given = 1;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  int any = 0;
  for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    if (!strcmp(tok, "all")) {
      for (int m = 0; m < MODE_COUNT; m++) c->modes[m] = 1;
      any = 1;
      continue;
    }
    int found = 0;
    for (int m = 0; m < MODE_COUNT; m++)
      if (!strcmp(tok, mode_names[m])) c->modes[m] = found = 1;
    if (!found) die_usage("unknown mode '%s'", tok);
    any = 1;
  }
  if (!any) die_usage("--mode needs a value");
}

static void parse_args(config *c, int argc, char **argv) {
  memset(c, 0, sizeof *c);
  c->iters = c->warmup = c->pdl = -1;
  c->seed = 1234;
  c->dtypes[0] = XENT_BFLOAT16;
  c->dtypes[1] = XENT_FLOAT32;
  c->n_dtypes = 2;
  c->modes[MODE_FORWARD] = 1;
  for (int i = 1; i < argc; i++) {
    char *arg = argv[i], *val = NULL;
    char name[64];
    snprintf(name, sizeof name, "%s", arg);
    char *eq = strchr(name, '=');
    if (eq) {
      *eq = '\0';
      val = arg + (eq - name) + 1;
    }
#define NEXT_VAL()                                                      \
  do {                                                                  \
    if (!val) {                                                         \
      if (i + 1 >= argc) die_usage("%s needs a value", name);           \
      val = argv[++i];                                                  \
    }                                                                   \
  } while (0)
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
      usage();
      exit(0);
    } else if (!strcmp(name, "--cpu")) c->force_cpu = 1;
    else if (!strcmp(name, "--gpu")) c->force_gpu = 1;
    else if (!strcmp(name, "--quick")) c->quick = 1;
    else if (!strcmp(name, "--tune")) c->tune = 1;
    else if (!strcmp(name, "--checked")) c->checked = 1;
    else if (!strcmp(name, "--no-pdl")) c->pdl = 0;
    else if (!strcmp(name, "--pdl")) {
      NEXT_VAL();
      c->pdl = (int)parse_int(name, val, 0, 2);
    }
    else if (!strcmp(name, "--reduction")) {
      NEXT_VAL();
      if (!strcmp(val, "mean")) c->reduction = XENT_REDUCTION_MEAN;
      else if (!strcmp(val, "sum")) c->reduction = XENT_REDUCTION_SUM;
      else if (!strcmp(val, "none")) c->reduction = XENT_REDUCTION_NONE;
      else die_usage("--reduction wants mean, sum or none, got '%s'", val);
    }
    else if (!strcmp(name, "--flush")) {
      NEXT_VAL();
      if (!strcmp(val, "write")) c->flush_read = 0;
      else if (!strcmp(val, "read")) c->flush_read = 1;
      else die_usage("--flush wants write or read, got '%s'", val);
    }
    else if (!strcmp(name, "--launch")) {
      NEXT_VAL();
      parse_launch(c, val);
    } else if (!strcmp(name, "--scale-waves")) {
      NEXT_VAL();
      c->scale_waves = (int)parse_int("--scale-waves", val, -1, 1024);
    }
    else if (!strcmp(name, "--sweep")) {
      NEXT_VAL();
      if (!strcmp(val, "vocab")) c->sweep_vocab = 1;
      else if (!strcmp(val, "bt")) c->sweep_bt = 1;
      else if (!strcmp(val, "all")) c->sweep_vocab = c->sweep_bt = 1;
      else die_usage("--sweep wants vocab, bt or all, got '%s'", val);
    } else if (!strcmp(name, "--mode")) {
      NEXT_VAL();
      parse_modes(c, val);
    } else if (!strcmp(name, "--dtype")) {
      NEXT_VAL();
      parse_dtypes(c, val);
    } else if (!strcmp(name, "--bt")) {
      NEXT_VAL();
      c->bt = parse_int(name, val, 1, (long long)1 << 40);
    } else if (!strcmp(name, "--vocab")) {
      NEXT_VAL();
      c->vocab = parse_int(name, val, 1, INT32_MAX);
    } else if (!strcmp(name, "--iters")) {
      NEXT_VAL();
      c->iters = (int)parse_int(name, val, 1, 100000);
    } else if (!strcmp(name, "--warmup")) {
      NEXT_VAL();
      c->warmup = (int)parse_int(name, val, 0, 100000);
    } else if (!strcmp(name, "--threads")) {
      NEXT_VAL();
      c->threads = (int)parse_int(name, val, 0, 4096);
    } else if (!strcmp(name, "--csv")) {
      NEXT_VAL();
      c->csv_path = val;
    } else if (!strcmp(name, "--seed")) {
      NEXT_VAL();
      c->seed = (uint64_t)parse_int(name, val, 0, INT64_MAX);
    } else {
      die_usage("unknown flag '%s'", arg);
    }
#undef NEXT_VAL
  }
  if (c->force_cpu && c->force_gpu) die_usage("--cpu and --gpu exclude each other");
  if (!c->tune && c->launch_given > 1)
    die_usage("several --launch configurations are --tune's candidates; add --tune");
  if (c->quick && !c->modes_given)
    for (int m = 0; m < MODE_COUNT; m++) c->modes[m] = 1;
}

/* The points of this run, in order. */
static int build_points(const config *c, int gpu, point *pts) {
  int n = 0;
  if (c->quick) {
    const int64_t qv[] = {1000, 4099, 32000};
    for (int i = 0; i < 3; i++) pts[n++] = (point){gpu ? 256 : 64, qv[i], "V"};
    return n;
  }
  if (c->sweep_vocab)
    for (size_t i = 0; i < sizeof sweep_vocab_values / sizeof *sweep_vocab_values; i++)
      pts[n++] = (point){c->bt ? c->bt : 8192, sweep_vocab_values[i], "V"};
  if (c->sweep_bt)
    for (size_t i = 0; i < sizeof sweep_bt_values / sizeof *sweep_bt_values; i++)
      pts[n++] = (point){sweep_bt_values[i], c->vocab ? c->vocab : 128256, "BT"};
  if (n) return n;
  if (c->bt || c->vocab) {
    pts[n++] = (point){c->bt ? c->bt : (gpu ? 8192 : 4096), c->vocab ? c->vocab : (gpu ? 128256 : 32000), "V"};
    return n;
  }
  if (gpu) {
    const int64_t dv[] = {32000, 128256, 262144};
    for (int i = 0; i < 3; i++) pts[n++] = (point){8192, dv[i], "V"};
  } else {
    pts[n++] = (point){4096, 32000, "V"};
  }
  return n;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */
/* ------------------------------------------------------------------------ */

static const char *reduction_name(xent_reduction r) {
  return r == XENT_REDUCTION_NONE ? "none" : r == XENT_REDUCTION_SUM ? "sum" : "mean";
}

static void make_extra(char *buf, size_t n, const point *p, xent_dtype dt, int gpu, int threads,
                       int checked, xent_reduction r) {
  if (gpu)
    snprintf(buf, n,
             "{\"BT\": %lld, \"V\": %lld, \"dtype\": \"%s\", \"targets\": \"%s\", "
             "\"workspace\": \"explicit\", \"reduction\": \"%s\"}",
             (long long)p->bt, (long long)p->vocab, dtype_name(dt),
             checked ? "checked" : "unchecked", reduction_name(r));
  else
    snprintf(buf, n,
             "{\"BT\": %lld, \"V\": %lld, \"dtype\": \"%s\", \"threads\": %d, "
             "\"reduction\": \"%s\"}",
             (long long)p->bt, (long long)p->vocab, dtype_name(dt), threads, reduction_name(r));
}

int main(int argc, char **argv) {
  config cfg;
  parse_args(&cfg, argc, argv);

  xent_info info;
  xent_status st = xent_get_info(&info);
  if (st) {
    report_xent("xent_get_info", st);
    return 1;
  }
  int have_gpu = info.cuda_built && info.cuda_devices > 0;
#ifndef XENT_BENCH_CUDA
  have_gpu = 0;
#endif
  if (cfg.force_gpu && !have_gpu) {
    fprintf(stderr, "xent-bench: --gpu: %s\n",
            !info.cuda_built ? "this build of xent has no CUDA backend"
                             : "no CUDA device is visible");
    return 2;
  }
  int gpu = have_gpu && !cfg.force_cpu;
  if ((cfg.tune || cfg.launch_given || cfg.scale_waves) && !gpu) {
    fprintf(stderr, "xent-bench: %s needs the GPU backend (%s)\n",
            cfg.tune ? "--tune" : cfg.launch_given ? "--launch" : "--scale-waves",
            !info.cuda_built ? "this build has no CUDA backend" : "no CUDA device, or --cpu");
    return 2;
  }
  int iters = cfg.iters > 0 ? cfg.iters : (cfg.quick ? 5 : cfg.tune ? 20 : 40);
  int warmup = cfg.warmup >= 0 ? cfg.warmup : (cfg.quick ? 3 : cfg.tune ? 5 : 20);
  int threads = cfg.threads > 0 ? cfg.threads : info.cpu_threads;

  csv_out csv;
  memset(&csv, 0, sizeof csv);
  csv.provider = gpu ? "xent_cuda" : "xent_cpu";
  {
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    strftime(csv.timestamp, sizeof csv.timestamp, "%Y-%m-%d %H:%M:%S", &tmv);
  }

  /* ---- header ---- */
  printf("xent-bench %s  (%s)\n", xent_version(), csv.timestamp);
#ifdef XENT_BENCH_CUDA
  gpu_ctx g;
  memset(&g, 0, sizeof g);
  stats copy_stats = {0, 0, 0};
  double copy_bytes = 0.0;
  if (gpu) {
    xent_device_info di;
    int dev = 0;
    st = xent_get_device_info(dev, &di);
    if (st) {
      report_xent("xent_get_device_info", st);
      return 1;
    }
    snprintf(csv.device, sizeof csv.device, "%s", di.name);
    int events = iters > 20 ? iters : 20;
    if (gpu_init(&g, dev, events)) return 1;
    g.checked = cfg.checked;
    g.reduction = cfg.reduction;
    g.flush_read = cfg.flush_read;
    if (cfg.pdl >= 0) xent_tune_pdl(cfg.pdl);
    printf("backend: CUDA, device %d: %s (sm_%d%d, %d SMs, %.1f GB, clusters %s)\n", dev, di.name,
           di.sm_major, di.sm_minor, di.multiprocessors, (double)di.global_memory / 1e9,
           di.cluster_launch ? "yes" : "no");
    printf("runtime %d, driver %d\n", info.cuda_runtime_version, info.cuda_driver_version);
    if (cfg.checked)
      printf("mode: XENT_TARGETS_CHECKED (the default: the forward waits for the device's "
             "target check), explicit workspace, own stream\n");
    else
      printf("mode: XENT_TARGETS_UNCHECKED (graph-safe, no host sync), explicit workspace, own "
             "stream\n");
    if (cfg.flush_read)
      printf("L2 flush: a read of 256 MiB (--flush read), leaving clean lines\n");
    if (cfg.pdl == 0) printf("launches: ordinary (--no-pdl)\n");
    if (cfg.pdl == 2) printf("launches: every one programmatic, clustered forwards too (--pdl 2)\n");
    printf("timing: CUDA events, median (p20 / p80) of %d after %d warm-up; logits refreshed "
           "from a pristine copy and L2 flushed before each iteration, untimed\n",
           iters, warmup);
    if (gpu_copy_bandwidth(&g, 20, 5, &copy_stats, &copy_bytes)) {
      gpu_shutdown(&g);
      return 1;
    }
    printf("device-to-device copy: %.3f TB/s (%.2f GB read + written, median of 20)\n",
           copy_bytes / (copy_stats.p50 * 1e-3) / 1e12, copy_bytes / 1e9);
  }
#endif
  if (!gpu) {
    cpu_model(csv.device, sizeof csv.device);
#ifdef _OPENMP
    const char *omp = ", OpenMP";
#else
    const char *omp = ", no OpenMP";
#endif
    printf("backend: CPU (%s), %d thread%s%s\n", csv.device, threads, threads == 1 ? "" : "s",
           omp);
    if (info.cuda_built && cfg.force_cpu) printf("(CUDA is built; --cpu forced the CPU)\n");
    printf("timing: CLOCK_MONOTONIC, median (p20 / p80) of %d after %d warm-up; logits refreshed "
           "from a pristine copy before each iteration, untimed\n",
           iters, warmup);
    printf("copy baseline: memcpy of the same BT*V elements on %d thread%s, per point\n",
           threads, threads == 1 ? "" : "s");
  }
  printf("seed %llu; logits ~ N(0, 2), uniform targets, reduction %s\n",
         (unsigned long long)cfg.seed, reduction_name(cfg.reduction));

#ifdef XENT_BENCH_CUDA
  if (cfg.tune) {
    int rc = run_tune(&g, &cfg, iters, warmup);
    gpu_shutdown(&g);
    return rc ? 1 : 0;
  }
  if (cfg.launch_given) {
    printf("launch forced: path %d cluster %d threads %d size %d (xent_tune_override)\n",
           cfg.launch[0][0], cfg.launch[0][1], cfg.launch[0][2], cfg.launch[0][3]);
    xent_tune_override(cfg.launch[0][0], cfg.launch[0][1], cfg.launch[0][2], cfg.launch[0][3]);
  }
  if (cfg.scale_waves) xent_tune_backward(cfg.scale_waves);
#endif

  if (cfg.csv_path) {
    csv.f = fopen(cfg.csv_path, "w");
    if (!csv.f) {
      fprintf(stderr, "xent-bench: cannot write %s: %s\n", cfg.csv_path, strerror(errno));
      return 1;
    }
    fputs(csv_header, csv.f);
    fflush(csv.f);
  }

  point pts[MAX_POINTS];
  int n_pts = build_points(&cfg, gpu, pts);
  int n_units = n_pts * cfg.n_dtypes, unit = 0, failures = 0, measured = 0;
  if (!gpu && (cfg.sweep_bt || cfg.sweep_vocab))
    printf("note: CPU sweeps use GPU-sized shapes; expect minutes per point (--iters, "
           "--warmup)\n");
  if (cfg.modes[MODE_FULL])
    printf("full = forward_grad + xent_backward with grad_output 1 on the %s (the scale pass "
           "is skipped)\n",
           gpu ? "device" : "host");
  print_table_header(gpu);
  double t0 = now_s();

  for (int pi = 0; pi < n_pts; pi++) {
    for (int di = 0; di < cfg.n_dtypes; di++) {
      const point *p = &pts[pi];
      xent_dtype dt = cfg.dtypes[di];
      char extra[256];
      make_extra(extra, sizeof extra, p, dt, gpu, threads, cfg.checked, cfg.reduction);
      progress(++unit, n_units, p, dt, t0);
      double x_bytes = (double)p->bt * (double)p->vocab * (double)dtype_size(dt);

#ifdef XENT_BENCH_CUDA
      if (gpu) {
        size_t free_b = 0;
        if (!gpu_fits(p, dt, &free_b)) {
          progress_done();
          print_skip(p, dt, (double)gpu_need_bytes(p, dt), (double)free_b, 1);
          continue;
        }
        if (gpu_prepare(&g, p, dt, cfg.seed)) {
          progress_done();
          gpu_release(&g);
          failures++;
          continue;
        }
        progress_done();
        for (int m = 0; m < MODE_COUNT; m++) {
          if (!cfg.modes[m]) continue;
          result r;
          xent_status xst;
          if (gpu_time_mode(&g, m, 0, iters, warmup, &r.ms, &xst)) {
            failures++;
            continue;
          }
          r.copy_ms = copy_stats;
          r.copy_bytes = copy_bytes;
          r.mem_bytes = x_bytes + (double)p->bt * 8.0 + 4.0 + (double)g.workspace_bytes;
          emit_result(&csv, 1, p, dt, m, &r, extra);
          measured++;
          if (m == MODE_FORWARD || m == MODE_FORWARD_NOGRAD) {
            printf("  launch: %s\n", xent_tune_last_launch());
            fflush(stdout);
          }
          if (m == MODE_BACKWARD) {
            stats s1;
            printf("  launch: %s\n", xent_tune_last_backward());
            if (gpu_time_mode(&g, m, 1, iters, warmup, &s1, &xst) == 0)
              printf("  note: backward with grad_output == 1 (read on the device) skips the "
                     "pass: %.4f ms\n",
                     s1.p50);
          }
        }
        gpu_release(&g);
        continue;
      }
#endif
      size_t avail = host_available_bytes();
      if (avail && 2.0 * x_bytes + ((double)p->bt * 8.0) > 0.9 * (double)avail) {
        progress_done();
        print_skip(p, dt, 2.0 * x_bytes, (double)avail, 0);
        continue;
      }
      cpu_ctx c;
      if (cpu_prepare(&c, p, dt, threads, cfg.reduction, cfg.seed)) {
        progress_done();
        failures++;
        continue;
      }
      stats copy_s;
      if (cpu_time_copy(&c, iters, warmup > 2 ? 2 : warmup, &copy_s)) {
        progress_done();
        cpu_release(&c);
        failures++;
        continue;
      }
      progress_done();
      for (int m = 0; m < MODE_COUNT; m++) {
        if (!cfg.modes[m]) continue;
        result r;
        if (cpu_time_mode(&c, m, iters, warmup, &r.ms)) {
          failures++;
          continue;
        }
        r.copy_ms = copy_s;
        r.copy_bytes = 2.0 * x_bytes;
        r.mem_bytes = x_bytes + (double)p->bt * 8.0 + 4.0;
        emit_result(&csv, 0, p, dt, m, &r, extra);
        measured++;
      }
      cpu_release(&c);
    }
  }
  progress_done();
  printf("\n%d measurement%s, %d failure%s, %.1f s\n", measured, measured == 1 ? "" : "s",
         failures, failures == 1 ? "" : "s", now_s() - t0);
  printf("eff = fewest bytes / median time: 2*BT*V*size (forward, backward, full), "
         "BT*V*size (forward_nograd); ratio = eff / copy\n");
  if (csv.f) {
    fclose(csv.f);
    printf("CSV: %s\n", cfg.csv_path);
  }
#ifdef XENT_BENCH_CUDA
  if (gpu) gpu_shutdown(&g);
#endif
  return failures ? 1 : 0;
}
