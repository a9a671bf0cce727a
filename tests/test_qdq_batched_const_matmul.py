"""Legalize rule ``qdq_batched_const_matmul``: a QDQ MatMul of per-head queries by a per-head constant
that onnxruntime's quantizer made a DequantizeLinear of 3-D int8 codes with a zero point (DeBERTa-v2 /
SEW-D relative-position projections) becomes one int8 FC per head, in the region, element-for-element
identical to onnxruntime (S8: its float MatMul between DQ and Q; U8: QLinearMatMul)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_relpos import H, feeds, relpos_block

pytest.importorskip("onnxruntime.quantization")


def _quantized(tmp_path, act: str) -> str:
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    onnx.save(relpos_block(), src)
    quantize_static_qdq(src, dst, feeds(8), act)
    return dst


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_per_head_int8_constant_is_int8_fcs_identical_to_onnxruntime(tmp_path, act):
    qpath = _quantized(tmp_path, act)
    legal = legalize(onnx.load(qpath))
    notes = [d for rule, _, d in legal.report.applied if rule == "qdq_batched_const_matmul"]
    assert len(notes) == 1 and f"{H} int8 MatMuls" in notes[0], notes
    entries = [n for n in legal.model.graph.node if n.op_type == "MatMul" and n.name.startswith("c2p/entry")]
    assert len(entries) == H
    inits = {t.name: t for t in legal.model.graph.initializer}
    for e in entries:   # each entry's weight: a DequantizeLinear of 2-D int8 codes with the zero point
        (dq,) = [n for n in legal.model.graph.node if n.output[0] == e.input[1]]
        assert dq.op_type == "DequantizeLinear" and len(inits[dq.input[0]].dims) == 2
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes(), result.report.cpu_nodes()
    d = result.report["c2p"]
    assert d.placement == "accelerator" and d.precision == "int8", d
    folder = str(tmp_path / f"out_{act}")
    result.save(folder)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for f in feeds(3, seed=7):
        a, b = ref.run(None, f)[0], mine.run(None, f)[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ"


def test_per_axis_codes_are_left_alone(tmp_path):
    """A weight DequantizeLinear with per-axis scales is not split (the reason names it)."""
    qpath = _quantized(tmp_path, "s8")
    q = onnx.load(qpath)
    inits = {t.name: t for t in q.graph.initializer}
    (mm,) = [n for n in q.graph.node if n.name == "c2p"]
    (dq,) = [n for n in q.graph.node if n.output[0] == mm.input[1]]
    s = float(onnx.numpy_helper.to_array(inits[dq.input[1]]))
    z = int(onnx.numpy_helper.to_array(inits[dq.input[2]]))
    from onnx import numpy_helper as nh
    q.graph.initializer.extend([nh.from_array(np.full(H, s, np.float32), "per_head_scale"),
                                nh.from_array(np.full(H, z, onnx.helper.tensor_dtype_to_np_dtype(
                                    inits[dq.input[2]].data_type)), "per_head_zp")])
    dq.input[1], dq.input[2] = "per_head_scale", "per_head_zp"
    dq.attribute.append(onnx.helper.make_attribute("axis", 0))
    legal = legalize(q)
    assert not [r for r, _, _ in legal.report.applied if r == "qdq_batched_const_matmul"]
    assert any("qdq_batched_const_matmul" in str(s) and "per-axis" in str(s) for s in legal.report.skipped), \
        legal.report.skipped
