"""Legalization: the Softmax 12 -> 13 adapter's ``Flatten -> Softmax -> Reshape`` over the last axis
becomes ``Softmax(axis=-1)`` (softmax_flatten_last). paddle2onnx's opset-12 recognizers (PP-OCRv4 rec:
the SVTR attention softmax and the CTC head behind dynamic reshapes, so onnx's version converter
cannot tell the rank and wraps each Softmax): the float model loses two reshapes per softmax, and
its QDQ model's ``DQ -> Softmax -> Q`` groups run as onnxruntime runs the opset-12 original
(QLinearSoftmax): 99.94% -> 100% identical codes."""
import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, version_converter

import onnx_mrvl
from onnx_mrvl.legalize.testing import legalize_and_compare
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq

mk = helper.make_node


def _hidden_rank_softmax(axis: int = 3, seed: int = 0) -> onnx.ModelProto:
    """opset 12, paddle2onnx's pattern: ``MatMul -> Reshape(x, Concat(Cast(Constant) ...)) ->
    Softmax(axis) -> MatMul`` (the reshape's target built from int32 constants: the converter sees no
    rank at the Softmax)."""
    rng = np.random.default_rng(seed)
    nodes = [mk("MatMul", ["x", "w1"], ["t"], name="mm1")]
    parts = []
    for i, v in enumerate([1, 4, 6, -1]):
        nodes.append(mk("Constant", [], [f"c{i}"], name=f"c{i}", value=numpy_helper.from_array(np.array([v], np.int32))))
        nodes.append(mk("Cast", [f"c{i}"], [f"k{i}"], name=f"cast{i}", to=TensorProto.INT64))
        parts.append(f"k{i}")
    nodes += [mk("Concat", parts, ["shp"], name="cat", axis=0), mk("Reshape", ["t", "shp"], ["r"], name="rs"),
              mk("Softmax", ["r"], ["p"], name="sm", axis=axis), mk("MatMul", ["p", "w2"], ["y"], name="mm2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array((2 * rng.standard_normal((10, 10))).astype(np.float32), "w1"),
                           numpy_helper.from_array(rng.standard_normal((10, 8)).astype(np.float32), "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)


def _feeds(n, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 4, 6, 10)).astype(np.float32)} for _ in range(n)]


def test_the_converter_wraps_the_softmax():
    """The premise: onnx's 12 -> 13 adapter flattens at the axis when it cannot see the rank."""
    ops = collections.Counter(n.op_type for n in version_converter.convert_version(_hidden_rank_softmax(), 13).graph.node)
    assert ops["Flatten"] == 1 and ops["Softmax"] == 1


def test_last_axis_wrapping_is_removed_exactly():
    out, log = legalize_and_compare(_hidden_rank_softmax(), tol=1e-6)
    assert "softmax_flatten_last" in [r for r, _, _ in log]
    ops = collections.Counter(n.op_type for n in out.graph.node)
    assert ops["Flatten"] == 0 and ops["Softmax"] == 1
    sm = next(n for n in out.graph.node if n.op_type == "Softmax")
    assert helper.get_attribute_value(next(a for a in sm.attribute if a.name == "axis")) == -1


def test_softmax_over_trailing_axes_keeps_its_flatten():
    """Softmax(axis=2) of a rank-4 tensor at opset 12 is over the last two axes together: the
    flattening is the function, it stays (and the result still matches onnxruntime)."""
    out, log = legalize_and_compare(_hidden_rank_softmax(axis=2), tol=1e-6)
    assert "softmax_flatten_last" not in [r for r, _, _ in log]


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_softmax_codes_match_onnxruntime(act, tmp_path):
    """The QDQ model of the opset-12 original: onnxruntime fuses ``DQ -> Softmax -> Q`` into
    QLinearSoftmax; the converted model gives the same codes (before the rule the Flatten / Reshape
    the converter added split the group and the float softmax rounded otherwise)."""
    src = str(tmp_path / "f.onnx")
    onnx.save(_hidden_rank_softmax(), src)
    qdq = quantize_static_qdq(src, str(tmp_path / "q.onnx"), _feeds(8), act=act, per_channel=False)
    conv = onnx_mrvl.convert(qdq)
    assert len(conv.report.regions) == 1
    sess = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out")))
    ref = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"])
    same = total = 0
    for f in _feeds(4, seed=7):
        a, b = sess.run(None, f)[0], ref.run(None, f)[0]
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same == total, f"{same} of {total} identical"
