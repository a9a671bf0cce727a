"""MatMul of two run-time operands of ranks 3 and 4 -> the 3-D operand reshaped with a leading unit
axis to 4-D: the same broadcast
(numpy / ONNX MatMul semantics), and fuse's batched MatMul takes operands of one rank. The dynamo
exporter writes Hugging Face's older attention (TrOCR, BART, Marian:
``bmm(q.view(B * h, T, d), k.view(B * h, S, d).transpose(1, 2))``) as a 4-D query against a 3-D key.
In a QDQ model the 3-D operand's per-tensor DequantizeLinear reads the codes reshaped (exact), so
the DequantizeLinear still feeds the MatMul (an int8 batched MatMul); a weight or per-axis one stays."""
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
    low = m.node.input[m.data["low"]]
    p = g.producer.get(low)
    if p is not None and p.op_type == "DequantizeLinear":
        scale = g.const(p.input[1])
        if g.is_const(p.input[0]) or scale is None or scale.size != 1 or g.only_consumer(low) is not m.node:
            return ("a QDQ MatMul whose 3-D operand is a weight, per-axis or shared DequantizeLinear (a Reshape "
                    "would stand between it and the MatMul)")
        m.data["dq"] = p              # reshape the codes before the DequantizeLinear (per tensor: exact)
    return None


def rewrite(m: Match, g) -> str:
    node, k, rank = m.node, m.data["low"], m.data["rank"]
    x = node.input[k]
    sx = list(g.shape(x))
    shape = [1] * (rank - len(sx)) + sx
    dq = m.data.get("dq")
    if dq is not None:            # DQ(reshape(codes)): the DequantizeLinear still feeds the MatMul
        codes = reshape(g, dq.input[0], shape, near=dq, origin=m.origin, tag="rank_align")
        g.set_input(dq, 0, codes)
        g.set_shape(x, shape, g.dtype(x))
        return f"MatMul operand {k} {sx} -> {shape} on its int8 codes (same broadcast)"
    y = reshape(g, x, shape, near=node, origin=m.origin, tag="rank_align")
    g.set_input(node, k, y)
    return f"MatMul operand {k} {sx} -> {shape} (same broadcast)"
