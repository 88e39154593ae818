"""xent for PyTorch: a fused cross-entropy loss with an in-place gradient.

Usage::

    import xent.torch
    loss_fn = xent.torch.CrossEntropyLoss(ignore_index=-100)
    loss = loss_fn(logits.view(-1, V), labels.view(-1))
    loss.backward()

or the functional form ``xent.torch.cross_entropy(logits, labels, ...)``,
which takes the peer library's ``liger_cross_entropy`` arguments in the same
positional order. Without any ``return_*`` flag the loss tensor alone is
returned, otherwise a :class:`CrossEntropyOutput`.

Semantics
---------
* Logits of shape (..., V) (float32, bfloat16 or float16) against targets of
  shape ``logits.shape[:-1]`` (int32 or int64), as torch requires; rows may be
  strided (``stride(-1) == 1``), other layouts are copied first.
* The loss is computed in fp32 and returned in the logits' dtype, like
  ``torch.nn.functional.cross_entropy``. ``reduction="none"`` returns
  ``logits.shape[:-1]`` values. ``token_accuracy`` is fp32 (the mean over
  non-ignored rows for "mean" and "sum", one value per row for "none"),
  ``predicted_tokens`` int64, one per row (-1 for ignored rows).
* A mean over no rows (every target ``ignore_index``, a fully masked
  micro-batch) is 0 with a zero gradient, as in the peer library, not NaN as
  in ``F.cross_entropy``: a NaN there would poison the run.
* CUDA tensors run on the CUDA backend, on the tensor's device and on torch's
  current stream; the call never waits for the device. With
  ``check_targets=True`` (the default) a bad target raises
  :class:`xent.XentValueError` naming the first bad row. For a loss that
  requires grad the check runs on the device and the host never waits for
  it: the loss's backward raises when the device has finished the forward
  by then (no gradient is returned), otherwise the next xent loss or
  :func:`check_pending` raises; the rejected loss is NaN and the gradient
  it leaves zero, so the step that ran on it moved nothing through the
  loss. Without grad (or with ``reduction="none"``) the forward itself
  raises. ``check_targets=False`` selects the graph-safe mode: a bad target
  gives a NaN loss and a zero gradient row instead of an exception. Use it
  for CUDA graph capture (``torch.cuda.graph``, ``torch.compile(mode=
  "reduce-overhead")``). On the CPU targets are always checked at once.

Memory: the gradient replaces the logits
----------------------------------------
When the logits require grad (and grad mode is on), the forward pass writes
d(loss)/d(logits) over the logits' storage, in place, and saves that tensor
for the backward pass: training holds one N x V buffer, not two. **After the
forward call the logits tensor holds the gradient, not the logits.** Code
that needs the logits afterwards must clone them first. The in-place write
bumps the logits' autograd version counter, so an earlier operation that
saved the logits for its own backward (``torch.exp``, ``torch.relu``...)
raises autograd's "modified by an inplace operation" error instead of
computing a wrong gradient. Without grad (``torch.no_grad()``, or logits that
do not require grad) the logits are only read.

The backward pass multiplies the saved gradient by the upstream gradient in
place, with the C library's own kernel: no second N x V buffer, no host
synchronisation (a scalar 1 skips the pass), and no autograd version-counter
bump. The gradient it returns is that buffer, viewed in the input's shape.

Backward more than once (``retain_graph=True``)
------------------------------------------------
Each loss keeps the upstream gradient its saved gradient was last scaled by
(one fp32 value, or one per row for "none"), in one small tensor, and every
backward rescales by new/old on the device (``xent_backward_rescale``):
``loss.backward(retain_graph=True); loss.backward()`` accumulates the
gradient twice, exactly as with torch. If an earlier upstream gradient was
exactly 0 the information is gone and the rescaled gradient is NaN (loud
rather than silently wrong). The returned gradient aliases the saved buffer,
and a leaf's ``.grad`` may take that buffer over on the first backward; so
when the logits are themselves a leaf, a later backward with a different
upstream gradient rescales that ``.grad`` as well (equal upstream
gradients, as in ``loss.backward()`` twice, accumulate correctly). Logits
produced by a layer, the usual case, have no such caveat. Second-order
gradients (``create_graph=True``) are not supported.

torch.compile
-------------
The C calls are custom operators (``torch.ops.xent.forward``,
``torch.ops.xent.forward_grad``, ``torch.ops.xent.backward_``), declared
once from one argument list, with fake implementations, wrapped in an
autograd.Function, so a training step that calls the loss compiles with
``fullgraph=True``. Traced, checked targets are checked in the forward (the
deferred check's verdict is host state a graph cannot hold).
"""

