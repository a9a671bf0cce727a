"""ReduceMean over axes {2,3} of a 4-D tensor -> GlobalAveragePool (+ Reshape for keepdims=0).
Axes come as an attribute (opset < 18) or a constant input (opset >= 18); negative axes too."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, axes_of, reshape

NAME = "reducemean_to_gap"
OPS = ("ReduceMean",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "ReduceMean" or node.domain not in ("", "ai.onnx"):
        return None
    sx = g.shape(node.input[0])
    if sx is None or len(sx) != 4:
        return None
    axes = axes_of(g, node, 1)
    if not axes or sorted(a % 4 for a in axes) != [2, 3]:
        return None
    return Match([node], {"sx": sx})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c = m.data["sx"][:2]
    keep = attr(node, "keepdims", 1)
    g.remove(node)
    if keep:
        g.make("GlobalAveragePool", [node.input[0]], [node.output[0]], near=node,
               origin=m.origin, name=node.name)
    else:
        mid = g.fresh(f"{node.output[0]}/gap")
        g.make("GlobalAveragePool", [node.input[0]], [mid], near=node, origin=m.origin,
               name=node.name)
        g.set_shape(mid, [n, c, 1, 1], g.dtype(node.input[0]))
        reshape(g, mid, [n, c], near=node, origin=m.origin, out=node.output[0], tag="squeeze")
    return "ReduceMean(axes 2,3) -> GlobalAveragePool" + ("" if keep else " + Reshape")
