"""ND storage (fuse/images.py): 4-D tensors no spatial op reads or writes (attention scores and
masks) stay in the order they were written; images stay NHWC. Numbers against onnxruntime."""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.testing import arch_detect_classify as D
import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize

F = TensorProto.FLOAT


def _deployed(model, tmp_path, feeds):
    """The convert result, its outputs through onnx_mrvl.InferenceSession within the fp16 bound."""
    res = onnx_mrvl.convert(model)
    assert not res.report.warnings, res.report.warnings
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and np.all(np.isfinite(g))
        assert np.max(np.abs(g - r)) <= 1e-2 * np.max(np.abs(r))
    return res


def _cpu_ops(res):
    return sorted(n.op_type for n in res.model.graph.node if not n.op_type.startswith("Subgraph"))


def _layout_changes(res):
    """LayoutTransform layers (NCHW<->NHWC moves and block rotations) in the deployed regions."""
    return [n for sg in res.subgraphs for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op"
            and n["attrs"]["layer_name"][0].startswith("layout_transform")]


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def test_scores_keep_their_storage_the_mask_is_converted(tmp_path):
    """The attention core is layout-free: a mask stored in another order than the scores (here an
    input [1,T,T,1] relabelled to [1,1,T,T] by a Transpose, listed first in the Add) is what gets
    converted, the smaller tensor, never the scores [1,H,T,T] the BatchMatMul wrote; the Sum2D and
    the Softmax run on the scores' storage and P*V reads the probabilities as they are."""
    H, T, d = 4, 16, 8
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Transpose", ["mask"], ["mt"], perm=[0, 3, 1, 2], name="mt"),
             helper.make_node("Add", ["mt", "s"], ["a"], name="add_mask"),
             helper.make_node("Softmax", ["a"], ["p"], axis=-1, name="softmax"),
             helper.make_node("MatMul", ["p", "v"], ["y"], name="av")]
    ins = [helper.make_tensor_value_info(n, F, [1, H, T, d]) for n in "qkv"]
    ins.append(helper.make_tensor_value_info("mask", F, [1, T, T, 1]))
    m = _model(nodes, ins, [helper.make_tensor_value_info("y", F, [1, H, T, d])])
    rng = np.random.default_rng(0)
    f = {n: rng.standard_normal((1, H, T, d)).astype(np.float32) for n in "qkv"}
    f["mask"] = np.where(np.tril(np.ones((T, T), bool)), 0.0, -1e4).astype(np.float32).reshape(1, T, T, 1)
    r = fuse(legalize(m))
    ops = [n.op_type for n in r.model.graph.node]
    assert ops == ["BatchMatMul", "LayoutTransform", "Sum2D", "Softmax", "BatchMatMul"], ops
    qk, layout, add, softmax, av = r.model.graph.node
    assert list(layout.input) == ["mask"]                               # the [1,T,T,1] mask moves
    assert qk.output[0] in add.input and layout.output[0] in add.input  # the scores, as written
    assert opset.node_attrs(softmax)["axis"] == -1 and av.input[0] == softmax.output[0]
    assert "a_perm" not in opset.node_attrs(av)
    res = _deployed(m, tmp_path, f)
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == [] and len(_layout_changes(res)) == 1



def _nonlocal_block(C=16, S=6, heads=2, ci=8, seed=0):
    """Multi-head non-local (self-attention) block inside a CNN, as SAGAN / DANet write it: 1x1
    convs theta / phi / g -> Reshape [1, heads, dh, S*S] -> scores [1, heads, S*S, S*S] + a relative
    position bias -> Softmax -> P*V -> Reshape back to the image -> 1x1 conv -> residual."""
    rng = np.random.default_rng(seed)
    dh, hw = ci // heads, S * S
    inits, nodes = [], []

    def const(name, arr, dt=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(arr, dt), name))
        return name

    def node(op, ins, name, **kw):
        nodes.append(helper.make_node(op, ins, [name], name=name, **kw))
        return name

    def conv(x, cin, cout, name):
        w = const(f"{name}.w", rng.standard_normal((cout, cin, 1, 1)) * np.sqrt(1 / cin))
        return node("Conv", [x, w], name, kernel_shape=[1, 1])

    x = conv("input", C, C, "stem")
    heads4 = const("heads_shape", [1, heads, dh, hw], np.int64)
    q = node("Transpose", [node("Reshape", [conv(x, C, ci, "theta"), heads4], "q4")], "qt", perm=[0, 1, 3, 2])
    k = node("Reshape", [conv(x, C, ci, "phi"), heads4], "k4")
    v = node("Transpose", [node("Reshape", [conv(x, C, ci, "g"), heads4], "v4")], "vt", perm=[0, 1, 3, 2])
    s = node("MatMul", [q, k], "scores")
    s = node("Add", [s, const("rel_bias", rng.standard_normal((1, heads, hw, hw)) * 0.1)], "bias")
    p = node("Softmax", [s], "attn", axis=-1)
    o = node("Transpose", [node("MatMul", [p, v], "av")], "ot", perm=[0, 1, 3, 2])
    o = node("Reshape", [o, const("img_shape", [1, ci, S, S], np.int64)], "o4")
    node("Add", [x, conv(o, ci, C, "out")], "output")
    return _model(nodes, [helper.make_tensor_value_info("input", F, [1, C, S, S])],
                  [helper.make_tensor_value_info("output", F, [1, C, S, S])], inits), hw, heads


