"""The smooth activations of transformer and modern CNN layers, in fp32 (in place where possible):
GELU (erf and tanh forms), ELU, Mish, Softplus, Sqrt and Log.

Hardware-plausible formulas, the same for every kernel path (the compiled kernels store the
pre-activation value and these finish it, as for sigmoid / tanh):

* ``gelu``: ``0.5 x erfc(-x / sqrt 2)``, erfc by the Chebyshev fit of Numerical Recipes
  (``t exp(-z^2 + P(t))``, ``t = 1 / (1 + z / 2)``, fractional error < 1.2e-7 everywhere): a
  reciprocal, a degree-9 polynomial and one exp (LUT) on the vector unit. Computing erfc instead
  of ``1 + erf`` keeps the negative tail exact in relative terms (no cancellation).
* ``gelu_tanh``: ``0.5 x (1 + tanh(u)) = x sigmoid(2u)``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``,
  without the cancellation of ``1 + tanh(u)`` for negative x.
* ``elu``: ``x`` for x > 0, ``alpha (exp(x) - 1)`` otherwise (expm1).
* ``mish``: ``x tanh(softplus(x))``, softplus as ``max(x, 0) + log1p(exp(-|x|))``.
* ``softplus``: that softplus alone; ``sqrt``: fp32 square root (a conv STFT's magnitude).
* ``log``: fp32 natural log (log spectra) plus a shift, then ``max(., floor)`` (the floor ``-FLT_MAX`` when none:
  an fp16 -inf stays -inf); ONNX Log's specials: 0 -> -inf, x < 0 -> NaN (kept by the max), +inf -> +inf.
"""
from __future__ import annotations

import numpy as np

from . import activations_native

F32 = np.float32
_FLT32_MAX = float(np.finfo(np.float32).max)
_INV_SQRT2 = F32(0.7071067811865476)
_GELU_TANH_2U = F32(2.0 * 0.7978845608028654)   # 2 sqrt(2/pi)
_ERFC_COEFFS = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
                0.09678418, 0.37409196, 1.00002368, -1.26551223)   # Horner order, highest first


def erfc(z: np.ndarray) -> np.ndarray:
    """erfc of a float32 array (a new array), fractional error < 1.2e-7 (Numerical Recipes erfcc)."""
    a = np.abs(z)
    t = F32(1) / (F32(1) + F32(0.5) * a)
    p = np.full_like(t, F32(_ERFC_COEFFS[0]))
    for c in _ERFC_COEFFS[1:]:
        p *= t
        p += F32(c)
    p -= a * a
    np.exp(p, out=p)
    p *= t
    neg = z < 0
    np.subtract(F32(2), p, out=p, where=neg)
    return p


def gelu(x: np.ndarray) -> np.ndarray:
    """In one native pass where it gives numpy's bits (activations_native.py), else ``numpy_gelu``."""
    if activations_native.apply_(x, "gelu"):
        return x
    return numpy_gelu(x)


def numpy_gelu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        c = erfc(x * -_INV_SQRT2)
        c *= F32(0.5)
        x *= c
    return x


def erf(x: np.ndarray) -> np.ndarray:
    """erf(x) = 1 - erfc(x) (the gelu's erfc fit; the Erf of a QDQ GELU between its Q/DQ pairs)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        np.subtract(F32(1), erfc(x), out=x)
    return x


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    from .activations import sigmoid
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        u = x * x
        u *= F32(0.044715)
        u += F32(1)
        u *= x
        u *= _GELU_TANH_2U
        x *= sigmoid(u)
    return x


def elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        neg = np.expm1(np.minimum(x, F32(0)))
        neg *= F32(alpha)
        np.copyto(x, neg, where=~(x > 0))
    return x


def mish(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        sp = np.abs(x)
        np.negative(sp, out=sp)
        np.exp(sp, out=sp)
        np.log1p(sp, out=sp)
        sp += np.maximum(x, F32(0))
        np.tanh(sp, out=sp)
        x *= sp
    return x


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) as ``max(x, 0) + log1p(exp(-|x|))`` (no overflow for large x)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        sp = np.abs(x)
        np.negative(sp, out=sp)
        np.exp(sp, out=sp)
        np.log1p(sp, out=sp)
        np.maximum(x, F32(0), out=x)
        x += sp
    return x


def sqrt(x: np.ndarray) -> np.ndarray:
    """sqrt(x) in fp32 (NaN for x < 0, as ONNX Sqrt)."""
    with np.errstate(invalid="ignore"):
        np.sqrt(x, out=x)
    return x


def log(x: np.ndarray, floor: float, shift: float = 0.0) -> np.ndarray:
    """max(log(x) + shift, floor) in fp32; NaN (x < 0, NaN) stays NaN, log(0) = -inf meets the floor."""
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(x, out=x)
        if shift:
            x += F32(shift)
        if floor > -_FLT32_MAX:               # -FLT_MAX: no floor (-inf stays -inf)
            np.maximum(x, F32(floor), out=x)  # NaN propagates
    return x


def only_log_of_zero(params, y: np.ndarray) -> bool:
    """``y`` of a layer with the log activation whose every non-finite value is -inf: ONNX Log's value
    of an exact 0 (digital silence into a log spectrum without a floor), which onnxruntime's run gives
    too -- a value that flows on (a later floor makes it finite), not an fp16 overflow. +inf and NaN
    (a negative input, an overflowing shift) still count as overflow: fail closed."""
    if str(params.get("activation") or "").lower() != "log":
        return False
    with np.errstate(invalid="ignore"):
        bad = y[~np.isfinite(y)]
    return bad.size > 0 and bool(np.all(bad == -np.inf))
