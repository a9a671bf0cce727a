"""split() on its own reverts Mrvl nodes left outside every region in place: standard ONNX, NCHW,
no transposes beyond the ones a region's NHWC boundary needs."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onnx_mrvl.testing.models import detection_like, mobilenetv2_like, tiny_cnn
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.split import split
from onnx_mrvl.split.deploy import is_subgraph
from test_split_strategies import ATOL, RTOL, branchy_model, chain_model

EVERY_MRVL_OP = ["Conv2D", "FC", "Sum2D", "Mul2D", "MaxPool2D", "AvgPool2D", "GlobalAvgPool2D", "Concat",
                 "Reshape", "Flatten", "Squeeze", "Resize", "LayoutTransform"]


def _fused(model):
    return fuse(legalize(model)).model


def _compare(original, deployable, seed=0):
    onnx.checker.check_model(deployable)
    rng = np.random.default_rng(seed)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in original.graph.input}
    want = ort.InferenceSession(original.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(deployable.SerializeToString()).run(None, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _mobilenet_small():
    return mobilenetv2_like(width=0.25, input_size=32)   # residual adds, depthwise, 1x1 spatial tail


@pytest.mark.parametrize("build", [tiny_cnn, _mobilenet_small, detection_like])
def test_reverting_everything_gives_back_the_plain_nchw_model(build):
    original = build()
    r = split(_fused(original), exclude=EVERY_MRVL_OP)
    assert r.regions == [] and r.macs_offloaded == 0 and r.macs_total > 0
    assert not any(n.domain == "mrvl" for n in r.model.graph.node)
    assert _ops(r.model).count("Transpose") <= _ops(original).count("Transpose")   # none added
    assert len(r.model.graph.node) <= len(original.graph.node)
    _compare(original, r.model)


def test_single_reverts_the_tail_with_boundary_transposes_only():
    original = branchy_model()
    r = split(_fused(original), partition="single", reference=True)
    assert len(r.regions) == 1
    ops = _ops(r.model)
    # the region's NHWC outputs feeding the reverted tail: r3 for the Add, and the Softsign (a CPU op
    # fuse runs on the stored NHWC data, expecting c2 on the accelerator) for c2
    assert ops.count("Transpose") <= 2
    assert {"Softsign", "Conv", "Relu", "Add"} <= set(ops)
    assert not any(n.domain == "mrvl" and not is_subgraph(n) for n in r.model.graph.node)
    _compare(original, r.model)


def test_excluded_node_between_regions_is_standard_onnx():
    original = chain_model()
    r = split(_fused(original), exclude=["c2"], reference=True)
    assert len(r.regions) == 2
    nodes = list(r.model.graph.node)
    assert [n.op_type for n in nodes] == ["Subgraph_1x1", "Transpose", "Conv", "Relu", "Transpose", "Subgraph_1x1"]
    assert r.dropped[0]["origin"] == ["c2", "r2"] and "exclude" in r.dropped[0]["reason"]
    _compare(original, r.model)


def _conv_and_pool_with_a_dead_shape_reader():
    """A conv region on ``x`` and a pool-only region on ``x2`` (dropped: no conv), fused; then, as fuse
    leaves paddle2onnx's flatten (``Shape -> Slice -> Concat -> Reshape``: the Reshape fused with its
    static shape, the Shape chain dead), a CPU ``Shape`` whose output nothing reads, fed by
    a LayoutTransform of the conv region of its own."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu"),
             helper.make_node("MaxPool", ["x2"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool")]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 3, 8, 8]), vi("x2", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [vi("y", TensorProto.FLOAT, [1, 8, 8, 8]), vi("p", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    original.ir_version = 8
    fused = _fused(original)
    nodes = list(fused.graph.node)
    conv = next(n for n in nodes if n.op_type == "Conv2D")
    inverse = next(n for n in nodes if n.op_type == "LayoutTransform" and n.input[0] == conv.output[0])
    lt = onnx.NodeProto()
    lt.CopyFrom(inverse)
    lt.name, lt.output[0] = "layout_for_shape", conv.output[0] + "__nchw_for_shape"
    extra = [lt, helper.make_node("Shape", [lt.output[0]], ["dead_shape"], name="dead_shape")]
    at = nodes.index(conv) + 1
    del fused.graph.node[:]
    fused.graph.node.extend(nodes[:at] + extra + nodes[at:])
    return original, fused


def test_a_kept_regions_layout_transform_pruned_by_the_revert_is_left_out():
    """Reverting the dropped pool region runs revert's cleaner over the whole model, which prunes
    dead nodes: the dead Shape and the kept region's LayoutTransform that only it read. The region
    is the nodes that remain (before: a KeyError; Quark A8W8 PP-OCRv4 rec, docs/surveys/qdq-toolkits.md),
    and the deployable model computes the original's outputs."""
    original, fused = _conv_and_pool_with_a_dead_shape_reader()
    r = split(fused, reference=True)
    assert len(r.dropped) == 1 and "MaxPool" in _ops(r.model)   # the pool region reverted
    assert len(r.regions) == 1
    assert "layout_for_shape" not in r.regions[0].nodes and any("conv" in n for n in r.regions[0].nodes)
    assert "layout_for_shape" not in {n.name for n in r.model.graph.node} and "dead_shape" not in _ops(r.model)
    _compare(original, r.model)

