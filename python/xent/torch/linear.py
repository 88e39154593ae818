"""The fused linear cross-entropy for PyTorch (exported by xent.torch).

``FusedLinearCrossEntropyLoss`` takes the peer library's
``LigerFusedLinearCrossEntropyLoss`` arguments and its ``forward(lin_weight,
_input, target, bias=None)``; ``fused_linear_cross_entropy`` is the
functional form in ``liger_fused_linear_cross_entropy``'s positional order.
The LM head's logits ``_input @ lin_weight.T + bias`` are never held: the C
library computes them a chunk of rows at a time (see xent.h, "Fused linear
cross-entropy").

Gradients
---------
With reduction "mean" or "sum" the forward computes the gradients of the
hidden states, the weight and the bias (those that require grad) at once,
for an upstream gradient of 1, and the backward scales them by the real one
on the device (no host synchronisation; 1 skips the pass). Autograd adds them
into existing ``.grad`` as usual (gradient accumulation over micro-batches).
With "none" the forward computes the loss alone and the backward runs the
chunks again with the per-row upstream gradient. ``accum_dtype=torch.float32``
adds the weight's gradient up in fp32 over the chunks (a V x H fp32 scratch)
and rounds it once; the default adds it up in the weight's dtype. (Over the
vocabulary's slabs it is the hidden states' gradient that adds up.)

Memory: the scratch of a call (``xent_linear_workspace_size``) comes from
torch's allocator, so ``torch.cuda.max_memory_allocated`` counts it. By
default it is at most 1/16 of the logits a plain matmul would materialise;
``memory_budget`` (bytes) or ``chunk_rows`` trade it against speed.

Schedule (calls with gradients; xent.h, xent_linear_schedule): ``"rows"``
cuts the rows into chunks (dW is read and written once a chunk);
``"vocab"`` cuts the vocabulary into slabs over every row (the logits
computed twice, each slab of dW written once, dX summed over the slabs: on
the GPU in its dtype, or in fp32 with ``accum_dtype=torch.float32``), meant
for small batches; ``"auto"`` (default) takes vocab on the GPU where xent's
cost model of the two says it is faster (include/xent.h), else rows.

Target checks: with ``check_targets=True`` (default) a bad target raises
:class:`xent.XentValueError` before anything is written (on the GPU the call
waits for the device's verdict once, behind the first chunk's logits).
``check_targets=False`` never waits (CUDA graphs): bad rows get a NaN loss
and a zero gradient.
"""

from typing import Optional

import torch
from torch import Tensor

from .. import _lib
from .._lib import XentValueError
from ._common import (_DTYPES, _NONE, _TARGET_TYPES, CrossEntropyOutput, _alloc_outputs,
                      _check_options, _exec_for, _extras, _f32, _options_for, _ptr, _row_stride,
                      _run_backward)

__all__ = ["FusedLinearCrossEntropyLoss", "fused_linear_cross_entropy"]


_SCHEDULES = {"auto": 0, "rows": 1, "vocab": 2}


def _schedule_code(schedule, chunk_rows):
    """xent_linear_schedule's value for "auto", "rows" or "vocab"."""
    code = _SCHEDULES.get(schedule) if isinstance(schedule, str) else None
    if code is None:
        raise XentValueError(9, f"schedule must be 'auto', 'rows' or 'vocab', not {schedule!r}")
    if code == 2 and int(chunk_rows) > 0:
        raise XentValueError(9, "chunk_rows sets the rows schedule's chunks; with "
                                "schedule='vocab' use memory_budget")
    return code


