"""Legalize rule ``dynamic_int_bias``: the run-time integer bias of onnxruntime's first dynamic
quantizer (``Add(acc, Cast(int32)(Floor(Div(B, x_scale * W_scale))))`` between ConvInteger /
MatMulInteger and its Cast -> Mul) becomes a float bias after the scale, which rule 1c
(``dynamic_int8``) folds: one region, nothing on the CPU (ddddocr's common_old.onnx: 21 ConvInteger
layers and ~230 nodes on the CPU -> none). Bounds: the legalized model (fp32, dequantized weights,
exact bias) equals the float model of those weights (1e-5); the conversion is within the fp16 bound
of it (1e-2 * max|ref|, docs/simulator.md)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.old_dynamic_int8 import old_dynamic_cnn


def _run(model, x):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]


def _inputs(n=3):
    rng = np.random.default_rng(5)
    return [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(n)]


def test_integer_bias_becomes_a_float_bias_folded_into_the_layer():
    dyn, flt = old_dynamic_cnn(seed=0)
    legal = legalize(dyn).model
    ops = [n.op_type for n in legal.graph.node]
    assert not {"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear", "Floor", "Div", "Cast"} & set(ops), ops
    convs = [n for n in legal.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    assert len(convs) == 3
    assert all(len(n.input) == 3 for n in convs if n.op_type == "Conv")   # the bias folded into the Conv
    for x in _inputs():
        ref = _run(flt, x)
        assert np.abs(_run(legal, x) - ref).max() <= 1e-5 * np.abs(ref).max()
        # onnxruntime runs the old form (its rounding of x and of the bias: a coarser match)
        assert np.abs(_run(dyn, x) - ref).max() <= 0.1 * np.abs(ref).max()


def test_old_dynamic_model_converts_to_one_region_within_fp16(tmp_path):
    dyn, flt = old_dynamic_cnn(seed=1)
    r = onnx_mrvl.convert(dyn)
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes(), [d.op_type for d in r.report.cpu_nodes()]
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    for x in _inputs():
        ref = _run(flt, x)
        assert np.abs(sess.run(None, {"input": x})[0] - ref).max() <= 1e-2 * np.abs(ref).max()


def test_bias_divided_by_another_scale_is_left_with_its_reason():
    dyn, _ = old_dynamic_cnn(seed=0)
    div = next(n for n in dyn.graph.node if n.name == "bias_div0")
    div.input[1] = "input_s"   # x_scale alone, not x_scale * W_scale: not the accumulator's scale
    res = legalize(dyn)
    assert any(n.op_type == "ConvInteger" for n in res.model.graph.node)
    assert ("dynamic_int_bias", "bias_add0", "the integer bias of Add 'bias_add0' is divided by 'input_s', the "
            "accumulator scaled by 's0': not the same scale") in res.report.skipped
    assert any(n.op_type == "ConvInteger" for n in legalize(old_dynamic_cnn(seed=0)[0]).model.graph.node) is False


def test_calibrated_old_dynamic_conv_layers_are_int8(tmp_path):
    """With calibration the quantize step takes the old form's ConvInteger layers too (quantize/
    dynamic_layers.old_int_bias: the exact float bias into the Conv); the MatMulInteger with an integer
    bias stays dynamic and legalize makes it an fp16 layer (rules dynamic_int_bias + dynamic_int8)."""
    dyn, flt = old_dynamic_cnn(seed=2)
    calib = [{"input": x} for x in _inputs(8)]
    r = onnx_mrvl.convert(dyn, calibration=calib)
    q = r.report.quantization
    assert (q["int8_layers"], q["layers_total"]) == (2, 3), q
    assert len(r.report.regions) == 1 and not r.report.cpu_nodes()
    static = r.stages["quantize"]
    names = {n.name for n in static.graph.node}
    assert not {"bias_div0", "bias_floor0", "bias_add0", "bias_div1", "bias_floor1", "bias_add1"} & names
    assert {"bias_div2", "bias_add2"} <= names   # the MatMulInteger's, left to legalize
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    for x in _inputs():
        ref, stage = _run(flt, x), _run(static, x)
        got = sess.run(None, {"input": x})[0]
        assert np.abs(got - stage).max() <= 1e-2 * np.abs(stage).max()
        assert np.abs(got - ref).max() <= 0.1 * np.abs(ref).max()
