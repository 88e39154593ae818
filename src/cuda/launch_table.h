/*
 * launch_table.h - how the CUDA backend launches its forward kernels: the
 * one place that maps (architecture, dtype, V, alignment) to a kernel path
 * and its launch configuration. The measurements behind each rule are in
 * bench/NOTES.md (xent-bench --tune on an H200).
 *
 * Paths:
 *   ring      (fwd_ring, sm_90+; only through xent_tune_override, see the
 *             table): one read. A persistent grid of clusters of
 *             `cluster` blocks; each block holds its slice of a row in a ring
 *             of `slots` shared-memory chunks of `chunk_vecs` 16-byte vectors
 *             fed by bulk copies, so the next row streams in while the current
 *             one is reduced and written. Needs 16-byte aligned rows (base,
 *             stride and V * element size) and a slice that fits its ring.
 *   stream    (fwd_stream, sm_80+): a persistent grid of blocks of `threads`
 *             threads; each thread streams its vectors of its block's rows
 *             through its own ring of `slots` 16-byte shared-memory slots
 *             (per-thread asynchronous copies), keeps the last `slots` of
 *             each row there for the gradient and re-reads the rest from
 *             L2. Needs 16-byte aligned rows (base, stride, V * size).
 *   one-read  (fwd_oneread): the row lives in registers across a cluster of
 *             `cluster` blocks of `threads` threads, each thread holding `vecs`
 *             16-byte vectors. Capacity per row: cluster * threads * vecs * 16
 *             bytes. Needs sm_90+ for cluster > 1; a cluster of 1 runs anywhere.
 *   keep      (fwd_tworead with KEEP; only through xent_tune_override since
 *             v12, see the table): the two-read kernel, except that each
 *             thread holds its first `keep` vectors of the row (at most) in
 *             shared memory from pass 1 to pass 2, which re-reads only the
 *             rest. A persistent grid, or with `per_row` a row per block
 *             (cluster). Any GPU, any alignment; clusters as for two-read.
 *   two-read  (fwd_tworead): a row per cluster of `cluster` blocks of
 *             `threads` threads (cluster 1: a row per block, any GPU), any V,
 *             any alignment. Pass 1 reads the row, pass 2 re-reads it (partly
 *             from L2) and writes the gradient; with `hint`, under L2
 *             eviction policies (pass 1 evict-last, pass 2 evict-first).
 *             Also the forward-without-
 *             gradient kernel on every GPU (pass 1 alone), where one read is
 *             the floor.
 *   staged    (fwd_staged, sm_90+): a persistent grid (as many blocks per SM
 *             as fit, or clusters of `cluster` blocks splitting each row). A
 *             producer warp streams the rows through a ring of `slots`
 *             shared-memory chunks, `vecs` 16-byte vectors per consumer
 *             thread each, with bulk copies: pass 1, and with a gradient
 *             pass 2, never waiting for the arithmetic. Pass 2 reads the
 *             last `reuse` chunks where pass 1 left them in the ring,
 *             the first `hold` from the consumers' registers, and copies
 *             the others again, from L2. `threads` consumer threads
 *             fold, reduce and write the gradient. With `ticket` the rows
 *             come from a counter in the workspace (over a cluster the
 *             lead block takes them and mails them to its peers). Any
 *             alignment.
 *   warp      (fwd_warprow): forward without gradient only. A row per warp,
 *             `threads` / 32 rows a block (at most 256 threads), reduced by
 *             shuffles with no block barrier. Any GPU, any V, any alignment.
 *             `vecs` 4, 6 or 8: the plain kernel (no weights, softcap or
 *             statistics) pipelines its loads in two stages of that many
 *             16-byte vectors a lane; 0 (and the other kernels): 8 vectors
 *             in flight, then folded.
 *   segment   (fwd_segment + fwd_segment_merge): forward without gradient,
 *             the plain kernel only (no weights, softcap or statistics).
 *             Each row is cut into one or two (XENT_SEGMENT_MAX) segments
 *             of at most `threads` * `vecs` 16-byte vectors, a block per
 *             segment: every thread issues its `vecs` loads at once (4 or
 *             8), then the block reduces the segment. A row of one segment
 *             is finished by its block; a row of two leaves its segments'
 *             log-sum-exps in the workspace, and a second kernel, a thread
 *             per row, merges them and writes the row's outputs. Any GPU,
 *             any alignment.
 */
