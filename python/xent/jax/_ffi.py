"""The XLA FFI targets of xent (src/jax/ffi.cc, ``libxent_jax.so``), registered
with JAX once, and the calls that build their operands and attributes.

``libxent_jax.so`` lies beside the C library this process loads (the package
directory of an installed wheel, or ``build/`` of a source checkout);
``XENT_JAX_LIBRARY`` names another file.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .. import _lib

_TARGETS = ("ce", "linear", "vp_stats", "vp_forward")
_lock = threading.Lock()
_registered = False

REDUCTIONS = {"mean": _lib.XENT_REDUCTION_MEAN, "sum": _lib.XENT_REDUCTION_SUM,
              "none": _lib.XENT_REDUCTION_NONE}


def library_path() -> str:
    env = os.environ.get("XENT_JAX_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise OSError(f"XENT_JAX_LIBRARY is set to {env!r}, which is not a file")
        return env
    path = os.path.join(os.path.dirname(os.path.abspath(_lib.library_path())), "libxent_jax.so")
    if not os.path.isfile(path):
        raise ImportError(
            f"xent.jax needs libxent_jax.so beside {_lib.library_path()}: this build of xent has "
            "no JAX handlers (build it where jax is installed: CMake finds its FFI headers, "
            "XENT_JAX_PYTHON names the Python)")
    return path


def register() -> None:
    """Register every target for the CPU and, where JAX has it, CUDA (once)."""
    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        _lib.lib()  # libxent first: libxent_jax links to it
        handle = ctypes.CDLL(library_path())
        for name in _TARGETS:
            jax.ffi.register_ffi_target(f"xent_{name}",
                                        jax.ffi.pycapsule(getattr(handle, f"xent_jax_{name}_cpu")),
                                        platform="cpu")
            try:
                jax.ffi.register_ffi_target(
                    f"xent_{name}", jax.ffi.pycapsule(getattr(handle, f"xent_jax_{name}_cuda")),
                    platform="CUDA")
            except Exception:  # a jaxlib without its CUDA plugin: the CPU alone
                pass
        _registered = True


@dataclass(frozen=True)
class Options:
    """The loss's options as the handlers take them (hashable: a static arg)."""
    reduction: str = "mean"
    ignore_index: int = -100
    label_smoothing: float = 0.0
    lse_square_scale: float = 0.0
    softcap: Optional[float] = None
    check_targets: bool = True
    empty_mean: str = "nan"

    def attrs(self) -> dict:
        return dict(
            reduction=np.int64(REDUCTIONS[self.reduction]),
            ignore_index=np.int64(self.ignore_index),
            label_smoothing=np.float32(self.label_smoothing),
            lse_square_scale=np.float32(self.lse_square_scale),
            softcap=np.float32(self.softcap or 0.0),
            target_check=np.int64(_lib.XENT_TARGETS_CHECKED if self.check_targets
                                  else _lib.XENT_TARGETS_UNCHECKED),
            empty_mean=np.int64(1 if self.empty_mean == "zero" else 0))


@dataclass(frozen=True)
class Wants:
    """Which optional outputs a call writes."""
    z_loss: bool = False
    accuracy: bool = False
    lse: bool = False
    predicted: bool = False


def empty(dtype=jnp.float32) -> jax.Array:
    """The operand that stands for one not given (NULL in the C API)."""
    return jnp.zeros((0,), dtype)


def _spec(shape, dtype) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def output_specs(lead: Sequence[int], opt: Options, wants: Wants) -> list:
    """loss, z-loss, accuracy, lse, predicted (int32 pairs) of rows `lead`."""
    per = tuple(lead) if opt.reduction == "none" else ()
    none = (0,)
    return [_spec(per, jnp.float32),
            _spec(per if wants.z_loss else none, jnp.float32),
            _spec(per if wants.accuracy else none, jnp.float32),
            _spec(tuple(lead) if wants.lse else none, jnp.float32),
            _spec(tuple(lead) + (2,) if wants.predicted else none, jnp.int32)]


def predicted(pairs: jax.Array) -> jax.Array:
    """The int64 predicted tokens written as int32 pairs: the low words."""
    return pairs[..., 0]


def _forward(target: str, x, opt: Options, wants: Wants, grad: bool):
    """The call of a forward over (a shard of) logits x: its outputs, with the
    gradient first, over the logits' buffer, when `grad`."""
    register()
    outs = output_specs(x.shape[:-1], opt, wants)
    if grad:
        outs = [_spec(x.shape, x.dtype)] + outs
    return jax.ffi.ffi_call(target, outs, vmap_method="sequential",
                            input_output_aliases={0: 0} if grad else None)


def call_ce(x, t, w, opt: Options, wants: Wants, grad: bool):
    """xent_forward (grad False) or xent_forward_grad (True)."""
    return _forward("xent_ce", x, opt, wants, grad)(x, t, w, grad=np.int64(grad), **opt.attrs())


def call_linear(h, w, b, t, cw, go, opt: Options, wants: Wants, lin: dict, grads: tuple):
    """xent_linear_forward(_backward): the outputs, then dX, dW, db (empty
    where not asked for); grads: (dtype of dX or None, of dW, of db)."""
    register()
    outs = output_specs(h.shape[:-1], opt, wants)
    for shape, dt in zip((h.shape, w.shape, (w.shape[0],)), grads):
        outs.append(_spec(shape, dt) if dt is not None else _spec((0,), h.dtype))
    f = jax.ffi.ffi_call("xent_linear", outs, vmap_method="sequential")
    return f(h, w, b, t, cw, go, **opt.attrs(), **{k: np.int64(v) for k, v in lin.items()})


def call_vp_stats(x, t, w, opt: Options, vocab: int, offset: int, record: int, argmax: bool):
    register()
    f = jax.ffi.ffi_call("xent_vp_stats", [_spec(x.shape[:-1] + (record,), jnp.float32)],
                         vmap_method="sequential")
    return f(x, t, w, vocab=np.int64(vocab), offset=np.int64(offset), argmax=np.int64(argmax),
             **opt.attrs())[0]


def call_vp_forward(x, t, w, gathered, opt: Options, wants: Wants, vocab: int, offset: int,
                    ranks: int, grad: bool):
    return _forward("xent_vp_forward", x, opt, wants, grad)(
        x, t, w, gathered, grad=np.int64(grad), vocab=np.int64(vocab), offset=np.int64(offset),
        ranks=np.int64(ranks), **opt.attrs())
