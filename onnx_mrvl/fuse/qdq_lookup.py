"""int8 element-wise node groups as one table lookup (docs/fusion.md "int8", "Lookup").

A QDQ model writes an element-wise function of one int8 tensor as float ops between Q/DQ pairs:
``DQ(x) -> Sigmoid -> Q -> DQ`` (QLinearSigmoid in onnxruntime), SiLU as
``DQ(x) -> Sigmoid -> Q -> DQ -> Mul(DQ(x), .) -> Q -> DQ``, LeakyRelu, HardSwish, a standalone
BatchNorm's per-channel ``Mul``/``Add`` with their pairs, ... Every output code of such a group is
a function of the input code alone (per channel when a constant is per channel), so the group is
one int8 ``Lookup`` layer: ``q_y = table[c, q_x]`` with 256 entries per channel.

The table is what onnxruntime computes (lookup_table.py): the group's nodes run in onnxruntime's
CPU provider on the 256 input codes, as a session of the whole model runs them.

The group grows forward from its anchor in graph order over nodes whose inputs are all the input
tensor, group outputs or constants (scalars, or per channel along one axis, the same for all), and
ends at the last point where exactly one of its tensors is read outside it: a DequantizeLinear
output (the group's output, with that DQ's quantization).
"""
from __future__ import annotations

import heapq
from typing import List, Optional, Tuple, Union

import numpy as np
import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .lookup_table import lookup_table
from .qconst import const_dq, constant_value
from .qdq import activation_dq, only_reader as _only_reader, qattrs as _qattrs, qparams as _qparams

ELEMENTWISE = ("Sigmoid", "Tanh", "Relu", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Elu", "Selu",
               "Softplus", "Softsign", "Exp", "Neg", "Abs", "Erf", "Mul", "Add", "Sub", "Div", "PRelu",
               "BatchNormalization", "Pow", "Max", "Min", "Identity", "QuantizeLinear", "DequantizeLinear")
ANCHORS = tuple(op for op in ELEMENTWISE if op not in ("Identity", "QuantizeLinear", "DequantizeLinear"))
MAX_NODES = 32
CODES = 256
CHANNEL_AXIS = "channel_axis"   # the group's logical channel axis; lowering stores it last (not an op attribute)


def _per_channel_ok(c: np.ndarray, shape: List[int]) -> Optional[Tuple[Optional[int], int]]:
    """(None, 1) for a scalar; (axis, C) for a constant that varies along one axis only (broadcast
    to ``shape``: axis 1 of NCHW / [N, C, T] data, the last axis of channels-last data after a
    Transpose, ConvNeXt's layer scale); else None."""
    if c.size == 1:
        return None, 1
    if shape is None or len(shape) < 2 or c.ndim > len(shape):
        return None
    full = [1] * (len(shape) - c.ndim) + list(c.shape)
    axes = [i for i, d in enumerate(full) if d != 1]
    if len(axes) == 1 and full[axes[0]] == shape[axes[0]]:
        return axes[0], shape[axes[0]]
    return None


def _eligible(g: GraphIndex, u: onnx.NodeProto, inside: set, shape, taken: set, axis: Optional[int]):
    """(channel axis or None, the channel count its constants need: 1 for none), or None when ``u``
    cannot join the group (its constants vary along another axis than the group's ``axis``)."""
    if u.op_type not in ELEMENTWISE or u.name in taken or u.name in g.excluded or len(u.output) != 1 \
            or u.domain not in ("", "ai.onnx"):
        return None
    channels = 1
    for i in u.input:
        if not i or i in inside:
            continue
        value = constant_value(g, i)
        if value is None:
            return None
        pc = _per_channel_ok(value, shape)
        if pc is None or (pc[1] > 1 and u.op_type in ("QuantizeLinear", "DequantizeLinear")):
            return None
        if pc[1] > 1:
            if axis is not None and pc[0] != axis:
                return None
            axis, channels = pc
    return (axis, channels) if any(i in inside for i in u.input if i) else None


