"""The onnxruntime shim: several models per process, threads, errors, stats, memory."""
import os
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.errors import ArtifactError, MrvlRuntimeError
from onnx_mrvl.ep import kernel

from onnx_mrvl.testing import models  # onnx_mrvl.testing.models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    out = {}
    for name, model in (("fm", onnx.load(EXAMPLE)), ("tiny", models.tiny_cnn(seed=3))):
        d = tmp_path_factory.mktemp(name)
        onnx_mrvl.convert(model).save(str(d))        # one conversion per folder: into the empty folder first
        onnx.save(model, str(d / "original.onnx"))
        out[name] = d
    return out


def _feed(sess, seed):
    rng = np.random.default_rng(seed)
    i = sess.get_inputs()[0]
    return {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)}


def test_two_models_in_one_process(two_models):
    sessions = {k: onnx_mrvl.InferenceSession(str(d / "model.onnx")) for k, d in two_models.items()}
    refs = {k: ort.InferenceSession(str(d / "original.onnx"), providers=["CPUExecutionProvider"])
            for k, d in two_models.items()}
    for seed in range(3):
        for k, sess in sessions.items():
            feed = _feed(sess, seed)
            got, want = sess.run(None, feed)[0], refs[k].run(None, feed)[0]
            assert got.shape == want.shape
            assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()
    digests = [{p.sha256 for p in s._mrvl_programs} for s in sessions.values()]
    assert not digests[0] & digests[1]


