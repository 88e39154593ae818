"""What the PyTorch bindings (xent.torch: the loss over logits and the fused
linear loss) share: dtype codes, the result type, where a C call runs, and
the options' checks."""

import threading
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .. import _lib
from .._lib import XentValueError

_DTYPES = {
    torch.float32: _lib.XENT_FLOAT32,
    torch.bfloat16: _lib.XENT_BFLOAT16,
    torch.float16: _lib.XENT_FLOAT16,
}
_TARGET_TYPES = {torch.int32: _lib.XENT_INT32, torch.int64: _lib.XENT_INT64}
_NONE = _lib.XENT_REDUCTION_NONE


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

# The current stream's handle without building a torch.cuda.Stream object (the
# accessor torch's own compiled code uses); absent from CPU-only builds.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_f32 = torch.float32


_local = threading.local()


def _exec_for(t: Tensor, verdict=None) -> _lib.XentExec:
    """Where the C call runs: the tensor's device and torch's current stream.

    The C library makes that device current for the call itself (and restores
    the caller's), so no torch device context is needed around it. One
    structure per thread and (device, stream), reused: its fields are set
    before each call, and no other thread sees it.
    """
    if t.is_cuda:
        index = t.get_device()
        stream = (_raw_stream(index) if _raw_stream is not None
                  else torch.cuda.current_stream(index).cuda_stream)
        cache = getattr(_local, "execs", None)
        if cache is None:
            cache = _local.execs = {}
        ex = cache.get((index, stream))
        if ex is None:
            if len(cache) > 64:
                cache.clear()
            ex = cache[(index, stream)] = _lib.XentExec()
            ex.backend = _lib.XENT_BACKEND_CUDA
            ex.device = index
            ex.stream = stream
        ex.verdict = None if verdict is None else verdict.handle
        return ex
    if t.device.type == "cpu":
        ex = getattr(_local, "cpu_exec", None)
        if ex is None:
            ex = _local.cpu_exec = _lib.XentExec()
            ex.backend = _lib.XENT_BACKEND_CPU
        return ex
    raise ValueError(f"xent runs on CPU and CUDA tensors, not on {t.device.type!r}")


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    if t is None or t.numel() == 0:
        return None
    return t.data_ptr()


def _row_stride(x: Tensor) -> int:
    """Elements between row starts of a (N, V) tensor (0 = packed)."""
    return x.stride(0) if x.shape[0] > 1 else 0


# The options structure of each combination of Python option values (read-only
# to the C call).
_options = {}


def _options_for(key):
    opt = _options.get(key)
    if opt is None:
        if len(_options) > 256:
            _options.clear()
        opt = _options[key] = _lib.make_options(*key)
    return opt


def _check_options(label_smoothing, softcap, reduction) -> int:
    """The peer's asserts, raised as the C library would (XentValueError with
    its status and wording); the reduction's code."""
    ls = float(label_smoothing)
    if not (0.0 <= ls <= 1.0):
        raise XentValueError(5, f"label_smoothing is {ls:g}; it must be in [0, 1]")
    if softcap is not None and not (0.0 < float(softcap) < float("inf")):
        raise XentValueError(6, f"softcap is {float(softcap):g}; it must be finite and > 0")
    try:
        return _lib.REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise XentValueError(8, f"reduction must be 'mean', 'sum' or 'none', not "
                                f"{reduction!r}") from None


def _target_check(check_targets: bool, grad: bool, reduction: int, is_cuda: bool) -> int:
    """The C target-check mode of a loss: unchecked when asked; deferred for
    a CUDA loss that requires grad with mean or sum (checked on the device,
    the verdict read late: _verdicts); checked (raising in the forward)
    otherwise."""
    if not check_targets:
        return _lib.XENT_TARGETS_UNCHECKED
    if grad and reduction != _NONE and is_cuda:
        return _lib.XENT_TARGETS_DEFERRED
    return _lib.XENT_TARGETS_CHECKED


def _alloc_outputs(n: int, reduction: int, want_z: bool, want_acc: bool, want_pred: bool,
                   device):
    """The fp32 loss and the optional outputs a call was asked for (None for
    the others): one value each, or n for reduction none; predicted tokens
    int64, n of them. Only those asked for are allocated: at small shapes
    each allocation is a visible part of the step's host time."""
    shape = (n,) if reduction == _NONE else ()
    loss = torch.empty(shape, dtype=_f32, device=device)
    z = torch.empty(shape, dtype=_f32, device=device) if want_z else None
    acc = torch.empty(shape, dtype=_f32, device=device) if want_acc else None
    pred = torch.empty((n,), dtype=torch.int64, device=device) if want_pred else None
    return loss, z, acc, pred


def _extras(ctx, dtype, z, acc, pred, want_z: bool, want_acc: bool, want_pred: bool):
    """An autograd.Function's outputs after the loss: the z-loss (in the
    inputs' dtype), accuracy and predicted tokens asked for, in that order,
    marked non-differentiable."""
    extras = []
    if want_z:
        extras.append(z.to(dtype=dtype))
    if want_acc:
        extras.append(acc)
    if want_pred:
        extras.append(pred)
    if extras:
        ctx.mark_non_differentiable(*extras)
    return tuple(extras)


def _run_backward(grad: Tensor, grad_output: Tensor, applied: Optional[Tensor]):
    """The saved gradient grad (N, V) taken from the upstream gradient it
    holds to grad_output, on grad's device, in one C call. `applied`: what
    it holds, fp32 (1 or N values), rescaled in place (grad *= grad_output /
    applied, then applied = grad_output); None: the forward's gradient (an
    upstream gradient of 1), scaled by grad_output (a factor of 1 skips the
    pass on the device). Returns the upstream gradient grad holds now, in
    a tensor of its own (the caller may change grad_output later)."""
    n, v = grad.shape
    # The C call reads go.numel() packed fp32 values: any shape will do.
    go = grad_output
    if go.device != grad.device or not go.is_contiguous():
        go = go.to(device=grad.device, dtype=_f32).contiguous()
    elif go.dtype != _f32:
        go = go.float()
    if applied is None:
        if n > 0:
            _lib.backward(grad.data_ptr(), _DTYPES[grad.dtype], n, v, _row_stride(grad),
                          go.data_ptr(), go.numel(), _exec_for(grad))
        return go.clone() if go.data_ptr() == grad_output.data_ptr() else go
    if n == 0:
        return applied
    if go.numel() != applied.numel():
        raise ValueError(f"grad_output has {go.numel()} values; expected {applied.numel()}")
    _lib.backward_rescale(grad.data_ptr(), _DTYPES[grad.dtype], n, v, _row_stride(grad),
                          go.data_ptr(), applied.data_ptr(), applied.numel(), _exec_for(grad))
    return applied
