"""``Where(cond, fill, x)`` / ``Where(cond, x, fill)`` -> ``Add(x, Where(cond, fill, 0))`` /
``Add(x, Where(cond, 0, fill))`` for a condition computed at run time, a constant scalar fill at or
below -fp16_max (float32's lowest or -inf: ``masked_fill(~mask, finfo.min)`` as DeBERTa, SEW-D and
other attention blocks write it) and scores ``x`` read only by Softmax over the last axis. The
condition must be computed in the graph (DeBERTa's ``~mask.bool()``); a boolean graph input used
directly keeps its Where on the CPU as before (a caller-made mask; issue to revisit).

Exact in float32 for finite x with |x| < 2**103 (x + lowest rounds to lowest; x + -inf = -inf), so
the Softmax reads what it read before. The boolean Where then holds only the mask (it stays on the
CPU, as the dynamo exporter's ``Where(mask, 0, lowest)`` does) and the Add of the scores is a region
operand: fuse's ``masks.cpu_mask_fills`` makes its fill -32768, which fp16 holds. Left as it was, the
Where of the scores stayed on the CPU between the score MatMul and the Softmax (a region cut per
attention block), and its -3.4e38 reached the next region as -inf (an fp16 overflow)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, is_float

NAME = "mask_fill_add"
OPS = ("Where",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Where" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    cond, a, b = node.input
    if g.is_const(cond) or g.is_const(a) == g.is_const(b) or cond not in g.producer:
        return None   # a boolean graph input as the condition stays fuse's masks.py case (tests/test_attention.py)
    k = 1 if g.is_const(a) else 2      # input index of the fill
    fill = g.const(node.input[k])
    if fill is None or fill.size != 1 or fill.dtype.kind != "f":
        return None
    return Match([node], {"k": k, "fill": float(fill.reshape(-1)[0])})


def check(m: Match, g, target) -> Optional[str]:
    node, k = m.node, m.data["k"]
    x = node.input[3 - k]
    if not m.data["fill"] <= -target.fp16_max:
        return f"the fill {m.data['fill']:g} fits fp16 (not a mask fill beyond it)"
    if not is_float(g, x) or g.dtype(x) != g.dtype(node.input[k]):
        return "the scores are not a float tensor of the fill's type"
    if g.opset < 13:
        return "opset < 13: Softmax flattens the axes from its axis on"
    sx, sy = g.shape(x), g.shape(node.output[0])
    if sx is None or sy is None or tuple(sx) != tuple(sy):
        return "the Where broadcasts the scores to another shape (or their shapes are unknown)"
    users = g.users(node.output[0])
    if node.output[0] in g.outputs or not users:
        return "its result is a graph output"
    for u in users:
        if u.op_type != "Softmax" or u.domain not in ("", "ai.onnx") or int(attr(u, "axis", -1)) % len(sy) != len(sy) - 1:
            return f"its result is read by {u.op_type} '{u.name}', not only by a Softmax over the last axis"
    return None


def rewrite(m: Match, g) -> str:
    node, k = m.node, m.data["k"]
    x = node.input[3 - k]
    zero = g.add_const(f"{node.name}/zero", np.zeros((), dtype=g.const(node.input[k]).dtype))
    branches = [node.input[k], zero] if k == 1 else [zero, node.input[k]]
    mask = g.fresh(f"{node.output[0]}/mask")
    g.remove(node)
    g.make("Where", [node.input[0]] + branches, [mask], near=node, origin=m.origin, name=f"{node.name}/mask")
    sc = g.shape(node.input[0])
    if sc is not None:
        g.set_shape(mask, sc, g.dtype(x))
    g.make("Add", [x, mask], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "masked_fill of the scores (fill beyond fp16) -> scores + Where(cond, fill, 0)"
