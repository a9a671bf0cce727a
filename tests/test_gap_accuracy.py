"""A global average pool over a large map against onnxruntime and the fp16 baseline.

legalize's gap_split used to cut every GlobalAveragePool above the 16-wide pool window into a chain of
AveragePools, each rounding its partial means to fp16; where the values cancel (squeeze-excite and
attention means of signed features: MediaPipe selfie segmentation's 64x64 / 128x128 maps) those
roundings are large against the final mean (2-6x the fp16 baseline). A map of at most
``max_pool_kernel ** 2`` per side is now one GlobalAvgPool2D (fp32 accumulation over the pool unit's
windows, one divide, one fp16 rounding: docs/fusion.md "Global average pools")."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx_mrvl
from onnx_mrvl.inspection.fp16_baseline import run_fp16_baseline
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, op_types
from onnx_mrvl.target import Target
from test_fuse_exports import run_ort


def _se_mean(c, h, w):
    """x -> GlobalAveragePool -> 1x1 Conv (a squeeze-excite's squeeze and first conv)."""
    rng = np.random.default_rng(7)
    wt = helper.make_tensor("w", TensorProto.FLOAT, [c, c, 1, 1],
                            (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32).ravel())
    g = helper.make_graph(
        [helper.make_node("GlobalAveragePool", ["x"], ["m"], name="gap"),
         helper.make_node("Conv", ["m", "w"], ["y"], name="fc")], "se",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1])], [wt])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _signed_features(c, h, w, seed):
    """Smooth signed feature maps (a few low-frequency waves per channel, amplitude ~4, small mean):
    a 16x16 window's mean is about the local value, ~100x the whole map's mean, so each partial
    mean a chain of fp16 pools rounds costs far more than the input's rounding (which averages out)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    x = np.zeros((1, c, h, w))
    for _ in range(3):
        f = rng.uniform(0.5, 3, (c, 2))
        ph = rng.uniform(0, 2 * np.pi, (c, 1, 1))
        x[0] += rng.uniform(1, 2, (c, 1, 1)) * np.sin(2 * np.pi * (f[:, :1, None] * yy + f[:, 1:, None] * xx) + ph)
    return (x + rng.standard_normal((1, c, h, w)) * 0.1).astype(np.float32)


@pytest.mark.parametrize("hw", [(64, 64), (128, 128), (96, 40)])
def test_large_map_mean_is_one_pool_within_the_fp16_baseline(hw, tmp_path):
    c = 32
    m = _se_mean(c, *hw)
    res = onnx_mrvl.convert(m)
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert op_types(legalize(m).model) == ["GlobalAveragePool", "Conv"]     # one pool, no chain
    assert res.report.decisions["gap"].placement == "accelerator"
    worst = []
    for seed in range(3):
        x = _signed_features(c, *hw, seed)
        ref = run_ort(m, {"x": x})[0]
        base = run_fp16_baseline(m, {"x": x})["y"]
        got = sess.run(None, {"x": x})[0]
        ours, b = float(np.max(np.abs(got - ref))), float(np.max(np.abs(base - ref)))
        worst.append((ours, b))
        assert ours <= b, (seed, ours, b)
    assert max(o for o, _ in worst) <= 1e-2 * float(np.max(np.abs(ref)))


@pytest.mark.parametrize("hw,stages", [((56, 56), None), ((256, 200), None), ((64, 48), [(4, 4)]),
                                        ((512, 16), [(4, 1)] * 3)])
def test_gap_split_cuts_only_what_one_global_pool_cannot_take(hw, stages):
    """Default target (window 16): a map up to 256 per side stays one GlobalAveragePool. With a
    window of 4 (global pool up to 16 per side) window stages come first, then one global pool."""
    target = Target() if stages is None else Target(max_pool_kernel=4)
    m = _se_mean(4, *hw)
    out, log = legalize_and_compare(m, target)
    pools = [n for n in out.graph.node if n.op_type in ("AveragePool", "GlobalAveragePool")]
    assert [n.op_type for n in pools] == ["AveragePool"] * len(stages or []) + ["GlobalAveragePool"]
    for n, st in zip(pools, stages or []):
        k = [a for a in n.attribute if a.name == "kernel_shape"][0].ints
        assert list(k) == list(st)
    assert op_types(out)[-1] == "Conv"


def test_large_map_global_pool_same_bits_native_and_numpy(monkeypatch):
    """The native kernel (pixel-order fp32 adds) and numpy (the same order along the strided axis)
    give the same fp16 means on a 200x256 map."""
    from onnx_mrvl.sim import native, pooling
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 200, 256, 40)) * 4).astype(np.float16).astype(np.float32)
    a, ok_a = pooling.global_avgpool_layer(x)
    monkeypatch.setattr(native, "on", lambda: False)
    b, ok_b = pooling.global_avgpool_layer(x)
    assert ok_a and ok_b and np.array_equal(a, b)
    ref = x.astype(np.float64).mean(axis=(1, 2), keepdims=True)
    assert np.max(np.abs(b - ref)) <= np.max(np.abs(ref)) * 2.0 ** -11     # one fp16 rounding


@pytest.mark.parametrize("length", [25, 17, 128])
def test_mean_over_a_long_axis_of_a_3d_tensor_is_one_global_pool(length):
    """ReduceMean over the last axis of [N, C, L] (a time mean): one GlobalAveragePool over the
    [N, C, 1, L] view instead of a chain of windows (17: no chain existed, it was left on the CPU)."""
    from onnx import helper as h
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"], name="relu"),
                      h.make_node("ReduceMean", ["r"], ["y"], name="mean", axes=[2], keepdims=0)], "m",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, length])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    out, log = legalize_and_compare(m)
    ops = op_types(out)
    assert "GlobalAveragePool" in ops and "AveragePool" not in ops and "ReduceMean" not in ops, ops
