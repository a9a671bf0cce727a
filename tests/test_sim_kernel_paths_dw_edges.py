"""A depthwise row's two ends as 8-pixel blocks (``kernel_paths`` bit 1048576: ``dw_edge_left`` /
``dw_edge_right``, a 3-wide kernel with one column of left padding, rows of 9 pixels or more) against
the pixel-by-pixel code before them: each end pixel skips its padded tap and sums the others in the
same order, so the values, finiteness flags and overflow reports must be the same bits, on one and
two threads, alone and inside the fused depthwise + 1x1 pass."""
import numpy as np
import pytest

from onnx_mrvl.sim import native
from onnx_mrvl.sim import kernels as K
from test_sim_kernel_paths import _both, _dwpw_block_same, _same
from test_sim_native import _buildable, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")
DW_EDGES = 1048576


@pytest.mark.parametrize("shape, stride, dil", [
    ((2, 9, 56, 40), 1, 1),      # both ends, a channel tail of 8 lanes, two images
    ((1, 6, 9, 16), 1, 1),       # 9 wide: the two end blocks overlap in 7 pixels
    ((1, 7, 14, 35), 1, 1),      # 14 wide (MobileNet's 14x14 maps), a tail of 3 lanes
    ((1, 12, 24, 48), 2, 1),     # stride 2, even width: the last pixel's right tap in range (no right block)
    ((1, 11, 23, 24), 2, 1),     # stride 2, odd width: a right block
    ((1, 13, 20, 16), 1, 2)])    # dilation 2: the rows 2 apart, the taps of a row 1 apart
@pytest.mark.parametrize("act", ["clamp", "hard_swish", "prelu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_row_ends_as_blocks(monkeypatch, shape, stride, dil, act, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng(list(shape) + [stride, dil, len(act)])
    c = shape[3]
    x = f16(rng.standard_normal(shape) * 3)
    x[0, shape[1] // 2, 0] = 65000.0                 # overflows and a NaN in the end pixels' windows
    x[-1, shape[1] // 2 + 1, -1, :5] = 65000.0
    x[0, 1, 1, c - 1] = np.nan
    x.reshape(-1)[3::97] = -0.0
    w = f16(rng.standard_normal((c, 3, 3, 1)) * 2)
    w[:2, :, 1] = -0.0                               # -0 weights on the end pixels' middle taps
    conv = dict(bias=rng.standard_normal(c), strides=(stride, stride), padding=(dil, 1, dil, 1),
                dilation=(dil, 1), groups=c, activation=act,
                activation_params={"min": -1.0, "max": 6.0} if act == "clamp" else None,
                slope=rng.standard_normal(c).astype(np.float32) * 0.2 if act == "prelu" else None)
    new, old = _both(DW_EDGES, lambda: K.Conv2D(w, **conv).apply(x))
    _same(new, old)
    assert new[1] is False                           # the NaN (and the overflows) flagged


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("h, w, spike", [(14, 14, False), (12, 20, True)])
def test_depthwise_row_ends_in_a_fused_depthwise_and_1x1(monkeypatch, threads, h, w, spike):
    """MobileNetV2-like blocks (24 -> 144 -> depthwise -> 24, residual) through a Simulator's static
    plan, whose depthwise + projection pair runs as one banded pass (dw_pw): same bits, same report."""
    _dwpw_block_same(DW_EDGES, monkeypatch, h, w, 24, 144, (h, w), threads=threads, spike=spike)


@pytest.mark.parametrize("k, stride, width", [(3, 1, 56), (3, 2, 23), (3, 1, 7), (5, 1, 20), (5, 2, 40), (7, 1, 19)])
@pytest.mark.parametrize("threads", [1, 2])
def test_depthwise_sum_of_negative_zeros_is_negative_zero_at_every_pixel(monkeypatch, k, stride, width, threads):
    """Each pixel's first tap inside the input is a product, not an FMA onto +0 (which turns a sum
    of -0 products into +0): channels whose weights are all -0, positive inputs, no bias and no
    activation give -0 at every pixel (interior blocks, row ends, borders pixel by pixel), as
    numpy's sum of the padded window (0 x -0 is -0 too) does."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([k, stride, width])
    c = 40
    x = f16(np.abs(rng.standard_normal((1, 9, width, c))) + 0.5)
    w = f16(rng.standard_normal((c, k, k, 1)))
    w[::3] = -0.0
    y, ok = K.Conv2D(w, strides=(stride, stride), padding=(k // 2,) * 4, groups=c).apply(x)
    assert ok and np.all(y[..., ::3] == 0) and np.signbit(y[..., ::3]).all()
    assert np.abs(y[..., 1::3]).min() > 0                       # the other channels are not zeros
