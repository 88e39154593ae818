/*
 * xent.h - fused cross-entropy loss for language models.
 *
 * xent computes the softmax cross-entropy of a BT x V matrix of logits against
 * BT integer targets, and (on request) writes the gradient of the loss over
 * the logits in place, so a training step holds one BT x V buffer, not two.
 * The same calls run on the CPU and, when the library is built with CUDA, on
 * an NVIDIA GPU on the caller's stream without synchronising with the host.
 *
 * ---------------------------------------------------------------------------
 * Quick start
 * ---------------------------------------------------------------------------
 *
 *     float loss;
 *     xent_input  in  = {logits, XENT_BF16, BT, V, 0, targets, XENT_INT64, NULL};
 *     xent_options opt = xent_options_default();     // mean, ignore_index -100
 *     xent_output out = {&loss, NULL, NULL, NULL, NULL};
 *     xent_exec   ex  = xent_exec_default();         // CPU, or CUDA for GPU pointers
 *     xent_status st  = xent_forward_grad(&in, &opt, &out, &ex);
 *     if (st != XENT_OK) fprintf(stderr, "%s\n", xent_last_error());
 *     // logits now hold dLoss/dlogits; after the upstream gradient g is known:
 *     xent_backward_scale(logits, XENT_BF16, BT, V, 0, g, &ex);
 *
 * ---------------------------------------------------------------------------
 * The math (per row r, target y = targets[r], x = the row's logits)
 * ---------------------------------------------------------------------------
 *
 *   softcap c (optional)  x'_j = c * tanh(x_j / c), otherwise x' = x
 *   lse                    log sum_j exp(x'_j), accumulated in fp32
 *   p_j                    exp(x'_j - lse)
 *   alpha                  label_smoothing, eps = alpha / V, s = lse_square_scale
 *
 *   unweighted  loss_r = (1 - alpha) (lse - x'_y) + alpha lse - eps sum_j x'_j
 *   weighted    loss_r = (1 - alpha) w_y (lse - x'_y) + eps (lse sum_j w_j - sum_j w_j x'_j)
 *   z-loss      z_r    = s lse^2; the row's loss is loss_r + z_r
 *
 *   Rows whose target equals ignore_index have loss 0, z 0, a zero gradient
 *   row, accuracy 0 and predicted token -1; their logits are not read.
 *
 *   Reductions: NONE keeps per-row values. SUM adds them. MEAN divides the
 *   loss terms by N, the number of non-ignored rows, or with class weights by
 *   W = sum over non-ignored rows of w[y_r]; the z-loss term is divided by N.
 *   A sum over zero rows is 0; a mean over zero rows is NaN, as in PyTorch,
 *   or 0 with xent_options.empty_mean = XENT_EMPTY_MEAN_ZERO.
 *
 *   Non-finite logits: a row holding a NaN or +inf has a NaN loss, lse and
 *   gradient row; a row of nothing but -inf has lse -inf and a NaN loss and
 *   gradient row. A -inf logit in a row that also holds finite ones is a
 *   class of probability 0: the row's lse and gradient stay finite, and so
 *   does its loss unless that class is the target (+inf) or label smoothing
 *   is on, whose term takes every logit: eps w_j (lse - x'_j) is +inf for a
 *   positive weight (or none), -inf for a negative one and NaN for a zero
 *   weight, and the row's loss their sum (NaN where +inf meets -inf). Both
 *   backends give these values, the vocabulary-parallel calls too. Every
 *   finite row gives finite results accurate to fp32, however large its
 *   values (the loss is taken as m - x'_y + log s with m the row's maximum,
 *   never as the difference of two large numbers).
 *
 *   The gradient written over the logits is d(reduced loss)/dx, that is the
 *   gradient for an upstream gradient of 1. xent_backward() multiplies it by
 *   the real upstream gradient later, in place.
 *
 * ---------------------------------------------------------------------------
 * Memory and threads
 * ---------------------------------------------------------------------------
 *
 * All pointers of one call live on one side: host memory for the CPU
 * backend, device memory of exec->device for the CUDA backend. Logits need
 * only their natural alignment (2 bytes for bf16/fp16, 4 for fp32); rows may
 * be padded (row_stride > V). xent never allocates a BT x V buffer. The CUDA
 * backend needs a small scratch area (xent_workspace_size() bytes, O(BT));
 * pass one in xent_exec, or leave it NULL and xent takes it stream-ordered
 * (cudaMallocAsync) for the duration of the call.
 *
 * Every function validates all of its arguments before it writes a single
 * byte of the caller's buffers. On error it returns a status and leaves the
 * outputs and the logits as they were; xent_last_error() then describes the
 * problem (naming the argument, and for targets the first bad row and its
 * value). Functions are thread-safe; the error message is per thread.
 *
 * Results are deterministic: the same inputs give bit-identical outputs on
 * the same device and build (no floating-point atomics), whatever ran
 * before. On the CPU the fused linear loss's products go through a BLAS
 * library whose splitting of the work follows exec->num_threads, so there a
 * different thread count may change the last bits of its results; each call
 * sets the library's count for itself (another thread's CPU fused linear
 * call waits meanwhile), so one call's count never carries over to the next.
 * The loss over logits and the vocabulary-parallel calls give the same bits
 * for every thread count.
 */
