"""Sub(x, c) -> Add(x, -c), Div(x, c) -> Mul(x, 1/c) and Sub(c, x) -> Add(Mul(x, -1), c) for
constant float c (the last: a GRU's ``1 - z`` unrolled per timestep, ``1 - sigmoid``; negation is
exact, so the result is the same in fp32 and fp16)."""
from __future__ import annotations

import json
from typing import Optional

import numpy as np

from .base import Match, is_float, negated

NAME = "sub_div_const"
OPS = ("Sub", "Div")
DIVISOR_KEY = "mrvl.divisor"     # the Mul of a rewritten Div: its original divisor (JSON shape, dtype, values)
MAX_DIVISOR_VALUES = 4096


def match(node, g) -> Optional[Match]:
    if node.op_type not in ("Sub", "Div") or node.domain not in ("", "ai.onnx"):
        return None
    if len(node.input) != 2 or g.is_const(node.input[0]) == g.is_const(node.input[1]):
        return None
    if g.is_const(node.input[0]) and node.op_type != "Sub":
        return None   # c / x stays
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    x, c = _operands(m.node, g)
    if not is_float(g, c) or (g.dtype(x) not in (None, g.dtype(c))):
        return "integer (or mixed) tensors keep their Sub/Div"
    if m.node.op_type == "Div" and np.any(g.const(c) == 0):
        return "the divisor holds zeros"
    if g.opset < 7:
        return "opset < 7: legacy broadcast attributes"
    return None


def _operands(node, g):
    """(tensor, constant) operand names."""
    return (node.input[1], node.input[0]) if g.is_const(node.input[0]) else (node.input[0], node.input[1])


def rewrite(m: Match, g) -> str:
    node = m.node
    if g.is_const(node.input[0]):   # c - x = x * -1 + c
        x, c = node.input[1], node.input[0]
        g.remove(node)
        t = negated(g, x, near=node, origin=m.origin, dtype=g.const(c).dtype)
        g.make("Add", [t, c], [node.output[0]], near=node, origin=m.origin, name=node.name)
        return "constant minus tensor -> Mul by -1, Add"
    c = g.const(node.input[1])
    if node.op_type == "Sub":
        op, v = "Add", -c
    else:
        op, v = "Mul", (np.ones((), dtype=c.dtype) / c).astype(c.dtype)
    name = g.add_const(f"{node.input[1]}/{'neg' if op == 'Add' else 'recip'}", v)
    g.remove(node)
    made = g.make(op, [node.input[0], name], [node.output[0]], near=node, origin=m.origin,
                  name=node.name)
    if op == "Mul" and c.size <= MAX_DIVISOR_VALUES:
        # x * (1 / c) is not x / c in fp32 (unless c is a power of two): an int8 Lookup's table,
        # which onnxruntime computes from these nodes as the QDQ model runs them, divides
        # (fuse/lookup_table.py reads the divisor back)
        made.metadata_props.add(key=DIVISOR_KEY, value=json.dumps(
            {"shape": list(c.shape), "dtype": str(c.dtype), "values": c.ravel().tolist()}))
    return f"{node.op_type} by constant -> {op}"
