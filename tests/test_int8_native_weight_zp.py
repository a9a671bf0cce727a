"""The native int8 kernels with weight zero points (asymmetric int8 / uint8 weights: onnxruntime's
quantizer on weights it sees as activations, TFLite uint8 exports) against the numpy path of
sim/int8.py, bit for bit. GEMM convs / FC subtract ``z_w[o] * (the row's byte sum)`` from the
accumulators, depthwise convs multiply by ``q_w - z_w`` as two int8 halves (docs/simulator.md
"int8 kernels")."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_mrvl.sim import int8, int8_native, native
from test_int8_native import add_params

pytestmark = pytest.mark.skipif(int8_native.lib() is None, reason=int8_native.why_disabled() or "no native int8")


def _zp(rng, dt):
    return int(rng.integers(0, 256)) if dt == "uint8" else int(rng.integers(-128, 128))


def _params(rng, dt_in, dt_out, out_scale=0.3):
    return dict(in_scale=0.05, in_zero_point=_zp(rng, dt_in), in_dtype=dt_in, out_scale=out_scale,
                out_zero_point=_zp(rng, dt_out), out_dtype=dt_out)


def _weight_zp(rng, o, per_channel):
    """Zero points over the whole int8 range, so that q_w - z_w reaches +-255."""
    z = rng.integers(-128, 128, o if per_channel else 1)
    z[0] = -128
    if z.size > 1:
        z[1] = 127
    return np.broadcast_to(z, (o,)).astype(np.int32).copy()


def _conv(rng, c, o, k, stride, dil, groups, dt_in, dt_out, per_channel, act="none"):
    kernel = rng.integers(-128, 128, (o, k, k, c // groups)).astype(np.int8)
    kernel.reshape(o, -1)[0, 0], kernel.reshape(o, -1)[-1, -1] = 127, -128      # the extreme codes
    pad = [k // 2, max(0, k // 2 - 1), k // 2, k // 2 + 1] if k > 1 else [0, 0, 0, 0]
    ap = {"min": -1.0, "max": 6.0} if act == "clamp" else None
    return int8.Int8Conv2D(kernel, rng.integers(-5000, 5000, o).astype(np.int32),
                           (rng.random(o) * 0.002 + 1e-4).astype(np.float32), _params(rng, dt_in, dt_out),
                           [stride, stride], pad, [dil, dil], groups, act, ap,
                           weight_zero_point=_weight_zp(rng, o, per_channel))


def _input(rng, shape, layer, specials=True):
    lo, hi = int8.QRANGE[layer.in_q[2]]
    x = ((rng.integers(lo, hi + 1, shape) - layer.in_q[1]) * np.float32(layer.in_q[0])).astype(np.float32)
    if specials:                            # values off the grid, NaN, +-inf (quantized first)
        flat = x.reshape(-1)
        idx = rng.choice(flat.size, size=max(3, flat.size // 20), replace=False)
        flat[idx] = (rng.standard_normal(idx.size) * 8).astype(np.float32)
        flat[idx[0]], flat[idx[1]], flat[idx[2]] = np.nan, np.inf, -np.inf
    return x


@pytest.mark.parametrize("k,stride,dil", [(1, 1, 1), (1, 2, 1), (3, 1, 1), (3, 2, 1), (3, 1, 2), (5, 2, 1), (7, 1, 1)])
@pytest.mark.parametrize("groups,c,o", [(1, 3, 24), (1, 20, 70), (4, 16, 12), (24, 24, 24), (1, 64, 130)])
def test_conv_with_weight_zero_points_equals_numpy(k, stride, dil, groups, c, o):
    rng = np.random.default_rng(k * 100 + stride * 10 + dil + c)
    for dt_in, dt_out, per_channel, act in (("int8", "int8", True, "none"), ("uint8", "uint8", False, "relu"),
                                            ("uint8", "int8", True, "clamp")):
        layer = _conv(rng, c, o, k, stride, dil, groups, dt_in, dt_out, per_channel, act)
        fn = int8_native.prepare(layer)
        assert fn is not None                             # no longer the numpy path
        x = _input(rng, (2, 13, 11, c), layer)
        ref, _ = layer.apply(x)
        got, ok = fn(x)
        assert ok
        np.testing.assert_array_equal(got, ref)


def test_fc_with_weight_zero_points_equals_numpy():
    rng = np.random.default_rng(7)
    for n, k, o, dt, per_channel in ((1, 2048, 1000, "int8", True), (8, 100, 37, "uint8", False),
                                     (13, 5, 1, "int8", True), (7, 64, 64, "uint8", True)):
        w = rng.integers(-128, 128, (o, k)).astype(np.int8)
        layer = int8.Int8FC(w, rng.integers(-9000, 9000, o).astype(np.int32),
                            (rng.random(o) * 0.002 + 1e-4).astype(np.float32), _params(rng, dt, dt), "none", None,
                            weight_zero_point=_weight_zp(rng, o, per_channel))
        x = _input(rng, (n, k), layer)
        np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], layer.apply(x)[0])


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_weight_zero_points_over_every_thread_split(monkeypatch, threads):
    """Row panels, channel blocks and depthwise row / channel parts: each part's byte sums are its
    own rows'."""
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    rng = np.random.default_rng(5)
    for (h, c, o, k, s, g) in ((56, 64, 64, 3, 1, 1), (7, 512, 2048, 1, 1, 1), (28, 144, 144, 3, 2, 144),
                               (30, 3, 64, 7, 2, 1), (14, 96, 200, 1, 1, 1), (40, 96, 96, 5, 1, 96)):
        layer = _conv(rng, c, o, k, s, 1, g, "int8", "uint8", True, "relu")
        x = _input(rng, (1, h, h, c), layer, specials=False)
        np.testing.assert_array_equal(int8_native.prepare(layer)(x)[0], layer.apply(x)[0])


