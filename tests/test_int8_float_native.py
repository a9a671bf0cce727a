"""The native float-path int8 Conv2D (sim/_native_i8float.c) against the numpy path of
sim/int8_float_conv.py, bit for bit: the fp32 sums before the output quantization (so that a
different summation order shows), the quantized outputs, and int8 codes buffers in and out."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_mrvl.sim import int8, int8_float_native, int8_native, int8_pool_native
from onnx_mrvl.sim.int8_float_conv import FloatPathConv2D, conv_segments, mlas_stride_k

from test_int8_native import _codes, _decode

pytestmark = pytest.mark.skipif(int8_float_native.lib() is None,
                                reason=int8_float_native.why_disabled() or "no native float-path kernel")

S_X = 0.037


def _layer(rng, c, o, k, stride, pad, dil, groups, dt_in="int8", dt_out="int8", act="none", kw=None, gemm="conv"):
    kw = k if kw is None else kw
    kernel = rng.integers(-127, 128, (o, k, kw, c // groups)).astype(np.int8)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    ws = rng.uniform(0.001, 0.02, o).astype(np.float32)
    zx = int(rng.integers(-20, 20)) if dt_in == "int8" else int(rng.integers(100, 150))
    zy = int(rng.integers(-10, 10)) if dt_out == "int8" else int(rng.integers(100, 150))
    params = dict(in_scale=S_X, in_zero_point=zx, in_dtype=dt_in, out_scale=float(rng.uniform(0.05, 0.3)),
                  out_zero_point=zy, out_dtype=dt_out)
    ap = {"min": -1.0, "max": 6.0} if act == "clamp" else None
    bias_scale = (ws * np.float32(S_X)).astype(np.float32)
    return FloatPathConv2D(kernel, bias, ws, params, stride, pad, dil, groups, act, ap, bias_scale=bias_scale,
                           gemm=gemm)


def _input(rng, shape, codes_only=False):
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    if codes_only:
        return (np.clip(np.rint(x / np.float32(S_X)), -100, 100) * np.float32(S_X)).astype(np.float32)
    flat = x.reshape(-1)                        # ties of x / s, NaN and infinities
    flat[:30] = ((rng.integers(-60, 60, 30) + 0.5) * np.float32(S_X)).astype(np.float32)
    flat[30:33] = [np.nan, np.inf, -np.inf]
    return x


# (n, h, w, c, o, k, stride, pad, dilation, groups, kw): 1x1 (K below, at and above the K block),
# 3x3 / 5x5 / 7x7, strided, asymmetric pads, dilated, grouped, depthwise, channel multiplier,
# odd channel counts, K not a multiple of the block, batch > 1, a 1x1 image (FC-like)
SHAPES = [
    (1, 14, 14, 64, 256, 1, [1, 1], [0, 0, 0, 0], [1, 1], 1, None),
    (1, 9, 11, 300, 70, 1, [1, 1], [0, 0, 0, 0], [1, 1], 1, None),
    (1, 6, 5, 129, 17, 1, [1, 1], [0, 0, 0, 0], [1, 1], 1, None),
    (2, 12, 13, 17, 33, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1, None),
    (1, 15, 15, 40, 24, 3, [2, 2], [1, 0, 1, 2], [1, 1], 1, None),
    (1, 16, 16, 48, 48, 3, [1, 1], [2, 2, 2, 2], [2, 2], 4, None),
    (1, 13, 13, 37, 37, 3, [1, 1], [1, 1, 1, 1], [1, 1], 37, None),
    (1, 20, 19, 96, 96, 5, [2, 2], [2, 2, 2, 2], [1, 1], 96, None),
    (1, 11, 11, 70, 70, 7, [1, 1], [3, 3, 3, 3], [2, 1], 70, None),
    (1, 8, 8, 8, 16, 1, [1, 1], [0, 0, 0, 0], [1, 1], 8, None),
    (1, 7, 7, 512, 130, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1, None),
    (3, 5, 30, 3, 64, 7, [2, 2], [3, 3, 3, 3], [1, 1], 1, None),
    (1, 1, 1, 1000, 10, 1, [1, 1], [0, 0, 0, 0], [1, 1], 1, None),
    (1, 10, 12, 24, 40, 1, [1, 1], [0, 1, 0, 2], [1, 1], 1, 3),
    (1, 12, 80, 40, 40, 5, [1, 1], [2, 2, 2, 2], [1, 1], 40, None),   # PP-OCR's 5x5 depthwise (M1 sums)
    (2, 5, 5, 21, 21, 5, [1, 1], [0, 0, 0, 0], [1, 1], 21, None),     # one output pixel, M1 all the same
    (1, 9, 9, 16, 8, 3, [1, 1], [1, 1, 1, 1], [1, 1], 8, None),       # one output per group of 2 inputs
]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"s{i}" for i in range(len(SHAPES))])
def test_sums_bit_identical(shape):
    """The fp32 sums (conv + bias) of the kernel are numpy's fma_chain's, bit for bit; summing in
    other K blocks changes them, so the comparison sees the order."""
    n, h, w, c, o, k, stride, pad, dil, groups, kw = shape
    rng = np.random.default_rng(sum(shape[:6]))
    layer = _layer(rng, c, o, k, stride, pad, dil, groups, kw=kw)
    fn = int8_native.prepare(layer)
    if o == groups and c != groups:   # one output per group of several inputs: MLAS's M1 sums in numpy
        assert fn is None, "a float-path conv with one output per group must not get the FMA kernel"
        return
    assert fn is not None and hasattr(fn, "sums"), "a float-path Conv2D must get the float kernel, not the VNNI one"
    x = _input(rng, (n, h, w, c))
    want = layer.sums(x)
    got = fn.sums(x)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if o == groups:   # depthwise: MLAS's M1 sums (m1_sums against m1_chain), no K blocks
        np.testing.assert_array_equal(fn(x)[0].view(np.uint32), layer.apply(x)[0].view(np.uint32))
        return
    kk = (c // groups) * k * (k if kw is None else kw)
    blocks = {b for _, _, b in conv_segments(layer, n, want.shape[1], want.shape[2])}   # MLAS's threads' K blocks
    sk = max(blocks) if len(blocks) == 1 else mlas_stride_k(want.shape[1] * want.shape[2], kk)
    if kk > sk and kk >= 150:                      # the order matters: another block size, other sums
        assert (layer.sums(x, stride_k=2 * sk) != got).mean() > 0.05


@pytest.mark.parametrize("c", [40, 128])
def test_depthwise_tiles_bit_identical(c):
    """One channel in and out per group outside MLAS's M1 kernel (a ConvTranspose phase, gemm
    "conv_transpose") takes the kernel's depthwise tiles (16 channels a vector, the groups side by
    side); C = 128 also pads the buffer's pixel stride."""
    rng = np.random.default_rng(c)
    layer = _layer(rng, c, c, 3, [1, 1], [1, 1, 1, 1], [1, 1], c, gemm="conv_transpose")
    fn = int8_native.prepare(layer)
    assert fn is not None and hasattr(fn, "sums"), "the float kernel's depthwise tiles"
    x = _input(rng, (2, 9, 11, c))
    np.testing.assert_array_equal(fn.sums(x), layer.sums(x))
    got, ok = fn(x)
    assert ok
    np.testing.assert_array_equal(got, layer.apply(x)[0])


