"""int8 (QDQ) import: models quantized by onnxruntime's ``quantize_static`` run their quantized
Conv/Gemm/MatMul as int8 Conv2D/FC layers, compared against onnxruntime's own execution of the
same QDQ model (docs/simulator.md "int8 layers": at most one output quantization step)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.testing.models import GraphBuilder, classifier_model, tiny_cnn
from onnx_mrvl.testing.ort_sessions import exact_session

quantization = pytest.importorskip("onnxruntime.quantization")
F32 = TensorProto.FLOAT


def mobile_block(seed: int = 0) -> onnx.ModelProto:
    """Conv3x3 -> Clip(0, 6) -> depthwise 3x3 -> Relu -> 1x1 -> GlobalAveragePool -> Flatten -> MatMul + Add
    (the bias Add: an int8 Sum2D with a constant operand)."""
    g = GraphBuilder(seed, 13)
    x = g.clip6(g.conv("input", 3, 16, 3, "stem", stride=2), "stem_clip")
    w = g.const("dw.weight", g.he((16, 1, 3, 3), 9))
    x = g.node("Conv", [x, w, g.const("dw.bias", np.zeros(16, np.float32) + 0.1)], "dw", kernel_shape=[3, 3],
               pads=[1, 1, 1, 1], group=16)
    x = g.relu(x, "dw_relu")
    x = g.conv(x, 16, 24, 1, "pw")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    x = g.node("MatMul", [x, g.const("head.w", g.he((24, 10), 24))], "head")
    g.node("Add", [x, g.const("head.b", np.linspace(-1, 1, 10).astype(np.float32))], "head_add")
    g.nodes[-1].output[0] = "output"
    return g.model("mobile_block", [("input", F32, [1, 3, 32, 32])], [("output", F32, [1, 10])])


def residual_cnn(seed: int = 0) -> onnx.ModelProto:
    """ResNet-style without BatchNorm (folded, as exporters write it): stem conv + Relu + MaxPool,
    two residual blocks (conv-Relu-conv + skip, Add, Relu; the second with a strided 1x1 shortcut),
    GlobalAveragePool, Flatten, Gemm."""
    g = GraphBuilder(seed, 13)
    x = g.node("MaxPool", [g.relu(g.conv("input", 3, 16, 3, "stem"), "stem_relu")], "pool",
               kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.conv(g.relu(g.conv(x, 16, 16, 3, "b1c1"), "b1r1"), 16, 16, 3, "b1c2")
    x = g.relu(g.node("Add", [y, x], "b1add"), "b1relu")
    y = g.conv(g.relu(g.conv(x, 16, 32, 3, "b2c1", stride=2), "b2r1"), 32, 32, 3, "b2c2")
    s = g.conv(x, 16, 32, 1, "b2short", stride=2)
    x = g.relu(g.node("Add", [y, s], "b2add"), "b2relu")
    return classifier_model(g, x, 32, 10, "residual_cnn", input_size=32, gap="gap")


def branchy_cnn(seed: int = 0) -> onnx.ModelProto:
    """Two convs reading the input (a shared Q -> DQ pair), Concat of different scales, conv,
    AveragePool 2x2 (ties when the scales match), nearest Resize x2 as the model output."""
    g = GraphBuilder(seed, 13)
    a = g.relu(g.conv("input", 3, 8, 3, "ca"), "ra")
    b = g.conv("input", 3, 8, 1, "cb")
    x = g.conv(g.node("Concat", [a, b], "cat", axis=1), 16, 8, 3, "cc")
    x = g.node("AveragePool", [x], "ap", kernel_shape=[2, 2], strides=[2, 2])
    g.node("Resize", [x, "", g.const("up.scales", np.array([1, 1, 2, 2], np.float32))], "up", mode="nearest")
    g.nodes[-1].output[0] = "output"
    return g.model("branchy_cnn", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 8, 16, 16])])


class _Reader(quantization.CalibrationDataReader):
    def __init__(self, name, shape, n=8, seed=0):
        rng = np.random.default_rng(seed)
        self.data = iter([{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(n)])

    def get_next(self):
        return next(self.data, None)


def quantize(model: onnx.ModelProto, path: str, per_channel: bool, act: str) -> str:
    src = path + ".float.onnx"
    onnx.save(model, src)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    quantization.quantize_static(
        src, path, _Reader(inp.name, shape), quant_format=quantization.QuantFormat.QDQ,
        per_channel=per_channel, weight_type=quantization.QuantType.QInt8,
        activation_type=quantization.QuantType.QInt8 if act == "s8" else quantization.QuantType.QUInt8)
    return path


def _output_scale(q: onnx.ModelProto, out: str) -> float:
    dq = next(n for n in q.graph.node if n.output[0] == out)
    assert dq.op_type == "DequantizeLinear"
    init = {t.name: t for t in q.graph.initializer}
    return float(onnx.numpy_helper.to_array(init[dq.input[1]]))


def _agreement(qpath: str, folder: str, n_inputs: int = 4):
    q = onnx.load(qpath)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    inp = q.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    out = q.graph.output[0].name
    step = _output_scale(q, out)
    rng = np.random.default_rng(123)
    diffs, differing, total = [], 0, 0
    for _ in range(n_inputs):
        x = (rng.standard_normal(shape) * 1.5).astype(np.float32)
        a = ref.run(None, {inp.name: x})[0]
        b = sess.run(None, {inp.name: x})[0]
        assert b.dtype == np.float32 and np.isfinite(b).all()
        diffs.append(float(np.abs(a - b).max()) / step)
        differing += int((np.abs(a - b) > 1e-6 * step).sum())
        total += a.size
    return max(diffs), differing / total


def _qdq_model(nodes, inits, x_shape, y_shape) -> onnx.ModelProto:
    """A one-input ("x"), one-output ("y") float model of ``nodes`` at opset 13."""
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, x_shape)],
                                            [helper.make_tensor_value_info("y", F32, y_shape)], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _run_both(m: onnx.ModelProto, folder: str, x: np.ndarray):
    """(onnxruntime's output of ``m``, our saved conversion's output in ``folder``) for input ``x``."""
    a = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {"x": x})[0]
    return a, b


def _int8_layers(folder: str):
    layers = []
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            for node in json.load(open(os.path.join(folder, f)))["nodes"]:
                if node["op"] == "tvm_op" and node["attrs"].get("precision") == ["int8"]:
                    layers.append(node)
    return layers


CASES = [(per_channel, act) for per_channel in (True, False) for act in ("s8", "u8")]


@pytest.mark.parametrize("per_channel,act", CASES)
@pytest.mark.parametrize("builder", [tiny_cnn, mobile_block, residual_cnn, branchy_cnn])
def test_qdq_model_runs_int8_like_onnxruntime(tmp_path, builder, per_channel, act):
    qpath = quantize(builder(seed=1), str(tmp_path / "q.onnx"), per_channel, act)
    q = onnx.load(qpath)
    layers = [n for n in q.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    # structure: every quantized layer is an int8 layer; no Q/DQ inside the regions
    int8 = _int8_layers(folder)
    assert len([n for n in int8 if n["attrs"]["layer_name"][0] in ("Conv2D", "FC")]) == len(layers)
    pools = [n for n in q.graph.node if n.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool", "Resize")]
    assert len([n for n in int8 if "pool" in n["attrs"]["layer_name"][0].lower()
                or n["attrs"]["layer_name"] == ["Resize"]]) == len(pools)
    producers = {p.output[0]: p for p in q.graph.node}
    adds = [n for n in q.graph.node if n.op_type == "Add" and all(
        i in producers and producers[i].op_type == "DequantizeLinear" for i in n.input)]   # incl. a DQ'd bias
    assert len([n for n in int8 if n["attrs"]["layer_name"] == ["Sum2D"]]) == len(adds)
    for node in int8:
        a = node["attrs"]
        assert a["in_dtype"] == a["out_dtype"] == (["int8"] if act == "s8" else ["uint8"])
        assert float(a["in_scale"][0]) > 0
        if a["layer_name"] != ["Conv2D"] and a["layer_name"] != ["FC"]:
            continue
        assert a["kernel_const"]["dtype"] == "int8"
    deployed = [n.op_type for n in result.model.graph.node]
    assert not [t for t in deployed if t in ("Conv", "Gemm", "MatMul")]
    for sg in result.subgraphs:
        binary = load(sg.binary)
        kinds = {w.dtype.name for w in binary.weights.values()}
        if any(lay["params"].get("precision") == "int8" for lay in binary.meta["layers"]):
            assert "int8" in kinds
        for lay in binary.meta["layers"]:
            if lay["params"].get("precision") == "int8" and lay["layer_name"] in ("Conv2D", "FC"):
                assert binary.weights[lay["weights"]["kernel"]].dtype == np.int8
                if "bias" in lay["weights"]:
                    assert binary.weights[lay["weights"]["bias"]].dtype == np.int32
            if lay["params"].get("precision") == "int8":
                out = binary.meta["tensors"][lay["outputs"][0]]
                assert out["dtype"] == ("int8" if act == "s8" else "uint8")
                assert out["nbytes"] == int(np.prod(out["shape"]))
    # numbers: within one output quantization step of onnxruntime's own int8 execution
    worst, frac = _agreement(qpath, folder)
    print(f"{builder.__name__} per_channel={per_channel} {act}: max {worst:.3f} steps, {frac:.1%} differ")
    assert worst <= 1.0 + 1e-3
    assert frac <= 0.5


def test_int8_region_input_is_quantized_by_the_region(tmp_path):
    """The Q at the model input and the DQ pairs between int8 layers are gone from the deployed
    model; the region's input tensor is int8 (host quantize), its first layer reads codes."""
    qpath = quantize(tiny_cnn(seed=2), str(tmp_path / "q.onnx"), True, "s8")
    result = onnx_mrvl.convert(qpath)
    ops = [n.op_type for n in result.model.graph.node]
    first = result.model.graph.node[0]
    assert first.op_type.startswith("Subgraph") and first.input[0] == "input"
    assert ops == ["Subgraph_1x1"]   # int8 convs, MaxPool, GlobalAveragePool, Flatten, Gemm: one region
    folder = str(tmp_path / "out")
    result.save(folder)
    binary = load(result.subgraphs[0].binary)
    tin = binary.meta["tensors"][binary.meta["inputs"][0]["tensor"]]
    assert tin["dtype"] == "int8" and tin["nbytes"] == int(np.prod(tin["shape"]))


