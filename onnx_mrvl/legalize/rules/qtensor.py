"""Quantized tensors for the QOperator rules: where an int8/uint8 tensor's scale and zero point
are written, and the DequantizeLinear / QuantizeLinear nodes that make it float and back.

Not a rule: ``qlinear_to_qdq`` and ``qlinear_passthrough`` share it.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import onnx

from .base import inp, origin_of

QTYPES = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
FLOAT = onnx.TensorProto.FLOAT
MS = "com.microsoft"

# QLinear op -> (input index of the output scale, of the output zero point); -1: none (float output)
OUTPUT_QPARAMS = {
    ("", "QLinearConv"): (6, 7), (MS, "QLinearConv"): (6, 7), ("", "QLinearMatMul"): (6, 7), (MS, "QGemm"): (7, 8),
    (MS, "QLinearAdd"): (6, 7), (MS, "QLinearMul"): (6, 7), (MS, "QLinearConcat"): (0, 1),
    (MS, "QLinearSigmoid"): (3, 4), (MS, "QLinearLeakyRelu"): (3, 4), (MS, "QLinearSoftmax"): (3, 4),
    (MS, "QLinearGlobalAveragePool"): (3, 4), (MS, "QLinearAveragePool"): (3, 4),
    (MS, "QLinearWhere"): (7, 8),
}

# standard ops onnxruntime's QOperator format runs on int8 codes directly (Direct8BitOp, QMaxPool,
# QPad, QResize, QSplit, Gather): they move or select values, so DQ -> op -> Q with the input's
# scale and zero point computes the same codes (Resize: nearest only; Pad: its value dequantized)
PASS_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "MaxPool", "GlobalMaxPool", "Resize",
            "Pad", "Split", "Slice", "Gather", "DepthToSpace", "SpaceToDepth", "Identity", "Tile", "Expand")

# (scale name, zero point name or "") of a quantized tensor
QParams = Tuple[str, str]


def domain(node: onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def scalar_const(g, name: str) -> bool:
    """A one-element constant (an absent optional zero point counts)."""
    if not name:
        return True
    v = g.const(name)
    return v is not None and v.size == 1


def qparams(g, t: str) -> Union[QParams, str]:
    """The (scale, zero point) names of quantized tensor ``t``, read from the node that writes it
    (a QuantizeLinear, a QLinear op, or a pass-through op on a quantized tensor), or a reason."""
    p = g.producer.get(t)
    if p is None:
        return f"tensor '{t}' is an int8 graph input or initializer (its scale is not in the model)"
    key = (domain(p), p.op_type)
    if key == ("", "QuantizeLinear"):
        s, z = inp(p, 1), inp(p, 2)
        if attr_axis_quantizes(g, p):
            return f"QuantizeLinear '{p.name}' quantizes per axis (an activation takes one scale)"
    elif key in OUTPUT_QPARAMS:
        s, z = (inp(p, k) for k in OUTPUT_QPARAMS[key])
    else:
        if key[0] or p.op_type not in PASS_OPS or not p.input:
            return f"tensor '{t}' comes from {p.op_type} '{p.name}', which writes no scale"
        return qparams(g, p.input[0])
    if not s or not g.is_const(s) or not scalar_const(g, s) or not scalar_const(g, z):
        return f"{p.op_type} '{p.name}' has no constant scalar scale and zero point for '{t}'"
    return s, z


def attr_axis_quantizes(g, node) -> bool:
    v = g.const(inp(node, 1))
    return v is not None and v.size > 1


def dequantized(g, t: str, params: QParams, *, near, origin) -> str:
    """The float tensor ``DequantizeLinear(t, scale, zero point)``, with the provenance of ``t``'s
    producer (``origin`` when ``t`` has none); one per (tensor, scale) pair:
    an existing DQ of ``t`` with the same scale and zero point is reused (readers share it, as in
    onnxruntime's QDQ format, so ``Q -> DQ`` stays a pair)."""
    s, z = params
    for c in g.users(t):
        if c.op_type == "DequantizeLinear" and domain(c) == "" and c.input[0] == t and \
                same_param(g, inp(c, 1), s) and same_param(g, inp(c, 2), z) and g.alive(c):
            return c.output[0]
    out = float_like(g, t, f"{t}/dequantized")
    p = g.producer.get(t)
    if p is not None:   # the dequantization of t belongs to what wrote t (fuse absorbs it there)
        origin = origin_of(p)
    g.make("DequantizeLinear", [t, s] + ([z] if z else []), [out], near=near, origin=origin,
           name=g.fresh_node_name(f"{t}/DequantizeLinear"))
    return out


def quantize_into(g, y: str, out: str, params: QParams, *, near, origin) -> None:
    """``QuantizeLinear(y, scale, zero point) -> out`` (``out`` keeps its name and int8 type)."""
    s, z = params
    stem = out[: -len("_quantized")] if out.endswith("_quantized") else out
    # named as onnxruntime's QDQ quantizer names the Q of float tensor t (t_QuantizeLinear; the
    # QOperator quantizer names the int8 tensor t_quantized): compare maps the layer onto t
    g.make("QuantizeLinear", [y, s] + ([z] if z else []), [out], near=near, origin=origin,
           name=g.fresh_node_name(f"{stem}_QuantizeLinear"))


def same_param(g, a: str, b: str) -> bool:
    """Two scale (or zero point) inputs with one value (an absent zero point is 0)."""
    if a == b:
        return True
    if not a or not b:
        va = g.const(a or b)
        return va is not None and not np.any(va)   # an absent zero point is 0
    va, vb = g.const(a), g.const(b)
    return va is not None and vb is not None and va.dtype == vb.dtype and va.shape == vb.shape and \
        np.array_equal(va, vb)


def float_like(g, t: str, base: str) -> str:
    """A fresh float tensor name with ``t``'s shape."""
    out = g.fresh(base)
    shape = g.shapes.get(t)
    if shape is not None:
        g.set_shape(out, shape, FLOAT)
    else:
        g.dtypes[out] = FLOAT
    return out


def const_vector(g, name: str) -> Optional[np.ndarray]:
    v = g.const(name) if name else None
    return None if v is None else np.asarray(v).reshape(-1)
