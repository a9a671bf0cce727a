"""The ``LRN`` program layer (docs/program.md): local response normalization across the channels of
an NHWC tensor, fp32 math on the fp16 values it reads, one fp16 rounding of the result
(docs/simulator.md, "Numeric model"):

    sq  = x * x                                          (fp32; exact for fp16 x)
    s   = sum of sq over the window [c - lo, c + hi]     (fp32, lo = (size - 1) // 2, hi = size - 1 - lo,
                                                          clipped to the channels: a sliding sum along C)
    d   = bias + (alpha / size) * s                      (fp32)
    y   = x * exp(-beta * log(d))                        (fp32; d >= bias > 0), rounded to fp16 once

Non-finite results (an fp16 overflow) come back as ``finite`` False: the simulator fails closed.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

from .fp16 import round_fp16_

F32 = np.float32


def window_sum(sq: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``sq`` over each channel's LRN window along the last axis (fp32, zeros outside C)."""
    c = sq.shape[-1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    s = sq.copy()
    for off in range(1, max(lo, hi) + 1):
        if off >= c:
            break
        if off <= hi:       # channel c reads c + off
            s[..., :c - off] += sq[..., off:]
        if off <= lo:       # channel c reads c - off
            s[..., off:] += sq[..., :c - off]
    return s


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> Tuple[np.ndarray, bool]:
    """(y, finite) of an NHWC ``x`` (channels last); see the module docstring."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        d = window_sum(x * x, int(size))
        d *= F32(float(alpha) / int(size))
        d += F32(bias)
        np.log(d, out=d)
        d *= F32(-float(beta))
        np.exp(d, out=d)
        d *= x
    return d, round_fp16_(d)


def build_lrn(spec, n_inputs: int):
    """The prepared closure of an ``LRN`` layer (sim/layers.py); params size, alpha, beta, bias."""
    if n_inputs != 1:
        raise spec.error(f"takes 1 input, the program gives {n_inputs}")
    try:
        size = int(spec.param("size", required=True))
        alpha, beta, bias = (float(spec.param(k, required=True)) for k in ("alpha", "beta", "bias"))
    except (TypeError, ValueError):
        raise spec.error(f"size, alpha, beta and bias must be numbers, got {spec.params}") from None
    if size < 1 or not (np.isfinite([alpha, beta, bias]).all() and bias > 0 and alpha >= 0):
        raise spec.error(f"size {size} / alpha {alpha} / beta {beta} / bias {bias}: needs size >= 1, "
                         f"bias > 0, alpha >= 0, finite values")

    def run(x):
        if x.ndim != 4:
            raise ValueError(f"LRN needs a 4-D NHWC input, got shape {list(x.shape)}")
        return lrn(x, size, alpha, beta, bias)
    return run
