"""Legalize -> fuse on the nine onnx-wheel zoo architectures (seeded random weights) and the
MobileNetV2/ResNet-18/YOLO-style CNNs of onnx_mrvl/testing/models.py: the fused model is valid ONNX, runs in
plain onnxruntime through the reference bodies and matches the original within 1e-4 relative;
every Conv/Gemm/MatMul MAC sits in a Mrvl op; every CPU node has a reason; layout changes only at
NCHW boundaries (one per boundary tensor) and none inside a chain of fused ops."""
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from onnx_mrvl.testing import models as tool_models
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.randomize_weights import load_zoo, random_inputs, zoo_model_paths

BIG = {"vgg19", "zfnet512", "bvlc_alexnet"}     # 240-575 MB of random weights each
ZOO = [pytest.param(n, marks=pytest.mark.slow) if n in BIG else n for n in sorted(zoo_model_paths())]
TOOLS = ["mobilenetv2_like", "resnet18_like", "yolo_like", "detection_like", "tiny_cnn", "fashion_mnist_cnn"]
MAC_OPS = ("Conv", "Gemm", "MatMul")
CACHE = {}


# ---------------------------------------------------------------- helpers
def _shapes(model):
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[vi.name] = [d.dim_value for d in dims]
    out.update({t.name: list(t.dims) for t in model.graph.initializer})
    return out


def macs(node, shapes):
    """Multiply-accumulates of a Conv / Gemm / MatMul node from the static shapes."""
    y = shapes.get(node.output[0])
    w = shapes.get(node.input[1])
    if y is None or w is None:
        return 0
    if node.op_type == "Conv":
        return int(np.prod(y)) * int(np.prod(w[1:]))
    trans_b = any(a.name == "transB" and a.i for a in node.attribute)
    k = w[1] if (node.op_type == "Gemm" and trans_b) else w[0] if len(w) == 2 else w[-2]
    return int(np.prod(y)) * int(k)


def _run(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run([o.name for o in model.graph.output], feeds)


def _check(model):
    """The full checker; a model over 200 MB is checked with its weights declared as inputs (the
    checker serializes the model a second time)."""
    if sum(len(t.raw_data) for t in model.graph.initializer) < 200 << 20:
        onnx.checker.check_model(model, full_check=True)
        return
    weights = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in model.graph.initializer]
    graph = helper.make_graph(list(model.graph.node), model.graph.name, list(model.graph.input) + weights,
                              list(model.graph.output), value_info=list(model.graph.value_info))
    light = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    light.ir_version = model.ir_version
    onnx.checker.check_model(light, full_check=True)


def _is_compute(node):
    return node.domain == opset.DOMAIN and node.op_type != "LayoutTransform"


