"""Clip -> canonical Clip(x, min, max) with constant inputs (opset >= 11); one bound only ->
Max / Min; no bound -> removed. Below opset 11 (version conversion failed) the attribute form
is kept and only bound-less Clips are removed."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr, inp, np_dtype

NAME = "clip_canonical"
OPS = ("Clip",)
FLT_MAX = 3.4028234663852886e38


def match(node, g) -> Optional[Match]:
    if node.op_type != "Clip" or node.domain not in ("", "ai.onnx"):
        return None
    if g.opset < 11:
        lo, hi = attr(node, "min"), attr(node, "max")
        if lo is None and hi is None:
            return Match([node], {"lo": None, "hi": None, "legacy": True})
        return None
    lo_name, hi_name = inp(node, 1), inp(node, 2)
    lo = g.const(lo_name) if lo_name else None
    hi = g.const(hi_name) if hi_name else None
    if (lo_name and lo is None) or (hi_name and hi is None):
        return None  # dynamic bounds: leave
    scalars = lo is not None and hi is not None and lo.ndim == 0 and hi.ndim == 0
    lo = None if lo is None else float(lo.reshape(-1)[0])
    hi = None if hi is None else float(hi.reshape(-1)[0])
    # converters fill a missing bound with the float limits: treat those as absent
    lo = None if lo is not None and lo <= -FLT_MAX else lo
    hi = None if hi is not None and hi >= FLT_MAX else hi
    if scalars and lo is not None and hi is not None:
        return None  # already canonical
    return Match([node], {"lo": lo, "hi": hi})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    lo, hi = m.data["lo"], m.data["hi"]
    x, y = node.input[0], node.output[0]
    if lo is None and hi is None:
        if not g.bypass(node, x, y):
            g.remove(node)
            g.make("Identity", [x], [y], near=node, origin=m.origin)
            return "Clip without bounds -> Identity (graph input to output)"
        return "Clip without bounds removed"
    dt = np_dtype(g, x)
    g.remove(node)
    name = node.name
    if lo is not None and hi is not None:
        a = g.add_const(f"{node.name}/min", np.array(lo, dtype=dt))
        b = g.add_const(f"{node.name}/max", np.array(hi, dtype=dt))
        g.make("Clip", [x, a, b], [y], near=node, origin=m.origin, name=name)
        return f"Clip({lo}, {hi})"
    op, v = ("Max", lo) if lo is not None else ("Min", hi)
    c = g.add_const(f"{node.name}/{'min' if lo is not None else 'max'}", np.array(v, dtype=dt))
    g.make(op, [x, c], [y], near=node, origin=m.origin, name=name)
    return f"Clip with one bound -> {op}({v})"
