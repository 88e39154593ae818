"""Input generation and dtype helpers shared by the test modules (NumPy only)."""

from __future__ import annotations

import numpy as np

REDUCTIONS = ["mean", "sum", "none"]

# The option sets every parity test runs: each feature alone and the pairs
# that interact (a real class as ignore_index, weights with smoothing, the
# z-loss and the softcap with the others). "weight": True asks the test for
# a random weight vector.
FEATURES = {
    "plain": {},
    "weight": {"weight": True},
    "smoothing": {"label_smoothing": 0.1},
    "weight+smoothing": {"weight": True, "label_smoothing": 0.2},
    "ignore_real_class": {"ignore_index": 5},
    "weight+smoothing+ignore_real_class": {"weight": True, "label_smoothing": 0.1,
                                           "ignore_index": 2},
    "zloss": {"lse_square_scale": 1e-2},
    "zloss+smoothing": {"lse_square_scale": 1e-2, "label_smoothing": 0.1},
    "zloss+weight": {"lse_square_scale": 1e-2, "weight": True},
    "softcap": {"softcap": 4.0},
    "softcap+weight": {"softcap": 4.0, "weight": True},
    "softcap+smoothing": {"softcap": 4.0, "label_smoothing": 0.1},
    "everything": {"weight": True, "label_smoothing": 0.1, "lse_square_scale": 1e-3,
                   "softcap": 8.0, "ignore_index": 3},
}


def f32_to_bf16_bits(a) -> np.ndarray:
    """Round float32 values to bfloat16 (nearest even), as uint16 bit patterns."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f64(b) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).astype(
        np.float64)


def make_targets(rng, x, ignore_index=-100, ignore_frac=0.15, hit_frac=0.3):
    """Targets for logits x (N, V): random classes, some rows set to their
    arg-max (so accuracy is not trivially 0), some rows ignored; at least one
    row is kept. With a real class as ignore_index, rows aimed at it are
    ignored, and some rows are aimed at it on purpose."""
    n, v = x.shape
    y = rng.integers(0, v, n).astype(np.int64)
    hit = rng.random(n) < hit_frac
    y[hit] = np.argmax(x[hit], axis=1)
    ign = rng.random(n) < ignore_frac
    y[ign] = ignore_index
    keep = int(rng.integers(0, n)) if n else 0
    if n and y[keep] == ignore_index:
        y[keep] = (ignore_index + 1) % v if 0 <= ignore_index < v else 0
    return y


def make_logits(rng, n, v, scale=3.0):
    return (rng.standard_normal((n, v)) * scale).astype(np.float32)


def make_weight(rng, v):
    return rng.uniform(0.25, 2.0, v).astype(np.float32)
