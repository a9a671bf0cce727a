"""A model output that is int8 codes (TFLite models converted by tf2onnx, exports with
``QuantizeLinear`` last): ``y -> Q -> output`` -> ``y -> Q -> DQ -> Q -> output`` with the same scale
and zero point. Exact (the DQ'd codes lie on the grid, and Q gives the same codes back), and it
gives the layer writing ``y`` the ``Q -> DQ`` pair an int8 layer ends with (docs/fusion.md "int8"):
the region outputs the dequantized codes in float32 and the last ``Q`` stays the host's
quantization at the output, as for a model input of int8 codes (``input -> DQ``).
"""
from __future__ import annotations

from typing import Optional

from .base import Match, inp

NAME = "qdq_int8_output"
OPS = ("QuantizeLinear",)


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or node.output[0] not in g.outputs:
        return None
    p = g.producer.get(node.input[0])
    if p is None or p.op_type in ("DequantizeLinear", "QuantizeLinear"):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    s, z = g.const(inp(node, 1)), g.const(inp(node, 2)) if inp(node, 2) else None
    if s is None or (inp(node, 2) and z is None):
        return "scale or zero point is not a constant"
    if s.size != 1 or (z is not None and z.size != 1):
        return "quantized per axis"
    if g.shape(node.input[0]) is None:
        return "the quantized tensor has no static shape"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    y = node.input[0]
    qp = list(node.input[1:])
    attrs = {a.name: a for a in node.attribute}
    q = g.fresh(f"{y}_QuantizeLinear_Output")
    made = g.make("QuantizeLinear", [y] + qp, [q], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/pair_q"))
    made.attribute.extend(attrs.values())
    g.set_shape(q, g.shape(y), g.dtype(node.output[0]))
    dq = g.fresh(f"{y}_DequantizeLinear_Output")
    g.make("DequantizeLinear", [q] + qp, [dq], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/pair_dq"))
    g.set_shape(dq, g.shape(y), g.dtype(y))
    g.set_input(node, 0, dq)
    return "int8 model output: Q -> DQ pair in front of its QuantizeLinear (exact)"
