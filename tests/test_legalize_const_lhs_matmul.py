"""legalize const_lhs_matmul: MatMul(C, x) with a constant first operand (DETR decoders' folded
first-layer queries against the keys) -> Transpose, MatMul by C's transpose, Transpose; one region."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import compare, make_model, op_types

mk = helper.make_node
F16_TOL = 1e-2


def cross_attention(c_shape, k_shape, heads=4, d=16, s=12):
    """keys from an FC, split to heads, transposed; scores = C (constant queries) @ k^T -> Softmax
    -> @ v: the first layer of a DETR decoder after constant folding."""
    rng = np.random.default_rng(0)
    nodes = [mk("MatMul", ["x", "wk"], ["k"], name="k_proj"),
             mk("Reshape", ["k", "heads"], ["kh"], name="split_heads"),
             mk("Transpose", ["kh"], ["kt"], name="key_t", perm=[0, 2, 3, 1]),
             mk("Reshape", ["kt", "kshape"], ["kt2"], name="as_given"),
             mk("MatMul", ["queries", "kt2"], ["scores"], name="q_kt"),
             mk("Softmax", ["scores"], ["p"], name="softmax", axis=-1),
             mk("MatMul", ["x", "wv"], ["v"], name="v_proj"),
             mk("Reshape", ["v", "heads"], ["vh"], name="split_heads_v"),
             mk("Transpose", ["vh"], ["vt"], name="v_t", perm=[0, 2, 1, 3]),
             mk("Reshape", ["p", "pshape"], ["p4"], name="p4"),
             mk("MatMul", ["p4", "vt"], ["y"], name="p_v")]
    q = c_shape[-2]
    inits = {"wk": (rng.standard_normal((heads * d, heads * d)) * 0.2).astype(np.float32),
             "wv": (rng.standard_normal((heads * d, heads * d)) * 0.2).astype(np.float32),
             "heads": np.array([1, s, heads, d], np.int64), "kshape": np.array(k_shape, np.int64),
             "queries": (rng.standard_normal(c_shape) * 0.5).astype(np.float32),
             "pshape": np.array([1, heads, q, s], np.int64)}
    return make_model(nodes, [("x", [1, s, heads * d])], ["y"], inits, opset=17)


@pytest.mark.parametrize("c_shape,k_shape", [
    ([1, 4, 20, 16], [1, 4, 16, 12]),     # TorchScript: 4-D queries and keys
    ([1, 4, 20, 16], [4, 16, 12]),        # dynamo: 4-D queries, 3-D keys (broadcast leading 1)
    ([20, 16], [1, 4, 16, 12]),           # one query matrix shared by every head
])
def test_constant_first_operand_becomes_weights(c_shape, k_shape, tmp_path):
    m = cross_attention(c_shape, k_shape)
    res = legalize(m)
    assert any(name == "const_lhs_matmul" for name, _, _ in res.report.applied)
    assert compare(m, res.model) <= 1e-5
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 12, 64)).astype(np.float32)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    conv = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(conv.save(str(tmp_path))).run(None, feeds)[0]
    assert len(conv.report.regions) == 1 and not conv.report.cpu_nodes(), [d.op_type for d in conv.report.cpu_nodes()]
    assert np.isfinite(got).all() and float(np.abs(got - ref).max()) <= F16_TOL * float(np.abs(ref).max())


def test_broadcast_constant_batch_is_left_alone():
    """Constant batch axes [2, 4] against x's [4]: not one matrix per x entry, the MatMul stays."""
    nodes = [mk("Relu", ["x"], ["r"], name="relu"), mk("MatMul", ["c", "r"], ["y"], name="mm")]
    m = make_model(nodes, [("x", [4, 16, 12])], ["y"],
                   {"c": np.random.default_rng(0).standard_normal((2, 4, 20, 16)).astype(np.float32)})
    res = legalize(m)
    assert "MatMul" in op_types(res.model)
    assert any(name == "const_lhs_matmul" and "broadcast" in why for name, _, why in res.report.skipped)
