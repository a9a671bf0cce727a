"""Legalization: a Slice / Split on the leading axis of a Transpose's output (the fused qkv of an SVTR
block as paddle2onnx writes it: ``Reshape [0, -1, 3, H, d] -> Transpose [2, 0, 3, 1, 4] -> Slice(axis 0)
-> Squeeze``; torch.onnx's ``Split(axis 0)``) moves before the Transpose (slice_through_transpose):
exact, and the recognizer is one region (each cut was a CPU Slice: PP-OCRv4 rec 3 regions)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, make_model
from onnx_mrvl.testing.arch_paddle import svtr_rec

mk = helper.make_node


def _leading_cuts(model):
    prod = {o: n for n in model.graph.node for o in n.output}
    out = []
    for n in model.graph.node:
        p = prod.get(n.input[0]) if n.input else None
        if n.op_type in ("Slice", "Split") and p is not None and p.op_type == "Transpose":
            out.append(n.name)
    return out


@pytest.mark.parametrize("opset,qkv", [(11, "slice"), (17, "slice"), (11, "split"), (13, "split")])
def test_qkv_cut_moves_before_the_transpose(opset, qkv):
    m = svtr_rec(opset=opset, qkv=qkv)
    assert _leading_cuts(m)
    out, log = legalize_and_compare(m)
    # each cut read by Squeezes alone is unbind_to_gather's (a Gather, taken by fuse), else moved here
    rules = [r for r, _, _ in log]
    assert rules.count("slice_through_transpose") + rules.count("unbind_to_gather") >= 1
    assert not _leading_cuts(out)


@pytest.mark.parametrize("opset,qkv", [(11, "slice"), (17, "split")])
def test_svtr_rec_is_one_region_within_fp16(opset, qkv, tmp_path):
    m = svtr_rec(opset=opset, qkv=qkv)
    feeds = feeds_for(m, 3)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    conv = onnx_mrvl.convert(m)
    assert len(conv.report.regions) == 1
    assert not list(conv.report.cpu_nodes()), [(d.node, d.op_type) for d in conv.report.cpu_nodes()]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    # the softmax over the classes: compare the logits' effect on the probabilities
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


def _transposed_slice(perm, axis, starts=(1,), ends=(3,)):
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64), "a": np.array([axis], np.int64)}
    nodes = [mk("Transpose", ["x"], ["t"], name="tr", perm=list(perm)),
             mk("Slice", ["t", "s", "e", "a"], ["y"], name="cut"),
             mk("Relu", ["t"], ["z"], name="other")]
    return make_model(nodes, [("x", [2, 4, 5, 3])], ["y", "z"], inits, opset=13)


def test_transpose_with_other_readers_stays_for_them():
    out, log = legalize_and_compare(_transposed_slice([1, 0, 3, 2], 0))
    assert any(r == "slice_through_transpose" for r, _, _ in log)
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("Transpose") == 2     # the original one for Relu, one after the moved slice


@pytest.mark.parametrize("perm,axis", [([0, 2, 1, 3], 0), ([1, 0, 3, 2], 1)])
def test_left_when_not_a_leading_cut_of_a_moved_axis(perm, axis):
    _, log = legalize_and_compare(_transposed_slice(perm, axis, ends=(2,)))
    assert not any(r == "slice_through_transpose" for r, _, _ in log)
