"""Tests of onnx_mrvl/testing/models.py: the seeded test models are valid, run, and have the promised shape."""
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx_mrvl.testing import models as M
from onnx_mrvl.errors import UnsupportedError

_CACHE = {}


def build(name, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _CACHE:
        _CACHE[key] = M.all_models()[name](**kw)
    return _CACHE[key]


def session(model):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def seeded_input(model, seed=0):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run(model, x=None, extra_outputs=()):
    if extra_outputs:
        model = onnx.ModelProto.FromString(model.SerializeToString())
        vis = {v.name: v for v in model.graph.value_info}
        model.graph.output.extend([vis[n] for n in extra_outputs])
    x = seeded_input(model) if x is None else x
    sess = session(model)
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))


def by_name(model):
    return {n.name: n for n in model.graph.node}


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("name", sorted(M.all_models()))
def test_model_is_valid_runs_and_is_deterministic(name):
    model = build(name)
    onnx.checker.check_model(model, full_check=True)
    assert 8 <= model.ir_version <= 10
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)
    assert model.graph.input[0].name == "input"
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    # static shapes everywhere (value_info from strict shape inference)
    for vi in list(model.graph.value_info) + list(model.graph.input):
        dims = vi.type.tensor_type.shape.dim
        assert dims and all(d.HasField("dim_value") for d in dims), vi.name
    outs = run(model)
    for o in model.graph.output:
        got = outs[o.name]
        assert np.all(np.isfinite(got)), o.name
        declared = [d.dim_value if d.HasField("dim_value") else None
                    for d in o.type.tensor_type.shape.dim]
        if declared:
            assert list(got.shape) == declared or (None in declared
                                                   and len(got.shape) == len(declared)), o.name
    # activations stay O(1)..O(100): safe for float16 accelerators
    assert max(np.abs(v).max() for v in outs.values() if v.dtype == np.float32) < 1000
    again = M.all_models()[name]()
    assert again.SerializeToString() == model.SerializeToString()
    other = M.all_models()[name](seed=1)
    assert other.SerializeToString() != model.SerializeToString()


def test_fashion_mnist_is_the_rfc_model():
    model = build("fashion_mnist")
    expected = [("conv1", "Conv", [1, 64, 28, 28]), ("relu1", "Relu", [1, 64, 28, 28]),
                ("pool1", "MaxPool", [1, 64, 14, 14]), ("conv2", "Conv", [1, 32, 14, 14]),
                ("relu2", "Relu", [1, 32, 14, 14]), ("pool2", "MaxPool", [1, 32, 7, 7]),
                ("dropout", "Dropout", [1, 32, 7, 7]), ("transpose", "Transpose", [1, 7, 7, 32]),
                ("flatten", "Flatten", [1, 1568]), ("dense1_matmul", "MatMul", [1, 256]),
                ("dense1_add", "Add", [1, 256]), ("relu3", "Relu", [1, 256]),
                ("dense2_matmul", "MatMul", [1, 10]), ("dense2_add", "Add", [1, 10])]
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.value_info) + list(model.graph.output)}
    assert [(n.name, n.op_type) for n in model.graph.node] == [e[:2] for e in expected]
    for node, (_, _, shape) in zip(model.graph.node, expected):
        assert shapes[node.output[0]] == shape, node.name
    assert model.graph.node[-1].output[0] == "output"
    nodes, w = by_name(model), inits(model)
    for conv, (o, i) in (("conv1", (64, 1)), ("conv2", (32, 64))):
        a = attrs(nodes[conv])
        assert a["kernel_shape"] == [2, 2] and a["pads"] == [0, 0, 1, 1] and a["strides"] == [1, 1]
        assert w[nodes[conv].input[1]].shape == (o, i, 2, 2) and len(nodes[conv].input) == 3
    for pool in ("pool1", "pool2"):
        assert attrs(nodes[pool]) == {"kernel_shape": [2, 2], "strides": [2, 2]}
    assert attrs(nodes["transpose"])["perm"] == [0, 2, 3, 1]
    assert w[nodes["dense1_matmul"].input[1]].shape == (1568, 256)
    assert w[nodes["dense2_matmul"].input[1]].shape == (256, 10)
    assert float(w[nodes["dropout"].input[1]]) == pytest.approx(0.3)

    # numbers: an independent numpy forward pass of the same weights
    x = seeded_input(model)

    def conv2x2(t, k, b):           # pads [0,0,1,1]: bottom/right
        t = np.pad(t, ((0, 0), (0, 0), (0, 1), (0, 1)))
        h, wd = t.shape[2] - 1, t.shape[3] - 1
        out = sum(np.einsum("nchw,oc->nohw", t[:, :, i:i + h, j:j + wd], k[:, :, i, j])
                  for i in range(2) for j in range(2))
        return out + b[None, :, None, None]

    def pool(t):
        n, c, h, wd = t.shape
        return t.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))

    t = pool(np.maximum(conv2x2(x, w["conv1.weight"], w["conv1.bias"]), 0))
    t = pool(np.maximum(conv2x2(t, w["conv2.weight"], w["conv2.bias"]), 0))
    t = t.transpose(0, 2, 3, 1).reshape(1, -1)
    t = np.maximum(t @ w["dense1.weight"] + w["dense1.bias"], 0)
    ref = t @ w["dense2.weight"] + w["dense2.bias"]
    np.testing.assert_allclose(run(model, x)["output"], ref, rtol=1e-4, atol=1e-4)
    assert np.std(ref) > 0.1     # not a degenerate network


