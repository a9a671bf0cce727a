"""int8 mode of the Mrvl Conv2D, FC, pools, Resize and Sum2D: the attributes a quantized layer
carries and the reference body around the float one (docs/fusion.md "int8", docs/simulator.md
"int8 layers"). Pools and Resize carry no weights; Sum2D's second operand has ``in2_*``.

A quantized layer reads and writes float tensors in the graph; its attributes say how it sees
them: the input is quantized with (``in_scale``, ``in_zero_point``, ``in_type``) exactly as
ONNX QuantizeLinear does, the int8 kernel ``W`` (OHWI / OI) has one scale per output channel
(``weight_scales``) and, for asymmetric weights, one zero point per output channel
(``weight_zero_points``, int8 values; absent: 0), the int32 bias has scale ``in_scale * weight_scales``, and the
output is requantized to (``out_scale``, ``out_zero_point``, ``out_type``) and given back as
its dequantized value. The reference body is that QuantizeLinear -> DequantizeLinear chain
around the float body, so a fused model still runs in plain onnxruntime.
"""
from __future__ import annotations

from typing import Callable, List

import numpy as np
import onnx
from onnx import helper

INT8_ATTRS = ("precision", "in_scale", "in_zero_point", "in_type", "out_scale", "out_zero_point",
              "out_type", "weight_scales")
INT8_POOL_ATTRS = INT8_ATTRS[:-1]   # MaxPool2D / GlobalAvgPool2D / GlobalMaxPool2D: no weights
# Sum2D: operand B's quantization, onnxruntime's arithmetic (requant), a QDQ Sub (subtract: 1 A - B, 2 B - A)
INT8_SUM_ATTRS = INT8_POOL_ATTRS + ("in2_scale", "in2_zero_point", "in2_type", "requant", "subtract")
# Conv2D / FC: per-output-channel weight zero points (absent: 0; int8 codes, uint8 weights as q - 128)
WEIGHT_ZP = "weight_zero_points"
ALL_INT8_ATTRS = INT8_SUM_ATTRS + ("weight_scales", WEIGHT_ZP)
# Conv2D / FC int8_in: the Q -> DQ after its float chain, applied in its epilogue (fuse/qdq_int8_in.py)
OUTQ_ATTRS = ("outq_scale", "outq_zero_point", "outq_type", "post_ops", "post_values", "post_sizes")
QTYPES = {"int8": onnx.TensorProto.INT8, "uint8": onnx.TensorProto.UINT8}
QRANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def is_int8(attrs: dict) -> bool:
    return attrs.get("precision", "fp16") == "int8"


INT8_IN = "int8_in"   # Conv2D / FC: int8 input and weights, fp16 output (fuse/qdq_int8_in.py)


def is_int8_in(attrs: dict) -> bool:
    return attrs.get("precision", "fp16") == INT8_IN


def _const(name: str, values, dtype, dims) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, dtype, dims, values))


def _rename(nodes: List[onnx.NodeProto], ins: dict, outs: dict) -> List[onnx.NodeProto]:
    for n in nodes:
        for i, t in enumerate(n.input):
            if t in ins:
                n.input[i] = ins[t]
        for i, t in enumerate(n.output):
            if t in outs:
                n.output[i] = outs[t]
    return nodes


def _weight_dq(a, o: int, explicit: bool) -> List[onnx.NodeProto]:
    """DQ(W) = (W - z_w) * s_w per output channel, ``z_w`` the weight zero points; ``explicit``: [O]
    zeros when there are none, as quantizers write it. onnxruntime fuses such a DQ -> Conv -> Q into
    QLinearConv (as it runs the int8 layer's model; without the zero point it runs the body's float
    Conv), and its session.x64quantprecision rewrite of int8 weights to uint8 gives a per-channel DQ
    without one a scalar zero point its DequantizeLinear refuses. An int8-in Conv's body keeps none:
    onnxruntime runs the model's layer as a float Conv (with one it fuses the body's DQ -> Conv -> Q
    of ``outq_*`` into a QLinearConv: an NNCF chain 99.9% -> 99.88% of the QDQ model's codes)."""
    wz = [int(v) for v in a.get(WEIGHT_ZP) or []] or ([0] * o if explicit else [])
    nodes = [_const("q_w_z", wz, onnx.TensorProto.INT8, [o])] if wz else []
    return nodes + [helper.make_node("DequantizeLinear", ["W", "q_w_s"] + (["q_w_z"] if wz else []), ["q_w"], axis=0)]


