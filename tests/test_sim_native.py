"""The native (C, AVX-512 or AVX2) kernels against the numpy kernels and float64 references.

Where the native kernel does the same float32 operations in the same order as numpy (the
epilogue of a one-term conv, Sum2D / Mul2D, fp16 rounding) the results must agree bit for bit,
finiteness flag included. Its GEMM sums over k in another order than OpenBLAS, and its depthwise
conv in another order than einsum, so those agree with numpy within one fp16 ulp and with the
float64 reference within the bound of test_sim_kernels.py. Splitting the work over threads must
not change a single bit.
"""
import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from onnx_mrvl import native_build
from onnx_mrvl.sim.native_loader import OnceLibrary
from onnx_mrvl.sim import fp16, native, tensor_ops
from onnx_mrvl.sim import kernels as K
from onnx_mrvl.sim.activations import ACTIVATIONS
from onnx_mrvl.sim.fp16 import fp16_ulp, round_fp16_
from test_sim_jit import assert_same
from test_sim_kernels import assert_fp16_match, ref_conv

RNG = np.random.default_rng(2026)
PARAMS = {"clamp": {"min": -1.0, "max": 6.0}, "leaky_relu": {"alpha": 0.1},
          "hard_sigmoid": {"alpha": 0.3, "beta": 0.4}}


def _buildable():
    return bool(native.variant()) and native._compiler() is not None


pytestmark = pytest.mark.skipif(not _buildable(), reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


def f16(a):
    with np.errstate(over="ignore"):
        return np.asarray(a, np.float64).astype(np.float16).astype(np.float32)


def special(*shape, big=3e4):
    """fp16 values with large magnitudes, subnormals and zeros of both signs."""
    x = f16(RNG.standard_normal(shape) * 4)
    flat = x.reshape(-1)
    flat[::7] = f16(RNG.standard_normal(flat[::7].shape) * big)
    flat[1::11] = np.float32(2.0 ** -20)
    flat[2::13] = -0.0
    return x


def both(monkeypatch, build):
    """(native result, numpy result) of ``build()``, which constructs its kernel itself."""
    assert native.on(), native.why_disabled()
    fast = build()
    monkeypatch.setattr(native, "ENABLED", False)
    from onnx_mrvl.sim import jit
    monkeypatch.setattr(jit, "ENABLED", False)
    slow = build()
    monkeypatch.undo()
    return fast, slow


def assert_within_ulp(a, b, exact_frac=0.9, accumulation=None):
    """Native and numpy results agree within one fp16 ulp, plus, where given, ``accumulation``: the
    fp32 summation-order term of docs/simulator.md "Error bound" item 1 for each of the two paths,
    ``2 (K + 4) u32 S`` per element (it matters only where a sum cancels to far below S)."""
    (ya, oka), (yb, okb) = a, b
    assert ya.shape == yb.shape and ya.dtype == np.float32 and oka == okb
    assert fp16.is_fp16_exact(ya)
    fin = np.isfinite(yb)
    np.testing.assert_array_equal(ya[~fin], yb[~fin])
    err = np.abs(ya[fin].astype(np.float64) - yb[fin])
    bound = fp16_ulp(yb[fin].astype(np.float64))
    if accumulation is not None:
        bound = bound + np.broadcast_to(accumulation, yb.shape)[fin]
    assert (err <= bound).all(), err.max()
    assert (err == 0).mean() >= exact_frac


def test_native_kernel_builds_and_loads():
    assert native.on(), native.why_disabled()
    assert native.why_disabled() == ""


def test_int8_kernels_build_on_every_native_variant():
    """The int8 libraries (VNNI-style and float-path) load wherever the fp16 kernels build: an
    AVX2 + FMA + F16C host runs them on pairs of 256-bit registers (the float-path one needed
    AVX-512 BW/VL before, and its layers fell back to numpy's emulated FMA chains)."""
    from onnx_mrvl.sim import int8_float_native, int8_native
    if not int8_native.ENABLED:
        pytest.skip("ONNX_MRVL_SIM_INT8_NATIVE=0")
    assert int8_native.lib() is not None, int8_native.why_disabled()
    assert int8_float_native.lib() is not None, int8_float_native.why_disabled()


def test_round_fp16_bit_identical_on_random_bit_patterns():
    u = RNG.integers(0, 2 ** 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0.0, -0.0, 65504, 65519.99, 65520, -65520, np.inf, -np.inf, np.nan, 2.0 ** -14,
                         2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 1 + 2.0 ** -11, 2049, 2051, 6.1e-5], np.float32)
    x = np.concatenate([u.view(np.float32), specials])
    got, want = x.copy(), x.copy()
    native.lib().round_fp16(got.ctypes.data, got.size)
    round_fp16_(want)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("affine", ["bias, scale, shift", "bias", "none"])
