"""legalize ``qdq_const_group``: an int8 tensor a QDQ model computes from constants alone (Deformable-DETR's
first decoder layer: learned queries -> attention-weight projection -> bias -> Softmax over the sampling
points) is folded to the codes onnxruntime's optimized plan computes (a float MatMul between DQ and Q, a
QLinearSoftmax after the S8 -> U8 rewrite), not to fp32 ONNX semantics op by op (before: 84% of the
Softmax's codes, 90-91% of the output elements equal to onnxruntime's run)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl import legalize
from onnx_mrvl.inspection import qdq_probes
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq

pytest.importorskip("onnxruntime.quantization")
Q, D, H, P = 20, 64, 4, 6


def _float_model() -> onnx.ModelProto:
    """attention weights = Softmax(Reshape(query @ W + b)) of a constant query [1, Q, D] over P points,
    times the input x [1, Q, H, P], -> MatMul: the weights are a constant chain the quantizer wraps in
    Q / DQ pairs."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((1, Q, D)).astype(np.float32), "query"),
             numpy_helper.from_array((rng.standard_normal((D, H * P)) / 8).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(H * P) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([1, Q, H, P], np.int64), "shp"),
             numpy_helper.from_array((rng.standard_normal((P, 16)) / 3).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["query", "w"], ["mm"], "proj"),
             helper.make_node("Add", ["mm", "b"], ["lin"], "bias"),
             helper.make_node("Reshape", ["lin", "shp"], ["r"], "view"),
             helper.make_node("Softmax", ["r"], ["sm"], "softmax", axis=-1),
             helper.make_node("Mul", ["sm", "x"], ["weighted"], "mul"),
             helper.make_node("MatMul", ["weighted", "w2"], ["y"], "out_proj")]
    g = helper.make_graph(nodes, "const_group", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, Q, H, P])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, Q, H, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, Q, H, P)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module", params=["s8", "u8"])
def qdq(request, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"const_group_{request.param}")
    onnx.save(_float_model(), str(d / "f.onnx"))
    return onnx.load(quantize_static_qdq(str(d / "f.onnx"), str(d / "q.onnx"), _feeds(8, 0), request.param)), d


def test_constant_chain_folds_to_onnxruntimes_codes(qdq):
    model, _ = qdq
    res = legalize.legalize(model)
    applied = [a for a in res.report.applied if a[0] == "qdq_const_group"]
    assert [a[1] for a in applied] == [["proj"], ["bias"], ["view"], ["softmax"]]   # each group at its Q
    inits = {t.name: numpy_helper.to_array(t) for t in res.model.graph.initializer}
    assert "sm_QuantizeLinear_Output" in inits
    assert not [n for n in res.model.graph.node if n.op_type in ("Softmax", "Add") or n.name == "proj"]
    values, plan = qdq_probes.run_plan(model, _feeds(1, 5)[0])
    assert any(n.op_type == "QLinearSoftmax" for n in plan.graph.node)   # what onnxruntime runs at run time
    found, refused = qdq_probes.plan_codes(model, plan, values)
    assert "sm_QuantizeLinear_Output" in found, refused
    assert np.array_equal(found["sm_QuantizeLinear_Output"].astype(np.int64),
                          inits["sm_QuantizeLinear_Output"].astype(np.int64))


def test_converted_model_identical_to_onnxruntime(qdq):
    model, d = qdq
    onnx_mrvl.convert(model).save(str(d / "out"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(d / "out" / "model.onnx"))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in _feeds(3, 2):
        assert np.array_equal(ours.run(None, f)[0], ref.run(None, f)[0])


def test_group_with_a_graph_output_is_left_to_fold_constants():
    """A Q whose output the graph returns: onnxruntime does not fuse such a group (docs/quantize.md
    "compare on QDQ models"), so the rule leaves it; the op folds as before."""
    codes = numpy_helper.from_array(np.array([[10, -3, 7]], np.int8), "c")
    inits = [codes, numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.int8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["c", "s", "z"], ["cd"], "dq"),
             helper.make_node("Softmax", ["cd"], ["sm"], "softmax", axis=-1),
             helper.make_node("QuantizeLinear", ["sm", "s", "z"], ["y"], "q"),
             helper.make_node("Add", ["x", "x"], ["x2"], "add")]
    g = helper.make_graph(nodes, "out", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 3]),
                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    res = legalize.legalize(m)
    assert not [a for a in res.report.applied if a[0] == "qdq_const_group"]
    assert not [n for n in res.model.graph.node if n.op_type in ("DequantizeLinear", "Softmax")]


