"""``Sub(x, y)`` of two float activations -> ``Add(x, Mul(y, -1))``: the accelerator's element-wise
ops add and multiply (Sum2D, Mul2D); negation is exact, and IEEE ``x - y`` is ``x + (-y)``, so the
result is the same in fp32 and after one fp16 rounding. EfficientFormer / PoolFormer's token mixer
``pool(x) - x`` (14 CPU Subs cut timm's efficientformer_l1 into 16 regions).

Left alone: a constant operand (``sub_div_const``), a QDQ Sub (an operand written by a
DequantizeLinear: fuse's subtracting int8 Sum2D, ``qdq_sub.py``), the centering of a normalization
(an operand written by ReduceMean / GlobalAveragePool: layer, instance and group norms keep their
form for ``layernorm_canonical`` and fuse), integer tensors."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float

NAME = "sub_to_add"
OPS = ("Sub",)
KEEP_AFTER = ("DequantizeLinear", "ReduceMean", "GlobalAveragePool")


def match(node, g) -> Optional[Match]:
    if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    if any(g.is_const(t) for t in node.input):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    x, y = m.node.input
    if not (is_float(g, x) and is_float(g, y)):
        return "integer (or mixed) tensors keep their Sub"
    for t in (x, y):
        p = g.producer.get(t)
        if p is not None and p.op_type in KEEP_AFTER:
            return f"an operand written by {p.op_type} (a QDQ Sub or a normalization's centering keeps its form)"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x, y = node.input
    g.remove(node)
    neg = g.fresh(f"{y}/neg")
    g.make("Mul", [y, g.add_const(f"{node.name}/minus_one", np.asarray(-1.0, dtype=np.float32))], [neg],
           near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/neg"))
    if g.shape(y) is not None:
        g.set_shape(neg, g.shape(y), g.dtype(y))
    g.make("Add", [x, neg], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "Sub(x, y) -> Add(x, Mul(y, -1))"
