"""Pre-quantized transformer / speech encoders in the forms real pipelines write (issue #19;
``onnx_mrvl/testing/int8_exports.py``): onnxruntime's quantize_dynamic of a text encoder with int64
inputs and of Conv1d speech front ends, calibrated; quantize_static with ``DedicatedQDQPair``; A16W8.

Bounds: against onnxruntime's run of the same QDQ model, a model of int8 layers and fp16 layers
between them: bit-identical where the default (shared-pair) form of the same model is (measured);
a calibrated dynamic model against onnxruntime's run of its rewritten static model
(``result.stages["quantize"]``): the fp16 bound (docs/simulator.md: ``max|err| <= 1e-2 max|ref|``
or within 2x the error of the fp16 baseline; here onnxruntime's static run with the float layers'
outputs rounded to fp16 before each QuantizeLinear, ``int8_exports.fp16_before_quantize``: the
whole-model baseline of compare_models overflows on HF's finfo.min mask and judges nothing after it).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import int8_exports as X

pytest.importorskip("onnxruntime.quantization")
LAYER_OPS = {"Conv", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"}


def test_dedicated_qdq_pairs_import_as_the_shared_form(tmp_path):
    """DedicatedQDQPair: a Q -> DQ per reader of a tensor. legalize's qdq_dedupe merges them (no two
    QuantizeLinear of one tensor with the same parameters are left), and the model converts as the
    shared form does: one region, bit-identical to onnxruntime (was 2.4e-2 of max|ref|)."""
    ded = X.run("whisper_encoder", "qdq_s8_dedicated_pair", str(tmp_path), calibration=0)
    shared = X.run("whisper_encoder", "qdq_s8", str(tmp_path), calibration=0)
    q = onnx.load(ded["qpath"])
    qs = [(n.input[0], tuple(n.input[1:])) for n in q.graph.node if n.op_type == "QuantizeLinear"]
    assert len(qs) > len(set(qs))          # the tool's form: several pairs of one tensor
    legal = legalize(q).model
    seen = {}
    for n in legal.graph.node:
        if n.op_type == "QuantizeLinear":
            key = (n.input[0],) + tuple(onnx.numpy_helper.to_array(t).tobytes() for t in legal.graph.initializer
                                        if t.name in n.input[1:])
            assert key not in seen, f"{n.name} and {seen[key]} quantize {n.input[0]} alike"
            seen[key] = n.name
    assert ded["regions"] == shared["regions"] == 1
    assert ded["cpu"] == shared["cpu"] and not LAYER_OPS & set(ded["cpu"])
    assert ded["rel"] == 0.0 and shared["rel"] == 0.0


@pytest.mark.parametrize("name", ["wav2vec2_frontend", "whisper_encoder"])
def test_calibrated_dynamic_conv1d_front_end_is_int8(tmp_path, name):
    """quantize_dynamic's ConvInteger of a Conv1d stack (wav2vec2's k10 / s5 raw-waveform conv, its
    GroupNorm; Whisper's padded k3 convs) with calibration: every layer int8 (int8-in / fp16-out),
    the 1-D convs as 2-D int8 layers (the large kernel / stride as passes), nothing but the host's
    input quantization on the CPU; the fp16 bound against onnxruntime's run of the static model."""
    m = X.run(name, "dyn_s8", str(tmp_path), calibration=8)
    res = m["result"]
    info = res.report.quantization
    assert info["mode"] == "dynamic-calibrated" and info["int8_layers"] == info["layers_total"] > 0
    assert m["regions"] == 1 and not LAYER_OPS & set(m["cpu"]), m["reasons"]
    convs = [r for r in info["layers"] if r["layer"].startswith("conv")]
    assert convs and all(res.report[r["layer"]].precision in ("int8", "int8 in, fp16 out") for r in convs)
    assert m["rel_static"] <= max(1e-2, 2 * m["rel_fp16_before_q"]), (m["rel_static"], m["rel_fp16_before_q"])


def test_text_encoder_with_integer_inputs_takes_calibration(tmp_path):
    """A BERT export's inputs are int64 ids and masks: calibration samples of them are taken (was a
    UsageError 'no float input to calibrate'); the projections become int8-in layers; the fp16 bound
    against onnxruntime's run of the static model."""
    m = X.run("bert_opset14", "dyn_s8", str(tmp_path), calibration=8)
    info = m["result"].report.quantization
    assert info["mode"] == "dynamic-calibrated" and info["int8_layers"] == info["layers_total"] > 0
    assert m["regions"] == 1 and not LAYER_OPS & set(m["cpu"]), m["reasons"]
    assert m["rel_static"] <= max(1e-2, 2 * m["rel_fp16_before_q"]), (m["rel_static"], m["rel_fp16_before_q"])


