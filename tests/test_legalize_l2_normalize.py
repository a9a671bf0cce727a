"""l2_normalize: ``x / ReduceL2(x, [-1])`` and ``LpNormalization(p=2)`` of an embedding -> the RMS-norm
form fuse's rmsnorm runs as one Mrvl LayerNorm (Resemblyzer's speaker embedding; before, the
ReduceL2 / Div stayed on the CPU). Structure, legalize's numbers and convert + simulator against
onnxruntime (fp16 bound)."""
import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare
from onnx_mrvl.testing.embedding_models import l2_embedding


def _ref(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


@pytest.mark.parametrize("form,opset", [("reducel2", 17), ("reducel2", 18), ("lpnorm", 17), ("fnormalize", 17)])
def test_l2_normalisation_runs_as_a_norm_layer(form, opset, tmp_path):
    m = l2_embedding(form, opset)
    legal, _ = legalize_and_compare(m)
    ops = [n.op_type for n in legal.graph.node]
    assert not {"ReduceL2", "LpNormalization", "Clip", "Expand"} & set(ops) and "ReduceMean" in ops
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    names = [layer.get("name", "") + str(layer.get("attrs", {}).get("func_name", "")) for layer in res.subgraphs[0].nodes_json["nodes"]]
    assert any("LayerNorm" in s for s in names), names
    x = np.random.default_rng(3).standard_normal((2, 32)).astype(np.float32)
    ref = _ref(m, x)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"input": x})[0]
    assert float(np.abs(got - ref).max()) <= 1e-2 * float(np.abs(ref).max())
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=2e-3)


def test_l2_normalisation_over_another_axis_is_left_alone():
    legal = legalize(l2_embedding("axis0")).model
    assert "ReduceL2" in [n.op_type for n in legal.graph.node]


def test_fnormalize_of_a_zero_row_is_zero_as_onnx(tmp_path):
    """F.normalize of an all-zero row: ONNX gives 0 / eps = 0; the RMS form with eps^2 / D gives 0 too
    (a plain x / ||x|| is 0 / 0 = NaN in both)."""
    from onnx import helper, TensorProto
    legal, _ = legalize_and_compare(l2_embedding("fnormalize", 17))
    zero = np.zeros((2, 64), np.float32)
    # the legalized normalisation alone (the Gemm / Relu cut off), fed a zero embedding
    g = helper.make_graph([n for n in legal.graph.node if n.op_type not in ("Gemm", "Relu")], "tail",
                          [helper.make_tensor_value_info("emb", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [2, 64])],
                          [i for i in legal.graph.initializer if i.name not in ("w", "b")])
    tail = helper.make_model(g, opset_imports=list(legal.opset_import))
    tail.ir_version = legal.ir_version
    got = ort.InferenceSession(tail.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"emb": zero})[0]
    assert np.array_equal(got, zero)


@pytest.mark.parametrize("form", ["reducel2", "fnormalize"])
@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_float_tail_stays_onnxruntimes(form, act, tmp_path):
    """onnxruntime's quantize_static of an embedding head: the normalisation reads a Q -> DQ pair's codes
    and no int8 layer takes it, so it stays onnxruntime's own fp32 ReduceL2 / Div on the host (the
    rewritten form there differed in the last bits: a pooled MiniLM QDQ 100% -> 5.6% identical)."""
    import onnx
    from onnx_mrvl.testing.qdq_transformers import feeds, quantize
    qpath = quantize(l2_embedding(form, 17), str(tmp_path / "q.onnx"), act=act)
    q = onnx.load(qpath)
    legal = legalize(q).model
    assert "ReduceL2" in [n.op_type for n in legal.graph.node]
    res = onnx_mrvl.convert(q)
    assert any(d.op_type == "ReduceL2" for d in res.report.cpu_nodes())
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "out")))
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    for seed in range(4):
        x = feeds(q, seed)
        assert np.array_equal(sess.run(None, x)[0], ref.run(None, x)[0])
