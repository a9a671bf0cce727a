"""conv_dilation_fold: a dilation above max_dilation whose taps all see the image (DeepLabV3 ASPP rate 12
on a 33x33 map) -> a zero-filled kernel at a dilation within the limit; numbers vs onnxruntime."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(9)


def weight(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("rate, size, kernel, dil", [
    (12, 33, [5, 5], [6, 6]),      # ASPP rate 12 on the output-stride-16 map of a 513 input
    (18, 33, [7, 7], [6, 6]),
    (24, 33, [7, 7], [8, 8]),      # taps at -24 / +24 still see the 33-row map
    (9, 20, [7, 7], [3, 3]),
    (10, 25, [5, 5], [5, 5]),
])
def test_aspp_rate(rate, size, kernel, dil):
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="aspp", dilations=[rate, rate], pads=[rate] * 4)],
                   [("x", [1, 8, size, size])], ["y"], {"w": weight(6, 8, 3, 3), "b": weight(6)})
    out, log = legalize_and_compare(m)
    assert "conv_dilation_fold" in [r for r, _, _ in log]
    conv = next(n for n in out.graph.node if n.op_type == "Conv" and n.name == "aspp")
    a = attrs(conv)
    assert a["kernel_shape"] == kernel and a["dilations"] == dil and max(a["pads"]) <= 7
    assert "Pad" not in op_types(out)          # the pads over the limit became a depthwise pad conv


def test_rates_past_the_map_stay_dead_taps():
    """Rate 36 on 33x33: only the centre tap sees the image -> conv_dead_taps' 1x1, not this rule."""
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="aspp", dilations=[36, 36], pads=[36] * 4)],
                   [("x", [1, 4, 33, 33])], ["y"], {"w": weight(4, 4, 3, 3)})
    out, log = legalize_and_compare(m)
    rules = [r for r, _, _ in log]
    assert "conv_dead_taps" in rules and "conv_dilation_fold" not in rules


def test_prime_rate_without_a_fitting_factor_stays():
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="c", dilations=[11, 1], pads=[11, 1, 11, 1])],
                   [("x", [1, 4, 30, 30])], ["y"], {"w": weight(4, 4, 3, 3)})
    out, log = legalize_and_compare(m)
    assert "conv_dilation_fold" not in [r for r, _, _ in log]


def test_aspp_branch_offloaded(tmp_path):
    """Conv 1x1 -> ASPP-style 3x3 rate-12 conv -> Relu on a 33x33 map: one region, nothing on the CPU."""
    nodes = [mk("Conv", ["x", "w0"], ["c0"], name="proj"), mk("Relu", ["c0"], ["r0"], name="relu0"),
             mk("Conv", ["r0", "w1", "b1"], ["c1"], name="aspp12", dilations=[12, 12], pads=[12] * 4),
             mk("Relu", ["c1"], ["y"], name="relu1")]
    m = make_model(nodes, [("x", [1, 8, 33, 33])], ["y"], {"w0": weight(16, 8, 1, 1), "w1": weight(16, 16, 3, 3),
                                                           "b1": weight(16)})
    result = onnx_mrvl.convert(m)
    assert len(result.subgraphs) == 1
    assert all(d.placement == "accelerator" for d in result.report.decisions.values())
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path)))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = R.standard_normal([1, 8, 33, 33]).astype(np.float32)
    got, want = sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
