"""Two Q/DQ pairs of different quantizations back to back (paddle2onnx's Dropout between the SVTR
attention's Softmax output and its MatMul, each side quantized with its own scale): onnxruntime's
DoubleQDQPairsRemover runs them as one pair of a merged scale (legalize/rules/qdq_double_pair.py);
the converted model follows it bit for bit (before: both roundings, 95-99% of the outputs equal)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize


def attention(between: str, qt=T.INT8) -> onnx.ModelProto:
    """``DQ -> Softmax -> Q (1/255) -> DQ -> <between> -> Q (1.2e-4) -> DQ -> MatMul(DQ(v)) -> Q -> DQ``."""
    np_t = np.int8 if qt == T.INT8 else np.uint8
    zs = -128 if qt == T.INT8 else 0
    inits = [nh.from_array(np.array(0.05, np.float32), "s0"), nh.from_array(np.array(0, np_t), "z0"),
             nh.from_array(np.array(1 / 255, np.float32), "s1"), nh.from_array(np.array(zs, np_t), "z1"),
             nh.from_array(np.array(1.2e-4, np.float32), "s2"), nh.from_array(np.array(zs, np_t), "z2"),
             nh.from_array(np.array(0.02, np.float32), "s3"), nh.from_array(np.array(0, np_t), "z3"),
             nh.from_array(np.array(0.1, np.float32), "s4"), nh.from_array(np.array(0, np_t), "z4"),
             nh.from_array(np.array([1, 2, 16, 16], np.int64), "shape"), nh.from_array(np.array(0.0, np.float32), "zero")]
    mid = {"Identity": [helper.make_node("Identity", ["pd"], ["pi"])],
           "Dropout": [helper.make_node("Dropout", ["pd"], ["pi"])],
           "Reshape": [helper.make_node("Reshape", ["pd", "shape"], ["pi"])],
           "NanGuard": [helper.make_node("IsNaN", ["pd"], ["nan"]),             # torch's _safe_softmax
                        helper.make_node("Where", ["nan", "zero", "pd"], ["pi"])]}[between]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"]),
             helper.make_node("Softmax", ["xd"], ["p"], axis=-1),
             helper.make_node("QuantizeLinear", ["p", "s1", "z1"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s1", "z1"], ["pd"])] + mid + [
             helper.make_node("QuantizeLinear", ["pi", "s2", "z2"], ["pq2"]),
             helper.make_node("DequantizeLinear", ["pq2", "s2", "z2"], ["pd2"]),
             helper.make_node("QuantizeLinear", ["v", "s3", "z3"], ["vq"]),
             helper.make_node("DequantizeLinear", ["vq", "s3", "z3"], ["vd"]),
             helper.make_node("MatMul", ["pd2", "vd"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "s4", "z4"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s4", "z4"], ["out"])]
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 16, 16]),
                                         helper.make_tensor_value_info("v", T.FLOAT, [1, 2, 16, 8])],
                          [helper.make_tensor_value_info("out", T.FLOAT, [1, 2, 16, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("between,qt", [("Identity", T.INT8), ("Identity", T.UINT8), ("Dropout", T.INT8),
                                        ("Reshape", T.INT8), ("NanGuard", T.INT8)])
def test_double_pair_follows_onnxruntime(tmp_path, between, qt):
    """Identity / Dropout between the pairs: one pair of onnxruntime's merged scale (here 1.2e-4, zero
    point at the range's low end); a Reshape (which onnxruntime keeps there): both pairs stay; so do
    they around torch's ``_safe_softmax`` guard ``Where(IsNaN(p), 0, p)``, which onnxruntime keeps and
    legalize's nan_guard_dq removes (the pairs are recorded as given, before that rule: DETR's QDQ
    attention had been merged, 83.2% of its outputs identical). The outputs equal onnxruntime's on
    every input."""
    model = attention(between, qt)
    merged = [d for rule, _, d in legalize(model).log if rule == "qdq_double_pair"]
    assert len(merged) == (0 if between in ("Reshape", "NanGuard") else 1), merged
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    result = onnx_mrvl.convert(path)
    result.save(str(tmp_path / "out"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unoptimized = ort.InferenceSession(path, plain, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    moved = 0
    for _ in range(8):
        f = {"x": (rng.standard_normal((1, 2, 16, 16)) * 3).astype(np.float32),
             "v": rng.standard_normal((1, 2, 16, 8)).astype(np.float32)}
        a, b = ours.run(None, f)[0], ref.run(None, f)[0]
        np.testing.assert_array_equal(a, b)
        moved += int(np.count_nonzero(b != unoptimized.run(None, f)[0]))
    assert moved > 0 or between in ("Reshape", "NanGuard")   # the merge changes onnxruntime's numbers (the test can fail)


def position_table_model() -> onnx.ModelProto:
    """BART's TorchScript position embeddings under quantize_static: ``DQ(int8 table) -> Gather(constant
    positions) -> Q1 -> DQ1 -> Cast(float) -> Q2 -> DQ2``, added to the quantized tokens ``x``."""
    rng = np.random.default_rng(3)
    table = rng.integers(-127, 128, (40, 32)).astype(np.int8)
    inits = [nh.from_array(table, "w"), nh.from_array(np.array(0.0061, np.float32), "sw"),
             nh.from_array(np.array(3, np.int8), "zw"), nh.from_array(np.arange(2, 18, dtype=np.int64), "pos"),
             nh.from_array(np.array(0.00634, np.float32), "s1"), nh.from_array(np.array(-6, np.int8), "z1"),
             nh.from_array(np.array(0.00616, np.float32), "s2"), nh.from_array(np.array(-10, np.int8), "z2"),
             nh.from_array(np.array(0.02, np.float32), "sx"), nh.from_array(np.array(1, np.int8), "zx"),
             nh.from_array(np.array(0.025, np.float32), "sy"), nh.from_array(np.array(-2, np.int8), "zy")]
    nodes = [helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("Gather", ["wd", "pos"], ["g"]),
             helper.make_node("QuantizeLinear", ["g", "s1", "z1"], ["gq"]),
             helper.make_node("DequantizeLinear", ["gq", "s1", "z1"], ["gd"]),
             helper.make_node("Cast", ["gd"], ["gc"], to=T.FLOAT),
             helper.make_node("QuantizeLinear", ["gc", "s2", "z2"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s2", "z2"], ["cd"]),
             helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("Add", ["xd", "cd"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "pos", [helper.make_tensor_value_info("x", T.FLOAT, [1, 16, 32])],
                          [helper.make_tensor_value_info("out", T.FLOAT, [1, 16, 32])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_constant_double_pair_merged_before_folding(tmp_path):
    """The chain on constants is merged as onnxruntime runs it (one pair of the merged scale on the
    gathered rows) instead of folded with both roundings (BART ``_ts`` S8: 97.8% identical -> 100%):
    fold_constants leaves the head Q, qdq_double_pair looks through the float Cast."""
    model = position_table_model()
    assert [d for rule, _, d in legalize(model).log if rule == "qdq_double_pair"]
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    result = onnx_mrvl.convert(path)
    result.save(str(tmp_path / "out"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for _ in range(4):
        f = {"x": rng.standard_normal((1, 16, 32)).astype(np.float32)}
        np.testing.assert_array_equal(ours.run(None, f)[0], ref.run(None, f)[0])
