"""int8 QDQ zoo (issue #19): the five architectures of onnx_mrvl/testing/int8_zoo.py at 64x64, quantized by
onnxruntime (quant_pre_process + quantize_static QDQ, per-channel int8 weights), convert with no
Conv/Gemm/MatMul on the CPU and no Q/DQ except at the graph's inputs/outputs, and match
onnxruntime's own execution of the same QDQ model (>= 99% of output elements identical, the rest
within one output quantum; top-1 agreement on the classifiers). Full resolution:
benchmarks/bench_int8_qdq.py."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime.quantization")
from onnx_mrvl.testing import int8_zoo  # noqa: E402

CASES = [("yolo", "s8"), ("yolo", "u8"), ("mobilenetv2", "s8"), ("mobilenetv2", "u8"),
         ("resnet50", "s8"), ("inception_v2", "s8")]


def _row(tmp_path, name, act, n_inputs=3):
    qpath = int8_zoo.quantize(int8_zoo.float_model(name, 64), str(tmp_path / "q"), act, samples=2)
    return int8_zoo.measure(name, qpath, str(tmp_path / "out"), act, n_inputs)


def _structure(row):
    assert not {"Conv", "Gemm", "MatMul"} & set(row.cpu_ops), row.cpu_ops
    assert row.inner_qdq == 0, row.cpu_ops
    assert row.regions == 1, row


@pytest.mark.parametrize("name,act", CASES)
def test_int8_zoo_model_matches_onnxruntime(tmp_path, name, act):
    row = _row(tmp_path, name, act)
    print(row)
    _structure(row)
    assert row.identical >= 0.99 and row.max_quanta <= 1.0 + 1e-3, row
    if name in int8_zoo.CLASSIFIERS:
        assert row.top1 == 1.0, row


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_int8_zoo_densenet(tmp_path, act):
    """DenseNet-121: pre-activation BN (+ caffe2 Mul/Add with quantized constants) as per-channel
    Lookups computed step by step, int8 Concats, transition AveragePools that onnxruntime runs in
    float with S8 (requant="float")."""
    row = _row(tmp_path, "densenet121", act, n_inputs=2)
    print(row)
    _structure(row)
    assert row.identical >= 0.99 and row.max_quanta <= 1.0 + 1e-3 and row.top1 == 1.0, row