def _run_linear(x, w, targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                schedule, want_z, want_acc, want_pred, grads=None):
    """The C call on tensors. grads: None (forward only) or (want_dx, want_dw,
    want_db, accum_fp32, grad_output or None). Returns (loss, z, acc, pred)
    and, with grads, (dx, dw, db) (None for those not asked for)."""
    n, h = x.shape
    v = w.shape[0]
    dev = x.device
    loss, z, acc, pred = _alloc_outputs(n, reduction, want_z, want_acc, want_pred, dev)
    dt = _DTYPES[x.dtype]
    inp = _lib.XentLinearInput(_ptr(x), n, h, _row_stride(x), _ptr(w), v, _row_stride(w), _ptr(bias), dt,
                               _ptr(targets), _TARGET_TYPES[targets.dtype], _ptr(ce_weight))
    opt = _options_for((reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
                        check, True))
    lopt = _lib.XentLinearOptions(int(token_scaling), int(chunk_rows), int(memory_budget),
                                  int(schedule))
    out = _lib.XentOutput(_ptr(loss), _ptr(z), _ptr(acc), _ptr(pred), None)
    g = dx = dw = db = None
    if grads is not None:
        want_dx, want_dw, want_db, accum_fp32, go = grads
        dx = torch.empty_like(x, memory_format=torch.contiguous_format) if want_dx else None
        dw = torch.empty_like(w, memory_format=torch.contiguous_format) if want_dw else None
        db = torch.empty_like(bias) if want_db and bias is not None else None
        g = _lib.XentLinearGrads(
            _ptr(dx), 0, dt, _ptr(dw), 0, dt, _ptr(db), dt, 0,
            _lib.XENT_ACCUM_FP32 if accum_fp32 else _lib.XENT_ACCUM_GRAD,
            _ptr(go), 0 if go is None else go.numel())
    ex = _lib.XentExec()
    ex.backend = _lib.XENT_BACKEND_CPU
    if x.is_cuda:
        cached = _exec_for(x)
        ex.backend, ex.device, ex.stream = cached.backend, cached.device, cached.stream
        nbytes = _lib.linear_workspace_size(inp, lopt, g)
        ws = torch.empty(nbytes, dtype=torch.uint8, device=dev)  # freed after the call,
        ex.workspace, ex.workspace_bytes = ws.data_ptr(), nbytes  # stream-ordered by torch
    _lib.linear(inp, opt, lopt, out, g, ex)
    outs = (loss, z, acc, pred)
    return outs if grads is None else outs + (dx, dw, db)


# ---------------------------------------------------------------------------
# Custom operators (what torch.compile sees)
# ---------------------------------------------------------------------------

_LARGS = ("Tensor targets, Tensor? bias, Tensor? ce_weight, int reduction, int ignore_index, "
          "float label_smoothing, float lse_square_scale, float? softcap, int check, "
          "bool token_scaling, int chunk_rows, int memory_budget, int schedule, bool want_z, "
          "bool want_acc, "
          "bool want_pred")
_LOUTS = "Tensor loss, Tensor z, Tensor acc, Tensor pred"
torch.library.define("xent::linear_forward",
                     f"(Tensor input, Tensor weight, {_LARGS}) -> ({_LOUTS})")
torch.library.define("xent::linear_forward_backward",
                     f"(Tensor input, Tensor weight, {_LARGS}, bool want_dx, bool want_dw, "
                     f"bool want_db, bool accum_fp32, Tensor? grad_output) -> ({_LOUTS}, "
                     "Tensor dx, Tensor dw, Tensor db)")


def _fixed(x, reduction, want_z, want_acc, want_pred, outs=None):
    """(loss, z, acc, pred) for the operators' fixed signature (empty tensors
    for the outputs not asked for; fakes when outs is None)."""
    n = x.shape[0]
    shape = (n,) if reduction == _NONE else ()
    loss, z, acc, pred = outs if outs is not None else (None,) * 4
    new = x.new_empty
    fake = outs is None
    return (loss if loss is not None else new(shape, dtype=_f32),
            z if z is not None else new(shape if want_z and fake else (0,), dtype=_f32),
            acc if acc is not None else new(shape if want_acc and fake else (0,), dtype=_f32),
            pred if pred is not None else new((n,) if want_pred and fake else (0,),
                                              dtype=torch.int64))


