"""QOperator models -> QDQ: each QLinear op becomes its exact QDQ equivalent, DequantizeLinear of
its quantized inputs -> the float op -> QuantizeLinear with its output scale and zero point, so the
QDQ import (fuse/qdq.py) takes it over, and what that import cannot take runs in float between
the Q/DQ pairs (onnxruntime's ``quantize_static(..., quant_format=QOperator)``, docs/legalize.md).

QLinearConv, QLinearMatMul (ONNX); QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearSigmoid,
QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool, QLinearWhere
(com.microsoft). com.microsoft's ``channels_last`` QLinearConv / QLinearAveragePool /
QLinearGlobalAveragePool (onnxruntime's NhwcTransformer in a model saved at ORT_ENABLE_ALL, its
default level: NHWC codes in and out, OIHW weights) become the NCHW op with Transposes of the codes
before its DequantizeLinear and after its QuantizeLinear (exact: they move integers), which
merge_transposes cancels against the Transposes onnxruntime put around it. Weights stay int8 behind a DequantizeLinear (per output channel along axis 0 for
Conv, per column for MatMul / Gemm), biases int32 behind one with scale ``s_x * s_w``; QGemm's
``alpha`` goes into the weight and bias scales (``Y = alpha * s_a * s_b * (A_q B_q + C_q)``, as
onnxruntime computes it). The int8 tensors between ops keep their names; each gets one shared
DequantizeLinear, as in the QDQ format.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import onnx

from .base import Match, attr, inp
from .qtensor import FLOAT, MS, OUTPUT_QPARAMS, dequantized, domain, quantize_into, scalar_const

NAME = "qlinear_to_qdq"
OPS = tuple(op for _, op in OUTPUT_QPARAMS)
REPORT_SKIPS = "QOperator int8"   # a refusal is shown in the node's decision (pipeline)

# op -> (float op, quantized activation operands as (data, scale, zero point) input indices,
#        weight operand (data, scale, zero point) or None, attributes copied (None: all))
UNARY = ((0, 1, 2),)
SPEC = {
    ("", "QLinearConv"): ("Conv", UNARY, (3, 4, 5), None),
    (MS, "QLinearConv"): ("Conv", UNARY, (3, 4, 5), ("auto_pad", "dilations", "group", "kernel_shape", "pads",
                                                      "strides")),
    ("", "QLinearMatMul"): ("MatMul", UNARY, (3, 4, 5), ()),
    (MS, "QGemm"): ("Gemm", UNARY, (3, 4, 5), ("transA", "transB")),
    (MS, "QLinearAdd"): ("Add", ((0, 1, 2), (3, 4, 5)), None, ()),
    (MS, "QLinearMul"): ("Mul", ((0, 1, 2), (3, 4, 5)), None, ()),
    (MS, "QLinearSigmoid"): ("Sigmoid", UNARY, None, ()),
    (MS, "QLinearLeakyRelu"): ("LeakyRelu", UNARY, None, ("alpha",)),
    (MS, "QLinearSoftmax"): ("Softmax", UNARY, None, ("axis",)),
    (MS, "QLinearGlobalAveragePool"): ("GlobalAveragePool", UNARY, None, ()),
    (MS, "QLinearAveragePool"): ("AveragePool", UNARY, None,
                                 ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides")),
    (MS, "QLinearWhere"): ("Where", ((1, 2, 3), (4, 5, 6)), None, ()),
    (MS, "QLinearConcat"): ("Concat", (), None, ("axis",)),   # Y_scale, Y_zp, then (X, scale, zp) each
}


def match(node, g) -> Optional[Match]:
    key = (domain(node), node.op_type)
    return Match([node], {"key": key}) if key in SPEC else None


def _operands(node, key) -> List[Tuple[int, int, int]]:
    if key == (MS, "QLinearConcat"):
        return [(k, k + 1, k + 2) for k in range(2, len(node.input), 3)]
    return list(SPEC[key][1])


def check(m: Match, g, target) -> Optional[str]:
    node, key = m.node, m.data["key"]
    if g.opset < 13:
        return f"opset {g.opset}: DequantizeLinear per axis needs opset 13 (the model kept its opset)"
    for d, s, z in _operands(node, key):
        if not inp(node, d):
            return f"input {d} of {node.op_type} '{node.name}' is missing"
        if not g.is_const(inp(node, s)) or not scalar_const(g, inp(node, s)) or \
                (inp(node, z) and (not g.is_const(inp(node, z)) or not scalar_const(g, inp(node, z)))):
            return f"{node.op_type} '{node.name}': input {d} has no constant per-tensor scale and zero point"
    w = _weight_spec(key)
    if w is not None:
        d, s, z = w
        for k in (s, z):
            if inp(node, k) and not g.is_const(inp(node, k)):
                return f"{node.op_type} '{node.name}': the scale / zero point of input {d} is not constant"
        if not g.is_const(inp(node, d)):
            if not scalar_const(g, inp(node, s)) or not scalar_const(g, inp(node, z)):
                return f"{node.op_type} '{node.name}': a non-constant B quantized per column"
        elif _weight_axis(g, node, key) is None:
            return f"{node.op_type} '{node.name}': weight scales of shape {g.const(inp(node, s)).shape} " \
                   f"fit neither one scale nor one per output channel"
    if key == (MS, "QGemm") and inp(node, 6) and not g.is_const(inp(node, 6)):
        return f"QGemm '{node.name}': C is not a constant"
    if key[1] == "QLinearConv" and inp(node, 8) and not g.is_const(inp(node, 8)):
        return f"QLinearConv '{node.name}': the bias is not a constant"
    if attr(node, "channels_last", 0) and not (g.shape(node.input[0]) or g.shape(node.output[0])):
        return f"{node.op_type} '{node.name}' is channels_last and its rank is not known"
    if key[1] == "QLinearSoftmax" and (attr(node, "opset", 13) or 13) < 13:
        rank = len(g.shape(node.input[0]) or ())
        if rank and (attr(node, "axis", 1) % rank) != rank - 1:
            return f"QLinearSoftmax '{node.name}' of opset < 13 over axis {attr(node, 'axis', 1)} (a 2-D coercion)"
    s, z = _out_params(node, key)
    if s:
        if not g.is_const(s) or not scalar_const(g, s) or (z and not (g.is_const(z) and scalar_const(g, z))):
            return f"{node.op_type} '{node.name}' has no constant per-tensor output scale and zero point"
        if not z and g.dtype(node.output[0]) not in (None, onnx.TensorProto.UINT8):
            return f"{node.op_type} '{node.name}': an int8 output without a zero point"
    return None


def _weight_spec(key):
    return SPEC[key][2]


def _out_params(node, key) -> Tuple[str, str]:
    s, z = OUTPUT_QPARAMS[key]
    return inp(node, s), inp(node, z)


def _weight_axis(g, node, key) -> Optional[int]:
    """The axis a constant weight's scales run along (None: they do not fit); -1 per tensor."""
    d, s, _ = SPEC[key][2]
    w, sc = g.const(inp(node, d)), g.const(inp(node, s))
    if sc.size == 1:
        return -1
    if key[1] == "QLinearConv":
        axis = 0
    elif key[1] == "QGemm":
        axis = 0 if attr(node, "transB", 0) else 1
    else:
        axis = w.ndim - 1
    return axis if sc.size == w.shape[axis] else None


