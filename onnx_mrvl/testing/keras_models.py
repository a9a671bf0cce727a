"""Keras 3 models as tf2onnx writes them (seeded weights, onnx.helper only).

``se_nhwc``: a MobileNetV3 / EfficientNet block: tf2onnx's layout optimizer leaves Keras' BatchNorm
(``Mul``, ``Add`` by [C] constants) and the activation in NHWC after a depthwise conv, so the
squeeze-excite mean is ``ReduceMean(axes [1, 2], keepdims=1)`` of that NHWC tensor (no Transpose
writes it), Transposed to NCHW for the 1x1 convs and multiplied back in NHWC; the classifier head
is ``ReduceMean(axes [1, 2], keepdims=0)`` -> ``MatMul``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def se_nhwc(seed: int = 0, size: int = 16, c: int = 16, classes: int = 10) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def const(v, base):
        name = f"{base}_{len(inits)}"
        inits.append(numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                                             else np.asarray(v), name))
        return name

    def op(t, ins, base, **kw):
        name = f"{base}_{len(nodes)}"
        nodes.append(helper.make_node(t, list(ins), [name], name=name, **kw))
        return name

    def w(*shape):
        return const(rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])), "w")

    x = op("Transpose", ["input"], "to_nchw", perm=[0, 3, 1, 2])
    x = op("Conv", [x, w(c, 3, 1, 1)], "conv", kernel_shape=[1, 1])
    x = op("Conv", [x, w(c, 1, 3, 3)], "depthwise", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=c)
    x = op("Transpose", [x], "depthwise_nhwc", perm=[0, 2, 3, 1])
    x = op("Mul", [x, const(1 + 0.1 * rng.standard_normal(c), "bn_scale")], "batchnorm_mul")
    x = op("Add", [x, const(0.1 * rng.standard_normal(c), "bn_shift")], "batchnorm_add")
    x = op("Relu", [x], "relu")
    s = op("ReduceMean", [x], "squeeze_excite_avg_pool", axes=[1, 2], keepdims=1)   # [1, 1, 1, C]
    s = op("Transpose", [s], "se_nchw", perm=[0, 3, 1, 2])
    s = op("Relu", [op("Conv", [s, w(c // 4, c, 1, 1), const(0.1 * rng.standard_normal(c // 4), "b")],
                       "se_reduce", kernel_shape=[1, 1])], "se_relu")
    s = op("Conv", [s, w(c, c // 4, 1, 1), const(0.1 * rng.standard_normal(c), "b")], "se_expand",
           kernel_shape=[1, 1])
    s = op("HardSigmoid", [s], "se_gate", alpha=1.0 / 6, beta=0.5)
    s = op("Transpose", [s], "se_nhwc", perm=[0, 2, 3, 1])
    x = op("Mul", [x, s], "se_mul")
    x = op("Transpose", [x], "project_nchw", perm=[0, 3, 1, 2])
    x = op("Conv", [x, w(c, c, 1, 1)], "project", kernel_shape=[1, 1])
    x = op("Transpose", [x], "head_nhwc", perm=[0, 2, 3, 1])
    x = op("ReduceMean", [x], "global_average_pooling2d", axes=[1, 2], keepdims=0)  # [1, C]
    y = op("Add", [op("MatMul", [x, const(rng.standard_normal((c, classes)) / np.sqrt(c), "dense_w")], "dense"),
                  const(0.1 * rng.standard_normal(classes), "dense_b")], "dense_bias")
    g = helper.make_graph(nodes, "keras_se_nhwc",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 3])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


MODELS = {"keras_se_nhwc": se_nhwc}
