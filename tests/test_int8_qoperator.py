"""QOperator int8 import: models quantized by onnxruntime's ``quantize_static(...,
quant_format=QOperator)`` (QLinearConv, QLinearMatMul, QGemm, QLinearAdd, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax, ... and standard ops on int8 codes)
are legalized into the QDQ form and run as int8 layers; compared against onnxruntime's own
execution of the QOperator model (docs/legalize.md "qlinear_to_qdq": at least 99% of the output
elements identical, the rest within one output quantum)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.ort_sessions import exact_session
from onnx_mrvl.testing.models import mobilenetv2_like, resnet18_like, tiny_cnn

quantization = pytest.importorskip("onnxruntime.quantization")
from test_int8_qdq import _int8_layers, _Reader, branchy_cnn, mobile_block, residual_cnn  # noqa: E402

F32 = TensorProto.FLOAT
QOPS = {"QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
        "QLinearLeakyRelu", "QLinearSoftmax", "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearWhere"}


def quantize_qoperator(model: onnx.ModelProto, path: str, act: str = "u8", per_channel: bool = True,
                       preprocess: bool = False) -> str:
    src = path + ".float.onnx"
    onnx.save(model, src)
    if preprocess:   # BatchNorm folded, as onnxruntime recommends before quantizing
        from onnxruntime.quantization.shape_inference import quant_pre_process
        quant_pre_process(src, src, skip_symbolic_shape=True)
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    quantization.quantize_static(
        src, path, _Reader(inp.name, shape, n=4), quant_format=quantization.QuantFormat.QOperator,
        per_channel=per_channel, weight_type=quantization.QuantType.QInt8,
        activation_type=quantization.QuantType.QInt8 if act == "s8" else quantization.QuantType.QUInt8)
    return path


def _out_quantum(q: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear writing the model output."""
    dq = next(n for n in q.graph.node if n.output[0] == q.graph.output[0].name)
    assert dq.op_type == "DequantizeLinear"
    init = {t.name: nh.to_array(t) for t in q.graph.initializer}
    return float(init[dq.input[1]])


def agreement(qpath: str, folder: str, n_inputs: int = 3, scale: float = 1.5):
    """(share of identical output elements, max |diff| in output quanta) of the converted model
    against onnxruntime running the QOperator model."""
    q = onnx.load(qpath)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    inp = q.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    step = _out_quantum(q)
    rng = np.random.default_rng(123)
    same, total, worst = 0, 0, 0.0
    for _ in range(n_inputs):
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
        a = ref.run(None, {inp.name: x})[0]
        b = sess.run(None, {inp.name: x})[0]
        assert b.dtype == np.float32 and np.isfinite(b).all() and a.shape == b.shape
        same += int((a == b).sum())
        total += a.size
        worst = max(worst, float(np.abs(a - b).max()) / step)
    return same / total, worst


def _check(qpath: str, tmp_path, min_int8: int):
    q = onnx.load(qpath)
    qops = [n for n in q.graph.node if n.op_type in QOPS]
    assert qops, [n.op_type for n in q.graph.node]
    result = legalize(q)
    legal, report = result.model, result.report
    assert not [n for n in legal.graph.node if n.op_type in QOPS], "a QLinear op was left"
    assert {r for r, _, _ in report.applied} >= {"qlinear_to_qdq"}
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    int8 = _int8_layers(folder)
    assert len(int8) >= min_int8
    identical, worst = agreement(qpath, folder)
    print(f"{os.path.basename(qpath)}: {identical:.2%} identical, max {worst:.3f} quanta, "
          f"{len(int8)} int8 layers, deployed {[n.op_type for n in result.model.graph.node]}")
    assert identical >= 0.99
    assert worst <= 1.0 + 1e-3
    return result, int8


@pytest.mark.parametrize("act", ["u8", "s8"])
@pytest.mark.parametrize("builder", [tiny_cnn, mobile_block, residual_cnn, branchy_cnn])
def test_qoperator_cnn_runs_int8_like_onnxruntime(tmp_path, builder, act):
    qpath = quantize_qoperator(builder(seed=1), str(tmp_path / "q.onnx"), act)
    q = onnx.load(qpath)
    n_layers = len([n for n in q.graph.node if n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm")])
    result, int8 = _check(qpath, tmp_path, n_layers)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]   # no QLinear op, no Q/DQ left
    assert len([n for n in int8 if n["attrs"]["layer_name"][0] in ("Conv2D", "FC")]) == n_layers
    for d in result.report.decisions.values():
        if d.op_type in QOPS:
            assert d.placement == "accelerator", (d.node, d.reason)


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qoperator_per_tensor_weights(tmp_path, act):
    qpath = quantize_qoperator(residual_cnn(seed=2), str(tmp_path / "q.onnx"), act, per_channel=False)
    result, int8 = _check(qpath, tmp_path, 7)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]


