"""LogSoftmax on the accelerator: the Mrvl ``Softmax`` op with ``log`` = 1 (fuse/transformer.py),
y = (x - max) - log(sum(exp(x - max))) in fp32, one fp16 rounding (sim/norm_ops.py). CTC heads of
OCR (CRNN) and speech models end in it; numbers against onnxruntime on the original model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.norm_ops import log_softmax as sim_log_softmax

from onnx_mrvl.testing import arch_ocr_audio
from onnx_mrvl.testing import arch_transformer as A

F16_TOL = 1e-2   # docs/simulator.md: max|err| <= 1e-2 * max|ref| for fp16 regions


def _run_ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _feeds(m, seed=1, scale=1.0):
    rng = np.random.default_rng(seed)
    return {i.name: (rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]) * scale
                     ).astype(np.float32) for i in m.graph.input}


def _region_layers(res):
    return [n for sg in res.subgraphs for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op"]


def _convert_and_check(m, tmp_path, scale=1.0):
    """Fused model (reference bodies) within 1e-4 of onnxruntime; deployed model one region, no CPU
    node, within F16_TOL * max|ref|. Returns the fused result, the conversion and the relative error."""
    feeds = _feeds(m, scale=scale)
    ref = _run_ort(m, feeds)
    r = fuse(legalize(m))
    onnx.checker.check_model(r.model, full_check=True)
    mrvl = [n for n in r.model.graph.node if n.domain == opset.DOMAIN]
    assert any(n.op_type == "Softmax" and opset.node_attrs(n).get("log") == 1 for n in mrvl), \
        [n.op_type for n in mrvl]
    assert not any(n.op_type == "LogSoftmax" for n in r.model.graph.node)
    for a, b in zip(ref, _run_ort(r.model, feeds)):
        assert float(np.max(np.abs(a - b))) <= 1e-4 * float(np.max(np.abs(a)))
    res = onnx_mrvl.convert(m)
    cpu = [n.op_type for n in res.model.graph.node if not n.op_type.startswith("Subgraph")]
    assert cpu == [] and len(res.subgraphs) == 1, cpu
    logs = [n for n in _region_layers(res) if n["attrs"]["layer_name"][0] == "Softmax"
            and n["attrs"].get("log") == ["1"]]
    assert len(logs) == 1, _region_layers(res)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    rel = 0.0
    for a, b in zip(ref, got):
        assert a.shape == b.shape and np.all(np.isfinite(b))
        rel = max(rel, float(np.max(np.abs(a - b))) / float(np.max(np.abs(a))))
    assert rel <= F16_TOL, rel
    return r, res, rel


def test_sim_log_softmax_within_half_an_fp16_ulp():
    """fp32 math, one fp16 rounding: within half an fp16 ulp of |y| (+ fp32 error) of float64."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 3, 9, 40)) * 6).astype(np.float16).astype(np.float32)
    x[0, 0, 0, :4] = -30000.0                        # masked classes: large negative log-probabilities
    for axis in (-1, 1):
        y, ok = sim_log_softmax(x.copy(), axis)
        xd = x.astype(np.float64)
        d = xd - xd.max(axis, keepdims=True)
        ref = d - np.log(np.exp(d).sum(axis, keepdims=True))
        half_ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64) / 2
        assert ok and np.all(np.abs(y - ref) <= half_ulp + 1e-5 * np.maximum(1.0, np.abs(ref)))


def _fc_head(opset_version, shape, axis):
    """[..., D] -> MatMul + Add (an FC over the last axis) -> LogSoftmax(axis): a CTC head."""
    n = A.Net(0, opset_version)
    d, c = shape[-1], 37
    w = (n.rng.standard_normal((d, c)) * (2.0 / np.sqrt(d))).astype(np.float32)
    y = n.op("MatMul", ["input", n.const(w, "w")], "fc")
    y = n.op("Add", [y, n.const((n.rng.standard_normal(c) * 0.5).astype(np.float32), "b")], "fc_add")
    n.op("LogSoftmax", [y], "lsm", axis=axis)
    return n.model("ctc_head", [("input", list(shape))], "output")


@pytest.mark.parametrize("opset_version", [11, 13])
@pytest.mark.parametrize("shape, axis", [([24, 1, 32], 2), ([24, 1, 32], -1), ([2, 24, 32], 2),
                                         ([2, 24, 32], -1)])
def test_ctc_head_log_softmax_last_axis(opset_version, shape, axis, tmp_path):
    """[T, B, C] (PyTorch CRNN / CTC) and [B, T, C] (wav2vec2-style) log-probabilities."""
    m = _fc_head(opset_version, shape, axis)
    _, res, rel = _convert_and_check(m, tmp_path, scale=2.0)
    assert res.report.offload_fraction == 1.0


@pytest.mark.parametrize("opset_version", [11, 13])
def test_log_softmax_channels_of_nchw(opset_version, tmp_path):
    """Conv -> LogSoftmax(axis 1) -> Conv. Opset 13: over the channels, on the NHWC data (stored
    axis -1, no layout change for it). Opset 11: over C*H*W flattened, which legalize writes as
    Reshape -> LogSoftmax -> Reshape, also on the accelerator."""
    n = A.Net(0, opset_version)
    w = (n.rng.standard_normal((6, 3, 3, 3)) * 0.5).astype(np.float32)
    y = n.op("Conv", ["input", n.const(w, "w")], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = n.op("LogSoftmax", [y], "lsm", axis=1)
    w2 = (n.rng.standard_normal((4, 6, 1, 1)) * 0.3).astype(np.float32)
    n.op("Conv", [y, n.const(w2, "w2")], "conv2", kernel_shape=[1, 1])
    m = n.model("lsm", [("input", [1, 3, 5, 7])], "output")
    r, res, _ = _convert_and_check(m, tmp_path)
    if opset_version >= 13:
        sm = next(x for x in r.model.graph.node if x.domain == opset.DOMAIN and x.op_type == "Softmax")
        assert opset.node_attrs(sm)["axis"] == -1
        assert not [x for x in r.model.graph.node if x.op_type == "LayoutTransform" and "lsm" in x.name]



def test_crnn_ocr_one_region_no_cpu_node(tmp_path):
    """onnx_mrvl/testing/arch_ocr_audio.py crnn_ocr (conv backbone -> BiLSTM -> FC -> LogSoftmax over the 37
    classes of [T, B, C]): one region, nothing on the CPU."""
    m = arch_ocr_audio.crnn_ocr()
    _, res, _ = _convert_and_check(m, tmp_path)
    layers = [n["attrs"]["layer_name"][0] for n in _region_layers(res)]
    assert layers[-1] == "Softmax" and "LSTM" in layers and "Conv2D" in layers


def test_perf_models_charge_the_log_softmax():
    """The compile step's vector_ops and the split cost model agree: 6 vector ops per element."""
    from onnx_mrvl.split.cost import vector_ops
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.target import VECTOR_LOWERINGS
    m = _fc_head(13, [24, 1, 32], 2)
    r = fuse(legalize(m))
    g = GraphIndex(r.model)
    sm = next(x for x in r.model.graph.node if x.domain == opset.DOMAIN and x.op_type == "Softmax")
    assert vector_ops(g, sm) == 24 * 37 * VECTOR_LOWERINGS["LogSoftmax"][1]
    res = onnx_mrvl.convert(m)
    layer = next(n for n in _region_layers(res) if n["attrs"]["layer_name"][0] == "Softmax")
    assert layer["attrs"]["log"] == ["1"]
