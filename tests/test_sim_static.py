"""The static plan (sim/static_plan.py): the same bits as layer-by-layer execution, sound memory."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from onnx_mrvl.testing import models
import onnx_mrvl
from onnx_mrvl.sim import Simulator, native
from test_sim_fusion import program as residual_program

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
RNG = np.random.default_rng(5)


def both(sim, x):
    """(static outputs + overflow, layer-by-layer outputs + overflow) on the same inputs."""
    assert sim._static is not None
    a = sim.run(x)
    oa = sim.last_overflow
    b = sim._run_dynamic(sim._bind_inputs(x))
    return (a, oa), (b, sim.last_overflow)


def assert_same(pair):
    (a, oa), (b, ob) = pair
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert u.shape == v.shape and u.dtype == v.dtype
        np.testing.assert_array_equal(u, v)
    assert oa == ob


MODELS = {
    "mobilenetv2": lambda: models.mobilenetv2_like(seed=1, width=0.35, input_size=64),
    "resnet18": lambda: models.resnet18_like(seed=1, input_size=64, batch=2),
    "yolo (SiLU, Resize, Concat)": lambda: models.yolo_like(seed=1, input_size=64),
    "detection": lambda: models.detection_like(seed=1, input_size=64),
    "fashion_mnist": lambda: models.fashion_mnist_cnn(seed=1),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_converted_models_static_equals_layer_by_layer(name):
    res = onnx_mrvl.convert(MODELS[name]())
    assert res.subgraphs
    for sg in res.subgraphs:
        sim = Simulator(sg.binary)
        assert sim._static is not None and sim._static.native_steps > 0
        x = [(RNG.standard_normal(s) * 2).astype(np.float32) for s in sim.input_shapes]
        assert_same(both(sim, x))
        assert_same(both(sim, x))                  # the reused arena gives the same again


def test_residual_program_and_overflow_reports_match():
    meta, weights = residual_program()
    sim = Simulator.from_program(meta, weights)
    x = [RNG.standard_normal((1, 6, 7, 16)).astype(np.float32)]
    assert_same(both(sim, x))
    weights["w0"] = np.full_like(weights["w0"], 1.0)
    weights["w1"] = np.full_like(weights["w1"], 300.0)
    sim = Simulator.from_program(meta, weights)
    (a, oa), pair_b = both(sim, [np.abs(x[0]) + 10])
    assert oa["name"] == "conv_1"
    assert_same(((a, oa), pair_b))


def test_reshapes_of_a_residual_written_in_place_share_its_buffer():
    """sum_5 (conv_3 fused) writes over conv_4's output; the Reshape chain after it (a window
    partition: torchvision MaxViT) aliases that buffer too (was KeyError: it got no memory)."""
    meta, weights = residual_program()
    flat = (1, 42, 16)
    meta["tensors"] += [{**meta["tensors"][6], "id": 7, "name": "t7", "shape": list(flat)},
                        {**meta["tensors"][6], "id": 8, "name": "t8"}]
    meta["layers"] += [{"index": 6, "name": "flat", "layer_name": "Reshape", "inputs": [6], "outputs": [7],
                        "params": {"shape": list(flat)}, "weights": {}, "origin": ["Reshape_6"]},
                       {"index": 7, "name": "back", "layer_name": "Reshape", "inputs": [7], "outputs": [8],
                        "params": {"shape": [1, 6, 7, 16]}, "weights": {}, "origin": ["Reshape_7"]}]
    meta["outputs"] = [{"name": "y", "tensor": 8, "shape": [1, 6, 7, 16], "layout": "NHWC"}]
    sim = Simulator.from_program(meta, weights)
    plan = sim._static
    assert plan is not None
    ptr = {t: v.ctypes.data for t, v in plan.views.items()}
    assert ptr[6] == ptr[7] == ptr[8] == ptr[5]                # in place over the residual, reshapes alias it
    x = [RNG.standard_normal((1, 6, 7, 16)).astype(np.float32)]
    assert_same(both(sim, x))


def test_memory_plan_reuses_buffers_and_never_overlaps_a_step_with_its_inputs():
    res = onnx_mrvl.convert(models.resnet18_like(seed=2, input_size=64))
    sim = Simulator(res.subgraphs[0].binary)
    plan = sim._static
    tensor_bytes = sum(v.nbytes for t, v in plan.views.items() if t not in plan.aliases)
    assert plan.arena_bytes < tensor_bytes / 2          # liveness reuse
    lo = {t: v.ctypes.data for t, v in plan.views.items()}
    hi = {t: lo[t] + v.nbytes for t, v in plan.views.items()}
    for e in plan.entries:
        if e.step.out in plan.aliases:
            continue
        for t in e.step.ins:
            assert hi[t] <= lo[e.step.out] or hi[e.step.out] <= lo[t], (e.step.spec.name, t)


def test_concurrent_runs_share_one_arena_safely():
    res = onnx_mrvl.convert(models.mobilenetv2_like(seed=3, width=0.35, input_size=64))
    sim = Simulator(res.subgraphs[0].binary)
    xs = [RNG.standard_normal(sim.input_shapes[0]).astype(np.float32) for _ in range(4)]
    want = [sim._run_dynamic(sim._bind_inputs([x]))[0] for x in xs]
    errors = []

    def worker(k):
        for _ in range(10):
            y = sim.run([xs[k]])[0]
            if not np.array_equal(y, want[k]):
                errors.append(k)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_python_fallback_steps_and_env_switch(monkeypatch):
    # Concat and Resize without their copy records (static_records.COPIES) run as Python steps
    from onnx_mrvl.sim import static_records
    res = onnx_mrvl.convert(models.yolo_like(seed=4, input_size=64))
    monkeypatch.setattr(static_records, "COPIES", False)
    sim = Simulator(res.subgraphs[0].binary)
    assert sim._static.native_steps < len(sim._static.entries)
    x = [(RNG.standard_normal(s) * 2).astype(np.float32) for s in sim.input_shapes]
    assert_same(both(sim, x))
    code = ("import numpy as np; from onnx_mrvl.sim import Simulator; "
            "from onnx_mrvl.sim.simulator import Simulator as S; import sys; "
            "s = Simulator(sys.stdin.buffer.read()); print(s._static is None)")
    env = dict(os.environ, ONNX_MRVL_SIM_STATIC="0")
    out = subprocess.run([sys.executable, "-c", code], input=res.subgraphs[0].binary, capture_output=True,
                         env=env, check=True).stdout.decode().strip()
    assert out == "True"


@pytest.mark.parametrize("value", [1.0, 70000.0, np.inf])
def test_input_rounded_inside_its_transpose_reports_like_layer_by_layer(value):
    from test_sim_program import make_program
    meta, weights = make_program()
    sim = Simulator.from_program(meta, weights)
    assert any(e.input is not None for e in sim._static.entries)      # NCHW input -> layout_transform fused
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    x[0, 1, 3, 4] = value
    (a, oa), (b, ob) = both(sim, [x])
    np.testing.assert_array_equal(a[0], b[0])
    assert oa == ob
    assert (oa is not None and oa["name"] == "input:image") == (value == 70000.0)
    xs = np.asfortranarray(x)                        # not C-contiguous: copied, then the same
    np.testing.assert_array_equal(sim.run([xs])[0], a[0])


def test_transpose_round_of_rgb_planes_keeps_nan_inf_and_signed_zero():
    """3 channels are interleaved 16 pixels at a time in registers (the rest one by one): every
    bit as numpy's round and transpose, NaN payload, -0 and both flags included."""
    lib = native.lib()
    for shape in [(1, 3, 224, 224), (2, 3, 5, 40), (1, 3, 3, 5)]:
        x = (RNG.standard_normal(shape) * 1e3).astype(np.float32)
        flat = x.reshape(-1)
        flat[::97], flat[5::101], flat[3::50] = np.inf, np.nan, -0.0
        with np.errstate(over="ignore", invalid="ignore"):
            want = np.ascontiguousarray(x.astype(np.float16).astype(np.float32).transpose(0, 2, 3, 1))
        for nthreads in (1, 2):
            out = np.empty_like(want)
            bits = lib.transpose_round(x.ctypes.data, out.ctypes.data, shape[0], 3, shape[2] * shape[3], nthreads)
            np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
            assert bits == 0


