"""OCR and audio architectures the way real exporters write them, with seeded random weights.

Each builder is ``name(seed=0) -> onnx.ModelProto`` (static batch 1, small sizes): PyTorch-export
CRNN (BiLSTM + Shape/Gather/Concat reshape), PaddleOCR-style detection piece (HardSwish, SE with
HardSigmoid, Resize nearest/linear, ConvTranspose), tf2onnx/Keras CNN (NHWC input, Pad op,
SAME_UPPER, depthwise, Clip relu6, ReduceMean, MatMul+Add), 1-D audio (Conv1d, MaxPool1d, GRU),
2-D spectrogram CNN and a transformer-encoder block (decomposed and opset-17 LayerNormalization).
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np
import onnx

from .models import F32, GraphBuilder


def _conv(g: GraphBuilder, x, cin, cout, k, name, stride=(1, 1), pads=None, group=1, bias=True, **attrs):
    """Conv with any kernel rank (``k`` tuple); ``attrs`` e.g. auto_pad instead of pads."""
    k = tuple(k)
    fan_in = cin // group * int(np.prod(k))
    w = g.const(f"{name}.weight", g.he((cout, cin // group) + k, fan_in))
    ins = [x, w]
    if bias:
        ins.append(g.const(f"{name}.bias", (g.rng.standard_normal(cout) * 0.05).astype(np.float32)))
    if "auto_pad" not in attrs:
        attrs["pads"] = list(pads) if pads is not None else [kk // 2 for kk in k] * 2
    return g.node("Conv", ins, name, kernel_shape=list(k), strides=list(stride), group=group, **attrs)


def _squeeze(g, x, axes, name, op="Squeeze"):
    if g.opset >= 13:
        return g.node(op, [x, g.const(f"{name}.axes", np.array(axes, np.int64))], name)
    return g.node(op, [x], name, axes=list(axes))


def _lstm_weights(g, name, dirs, cin, hid, gates):
    s = 1.0 / np.sqrt(hid)
    w = g.const(f"{name}.W", g.rng.uniform(-s, s, (dirs, gates * hid, cin)).astype(np.float32))
    r = g.const(f"{name}.R", g.rng.uniform(-s, s, (dirs, gates * hid, hid)).astype(np.float32))
    b = g.const(f"{name}.B", g.rng.uniform(-s, s, (dirs, 2 * gates * hid)).astype(np.float32))
    return w, r, b


def crnn_ocr(seed: int = 0) -> onnx.ModelProto:
    """PyTorch CRNN: [1,1,32,128] -> [T=32,1,37] log-probabilities."""
    g = GraphBuilder(seed, 13)
    x = "input"
    chans = [(1, 16), (16, 32), (32, 48), (48, 48)]
    pools = [((2, 2), (2, 2)), ((2, 2), (2, 2)), ((2, 1), (2, 1)), ((2, 1), (2, 1))]
    for i, ((ci, co), (pk, ps)) in enumerate(zip(chans, pools)):
        x = _conv(g, x, ci, co, (3, 3), f"cnn.conv{i}", bias=(i % 2 == 1))
        if i % 2 == 0:
            x = g.bn(x, co, f"cnn.bn{i}")
        x = g.relu(x, f"cnn.relu{i}")
        x = g.node("MaxPool", [x], f"cnn.pool{i}", kernel_shape=list(pk), strides=list(ps))
    # [1,48,2,32] -> conv (2,1) valid -> [1,48,1,32]
    x = _conv(g, x, 48, 48, (2, 1), "cnn.conv_last", pads=[0, 0, 0, 0])
    x = g.relu(x, "cnn.relu_last")
    x = _squeeze(g, x, [2], "squeeze")                                 # [1,48,32]
    x = g.node("Transpose", [x], "permute", perm=[2, 0, 1])            # [32,1,48]
    hid = 24
    w, r, b = _lstm_weights(g, "rnn", 2, 48, hid, 4)
    y, _, _ = g.node("LSTM", [x, w, r, b], "rnn.lstm", n_out=3, direction="bidirectional",
                     hidden_size=hid)                                  # [32,2,1,24]
    y = g.node("Transpose", [y], "rnn.transpose", perm=[0, 2, 1, 3])   # [32,1,2,24]
    shp = g.node("Shape", [y], "rnn.shape")
    dims = []
    for i in (0, 1):
        d = g.node("Gather", [shp, g.const(f"rnn.idx{i}", np.array(i, np.int64))], f"rnn.gather{i}", axis=0)
        dims.append(_squeeze(g, d, [0], f"rnn.unsqueeze{i}", op="Unsqueeze"))
    shape = g.node("Concat", dims + [g.const("rnn.minus1", np.array([-1], np.int64))], "rnn.concat", axis=0)
    y = g.node("Reshape", [y, shape], "rnn.reshape")                   # [32,1,48]
    wfc = g.const("fc.weight", g.he((2 * hid, 37), 2 * hid))
    y = g.node("MatMul", [y, wfc], "fc.matmul")
    y = g.node("Add", [y, g.const("fc.bias", (g.rng.standard_normal(37) * 0.05).astype(np.float32))], "fc.add")
    y = g.node("LogSoftmax", [y], "log_softmax", axis=2)
    g.nodes[-1].output[0] = "output"
    return g.model("crnn_ocr", [("input", F32, [1, 1, 32, 128])], [("output", F32, [32, 1, 37])])


def paddle_det(seed: int = 0) -> onnx.ModelProto:
    """PaddleOCR DB-style piece: [1,3,64,64] -> [1,1,64,64] probability map."""
    g = GraphBuilder(seed, 14)
    x = _conv(g, "input", 3, 16, (3, 3), "stem.conv", stride=(2, 2), bias=False)
    x = g.bn(x, 16, "stem.bn")
    x = g.node("HardSwish", [x], "stem.hswish")                        # [1,16,32,32]
    x = _conv(g, x, 16, 16, (3, 3), "b1.dw", group=16, bias=False)
    x = g.bn(x, 16, "b1.bn")
    x = g.node("HardSwish", [x], "b1.hswish")
    s = g.node("GlobalAveragePool", [x], "b1.se.pool")
    s = _conv(g, s, 16, 4, (1, 1), "b1.se.conv1")
    s = g.relu(s, "b1.se.relu")
    s = _conv(g, s, 4, 16, (1, 1), "b1.se.conv2")
    s = g.node("HardSigmoid", [s], "b1.se.hsig", alpha=0.2, beta=0.5)
    c1 = g.node("Mul", [x, s], "b1.se.mul")                            # [1,16,32,32]
    c2 = g.relu(_conv(g, c1, 16, 24, (3, 3), "b2.conv", stride=(2, 2)), "b2.relu")   # [1,24,16,16]
    c3 = g.node("HardSwish", [_conv(g, c2, 24, 32, (3, 3), "b3.conv", stride=(2, 2))], "b3.hswish")  # 8x8
    l3 = _conv(g, c3, 32, 16, (1, 1), "neck.in3", bias=False)
    l2 = _conv(g, c2, 24, 16, (1, 1), "neck.in2", bias=False)
    l1 = _conv(g, c1, 16, 16, (1, 1), "neck.in1", bias=False)
    up3 = g.resize2x(l3, "neck.up3")                                   # nearest, 16x16
    p2 = g.node("Add", [l2, up3], "neck.add2")
    sizes = g.const("neck.up2.sizes", np.array([1, 16, 32, 32], np.int64))
    up2 = g.node("Resize", [p2, "", "", sizes], "neck.up2", mode="linear",
                 coordinate_transformation_mode="half_pixel")         # linear, 32x32
    p1 = g.node("Add", [l1, up2], "neck.add1")
    wt = g.const("neck.tconv.weight", g.he((16, 8, 2, 2), 16 * 4))
    t3 = g.node("ConvTranspose", [p2, wt], "neck.tconv", kernel_shape=[2, 2], strides=[2, 2])  # 8ch 32x32
    f = g.node("Concat", [p1, t3], "neck.concat", axis=1)              # [1,24,32,32]
    h = _conv(g, f, 24, 8, (3, 3), "head.conv", bias=False)
    h = g.relu(g.bn(h, 8, "head.bn"), "head.relu")
    wt2 = g.const("head.tconv.weight", g.he((8, 1, 2, 2), 8 * 4))
    bt2 = g.const("head.tconv.bias", np.array([0.1], np.float32))
    h = g.node("ConvTranspose", [h, wt2, bt2], "head.tconv", kernel_shape=[2, 2], strides=[2, 2])
    g.node("Sigmoid", [h], "head.sigmoid")
    g.nodes[-1].output[0] = "output"
    return g.model("paddle_det", [("input", F32, [1, 3, 64, 64])], [("output", F32, [1, 1, 64, 64])])


def keras_cnn(seed: int = 0) -> onnx.ModelProto:
    """tf2onnx of a small Keras MobileNet-ish classifier: NHWC [1,32,32,3] -> [1,10]."""
    g = GraphBuilder(seed, 13)
    x = g.node("Transpose", ["input"], "model/conv1/Conv2D__6", perm=[0, 3, 1, 2])
    pads = g.const("model/pad/pads", np.array([0, 0, 0, 1, 0, 0, 1, 1], np.int64))
    x = g.node("Pad", [x, pads, g.const("model/pad/value", np.array(0.0, np.float32))], "model/pad/Pad",
               mode="constant")                                       # [1,3,33,34]
    x = _conv(g, x, 3, 16, (3, 3), "model/conv1/Conv2D", stride=(2, 2), auto_pad="VALID")  # 16x16
    lo, hi = g.const("relu6.min", np.array(0.0, np.float32)), g.const("relu6.max", np.array(6.0, np.float32))
    x = g.node("Clip", [x, lo, hi], "model/conv1_relu/Relu6")
    x = _conv(g, x, 16, 16, (3, 3), "model/dw1/depthwise", group=16, auto_pad="SAME_UPPER")
    x = g.node("Clip", [x, lo, hi], "model/dw1_relu/Relu6")
    x = _conv(g, x, 16, 32, (1, 1), "model/pw1/Conv2D", auto_pad="SAME_UPPER")
    x = g.relu(x, "model/pw1_relu/Relu")
    x = _conv(g, x, 32, 32, (3, 3), "model/conv2/Conv2D", stride=(2, 2), auto_pad="SAME_UPPER")  # 8x8
    x = g.relu(x, "model/conv2_relu/Relu")
    a = g.node("ReduceMean", [x], "model/gap/Mean", axes=[2, 3], keepdims=0)     # [1,32]
    x2 = g.node("Transpose", [x], "model/gap2/Mean__20", perm=[0, 2, 3, 1])
    b = g.node("ReduceMean", [x2], "model/gap2/Mean", axes=[1, 2], keepdims=0)   # NHWC spatial mean
    x = g.node("Add", [a, b], "model/add/add")
    w = g.const("model/dense/MatMul/ReadVariableOp:0", g.he((32, 10), 32))
    x = g.node("MatMul", [x, w], "model/dense/MatMul")
    x = g.node("Add", [x, g.const("model/dense/BiasAdd/ReadVariableOp:0",
                                  (g.rng.standard_normal(10) * 0.05).astype(np.float32))], "model/dense/BiasAdd")
    g.node("Softmax", [x], "model/dense/Softmax", axis=-1)
    g.nodes[-1].output[0] = "output"
    return g.model("keras_cnn", [("input", F32, [1, 32, 32, 3])], [("output", F32, [1, 10])])


def audio_gru(seed: int = 0) -> onnx.ModelProto:
    """Log-mel [1,64,100] -> Conv1d/BN/ReLU/MaxPool1d x2 -> GRU -> last step -> Gemm [1,10]."""
    g = GraphBuilder(seed, 13)
    x = "input"
    for i, (ci, co) in enumerate(((64, 32), (32, 32))):
        x = _conv(g, x, ci, co, (3,), f"conv{i}", stride=(1,), pads=[1, 1], bias=False)
        x = g.relu(g.bn(x, co, f"bn{i}"), f"relu{i}")
        x = g.node("MaxPool", [x], f"pool{i}", kernel_shape=[2], strides=[2])   # 50, 25
    x = g.node("Transpose", [x], "permute", perm=[2, 0, 1])             # [25,1,32]
    w, r, b = _lstm_weights(g, "gru", 1, 32, 32, 3)
    y, _ = g.node("GRU", [x, w, r, b], "gru", n_out=2, hidden_size=32, linear_before_reset=1)
    y = _squeeze(g, y, [1], "gru.squeeze")                             # [25,1,32]
    y = g.node("Gather", [y, g.const("last", np.array(-1, np.int64))], "gru.last", axis=0)  # [1,32]
    y = g.gemm(y, 32, 10, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("audio_gru", [("input", F32, [1, 64, 100])], [("output", F32, [1, 10])])


def audio_wave(seed: int = 0) -> onnx.ModelProto:
    """Raw waveform [1,1,16000]: strided Conv1d front end, MaxPool1d, GAP, Flatten, Gemm [1,12]."""
    g = GraphBuilder(seed, 13)
    x = _conv(g, "input", 1, 16, (64,), "front.conv", stride=(16,), pads=[0, 0])   # 997
    x = g.relu(g.bn(x, 16, "front.bn"), "front.relu")
    x = g.node("MaxPool", [x], "front.pool", kernel_shape=[4], strides=[4])        # 249
    x = _conv(g, x, 16, 32, (3,), "conv1", stride=(1,), pads=[1, 1])
    x = g.relu(x, "relu1")
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3], strides=[2], pads=[1, 1])  # 125
    x = g.node("GlobalAveragePool", [x], "gap")                        # [1,32,1]
    x = g.node("Flatten", [x], "flatten", axis=1)
    g.gemm(x, 32, 12, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("audio_wave", [("input", F32, [1, 1, 16000])], [("output", F32, [1, 12])])


def audio_spec2d(seed: int = 0) -> onnx.ModelProto:
    """Spectrogram [1,1,64,100] -> Conv2d/BN/ReLU/MaxPool x3 -> Flatten -> Gemm/ReLU/Gemm [1,8]."""
    g = GraphBuilder(seed, 13)
    x = "input"
    for i, (ci, co) in enumerate(((1, 8), (8, 16), (16, 16))):
        x = _conv(g, x, ci, co, (3, 3), f"conv{i}", bias=False)
        x = g.relu(g.bn(x, co, f"bn{i}"), f"relu{i}")
        x = g.node("MaxPool", [x], f"pool{i}", kernel_shape=[2, 2], strides=[2, 2])   # 32x50,16x25,8x12
    x = g.node("Flatten", [x], "flatten", axis=1)                      # 16*8*12 = 1536
    x = g.relu(g.gemm(x, 1536, 64, "fc1"), "fc1.relu")
    g.gemm(x, 64, 8, "fc2")
    g.nodes[-1].output[0] = "output"
    return g.model("audio_spec2d", [("input", F32, [1, 1, 64, 100])], [("output", F32, [1, 8])])


def _layernorm(g, x, d, name, fused):
    scale = g.const(f"{name}.weight", g.rng.uniform(0.8, 1.2, d).astype(np.float32))
    bias = g.const(f"{name}.bias", (g.rng.standard_normal(d) * 0.05).astype(np.float32))
    if fused:
        return g.node("LayerNormalization", [x, scale, bias], name, axis=-1, epsilon=1e-5)
    m = g.node("ReduceMean", [x], f"{name}.mean", axes=[-1], keepdims=1)
    c = g.node("Sub", [x, m], f"{name}.sub")
    p = g.node("Pow", [c, g.const(f"{name}.two", np.array(2.0, np.float32))], f"{name}.pow")
    v = g.node("ReduceMean", [p], f"{name}.var", axes=[-1], keepdims=1)
    v = g.node("Add", [v, g.const(f"{name}.eps", np.array(1e-5, np.float32))], f"{name}.add_eps")
    s = g.node("Sqrt", [v], f"{name}.sqrt")
    y = g.node("Div", [c, s], f"{name}.div")
    y = g.node("Mul", [y, scale], f"{name}.mul")
    return g.node("Add", [y, bias], f"{name}.add")


def _linear(g, x, k, n, name):
    y = g.node("MatMul", [x, g.const(f"{name}.weight", g.he((k, n), k, 0.7))], f"{name}.matmul")
    return g.node("Add", [y, g.const(f"{name}.bias", (g.rng.standard_normal(n) * 0.05).astype(np.float32))],
                  f"{name}.add")


def transformer_block(seed: int = 0, fused_ln: bool = False) -> onnx.ModelProto:
    """One post-LN encoder layer on [1,T=16,D=32], 2 heads, GELU via Erf."""
    g = GraphBuilder(seed, 17 if fused_ln else 13)
    T, D, H = 16, 32, 2
    x = "input"
    heads = []
    for p in ("q", "k", "v"):
        t = _linear(g, x, D, D, f"attn.{p}")
        t = g.node("Reshape", [t, g.const(f"attn.{p}.shape", np.array([1, T, H, D // H], np.int64))], f"attn.{p}.reshape")
        heads.append(g.node("Transpose", [t], f"attn.{p}.transpose", perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3]))
    q, k, v = heads
    s = g.node("MatMul", [q, k], "attn.qk")
    s = g.node("Div", [s, g.const("attn.scale", np.array(np.sqrt(D // H), np.float32))], "attn.div")
    s = g.node("Softmax", [s], "attn.softmax", axis=-1)
    o = g.node("MatMul", [s, v], "attn.av")
    o = g.node("Transpose", [o], "attn.out.transpose", perm=[0, 2, 1, 3])
    o = g.node("Reshape", [o, g.const("attn.out.shape", np.array([1, T, D], np.int64))], "attn.out.reshape")
    o = _linear(g, o, D, D, "attn.proj")
    x = _layernorm(g, g.node("Add", [x, o], "res1"), D, "ln1", fused_ln)
    h = _linear(g, x, D, 4 * D, "ffn.fc1")
    e = g.node("Erf", [g.node("Div", [h, g.const("gelu.sqrt2", np.array(np.sqrt(2.0), np.float32))], "gelu.div")],
               "gelu.erf")
    e = g.node("Add", [e, g.const("gelu.one", np.array(1.0, np.float32))], "gelu.add")
    h = g.node("Mul", [g.node("Mul", [h, e], "gelu.mul"), g.const("gelu.half", np.array(0.5, np.float32))],
               "gelu.mul_half")
    h = _linear(g, h, 4 * D, D, "ffn.fc2")
    _layernorm(g, g.node("Add", [x, h], "res2"), D, "ln2", fused_ln)
    g.nodes[-1].output[0] = "output"
    return g.model("transformer_block", [("input", F32, [1, T, D])], [("output", F32, [1, T, D])])


def transformer_block_ln17(seed: int = 0) -> onnx.ModelProto:
    return transformer_block(seed, fused_ln=True)


def all_models() -> Dict[str, Callable[..., onnx.ModelProto]]:
    return {f.__name__: f for f in (crnn_ocr, paddle_det, keras_cnn, audio_gru, audio_wave, audio_spec2d,
                                    transformer_block, transformer_block_ln17)}
