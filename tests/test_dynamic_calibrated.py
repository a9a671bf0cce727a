"""Dynamic-int8 models with calibration data (``quantize/dynamic_calibrated.py``, docs/quantize.md
"Dynamic int8 models"): their MatMulInteger / ConvInteger layers become int8 layers with calibrated
activation scales; what cannot be taken stays fp16 with dequantized weights and says why.

Bounds: against onnxruntime running the same rewritten static QDQ model (``result.stages["quantize"]``),
a model of only int8 layers between its I/O: >= 99% of the output elements identical, the rest within
one output quantum (the int8 import's bound, docs/fusion.md); a transformer block, whose attention,
LayerNorm and GELU are fp16 layers between the int8 projections and whose output is float: the fp16
bound (docs/simulator.md). Against the dynamic model and the fp32 model: measured, printed.
"""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.testing.cli_run import run_cli
from onnx_mrvl.errors import UsageError
from onnx_mrvl.testing.contrib_models import dynamic_matmul_case

from test_int8_dynamic import DYNAMIC_OPS, _builders, _feeds, quantize_dyn, token_mlp

quantization = pytest.importorskip("onnxruntime.quantization")
N_CALIB = 32
INT8 = {"layer_outputs": "int8"}   # int8 layers (the default, "fp16": int8-in / fp16-out layers, tested below)


def _calib(model, n=N_CALIB, seed=1):
    rng = np.random.default_rng(seed)
    return [_feeds(model, rng) for _ in range(n)]


def _out_quantum(static: onnx.ModelProto, name: str):
    """The scale of the DequantizeLinear writing graph output ``name`` (None: a float output)."""
    inits = {t.name: nh.to_array(t) for t in static.graph.initializer}
    dq = next((n for n in static.graph.node if name in n.output), None)
    return float(inits[dq.input[1]]) if dq is not None and dq.op_type == "DequantizeLinear" else None


def _measure(src, qpath, result, folder, n_inputs=3):
    """Per input and output: (max|ours - static|, identical fraction, output quantum or None, the fp16
    baseline's verdict, max|static|, max|ours - dynamic|, max|dynamic - fp32|, max|ours - fp32|, max|fp32|).
    The verdict (docs/simulator.md "fp16 baseline"; the baseline is the static model run in onnxruntime
    with fp16 storage): within fp16 rounding when ours <= 2x its error, or, for an output behind a
    QuantizeLinear, when ours flips at most 2x as many elements as it does."""
    from onnx_mrvl.inspection.compare import compare_models
    static = result.stages["quantize"]
    f32, dyn = ort.InferenceSession(src), ort.InferenceSession(qpath)
    st = ort.InferenceSession(static.SerializeToString())
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(n_inputs):
        feeds = _feeds(onnx.load(src), rng)
        cmp = compare_models(static, os.path.join(folder, "model.onnx"), feeds, fp16_baseline=True)
        within = {r.tensor: r.within for r in cmp.baseline.rows if r.is_output}
        for o, a, s, d, c in zip(static.graph.output, f32.run(None, feeds), st.run(None, feeds), dyn.run(None, feeds),
                                 mine.run(None, feeds)):
            assert c.dtype == np.float32 and np.isfinite(c).all()
            rows.append((float(np.abs(c - s).max()), float(np.mean(c == s)), _out_quantum(static, o.name),
                         within.get(o.name, False),
                         float(np.abs(s).max()), float(np.abs(c - d).max()), float(np.abs(d - a).max()),
                         float(np.abs(c - a).max()), float(np.abs(a).max())))
    return rows


# the bound against onnxruntime's run of the static model: "exact" (only int8 layers between the I/O:
# >= 99% identical, the rest one output step), "fp16" (float outputs after fp16 attention / LayerNorm /
# GELU between the int8 projections: docs/simulator.md's fp16 bound, max|err| <= 1e-2 max|ref| or the
# fp16 baseline's verdict "within fp16 rounding")
CASES = [("token_mlp", "exact"), ("cnn_all", "exact"), ("encoder", "fp16"), ("bert_attention", "fp16")]


