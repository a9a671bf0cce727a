"""``onnx-mrvl compare`` with a QDQ reference: per-layer values come from onnxruntime's optimized plan
of the unmodified model (inspection/qdq_probes.py), not from a run with every tensor exposed, which
unfuses its QLinear groups; each int8 layer is compared by its codes."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.inspection import qdq_codes, qdq_probes
from onnx_mrvl.inspection.compare import compare_models
from onnx_mrvl.inspection.inputs import feed_shapes, random_feeds
from onnx_mrvl.inspection.runner import expose_all
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
F32 = TensorProto.FLOAT
LAYERS = ["c1_out_DequantizeLinear_Output", "c2_out_DequantizeLinear_Output", "add_out_DequantizeLinear_Output",
          "output"]


def conv_add_softmax() -> onnx.ModelProto:
    """Two convs of the input, their Add, Softmax over the channels: onnxruntime fuses QLinearAdd
    and QLinearSoftmax (uint8, after its QDQS8ToU8 rewrite)."""
    g = GraphBuilder(0, 13)
    a = g.conv("input", 3, 8, 3, "c1")
    b = g.conv("input", 3, 8, 1, "c2")
    g.node("Softmax", [g.node("Add", [a, b], "add")], "sm", axis=1)
    g.nodes[-1].output[0] = "output"
    return g.model("conv_add_softmax", [("input", F32, [1, 3, 8, 8])], [("output", F32, [1, 8, 8, 8])])


@pytest.fixture(scope="module")
def qdq(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmpq")
    onnx.save(conv_add_softmax(), str(d / "f.onnx"))
    rng = np.random.default_rng(0)
    cal = [{"input": (2 * rng.standard_normal((1, 3, 8, 8))).astype(np.float32)} for _ in range(4)]
    q = quantize_static_qdq(str(d / "f.onnx"), str(d / "q.onnx"), cal)
    out = onnx_mrvl.convert(q).save(str(d / "out"))
    return {"dir": d, "q": q, "out": out}


def _ops(model: onnx.ModelProto):
    return {n.op_type for n in qdq_probes.optimized(model).graph.node}


def test_exposing_a_quantizelinear_output_unfuses_its_group(qdq):
    """Why compare cannot expose tensors of a QDQ model, not even the int8 codes: onnxruntime does
    not fuse a group whose Q output is a graph output, and the float path rounds differently."""
    m = onnx.load(qdq["q"])
    assert {"QLinearAdd", "QLinearSoftmax"} <= _ops(m)
    exposed = expose_all(m, {"output_QuantizeLinear_Output"})
    assert "QLinearSoftmax" not in _ops(exposed) and "Softmax" in _ops(exposed)
    feeds = random_feeds(m, 0, feed_shapes(m, m, None))
    plain = ort.InferenceSession(qdq["q"], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    assert not np.array_equal(sess.run(["output"], feeds)[0], plain)


def test_plan_readout_is_the_unmodified_run(qdq):
    m = onnx.load(qdq["q"])
    feeds = random_feeds(m, 0, feed_shapes(m, m, None))
    ref = qdq_probes.QdqReference(m, feeds)
    plain = ort.InferenceSession(qdq["q"], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.array_equal(ref.values["output"], plain)
    qs = [n.output[0] for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in
          {"input", "c1_out", "c2_out", "add_out", "output_QuantizeLinear_Input"}]
    assert sorted(qs) == ref.probes and not ref.refused
    # the softmax's codes are the plan's (uint8 QLinearSoftmax shifted back to int8), i.e. the output's
    params = ref.params["output"][1]
    assert np.array_equal(qdq_codes.dequantize(ref.values["output_QuantizeLinear_Output"], params), plain)
    assert ref.values["output_QuantizeLinear_Output"].dtype == np.int8


def test_exact_conversion_every_layer_identical(qdq):
    res = compare_models(qdq["q"], qdq["out"])
    rows = {r.tensor: r for r in res.rows}
    assert sorted(rows) == sorted(LAYERS)
    for t in LAYERS:
        assert rows[t].codes is not None and rows[t].codes["identical"] == 1.0, (t, rows[t].codes)
        assert rows[t].max_abs == 0.0 and rows[t].passed
    assert res.first_differing is None and res.passed
    text = res.to_text()
    assert "every probed layer's codes are identical" in text and "100.00% identical" in text


def test_perturbed_layer_is_the_first_differing(qdq, tmp_path):
    """A reference whose c2 output scale is changed: c2 is named, c1 still identical."""
    m = onnx.load(qdq["q"])
    q2 = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "c2_out")
    init = next(t for t in m.graph.initializer if t.name == q2.input[1])
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1.5), init.name))
    path = str(tmp_path / "perturbed.onnx")
    onnx.save(m, path)
    res = compare_models(path, qdq["out"])
    rows = {r.tensor: r for r in res.rows}
    assert rows["c1_out_DequantizeLinear_Output"].codes["identical"] == 1.0
    first = res.first_differing
    assert first is not None and first.tensor == "c2_out_DequantizeLinear_Output"
    assert not first.codes["within_one_quantum"] and not first.passed and "codes identical" in first.reason
    assert not res.passed
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["compare", path, qdq["out"], "--json"])

    def bad(word):
        raise AssertionError(f"{word} in the JSON output")
    doc = json.loads(buf.getvalue(), parse_constant=bad)
    assert rc == 1 and doc["qdq"]["first_differing"] == "c2_out_DequantizeLinear_Output"
    row = next(r for r in doc["tensors"] if r["tensor"] == "c2_out_DequantizeLinear_Output")
    assert row["codes"]["identical"] < 0.99 and row["pass"] is False


def test_a_quantizelinear_the_plan_removes_is_named_not_probed():
    """x -> Q1 -> DQ1 -> Q2 -> DQ2 -> Softmax -> Q3 -> DQ3: onnxruntime's DoubleQDQPairsRemover
    merges Q1 / Q2 into one Q of a new scale, so neither code tensor exists in its plan."""
    from onnx import helper as h

    def c(name, v):
        return numpy_helper.from_array(np.asarray(v), name)
    inits = [c("s1", np.float32(0.05)), c("z1", np.int8(0)), c("s2", np.float32(0.04)), c("z2", np.int8(3)),
             c("s3", np.float32(1 / 256)), c("z3", np.int8(-128))]
    nodes = [h.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q1"], name="Q1"),
             h.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"], name="D1"),
             h.make_node("QuantizeLinear", ["d1", "s2", "z2"], ["q2"], name="Q2"),
             h.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["d2"], name="D2"),
             h.make_node("Softmax", ["d2"], ["sm"], name="sm", axis=-1),
             h.make_node("QuantizeLinear", ["sm", "s3", "z3"], ["q3"], name="Q3"),
             h.make_node("DequantizeLinear", ["q3", "s3", "z3"], ["y"], name="D3")]
    g = h.make_graph(nodes, "double_qdq", [h.make_tensor_value_info("x", F32, [1, 4, 16])],
                     [h.make_tensor_value_info("y", F32, [1, 4, 16])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    assert "QLinearSoftmax" in _ops(m)
    x = {"x": np.random.default_rng(3).standard_normal((1, 4, 16)).astype(np.float32)}
    ref = qdq_probes.QdqReference(m, x)
    assert ref.probes == ["q3"] and set(ref.refused) == {"q1", "q2"}
    assert all("does not compute it" in r for r in ref.refused.values())
    text = qdq_probes.summary_text(ref, None)
    assert "not probed: q1" in text and "not probed: q2" in text
    assert [d["tensor"] for d in ref.to_dict()["not_probed"]] == ["q1", "q2"]
    plain = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.array_equal(ref.values["y"], plain)
    assert np.array_equal(qdq_codes.dequantize(ref.values["q3"], ref.params["y"][1]), plain)


def test_plan_q_found_under_a_shared_scale_name():
    """onnxruntime's ConstantSharing keeps one of several equal scalar initializers: a Q whose scale
    equals another's reads that other name in the plan (Deformable-DETR's ``val_1367`` under
    ``linear_19_scale``). Its codes are found by the Q's input and the scale's value, not refused
    as removed by the optimizer."""
    from onnx import helper
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s_in"),
             numpy_helper.from_array(np.array(0, np.int8), "z_in"),
             numpy_helper.from_array(np.array(0.05, np.float32), "s_exp"),     # same value, own name
             numpy_helper.from_array(np.array(-100, np.int8), "z_exp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"], "q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"], "dq_in"),
             helper.make_node("Exp", ["xd"], ["e"], "exp"),
             helper.make_node("QuantizeLinear", ["e", "s_exp", "z_exp"], ["eq"], "q_exp"),
             helper.make_node("DequantizeLinear", ["eq", "s_exp", "z_exp"], ["ed"], "dq_exp"),
             helper.make_node("Relu", ["ed"], ["y"], "relu")]
    g = helper.make_graph(nodes, "shared_scale", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.random.default_rng(0).uniform(-2, 2, (1, 64)).astype(np.float32)}
    values, plan = qdq_probes.run_plan(model, feeds)
    mine = {"x": "s_in", "e": "s_exp"}
    renamed = [n.input[0] for n in plan.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in mine
               and n.input[1] != mine[n.input[0]]]
    assert renamed                                  # the plan's Q reads the other, equal, scale
    found, refused = qdq_probes.plan_codes(model, plan, values)
    assert {"xq", "eq"} <= set(found) and not refused, refused
    xq = np.rint(feeds["x"] / np.float32(0.05)).clip(-128, 127)
    assert np.array_equal(found["xq"].astype(np.int64), xq)
    want = (np.rint(np.exp((xq * np.float32(0.05)).astype(np.float32)) / np.float32(0.05)) - 100).clip(-128, 127)
    assert np.abs(found["eq"].astype(np.int64) - want).max() <= 1


def test_opset12_per_channel_plan_reloads_as_contrib_dq():
    """onnxruntime's quantizer writes per-channel DequantizeLinear (``axis``) into opset 11 / 12
    models (paddle2onnx, tf2onnx); the plan onnxruntime saves of such a model is refused on reload
    ("Unrecognized attribute: axis"). qdq_probes.contrib_axis_qdq moves those nodes to
    com.microsoft (the same per-axis function), so compare reads the plan; opset >= 13 is left alone."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnx_mrvl.inspection.qdq_probes import contrib_axis_qdq
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (4, 3)).astype(np.int8)
    sc = (rng.random(4) * 0.1 + 0.01).astype(np.float32)
    zp = np.zeros(4, np.int8)

    def model(opset):
        nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], name="dq", axis=0),
                 helper.make_node("Add", ["x", "wf"], ["y"], name="add")]
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(sc, "s"),
                               numpy_helper.from_array(zp, "z")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)

    with pytest.raises(Exception, match="axis"):
        ort.InferenceSession(model(12).SerializeToString(), providers=["CPUExecutionProvider"])
    fixed = contrib_axis_qdq(model(12))
    assert [n.domain for n in fixed.graph.node] == ["com.microsoft", ""]
    x = rng.standard_normal((4, 3)).astype(np.float32)
    y = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, x + w.astype(np.float32) * sc[:, None])
    assert [n.domain for n in contrib_axis_qdq(model(13)).graph.node] == ["", ""]


