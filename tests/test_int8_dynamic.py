"""Dynamic-int8 import (onnxruntime's ``quantize_dynamic``): MatMulInteger / ConvInteger with
DynamicQuantizeLinear activations, DynamicQuantizeLSTM, DynamicQuantizeMatMul and
MatMulIntegerToFloat become float layers with dequantized weights that run in fp16 on the
accelerator, and their decisions say so (docs/legalize.md "dynamic_int8").

Bound (docs/legalize.md): against the legalized model (fp32, dequantized weights) run by
onnxruntime, the fp16 bound: max(1e-2 * max|ref|, 2x the fp16 baseline's error), every output
"within fp16 rounding" (docs/simulator.md); against the fp32 model before ``quantize_dynamic``, that
bound plus onnxruntime's own deviation of the dynamic-int8 model from it.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.contrib_models import dynamic_matmul_case
from onnx_mrvl.testing.models import GraphBuilder

quantization = pytest.importorskip("onnxruntime.quantization")
F32 = TensorProto.FLOAT
DYNAMIC_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM",
               "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
NOTE = "dynamic int8: fp16 with dequantized weights (no calibration)"


def token_mlp(seed: int = 0) -> onnx.ModelProto:
    g = GraphBuilder(seed, 13)
    x = g.node("MatMul", ["input", g.const("w1", g.he((32, 64), 32))], "mm1")
    x = g.relu(g.node("Add", [x, g.const("b1", np.linspace(-0.5, 0.5, 64).astype(np.float32))], "add1"), "relu1")
    g.node("MatMul", [x, g.const("w2", g.he((64, 16), 64))], "mm2")
    g.nodes[-1].output[0] = "output"
    return g.model("token_mlp", [("input", F32, [1, 12, 32])], [("output", F32, [1, 12, 16])])


def audio_frontend(seed: int = 0) -> onnx.ModelProto:
    """wav2vec2-style raw-audio front end: Conv1d(1 -> 16, k 10, s 5) -> Relu -> Conv1d(16 -> 16, k 3,
    s 2) -> Relu, then a 2-D conv with a 9 x 9 kernel on a [1, 4, 16, 16] view: kernels above the MAC
    array's per-pass limit (7) as int8 convs of several passes."""
    g = GraphBuilder(seed, 13)
    x = g.node("Conv", ["input", g.const("c1.w", g.he((16, 1, 10), 10)), g.const("c1.b", np.full(16, 0.05, np.float32))],
               "c1", kernel_shape=[10], strides=[5])
    x = g.node("Conv", [g.relu(x, "r1"), g.const("c2.w", g.he((16, 16, 3), 48))], "c2", kernel_shape=[3], strides=[2],
               pads=[1, 1])
    x = g.node("Reshape", [g.relu(x, "r2"), g.const("to4d", np.array([1, 4, 16, 16], np.int64))], "to4d")
    g.node("Conv", [x, g.const("c3.w", g.he((8, 4, 9, 9), 324))], "c3", kernel_shape=[9, 9], pads=[4, 4, 4, 4])
    g.nodes[-1].output[0] = "output"
    return g.model("audio_frontend", [("input", F32, [1, 1, 645])], [("output", F32, [1, 8, 16, 16])])


def _builders():
    from test_int8_qdq import residual_cnn
    from onnx_mrvl.testing.arch_attention import mha_block
    from onnx_mrvl.testing.arch_transformer import encoder_block
    from onnx_mrvl.testing.models import mobilenetv2_like
    from onnx_mrvl.testing.recurrent_models import cell_model, stacked_bilstm
    return {
        "encoder": (lambda: encoder_block(seed=0), None),
        "bert_attention": (lambda: mha_block("legacy", "hf"), None),
        "token_mlp": (token_mlp, None),
        "audio_frontend": (audio_frontend, None),
        "lstm": (lambda: cell_model("LSTM"), None),
        "bilstm": (lambda: stacked_bilstm(seed=0), None),
        "cnn_conv_only": (lambda: residual_cnn(seed=1), ["Conv"]),
        "cnn_all": (lambda: residual_cnn(seed=1), None),
        "mobilenetv2": (lambda: mobilenetv2_like(seed=0, input_size=64, num_classes=10), ["Conv", "MatMul"]),
    }


