"""conv_phase_s2d: a strided kernel above max_kernel (Keras Conv1D(80, strides=4), M5's first layer)
becomes one stride-1 Conv over space-to-depth blocks with r output phases, instead of kernel tiles
that need Slices / pads over the limit (CPU). Numbers against onnxruntime on the original model."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(7)


def weight(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def conv1d(length, k, s, pads=(0, 0), cin=1, cout=16, relu=True):
    nodes = [mk("Conv", ["x", "w", "b"], ["c"], name="conv0", strides=[s], pads=list(pads))]
    nodes.append(mk("Relu", ["c"], ["y"], name="relu0") if relu else mk("Identity", ["c"], ["y"], name="id"))
    return make_model(nodes, [("x", [1, cin, length])], ["y"], {"w": weight(cout, cin, k), "b": weight(cout)})


@pytest.mark.parametrize("length, k, s, pads, cin, phases", [
    (8000, 80, 4, (0, 0), 1, 4),        # M5: 1981 outputs, 4 phases x 496 blocks, last 3 dropped
    (8000, 80, 4, (38, 38), 1, 4),      # "same"-style padding
    (1000, 31, 2, (15, 15), 3, 4),
    (999, 11, 3, (0, 0), 2, 1),         # r = 1: plain space-to-depth, kernel 4 blocks
])
def test_strided_large_kernel_1d(length, k, s, pads, cin, phases):
    m = conv1d(length, k, s, pads, cin)
    out, log = legalize_and_compare(m)
    rules = [r for r, _, _ in log]
    assert "conv_phase_s2d" in rules and "conv_kernel_split" not in rules
    assert "Slice" not in op_types(out) and "Add" not in op_types(out)
    detail = next(d for r, _, d in log if r == "conv_phase_s2d")
    assert f"with {phases} output phases" in detail
    convs = [n for n in out.graph.node if n.op_type == "Conv" and n.name == "conv0"]
    kern = next(a.ints for a in convs[0].attribute if a.name == "kernel_shape")
    assert max(kern) <= 7


def test_tiles_without_slices_are_left_to_the_kernel_split():
    """KWS DS-CNN's 10x4 stride-2 conv tiles with leading zero taps (no Slice): not this rule."""
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="conv", strides=[2, 2], pads=[4, 1, 5, 2])],
                   [("x", [1, 1, 49, 10])], ["y"], {"w": weight(8, 1, 10, 4)})
    out, log = legalize_and_compare(m)
    assert "conv_phase_s2d" not in [r for r, _, _ in log] and "conv_kernel_split" in [r for r, _, _ in log]
    assert "Slice" not in op_types(out)


def test_m5_front_end_is_one_region(tmp_path):
    """Conv1d(1, 32, 80, stride 4) -> Relu -> MaxPool(4) -> Conv1d(32, 32, 3): one region, all offloaded."""
    nodes = [mk("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", strides=[4]),
             mk("Relu", ["c0"], ["r0"], name="relu0"),
             mk("MaxPool", ["r0"], ["p0"], name="pool0", kernel_shape=[4], strides=[4]),
             mk("Conv", ["p0", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1]),
             mk("Relu", ["c1"], ["y"], name="relu1")]
    m = make_model(nodes, [("x", [1, 1, 8000])], ["y"],
                   {"w0": weight(32, 1, 80), "b0": weight(32), "w1": weight(32, 32, 3), "b1": weight(32)})
    result = onnx_mrvl.convert(m)
    assert len(result.subgraphs) == 1
    assert result.report.offload_fraction == 1.0
    assert all(d.placement == "accelerator" for d in result.report.decisions.values())
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path)))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = R.standard_normal([1, 1, 8000]).astype(np.float32)
    got, want = sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
