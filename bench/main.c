/*
 * main.c - xent-bench, the benchmark of xent: the run itself (bench.h lists
 * the other parts).
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench.h"
#include "xent_experimental.h"

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
  int iters = cfg.iters > 0 ? cfg.iters : (cfg.quick ? 5 : 40);
  int warmup = cfg.warmup >= 0 ? cfg.warmup : (cfg.quick ? 3 : 20);
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
    if (cfg.pdl >= 0) { /* --pdl 0 none, 1 the library's rule, 2 every launch */
      xent_experimental e = xent_experimental_get();
      e.programmatic = cfg.pdl == 0 ? 1 : cfg.pdl == 1 ? 0 : 2;
      if (xent_experimental_set(&e)) {
        report_xent("xent_experimental_set", XENT_ERROR_BAD_ARGUMENT);
        return 1;
      }
    }
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
            printf("  launch: %s\n", xent_experimental_last_launch());
            fflush(stdout);
          }
          if (m == MODE_BACKWARD) {
            stats s1;
            printf("  launch: %s\n", xent_experimental_last_backward());
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
  printf("eff = fewest bytes / median time: 2*BT*V*size (fwd+grad, backward, full step), "
         "BT*V*size (fwd, no grad); ratio = eff / copy\n");
  if (csv.f) {
    fclose(csv.f);
    printf("CSV: %s\n", cfg.csv_path);
  }
#ifdef XENT_BENCH_CUDA
  if (gpu) gpu_shutdown(&g);
#endif
  return failures ? 1 : 0;
}
