"""Norms that onnxruntime's quantizer cuts with Q -> DQ pairs (QDQ exports): the RMSNorm with its
interior quantization points (fuse/qdq_layernorm.py), every exporter form, S8 and U8, one region and
equal to onnxruntime's run of the same QDQ model element for element."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_mrvl.testing import arch_decoder
from onnx_mrvl.testing import qdq_transformers as qt


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("form", arch_decoder.RMS_FORMS)
def test_qdq_rmsnorm_is_one_int8_layer_bit_exact(tmp_path, form, act):
    """Pow(x, 2) | x * x -> [pair] -> ReduceMean -> pair -> + eps -> pair -> Sqrt -> Reciprocal |
    Div(1, .) -> pair -> * x (or x / Sqrt) -> pair -> * gamma -> pair: one Mrvl LayerNorm (rms = 1)
    with its interior points, writing the output pair's codes; before, the RMSNorm's ops stayed on
    the CPU between two regions (1 step off where fp16 met a rounding tie)."""
    m = qt.convert_and_measure(f"rmsnorm_{form}", str(tmp_path), act)
    assert m["regions"] == 1 and not m["cpu"], m["cpu"]
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    lns = [n for n in m["result"].report.decisions.values() if n.op_type in ("ReduceMean", "Sqrt")]
    assert lns and all(d.placement == "accelerator" and d.precision == "fp32, int8 out" for d in lns), lns


@pytest.mark.parametrize("form", ["pow_reciprocal", "div"])
def test_qdq_rmsnorm_reference_body_runs_in_plain_onnxruntime(tmp_path, form):
    """The fused model (Mrvl LayerNorm with rms = 1 and five interior points) runs in plain
    onnxruntime through its reference body, equal to the QDQ model."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = qt.quantize(qt.MODELS[f"rmsnorm_{form}"](), str(tmp_path / "q.onnx"), "u8")
    legal = legalize(onnx.load(qpath))
    fused = fuse(getattr(legal, "model", legal)).model
    lns = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "LayerNorm"]
    assert len(lns) == 1
    a = {x.name: x for x in lns[0].attribute}
    assert a["rms"].i == 1 and len(a["inner_scales"].floats) == 5
    scales = list(a["inner_scales"].floats)
    assert scales[1] > 0 and scales[2] > 0 and scales[4] > 0   # var, vareps, norm
    assert (scales[3] > 0) == (form != "div")                  # inv: only 1 / sqrt has a pair
    x = qt.feeds(fused, 0)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_rmsnorm_reading_a_region_input_quantizes_it(tmp_path, act):
    """Gather (CPU) -> Q -> DQ -> RMSNorm (T5 / Llama's first layer): the pair in front is the
    layer's (qdq.shared_pairs), so it reads the codes (``in_*``), not the fp16 region input (was 1
    step off, 99.1% identical)."""
    m = qt.convert_and_measure("rmsnorm_embedding", str(tmp_path), act)
    assert m["regions"] == 1 and set(m["cpu"]) == {"Gather"}, m["cpu"]
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("name", ["ln_keras3", "ln_keras3_noaffine", "ln_tf", "ln_tf_noaffine"])
def test_qdq_keras_layernorm_is_one_layer_bit_exact(tmp_path, name, act):
    """tf2onnx's Keras layer norms (``x * inv + c``: Keras 3 ``-mean * inv + beta``, Keras 2
    ``beta - mean * inv``) cut by the quantizer's pairs after the means, the difference, the square,
    eps, the rsqrt, gamma and each product: one Mrvl LayerNorm with ``form`` and 11 interior points
    (fuse/qdq_norm_affine.py); before, its ops stayed on the CPU (2 regions)."""
    m = qt.convert_and_measure(name, str(tmp_path), act)
    assert m["regions"] == 1 and not m["cpu"], m["cpu"]
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


@pytest.mark.parametrize("name", ["ln_keras3", "ln_tf"])
def test_qdq_keras_layernorm_reference_body(tmp_path, name):
    """The fused LayerNorm with ``form`` runs in plain onnxruntime through its reference body, equal
    to the QDQ model."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = qt.quantize(qt.MODELS[name](), str(tmp_path / "q.onnx"), "s8")
    legal = legalize(onnx.load(qpath))
    fused = fuse(getattr(legal, "model", legal)).model
    lns = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type == "LayerNorm"]
    assert len(lns) == 1
    a = {x.name: x for x in lns[0].attribute}
    assert a["form"].s.decode() == name[3:] and len(a["inner_scales"].floats) == 11
    x = qt.feeds(fused, 0)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_token_mean_is_one_int8_global_pool(tmp_path, act):
    """DQ -> ReduceMean(tokens) -> Q (Keras GlobalAveragePooling1D, 32 tokens): one int8
    GlobalAvgPool2D (reducemean_to_gap's identity pair after its Transpose; gap_split keeps it
    whole); before, two chained fp16 pools (32 = 16 x 2) rounded before the Q (1 step off)."""
    m = qt.convert_and_measure("token_mean_head", str(tmp_path), act)
    assert m["regions"] == 1 and not m["cpu"], m["cpu"]
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    pools = [d for d in m["result"].report if d.op_type == "ReduceMean"]
    assert pools and all(d.precision == "int8" and "GlobalAvgPool2D" in d.reason for d in pools), pools
