"""The native int8 kernels (sim/_native_int8.c, AVX512-VNNI) against the numpy path of sim/int8.py
(bit for bit) and against onnxruntime's QLinearConv / QGemm-style execution (docs/simulator.md
"int8 kernels")."""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.sim import int8, int8_native, int8_pool_native, mlas_u8s8
from onnx_mrvl.sim.ort_reduce import sum_last

pytestmark = pytest.mark.skipif(int8_native.lib() is None, reason=int8_native.why_disabled() or "no native int8")

SCALE_X, SCALE_Y = 0.05, 0.3


def _zp(rng, dt):
    return int(rng.integers(0, 256)) if dt == "uint8" else int(rng.integers(-40, 40))


def _layer(rng, c, o, k, stride, pad, dil, groups, dt_in, dt_out, per_channel, act="none", bias_range=5000,
           out_scale=SCALE_Y):
    kernel = rng.integers(-128, 128, (o, k, k, c // groups)).astype(np.int8)
    bias = rng.integers(-bias_range, bias_range, o).astype(np.int32)
    ws = (rng.random(o) * 0.01 + 0.001).astype(np.float32) if per_channel else np.full(o, 0.004, np.float32)
    zx, zy = _zp(rng, dt_in), _zp(rng, dt_out)
    params = dict(in_scale=SCALE_X, in_zero_point=zx, in_dtype=dt_in, out_scale=out_scale, out_zero_point=zy,
                  out_dtype=dt_out)
    ap = {"min": -1.0, "max": 6.0} if act == "clamp" else None
    layer = int8.Int8Conv2D(kernel, bias, ws, params, [stride, stride], pad, [dil, dil], groups, act, ap)
    layer.test_weight_scales = ws           # for the onnxruntime reference (the layer keeps only m[o])
    return layer


def _input(rng, shape, layer, codes_only=False):
    lo, hi = int8.QRANGE[layer.in_q[2]]
    x = ((rng.integers(lo, hi + 1, shape) - layer.in_q[1]) * np.float32(SCALE_X)).astype(np.float32)
    if not codes_only:                      # some values off the code grid, near ties, NaN and inf
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=max(1, flat.size // 20), replace=False)
        flat[idx] = (rng.standard_normal(idx.size) * 8).astype(np.float32)
        flat[idx[: len(idx) // 3]] = ((rng.integers(-50, 50, len(idx) // 3) + 0.5) * SCALE_X).astype(np.float32)
        flat[idx[0]] = np.nan
        if idx.size > 2:
            flat[idx[1]], flat[idx[2]] = np.inf, -np.inf
    return x


GEOMETRIES = [(k, s, d) for k in (1, 3, 5, 7) for s in (1, 2) for d in (1, 2)]


@pytest.mark.parametrize("k,stride,dil", GEOMETRIES)
@pytest.mark.parametrize("groups,c,o", [(1, 3, 24), (1, 20, 70), (4, 16, 12), (24, 24, 24), (1, 64, 130)])
def test_conv_native_equals_numpy(k, stride, dil, groups, c, o):
    rng = np.random.default_rng(k * 100 + stride * 10 + dil + c)
    for dt_in, dt_out, per_channel, act in (("int8", "int8", True, "none"), ("uint8", "uint8", False, "relu"),
                                            ("uint8", "int8", True, "clamp")):
        pad = [k // 2, max(0, k // 2 - 1), k // 2, k // 2 + 1] if k > 1 else [0, 0, 0, 0]
        layer = _layer(rng, c, o, k, stride, pad, dil, groups, dt_in, dt_out, per_channel, act)
        x = _input(rng, (2, 13, 11, c), layer)
        fn = int8_native.prepare(layer)
        assert fn is not None
        ref, _ = layer.apply(x)
        got, ok = fn(x)
        assert ok and got.dtype == np.float32 and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_large_layers_every_thread_split(monkeypatch, threads):
    """Layers big enough to split (rows, channel blocks, depthwise rows): the same bits for any split."""
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    rng = np.random.default_rng(5)
    for (h, c, o, k, s, g) in ((56, 64, 64, 3, 1, 1), (7, 512, 2048, 1, 1, 1), (28, 144, 144, 3, 2, 144),
                               (30, 3, 64, 7, 2, 1), (14, 96, 200, 1, 1, 1)):
        layer = _layer(rng, c, o, k, s, [k // 2] * 4, 1, g, "int8", "uint8", True, "relu")
        x = _input(rng, (1, h, h, c), layer, codes_only=True)
        np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], layer.apply(x)[0])


def test_fc_native_equals_numpy():
    rng = np.random.default_rng(7)
    for n, k, o, dt in ((1, 2048, 1000, "int8"), (8, 100, 37, "uint8"), (3, 5, 1, "int8")):
        w = rng.integers(-128, 128, (o, k)).astype(np.int8)
        params = dict(in_scale=SCALE_X, in_zero_point=_zp(rng, dt), in_dtype=dt, out_scale=SCALE_Y,
                      out_zero_point=_zp(rng, dt), out_dtype=dt)
        layer = int8.Int8FC(w, rng.integers(-9000, 9000, o).astype(np.int32), (rng.random(o) * 0.01).astype(np.float32)
                            + 1e-4, params, "none", None)
        x = _input(rng, (n, k), layer)
        fn = int8_native.prepare(layer)
        np.testing.assert_array_equal(fn(x)[0], layer.apply(x)[0])
        with pytest.raises(ValueError):
            fn(x[:, :-1])


def test_accumulator_extremes():
    """Full-range codes against +-128 weights at the largest K the layer accepts for a 3x3 conv:
    int32 sums near the limit stay exact (the +128 offset and the corrections wrap mod 2^32)."""
    rng = np.random.default_rng(3)
    c = 4096
    kernel = np.full((2, 3, 3, c), -128, np.int8)
    kernel[1] = 127
    params = dict(in_scale=1.0, in_zero_point=-128, in_dtype="int8", out_scale=1e5, out_zero_point=0, out_dtype="int8")
    layer = int8.Int8Conv2D(kernel, np.array([2 ** 20, -(2 ** 20)], np.int32), np.full(2, 1.0, np.float32), params,
                            [1, 1], [1, 1, 1, 1], [1, 1], 1)
    x = np.full((1, 3, 3, c), 255.0, np.float32)          # q = 127, q - z = 255
    x[0, 1, 1, : c // 2] = rng.integers(0, 256, c // 2)
    np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], layer.apply(x)[0])


def add_params(mode: str, a, b, c) -> dict:
    """An int8 Sum2D's params: ``requant`` and the (scale, zero point, type) of its inputs and output
    (also used by test_int8_native_weight_zp.py)."""
    params = {"requant": mode}
    for pre, q in zip(("in", "in2", "out"), (a, b, c)):
        params.update({f"{pre}_scale": q[0], f"{pre}_zero_point": q[1], f"{pre}_dtype": q[2]})
    return params


def test_add_native_equals_numpy():
    rng = np.random.default_rng(1)
    for trial in range(60):
        mode = ("qlinear", "float", "qlinear_u8")[(trial // 3) % 3]   # requant: docs/simulator.md "int8 layers"
        one = str(rng.choice(["int8", "uint8"])) if mode == "qlinear" and trial % 2 else "int8"
        dts = [one] * 3 if mode == "qlinear_u8" or mode == "qlinear" and trial % 2 else \
            [str(rng.choice(["int8", "uint8"])) for _ in range(3)]
        qs = [(float(rng.random() * 0.2 + 1e-3), _zp(rng, dt), dt) for dt in dts]
        params = add_params(mode, *qs)
        act = ("none", "relu", "clamp")[trial % 3]
        layer = int8.Int8Add(params, act, {"min": 0.0, "max": 6.0} if act == "clamp" else None)
        n = int(rng.integers(1, 3000))
        xa = ((rng.integers(-128, 256, (1, 1, n, 1)) - qs[0][1]) * np.float32(qs[0][0])).astype(np.float32)
        xb = (rng.standard_normal((1, 1, n, 1)) * 5).astype(np.float32)
        xb.reshape(-1)[:3] = [np.nan, np.inf, -np.inf][: min(3, n)]
        fn = int8_native.prepare_add(layer)
        np.testing.assert_array_equal(fn(xa, xb)[0], layer.apply(xa, xb)[0])
        with pytest.raises(ValueError):
            fn(xa, xb[:, :, :0])


@pytest.mark.parametrize("mode", ["qlinear", "float", "qlinear_u8"])
def test_add_broadcast_native_equals_numpy(mode):
    """An int8 Sum2D of a tensor and a smaller one broadcast over it (a transformer's attention mask
    [1, 1, 1, T] over the scores [1, heads, T, T]): natively, the numpy layer's bits."""
    rng = np.random.default_rng(4)
    dt = "int8" if mode == "qlinear_u8" else "uint8"
    qs = [(float(rng.random() * 0.2 + 1e-3), _zp(rng, dt), dt) for _ in range(3)]
    params = add_params(mode, *qs)
    for big, small, swap in (((1, 12, 64, 64), (1, 1, 1, 64), False), ((1, 12, 64, 64), (1, 1, 1, 64), True),
                             ((2, 5, 7, 16), (2, 1, 7, 1), False), ((1, 3, 9, 8), (1, 3, 1, 8), True),
                             ((1, 4, 16, 16), (16,), False)):
        layer = int8.Int8Add(params, "relu", None)
        xa = ((rng.integers(0, 256, big) - 100) * np.float32(qs[0][0])).astype(np.float32)
        xb = (rng.standard_normal(small) * 3).astype(np.float32)
        args = (xb, xa) if swap else (xa, xb)
        fn = int8_native.prepare_add(layer)
        if swap:                            # the layer broadcasts its second operand only: both refuse
            for f in (layer.apply, fn):
                with pytest.raises(ValueError):
                    f(*args)
            continue
        ref, _ = layer.apply(*args)

        def numpy_path(*_a, **_k):
            raise AssertionError("the broadcast add ran the numpy layer")
        layer.apply = numpy_path
        got, ok = fn(*args)
        assert ok and got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
        # never bound once for fixed buffers: the broadcast copy is made per run
        assert fn.bind(*args, out=np.zeros(big, np.float32), codes_in=(False, False), codes_out=False) is None


def test_float_add_of_a_coded_constant_natively():
    """A Sum2D with requant "float" and a constant operand (onnxruntime's fp32 Add of DQ(x) and a
    DQ'd constant, S8 QDQ models' bias adds): natively when every constant value is its code's
    dequantized value (the numpy layer's bits); a constant off that grid keeps numpy."""
    rng = np.random.default_rng(6)
    for dt in ("int8", "uint8"):
        qa, qb, qc = (_random_q(rng, dt) for _ in range(3))
        params = add_params("float", qa, qb, qc)
        lo, hi = int8.QRANGE[dt]
        const = (np.float32(qb[0]) * (rng.integers(lo, hi + 1, (1, 1, 1, 40)) - qb[1]).astype(np.float32))
        layer = int8.Int8Add(params, "relu", None, const.astype(np.float32))
        assert layer.mode == "float"
        x = ((rng.integers(-128, 256, (2, 9, 7, 40)) - qa[1]) * np.float32(qa[0])).astype(np.float32)
        x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        ref, _ = layer.apply(x)
        fn = int8_native.prepare_add(layer)
        assert fn is not None
        got, ok = fn(x)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
        off = const.copy()
        off.reshape(-1)[5] = np.nextafter(off.reshape(-1)[5], np.float32(np.inf))   # one value off the grid
        assert int8_native.prepare_add(int8.Int8Add(params, "relu", None, off)) is None


def test_add_codes_equals_numpy():
    """The int8 Sum2D with both operands and the output in codes (the static plan's form; MLAS
    QLinearAdd in folded constants): the numpy layer's codes, tails of every length."""
    rng = np.random.default_rng(21)
    for trial in range(24):
        mode = ("qlinear", "qlinear_u8")[trial % 2]
        dt = "int8" if mode == "qlinear_u8" or trial % 4 == 0 else "uint8"
        qs = [(float(rng.random() * 0.2 + 1e-3), _zp(rng, dt), dt) for _ in range(3)]
        params = add_params(mode, *qs)
        act = ("none", "relu", "clamp")[trial % 3]
        layer = int8.Int8Add(params, act, {"min": 0.0, "max": 6.0} if act == "clamp" else None)
        lo, hi = int8.QRANGE[dt]
        n = int(rng.integers(1, 200)) if trial % 3 else int(rng.integers(40000, 70000))
        xa, xb = (((rng.integers(lo, hi + 1, (1, 1, n, 1)) - q[1]) * np.float32(q[0])).astype(np.float32)
                  for q in qs[:2])
        ref, _ = layer.apply(xa, xb)
        out = np.zeros(ref.shape, np.float32)
        int8_native.prepare_add(layer)(_codes(xa, qs[0]), _codes(xb, qs[1]), out=out, codes_in=(True, True),
                                       codes_out=True)
        np.testing.assert_array_equal(_decode(out, qs[2]), ref)


def _qlinearconv(xq, wq, bq, sx, zx, sw, sy, zy, dt, stride, pads, dil, groups):
    """onnxruntime's QLinearConv on NCHW codes."""
    et = TensorProto.INT8 if dt == "int8" else TensorProto.UINT8
    npdt = np.int8 if dt == "int8" else np.uint8
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"), numpy_helper.from_array(np.array(zx, npdt), "zx"),
             numpy_helper.from_array(wq, "w"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(sw.shape, np.int8), "zw"),
             numpy_helper.from_array(np.array(sy, np.float32), "sy"), numpy_helper.from_array(np.array(zy, npdt), "zy"),
             numpy_helper.from_array(bq, "b")]
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"],
                            strides=[stride] * 2, pads=pads, dilations=[dil] * 2, group=groups,
                            kernel_shape=list(wq.shape[2:]))
    g = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", et, list(xq.shape))],
                          [helper.make_tensor_value_info("y", et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": xq})[0]


@pytest.mark.parametrize("k,stride,dil,groups,dt,per_channel", [
    (1, 1, 1, 1, "uint8", True), (3, 1, 1, 1, "int8", True), (3, 2, 1, 1, "uint8", False), (5, 1, 2, 1, "int8", False),
    (7, 2, 1, 1, "uint8", True), (3, 1, 1, 32, "uint8", True), (3, 2, 1, 32, "int8", True), (5, 1, 1, 32, "int8", False),
    (3, 1, 1, 4, "int8", True)])
def test_conv_native_equals_onnxruntime_qlinearconv(k, stride, dil, groups, dt, per_channel):
    rng = np.random.default_rng(k + 10 * stride + 100 * groups)
    c, o = 32, 32 if groups > 1 else 48
    layer = _layer(rng, c, o, k, stride, [k // 2] * 4, dil, groups, dt, dt, per_channel, bias_range=20000)
    # this machine's onnxruntime, as int8.build() sets it: U8S8 (not depthwise) saturates on AVX2; a
    # QLinearConv node of int8 codes runs MLAS's S8S8 kernel, exact (the S8 -> U8 rewrite is of QDQ graphs)
    layer.u8s8_sat = mlas_u8s8.saturates() and groups != c and dt == "uint8"
    x = _input(rng, (1, 15, 17, c), layer, codes_only=True)
    got, _ = int8_native.prepare(layer)(x)
    lo, hi = int8.QRANGE[dt]
    zx, zy = layer.in_q[1], layer.out_q[1]
    xq = np.clip(np.rint(x / np.float32(SCALE_X)) + zx, lo, hi).astype(np.int8 if dt == "int8" else np.uint8)
    wq = np.rint(layer.kernel.T).astype(np.int8).reshape(o, k, k, c // groups).transpose(0, 3, 1, 2).copy()
    ref = _qlinearconv(xq.transpose(0, 3, 1, 2).copy(), wq, layer.bias.astype(np.int32), SCALE_X, zx,
                       layer.test_weight_scales, SCALE_Y, zy, dt, stride, [k // 2] * 4, dil, groups)
    ours = (np.rint(got / np.float32(SCALE_Y)) + zy).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(ours, ref.astype(np.float64))


def _small_int8_model(tmp_path, act):
    """conv-relu -> depthwise -> conv -> residual add -> maxpool -> conv -> GAP -> Gemm, QDQ-quantized."""
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    from onnx_mrvl.testing.models import GraphBuilder
    g = GraphBuilder(3, 13)
    x = g.relu(g.conv("input", 3, 16, 3, "stem", stride=2), "stem_relu")
    w = g.const("dw.weight", g.he((16, 1, 3, 3), 9))
    y = g.relu(g.node("Conv", [x, w, g.const("dw.bias", np.full(16, 0.1, np.float32))], "dw", kernel_shape=[3, 3],
                      pads=[1, 1, 1, 1], group=16), "dw_relu")
    y = g.conv(y, 16, 16, 1, "pw")
    x = g.relu(g.node("Add", [x, y], "add"), "add_relu")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = g.relu(g.conv(x, 16, 32, 3, "c2"), "c2_relu")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    g.gemm(x, 32, 10, "fc")
    g.nodes[-1].output[0] = "output"
    model = g.model("small_int8", [("input", TensorProto.FLOAT, [1, 3, 40, 40])], [("output", TensorProto.FLOAT, [1, 10])])
    import onnx
    src, dst = str(tmp_path / f"f-{act}.onnx"), str(tmp_path / f"q-{act}.onnx")
    onnx.save(model, src)
    rng = np.random.default_rng(0)
    feeds = [{"input": rng.standard_normal((1, 3, 40, 40)).astype(np.float32)} for _ in range(4)]
    quantize_static_qdq(src, dst, feeds, act)
    return dst


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_static_plan_codes_equal_float_path_and_numpy(tmp_path, monkeypatch, act):
    """The static plan keeps int8 tensors between native int8 kernels as codes; its results are
    the bits of the per-layer float path and of the numpy kernels."""
    import onnx_mrvl
    from onnx_mrvl.artifact import load
    from onnx_mrvl.sim import Simulator
    result = onnx_mrvl.convert(_small_int8_model(tmp_path, act))
    binary = load(result.subgraphs[0].binary)
    sim = Simulator(binary)
    assert sim._static is not None and len(sim._static.coded) >= 4
    x = np.random.default_rng(9).standard_normal((1, 3, 40, 40)).astype(np.float32) * 1.5
    got = sim.run([x])[0]
    monkeypatch.setenv("ONNX_MRVL_SIM_STATIC", "0")
    per_layer = Simulator(binary).run([x])[0]
    monkeypatch.setattr(int8_native, "prepare", lambda layer: None)
    monkeypatch.setattr(int8_native, "prepare_add", lambda layer: None)
    monkeypatch.setattr(int8_pool_native, "prepare_pool", lambda pool: None)
    numpy_path = Simulator(binary).run([x])[0]
    np.testing.assert_array_equal(got, per_layer)
    np.testing.assert_array_equal(got, numpy_path)


def _random_q(rng, dt):
    return float(rng.random() * 0.2 + 1e-3), _zp(rng, dt), dt


def test_pools_native_equal_numpy():
    """int8 MaxPool2D (ceil mode, dilation, asymmetric pads, requantized or not) and GlobalAvgpool2D."""
    rng = np.random.default_rng(2)
    for trial in range(60):
        a = _random_q(rng, str(rng.choice(["int8", "uint8"])))
        c = a if trial % 3 == 0 else _random_q(rng, str(rng.choice(["int8", "uint8"])))
        params = dict(in_scale=a[0], in_zero_point=a[1], in_dtype=a[2], out_scale=c[0], out_zero_point=c[1],
                      out_dtype=c[2])
        k, s = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        p = int(rng.integers(0, k))
        geo = dict(kernel_size=[k, k + 1], strides=[s, s], padding=[p, p, min(p + 1, k - 1) if k > 1 else 0, p],
                   ceil_mode=trial % 2, dilation=[1, 1 + trial % 2])
        pool = int8.Int8Pool("Maxpool2D" if trial % 4 else "GlobalAvgpool2D", params, geo)
        x = ((rng.integers(-128, 256, (2, 9, 11, int(rng.integers(1, 40)))) - a[1]) * np.float32(a[0])).astype(np.float32)
        x.reshape(-1)[::7] = rng.standard_normal(x.reshape(-1)[::7].size) * 3
        ref, _ = pool.apply(x)
        got, _ = int8_pool_native.prepare_pool(pool)(x)
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("out_mul", [None, 0.37])
def test_float_global_average_pool_native_equals_numpy(out_mul):
    """int8 GlobalAvgpool2D with requant "float" (onnxruntime's fp32 ReduceMean between DQ and Q: a
    QDQ squeeze-excite's pool): the fp32 in-order sum, mean, Mul and QuantizeLinear of the numpy
    layer, bit for bit; codes in and out; an fp32 activation first stays numpy."""
    rng = np.random.default_rng(12)
    for trial in range(24):
        a, c = _random_q(rng, str(rng.choice(["int8", "uint8"]))), _random_q(rng, str(rng.choice(["int8", "uint8"])))
        params = dict(in_scale=a[0], in_zero_point=a[1], in_dtype=a[2], out_scale=c[0] / 20, out_zero_point=c[1],
                      out_dtype=c[2], requant="float", out_mul=out_mul)
        pool = int8.Int8Pool("GlobalAvgpool2D", params)
        hw = (int(rng.integers(1, 90)), int(rng.integers(1, 90)))
        x = ((rng.integers(-128, 256, (int(rng.integers(1, 3)),) + hw + (int(rng.integers(1, 70)),)) - a[1])
             * np.float32(a[0])).astype(np.float32)
        ref, _ = pool.apply(x)
        fn = int8_pool_native.prepare_pool(pool)
        got, _ = fn(x)
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got, ref)
        out = np.zeros(ref.shape, np.float32)             # codes out: the same codes
        assert fn.bind(x, out=out, codes_in=(False,), codes_out=True)() == 1
        codes = out.view(np.uint8).reshape(-1)[: ref.size].astype(np.int64) - int8_native.code_offset(pool.out_q)
        np.testing.assert_array_equal(((codes - pool.out_q[1]) * np.float32(pool.out_q[0])).astype(np.float32),
                                      ref.reshape(-1))
    assert int8_pool_native.prepare_pool(int8.Int8Pool("GlobalAvgpool2D", {**params, "in_activation": "relu"})) is None


def test_float_global_average_pool_in_eigen_row_order_natively():
    """The same pool summed as onnxruntime's KR path does (``mean_sum: rows``, ort_reduce.sum_last: each
    channel's row of H*W values in Eigen's packet order after its head, which depends on the row's
    place in the [N * C, HW] tensor): the numpy layer's codes. Maps of 1-89 x 1-89 pixels (fewer than
    4, 4-7, any head), 1-70 channels, 1-2 images. Each channel holds values and their negations, so
    its exact mean is 0 and the fp32 mean is the sum's rounding, different in another order; the
    output step is a hundredth of the largest: another order moves codes."""
    rng = np.random.default_rng(13)
    for trial in range(40):
        a = _random_q(rng, str(rng.choice(["int8", "uint8"])))
        hw = (int(rng.integers(1, 90)), int(rng.integers(1, 90))) if trial % 4 else (1, int(rng.integers(1, 9)))
        n, c, p = int(rng.integers(1, 3)), int(rng.integers(1, 71)), hw[0] * hw[1]
        k = rng.integers(-90, 91, (n, c, p // 2))
        k = np.concatenate([k, -k, np.zeros((n, c, p % 2), k.dtype)], axis=2)
        k = np.take_along_axis(k, rng.permuted(np.tile(np.arange(p), (n, c, 1)), axis=2), axis=2)
        lo, hi = int8.QRANGE[a[2]]
        q = np.clip(a[1] + k.transpose(0, 2, 1).reshape((n,) + hw + (c,)), lo, hi)
        x = ((q - a[1]) * np.float32(a[0])).astype(np.float32)
        rows = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).reshape(n * c, p)
        step = float(np.abs(sum_last(rows)).max()) / p / 100 or a[0]
        params = dict(in_scale=a[0], in_zero_point=a[1], in_dtype=a[2], out_scale=step, out_zero_point=0,
                      out_dtype="int8", requant="float", mean_sum="rows")
        pool = int8.Int8Pool("GlobalAvgpool2D", params)
        ref, _ = pool.apply(x)
        got, _ = int8_pool_native.prepare_pool(pool)(x)
        np.testing.assert_array_equal(got, ref)


def test_maxpool_codes_pass_through():
    """int8 MaxPool2D on codes in and out (the static plan's form; 64 channels a vector when the
    quantizations match): the same codes as the numpy path, channel counts around 64, edges."""
    rng = np.random.default_rng(12)
    for trial, c in enumerate((1, 16, 63, 64, 65, 130)):
        a = _random_q(rng, "uint8" if trial % 2 else "int8")
        b = a if trial < 4 else _random_q(rng, a[2])
        params = dict(in_scale=a[0], in_zero_point=a[1], in_dtype=a[2], out_scale=b[0], out_zero_point=b[1],
                      out_dtype=b[2])
        geo = dict(kernel_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1], ceil_mode=trial % 2, dilation=[1, 1])
        pool = int8.Int8Pool("Maxpool2D", params, geo)
        lo, hi = int8.QRANGE[a[2]]
        q = rng.integers(lo, hi + 1, (2, 9, 12, c))
        ref, _ = pool.apply(((q - a[1]) * np.float32(a[0])).astype(np.float32))
        off_in, off_out = (128 if a[2] == "int8" else 0), (128 if b[2] == "int8" else 0)
        src = np.zeros(q.shape, np.float32)
        src.view(np.uint8).reshape(-1)[:q.size] = (q + off_in).reshape(-1)
        out = np.zeros(ref.shape, np.float32)
        int8_pool_native.prepare_pool(pool)(src, out=out, codes_in=(True,), codes_out=True)
        want = np.rint(ref / np.float32(b[0])).astype(np.int64) + b[1] + off_out
        np.testing.assert_array_equal(out.view(np.uint8).reshape(-1)[:ref.size], want.reshape(-1))


def test_region_input_fake_quant():
    rng = np.random.default_rng(4)
    for t in range(20):
        q = _random_q(rng, ("int8", "uint8")[t % 2])
        a = (rng.standard_normal((1, 3, int(rng.integers(1, 70)), 17)) * 3).astype(np.float32)
        a.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        a.reshape(-1)[3:40] = ((rng.integers(-60, 60, 37) + 0.5) * np.float32(q[0])).astype(np.float32)   # ties
        out = np.empty_like(a)
        int8_native.fake_quant_into(a, out, q)
        np.testing.assert_array_equal(out, int8.numpy_fake_quant(a, *q))


def test_fake_quant_and_centered_codes_natively_bit_exact():
    """int8.fake_quant / centered_codes from NATIVE_MIN values on take i8_fake_quant's one pass
    (Requantize, int8 BatchMatMul, int8_out layers): the same bits as the numpy forms on random bit
    patterns, NaN / inf, exact ties and codes times the scale, for int8 and uint8, odd sizes."""
    if int8_native.lib() is None:
        pytest.skip(f"no native int8 kernels: {int8_native.why_disabled()}")
    rng = np.random.default_rng(7)
    for t in range(12):
        q = _random_q(rng, ("int8", "uint8")[t % 2])
        n = int8.NATIVE_MIN + int(rng.integers(0, 3000))
        a = (rng.standard_normal(n) * 10 ** rng.uniform(-1, 3)).astype(np.float32)
        a[:200] = rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32).view(np.float32)
        a[200:203] = [np.nan, np.inf, -np.inf]
        a[203:240] = ((rng.integers(-60, 60, 37) + 0.5) * np.float32(q[0])).astype(np.float32)   # ties
        a[240:300] = (rng.integers(-128, 256, 60) * np.float32(q[0])).astype(np.float32)        # codes
        a = a.reshape(1, -1) if t % 3 else a
        got = int8_native.fake_quant_native(a, q)
        assert got is not None and got.shape == a.shape
        np.testing.assert_array_equal(got.view(np.uint32), int8.numpy_fake_quant(a, *q).view(np.uint32))
        np.testing.assert_array_equal(int8.fake_quant(a, *q).view(np.uint32), got.view(np.uint32))
        want = (int8.quantize(a, *q) - q[1]).astype(np.float32)
        np.testing.assert_array_equal(int8.centered_codes(a, *q), want)
        np.testing.assert_array_equal(int8_native.fake_quant_native(a.astype(np.float64), q, centered=True), want)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_qlinear_mul_natively_bit_exact_over_thread_splits(monkeypatch, threads):
    """An int8_out Mul2D (QLinearMul; a squeeze-excite gate [1, 1, 1, C] over a map, a same-shape
    product, a scalar) on i8_qmul split over the threads: the numpy form's bits, also written into the
    static plan's buffer or over its input."""
    from onnx_mrvl.sim import int8_transformer
    if int8_native.lib() is None:
        pytest.skip(f"no native int8 kernels: {int8_native.why_disabled()}")
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    rng = np.random.default_rng(8)
    for (shape, bshape, u8) in (((1, 40, 37, 64), (1, 1, 1, 64), False), ((2, 9, 11, 24), (2, 9, 11, 24), True),
                                ((1, 50, 50, 3), (1, 1, 1, 1), False)):
        in_q, b_q, out_q = _random_q(rng, "int8"), _random_q(rng, "uint8"), _random_q(rng, "int8")
        run = int8_transformer.qlinear_mul_codes(None, in_q, b_q, out_q, u8)
        a = (rng.standard_normal(shape) * 3).astype(np.float32)
        a.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
        b = (rng.random(bshape) * 0.9).astype(np.float32)
        got, _ = run(a, b)
        buf = np.full(shape, 7.0, np.float32)             # the static plan's buffer, or the input itself
        into, _ = run(a, b, out=buf)
        same = a.copy()
        in_place, _ = run(same, b, out=same)
        assert into is buf and in_place is same
        monkeypatch.setattr(int8_transformer, "qlinear_mul_native", lambda *args, **kw: None)
        want, _ = run(a, b)
        monkeypatch.undo()
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        for y in (got, into, in_place):
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_float_binary_then_quantize_natively_bit_exact(monkeypatch, threads):
    """An int8_out Sum2D / Mul2D / Div of float operands without input codes or activation
    (onnxruntime's fp32 Mul between DQ and Q: an S8 squeeze-excite gate [1, 1, 1, C] over a map, a
    same-shape product, a scalar, a per-image operand) on i8_float_binary_fq: the numpy step's bits and
    finiteness flag, written into the static plan's buffer, also when that buffer is the input."""
    from onnx_mrvl.sim import int8_transformer
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    rng = np.random.default_rng(9)
    cases = (((1, 40, 37, 64), (1, 1, 1, 64)), ((2, 9, 11, 24), (2, 9, 11, 24)), ((1, 50, 50, 3), (1, 1, 1, 1)),
             ((2, 30, 30, 16), (2, 1, 1, 16)), ((1, 70, 33), (1, 1, 33)))
    for op in ("mul", "add", "div"):
        for k, (shape, bshape) in enumerate(cases):
            out_q = _random_q(rng, "int8" if k % 2 else "uint8")
            const = (rng.random(bshape) * 1.8 - 0.9).astype(np.float32) if k % 2 else None
            run = int8_transformer.int8_out_binary(op, const, {"activation": "none"}, out_q)
            a = (rng.standard_normal(shape) * 3).astype(np.float32)
            b = None if const is not None else (rng.random(bshape) * 1.8 - 0.9).astype(np.float32)
            finite = k != 2
            if not finite:
                a.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
            args = (a,) if b is None else (a, b)
            buf = np.full(shape, 7.0, np.float32)
            got, ok = run(*args, out=buf)
            assert got is buf and ok == finite
            same = a.copy()
            in_place, ok2 = run(*((same,) if b is None else (same, b)), out=same)
            assert in_place is same and ok2 == finite
            monkeypatch.setattr(int8_transformer, "float_binary_fq_native", lambda *args, **kw: None)
            want, ok_numpy = run(*args)
            monkeypatch.undo()
            monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
            assert ok_numpy == finite
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
            np.testing.assert_array_equal(in_place.view(np.uint32), want.view(np.uint32))


def _codes(y: np.ndarray, q) -> np.ndarray:
    """The bytes q + off of a dequantized int8 tensor, in a float32-sized buffer (as the arena holds them;
    also used by test_int8_float_native.py and test_int8_table_native.py)."""
    buf = np.zeros(y.shape, np.float32)
    codes = np.rint(y / np.float32(q[0])) + q[1] + (128 if q[2] == "int8" else 0)
    buf.reshape(-1).view(np.uint8)[:y.size] = codes.reshape(-1).astype(np.uint8)
    return buf


def _decode(buf: np.ndarray, q) -> np.ndarray:
    u = buf.reshape(-1).view(np.uint8)[:buf.size].astype(np.float32) - (128 if q[2] == "int8" else 0)
    return ((u - q[1]) * np.float32(q[0])).astype(np.float32).reshape(buf.shape)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_conv_codes_out_equals_numpy(monkeypatch, threads):
    """Codes in and out (the static plan's form; full 64-channel blocks take the packed epilogue),
    clamped activations, int8 and uint8, 1x1 direct and 3x3 with im2col, requantization multipliers
    below 0.5 (rounded before the clamp) and far above (clamped first): the numpy path's codes."""
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    rng = np.random.default_rng(31)
    for k, stride, c, o, dt_in, dt_out, act, s_y in ((1, 1, 64, 130, "uint8", "uint8", "relu", SCALE_Y),
                                                      (3, 1, 24, 64, "int8", "int8", "clamp", SCALE_Y),
                                                      (3, 2, 40, 200, "uint8", "int8", "none", SCALE_Y),
                                                      (1, 1, 16, 256, "int8", "uint8", "relu", SCALE_Y),
                                                      (1, 1, 32, 64, "int8", "int8", "none", 1e-4),
                                                      (3, 1, 8, 128, "uint8", "uint8", "clamp", 3e-4)):
        layer = _layer(rng, c, o, k, stride, [k // 2] * 4, 1, 1, dt_in, dt_out, True, act, out_scale=s_y)
        x = _input(rng, (1, 17, 15, c), layer, codes_only=True)
        ref, _ = layer.apply(x)
        out = np.zeros(ref.shape, np.float32)
        call = int8_native.prepare(layer).bind(_codes(x, layer.in_q), out=out, codes_in=(True,), codes_out=True)
        assert call() == 1
        np.testing.assert_array_equal(_decode(out, layer.out_q), ref)


@pytest.mark.parametrize("mode", ["qlinear", "qlinear_u8", "float"])
@pytest.mark.parametrize("slot", [0, 1])
@pytest.mark.parametrize("codes", [False, True])
def test_residual_sum_fused_into_conv(slot, codes, mode):
    """conv + Sum2D in one call (the static plan's int8 residual fusion): the bits of the two layers."""
    rng = np.random.default_rng(10 + slot + 2 * codes)
    # 7x7 maps: 49 rows, a last tile of one row (the AVX2 build's one-row k loops, exact and U8S8 saturating)
    for k, stride, c, o, dt, nhw in ((1, 1, 32, 48, "uint8", (2, 12, 10)), (3, 2, 16, 70, "int8", (2, 12, 10)),
                                     (1, 1, 64, 256, "int8", (2, 12, 10)), (1, 1, 24, 40, "uint8", (1, 7, 7)),
                                     (3, 1, 24, 72, "int8", (1, 7, 7))):
        if mode == "qlinear_u8" and dt != "int8":
            continue
        layer = _layer(rng, c, o, k, stride, [k // 2] * 4, 1, 1, dt, dt, True, "relu")
        other_q, out_q = _random_q(rng, dt), _random_q(rng, dt)
        qs = [layer.out_q, other_q] if slot == 0 else [other_q, layer.out_q]
        params = add_params(mode, *qs, out_q)
        add = int8.Int8Add(params, "relu", None)
        x = _input(rng, nhw + (c,), layer, codes_only=True)
        y_conv, _ = layer.apply(x)
        lo, hi = int8.QRANGE[dt]
        other = ((rng.integers(lo, hi + 1, y_conv.shape) - other_q[1]) * np.float32(other_q[0])).astype(np.float32)
        ref, _ = add.apply(y_conv, other) if slot == 0 else add.apply(other, y_conv)
        add_fn, conv_fn = int8_native.prepare_add(add), int8_native.prepare(layer)
        prm = add_fn.add_prm.copy()
        prm[7 + 8 * (1 - slot)], prm[23] = float(codes), float(codes)
        out = np.zeros(ref.shape, np.float32)
        call = conv_fn.bind_fused(x, out=out, codes_in=(False,), add_prm=prm, slot=slot,
                                  other=_codes(other, other_q) if codes else other)
        assert call() == 1
        np.testing.assert_array_equal(_decode(out, out_q) if codes else out, ref)


@pytest.mark.parametrize("k,c,o,nhw", [(1, 64, 256, (1, 7, 7)), (3, 24, 40, (1, 7, 7)), (1, 32, 48, (2, 6, 5))])
def test_residual_sum_fused_saturating_pairs(k, c, o, nhw):
    """The fused residual conv in onnxruntime's U8S8 AVX2 arithmetic (pairs saturated to int16), with
    raw codes large enough that the clamp shows, 7x7 maps for the one-row tiles: the numpy path's bits."""
    from onnx_mrvl.sim import native
    if native.variant() != "avx2" or int8_native.lib() is None:
        pytest.skip("the saturating native kernel is the AVX2 build's")
    rng = np.random.default_rng(k * 100 + o)
    kernel = rng.integers(-128, 128, (o, k, k, c)).astype(np.int8)
    zx = int(rng.integers(0, 40))
    params = dict(in_scale=0.05, in_zero_point=zx, in_dtype="uint8", out_scale=2.0, out_zero_point=3, out_dtype="uint8")
    layer = int8.Int8Conv2D(kernel, rng.integers(-5000, 5000, o).astype(np.int32),
                            (rng.random(o) * 0.01 + 0.001).astype(np.float32), params, [1, 1], [k // 2] * 4, [1, 1],
                            1, "none", None)
    x = ((rng.integers(195, 256, nhw + (c,)) - zx) * np.float32(0.05)).astype(np.float32)
    exact, _ = layer.apply(x)
    layer.u8s8_sat = True
    y_conv, _ = layer.apply(x)
    assert not np.array_equal(y_conv, exact)           # the clamp shows
    other_q, out_q = _random_q(rng, "uint8"), _random_q(rng, "uint8")
    params = add_params("qlinear", layer.out_q, other_q, out_q)
    add = int8.Int8Add(params, "relu", None)
    other = ((rng.integers(0, 256, y_conv.shape) - other_q[1]) * np.float32(other_q[0])).astype(np.float32)
    ref, _ = add.apply(y_conv, other)
    prm = int8_native.prepare_add(add).add_prm.copy()
    prm[15], prm[23] = 1.0, 1.0                         # the other operand and the output in codes
    out = np.zeros(ref.shape, np.float32)
    call = int8_native.prepare(layer).bind_fused(x, out=out, codes_in=(False,), add_prm=prm, slot=0,
                                                  other=_codes(other, other_q))
    assert call() == 1
    np.testing.assert_array_equal(_decode(out, out_q), ref)


def test_switched_off_falls_back_to_numpy():
    """ONNX_MRVL_SIM_INT8_NATIVE=0 (or ONNX_MRVL_SIM_NATIVE=0): no native int8 kernel, a reason, the
    numpy apply."""
    import subprocess
    import sys
    code = ("import numpy as np\n"
            "from onnx_mrvl.sim import int8, int8_native\n"
            "k = np.ones((4, 1, 1, 4), np.int8)\n"
            "p = dict(in_scale=0.1, in_zero_point=0, in_dtype='uint8', out_scale=0.2, out_zero_point=0, out_dtype='uint8')\n"
            "layer = int8.Int8Conv2D(k, None, np.full(4, 0.01, np.float32), p, [1, 1], [0, 0, 0, 0], [1, 1], 1)\n"
            "assert int8_native.prepare(layer) is None and int8_native.why_disabled()\n"
            "print(int8_native.why_disabled())\n")
    for var in ("ONNX_MRVL_SIM_INT8_NATIVE", "ONNX_MRVL_SIM_NATIVE"):
        env = dict(os.environ, **{var: "0"})
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "disabled" in out.stdout


def test_accumulator_wraps_as_the_numpy_layer():
    """An int32 bias at its limit plus the products leaves the int32 range: the native kernels' int32
    adds and the numpy layer's ``wrap_int32`` give the same wrapped accumulator (onnxruntime's, see
    docs/simulator.md "int8 layers"), GEMM and depthwise, int8 and uint8 inputs."""
    rng = np.random.default_rng(8)
    for dt, zp in (("int8", -20), ("uint8", 100)):
        params = dict(in_scale=0.01, in_zero_point=zp, in_dtype=dt, out_scale=1e7, out_zero_point=0, out_dtype="int8")
        bias = np.array([2 ** 31 - 1, -(2 ** 31), 2 ** 31 - 5000, -(2 ** 31) + 7] * 4, np.int32)
        for groups in (1, 16):
            kernel = rng.integers(-128, 128, (16, 3, 3, 16 // groups)).astype(np.int8)
            layer = int8.Int8Conv2D(kernel, bias, np.full(16, 1.0, np.float32), params, [1, 1], [1, 1, 1, 1], [1, 1],
                                    groups)
            x = (rng.standard_normal((1, 6, 7, 16)) * 1.5).astype(np.float32)
            acc = layer.apply(x)[0]
            np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], acc)
            assert (acc[..., 0] < 0).any() and (acc[..., 1] > 0).any()   # wrapped past both ends


def test_quantize_numpy_formula_matches_the_float64_one():
    """int8.quantize (float32 steps, fmax for NaN) gives the codes of the float64 formula it
    replaced (rint(x / s) in float32, + z in float64, NaN -> min, +-inf saturated) on random bit
    patterns, every scale decade and both types."""
    from onnx_mrvl.sim import int8

    def float64_form(x, scale, zp, dtype):
        lo, hi = int8.QRANGE[dtype]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            q = np.rint(np.asarray(x, np.float32) / np.float32(scale)).astype(np.float64) + zp
        return np.clip(np.nan_to_num(q, nan=float(lo), posinf=hi, neginf=lo), lo, hi).astype(np.int32)
    rng = np.random.default_rng(7)
    for t in range(60):
        x = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32).copy()
        x[::2] = (rng.standard_normal(2000) * 10 ** rng.uniform(-3, 6)).astype(np.float32)
        x[:7] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38]
        dt = ("int8", "uint8")[t % 2]
        s, zp = float(np.float32(10 ** rng.uniform(-6, 2))), int(rng.integers(*int8.QRANGE[dt]))
        np.testing.assert_array_equal(int8.quantize(x, s, zp, dt), float64_form(x, s, zp, dt))


@pytest.mark.parametrize("shapes", [((2, 12, 25, 32), (2, 12, 32, 25)), ((1, 4, 30, 64), (1, 4, 64, 7)),
                                    ((3, 40, 300), (3, 300, 20))])     # K 300: the double sums
def test_int8_batch_matmul_natively_bit_exact(shapes):
    """Int8BatchMatMul's qlinear result through i8_bmm: the numpy form's bits (exact integer sums, MLAS's
    requantization) for codes over the whole range, uint8 / int8 outputs, float32 and double sums."""
    from onnx_mrvl.sim.int8_transformer import Int8BatchMatMul
    if int8_native.lib() is None:
        pytest.skip(f"no native int8 kernels: {int8_native.why_disabled()}")
    rng = np.random.default_rng(sum(shapes[0]))
    for dt, z in (("uint8", 128), ("int8", -3)):
        p = {"in_scale": 0.05, "in_zero_point": 3, "in_dtype": "uint8", "in2_scale": 0.04, "in2_zero_point": -5,
             "in2_dtype": "int8", "out_scale": 0.9, "out_zero_point": z, "out_dtype": dt}
        mm = Int8BatchMatMul(p, False, 1.0, {})
        al = (rng.integers(0, 256, shapes[0]) - 3).astype(np.float32)      # the centered codes
        bl = (rng.integers(-128, 128, shapes[1]) + 5).astype(np.float32)
        got = int8_native.batch_matmul_native(al, bl, mm.mult, mm.y)
        want = mm.numpy_codes(al, bl)
        assert got is not None and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert len(np.unique(want)) > 20                                   # not all saturated


@pytest.mark.parametrize("d", [1, 7, 25, 256, 6625])
@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_int8_softmax_natively_bit_exact(monkeypatch, d, dt):
    """Int8Softmax (QLinearSoftmax, qlinear) over the last axis through i8_softmax: the numpy form's
    bits (the input codes, the table, the row's fp32 sum in order, the float64 quotient), with NaN,
    infinities and rows of one code."""
    from onnx_mrvl.sim import int8_transformer as T
    if int8_native.lib() is None:
        pytest.skip(f"no native int8 kernels: {int8_native.why_disabled()}")
    rng = np.random.default_rng(d + len(dt))
    zx, zy = (-10, -128) if dt == "int8" else (120, 0)
    p = {"in_scale": 0.06, "in_zero_point": zx, "in_dtype": dt, "out_scale": 1 / 255, "out_zero_point": zy,
         "out_dtype": dt}
    sm = T.Int8Softmax(p, -1)
    x = (rng.standard_normal((max(1, 4096 // d) + 3, d)) * 4).astype(np.float32)
    x[0, :min(d, 3)] = [np.nan, np.inf, -np.inf][:min(d, 3)]
    x[1] = 0.5                                                         # one code across the row
    got, ok = sm.apply(x)
    monkeypatch.setattr(T, "NATIVE_MIN", 1 << 62)
    want, _ = sm.apply(x)
    assert ok and int8_native.softmax_native(x, sm.table(d), sm.x, sm.y_scale, sm.y) is not None
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_native_bmm_and_softmax_out_of_memory_raise(monkeypatch):
    """i8_bmm / i8_softmax answer 0 when they cannot allocate their row buffer: the layer raises
    MrvlRuntimeError, never returns the unwritten output."""
    from onnx_mrvl.errors import MrvlRuntimeError
    so = int8_native.lib()
    if so is None:
        pytest.skip(f"no native int8 kernels: {int8_native.why_disabled()}")
    monkeypatch.setattr(so, "i8_bmm", lambda *args: 0)
    monkeypatch.setattr(so, "i8_softmax", lambda *args: 0)
    a = np.ones((2, 3, 8, 16), np.float32)
    with pytest.raises(MrvlRuntimeError, match="out of memory"):
        int8_native.batch_matmul_native(a, a.swapaxes(-1, -2), np.float32(0.01), (0.1, 0, "int8"))
    with pytest.raises(MrvlRuntimeError, match="out of memory"):
        int8_native.softmax_native(a, np.ones(256, np.float32), (0.05, 0, "int8"), np.float32(255), (1 / 255, -128, "int8"))