def rewrite(m: Match, g) -> str:
    node, key = m.node, m.data["key"]
    op = SPEC[key][0]
    origin = m.origin
    inputs: List[str] = []
    rank = len(g.shape(node.input[0]) or g.shape(node.output[0]) or ()) if attr(node, "channels_last", 0) else 0
    if key[1] == "QLinearWhere":
        inputs.append(node.input[0])
    for d, s, z in _operands(node, key):
        t = node.input[d]
        if g.is_const(t):
            inputs.append(_dq_const(g, node, t, inp(node, s), inp(node, z), None, origin))
        else:
            if rank:    # NHWC codes -> NCHW codes
                t = _transposed(g, node, t, [0, rank - 1] + list(range(1, rank - 1)), origin)
            inputs.append(dequantized(g, t, (inp(node, s), inp(node, z)), near=node, origin=origin))
    keep = SPEC[key][3]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if keep is None or a.name in keep}
    if key[1] == "QLinearSoftmax":
        attrs["axis"] = int(attr(node, "axis", -1 if (attr(node, "opset", 13) or 13) >= 13 else 1))
    alpha = float(attr(node, "alpha", 1.0)) if key[1] == "QGemm" else 1.0
    if _weight_spec(key) is not None:
        inputs += _weights(g, node, key, alpha, origin)
    s, z = _out_params(node, key)
    out = node.output[0]
    g.remove(node)
    y = g.fresh(f"{out}/float") if s else out
    codes = g.fresh(f"{out}/nchw") if rank and s else out
    g.make(op, inputs, [y], near=node, origin=origin, name=node.name, **attrs)
    if s:
        quantize_into(g, y, codes, (s, z), near=node, origin=origin)
        if rank:    # NCHW codes -> NHWC codes
            g.make("Transpose", [codes], [out], near=node, origin=origin, name=f"{node.name}/nhwc",
                   perm=[0] + list(range(2, rank)) + [1])
        shape = g.shapes.get(out)
        if shape is not None and rank:
            shape = (shape[0], shape[-1]) + tuple(shape[1:-1])
        for t, dt in ((y, FLOAT), (codes, g.dtype(out))):
            if shape is not None:
                g.set_shape(t, shape, dt)
            else:
                g.dtypes[t] = dt
    return f"{node.op_type} -> DequantizeLinear, {op}, QuantizeLinear"