def test_qoperator_model_of_opset_11(tmp_path):
    """A QOperator model of opset 11 (QLinearConv exists since 10): legalize raises it to 13 (per-axis
    DequantizeLinear) and the rewrite applies; bit-exact."""
    qpath = quantize_qoperator(tiny_cnn(seed=1, opset=11), str(tmp_path / "q.onnx"), "u8")
    assert next(o.version for o in onnx.load(qpath).opset_import if o.domain in ("", "ai.onnx")) == 11
    result, _ = _check(qpath, tmp_path, 3)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]


@pytest.mark.parametrize("builder,kw", [(resnet18_like, {"input_size": 64, "num_classes": 10}),
                                        (mobilenetv2_like, {"input_size": 64, "num_classes": 10})])
def test_qoperator_resnet_and_mobilenetv2(tmp_path, builder, kw):
    """ResNet-18 and MobileNetV2 topologies (BN folded by quant_pre_process), per-channel s8 weights,
    u8 activations: QLinearConv / QLinearAdd / QGemm / QLinearGlobalAveragePool / MaxPool on codes."""
    qpath = quantize_qoperator(builder(seed=0, **kw), str(tmp_path / "q.onnx"), "u8", preprocess=True)
    q = onnx.load(qpath)
    convs = len([n for n in q.graph.node if n.op_type in ("QLinearConv", "QGemm", "QLinearMatMul")])
    result, int8 = _check(qpath, tmp_path, convs)
    assert len([n for n in int8 if n["attrs"]["layer_name"][0] in ("Conv2D", "FC")]) == convs
    assert not [n for n in result.model.graph.node if n.op_type in QOPS]


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_qoperator_transformer_encoder(tmp_path, act):
    """A BERT-style encoder layer in QOperator form (QLinearMatMul with constant and activation
    operands, QLinearAdd / QLinearMul of the written-out LayerNorm and GELU, QLinearSoftmax): the
    legalized QDQ model equals onnxruntime's QOperator run exactly; the projections are int8 FCs.
    The converted model is mixed precision: ops the int8 import does not take (the LayerNorm's Mul,
    the attention's batched MatMuls, Softmax) run as fp16 layers between their Q/DQ, where a value on
    a rounding boundary flips a code and the later quantized ops carry it (docs/legalize.md: at most
    4 output quanta, measured 60-62% identical elements)."""
    from onnx_mrvl.testing.arch_transformer import encoder_block
    qpath = quantize_qoperator(encoder_block(seed=0), str(tmp_path / "q.onnx"), act)
    q = onnx.load(qpath)
    assert {"QLinearMatMul", "QLinearAdd", "QLinearSoftmax"} <= {n.op_type for n in q.graph.node}
    result = legalize(q)
    legal, _ = result.model, result.report
    assert not [n for n in legal.graph.node if n.op_type in QOPS]
    # onnxruntime against itself with exact integer sums on any host (testing/ort_sessions.exact_session): on AVX2 without
    # VNNI onnxruntime runs the QDQ form's (S8 -> U8 rewritten) U8S8 kernel with its int16 pair clamp
    # (the simulator follows the given model's kernels: ort_plan's EXACT_SUMS). The S8 QOperator model's
    # S8S8 kernels sum exactly on any host (session.x64quantprecision would turn their weights to uint8,
    # an S8U8 QLinearMatMul onnxruntime has no kernel for).
    ref = exact_session(qpath) if act == "u8" else ort.InferenceSession(qpath)
    mine = exact_session(legal.SerializeToString())
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal((1, 16, 32)).astype(np.float32)
        assert np.array_equal(ref.run(None, {"input": x})[0], mine.run(None, {"input": x})[0])
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    fcs = [n for n in _int8_layers(folder) if n["attrs"]["layer_name"] == ["FC"]]
    weighted = [n for n in q.graph.node if n.op_type == "QLinearMatMul" and
                n.input[3] in {t.name for t in q.graph.initializer}]
    assert len(fcs) == len(weighted) == 6
    identical, worst = agreement(qpath, folder, scale=1.0)
    print(f"encoder {act}: {identical:.2%} identical, max {worst:.3f} quanta")
    assert identical >= 0.5 and worst <= 4 + 1e-3


