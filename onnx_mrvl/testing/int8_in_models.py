"""Single QDQ layers whose output is float (ModelOpt / TensorRT "inputs only" placement): the
activation's Q -> DQ, int8 weights behind a DequantizeLinear, no Q after the layer, which
fuse/qdq_int8_in.py imports as int8-in / fp16-out layers. Seeded weights and scales.

    layer("conv", act="u8", per_channel=False, bias="fp32", activation="Relu")
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT
QT = {"s8": (TensorProto.INT8, np.int8), "u8": (TensorProto.UINT8, np.uint8)}


def _weights(rng, shape, axis: int, per_channel: bool):
    w = rng.standard_normal(shape).astype(np.float32) / np.sqrt(np.prod(shape) / shape[axis])
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.abs(w).max(axis=red) if per_channel else np.array([np.abs(w).max()])
    s = (amax / 127).astype(np.float32)
    bshape = [-1 if i == axis else 1 for i in range(w.ndim)] if per_channel else [1] * w.ndim
    q = np.clip(np.rint(w / s.reshape(bshape)), -127, 127).astype(np.int8)
    return q, s if per_channel else s.reshape(())


def layer(kind: str = "conv", act: str = "s8", per_channel: bool = True, bias: Optional[str] = "int32",
          activation: Optional[str] = None, kernel: int = 3, groups: int = 1, channels: Sequence[int] = (8, 16),
          size: int = 10, rows: int = 4, seed: int = 0, opset: int = 13, weight_zero_point: int = 0,
          bn: bool = False) -> onnx.ModelProto:
    """``kind``: conv (NCHW [1, C, size, size], pads 1, stride 1), gemm ([rows, C] x W^T, transB=1),
    matmul ([1, rows, C] x [C, O], its bias an Add); ``act``: s8 / u8 activations (asymmetric scale
    from the input's range); ``bias``: int32 (DQ at s_x * s_w), fp32 or None; ``activation``:
    None, Relu, Clip (0, 6), LeakyRelu or Sigmoid after the layer; the output stays float;
    ``weight_zero_point``: the int8 weights' (non-zero: no int8 form on the MAC array); ``bn``: a
    BatchNormalization (gamma of both signs) between the layer (conv / gemm) and the activation."""
    rng = np.random.default_rng(seed)
    cin, cout = channels
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    et, dt = QT[act]
    lo, hi = (-2.5, 3.0)
    s_x = np.float32((hi - lo) / 255)
    z_x = int(np.rint(-lo / s_x)) + (-128 if act == "s8" else 0)
    nodes += [helper.make_node("QuantizeLinear", ["x", init("x_s", s_x), init("x_z", np.array(z_x, dt))], ["x_q"],
                               name="x_QuantizeLinear"),
              helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_z"], ["x_dq"], name="x_DequantizeLinear")]
    if kind == "conv":
        wshape, axis = (cout, cin // groups, kernel, kernel), 0
        xshape = [1, cin, size, size]
    elif kind == "gemm":
        wshape, axis, xshape = (cout, cin), 0, [rows, cin]
    else:
        wshape, axis, xshape = (cin, cout), 1, [1, rows, cin]
    q, s_w = _weights(rng, wshape, axis, per_channel)
    dq_kw = {"axis": axis} if per_channel else {}
    nodes.append(helper.make_node("DequantizeLinear", [init("w_q", q), init("w_s", s_w),
                                                       init("w_z", np.full(s_w.shape, weight_zero_point, np.int8))], ["w"], **dq_kw))
    b_in = []
    if bias:
        b = (rng.standard_normal(cout) * 0.3).astype(np.float32)
        if bias == "int32":
            bs = (s_x * np.broadcast_to(s_w, (cout,))).astype(np.float32)
            nodes.append(helper.make_node("DequantizeLinear", [init("b_q", np.rint(b / bs).astype(np.int32)),
                                                               init("b_s", bs)], ["b"], axis=0))
            b_in = ["b"]
        else:
            b_in = [init("b", b)]
    y = "y_layer"
    if kind == "conv":
        nodes.append(helper.make_node("Conv", ["x_dq", "w"] + b_in, [y], kernel_shape=[kernel, kernel],
                                      pads=[kernel // 2] * 4, group=groups, name="layer"))
        oshape = [1, cout, size, size]
    elif kind == "gemm":
        nodes.append(helper.make_node("Gemm", ["x_dq", "w"] + b_in, [y], transB=1, name="layer"))
        oshape = [rows, cout]
    else:
        nodes.append(helper.make_node("MatMul", ["x_dq", "w"], [y if not b_in else "mm"], name="layer"))
        if b_in:
            nodes.append(helper.make_node("Add", ["mm"] + b_in, [y], name="bias_add"))
        oshape = [1, rows, cout]
    if bn:
        nodes[-1].output[0] = "pre_bn"
        stats = (np.linspace(-1.5, 1.5, cout) + 0.05, np.linspace(-0.2, 0.2, cout), np.linspace(-0.1, 0.1, cout),
                 np.linspace(0.5, 1.5, cout))
        nodes.append(helper.make_node("BatchNormalization", ["pre_bn"] + [init(f"bn_{k}", v.astype(np.float32))
                                                                         for k, v in zip("gbmv", stats)], [y], name="bn"))
    if activation:
        extra = {"LeakyRelu": {"alpha": 0.1}}.get(activation, {})
        ins = [y] + ([init("lo", np.float32(0)), init("hi", np.float32(6))] if activation == "Clip" else [])
        nodes.append(helper.make_node(activation, ins, ["y"], name="act", **extra))
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, f"int8_in_{kind}", [helper.make_tensor_value_info("x", F32, xshape)],
                              [helper.make_tensor_value_info("y", F32, oshape)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def feeds(model: onnx.ModelProto, seed: int = 0):
    """N(0.25, 1.2) inputs: most inside the Q's range [-2.5, 3], some saturating."""
    rng = np.random.default_rng(100 + seed)
    i = model.graph.input[0]
    shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
    return {i.name: (rng.standard_normal(shape) * 1.2 + 0.25).astype(np.float32)}