def _transposed(g, node, t: str, perm, origin) -> str:
    out = g.fresh(f"{t}/nchw")
    g.make("Transpose", [t], [out], near=node, origin=origin, name=g.fresh_node_name(f"{node.name}/nchw"), perm=perm)
    if g.shape(t) is not None:
        g.set_shape(out, [g.shape(t)[k] for k in perm], g.dtype(t))
    else:
        g.dtypes[out] = g.dtype(t)
    return out


def _dq_const(g, node, t: str, s: str, z: str, axis: Optional[int], origin) -> str:
    """DequantizeLinear of a constant (per tensor, or per ``axis`` with 1-D scales)."""
    out = g.fresh(f"{t}/dequantized")
    kw = {}
    if axis is not None and axis >= 0:
        kw["axis"] = axis
        for name, k in ((s, "s"), (z, "z")):
            if name and g.const(name).ndim != 1:
                new = g.add_const(f"{name}/1d", g.const(name).reshape(-1))
                s, z = (new, z) if k == "s" else (s, new)
    g.make("DequantizeLinear", [t, s] + ([z] if z else []), [out], near=node, origin=origin,
           name=g.fresh_node_name(f"{t}/DequantizeLinear"), **kw)
    g.set_shape(out, g.const(t).shape, FLOAT)
    return out


def _weights(g, node, key, alpha: float, origin) -> List[str]:
    """[weight] or [weight, bias] of a QLinearConv / QLinearMatMul / QGemm as DequantizeLinear outputs."""
    d, s, z = SPEC[key][2]
    w, ws, wz = node.input[d], inp(node, s), inp(node, z)
    if not g.is_const(w):     # QLinearMatMul of two activations
        return [dequantized(g, w, (ws, wz), near=node, origin=origin)]
    axis = _weight_axis(g, node, key)
    wscale = np.asarray(g.const(ws), np.float32)
    if alpha != 1.0:
        ws = g.add_const(f"{ws}/alpha", (wscale * np.float32(alpha)).astype(np.float32))
        wscale = g.const(ws)
    out = [_dq_const(g, node, w, ws, wz, axis, origin)]
    b = inp(node, 8) if key[1] == "QLinearConv" else (inp(node, 6) if key[1] == "QGemm" else "")
    if b:
        xs = np.float32(np.asarray(g.const(inp(node, 1))).reshape(-1)[0])
        bscale = (xs * wscale.reshape(-1)).astype(np.float32)
        bias = g.const(b)
        if bscale.size == 1:
            sname = g.add_const(f"{b}/scale", bscale.reshape(()))
            out.append(_dq_const(g, node, b, sname, "", None, origin))
        elif bias.ndim <= 2 and bias.size == bscale.size:   # [N] or [1, N]: per output channel
            flat = b if bias.ndim == 1 else g.add_const(f"{b}/1d", bias.reshape(-1))
            sname = g.add_const(f"{b}/scale", bscale)
            out.append(_dq_const(g, node, flat, sname, "", 0, origin))
        else:        # a full [M, N] C with per-column scales: its float value
            out.append(g.add_const(f"{b}/dequantized", (bias.astype(np.float32) * bscale).astype(np.float32)))
    return out


__all__ = ["NAME", "OPS", "match", "check", "rewrite"]