def _qlinear_model(nodes, inits, x_shape, y_shape, x_type=TensorProto.UINT8, y_type=TensorProto.UINT8):
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                                            [helper.make_tensor_value_info("y", y_type, y_shape)], inits),
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _legal_equals_ort(m, x, tol_quanta=0.0, step=1.0):
    result = legalize(m)
    legal, report = result.model, result.report
    assert not [n for n in legal.graph.node if n.op_type in QOPS], report.skipped
    a = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    b = ort.InferenceSession(legal.SerializeToString()).run(None, {"x": x})[0]
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.abs(a.astype(np.float64) - b.astype(np.float64)).max() <= tol_quanta * step
    return legal


@pytest.mark.parametrize("alpha,trans_b,c_shape", [(1.0, 1, [6]), (0.5, 0, [6]), (2.0, 1, [1, 6])])
def test_qgemm_alpha_and_bias_forms(alpha, trans_b, c_shape):
    """QGemm computes alpha * s_a * s_b * (A_q B_q + C_q): alpha goes into the weight and bias
    scales; per-column weight scales, C as [N] or [1, N]; float output (no y_scale)."""
    rng = np.random.default_rng(0)
    b = rng.integers(-127, 128, (6, 5) if trans_b else (5, 6)).astype(np.int8)
    inits = [nh.from_array(np.array(0.03, np.float32), "as"), nh.from_array(np.array(120, np.uint8), "az"),
             nh.from_array(b, "B"), nh.from_array((rng.random(6) * 0.02 + 0.01).astype(np.float32), "bs"),
             nh.from_array(np.zeros(6, np.int8), "bz"),
             nh.from_array(rng.integers(-4000, 4000, c_shape).astype(np.int32), "C")]
    node = helper.make_node("QGemm", ["x", "as", "az", "B", "bs", "bz", "C"], ["y"], domain="com.microsoft",
                            alpha=alpha, transB=trans_b)
    m = _qlinear_model([node], inits, [3, 5], [3, 6], y_type=F32)
    x = rng.integers(0, 256, (3, 5)).astype(np.uint8)
    _legal_equals_ort(m, x, tol_quanta=1e-5, step=1.0)


