/*
 * modes.c - what one timed iteration of each mode calls (bench.h's MODE_*):
 *   forward         xent_forward_grad: loss and the gradient written in place
 *   backward        xent_backward with grad_output 0.5 over the gradient left
 *                   by an untimed xent_forward_grad
 *   full            xent_forward_grad + xent_backward with grad_output 1, the
 *                   standard last-layer step (the backward then skips its pass)
 *   forward_nograd  xent_forward: the loss only, logits read-only
 */
#include "bench.h"

/* One timed operation of `mode` on an already prepared call. go_half is the
 * backward mode's grad_output (!= 1), go_one the full mode's (1, skipped);
 * both live on the same side as the logits. */
xent_status run_mode(const xent_input *in, const xent_options *opt, const xent_output *out,
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
