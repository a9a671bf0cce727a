"""The conv / FC epilogue: ``y = act(((acc + bias) * scale) + shift)`` on a float32 [rows, channels]
block, in place, then RNE to fp16 (docs/simulator.md); one compiled pass when ``jit.on()``, numpy
otherwise. ``Conv2D`` (kernels.py) and ``FC`` (fc.py) share it."""
from __future__ import annotations

from typing import Callable, Mapping, Optional

import numpy as np

from . import jit
from .activations import make_activation
from .fp16 import round_fp16_

F32 = np.float32
_EPILOGUE_ROW = 256          # compiled epilogue: rows of at least this many values


def _f32(w) -> Optional[np.ndarray]:
    if w is None:
        return None
    return np.ascontiguousarray(np.asarray(w, dtype=F32).reshape(-1))


def make_epilogue(channels: int, bias, scale, shift, activation: str = "none",
              activation_params: Optional[Mapping] = None, slope=None) -> Callable[[np.ndarray], bool]:
    """y = act(((acc + bias) * scale) + shift), in place on a float32 [rows, channels] block, then
    RNE to fp16; returns whether every value is finite. One compiled pass when ``jit.on()``."""
    act = make_activation(activation, activation_params, slope)     # validates name and params
    if jit.on():
        code, p0, p1, sl = jit.act_args(activation, activation_params, slope, channels)
        vecs = (jit.channel_vector(bias, channels, 0.0), jit.channel_vector(scale, channels, 1.0),
                jit.channel_vector(shift, channels, 0.0))
        reps = max(1, _EPILOGUE_ROW // channels)
        tiled = tuple(np.tile(v, reps) for v in vecs) + (np.tile(sl, reps),)
        width = channels * reps

        plain = _numpy_epilogue(act, bias, scale, shift)

        def compiled(y: np.ndarray) -> bool:
            epilogue = jit.kernel("epilogue")          # compiled on the first call, None if off
            if epilogue is None:
                return plain(y)
            # few channels: run over rows of ``width`` values (vectors tiled) so the loop is long
            flat = y.reshape(-1)
            full = flat.size - flat.size % width if reps > 1 else 0
            ok = True
            if full:
                ok = epilogue(flat[:full].reshape(-1, width), *tiled[:3], code, p0, p1, tiled[3])
            if full < flat.size:
                ok = epilogue(flat[full:].reshape(-1, channels), *vecs, code, p0, p1, sl) and ok
            if code >= 0:
                return bool(ok)
            r = act(y)                       # transcendental activation: numpy finishes it
            if r is not y:
                y[...] = r
            return round_fp16_(y)
        return compiled
    return _numpy_epilogue(act, bias, scale, shift)


def _numpy_epilogue(act, bias, scale, shift) -> Callable[[np.ndarray], bool]:
    bias, scale, shift = _f32(bias), _f32(scale), _f32(shift)

    def run(y: np.ndarray) -> bool:
        if bias is not None:
            y += bias
        if scale is not None:
            y *= scale
        if shift is not None:
            y += shift
        if act is not None:
            r = act(y)
            if r is not y:
                y[...] = r
        return round_fp16_(y)
    return run