#ifndef XENT_H
#define XENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define XENT_API __declspec(dllexport)
#elif defined(__GNUC__)
#define XENT_API __attribute__((visibility("default")))
#else
#define XENT_API
#endif

#define XENT_VERSION_MAJOR 0
#define XENT_VERSION_MINOR 1
#define XENT_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

typedef enum xent_status {
  XENT_OK = 0,
  XENT_ERROR_NULL_POINTER = 1,       /* a required pointer is NULL                     */
  XENT_ERROR_BAD_SHAPE = 2,          /* rows < 0, vocab < 1 or vocab > INT32_MAX       */
  XENT_ERROR_BAD_STRIDE = 3,         /* 0 < row_stride < vocab, or the extent overflows */
  XENT_ERROR_BAD_TARGET = 4,         /* a target outside [0, V) that is not ignore_index */
  XENT_ERROR_BAD_LABEL_SMOOTHING = 5,/* label_smoothing outside [0, 1] or NaN         */
  XENT_ERROR_BAD_SOFTCAP = 6,        /* softcap enabled with a value <= 0 or not finite */
  XENT_ERROR_BAD_WEIGHT = 7,         /* a class weight that is NaN or infinite         */
  XENT_ERROR_BAD_ENUM = 8,           /* unknown dtype, target type, reduction, backend, check mode
                                        or empty-mean rule */
  XENT_ERROR_BAD_ARGUMENT = 9,       /* anything else: alignment, lse_square_scale, use_softcap
                                        not 0 or 1, grad_output count, num_threads < 0,
                                        deferred checks with reduction none, workspace
                                        too small, pointer on the wrong side */
  XENT_ERROR_UNSUPPORTED = 10,       /* backend not built, no such device, or not possible here */
  XENT_ERROR_CUDA = 11,              /* the CUDA runtime reported an error             */
  XENT_ERROR_OUT_OF_MEMORY = 12      /* a host or device allocation failed             */
} xent_status;

/* A fixed description of a status ("bad target", ...). Never NULL. */
XENT_API const char *xent_status_string(xent_status status);

/* The message of the last failed call on this thread: names the argument and,
 * for targets, the first bad row and its value. "" when no call failed yet.
 * Valid until the next xent call on this thread. */
XENT_API const char *xent_last_error(void);

/* ------------------------------------------------------------------------ */
/* Inputs                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum xent_dtype {
  XENT_FLOAT32 = 0,
  XENT_BFLOAT16 = 1,
  XENT_FLOAT16 = 2
} xent_dtype;
#define XENT_F32 XENT_FLOAT32
#define XENT_BF16 XENT_BFLOAT16
#define XENT_F16 XENT_FLOAT16

typedef enum xent_index_type {
  XENT_INT32 = 0,
  XENT_INT64 = 1
} xent_index_type;

typedef struct xent_input {
  void *logits;              /* rows x vocab, row r starts at logits + r * row_stride elements.
                                Written only by xent_forward_grad (with the gradient).       */
  xent_dtype dtype;          /* of the logits (and of the gradient written over them)      */
  int64_t rows;              /* BT >= 0 (0 is valid)                                        */
  int64_t vocab;             /* V, 1 <= V <= INT32_MAX                                      */
  int64_t row_stride;        /* elements between row starts; 0 means vocab (packed rows)    */
  const void *targets;       /* rows class indices in [0, V), or ignore_index               */
  xent_index_type target_type;
  const float *weights;      /* optional class weights, V finite floats; NULL: unweighted   */
} xent_input;

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum xent_reduction {
  XENT_REDUCTION_MEAN = 0,   /* default */
  XENT_REDUCTION_SUM = 1,
  XENT_REDUCTION_NONE = 2
} xent_reduction;

