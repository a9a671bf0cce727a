"""onnxruntime's U8S8 kernels on x86 without VNNI clamp adjacent-K product pairs to int16 (sim/mlas_u8s8.py):
the int8 Conv2D / FC follow them there, so a QDQ model with full-range weights and large activation
codes (an image input at scale 1/255, INC's default) gives onnxruntime's own codes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper as oh, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.sim import mlas_u8s8
from tests.test_int8_qdq import _int8_layers

quantization = pytest.importorskip("onnxruntime.quantization")


def test_deficit_is_the_int16_clamp_of_adjacent_pairs():
    cols = np.array([[255, 255, 255, 0, 10]], np.float64)       # uint8 codes, zero point 0; K odd
    kernel = np.array([[127], [127], [-128], [-128], [127]], np.float64)
    d = mlas_u8s8.deficit(cols, kernel, 0, None)
    # pairs (0, 1): 64770 -> 32767; (2, 3): -32640 fits; (4, pad): 1270 fits
    assert d.tolist() == [[32767.0 - 64770.0]]
    # int8 codes (x - z = -1, z = -128 -> raw 127 + 128 = 255 ...): raw = cols + raw zero point
    assert mlas_u8s8.raw_zero_point("int8", -128) == 0 and mlas_u8s8.raw_zero_point("uint8", 7) == 7
    d = mlas_u8s8.deficit(cols - 255, kernel, 255, np.array([1]))   # weights' raw codes kernel + 1
    assert d.tolist() == [[32767.0 - 255 * 128 * 2]]


def _conv_model(seed: int, c: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1, (8, c, 3, 3)).astype(np.float32)
    g = oh.make_graph([oh.make_node("Conv", ["x", "w", "b"], ["h"], pads=[1, 1, 1, 1], strides=[2, 2]),
                       oh.make_node("Relu", ["h"], ["r"]),
                       oh.make_node("Conv", ["r", "w2"], ["y"])], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 16, 16])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                      [nh.from_array(w, "w"), nh.from_array(rng.normal(0, 1, 8).astype(np.float32), "b"),
                       nh.from_array(rng.normal(0, 1, (4, 8, 1, 1)).astype(np.float32), "w2")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])


class _Images(quantization.CalibrationDataReader):
    def __init__(self, c: int):
        rng = np.random.default_rng(1)
        self.it = iter([{"x": rng.uniform(0, 1, (1, c, 16, 16)).astype(np.float32)} for _ in range(4)])

    def get_next(self):
        return next(self.it, None)


@pytest.mark.parametrize("c,act,fmt", [(3, "u8", "qdq"), (8, "s8", "qdq"), (16, "u8", "qdq"), (8, "s8", "qop"),
                                        (8, "u8", "qop")])
def test_u8s8_convs_match_onnxruntime_on_this_machine(tmp_path, c, act, fmt):
    """3 input channels: MLAS's im2col QGEMM (pairs across kernel positions); 8 / 16: its ConvSym kernel.
    Per-tensor int8 weights (full range), activations at scale ~1/255 (uint8, or int8 after onnxruntime's
    S8 -> U8 rewrite): on a machine without VNNI several percent of the codes saturate. A QOperator
    S8S8 model's QLinearConv sums exactly (MLAS's S8S8 kernel): its layers carry ``int8_sums`` exact."""
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(_conv_model(c, c), src)
    t = quantization.QuantType
    fmt_ = quantization.QuantFormat.QDQ if fmt == "qdq" else quantization.QuantFormat.QOperator
    quantization.quantize_static(src, dst, _Images(c), quant_format=fmt_,
                                 activation_type=t.QUInt8 if act == "u8" else t.QInt8, weight_type=t.QInt8)
    r = onnx_mrvl.convert(dst)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    r.save(str(tmp_path / "out"))
    sums = [n["attrs"].get("int8_sums") for n in _int8_layers(str(tmp_path / "out"))]
    assert len(sums) == 2 and sums == [["exact"]] * 2 if (fmt, act) == ("qop", "s8") else [None] * 2
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    so = ort.SessionOptions()
    ref = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    exact = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])   # QDQ: float convs, no clamp
    q = onnx.load(dst)
    scale = float(nh.to_array(next(i for i in q.graph.initializer if i.name == next(
        n for n in q.graph.node if n.output[0] == "y").input[1])))   # the output's DequantizeLinear
    rng = np.random.default_rng(7)
    clamped = 0
    for _ in range(3):
        x = {"x": rng.uniform(0, 1, (1, c, 16, 16)).astype(np.float32)}
        want, got = ref.run(None, x)[0], sess.run(None, x)[0]
        assert np.array_equal(np.rint(got / scale), np.rint(want / scale))
        clamped += int(np.count_nonzero(np.rint((exact.run(None, x)[0] - want) / scale)))
    if mlas_u8s8.saturates() and fmt == "qdq":   # a case where the clamp shows, on such a machine (QDQ: float convs)
        assert clamped > 0


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_u8s8_matmul_matches_onnxruntime_on_this_machine(tmp_path, act):
    """A QDQ MatMul of 8 rows (QLinearMatMul: MLAS's U8S8 QGEMM, K in order): the int8 FC's sums."""
    rng = np.random.default_rng(3)
    g = oh.make_graph([oh.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                      [oh.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                      [oh.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])],
                      [nh.from_array(rng.normal(0, 1, (64, 16)).astype(np.float32), "w")])
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)]), src)

    class Rows(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.uniform(0, 1, (8, 64)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)
    t = quantization.QuantType
    quantization.quantize_static(src, dst, Rows(), quant_format=quantization.QuantFormat.QDQ,
                                 activation_type=t.QUInt8 if act == "u8" else t.QInt8, weight_type=t.QInt8)
    r = onnx_mrvl.convert(dst)
    r.save(str(tmp_path / "out"))
    assert [n["attrs"]["layer_name"] for n in _int8_layers(str(tmp_path / "out"))] == [["FC"]]
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    for _ in range(4):
        x = {"x": rng.uniform(0, 1, (8, 64)).astype(np.float32)}
        assert np.array_equal(sess.run(None, x)[0], ref.run(None, x)[0])


def test_native_kernels_on_avx2_hosts():
    """With the fp16 native kernels on AVX2 (no VNNI), the int8 ones load too: vpdpbusd emulated."""
    from onnx_mrvl.sim import int8_native, native
    if native.variant() != "avx2" or native.lib() is None or not int8_native.ENABLED:
        pytest.skip("not an AVX2 host with native kernels")
    assert int8_native.lib() is not None and int8_native.why_disabled() == ""


@pytest.mark.parametrize("c,o,k,stride,groups,dt", [(3, 24, 3, 2, 1, "uint8"), (16, 40, 3, 1, 1, "int8"),
                                                     (20, 70, 1, 1, 1, "uint8"), (16, 12, 3, 1, 4, "int8"),
                                                     (5, 64, 5, 2, 1, "int8"), (64, 130, 1, 1, 1, "uint8")])
def test_native_saturating_pairs_equal_numpy(c, o, k, stride, groups, dt):
    """The native GEMM in onnxruntime's AVX2 arithmetic (vpmaddubsw pairs of the (ky, kx, channel) order,
    raw codes q + 128 for int8; odd K, groups, 1x1 direct): the numpy path's sums with the clamp's
    deficit, bit for bit -- and the clamp shows (the exact sums differ)."""
    from onnx_mrvl.sim import int8, int8_native, native
    if native.variant() != "avx2" or int8_native.lib() is None:
        pytest.skip("the saturating native kernel is the AVX2 build's")
    rng = np.random.default_rng(c * 7 + o)
    kernel = rng.integers(-128, 128, (o, k, k, c // groups)).astype(np.int8)
    zx = int(rng.integers(0, 40)) if dt == "uint8" else int(rng.integers(-128, -90))   # large raw codes
    params = dict(in_scale=0.05, in_zero_point=zx, in_dtype=dt, out_scale=2.0, out_zero_point=3, out_dtype=dt)
    layer = int8.Int8Conv2D(kernel, rng.integers(-5000, 5000, o).astype(np.int32),
                            (rng.random(o) * 0.01 + 0.001).astype(np.float32), params, [stride] * 2,
                            [k // 2] * 4, [1, 1], groups, "none", None)
    lo, hi = int8.QRANGE[dt]
    x = ((rng.integers(hi - 60, hi + 1, (2, 9, 11, c)) - zx) * np.float32(0.05)).astype(np.float32)
    exact, _ = layer.apply(x)
    layer.u8s8_sat = True
    got, ref = int8_native.prepare(layer)(x)[0], layer.apply(x)[0]
    np.testing.assert_array_equal(got, ref)
    assert not np.array_equal(ref, exact)
