"""A QDQ ``ReduceMean(axes 2, 3, keepdims=1)`` whose QuantizeLinear reads it through data moves
(UperNet / PSPNet pyramid pooling at bin 1 as the dynamo exporter writes it: the mean, a Reshape,
a Gather of one index, then the pair of the 1x1 conv): legalize ``reducemean_to_gap`` puts the
pool's own pair after the pool and reshapes back to the kept ``[N, C, 1, 1]`` (it raised
KeyError 'sy', a crash of the whole conversion); one region, identical to onnxruntime."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")


def _pool_branch(seed: int = 0, c: int = 16) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) / 5).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((8, c, 1, 1)) / 4).astype(np.float32), "w1"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
             numpy_helper.from_array(np.array([1, 1, c, 1, 1], np.int64), "shape5"),
             numpy_helper.from_array(np.array(0, np.int64), "zero")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], "conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], "relu0"),
             helper.make_node("ReduceMean", ["r0", "axes"], ["mean"], "mean", keepdims=1),
             helper.make_node("Reshape", ["mean", "shape5"], ["m5"], "reshape"),
             helper.make_node("Gather", ["m5", "zero"], ["pooled"], "select", axis=0),
             helper.make_node("Conv", ["pooled", "w1"], ["y"], "conv1")]
    g = helper.make_graph(nodes, "pool_branch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_keepdims_mean_read_through_moves_is_one_int8_region(tmp_path, act):
    import onnx_mrvl
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    rng = np.random.default_rng(1)
    feeds = [{"x": (rng.standard_normal((1, 3, 8, 8)) * 1.5).astype(np.float32)} for _ in range(4)]
    src, qpath = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(_pool_branch(), src)
    quantize_static_qdq(src, qpath, feeds, act)
    qm = onnx.load(qpath)
    prod = {o: n for n in qm.graph.node for o in n.output}
    q = next(n for n in qm.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "pooled")
    assert prod["pooled"].op_type == "Gather" and q is not None      # the pair reads the mean through moves
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1
    assert not [d.op_type for d in result.report.cpu_nodes() if d.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    folder = str(tmp_path / "out")
    result.save(folder)
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = (np.random.default_rng(5 + seed).standard_normal((1, 3, 8, 8)) * 1.5).astype(np.float32)
        assert np.array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])
