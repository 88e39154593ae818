"""The cross-entropy over logits sharded on the vocabulary, inside ``shard_map``.

Each device holds the columns [k W, (k + 1) W) of every row (k its index on
the mesh axis, W = V / P) and every row's global target. One call is the three
steps of include/xent.h's vocabulary-parallel loss: each device reduces its
shard of each row to a record (16 or 32 bytes), ``jax.lax.all_gather`` brings
every device's records, and each device combines them into the loss (the
same on every device) and, when differentiated, its shard's gradient over its
logits. The backward scales that gradient: nothing collective.

    from jax.sharding import PartitionSpec as P
    loss = jax.shard_map(
        lambda x, t: vocab_parallel_cross_entropy(x, t, "tp"),
        mesh=mesh, in_specs=(P(None, "tp"), P()), out_specs=P())(logits, targets)

The device's offset is its index times W, a traced value in SPMD code, so each
step is a ``jax.lax.switch`` over the P offsets: the handlers take it as a
constant, and the device runs its own branch alone.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import jax
import jax.numpy as jnp

from . import _ffi, _float_array, _options, _result, _scale, _targets, _weights
from ._ffi import Options, Wants

__all__ = ["vocab_parallel_cross_entropy"]


def _record_floats(opt: Options, weighted: bool, wants: Wants) -> int:
    """xent_vp_record_floats: 8 with weighted smoothing or an arg-max, else 4."""
    return 8 if (weighted and opt.label_smoothing > 0.0) or wants.accuracy or \
        wants.predicted else 4


def _steps(x, t, w, opt: Options, wants: Wants, axis: str, ranks: int, grad: bool):
    width = x.shape[-1]
    vocab = width * ranks
    k = jax.lax.axis_index(axis)
    record = _record_floats(opt, w.size > 0, wants)
    argmax = wants.accuracy or wants.predicted
    stats = jax.lax.switch(k, [partial(_ffi.call_vp_stats, opt=opt, vocab=vocab, offset=r * width,
                                       record=record, argmax=argmax) for r in range(ranks)],
                           x, t, w)
    gathered = jax.lax.all_gather(stats, axis)  # (ranks, ..., record), rank order
    return jax.lax.switch(
        k, [partial(_ffi.call_vp_forward, opt=opt, wants=wants, vocab=vocab, offset=r * width,
                    ranks=ranks, grad=grad) for r in range(ranks)],
        x, t, w, gathered)


def _varying_axes(x) -> tuple:
    """The mesh axes shard_map types x as varying over (its manual axis type)."""
    a = jax.typeof(x)
    m = getattr(a, "manual_axis_type", None)
    axes = getattr(m, "varying", None) if m is not None else getattr(a, "vma", None)
    return tuple(sorted(axes or ()))


# No symbolic zeros here: custom_vjp has none under shard_map.
@partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5, 6, 7))
def _vp(x, t, w, opt: Options, wants: Wants, axis: str, ranks: int, vary: tuple):
    return tuple(_steps(x, t, w, opt, wants, axis, ranks, grad=False))


def _vp_fwd(x, t, w, opt: Options, wants: Wants, axis: str, ranks: int, vary: tuple):
    g, *outs = _steps(x, t, w, opt, wants, axis, ranks, grad=True)
    return tuple(outs), g


def _vp_bwd(opt: Options, wants: Wants, axis: str, ranks: int, vary: tuple, g, cts):
    dx = _scale(g, cts[0], opt.reduction == "none")
    for a in vary:  # typed as the shard it is the gradient of (the handlers' outputs carry
        dx = jax.lax.pcast(dx, a, to="varying")  # no mesh axes)
    return dx, None, None


_vp.defvjp(_vp_fwd, _vp_bwd)


def vocab_parallel_cross_entropy(local_logits, targets, axis_name: str, weights=None, *,
                                 reduction: str = "mean", ignore_index: int = -100,
                                 label_smoothing: float = 0.0, lse_square_scale: float = 0.0,
                                 softcap: Optional[float] = None, check_targets: bool = True,
                                 empty_mean: str = "nan", return_z_loss: bool = False,
                                 return_token_accuracy: bool = False,
                                 return_predicted_tokens: bool = False,
                                 return_lse: bool = False):
    """The loss of xent.jax.cross_entropy over the whole vocabulary, inside shard_map.

    Args:
        local_logits: (..., W) this device's columns of the logits, the
            shards in the order of the mesh axis ``axis_name`` (V = W x P).
        targets: every row's global class index, replicated.
        weights: optional (V,) class weights, replicated.
        the rest: as xent.jax.cross_entropy.

    Returns:
        The same on every device: the loss, or a CrossEntropyOutput.
    """
    x = _float_array(local_logits, "local_logits")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"local_logits has shape {tuple(x.shape)}; it must be (..., W), W >= 1")
    ranks = int(jax.lax.axis_size(axis_name))
    t = _targets(targets, x.shape[:-1])
    w = _weights(weights, x.shape[-1] * ranks, "weights")
    opt = _options(reduction, ignore_index, label_smoothing, lse_square_scale, softcap,
                   check_targets, empty_mean)
    wants = Wants(bool(return_z_loss), bool(return_token_accuracy), bool(return_lse),
                  bool(return_predicted_tokens))
    outs = _vp(x, t, w, opt, wants, axis_name, ranks, _varying_axes(x))
    return _result(outs, wants, any((return_z_loss, return_token_accuracy,
                                     return_predicted_tokens, return_lse)))