def test_example_file_is_the_seed0_model(tmp_path):
    path = M.write_example(str(tmp_path / "fm.onnx"))
    data = open(path, "rb").read()
    assert data == M.fashion_mnist_cnn(seed=0).SerializeToString()
    repo_example = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples",
                                "fashion_mnist.onnx")
    assert open(repo_example, "rb").read() == data


def test_mobilenetv2_structure():
    model = build("mobilenetv2_like")
    nodes, w = list(model.graph.node), inits(model)
    clips = [n for n in nodes if n.op_type == "Clip"]
    assert clips and all(len(n.input) == 3 and float(w[n.input[1]]) == 0.0
                         and float(w[n.input[2]]) == 6.0 for n in clips)
    dw = [n for n in nodes if n.op_type == "Conv" and attrs(n)["group"] > 1]
    assert len(dw) >= 5
    for n in dw:
        assert w[n.input[1]].shape[:2] == (attrs(n)["group"], 1)
    assert any(attrs(n)["strides"] == [2, 2] for n in dw)
    blocks = {n.name.split("_")[0] for n in nodes if n.name.startswith("block")}
    assert len(blocks) >= 5
    assert sum(n.op_type == "Add" for n in nodes) >= 3
    # project convs are linear: BN output feeds Add or the next block, never a Clip
    consumers = {i: n for n in nodes for i in n.input}
    for n in nodes:
        if n.name.endswith("_project_bn"):
            assert consumers[n.output[0]].op_type != "Clip"
    gemm = nodes[-1]
    assert gemm.op_type == "Gemm" and attrs(gemm)["transB"] == 1
    widths = [w[n.input[1]].shape[0] for n in nodes if n.name.endswith("_project_conv")]
    assert min(widths) >= 8 and max(widths) <= 160 and widths == sorted(widths)


def test_mobilenetv2_matches_reference_evaluator_at_small_size():
    # opset 15: onnx's ReferenceEvaluator runs BatchNormalization-9 (opsets 9..13) in training
    # mode (its default momentum switches it), so it is no oracle there
    model = M.mobilenetv2_like(input_size=32, num_classes=10, opset=15)
    x = seeded_input(model)
    ref = ReferenceEvaluator(model).run(None, {"input": x})[0]
    np.testing.assert_allclose(run(model, x)["output"], ref, rtol=1e-3, atol=1e-3)
    assert ref.shape == (1, 10)


def test_resnet18_structure():
    model = build("resnet18_like")
    nodes = list(model.graph.node)
    convs = [n for n in nodes if n.op_type == "Conv"]
    assert len(convs) == 20 and sum("downsample" in n.name for n in convs) == 3
    a = attrs(convs[0])
    assert a["kernel_shape"] == [7, 7] and a["strides"] == [2, 2] and a["pads"] == [3, 3, 3, 3]
    mp = by_name(model)["maxpool"]
    assert attrs(mp)["kernel_shape"] == [3, 3] and attrs(mp)["pads"] == [1, 1, 1, 1]
    adds = [n for n in nodes if n.op_type == "Add"]
    assert len(adds) == 8
    consumers = {i: n for n in nodes for i in n.input}
    assert all(consumers[n.output[0]].op_type == "Relu" for n in adds)
    assert sum(n.op_type == "BatchNormalization" for n in nodes) == 20
    fc = inits(model)["fc.weight"]
    assert fc.shape == (1000, 512)


