"""xent for JAX: the cross-entropy and the fused linear loss as XLA FFI calls.

The same C library as ``xent.torch``, called through XLA's foreign function
interface on the CPU and on CUDA GPUs, on the computation's own stream, under
``jax.jit``, ``jax.grad`` / ``jax.value_and_grad`` and ``jax.vmap``:

* :func:`cross_entropy` - the loss over (..., V) logits against integer
  targets, every option of ``include/xent.h``;
* :func:`fused_linear_cross_entropy` - the LM head and the loss in one call,
  the logits never held whole;
* :mod:`xent.jax.parallel` - the loss over logits sharded on the vocabulary,
  inside ``shard_map`` (one ``all_gather`` of 16 or 32 bytes a row).

Gradients: the forward computes the gradient with the loss (a custom VJP) and
the backward scales it by the loss's cotangent. Over logits the gradient is
written over the logits' own buffer: the call aliases its output to the
logits, so with the logits donated (``jax.jit(..., donate_argnums=...)``) no
second buffer of their size is made; without donation XLA copies them first
and the result is the same. Only the loss is differentiable: the optional
outputs (z-loss, accuracy, predicted tokens, lse) are constants to autodiff,
and class weights and targets get no gradient.

Bad arguments raise ``TypeError`` or ``ValueError`` naming the argument when
the function is traced, before anything runs. A target outside [0, V) that
is not ``ignore_index`` fails the computation with xent's message (checked
mode, the default; on a GPU the host waits for the device's check once per
call). ``check_targets=False`` is the graph-safe mode on a GPU: such a row's loss
is NaN and its gradient zero (the CPU reads the targets anyway and checks them
in every mode). Under ``jax.vmap`` the calls run one batch element
after another (``vmap_method="sequential"``).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import _ffi
from ._ffi import Options, Wants

__all__ = ["CrossEntropyOutput", "cross_entropy", "fused_linear_cross_entropy"]

_FLOATS = (jnp.float32, jnp.bfloat16, jnp.float16)


class CrossEntropyOutput(NamedTuple):
    """The loss and the optional outputs asked for (None otherwise)."""
    loss: jax.Array
    z_loss: Optional[jax.Array] = None
    token_accuracy: Optional[jax.Array] = None
    predicted_tokens: Optional[jax.Array] = None
    lse: Optional[jax.Array] = None


# ---------------------------------------------------------------------------
# Argument checks (at trace time, before anything runs)
# ---------------------------------------------------------------------------


def _float_array(x, name: str) -> jax.Array:
    x = jnp.asarray(x)
    if x.dtype not in _FLOATS:
        raise TypeError(f"{name} must be float32, bfloat16 or float16, not {x.dtype}")
    return x


def _targets(t, shape, name: str = "targets") -> jax.Array:
    t = jnp.asarray(t)
    if not jnp.issubdtype(t.dtype, jnp.integer):
        raise TypeError(f"{name} must be an integer array, not {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; it must be {tuple(shape)} "
                         "(one class index per row)")
    return t if t.dtype in (jnp.int32, jnp.int64) else t.astype(jnp.int32)


def _weights(w, vocab: int, name: str) -> jax.Array:
    if w is None:
        return _ffi.empty()
    w = jnp.asarray(w)
    if not jnp.issubdtype(w.dtype, jnp.floating):
        raise TypeError(f"{name} must be a float array, not {w.dtype}")
    if tuple(w.shape) != (vocab,):
        raise ValueError(f"{name} has shape {tuple(w.shape)}; it must be ({vocab},)")
    return w.astype(jnp.float32)


def _options(reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
             check_targets, empty_mean) -> Options:
    if reduction not in _ffi.REDUCTIONS:
        raise ValueError(f"reduction is {reduction!r}; it must be 'mean', 'sum' or 'none'")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)) or \
            not -2**63 <= int(ignore_index) < 2**63:
        raise ValueError(f"ignore_index is {ignore_index!r}; it must be an int64")
    ls = float(label_smoothing)
    if not 0.0 <= ls <= 1.0:
        raise ValueError(f"label_smoothing is {label_smoothing!r}; it must be in [0, 1]")
    s = float(lse_square_scale)
    if not (s >= 0.0 and math.isfinite(s)):
        raise ValueError(f"lse_square_scale is {lse_square_scale!r}; it must be >= 0 and finite")
    if softcap is not None:
        c = float(softcap)
        if not (c > 0.0 and math.isfinite(c)):
            raise ValueError(f"softcap is {softcap!r}; it must be None or > 0 and finite")
        softcap = c
    if empty_mean not in ("nan", "zero"):
        raise ValueError(f"empty_mean is {empty_mean!r}; it must be 'nan' or 'zero'")
    return Options(reduction, int(ignore_index), ls, s, softcap, bool(check_targets), empty_mean)


def _result(outs, wants: Wants, any_extra: bool):
    loss, z, acc, lse, pred = outs
    if not any_extra:
        return loss
    stop = jax.lax.stop_gradient
    return CrossEntropyOutput(
        loss, stop(z) if wants.z_loss else None, stop(acc) if wants.accuracy else None,
        stop(_ffi.predicted(pred)) if wants.predicted else None, stop(lse) if wants.lse else None)


def _is_zero(ct) -> bool:
    return isinstance(ct, jax.custom_derivatives.SymbolicZero)


def _scale(g: jax.Array, ct: jax.Array, per_row: bool) -> jax.Array:
    """The gradient for an upstream gradient of 1, times the real one (fp32)."""
    c = ct[..., None] if per_row else ct
    return (g.astype(jnp.float32) * c).astype(g.dtype)


# ---------------------------------------------------------------------------
# Cross-entropy over logits
# ---------------------------------------------------------------------------


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _ce(x, t, w, opt: Options, wants: Wants):
    return tuple(_ffi.call_ce(x, t, w, opt, wants, grad=False))


def _ce_fwd(x, t, w, opt: Options, wants: Wants):
    g, *outs = _ffi.call_ce(x.value, t.value, w.value, opt, wants, grad=True)
    return tuple(outs), g


def _ce_bwd(opt: Options, wants: Wants, g, cts):
    ct = cts[0]
    dx = jnp.zeros_like(g) if _is_zero(ct) else _scale(g, ct, opt.reduction == "none")
    return dx, None, None


_ce.defvjp(_ce_fwd, _ce_bwd, symbolic_zeros=True)


def cross_entropy(logits, targets, weights=None, *, reduction: str = "mean",
                  ignore_index: int = -100, label_smoothing: float = 0.0,
                  lse_square_scale: float = 0.0, softcap: Optional[float] = None,
                  check_targets: bool = True, empty_mean: str = "nan",
                  return_z_loss: bool = False, return_token_accuracy: bool = False,
                  return_predicted_tokens: bool = False, return_lse: bool = False):
    """The softmax cross-entropy of (..., V) logits against integer targets.

    Args:
        logits: float32, bfloat16 or float16, (..., V).
        targets: integer, logits.shape[:-1]; ``ignore_index`` rows count nowhere.
        weights: optional (V,) class weights.
        reduction: 'mean' (over counted rows, or their weights), 'sum', 'none'.
        label_smoothing, lse_square_scale (z-loss), softcap: include/xent.h's math.
        check_targets: True raises on a bad target; False is graph-safe (NaN loss).
        empty_mean: what a mean over no rows is, 'nan' (PyTorch) or 'zero'.
        return_*: the outputs to add (a CrossEntropyOutput then).

    Returns:
        The loss (float32: a scalar, or logits.shape[:-1] for 'none'), or a
        CrossEntropyOutput with the outputs asked for.
    """
    x = _float_array(logits, "logits")
    if x.ndim < 1 or x.shape[-1] < 1 or x.shape[-1] > 2**31 - 1:
        raise ValueError(f"logits has shape {tuple(x.shape)}; it must be (..., V), 1 <= V < 2^31")
    t = _targets(targets, x.shape[:-1])
    w = _weights(weights, x.shape[-1], "weights")
    opt = _options(reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
                   check_targets, empty_mean)
    wants = Wants(bool(return_z_loss), bool(return_token_accuracy), bool(return_lse),
                  bool(return_predicted_tokens))
    outs = _ce(x, t, w, opt, wants)
    return _result(outs, wants, any((return_z_loss, return_token_accuracy,
                                     return_predicted_tokens, return_lse)))


# ---------------------------------------------------------------------------
# Fused linear cross-entropy
# ---------------------------------------------------------------------------


def _linear_call(x, w, b, t, cw, go, opt, wants, lin, grads):
    outs = _ffi.call_linear(x, w, b, t, cw, go, opt, wants, lin, grads)
    return tuple(outs[:5]), tuple(outs[5:])


@partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7))
def _linear(x, w, b, t, cw, opt: Options, wants: Wants, lin: tuple):
    outs, _ = _linear_call(x, w, b, t, cw, _ffi.empty(), opt, wants, dict(lin), (None,) * 3)
    return outs


def _grad_dtypes(x, w, b, lin: dict) -> tuple:
    """dX's, dW's and db's dtypes for the perturbed inputs (None: not asked)."""
    has_b = b.value.size > 0
    return (x.value.dtype if x.perturbed else None, w.value.dtype if w.perturbed else None,
            b.value.dtype if has_b and b.perturbed else None)


