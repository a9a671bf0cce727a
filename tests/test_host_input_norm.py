"""A QDQ model's float normalization of a model input before its first QuantizeLinear runs on the host
in fp32, as onnxruntime computes it (onnx_mrvl/fuse/host_preprocess.py): Llama's first RMSNorm of the
float hidden state under ``convert(quantize="int8")``, a LayerNormalization / decomposed layer norm of
a float graph input. As fp16 layers in the region (input and result rounded to fp16) they moved codes
at the next Q's rounding ties (Llama block: 56-73% of the output identical)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.fuse.host_preprocess import REASON
from onnx_mrvl.quantize import quantize_model
from onnx_mrvl.testing.arch_decoder import rmsnorm
from onnx_mrvl.testing.arch_transformer import Net, layernorm

pytest.importorskip("onnxruntime.quantization")
T, D = 16, 32


def _feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": (2.0 * rng.standard_normal((1, T, D))).astype(np.float32)} for _ in range(n)]


def _norm_model(kind: str):
    """x [1, T, D] (float model input) -> norm -> Linear -> Linear."""
    n = Net(0, 13 if kind == "torch" else 18)
    if kind.startswith("rms"):
        h = rmsnorm(n, "x", D, kind[4:])
    else:
        h = layernorm(n, "x", [1, T, D], kind)
    n.linear(n.linear(h, D, D, "fc1"), D, D, "fc2")
    return n.model(f"norm_{kind}", [("x", [1, T, D])])


@pytest.mark.parametrize("kind", ["rms_pow_reciprocal", "rms_div", "rms_no_gamma", "torch", "op"])
def test_input_norm_on_host_exact(kind, tmp_path):
    """Our own quantize="int8" (the norm stays float: quantize/float_groups.py): the norm's nodes run
    on the host with the preprocessing reason, one region, every output element equal to onnxruntime's
    run of the same QDQ model."""
    m = _norm_model(kind)
    calib = _feeds(8, 1)
    qdq = quantize_model(m, quantize="int8", calibration=calib).model
    r = onnx_mrvl.convert(m, quantize="int8", calibration=calib)
    r.save(str(tmp_path / "m"), overwrite=True)
    assert len(r.report.regions) == 1
    cpu = list(r.report.cpu_nodes())
    norm_ops = {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div", "Sub", "LayerNormalization"}
    assert cpu and {d.op_type for d in cpu} & norm_ops, [d.op_type for d in cpu]
    assert all(REASON in d.reason for d in cpu if d.op_type in norm_ops), [(d.op_type, d.reason) for d in cpu]
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "m" / "model.onnx"))
    ref = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in _feeds(3, 2):
        a, b = ours.run(None, f)[0], ref.run(None, f)[0]
        assert np.array_equal(a, b), float(np.mean(a == b))


def _state_model():
    """A recurrent decoder's state input ``hidden`` [1, 2, D] read per layer, as quantize_static leaves
    it: ``Gather(hidden, k, axis 1) -> Q_k -> DQ_k`` with each layer's own scale, then an int8 Linear
    each, added."""
    from onnx import TensorProto as TP, helper, numpy_helper as nh
    rng = np.random.default_rng(5)
    inits, nodes = [], []
    for k, s in enumerate((0.0123, 0.0171)):
        w = rng.integers(-127, 128, (D, D)).astype(np.int8)
        inits += [nh.from_array(np.array(k, np.int64), f"i{k}"), nh.from_array(np.array(s, np.float32), f"s{k}"),
                  nh.from_array(np.array(k - 3, np.int8), f"z{k}"), nh.from_array(w, f"w{k}"),
                  nh.from_array(np.full(D, 0.002, np.float32), f"ws{k}"), nh.from_array(np.zeros(D, np.int8), f"wz{k}"),
                  nh.from_array(np.array(0.05, np.float32), f"so{k}"), nh.from_array(np.array(0, np.int8), f"zo{k}")]
        nodes += [helper.make_node("Gather", ["hidden", f"i{k}"], [f"h{k}"], axis=1),
                  helper.make_node("QuantizeLinear", [f"h{k}", f"s{k}", f"z{k}"], [f"hq{k}"]),
                  helper.make_node("DequantizeLinear", [f"hq{k}", f"s{k}", f"z{k}"], [f"hd{k}"]),
                  helper.make_node("DequantizeLinear", [f"w{k}", f"ws{k}", f"wz{k}"], [f"wd{k}"], axis=1),
                  helper.make_node("MatMul", [f"hd{k}", f"wd{k}"], [f"y{k}"]),
                  helper.make_node("QuantizeLinear", [f"y{k}", f"so{k}", f"zo{k}"], [f"yq{k}"]),
                  helper.make_node("DequantizeLinear", [f"yq{k}", f"so{k}", f"zo{k}"], [f"yd{k}"])]
    inits += [nh.from_array(np.array(0.08, np.float32), "sa"), nh.from_array(np.array(2, np.int8), "za")]
    nodes += [helper.make_node("Add", ["yd0", "yd1"], ["a"]),
              helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
              helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["out"])]
    g = helper.make_graph(nodes, "state", [helper.make_tensor_value_info("hidden", TP.FLOAT, [1, 2, D])],
                          [helper.make_tensor_value_info("out", TP.FLOAT, [1, D])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_state_rows_on_host_exact(tmp_path):
    """Each Gather of the float state input feeds its own Q: on the host (fp32 rows), each Linear reads
    exactly onnxruntime's codes (before: the region's fp16 copy of the input moved 0.4-1.2% of those
    codes; arabic-name-romanizer's GRU decoder 73.5% identical -> 100% on its state output)."""
    m = _state_model()
    path = str(tmp_path / "state.onnx")
    import onnx
    onnx.save(m, path)
    r = onnx_mrvl.convert(path)
    r.save(str(tmp_path / "m"), overwrite=True)
    assert len(r.report.regions) == 1
    gathers = [d for d in r.report.cpu_nodes() if d.op_type == "Gather"]
    assert len(gathers) == 2 and all(REASON in d.reason for d in gathers), list(r.report.cpu_nodes())
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "m" / "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    for _ in range(4):
        f = {"hidden": np.tanh(rng.standard_normal((1, 2, D)) * 1.3).astype(np.float32)}
        np.testing.assert_array_equal(ours.run(None, f)[0], ref.run(None, f)[0])


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_ort_quantized_input_layernorm_on_host_exact(act, tmp_path):
    """onnxruntime's quantize_static of a decomposed LayerNorm (the legacy torch export, opset 13)
    of the float graph input: ReduceMean / Sub / Pow float on ``x``, Q -> DQ pairs inside (variance,
    ``+ eps``, the normalised value, ``* gamma``, ``+ beta``). The whole norm with its interior pairs
    and the DequantizeLinears of its constants runs on the host (before: in the region from the
    input's fp16 copy, 96% of the output identical); the model input's own pair (a LayerNormalization
    op reading ``DQ(Q(x))``) stays the region's."""
    from onnx_mrvl.testing.qdq_transformers import agreement, quantize
    for kind, on_host in (("torch", True), ("op", False)):
        n = Net(0, 17 if kind == "op" else 13)
        n.linear(n.linear(layernorm(n, "x", [1, T, D], kind), D, D, "fc1"), D, D, "fc2")
        q = quantize(n.model(f"ln_{kind}", [("x", [1, T, D])]), str(tmp_path / f"{kind}.q.onnx"), act)
        r = onnx_mrvl.convert(q)
        r.save(str(tmp_path / kind), overwrite=True)
        assert len(r.report.regions) == 1
        host = {d.op_type for d in r.report.cpu_nodes() if REASON in d.reason}
        assert ({"ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Mul", "Add"} <= host) == on_host, host
        if not on_host:
            assert not host & {"LayerNormalization", "ReduceMean"}, host
        agree = agreement(q, str(tmp_path / kind / "model.onnx"), runs=3)
        assert all(a["identical"] == 1.0 for a in agree.values()), (kind, agree)
