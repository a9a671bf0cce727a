"""Nodes that must stay float because a tensor they read or write holds -inf / inf / NaN on the
calibration data: an attention mask filled with -inf (``Where(pad, -inf, 0)``, PyTorch's
``masked_fill``) and the masked scores a Softmax reads. onnxruntime's calibrator would give such a
tensor an infinite range, hence a Q with an infinite scale (every value then dequantizes to NaN or
0); excluded, they stay float (fp16 layers) between the int8 layers and the masked scores keep
their -inf (the Softmax gives them weight 0, as in the float model).

So do nodes reading or writing a tensor with finite values below -65504 (beyond fp16; Hugging
Face's mask fill is float32's lowest, -3.4e38: a decoder's causal mask, a padding mask): its range
gives the Q a scale of about 1.3e36, every score rounds to the zero point and the attention becomes
a uniform average over the kept keys (onnxruntime computes exactly that); float, the fp16 layers
take the fill as a mask (fuse/masks.py) and the scores keep their values."""
from __future__ import annotations

from typing import Dict, List

import numpy as np
import onnx
from .. import file_weights

REASON = "its {what} '{t}' holds {kind} on the calibration data (an attention mask?): an int8 range cannot hold it"
HUGE = ("its {what} '{t}' holds {kind} on the calibration data (an attention mask fill?): an int8 range spanning "
        "it rounds every other value to one code")
FILL = -65504.0   # below fp16's lowest: a mask fill, not an activation
NONFINITE = ("NaN", "-inf", "inf")


def non_finite_nodes(model: onnx.ModelProto, samples: List[Dict[str, np.ndarray]]) -> Dict[str, str]:
    """{node name: reason} for every node reading or writing a float tensor that is not finite on
    ``samples`` (onnxruntime runs the float model with every float tensor as an output)."""
    import onnxruntime as ort
    from onnx import shape_inference
    if not samples:
        return {}
    inferred = shape_inference.infer_shapes(file_weights.inline(model))
    types = {vi.name: vi.type.tensor_type.elem_type for vi in
             list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    wanted = [o for n in m.graph.node for o in n.output
              if o and o not in have and types.get(o) == onnx.TensorProto.FLOAT]
    for t in wanted:
        m.graph.output.append(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # every tensor as written
    sess = ort.InferenceSession(file_weights.serialized(m), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    inputs = {i.name for i in sess.get_inputs()}
    bad: Dict[str, str] = {}
    for feed in samples:
        for name, v in zip(names, sess.run(None, {k: a for k, a in feed.items() if k in inputs})):
            v = np.asarray(v)
            if v.dtype.kind != "f" or not v.size or bad.get(name) in NONFINITE:   # the first non-finite kind stays
                continue
            if not np.isfinite(v).all():
                bad[name] = "NaN" if np.isnan(v).any() else "-inf" if (v == -np.inf).any() else "inf"
            elif name not in bad and float(v.min()) < FILL:
                bad[name] = f"{float(v.min()):.4g}"
    out: Dict[str, str] = {}
    for n in model.graph.node:
        for what, ts in (("output", n.output), ("input", n.input)):
            t = next((t for t in ts if t in bad), None)
            if t is not None and n.name not in out:
                out[n.name] = (REASON if bad[t] in NONFINITE else HUGE).format(what=what, t=t, kind=bad[t])
    return out
