"""Simulator kernels against independent float64 references (naive loops) and onnxruntime.

Every reference takes the same fp16-rounded inputs, computes in float64, and is rounded to fp16;
the kernel must match within 1 fp16 ulp plus the float32 accumulation bound (K * 2**-24 * sum|terms|,
which only matters where a result cancels to far below its terms).
"""
import logging

import numpy as np
import pytest

from onnx_mrvl.sim import activations as A
from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim.fp16 import fp16_ulp, is_fp16_exact, round_fp16_, to_fp16_values

RNG = np.random.default_rng(1234)


def f16(a):
    with np.errstate(over="ignore"):
        return np.asarray(a, np.float64).astype(np.float16).astype(np.float32)


def rnd(*shape, scale=1.0):
    return f16(RNG.standard_normal(shape) * scale)


def assert_fp16_match(out, ref64, acc_terms=None, k=0):
    """out within 1 fp16 ulp of the fp16-rounded float64 reference (+ the fp32 accumulation bound)."""
    out = np.asarray(out)
    ref64 = np.asarray(ref64, np.float64)
    assert out.shape == ref64.shape, (out.shape, ref64.shape)
    assert out.dtype == np.float32
    assert is_fp16_exact(out), "kernel output is not fp16-exact"
    ref16 = f16(ref64).astype(np.float64)
    both_inf = np.isinf(ref16) & (out == ref16)
    tol = fp16_ulp(ref64)
    if acc_terms is not None:
        tol = tol + (k + 4) * 2.0 ** -24 * np.asarray(acc_terms, np.float64)
    err = np.abs(out.astype(np.float64) - ref16)
    bad = ~both_inf & ~(err <= tol)
    assert not bad.any(), f"{bad.sum()} mismatches, worst {err[bad].max()} (tol {tol[bad].min()})"


# ---------------------------------------------------------------- fp16 rounding

def test_round_fp16_matches_astype_on_random_bit_patterns_and_specials():
    u = RNG.integers(0, 2 ** 32, size=1 << 21, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0.0, -0.0, 65504, 65519.99, 65520, 65536, -65520, 1e30, -3e38, np.inf, -np.inf,
                         np.nan, 2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -25 * 1.0000001,
                         1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2049, 2051, -2051, 6.1e-5], np.float32)
    x = np.concatenate([u.view(np.float32), specials])
    got = x.copy()
    round_fp16_(got)
    with np.errstate(all="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


def test_round_fp16_ties_to_even_and_overflow_flag():
    # ties: 1 + 2**-11 lies halfway between 1 and 1 + 2**-10 -> even (1); 1 + 3*2**-11 -> 1 + 2**-9
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2049.0, 2051.0, 2.0 ** -25, 3 * 2.0 ** -25], np.float32)
    assert round_fp16_(x) is True
    np.testing.assert_array_equal(x, [1.0, 1 + 2.0 ** -9, 2048.0, 2052.0, 0.0, 2.0 ** -23])
    y = np.array([65519.0, 65520.0, -70000.0], np.float32)
    assert round_fp16_(y) is False
    np.testing.assert_array_equal(y, [65504.0, np.inf, -np.inf])


# ---------------------------------------------------------------- conv

