"""ONNX ``LRN`` (LocalResponseNormalization across channels; AlexNet, ZFNet, GoogLeNet / Inception v1)
as the Mrvl ``LRN`` layer (``mrvl.lrn``): a 4-D NCHW input, run on its NHWC storage, where the
channels are the contiguous axis the vector unit's window sum slides along (docs/fusion.md "LRN").

The check returns a reason for what the layer cannot compute the way onnxruntime does: a non-4-D
input (the layer is an image op), a window ``size`` below 1, a ``bias`` that is not positive or an
``alpha`` below 0 (the denominator could reach 0 or go negative, where ``^-beta`` is NaN or
infinite), values that are not finite; and an LRN whose output a QDQ model quantizes
(``LRN [-> MaxPool] -> QuantizeLinear``, onnxruntime's quantizer leaves LRN float): onnxruntime
quantizes its fp32 result, the layer's fp16 output moves values near a rounding tie to the next code
(AlexNet S8/U8: 0.7% of the second LRN's codes, 16 steps at the output, against 100% identical with
the LRN on the CPU), so it stays on the CPU and the int8 layers around it match onnxruntime.
"""
from __future__ import annotations

import math

import onnx

from ..graph_index import GraphIndex, attr
from ..opset_lrn import DEFAULTS
from ..target import Target
from .groups import Group, batch_limit, float_static
from .patterns import Pattern


def build_lrn(g: GraphIndex, n: onnx.NodeProto, target: Target):
    x = n.input[0] if n.input else ""
    if not x or not n.output or not n.output[0]:
        return "no input or output"
    reason = float_static(g, [x, n.output[0]]) or batch_limit(g, x, target)
    if reason:
        return reason
    shape = g.shape(x)
    if len(shape) != 4:
        return f"LRN on a {len(shape)}-D tensor (the accelerator's LRN takes 4-D NCHW images)"
    if shape[1] > target.max_channels:
        return f"{shape[1]} channels exceed the limit {target.max_channels}"
    size = attr(n, "size", None)
    if size is None or int(size) < 1:
        return f"LRN size {size!r} is not a positive integer"
    vals = {k: float(attr(n, k, DEFAULTS[k])) for k in ("alpha", "beta", "bias")}
    if not all(math.isfinite(v) for v in vals.values()):
        return f"LRN with non-finite alpha / beta / bias {vals}"
    if not vals["bias"] > 0 or vals["alpha"] < 0:
        return (f"LRN with bias {vals['bias']} and alpha {vals['alpha']} (the accelerator needs bias > 0 "
                f"and alpha >= 0: the denominator stays positive)")
    if _quantized(g, n.output[0]):
        return ("LRN whose output is quantized (a QuantizeLinear reads it, directly or after a max pool): "
                "onnxruntime quantizes its fp32 result, the accelerator's fp16 output would move codes near "
                "rounding ties; it runs on the CPU, the int8 layers around it match onnxruntime")
    return Group("LRN", "mrvl.lrn", [n], [x], n.output[0], {"size": int(size), **vals})


def _quantized(g: GraphIndex, t: str) -> bool:
    """A QuantizeLinear reads ``t``, or a MaxPool / GlobalMaxPool of it (max commutes with Q)."""
    for c in g.consumers.get(t, []):
        if c.op_type == "QuantizeLinear":
            return True
        if c.op_type in ("MaxPool", "GlobalMaxPool") and c.output and \
                any(r.op_type == "QuantizeLinear" for r in g.consumers.get(c.output[0], [])):
            return True
    return False


ANCHORS = {"LRN": Pattern("mrvl.lrn", ("LRN",), build_lrn)}
