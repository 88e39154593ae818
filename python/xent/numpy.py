"""xent for NumPy arrays (CPU backend): no torch needed.

``cross_entropy(logits, targets, ...)`` computes the fused softmax
cross-entropy of a (..., V) array of logits against integer targets, and with
``grad=True`` writes d(loss)/d(logits) over the logits array in place.

Dtypes of the logits:

* ``numpy.float32`` and ``numpy.float16``;
* bfloat16, either as ``ml_dtypes.bfloat16`` arrays (when the ``ml_dtypes``
  package is installed: detected by the dtype's name, so xent does not need
  the package itself) or as ``numpy.uint16`` arrays holding the bf16 bit
  patterns together with ``dtype="bfloat16"``.

Layout: the last dimension must be contiguous; rows may be padded (a 2-D
array whose row stride is larger than V, e.g. ``big[:, :V]``), and leading
dimensions are collapsed to N rows when that needs no copy. With
``grad=False`` any other layout is copied first; with ``grad=True`` it is an
error (the gradient must land in the caller's array).

Results are fp32 (the C library's outputs): a NumPy float32 scalar for
reductions "mean"/"sum", an array of ``logits.shape[:-1]`` for "none".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import _lib
from ._lib import XentError, XentRuntimeError, XentValueError

__all__ = [
    "cross_entropy",
    "CrossEntropyResult",
    "XentError",
    "XentValueError",
    "XentRuntimeError",
]


@dataclass
class CrossEntropyResult:
    """What :func:`cross_entropy` returns when any ``return_*`` flag is set."""

    loss: object
    z_loss: Optional[object] = None
    token_accuracy: Optional[object] = None
    predicted_tokens: Optional[np.ndarray] = None
    lse: Optional[np.ndarray] = None


def _xent_dtype(arr: np.ndarray, dtype: Optional[str]) -> int:
    if dtype is not None:
        name = str(dtype).lower()
        if name in ("bfloat16", "bf16"):
            if arr.dtype == np.uint16 or arr.dtype.name == "bfloat16":
                return _lib.XENT_BFLOAT16
            raise ValueError(f"dtype='bfloat16' needs uint16 (bf16 bits) logits, not {arr.dtype}")
        if name in ("float32", "fp32") and arr.dtype == np.float32:
            return _lib.XENT_FLOAT32
        if name in ("float16", "fp16", "half") and arr.dtype == np.float16:
            return _lib.XENT_FLOAT16
        raise ValueError(f"dtype={dtype!r} does not describe logits of dtype {arr.dtype}")
    if arr.dtype == np.float32:
        return _lib.XENT_FLOAT32
    if arr.dtype == np.float16:
        return _lib.XENT_FLOAT16
    if arr.dtype.name == "bfloat16" and arr.dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return _lib.XENT_BFLOAT16
    if arr.dtype == np.uint16:
        raise ValueError("uint16 logits need dtype='bfloat16' (bf16 bit patterns)")
    raise ValueError(
        f"logits must be float32, float16 or bfloat16, not {arr.dtype} "
        "(convert with .astype(numpy.float32))")


def _rows_view(arr: np.ndarray) -> Optional[np.ndarray]:
    """A (N, V) view of `arr` with a contiguous last dim, or None if that needs a copy."""
    item = arr.itemsize
    v = arr.shape[-1]
    if arr.ndim == 1:
        return arr.reshape(1, v) if (v <= 1 or arr.strides[0] == item) else None
    if v > 1 and arr.strides[-1] != item:
        return None
    n = int(np.prod(arr.shape[:-1], dtype=np.int64))
    if n == 0:
        return arr.reshape(0, v)
    # The leading dims collapse into one if each (of size > 1) is evenly nested
    # in the one before it.
    dims = [(s, st) for s, st in zip(arr.shape[:-1], arr.strides[:-1]) if s != 1]
    if not dims:
        row_stride = max(v, 1) * item
    else:
        for (s0, st0), (s1, st1) in zip(dims, dims[1:]):
            if st0 != st1 * s1:
                return None
        row_stride = dims[-1][1]
    if n > 1 and (row_stride <= 0 or row_stride % item != 0 or row_stride < v * item):
        return None
    return np.lib.stride_tricks.as_strided(
        arr, shape=(n, v), strides=(row_stride, item), writeable=arr.flags.writeable)


def _ptr(a: Optional[np.ndarray]) -> Optional[int]:
    if a is None or a.size == 0:
        return None
    return a.ctypes.data


def cross_entropy(
    logits: np.ndarray,
    targets: np.ndarray,
    weight: Optional[np.ndarray] = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    lse_square_scale: float = 0.0,
    softcap: Optional[float] = None,
    reduction: str = "mean",
    return_z_loss: bool = False,
    return_token_accuracy: bool = False,
    return_predicted_tokens: bool = False,
    return_lse: bool = False,
    grad: bool = False,
    num_threads: int = 0,
    dtype: Optional[str] = None,
):
    """Fused softmax cross-entropy on the CPU.

    Args:
        logits: (..., V) float32 / float16 / bfloat16 array (see module doc).
        targets: integer array with one class index per row (int32 and int64
            are used as they are, other integer types are converted).
        weight: optional (V,) class weights (converted to float32).
        ignore_index, label_smoothing, lse_square_scale, softcap, reduction:
            as in ``torch.nn.functional.cross_entropy`` plus z-loss and softcap
            (the math is in include/xent.h).
        return_z_loss / return_token_accuracy / return_predicted_tokens /
            return_lse: also return those outputs.
        grad: write d(loss)/d(logits) over `logits` in place (the gradient for
            an upstream gradient of 1; scale it afterwards if needed).
        num_threads: CPU threads, 0 for all cores.
        dtype: "bfloat16" for uint16 arrays of bf16 bits; otherwise optional.

    Returns:
        The loss (float32 scalar for mean/sum, an array for none), or a
        :class:`CrossEntropyResult` when any ``return_*`` flag is set.

    Raises:
        ValueError for bad Python-side arguments, :class:`xent.XentError` (a
        ValueError or RuntimeError) with the C library's message otherwise.
        Nothing is written to `logits` when an error is raised.
    """
    red = _lib.reduction_code(reduction)
    if not isinstance(logits, np.ndarray):
        raise TypeError("logits must be a numpy.ndarray")
    if logits.ndim == 0:
        raise ValueError("logits must have at least one dimension (the vocabulary)")
    code = _xent_dtype(logits, dtype)
    lead = logits.shape[:-1]
    v = logits.shape[-1]
    if v < 1:
        raise XentValueError(2, f"logits has no classes (shape {logits.shape}): its last "
                                "dimension is the vocabulary and must be at least 1")
    x = _rows_view(logits)
    if grad:
        if x is None:
            raise ValueError(
                "grad=True writes the gradient into logits, which needs a contiguous last "
                "dimension and leading dimensions that collapse to rows without a copy")
        if not logits.flags.writeable:
            raise ValueError("grad=True needs a writeable logits array")
    elif x is None:
        x = np.ascontiguousarray(logits).reshape(-1, v)
    n = x.shape[0]
    row_stride = x.strides[0] // x.itemsize if n > 1 else 0

    t = np.asarray(targets)
    if not np.issubdtype(t.dtype, np.integer):
        raise ValueError(f"targets must be integers, not {t.dtype}")
    t = t.reshape(-1)
    if t.dtype.kind == "u" and t.dtype.itemsize == 8 and t.size:
        # int64 would wrap the largest ones (2**64 - 100 to -100, an ignored row)
        big = np.flatnonzero(t > np.uint64(2**63 - 1))
        if big.size:
            r = int(big[0])
            raise XentValueError(4, f"targets[{r}] = {int(t[r])} is outside [0, {v}) and "
                                    f"does not fit a class index (int64)")
    if t.shape[0] != n:
        raise ValueError(f"targets has {t.shape[0]} elements but logits has {n} rows")
    if t.dtype == np.int32:
        ttype = _lib.XENT_INT32
    else:
        t = t.astype(np.int64, copy=False)
        ttype = _lib.XENT_INT64
    t = np.ascontiguousarray(t)

    w = None
    if weight is not None:
        w = np.ascontiguousarray(np.asarray(weight, dtype=np.float32))
        if w.shape != (v,):
            raise ValueError(f"weight must have shape ({v},), got {w.shape}")

    per_row = red == _lib.XENT_REDUCTION_NONE
    shape = (n,) if per_row else (1,)
    # Outputs start poisoned (NaN, -2): a value the library failed to write
    # shows instead of passing for a result.
    loss = np.full(shape, np.nan, dtype=np.float32)
    z = np.full(shape, np.nan, dtype=np.float32) if return_z_loss else None
    acc = np.full(shape, np.nan, dtype=np.float32) if return_token_accuracy else None
    pred = np.full((n,), -2, dtype=np.int64) if return_predicted_tokens else None
    lse = np.full((n,), np.nan, dtype=np.float32) if return_lse else None

    inp = _lib.XentInput()
    inp.logits = _ptr(x)
    inp.dtype = code
    inp.rows = n
    inp.vocab = v
    inp.row_stride = row_stride
    inp.targets = _ptr(t)
    inp.target_type = ttype
    inp.weights = _ptr(w)
    opt = _lib.make_options(red, ignore_index, label_smoothing, lse_square_scale, softcap)
    out = _lib.XentOutput()
    out.loss = _ptr(loss)
    out.z_loss = _ptr(z)
    out.token_accuracy = _ptr(acc)
    out.predicted = _ptr(pred)
    out.lse = _ptr(lse)
    ex = _lib.XentExec()
    ex.backend = _lib.XENT_BACKEND_CPU
    ex.num_threads = int(num_threads)
    _lib.forward(inp, opt, out, ex, bool(grad))

    def shaped(a):
        if a is None:
            return None
        return a.reshape(lead) if per_row else a[0]

    result_loss = shaped(loss)
    if not (return_z_loss or return_token_accuracy or return_predicted_tokens or return_lse):
        return result_loss
    return CrossEntropyResult(
        loss=result_loss,
        z_loss=shaped(z),
        token_accuracy=shaped(acc),
        predicted_tokens=None if pred is None else pred.reshape(lead),
        lse=None if lse is None else lse.reshape(lead),
    )


def backward(grad: np.ndarray, grad_output, dtype: Optional[str] = None,
             num_threads: int = 0) -> None:
    """Multiply a gradient left by ``cross_entropy(..., grad=True)`` by the
    upstream gradient, in place: a scalar (mean, sum) or one value per row
    (none). Same layout rules as the logits with ``grad=True``."""
    code = _xent_dtype(grad, dtype)
    x = _rows_view(grad)
    if x is None or not grad.flags.writeable:
        raise ValueError("grad must be writeable with a contiguous last dimension and "
                         "leading dimensions that collapse to rows without a copy")
    n, v = x.shape
    row_stride = x.strides[0] // x.itemsize if n > 1 else 0
    ex = _lib.XentExec()
    ex.backend = _lib.XENT_BACKEND_CPU
    ex.num_threads = int(num_threads)
    g = np.ascontiguousarray(np.asarray(grad_output, dtype=np.float32).reshape(-1))
    if n == 0:
        return
    _lib.backward(_ptr(x), code, n, v, row_stride, _ptr(g), g.shape[0], ex)