def test_eight_threads_match_sequential(two_models):
    sess = onnx_mrvl.InferenceSession(str(two_models["fm"] / "model.onnx"))
    feeds = [_feed(sess, s) for s in range(8)]
    expected = [sess.run(None, f)[0] for f in feeds]
    errors = []

    def work(k):
        try:
            for _ in range(50):
                got = sess.run(None, feeds[k])[0]
                if not np.array_equal(got, expected[k]):
                    errors.append(k)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_session_per_thread(two_models):
    path = str(two_models["tiny"] / "model.onnx")
    ref = onnx_mrvl.InferenceSession(path)
    feed = _feed(ref, 0)
    want = ref.run(None, feed)[0]
    results = []

    def work():
        s = onnx_mrvl.InferenceSession(path)
        results.append(all(np.array_equal(s.run(None, feed)[0], want) for _ in range(5)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 4


def test_stats_and_profiling(two_models, tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = onnx_mrvl.InferenceSession(str(two_models["fm"] / "model.onnx"), so)
    for s in range(3):
        sess.run(None, _feed(sess, s))
    (stats,) = sess.mrvl_stats()
    assert stats["region"] == "mrvl_region_0" and stats["calls"] >= 3
    assert stats["simulated_cycles_per_call"] > 0 and stats["wall_s"] > 0
    prof = sess.end_profiling()
    assert os.path.exists(prof) and "Subgraph" in open(prof).read()


def test_kernel_error_is_raised_not_fatal(two_models):
    sess = onnx_mrvl.InferenceSession(str(two_models["fm"] / "model.onnx"))
    feed = _feed(sess, 0)
    prog = sess._mrvl_programs[0]
    good = prog.simulator.run

    def broken(inputs, **kw):
        raise ValueError("simulated failure")

    prog.simulator.run = broken
    try:
        with pytest.raises(MrvlRuntimeError, match="mrvl_region_0.*simulated failure"):
            sess.run(None, feed)
    finally:
        prog.simulator.run = good
    assert np.isfinite(sess.run(None, feed)[0]).all()


def test_wrong_input_shape_names_region(two_models):
    sess = onnx_mrvl.InferenceSession(str(two_models["fm"] / "model.onnx"))
    prog = sess._mrvl_programs[0]
    with pytest.raises(MrvlRuntimeError, match="mrvl_region_0|shape"):
        prog.simulator.run([np.zeros((1, 1, 27, 28), np.float32)])


def test_tampered_sha_attribute(two_models, tmp_path):
    m = onnx.load(str(two_models["fm"] / "model.onnx"))
    for a in m.graph.node[0].attribute:
        if a.name == "sha256":
            a.s = b"0" * 64
    for f in os.listdir(two_models["fm"]):
        (tmp_path / f).write_bytes((two_models["fm"] / f).read_bytes())
    onnx.save(m, str(tmp_path / "model.onnx"))
    with pytest.raises(ArtifactError, match="sha256"):
        onnx_mrvl.InferenceSession(str(tmp_path / "model.onnx"))


def test_artifact_outside_model_folder_refused(two_models, tmp_path):
    m = onnx.load(str(two_models["fm"] / "model.onnx"))
    for a in m.graph.node[0].attribute:
        if a.name == "artifact":
            a.s = b"../../etc/passwd"
    onnx.save(m, str(tmp_path / "model.onnx"))
    with pytest.raises(ArtifactError, match="outside"):
        onnx_mrvl.InferenceSession(str(tmp_path / "model.onnx"))


def test_register_for_own_session(two_models):
    path = str(two_models["fm"] / "model.onnx")
    so = ort.SessionOptions()
    onnx_mrvl.ep.register(so, model_path=path)
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = _feed(sess, 0)
    ref = onnx_mrvl.InferenceSession(path).run(None, feed)[0]
    assert np.array_equal(sess.run(None, feed)[0], ref)


def test_one_session_options_for_several_sessions(two_models):
    """A SessionOptions reused for a second session (or for the same model twice) used to fail to
    load: the custom-op library was registered on it again ("Conflicting with a registered kernel")."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sessions = [onnx_mrvl.InferenceSession(str(two_models[k] / "model.onnx"), so) for k in ("fm", "tiny", "fm")]
    for k, sess in zip(("fm", "tiny", "fm"), sessions):
        feed = _feed(sess, 1)
        ref = onnx_mrvl.InferenceSession(str(two_models[k] / "model.onnx")).run(None, feed)[0]
        assert np.array_equal(sess.run(None, feed)[0], ref)
    path = str(two_models["tiny"] / "model.onnx")
    onnx_mrvl.ep.register(so, model_path=path)          # and by hand on the same options
    own = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feed = _feed(own, 2)
    assert np.array_equal(own.run(None, feed)[0], sessions[1].run(None, feed)[0])


def test_run_kernel_reads_string_flags(two_models):
    """The runtime ops take their attributes as onnxruntime-extensions passes them, strings (its
    per-call cast is skipped, ep/kernel.py): "0" must read as false, and the session's results
    are the simulator's own, bit for bit."""
    sess = onnx_mrvl.InferenceSession(str(two_models["tiny"] / "model.onnx"))
    feed = _feed(sess, 4)
    prog = sess._mrvl_programs[0]
    (x,) = feed.values()
    want = prog.simulator.run([x])[0]
    out = kernel._run_kernel(1)(x, region=prog.region, sha256=prog.sha256, packed_inputs="0",
                                packed_outputs="0", raise_overflow="1")
    assert out.shape == want.shape and np.array_equal(np.asarray(out), want)
    assert np.array_equal(sess.run(None, feed)[0].reshape(want.shape), want)


def test_programs_released_with_session(two_models):
    path = str(two_models["tiny"] / "model.onnx")
    sess = onnx_mrvl.InferenceSession(path)
    digest = sess._mrvl_programs[0].sha256
    before = kernel._programs[digest].refs
    extra = onnx_mrvl.InferenceSession(path)
    assert kernel._programs[digest].refs == before + 1
    del extra
    import gc
    gc.collect()
    assert kernel._programs[digest].refs == before


def _rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_memory_flat_over_1000_runs(two_models):
    sess = onnx_mrvl.InferenceSession(str(two_models["tiny"] / "model.onnx"))
    feed = _feed(sess, 0)
    for _ in range(100):
        sess.run(None, feed)
    base = _rss_kib()
    for _ in range(1000):
        sess.run(None, feed)
    grown = _rss_kib()
    assert grown <= base * 1.05, (base, grown)


def test_many_sessions_then_clean_exit(two_models, tmp_path):
    """Regression: ops defined after the library was registered crashed the process at exit."""
    import subprocess
    import sys
    det = tmp_path / "det"
    onnx_mrvl.convert(models.detection_like(seed=0)).save(str(det))
    code = ("import onnx_mrvl\n"
            f"a = onnx_mrvl.InferenceSession({str(two_models['tiny'] / 'model.onnx')!r})\n"
            f"b = onnx_mrvl.InferenceSession({str(det / 'model.onnx')!r})\n"
            f"c = onnx_mrvl.InferenceSession({str(two_models['fm'] / 'model.onnx')!r})\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_a_session_leaves_child_processes_on_protobufs_native_parser(tmp_path):
    """onnxruntime-extensions' import sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python; after an
    InferenceSession, a child process (an ``onnx-mrvl convert`` run by a script) still parses with
    upb, and so a corrupt large model file is our error (exit 3), not the pure-Python decoder's
    traceback holding a view of the mapped file (an internal BufferError, exit 4)."""
    import subprocess
    import sys
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    script = (
        "import os, subprocess, sys, numpy as np, onnx_mrvl\n"
        f"onnx_mrvl.convert({EXAMPLE!r}).save({str(tmp_path / 'out')!r})\n"
        f"s = onnx_mrvl.InferenceSession({str(tmp_path / 'out' / 'model.onnx')!r})\n"
        "i = s.get_inputs()[0]\n"
        "s.run(None, {i.name: np.zeros(i.shape, np.float32)})\n"
        "assert 'PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION' not in os.environ, os.environ['PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION']\n"
        "impl = subprocess.run([sys.executable, '-c', 'from google.protobuf.internal import api_implementation as a;"
        " print(a.Type())'], capture_output=True, text=True).stdout.strip()\n"
        "assert impl == 'upb', impl\n"
        "r = subprocess.run([sys.executable, '-c', 'import sys; from onnx_mrvl import modelio; modelio.MMAP_MIN = 0;"
        " from onnx_mrvl.cli.main import main; sys.exit(main(sys.argv[1:]))', 'convert', sys.argv[1], '-o', sys.argv[2]],"
        " capture_output=True, text=True)\n"
        "assert r.returncode == 3, r.stderr\n")
    env = {k: v for k, v in os.environ.items() if k != "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"}
    env.update(PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", script, str(bad), str(tmp_path / "o2")], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_corrupt_mapped_file_under_pure_python_protobuf_is_a_model_error(tmp_path):
    """A user who chose protobuf's pure-Python decoder: its DecodeError's traceback holds slices of
    the mapped file, which may not be unmapped then; still our ModelError (exit 3)."""
    import subprocess
    import sys
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x0a\x03abc" + b"\xff" * 64)
    env = dict(os.environ, PYTHONPATH=ROOT, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    main = ("import sys; from onnx_mrvl import modelio; modelio.MMAP_MIN = 0   # the mapped read of large files\n"
            "from onnx_mrvl.cli.main import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", main, "convert", str(bad), "-o", str(tmp_path / "o")],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 3 and "not an ONNX model" in r.stderr, r.stderr
