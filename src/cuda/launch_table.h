/*
 * launch_table.h - how the CUDA backend launches its forward kernels: the
 * one place that maps (architecture, dtype, V) to a kernel path and its
 * launch configuration. The measurements behind each rule are in
 * bench/NOTES.md (xent-bench --tune on an H200).
 *
 * Paths:
 *   one-read  (fwd_oneread): the row lives in registers across a cluster of
 *             `cluster` blocks of `threads` threads, each thread holding `vecs`
 *             16-byte vectors. Capacity per row: cluster * threads * vecs * 16
 *             bytes. Needs sm_90+ for cluster > 1; a cluster of 1 runs anywhere.
 *   two-read  (fwd_tworead): a row per cluster of `cluster` blocks of
 *             `threads` threads (cluster 1: a row per block, any GPU), any V.
 *             Pass 1 reads the row, pass 2 re-reads it (from L2 when the rows in
 *             flight fit there) and writes the gradient. Also the forward-
 *             without-gradient kernel on every GPU (pass 1 alone).
 */
#ifndef XENT_CUDA_LAUNCH_TABLE_H
#define XENT_CUDA_LAUNCH_TABLE_H

typedef struct xent_launch {
  int oneread;   /* 1: fwd_oneread, 0: fwd_tworead */
  int cluster;   /* blocks per row (one-read)       */
  int threads;   /* threads per block               */
  int vecs;      /* 16-byte vectors per thread      */
} xent_launch;

enum { XENT_MAX_CLUSTER = 8, XENT_MAX_ONEREAD_THREADS = 512 };

/* Does a one-read configuration hold every row of V elements of `es` bytes,
 * whatever the row's alignment? (The head and tail elements outside whole
 * vectors are held one per thread, at most 2 * (16 / es - 1) of them.) */
static inline int xent_launch_fits(const xent_launch *l, int es, long long vocab) {
  long long vn = 16 / es;
  long long capacity = (long long)l->cluster * l->threads * l->vecs;
  return capacity >= vocab / vn && (long long)l->cluster * l->threads >= 2 * (vn - 1);
}

/* The table. sm_major: compute capability major; sms: multiprocessors;
 * l2_bytes: L2 size; es: element bytes. */
static inline xent_launch xent_launch_pick(int sm_major, int sms, long long l2_bytes, int es,
                                           long long vocab, int write_grad) {
  xent_launch l = {0, 1, 512, 0};
  long long vn = 16 / es, nvec = vocab / vn;
  long long row_bytes = vocab * es;

  if (!write_grad) {
    /* Forward only: pass 1 of the two-read kernel reads the row once.
     * 256 threads for short rows keeps more rows in flight per SM. */
    l.threads = nvec <= 4096 ? 256 : 512;
    return l;
  }

  /* Forward with gradient. Measured on an H200 (bench/NOTES.md, v2):
   * - short rows (at most 4096 vectors: V <= 32768 bf16, 16384 fp32): one
   *   read, the row in the registers of one 256-thread block (16 vectors a
   *   thread); 0.37 ms against 0.39 for two reads at bf16 32000.
   * - longer rows: two reads, a row per block, pass 2 re-reading from L2;
   *   1024 threads (one block per SM, fewer rows in flight, more L2 hits)
   *   for rows over 256 KB (bf16 262144: 2.70 ms; fp32 128256: 2.57 ms), 512
   *   up to 256 KB (bf16 128256, pass 2 walking backwards: 1.31 ms with 512
   *   threads against 1.37 with 1024; fp32 50304: 1.06 against 1.10). Splitting rows over clusters was
   *   slower at every size: each block's life is mostly fixed latency
   *   (target, loads, reductions), so K blocks per row cost about K times. */
  (void)sm_major;
  (void)sms;
  (void)l2_bytes;
  if (nvec <= 256 * 16) {
    l.oneread = 1;
    l.cluster = 1;
    l.threads = 256;
    l.vecs = 16;
    if (xent_launch_fits(&l, es, vocab)) return l;
    l.oneread = 0;
    l.vecs = 0;
  }
  l.cluster = 1;
  l.threads = row_bytes > 256 * 1024 ? 1024 : 512;
  return l;
}

#endif
