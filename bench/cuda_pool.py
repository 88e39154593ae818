"""The CUDA device's default stream-ordered memory pool, read through the driver: where
cudaMallocAsync without a pool of its own takes memory (xent's workspace when a caller gives
none). A framework's own allocator (XLA's, torch's) does not draw from it, so their peak
misses what was taken here."""

from __future__ import annotations

import ctypes
from typing import Optional

_USED_MEM_HIGH = 8  # CU_MEMPOOL_ATTR_USED_MEM_HIGH


def default_pool_high_water(reset: bool = False, device: int = 0) -> Optional[int]:
    """The pool's high-water mark in bytes (set back to 0 first when `reset`), or None where
    there is no CUDA driver or it refused a call."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, pool, v = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64(0)
    if (cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), device)
            or cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev)):
        return None
    if reset and cu.cuMemPoolSetAttribute(pool, _USED_MEM_HIGH, ctypes.byref(v)):
        return None
    if cu.cuMemPoolGetAttribute(pool, _USED_MEM_HIGH, ctypes.byref(v)):
        return None
    return v.value
