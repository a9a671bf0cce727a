"""Convs of one input and one output channel (``kernel_paths`` bit 131072, ``conv_one_channel``) and
1x1 stride-1 convs to one output channel (bit 262144, ``conv_one_out``): 16 output pixels as the
lanes instead of one GEMM tile row each, against the GEMM tiles, bit for bit (values, finiteness
flags, a fused Sum2D's too), on one and two threads; the sum order; where they apply."""
import numpy as np
import pytest

from onnx_mrvl.sim import jit, native
from onnx_mrvl.sim import kernels as K
from test_sim_kernel_paths import _both, _conv_and_sum_same, _same
from test_sim_native import _buildable, f16, special

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")
ONE_CHANNEL, ONE_OUT = 131072, 262144


@pytest.mark.parametrize("shape, k, stride, dil", [
    ((1, 1, 4001, 1), (1, 7), (1, 2), (1, 1)),     # basic-pitch's CQT filter: [1, 43849] -> [1, 21922]
    ((2, 1, 300, 1), (1, 6), (1, 2), (1, 1)),
    ((1, 9, 47, 1), (3, 3), (1, 1), (1, 1)),
    ((1, 20, 37, 1), (3, 5), (2, 3), (2, 1)),      # strides and dilations on both axes
    ((1, 1, 17, 1), (1, 17), (1, 1), (1, 1)),      # one output pixel
    ((1, 1, 80001, 1), (1, 7), (1, 2), (1, 1)),    # 280 K MACs in one row: split along it on two threads
])
@pytest.mark.parametrize("act", ["none", "relu", "prelu", "sigmoid"])
def test_one_channel_conv_is_the_gemm_bit_for_bit(monkeypatch, shape, k, stride, dil, act):
    rng = np.random.default_rng([shape[2], k[1], stride[1], len(act)])
    x = special(*shape, big=300)
    w = f16(rng.standard_normal((1, *k, 1)))
    conv = dict(bias=rng.standard_normal(1), scale=rng.standard_normal(1) + 2, strides=stride, dilation=dil,
                activation=act, slope=np.array([0.25], np.float32))
    for threads in (1, 2):
        monkeypatch.setattr(K, "workers", lambda t=threads: t)
        _conv_and_sum_same(ONE_CHANNEL, w, conv, x, rng, [jit.act_args(a, None, None, 1) for a in ("relu", "none")])


def test_overflow_flags_match():
    """An fp16 overflow in the conv and one only in the fused Sum2D: the same flags as the tiles'."""
    x = np.full((1, 1, 64, 1), 300.0, np.float32)
    w = f16(np.full((1, 1, 3, 1), 100.0))
    _same(*_both(ONE_CHANNEL, lambda: K.Conv2D(w).apply(x)))
    y, ok = K.Conv2D(w).apply(x)
    assert ok is False and np.isinf(y).all()
    small = np.full((1, 1, 64, 1), 100.0, np.float32)
    res = np.full((1, 1, 62, 1), 65450.0, np.float32)
    got = K.Conv2D(f16(np.full((1, 1, 3, 1), 0.5))).apply_with_residual(small, res, jit.act_args("none", None, None, 1))
    _same(*_both(ONE_CHANNEL, lambda: K.Conv2D(f16(np.full((1, 1, 3, 1), 0.5))).apply_with_residual(
        small, res, jit.act_args("none", None, None, 1))))
    assert got[1] is True and got[2] is False


def test_padded_or_wider_convs_keep_the_tiles():
    """Padding, two output channels, a strided or padded 1x1: the GEMM tiles (the switches change nothing)."""
    rng = np.random.default_rng(5)
    x1, x2 = special(1, 5, 40, 1, big=300), special(1, 5, 40, 2, big=300)
    for w, x, kw in ((f16(rng.standard_normal((1, 3, 3, 1))), x1, {"padding": (1, 1, 1, 1)}),
                     (f16(rng.standard_normal((2, 1, 3, 1))), x1, {}),
                     (f16(rng.standard_normal((1, 1, 3, 2))), x2, {}),
                     (f16(rng.standard_normal((1, 1, 1, 2))), x2, {"strides": (1, 2)}),
                     (f16(rng.standard_normal((1, 1, 1, 2))), x2, {"padding": (0, 1, 0, 1)})):
        _same(*_both(ONE_CHANNEL | ONE_OUT, lambda: K.Conv2D(w, **kw).apply(x)))
    assert native.on()


