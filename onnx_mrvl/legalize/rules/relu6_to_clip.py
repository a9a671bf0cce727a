"""Min(Max(x, a), b) and Max(Min(x, b), a) with scalar constants a <= b -> Clip(x, a, b)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, np_dtype, scalar

NAME = "relu6_to_clip"
OPS = ("Min", "Max")


def _split(node, g):
    """(tensor, constant scalar) of a binary Min/Max, or None."""
    if len(node.input) != 2:
        return None
    for k in (0, 1):
        v = scalar(g.const(node.input[1 - k]))
        if v is not None and not g.is_const(node.input[k]):
            if g.shape(node.input[1 - k]) not in ((), (1,)) and \
                    len(g.shape(node.input[1 - k]) or ()) > len(g.shape(node.input[k]) or ()):
                return None
            return node.input[k], v
    return None


def match(node, g) -> Optional[Match]:
    if node.op_type not in ("Min", "Max") or node.domain not in ("", "ai.onnx") or g.opset < 11:
        return None
    outer = _split(node, g)
    if outer is None:
        return None
    inner = g.producer.get(outer[0])
    want = "Max" if node.op_type == "Min" else "Min"
    if inner is None or inner.op_type != want or g.only_consumer(inner.output[0]) is not node:
        return None
    inn = _split(inner, g)
    if inn is None:
        return None
    lo, hi = (inn[1], outer[1]) if node.op_type == "Min" else (outer[1], inn[1])
    return Match([node, inner], {"x": inn[0], "lo": lo, "hi": hi})


def check(m: Match, g, target) -> Optional[str]:
    if m.data["lo"] > m.data["hi"]:
        return "lower bound above upper bound"
    sx, sy = g.shape(m.data["x"]), g.shape(m.node.output[0])
    if sx is None or sx != sy:
        return "the constants broadcast the tensor to another shape"
    return None


def rewrite(m: Match, g) -> str:
    node, inner = m.nodes
    x, lo, hi = m.data["x"], m.data["lo"], m.data["hi"]
    dt = np_dtype(g, x)
    g.remove(node)
    g.remove(inner)
    a = g.add_const(f"{node.name}/min", np.array(lo, dtype=dt))
    b = g.add_const(f"{node.name}/max", np.array(hi, dtype=dt))
    g.make("Clip", [x, a, b], [node.output[0]], near=inner, origin=m.origin,
           name=f"{node.name}/clip")
    return f"{inner.op_type}+{node.op_type} -> Clip({lo}, {hi})"
