"""The native conv GEMM sums each output's k in order in float32, whatever its blocking.

docs/simulator.md: every product of two fp16 values is exact in float32 and the native kernel
accumulates them over k = (ky, kx, c) in order, from zero, one fused multiply-add each (which then
rounds as an add). Its k blocks (KC), pixel blocks, register tiles (12, 13, 8, 4, 2 rows), prefetches
and the in-place / packed reading of the input (1x1 rows, windows) only decide where the partial sums wait (registers,
or the output buffer in exact fp32) -- so the result must equal, bit for bit, a plain numpy loop
that adds the products k by k in float32. Geometries below cross the k-block boundaries (K = 27,
147, 512, 513, 576, 1152, 1300), read 1x1 inputs in place and packed (1024 channels), end in
partial column blocks (O = 40, 70) and partial or merged row tiles (49, 25, 13, 1 pixels), and fuse
a residual Sum2D. A change of the kernel's blocking that changed a bit fails here.
"""
import numpy as np
import pytest

from onnx_mrvl.sim import native
from onnx_mrvl.sim import kernels as K
from test_sim_native import _buildable

RNG = np.random.default_rng(20)

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


def f16(a):
    with np.errstate(over="ignore"):        # the special values overflow to inf on purpose
        return np.asarray(a, np.float64).astype(np.float16).astype(np.float32)


