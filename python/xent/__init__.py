"""xent: fused cross-entropy loss for language models.

Entry points:

- :mod:`xent.torch` -- ``CrossEntropyLoss`` and ``cross_entropy`` for PyTorch
  tensors (CPU and CUDA), with autograd and ``torch.compile`` support, and the
  fused linear loss ``FusedLinearCrossEntropyLoss``; :mod:`xent.torch.parallel`
  the vocabulary-parallel loss over torch.distributed;
- :mod:`xent.transformers` -- ``apply_xent``: both losses under Hugging Face
  causal LMs (Trainer, TRL);
- :mod:`xent.numpy` -- ``cross_entropy`` for NumPy arrays on the CPU backend,
  for users without torch.

Both call the C library ``libxent.so`` through ctypes (:mod:`xent._lib`).
Errors of the C library raise :class:`XentError`.
"""

from __future__ import annotations

import importlib

from ._lib import XentError, XentRuntimeError, XentValueError

__version__ = "0.1.0"
__all__ = [
    "XentError",
    "XentValueError",
    "XentRuntimeError",
    "__version__",
    "library_version",
    "info",
    "device_info",
    "cuda_available",
    "library_path",
]


def library_version() -> str:
    """The version string of the loaded C library, e.g. "0.1.0"."""
    from . import _lib

    return _lib.version()


def library_path() -> str:
    """The file the C library is (or will be) loaded from."""
    from . import _lib

    return _lib.library_path()


def info() -> dict:
    """What the loaded C library supports (xent_get_info) as a dict."""
    from . import _lib

    i = _lib.get_info()
    return {name: getattr(i, name) for name, _ in i._fields_}


def device_info(device: int = 0) -> dict:
    """Properties of CUDA device `device` (xent_get_device_info) as a dict."""
    from . import _lib

    d = _lib.get_device_info(device)
    out = {name: getattr(d, name) for name, _ in d._fields_}
    out["name"] = d.name.decode("utf-8", "replace")
    return out


def cuda_available() -> bool:
    """True when the library has its CUDA backend and the driver sees a GPU."""
    i = info()
    return bool(i["cuda_built"]) and i["cuda_devices"] > 0


def __getattr__(name: str):
    # `xent.torch` and `xent.numpy` load on first use: torch is optional.
    if name in ("torch", "numpy"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
