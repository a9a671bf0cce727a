"""Input shapes a user pins that the model cannot take (onnx_mrvl/shape_fit.py): our UsageError naming
the node and onnxruntime's reason, asked of onnxruntime only when legalize saw trouble (a rule's
contradiction, a failed shape probe) or a later stage failed; valid shapes convert as before."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl import pipeline, shape_fit
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import CompileError, UsageError
from onnx_mrvl.legalize import legalize


def _reflect_model():
    """x [1, T] -> Unsqueeze -> reflect Pad 16 each side -> Conv1d (k16, s8) -> Relu: T <= 16 is invalid
    (onnxruntime: "Pad reflect: pre-pad (16) exceeds maximum allowed (T - 1)")."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((8, 1, 16)) * 0.1).astype(np.float32), "w"),
             nh.from_array(np.array([0, 0, 16, 0, 0, 16], np.int64), "pads"),
             nh.from_array(np.array([1], np.int64), "ax")]
    nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"], name="unsq"),
             helper.make_node("Pad", ["u", "pads"], ["p"], mode="reflect", name="pad"),
             helper.make_node("Conv", ["p", "w"], ["c"], strides=[8], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "reflect", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "T"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ort(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_input_shapes_a_reflect_pad_cannot_take_are_a_usage_error_naming_the_node(tmp_path, capsys):
    """T=8 under a 16-wide reflect pad: was a conversion that succeeded (the Pad left on the CPU) and a
    run that failed in onnxruntime; now convert says so, naming 'pad' and onnxruntime's reason."""
    m = _reflect_model()
    with pytest.raises(UsageError) as info:
        onnx_mrvl.convert(m, input_shapes={"x": [1, 8]})
    assert info.value.node == "pad" and "pre-pad (16) exceeds maximum allowed (7)" in str(info.value)
    assert "x:1,8" in str(info.value) and "'x': [1, 'T']" in info.value.hint
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    for stage in ("all", "legalize"):
        code = main(["convert", path, "-o", str(tmp_path / stage), "--input-shape", "x:1,8", "--stage", stage])
        err = capsys.readouterr().err
        assert code == 3 and "[pad]" in err and "Fix:" in err and not (tmp_path / stage).exists()
    # a size the pad fits converts as before (no false alarm), its numbers those of onnxruntime
    ok = onnx_mrvl.convert(m, input_shapes={"x": [1, 64]}, embed=True)
    assert ok.subgraphs
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    want = _ort(m, x)
    np.testing.assert_allclose(onnx_mrvl.InferenceSession(ok.model).run(None, {"x": x})[0], want,
                               rtol=1e-2, atol=1e-3 * max(1.0, float(np.abs(want).max())))


def test_reshape_zero_past_the_input_rank_is_a_contradiction_not_an_index_error():
    """Reshape shape [0, 0, -1] of a rank-1 input (silero_vad's STFT at a 64-sample input): was an
    IndexError out of reshape_static's check; now the rule declines and legalize reports it."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [nh.from_array(np.array([0, 0, -1], np.int64), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    res = legalize(m)
    assert [(r, n) for r, n, _ in res.report.contradictions] == [("reshape_static", "reshape")]
    assert "lacks" in res.report.contradictions[0][2] and "Reshape" in [n.op_type for n in res.model.graph.node]


@pytest.mark.parametrize("failure", [IndexError("tuple index out of range"), CompileError("window does not fit")])
def test_a_later_failure_with_pinned_shapes_asks_onnxruntime(monkeypatch, failure):
    """A stage failing after legalize (a bug's exception, or one of our errors such as a CompileError)
    with input shapes onnxruntime refuses: the UsageError about the shapes, the failure chained; with
    shapes onnxruntime takes, the failure itself (a bug still surfaces)."""
    monkeypatch.setattr(shape_fit, "check_legalized", lambda *a, **k: None)   # the legalize-time check off

    def broken(*args, **kwargs):
        raise failure
    monkeypatch.setattr(pipeline, "fuse", broken)
    m = _reflect_model()
    with pytest.raises(UsageError, match=r"\[pad\].*do not fit the model") as info:
        onnx_mrvl.convert(m, input_shapes={"x": [1, 8]})
    assert info.value.__cause__ is failure
    with pytest.raises(type(failure)):
        onnx_mrvl.convert(m, input_shapes={"x": [1, 64]})


def test_refusal_judges_nothing_when_onnxruntime_cannot_load_the_model_at_all():
    """A custom op onnxruntime lacks: no accusation of the shapes (the model fails with any)."""
    n = helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.custom", name="custom")
    g = helper.make_graph([n], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("example.custom", 1)])
    assert shape_fit.refusal(m, {"x": [1, 4]}) is None
    node, why = shape_fit.refusal(_reflect_model(), {"x": [1, 8]})
    assert node == "pad" and why.startswith("run: Pad: Pad reflect")
    assert shape_fit.refusal(_reflect_model(), {"x": [1, 64]}) is None


def test_a_kernel_longer_than_the_pinned_input_is_a_usage_error():
    """openWakeWord's melspectrogram (Conv k512) at 64 samples: ONNX inference leaves the Conv's output
    unknown although its inputs are static (shapes.refused_by_inference); was a conversion that
    succeeded with the Conv on the CPU, whose every run then failed in onnxruntime."""
    w = nh.from_array(np.random.default_rng(0).standard_normal((4, 1, 16)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[4]),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "k",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "T"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UsageError, match=r"\[conv\] the input shapes given \(x:1,1,8\) do not fit the model"):
        onnx_mrvl.convert(m, input_shapes={"x": [1, 1, 8]})
    assert onnx_mrvl.convert(m, input_shapes={"x": [1, 1, 64]}).subgraphs


def test_a_symbolic_dimension_given_two_sizes_is_a_usage_error(tmp_path, capsys):
    """The batch of the audio and of the LSTM state (open-voicefilter-lite) given apart: was a conversion
    that succeeded with the LSTM on the CPU, whose every run failed in onnxruntime; the hint names the
    sizes given. One size everywhere converts (the LSTM offloaded)."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array((rng.standard_normal((1, 32, 4)) * 0.3).astype(np.float32), "W"),
             nh.from_array((rng.standard_normal((1, 32, 8)) * 0.3).astype(np.float32), "R")]
    g = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R", "", "", "h0"], ["y"], name="lstm", hidden_size=8)],
                          "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", "batch", 4]),
                                   helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, "batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(UsageError, match=r"\[lstm\] .*initial_h must have shape \{1,2,8\}") as info:
        onnx_mrvl.convert(m, input_shapes={"x": [5, 2, 4], "h0": [1, 3, 8]})
    assert info.value.hint.startswith("'batch' is 2 in x and 3 in h0")
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    code = main(["convert", path, "-o", str(tmp_path / "o"), "--input-shape", "x:5,2,4", "--input-shape", "h0:1,3,8",
                 "--stage", "legalize"])
    assert code == 3 and "'batch' is 2 in x and 3 in h0" in capsys.readouterr().err
    r = onnx_mrvl.convert(m, input_shapes={"x": [5, 2, 4], "h0": [1, 2, 8]})
    assert r.report.decisions["lstm"].placement == "accelerator"


