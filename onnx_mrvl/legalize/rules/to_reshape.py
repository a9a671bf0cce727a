"""Flatten, Squeeze and Unsqueeze (attribute or input axes) -> Reshape with a static shape; so are a
Gather of one scalar index on an axis of size 1 (``x[0]`` of a batch of one: torchvision detection's
``images[0]``) and a Split into one part (``unbind`` / ``chunk`` of a batch of one)."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, shape_const

NAME = "to_reshape"
OPS = ("Flatten", "Squeeze", "Unsqueeze", "Gather", "Split")


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Gather":
        sx, idx = g.shape(node.input[0]), g.const(node.input[1])
        axis = attr(node, "axis", 0)
        if sx is None or idx is None or idx.ndim != 0 or not -len(sx) <= axis < len(sx) or sx[axis] != 1:
            return None
        return Match([node])
    if node.op_type == "Split":
        if len(node.output) != 1:
            return None
        return Match([node])
    return Match([node]) if node.op_type in OPS else None


def check(m: Match, g, target) -> Optional[str]:
    if g.opset < 5:
        return "opset < 5 has no shape-input Reshape"
    out = g.shape(m.node.output[0])
    if out is None:
        return "output shape is not static"
    m.data["shape"] = out
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    g.remove(node)
    g.make("Reshape", [node.input[0], shape_const(g, node, m.data["shape"])], [node.output[0]],
           near=node, origin=m.origin, name=node.name)
    return f"{node.op_type} -> Reshape{list(m.data['shape'])}"
