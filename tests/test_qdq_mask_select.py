"""Legalize rule ``qdq_mask_select``: a QDQ ``masked_fill(~mask, float32 lowest)`` of the attention
scores (DeBERTa-v2's XSoftmax, dynamo export) calibrated with padding: onnxruntime's QuantizeLinear
of scale lowest / 255 gives every score its zero point, so the codes are the mask's select of two
codes; written so, the CPU Where reads only the mask and the block is one region, identical to
onnxruntime for every mask. Calibrated without padding the scores matter: left as it was (the Where
on the CPU), exact."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_masked_attention import masked_fill_attention, masked_fill_feeds

pytest.importorskip("onnxruntime.quantization")


def _quantized(tmp_path, act: str, padded: int) -> str:
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}_{padded}.onnx")
    onnx.save(masked_fill_attention(), src)
    quantize_static_qdq(src, dst, masked_fill_feeds(8, padded=padded), act)
    return dst


def _identical(qpath, result, folder):
    result.save(folder)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for f in masked_fill_feeds(4, seed=7, padded=3):     # 3, 2, 1 and no padded positions
        a, b = ref.run(None, f)[0], mine.run(None, f)[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ"


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_masked_fill_of_zero_point_scores_is_one_region_identical(tmp_path, act):
    qpath = _quantized(tmp_path, act, padded=3)
    q = onnx.load(qpath)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
    (qo,) = [n for n in q.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "s2"]
    assert float(inits[qo.input[1]]) > 1e36          # lowest / 255
    legal = legalize(q)
    notes = [d for rule, _, d in legal.report.applied if rule == "qdq_mask_select"]
    assert len(notes) == 1 and "nodes_to_exclude" in notes[0], notes
    assert "scores" not in {n.name for n in legal.model.graph.node}      # the dead score path went
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1
    assert {d.op_type for d in result.report.cpu_nodes()} <= {"Unsqueeze", "Mul", "Cast", "Not", "Where"}
    _identical(qpath, result, str(tmp_path / f"out_{act}"))


def test_scores_that_matter_are_left_alone(tmp_path):
    """No padding in the calibration: the Q has the scores' scale, the rule refuses (its reason),
    the Where stays on the CPU and the model is identical to onnxruntime as before."""
    qpath = _quantized(tmp_path, "s8", padded=0)
    legal = legalize(onnx.load(qpath))
    assert not [r for r, _, _ in legal.report.applied if r == "qdq_mask_select"]
    assert any("qdq_mask_select" in str(s) and "the scores matter" in str(s) for s in legal.report.skipped)
    result = onnx_mrvl.convert(qpath)
    assert "Where" in {d.op_type for d in result.report.cpu_nodes()}
    _identical(qpath, result, str(tmp_path / "out"))
