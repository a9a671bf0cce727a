"""A fused Conv2D + Sum2D writes its output over its residual when nothing reads the residual after it
(sim/static_plan.py ``_inplace_residuals``): the same bits and overflow reports as layer by layer,
and no sharing where it would be wrong (the residual read later, the conv's own input as the
residual, a conv whose K spans several k blocks, a program input or output)."""
import numpy as np
import pytest

from onnx_mrvl.sim import Simulator, native
from test_sim_static import assert_same, both

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
RNG = np.random.default_rng(23)


def _t(tid, shape):
    return {"id": tid, "name": f"t{tid}", "shape": list(shape), "layout": "NHWC",
            "nbytes": int(np.prod(shape)) * 2, "placement": "ocm"}


def _conv(idx, src, dst, k, c, act="relu"):
    return {"index": idx, "name": f"conv_{idx}", "layer_name": "Conv2D", "inputs": [src], "outputs": [dst],
            "params": {"strides": [1, 1], "padding": [k // 2] * 4, "dilation": [1, 1], "groups": 1,
                       "kernel_size": [k, k], "channels": c, "activation": act},
            "weights": {"kernel": f"w{idx}", "bias": f"b{idx}"}, "origin": [f"Conv_{idx}"]}


def _sum(idx, a, b, dst):
    return {"index": idx, "name": f"sum_{idx}", "layer_name": "Sum2D", "inputs": [a, b], "outputs": [dst],
            "params": {"activation": "relu"}, "weights": {}, "origin": [f"Add_{idx}"]}


def program(c=16, k=1, later_reader=False, batch=1):
    """x -> conv0 -> t1; sum2(conv1(t1), t1) -> t3 (residual = the conv's input: not in place);
    sum5(conv4(conv3(t3)), t3) -> t6 (t3 read last here: in place, unless ``later_reader``)."""
    shape = (batch, 9, 14, c)
    layers = [_conv(0, 0, 1, 1, c), _conv(1, 1, 2, k, c, "none"), _sum(2, 2, 1, 3),
              _conv(3, 3, 4, 1, c), _conv(4, 4, 5, k, c, "none"), _sum(5, 5, 3, 6)]
    out = 6
    if later_reader:                                  # t3 read again after sum5
        layers.append(_sum(6, 6, 3, 7))
        out = 7
    weights = {}
    for layer in layers:
        if layer["layer_name"] == "Conv2D":
            kk = layer["params"]["kernel_size"][0]
            weights[f"w{layer['index']}"] = (RNG.standard_normal((c, kk, kk, c)) / np.sqrt(kk * kk * c)).astype(np.float16)
            weights[f"b{layer['index']}"] = (RNG.standard_normal(c) * 0.1).astype(np.float32)
    meta = {"format": "onnx_mrvl.program", "program_version": 1, "name": "inplace", "batch_size": batch,
            "quantize": "float16", "arch": {"num_tiles": 4},
            "inputs": [{"name": "x", "tensor": 0, "shape": list(shape), "layout": "NHWC"}],
            "outputs": [{"name": "y", "tensor": out, "shape": list(shape), "layout": "NHWC"}],
            "tensors": [_t(i, shape) for i in range(out + 1)],
            "weights": [{"name": n, "shape": list(v.shape), "dtype": v.dtype.name} for n, v in weights.items()],
            "layers": layers}
    return meta, weights


def _plan(sim):
    return sim._split._plan(0) if getattr(sim, "_split", None) else sim._static


def _shares(plan, a, b):
    return plan.views[a].ctypes.data == plan.views[b].ctypes.data


def _disjoint(plan, a, b):
    va, vb = plan.views[a], plan.views[b]
    return va.ctypes.data + va.nbytes <= vb.ctypes.data or vb.ctypes.data + vb.nbytes <= va.ctypes.data


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("c, k, later, batch, inplace", [
    (16, 1, False, 1, True), (40, 3, False, 1, True), (16, 1, True, 1, False),
    (64, 3, False, 1, False),                           # K = 576: two k blocks
    (16, 1, False, 2, True)])
def test_inplace_residual_same_bits_and_sound_sharing(monkeypatch, threads, c, k, later, batch, inplace):
    monkeypatch.setenv("ONNX_MRVL_SIM_THREADS", threads)
    sim = Simulator.from_program(*program(c, k, later, batch))
    plan = sim._static
    assert plan is not None
    assert _shares(plan, 6, 3) == inplace              # sum5's output over its residual t3
    assert _disjoint(plan, 6, 4)                       # never over the fused conv's input (t4)
    assert _disjoint(plan, 3, 1)                       # sum2: its residual t1 is conv1's input
    x = [(RNG.standard_normal(plan.views[0].shape) * 2).astype(np.float32)]
    assert_same(both(sim, x))
    assert_same(both(sim, x))                          # the reused arena gives the same again


def test_inplace_residual_overflow_reported_like_layer_by_layer():
    meta, weights = program(16, 1)
    weights["w4"] = np.full_like(weights["w4"], 3000.0)    # conv4 overflows, its sum too
    sim = Simulator.from_program(meta, weights)
    assert _shares(sim._static, 6, 3)
    (a, oa), pair_b = both(sim, [np.abs(RNG.standard_normal((1, 9, 14, 16))).astype(np.float32) + 5])
    assert oa is not None and oa["name"] == "conv_4"
    assert_same(((a, oa), pair_b))


def test_k_block_size_matches_the_c_kernel():
    """The plan's bound on K (native.KC) is the C kernel's KC: a smaller C block would leave partial
    sums in an output that is also the residual."""
    import re
    src = open(native._SRC).read()
    assert int(re.search(r"^#define KC (\d+)", src, re.M).group(1)) == native.KC
