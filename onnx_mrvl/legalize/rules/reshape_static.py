"""Reshape gets an explicit static shape initializer (its 0 and -1 resolved, allowzero kept)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Contradiction, Match, attr, shape_const

NAME = "reshape_static"
OPS = ("Reshape",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
        return None
    shape = g.const(node.input[1])
    if shape is not None and np.all(shape > 0):
        return None  # already explicit
    if shape is not None and attr(node, "allowzero", 0) and np.all(shape >= 0):
        return None  # zeros are literal sizes
    return Match([node], {"given": None if shape is None else [int(v) for v in shape]})


def _resolve(given, sx, allowzero):
    out = [int(sx[k]) if (v == 0 and not allowzero) else v for k, v in enumerate(given)]
    if -1 in out:
        known = int(np.prod([v for v in out if v != -1]))
        total = int(np.prod(sx))
        if known == 0 or total % known:
            return None
        out[out.index(-1)] = total // known
    return out


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    sy = g.shape(node.output[0])
    sx = g.shape(node.input[0])
    given = m.data["given"]
    if given is not None and sx is not None:
        if not attr(node, "allowzero", 0) and any(v == 0 and k >= len(sx) for k, v in enumerate(given)):
            return Contradiction(f"shape {given} copies (0) an axis the rank-{len(sx)} input {list(sx)} lacks")
        shape = _resolve(given, sx, attr(node, "allowzero", 0))
        if shape is None:
            return f"shape {given} does not fit input {list(sx)}"
    elif sy is not None:
        shape = list(sy)
    else:
        return "output shape is not static"
    if sy is not None and list(sy) != shape:
        return f"resolved shape {shape} differs from the inferred {list(sy)}"
    if 0 in shape and not attr(node, "allowzero", 0):
        return "zero-sized dimension with allowzero=0"
    m.data["shape"] = shape
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    g.set_input(node, 1, shape_const(g, node, m.data["shape"]))
    # allowzero only matters for zeros in the shape, which are now literal sizes either way
    return f"Reshape shape {m.data['given'] or 'computed'} -> {m.data['shape']}"