@pytest.mark.parametrize("dt_in,dt_out,act", [("int8", "int8", "none"), ("uint8", "uint8", "relu"),
                                              ("int8", "uint8", "clamp"), ("uint8", "int8", "relu")])
@pytest.mark.parametrize("shape", SHAPES[:12:2], ids=[f"s{i}" for i in range(0, 12, 2)])
def test_outputs_bit_identical(shape, dt_in, dt_out, act):
    n, h, w, c, o, k, stride, pad, dil, groups, kw = shape
    rng = np.random.default_rng(sum(shape[:6]) + len(act))
    layer = _layer(rng, c, o, k, stride, pad, dil, groups, dt_in, dt_out, act, kw=kw)
    x = _input(rng, (n, h, w, c))
    want, _ = layer.apply(x)
    fn = int8_native.prepare(layer)
    if o == groups and c != groups:   # one output per group of several inputs: numpy's M1 sums
        assert fn is None
        return
    got, ok = fn(x)
    assert ok and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_codes_in_and_out(dt):
    """Reading and writing the static plan's codes buffers gives the bits of the float buffers."""
    rng = np.random.default_rng(7)
    layer = _layer(rng, 24, 40, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1, dt, dt, "relu")
    x = _input(rng, (1, 9, 10, 24), codes_only=True)
    x = int8.fake_quant(x, *layer.in_q)
    want, _ = layer.apply(x)
    fn = int8_native.prepare(layer)
    assert fn.int8_io == ((tuple(layer.in_q),), tuple(layer.out_q))
    out = np.zeros(want.shape, np.float32)
    y, ok = fn(_codes(x, layer.in_q), out=out, codes_in=(True,), codes_out=True)
    assert ok
    np.testing.assert_array_equal(_decode(out, layer.out_q), want)
    out2 = np.zeros(want.shape, np.float32)
    call = fn.bind(_codes(x, layer.in_q), out=out2, codes_in=(True,), codes_out=False)
    assert call() == 1
    np.testing.assert_array_equal(out2, want)


