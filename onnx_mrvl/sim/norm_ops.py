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
from .norm_native import layernorm_rows, row_sums

F32 = np.float32


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """A 1-D vector shaped to broadcast along the negative ``axis`` of an ``ndim``-D tensor."""
    return v.reshape((-1,) + (1,) * (-axis - 1)) if -axis - 1 else v


def layernorm(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
              beta: Optional[np.ndarray] = None, fp16: bool = True, rms: bool = False) -> Tuple[np.ndarray, bool]:
    """``fp16`` False: the fp32 result, unrounded (an int8_out layer quantizes it); ``rms``: no mean
    subtracted (RMSNorm)."""
    axis = axis - x.ndim if axis >= 0 else axis
    d = None if rms else layernorm_rows("ln_numpy_rows", x, axis, epsilon, gamma, beta)
    if d is None:
        d = numpy_layernorm(x, axis, epsilon, gamma, beta, rms)
    return d, (round_fp16_(d) if fp16 else bool(np.isfinite(d).all()))


def numpy_layernorm(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
                    beta: Optional[np.ndarray] = None, rms: bool = False) -> np.ndarray:
    """``layernorm``'s fp32 result in numpy (norm_native's ``ln_numpy_rows`` gives the same bits)."""
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
    return d


def _lanes_fma_sum(d: np.ndarray) -> np.ndarray:
    """``numpy_lanes_fma_sum`` in C where it gives the same bits (norm_native.py)."""
    v = row_sums("ln_lanes_fma_sum", d)
    return numpy_lanes_fma_sum(d) if v is None else v


def _mean_f64_lanes(x: np.ndarray) -> np.ndarray:
    """``numpy_mean_f64_lanes`` in C where it gives the same bits (norm_native.py)."""
    v = row_sums("ln_mean_f64_lanes", x)
    return numpy_mean_f64_lanes(x) if v is None else v


def numpy_lanes_fma_sum(d: np.ndarray) -> np.ndarray:
    """Sum of ``d * d`` over the last axis as onnxruntime's AVX2 LayerNorm kernel forms it: 8 fp32
    lanes (lane k takes the elements i = k mod 8 of the whole blocks of 8), each ``acc = fma(d, d,
    acc)``; lanes folded ``(a[0:4] + a[4:8])``, then ``(b0 + b2, b1 + b3)``, then ``c0 + c1``; the
    remainder (< 8 elements): a block of 4 (when there are 4) as fp32 products added one by one,
    then fma per element."""
    rows, n = d.shape
    n8 = n // 8 * 8
    dd = d.astype(np.float64)
    acc = np.zeros((rows, 8), F32)
    for j in range(0, n8, 8):
        acc = (dd[:, j:j + 8] * dd[:, j:j + 8] + acc).astype(F32)   # fma: exact product, one rounding
    h4 = acc[:, 4:] + acc[:, :4]
    h2 = h4[:, 2:] + h4[:, :2]
    v = h2[:, 0] + h2[:, 1]
    i = n8
    if n - i >= 4:
        p = d[:, i:i + 4] * d[:, i:i + 4]
        for k in range(4):
            v = v + p[:, k]
        i += 4
    for k in range(i, n):
        v = (dd[:, k] * dd[:, k] + v).astype(F32)
    return v


def numpy_mean_f64_lanes(x: np.ndarray) -> np.ndarray:
    """The kernel's mean: float64 sums in 4 lanes over the whole blocks of 4 (lane k: i = k mod 4),
    folded ``(l0 + l2) + (l1 + l3)``, the remainder added in order, divided by n in float64, rounded
    to fp32."""
    rows, n = x.shape
    n4 = n // 4 * 4
    x64 = x.astype(np.float64)
    acc = np.zeros((rows, 4))
    for j in range(0, n4, 4):
        acc = acc + x64[:, j:j + 4]
    s = (acc[:, 0] + acc[:, 2]) + (acc[:, 1] + acc[:, 3])
    for k in range(n4, n):
        s = s + x64[:, k]
    return (s / np.float64(n)).astype(F32)


def layernorm_onnxruntime(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
                          beta: Optional[np.ndarray] = None, rms: bool = False) -> Tuple[np.ndarray, bool]:
    """``numpy_layernorm_onnxruntime`` and its finiteness; its kernel rows (8 or more, not rms) over
    the last axis in C (norm_native's ``ln_ort_rows``: the same bits)."""
    last = axis - x.ndim if axis >= 0 else axis
    y = None if rms or x.shape[last] < 8 else layernorm_rows("ln_ort_rows", x, last, epsilon, gamma, beta)
    if y is None:
        y = numpy_layernorm_onnxruntime(x, axis, epsilon, gamma, beta, rms)
    return y, bool(np.isfinite(y).all())


def numpy_layernorm_onnxruntime(x: np.ndarray, axis: int, epsilon: float, gamma: np.ndarray,
                                beta: Optional[np.ndarray] = None, rms: bool = False, pure: bool = False) -> np.ndarray:
    """onnxruntime 1.32's fp32 LayerNormalization kernel on x86 (its AVX2 kernel; an int8_out
    LayerNorm quantizes this, as onnxruntime quantizes its kernel's result between DQ and Q), bit for
    bit with its output, mean and inverse std (rows of 8 or more): ``mean`` in float64
    (``_mean_f64_lanes``) rounded to fp32, ``d = fp32(x - mean)``, ``v`` the 8-lane fma sum of
    ``d * d`` (``_lanes_fma_sum``), ``r = 1 / sqrt(v / n + eps)`` in fp32, ``y = fma(fp32(d * r),
    gamma, beta)``. ``rms`` (SimplifiedLayerNormalization / RMSNormalization, rows of 16 or more):
    no mean, ``y = fp32(x * r) * gamma`` (``+ beta`` after, when given). Shorter rows take another
    onnxruntime kernel: there the mean in float64, the variance of ``d`` in float64, ``r`` in fp32
    (an ulp off its own in some rows). The fp32 result, unrounded. ``pure``: the sums' numpy forms too
    (norm_native's check of its C kernel, inside the library's loading)."""
    axis = axis - x.ndim if axis >= 0 else axis
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        x = np.asarray(x, F32)
        n = x.shape[axis]
        rows = np.moveaxis(x, axis, -1)
        shape = rows.shape
        rows = rows.reshape(-1, n)
        g = np.asarray(gamma, F32).reshape(-1)
        b = None if beta is None else np.asarray(beta, F32).reshape(-1)
        kernel = n >= (16 if rms else 8)   # the AVX2 kernel's rows, as measured
        mean_sum, square_sum = (numpy_mean_f64_lanes, numpy_lanes_fma_sum) if pure else (_mean_f64_lanes, _lanes_fma_sum)
        d = rows if rms else rows - (mean_sum(rows) if kernel else
                                     np.mean(rows, axis=-1, dtype=np.float64).astype(F32))[:, None]
        if kernel:
            v = square_sum(d)
            r = F32(1) / np.sqrt(v / F32(n) + F32(epsilon))
        else:
            var = np.mean(np.square(d, dtype=np.float64), axis=-1)
            r = (1.0 / np.sqrt((var + np.float64(F32(epsilon))).astype(F32)).astype(np.float64)).astype(F32)
        y = d * r[:, None]
        if rms:
            y = y * g
            if b is not None:
                y = y + b
        else:
            y = (y.astype(np.float64) * g + (0.0 if b is None else b)).astype(F32)   # one rounding (an FMA)
        y = np.moveaxis(y.reshape(shape), -1, axis)
    return np.ascontiguousarray(y, dtype=F32)


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
