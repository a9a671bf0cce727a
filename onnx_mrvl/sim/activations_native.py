"""Sigmoid, SiLU and GELU in one native pass (``_native_act.c``) instead of numpy's eight to thirty.

The C code repeats the numpy steps of ``activations.numpy_sigmoid`` / ``numpy_silu`` and
``activations_smooth.numpy_gelu`` with numpy's own float32 exp (the algorithm np.exp runs on
AVX2 + FMA3 / AVX-512F hosts), so its results are the same bits. That is checked once per process,
function by function, against numpy on values covering every branch (NaN payloads, +-inf, +-0, the
exp's overflow and underflow bounds, its denormal results, random values); a function whose bits
differ anywhere (another numpy, another CPU path) is not used and numpy computes it, as before.
YOLO-style models (SiLU after every conv) spent ~45% of a run in numpy's sigmoid, BERT-style
encoders ~20% in numpy's GELU.
"""
from __future__ import annotations

import ctypes
import logging
import os
from typing import Dict

import numpy as np

from . import native, parallel
from .native_loader import OnceLibrary

log = logging.getLogger(__name__)

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native_act.c")
MIN_SIZE = 16           # from here the native pass (one ctypes call, ~2 us) beats numpy's 8-30 passes: a
                        # recurrent cell's gates (3 sigmoids a step of [B, H]) took 18 us each in numpy
KINDS = {"sigmoid": 0, "silu": 1, "gelu": 2, "softmax": -1}     # _native_act.c ACT_* (softmax: act_softmax)


def probe_values() -> np.ndarray:
    """float32 values reaching every branch of the exp, of the sigmoid's select and of the erfc fit."""
    f = np.float32
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72283935546875, -88.72283935546875,
                        88.72284, 103.97208404541015625, -103.97208404541015625, 103.9721, 87.33655,
                        -87.33655, 86.5, 100.0, 1e-45, -1e-45, 1e-38, np.finfo(f).max, -np.finfo(f).max,
                        0.5, -0.5, 1.0, -1.0, 6.0, -6.0, 13.0, -13.0, 14.5, -14.5, 1e19, -1e19], f)
    nan_bits = np.array([0xFFC00000, 0x7FC00001, 0xFF812345], np.uint32).view(f)
    rng = np.random.default_rng(0)
    return np.concatenate([special, nan_bits, np.linspace(-110, 110, 44001, dtype=f),
                           (rng.standard_normal(20000) * 8).astype(f), (rng.standard_normal(3) * 50).astype(f)])


def _numpy_refs() -> Dict[str, object]:
    from .activations import numpy_sigmoid, numpy_silu
    from .activations_smooth import numpy_gelu
    return {"sigmoid": numpy_sigmoid, "silu": numpy_silu, "gelu": numpy_gelu}


def _load():
    so = native.load_on_pool(_SRC, "act_set_runner")
    so.act_apply.restype = None
    so.act_apply.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    so.act_post.restype = ctypes.c_int
    so.act_post.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int, ctypes.c_int]
    x, same = probe_values(), {}
    with np.errstate(all="ignore"):
        for name, ref in _numpy_refs().items():
            same[name] = True
            # the whole probe, and short arrays (numpy's tails are whole vectors of them)
            for part in [x] + [x[7 * n:8 * n] for n in (MIN_SIZE, 17, 23, 31, 40, 64, 100)]:
                want, got = ref(part.copy()), part.copy()
                so.act_apply(got.ctypes.data, got.size, KINDS[name], 1)
                if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
                    bad = int(np.flatnonzero(want.view(np.uint32) != got.view(np.uint32))[0])
                    log.info("native %s not used: it differs from numpy's at x = %r (%r against %r, %d values)",
                             name, part[bad], got[bad], want[bad], part.size)
                    same[name] = False
                    break
    so.act_softmax.restype = ctypes.c_int
    so.act_softmax.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    same["softmax"] = _softmax_same(so)
    if not any(same.values()):
        raise RuntimeError("no activation gives numpy's bits")
    so.same_bits = same
    return so


def _softmax_same(so) -> bool:
    """act_softmax against norm_ops.softmax over the last axis, for row lengths of every pairwise-sum
    branch, on the probe's values (infinities and NaN: the same NaN places, payloads aside -- a NaN
    fails the run either way) and on an fp16-range row set: the same bits and finiteness answer."""
    from .norm_ops import softmax
    f, probe = np.float32, probe_values()
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 128, 129, 300, 1000):
        rows = -(-probe.size // n)
        for x in (np.resize(probe, (rows, n)), (rng.standard_normal((64, n)) * 3000).astype(f)):
            x[0] = -np.inf
            with np.errstate(all="ignore"):
                want, ok_w = softmax(x, -1)
            got = np.empty_like(x)
            ok = so.act_softmax(x.ctypes.data, got.ctypes.data, x.shape[0], n, 1)
            nan = np.isnan(want)
            if bool(ok) != ok_w or not np.array_equal(nan, np.isnan(got)) \
                    or not np.array_equal(want.view(np.uint32)[~nan], got.view(np.uint32)[~nan]):
                log.info("native softmax not used: it differs from numpy's on rows of %d", n)
                return False
    return True


def softmax_address():
    """act_softmax's address when it gives norm_ops.softmax's bits here (a run_steps record: kind 13,
    static_records.py), else None."""
    k = _kind("softmax")
    return None if k is None else ctypes.cast(k[0].act_softmax, ctypes.c_void_p).value


_LIBRARY = OnceLibrary(_load, "native activations", "numpy", log)
lib, why_disabled = _LIBRARY.get, _LIBRARY.reason


def _kind(name: str):
    """The library and the C kind of activation ``name`` when it gives numpy's bits here, else None
    (also while the native kernels are off: numpy then, and the library is not tried -- a failed
    load is remembered for the process)."""
    if not native.on():
        return None
    so = lib()
    if so is None or not so.same_bits.get(name):
        return None
    return so, KINDS[name]


def apply_(x: np.ndarray, name: str) -> bool:
    """Activation ``name`` (sigmoid, silu, gelu) of the float32 array ``x`` in place when the native
    pass takes it (C-contiguous, writeable, at least ``MIN_SIZE`` values); False: the caller
    computes it."""
    if x.dtype != np.float32 or x.size < MIN_SIZE or not x.flags.c_contiguous or not x.flags.writeable:
        return False
    k = _kind(name)
    if k is None:
        return False
    k[0].act_apply(native.address(x), x.size, k[1], parallel.workers())
    return True


def post_record(fn) -> tuple:
    """``(act_post's address, kind)`` when the static plan's native step can finish the activation
    ``fn`` (activations.sigmoid / silu, activations_smooth.gelu) itself -- the activation, the
    fp16 rounding and the finiteness test in one pass after the kernel, no Python step between
    layers -- else ()."""
    from . import activations, activations_smooth
    name = {activations.sigmoid: "sigmoid", activations.silu: "silu", activations_smooth.gelu: "gelu"}.get(fn)
    k = _kind(name) if name else None
    if k is None:
        return ()
    return ctypes.cast(k[0].act_post, ctypes.c_void_p).value, k[1]
