"""The ``log`` activation: ``max(Log(x) + beta, alpha)``, one activation with a shift and a floor.

    Log(x)                                   -> log, alpha = -FLT_MAX, beta = 0 (log(0) = -inf)
    Log(x) [-> Add(., s)] [-> Max(., c)]     -> log, beta = s, alpha = c   (each the only reader of the
                                                one before, s and c one float constant each)

The shift and the floor are what legalize leaves after a log spectrum: ``log_range_scale``'s
``+ E ln 2`` (the power computed at 2^-E) and ``log_floor_clamp`` / ``log_eps_floor``'s
``max(., log eps)``. Hardware lowering (target.VECTOR_LOWERINGS["log"]): exponent extraction + a table
/ polynomial for log2 of the mantissa, times ln 2, one multiply-add for the shift, a max with the
floor -- inside the unit, so a floored log spectrum never stores the -inf of digital silence (an
unfloored one does, as onnxruntime: a value, not an overflow, docs/simulator.md). Specials as ONNX Log: 0 -> -inf (then
the floor), x < 0 -> NaN (kept by the max).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import onnx

from ..graph_index import GraphIndex
from .steps import FLT32_MAX, StepMatch


def _scalar_step(g: GraphIndex, y: str, op: str) -> Optional[Tuple[onnx.NodeProto, float]]:
    """``op(y, c)`` reading ``y`` alone, ``c`` one float constant keeping y's shape: (node, c)."""
    n = g.single_consumer(y)     # None when y is a graph output or read twice
    if n is None or n.op_type != op or n.domain not in ("", "ai.onnx") or len(n.input) != 2:
        return None
    if not n.output or not n.output[0]:
        return None
    other = n.input[1] if n.input[0] == y else n.input[0]
    if other == y or not g.is_const(other):
        return None
    c = np.asarray(g.const(other))
    if c.size != 1 or c.dtype.kind != "f" or g.shape(n.output[0]) != g.shape(y):
        return None
    return n, float(c.reshape(-1)[0])


def classify(g: GraphIndex, n: onnx.NodeProto, allowed) -> Optional[StepMatch]:
    """``n`` (a Log) as the log activation, with a following shift and floor; or None."""
    if n.op_type != "Log" or n.domain not in ("", "ai.onnx") or "log" not in allowed:
        return None
    if not n.output or not n.output[0] or not n.input or not g.is_float(n.output[0]):
        return None
    nodes, y, shift, floor = [n], n.output[0], 0.0, -FLT32_MAX
    add = _scalar_step(g, y, "Add")
    if add is not None and np.isfinite(add[1]):
        nodes.append(add[0])
        y, shift = add[0].output[0], add[1]
    mx = _scalar_step(g, y, "Max")
    if mx is not None and not np.isnan(mx[1]):
        nodes.append(mx[0])
        y, floor = mx[0].output[0], max(mx[1], -FLT32_MAX)
    return StepMatch(nodes, y, attrs={"activation": "log", "activation_alpha": floor, "activation_beta": shift})
