"""int8 Conv2D / FC with a weight zero point (asymmetric int8 / uint8 weights, per tensor or per
channel; docs/fusion.md "int8", docs/simulator.md "int8 layers"): structure, the Nodes-JSON /
binary fields, the perf model's row sum, the reference body, and exact numbers against
onnxruntime's run of the same QDQ model."""
from __future__ import annotations

import base64
import itertools
import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.errors import CompileError
from onnx_mrvl.sim.int8 import Int8Conv2D, Int8FC
from onnx_mrvl.testing.qdq_weight_zp import asym_weight_layer
from onnx_mrvl.testing.ort_sessions import exact_session

CASES = list(itertools.product(["MatMul", "Gemm", "Conv", "ConvGroups"], ["int8", "uint8"], ["int8", "uint8"],
                               [True, False]))


def _nodes(folder: str):
    nodes, consts = [], {}
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            nodes += [n for n in json.load(open(os.path.join(folder, f)))["nodes"] if n["op"] == "tvm_op"]
        if f.endswith("-consts.json"):
            consts.update(json.load(open(os.path.join(folder, f))))
    return nodes, consts


@pytest.mark.parametrize("op, act, wtype, per_channel", CASES)
def test_asymmetric_weights_make_one_int8_layer_identical_to_onnxruntime(tmp_path, op, act, wtype, per_channel):
    """The QDQ layer is one int8 Conv2D / FC with its weight zero points (uint8 codes stored as
    q - 128 with z - 128), in one region, every output element equal to onnxruntime's."""
    m, x = asym_weight_layer(op, act, wtype, per_channel, seed=3)
    result = onnx_mrvl.convert(m)
    assert len(result.report.regions) == 1
    assert not [d for d in result.report.cpu_nodes() if d.op_type in ("Conv", "MatMul", "Gemm")]
    assert "int8" in result.report["layer"].reason
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes, consts = _nodes(folder)
    (layer,) = [n for n in nodes if n["attrs"].get("precision") == ["int8"] and "kernel_dtype" in n["attrs"]]
    assert layer["attrs"]["kernel_dtype"] == ["int8"]
    zp_name = layer["attrs"]["weight_zero_point_const_name"][0]
    assert layer["attrs"]["weight_zero_point_layout"] == ["---O"]
    zp = np.frombuffer(base64.b64decode(consts[zp_name]["data_base64"]), np.int32)
    assert consts[zp_name]["dtype"] == "int32" and zp.size == (24 if op in ("MatMul", "Gemm") else 16)
    assert zp.min() >= -128 and zp.max() <= 127 and np.any(zp != 0)
    if not per_channel:
        assert np.all(zp == zp[0])
    for seed in range(3):
        xs = x if seed == 0 else (x + np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32) * 0.3)
        a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": xs})[0]
        b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {"x": xs})[0]
        assert np.array_equal(a, b), f"{np.count_nonzero(a != b)} of {a.size} differ, max {np.abs(a - b).max()}"


@pytest.mark.parametrize("op, act, wtype", [("MatMul", "int8", "uint8"), ("Gemm", "uint8", "int8"),
                                             ("Conv", "int8", "int8"), ("ConvGroups", "uint8", "uint8")])
def test_int8_in_layers_take_weight_zero_points(tmp_path, op, act, wtype):
    """Without an output pair the layer is int8 in / fp16 out with its weight zero points: within
    the fp16 bound of onnxruntime's fp32 run (docs/simulator.md "int8-in layers")."""
    m, x = asym_weight_layer(op, act, wtype, True, seed=5, output_q=False)
    result = onnx_mrvl.convert(m)
    d = result.report["layer"]
    assert d.placement == "accelerator" and "int8 in, fp16 out" in d.reason, d.reason
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes, _ = _nodes(folder)
    (layer,) = [n for n in nodes if n["attrs"].get("precision") == ["int8_in"]]
    assert "weight_zero_point_const_name" in layer["attrs"]
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {"x": x})[0]
    # docs/simulator.md "int8-in layers": half an fp16 ulp plus the fp32 summations' slack
    assert np.all(np.abs(a - b) <= 2.0 ** -11 * np.abs(a) + 2.0 ** -24 + 1e-6 * np.abs(a).max())