def test_square_codes_moved_by_the_plan_map_back_through_the_models_moves():
    """``MatMul -> Q/DQ -> Reshape [1, 8, 8] -> Q/DQ -> Transpose -> Q/DQ -> Reshape [1, 1, 8, 8] ->
    Q/DQ`` (one scale: Deformable-DETR's value map before GridSample): onnxruntime's plan drops the
    pairs and moves the codes (QLinearMatMul -> Reshape -> Transpose -> Reshape -> DQ), so only the
    last tensor is read by a DQ. The square [1, 8, 8] tensor before the Transpose and the one after it
    have one shape; each Q's codes are the plan's with the model's own moves after it undone (before:
    the walk back from the plan's tensor stopped at the first tensor of the right shape, the
    transposed one, and the Reshape's codes were compared with their transpose: a false FAIL)."""
    model = _square_chain()
    rng = np.random.default_rng(0)
    N = 8
    values, plan = qdq_probes.run_plan(model, {"x": rng.uniform(-2, 2, (1, 16)).astype(np.float32)})
    mm = next(n for n in plan.graph.node if n.op_type == "QLinearMatMul")
    moves = [n.op_type for n in plan.graph.node if n.op_type in ("Reshape", "Transpose")]
    assert moves == ["Reshape", "Transpose", "Reshape"]       # the codes moved, no Q / DQ between
    found, refused = qdq_probes.plan_codes(model, plan, values)
    assert not refused and {"mm_q", "v_q", "t_q", "r_q"} <= set(found)
    shift = int(values[mm.output[0]].dtype == np.uint8) * 128   # QDQS8ToU8
    codes = values[mm.output[0]].astype(np.int64) - shift
    assert np.array_equal(found["mm_q"].astype(np.int64), codes)
    assert np.array_equal(found["v_q"].astype(np.int64), codes.reshape(1, N, N))
    assert np.array_equal(found["t_q"].astype(np.int64), codes.reshape(1, N, N).transpose(0, 2, 1))
    assert np.array_equal(found["r_q"].astype(np.int64), codes.reshape(1, N, N).transpose(0, 2, 1).reshape(2, 4, 2, 4))