def test_qlinear_activations_pad_and_concat():
    """QLinearSigmoid, QLinearLeakyRelu, QLinearMul, QLinearConcat of different scales, a Pad and a
    MaxPool on codes (the pad value is a code): the legalized QDQ model computes onnxruntime's
    codes within one quantum (the lookup-table activations round their table entries)."""
    f = lambda v, n: nh.from_array(np.array(v, np.float32), n)   # noqa: E731
    u = lambda v, n: nh.from_array(np.array(v, np.uint8), n)     # noqa: E731
    inits = [f(0.05, "sx"), u(128, "zx"), f(1 / 256, "ss"), u(0, "zs"), f(0.04, "sl"), u(100, "zl"),
             f(0.03, "sm"), u(110, "zm"), f(0.06, "sc"), u(90, "zc"),
             nh.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"), u(7, "padv")]
    ms = "com.microsoft"
    nodes = [helper.make_node("QLinearSigmoid", ["x", "sx", "zx", "ss", "zs"], ["s"], domain=ms),
             helper.make_node("QLinearLeakyRelu", ["x", "sx", "zx", "sl", "zl"], ["l"], domain=ms, alpha=0.1),
             helper.make_node("QLinearMul", ["s", "ss", "zs", "l", "sl", "zl", "sm", "zm"], ["m"], domain=ms),
             helper.make_node("QLinearConcat", ["sc", "zc", "m", "sm", "zm", "l", "sl", "zl"], ["c"], domain=ms,
                              axis=1),
             helper.make_node("Pad", ["c", "pads", "padv"], ["p"], mode="constant"),
             helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = _qlinear_model(nodes, inits, [1, 4, 6, 6], [1, 8, 4, 4])
    x = np.random.default_rng(1).integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)
    legal = _legal_equals_ort(m, x, tol_quanta=1.0)
    ops = [n.op_type for n in legal.graph.node]
    assert {"Sigmoid", "LeakyRelu", "Mul", "Concat", "Pad", "MaxPool"} <= set(ops)


def test_qlinear_op_that_cannot_be_rewritten_keeps_its_reason(tmp_path):
    """A QLinearConv whose weight scale is computed (not a constant) stays as it is, on the CPU,
    and its decision says why (the legalize refusal), the model still runs like onnxruntime."""
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [nh.from_array(np.array(0.02, np.float32), "sx"), nh.from_array(np.array(128, np.uint8), "zx"),
             nh.from_array(w, "w"), nh.from_array(np.full(4, 0.01, np.float32), "ws0"),
             nh.from_array(np.zeros(4, np.int8), "wz"), nh.from_array(np.array(0.05, np.float32), "sy"),
             nh.from_array(np.array(128, np.uint8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["xf", "sx", "zx"], ["x"], name="q_in"),
             helper.make_node("Abs", ["ws0"], ["ws"], name="computed_scale"),
             helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "ws", "wz", "sy", "zy"], ["yq"],
                              name="qconv", pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dq_out")]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("xf", F32, [1, 3, 8, 8])],
                                            [helper.make_tensor_value_info("y", F32, [1, 4, 8, 8])], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    # Abs of a constant folds: the scale becomes a constant and the rewrite applies
    result = onnx_mrvl.convert(m)
    assert result.report["qconv"].placement == "accelerator"
    m.graph.input.append(helper.make_tensor_value_info("ws_in", F32, [4]))
    m.graph.node[1].input[0] = "ws_in"
    result = onnx_mrvl.convert(m)
    d = result.report["qconv"]
    assert d.placement == "cpu" and "QOperator int8" in d.reason and "scale" in d.reason, d.reason
    folder = str(tmp_path / "out")
    result.save(folder)
    feeds = {"xf": rng.standard_normal((1, 3, 8, 8)).astype(np.float32), "ws_in": np.full(4, 0.01, np.float32)}
    a = ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    b = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx")).run(None, feeds)[0]
    assert np.array_equal(a, b)


def test_qoperator_uint8_weights_are_int8_layers_with_weight_zero_points(tmp_path):
    """U8U8 QOperator (uint8 weights with a zero point): legalized into QDQ like the rest; the int8
    layers take the weights with their zero points (codes q - 128, zero points z - 128; they stayed
    on the CPU before) and the model computes onnxruntime's codes exactly."""
    m = residual_cnn(seed=1)
    src, qpath = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    quantization.quantize_static(src, qpath, _Reader("input", [1, 3, 32, 32], n=4),
                                 quant_format=quantization.QuantFormat.QOperator, per_channel=False,
                                 weight_type=quantization.QuantType.QUInt8,
                                 activation_type=quantization.QuantType.QUInt8)
    result = onnx_mrvl.convert(qpath)
    d = result.report["stem_quant"]
    assert d.placement == "accelerator" and "int8" in d.reason
    folder = str(tmp_path / "out")
    result.save(folder)
    identical, worst = agreement(qpath, folder)
    assert identical == 1.0 and worst == 0.0


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool_layouts(channels_last):
    """QLinearGlobalAveragePool NCHW and NHWC (channels_last, as onnxruntime's NHWC transformer writes
    it: the float pool between Transposes) and QLinearAveragePool: within one quantum of onnxruntime
    (its requantization rounds the sum once; the QDQ form rounds the float mean)."""
    f = lambda v, n: nh.from_array(np.array(v, np.float32), n)   # noqa: E731
    u = lambda v, n: nh.from_array(np.array(v, np.uint8), n)     # noqa: E731
    inits = [f(0.05, "sx"), u(120, "zx"), f(0.02, "sy"), u(130, "zy")]
    ms = "com.microsoft"
    shape = [1, 5, 6, 8] if channels_last else [1, 8, 5, 6]
    nodes = [helper.make_node("QLinearAveragePool", ["x", "sx", "zx", "sx", "zx"], ["p"], domain=ms,
                              kernel_shape=[2, 2], strides=[1, 1], channels_last=0)] if not channels_last else []
    src = "p" if not channels_last else "x"
    nodes.append(helper.make_node("QLinearGlobalAveragePool", [src, "sx", "zx", "sy", "zy"], ["y"], domain=ms,
                                  channels_last=channels_last))
    out = [1, 1, 1, 8] if channels_last else [1, 8, 1, 1]
    m = _qlinear_model(nodes, inits, shape, out)
    x = np.random.default_rng(5).integers(0, 256, shape).astype(np.uint8)
    _legal_equals_ort(m, x, tol_quanta=1.0)
