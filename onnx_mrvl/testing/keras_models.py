"""Keras 3 models as tf2onnx writes them (seeded weights, onnx.helper only).

``se_nhwc``: a MobileNetV3 / EfficientNet block: tf2onnx's layout optimizer leaves Keras' BatchNorm
(``Mul``, ``Add`` by [C] constants) and the activation in NHWC after a depthwise conv, so the
squeeze-excite mean is ``ReduceMean(axes [1, 2], keepdims=1)`` of that NHWC tensor (no Transpose
writes it; hard-swish ``x * HardSigmoid(x)`` before it), Transposed to NCHW for the 1x1 convs and multiplied back in NHWC; the classifier head
is ``ReduceMean(axes [1, 2], keepdims=0)`` -> ``MatMul``.

``rnn_last_step``: Keras 2 ``Conv1D -> GRU / LSTM(return_sequences=False) -> Dense`` as tf2onnx
writes it: the recurrent op's ``Y [T, 1, 1, H] -> Squeeze(axis 1) -> Slice(start -1, axis 0) ->
Squeeze`` (``take="gather"``: ``Gather(-1, axis 0)``, torch's ``out[-1]``) -> MatMul.

``causal_conv1d``: Keras ``Conv1D(padding="causal")`` as tf2onnx writes it on ``[N, C, T]``: a
``Pad`` of the time axis on the left, then ``Unsqueeze(2) -> Conv [1, k] -> Squeeze`` (after a
SAME Conv1D and Relu, as in an audio front end).

``keras3_ln_head``: Keras 3 ``Dense -> residual -> LayerNormalization -> GlobalAveragePooling1D ->
Dense`` as tf2onnx writes it: the LN's two means over the last axis of [N, T, D] as
``GlobalAveragePool``, ``x * inv + Neg(mean) * inv`` (gamma folded into inv), and the token mean
``ReduceMean(axes [1], keepdims=0)``.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def se_nhwc(seed: int = 0, size: int = 16, c: int = 16, classes: int = 10, block: str = "hard_swish") -> onnx.ModelProto:
    """``block="relu"``: MobileNetV3's first block, the BN ``Mul`` alone then ``Relu`` (no shift)."""
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
    if block == "relu":
        x = op("Relu", [x], "relu")
    else:
        x = op("Add", [x, const(0.1 * rng.standard_normal(c), "bn_shift")], "batchnorm_add")
        x = op("Mul", [x, op("HardSigmoid", [x], "hard_sigmoid", alpha=1.0 / 6, beta=0.5)], "hard_swish")
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


def rnn_last_step(seed: int = 0, op: str = "GRU", direction: str = "forward", take: str = "slice",
                  steps: int = 12, feat: int = 8, hidden: int = 16, classes: int = 5) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    gates = {"GRU": 3, "LSTM": 4, "RNN": 1}[op]
    nd = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal(v[1]) * v[2]).astype(np.float32), v[0]) for v in (
        ("conv_w", (feat, feat, 3, 1), 0.3), ("W", (nd, gates * hidden, feat), 0.3),
        ("R", (nd, gates * hidden, hidden), 0.3), ("B", (nd, 2 * gates * hidden), 0.1),
        ("dense_w", (nd * hidden, classes), 0.3))]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (
        ("ax1", [1]), ("ax0", [0]), ("ax2", [2]), ("start", [-1]), ("end", [2 ** 31 - 1]), ("flat", [steps, 1, feat]),
        ("idx", -1), ("head", [1, nd * hidden]))]
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    nodes = [
        helper.make_node("Transpose", ["input"], ["x_nct"], perm=[0, 2, 1]),              # [1, F, T]
        helper.make_node("Unsqueeze", ["x_nct", "ax2"], ["x4"]),
        helper.make_node("Transpose", ["x4"], ["x4t"], perm=[0, 1, 3, 2]),             # [1, F, 1, T]
        helper.make_node("Conv", ["x4t", "conv_w"], ["c4"], kernel_shape=[3, 1], pads=[1, 0, 1, 0]),
        helper.make_node("Relu", ["c4"], ["r4"]),                                       # [1, F, T, 1]
        helper.make_node("Transpose", ["r4"], ["tb"], perm=[2, 0, 3, 1]),              # [T, 1, 1, F]
        helper.make_node("Reshape", ["tb", "flat"], ["seq"]),                           # [T, 1, F]
        helper.make_node(op, ["seq", "W", "R", "B"], ["Y"], hidden_size=hidden, direction=direction, **extra),
        helper.make_node("Squeeze", ["Y", "ax1"], ["Ys"]) if nd == 1 else
        helper.make_node("Reshape", ["Y", "flat_nd"], ["Ys"]),
    ]
    if nd == 2:
        inits.append(numpy_helper.from_array(np.array([steps, 1, 2 * hidden], np.int64), "flat_nd"))
    if take == "slice":
        nodes.append(helper.make_node("Slice", ["Ys", "start", "end", "ax0"], ["last"]))   # [1, 1, H]
    else:
        nodes.append(helper.make_node("Gather", ["Ys", "idx"], ["last"], axis=0))          # [1, H]
    nodes += [helper.make_node("Reshape", ["last", "head"], ["h"]),
              helper.make_node("MatMul", ["h", "dense_w"], ["logits"]),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    for i, n in enumerate(nodes):
        n.name = f"{n.op_type}_{i}"
    g = helper.make_graph(nodes, "keras_rnn_last_step",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, steps, feat])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


