"""Flatten, Squeeze and Unsqueeze (attribute or input axes) -> Reshape with a static shape; so are a
Gather of one scalar index on an axis of size 1 (``x[0]`` of a batch of one: torchvision detection's
``images[0]``), a Gather whose constant indices read the whole axis in order (``arange(n)`` in any
index shape: the dynamo exporter's ``as_strided`` view after an adaptive pool, ``Reshape [-1] ->
Gather(arange(C) as [1, C, 1, 1])``) and a Split into one part (``unbind`` / ``chunk`` of a batch of
one)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, shape_const

NAME = "to_reshape"
OPS = ("Flatten", "Squeeze", "Unsqueeze", "Gather", "Split")


def match(node, g) -> Optional[Match]:
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Gather":
        sx, idx = g.shape(node.input[0]), g.const(node.input[1])
        axis = attr(node, "axis", 0)
        if sx is None or idx is None or not -len(sx) <= axis < len(sx):
            return None
        if idx.ndim == 0 and sx[axis] == 1:
            return Match([node])
        return Match([node]) if whole_axis_in_order(idx, sx[axis]) else None
    if node.op_type == "Split":
        if len(node.output) != 1:
            return None
        return Match([node])
    return Match([node]) if node.op_type in OPS else None


def whole_axis_in_order(idx, n) -> bool:
    """Integer indices that are 0, 1, ..., n-1 (negative ones counted from the end) in any shape."""
    if idx.dtype.kind not in "iu" or idx.ndim == 0 or idx.size != n:
        return False
    flat = idx.reshape(-1).astype(np.int64)
    return bool(np.array_equal(np.where(flat < 0, flat + n, flat), np.arange(n)))


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