def _linear_fwd(x, w, b, t, cw, opt: Options, wants: Wants, lin: tuple):
    grads = _grad_dtypes(x, w, b, dict(lin))
    # which gradients, as residuals: an empty array of each one's dtype, or None
    tags = tuple(None if dt is None else jnp.zeros((0,), dt) for dt in grads)
    xv, wv, bv, tv, cv = x.value, w.value, b.value, t.value, cw.value
    if opt.reduction == "none":  # each row's upstream gradient is known only in the backward
        outs, _ = _linear_call(xv, wv, bv, tv, cv, _ffi.empty(), opt, wants, dict(lin),
                               (None,) * 3)
        return outs, (tags, (xv, wv, bv, tv, cv))
    outs, g = _linear_call(xv, wv, bv, tv, cv, _ffi.empty(), opt, wants, dict(lin), grads)
    return outs, (tags, g)


def _linear_bwd(opt: Options, wants: Wants, lin: tuple, res, cts):
    tags, r = res
    grads = tuple(None if tag is None else tag.dtype for tag in tags)
    ct = cts[0]
    if _is_zero(ct):
        return None, None, None, None, None
    if opt.reduction == "none":
        xv, wv, bv, tv, cv = r
        _, g = _linear_call(xv, wv, bv, tv, cv, ct.astype(jnp.float32).reshape(-1), opt,
                            Wants(), dict(lin), grads)
    else:
        g = tuple(_scale(gi, ct, False) for gi in r)
    return tuple(gi if dt is not None else None for gi, dt in zip(g, grads)) + (None, None)


