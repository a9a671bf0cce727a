"""The table of an int8 Lookup group (qdq_lookup.py): onnxruntime's own output code for each of the
256 input codes (per channel), computed as a session of the whole model computes the group.

onnxruntime fuses some ``DQ -> op -> Q`` steps of such a group into QLinear* kernels and runs others
in float (ort_plan.py records which, for the model as given). A chain ``DQ -> ops -> Q -> DQ -> ops
-> Q ...`` is split at its Q -> DQ pairs: each step is a function of the previous step's code, run
in its own small model, in float (optimizations off) when its ops (or the original nodes legalize
rewrote them from, by provenance) are float ops in the model, else with onnxruntime's fusions on,
and the steps' tables are composed. A group that is no chain (SiLU: the Mul reads the group's input
too) runs whole, in float when any of its ops is a float op there."""
from __future__ import annotations

import json
from typing import List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import file_weights
from ..graph_index import GraphIndex
from .qconst import const_dq
from ..ort_plan import OP_TYPES, float_nodes_of, ort_float_nodes
from ..legalize.rules.sub_div_const import DIVISOR_KEY
from ..provenance import get_origin
from .qdq import qparams

CODES = 256
QDQ = ("QuantizeLinear", "DequantizeLinear")


def lookup_table(g: GraphIndex, members, t: str, dq_in, q_out, qin, channels: int, axis: Optional[int] = None):
    """[channels, 256] int32 output codes (row c: channel c along logical ``axis``), or a reason."""
    floats = set().union(*(ort_float_nodes(g.model, op) for op in OP_TYPES))
    steps = _chain(g, members, dq_in)
    if steps is None:
        steps = [(dq_in, [m for m in members if m is not q_out and const_dq(g, m.output[0]) is None], q_out)]
    table = None
    for dq, nodes, q in steps:
        in_q = qparams(g, dq)
        is_float = [bool(n.name in floats or set(get_origin(n) or []) & floats) for n in nodes]
        step = _run(g, dq, nodes, q, in_q, channels, len(g.shape(t) or [1]), is_float, axis)
        if isinstance(step, str):
            return step
        if table is None:
            table = step
        else:   # compose: the previous step's output code indexes this step's table
            lo = -128 if in_q[2] == "int8" else 0
            rows = max(step.shape[0], table.shape[0])
            step, table = np.broadcast_to(step, (rows, CODES)), np.broadcast_to(table, (rows, CODES))
            table = np.take_along_axis(step, table - lo, axis=1)
    return np.ascontiguousarray(table, np.int32)


def value_table(g: GraphIndex, nodes, t: str, dq_in):
    """[1, 256] float32: the output of ``nodes`` (float element-wise ops of ``t`` = DQ(codes) and
    scalar constants, as onnxruntime runs them in the model: in float) for every input code, or a reason."""
    return _run(g, dq_in, nodes, None, qparams(g, dq_in), 1, len(g.shape(t) or [1]), [True] * len(nodes))


def _chain(g: GraphIndex, members, dq_in) -> Optional[List[Tuple]]:
    """[(DQ, ops, Q)] when the group is a chain of steps each reading only the previous step's DQ."""
    steps, dq, cur = [], dq_in, []
    inside = {dq_in.output[0]}
    for m in members:
        if m.op_type == "DequantizeLinear":
            if cur or not steps or m.input[0] != steps[-1][2].output[0]:
                return None
            dq, inside = m, {m.output[0]}
            continue
        if any(i and i not in inside and not g.is_const(i) and const_dq(g, i) is None for i in m.input):
            return None
        if m.op_type == "QuantizeLinear":
            steps.append((dq, cur, m))
            cur = []
            continue
        cur.append(m)
        inside.add(m.output[0])
    return steps if not cur and steps else None


def _runs_alike(model: onnx.ModelProto, nodes, is_float) -> bool:
    """Whether onnxruntime, optimizing the step's own model, leaves exactly the nodes in float that
    it leaves in float in the whole model (GELU: Div and Erf float, the Add and Muls its QLinearAdd /
    QLinearMul kernels): then the step runs with its fusions, else all in float."""
    try:
        small = set().union(*(v for k, v in float_nodes_of(model).items() if k in OP_TYPES))
    except Exception:   # noqa: BLE001 - onnxruntime refuses the step: the float run reports it
        return False
    return all((n.name in small) == f for n, f in zip(nodes, is_float) if n.op_type in OP_TYPES)