typedef enum xent_target_check {
  /* Default. Every target is checked before anything is written. A bad one
   * makes the call return XENT_ERROR_BAD_TARGET naming the first bad row and
   * its value, with logits and outputs untouched. On the CUDA backend the
   * check runs on the device and the call waits for its verdict (16 bytes
   * the check writes into pinned host memory), so it cannot be captured in a
   * CUDA graph. The call's kernels are queued before the wait and read the
   * same verdict, so the GPU does not idle for the round trip; the host
   * returns once the verdict is back, usually while the loss still runs.
   * The wait shows only where the host's own work after the call takes
   * longer than the loss (small shapes driven from Python). */
  XENT_TARGETS_CHECKED = 0,
  /* Graph-safe: no host synchronisation at all. Targets are still checked on
   * the device and never used to index out of bounds. A bad row gets a NaN
   * loss (so a reduced loss is NaN), NaN z-loss, accuracy 0, a zero gradient
   * row, and counts in N; weights are not read for it. The call returns
   * XENT_OK: watch the loss. The CPU backend reads targets on the host
   * anyway, so there it checks them in every mode. */
  XENT_TARGETS_UNCHECKED = 1,
  /* Checked on the device as XENT_TARGETS_CHECKED, but the call does not
   * wait for the verdict: it leaves it in exec->verdict (a xent_verdict,
   * required then on the CUDA backend) and returns XENT_OK once queued.
   * Later, from any thread, xent_verdict_wait() waits for the device's check
   * of that call alone and returns what the checked mode would have;
   * xent_verdict_ready() says, without waiting, whether it would wait. A bad
   * target or weight makes the reduced outputs NaN and, since the caller
   * may hand the gradient on before it reads the verdict, xent_forward_grad
   * leaves a zero gradient over every row (xent_forward leaves the logits as
   * they were). A verdict is pending from the deferred call that fills it
   * until its result is read, whether or not the device has reached the
   * check yet: read by xent_verdict_wait(), or by the next call given the
   * same verdict, which waits for the earlier check first and returns its
   * error, naming it. Reductions mean and sum only; not capturable in CUDA
   * graphs.
   *
   * On the CPU backend a deferred call checks the targets on the host and
   * returns the error itself, with nothing written, as the checked mode
   * does; it neither needs nor touches exec->verdict. */
  XENT_TARGETS_DEFERRED = 2
} xent_target_check;

/* What reduction MEAN gives when no row counts (every target ignore_index,
 * or no rows): the loss, the z-loss and the token accuracy are all NaN
 * (PyTorch's F.cross_entropy) or all 0 (the peer library's rule, which a
 * fully masked micro-batch in fine-tuning wants: a NaN there poisons the
 * run). The gradient is zero either way. */
typedef enum xent_empty_mean {
  XENT_EMPTY_MEAN_NAN = 0,   /* default */
  XENT_EMPTY_MEAN_ZERO = 1
} xent_empty_mean;

typedef struct xent_options {
  xent_reduction reduction;  /* XENT_REDUCTION_MEAN                                         */
  int64_t ignore_index;      /* -100; any value (a real class index is fine)                */
  float label_smoothing;     /* 0.0, in [0, 1]                                              */
  float lse_square_scale;    /* 0.0, z-loss weight s >= 0, finite                           */
  int use_softcap;           /* 0: off (default); 1: x' = softcap * tanh(x / softcap); no
                                other value                                                */
  float softcap;             /* > 0 and finite when use_softcap is 1                        */
  xent_target_check target_check; /* XENT_TARGETS_CHECKED                                   */
  xent_empty_mean empty_mean; /* XENT_EMPTY_MEAN_NAN                                        */
} xent_options;

#define XENT_OPTIONS_INIT \
  {XENT_REDUCTION_MEAN, -100, 0.0f, 0.0f, 0, 0.0f, XENT_TARGETS_CHECKED, XENT_EMPTY_MEAN_NAN}

/* The defaults above, as a value. */
XENT_API xent_options xent_options_default(void);

/* ------------------------------------------------------------------------ */
/* Outputs (all fp32 except predicted; all on the same side as the logits)   */
/* ------------------------------------------------------------------------ */

typedef struct xent_output {
  float *loss;               /* required: 1 value (mean, sum) or rows values (none); includes z-loss.
                                May be NULL only for reduction none with rows == 0.            */
  float *z_loss;             /* optional: the z-loss part, same count as loss                  */
  float *token_accuracy;     /* optional: mean/sum: fraction of non-ignored rows whose first
                                arg-max equals the target; none: rows values of 1 or 0. With
                                no rows counted: NaN, or 0 under reduction mean with
                                XENT_EMPTY_MEAN_ZERO (the rule is the mean's: under sum the
                                loss is 0 and the accuracy, a fraction of no rows, NaN)     */
  int64_t *predicted;        /* optional: rows values, the first arg-max of x' (-1 if ignored) */
  float *lse;                /* optional: rows values of log-sum-exp of x' (0 if ignored; see
                                "Non-finite logits" above)                                   */
} xent_output;

