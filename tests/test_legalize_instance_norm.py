"""Legalization: InstanceNormalization (PyTorch's GroupNorm as both exporters write it: Reshape ->
InstanceNormalization(1, 0) -> Reshape -> Mul -> Add; nn.InstanceNorm alone) becomes a
LayerNormalization over the flattened spatial axis + the per-channel affine, which fuse runs as the
Mrvl LayerNorm: the conv stack stays one region (a wav2vec2-style feature extractor was cut in two)."""
import numpy as np
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, make_model, op_types, run

mk = helper.make_node
R = np.random.default_rng(5)


def _group_norm(rank: int, groups: int, opset: int):
    """Conv -> GroupNorm(groups, 16) as the exporters write it -> Relu; 1-D (audio) or 2-D maps."""
    spatial = [48] if rank == 3 else [6, 8]
    k = [3] * (rank - 2)
    inits = {"w": (R.standard_normal([16, 4] + k) * 0.5).astype(np.float32),
             "gshape": np.array([1, groups, -1], np.int64), "back": np.array([1, 16] + spatial, np.int64),
             "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
             "gamma": (1 + 0.3 * R.standard_normal([16] + [1] * (rank - 2))).astype(np.float32),
             "beta": (0.2 * R.standard_normal([16] + [1] * (rank - 2))).astype(np.float32)}
    nodes = [mk("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=k, pads=[1] * (2 * len(k))),
             mk("Reshape", ["c", "gshape"], ["g"], name="to_groups"),
             mk("InstanceNormalization", ["g", "ones", "zeros"], ["n"], name="inorm", epsilon=1e-5),
             mk("Reshape", ["n", "back"], ["b"], name="from_groups"),
             mk("Mul", ["b", "gamma"], ["m"], name="gamma"), mk("Add", ["m", "beta"], ["a"], name="beta"),
             mk("Relu", ["a"], ["y"], name="relu")]
    return make_model(nodes, [("x", [1, 4] + spatial)], ["y"], inits, opset=opset)


def _instance_norm_4d(opset: int = 17):
    inits = {"w": (R.standard_normal([8, 3, 3, 3]) * 0.5).astype(np.float32),
             "s": (1 + 0.5 * R.standard_normal(8)).astype(np.float32),
             "b": (0.3 * R.standard_normal(8)).astype(np.float32)}
    nodes = [mk("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             mk("InstanceNormalization", ["c", "s", "b"], ["y"], name="inorm", epsilon=1e-3)]
    return make_model(nodes, [("x", [1, 3, 10, 12])], ["y"], inits, opset=opset)


@pytest.mark.parametrize("rank,groups", [(3, 16), (3, 4), (4, 4)])
@pytest.mark.parametrize("opset", [13, 17])
def test_group_norm_becomes_layer_norm(rank, groups, opset):
    m = _group_norm(rank, groups, opset)
    out, log = legalize_and_compare(m)
    assert "InstanceNormalization" not in op_types(out) and "LayerNormalization" in op_types(out)
    assert [names for rule, names, _ in log if rule == "instance_norm"] == [["inorm"]]
    ln = next(n for n in out.graph.node if n.op_type == "LayerNormalization")
    assert [a.i for a in ln.attribute if a.name == "axis"] == [-1]


def test_instance_norm_affine_and_epsilon():
    """scale / B per channel kept as Mul / Add, epsilon carried: within fp32 of onnxruntime."""
    out, _ = legalize_and_compare(_instance_norm_4d())
    ops = op_types(out)
    assert "InstanceNormalization" not in ops and {"Mul", "Add", "LayerNormalization"} <= set(ops)
    ln = next(n for n in out.graph.node if n.op_type == "LayerNormalization")
    assert [round(a.f, 6) for a in ln.attribute if a.name == "epsilon"] == [1e-3]


@pytest.mark.parametrize("rank,groups", [(3, 16), (4, 4)])
def test_group_norm_runs_in_one_region(rank, groups, tmp_path):
    m = _group_norm(rank, groups, 17)
    res = onnx_mrvl.convert(m)
    assert len(res.report.regions) == 1 and list(res.report.cpu_nodes()) == []
    f = feeds_for(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)[0]
    ref = run(m, f)[0]
    assert np.max(np.abs(got - ref)) <= 1e-2 * np.max(np.abs(ref))