def test_yolo_structure_and_upsample_numbers():
    model = build("yolo_like")
    nodes, w = list(model.graph.node), inits(model)
    sig = [n for n in nodes if n.op_type == "Sigmoid"]
    consumers = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    for s in sig:           # SiLU = x * Sigmoid(x)
        mul = consumers[s.output[0]][0]
        assert mul.op_type == "Mul" and set(mul.input) == {s.input[0], s.output[0]}
    assert len(sig) >= 10
    leaky = [n for n in nodes if n.op_type == "LeakyRelu"]
    assert len(leaky) >= 2 and all(attrs(n)["alpha"] == pytest.approx(0.1) for n in leaky)
    pools = [n for n in nodes if n.op_type == "MaxPool"]
    assert len(pools) == 3 and all(attrs(p) == {"kernel_shape": [5, 5], "strides": [1, 1],
                                                "pads": [2, 2, 2, 2]} for p in pools)
    spp = by_name(model)["spp_concat"]
    assert len(spp.input) == 4 and all(p.output[0] in spp.input for p in pools)
    assert not any(n.op_type == "Split" for n in nodes)
    rs = by_name(model)["fpn_upsample"]
    assert rs.input[1] == "" and w[rs.input[2]].tolist() == [1, 1, 2, 2]
    a = attrs(rs)
    assert (a["mode"], a["coordinate_transformation_mode"], a["nearest_mode"]) == \
        (b"nearest", b"asymmetric", b"floor")
    outs = run(model, extra_outputs=[rs.input[0], rs.output[0]])
    assert outs["det_p4"].shape == (1, 75, 16, 16) and outs["det_p5"].shape == (1, 75, 8, 8)
    src = outs[rs.input[0]]
    np.testing.assert_array_equal(outs[rs.output[0]], src.repeat(2, axis=2).repeat(2, axis=3))


