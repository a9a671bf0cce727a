"""The native max pool's vmaxps chain (``kernel_paths`` bit 1024) against the NaN-propagating update
before it and the numpy path, bit for bit: without a NaN the update is ``max(acc, v)`` (vmaxps returns
``v`` on a tie, so which of -0 / +0 survives depends on the tap order), and a vector with a NaN lane
runs the old update (the first NaN tap's payload, quieted). Zeros of both signs in every order,
NaNs with distinct payloads and signs (quiet: fp16 values), -inf, windows in the padding and ResNet's 3x3/2
pool, on one and two threads."""
import numpy as np
import pytest

from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim import native
from test_sim_kernel_paths import MAX_CHAIN, _both, _same
from test_sim_native import _buildable, both, f16

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


def _input(shape, seed, nans):
    rng = np.random.default_rng(seed)
    x = f16(rng.integers(-2, 3, shape) * 0.5)          # many ties, zeros included
    flat = x.reshape(-1)
    zeros = flat == 0
    flat[zeros] = np.where(rng.random(zeros.sum()) < 0.5, -0.0, 0.0).astype(np.float32)
    flat[::29] = -np.inf
    bits = flat.view(np.uint32)
    for i, pos in enumerate(rng.choice(flat.size, nans, replace=False)):
        bits[pos] = (0x80000000 if i % 2 else 0) | 0x7FC00000 | ((i + 1) % 512) << 13   # fp16 payloads, both signs
    return x


@pytest.mark.parametrize("shape, k, s, pads, ceil", [
    ((1, 112, 112, 64), (3, 3), (2, 2), (1, 1, 1, 1), 0), ((2, 9, 11, 37), (3, 3), (2, 2), (1, 1, 1, 1), 1),
    ((1, 6, 7, 20), (2, 2), (1, 1), (1, 1, 0, 0), 0), ((1, 8, 8, 16), (5, 5), (1, 1), (2, 2, 2, 2), 0),
    ((1, 4, 5, 3), (3, 3), (3, 3), (2, 2, 2, 2), 1)])
@pytest.mark.parametrize("nans", [0, 3, 40])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_chain_same_bits(monkeypatch, shape, k, s, pads, ceil, nans, threads):
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    x = _input(shape, [nans, threads] + list(shape), nans)
    new, old = _both(MAX_CHAIN, lambda: (K.maxpool2d(x, k, s, pads, ceil, (1, 1)),))
    _same(new, old)
    fast, slow = both(monkeypatch, lambda: K.maxpool2d(x, k, s, pads, ceil, (1, 1)))
    np.testing.assert_array_equal(fast.view(np.uint32), slow.view(np.uint32))


POOL_ROWS = 524288


@pytest.mark.parametrize("shape, k, s, pads, dil", [
    ((1, 12, 13, 16), (2, 2), (1, 1), (0, 0, 1, 1), (1, 1)),     # PP-HGNet's stem pool
    ((1, 112, 112, 64), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),   # ResNet's
    ((2, 9, 11, 37), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # a tail of 5 lanes
    ((1, 10, 10, 20), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),     # YOLO's SPPF
    ((1, 9, 14, 3), (3, 2), (2, 3), (0, 1, 2, 0), (1, 1)),
    ((1, 11, 12, 48), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),     # dilated
    ((1, 7, 8, 16), (4, 4), (1, 1), (1, 1, 2, 2), (1, 1)),       # 4 taps a row: not compiled, the old code
    ((1, 3, 4, 16), (3, 3), (1, 1), (0, 0, 0, 0), (1, 1))])      # one interior column
@pytest.mark.parametrize("nans", [0, 5, 60])
@pytest.mark.parametrize("threads", [1, 2])
def test_max_pool_interior_rows_same_bits(monkeypatch, shape, k, s, pads, dil, nans, threads):
    """pool_max_inner (kernel_paths bit 524288): the interior columns of a row in one loop, the same
    chain per pixel; a NaN hands the pixel and the rest of the row back to the old code. The same
    bits and flags as without it and as the numpy path, ties of -0 / +0, NaN payloads and -inf included."""
    assert native.on(), native.why_disabled()
    monkeypatch.setattr(K, "workers", lambda: threads)
    x = _input(shape, [nans, threads, 7] + list(shape), nans)
    new, old = _both(POOL_ROWS, lambda: (K.maxpool2d(x, k, s, pads, 0, dil),))
    _same(new, old)
    fast, slow = both(monkeypatch, lambda: K.maxpool2d(x, k, s, pads, 0, dil))
    np.testing.assert_array_equal(fast.view(np.uint32), slow.view(np.uint32))