def test_codes_out_with_weight_zero_points():
    """The static plan's codes between int8 layers (bytes q + off out): the same codes."""
    rng = np.random.default_rng(11)
    for g, c, o in ((1, 32, 64), (32, 32, 32)):
        layer = _conv(rng, c, o, 3, 1, 1, g, "uint8", "int8", True)
        x = _input(rng, (1, 9, 10, c), layer, specials=False)
        ref, _ = layer.apply(x)
        buf = np.zeros(ref.shape, np.float32)
        call = int8_native.prepare(layer).bind(x, out=buf, codes_in=(False,), codes_out=True)
        assert call() == 1
        codes = buf.view(np.uint8).reshape(-1)[: ref.size].astype(np.int64) - 128      # int8 out: q + 128
        s, z, _ = layer.out_q
        np.testing.assert_array_equal(((codes - z) * np.float32(s)).astype(np.float32), ref.reshape(-1))


@pytest.mark.parametrize("saturating", [False, True])
def test_fused_residual_sum_with_weight_zero_points(saturating):
    """A conv + Sum2D in one call (the AVX2 build's strip tiles) with weight zero points, exact and in
    onnxruntime's U8S8 arithmetic (raw codes large enough for the int16 clamp to show)."""
    if saturating and native.variant() != "avx2":
        pytest.skip("the saturating native kernel is the AVX2 build's")
    rng = np.random.default_rng(3 + saturating)
    for k, c, o, nhw in ((1, 64, 256, (1, 7, 7)), (3, 24, 40, (1, 7, 7)), (1, 32, 48, (2, 6, 5))):
        layer = _conv(rng, c, o, k, 1, 1, 1, "uint8", "uint8", True)
        zx = layer.in_q[1]
        x = ((rng.integers(195, 256, nhw + (c,)) - zx) * np.float32(0.05)).astype(np.float32)
        if saturating:
            exact, _ = layer.apply(x)
            layer.u8s8_sat = True
            assert not np.array_equal(layer.apply(x)[0], exact)        # the clamp shows
        y_conv, _ = layer.apply(x)
        q = (0.4, 7, "uint8")
        params = add_params("qlinear", layer.out_q, q, q)
        add = int8.Int8Add(params, "relu", None)
        other = ((rng.integers(0, 256, y_conv.shape) - q[1]) * np.float32(q[0])).astype(np.float32)
        ref, _ = add.apply(y_conv, other)
        prm = int8_native.prepare_add(add).add_prm.copy()
        out = np.zeros(ref.shape, np.float32)
        call = int8_native.prepare(layer).bind_fused(x, out=out, codes_in=(False,), add_prm=prm, slot=0, other=other)
        assert call() == 1
        np.testing.assert_array_equal(out, ref)
