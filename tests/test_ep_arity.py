"""Regions with any number of inputs and outputs run (onnxruntime-extensions ops have a fixed arity:
the runtime form packs them through one op, ep/runtime_form.py)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.errors import MrvlRuntimeError


def _model(nodes, inputs, outputs, inits):
    m = helper.make_model(helper.make_graph(nodes, "arity", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def many_inputs(n=37, c=4, hw=8, seed=0):
    """n inputs, each through its own Conv, summed by a chain of Adds: one region with n inputs."""
    rng = np.random.default_rng(seed)
    nodes, inits, ins = [], [], []
    for i in range(n):
        ins.append(helper.make_tensor_value_info(f"x{i}", T.FLOAT, [1, c, hw, hw]))
        inits.append(numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c)))
                                             .astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [f"x{i}", f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
    acc = "c0"
    for i in range(1, n):
        nodes.append(helper.make_node("Add", [acc, f"c{i}"], [f"s{i}"], name=f"add{i}"))
        acc = f"s{i}"
    return _model(nodes, ins, [helper.make_tensor_value_info(acc, T.FLOAT, [1, c, hw, hw])], inits)


def many_outputs(n=20, c=4, hw=8, seed=0):
    """A stem Conv feeding n 1x1 Conv heads, each a model output: one region with n outputs."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w_stem"], ["h"], name="stem", pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w_stem")]
    outs = []
    for i in range(n):
        inits.append(numpy_helper.from_array((rng.standard_normal((i % 3 + 1, c, 1, 1)) * 0.5).astype(np.float32),
                                             f"w{i}"))
        nodes.append(helper.make_node("Conv", ["h", f"w{i}"], [f"y{i}"], name=f"head{i}"))
        outs.append(helper.make_tensor_value_info(f"y{i}", T.FLOAT, [1, i % 3 + 1, hw, hw]))
    return _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, hw, hw])], outs, inits)


def _check(model, tmp_path, n_in, n_out):
    res = onnx_mrvl.convert(model)
    assert [(n.op_type, len(n.input), len(n.output)) for n in res.model.graph.node] == \
        [(f"Subgraph_{n_in}x{n_out}", n_in, n_out)]
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feed = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    got, want = sess.run(None, feed), ref.run(None, feed)
    assert len(got) == n_out
    for g, w in zip(got, want):
        assert g.shape == w.shape and np.isfinite(g).all()
        assert np.abs(g - w).max() <= 1e-2 * np.abs(w).max()
    return sess, feed


def test_region_with_37_inputs_runs(tmp_path):
    sess, feed = _check(many_inputs(37), tmp_path, 37, 1)
    # the packed inputs are checked against the compiled shapes, input by input
    prog = sess._mrvl_programs[0]
    assert [list(s) for s in prog.simulator.input_shapes] == [[1, 4, 8, 8]] * 37


def test_region_with_20_outputs_runs(tmp_path):
    _check(many_outputs(20), tmp_path, 1, 20)


def test_packed_region_error_is_raised(tmp_path):
    model = many_inputs(20)
    sess = onnx_mrvl.InferenceSession(onnx_mrvl.convert(model).save(str(tmp_path)))
    feed = {i.name: np.ones(i.shape, np.float32) for i in sess.get_inputs()}
    prog = sess._mrvl_programs[0]
    good = prog.simulator.run
    seen = []

    def broken(inputs, **kw):
        seen.append([a.shape for a in inputs])
        raise ValueError("packed failure")
    prog.simulator.run = broken
    try:
        with pytest.raises(MrvlRuntimeError, match="mrvl_region_0.*packed failure"):
            sess.run(None, feed)
    finally:
        prog.simulator.run = good
    assert seen == [[(1, 4, 8, 8)] * 20]     # unpacked into the compiled shapes, in order
    assert np.isfinite(sess.run(None, feed)[0]).all()


def test_packed_inputs_are_checked_against_the_compiled_shapes(tmp_path):
    """A packed vector whose dimensions differ from the binary's (same number of values) fails
    with the shapes named, instead of running on a mis-split input."""
    from onnx_mrvl.ep import failures, kernel
    sess = onnx_mrvl.InferenceSession(onnx_mrvl.convert(many_inputs(18)).save(str(tmp_path)))
    prog = sess._mrvl_programs[0]
    dims = [1, 4, 8, 8] * 17 + [1, 8, 4, 8]           # the last input transposed: same size
    packed = np.concatenate([np.asarray(dims, np.float32), np.ones(18 * 256, np.float32)])
    out = kernel._run_kernel(1)(packed, region="mrvl_region_0", sha256=prog.sha256, packed_inputs=1)
    assert out.shape[0] == 0                           # the guard's cue, never values
    err = failures.take(f"{{0,{out.shape[1]}}}")
    assert isinstance(err, MrvlRuntimeError) and "[1, 8, 4, 8]" in str(err) and "mrvl_region_0" in str(err)