def _divisor(node) -> Optional[np.ndarray]:
    """The original divisor of a Mul that legalize's sub_div_const wrote for a Div by a constant
    (its ``mrvl.divisor`` metadata), or None."""
    raw = next((p.value for p in node.metadata_props if p.key == DIVISOR_KEY), None)
    if raw is None or node.op_type != "Mul" or len(node.input) != 2:
        return None
    d = json.loads(raw)
    return np.asarray(d["values"], dtype=d["dtype"]).reshape(d["shape"])


def _run(g: GraphIndex, dq, nodes, q, in_q, channels: int, rank: int, is_float: bool, axis: Optional[int] = None):
    import onnxruntime as ort
    lo = -128 if in_q[2] == "int8" else 0
    codes = np.arange(lo, lo + CODES)
    np_t = np.int8 if in_q[2] == "int8" else np.uint8
    # the codes along one axis, the channels along ``axis`` (the constants broadcast along it). The
    # codes go last (channels-last data: next to last), so that onnxruntime's element-wise kernels run
    # spans of 256 (or of the channels) as in the model: a span of one value ([1, 1, 256, 1]) takes
    # MLAS's scalar QLinearAdd, which rounds ties otherwise than its vector kernel (PP-OCRv6 det's
    # U8 GELU: 1 + erf at code 85 gave 84 here, 85 in the model)
    if axis is None or channels == 1:
        a, b = (rank - 2, rank - 1) if rank >= 2 else (0, 0)
    else:
        a = axis % rank
        b = rank - 1 if a != rank - 1 else rank - 2
    dims = [1] * rank
    if rank == 1:
        x = codes
    else:
        dims[a], dims[b] = channels, CODES
        x = np.broadcast_to(np.expand_dims(codes, [i for i in range(rank) if i != b]), dims)
    x = np.ascontiguousarray(x, np_t)
    inits, copies = {}, []
    const_dqs = []
    for node in nodes:   # a DQ of constants feeding a step: part of the step's model (onnxruntime fuses it)
        for i in node.input:
            d = const_dq(g, i) if i else None
            if d is not None and d not in const_dqs:
                const_dqs.append(d)
    for node in const_dqs + [dq] + list(nodes) + ([q] if q is not None else []):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        if node is dq:
            copy.input[0] = "codes"
        for i in node.input:
            if i and i not in inits and g.is_const(i) and (node is not dq or i != dq.input[0]):
                inits[i] = numpy_helper.from_array(np.asarray(g.const(i)), i)
        divisor = _divisor(node)
        if divisor is not None:      # legalize's Mul by 1 / c of the model's Div by c: the Div again
            copy.op_type, copy.input[1] = "Div", f"{node.input[1]}__divisor"
            inits[copy.input[1]] = numpy_helper.from_array(divisor, copy.input[1])
        copies.append(copy)
    opset = g.opset
    elem = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8}
    out = helper.make_tensor_value_info(nodes[-1].output[0], onnx.TensorProto.FLOAT, None) if q is None else \
        helper.make_tensor_value_info(q.output[0], elem[qparams(g, q)[2]], None)   # q None: fp32 values
    graph = helper.make_graph(copies, "lookup_table", [helper.make_tensor_value_info("codes", elem[in_q[2]], list(x.shape))],
                              [out], list(inits.values()))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 13))])
    model.ir_version = 8
    so = ort.SessionOptions()
    fused = not any(is_float) or _runs_alike(model, nodes, is_float)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL if fused else \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        y = ort.InferenceSession(file_weights.serialized(model), so, providers=["CPUExecutionProvider"]).run(
            None, {"codes": x})[0]
    except Exception as exc:   # noqa: BLE001 - onnxruntime refuses the group: it stays on the CPU
        return f"onnxruntime cannot run the element-wise group ({type(exc).__name__}: {str(exc)[:120]})"
    y = np.asarray(y).astype(np.int32 if q is not None else np.float32)
    if rank == 1:
        return y.reshape(1, CODES)
    return np.ascontiguousarray(np.moveaxis(y.reshape(dims), (a, b), (0, 1)).reshape(channels, CODES))