@torch.library.impl("xent::linear_forward", ("cpu", "cuda"))
def _linear_forward_impl(x, w, targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                         lse_square_scale, softcap, check, token_scaling, chunk_rows,
                         memory_budget, schedule, want_z, want_acc, want_pred):
    outs = _run_linear(x, w, targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                       schedule, want_z, want_acc, want_pred)
    return _fixed(x, reduction, want_z, want_acc, want_pred, outs)


@torch.library.impl("xent::linear_forward_backward", ("cpu", "cuda"))
def _linear_fb_impl(x, w, targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                    lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                    schedule, want_z, want_acc, want_pred, want_dx, want_dw, want_db, accum_fp32,
                    grad_output):
    outs = _run_linear(x, w, targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                       lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                       schedule, want_z, want_acc, want_pred,
                       grads=(want_dx, want_dw, want_db, accum_fp32, grad_output))
    dx, dw, db = outs[4:]
    empty = x.new_empty((0,))
    return _fixed(x, reduction, want_z, want_acc, want_pred, outs[:4]) + (
        dx if dx is not None else empty, dw if dw is not None else empty,
        db if db is not None else empty)


@torch.library.register_fake("xent::linear_forward")
def _linear_forward_fake(x, w, targets, bias, ce_weight, reduction, *rest):
    want_z, want_acc, want_pred = rest[-3:]
    return _fixed(x, reduction, want_z, want_acc, want_pred)


@torch.library.register_fake("xent::linear_forward_backward")
def _linear_fb_fake(x, w, targets, bias, ce_weight, reduction, *rest):
    want_z, want_acc, want_pred, want_dx, want_dw, want_db = rest[-8:-2]
    empty = x.new_empty((0,))
    return _fixed(x, reduction, want_z, want_acc, want_pred) + (
        torch.empty_like(x) if want_dx else empty, torch.empty_like(w) if want_dw else empty,
        torch.empty_like(bias) if want_db and bias is not None else empty)


def _rescale(g: Tensor, grad_output: Tensor, applied: Tensor) -> None:
    """g *= grad_output / applied, then applied = grad_output, in place on
    g's device (no host synchronisation; factors of 1 skip the pass)."""
    if g.numel() == 0:
        return
    g2 = g if g.dim() == 2 else g.view(1, -1)
    if torch.compiler.is_compiling():
        go = grad_output.to(device=g.device, dtype=_f32).reshape(-1)
        torch.ops.xent.backward_(g2, go, applied)
        return
    _run_backward(g2, grad_output, applied)


