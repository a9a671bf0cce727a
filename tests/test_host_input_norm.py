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
