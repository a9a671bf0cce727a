"""Legalization: paddle2onnx's pad3d form (Unsqueeze -> 5-D Pad -> Squeeze) collapses to a 4-D Pad
(pad_unit_axes), and a Pad no consumer can absorb becomes a depthwise 1x1 Conv (pad_to_conv), so
the PP-HGNetV2 stem (one Pad feeding a Conv and a ceil-mode MaxPool) stays on the accelerator."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, make_model, op_types, run

mk = helper.make_node
R = np.random.default_rng(7)


def _squeeze(op, x, y, name, opset, inits):
    if opset >= 13:
        inits[f"{name}_axes"] = np.array([2], np.int64)
        return mk(op, [x, f"{name}_axes"], [y], name=name)
    return mk(op, [x], [y], name=name, axes=[2])


def hgnet_stem(opset=13, pad5=(0, 0, 0, 0, 0, 0, 0, 0, 1, 1)):
    """Conv-Relu -> LAB (x*a+b, may be negative) -> pad3d (0,1,0,1) -> {Conv 2x2, MaxPool 2x2 s1 ceil}
    -> Concat."""
    inits = {"w0": (R.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
             "a": np.array([1.1], np.float32), "b": np.array([-0.3], np.float32),
             "w1": (R.standard_normal((8, 8, 2, 2)) * 0.3).astype(np.float32),
             "pads": np.array(pad5, np.int64), "v": np.array(0.0, np.float32)}
    nodes = [mk("Conv", ["x", "w0"], ["c0"], name="stem1", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                strides=[2, 2]),
             mk("Relu", ["c0"], ["r0"], name="relu0"), mk("Mul", ["r0", "a"], ["m0"], name="lab_mul"),
             mk("Add", ["m0", "b"], ["l0"], name="lab_add"),
             _squeeze("Unsqueeze", "l0", "u0", "unsq", opset, inits),
             mk("Pad", ["u0", "pads", "v"], ["p5"], name="pad3d", mode="constant"),
             _squeeze("Squeeze", "p5", "p0", "sq", opset, inits),
             mk("Conv", ["p0", "w1"], ["c1"], name="stem2a", kernel_shape=[2, 2]),
             mk("MaxPool", ["p0"], ["mp"], name="pool", kernel_shape=[2, 2], strides=[1, 1], ceil_mode=1),
             mk("Concat", ["mp", "c1"], ["y"], name="cat", axis=1)]
    return make_model(nodes, [("x", [1, 3, 16, 20])], ["y"], inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
def test_pad3d_collapses_and_becomes_a_conv(opset):
    out, log = legalize_and_compare(hgnet_stem(opset))
    rules = [r for r, _, _ in log]
    assert "pad_unit_axes" in rules and "pad_to_conv" in rules
    ops = op_types(out)
    assert "Pad" not in ops and "Reshape" not in ops
    dw = [n for n in out.graph.node if n.name == "pad3d"][0]
    at = {a.name: helper.get_attribute_value(a) for a in dw.attribute}
    assert dw.op_type == "Conv" and at["group"] == 8 and at["kernel_shape"] == [1, 1]
    assert at["pads"] == [0, 0, 1, 1]


def test_pad3d_feeding_one_conv_folds():
    m = hgnet_stem()
    g = m.graph
    keep = [n for n in g.node if n.name not in ("pool", "cat")]
    del g.node[:]
    g.node.extend(keep)
    g.output[0].name = "c1"
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv", "Relu", "Mul", "Add", "Conv"]
    assert [r for r, _, _ in log if r.startswith("pad")] == ["pad_unit_axes", "pad_fold"]


def test_pad_on_an_inserted_axis_is_kept():
    m = hgnet_stem(pad5=(0, 0, 1, 0, 0, 0, 0, 0, 0, 0))   # pads the unit axis: not a 4-D pad
    m.graph.node.remove([n for n in m.graph.node if n.name == "sq"][0])
    m.graph.node.remove([n for n in m.graph.node if n.name == "stem2a"][0])
    m.graph.node.remove([n for n in m.graph.node if n.name == "pool"][0])
    m.graph.node.remove([n for n in m.graph.node if n.name == "cat"][0])
    m.graph.node.append(mk("Squeeze", ["p5", "sq_axes"], ["y"], name="sq", ))
    m.graph.node[-1].input[1] = "sq_axes"
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "sq_axes"))
    res = legalize(m)
    out, report = res.model, res.report
    assert "Pad" in op_types(out)
    assert any(r == "pad_unit_axes" and "inserted unit axis" in why for r, _, why in report.skipped)


def test_hgnet_stem_on_the_simulator(tmp_path):
    m = hgnet_stem()
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 16, 8, 10]))
    res = onnx_mrvl.convert(m)
    cpu = [n.op_type for n in res.model.graph.node if n.domain != "mrvl"]
    assert cpu == [] and len(res.subgraphs) == 1, cpu
    path = res.save(str(tmp_path / "stem"))
    feeds = feeds_for(m)
    ref = run(m, feeds)
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    assert float(np.max(np.abs(ref[0] - got[0]))) <= 1e-2 * float(np.max(np.abs(ref[0])))


def _pad_conv_model(mode, pads, shape=(1, 4, 12, 10), opset=13, kernel=3):
    """Conv -> Pad(mode, pads) -> Conv (no conv padding): the CQT / ReflectionPad2d pattern."""
    c = shape[1]
    inits = {"w0": (R.standard_normal((c, shape[1], 1, 1)) * 0.5).astype(np.float32),
             "w1": (R.standard_normal((6, c, kernel, kernel)) * 0.3).astype(np.float32),
             "pads": np.array(pads, np.int64)}
    nodes = [mk("Conv", ["x", "w0"], ["c0"], name="conv0", kernel_shape=[1, 1]),
             mk("Pad", ["c0", "pads"], ["p"], name="pad", mode=mode),
             mk("Conv", ["p", "w1"], ["y"], name="conv1", kernel_shape=[kernel, kernel])]
    return make_model(nodes, [("x", list(shape))], ["y"], inits, opset=opset)


def _on_simulator(m, tmp_path, regions=1):
    res = onnx_mrvl.convert(m)
    cpu = [n.op_type for n in res.model.graph.node if n.domain != "mrvl"]
    assert cpu == [] and len(res.subgraphs) == regions, cpu
    path = res.save(str(tmp_path / "m"))
    feeds = feeds_for(m)
    ref = run(m, feeds)
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    assert float(np.max(np.abs(ref[0] - got[0]))) <= 1e-2 * float(np.max(np.abs(ref[0])))


@pytest.mark.parametrize("mode,pads", [("reflect", [0, 0, 2, 1, 0, 0, 1, 3]), ("edge", [0, 0, 0, 4, 0, 0, 0, 2]),
                                       ("reflect", [0, 0, 11, 0, 0, 0, 0, 9])])
def test_reflect_and_edge_pads_become_gathers(mode, pads, tmp_path):
    m = _pad_conv_model(mode, pads)
    out, log = legalize_and_compare(m)
    assert "pad_reflect_gather" in [r for r, _, _ in log]
    ops = op_types(out)
    assert "Pad" not in ops and "GatherElements" in ops and "Concat" in ops
    _on_simulator(m, tmp_path)


def test_reflect_pad_wider_than_its_axis_stays():
    """An invalid model (onnxruntime refuses it too): the rule leaves it alone."""
    res = legalize(_pad_conv_model("reflect", [0, 0, 12, 0, 0, 0, 0, 0]))
    assert "pad_reflect_gather" not in [r for r, _, _ in res.log] and "Pad" in op_types(res.model)


@pytest.mark.parametrize("shape,form", [((1, 4, 12, 10), "concat"), ((1, 64, 48, 40), "convs")])
def test_wide_zero_pad_becomes_a_concat_or_a_conv_chain(shape, form, tmp_path):
    """A zero pad of 20 > max_pad (7) per side: one Concat with constant zero blocks (pad_concat; was
    3 depthwise convs of at most 7 each); on a map whose zero blocks exceed pad_concat.MAX_BLOCK
    elements (64 x 48 x 20 = 61440 on W, 64 x 20 x 80 = 102400 on H) the 3 depthwise convs."""
    m = _pad_conv_model("constant", [0, 0, 20, 20, 0, 0, 20, 20], shape=shape)
    # a second reader keeps pad_fold from folding it into the conv
    m.graph.node.append(mk("Relu", ["p"], ["r"], name="relu"))
    m.graph.output.append(helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, None))
    out, log = legalize_and_compare(m)
    assert "Pad" not in op_types(out)
    chain = [n for n in out.graph.node if n.name.startswith("pad")]
    if form == "concat":
        assert [n.op_type for n in chain] == ["Concat", "Concat"]   # W, then H
        inits = {i.name: i for i in out.graph.initializer}
        zeros = [numpy_helper.to_array(inits[t]) for n in chain for t in n.input if t in inits]
        assert len(zeros) == 4 and all(not z.any() for z in zeros)
    else:
        assert len(chain) == 3 and all(n.op_type == "Conv" for n in chain)
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1
    feeds = feeds_for(m)
    ref = run(m, feeds)
    path = res.save(str(tmp_path / "m"))
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    for a, b in zip(ref, got):
        assert float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))


def test_pad_before_a_split_long_kernel_runs_on_the_accelerator(tmp_path):
    """Reshape (1-D signal to 4-D) -> zero pad of 11 / 12 -> a 1x24 kernel, which conv_kernel_split
    tiles, each tile reading a Slice of the padded input (basic-pitch's constant-Q convs): the Pad
    has no accelerator op beside it but the convs behind the Slices, and becomes a conv chain."""
    inits = {"pads": np.array([0, 11, 0, 0, 12, 0], np.int64), "ax": np.array([2], np.int64),
             "w1": (R.standard_normal((6, 2, 1, 24)) * 0.3).astype(np.float32)}
    nodes = [mk("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),   # tf2onnx: NWC
             mk("Transpose", ["p"], ["t"], name="to_ncw", perm=[0, 2, 1]),
             mk("Unsqueeze", ["t", "ax"], ["u"], name="to_nchw"),
             mk("Conv", ["u", "w1"], ["y"], name="conv1", kernel_shape=[1, 24], strides=[1, 2])]
    m = make_model(nodes, [("x", [1, 64, 2])], ["y"], inits, opset=13)
    out, log = legalize_and_compare(m)
    assert "Pad" not in op_types(out), [r for r, _, _ in log]
    _on_simulator_all(m, tmp_path)


def _on_simulator_all(m, tmp_path):
    res = onnx_mrvl.convert(m)
    cpu = [n.op_type for n in res.model.graph.node if n.domain != "mrvl"]
    assert "Pad" not in cpu and len(res.subgraphs) == 1, cpu
    path = res.save(str(tmp_path / "m"))
    feeds = feeds_for(m)
    ref = run(m, feeds)
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    for a, b in zip(ref, got):
        assert float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))