class _LinearFunction(torch.autograd.Function):
    """Inputs: hidden, weight, bias, then the fixed arguments. Outputs: the
    loss, then those of z, accuracy and predicted tokens asked for."""

    @staticmethod
    def forward(ctx, x, w, bias, targets, ce_weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                schedule, accum_fp32, want_z, want_acc, want_pred):
        want_dx, want_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        want_db = bias is not None and ctx.needs_input_grad[2]
        args = (targets, bias, ce_weight, reduction, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, token_scaling, chunk_rows, memory_budget,
                schedule, want_z, want_acc, want_pred)
        compiling = torch.compiler.is_compiling()
        ctx.flags = (want_dx, want_dw, want_db, accum_fp32)
        ctx.deferred = reduction == _NONE
        if ctx.deferred:
            # Per-row upstream gradients must meet each row before the sums
            # over rows: the backward runs the chunks again with them.
            if compiling:
                loss, z, acc, pred = torch.ops.xent.linear_forward(x, w, *args)
            else:
                loss, z, acc, pred = _run_linear(x, w, *args)
            ctx.args = args[1:]
            ctx.save_for_backward(x, w, targets, bias)
        else:
            if compiling:
                loss, z, acc, pred, dx, dw, db = torch.ops.xent.linear_forward_backward(
                    x, w, *args, want_dx, want_dw, want_db, accum_fp32, None)
            else:
                loss, z, acc, pred, dx, dw, db = _run_linear(
                    x, w, *args, grads=(want_dx, want_dw, want_db, accum_fp32, None))
            applied = torch.ones(3, dtype=_f32, device=x.device)
            ctx.save_for_backward(dx, dw, db, applied)
        if compiling:
            loss = loss.clone()
        return (loss,) + _extras(ctx, x.dtype, z, acc, pred, want_z, want_acc, want_pred)

    @staticmethod
    def backward(ctx, grad_loss, *grad_extras):
        want_dx, want_dw, want_db, accum_fp32 = ctx.flags
        if ctx.deferred:
            x, w, targets, bias = ctx.saved_tensors
            go = grad_loss.to(dtype=_f32).reshape(-1).contiguous()
            if torch.compiler.is_compiling():
                outs = torch.ops.xent.linear_forward_backward(
                    x, w, targets, *ctx.args, want_dx, want_dw, want_db, accum_fp32, go)
                dx, dw, db = outs[4:]
            else:
                dx, dw, db = _run_linear(x, w, targets, *ctx.args,
                                         grads=(want_dx, want_dw, want_db, accum_fp32, go))[4:]
        else:
            dx, dw, db, applied = ctx.saved_tensors
            for i, g in enumerate((dx, dw, db)):
                if g is not None:
                    _rescale(g, grad_loss, applied[i:i + 1])
        return ((dx if want_dx else None), (dw if want_dw else None),
                (db if want_db else None)) + (None,) * 16


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _linear_cross_entropy(input, weight, target, bias, ce_weight, ignore_index, red,
                          label_smoothing, lse_square_scale, softcap, return_z_loss, accum_dtype,
                          use_token_scaling, return_token_accuracy, return_predicted_tokens,
                          chunk_rows, memory_budget, schedule, check_targets):
    for name, t in (("_input", input), ("lin_weight", weight), ("target", target)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor")
    if input.dim() < 1 or weight.dim() != 2:
        raise XentValueError(2, f"_input must be (..., H) and lin_weight (V, H); got shapes "
                                f"{tuple(input.shape)} and {tuple(weight.shape)}")
    h = input.shape[-1]
    v = weight.shape[0]
    if weight.shape[1] != h:
        raise XentValueError(2, f"lin_weight has shape {tuple(weight.shape)} but _input has "
                                f"hidden size {h}: the weight must be (V, {h})")
    if v == 0 or h == 0:
        raise XentValueError(2, f"no classes or no hidden size: lin_weight has shape "
                                f"{tuple(weight.shape)}")
    if accum_dtype not in (None, torch.float32) and accum_dtype != weight.dtype:
        raise XentValueError(9, f"accum_dtype must be None or torch.float32, not {accum_dtype}")
    dev = input.device
    dtype = input.dtype
    if torch.is_autocast_enabled(dev.type) and dev.type in ("cuda", "cpu"):
        dtype = torch.get_autocast_dtype(dev.type)  # the matmul's dtype under autocast
        input, weight = input.to(dtype), weight.to(dtype)
        bias = bias.to(dtype) if bias is not None else None
    if dtype not in _DTYPES:
        raise ValueError(f"_input must be float32, bfloat16 or float16, not {dtype}")
    if weight.dtype != dtype:
        raise ValueError(f"lin_weight is {weight.dtype} but _input is {dtype}: they must "
                         "have the same dtype (or run under torch.autocast)")
    if bias is not None:
        if bias.shape != (v,):
            raise XentValueError(2, f"bias must have shape ({v},), got {tuple(bias.shape)}")
        if bias.dtype != dtype:
            raise ValueError(f"bias is {bias.dtype} but _input is {dtype}: they must match")
    lead = input.shape[:-1]
    if target.shape != lead:
        raise ValueError(f"target has shape {tuple(target.shape)} but _input has shape "
                         f"{tuple(input.shape)}: the target's shape must be _input.shape[:-1]")
    if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
        raise ValueError(f"target must hold class indices (int32 or int64), not {target.dtype}")
    for name, t in (("lin_weight", weight), ("target", target), ("bias", bias)):
        if t is not None and t.device != dev:
            raise ValueError(f"{name} is on {t.device} but _input is on {dev}")
    x = input.reshape(-1, h)
    if x.shape[0] > 0 and (x.stride(1) != 1 or (x.shape[0] > 1 and x.stride(0) < h)):
        x = x.contiguous()
    w = weight if weight.stride(1) == 1 and (v == 1 or weight.stride(0) >= h) else (
        weight.contiguous())
    t = target.reshape(-1)
    if t.dtype not in _TARGET_TYPES:
        t = t.to(torch.int64)
    t = t.contiguous()
    cw = None
    if ce_weight is not None:
        if ce_weight.shape != (v,):
            raise ValueError(f"ce_weight must have shape ({v},), got {tuple(ce_weight.shape)}")
        cw = ce_weight.to(device=dev, dtype=_f32).contiguous()
    b = bias.contiguous() if bias is not None else None
    cap = None if softcap is None else float(softcap)
    check = _lib.XENT_TARGETS_CHECKED if check_targets else _lib.XENT_TARGETS_UNCHECKED
    accum_fp32 = accum_dtype == torch.float32 and dtype != torch.float32
    args = (t, cw, red, int(ignore_index), float(label_smoothing), float(lse_square_scale), cap,
            check, bool(use_token_scaling), int(chunk_rows), int(memory_budget),
            _schedule_code(schedule, chunk_rows))
    wants = (bool(return_z_loss), bool(return_token_accuracy), bool(return_predicted_tokens))
    grad = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or
                                        (b is not None and b.requires_grad))
    if grad:
        outs = _LinearFunction.apply(x, w, b, *args, accum_fp32, *wants)
        loss = outs[0]
        extras = iter(outs[1:])
        z = next(extras) if return_z_loss else None
        acc = next(extras) if return_token_accuracy else None
        pred = next(extras) if return_predicted_tokens else None
    else:
        fargs = (t, b) + args[1:] + wants
        if torch.compiler.is_compiling():
            loss, z, acc, pred = torch.ops.xent.linear_forward(x, w, *fargs)
        else:
            loss, z, acc, pred = _run_linear(x, w, *fargs)
        if return_z_loss:
            z = z.to(dtype)
    if red == _NONE:
        loss = loss.view(lead)
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    if red == _NONE:
        z = z.view(lead) if return_z_loss else None
        acc = acc.view(lead) if return_token_accuracy else None
    if return_predicted_tokens:
        pred = pred.view(lead)
    return CrossEntropyOutput(loss=loss, z_loss=z if return_z_loss else None,
                              token_accuracy=acc if return_token_accuracy else None,
                              predicted_tokens=pred if return_predicted_tokens else None)