/* ------------------------------------------------------------------------ */
/* Where to run                                                              */
/* ------------------------------------------------------------------------ */

typedef enum xent_backend {
  XENT_BACKEND_AUTO = 0,     /* CUDA when the logits are device memory, else CPU            */
  XENT_BACKEND_CPU = 1,
  XENT_BACKEND_CUDA = 2
} xent_backend;

/* Where a call in XENT_TARGETS_DEFERRED mode leaves its verdict (pinned
 * host memory and an event). Made once, reused for one call at a time. */
typedef struct xent_verdict xent_verdict;

XENT_API xent_status xent_verdict_create(xent_verdict **verdict);
XENT_API void xent_verdict_destroy(xent_verdict *verdict);

/* Waits for the device's target check of the last call that used `verdict`
 * (not for that call's other kernels) and returns XENT_OK, or
 * XENT_ERROR_BAD_TARGET / BAD_WEIGHT with the message the checked mode
 * gives. XENT_OK when nothing is pending; any thread may call it. */
XENT_API xent_status xent_verdict_wait(xent_verdict *verdict);

/* 1 when xent_verdict_wait() would return at once (nothing pending, or the
 * device is past the check), 0 while the device has not reached it yet, and
 * 0 for NULL. Never waits: a binding polls it to read verdicts late without
 * holding the host up. */
XENT_API int xent_verdict_ready(const xent_verdict *verdict);

typedef struct xent_exec {
  xent_backend backend;      /* XENT_BACKEND_AUTO                                            */
  int device;                /* CUDA device ordinal (AUTO: taken from the logits pointer)    */
  void *stream;              /* cudaStream_t to run on; NULL is the legacy default stream    */
  void *workspace;           /* optional CUDA scratch, device memory, 256-byte aligned        */
  size_t workspace_bytes;    /* its size, at least xent_workspace_size(rows)                 */
  int num_threads;           /* CPU threads, >= 0 whatever the backend; 0 uses every core
                                (OpenMP's count). May change the last bits of the CPU fused
                                linear loss's results (see "Results are deterministic")   */
  xent_verdict *verdict;     /* XENT_TARGETS_DEFERRED: where the verdict goes; else unused   */
} xent_exec;

#define XENT_EXEC_INIT {XENT_BACKEND_AUTO, 0, NULL, NULL, 0, 0, NULL}

XENT_API xent_exec xent_exec_default(void);

/* Bytes of CUDA scratch a call with this many rows uses (0 for rows == 0 is
 * never returned: there is always a small header). An empty batch (rows 0)
 * works wherever its pointers live: under XENT_BACKEND_AUTO the first of
 * the logits and the outputs that is not NULL decides the backend. */
XENT_API size_t xent_workspace_size(int64_t rows);

/* ------------------------------------------------------------------------ */
/* Forward and backward                                                      */
/* ------------------------------------------------------------------------ */

/* Loss (and the optional outputs) without a gradient. The logits are only
 * read; evaluation code uses this. */
XENT_API xent_status xent_forward(const xent_input *in, const xent_options *opt,
                                  const xent_output *out, const xent_exec *exec);

/* Loss and the gradient: on success the logits hold d(loss)/d(logits) in the
 * same dtype and layout (padding between rows is left alone). The gradient
 * is for an upstream gradient of 1: mean/sum scaling is already applied. */
XENT_API xent_status xent_forward_grad(const xent_input *in, const xent_options *opt,
                                       const xent_output *out, const xent_exec *exec);

/* The backward pass: multiplies the gradient that xent_forward_grad left in
 * `grad` by grad_output, in place. grad_output points to 1 float (reductions
 * mean and sum) or to `rows` floats, one per row (reduction none), on the same
 * side as `grad`. On the GPU the value is read on the device (no host sync);
 * a scalar grad_output of exactly 1 skips the pass over `grad`. */
XENT_API xent_status xent_backward(void *grad, xent_dtype dtype, int64_t rows, int64_t vocab,
                                   int64_t row_stride, const float *grad_output,
                                   int64_t grad_output_count, const xent_exec *exec);

