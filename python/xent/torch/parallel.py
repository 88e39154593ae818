"""Vocabulary-parallel cross-entropy over torch.distributed (xent.h,
"Vocabulary-parallel cross-entropy").

Each rank of ``process_group`` holds the logits of a contiguous shard of
the vocabulary, in rank order (rank 0 the first columns); the shards may be
of different widths. Every rank has every row's target (global class
indices) and, with class weights, the whole V-long weight vector.

* ``vocab_parallel_cross_entropy(vocab_parallel_logits, target, ...)``: xent's
  options over the global vocabulary (weights, ignore_index, label smoothing
  with eps = alpha / V, z-loss, softcap, token accuracy and predicted token
  as the global first arg-max, reductions). One collective in the forward
  (an all-gather of 16 bytes per row per rank, 32 with weighted smoothing,
  accuracy or predicted tokens), none in the backward, which scales the
  shard's gradient in place on the device. The loss is the same on every
  rank. DTensor logits sharded on their last dimension (torchtitan's
  loss_parallel pattern) are accepted directly; the loss comes back as a
  replicated DTensor then.
* ``megatron_vocab_parallel_cross_entropy(vocab_parallel_logits, target,
  label_smoothing=0.0)``: Megatron's semantics (per-token losses, no ignored
  targets, its rescaled label smoothing).
* ``vocab_parallel_fused_linear_cross_entropy(hidden, weight_shard, target, ...)``:
  the LM head's weight sharded by vocabulary rows, the hidden states
  replicated: logits a chunk of rows at a time, the same record exchange, and
  dX summed over the ranks once (an all-reduce of BT x H).

Shapes, dtypes and widths are compared across the ranks before the records
are exchanged (an all-gather of 4 integers a rank): a mismatch raises the
same error on every rank, so no rank is left waiting in a collective.
``validate=False`` skips that exchange once a shape has been validated in the
group, leaving the records' all-gather as the forward's one collective; the
caller then guarantees that every rank calls with the same rows and dtype
(a rank that alone changes shape would meet the others in the wrong
collective). The layout's integers go over the host (a gloo group over the
group's ranks, made at the first call, when the group is NCCL's), so the
check never waits for the device.

Targets outside [0, V) raise on every rank (every rank checks the same
targets). A CUDA loss that requires grad (reduction mean or sum) checks them
on the device in the forward step and reads the verdict late, as the
single-GPU loss does: no rank waits, the records are exchanged as ever, the
rejected loss is NaN and the shard's gradient zero, and the error is raised
in the backward or at the next xent loss or ``xent.torch.check_pending()``.
Otherwise (no grad, reduction none, the CPU) they raise in the forward,
before the records are exchanged. ``check_targets=False`` gives bad rows a
NaN loss and a zero gradient and raises nothing. The fused linear variant's
checked mode waits for each chunk's check.

As in the single-GPU loss, the gradient is written over the shard's logits.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from .. import _lib
from .._lib import XentValueError
from . import _verdicts
from ._common import (_DTYPES, _NONE, _TARGET_TYPES, CrossEntropyOutput, _alloc_outputs,
                      _check_options, _exec_for, _extras, _f32, _options_for, _ptr,
                      _row_stride, _run_backward, _target_check)

__all__ = ["vocab_parallel_cross_entropy", "megatron_vocab_parallel_cross_entropy",
           "vocab_parallel_fused_linear_cross_entropy", "VocabParallelCrossEntropyLoss"]


# ---------------------------------------------------------------------------
# The layout of the shards over a group
# ---------------------------------------------------------------------------

_layouts: Dict[Tuple, Tuple[int, int, int, int]] = {}


def _layout(group, rows: int, width: int, dtype: torch.dtype, device, vocab_size,
            validate: bool = True) -> Tuple:
    """(rank, ranks, offset, V) of this rank's shard, from every rank's rows,
    width and dtype (exchanged every call unless validate is False and the
    shape was validated before). Raises the same error on every rank when
    they disagree."""
    ranks = dist.get_world_size(group)
    rank = dist.get_rank(group)
    key = (id(group), rows, width, dtype, str(device), vocab_size)
    hit = _layouts.get(key)
    if hit is not None and not validate:
        return hit
    code = _DTYPES.get(dtype, -1)
    host = _host_group(group)
    dev = torch.device("cpu") if host is not None else device
    mine = torch.tensor([rows, width, code, -1 if vocab_size is None else int(vocab_size)],
                        dtype=torch.int64, device=dev)
    every = [torch.empty_like(mine) for _ in range(ranks)]
    dist.all_gather(every, mine, group=host if host is not None else group)
    table = torch.stack(every).tolist()
    rows_all = {r[0] for r in table}
    if len(rows_all) != 1:
        raise XentValueError(2, f"the ranks' logits have different row counts "
                                f"({[r[0] for r in table]}): every rank needs every row")
    if len({r[2] for r in table}) != 1:
        raise XentValueError(8, f"the ranks' logits have different dtypes (codes "
                                f"{[r[2] for r in table]}): use one dtype on every rank")
    widths = [r[1] for r in table]
    total = sum(widths)
    asked = {r[3] for r in table}
    if len(asked) != 1 or (table[0][3] >= 0 and table[0][3] != total):
        raise XentValueError(2, f"the shards' widths {widths} add up to {total}, not to the "
                                f"vocab_size given ({[r[3] for r in table]})")
    out = (rank, ranks, sum(widths[:rank]), total)
    if len(_layouts) > 64:
        _layouts.clear()
    _layouts[key] = out
    return out


_host_groups: Dict[int, Tuple] = {}


def _host_group(group):
    """The group to exchange the layout's integers over on the host, so that
    checking them never waits for the device: the group itself when it runs
    CPU tensors (gloo, or a "cpu:gloo,cuda:nccl" group), else a gloo group
    over the same ranks, made once (every rank of the group makes it at its
    first call, as every rank calls). None where no such group can be made:
    the exchange then runs on the device and reads the table back."""
    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "nccl" not in backend:
        return group
    hit = _host_groups.get(id(group))
    if hit is not None and hit[0] is group:
        return hit[1]
    try:
        side = dist.new_group(dist.get_process_group_ranks(group), backend="gloo",
                              use_local_synchronization=True)
    except (RuntimeError, ValueError, TypeError):
        side = None
    _host_groups[id(group)] = (group, side)
    return side


def _gather(records: Tensor, ranks: int, group) -> Tensor:
    out = torch.empty((ranks,) + tuple(records.shape), dtype=records.dtype, device=records.device)
    try:
        dist.all_gather_into_tensor(out, records, group=group)
    except (RuntimeError, NotImplementedError, AttributeError):
        dist.all_gather(list(out.unbind(0)), records, group=group)
    return out


# ---------------------------------------------------------------------------
# The calls
# ---------------------------------------------------------------------------


def _vp(x, t, weight, layout, red, ignore_index, label_smoothing, lse_square_scale, softcap,
        check, want_z, want_acc, want_pred, grad, group, verdict=None):
    """The three steps on tensors. Returns (loss, z, acc, pred)."""
    rank, ranks, offset, vocab = layout
    n, width = x.shape
    dev = x.device
    loss, z, acc, pred = _alloc_outputs(n, red, want_z, want_acc, want_pred, dev)
    stride = _row_stride(x)
    inp = _lib.XentInput(_ptr(x), _DTYPES[x.dtype], n, width, stride, _ptr(t),
                         _TARGET_TYPES[t.dtype], _ptr(weight))
    opt = _options_for((red, ignore_index, label_smoothing, lse_square_scale, softcap, check, True))
    out = _lib.XentOutput(_ptr(loss), _ptr(z), _ptr(acc), _ptr(pred), None)
    R = _lib.vp_record_floats(opt, _ptr(weight), out)
    records = torch.empty((n, R), dtype=_f32, device=dev)
    ex = _exec_for(x, verdict)
    _lib.vp_stats(inp, vocab, offset, opt, out, _ptr(records), ex)
    gathered = _gather(records, ranks, group) if ranks > 1 else records.unsqueeze(0)
    _lib.vp_forward(inp, vocab, offset, opt, _ptr(gathered), ranks, out, grad, ex)
    return loss, z, acc, pred


class _VPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, t, weight, layout, red, ignore_index, label_smoothing, lse_square_scale,
                softcap, check, want_z, want_acc, want_pred, group):
        # Deferred: the forward step checks the targets on the device and the
        # verdict is read late (_verdicts), so no rank waits before the
        # collective and every rank (with the same targets) raises later.
        ctx.verdict = _verdicts.take((t, weight)) if check == _lib.XENT_TARGETS_DEFERRED else None
        loss, z, acc, pred = _vp(x, t, weight, layout, red, ignore_index, label_smoothing,
                                 lse_square_scale, softcap, check, want_z, want_acc, want_pred,
                                 True, group, ctx.verdict)
        torch.autograd.graph.increment_version(x)
        ctx.save_for_backward(x.detach())
        ctx.applied = None  # the upstream gradient the shard's gradient holds (_run_backward)
        return (loss.to(x.dtype),) + _extras(ctx, x.dtype, z, acc, pred, want_z, want_acc,
                                             want_pred)

    @staticmethod
    def backward(ctx, grad_loss, *rest):
        (g,) = ctx.saved_tensors
        _verdicts.poll(ctx)
        ctx.applied = _run_backward(g, grad_loss, ctx.applied)
        return (g,) + (None,) * 13


def vocab_parallel_cross_entropy(
    vocab_parallel_logits: Tensor,
    target: Tensor,
    process_group=None,
    weight: Optional[Tensor] = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    reduction: str = "mean",
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    *,
    vocab_size: Optional[int] = None,
    check_targets: bool = True,
    validate: bool = True,
):
    """The cross-entropy of logits sharded by vocabulary over ``process_group``
    (default: the world). ``vocab_parallel_logits`` (..., V_p): this rank's
    columns; ``target`` (...): global class indices, the same on every rank;
    ``weight``: all V class weights, or None. ``vocab_size``: the global V, to
    check the shards against (default: the sum of the widths). Returns what
    ``xent.torch.cross_entropy`` returns for the whole vocabulary."""
    dtensor_mesh = None
    logits = vocab_parallel_logits
    try:
        from torch.distributed.tensor import DTensor, Replicate, Shard
    except ImportError:  # pragma: no cover - old torch
        DTensor = None
    if DTensor is not None and isinstance(logits, DTensor):
        placements = logits.placements
        if len(placements) != 1 or not (isinstance(placements[0], Shard) and
                                        placements[0].dim in (-1, logits.dim() - 1)):
            raise ValueError("DTensor logits must be sharded on their last dimension over a "
                             f"1-D mesh (Shard(-1)); got placements {placements}")
        dtensor_mesh = logits.device_mesh
        process_group = dtensor_mesh.get_group()
        logits = logits.to_local()
        if isinstance(target, DTensor):
            target = target.full_tensor()
    group = process_group if process_group is not None else dist.group.WORLD
    red = _check_options(label_smoothing, softcap, reduction)
    if logits.dim() == 0:
        raise XentValueError(2, "vocab_parallel_logits must have a vocabulary dimension")
    lead = logits.shape[:-1]
    if target.shape != lead:
        raise ValueError(f"target has shape {tuple(target.shape)} but the logits have shape "
                         f"{tuple(logits.shape)}: the target's shape must be logits.shape[:-1]")
    width = logits.shape[-1]
    x = logits.reshape(-1, width)
    if (width > 1 and x.shape[0] > 0 and x.stride(1) != 1) or (x.shape[0] > 1 and
                                                               x.stride(0) < width):
        x = x.contiguous()
    t = target.reshape(-1)
    if t.dtype not in _TARGET_TYPES:
        t = t.to(torch.int64)
    t = t.contiguous()
    layout = _layout(group, x.shape[0], width, x.dtype, x.device, vocab_size, validate)
    w = None
    if weight is not None:
        if weight.shape != (layout[3],):
            raise ValueError(f"weight must hold all {layout[3]} class weights, got shape "
                             f"{tuple(weight.shape)}")
        w = weight.to(device=x.device, dtype=_f32).contiguous()
    grad = x.requires_grad and torch.is_grad_enabled()
    check = _target_check(check_targets, grad, red, x.is_cuda)
    cap = None if softcap is None else float(softcap)
    args = (t, w, layout, red, int(ignore_index), float(label_smoothing), float(lse_square_scale),
            cap, check, bool(return_z_loss), bool(return_token_accuracy),
            bool(return_predicted_tokens), group)
    if grad:
        outs = _VPFunction.apply(x, *args)
        loss = outs[0]
        extras = iter(outs[1:])
        z = next(extras) if return_z_loss else None
        acc = next(extras) if return_token_accuracy else None
        pred = next(extras) if return_predicted_tokens else None
    else:
        loss, z, acc, pred = _vp(x, *args[:-1], False, group)
        loss = loss.to(x.dtype)
    if red == _NONE:
        loss = loss.view(lead)
    if dtensor_mesh is not None:
        loss = DTensor.from_local(loss, dtensor_mesh, [Replicate()], run_check=False)
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens):
        return loss
    if red == _NONE:
        z = z.view(lead) if return_z_loss else None
        acc = acc.view(lead) if return_token_accuracy else None
    return CrossEntropyOutput(loss=loss, z_loss=z.to(x.dtype) if return_z_loss else None,
                              token_accuracy=acc if return_token_accuracy else None,
                              predicted_tokens=pred.view(lead) if return_predicted_tokens else None)


class VocabParallelCrossEntropyLoss(torch.nn.Module):
    """The module form: ``forward(vocab_parallel_logits, target)``."""

    def __init__(self, process_group=None, weight: Optional[Tensor] = None,
                 ignore_index: int = -100, label_smoothing: float = 0.0,
                 lse_square_scale: float = 0.0, softcap: Optional[float] = None,
                 reduction: str = "mean", *, check_targets: bool = True,
                 validate: bool = True):
        super().__init__()
        self.validate = validate
        _check_options(label_smoothing, softcap, reduction)
        self.process_group = process_group
        self.register_buffer("weight", weight, persistent=False)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing
        self.lse_square_scale, self.softcap = lse_square_scale, softcap
        self.reduction, self.check_targets = reduction, check_targets

    def forward(self, vocab_parallel_logits: Tensor, target: Tensor):
        return vocab_parallel_cross_entropy(
            vocab_parallel_logits, target, self.process_group, self.weight, self.ignore_index,
            self.label_smoothing, self.lse_square_scale, self.softcap, self.reduction,
            check_targets=self.check_targets, validate=self.validate)


_NO_IGNORE = -(2**63)  # no target equals it: Megatron ignores nothing


def megatron_vocab_parallel_cross_entropy(vocab_parallel_logits: Tensor, target: Tensor,
                                          label_smoothing: float = 0.0, process_group=None):
    """Megatron-LM's ``vocab_parallel_cross_entropy(vocab_parallel_logits,
    target, label_smoothing)``: per-token losses of target's shape, every
    target a real class, and Megatron's smoothing (alpha V / (V - 1), its
    rescaling of the smoothing towards the non-target classes)."""
    group = process_group if process_group is not None else dist.group.WORLD
    width = vocab_parallel_logits.shape[-1]
    rows = vocab_parallel_logits.numel() // max(width, 1)
    v = _layout(group, rows, width, vocab_parallel_logits.dtype, vocab_parallel_logits.device,
                None)[3]
    ls = float(label_smoothing) * v / (v - 1) if label_smoothing > 0 and v > 1 else 0.0
    return vocab_parallel_cross_entropy(vocab_parallel_logits, target, group,
                                        ignore_index=_NO_IGNORE, label_smoothing=ls,
                                        reduction="none", validate=False)


# ---------------------------------------------------------------------------
# Fused linear, vocabulary-parallel
# ---------------------------------------------------------------------------


class _VPLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, t, cw, layout, red, ignore_index, label_smoothing,
                lse_square_scale, softcap, check, chunk, group):
        n = x.shape[0]
        rank, ranks, offset, vocab = layout
        opt = _options_for((red, ignore_index, label_smoothing, lse_square_scale, softcap, check,
                            True))
        loss = torch.empty((), dtype=_f32, device=x.device)
        out = _lib.XentOutput(_ptr(loss), None, None, None, None)
        R = _lib.vp_record_floats(opt, _ptr(cw), out)
        records = torch.empty((n, R), dtype=_f32, device=x.device)
        ex = _exec_for(x)
        tdt = _TARGET_TYPES[t.dtype]
        es = t.element_size()

        def logits_of(r0, r1):
            z = x[r0:r1] @ w.t()
            return z + b if b is not None else z

        with torch.no_grad():  # pass 1: every chunk's records
            for r0 in range(0, n, chunk):
                r1 = min(n, r0 + chunk)
                z = logits_of(r0, r1).contiguous()
                inp = _lib.XentInput(z.data_ptr(), _DTYPES[z.dtype], r1 - r0, z.shape[1], 0,
                                     t.data_ptr() + r0 * es, tdt, _ptr(cw))
                _lib.vp_stats(inp, vocab, offset, opt, out, records[r0:r1].data_ptr(), ex)
            gathered = _gather(records, ranks, group) if ranks > 1 else records.unsqueeze(0)
            dx = torch.zeros_like(x, dtype=_f32)
            dw = torch.zeros_like(w, dtype=_f32)
            db = torch.zeros_like(b, dtype=_f32) if b is not None else None
            total = torch.zeros((), dtype=torch.float64, device=x.device)
            for r0 in range(0, n, chunk):  # pass 2: the logits again, the gradients
                r1 = min(n, r0 + chunk)
                z = logits_of(r0, r1).contiguous()
                part = gathered[:, r0:r1].contiguous()
                inp = _lib.XentInput(z.data_ptr(), _DTYPES[z.dtype], r1 - r0, z.shape[1], 0,
                                     t.data_ptr() + r0 * es, tdt, _ptr(cw))
                chunk_loss = torch.empty((), dtype=_f32, device=x.device)
                cout = _lib.XentOutput(chunk_loss.data_ptr(), None, None, None, None)
                copt = _options_for((_lib.XENT_REDUCTION_SUM, ignore_index, label_smoothing,
                                     lse_square_scale, softcap, _lib.XENT_TARGETS_UNCHECKED, True))
                _lib.vp_forward(inp, vocab, offset, copt, part.data_ptr(), ranks, cout, True, ex)
                total += chunk_loss.double()
                dx[r0:r1] += (z @ w).float()
                dw += (z.t() @ x[r0:r1]).float()
                if db is not None:
                    db += z.float().sum(0)
            if ranks > 1:
                dist.all_reduce(dx, group=group)  # the ranks' shares of dX, once
            valid = t != ignore_index
            if red == _lib.XENT_REDUCTION_MEAN:
                denom = (cw[t[valid]].sum() if cw is not None else valid.sum()).double()
                scale = torch.where(denom > 0, 1.0 / denom, torch.zeros_like(denom))
                loss = (total * scale).float()
                if lse_square_scale > 0 and cw is not None:
                    raise NotImplementedError("z-loss with class weights and mean reduction in "
                                              "the vocabulary-parallel fused linear loss")
            else:
                scale = torch.ones((), dtype=torch.float64, device=x.device)
                loss = total.float()
            f = scale.float()
            dx, dw = (dx * f).to(x.dtype), (dw * f).to(w.dtype)
            db = (db * f).to(b.dtype) if db is not None else None
        ctx.save_for_backward(dx, dw, db)
        ctx.has_bias = b is not None
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        dx, dw, db = ctx.saved_tensors
        g = grad_loss.to(dx.dtype)
        return (dx * g, dw * g.to(dw.dtype), (db * g.to(db.dtype)) if ctx.has_bias else None) + (
            None,) * 11


def vocab_parallel_fused_linear_cross_entropy(hidden: Tensor, weight_shard: Tensor, target: Tensor,
                                              bias_shard: Optional[Tensor] = None,
                                              process_group=None, ce_weight=None,
                                              ignore_index: int = -100,
                                              label_smoothing: float = 0.0,
                                              lse_square_scale: float = 0.0,
                                              softcap: Optional[float] = None,
                                              reduction: str = "mean", *, chunk_rows: int = 1024,
                                              check_targets: bool = True):
    """The LM head (this rank's vocabulary rows of its weight, V_p x H) and the
    loss over the whole vocabulary, without the logits: hidden (BT x H, the
    same on every rank), target (BT). Mean and sum; the gradient of hidden
    is summed over the ranks in the forward (one all-reduce), those of the
    weight and bias shards stay on their rank."""
    group = process_group if process_group is not None else dist.group.WORLD
    red = _check_options(label_smoothing, softcap, reduction)
    if red == _NONE:
        raise XentValueError(9, "the vocabulary-parallel fused linear loss takes reduction "
                                "'mean' or 'sum'")
    if hidden.dim() != 2 or weight_shard.dim() != 2 or weight_shard.shape[1] != hidden.shape[1]:
        raise XentValueError(2, f"hidden must be (BT, H) and weight_shard (V_p, H); got "
                                f"{tuple(hidden.shape)} and {tuple(weight_shard.shape)}")
    if weight_shard.dtype != hidden.dtype:
        raise ValueError(f"weight_shard is {weight_shard.dtype} but hidden is {hidden.dtype}")
    if target.shape != hidden.shape[:1]:
        raise ValueError(f"target has shape {tuple(target.shape)}; expected ({hidden.shape[0]},)")
    layout = _layout(group, hidden.shape[0], weight_shard.shape[0], hidden.dtype, hidden.device,
                     None)
    t = target.to(torch.int64).contiguous()
    cw = None if ce_weight is None else ce_weight.to(device=hidden.device, dtype=_f32).contiguous()
    check = _lib.XENT_TARGETS_CHECKED if check_targets else _lib.XENT_TARGETS_UNCHECKED
    cap = None if softcap is None else float(softcap)
    return _VPLinearFunction.apply(hidden.contiguous(), weight_shard.contiguous(), bias_shard, t,
                                   cw, layout, red, int(ignore_index), float(label_smoothing),
                                   float(lse_square_scale), cap, check, max(1, int(chunk_rows)),
                                   group)