@pytest.mark.parametrize("name", ["wav2vec2_frontend", "bert_sdpa_mask"])
def test_a16w8_stays_on_the_cpu_and_says_why(tmp_path, name):
    """int16 activations (A16W8): the MLIP has no int16 mode; no accelerator layer reads int16 codes as
    int8, each int16 QuantizeLinear's decision names it, an attention MatMul of two int16 activations
    is an fp16 layer whose decision says so; the output within the fp16 bound of onnxruntime's run
    (default optimizations, as the deployed model's CPU part runs; onnxruntime's fusions of uint16 QDQ
    themselves move BERT's pooler output by 2.6e-2 from its run with optimizations off)."""
    m = X.run(name, "qdq_a16w8", str(tmp_path), calibration=0)
    res = m["result"]
    assert not [d for d in res.report if d.precision and "int8" in d.precision]
    qs = [d for d in res.report if d.op_type == "QuantizeLinear"]
    assert qs and all(d.placement == "cpu" and ("quantizes to uint16" in d.reason or "minimum-work" in d.reason)
                      for d in qs), {d.node: d.reason for d in qs}
    assert any("quantizes to uint16" in d.reason for d in qs)
    for d in res.report:
        if d.placement == "accelerator" and d.op_type in ("MatMul", "Gemm", "Conv"):
            assert d.precision == "fp16" and "quantizes to uint16" in d.reason, d.reason
    assert not [d for d in res.report if d.placement == "accelerator" and d.op_type == "Gemm"]
    assert m["rel"] <= 1e-2


def test_optimized_bert_dynamic_qembed_and_qattention(tmp_path):
    """quantize_dynamic after onnxruntime's transformer optimizer: QEmbedLayerNormalization becomes
    EmbedLayerNormalization on the dequantized tables (exact against onnxruntime's kernel, 1e-5; was a
    CPU node that also left the pooler's FC without shapes on the CPU), only the embedding lookups'
    integer preparation stays on the CPU; with calibration, QAttention reads calibrated static codes
    (quantize/dynamic_qattention.py) and its Q / K / V projections are int8-in layers (they were fp16
    layers whose decision said 'no calibration'); the fp16 bound against onnxruntime's run of that
    static model."""
    import numpy as np
    import onnxruntime as ort
    plain = X.run("bert_embed_slice", "dyn_s8", str(tmp_path), optimize=True, calibration=0)
    q = onnx.load(plain["qpath"])
    qembed = next(n for n in q.graph.node if n.op_type == "QEmbedLayerNormalization")
    probe = onnx.ModelProto()
    probe.CopyFrom(q)
    probe.graph.output.append(onnx.helper.make_tensor_value_info(qembed.output[0], onnx.TensorProto.FLOAT, None))
    legal = legalize(probe).model
    assert not {"QEmbedLayerNormalization", "EmbedLayerNormalization"} & {n.op_type for n in legal.graph.node}
    feeds = X.feeds(X.MODELS["bert_embed_slice"](), 0)
    want = ort.InferenceSession(probe.SerializeToString()).run([qembed.output[0]], feeds)[0]
    got = ort.InferenceSession(legal.SerializeToString()).run([qembed.output[0]], feeds)[0]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert plain["regions"] == 1 and not LAYER_OPS & set(plain["cpu"]), plain["reasons"]
    assert not {"QEmbedLayerNormalization", "Tanh"} & set(plain["cpu"]), plain["cpu"]
    calib = X.run("bert_embed_slice", "dyn_s8", str(tmp_path), optimize=True, calibration=8)
    info = calib["result"].report.quantization
    qatt = [r for r in info["layers"] if r["op_type"] == "QAttention"]
    assert len(qatt) == 2 and all(r["precision"] == "int8 in, fp16 out" for r in qatt)
    assert info["int8_layers"] == info["layers_total"] > 2
    static = calib["result"].stages["quantize"]
    assert "QAttention" in {n.op_type for n in static.graph.node}
    assert "DynamicQuantizeLinear" not in {n.op_type for n in static.graph.node}
    for r in qatt:
        d = calib["result"].report[r["layer"]]
        assert d.precision == "int8 in, fp16 out" and "(no calibration)" not in d.reason, d.reason
    assert calib["regions"] == 1 and not LAYER_OPS & set(calib["cpu"]), calib["reasons"]
    assert calib["rel_static"] <= max(1e-2, 2 * calib["rel_fp16_before_q"]), \
        (calib["rel_static"], calib["rel_fp16_before_q"])


def test_asymmetric_uint8_weights_are_int8_with_weight_zero_points(tmp_path):
    """quantize_dynamic with QUInt8 weights (asymmetric: W_q - z_w spans 9 bits): with calibration
    every projection is an int8-in layer with its weight zero points (codes W_q - 128, zero points
    z_w - 128; fp16 on dequantized weights before), one region, within the fp16 bound of the
    calibrated static model (docs/benchmarks-int8.md, dyn_u8 rows)."""
    m = X.run("bert_opset17", "dyn_u8", str(tmp_path), calibration=8)
    res = m["result"]
    info = res.report.quantization
    assert info["int8_layers"] == info["layers_total"] > 0
    static = res.stages["quantize"]
    inits = {t.name: t for t in static.graph.initializer}
    zps = [onnx.numpy_helper.to_array(inits[n.input[2]]) for n in static.graph.node
           if n.op_type == "DequantizeLinear" and n.name.endswith("/weight_dq")]
    assert zps and all(z.dtype == np.int8 and np.any(z != 0) for z in zps)
    assert m["regions"] == 1 and not LAYER_OPS & set(m["cpu"]), m["reasons"]
    assert m["rel_static"] <= max(1e-2, 2 * m["rel_fp16_before_q"]), (m["rel_static"], m["rel_fp16_before_q"])