def test_taps_are_summed_in_the_gemm_order():
    """Data whose fp16 results depend on the order of the taps (large values cancelling around small
    ones): both paths give the sequential sum in (ky, kx) order -- one fp32 add per exact fp16
    product, from 0 -- and another order would not."""
    rng = np.random.default_rng(9)
    big = rng.choice([-2048.0, 2048.0, -1024.0, 1024.0], (1, 12, 40, 1))
    x = f16(np.where(rng.random(big.shape) < 0.5, big, rng.uniform(-0.01, 0.01, big.shape)))
    w = f16(rng.choice([-1.0, 1.0, 0.5, 3.0], (1, 3, 3, 1)))
    taps = [(ky, kx) for ky in range(3) for kx in range(3)]

    def sequential(order):
        acc = np.zeros((10, 38), np.float32)
        for ky, kx in order:
            acc = (acc + x[0, ky:ky + 10, kx:kx + 38, 0] * w[0, ky, kx, 0]).astype(np.float32)
        return acc.astype(np.float16).astype(np.float32)
    want = sequential(taps)
    assert not np.array_equal(want, sequential([(ky, kx) for kx in range(3) for ky in range(3)]))
    for y in _both(ONE_CHANNEL, lambda: K.Conv2D(w).apply(x)):
        np.testing.assert_array_equal(y[0][0, :, :, 0].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 40, 41, 24), (2, 7, 9, 8), (1, 5, 5, 3), (1, 33, 17, 100), (1, 1, 1, 2),
                                   (3, 1, 1, 600)])             # 600: the GEMM's k blocks of 512
@pytest.mark.parametrize("act", ["none", "relu", "prelu", "sigmoid"])
def test_one_output_channel_is_the_gemm_bit_for_bit(monkeypatch, shape, act):
    rng = np.random.default_rng([shape[1], shape[3], len(act)])
    x = special(*shape, big=300)
    w = f16(rng.standard_normal((1, 1, 1, shape[3])) * 0.3)
    conv = dict(bias=rng.standard_normal(1), scale=rng.standard_normal(1) + 2, activation=act,
                slope=np.array([0.25], np.float32))
    for threads in (1, 2):
        monkeypatch.setattr(K, "workers", lambda t=threads: t)
        _conv_and_sum_same(ONE_OUT, w, conv, x, rng, [jit.act_args(a, None, None, 1) for a in ("relu", "none")])


def test_one_output_channel_sums_the_channels_in_order():
    """Channel values cancelling around small ones: the sequential sum over the channels in order."""
    rng = np.random.default_rng(10)
    big = rng.choice([-2048.0, 2048.0, -1024.0, 1024.0], (1, 6, 50, 21))
    x = f16(np.where(rng.random(big.shape) < 0.5, big, rng.uniform(-0.01, 0.01, big.shape)))
    w = f16(rng.choice([-1.0, 1.0, 0.5, 3.0], (1, 1, 1, 21)))

    def sequential(order):
        acc = np.zeros((6, 50), np.float32)
        for c in order:
            acc = (acc + x[0, :, :, c] * w[0, 0, 0, c]).astype(np.float32)
        return acc.astype(np.float16).astype(np.float32)
    want = sequential(range(21))
    assert not np.array_equal(want, sequential(list(range(8, 16)) + list(range(8)) + list(range(16, 21))))
    for y in _both(ONE_OUT, lambda: K.Conv2D(w).apply(x)):
        np.testing.assert_array_equal(y[0][0, :, :, 0].view(np.uint32), want.view(np.uint32))


def test_fc_to_one_output_over_many_rows():
    """An FC of one output over more rows than the GEMV takes runs as the 1x1 conv: the same bits."""
    rng = np.random.default_rng(11)
    x = f16(rng.standard_normal((37, 70)))
    k = f16(rng.standard_normal((1, 70)) * 0.2)
    _same(*_both(ONE_OUT, lambda: K.FC(k, bias=np.array([0.5], np.float32), activation="relu").apply(x)))
