"""LayerNorm and Softmax over one axis of a stored tensor: fp32 math on fp16 values, one fp16
rounding of the result (docs/simulator.md, "Numeric model").

    LayerNorm  mean and variance in fp32 (two passes: mean, then mean((x - mean)^2)), then
               y = (x - mean) * (1 / sqrt(var + eps)) * gamma + beta   (gamma, beta fp32 vectors)
               ``rms``: the mean is 0 (RMSNorm: y = x * (1 / sqrt(mean(x^2) + eps)) * gamma [+ beta])
    Softmax    y = exp(x - max) * (1 / sum(exp(x - max)))
    LogSoftmax y = (x - max) - log(sum(exp(x - max)))   (the Softmax layer with log = 1)
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .fp16 import round_fp16_

F32 = np.float32


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A 1-D vector shaped to broadcast along the negative ``axis`` of an ``ndim``-D tensor."""
    return v.reshape((-1,) + (1,) * (-axis - 1)) if -axis - 1 else v


def layernorm(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
              beta: Optional[np.ndarray] = None, fp16: bool = True, rms: bool = False) -> Tuple[np.ndarray, bool]:
    """``fp16`` False: the fp32 result, unrounded (an int8_out layer quantizes it); ``rms``: no mean
    subtracted (RMSNorm)."""
    axis = axis - x.ndim if axis >= 0 else axis
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        d = x.copy() if rms else x - np.mean(x, axis=axis, keepdims=True, dtype=F32)
        var = np.mean(d * d, axis=axis, keepdims=True, dtype=F32)
        var += F32(epsilon)
        r = F32(1) / np.sqrt(var)
        d *= r
        d *= _along(np.asarray(gamma, F32), axis, x.ndim)
        if beta is not None:
            d += _along(np.asarray(beta, F32), axis, x.ndim)
    return d, (round_fp16_(d) if fp16 else bool(np.isfinite(d).all()))


def layernorm_onnxruntime(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
                          beta: Optional[np.ndarray] = None, rms: bool = False) -> Tuple[np.ndarray, bool]:
    """onnxruntime 1.32's fp32 LayerNormalization kernel as measured (an int8_out LayerNorm
    quantizes this, as onnxruntime quantizes its kernel's result between DQ and Q): the mean summed
    in float64 and rounded to fp32 (bit-exact), ``d = x - mean`` in fp32, the variance of ``d`` in
    float64, ``r = 1 / sqrt(fp32(var + eps))`` (matches its inverse std in ~85% of rows, else one
    ulp apart), ``y = d * r`` in fp32 and ``y * gamma + beta`` with one rounding (an FMA; bit-exact
    given its mean and inverse std). The fp32 result, unrounded. ``rms``: the mean is 0 (RMSNorm,
    the same arithmetic otherwise)."""
    axis = axis - x.ndim if axis >= 0 else axis
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        d = x if rms else x - np.mean(x, axis=axis, keepdims=True, dtype=np.float64).astype(F32)
        var = np.mean(np.square(d, dtype=np.float64), axis=axis, keepdims=True)
        r = (1.0 / np.sqrt((var + np.float64(F32(epsilon))).astype(F32)).astype(np.float64)).astype(F32)
        y = (d * r).astype(np.float64) * _along(np.asarray(gamma, F32), axis, x.ndim)
        if beta is not None:
            y += _along(np.asarray(beta, F32), axis, x.ndim)
        y = y.astype(F32)
    return y, bool(np.isfinite(y).all())


def softmax(x: np.ndarray, axis: int, nan_fill: Optional[float] = None) -> Tuple[np.ndarray, bool]:
    """``nan_fill``: that value where the result is NaN (a row of -inf, or holding NaN / +inf)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        e = x - np.max(x, axis=axis, keepdims=True)
        np.exp(e, out=e)
        s = np.sum(e, axis=axis, keepdims=True, dtype=F32)
        e *= F32(1) / s
    if nan_fill is not None:
        np.copyto(e, F32(nan_fill), where=np.isnan(e))
    return e, round_fp16_(e)


def log_softmax(x: np.ndarray, axis: int) -> Tuple[np.ndarray, bool]:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        d = x - np.max(x, axis=axis, keepdims=True)
        s = np.sum(np.exp(d), axis=axis, keepdims=True, dtype=F32)
        d -= np.log(s)
    return d, round_fp16_(d)
