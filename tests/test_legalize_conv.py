"""Legalization: Conv attributes, BatchNormalization, grouped / large-kernel / 1-D convs,
AveragePool calibration."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.provenance import get_origin
from onnx_mrvl.target import Target

mk = helper.make_node
R = np.random.default_rng(3)


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def weight(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool"])
@pytest.mark.parametrize("auto,stride", [("SAME_UPPER", 2), ("SAME_LOWER", 2), ("VALID", 2),
                                         ("SAME_UPPER", 1), ("SAME_LOWER", 3)])
def test_auto_pad_resolved(op, auto, stride):
    inits, ins = {}, ["x"]
    kw = dict(auto_pad=auto, strides=[stride, stride])
    if op == "Conv":
        inits["w"] = weight(4, 3, 4, 3)
        ins.append("w")
    else:
        kw["kernel_shape"] = [4, 3]
    m = make_model([mk(op, ins, ["y"], name="n", **kw)], [("x", [1, 3, 11, 10])], ["y"], inits)
    out, log = legalize_and_compare(m)
    a = attrs(out.graph.node[0])
    assert "auto_pad" not in a
    assert {"kernel_shape", "strides", "pads"} <= set(a)
    if op == "Conv":
        assert a["dilations"] == [1, 1] and a["kernel_shape"] == [4, 3]


def test_conv_bn_folded():
    w, b = weight(6, 3, 3, 3), R.standard_normal(6).astype(np.float32)
    bn = {"s": R.uniform(0.5, 1.5, 6), "bb": R.standard_normal(6), "mu": R.standard_normal(6),
          "var": R.uniform(0.5, 1.5, 6)}
    inits = {"w": w, "b": b, **{k: v.astype(np.float32) for k, v in bn.items()}}
    m = make_model([mk("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                    mk("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], name="bn",
                       epsilon=1e-3)], [("x", [2, 3, 8, 8])], ["y"], inits)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv"] and len(out.graph.node[0].input) == 3
    assert out.graph.node[0].name == "conv"
    assert get_origin(out.graph.node[0]) == ["bn", "conv"]


def test_conv_without_bias_bn_folded_and_shared_conv_not():
    w = weight(4, 3, 1, 1)
    p = {k: R.uniform(0.5, 1.5, 4).astype(np.float32) for k in ("s", "bb", "mu", "var")}
    m = make_model([mk("Conv", ["x", "w"], ["c"], name="conv"),
                    mk("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], name="bn"),
                    mk("Relu", ["c"], ["z"], name="relu")],
                   [("x", [1, 3, 4, 4])], ["y", "z"], {"w": w, **p})
    out, log = legalize_and_compare(m)
    # the Conv output is also read by Relu: the BN becomes Mul + Add instead
    assert sorted(op_types(out)) == ["Add", "Conv", "Mul", "Relu"]
    m2 = make_model([mk("Conv", ["x", "w"], ["c"], name="conv"),
                     mk("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["y"], name="bn")],
                    [("x", [1, 3, 4, 4])], ["y"], {"w": w, **p}, opset=9)
    out2, _ = legalize_and_compare(m2)
    assert op_types(out2) == ["Conv"] and len(out2.graph.node[0].input) == 3


@pytest.mark.parametrize("rank", [2, 4])
def test_standalone_bn_to_mul_add(rank):
    c = 5
    p = {"s": R.uniform(0.5, 1.5, c), "bb": R.standard_normal(c), "mu": R.standard_normal(c),
         "var": R.uniform(0.5, 1.5, c)}
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("BatchNormalization", ["r", "s", "bb", "mu", "var"], ["y"], name="bn")],
                   [("x", [2, c] + [4, 3][:rank - 2])], ["y"],
                   {k: v.astype(np.float32) for k, v in p.items()})
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Relu", "Mul", "Add"]
    consts = {t.name: t for t in out.graph.initializer}
    assert list(consts[out.graph.node[1].input[1]].dims) == [c] + [1] * (rank - 2)
    assert all(get_origin(n) == ["bn"] for n in out.graph.node[1:])


@pytest.mark.parametrize("group,cin,cout,split", [(2, 4, 6, True), (4, 4, 8, False),
                                                  (3, 6, 3, True), (1, 4, 4, False)])
def test_grouped_conv(group, cin, cout, split):
    w, b = weight(cout, cin // group, 3, 3), R.standard_normal(cout).astype(np.float32)
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="conv", group=group,
                       pads=[1, 1, 1, 1], strides=[2, 1])], [("x", [1, cin, 7, 6])], ["y"],
                   {"w": w, "b": b})
    out, _ = legalize_and_compare(m)
    if split:
        assert op_types(out) == ["Split"] + ["Conv"] * group + ["Concat"]
        assert all("group" not in attrs(n) for n in out.graph.node if n.op_type == "Conv")
    else:  # group 1 and depthwise (group == C_in) stay
        assert op_types(out) == ["Conv"]


@pytest.mark.parametrize("k,stride,pad,dil,group,bias", [
    ((11, 11), 4, (0, 0, 0, 0), 1, 1, True), ((9, 5), 1, (4, 2, 4, 2), 1, 1, True),
    ((8, 8), 2, (3, 3, 4, 4), 1, 1, False), ((9, 9), 1, (8, 8, 8, 8), 2, 1, True),
    ((15, 3), 1, (7, 1, 7, 1), 1, 4, True), ((1, 13), 1, (0, 6, 0, 6), 1, 1, False)])
def test_large_kernel_split(k, stride, pad, dil, group, bias):
    cin, cout = 4, 6 if group == 1 else 4
    inits = {"w": weight(cout, cin // group, *k)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = R.standard_normal(cout).astype(np.float32)
        ins.append("b")
    m = make_model([mk("Conv", ins, ["y"], name="conv", kernel_shape=list(k),
                       strides=[stride, stride], pads=list(pad), dilations=[dil, dil],
                       group=group)], [("x", [1, cin, 23, 21])], ["y"], inits)
    out, log = legalize_and_compare(m, Target(max_kernel=7))
    # crop_to_conv turns the tiles' crop Slices ("conv/sliceK") into one-tap depthwise Convs, and
    # pad_to_conv the Pads of a tile whose pads exceed max_pad ("conv/padK": dilation 2, pads 8)
    convs = [n for n in out.graph.node if n.op_type == "Conv" and "/slice" not in n.name and "/pad" not in n.name]
    assert all(max(attrs(c)["pads"]) <= 7 for c in convs)
    tiles = -(-k[0] // 7) * -(-k[1] // 7)
    assert len(convs) == tiles and op_types(out).count("Add") == tiles - 1
    assert all(max(attrs(c)["kernel_shape"]) <= 7 for c in convs)
    assert sum(len(c.input) == 3 for c in convs) == (1 if bias else 0)
    assert all(get_origin(n) == ["conv"] for n in out.graph.node)
    if group == 4:
        assert all(attrs(c)["group"] == 4 for c in convs)


@pytest.mark.parametrize("k,stride,pads,size", [
    ((10, 4), 2, (4, 1, 5, 1), (49, 40)),     # KWS DS-CNN first conv (TF 'same')
    ((9, 9), 1, (4, 4, 4, 4), (20, 20)), ((8, 3), 1, (3, 1, 4, 1), (30, 12))])
def test_large_kernel_split_needs_no_slice(k, stride, pads, size):
    """Zero taps stretch a tile to the image edge instead of a (CPU) spatial Slice; an end cut
    that changes no output is dropped."""
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=list(k),
                       strides=[stride, stride], pads=list(pads))], [("x", [1, 2, *size])], ["y"],
                   {"w": weight(8, 2, *k), "b": R.standard_normal(8).astype(np.float32)})
    out, _ = legalize_and_compare(m, Target(max_kernel=7))
    assert "Slice" not in op_types(out)
    assert all(max(attrs(c)["kernel_shape"]) <= 7 for c in out.graph.node if c.op_type == "Conv")


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool"])
def test_1d_to_2d(op):
    inits, ins = {}, ["x"]
    kw = dict(strides=[2], pads=[1, 2])
    if op == "Conv":
        inits = {"w": weight(5, 3, 4), "b": R.standard_normal(5).astype(np.float32)}
        ins += ["w", "b"]
        kw["dilations"] = [2]
    else:
        kw["kernel_shape"] = [3]
    m = make_model([mk(op, ins, ["y"], name="n", **kw)], [("x", [2, 3, 17])], ["y"], inits)
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", op, "Reshape"]
    a = attrs(out.graph.node[1])
    assert a["pads"] == [0, 1, 0, 2] and a["strides"] == [1, 2]
    assert len(out.graph.value_info) >= 2


def test_1d_conv_auto_pad_and_large_kernel():
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="n", auto_pad="SAME_UPPER")],
                   [("x", [1, 2, 40])], ["y"], {"w": weight(3, 2, 9)})
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Conv", "Conv", "Add", "Reshape"]   # zero tap, no Slice


@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("k,s,pads", [((3, 3), (2, 2), (1, 1, 1, 1)),
                                      ((3, 2), (1, 2), (1, 0, 2, 1))])
def test_avgpool_exclude_pad_calibrated(ceil, k, s, pads):
    m = make_model([mk("AveragePool", ["x"], ["y"], name="ap", kernel_shape=list(k),
                       strides=list(s), pads=list(pads), ceil_mode=ceil)],
                   [("x", [1, 2, 9, 8])], ["y"])
    res = legalize(m, Target(avgpool_exclude_pad=False))
    out, report = res.model, res.report
    if ceil and k == (3, 2):
        # ONNX shape inference says W=5, onnxruntime computes 4: left alone, with the reason
        assert op_types(out) == ["AveragePool"]
        assert any("ceil_mode" in why for _, _, why in report.skipped)
        return
    out, _ = legalize_and_compare(m, Target(avgpool_exclude_pad=False))
    assert op_types(out) == ["AveragePool", "Mul"]
    assert attrs(out.graph.node[0])["count_include_pad"] == 1
    assert attrs(out.graph.node[0]).get("ceil_mode", 0) == ceil
    assert all(get_origin(n) == ["ap"] for n in out.graph.node)
    res = legalize(m)  # default target excludes pads in hardware
    out2, report = res.model, res.report
    assert op_types(out2) == ["AveragePool"]
    assert any(r == "avgpool_calibrate" for r, _, _ in report.skipped)


@pytest.mark.parametrize("hw,k,d,s,pads,want", [
    ((10, 10), 3, 12, 1, [12] * 4, [1, 1]),          # ASPP rate past the map: centre tap only
    ((20, 20), 3, 24, 1, [24] * 4, [1, 1]),
    ((9, 20), 3, 12, 1, [12] * 4, [1, 5]),           # taps live along W only (then conv_dilation_fold: 5 at 6)
    ((9, 7), 3, 6, 2, [6, 0, 0, 6], [2, 2]),         # stride, one-sided padding: 2 taps per axis
])
def test_conv_taps_reading_only_padding_dropped(hw, k, d, s, pads, want):
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[k, k], pads=pads,
                       dilations=[d, d], strides=[s, s])], [("x", [1, 4, *hw])], ["y"],
                   {"w": weight(6, 4, k, k), "b": R.standard_normal(6).astype(np.float32)})
    out, log = legalize_and_compare(m)
    conv = next(n for n in out.graph.node if n.name == "conv")   # (pad_to_conv adds Convs before it)
    a = attrs(conv)
    assert a["kernel_shape"] == want and min(a["pads"]) >= 0
    assert all(dd == 1 for dd, kk in zip(a["dilations"], want) if kk == 1)
    assert any(r == "conv_dead_taps" for r, _, _ in log)


def test_conv_with_every_tap_live_keeps_its_kernel():
    m = make_model([mk("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[12] * 4,
                       dilations=[12, 12])], [("x", [1, 4, 20, 20])], ["y"], {"w": weight(6, 4, 3, 3)})
    out, log = legalize_and_compare(m)
    conv = next(n for n in out.graph.node if n.name == "conv")
    # every tap live: conv_dead_taps keeps the 3 taps; conv_dilation_fold puts them on a 5x5 kernel at 6
    assert attrs(conv)["kernel_shape"] == [5, 5] and attrs(conv)["dilations"] == [6, 6]
    assert not any(r == "conv_dead_taps" for r, _, _ in log)


def test_kernel_split_reads_to_the_input_end_when_the_trim_changes_no_output():
    """DS-CNN keyword spotting stem: Conv 10x4, stride 2, pads 5/1 on a 49x10 MFCC map. The first row
    tile's last window ends before row 49, but a stride-2 conv over all rows makes no extra output: no
    end-trim Slice (which used to cut the model's first layer off the accelerator region)."""
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[10, 4], strides=[2, 2],
                       pads=[5, 1, 5, 1])],
                   [("x", [1, 1, 49, 10])], ["y"], {"w": weight(8, 1, 10, 4), "b": R.standard_normal(8).astype(np.float32)})
    out, _ = legalize_and_compare(m, Target(max_kernel=7))
    assert op_types(out) == ["Conv", "Conv", "Add"]