#ifndef XENT_CUDA_LAUNCH_TABLE_H
#define XENT_CUDA_LAUNCH_TABLE_H

enum {
  XENT_PATH_TWOREAD = 1,
  XENT_PATH_ONEREAD = 2,
  XENT_PATH_RING = 3,
  XENT_PATH_STREAM = 5,
  XENT_PATH_KEEP = 6,
  XENT_PATH_WARP = 8,
  XENT_PATH_STAGED = 9,
  XENT_PATH_SEGMENT = 11
};

typedef struct xent_launch {
  int path;        /* XENT_PATH_*                                         */
  int cluster;     /* blocks per row                                      */
  int threads;     /* threads per block (staged: consumer threads, the
                      block has a producer warp more)                     */
  int vecs;        /* one-read: 16-byte vectors per thread; warp: a stage
                      of the pipelined pass (0: none); staged: per
                      consumer thread and chunk (4 or 8; the general and
                      statistics kernels always take 4)                   */
  int slots;       /* ring, staged: shared-memory chunks per block; stream:
                      16-byte slots per thread                            */
  int chunk_vecs;  /* ring: 16-byte vectors per chunk                     */
  int lsu;         /* ring: per-thread 16-byte copies, not bulk copies   */
  int keep;        /* keep: at most this many 16-byte vectors per thread
                      held in shared memory between the passes            */
  int hint;        /* two-read with a gradient: L2 eviction policies, pass 1
                      evict-last and pass 2 evict-first (sm_80+); staged:
                      pass 1 evict-last instead of normal                 */
  int stats;       /* two-read and keep: the kernel that reads the statistics
                      flags (accuracy, smoothing) at run time even when the
                      call needs none; only xent_tune_override sets it, to
                      measure what the plain kernel saves               */
  int per_row;     /* keep: a row per block (cluster), the rows left to the
                      hardware's block scheduler; 0: a persistent grid   */
  int ticket;      /* staged: rows handed out by a counter in the workspace
                      (over a cluster, by the lead block to its peers);
                      0: each block (cluster) takes every grid-th row    */
  int reuse;       /* staged with a gradient: the last `reuse` chunks of a
                      slice (at most `slots`) stay in shared memory after
                      pass 1, and pass 2 reads them there instead of from
                      L2; a slice of at most `reuse` chunks is read once */
  int hold;        /* staged with a gradient, the plain kernel of 4 vectors a
                      thread: of the chunks pass 2 does not reuse, the
                      first `hold` (at most XENT_STAGED_MAX_HOLD) stay in
                      the consumers' registers instead of being copied
                      again; 0: all of them are copied again             */
  int warp_split;  /* warp, the plain kernel of 4 vectors a stage: 2, 4 or 8
                      warps share each row and merge their statistics
                      through shared memory; 0 or 1: a row per warp      */
} xent_launch;

enum {
  XENT_MAX_CLUSTER = 8,
  XENT_MAX_ONEREAD_THREADS = 512,
  XENT_RING_CHUNK_VECS = 1024, /* 16 KB per bulk copy */
  XENT_RING_MAX_SLOTS = 16,
  XENT_STREAM_MAX_SLOTS = 16,
  XENT_STREAM_STATIC_SMEM = 1024, /* fwd_stream's reduction scratch, rounded up */
  XENT_TWOREAD_STATIC_SMEM = 1536, /* fwd_tworead's reduction scratch and cluster inbox */
  XENT_TWOREAD_UNROLL = 4,         /* vectors per thread per iteration          */
  XENT_MAX_WARP_THREADS = 256,     /* fwd_warprow's launch bounds               */
  XENT_STAGED_MAX_SLOTS = 16,
  XENT_STAGED_MAX_THREADS = 512,   /* fwd_staged's block, producer warp included:
                                      up to 128 registers a thread             */
  XENT_STAGED_STATIC_SMEM = 2560,  /* fwd_staged's barriers, queue, inbox        */
  XENT_STAGED_MAX_HOLD = 2,        /* fwd_staged's chunks held in registers      */
  XENT_SEGMENT_MAX = 2,            /* segments a row: with the target's logit,
                                      one per row array of the workspace
                                      (common/workspace.h)                     */
  XENT_SEGMENT_MAX_THREADS = 256   /* fwd_segment's launch bounds               */
};