def build_lookup(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset(), order_index=None
                 ) -> Union[Group, str, None]:
    """The int8 Lookup group anchored at ``n``, a reason, or None (``n`` does not read a DQ)."""
    # the data input: the first, or a later one after a constant (PP-LCNet's ``Mul(scale, DQ(x))``)
    t = next((i for i in n.input if i and constant_value(g, i) is None), None) if n.input else None
    dq_in = activation_dq(g, t) if t else None
    if n.op_type not in ANCHORS or dq_in is None:
        return None
    qin = _qparams(g, dq_in)
    if isinstance(qin, str):
        return qin
    shape = g.shape(t)
    for i in n.input:
        value = constant_value(g, i) if i and i != t else None
        if value is not None and _per_channel_ok(value, shape) is None:
            return (f"its constant {list(np.shape(value))} is no scalar nor a vector along one axis of {shape} "
                    f"(a table has one row per channel of one axis)")
    index = order_index or {x.name: k for k, x in enumerate(g.nodes)}
    inside, members, channels, axis = {t}, [], 1, None
    best = None
    heap = [(index[n.name], n.name, n)]
    seen = {n.name}
    taken = set(claimed)
    while heap and len(members) < MAX_NODES:
        _, _, u = heapq.heappop(heap)
        e = _eligible(g, u, inside, shape, taken, axis)
        if e is None:
            continue
        members.append(u)
        if e[1] > 1:
            axis, channels = e
        inside.add(u.output[0])
        for r in g.consumers.get(u.output[0], []):
            if r.name not in seen and r.name in index:
                seen.add(r.name)
                heapq.heappush(heap, (index[r.name], r.name, r))
        end = _valid_end(g, members, inside - {t})
        if end is not None:
            best = (list(members), end, channels, axis)
    if best is None:
        return "no Q -> DQ pair ends the element-wise group (its output is not int8)"
    members, (q_out, dq_out), channels, axis = best
    if channels > 1 and (shape is None or len(shape) > 5):
        return f"a per-channel element-wise group on a {len(shape or [])}-D tensor (2-D to 5-D)"
    qout = _qparams(g, q_out)
    if isinstance(qout, str):
        return qout
    table = lookup_table(g, members, t, dq_in, q_out, qin, channels, axis)
    if isinstance(table, str):
        return table
    x, in_front = t, []
    q_in = g.producer.get(dq_in.input[0])
    names = {m.name for m in members}
    if q_in is not None and q_in.op_type == "QuantizeLinear" and _only_reader(g, dq_in.input[0], "DequantizeLinear") \
            and t not in g.output_set and all(r.name in names for r in g.consumers.get(t, [])) \
            and _qparams(g, q_in) == qin and g.is_float(q_in.input[0]) \
            and not {q_in.name, dq_in.name} & (set(g.excluded) | set(claimed)):
        x, in_front = q_in.input[0], [q_in, dq_in]   # the pair feeds this group alone: the layer quantizes
    const_dqs = []   # the DQs of constants only the group reads are absorbed with it
    for m in members:
        for i in m.input:
            d = const_dq(g, i) if i else None
            if d is not None and d not in const_dqs and all(r.name in names for r in g.consumers.get(i, [])):
                const_dqs.append(d)
    return Group("Lookup", "mrvl.lookup", members + in_front + const_dqs, [x], dq_out.output[0],
                 dict(_qattrs(qin, qout), **({CHANNEL_AXIS: axis} if channels > 1 else {})), {"T": table})


def _valid_end(g: GraphIndex, members: List[onnx.NodeProto], produced: set):
    """(Q, DQ) when exactly one produced tensor is read outside ``members`` and it is the output of
    a member DQ reading a member Q of the same quantization; else None."""
    names = {m.name for m in members}
    external = [o for o in produced if o in g.output_set or
                any(r.name not in names for r in g.consumers.get(o, []))]
    if len(external) != 1:
        return None
    dq = g.producer.get(external[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q = g.producer.get(dq.input[0])
    if q is None or q.op_type != "QuantizeLinear" or q.name not in names:
        return None
    if not any(m.op_type not in ("QuantizeLinear", "DequantizeLinear", "Identity") for m in members):
        return None
    if _qparams(g, q) != _qparams(g, dq) or isinstance(_qparams(g, q), str):
        return None
    return (q, dq) if members[-1] is dq else None   # the group ends at this DQ
