"""The ``LRN`` layer of the compile step (docs/json-format.md "LRN"): local response normalization
across the channels of a 4-D NHWC tensor; params size, alpha, beta, bias; output shape = input shape.

``vector_ops`` is the vector unit's work the perf model charges (``target.lrn_ops_per_element``,
``target.VECTOR_LOWERINGS["LRN"]``; assumption): per element one square, ``min(size, C) - 1`` adds of
channel-shifted squares (the window sum), one multiply-add by alpha / size and bias, a log, a
multiply by -beta, an exp (log and exp by LUT + polynomial), the multiply by x and the fp16 round:
``min(size, C) + 7``.
"""
from __future__ import annotations

import math

from ..target import lrn_ops_per_element
from .json_attrs import NodeAttrs


def lrn_vector_ops(shape, size: int) -> int:
    """Vector-unit operations of an LRN over an NHWC ``shape`` with window ``size`` (see above)."""
    return int(math.prod(shape)) * lrn_ops_per_element(size, shape[-1])


def lrn(a: NodeAttrs, in_shape, params: dict):
    """(output shape, vector_ops) of an LRN node; fills ``params``."""
    shape = list(in_shape)
    if len(shape) != 4:
        a.fail(f"LRN needs a 4-D NHWC input, got {shape}")
    size = a.int("size")
    alpha, beta, bias = a.float("alpha", 1e-4), a.float("beta", 0.75), a.float("bias", 1.0)
    if size < 1:
        a.fail(f"LRN size {size} must be >= 1")
    if not all(math.isfinite(v) for v in (alpha, beta, bias)) or not bias > 0 or alpha < 0:
        a.fail(f"LRN alpha {alpha} / beta {beta} / bias {bias}: needs finite values, bias > 0, alpha >= 0")
    params.update(size=size, alpha=alpha, beta=beta, bias=bias)
    return shape, lrn_vector_ops(shape, size)
