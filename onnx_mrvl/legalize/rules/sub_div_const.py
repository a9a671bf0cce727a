"""Sub(x, c) -> Add(x, -c) and Div(x, c) -> Mul(x, 1/c) for constant float c."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float

NAME = "sub_div_const"
OPS = ("Sub", "Div")


def match(node, g) -> Optional[Match]:
    if node.op_type not in ("Sub", "Div") or node.domain not in ("", "ai.onnx"):
        return None
    if len(node.input) != 2 or g.is_const(node.input[0]) or not g.is_const(node.input[1]):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    c = m.node.input[1]
    if not is_float(g, c) or (g.dtype(m.node.input[0]) not in (None, g.dtype(c))):
        return "integer (or mixed) tensors keep their Sub/Div"
    if m.node.op_type == "Div" and np.any(g.const(c) == 0):
        return "the divisor holds zeros"
    if g.opset < 7:
        return "opset < 7: legacy broadcast attributes"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    c = g.const(node.input[1])
    if node.op_type == "Sub":
        op, v = "Add", -c
    else:
        op, v = "Mul", (np.ones((), dtype=c.dtype) / c).astype(c.dtype)
    name = g.add_const(f"{node.input[1]}/{'neg' if op == 'Add' else 'recip'}", v)
    g.remove(node)
    g.make(op, [node.input[0], name], [node.output[0]], near=node, origin=m.origin,
           name=node.name)
    return f"{node.op_type} by constant -> {op}"
