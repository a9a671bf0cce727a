"""Hand-built programs (docs/program.md) on the Simulator: numbers, errors, overflow, threads, CLI."""
import copy
import logging
import threading

import numpy as np
import pytest

from onnx_mrvl.errors import ArtifactError, CompileError, MrvlRuntimeError
from onnx_mrvl.sim import Simulator

RNG = np.random.default_rng(7)


def _tensor(tid, shape, layout="NHWC"):
    return {"id": tid, "name": f"t{tid}", "shape": list(shape), "layout": layout,
            "nbytes": int(np.prod(shape)) * 2, "placement": "ocm"}


def make_program(c_out=4, classes=10):
    """NCHW [1,2,8,8] -> layout_transform -> Conv2D 3x3 (relu) -> Maxpool2D 2x2 -> Flatten -> FC."""
    weights = {
        "conv_w": (RNG.standard_normal((c_out, 3, 3, 2)) * 0.4).astype(np.float16),
        "conv_b": (RNG.standard_normal(c_out) * 0.1).astype(np.float32),
        "fc_w": (RNG.standard_normal((classes, 4 * 4 * c_out)) * 0.2).astype(np.float16),
        "fc_b": (RNG.standard_normal(classes) * 0.1).astype(np.float32),
    }
    layers = [
        {"index": 0, "name": "lt_0", "layer_name": "layout_transform", "inputs": [0], "outputs": [1],
         "params": {"src_layout": "NCHW", "dst_layout": "NHWC"}, "weights": {}, "origin": ["input"]},
        {"index": 1, "name": "conv_1", "layer_name": "Conv2D", "inputs": [1], "outputs": [2],
         "params": {"strides": [1, 1], "padding": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1,
                    "kernel_size": [3, 3], "channels": c_out, "activation": "relu"},
         "weights": {"kernel": "conv_w", "bias": "conv_b"}, "origin": ["Conv_0", "Relu_1"],
         "macs": 8 * 8 * c_out * 18, "dram_bytes": 2 * c_out * 18},
        {"index": 2, "name": "pool_2", "layer_name": "Maxpool2D", "inputs": [2], "outputs": [3],
         "params": {"kernel_size": [2, 2], "strides": [2, 2], "padding": [0, 0, 0, 0], "ceil_mode": 0,
                    "dilation": [1, 1]}, "weights": {}, "origin": ["MaxPool_2"]},
        {"index": 3, "name": "flat_3", "layer_name": "Flatten", "inputs": [3], "outputs": [4],
         "params": {"shape": [1, 16 * c_out]}, "weights": {}, "origin": ["Flatten_3"]},
        {"index": 4, "name": "fc_4", "layer_name": "FC", "inputs": [4], "outputs": [5],
         "params": {"activation": "none"}, "weights": {"kernel": "fc_w", "bias": "fc_b"},
         "origin": ["Gemm_4"], "macs": classes * 16 * c_out, "dram_bytes": 2 * classes * 16 * c_out},
    ]
    meta = {
        "format": "onnx_mrvl.program", "program_version": 1, "name": "mrvl_region_0", "batch_size": 1,
        "quantize": "float16", "arch": {"num_tiles": 4},
        "inputs": [{"name": "image", "tensor": 0, "shape": [1, 2, 8, 8], "layout": "NCHW"}],
        "outputs": [{"name": "logits", "tensor": 5, "shape": [1, classes], "layout": "NC"}],
        "tensors": [_tensor(0, (1, 2, 8, 8), "NCHW"), _tensor(1, (1, 8, 8, 2)), _tensor(2, (1, 8, 8, c_out)),
                    _tensor(3, (1, 4, 4, c_out)), _tensor(4, (1, 16 * c_out), "NC"), _tensor(5, (1, classes), "NC")],
        "weights": [{"name": k, "shape": list(v.shape), "dtype": v.dtype.name} for k, v in weights.items()],
        "layers": layers,
    }
    return meta, weights


def reference(meta, weights, x_nchw):
    """Plain float32 numpy, no fp16 anywhere."""
    x = x_nchw.transpose(0, 2, 3, 1).astype(np.float32)
    w = weights["conv_w"].astype(np.float32)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.zeros((1, 8, 8, w.shape[0]), np.float32)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nhwc,oc->nhwo", xp[:, i:i + 8, j:j + 8, :], w[:, i, j, :])
    conv = np.maximum(conv + weights["conv_b"], 0)
    pool = conv.reshape(1, 4, 2, 4, 2, -1).max(axis=(2, 4))
    return pool.reshape(1, -1) @ weights["fc_w"].astype(np.float32).T + weights["fc_b"]


