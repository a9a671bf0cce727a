"""onnxruntime contrib ops (com.microsoft) decomposed by legalize's contrib rules (docs/legalize.md rule 1b):
each single-node variant (onnx_mrvl/testing/contrib_models.py) legalizes to standard ops only, carries
provenance, and matches onnxruntime in fp32 (CUDA-only ops: numpy of their definitions); refused forms
keep the node on the CPU with a reason; onnxruntime's transformer optimizer output (BERT, Whisper, ViT,
encoder block) converts to as few regions as the unoptimized model and runs on the simulator within
docs/simulator.md's 1e-2 * max|ref|; QAttention from quantize_dynamic goes through the dynamic-int8 rule."""
from __future__ import annotations

import collections
import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import onnx_mrvl
from onnx_mrvl import provenance
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import arch_speech as S
from onnx_mrvl.testing import arch_transformer as A
from onnx_mrvl.testing import contrib_blocks as CB
from onnx_mrvl.testing import contrib_models as C
from onnx_mrvl.testing import models as M
from onnx_mrvl.testing.ort_sessions import PRECISION_KEY

TOL = 1e-2      # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|
FP32 = 1e-5     # a decomposition in fp32 against onnxruntime's kernel (reassociation only)
TAG = "onnxruntime contrib op"


def _run(model, feeds, exact=False):
    """onnxruntime's outputs (``exact``: its integer kernels sum exactly on any host, mlas_u8s8.PRECISION_KEY)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if exact:
        so.add_session_config_entry(PRECISION_KEY, "1")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def _rel(ref, got) -> float:
    assert ref.shape == got.shape and np.all(np.isfinite(got))
    return float(np.max(np.abs(ref.astype(np.float64) - got))) / max(float(np.max(np.abs(ref))), 1e-30)


def _check_legal(model):
    res = legalize(model)
    out = res.model
    assert C.contrib_ops(out) == [], [s for s in res.report.skipped if s[0].startswith("contrib")]
    originals = {n.name for n in model.graph.node}
    for n in out.graph.node:
        assert set(provenance.get_origin(n)) <= originals | {n.name}
    contrib = {x.name for x in model.graph.node if x.domain == C.MS or x.op_type.endswith("LayerNormalization")}
    assert any(set(provenance.get_origin(n)) & contrib and n.name not in contrib for n in out.graph.node)
    onnx.checker.check_model(out)
    return res


@pytest.mark.parametrize("name", sorted(C.CASES))
def test_single_contrib_node_matches_onnxruntime(name):
    model, feeds = C.CASES[name]()
    res = _check_legal(model)
    for ref, got in zip(_run(model, feeds), _run(res.model, feeds)):
        if ref.dtype.kind in "iu":
            assert np.array_equal(ref, got)
        else:
            assert _rel(ref, got) <= FP32


@pytest.mark.parametrize("name", sorted(C.CUDA_ONLY))
def test_cuda_only_contrib_node_matches_its_definition(name):
    model, feeds = C.CUDA_ONLY[name]()
    res = _check_legal(model)
    assert _rel(C.cuda_only_reference(name, feeds, model), _run(res.model, feeds)[0]) <= FP32


ATTENTION = sorted(n for n in list(C.CASES) + list(C.CUDA_ONLY) if n.startswith(("attention", "mha")))
TWO_REGIONS = {"attention_scale_bias_filter"}   # attention_bias [1,N,S,S] on batch 2: fuse's batch broadcast


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_variant_is_one_region(name, tmp_path):
    """Each Attention / MultiHeadAttention form runs as one region (the integer mask's Greater / Less /
    Cast / Reshape on the CPU) within docs/simulator.md's bound of onnxruntime (packed forms: of
    onnxruntime's MultiHeadAttention on the unpacked tensors)."""
    model, feeds = (C.CASES.get(name) or C.CUDA_ONLY[name])()
    ref = _run(model, feeds)[0] if name in C.CASES else C.cuda_only_reference(name, feeds, model)
    conv = onnx_mrvl.convert(model)
    assert len(conv.subgraphs) == (2 if name in TWO_REGIONS else 1)
    cpu = {n.op_type for n in conv.model.graph.node if not n.op_type.startswith("Subgraph")}
    assert cpu <= {"Greater", "Less", "GreaterOrEqual", "And", "Cast", "Reshape", "Slice", "MatMul", "Add"}
    assert "MatMul" not in cpu or name == "attention_dynamic_weights"   # x @ W of a weight input
    assert "Add" not in cpu or name in TWO_REGIONS
    got = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert _rel(ref, got) <= TOL


