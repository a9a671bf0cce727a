"""Exporter-style graphs (PyTorch / TF / Paddle idioms) that fusion round 2 covers: squeeze-and-
excitation (broadcast Mul/Add), MatMul on N-D data with a constant 2-D weight, standalone activations
(Mul2D(x, 1) + activation), 3-D / 5-D concat and elementwise ops.

Each model: the structure of the fused model, the fused model in plain onnxruntime vs the original
within 1e-4 relative, and convert + InferenceSession (regions on the fp16 simulator) vs the original
within 1e-2 of max|ref|."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize

F = TensorProto.FLOAT


class Net:
    """A tiny graph builder with seeded weights (names are unique per op)."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.k = [], [], 0

    def _name(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self, value, base="c"):
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type, inputs, base=None, n_out=1, **attrs):
        """``base`` names the node exactly when first used (tests look nodes up by it)."""
        used = {n.name for n in self.nodes}
        name = base if base and base not in used else self._name(base or op_type.lower())
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def w(self, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def conv(self, x, cin, cout, k=3, stride=1, group=1, act="relu", bn=True):
        y = self.op("Conv", [x, self.w(cout, cin // group, k, k)] + ([] if bn else [self.w(cout, scale=0.1)]),
                    kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride] * 2, group=group)
        if bn:
            y = self.op("BatchNormalization", [y, self.const(1 + 0.1 * self.rng.standard_normal(cout).astype(np.float32)),
                                               self.w(cout, scale=0.1), self.w(cout, scale=0.1),
                                               self.const(np.abs(1 + 0.1 * self.rng.standard_normal(cout)).astype(np.float32))],
                        epsilon=1e-5)
        if act == "relu":
            y = self.op("Relu", [y])
        elif act == "silu":
            y = self.op("Mul", [y, self.op("Sigmoid", [y])])
        elif act == "hswish":
            y = self.op("HardSwish", [y])
        return y

    def model(self, inputs, outputs, opset_version=13):
        graph = helper.make_graph(self.nodes, "export", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                                  [helper.make_tensor_value_info(n, F, None) for n in outputs], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset_version)])
        m.ir_version = 8
        return onnx.shape_inference.infer_shapes(m)


# ---------------------------------------------------------------- exporter-style models
def se_mobilenetv3(seed=0):
    """MobileNetV3 / EfficientNet block: conv -> dw conv -> SE (GAP -> conv -> relu -> conv ->
    hard_sigmoid -> Mul) -> project conv -> residual Add; a second SE with Linear layers
    (GAP -> Flatten -> Gemm -> Gemm -> Sigmoid -> Reshape) whose scale is added as well."""
    n = Net(seed)
    x = n.conv("input", 3, 16, stride=2, act="hswish")
    e = n.conv(x, 16, 32, k=1, act="silu")
    d = n.conv(e, 32, 32, group=32, act="silu")
    s = n.op("GlobalAveragePool", [d])
    s = n.op("Relu", [n.op("Conv", [s, n.w(8, 32, 1, 1), n.w(8, scale=0.1)], kernel_shape=[1, 1])])
    s = n.op("Conv", [s, n.w(32, 8, 1, 1), n.w(32, scale=0.1)], kernel_shape=[1, 1])
    s = n.op("HardSigmoid", [s], alpha=1 / 6, beta=0.5)
    d = n.op("Mul", [d, s], "se_mul")
    p = n.conv(d, 32, 16, k=1, act=None)
    y = n.op("Add", [x, p], "residual")
    # SE with Linear layers, broadcast Add and Mul
    g = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    g = n.op("Relu", [n.op("Gemm", [g, n.w(4, 16), n.w(4, scale=0.1)], transB=1)])
    g = n.op("Sigmoid", [n.op("Gemm", [g, n.w(16, 4), n.w(16, scale=0.1)], transB=1)])
    g = n.op("Reshape", [g, n.const(np.array([1, 16, 1, 1], np.int64))])
    y = n.op("Add", [n.op("Mul", [y, g], "se2_mul"), g], "se2_add")
    out = n.conv(y, 16, 8, k=1, act="relu")
    return n.model([("input", [1, 3, 32, 32])], [out], opset_version=14)