def test_conv_epilogue_bit_identical(monkeypatch, act, affine):
    # one term per output (1x1 conv over one channel): the sum is exact, so the epilogue alone decides
    x = special(2, 5, 7, 1)
    w = f16(RNG.standard_normal((37, 1, 1, 1)))
    vec = {k: RNG.standard_normal(37) for k in ("bias", "scale", "shift") if k in affine}
    kw = dict(activation=act, activation_params=PARAMS.get(act), slope=np.linspace(-0.5, 0.5, 37), **vec)
    assert_same(*both(monkeypatch, lambda: K.Conv2D(w, **kw).apply(x)))


def test_clamp_with_min_above_max_gives_max_as_onnx_clip(monkeypatch):
    x = special(1, 4, 4, 1)
    kw = dict(bias=RNG.standard_normal(20), activation="clamp", activation_params={"min": 2.0, "max": -1.0})
    y, _ = K.Conv2D(f16(RNG.standard_normal((20, 1, 1, 1))), **kw).apply(x)
    assert (y[np.isfinite(y)] == -1.0).all()
    assert_same(*both(monkeypatch, lambda: K.Conv2D(f16(np.ones((20, 1, 1, 1))), **kw).apply(x)))


GEOMETRIES = [
    # input shape, O, (kh, kw), strides, pads [t, l, b, r], dilation
    ((1, 7, 8, 3), 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 9, 7, 4), 6, (3, 2), (2, 3), (0, 2, 3, 1), (2, 1)),       # asymmetric pads, batch 2
    ((1, 6, 6, 2), 3, (2, 2), (1, 1), (3, 2, 2, 3), (1, 1)),       # pads >= kernel
    ((1, 11, 10, 3), 5, (2, 2), (3, 4), (0, 0, 0, 0), (1, 1)),     # stride > kernel
    ((1, 12, 12, 4), 33, (3, 3), (1, 2), (2, 3, 2, 3), (3, 2)),    # dilation, O = NR + 1
    ((1, 13, 11, 40), 70, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),   # K = 360 > KC: two k blocks
    ((1, 9, 9, 300), 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # 1x1, K = 300
    ((3, 5, 6, 8), 64, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),      # 1x1 strided, batch 3
    ((1, 20, 21, 3), 32, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),    # ResNet stem-like
    ((1, 1, 1, 700), 50, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # one pixel (FC-like)
    ((2, 6, 8, 520), 40, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # 1x1 read in place, K > KC, 96 rows
    ((1, 7, 5, 33), 48, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),     # 1x1 in place, last tile partial
]


@pytest.mark.parametrize("case", GEOMETRIES, ids=[f"g{i}" for i in range(len(GEOMETRIES))])
def test_conv_matches_float64_reference_and_numpy(monkeypatch, case):
    shape, o, (kh, kw), strides, pads, dil = case
    x = f16(RNG.standard_normal(shape))
    w = f16(RNG.standard_normal((o, kh, kw, shape[3])) * 0.3)
    bias = RNG.standard_normal(o).astype(np.float32)
    kwargs = dict(bias=bias, strides=strides, padding=pads, dilation=dil)
    fast, slow = both(monkeypatch, lambda: K.Conv2D(w, **kwargs).apply(x))
    ref = ref_conv(x, w, bias, strides, pads, dil)
    terms = ref_conv(x, w, None, strides, pads, dil, absval=True) + np.abs(bias)
    assert_fp16_match(fast[0], ref, terms, kh * kw * shape[3])
    # numpy's GEMM sums in its BLAS kernel's order, which differs by CPU (OpenBLAS's AVX2 and AVX-512
    # sgemm): within one ulp plus the two orders' fp32 accumulation term (g10 here on AVX2 hosts)
    assert_within_ulp(fast, slow, exact_frac=0.8, accumulation=2 * (kh * kw * shape[3] + 4) * 2.0 ** -24 * terms)
    if (kh, kw, strides, pads) == (1, 1, (1, 1), (0, 0, 0, 0)):
        # the native kernel's own order is fixed, on AVX-512 and AVX2 builds alike: over k in order
        a, wk = x.reshape(-1, shape[3]), w.reshape(o, -1).T.astype(np.float32)
        acc = np.zeros((a.shape[0], o), np.float32)
        for k in range(shape[3]):
            acc += a[:, k:k + 1] * wk[k:k + 1]
        np.testing.assert_array_equal(fast[0].reshape(acc.shape), f16(acc + bias))


def test_conv_overflow_flag_and_inf(monkeypatch):
    x = np.full((1, 3, 3, 4), 60000.0, np.float32)
    w = np.ones((5, 1, 1, 4), np.float16)
    y, ok = K.Conv2D(w).apply(x)
    assert ok is False and np.isinf(y).all()
    y, ok = K.Conv2D(w * np.float16(0.25)).apply(x)
    assert ok is True and (y == 60000).all()
    # a non-finite value in the padding columns of the last weight block must not count
    y, ok = K.Conv2D(np.ones((33, 1, 1, 4), np.float16) * np.float16(0.25), bias=np.zeros(33)).apply(x)
    assert ok is True


@pytest.mark.parametrize("k, stride, dil, pads, mult, ch", [
    (3, 1, 1, (1, 1, 1, 1), 1, 32), (3, 2, 1, (0, 1, 1, 0), 1, 17), (5, 1, 2, (4, 4, 4, 4), 1, 100),
    (3, 1, 1, (1, 1, 1, 1), 2, 9), (7, 2, 1, (3, 3, 3, 3), 1, 64), (3, 3, 1, (5, 5, 5, 5), 1, 5),
    (2, 1, 1, (0, 0, 1, 1), 1, 1)])
@pytest.mark.parametrize("act", ["none", "clamp", "silu"])
def test_depthwise_within_one_ulp_of_numpy(monkeypatch, k, stride, dil, pads, mult, ch, act):
    # data of its own (not the module RNG's state after however many tests ran before): adding a
    # parametrized case elsewhere once shifted it onto an input whose cancelling sum erred 2 ulps
    monkeypatch.setitem(globals(), "RNG", np.random.default_rng([k, stride, dil, mult, ch, len(act)]))
    x = special(2, 11, 13, ch)
    w = f16(RNG.standard_normal((ch * mult, k, k, 1)) * 0.5)
    kwargs = dict(bias=RNG.standard_normal(ch * mult), scale=RNG.standard_normal(ch * mult), strides=(stride, stride),
                  padding=pads, dilation=(dil, dil), groups=ch, activation=act, activation_params=PARAMS.get(act))
    assert_within_ulp(*both(monkeypatch, lambda: K.Conv2D(w, **kwargs).apply(x)), exact_frac=0.9)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((1, 9, 10, 37), (1, 9, 10, 37)), ((2, 4, 5, 16), (16,)), ((2, 4, 5, 16), (2, 1, 1, 16)),
    ((1, 6, 6, 20), (1, 6, 6, 1)), ((3, 70), (3, 70)), ((2, 3, 4, 5), (1, 1, 1, 1)),
    ((2, 12, 5, 5), (2, 1, 5, 5)), ((2, 3, 4, 5), (1, 3, 4, 1)),      # grouped runs (an attention mask)
    ((1, 40, 41, 1), (1, 40, 41, 1)), ((1, 33, 3), (1,))])          # one run of values (C = 1 maps, a scalar)
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("act", ["none", "relu", "prelu", "hard_swish", "sigmoid"])
def test_binary_bit_identical(monkeypatch, a_shape, b_shape, op, act):
    a, b = special(*a_shape, big=300), special(*b_shape, big=300)
    slope = np.linspace(-0.3, 0.3, a_shape[-1]).astype(np.float32)
    assert_same(*both(monkeypatch, lambda: tensor_ops.make_binary(
        op, activation=act, activation_params=PARAMS.get(act), slope=slope)(a, b)))