def keras3_ln_head(seed: int = 0, steps: int = 16, d: int = 32, classes: int = 6) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    f32 = lambda v: np.asarray(v, np.float32)   # noqa: E731
    inits = [numpy_helper.from_array(f32(v), k) for k, v in (
        ("w", rng.standard_normal((d, d)) / np.sqrt(d)), ("b", 0.1 * rng.standard_normal(d)),
        ("eps", 1e-6), ("gamma", (1 + 0.1 * rng.standard_normal(d)).reshape(1, 1, d)),
        ("head_w", rng.standard_normal((d, classes)) / np.sqrt(d)))]
    mk = helper.make_node
    nodes = [mk("MatMul", ["input", "w"], ["mm"]), mk("Add", ["mm", "b"], ["dense"]),
             mk("Add", ["input", "dense"], ["x"]),
             mk("GlobalAveragePool", ["x"], ["mean"]), mk("Neg", ["mean"], ["neg"]),
             mk("Sub", ["x", "mean"], ["diff"]), mk("Mul", ["diff", "diff"], ["sq"]),
             mk("GlobalAveragePool", ["sq"], ["var"]), mk("Add", ["var", "eps"], ["ve"]),
             mk("Sqrt", ["ve"], ["sd"]), mk("Reciprocal", ["sd"], ["rs"]), mk("Mul", ["rs", "gamma"], ["inv"]),
             mk("Mul", ["x", "inv"], ["xs"]), mk("Mul", ["neg", "inv"], ["ms"]), mk("Add", ["xs", "ms"], ["ln"]),
             mk("ReduceMean", ["ln"], ["pooled"], axes=[1], keepdims=0),
             mk("MatMul", ["pooled", "head_w"], ["logits"])]
    for i, n in enumerate(nodes):
        n.name = f"{n.output[0]}_{i}"
    g = helper.make_graph(nodes, "keras3_ln_head",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, steps, d])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


