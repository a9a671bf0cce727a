"""``Where(IsNaN(x), c, x)`` on the output of a DequantizeLinear with finite scales -> x.

PyTorch's ``_safe_softmax`` guard (``Where(IsNaN(softmax), 0, softmax)``) in a QDQ model reads the
Softmax's dequantized int8 codes (onnxruntime's quantizer puts a Q -> DQ between them): an integer
code times a finite scale is never NaN, so the guard passes x through, exactly. Left on the CPU it
cut every attention block (IsNaN / Where have no accelerator op). The float form of the guard is
fuse's (the Mrvl Softmax's ``nan_fill``)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, bypass_reason


NAME = "nan_guard_dq"
OPS = ("Where",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Where" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    cond, fill, x = node.input
    isnan = g.producer.get(cond)
    if isnan is None or isnan.op_type != "IsNaN" or isnan.input[0] != x or not g.is_const(fill):
        return None
    dq = g.producer.get(x)
    if dq is None or dq.op_type != "DequantizeLinear" or not all(g.is_const(i) for i in dq.input[1:] if i):
        return None
    return Match([node], {"isnan": isnan, "dq": dq})


def check(m: Match, g, target) -> Optional[str]:
    scale = g.const(m.data["dq"].input[1])
    if not np.all(np.isfinite(np.asarray(scale, np.float64))):
        return "the DequantizeLinear's scale is not finite (its values can be NaN)"
    if g.shape(m.node.output[0]) != g.shape(m.node.input[2]):
        return "the Where broadcasts x to another shape"
    return bypass_reason(Match([m.node]), g)


def rewrite(m: Match, g) -> str:
    node = m.node
    g.bypass(node, node.input[2], node.output[0])
    if not hasattr(g, "nan_guard_bypassed"):   # qdq_double_pair: onnxruntime keeps the guard between pairs
        g.nan_guard_bypassed = set()
    g.nan_guard_bypassed.add(node.input[2])
    isnan = m.data["isnan"]
    if not g.users(isnan.output[0]) and isnan.output[0] not in g.outputs:
        g.remove(isnan)
    return "Where(IsNaN(x), c, x) of a dequantized x (never NaN) -> x"
