"""A model whose size is its weights, for memory checks of ``convert`` (tests/test_convert_memory.py):
a 3x3 conv with BatchNormalization (legalize folds it: new weights), then VGG-style fully connected
layers whose kernels dominate the file (``fc_width`` sets their size: 2048 gives about 150 MB)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def big_fc_model(fc_width: int = 2048, seed: int = 0, channels: int = 64, size: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    flat = channels * size * size

    def w(name, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        arr = rng.standard_normal(shape).astype(np.float32) * np.float32(scale or (2.0 / fan_in) ** 0.5)
        return numpy_helper.from_array(arr, name)

    inits = [w("conv_w", channels, 16, 3, 3), w("conv_b", channels, scale=0.1),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), "bn_s"),
             numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), "bn_b"),
             numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), "bn_m"),
             numpy_helper.from_array((1 + 0.1 * rng.random(channels)).astype(np.float32), "bn_v"),
             w("fc1_w", fc_width, flat), w("fc1_b", fc_width, scale=0.1),
             w("fc2_w", fc_width, fc_width), w("fc2_b", fc_width, scale=0.1),
             w("fc3_w", 10, fc_width), w("fc3_b", 10, scale=0.1),
             numpy_helper.from_array(np.array([1, flat], np.int64), "flat_shape")]
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r0"], name="relu0"),
             helper.make_node("Reshape", ["r0", "flat_shape"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc1_w", "fc1_b"], ["g1"], name="fc1", transB=1),
             helper.make_node("Relu", ["g1"], ["r1"], name="relu1"),
             helper.make_node("Gemm", ["r1", "fc2_w", "fc2_b"], ["g2"], name="fc2", transB=1),
             helper.make_node("Relu", ["g2"], ["r2"], name="relu2"),
             helper.make_node("Gemm", ["r2", "fc3_w", "fc3_b"], ["y"], name="fc3", transB=1)]
    graph = helper.make_graph(nodes, "big_fc", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                              [1, 16, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def big_conv_bn_model(layers: int = 24, channels: int = 256, seed: int = 0, size: int = 4, bn: bool = True,
                      half: bool = False) -> onnx.ModelProto:
    """A stack of 3x3 Conv + BatchNormalization + Relu (ResNet-style: legalize folds every BN, so
    nearly every weight of the file is replaced): ``layers`` x ``channels``^2 x 9 floats (24 x 256:
    about 57 MB). ``bn=False``: Conv + Relu only; ``half``: float16 weights and graph input and
    output (a ``model.half()`` export, which legalize computes in float32)."""
    rng = np.random.default_rng(seed)
    dtype, elem = (np.float16, TensorProto.FLOAT16) if half else (np.float32, TensorProto.FLOAT)
    inits, nodes, x = [], [], "x"

    def vec(name, values):
        inits.append(numpy_helper.from_array(values.astype(dtype), name))

    for k in range(layers):
        scale = np.float32((2.0 / (9 * channels)) ** 0.5)
        inits.append(numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) * scale).astype(dtype),
                                             f"w{k}"))
        nodes.append(helper.make_node("Conv", [x, f"w{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1],
                                      kernel_shape=[3, 3]))
        x = f"c{k}"
        if bn:
            vec(f"s{k}", 1 + 0.1 * rng.standard_normal(channels))
            vec(f"b{k}", 0.1 * rng.standard_normal(channels))
            vec(f"m{k}", 0.1 * rng.standard_normal(channels))
            vec(f"v{k}", 1 + 0.1 * rng.random(channels))
            nodes.append(helper.make_node("BatchNormalization", [x, f"s{k}", f"b{k}", f"m{k}", f"v{k}"], [f"n{k}"],
                                          name=f"bn{k}"))
            x = f"n{k}"
        nodes.append(helper.make_node("Relu", [x], [f"r{k}"], name=f"relu{k}"))
        x = f"r{k}"
    graph = helper.make_graph(nodes, "big_conv_bn",
                              [helper.make_tensor_value_info("x", elem, [1, channels, size, size])],
                              [helper.make_tensor_value_info(x, elem, [1, channels, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model
