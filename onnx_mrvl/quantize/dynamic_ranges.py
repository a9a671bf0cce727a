"""The calibrated ranges of a dynamic-int8 model's tensors (``dynamic_calibrated.py``): onnxruntime
runs the dynamic model with the tensors as extra outputs on every sample, min / max over all."""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import numpy as np
import onnx
from onnx import helper

from .. import file_weights
from ..errors import UsageError
from .static import onnxruntime_failure


def ort_failure(step: str):
    """onnxruntime failing on the user's model: an ``UnsupportedError`` that says what to do."""
    return onnxruntime_failure(f"onnxruntime could not {step}",
                               "convert without calibration (the dynamic layers then run as fp16 layers with "
                               "dequantized weights)")


def tensor_ranges(model: onnx.ModelProto, tensors: List[str], samples, derived: Dict[str, Tuple[str, np.ndarray]]
            ) -> Tuple[Dict[str, Tuple[float, float]], list, Dict[str, int]]:
    """min / max of ``tensors`` over ``samples`` (onnxruntime, the tensors as extra outputs), the
    model outputs of every sample and each tensor's rank. ``derived``: name -> (tensor, bias): the range of tensor - bias
    (a fused MatMul's result before its bias)."""
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in tensors
                          if t not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with ort_failure("run the dynamic model with the calibrated tensors as outputs"):
        sess = ort.InferenceSession(file_weights.serialized(m), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    n_out = len(model.graph.output)
    lo = {t: math.inf for t in tensors}
    hi = {t: -math.inf for t in tensors}
    outs, ranks = [], {}
    for feed in samples:
        with ort_failure("run the dynamic model on a calibration sample"):
            res = dict(zip(names, sess.run(None, feed)))
        outs.append([res[o.name] for o in model.graph.output[:n_out]])
        for t in tensors:
            v = res[t]
            ranks[t] = v.ndim
            if v.size and not np.isfinite(v).all():
                raise UsageError(f"tensor '{t}' holds NaN/inf on a calibration sample",
                                 hint="calibrate on inputs the model computes finite values for")
            if v.size:
                lo[t], hi[t] = min(lo[t], float(v.min())), max(hi[t], float(v.max()))
        for t, (base, bias) in derived.items():
            v = (res[base] - bias).astype(np.float32)
            if v.size:
                lo[t], hi[t] = min(lo.get(t, math.inf), float(v.min())), max(hi.get(t, -math.inf), float(v.max()))
    empty = [t for t in list(tensors) + list(derived) if lo[t] > hi[t]]
    if empty:
        raise UsageError(f"tensor(s) {empty[:4]} were empty on every calibration sample: no range to calibrate",
                         hint="calibrate on inputs of the shapes the model runs on")
    return {t: (lo[t], hi[t]) for t in list(tensors) + list(derived)}, outs, ranks



__all__ = ["ort_failure", "tensor_ranges"]