def crnn_head(seed=0):
    """CRNN / PaddleOCR rec: conv backbone to height 1 -> Squeeze -> Transpose [N, W, C] -> MatMul +
    Add (bias) -> Relu -> MatMul + Add -> Softmax (CPU)."""
    n = Net(seed)
    x = n.conv("input", 3, 16, stride=2)
    x = n.conv(x, 16, 32, stride=2)
    x = n.op("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])                      # [1, 32, 1, 16]
    x = n.op("Squeeze", [x, n.const(np.array([2], np.int64))])                       # [1, 32, 16]
    x = n.op("Transpose", [x], perm=[0, 2, 1])                                       # [1, 16, 32]
    h = n.op("Relu", [n.op("Add", [n.op("MatMul", [x, n.w(32, 48)], "fc1"), n.w(48, scale=0.1)])])
    logits = n.op("Add", [n.op("MatMul", [h, n.w(48, 10)], "fc2"), n.w(10, scale=0.1)], "logits")
    out = n.op("Softmax", [logits], axis=-1)
    return n.model([("input", [1, 3, 8, 64])], [out, logits])


def audio_head(seed=0):
    """Audio / transformer feed-forward on [B, T, F] input: MatMul -> Add -> Tanh -> MatMul (no bias)
    -> Mul scale; batch 2 (the FC rows are B*T)."""
    n = Net(seed)
    h = n.op("Tanh", [n.op("Add", [n.op("MatMul", ["input", n.w(20, 24)], "proj"), n.w(24, scale=0.1)])])
    y = n.op("Mul", [n.op("MatMul", [h, n.w(24, 12)], "out_proj"), n.const(np.float32(0.5))], "scale")
    return n.model([("input", [2, 50, 20])], [y])


def yolov5_head(seed=0):
    """YOLOv5 export: per level conv [1, 3*C, H, W] -> Reshape [1, 3, C, H, W] -> Transpose
    [1, 3, H, W, C] -> Sigmoid -> Mul/Add by 5-D constants -> Reshape [1, 3HW, C]; levels
    concatenated on axis 1 (3-D concat); x*sigmoid(x) on an Add of two CPU outputs."""
    n = Net(seed)
    c = 7
    f8 = n.conv("input", 3, 16, stride=2)
    f16 = n.conv(f8, 16, 24, stride=2)
    parts = []
    for f, cin in ((f8, 16), (f16, 24)):
        h, wd = (8, 8) if f is f8 else (4, 4)
        p = n.op("Conv", [f, n.w(3 * c, cin, 1, 1), n.w(3 * c, scale=0.1)], "det", kernel_shape=[1, 1])
        p = n.op("Reshape", [p, n.const(np.array([1, 3, c, h, wd], np.int64))])
        p = n.op("Transpose", [p], perm=[0, 1, 3, 4, 2])
        p = n.op("Sigmoid", [p], "det_sigmoid")
        p = n.op("Mul", [p, n.const(np.full((1, 3, 1, 1, c), 2.0, np.float32))])
        p = n.op("Add", [p, n.const(n.rng.standard_normal((1, 3, h, wd, 1)).astype(np.float32))], "grid_add")
        parts.append(n.op("Reshape", [p, n.const(np.array([1, 3 * h * wd, c], np.int64))]))
    det = n.op("Concat", parts, "det_concat", axis=1)
    # x * sigmoid(x) where x is an Add of two CPU ops' outputs
    a = n.op("Add", [n.op("Softsign", [f16]), n.op("Softsign", [n.op("Neg", [f16])])], "cpu_add")
    gate = n.op("Mul", [a, n.op("Sigmoid", [a], "gate")], "gated")
    return n.model([("input", [1, 3, 16, 16])], [det, gate])


def db_head(seed=0):
    """PaddleOCR DB head: Conv -> BN -> Relu -> ConvTranspose -> BN -> Relu -> ConvTranspose ->
    Sigmoid."""
    n = Net(seed)
    x = n.conv("input", 3, 16, stride=2)
    x = n.conv(x, 16, 8)
    x = n.op("ConvTranspose", [x, n.w(8, 8, 2, 2), n.w(8, scale=0.1)], strides=[2, 2], kernel_shape=[2, 2])
    x = n.op("Relu", [n.op("BatchNormalization", [x, n.w(8), n.w(8), n.w(8, scale=0.1),
                                                    n.const(np.ones(8, np.float32))])])
    x = n.op("ConvTranspose", [x, n.w(8, 1, 2, 2), n.w(1, scale=0.1)], strides=[2, 2], kernel_shape=[2, 2])
    out = n.op("Sigmoid", [x], "db_sigmoid")
    return n.model([("input", [1, 3, 16, 16])], [out])


def tf_nhwc_se(seed=0):
    """TF export: NHWC input -> Transpose to NCHW -> conv -> SE scale by a Mul with [N, C, 1, 1] ->
    Transpose back to NHWC output."""
    n = Net(seed)
    x = n.op("Transpose", ["input"], perm=[0, 3, 1, 2])
    x = n.conv(x, 3, 12, act="relu")
    s = n.op("Sigmoid", [n.op("Conv", [n.op("ReduceMean", [x], axes=[2, 3], keepdims=1), n.w(12, 12, 1, 1)],
                               kernel_shape=[1, 1])])
    y = n.op("Transpose", [n.op("Mul", [x, s], "se_mul")], perm=[0, 2, 3, 1])
    return n.model([("input", [1, 10, 10, 3])], [y])


def aspp_head(seed=0):
    """torchvision DeepLabV3 ASPP on a 10x10 map: 1x1 conv, atrous 3x3 convs with rates 4, 12 and 16
    (the last two reach past the map: only their centre tap sees it), and the pooling branch (global
    pool -> 1x1 conv -> relu -> bilinear Resize back to 10x10, a broadcast), concatenated -> 1x1 conv."""
    n = Net(seed)
    x = n.conv("input", 3, 8)
    branches = [n.conv(x, 8, 8, k=1)]
    for rate in (4, 12, 16):
        y = n.op("Conv", [x, n.w(8, 8, 3, 3)], f"atrous{rate}", kernel_shape=[3, 3], pads=[rate] * 4,
                 dilations=[rate, rate])
        branches.append(n.op("Relu", [y]))
    p = n.op("Relu", [n.op("Conv", [n.op("GlobalAveragePool", [x]), n.w(8, 8, 1, 1)], kernel_shape=[1, 1])])
    roi, scales = n.const(np.zeros(0, np.float32)), n.const(np.array([1, 1, 10, 10], np.float32))
    branches.append(n.op("Resize", [p, roi, scales], "pool_resize", mode="linear",
                         coordinate_transformation_mode="half_pixel"))
    y = n.op("Concat", branches, "aspp_concat", axis=1)
    return n.model([("input", [1, 3, 10, 10])], [n.conv(y, 40, 8, k=1)])



def _repeat(n, x, shape, axis, r, pushed=False):
    """tf.repeat(x, r, axis) as tf2onnx writes it: Unsqueeze -> Tile -> (Transpose) -> Reshape.
    ``pushed``: x is the NCHW tensor and tf2onnx's NCHW -> NHWC Transpose sits after the Tile."""
    u = n.op("Unsqueeze", [x, n.const(np.array([axis + 1], np.int64))])
    reps = np.ones(len(shape) + 1, np.int64)
    reps[axis + 1] = r
    t = n.op("Tile", [u, n.const(reps)])
    out = list(shape)
    out[axis] *= r
    if pushed:   # [N, C, H, r, W] -> [N, H, r, W, C] -> [N, rH, W, C]
        t = n.op("Transpose", [t], perm=[0, 2, 3, 4, 1])
        out = [out[0], out[2], out[3], out[1]]
    return n.op("Reshape", [t, n.const(np.array(out, np.int64))])


def tf_unet(seed=0):
    """Keras 3 UNet through tf2onnx: NHWC input, layout Transposes, Conv2DTranspose (k3 s2 'same':
    pads [0, 0, 1, 1]), UpSampling2D as two tf.repeat chains (the first with the Transpose pushed
    between Tile and Reshape), Concatenate, Softmax over NCHW channels then Transpose to NHWC."""
    n = Net(seed)
    x = n.op("Transpose", ["input"], perm=[0, 3, 1, 2])
    s1 = n.conv(x, 3, 8)
    d = n.op("MaxPool", [s1], kernel_shape=[2, 2], strides=[2, 2])
    d = n.conv(d, 8, 16)
    u = n.op("ConvTranspose", [d, n.w(16, 8, 3, 3), n.w(8, scale=0.1)], "up_ct", kernel_shape=[3, 3],
             strides=[2, 2], pads=[0, 0, 1, 1])
    y = n.conv(n.op("Concat", [u, s1], axis=1), 16, 8)
    e = n.conv(y, 8, 8, stride=2)                                  # [1, 8, 8, 8]
    h = _repeat(n, e, [1, 8, 8, 8], 2, 2, pushed=True)            # NHWC [1, 16, 8, 8]
    w = _repeat(n, h, [1, 16, 8, 8], 2, 2)                         # NHWC [1, 16, 16, 8]
    y = n.op("Concat", [n.op("Transpose", [w], perm=[0, 3, 1, 2]), y], axis=1)
    y = n.op("Conv", [y, n.w(3, 16, 1, 1), n.w(3, scale=0.1)], kernel_shape=[1, 1])
    y = n.op("Transpose", [n.op("Softmax", [y], "seg_softmax", axis=1)], perm=[0, 2, 3, 1])
    return n.model([("input", [1, 16, 16, 3])], [y])


MODELS = {"se_mobilenetv3": se_mobilenetv3, "crnn_head": crnn_head, "audio_head": audio_head,
          "yolov5_head": yolov5_head, "db_head": db_head, "tf_nhwc_se": tf_nhwc_se, "aspp_head": aspp_head,
          "tf_unet": tf_unet}


# ---------------------------------------------------------------- helpers
def feeds_for(m, seed=1):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in m.graph.input}


