"""A batch above target.max_batch (8) runs as hardware batches of one compiled region."""
import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.split import batch_chunks
from onnx_mrvl.split.deploy import is_subgraph, subgraph_attrs

from onnx_mrvl.testing import models  # onnx_mrvl.testing.models


@pytest.mark.parametrize("n, calls, chunk", [(10, 2, 5), (17, 3, 6), (16, 2, 8), (9, 2, 5)])
def test_plan(n, calls, chunk):
    assert batch_chunks.plan(n, 8) == (calls, chunk)


@pytest.mark.parametrize("batch, calls, chunk", [(10, 2, 5), (17, 3, 6)])
def test_small_cnn_batch_above_max_batch(tmp_path, batch, calls, chunk):
    model = models.tiny_cnn(seed=1, batch=batch)
    result = onnx_mrvl.convert(model)
    path = result.save(str(tmp_path))
    assert len(result.subgraphs) == 1                                    # one region, one binary
    calls_ = [n for n in result.model.graph.node if is_subgraph(n)]
    assert len(calls_) == calls
    assert len({subgraph_attrs(n)["sha256"] for n in calls_}) == 1
    region = result.report.to_dict()["regions"][0]
    assert region["hardware_batches"] == {"calls": calls, "batch": chunk}
    assert all(d.placement == "accelerator" for d in result.report.decisions.values())
    meta = load(result.subgraphs[0].binary).meta
    assert all(i["shape"][0] == chunk for i in meta["inputs"])          # compiled for the chunk
    ops = [n.op_type for n in result.model.graph.node if not is_subgraph(n)]
    assert ops == (["Split", "Concat"] if batch % chunk == 0 else ["Pad", "Split", "Concat", "Slice"])
    sess = onnx_mrvl.InferenceSession(path)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal([batch, 3, 32, 32]).astype(np.float32)
    got, want = sess.run(None, {"input": x})[0], ref.run(None, {"input": x})[0]
    assert got.shape == want.shape == (batch, 10)
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    # each sample is its own: the padded zero sample of batch 17 does not leak into the others
    got1 = sess.run(None, {"input": x[:1].repeat(batch, 0)})[0]
    assert np.abs(got1 - got1[:1]).max() == 0


def test_batch_within_max_batch_is_one_call():
    result = onnx_mrvl.convert(models.tiny_cnn(seed=1, batch=8))
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert "hardware_batches" not in result.report.to_dict()["regions"][0]


def test_reference_bodies_keep_a_large_batch_on_the_cpu():
    """Reference bodies are written for the whole batch: no hardware batches, a reason instead."""
    result = onnx_mrvl.convert(models.tiny_cnn(seed=1, batch=10), reference=True)
    assert not result.subgraphs
    assert "hardware batches are not combined with reference bodies" in result.report.decisions["conv1"].reason


def test_cost_partition_counts_every_hardware_batch():
    """partition="cost": the compiled estimate of a chunked region is k calls of the chunk program."""
    from onnx_mrvl.split.cost import compiled_estimate
    result = onnx_mrvl.convert(models.tiny_cnn(seed=1, batch=10), partition="cost")
    est = result.report.to_dict()["regions"][0]["estimate"]                    # kept: 6.8x faster
    one = compiled_estimate(dict(est), result.subgraphs[0].binary)
    two = compiled_estimate(dict(est), result.subgraphs[0].binary, calls=2)
    assert two["accel_compute_s"] == 2 * one["accel_compute_s"] == est["accel_compute_s"]
    assert est["accel_s"] == pytest.approx(est["accel_compute_s"] + est["transfer_s"] + 2 * est["call_overhead_s"])
