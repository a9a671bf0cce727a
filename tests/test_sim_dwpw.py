"""Depthwise conv + the 1x1 conv that reads it, run as one banded pass (sim/plan_fusion.py,
``dw_pw`` in _native_conv.c): the same bits and overflow reports as the layers one by one."""
import numpy as np
import pytest

import onnx_mrvl
import onnx_mrvl.sim.batch_split as batch_split_mod
import onnx_mrvl.sim.plan_fusion as plan_fusion
from onnx_mrvl.sim import Simulator, native
from onnx_mrvl.testing import models

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
RNG = np.random.default_rng(17)


def _t(tid, shape):
    return {"id": tid, "name": f"t{tid}", "shape": list(shape), "layout": "NHWC",
            "nbytes": int(np.prod(shape)) * 2, "placement": "ocm"}


def _conv(idx, src, dst, k, cin, cout, groups=1, stride=1, act="none", params=None):
    p = {"strides": [stride, stride], "padding": [k // 2] * 4, "dilation": [1, 1], "groups": groups,
         "kernel_size": [k, k], "channels": cout, "activation": act}
    if params:
        p["activation_params"] = params
    return {"index": idx, "name": f"conv_{idx}", "layer_name": "Conv2D", "inputs": [src], "outputs": [dst],
            "params": p, "weights": {"kernel": f"w{idx}", "bias": f"b{idx}"}, "origin": [f"Conv_{idx}"]}


def block_program(n, h, w, c=16, e=48, out=16, stride=1, residual=True, scale=0.3):
    """x -> 1x1 expand (clamp) -> depthwise 3x3 (clamp) -> 1x1 project [-> Sum2D with x]: a MobileNetV2 block."""
    oh, ow = -(-h // stride), -(-w // stride)
    residual = residual and stride == 1 and out == c
    layers = [_conv(0, 0, 1, 1, c, e, act="clamp", params={"min": 0.0, "max": 6.0}),
              _conv(1, 1, 2, 3, e, e, groups=e, stride=stride, act="clamp", params={"min": 0.0, "max": 6.0}),
              _conv(2, 2, 3, 1, e, out)]
    shapes = {0: (n, h, w, c), 1: (n, h, w, e), 2: (n, oh, ow, e), 3: (n, oh, ow, out)}
    last = 3
    if residual:
        layers.append({"index": 3, "name": "sum_3", "layer_name": "Sum2D", "inputs": [3, 0], "outputs": [4],
                       "params": {"activation": "none"}, "weights": {}, "origin": ["Add_3"]})
        shapes[4] = (n, oh, ow, out)
        last = 4
    weights = {}
    for layer in layers:
        if layer["layer_name"] == "Conv2D":
            p = layer["params"]
            k, g, co = p["kernel_size"][0], p["groups"], p["channels"]
            cin = shapes[layer["inputs"][0]][3]
            weights[f"w{layer['index']}"] = (RNG.standard_normal((co, k, k, cin // g)) * scale).astype(np.float16)
            weights[f"b{layer['index']}"] = (RNG.standard_normal(co) * 0.1).astype(np.float32)
    meta = {"format": "onnx_mrvl.program", "program_version": 1, "name": "block", "batch_size": n,
            "quantize": "float16", "arch": {"num_tiles": 4},
            "inputs": [{"name": "x", "tensor": 0, "shape": list(shapes[0]), "layout": "NHWC"}],
            "outputs": [{"name": "y", "tensor": last, "shape": list(shapes[last]), "layout": "NHWC"}],
            "tensors": [_t(t, s) for t, s in shapes.items()],
            "weights": [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in weights.items()],
            "layers": layers}
    return meta, weights


@pytest.fixture(autouse=True)
def _no_batch_split(monkeypatch):
    monkeypatch.setattr(batch_split_mod, "ENABLED", False)     # batch > 1 here tests the batch plan itself


def _static_vs_layers(sim, x):
    a = sim.run([x])[0]
    oa = sim.last_overflow
    b = sim._run_dynamic(sim._bind_inputs([x]))[0]
    np.testing.assert_array_equal(a, b)
    assert oa == sim.last_overflow
    return a, oa


# the last three: several bands on one thread, which runs them bottom-up (dw_pw's reverse): 5 bands
# at 112 x 40, 2 at 96 x 64 / 2, 3 over two images
@pytest.mark.parametrize("n,h,w,stride,residual", [(1, 14, 14, 1, True), (1, 9, 23, 2, False), (2, 20, 11, 1, True),
                                                   (3, 5, 5, 1, False), (4, 33, 17, 2, False), (1, 112, 40, 1, True),
                                                   (1, 96, 64, 2, False), (2, 96, 64, 2, False)])
@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_fused_block_same_bits_as_layer_by_layer(monkeypatch, n, h, w, stride, residual, threads):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    meta, weights = block_program(n, h, w, stride=stride, residual=residual)
    sim = Simulator.from_program(meta, weights)
    assert sim._static.dwpw_fused == 1
    kinds = [int(r[0]) for seg in sim._static.segments if seg[0] == "native" for r in seg[2]]
    assert 10 in kinds and 11 in kinds
    x = (RNG.standard_normal(meta["inputs"][0]["shape"]) * 2).astype(np.float32)
    y, overflow = _static_vs_layers(sim, x)
    assert overflow is None and np.isfinite(y).all()
    monkeypatch.setattr(plan_fusion, "ENABLED", False)              # the same plan unfused: the same bits
    plain = Simulator.from_program(meta, weights)
    assert plain._static.dwpw_fused == 0
    np.testing.assert_array_equal(plain.run([x])[0], y)


@pytest.mark.parametrize("which", ["depthwise", "project", "sum"])
def test_overflow_in_a_fused_pair_is_reported_at_its_layer(monkeypatch, which):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", "2")
    meta, weights = block_program(1, 24, 24)
    if which == "depthwise":                     # unclamped, so that its overflow is not clipped away
        meta["layers"][1]["params"]["activation"] = "none"
        weights["w1"] = np.full_like(weights["w1"], 8000.0)
    elif which == "project":
        weights["w2"] = np.full_like(weights["w2"], 3000.0)
    else:                          # the projection finite, the residual sum beyond fp16
        weights["w2"] = np.full_like(weights["w2"], 0.0)
        weights["b2"] = np.full_like(weights["b2"], 60000.0)
    sim = Simulator.from_program(meta, weights)
    assert sim._static.dwpw_fused == 1
    x = np.abs(RNG.standard_normal(meta["inputs"][0]["shape"])).astype(np.float32) + 1
    if which == "sum":
        x += 10000
    _, overflow = _static_vs_layers(sim, x)
    assert overflow is not None
    assert overflow["name"] == {"depthwise": "conv_1", "project": "conv_2", "sum": "sum_3"}[which]


def test_fused_pair_memory_and_converted_mobilenet():
    res = onnx_mrvl.convert(models.mobilenetv2_like(seed=4, width=0.35, input_size=64))
    sim = Simulator(res.subgraphs[0].binary)
    plan = sim._static
    assert plan.dwpw_fused >= 5 and plan.dwpw_fused == len(plan.dwpw)
    lo = {t: v.ctypes.data for t, v in plan.views.items()}
    hi = {t: lo[t] + v.nbytes for t, v in plan.views.items()}
    for i, j in plan.dwpw.items():       # the 1x1's output never overwrites the depthwise input or output
        x, mid, out = plan.steps[i].ins[0], plan.steps[i].out, plan.steps[j].out
        for t in (x, mid):
            assert hi[t] <= lo[out] or hi[out] <= lo[t]
    x = (RNG.standard_normal(sim.input_shapes[0]) * 2).astype(np.float32)
    _static_vs_layers(sim, x)


def test_run_steps_kind_10_alone_runs_the_depthwise_and_kind_11_the_conv():
    meta, weights = block_program(1, 10, 10, residual=False)
    sim = Simulator.from_program(meta, weights)
    seg = [s for s in sim._static.segments if s[0] == "native"][0]
    recs, ok = seg[2], seg[3]
    x = RNG.standard_normal(meta["inputs"][0]["shape"]).astype(np.float32)
    want = sim.run([x])[0].copy()
    sim._static.views[3][...] = 0
    lib = native.lib()
    assert [int(r[0]) for r in recs] == [1, 10, 11]
    for k in (1, 2):                     # one record at a time (the expand conv's output is still there)
        lib.run_steps(recs[k:k + 1].ctypes.data, 1, ok[k:k + 1].ctypes.data, 2)
    np.testing.assert_array_equal(sim._static.views[3], want)