def test_a_contradiction_inside_an_if_body_is_checked_against_the_outer_shapes():
    """silero_vad's STFT under an If (the sample-rate switch): the body, converted on its own, sees the
    reflect pad as wide as its axis; was a conversion that succeeded (the body on the CPU, its error
    swallowed) and failed every run; now the UsageError naming the If."""
    rng = np.random.default_rng(0)

    def branch(name):
        nodes = [helper.make_node("Pad", ["x", "pads"], [f"{name}_p"], mode="reflect", name=f"{name}_pad"),
                 helper.make_node("Conv", [f"{name}_p", "w"], [f"{name}_y"], strides=[8], name=f"{name}_conv")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])
    inits = [nh.from_array((rng.standard_normal((8, 1, 16)) * 0.1).astype(np.float32), "w"),
             nh.from_array(np.array([0, 0, 16, 0, 0, 16], np.int64), "pads")]
    node = helper.make_node("If", ["flag"], ["y"], name="switch", then_branch=branch("a"), else_branch=branch("b"))
    g = helper.make_graph([node], "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "T"]),
                                         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UsageError, match=r"\[switch\] the input shapes given \(x:1,1,8, flag:\) do not fit"):
        onnx_mrvl.convert(m, input_shapes={"x": [1, 1, 8], "flag": []})
    r = onnx_mrvl.convert(m, input_shapes={"x": [1, 1, 64], "flag": []}, embed=True)   # a size that fits
    assert r.subgraphs
    feeds = {"x": rng.standard_normal((1, 1, 64)).astype(np.float32), "flag": np.array(True)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(onnx_mrvl.InferenceSession(r.model).run(None, feeds)[0], want,
                               rtol=1e-2, atol=1e-3 * max(1.0, float(np.abs(want).max())))