def test_other_broadcasts_group_into_npc_runs():
    """npc_dims' fallback: runs of whole / broadcast axes (at most three) as [N, P, C]; else None."""
    assert tensor_ops.npc_dims((2, 12, 25, 25), (2, 1, 25, 25)) == ((2, 12, 625), (2, 1, 625))
    assert tensor_ops.npc_dims((2, 3, 4, 5), (1, 3, 4, 1)) == ((2, 12, 5), (1, 12, 1))
    assert tensor_ops.npc_dims((2, 12, 25, 25), (1, 12, 1, 25)) is None          # four runs
    assert tensor_ops.npc_dims((4, 5, 6), (4, 1, 6)) == ((4, 5, 6), (4, 1, 6))   # the channel form first


def test_binary_overflow_flag(monkeypatch):
    a = np.full((1, 4, 4, 8), 40000.0, np.float32)
    assert_same(*both(monkeypatch, lambda: tensor_ops.make_binary("add")(a, a)))
    y, ok = tensor_ops.make_binary("add")(a, a)
    assert ok is False and np.isinf(y).all()


@pytest.mark.parametrize("what", ["conv_rows", "conv_channels", "conv_small", "conv_1x1_blocks_and_rows",
                                  "conv_1x1_block_divisor", "depthwise", "depthwise_channels", "binary",
                                  "binary_flat", "global_avgpool"])
