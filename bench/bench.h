/*
 * bench.h - what the parts of xent-bench share: the configuration, the
 * points, the timing results, and each part's functions.
 *
 *   cli.c         flags and the points of a run
 *   inputs.c      random logits and targets
 *   report.c      statistics, the table, the CSV, progress lines
 *   host.c        host memory, threads and the CPU's name
 *   modes.c       what one timed iteration of each mode calls
 *   cpu_timing.c  timing on the CPU backend
 *   gpu_timing.c  timing on the CUDA backend (gpu_flush.cu: the L2 flush)
 *   main.c        the run
 */
#ifndef XENT_BENCH_H
#define XENT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xent.h"

#ifdef XENT_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { MODE_FORWARD, MODE_BACKWARD, MODE_FULL, MODE_FORWARD_NOGRAD, MODE_COUNT };
extern const char *const mode_names[MODE_COUNT];

#define MAX_POINTS 64
#define MAX_DTYPES 3
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
  int quick;
  int checked;        /* --checked: XENT_TARGETS_CHECKED (GPU)             */
  xent_reduction reduction; /* --reduction (default mean)                  */
  int flush_read;     /* --flush read: the L2 flush reads, leaving it clean */
  int pdl;            /* --pdl N / --no-pdl: the experimental settings'
                         programmatic launches (N as there); -1: default */
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

/* ---- cli.c ---- */
void parse_args(config *c, int argc, char **argv);
int build_points(const config *c, int gpu, point *pts);
void die_usage(const char *fmt, ...);

/* ---- inputs.c ---- */
void fill_logits(void *dst, xent_dtype dt, size_t first, size_t count, uint64_t seed);
void fill_targets(int64_t *t, int64_t bt, int64_t vocab, uint64_t seed);

/* ---- report.c ---- */
typedef struct csv_out {
  FILE *f;
  const char *provider;
  char device[256];
  char timestamp[32];
} csv_out;

typedef struct result {
  stats ms;          /* time per call                                       */
  stats copy_ms;     /* the copy baseline's time for copy_bytes             */
  double copy_bytes; /* bytes read + written by the baseline copy           */
  double mem_bytes;  /* see "Memory" in the file comment                    */
} result;

double now_s(void);
stats summarize(double *samples, int n);
size_t dtype_size(xent_dtype dt);
const char *dtype_name(xent_dtype dt);
const char *dtype_short(xent_dtype dt);
double fewest_bytes(int mode, int64_t bt, int64_t vocab, xent_dtype dt);
void report_xent(const char *what, xent_status st);
extern const char *csv_header;
void print_table_header(int gpu);
void emit_result(const csv_out *csv, int gpu, const point *p, xent_dtype dt, int mode,
                 const result *r, const char *extra);
void progress(int i, int n, const point *p, xent_dtype dt, double t0);
void progress_done(void);
void print_skip(const point *p, xent_dtype dt, double need, double have, int gpu);

/* ---- host.c ---- */
void *host_alloc(size_t bytes);
void par_memcpy(void *dst, const void *src, size_t n, int threads);
size_t host_available_bytes(void);
void cpu_model(char *out, size_t n);

/* ---- modes.c ---- */
xent_status run_mode(const xent_input *in, const xent_options *opt, const xent_output *out,
                     const xent_exec *ex, const float *go_half, const float *go_one, int mode,
                     const char **what);

/* ---- cpu_timing.c ---- */
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

void cpu_release(cpu_ctx *c);
int cpu_prepare(cpu_ctx *c, const point *p, xent_dtype dt, int threads, xent_reduction reduction,
                uint64_t seed);
int cpu_time_mode(cpu_ctx *c, int mode, int iters, int warmup, stats *out);
int cpu_time_copy(cpu_ctx *c, int iters, int warmup, stats *out);

#ifdef XENT_BENCH_CUDA
/* ---- gpu_timing.c ---- */
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

int gpu_init(gpu_ctx *g, int device, int n_events);
void gpu_shutdown(gpu_ctx *g);
void gpu_release(gpu_ctx *g);
size_t gpu_need_bytes(const point *p, xent_dtype dt);
int gpu_fits(const point *p, xent_dtype dt, size_t *free_out);
int gpu_prepare(gpu_ctx *g, const point *p, xent_dtype dt, uint64_t seed);
int gpu_time_mode(gpu_ctx *g, int mode, int backward_one, int iters, int warmup, stats *out,
                  xent_status *st_out);
int gpu_copy_bandwidth(gpu_ctx *g, int iters, int warmup, stats *out, double *bytes_out);

/* ---- gpu_flush.cu ---- */
/* Set the L2 eviction priority of [p, p + bytes) back to normal (sm_80+;
 * nothing elsewhere), so that a flush evicts lines an earlier load marked
 * evict-last too. 0, or -1 when the launch failed. */
int bench_l2_normal(const void *p, size_t bytes, cudaStream_t stream);
/* Read [p, p + bytes) and write nothing: over a buffer larger than L2 after
 * a write flush, it leaves L2 holding clean lines. 0, or -1. */
int bench_l2_read(const void *p, size_t bytes, cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
