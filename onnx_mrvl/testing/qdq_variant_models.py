"""The seeded float models ``qdq_variants`` quantizes in other tools' QDQ forms: a small residual CNN,
CNNs with data-movement and element-wise ops between convs, a ConvTranspose decoder, an MLP of Gemms
(``transB=0``) and a transformer block (LayerNormalization, attention, GELU)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .models import GraphBuilder

F32 = TensorProto.FLOAT


# -- float models ------------------------------------------------------------------------------------

def cnn(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """conv-relu, conv + residual add + relu, MaxPool, 1x1 conv + Clip(0, 6), GAP, Flatten, Gemm."""
    g = GraphBuilder(seed, opset)
    a = g.relu(g.conv("input", 3, 8, 3, "c1"), "r1")
    b = g.conv(g.relu(g.conv(a, 8, 8, 3, "c2"), "r2"), 8, 8, 3, "c3")
    x = g.relu(g.node("Add", [b, a], "add"), "r3")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.clip6(g.conv(x, 8, 16, 1, "c4"), "clip")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    g.gemm(x, 16, 10, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("cnn", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 10])])


def lrn_maxpool(seed: int = 0, opset: int = 13, gain: float = 6.0) -> onnx.ModelProto:
    """AlexNet's stem: an 11x11 / stride-4 conv (3 -> 16), Relu, LRN, MaxPool 3x3 / 2, a 3x3 conv and
    Relu. quantize_static leaves the LRN float: its output reaches the MaxPool unquantized and is
    quantized after it (``gain`` makes those values large, where fp16 steps are coarse)."""
    g = GraphBuilder(seed, opset)
    x = g.relu(g.conv("input", 3, 16, 11, "c1", stride=4, pads=[2, 2, 2, 2], gain=gain), "r1")
    x = g.node("LRN", [x], "lrn", size=5, alpha=1e-4, beta=0.75, bias=1.0)
    x = g.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2])
    g.relu(g.conv(x, 16, 16, 3, "c2", pads=[1, 1, 1, 1]), "r2")
    g.nodes[-1].output[0] = "output"
    return g.model("lrn_maxpool", [("input", F32, [1, 3, 99, 99])], [("output", F32, [1, 16, 11, 11])])


def prelu_maxpool(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """MTCNN P-Net's pattern: Conv -> PRelu (per-channel slopes [C, 1, 1], some negative) -> MaxPool
    -> Conv -> PRelu -> Conv -> Softmax over the channels. quantize_static quantizes the pool's
    output, not the PRelu's: ``DQ -> PRelu -> MaxPool -> Q``."""
    g = GraphBuilder(seed, opset)
    rng = np.random.default_rng(seed + 100)
    x = g.conv("input", 3, 10, 3, "c1", pads=[0, 0, 0, 0])
    x = g.node("PRelu", [x, g.const("a1", rng.uniform(-0.3, 0.6, (10, 1, 1)).astype(np.float32))], "prelu1")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    x = g.conv(x, 10, 16, 3, "c2", pads=[0, 0, 0, 0])
    x = g.node("PRelu", [x, g.const("a2", rng.uniform(0.0, 0.5, (16, 1, 1)).astype(np.float32))], "prelu2")
    x = g.conv(x, 16, 2, 1, "c3", pads=[0, 0, 0, 0])
    g.node("Softmax", [x], "softmax", axis=1)
    g.nodes[-1].output[0] = "output"
    return g.model("prelu_maxpool", [("input", F32, [1, 3, 25, 31])], [("output", F32, [1, 2, 10, 13])])


