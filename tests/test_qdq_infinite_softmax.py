"""Legalize rule ``qdq_infinite_softmax``: a QDQ model whose attention mask onnxruntime's
quantizer calibrated on -inf (the mask's and the masked scores' Q / DQ of infinite scale, as in
TorchScript exports) keeps its attention block in one region with onnxruntime's exact numbers
(S8: its float Softmax of NaN rows quantizes to the zero point; U8: its QLinearSoftmax of a NaN
table writes code 0, the zero point: probabilities 0), and leaves the forms it cannot reproduce (a
zero point other than the code onnxruntime writes) as they were, on the CPU and exact."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_masked_attention import feeds, masked_attention

pytest.importorskip("onnxruntime.quantization")


def _quantized(tmp_path, act: str) -> str:
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    onnx.save(masked_attention(), src)
    quantize_static_qdq(src, dst, feeds(8), act)
    q = onnx.load(dst)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
    assert any(n.op_type == "QuantizeLinear" and np.isinf(inits[n.input[1]]).all() for n in q.graph.node)
    return dst


def _compare(qpath: str, folder: str):
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for f in feeds(3, seed=7) + [dict(feeds(1, seed=9)[0], mask=np.ones((1, 8), np.int64))]:
        a, b = ref.run(None, f)[0], mine.run(None, f)[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ"


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_infinite_scale_softmax_is_one_region_identical_to_onnxruntime(tmp_path, act):
    """S8 (onnxruntime runs the Softmax in float, the _safe_softmax guard after its DQ: NaN rows,
    Q(NaN) the lowest code) and U8 (onnxruntime fuses a QLinearSoftmax whose table of the infinite
    scale is NaN at its last entry, 0 below: code 0, probed): the mask path and the Softmax go, the
    block is one region, bit-identical to onnxruntime."""
    qpath = _quantized(tmp_path, act)
    from onnx_mrvl import ort_plan
    assert ("softmax" in ort_plan.ort_float_nodes(onnx.load(qpath), "Softmax")) == (act == "s8")
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes()
    assert result.report["softmax"].placement == "accelerator"
    from onnx_mrvl.legalize import legalize
    legal = legalize(onnx.load(qpath))
    assert "Softmax" not in {n.op_type for n in legal.model.graph.node}
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.input[0].startswith("madd")
                   for n in legal.model.graph.node)   # the mask's infinite-scale pair went with it
    notes = [d for rule, _, d in legal.report.applied if rule == "qdq_infinite_softmax"]
    assert len(notes) == 1 and "infinite scale" in notes[0] and "nodes_to_exclude" in notes[0], notes
    assert ("QLinearSoftmax" in notes[0]) == (act == "u8"), notes
    folder = str(tmp_path / "out")
    result.save(folder)
    _compare(qpath, folder)


def test_onnxruntime_qlinear_softmax_of_an_infinite_scale_writes_one_code():
    """The probe the U8 form relies on: onnxruntime's QLinearSoftmax with an infinite input scale
    writes one code whatever the input codes (its table is NaN / 0; measured 0 on x86-64), and a
    finite scale many (a real softmax); a NaN scale is refused by onnxruntime (None)."""
    from onnx_mrvl.ort_probe import qlinear_softmax_codes
    for dt, yz in ((np.uint8, 0), (np.uint8, 9), (np.int8, -128)):
        codes = qlinear_softmax_codes(np.inf, 0, 1 / 255, yz, dt, [1, 2, 8, 8], -1, 17)
        assert codes is not None and len(codes) == 1, codes
    assert len(qlinear_softmax_codes(0.5, 0, 1 / 255, 0, np.uint8, [1, 2, 8, 8], -1, 17)) > 8
    assert qlinear_softmax_codes(float("nan"), 0, 1 / 255, 0, np.uint8, [1, 2, 8, 8], -1, 17) is None


def _move_zero_point(qpath: str, tmp_path, zero) -> str:
    """The model with the probabilities' Q / DQ (of p0) given the zero point ``zero``."""
    q = onnx.load(qpath)
    (qp,) = [n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "p0"]
    dq = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == qp.output[0]]
    z = onnx.numpy_helper.from_array(zero, "p0_moved_zero_point")
    q.graph.initializer.append(z)
    for n in [qp] + dq:
        n.input[2] = z.name
    path = str(tmp_path / "q_moved.onnx")
    onnx.save(q, path)
    return path