def test_attention_inside_a_cnn(tmp_path):
    """A non-local block: the convs and the residual run on NHWC images as before (one
    LayoutTransform in, one out), the scores [1, heads, S*S, S*S] are ND: the bias Sum2D and the
    Softmax run on them as the BatchMatMul wrote them (before: NCHW->NHWC after Q*K^T and back
    before P*V). The only other moves are P*V's output rotated into the image for the conv."""
    m, hw, heads = _nonlocal_block()
    r = fuse(legalize(m))
    by_name = {n.name: n for n in r.model.graph.node}
    for conv in ("mrvl_stem", "mrvl_theta", "mrvl_out"):
        assert [p.value for p in by_name[conv].metadata_props if p.key == "mrvl.storage"] == ["[0, 2, 3, 1]"]
    assert [p.value for p in by_name["mrvl_output"].metadata_props if p.key == "mrvl.storage"] == ["[0, 2, 3, 1]"]
    for name in ("mrvl_bias", "mrvl_attn"):   # the scores' own (logical) order, axis -1
        assert not [p for p in by_name[name].metadata_props if p.key == "mrvl.storage"]
    assert opset.node_attrs(by_name["mrvl_attn"])["axis"] == -1
    assert by_name["mrvl_av"].input[0] == "attn" and by_name["mrvl_bias"].input[0] == "scores"
    moved = [n.input[0] for n in r.model.graph.node if n.op_type == "LayoutTransform"]
    assert moved[0] == "input" and moved[-1] == "output__nhwc"
    assert all(n.startswith("ot__rot") for n in moved[1:-1]), moved
    f = {"input": np.random.default_rng(1).standard_normal((1, 16, 6, 6)).astype(np.float32)}
    res = _deployed(m, tmp_path, f)
    assert len(res.subgraphs) == 1 and _cpu_ops(res) == []
    assert not any(l["attrs"]["shape"][0] == [1, heads, hw, hw] for l in _layout_changes(res))


def test_detection_head_token_views_stay_logical(tmp_path):
    """YOLOv8's box decoding slices [1, 4, A] boxes through 4-D views [1, 4, 1, A] (legalize's N-D
    slices): no spatial op touches them, so the Slice2D run on the logical order (axis 1) with no
    LayoutTransform before them (was one NCHW->NHWC per slice: 7 LayoutTransforms -> 4, 3 CPU
    Transposes -> 1); the convs stay NHWC; same numbers."""
    m = D.yolov8_like()
    r = fuse(legalize(m))
    slices = [n for n in r.model.graph.node if n.op_type == "Slice2D" and n.input[0].startswith("reshape_105_out/to4d")]
    assert len(slices) == 2 and all(opset.node_attrs(n)["axis"] == 1 for n in slices)
    assert sum(n.op_type == "LayoutTransform" for n in r.model.graph.node) == 4
    assert all([p.value for p in n.metadata_props if p.key == "mrvl.storage"] == ["[0, 2, 3, 1]"]
               for n in r.model.graph.node if n.op_type == "Conv2D")
    rng = np.random.default_rng(0)
    f = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
         for i in m.graph.input}
    res = _deployed(m, tmp_path, f)
    assert _cpu_ops(res).count("Transpose") == 1


def test_scaled_key_transposed_then_read_on_the_cpu(tmp_path):
    """An FC's tokens split to heads [1, S, h, d], Transpose(0, 2, 3, 1) to k^T [1, h, d, S] and a
    Mul by a scalar (a TorchScript-exported scaled dot-product attention) with the product read on
    the CPU: the Mul2D writes k^T in the order its input was written (neither NCHW nor NHWC of its
    logical axes: "ND"), and the region's exit converts it. The compile step took such a Mul2D's
    output for NHWC and refused the conversion (CompileError: "layout_transform NCHW->NHWC reads a
    tensor stored NHWC", Hugging Face DETR's TorchScript export)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="k_proj"),
             helper.make_node("Reshape", ["a", "s"], ["b"], name="heads"),
             helper.make_node("Transpose", ["b"], ["c"], name="key_t", perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["c", "k"], ["d"], name="scale"),
             helper.make_node("MatMul", ["q", "d"], ["y"], name="scores_on_cpu")]
    inits = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.2).astype(np.float32), "w"),
             numpy_helper.from_array(np.array([1, 16, 4, 16], np.int64), "s"),
             numpy_helper.from_array(np.array(0.5, np.float32), "k")]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 16, 64]), helper.make_tensor_value_info("q", F, [1, 4, 5, 16])],
               [helper.make_tensor_value_info("y", F, None)], inits)
    feeds = {"x": rng.standard_normal((1, 16, 64)).astype(np.float32),
             "q": rng.standard_normal((1, 4, 5, 16)).astype(np.float32)}
    res = onnx_mrvl.convert(m, exclude=["scores_on_cpu"])
    assert [d.op_type for d in res.report.cpu_nodes()] == ["MatMul"]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)[0]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.all(np.isfinite(got)) and np.max(np.abs(got - ref)) <= 1e-2 * np.max(np.abs(ref))
