"""A YOLOv8 C2f block in Intel Neural Compressor's QDQ placement (nudenet YOLOv8n quantized by
onnx-neural-compressor with ``quant_format=QDQ``): every Conv's input and output and every Sigmoid's
output quantized (uint8 activations, per-tensor int8 weights, int32 biases), but the SiLU's
``Mul(DQ(conv), DQ(sigmoid))``, the Split, the residual Add and the Concat left float; only the
Concat's output quantized. Seeded weights; the output is the last conv's Q -> DQ.

    c2f(seed)   # x -> Q/DQ -> cv1 (1x1) -> Q/DQ -> SiLU (Mul float) -> Split -> a, b
                # b -> Q/DQ -> m_cv1 (3x3) -> SiLU -> Q/DQ -> m_cv2 (3x3) -> SiLU -> Add(b, .) (float)
                # Concat(a, b, add) -> Q/DQ -> cv2 (1x1) -> Q/DQ (output)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .qdq_parts import QdqParts

F32 = TensorProto.FLOAT


def _qdq(parts: QdqParts, x: str, name: str, scale, zero=128) -> str:
    """An activation pair in INC's placement: uint8, zero point 128 (0 after a sigmoid / the image)."""
    return parts.pair(x, name, scale, np.uint8(zero))


def _conv(parts: QdqParts, rng, x: str, name: str, cin: int, cout: int, k: int, s_x, s_y) -> str:
    """``DQ(x) -> Conv(DQ(W), DQ(bias)) -> Q/DQ``: per-tensor int8 weights, an int32 bias at s_x * s_w."""
    nodes, init = parts.nodes, parts.init
    w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
    s_w = np.float32(np.abs(w).max() / 127)
    b = np.rint(rng.uniform(-0.3, 0.3, cout) / (np.float32(s_x) * s_w)).astype(np.int32)
    nodes.append(helper.make_node("DequantizeLinear", [init(f"{name}_wq", np.rint(w / s_w).astype(np.int8)),
                                                       init(f"{name}_ws", s_w)], [f"{name}_w"], name=f"{name}_wDQ"))
    nodes.append(helper.make_node("DequantizeLinear", [init(f"{name}_bq", b),
                                                       init(f"{name}_bs", np.float32(s_x) * s_w)],
                                  [f"{name}_b"], name=f"{name}_bDQ"))
    nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_y"], kernel_shape=[k, k],
                                  pads=[k // 2] * 4, name=name))
    return _qdq(parts, f"{name}_y", f"{name}o", s_y)


def _model(parts: QdqParts, name: str, in_shape, out: str, out_shape) -> onnx.ModelProto:
    """The checked opset-13 model of ``parts`` with input ``x`` and output ``out``."""
    graph = helper.make_graph(parts.nodes, name, [helper.make_tensor_value_info("x", F32, in_shape)],
                              [helper.make_tensor_value_info(out, F32, out_shape)], parts.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def c2f(seed: int = 0, channels: int = 16, size: int = 12) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    nodes, init = parts.nodes, parts.init

    def qdq(x, name, scale, zero=128):
        return _qdq(parts, x, name, scale, zero)

    def conv(x, name, cin, cout, k, s_x, s_y):
        return _conv(parts, rng, x, name, cin, cout, k, s_x, s_y)

    def silu(y, name):
        nodes.append(helper.make_node("Sigmoid", [y], [f"{name}_sg"], name=f"{name}_sigmoid"))
        sg = qdq(f"{name}_sg", f"{name}_sgo", 1.0 / 255, 0)
        nodes.append(helper.make_node("Mul", [y, sg], [f"{name}_act"], name=f"{name}_mul"))
        return f"{name}_act"

    c, h = channels, channels // 2
    s_x, s1, s_b, s_m1, s_m2, s_cat = 1.0 / 255, 6.0 / 255, 4.0 / 255, 5.0 / 255, 5.5 / 255, 7.0 / 255
    x = qdq("x", "x", s_x, 0)
    y = silu(conv(x, "cv1", 3, c, 1, s_x, s1), "cv1")
    nodes.append(helper.make_node("Split", [y, init("split", np.array([h, h], np.int64))], ["a", "b"], axis=1,
                                  name="split"))
    m = silu(conv(qdq("b", "bq", s_b), "m_cv1", h, h, 3, s_b, s_m1), "m_cv1")
    m = silu(conv(qdq(m, "m1q", s_m1), "m_cv2", h, h, 3, s_m1, s_m2), "m_cv2")
    nodes.append(helper.make_node("Add", ["b", m], ["res"], name="res_add"))
    nodes.append(helper.make_node("Concat", ["a", "b", "res"], ["cat"], axis=1, name="concat"))
    out = conv(qdq("cat", "cat", s_cat), "cv2", c + h, c, 1, s_cat, 6.0 / 255)
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out_identity"))
    return _model(parts, "inc_c2f", [1, 3, size, size], "y", [1, c, size, size])


def feeds(seed: int, size: int = 12) -> dict:
    """An image-like input in [0, 1] (the detector's 1/255 input)."""
    return {"x": np.random.default_rng(seed).uniform(0, 1, (1, 3, size, size)).astype(np.float32)}


def rse_concat(seed: int = 0, channels: int = 8, size: int = 8) -> onnx.ModelProto:
    """PP-OCRv4 det's residual-SE FPN step in INC's QDQ placement: ``Q(Concat(Resize(x + x *
    HardSigmoid(se)), Resize(y)))`` with the HardSigmoid, Mul, Add, nearest Resizes and Concat float.

        x = DQ(conv(input)); se = DQ(conv1x1(DQ(GlobalAveragePool(x)))); y = DQ(conv(input))
        Concat(Resize(x + x * HardSigmoid(se)), Resize(y)) -> Q/DQ -> conv (3x3) -> Q/DQ (output)
    """
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    nodes, init = parts.nodes, parts.init
    c = channels
    s_in, s_x, s_p, s_se, s_y, s_cat = 1.0 / 255, 5.0 / 255, 2.0 / 255, 9.0 / 255, 4.0 / 255, 8.0 / 255

    def qdq(x, name, scale, zero=128):
        return _qdq(parts, x, name, scale, zero)

    def conv(x, name, cin, cout, k, s_x, s_y):
        return _conv(parts, rng, x, name, cin, cout, k, s_x, s_y)

    inp = qdq("x", "in", s_in, 0)
    x = conv(inp, "cx", 3, c, 3, s_in, s_x)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    se = conv(qdq("gap", "gapq", s_p), "se", c, c, 1, s_p, s_se)
    nodes += [helper.make_node("HardSigmoid", [se], ["hs"], alpha=0.2, beta=0.5, name="hsig"),
              helper.make_node("Mul", [x, "hs"], ["xs"], name="se_mul"),
              helper.make_node("Add", [x, "xs"], ["r"], name="res_add"),
              helper.make_node("Resize", ["r", "", init("up", np.array([1, 1, 2, 2], np.float32))], ["ru"],
                               mode="nearest", name="up_r")]
    y = conv(inp, "cy", 3, c, 3, s_in, s_y)
    nodes += [helper.make_node("Resize", [y, "", "up"], ["yu"], mode="nearest", name="up_y"),
              helper.make_node("Concat", ["ru", "yu"], ["cat"], axis=1, name="concat")]
    out = conv(qdq("cat", "cat", s_cat), "co", 2 * c, c, 3, s_cat, 6.0 / 255)
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out_identity"))
    return _model(parts, "inc_rse", [1, 3, size, size], "y", [1, c, 2 * size, 2 * size])


def sppf_se(seed: int = 0, channels: int = 8, size: int = 12) -> onnx.ModelProto:
    """YOLOv8's SPPF and PP-LCNet's SE block in INC's QDQ placement:

        m = SiLU(DQ(c1)) (Mul float); Concat(m, MaxPool(m), MaxPool(MaxPool(m))) -> Q/DQ -> c2 (1x1)
        a = DQ(c2) * s + b (float, the constant first); se = DQ(conv1x1(DQ(GlobalAveragePool(DQ(c2)))))
        Q(a * HardSigmoid(se)) -> DQ -> s2 * x + b2 -> Q/DQ (a one-input function, the constant first)
        -> c3 (3x3) -> Q/DQ (output)
    """
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    nodes, init = parts.nodes, parts.init
    c = channels
    s_in, s1, s_cat, s2, s_p, s_se, s_y, s_l = 1.0 / 255, 6.0 / 255, 5.0 / 255, 7.0 / 255, 3.0 / 255, 9.0 / 255, \
        6.5 / 255, 5.5 / 255

    def qdq(x, name, scale, zero=128):
        return _qdq(parts, x, name, scale, zero)

    def conv(x, name, cin, cout, k, s_x, s_y):
        return _conv(parts, rng, x, name, cin, cout, k, s_x, s_y)

    def scalar(name, v):
        return init(name, np.float32(v))

    x1 = conv(qdq("x", "in", s_in, 0), "c1", 3, c, 3, s_in, s1)
    nodes.append(helper.make_node("Sigmoid", [x1], ["sg"], name="sigmoid"))
    nodes += [helper.make_node("Mul", [x1, qdq("sg", "sgq", 1.0 / 255, 0)], ["m"], name="silu_mul"),
              helper.make_node("MaxPool", ["m"], ["p1"], kernel_shape=[5, 5], pads=[2] * 4, name="pool1"),
              helper.make_node("MaxPool", ["p1"], ["p2"], kernel_shape=[5, 5], pads=[2] * 4, name="pool2"),
              helper.make_node("Concat", ["m", "p1", "p2"], ["cat"], axis=1, name="concat")]
    d = conv(qdq("cat", "catq", s_cat), "c2", 3 * c, c, 1, s_cat, s2)
    nodes += [helper.make_node("Mul", [scalar("aff_s", 1.37), d], ["am"], name="aff_mul"),
              helper.make_node("Add", ["am", scalar("aff_b", -0.21)], ["a"], name="aff_add"),
              helper.make_node("GlobalAveragePool", [d], ["gap"], name="gap")]
    se = conv(qdq("gap", "gapq", s_p), "se", c, c, 1, s_p, s_se)
    nodes += [helper.make_node("HardSigmoid", [se], ["hs"], alpha=0.2, beta=0.5, name="hsig"),
              helper.make_node("Mul", ["a", "hs"], ["y"], name="se_mul")]
    y = qdq("y", "yq", s_y)
    nodes += [helper.make_node("Mul", [scalar("lut_s", 0.83), y], ["lm"], name="lut_mul"),
              helper.make_node("Add", ["lm", scalar("lut_b", 0.05)], ["l"], name="lut_add")]
    out = conv(qdq("l", "lq", s_l), "c3", c, c, 3, s_l, 6.0 / 255)
    nodes.append(helper.make_node("Identity", [out], ["out"], name="out_identity"))
    return _model(parts, "inc_sppf_se", [1, 3, size, size], "out", [1, c, size, size])


def dfl(seed: int = 0, size: int = 6) -> onnx.ModelProto:
    """YOLOv8's distribution focal loss head in INC's QDQ placement: two dequantized convs of other
    scales concatenated (float), reshaped to bins, transposed, a float Softmax over the 16 bins, its
    output quantized for the DFL conv (weights 0..15):

        Concat(DQ(ca), DQ(cb)) -> Reshape [1, 2, 16, HW] -> Transpose -> Softmax(axis 1) -> Q/DQ
        -> Conv 1x1 (16 -> 1) -> Q/DQ (output)
    """
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    nodes, init = parts.nodes, parts.init
    s_in = 1.0 / 255
    inp = _qdq(parts, "x", "in", s_in, 0)
    a = _conv(parts, rng, inp, "ca", 3, 16, 3, s_in, 9.0 / 255)
    b = _conv(parts, rng, inp, "cb", 3, 16, 3, s_in, 11.0 / 255)
    nodes += [helper.make_node("Concat", [a, b], ["cat"], axis=1, name="concat"),
              helper.make_node("Reshape", ["cat", init("bins", np.array([1, 2, 16, size * size], np.int64))], ["r"],
                               name="bins_reshape"),
              helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3], name="bins_transpose"),
              helper.make_node("Softmax", ["t"], ["sm"], axis=1, name="softmax")]
    q = _qdq(parts, "sm", "smq", 1.0 / 255, 0)
    nodes += [helper.make_node("DequantizeLinear", [init("dfl_wq", np.arange(16, dtype=np.int8).reshape(1, 16, 1, 1)),
                                                    init("dfl_ws", np.float32(1.0))], ["dfl_w"], name="dfl_wDQ"),
              helper.make_node("Conv", [q, "dfl_w"], ["dfl_y"], kernel_shape=[1, 1], name="dfl_conv")]
    out = _qdq(parts, "dfl_y", "dflo", 15.0 / 255, 0)
    nodes.append(helper.make_node("Identity", [out], ["out"], name="out_identity"))
    return _model(parts, "inc_dfl", [1, 3, size, size], "out", [1, 1, 2, size * size])


