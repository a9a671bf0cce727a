"""The fp16 Softmax over the stored layout's last axis in C (_native_act.c act_softmax: numpy's exp
and np.sum's pairwise order) against norm_ops.softmax, bit for bit, and as a run_steps record
(kind 13) inside a native segment: YOLOv8's DFL head."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.sim import Simulator, native
from onnx_mrvl.sim import activations_native as N
from onnx_mrvl.sim.norm_ops import softmax
from test_sim_copies import same_bits_three_ways

pytestmark = pytest.mark.skipif(not (native.variant() and native._compiler()),
                                reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


def _c_softmax(x, nthreads):
    so = N.lib()
    out = np.empty_like(x)
    ok = so.act_softmax(x.ctypes.data, out.ctypes.data, x.shape[0], x.shape[1], nthreads)
    return out, bool(ok)


@pytest.mark.parametrize("n", [3, 8, 16, 20, 136, 257])
def test_act_softmax_gives_numpys_bits_over_any_thread_split(n):
    """fp16 values of every magnitude (underflowing exps, denormal results) in rows of each
    pairwise-sum branch; 1, 2 and 3 threads; -inf entries and a row of -inf (NaN, as numpy)."""
    assert N.lib().same_bits["softmax"]
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3000, n)) * 10.0 ** rng.uniform(-3, 4, (3000, 1))).astype(np.float16).astype(np.float32)
    x[5, 0] = x[6] = -np.inf
    with np.errstate(all="ignore"):
        want, ok_w = softmax(x, -1)
    assert not ok_w and np.isnan(want[6]).all() and np.isfinite(want[5]).all()
    for t in (1, 2, 3):
        got, ok = _c_softmax(x, t)
        nan = np.isnan(want)
        assert ok == ok_w and np.array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    x[6] = 1.0
    with np.errstate(all="ignore"):
        want, ok_w = softmax(x, -1)
    got, ok = _c_softmax(x, 2)
    assert ok and ok_w
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _dfl_model():
    """Conv -> Reshape [1, 4, 16, N] -> Transpose -> Softmax over the 16 -> a 1x1 conv (YOLOv8's DFL)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 8, 3, 3)) * 0.5).astype(np.float32), "w0"),
             numpy_helper.from_array(np.array([1, 4, 16, 100], np.int64), "shp"),
             numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "proj")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c0", "shp"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),
             helper.make_node("Softmax", ["t"], ["s"], axis=1),
             helper.make_node("Conv", ["s", "proj"], ["y"])]
    g = helper.make_graph(nodes, "dfl", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 100])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_dfl_softmax_runs_inside_run_steps_with_numpys_bits(monkeypatch):
    segs, before = same_bits_three_ways(monkeypatch, _dfl_model(), "SOFTMAX")
    assert [s[0] for s in segs] == ["native"]
    assert [e.rec[0] for e in segs[0][1] if e.step.spec.layer_name == "Softmax"] == [13]
    assert [s[0] for s in before].count("python") == 1


def test_softmax_record_needs_numpys_bits_here(monkeypatch):
    """No record (the numpy step) when the load check found other bits."""
    monkeypatch.setattr(N, "softmax_address", lambda: None)
    sim = Simulator(onnx_mrvl.convert(_dfl_model()).subgraphs[0].binary)
    assert "python" in [s[0] for s in sim._static.segments]
