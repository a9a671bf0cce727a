"""Residual Conv2D + Sum2D pairs run as one native step (sim/residual_steps.py): same bits, same reports."""
import numpy as np
import pytest

import onnx_mrvl.sim.simulator as simulator_mod
from onnx_mrvl.sim import Simulator, native

pytestmark = pytest.mark.skipif(not native.on(), reason=f"native kernels off: {native.why_disabled()}")
RNG = np.random.default_rng(11)
SHAPE = (1, 6, 7, 16)


def _t(tid, shape=SHAPE):
    return {"id": tid, "name": f"t{tid}", "shape": list(shape), "layout": "NHWC",
            "nbytes": int(np.prod(shape)) * 2, "placement": "ocm"}


def _conv(idx, src, dst, k, act="relu"):
    return {"index": idx, "name": f"conv_{idx}", "layer_name": "Conv2D", "inputs": [src], "outputs": [dst],
            "params": {"strides": [1, 1], "padding": [k // 2] * 4, "dilation": [1, 1], "groups": 1,
                       "kernel_size": [k, k], "channels": 16, "activation": act},
            "weights": {"kernel": f"w{idx}", "bias": f"b{idx}"}, "origin": [f"Conv_{idx}"],
            "macs": 42 * 16 * 16 * k * k, "dram_bytes": 512 * k * k}


def _sum(idx, a, b, dst, act="relu"):
    return {"index": idx, "name": f"sum_{idx}", "layer_name": "Sum2D", "inputs": [a, b], "outputs": [dst],
            "params": {"activation": act}, "weights": {}, "origin": [f"Add_{idx}"]}


def program(extra_reader=False, scale=0.2):
    """x -> conv0 -> conv1 -> sum2(conv1, x) -> [conv3, conv4] -> sum5(conv3, conv4): two residual
    pairs; in the second the other branch (conv4) comes after the conv to fuse (conv3)."""
    layers = [_conv(0, 0, 1, 3), _conv(1, 1, 2, 1, act="none"), _sum(2, 2, 0, 3),
              _conv(3, 3, 4, 3, act="clamp"), _conv(4, 3, 5, 1), _sum(5, 4, 5, 6, act="leaky_relu")]
    layers[3]["params"]["activation_params"] = {"min": -1.0, "max": 1.5}
    layers[5]["params"]["activation_params"] = {"alpha": 0.1}
    outputs = [{"name": "y", "tensor": 6, "shape": list(SHAPE), "layout": "NHWC"}]
    if extra_reader:                                     # conv1's output is read by a second layer
        layers.append(_sum(6, 2, 6, 7, act="none"))
        outputs = [{"name": "y", "tensor": 7, "shape": list(SHAPE), "layout": "NHWC"}]
    weights = {}
    for layer in layers:
        if layer["layer_name"] == "Conv2D":
            k = layer["params"]["kernel_size"][0]
            weights[f"w{layer['index']}"] = (RNG.standard_normal((16, k, k, 16)) * scale).astype(np.float16)
            weights[f"b{layer['index']}"] = (RNG.standard_normal(16) * 0.1).astype(np.float32)
    meta = {"format": "onnx_mrvl.program", "program_version": 1, "name": "residual", "batch_size": 1,
            "quantize": "float16", "arch": {"num_tiles": 4},
            "inputs": [{"name": "x", "tensor": 0, "shape": list(SHAPE), "layout": "NHWC"}],
            "outputs": outputs, "tensors": [_t(i) for i in range(8)],
            "weights": [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in weights.items()],
            "layers": layers}
    return meta, weights


def unfused(monkeypatch, meta, weights):
    monkeypatch.setattr(simulator_mod, "fuse_residuals", lambda steps, *a: steps)
    sim = Simulator.from_program(meta, weights)
    monkeypatch.undo()
    return sim


def test_fused_steps_give_the_same_bits_as_the_layers_one_by_one(monkeypatch):
    meta, weights = program()
    fused, plain = Simulator.from_program(meta, weights), unfused(monkeypatch, meta, weights)
    assert len(plain._layers) == 6 and len(fused._layers) == 4
    assert [s.inner[0].name for s in fused._layers if s.inner] == ["conv_1", "conv_3"]
    x = (RNG.standard_normal(SHAPE) * 2).astype(np.float32)
    a, b = fused.run([x])[0], plain.run([x])[0]
    np.testing.assert_array_equal(a, b)
    assert fused.last_overflow is None and np.isfinite(a).all()


def test_not_fused_when_the_conv_output_has_another_reader_or_is_an_output(monkeypatch):
    meta, weights = program(extra_reader=True)
    sim = Simulator.from_program(meta, weights)
    assert [s.inner[0].name for s in sim._layers if s.inner] == ["conv_3"]       # conv_1 is read twice
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(sim.run([x])[0], unfused(monkeypatch, meta, weights).run([x])[0])
    meta, weights = program()
    meta["outputs"].append({"name": "mid", "tensor": 4, "shape": list(SHAPE), "layout": "NHWC"})
    sim = Simulator.from_program(meta, weights)               # conv_3 is an output: the other branch fuses
    assert [s.inner[0].name for s in sim._layers if s.inner] == ["conv_1", "conv_4"]
    outs = sim.run([x])
    for a, b in zip(outs, unfused(monkeypatch, meta, weights).run([x])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("where", ["conv", "sum"])
def test_overflow_is_reported_at_the_layer_that_overflowed(monkeypatch, where):
    meta, weights = program()
    x = RNG.standard_normal(SHAPE).astype(np.float32)
    if where == "conv":
        weights["w0"] = np.full_like(weights["w0"], 1.0)               # conv_0: ~1500, finite
        weights["w1"] = np.full_like(weights["w1"], 300.0)             # conv_1 overflows by itself
        x = np.abs(x) + 10
    else:
        x = np.full(SHAPE, 40000.0, np.float32)                        # the residual makes sum_2 overflow
        weights["w0"] = np.zeros_like(weights["w0"])
        weights["b1"] = np.full_like(weights["b1"], 30000.0)
        weights["w1"] = np.zeros_like(weights["w1"])
    fused, plain = Simulator.from_program(meta, weights), unfused(monkeypatch, meta, weights)
    assert len(fused._layers) == 4
    a, b = fused.run([x])[0], plain.run([x])[0]
    np.testing.assert_array_equal(a, b)
    assert fused.last_overflow == plain.last_overflow
    assert fused.last_overflow["name"] == ("conv_1" if where == "conv" else "sum_2")
    assert fused.last_overflow["index"] == (1 if where == "conv" else 2)
