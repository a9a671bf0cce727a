"""MediaPipe's float TFLite models through tf2onnx (onnx_mrvl/testing/blazeface_models.py): the
channel zero-padding of BlazeFace's widening blocks (``pad_channel_concat``), PRelu, depthwise 5x5
with asymmetric SAME pads, the FPN's half-pixel Resize. One region, within the fp16 bound."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import blazeface_models


def _ref(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_channel_pad_is_an_exact_concat():
    m = blazeface_models.detector(0)
    res = legalize(m)
    out = res.model
    ops = [n.op_type for n in out.graph.node]
    assert "Pad" not in ops
    assert sum(1 for _, _, d in res.log if "channel Pad" in d) == 3
    inits = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    pads = [n for n in out.graph.node if n.name.startswith("channel_padding")]
    assert len(pads) == 3 and all(n.op_type == "Concat" for n in pads)
    for n in pads:
        block = inits[n.input[1]]
        assert not np.any(block) and block.shape[1] in (8, 16)
    f = blazeface_models.feeds(m, 1)
    for a, b in zip(_ref(m, f), _ref(out, f)):
        assert np.array_equal(a, b), "the Concat of zero blocks is the Pad"


@pytest.mark.parametrize("act", ["prelu", "relu"])
def test_blazeface_detector_one_region(tmp_path, act):
    m = blazeface_models.detector(1, act=act)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = onnx_mrvl.convert(str(path))
    assert len(r.report.regions) == 1
    assert not r.report.cpu_nodes(), [d.op_type for d in r.report.cpu_nodes()]
    r.save(str(tmp_path / "out"), overwrite=True)
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    for seed in (2, 3):
        f = blazeface_models.feeds(m, seed)
        for got, ref in zip(sess.run(None, f), _ref(m, f)):
            assert got.shape == ref.shape
            assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


def _pad_model(pads, value, rank=4, before="Relu"):
    shape = [1, 6, 5, 7][:rank] if rank != 5 else [1, 6, 2, 3, 4]
    nodes = [helper.make_node(before, ["x"], ["h"], name="pre"),
             helper.make_node("Pad", ["h", "p", "v"], ["y0"], name="pad"),
             helper.make_node("Relu", ["y0"], ["y"], name="post")]
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "p"), numpy_helper.from_array(np.array(value, np.float32), "v")]
    out = list(shape)
    out[1] += pads[1] + pads[1 + rank]
    g = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("rank,pads,value", [
    (4, [0, 2, 0, 0, 0, 3, 0, 0], 0.5),    # both sides, a nonzero value
    (3, [0, 0, 0, 0, 4, 0], 0.0),          # [N, C, L]
    (5, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0], -1.0),
])
def test_channel_pad_forms(rank, pads, value):
    m = _pad_model(pads, value, rank)
    out = legalize(m).model
    assert [n.op_type for n in out.graph.node] == ["Relu", "Concat", "Relu"]
    x = np.random.default_rng(0).normal(size=[d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim])
    f = {"x": x.astype(np.float32)}
    assert np.array_equal(_ref(m, f)[0], _ref(out, f)[0])


@pytest.mark.parametrize("pads,why", [
    ([0, 2, 1, 0, 0, 2, 0, 0], "spatial too"),
    ([0, -1, 0, 0, 0, 0, 0, 0], "cropping"),
])
def test_channel_pad_left_alone(pads, why):
    out = legalize(_pad_model(pads, 0.0)).model
    assert "Concat" not in [n.op_type for n in out.graph.node], why


def test_channel_pad_between_cpu_ops_stays():
    m = _pad_model([0, 2, 0, 0, 0, 0, 0, 0], 0.0, before="Cos")
    m.graph.node[2].op_type = "Sin"
    assert "Pad" in [n.op_type for n in legalize(m).model.graph.node]


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_blazeface_qdq_channel_pad_is_an_int8_conv(tmp_path, act):
    """quantize_static of the detector: ``DQ -> Pad(channels) -> Q`` -> an int8 one-hot 1x1 Conv
    (exact), one region, the outputs' codes as onnxruntime's. No FPN: onnxruntime's quantizer leaves
    the PRelu before the Resize float (docs/surveys/tflite.md)."""
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    m = blazeface_models.detector(2, act="relu", fpn=False)
    src = tmp_path / "f.onnx"
    onnx.save(m, src)
    dst = quantize_static_qdq(str(src), str(tmp_path / "q.onnx"), [blazeface_models.feeds(m, s) for s in range(4)], act)
    q = onnx.load(dst)
    res = legalize(q)
    assert sum(1 for name, _, _ in res.log if name == "qdq_pad_channel") == 3
    assert "Pad" not in [n.op_type for n in res.model.graph.node]
    f = blazeface_models.feeds(m, 7)
    for a, b in zip(_ref(q, f), _ref(res.model, f)):
        assert np.array_equal(a, b), "the one-hot int8 conv is the pad"
    r = onnx_mrvl.convert(dst)
    assert len(r.report.regions) == 1
    assert not r.report.cpu_nodes(), [d.op_type for d in r.report.cpu_nodes()]
    r.save(str(tmp_path / "out"), overwrite=True)
    got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, f)
    same = sum(int((a == b).sum()) for a, b in zip(got, _ref(q, f)))
    assert same >= 0.99 * sum(a.size for a in got)


@pytest.mark.parametrize("op,opset,want", [
    ("HardSwish", 13, "an ONNX op from opset 14 in a model of opset 13: export at opset 14 or newer"),
    ("TFL_Convolution2DTransposeBias", 17, "a TFLite custom op that tf2onnx passed through"),
])
def test_unknown_op_error_says_what_to_do(tmp_path, op, opset, want):
    """tf2onnx writes HardSwish at --opset 13 (it is opset 14) and passes MediaPipe's TFLite custom
    ops through as default-domain ``TFL_*`` nodes: the checker refuses both (onnxruntime too); the
    error names the node and the fix."""
    from onnx_mrvl.errors import ModelError
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["h"], name="r"), helper.make_node(op, ["h"], ["y"], name="custom")],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    with pytest.raises(ModelError) as e:
        onnx_mrvl.convert(str(path))
    assert want in str(e.value) and "'custom'" in str(e.value)


def _se_nhwc(seed: int = 0, c: int = 96, hw: int = 16) -> onnx.ModelProto:
    """tf2onnx's squeeze-excite of a TFLite model with NHWC element-wise ops (MediaPipe's selfie
    segmenter): Conv -> Transpose NHWC -> HardSwish -> Transpose NCHW -> AveragePool over the map ->
    Reshape -> Conv 1x1 + Relu -> Conv 1x1 (the gate's logits); the HardSwish also feeds a conv (main path)."""
    rng = np.random.default_rng(seed)
    w = lambda *s: numpy_helper.from_array((rng.normal(0, 1, s) / np.sqrt(s[1])).astype(np.float32))  # noqa: E731
    inits = []

    def const(a, name):
        a.name = name
        inits.append(a)
        return name
    nodes = [helper.make_node("Conv", ["x", const(w(c, 8, 3, 3), "w0")], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Transpose", ["c0"], ["t0"], perm=[0, 2, 3, 1]),
             helper.make_node("HardSwish", ["t0"], ["h"]),
             helper.make_node("Transpose", ["h"], ["t2"], perm=[0, 3, 1, 2]),   # the main path: a conv
             helper.make_node("Conv", ["t2", const(w(c, c, 1, 1), "w3")], ["z"], kernel_shape=[1, 1]),
             helper.make_node("Transpose", ["h"], ["t1"], perm=[0, 3, 1, 2]),
             helper.make_node("AveragePool", ["t1"], ["p"], kernel_shape=[hw, hw], strides=[hw, hw]),
             helper.make_node("Reshape", ["p", const(numpy_helper.from_array(np.array([1, c, 1, 1], np.int64)), "shape")], ["r"]),
             helper.make_node("Conv", ["r", const(w(c // 4, c, 1, 1), "w1"),
                                       const(numpy_helper.from_array(rng.normal(0, 0.1, c // 4).astype(np.float32)), "b1")], ["c1"],
                              kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", const(w(c, c // 4, 1, 1), "w2")], ["y"], kernel_shape=[1, 1])]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 1, 1]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, c, hw, hw])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_qdq_pool_behind_a_transpose_is_int8(tmp_path):
    """quantize_static puts the pair before the NCHW Transpose; onnxruntime runs the pool as
    QLinearAveragePool. ``qdq_pool_transpose`` gives the pool a DQ of its own (exact), so it is an
    int8 layer: the squeeze-excite codes are onnxruntime's (an fp16 mean quantized by the next
    layer moved some)."""
    m = _se_nhwc(0)
    src = tmp_path / "f.onnx"
    onnx.save(m, src)
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.normal(0, 1, (1, 8, 16, 16)).astype(np.float32)} for _ in range(8)]
    from onnxruntime import quantization as oq
    from onnxruntime.quantization.registry import QDQRegistry
    data = iter(feeds)

    class Reader(oq.CalibrationDataReader):
        def get_next(self):
            return next(data, None)
    dst = str(tmp_path / "q.onnx")   # HardSwish quantized too (its pair then sits before the Transpose)
    oq.quantize_static(str(src), dst, Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8,
                       op_types_to_quantize=sorted(set(QDQRegistry) | {"HardSwish"}))
    q = onnx.load(dst)
    # as the quantizer wrote MediaPipe's selfie model: no pair between the Transpose, the pool and
    # the Reshape (HardSwish's pair before the Transpose, the Reshape's after it)
    drop = {"t1_QuantizeLinear", "t1_DequantizeLinear", "p_QuantizeLinear", "p_DequantizeLinear"}
    keep = [n for n in q.graph.node if n.name not in drop]
    for n in keep:
        for k, t in enumerate(n.input):
            n.input[k] = {"t1_DequantizeLinear_Output": "t1", "p_DequantizeLinear_Output": "p"}.get(t, t)
    assert len(keep) == len(q.graph.node) - 4
    del q.graph.node[:]
    q.graph.node.extend(keep)
    onnx.save(q, dst)
    res = legalize(q)
    assert [name for name, _, _ in res.log].count("qdq_pool_transpose") == 1
    for f in feeds[:2]:
        for a, b in zip(_ref(q, f), _ref(res.model, f)):
            assert np.array_equal(a, b), "the identity pair is exact"
    r = onnx_mrvl.convert(dst)
    assert len(r.report.regions) == 1
    r.save(str(tmp_path / "out"), overwrite=True)
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    same = total = 0
    for seed in range(10, 22):
        f = {"x": np.random.default_rng(seed).normal(0, 1, (1, 8, 16, 16)).astype(np.float32)}
        for a, b in zip(sess.run(None, f), _ref(q, f)):
            same, total = same + int((a == b).sum()), total + a.size
    assert same == total, f"{total - same} of {total} outputs differ"
