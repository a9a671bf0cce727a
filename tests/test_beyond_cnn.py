"""Issue #21 "Beyond CNNs": text and speech encoders (onnx_mrvl/testing/arch_speech.py) and the transformer /
ConvNeXt builders (onnx_mrvl/testing/arch_transformer.py) each convert to ONE region; the CPU nodes left are
named and asserted; convert + onnx_mrvl.InferenceSession matches onnxruntime on the original within
docs/simulator.md's 1e-2 * max|ref|. (crnn_ocr, audio_gru: tests/test_recurrent.py; vit_like:
tests/test_transformer_ops.py.)"""
from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize

from onnx_mrvl.testing import arch_speech as S
from onnx_mrvl.testing import arch_transformer as A

TOL = 1e-2   # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|

# BERT: the embedding Gathers read int64 ids (a table lookup by run-time indices: no accelerator
# op takes an integer tensor or picks rows by data); the attention_mask preparation starts on the
# int64 input: its Unsqueeze (legalized to a Reshape) and the Cast to float. ``1 - m`` and the Mul by
# float32's lowest run in the region (fuse/masks.py: the fill saturated to -32768).
BERT_CPU = ["Cast", "Gather", "Gather", "Reshape"]


def _ref(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _deployed(model, tmp_path, feeds):
    """convert + InferenceSession; every output within TOL * max|ref| of onnxruntime on ``model``."""
    res = onnx_mrvl.convert(model)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run([o.name for o in model.graph.output], feeds)
    errs = []
    for g, r in zip(got, _ref(model, feeds)):
        assert g.shape == r.shape and np.all(np.isfinite(g))
        err, scale = float(np.max(np.abs(g.astype(np.float64) - r))), float(np.max(np.abs(r)))
        assert err <= TOL * scale, (err, scale)
        errs.append(err / scale)
    return res, errs


def _cpu_ops(res):
    return sorted(n.op_type for n in res.model.graph.node if not n.op_type.startswith("Subgraph"))


def _layers(res):
    """(layer_name, activation) -> count over the regions' Nodes-JSON."""
    return collections.Counter((n["attrs"]["layer_name"][0], n["attrs"].get("activation_type", ["-"])[0])
                               for sg in res.subgraphs for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op")


@pytest.mark.parametrize("ln", ["torch", "op"])
def test_bert_encoder_one_region(ln, tmp_path):
    """MiniLM/BERT: everything after the embedding lookups (position embedding, embedding
    LayerNorm, 2 post-LN layers with the HF mask added to the scores, the pooler's token-0 Gather,
    Dense and Tanh) is one region; every MAC is offloaded."""
    m = S.bert_encoder(ln=ln)
    res, errs = _deployed(m, tmp_path, S.feeds(m))
    assert len(res.subgraphs) == 1
    assert _cpu_ops(res) == BERT_CPU
    gathers = [n for n in res.model.graph.node if n.op_type == "Gather"]
    assert sorted(n.input[1] for n in gathers) == ["input_ids", "token_type_ids"]
    layers = _layers(res)
    assert layers["LayerNorm", "-"] == 5 and layers["Softmax", "-"] == 2 and layers["BatchMatMul", "-"] == 4
    assert layers["FC", "gelu"] == 2 and layers["FC", "tanh"] == 1
    assert res.report.macs_offloaded == res.report.macs_total > 0
    assert len(res.model.graph.output) == 2


@pytest.mark.parametrize("pos_rank", [2, 3])
def test_whisper_encoder_one_region(pos_rank, tmp_path):
    """Whisper: Conv1d + GELU x2 (stride 2), Transpose to [B, T, D], the positional embedding
    constant ([T, D] or [1, T, D]), 2 pre-LN layers with 3-D bmm heads, final LayerNorm: one
    region, nothing on the CPU."""
    m = S.whisper_encoder(pos_rank=pos_rank)
    res, errs = _deployed(m, tmp_path, S.feeds(m))
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == []
    layers = _layers(res)
    assert layers["LayerNorm", "-"] == 5 and layers["Softmax", "-"] == 2 and layers["BatchMatMul", "-"] == 4
    assert layers["Conv2D", "gelu"] == 2 and layers["Mul2D", "gelu"] == 0     # legalize's squeeze_sink
    assert res.report.macs_offloaded == res.report.macs_total > 0


def test_whisper_bmm_heads_written_back_in_token_order(tmp_path):
    """HF Whisper's P*V on [H, T, d] -> view [1, H, T, d] -> Transpose(0,2,1,3) -> Reshape [1, T, D]:
    the BatchMatMul writes its output as [T, H, d] (out_perm), the view and the Transpose move no
    data (before: 2 block rotations, 4 LayoutTransforms, per layer). The only LayoutTransform left
    is the log-mel input's, before the first conv; the fused model matches onnxruntime in fp32."""
    m = S.whisper_encoder()
    r = fuse(legalize(m))
    av = [opset.node_attrs(n) for n in r.model.graph.node if n.op_type == "BatchMatMul" and "av" in n.name]
    assert len(av) == 2 and all(a.get("out_perm") == [1, 0, 2] for a in av), av
    lts = [n for n in r.model.graph.node if n.op_type == "LayoutTransform"]
    assert len(lts) == 1 and lts[0].input[0] == "input_features/to2d", [n.name for n in lts]
    f = S.feeds(m)
    for a, b in zip(_ref(m, f), _ref(r.model, f)):
        assert np.max(np.abs(a - b)) <= 1e-5 * np.max(np.abs(a))
    res, _ = _deployed(m, tmp_path, f)
    assert _layers(res)["layout_transform", "-"] == 1


def test_conformer_block_one_region(tmp_path):
    """Conformer: half FFNs with SiLU, MHSA, the convolution module (pointwise 2D, GLU's channel
    Split + Sigmoid + Mul, depthwise k15 with its BatchNorm folded, SiLU, pointwise, the Transposes
    [B,T,D] <-> [B,D,T]): one region, nothing on the CPU."""
    m = S.conformer_block()
    res, errs = _deployed(m, tmp_path, S.feeds(m))
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == []
    layers = _layers(res)
    assert layers["LayerNorm", "-"] == 5 and layers["Softmax", "-"] == 1
    assert layers["Slice2D", "-"] == 2 and layers["Mul2D", "sigmoid"] == 1      # the GLU
    assert layers["FC", "silu"] == 2
    # the depthwise k15 is split into kernel tiles (target limit) summed by a Sum2D carrying the SiLU
    assert layers["Sum2D", "silu"] == 1 and layers["Mul2D", "silu"] == 0
    assert "BatchNormalization" not in str(layers)
    assert res.report.macs_offloaded == res.report.macs_total > 0


ENCODERS = [("torch", "erf"), ("tf", "erf_tf"), ("op", "erf_hf"), ("torch", "tanh"), ("op", "op")]


@pytest.mark.parametrize("ln, gelu_form", ENCODERS)
def test_encoder_block_one_region(ln, gelu_form, tmp_path):
    """The pre-LN encoder block of every exporter form: one region, no CPU node (its test in
    test_transformer_ops.py allows 2 regions)."""
    m = A.encoder_block(0, ln, gelu_form)
    res, _ = _deployed(m, tmp_path, S.feeds(m))
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == []
    assert _layers(res)["BatchMatMul", "-"] == 2


@pytest.mark.parametrize("form", ["torch", "tf", "keras3", "op"])
def test_convnext_stage_one_region(form, tmp_path):
    """Two ConvNeXt blocks in a row: one region, LayoutTransforms only at its input and output."""
    m = A.convnext_block(0, form, blocks=2)
    res, _ = _deployed(m, tmp_path, S.feeds(m))
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == []
    layers = _layers(res)
    assert layers["LayerNorm", "-"] == 2 and layers["Conv2D", "gelu"] == 2 and layers["layout_transform", "-"] == 2
