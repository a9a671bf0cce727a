"""Fusion rules on small models already in legalize's canonical form: each pattern and chained
step, the layout decisions, exclusion, and every rejection path with its reason."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnx_mrvl import opset
from onnx_mrvl.fuse import USER_EXCLUDED, fuse
from onnx_mrvl.target import Target

F = onnx.TensorProto.FLOAT
RNG = np.random.default_rng(0)


# ---------------------------------------------------------------- helpers
def model(nodes, inputs, outputs, inits=None, elem=F, opset_version=17):
    """A shape-inferred model: ``inputs`` (name, shape), ``outputs`` names, numpy initializers."""
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, elem, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, elem, None) for n in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset_version)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def node(op, ins, outs, name=None, **kw):
    return helper.make_node(op, ins, outs if isinstance(outs, list) else [outs], name=name or outs, **kw)


def w(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run([o.name for o in m.graph.output], feeds)


def fused_ok(m, target=None, **kw):
    """Fuse ``m``, check the result is valid ONNX and computes what ``m`` computes."""
    r = fuse(m, target, **kw)
    onnx.checker.check_model(r.model, full_check=True)
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in m.graph.input}
    for a, b in zip(run(m, feeds), run(r.model, feeds)):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(a).max())))
    assert set(r.decisions) == {n.name for n in m.graph.node}       # one record per node
    return r


def ops(r):
    return [n.op_type for n in r.model.graph.node]


def mrvl(r, op):
    found = [n for n in r.model.graph.node if n.op_type == op and n.domain == opset.DOMAIN]
    assert found, ops(r)
    return found


def attrs(n):
    return opset.node_attrs(n)


def conv_model(tail, c=4, cout=6, extra_inits=None, k=3, **conv_kw):
    """x[1,c,8,8] -> Conv(k x k, pad 1) -> tail nodes (consume 'y0', produce 'out')."""
    kw = dict(kernel_shape=[k, k], pads=[k // 2] * 4)
    kw.update(conv_kw)
    inits = {"W": w(cout, c // kw.get("group", 1), k, k), "B": w(cout)}
    inits.update(extra_inits or {})
    return model([node("Conv", ["x", "W", "B"], "y0", name="conv", **kw)] + tail,
                 [("x", [1, c, 8, 8])], ["out"], inits)


# ---------------------------------------------------------------- conv chains and activations
ACTIVATION_TAILS = {
    "relu": ([node("Relu", ["y0"], "out")], {}, {}),
    "clamp": ([node("Clip", ["y0", "lo", "hi"], "out")], {"lo": np.float32(0), "hi": np.float32(6)},
              dict(activation_min=0.0, activation_max=6.0)),
    "leaky_relu": ([node("LeakyRelu", ["y0"], "out", alpha=0.2)], {}, dict(activation_alpha=pytest.approx(0.2))),
    "prelu": ([node("PRelu", ["y0", "slope"], "out")], {"slope": np.linspace(0.1, 0.6, 6, dtype=np.float32)
                                                          .reshape(6, 1, 1)}, {}),
    "sigmoid": ([node("Sigmoid", ["y0"], "out")], {}, {}),
    "tanh": ([node("Tanh", ["y0"], "out")], {}, {}),
    "hard_sigmoid": ([node("HardSigmoid", ["y0"], "out", alpha=0.3, beta=0.4)], {},
                     dict(activation_alpha=pytest.approx(0.3), activation_beta=pytest.approx(0.4))),
    "hard_swish": ([node("HardSwish", ["y0"], "out")], {}, {}),
    "silu": ([node("Sigmoid", ["y0"], "sig"), node("Mul", ["y0", "sig"], "out")], {}, {}),
    "hard_swish_gated": ([node("HardSigmoid", ["y0"], "hs", alpha=1 / 6, beta=0.5),
                          node("Mul", ["hs", "y0"], "out")], {}, {}),
}


@pytest.mark.parametrize("kind", sorted(ACTIVATION_TAILS))
def test_conv_activation_fused(kind):
    tail, inits, extra = ACTIVATION_TAILS[kind]
    r = fused_ok(conv_model(tail, extra_inits=inits))
    (conv,) = mrvl(r, "Conv2D")
    a = attrs(conv)
    assert a["activation"] == kind.replace("_gated", "")
    for key, value in extra.items():
        assert a[key] == value
    assert ops(r).count("Conv2D") == 1 and len(ops(r)) == 3     # LayoutTransform, Conv2D, LayoutTransform
    assert all(d.placement == "accelerator" and d.mrvl_node == conv.name for d in r.decisions.values())
    if kind == "prelu":
        assert len(conv.input) == 4                          # X, W, B, slope


def test_hard_sigmoid_gate_with_other_params_is_not_hard_swish():
    tail = [node("HardSigmoid", ["y0"], "hs", alpha=0.2, beta=0.5), node("Mul", ["y0", "hs"], "out")]
    r = fused_ok(conv_model(tail))
    assert attrs(mrvl(r, "Conv2D")[0]).get("activation", "none") == "none"
    # the gate alone runs as Mul2D(y0, 1) + hard_sigmoid; the product of two tensors is a second Mul2D
    gate, prod = mrvl(r, "Mul2D")
    assert r.decisions["hs"].mrvl_node == gate.name and attrs(gate)["activation"] == "hard_sigmoid"
    assert attrs(prod).get("activation", "none") == "none" and r.decisions["out"].mrvl_node == prod.name


def test_per_channel_add_mul_add_fold_into_conv():
    """Conv (no bias) -> Add [C,1,1] -> Mul [1,C,1,1] -> Add scalar -> Relu: one Conv2D."""
    tail = [node("Add", ["y0", "b1"], "a1"), node("Mul", ["s1", "a1"], "m1"), node("Add", ["m1", "b2"], "a2"),
            node("Relu", ["a2"], "out")]
    inits = {"W": w(6, 4, 3, 3), "b1": w(6, 1, 1), "s1": w(1, 6, 1, 1) + 1, "b2": np.float32(0.3)}
    m = model([node("Conv", ["x", "W"], "y0", name="conv", kernel_shape=[3, 3], pads=[1] * 4)] + tail,
              [("x", [1, 4, 8, 8])], ["out"], inits)
    r = fused_ok(m)
    assert [o for o in ops(r) if o != "LayoutTransform"] == ["Conv2D"]
    assert {d.composite for d in r.decisions.values()} == {"mrvl.conv2d_nhwc2nhwc"}


def test_batchnorm_folds_into_conv_and_fc():
    """Conv -> BN -> Relu and Gemm -> BN -> Mul (per feature) fold exactly (not yet legalized)."""
    bn = lambda c: {f"{k}{c}": v for k, v in  # noqa: E731
                    dict(g=RNG.uniform(0.5, 1.5, c), b=w(c), m=w(c), v=RNG.uniform(0.5, 1.5, c)).items()}
    inits = {"W": w(6, 4, 3, 3), "B": w(6), "W2": w(5, 96), "B2": w(5), "s": w(5) + 2}
    inits.update({k: np.asarray(v, np.float32) for k, v in {**bn(6), **bn(5)}.items()})
    m = model([node("Conv", ["x", "W", "B"], "c", kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2]),
               node("BatchNormalization", ["c", "g6", "b6", "m6", "v6"], "bn1", epsilon=1e-3),
               node("Relu", ["bn1"], "r"), node("Flatten", ["r"], "f"),
               node("Gemm", ["f", "W2", "B2"], "fc", transB=1),
               node("BatchNormalization", ["fc", "g5", "b5", "m5", "v5"], "bn2"), node("Mul", ["bn2", "s"], "out")],
              [("x", [2, 4, 8, 8])], ["out"], inits)
    r = fused_ok(m)
    assert ops(r) == ["LayoutTransform", "Conv2D", "Flatten", "FC"]
    assert {d.node: d.mrvl_node for d in r.decisions.values()} == {
        "c": "mrvl_c", "bn1": "mrvl_c", "r": "mrvl_c", "f": "mrvl_f", "fc": "mrvl_fc", "bn2": "mrvl_fc",
        "out": "mrvl_fc"}


def test_spatial_add_is_not_folded():
    """A constant varying over H, W is not per channel: it stays a Sum2D with a constant operand."""
    r = fused_ok(conv_model([node("Add", ["y0", "hw"], "out")], extra_inits={"hw": w(1, 1, 8, 8)}))
    assert r.decisions["out"].mrvl_node == mrvl(r, "Sum2D")[0].name
    assert "LayoutTransform" in ops(r) and "Transpose" not in ops(r)


def test_depthwise_with_multiplier():
    r = fused_ok(conv_model([node("Relu", ["y0"], "out")], c=4, cout=8, group=4))
    a = attrs(mrvl(r, "Conv2D")[0])
    assert a["group"] == 4 and a["channels"] == 8
    kernel = next(t for t in r.model.graph.initializer if t.name.endswith("kernel_ohwi"))
    assert list(kernel.dims) == [8, 3, 3, 1]


def test_fc_gemm_and_matmul_with_bias_and_activation():
    m = model([node("Gemm", ["x", "W1", "B1"], "g1", transB=1), node("Relu", ["g1"], "r1"),
               node("MatMul", ["r1", "W2"], "g2"), node("Add", ["g2", "B2"], "a2"),
               node("Sigmoid", ["a2"], "out")],
              [("x", [2, 12])], ["out"], {"W1": w(7, 12), "B1": w(7), "W2": w(7, 5), "B2": w(5)})
    r = fused_ok(m)
    assert ops(r) == ["FC", "FC"]
    assert [attrs(n)["activation"] for n in r.model.graph.node] == ["relu", "sigmoid"]


# ---------------------------------------------------------------- flatten before FC (NHWC order)
@pytest.mark.parametrize("flatten", ["reshape", "flatten"])
def test_flatten_to_fc_needs_weight_transform(flatten):
    """Conv -> flatten (C*H*W) -> Gemm: the FC reads the NHWC tensor flattened as it is stored, so its
    weights are marked ``weights_need_transform`` and no layout change sits between them."""
    fl = (node("Reshape", ["c1", "shape"], "f") if flatten == "reshape" else node("Flatten", ["c1"], "f"))
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[3, 3], pads=[1] * 4), fl,
               node("Gemm", ["f", "W2", "B2"], "out", transB=1)],
              [("x", [1, 3, 4, 5])], ["out"],
              {"W": w(6, 3, 3, 3), "B": w(6), "W2": w(10, 120), "B2": w(10),
               "shape": np.array([1, 120], np.int64)})
    r = fused_ok(m)
    assert "Transpose" not in ops(r) and ops(r).count("LayoutTransform") == 1
    fc = mrvl(r, "FC")[0]
    assert attrs(fc)["weights_need_transform"] == 1 and attrs(fc)["flatten_shape"] == [1, 4, 5, 6]


def test_pooled_1x1_flattens_without_transform():
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[1, 1]), node("GlobalAveragePool", ["c1"], "p"),
               node("Flatten", ["p"], "f"), node("Gemm", ["f", "W2", "B2"], "out", transB=1)],
              [("x", [1, 3, 4, 5])], ["out"], {"W": w(6, 3, 1, 1), "B": w(6), "W2": w(10, 6), "B2": w(10)})
    r = fused_ok(m)
    assert ops(r) == ["LayoutTransform", "Conv2D", "GlobalAvgPool2D", "Flatten", "FC"]
    assert "weights_need_transform" not in attrs(mrvl(r, "FC")[0])


@pytest.mark.parametrize("shape,stored,converts", [([1, 6, 20, 1], [1, 20, 1, 6], False),   # merges H, W
                                                  ([1, 2, 3, 20], [1, 20, 2, 3], False),   # splits C too
                                                  ([1, 24, 5], [1, 24, 5], True)])         # merges C, H
def test_reshape_runs_on_nhwc_storage_when_it_can(shape, stored, converts):
    """A reshape that only splits/merges runs of axes in order in NHWC storage runs on the stored
    data (its output stays permuted); otherwise its input is converted once."""
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[1, 1]), node("Reshape", ["c1", "s"], "r"),
               node("Exp", ["r"], "out")],
              [("x", [1, 3, 4, 5])], ["out"], {"W": w(6, 3, 1, 1), "B": w(6), "s": np.array(shape, np.int64)})
    r = fused_ok(m)
    (reshape,) = mrvl(r, "Reshape")
    assert attrs(reshape)["shape"] == stored
    producer = {o: n for n in r.model.graph.node for o in n.output}
    assert (producer[reshape.input[0]].op_type == "LayoutTransform") == converts
    assert ops(r).count("LayoutTransform") == 1 + converts


def test_channel_shuffle_moves_data_once():
    """Conv -> Reshape [N,g,C/g,H,W] -> Transpose -> Reshape [N,C,H,W] -> Conv (ShuffleNet): the
    shuffle is one transpose of the NHWC data, on the accelerator: a block rotation (a Reshape to
    the view [H*W, g, C/g, 1] and its NCHW->NHWC LayoutTransform), no CPU Transpose."""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[1, 1]), node("Reshape", ["c1", "s5"], "r5"),
               node("Transpose", ["r5"], "t5", perm=[0, 2, 1, 3, 4]), node("Reshape", ["t5", "s4"], "r4"),
               node("Conv", ["r4", "W2", "B2"], "out", kernel_shape=[3, 3], pads=[1] * 4, group=6)],
              [("x", [1, 3, 4, 5])], ["out"],
              {"W1": w(6, 3, 1, 1), "B1": w(6), "W2": w(6, 1, 3, 3), "B2": w(6),
               "s5": np.array([1, 2, 3, 4, 5], np.int64), "s4": np.array([1, 6, 4, 5], np.int64)})
    r = fused_ok(m)
    assert ops(r) == ["LayoutTransform", "Conv2D", "Reshape", "Reshape", "LayoutTransform", "Reshape", "Reshape",
                      "Conv2D", "LayoutTransform"]
    rot = r.model.graph.node[3:6]
    assert [attrs(n).get("shape") for n in rot] == [[20, 2, 3, 1], None, [1, 4, 5, 3, 2]]
    assert attrs(rot[1])["src_layout"] == "NCHW" and attrs(rot[1])["dst_layout"] == "NHWC"


def test_space_to_depth_after_a_conv_with_unit_axes():
    """Conv -> Reshape [1,C,H,1,4,12] -> Transpose [0,3,5,1,2,4] -> Reshape [1,48,H,4] -> Conv (legalize's
    space-to-depth for a stride-12 conv, after a conv): the merged block (1, 12, C) holds a unit axis
    stored before the W/4 axis; the output storage must follow the block's data, not the unit axis
    (was: wrong numbers)."""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[3, 3], pads=[1] * 4),
               node("Reshape", ["c1", "s6"], "r6"), node("Transpose", ["r6"], "t6", perm=[0, 3, 5, 1, 2, 4]),
               node("Reshape", ["t6", "s4"], "r4"),
               node("Conv", ["r4", "W2", "B2"], "out", kernel_shape=[3, 1], pads=[1, 0, 1, 0])],
              [("x", [1, 4, 5, 48])], ["out"],
              {"W1": w(4, 4, 3, 3), "B1": w(4), "W2": w(8, 48, 3, 1), "B2": w(8),
               "s6": np.array([1, 4, 5, 1, 4, 12], np.int64), "s4": np.array([1, 48, 5, 4], np.int64)})
    r = fused_ok(m)
    assert "Transpose" not in ops(r) and ops(r).count("LayoutTransform") == 2


def test_cpu_slices_of_the_input_share_one_layout_transform():
    """Slices of the input (legalize's tiling of a large kernel): a start crop ([1:6] of 6 rows) is a
    one-hot depthwise Conv2D (test_fuse_torch_idioms.py) on the NHWC input; an end trim read only by
    Convs is a Mrvl Slice of the input as stored (slices_nd's input windows, test_fuse_input_window_
    slices.py; it stayed a CPU Slice before): no CPU op, one region."""
    m = model([node("Slice", ["x", "s0", "e0", "ax"], "t0"), node("Slice", ["x", "s1", "e1"], "t1"),
               node("Conv", ["t0", "W1", "B1"], "c0", kernel_shape=[2, 2]),
               node("Conv", ["t1", "W2", "B2"], "c1", kernel_shape=[2, 2]), node("Add", ["c0", "c1"], "out")],
              [("x", [1, 3, 6, 6])], ["out"],
              {"s0": np.array([0], np.int64), "e0": np.array([5], np.int64), "ax": np.array([2], np.int64),
               "s1": np.array([0, 0, 1, 0], np.int64), "e1": np.array([1, 3, 6, 6], np.int64),
               "W1": w(4, 3, 2, 2), "B1": w(4), "W2": w(4, 3, 2, 2), "B2": w(4)})
    r = fused_ok(m)
    assert "Slice" not in ops(r) and ops(r).count("Conv2D") == 3 and ops(r).count("Slice2D") == 1
    assert r.decisions["t1"].composite == "mrvl.conv2d_nhwc2nhwc"
    assert (r.decisions["t0"].placement, r.decisions["t0"].composite) == ("accelerator", "mrvl.slice")


def test_cpu_split_and_relu_keep_the_nhwc_layout():
    """CPU ops that compute the same on permuted data (Split on a spatial axis, Exp) run on the
    NHWC tensors between accelerator ops: no layout change around them. (A Split on the channel
    axis is a Mrvl Slice2D per output: test_channel_split_becomes_slice2d.)"""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[1, 1]),
               node("Split", ["c1", "sp"], ["a", "b"], name="split", axis=2),
               node("Conv", ["a", "W2", "B2"], "c2", kernel_shape=[1, 1]),
               node("Concat", ["c2", "b"], "cat", axis=1), node("Exp", ["cat"], "r"),
               node("Conv", ["r", "W3", "B3"], "out", kernel_shape=[1, 1])],
              [("x", [1, 3, 4, 5])], ["out"],
              {"W1": w(6, 3, 1, 1), "B1": w(6), "W2": w(4, 6, 1, 1), "B2": w(4), "W3": w(2, 10, 1, 1), "B3": w(2),
               "sp": np.array([2, 2], np.int64)})
    r = fused_ok(m)
    assert ops(r).count("LayoutTransform") == 2 and "Transpose" not in ops(r)
    split = next(n for n in r.model.graph.node if n.op_type == "Split")
    assert attrs(split)["axis"] == 1 and all(o.endswith("__nhwc") for o in split.output)
    assert "split on axis 2" in r.decisions["split"].reason
    assert {p.key: p.value for p in split.metadata_props}["mrvl.storage"] == "[0, 2, 3, 1]"
    assert r.decisions["split"].placement == "cpu" and r.decisions["r"].placement == "cpu"


def _channel_split_model(form):
    """Conv -> Split on channels (7 channels, in every ONNX form) -> a Conv per part -> Concat."""
    sizes = [3, 3, 1] if form in ("attr", "input", "num_outputs") else [7]
    opset_version = {"attr": 11, "input": 13, "num_outputs": 18, "equal": 13}[form]
    outs = ["p0", "p1", "p2"] if len(sizes) == 3 else ["p0"]
    kw, ins, inits = {}, ["c1"], {"W1": w(7, 3, 1, 1), "B1": w(7)}
    if form == "attr":
        kw["split"] = sizes
    elif form == "input":
        ins.append("sp")
        inits["sp"] = np.array(sizes, np.int64)
    elif form == "num_outputs":
        kw["num_outputs"] = 3
    nodes = [node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[1, 1]),
             node("Split", ins, outs, name="split", axis=1, **kw)]
    for k, (o, c) in enumerate(zip(outs, sizes)):
        nodes.append(node("Conv", [o, f"W{o}", f"B{o}"], f"q{k}", kernel_shape=[1, 1]))
        inits.update({f"W{o}": w(2, c, 1, 1), f"B{o}": w(2)})
    nodes.append(node("Concat", [f"q{k}" for k in range(len(outs))], "out", axis=1))
    return model(nodes, [("x", [1, 3, 4, 5])], ["out"], inits, opset_version=opset_version), sizes


@pytest.mark.parametrize("form", ["attr", "input", "num_outputs", "equal"])
def test_channel_split_becomes_slice2d(form):
    """Split on the channel axis (opset 11 attribute, opset 13 input, opset 18 num_outputs with a
    smaller last chunk, no sizes) -> one Mrvl Slice2D per output on the NHWC data, no layout change."""
    m, sizes = _channel_split_model(form)
    r = fused_ok(m)
    assert ops(r).count("LayoutTransform") == 2 and "Transpose" not in ops(r) and "Split" not in ops(r)
    sl = mrvl(r, "Slice2D")
    bounds = np.cumsum([0] + sizes)
    assert [(attrs(n)["axis"], attrs(n)["start"], attrs(n)["end"]) for n in sl] == \
        [(3, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]
    d = r.decisions["split"]
    assert d.placement == "accelerator" and d.composite == "mrvl.slice" and d.mrvl_node == sl[0].name
    assert all(json_storage(n) == [0, 2, 3, 1] for n in sl)


def json_storage(n):
    return json.loads({p.key: p.value for p in n.metadata_props}["mrvl.storage"])


def test_channel_slice_becomes_slice2d_on_the_stored_layout():
    """Slice on axis 1 (negative end, full ranges on other axes) -> Slice2D; an input stored NCHW
    (a model input read by CPU ops only) is sliced on axis 1 without a layout change."""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[1, 1]),
               node("Slice", ["c1", "s0", "e0", "a0"], "t0", name="slice_nhwc"),
               node("Conv", ["t0", "W2", "B2"], "out", kernel_shape=[1, 1]),
               node("Slice", ["y", "s1", "e1"], "t1", name="slice_nchw"), node("Softplus", ["t1"], "out2")],
              [("x", [1, 3, 4, 5]), ("y", [1, 3, 4, 5])], ["out", "out2"],
              {"W1": w(6, 3, 1, 1), "B1": w(6), "W2": w(2, 4, 1, 1), "B2": w(2),
               "s0": np.array([1], np.int64), "e0": np.array([-1], np.int64), "a0": np.array([1], np.int64),
               "s1": np.array([0, 1, 0, 0], np.int64), "e1": np.array([1, 3, 99, 5], np.int64)})
    r = fused_ok(m)
    by = {tuple(json.loads(opset_origin(n))): n for n in mrvl(r, "Slice2D")}
    assert attrs(by[("slice_nhwc",)]) == {"axis": 3, "start": 1, "end": 5}
    assert attrs(by[("slice_nchw",)]) == {"axis": 1, "start": 1, "end": 3}
    assert by[("slice_nchw",)].input[0] == "y" and ops(r).count("LayoutTransform") == 2


def opset_origin(n):
    return {p.key: p.value for p in n.metadata_props}["mrvl.origin"]


def test_squeeze_family_names():
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[1, 1]), node("GlobalMaxPool", ["c1"], "p"),
               node("Reshape", ["p", "s"], "out")],
              [("x", [2, 3, 4, 5])], ["out"], {"W": w(6, 3, 1, 1), "B": w(6), "s": np.array([2, 6], np.int64)})
    r = fused_ok(m)
    assert "Flatten" in ops(r) and "GlobalMaxPool2D" in ops(r)


# ---------------------------------------------------------------- resize, concat, eltwise
@pytest.mark.parametrize("ctm,mode,fused", [("asymmetric", "floor", True), ("half_pixel", "round_prefer_floor", True),
                                            ("tf_half_pixel_for_nn", "floor", True),
                                            ("pytorch_half_pixel", "round_prefer_floor", True),
                                            ("align_corners", "round_prefer_floor", False),
                                            ("asymmetric", "ceil", False), ("asymmetric", "round_prefer_ceil", False),
                                            ("half_pixel", "round_prefer_ceil", True)])
def test_resize_coordinate_modes(ctm, mode, fused):
    m = model([node("Relu", ["x"], "x1"), node("Conv", ["x1", "W", "B"], "c1", kernel_shape=[1, 1]),
               node("Resize", ["c1", "", "sc"], "out", mode="nearest", coordinate_transformation_mode=ctm,
                    nearest_mode=mode)],
              [("x", [1, 3, 4, 5])], ["out"], {"W": w(3, 3, 1, 1), "B": w(3), "sc": np.array([1, 1, 2, 3], np.float32)})
    r = fused_ok(m)
    d = r.decisions["out"]
    assert (d.placement == "accelerator") == fused, d
    if fused:
        assert attrs(mrvl(r, "Resize")[0])["scales"] == [2, 3]
    else:
        assert "not a pixel repeat" in d.reason


def test_resize_linear_and_fractional_scale_rejected():
    common = dict(coordinate_transformation_mode="asymmetric")
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[1, 1]),
               node("Resize", ["c1", "", "s2"], "lin", mode="cubic", **common),   # linear fuses (bilinear)
               node("Resize", ["c1", "", "", "sz"], "frac", mode="nearest", nearest_mode="floor", **common)],
              [("x", [1, 3, 4, 4])], ["lin", "frac"],
              {"W": w(3, 3, 1, 1), "B": w(3), "s2": np.array([1, 1, 2, 2], np.float32),
               "sz": np.array([1, 3, 6, 6], np.int64)})
    r = fused_ok(m)
    assert "mode 'cubic'" in r.decisions["lin"].reason
    assert "non-integer scale 6/4" in r.decisions["frac"].reason


@pytest.mark.parametrize("axis,stored", [(1, 3), (-3, 3), (2, 1), (3, 2)])
def test_concat_axes_in_nhwc(axis, stored):
    m = model([node("Conv", ["x", "W1", "B1"], "a", kernel_shape=[1, 1]),
               node("Conv", ["x", "W2", "B2"], "b", kernel_shape=[1, 1]),
               node("Concat", ["a", "b"], "out", axis=axis)],
              [("x", [1, 3, 4, 4])], ["out"], {"W1": w(3, 3, 1, 1), "B1": w(3), "W2": w(3, 3, 1, 1), "B2": w(3)})
    r = fused_ok(m)
    assert attrs(mrvl(r, "Concat")[0])["axis"] == stored
    assert ops(r).count("LayoutTransform") == 2     # one in, one out


@pytest.mark.parametrize("act,axis", [("Relu", 1), ("PRelu", 1), ("PRelu", 2), ("Sigmoid", 3)])
def test_activation_after_concat_moves_into_the_producers(act, axis):
    """act(Concat(conv_a, conv_b)) = Concat(act(conv_a), act(conv_b)) (AlexNet's and ShuffleNet's
    split grouped convolutions): no standalone activation left on the CPU."""
    slope = {"slope": np.linspace(0.1, 0.9, 7 if axis == 1 else 3, dtype=np.float32).reshape(-1, 1, 1)}
    m = model([node("Conv", ["x", "W1", "B1"], "a", kernel_shape=[1, 1]),
               node("Conv", ["x", "W2", "B2"], "b", kernel_shape=[1, 1]),
               node("Concat", ["a", "b"], "cat", axis=axis),
               node(act, ["cat", "slope"] if act == "PRelu" else ["cat"], "act"),
               node("Conv", ["act", "W3", "B3"], "out", kernel_shape=[1, 1])],
              [("x", [1, 3, 4, 4])], ["out"],
              {"W1": w(3 if axis != 1 else 4, 3, 1, 1), "B1": w(3 if axis != 1 else 4),
               "W2": w(3, 3, 1, 1), "B2": w(3), "W3": w(2, 7 if axis == 1 else 3, 1, 1), "B3": w(2),
               **(slope if act == "PRelu" else {})})
    r = fused_ok(m)
    assert not r.decisions.by_placement("cpu")
    convs = mrvl(r, "Conv2D")
    assert [attrs(c).get("activation") for c in convs[:2]] == [act.lower()] * 2
    assert all(c.output[0].endswith(f"__{act.lower()}") for c in convs[:2])
    assert r.decisions["act"].mrvl_node == mrvl(r, "Concat")[0].name


def test_activation_after_concat_of_a_pool_stays():
    m = model([node("Conv", ["x", "W1", "B1"], "a", kernel_shape=[1, 1]),
               node("MaxPool", ["x"], "p", kernel_shape=[1, 1]),
               node("Concat", ["a", "p"], "cat", axis=1), node("Relu", ["cat"], "out")],
              [("x", [1, 3, 4, 4])], ["out"], {"W1": w(3, 3, 1, 1), "B1": w(3)})
    r = fused_ok(m)
    assert attrs(mrvl(r, "Conv2D")[0]).get("activation", "none") == "none"   # not moved into the conv
    (act,) = mrvl(r, "Mul2D")                                                # but Mul2D(cat, 1) + relu
    assert r.decisions["out"].mrvl_node == act.name and attrs(act)["activation"] == "relu"


def test_prelu_after_fc_is_absorbed():
    """The FC op has a slope input (since the transformer ops; before, this PRelu stayed on the CPU)."""
    m = model([node("Gemm", ["x", "W", "B"], "g", transB=1), node("PRelu", ["g", "s"], "out")],
              [("x", [2, 4])], ["out"], {"W": w(3, 4), "B": w(3), "s": w(3)})
    r = fused_ok(m)
    assert ops(r) == ["FC"] and r.decisions["out"].placement == "accelerator"
    assert attrs(mrvl(r, "FC")[0])["activation"] == "prelu"


def test_sum_of_two_branches_with_relu_and_broadcast_mul():
    m = model([node("Conv", ["x", "W1", "B1"], "a", kernel_shape=[3, 3], pads=[1] * 4),
               node("Conv", ["a", "W2", "B2"], "b", kernel_shape=[3, 3], pads=[1] * 4),
               node("Add", ["a", "b"], "s"), node("Relu", ["s"], "sr"), node("Mul", ["sr", "k"], "out")],
              [("x", [1, 4, 6, 6])], ["out"],
              {"W1": w(4, 4, 3, 3), "B1": w(4), "W2": w(4, 4, 3, 3), "B2": w(4), "k": w(1, 1, 6, 6)})
    r = fused_ok(m)
    assert ops(r) == ["LayoutTransform", "Conv2D", "Conv2D", "Sum2D", "Mul2D", "LayoutTransform"]
    assert attrs(mrvl(r, "Sum2D")[0])["activation"] == "relu"


# ---------------------------------------------------------------- layout
def test_chain_has_no_transpose_inside():
    """Conv -> MaxPool -> Conv -> Add -> Concat -> AvgPool -> Conv: one LayoutTransform in, one out."""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[3, 3], pads=[1] * 4),
               node("Relu", ["c1"], "r1"), node("MaxPool", ["r1"], "p1", kernel_shape=[2, 2], strides=[2, 2]),
               node("Conv", ["p1", "W2", "B2"], "c2", kernel_shape=[3, 3], pads=[1] * 4),
               node("Add", ["c2", "p1"], "s"), node("Concat", ["s", "p1"], "cat", axis=1),
               node("AveragePool", ["cat"], "ap", kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=1),
               node("Conv", ["ap", "W3", "B3"], "out", kernel_shape=[1, 1])],
              [("x", [1, 4, 8, 8])], ["out"],
              {"W1": w(4, 4, 3, 3), "B1": w(4), "W2": w(4, 4, 3, 3), "B2": w(4), "W3": w(5, 8, 1, 1), "B3": w(5)})
    r = fused_ok(m)
    names = ops(r)
    assert names[0] == names[-1] == "LayoutTransform" and names.count("LayoutTransform") == 2
    assert "Transpose" not in names
    assert attrs(r.model.graph.node[0]) == {"src_layout": "NCHW", "dst_layout": "NHWC"}
    assert attrs(r.model.graph.node[-1]) == {"src_layout": "NHWC", "dst_layout": "NCHW"}


@pytest.mark.parametrize("op", ["LpNormalization", "Hardmax"])   # (LRN was the first: a Mrvl op now, test_lrn.py)
def test_one_layout_transform_at_each_cpu_boundary(op):
    """A CPU node between two accelerator ops: one LayoutTransform to NCHW before it, one back after,
    shared by all consumers. A Hardmax (opset >= 13: one axis; Softmax and LogSoftmax are Mrvl ops now) runs on the NHWC data, its axis
    remapped: no LayoutTransform around it."""
    m = model([node("Conv", ["x", "W1", "B1"], "c1", kernel_shape=[1, 1]),
               node(op, ["c1"], "sm", axis=1),
               node("Conv", ["sm", "W2", "B2"], "c2", kernel_shape=[1, 1]),
               node("Conv", ["sm", "W3", "B3"], "c3", kernel_shape=[1, 1]),
               node("Add", ["c2", "c3"], "out")],
              [("x", [1, 4, 5, 5])], ["out"],
              {"W1": w(4, 4, 1, 1), "B1": w(4), "W2": w(4, 4, 1, 1), "B2": w(4), "W3": w(4, 4, 1, 1), "B3": w(4)})
    r = fused_ok(m)
    assert ops(r).count("LayoutTransform") == (4 if op == "LpNormalization" else 2) and "Transpose" not in ops(r)
    assert r.decisions["sm"].placement == "cpu" and r.decisions["sm"].reason == f"no accelerator op for {op}"
    if op == "Hardmax":
        sm = next(n for n in r.model.graph.node if n.op_type == "Hardmax")
        assert attrs(sm)["axis"] == 3


def test_tf_style_nhwc_input_and_output_need_no_layout_transform():
    """NHWC input -> Transpose to NCHW -> Conv ... -> Transpose back to NHWC output: the transposes
    are relabellings of the NHWC data the accelerator uses anyway."""
    m = model([node("Transpose", ["x"], "xt", perm=[0, 3, 1, 2]),
               node("Conv", ["xt", "W", "B"], "c1", kernel_shape=[3, 3], pads=[1] * 4),
               node("Relu", ["c1"], "r1"), node("MaxPool", ["r1"], "p1", kernel_shape=[2, 2], strides=[2, 2]),
               node("Transpose", ["p1"], "out", perm=[0, 2, 3, 1])],
              [("x", [1, 8, 8, 3])], ["out"], {"W": w(5, 3, 3, 3), "B": w(5)})
    r = fused_ok(m)
    assert ops(r) == ["Conv2D", "MaxPool2D"], ops(r)
    assert r.model.graph.node[0].input[0] == "x" and r.model.graph.node[-1].output[0] == "out"
    for t in ("xt", "out"):
        assert r.decisions[t].placement == "accelerator" and "no data movement" in r.decisions[t].reason


def test_tf_style_input_feeding_fc_through_flatten():
    m = model([node("Transpose", ["x"], "xt", perm=[0, 3, 1, 2]),
               node("Conv", ["xt", "W", "B"], "c1", kernel_shape=[1, 1]), node("Flatten", ["c1"], "f"),
               node("Gemm", ["f", "W2", "B2"], "out", transB=1)],
              [("x", [1, 4, 4, 3])], ["out"], {"W": w(5, 3, 1, 1), "B": w(5), "W2": w(6, 80), "B2": w(6)})
    r = fused_ok(m)
    assert ops(r) == ["Conv2D", "Flatten", "FC"]


def test_transpose_between_cpu_ops_stays():
    m = model([node("Hardmax", ["x"], "s", axis=1), node("Transpose", ["s"], "t", perm=[0, 2, 3, 1]),
               node("Hardmax", ["t"], "out", axis=-1)], [("x", [1, 3, 4, 5])], ["out"])
    r = fused_ok(m)
    assert ops(r) == ["Hardmax", "Transpose", "Hardmax"]
    assert r.decisions["t"].placement == "cpu"


# ---------------------------------------------------------------- exclusion
def test_exclude_by_name_type_and_reason():
    tail = [node("Relu", ["y0"], "r"), node("Conv", ["r", "W2", "B2"], "out", name="conv2", kernel_shape=[1, 1])]
    m = conv_model(tail, extra_inits={"W2": w(6, 6, 1, 1), "B2": w(6)})
    r = fused_ok(m, exclude=["conv2"])
    assert r.decisions["conv2"].placement == "cpu" and r.decisions["conv2"].reason == USER_EXCLUDED
    assert attrs(mrvl(r, "Conv2D")[0])["activation"] == "relu"
    r = fused_ok(m, exclude={"Relu": "debugging the relu"})
    assert r.decisions["r"].reason == "debugging the relu"
    assert ops(r).count("Conv2D") == 2 and attrs(mrvl(r, "Conv2D")[0]).get("activation", "none") == "none"


# ---------------------------------------------------------------- rejection reasons
def _conv_case(x_shape=(1, 4, 8, 8), wshape=(6, 4, 3, 3), wval=None, bval=None, elem=F, **kw):
    kw.setdefault("kernel_shape", list(wshape[2:]))
    wv = w(*wshape) if wval is None else wval
    inits = {"W": wv.astype(np.float64) if elem == onnx.TensorProto.DOUBLE else wv}
    ins = ["x", "W"]
    if bval is not None:
        inits["B"] = bval
        ins.append("B")
    return model([node("Conv", ins, "out", name="node", **kw)], [("x", list(x_shape))], ["out"], inits, elem=elem)


def _big_weights():
    v = w(6, 4, 3, 3)
    v[2, 1, 0, 0] = 7e4
    return v


def _nan_weights():
    v = w(6, 4, 3, 3)
    v[0, 0, 1, 1] = np.nan
    return v


REJECTIONS = {
    "batch": (lambda: _conv_case(x_shape=(9, 4, 8, 8)), "batch 9 exceeds the accelerator's limit of 8"),
    "kernel": (lambda: _conv_case(x_shape=(1, 4, 12, 12), wshape=(6, 4, 9, 9)), "kernel 9x9 exceeds the limit 7"),
    "dilation": (lambda: _conv_case(x_shape=(1, 4, 30, 30), dilations=[9, 1]), "dilation [9, 1] exceeds the limit 8"),
    "stride": (lambda: _conv_case(x_shape=(1, 4, 30, 30), strides=[9, 9]), "stride [9, 9] exceeds the limit 8"),
    "pads": (lambda: _conv_case(pads=[8, 0, 0, 0]), "padding [8, 0, 0, 0] exceeds the limit 7"),
    "grouped": (lambda: _conv_case(wshape=(6, 2, 3, 3), group=2),
                "grouped convolution (group=2) that is not depthwise"),
    "conv1d": (lambda: _conv_case(x_shape=(1, 4, 8), wshape=(6, 4, 3)), "1-D convolution"),
    "dtype": (lambda: _conv_case(elem=onnx.TensorProto.DOUBLE), "is not float32"),
    "nan": (lambda: _conv_case(wval=_nan_weights()), "W holds 1 NaN/inf values"),
    "inf_bias": (lambda: _conv_case(bval=np.array([0, 0, np.inf, 0, 0, 0], np.float32)), "B holds 1 NaN/inf values"),
    "fp16_range": (lambda: _conv_case(wval=_big_weights()), "W holds values up to 7e+04, beyond the fp16 range"),
    "fp16_after_fold": (lambda: model(
        [node("Conv", ["x", "W"], "y", name="node", kernel_shape=[1, 1]), node("Mul", ["y", "s"], "out")],
        [("x", [1, 4, 8, 8])], ["out"], {"W": np.full((6, 4, 1, 1), 3.0, np.float32),
                                         "s": np.full((1, 6, 1, 1), 3e4, np.float32)}),
        "W holds values up to 9e+04 after folding the following Mul/Add/BN, beyond the fp16 range"),
    "nonconst_weights": (lambda: model([node("Conv", ["x", "wx"], "out", name="node", kernel_shape=[3, 3])],
                                       [("x", [1, 4, 8, 8]), ("wx", [6, 4, 3, 3])], ["out"]),
                         "weights or bias are not constant initializers"),
    "fc_big_weights": (lambda: model([node("Gemm", ["x", "W"], "out", name="node", transB=1)], [("x", [1, 4])],
                                     ["out"], {"W": np.full((3, 4), -1e5, np.float32)}),
                       "W holds values up to 1e+05"),
    "fc_nonconst": (lambda: model([node("MatMul", ["x", "y"], "out", name="node")], [("x", [1, 4]), ("y", [4, 3])],
                                  ["out"]), "weights are not a constant initializer"),
    "gemm_transA": (lambda: model([node("Gemm", ["x", "W"], "out", name="node", transA=1, transB=1)],
                                  [("x", [4, 1])], ["out"], {"W": w(3, 4)}), "not in the canonical FC form"),
    "fc_rows": (lambda: model([node("MatMul", ["x", "W"], "out", name="node")], [("x", [2, 40000, 4])], ["out"],
                              {"W": w(4, 3)}), "80000 rows of an FC over [2, 40000, 4] exceed the limit 65536"),
    "fc_3d_weight": (lambda: model([node("MatMul", ["x", "W"], "out", name="node")], [("x", [2, 3, 4])], ["out"],
                                   {"W": w(2, 4, 3)}), "MatMul weight is not 2-D"),
    "pool_window": (lambda: model([node("MaxPool", ["x"], "out", name="node", kernel_shape=[17, 17])],
                                  [("x", [1, 2, 20, 20])], ["out"]), "pool window [17, 17] exceeds the limit 16"),
    # onnxruntime's output size truncates toward zero: one output, its window hanging past the edge
    # (PP-OCR rec/cls at a 1x1 input: was a CompileError "the pooling window does not fit")
    "pool_past_the_edge": (lambda: model([node("MaxPool", ["x"], "out", name="node", kernel_shape=[3, 2],
                                               strides=[3, 2])], [("x", [1, 2, 1, 4])], ["out"]),
                           "pool window [3, 2] is larger than the padded input [1, 4]"),
    "pool_indices": (lambda: model([node("MaxPool", ["x"], ["out", "idx"], name="node", kernel_shape=[2, 2])],
                                   [("x", [1, 2, 4, 4])], ["out"]), "MaxPool with an Indices output"),
    "eltwise_broadcast": (lambda: model([node("Add", ["x", "y"], "out", name="node")],
                                        [("x", [1, 2, 4, 4]), ("y", [4])], ["out"]), "broadcast across ranks"),
    "eltwise_batch_broadcast": (lambda: model([node("Mul", ["x", "y"], "out", name="node")],
                                              [("x", [2, 2, 4, 4]), ("y", [1, 2, 1, 1])], ["out"]),
                                "broadcast along the batch axis"),
    "eltwise_const_widens": (lambda: model([node("Add", ["x", "c"], "out", name="node")], [("x", [1, 2, 1, 4])],
                                           ["out"], {"c": w(1, 2, 3, 4)}), "broadcasts the tensor operand"),
    "eltwise_nan": (lambda: model([node("Mul", ["x", "c"], "out", name="node")], [("x", [1, 2, 3, 4])], ["out"],
                                  {"c": np.array([1, np.nan], np.float32).reshape(1, 2, 1, 1)}),
                    "operand holds 1 NaN/inf values"),
    "concat_batch": (lambda: model([node("Concat", ["x", "y"], "out", name="node", axis=0)],
                                   [("x", [1, 2, 3, 4]), ("y", [1, 2, 3, 4])], ["out"]), "concat on the batch axis"),
    "concat_6d": (lambda: model([node("Concat", ["x", "y"], "out", name="node", axis=1)],
                                [("x", [1, 2, 3, 1, 1, 2]), ("y", [1, 2, 3, 1, 1, 2])], ["out"]), "6-D concat"),
    "resize_cubic": (lambda: model([node("Resize", ["x", "", "s"], "out", name="node", mode="cubic")],
                                   [("x", [1, 2, 3, 4])], ["out"], {"s": np.array([1, 1, 2, 2], np.float32)}),
                     "Resize mode 'cubic'"),
    "standalone_batchnorm": (lambda: model([node("BatchNormalization", ["x", "g", "b", "m", "v"], "out", name="node")],
                                           [("x", [1, 2, 3, 4])], ["out"],
                                           {"g": w(2), "b": w(2), "m": w(2), "v": np.ones(2, np.float32)}),
                             "standalone batch normalization"),
    "standalone_activation_1d": (lambda: model([node("Relu", ["x"], "out", name="node")], [("x", [6])], ["out"]),
                                 "standalone activation on a 1-D tensor"),
    # a per-channel PRelu alone on 4-D data is a depthwise identity conv now; on 3-D it stays
    "standalone_prelu": (lambda: model([node("PRelu", ["x", "s"], "out", name="node")], [("x", [2, 3, 4])],
                                       ["out"], {"s": w(3, 1)}), "standalone activation"),
    "no_op": (lambda: model([node("Hardmax", ["x"], "out", name="node")], [("x", [1, 2, 3, 4])], ["out"]),
              "no accelerator op for Hardmax"),
    "layernorm_two_axes": (lambda: model([node("LayerNormalization", ["x", "g"], "out", name="node", axis=2)],
                                         [("x", [1, 2, 3, 4])], ["out"], {"g": w(3, 4)}),
                           "normalises 2 non-unit axes"),
}


def _symbolic_batch():
    m = _conv_case()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return onnx.shape_inference.infer_shapes(m)


REJECTIONS.update({
    "auto_pad": (lambda: _conv_case(auto_pad="SAME_UPPER"), "auto_pad not resolved to explicit pads"),
    "channels": (lambda: _conv_case(), "6 channels exceed the limit 4", Target(max_channels=4)),
    "standalone_not_in_target": (lambda: model([node("Sigmoid", ["x"], "out", name="node")], [("x", [1, 2, 3, 4])],
                                               ["out"]), "activation sigmoid is not in the target's activations",
                                 Target(activations=("relu",))),
    "fc_features": (lambda: model([node("Gemm", ["x", "W"], "out", name="node", transB=1)], [("x", [1, 40])],
                                  ["out"], {"W": w(3, 40)}), "40 features exceed the limit 32",
                    Target(max_fc_features=32)),
    "global_pool": (lambda: model([node("GlobalAveragePool", ["x"], "out", name="node")], [("x", [1, 2, 20, 20])],
                                  ["out"]), "global pool over [20, 20] exceeds the limit", Target(max_pool_kernel=4)),
    "resize_scale": (lambda: model([node("Resize", ["x", "", "s"], "out", name="node", mode="nearest",
                                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                                   [("x", [1, 2, 3, 4])], ["out"], {"s": np.array([1, 1, 16, 16], np.float32)}),
                     "scale 16 exceeds the limit 8"),
    "two_constants": (lambda: model([node("Add", ["c1", "c2"], "s", name="node"), node("Add", ["x", "s"], "out")],
                                    [("x", [1, 2, 3, 4])], ["out"], {"c1": w(1, 2, 3, 4), "c2": w(1, 2, 3, 4)}),
                      "both operands are constant"),
    "concat_const": (lambda: model([node("Concat", ["c1", "c2"], "t", name="node", axis=1),
                                    node("Exp", ["t"], "out")], [("x", [1, 4, 3, 4])],
                                   ["out"], {"c1": w(1, 2, 3, 4), "c2": w(1, 2, 3, 4)}), "every operand is a constant"),
    "reshape_batch": (lambda: model([node("Reshape", ["x", "s"], "out", name="node")], [("x", [2, 2, 3, 4])],
                                    ["out"], {"s": np.array([1, 48], np.int64)}), "across the batch axis"),
    "symbolic_shape": (_symbolic_batch, "has no static shape"),
    "fc_bias_shape": (lambda: model([node("Gemm", ["x", "W", "C"], "out", name="node", transB=1)], [("x", [2, 4])],
                                    ["out"], {"W": w(3, 4), "C": w(2, 3)}), "is not per output feature"),
})


def _split_nonconst_sizes():
    """Split whose sizes are computed (the output shapes are still known)."""
    m = model([node("Identity", ["spc"], "sp"), node("Split", ["x", "sp"], ["a", "b"], name="node", axis=1)],
              [("x", [1, 4, 3, 3])], ["a", "b"], {"spc": np.array([1, 3], np.int64)})
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info("a", F, [1, 1, 3, 3]),
                           helper.make_tensor_value_info("b", F, [1, 3, 3, 3])])
    return m


REJECTIONS.update({
    "split_axis": (lambda: model([node("Split", ["x"], ["a", "b"], name="node", axis=2)], [("x", [1, 2, 4, 3])],
                                 ["a", "b"]), "split on axis 2 (the accelerator slices the channel axis only)"),
    "split_3d": (lambda: model([node("Split", ["x"], ["a", "b"], name="node", axis=1)], [("x", [1, 4, 3])],
                               ["a", "b"]), "3-D split"),
    "split_nonconst": (_split_nonconst_sizes, "split sizes are not a constant"),
    "slice_const": (lambda: model([node("Slice", ["c", "s", "e", "a"], "t", name="node"),
                                   node("Exp", ["t"], "out")], [], ["out"],
                                  {"c": w(1, 4, 3, 3), "s": np.array([0], np.int64), "e": np.array([2], np.int64),
                                   "a": np.array([1], np.int64)}), "slice of a constant"),
    "slice_step": (lambda: model([node("Slice", ["x", "s", "e", "a", "st"], "out", name="node")], [("x", [1, 4, 3, 3])],
                                 ["out"], {"s": np.array([0], np.int64), "e": np.array([4], np.int64),
                                           "a": np.array([1], np.int64), "st": np.array([2], np.int64)}),
                   "slice with step 2"),
    "slice_spatial": (lambda: model([node("Slice", ["x", "s", "e", "a"], "out", name="node")], [("x", [1, 4, 3, 3])],
                                    ["out"], {"s": np.array([0, 1], np.int64), "e": np.array([2, 3], np.int64),
                                              "a": np.array([1, 3], np.int64)}), "slice on axis 3"),
})


@pytest.mark.parametrize("case", sorted(REJECTIONS))
def test_rejection_reason(case):
    build, reason, *target = REJECTIONS[case]
    m = build()
    r = fuse(m, *target)
    onnx.checker.check_model(r.model, full_check=True)
    d = r.decisions["node"]
    assert d.placement == "cpu" and reason in d.reason, d
    if case not in ("fp16_after_fold", "two_constants"):   # there a following node still fuses
        assert not [n for n in r.model.graph.node if n.domain == opset.DOMAIN and n.op_type != "LayoutTransform"]


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_pool_window_past_a_small_input_runs_on_the_cpu_as_onnxruntime_does(op):
    """Conv -> pool 2x2/2 -> Conv at a 1x1 input: onnxruntime computes one output from the window's part
    inside the input; the pool stays on the CPU, the convs on the accelerator, the numbers those of
    onnxruntime (was: CompileError out of convert)."""
    import onnx_mrvl
    m = model([node("Conv", ["x", "W1"], "c1", name="conv1", kernel_shape=[1, 1]),
               node(op, ["c1"], "p", name="pool", kernel_shape=[2, 2], strides=[2, 2]),
               node("Conv", ["p", "W2"], "out", name="conv2", kernel_shape=[1, 1])],
              [("x", [1, 4, 1, 1])], ["out"], {"W1": w(8, 4, 1, 1), "W2": w(6, 8, 1, 1)})
    r = onnx_mrvl.convert(m, embed=True)
    d = r.report.decisions
    assert d["pool"].placement == "cpu" and "larger than the padded input [1, 1]" in d["pool"].reason
    assert d["conv1"].placement == d["conv2"].placement == "accelerator"
    x = RNG.standard_normal((1, 4, 1, 1)).astype(np.float32)
    want = run(m, {"x": x})[0]
    got = onnx_mrvl.InferenceSession(r.model).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3 * max(1.0, float(np.abs(want).max())))


def test_target_limits_are_read_from_the_target():
    m = _conv_case(x_shape=(4, 4, 8, 8))
    assert fuse(m).decisions["node"].placement == "accelerator"
    r = fuse(m, Target(max_batch=2))
    assert r.decisions["node"].reason == "batch 4 exceeds the accelerator's limit of 2"
    r = fuse(m, Target(activations=()).replace(max_kernel=2))
    assert r.decisions["node"].reason == "kernel 3x3 exceeds the limit 2"


def test_activation_not_in_target_stays_on_cpu():
    tail = [node("Sigmoid", ["y0"], "sig"), node("Mul", ["y0", "sig"], "out")]
    r = fused_ok(conv_model(tail), Target(activations=("relu",)))
    assert attrs(mrvl(r, "Conv2D")[0]).get("activation", "none") == "none"
    assert r.decisions["sig"].placement == "cpu"


@pytest.mark.parametrize("h", [1, 2])
def test_reshape_after_transpose_with_unit_axis(h):
    """Conv [1,16,h,24] -> Transpose(0,3,2,1) -> Reshape [1,24,16h] -> MatMul: with h == 1 the unit
    axis H sits first in the NHWC storage; the order of the reshaped blocks follows the axes that
    hold data (it used to follow the unit axis: the FC read scrambled rows, relative error 1)."""
    m = model([node("Conv", ["x", "W", "B"], "c1", kernel_shape=[1, 1]),
               node("Transpose", ["c1"], "t", perm=[0, 3, 2, 1]), node("Reshape", ["t", "s"], "r"),
               node("MatMul", ["r", "W2"], "out")],
              [("x", [1, 4, h, 24])], ["out"],
              {"W": w(16, 4, 1, 1), "B": w(16), "s": np.array([1, 24, 16 * h], np.int64), "W2": w(16 * h, 10)})
    r = fused_ok(m)
    assert "FC" in ops(r)