@pytest.mark.parametrize("name", sorted(CB.REFUSED))
def test_refused_forms_stay_on_cpu_with_reason(name):
    build, node, words = CB.REFUSED[name]
    model = build()
    res = legalize(model)
    assert node in {n.name for n in res.model.graph.node if n.domain == C.MS}
    reasons = [r for rule, n, r in res.report.skipped if n == node and rule.startswith("contrib")]
    assert reasons and words in reasons[0], res.report.skipped
    conv = onnx_mrvl.convert(model)
    d = conv.report[node]
    assert d.placement == "cpu" and d.reason.startswith(TAG) and words in d.reason


@pytest.mark.parametrize("mask,causal,per_channel,signed", [("2d", False, False, True), ("1d", True, True, True),
                                                          ("none", False, False, False), ("3d", False, True, False)])
def test_qattention_decomposes_to_dynamic_int8_form(mask, causal, per_channel, signed):
    """QAttention -> MatMulInteger groups the dynamic_int8 rule turns into MatMuls with dequantized weights:
    the legalized model equals the fp32 Attention with those weights (no activation quantization); weight
    scales / zero points per tensor or per column, s8 or u8 weights."""
    q, fp32, feeds = CB.qattention_model(mask=mask, unidirectional=causal, per_channel=per_channel, signed=signed)
    assert C.contrib_ops(q) == ["QAttention"]
    res = _check_legal(q)
    ops = collections.Counter(n.op_type for n in res.model.graph.node)
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops and ops["Softmax"] == 1
    node = next(n for n in q.graph.node if n.op_type == "QAttention")
    init = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    wq, ws = init[node.input[1]].astype(np.float32), init[node.input[4]]
    wz = init[node.input[7]].astype(np.float32) if len(node.input) > 7 and node.input[7] else 0.0
    for t in fp32.graph.initializer:
        if t.name == "w":
            t.CopyFrom(numpy_helper.from_array(((wq - wz) * ws).astype(np.float32), "w"))
    assert _rel(_run(fp32, feeds)[0], _run(res.model, feeds)[0]) <= FP32
    assert any(v.startswith("dynamic int8") for v in res.report.notes.values())


@pytest.mark.parametrize("mask,per_channel,signed", [("2d", False, True), ("1d", True, True), ("none", True, False)])
def test_calibrated_qattention_decomposes_to_qdq_matmuls(mask, per_channel, signed):
    """A calibrated QAttention (quantize/dynamic_qattention.py: its DynamicQuantizeLinear made a
    QuantizeLinear with constant scale / zero point) -> per part DQ(x_q) -> MatMul(DQ(W_q part)) + bias:
    the legalized model equals onnxruntime's QAttention on the same static codes (fp32, 1e-5), no
    MatMulInteger, the QDQ MatMuls the int8 import takes; int8 or uint8 weights, per tensor or column."""
    from onnx_mrvl.quantize import dynamic_qattention
    from onnx_mrvl.quantize.dynamic_layers import Graph
    q, _, feeds = CB.qattention_model(mask=mask, per_channel=per_channel, signed=signed)
    g = Graph(q)
    nodes, kept = dynamic_qattention.find(g)
    assert len(nodes) == 1 and not kept
    x = dynamic_qattention.inputs(g, nodes)[0]
    dynamic_qattention.rewrite(q, nodes, {x: (np.float32(0.031), np.uint8(131))})
    assert {n.op_type for n in q.graph.node} >= {"QuantizeLinear", "QAttention"}
    res = _check_legal(q)
    ops = collections.Counter(n.op_type for n in res.model.graph.node)
    assert "MatMulInteger" not in ops and ops["DequantizeLinear"] >= 4 and ops["Softmax"] == 1
    assert any("calibrated input" in d for _, _, d in res.report.applied)
    # onnxruntime against itself with exact integer sums: on AVX2 without VNNI its QAttention's U8S8
    # GEMM clamps pairs to int16 (26.6% of max|ref| here), the decomposition's float MatMuls do not
    assert _rel(_run(q, feeds, exact=True)[0], _run(res.model, feeds, exact=True)[0]) <= FP32


@pytest.mark.parametrize("mask,per_channel,signed", [("2d", False, True), ("1d", True, True), ("none", True, False)])
def test_calibrated_qattention_converts_as_onnxruntime_runs_it(tmp_path, mask, per_channel, signed):
    """The converted calibrated QAttention against onnxruntime's own run of it (within TOL): its
    projections are int8-in FCs whose sums follow QAttention's QGEMM (ort_plan: a QAttention on uint8
    x int8 codes is U8S8, its decomposition's MatMuls matched by origin), so on AVX2 without VNNI they
    clamp pairs to int16 as onnxruntime does (the 1d case: 26.6% of max|ref| off with exact sums)."""
    from onnx_mrvl.quantize import dynamic_qattention
    from onnx_mrvl.quantize.dynamic_layers import Graph
    q, _, feeds = CB.qattention_model(mask=mask, per_channel=per_channel, signed=signed)
    g = Graph(q)
    nodes, _ = dynamic_qattention.find(g)
    dynamic_qattention.rewrite(q, nodes, {dynamic_qattention.inputs(g, nodes)[0]: (np.float32(0.031), np.uint8(131))})
    path, folder = str(tmp_path / "q.onnx"), str(tmp_path / "out")
    onnx.save(q, path)
    onnx_mrvl.convert(path).save(folder)
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    names = {i.name for i in q.graph.input}
    assert _rel(_run(q, feeds)[0], sess.run(None, {k: v for k, v in feeds.items() if k in names})[0]) <= TOL