/* A backward through a gradient that an earlier backward already scaled
 * (retain_graph): grad *= grad_output / applied, in place, then applied =
 * grad_output, where `applied` (count floats, 1 or rows, on grad's side)
 * holds the upstream gradient grad was last scaled by: 1 after
 * xent_forward_grad. All on the device, no host sync; rows whose factor is
 * exactly 1 are skipped. */
XENT_API xent_status xent_backward_rescale(void *grad, xent_dtype dtype, int64_t rows,
                                           int64_t vocab, int64_t row_stride,
                                           const float *grad_output, float *applied,
                                           int64_t count, const xent_exec *exec);

/* The same with the scalar known on the host: returns at once when it is 1. */
XENT_API xent_status xent_backward_scale(void *grad, xent_dtype dtype, int64_t rows,
                                         int64_t vocab, int64_t row_stride, float grad_output,
                                         const xent_exec *exec);

/* ------------------------------------------------------------------------ */
/* Fused linear cross-entropy: the LM head and the loss in one call          */
/* ------------------------------------------------------------------------ */
/*
 * The logits are x_r W^T + b (hidden state x_r, the head's weight W of V x H
 * in PyTorch's nn.Linear layout, optional bias b). xent computes them a
 * chunk of rows at a time into a scratch buffer, runs the cross-entropy of
 * each chunk with every option of xent_options, and turns the chunk's
 * gradient into those of the hidden states, the weight and the bias before
 * the next chunk overwrites it: the BT x V logits never exist at once.
 *
 *     dX_r = g_r W           dW = sum_r g_r^T x_r          db = sum_r g_r
 *
 * with g_r the gradient of the loss over row r's logits (xent_forward_grad's
 * gradient), times the upstream gradient. On the GPU the matrix products
 * run through cuBLASLt (loaded when first needed) in fp32 accumulation, the
 * logits and g in the call's dtype; on the CPU through a CBLAS library
 * (OpenBLAS; XENT_BLAS names another), every product in fp32.
 *
 * Chunks: xent_linear_options.chunk_rows rows at a time, or as many as fit
 * in memory_budget bytes of scratch, or by default what fits in 1/16 of the
 * materialised logits' bytes (at least 64 rows, as memory allows). Larger
 * chunks run the products faster and, with a bf16/fp16 weight gradient,
 * round it fewer times (once per chunk); smaller ones hold less. On the
 * GPU, where dX's product over a chunk is small and V long against H (a
 * 16-bit call), part of the scratch lets cuBLASLt split that product's k,
 * beside chunk_rows or within the budget (xent_linear_workspace_size counts
 * it).
 *
 * Token scaling (use_token_scaling, as in the peer library): each row's
 * loss, z-loss and gradient are multiplied by the row's target probability
 * p_y = exp(x'_y - lse), treated as a constant.
 *
 * The CUDA backend needs a scratch area of xent_linear_workspace_size()
 * bytes: pass it in exec->workspace, or leave that NULL and xent takes it
 * stream-ordered for the call. Target checking works as for the loss over
 * logits, except that XENT_TARGETS_DEFERRED is not available: the checked
 * mode waits for its verdict once the first chunk's logits are queued,
 * before anything is written to the caller's buffers.
 */

typedef struct xent_linear_input {
  const void *hidden;        /* rows x hidden_size, row r at hidden + r * hidden_stride elements */
  int64_t rows;              /* BT >= 0                                                   */
  int64_t hidden_size;       /* H >= 1                                                    */
  int64_t hidden_stride;     /* elements between rows of hidden; 0 means hidden_size      */
  const void *weight;        /* vocab x hidden_size, row j at weight + j * weight_stride  */
  int64_t vocab;             /* V, 1 <= V <= INT32_MAX                                    */
  int64_t weight_stride;     /* elements between rows of weight; 0 means hidden_size      */
  const void *bias;          /* optional: vocab values; NULL: no bias                     */
  xent_dtype dtype;          /* of hidden, weight, bias and the logits computed from them */
  const void *targets;       /* rows class indices in [0, V), or ignore_index             */
  xent_index_type target_type;
  const float *class_weights; /* optional class weights, V finite floats                  */
} xent_linear_input;

