"""Legalize rule ``qdq_input_pair``: a float model input read only through data moves ending in
QuantizeLinears (YOLOX's / YOLOv5's Focus stem: strided Slices of the image, the Concat quantized per
input) gets a Q -> DQ pair per chain at the input, the host's exact fp32 quantize; the slices then
move codes. Before: the Slices stayed on the CPU and the region quantized their values after fp16
storage (ddddocr's detector: 61% identical on inputs with fractions)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import int8_zoo, qdq_variants as qv
from onnx_mrvl.testing.qdq_variant_models import focus_stem


def _pixels(k: int):
    """0..255 images with fractions (a resize's output): fp16 cannot hold them above 128."""
    rng = np.random.default_rng(k)
    return {"input": (rng.uniform(0, 255, (1, 3, 32, 32))).astype(np.float32)}


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_focus_stem_slices_move_codes_identical(tmp_path, act):
    m = focus_stem()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    int8_zoo.quantize_static_qdq(src, dst, [_pixels(k) for k in range(6)], act=act)
    q = onnx.load(dst)
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == "input" for n in q.graph.node)
    res = legalize(q)
    assert [w for w, _, _ in res.log].count("qdq_input_pair") == 1
    pairs = [n for n in res.model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input"]
    assert len(pairs) == 4   # one per chain: each slice's Q has its own calibrated scale
    r = onnx_mrvl.convert(q)
    assert len(r.report.regions) == 1 and not [d for d in r.report.cpu_nodes() if d.op_type == "Slice"]
    r.save(str(tmp_path / "out"))
    import onnxruntime as ort
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    for k in range(10, 13):
        f = _pixels(k)
        assert np.array_equal(sess.run(None, f)[0], ref.run(None, f)[0])


def test_input_also_read_by_a_float_op_is_left_with_its_reason():
    m = focus_stem()
    m.graph.node.append(onnx.helper.make_node("Relu", ["input"], ["extra"], name="extra_relu"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, [1, 3, 32, 32]))
    import tempfile, os
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
        onnx.save(m, src)
        int8_zoo.quantize_static_qdq(src, dst, [_pixels(k) for k in range(4)])
        res = legalize(onnx.load(dst))
    assert "qdq_input_pair" not in [w for w, _, _ in res.log]
    assert any(w == "qdq_input_pair" and "not every reader" in why for w, _, why in res.report.skipped)