def quantize_dyn(model, path, ops=None, per_channel=False, weight_type="s8"):
    src = path + ".float.onnx"
    onnx.save(model, src)
    if any(n.op_type == "BatchNormalization" for n in model.graph.node):   # folded, as onnxruntime advises
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(src, src, skip_symbolic_shape=True)
    kw = {"op_types_to_quantize": ops} if ops else {}
    quantization.quantize_dynamic(src, path, per_channel=per_channel,
                                  weight_type=quantization.QuantType.QInt8 if weight_type == "s8"
                                  else quantization.QuantType.QUInt8, **kw)
    return src, path


def _feeds(model, rng):
    """N(0, 1) float inputs; an attention mask input masks the last quarter of the keys."""
    from onnx_mrvl.testing.arch_attention import feeds
    inits = {t.name for t in model.graph.initializer}
    return {k: v for k, v in feeds(model, seed=int(rng.integers(1 << 30))).items() if k not in inits}


def measure(src, qpath, folder, legal, n_inputs=3):
    """Over ``n_inputs`` inputs: (max|conv - fp32|, max|ort_dyn - fp32|, max|fp32|, [(max|conv - legal|,
    fp16 bound, max|legal|) per input]). The fp16 bound against the legalized fp32 model on one input
    is max(1e-2 * max|ref|, 2x the error of the fp16 baseline, i.e. that model run with fp16 storage,
    where the baseline is finite) (docs/simulator.md: either documented fp16 criterion)."""
    from onnx_mrvl.inspection.compare import compare_models
    f32, dyn, leg = (ort.InferenceSession(m) for m in (src, qpath, legal.SerializeToString()))
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(7)
    e_conv = e_dyn = ref = 0.0
    per_input = []
    for _ in range(n_inputs):
        feeds = _feeds(onnx.load(src), rng)
        res = compare_models(legal, os.path.join(folder, "model.onnx"), feeds, fp16_baseline=True)
        base = [r.baseline for r in res.baseline.rows if r.is_output and np.isfinite(r.baseline)]
        for a, d, lg, c in zip(f32.run(None, feeds), dyn.run(None, feeds), leg.run(None, feeds), mine.run(None, feeds)):
            assert c.dtype == np.float32 and np.isfinite(c).all()
            e_conv = max(e_conv, float(np.abs(c - a).max()))
            e_dyn = max(e_dyn, float(np.abs(d - a).max()))
            ref = max(ref, float(np.abs(a).max()))
            r_leg = float(np.abs(lg).max())
            per_input.append((float(np.abs(c - lg).max()), max([1e-2 * r_leg] + [2 * b for b in base]), r_leg))
    return e_conv, e_dyn, ref, per_input


@pytest.mark.parametrize("name", ["encoder", "bert_attention", "token_mlp", "lstm", "bilstm", "cnn_conv_only", "cnn_all", "mobilenetv2"])
def test_dynamic_int8_runs_fp16_with_dequantized_weights(tmp_path, name):
    build, ops = _builders()[name]
    src, qpath = quantize_dyn(build(), str(tmp_path / "q.onnx"), ops)
    q = onnx.load(qpath)
    dynamic = [n for n in q.graph.node if n.op_type in DYNAMIC_OPS]
    assert dynamic
    result = legalize(q)
    legal, _ = result.model, result.report
    assert not [n for n in legal.graph.node if n.op_type in DYNAMIC_OPS]
    result = onnx_mrvl.convert(qpath)
    assert not [n for n in result.model.graph.node if n.op_type in DYNAMIC_OPS]
    for n in dynamic:   # every node of the dynamic family: offloaded, and its decision says how
        d = result.report[n.name]
        assert d.placement == "accelerator" and d.reason.startswith(NOTE), (n.name, d.reason)
    folder = str(tmp_path / "out")
    result.save(folder)
    e_conv, e_dyn, ref, per_input = measure(src, qpath, folder, legal)
    e_leg, bound, ref_leg = max(per_input)
    print(f"{name}: max|fp32| {ref:.3g}; vs fp32: converted {e_conv:.3g}, onnxruntime dynamic int8 {e_dyn:.3g}; "
          f"converted vs legalized fp32 {e_leg:.3g} ({e_leg / ref_leg:.2e} of max|ref|, fp16 bound {bound:.3g})")
    assert all(e <= b for e, b, _ in per_input)
    assert e_conv <= max(b / r for _, b, r in per_input) * ref + e_dyn


