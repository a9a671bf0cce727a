"""Fail closed at run time: a failing region raises MrvlRuntimeError through every run method of the
session, in every execution mode and on every thread; no placeholder output ever reaches the
caller; other Python custom ops of the process behave as before (ep/failures.py)."""
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.ep import failures
from onnx_mrvl.errors import MrvlRuntimeError

from onnx_mrvl.testing import models  # onnx_mrvl.testing.models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = 1000.0        # an input whose first value is >= MARK makes the patched region fail


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("failclosed")
    model = models.tiny_cnn(seed=5)
    onnx_mrvl.convert(model).save(str(d))
    return str(d / "model.onnx")


def _feed(sess, seed, mark=None):
    i = sess.get_inputs()[0]
    x = np.random.default_rng(seed).standard_normal(i.shape).astype(np.float32)
    if mark is not None:
        x.flat[0] = mark
    return {i.name: x}


class Breaker:
    """Makes the session's region fail for marked inputs, with the mark in the message."""

    def __init__(self, sess):
        self.prog = sess._mrvl_programs[0]
        self.good = self.prog.simulator.run

    def __enter__(self):
        good = self.good

        def run(inputs, **kw):
            v = float(np.asarray(inputs[0]).flat[0])
            if v >= MARK:
                raise ValueError(f"forced failure {v:.0f}")
            return good(inputs, **kw)
        self.prog.simulator.run = run
        return self

    def __exit__(self, *exc):
        self.prog.simulator.run = self.good


def _sessions(path, mode):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if mode == "parallel":
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
        so.inter_op_num_threads = 2
    return onnx_mrvl.InferenceSession(path, so)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_every_run_method_raises(converted, mode):
    sess = _sessions(converted, mode)
    kept = len(failures._records)
    name = sess.get_inputs()[0].name
    out = sess.get_outputs()[0].name
    good = _feed(sess, 0)
    want = sess.run(None, good)[0]
    bad = _feed(sess, 0, mark=MARK + 7)
    with Breaker(sess):
        with pytest.raises(MrvlRuntimeError, match=r"region 'mrvl_region_0' failed: ValueError: forced failure 1007"):
            sess.run(None, bad)
        with pytest.raises(MrvlRuntimeError, match="forced failure 1007"):
            sess.run_with_ort_values(None, {name: ort.OrtValue.ortvalue_from_numpy(bad[name])})
        binding = sess.io_binding()
        binding.bind_cpu_input(name, bad[name])
        binding.bind_output(out)
        with pytest.raises(MrvlRuntimeError, match="forced failure 1007"):
            sess.run_with_iobinding(binding)
        done = threading.Event()
        got = {}

        def callback(results, data, err):
            got["results"], got["err"] = results, err
            done.set()
        sess.run_async(None, bad, callback, None)
        assert done.wait(60)
        assert "mrvl_region_0" in got["err"] and "forced failure 1007" in got["err"]
        # the same session still runs good inputs correctly, through every method
        assert np.array_equal(sess.run(None, good)[0], want)
        binding = sess.io_binding()
        binding.bind_cpu_input(name, good[name])
        binding.bind_output(out)
        sess.run_with_iobinding(binding)
        assert np.array_equal(binding.copy_outputs_to_cpu()[0], want)
    assert len(failures._records) == kept  # every recorded failure was claimed by its run


def test_error_names_region_layer_and_original_nodes(converted):
    sess = onnx_mrvl.InferenceSession(converted)
    prog = sess._mrvl_programs[0]
    good = prog.simulator.run

    def broken(inputs, **kw):    # as the simulator reports a failing layer
        raise MrvlRuntimeError("conv2d layer failed: bad", node="mrvl_conv_7", origin=["conv_7"])
    prog.simulator.run = broken
    try:
        with pytest.raises(MrvlRuntimeError) as info:
            sess.run(None, _feed(sess, 1))
    finally:
        prog.simulator.run = good
    err = info.value
    assert err.node == "mrvl_conv_7" and err.origin == ("conv_7",)
    assert "region 'mrvl_region_0'" in str(err) and "conv_7" in str(err)


