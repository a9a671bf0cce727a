"""The native sigmoid / SiLU / GELU pass (sim/_native_act.c) against the numpy steps it replaces,
bit for bit: on every branch of numpy's float32 exp, on random bit patterns, across thread splits,
and as conv / FC layers with these activations run in the simulator."""
import numpy as np
import pytest

from onnx_mrvl.sim import activations as A
from onnx_mrvl.sim import activations_native as N
from onnx_mrvl.sim import activations_smooth as S
from onnx_mrvl.sim import native

pytestmark = pytest.mark.skipif(not (native.variant() and native._compiler()),
                                reason="no C compiler, or neither AVX-512 nor AVX2 + FMA + F16C here")


def bits(a):
    return a.view(np.uint32)


REFS = {"sigmoid": A.numpy_sigmoid, "silu": A.numpy_silu, "gelu": S.numpy_gelu}


def test_library_loads_and_passes_its_numpy_check():
    assert N.lib() is not None, N.why_disabled()
    assert N.lib().same_bits == {"sigmoid": True, "silu": True, "gelu": True, "softmax": True}


@pytest.mark.parametrize("name", sorted(REFS))
@pytest.mark.parametrize("n", [16, 21, 40, 128, 512, 513, 8191, (1 << 14) * 3 + 5])   # 16-128: a recurrent gate
def test_bit_identical_to_numpy_on_random_bit_patterns(name, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x[::3] = (rng.standard_normal(x[::3].size) * 30).astype(np.float32)    # mostly the polynomial
    with np.errstate(all="ignore"):
        want = REFS[name](x.copy())
        got = x.copy()
        assert N.apply_(got, name)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("name", sorted(REFS))
def test_every_exp_branch_matches(name):
    x = N.probe_values()
    with np.errstate(all="ignore"):
        want = REFS[name](x.copy())
        got = x.copy()
        N.lib().act_apply(got.ctypes.data, got.size, N.KINDS[name], 1)
    np.testing.assert_array_equal(bits(got), bits(want))
    # the branches are reached: exp overflow / underflow, a denormal exp, NaN
    e = np.exp(-np.abs(x[np.isfinite(x)]))
    assert (e == 0).any() and ((e > 0) & (e < np.finfo(np.float32).tiny)).any() and np.isnan(got).any()


def test_thread_splits_do_not_change_a_bit(monkeypatch):
    x = (np.random.default_rng(5).standard_normal(200_001) * 10).astype(np.float32)
    outs = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        for name in sorted(REFS):
            y = x.copy()
            assert N.apply_(y, name)
            outs.append(bits(y))
    assert all(np.array_equal(outs[k], outs[k + 3 * t]) for k in range(3) for t in (1, 2))


def test_small_strided_or_other_arrays_stay_with_numpy():
    assert not N.apply_(np.zeros(N.MIN_SIZE - 1, np.float32), "sigmoid")
    assert not N.apply_(np.zeros((64, 32), np.float32)[:, ::2], "gelu")
    assert not N.apply_(np.zeros(4096, np.float64), "silu")
    assert not N.apply_(np.zeros(4096, np.float32), "tanh")                 # not a native one
    ro = np.zeros(4096, np.float32)
    ro.flags.writeable = False
    assert not N.apply_(ro, "sigmoid")
    # the dispatcher still computes them (numpy's steps)
    y = np.linspace(-5, 5, 64 * 32, dtype=np.float32).reshape(64, 32)[:, ::2]
    np.testing.assert_array_equal(A.sigmoid(y.copy()), A.numpy_sigmoid(y.copy()))


def _act_model(act: str):
    """A conv + SiLU / Sigmoid (YOLO's block), or a transformer FFN's MatMul + Add + erf GELU."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    if act == "gelu":
        inits = [numpy_helper.from_array((rng.standard_normal((64, 256)) * 0.2).astype(np.float32), "w"),
                 numpy_helper.from_array((rng.standard_normal(256) * 0.1).astype(np.float32), "b")] + [
            numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
            (("r2", 1.4142135381698608), ("one", 1.0), ("half", 0.5))]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["c"]),
                 helper.make_node("Div", ["c", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["f"]), helper.make_node("Mul", ["c", "f"], ["g"]),
                 helper.make_node("Mul", ["g", "half"], ["y"])]
        shapes = ([1, 32, 64], [1, 32, 256])
    else:
        inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float32), "w")]
        tail = [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])] \
            if act == "silu" else [helper.make_node("Sigmoid", ["c"], ["y"])]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + tail
        shapes = ([1, 8, 32, 32], [1, 16, 32, 32])
    g = helper.make_graph(nodes, act, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shapes[0])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shapes[1])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), shapes[0]


@pytest.mark.parametrize("act", ["silu", "sigmoid", "gelu"])
def test_conv_activation_finished_in_c_same_bits_as_numpy(monkeypatch, act):
    """A conv + SiLU / Sigmoid region (YOLO's block) or an FC + GELU (a transformer's FFN) on the
    simulator: finished inside run_steps (record words 12-14), by the Python step with the native
    pass, or by numpy alone -- the same bits; within the practical fp16 bound of onnxruntime."""
    import onnxruntime as ort
    import onnx_mrvl
    from onnx_mrvl.sim import Simulator
    model, shape = _act_model(act)
    r = onnx_mrvl.convert(model)
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[:4] = [40.0, -40.0, 0.0, -0.0]           # saturated activations, signed zeros
    sim = Simulator(r.subgraphs[0].binary)
    in_c = sim.run([x])[0]
    entries = [e for s in sim._static.segments if s[0] == "native" for e in s[1]]
    assert any(e.rec is not None and len(e.rec) == 15 and e.rec[12] for e in entries)   # finished in C
    assert all(e.post is None for e in entries)
    monkeypatch.setattr(N, "post_record", lambda fn: ())
    in_python = Simulator(r.subgraphs[0].binary).run([x])[0]
    monkeypatch.setattr(N, "apply_", lambda a, s: False)
    in_numpy = Simulator(r.subgraphs[0].binary).run([x])[0]
    np.testing.assert_array_equal(bits(in_c), bits(in_python))
    np.testing.assert_array_equal(bits(in_c), bits(in_numpy))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = in_c.transpose(0, 3, 1, 2) if in_c.shape != ref.shape else in_c
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()     # the practical fp16 bound (docs/simulator.md)


@pytest.mark.parametrize("name", sorted(REFS))
def test_post_in_c_reports_an_overflow_as_the_numpy_step_does(name):
    """act_post: numpy's function then round_fp16_, bit for bit, all finite over a tail of 11 values
    (GELU's last vector is a zero-padded copy: no flag from its padding); a NaN result is reported
    not finite in the tail, in the last lane of a full vector and in another lane."""
    from onnx_mrvl.sim.fp16 import round_fp16_
    so, kind = N.lib(), N.KINDS[name]
    x = (np.random.default_rng(3).standard_normal(1003) * 20).astype(np.float32)
    want = REFS[name](x.copy())
    assert round_fp16_(want)
    assert so.act_post(x.ctypes.data, x.size, kind, 1) == 1
    np.testing.assert_array_equal(bits(x), bits(want))
    # the tail lane; full vectors' lanes, the fourth vector of a 4-vector step on 8 and 16 lanes (25, 50)
    for at, threads in ((-1, 1), (5, 2), (15, 1), (25, 1), (50, 1), (512 + 31, 1)):
        y = np.full(1001, 2.0, np.float32)
        y[at] = np.nan
        assert so.act_post(y.ctypes.data, y.size, kind, threads) == 0, at


@pytest.mark.parametrize("where", ["dw", "pw"])
def test_depthwise_pair_with_a_c_activation_is_not_fused_and_keeps_it(monkeypatch, where):
    """A depthwise conv followed by a 1x1 conv (the dw_pw pair the plan runs as one pass) where one
    of them has SiLU: the pair's kind 10 / 11 records have no activation pass, so it stays two
    records and the SiLU is applied: the same bits as numpy's path."""
    import onnx_mrvl
    from onnx import TensorProto, helper, numpy_helper
    from onnx_mrvl.sim import Simulator
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 1, 3, 3)) * 0.4).astype(np.float32), "wd"),
             numpy_helper.from_array((rng.standard_normal((16, 32, 1, 1)) * 0.3).astype(np.float32), "wp")]
    dw_out = "ds" if where == "dw" else "d"
    nodes = [helper.make_node("Conv", ["x", "wd"], ["d"], pads=[1, 1, 1, 1], group=32)]
    if where == "dw":
        nodes += [helper.make_node("Sigmoid", ["d"], ["dsg"]), helper.make_node("Mul", ["d", "dsg"], ["ds"])]
    nodes.append(helper.make_node("Conv", [dw_out, "wp"], ["p"]))
    nodes += [helper.make_node("Sigmoid", ["p"], ["psg"]), helper.make_node("Mul", ["p", "psg"], ["y"])] \
        if where == "pw" else [helper.make_node("Identity", ["p"], ["y"])]
    g = helper.make_graph(nodes, "dwpw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 28, 28])], inits)
    r = onnx_mrvl.convert(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((1, 32, 28, 28)).astype(np.float32)
    sim = Simulator(r.subgraphs[0].binary)
    fast = sim.run([x])[0]
    recs = [e.rec for s in sim._static.segments if s[0] == "native" for e in s[1] if e.rec]
    assert any(len(rec) == 15 and rec[12] for rec in recs)          # the SiLU finished in C
    assert not any(rec[0] in (10, 11) for rec in recs)               # ... and so not paired
    monkeypatch.setattr(N, "apply_", lambda a, s: False)
    monkeypatch.setattr(N, "post_record", lambda fn: ())
    slow = Simulator(r.subgraphs[0].binary).run([x])[0]
    np.testing.assert_array_equal(bits(fast), bits(slow))


def test_overflow_after_an_activation_finished_in_c_raises(tmp_path):
    """SiLU of a conv output beyond fp16's range, finished inside run_steps: act_post's finiteness
    answer reaches the session, which raises our error naming the layer instead of returning inf."""
    import onnx_mrvl
    from onnx_mrvl.errors import MrvlRuntimeError
    model, shape = _act_model("silu")
    r = onnx_mrvl.convert(model)
    r.save(str(tmp_path / "o"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    from onnx_mrvl.sim import Simulator
    sim = Simulator(r.subgraphs[0].binary)
    sim.run([np.zeros(shape, np.float32)])
    assert any(e.rec is not None and len(e.rec) == 15 and e.rec[12]
               for s in sim._static.segments if s[0] == "native" for e in s[1])
    assert np.isfinite(sess.run(None, {"x": np.full(shape, 30.0, np.float32)})[0]).all()
    with pytest.raises(MrvlRuntimeError, match="fp16 overflow"):
        sess.run(None, {"x": np.full(shape, 30000.0, np.float32)})


def _silu_conv(c_out, size):
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((c_out, 8, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["y"])]
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c_out, size, size])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("c_out, size", [(16, 32), (64, 8)])     # parts of rows; of channel blocks
def test_conv_activation_per_part_same_bits_and_flags(monkeypatch, c_out, size):
    """A conv's C activation (record words 12-14) after a row split or a channel split of the conv: on
    1, 2 and 3 threads the same bits as numpy's step, and an overflow confined to the last rows (the
    last part) is still reported."""
    import onnx_mrvl
    from onnx_mrvl.errors import MrvlRuntimeError
    from onnx_mrvl.sim import Simulator
    binary = onnx_mrvl.convert(_silu_conv(c_out, size)).subgraphs[0].binary
    x = np.random.default_rng(1).standard_normal((1, 8, size, size)).astype(np.float32)
    hot = x.copy()
    hot[0, :, -1, -3:] = 30000.0                            # the bottom right corner only
    monkeypatch.setattr(N, "apply_", lambda a, s: False)
    monkeypatch.setattr(N, "post_record", lambda fn: ())
    want = Simulator(binary).run([x])[0]
    monkeypatch.undo()
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
        sim = Simulator(binary)
        np.testing.assert_array_equal(bits(sim.run([x])[0]), bits(want))
        assert any(e.rec is not None and len(e.rec) == 15 and e.rec[12]
                   for s in sim._static.segments if s[0] == "native" for e in s[1])
        with pytest.raises(MrvlRuntimeError, match="fp16 overflow"):
            sim.run([hot], on_overflow="raise")
        np.testing.assert_array_equal(bits(sim.run([x])[0]), bits(want))
