"""Legalization across opsets: recent opsets kept, failed version conversion handled, names,
subgraphs, a long chain."""
import logging

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(4)


def _cnn_nodes(opset):
    """Conv -> BN -> Relu -> Pad -> MaxPool -> Flatten -> Gemm -> Clip, in ``opset``'s forms."""
    c = 4
    inits = {"w": (R.standard_normal((c, 3, 3, 3)) / 5).astype(np.float32),
             "s": R.uniform(0.5, 1.5, c).astype(np.float32),
             "b": R.standard_normal(c).astype(np.float32),
             "mu": R.standard_normal(c).astype(np.float32),
             "var": R.uniform(0.5, 1.5, c).astype(np.float32),
             "fw": (R.standard_normal((10, c * 4 * 4)) / 8).astype(np.float32),
             "fb": R.standard_normal(10).astype(np.float32)}
    nodes = [mk("Conv", ["x", "w"], ["c"], name="conv", auto_pad="SAME_UPPER"),
             mk("BatchNormalization", ["c", "s", "b", "mu", "var"], ["bn"], name="bn"),
             mk("Relu", ["bn"], ["r"], name="relu")]
    if opset < 11:
        nodes.append(mk("Pad", ["r"], ["p"], name="pad", pads=[0, 0, 1, 1, 0, 0, 1, 1]))
    else:
        inits["pads"] = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
        nodes.append(mk("Pad", ["r", "pads"], ["p"], name="pad"))
    nodes += [mk("MaxPool", ["p"], ["m"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
              mk("Flatten", ["m"], ["f"], name="flat"),
              mk("Gemm", ["f", "fw", "fb"], ["g"], name="fc", transB=1, alpha=0.5)]
    if opset < 11:
        nodes.append(mk("Clip", ["g"], ["y"], name="clip", min=0.0, max=6.0))
    else:
        inits.update(lo=np.array(0, np.float32), hi=np.array(6, np.float32))
        nodes.append(mk("Clip", ["g", "lo", "hi"], ["y"], name="clip"))
    return nodes, inits


@pytest.mark.parametrize("opset,ir", [(7, 3), (9, 4), (11, 6), (13, 7), (18, 8), (21, 10),
                                      (23, 10)])
def test_small_cnn_every_opset(opset, ir):
    nodes, inits = _cnn_nodes(opset)
    m = make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits, opset=opset, ir_version=ir)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv", "Relu", "MaxPool", "Reshape", "Gemm", "Clip"]
    assert out.opset_import[0].version == max(opset, 13)
    assert {r for r, _, _ in log} >= {"bn_into_conv", "pad_fold", "to_reshape", "gemm_canonical"}


def test_failed_version_conversion_keeps_opset_and_legalizes(monkeypatch, caplog):
    def boom(model, version):
        raise RuntimeError("adapter missing")
    monkeypatch.setattr(onnx.version_converter, "convert_version", boom)
    nodes, inits = _cnn_nodes(9)
    nodes += [mk("Squeeze", ["y"], ["y0"], name="sq", axes=[0]),
              mk("Unsqueeze", ["y0"], ["z"], name="usq", axes=[0])]
    m = make_model(nodes, [("x", [1, 3, 8, 8])], ["z"], inits, opset=9, ir_version=4)
    with caplog.at_level(logging.WARNING):
        out, log = legalize_and_compare(m)
    assert "adapter missing" in caplog.text
    assert out.opset_import[0].version == 9
    ops = op_types(out)
    assert "BatchNormalization" not in ops and "Pad" not in ops and "Flatten" not in ops
    assert ops.count("Reshape") == 3 and "Clip" in ops  # attribute-form Clip kept below 11


def test_duplicate_names_made_unique():
    m = make_model([mk("Relu", ["x"], ["a"], name="n"), mk("Relu", ["a"], ["y"], name="n")],
                   [("x", [2])], ["y"])
    out = legalize(m).model  # (onnxruntime refuses the original: two nodes named n)
    onnx.checker.check_model(out)
    assert [n.name for n in out.graph.node] == ["n", "n_1"]


def test_tensor_read_in_subgraph_survives():
    then_g = helper.make_graph([mk("Identity", ["t"], ["o"], name="inner")], "then", [],
                               [helper.make_tensor_value_info("o", onnx.TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([mk("Neg", ["t"], ["o2"], name="inner2")], "else", [],
                               [helper.make_tensor_value_info("o2", onnx.TensorProto.FLOAT, [2])])
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Identity", ["r"], ["t"], name="id"),
                    mk("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                   [("x", [2])], ["y"], {"cond": np.array(True)})
    out = legalize(m).model
    onnx.checker.check_model(out)
    producers = {o for n in out.graph.node for o in n.output}
    assert "t" in producers  # still produced under the name the subgraphs read
    from onnx_mrvl.legalize.testing import compare
    assert compare(m, out) == 0.0


def test_long_chain_is_fast_enough():
    nodes, x = [], "x"
    for i in range(1500):
        nodes += [mk("Sub", [x, "c"], [f"s{i}"]), mk("Identity", [f"s{i}"], [f"i{i}"])]
        x = f"i{i}"
    m = make_model(nodes, [("x", [2, 8])], [x], {"c": np.full(8, 1e-3, np.float32)})
    res = legalize(m)
    out, report = res.model, res.report
    assert op_types(out) == ["Add"] * 1500 and out.graph.output[0].name == x
    assert report.sweeps <= 3


def test_target_as_dict_and_report():
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="conv")], [("x", [1, 2, 12, 12])], ["y"],
                   {"w": R.standard_normal((2, 2, 5, 5)).astype(np.float32)})
    res = legalize(m, {"max_kernel": 3})
    out, report = res.model, res.report
    # 4 kernel tiles (their crop Slices become one-tap Convs named "conv/sliceK": crop_to_conv)
    assert sum(n.op_type == "Conv" and "/slice" not in n.name for n in out.graph.node) == 4
    assert report.by_rule()["conv_kernel_split"] == ["conv"]
    assert report.opset == (13, 13)


def test_data_dependent_shapes_left_out_of_value_info():
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("NonZero", ["r"], ["nz"], name="nz"),
                    mk("Transpose", ["nz"], ["t"], name="tr", perm=[1, 0]),
                    mk("Cast", ["t"], ["y"], name="cast", to=onnx.TensorProto.FLOAT)],
                   [("x", [3, 4])], ["y"])
    out = legalize(m).model
    onnx.checker.check_model(out)
    assert op_types(out) == ["Relu", "NonZero", "Transpose", "Cast"]
    assert [vi.name for vi in out.graph.value_info] == ["r"]
    from onnx_mrvl.legalize.testing import compare
    assert compare(m, out) == 0.0 and compare(m, out, seed=7) == 0.0