def test_a_cpu_node_failing_on_the_inputs_is_our_error_naming_it(tmp_path):
    """A token id past the embedding table (Gather on the CPU, MatMul on the accelerator): onnxruntime's
    InvalidArgument was raised as it is; now MrvlRuntimeError naming the node and onnxruntime's reason.
    Inputs in range run as before, with onnxruntime's numbers."""
    from onnx import TensorProto, helper, numpy_helper as nh
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((10, 16)).astype(np.float32), "emb"),
             nh.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")]
    g = helper.make_graph([helper.make_node("Gather", ["emb", "ids"], ["e"], name="lookup"),
                           helper.make_node("MatMul", ["e", "w"], ["y"], name="fc")], "emb",
                          [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["fc"].placement == "accelerator" and r.report.decisions["lookup"].placement == "cpu"
    r.save(str(tmp_path / "o"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    ids = np.array([[1, 2, 3, 9]], np.int64)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"ids": ids})[0]
    np.testing.assert_allclose(sess.run(None, {"ids": ids})[0], want, rtol=1e-2, atol=1e-3 * np.abs(want).max())
    with pytest.raises(MrvlRuntimeError, match=r"\[lookup\] onnxruntime failed running node 'lookup' \(Gather, "
                                               r"on the CPU\) on these inputs: indices element out of data") as info:
        sess.run(None, {"ids": np.array([[1, 2, 3, 40]], np.int64)})
    assert info.value.node == "lookup" and info.value.hint


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_eight_threads_each_get_their_own_error(converted, mode):
    sess = _sessions(converted, mode)
    feeds = [_feed(sess, k) for k in range(8)]
    want = [sess.run(None, f)[0] for f in feeds]
    problems = []

    def work(k):
        for rep in range(6):
            fail = (k + rep) % 2 == 0
            mark = MARK + 100 * k + rep
            feed = _feed(sess, k, mark=mark) if fail else feeds[k]
            try:
                got = sess.run(None, feed)[0]
            except MrvlRuntimeError as exc:
                if not fail or f"forced failure {mark:.0f}" not in str(exc):
                    problems.append((k, rep, "wrong error", str(exc)[:200]))
                continue
            except Exception as exc:  # noqa: BLE001
                problems.append((k, rep, "foreign error", repr(exc)[:200]))
                continue
            if fail:
                problems.append((k, rep, "no error", got.shape))
            elif not np.array_equal(got, want[k]):
                problems.append((k, rep, "wrong result", bool(np.isnan(got).any())))

    with Breaker(sess):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not problems, problems[:4]


def test_token_lookup_is_exact():
    err = MrvlRuntimeError("x", node="r")
    token = failures.record(err)
    assert failures.take(f"Input shape:{{0,{token + 1}}}") is None
    assert failures.take(f"Input shape:{{0,{token}}}, requested shape:{{1,8}}") is err
    assert failures.take(f"Input shape:{{0,{token}}}") is None          # claimed once
    lost = failures.translate(RuntimeError("Name:'mrvl_region_3/mrvl_guard_new_reshape' Status Message: x"))
    assert isinstance(lost, MrvlRuntimeError) and lost.node == "mrvl_region_3"
    assert failures.translate(RuntimeError("Name:'Conv_1' Status Message: x")) is None


def _run_script(code, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": ROOT})


OTHER_OP = """
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto as T
from onnxruntime_extensions import onnx_op, PyCustomOpDef, get_library_path

@onnx_op(op_type="other::Scale", inputs=[PyCustomOpDef.dt_float], outputs=[PyCustomOpDef.dt_float, PyCustomOpDef.dt_int64],
         attrs={"factor": PyCustomOpDef.dt_float, "bias": PyCustomOpDef.dt_int64, "tag": PyCustomOpDef.dt_string})
def scale(x, factor=1.0, bias=0, tag=""):
    assert isinstance(factor, float) and isinstance(bias, int) and tag == "t", (factor, bias, tag)
    return x * factor + bias, np.array(x.shape, np.int64)

nodes = [helper.make_node("Scale", ["x"], ["y", "s"], domain="other", factor=2.5, bias=3, tag="t")]
g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", T.FLOAT, [2, 3]), helper.make_tensor_value_info("s", T.INT64, [2])])
other = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("other", 1)])
other.ir_version = 8
x = np.arange(6, dtype=np.float32).reshape(2, 3)

def run_other():
    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    y, s = ort.InferenceSession(other.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    return y, s
"""


def test_other_python_custom_op_unchanged(converted, tmp_path):
    proc = _run_script(OTHER_OP + f"""
before = run_other()
import onnx_mrvl
sess = onnx_mrvl.InferenceSession({converted!r})
i = sess.get_inputs()[0]
out = sess.run(None, {{i.name: np.ones(i.shape, np.float32)}})[0]
assert np.isfinite(out).all()
after = run_other()
for a, b in zip(before, after):
    assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)
assert np.array_equal(after[0], x * 2.5 + 3) and after[1].tolist() == [2, 3]
print("ok")
""", tmp_path)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]


def test_session_on_saved_model_stops_the_process(converted, tmp_path):
    """A session built by hand on the saved model has no guard: a failure cannot be raised to the
    caller, so the process stops instead of returning anything (fail closed). The runtime form
    (ep.runtime_model) of the same model raises."""
    common = f"""
import numpy as np, onnxruntime as ort, onnx_mrvl
from onnx_mrvl.ep import failures
path = {converted!r}
so = ort.SessionOptions()
so.log_severity_level = 4
onnx_mrvl.ep.register(so, model_path=path)
"""
    breaker = """
prog = next(iter(onnx_mrvl.ep.kernel._programs.values()))
def broken(inputs, **kw):
    raise ValueError("forced failure")
prog.simulator.run = broken
i = sess.get_inputs()[0]
feed = {i.name: np.ones(i.shape, np.float32)}
"""
    proc = _run_script(common + "sess = ort.InferenceSession(path, so, providers=['CPUExecutionProvider'])\n"
                       + breaker + "out = sess.run(None, feed)\nprint('returned', out)\n", tmp_path)
    assert proc.returncode != 0 and "returned" not in proc.stdout
    assert "mrvl_region_0" in proc.stderr and "forced failure" in proc.stderr
    proc = _run_script(common + "sess = ort.InferenceSession(onnx_mrvl.ep.runtime_model(path).SerializeToString(), "
                       "so, providers=['CPUExecutionProvider'])\n" + breaker + """
try:
    sess.run(None, feed)
except Exception as exc:
    err = failures.translate(exc)
    print(type(err).__name__, err)
""", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MrvlRuntimeError" in proc.stdout and "forced failure" in proc.stdout
