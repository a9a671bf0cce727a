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

``on()`` says whether to use them: False with ``ONNX_MRVL_SIM_JIT=0`` or when numba cannot be
imported (numba is only imported on the first ``on()`` / ``warm()``); callers then use the numpy
kernels. Compiled code is cached on disk (numba ``cache=True``), so only the first run
on a machine pays the compile (~20 s for all kernels); ``warm()`` (called by every ``Simulator``)
compiles or loads them once per process on tiny inputs and, should that fail, turns them off.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Mapping, Optional, Tuple

import numpy as np

from .activations import scalar_params

log = logging.getLogger(__name__)
F32 = np.float32

# Activation codes of the compiled kernels; -1: transcendental (sigmoid, tanh, silu, gelu, elu,
# mish), which the kernels leave unapplied and unrounded so numpy's vectorised exp / tanh finish them.
ACT_CODES = {"none": 0, "relu": 1, "clamp": 2, "leaky_relu": 3, "prelu": 4, "hard_sigmoid": 7,
             "hard_swish": 8, "sigmoid": -1, "tanh": -1, "silu": -1,
             "gelu": -1, "gelu_tanh": -1, "elu": -1, "mish": -1}

ENABLED = os.environ.get("ONNX_MRVL_SIM_JIT", "1").strip().lower() not in ("0", "false", "no", "off")
_WHY = "" if ENABLED else "disabled by ONNX_MRVL_SIM_JIT=0"
epilogue = round_flat = binary = depthwise = None     # the kernels, bound by warm()


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


_warm_lock = threading.Lock()
_warmed = False


def on() -> bool:
    """True when the compiled kernels are to be used (warming them up on the first call)."""
    return ENABLED and (_warmed or warm())


def warm() -> bool:
    """Compile (or load from the cache) every kernel once, on tiny inputs; on any failure switch
    the compiled path off for the process (logged) so the numpy kernels take over. Returns ENABLED."""
    global ENABLED, _WHY, _warmed
    with _warm_lock:
        if _warmed or not ENABLED:
            return ENABLED
        _warmed = True
        global epilogue, round_flat, binary, depthwise
        try:
            from . import _jit_kernels as kern
            epilogue, round_flat, binary, depthwise = kern.epilogue, kern.round_flat, kern.binary, kern.depthwise
            c = np.zeros(4, F32)
            one = np.ones(4, F32)
            for code in (0, 1, 2, 3, -1):
                y = np.ones((2, 4), F32)
                epilogue(y, c, one, c, code, F32(0), F32(6), c)
                a = np.ones((1, 3, 4), F32)
                binary(a, a[:, :1], np.empty_like(a), code == 1, code, F32(0), F32(6), c)
                binary(a[:, 1:], a[:, 1:], np.empty_like(a[:, 1:]), False, code, F32(0), F32(6), c)
            depthwise(np.ones((1, 3, 3, 4), F32), np.ones((3, 3, 4), F32), np.empty((1, 3, 3, 4), F32),
                      0, 3, 1, 1, 1, 1, 1, 1)
            round_flat(np.ones(4, F32))
        except Exception as exc:  # noqa: BLE001 - any numba failure: fall back, never break a run
            ENABLED = False
            _WHY = f"{type(exc).__name__}: {exc}"
            log.log(logging.DEBUG if isinstance(exc, ImportError) else logging.WARNING,
                    "simulator JIT kernels off (%s); using the numpy kernels", _WHY)
        return ENABLED
