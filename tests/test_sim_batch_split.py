"""A batch run as whole images per thread (sim/batch_split.py): the batch plan's bits and reports."""
import numpy as np
import pytest

import onnx_mrvl
from onnx_mrvl.sim import Simulator, native
from onnx_mrvl.testing import models
from test_sim_dwpw import block_program

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
RNG = np.random.default_rng(23)


def _runs(sim, x):
    """(split run, batch-plan run, layer-by-layer run), each with its overflow report."""
    split = sim._split
    a = sim.run([x])[0], sim.last_overflow
    sim._split = None
    try:
        b = sim.run([x])[0], sim.last_overflow
    finally:
        sim._split = split
    c = sim._run_dynamic(sim._bind_inputs([x]))[0], sim.last_overflow
    return a, b, c


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_converted_mobilenet_split_equals_batch_plan(monkeypatch, threads):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    res = onnx_mrvl.convert(models.mobilenetv2_like(seed=6, width=0.35, input_size=96, batch=3, num_classes=10))
    sim = Simulator(res.subgraphs[0].binary)
    assert sim._split is not None and sim._split.batch == 3
    x = (RNG.standard_normal(sim.input_shapes[0]) * 2).astype(np.float32)
    (a, oa), (b, ob), (c, oc) = _runs(sim, x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert oa is None and ob is None and oc is None
    assert len(sim._split.plans) == min(int(threads), 3)
    one = models.mobilenetv2_like(seed=6, width=0.35, input_size=96, num_classes=10)
    single = Simulator(onnx_mrvl.convert(one).subgraphs[0].binary)
    for i in range(3):                               # each image as a batch-1 run of the same model
        np.testing.assert_array_equal(single.run([x[i:i + 1]])[0], a[i:i + 1])


@pytest.mark.parametrize("bad_image", [0, 2])
def test_an_overflowing_image_gives_the_batch_runs_report(monkeypatch, bad_image):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "2")
    meta, weights = block_program(3, 12, 12)        # on 2 threads image 2 runs alone, on both threads
    weights["b2"] = np.full_like(weights["b2"], 60000.0)
    weights["w2"] = np.full_like(weights["w2"], 0.0)
    sim = Simulator.from_program(meta, weights)
    assert sim._split is not None
    x = RNG.standard_normal(meta["inputs"][0]["shape"]).astype(np.float32)
    x[bad_image] = np.abs(x[bad_image]) + 10000       # only this image's residual sum overflows
    (a, oa), (b, ob), (c, oc) = _runs(sim, x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert oa == ob == oc and oa["name"] == "sum_3"
    assert np.isinf(a[bad_image]).any() and np.isfinite(np.delete(a, bad_image, axis=0)).all()
    with pytest.raises(onnx_mrvl.MrvlRuntimeError):
        sim.run([x], on_overflow="raise")


def test_inf_input_in_one_image_and_no_overflow():
    meta, weights = block_program(2, 8, 8)
    sim = Simulator.from_program(meta, weights)
    x = RNG.standard_normal(meta["inputs"][0]["shape"]).astype(np.float32)
    x[1, 3, 3, 0] = np.inf
    (a, oa), (b, ob), (c, oc) = _runs(sim, x)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    assert oa == ob == oc


def test_not_split_when_weight_bound_or_not_per_image():
    # ResNet-18 at 64x64: ~13 MACs per weight and image (reading the weights per image would dominate)
    sim = Simulator(onnx_mrvl.convert(models.resnet18_like(seed=1, input_size=64, batch=2)).subgraphs[0].binary)
    assert sim._static is not None and sim._split is None
    meta, weights = block_program(1, 8, 8)            # batch 1: nothing to split
    assert Simulator.from_program(meta, weights)._split is None
    meta, weights = block_program(2, 8, 8)            # a constant Sum2D operand that differs per image
    meta["layers"][3] = {"index": 3, "name": "sum_3", "layer_name": "Sum2D", "inputs": [3], "outputs": [4],
                         "params": {"activation": "none"}, "weights": {"operand": "op"}, "origin": ["Add_3"]}
    weights["op"] = RNG.standard_normal((2, 8, 8, 16)).astype(np.float16)
    meta["weights"].append({"name": "op", "shape": [2, 8, 8, 16], "dtype": "float16"})
    sim = Simulator.from_program(meta, weights)
    assert sim._split is None
    x = RNG.standard_normal(meta["inputs"][0]["shape"]).astype(np.float32)
    np.testing.assert_array_equal(sim.run([x])[0], sim._run_dynamic(sim._bind_inputs([x]))[0])


def test_an_error_in_one_image_stops_every_thread_and_reaches_the_caller(monkeypatch):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "2")
    meta, weights = block_program(4, 8, 8)
    sim = Simulator.from_program(meta, weights)
    x = RNG.standard_normal(meta["inputs"][0]["shape"]).astype(np.float32)
    want = sim.run([x])[0]
    calls = []

    def broken(*args):
        calls.append(1)
        raise onnx_mrvl.MrvlRuntimeError("a layer failed")
    for plan in sim._split.plans:                      # whichever thread takes an image fails
        monkeypatch.setattr(plan, "run", broken)
    with pytest.raises(onnx_mrvl.MrvlRuntimeError, match="a layer failed"):
        sim.run([x])
    assert 1 <= len(calls) <= 2                        # each thread stops at its first failure
    monkeypatch.undo()
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "2")
    np.testing.assert_array_equal(sim.run([x])[0], want)


def test_a_forked_child_after_a_split_run_gets_its_own_pool(monkeypatch):
    """A batch split runs on the Python worker pool (parallel.py). A child forked afterwards (the
    conformance harness's workers) has none of those threads: reusing the parent's executor queued
    the child's work on threads that do not exist and hung it. The child must start its own pool."""
    import multiprocessing as mp
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "2")
    res = onnx_mrvl.convert(models.mobilenetv2_like(seed=6, width=0.35, input_size=96, batch=3, num_classes=10))
    sim = Simulator(res.subgraphs[0].binary)
    assert sim._split is not None
    x = (RNG.standard_normal(sim.input_shapes[0])).astype(np.float32)
    want = sim.run([x])[0]                       # the parent's pool threads exist now

    def child(q):
        q.put(Simulator(res.subgraphs[0].binary).run([x])[0])

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,), daemon=True)
    p.start()
    try:
        got = q.get(timeout=60)
    finally:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    np.testing.assert_array_equal(got, want)
