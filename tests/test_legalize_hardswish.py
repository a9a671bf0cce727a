"""Legalization: hard-swish / hard-sigmoid written with Add / Clip (or Relu6 as Min/Max) / Mul / Div
(paddle2onnx below opset 14, tf2onnx) become HardSigmoid (+ Mul), which fuse absorbs as the conv's
activation."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl import opset as mrvl_opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(11)


def _model(form, opset=11):
    inits = {"w": (R.standard_normal((8, 3, 3, 3)) * 0.7).astype(np.float32), "three": np.array(3.0, np.float32),
             "six": np.array(6.0, np.float32), "zero": np.array(0.0, np.float32),
             "sixth": np.array([1 / 6], np.float32), "w2": (R.standard_normal((8, 8, 1, 1)) * 0.5).astype(np.float32)}
    nodes = [mk("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("Add", ["c", "three"], ["a"], name="add3")]
    if form == "tf_relu6":            # Min(Max(x + 3, 0), 6), times 1/6 (constant first), times x
        nodes += [mk("Max", ["a", "zero"], ["mx"], name="max"), mk("Min", ["mx", "six"], ["cl"], name="min"),
                  mk("Mul", ["c", "cl"], ["m"], name="mul_x"), mk("Mul", ["sixth", "m"], ["hs"], name="mul6")]
    elif form == "hsig_then_x":       # x * (relu6(x + 3) / 6)
        nodes += [mk("Clip", ["a", "zero", "six"], ["cl"], name="clip"), mk("Div", ["cl", "six"], ["g"], name="div"),
                  mk("Mul", ["g", "c"], ["hs"], name="mul_x")]
    else:                             # paddle2onnx: x * Clip(x + 3, 0, 6) / 6
        nodes += [mk("Clip", ["a", "zero", "six"], ["cl"], name="clip"), mk("Mul", ["c", "cl"], ["m"], name="mul_x"),
                  mk("Div", ["m", "six"], ["hs"], name="div")]
    nodes.append(mk("Conv", ["hs", "w2"], ["y"], name="conv2", kernel_shape=[1, 1]))
    return make_model(nodes, [("x", [1, 3, 10, 12])], ["y"], inits, opset=opset)


@pytest.mark.parametrize("form,opset", [("paddle", 11), ("paddle", 13), ("tf_relu6", 13), ("hsig_then_x", 11)])
def test_hardswish_becomes_the_conv_activation(form, opset):
    out, log = legalize_and_compare(_model(form, opset))
    assert "hardswish_canonical" in [r for r, _, _ in log]
    assert op_types(out) == ["Conv", "HardSigmoid", "Mul", "Conv"]
    fused = fuse(out).model
    convs = [n for n in fused.graph.node if n.domain == mrvl_opset.DOMAIN and n.op_type == "Conv2D"]
    acts = [helper.get_attribute_value(a) for n in convs for a in n.attribute if a.name == "activation"]
    assert acts[0] in (b"hard_swish", "hard_swish") and len(convs) == 2
    assert [n.op_type for n in fused.graph.node if n.domain != mrvl_opset.DOMAIN] == []


def test_hard_sigmoid_gate_alone():
    """relu6(s + 3) / 6 as an SE gate multiplying another tensor: HardSigmoid, fused into the conv."""
    inits = {"w": (R.standard_normal((4, 4, 1, 1))).astype(np.float32), "three": np.array(3.0, np.float32),
             "six": np.array(6.0, np.float32), "zero": np.array(0.0, np.float32)}
    nodes = [mk("GlobalAveragePool", ["x"], ["p"], name="gap"),
             mk("Conv", ["p", "w"], ["s"], name="conv", kernel_shape=[1, 1]),
             mk("Add", ["three", "s"], ["a"], name="add3"), mk("Clip", ["a", "zero", "six"], ["cl"], name="clip"),
             mk("Div", ["cl", "six"], ["g"], name="div"), mk("Mul", ["x", "g"], ["y"], name="scale")]
    out, _ = legalize_and_compare(make_model(nodes, [("x", [1, 4, 6, 6])], ["y"], inits))
    assert op_types(out) == ["GlobalAveragePool", "Conv", "HardSigmoid", "Mul"]
    hs = [n for n in out.graph.node if n.op_type == "HardSigmoid"][0]
    assert {a.name: round(a.f, 6) for a in hs.attribute} == {"alpha": round(1 / 6, 6), "beta": 0.5}


@pytest.mark.parametrize("change", ["offset", "bound", "scale", "shared"])
def test_lookalikes_untouched(change):
    m = _model("paddle")
    inits = {t.name: t for t in m.graph.initializer}
    if change == "offset":
        inits["three"].float_data[:] = []
        inits["three"].CopyFrom(helper.make_tensor("three", 1, [], [2.0]))
    elif change == "bound":
        inits["six"].CopyFrom(helper.make_tensor("six", 1, [], [5.0]))
    elif change == "scale":
        m.graph.node[4].input[1] = "three"      # / 3 instead of / 6
    else:                                       # the Clip output is read by another node too
        m.graph.output.append(helper.make_tensor_value_info("cl", 1, [1, 8, 10, 12]))
    out, log = legalize_and_compare(m)
    assert "hardswish_canonical" not in [r for r, _, _ in log]
