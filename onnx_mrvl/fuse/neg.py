"""A float ``Neg(x)`` no other pattern took -> ``Mul2D(x, -1)``: exact in fp16 (a sign flip; NaN
stays NaN, -0 and 0 swap as in ONNX Neg). tf2onnx writes the imaginary part of a conv STFT / CQT
this way (basic-pitch's ``-Im``); without it the Neg cut the front end out of the region.
Rule: float32 with a static shape of rank 2-5 within the batch limit (``tensor_reason``)."""
from __future__ import annotations

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .patterns import tensor_reason


def build_neg(g: GraphIndex, n: onnx.NodeProto, target: Target):
    """``Mul2D(x, -1)`` for ``n`` (a standard-domain Neg), or the reason it stays on the CPU."""
    if n.domain not in ("", "ai.onnx") or not n.input or not n.output or not n.output[0]:
        return "Neg without an input or output"
    x, y = n.input[0], n.output[0]
    reason = tensor_reason(g, x, y, target, "Neg (x * -1)")
    if reason:
        return reason
    rank = len(g.shape(x))
    return Group("Mul2D", "mrvl.mul", [n], [x], y, {}, {"operand": np.full([1] * rank, -1.0, np.float32)})
