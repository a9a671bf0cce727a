"""Flatten, Squeeze and Unsqueeze (attribute or input axes) -> Reshape with a static shape."""
from __future__ import annotations

from typing import Optional

from .base import Match, shape_const

NAME = "to_reshape"
OPS = ("Flatten", "Squeeze", "Unsqueeze")


def match(node, g) -> Optional[Match]:
    if node.op_type in OPS and node.domain in ("", "ai.onnx"):
        return Match([node])
    return None


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
