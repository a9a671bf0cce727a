"""conv_3d_to_2d: 3-D Conv / MaxPool / AveragePool of depth 1 or a small depth -> 2-D ops with the depth
folded into channels (exact), checked against onnxruntime on the original model."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(5)


def weight(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _conv3d(x_shape, w_shape, bias=True, **kw):
    inits = {"w": weight(*w_shape)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = weight(w_shape[0])
        ins.append("b")
    return make_model([mk("Conv", ins, ["y"], name="conv3d", **kw)], [("x", x_shape)], ["y"], inits)


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ([1, 3, 1, 12, 12], [8, 3, 1, 3, 3], dict(pads=[0, 1, 1, 0, 1, 1])),            # depth 1: squeeze
    ([2, 3, 1, 12, 12], [8, 3, 3, 3, 3], dict(pads=[1, 1, 1, 1, 1, 1])),            # depth 1, k=3 pad 1
    ([1, 4, 1, 10, 10], [4, 1, 1, 3, 3], dict(pads=[0, 1, 1, 0, 1, 1], group=4)),   # depthwise at depth 1
    ([1, 3, 4, 10, 10], [6, 3, 3, 3, 3], dict(pads=[1, 1, 1, 1, 1, 1])),            # depth 4, same depth
    ([1, 3, 5, 11, 9], [6, 3, 3, 3, 2], dict(strides=[2, 2, 1], dilations=[1, 1, 2])),   # depth 5 -> 2
    ([1, 2, 3, 8, 8], [4, 2, 2, 1, 1], dict(pads=[1, 0, 0, 0, 0, 0], strides=[1, 1, 1])),
])
def test_conv3d_folds_depth(x_shape, w_shape, kw):
    out, log = legalize_and_compare(_conv3d(x_shape, w_shape, **kw))
    assert [r for r, _, _ in log].count("conv_3d_to_2d") == 1
    assert op_types(out) == ["Reshape", "Conv", "Reshape"]
    conv = out.graph.node[1]
    w = next(t for t in out.graph.initializer if t.name == conv.input[1])
    assert len(w.dims) == 4


def test_conv3d_deep_input_stays():
    """Depth 16 with a 3-tap kernel: folding would cost 16*16/46 = 5.6x the MACs (> 4x)."""
    m = _conv3d([1, 2, 16, 6, 6], [4, 2, 3, 3, 3], pads=[1, 1, 1, 1, 1, 1])
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv"] and "conv_3d_to_2d" not in [r for r, _, _ in log]
    res = legalize(m)
    _, report = res.model, res.report
    assert ("conv_3d_to_2d", "conv3d", "depth 16 folded into channels would cost 5.6x the MACs (limit 4x)") \
        in report.skipped


@pytest.mark.parametrize("op, x_shape, kw, folded", [
    ("MaxPool", [1, 4, 1, 8, 8], dict(kernel_shape=[1, 2, 2], strides=[1, 2, 2]), True),
    ("MaxPool", [1, 4, 3, 8, 8], dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1]), True),
    ("AveragePool", [2, 4, 3, 8, 8], dict(kernel_shape=[1, 2, 2], strides=[1, 2, 2]), True),
    ("MaxPool", [1, 4, 1, 8, 8], dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], pads=[1, 0, 0, 1, 0, 0]), True),
    ("AveragePool", [1, 4, 1, 8, 8], dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], pads=[1, 0, 0, 1, 0, 0]),
     True),                                                          # count_include_pad=0: depth pads not counted
    ("AveragePool", [1, 4, 1, 8, 8], dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], pads=[1, 0, 0, 1, 0, 0],
                                          count_include_pad=1), False),
    ("MaxPool", [1, 4, 4, 8, 8], dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), False),   # mixes depth
])
def test_pool3d(op, x_shape, kw, folded):
    m = make_model([mk(op, ["x"], ["y"], name="pool3d", **kw)], [("x", x_shape)], ["y"])
    out, log = legalize_and_compare(m)
    assert (op_types(out) == ["Reshape", op, "Reshape"]) == folded


def test_conv3d_depth1_offloaded(tmp_path):
    """The 5-D Conv3d over one frame used to stay on the CPU; now the whole chain is one region."""
    m = make_model([mk("Conv", ["x", "w", "b"], ["c"], name="conv3d", pads=[0, 1, 1, 0, 1, 1]),
                    mk("Relu", ["c"], ["r"], name="relu"),
                    mk("MaxPool", ["r"], ["y"], name="pool3d", kernel_shape=[1, 2, 2], strides=[1, 2, 2])],
                   [("x", [1, 3, 1, 16, 16])], ["y"], {"w": weight(8, 3, 1, 3, 3), "b": weight(8)})
    result = onnx_mrvl.convert(m)
    assert len(result.subgraphs) == 1
    assert {d.placement for d in result.report.decisions.values()} == {"accelerator"}
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path)))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = R.standard_normal([1, 3, 1, 16, 16]).astype(np.float32)
    got, want = sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0]
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
