"""``DQ(scores) -> Add(., M) -> Softmax -> Q -> DQ`` with a constant float mask M (a causal mask of
float32's lowest that convert(quantize="int8") keeps float, quantize/nonfinite.py): one int8 Softmax
that adds M to the dequantized codes in fp32 before MLAS's Softmax and the Q, as onnxruntime runs the
group (fuse/qdq_masked_softmax.py). Before: an fp16 Sum2D (the mask as -32768) and an fp16 Softmax,
whose probabilities moved the next Q's codes (a Llama block 88-92% identical)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

import onnx_mrvl

LOWEST = float(np.finfo(np.float32).min)


def masked_attention(fill: float, qt=T.INT8, H: int = 2, S: int = 8, d: int = 4) -> onnx.ModelProto:
    """scores [1, H, S, S] (an input: its Q is the host's) -> Q -> DQ -> Add(causal mask of ``fill``)
    -> Softmax -> Q (1/255) -> DQ -> MatMul with DQ(Q(v)) -> Q -> DQ."""
    np_t = np.int8 if qt == T.INT8 else np.uint8
    zs = -128 if qt == T.INT8 else 0
    mask = np.triu(np.full((S, S), fill, np.float32), 1).reshape(1, 1, S, S)
    inits = [nh.from_array(np.array(0.043, np.float32), "s0"), nh.from_array(np.array(3 if qt == T.INT8 else 131, np_t), "z0"),
             nh.from_array(np.array(1 / 255, np.float32), "s1"), nh.from_array(np.array(zs, np_t), "z1"),
             nh.from_array(np.array(0.02, np.float32), "s3"), nh.from_array(np.array(0 if qt == T.INT8 else 128, np_t), "z3"),
             nh.from_array(np.array(0.01, np.float32), "s4"), nh.from_array(np.array(0 if qt == T.INT8 else 128, np_t), "z4"),
             nh.from_array(mask, "mask")]
    nodes = [helper.make_node("QuantizeLinear", ["scores", "s0", "z0"], ["sq"]),
             helper.make_node("DequantizeLinear", ["sq", "s0", "z0"], ["sd"]),
             helper.make_node("Add", ["sd", "mask"], ["masked"], name="add_mask"),
             helper.make_node("Softmax", ["masked"], ["p"], axis=-1, name="softmax"),
             helper.make_node("QuantizeLinear", ["p", "s1", "z1"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s1", "z1"], ["pd"]),
             helper.make_node("QuantizeLinear", ["v", "s3", "z3"], ["vq"]),
             helper.make_node("DequantizeLinear", ["vq", "s3", "z3"], ["vd"]),
             helper.make_node("MatMul", ["pd", "vd"], ["y"], name="pv"),
             helper.make_node("QuantizeLinear", ["y", "s4", "z4"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s4", "z4"], ["out"])]
    g = helper.make_graph(nodes, "att", [helper.make_tensor_value_info("scores", T.FLOAT, [1, H, S, S]),
                                         helper.make_tensor_value_info("v", T.FLOAT, [1, H, S, d])],
                          [helper.make_tensor_value_info("out", T.FLOAT, [1, H, S, d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("fill,qt", [(LOWEST, T.INT8), (LOWEST, T.UINT8), (-1e4, T.INT8)])
def test_masked_softmax_int8_exact(fill, qt, tmp_path):
    m = masked_attention(fill, qt)
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    r = onnx_mrvl.convert(path)
    r.save(str(tmp_path / "out"), overwrite=True)
    assert len(r.report.regions) == 1
    dec = r.report.decisions
    assert dec["softmax"].precision == "int8" and dec["add_mask"].layer == dec["softmax"].layer, \
        (dec["softmax"], dec["add_mask"])
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(7)
    for _ in range(4):
        f = {"scores": (rng.standard_normal((1, 2, 8, 8)) * 2.5).astype(np.float32),
             "v": rng.standard_normal((1, 2, 8, 4)).astype(np.float32)}
        np.testing.assert_array_equal(ours.run(None, f)[0], ref.run(None, f)[0])


def test_mask_must_broadcast_to_the_scores():
    """A mask that would grow the scores (the Add's output shape differs) is not this form."""
    from onnx_mrvl.fuse.qdq_masked_softmax import build
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.target import DEFAULT_TARGET
    m = masked_attention(LOWEST)
    big = np.zeros((2, 2, 8, 8), np.float32)
    for i, t in enumerate(m.graph.initializer):
        if t.name == "mask":
            m.graph.initializer[i].CopyFrom(nh.from_array(big, "mask"))
    m = onnx.shape_inference.infer_shapes(m)
    g = GraphIndex(m)
    sm = next(n for n in m.graph.node if n.op_type == "Softmax")
    assert build(g, sm, DEFAULT_TARGET) is None or isinstance(build(g, sm, DEFAULT_TARGET), str)


def test_reference_body_adds_the_mask(tmp_path):
    """The fused stage runs in onnxruntime with the Mrvl ops' reference bodies (opset.py: the int8
    Softmax's body adds its mask input M before the Softmax): its output equals the QDQ model's."""
    from onnx_mrvl.stage import as_model
    m = masked_attention(LOWEST)
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    fused = as_model(onnx_mrvl.convert(path).stages["fuse"], "fuse")
    sm = [n for n in fused.graph.node if n.op_type == "Softmax" and n.domain != ""]
    assert len(sm) == 1 and len(sm[0].input) == 2, [(n.op_type, list(n.input)) for n in sm]
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    stage = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    for _ in range(3):
        f = {"scores": (rng.standard_normal((1, 2, 8, 8)) * 2.5).astype(np.float32),
             "v": rng.standard_normal((1, 2, 8, 4)).astype(np.float32)}
        np.testing.assert_array_equal(stage.run(None, f)[0], ref.run(None, f)[0])
