"""onnxruntime's LayerNormalization sums (``norm_ops._mean_f64_lanes`` / ``_lanes_fma_sum``) in C
(``_native_norm.c``): the numpy forms loop in Python over blocks of 4 / 8 columns (~100 numpy calls
a row set; an int8 MiniLM spent ~40% of its run there). The same operations in the same order, so
the same bits: checked once per process against the numpy forms on random rows of every
remainder length; where any bit differs numpy computes, as before."""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Optional

import numpy as np

from . import native
from .native_loader import OnceLibrary

log = logging.getLogger(__name__)
_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_norm.c")
F32 = np.float32


def _load() -> ctypes.CDLL:
    if not native.on():
        raise RuntimeError(native.why_disabled() or "native kernels off")
    so = ctypes.CDLL(native.build_shared(native.compiler(), _SRC))
    for fn in (so.ln_mean_f64_lanes, so.ln_lanes_fma_sum):
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p]
    from .norm_ops import numpy_lanes_fma_sum, numpy_mean_f64_lanes
    rng = np.random.default_rng(0)
    for n in (1, 3, 4, 7, 8, 12, 13, 31, 384, 1027):
        x = (rng.standard_normal((5, n)) * 10 ** rng.uniform(-3, 3, (5, 1))).astype(F32)
        x[0, 0] = 0.0
        for name, ref in (("ln_mean_f64_lanes", numpy_mean_f64_lanes), ("ln_lanes_fma_sum", numpy_lanes_fma_sum)):
            got = _call(so, name, x)
            if not np.array_equal(got.view(np.uint32), ref(x).view(np.uint32)):
                raise RuntimeError(f"its {name} differs from numpy's on rows of {n}")
    return so


def _call(so, name: str, x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape[0], F32)
    getattr(so, name)(x.ctypes.data, x.shape[0], x.shape[1], out.ctypes.data)
    return out


_LIBRARY = OnceLibrary(_load, "native LayerNorm sums", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason


def row_sums(name: str, x: np.ndarray) -> Optional[np.ndarray]:
    """``ln_mean_f64_lanes`` / ``ln_lanes_fma_sum`` of the float32 rows ``x`` [rows, n], or None
    (no library, or rows it cannot take: the caller's numpy form computes them)."""
    if x.dtype != F32 or x.ndim != 2 or not x.flags.c_contiguous or x.shape[1] == 0 or not native.on():
        return None                     # (native kernels off: not tried, so not remembered as failed)
    so = lib()
    return None if so is None else _call(so, name, x)
