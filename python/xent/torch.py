"""xent for PyTorch: a fused cross-entropy loss with an in-place gradient.

Usage::

    import xent.torch
    loss_fn = xent.torch.CrossEntropyLoss(ignore_index=-100)
    loss = loss_fn(logits.view(-1, V), labels.view(-1))
    loss.backward()

or the functional form ``xent.torch.cross_entropy(logits, labels, ...)``.
The arguments and the structured output follow LigerCrossEntropyLoss:
without any ``return_*`` flag the loss tensor alone is returned, otherwise a
:class:`CrossEntropyOutput`.

Semantics
---------
* Logits of shape (..., V) (float32, bfloat16 or float16) are flattened to
  (N, V); targets (int32 or int64, any shape with N elements) are flattened.
  Rows may be strided (``stride(-1) == 1``); other layouts are copied first.
* The loss is computed in fp32 and returned in the logits' dtype, like
  ``torch.nn.functional.cross_entropy``. ``reduction="none"`` returns
  ``logits.shape[:-1]`` values. ``token_accuracy`` is fp32 (the mean over
  non-ignored rows for "mean" and "sum", one value per row for "none"),
  ``predicted_tokens`` int64, one per row (-1 for ignored rows).
* CUDA tensors run on the CUDA backend, on the tensor's device and on
  torch's current stream, with scratch memory from torch's allocator; the
  call never synchronises with the host unless ``check_targets=True`` (the
  default), where the C library waits for its device-side target check so
  that a bad target raises. ``check_targets=False`` selects the graph-safe
  mode: a bad target gives a NaN loss instead of an exception. Use it for
  CUDA graph capture (``torch.cuda.graph``, ``torch.compile(mode=
  "reduce-overhead")``). On the CPU targets are always checked.

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
place, with the C library's own kernel (``xent_backward``): no second N x V
buffer, no host synchronisation (the upstream gradient stays on the device;
a scalar 1 skips the pass), and no autograd version-counter bump. The
gradient it returns is that buffer, viewed in the input's shape.

Backward more than once (``retain_graph=True``)
------------------------------------------------
Each loss remembers the upstream gradient its saved gradient was last scaled
by (one fp32 value, or one per row for "none"), so a second backward through
the same graph rescales by new/old and returns the right gradient for the new
upstream gradient: ``loss.backward(retain_graph=True); loss.backward()``
accumulates the gradient twice, exactly as with torch. If an earlier upstream
gradient was exactly 0 the information is gone and the rescaled gradient is
NaN (loud rather than silently wrong). The returned gradient aliases the saved
buffer, and a leaf's ``.grad`` may take that buffer over on the first backward;
so when the logits are themselves a leaf, a later backward with a different
upstream gradient rescales that ``.grad`` as well (equal upstream gradients,
as in ``loss.backward()`` twice, accumulate correctly). Logits produced by a
layer, the usual case, have no such caveat. Under torch.compile the same holds.
Second-order gradients (differentiating the gradient, ``create_graph=True``)
are not supported: the gradient returned has no graph.

torch.compile
-------------
The C calls are custom operators (``torch.ops.xent.forward``,
``torch.ops.xent.forward_grad``, ``torch.ops.xent.backward_``) with fake
implementations, wrapped in an autograd.Function, so a training step that
calls the loss compiles with ``fullgraph=True``. Inductor performs the
in-place updates on the logits buffer itself (no copy).
"""

from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from ._lib import XentError, XentRuntimeError, XentValueError

__all__ = [
    "CrossEntropyLoss",
    "CrossEntropyOutput",
    "cross_entropy",
    "XentError",
    "XentValueError",
    "XentRuntimeError",
]

_DTYPES = {
    torch.float32: _lib.XENT_FLOAT32,
    torch.bfloat16: _lib.XENT_BFLOAT16,
    torch.float16: _lib.XENT_FLOAT16,
}
_TARGET_TYPES = {torch.int32: _lib.XENT_INT32, torch.int64: _lib.XENT_INT64}


@dataclass
class CrossEntropyOutput:
    """The structured result when any ``return_*`` flag is set."""

    loss: Tensor
    z_loss: Optional[Tensor] = None
    token_accuracy: Optional[Tensor] = None
    predicted_tokens: Optional[Tensor] = None


