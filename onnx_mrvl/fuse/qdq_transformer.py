"""QDQ transformers and recurrent models: a QuantizeLinear -> DequantizeLinear pair on an activation
that no int8 layer absorbed (qdq.py) becomes one Mrvl ``Requantize`` layer in the region
(opset_int8_transformer.py; docs/fusion.md "int8 in transformers and recurrent models").

onnxruntime's quantizer writes such a pair after every op it knows (Softmax, Mul, Div, Transpose,
Reshape, LayerNormalization, the MatMul of two activations, ...); the float ops between the pairs
run as fp16 layers on the dequantized values, and the pair is the fake quantization onnxruntime
executes there. Rule: ``Q(x) -> DQ`` with scalar constant scale / zero point of one int8/uint8 type,
the Q read only by DQs of the same parameters, x a float activation of a static 2-D..5-D shape.
"""
from __future__ import annotations

from typing import List, Optional, Union

import numpy as np
import onnx

from .._graph import GraphIndex
from ..target import Target
from .groups import Group
from .patterns import tensor_reason

QTYPE_NAMES = {onnx.TensorProto.INT8: "int8", onnx.TensorProto.UINT8: "uint8"}


def pair_qparams(g: GraphIndex, n: onnx.NodeProto) -> Union[tuple, str]:
    """(scale, zero point, type name) of a Q or DQ node with scalar constant parameters, or a reason."""
    if len(n.input) < 2 or not g.is_const(n.input[1]) or (len(n.input) > 2 and n.input[2] and not g.is_const(n.input[2])):
        return f"{n.op_type} '{n.name}' has no constant scale and zero point"
    s = np.asarray(g.const(n.input[1]), np.float32)
    if len(n.input) > 2 and n.input[2]:
        z, qt = np.asarray(g.const(n.input[2])), QTYPE_NAMES.get(g.elem_type(n.input[2]))
    else:   # no zero point: 0 of the quantized tensor's type (uint8 for a Q without one)
        quantized = n.input[0] if n.op_type == "DequantizeLinear" else n.output[0]
        z, qt = np.zeros(1, np.int32), QTYPE_NAMES.get(g.elem_type(quantized) or onnx.TensorProto.UINT8)
    if s.size != 1 or z.size != 1:
        return f"{n.op_type} '{n.name}' quantizes per channel (an activation takes one scale)"
    if qt is None or not np.isfinite(s).all() or float(s.reshape(-1)[0]) <= 0:
        return f"{n.op_type} '{n.name}' is not an int8/uint8 quantization with a positive scale"
    return float(s.reshape(-1)[0]), int(z.reshape(-1)[0]), qt


def build_requantize(g: GraphIndex, q: onnx.NodeProto, target: Target) -> Union[Group, str]:
    """``Q(x) -> DQ`` as a Mrvl Requantize (see the module docstring), or the reason it stays on the CPU."""
    x = q.input[0]
    if g.is_const(x) or not g.is_float(x):
        return f"QuantizeLinear '{q.name}' quantizes a constant or a non-float tensor"
    qp = pair_qparams(g, q)
    if isinstance(qp, str):
        return qp
    if q.output[0] in g.output_set:
        return f"the int8 codes of QuantizeLinear '{q.name}' are a model output"
    readers = g.consumers.get(q.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "DequantizeLinear" or readers[0].name in g.excluded:
        return (f"QuantizeLinear '{q.name}' is read by {[r.op_type for r in readers]}, not by one "
                f"DequantizeLinear (the int8 codes leave the accelerator)")
    dq = readers[0]
    if pair_qparams(g, dq) != qp:
        return f"DequantizeLinear '{dq.name}' dequantizes with other parameters than QuantizeLinear '{q.name}'"
    reason = tensor_reason(g, x, dq.output[0], target, "a QuantizeLinear -> DequantizeLinear pair")
    if reason:
        return reason
    s, z, qt = qp
    attrs = dict(precision="int8", in_scale=s, in_zero_point=z, in_type=qt, out_scale=s, out_zero_point=z, out_type=qt)
    return Group("Requantize", "mrvl.requantize", [q, dq], [x], dq.output[0], attrs)


def materialize(m, grp: Group) -> None:
    """Emit the Requantize on its input's storage (element-wise: no layout change)."""
    src = grp.inputs[0]
    name, perm = m.loc[src]
    if src in m.flat:
        name, perm = m.get(src, None, for_mrvl=True, origin=grp.origin), None
    m._emit(grp, "Requantize", [name], dict(grp.attrs), perm)
    out = m.loc[grp.output][0]
    if name in m.label:
        m.label[out] = m.label[name]
