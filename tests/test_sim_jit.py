"""The compiled (numba) kernels against the numpy kernels they replace, path for path.

The element-wise passes (conv/FC epilogue, Sum2D/Mul2D, fp16 rounding) do the same float32
operations in the same order, so they must agree bit for bit, finiteness flag included. The
depthwise conv sums its taps in another order than numpy's einsum, so it must agree within one
fp16 ulp (and exactly on most values). test_sim_kernels.py checks both against float64 references.
"""
import numpy as np
import pytest

from onnx_mrvl.sim import jit, native
from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim import tensor_ops
from onnx_mrvl.sim.activations import ACTIVATIONS
from onnx_mrvl.sim.fp16 import fp16_ulp, round_fp16_

RNG = np.random.default_rng(77)
PARAMS = {"clamp": {"min": 0.0, "max": 6.0}, "leaky_relu": {"alpha": 0.1},
          "hard_sigmoid": {"alpha": 0.3, "beta": 0.4}}


def f16(a):
    with np.errstate(over="ignore"):
        return np.asarray(a, np.float64).astype(np.float16).astype(np.float32)


@pytest.fixture(autouse=True)
def _numba_not_native(monkeypatch):
    """These tests compare the numba kernels with numpy: keep the native kernels (test_sim_native.py) out."""
    monkeypatch.setattr(native, "ENABLED", False)


def both_paths(monkeypatch, build):
    """(compiled result, numpy result) of ``build()`` (which must construct its kernel itself)."""
    assert jit.on(), f"numba kernels are off here: {jit.why_disabled()}"
    fast = build()
    monkeypatch.setattr(jit, "ENABLED", False)
    slow = build()
    monkeypatch.setattr(jit, "ENABLED", True)
    return fast, slow


def assert_same(a, b):
    (ya, oka), (yb, okb) = a, b
    assert ya.shape == yb.shape and ya.dtype == yb.dtype == np.float32
    np.testing.assert_array_equal(ya, yb)
    assert oka == okb


def special_input(*shape):
    """Random fp16 values with large magnitudes, subnormals, zeros of both signs and an inf."""
    x = f16(RNG.standard_normal(shape) * 8)
    flat = x.reshape(-1)
    flat[::7] = f16(RNG.standard_normal(flat[::7].shape) * 3e4)
    flat[1::11] = np.float32(2.0 ** -20)
    flat[2::13] = -0.0
    flat[5] = np.inf
    return x


def test_jit_is_on_with_the_declared_dependencies():
    assert jit.on(), jit.why_disabled()
    assert jit.why_disabled() == ""


def test_env_switch_turns_the_compiled_path_off():
    import subprocess
    import sys
    code = ("import numpy as np; from onnx_mrvl.sim import jit, kernels as K; "
            "y = K.conv2d(np.ones((1, 4, 4, 2), np.float32), np.ones((2, 3, 3, 2), np.float32)); "
            "print(jit.on(), jit.why_disabled(), float(y.sum()))")
    env = dict(__import__("os").environ, ONNX_MRVL_SIM_JIT="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("False disabled by ONNX_MRVL_SIM_JIT=0"), out
    assert out.split()[-1] == str(float(K.conv2d(np.ones((1, 4, 4, 2), np.float32),
                                                 np.ones((2, 3, 3, 2), np.float32)).sum()))


def test_round_fp16_bit_identical_on_random_bit_patterns(monkeypatch):
    bits = RNG.integers(0, 2 ** 32, size=200_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    specials = np.array([65504, 65519.99, 65520, -65520, 2.0 ** -25, 2.0 ** -24 * 1.5, np.nan, -np.inf],
                        np.float32)
    for data in (x, specials, np.ones(10, np.float32)):
        (a, oka), (b, okb) = both_paths(monkeypatch, lambda: (lambda y: (y, round_fp16_(y)))(data.copy()))
        np.testing.assert_array_equal(a.view(np.uint32) == b.view(np.uint32), True)
        assert oka == okb


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_conv_gemm_epilogue_bit_identical(monkeypatch, act):
    x = special_input(1, 9, 7, 16)
    w = f16(RNG.standard_normal((24, 3, 3, 16)) * 0.2)
    kw = dict(bias=RNG.standard_normal(24).astype(np.float32), scale=RNG.uniform(0.5, 2, 24).astype(np.float32),
              shift=RNG.standard_normal(24).astype(np.float32), padding=(1, 1, 1, 1), activation=act,
              activation_params=PARAMS.get(act), slope=RNG.uniform(0, 0.3, 24).astype(np.float32))
    assert_same(*both_paths(monkeypatch, lambda: K.Conv2D(w, **kw).apply(x)))


@pytest.mark.parametrize("act", ["none", "relu", "silu", "prelu"])
def test_fc_epilogue_bit_identical(monkeypatch, act):
    x = special_input(3, 40)
    w = f16(RNG.standard_normal((12, 40)))
    kw = dict(bias=RNG.standard_normal(12).astype(np.float32), activation=act,
              slope=np.array([0.25], np.float32))
    assert_same(*both_paths(monkeypatch, lambda: K.FC(w, **kw).apply(x)))


@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 6, 5, 8), (1, 6, 5, 8)),        # residual add
    ((2, 6, 5, 8), (8,)),                # per-channel constant
    ((2, 6, 5, 8), (2, 1, 1, 8)),        # squeeze-excite scale
    ((2, 6, 5, 8), (1, 6, 5, 1)),        # per-pixel, broadcast over channels
    ((1, 1, 1, 8), (1, 6, 5, 8)),        # the small operand first
    ((2, 6, 5, 8), ()),                  # scalar
    ((2, 6, 5, 8), (1, 6, 1, 8)),        # no [N, P, C] form: numpy fallback
    ((4, 10), (10,)),                    # 2-D (FC-shaped)
])
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("act", ["none", "relu", "clamp", "sigmoid", "hard_swish"])
def test_binary_bit_identical(monkeypatch, a_shape, b_shape, op, act):
    a, b = special_input(*a_shape), special_input(*b_shape) if b_shape else np.float32(1.5)
    b = np.asarray(b, np.float32)
    assert_same(*both_paths(monkeypatch, lambda: tensor_ops.make_binary(
        op, activation=act, activation_params=PARAMS.get(act))(a, b)))