# ---------------------------------------------------------------------------
# Calling the C library on tensors
# ---------------------------------------------------------------------------


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    if t is None or t.numel() == 0:
        return None
    return t.data_ptr()


# The current stream's handle without building a torch.cuda.Stream object (the
# accessor torch's own compiled code uses); absent from CPU-only builds.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(index: int) -> int:
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def _exec_for(t: Tensor) -> _lib.XentExec:
    """Where the C call runs: the tensor's device and torch's current stream.

    The C library makes that device current for the call itself (and restores
    the caller's), so no torch device context is needed around it.
    """
    ex = _lib.XentExec()
    if t.is_cuda:
        index = t.get_device()
        ex.backend = _lib.XENT_BACKEND_CUDA
        ex.device = index
        ex.stream = _current_stream(index)
    elif t.device.type == "cpu":
        ex.backend = _lib.XENT_BACKEND_CPU
        ex.num_threads = 0
    else:
        raise ValueError(f"xent runs on CPU and CUDA tensors, not on {t.device.type!r}")
    return ex


def _row_stride(x: Tensor) -> int:
    """Elements between row starts of a (N, V) tensor (0 = packed)."""
    n, v = x.shape
    if n <= 1:
        return 0
    return x.stride(0)


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


_workspace_bytes = {}  # rows -> xent_workspace_size(rows)
_options = {}  # the Python option values -> their xent_options (read-only to the C call)


def _memo(cache: dict, key, make):
    """cache[key], made by make(key) on a miss; the cache is emptied past 256 entries."""
    value = cache.get(key)
    if value is None:
        if len(cache) > 256:
            cache.clear()
        value = cache[key] = make(key)
    return value


def _run_forward(logits, targets, weight, reduction, ignore_index, label_smoothing,
                 lse_square_scale, softcap, check_targets, want_z, want_acc, want_pred,
                 grad):
    """The C forward on tensors. Returns (loss, z, acc, pred): fp32 loss, and
    the optional outputs that were asked for (None for the others).
    """
    # The C library trusts sizes and sides of device buffers: check them here.
    _check_rows(logits, "logits")
    n, v = logits.shape
    dev = logits.device
    if (targets.dim() != 1 or targets.shape[0] != n or targets.dtype not in _TARGET_TYPES
            or targets.device != dev or (n > 1 and targets.stride(0) != 1)):
        raise ValueError(f"targets must be a contiguous int32/int64 vector of {n} on {dev}")
    if weight is not None and (weight.shape != (v,) or weight.dtype != torch.float32
                               or weight.device != dev or (v > 1 and weight.stride(0) != 1)):
        raise ValueError(f"weight must be a contiguous float32 vector of {v} on {dev}")
    f32 = torch.float32
    shape = (n,) if reduction == _lib.XENT_REDUCTION_NONE else ()
    # Only the outputs asked for are allocated: at small shapes the host time
    # of each allocation is a visible part of the step (bench/NOTES.md v16).
    loss = torch.empty(shape, dtype=f32, device=dev)
    z = torch.empty(shape, dtype=f32, device=dev) if want_z else None
    acc = torch.empty(shape, dtype=f32, device=dev) if want_acc else None
    pred = torch.empty((n,), dtype=torch.int64, device=dev) if want_pred else None

    inp = _lib.XentInput(_ptr(logits), _DTYPES[logits.dtype], n, v, _row_stride(logits),
                         _ptr(targets), _TARGET_TYPES[targets.dtype], _ptr(weight))
    key = (reduction, ignore_index, label_smoothing, lse_square_scale, softcap, check_targets)
    opt = _memo(_options, key, lambda k: _lib.make_options(*k))
    out = _lib.XentOutput(_ptr(loss), _ptr(z), _ptr(acc), _ptr(pred), None)
    ex = _exec_for(logits)
    if ex.backend == _lib.XENT_BACKEND_CUDA:
        nbytes = _memo(_workspace_bytes, n, _lib.workspace_size)
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        ex.workspace = workspace.data_ptr()
        ex.workspace_bytes = nbytes
    _lib.forward(inp, opt, out, ex, grad)
    return loss, z, acc, pred