def test_int8_fused_model_runs_in_plain_onnxruntime(tmp_path):
    """The reference bodies of the int8 Conv2D/FC (Q -> DQ around the float body) reproduce the
    QDQ model in plain onnxruntime."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = quantize(mobile_block(seed=3), str(tmp_path / "q.onnx"), True, "u8")
    q = onnx.load(qpath)
    legal = legalize(q).model
    fused = fuse(getattr(legal, "model", legal)).model
    mrvl = [n for n in fused.graph.node if n.domain == "mrvl" and n.op_type in ("Conv2D", "FC")]
    assert "int8" in fuse(getattr(legal, "model", legal)).decisions.by_placement("accelerator")[0].reason
    assert mrvl and all(any(a.name == "precision" and a.s == b"int8" for a in n.attribute) for n in mrvl)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
    # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
    a = exact_session(qpath).run(None, {"input": x})[0]
    b = exact_session(fused.SerializeToString()).run(None, {"input": x})[0]
    assert np.abs(a - b).max() <= _output_scale(q, "output") * (1 + 1e-3)


def test_int8_simulator_matches_qlinearconv_bit_exact():
    """sim/int8.py against onnxruntime's QLinearConv kernel on random data (per-channel, s8 and u8,
    relu as a clamp at the zero point): the MLAS requantization, bit for bit."""
    from onnx_mrvl.sim.int8 import Int8Conv2D
    from onnx_mrvl.sim.mlas_u8s8 import saturates
    rng = np.random.default_rng(7)
    for xt, zx, zy in ((np.int8, -3, 5), (np.uint8, 128, 120)):
        x = rng.integers(np.iinfo(xt).min, np.iinfo(xt).max + 1, (1, 8, 9, 9)).astype(xt)
        w = rng.integers(-127, 128, (16, 8, 3, 3)).astype(np.int8)
        b = rng.integers(-2000, 2000, 16).astype(np.int32)
        sx, sy = np.float32(0.02), np.float32(0.37)
        sw = (rng.random(16) * 0.01 + 0.001).astype(np.float32)
        inits = [onnx.numpy_helper.from_array(v, n) for v, n in (
            (np.array(sx), "sx"), (np.array(zx, xt), "zx"), (w, "w"), (sw, "sw"), (np.zeros(16, np.int8), "zw"),
            (np.array(sy), "sy"), (np.array(zy, xt), "zy"), (b, "b"))]
        node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["y"],
                                pads=[1, 1, 1, 1], strides=[2, 2])
        elem = TensorProto.INT8 if xt == np.int8 else TensorProto.UINT8
        m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, x.shape)],
                                                [helper.make_tensor_value_info("y", elem, None)], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        y_ref = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0].astype(np.int32)
        dt = "int8" if xt == np.int8 else "uint8"
        params = dict(in_scale=float(sx), in_zero_point=zx, in_dtype=dt, out_scale=float(sy),
                      out_zero_point=zy, out_dtype=dt)
        conv = Int8Conv2D(w.transpose(0, 2, 3, 1).copy(), b, sw, params, [2, 2], [1, 1, 1, 1], [1, 1], 1)
        conv.u8s8_sat = dt == "uint8" and saturates()   # U8S8 on an x86 without VNNI (S8S8: MLAS's exact default kernel)
        xf = ((x.astype(np.float32) - zx) * sx).transpose(0, 2, 3, 1).astype(np.float32)   # dequantized NHWC
        y, ok = conv.apply(xf)
        q = np.rint(y / sy).astype(np.int32) + zy
        assert ok and np.array_equal(q.transpose(0, 3, 1, 2), y_ref), dt


def test_int8_perf_model_counts_int8_rate_and_bytes(tmp_path):
    """Perf model: an int8 layer's MACs at ArchProfile.int8_macs_factor x the fp16 rate; its
    kernel and its int8 tensors take one byte per element."""
    import math
    from onnx_mrvl.costmodel import perf_report
    from onnx_mrvl.target import ArchProfile
    qpath = quantize(residual_cnn(seed=4), str(tmp_path / "q.onnx"), True, "s8")
    binary = load(onnx_mrvl.convert(qpath).subgraphs[0].binary)
    meta = binary.meta
    rep = perf_report(meta)
    arch = ArchProfile()
    peak = arch.macs_per_cycle_per_tile * meta["arch"]["num_tiles"]
    convs = [(lay, row) for lay, row in zip(meta["layers"], rep.layers) if lay["layer_name"] == "Conv2D"]
    assert convs and all(lay["params"]["precision"] == "int8" for lay, _ in convs)
    for lay, row in convs:
        assert row.compute_cycles == math.ceil(row.macs / (peak * arch.int8_macs_factor))
        assert binary.weights[lay["weights"]["kernel"]].nbytes == int(np.prod(binary.weights[lay["weights"]["kernel"]].shape))
    for t in meta["tensors"]:
        assert t["nbytes"] == int(np.prod(t["shape"])) * (2 if t.get("dtype", "float16") == "float16" else 1)


def test_qdq_only_at_model_io_keeps_only_those_on_the_cpu(tmp_path):
    """A float model whose only Q/DQ pairs sit at its input and output: the float layers are an
    fp16 region, the two pairs stay on the CPU (nothing int8 to do)."""
    g = GraphBuilder(5, 13)
    s = g.const("s", np.array(0.05, np.float32))
    z = g.const("z", np.array(3, np.int8))
    x = g.node("DequantizeLinear", [g.node("QuantizeLinear", ["input", s, z], "q_in"), s, z], "dq_in")
    y = g.conv(g.relu(g.conv(x, 3, 8, 3, "c1"), "r1"), 8, 8, 3, "c2")
    out = g.node("DequantizeLinear", [g.node("QuantizeLinear", [y, s, z], "q_out"), s, z], "dq_out")
    model = g.model("io_qdq", [("input", F32, [1, 3, 16, 16])], [(out, F32, [1, 8, 16, 16])])
    result = onnx_mrvl.convert(model)
    ops = [n.op_type for n in result.model.graph.node]
    assert ops == ["QuantizeLinear", "DequantizeLinear", "Subgraph_1x1", "QuantizeLinear", "DequantizeLinear"]
    folder = str(tmp_path / "out")
    result.save(folder)
    assert not _int8_layers(folder)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    a = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, {"input": x})[0]
    assert np.abs(a - b).max() <= 0.05 * (1 + 1e-3)   # fp16 region between the pairs: within one step


def test_int8_global_average_pool_matches_qlinear_global_average_pool():
    """sim/int8.py's GlobalAvgPool2D against onnxruntime's QLinearGlobalAveragePool (com.microsoft), bit for bit."""
    from onnx_mrvl.sim.int8 import Int8Pool
    rng = np.random.default_rng(3)
    for xt, zx, zy in ((np.int8, -5, 7), (np.uint8, 120, 131)):
        x = rng.integers(np.iinfo(xt).min, np.iinfo(xt).max + 1, (2, 24, 7, 7)).astype(xt)
        sx, sy = np.float32(0.031), np.float32(0.0123)
        inits = [onnx.numpy_helper.from_array(v, n) for v, n in (
            (np.array(sx), "sx"), (np.array(zx, xt), "zx"), (np.array(sy), "sy"), (np.array(zy, xt), "zy"))]
        node = helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sy", "zy"], ["y"],
                                domain="com.microsoft", channels_last=0)
        elem = TensorProto.INT8 if xt == np.int8 else TensorProto.UINT8
        m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, x.shape)],
                                                [helper.make_tensor_value_info("y", elem, None)], inits),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8
        y_ref = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0].astype(np.int32)
        dt = "int8" if xt == np.int8 else "uint8"
        pool = Int8Pool("GlobalAvgpool2D", dict(in_scale=float(sx), in_zero_point=zx, in_dtype=dt,
                                               out_scale=float(sy), out_zero_point=zy, out_dtype=dt))
        xf = ((x.astype(np.float32) - zx) * sx).transpose(0, 2, 3, 1).astype(np.float32)
        y, ok = pool.apply(xf)
        q = np.rint(y / sy).astype(np.int32) + zy
        assert ok and np.array_equal(q.transpose(0, 3, 1, 2), y_ref), dt


@pytest.mark.parametrize("kw", [{"exclude": ["b1add"]}, {"cut_after": ["b1c1"]}, {"exclude": ["b2c1"]},
                                {"partition": "cost"}])
def test_int8_regions_cut_anywhere(tmp_path, kw):
    """Cuts and exclusions inside an int8 network: the region boundaries are float tensors (the
    dequantized values), each region quantizes what it reads; the excluded node and its Q/DQ run
    in onnxruntime. Same agreement."""
    qpath = quantize(residual_cnn(seed=1), str(tmp_path / "q.onnx"), True, "u8")
    result = onnx_mrvl.convert(qpath, **kw)
    folder = str(tmp_path / "out")
    result.save(folder)
    if "exclude" in kw or "cut_after" in kw:
        assert len(result.subgraphs) >= 2
    worst, _ = _agreement(qpath, folder, n_inputs=2)
    assert worst <= 1.0 + 1e-3


def test_int8_resnet18_like_preprocessed(tmp_path):
    """tools/models.resnet18_like (64x64) after onnxruntime's quant_pre_process (BatchNorm folded)
    and quantize_static: one region, every conv / pool / add / Gemm int8, within one step."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from onnx_mrvl.testing.models import resnet18_like
    src, pre = str(tmp_path / "f.onnx"), str(tmp_path / "pre.onnx")
    onnx.save(resnet18_like(seed=0, input_size=64), src)
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    qpath = str(tmp_path / "q.onnx")
    quantization.quantize_static(pre, qpath, _Reader("input", [1, 3, 64, 64], n=4),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 weight_type=quantization.QuantType.QInt8,
                                 activation_type=quantization.QuantType.QInt8)
    result = onnx_mrvl.convert(qpath)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    q = onnx.load(qpath)
    convs = [n for n in q.graph.node if n.op_type in ("Conv", "Gemm")]
    assert len([n for n in _int8_layers(folder) if n["attrs"]["layer_name"][0] in ("Conv2D", "FC")]) == len(convs)
    worst, frac = _agreement(qpath, folder, n_inputs=2)
    print(f"resnet18_like: max {worst:.3f} steps, {frac:.1%} differ")
    assert worst <= 1.0 + 1e-3


