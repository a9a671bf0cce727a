"""A model whose ``If`` condition depends on the input's values (openWakeWord's hey_jarvis: the verifier
head runs only when the score passes a threshold), the layer norm in front of it with its eps
quantized by a constant ``Q -> DQ`` pair (onnxruntime's quantize_static), built with onnx.helper."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def norm_then_data_if(seed: int = 0) -> onnx.ModelProto:
    """input [1, 16] -> layer norm (eps through Q -> DQ of a constant) -> score = ReduceSum ->
    If(score >= 0): then y * 2, else y - 1 (y the normalised input). Outputs: the If's result."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(np.array(1e-5 / 64, np.float32), "eps_scale"),
             numpy_helper.from_array(np.array(0, np.int8), "eps_zp"),
             numpy_helper.from_array(np.array(0.0, np.float32), "thr"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "gamma")]
    nodes = [helper.make_node("ReduceMean", ["input"], ["m"], "mean", axes=[-1]),
             helper.make_node("Sub", ["input", "m"], ["d"], "center"),
             helper.make_node("Mul", ["d", "d"], ["d2"], "square"),
             helper.make_node("ReduceMean", ["d2"], ["v"], "var", axes=[-1]),
             helper.make_node("QuantizeLinear", ["eps", "eps_scale", "eps_zp"], ["eps_q"], "eps_q"),
             helper.make_node("DequantizeLinear", ["eps_q", "eps_scale", "eps_zp"], ["eps_dq"], "eps_dq"),
             helper.make_node("Add", ["v", "eps_dq"], ["ve"], "add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], "sd"),
             helper.make_node("Div", ["d", "sd"], ["n"], "normalize"),
             helper.make_node("Mul", ["n", "gamma"], ["y"], "scale"),
             helper.make_node("ReduceSum", ["y"], ["score"], "score", keepdims=0),
             helper.make_node("GreaterOrEqual", ["score", "thr"], ["cond"], "detect")]
    out = helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [1, 16])
    then_g = helper.make_graph([helper.make_node("Add", ["y", "y"], ["branch_out"], "twice")], "then", [], [out])
    two = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    else_g = helper.make_graph([helper.make_node("Sub", ["y", "one"], ["branch_out"], "minus_one")], "else", [], [out],
                               [two])
    nodes.append(helper.make_node("If", ["cond"], ["output"], "verify", then_branch=then_g, else_branch=else_g))
    g = helper.make_graph(nodes, "norm_then_data_if",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)