def _all_outputs(logits, outs):
    """(loss, z, acc, pred) with empty tensors for the outputs not asked for:
    the operators' fixed signature."""
    loss, z, acc, pred = outs
    f32 = torch.float32
    if z is None:
        z = logits.new_empty((0,), dtype=f32)
    if acc is None:
        acc = logits.new_empty((0,), dtype=f32)
    if pred is None:
        pred = logits.new_empty((0,), dtype=torch.int64)
    return loss, z, acc, pred


def _fake_outputs(logits, reduction, want_z, want_acc, want_pred):
    n = logits.shape[0]
    shape = (n,) if reduction == _lib.XENT_REDUCTION_NONE else ()
    f32 = torch.float32
    return (
        logits.new_empty(shape, dtype=f32),
        logits.new_empty(shape if want_z else (0,), dtype=f32),
        logits.new_empty(shape if want_acc else (0,), dtype=f32),
        logits.new_empty((n,) if want_pred else (0,), dtype=torch.int64),
    )


# ---------------------------------------------------------------------------
# Custom operators (what torch.compile sees)
# ---------------------------------------------------------------------------


@torch.library.custom_op("xent::forward", mutates_args=())
def _forward_op(
    logits: Tensor,
    targets: Tensor,
    weight: Optional[Tensor],
    reduction: int,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: Optional[float],
    check_targets: bool,
    want_z: bool,
    want_acc: bool,
    want_pred: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """Loss and optional outputs; the logits are only read."""
    return _all_outputs(logits, _run_forward(
        logits, targets, weight, reduction, ignore_index, label_smoothing, lse_square_scale,
        softcap, check_targets, want_z, want_acc, want_pred, grad=False))


@_forward_op.register_fake
def _forward_fake(logits, targets, weight, reduction, ignore_index, label_smoothing,
                  lse_square_scale, softcap, check_targets, want_z, want_acc, want_pred):
    return _fake_outputs(logits, reduction, want_z, want_acc, want_pred)


@torch.library.custom_op("xent::forward_grad", mutates_args=("logits",))
def _forward_grad_op(
    logits: Tensor,
    targets: Tensor,
    weight: Optional[Tensor],
    reduction: int,
    ignore_index: int,
    label_smoothing: float,
    lse_square_scale: float,
    softcap: Optional[float],
    check_targets: bool,
    want_z: bool,
    want_acc: bool,
    want_pred: bool,
) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Loss and optional outputs; writes d(loss)/d(logits) over the logits.

    The fifth output is the backward state: the upstream gradient the saved
    gradient is scaled by (fp32 ones: 1 value, or rows for reduction none).
    It is an operator output (not a factory call in the graph) so that
    torch.compile saves it for the backward instead of recomputing it.
    """
    outs = _all_outputs(logits, _run_forward(
        logits, targets, weight, reduction, ignore_index, label_smoothing, lse_square_scale,
        softcap, check_targets, want_z, want_acc, want_pred, grad=True))
    count = logits.shape[0] if reduction == _lib.XENT_REDUCTION_NONE else 1
    return outs + (torch.ones(count, dtype=torch.float32, device=logits.device),)


@_forward_grad_op.register_fake
def _forward_grad_fake(logits, targets, weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale, softcap, check_targets, want_z, want_acc,
                       want_pred):
    count = logits.shape[0] if reduction == _lib.XENT_REDUCTION_NONE else 1
    return _fake_outputs(logits, reduction, want_z, want_acc, want_pred) + (
        logits.new_empty((count,), dtype=torch.float32),)


def _scale_rows(grad: Tensor, factor: Tensor) -> None:
    """xent_backward: grad (N, V) *= factor (fp32, 1 or N values, on grad's device)."""
    n, v = grad.shape
    _lib.backward(grad.data_ptr(), _DTYPES[grad.dtype], n, v, _row_stride(grad),
                  factor.data_ptr(), factor.numel(), _exec_for(grad))


def _backward_impl(grad: Tensor, grad_output: Tensor, applied: Tensor) -> None:
    """Rescale the saved gradient in place from `applied` to `grad_output`.

    `grad` holds G * applied, where G is the gradient for an upstream
    gradient of 1 and `applied` (fp32, 1 or rows values, on grad's device)
    the upstream gradient it was last scaled by (ones after the forward).
    Afterwards it holds G * grad_output and `applied` is grad_output.
    """
    _check_rows(grad, "grad")
    n, v = grad.shape
    if n == 0:
        return
    go = grad_output.reshape(-1).to(device=grad.device, dtype=torch.float32)
    if (applied.dim() != 1 or applied.dtype != torch.float32 or applied.device != grad.device
            or applied.numel() not in (1, n) or not applied.is_contiguous()):
        raise ValueError("applied must be a contiguous float32 vector of 1 or rows values")
    if go.numel() != applied.numel():
        raise ValueError(f"grad_output has {go.numel()} values; expected {applied.numel()}")
    factor = go / applied  # exact (== go) for the first backward
    _scale_rows(grad, factor)
    # Through .data: a write that does not bump `applied`'s version counter
    # (it is saved for the backward, like the gradient).
    applied.data.copy_(go)


@torch.library.custom_op("xent::backward_", mutates_args=("grad", "applied"))
def _backward_op(grad: Tensor, grad_output: Tensor, applied: Tensor) -> None:
    """The backward as an operator (what torch.compile records)."""
    _backward_impl(grad, grad_output, applied)


@_backward_op.register_fake
def _backward_fake(grad, grad_output, applied):
    return None


def _scale_saved_gradient(grad: Tensor, grad_output: Tensor, applied: Tensor) -> None:
    if torch.compiler.is_compiling():
        # Traced: the graph records the mutation; version counters do not exist.
        torch.ops.xent.backward_(grad, grad_output, applied)
    else:
        # Eager: the implementation itself, not the operator, whose dispatcher
        # would bump the saved gradient's version counter (and make a second
        # backward through the same graph fail autograd's saved-tensor check).
        _backward_impl(grad, grad_output, applied)


# ---------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------


def _rescale_eager(grad: Tensor, grad_output: Tensor, applied: Optional[Tensor]) -> Tensor:
    """_backward_impl for eager mode, with the backward state kept on the host side.

    The caller has checked grad_output's count (1, or rows for reduction none).
    `applied` is the upstream gradient `grad` holds (None: 1, after the forward), so the
    first backward launches no division and no copy: only xent's scale kernel, which
    skips the pass on the device when the factor is 1. Returns the new state.
    """
    # One op: a fresh, dense fp32 copy on grad's device. It is kept as the
    # state, so never the caller's tensor (which may change), and dense even
    # when the caller's is an expanded view (the C call reads numel values).
    go = grad_output.to(device=grad.device, dtype=torch.float32, copy=True,
                        memory_format=torch.contiguous_format)
    if grad.shape[0] == 0:
        return go
    _scale_rows(grad, go if applied is None else go / applied)
    return go


class _CrossEntropyFunction(torch.autograd.Function):
    """Outputs: the loss, then those of z, accuracy and predicted tokens that
    were asked for, in that order (fewer outputs: less autograd work a step)."""

    @staticmethod
    def forward(ctx, logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check_targets, want_z, want_acc, want_pred):
        ctx.eager = not torch.compiler.is_compiling()
        if ctx.eager:
            # The implementation itself: the operator's dispatch costs more host time
            # than the kernels take at small shapes. The version bump is the one the
            # operator makes for its in-place write (before saving, so that the saved
            # buffer is current).
            loss, z, acc, pred = _run_forward(
                logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check_targets, want_z, want_acc, want_pred,
                grad=True)
            torch.autograd.graph.increment_version(logits)
            ctx.save_for_backward(logits.detach())
            ctx.applied = None
            ctx.rows = logits.shape[0] if reduction == _lib.XENT_REDUCTION_NONE else 1
        else:
            loss, z, acc, pred, applied = torch.ops.xent.forward_grad(
                logits, targets, weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check_targets, want_z, want_acc, want_pred)
            # `logits` now holds the gradient. Saved detached, as a plain buffer.
            ctx.save_for_backward(logits.detach(), applied)
        # Traced, a fresh tensor (copy=True): returning the operator's output
        # directly from the Function loses the upstream gradient under
        # torch.compile. Eager fp32 needs no copy.
        loss = loss.to(dtype=logits.dtype, copy=not ctx.eager)
        extras = []
        if want_z:
            extras.append(z.to(dtype=logits.dtype))
        if want_acc:
            extras.append(acc)
        if want_pred:
            extras.append(pred)
        if extras:
            ctx.mark_non_differentiable(*extras)
        return (loss,) + tuple(extras)

    @staticmethod
    def backward(ctx, grad_loss, *grad_extras):
        if ctx.eager:
            (grad,) = ctx.saved_tensors
            if grad_loss.numel() != ctx.rows:
                raise ValueError(f"grad_output has {grad_loss.numel()} values; "
                                 f"expected {ctx.rows}")
            ctx.applied = _rescale_eager(grad, grad_loss, ctx.applied)
        else:
            grad, applied = ctx.saved_tensors
            _scale_saved_gradient(grad, grad_loss, applied)
        return (grad,) + (None,) * 11


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _as_rows(input: Tensor) -> Tensor:
    """(..., V) -> (N, V) with a contiguous last dim: a view when possible."""
    if input.dim() == 0:
        raise ValueError("input must have at least one dimension (the vocabulary)")
    v = input.shape[-1]
    x = input if input.dim() == 2 else input.reshape(-1, v)
    n = x.shape[0]
    if (v > 1 and n > 0 and x.stride(1) != 1) or (n > 1 and x.stride(0) < v):
        x = x.contiguous()
    return x


def cross_entropy(
    input: Tensor,
    target: Tensor,
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
    """Fused softmax cross-entropy of `input` (..., V) against `target` (...).

    Returns the loss tensor, or a :class:`CrossEntropyOutput` when any
    ``return_*`` flag is set. When `input` requires grad the gradient is
    written over it in place (see the module documentation). Bad arguments
    raise :class:`xent.XentError` (a ValueError) with the C library's
    message, before anything is written.
    """
    red = _lib.reduction_code(reduction)
    if not isinstance(input, Tensor) or not isinstance(target, Tensor):
        raise TypeError("input and target must be tensors")
    if input.dtype not in _DTYPES:
        raise ValueError(f"input must be float32, bfloat16 or float16, not {input.dtype}")
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise ValueError(f"target must hold class indices (int32 or int64), not {target.dtype}")
    if target.device != input.device:
        raise ValueError(f"target is on {target.device} but input is on {input.device}")
    lead = input.shape[:-1]
    x = _as_rows(input)
    n, v = x.shape
    t = target if target.dim() == 1 else target.reshape(-1)
    if t.shape[0] != n:
        raise ValueError(
            f"target has {t.shape[0]} elements but input has {n} rows of {v} classes "
            f"(input shape {tuple(input.shape)}, target shape {tuple(target.shape)})")
    if t.dtype not in _TARGET_TYPES:
        t = t.to(torch.int64)
    t = t.contiguous()
    w = None
    if weight is not None:
        if weight.shape != (v,):
            raise ValueError(f"weight must have shape ({v},), got {tuple(weight.shape)}")
        w = weight.to(device=input.device, dtype=torch.float32).contiguous()
    cap = None if softcap is None else float(softcap)
    args = (t, w, red, int(ignore_index), float(label_smoothing), float(lse_square_scale),
            cap, bool(check_targets), bool(return_z_loss), bool(return_token_accuracy),
            bool(return_predicted_tokens))

    if input.requires_grad and torch.is_grad_enabled():
        outs = _CrossEntropyFunction.apply(x, *args)
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

    if red == _lib.XENT_REDUCTION_NONE:
        loss = loss.view(lead)
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    if return_z_loss and red == _lib.XENT_REDUCTION_NONE:
        z = z.view(lead)
    if return_token_accuracy and red == _lib.XENT_REDUCTION_NONE:
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
    """Fused cross-entropy loss module; the arguments of :func:`cross_entropy`.

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
        _lib.reduction_code(reduction)  # validates early
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
        return cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            lse_square_scale=self.lse_square_scale,
            label_smoothing=self.label_smoothing,
            reduction=self.reduction,
            softcap=self.softcap,
            return_z_loss=self.return_z_loss,
            return_token_accuracy=self.return_token_accuracy,
            return_predicted_tokens=self.return_predicted_tokens,
            check_targets=self.check_targets,
        )

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, "
                f"lse_square_scale={self.lse_square_scale}, softcap={self.softcap}")