def int8_body(float_body: Callable, weight_zp: bool = True) -> Callable:
    """The body of a Conv2D/FC/pool that dispatches on ``precision``: the float body as it is, or
    Q -> DQ of X, DQ of W and B (when present), the float body, Q -> DQ of Y (W's DQ with a zero
    point; an int8-in layer's when ``weight_zp``, ``_weight_dq``)."""
    def body(a, present, opset):
        if is_int8_in(a):
            return _int8_in_body(float_body, a, present, opset, weight_zp)
        if not is_int8(a):
            return float_body(a, present, opset)
        if opset < 13:
            raise ValueError("an int8 layer's reference body needs opset >= 13 (per-channel DequantizeLinear)")
        ws = [float(v) for v in a.get("weight_scales") or []]   # none on a pool
        o = len(ws)
        it, ot = a["in_type"], a["out_type"]
        nodes = [_const("q_in_s", [float(a["in_scale"])], onnx.TensorProto.FLOAT, []),
                 _const("q_in_z", [int(a["in_zero_point"])], QTYPES[it], []),
                 _const("q_out_s", [float(a["out_scale"])], onnx.TensorProto.FLOAT, []),
                 _const("q_out_z", [int(a["out_zero_point"])], QTYPES[ot], []),
                 helper.make_node("QuantizeLinear", ["A" if "A" in present else "X", "q_in_s", "q_in_z"], ["q_xq"]),
                 helper.make_node("DequantizeLinear", ["q_xq", "q_in_s", "q_in_z"], ["q_x"])]
        if "A" in present:   # Sum2D: operand B has its own quantization, or is a float constant
            renames = {"A": "q_x"}
            if "in2_type" in a:
                nodes += [_const("q_in2_s", [float(a["in2_scale"])], onnx.TensorProto.FLOAT, []),
                          _const("q_in2_z", [int(a["in2_zero_point"])], QTYPES[a["in2_type"]], []),
                          helper.make_node("QuantizeLinear", ["B", "q_in2_s", "q_in2_z"], ["q_bq"]),
                          helper.make_node("DequantizeLinear", ["q_bq", "q_in2_s", "q_in2_z"], ["q_b"])]
                renames["B"] = "q_b"
            inner = _rename(float_body(a, present, opset), renames, {"Y": "q_y"})
            return nodes + inner + [helper.make_node("QuantizeLinear", ["q_y", "q_out_s", "q_out_z"], ["q_yq"]),
                                    helper.make_node("DequantizeLinear", ["q_yq", "q_out_s", "q_out_z"], ["Y"])]
        if present.get("W"):
            nodes += [_const("q_w_s", ws, onnx.TensorProto.FLOAT, [o])] + _weight_dq(a, o, True)
        if present.get("B"):
            bs = (np.float32(a["in_scale"]) * np.asarray(ws, np.float32)).astype(np.float32)
            nodes += [_const("q_b_s", [float(v) for v in bs], onnx.TensorProto.FLOAT, [o]),
                      helper.make_node("DequantizeLinear", ["B", "q_b_s"], ["q_b"], axis=0)]
        inner = _rename(float_body(a, present, opset), {"X": "q_x", "W": "q_w", "B": "q_b"}, {"Y": "q_y"})
        return nodes + inner + [helper.make_node("QuantizeLinear", ["q_y", "q_out_s", "q_out_z"], ["q_yq"]),
                                helper.make_node("DequantizeLinear", ["q_yq", "q_out_s", "q_out_z"], ["Y"])]
    return body


def _int8_in_body(float_body: Callable, a, present, opset, weight_zp: bool) -> List[onnx.NodeProto]:
    """int8 in, fp16 out (Conv2D / FC): Q -> DQ of X, DQ of the int8 W (axis 0), the float body on
    them with the float bias as it is; the output is the float result (no Q -> DQ), or its Q -> DQ
    with ``outq_*`` (the pair the layer absorbed after its float chain)."""
    if opset < 13:
        raise ValueError("an int8-in layer's reference body needs opset >= 13 (per-channel DequantizeLinear)")
    ws = [float(v) for v in a["weight_scales"]]
    it = a["in_type"]
    nodes = [_const("q_in_s", [float(a["in_scale"])], onnx.TensorProto.FLOAT, []),
             _const("q_in_z", [int(a["in_zero_point"])], QTYPES[it], []),
             helper.make_node("QuantizeLinear", ["X", "q_in_s", "q_in_z"], ["q_xq"]),
             helper.make_node("DequantizeLinear", ["q_xq", "q_in_s", "q_in_z"], ["q_x"]),
             _const("q_w_s", ws, onnx.TensorProto.FLOAT, [len(ws)])] + _weight_dq(a, len(ws), weight_zp)
    if "outq_type" not in a:
        return nodes + _rename(float_body(a, present, opset), {"X": "q_x", "W": "q_w"}, {})
    # the Q -> DQ it absorbed after its float chain (fuse/qdq_int8_in.py): on the fp32 result
    nodes += [_const("q_oq_s", [float(a["outq_scale"])], onnx.TensorProto.FLOAT, []),
              _const("q_oq_z", [int(a["outq_zero_point"])], QTYPES[a["outq_type"]], [])]
    inner = _rename(float_body(a, present, opset), {"X": "q_x", "W": "q_w"}, {"Y": "q_y0"})
    y = "q_y0"
    ops = [o for o in str(a.get("post_ops") or "").split(",") if o]
    vals = [float(v) for v in a.get("post_values") or []]
    sizes = [int(n) for n in a.get("post_sizes") or [1] * len(ops)]
    at = 0
    for k, (op, n) in enumerate(zip(ops, sizes)):   # epilogue ops in order: scalar, or per channel (the
        inner += [_const(f"q_post{k}", vals[at:at + n], onnx.TensorProto.FLOAT, [] if n == 1 else [n]),   # last axis)
                  helper.make_node(op.capitalize(), [y, f"q_post{k}"], [f"q_y{k + 1}"])]
        y, at = f"q_y{k + 1}", at + n
    inner.append(helper.make_node("Identity", [y], ["q_y"]))
    return nodes + inner + [helper.make_node("QuantizeLinear", ["q_y", "q_oq_s", "q_oq_z"], ["q_yq"]),
                            helper.make_node("DequantizeLinear", ["q_yq", "q_oq_s", "q_oq_z"], ["Y"])]