/* Can the staged path run with this configuration? `threads` counts the
 * consumer threads (the block has one more warp, the producer); a chunk is
 * `vecs` (4 or 8) vectors per consumer thread. */
static inline int xent_staged_fits(const xent_launch *l, int sm_major, int smem_optin) {
  return sm_major >= 9 && l->threads >= 32 && l->threads % 32 == 0 &&
         l->threads + 32 <= XENT_STAGED_MAX_THREADS &&
         l->cluster >= 1 && l->cluster <= XENT_MAX_CLUSTER && (l->vecs == 4 || l->vecs == 8) &&
         l->slots >= 2 && l->slots <= XENT_STAGED_MAX_SLOTS &&
         l->reuse >= 0 && l->reuse <= l->slots && l->hold >= 0 &&
         l->hold <= XENT_STAGED_MAX_HOLD && (l->hold == 0 || l->vecs == 4) &&
         (long long)l->slots * l->vecs * l->threads * 16 + XENT_STAGED_STATIC_SMEM <= smem_optin;
}

/* Vectors per thread the keep path holds in shared memory for rows of V
 * elements of `es` bytes: the thread's share of its block's slice, at most
 * l->keep. */
static inline int xent_keep_vecs(const xent_launch *l, int es, long long vocab) {
  long long nvec = vocab * es / 16, slice = (nvec + l->cluster - 1) / l->cluster;
  long long per_thread = (slice + l->threads - 1) / l->threads;
  return per_thread < l->keep ? (int)per_thread : l->keep;
}

/* Does the keep path's shared memory fit one block? */
static inline int xent_keep_fits(const xent_launch *l, int es, long long vocab, int smem_optin) {
  return l->keep >= 0 && (long long)xent_keep_vecs(l, es, vocab) * l->threads * 16 +
                                 XENT_TWOREAD_STATIC_SMEM <=
                             smem_optin;
}

/* Does a one-read configuration hold every row of V elements of `es` bytes,
 * whatever the row's alignment? (The head and tail elements outside whole
 * vectors are held one per thread, at most 2 * (16 / es - 1) of them.) */
static inline int xent_launch_fits(const xent_launch *l, int es, long long vocab) {
  long long vn = 16 / es;
  long long capacity = (long long)l->cluster * l->threads * l->vecs;
  return capacity >= vocab / vn && (long long)l->cluster * l->threads >= 2 * (vn - 1);
}

/* Segments of a row of V elements of `es` bytes on the segment path: as
 * many blocks of threads * vecs vectors as its whole vectors need (one for
 * a row of none); more than XENT_SEGMENT_MAX when the path cannot take it. */
static inline long long xent_segment_count(const xent_launch *l, int es, long long vocab) {
  const long long nvec = vocab * es / 16, per_block = (long long)l->threads * l->vecs;
  return nvec <= per_block ? 1 : (nvec + per_block - 1) / per_block;
}

/* Can the segment path run these rows with this configuration? */
static inline int xent_segment_fits(const xent_launch *l, int es, long long vocab) {
  return l->threads >= 32 && l->threads % 32 == 0 && l->threads <= XENT_SEGMENT_MAX_THREADS &&
         (l->vecs == 4 || l->vecs == 8) && xent_segment_count(l, es, vocab) <= XENT_SEGMENT_MAX;
}

/* Chunks of a ring block's slice when a row of V elements is split K ways
 * (the first blocks take the larger slices). */
static inline long long xent_ring_chunks(long long vocab, int es, int K, int chunk_vecs) {
  long long nvec = vocab * es / 16, slice = (nvec + K - 1) / K;
  return (slice + chunk_vecs - 1) / chunk_vecs;
}

/* Can the ring path run these rows with this configuration? `aligned`: the
 * logits' base and row stride are multiples of 16 bytes. */
static inline int xent_ring_fits(const xent_launch *l, int sm_major, int es, long long vocab,
                                 int aligned) {
  long long nvec = vocab * es / 16;
  return sm_major >= 9 && aligned && (vocab * es) % 16 == 0 && l->cluster >= 1 &&
         l->cluster <= XENT_MAX_CLUSTER && nvec >= l->cluster && l->slots >= 1 &&
         l->slots <= XENT_RING_MAX_SLOTS && l->chunk_vecs >= 1 &&
         xent_ring_chunks(vocab, es, l->cluster, l->chunk_vecs) <= l->slots;
}

