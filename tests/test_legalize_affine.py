"""Legalization: per-channel / scalar Mul and Add constants before an unpadded Conv fold into it
(affine_into_conv): learnable affine blocks after an activation (PP-LCNetV3, PP-HGNetV2) and a BN
after an activation."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types

mk = helper.make_node
R = np.random.default_rng(13)


def _model(form, k=1, pads=(0, 0, 0, 0), group=1, stride=1):
    c = 6
    o = 6 if group == 6 else 8
    inits = {"w0": (R.standard_normal((c, 3, 3, 3)) * 0.5).astype(np.float32),
             "w1": (R.standard_normal((o, c // group, k, k)) * 0.5).astype(np.float32),
             "b1": R.standard_normal(o).astype(np.float32)}
    nodes = [mk("Conv", ["x", "w0"], ["c0"], name="conv0", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("HardSwish", ["c0"], ["h"], name="act")]
    if form == "lab":                      # scalar scale [1] and bias [1], constant first in the Add
        inits.update(s=np.array([1.3], np.float32), t=np.array([-0.2], np.float32))
        nodes += [mk("Mul", ["h", "s"], ["m"], name="lab_mul"), mk("Add", ["t", "m"], ["a"], name="lab_add")]
    else:                                  # BN after the activation
        inits.update(g=R.uniform(0.5, 1.5, c).astype(np.float32), be=R.standard_normal(c).astype(np.float32),
                     mu=R.standard_normal(c).astype(np.float32), var=R.uniform(0.5, 1.5, c).astype(np.float32))
        nodes.append(mk("BatchNormalization", ["h", "g", "be", "mu", "var"], ["a"], name="bn"))
    nodes.append(mk("Conv", ["a", "w1", "b1"], ["y"], name="conv1", kernel_shape=[k, k], pads=list(pads),
                    group=group, strides=[stride, stride]))
    return make_model(nodes, [("x", [1, 3, 10, 12])], ["y"], inits, opset=14), o


@pytest.mark.parametrize("form", ["lab", "bn"])
@pytest.mark.parametrize("k,group,stride", [(1, 1, 1), (3, 1, 1), (1, 2, 2), (2, 6, 2)])
def test_affine_folds_into_unpadded_conv(form, k, group, stride):
    m, _ = _model(form, k=k, group=group, stride=stride)
    out, log = legalize_and_compare(m)
    ops = op_types(out)
    assert ops[:3] == ["Conv", "HardSwish", "Conv" if group != 2 else "Split"]
    assert not {"Mul", "Add", "BatchNormalization"} & set(ops)
    assert "affine_into_conv" in [r for r, _, _ in log]


def test_padded_conv_keeps_the_affine():
    m, _ = _model("lab", k=3, pads=(1, 1, 1, 1))
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv", "HardSwish", "Mul", "Add", "Conv"]
    assert "affine_into_conv" not in [r for r, _, _ in log]


def test_affine_read_twice_is_kept():
    m, _ = _model("lab")
    m.graph.output.append(helper.make_tensor_value_info("a", 1, [1, 6, 10, 12]))
    res = legalize(m)
    out, report = res.model, res.report
    assert "Mul" in op_types(out) and "Add" in op_types(out)
