"""The recurrent layers' C loop (sim/recurrent_native.py, _native_rnn.c): the numpy loop's bits with
h R^T summed in order of k, the layers it leaves to numpy, and its failure modes."""
import numpy as np
import pytest

from onnx_mrvl.errors import MrvlRuntimeError
from onnx_mrvl.sim import native, recurrent_native
from onnx_mrvl.sim.recurrent import Recurrent, activation_fns
from onnx_mrvl.sim.recurrent_int8 import Int8Recurrent

F32 = np.float32
ACTS = {"LSTM": ["sigmoid", "tanh", "tanh"], "GRU": ["sigmoid", "tanh"], "RNN": ["tanh"]}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}

pytestmark = pytest.mark.skipif(not native.on(), reason="native kernels off here")


def _f16(rng, *shape, scale=0.3):
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(F32)


def _layer(cell, hid=70, feat=9, direction="bidirectional", acts=None, seed=0, **kw):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[cell]
    fns = activation_fns((acts or ACTS[cell]) * dirs, [0.5] * 3 * dirs, [0.1] * 3 * dirs)
    return Recurrent(cell, _f16(rng, dirs, g * hid, feat), _f16(rng, dirs, g * hid, hid, scale=0.15),
                     bias=_f16(rng, dirs, 2 * g * hid), direction=direction, activations=fns, **kw), rng


def _both(layer, x, **state):
    """(native result, numpy loop with the native order, numpy loop with numpy's matmul)."""
    layer.use_native, layer.hr_sum = None, np.matmul
    got = layer.apply(x, **state)
    assert layer._native_plan, "the C loop did not take the layer"
    layer.use_native, layer.hr_sum = False, recurrent_native.sequential_sum
    want = layer.apply(x, **state)
    layer.hr_sum = np.matmul
    blas = layer.apply(x, **state)
    layer.use_native = None
    return got, want, blas


def _same(a, b):
    assert a[1] == b[1]
    np.testing.assert_array_equal(a[0].view(np.uint32), b[0].view(np.uint32))


def test_the_library_loads_and_passes_its_checks_here():
    assert recurrent_native.lib() is not None, recurrent_native.why_disabled()


@pytest.mark.parametrize("hid,gates,batch", [(5, 4, 1), (8, 3, 2), (70, 4, 3), (256, 4, 1), (33, 1, 5)])
@pytest.mark.parametrize("threads", [1, 2])
def test_product_is_the_sum_in_order_of_k(hid, gates, batch, threads):
    """rnn_product == sequential_sum bit for bit (fp32, before any rounding); at 256 inputs numpy's
    matmul (OpenBLAS) differs from that order, so the comparison sees the order."""
    rng = np.random.default_rng(hid)
    so = recurrent_native.lib()
    rt, h = _f16(rng, hid, gates * hid), _f16(rng, batch, hid, scale=1.0)
    packed = recurrent_native.pack(rt, gates, hid)
    got = np.empty((batch, gates * hid), F32)
    so.rnn_product(packed.ctypes.data, None, h.ctypes.data, got.ctypes.data, batch, hid, gates, 0, gates, threads)
    want = recurrent_native.sequential_sum(h, rt)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    if hid == 256:
        assert np.mean(want != h @ rt) > 0.05


@pytest.mark.parametrize("cell,kw", [
    ("LSTM", {}), ("LSTM", {"clip": 0.7}), ("LSTM", {"cell_state_row": 1, "final_state_rows": 1}),
    ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {"clip": 1.1}), ("RNN", {}),
])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_native_loop_is_the_numpy_loop_in_order_of_k(cell, kw, direction):
    layer, rng = _layer(cell, direction=direction, **kw)
    x = _f16(rng, 23, 3, 9, scale=2.0)
    got, want, blas = _both(layer, x)
    _same(got, want)
    y, yb = got[0], blas[0]     # numpy's matmul: another sum order, the same values but for fp16 ties
    assert np.abs(y - yb).max() <= 1e-3 * np.abs(yb).max() and np.mean(y == yb) > 0.9


def test_peepholes_states_and_lengths():
    rng = np.random.default_rng(7)
    layer, _ = _layer("LSTM", hid=37, peepholes=_f16(rng, 2, 3 * 37), cell_state_row=1, final_state_rows=1)
    x = _f16(rng, 15, 4, 9, scale=2.0)
    state = {"initial_h": _f16(rng, 2, 4, 37), "initial_c": _f16(rng, 2, 4, 37),
             "sequence_lens": np.array([15, 0, 6, 1], F32)}
    got, want, _ = _both(layer, x, **state)
    _same(got, want)
    assert not got[0][6:15, :, 2].any()          # past row 2's length: zeros


def test_int8_layer_scales_its_sums():
    """Int8Recurrent (fp16 state): the centred R codes packed as fp16 (exact), the sum in order of k,
    then s_r per output."""
    rng = np.random.default_rng(3)
    hid, g = 40, 3
    acts = activation_fns(ACTS["GRU"] * 2, None, None)
    layer = Int8Recurrent("GRU", rng.integers(-128, 128, (2, g * hid, 6)).astype(np.int8),
                          rng.integers(-128, 128, (2, g * hid, hid)).astype(np.int8),
                          (rng.random(2 * g * hid) * 1e-2 + 1e-3).astype(F32),
                          (rng.random(2 * g * hid) * 2e-3 + 1e-4).astype(F32), (0.04, 120, "uint8"),
                          recurrence_zero_point=np.full(2 * g * hid, 5), direction="bidirectional", activations=acts)
    got, want, _ = _both(layer, _f16(rng, 12, 2, 6, scale=2.0))
    _same(got, want)


def test_layers_left_to_numpy():
    """Other cell activations, a quantized state and int8 Y codes keep the numpy loop (its results
    unchanged: numpy's matmul)."""
    layer, rng = _layer("RNN", acts=["relu"], direction="forward")
    x = _f16(rng, 6, 1, 9)
    y, ok = layer.apply(x)
    assert layer._native_plan is False and ok
    layer.use_native = False
    np.testing.assert_array_equal(layer.apply(x)[0], y)
    acts = activation_fns(ACTS["LSTM"], None, None)
    codes = rng.integers(-128, 128, (1, 4 * 8, 8)).astype(np.int8)
    for extra in ({"state_q": (0.01, 128, "uint8")}, {"out_q": (0.02, 0, "int8")}):
        q = Int8Recurrent("LSTM", codes[:, :, :5], codes, np.full(32, 1e-2, F32), np.full(32, 1e-2, F32),
                          (0.05, 128, "uint8"), activations=acts, **extra)
        q.apply(_f16(rng, 4, 1, 5))
        assert q._native_plan is False


def test_out_of_memory_raises(monkeypatch):
    """The C loop's scratch allocation failing (-1) raises instead of leaving Y unwritten."""
    so = recurrent_native.lib()
    desc = np.zeros(23, np.int64)
    desc[[1, 2, 3]] = 0, 1 << 40, 8                # B = 2^40: no scratch for that
    assert so.rnn_direction(desc.ctypes.data) == -1
    layer, rng = _layer("GRU", hid=16, direction="forward")

    class Broken:
        tanh_loop = so.tanh_loop

        @staticmethod
        def rnn_direction(_):
            return -1
    layer.use_native = Broken()
    with pytest.raises(MrvlRuntimeError, match="out of memory"):
        layer.apply(_f16(rng, 3, 1, 9))
