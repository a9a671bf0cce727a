"""int8 Lookup groups at the edges of what fuse handled (docs/fusion.md "Lookup", session 22): a
relabelled operand, a graph output, the table's layout, a rewritten Div (3 and 4: their tests).

1. A transformer block's [N, W, C] output is reshaped to [N, 1, W, C] and transposed to NCHW, then added
   to a conv branch whose SiLU is an int8 Lookup. fuse once left the Lookup's output without the layout
   label the compile step gives it (NHWC), so the relabel of the unit-axes tensor became an "NCHW ->
   NHWC" LayoutTransform of data the Lookup wrote NHWC, and the compile step refused the region
   (CompileError on onnxruntime's own quantize_static of the model: PP-OCRv6 rec).
2. A QDQ model whose output is ``DQ -> Sigmoid -> Q -> DQ`` (a DB text detector's probability map,
   PP-OCRv5 det / the seal det): the group ended at a graph output, which fuse did not let a Lookup
   end at, so the Sigmoid ran as a float layer with numpy's exp while onnxruntime's QLinearSigmoid
   table comes from MLAS's logistic; with the map's tiny output scale (its calibration range [0, 1e-5])
   half the output codes differed by up to 2. As a Lookup the table is onnxruntime's own.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_transformers import agreement

C, W = 8, 16


def _float_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((C, C, 1, 1)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(C) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((C, C)) * 0.3).astype(np.float32), "wt"),
             numpy_helper.from_array((rng.standard_normal((C, C)) * 0.3).astype(np.float32), "wm"),
             numpy_helper.from_array(np.array([1, 1, W, C], np.int64), "shape4"),
             numpy_helper.from_array(np.array([1, W, C], np.int64), "shape3"),
             numpy_helper.from_array(np.array([2], np.int64), "axis")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w", "b"], ["c"]), n("Sigmoid", ["c"], ["s"]), n("Mul", ["c", "s"], ["silu"]),
             # the "transformer" branch: [N, W, C] rows, a projection and a residual add
             n("Transpose", ["x"], ["xt"], perm=[0, 2, 3, 1]), n("Reshape", ["xt", "shape3"], ["rows"]),
             n("MatMul", ["rows", "wt"], ["proj"]), n("Add", ["proj", "rows"], ["block"]),
             # back to an image: [N, 1, W, C] -> NCHW [N, C, 1, W]
             n("Reshape", ["block", "shape4"], ["nhwc"]), n("Transpose", ["nhwc"], ["nchw"], perm=[0, 3, 1, 2]),
             n("Add", ["nchw", "silu"], ["sum"]),
             n("Squeeze", ["sum", "axis"], ["seq"]), n("Transpose", ["seq"], ["tokens"], perm=[0, 2, 1]),
             n("MatMul", ["tokens", "wm"], ["y"])]
    g = helper.make_graph(nodes, "lookup_relabel", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 1, W])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_lookup_output_added_to_a_relabelled_unit_axis_tensor(tmp_path):
    src, qpath = str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx")
    onnx.save(_float_model(), src)
    rng = np.random.default_rng(1)
    quantize_static_qdq(src, qpath, [{"x": rng.standard_normal((1, C, 1, W)).astype(np.float32)} for _ in range(4)],
                        act="u8")
    r = onnx_mrvl.convert(qpath)
    # structure: one region holding every op, the SiLU as an int8 Lookup, and the unit-axes relabel
    # of the Lookup's NHWC output a reshape, not a LayoutTransform that would call it NCHW
    assert len(r.subgraphs) == 1
    assert not [x for x in r.model.graph.node if x.domain != "mrvl" and x.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    fused = fuse(legalize(onnx.load(qpath))).model
    ops = [x.op_type for x in fused.graph.node if x.domain == "mrvl"]
    assert "Lookup" in ops
    lookup_out = next(x.output[0] for x in fused.graph.node if x.op_type == "Lookup")
    readers = [x for x in fused.graph.node if lookup_out in x.input]
    assert readers and all(x.op_type != "LayoutTransform" for x in readers), [x.op_type for x in readers]
    # numbers: the same codes as onnxruntime's run of the QDQ model
    out = str(tmp_path / "out")
    r.save(out)
    stats = agreement(qpath, os.path.join(out, "model.onnx"), runs=3)
    for name, s in stats.items():
        assert s["identical"] == 1.0, (name, s)


def test_sigmoid_ending_at_the_graph_output_is_a_lookup_with_onnxruntimes_codes(tmp_path):
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((4, C, 3, 3)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(np.full(4, -16.0, np.float32), "b")]      # far left of the sigmoid
    n = helper.make_node
    g = helper.make_graph([n("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           n("Sigmoid", ["c"], ["y"], name="sigmoid")],
                          "db_map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 24, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 24, 24])], inits)
    src, qpath = str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
    quantize_static_qdq(src, qpath, [{"x": rng.standard_normal((1, C, 24, 24)).astype(np.float32)} for _ in range(4)],
                        act="u8")
    r = onnx_mrvl.convert(qpath)
    assert len(r.subgraphs) == 1 and r.report["sigmoid"].composite == "mrvl.lookup", r.report["sigmoid"]
    out = str(tmp_path / "out")
    r.save(out)
    stats = agreement(qpath, os.path.join(out, "model.onnx"), runs=3)
    assert [s["identical"] for s in stats.values()] == [1.0], stats


def test_table_built_in_long_spans_as_the_model_runs_them(tmp_path):
    """3. A Lookup's table comes from onnxruntime's run of the group on the 256 codes. Laid out as
    [1, 1, 256, 1], each QLinearAdd span was one value, which MLAS computes in its scalar helper; the
    model's long spans take its vector kernel, and the two round a tie differently: erf code 85 of
    ``DQ -> Erf -> Q -> DQ -> + 1 -> Q`` below (PP-OCRv6 det's U8 GELU, ``1 + erf``) is 84 in one, 85
    in the other."""
    import onnxruntime as ort
    n, sa, sc = helper.make_node, np.float32(0.00784313678741455), np.float32(0.007843137718737125)
    inits = [numpy_helper.from_array(np.float32(0.030832), "sx"), numpy_helper.from_array(np.uint8(128), "zx"),
             numpy_helper.from_array(sa, "sa"), numpy_helper.from_array(np.uint8(128), "za"),
             numpy_helper.from_array(sc, "sc"), numpy_helper.from_array(np.uint8(0), "zc"),
             numpy_helper.from_array(np.uint8(255), "one_q"), numpy_helper.from_array(np.float32(1 / 255), "one_s"),
             numpy_helper.from_array(np.uint8(0), "one_z"),
             numpy_helper.from_array(np.random.default_rng(4).integers(-3, 4, (4, 4, 1, 1)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.float32(0.25), "w_s"), numpy_helper.from_array(np.int8(0), "w_z")]
    nodes = [n("QuantizeLinear", ["x", "sx", "zx"], ["xq"]), n("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             n("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"]), n("Conv", ["xd", "w"], ["c"], name="conv"),
             n("QuantizeLinear", ["c", "sx", "zx"], ["cq"]), n("DequantizeLinear", ["cq", "sx", "zx"], ["cd"]),
             n("Erf", ["cd"], ["e"], name="erf"),
             n("QuantizeLinear", ["e", "sa", "za"], ["eq"]), n("DequantizeLinear", ["eq", "sa", "za"], ["ed"]),
             n("DequantizeLinear", ["one_q", "one_s", "one_z"], ["one"]), n("Add", ["ed", "one"], ["s"], name="add_one"),
             n("QuantizeLinear", ["s", "sc", "zc"], ["sq"]), n("DequantizeLinear", ["sq", "sc", "zc"], ["y"])]
    g = helper.make_graph(nodes, "tie", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    qpath = str(tmp_path / "qdq.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), qpath)
    r = onnx_mrvl.convert(qpath)
    assert r.report["erf"].composite == "mrvl.lookup" and r.report["add_one"].composite == "mrvl.lookup", \
        (r.report["erf"], r.report["add_one"])
    out = str(tmp_path / "out")
    r.save(out)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    m = onnx.load(qpath)
    m.graph.output.append(helper.make_tensor_value_info("eq", TensorProto.UINT8, None))
    probe = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng, tie = np.random.default_rng(5), False
    for _ in range(3):
        x = (rng.standard_normal((1, 4, 16, 16)) * 0.5).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref.run(["y"], {"x": x})[0])
        tie = tie or bool((probe.run(["eq"], {"x": x})[0] == 85).any())    # the tie is reached
    assert tie


def test_table_of_a_rewritten_div_divides():
    """4. legalize rewrites Div(x, c) as Mul(x, 1 / c), which rounds otherwise in fp32 unless c is a power
    of two; the Mul keeps the divisor (``mrvl.divisor``), and a Lookup's table (onnxruntime's run of
    the group's nodes) divides again, as the QDQ model does (a written-out GELU's x / sqrt 2)."""
    from onnx_mrvl.fuse import lookup_table
    n = helper.make_node
    sx, sy, root2 = np.float32(0.0544965), np.float32(0.00784313678741455), np.float32(1.4142135)
    x = ((np.arange(256) - 154) * sx).astype(np.float32)
    assert (x / root2 != x * (np.float32(1) / root2)).any()     # the rewrite moves fp32 values
    inits = [numpy_helper.from_array(root2, "c"), numpy_helper.from_array(sx, "s"), numpy_helper.from_array(np.uint8(154), "z"),
             numpy_helper.from_array(sy, "sy"), numpy_helper.from_array(np.uint8(128), "zy")]
    nodes = [n("QuantizeLinear", ["x", "s", "z"], ["xq"]), n("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             n("Div", ["xd", "c"], ["d"], name="div"), n("Erf", ["d"], ["e"], name="erf"),
             n("QuantizeLinear", ["e", "sy", "zy"], ["eq"]), n("DequantizeLinear", ["eq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "div", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 16, 16])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    legal = legalize(model).model
    mul = next(x for x in legal.graph.node if x.name == "div")
    assert mul.op_type == "Mul"
    np.testing.assert_array_equal(lookup_table._divisor(mul), root2)
    fused = fuse(legalize(model)).model
    table = next(numpy_helper.to_array(t) for t in fused.graph.initializer if t.name.endswith("_table"))
    import onnxruntime as ort
    m = onnx.load_from_string(model.SerializeToString())
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("eq", TensorProto.UINT8, None))
    codes = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": ((np.arange(256) - 154) * sx).astype(np.float32).reshape(1, 1, 16, 16)})[0]
    np.testing.assert_array_equal(table.ravel(), codes.ravel().astype(np.int32))
