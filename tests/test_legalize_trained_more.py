"""Patterns of more trained models from PyPI wheels (tools/survey_trained_more.py,
docs/surveys/trained-more.md), built with onnx.helper and seeded weights.

magika (a JAX byte CNN through jax2tf + tf2onnx): max over time of a 1-D conv over 508 positions, a
GlobalMaxPool above what one GlobalMaxPool2D takes (gmp_split)."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.provenance import get_origin
from onnx_mrvl.target import Target
from test_fuse_exports import Net
from test_legalize_ocr_audio_idioms import _convert

mk = helper.make_node


def _attr(n, name):
    return helper.get_attribute_value(next(a for a in n.attribute if a.name == name))


@pytest.mark.parametrize("hw,stages", [((1, 508), 1), ((300, 20), 1), ((1, 256), 0), ((1, 5000), 2),
                                       ((1, 70000), 3)])
def test_global_max_pool_above_the_limit_becomes_window_stages(hw, stages):
    """Sizes with no exact factorisation (508 = 4 x 127) too: the last window of a ceil-mode stage
    holds what is left, and a max of maxima is exact."""
    m = make_model([mk("GlobalMaxPool", ["x"], ["y"], name="gmp")], [("x", [2, 3] + list(hw))], ["y"])
    out, log = legalize_and_compare(m, tol=0.0)
    assert op_types(out) == ["MaxPool"] * stages + ["GlobalMaxPool"]
    for n in out.graph.node[:-1]:
        k = list(_attr(n, "kernel_shape"))
        assert max(k) <= 16 and list(_attr(n, "strides")) == k
    assert all(get_origin(n) == ["gmp"] for n in out.graph.node)


def test_small_pool_window_target():
    m = make_model([mk("GlobalMaxPool", ["x"], ["y"], name="gmp")], [("x", [1, 2, 20, 300])], ["y"])
    out, _ = legalize_and_compare(m, Target(max_pool_kernel=4), tol=0.0)
    assert op_types(out) == ["MaxPool"] * 3 + ["GlobalMaxPool"]   # 20 x 300 -> 5 x 75 -> 19 -> 5 (<= 16 fits)
    assert [list(_attr(n, "kernel_shape")) for n in out.graph.node[:3]] == [[4, 4], [1, 4], [1, 4]]


def test_int8_global_max_pool_stays_whole():
    n = Net(31)
    sc, zp = n.const(np.float32(0.05)), n.const(np.int8(0))
    x = n.op("DequantizeLinear", [n.op("QuantizeLinear", ["x", sc, zp]), sc, zp])
    q = n.op("QuantizeLinear", [n.op("GlobalMaxPool", [x], "gmp"), sc, zp])
    out = legalize(n.model([("x", [1, 4, 1, 600])], [n.op("DequantizeLinear", [q, sc, zp])])).model
    assert op_types(out).count("MaxPool") == 0 and "gmp" in {x.name for x in out.graph.node}


def _byte_cnn(length=512):
    """A magika / Kim-style 1-D CNN: Conv1d over the sequence, Relu, max over time
    (GlobalMaxPool of [N, C, L]), a Dense head."""
    n = Net(32)
    h = n.op("Conv", ["x", n.w(24, 16, 5)], "conv", kernel_shape=[5])
    h = n.op("Relu", [h])
    p = n.op("GlobalMaxPool", [h], "max_over_time")
    p = n.op("Flatten", [p])
    y = n.op("Gemm", [p, n.w(10, 24), n.w(10)], "head", transB=1)
    return n.model([("x", [2, 16, length])], [y])


def test_max_over_time_of_a_long_sequence_runs_in_one_region(tmp_path):
    res = _convert(_byte_cnn(), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["max_over_time"].placement == "accelerator"