def _iou(a, b):
    y1, x1 = np.maximum(a[:2], b[:2])
    y2, x2 = np.minimum(a[2:], b[2:])
    inter = max(0.0, y2 - y1) * max(0.0, x2 - x1)
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def _fp16_emulated(model):
    """Weights and every backbone/head activation rounded to float16 (as the accelerator)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32 and t.name.endswith((".weight", ".bias")):
            t.CopyFrom(numpy_helper.from_array(a.astype(np.float16).astype(np.float32), t.name))
    new, ren = [], {}
    for n in m.graph.node:
        n.input[:] = [ren.get(i, i) for i in n.input]
        new.append(n)
        if n.name.startswith(("stem", "stage", "head")):
            o = n.output[0]
            new.append(helper.make_node("Cast", [o], [o + "_h"], name=n.name + "_to16",
                                        to=TensorProto.FLOAT16))
            new.append(helper.make_node("Cast", [o + "_h"], [o + "_r"], name=n.name + "_to32",
                                        to=TensorProto.FLOAT))
            ren[o] = o + "_r"
    del m.graph.node[:]
    m.graph.node.extend(new)
    del m.graph.value_info[:]
    return m


def test_detection_outputs_and_nms():
    model = build("detection_like")
    w = inits(model)
    thr = float(w["nms.score_threshold"][0])
    iou_thr = float(w["nms.iou_threshold"][0])
    x = seeded_input(model)
    outs = run(model, x)
    boxes, scores, sel = outs["boxes"], outs["scores"], outs["selected_indices"]
    n = boxes.shape[1]
    assert boxes.shape == (1, n, 4) and scores.shape == (1, 4, n) and n == 3 * (16 * 16 + 8 * 8)
    assert sel.dtype == np.int64 and sel.ndim == 2 and sel.shape[1] == 3
    assert 0 < len(sel) <= 4 * int(w["nms.max_output_boxes_per_class"][0])
    assert np.all(sel[:, 0] == 0) and np.all(sel[:, 1] < 4) and np.all(sel[:, 2] < n)
    assert np.all((scores >= 0) & (scores < 1))       # far-negative logits underflow to 0
    assert np.all(boxes[0, :, 2] > boxes[0, :, 0]) and np.all(boxes[0, :, 3] > boxes[0, :, 1])
    sel_scores = scores[0, sel[:, 1], sel[:, 2]]
    assert np.all(sel_scores > thr)
    for c in np.unique(sel[:, 1]):     # NMS property: kept boxes of one class do not overlap much
        kept = sel[sel[:, 1] == c, 2]
        for i in range(len(kept)):
            for j in range(i + 1, len(kept)):
                assert _iou(boxes[0, kept[i]], boxes[0, kept[j]]) <= iou_thr + 1e-6
    best = scores[0].max(axis=0)
    np.testing.assert_allclose(outs["topk_scores"][0], np.sort(best)[::-1][:10], rtol=1e-6)
    np.testing.assert_array_equal(best[outs["topk_indices"][0]], outs["topk_scores"][0])
    # scores are well separated: NMS picks the same boxes with float16 weights and activations
    live = scores[scores > 1e-6]
    assert np.abs(np.log(live / (1 - live))).min() > 0.05      # fp16 logit error is ~0.03
    half = run(_fp16_emulated(model), x)
    np.testing.assert_array_equal(half["selected_indices"], sel)


@pytest.mark.parametrize("opset", [11, 18, 21])
@pytest.mark.parametrize("name", ["fashion_mnist", "yolo_like", "detection_like", "tiny_cnn"])
def test_other_opsets_run_and_agree(name, opset):
    model = M.all_models()[name](opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == opset and model.ir_version <= 10
    base = run(build(name))
    got = run(model)
    for k, v in base.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5)


def test_tiny_cnn_matches_reference_evaluator():
    model = build("tiny_cnn")
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu", "MaxPool", "Conv",
                                                     "GlobalAveragePool", "Flatten", "Gemm"]
    x = seeded_input(model)
    ref = ReferenceEvaluator(model).run(None, {"input": x})[0]
    np.testing.assert_allclose(run(model, x)["output"], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("branchy", [False, True])
def test_branchy_chain(branchy):
    model = M.branchy_chain(4000, branchy=branchy)
    onnx.checker.check_model(model, full_check=True)
    nodes = list(model.graph.node)
    assert len(nodes) == 4000
    convs = [n for n in nodes if n.op_type == "Conv"]
    assert len({n.input[1] for n in convs}) == len(convs) > 1000      # own weights per conv
    ops = {n.op_type for n in nodes}
    assert ops <= {"Conv", "Relu", "Add", "Concat"}
    assert ("Concat" in ops) == branchy
    # the hand-written value_info is what strict shape inference derives
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    as_dict = lambda m: {v.name: v for v in m.graph.value_info}  # noqa: E731
    assert as_dict(inferred) == as_dict(model)
    assert len(model.graph.value_info) == 3999
    x = seeded_input(model)
    out = run(model, x)["output"]
    assert out.shape == (1, 8, 8, 8) and np.all(np.isfinite(out))
    assert 1e-3 < np.abs(out).mean() < 10
    assert M.branchy_chain(4000, branchy=branchy).SerializeToString() == model.SerializeToString()
    assert len(M.branchy_chain(7, branchy=branchy).graph.node) == 7


def test_branchy_diamonds_preserve_norm():
    """A diamond-only stretch maps each pixel vector orthogonally (|Qx| or Q2 Q x)."""
    model = M.branchy_chain(14, branchy=True)       # chain(3) + Add diamond(5) + Concat diamond(6)
    assert [n.op_type for n in model.graph.node][-2:] == ["Concat", "Conv"]
    x = seeded_input(model)
    outs = run(model, x, extra_outputs=["u0_add_out", "u1_add_out"])
    n0 = np.linalg.norm(outs["u0_add_out"], axis=1)
    np.testing.assert_allclose(np.linalg.norm(outs["u1_add_out"], axis=1), n0, rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(outs["output"], axis=1), n0, rtol=1e-5)


def test_bad_arguments_raise():
    with pytest.raises(UnsupportedError, match="opset 9"):
        M.tiny_cnn(opset=9)
    with pytest.raises(UnsupportedError, match="multiple of 32"):
        M.yolo_like(input_size=100)
    with pytest.raises(ValueError, match="unknown model"):
        M.save_all("/nonexistent-never-created", only=["nope"])


def test_cli_writes_models(tmp_path):
    assert M.main(["--out", str(tmp_path), "--only", "tiny_cnn", "fashion_mnist"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["fashion_mnist.onnx", "tiny_cnn.onnx"]
    loaded = onnx.load(str(tmp_path / "tiny_cnn.onnx"))
    assert loaded.SerializeToString() == M.tiny_cnn().SerializeToString()