def test_threads_do_not_change_the_bits(monkeypatch):
    rng = np.random.default_rng(3)
    layer = _layer(rng, 64, 96, 3, [1, 1], [1, 1, 1, 1], [1, 1], 1)
    x = _input(rng, (1, 23, 17, 64))
    fn = int8_native.prepare(layer)
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "1")
    one = fn.sums(x)
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "3")
    np.testing.assert_array_equal(fn.sums(x), one)
    np.testing.assert_array_equal(one, layer.sums(x))


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_static_plan_batches_int8_steps(tmp_path, monkeypatch, act):
    """The static plan runs consecutive bound int8 kernels in one C call (int8_plan.batch_records;
    the float-path convs of the S8 model among them): the bits of the per-layer path, of the numpy
    kernels and of onnxruntime on the QDQ model."""
    pytest.importorskip("onnxruntime.quantization")
    import os
    import onnxruntime as ort
    import onnx_mrvl
    from onnx_mrvl.artifact import load
    from onnx_mrvl.sim import Simulator
    from tests.test_int8_float_conv import shared_input_cnn
    from tests.test_int8_qdq import quantize
    qpath = quantize(shared_input_cnn(seed=5), str(tmp_path / "q.onnx"), True, act)
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    binary = load(result.subgraphs[0].binary)
    sim = Simulator(binary)
    bound = [seg for seg in sim._static.segments if seg[0] == "bound"]
    assert bound and sum(len(seg[1]) for seg in bound) >= 4
    floats = [e for seg in bound for e in seg[1] if hasattr(e.py, "sums")]
    assert (len(floats) >= 3) == (act == "s8")          # onnxruntime's float convs: S8 only
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(4)
    xs = [(rng.standard_normal((1, 3, 20, 20)) * 1.5).astype(np.float32) for _ in range(4)]
    got = [sim.run([x.transpose(0, 2, 3, 1).copy() if sim.input_shapes[0][-1] == 3 else x])[0] for x in xs]
    monkeypatch.setenv("ONNX_MRVL_SIM_STATIC", "0")
    per_layer = Simulator(binary)
    monkeypatch.setattr(int8_native, "prepare", lambda layer: None)
    monkeypatch.setattr(int8_native, "prepare_add", lambda layer: None)
    monkeypatch.setattr(int8_pool_native, "prepare_pool", lambda pool: None)
    numpy_path = Simulator(binary)
    for x, y in zip(xs, got):
        xin = x.transpose(0, 2, 3, 1).copy() if sim.input_shapes[0][-1] == 3 else x
        np.testing.assert_array_equal(y, per_layer.run([xin])[0])
        np.testing.assert_array_equal(y, numpy_path.run([xin])[0])
    monkeypatch.delenv("ONNX_MRVL_SIM_STATIC")
    for x in xs:
        assert np.array_equal(ref.run(None, {"input": x})[0], sess.run(None, {"input": x})[0])


@pytest.mark.parametrize("s_y", [0.1, 0.3, 0.25, 1e-3])
def test_output_ties(s_y):
    """Outputs at and next to half-integers of y / s_y (a zero kernel: y is the bias, fp32(q_b s_b)
    with s_b = s_y / 2 give ties or near ties): the kernel's reciprocal shortcut divides there."""
    o = 256
    params = dict(in_scale=S_X, in_zero_point=0, in_dtype="int8", out_scale=s_y, out_zero_point=3, out_dtype="int8")
    bias = np.arange(-o // 2, o // 2).astype(np.int32)
    bias_scale = np.full(o, np.float32(s_y) / np.float32(2), np.float32)
    bias_scale[1::3] = np.nextafter(bias_scale[1::3], np.float32(1))
    layer = FloatPathConv2D(np.zeros((o, 1, 1, 8), np.int8), bias, np.full(o, 0.01, np.float32), params,
                            [1, 1], [0, 0, 0, 0], [1, 1], 1, bias_scale=bias_scale)
    x = np.ones((1, 2, 3, 8), np.float32)
    want, _ = layer.apply(x)
    np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], want)
