"""Activation functions of the Mrvl layers, applied in fp32 (in place where possible).

Every function takes a float32 array it may overwrite and returns the result (the same array
whenever the operation can be done in place). ``apply_activation`` is the one dispatcher the
kernels use; ``ACTIVATIONS`` lists the names it accepts (the contract of docs/program.md).
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Tuple

import numpy as np

from . import activations_native, activations_smooth

F32 = np.float32


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, F32(0), out=x)


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.clip(x, F32(lo), F32(hi), out=x)


def leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    neg = np.minimum(x, F32(0))
    np.maximum(x, F32(0), out=x)
    neg *= F32(alpha)
    x += neg
    return x


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """Per-channel slope on the last axis (a slope of shape [1] applies to every channel)."""
    neg = np.minimum(x, F32(0))
    np.maximum(x, F32(0), out=x)
    neg *= np.asarray(slope, dtype=F32).reshape(-1)
    x += neg
    return x


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), stable for both signs: exp is only taken of -|x|. One native pass where
    it gives numpy's bits (activations_native.py), else ``numpy_sigmoid``."""
    if activations_native.apply_(x, "sigmoid"):
        return x
    return numpy_sigmoid(x)


def numpy_sigmoid(x: np.ndarray) -> np.ndarray:
    """``sigmoid``'s numpy steps: e = exp(-|x|); x >= 0: 1 / (1 + e), else e / (1 + e)."""
    e = np.abs(x)
    np.negative(e, out=e)
    np.exp(e, out=e)                       # e = exp(-|x|) in (0, 1]
    pos = x >= 0
    denom = e + F32(1)
    # x >= 0: 1 / (1 + e);  x < 0: e / (1 + e)
    np.copyto(x, F32(1))
    np.copyto(x, e, where=~pos)
    x /= denom
    return x


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x, out=x)


def hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    x *= F32(alpha)
    x += F32(beta)
    return np.clip(x, F32(0), F32(1), out=x)


def hard_swish(x: np.ndarray) -> np.ndarray:
    """ONNX HardSwish: x * clip(x / 6 + 0.5, 0, 1)."""
    g = x * F32(1.0 / 6.0)
    g += F32(0.5)
    np.clip(g, F32(0), F32(1), out=g)
    x *= g
    return x


def silu(x: np.ndarray) -> np.ndarray:
    """x sigmoid(x): one native pass where it gives numpy's bits, else ``numpy_silu``."""
    if activations_native.apply_(x, "silu"):
        return x
    return numpy_silu(x)


def numpy_silu(x: np.ndarray) -> np.ndarray:
    s = numpy_sigmoid(x.copy())
    x *= s
    return x


ACTIVATIONS = ("none", "relu", "clamp", "leaky_relu", "prelu", "sigmoid", "tanh",
               "hard_sigmoid", "hard_swish", "silu", "gelu", "gelu_tanh", "elu", "mish",
               "erf", "softplus", "sqrt", "log")


FLT32_MAX = float(np.finfo(np.float32).max)


def scalar_params(name: Optional[str], params: Optional[Mapping] = None) -> Tuple[float, float]:
    """The two scalar parameters of an activation, defaults applied: clamp (min, max), leaky_relu
    (alpha, 0), hard_sigmoid (alpha, beta), elu (alpha, 0), log (floor, shift); (0, 0) for the others."""
    name = (name or "none").lower()
    p: Dict = dict(params or {})
    if name == "clamp":
        return float(p.get("min", -np.inf)), float(p.get("max", np.inf))
    if name == "leaky_relu":
        return float(p.get("alpha", 0.01)), 0.0
    if name == "hard_sigmoid":
        return float(p.get("alpha", 0.2)), float(p.get("beta", 0.5))
    if name == "elu":
        return float(p.get("alpha", 1.0)), 0.0
    if name == "log":
        return float(p.get("alpha", -FLT32_MAX)), float(p.get("beta", 0.0))
    return 0.0, 0.0


def make_activation(name: Optional[str], params: Optional[Mapping] = None,
                    slope: Optional[np.ndarray] = None) -> Optional[Callable[[np.ndarray], np.ndarray]]:
    """Bind an activation's parameters once; returns None for "none" (nothing to do).

    Raises KeyError / ValueError for an unknown name or a missing parameter; callers turn these
    into errors naming the layer.
    """
    name = (name or "none").lower()
    p0, p1 = scalar_params(name, params)
    if name == "none":
        return None
    if name == "relu":
        return relu
    if name == "clamp":
        return lambda x: clamp(x, p0, p1)
    if name == "leaky_relu":
        return lambda x: leaky_relu(x, p0)
    if name == "prelu":
        if slope is None:
            raise KeyError("prelu needs weights['slope']")
        s = np.ascontiguousarray(np.asarray(slope, dtype=F32).reshape(-1))
        return lambda x: prelu(x, s)
    if name == "sigmoid":
        return sigmoid
    if name == "tanh":
        return tanh
    if name == "hard_sigmoid":
        return lambda x: hard_sigmoid(x, p0, p1)
    if name == "hard_swish":
        return hard_swish
    if name == "silu":
        return silu
    if name in ("gelu", "gelu_tanh", "mish", "erf", "softplus", "sqrt"):
        return getattr(activations_smooth, name)
    if name == "elu":
        return lambda x: activations_smooth.elu(x, p0)
    if name == "log":
        return lambda x: activations_smooth.log(x, p0, p1)
    raise ValueError(f"unknown activation {name!r} (known: {', '.join(ACTIVATIONS)})")


def apply_activation(x: np.ndarray, name: Optional[str], params: Optional[Mapping] = None,
                     slope: Optional[np.ndarray] = None) -> np.ndarray:
    """Apply one activation to the float32 array ``x`` (overwritten) and return the result."""
    fn = make_activation(name, params, slope)
    return x if fn is None else fn(x)