@pytest.mark.parametrize("weight_type", ["s8", "u8"])
def test_dynamic_matmul_per_column_weights(tmp_path, weight_type):
    """per_channel=True: MatMulInteger weights with a zero point and a scale per column."""
    src, qpath = quantize_dyn(token_mlp(seed=2), str(tmp_path / "q.onnx"), per_channel=True, weight_type=weight_type)
    q = onnx.load(qpath)
    inits = {t.name: nh.to_array(t) for t in q.graph.initializer}
    mmi = next(n for n in q.graph.node if n.op_type == "MatMulInteger")
    assert inits[mmi.input[3]].size == inits[mmi.input[1]].shape[1]   # per column
    result = legalize(q)
    legal, _ = result.model, result.report
    result = onnx_mrvl.convert(qpath)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    e_conv, e_dyn, ref, per_input = measure(src, qpath, folder, legal)
    print(f"token_mlp per column {weight_type}: vs fp32 converted {e_conv:.3g}, onnxruntime {e_dyn:.3g}")
    assert all(e <= b for e, b, _ in per_input)
    assert e_conv <= max(b / r for _, b, r in per_input) * ref + e_dyn


@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_fused_dynamic_matmul_forms(tmp_path, op):
    """onnxruntime's optimizer writes DynamicQuantizeMatMul / MatMulIntegerToFloat (+ bias): the
    same rewrite, checked against onnxruntime's run and against the float model of the dequantized
    weights."""
    rng = np.random.default_rng(3)
    m, wq, ws, bias = dynamic_matmul_case(op, rng)
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert result.report["dqmm"].reason.startswith(NOTE)
    folder = str(tmp_path / "out")
    result.save(folder)
    x = rng.standard_normal((4, 24)).astype(np.float32)
    exact = x @ (wq.astype(np.float32) * ws) + bias
    a = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    c = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {"x": x})[0]
    print(f"{op}: converted vs float {np.abs(c - exact).max():.3g}, onnxruntime dynamic vs float "
          f"{np.abs(a - exact).max():.3g}, max|ref| {np.abs(exact).max():.3g}")
    assert np.abs(c - exact).max() <= 1e-2 * np.abs(exact).max()
    assert np.abs(c - exact).max() <= 1e-2 * np.abs(exact).max() + np.abs(a - exact).max()


def test_dynamic_node_that_cannot_be_taken_names_its_reason(tmp_path):
    """A MatMulInteger whose weights are a graph input (not constant) stays on the CPU; its
    decision gives the dynamic-int8 reason; the model still runs as onnxruntime runs it."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"], name="dql"),
             helper.make_node("MatMulInteger", ["xq", "wq", "xz"], ["acc"], name="mmi"),
             helper.make_node("Cast", ["acc"], ["accf"], to=F32, name="cast"),
             helper.make_node("Mul", ["xs", "ws"], ["s"], name="scales"),
             helper.make_node("Mul", ["accf", "s"], ["y"], name="rescale")]
    inputs = [helper.make_tensor_value_info("x", F32, [4, 8]), helper.make_tensor_value_info("wq", TensorProto.UINT8, [8, 6])]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F32, [4, 6])],
                                            [nh.from_array(np.array(0.01, np.float32), "ws")]),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    result = onnx_mrvl.convert(m)
    tag = "dynamic int8 (dynamic_int8): "
    d = result.report["mmi"]
    assert d.placement == "cpu" and d.reason.startswith(tag) and "not constant" in d.reason
    d = result.report["dql"]
    assert d.placement == "cpu" and d.reason.startswith(tag) and "MatMulInteger 'mmi'" in d.reason
    folder = str(tmp_path / "out")
    result.save(folder)
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32),
             "wq": rng.integers(0, 256, (8, 6)).astype(np.uint8)}
    a = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, feeds)[0]
    assert np.array_equal(a, b)