def run_ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def rel_err(ref, got):
    return max(float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(a))), 1e-30))
               for a, b in zip(ref, got))


_FUSED = {}


def fused(name):
    if name not in _FUSED:
        original = MODELS[name]()
        r = fuse(legalize(original))
        onnx.checker.check_model(r.model, full_check=True)
        _FUSED[name] = (original, r)
    return _FUSED[name]


def mrvl_ops(r):
    return [n.op_type for n in r.model.graph.node if n.domain == opset.DOMAIN]


# ---------------------------------------------------------------- structure
def test_se_mul_and_add_broadcast_on_the_accelerator():
    original, r = fused("se_mobilenetv3")
    for name in ("se_mul", "se2_mul", "se2_add"):
        d = r.decisions[name]
        assert d.placement == "accelerator", d
    node = {n.name: n for n in r.model.graph.node}
    mul = node[r.decisions["se_mul"].mrvl_node]
    assert mul.op_type == "Mul2D" and len(mul.input) == 2   # two tensors, [1,16,16,32] * [1,1,1,32]
    # everything but the input/output conversions runs as Mrvl ops; the Linear SE's [N, C] -> [N, C, 1, 1]
    # reaches NHWC by a Mrvl Reshape (only unit axes move), not a LayoutTransform
    assert [d for d in r.decisions.values() if d.placement == "cpu"] == []
    assert mrvl_ops(r).count("LayoutTransform") == 2


