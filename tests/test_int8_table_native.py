"""The native int8 Lookup and channel Concat (sim/int8_table_native.py, ``i8_lookup``) against
the numpy layers of int8_lookup.py / int8_concat.py, bit for bit: float inputs off the code grid
(ties, NaN, inf), per-tensor and per-channel tables, int8 / uint8, codes buffers in and out."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_mrvl.sim import int8, int8_native
from onnx_mrvl.sim.int8_concat import Int8Concat
from onnx_mrvl.sim.int8_lookup import Int8Lookup
from onnx_mrvl.sim.int8_table_native import prepare_concat, prepare_lookup

from test_int8_native import _codes, _decode

pytestmark = pytest.mark.skipif(int8_native.lib() is None, reason=int8_native.why_disabled() or "no native int8")


def _q(rng, dt):
    z = int(rng.integers(0, 256)) if dt == "uint8" else int(rng.integers(-40, 40))
    return float(rng.random() * 0.1 + 1e-3), z, dt


def _x(rng, shape, q):
    x = (rng.standard_normal(shape) * 40 * q[0]).astype(np.float32)
    flat = x.reshape(-1)
    n = min(flat.size, 40)
    flat[:n] = ((rng.integers(-60, 60, n) + 0.5) * np.float32(q[0])).astype(np.float32)   # ties of x / s
    if flat.size > 45:
        flat[40:43] = [np.nan, np.inf, -np.inf]
    return x


def _floats_match(fn, apply, *xs) -> None:
    """The native ``fn`` on float inputs: numpy's ``apply``, bit for bit."""
    want, _ = apply(*xs)
    got, ok = fn(*xs)
    assert ok and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _codes_match(fn, apply, xs, qs, qo, codes_in=None) -> None:
    """``fn`` on the fake-quantized ``xs`` (as codes buffers where ``codes_in``, default all), codes out:
    the values numpy's ``apply`` gives."""
    xq = [int8.fake_quant(x, *q) for x, q in zip(xs, qs)]
    codes_in = codes_in or (True,) * len(xs)
    want = apply(*xq)[0]
    out = np.zeros(want.shape, np.float32)
    fn(*(_codes(x, q) if c else x for x, q, c in zip(xq, qs, codes_in)), out=out, codes_in=codes_in, codes_out=True)
    np.testing.assert_array_equal(_decode(out, qo), want)


@pytest.mark.parametrize("channels", [1, 37])
@pytest.mark.parametrize("dt_in,dt_out", [("int8", "int8"), ("uint8", "uint8"), ("int8", "uint8")])
def test_lookup(channels, dt_in, dt_out):
    rng = np.random.default_rng(channels + len(dt_in) + 3 * len(dt_out))
    qi, qo = _q(rng, dt_in), _q(rng, dt_out)
    lo, hi = int8.QRANGE[dt_out]
    table = rng.integers(lo, hi + 1, (channels, 256)).astype(np.int32)
    params = dict(in_scale=qi[0], in_zero_point=qi[1], in_dtype=dt_in, out_scale=qo[0], out_zero_point=qo[1],
                  out_dtype=dt_out)
    layer = Int8Lookup(table, params)
    fn = prepare_lookup(layer)
    for shape in ((2, 9, 7, 37), (1, 5, 37), (37,), (3, 1, 1, 37)):
        x = _x(rng, shape, qi)
        _floats_match(fn, layer.apply, x)
        _codes_match(fn, layer.apply, [x], [qi], qo)


@pytest.mark.parametrize("dt", ["int8", "uint8"])
def test_concat(dt):
    rng = np.random.default_rng(5 + len(dt))
    qs = [_q(rng, dt) for _ in range(3)]
    qo = qs[1] if dt == "int8" else _q(rng, dt)         # one input already in the output's quantization
    params = dict(in_dtype=dt, in_scales=[q[0] for q in qs], in_zero_points=[q[1] for q in qs], out_scale=qo[0],
                  out_zero_point=qo[1], out_dtype=dt)
    for axis in (3, -1):
        layer = Int8Concat(params, axis, 3)
        fn = prepare_concat(layer)
        xs = [_x(rng, (2, 6, 5, c), q) for c, q in zip((17, 64, 3), qs)]
        _floats_match(fn, layer.apply, *xs)
        _codes_match(fn, layer.apply, xs, qs, qo, codes_in=(True, False, True))
    assert prepare_concat(Int8Concat(params, 1, 3)) is None      # along another axis: numpy