@pytest.mark.parametrize("name,bound_kind", CASES)
def test_calibrated_dynamic_layers_are_int8(tmp_path, name, bound_kind):
    build, ops = _builders()[name]
    src, qpath = quantize_dyn(build(), str(tmp_path / "q.onnx"), ops)
    q = onnx.load(qpath)
    layers = [n for n in q.graph.node if n.op_type in ("MatMulInteger", "ConvInteger")]
    assert layers
    result = onnx_mrvl.convert(qpath, calibration=_calib(q), quantize_options=INT8)
    info = result.report.quantization
    assert info["mode"] == "dynamic-calibrated" and info["samples"] == N_CALIB
    assert info["int8_layers"] == len(layers) == info["layers_total"]
    static = result.stages["quantize"]
    assert not [n for n in static.graph.node if n.op_type in DYNAMIC_OPS]
    # structure: every layer an int8 accelerator layer, no MatMulInteger / ConvInteger / Q / DQ on the CPU
    assert not [n for n in result.model.graph.node if n.op_type in DYNAMIC_OPS | {"MatMul", "Conv", "Gemm",
                                                                                    "QuantizeLinear",
                                                                                    "DequantizeLinear"}]
    for n in layers:
        d = result.report[n.name]
        assert d.placement == "accelerator" and d.precision == "int8", (n.name, d)
        assert d.reason.startswith("dynamic int8 -> int8 with calibrated activation scales"), d.reason
        rec = next(r for r in info["layers"] if r["layer"] == n.name)
        assert rec["precision"] == "int8" and rec["input_scale"] > 0 and 0 <= rec["input_zero_point"] <= 255
    folder = str(tmp_path / "out")
    result.save(folder)
    rows = _measure(src, qpath, result, folder)
    for e, ident, quantum, within, ref, e_dyn, dyn_f32, e_f32, ref32 in rows:
        print(f"{name}: vs onnxruntime static {e:.3g} ({100 * ident:.1f}% identical, output quantum {quantum}, "
              f"{e / ref:.2e} of max|ref|, fp16 baseline verdict {'within' if within else 'exceeds'}); "
              f"/max|ref| vs dynamic {e_dyn / ref32:.3g}, vs fp32 {e_f32 / ref32:.3g} "
              f"(onnxruntime dynamic vs fp32 {dyn_f32 / ref32:.3g})")
        if bound_kind == "exact":
            assert quantum is not None and ident >= 0.99 and e <= quantum * 1.001
        else:
            assert e <= 1e-2 * ref or within


def test_per_channel_int8_weights(tmp_path):
    """per_channel=True (QInt8: symmetric): a scale per MatMul column (quantize_dynamic keeps
    ConvInteger per tensor), kept as they are; bit-exact against onnxruntime's run of the static model."""
    build, ops = _builders()["token_mlp"]
    src, qpath = quantize_dyn(build(), str(tmp_path / "q.onnx"), ops, per_channel=True)
    q = onnx.load(qpath)
    inits = {t.name: nh.to_array(t) for t in q.graph.initializer}
    layer = next(n for n in q.graph.node if n.op_type in ("MatMulInteger", "ConvInteger"))
    assert inits[layer.input[1]].dtype == np.int8
    result = onnx_mrvl.convert(qpath, calibration=_calib(q), quantize_options=INT8)
    static = result.stages["quantize"]
    sinit = {t.name: nh.to_array(t) for t in static.graph.initializer}
    wdq = next(n for n in static.graph.node if n.name == f"{layer.name}/weight_dq")
    axis = 0 if layer.op_type == "ConvInteger" else 1
    assert sinit[wdq.input[1]].size == inits[layer.input[1]].shape[axis] > 1
    assert np.array_equal(sinit[wdq.input[0]], inits[layer.input[1]])   # the int8 weights as they were
    for n in q.graph.node:
        if n.op_type in ("MatMulInteger", "ConvInteger"):
            assert result.report[n.name].precision == "int8"
    folder = str(tmp_path / "out")
    result.save(folder)
    for e, ident, quantum, *_ in _measure(src, qpath, result, folder):
        assert quantum is not None and ident >= 0.99 and e <= quantum * 1.001


