"""Internal failures of convert() raise by default; keeping the model or a region on the CPU is an
explicit choice (fallback=True / --fallback) that warns and records the reason."""
import logging
import os

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import CompileError

from onnx_mrvl.testing import models  # onnx_mrvl.testing.models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "fashion_mnist.onnx")


def _bug(*args, **kwargs):
    raise KeyError("simulated bug")


def test_internal_failure_raises_by_default(monkeypatch):
    monkeypatch.setattr("onnx_mrvl.pipeline.fuse", _bug)
    with pytest.raises(KeyError, match="simulated bug"):
        onnx_mrvl.convert(EXAMPLE)


def test_internal_failure_with_fallback_keeps_the_model_on_the_cpu(monkeypatch, caplog, tmp_path):
    monkeypatch.setattr("onnx_mrvl.pipeline.fuse", _bug)
    with caplog.at_level(logging.WARNING, logger="onnx_mrvl"):
        res = onnx_mrvl.convert(EXAMPLE, fallback=True)
    assert res.subgraphs == []
    assert len(res.report.warnings) == 1 and "simulated bug" in res.report.warnings[0]
    assert any("simulated bug" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert all(d.placement == "cpu" and "fallback=True" in d.reason for d in res.report.decisions.values())
    # the CPU model is the original and still runs
    sess = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"])
    i = sess.get_inputs()[0]
    assert np.isfinite(sess.run(None, {i.name: np.ones(i.shape, np.float32)})[0]).all()


def test_strict_is_a_deprecated_alias(monkeypatch):
    monkeypatch.setattr("onnx_mrvl.pipeline.fuse", _bug)
    with pytest.warns(DeprecationWarning):
        with pytest.raises(KeyError):
            onnx_mrvl.convert(EXAMPLE, strict=True)
    with pytest.warns(DeprecationWarning):
        assert onnx_mrvl.convert(EXAMPLE, strict=False).subgraphs == []


def _compile_fails(kind):
    from onnx_mrvl import emit
    real = emit.compile_program_sha256

    def compile_program(nodes_json, consts_json, options):
        if kind == "compile_error":
            raise CompileError("simulated compile failure", node="layer_x")
        raise IndexError("simulated compile bug")
    return real, compile_program


@pytest.mark.parametrize("kind,exc", [("compile_error", CompileError), ("bug", IndexError)])
def test_region_failure_raises_or_falls_back(monkeypatch, caplog, kind, exc):
    model = models.tiny_cnn(seed=2)
    _, broken = _compile_fails(kind)
    monkeypatch.setattr("onnx_mrvl.emit.compile_program_sha256", broken)   # what compile_regions calls
    with pytest.raises(exc, match="simulated compile"):
        onnx_mrvl.convert(model)
    with caplog.at_level(logging.WARNING, logger="onnx_mrvl"):
        res = onnx_mrvl.convert(model, fallback=True)
    assert res.subgraphs == []
    assert res.report.warnings and all("mrvl_region_0" in w and "simulated compile" in w
                                       for w in res.report.warnings)
    assert any("simulated compile" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    conv = [d for d in res.report.decisions.values() if d.op_type == "Conv"]
    assert conv and all(d.placement == "cpu" and "simulated compile" in d.reason for d in conv)


def test_cli_exit_4_then_fallback(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("onnx_mrvl.pipeline.fuse", _bug)
    assert main(["convert", EXAMPLE, "-o", str(tmp_path / "a")]) == 4
    err = capsys.readouterr().err
    assert "internal error" in err and "simulated bug" in err
    assert main(["convert", EXAMPLE, "-o", str(tmp_path / "b"), "--fallback"]) == 0
    out = capsys.readouterr()
    assert "simulated bug" in out.err and "WARNING" in out.err and "0 region(s)" in out.out
    assert os.path.exists(tmp_path / "b" / "model.onnx")
