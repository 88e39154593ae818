/*
 * report.c - xent-bench's statistics (median and 20th/80th percentiles,
 * interpolated), the printed table, the CSV in the peer's schema, and the
 * progress line.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

const char *const mode_names[MODE_COUNT] = {"forward", "backward", "full", "forward_nograd"};
/* What the table prints for each mode: "forward" is the peer's name (in the
 * CSV) for what computes the loss and the gradient. */
static const char *const mode_labels[MODE_COUNT] = {"fwd+grad", "backward", "full step",
                                                    "fwd, no grad"};

double now_s(void) {
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

stats summarize(double *samples, int n) {
  qsort(samples, (size_t)n, sizeof *samples, cmp_double);
  stats s = {quantile_sorted(samples, n, 0.5), quantile_sorted(samples, n, 0.2),
             quantile_sorted(samples, n, 0.8)};
  return s;
}

size_t dtype_size(xent_dtype dt) { return dt == XENT_FLOAT32 ? 4 : 2; }

const char *dtype_name(xent_dtype dt) {
  switch (dt) {
    case XENT_FLOAT32: return "float32";
    case XENT_BFLOAT16: return "bfloat16";
    case XENT_FLOAT16: return "float16";
  }
  return "?";
}

const char *dtype_short(xent_dtype dt) {
  switch (dt) {
    case XENT_FLOAT32: return "fp32";
    case XENT_BFLOAT16: return "bf16";
    case XENT_FLOAT16: return "fp16";
  }
  return "?";
}

/* The fewest bytes a mode must move (see the file comment). */
double fewest_bytes(int mode, int64_t bt, int64_t vocab, xent_dtype dt) {
  double x = (double)bt * (double)vocab * (double)dtype_size(dt);
  return mode == MODE_FORWARD_NOGRAD ? x : 2.0 * x;
}

void report_xent(const char *what, xent_status st) {
  fprintf(stderr, "xent-bench: %s failed: %s: %s\n", what, xent_status_string(st),
          xent_last_error());
}

const char *csv_header =
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

void print_table_header(int gpu) {
  printf("\n%-20s %-5s %-15s %10s  %-21s %9s %10s %6s\n", "shape", "dtype", "mode", "median ms",
         "(p20 / p80)", gpu ? "eff TB/s" : "eff GB/s", gpu ? "copy TB/s" : "copy GB/s",
         "ratio");
}

void emit_result(const csv_out *csv, int gpu, const point *p, xent_dtype dt, int mode,
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
         mode_labels[mode], r->ms.p50, r->ms.p20, r->ms.p80, eff50 / unit, cp50 / unit,
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

void progress(int i, int n, const point *p, xent_dtype dt, double t0) {
  int tty = isatty(STDERR_FILENO);
  fprintf(stderr, "%s[%d/%d] BT=%lld V=%lld %s  elapsed %.1f s%s", tty ? "\r\033[K" : "", i, n,
          (long long)p->bt, (long long)p->vocab, dtype_short(dt), now_s() - t0, tty ? "" : "\n");
  fflush(stderr);
}

void progress_done(void) {
  if (isatty(STDERR_FILENO)) fprintf(stderr, "\r\033[K");
}

/* The line for a point that does not fit: `need` and `have` bytes on the
 * device (gpu) or in host memory. */
void print_skip(const point *p, xent_dtype dt, double need, double have, int gpu) {
  printf("BT=%lld V=%lld %s: skipped, needs %.1f GB %s and %.1f GB are %s\n", (long long)p->bt,
         (long long)p->vocab, dtype_short(dt), need / 1e9, gpu ? "on the device" : "of host memory",
         have / 1e9, gpu ? "free" : "available");
}
