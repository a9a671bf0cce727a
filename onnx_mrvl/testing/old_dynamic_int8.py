"""Models in the dynamic-int8 form of onnxruntime's first quantizer (``onnx.quantize`` 0.1, the
quantizer of onnxruntime 1.2 - 1.5; ddddocr's ``common_old.onnx``): the bias is quantized at run time
and added to the int32 accumulator,

    DynamicQuantizeLinear(x) -> ConvInteger / MatMulInteger(x_q, W_q (uint8, zero point), x_zp, W_zp)
      -> Add(acc, Reshape(Cast(int32)(Floor(Div(B, x_scale * W_scale))))) -> Cast(float) -> Mul(x_scale * W_scale)

with the float model of the same (dequantized) weights and exact bias beside it."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

F32 = TensorProto.FLOAT


def _uint8_weights(w: np.ndarray) -> Tuple[np.ndarray, np.float32, np.uint8]:
    """Per-tensor asymmetric uint8 weights, as the old quantizer wrote them."""
    lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
    s = np.float32((hi - lo) / 255.0)
    z = np.uint8(np.clip(round(-lo / s), 0, 255))
    q = np.clip(np.round(w / s) + z, 0, 255).astype(np.uint8)
    return q, s, z


class _Pair:
    def __init__(self):
        self.dyn, self.flt, self.inits, self.finits = [], [], [], []

    def const(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def layer(self, k: int, x: str, w: np.ndarray, b: np.ndarray, conv: bool, **attrs) -> str:
        """One layer in both forms; returns its output (the same name in both models)."""
        q, s, z = _uint8_weights(w)
        wq, ws, wz = self.const(f"w{k}_q", q), self.const(f"w{k}_s", np.array(s)), self.const(f"w{k}_z", np.array(z))
        bf = self.const(f"b{k}", b.astype(np.float32))
        y = f"y{k}"
        self.dyn += [
            helper.make_node("DynamicQuantizeLinear", [x], [f"{x}_q", f"{x}_s", f"{x}_z"], name=f"dql{k}"),
            helper.make_node("Mul", [f"{x}_s", ws], [f"bs{k}"], name=f"bias_scale{k}"),
            helper.make_node("Div", [bf, f"bs{k}"], [f"bd{k}"], name=f"bias_div{k}"),
            helper.make_node("Floor", [f"bd{k}"], [f"bf{k}"], name=f"bias_floor{k}"),
            helper.make_node("Cast", [f"bf{k}"], [f"bi{k}"], name=f"bias_int{k}", to=TensorProto.INT32),
            helper.make_node("ConvInteger" if conv else "MatMulInteger", [f"{x}_q", wq, f"{x}_z", wz], [f"acc{k}"],
                             name=f"layer{k}", **attrs)]
        bias_int = f"bi{k}"
        if conv:
            shape = self.const(f"bshape{k}", np.array([1, -1, 1, 1], np.int64))
            self.dyn.append(helper.make_node("Reshape", [f"bi{k}", shape], [f"br{k}"], name=f"bias_reshape{k}"))
            bias_int = f"br{k}"
        self.dyn += [
            helper.make_node("Add", [f"acc{k}", bias_int], [f"accb{k}"], name=f"bias_add{k}"),
            helper.make_node("Cast", [f"accb{k}"], [f"accf{k}"], name=f"acc_float{k}", to=F32),
            helper.make_node("Mul", [f"{x}_s", ws], [f"s{k}"], name=f"scales{k}"),
            helper.make_node("Mul", [f"accf{k}", f"s{k}"], [y], name=f"out_scale{k}")]
        wd = f"w{k}_deq"
        self.finits += [nh.from_array(((q.astype(np.float32) - np.float32(z)) * s).astype(np.float32), wd),
                        nh.from_array(b.astype(np.float32), f"b{k}")]
        if conv:
            self.flt.append(helper.make_node("Conv", [x, wd, f"b{k}"], [y], name=f"layer{k}", **attrs))
        else:
            self.flt += [helper.make_node("MatMul", [x, wd], [f"mm{k}"], name=f"layer{k}"),
                         helper.make_node("Add", [f"mm{k}", f"b{k}"], [y], name=f"bias{k}")]
        return y

    def act(self, y: str, k: int) -> str:
        """SiLU ``y * Sigmoid(y)`` in both models."""
        nodes = [helper.make_node("Sigmoid", [y], [f"sg{k}"], name=f"sigmoid{k}"),
                 helper.make_node("Mul", [y, f"sg{k}"], [f"a{k}"], name=f"silu{k}")]
        self.dyn += nodes
        self.flt += [onnx.NodeProto.FromString(n.SerializeToString()) for n in nodes]
        return f"a{k}"


def old_dynamic_cnn(seed: int = 0) -> Tuple[onnx.ModelProto, onnx.ModelProto]:
    """(the old-quantizer dynamic model, its float model): Conv 3->16 s2 + SiLU, Conv 16->16 + SiLU,
    Flatten, MatMul 1024->10 + bias. Input [1, 3, 16, 16] in [0, 1]."""
    rng = np.random.default_rng(seed)
    p = _Pair()
    he = lambda shape, fan: (rng.standard_normal(shape) * np.sqrt(2.0 / fan)).astype(np.float32)   # noqa: E731
    x = p.act(p.layer(0, "input", he((16, 3, 3, 3), 27), rng.uniform(-0.3, 0.3, 16), True,
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), 0)
    x = p.act(p.layer(1, x, he((16, 16, 3, 3), 144), rng.uniform(-0.3, 0.3, 16), True,
                      kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 1)
    for nodes in (p.dyn, p.flt):
        nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten"))
    p.layer(2, "flat", he((1024, 10), 1024), rng.uniform(-0.3, 0.3, 10), False)
    models = []
    for nodes, inits, name in ((p.dyn, p.inits, "old_dynamic_cnn"), (p.flt, p.finits, "old_dynamic_cnn_float")):
        graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", F32, [1, 3, 16, 16])],
                                  [helper.make_tensor_value_info("y2", F32, [1, 10])], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="onnx.quantize")
        m.ir_version = 8
        models.append(m)
    return models[0], models[1]
