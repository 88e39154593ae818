"""Every tolerance of the Python suite, in one place.

An element passes when  |got - ref| <= atol + atol_rel * max|ref| + rtol * |ref|,
with ref the float64 reference (tests/python/reference.py) evaluated on the
very values the library saw (low-precision inputs are upcast, not regenerated).

Why these numbers:
- float32: the library accumulates in fp32; a loss is a difference of two
  fp32 quantities of size log(V), so a few ulps (1.2e-7 each) of lse and of
  the reduction; the gradient adds the ulps of exp. 4e-6 / 1e-5 leave about
  ten times the error measured on the CPU backend.
- bfloat16 / float16 outputs (the gradient in the logits' dtype, the loss cast
  to it by the torch binding): one rounding of an accurate fp32 value, that
  is half an ulp relative, 2^-8 (bf16) and 2^-11 (fp16), plus the fp32 error.
  float16 gradients of large vocabularies are subnormal (below 6.1e-5), where
  the rounding error is absolute: half the subnormal spacing, 2^-25.
- "training": parameters and losses of a few SGD steps of a small model,
  xent against torch in float32: fp32 gradient errors pass through matmuls and
  updates, about ten times the fp32 gradient tolerance.
- "scaled": a gradient that the backward multiplied by an upstream gradient
  other than 1 was rounded twice (forward, then backward): twice the above.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol_rel: float = 0.0   # times max|ref| of the compared array
    atol: float = 0.0       # absolute


_F32_LOSS = Tol(rtol=4e-6, atol_rel=1e-6)
_F32_GRAD = Tol(rtol=1e-5, atol_rel=1e-6)

TOLERANCES = {
    # (dtype name, what) -> Tol
    ("float32", "loss"): _F32_LOSS,          # loss, z-loss, lse; also fp32 outputs of any dtype
    ("float32", "grad"): _F32_GRAD,
    ("float32", "grad_scaled"): _F32_GRAD,
    ("float32", "training"): Tol(rtol=1e-4, atol_rel=1e-5),
    ("bfloat16", "loss"): Tol(rtol=2.0**-8 + 1e-5, atol_rel=1e-6),
    ("bfloat16", "grad"): Tol(rtol=2.0**-8 + 1e-5, atol_rel=1e-6),
    ("bfloat16", "grad_scaled"): Tol(rtol=2.0**-7 + 1e-5, atol_rel=1e-6),
    ("float16", "loss"): Tol(rtol=2.0**-11 + 1e-5, atol_rel=1e-6),
    ("float16", "grad"): Tol(rtol=2.0**-11 + 1e-5, atol_rel=1e-6, atol=2.0**-25),
    ("float16", "grad_scaled"): Tol(rtol=2.0**-10 + 1e-5, atol_rel=1e-6, atol=2.0**-24),
}


def tol(dtype_name: str, what: str) -> Tol:
    return TOLERANCES[(dtype_name, what)]


def with_cancellation(t: Tol, magnitude: float) -> Tol:
    """Values that are differences of larger fp32 terms: a loss is lse - x_y,
    a gradient element a p - b - c. Where they nearly vanish (V = 1, a certain
    row) the error is a few ulps of those terms, not of the result. `magnitude`
    is the size of the terms (largest |logit| for a loss, 1/N for a mean's
    gradient); 4 ulps of it are allowed on top of `t`."""
    return Tol(rtol=t.rtol, atol_rel=t.atol_rel, atol=t.atol + 4 * 2.0**-23 * magnitude)


def assert_close(got, ref, t: Tol, what: str = "value") -> None:
    """Elementwise check against the float64 reference; NaN must match NaN."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != reference {ref.shape}"
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    assert np.array_equal(nan_got, nan_ref), f"{what}: NaN pattern differs from the reference"
    g, r = got[~nan_ref], ref[~nan_ref]
    if r.size == 0:
        return
    scale = float(np.max(np.abs(r)))
    bound = t.atol + t.atol_rel * scale + t.rtol * np.abs(r)
    err = np.abs(g - r)
    bad = ~(err <= bound)
    if bad.any():
        i = int(np.argmax(np.where(bad, err - bound, -np.inf)))
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {r.size} elements out of tolerance {t}; "
            f"worst got {g.flat[i]!r} reference {r.flat[i]!r} (error {err.flat[i]:.3e}, "
            f"bound {np.broadcast_to(bound, r.shape).flat[i]:.3e})")