def test_chain_onnxruntime_folds_itself():
    """``DQ(initializer) -> Softmax -> Q`` is folded by onnxruntime's own constant folding (in float);
    the next group ``DQ -> Softmax -> Q`` then reads an initializer in its plan too. Every output element
    equals onnxruntime's run of the model."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (1, 8, 6)).astype(np.int8), "c"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s0"), numpy_helper.from_array(np.array(3, np.int8), "z0"),
             numpy_helper.from_array(np.array(1 / 255, np.float32), "s1"),
             numpy_helper.from_array(np.array(-128, np.int8), "z1"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s2"), numpy_helper.from_array(np.array(0, np.int8), "z2")]

    def pair(t, s, z):
        return [helper.make_node("QuantizeLinear", [t, s, z], [f"{t}_q"]),
                helper.make_node("DequantizeLinear", [f"{t}_q", s, z], [f"{t}_d"])]
    nodes = [helper.make_node("DequantizeLinear", ["c", "s0", "z0"], ["cd"]),
             helper.make_node("Softmax", ["cd"], ["p1"], axis=-1)] + pair("p1", "s1", "z1") + [
             helper.make_node("Softmax", ["p1_d"], ["p2"], axis=1)] + pair("p2", "s1", "z1") + \
        pair("x", "s2", "z2") + [helper.make_node("Mul", ["p2_d", "x_d"], ["y"])] + pair("y", "s2", "z2")
    g = helper.make_graph(nodes, "self_folded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6])],
                          [helper.make_tensor_value_info("y_d", TensorProto.FLOAT, [1, 8, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    res = legalize.legalize(m)
    assert len([a for a in res.report.applied if a[0] == "qdq_const_group"]) == 2
    r = onnx_mrvl.convert(m)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        r.save(d, overwrite=True)
        ours = onnx_mrvl.InferenceSession(f"{d}/model.onnx")
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for k in range(3):
            f = {"x": np.random.default_rng(k).uniform(-2, 2, (1, 8, 6)).astype(np.float32)}
            assert np.array_equal(ours.run(None, f)[0], ref.run(None, f)[0])


def _copies_model() -> onnx.ModelProto:
    """YOLOv8's anchor grid as legalized: ``DQ(codes) -> Concat`` of copies of one DQ (expand_to_concat's
    Expand of a unit axis) ``-> Q -> DQ``, added to a quantized input, then an int8 MatMul: a constant
    group whose op reads one DequantizeLinear several times."""
    rng = np.random.default_rng(3)
    sc = lambda v, n: numpy_helper.from_array(np.array(v, np.float32), n)   # noqa: E731
    zp = lambda n: numpy_helper.from_array(np.array(0, np.int8), n)   # noqa: E731
    inits = [numpy_helper.from_array(rng.integers(-100, 100, (1, 4, 1)).astype(np.int8), "grid_codes"),
             sc(0.05, "s_grid"), zp("z_grid"), sc(0.05, "s_rep"), zp("z_rep"), sc(0.04, "s_x"), zp("z_x"),
             sc(0.1, "s_y"), zp("z_y"), sc(0.2, "s_o"), zp("z_o"), sc(0.01, "s_w"), zp("z_w"),
             numpy_helper.from_array(rng.integers(-127, 127, (5, 3)).astype(np.int8), "w_codes")]
    nodes = [helper.make_node("DequantizeLinear", ["grid_codes", "s_grid", "z_grid"], ["grid"], "grid_dq"),
             helper.make_node("Concat", ["grid"] * 5, ["rep"], "expand", axis=2),
             helper.make_node("QuantizeLinear", ["rep", "s_rep", "z_rep"], ["rep_q"], "rep_q"),
             helper.make_node("DequantizeLinear", ["rep_q", "s_rep", "z_rep"], ["rep_dq"], "rep_dq"),
             helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["x_q"], "x_q"),
             helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x_dq"], "x_dq"),
             helper.make_node("Add", ["x_dq", "rep_dq"], ["s"], "add"),
             helper.make_node("QuantizeLinear", ["s", "s_y", "z_y"], ["s_q"], "s_q"),
             helper.make_node("DequantizeLinear", ["s_q", "s_y", "z_y"], ["s_dq"], "s_dq"),
             helper.make_node("DequantizeLinear", ["w_codes", "s_w", "z_w"], ["w"], "w_dq"),
             helper.make_node("MatMul", ["s_dq", "w"], ["mm"], "fc"),
             helper.make_node("QuantizeLinear", ["mm", "s_o", "z_o"], ["mm_q"], "mm_q"),
             helper.make_node("DequantizeLinear", ["mm_q", "s_o", "z_o"], ["y"], "mm_dq")]
    g = helper.make_graph(nodes, "copies", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_group_reading_one_dq_several_times_folds(tmp_path):
    """Each DequantizeLinear goes into the group model once (it went in once per read: onnxruntime
    refused the duplicate node names, the group stayed unfolded and its DequantizeLinear ran on the
    CPU beside the region: the QDQ YOLOv8n of nudenet, 6 DequantizeLinear on the CPU)."""
    model = _copies_model()
    res = legalize.legalize(model)
    assert [a[1] for a in res.report.applied if a[0] == "qdq_const_group"] == [["expand"]]
    assert "grid_dq" not in [n.name for n in res.model.graph.node]
    r = onnx_mrvl.convert(model)
    assert not r.report.cpu_nodes() and len(r.report.regions) == 1
    r.save(str(tmp_path / "out"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for _ in range(3):
        f = {"x": (rng.standard_normal((1, 4, 5)) * 2).astype(np.float32)}
        assert np.array_equal(ours.run(None, f)[0], ref.run(None, f)[0])