/* How a call with gradients is cut into pieces that fit the scratch (a
 * forward-only call always takes rows). Both backends run both schedules;
 * the results agree to rounding.
 *
 * Rows: a chunk of rows at a time over the whole vocabulary, as above. Three
 * products, but dW is read and written once per chunk: at the default budget
 * about 17 chunks whatever BT is, so the smaller the batch the larger that
 * traffic's share of the step.
 *
 * Vocab: a slab of the vocabulary's columns at a time over every row, in two
 * passes. Pass 1, per slab: the logits and each row's partial statistics
 * (the vocabulary-parallel records below, one per slab); pass 2, per slab:
 * the logits again, their gradient from the merged statistics, dW_s = G_s^T
 * X (each slab of dW written once) and dX += G_s W_s. Four products, the
 * logits' twice. dX is the gradient summed over the pieces here: in its own
 * dtype on the GPU (one rounding per slab), in fp32 with XENT_ACCUM_FP32
 * (BT x H x 4 bytes beside the budget) and always on the CPU. Meant for
 * small batches, where dW's traffic over the rows' chunks costs more than a
 * fourth product (bench/NOTES.md has the estimate). chunk_rows must be 0.
 *
 * Auto (default): on the GPU, vocab where a cost model of the two (what
 * each adds to the three products: the weight's traffic over the rows'
 * chunks against the fourth product and dX's traffic over the slabs, fitted
 * to H200 measurements) says it is faster, else rows: vocab for a batch up to
 * about 4200 rows at H = 4096, V = 128256 (3450 for a frozen trunk, whose
 * rows schedule reads W once a chunk; 1850 for a frozen head, which has no
 * dW traffic to save), never for a forward, chunk_rows > 0 or a budget that
 * holds one chunk. On the CPU: rows (its vocab schedule was slower at every
 * shape measured). */
typedef enum xent_linear_schedule {
  XENT_SCHEDULE_AUTO = 0,
  XENT_SCHEDULE_ROWS = 1,
  XENT_SCHEDULE_VOCAB = 2
} xent_linear_schedule;

typedef struct xent_linear_options {
  int use_token_scaling;     /* 0 (default) or 1, see above                              */
  int64_t chunk_rows;        /* rows per chunk (rows schedule); 0 (default): from
                                memory_budget                                            */
  size_t memory_budget;      /* bytes of scratch when chunk_rows is 0; 0 (default): 1/16
                                of the logits' bytes; the least accepted is below        */
  xent_linear_schedule schedule; /* XENT_SCHEDULE_AUTO                                   */
} xent_linear_options;

#define XENT_LINEAR_OPTIONS_INIT {0, 0, 0, XENT_SCHEDULE_AUTO}

/* The least memory_budget: after cuBLASLt's workspace (a quarter of the
 * budget rounded up to 256 bytes, at most 4 MiB), what is left must hold
 * the fixed scratch (xent_workspace_size(rows), and 4 V bytes with a bias
 * gradient, each rounded up to 256 bytes) and one piece. For the rows
 * schedule the piece is a row of logits: V elements, rounded up to 16
 * bytes. For the vocab schedule it is the least, over slab counts n, of
 * w x rows x e + n x rows x 32 + 256 (n + 2) bytes, with e the element's
 * bytes and w = V / n rounded up to 8, at least min(V, 256) rounded up to
 * 8: about 2 rows sqrt(32 V e) (with the rest, 27.8 MB at BT 4096, V
 * 128256, bf16, where the rows schedule's least is 0.46 MB). A
 * smaller budget is refused with XENT_ERROR_BAD_ARGUMENT, and
 * xent_linear_workspace_size() returns 0 for it. */

/* How the gradient that is summed over the pieces is added up: the weight's
 * over the rows schedule's chunks, the hidden states' over the vocab
 * schedule's slabs (the other one is written once, whole). The bias
 * gradient is not covered: it is always summed in fp32 and rounded once.
 *
 * How many roundings each gradient takes (to its own dtype; an fp32
 * gradient's sums are fp32 throughout). Each product adds up in fp32, and
 * with accumulate = 1 it adds what the gradient held before it rounds, so
 * "once" means one rounding of (what it held + the call's sum).
 *   GPU, rows:  dX once; db once; dW once per chunk (XENT_ACCUM_GRAD) or
 *               once (XENT_ACCUM_FP32).
 *   GPU, vocab: dW once; db once; dX once per slab (XENT_ACCUM_GRAD) or
 *               once (XENT_ACCUM_FP32).
 *   CPU:        every gradient once, in either mode (its sums are fp32).
 * Except on the GPU, where a cuBLASLt product adds into a 16-bit gradient
 * in place (accumulate = 1, or a later piece under XENT_ACCUM_GRAD): its
 * kernel may round the product's part to the gradient's dtype before
 * adding what the gradient held, two roundings for that piece. The vocab
 * schedule's dW does (measured on an H100, 2026-12-05: about 7 % of the
 * elements one unit in the last place from a single rounding); the rows
 * schedule's dX of one chunk did not. XENT_ACCUM_FP32 and a fresh
 * gradient (accumulate = 0) are not affected.
 * On the GPU the products read the logits' gradient G in the input's dtype,
 * one more rounding before any of these (the CPU keeps G in fp32). */
