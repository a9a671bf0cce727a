"""Partitioning on the shared model builders: the detection-style model under every strategy and
model-zoo architectures under "max" and "cost"."""
import re

import numpy as np
import onnxruntime as ort
import pytest

from onnx_mrvl.testing.models import detection_like
from onnx_mrvl.pipeline import convert
from onnx_mrvl.testing.randomize_weights import load_zoo, random_inputs, zoo_model_paths
from test_split_strategies import RTOL, ATOL, check_deployable

STRATEGIES = ("max", "single", "cost")


def _reason_times(reason):
    """(accelerator us, CPU us) from a cost-model reason."""
    m = re.match(r"cost model: accelerator ([\d.e+-]+) us .* >= CPU ([\d.e+-]+) us", reason)
    assert m, reason
    return float(m.group(1)), float(m.group(2))


@pytest.fixture(scope="module")
def detection():
    return detection_like()


@pytest.mark.parametrize("partition", STRATEGIES)
def test_detection_model_converts_and_matches(detection, partition):
    r = convert(detection, partition=partition, reference=True)
    got = check_deployable(detection, r)                # boxes, scores, top-k within fp16 tolerance
    names = [o.name for o in detection.graph.output]
    feeds = {"input": np.random.default_rng(0).standard_normal((1, 3, 128, 128)).astype(np.float32)}
    want = ort.InferenceSession(detection.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(r.model.SerializeToString()).run(None, feeds)
    out = dict(zip(names, got))
    ref = dict(zip(names, want))
    np.testing.assert_array_equal(out["selected_indices"], ref["selected_indices"])   # same kept boxes
    np.testing.assert_array_equal(out["topk_indices"], ref["topk_indices"])
    np.testing.assert_allclose(out["boxes"], ref["boxes"], rtol=RTOL, atol=ATOL)
    assert len(r.report.regions) == 1                   # the backbone + head
    region = r.report.regions[0]
    assert region["inputs"] == ["input"] and len(region["outputs"]) == 2   # boxes, scores (3-D concats fused)
    assert region["macs"] == r.report.macs_offloaded > 0.9 * r.report.macs_total
    ops = [n.op_type for n in r.model.graph.node]
    for cpu_op in ("TopK", "NonMaxSuppression", "ReduceMax"):
        assert ops.count(cpu_op) == 1
    assert ops.count("Sigmoid") == 0                    # a standalone activation runs in the region
    if partition == "cost":
        assert region["estimate"]["offload"] and region["estimate"]["accel_s"] < region["estimate"]["cpu_s"]


ZOO = [name for name in ("squeezenet", "shufflenet") if name in zoo_model_paths()]   # the fast ones


@pytest.mark.skipif(not ZOO, reason="the onnx wheel has no light model-zoo files")
@pytest.mark.parametrize("name", ZOO)
def test_zoo_max_and_cost(name):
    model = load_zoo(name, 0)
    feeds = random_inputs(model, 0)
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    results = {}
    for partition in ("max", "cost"):
        r = convert(model, partition=partition, reference=True)
        got = ort.InferenceSession(r.model.SerializeToString()).run(None, feeds)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(w).max())))
        assert r.report.regions, f"{name}/{partition}: nothing offloaded"
        for reg in r.report.regions:
            assert reg["macs"] > 0 and reg["layers"] > 0 and reg["origin"]
        for d in r.report.dropped:
            assert d["reason"]
        results[partition] = r
    if name == "shufflenet":   # its channel Splits are Mrvl Slice2D layers and its 16 channel shuffles
        mx = results["max"]     # block rotations (fuse/perms.py): 49 -> 17 -> 1 region, then the Softmax
        assert len(mx.report.regions) == 1
        assert not [n for n in mx.model.graph.node if n.op_type == "Split"]
    cost = results["cost"]
    for reg in cost.report.regions:                    # never keeps a region its estimate says is slower
        est = reg["estimate"]
        assert est["offload"] and est["accel_s"] < est["cpu_s"], reg["name"]
    for d in cost.report.dropped:
        if d["reason"].startswith("cost model"):
            accel, cpu = _reason_times(d["reason"])
            assert accel >= cpu
    assert cost.report.macs_offloaded <= results["max"].report.macs_offloaded


def test_cost_drops_a_region_that_does_not_pay(detection):
    """A CPU ten thousand times faster than assumed: the cost model keeps nothing, and says why."""
    from onnx_mrvl.target import CpuProfile, Target
    fast = Target(cpu=CpuProfile(macs_per_s=1e15, bytes_per_s=1e15, op_overhead_s=1e-9))
    r = convert(detection, partition="cost", target=fast, reference=True)
    assert r.report.regions == []
    why = [d for d in r.report.dropped if d["reason"].startswith("cost model")]
    assert why
    for d in why:
        accel, cpu = _reason_times(d["reason"])
        assert accel >= cpu > 0
    assert r.report.macs_offloaded == 0
    check_deployable(detection, r)