def test_matmul_on_nd_data_becomes_reshape_fc_reshape():
    original, r = fused("crnn_head")
    node = {n.name: n for n in r.model.graph.node}
    for name in ("fc1", "fc2"):
        fc = node[r.decisions[name].mrvl_node]
        assert fc.op_type == "FC"
        assert opset.node_attrs(fc).get("activation", "none") == ("relu" if name == "fc1" else "none")
    # the bias Adds fold into the FCs
    assert not r.decisions.by_placement("cpu")      # the Softmax after them is a Mrvl Softmax
    ops = mrvl_ops(r)
    assert ops.count("Softmax") == 1
    assert ops.count("FC") == 2 and "Transpose" not in [n.op_type for n in r.model.graph.node]
    # Squeeze, Reshape [16, 32] -> FC -> FC -> Reshape [1, 16, 10]: no reshape back and forth between the FCs
    nodes = [n for n in r.model.graph.node if n.domain == opset.DOMAIN]
    i = [n.op_type for n in nodes].index("FC")
    assert [n.op_type for n in nodes[i - 1:i + 3]] == ["Reshape", "FC", "FC", "Reshape"]
    assert opset.node_attrs(nodes[i - 1])["shape"] == [16, 32] and opset.node_attrs(nodes[i + 2])["shape"] == [1, 16, 10]
    assert nodes[i + 1].input[0] == nodes[i].output[0]


def test_nd_fc_rows_ignore_max_batch():
    original, r = fused("audio_head")
    node = {n.name: n for n in r.model.graph.node}
    fc = node[r.decisions["proj"].mrvl_node]
    assert fc.op_type == "FC" and opset.node_attrs(fc)["activation"] == "tanh"
    assert r.decisions["out_proj"].mrvl_node == r.decisions["scale"].mrvl_node    # scale folded
    assert not r.decisions.by_placement("cpu")
    flat = next(n for n in r.model.graph.node if n.output[0] == fc.input[0])
    assert opset.node_attrs(flat)["shape"] == [100, 20]                            # rows = B*T > max_batch



@pytest.mark.parametrize("op", ["Gemm", "MatMul"])
def test_2d_fc_rows_ignore_max_batch_like_nd(op, tmp_path):
    """A 2-D [M, K] Gemm / MatMul with M > max_batch (transformer tokens, RNN heads after a
    Squeeze) is the same row-by-row FC as [1, M, K], which fc_rows fuses: it is fused too (it used
    to stay on the CPU with "batch 16 exceeds the accelerator's limit of 8"); only more than
    MAX_FC_ROWS rows is a reason."""
    from onnx_mrvl.fuse.patterns import MAX_FC_ROWS

    def model(m):
        n = Net(5)
        if op == "Gemm":
            y = n.op("Gemm", ["input", n.w(24, 40), n.w(24)], "fc", transB=1)
        else:
            y = n.op("Add", [n.op("MatMul", ["input", n.w(40, 24)], "fc"), n.w(24)])
        return n.model([("input", [m, 40])], [n.op("Tanh", [y])])

    r = _ok(model(16), tmp_path)
    assert [n.op_type for n in r.model.graph.node if n.domain == opset.DOMAIN] == ["FC"]
    assert not r.decisions.by_placement("cpu")
    # a residual Add / activation on those [M, O] rows fuses too (2-D: rows, not a batch)
    n = Net(6)
    h = n.op("Gemm", ["input", n.w(24, 40), n.w(24)], "fc1", transB=1)
    s = n.op("Add", [h, n.op("Gemm", [h, n.w(24, 24), n.w(24)], "fc2", transB=1)], "res")
    r = _ok(n.model([("input", [16, 40])], [n.op("Sigmoid", [s], "act")]), tmp_path / "res")
    assert not r.decisions.by_placement("cpu")
    assert [x.op_type for x in r.model.graph.node if x.domain == opset.DOMAIN] == ["FC", "FC", "Sum2D"]
    n = Net(8)   # the same on [16, 5, D] rows of N-D FCs
    h = n.op("MatMul", ["input", n.w(40, 24)], "mm1")
    s = n.op("Add", [h, n.op("MatMul", [h, n.w(24, 24)], "mm2")], "res3")
    r = _ok(n.model([("input", [16, 5, 40])], [n.op("Tanh", [s], "act3")]), tmp_path / "res3")
    assert not r.decisions.by_placement("cpu")
    d = fuse(model(MAX_FC_ROWS + 1)).decisions["fc"]
    assert d.placement == "cpu" and d.reason == f"{MAX_FC_ROWS + 1} rows of an FC over [{MAX_FC_ROWS + 1}, 40] exceed the limit {MAX_FC_ROWS}"