typedef enum xent_accum {
  /* Default: in the gradient itself, in its dtype (a bf16 gradient takes one
   * rounding per piece; an fp32 one is exact in fp32). */
  XENT_ACCUM_GRAD = 0,
  /* In an fp32 buffer of the workspace, rounded into the gradient once at
   * the end (the peer's accum_dtype=float32). Costs V * H * 4 bytes of
   * scratch (rows schedule) or BT * H * 4 (vocab) when that gradient is not
   * fp32 already. */
  XENT_ACCUM_FP32 = 1
} xent_accum;

typedef struct xent_linear_grads {
  void *hidden;              /* optional dL/dhidden: rows x H; NULL: not computed (frozen trunk) */
  int64_t hidden_stride;     /* 0 means H                                                */
  xent_dtype hidden_dtype;   /* the input's dtype or XENT_FLOAT32                        */
  void *weight;              /* optional dL/dW: V x H; NULL: not computed (frozen head)  */
  int64_t weight_stride;     /* 0 means H                                                */
  xent_dtype weight_dtype;   /* the input's dtype or XENT_FLOAT32                        */
  void *bias;                /* optional dL/db: V values (needs a bias)                  */
  xent_dtype bias_dtype;     /* the input's dtype or XENT_FLOAT32                        */
  int accumulate;            /* 0: overwrite the gradients; 1: add to what they hold     */
  xent_accum weight_accum;   /* XENT_ACCUM_GRAD: of the summed gradient (xent_accum)    */
  const float *grad_output;  /* optional upstream gradient: 1 value (mean, sum) or rows
                                values (none), on the inputs' side; NULL: 1              */
  int64_t grad_output_count; /* 1 or rows when grad_output is set                        */
} xent_linear_grads;

/* Scratch bytes of the CUDA backend for this call (grads NULL: forward only).
 * 0 when the arguments are invalid (xent_last_error() says why). */
XENT_API size_t xent_linear_workspace_size(const xent_linear_input *in,
                                           const xent_linear_options *lopt,
                                           const xent_linear_grads *grads);

/* The loss and the optional outputs of `out` (as for xent_forward) for
 * evaluation: no gradient. lopt may be NULL (defaults). */
XENT_API xent_status xent_linear_forward(const xent_linear_input *in, const xent_options *opt,
                                         const xent_linear_options *lopt,
                                         const xent_output *out, const xent_exec *exec);

/* The loss, the outputs, and the gradients that `grads` asks for, in one
 * pass. With reduction mean or sum the gradients are for grad_output (1
 * when it is NULL): pass the real upstream gradient here, or scale the
 * results later. With reduction none each row's gradient is scaled by its
 * grad_output value. A call whose grads ask for nothing is a forward. */
XENT_API xent_status xent_linear_forward_backward(const xent_linear_input *in,
                                                  const xent_options *opt,
                                                  const xent_linear_options *lopt,
                                                  const xent_output *out,
                                                  const xent_linear_grads *grads,
                                                  const xent_exec *exec);

/* ------------------------------------------------------------------------ */
/* Vocabulary-parallel cross-entropy: the logits sharded over P ranks        */
/* ------------------------------------------------------------------------ */
/*
 * Rank p holds the columns [offset_p, offset_p + width_p) of every row (the
 * shards tile [0, V)); every rank has every row's target (global class
 * indices) and, with class weights, the whole V-long weight vector. A
 * forward is three steps, with one collective between them:
 *
 *   1. xent_vp_stats: each rank reduces its shard of each row to a record of
 *      R floats (R = xent_vp_record_floats()).
 *   2. The caller all-gathers the records: P x rows x R floats, in rank
 *      order (any engine: NCCL, MPI, torch.distributed).
 *   3. xent_vp_forward: each rank combines the P records of each row and
 *      writes the loss and the optional outputs (the same on every rank) and,
 *      with a gradient, its shard's gradient in place. The backward is
 *      xent_backward on the shard: nothing collective.
 *
 * A record, for rank p and row r (x' the soft-capped logits of the shard):
 *
 *   [0] m   max_j x'_j                     [4] wu  sum_j w_j (x'_j - m) / V
 *   [1] s   sum_j exp(x'_j - m)            [5] sw  sum_j w_j / V
 *   [2] t   x'_y if y is in the shard, else 0   [6] the first arg-max's global
 *   [3] u   sum_j x'_j / V (smoothing)         index (int32 bits)   [7] 0
 *
 * R is 4 (16 bytes a row) unless class weights with label smoothing, token
 * accuracy or predicted tokens are asked for (R = 8). Records combine
 * associatively: m = max m_p, s = sum s_p exp(m_p - m), t = sum t_p, u =
 * sum u_p, wu = sum (wu_p + sw_p (m_p - m)), sw = sum sw_p, the arg-max the
 * lowest index of a maximal m_p. xent_vp_forward combines them in rank
 * order, so every rank that gets the same gathered array computes the same
 * bits. Ignored rows' records are all 0.
 *
 * Smoothing's eps = alpha / V, the weights' sum and N, W use the global V and
 * all rows, so every shard's gradient is the single-GPU gradient's columns.
 */