@pytest.mark.parametrize("requant", ["qlinear", "float"])
def test_avgpool(requant):
    """int8 Avgpool2D (sim/int8_pool_native.py): kernels 2x2 / 3x3 / 3x2, strides, pads, ceil mode,
    count_include_pad, dilation, int8 / uint8, float and codes buffers."""
    from onnx_mrvl.sim.int8_pool_native import prepare_avgpool
    from onnx_mrvl.sim.pooling import pool_geometry, window_counts
    rng = np.random.default_rng(11 + len(requant))
    checked = 0
    for trial in range(24):
        dt_in, dt_out = ("int8", "uint8")[trial % 2], ("int8", "uint8")[(trial // 2) % 2]
        qi = _q(rng, dt_in)
        qo = qi if trial % 3 == 0 and dt_in == dt_out else _q(rng, dt_out)
        params = dict(in_scale=qi[0], in_zero_point=qi[1], in_dtype=dt_in, out_scale=qo[0], out_zero_point=qo[1],
                      out_dtype=dt_out, requant=requant)
        k = (2, 3, 3)[trial % 3]
        p = int(rng.integers(0, k))
        geo = dict(kernel_size=[k, k - (trial % 4 == 3)], strides=[1 + trial % 2, 1 + (trial // 3) % 2],
                   padding=[p, p, min(p + 1, k - 1), p], ceil_mode=(trial // 4) % 2,
                   count_include_pad=(trial // 5) % 2, dilation=[1, 1 + (trial % 7 == 6)])
        pool = int8.Int8Pool("Avgpool2D", params, geo)
        fn = prepare_avgpool(pool)
        x = _x(rng, (2, 9, 11, int(rng.integers(1, 40))), qi)
        with np.errstate(invalid="ignore"):              # numpy's 0 / 0 of a window of padding alone
            _floats_match(fn, pool.apply, x)
        (kh, kw), (sh, sw), (dh, dw), (t, l, b, r), (oh, ow) = pool_geometry(
            x, geo["kernel_size"], geo["strides"], geo["padding"], geo["dilation"], geo["ceil_mode"])
        inc = bool(geo["count_include_pad"])
        if not (window_counts(9, oh, kh, sh, t, b, dh, inc).all()
                and window_counts(11, ow, kw, sw, l, r, dw, inc).all()):
            with pytest.raises(ValueError, match="empty window"), np.errstate(invalid="ignore"):
                _codes_match(fn, pool.apply, [x], [qi], qo)         # a window of padding alone: numpy only
            continue
        _codes_match(fn, pool.apply, [x], [qi], qo)
        checked += 1
    assert checked >= 16


@pytest.mark.parametrize("dt_in,dt_out", [("int8", "int8"), ("uint8", "uint8"), ("uint8", "int8")])
def test_resize_nearest(dt_in, dt_out):
    from onnx_mrvl.sim.int8_table_native import prepare_resize
    rng = np.random.default_rng(len(dt_in) * 7 + len(dt_out))
    qi = _q(rng, dt_in)
    qo = qi if dt_in == dt_out else _q(rng, dt_out)
    params = dict(in_scale=qi[0], in_zero_point=qi[1], in_dtype=dt_in, out_scale=qo[0], out_zero_point=qo[1],
                  out_dtype=dt_out)
    for scales in ([2, 2], [1, 3], [3, 1]):
        pool = int8.Int8Pool("Resize", params, {"scales": scales})
        fn = prepare_resize(pool)
        x = _x(rng, (2, 5, 7, 19), qi)
        _floats_match(fn, pool.apply, x)
        _codes_match(fn, pool.apply, [x], [qi], qo)
