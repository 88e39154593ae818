"""An independent float64 reference of the xent math (include/xent.h), in NumPy.

It covers what torch.nn.functional.cross_entropy lacks (z-loss, softcap,
token accuracy, predicted tokens, lse) and is itself checked against torch in
float64 where torch has the feature (tests/python/test_torch_parity.py).
"""

from __future__ import annotations

import numpy as np


def cross_entropy_ref(x, y, weight=None, ignore_index=-100, label_smoothing=0.0,
                      lse_square_scale=0.0, softcap=None, reduction="mean"):
    """Everything xent computes, in float64.

    x: (N, V) logits (any float dtype; upcast to float64). y: (N,) ints.
    Returns a dict: loss, z_loss, token_accuracy (reduced like the C library),
    predicted (N,), lse (N,), grad (N, V) = d(reduced loss)/dx.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64).reshape(-1)
    n, v = x.shape
    rows = np.arange(n)
    valid = y != ignore_index
    yc = np.where(valid, y, 0)
    if np.any(valid & ((y < 0) | (y >= v))):
        raise ValueError("target out of range")

    if softcap is not None:
        t = np.tanh(x / softcap)
        xs = softcap * t
    else:
        xs = x
    m = xs.max(axis=1) if v > 0 else np.zeros(n)
    lse = m + np.log(np.exp(xs - m[:, None]).sum(axis=1))
    p = np.exp(xs - lse[:, None])
    onehot = np.zeros_like(xs)
    onehot[rows, yc] = 1.0

    a = float(label_smoothing)
    eps = a / v
    s = float(lse_square_scale)
    if weight is None:
        wy = np.ones(n)
        loss_r = (1 - a) * (lse - xs[rows, yc]) + a * lse - eps * xs.sum(axis=1)
        g_loss = (1 - a) * (p - onehot) + a * p - eps
    else:
        w = np.asarray(weight, dtype=np.float64)
        wsum = w.sum()
        wy = w[yc]
        loss_r = (1 - a) * wy * (lse - xs[rows, yc]) + eps * (lse * wsum - (w * xs).sum(axis=1))
        g_loss = (1 - a) * wy[:, None] * (p - onehot) + eps * (p * wsum - w[None, :])
    z_r = s * lse * lse
    g_z = 2.0 * s * lse[:, None] * p

    loss_r = np.where(valid, loss_r, 0.0)
    z_r = np.where(valid, z_r, 0.0)
    g_loss = np.where(valid[:, None], g_loss, 0.0)
    g_z = np.where(valid[:, None], g_z, 0.0)

    pred = np.where(valid, np.argmax(xs, axis=1), -1)
    acc_r = np.where(valid & (pred == y), 1.0, 0.0)
    n_valid = valid.sum()

    if reduction == "none":
        loss = loss_r + z_r
        z = z_r
        acc = acc_r
        grad = g_loss + g_z
    elif reduction == "sum":
        loss = loss_r.sum() + z_r.sum()
        z = z_r.sum()
        acc = acc_r.sum() / n_valid if n_valid else np.nan
        grad = g_loss + g_z
    elif reduction == "mean":
        denom = n_valid if weight is None else wy[valid].sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = loss_r.sum() / denom + z_r.sum() / n_valid
            z = z_r.sum() / n_valid
            acc = acc_r.sum() / n_valid
            # Ignored rows have a zero gradient, even when no row is left.
            grad = (g_loss / denom + g_z / n_valid) if n_valid else np.zeros_like(g_loss)
    else:
        raise ValueError(reduction)

    if softcap is not None:
        grad = grad * (1.0 - t * t)
    return {
        "loss": loss,
        "z_loss": z,
        "token_accuracy": acc,
        "predicted": pred,
        "lse": np.where(valid, lse, 0.0),
        "grad": grad,
    }
