"""The native conv's tiles of at most 16 output columns (O <= 16, the last 16 of O = 48, 80, ...)
run two at a time as one tile of 24 or 25 rows (``micro_one``), against the kernel that ran them
one by one (``conv_one_pairs(0)``): the same products summed in the same order per value, so the
same bits and finiteness flags, with and without a fused Sum2D, in place and packed, on one and two
threads."""
import numpy as np
import pytest

from onnx_mrvl.sim import jit, native
from onnx_mrvl.sim import kernels as K
from test_sim_native import _buildable, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler or no AVX-512 here")


def _both(build):
    """(tiles in pairs, tiles one by one) of ``build()``"""
    lib = native.lib()
    try:
        lib.conv_one_pairs(0)
        old = build()
        lib.conv_one_pairs(1)
        new = build()
    finally:
        lib.conv_one_pairs(1)
    return new, old


def _same(new, old):
    for a, b in zip(new, old):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
        else:
            assert a == b


@pytest.mark.parametrize("shape, o, k, stride", [
    ((1, 56, 56, 96), 16, 1, 1), ((1, 112, 9, 16), 8, 1, 1), ((2, 7, 7, 80), 16, 1, 1),
    ((1, 5, 5, 300), 13, 1, 1), ((1, 14, 14, 1024), 16, 1, 1), ((1, 9, 11, 24), 48, 1, 1),
    ((1, 30, 30, 3), 16, 3, 2), ((1, 13, 13, 40), 1, 3, 1), ((1, 1, 37, 20), 80, 1, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pairs_same_bits(monkeypatch, shape, o, k, stride, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    rng = np.random.default_rng([o, k, stride, shape[1], shape[3]])
    x = f16(rng.standard_normal(shape))
    x.reshape(-1)[::89] = 20000.0                   # some sums overflow fp16: the flags must agree
    w = f16(rng.standard_normal((o, k, k, shape[3])) * 0.3)
    conv = dict(bias=rng.standard_normal(o), strides=(stride, stride), padding=(k // 2,) * 4,
                activation="clamp", activation_params={"min": -1.0, "max": 6.0})
    _same(*_both(lambda: K.Conv2D(w, **conv).apply(x)))
    c = K.Conv2D(w, **conv)
    y, _ = c.apply(x)
    if c.fusable_sum(x.shape):
        res = f16(rng.standard_normal(y.shape) * 2)
        res.reshape(-1)[::53] = 65000.0
        act = jit.act_args("relu", None, None, o)
        _same(*_both(lambda: K.Conv2D(w, **conv).apply_with_residual(x, res, act)))