def test_thread_splits_do_not_change_a_bit(monkeypatch, what):
    if what == "conv_rows":
        x, w, kw = f16(RNG.standard_normal((2, 30, 31, 16))), f16(RNG.standard_normal((40, 3, 3, 16)) * .2), {}
        build = lambda: K.Conv2D(w, padding=(1, 1, 1, 1), activation="relu", **kw).apply(x)   # noqa: E731
    elif what == "conv_channels":
        x, w = f16(RNG.standard_normal((1, 5, 5, 64))), f16(RNG.standard_normal((600, 3, 3, 64)) * .1)
        build = lambda: K.Conv2D(w, padding=(1, 1, 1, 1)).apply(x)   # noqa: E731
    elif what == "conv_small":                  # 0.3 M MACs: split since CONV_PAR_MACS
        x, w = f16(RNG.standard_normal((1, 9, 9, 64))), f16(RNG.standard_normal((64, 1, 1, 64)) * .2)
        build = lambda: K.Conv2D(w, activation="relu").apply(x)   # noqa: E731
    elif what == "conv_1x1_blocks_and_rows":    # 5 channel blocks: one per part, the rows in ranges too
        x, w = special(1, 7, 7, 96, big=300), f16(RNG.standard_normal((160, 1, 1, 96)) * .1)
        build = lambda: K.Conv2D(w, activation="relu").apply(x)   # noqa: E731
    elif what == "conv_1x1_block_divisor":      # 18 channel blocks: 6 parts of 3 on 2 threads
        x, w = f16(RNG.standard_normal((1, 14, 14, 32))), f16(RNG.standard_normal((576, 1, 1, 32)) * .2)
        build = lambda: K.Conv2D(w).apply(x)   # noqa: E731
    elif what == "global_avgpool":
        from onnx_mrvl.sim import pooling
        x = special(3, 9, 11, 240, big=6e4)          # 71 K values: split since this change
        build = lambda: pooling.global_avgpool_layer(x)   # noqa: E731
    elif what == "depthwise":
        x, w = special(2, 40, 33, 48), f16(RNG.standard_normal((48, 3, 3, 1)))
        build = lambda: K.Conv2D(w, padding=(1, 1, 1, 1), groups=48).apply(x)   # noqa: E731
    elif what == "depthwise_channels":          # 3 rows: the parts split channels too
        x, w = special(1, 3, 7, 840), f16(RNG.standard_normal((840, 3, 3, 1)))
        build = lambda: K.Conv2D(w, padding=(1, 1, 1, 1), groups=840, activation="relu").apply(x)   # noqa: E731
    elif what == "binary_flat":                 # same shapes: one run of values, split in 16-value units
        a, b = special(1, 300, 301, 1, big=300), special(1, 300, 301, 1, big=300)
        build = lambda: tensor_ops.make_binary("add", activation="clamp", activation_params=PARAMS["clamp"])(a, b)   # noqa: E731
    else:
        a, b = special(1, 70, 71, 24), special(1, 1, 1, 24)
        build = lambda: tensor_ops.make_binary("mul", activation="relu")(a, b)   # noqa: E731
    results = []
    for nw in (1, 2, 3, 5):
        monkeypatch.setattr(K, "workers", lambda nw=nw: nw)
        monkeypatch.setattr(tensor_ops, "workers", lambda nw=nw: nw)
        if what == "global_avgpool":
            monkeypatch.setattr(pooling, "workers", lambda nw=nw: nw)
        results.append(build())
    for r in results[1:]:
        assert_same(results[0], r)


def test_env_switch_turns_the_native_kernel_off():
    code = ("from onnx_mrvl.sim import native; from onnx_mrvl.sim import kernels as K; import numpy as np; "
            "y, ok = K.Conv2D(np.ones((2, 1, 1, 3), np.float32)).apply(np.ones((1, 2, 2, 3), np.float32)); "
            "print(native.on(), native.why_disabled(), float(y.sum()))")
    env = dict(os.environ, ONNX_MRVL_SIM_NATIVE="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "False disabled by ONNX_MRVL_SIM_NATIVE=0 24.0", out


def test_no_compiler_falls_back_with_a_reason(monkeypatch, caplog):
    monkeypatch.setattr(native, "_LIBRARY", OnceLibrary(native._load, "native conv kernel", "numpy", native.log))
    monkeypatch.setattr(native, "_compiler", lambda: None)
    with caplog.at_level("INFO", logger="onnx_mrvl.sim.native"):
        assert native.on() is False
    assert "no C compiler" in native.why_disabled()
    assert any("no C compiler" in r.getMessage() for r in caplog.records)
    y, ok = K.Conv2D(np.ones((2, 1, 1, 3), np.float32)).apply(np.ones((1, 2, 2, 3), np.float32))
    assert ok and float(y.sum()) == 24.0                      # numba / numpy kernels took over


def test_build_is_cached_and_a_failed_compile_is_reported(monkeypatch, tmp_path):
    """The kernel build's cache (a small source with the kernels' own flags: the real one costs
    ~50 s of CPU per build on AVX2, and test_a_changed_local_header_is_rebuilt covers its key)."""
    cc = native._compiler()
    monkeypatch.setenv("ONNX_MRVL_CACHE_DIR", str(tmp_path))
    src = tmp_path.parent / f"{tmp_path.name}_small.c"
    src.write_text("int mrvl_small(void) { return 7; }\n")
    monkeypatch.setattr(native, "_SRC", str(src))
    path = native._build(cc)
    assert ctypes.CDLL(path).mrvl_small() == 7
    assert os.path.dirname(path) == str(tmp_path) and os.path.exists(path)
    assert [p.name for p in tmp_path.iterdir()] == [os.path.basename(path)]      # no temporary left
    calls = []
    real_run = subprocess.run
    monkeypatch.setattr(native_build.subprocess, "run", lambda *a, **k: calls.append(a) or real_run(*a, **k))
    assert native._build(cc) == path
    assert all("-o" not in a[0] for a in calls)               # found in the cache: not compiled again
    monkeypatch.setattr(native, "_SRC", str(tmp_path / "broken.c"))
    (tmp_path / "broken.c").write_text("this is not C\n")
    with pytest.raises(RuntimeError, match="failed"):
        native._build(cc)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["broken.c", os.path.basename(path)])


