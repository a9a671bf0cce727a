"""int8 Lookup and int8 Concat layers (docs/fusion.md "int8"): element-wise QDQ groups (SiLU with
Q/DQ around each op, LeakyRelu, HardSigmoid, a standalone per-channel BatchNorm) as 256-code tables,
and a Concat of differently quantized inputs, against onnxruntime's execution of the QDQ model."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import onnx_mrvl
from onnx_mrvl.testing.models import GraphBuilder
from onnx_mrvl.testing.ort_sessions import exact_session

pytest.importorskip("onnxruntime.quantization")
from tests.test_int8_qdq import _agreement, _output_scale, quantize  # noqa: E402


def act_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv -> SiLU; conv -> LeakyRelu; Concat; standalone BN -> Relu; conv -> HardSigmoid -> conv."""
    g = GraphBuilder(seed, 13)
    a = g.silu(g.conv("input", 3, 8, 3, "ca"), "sa")
    b = g.node("LeakyRelu", [g.conv("input", 3, 8, 1, "cb")], "lb", alpha=0.1)
    x = g.relu(g.bn(g.node("Concat", [a, b], "cat", axis=1), 16, "bn"), "r")
    x = g.node("HardSigmoid", [g.conv(x, 16, 8, 3, "cc")], "hs", alpha=0.2, beta=0.5)
    g.conv(x, 8, 8, 1, "cd")
    g.nodes[-1].output[0] = "output"
    return g.model("act_cnn", [("input", TensorProto.FLOAT, [1, 3, 16, 16])],
                   [("output", TensorProto.FLOAT, [1, 8, 16, 16])])


def _layers(folder):
    out = []
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            out += [n["attrs"] for n in json.load(open(os.path.join(folder, f)))["nodes"] if n["op"] == "tvm_op"]
    return out


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_lookup_and_concat_match_onnxruntime(tmp_path, act):
    qpath = quantize(act_cnn(seed=1), str(tmp_path / "q.onnx"), True, act)
    result = onnx_mrvl.convert(qpath)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]   # no Q/DQ left
    folder = str(tmp_path / "out")
    result.save(folder)
    layers = _layers(folder)
    kinds = [a["layer_name"][0] for a in layers if a.get("precision") == ["int8"]]
    assert kinds.count("Lookup") == 4 and kinds.count("Concat") == 1, kinds   # SiLU, LeakyRelu, BN+Relu, HardSigmoid
    cat = next(a for a in layers if a["layer_name"] == ["Concat"])
    assert len(cat["in_scales"]) == len(cat["in_zero_points"]) == 2
    per_channel = [a for a in layers if a["layer_name"] == ["Lookup"] and a["channels"] == ["16"]]
    assert len(per_channel) == 1 and per_channel[0]["table_const"]["dtype"] == "int32"
    worst, frac = _agreement(qpath, folder, n_inputs=4)
    assert worst == 0.0 and frac == 0.0, (worst, frac)


def test_lookup_reference_bodies_run_in_plain_onnxruntime(tmp_path):
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = quantize(act_cnn(seed=2), str(tmp_path / "q.onnx"), True, "s8")
    q = onnx.load(qpath)
    legal = legalize(q)
    fused = fuse(getattr(legal, "model", legal)).model
    ops = [n.op_type for n in fused.graph.node if n.domain == "mrvl"]
    assert "Lookup" in ops and "Concat" in ops
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32) * 1.5
    # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
    # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
    a = exact_session(qpath).run(None, {"input": x})[0]
    b = exact_session(fused.SerializeToString()).run(None, {"input": x})[0]
    assert np.abs(a - b).max() <= _output_scale(q, "output") * (1 + 1e-3)


def test_int8_lookup_simulator_gathers_the_table():
    from onnx_mrvl.sim.int8_lookup import Int8Lookup
    table = np.stack([np.arange(-128, 128)[::-1], np.clip(np.arange(-128, 128) * 2, -128, 127)]).astype(np.int32)
    params = dict(in_scale=0.5, in_zero_point=3, in_dtype="int8", out_scale=0.25, out_zero_point=-1, out_dtype="int8")
    lut = Int8Lookup(table, params)
    codes = np.array([[-128, 0], [5, 127], [3, 10]])
    x = ((codes - 3) * 0.5).astype(np.float32)[None]            # [1, 3, 2]: channel last
    y, ok = lut.apply(x)
    want = (table[[0, 1], codes + 128] + 1) * 0.25
    assert ok and np.array_equal(y[0], want.astype(np.float32))
    with pytest.raises(ValueError):
        Int8Lookup(table.astype(np.int64), params)


def test_lookup_perf_model_counts_vector_ops_and_int8_bytes(tmp_path):
    """Perf model: a Lookup costs one vector-unit operation per element (target.VECTOR_LOWERINGS)
    and reads / writes one byte per element; no MACs."""
    from onnx_mrvl.artifact import load
    from onnx_mrvl.costmodel import perf_report, vector_ops
    qpath = quantize(act_cnn(seed=3), str(tmp_path / "q.onnx"), True, "s8")
    meta = load(onnx_mrvl.convert(qpath).subgraphs[0].binary).meta
    shapes = {t["id"]: t["shape"] for t in meta["tensors"]}
    rep = perf_report(meta)
    lookups = [(lay, row) for lay, row in zip(meta["layers"], rep.layers) if lay["layer_name"] == "Lookup"]
    assert len(lookups) == 4
    for lay, row in lookups:
        out = meta["tensors"][lay["outputs"][0]]
        assert out["dtype"] == "int8" and out["nbytes"] == int(np.prod(out["shape"]))
        assert lay["macs"] == 0 and vector_ops(lay, shapes) == int(np.prod(out["shape"]))