def test_2d_fc_rows_ignore_max_batch(tmp_path):
    """nn.MultiheadAttention exports its in_proj as Gemm on [L*B, E] (ViT: [197, 384]): the rows
    are not a batch, so the Gemm (and a MatMul on [rows, K]) is an FC on the accelerator."""
    n = Net(3)
    y = n.op("Gemm", ["x", n.w(48, 32), n.w(48, scale=0.1)], base="in_proj", transB=1)
    y = n.op("Relu", [y], base="act")
    y = n.op("MatMul", [y, n.w(48, 16)], base="out_proj")
    m = n.model([("x", [197, 32])], [y])
    r = _ok(m, simulate=tmp_path)
    assert not r.decisions.by_placement("cpu")
    assert r.decisions["in_proj"].mrvl_node == r.decisions["act"].mrvl_node
    assert mrvl_ops(r).count("FC") == 2


def test_yolov5_head_5d_eltwise_3d_concat_and_standalone_activations():
    original, r = fused("yolov5_head")
    for name in ("det_sigmoid", "grid_add", "det_concat", "gate", "gated"):
        assert r.decisions[name].placement == "accelerator", r.decisions[name]
    node = {n.name: n for n in r.model.graph.node}
    sig = node[r.decisions["det_sigmoid"].mrvl_node]
    assert sig.op_type == "Mul2D" and opset.node_attrs(sig)["activation"] == "sigmoid"
    gated = node[r.decisions["gate"].mrvl_node]
    assert gated is node[r.decisions["gated"].mrvl_node] and opset.node_attrs(gated)["activation"] == "silu"
    cat = node[r.decisions["det_concat"].mrvl_node]
    assert cat.op_type == "Concat"
    cpu = sorted(d.op_type for d in r.decisions.by_placement("cpu"))
    assert cpu == ["Softsign", "Softsign"]   # the Neg runs as Mul2D(x, -1) (fuse/neg.py)


def test_db_head_fully_offloaded():
    """legalize turns the ConvTransposes into phase Convs interleaved by Concat + reshapes (round 3);
    the Sigmoid, applied to each phase, goes into the phase Convs."""
    original, r = fused("db_head")
    sig = [d for k, d in r.decisions.items() if k.startswith("db_sigmoid/")]
    assert len(sig) == 4 and all(d.placement == "accelerator" and "absorbed into Conv2D" in d.reason for d in sig)   # one output: 4 phases
    assert [d.op_type for d in r.decisions.by_placement("cpu")] == []
    ops = mrvl_ops(r)
    assert {"Resize", "Mul2D", "Sum2D"}.isdisjoint(ops) and ops.count("LayoutTransform") == 1, ops   # (the input's)
    res = onnx_mrvl.convert(original)
    assert res.report.decisions["db_sigmoid"].placement == "accelerator"


def test_aspp_atrous_convs_and_pooling_resize_on_the_accelerator():
    """Legalize drops the taps of atrous convs that only read padding (rates 12 and 16 on 10x10 -> 1x1
    convs) and turns the bilinear Resize of a 1x1 map into nearest repeats (x10 = x5 then x2)."""
    original, r = fused("aspp_head")
    assert not r.decisions.by_placement("cpu")
    node = {n.name: n for n in r.model.graph.node}
    for name, k in (("atrous4", [3, 3]), ("atrous12", [1, 1]), ("atrous16", [1, 1])):
        assert opset.node_attrs(node[r.decisions[name].mrvl_node])["kernel_shape"] == k
    assert mrvl_ops(r).count("Resize") == 2


def test_tf_nhwc_se_needs_no_layout_transform():
    original, r = fused("tf_nhwc_se")
    assert r.decisions["se_mul"].placement == "accelerator"
    assert "LayoutTransform" not in mrvl_ops(r)


def test_tf_unet_one_region_softmax_on_the_stored_data():
    """ConvTranspose (phase Convs, Concat) and the tf.repeat upsampling (Resize) fuse; the Softmax over NCHW channels is a
    Mrvl Softmax over the last axis of the region's NHWC data and the final Transpose to NHWC is a
    relabelling: the deployed model is the region, nothing else (before the Mrvl Softmax: the
    region and a CPU Softmax on its NHWC output, axis remapped)."""
    original, r = fused("tf_unet")
    assert not r.decisions.by_placement("cpu")
    assert mrvl_ops(r).count("Resize") >= 2 and "LayoutTransform" not in mrvl_ops(r)
    soft = next(n for n in r.model.graph.node if n.op_type == "Softmax")
    assert soft.domain == opset.DOMAIN and opset.node_attrs(soft)["axis"] == -1
    res = onnx_mrvl.convert(original)
    assert [n.op_type for n in res.model.graph.node] == ["Subgraph_1x1"]
    assert [n.op_type for n in r.model.graph.node if n.domain != opset.DOMAIN] == []