def test_unnamed_nodes(tmp_path):
    """A dynamic model without node names (some exporters write none): every layer still int8, the
    names are legalize's ``<op_type>_<index>``; same result as the named model."""
    src, qpath = quantize_dyn(_builders()["cnn_all"][0](), str(tmp_path / "q.onnx"))
    q = onnx.load(qpath)
    calib = _calib(q, 8)
    named = onnx_mrvl.convert(qpath, calibration=calib)
    for n in q.graph.node:
        n.name = ""
    result = onnx_mrvl.convert(q, calibration=calib)
    assert result.report.quantization["int8_layers"] == named.report.quantization["int8_layers"] == 7
    assert not [n for n in result.model.graph.node if n.op_type != "Subgraph_1x1"]
    folder, folder2 = str(tmp_path / "a"), str(tmp_path / "b")
    result.save(folder)
    named.save(folder2)
    x = _feeds(q, np.random.default_rng(5))
    a = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, x)[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder2, "model.onnx")).run(None, x)[0]
    assert np.array_equal(a, b)


def test_dql_formula_matches_onnxruntime():
    """The calibrated scale / zero point of a range are DynamicQuantizeLinear's on a tensor of that range."""
    from onnx_mrvl.quantize.dynamic_layers import qparams
    m = helper.make_model(helper.make_graph(
        [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("z", TensorProto.UINT8, [])]), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString())
    rng = np.random.default_rng(0)
    for lo, hi in [(-3.7, 2.1), (0.5, 4.0), (-2.0, -0.3), (-1e-3, 7.3), (0.0, 0.0), (-0.173, 3.861)]:
        x = np.array([lo, hi] + list(rng.uniform(lo, hi, 3)), np.float32)
        s, z = sess.run(None, {"x": x})
        ms, mz = qparams(float(x.min()), float(x.max()))
        assert np.float32(ms) == s and int(mz) == int(z), (lo, hi, ms, s, mz, z)


@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_fused_forms_with_calibration(tmp_path, op):
    rng = np.random.default_rng(3)
    m = dynamic_matmul_case(op, rng)[0]
    calib = [{"x": rng.standard_normal((4, 24)).astype(np.float32)} for _ in range(N_CALIB)]
    result = onnx_mrvl.convert(m, calibration=calib, quantize_options=INT8)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert result.report["dqmm"].precision == "int8"
    # [4, 24] x [24, 10] + bias: one Gemm with an int32 bias (no rounding between the product and the bias)
    gemm = next(n for n in result.stages["quantize"].graph.node if n.name == "dqmm")
    assert gemm.op_type == "Gemm" and len(gemm.input) == 3
    folder = str(tmp_path / "out")
    result.save(folder)
    st = ort.InferenceSession(result.stages["quantize"].SerializeToString())
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    quantum = _out_quantum(result.stages["quantize"], "y")
    for _ in range(3):
        x = rng.standard_normal((4, 24)).astype(np.float32)
        a, c = st.run(None, {"x": x})[0], mine.run(None, {"x": x})[0]
        assert np.mean(a == c) >= 0.99 and np.abs(a - c).max() <= quantum * 1.001


