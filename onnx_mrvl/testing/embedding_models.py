"""Embedding heads that end in an L2 normalisation (speaker / face encoders: Resemblyzer's
``relu(linear(h)) / norm``), built with onnx.helper and seeded weights (legalize's l2_normalize)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def l2_embedding(form: str = "reducel2", opset: int = 17, dim: int = 64, seed: int = 0) -> onnx.ModelProto:
    """input [2, 32] -> Gemm -> Relu -> L2 normalisation over the last axis. ``form``: "reducel2"
    (``Div(x, ReduceL2(x, [-1], keepdims=1))``, axes an attribute before opset 18, an input from 18),
    "lpnorm" (``LpNormalization(p=2, axis=-1)``), "fnormalize" (F.normalize: ``x / Expand(Clip(ReduceL2(x), 1e-12))``,
    opset < 18), "axis0" (ReduceL2 over the batch axis: left alone)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((dim, 32)) / 6).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(dim) / 10).astype(np.float32), "b")]
    nodes = [helper.make_node("Gemm", ["input", "w", "b"], ["lin"], "linear", transB=1),
             helper.make_node("Relu", ["lin"], ["emb"], "relu")]
    if form == "lpnorm":
        nodes.append(helper.make_node("LpNormalization", ["emb"], ["output"], "l2norm", axis=-1, p=2))
    elif form == "fnormalize":   # F.normalize (TorchScript): ReduceL2 -> Clip(min=eps) -> Expand(Shape(x))
        inits.append(numpy_helper.from_array(np.array(1e-12, np.float32), "eps"))
        nodes += [helper.make_node("ReduceL2", ["emb"], ["norm"], "norm", axes=[-1], keepdims=1),
                  helper.make_node("Clip", ["norm", "eps", ""], ["norm_c"], "clamp_min"),
                  helper.make_node("Shape", ["emb"], ["emb_shape"], "shape"),
                  helper.make_node("Expand", ["norm_c", "emb_shape"], ["norm_e"], "expand_as"),
                  helper.make_node("Div", ["emb", "norm_e"], ["output"], "normalize")]
    else:
        axis = 0 if form == "axis0" else -1
        if opset >= 18:
            inits.append(numpy_helper.from_array(np.array([axis], np.int64), "axes"))
            nodes.append(helper.make_node("ReduceL2", ["emb", "axes"], ["norm"], "norm", keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceL2", ["emb"], ["norm"], "norm", axes=[axis], keepdims=1))
        nodes.append(helper.make_node("Div", ["emb", "norm"], ["output"], "normalize"))
    g = helper.make_graph(nodes, "l2_embedding", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, 32])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, dim])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)
