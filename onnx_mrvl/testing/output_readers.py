"""A graph output the accelerator also reads, stored permuted in its region (seq2seq encoders that
return their memory batch-first and pool it for the decoder), built with onnx.helper and seeded
weights."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def batch_first_memory(seed: int = 0, T: int = 6, B: int = 2, C: int = 16) -> onnx.ModelProto:
    """``x [T, B, C] -> MatMul -> Relu -> Transpose [1, 0, 2] = mem`` (a graph output, ``[B, T, C]``)
    ``-> Mul(mem, m [B, T, 1]) -> MatMul -> Tanh = y``: arabic-name-romanizer's GRU encoder returns
    its memory batch-first and masks it for the bridge to the decoder."""
    rng = np.random.default_rng(seed)
    mk = helper.make_node
    inits = [numpy_helper.from_array((rng.standard_normal((C, C)) * 0.3).astype(np.float32), "W1"),
             numpy_helper.from_array((rng.standard_normal((C, 8)) * 0.3).astype(np.float32), "W2")]
    nodes = [mk("MatMul", ["x", "W1"], ["h"], name="proj"), mk("Relu", ["h"], ["r"], name="relu"),
             mk("Transpose", ["r"], ["mem"], name="batch_first", perm=[1, 0, 2]),
             mk("Mul", ["mem", "m"], ["mm"], name="masked"), mk("MatMul", ["mm", "W2"], ["o"], name="head"),
             mk("Tanh", ["o"], ["y"], name="tanh")]
    g = helper.make_graph(nodes, "batch_first_memory",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, C]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, [B, T, 1])],
                          [helper.make_tensor_value_info("mem", TensorProto.FLOAT, [B, T, C]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, T, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m
