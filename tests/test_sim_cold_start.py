"""Cold start of ``onnx-mrvl run``: numba is imported only for the kernels a run uses (never when
the native kernels serve it), a notice says why the first run waits, and ``-vv`` shows our debug
logs, not numba's. Cold / warm times are measured in docs/simulator.md, not asserted here."""
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx_mrvl.testing.models import F32, GraphBuilder

import onnx_mrvl
from onnx_mrvl.cli.common import configure_logging
from onnx_mrvl.sim import native
from onnx_mrvl.sim.fp16 import round_fp16_

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = ("import sys; from onnx_mrvl.cli.main import main; code = main(sys.argv[1:]); "
          "from onnx_mrvl.sim import jit; "
          "print('RESULT', code, 'numba' in sys.modules, ','.join(sorted(jit._kernels)))")


def mixed_cnn():
    """Conv, depthwise conv, residual Add, Sigmoid-gated Mul, MaxPool, GAP, Gemm: every kind of
    simulator kernel (conv / depthwise / binary / epilogue / rounding) on one small model."""
    g = GraphBuilder(11)
    x = g.relu(g.conv("input", 3, 16, 3, "conv1"), "relu1")
    d = g.relu(g.conv(x, 16, 16, 3, "dw", group=16), "relu_dw")
    x = g.node("Add", [x, d], "add")
    x = g.node("Mul", [x, g.node("Sigmoid", [x], "gate")], "mul")
    x = g.node("MaxPool", [x], "pool", kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    g.gemm(x, 16, 10, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("mixed", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 10])])


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    d = tmp_path_factory.mktemp("cold")
    onnx_mrvl.convert(mixed_cnn()).save(str(d))
    return str(d / "model.onnx")


def run_cli(args, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), **env)
    r = subprocess.run([sys.executable, "-c", DRIVER] + args, capture_output=True, text=True, env=full,
                       timeout=600)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT"))
    _, code, imported, kernels = (line.split(" ") + [""])[:4]
    return int(code), imported == "True", [k for k in kernels.split(",") if k], r.stderr


def test_native_run_does_not_import_numba(converted):
    if not native.on():
        pytest.skip(f"native kernels unavailable here: {native.why_disabled()}")
    code, imported, kernels, err = run_cli(["run", converted, "-vv"])
    assert code == 0, err
    assert not imported and kernels == [], err
    assert "numba" not in err.replace("numba / numpy", "")


def test_numba_path_compiles_only_used_kernels_and_vv_hides_numba(tmp_path):
    """Without native kernels, on an empty numba cache: only the kernels this model uses are
    compiled (tiny_cnn: no depthwise conv, no element-wise op), and -vv shows our debug lines (a
    few dozen), not numba's bytecode dumps (~750k lines)."""
    from onnx_mrvl.testing.models import tiny_cnn
    onnx_mrvl.convert(tiny_cnn()).save(str(tmp_path / "m"))
    code, imported, kernels, err = run_cli(["run", str(tmp_path / "m" / "model.onnx"), "-vv"],
                                           ONNX_MRVL_SIM_NATIVE="0", NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert code == 0, err[-3000:]
    assert imported and "epilogue" in kernels
    assert "depthwise" not in kernels and "binary" not in kernels
    lines = err.splitlines()
    assert len(lines) < 200, len(lines)
    assert not [ln for ln in lines if ln.split(" ")[1:2] and ln.split(" ")[1].startswith("numba")]
    assert any(ln.startswith("DEBUG onnx_mrvl.sim.jit: numba kernel epilogue ready") for ln in lines)
    assert os.listdir(tmp_path / "numba")                     # compiled into the cache we named


def test_logging_keeps_third_party_debug_out_unless_vvv(capsys):
    ours, theirs = logging.getLogger("onnx_mrvl.sim.test"), logging.getLogger("numba.core.ssa")
    for verbose, shown in ((2, False), (3, True)):
        restore = configure_logging(verbose, False)
        try:
            assert theirs.isEnabledFor(logging.DEBUG) is shown     # numba does not even format it
            ours.debug("our line")
            theirs.debug("their line")
            theirs.warning("their warning")
        finally:
            restore()
        err = capsys.readouterr().err
        assert "DEBUG onnx_mrvl.sim.test: our line" in err
        assert ("their line" in err) is shown and "WARNING numba.core.ssa: their warning" in err
    assert theirs.level == logging.NOTSET                        # restored


def test_native_build_says_so(monkeypatch, tmp_path, caplog):
    cc = native._compiler()
    if cc is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("ONNX_MRVL_CACHE_DIR", str(tmp_path))
    src = tmp_path.parent / f"{tmp_path.name}_small.c"      # a small source: the real one is ~50 s of CPU
    src.write_text("int mrvl_small(void) { return 7; }\n")
    monkeypatch.setattr(native, "_SRC", str(src))
    with caplog.at_level(logging.INFO, logger="onnx_mrvl.notice"):
        native._build(cc)
        native._build(cc)                                      # cached: no second notice
    notes = [r.getMessage() for r in caplog.records if r.name == "onnx_mrvl.notice"]
    assert len(notes) == 1 and notes[0].startswith("building the simulator's native kernels") \
        and str(tmp_path) in notes[0]


def test_native_rounding_matches_numpy(monkeypatch):
    if not native.on():
        pytest.skip(f"native kernels unavailable here: {native.why_disabled()}")
    rng = np.random.default_rng(4)
    bits = rng.integers(0, 2 ** 32, size=100_003, dtype=np.uint64).astype(np.uint32)
    specials = np.array([65504, 65519.99, 65520, -65520, 2.0 ** -25, 2.0 ** -24 * 1.5, np.nan, -np.inf,
                         -0.0, 1e-8], np.float32)
    for data in (bits.view(np.float32), specials, np.ones(17, np.float32)):
        fast = data.copy()
        ok_fast = round_fp16_(fast)
        with np.errstate(all="ignore"):
            want = data.astype(np.float16).astype(np.float32)
        same = (fast.view(np.uint32) == want.view(np.uint32)) | (np.isnan(fast) & np.isnan(want))
        assert same.all()
        assert ok_fast == bool(np.isfinite(want).all())

