"""Models with If / Loop bodies convert into models onnxruntime loads and runs.

Bodies read outer tensors by name. Before the fix, fuse wrote an outer conv region's output under its
logical name in NHWC storage, so a body read [1,16,16,8] for a [1,8,16,16] tensor (wrong numbers, or
onnxruntime refusing the model when a body's op checked the shape). Bodies stay on the CPU.
"""
import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl

import control_flow_models as cfm  # tools/control_flow_models.py


def _feeds(model, extra, seed=1):
    rng = np.random.default_rng(seed)
    x = model.graph.input[0]
    feeds = {x.name: rng.standard_normal([d.dim_value for d in x.type.tensor_type.shape.dim]).astype(np.float32)}
    for vi in model.graph.input[1:]:
        if vi.name in extra:
            feeds[vi.name] = extra[vi.name]
        elif vi.type.tensor_type.elem_type == 1:
            feeds[vi.name] = rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(np.float32)
    return feeds


def _check(model, tmp_path, runs, regions):
    result = onnx_mrvl.convert(model, strict=True)
    path = result.save(str(tmp_path))
    assert len(result.subgraphs) == regions
    sess = onnx_mrvl.InferenceSession(path)        # loads: bodies and their outer reads are valid
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for extra in runs:
        feeds = _feeds(model, extra)
        for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
            assert got.shape == want.shape
            assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    return result


@pytest.mark.parametrize("computed", [False, True])
def test_if_with_conv_branches(tmp_path, computed):
    model = cfm.if_convs(computed_cond=computed)
    runs = [{}] if computed else [{"cond": np.array(True)}, {"cond": np.array(False)}]
    result = _check(model, tmp_path, runs, regions=2)
    ifs = [n for n in result.model.graph.node if n.op_type == "If"]
    assert len(ifs) == 1
    # the branches still read the outer tensor by its own name, written in the logical layout
    assert result.report.decisions["conv0"].placement == "accelerator"
    assert "control flow (If)" in result.report.decisions["If_0"].reason


@pytest.mark.parametrize("dynamic", [False, True])
def test_loop_with_conv_body(tmp_path, dynamic):
    model = cfm.loop_conv(dynamic=dynamic)
    runs = [{"M": np.array(4, np.int64)}, {"M": np.array(1, np.int64)}] if dynamic else [{}]
    result = _check(model, tmp_path, runs, regions=2)
    assert "control flow (Loop)" in result.report.decisions["Loop_0"].reason


def test_vad_like_lstm_branches_read_outer_conv(tmp_path):
    """An LSTM in each branch over the outer conv front end: the body sees [T, N, C] as declared."""
    model = cfm.vad_like()
    _check(model, tmp_path, [{"sr": np.array(16000, np.int64)}, {"sr": np.array(8000, np.int64)}], regions=1)