def fused_linear_cross_entropy(
    input: Tensor,
    weight: Tensor,
    target: Tensor,
    bias: Optional[Tensor] = None,
    ce_weight: Optional[Tensor] = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: Optional[float] = None,
    return_z_loss: bool = False,
    accum_dtype: Optional[torch.dtype] = None,
    use_token_scaling: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    *,
    chunk_rows: int = 0,
    memory_budget: int = 0,
    schedule: str = "auto",
    check_targets: bool = True,
):
    """Cross-entropy of ``input @ weight.T + bias`` against ``target`` without
    the logits: ``liger_fused_linear_cross_entropy``'s arguments in its
    positional order. input (..., H), weight (V, H), target input.shape[:-1].
    Returns the fp32 loss, or a :class:`CrossEntropyOutput` when any
    ``return_*`` flag is set. A mean over no rows is 0. ``chunk_rows`` /
    ``memory_budget`` (bytes): the scratch against speed (0: the default,
    1/16 of the logits). ``schedule``: "auto", "rows" or "vocab" (how a call
    is cut into pieces, see the module docstring)."""
    red = _check_options(label_smoothing, softcap, reduction)
    return _linear_cross_entropy(input, weight, target, bias, ce_weight, ignore_index, red,
                                 label_smoothing, lse_square_scale, softcap, return_z_loss,
                                 accum_dtype, use_token_scaling, return_token_accuracy,
                                 return_predicted_tokens, chunk_rows, memory_budget, schedule,
                                 check_targets)