def hswish_se(seed: int = 0, channels: int = 8, size: int = 10) -> onnx.ModelProto:
    """PP-LCNetV3's block in INC's QDQ placement (PP-OCRv4 det): a one-input float chain of one
    conv's codes over several ops -- affine, HardSwish written out (``x * Clip(x + 3, 0, 6) / 6``),
    affine -- whose result two readers take: the SE mean's quantizer and the SE Mul (float, then Q):

        h = s2 * HardSwish(s1 * DQ(c1) + b1) + b2
        Q(h) -> DQ -> GlobalAveragePool -> Q/DQ -> conv 1x1 -> Q/DQ (se)
        Q(h * HardSigmoid(se)) -> DQ -> c2 (3x3) -> Q/DQ (output)
    """
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    nodes, init = parts.nodes, parts.init
    c = channels
    s_in, s1, s_h, s_p, s_se, s_y = 1.0 / 255, 6.0 / 255, 5.0 / 255, 2.5 / 255, 9.0 / 255, 4.5 / 255

    def scalar(name, v):
        return init(name, np.float32(v))

    x1 = _conv(parts, rng, _qdq(parts, "x", "in", s_in, 0), "c1", 3, c, 3, s_in, s1)
    nodes += [helper.make_node("Mul", [scalar("a1_s", 1.21), x1], ["a1m"], name="a1_mul"),
              helper.make_node("Add", ["a1m", scalar("a1_b", 0.13)], ["a1"], name="a1_add"),
              helper.make_node("Add", ["a1", scalar("three", 3.0)], ["hp"], name="hs_add"),
              helper.make_node("Clip", ["hp", scalar("zero", 0.0), scalar("six", 6.0)], ["hc"], name="hs_clip"),
              helper.make_node("Mul", ["a1", "hc"], ["hm"], name="hs_mul"),
              helper.make_node("Div", ["hm", "six"], ["hsw"], name="hs_div"),
              helper.make_node("Mul", [scalar("a2_s", 0.87), "hsw"], ["a2m"], name="a2_mul"),
              helper.make_node("Add", ["a2m", scalar("a2_b", -0.07)], ["h"], name="a2_add")]
    nodes.append(helper.make_node("GlobalAveragePool", [_qdq(parts, "h", "hq", s_h)], ["gap"], name="gap"))
    se = _conv(parts, rng, _qdq(parts, "gap", "gapq", s_p), "se", c, c, 1, s_p, s_se)
    nodes += [helper.make_node("HardSigmoid", [se], ["hsg"], alpha=0.2, beta=0.5, name="hsig"),
              helper.make_node("Mul", ["h", "hsg"], ["y"], name="se_mul")]
    out = _conv(parts, rng, _qdq(parts, "y", "yq", s_y), "c2", c, c, 3, s_y, 6.0 / 255)
    nodes.append(helper.make_node("Identity", [out], ["out"], name="out_identity"))
    return _model(parts, "inc_hswish_se", [1, 3, size, size], "out", [1, c, size, size])



