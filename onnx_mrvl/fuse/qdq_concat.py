"""int8 Concat: ``DQ(a_0), DQ(a_1), ... -> Concat -> Q -> DQ`` as one int8 Concat (docs/fusion.md "int8").

Each input keeps its own quantization (``in_scales`` / ``in_zero_points``, one type); the layer
requantizes every input code to the output's, ``q_y = Q_out(DQ_in_i(q_i))`` in fp32, which is what
onnxruntime computes for the group (its QLinearConcat builds exactly that table per input whose
quantization differs, and runs the float Concat between DQ and Q the same way).
"""
from __future__ import annotations

from typing import Union

import onnx

from ..graph_index import GraphIndex
from ..target import Target
from .groups import Group
from .patterns import build_concat
from .qdq import only_reader, qattrs, qparams


def build_concat_int8(g: GraphIndex, n: onnx.NodeProto, target: Target, claimed=frozenset()) -> Union[Group, str, None]:
    dqs = [g.producer.get(t) for t in n.input]
    if not n.input or any(d is None or d.op_type != "DequantizeLinear" or g.is_const(d.input[0]) for d in dqs):
        return None
    qins = [qparams(g, d) for d in dqs]
    bad = next((q for q in qins if isinstance(q, str)), None)
    if bad:
        return bad
    grp = build_concat(g, n, target)
    if isinstance(grp, str):
        return grp
    if grp.weights or len(set(n.input)) != len(n.input):
        return "an int8 Concat of constants or of one tensor twice"
    q_out = only_reader(g, n.output[0], "QuantizeLinear")
    dq_out = only_reader(g, q_out.output[0], "DequantizeLinear") if q_out is not None else None
    if dq_out is None:
        return f"the output of Concat '{n.name}' is not read by one QuantizeLinear -> DequantizeLinear alone"
    qout = qparams(g, q_out)
    if isinstance(qout, str) or qparams(g, dq_out) != qout:
        return f"QuantizeLinear '{q_out.name}' is not followed by a DequantizeLinear of the same scale"
    if len({q[2] for q in qins} | {qout[2]}) != 1:
        return "an int8 Concat of inputs of different quantized types"
    if {q_out.name, dq_out.name} & (set(g.excluded) | set(claimed)):
        return "its QuantizeLinear/DequantizeLinear is excluded by the user or taken by another layer"
    attrs = dict(grp.attrs, **qattrs(qins[0], qout), in_scales=[q[0] for q in qins],
                 in_zero_points=[q[1] for q in qins])
    return Group("Concat", "mrvl.concat", [n, q_out, dq_out], list(n.input), dq_out.output[0], attrs, {})