def test_program_matches_float32_reference_within_fp16_tolerance():
    meta, weights = make_program()
    sim = Simulator.from_program(meta, weights)
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    (y,) = sim.run([x])
    ref = reference(meta, weights, x)
    assert y.shape == (1, 10) and y.dtype == np.float32 and y.flags.c_contiguous
    err = np.abs(y - ref).max()
    assert err <= 1e-2 * np.abs(ref).max(), err
    assert err > 0             # fp16 inside: not bit-equal to a float32 computation
    (y2,) = sim.run({"image": x})
    np.testing.assert_array_equal(y, y2)
    assert sim.last_overflow is None
    assert sim.last_perf is sim.perf and len(sim.perf.layers) == 5


def test_input_is_not_mutated_and_is_rounded_to_fp16_on_entry():
    meta, weights = make_program()
    sim = Simulator.from_program(meta, weights)
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    keep = x.copy()
    (y,) = sim.run([x])
    np.testing.assert_array_equal(x, keep)
    (y16,) = sim.run([x.astype(np.float16).astype(np.float32)])
    np.testing.assert_array_equal(y, y16)


@pytest.mark.parametrize("bad, match", [
    (np.zeros((1, 2, 8, 9), np.float32), r"input 'image' has shape \[1, 2, 8, 9\], expected \[1, 2, 8, 8\]"),
    (np.zeros((1, 2, 8, 8), np.float64), r"input 'image' must be float32 with shape \[1, 2, 8, 8\]"),
])
def test_wrong_input_raises_naming_program_and_input(bad, match):
    sim = Simulator.from_program(*make_program())
    with pytest.raises(MrvlRuntimeError, match=match) as exc:
        sim.run([bad])
    assert "mrvl_region_0" in str(exc.value)
    with pytest.raises(MrvlRuntimeError, match="missing input"):
        sim.run({})


def test_unknown_layer_and_missing_weight_and_param_are_named():
    meta, weights = make_program()
    m = copy.deepcopy(meta)
    m["layers"][2]["layer_name"] = "Softmax2D"
    with pytest.raises(CompileError, match=r"\[pool_2\] unknown layer_name 'Softmax2D'.*MaxPool_2"):
        Simulator.from_program(m, weights)
    w = dict(weights)
    del w["conv_w"]
    with pytest.raises(ArtifactError, match=r"conv_1.*'conv_w'.*not in the binary.*Conv_0, Relu_1"):
        Simulator.from_program(meta, w)
    m = copy.deepcopy(meta)
    del m["layers"][2]["params"]["kernel_size"]
    with pytest.raises(CompileError, match=r"pool_2.*missing param 'kernel_size'"):
        Simulator.from_program(m, weights)
    m = copy.deepcopy(meta)
    m["layers"][1]["params"]["kernel_size"] = [5, 5]
    with pytest.raises(CompileError, match="does not match the kernel shape"):
        Simulator.from_program(m, weights)


def test_overflow_is_recorded_with_layer_and_origin(caplog):
    meta, weights = make_program()
    weights = dict(weights)
    weights["fc_w"] = np.full_like(weights["fc_w"], 60000)
    weights["conv_b"] = -np.abs(weights["conv_b"])      # zero input -> relu gives 0 -> finite logits
    sim = Simulator.from_program(meta, weights)
    x = np.abs(RNG.standard_normal((1, 2, 8, 8))).astype(np.float32) + 1
    with caplog.at_level(logging.WARNING, logger="onnx_mrvl.sim"):
        (y,) = sim.run([x])
    assert np.isinf(y).any()
    ov = sim.last_overflow
    assert ov["name"] == "fc_4" and ov["origin"] == ["Gemm_4"] and ov["layer_name"] == "FC"
    warnings = [r for r in caplog.records if "overflow" in r.getMessage()]
    assert len(warnings) == 1 and "fc_4" in warnings[0].getMessage()
    sim.run([np.zeros((1, 2, 8, 8), np.float32)])     # conv 0 -> logits = fc_b: finite again
    assert sim.last_overflow is None


