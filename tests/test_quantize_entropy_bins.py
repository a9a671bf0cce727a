"""``calibration_method="entropy"`` fails closed (quantize/static.py ``entropy_bins``): the finer
histogram reaches onnxruntime's Entropy calibrator only through ``create_calibrator`` of
``onnxruntime.quantization.quantize``; when that function is gone, takes no ``extra_options`` or is
not called, the method would silently be MinMax, so the conversion stops with an
``UnsupportedError`` naming the method and what to use instead, and leaves onnxruntime unpatched."""
from __future__ import annotations

import importlib
import shutil

import numpy as np
import pytest
from onnx import TensorProto

from onnx_mrvl.errors import UnsupportedError
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
ORT_Q = importlib.import_module("onnxruntime.quantization.quantize")
ORT_CAL = importlib.import_module("onnxruntime.quantization.calibrate")


def _model():
    g = GraphBuilder(0, 13)
    g.conv(g.relu(g.conv("input", 3, 8, 3, "c1"), "r1"), 8, 4, 3, "c2")
    g.nodes[-1].output[0] = "output"
    return g.model("tail", [("input", TensorProto.FLOAT, [1, 3, 8, 8])], [("output", TensorProto.FLOAT, [1, 4, 8, 8])])


def _quantize(method="entropy"):
    from onnx_mrvl.quantize import quantize_model
    rng = np.random.default_rng(0)
    cal = [{"input": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    return quantize_model(_model(), quantize="int8", calibration=cal, calibration_method=method)


def _refused(match):
    with pytest.raises(UnsupportedError, match=match) as err:
        _quantize()
    assert "entropy" in str(err.value) and err.value.hint and "percentile" in err.value.hint
    assert "failed on this model" not in str(err.value)   # not re-wrapped as onnxruntime failing on the model


def test_entropy_passes_its_bins_and_restores_onnxruntime():
    seen = []
    real = ORT_Q.create_calibrator

    def spy(*args, **kwargs):
        seen.append(kwargs.get("extra_options", {}).get("num_bins"))
        return real(*args, **kwargs)
    ORT_Q.create_calibrator = spy
    try:
        _quantize()
        assert ORT_Q.create_calibrator is spy          # put back as found
    finally:
        ORT_Q.create_calibrator = real
    from onnx_mrvl.quantize.static import ENTROPY_BINS
    assert seen == [ENTROPY_BINS]
    _quantize("minmax")
    assert ORT_Q.create_calibrator is ORT_CAL.create_calibrator


def test_entropy_without_create_calibrator_is_refused(monkeypatch):
    monkeypatch.delattr(ORT_Q, "create_calibrator")
    _refused("has no create_calibrator")
    assert not hasattr(ORT_Q, "create_calibrator")     # nothing left behind
    monkeypatch.undo()
    assert ORT_Q.create_calibrator is ORT_CAL.create_calibrator


def test_entropy_with_a_changed_create_calibrator_is_refused(monkeypatch):
    def changed(model, op_types_to_calibrate=None, augmented_model_path="a.onnx", calibrate_method=None):
        raise AssertionError("must not be called")
    monkeypatch.setattr(ORT_Q, "create_calibrator", changed)
    _refused("without extra_options")
    assert ORT_Q.create_calibrator is changed


def test_entropy_whose_calibrator_is_not_called_through_the_module_is_refused(monkeypatch):
    """A quantize_static that no longer calls ``quantize.create_calibrator`` (here: one that writes
    its input back) would never see the bins: refused after the call, the wrapper removed."""
    from onnxruntime import quantization as q
    monkeypatch.setattr(q, "quantize_static", lambda src, dst, *a, **k: shutil.copy(src, dst))
    _refused("did not call")
    assert ORT_Q.create_calibrator is ORT_CAL.create_calibrator
