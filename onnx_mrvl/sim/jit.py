"""Compiled (numba) forms of the simulator's memory-bound kernels; numpy stays the fallback.

The GEMMs already run in BLAS; what numpy does slowly is everything around them, because each
step is a separate pass over memory: the conv epilogue (bias, scale, shift, activation, fp16
rounding, the finiteness check: 8-10 passes in numpy), the depthwise conv, Sum2D / Mul2D and the
rounding of pooled values. Each kernel here is one pass, compiled with ``nogil`` so the row-block
thread pool (``parallel.py``) runs them on all cores.

Numerics are those of the numpy kernels, operation for operation: ``((acc + bias) * scale) + shift``
in float32 without FMA contraction (numba's default, no fastmath), the same activation formulas,
then the same round-to-nearest-even to fp16 (``fp16.py``). The elementwise kernels therefore give
bit-identical results to the numpy path; the depthwise conv sums its taps in a fixed (row-major
tap) order, so it agrees with the numpy einsum to within float32 rounding before the fp16 rounding.

``on()`` says whether to use them: False with ``ONNX_MRVL_SIM_JIT=0`` or when numba is not
installed; it never imports numba. ``kernel(name)`` returns one compiled kernel, importing numba
and compiling (or loading from numba's on-disk cache, ``cache=True``) that kernel alone on its
first use, checked on tiny inputs; should that fail, the compiled path turns off for the process
(logged) and callers use the numpy kernels. So a run that the native kernels (``native.py``)
serve never imports numba, and a run without them compiles only the kernels its layers use
(the first run on a machine pays ~3-6 s per kernel; a notice is logged when it takes > 1 s).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time
from typing import Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from .activations import scalar_params

log = logging.getLogger(__name__)
notice = logging.getLogger("onnx_mrvl.notice")     # one-line notices the CLI shows on a terminal
F32 = np.float32

# Activation codes of the compiled kernels; -1: transcendental (sigmoid, tanh, silu, gelu, elu,
# mish), which the kernels leave unapplied and unrounded so numpy's vectorised exp / tanh finish them.
ACT_CODES = {"none": 0, "relu": 1, "clamp": 2, "leaky_relu": 3, "prelu": 4, "hard_sigmoid": 7,
             "hard_swish": 8, "sigmoid": -1, "tanh": -1, "silu": -1,
             "gelu": -1, "gelu_tanh": -1, "elu": -1, "mish": -1, "erf": -1, "softplus": -1, "sqrt": -1, "log": -1}

ENABLED = os.environ.get("ONNX_MRVL_SIM_JIT", "1").strip().lower() not in ("0", "false", "no", "off")
_WHY = "" if ENABLED else "disabled by ONNX_MRVL_SIM_JIT=0"
_kernels: Dict[str, Callable] = {}                    # compiled and checked, by name
_found: Optional[bool] = None                         # numba installed (import not attempted)


def why_disabled() -> str:
    """Empty when the compiled kernels are on, else the reason they are off."""
    return _WHY


def act_args(name: Optional[str], params: Optional[Mapping], slope, channels: int
             ) -> Tuple[int, np.float32, np.float32, np.ndarray]:
    """(code, p0, p1, per-channel slope) for the compiled kernels (code -1: the caller applies
    the activation and the fp16 rounding afterwards); see ``activations.py``."""
    name = (name or "none").lower()
    code = ACT_CODES[name]
    p0, p1 = scalar_params(name, params)
    sl = np.zeros(max(1, channels), F32)
    if name == "prelu":
        s = np.asarray(slope, dtype=F32).reshape(-1)
        if s.size not in (1, channels):
            raise ValueError(f"prelu slope has {s.size} values for {channels} channels")
        sl[:] = s
    return code, F32(p0), F32(p1), sl


def channel_vector(v, channels: int, fill: float) -> np.ndarray:
    """A contiguous float32 vector of length ``channels`` (``fill`` when ``v`` is None)."""
    if v is None:
        return np.full(channels, fill, F32)
    a = np.asarray(v, dtype=F32).reshape(-1)
    return np.ascontiguousarray(np.broadcast_to(a, (channels,)) if a.size == 1 else a)


def _check_epilogue(fn) -> None:
    c, one = np.zeros(4, F32), np.ones(4, F32)
    for code in (0, 1, 2, 3, -1):
        fn(np.ones((2, 4), F32), c, one, c, code, F32(0), F32(6), c)


def _check_binary(fn) -> None:
    c = np.zeros(4, F32)
    for code in (0, 1, 2, 3, -1):
        a = np.ones((1, 3, 4), F32)
        fn(a, a[:, :1], np.empty_like(a), code == 1, code, F32(0), F32(6), c)
        fn(a[:, 1:], a[:, 1:], np.empty_like(a[:, 1:]), False, code, F32(0), F32(6), c)


def _check_depthwise(fn) -> None:
    fn(np.ones((1, 3, 3, 4), F32), np.ones((3, 3, 4), F32), np.empty((1, 3, 3, 4), F32),
       0, 3, 1, 1, 1, 1, 1, 1)


def _check_round_flat(fn) -> None:
    fn(np.ones(4, F32))


# each kernel is compiled for the argument types of its real calls, on tiny inputs
_CHECKS = {"epilogue": _check_epilogue, "binary": _check_binary, "depthwise": _check_depthwise,
           "round_flat": _check_round_flat}
_lock = threading.Lock()


_noticed = False


def _notice_once() -> None:
    global _noticed
    if not _noticed:
        _noticed = True
        notice.info("compiling the simulator's numba kernels (first run on this machine, a few "
                    "seconds each; cached for later runs)...")


def on() -> bool:
    """True when the compiled kernels are to be used: enabled, numba installed, no kernel failed.
    Cheap, and numba is not imported: ``kernel(name)`` compiles each kernel on its first use."""
    global ENABLED, _WHY, _found
    if not ENABLED:
        return False
    if _found is None:
        _found = importlib.util.find_spec("numba") is not None
        if not _found:
            ENABLED, _WHY = False, "numba is not installed"
            log.debug("simulator JIT kernels off (%s); using the numpy kernels", _WHY)
    return ENABLED


def kernel(name: str) -> Optional[Callable]:
    """The compiled kernel ``name`` (epilogue, binary, depthwise, round_flat), or None when the
    compiled path is off. The first call imports numba and compiles (or loads from the cache)
    this kernel only, and checks it on tiny inputs; a failure turns the compiled path off."""
    global ENABLED, _WHY
    fn = _kernels.get(name) if ENABLED else None
    if fn is not None or not on():
        return fn
    with _lock:
        if name in _kernels or not ENABLED:
            return _kernels.get(name)
        t0 = time.perf_counter()
        slow = threading.Timer(1.0, _notice_once)       # a compile, not a cache hit: say why we wait
        slow.daemon = True
        slow.start()
        try:
            from . import _jit_kernels as kern              # imports numba (~0.5-1 s)
            fn = getattr(kern, name)
            _CHECKS[name](fn)
        except Exception as exc:  # noqa: BLE001 - any numba failure: fall back, never break a run
            ENABLED = False
            _WHY = f"{type(exc).__name__}: {exc}"
            log.log(logging.DEBUG if isinstance(exc, ImportError) else logging.WARNING,
                    "simulator JIT kernels off (%s); using the numpy kernels", _WHY)
            return None
        finally:
            slow.cancel()
        _kernels[name] = fn
        log.debug("numba kernel %s ready in %.2f s", name, time.perf_counter() - t0)
        return fn


def warm() -> bool:
    """Compile (or load from the cache) every kernel now, e.g. before timing; returns ``on()``."""
    for name in _CHECKS:
        kernel(name)
    return on()
