"""ReduceMean over axes {2,3} of a 4-D tensor -> GlobalAveragePool (+ Reshape for keepdims=0).
Axes come as an attribute (opset < 18) or a constant input (opset >= 18); negative axes too.
Also through a Transpose (tf2onnx: NCHW -> NHWC, then ReduceMean axes 1,2): when the reduced axes
are the source's 2,3 and the kept axes keep their order, the mean reads the Transpose's input."""
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
    if not axes:
        return None
    axes = sorted(a % 4 for a in axes)
    if axes == [2, 3]:
        return Match([node], {"sx": sx, "src": node.input[0]})
    tr = g.producer.get(node.input[0])
    perm = attr(tr, "perm") if tr is not None and tr.op_type == "Transpose" else None
    if perm is None or len(perm) != 4 or g.shape(tr.input[0]) is None:
        return None
    kept = [p for i, p in enumerate(perm) if i not in axes]
    sy = g.shape(node.output[0])
    if sorted(perm[a] for a in axes) != [2, 3] or kept != sorted(kept) or sy is None:
        return None
    return Match([node], {"sx": g.shape(tr.input[0]), "src": tr.input[0], "sy": sy})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    n, c = m.data["sx"][:2]
    keep = attr(node, "keepdims", 1)
    src = m.data["src"]
    g.remove(node)
    if keep and src == node.input[0]:
        g.make("GlobalAveragePool", [src], [node.output[0]], near=node,
               origin=m.origin, name=node.name)
    else:
        mid = g.fresh(f"{node.output[0]}/gap")
        g.make("GlobalAveragePool", [src], [mid], near=node, origin=m.origin,
               name=node.name)
        g.set_shape(mid, [n, c, 1, 1], g.dtype(src))
        out = [n, c] if not keep else list(m.data["sy"])   # keepdims through a Transpose
        reshape(g, mid, out, near=node, origin=m.origin, out=node.output[0], tag="squeeze")
    return "ReduceMean(axes 2,3) -> GlobalAveragePool" + ("" if keep else " + Reshape")