/* Can the stream path run these rows? `smem_optin`: the most shared memory
 * one block may have on this GPU. */
static inline int xent_stream_fits(const xent_launch *l, int sm_major, int es, long long vocab,
                                   int aligned, int smem_optin) {
  return sm_major >= 8 && aligned && (vocab * es) % 16 == 0 && l->threads >= 32 &&
         l->threads <= 1024 && l->slots >= 1 && l->slots <= XENT_STREAM_MAX_SLOTS &&
         (long long)l->slots * l->threads * 16 + XENT_STREAM_STATIC_SMEM <= smem_optin;
}

/* The ring's cluster size for a ring of `slots` chunks: the fewest blocks
 * per row that leave room to prefetch at least 3/8 of the ring of the next
 * row (5 of 14 chunks); failing that, the fewest that fit at all; 0 when
 * the ring cannot run these rows. */
static inline int xent_ring_cluster(int sm_major, int slots, int es, long long vocab,
                                    int aligned) {
  for (int pass = 0; pass < 2; pass++) {
    for (int K = 1; K <= XENT_MAX_CLUSTER; K++) {
      xent_launch r = {XENT_PATH_RING, K, 512, 0, slots, XENT_RING_CHUNK_VECS, 0,
                       0, 0, 0, 0, 0, 0, 0, 0};
      long long chunks = xent_ring_chunks(vocab, es, K, XENT_RING_CHUNK_VECS);
      if (pass == 0 && chunks * 8 > (long long)slots * 5) continue;
      if (xent_ring_fits(&r, sm_major, es, vocab, aligned)) return K;
    }
  }
  return 0;
}

/* Is the forward launch programmatic (launched while the kernel ahead of it
 * in the stream runs, waiting for it on the device; sm_90+)? Not for
 * clusters: on an H200 (bench/NOTES.md v15, full step, same run) every
 * clustered launch of the table was 0.2 to 1.0 % slower with it (fp32 V =
 * 128256 to 262144, BT = 8192 to 65536; bf16 V = 262144), while a block per
 * row gains 1 to 4 us a call (v14). The finalize and scale kernels are
 * always programmatic on sm_90+. */
static inline int xent_launch_programmatic(const xent_launch *l, int sm_major) {
  return sm_major >= 9 && l->cluster == 1;
}

/* Where bench/NOTES.md v10 measured a row per warp ahead of pass 1 of the
 * two-read kernel without a gradient, on an H200: rows under 512 KB, at
 * least 12 of them per SM (sms: the GPU's multiprocessors). */
static inline int xent_warp_rows_measured(long long row_bytes, long long rows, int sms) {
  return row_bytes < 512 * 1024 && rows >= 12LL * (sms > 0 ? sms : 1);
}

/* The table. sm_major: compute capability major; es: element bytes; rows:
 * the call's rows; sms: the GPU's multiprocessors. */
