"""Full-integer TFLite models as ``tf2onnx --tflite`` writes them (seeded weights, onnx.helper only).

tf2onnx keeps TFLite's data moves on the int8 codes: the NHWC int8 graph input is Transposed to NCHW
before its DequantizeLinear, Keras 3's UpSampling2D (nearest) is ``Reshape`` as ExpandDims -> ``Tile``
-> a ``Reshape`` that also expands for the next repeat -> ``Tile`` -> ``Reshape`` between the layout
Transposes, and Concatenate is a ``Concat`` of codes (TFLite gives its inputs one scale). Compute ops
are ``DQ -> op -> Q`` with per-channel int8 weights and int32 biases (scale s_x * s_w); the output is
int8 codes Transposed back to NHWC. ``quantized=False`` writes the same graph in float (the
``--dequantize`` / float TFLite form of the same moves).
"""
from __future__ import annotations

from typing import Dict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

S_IN, Z_IN = 1.0 / 32, 0       # input codes
S_ACT, Z_ACT = 4.0 / 255, -128  # Relu outputs (TFLite: zero point -128)
S_OUT, Z_OUT = 4.0 / 127, 0


class TFLiteNet:
    """A seeded graph builder: named nodes and initializers (blazeface_models builds on it too)."""

    def __init__(self, seed: int, quantized: bool):
        self.rng = np.random.default_rng(seed)
        self.q = quantized
        self.nodes, self.inits, self.k = [], [], 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}_{self.k}"

    def const(self, value, base="c") -> str:
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type, inputs, base=None, **attrs) -> str:
        n = self.name(base or op_type)
        self.nodes.append(helper.make_node(op_type, list(inputs), [n], name=n, **attrs))
        return n

    def dq(self, x, s, z) -> str:
        return self.op("DequantizeLinear", [x, self.const(np.float32(s), "s"), self.const(np.int8(z), "z")],
                       f"{x}_dequant") if self.q else x

    def qz(self, x, s, z) -> str:
        return self.op("QuantizeLinear", [x, self.const(np.float32(s), "s"), self.const(np.int8(z), "z")],
                       f"{x}_quantize") if self.q else x

    def conv(self, x, s_x, cin, cout, k, relu: bool) -> str:
        w = (self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = (0.1 * self.rng.standard_normal(cout)).astype(np.float32)
        if self.q:
            sw = (np.abs(w).reshape(cout, -1).max(1) / 127).astype(np.float32)
            wq = np.clip(np.round(w / sw[:, None, None, None]), -127, 127).astype(np.int8)
            bq = np.round(b / (s_x * sw)).astype(np.int32)
            wn = self.op("DequantizeLinear", [self.const(wq, "w"), self.const(sw, "ws"),
                                              self.const(np.zeros(cout, np.int8), "wz")], "w_dequant", axis=0)
            bn = self.op("DequantizeLinear", [self.const(bq, "b"), self.const((s_x * sw).astype(np.float32), "bs"),
                                              self.const(np.zeros(cout, np.int32), "bz")], "b_dequant", axis=0)
        else:
            wn, bn = self.const(w, "w"), self.const(b, "b")
        y = self.op("Conv", [x, wn, bn], "conv_prequant", kernel_shape=[k, k], pads=[k // 2] * 4)
        return self.op("Relu", [y], "relu_prequant") if relu else y


def unet(seed: int = 0, quantized: bool = True) -> onnx.ModelProto:
    """A small Keras U-Net as a full-integer TFLite model through tf2onnx (int8 input and output)."""
    n = TFLiteNet(seed, quantized)
    t = n.op("Transpose", ["input"], "input_nchw", perm=[0, 3, 1, 2])           # on the codes
    x = n.dq(t, S_IN, Z_IN)
    q1 = n.qz(n.conv(x, S_IN, 3, 8, 3, True), S_ACT, Z_ACT)                     # [1, 8, 16, 16]
    p = n.qz(n.op("MaxPool", [n.dq(q1, S_ACT, Z_ACT)], "maxpool_prequant", kernel_shape=[2, 2], strides=[2, 2]),
             S_ACT, Z_ACT)
    q2 = n.qz(n.conv(n.dq(p, S_ACT, Z_ACT), S_ACT, 8, 8, 3, True), S_ACT, Z_ACT)  # [1, 8, 8, 8]
    h = n.op("Transpose", [q2], "to_nhwc", perm=[0, 2, 3, 1])                   # NHWC [1, 8, 8, 8]
    h = n.op("Reshape", [h, n.const(np.array([1, 8, 1, 8, 8], np.int64))], "ExpandDims_prequant")
    h = n.op("Tile", [h, n.const(np.array([1, 1, 2, 1, 1], np.int64))], "Tile_prequant")
    h = n.op("Reshape", [h, n.const(np.array([1, 16, 8, 1, 8], np.int64))], "ExpandDims1_prequant")
    h = n.op("Tile", [h, n.const(np.array([1, 1, 1, 2, 1], np.int64))], "Tile1_prequant")
    h = n.op("Reshape", [h, n.const(np.array([1, 16, 16, 8], np.int64))], "Reshape_prequant")
    u = n.op("Transpose", [h], "to_nchw", perm=[0, 3, 1, 2])                    # [1, 8, 16, 16]
    c = n.op("Concat", [u, q1], "concat_prequant", axis=1)                     # codes of one scale
    y = n.qz(n.conv(n.dq(c, S_ACT, Z_ACT), S_ACT, 16, 4, 1, False), S_OUT, Z_OUT)
    y = n.op("Transpose", [y], "output_nhwc", perm=[0, 2, 3, 1])
    el = TensorProto.INT8 if quantized else TensorProto.FLOAT
    g = helper.make_graph(n.nodes, "tflite_unet", [helper.make_tensor_value_info("input", el, [1, 16, 16, 3])],
                          [helper.make_tensor_value_info(y, el, [1, 16, 16, 4])], n.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


def feeds(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    """Input codes in [-64, 64] (x in [-2, 2]) for the int8 model, x itself for the float one."""
    i = model.graph.input[0]
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    codes = np.random.default_rng(seed).integers(-64, 65, shape)
    if i.type.tensor_type.elem_type == TensorProto.INT8:
        return {i.name: codes.astype(np.int8)}
    return {i.name: (codes * S_IN).astype(np.float32)}


MODELS = {"tflite_unet_int8": lambda: unet(0, True), "tflite_unet_float": lambda: unet(0, False)}