def _bert():
    return S.bert_encoder(ln="op", mask_unsqueezes=2)


def _bert_torch():
    return S.bert_encoder(ln="torch", mask_unsqueezes=2)


OPTIMIZED = {   # builder, model_type, contrib ops onnxruntime's optimizer writes
    "bert_embed": (lambda: S.bert_encoder(ln="op", mask_unsqueezes=2, positions="slice"), "bert",
                   {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}),
    "bert_op": (_bert, "bert", {"Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}),
    "bert_torch_opset14": (_bert_torch, "bert", {"Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2}),
    "whisper": (S.whisper_encoder, "bert", {"SkipLayerNormalization": 4, "BiasGelu": 2, "Gelu": 2}),
    "vit": (lambda: A.vit_like(0, "op"), "vit", {"Attention": 1, "SkipLayerNormalization": 4, "BiasGelu": 2}),
    "encoder_block": (lambda: A.encoder_block(0, "op", "erf_hf"), "bert",
                      {"Attention": 1, "SkipLayerNormalization": 2, "BiasGelu": 1}),
}


def _feeds(model, seed=0):
    names = {i.name for i in model.graph.input}
    if "input_ids" in names or "input_features" in names:
        return S.feeds(model, seed)
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def _legalized_matches(model, feeds) -> list:
    """onnxruntime's outputs of ``model``; legalize leaves no contrib op and matches them within FP32."""
    ref = _run(model, feeds)
    legal = legalize(model).model
    assert C.contrib_ops(legal) == []
    for r, g in zip(ref, _run(legal, feeds)):
        assert _rel(r, g) <= FP32
    return ref


def _simulated_matches(conv, model, feeds, ref, folder: str) -> None:
    """The saved conversion ``conv`` of ``model`` run by our session: within TOL of ``ref``."""
    got = onnx_mrvl.InferenceSession(conv.save(folder)).run([o.name for o in model.graph.output], feeds)
    for r, g in zip(ref, got):
        assert _rel(r, g) <= TOL


@pytest.mark.parametrize("name", sorted(OPTIMIZED))
def test_optimized_encoder_converts_like_the_original(name, tmp_path):
    build, model_type, expected = OPTIMIZED[name]
    original = build()
    opt = CB.optimize(original, model_type)
    assert collections.Counter(C.contrib_ops(opt)) == expected
    feeds = _feeds(original)
    ref = _legalized_matches(opt, feeds)
    conv = onnx_mrvl.convert(opt)
    before = onnx_mrvl.convert(original)
    assert len(conv.subgraphs) == len(before.subgraphs) == 1
    cpu = [n for n in conv.model.graph.node if not n.op_type.startswith("Subgraph")]
    assert not any(n.domain == C.MS for n in cpu)
    # the embedding lookups and the integer mask's preparation (EmbedLayerNormalization's mask count)
    allowed = ("Gather", "Cast", "Reshape", "Less", "ReduceSum", "Equal")
    assert all(n.op_type in allowed for n in cpu), [n.op_type for n in cpu]
    _simulated_matches(conv, opt, feeds, ref, str(tmp_path / "out"))


ORT_SAVED = {   # onnxruntime's own fusions (optimized_model_filepath, ORT_ENABLE_EXTENDED)
    "bert": (lambda: S.bert_encoder(ln="op"), {"FusedGemm", "FusedMatMul", "Gelu", "SkipLayerNormalization"}),
    "whisper": (S.whisper_encoder, {"FusedMatMul", "Gelu", "SkipLayerNormalization"}),
    "vit": (lambda: A.vit_like(0, "op"), {"FusedMatMul", "Gelu", "SkipLayerNormalization"}),
    "resnet18_like": (lambda: M.resnet18_like(input_size=64), {"FusedConv"}),
    "mobilenetv2_like": (lambda: M.mobilenetv2_like(input_size=64), {"FusedConv"}),
    "yolo_like": (lambda: M.yolo_like(input_size=64), {"FusedConv", "QuickGelu"}),   # SiLU -> QuickGelu(alpha=1)
    "conformer": (S.conformer_block, {"FusedMatMul", "QuickGelu", "SkipLayerNormalization"}),
}


@pytest.mark.parametrize("name", sorted(ORT_SAVED))
def test_ort_saved_model_converts_like_the_original(name, tmp_path):
    """A model saved by onnxruntime after its own fusions: fp32 legalized equal to onnxruntime on it,
    one region like the original, simulator within the fp16 bound."""
    build, ops = ORT_SAVED[name]
    original = build()
    saved = CB.ort_saved(original)
    assert set(C.contrib_ops(saved)) == ops
    feeds = _feeds(original)
    ref = _legalized_matches(saved, feeds)
    conv = onnx_mrvl.convert(saved)
    assert len(conv.subgraphs) == len(onnx_mrvl.convert(original).subgraphs) == 1
    assert not any(n.domain == C.MS for n in conv.model.graph.node)
    _simulated_matches(conv, saved, feeds, ref, str(tmp_path / "out"))


def test_quantized_optimized_encoder_one_region(tmp_path):
    """quantize_dynamic after the optimizer (QAttention, MatMulInteger): one region; simulator within the
    fp16 bound of the legalized (dequantized-weight) model; that model within the fp16 bound plus
    onnxruntime's own dynamic-int8 deviation of the fp32 optimized model (docs/legalize.md)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    original = A.encoder_block(0, "op", "erf_hf")
    opt = CB.optimize(original, "bert")
    with tempfile.TemporaryDirectory(prefix="contrib-") as d:
        onnx.save(opt, os.path.join(d, "o.onnx"))
        quantize_dynamic(os.path.join(d, "o.onnx"), os.path.join(d, "q.onnx"), weight_type=QuantType.QInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        q = onnx.load(os.path.join(d, "q.onnx"))
    assert "QAttention" in C.contrib_ops(q)
    feeds = _feeds(original)
    legal = legalize(q).model
    assert C.contrib_ops(legal) == []
    fp32, dyn, lg = _run(opt, feeds)[0], _run(q, feeds)[0], _run(legal, feeds)[0]
    assert _rel(fp32, lg) <= TOL + _rel(fp32, dyn)
    conv = onnx_mrvl.convert(q)
    assert len(conv.subgraphs) == 1 and not [n for n in conv.model.graph.node if not n.op_type.startswith("Subgraph")]
    got = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert _rel(lg, got) <= TOL


def test_rotary_attention_block_one_region(tmp_path):
    """RotaryEmbedding on Q and K + MultiHeadAttention: one region; the cos / sin / -sin row Gathers by
    the run-time position_ids (shared by Q and K) stay on the CPU."""
    model, feeds = CB.rotary_attention_block()
    conv = onnx_mrvl.convert(model)
    assert len(conv.subgraphs) == 1
    assert sorted(n.op_type for n in conv.model.graph.node if not n.op_type.startswith("Subgraph")) == ["Gather"] * 3
    got = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert _rel(_run(model, feeds)[0], got) <= TOL


@pytest.mark.parametrize("skip", [False, True])
def test_rms_norm_between_fcs_one_region(skip, tmp_path):
    """(Skip)SimplifiedLayerNormalization written out as RMSNorm, fused as the Mrvl LayerNorm in rms
    mode: one region, no CPU node."""
    model, feeds = CB.rms_norm_block(skip)
    ref = _run(model, feeds)[0]
    legal = _check_legal(model).model
    assert {"ReduceMean", "Sqrt", "Div"} <= {n.op_type for n in legal.graph.node}
    assert _rel(ref, _run(legal, feeds)[0]) <= FP32
    conv = onnx_mrvl.convert(model)
    assert len(conv.subgraphs) == 1 and all(n.op_type.startswith("Subgraph") for n in conv.model.graph.node)
    norms = [n["attrs"] for n in conv.subgraphs[0].nodes_json["nodes"] if n.get("attrs", {}).get("layer_name") == ["LayerNorm"]]
    assert [(a["composite_name"], a["rms"], a["origin_nodes"]) for a in norms] == [(["mrvl.rmsnorm"], ["1"], [["rms"]])]
    got = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert _rel(ref, got) <= TOL


def test_measured_shapes_answer_every_edge():
    """The stand-in for the optimizer's symbolic shape inference (no sympy here) knows every tensor's
    shape (checked by hand with sympy: the same fusions as OPTIMIZED lists)."""
    m = A.encoder_block(0, "op", "erf_hf")
    shim = CB.MeasuredShapes(m)
    for n in m.graph.node:
        for o in n.output:
            assert shim.get_edge_shape(o) is not None
    assert shim.compare_shape(m.graph.input[0].name, m.graph.output[0].name)