@pytest.mark.parametrize("k, stride, dil, pads, mult", [
    (3, 1, 1, (1, 1, 1, 1), 1), (3, 2, 1, (0, 1, 1, 0), 1), (3, 1, 2, (2, 2, 2, 2), 1),
    (5, 2, 1, (2, 2, 2, 2), 1), ((1, 3), 1, 1, (0, 1, 0, 1), 1), (3, 1, 1, (1, 1, 1, 1), 2),
    (3, 1, 1, (0, 0, 0, 0), 1), (7, 1, 1, (3, 3, 3, 3), 1),
])
@pytest.mark.parametrize("act", ["clamp", "relu", "tanh"])
def test_depthwise_within_one_ulp(monkeypatch, k, stride, dil, pads, mult, act):
    kh, kw = (k, k) if isinstance(k, int) else k
    c = 12
    x = f16(RNG.standard_normal((2, 11, 10, c)) * 4)
    w = f16(RNG.standard_normal((c * mult, kh, kw, 1)))
    kwargs = dict(bias=RNG.standard_normal(c * mult).astype(np.float32), strides=(stride, stride),
                  padding=pads, dilation=(dil, dil), groups=c, activation=act, activation_params=PARAMS.get(act))
    (a, oka), (b, okb) = both_paths(monkeypatch, lambda: K.Conv2D(w, **kwargs).apply(x))
    assert a.shape == b.shape and oka == okb
    diff = np.abs(a.astype(np.float64) - b)
    assert (diff <= fp16_ulp(b)).all(), diff.max()
    assert (diff == 0).mean() > 0.95


def test_depthwise_overflow_flag_and_inf(monkeypatch):
    x = np.full((1, 4, 4, 3), 60000.0, np.float32)
    w = np.ones((3, 3, 3, 1), np.float32)
    y, ok = K.Conv2D(w, padding=(1, 1, 1, 1), groups=3).apply(x)
    assert not ok and np.isposinf(y).all()
    y, ok = K.Conv2D(w, padding=(1, 1, 1, 1), groups=3, activation="clamp",
                     activation_params={"min": 0.0, "max": 6.0}).apply(x)
    assert ok and (y == 6).all()


@pytest.mark.parametrize("what", ["depthwise", "binary", "columns", "rows"])
def test_parallel_blocks_match_one_block(monkeypatch, what):
    """Row blocks (depthwise, Sum2D, GEMM) and output-channel blocks (small-M GEMM) give the same bits
    on any worker count (a GEMM's blocks follow its shape: BLAS sums a block's edge rows in another
    order)."""
    import onnx_mrvl.sim.tensor_ops as T
    outs = []
    w_dw, w_cols = f16(RNG.standard_normal((16, 3, 3, 1))), f16(RNG.standard_normal((200, 3, 3, 8)))
    for nw in (1, 3):
        monkeypatch.setattr(K, "workers", lambda nw=nw: nw)
        monkeypatch.setattr(T, "workers", lambda nw=nw: nw)
        monkeypatch.setattr(K, "_PARALLEL_DW_MACS", 1)
        monkeypatch.setattr(K, "_PARALLEL_MACS", 1)
        monkeypatch.setattr(T, "_PARALLEL_ELEMS", 1)
        if what == "depthwise":
            x = f16(np.random.default_rng(5).standard_normal((1, 13, 9, 16)))
            outs.append(K.Conv2D(w_dw, padding=(1, 1, 1, 1), groups=16).apply(x))
        elif what == "binary":
            a = f16(np.random.default_rng(6).standard_normal((1, 13, 9, 16)))
            outs.append(tensor_ops.make_binary("add", activation="relu")(a, a[:, :1, :1]))
        elif what == "columns":
            x = f16(np.random.default_rng(8).standard_normal((1, 5, 4, 8)))
            outs.append(K.Conv2D(w_cols, padding=(1, 1, 1, 1), activation="relu").apply(x))
        else:
            x = f16(np.random.default_rng(9).standard_normal((1, 37, 11, 8)))
            outs.append(K.Conv2D(w_cols[:40], padding=(1, 1, 1, 1)).apply(x))
    assert_same(outs[0], outs[1])