static inline xent_launch xent_launch_pick(int sm_major, int es, long long vocab,
                                           int write_grad, long long rows, int sms) {
  xent_launch l = {XENT_PATH_TWOREAD, 1, 512, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  long long row_bytes = vocab * es;

  if (!write_grad) {
    const long long per_sm = sms > 0 ? sms : 1;
    l.threads = 256;
    if (sm_major == 9 && rows >= 7 * per_sm) {
      /* sm_90, at least 7 rows per SM: the row-per-warp kernel for every
       * row length, 256 threads, each row shared by 2, 4 or 8 warps (their
       * lanes interleaved) that merge their statistics in shared memory.
       * With at least 32 rows per SM: 2 warps a row under 128 KB, 4 under
       * 384 KB, 8 from there; with fewer, 8 from 384 KB and 2 below. On an
       * H200 (bench/NOTES.md v20), forward without gradient, same process,
       * against the previous table:
       * - fp32 rows of 120 to 256 KB (the staged kernel before): V = 32000
       *   1.03x, 50304 1.07x, 65536 1.08x;
       * - rows of 512 KB and more (pass 1 of the two-read kernel before):
       *   bf16 V = 262144 1.08x, 524288 1.05x; fp32 152064 1.05x, 262144
       *   1.04x (BT = 4096, 31 rows per SM: 1.05x);
       * - 8 warps a row against 4: bf16 201088 1.004x, fp32 128256 1.008x;
       * - BT = 1024 at bf16 V = 128256 (7.8 rows per SM; the two-read
       *   kernel before): 2 warps a row 1.12x, 4 1.10x, 8 1.08x; BT = 2048:
       *   2 warps a row even with 4 and 8 (0.99x).
       * v19 (same table, a row per warp at 128 threads against): bf16 8192 x
       * 32000 1.009x, 8192 x 128256 1.031x. At 128 threads a split row was
       * 1 to 25 % slower, likely because the barrier that merges a row's
       * warps is named at run time, so ptxas reserves all 16 of a block's
       * and fewer blocks fit an SM (not measured).
       * The calls the plain kernel does not take (weights, softcap,
       * accuracy, predicted tokens, smoothing) run a row per warp instead,
       * where the rule below allows it (xent_launch_nograd_general).
       *
       * Rows of 4 to 64 KB: the segment path, a block per segment of a
       * row, every thread's loads issued at once. Rows of up to 32 KB are
       * one segment, finished by its block, the smallest that holds the
       * row of 64 threads x 4 vectors (4 KB), 64 x 8 (8 KB), 128 x 8
       * (16 KB) and 256 x 8 (32 KB). Rows of 32 to 64 KB are two segments
       * of 256 x 8, plus the merge kernel, with at most 256 rows per SM.
       * On an H200 (bench/NOTES.md v23, same process, against 2 warps a
       * row), BT = 8192 unless said:
       * - one segment: bf16 V = 2048 1.266x (BT = 32768: 1.452x), 3000
       *   1.149x, 6000 (128 x 8) 1.194x, 8000 1.136x, 12000 1.044x, 16000
       *   1.098x (BT = 2048 1.062x, 32768 1.029x, 65536 1.012x); fp32
       *   V = 1024 1.294x, 2048 1.058x, 4000 1.124x, 8000 1.073x; bf16
       *   4096 (8 KB) 1.069x. At 6 and 8 KB, 64 x 8 was ahead of 128 x 4
       *   (1.149x against 1.074x; 0.0319 against 0.0324 ms). Rows under
       *   4 KB not measured;
       * - two segments: bf16 V = 32000 1.026x at BT = 16384 and 1.012x at
       *   32768 (1.024x at 8192, v22); fp32 12000 1.034x at 16384, 1.023x
       *   at 32768; fp32 16000 1.040x (v22). */
      if (row_bytes >= 4 * 1024 && row_bytes <= 64 * 1024 &&
          (row_bytes <= 32 * 1024 || rows <= 256 * per_sm)) {
        l.path = XENT_PATH_SEGMENT;
        l.threads = row_bytes <= 8 * 1024 ? 64 : row_bytes <= 16 * 1024 ? 128 : 256;
        l.vecs = row_bytes <= 4 * 1024 ? 4 : 8;
        return l;
      }
      l.path = XENT_PATH_WARP;
      l.vecs = 4;
      if (rows >= 32 * per_sm)
        l.warp_split = row_bytes < 128 * 1024 ? 2 : row_bytes < 384 * 1024 ? 4 : 8;
      else
        l.warp_split = row_bytes >= 384 * 1024 ? 8 : 2;
      return l;
    }
    /* Other GPUs. A row per warp (128 threads, 4 rows a block) where rows
     * are under 512 KB and there are at least 12 of them per SM: no block
     * barrier, so no SM waits with its loads drained. On an H200 at BT =
     * 8192 (bench/NOTES.md v10): bf16 V = 32000 1.30x, 50304 1.19x, 128256
     * 1.05x, 152064 1.03x, fp32 32000 1.10x, 50304 1.08x, 128256 1.01x;
     * bf16 262144 (512 KB rows) 2 % slower, fp32 152064 even. At V = 128256
     * bf16: BT = 2048 1.04x (15.5 rows per SM), 4096 and 32768 1.06x, but
     * BT = 1024 (7.8 rows per SM) 0.71x. Otherwise pass 1 of the two-read
     * kernel, 256 threads: best or even at every V of the tuning set
     * (bench/NOTES.md v5: 1.03 to 1.29x over 512 threads, even at fp32
     * 262144). Both measured on an H200 only: on other GPUs, unmeasured. */
    if (xent_warp_rows_measured(row_bytes, rows, sms)) {
      l.path = XENT_PATH_WARP;
      l.threads = 128;
      /* The plain kernel's pipelined pass: two stages of 4 vectors a lane,
       * one in flight while the other is folded, the first two issued beside
       * the target's load (64 registers, as the unpipelined pass). On an
       * H200 (bench/NOTES.md v17), against the unpipelined pass in the
       * same run, BT = 8192: bf16 V = 32000 1.012x, 128256 1.014x, fp16
       * 32000 1.018x, fp32 128256 1.008x; bf16 128256 at BT = 2048 1.043x.
       * Stages of 6 were even with 4; of 8 slower at BT = 8192, but for fp32. */
      l.vecs = 4;
    }
    return l;
  }

  /* Forward with gradient. Measured on an H200 (bench/NOTES.md, v2 to v5):
   * - rows up to 112 KB (V <= 57344 bf16, 28672 fp32): two reads with 256
   *   threads, 1.05 to 1.08x faster than the one-read kernel with the row in
   *   registers (V = 32000 bf16) and than 512 threads (50304 bf16); fp32 at
   *   V = 32000 (128 KB) is 10 % slower with 256 threads than with 512.
   * - longer rows: two reads, a row per block, pass 2 re-reading from L2;
   *   1024 threads for rows over 256 KB, 512 up to 256 KB. On sm_90, rows
   *   from 60 KB take the staged path instead (below).
   * - the one-read kernel, the ring (v4) and the stream kernel (v5) are
   *   never picked: each was slower than the above at every size measured;
   *   xent_tune_override selects them. */
  l.threads = row_bytes <= 112 * 1024 ? 256 : row_bytes > 256 * 1024 ? 1024 : 512;
  /* sm_90, rows of 60 KB up to 8 x 320 KB: the staged path (a producer
   * warp streaming the rows through a ring of shared-memory chunks with
   * bulk copies, pass 1 evict-last), pass 2 reusing the ring's chunks:
   * - a row split over a cluster of K blocks, the fewest of 1, 2, 4, 8 that
   *   leave each block a slice of at most 320 KB (the L2 share v8 and v9
   *   found); the rows come from a counter in the workspace, which over a
   *   cluster the lead block reads and mails to its peers: on an H200
   *   (bench/NOTES.md v16), against every grid-th row per cluster, fp32
   *   V = 128256 (K = 2) 1.056 to 1.060x at BT = 2048 to 65536, 152064
   *   1.041x, 201088 (K = 4) 1.012x, 262144 (K = 4) 1.014x; bf16 201088
   *   1.010x, 262144 1.038x (BT = 65536: 1.041x);
   * - slices from 120 KB: one block per SM, 480 consumer threads, 7 chunks
   *   of 4 vectors a thread (30 KB; 210 KB in all); fp32 slices of 160 to
   *   256 KB 416 threads and 8 chunks of 26 KB. Pass 2 reuses the last
   *   7 (8) chunks, or all but one of a slice of at most 7 (8), so that the
   *   next row's first chunk streams in during the row's reduction. Of
   *   the chunks not reused, the plain kernel holds the first two in
   *   registers (hold), so slices of up to 9 (10) chunks are read once: on
   *   an H200 (bench/NOTES.md v18, same process, against copying them
   *   again) bf16 V = 102400 1.011x, 128256 1.004x (BT = 65536: 1.009x),
   *   152064 1.053x, 262144 (K = 2) 1.015x; fp32 32000 1.028x, 152064
   *   (K = 2) 1.054x, 262144 (K = 4) 1.017x. fp32 rows over a cluster of
   *   2 in 26 KB chunks hold one chunk fewer than they do not reuse:
   *   V = 128256 (2 not reused) holding 1 1.016x at BT = 8192 and 65536,
   *   holding 2 0.994x; V = 102400 (1 not reused) holding it 0.985x;
   * - shorter rows: 128 consumer threads, chunks of 8 vectors a thread
   *   (16 KB), as many as the row has, 2 to 6, all reused (one read): two
   *   or three blocks per SM, whose reductions overlap the others' loads.
   * On an H200 (bench/NOTES.md v12), fwd+grad against v11's table, timed
   * in consecutive runs on one machine: bf16 V = 32000 1.20x, 50304 1.05x,
   * 102400 1.05x, 128256 1.04x, 152064 1.05x, 201088 (K = 2) 1.06x, 262144
   * (K = 2) 1.03x; fp32 32000 1.13x, 50304 1.15x, 128256 (K = 2) 1.02x,
   * 262144 (K = 4) 1.02x. fp32 416 x 8 against 480 x 7 (v13, same run):
   * V = 50304 1.003x, 102400 even, 128256 1.007x, 201088 (K = 4) 1.06x,
   * 262144 1.009x; slower at 32000 (125 KB, 0.997x) and 152064 (297 KB
   * slices, 0.985x), which keep 480 x 7. bf16 was 0.7 to 7 % slower with
   * 416 x 8 at every V from 102400 to 262144.
   * Rows over 8 x 320 KB keep two reads (below). */
  if (sm_major == 9 && row_bytes >= 60 * 1024) {
    int K = 1;
    while (K < XENT_MAX_CLUSTER && row_bytes > (long long)K * 320 * 1024) K *= 2;
    if (row_bytes <= (long long)K * 320 * 1024) {
      const long long slice = (row_bytes / 16 + K - 1) / K; /* 16-byte vectors */
      const int small = slice * 16 < 120 * 1024;
      /* fp32 slices of 160 to 256 KB: 8 chunks of 26 KB, not 7 of 30 */
      const int fine = es == 4 && slice * 16 >= 160 * 1024 && slice * 16 <= 256 * 1024;
      l.path = XENT_PATH_STAGED;
      l.cluster = K;
      l.threads = small ? 128 : fine ? 416 : 480;
      l.vecs = small ? 8 : 4;
      const long long chunks = (slice + (long long)l.vecs * l.threads - 1) / (l.vecs * l.threads);
      if (small) {
        l.slots = chunks < 2 ? 2 : chunks > 6 ? 6 : (int)chunks;
        l.reuse = chunks < l.slots ? (int)chunks : l.slots;
      } else {
        l.slots = fine ? 8 : 7;
        l.reuse = chunks > l.slots ? l.slots : (int)chunks - 1;
        l.hold = XENT_STAGED_MAX_HOLD;
        if (fine && K == 2) { /* fp32 V = 81921 to 131072: one fewer than not reused */
          const int copied = (int)chunks - l.reuse - 1;
          l.hold = copied < 0 ? 0 : copied < l.hold ? copied : l.hold;
        }
      }
      l.hint = 1;
      l.ticket = 1;
      return l;
    }
  }
  /* The keep path (13 vectors a thread held in shared memory, a row per
   * block) took rows of 80 to 256 KB on sm_90 from v8 to v11, 3.4 to 8.5 %
   * faster than two reads there (bench/NOTES.md v8, v10). Since v12 the
   * staged path takes every row from 60 KB on sm_90, and the other GPUs
   * are unmeasured: the table no longer picks it; xent_tune_override
   * still runs it. */
  /* Rows over 256 KB otherwise: pass 1 loads evict-last and pass 2
   * evict-first, so that more of pass 2 finds its row in L2; 1.0 to 1.8 %
   * faster on an H200 (bench/NOTES.md v7), neutral or slightly slower for
   * shorter rows. v10 there found that evict-last lines survived the
   * benchmark's L2 flush (fixed since), so that gain was at least partly
   * the flush's; it has not been measured again. */
  l.hint = sm_major >= 8 && row_bytes > 256 * 1024;
  return l;
}

/* The forward without gradient of a call the plain kernel does not take
 * (weights, softcap, accuracy, predicted tokens or smoothing), given the
 * table's launch for the call (the warp or the segment path, the latter
 * the plain kernel's alone): such calls run a row per warp, unsplit and
 * unpipelined, only where v10 measured that kernel ahead
 * (xent_warp_rows_measured); elsewhere pass 1 of the two-read kernel with
 * 256 threads, as before v20. */
static inline xent_launch xent_launch_nograd_general(xent_launch l, int es, long long vocab,
                                                     long long rows, int sms) {
  if (l.path == XENT_PATH_SEGMENT) { /* the plain kernel's path alone: a row per warp */
    const xent_launch w = {XENT_PATH_WARP, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    l = w;
  }
  if (l.path == XENT_PATH_WARP && !xent_warp_rows_measured(vocab * es, rows, sms)) {
    const xent_launch t = {XENT_PATH_TWOREAD, 1, 256, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    return t;
  }
  return l;
}

#endif
