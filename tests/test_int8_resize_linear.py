"""int8 bilinear Resize (segmentation and FPN decoders of QDQ models). onnxruntime keeps
DQ -> Resize(linear) -> Q in float: its fp32 bilinear of the dequantized values, then
QuantizeLinear. The int8 layer computes exactly that (sim/resize_linear.bilinear_4tap, docs/simulator.md
"int8 layers"), so the codes match bit for bit; before, the layer ran in fp16 and 16% of the
outputs of a two-conv decoder differed by up to 2 steps."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.sim.resize_linear import bilinear_4tap
from onnx_mrvl.testing import int8_zoo, qdq_variants

pytest.importorskip("onnxruntime.quantization")

MODES = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel")


def _resize_node(x, y, mode, scales=None, sizes=None):
    ins = [x, "", scales or "", sizes or ""]
    return helper.make_node("Resize", ins[:4] if sizes else ins[:3], [y], mode="linear",
                            coordinate_transformation_mode=mode, name="up")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(5, 7, 10, 14), (6, 6, 13, 9), (8, 8, 4, 6), (3, 4, 1, 1)])
def test_bilinear_4tap_is_onnxruntimes_float_resize(mode, shape):
    h, w, oh, ow = shape
    m = helper.make_model(helper.make_graph(
        [_resize_node("x", "y", mode, sizes="sizes")], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, h, w])], [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [helper.make_tensor("sizes", T.INT64, [4], [2, 3, oh, ow])]), opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(h * w + oh).standard_normal((2, 3, h, w)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = bilinear_4tap(x.transpose(0, 2, 3, 1), (oh, ow), mode).transpose(0, 3, 1, 2)
    assert np.array_equal(got, ref)


def _decoder(mode: str, scales=None, sizes=None, size: int = 16) -> onnx.ModelProto:
    """conv -> relu -> conv -> relu -> bilinear Resize -> conv (float output), seeded."""
    rng = np.random.default_rng(1)
    inits, nodes, x = [], [], "x"
    for i, (cin, cout, relu) in enumerate([(3, 8, True), (8, 16, True), (16, 4, False)]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * (2.0 / (9 * cin)) ** 0.5).astype(np.float32)
        inits += [nh.from_array(w, f"w{i}"), nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4, name=f"conv{i}"))
        x = f"c{i}"
        if relu:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
        if i == 1:
            if scales:
                inits.append(nh.from_array(np.array([1, 1, *scales], np.float32), "scales"))
            if sizes:
                inits.append(nh.from_array(np.array([1, 16, *sizes], np.int64), "sizes"))
            nodes.append(_resize_node(x, "up", mode, "scales" if scales else None, "sizes" if sizes else None))
            x = "up"
    g = helper.make_graph(nodes, "decoder", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info(x, T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


CASES = [("half_pixel", (1, 2, 2), None), ("align_corners", None, (32, 32)), ("asymmetric", (1, 2, 2), None),
         ("pytorch_half_pixel", None, (24, 40)), ("half_pixel", (1, 1.5, 0.5), None),
         ("half_pixel", (1, 16, 16), None), ("align_corners", None, (256, 128))]   # DeepLab's final x16


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("mode,scales,sizes", CASES)
def test_qdq_bilinear_resize_is_int8_and_bit_exact(tmp_path, act, mode, scales, sizes):
    float_model = _decoder(mode, scales and scales[1:], sizes)
    onnx.save(float_model, tmp_path / "f.onnx")
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(6)]
    int8_zoo.quantize_static_qdq(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), feeds, act=act)
    q = onnx.load(tmp_path / "q.onnx")
    r = qdq_variants.convert_and_compare("decoder", str(tmp_path), model=q)
    assert r["regions"] == 1 and r["cpu"] == {}, r["cpu"]
    d = r["result"].report.decisions["up"]
    assert d.placement == "accelerator" and d.precision == "int8", d
    assert r["identical"] == 1.0 and r["steps"] == 0, r
    kinds = collections.Counter(n.op_type for n in q.graph.node)
    assert kinds["Resize"] == 1 and kinds["QuantizeLinear"] >= 4


def test_own_scales_around_the_resize(tmp_path):
    """A hand-written QDQ Resize whose output scale and zero point differ from its input's."""
    rng = np.random.default_rng(3)
    wq = rng.integers(-127, 128, (4, 4, 3, 3)).astype(np.int8)
    inits = [nh.from_array(np.array(0.04, np.float32), "s"), nh.from_array(np.array(-5, np.int8), "z"),
             nh.from_array(np.array(0.03, np.float32), "s2"), nh.from_array(np.array(9, np.int8), "z2"),
             nh.from_array(np.array(0.2, np.float32), "s3"), nh.from_array(np.array(0, np.int8), "z3"),
             nh.from_array(wq, "wq"), nh.from_array(np.full(4, 0.003, np.float32), "ws"),
             nh.from_array(np.zeros(4, np.int8), "wz"), nh.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Resize", ["xd", "", "sc"], ["u"], mode="linear", name="up"),
             helper.make_node("QuantizeLinear", ["u", "s2", "z2"], ["uq"]),
             helper.make_node("DequantizeLinear", ["uq", "s2", "z2"], ["ud"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["ud", "w"], ["c"], pads=[1] * 4, name="conv"),
             helper.make_node("QuantizeLinear", ["c", "s3", "z3"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s3", "z3"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    r = qdq_variants.convert_and_compare("own_scales", str(tmp_path), model=m)
    assert r["result"].report.decisions["up"].precision == "int8"
    assert r["identical"] == 1.0, r