def test_a_changed_local_header_is_rebuilt(monkeypatch, tmp_path):
    """The cache key covers the headers a source includes (_native_common.h): a changed header
    must not reuse the shared object built with the old one."""
    cc = native._compiler()
    monkeypatch.setenv("ONNX_MRVL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "k.c").write_text('#include "k.h"\nint k(void) { return K; }\n')
    (tmp_path / "k.h").write_text("#define K 1\n")
    first = native.build_shared(cc, str(tmp_path / "k.c"))
    assert native.build_shared(cc, str(tmp_path / "k.c")) == first
    (tmp_path / "k.h").write_text("#define K 2\n")
    second = native.build_shared(cc, str(tmp_path / "k.c"))
    assert second != first
    assert ctypes.CDLL(second).k() == 2


@pytest.mark.parametrize("act", ["none", "leaky_relu", "tanh", "prelu"])
@pytest.mark.parametrize("rows, o", [(1, 70), (3, 70), (4, 1000), (1, 5), (9, 33)])   # GEMV up to 4 rows
@pytest.mark.parametrize("bias", [True, False])
def test_fc_within_one_ulp_of_numpy(monkeypatch, act, rows, o, bias):
    x, w = f16(RNG.standard_normal((rows, 300))), f16(RNG.standard_normal((o, 300)) * 0.2)
    kw = dict(bias=RNG.standard_normal(o) if bias else None, activation=act, activation_params=PARAMS.get(act),
              slope=np.linspace(-0.3, 0.3, o))
    fast, slow = both(monkeypatch, lambda: K.FC(w, **kw).apply(x))
    assert fast[0].shape == (rows, o)
    # numpy's GEMM sums in its BLAS kernel's order (OpenBLAS's AVX2 and AVX-512 sgemm differ): within one
    # ulp plus the two orders' fp32 accumulation term (an output near 0 after a cancelling sum, AVX2 hosts);
    # tanh / PReLU / leaky ReLU have slopes <= 1, so the pre-activation term bounds their outputs too
    terms = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)).T + np.abs(kw["bias"] if bias else 0.0)
    assert_within_ulp(fast, slow, exact_frac=0.8, accumulation=2 * (x.shape[1] + 4) * 2.0 ** -24 * terms)
    fc = K.FC(w, **kw)
    for nw in (1, 3):                                       # thread splits change no bit
        monkeypatch.setattr(K, "workers", lambda nw=nw: nw)
        assert_same(fc.apply(x), fast)


def test_fc_overflow_flag():
    y, ok = K.FC(np.full((20, 8), 30000.0, np.float16)).apply(np.ones((1, 8), np.float32))
    assert ok is False and np.isinf(y).all()


POOLS = [((3, 3), (2, 2), (1, 1, 1, 1), 0, (1, 1)), ((2, 3), (1, 2), (0, 1, 1, 0), 1, (1, 1)),
         ((3, 3), (2, 2), (2, 2, 2, 2), 1, (2, 1)), ((5, 5), (1, 1), (2, 2, 2, 2), 0, (1, 1)),
         ((2, 2), (2, 2), (0, 0, 0, 0), 1, (1, 1))]


@pytest.mark.parametrize("k, s, pads, ceil, dil", POOLS)
@pytest.mark.parametrize("c", [3, 16, 37])
def test_pools_bit_identical(monkeypatch, k, s, pads, ceil, dil, c):
    x = special(2, 9, 11, c, big=6e4)
    x.reshape(-1)[7] = np.nan
    x.reshape(-1)[30] = -np.inf
    assert_same(*both(monkeypatch, lambda: (K.maxpool2d(x, k, s, pads, ceil, dil), True)))
    if dil == (1, 1):
        from onnx_mrvl.sim.pooling import avgpool
        for inc in (0, 1):
            assert_same(*both(monkeypatch, lambda: avgpool(x, k, s, pads, ceil, inc)))


def test_pools_skip_padding_with_the_same_bits(monkeypatch):
    """The native pools visit only the real taps: an all -0.0 window average is still +0.0 when the
    window had padding (-0.0 without), and a NaN / -inf first real tap behind the padding gives the
    NaN-propagating max's bits, as visiting the padding did."""
    x = np.full((1, 6, 7, 20), -0.0, np.float32)
    x[0, 0, 0, :5] = np.nan
    x[0, 0, 0, 5:9] = -np.inf
    x[0, 3, 4, :] = f16(RNG.standard_normal(20))
    from onnx_mrvl.sim.pooling import avgpool
    for k, s, pads in [((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 2), (1, 1), (1, 1, 0, 0)), ((3, 3), (1, 1), (0, 0, 0, 0))]:
        fast, slow = both(monkeypatch, lambda: (K.maxpool2d(x, k, s, pads, 0, (1, 1)), True))
        np.testing.assert_array_equal(fast[0].view(np.uint32), slow[0].view(np.uint32))
        for inc in (0, 1):
            fast, slow = both(monkeypatch, lambda: avgpool(x, k, s, pads, 0, inc))
            assert fast[1] == slow[1]
            np.testing.assert_array_equal(fast[0].view(np.uint32), slow[0].view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 3, 224, 224), (2, 37, 5, 9), (1, 1, 1, 1), (3, 64, 7, 7), (1, 1, 33, 65),
                                   (2, 24, 19, 21), (1, 8, 8, 8), (1, 21, 130, 131), (1, 24, 210, 211)])