def test_transpose_round_threads_and_flags():
    lib = native.lib()
    for shape in [(1, 3, 224, 224), (2, 5, 7, 9), (1, 1, 1, 1), (2, 3, 7, 9), (3, 3, 17, 17)]:
        x = (RNG.standard_normal(shape) * 3e4).astype(np.float32)
        x.reshape(-1)[3 % x.size] = 70000.0
        want = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).copy()
        from onnx_mrvl.sim.fp16 import round_fp16_
        ok = round_fp16_(want)
        for nthreads in (1, 2, 3):
            out = np.empty_like(want)
            bits = lib.transpose_round(x.ctypes.data, out.ctypes.data, shape[0], shape[1], shape[2] * shape[3], nthreads)
            np.testing.assert_array_equal(out, want)
            assert bits == (1 | (2 if ok else 0))


def test_reshape_of_a_residual_conv_output_shares_the_residual_buffer():
    """A residual conv (Conv2D + Sum2D written over its residual's buffer) whose output a Squeeze
    aliases (DCCRN's complex conv: conv_r(x_r) + (-conv_i(x_i)) -> [B, C, F, 1] -> squeeze): the
    alias follows the output into the residual's buffer (it had no buffer: KeyError at load)."""
    from test_fuse_exports import Net
    n = Net(21)
    a = n.op("Relu", [n.op("Conv", ["x", n.w(8, 4, 1, 1)], kernel_shape=[1, 1])])
    r = n.op("Conv", ["x", n.w(8, 4, 1, 1)], kernel_shape=[1, 1])
    b = n.op("Conv", [a, n.w(8, 8, 1, 1)], kernel_shape=[1, 1])
    c = n.op("Add", [b, r], "residual")
    s = n.op("Squeeze", [c, n.const(np.array([3], np.int64))], "squeeze")
    y = n.op("Mul", [s, n.const(np.float32(0.5))], "scale")
    m = n.model([("x", [1, 4, 16, 1])], [y])
    res = onnx_mrvl.convert(m)
    assert len(res.subgraphs) == 1
    sim = Simulator(res.subgraphs[0].binary)
    x = RNG.standard_normal((1, 4, 16, 1)).astype(np.float32)
    assert_same(both(sim, [x]))
