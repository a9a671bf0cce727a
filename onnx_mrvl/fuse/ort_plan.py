"""Which QDQ node groups onnxruntime runs in float (docs/fusion.md "int8").

onnxruntime's QDQ transformer fuses ``DQ -> op -> Q`` into a QLinear* kernel only where its
selectors accept the group (for AveragePool it depends on the readers around it, not on the group
alone), and runs the rest as float ops between DequantizeLinear and QuantizeLinear; the two round
differently. ``ort_float_nodes`` asks onnxruntime itself: it optimizes the model as a default
session does (level ALL, CPU provider) and returns the names of the nodes of ``op_type`` that are
still that float op. Cached for the last model asked about."""
from __future__ import annotations

import os
import tempfile
from typing import Dict, FrozenSet, List

import onnx

_LAST: List = [None, {}]   # (the model last asked about, op type -> names): one fuse run at a time


def ort_float_nodes(model: onnx.ModelProto, op_type: str) -> FrozenSet[str]:
    if _LAST[0] is not model:
        _LAST[0], _LAST[1] = model, {}
    found: Dict[str, FrozenSet[str]] = _LAST[1]
    if op_type not in found:
        found[op_type] = _float_nodes(model, op_type)
    return found[op_type]


def _float_nodes(model: onnx.ModelProto, op_type: str) -> FrozenSet[str]:
    import onnxruntime as ort
    if not any(n.op_type == op_type for n in model.graph.node):
        return frozenset()
    with tempfile.TemporaryDirectory(prefix="mrvl_ort_plan_") as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL   # a default session's
        so.optimized_model_filepath = path
        so.log_severity_level = 3
        m = onnx.ModelProto()
        m.CopyFrom(model)
        del m.graph.value_info[:]   # onnxruntime infers them; fuse's own may be partial
        try:
            ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            optimized = onnx.load(path)
        except Exception:   # noqa: BLE001 - onnxruntime cannot load it: assume its QLinear kernels
            return frozenset()
    return frozenset(n.name for n in optimized.graph.node if n.op_type == op_type)   # also its NCHWc form
