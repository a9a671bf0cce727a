"""Native int8-in / fp16-out Conv2D and FC (``int8_in.py``'s layers on ``_native_int8.c``'s VNNI
GEMM / depthwise kernels, no C change): the kernel runs with an identity requantization
(multiplier 1, no bias, output scale 1, clamp at +-2^31), so it writes ``fp32(acc)`` -- the exact
int32 sum converted with round to nearest even, an integer-valued float the kernel's own rounding
leaves as it is -- and the numpy epilogue of ``int8_in.py`` (``* m[o] + b[o]``, activation, fp16)
follows on it. Bit-identical to the numpy path (``tests/test_int8_in.py``), which runs when the
native int8 kernels are off or absent (``int8_native.lib()`` None).
"""
from __future__ import annotations

import copy
from typing import Callable, Optional

import numpy as np

from . import int8_native
from .int8 import Int8Conv2D

F32 = np.float32
ACC_BOUND = float(2 ** 31)   # |acc| < 2^31: the clamp never binds


def _integer_view(layer):
    """A copy of the layer whose requantization is the identity: y = fp32(acc)."""
    v = copy.copy(layer)
    o = layer.kernel.shape[1]
    v.out_q = (1.0, 0, "int8")
    v.mult = np.ones(o, F32)
    v.bias = np.zeros(o, np.int64)
    v.lo, v.hi = -ACC_BOUND, ACC_BOUND
    return v


def prepare(layer) -> Optional[Callable]:
    """The native ``apply`` of an int8-in layer (``int8_in.Int8InConv2D`` / ``Int8InFC``), or None."""
    if int8_native.lib() is None:
        return None
    view = _integer_view(layer)
    if isinstance(layer, Int8Conv2D):
        geometry = (layer.kh, layer.kw, *layer.strides, *layer.dilation, layer.padding[0], layer.padding[1])
        depthwise = layer.groups == layer.o and layer.ig == 1
        prep = int8_native.prepared(view, geometry, layer.groups, depthwise)   # (weight zero points too)
        if prep is None:
            return None

        def apply(x: np.ndarray):
            oh, ow = int8_native.conv_out_size(layer, x)
            if x.ndim != 4 or oh < 1 or ow < 1 or x.shape[0] == 0:
                return layer.apply(x)
            call, acc = prep.stage(np.ascontiguousarray(x, F32), oh, ow)
            int8_native.run_checked(call)
            return layer.finish(acc.reshape(x.shape[0], oh, ow, -1))
        return apply
    prep = int8_native.prepared(view, (1, 1, 1, 1, 1, 1, 0, 0), 1, False)
    if prep is None:
        return None
    k = layer.kernel.shape[0]

    def apply_fc(x: np.ndarray):
        if x.ndim != 2 or x.shape[1] != k or x.shape[0] == 0:
            return layer.apply(x)
        call, acc = prep.stage(np.ascontiguousarray(x, F32).reshape(x.shape[0], 1, 1, k), 1, 1)
        int8_native.run_checked(call)
        return layer.finish(acc.reshape(x.shape[0], -1))
    return apply_fc


def exact_sums(kernel: np.ndarray, in_q) -> Optional[Callable[[np.ndarray], np.ndarray]]:
    """``x [M, K] -> fp32(acc) [M, O]``, ``acc = sum_k (q_x - z_x) q_w[o, k]`` exact (``q_x``: x quantized
    by ``in_q`` = (scale, zero point, type)), on the native int8 GEMM, for int8 codes ``kernel`` [O, K]
    without a zero point; None when the native int8 kernels are absent. An int8 recurrent layer's
    input projection (recurrent_int8.py): the same values as its float64 sum converted to fp32."""
    if int8_native.lib() is None:
        return None
    from .int8_in import Int8InFC
    o, k = kernel.shape
    layer = Int8InFC(np.asarray(kernel, np.int8), None, np.ones(o, F32),
                     {"in_scale": float(in_q[0]), "in_zero_point": int(in_q[1]), "in_dtype": str(in_q[2])})
    prep = int8_native.Prepared(_integer_view(layer), (1, 1, 1, 1, 1, 1, 0, 0), 1, False)

    def sums(x: np.ndarray) -> np.ndarray:
        call, acc = prep.stage(np.ascontiguousarray(x, F32).reshape(x.shape[0], 1, 1, k), 1, 1)
        int8_native.run_checked(call)
        return acc.reshape(x.shape[0], o)
    return sums

