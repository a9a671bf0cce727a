"""Sub(a, b) of two float tensors -> Add(a, Mul(b, -1)): the accelerator has an element-wise Add
(Sum2D) and a Mul by a constant but no Sub of two tensors. Complex arithmetic written on real and
imaginary parts (DCCRN's complex conv ``conv_r(x_r) - conv_i(x_i)``, complex masks), DBNet's
``P - T``, differences of two branches. Negation is exact, so the result is the same in fp32 and
fp16. Left alone: Subs with a constant (sub_div_const), a QDQ Sub (an operand from a
DequantizeLinear or the result read by a QuantizeLinear: fuse/qdq_sub.py's int8 Sum2D), integer
tensors, and ``x - reduce(x)`` (a decomposed LayerNorm / Softmax: reduce_axis_to_pool and
layernorm_canonical read that form)."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float, negated

NAME = "sub_tensors"
OPS = ("Sub",)
REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp", "GlobalAveragePool",
          "GlobalMaxPool")


def match(node, g) -> Optional[Match]:
    if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    a, b = node.input
    if g.is_const(a) or g.is_const(b):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    a, b = node.input
    if not (is_float(g, a) and is_float(g, b)):
        return "integer (or mixed) tensors keep their Sub"
    if g.opset < 7:
        return "opset < 7: legacy broadcast attributes"
    for t in (a, b):
        p = g.producer.get(t)
        if p is not None and p.op_type == "DequantizeLinear":
            return "a QDQ Sub (an int8 Sum2D with subtract, fuse/qdq_sub.py)"
        if p is not None and p.op_type in REDUCE:
            return "x - reduce(x): a decomposed normalization, read as such by later rules"
    if any(u.op_type == "QuantizeLinear" for u in g.users(node.output[0])):
        return "a QDQ Sub (an int8 Sum2D with subtract, fuse/qdq_sub.py)"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    a, b = node.input
    g.remove(node)
    t = negated(g, b, near=node, origin=m.origin)
    g.make("Add", [a, t], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "tensor minus tensor -> Add of the Mul by -1"