def im2col(x, kh, kw, stride, pad):
    """[pixels, K] with k = (ky, kx, c), zeros for padding (the native kernel's A)."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (w + 2 * pad - kw) // stride + 1
    cols = [xp[:, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride, :] for ky in range(kh) for kx in range(kw)]
    return np.concatenate(cols, axis=3).reshape(n * oh * ow, kh * kw * c), (n, oh, ow)


def sequential_conv(x, w, bias, stride, pad):
    """relu(sum_k A[:, k] W[k] in k order, float32, + bias) rounded to fp16; [n, oh, ow, o]."""
    o, kh, kw, _ = w.shape
    a, (n, oh, ow) = im2col(x, kh, kw, stride, pad)
    wk = w.transpose(1, 2, 3, 0).reshape(-1, o)             # [K, O], k = (ky, kx, c)
    acc = np.zeros((a.shape[0], o), np.float32)
    for k in range(a.shape[1]):
        acc = acc + a[:, k, None] * wk[None, k, :]         # exact product, one fp32 rounding
    y = acc + bias
    y = np.where(y < 0, np.float32(0), y)
    return f16(y).reshape(n, oh, ow, o)


CASES = [  # (n, h, w, c), o, k, stride, pad
    ((1, 30, 30, 3), 40, 3, 2, 1),       # K = 27, a stem-like small-C window
    ((1, 23, 23, 3), 70, 7, 2, 3),       # K = 147, one block, whole-window packing
    ((1, 7, 7, 512), 40, 1, 1, 0),       # K = 512: exactly one block, 49 pixels (a 13-row tile)
    ((1, 5, 5, 513), 40, 1, 1, 0),       # K = 513: a one-k last block, read in place
    ((1, 9, 9, 64), 70, 3, 1, 1),        # K = 576
    ((2, 5, 5, 128), 40, 3, 1, 1),       # K = 1152, batch 2 (tiles across images)
    ((1, 5, 5, 1300), 33, 1, 1, 0),      # K = 1300, three blocks, in place
    ((1, 7, 7, 1024), 40, 1, 1, 0),      # rows 4 KB apart: packed
    ((1, 1, 13, 100), 40, 3, 2, 1),      # 7 pixels, strided
    ((1, 1, 1, 700), 40, 1, 1, 0),       # one pixel
    # windows read in place (3-channel stride-2 stems, 6 channels at stride 1: 6 floats apart) for
    # the panels of 12 pixels inside one output row and the input, packed elsewhere
    ((1, 64, 64, 3), 64, 7, 2, 3),       # ResNet's stem at 32x32 output
    ((2, 50, 50, 3), 32, 3, 2, 1),       # MobileNet's stem, batch 2
    ((1, 20, 30, 6), 64, 3, 1, 1),
    ((1, 50, 50, 3), 40, 3, 2, 1),       # a last block of 8 channels: packed
    ((1, 16, 20, 64), 64, 3, 1, 1),      # windows 64 floats apart, K = 576 in one tile
    ((1, 30, 30, 64), 96, 3, 2, 1),      # 128 apart (stride 2)
    ((1, 14, 25, 256), 64, 3, 1, 1),     # 256 apart, K = 2304
    ((1, 20, 26, 3), 24, 3, 1, 1),       # a stride-1 stem of 17-32 channels: micro_win12's 12 windows
    ((1, 14, 14, 64), 256, 1, 1, 0),     # K = 64 in place over 8 channel blocks: direct_pipe, blocks inner
    ((1, 9, 12, 48), 64, 1, 1, 0),       # K = 48 in place, 9 whole tiles: direct_pipe block by block
]


@pytest.mark.parametrize("shape, o, k, stride, pad", CASES)
def test_native_conv_sums_k_in_order(monkeypatch, shape, o, k, stride, pad):
    assert native.on(), native.why_disabled()
    x = f16(RNG.standard_normal(shape))
    w = f16(RNG.standard_normal((o, k, k, shape[3])) / np.sqrt(k * k * shape[3]))
    bias = (RNG.standard_normal(o) * 0.1).astype(np.float32)
    ref = sequential_conv(x, w, bias, stride, pad)
    for threads in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        y, ok = K.Conv2D(w, bias=bias, strides=(stride, stride), padding=(pad,) * 4, activation="relu").apply(x)
        assert ok
        np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("c, pixels", [(64, 49), (600, 25), (1024, 13), (256, 1)])
def test_fused_residual_sums_k_in_order(monkeypatch, c, pixels):
    """A 1x1 conv with a fused Sum2D (ResNet's expansions): fp16(relu(fp16(conv) + res))."""
    from onnx_mrvl.sim import jit
    x = f16(RNG.standard_normal((1, 1, pixels, c)))
    w = f16(RNG.standard_normal((70, 1, 1, c)) / np.sqrt(c))
    bias = (RNG.standard_normal(70) * 0.1).astype(np.float32)
    conv16 = sequential_conv(x, w, bias, 1, 0)
    res = f16(RNG.standard_normal(conv16.shape))
    two = conv16 + res
    ref = f16(np.where(two < 0, np.float32(0), two))
    for threads in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        conv = K.Conv2D(w, bias=bias, activation="relu")
        assert conv.fusable_sum(x.shape)
        y, ok, ok2 = conv.apply_with_residual(x, res, jit.act_args("relu", None, None, 70))
        assert ok and ok2
        np.testing.assert_array_equal(y.view(np.uint32), ref.view(np.uint32))


def _special(shape):
    """fp16 values with large magnitudes (sums overflow to inf), zeros of both signs, an inf and a NaN."""
    x = f16(RNG.standard_normal(shape) * 2)
    flat = x.reshape(-1)
    flat[::37] = f16(RNG.standard_normal(flat[::37].shape) * 3e4)
    flat[5::41] = -0.0
    flat[7] = np.inf
    flat[11] = np.nan
    return x


ACTS = [("none", None), ("relu", None), ("clamp", {"min": -1.0, "max": 6.0}), ("leaky_relu", {"alpha": 0.1})]


@pytest.mark.parametrize("act, params", ACTS)
@pytest.mark.parametrize("shape, o, k", [((1, 1, 49, 64), 40, 1), ((1, 1, 13, 600), 16, 1),
                                         ((1, 7, 7, 24), 70, 3), ((2, 3, 5, 8), 33, 3),
                                         # tiles of <= 16 columns in pairs (micro_one24 / 25), a
                                         # 16-column tail block, 24 stem windows in place (micro_one_win24)
                                         ((1, 1, 49, 64), 16, 1), ((1, 7, 11, 40), 48, 1), ((1, 8, 60, 3), 16, 3)])
def test_short_epilogue_matches_the_general_one(monkeypatch, act, params, shape, o, k):
    """A conv with a bias and no scale or shift whose activation is none, relu or clamp takes the
    short epilogue (simple_epilogue in _native_conv.c); the same conv with a scale of ones (x * 1 is
    x, bit for bit, NaN and -0 included) takes the general one: the same bits and finiteness flags,
    with inf / NaN / overflowing inputs, partial column blocks (16, 33, 40, 48, 70 channels) and rows;
    tiles of at most 16 columns run two at a time (micro_one_lda's short epilogue)."""
    assert native.on(), native.why_disabled()
    x = _special(shape)
    w = f16(RNG.standard_normal((o, k, k, shape[3])) / np.sqrt(k * k * shape[3]))
    bias = (RNG.standard_normal(o) * 0.1).astype(np.float32)
    pads = (k // 2,) * 4
    for threads in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        short = K.Conv2D(w, bias=bias, padding=pads, activation=act, activation_params=params).apply(x)
        general = K.Conv2D(w, bias=bias, scale=np.ones(o, np.float32), padding=pads, activation=act,
                           activation_params=params).apply(x)
        assert short[1] == general[1]
        np.testing.assert_array_equal(short[0].view(np.uint32), general[0].view(np.uint32))
    assert not short[1]                     # the inputs overflow some sums: the flag is exercised


@pytest.mark.parametrize("sum_act, params", ACTS)
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("c, pixels, o", [(64, 49, 40), (128, 12, 70), (1024, 25, 32), (600, 1, 16),
                                           (64, 49, 16), (40, 48, 48)])
def test_short_epilogue_with_a_fused_residual(monkeypatch, sum_act, params, act, c, pixels, o):
    """The fused Sum2D in the short epilogue (its residual rows prefetched) against the general one."""
    from onnx_mrvl.sim import jit
    x = _special((1, 1, pixels, c))
    w = f16(RNG.standard_normal((o, 1, 1, c)) / np.sqrt(c))
    bias = (RNG.standard_normal(o) * 0.1).astype(np.float32)
    res = _special((1, 1, pixels, o))
    args = jit.act_args(sum_act, params, None, o)
    for threads in ("1", "2"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        short = K.Conv2D(w, bias=bias, activation=act).apply_with_residual(x, res, args)
        general = K.Conv2D(w, bias=bias, scale=np.ones(o, np.float32), activation=act).apply_with_residual(x, res, args)
        assert short[1:] == general[1:]
        np.testing.assert_array_equal(short[0].view(np.uint32), general[0].view(np.uint32))