_linear.defvjp(_linear_fwd, _linear_bwd, symbolic_zeros=True)


def fused_linear_cross_entropy(x, w, targets, bias=None, *, class_weights=None,
                               reduction: str = "mean", ignore_index: int = -100,
                               label_smoothing: float = 0.0, lse_square_scale: float = 0.0,
                               softcap: Optional[float] = None, check_targets: bool = True,
                               empty_mean: str = "nan", token_scaling: bool = False,
                               chunk_rows: int = 0, memory_budget: int = 0,
                               schedule: str = "auto", accum_dtype=None,
                               return_z_loss: bool = False, return_token_accuracy: bool = False,
                               return_predicted_tokens: bool = False, return_lse: bool = False):
    """The cross-entropy of the logits x w^T + bias, without holding them.

    Args:
        x: (..., H) hidden states, float32, bfloat16 or float16.
        w: (V, H) the head's weight (PyTorch's nn.Linear layout), x's dtype.
        targets: integer, x.shape[:-1].
        bias: optional (V,), x's dtype.
        class_weights: optional (V,) class weights.
        token_scaling, chunk_rows, memory_budget, schedule ('auto', 'rows',
            'vocab'), accum_dtype (None or float32): include/xent.h's
            xent_linear_options and xent_accum.
        the rest: as cross_entropy.

    Gradients flow to x, w and bias, computed in the same pass as the loss
    (for reduction 'none', in the backward with each row's cotangent); only
    the ones the computation differentiates are computed.
    """
    xa = _float_array(x, "x")
    wa = _float_array(w, "w")
    if xa.ndim < 1 or wa.ndim != 2 or wa.shape[1] != xa.shape[-1]:
        raise ValueError(f"x {tuple(xa.shape)} and w {tuple(wa.shape)}: w must be (V, H) with "
                         "H the last dimension of x")
    if wa.dtype != xa.dtype:
        raise TypeError(f"w is {wa.dtype} but x is {xa.dtype}; they must share a dtype")
    V = wa.shape[0]
    b = _ffi.empty(xa.dtype)
    if bias is not None:
        b = jnp.asarray(bias)
        if b.dtype != xa.dtype or tuple(b.shape) != (V,):
            raise ValueError(f"bias must be ({V},) of {xa.dtype}, not {tuple(b.shape)} {b.dtype}")
    t = _targets(targets, xa.shape[:-1])
    cw = _weights(class_weights, V, "class_weights")
    opt = _options(reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
                   check_targets, empty_mean)
    schedules = {"auto": 0, "rows": 1, "vocab": 2}
    if schedule not in schedules:
        raise ValueError(f"schedule is {schedule!r}; it must be 'auto', 'rows' or 'vocab'")
    if int(chunk_rows) < 0 or int(memory_budget) < 0:
        raise ValueError("chunk_rows and memory_budget must be >= 0")
    if accum_dtype not in (None, jnp.float32, np.float32, "float32"):
        raise ValueError(f"accum_dtype is {accum_dtype!r}; it must be None or float32")
    lin = (("token_scaling", int(bool(token_scaling))), ("chunk_rows", int(chunk_rows)),
           ("memory_budget", int(memory_budget)), ("schedule", schedules[schedule]),
           ("accum_fp32", int(accum_dtype is not None)))
    wants = Wants(bool(return_z_loss), bool(return_token_accuracy), bool(return_lse),
                  bool(return_predicted_tokens))
    outs = _linear(xa, wa, b, t, cw, opt, wants, lin)
    return _result(outs, wants, any((return_z_loss, return_token_accuracy,
                                     return_predicted_tokens, return_lse)))
