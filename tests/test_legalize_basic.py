"""Legalization: eliminations, elementwise canonical forms, Clip, folding, names, shapes."""
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_mrvl.errors import ShapeError
from onnx_mrvl.legalize import RULES, legalize, rule_names
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.provenance import get_origin

mk = helper.make_node
R = np.random.default_rng(1)


def applied(log, rule):
    return [names for r, names, _ in log if r == rule]


def test_rule_list_order():
    names = list(rule_names())
    assert len(names) == len(set(names)) == len(RULES) == 133   # qdq_stack_sum (session 13, qdqA) + qdq_const_group + 48 + 10 contrib-op rules (contrib_nbits: session 13, h_dynq) + 10 QDQ-variant rules + 19 export idioms of session 9 (docs/surveys/) + grn_norm, strided_slice_split, qdq_infinite_softmax + 3 recurrent rules of session 10 (loop_to_rnn, reverse_sequence_gather, rnn_length_sort) + qdq_move_chain + pad_channel_concat, qdq_pad_channel, qdq_pool_transpose + pow_square (session 11) + dynamic_int_bias, qdq_input_pair (session 11) + softmax_flatten_last, center_before_transpose (session 11) + log_range_scale, log_floor_clamp (session 11) + pad_reflect_gather (session 11, h_parts) + ms_qdq_domain (session 11, qtools) + qdq_int_bias_rescale, qdq_split_pair (session 12, qtk) + qdq_channel_input (session 12, qtk2) + log_eps_floor, l2_normalize (session 12, audio2) + gmp_split, layernorm_moments, softmax_expanded, conv_dense_toeplitz (session 12, wheels3) + split_of_concat (session 12, h_seg) + minmax_const_first, slice_reverse_gather, conv_dilation_phases (session 13, wheels4)
    # + qdq_requant_before_layout, sigmoid_difference (session 10, OCR QDQ / fp16) + gathered_spatial_map, const_lhs_matmul, scatter_to_concat (detection survey) + qdq_pair_before_move
    # + qdq_batched_const_matmul, qdq_mask_select (QDQ masks, DeBERTa) + qdq_double_pair (PP-OCR's Dropout between pairs)
    # + grouped_transpose (trained text survey: dynamo's batched attention), if_static_branch (TorchScript's squeeze If), div_host_divisor (masked mean pooling)
    assert names.index("qdq_double_pair") < names.index("remove_identity")   # it records the pairs as given
    assert names.index("sigmoid_difference") < names.index("sub_tensors") < names.index("sigmoid_expanded")
    assert names.index("einsum_to_matmul") < names.index("merge_transposes")
    assert all(callable(r.match) and callable(r.check) and callable(r.rewrite) for r in RULES)
    assert names[0] == "fold_constants"
    assert names[1:6] == ["qlinear_to_qdq", "qlinear_passthrough", "dynamic_int_bias", "dynamic_int8", "dynamic_lstm"]
    assert names.index("bn_into_conv") < names.index("bn_to_mul_add")
    assert names.index("conv_attrs") < names.index("pad_fold") < names.index("conv_1d_to_2d")
    assert names.index("conv_1d_to_2d") < names.index("squeeze_sink")


def test_unnamed_nodes_named_and_identity_to_graph_output_removed():
    m = make_model([mk("Relu", ["x"], ["r"]), mk("Identity", ["r"], ["y"])],
                   [("x", [2, 3])], ["y"])
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Relu"]
    assert out.graph.node[0].name == "Relu_0"
    assert out.graph.node[0].output[0] == "y"  # producer renamed, output name kept
    assert applied(log, "remove_identity") == [["Identity_1"]]


def test_identity_input_to_output_kept():
    m = make_model([mk("Identity", ["x"], ["y"], name="id")], [("x", [2])], ["y"])
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Identity"]


@pytest.mark.parametrize("opset", [7, 12, 13])
def test_dropout_removed_even_as_graph_output(opset):
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Dropout", ["r"], ["y"], name="drop", ratio=0.3) if opset < 12 else
                    mk("Dropout", ["r"], ["y"], name="drop"),
                    ], [("x", [2, 4])], ["y"], opset=opset)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Relu"] and out.graph.output[0].name == "y"
    assert ["drop"] in applied(log, "remove_dropout")


def test_dropout_used_mask_is_ones_at_inference():
    m = make_model([mk("Dropout", ["x"], ["y", "mask"], name="drop"),
                    mk("Cast", ["mask"], ["z"], to=onnx.TensorProto.FLOAT)],
                   [("x", [2, 4])], ["y", "z"])
    out, log = legalize_and_compare(m, tol=0.0)  # y copies x: the Dropout stays, mask is ones
    assert op_types(out) == ["Dropout", "Cast"] and len(out.graph.node[0].output) == 1
    mask = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}["mask"]
    assert mask.dtype == np.bool_ and mask.shape == (2, 4) and mask.all()


