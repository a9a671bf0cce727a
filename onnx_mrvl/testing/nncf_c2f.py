"""A YOLOv8 C2f block in OpenVINO NNCF's QDQ placement (nudenet YOLOv8n quantized by ``nncf.quantize``):
Q -> DQ on the inputs of the weighted ops only, SiLU written out (``Sigmoid``, ``Mul``), the block's
input quantized ONCE before its Split, the Concat's inputs on one scale and no Q after the Concat;
the residual Add's output quantized. Seeded weights; the output is the last conv's Q -> DQ.

    c2f(seed)   # x -> Q/DQ -> cv1 (1x1) -> SiLU -> Q/DQ (s1) -> Split -> a, b
                # b -> m_cv1 (3x3) -> SiLU -> Q/DQ -> m_cv2 (3x3) -> SiLU -> Q/DQ -> Add(b, .) -> Q/DQ (s1)
                # Concat(a, b, add, MaxPool(add)) -> cv2 (1x1) -> SiLU -> Q/DQ (output)
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .qdq_parts import QdqParts

F32 = TensorProto.FLOAT


def c2f(seed: int = 0, channels: int = 16, size: int = 12) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    parts = QdqParts()
    inits, nodes, init = parts.inits, parts.nodes, parts.init

    def qdq(x, name, scale):
        return parts.pair(x, name, scale, np.int8(0))

    def conv_silu(x, name, cin, cout, k):
        w = (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))).astype(np.float32)
        s = (np.abs(w).reshape(cout, -1).max(1) / 127).astype(np.float32)   # symmetric, narrow range
        nodes.append(helper.make_node(
            "DequantizeLinear", [init(f"{name}_wq", np.clip(np.rint(w / s[:, None, None, None]), -127, 127).astype(np.int8)),
                                 init(f"{name}_ws", s), init(f"{name}_wz", np.zeros(cout, np.int8))],
            [f"{name}_w"], axis=0, name=f"{name}_wDQ"))
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", init(f"{name}_b", rng.uniform(-0.2, 0.2, cout).astype(np.float32))],
                                      [f"{name}_y"], kernel_shape=[k, k], pads=[k // 2] * 4, name=name))
        nodes.extend([helper.make_node("Sigmoid", [f"{name}_y"], [f"{name}_sg"], name=f"{name}_sigmoid"),
                      helper.make_node("Mul", [f"{name}_y", f"{name}_sg"], [f"{name}_act"], name=f"{name}_mul")])
        return f"{name}_act"

    c, h = channels, channels // 2
    s1 = 4.0 / 127
    x = qdq("x", "x", 3.0 / 127)
    y = qdq(conv_silu(x, "cv1", 3, c, 1), "cv1o", s1)
    nodes.append(helper.make_node("Split", [y, init("split", np.array([h, h], np.int64))], ["a", "b"], axis=1,
                                  name="split"))
    m = qdq(conv_silu("b", "m_cv1", h, h, 3), "m1o", 3.0 / 127)
    m = qdq(conv_silu(m, "m_cv2", h, h, 3), "m2o", 3.5 / 127)
    nodes.append(helper.make_node("Add", ["b", m], ["res"], name="res_add"))
    r = qdq("res", "reso", s1)   # the Concat's inputs share one scale
    nodes.append(helper.make_node("MaxPool", [r], ["mp"], kernel_shape=[3, 3], pads=[1] * 4, name="pool"))
    nodes.append(helper.make_node("Concat", ["a", "b", r, "mp"], ["cat"], axis=1, name="concat"))
    out = qdq(conv_silu("cat", "cv2", c + 2 * h, c, 1), "out", 6.0 / 127)
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out_identity"))
    graph = helper.make_graph(nodes, "nncf_c2f", [helper.make_tensor_value_info("x", F32, [1, 3, size, size])],
                              [helper.make_tensor_value_info("y", F32, [1, c, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
