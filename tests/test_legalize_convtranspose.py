"""Legalization: ConvTranspose -> per-phase stride-1 Convs interleaved by Concat and reshapes,
so decoder upsampling (PaddleOCR DB head, U-Net / CenterNet) runs on the accelerator."""
import numpy as np
import onnx
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, make_model, op_types, run

mk = helper.make_node
R = np.random.default_rng(5)


def weight(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


@pytest.mark.parametrize("k,s,pads,outpad,group,cin,cout,bias", [
    (2, 2, [0, 0, 0, 0], 0, 1, 6, 4, True),       # DB head: kernel == stride
    (2, 2, [0, 0, 0, 0], 0, 1, 6, 1, True),       # DB head's last: one output channel (not stacked)
    (4, 2, [1, 1, 1, 1], 0, 1, 5, 3, True),       # overlapping taps (decoders)
    (3, 2, [1, 1, 1, 1], 1, 1, 4, 4, False),      # output_padding
    (3, 1, [1, 1, 1, 1], 0, 1, 4, 6, True),       # stride 1: a plain Conv
    (4, 2, [1, 1, 1, 1], 0, 4, 4, 4, True),       # depthwise
    (2, 2, [0, 0, 0, 0], 0, 2, 4, 6, True),       # grouped (then split by conv_group_split)
    ((3, 2), (1, 2), [1, 0, 1, 0], 0, 1, 3, 5, True),  # anisotropic
    ((2, 3), (2, 1), [0, 1, 0, 1], 0, 1, 3, 5, True),  # (rec-style (2, 1))
])
def test_convtranspose_phases(k, s, pads, outpad, group, cin, cout, bias):
    k = (k, k) if isinstance(k, int) else k
    s = (s, s) if isinstance(s, int) else s
    inits = {"w": weight(cin, cout // group, *k)}
    ins = ["x", "w"]
    if bias:
        inits["b"] = R.standard_normal(cout).astype(np.float32)
        ins.append("b")
    kw = dict(kernel_shape=list(k), strides=list(s), pads=pads, group=group)
    if outpad:
        kw["output_padding"] = [outpad, outpad]
    m = make_model([mk("ConvTranspose", ins, ["y"], name="ct", **kw)], [("x", [1, cin, 7, 6])], ["y"], inits)
    out, log = legalize_and_compare(m)
    ops = op_types(out)
    assert "ConvTranspose" not in ops
    assert any(r == "convtranspose_phases" for r, _, _ in log)
    phases = s[0] * s[1]
    if phases == 1:
        assert ops == ["Conv"]
    else:
        # the interleave moves data only: no Resize / mask Mul / Add left
        assert not {"Resize", "Mul", "Add"} & set(ops), ops
        stacked = k[1] == s[1] and group == 1 and s[1] > 1 and cout > 1    # a row's W phases: one Conv
        convs = s[0] * (1 if stacked else s[1]) * (group if group not in (1, cin) else 1)
        assert ops.count("Conv") == convs
        w_concats = s[0] if s[1] > 1 and not stacked else 0
        split = phases if group not in (1, cin) else 0          # conv_group_split's Concats
        assert ops.count("Concat") == w_concats + (s[0] > 1) + split
        assert ops.count("Transpose") == (s[0] if s[1] > 1 else 0)     # phase axis last, per row


def paddle_db_tail(opset=14):
    """paddle2onnx's DB head tail: ConvTranspose without bias -> Add [1,C,1,1] -> BN -> Relu ->
    ConvTranspose -> Add -> Sigmoid (the graph output)."""
    c = 8
    inits = {"w1": weight(c, c, 2, 2), "b1": R.standard_normal((1, c, 1, 1)).astype(np.float32),
             "s": R.uniform(0.5, 1.5, c).astype(np.float32), "bb": R.standard_normal(c).astype(np.float32),
             "mu": R.standard_normal(c).astype(np.float32), "var": R.uniform(0.5, 1.5, c).astype(np.float32),
             "w2": weight(c, 1, 2, 2), "b2": np.array([[[[0.1]]]], np.float32),
             "wc": weight(c, 3, 3, 3)}
    nodes = [mk("Conv", ["x", "wc"], ["c0"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("Relu", ["c0"], ["r0"], name="relu0"),
             mk("ConvTranspose", ["r0", "w1"], ["t1"], name="ct1", kernel_shape=[2, 2], strides=[2, 2]),
             mk("Add", ["t1", "b1"], ["a1"], name="add1"),
             mk("BatchNormalization", ["a1", "s", "bb", "mu", "var"], ["n1"], name="bn1"),
             mk("Relu", ["n1"], ["r1"], name="relu1"),
             mk("ConvTranspose", ["r1", "w2"], ["t2"], name="ct2", kernel_shape=[2, 2], strides=[2, 2]),
             mk("Add", ["t2", "b2"], ["a2"], name="add2"),
             mk("Sigmoid", ["a2"], ["maps"], name="sigmoid")]
    m = make_model(nodes, [("x", [1, 3, 10, 12])], ["maps"], inits, opset=opset)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("maps", onnx.TensorProto.FLOAT, [1, 1, 40, 48]))
    return m


def test_db_tail_folds_bias_and_bn():
    out, log = legalize_and_compare(paddle_db_tail())
    ops = op_types(out)
    assert "ConvTranspose" not in ops and "BatchNormalization" not in ops
    details = [d for r, _, d in log if r == "convtranspose_phases"]
    assert len(details) == 2 and "3 per-channel Add/Mul/BN folded" in details[0], details


def test_db_tail_offloaded_and_matches_on_the_simulator(tmp_path):
    m = paddle_db_tail()
    res = onnx_mrvl.convert(m)
    cpu = [n.op_type for n in res.model.graph.node if n.domain != "mrvl"]
    assert cpu == [], cpu                    # ConvTranspose, BN, Relu and Sigmoid all offloaded
    assert len(res.subgraphs) == 1
    path = res.save(str(tmp_path / "db"))
    feeds = feeds_for(m)
    ref = run(m, feeds)
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        assert float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))


@pytest.mark.parametrize("kw", [dict(auto_pad="SAME_UPPER"), dict(auto_pad="SAME_LOWER"),
                                dict(output_shape=[14, 12]), dict(auto_pad="VALID", kernel_shape=[2, 2])])
def test_convtranspose_implicit_pads(kw):
    """Keras / tf2onnx 'same' transposed convs (4x4/s2: total padding 2, split evenly)."""
    kw = {"kernel_shape": [4, 4], "strides": [2, 2], **kw}
    m = make_model([mk("ConvTranspose", ["x", "w"], ["y"], name="ct", **kw)], [("x", [1, 4, 7, 6])], ["y"],
                   {"w": weight(4, 3, *kw["kernel_shape"])})
    out, _ = legalize_and_compare(m)
    assert "ConvTranspose" not in op_types(out)


@pytest.mark.parametrize("kw,reason", [
    (dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2]), "dilated"),
    (dict(kernel_shape=[1, 1], strides=[2, 2], output_padding=[1, 1]), "kernel smaller than the stride"),
    (dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), "not a multiple of the stride"),
    (dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), "implicit pads"),   # odd total
])
def test_convtranspose_phases_declines_with_reason(kw, reason):
    """What the phase decomposition declines it names; the zero-insertion fallback
    (``convtranspose_to_conv``) takes it when it can, else the ConvTranspose stays (CPU)."""
    m = make_model([mk("ConvTranspose", ["x", "w"], ["y"], name="ct", **kw)], [("x", [1, 4, 7, 6])], ["y"],
                   {"w": weight(4, 4, *kw["kernel_shape"])})
    res = legalize(m)
    out, report = res.model, res.report
    if "ConvTranspose" in op_types(out):
        assert any(r == "convtranspose_phases" and reason in why for r, _, why in report.skipped), report.skipped
    else:
        assert [r for r, _, _ in report.applied] == ["convtranspose_to_conv"], report.applied
        assert op_types(out) == ["Resize", "Mul", "Conv"]
    if "output_shape" not in kw:
        legalize_and_compare(m)
