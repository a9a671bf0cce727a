"""Cross-layer equalization (Nagel et al. 2019, "Data-Free Quantization Through Weight Equalization
and Bias Correction"; AIMET's and TIDL's CLE) as an fp32 rewrite of the pre-processed model.

For two convolutions ``Conv1 -> f -> Conv2`` where ``f`` is positively homogeneous per channel
(nothing, Relu, LeakyRelu, MaxPool: ``f(x / s) = f(x) / s`` for ``s > 0``), output channel ``i``
of Conv1 is divided by ``s_i`` (its weights and bias) and the input channel ``i`` of Conv2
multiplied by ``s_i``: the function is unchanged. ``s_i = sqrt(r1_i / r2_i)``, with ``r1_i`` the
range of Conv1's output channel ``i`` and ``r2_i`` that of Conv2's input channel ``i``, gives both
the range ``sqrt(r1_i r2_i)``: channels whose weights (and so activations) are far larger than
their neighbours' no longer set the per-tensor activation scale alone. Chains (``Conv1 -> Conv2 ->
Conv3``) are equalized pairwise, repeated until the scales settle.

Not equalized (the rewrite would not be exact): a tensor between the two that has another reader
(a residual Add, a Concat), Clip with an upper bound (ReLU6: AIMET replaces it by Relu, which
changes the model; we do not), weights or biases that are no initializers or are shared.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper
from .. import file_weights

HOMOGENEOUS = ("Relu", "LeakyRelu", "MaxPool")
ITERATIONS = 20
TOL = 1e-3


def _attr(n: onnx.NodeProto, name: str, default):
    for a in n.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def pairs(model: onnx.ModelProto) -> List[Tuple[onnx.NodeProto, onnx.NodeProto]]:
    """(Conv1, Conv2) pairs that can be equalized exactly (module docstring)."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    readers: Dict[str, List[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}

    def own_const(name: str) -> bool:
        return name in inits and len(readers.get(name, [])) == 1

    out = []
    for c1 in g.node:
        if c1.op_type != "Conv" or not own_const(c1.input[1]) or (len(c1.input) > 2 and c1.input[2]
                                                                 and not own_const(c1.input[2])):
            continue
        t, c2 = c1.output[0], None
        for _ in range(4):
            rs = readers.get(t, [])
            if t in outputs or len(rs) != 1:
                break
            r = rs[0]
            if r.op_type == "Conv" and r.input[0] == t:
                c2 = r
                break
            if r.op_type not in HOMOGENEOUS or r.input[0] != t or len(r.output) != 1:
                break
            if r.op_type == "MaxPool" and len(r.output) > 1:
                break
            t = r.output[0]
        if c2 is not None and own_const(c2.input[1]):
            out.append((c1, c2))
    return out


def equalize(model: onnx.ModelProto) -> Tuple[onnx.ModelProto, int]:
    """(a copy of ``model`` with every pair of ``pairs`` equalized, the number of pairs)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    found = pairs(m)
    if not found:
        return m, 0
    inits = {t.name: t for t in m.graph.initializer}
    arr = {}

    def get(name: str) -> np.ndarray:
        if name not in arr:
            arr[name] = numpy_helper.to_array(inits[name]).astype(np.float64)
        return arr[name]

    for _ in range(ITERATIONS):
        moved = 0.0
        for c1, c2 in found:
            w1, w2 = get(c1.input[1]), get(c2.input[1])
            cout = w1.shape[0]
            groups = int(_attr(c2, "group", 1))
            cpg = w2.shape[1]                       # Conv2's input channels per group
            if cpg * groups != cout:
                continue
            r1 = np.abs(w1.reshape(cout, -1)).max(axis=1)
            opg = w2.shape[0] // groups             # Conv2's output channels per group
            # Conv2's input channel i: slot i % cpg of the output channels of group i // cpg
            w2g = np.abs(w2).reshape(groups, opg, cpg, -1)
            r2 = w2g.max(axis=(1, 3)).reshape(-1)
            ok = (r1 > 0) & (r2 > 0)
            s = np.ones(cout)
            s[ok] = np.sqrt(r1[ok] / r2[ok])
            arr[c1.input[1]] = w1 / s.reshape((-1,) + (1,) * (w1.ndim - 1))
            if len(c1.input) > 2 and c1.input[2]:
                arr[c1.input[2]] = get(c1.input[2]) / s
            sg = s.reshape(groups, 1, cpg, *([1] * (w2.ndim - 2)))
            arr[c2.input[1]] = (w2.reshape(groups, opg, cpg, *w2.shape[2:]) * sg).reshape(w2.shape)
            moved = max(moved, float(np.max(np.abs(np.log(s)))))
        if moved < TOL:
            break
    for name, a in arr.items():
        t = inits[name]
        t.CopyFrom(numpy_helper.from_array(a.astype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)), name))
    return m, len(found)


def check_exact(before: onnx.ModelProto, after: onnx.ModelProto, feeds, rtol: float = 1e-4) -> Optional[str]:
    """None when ``after`` computes what ``before`` does on ``feeds`` in onnxruntime (fp32, within
    ``rtol`` of max|ref|: only rounding differs), else a reason."""
    import onnxruntime as ort
    a = ort.InferenceSession(file_weights.serialized(before), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(file_weights.serialized(after), providers=["CPUExecutionProvider"])
    for k, feed in enumerate(feeds):
        for o, x, y in zip(a.get_outputs(), a.run(None, feed), b.run(None, feed)):
            err = float(np.abs(np.asarray(x, np.float64) - y).max()) / max(float(np.abs(x).max()), 1e-30)
            if not err <= rtol:
                return f"output '{o.name}' differs by {err:.2e} of max|ref| on sample {k}"
    return None
