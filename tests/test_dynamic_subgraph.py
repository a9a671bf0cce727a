"""quantize_dynamic(extra_options={"EnableSubgraph": True}) of a model with If branches: onnxruntime's
quantizer writes com.microsoft DynamicQuantizeLSTM into the bodies without importing the domain (the
main graph has none of its ops) and the If above the nodes its bodies read. onnxruntime runs it; the
load check refused it (`the model fails the ONNX checker: Nodes in a graph must be topologically
sorted`): model_checks.ort_domain_imports imports onnxruntime's domains as it does, the bodies' LSTMs
become fp16 layers on dequantized weights, the output within the fp16 bound of onnxruntime's run."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime import quantization as q

import onnx_mrvl
from onnx_mrvl.testing import control_flow_models as CF

TOL = 1e-2      # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|


def test_enable_subgraph_dynamic_model_converts(tmp_path):
    src, qpath = str(tmp_path / "vad.onnx"), str(tmp_path / "vad.dyn.onnx")
    onnx.save(CF.vad_like(seed=0), src)
    q.quantize_dynamic(src, qpath, weight_type=q.QuantType.QInt8, extra_options={"EnableSubgraph": True})
    model = onnx.load(qpath)
    bodies = [b.op_type for n in model.graph.node if n.op_type == "If" for a in n.attribute for b in a.g.node]
    assert "DynamicQuantizeLSTM" in bodies and "com.microsoft" not in {o.domain for o in model.opset_import}
    result = onnx_mrvl.convert(qpath)
    result.save(str(tmp_path / "out"), overwrite=True)
    cpu = {d.op_type for d in result.report.cpu_nodes()}
    assert cpu <= {"If", "Equal"}, cpu                      # the If runs in onnxruntime, its bodies offloaded
    assert len(result.subgraphs) >= 3                       # the main graph's conv + one region per branch
    _matches_onnxruntime(qpath, str(tmp_path / "out" / "model.onnx"))


def test_enable_subgraph_dynamic_model_with_calibration(tmp_path):
    """With calibration= the rewrite's check refused it (`No opset import for domain 'com.microsoft'`);
    the branches' DynamicQuantizeLSTMs stay fp16 LSTMs (the default), the main graph's ConvInteger
    an int8-in layer with a calibrated input scale, within the fp16 bound of onnxruntime's dynamic run."""
    src, qpath = str(tmp_path / "vad.onnx"), str(tmp_path / "vad.dyn.onnx")
    onnx.save(CF.vad_like(seed=0), src)
    q.quantize_dynamic(src, qpath, weight_type=q.QuantType.QInt8, extra_options={"EnableSubgraph": True})
    rng = np.random.default_rng(1)
    calib = [{"x": rng.standard_normal((1, 4, 20)).astype(np.float32), "sr": np.array(sr, np.int64),
              "h0": np.zeros((1, 1, 8), np.float32)} for sr in (8, 16, 8, 16)]
    result = onnx_mrvl.convert(qpath, calibration=calib)
    result.save(str(tmp_path / "out"), overwrite=True)
    assert result.report.quantization["int8_layers"] >= 1
    assert {d.op_type for d in result.report.cpu_nodes()} <= {"If", "Equal", "QuantizeLinear", "DequantizeLinear"}
    _matches_onnxruntime(qpath, str(tmp_path / "out" / "model.onnx"))


def _matches_onnxruntime(qpath, converted):
    """Both branches of the If (sr 8 and 16): finite and within TOL of onnxruntime's dynamic run."""
    sess = onnx_mrvl.InferenceSession(converted)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 4, 20)).astype(np.float32)
    for sr in (8, 16):
        feeds = {"x": x, "sr": np.array(sr, np.int64), "h0": np.zeros((1, 1, 8), np.float32)}
        for a, b in zip(ref.run(None, feeds), sess.run(None, feeds)):
            assert np.isfinite(b).all() and np.abs(a - b).max() <= TOL * np.abs(a).max()