def test_layout_transforms_are_exact(monkeypatch, shape):
    """Both directions, 8 x 8 register tiles and their channel / pixel edges, one channel, threads."""
    x = RNG.standard_normal(shape).astype(np.float32)
    for nw in (1, 2, 3):
        monkeypatch.setattr(tensor_ops, "workers", lambda nw=nw: nw)   # >= 1 M values: split
        y = K.layout_transform(x, "NCHW", "NHWC")
        np.testing.assert_array_equal(y, x.transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(K.layout_transform(y, "NHWC", "NCHW"), x)
        assert y.ctypes.data % 64 == 0


def _random_conv_case(rng):
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    dh, dw = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    pads = tuple(int(p) for p in rng.integers(0, 4, size=4))
    n = int(rng.integers(1, 3))
    h = int(rng.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 14))
    w = int(rng.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 14))
    depthwise = rng.random() < 0.4
    c = int(rng.integers(1, 80))
    o = c * int(rng.integers(1, 3)) if depthwise else int(rng.integers(1, 70))
    act = str(rng.choice(["none", "relu", "clamp", "leaky_relu", "prelu", "hard_swish", "sigmoid"]))
    return (n, h, w, c), o, (kh, kw), (sh, sw), pads, (dh, dw), c if depthwise else 1, act


