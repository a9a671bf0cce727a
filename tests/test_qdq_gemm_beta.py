"""A QDQ Gemm without C whose beta is not 1 (tf2onnx writes beta = 0 for Keras 2's Dense on 2-D
data): beta scales C only, so it is the FC form; an int8 FC equal to onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl


def _model(beta: float):
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (8, 16)).astype(np.int8)   # [O, K], transB = 1
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "sx"), numpy_helper.from_array(np.array(0, np.int8), "zx"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.01, np.float32), "sw"),
             numpy_helper.from_array(np.array(0, np.int8), "zw"),
             numpy_helper.from_array(np.array(0.05, np.float32), "sy"), numpy_helper.from_array(np.array(2, np.int8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("Gemm", ["xd", "wd"], ["y"], alpha=1.0, beta=beta, transA=0, transB=1),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_qdq_gemm_without_c_ignores_beta(tmp_path):
    model = _model(0.0)
    path = str(tmp_path / "q.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    r = onnx_mrvl.convert(path)
    gemm = next(d for d in r.report if d.op_type == "Gemm")
    assert gemm.placement == "accelerator" and gemm.precision == "int8", gemm
    r.save(str(tmp_path / "out"), overwrite=True)
    x = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}
    got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, x)[0]
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, ref)