def test_binary_carries_the_zero_points_and_the_row_sum_cost(tmp_path):
    """The region binary holds ``weight_zero_point`` (int32 [O]) beside ``weight_scale``; the perf
    model's MACs include the row sum (one all-ones column per group: ``zero_point_macs``) and a
    multiply-subtract per output (vector ops)."""
    from onnx_mrvl.artifact import load
    m, _ = asym_weight_layer("ConvGroups", "int8", "int8", True, seed=1)
    folder = str(tmp_path / "out")
    onnx_mrvl.convert(m).save(folder)
    (binary,) = [f for f in os.listdir(folder) if f.endswith(".bin")]
    b = load(os.path.join(folder, binary))
    (layer,) = [lay for lay in b.meta["layers"] if lay["layer_name"] == "Conv2D"]
    zp = np.asarray(b.weights[layer["weights"]["weight_zero_point"]])
    assert zp.dtype == np.int32 and zp.reshape(-1).size == 16 and np.any(zp != 0)
    # the 1-D conv: 16 outputs in 4 groups: the row sum is 4 all-ones columns beside the 16
    assert layer["zero_point_macs"] * 16 == (layer["macs"] - layer["zero_point_macs"]) * 4
    shape = next(t["shape"] for t in b.meta["tensors"] if t["id"] == layer["outputs"][0])
    assert layer["vector_ops"] == int(np.prod(shape))
    # a reader before program_version 2 would drop the zero points: the program says 2
    assert b.meta["program_version"] == 2
    # the container checks the field (a negative count is refused)
    from onnx_mrvl.artifact import pack
    from onnx_mrvl.emit.compile import build_program
    from onnx_mrvl.errors import ArtifactError
    sg = onnx_mrvl.convert(m).subgraphs[0]
    meta, weights = build_program(sg.nodes_json, sg.consts_json)
    pack(meta, weights)
    next(lay for lay in meta["layers"] if "zero_point_macs" in lay)["zero_point_macs"] = -1
    with pytest.raises(ArtifactError, match="zero_point_macs"):
        pack(meta, weights)


def test_fused_model_runs_in_plain_onnxruntime():
    """The reference body (Q -> DQ of X, DQ of W with its zero points, the float body, Q -> DQ of
    Y) reproduces the QDQ model in plain onnxruntime."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    for op, wtype in (("Gemm", "uint8"), ("Conv", "int8")):
        m, x = asym_weight_layer(op, "uint8", wtype, True, seed=4)
        legal = legalize(m).model
        fused = fuse(getattr(legal, "model", legal)).model
        (layer,) = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type in ("Conv2D", "FC")]
        assert any(a.name == "weight_zero_points" for a in layer.attribute)
        # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
        # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
        a = exact_session(m.SerializeToString()).run(None, {"x": x})[0]
        b = exact_session(fused.SerializeToString()).run(None, {"x": x})[0]
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["FC", "Conv2D"])
def test_simulator_sums_x_times_w_minus_zero_point_exactly(kind):
    """acc[o] = sum (q_x - z_x)(q_w - z_w[o]) + b[o] in exact integers, requantized as MLAS:
    against a direct int64 computation."""
    rng = np.random.default_rng(0)
    o, k = 8, 40
    kernel = rng.integers(-128, 128, (o, k) if kind == "FC" else (o, 1, 1, k)).astype(np.int8)
    zp = rng.integers(-128, 128, o).astype(np.int32)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    ws = (rng.random(o) * 0.01 + 0.001).astype(np.float32)
    params = dict(in_scale=0.05, in_zero_point=3, in_dtype="int8", out_scale=2.0, out_zero_point=-4, out_dtype="int8")
    x = (rng.standard_normal((5, k)) * 3).astype(np.float32)
    if kind == "FC":
        layer = Int8FC(kernel, bias, ws, params, "none", None, weight_zero_point=zp)
        y, _ = layer.apply(x)
    else:
        layer = Int8Conv2D(kernel, bias, ws, params, [1, 1], [0, 0, 0, 0], [1, 1], 1, weight_zero_point=zp)
        y, _ = layer.apply(x.reshape(5, 1, 1, k))
        y = y.reshape(5, o)
    qx = np.clip(np.rint(x / np.float32(0.05)) + 3, -128, 127).astype(np.int64) - 3
    acc = qx @ (kernel.reshape(o, k).astype(np.int64) - zp[:, None]).T + bias
    m = ((np.float32(0.05) * ws) / np.float32(2.0)).astype(np.float32)
    want = (np.clip(np.rint(acc.astype(np.float32) * m) - 4, -128, 127) + 4).astype(np.float32) * np.float32(2.0)
    assert np.array_equal(y, want)
    with pytest.raises(ValueError, match="int8 range"):
        Int8FC(kernel.reshape(o, k), bias, ws, params, "none", None, weight_zero_point=zp * 0 + 200)


def test_compile_refuses_zero_points_outside_int8(tmp_path):
    """A Nodes-JSON weight zero point outside [-128, 127] is refused by the compile step."""
    from onnx_mrvl.emit.compile import compile_json
    m, _ = asym_weight_layer("MatMul", "int8", "int8", True, seed=2)
    sg = onnx_mrvl.convert(m).subgraphs[0]
    nodes, consts = sg.nodes_json, sg.consts_json
    compile_json(nodes, consts)    # as written: fine
    (layer,) = [n for n in nodes["nodes"] if n["op"] == "tvm_op" and n["attrs"].get("precision") == ["int8"]]
    name = layer["attrs"]["weight_zero_point_const_name"][0]
    c2 = {k: dict(v) for k, v in consts.items()}
    c2[name].update(data_base64=base64.b64encode(np.full(24, 200, np.int32).tobytes()).decode(), max="200")
    with pytest.raises(CompileError, match="outside the int8 range"):
        compile_json(nodes, c2)
