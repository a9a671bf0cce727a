"""Legalization: Conv attributes, BatchNormalization, grouped / large-kernel / 1-D convs,
AveragePool calibration."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize_with_report
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
    convs = [n for n in out.graph.node if n.op_type == "Conv"]
    tiles = -(-k[0] // 7) * -(-k[1] // 7)
    assert len(convs) == tiles and op_types(out).count("Add") == tiles - 1
    assert all(max(attrs(c)["kernel_shape"]) <= 7 for c in convs)
    assert sum(len(c.input) == 3 for c in convs) == (1 if bias else 0)
    assert all(get_origin(n) == ["conv"] for n in out.graph.node)
    if group == 4:
        assert all(attrs(c)["group"] == 4 for c in convs)


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
    assert op_types(out) == ["Reshape", "Conv", "Slice", "Conv", "Add", "Reshape"]


@pytest.mark.parametrize("ceil", [0, 1])
@pytest.mark.parametrize("k,s,pads", [((3, 3), (2, 2), (1, 1, 1, 1)),
                                      ((3, 2), (1, 2), (1, 0, 2, 1))])
def test_avgpool_exclude_pad_calibrated(ceil, k, s, pads):
    m = make_model([mk("AveragePool", ["x"], ["y"], name="ap", kernel_shape=list(k),
                       strides=list(s), pads=list(pads), ceil_mode=ceil)],
                   [("x", [1, 2, 9, 8])], ["y"])
    out, report = legalize_with_report(m, Target(avgpool_exclude_pad=False))
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
    out2, report = legalize_with_report(m)  # default target excludes pads in hardware
    assert op_types(out2) == ["AveragePool"]
    assert any(r == "avgpool_calibrate" for r, _, _ in report.skipped)


def test_kernel_split_reads_to_the_input_end_when_the_trim_changes_no_output():
    """DS-CNN keyword spotting stem: Conv 10x4, stride 2, pads 5/1 on a 49x10 MFCC map. The first row
    tile's last window ends before row 49, but a stride-2 conv over all rows makes no extra output: no
    end-trim Slice (which used to cut the model's first layer off the accelerator region)."""
    m = make_model([mk("Conv", ["x", "w", "b"], ["y"], name="conv", kernel_shape=[10, 4], strides=[2, 2],
                       pads=[5, 1, 5, 1])],
                   [("x", [1, 1, 49, 10])], ["y"], {"w": weight(8, 1, 10, 4), "b": R.standard_normal(8).astype(np.float32)})
    out, _ = legalize_and_compare(m, Target(max_kernel=7))
    assert op_types(out) == ["Conv", "Conv", "Add"]


@pytest.mark.parametrize("k,s,pads,out_pad,group", [((2, 2), (2, 2), (0, 0, 0, 0), (0, 0), 1),    # DBNet / U-Net
                                                     ((4, 4), (2, 2), (1, 1, 1, 1), (0, 0), 1),    # GAN / FCN
                                                     ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4),    # grouped
                                                     ((3, 2), (1, 3), (0, 1, 2, 0), (0, 1), 1)])
def test_conv_transpose_becomes_resize_mask_conv(k, s, pads, out_pad, group):
    cin, cout = 4, 8
    m = make_model([mk("ConvTranspose", ["x", "w", "b"], ["y"], name="up", kernel_shape=list(k), strides=list(s),
                       pads=list(pads), output_padding=list(out_pad), group=group)],
                   [("x", [1, cin, 5, 6])], ["y"],
                   {"w": weight(cin, cout // group, *k), "b": R.standard_normal(cout).astype(np.float32)})
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Resize", "Mul", "Conv"] if group in (1, cin) else "ConvTranspose" not in op_types(out)
    assert all(get_origin(n) == ["up"] for n in out.graph.node)


@pytest.mark.parametrize("k,s,pads,out_pad", [(4, 2, (1, 1), 0), (3, 2, (1, 1), 1), (16, 8, (4, 4), 0)])
def test_conv_transpose_1d_becomes_2d_then_conv(k, s, pads, out_pad):
    """Conv-TasNet decoders / vocoder upsampling (ConvTranspose1d): lifted to 2-D by conv_1d_to_2d
    (output_padding too), then Resize + zero-insert Mul + Conv (kernels > max_kernel split)."""
    m = make_model([mk("ConvTranspose", ["x", "w", "b"], ["y"], name="up", kernel_shape=[k], strides=[s],
                       pads=list(pads), output_padding=[out_pad])],
                   [("x", [1, 4, 10])], ["y"], {"w": weight(4, 6, k), "b": R.standard_normal(6).astype(np.float32)})
    out, _ = legalize_and_compare(m)
    assert "ConvTranspose" not in op_types(out) and {"Resize", "Mul", "Conv"} <= set(op_types(out))