def test_tf_tensordot_dense_is_an_fc_over_rows(tmp_path):
    """Keras Dense on [1, T, C] through tf2onnx (Reshape [T, C] -> MatMul -> Reshape [1, T, O] ->
    bias Add -> Relu) after a conv: one FC over rows on the accelerator, not a 2-D FC whose T rows
    exceed max_batch behind a reshape across the batch axis (both CPU)."""
    n = Net(0)
    x = n.conv("input", 4, 16)                                      # [1, 16, 1, 24]
    t = n.op("Transpose", [x], perm=[0, 3, 2, 1])                   # [1, 24, 1, 16]
    t = n.op("Reshape", [t, n.const(np.array([1, 24, 16], np.int64))])   # keras Reshape layer
    f = n.op("Reshape", [t, n.const(np.array([24, 16], np.int64))])
    f = n.op("MatMul", [f, n.w(16, 10)], "dense")
    f = n.op("Reshape", [f, n.const(np.array([1, 24, 10], np.int64))])
    y = n.op("Relu", [n.op("Add", [f, n.w(10, scale=0.1)], "dense_bias")])
    m = n.model([("input", [1, 4, 1, 24])], [y])
    r = _ok(legalize(m).model, simulate=tmp_path)
    assert r.decisions["dense"].placement == "accelerator" and not r.decisions.by_placement("cpu")
    assert "Gemm" not in [n.op_type for n in legalize(m).model.graph.node]
    res = onnx_mrvl.convert(m)
    assert [n.op_type for n in res.model.graph.node] == ["Subgraph_1x1"]


def test_upsampling1d_repeat_on_the_accelerator(tmp_path):
    """Keras UpSampling1D on [N, T, C] between a conv and a Dense (tf2onnx: Unsqueeze -> Tile ->
    Reshape): a Resize through the [N, T, 1, C] view, no Tile on the CPU."""
    n = Net(0)
    x = n.conv("input", 4, 8)                                               # [1, 8, 1, 5]
    x = n.op("Transpose", [n.op("Reshape", [x, n.const(np.array([1, 8, 5], np.int64))])], perm=[0, 2, 1])
    x = _repeat(n, x, [1, 5, 8], 1, 2)                                      # [1, 10, 8]
    y = n.op("Relu", [n.op("MatMul", [x, n.w(8, 6)], "dense")])
    m = n.model([("input", [1, 4, 1, 5])], [y])
    r = _ok(legalize(m).model, simulate=tmp_path)
    assert "Resize" in mrvl_ops(r) and not r.decisions.by_placement("cpu")


# ---------------------------------------------------------------- numbers
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fused_matches_original(name):
    original, r = fused(name)
    feeds = feeds_for(original)
    assert rel_err(run_ort(original, feeds), run_ort(r.model, feeds)) < 1e-4


@pytest.mark.parametrize("name", sorted(MODELS))
def test_convert_and_run_on_the_simulator(name, tmp_path):
    original = MODELS[name]()
    res = onnx_mrvl.convert(original)
    assert res.subgraphs, "no region was offloaded"
    path = res.save(str(tmp_path / name))
    feeds = feeds_for(original)
    ref = run_ort(original, feeds)
    got = onnx_mrvl.InferenceSession(path).run(None, feeds)
    for a, b in zip(ref, got):
        assert a.shape == b.shape
        assert float(np.max(np.abs(a - b))) <= 1e-2 * max(float(np.max(np.abs(a))), 1e-6), name


# ---------------------------------------------------------------- rules on small graphs
def _ok(m, simulate=None, **kw):
    """Fuse ``m`` (already legal), check it and compare it with the original in onnxruntime; with
    ``simulate`` (a directory) also convert it, keeping regions without conv/fc (force=True), and run
    it on the fp16 simulator."""
    r = fuse(m, **kw)
    onnx.checker.check_model(r.model, full_check=True)
    feeds = feeds_for(m)
    ref = run_ort(m, feeds)
    assert rel_err(ref, run_ort(r.model, feeds)) < 1e-4
    if simulate is not None:
        res = onnx_mrvl.convert(m, force=True)
        assert res.subgraphs
        got = onnx_mrvl.InferenceSession(res.save(str(simulate))).run(None, feeds)
        for a, b in zip(ref, got):
            assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))
    return r


def test_nd_fc_reads_permuted_storage_when_features_are_stored_last(tmp_path):
    """conv [1,C,H,W] (stored NHWC) -> Transpose [1,W,H,C] -> MatMul over C: the rows reshape reads the
    conv's NHWC data as it is (rows in H,W order); the output keeps that storage."""
    n = Net(3)
    x = n.op("Conv", ["input", n.w(6, 3, 3, 3), n.w(6, scale=0.1)], kernel_shape=[3, 3], pads=[1] * 4)
    t = n.op("Transpose", [x], "tr", perm=[0, 3, 2, 1])
    y = n.op("MatMul", [t, n.w(6, 5)], "mm")
    r = _ok(n.model([("input", [1, 3, 4, 7])], [y]), tmp_path)
    nodes = list(r.model.graph.node)
    ops = [x.op_type for x in nodes]
    assert ops[:4] == ["LayoutTransform", "Conv2D", "Reshape", "FC"] and ops.count("LayoutTransform") == 1
    assert opset.node_attrs(nodes[2])["shape"] == [28, 6] and nodes[2].input[0] == nodes[1].output[0]
    assert r.decisions["tr"].placement == "accelerator"   # folded into the FC's layout


def test_nd_fc_output_read_by_another_op_is_reshaped_back(tmp_path):
    n = Net(4)
    h = n.op("MatMul", ["input", n.w(8, 6)], "mm1")
    y1 = n.op("MatMul", [h, n.w(6, 4)], "mm2")
    y2 = n.op("Softmax", [h], axis=-1)
    r = _ok(n.model([("input", [2, 3, 8])], [y1, y2]), tmp_path)
    ops = [x.op_type for x in r.model.graph.node]
    assert ops == ["Reshape", "FC", "Reshape", "Reshape", "FC", "Reshape", "Softmax"]


