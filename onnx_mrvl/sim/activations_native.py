"""Sigmoid and SiLU in one native pass (``_native_act.c``) instead of numpy's eight.

The C code repeats ``activations.sigmoid``'s numpy steps with numpy's own float32 exp (the
algorithm np.exp runs on AVX2 + FMA3 / AVX-512F hosts), so its results are the same bits. That is
checked once per process against numpy on values covering every branch (NaN, +-inf, +-0, the
overflow and underflow bounds, the denormal results, random values); where any bit differs (another
numpy, another CPU path) the library is not used and numpy computes, as before. YOLO-style models
(SiLU after every conv) spent ~45% of a run in numpy's sigmoid.
"""
from __future__ import annotations

import ctypes
import logging
import os

import numpy as np

from . import native, parallel
from .native_loader import OnceLibrary

log = logging.getLogger(__name__)

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_act.c")
MIN_SIZE = 512          # below this, the ctypes call costs about what numpy's passes do


def _probe() -> np.ndarray:
    """float32 values reaching every branch of the exp and of the sigmoid's select."""
    f = np.float32
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72283935546875, -88.72283935546875,
                        88.72284, 103.97208404541015625, -103.97208404541015625, 103.9721, 87.33655,
                        -87.33655, 86.5, 100.0, 1e-45, -1e-45, 1e-38, np.finfo(f).max, -np.finfo(f).max,
                        0.5, -0.5, 1.0, -1.0, 6.0, -6.0], f)
    nan_bits = np.array([0xFFC00000, 0x7FC00001, 0xFF812345], np.uint32).view(f)
    rng = np.random.default_rng(0)
    return np.concatenate([special, nan_bits, np.linspace(-110, 110, 44001, dtype=f),
                           (rng.standard_normal(20000) * 8).astype(f), (rng.standard_normal(3) * 50).astype(f)])


def _load() -> ctypes.CDLL:
    so = native.load_on_pool(_SRC, "act_set_runner")
    so.act_sigmoid.restype = None
    so.act_sigmoid.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    so.act_post.restype = ctypes.c_int
    so.act_post.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    from .activations import numpy_sigmoid, numpy_silu
    x = _probe()
    with np.errstate(all="ignore"):
        for flag, ref in ((0, numpy_sigmoid), (1, numpy_silu)):
            want, got = ref(x.copy()), x.copy()
            so.act_sigmoid(got.ctypes.data, got.size, flag, 1)
            if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
                bad = int(np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))[0])
                raise RuntimeError(f"its {'silu' if flag else 'sigmoid'} differs from numpy's at x = {x[bad]!r} "
                                   f"({got[bad]!r} against {want[bad]!r})")
    return so


_LIBRARY = OnceLibrary(_load, "native sigmoid", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason


def apply_(x: np.ndarray, silu: bool) -> bool:
    """Sigmoid (or SiLU) of the float32 array ``x`` in place when the native pass takes it
    (C-contiguous, writeable, at least ``MIN_SIZE`` values); False: the caller computes it."""
    if x.dtype != np.float32 or x.size < MIN_SIZE or not x.flags.c_contiguous or not x.flags.writeable:
        return False
    so = lib()
    if so is None:
        return False
    so.act_sigmoid(x.ctypes.data, x.size, int(silu), parallel.workers())
    return True


def post_record(fn) -> tuple:
    """``(act_post's address, silu)`` when the static plan's native step can finish the activation
    ``fn`` (activations.sigmoid / silu) itself -- the activation, the fp16 rounding and the
    finiteness test in one pass after the kernel, no Python step between convs -- else ()."""
    from . import activations
    if fn is not activations.sigmoid and fn is not activations.silu:
        return ()
    so = lib()
    if so is None:
        return ()
    return ctypes.cast(so.act_post, ctypes.c_void_p).value, int(fn is activations.silu)
