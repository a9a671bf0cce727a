"""DynamicQuantizeLSTM with calibration (quantize/dynamic_lstm_int8.py): the default keeps the fp16
LSTM with dequantized weights and says why; ``quantize_options={"recurrent": "int8"}`` makes it an
int8 recurrent layer with a calibrated input scale whose int8 W / R codes are the dynamic model's."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.errors import UsageError
from onnx_mrvl.testing import recurrent_models as rm

quantization = pytest.importorskip("onnxruntime.quantization")


def _dynamic(tmp_path, direction="forward", per_channel=False, weight_type="QInt8"):
    m = rm.cell_model("LSTM", steps=12, feat=16, hid=20, seed=3, head=True, direction=direction)
    src, dst = str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx")
    onnx.save(m, src)
    quantization.quantize_dynamic(src, dst, weight_type=getattr(quantization.QuantType, weight_type),
                                  per_channel=per_channel)
    return dst


def _calib(n=8, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((12, 1, 16)).astype(np.float32)} for _ in range(n)]


def _lstm_record(r):
    (rec,) = [x for x in r.report.quantization["layers"] if x["op_type"] == "DynamicQuantizeLSTM"]
    return rec


def test_default_keeps_fp16_and_says_why(tmp_path):
    r = onnx_mrvl.convert(_dynamic(tmp_path), calibration=_calib())
    rec = _lstm_record(r)
    assert rec["precision"] == "fp16" and "recurrent" in rec["not_int8"]
    dec = r.report.decisions[rec["layer"]]
    assert dec.placement == "accelerator" and dec.precision == "fp16"
    assert "quantize_options={'recurrent': 'int8'}" in dec.reason
    assert r.report.quantization["recurrent"] == "fp16"


@pytest.mark.parametrize("direction,per_channel,weight_type", [("forward", False, "QInt8"),
                                                               ("bidirectional", False, "QInt8"),
                                                               ("reverse", True, "QInt8"),
                                                               ("forward", False, "QUInt8")])
def test_option_int8_recurrent_layer(tmp_path, direction, per_channel, weight_type):
    """One region; the LSTM an int8 recurrent layer whose codes are the dynamic model's; against
    onnxruntime's run of the rewritten QDQ model (the quantize stage) within the fp16 bound."""
    dyn = _dynamic(tmp_path, direction, per_channel, weight_type)
    r = onnx_mrvl.convert(dyn, calibration=_calib(), quantize_options={"recurrent": "int8"})
    rec = _lstm_record(r)
    assert rec["precision"] == "int8 in, fp16 out", rec
    dec = r.report.decisions[rec["layer"]]
    assert dec.precision == "int8 in, fp16 out" and "calibrated" in dec.reason
    assert len(r.subgraphs) == 1
    # the int8 codes: the dynamic model's W (transposed to [D, 4H, I]; uint8 recoded q - 128)
    d = onnx.load(dyn)
    node = next(n for n in d.graph.node if n.op_type == "DynamicQuantizeLSTM")
    w = onnx.numpy_helper.to_array(next(t for t in d.graph.initializer if t.name == node.input[1]))
    static = r.stages["quantize"]
    lstm = next(n for n in static.graph.node if n.op_type == "LSTM")
    dq = next(n for n in static.graph.node if n.output[0] == lstm.input[1])
    codes = onnx.numpy_helper.to_array(next(t for t in static.graph.initializer if t.name == dq.input[0]))
    want = w.transpose(0, 2, 1).astype(np.int32) - (128 if w.dtype == np.uint8 else 0)
    assert codes.dtype == np.int8 and np.array_equal(codes.astype(np.int32), want)
    out = str(tmp_path / "out")
    r.save(out, overwrite=True)
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    ref = ort.InferenceSession(static.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(2):
        f = _calib(1, 50 + seed)[0]
        y, y0 = sess.run(None, f)[0], ref.run(None, f)[0]
        assert np.abs(y - y0).max() <= 1e-2 * np.abs(y0).max()


def test_option_bidirectional_per_gate_row(tmp_path):
    """Per-gate-row scales of a BiLSTM: DQ of [2*4H, I] codes (axis 0) and a Reshape, read through by
    fuse: an int8 recurrent layer with the dynamic model's codes and scales, within the fp16 bound
    of the QDQ stage's onnxruntime run."""
    dyn = _dynamic(tmp_path, "bidirectional", per_channel=True)
    r = onnx_mrvl.convert(dyn, calibration=_calib(), quantize_options={"recurrent": "int8"})
    rec = _lstm_record(r)
    assert rec["precision"] == "int8 in, fp16 out" and "per gate row" in rec["weights"], rec
    assert len(r.subgraphs) == 1
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    out = str(tmp_path / "out")
    r.save(out, overwrite=True)
    sess = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    ref = ort.InferenceSession(r.stages["quantize"].SerializeToString(), providers=["CPUExecutionProvider"])
    f = _calib(1, 77)[0]
    y, y0 = sess.run(None, f)[0], ref.run(None, f)[0]
    assert np.abs(y - y0).max() <= 1e-2 * np.abs(y0).max()


def test_option_errors(tmp_path):
    with pytest.raises(UsageError, match="recurrent='int4'"):
        onnx_mrvl.convert(_dynamic(tmp_path), calibration=_calib(), quantize_options={"recurrent": "int4"})


def test_option_spellings(tmp_path):
    """recurrent=True / "true" mean "int8" on a dynamic model too (the float recipe's spelling)."""
    for v in (True, "true"):
        r = onnx_mrvl.convert(_dynamic(tmp_path), calibration=_calib(), quantize_options={"recurrent": v})
        assert _lstm_record(r)["precision"] == "int8 in, fp16 out"
