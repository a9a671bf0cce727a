"""Reference body of the Mrvl ``LRN`` op (registered in opset.OPS): ONNX LocalResponseNormalization
across the channels of an NHWC tensor,

    y[n, h, w, c] = x[n, h, w, c] / (bias + alpha / size * sum_{c' in window(c)} x[n, h, w, c']^2) ^ beta

with window(c) = [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to the channels.
The body is written in plain ONNX ops, not ONNX ``LRN``: onnxruntime's CPU LRN takes odd sizes only
(the ONNX spec and the Mrvl layer take any size). On the NCHW view, unsqueezed to [N, 1, C, H, W]:
the squares' window mean is a 3-D ``AveragePool`` with kernel [size, 1, 1], pads [lo, hi] on C and
``count_include_pad`` (zeros outside the channels, divided by ``size``), so
``y = x / (bias + alpha * mean) ^ beta``.
"""
from __future__ import annotations

import onnx
from onnx import helper

ATTRS = ("size", "alpha", "beta", "bias")
DEFAULTS = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}   # ONNX LRN's defaults (size is required)
TO_NCHW = [0, 3, 1, 2]
TO_NHWC = [0, 2, 3, 1]


def _c(name: str, value: float):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, onnx.TensorProto.FLOAT, [], [value]))


def _axis1(op: str, x: str, y: str, opset: int):
    """Unsqueeze / Squeeze of axis 1 (axes an input from opset 13 on)."""
    if opset >= 13:
        return [helper.make_node("Constant", [], [f"{y}_axes"], value=helper.make_tensor(
                    f"{y}_axes", onnx.TensorProto.INT64, [1], [1])),
                helper.make_node(op, [x, f"{y}_axes"], [y])]
    return [helper.make_node(op, [x], [y], axes=[1])]


def lrn_body(a, present, opset):
    size = int(a["size"])
    lo = (size - 1) // 2
    alpha, beta, bias = (float(a.get(k, DEFAULTS[k])) for k in ("alpha", "beta", "bias"))
    return ([helper.make_node("Transpose", ["X"], ["Xc"], perm=TO_NCHW)] + _axis1("Unsqueeze", "Xc", "X5", opset)
            + [helper.make_node("Mul", ["X5", "X5"], ["Sq"]),
               helper.make_node("AveragePool", ["Sq"], ["Mean"], kernel_shape=[size, 1, 1],
                                pads=[lo, 0, 0, size - 1 - lo, 0, 0], count_include_pad=1),
               _c("alpha", alpha), _c("bias", bias), _c("beta", beta),
               helper.make_node("Mul", ["Mean", "alpha"], ["Scaled"]),
               helper.make_node("Add", ["Scaled", "bias"], ["D"]),
               helper.make_node("Pow", ["D", "beta"], ["P"]),
               helper.make_node("Div", ["X5", "P"], ["Y5"])]
            + _axis1("Squeeze", "Y5", "Yc", opset)
            + [helper.make_node("Transpose", ["Yc"], ["Y"], perm=TO_NHWC)])


def op_defs(OpDef) -> dict:
    """The OpDef of ``LRN`` (``OpDef`` passed in: no import cycle with opset)."""
    return {"LRN": OpDef("LRN", "LRN", "mrvl.lrn", ("X",), ATTRS, lrn_body)}
