"""Constants of QDQ models: the fp32 value of a DequantizeLinear of constants, as onnxruntime
computes it. Shared by the int8 builders (qdq.py) and the float patterns (patterns.py), which take a
DQ of a constant as a constant operand."""
from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from ..graph_index import GraphIndex, attr


def dequantized_const(g: GraphIndex, dq: onnx.NodeProto) -> Optional[np.ndarray]:
    """DequantizeLinear of constants in fp32 as onnxruntime computes it, or None (not int8/uint8/int32)."""
    q = np.asarray(g.const(dq.input[0]))
    if q.dtype not in (np.int8, np.uint8, np.int32):
        return None
    s = np.asarray(g.const(dq.input[1]), np.float32)
    z = np.asarray(g.const(dq.input[2])) if len(dq.input) > 2 and dq.input[2] else np.zeros((), q.dtype)
    if s.size > 1:   # per axis
        axis = attr(dq, "axis", 1) % q.ndim
        shape = [-1 if i == axis else 1 for i in range(q.ndim)]
        s, z = s.reshape(shape), z.reshape(shape)
    return ((q.astype(np.int64) - z.astype(np.int64)).astype(np.float32) * s).astype(np.float32)


def const_dq(g: GraphIndex, t: str) -> Optional[onnx.NodeProto]:
    """The DequantizeLinear of constants that writes ``t`` (legalize keeps it for a QDQ Mul / Add), or None."""
    n = g.producer.get(t)
    if n is not None and n.op_type == "DequantizeLinear" and all(g.is_const(i) for i in n.input if i):
        return n
    return None


def constant_value(g: GraphIndex, t: str) -> Optional[np.ndarray]:
    """``t``'s value when it is a constant or a DequantizeLinear of constants (its fp32 dequantized
    value), else None."""
    if g.is_const(t):
        return np.asarray(g.const(t))
    dq = const_dq(g, t)
    return None if dq is None else dequantized_const(g, dq)


def shared_constant_dqs(g: GraphIndex, groups: list, claimed) -> list:
    """A DequantizeLinear of constants that several int8 groups read as their operand (each holds
    the dequantized value) and no group takes as a data input: the first of them absorbs it, so no
    dead DQ stays on the CPU. Returns the names taken (groups are updated in place)."""
    inputs = {t for grp in groups for t in grp.inputs}
    owner = {x.name: grp for grp in groups for x in grp.nodes}
    taken: list = []
    for grp in groups:
        for x in list(grp.nodes):
            for t in x.input:
                dq = const_dq(g, t) if t else None
                if dq is None or dq.name in claimed or dq.name in taken or t in inputs or t in g.output_set \
                        or dq.name in g.excluded or not all(u.name in owner for u in g.consumers.get(t, [])):
                    continue
                grp.nodes.append(dq)
                taken.append(dq.name)
    return taken
