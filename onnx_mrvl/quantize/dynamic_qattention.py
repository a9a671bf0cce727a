"""com.microsoft ``QAttention`` with calibration (``quantize_dynamic`` after onnxruntime's transformer
optimizer, docs/quantize.md "Dynamic int8 models").

The QAttention reads ``DynamicQuantizeLinear(x)``: its input's uint8 codes, scale and zero point,
computed per run. With calibration the DynamicQuantizeLinear becomes ``QuantizeLinear(x, s, z)`` with
the calibrated scale and zero point (DynamicQuantizeLinear's formula on the calibrated range), and its
scale / zero point outputs become those constants: the QAttention then reads static codes, which
onnxruntime runs as it is (the quantize stage's reference), and legalize's ``contrib_qattention``
decomposes into ``DQ(x_q) -> MatMul(DQ(W_q part)) -> Add(bias part)`` per Q / K / V, which the int8
import takes as int8-in / fp16-out layers (the MatMulInteger sums with the calibrated input scale).
Taken when every reader of the DynamicQuantizeLinear is a QAttention reading its three outputs as
input, scale and zero point, and the weights, their scales and zero points are constants.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .dynamic_layers import MS, Graph, dom

KEPT = ("QAttention (onnxruntime's fused int8 attention; legalize decomposes it after the calibrated "
        "rewrite): its Q / K / V projections run fp16 with dequantized weights ({why})")


def _why_not(g: Graph, n: onnx.NodeProto) -> str:
    """Why QAttention ``n`` cannot read calibrated static codes ('' when it can)."""
    ins = list(n.input) + [""] * (9 - len(n.input))
    p = g.producer.get(ins[0])
    if p is None or (dom(p), p.op_type) != ("", "DynamicQuantizeLinear"):
        return "its input is not a DynamicQuantizeLinear output"
    if ins[3] != p.output[1] or (ins[6] and ins[6] != p.output[2]):
        return "it does not read that DynamicQuantizeLinear's scale and zero point"
    if ins[8] or (len(n.output) > 1 and n.output[1]):
        return "it has past / present state"
    for idx, what in ((1, "weights"), (2, "bias"), (4, "weight scale")):
        if not ins[idx] or g.const(ins[idx]) is None:
            return f"its {what} are not constant"
    if ins[7] and g.const(ins[7]) is None:
        return "its weight zero point is not constant"
    for o in p.output:
        for u in g.users.get(o, []):
            if (dom(u), u.op_type) != (MS, "QAttention") or not _reads(u, p):
                return f"its DynamicQuantizeLinear '{p.name}' is also read by {u.op_type} '{u.name}'"
        if o in g.outputs:
            return f"its DynamicQuantizeLinear '{p.name}' writes a graph output"
    return ""


def _reads(u: onnx.NodeProto, p: onnx.NodeProto) -> bool:
    ins = list(u.input) + [""] * (7 - len(u.input))
    return ins[0] == p.output[0] and ins[3] == p.output[1] and ins[6] in ("", p.output[2])


def find(g: Graph) -> Tuple[List[onnx.NodeProto], Dict[str, str]]:
    """The QAttention nodes to calibrate, and node name -> why one stays fp16."""
    taken, kept = [], {}
    for n in g.model.graph.node:
        if (dom(n), n.op_type) == (MS, "QAttention"):
            why = _why_not(g, n)
            if why:
                kept[n.name] = KEPT.format(why=why)
            else:
                taken.append(n)
    return taken, kept


def inputs(g: Graph, nodes: List[onnx.NodeProto]) -> List[str]:
    """The float tensors whose calibrated ranges the rewrite needs (the DynamicQuantizeLinear inputs)."""
    return sorted({g.producer[n.input[0]].input[0] for n in nodes})


def rewrite(model: onnx.ModelProto, nodes: List[onnx.NodeProto], qp: Dict[str, Tuple]) -> None:
    """In ``model`` (the quantize stage's copy): each DynamicQuantizeLinear read by ``nodes`` ->
    QuantizeLinear with the calibrated (scale, zero point) of its input; its scale / zero point
    outputs become initializers of those names."""
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    dqls = {producer[n.input[0]].name: producer[n.input[0]] for n in nodes}
    out = []
    for n in graph.node:
        p = dqls.get(n.name)
        if p is None:
            out.append(n)
            continue
        s, z = qp[p.input[0]]
        graph.initializer.extend([numpy_helper.from_array(np.asarray(s, np.float32), p.output[1]),
                                  numpy_helper.from_array(np.asarray(z, np.uint8), p.output[2])])
        out.append(helper.make_node("QuantizeLinear", [p.input[0], p.output[1], p.output[2]], [p.output[0]],
                                    name=p.name))
    del graph.node[:]
    graph.node.extend(out)
    drop = {o for p in dqls.values() for o in p.output[1:]}
    keep_vi = [v for v in graph.value_info if v.name not in drop]
    del graph.value_info[:]
    graph.value_info.extend(keep_vi)


__all__ = ["KEPT", "find", "inputs", "rewrite"]