def layout_problems(model):
    """LayoutTransforms inside a fused chain (Mrvl producer and a Mrvl consumer), and tensors
    converted twice the same way."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    problems, seen = [], set()
    for n in model.graph.node:
        if n.op_type != "LayoutTransform" or n.name.startswith("rotate_"):
            continue   # rotate_*: a real permutation of the model's (fuse/perms.rotations)
        p = producer.get(n.input[0])
        if p is not None and _is_compute(p) and any(_is_compute(c) for c in consumers.get(n.output[0], [])):
            problems.append(f"{n.name} between {p.name} and a Mrvl consumer")
        key = (n.input[0], opset.node_attrs(n)["dst_layout"])
        if key in seen:
            problems.append(f"{n.input[0]} converted to {key[1]} twice")
        seen.add(key)
    return problems


def inner_transposes(model):
    """Transposes with an accelerator op on both sides."""
    producer = {o: n for n in model.graph.node for o in n.output}
    users = {}
    for n in model.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    return sum(1 for n in model.graph.node if n.op_type == "Transpose"
               and _is_compute(producer.get(n.input[0], onnx.NodeProto()))
               and any(_is_compute(c) for c in users.get(n.output[0], [])))


def pipeline(name):
    """legalize -> fuse -> checks of one model; the summary is cached for the other tests."""
    if name in CACHE:
        return CACHE[name]
    original = load_zoo(name, seed=0) if name in zoo_model_paths() else getattr(tool_models, name)(seed=0)
    legal = legalize(original).model
    t0 = time.perf_counter()
    result = fuse(legal)
    fuse_s = time.perf_counter() - t0
    _check(result.model)
    feeds = random_inputs(original, seed=1)
    ref, got = _run(original, feeds), _run(result.model, feeds)
    errs = []
    for a, b in zip(ref, got):
        assert a.shape == b.shape, (name, a.shape, b.shape)
        errs.append(float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(a))), 1e-30)))
    shapes = _shapes(legal)
    total = fused = 0
    unfused = []
    for n in legal.graph.node:
        if n.op_type in MAC_OPS:
            m = macs(n, shapes)
            total += m
            d = result.decisions[n.name]
            if d.placement == "accelerator":
                fused += m
            else:
                unfused.append((n.name, d.reason))
    summary = dict(
        legal_nodes={n.name for n in legal.graph.node}, decisions=result.decisions, err=max(errs),
        mac_total=total, mac_fused=fused, unfused=unfused, fuse_s=fuse_s,
        ops=[n.op_type for n in result.model.graph.node], layout=layout_problems(result.model),
        inner_transposes=inner_transposes(result.model),
        original_transposes=sum(n.op_type == "Transpose" for n in legal.graph.node),
        groups=len(result.groups))
    CACHE[name] = summary
    return summary


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize("name", ZOO + TOOLS)
def test_fused_model(name):
    s = pipeline(name)
    assert s["err"] < 1e-4, f"{name}: fused model differs from the original by {s['err']:.2e} relative"
    assert s["mac_total"] > 0
    assert s["mac_fused"] == s["mac_total"], f"{name}: MACs left on the CPU: {s['unfused']}"
    assert set(s["decisions"]) == s["legal_nodes"], "every legalized node has exactly one record"
    cpu = s["decisions"].by_placement("cpu")
    assert all(d.reason for d in cpu), [d.node for d in cpu if not d.reason]
    assert all(d.mrvl_node and d.composite for d in s["decisions"].by_placement("accelerator")
               if d.op_type != "Transpose")
    assert not s["layout"], s["layout"]
    # a Transpose between two accelerator ops is one of the model's own (a real permutation, as in
    # ShuffleNet's channel shuffle); the others convert at CPU boundaries
    assert s["inner_transposes"] <= s["original_transposes"]


def test_shufflenet_channel_shuffles_stay_on_the_accelerator():
    """Each of the 16 channel shuffles is one block rotation (a Mrvl Reshape to [H*W, g, C/g, 1]
    and an NCHW->NHWC LayoutTransform), not a CPU Transpose cutting the region."""
    s = pipeline("shufflenet")
    assert "Transpose" not in s["ops"]
    assert s["ops"].count("LayoutTransform") == 1 + 16
    assert [d.op_type for d in s["decisions"].by_placement("cpu")] == []     # the Softmax is a Mrvl op
    assert s["ops"][-1] == "Softmax"


def test_resnet50_has_one_layout_transform_at_its_input():
    s = pipeline("resnet50")
    assert s["ops"].count("LayoutTransform") == 1 and s["ops"][0] == "LayoutTransform"
    assert "Transpose" not in s["ops"]
    assert [d.op_type for d in s["decisions"].by_placement("cpu")] == []     # the Softmax is a Mrvl op
    assert s["ops"][-1] == "Softmax"
    assert s["ops"].count("Conv2D") == 53 and s["ops"].count("FC") == 1


@pytest.mark.parametrize("name,count", [("resnet18_like", 1), ("mobilenetv2_like", 1), ("squeezenet", 1),
                                        ("inception_v2", 1), ("densenet121", 2)])
def test_layout_transform_counts(name, count):
    """Only the model input (and, where a 4-D tensor leaves the accelerator, that boundary) changes layout."""
    assert pipeline(name)["ops"].count("LayoutTransform") == count


def test_yolo_fuses_silu_resize_concat():
    s = pipeline("yolo_like")
    assert {"Conv2D", "Resize", "Concat"} <= set(s["ops"])
    assert not s["decisions"].by_placement("cpu")


def test_fuse_scales_linearly():
    """Fusion is linear in the graph size: 4x the nodes costs well under 16x (quadratic) the CPU
    time (docs/fusion.md gives the time on the 16k-node model)."""
    def cpu_seconds(n):
        m = onnx.shape_inference.infer_shapes(tool_models.branchy_chain(n, branchy=True))
        t0 = time.process_time()
        r = fuse(m)
        return time.process_time() - t0, r
    small, _ = cpu_seconds(2000)
    big, r = cpu_seconds(8000)
    assert len(r.decisions) == 8000
    assert big < 8 * small + 1.0, (small, big)
    # one layout change at the input; the trailing Relus run as Mul2D(x, 1) + relu on the NHWC data
    # (standalone activations), then one back
    assert [n.op_type for n in r.model.graph.node if n.op_type in ("LayoutTransform", "Transpose")] == \
        ["LayoutTransform", "LayoutTransform"]
    assert not r.decisions.by_placement("cpu")
