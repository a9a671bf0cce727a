"""Conv tiles whose channel block has 17-24 columns (MobileNetV2's 24-channel projections, the last
block of O = 56, 88) sum their second vector's 8 live lanes in 256-bit FMAs (``fma_rows24``,
``kernel_paths`` bit 512) instead of 512-bit ones: the same FMAs in the same order per value, so the
outputs, finiteness flags and overflow reports must equal the 512-bit path's bit for bit, on one and
two threads: in place (1x1) and packed (3x3, k blocks crossed at K = 576), full, partial and merged
13-row tiles, the short and the general epilogue, with and without a fused Sum2D, and inside the
fused depthwise + 1x1 pass."""
import numpy as np
import pytest

from onnx_mrvl.sim import jit, native
from onnx_mrvl.sim import kernels as K
from test_sim_kernel_paths import HALF, _conv_and_sum_same, _dwpw_block_same
from test_sim_native import _buildable, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


@pytest.mark.parametrize("shape, o, k, stride", [
    ((1, 56, 56, 144), 24, 1, 1), ((1, 14, 14, 96), 24, 1, 1), ((1, 7, 7, 40), 20, 1, 1),
    ((2, 5, 9, 33), 17, 1, 1), ((1, 9, 11, 24), 56, 1, 1), ((1, 1, 37, 20), 88, 1, 1),
    ((1, 14, 14, 1024), 24, 1, 1), ((1, 13, 13, 64), 24, 3, 1), ((1, 20, 20, 16), 24, 3, 2),
    ((2, 7, 7, 130), 22, 3, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_conv_of_17_to_24_columns_in_256_bit_halves(monkeypatch, shape, o, k, stride, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, threads] + list(shape))
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::97] = 9000.0
    x.reshape(-1)[5::3001] = np.nan
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    convs = [dict(bias=rng.standard_normal(o), activation="clamp", activation_params={"min": 0.0, "max": 6.0}),
             dict(bias=rng.standard_normal(o)),
             dict(bias=rng.standard_normal(o), scale=rng.standard_normal(o), activation="leaky_relu",
                  activation_params={"alpha": 0.1})]
    for conv in convs:
        conv.update(strides=(stride, stride), padding=(k // 2,) * 4)
        _conv_and_sum_same(HALF, w, conv, x, rng, (jit.act_args("none", None, None, o),
                                                   jit.act_args("relu", None, None, o)))


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("h, w", [(56, 56), (28, 28), (37, 29)])
def test_24_column_projection_in_a_fused_depthwise_and_1x1(monkeypatch, threads, h, w):
    """A MobileNetV2-like block (24 -> 144 -> depthwise -> 24, residual) through a Simulator's
    static plan: the projection runs inside dw_pw's bands, its residual fused."""
    _dwpw_block_same(HALF, monkeypatch, h, w, 24, 144, (24, 25), scale=4, threads=threads, spike=True)
