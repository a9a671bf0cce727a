"""A QDQ attention block with a causal mask of float32's lowest (a dynamo-exported Llama / Qwen2
quantized by onnxruntime): the quantizer gives the mask's DequantizeLinear and the masked scores'
Q / DQ a finite but huge scale (lowest / 255). The mask Add is an int8 Sum2D whose constant operand
(the dequantized mask, float32's lowest where masked) an int8 layer stores and adds in fp32, so the
block is one region, element-for-element identical to onnxruntime (S8: its float Add between DQ and
Q; U8: its QLinearAdd on the codes)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.fuse.groups import Group
from onnx_mrvl.fuse.patterns import weights_reason
from onnx_mrvl.target import get_target
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_masked_attention import causal_attention, causal_feeds

pytest.importorskip("onnxruntime.quantization")


def _quantized(tmp_path, act: str, padding: bool = False) -> str:
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    onnx.save(causal_attention(padding=padding), src)
    quantize_static_qdq(src, dst, causal_feeds(8, padding=padding), act)
    return dst


def _identical(qpath: str, result, folder: str, padding: bool = False) -> None:
    result.save(folder)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for f in causal_feeds(3, seed=7, padding=padding):
        a, b = ref.run(None, f)[0], mine.run(None, f)[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ"


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_constant_causal_mask_is_one_region_identical_to_onnxruntime(tmp_path, act):
    qpath = _quantized(tmp_path, act)
    q = onnx.load(qpath)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in q.graph.initializer}
    (dq,) = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] in
             [x for m in q.graph.node if m.name == "mask_add" for x in m.input]
             and n.input[0] in inits and inits[n.input[0]].ndim == 4]
    assert float(inits[dq.input[1]]) > 1e36    # the quantizer's scale of the mask: lowest / 255
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes(), result.report.cpu_nodes()
    d = result.report["mask_add"]
    assert d.placement == "accelerator" and d.precision == "int8", d
    assert result.report[dq.name].placement == "accelerator"
    _identical(qpath, result, str(tmp_path / f"out_{act}"))


def test_run_time_padding_mask_stays_exact(tmp_path):
    """The mask made at run time (``Where(causal And mask, 0, lowest)``): its integer / boolean ops on
    the CPU, its Q / DQ and the Add in the region, identical."""
    qpath = _quantized(tmp_path, "s8", padding=True)
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1
    assert {d.op_type for d in result.report.cpu_nodes()} <= {"Cast", "Unsqueeze", "And", "Where"}
    _identical(qpath, result, str(tmp_path / "out"), padding=True)


def test_int8_operand_needs_only_be_finite():
    """An int8 Sum2D's constant operand (fp32 in the program) may exceed fp16, not be inf / NaN; a
    float layer's operand (fp16) may not exceed fp16."""
    target = get_target()
    big = np.array([0.0, np.finfo(np.float32).min], np.float32)
    assert weights_reason(Group("Sum2D", "mrvl.sum", [], ["x"], "y", {"precision": "int8"}, {"operand": big}),
                          target) is None
    assert "NaN/inf" in weights_reason(Group("Sum2D", "mrvl.sum", [], ["x"], "y", {"precision": "int8"},
                                             {"operand": np.array([0.0, -np.inf], np.float32)}), target)
    assert "fp16 range" in weights_reason(Group("Sum2D", "mrvl.sum", [], ["x"], "y", {}, {"operand": big}), target)