class FusedLinearCrossEntropyLoss(torch.nn.Module):
    """The LM head and the loss in one: ``forward(lin_weight, _input, target,
    bias=None)``, the arguments of the peer's
    ``LigerFusedLinearCrossEntropyLoss`` (checked here, when the module is
    made). ``ce_weight`` is kept as a non-persistent buffer."""

    def __init__(
        self,
        ce_weight: Optional[Tensor] = None,
        ignore_index: int = -100,
        lse_square_scale: float = 0.0,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
        softcap: Optional[float] = None,
        return_z_loss: bool = False,
        accum_dtype: Optional[torch.dtype] = None,
        use_token_scaling: bool = False,
        return_token_accuracy: bool = False,
        return_predicted_tokens: bool = False,
        *,
        chunk_rows: int = 0,
        memory_budget: int = 0,
        schedule: str = "auto",
        check_targets: bool = True,
    ):
        super().__init__()
        _schedule_code(schedule, chunk_rows)
        _check_options(label_smoothing, softcap, reduction)
        if accum_dtype not in (None, torch.float32, torch.bfloat16, torch.float16):
            raise XentValueError(9, f"accum_dtype must be None or torch.float32, not "
                                    f"{accum_dtype}")
        if int(chunk_rows) < 0 or int(memory_budget) < 0:
            raise XentValueError(9, "chunk_rows and memory_budget must be >= 0")
        self.register_buffer("ce_weight", ce_weight, persistent=False)
        self.ignore_index = ignore_index
        self.lse_square_scale = lse_square_scale
        self.label_smoothing = label_smoothing
        self.reduction = reduction
        self.softcap = softcap
        self.return_z_loss = return_z_loss
        self.accum_dtype = accum_dtype
        self.use_token_scaling = use_token_scaling
        self.return_token_accuracy = return_token_accuracy
        self.return_predicted_tokens = return_predicted_tokens
        self.chunk_rows = chunk_rows
        self.memory_budget = memory_budget
        self.schedule = schedule
        self.check_targets = check_targets

    def forward(self, lin_weight: Tensor, _input: Tensor, target: Tensor,
                bias: Optional[Tensor] = None):
        red = _lib.REDUCTIONS.get(self.reduction)
        if red is None:
            red = _lib.reduction_code(self.reduction)
        return _linear_cross_entropy(_input, lin_weight, target, bias, self.ce_weight,
                                     self.ignore_index, red, self.label_smoothing,
                                     self.lse_square_scale, self.softcap, self.return_z_loss,
                                     self.accum_dtype, self.use_token_scaling,
                                     self.return_token_accuracy, self.return_predicted_tokens,
                                     self.chunk_rows, self.memory_budget, self.schedule,
                                     self.check_targets)

    def extra_repr(self) -> str:
        return (f"ignore_index={self.ignore_index}, reduction={self.reduction!r}, "
                f"label_smoothing={self.label_smoothing}, "
                f"lse_square_scale={self.lse_square_scale}, softcap={self.softcap}, "
                f"accum_dtype={self.accum_dtype}, use_token_scaling={self.use_token_scaling}, "
                f"schedule={self.schedule!r}")
