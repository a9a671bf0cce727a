"""com.microsoft QuantizeLinear / DequantizeLinear -> the ONNX ops, when they are the same function:
the model's default opset is 13 or newer (per-axis ``axis``), the quantized type is int8 / uint8
(an int32 DequantizeLinear too: a bias) and the node has no attribute but ``axis``. AMD Quark's A8W8
(and other onnxruntime-based tools) writes its Q / DQ in the contrib domain; the rest of the flow
reads the default-domain ops (a DequantizeLinear of constants read as a Clip bound or a divisor was
not folded: 18 x (Clip, Mul, Div) left on the CPU in PP-OCR cls). int16 / int4 / float8 and opsets
below 13 stay as they are (the contrib op is then not the ONNX one of that opset)."""
from __future__ import annotations

from typing import Optional

import onnx

from .base import Match

NAME = "ms_qdq_domain"
OPS = ("QuantizeLinear", "DequantizeLinear")
TYPES = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def match(node, g) -> Optional[Match]:
    if node.domain != "com.microsoft" or node.op_type not in OPS or g.opset < 13 or \
            any(a.name != "axis" for a in node.attribute) or not 2 <= len(node.input) <= 3:
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    n = m.node
    zp = n.input[2] if len(n.input) > 2 and n.input[2] else ""
    codes = n.input[0] if n.op_type == "DequantizeLinear" else (n.output[0] if not zp else zp)
    dt = g.dtype(zp) if zp else g.dtype(codes)
    ok = TYPES + ((onnx.TensorProto.INT32,) if n.op_type == "DequantizeLinear" else ())
    if dt not in ok:
        return f"quantized type {dt} (the ONNX op of this opset takes int8 / uint8)"
    return None


def rewrite(m: Match, g) -> str:
    n = m.node
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
    g.remove(n)
    g.make(n.op_type, list(n.input), list(n.output), near=n, origin=m.origin, name=n.name, **attrs)
    return f"com.microsoft {n.op_type} -> {n.op_type}"
