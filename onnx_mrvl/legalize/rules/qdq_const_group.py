"""``Q(op(DQ(c1), DQ(c2), ...))`` of constants -> the codes onnxruntime computes for that group
(docs/legalize.md rule 1').

A QDQ model can compute an int8 tensor from constants alone: Deformable-DETR's first decoder layer
takes its query embeddings as learned constants (zero targets), so its attention-weight projection,
the bias Add and the Softmax over the sampling points are ``DQ -> MatMul -> Q -> DQ -> Add -> Q ->
DQ -> Softmax -> Q`` of initializers. onnxruntime's constant folding skips those DequantizeLinears,
so its optimized plan computes the chain at run time in its own arithmetic (a float MatMul between
DQ and Q, a uint8 ``QLinearSoftmax`` with its exp table after the S8 -> U8 rewrite, ...);
``fold_constants`` evaluated the ops one by one in fp32 (ONNX semantics), which rounds differently:
82% of the Softmax's codes equal to onnxruntime's, the rest one step off, and 41-48% of the class
logits after them.

Here each group ``op -> Q`` whose inputs are constants or DequantizeLinears of constants is folded
at its Q by running onnxruntime's optimized session (level ALL, CPU, as a default session) on the
group alone, with a DequantizeLinear after the Q (the Q -> DQ pair the model has, which the S8 -> U8
rewrite needs; a Q output that is a graph output would keep the group unfused). Codes an earlier
group folded are fed as ``Q(their dequantized values)`` when onnxruntime computes them at run time
(as initializers it would fold this group in float); when onnxruntime's own constant folding folded
that earlier group (e.g. a DequantizeLinear of an initializer straight into a Softmax) they stay
initializers, as in its plan. The codes are that run's, exact. ``fold_constants`` leaves the
DequantizeLinears of such groups alone (``const_group``) so the group is still there to fold. The
folded Q output is an initializer; the op and the DequantizeLinears only it read go.
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper

from ... import file_weights
from .base import Match

NAME = "qdq_const_group"
OPS = None
SKIP = {"QuantizeLinear", "DequantizeLinear", "Constant", "Shape", "Size"}


def _const_dq(g, name: str) -> Optional[onnx.NodeProto]:
    p = g.producer.get(name)
    if p is None or p.op_type != "DequantizeLinear" or p.domain not in ("", "ai.onnx"):
        return None
    return p if all(g.is_const(i) for i in p.input if i) else None


def const_group(node, g) -> Optional[onnx.NodeProto]:
    """The QuantizeLinear of ``node``'s group when ``node`` (a default-domain op, no subgraph, one
    output) is read by that Q alone (constant scale / zero point, its output no graph output) and
    every input of ``node`` is a constant or a DequantizeLinear of constants, one at least; else None."""
    from .fold_constants import NON_DETERMINISTIC, in_condition_cone
    if node.domain not in ("", "ai.onnx") or node.op_type in SKIP or node.op_type in NON_DETERMINISTIC \
            or len(node.output) != 1 or node.name in getattr(g, "qdq_const_group_failed", ()) \
            or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return None
    users = g.users(node.output[0])
    if len(users) != 1 or users[0].op_type != "QuantizeLinear" or users[0].input[0] != node.output[0] \
            or node.output[0] in g.outputs or users[0].output[0] in g.outputs:
        return None
    q = users[0]
    if len(q.input) < 2 or not all(g.is_const(i) for i in q.input[1:] if i):
        return None
    ins = [i for i in node.input if i]
    if not ins or not all(g.is_const(i) or _const_dq(g, i) is not None for i in ins):
        return None
    if all(g.is_const(i) for i in ins) or in_condition_cone(node, g):   # fold_constants' / kept, as there
        return None
    from .qdq_double_pair import double_pair_head
    if double_pair_head(q, g):   # two pairs back to back: qdq_double_pair merges them first, as onnxruntime
        return None
    return q


def match(node, g) -> Optional[Match]:
    q = const_group(node, g)
    return Match([node], {"q": q}) if q is not None else None


def _group_model(node, q, g) -> onnx.ModelProto:
    dqs: List[onnx.NodeProto] = []
    for i in node.input:   # once each: a Concat of copies (expand_to_concat) reads one DQ many times
        if i and not g.is_const(i) and g.producer[i] not in dqs:
            dqs.append(g.producer[i])
    computed = getattr(g, "qdq_const_group_folded", set())   # codes the model computes at run time
    consts = sorted({i for n in dqs + [node, q] for i in n.input if i and g.is_const(i)} - computed)
    fed = sorted({d.input[0] for d in dqs} & computed)
    out_dq = helper.make_node("DequantizeLinear", [q.output[0]] + list(q.input[1:]), ["__codes_dq"], name="__codes_dq")
    for a in q.attribute:
        if a.name == "axis":
            out_dq.attribute.append(a)
    nodes = []
    for n in dqs + [node, q]:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        del c.metadata_props[:]
        nodes.append(c)
    reader = {d.input[0]: d for d in dqs}
    pre = [helper.make_node("QuantizeLinear", [f"{t}__float"] + list(reader[t].input[1:]), [t], name=f"{t}__q",
                            **({"axis": a.i} if (a := next((a for a in reader[t].attribute if a.name == "axis"), None))
                               else {})) for t in fed]
    graph = helper.make_graph(pre + nodes + [out_dq], "qdq_const_group",
                              [helper.make_tensor_value_info(f"{t}__float", onnx.TensorProto.FLOAT,
                                                             list(np.shape(g.const(t)))) for t in fed],
                              [helper.make_empty_tensor_value_info("__codes_dq")],
                              [onnx.numpy_helper.from_array(np.asarray(g.const(c)), c) for c in consts])
    m = helper.make_model(graph, opset_imports=list(g.model.opset_import))
    m.ir_version = max(g.model.ir_version, 8)
    return m


def codes_of(node, q, g) -> Tuple[np.ndarray, bool]:
    """(onnxruntime's codes of ``q``, whether its plan computes them at run time: False when its own
    constant folding folded the group, whose codes then stay an initializer for the next group); see
    the module docstring."""
    import tempfile
    import onnxruntime as ort
    from ... import ort_plan
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 4
    model = _group_model(node, q, g)
    feeds = {}
    for n in model.graph.node[:len(model.graph.input)]:   # the Qs of the fed codes: their dequantized values
        feeds[n.input[0]] = _dequantized(g, n)
    with tempfile.TemporaryDirectory(prefix="mrvl_const_group_") as tmp:
        so.optimized_model_filepath = os.path.join(tmp, "plan.onnx")
        y = ort_plan.session(file_weights.serialized(model), so).run(None, feeds)[0]
        plan = onnx.load(so.optimized_model_filepath)
    run_time = any(n.op_type not in ("DequantizeLinear", "QuantizeLinear") for n in plan.graph.node)
    scale = np.asarray(g.const(q.input[1]), np.float64)
    zp = np.asarray(g.const(q.input[2]) if len(q.input) > 2 and q.input[2] else np.zeros((), np.uint8))
    axis = next((a.i for a in q.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and y.ndim:
        shape = [1] * y.ndim
        shape[axis % y.ndim] = scale.size
        scale, zpb = scale.reshape(shape), zp.astype(np.int64).reshape(shape)
    else:
        zpb = zp.astype(np.int64)
    info = np.iinfo(zp.dtype)
    return np.clip(np.rint(np.asarray(y, np.float64) / scale) + zpb, info.min, info.max).astype(zp.dtype), run_time


def _dequantized(g, q) -> np.ndarray:
    """The fp32 values whose Q (``q``, one of the group model's) gives back the folded codes."""
    codes = np.asarray(g.const(q.output[0]))
    scale = np.asarray(g.const(q.input[1]), np.float32)
    zp = np.asarray(g.const(q.input[2])) if len(q.input) > 2 and q.input[2] else np.zeros((), codes.dtype)
    axis = next((a.i for a in q.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and codes.ndim:
        shape = [1] * codes.ndim
        shape[axis % codes.ndim] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return ((codes.astype(np.int32) - zp.astype(np.int32)).astype(np.float32) * scale).astype(np.float32)


def check(m: Match, g, target) -> Optional[str]:
    try:
        m.data["codes"], m.data["run_time"] = codes_of(m.node, m.data["q"], g)
    except Exception as exc:   # noqa: BLE001 - onnxruntime raises several types
        if not hasattr(g, "qdq_const_group_failed"):   # fold_constants then folds it op by op, as before
            g.qdq_const_group_failed = set()
        g.qdq_const_group_failed.add(m.node.name)
        return f"onnxruntime cannot run the constant group: {type(exc).__name__}: {str(exc)[:160]}"
    return None


def rewrite(m: Match, g) -> str:
    node, q = m.node, m.data["q"]
    dqs = list({id(p): p for p in (g.producer[i] for i in node.input if i and not g.is_const(i))}.values())
    out = q.output[0]
    g.remove(q)
    g.set_const(out, m.data["codes"])
    if not hasattr(g, "qdq_const_group_folded"):
        g.qdq_const_group_folded = set()
    if m.data["run_time"]:   # computed at run time in onnxruntime's plan: the next group is fed them
        g.qdq_const_group_folded.add(out)
    g.remove(node)
    for d in dqs:
        if not g.users(d.output[0]) and d.output[0] not in g.outputs:
            g.remove(d)
    return f"{node.op_type} -> {q.name}: onnxruntime's codes of the constant group -> initializer {out}"