def ref_conv(x, w, bias=None, strides=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), groups=1, absval=False):
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    if absval:
        x, w = np.abs(x), np.abs(w)
    n, h, wd, c = x.shape
    o, kh, kw, cg = w.shape
    t, l, b, r = pads
    xp = np.zeros((n, h + t + b, wd + l + r, c))
    xp[:, t:t + h, l:l + wd] = x
    oh = (h + t + b - dil[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + l + r - dil[1] * (kw - 1) - 1) // strides[1] + 1
    og = o // groups
    out = np.zeros((n, oh, ow, o))
    for y in range(oh):
        for xx in range(ow):
            for oc in range(o):
                g = oc // og
                ys, xs = y * strides[0], xx * strides[1]
                patch = xp[:, ys:ys + dil[0] * (kh - 1) + 1:dil[0], xs:xs + dil[1] * (kw - 1) + 1:dil[1],
                           g * cg:(g + 1) * cg]
                out[:, y, xx, oc] = (patch * w[oc]).sum(axis=(1, 2, 3))
    if bias is not None and not absval:
        out += np.asarray(bias, np.float64)
    return out


CONV_CASES = [
    # shape, O, (kh, kw), strides, pads [t,l,b,r], dilation, groups
    ((1, 7, 8, 3), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((2, 9, 7, 4), 6, (3, 2), (2, 3), (0, 2, 3, 1), (2, 1), 2),        # asymmetric pads, grouped
    ((1, 6, 6, 2), 3, (2, 2), (1, 1), (3, 2, 2, 3), (1, 1), 1),        # pads >= kernel
    ((1, 11, 10, 3), 5, (2, 2), (3, 4), (0, 0, 0, 0), (1, 1), 1),      # stride > kernel
    ((1, 12, 12, 4), 4, (3, 3), (1, 2), (2, 3, 2, 3), (3, 2), 1),      # dilation 2-3
    ((1, 8, 8, 6), 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),        # depthwise, multiplier 1
    ((1, 8, 9, 3), 6, (3, 3), (2, 2), (1, 0, 1, 2), (1, 2), 3),        # depthwise, multiplier 2
    ((1, 5, 5, 4), 8, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),        # 1x1 GEMM
    ((2, 5, 6, 4), 8, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 1),        # 1x1 strided
    ((1, 9, 9, 8), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),        # grouped conv
    ((1, 3, 40, 5), 7, (3, 5), (1, 1), (1, 2, 1, 2), (1, 1), 1),       # wide rows: several GEMM blocks
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv2d_matches_float64_reference(case):
    shape, o, (kh, kw), strides, pads, dil, groups = case
    x = rnd(*shape)
    w = rnd(o, kh, kw, shape[3] // groups, scale=0.5).astype(np.float16)
    bias = RNG.standard_normal(o).astype(np.float32)
    y = K.conv2d(x, w, bias=bias, strides=strides, padding=pads, dilation=dil, groups=groups)
    ref = ref_conv(x, w, bias, strides, pads, dil, groups)
    terms = ref_conv(x, w, None, strides, pads, dil, groups, absval=True) + np.abs(bias)
    assert_fp16_match(y, ref, terms, kh * kw * shape[3] // groups)


def test_conv2d_epilogue_scale_shift_and_activations():
    x, w = rnd(1, 6, 6, 3), rnd(5, 3, 3, 3, scale=0.4)
    bias, scale, shift = (RNG.standard_normal(5).astype(np.float32) for _ in range(3))
    slope = np.linspace(0.05, 0.5, 5).astype(np.float32)
    base = (ref_conv(x, w, bias, pads=(1, 1, 1, 1)) * scale.astype(np.float64)) + shift.astype(np.float64)
    terms = (ref_conv(x, w, None, pads=(1, 1, 1, 1), absval=True) + np.abs(bias)) * np.abs(scale) + np.abs(shift)
    acts = {"relu": np.maximum(base, 0), "prelu": np.where(base >= 0, base, base * slope),
            "hard_swish": base * np.clip(base / 6 + 0.5, 0, 1),
            "clamp": np.clip(base, -0.5, 0.75)}
    for name, want in acts.items():
        y = K.conv2d(x, w, bias=bias, scale=scale, shift=shift, padding=(1, 1, 1, 1), activation=name,
                     activation_params={"min": -0.5, "max": 0.75}, slope=slope)
        assert_fp16_match(y, want, terms, 27)


def test_conv2d_overflow_goes_to_inf():
    x = np.full((1, 2, 2, 4), 60000.0, np.float32)
    w = np.ones((1, 1, 1, 4), np.float16)
    conv = K.Conv2D(w)
    y, finite = conv.apply(x)
    assert finite is False
    assert np.isinf(y).all() and (y > 0).all()
    y2, finite2 = K.Conv2D(w * np.float16(0.25)).apply(x)      # 4 * 15000 = 60000 stays finite
    assert finite2 is True and (y2 == 60000).all()


# ---------------------------------------------------------------- fc / activations

def test_fc_matches_reference():
    x, w = rnd(3, 50), rnd(7, 50, scale=0.3)
    bias = RNG.standard_normal(7).astype(np.float32)
    y = K.fc(x, w.astype(np.float16), bias=bias, activation="leaky_relu", activation_params={"alpha": 0.1})
    z = x.astype(np.float64) @ w.astype(np.float64).T + bias
    terms = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T + np.abs(bias)
    assert_fp16_match(y, np.where(z >= 0, z, 0.1 * z), terms, 50)


def _sig(v):
    return 1 / (1 + np.exp(-v))


ACT_REFS = {
    "none": lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "clamp": lambda v: np.clip(v, -1.5, 2.0),
    "leaky_relu": lambda v: np.where(v >= 0, v, 0.2 * v),
    "sigmoid": _sig,
    "tanh": np.tanh,
    "hard_sigmoid": lambda v: np.clip(0.3 * v + 0.4, 0, 1),
    "hard_swish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    "silu": lambda v: v * _sig(v),
}


@pytest.mark.parametrize("name", sorted(ACT_REFS))
def test_activation_matches_reference(name):
    v = np.concatenate([rnd(2000, scale=4.0), f16([-100, -20, -6, -3, -0.0, 0, 3, 6, 20, 100])])
    params = {"min": -1.5, "max": 2.0, "alpha": 0.3 if name == "hard_sigmoid" else 0.2, "beta": 0.4}
    with np.errstate(over="ignore"):
        want = ACT_REFS[name](v.astype(np.float64))
    out = A.apply_activation(v.copy(), name, params)
    round_fp16_(out)
    assert_fp16_match(out, want)


def test_prelu_per_channel_slope_and_sigmoid_stability():
    v = rnd(4, 3, scale=3.0)
    slope = np.array([0.1, 0.5, 2.0], np.float32)
    out = A.apply_activation(v.copy(), "prelu", slope=slope)
    np.testing.assert_allclose(out, np.where(v >= 0, v, v * slope), rtol=1e-7)
    big = np.array([-1e4, -100.0, 100.0, 1e4], np.float32)
    with np.errstate(over="raise", invalid="raise"):     # no overflow / inf / nan inside sigmoid
        s = A.apply_activation(big.copy(), "sigmoid")
    np.testing.assert_allclose(s, [0.0, _sig(-100.0), 1.0, 1.0], rtol=1e-6, atol=1e-40)
    with pytest.raises(ValueError, match="unknown activation"):
        A.apply_activation(v.copy(), "softsign")


# ---------------------------------------------------------------- pooling

def ref_pool(x, k, s, pads, ceil_mode, dil=(1, 1), kind="max", include_pad=0):
    x = np.asarray(x, np.float64)
    n, h, w, c = x.shape
    t, l, b, r = pads
    oh = K.pool_output_size(h, k[0], s[0], t, b, dil[0], ceil_mode)
    ow = K.pool_output_size(w, k[1], s[1], l, r, dil[1], ceil_mode)
    out = np.zeros((n, oh, ow, c))
    for y in range(oh):
        for xx in range(ow):
            vals, cnt = [], 0
            for i in range(k[0]):
                for j in range(k[1]):
                    py, px = y * s[0] - t + i * dil[0], xx * s[1] - l + j * dil[1]
                    inside = 0 <= py < h and 0 <= px < w
                    in_pad = -t <= py < h + b and -l <= px < w + r
                    if inside:
                        vals.append(x[:, py, px, :])
                    if inside or (include_pad and in_pad):
                        cnt += 1
            if kind == "max":
                out[:, y, xx] = np.max(vals, axis=0) if vals else -np.inf
            else:
                out[:, y, xx] = (np.sum(vals, axis=0) if vals else 0) / cnt
    return out


POOL_CASES = [
    # shape, k, s, pads, ceil, dilation
    ((1, 7, 7, 3), (3, 3), (2, 2), (1, 1, 1, 1), 0, (1, 1)),
    ((2, 6, 9, 2), (3, 2), (2, 3), (0, 1, 2, 0), 1, (1, 1)),    # asymmetric pads + ceil
    ((1, 5, 5, 2), (2, 2), (2, 2), (0, 0, 1, 1), 1, (2, 2)),    # dilation + ceil
    ((1, 4, 4, 1), (2, 2), (2, 2), (0, 0, 1, 1), 1, (1, 1)),    # ceil window starting in the pad: dropped
    ((1, 8, 8, 4), (3, 3), (4, 4), (0, 0, 0, 0), 1, (1, 1)),    # stride > kernel
    ((1, 9, 10, 2), (3, 3), (1, 1), (2, 2, 2, 2), 0, (3, 2)),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{i}" for i in range(len(POOL_CASES))])
def test_maxpool_exact(case):
    shape, k, s, pads, ceil, dil = case
    x = rnd(*shape)
    y = K.maxpool2d(x, k, s, pads, ceil, dil)
    np.testing.assert_array_equal(y, ref_pool(x, k, s, pads, ceil, dil).astype(np.float32))


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES[:5], ids=[f"pool{i}" for i in range(5)])
def test_avgpool_matches_reference(case, include_pad):
    shape, k, s, pads, ceil, _ = case
    x = rnd(*shape)
    y = K.avgpool2d(x, k, s, pads, ceil, include_pad)
    ref = ref_pool(x, k, s, pads, ceil, kind="avg", include_pad=include_pad)
    assert_fp16_match(y, ref, ref_pool(np.abs(x), k, s, pads, ceil, kind="avg", include_pad=include_pad),
                      k[0] * k[1])


def test_global_pools():
    x = rnd(2, 5, 6, 3)
    assert_fp16_match(K.global_avgpool2d(x), x.astype(np.float64).mean(axis=(1, 2), keepdims=True),
                      np.abs(x).astype(np.float64).mean(axis=(1, 2), keepdims=True), 30)
    np.testing.assert_array_equal(K.global_maxpool2d(x), x.max(axis=(1, 2), keepdims=True))


# ---------------------------------------------------------------- element-wise and data movement

def test_sum_mul_broadcast_constant_and_activation():
    a, b = rnd(1, 4, 5, 3), rnd(1, 1, 5, 3)
    assert_fp16_match(K.sum2d(a, b), a.astype(np.float64) + b)
    assert_fp16_match(K.mul2d(a, b, activation="relu"), np.maximum(a.astype(np.float64) * b, 0))
    op = rnd(3)
    assert_fp16_match(K.mul2d(a, operand=op.astype(np.float16)), a.astype(np.float64) * op)
    assert_fp16_match(K.sum2d(a, operand=op, activation="sigmoid"), _sig(a.astype(np.float64) + op))
    big = np.full((1, 1, 1, 2), 40000.0, np.float32)
    assert np.isinf(K.sum2d(big, big)).all()


def test_data_movement_kernels():
    x = rnd(2, 3, 4, 5)
    nchw = K.layout_transform(x, "NHWC", "NCHW")
    assert nchw.shape == (2, 5, 3, 4) and nchw.flags.c_contiguous
    np.testing.assert_array_equal(K.layout_transform(nchw, "NCHW", "NHWC"), x)
    np.testing.assert_array_equal(K.concat([x, x[..., :2]], 3), np.concatenate([x, x[..., :2]], 3))
    np.testing.assert_array_equal(K.reshape(x, [2, -1]), x.reshape(2, 60))
    up = K.resize_nearest(x, [2, 3])
    assert up.shape == (2, 6, 12, 5)
    for i in range(6):
        for j in range(12):
            np.testing.assert_array_equal(up[:, i, j], x[:, i // 2, j // 3])
    with pytest.raises(ValueError):
        K.layout_transform(x, "NCHW", "NCWH")


@pytest.mark.parametrize("axis,start,end", [(3, 0, 2), (3, 2, 5), (1, 1, 3), (2, 0, 4)])
def test_slice2d_kernel_and_layer_match_numpy_slicing(axis, start, end):
    """Slice2D is pure data movement: exactly numpy slicing of the stored axis, as a contiguous copy."""
    from onnx_mrvl.errors import CompileError
    from onnx_mrvl.sim.layers import build_layer
    from onnx_mrvl.sim.tensor_ops import slice_channels

    x = rnd(2, 3, 4, 5)
    want = np.take(x, np.arange(start, end), axis=axis)
    got = slice_channels(x, axis, start, end)
    assert got.flags.c_contiguous and got.dtype == np.float32 and not np.shares_memory(got, x)
    np.testing.assert_array_equal(got, want)
    layer = {"name": "l0", "layer_name": "Slice2D", "inputs": [0], "outputs": [1],
             "params": {"axis": axis, "start": start, "end": end}}
    _, fn = build_layer(layer, {})
    y, ok = fn(x)
    np.testing.assert_array_equal(y, want)
    assert ok and y.flags.c_contiguous
    with pytest.raises(ValueError):
        fn(x[:, :1, :1, :1])                             # the range does not fit this input
    with pytest.raises(CompileError, match="non-empty slice"):
        build_layer(dict(layer, params={"axis": axis, "start": end, "end": start}), {})


def test_to_fp16_values_rounds_and_errstate_silences_overflow(caplog, recwarn):
    with caplog.at_level(logging.WARNING):
        v = to_fp16_values(np.array([1e6, 1.0001, -1e9], np.float64))
    np.testing.assert_array_equal(v, [np.inf, 1.0, -np.inf])
    y = K.conv2d(np.full((1, 1, 1, 2), 65000.0, np.float32), np.full((1, 1, 1, 2), 2.0, np.float16))
    assert np.isinf(y).all()
    assert not [w for w in recwarn if "overflow" in str(w.message)]


# ---------------------------------------------------------------- cross-check with onnxruntime

def _ort(op, x_nchw, inits, **attrs):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    names = ["x"] + [f"i{k}" for k in range(len(inits))]
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_nchw.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for a, n in zip(inits, names[1:])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": np.ascontiguousarray(x_nchw)})[0]


@pytest.mark.parametrize("case", CONV_CASES, ids=[f"conv{i}" for i in range(len(CONV_CASES))])
def test_conv2d_matches_onnxruntime(case):
    shape, o, (kh, kw), strides, pads, dil, groups = case
    x = rnd(*shape)
    w = rnd(o, kh, kw, shape[3] // groups, scale=0.5)
    b = RNG.standard_normal(o).astype(np.float32)
    t, l, bt, r = pads
    ref = _ort("Conv", x.transpose(0, 3, 1, 2), [np.ascontiguousarray(w.transpose(0, 3, 1, 2)), b],
               strides=list(strides), pads=[t, l, bt, r], dilations=list(dil), group=groups)
    y = K.conv2d(x, w, bias=b, strides=strides, padding=pads, dilation=dil, groups=groups)
    terms = ref_conv(x, w, None, strides, pads, dil, groups, absval=True) + np.abs(b)
    assert_fp16_match(y, ref.transpose(0, 2, 3, 1), terms, kh * kw * shape[3] // groups)


@pytest.mark.parametrize("case", POOL_CASES, ids=[f"pool{i}" for i in range(len(POOL_CASES))])
def test_pools_match_onnxruntime(case):
    shape, k, s, pads, ceil, dil = case
    x = rnd(*shape)
    xc = x.transpose(0, 3, 1, 2)
    t, l, b, r = pads
    ref = _ort("MaxPool", xc, [], kernel_shape=list(k), strides=list(s), pads=[t, l, b, r], ceil_mode=ceil,
               dilations=list(dil))
    np.testing.assert_array_equal(K.maxpool2d(x, k, s, pads, ceil, dil), ref.transpose(0, 2, 3, 1))
    if dil == (1, 1):
        for inc in (0, 1):
            ref = _ort("AveragePool", xc, [], kernel_shape=list(k), strides=list(s), pads=[t, l, b, r],
                       ceil_mode=ceil, count_include_pad=inc)
            terms = ref_pool(np.abs(x), k, s, pads, ceil, kind="avg", include_pad=inc)
            assert_fp16_match(K.avgpool2d(x, k, s, pads, ceil, inc), ref.transpose(0, 2, 3, 1), terms,
                              k[0] * k[1])


# ---------------------------------------------------------------- parallel row blocks

@pytest.mark.parametrize("groups, k, stride", [(1, 3, 1), (1, 1, 1), (1, 1, 2), (4, 3, 2)])
def test_large_conv_split_into_parallel_row_blocks(monkeypatch, groups, k, stride):
    from numpy.lib.stride_tricks import sliding_window_view

    import onnx_mrvl.sim.kernels as kernels_mod
    x = rnd(2, 20, 18, 64)
    w = rnd(64, k, k, 64 // groups, scale=0.1)
    p = k // 2
    conv = K.Conv2D(w, strides=(stride, stride), padding=(p,) * 4, groups=groups)
    outs, nblocks = [], []
    real_run_all = kernels_mod.run_all

    def counting_run_all(fn, items):
        nblocks.append(len(items))
        return real_run_all(fn, items)
    monkeypatch.setattr(kernels_mod, "run_all", counting_run_all)
    monkeypatch.setattr(kernels_mod.native, "ENABLED", False)        # the numpy row blocks (see test_sim_native)
    monkeypatch.setattr(kernels_mod, "_PARALLEL_MACS", 1 << 16)      # split even these small layers
    for nw in (1, 3):
        monkeypatch.setattr(kernels_mod, "workers", lambda nw=nw: nw)
        outs.append(conv(x))
    # row blocks by the shape alone (kernels._GEMM_PARTS): the same blocks, the same bits, on 1 and 3 workers
    assert nblocks[0] == nblocks[1] >= 3, nblocks
    assert np.array_equal(outs[0], outs[1])
    xp = np.pad(x.astype(np.float64), ((0, 0), (p, p), (p, p), (0, 0)))
    win = sliding_window_view(xp, (k, k), axis=(1, 2))[:, ::stride, ::stride]   # N,OH,OW,C,KH,KW
    cg, og = 64 // groups, 64 // groups
    wg = w.astype(np.float64).reshape(groups, og, k, k, cg)
    wing = win.reshape(win.shape[:3] + (groups, cg, k, k))
    ref = np.einsum("nhwgcij,goijc->nhwgo", wing, wg).reshape(win.shape[:3] + (64,))
    terms = np.einsum("nhwgcij,goijc->nhwgo", np.abs(wing), np.abs(wg)).reshape(ref.shape)
    for y in outs:
        assert_fp16_match(y, ref, terms, k * k * cg)