@pytest.mark.parametrize("seed", range(40))
def test_random_geometries_match_numpy(monkeypatch, seed):
    """Seeded random conv / depthwise geometries (padding up to 3, strides up to 3, dilation 2,
    1-79 channels, batch 2) against the numpy kernels, through the thread splits."""
    rng = np.random.default_rng(1000 + seed)
    shape, o, k, strides, pads, dil, groups, act = _random_conv_case(rng)
    x = special(*shape, big=100)
    w = f16(rng.standard_normal((o,) + k + (shape[3] // groups,)) * 0.3)
    kwargs = dict(bias=rng.standard_normal(o), strides=strides, padding=pads, dilation=dil, groups=groups,
                  activation=act, activation_params=PARAMS.get(act), slope=np.linspace(-0.2, 0.2, o))
    monkeypatch.setattr(K, "workers", lambda: int(rng.integers(1, 4)))
    try:
        K.Conv2D(w, **kwargs).output_shape(shape)
    except ValueError:
        pytest.skip("empty output")
    if min(K.Conv2D(w, **kwargs).output_shape(shape)[1:3]) < 1:
        pytest.skip("empty output")
    fast, slow = both(monkeypatch, lambda: K.Conv2D(w, **kwargs).apply(x))
    # S = sum |x w| + |b| per output (numpy, no activation: the activations are at most ~1.2-Lipschitz)
    s_kw = dict(kwargs, bias=np.abs(kwargs["bias"]), activation="none", activation_params=None, slope=None)
    monkeypatch.setattr(native, "ENABLED", False)
    s_sum = K.Conv2D(np.abs(w), **s_kw).apply(np.abs(x))[0].astype(np.float64)
    monkeypatch.undo()
    taps = w.shape[1] * w.shape[2] * w.shape[3]
    assert_within_ulp(fast, slow, exact_frac=0.75, accumulation=2 * 1.25 * (taps + 4) * 2.0 ** -24 * s_sum)


GROUPED = [
    # input shape, O, groups, k, stride, pads, activation
    ((1, 9, 10, 64), 64, 32, 3, 1, (1, 1, 1, 1), "relu"),          # ResNeXt-like: 2 in / 2 out per group
    ((2, 7, 6, 12), 18, 3, 3, 2, (0, 1, 2, 1), "prelu"),           # batch 2, asymmetric pads, per-channel slopes
    ((1, 6, 6, 40), 80, 2, 1, 1, (0, 0, 0, 0), "clamp"),           # 1x1 grouped: rows read in place
    ((1, 5, 5, 96), 72, 4, 3, 1, (1, 1, 1, 1), "sigmoid"),         # og = 18 (two blocks' tail), numpy finishes
    ((1, 8, 9, 600), 48, 2, 1, 2, (0, 0, 0, 0), "none"),           # K per group 300 > KC
]


@pytest.mark.parametrize("case", GROUPED, ids=[f"grp{i}" for i in range(len(GROUPED))])
def test_grouped_conv_matches_float64_reference_and_numpy(monkeypatch, case):
    """Grouped (not depthwise) convs run natively, group by group on the same rows: against a
    float64 reference per group, the numpy kernels (within one ulp) and every thread split (bits)."""
    shape, o, g, k, s, pads, act = case
    x = f16(RNG.standard_normal(shape))
    w = f16(RNG.standard_normal((o, k, k, shape[3] // g)) * 0.3)
    bias = RNG.standard_normal(o).astype(np.float32)
    kwargs = dict(bias=bias, strides=(s, s), padding=pads, groups=g, activation=act,
                  activation_params=PARAMS.get(act), slope=np.linspace(-0.2, 0.2, o))
    conv = K.Conv2D(w, **kwargs)
    fast, slow = both(monkeypatch, lambda: K.Conv2D(w, **kwargs).apply(x))
    assert conv.apply(x) is not None and conv._plans, "grouped conv did not take the native kernel"
    assert_within_ulp(fast, slow, exact_frac=0.75)
    if act == "none":
        cg, og = shape[3] // g, o // g
        ref = np.concatenate([ref_conv(x[..., i * cg:(i + 1) * cg], w[i * og:(i + 1) * og], bias[i * og:(i + 1) * og],
                                       (s, s), pads, (1, 1)) for i in range(g)], axis=-1)
        terms = np.concatenate([ref_conv(x[..., i * cg:(i + 1) * cg], w[i * og:(i + 1) * og], None, (s, s), pads,
                                         (1, 1), absval=True) for i in range(g)], axis=-1) + np.abs(bias)
        assert_fp16_match(fast[0], ref, terms, k * k * shape[3] // g)
    results = []
    for nw in (1, 2, 3):
        monkeypatch.setattr(K, "workers", lambda nw=nw: nw)
        results.append(K.Conv2D(w, **kwargs).apply(x))
    for r in results[1:]:
        assert_same(results[0], r)


@pytest.mark.parametrize("c", [1024, 2048])
def test_1x1_rows_4kb_apart_are_packed_with_the_same_bits(c):
    """A 1x1 conv whose input rows are a multiple of 4 KB apart packs its panels instead of reading
    them in place (conv_range: cache sets); the same conv with one more input channel (zero, zero
    weight: a last +0 term) reads in place: the same bits."""
    x = f16(RNG.standard_normal((1, 5, 7, c)))
    w = f16(RNG.standard_normal((70, 1, 1, c)) * 0.05)
    bias = RNG.standard_normal(70).astype(np.float32)
    assert native.on(), native.why_disabled()
    fast = K.Conv2D(w, bias=bias, activation="relu").apply(x)
    x1 = np.concatenate([x, np.zeros((1, 5, 7, 1), np.float32)], axis=3)
    w1 = np.concatenate([w, np.zeros((70, 1, 1, 1), np.float32)], axis=3)
    direct = K.Conv2D(w1, bias=bias, activation="relu").apply(x1)
    np.testing.assert_array_equal(fast[0].view(np.uint32), direct[0].view(np.uint32))
    assert fast[1] == direct[1]


@pytest.mark.parametrize("pixels", [1, 4, 5, 8, 9, 13, 49])
def test_partial_panels_give_the_same_bits_as_full_ones(monkeypatch, pixels):
    """A last panel of 1-11 pixels runs a smaller register tile (12, 8 or 4 rows): each pixel's
    sums are those of the same pixel computed inside a full panel."""
    x = f16(RNG.standard_normal((1, 1, 60, 70)))
    w = f16(RNG.standard_normal((40, 1, 1, 70)) * 0.2)
    conv = K.Conv2D(w, padding=(0, 0, 0, 0), strides=(1, 2), activation="relu")   # strided: packed panels
    full = conv.apply(x)[0]
    part = K.Conv2D(w, padding=(0, 0, 0, 0), strides=(1, 2), activation="relu").apply(x[:, :, :2 * pixels])[0]
    np.testing.assert_array_equal(part.view(np.uint32), full[:, :, :pixels].view(np.uint32))


@pytest.mark.parametrize("pixels", [1, 2, 13, 25, 49])
@pytest.mark.parametrize("c, k", [(70, 1), (1024, 1), (24, 3)])
def test_merged_and_small_tiles_give_the_same_bits_with_a_fused_residual(monkeypatch, pixels, c, k):
    """12q + 1 pixels end in one 13-row tile, 1-2 pixels run the 2-row tile, 1x1 rows 4 KB apart
    (1024 channels) are packed instead of read in place (c = 70: in place, k = 3: packed windows):
    each pixel's sums are those of the same pixel inside full 12-row tiles of a longer row, with
    and without a fused Sum2D (its values: the two layers one after the other)."""
    from onnx_mrvl.sim import jit
    x = f16(RNG.standard_normal((1, 1, 60, c)))
    w = f16(RNG.standard_normal((40, 1, k, c)) * 0.1)
    bias = RNG.standard_normal(40).astype(np.float32)
    pads = (0, k // 2, 0, k // 2)
    full = K.Conv2D(w, bias=bias, padding=pads, activation="relu").apply(x)[0]
    xs = np.ascontiguousarray(x[:, :, :pixels])
    conv = K.Conv2D(w, bias=bias, padding=pads, activation="relu")
    part = conv.apply(xs)[0]
    edge = pixels - (k // 2)          # the last pixels see the short row's padding instead of pixels
    np.testing.assert_array_equal(part[:, :, :edge].view(np.uint32), full[:, :, :edge].view(np.uint32))
    assert conv.fusable_sum(xs.shape)
    res = f16(RNG.standard_normal(part.shape))
    fused, ok, ok2 = conv.apply_with_residual(xs, res, jit.act_args("relu", None, None, 40))
    two = part + res
    two = np.where(two < 0, np.float32(0), two)
    assert ok and ok2 and round_fp16_(two)
    np.testing.assert_array_equal(fused.view(np.uint32), two.view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 7, 7, 640), (2, 3, 5, 17), (1, 1, 1, 1), (3, 13, 1, 40)])
def test_global_avgpool_bit_identical(monkeypatch, shape):
    from onnx_mrvl.sim.pooling import global_avgpool_layer
    x = special(*shape, big=6e4)
    assert_same(*both(monkeypatch, lambda: global_avgpool_layer(x)))


def test_copy_round_flags():
    src = np.array([1.0, np.inf, 70000.0, 2.0 ** -26, np.nan] + [0.5] * 20, np.float32)
    # bit 0: every input finite; bit 1: every rounded value finite (70000 rounds to inf)
    for data, want in ((src, 0), (src[2:4], 1), (src[3:], 0), (np.ones(33, np.float32), 3)):
        dst = np.empty_like(data)
        bits = native.lib().copy_round(data.ctypes.data, dst.ctypes.data, data.size)
        ref = data.copy()
        ok = round_fp16_(ref)
        assert bits == want and bool(bits & 2) == ok
        np.testing.assert_array_equal(dst, ref)


def test_forked_child_runs_on_a_fresh_pool():
    """After fork() the child has no pool workers and must not inherit the parent's sleep state."""
    import multiprocessing as mp
    x, w = f16(RNG.standard_normal((1, 30, 30, 32))), f16(RNG.standard_normal((64, 3, 3, 32)) * 0.2)
    conv = K.Conv2D(w, padding=(1, 1, 1, 1), activation="relu")
    want = conv.apply(x)[0]                                   # the parent's pool exists now
    ctx = mp.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_run_conv, (w, x)).get(timeout=60)
    np.testing.assert_array_equal(got, want)


def _run_conv(w, x):
    import os
    os.environ["ONNX_MRVL_SIM_THREADS"] = "2"
    return K.Conv2D(w, padding=(1, 1, 1, 1), activation="relu").apply(x)[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two allowed CPUs")
def test_pinned_workers_run_on_one_cpu_each_with_the_same_bits():
    """ONNX_MRVL_SIM_PIN=1: each pool worker's affinity is one CPU of the allowed set (the caller's
    stays whole), and a split conv gives the same bits as unpinned."""
    code = ("import glob, os, numpy as np; os.environ['ONNX_MRVL_SIM_THREADS'] = '2'\n"
            "from onnx_mrvl.sim import kernels as K\n"
            "r = np.random.default_rng(3)\n"
            "x = r.standard_normal((1, 30, 30, 32)).astype(np.float16).astype(np.float32)\n"
            "w = (r.standard_normal((64, 3, 3, 32)) * 0.2).astype(np.float16)\n"
            "y = K.Conv2D(w, padding=(1, 1, 1, 1), activation='relu').apply(x)[0]\n"
            "aff = sorted(len(os.sched_getaffinity(int(t.split('/')[-1]))) for t in glob.glob('/proc/self/task/*'))\n"
            "print(aff.count(1), y.view(np.uint32).sum(dtype=np.uint64), y.view(np.uint32)[::97].tolist())")
    outs = []
    for pin in ("0", "1"):
        env = dict(os.environ, ONNX_MRVL_SIM_PIN=pin)
        outs.append(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                   check=True).stdout.split(" ", 1))
    assert outs[0][0] == "0" and int(outs[1][0]) >= 1, outs      # unpinned: none; pinned: the worker
    assert outs[0][1] == outs[1][1]                               # the same bits


def test_unknown_emulation_is_a_usage_error():
    """A mistyped ``ONNX_MRVL_NATIVE_EMULATE`` (testing only) stops with our UsageError naming the
    accepted values, not a bare ValueError."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, ONNX_MRVL_NATIVE_EMULATE="avx-512",
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    probe = ("from onnx_mrvl.errors import UsageError\n"
             "try:\n    import onnx_mrvl.sim.native_loader\nexcept UsageError as e:\n    print('usage:', e)\n")
    r = subprocess.run([sys.executable, "-c", probe], env=env, cwd=root, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout and "avx512vbmi" in r.stdout and "avx-512" in r.stdout, r.stdout