def branch_concat(seed: int = 0, op: str = "Sub", act: str = "", channels: int = 8, size: int = 10) -> onnx.ModelProto:
    """Two branches combined in INC's QDQ placement (the element-wise ops between quantizers float):
    ``op`` (Sub: DBNet's ``P - T``, complex convs' ``conv_r - conv_i``; Add) of two dequantized convs,
    an optional activation ``act`` ("LeakyRelu", alpha 0.1), and the Concat float, only the Concat's
    output quantized:

        Concat(act(DQ(ca) op DQ(cb)), DQ(ca)) -> Q/DQ -> co (3x3) -> Q/DQ (output)

    ``op`` "Div": the divisor is ``DQ(Q(Sigmoid(DQ(cb)))) + 1`` (a gate in (1, 2), the Sigmoid's output
    quantized as INC does, the ``+ 1`` float).
    """
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    s_in = 1.0 / 255
    inp = _qdq(parts, "x", "in", s_in, 0)
    a = _conv(parts, rng, inp, "ca", 3, channels, 3, s_in, 6.0 / 255)
    b = _conv(parts, rng, inp, "cb", 3, channels, 3, s_in, 5.0 / 255)
    if op == "Div":
        parts.nodes.append(helper.make_node("Sigmoid", [b], ["sg"], name="sig"))
        parts.nodes.append(helper.make_node("Add", [_qdq(parts, "sg", "sgq", 1.0 / 255, 0),
                                                    parts.init("one", np.float32(1.0))], ["b1"], name="plus1"))
        b = "b1"
    parts.nodes.append(helper.make_node(op, [a, b], ["d"], name=op.lower()))
    if act:
        parts.nodes.append(helper.make_node(act, ["d"], ["da"], alpha=0.1, name="act"))
    parts.nodes.append(helper.make_node("Concat", ["da" if act else "d", a], ["cat"], axis=1, name="concat"))
    out = _conv(parts, rng, _qdq(parts, "cat", "catq", 7.0 / 255), "co", 2 * channels, channels, 3, 7.0 / 255,
                6.0 / 255)
    parts.nodes.append(helper.make_node("Identity", [out], ["out"], name="out_identity"))
    return _model(parts, "inc_branch_concat", [1, 3, size, size], "out", [1, channels, size, size])