def resnet_stem(seed: int = 0, relu: bool = True) -> onnx.ModelProto:
    """Keras ResNet's stem as tf2onnx writes it: Conv 7x7/2 -> Relu -> ``ZeroPadding2D(1)`` as a
    ``Pad`` -> MaxPool 3x3/2 (no pads) -> Conv 1x1 (``relu=False``: no Relu before the Pad)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (
        ("w1", rng.standard_normal((8, 3, 7, 7)) / np.sqrt(147)), ("b1", 0.1 * rng.standard_normal(8)),
        ("w2", rng.standard_normal((16, 8, 1, 1)) / np.sqrt(8)))]
    inits.append(numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"))
    mk = helper.make_node
    nodes = [mk("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3])]
    nodes += [mk("Relu", ["c1"], ["r1"])] if relu else []
    nodes += [mk("Pad", ["r1" if relu else "c1", "pads"], ["padded"]),
              mk("MaxPool", ["padded"], ["pool"], kernel_shape=[3, 3], strides=[2, 2]),
              mk("Conv", ["pool", "w2"], ["out"], kernel_shape=[1, 1])]
    for i, n in enumerate(nodes):
        n.name = f"{n.output[0]}_{i}"
    g = helper.make_graph(nodes, "keras_resnet_stem",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


def correct_pad_dw(seed: int = 0, size: int = 16, c: int = 8) -> onnx.ModelProto:
    """Keras MobileNet's ``ZeroPadding2D(correct_pad)`` before a stride-2 depthwise conv, as tf2onnx
    writes it: the Pad on NHWC data ([0, 1] on H and W), then the Transpose to NCHW, then the conv."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (
        ("w1", rng.standard_normal((c, 3, 1, 1)) / np.sqrt(3)), ("dw", rng.standard_normal((c, 1, 3, 3)) / 3),
        ("w2", rng.standard_normal((16, c, 1, 1)) / np.sqrt(c)))]
    inits.append(numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 1, 1, 0], np.int64), "pads"))
    mk = helper.make_node
    nodes = [mk("Transpose", ["input"], ["xt"], perm=[0, 3, 1, 2]),
             mk("Conv", ["xt", "w1"], ["c1"], kernel_shape=[1, 1]), mk("Relu", ["c1"], ["r1"]),
             mk("Transpose", ["r1"], ["r1t"], perm=[0, 2, 3, 1]),
             mk("Pad", ["r1t", "pads"], ["padded"]),
             mk("Transpose", ["padded"], ["pt"], perm=[0, 3, 1, 2]),
             mk("Conv", ["pt", "dw"], ["d"], kernel_shape=[3, 3], strides=[2, 2], group=c),
             mk("Relu", ["d"], ["dr"]), mk("Conv", ["dr", "w2"], ["out"], kernel_shape=[1, 1])]
    for i, n in enumerate(nodes):
        n.name = f"{n.output[0]}_{i}"
    g = helper.make_graph(nodes, "keras_correct_pad_dw",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, size, size, 3])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, size // 2, size // 2])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx")
    m.ir_version = 8
    return m


MODELS = {"keras_se_nhwc": se_nhwc, "keras_correct_pad_dw": correct_pad_dw, "keras_resnet_stem": resnet_stem, "keras3_ln_head": keras3_ln_head, "keras_gru_last_step": rnn_last_step,
          "keras_lstm_last_step": lambda: rnn_last_step(0, "LSTM", take="gather")}


def causal_conv1d(seed: int = 0, c: int = 8, t: int = 20, k: int = 3, stride: int = 2) -> onnx.ModelProto:
    """x [1, c, t] -> Conv1D SAME + Relu -> causal Pad (k - 1 on the left of T) -> Unsqueeze(2) ->
    Conv [1, k] stride [1, stride] -> Squeeze(2) -> Relu -> [1, c, (t - 1) // stride + 1]."""
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(np.array([2], np.int64), "ax2"),
             numpy_helper.from_array(np.array([0, 0, k - 1, 0, 0, 0], np.int64), "causal"),
             numpy_helper.from_array(w(c, c, 1, 3), "w1"), numpy_helper.from_array(0.1 * rng.standard_normal(c).astype(np.float32), "b1"),
             numpy_helper.from_array(w(c, c, 1, k), "w2"), numpy_helper.from_array(0.1 * rng.standard_normal(c).astype(np.float32), "b2")]
    nodes = [helper.make_node("Unsqueeze", ["input", "ax2"], ["x4"]),
             helper.make_node("Conv", ["x4", "w1", "b1"], ["c1"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
             helper.make_node("Squeeze", ["c1", "ax2"], ["c1s"]), helper.make_node("Relu", ["c1s"], ["r1"]),
             helper.make_node("Pad", ["r1", "causal"], ["padded"]),
             helper.make_node("Unsqueeze", ["padded", "ax2"], ["p4"]),
             helper.make_node("Conv", ["p4", "w2", "b2"], ["c2"], kernel_shape=[1, k], strides=[1, stride]),
             helper.make_node("Squeeze", ["c2", "ax2"], ["c2s"]), helper.make_node("Relu", ["c2s"], ["output"])]
    out_t = (t - 1) // stride + 1
    g = helper.make_graph(nodes, "causal_conv1d", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, t])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c, out_t])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
