"""LayerNorm, Softmax, GELU and the other smooth activations on the accelerator (onnx_mrvl/testing/arch_transformer.py):
structure (the ops become Mrvl nodes inside a region) and numbers (fused model in plain onnxruntime
within 1e-4; convert + onnx_mrvl.InferenceSession on the fp16 simulator within 1e-2 * max|ref| of
onnxruntime on the original, docs/simulator.md)."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.activations import make_activation
from onnx_mrvl.sim.norm_ops import layernorm as sim_layernorm, softmax as sim_softmax

from onnx_mrvl.testing import arch_transformer as A

F16_TOL = 1e-2


def feeds_for(m, seed=1, scale=1.0):
    rng = np.random.default_rng(seed)
    return {i.name: (rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]) * scale
                     ).astype(np.float32) for i in m.graph.input}


def run_ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def mrvl_ops(model):
    return [n.op_type for n in model.graph.node if n.domain == opset.DOMAIN]


def check(m, tmp_path, *, scale=1.0, force=False, want=(), cpu_ok=()):
    """Fuse and convert ``m``; every op type in ``want`` must be a Mrvl op of the fused model, the
    deployed model may hold only ``cpu_ok`` CPU ops; numbers against onnxruntime on ``m``."""
    feeds = feeds_for(m, scale=scale)
    ref = run_ort(m, feeds)
    r = fuse(legalize(m))
    onnx.checker.check_model(r.model, full_check=True)
    for a, b in zip(ref, run_ort(r.model, feeds)):
        assert float(np.max(np.abs(a - b))) <= 1e-4 * float(np.max(np.abs(a)))
    ops = mrvl_ops(r.model)
    for w in want:
        assert w in ops, (w, ops)
    res = onnx_mrvl.convert(m, force=force)
    cpu = [n.op_type for n in res.model.graph.node if not n.op_type.startswith("Subgraph")]
    assert set(cpu) <= set(cpu_ok), cpu
    assert res.subgraphs
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        err = float(np.max(np.abs(a - b)))
        assert err <= F16_TOL * float(np.max(np.abs(a))), (err, float(np.max(np.abs(a))))
    return r, res


def _in_regions(res, layer_name):
    return sum(1 for sg in res.subgraphs for n in sg.nodes_json["nodes"]
               if n.get("op") == "tvm_op" and n["attrs"]["layer_name"][0] == layer_name)


# ---------------------------------------------------------------- layer norm
@pytest.mark.parametrize("form", ["op", "torch", "torch2sub", "torch_rsqrt", "tf", "keras3"])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_last_axis_after_fc(form, affine, tmp_path):
    """FC on [B, T, D] -> layer norm (each exporter form) -> FC: one region, LayerNorm inside."""
    if form == "op" and not affine:
        pytest.skip("LayerNormalization always has a scale")
    n = A.Net(0, 17 if form == "op" else 13)
    h = n.linear("input", 24, 32)
    h = A.layernorm(n, h, [2, 5, 32], form, affine=affine)
    n.linear(h, 32, 8)
    m = n.model("ln", [("input", [2, 5, 24])], "output")
    res = legalize(m)
    legal, rep = res.model, res.report
    assert legal.opset_import[0].version == 17      # raised from 13 for LayerNormalization
    assert [x.op_type for x in legal.graph.node].count("LayerNormalization") == 1
    assert not any(x.op_type in ("ReduceMean", "Sqrt", "Pow", "Reciprocal") for x in legal.graph.node)
    r, res = check(m, tmp_path, want=["LayerNorm"])
    assert len(res.subgraphs) == 1 and _in_regions(res, "LayerNorm") == 1


@pytest.mark.parametrize("form", ["op", "torch", "tf", "keras3"])
def test_convnext_channels_first_layernorm_one_region(form, tmp_path):
    """ConvNeXt block: depthwise 7x7 -> LayerNorm over NCHW channels -> 1x1 -> GELU -> 1x1 -> Add.
    The whole block is one region: the LayerNorm runs on the NHWC data over its last axis, no
    LayoutTransform beside it."""
    m = A.convnext_block(0, form)
    r, res = check(m, tmp_path, want=["LayerNorm", "Conv2D"])
    assert len(res.subgraphs) == 1
    ln = next(x for x in r.model.graph.node if x.op_type == "LayerNorm")
    assert opset.node_attrs(ln)["axis"] == -1
    lts = [x for x in r.model.graph.node if x.op_type == "LayoutTransform"]
    assert len(lts) == 2     # the input and the output of the block only
    convs = [x for x in r.model.graph.node if x.op_type == "Conv2D"]
    assert opset.node_attrs(convs[1])["activation"] == "gelu"


def test_layernorm_read_outside_stays_decomposed():
    """A mean that something else reads is not a layer norm to rewrite: the reason is reported."""
    n = A.Net(0, 13)
    y = A.layernorm(n, "input", [1, 4, 16], "torch")
    mean = next(x for x in n.nodes if x.op_type == "ReduceMean").output[0]
    n.op("Add", [y, mean], "use_mean")
    m = n.model("ln", [("input", [1, 4, 16])], "output")
    res = legalize(m)
    legal, rep = res.model, res.report
    assert not any(x.op_type == "LayerNormalization" for x in legal.graph.node)
    assert any(rule == "layernorm_canonical" and "read outside" in why for rule, _, why in rep.skipped)


def test_layernorm_opset_bump_refused_when_an_op_changes_meaning():
    """RoiAlign's default coordinate mode changed in opset 16: the model keeps opset 13 and its
    decomposed layer norm (with the reason)."""
    n = A.Net(0, 13)
    y = A.layernorm(n, "input", [1, 8, 4, 4], "torch", axis=1)
    rois = n.const(np.array([[0, 0, 3, 3]], np.float32), "rois")
    idx = n.const(np.array([0], np.int64), "idx")
    n.op("RoiAlign", [y, rois, idx], "roi", output_height=2, output_width=2)
    m = n.model("ln", [("input", [1, 8, 4, 4])], "output")
    res = legalize(m)
    legal, rep = res.model, res.report
    assert not any(x.op_type == "LayerNormalization" for x in legal.graph.node)
    assert any("RoiAlign" in why for rule, _, why in rep.skipped if rule == "layernorm_canonical")


def test_sim_layernorm_matches_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7, 48)).astype(np.float16).astype(np.float32) * 5 + 2
    g, b = rng.uniform(0.5, 2, 48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    y, ok = sim_layernorm(x.copy(), -1, 1e-5, g, b)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + b
    assert ok and np.array_equal(y, y.astype(np.float16).astype(np.float32))
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y - ref) <= ulp)          # within 1 fp16 ulp of the exact result
    y1, _ = sim_layernorm(np.moveaxis(x, -1, 1).copy(), -2, 1e-5, g, b)   # another axis: same values
    assert np.array_equal(np.moveaxis(y1, 1, -1), y)


# ---------------------------------------------------------------- softmax
def test_sim_softmax_matches_float64():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 9, 9)) * 4).astype(np.float16).astype(np.float32)
    x[0, 0, 0, :4] = -np.inf                        # masked positions
    for axis in (-1, 1):
        y, ok = sim_softmax(x.copy(), axis)
        xd = x.astype(np.float64)
        e = np.exp(xd - xd.max(axis, keepdims=True))
        ref = e / e.sum(axis, keepdims=True)
        ulp = np.spacing(np.maximum(np.abs(ref), 2.0 ** -24).astype(np.float16)).astype(np.float64)
        assert ok and np.all(np.abs(y - ref) <= ulp)


@pytest.mark.parametrize("opset_version, axis", [(13, -1), (13, 1), (13, 2), (11, 3), (11, -1), (11, 1)])
def test_softmax_any_axis_after_conv(opset_version, axis, tmp_path):
    """Conv -> Softmax(axis) (channels, H, W) -> Conv: the Softmax is a Mrvl op on the NHWC data.
    Softmax-11 over axis 1 means over C*H*W flattened: legalize's opset conversion writes it as
    Reshape [N, C*H*W] -> Softmax -> Reshape, also on the accelerator (with layout changes around the
    flatten)."""
    n = A.Net(0, opset_version)
    w = (n.rng.standard_normal((6, 3, 3, 3)) * 0.3).astype(np.float32)
    y = n.op("Conv", ["input", n.const(w, "w")], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = n.op("Softmax", [y], "sm", axis=axis)
    w2 = (n.rng.standard_normal((4, 6, 1, 1))).astype(np.float32)
    n.op("Conv", [y, n.const(w2, "w2")], "conv2", kernel_shape=[1, 1])
    m = n.model("sm", [("input", [1, 3, 5, 7])], "output")
    r, res = check(m, tmp_path, want=["Softmax"])
    assert len(res.subgraphs) == 1 and _in_regions(res, "Softmax") == 1
    if (opset_version, axis) != (11, 1):
        assert not [x for x in r.model.graph.node if x.op_type == "LayoutTransform" and "sm" in x.name]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_opset11_over_flattened_axes_stays_on_cpu(op):
    """(Log)Softmax-11 over [C, H, W] flattened (fuse without legalize) is no one-axis op: CPU, with the reason."""
    n = A.Net(0, 11)
    n.op(op, ["input"], "sm", axis=1)
    m = n.model("sm", [("input", [1, 3, 4, 5])], "output")
    m.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, [1, 3, 4, 5]))
    d = fuse(m).decisions.by_placement("cpu")
    assert d and f"{op} over the flattened axes" in d[0].reason


def test_attention_scores_softmax_fuses():
    """The [B, H, T, T] scores of attention: Softmax over the last axis is a Mrvl Softmax (fuse);
    with the score MatMuls on the CPU the region has no conv/fc and is reverted by split."""
    m = A.encoder_block(0, "torch", "erf")
    r = fuse(legalize(m))
    assert mrvl_ops(r.model).count("Softmax") == 1
    assert mrvl_ops(r.model).count("LayerNorm") == 3


# ---------------------------------------------------------------- activations
ACTS = ["gelu", "gelu_erf_hf", "gelu_erf_tf", "gelu_tanh", "gelu_tanh_mul", "gelu_op", "gelu_op_tanh", "mish",
        "mish_op", "elu", "sigmoid", "silu", "tanh", "leaky_relu", "prelu"]
KIND = {"gelu": "gelu", "gelu_erf_hf": "gelu", "gelu_erf_tf": "gelu", "gelu_tanh": "gelu_tanh",
        "gelu_tanh_mul": "gelu_tanh", "gelu_op": "gelu", "gelu_op_tanh": "gelu_tanh", "mish": "mish",
        "mish_op": "mish", "elu": "elu", "sigmoid": "sigmoid", "silu": "silu", "tanh": "tanh",
        "leaky_relu": "leaky_relu", "prelu": "leaky_relu"}


def _opset_for(act):
    return 20 if "op" in act.split("_")[1:2] else 18 if act == "mish_op" else 13


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("after", ["fc_nd", "conv", "add"])
def test_activation_fuses_everywhere(act, after, tmp_path):
    """The activation after an FC on [B, T, D], after a Conv, and after a residual Add is absorbed
    into that layer (one region, no CPU node)."""
    n = A.Net(0, _opset_for(act))
    if after == "fc_nd":
        x = n.linear("input", 12, 20)
        shape = [("input", [2, 6, 12])]
    elif after == "conv":
        w = (n.rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32)
        x = n.op("Conv", ["input", n.const(w, "w")], "conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        shape = [("input", [1, 3, 6, 6])]
    else:
        w = (n.rng.standard_normal((3, 3, 1, 1))).astype(np.float32)
        c = n.op("Conv", ["input", n.const(w, "w")], "conv", kernel_shape=[1, 1])
        x = n.op("Add", ["input", c], "residual")
        shape = [("input", [1, 3, 6, 6])]
    y = A.activation(n, x, act)
    n.op("Add", [y, n.const(np.float32(0.25), "shift")], "after")
    m = n.model("act", shape, "output")
    r, res = check(m, tmp_path, scale=2.0)
    carriers = [x for x in r.model.graph.node if x.op_type in ("FC", "Conv2D", "Sum2D", "Mul2D")
                and opset.node_attrs(x).get("activation") == KIND[act]]
    assert carriers, mrvl_ops(r.model)
    assert len(res.subgraphs) == 1


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "mish", "elu", "gelu_op", "prelu", "silu", "sigmoid"])
def test_standalone_activation_after_a_reshape(act, tmp_path):
    """After a Mrvl Reshape (nothing absorbs it) the activation is Mul2D(x, 1) + activation."""
    n = A.Net(0, _opset_for(act))
    x = n.linear("input", 12, 20)
    x = n.op("Reshape", [x, n.const(np.array([2, 6, 4, 5], np.int64), "shape")], "split_heads")
    y = A.activation(n, x, act)
    y = n.op("Reshape", [y, n.const(np.array([2, 6, 20], np.int64), "shape")], "merge")
    n.linear(y, 20, 4)
    m = n.model("act", [("input", [2, 6, 12])], "output")
    r, res = check(m, tmp_path, scale=2.0)
    mul = [x for x in r.model.graph.node if x.op_type == "Mul2D"]
    assert len(mul) == 1 and opset.node_attrs(mul[0])["activation"] == KIND[act]


def test_gelu_with_other_reader_is_not_fused():
    """x / sqrt2 read by something else as well: not a GELU to fuse (the Erf stays on the CPU)."""
    n = A.Net(0, 13)
    x = n.linear("input", 8, 8)
    s = n.op("Div", [x, n.const(np.array(math.sqrt(2), np.float32), "sqrt2")], "div")
    a = n.op("Add", [n.op("Erf", [s]), n.const(np.float32(1), "one")])
    y = n.op("Mul", [n.op("Mul", [x, a]), n.const(np.float32(0.5), "half")])
    n.op("Add", [y, s], "other_reader")
    m = n.model("g", [("input", [2, 8])], "output")
    r = fuse(legalize(m))
    assert any(d.op_type == "Erf" for d in r.decisions.by_placement("cpu"))


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "elu", "mish"])
def test_sim_smooth_activation_within_one_fp16_ulp(act):
    x = np.linspace(-9, 9, 40001).astype(np.float32)
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    ref = {"gelu": 0.5 * xd * (1 + erf(xd / math.sqrt(2))),
           "gelu_tanh": 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd ** 3))),
           "elu": np.where(xd > 0, xd, np.expm1(np.minimum(xd, 0))),
           "mish": xd * np.tanh(np.logaddexp(0, xd))}[act]
    y = make_activation(act)(x.copy()).astype(np.float16).astype(np.float64)
    ulp = np.spacing(np.maximum(np.abs(ref), 2.0 ** -24).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y - ref) <= ulp)


# ---------------------------------------------------------------- the encoder block
ENCODERS = [("torch", "erf"), ("tf", "erf_tf"), ("op", "erf_hf"), ("torch", "tanh"), ("op", "op")]


@pytest.mark.parametrize("ln, gelu_form", ENCODERS)
def test_encoder_block_regions(ln, gelu_form, tmp_path):
    """Pre-LN encoder block: every LayerNorm and the GELU are Mrvl ops inside the regions; what is
    left on the CPU is the attention core (QK^T and AV MatMuls of two activations, the head
    Transposes, and the scale and Softmax between them: a stretch without conv/fc). Before this
    change: 4 (torch/tf forms) or 6 (opset-17 LN) regions and 10-39 CPU nodes; now 2 regions (1
    once the attention MatMuls run on the accelerator too)."""
    m = A.encoder_block(0, ln, gelu_form)
    r, res = check(m, tmp_path, cpu_ok={"MatMul", "Transpose", "Mul", "Softmax"})
    assert len(res.subgraphs) <= 2
    assert _in_regions(res, "LayerNorm") == 3
    fcs = [x for sg in res.subgraphs for x in sg.nodes_json["nodes"]
           if x.get("op") == "tvm_op" and x["attrs"]["layer_name"][0] == "FC"]
    assert sum(x["attrs"]["activation_type"][0] in ("gelu", "gelu_tanh") for x in fcs) == 1


def test_perf_model_charges_the_vector_unit(tmp_path):
    """LayerNorm / Softmax layers and a gelu epilogue cost vector-unit cycles in the perf model."""
    from onnx_mrvl.sim import Simulator
    from onnx_mrvl.target import VECTOR_LOWERINGS
    res = onnx_mrvl.convert(A.convnext_block(0, "torch"))
    sim = Simulator(res.subgraphs[0].binary)
    rows = {r.layer_name: r for r in sim.perf.layers}
    ln = rows["LayerNorm"]
    elems = 16 * 8 * 8
    lanes = 64 * 4
    assert ln.compute_cycles == math.ceil(elems * VECTOR_LOWERINGS["LayerNorm"][1] / lanes)
    conv_gelu = [r for r in sim.perf.layers if r.layer_name == "Conv2D"][1]
    assert conv_gelu.compute_cycles >= math.ceil(4 * elems * VECTOR_LOWERINGS["gelu"][1] / lanes)


def test_split_cost_model_charges_the_vector_unit():
    """The partitioner's cost model counts the same vector-unit work as the simulator's perf model."""
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.split import cost
    from onnx_mrvl.target import DEFAULT_TARGET, VECTOR_LOWERINGS
    r = fuse(legalize(A.convnext_block(0, "torch")))
    g = GraphIndex(r.model)
    ln = next(x for x in r.model.graph.node if x.op_type == "LayerNorm")
    assert cost.vector_ops(g, ln) == 16 * 8 * 8 * VECTOR_LOWERINGS["LayerNorm"][1]
    c = cost.layer_cycles(g, ln, DEFAULT_TARGET)
    assert c["compute"] == math.ceil(cost.vector_ops(g, ln) / (64 * 4))
    gelu_conv = next(x for x in r.model.graph.node if opset.node_attrs(x).get("activation") == "gelu")
    assert cost.vector_ops(g, gelu_conv) == 64 * 8 * 8 * VECTOR_LOWERINGS["gelu"][1]


def test_per_channel_prelu_alone_is_a_depthwise_identity_conv(tmp_path):
    """Concat -> PRelu(slope [C, 1, 1]) -> Conv: nothing absorbs the PRelu (a Concat carries no
    activation), so it becomes a depthwise 1x1 Conv2D with unit weights carrying prelu."""
    n = A.Net(0, 13)
    w = (n.rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float32)
    a = n.op("Conv", ["input", n.const(w, "w")], "conv_a", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    b = n.op("MaxPool", ["input"], "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    y = n.op("Concat", [a, b], "cat", axis=1)
    y = n.op("PRelu", [y, n.const(np.linspace(-0.5, 0.5, 7).reshape(7, 1, 1).astype(np.float32), "slope")])
    n.op("Conv", [y, n.const((n.rng.standard_normal((2, 7, 1, 1))).astype(np.float32), "w2")], "conv_b",
         kernel_shape=[1, 1])
    m = n.model("prelu", [("input", [1, 3, 6, 6])])
    r, res = check(m, tmp_path, scale=2.0)
    convs = [x for x in r.model.graph.node if x.op_type == "Conv2D"]
    dw = [x for x in convs if opset.node_attrs(x).get("activation") == "prelu"]
    assert len(dw) == 1 and opset.node_attrs(dw[0])["group"] == 7 and len(res.subgraphs) == 1


@pytest.mark.parametrize("ln", ["torch", "op"])
def test_vit_like_regions(ln, tmp_path):
    """ViT-style classifier, 2 layers: patch conv, class token, LayerNorms, GELU, the attention cores
    (BatchMatMul, Softmax) and the head Softmax all on the accelerator: one region, no CPU node
    (before: 10 regions with the PyTorch layer norm, 14 with LayerNormalization). The only
    LayoutTransform is the image's, before the patch conv: the class-token slice of the tokens
    runs on their stored order."""
    m = A.vit_like(0, ln)
    r, res = check(m, tmp_path)
    assert len(res.subgraphs) == 1
    assert _in_regions(res, "LayerNorm") == 5 and _in_regions(res, "Softmax") == 3
    layouts = [x for x in r.model.graph.node if x.op_type == "LayoutTransform"]
    assert len(layouts) == 1 and layouts[0].input[0] == "input", [list(x.input) for x in layouts]


@pytest.mark.parametrize("shape", [[6, 12], [2, 5, 12]])
def test_per_feature_prelu_after_fc(shape, tmp_path):
    """FC -> PRelu(slope [O]) (Keras PReLU after Dense; on [B, T, K] the slope runs along the last
    axis): the FC carries prelu with its slope input."""
    n = A.Net(0, 13)
    y = n.linear("input", 12, 9)
    y = n.op("PRelu", [y, n.const(np.linspace(-0.4, 0.4, 9).astype(np.float32), "slope")])
    n.linear(y, 9, 3)
    m = n.model("prelu_fc", [("input", shape)])
    r, res = check(m, tmp_path, scale=2.0)
    fcs = [x for x in r.model.graph.node if x.op_type == "FC"]
    assert opset.node_attrs(fcs[0])["activation"] == "prelu" and len(fcs[0].input) == 4
    assert len(res.subgraphs) == 1
