"""squeeze_sink: the unit-axis Reshape after a 1-D conv (conv_1d_to_2d's ``to1d``) moves below the
elementwise activation reading it, so fuse makes the activation the Conv2D's epilogue (one layer,
not Conv2D + Mul2D). Structure of the legalized and fused models, numbers against onnxruntime."""
import numpy as np
import onnx_mrvl
import pytest
from onnx import helper

from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, make_model, run

mk = helper.make_node
R = np.random.default_rng(5)


def _conv1d_model(act: str, extra=()):
    """x [1, 8, 20] -> Conv1d k3 (8 -> 12) -> ``act`` -> y; ``extra`` nodes appended (reading the
    tensors named ``c`` (conv output) / ``y``)."""
    inits = {"w": (R.standard_normal((12, 8, 3)) * 0.3).astype(np.float32),
             "b": (R.standard_normal(12) * 0.1).astype(np.float32),
             "sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1.0, np.float32),
             "half": np.array(0.5, np.float32)}
    nodes = [mk("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3], pads=[1, 1])]
    if act == "gelu":     # PyTorch's erf GELU
        nodes += [mk("Div", ["c", "sqrt2"], ["d"], name="div"), mk("Erf", ["d"], ["e"], name="erf"),
                  mk("Add", ["e", "one"], ["a"], name="add"), mk("Mul", ["c", "a"], ["m"], name="mul"),
                  mk("Mul", ["m", "half"], ["y"], name="half")]
    elif act == "silu":
        nodes += [mk("Sigmoid", ["c"], ["s"], name="sigmoid"), mk("Mul", ["c", "s"], ["y"], name="mul")]
    else:
        nodes += [mk("Relu", ["c"], ["y"], name="relu")]
    nodes += list(extra)
    outs = ["y"] + [n.output[0] for n in extra]
    return make_model(nodes, [("x", [1, 8, 20])], outs, inits)


def _readers(model, t):
    return [n for n in model.graph.node if t in n.input]


@pytest.mark.parametrize("act, kind", [("gelu", "gelu"), ("silu", "silu"), ("relu", "relu")])
def test_activation_after_conv1d_is_the_conv_epilogue(act, kind, tmp_path):
    m = _conv1d_model(act)
    out, log = legalize_and_compare(m)
    assert [rule for rule, _, _ in log].count("squeeze_sink") == 1
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert all(r.op_type != "Reshape" for r in _readers(out, conv.output[0]))   # activation reads the 4-D conv
    last = next(n for n in out.graph.node if n.output[0] == "y")
    assert last.op_type == "Reshape"                                             # back to [1, 12, 20] at the end
    r = fuse(out)
    mrvl = [n for n in r.model.graph.node if n.domain == opset.DOMAIN]
    convs = [n for n in mrvl if n.op_type == "Conv2D"]
    assert len(convs) == 1 and opset.node_attrs(convs[0])["activation"] == kind
    assert not [n for n in mrvl if n.op_type == "Mul2D"]
    f = feeds_for(m)
    ref = run(m, f)
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)
    assert len(res.subgraphs) == 1
    assert np.max(np.abs(got[0] - ref[0])) <= 1e-2 * np.max(np.abs(ref[0]))


def test_other_reader_of_the_conv_keeps_the_reshape():
    """The conv's 1-D output also read by a Transpose (not elementwise): nothing moves."""
    m = _conv1d_model("gelu", [mk("Transpose", ["c"], ["t"], name="tr", perm=[0, 2, 1])])
    out, _ = legalize_and_compare(m)
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert [r.op_type for r in _readers(out, conv.output[0])] == ["Reshape"]


def test_set_ends_at_a_residual_and_at_inner_readers():
    """A residual Add of the activation and a second input stays outside the moved set (its other
    operand is no constant); the activation's output, read by it and being a graph output, gets the
    Reshape back; an inner tensor read outside (the Erf's input also a graph output) is an exit too."""
    extra = [mk("Add", ["y", "x2"], ["res"], name="residual")]
    m = _conv1d_model("gelu", extra)
    m.graph.input.append(helper.make_tensor_value_info("x2", 1, [1, 12, 20]))
    m.graph.output.append(helper.make_tensor_value_info("d", 1, None))
    out, _ = legalize_and_compare(m)
    res = next(n for n in out.graph.node if n.name == "residual")
    assert res.input[0] == "y"
    for t in ("y", "d"):
        assert next(n for n in out.graph.node if n.output[0] == t).op_type == "Reshape"
