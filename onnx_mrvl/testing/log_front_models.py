"""Log-spectrum front ends as tf2onnx / torch write them (basic-pitch's CQT, ``torch.log(p + eps)``),
built with onnx.helper and seeded numpy weights, for the log activation (fuse/log_act.py), the Neg
layer (fuse/neg.py) and legalize's log_eps_floor."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def log_power_db(eps: float = 1e-10, neg_imag: bool = True, shift_floor: bool = False, seed: int = 0,
                 frames: int = 32, bins: int = 16, taps: int = 64, minmax: bool = False) -> onnx.ModelProto:
    """input [1, 1, 1, L] -> conv re / im (kernel [1, taps], stride taps / 2) -> (optionally ``-im``,
    tf2onnx's imaginary part) -> ``re^2 + im^2 + eps`` -> Log -> dB (``* 10 / ln 10``) -> a 1x1 conv.
    ``shift_floor``: ``max(Log(p) + 3 ln 2, -20)`` (log_range_scale's shift and a floor) instead of
    the eps. Output [1, 8, 1, frames]; ``minmax``: instead of the conv, basic-pitch's per-sample min-max
    normalisation of the dB spectrum (ReduceMin, Sub, ReduceMax, Div: no accelerator layer), output
    [1, bins, 1, frames]."""
    rng = np.random.default_rng(seed)
    hop = taps // 2
    length = hop * (frames - 1) + taps
    inits = [numpy_helper.from_array((rng.standard_normal((bins, 1, 1, taps)) / math.sqrt(taps)).astype(np.float32), "w_re"),
             numpy_helper.from_array((rng.standard_normal((bins, 1, 1, taps)) / math.sqrt(taps)).astype(np.float32), "w_im"),
             numpy_helper.from_array(np.array(eps, np.float32), "eps"),
             numpy_helper.from_array(np.array(10.0 / math.log(10.0), np.float32), "db"),
             numpy_helper.from_array(np.array(3 * math.log(2.0), np.float32), "shift"),
             numpy_helper.from_array(np.array(-20.0, np.float32), "floor"),
             numpy_helper.from_array((rng.standard_normal((8, bins, 1, 1)) / 4).astype(np.float32), "w_out")]
    conv = dict(kernel_shape=[1, taps], strides=[1, hop])
    nodes = [helper.make_node("Conv", ["input", "w_re"], ["re"], "conv_re", **conv),
             helper.make_node("Conv", ["input", "w_im"], ["im0"], "conv_im", **conv)]
    nodes.append(helper.make_node("Neg", ["im0"], ["im"], "neg_im") if neg_imag else
                 helper.make_node("Identity", ["im0"], ["im"], "im_id"))
    nodes += [helper.make_node("Mul", ["re", "re"], ["re2"], "re_sq"),
              helper.make_node("Mul", ["im", "im"], ["im2"], "im_sq"),
              helper.make_node("Add", ["re2", "im2"], ["power"], "power")]
    if shift_floor:
        nodes += [helper.make_node("Log", ["power"], ["ln0"], "log"),
                  helper.make_node("Add", ["ln0", "shift"], ["ln1"], "log_shift"),
                  helper.make_node("Max", ["ln1", "floor"], ["ln"], "log_floor")]
    else:
        nodes += [helper.make_node("Add", ["power", "eps"], ["power_eps"], "plus_eps"),
                  helper.make_node("Log", ["power_eps"], ["ln"], "log")]
    nodes.append(helper.make_node("Mul", ["ln", "db"], ["spec_db"], "to_db"))
    if minmax:
        nodes += [helper.make_node("ReduceMin", ["spec_db"], ["lo"], "min", keepdims=1),
                  helper.make_node("Sub", ["spec_db", "lo"], ["shifted"], "sub_min"),
                  helper.make_node("ReduceMax", ["shifted"], ["hi"], "max", keepdims=1),
                  helper.make_node("Div", ["shifted", "hi"], ["output"], "div_range")]
    else:
        nodes.append(helper.make_node("Conv", ["spec_db", "w_out"], ["output"], "head"))
    g = helper.make_graph(nodes, "log_power_db",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 1, length])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                         [1, bins if minmax else 8, 1, frames])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def tone_input(m: onnx.ModelProto, amp: float = 0.5, seed: int = 1) -> np.ndarray:
    """A sum of two tones plus noise at ``amp`` peak, the model's input shape."""
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    t = np.arange(shape[-1], dtype=np.float64)
    x = np.sin(0.05 * t) + 0.5 * np.sin(0.31 * t) + 0.05 * np.random.default_rng(seed).standard_normal(t.size)
    return (amp * x / np.abs(x).max()).reshape(shape).astype(np.float32)


def log_db_of_relu(floor: bool = True, relu: bool = True, seed: int = 0, top_db: bool = False) -> onnx.ModelProto:
    """input [1, 1, 1, 64] -> conv (8 filters, kernel 16, stride 8) -> Relu -> Log -> dB (``* 10 / ln
    10``) [-> ``max(., -100)``: a floor after the Log, not in its activation] -> a 1x1 conv. No floor
    inside the Log: an exact 0 (digital silence) gives -inf, as in onnxruntime. ``relu=False``: the
    Log of negative values (NaN in onnxruntime). Output [1, 4, 1, 7]; ``top_db``: instead of the floor
    and the conv, openWakeWord's per-call floor ``Clip(db, max(db) - 80)`` (a computed bound: the
    host's), output [1, 8, 1, 7]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 1, 1, 16)) / 4).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(10.0 / math.log(10.0), np.float32), "db"),
             numpy_helper.from_array(np.array(-100.0, np.float32), "floor"),
             numpy_helper.from_array((rng.standard_normal((4, 8, 1, 1)) / 4).astype(np.float32), "w_out")]
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], "conv", kernel_shape=[1, 16], strides=[1, 8]),
             helper.make_node("Relu" if relu else "Identity", ["c"], ["r"], "relu"),
             helper.make_node("Log", ["r"], ["ln"], "log"),
             helper.make_node("Mul", ["ln", "db"], ["spec_db"], "to_db")]
    y = "spec_db"
    if top_db:
        inits.append(numpy_helper.from_array(np.array(80.0, np.float32), "top"))
        nodes += [helper.make_node("ReduceMax", [y], ["peak"], "peak", keepdims=0),
                  helper.make_node("Sub", ["peak", "top"], ["low"], "low"),
                  helper.make_node("Clip", [y, "low"], ["output"], "top_db")]
    else:
        if floor:
            nodes.append(helper.make_node("Max", [y, "floor"], ["floored"], "db_floor"))
            y = "floored"
        nodes.append(helper.make_node("Conv", [y, "w_out"], ["output"], "head"))
    g = helper.make_graph(nodes, "log_db_of_relu",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 1, 64])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8 if top_db else 4, 1, 7])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)
