"""int8 QDQ patterns of exporter-style architectures (issue #19, benchmarks/bench_int8_arch.py), each
bit-exact against onnxruntime's run of the same QDQ model:
- a per-channel element-wise group whose constant varies along another axis than 1 (ConvNeXt's
  layer scale on channels-last data) or on a 3-D tensor (a BatchNorm on [N, C, T]) is an int8
  Lookup whose channel axis is stored last (was an fp16 Mul2D: codes moved near ties);
- QDQ 1-D pools keep pairs around their 2-D form (were an fp16 GlobalAveragePool chain);
- an Add with the constant first (``anchors + x``), its constant also read by another node;
- the int8_out LayerNorm computes onnxruntime's fp32 LayerNormalization kernel;
- an int8 Softmax onnxruntime runs in float (``requant`` float)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
from tests.test_int8_lookup import _layers  # noqa: E402
from tests.test_int8_qdq import _agreement, quantize  # noqa: E402

F = TensorProto.FLOAT


def channels_last_scale(seed: int = 0) -> onnx.ModelProto:
    """conv -> Transpose to NHWC -> Mul by a [C] layer scale -> Transpose back -> conv."""
    g = GraphBuilder(seed, 13)
    x = g.conv("input", 3, 8, 3, "c1")
    t = g.node("Transpose", [x], "to_nhwc", perm=[0, 2, 3, 1])
    s = g.const("gamma", (0.1 + 0.05 * g.rng.standard_normal(8)).astype(np.float32))
    t = g.node("Transpose", [g.node("Mul", [t, s], "scale")], "to_nchw", perm=[0, 3, 1, 2])
    g.conv(t, 8, 8, 3, "c2")
    g.nodes[-1].output[0] = "output"
    return g.model("channels_last_scale", [("input", F, [1, 3, 12, 12])], [("output", F, [1, 8, 12, 12])])


def wave_1d(seed: int = 0) -> onnx.ModelProto:
    """Conv1d -> BatchNorm on [N, C, T] -> Relu -> MaxPool1d -> Conv1d -> GlobalAveragePool (1-D) -> Flatten -> Gemm."""
    g = GraphBuilder(seed, 13)
    w = g.const("w1", (g.rng.standard_normal((8, 1, 5)) * 0.4).astype(np.float32))
    x = g.node("Conv", ["input", w], "c1", kernel_shape=[5], strides=[2], pads=[2, 2])
    x = g.relu(g.bn(x, 8, "bn"), "r1")
    x = g.node("MaxPool", [x], "mp", kernel_shape=[3], strides=[2], pads=[1, 1])
    w2 = g.const("w2", (g.rng.standard_normal((8, 8, 3)) * 0.3).astype(np.float32))
    x = g.node("Conv", [x, w2], "c2", kernel_shape=[3], pads=[1, 1])
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flat", axis=1)
    g.gemm(x, 8, 6, "fc")
    g.nodes[-1].output[0] = "output"
    return g.model("wave_1d", [("input", F, [1, 1, 200])], [("output", F, [1, 6])])


def const_first_add(seed: int = 0) -> onnx.ModelProto:
    """conv -> Add(C, x) and Add(conv2(x), C) with one constant C -> Concat -> conv."""
    g = GraphBuilder(seed, 13)
    x = g.conv("input", 3, 8, 3, "c1")
    c = g.const("anchors", g.rng.standard_normal((1, 8, 10, 10)).astype(np.float32))
    a = g.node("Add", [c, x], "add_first")
    b = g.node("Add", [g.conv(x, 8, 8, 1, "c2"), c], "add_second")
    g.conv(g.node("Concat", [a, b], "cat", axis=1), 16, 8, 1, "c3")
    g.nodes[-1].output[0] = "output"
    return g.model("const_first_add", [("input", F, [1, 3, 10, 10])], [("output", F, [1, 8, 10, 10])])


def box_decode(seed: int = 0) -> onnx.ModelProto:
    """YOLOv8's dist2bbox on conv outputs: anchors - lt, anchors + rb, x2y2 - x1y1, (x1y1 + x2y2) - 0.5
    (the anchors [1, 2, 10, 10] vary along three axes: no table), Concat -> conv."""
    g = GraphBuilder(seed, 13)
    lt, rb = g.conv("input", 3, 2, 3, "c_lt"), g.conv("input", 3, 2, 3, "c_rb")
    anc = g.const("anchors", (g.rng.uniform(0, 10, (1, 2, 10, 10))).astype(np.float32))
    x1y1, x2y2 = g.node("Sub", [anc, lt], "sub_first"), g.node("Add", [anc, rb], "add_anchor")
    wh = g.node("Sub", [x2y2, x1y1], "sub_two")
    c = g.node("Sub", [g.node("Add", [x1y1, x2y2], "add_two"), g.const("half", np.float32(0.5))], "sub_const")
    g.conv(g.node("Concat", [c, wh], "cat", axis=1), 4, 8, 1, "c_out")
    g.nodes[-1].output[0] = "output"
    return g.model("box_decode", [("input", F, [1, 3, 10, 10])], [("output", F, [1, 8, 10, 10])])


def head_pow_reshape(seed: int = 0) -> onnx.ModelProto:
    """YOLOv5's ``(2 * sigmoid(x))^2`` before a conv, and a Softmax whose output a Reshape moves to the
    model output (SqueezeNet's head)."""
    g = GraphBuilder(seed, 13)
    x = g.conv("input", 3, 8, 3, "c1")
    p = g.node("Pow", [g.node("Mul", [g.node("Sigmoid", [x], "sig"), g.const("two", np.float32(2))], "mul2"),
                       g.const("sq", np.float32(2))], "pow")
    y = g.node("Softmax", [g.conv(p, 8, 8, 1, "c2")], "sm", axis=1)
    g.node("Reshape", [y, g.const("shape", np.array([1, 8, 64], np.int64))], "out_reshape")
    g.nodes[-1].output[0] = "output"
    return g.model("head_pow_reshape", [("input", F, [1, 3, 8, 8])], [("output", F, [1, 8, 64])])


def _convert(model, tmp_path, act):
    qpath = quantize(model, str(tmp_path / "q.onnx"), True, act)
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    return qpath, result, folder


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_channels_last_layer_scale_is_a_lookup(tmp_path, act):
    qpath, result, folder = _convert(channels_last_scale(1), tmp_path, act)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    lookups = [a for a in _layers(folder) if a["layer_name"] == ["Lookup"]]
    assert len(lookups) == 1 and lookups[0]["channels"] == ["8"], lookups
    assert result.report.decisions["scale"].precision == "int8"
    assert _agreement(qpath, folder) == (0.0, 0.0)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_batchnorm_and_pools_on_1d_data_are_int8(tmp_path, act):
    qpath, result, folder = _convert(wave_1d(2), tmp_path, act)
    d = result.report.decisions
    assert d["bn"].precision == "int8", d["bn"]
    assert all(d[n].precision == "int8" for n in ("mp", "gap")), (d["mp"], d["gap"])
    layers = _layers(folder)
    lookups = [a for a in layers if a["layer_name"] == ["Lookup"]]
    assert len(lookups) == 1 and lookups[0]["channels"] == ["8"], lookups
    assert not [a for a in layers if a["layer_name"] == ["Avgpool2D"]]   # one int32 sum, no fp16 chain
    assert _agreement(qpath, folder) == (0.0, 0.0)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_add_with_the_constant_first_is_int8(tmp_path, act):
    qpath, result, folder = _convert(const_first_add(3), tmp_path, act)
    d = result.report.decisions
    assert d["add_first"].precision == d["add_second"].precision == "int8", (d["add_first"], d["add_second"])
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert _agreement(qpath, folder) == (0.0, 0.0)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_sub_is_a_subtracting_int8_sum(tmp_path, act):
    """A QDQ Sub (two tensors, the constant first, a scalar) is an int8 Sum2D with ``subtract``
    computed as onnxruntime's float DQ -> Sub -> Q (it has no QLinearSub); the box decode was on the
    CPU ('no accelerator op for Sub'). The fused model's reference bodies run in plain onnxruntime."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath, result, folder = _convert(box_decode(4), tmp_path, act)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    d = result.report.decisions
    assert all(d[n].precision == "int8" for n in ("sub_first", "sub_two", "add_anchor")), d["sub_two"]
    subs = [a for a in _layers(folder) if a.get("subtract")]
    assert sorted(a["subtract"][0] for a in subs) == ["1", "2"], subs   # x2y2 - x1y1, anchors - lt
    assert all(a.get("requant", ["float"]) == ["float"] for a in subs)
    assert _agreement(qpath, folder) == (0.0, 0.0)
    fused = fuse(legalize(onnx.load(qpath)).model).model
    x = np.random.default_rng(0).standard_normal((1, 3, 10, 10)).astype(np.float32)
    # onnxruntime against itself at its basic level: DQ -> Sub -> Q in float as the ONNX spec defines
    # them, the same on every host. Its QDQ-fused int8 kernels would differ between the two graphs on
    # AVX2 (the U8S8 pair clamp), and 1.2x's session.x64quantprecision cannot load the S8 model
    # ("Attempt to replace the existing tensor": two convs share the input's Q -> DQ)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    a, b = (ort.InferenceSession(m, so, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
            for m in (qpath, fused.SerializeToString()))
    assert np.array_equal(a, b)


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_pow_lookup_and_output_pair_on_its_grid(tmp_path, act):
    """Pow by a constant joins the Lookup (it was 'no accelerator op for Pow'); the Q -> DQ after the
    output Reshape re-quantizes codes already on its grid: it stays in the region (it was the
    host's pair on the CPU), exact."""
    qpath, result, folder = _convert(head_pow_reshape(5), tmp_path, act)
    cpu = [n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph")]
    assert cpu == ["Transpose"], cpu   # only the output's layout (NHWC data reshaped to [1, 8, 64])
    d = result.report.decisions
    assert d["pow"].precision == "int8" and "Lookup" in d["pow"].reason, d["pow"]
    assert _agreement(qpath, folder) == (0.0, 0.0)


def test_lookup_table_per_channel_along_the_last_axis():
    """The table's rows follow the constant's axis: a [C] constant on [1, H, W, C] data."""
    from onnx_mrvl.fuse.qdq_lookup import _per_channel_ok
    assert _per_channel_ok(np.ones(8), [1, 4, 4, 8]) == (3, 8)
    assert _per_channel_ok(np.ones((8, 1)), [1, 8, 20]) == (1, 8)
    assert _per_channel_ok(np.ones((1, 8, 1, 1)), [1, 8, 4, 4]) == (1, 8)
    assert _per_channel_ok(np.ones((4, 8)), [1, 4, 8]) is None   # varies along two axes
    assert _per_channel_ok(np.float32(2), [1, 4, 8]) == (None, 1)


def _ln_model(c, eps):
    rng = np.random.default_rng(5)
    g = (1 + 0.1 * rng.standard_normal(c)).astype(np.float32)
    b = (0.05 * rng.standard_normal(c)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=eps)],
                              "ln", [helper.make_tensor_value_info("x", F, None)],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(g, "g"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m, g, b


@pytest.mark.parametrize("c", [32, 64, 768])
def test_int8_out_layernorm_follows_onnxruntime(c):
    """The int8_out LayerNorm's fp32 result: onnxruntime's kernel (bit for bit since its AVX2
    arithmetic is followed, tests/test_int8_layernorm_exact.py; within an ulp or two is what this
    checks), and a Q of it moves at most 1e-5 of onnxruntime's codes on 2048 rows of dequantized
    int8 data, no more than the fp16 layer's two-pass fp32 formula."""
    from onnx_mrvl.sim.norm_ops import layernorm, layernorm_onnxruntime
    m, g, b = _ln_model(c, 1e-6)
    rng = np.random.default_rng(c)
    x = (np.round(rng.standard_normal((2048, c)) * 40 + 10) * 0.05).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    y, ok = layernorm_onnxruntime(x, -1, 1e-6, g, b)
    assert ok and y.dtype == np.float32
    assert (np.abs(y - ref) <= 2.0 ** -21 * (np.abs(ref) + 1)).all()   # an ulp or two of the normalised value
    old = layernorm(x, -1, 1e-6, g, b, fp16=False)[0]
    assert (y != ref).sum() < 0.6 * (old != ref).sum()
    for s in (0.02, 0.05):
        codes = np.rint(ref / np.float32(s))
        moved, moved_before = (np.rint(y / np.float32(s)) != codes).sum(), (np.rint(old / np.float32(s)) != codes).sum()
        assert moved <= moved_before and moved <= 1e-5 * y.size, (s, moved, moved_before)


def test_int8_softmax_float_requant_is_onnxruntime_float_softmax():
    """requant float: DQ -> fp32 Softmax -> Q, as onnxruntime runs an unfused group (any types)."""
    from onnx_mrvl.sim.int8_transformer import Int8Softmax
    params = dict(in_scale=0.07, in_zero_point=-3, in_dtype="int8", out_scale=1 / 255, out_zero_point=-128,
                  out_dtype="int8", requant="float")
    codes = np.random.default_rng(1).integers(-128, 128, (64, 21)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]),
             helper.make_node("Softmax", ["x"], ["y"], axis=-1),
             helper.make_node("QuantizeLinear", ["y", "so", "zo"], ["qy"])]
    inits = [numpy_helper.from_array(np.float32(0.07), "s"), numpy_helper.from_array(np.int8(-3), "z"),
             numpy_helper.from_array(np.float32(1 / 255), "so"), numpy_helper.from_array(np.int8(-128), "zo")]
    graph = helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("q", TensorProto.INT8, [64, 21])],
                              [helper.make_tensor_value_info("qy", TensorProto.INT8, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # the float Softmax
    ref = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"q": codes})[0]
    x = ((codes.astype(np.float32) + 3) * np.float32(0.07)).astype(np.float32)
    y, ok = Int8Softmax(params, -1).apply(x)
    got = np.rint(y / np.float32(1 / 255)).astype(np.int32) - 128
    assert ok and (got == ref.astype(np.int32)).all()
    with pytest.raises(ValueError):
        Int8Softmax(dict(params, requant="table"), -1)