@pytest.mark.parametrize("act, zero", [("s8", np.array(-100, np.int8)), ("u8", np.array(100, np.uint8))])
def test_a_code_off_the_zero_point_is_written_as_its_value(tmp_path, act, zero):
    """The probabilities' zero point moved off the code onnxruntime writes (S8: its float Softmax's
    NaN quantized to the lowest, -128; U8: its QLinearSoftmax's code 0): ``Q_p(x * 0 + v)``, v the
    value of that code, one region, exact. S8: the probabilities' pair and the next one (zero point
    the lowest code again) stay two roundings around the _safe_softmax guard, as in onnxruntime's
    plan (its DoubleQDQPairsRemover does not see through the IsNaN / Where; measured on DETR's
    attention, which merged was 83.2% identical)."""
    qpath = _move_zero_point(_quantized(tmp_path, act), tmp_path, zero)
    from onnx_mrvl.legalize import legalize
    legal = legalize(onnx.load(qpath))
    applied = [e[0] for e in legal.log]
    assert "qdq_double_pair" not in applied
    notes = [d for rule, _, d in legal.report.applied if rule == "qdq_infinite_softmax"]
    assert len(notes) == 1 and "Q(x * 0 + " in notes[0], notes
    assert "Softmax" not in {n.op_type for n in legal.model.graph.node}
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes(), result.report.cpu_nodes()
    folder = str(tmp_path / f"out_{act}")
    result.save(folder)
    _compare(qpath, folder)


def test_int8_model_without_the_guard_runs_a_uint8_qlinear_softmax(tmp_path):
    """S8 without torch's _safe_softmax guard (older TorchScript exports): onnxruntime fuses the
    Softmax into a QLinearSoftmax, on uint8 codes after its S8 -> U8 rewrite (zero points + 128:
    ``ort_plan.ort_u8_softmaxes``), whose code 0 is the int8 zero point -128: Q(x * 0), one
    region, bit-identical."""
    from onnx_mrvl import ort_plan
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(masked_attention(guard=False), src)
    quantize_static_qdq(src, dst, feeds(8), "s8")
    q = onnx.load(dst)
    assert "softmax" not in ort_plan.ort_float_nodes(q, "Softmax") and "softmax" in ort_plan.ort_u8_softmaxes(q)
    result = onnx_mrvl.convert(dst)
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes(), result.report.cpu_nodes()
    from onnx_mrvl.legalize import legalize
    notes = [d for rule, _, d in legalize(onnx.load(dst)).report.applied if rule == "qdq_infinite_softmax"]
    assert len(notes) == 1 and "uint8 QLinearSoftmax" in notes[0] and "Q(x * 0)" in notes[0], notes
    folder = str(tmp_path / "out")
    result.save(folder)
    _compare(dst, folder)


def test_an_onnxruntime_writing_several_codes_leaves_it_on_the_cpu_exactly(tmp_path, monkeypatch):
    """Fail closed: where onnxruntime's QLinearSoftmax of the infinite scale would write more than
    one code (another build's cast of NaN; here the probe is made to say so), the rule does not
    apply and the infinite-scale Q / DQ stay on the CPU, the model exact."""
    from onnx_mrvl import ort_probe
    qpath = _quantized(tmp_path, "u8")
    monkeypatch.setattr(ort_probe, "qlinear_softmax_codes", lambda *a, **k: np.array([0, 7], np.uint8))
    from onnx_mrvl.legalize import legalize
    legal = legalize(onnx.load(qpath))
    assert "qdq_infinite_softmax" not in [e[0] for e in legal.log]
    assert "Softmax" in {n.op_type for n in legal.model.graph.node}
    result = onnx_mrvl.convert(qpath)
    assert any("infinite scale" in d.reason for d in result.report.cpu_nodes())
    folder = str(tmp_path / "out")
    result.save(folder)
    _compare(qpath, folder)
