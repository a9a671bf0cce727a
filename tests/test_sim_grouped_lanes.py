"""The lane-packed grouped conv (og = 1, 2, 4, 8 or 16 output channels per group: 16 / og groups
share one 16-lane vector, _native_conv.c conv_lanes_range) against the per-group native kernel it
replaces: the same bits (each output still sums its k in order from zero), the same finiteness
flag, on every thread split; and against the numpy kernels within one fp16 ulp."""
import numpy as np
import pytest

from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim import native
from test_sim_native import PARAMS, _buildable, assert_within_ulp, both, f16, special

pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")

RNG = np.random.default_rng(20)

CASES = [
    # input shape, O, groups, (kh, kw), stride, pads, dilation, activation
    ((1, 9, 10, 256), 256, 32, (3, 3), 1, (1, 1, 1, 1), 1, "relu"),        # ResNeXt og = cg = 8: one vector per tap
    ((2, 11, 7, 24), 24, 6, (3, 3), 2, (0, 1, 2, 1), 1, "prelu"),          # og = 4, last tile 2 of 4 groups
    ((1, 12, 13, 15), 10, 5, (5, 5), 1, (2, 2, 2, 2), 2, "clamp"),         # og = 2, cg = 3: 24-float taps
    ((1, 8, 8, 80), 40, 40, (3, 3), 1, (1, 1, 1, 1), 1, "hard_swish"),     # og = 1, cg = 2: 16 groups a vector
    ((1, 7, 9, 80), 8, 4, (5, 5), 1, (1, 2, 0, 1), 1, "sigmoid"),          # og = 2, cg = 20: K = 500 in 4 blocks
    ((2, 6, 5, 120), 24, 3, (3, 3), 1, (1, 1, 1, 1), 1, "none"),           # og = 8, cg = 40: taps gathered
    ((2, 5, 6, 64), 64, 8, (1, 1), 1, (0, 0, 0, 0), 1, "leaky_relu"),      # 1x1, og = 8
    ((1, 1, 1, 32), 16, 4, (1, 1), 1, (0, 0, 0, 0), 1, "none"),            # one pixel
    ((1, 6, 7, 96), 48, 3, (3, 3), 1, (1, 1, 1, 1), 1, "relu"),           # og = 16, cg = 32: one group a vector
]


def _conv(w, case, bias):
    shape, o, g, k, s, pads, dil, act = case
    return K.Conv2D(w, bias=bias, strides=(s, s), padding=pads, dilation=(dil, dil), groups=g, activation=act,
                    activation_params=PARAMS.get(act), slope=np.linspace(-0.2, 0.2, o))


def _bits(result):
    y, ok = result
    return y.view(np.uint32).copy(), ok


@pytest.mark.parametrize("case", CASES, ids=[f"lanes{i}" for i in range(len(CASES))])
def test_lane_packed_grouped_conv_keeps_the_bits(monkeypatch, case):
    shape, o, g, k, s, pads, dil, act = case
    og = o // g
    x = special(*shape, big=100)
    w = f16(RNG.standard_normal((o,) + k + (shape[3] // g,)) * 0.3)
    bias = RNG.standard_normal(o).astype(np.float32)
    conv = _conv(w, case, bias)
    lanes = _bits(conv.apply(x))
    plan = next(iter(conv._plans.values()))
    assert int(plan[1][28]) == 16 // og, "the grouped conv did not take the lane-packed kernel"
    for nw in (2, 3):
        monkeypatch.setattr(K, "workers", lambda nw=nw: nw)
        y, ok = _bits(_conv(w, case, bias).apply(x))
        np.testing.assert_array_equal(y, lanes[0])
        assert ok == lanes[1]
    monkeypatch.setattr(native, "lane_groups", lambda og: 0)     # each group its own NR-channel blocks
    monkeypatch.setattr(K, "workers", lambda: 1)
    per_group = _conv(w, case, bias)
    y, ok = _bits(per_group.apply(x))
    assert int(next(iter(per_group._plans.values()))[1][28]) == 0
    np.testing.assert_array_equal(y, lanes[0])
    assert ok == lanes[1]
    monkeypatch.undo()
    fast, slow = both(monkeypatch, lambda: _conv(w, case, bias).apply(x))
    # S = sum |x w| + |b| per output (numpy, no activation), for the summation-order term
    monkeypatch.setattr(native, "ENABLED", False)
    s_sum = K.Conv2D(np.abs(w), bias=np.abs(bias), strides=(s, s), padding=pads, dilation=(dil, dil),
                     groups=g).apply(np.abs(x))[0].astype(np.float64)
    monkeypatch.undo()
    taps = k[0] * k[1] * shape[3] // g
    assert_within_ulp(fast, slow, exact_frac=0.75, accumulation=2 * 1.25 * (taps + 4) * 2.0 ** -24 * s_sum)


def test_lane_packed_grouped_conv_flags_overflow():
    """An output that overflows fp16 clears the finiteness flag; the values are the per-group kernel's."""
    x = f16(np.full((1, 4, 4, 16), 200.0))
    w = f16(np.full((8, 3, 3, 4), 100.0))                # og = 2: 9 * 4 * 200 * 100 = 720000 > 65504
    conv = K.Conv2D(w, padding=(1, 1, 1, 1), groups=4)
    y, ok = conv.apply(x)
    assert int(next(iter(conv._plans.values()))[1][28]) == 8
    assert not ok and np.isinf(y).all()
