"""A weight DequantizeLinear read both by an int8 layer and by a MatMul of constants (SEW-D / DeBERTa
share a projection's weights between the hidden states and the relative-position embeddings):
legalize's ``fold_constants`` keeps the DQ for the int8 layer and gives the constant MatMul a folded
copy, so the projection stays int8 (it became an fp16 layer on the dequantized weights: SEW-D `_ts`
QDQ 98.7% identical), identical to onnxruntime."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
from onnx_mrvl.testing.qdq_relpos import feeds, shared_projection_block

pytest.importorskip("onnxruntime.quantization")


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_shared_weight_dq_stays_for_the_int8_layer(tmp_path, act):
    src, qpath = str(tmp_path / "f.onnx"), str(tmp_path / f"q_{act}.onnx")
    onnx.save(shared_projection_block(), src)
    quantize_static_qdq(src, qpath, feeds(8), act)
    q = onnx.load(qpath)
    (w_dq,) = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0].startswith("wq")]
    assert sum(w_dq.output[0] in n.input for n in q.graph.node) == 2       # q_proj and pos_proj read it
    legal = legalize(q).model
    (mm,) = [n for n in legal.graph.node if n.name == "q_proj"]
    producer = {o: n for n in legal.graph.node for o in n.output}
    assert producer[mm.input[1]].op_type == "DequantizeLinear"            # kept: int8 codes and scales
    assert "pos_proj" not in {n.name for n in legal.graph.node}            # folded on its copy
    result = onnx_mrvl.convert(qpath)
    assert result.report["q_proj"].precision == "int8", result.report["q_proj"]
    assert len(result.report.regions) == 1 and not result.report.cpu_nodes()
    folder = str(tmp_path / "out")
    result.save(folder)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    mine = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for f in feeds(3, seed=7):
        a, b = ref.run(None, f)[0], mine.run(None, f)[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ"