def test_asymmetric_uint8_weights_are_int8_layers_with_zero_points(tmp_path):
    """uint8 weights with a zero point (W_q - z beyond int8: quantize_dynamic's QUInt8): int8-in
    layers with weight zero points (codes q - 128, zero points z - 128), within the fp16 bound of
    onnxruntime's run of the calibrated QDQ model (they stayed fp16 on dequantized weights before)."""
    src, qpath = quantize_dyn(token_mlp(seed=2), str(tmp_path / "q.onnx"), per_channel=True, weight_type="u8")
    q = onnx.load(qpath)
    result = onnx_mrvl.convert(qpath, calibration=_calib(q, 8))
    info = result.report.quantization
    assert info["int8_layers"] == info["layers_total"] == 2
    zps = [n for n in result.stages["quantize"].graph.node if n.op_type == "DequantizeLinear" and "weight" in n.name]
    assert zps and all(onnx.numpy_helper.to_array(next(t for t in result.stages["quantize"].graph.initializer
                                                         if t.name == n.input[2])).any() for n in zps)
    for r in info["layers"]:
        d = result.report[r["layer"]]
        assert d.placement == "accelerator" and "int8" in d.reason, d.reason
    folder = str(tmp_path / "out")
    result.save(folder)
    st = ort.InferenceSession(result.stages["quantize"].SerializeToString())
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(5)
    for feed in _calib(q, 3):
        feed = {k: (v + rng.standard_normal(v.shape).astype(np.float32) * 0.1 if v.dtype == np.float32 else v)
                for k, v in feed.items()}
        a, c = st.run(None, feed)[0], mine.run(None, feed)[0]
        assert np.abs(a - c).max() <= 1e-2 * np.abs(a).max()


def test_untaken_layers_say_why(tmp_path):
    """An LSTM stays an fp16 layer with dequantized weights; its decision and record give the
    reason, not 'no calibration'."""
    lstm, lq = quantize_dyn(_builders()["lstm"][0](), str(tmp_path / "l.onnx"))
    lq_model = onnx.load(lq)
    result = onnx_mrvl.convert(lq, calibration=_calib(lq_model, 4))
    recs = [r for r in result.report.quantization["layers"] if r["op_type"] == "DynamicQuantizeLSTM"]
    assert recs and all(r["precision"] == "fp16" and "no int8 recurrent layer" in r["reason"] for r in recs)
    for r in recs:
        assert "no int8 recurrent layer" in result.report[r["layer"]].reason


def test_without_calibration_unchanged_and_option_errors(tmp_path):
    src, qpath = quantize_dyn(token_mlp(seed=0), str(tmp_path / "q.onnx"))
    q = onnx.load(qpath)
    plain = onnx_mrvl.convert(qpath)
    assert plain.report.quantization == {} and "quantize" not in plain.stages
    assert plain.report["mm1_quant"].reason.startswith("dynamic int8: fp16 with dequantized weights (no calibration)")
    with pytest.raises(UsageError, match="mixed"):
        onnx_mrvl.convert(qpath, quantize="mixed", calibration=_calib(q, 2))
    with pytest.raises(UsageError, match="minmax"):
        onnx_mrvl.convert(qpath, calibration=_calib(q, 2), calibration_method="entropy")
    with pytest.raises(UsageError, match="input"):
        onnx_mrvl.convert(qpath, calibration=[{"wrong": np.zeros((1, 12, 32), np.float32)}])
    kept = onnx_mrvl.convert(qpath, calibration=_calib(q, 4), fp16_layers=["mm2_quant"], quantize_options=INT8)
    assert kept.report["mm1_quant"].precision == "int8" and kept.report["mm2_quant"].precision == "fp16"
    assert "fp16_layers names it" in kept.report["mm2_quant"].reason


