"""No-op Cast (same type), Reshape (same shape) and Transpose (identity perm) are removed."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr, bypass_reason

NAME = "remove_noop"
OPS = ("Cast", "Reshape", "Transpose")


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx") or not node.input:
        return None
    x, y = node.input[0], node.output[0]
    if node.op_type == "Cast":
        if g.dtype(x) is not None and g.dtype(x) == attr(node, "to"):
            return Match([node])
    elif node.op_type == "Reshape":
        sx, sy = g.shape(x), g.shape(y)
        if sx is not None and sx == sy:
            return Match([node])
    elif node.op_type == "Transpose":
        perm = attr(node, "perm")
        sx = g.shape(x)
        if perm is not None and list(perm) == sorted(perm):
            return Match([node])
        if perm is None and sx is not None and len(sx) <= 1:
            return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    return bypass_reason(m, g)


def rewrite(m: Match, g) -> str:
    g.bypass(m.node, m.node.input[0], m.node.output[0])
    return f"no-op {m.node.op_type} removed"