def test_square_transpose_folded_into_storage_maps_back(tmp_path):
    """The same chain converted: the fuse stage folds the square Transpose into storage (the
    Requantize of ``t`` reads ``v``'s stored codes, both [1, 8, 8], layout "ND"), so the program's
    value of ``t`` is stored in ``v``'s order; compare undoes the folded Transpose (perm [0, 2, 1])
    and the Reshape after it reads that order (before: ``t`` and ``r`` compared as stored, 16% of the
    codes "identical", a false FAIL). Every row passes and is exact."""
    model = _square_chain()
    path = str(tmp_path / "square.onnx")
    onnx.save(model, path)
    onnx_mrvl.convert(model).save(str(tmp_path / "out"), overwrite=True)
    feeds = {"x": np.random.default_rng(1).uniform(-2, 2, (1, 16)).astype(np.float32)}
    res = compare_models(path, str(tmp_path / "out" / "model.onnx"), feeds)
    rows = {r.tensor: r for r in res.rows}
    assert rows["t_d"].storage == "perm [0, 2, 1]" and rows["r_d"].storage.startswith("reshaped from stored")
    for t in ("mm_d", "v_d", "t_d", "r_d"):
        assert rows[t].codes["identical"] == 1.0 and rows[t].passed, t
    assert res.passed and not res.unmapped


