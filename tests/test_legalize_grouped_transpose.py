"""Legalization: ``Reshape`` merging leading axes -> ``Transpose`` keeping the merged axis first ->
``Reshape`` splitting it back becomes one Transpose (grouped_transpose). torch's dynamo exporter writes
attention's K^T that way (``[B*H, T, d]``); with a batch of two sentences each Reshape crossed the batch
axis and stayed on the CPU (MiniLM-L6: 7 regions -> 1, docs/surveys/trained-text.md)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.testing.arch_attention import feeds, mha_block

mk = helper.make_node


def applied(log, rule):
    return [names for r, names, _ in log if r == rule]


def _chain(xs, merged, perm, split, rank_out=None):
    inits = {"s1": np.array(merged, np.int64), "s2": np.array(split, np.int64)}
    nodes = [mk("Reshape", ["x", "s1"], ["r"], name="merge"),
             mk("Transpose", ["r"], ["t"], name="tr", perm=list(perm)),
             mk("Reshape", ["t", "s2"], ["r2"], name="split"),
             mk("Relu", ["r2"], ["y"], name="relu")]
    return make_model(nodes, [("x", xs)], ["y"], inits)


@pytest.mark.parametrize("xs,merged,perm,split,want", [
    ([2, 3, 5, 4], [6, 5, 4], [0, 2, 1], [2, 3, 4, 5], [0, 1, 3, 2]),          # dynamo's K^T
    ([2, 3, 4, 5, 6], [24, 5, 6], [0, 2, 1], [2, 3, 4, 6, 5], [0, 1, 2, 4, 3]),  # three merged axes
    ([2, 3, 4, 5, 6], [6, 4, 5, 6], [0, 3, 1, 2], [2, 3, 6, 4, 5], [0, 1, 4, 2, 3]),
])
def test_merge_transpose_split_becomes_one_transpose(xs, merged, perm, split, want):
    out, log = legalize_and_compare(_chain(xs, merged, perm, split))
    assert applied(log, "grouped_transpose")
    assert op_types(out) == ["Transpose", "Relu"]
    assert list(out.graph.node[0].attribute[0].ints) == want


@pytest.mark.parametrize("xs,merged,perm,split", [
    ([2, 3, 5, 4], [6, 5, 4], [1, 0, 2], [5, 6, 4]),          # the merged axis moves
    ([2, 3, 5, 4], [6, 5, 4], [0, 2, 1], [3, 2, 4, 5]),       # split into other axes
    ([2, 3, 5, 4], [2, 15, 4], [0, 2, 1], [2, 4, 3, 5]),      # merges inner axes, not the leading ones
])
def test_left_alone_when_not_a_grouped_transpose(xs, merged, perm, split):
    out, log = legalize_and_compare(_chain(xs, merged, perm, split))
    assert not applied(log, "grouped_transpose")


def test_batched_dynamo_attention_is_one_region_within_fp16(tmp_path):
    m = mha_block("dynamo", "input", B=2, T=12, grouped_kt=True)
    assert op_types(m).count("Reshape") == 6   # 3 head splits, K^T merge + split, the output
    f = feeds(m, 1)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    conv = onnx_mrvl.convert(m)
    assert len(conv.report.regions) == 1
    assert not list(conv.report.cpu_nodes()), [(d.node, d.op_type, d.reason) for d in conv.report.cpu_nodes()]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, f)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_batched_dynamo_attention_is_one_region_and_matches_onnxruntime(act, tmp_path):
    """onnxruntime's quantize_static puts a Q -> DQ pair of one grid after each of the three moves:
    they are looked through (the identity on that grid); before, the K^T chain and its pairs stayed
    on the CPU (2 regions)."""
    import onnx
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    m = mha_block("dynamo", "input", B=2, T=12, grouped_kt=True)
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / f"{act}.onnx")
    onnx.save(m, src)
    quantize_static_qdq(src, dst, [feeds(m, i) for i in range(4)], act=act)
    conv = onnx_mrvl.convert(dst)
    assert len(conv.report.regions) == 1
    # only the host's quantization of the additive mask input stays on the CPU
    assert {d.op_type for d in conv.report.cpu_nodes()} <= {"QuantizeLinear", "DequantizeLinear"}
    assert all(d.node.startswith("mask_") for d in conv.report.cpu_nodes())
    f = feeds(m, 7)
    ref = ort.InferenceSession(dst, providers=["CPUExecutionProvider"]).run(None, f)[0]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, f)[0]
    assert np.mean(y == ref) >= 0.99
