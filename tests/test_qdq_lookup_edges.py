"""int8 Lookup groups at the edges of what fuse handled: a graph output, a relabelled operand.

1. A QDQ model whose output is ``DQ -> Sigmoid -> Q -> DQ`` (a DB text detector's probability map,
   PP-OCRv5 det / the seal det): the group ended at a graph output, which fuse did not let a Lookup
   end at, so the Sigmoid ran as a float layer with numpy's exp while onnxruntime's QLinearSigmoid
   table comes from MLAS's logistic; with the map's tiny output scale (its calibration range [0, 1e-5])
   half the output codes differed by up to 2. As a Lookup the table is onnxruntime's own.
2. A transformer block's [N, W, C] output is reshaped to [N, 1, W, C] and transposed to NCHW, then added
   to a conv branch whose SiLU is an int8 Lookup. fuse once left the Lookup's output without the layout
   label the compile step gives it (NHWC), so the relabel of the unit-axes tensor became an "NCHW ->
   NHWC" LayoutTransform of data the Lookup wrote NHWC, and the compile step refused the region
   (CompileError on onnxruntime's own quantize_static of the model).
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