def prelu_flatten_head(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """MTCNN R-Net's pattern: Conv -> PRelu -> MaxPool -> Conv -> PRelu -> Transpose -> Reshape [1, -1]
    -> Gemm -> PRelu (slope per feature) -> Gemm. Input [1, 3, 12, 12]."""
    g = GraphBuilder(seed, opset)
    rng = np.random.default_rng(seed + 200)
    x = g.conv("input", 3, 8, 3, "c1", pads=[0, 0, 0, 0])
    x = g.node("PRelu", [x, g.const("a1", rng.uniform(0.0, 0.5, (8, 1, 1)).astype(np.float32))], "prelu1")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.conv(x, 8, 16, 3, "c2", pads=[0, 0, 0, 0])
    x = g.node("PRelu", [x, g.const("a2", rng.uniform(0.0, 0.5, (16, 1, 1)).astype(np.float32))], "prelu2")
    x = g.node("Transpose", [x], "permute", perm=[0, 3, 2, 1])
    x = g.node("Reshape", [x, g.const("flat", np.array([1, -1], np.int64))], "flatten")
    x = g.node("Gemm", [x, g.const("d1.w", g.he((32, 144), 144)), g.const("d1.b", np.full(32, 0.05, np.float32))],
               "dense1", transB=1)
    x = g.node("PRelu", [x, g.const("a3", rng.uniform(0.0, 0.5, 32).astype(np.float32))], "prelu3")
    g.node("Gemm", [x, g.const("d2.w", g.he((4, 32), 32)), g.const("d2.b", np.zeros(4, np.float32))], "dense2",
           transB=1)
    g.nodes[-1].output[0] = "output"
    return g.model("prelu_flatten_head", [("input", F32, [1, 3, 12, 12])], [("output", F32, [1, 4])])


def focus_stem(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """YOLOv5's / YOLOX's Focus stem on the image: four strided slices ``x[..., a::2, b::2]`` (H then
    W, as torch exports them), Concat on the channels, Conv 12 -> 16 + SiLU, Conv 16 -> 8. Input
    [1, 3, 32, 32] (0..255 pixel values, as ddddocr's detector takes them)."""
    g = GraphBuilder(seed, opset)
    i64 = lambda *v: np.array(v, np.int64)   # noqa: E731
    parts = []
    for k, (a, b) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
        h = g.node("Slice", ["input", g.const(f"s{k}h.start", i64(a)), g.const(f"s{k}h.end", i64(1 << 30)),
                             g.const(f"s{k}h.axis", i64(2)), g.const(f"s{k}h.step", i64(2))], f"slice{k}h")
        parts.append(g.node("Slice", [h, g.const(f"s{k}w.start", i64(b)), g.const(f"s{k}w.end", i64(1 << 30)),
                                      g.const(f"s{k}w.axis", i64(3)), g.const(f"s{k}w.step", i64(2))], f"slice{k}w"))
    x = g.node("Concat", parts, "focus", axis=1)
    x = g.conv(x, 12, 16, 3, "c1", gain=1.0 / 255)
    x = g.node("Mul", [x, g.node("Sigmoid", [x], "sig1")], "silu1")
    g.conv(x, 16, 8, 3, "c2")
    g.nodes[-1].output[0] = "output"
    return g.model("focus_stem", [("input", F32, [1, 3, 32, 32])], [("output", F32, [1, 8, 16, 16])])


def cnn_moves(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """Data movement between convs: Pad, Slice, Split -> two convs -> Concat, nearest Resize,
    Transpose there and back, Reshape, Squeeze."""
    g = GraphBuilder(seed, opset)
    x = g.relu(g.conv("input", 3, 8, 3, "c1"), "r1")
    x = g.node("Pad", [x, g.const("pad.pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], "pad")
    x = g.relu(g.conv(x, 8, 16, 3, "c2", pads=[0, 0, 0, 0]), "r2")
    x = g.node("Slice", [x, g.const("sl.starts", np.array([0], np.int64)), g.const("sl.ends", np.array([12], np.int64)),
                         g.const("sl.axes", np.array([1], np.int64))], "slice")
    if opset >= 18:
        s0, s1 = g.node("Split", [x, g.const("split.sizes", np.array([4, 8], np.int64))], "split", n_out=2, axis=1)
    else:
        s0, s1 = g.node("Split", [x, g.const("split.sizes", np.array([4, 8], np.int64))], "split", n_out=2, axis=1)
    a = g.relu(g.conv(s0, 4, 8, 3, "ca"), "ra")
    b = g.relu(g.conv(s1, 8, 8, 1, "cb"), "rb")
    x = g.node("Concat", [a, b], "cat", axis=1)
    x = g.node("Transpose", [g.node("Transpose", [x], "to_nhwc", perm=[0, 2, 3, 1])], "to_nchw", perm=[0, 3, 1, 2])
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.resize2x(x, "up")
    x = g.relu(g.conv(x, 16, 4, 3, "c3", stride=2), "r3")
    x = g.node("Reshape", [x, g.const("rs.shape", np.array([1, 4, 1, 64], np.int64))], "reshape")
    x = g.node("Squeeze", [x, g.const("sq.axes", np.array([2], np.int64))], "squeeze")
    x = g.node("Flatten", [x], "flatten", axis=1)
    g.gemm(x, 256, 10, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("cnn_moves", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 10])])


def cnn_acts(seed: int = 0, opset: int = 14) -> onnx.ModelProto:
    """Element-wise ops between convs: Sigmoid, HardSigmoid, HardSwish, Mul by a constant, GAP."""
    g = GraphBuilder(seed, opset)
    x = g.node("Sigmoid", [g.conv("input", 3, 8, 3, "c1")], "sig")
    x = g.node("HardSigmoid", [g.conv(x, 8, 8, 3, "c2")], "hsig", alpha=0.2, beta=0.5)
    x = g.node("HardSwish", [g.conv(x, 8, 8, 3, "c3")], "hswish")
    x = g.node("Mul", [g.conv(x, 8, 8, 1, "c4"), g.const("scale.c", np.array(0.75, np.float32))], "mulc")
    x = g.relu(g.conv(x, 8, 16, 3, "c5", stride=2), "r5")
    g.node("GlobalAveragePool", [x], "gap")
    g.nodes[-1].output[0] = "output"
    return g.model("cnn_acts", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 16, 1, 1])])


def mlp(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """Gemm with transB=0 (weights [K, N]: per channel on axis 1), Relu, Gemm, on [1, 64]."""
    g = GraphBuilder(seed, opset)
    x = "input"
    for i, (k, n) in enumerate([(64, 48), (48, 10)]):
        w = g.const(f"fc{i}.weight", g.he((k, n), k))
        b = g.const(f"fc{i}.bias", (g.rng.standard_normal(n) * 0.05).astype(np.float32))
        x = g.node("Gemm", [x, w, b], f"fc{i}", transB=0)
        if i == 0:
            x = g.relu(x, "relu0")
    g.nodes[-1].output[0] = "output"
    return g.model("mlp", [("input", F32, [1, 64])], [("output", F32, [1, 10])])


def deconv(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """conv, ConvTranspose 2x2 stride 2 (weight [I, O, kh, kw]: per channel on axis 1), relu, conv."""
    g = GraphBuilder(seed, opset)
    x = g.relu(g.conv("input", 3, 8, 3, "c1", stride=2), "r1")
    w = g.const("up.weight", g.he((8, 4, 2, 2), 8))
    b = g.const("up.bias", (g.rng.standard_normal(4) * 0.05).astype(np.float32))
    x = g.relu(g.node("ConvTranspose", [x, w, b], "up", kernel_shape=[2, 2], strides=[2, 2]), "r2")
    g.conv(x, 4, 4, 3, "c2")
    g.nodes[-1].output[0] = "output"
    return g.model("deconv", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 4, 16, 16])])