def test_broadcast_mul_of_two_3d_tensors_and_add_of_5d(tmp_path):
    """[N, T, C] * [N, 1, C] (attention-style gating) and 5-D Add with a [N, 1, 1, H, W] tensor."""
    n = Net(5)
    g = n.op("Sigmoid", [n.op("ReduceMean", ["a"], "rmean", axes=[1], keepdims=1)], "gate")
    m3 = n.op("Mul", ["a", g], "gmul")
    m5 = n.op("Add", ["b", n.op("Relu", ["c"], "c_relu")], "add5")
    r = _ok(n.model([("a", [1, 6, 5]), ("b", [1, 2, 3, 4, 5]), ("c", [1, 1, 1, 4, 5])], [m3, m5]), tmp_path)
    for name in ("gate", "gmul", "add5", "c_relu"):
        assert r.decisions[name].placement == "accelerator", r.decisions[name]
    assert r.decisions["rmean"].placement == "cpu"


def test_concat_3d_and_5d(tmp_path):
    n = Net(6)
    c3 = n.op("Concat", [n.op("Relu", ["a"]), "b"], "cat3", axis=2)
    c5 = n.op("Concat", ["x", n.op("Tanh", ["y"])], "cat5", axis=2)
    r = _ok(n.model([("a", [1, 4, 3]), ("b", [1, 4, 5]), ("x", [1, 2, 3, 2, 2]), ("y", [1, 2, 1, 2, 2])], [c3, c5]),
            tmp_path)
    node = {x.name: x for x in r.model.graph.node}
    for name, axis in (("cat3", 2), ("cat5", 2)):
        cat = node[r.decisions[name].mrvl_node]
        assert cat.op_type == "Concat" and opset.node_attrs(cat)["axis"] == axis


STANDALONE = {"Relu": ({}, "relu", {}), "LeakyRelu": ({"alpha": 0.2}, "leaky_relu", {"activation_alpha": 0.2}),
              "Tanh": ({}, "tanh", {}), "Sigmoid": ({}, "sigmoid", {}),
              "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, "hard_sigmoid", {"activation_alpha": 0.3}),
              "HardSwish": ({}, "hard_swish", {}), "Clip": ({}, "clamp", {"activation_max": 6.0})}


@pytest.mark.parametrize("op", sorted(STANDALONE))
def test_standalone_activation_after_concat_is_mul2d_by_one(op, tmp_path):
    kw, kind, extra = STANDALONE[op]
    n = Net(7)
    cat = n.op("Concat", ["a", "b"], "cat", axis=1)
    ins = [cat] + ([n.const(np.float32(0.0)), n.const(np.float32(6.0))] if op == "Clip" else [])
    y = n.op(op, ins, "act", **kw)
    r = _ok(n.model([("a", [1, 3, 4, 4]), ("b", [1, 2, 4, 4])], [y], opset_version=14), tmp_path)
    node = {x.name: x for x in r.model.graph.node}
    mul = node[r.decisions["act"].mrvl_node]
    a = opset.node_attrs(mul)
    assert mul.op_type == "Mul2D" and a["activation"] == kind and len(mul.input) == 2
    assert all(abs(a[k] - v) < 1e-6 for k, v in extra.items())
    one = next(t for t in r.model.graph.initializer if t.name == mul.input[1])
    assert numpy_helper.to_array(one).tolist() == [[[[1.0]]]]



def _shuffle(kind):
    """conv -> a real permutation between accelerator ops -> conv: ShuffleNet's channel shuffle
    (Reshape [N, g, C/g, H, W] -> Transpose(0,2,1,3,4) -> Reshape), PyTorch's PixelShuffle (CRD)
    and DepthToSpace written as reshape-transpose-reshape (DCR)."""
    n = Net(7)
    x = n.conv("input", 3, 16)
    shape, perm, back, cout = {
        "channel": ([1, 4, 4, 8, 8], [0, 2, 1, 3, 4], [1, 16, 8, 8], 16),
        "pixel_crd": ([1, 4, 2, 2, 8, 8], [0, 1, 4, 2, 5, 3], [1, 4, 16, 16], 4),
        "pixel_dcr": ([1, 2, 2, 4, 8, 8], [0, 3, 4, 1, 5, 2], [1, 4, 16, 16], 4)}[kind]
    r = n.op("Reshape", [x, n.const(np.array(shape))])
    t = n.op("Transpose", [r], "shuffle", perm=perm)
    y = n.conv(n.op("Reshape", [t, n.const(np.array(back))]), cout, 8)
    return n.model([("input", [1, 3, 8, 8])], [y])