/* Floats per record for these options (4 or 8). */
XENT_API int xent_vp_record_floats(const xent_options *opt, const float *weights,
                                   const xent_output *out);

/* Step 1. `in` describes the shard: in->logits rows x width (in->vocab is the
 * shard's width), in->targets every row's global target, in->weights NULL or
 * all V weights. vocab: the global V; offset: the shard's first column.
 * records: rows x R floats on the shard's side. Targets are checked as by
 * xent_forward. On the CUDA backend in XENT_TARGETS_DEFERRED mode step 3
 * checks them and this step does not (a bad row's record is zeros), so that
 * no rank waits for its device before the collective. The CPU backend
 * checks them here in every mode and returns the error with no record
 * written: every rank holds the same targets, so every rank stops at the
 * same step. */
XENT_API xent_status xent_vp_stats(const xent_input *in, int64_t vocab, int64_t offset,
                                   const xent_options *opt, const xent_output *out,
                                   float *records, const xent_exec *exec);

/* Step 3. gathered: ranks x rows x R floats, rank order. out as for
 * xent_forward (outputs over all rows, identical on every rank); write_grad
 * 1: the shard's gradient over its logits, for an upstream gradient of 1.
 * Targets were checked in step 1 (and are not read for indexing here);
 * XENT_TARGETS_DEFERRED checks them here on the device and leaves the
 * verdict in exec->verdict, as xent_forward_grad does (a rejected call: NaN
 * reductions, the shard's gradient zero). */
XENT_API xent_status xent_vp_forward(const xent_input *in, int64_t vocab, int64_t offset,
                                     const xent_options *opt, const float *gathered, int ranks,
                                     const xent_output *out, int write_grad,
                                     const xent_exec *exec);

/* ------------------------------------------------------------------------ */
/* What this build and machine support                                       */
/* ------------------------------------------------------------------------ */

typedef struct xent_info {
  int version_major, version_minor, version_patch;
  int cpu_backend;           /* always 1                                                     */
  int cpu_threads;           /* threads the CPU backend uses when num_threads is 0           */
  int cpu_level;             /* the x86-64 level the CPU kernels run at in a portable build
                                (a wheel): 1 (x86-64), 3 (AVX2, FMA, F16C) or 4 (AVX-512),
                                the CPU's, capped by XENT_CPU_LEVEL in the environment; 0 in
                                a build for its own machine (-march=native, from source)    */
  int cuda_built;            /* 1 when the CUDA backend is compiled in                       */
  int cuda_devices;          /* devices the driver reports; 0 without a GPU or driver        */
  int cuda_runtime_version;  /* e.g. 13000; 0 when not built                                  */
  int cuda_driver_version;   /* 0 when there is no driver                                    */
} xent_info;

XENT_API xent_status xent_get_info(xent_info *info);

typedef struct xent_device_info {
  char name[256];
  int sm_major, sm_minor;    /* compute capability                                           */
  int code_arch;             /* the code of this build the device runs, as 10 x major + minor:
                                90 for sm_90a machine code, 80 for compute_80 PTX that the
                                driver compiles; 0 when the build has none for it (every
                                CUDA call then returns XENT_ERROR_UNSUPPORTED)                */
  int plan_arch;             /* the compute capability the launch plan chooses kernels for:
                                the device's, capped at code_arch (a build without the
                                device's own code runs the plan of the code it has)        */
  int multiprocessors;
  int cluster_launch;        /* 1 when thread-block clusters are available (sm_90 and newer) */
  size_t global_memory;      /* bytes                                                        */
  size_t shared_memory_per_block_optin;
} xent_device_info;

XENT_API xent_status xent_get_device_info(int device, xent_device_info *info);

/* "0.1.0" */
XENT_API const char *xent_version(void);

#ifdef __cplusplus
}
#endif
#endif /* XENT_H */
