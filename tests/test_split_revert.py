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
