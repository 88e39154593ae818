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
 * vecs > 0: the one-read kernel, clusters of `cluster` blocks of `threads`
 * threads, each thread holding `vecs` 16-byte vectors of the row.
 * vecs == 0: the two-read kernel with a row per cluster of `cluster` blocks
 * (0 or 1: a row per block) of `threads` threads. All zeros: back to the
 * launch table. A configuration that cannot run the call fails it with
 * XENT_ERROR_UNSUPPORTED. */
XENT_API void xent_tune_override(int cluster, int threads, int vecs);

/* A short description of the launch the last CUDA forward call used on this
 * thread, such as "one-read cluster=4 threads=512 vecs=8". */
XENT_API const char *xent_tune_last_launch(void);

#ifdef __cplusplus
}
#endif
#endif