import ctypes
import threading
from typing import Optional

import torch
from torch import Tensor

from .. import _lib
from .._lib import XentError, XentRuntimeError, XentValueError
from . import _verdicts
from ._verdicts import check_pending
from ._common import (_DTYPES, _NONE, _TARGET_TYPES, CrossEntropyOutput, _alloc_outputs,
                      _check_options, _exec_for, _extras, _f32, _options_for, _ptr, _row_stride,
                      _run_backward, _target_check)

__all__ = [
    "CrossEntropyLoss",
    "FusedLinearCrossEntropyLoss",
    "fused_linear_cross_entropy",
    "CrossEntropyOutput",
    "cross_entropy",
    "check_pending",
    "XentError",
    "XentValueError",
    "XentRuntimeError",
]

def _check_rows(x: Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D (rows, vocab), got shape {tuple(x.shape)}")
    if x.dtype not in _DTYPES:
        raise ValueError(f"{name} must be float32, bfloat16 or float16, not {x.dtype}")
    n, v = x.shape
    if v > 1 and n > 0 and x.stride(1) != 1:
        raise ValueError(f"{name} needs a contiguous last dimension (stride {x.stride(1)})")
    if n > 1 and x.stride(0) < v:
        raise ValueError(f"{name} rows overlap (row stride {x.stride(0)} < vocab {v})")


def _run_forward(logits, targets, weight, reduction, ignore_index, label_smoothing,
                 lse_square_scale, softcap, check, empty_zero, want_z, want_acc, want_pred,
                 grad, verdict=None):
    """The C forward on tensors. Returns (loss, z, acc, pred): fp32 loss, and
    the optional outputs that were asked for (None for the others). `check`:
    an XENT_TARGETS_* code; DEFERRED leaves the verdict in `verdict`.
    """
    loss, z, acc, pred = _alloc_outputs(logits.shape[0], reduction, want_z, want_acc,
                                        want_pred, logits.device)
    opt = _options_for((reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
                        check, empty_zero))
    _c_forward(logits, targets, weight, opt, loss, z, acc, pred, grad, verdict)
    return loss, z, acc, pred


class _Calls:
    """One thread's C structures for the forward calls, and the entry points:
    filled field by field for each call (building them afresh costs host time
    that is a visible part of a small step: bench/host_time.py)."""

    __slots__ = ("inp", "out", "inp_ref", "out_ref", "forward", "forward_grad")

    def __init__(self):
        self.inp = _lib.XentInput()
        self.out = _lib.XentOutput()
        self.inp_ref = ctypes.byref(self.inp)
        self.out_ref = ctypes.byref(self.out)
        self.forward = _lib.lib().xent_forward
        self.forward_grad = _lib.lib().xent_forward_grad


_calls_local = threading.local()


def _c_forward(logits, targets, weight, opt, loss, z, acc, pred, grad, verdict):
    """xent_forward (grad False) or xent_forward_grad on tensors: the fp32
    outputs given (None for those not asked for); raises on error. CUDA: the
    workspace the C library takes stream-ordered for the call."""
    c = getattr(_calls_local, "calls", None)
    if c is None:
        c = _calls_local.calls = _Calls()
    n, v = logits.shape
    inp, out = c.inp, c.out
    inp.logits = _ptr(logits)
    inp.dtype = _DTYPES[logits.dtype]
    inp.rows = n
    inp.vocab = v
    inp.row_stride = _row_stride(logits)
    inp.targets = _ptr(targets)
    inp.target_type = _TARGET_TYPES[targets.dtype]
    inp.weights = _ptr(weight)
    out.loss = _ptr(loss)
    out.z_loss = _ptr(z)
    out.token_accuracy = _ptr(acc)
    out.predicted = _ptr(pred)
    status = (c.forward_grad if grad else c.forward)(
        c.inp_ref, ctypes.byref(opt), c.out_ref, ctypes.byref(_exec_for(logits, verdict)))
    if status:
        _lib.check(status)


# ---------------------------------------------------------------------------
# Custom operators (what torch.compile sees), declared once
# ---------------------------------------------------------------------------

# The arguments of both forward operators after the logits, and their types.
_ARGS = ("Tensor targets, Tensor? weight, int reduction, int ignore_index, "
         "float label_smoothing, float lse_square_scale, float? softcap, int check, "
         "bool empty_zero, bool want_z, bool want_acc, bool want_pred")
_OUTS = "Tensor loss, Tensor z, Tensor acc, Tensor pred"
torch.library.define("xent::forward", f"(Tensor logits, {_ARGS}) -> ({_OUTS})")
torch.library.define("xent::forward_grad",
                     f"(Tensor(a!) logits, {_ARGS}) -> ({_OUTS}, Tensor applied)")
torch.library.define("xent::backward_", "(Tensor(a!) grad, Tensor grad_output, "
                                        "Tensor(b!) applied) -> ()")


def _outputs(logits, reduction, want_z, want_acc, want_pred, outs=None):
    """(loss, z, acc, pred) for the operators' fixed signature: the outputs
    computed (`outs`), or fakes of their shapes; empty tensors for those not
    asked for."""
    n = logits.shape[0]
    shape = (n,) if reduction == _NONE else ()
    loss, z, acc, pred = outs if outs is not None else (None,) * 4
    new = logits.new_empty
    return (
        loss if loss is not None else new(shape, dtype=_f32),
        z if z is not None else new(shape if want_z and outs is None else (0,), dtype=_f32),
        acc if acc is not None else new(shape if want_acc and outs is None else (0,),
                                        dtype=_f32),
        pred if pred is not None else new((n,) if want_pred and outs is None else (0,),
                                          dtype=torch.int64),
    )


def _applied_for(logits, reduction):
    count = logits.shape[0] if reduction == _NONE else 1
    return torch.ones(count, dtype=_f32, device=logits.device)


@torch.library.impl("xent::forward", ("cpu", "cuda"))
def _forward_impl(logits, targets, weight, reduction, ignore_index, label_smoothing,
                  lse_square_scale, softcap, check, empty_zero, want_z, want_acc, want_pred):
    outs = _run_forward(logits, targets, weight, reduction, ignore_index, label_smoothing,
                        lse_square_scale, softcap, check, empty_zero, want_z, want_acc,
                        want_pred, grad=False)
    return _outputs(logits, reduction, want_z, want_acc, want_pred, outs)


@torch.library.impl("xent::forward_grad", ("cpu", "cuda"))
def _forward_grad_impl(logits, targets, weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale, softcap, check, empty_zero, want_z, want_acc,
                       want_pred):
    """Writes d(loss)/d(logits) over the logits. The last output is the
    backward state: the upstream gradient the saved gradient is scaled by
    (ones), an operator output so that a compiled graph saves it."""
    outs = _run_forward(logits, targets, weight, reduction, ignore_index, label_smoothing,
                        lse_square_scale, softcap, check, empty_zero, want_z, want_acc,
                        want_pred, grad=True)
    return _outputs(logits, reduction, want_z, want_acc, want_pred, outs) + (
        _applied_for(logits, reduction),)


@torch.library.impl("xent::backward_", ("cpu", "cuda"))
def _backward_impl(grad, grad_output, applied):
    _run_backward(grad, grad_output, applied)


@torch.library.register_fake("xent::forward")
def _forward_fake(logits, targets, weight, reduction, *rest):
    want_z, want_acc, want_pred = rest[-3:]
    return _outputs(logits, reduction, want_z, want_acc, want_pred)


@torch.library.register_fake("xent::forward_grad")
def _forward_grad_fake(logits, targets, weight, reduction, *rest):
    want_z, want_acc, want_pred = rest[-3:]
    count = logits.shape[0] if reduction == _NONE else 1
    return _outputs(logits, reduction, want_z, want_acc, want_pred) + (
        logits.new_empty((count,), dtype=_f32),)


@torch.library.register_fake("xent::backward_")
def _backward_fake(grad, grad_output, applied):
    return None


# ---------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------


_NO_GRADS = (None,) * 12


class _CrossEntropyFunction(torch.autograd.Function):
    """Outputs: the loss, then those of z, accuracy and predicted tokens that
    were asked for, in that order (fewer outputs: less autograd work a step).
    The backward state is `applied`, the upstream gradient the saved
    gradient holds: the operator's output traced, None (1) eager until the
    first backward, so that an eager step makes no tensor for it."""

    @staticmethod
    def forward(ctx, logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, empty_zero, want_z, want_acc, want_pred):
        ctx.verdict = None
        ctx.applied = None
        if torch.compiler.is_compiling():
            if check == _lib.XENT_TARGETS_DEFERRED:
                check = _lib.XENT_TARGETS_CHECKED
            loss, z, acc, pred, applied = torch.ops.xent.forward_grad(
                logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, empty_zero, want_z, want_acc, want_pred)
            # Traced, a fresh tensor (copy=True): returning the operator's output
            # directly from the Function loses the upstream gradient.
            loss = loss.to(dtype=logits.dtype, copy=True)
            ctx.save_for_backward(logits.detach(), applied)
        else:
            # Eager: the implementation itself (the operator's dispatch costs
            # host time), and the version bump the operator makes for its
            # in-place write, before saving, so that the saved buffer is current.
            if check == _lib.XENT_TARGETS_DEFERRED:
                ctx.verdict = _verdicts.take((targets, weight))
            loss, z, acc, pred = _run_forward(
                logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, empty_zero, want_z, want_acc, want_pred,
                grad=True, verdict=ctx.verdict)
            torch.autograd.graph.increment_version(logits)
            if logits.dtype != _f32:
                loss = loss.to(dtype=logits.dtype)
            ctx.save_for_backward(logits.detach())
        if not (want_z or want_acc or want_pred):
            return loss
        return (loss,) + _extras(ctx, logits.dtype, z, acc, pred, want_z, want_acc, want_pred)

    @staticmethod
    def backward(ctx, grad_loss, *grad_extras):
        saved = ctx.saved_tensors
        grad = saved[0]
        if torch.compiler.is_compiling():
            torch.ops.xent.backward_(grad, grad_loss, saved[1])
            return (grad,) + _NO_GRADS
        _verdicts.poll(ctx)
        # The implementation itself: the operator's dispatcher would bump the
        # saved gradient's version counter (and a second backward through the
        # same graph would fail autograd's saved-tensor check).
        ctx.applied = _run_backward(grad, grad_loss, ctx.applied)
        return (grad,) + _NO_GRADS


class _StepFunction(torch.autograd.Function):
    """The eager training step's loss (the common case: 2-D logits that
    require grad, 1-D targets, no class weights, no extra outputs): what
    _CrossEntropyFunction does for it, with fewer arguments, allocations and
    checks between the C calls. At BT = 1024 the step's GPU time is about
    0.2 ms, so each microsecond of Python here is a visible part of it
    (bench/host_time.py)."""

    @staticmethod
    def forward(ctx, logits, targets, options, verdict):
        # (new_empty: half the host time of torch.empty with a device)
        shape = () if options.reduction != _NONE else (logits.shape[0],)
        loss = logits.new_empty(shape, dtype=_f32)
        _c_forward(logits, targets, None, options, loss, None, None, None, True, verdict)
        ctx.verdict = verdict
        ctx.applied = None
        torch.autograd.graph.increment_version(logits)
        ctx.save_for_backward(logits.detach())
        return loss if logits.dtype == _f32 else loss.to(dtype=logits.dtype)

    @staticmethod
    def backward(ctx, grad_loss):
        grad, = ctx.saved_tensors
        _verdicts.poll(ctx)
        ctx.applied = _run_backward(grad, grad_loss, ctx.applied)
        return grad, None, None, None


def _fast_step(x, t, red, ignore_index, label_smoothing, lse_square_scale, softcap,
               check_targets):
    """The loss through _StepFunction; x (N, V) and t (N,) as checked by the
    caller."""
    if softcap is not None:
        softcap = float(softcap)
    check = _target_check(check_targets, True, red, x.is_cuda)
    opt = _options_for((red, int(ignore_index), float(label_smoothing),
                        float(lse_square_scale), softcap, check, True))
    verdict = _verdicts.take((t, None)) if check == _lib.XENT_TARGETS_DEFERRED else None
    return _StepFunction.apply(x, t, opt, verdict)


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    """torch's rule for the deprecated size_average and reduce arguments."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Optional[Tensor] = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    *,
    check_targets: bool = True,
):
    """Fused softmax cross-entropy of `input` (..., V) against `target` (...).

    The arguments are ``liger_cross_entropy``'s, in its positional order
    (``size_average`` and ``reduce`` as torch's deprecated ones). Returns the
    loss tensor, or a :class:`CrossEntropyOutput` when any ``return_*`` flag
    is set. A mean over no rows is 0. When `input` requires grad the gradient
    is written over it in place (see the module documentation). Bad arguments
    raise :class:`xent.XentError` (a ValueError) naming the argument, before
    anything is written.
    """
    reduction = _legacy_reduction(size_average, reduce, reduction)
    red = _check_options(label_smoothing, softcap, reduction)
    return _cross_entropy(input, target, weight, ignore_index, red, label_smoothing,
                          lse_square_scale, softcap, return_z_loss, return_token_accuracy,
                          return_predicted_tokens, check_targets)


def _cross_entropy(input, target, weight, ignore_index, red, label_smoothing,
                   lse_square_scale, softcap, return_z_loss, return_token_accuracy,
                   return_predicted_tokens, check_targets):
    if (not torch.compiler.is_compiling() and weight is None
            and not (return_z_loss or return_token_accuracy or return_predicted_tokens)
            and type(input) is Tensor and type(target) is Tensor and input.requires_grad
            and input.dim() == 2 and target.dim() == 1 and torch.is_grad_enabled()
            and input.dtype in _DTYPES and target.dtype in _TARGET_TYPES):
        n, v = input.shape
        if (target.shape[0] == n and v > 0 and input.device == target.device
                and (input.stride(1) == 1 or v == 1) and (n < 2 or input.stride(0) >= v)
                and (target.stride(0) == 1 or n < 2)):
            return _fast_step(input, target, red, ignore_index, label_smoothing,
                              lse_square_scale, softcap, check_targets)
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError("input and target must be tensors")
    if input.dtype not in _DTYPES:
        raise ValueError(f"input must be float32, bfloat16 or float16, not {input.dtype}")
    if input.dim() == 0 or input.shape[-1] == 0:
        raise XentValueError(2, f"input has no classes (shape {tuple(input.shape)}): its last "
                                "dimension is the vocabulary and must be at least 1")
    lead = input.shape[:-1]
    if target.shape != lead:
        raise ValueError(
            f"target has shape {tuple(target.shape)} but input has shape "
            f"{tuple(input.shape)}: the target's shape must be input.shape[:-1]")
    tdt = target.dtype
    if tdt not in _TARGET_TYPES and (tdt.is_floating_point or tdt.is_complex
                                     or tdt == torch.bool):
        raise ValueError(f"target must hold class indices (int32 or int64), not {tdt}")
    dev = input.device
    if target.device != dev:
        raise ValueError(f"target is on {target.device} but input is on {dev}")
    v = input.shape[-1]
    x = input if input.dim() == 2 else input.reshape(-1, v)
    if not x.is_contiguous() and ((v > 1 and x.shape[0] > 0 and x.stride(1) != 1)
                                  or (x.shape[0] > 1 and x.stride(0) < v)):
        x = x.contiguous()
    t = target if target.dim() == 1 else target.reshape(-1)
    if tdt not in _TARGET_TYPES:
        t = t.to(torch.int64)
    if not t.is_contiguous():
        t = t.contiguous()
    w = None
    if weight is not None:
        if weight.shape != (v,):
            raise ValueError(f"weight must have shape ({v},), got {tuple(weight.shape)}")
        w = weight
        if w.dtype != _f32 or w.device != dev or (v > 1 and w.stride(0) != 1):
            w = w.to(device=dev, dtype=_f32).contiguous()
    cap = None if softcap is None else float(softcap)
    grad = input.requires_grad and torch.is_grad_enabled()
    check = _target_check(check_targets, grad, red, x.is_cuda)
    args = (t, w, red, int(ignore_index), float(label_smoothing), float(lse_square_scale),
            cap, check, True, bool(return_z_loss), bool(return_token_accuracy),
            bool(return_predicted_tokens))

    if grad:
        outs = _CrossEntropyFunction.apply(x, *args)
        if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
            return outs if red != _NONE else outs.view(lead)
        loss = outs[0]
        extras = iter(outs[1:])
        z = next(extras) if return_z_loss else None
        acc = next(extras) if return_token_accuracy else None
        pred = next(extras) if return_predicted_tokens else None
    else:
        if torch.compiler.is_compiling():
            loss, z, acc, pred = torch.ops.xent.forward(x, *args)
        else:  # the implementation itself: less host time than the operator's dispatch
            loss, z, acc, pred = _run_forward(x, *args, grad=False)
        loss = loss.to(input.dtype)
        if return_z_loss:
            z = z.to(input.dtype)

    if red == _NONE:
        loss = loss.view(lead)
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    if return_z_loss and red == _NONE:
        z = z.view(lead)
    if return_token_accuracy and red == _NONE:
        acc = acc.view(lead)
    if return_predicted_tokens:
        pred = pred.view(lead)
    return CrossEntropyOutput(
        loss=loss,
        z_loss=z if return_z_loss else None,
        token_accuracy=acc if return_token_accuracy else None,
        predicted_tokens=pred if return_predicted_tokens else None,
    )


class CrossEntropyLoss(torch.nn.Module):
    """Fused cross-entropy loss module; the arguments of the peer library's
    ``LigerCrossEntropyLoss`` (checked here, when the module is made).

    ``weight`` is kept as a (non-persistent) buffer, so ``.to(device)`` moves
    it. See the module documentation for the in-place gradient.
    """

    def __init__(
        self,
        weight: Optional[Tensor] = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: Optional[float] = None,
        return_z_loss: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        *,
        check_targets: bool = True,
    ):
        super().__init__()
        _check_options(label_smoothing, softcap, reduction)
        self.register_buffer("weight", weight, persistent=False)
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.check_targets = check_targets

    def forward(self, input: Tensor, target: Tensor):
        red = _lib.REDUCTIONS.get(self.reduction)
        if red is None:  # changed since the module was made
            red = _lib.reduction_code(self.reduction)
        return _cross_entropy(input, target, self.weight, self.ignore_index, red,
                              self.label_smoothing, self.lse_square_scale, self.softcap,
                              self.return_z_loss, self.return_token_accuracy,
                              self.return_predicted_tokens, self.check_targets)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, "
                f"lse_square_scale={self.lse_square_scale}, softcap={self.softcap}")


# The fused linear cross-entropy (its own module, exported here).
from .linear import FusedLinearCrossEntropyLoss, fused_linear_cross_entropy  # noqa: E402
