"""MatMul of two run-time operands of ranks 3 and 4 -> the 3-D operand reshaped with a leading unit
axis to 4-D: the same broadcast
(numpy / ONNX MatMul semantics), and fuse's batched MatMul takes operands of one rank. The dynamo
exporter writes Hugging Face's older attention (TrOCR, BART, Marian:
``bmm(q.view(B * h, T, d), k.view(B * h, S, d).transpose(1, 2))``) as a 4-D query against a 3-D key.
A QDQ MatMul (an operand from a DequantizeLinear: a weight quantized per channel, int8 batched
matmuls) keeps its form."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float, reshape

NAME = "matmul_rank_align"
OPS = ("MatMul",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    a, b = node.input
    if g.is_const(a) or g.is_const(b):
        return None
    sa, sb = g.shape(a), g.shape(b)
    if sa is None or sb is None or len(sa) == len(sb) or sorted((len(sa), len(sb))) != [3, 4]:
        return None
    return Match([node], {"low": 0 if len(sa) < len(sb) else 1, "rank": max(len(sa), len(sb))})


def check(m: Match, g, target) -> Optional[str]:
    if not all(is_float(g, t) for t in m.node.input):
        return "integer MatMul"
    for t in m.node.input:
        p = g.producer.get(t)
        if p is not None and p.op_type == "DequantizeLinear":
            return "a QDQ MatMul (a Reshape would stand between its DequantizeLinear and the MatMul)"
    return None


def rewrite(m: Match, g) -> str:
    node, k, rank = m.node, m.data["low"], m.data["rank"]
    x = node.input[k]
    sx = list(g.shape(x))
    shape = [1] * (rank - len(sx)) + sx
    y = reshape(g, x, shape, near=node, origin=m.origin, tag="rank_align")
    g.set_input(node, k, y)
    return f"MatMul operand {k} {sx} -> {shape} (same broadcast)"