def test_noop_cast_reshape_transpose_and_transpose_merge():
    shape = np.array([2, 3, 4], np.int64)
    m = make_model([
        mk("Cast", ["x"], ["c"], name="cast", to=onnx.TensorProto.FLOAT),
        mk("Reshape", ["c", "s"], ["r"], name="reshape"),
        mk("Transpose", ["r"], ["t0"], name="t0", perm=[0, 1, 2]),
        mk("Transpose", ["t0"], ["t1"], name="t1", perm=[1, 2, 0]),
        mk("Transpose", ["t1"], ["t2"], name="t2", perm=[2, 0, 1]),
        mk("Transpose", ["t2"], ["t3"], name="t3", perm=[0, 2, 1]),
        mk("Transpose", ["t3"], ["t4"], name="t4", perm=[1, 0, 2]),
        mk("Relu", ["t4"], ["y"], name="relu")], [("x", [2, 3, 4])], ["y"], {"s": shape})
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Transpose", "Relu"]
    assert list(out.graph.node[0].attribute[0].ints) == [2, 0, 1]
    assert applied(log, "remove_noop") and applied(log, "merge_transposes")
    assert set(get_origin(out.graph.node[0])) == {"t3", "t4"}


@pytest.mark.parametrize("opset", [11, 13])
def test_noop_pad_concat_and_resize_removed(opset):
    """torchvision detection input transform: resize to the size the image has, Pad by zeros,
    Concat of one image; a bilinear resize to the same size with tf_half_pixel_for_nn is not a no-op."""
    m = make_model([
        mk("Resize", ["x", "roi", "scales"], ["r"], name="resize", mode="linear"),
        mk("Pad", ["r", "pads"], ["p"], name="pad"),
        mk("Concat", ["p"], ["c"], name="concat", axis=0),
        mk("Resize", ["c", "roi", "scales"], ["y"], name="shifted", mode="linear",
           coordinate_transformation_mode="tf_half_pixel_for_nn")],
        [("x", [1, 3, 6, 5])], ["y"],
        {"roi": np.zeros(0, np.float32), "scales": np.ones(4, np.float32), "pads": np.zeros(8, np.int64)},
        opset=opset)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Resize"] and out.graph.node[0].name == "shifted"
    assert sorted(n for names in applied(log, "remove_noop") for n in names) == ["concat", "pad", "resize"]


def test_sum_to_add_chain_and_sum_of_one_removed():
    m = make_model([mk("Sum", ["a", "b", "c"], ["s"], name="sum3"),
                    mk("Sum", ["s"], ["y"], name="sum1")],
                   [("a", [2, 3]), ("b", [2, 3]), ("c", [1, 3])], ["y"])
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Add", "Add"]
    assert all(get_origin(n) == ["sum3"] for n in out.graph.node)
    assert applied(log, "remove_identity") == [["sum1"]]


def test_sub_div_by_constant():
    c = R.uniform(0.5, 2, size=(3,)).astype(np.float32)
    m = make_model([mk("Sub", ["x", "c"], ["s"], name="sub"),
                    mk("Div", ["s", "c"], ["d"], name="div"),
                    mk("Div", ["c", "d"], ["y"], name="cdiv")], [("x", [2, 3])], ["y"], {"c": c})
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Add", "Mul", "Div"]
    assert out.graph.node[0].name == "sub" and out.graph.node[1].name == "div"


def test_integer_div_untouched():
    m = make_model([mk("Div", ["x", "c"], ["y"], name="div")], [("x", [4])], ["y"],
                   {"c": np.array([2, 3, 4, 5], np.int64)}, elem=onnx.TensorProto.INT64)
    out = legalize(m).model
    assert op_types(out) == ["Div"]


@pytest.mark.parametrize("opset", [7, 11, 13])
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.5, None), (None, 0.25), (None, None)])
def test_clip_forms(opset, bounds):
    lo, hi = bounds
    inits = {}
    if opset < 11:
        kw = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
        clip = mk("Clip", ["x"], ["c"], name="clip", **kw)
    else:
        ins = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
        while ins[-1] == "":
            ins.pop()
        inits = {k: np.array(v, np.float32) for k, v in (("lo", lo), ("hi", hi)) if v is not None}
        clip = mk("Clip", ins, ["c"], name="clip")
    m = make_model([clip, mk("Relu", ["c"], ["y"], name="relu")], [("x", [2, 8])], ["y"],
                   inits, opset=opset)
    out, log = legalize_and_compare(m)
    want = {(True, True): "Clip", (True, False): "Max", (False, True): "Min",
            (False, False): None}[(lo is not None, hi is not None)]
    assert op_types(out) == ([want] if want else []) + ["Relu"]
    if want == "Clip":
        n = out.graph.node[0]
        consts = {t.name: onnx.numpy_helper.to_array(t) for t in out.graph.initializer}
        assert [float(consts[i]) for i in n.input[1:]] == [lo, hi]
        if opset == 13 and lo == 0.0:
            assert not log  # already canonical


