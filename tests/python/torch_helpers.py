"""Torch-side helpers: devices, dtypes, conversions. Imported only where torch is."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xent

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def cuda_skip_reason():
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    if not xent.info()["cuda_built"]:
        return "libxent was built without its CUDA backend"
    return None


_REASON = cuda_skip_reason()
CUDA = pytest.param("cuda", marks=pytest.mark.skipif(_REASON is not None, reason=_REASON or ""))
DEVICES = ["cpu", CUDA]
requires_cuda = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def tensor(a, dtype, device):
    """A fresh torch tensor of `dtype` on `device` from a float32 NumPy array
    (never sharing memory with `a`: xent writes gradients over its input)."""
    return torch.tensor(np.asarray(a), device=device).to(dtype)


def f64(t) -> np.ndarray:
    """The exact values of a tensor, as float64 NumPy."""
    return t.detach().to("cpu", torch.float64).numpy()


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()
