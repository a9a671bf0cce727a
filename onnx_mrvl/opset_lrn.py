"""Reference body of the Mrvl ``LRN`` op (registered in opset.OPS): ONNX LocalResponseNormalization
across the channels of an NHWC tensor,

    y[n, h, w, c] = x[n, h, w, c] / (bias + alpha / size * sum_{c' in window(c)} x[n, h, w, c']^2) ^ beta

with window(c) = [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to the channels.
The body is ONNX ``LRN`` itself on the NCHW view (Transpose in and out), so plain onnxruntime runs a
fused model with onnxruntime's own LRN kernel.
"""
from __future__ import annotations

from onnx import helper

ATTRS = ("size", "alpha", "beta", "bias")
DEFAULTS = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}   # ONNX LRN's defaults (size is required)
TO_NCHW = [0, 3, 1, 2]
TO_NHWC = [0, 2, 3, 1]


def lrn_body(a, present, opset):
    kw = {k: float(a.get(k, DEFAULTS[k])) for k in ("alpha", "beta", "bias")}
    return [helper.make_node("Transpose", ["X"], ["Xc"], perm=TO_NCHW),
            helper.make_node("LRN", ["Xc"], ["Yc"], size=int(a["size"]), **kw),
            helper.make_node("Transpose", ["Yc"], ["Y"], perm=TO_NHWC)]


def op_defs(OpDef) -> dict:
    """The OpDef of ``LRN`` (``OpDef`` passed in: no import cycle with opset)."""
    return {"LRN": OpDef("LRN", "LRN", "mrvl.lrn", ("X",), ATTRS, lrn_body)}