def _square_chain() -> onnx.ModelProto:
    """x [1, 16] -> Q/DQ -> MatMul -> Q/DQ -> Reshape [1, 8, 8] -> Q/DQ -> Transpose(0, 2, 1) -> Q/DQ ->
    Reshape [2, 4, 2, 4] -> Q/DQ -> Relu, one scale from the MatMul on (as the quantizer writes moves)."""
    from onnx import helper
    rng = np.random.default_rng(0)
    N = 8
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(3, np.int8), "z"),
             numpy_helper.from_array(np.array(0.5, np.float32), "s2"), numpy_helper.from_array(np.array(-2, np.int8), "z2"),
             numpy_helper.from_array(rng.integers(-100, 100, (16, N * N)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "sw"), numpy_helper.from_array(np.array(0, np.int8), "zw"),
             numpy_helper.from_array(np.array([1, N, N], np.int64), "shp"),
             numpy_helper.from_array(np.array([2, 4, 2, 4], np.int64), "shp4")]

    def qdq(t, s, z):
        return [helper.make_node("QuantizeLinear", [t, s, z], [f"{t}_q"], f"q_{t}"),
                helper.make_node("DequantizeLinear", [f"{t}_q", s, z], [f"{t}_d"], f"dq_{t}")]
    nodes = qdq("x", "s", "z") + [helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], "dqw"),
                                  helper.make_node("MatMul", ["x_d", "w"], ["mm"], "mm")] + qdq("mm", "s2", "z2") + [
        helper.make_node("Reshape", ["mm_d", "shp"], ["v"], "view")] + qdq("v", "s2", "z2") + [
        helper.make_node("Transpose", ["v_d"], ["t"], "tr", perm=[0, 2, 1])] + qdq("t", "s2", "z2") + [
        helper.make_node("Reshape", ["t_d", "shp4"], ["r"], "view4")] + qdq("r", "s2", "z2") + [
        helper.make_node("Relu", ["r_d"], ["y"], "relu")]
    g = helper.make_graph(nodes, "square", [helper.make_tensor_value_info("x", F32, [1, 16])],
                          [helper.make_tensor_value_info("y", F32, [2, 4, 2, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_square_channels_last_plan_tensors_read_as_nchw(tmp_path):
    """onnxruntime runs a uint8 QDQ conv chain channels-last (``QLinearConv(channels_last=1)``):
    its [1, H, W, C] codes with C = H = W have the model's NCHW shape. They were taken as NCHW
    (segmentation_models_pytorch FPN U8: MobileNetV2's 32 x 32 x 32 ``features.4`` named the first
    differing layer, 1% identical, on an exact conversion); ``channels_first`` transposes them."""
    g = GraphBuilder(3, 13)
    a = g.node("Relu", [g.conv("input", 8, 8, 3, "c1", pads=[1, 1, 1, 1])], "r1")
    b = g.node("Relu", [g.conv(a, 8, 8, 3, "c2", pads=[1, 1, 1, 1])], "r2")
    g.conv(b, 8, 8, 1, "c3")
    g.nodes[-1].output[0] = "output"
    m = g.model("square_nhwc", [("input", F32, [1, 8, 8, 8])], [("output", F32, [1, 8, 8, 8])])
    onnx.save(m, str(tmp_path / "f.onnx"))
    rng = np.random.default_rng(1)
    cal = [{"input": rng.standard_normal((1, 8, 8, 8)).astype(np.float32)} for _ in range(4)]
    q = quantize_static_qdq(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), cal, act="u8")
    plan = qdq_probes.optimized(onnx.load(q))
    if not any(a.name == "channels_last" and a.i for n in plan.graph.node for a in n.attribute):
        pytest.skip("this onnxruntime build runs the convs channels-first")
    out = onnx_mrvl.convert(q).save(str(tmp_path / "out"))
    res = compare_models(q, out)
    probed = [r for r in res.rows if r.codes is not None]
    assert len(probed) >= 3
    for r in probed:
        assert r.codes["identical"] == 1.0, (r.tensor, r.codes)
    assert res.first_differing is None