@pytest.mark.parametrize("act", ["Relu", "Clip", None])
def test_hand_written_qdq_without_zero_points(tmp_path, act):
    """QDQ as other tools write it: Q/DQ without zero points (uint8, 0), per-channel int8 weights,
    the activation kept between the Conv and its Q (a clamp in the quantized domain)."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    ws = (rng.random(8) * 0.01 + 0.005).astype(np.float32)
    inits = [nh.from_array(np.array(0.02, np.float32), "sx"), nh.from_array(w, "wq"), nh.from_array(ws, "ws"),
             nh.from_array(rng.integers(-500, 500, 8).astype(np.int32), "bq"),
             nh.from_array((np.float32(0.02) * ws).astype(np.float32), "bs"),
             nh.from_array(np.array(0.05, np.float32), "sy"), nh.from_array(np.array(0.0, np.float32), "lo"),
             nh.from_array(np.array(6.0, np.float32), "hi")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])]
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
    elif act == "Clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["r"]))
    nodes += [helper.make_node("QuantizeLinear", ["r" if act else "c", "sy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy"], ["y"])]
    m = _qdq_model(nodes, inits, [1, 3, 16, 16], [1, 8, 16, 16])
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    (layer,) = _int8_layers(folder)
    assert layer["attrs"]["in_dtype"] == ["uint8"] and layer["attrs"]["activation_type"] == [
        {"Relu": "relu", "Clip": "clamp", None: "none"}[act]]
    x = (np.random.default_rng(0).random((1, 3, 16, 16)) * 3).astype(np.float32)
    a, b = _run_both(m, folder, x)
    assert np.abs(a - b).max() <= 0.05 * (1 + 1e-3)


# (a weight zero point makes an int8 layer now: tests/test_int8_weight_zero_point.py)
@pytest.mark.parametrize("case, reason", [
    ("sigmoid", "not read by one QuantizeLinear"),
    ("activation_per_channel", "per channel"),
])
def test_qdq_layer_that_cannot_be_int8_stays_on_the_cpu_with_its_reason(tmp_path, case, reason):
    """A QDQ Conv the int8 layer cannot take runs in onnxruntime as it was (its DQ weights kept),
    and the decision says why; the results are onnxruntime's."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    ws = (rng.random(8) * 0.01 + 0.005).astype(np.float32)
    sx = np.full(3, 0.02, np.float32) if case == "activation_per_channel" else np.array(0.02, np.float32)
    zx = np.zeros(3, np.int8) if case == "activation_per_channel" else np.array(0, np.int8)
    zw = np.full(8, 1 if case == "weight_zero_point" else 0, np.int8)
    inits = [nh.from_array(sx, "sx"), nh.from_array(zx, "zx"), nh.from_array(w, "wq"), nh.from_array(ws, "ws"),
             nh.from_array(zw, "zw"), nh.from_array(np.array(0.05, np.float32), "sy"),
             nh.from_array(np.array(0, np.int8), "zy")]
    qargs = {"axis": 1} if case == "activation_per_channel" else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], **qargs),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], **qargs),
             helper.make_node("DequantizeLinear", ["wq", "ws", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3], name="conv")]
    y = "c"
    if case == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", ["c"], ["s"]))
        y = "s"
    nodes += [helper.make_node("QuantizeLinear", [y, "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    m = _qdq_model(nodes, inits, [1, 3, 8, 8], [1, 8, 8, 8])
    result = onnx_mrvl.convert(m)
    assert "Conv" in [n.op_type for n in result.model.graph.node]
    assert reason in result.report["conv"].reason and "int8" in result.report["conv"].reason
    folder = str(tmp_path / "out")
    result.save(folder)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    a, b = _run_both(m, folder, x)
    assert np.abs(a - b).max() <= 0.05 * (1 + 1e-3)


@pytest.mark.parametrize("builder", [residual_cnn, branchy_cnn])
def test_int8_reference_bodies_of_pools_and_adds(tmp_path, builder):
    """The fused model (int8 Sum2D, pools, Resize with their Q -> DQ reference bodies) in plain
    onnxruntime equals the QDQ model; a batch of 2 runs through the accelerator path the same."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = quantize(builder(seed=2), str(tmp_path / "q.onnx"), True, "s8")
    legal = legalize(onnx.load(qpath)).model
    fused = fuse(getattr(legal, "model", legal)).model
    shape = [d.dim_value for d in fused.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    # onnxruntime against itself: both sessions with exact integer sums (testing/ort_sessions.exact_session), as on a
    # VNNI host; on AVX2 its U8S8 kernel clamps pairs, and it fuses the reference bodies onto other kernels
    a = exact_session(qpath).run(None, {"input": x})[0]
    b = exact_session(fused.SerializeToString()).run(None, {"input": x})[0]
    assert np.array_equal(a, b)


def test_int8_batch_of_two(tmp_path):
    qpath = quantize(tiny_cnn(seed=3, batch=2), str(tmp_path / "q.onnx"), True, "u8")
    folder = str(tmp_path / "out")
    onnx_mrvl.convert(qpath).save(folder)
    worst, _ = _agreement(qpath, folder, n_inputs=2)
    assert worst <= 1.0 + 1e-3


@pytest.mark.parametrize("xt", [np.int8, np.uint8])
def test_int8_average_pool_matches_onnxruntime_with_ties(tmp_path, xt):
    """DQ -> AveragePool 2x2 -> Q (one scale: many sums at exact .5 ties) in onnxruntime (which
    runs QLinearAveragePool, int8 activations as uint8) against the int8 Avgpool2D: bit for bit."""
    from onnx import numpy_helper as nh
    z = np.array(-7 if xt == np.int8 else 121, xt)
    inits = [nh.from_array(np.array(0.0593, np.float32), "s"), nh.from_array(z, "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["y"])]
    m = _qdq_model(nodes, inits, [1, 8, 16, 16], [1, 8, 8, 8])
    result = onnx_mrvl.convert(m, force=True)   # a region without conv/fc: kept only when forced
    folder = str(tmp_path / "out")
    result.save(folder)
    assert [n["attrs"]["layer_name"] for n in _int8_layers(folder)] == [["Avgpool2D"]]
    x = (np.random.default_rng(1).standard_normal((1, 8, 16, 16)) * 3).astype(np.float32)
    a, b = _run_both(m, folder, x)
    assert np.array_equal(a, b)


def test_int8_contract_is_checked(tmp_path):
    """Compile refuses malformed int8 fields (a zero point outside its type, a kernel that is not
    int8, precision on a layer without an int8 mode); the container refuses an int8 tensor
    without its scale."""
    import copy
    from onnx_mrvl.artifact import pack
    from onnx_mrvl.emit.compile import build_program, compile_json
    from onnx_mrvl.errors import ArtifactError, CompileError
    qpath = quantize(tiny_cnn(seed=6), str(tmp_path / "q.onnx"), True, "s8")
    sg = onnx_mrvl.convert(qpath).subgraphs[0]
    nodes, consts = sg.nodes_json, sg.consts_json
    compile_json(nodes, consts)    # as written: fine
    conv = next(i for i, n in enumerate(nodes["nodes"]) if n.get("attrs", {}).get("precision") == ["int8"])

    def edited(fn):
        n2 = copy.deepcopy(nodes)
        fn(n2["nodes"][conv]["attrs"], n2)
        return n2
    with pytest.raises(CompileError, match="in_zero_point 300"):
        compile_json(edited(lambda a, n: a.update(in_zero_point=["300"])), consts)
    with pytest.raises(CompileError, match="int8 expected"):
        c2 = {k: dict(v) for k, v in consts.items()}
        name = nodes["nodes"][conv]["attrs"]["kernel_const_name"][0]
        raw = np.frombuffer(__import__("base64").b64decode(c2[name]["data_base64"]), np.int8).astype(np.float32)
        c2[name].update(dtype="float32", data_base64=__import__("base64").b64encode(raw.tobytes()).decode())
        compile_json(nodes, c2)
    pool = next(i for i, n in enumerate(nodes["nodes"]) if n.get("attrs", {}).get("layer_name") == ["layout_transform"])
    n3 = copy.deepcopy(nodes)
    n3["nodes"][pool]["attrs"]["precision"] = ["int8"]
    with pytest.raises(CompileError, match="no int8 mode"):
        compile_json(n3, consts)
    meta, weights = build_program(nodes, consts)
    t = next(t for t in meta["tensors"] if t.get("dtype") == "int8")
    del t["scale"]
    with pytest.raises(ArtifactError, match="scale"):
        pack(meta, weights)


def test_int8_token_mlp(tmp_path):
    """MatMul over [1, T, K] (an N-D FC: Reshape -> FC -> Reshape), its bias Add (a DQ'd constant:
    an int8 Sum2D with an fp32 operand), Relu, MatMul: one region, all int8, bit-exact."""
    g = GraphBuilder(0, 13)
    x = g.node("MatMul", ["input", g.const("w1", g.he((32, 64), 32))], "mm1")
    x = g.relu(g.node("Add", [x, g.const("b1", np.linspace(-0.5, 0.5, 64).astype(np.float32))], "add1"), "relu1")
    g.node("MatMul", [x, g.const("w2", g.he((64, 16), 64))], "mm2")
    g.nodes[-1].output[0] = "output"
    m = g.model("token_mlp", [("input", F32, [1, 12, 32])], [("output", F32, [1, 12, 16])])
    for act in ("s8", "u8"):
        qpath = quantize(m, str(tmp_path / f"q_{act}.onnx"), True, act)
        result = onnx_mrvl.convert(qpath)
        assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
        folder = str(tmp_path / f"out_{act}")
        result.save(folder)
        kinds = sorted(n["attrs"]["layer_name"][0] for n in _int8_layers(folder))
        assert kinds == ["FC", "FC", "Sum2D"]
        worst, frac = _agreement(qpath, folder, n_inputs=3)
        assert worst == 0 and frac == 0


def test_qat_style_weights_quantized_in_the_graph(tmp_path):
    """Weights as QAT exporters (tf2onnx) write them: Q -> DQ of the float kernel in the graph.
    Legalize folds the Q into an int8 constant and keeps the DQ; the conv is an int8 layer."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    wf = (rng.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32)
    ws = (np.abs(wf).reshape(8, -1).max(1) / 127).astype(np.float32)
    inits = [nh.from_array(np.array(0.02, np.float32), "sx"), nh.from_array(np.array(0, np.int8), "zx"),
             nh.from_array(wf, "wf"), nh.from_array(ws, "ws"), nh.from_array(np.zeros(8, np.int8), "zw"),
             nh.from_array(np.array(0.05, np.float32), "sy"), nh.from_array(np.array(0, np.int8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("QuantizeLinear", ["wf", "ws", "zw"], ["wq"], axis=0),
             helper.make_node("DequantizeLinear", ["wq", "ws", "zw"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    m = _qdq_model(nodes, inits, [1, 3, 16, 16], [1, 8, 16, 16])
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    assert [n["attrs"]["layer_name"] for n in _int8_layers(folder)] == [["Conv2D"]]
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    a, b = _run_both(m, folder, x)
    assert np.array_equal(a, b)