@pytest.mark.parametrize("order", ["minmax", "maxmin"])
def test_relu6_pattern_to_clip(order):
    zero, six = np.array(0, np.float32), np.array(6, np.float32)
    if order == "minmax":
        nodes = [mk("Max", ["x", "zero"], ["a"], name="mx"), mk("Min", ["a", "six"], ["y"],
                                                                 name="mn")]
    else:
        nodes = [mk("Min", ["six", "x"], ["a"], name="mn"), mk("Max", ["a", "zero"], ["y"],
                                                                name="mx")]
    m = make_model(nodes, [("x", [2, 16])], ["y"], {"zero": zero, "six": six})
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Clip"]
    assert set(get_origin(out.graph.node[0])) == {"mx", "mn"}


def test_constant_of_shape_and_shape_chain_fold():
    # weights from ConstantOfShape (old zoo models) and a Shape->Gather->Unsqueeze->Concat->Reshape
    value = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.5])
    nodes = [
        mk("ConstantOfShape", ["wshape"], ["w"], name="cos", value=value),
        mk("MatMul", ["x", "w"], ["h"], name="mm"),
        mk("Shape", ["h"], ["shp"], name="shape"),
        mk("Gather", ["shp", "zero"], ["n"], name="gather", axis=0),
        mk("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
        mk("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
        mk("Reshape", ["h", "target"], ["y"], name="reshape")]
    m = make_model(nodes, [("x", [2, 3, 4])], ["y"],
                   {"wshape": np.array([4, 5], np.int64), "zero": np.array(0, np.int64),
                    "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)})
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["MatMul", "Reshape"]  # 3-D input: MatMul stays
    folded = {n for names in applied(log, "fold_constants") for n in names}
    assert {"cos", "shape", "gather", "unsq", "concat"} <= folded
    shape = [t for t in out.graph.initializer if t.name == out.graph.node[1].input[1]][0]
    assert list(onnx.numpy_helper.to_array(shape)) == [2, 15]


def test_huge_expand_not_folded_unless_weight():
    value = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0])
    m = make_model([mk("ConstantOfShape", ["s"], ["big"], name="cos", value=value),
                    mk("Add", ["x", "big"], ["y"], name="add")], [("x", [1, 4096, 1100])],
                   ["y"], {"s": np.array([1, 4096, 1100], np.int64)})
    res = legalize(m)
    out, report = res.model, res.report
    assert op_types(out) == ["ConstantOfShape", "Add"]
    assert any(r == "fold_constants" and "MB" in why for r, _, why in report.skipped)


def test_constant_node_and_ir3_initializer_inputs():
    w = R.standard_normal((3, 3)).astype(np.float32)
    m = make_model([mk("Constant", [], ["c"], name="const",
                       value=onnx.numpy_helper.from_array(np.ones(3, np.float32))),
                    mk("Add", ["x", "c"], ["a"], name="add"),
                    mk("MatMul", ["a", "w"], ["y"], name="mm")], [("x", [2, 3]), ("w", [3, 3])],
                   ["y"], {"w": w}, opset=9, ir_version=3)
    out, log = legalize_and_compare(m)
    assert [i.name for i in out.graph.input] == ["x"]
    assert op_types(out) == ["Add", "Gemm"]
    assert {p[0] for p in log} >= {"fold_constants", "matmul_to_gemm"}
    assert out.opset_import[0].version == 13


def test_symbolic_batch_needs_input_shapes():
    m = make_model([mk("Relu", ["x"], ["y"], name="relu")], [("x", ["N", 3, 8, 8])], ["y"])
    with pytest.raises(ShapeError) as err:
        legalize(m)
    msg = str(err.value)
    assert "'x'" in msg and "'N'" in msg and "input_shapes" in msg and "--input-shape" in msg
    out = legalize(m, input_shapes={"x": [2, 3, 8, 8]}).model
    dims = [d.dim_value for d in out.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 8, 8]
    legalize_and_compare(m, input_shapes={"x": [2, 3, 8, 8]})


def test_unknown_ops_left_alone():
    m = make_model([mk("TopK", ["x", "k"], ["v", "i"], name="topk", axis=-1),
                    mk("Relu", ["v"], ["y"], name="relu")], [("x", [2, 10])], ["y"],
                   {"k": np.array([3], np.int64)})
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["TopK", "Relu"] and not log


def test_transpose_perm_of_wrong_rank_is_a_model_error():
    """paddle2onnx writes squeeze(axis=2) on a non-unit axis as Identity, so the Transpose [0, 2, 1]
    after it reads a 4-D tensor: onnx.checker passes, convert crashed inside fuse (IndexError)."""
    import onnx_mrvl
    from onnx_mrvl.errors import ModelError
    m = make_model([mk("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                    mk("Transpose", ["c"], ["y"], name="im2seq", perm=[0, 2, 1])], [("x", [1, 3, 2, 8])], ["y"],
                   {"w": R.standard_normal((4, 3, 3, 3)).astype(np.float32)})
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("y", 1, ["a", "b", "c"]))
    with pytest.raises(ModelError, match="im2seq"):
        onnx_mrvl.convert(m)
