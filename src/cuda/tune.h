/*
 * tune.h - a hook for xent-bench --tune to force one launch configuration of
 * the CUDA forward kernels. Not part of the public API; exported so the
 * benchmark can link it. Never needed for correct results.
 */
#ifndef XENT_TUNE_H
#define XENT_TUNE_H

#include "xent.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Force the launch of the next CUDA forward_grad calls of this process.
 * path 1: the two-read kernel, a row per cluster of `cluster` blocks (0 or
 *         1: a row per block) of `threads` threads; size bit 0 (1): with L2
 *         eviction policies (pass 1 evict-last, pass 2 evict-first); size
 *         bit 1 (2): the kernel that reads the statistics flags at run time
 *         even when the call needs none (what the plain kernel saves).
 * path 2: the one-read kernel, clusters of `cluster` blocks of `threads`
 *         threads, each thread holding `size` 16-byte vectors of the row.
 * path 3: the ring kernel (sm_90+, aligned rows), clusters of `cluster`
 *         blocks (0: the launch table's choice) of `threads` threads, each
 *         with a ring of `size` 16 KB chunks fed by bulk copies.
 * path 4: the ring kernel fed by per-thread 16-byte asynchronous copies.
 * path 5: the stream kernel (sm_80+, aligned rows): a persistent grid of
 *         blocks of `threads` threads, each thread with a ring of `size`
 *         16-byte slots; cluster unused.
 * path 6: the two-read kernel holding the row on chip between its passes
 *         (any GPU; cluster > 1 needs sm_90+): each thread keeps its first
 *         `size` 16-byte vectors (at most) in shared memory; only the rest is
 *         read again. A persistent grid.
 * path 7: path 6 with a row per block (cluster) instead of a persistent
 *         grid: the hardware's block scheduler hands out the rows.
 * path 8: a row per warp, threads / 32 rows a block (at most 256 threads):
 *         forward without gradient only (a call with one fails); size =
 *         split * 100 + vecs. vecs 0, or 4, 6 or 8: the plain kernel's
 *         pipelined pass, two stages of `vecs` 16-byte vectors a lane
 *         (calls with weights, softcap, smoothing, accuracy or predicted
 *         tokens keep the unpipelined pass). split 2, 4 or 8 (vecs 4,
 *         threads a multiple of 32 * split): that many warps of the plain
 *         kernel share each row; 0: one.
 * path 9: the staged kernel (sm_90+): a persistent grid, a producer warp
 *         streaming the rows through a ring of shared-memory chunks with bulk
 *         copies and `threads` consumer threads (the block has 32 more);
 *         size = hold * 1000000 + reuse * 100000 + hint * 10000 + vecs *
 *         100 + slots, e.g. 803: 3 chunks of 8 16-byte vectors per
 *         consumer thread (vecs 4 or 8); hint 1: pass 1 loads evict-last;
 *         reuse R (at most slots): pass 2 reads a slice's last R chunks
 *         from the ring, where pass 1 left them, instead of copying them
 *         again; hold H (0 to 2, vecs 4): of the other chunks, the first H
 *         stay in registers between the passes (the plain kernel only:
 *         calls with weights, softcap or statistics copy them again).
 *         Clusters of `cluster`
 *         blocks split each row; the rows come from a counter in the
 *         workspace (over a cluster, taken by the lead block and mailed to
 *         its peers).
 * path 10: path 9 with every grid-th row per block (cluster), no counter.
 * path 11: the segment path (the plain kernel without gradient only): each
 *         row in one or two segments of `threads` * `size` 16-byte vectors
 *         (size 4 or 8, at most 256 threads), a block per segment; rows of
 *         two then a kernel that merges each row's segments; cluster
 *         unused. Calls the plain kernel does not take run as the table
 *         maps them (xent_launch_nograd_general).
 * Paths 1, 2 and 5 to 11 apply to forward calls without a gradient.
 * path 0: back to the launch table. A configuration that cannot run the
 * call fails it with XENT_ERROR_UNSUPPORTED. */
XENT_API void xent_tune_override(int path, int cluster, int threads, int size);

/* A short description of the launch the last CUDA forward call used on this
 * thread, such as "ring cluster=2 threads=512 slots=14 grid=132". */
XENT_API const char *xent_tune_last_launch(void);

/* The grid of the next CUDA backward (scale) calls of this process, in
 * waves of the blocks the GPU holds at once: 0 for the default, -1 for one
 * work item per block. */
XENT_API void xent_tune_backward(int waves);

/* With on != 0, the checked mode of the next CUDA calls of this process
 * fetches the target check's verdict with a copy behind the count kernel,
 * the way GPUs that cannot map host memory do, instead of having the count
 * kernel write it into mapped pinned memory; 0: back to the default. So
 * that the tests run both. */
XENT_API void xent_tune_verdict_copy(int on);

/* With on == 0, the next CUDA calls of this process launch their forward,
 * finalize and scale kernels in the ordinary way, not programmatically
 * (sm_90+: a kernel launched while the one ahead of it runs, waiting for it
 * on the device); 2: every one of them programmatically, forward kernels
 * launched in clusters included (the default leaves those out); 1: back to
 * the default. For the benchmark's side-by-side timing. */
XENT_API void xent_tune_pdl(int on);

/* The launch of the last CUDA backward call that ran the scale kernel on
 * this thread, such as "scale threads=512 unroll=16 grid=1056". */
XENT_API const char *xent_tune_last_backward(void);

/* Enqueue on `stream` (a cudaStream_t) a pass that sets the L2 eviction
 * priority of every line of [p, p + bytes) that L2 holds back to normal, so
 * that a flush that follows (xent-bench writes 256 MB) evicts lines an
 * earlier load marked evict-last as well: without it such lines survive the
 * flush (bench/NOTES.md v10). sm_80+; elsewhere nothing is enqueued.
 * Returns 0, or -1 when the launch failed. */
XENT_API int xent_tune_l2_normal(const void *p, size_t bytes, void *stream);

/* Enqueue on `stream` a pass that reads [p, p + bytes) and writes nothing:
 * run over a buffer larger than the L2 after a write flush, it leaves the
 * L2 holding clean lines, so the timed call that follows does not also
 * write back the flush's dirty ones (xent-bench --flush read). Returns 0, or
 * -1 when the launch failed. */
XENT_API int xent_tune_l2_read(const void *p, size_t bytes, void *stream);

#ifdef __cplusplus
}
#endif
#endif