def mlp_block(seed: int = 0, opset: int = 17, T: int = 8, D: int = 32) -> onnx.ModelProto:
    """Tokens [1, T, D]: LayerNormalization, one-head attention (MatMul q/k/v with bias, K^T by
    Transpose, / sqrt(D), Softmax, P x V), residual Add, MLP with Gelu (opset >= 20: the op; else
    the Erf form), residual Add."""
    g = GraphBuilder(seed, opset)

    def lin(x, k, n, name):
        y = g.node("MatMul", [x, g.const(f"{name}.weight", g.he((k, n), k))], name)
        return g.node("Add", [y, g.const(f"{name}.bias", (g.rng.standard_normal(n) * 0.05).astype(np.float32))],
                      f"{name}_bias")

    def ln(x, name):
        return g.node("LayerNormalization", [x, g.const(f"{name}.g", g.rng.uniform(0.5, 1.5, D).astype(np.float32)),
                                             g.const(f"{name}.b", (g.rng.standard_normal(D) * 0.1).astype(np.float32))],
                      name, axis=-1, epsilon=1e-5)

    h = ln("input", "ln1")
    q, k, v = lin(h, D, D, "q"), lin(h, D, D, "k"), lin(h, D, D, "v")
    s = g.node("MatMul", [q, g.node("Transpose", [k], "kt", perm=[0, 2, 1])], "qk")
    s = g.node("Div", [s, g.const("sqrt_d", np.array(np.sqrt(D), np.float32))], "scale")
    p = g.node("Softmax", [s], "softmax", axis=-1)
    x = g.node("Add", [lin(g.node("MatMul", [p, v], "pv"), D, D, "o"), "input"], "res1")
    h = lin(ln(x, "ln2"), D, 2 * D, "fc1")
    if opset >= 20:
        h = g.node("Gelu", [h], "gelu")
    else:
        e = g.node("Erf", [g.node("Div", [h, g.const("sqrt2", np.array(np.sqrt(2), np.float32))], "gelu_div")], "gelu_erf")
        e = g.node("Add", [e, g.const("one", np.array(1, np.float32))], "gelu_add")
        h = g.node("Mul", [g.node("Mul", [h, e], "gelu_mul"), g.const("half", np.array(0.5, np.float32))], "gelu_half")
    g.node("Add", [lin(h, 2 * D, D, "fc2"), x], "res2")
    g.nodes[-1].output[0] = "output"
    return g.model("mlp_block", [("input", F32, [1, T, D])], [("output", F32, [1, T, D])])
