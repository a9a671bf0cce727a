"""legalize's group_norm (InstanceNormalization / GroupNormalization -> LayerNormalization over the
[N, G, L] view + per-channel Mul / Add): exact in fp32 against onnxruntime on the original model
(1e-5 of max|ref|), no norm op left, one region, the simulator within the fp16 bound (1e-2)."""
from __future__ import annotations


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import arch_wav2vec as W

NORMS = {"InstanceNormalization", "GroupNormalization"}


def _norm_conv(op: str, opset: int, shape, groups: int = 0, affine_size: int = 0, seed: int = 0) -> onnx.ModelProto:
    """x -> Conv 1x1 -> norm op -> Conv 1x1 (the convs make it a region)."""
    r = np.random.default_rng(seed)
    c = shape[1]
    k = [1] * (len(shape) - 2)
    size = affine_size or c
    inits = [nh.from_array((r.standard_normal((c, c) + tuple(k)) * 0.3).astype(np.float32), "w1"),
             nh.from_array((r.standard_normal((c, c) + tuple(k)) * 0.3).astype(np.float32), "w2"),
             nh.from_array((1 + 0.2 * r.standard_normal(size)).astype(np.float32), "s"),
             nh.from_array((0.1 * r.standard_normal(size)).astype(np.float32), "b")]
    attrs = {"epsilon": 1e-5}
    if op == "GroupNormalization":
        attrs["num_groups"] = groups
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv1", kernel_shape=k),
             helper.make_node(op, ["h", "s", "b"], ["n"], name="norm", **attrs),
             helper.make_node("Conv", ["n", "w2"], ["y"], name="conv2", kernel_shape=k)]
    g = helper.make_graph(nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 17 else 10
    return m


CASES = {
    "instance_norm_3d": lambda: _norm_conv("InstanceNormalization", 17, [1, 8, 40]),
    "instance_norm_4d": lambda: _norm_conv("InstanceNormalization", 13, [1, 8, 6, 7]),
    "group_norm_op21": lambda: _norm_conv("GroupNormalization", 21, [1, 8, 6, 7], groups=4),
    "group_norm_op18_per_group": lambda: _norm_conv("GroupNormalization", 18, [1, 8, 30], groups=2, affine_size=2),
    "wav2vec2_frontend_torch": lambda: W.frontend(),
    "wav2vec2_frontend_op21": lambda: W.frontend(norm="op"),
}


def _feeds(m, seed=0):
    r = np.random.default_rng(seed)
    return {i.name: r.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in m.graph.input}


@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_becomes_layernorm_and_one_region(name, tmp_path):
    m = CASES[name]()
    try:
        ref_sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:   # noqa: BLE001  (onnxruntime without that opset's kernel)
        pytest.skip(f"onnxruntime cannot run the original: {e}")
    feeds = _feeds(m)
    ref = ref_sess.run(None, feeds)[0]
    res = legalize(m)
    assert not NORMS & {n.op_type for n in res.model.graph.node}
    assert "LayerNormalization" in {n.op_type for n in res.model.graph.node}
    assert any(rule == "group_norm" for rule, _, _ in res.report.applied)
    got = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    conv = onnx_mrvl.convert(m)
    assert len(conv.subgraphs) == 1
    assert not [d for d in conv.report.cpu_nodes() if d.op_type in NORMS]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


def test_non_constant_scale_is_left_with_reason():
    m = _norm_conv("InstanceNormalization", 17, [1, 8, 40])
    m.graph.input.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, [8]))
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "s"))
    res = legalize(m)
    assert "InstanceNormalization" in {n.op_type for n in res.model.graph.node}
    assert ("group_norm", "norm", "scale or bias is not a constant of one value per channel") in res.report.skipped


def _poolformer_block(shape, seed=0) -> onnx.ModelProto:
    """Conv 1x1 -> GroupNorm(1) as torch.onnx writes it (Reshape [0, 1, -1] -> InstanceNormalization
    -> Reshape(Shape) -> Mul -> Add) -> PoolFormer's token mixer ``pool(x) - x`` -> Conv 1x1."""
    r = np.random.default_rng(seed)
    c = shape[1]
    inits = [nh.from_array((r.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32), "w1"),
             nh.from_array((r.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32), "w2"),
             nh.from_array(np.array([0, 1, -1], np.int64), "view"),
             nh.from_array(np.ones(1, np.float32), "ones"), nh.from_array(np.zeros(1, np.float32), "zeros"),
             nh.from_array((1 + 0.2 * r.standard_normal((c, 1, 1))).astype(np.float32), "s"),
             nh.from_array((0.1 * r.standard_normal((c, 1, 1))).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"], name="conv1"),
             helper.make_node("Reshape", ["h", "view"], ["v"]),
             helper.make_node("InstanceNormalization", ["v", "ones", "zeros"], ["vn"], name="norm", epsilon=1e-5),
             helper.make_node("Shape", ["h"], ["hs"]),
             helper.make_node("Reshape", ["vn", "hs"], ["n0"]),
             helper.make_node("Mul", ["n0", "s"], ["n1"]), helper.make_node("Add", ["n1", "b"], ["n"]),
             helper.make_node("AveragePool", ["n"], ["p"], kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=0),
             helper.make_node("Sub", ["p", "n"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "poolformer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_group_norm_wider_than_a_row_runs_in_blocked_passes(tmp_path):
    """GroupNorm(1) over C*H*W = 64*20*20 = 25600 values (PoolFormer), above the one-pass row of
    max_channels (8192): the Mrvl LayerNorm in blocked passes (target.NORM_BLOCKED_LOWERING), one
    region, within the fp16 bound; charged 8 + 2 vector ops per element in the compile step and the
    partitioner alike."""
    from onnx_mrvl.artifact import load
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.split.cost import vector_ops
    from onnx_mrvl.target import Target
    m = _poolformer_block([1, 64, 20, 20])
    feeds = _feeds(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    conv = onnx_mrvl.convert(m)
    assert len(conv.subgraphs) == 1 and not conv.report.cpu_nodes(), [d.op_type for d in conv.report.cpu_nodes()]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()
    layer = next(li for li in load(conv.subgraphs[0].binary).meta["layers"] if li["layer_name"] == "LayerNorm")
    assert layer["vector_ops"] == 25600 * (8 + 2)
    fused = fuse(legalize(_poolformer_block([1, 64, 20, 20]))).model
    node = next(n for n in fused.graph.node if n.op_type == "LayerNorm")
    assert vector_ops(GraphIndex(fused), node) == layer["vector_ops"]
    res = fuse(legalize(_poolformer_block([1, 64, 20, 20])), Target(max_norm_features=8192))
    d = next(d for d in res.decisions.values() if d.op_type == "LayerNormalization")
    assert d.placement == "cpu" and "25600 features exceed the limit 8192" in d.reason
