"""onnxruntime's LayerNormalization sums (``norm_ops._mean_f64_lanes`` / ``_lanes_fma_sum``) and the
whole of both LayerNorm kernels (``norm_ops.numpy_layernorm`` / ``numpy_layernorm_onnxruntime``,
over the last axis) in C (``_native_norm.c``): the numpy forms loop in Python over blocks of 4 / 8
columns (~100 numpy calls a row set; an int8 MiniLM spent ~40% of its run there), or make ~12 passes
a call. The same operations in the same order, so the same bits: checked once per process against
the numpy forms on random rows of every remainder length; where any bit differs numpy computes, as
before."""
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
MIN_SIZE = 256          # values from which layernorm_rows runs natively (a ctypes call costs ~2 numpy passes)


def _load() -> ctypes.CDLL:
    if not native.on():
        raise RuntimeError(native.why_disabled() or "native kernels off")
    so = ctypes.CDLL(native.build_shared(native.compiler(), _SRC))
    for fn in (so.ln_mean_f64_lanes, so.ln_lanes_fma_sum):
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p]
    for fn in (so.ln_ort_rows, so.ln_numpy_rows):
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_float] + [ctypes.c_void_p] * 3
    from .norm_ops import numpy_lanes_fma_sum, numpy_layernorm, numpy_layernorm_onnxruntime, numpy_mean_f64_lanes
    rng = np.random.default_rng(0)
    for n in (1, 3, 4, 7, 8, 9, 12, 13, 16, 31, 100, 128, 129, 136, 200, 384, 385, 768, 1027):
        x = (rng.standard_normal((5, n)) * 10 ** rng.uniform(-3, 3, (5, 1)) + rng.uniform(-2, 2, (5, 1))).astype(F32)
        x[0, 0] = 0.0
        x[1] = x[1, 0]                                          # a constant row: variance 0
        for name, ref in (("ln_mean_f64_lanes", numpy_mean_f64_lanes), ("ln_lanes_fma_sum", numpy_lanes_fma_sum)):
            got = _call(so, name, x)
            if not np.array_equal(got.view(np.uint32), ref(x).view(np.uint32)):
                raise RuntimeError(f"its {name} differs from numpy's on rows of {n}")
        g = (rng.standard_normal(n) * 2).astype(F32)
        for b in (None, rng.standard_normal(n).astype(F32)):
            for eps in (1e-5, 1e-12):
                checks = [("ln_numpy_rows", numpy_layernorm(x, -1, eps, g, b))]
                if n >= 8:
                    checks.append(("ln_ort_rows", numpy_layernorm_onnxruntime(x, -1, eps, g, b, pure=True)))
                for name, want in checks:
                    if not same_values(_rows(so, name, x, eps, g, b), want):
                        raise RuntimeError(f"its {name} differs from numpy's on rows of {n}")
    return so


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bits, NaN payloads aside (a NaN fails the run either way)."""
    na, nb = np.isnan(a), np.isnan(b)
    return a.shape == b.shape and np.array_equal(na, nb) and np.array_equal(a[~na].view(np.uint32), b[~nb].view(np.uint32))


def _rows(so, name: str, x: np.ndarray, eps: float, g: np.ndarray, b) -> np.ndarray:
    out = np.empty(x.shape, F32)
    getattr(so, name)(native.address(x), x.size // x.shape[-1], x.shape[-1], eps, native.address(g),
                      None if b is None else native.address(b), native.address(out))
    return out


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


def layernorm_rows(name: str, x: np.ndarray, axis: int, eps: float, gamma, beta) -> Optional[np.ndarray]:
    """``ln_ort_rows`` / ``ln_numpy_rows`` (norm_ops' two LayerNorm kernels, not rms) of ``x`` over
    its last axis, unrounded, or None (no library, another axis or layout: numpy computes it)."""
    if (x.dtype != F32 or not x.flags.c_contiguous or axis not in (-1, x.ndim - 1) or x.size < MIN_SIZE
            or not native.on()):
        return None
    so = lib()
    g = np.asarray(gamma, F32).reshape(-1)
    b = None if beta is None else np.ascontiguousarray(beta, F32).reshape(-1)
    if so is None or g.size != x.shape[-1] or (b is not None and b.size != g.size):
        return None
    return _rows(so, name, x, eps, np.ascontiguousarray(g), b)