@pytest.mark.parametrize("cin,cout,k,s,pads,extra", [
    (4, 6, 2, 2, [0, 0, 0, 0], {}),                                   # Keras k2 s2 'same' (UNet)
    (4, 6, 3, 2, [0, 0, 1, 1], {}),                                   # Keras k3 s2 'same'
    (4, 6, 4, 2, [1, 1, 1, 1], {}),                                   # PyTorch k4 s2 p1
    (4, 6, 3, 2, [0, 0, 0, 0], {}),                                   # Keras 'valid'
    (4, 6, 3, 1, [1, 1, 1, 1], {}),                                   # stride 1
    (4, 5, 3, 2, [1, 1, 1, 1], {"output_padding": [1, 1]}),           # PyTorch output_padding
    (6, 4, 3, 2, [1, 0, 1, 0], {"group": 2}),                         # grouped
    (6, 6, 3, 2, [1, 1, 1, 1], {"group": 6, "output_padding": [1, 0]}),  # depthwise
    (4, 6, 3, 2, [2, 2, 2, 2], {"dilations": [2, 2]}),
    (4, 6, [3, 4], [2, 3], [1, 0, 0, 0], {}),                         # per-axis kernel and stride
    (4, 6, 4, 2, None, {"auto_pad": "SAME_UPPER"}),                   # even total padding
    (4, 6, 4, 2, None, {"output_shape": [18, 18]}),
])
def test_convtranspose_becomes_resize_mask_conv(cin, cout, k, s, pads, extra):
    k = [k, k] if isinstance(k, int) else k
    s = [s, s] if isinstance(s, int) else s
    group = extra.get("group", 1)
    inits = {"w": weight(cin, cout // group, *k), "b": R.standard_normal(cout).astype(np.float32)}
    kw = dict(kernel_shape=k, strides=s, **extra)
    if pads is not None:
        kw["pads"] = pads
    m = make_model([mk("ConvTranspose", ["x", "w", "b"], ["y"], name="up", **kw),
                    mk("Relu", ["y"], ["z"], name="relu")], [("x", [1, cin, 9, 9])], ["z"], inits)
    out, log = legalize_and_compare(m)
    rules = [r for r, _, _ in log if r in ("convtranspose_phases", "convtranspose_to_conv")]
    assert rules, log
    ops = op_types(out)
    assert "ConvTranspose" not in ops and "Conv" in ops
    # zero insertion is a Resize + mask; the phases are interleaved by Concat + reshapes
    assert ("Resize" in ops) == (rules == ["convtranspose_to_conv"] and s != [1, 1])
    if group == 1:                                 # (conv_group_split adds Concats of its own)
        assert ("Concat" in ops) == (rules == ["convtranspose_phases"] and s != [1, 1])
    conv = next(n for n in out.graph.node if n.op_type == "Conv")
    assert attrs(conv)["strides"] == [1, 1] and get_origin(conv)[0] == "up"


@pytest.mark.parametrize("kw,reason", [
    (dict(kernel_shape=[1, 1], strides=[2, 2], pads=[1, 1, 1, 1]), "crops"),
    (dict(kernel_shape=[3, 3], strides=[2, 2], output_shape=[18, 18]), "odd"),
    (dict(kernel_shape=[9, 9], strides=[1, 1]), "max_pad"),
])
def test_convtranspose_left_alone(kw, reason):
    k = kw["kernel_shape"]
    m = make_model([mk("ConvTranspose", ["x", "w"], ["y"], name="up", **kw)],
                   [("x", [1, 4, 9, 9])], ["y"], {"w": weight(4, 3, *k)})
    res = legalize(m)
    out, report = res.model, res.report
    assert "ConvTranspose" in op_types(out)
    why = [r for rule, n, r in report.skipped if rule == "convtranspose_to_conv"]
    assert why and reason in why[0], report.skipped


@pytest.mark.parametrize("k,s,pads,out_pad", [(4, 2, (1, 1), 0), (3, 2, (1, 1), 1), (16, 8, (4, 4), 0)])
def test_conv_transpose_1d_becomes_2d_then_conv(k, s, pads, out_pad):
    """Conv-TasNet decoders / vocoder upsampling (ConvTranspose1d): lifted to 2-D by conv_1d_to_2d
    (output_padding too), then phase Convs + Concat (or Resize + zero-insert Mul + Conv) (kernels > max_kernel split)."""
    m = make_model([mk("ConvTranspose", ["x", "w", "b"], ["y"], name="up", kernel_shape=[k], strides=[s],
                       pads=list(pads), output_padding=[out_pad])],
                   [("x", [1, 4, 10])], ["y"], {"w": weight(4, 6, k), "b": R.standard_normal(6).astype(np.float32)})
    out, _ = legalize_and_compare(m)
    ops = set(op_types(out))
    assert "ConvTranspose" not in ops and "Conv" in ops and ops & {"Resize", "Concat"}