def test_sum_concat_resize_avgpool_program_and_memory_freeing():
    """Two inputs, residual Sum2D, Concat, Resize, Avgpool, GlobalAvgpool: checked against numpy."""
    t = [_tensor(0, (1, 4, 4, 3)), _tensor(1, (1, 4, 4, 3)), _tensor(2, (1, 4, 4, 3)), _tensor(3, (1, 4, 4, 6)),
         _tensor(4, (1, 8, 8, 6)), _tensor(5, (1, 4, 4, 6)), _tensor(6, (1, 1, 1, 6)), _tensor(7, (1, 4, 4, 3))]
    op = np.array([0.5, -1.0, 2.0], np.float16)
    layers = [
        {"name": "add", "layer_name": "Sum2D", "inputs": [0, 1], "outputs": [2], "params": {"activation": "relu"}},
        {"name": "mul", "layer_name": "Mul2D", "inputs": [2], "outputs": [7], "weights": {"operand": "op"},
         "params": {}},
        {"name": "cat", "layer_name": "Concat", "inputs": [7, 0], "outputs": [3], "params": {"axis": 3}},
        {"name": "up", "layer_name": "Resize", "inputs": [3], "outputs": [4], "params": {"scales": [2, 2]}},
        {"name": "avg", "layer_name": "Avgpool2D", "inputs": [4], "outputs": [5],
         "params": {"kernel_size": [2, 2], "strides": [2, 2], "padding": [0, 0, 0, 0], "count_include_pad": 0}},
        {"name": "gap", "layer_name": "GlobalAvgpool2D", "inputs": [5], "outputs": [6], "params": {}},
    ]
    meta = {"name": "r", "inputs": [{"name": "a", "tensor": 0, "shape": [1, 4, 4, 3]},
                                    {"name": "b", "tensor": 1, "shape": [1, 4, 4, 3]}],
            "outputs": [{"name": "y", "tensor": 6, "shape": [1, 1, 1, 6]},
                        {"name": "cat", "tensor": 3, "shape": [1, 4, 4, 6]}],
            "tensors": t, "layers": layers}
    sim = Simulator.from_program(meta, {"op": op})
    assert sorted(sim._free_after[2]) == [0, 7] and sim._free_after[1] == [2]
    assert all(3 not in f and 6 not in f for f in sim._free_after)      # outputs are kept
    a, b = (RNG.standard_normal((1, 4, 4, 3)).astype(np.float32) for _ in range(2))
    y, cat = sim.run({"b": b, "a": a})
    m = np.maximum(a + b, 0) * op.astype(np.float32)
    ref_cat = np.concatenate([m, a], axis=3)
    np.testing.assert_allclose(cat, ref_cat, rtol=2e-3, atol=1e-3)
    np.testing.assert_allclose(y, ref_cat.mean(axis=(1, 2), keepdims=True), rtol=3e-3, atol=2e-3)


def test_thread_safety_identical_outputs():
    meta, weights = make_program(c_out=8)
    sim = Simulator.from_program(meta, weights)
    xs = [RNG.standard_normal((1, 2, 8, 8)).astype(np.float32) for _ in range(4)]
    want = [sim.run([x])[0] for x in xs]
    results, errors = [], []

    def worker(k):
        try:
            for i in range(20):
                j = (k + i) % 4
                results.append((j, sim.run([xs[j]])[0]))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 160
    for j, y in results:
        np.testing.assert_array_equal(y, want[j])


def test_packed_binary_and_cli(tmp_path, capsys):
    artifact = pytest.importorskip("onnx_mrvl.artifact")
    from onnx_mrvl.cli.main import main

    meta, weights = make_program()
    data = artifact.pack(meta, weights)
    path = tmp_path / "region.bin"
    path.write_bytes(data)
    x = RNG.standard_normal((1, 2, 8, 8)).astype(np.float32)
    want = Simulator.from_program(meta, weights).run([x])[0]
    np.testing.assert_array_equal(Simulator(data).run([x])[0], want)
    np.testing.assert_array_equal(Simulator(str(path)).run([x])[0], want)
    np.testing.assert_array_equal(Simulator(artifact.load(data)).run([x])[0], want)

    x.tofile(tmp_path / "in.bin")
    rc = main(["sim", "--model-binary", str(path), "--inputs", str(tmp_path / "in.bin"),
               "-o", str(tmp_path / "out" / "res"), "--perf-debug"])
    out = capsys.readouterr().out
    assert rc == 0
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out" / "res-0.bin", dtype=np.float32).reshape(1, 10), want)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "res-0.npy"), want)
    assert "logits: shape=[1, 10]" in out and "conv_1" in out and "TOTAL" in out
    np.savez(tmp_path / "in.npz", image=x)
    assert main(["sim", "-m", str(path), "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "z"),
                 "--json"]) == 0
    assert '"logits"' in capsys.readouterr().out
    np.zeros(7, np.float32).tofile(tmp_path / "short.bin")
    assert main(["sim", "-m", str(path), "--inputs", str(tmp_path / "short.bin")]) == 3
    assert "has 28 bytes, expected 512" in capsys.readouterr().err


def test_blas_policy_single_thread_unless_user_chose(monkeypatch):
    import os

    from onnx_mrvl.sim import blas
    Simulator.from_program(*make_program())
    n = blas.get_blas_threads()
    if n is None:
        pytest.skip("numpy's OpenBLAS is not reachable through ctypes")
    if not (os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
            or os.environ.get("ONNX_MRVL_SIM_BLAS_THREADS")):
        assert n == 1
    before = n
    monkeypatch.setattr(blas, "_done", False)
    monkeypatch.setenv("ONNX_MRVL_SIM_BLAS_THREADS", "0")         # 0: leave it alone
    assert blas.set_blas_threads(2)
    blas.configure_once()
    assert blas.get_blas_threads() == 2
    blas.set_blas_threads(before)