@pytest.mark.parametrize("opset,op,mode,scales", [
    (10, "Resize", "linear", [1, 1, 2, 2]),        # PyTorch opset 10 bilinear upsample (DeepLabV3)
    (10, "Resize", "nearest", [1, 1, 3, 3]),       # round_prefer_floor would read other pixels
    (10, "Resize", "nearest", [1, 1, 0.5, 0.5]),   # downsampling takes the ceiling
    (9, "Upsample", "linear", [1, 1, 2, 2]),
    (9, "Upsample", "nearest", [1, 1, 3, 2]),
    (10, "Resize", "nearest", [1, 1, 2, 0.5]),     # up and down: no Resize-11 form, opset kept
])
def test_resize_from_opset_10_keeps_its_coordinate_mode(opset, op, mode, scales):
    """onnx's converter gives Resize-10 / Upsample the Resize-11 defaults (half_pixel,
    round_prefer_floor); onnxruntime ran them asymmetric, nearest = floor up / ceil down."""
    m = make_model([mk(op, ["x", "scales"], ["y"], name="resize", mode=mode)], [("x", [1, 2, 6, 8])], ["y"],
                   {"scales": np.array(scales, np.float32)}, opset=opset)
    out, log = legalize_and_compare(m)
    node = next(n for n in out.graph.node if n.op_type == "Resize")
    if scales[2] > 1 > scales[3]:
        assert out.opset_import[0].version == opset
    else:
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        assert a["coordinate_transformation_mode"] == b"asymmetric"
