"""The native depthwise kernel's blocks of 4 pixels (maps whose interior row is 4-7 pixels wide:
7x7, 14x14 / 2) against the kernel without them (those pixels one by one, ``dw_paths(0)``): the
same taps summed in the same order, so the same bits and the same finiteness flag, on one and
two threads, alone and fused with the 1x1 conv that reads it (``dw_pw``)."""
import numpy as np
import pytest

from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim import native
from test_sim_native import _buildable, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler or no AVX-512 here")


def _both(build):
    """(with the blocks of 4, without them) of ``build()``"""
    lib = native.lib()
    try:
        lib.dw_paths(0)
        old = build()
        lib.dw_paths(1)
        new = build()
    finally:
        lib.dw_paths(1)
    return new, old


def _same(a, b):
    (ya, oka), (yb, okb) = a, b
    np.testing.assert_array_equal(ya.view(np.uint32), yb.view(np.uint32))
    assert oka == okb


@pytest.mark.parametrize("h, w, c, k, stride, pads", [
    (7, 7, 960, 3, 1, 1), (7, 7, 17, 3, 1, 1), (14, 14, 576, 3, 2, 1), (9, 6, 40, 3, 1, 1),
    (8, 10, 33, 3, 1, 1), (5, 9, 64, 3, 1, 0), (11, 12, 48, 5, 1, 2), (15, 15, 24, 3, 2, 1),
    (6, 13, 16, 3, 2, 0), (9, 9, 100, 3, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_blocks_of_4_same_bits(monkeypatch, h, w, c, k, stride, pads, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([h, w, c, k, stride])
    x = f16(rng.standard_normal((2, h, w, c)) * 3)
    x.reshape(-1)[::97] = 30000.0                  # some sums overflow fp16: the flags must agree
    wt = f16(rng.standard_normal((c, k, k, 1)) * 0.5)
    conv = dict(bias=rng.standard_normal(c), scale=rng.standard_normal(c), strides=(stride, stride),
                padding=(pads,) * 4, groups=c, activation="clamp", activation_params={"min": -1.0, "max": 6.0})
    new, old = _both(lambda: K.Conv2D(wt, **conv).apply(x))
    _same(new, old)
    ow = (w + 2 * pads - k) // stride + 1
    lo = (pads + stride - 1) // stride
    hi = min(ow, (w - 1 - (k - 1) + pads) // stride + 1)
    assert 4 <= hi - lo < 8 or hi - lo >= 8           # the case runs blocks (of 4 when 4..7)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_blocks_of_4_in_a_fused_depthwise_and_1x1(monkeypatch, threads):
    """MobileNetV2's last blocks at 7x7 (480 channels, residual) through a Simulator's static plan,
    whose depthwise + projection pair runs as one banded pass (dw_pw): same bits, same report."""
    import test_sim_dwpw as D
    from onnx_mrvl.sim import Simulator
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    monkeypatch.setattr(D, "RNG", np.random.default_rng(3))     # its tests' data stays theirs
    sim = Simulator.from_program(*D.block_program(1, 7, 7, c=80, e=480, out=80, residual=True))
    x = f16(np.random.default_rng(5).standard_normal((1, 7, 7, 80)))
    new, old = _both(lambda: (sim.run([x])[0], sim.last_overflow))
    np.testing.assert_array_equal(new[0].view(np.uint32), old[0].view(np.uint32))
    assert new[1] == old[1]