def test_cli_calibration_without_quantize(tmp_path):
    src, qpath = quantize_dyn(token_mlp(seed=0), str(tmp_path / "q.onnx"))
    q = onnx.load(qpath)
    np.savez(tmp_path / "cal.npz", input=np.stack([f["input"] for f in _calib(q, 8)]))
    r = run_cli("convert", qpath, "-o", "out", "--calibration", "cal.npz", "--json", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["quantization"]["mode"] == "dynamic-calibrated" and summary["quantization"]["int8_layers"] == 2
    assert summary["cpu_nodes"] == 0


@pytest.mark.parametrize("name", ["token_mlp", "cnn_all", "encoder", "audio_frontend"])
def test_layer_outputs_fp16_are_int8_in_layers(tmp_path, name):
    """quantize_options={"layer_outputs": "fp16"}: no calibrated quantization after a layer; each
    layer quantizes its own input (as the dynamic model does) and writes float: an int8-in / fp16-out
    layer (or an int8 layer where the next layer's input pair alone reads it through Relu / Clip).
    Structure: all layers on the accelerator, nothing on the CPU; numbers against onnxruntime's run
    of the same static model: the fp16 bound (docs/simulator.md). audio_frontend: 1-D convs (legalize's
    qdq_conv_1d without an output pair) and kernels above 7 (the int8 multi-pass lowering) were fp16
    fallbacks or on the CPU."""
    build, ops = _builders()[name]
    src, qpath = quantize_dyn(build(), str(tmp_path / "q.onnx"), ops)
    q = onnx.load(qpath)
    layers = [n for n in q.graph.node if n.op_type in ("MatMulInteger", "ConvInteger")]
    result = onnx_mrvl.convert(qpath, calibration=_calib(q), quantize_options={"layer_outputs": "fp16"})
    info = result.report.quantization
    assert info["layer_outputs"] == "fp16" and info["int8_layers"] == len(layers) == info["layers_total"]
    static = result.stages["quantize"]
    assert not [n for n in static.graph.node if n.name.endswith("/output_q")]   # no pair after a layer
    # a 1-D conv reads its input through a Reshape: the model input's Q -> DQ is the host's quantize
    host_io = {"input_QuantizeLinear", "input_QuantizeLinear/dq"} if name == "audio_frontend" else set()
    assert not [n for n in result.model.graph.node if n.op_type in DYNAMIC_OPS | {
        "MatMul", "Conv", "Gemm", "QuantizeLinear", "DequantizeLinear"} and n.name not in host_io]
    precisions = [result.report[n.name].precision for n in layers]
    assert set(precisions) <= {"int8 in, fp16 out", "int8"} and "int8 in, fp16 out" in precisions, precisions
    for n in layers:
        rec = next(r for r in info["layers"] if r["layer"] == n.name)
        assert rec["precision"] == result.report[n.name].precision
    folder = str(tmp_path / "out")
    result.save(folder)
    for e, ident, quantum, within, ref, e_dyn, dyn_f32, e_f32, ref32 in _measure(src, qpath, result, folder):
        print(f"{name} (layer_outputs fp16): vs onnxruntime static {e / ref:.2e} of max|ref|; /max|fp32| vs "
              f"dynamic {e_dyn / ref32:.3g}, vs fp32 {e_f32 / ref32:.3g} (onnxruntime dynamic {dyn_f32 / ref32:.3g})")
        assert e <= 1e-2 * ref or within


def test_layer_outputs_option_errors(tmp_path):
    src, qpath = quantize_dyn(token_mlp(seed=0), str(tmp_path / "q.onnx"))
    q = onnx.load(qpath)
    with pytest.raises(UsageError, match="layer_outputs"):
        onnx_mrvl.convert(qpath, calibration=_calib(q, 2), quantize_options={"layer_outputs": "int4"})
    with pytest.raises(UsageError, match="equalize"):
        onnx_mrvl.convert(qpath, calibration=_calib(q, 2), quantize_options={"layer_outputs": "fp16",
                                                                              "equalize": True})


def test_fp16_out_layer_before_activation_and_moves_stays_one_region(tmp_path):
    """MTCNN R-Net's head, quantize_dynamic + calibration (int8-in / fp16-out layers): ``Conv -> PRelu
    -> Transpose -> Reshape -> Q`` (the Q of the next layer's input). legalize's qdq_pair_before_move
    leaves it (the PRelu reads a float layer, not codes): a copy of the Q after the PRelu made the Conv
    an int8-out layer whose float bias it cannot take (the Conv on the CPU, 2 regions)."""
    from onnx_mrvl.testing.qdq_variant_models import prelu_flatten_head
    src, qpath = quantize_dyn(prelu_flatten_head(), str(tmp_path / "q.onnx"))
    q = onnx.load(qpath)
    result = onnx_mrvl.convert(qpath, calibration=_calib(q))
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes(), \
        [(d.node, d.reason) for d in result.report.cpu_nodes()]
    folder = str(tmp_path / "out")
    result.save(folder)
    for e, ident, quantum, within, ref, e_dyn, dyn_f32, e_f32, ref32 in _measure(src, qpath, result, folder):
        assert e <= 1e-2 * ref or within