@pytest.mark.parametrize("kind,rotations", [("channel", 1), ("pixel_crd", 3), ("pixel_dcr", 2)])
def test_permutation_between_accelerator_ops_is_block_rotations(kind, rotations, tmp_path):
    """A transpose the storage cannot absorb, between accelerator ops, is done on the accelerator:
    per block rotation a Mrvl Reshape to a 4-D view [A, B, R, 1] and an NCHW->NHWC LayoutTransform
    (perms.rotations); it used to be a CPU Transpose that cut the region (ShuffleNet: 17 regions)."""
    r = _ok(_shuffle(kind), tmp_path)
    ops = [x.op_type for x in r.model.graph.node]
    assert "Transpose" not in ops
    assert ops.count("LayoutTransform") == 2 + rotations      # + the model's input and output
    assert r.decisions["shuffle"].placement == "accelerator"
    res = onnx_mrvl.convert(_shuffle(kind))
    assert [x.op_type for x in res.model.graph.node] == ["Subgraph_1x1"]


def test_rotations():
    from onnx_mrvl.fuse.perms import rotations
    assert rotations([1, 8, 8, 4, 4], [0, 1, 2, 4, 3]) == [[64, 4, 4, 1]]        # channel shuffle on NHWC
    assert rotations([2, 3, 5], [0, 2, 1]) == [[2, 3, 5, 1]]
    assert rotations([1, 3, 1, 5], [0, 3, 2, 1]) == [[1, 3, 5, 1]]              # unit axes ignored
    assert rotations([2, 3], [0, 1]) is None
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for q in ([3, 1, 0, 2], [1, 0, 3, 2], [2, 3, 0, 1]):
        y = x
        for a, b, c, _ in rotations(x.shape, q):
            y = y.reshape(a, b, c, 1).transpose(0, 2, 3, 1)
        assert np.array_equal(y.reshape(x.transpose(q).shape), x.transpose(q))
    assert rotations([2, 3, 4, 5, 6], [4, 3, 2, 1, 0]) is None                # more than MAX_ROTATIONS



@pytest.mark.parametrize("kind", ["permute_then_reshape", "conv_reads_transposed"])
def test_layout_change_of_relabelled_accelerator_output(kind, tmp_path):
    """conv [1,8,4,16] -> Transpose(0,3,1,2) -> Reshape [1,16,32] -> MatMul (a CRNN that permutes
    before flattening C*H), and conv -> Transpose(0,2,3,1) -> conv: the NCHW->NHWC conversion of the
    transposed tensor moves data the compile step knows as NHWC (the conv wrote it), so it is not a
    LayoutTransform of that data (which failed to compile: "layout_transform NCHW->NHWC reads a
    tensor stored NHWC", and the whole region fell back to the CPU) but a block rotation of a view."""
    n = Net(9)
    x = n.conv("input", 3, 8)
    if kind == "permute_then_reshape":
        t = n.op("Transpose", [x], perm=[0, 3, 1, 2])
        y = n.op("MatMul", [n.op("Reshape", [t, n.const(np.array([1, 16, 32]))]), n.w(32, 10)])
    else:
        y = n.conv(n.op("Transpose", [x], perm=[0, 2, 3, 1]), 4, 8)
    m = n.model([("input", [1, 3, 4, 16])], [y])
    r = _ok(m, tmp_path)
    assert any(x.name.startswith("rotate_") for x in r.model.graph.node if x.op_type == "LayoutTransform")
    res = onnx_mrvl.convert(m)
    assert [x.op_type for x in res.model.graph.node] == ["Subgraph_1x1"]
    assert not [d for d in res.report.dropped if "compile" in d["reason"]]



@pytest.mark.parametrize("kind", ["vit_class_token", "coord_channels"])
def test_concat_with_a_constant_operand(kind, tmp_path):
    """Concat(constant, x) on the accelerator, the constant a weight of the Concat layer (stored in
    the region's layout): a ViT class token before the patch tokens (3-D) and CoordConv-style
    constant channels after a conv (4-D, NHWC). It used to stay on the CPU ("a constant operand")
    and cut the region in two."""
    n = Net(11)
    if kind == "vit_class_token":
        x = n.op("Conv", ["input", n.w(16, 3, 4, 4), n.w(16)], kernel_shape=[4, 4], strides=[4, 4])
        t = n.op("Transpose", [n.op("Reshape", [x, n.const(np.array([1, 16, 16]))])], perm=[0, 2, 1])
        c = n.op("Concat", [n.w(1, 1, 16, scale=1.0), t], "cat", axis=1)
        y = n.op("MatMul", [n.op("Add", [c, n.w(1, 17, 16, scale=1.0)]), n.w(16, 8)])
    else:
        x = n.conv("input", 3, 8)
        c = n.op("Concat", [x, n.w(1, 2, 16, 16, scale=1.0)], "cat", axis=1)
        y = n.conv(c, 10, 8)
    m = n.model([("input", [1, 3, 16, 16])], [y])
    r = _ok(m, tmp_path)
    assert r.decisions["cat"].placement == "accelerator"
    (cat,) = [x for x in r.model.graph.node if x.op_type == "Concat"]
    assert len(cat.input) == 2 and opset.node_attrs(cat)["num_inputs"] == 2
    res = onnx_mrvl.convert(m)
    assert [x.op_type for x in res.model.graph.node] == ["Subgraph_1x1"]
    layer = next(x for x in res.subgraphs[0].nodes_json["nodes"] if x.get("attrs", {}).get("layer_name") == ["Concat"])
    assert layer["attrs"]["const_positions"] == (["0"] if kind == "vit_class_token" else ["1"])
    assert len(layer["inputs"]) == 1
