"""BlazeFace-style SSD detectors as ``tf2onnx --tflite`` writes MediaPipe's float TFLite models
(face / palm detection; seeded weights, onnx.helper only).

tf2onnx folds TFLite's fp16-weight ``DEQUANTIZE`` into float32 initializers, transposes the NHWC
graph input to NCHW, writes SAME convs with explicit asymmetric pads (``[1, 1, 2, 2]`` for a 5x5
stride-2 conv), ``PRELU`` as ``PRelu`` with a ``[1, C, 1, 1]`` slope, and a block that widens its
channels as ``MaxPool 2x2/2 -> Pad`` (zeros on the channel axis, pads a constant int64 input) added to
``depthwise 5x5/2 -> Conv 1x1``; the FPN upsample is a linear half-pixel ``Resize`` by scales; the
heads are ``Conv 1x1 -> Transpose to NHWC -> Reshape [1, -1, k] -> Concat`` of the two scales.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
from onnx import TensorProto, helper

from .tflite_models import TFLiteNet


class _Net(TFLiteNet):
    def __init__(self, seed: int):
        super().__init__(seed, quantized=False)

    def conv(self, x, cin, cout, k=1, stride=1, group=1, pads=None) -> str:
        w = self.rng.normal(0, 1.0 / np.sqrt(k * k * cin / group), (cout, cin // group, k, k))
        b = self.rng.normal(0, 0.05, cout)
        p = pads if pads is not None else [k // 2] * 4
        return self.op("Conv", [x, self.const(w.astype(np.float16).astype(np.float32), "w"),
                                self.const(b.astype(np.float32), "b")],
                       kernel_shape=[k, k], strides=[stride, stride], pads=p, group=group, dilations=[1, 1])

    def prelu(self, x, c, act) -> str:
        if act == "relu":
            return self.op("Relu", [x])
        return self.op("PRelu", [x, self.const(self.rng.uniform(0.05, 0.3, (1, c, 1, 1)).astype(np.float32), "slope")])

    def block(self, x, cin, cout, act, stride=1) -> str:
        """depthwise 5x5 -> 1x1 conv, added to the skip (MaxPool + channel Pad when it downsamples
        or widens), then the activation."""
        pads = [1, 1, 2, 2] if stride == 2 else [2, 2, 2, 2]
        y = self.conv(self.conv(x, cin, cin, 5, stride, cin, pads), cin, cout)
        skip = self.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]) if stride == 2 else x
        if cout > cin:
            skip = self.op("Pad", [skip, self.const(np.array([0, 0, 0, 0, 0, cout - cin, 0, 0], np.int64), "pad_const")],
                           "channel_padding")
        return self.prelu(self.op("Add", [skip, y]), cout, act)


def detector(seed: int = 0, size: int = 64, act: str = "prelu", fpn: bool = True) -> onnx.ModelProto:
    """Input ``[1, size, size, 3]`` in [-1, 1]; outputs regressors ``[1, A, 16]`` and classifiers
    ``[1, A, 1]`` over two feature scales (size/8 with 2 anchors, size/16 with 6)."""
    n = _Net(seed)
    x = n.op("Transpose", ["input"], perm=[0, 3, 1, 2])
    x = n.prelu(n.conv(x, 3, 16, 5, 2, pads=[1, 1, 2, 2]), 16, act)
    x = n.block(x, 16, 16, act)
    x = n.block(x, 16, 24, act, stride=2)
    f8 = n.block(x, 24, 32, act, stride=2)
    f16 = n.block(n.block(f8, 32, 48, act, stride=2), 48, 48, act)
    if fpn:
        up = n.op("Resize", [f16, "", n.const(np.array([1, 1, 2, 2], np.float32), "scales")],
                  mode="linear", coordinate_transformation_mode="half_pixel", nearest_mode="floor")
        f8 = n.prelu(n.op("Add", [n.conv(up, 48, 32), f8]), 32, act)
    regs, clss = [], []
    for f, c, anchors in ((f8, 32, 2), (f16, 48, 6)):
        for out, coords in ((regs, 16), (clss, 1)):
            h = n.op("Transpose", [n.conv(f, c, anchors * coords)], perm=[0, 2, 3, 1])
            out.append(n.op("Reshape", [h, n.const(np.array([1, -1, coords], np.int64), "shape")]))
    n.nodes.append(helper.make_node("Concat", regs, ["regressors"], name="regressors", axis=1))
    n.nodes.append(helper.make_node("Concat", clss, ["classificators"], name="classificators", axis=1))
    a = 2 * (size // 8) ** 2 + 6 * (size // 16) ** 2
    g = helper.make_graph(n.nodes, "blazeface", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 3])],
                          [helper.make_tensor_value_info("regressors", TensorProto.FLOAT, [1, a, 16]),
                           helper.make_tensor_value_info("classificators", TensorProto.FLOAT, [1, a, 1])], n.inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """A smooth image-like input in [-1, 1] (BlazeFace's range)."""
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:shape[1], 0:shape[2]] / shape[1]
    img = np.stack([np.sin(2 * np.pi * (a * yy + b * xx) + c) for a, b, c in rng.uniform(0, 2, (shape[3], 3))], -1)
    img = 0.8 * img + 0.2 * rng.uniform(-1, 1, img.shape)
    return {model.graph.input[0].name: img[None].astype(np.float32)}
