"""LRN (LocalResponseNormalization) on the accelerator (mrvl.lrn): structure (one region, no LRN on the
CPU, the LRN layer in the Nodes-JSON and the binary), numbers against onnxruntime within the documented
fp16 bound (docs/simulator.md "LRN"), the reference body, the perf model's cost, fail-closed checks."""
import copy

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl import costmodel, opset
from onnx_mrvl.artifact import load
from onnx_mrvl.emit import compile_json
from onnx_mrvl.errors import CompileError, MrvlError
from onnx_mrvl.fuse import fuse
from onnx_mrvl.graph_index import GraphIndex
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.lrn import lrn
from onnx_mrvl.split.cost import vector_ops

R = np.random.default_rng(11)
U = 2.0 ** -11   # fp16 unit roundoff


def bound(want, beta, input_rounded=True):
    """docs/simulator.md "LRN": (2 + 2|beta|) u |y| (an fp16-rounded input and the one output rounding),
    u |y| when the input is already fp16; fp32 math and fp16 subnormals add below 1e-6 |y| + 2^-23."""
    k = (2 + 2 * abs(beta)) if input_rounded else 1
    return (k * U + 1e-6) * np.abs(want) + 2.0 ** -23


def lrn_model(shape, conv=False, **attrs):
    """x -> LRN -> y, or x -> conv -> LRN -> conv -> y (``conv``)."""
    c = shape[1]
    inits, nodes = [], []
    src = "x"
    if conv:
        inits = [nh.from_array((R.standard_normal([c, c, 3, 3]) * 0.5).astype(np.float32), "W"),
                 nh.from_array((R.standard_normal([c, c, 1, 1]) * 0.3).astype(np.float32), "W2")]
        nodes.append(h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(h.make_node("LRN", [src], ["l" if conv else "y"], name="lrn", **attrs))
    if conv:
        nodes.append(h.make_node("Conv", ["l", "W2"], ["y"], name="conv2"))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, list(shape))],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _ort(m, x):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def spec(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """The ONNX spec in float64, channel by channel (NCHW)."""
    x = x.astype(np.float64)
    c = x.shape[1]
    s = np.stack([np.sum(x[:, max(0, k - (size - 1) // 2):min(c, k + size // 2 + 1)] ** 2, axis=1)
                  for k in range(c)], axis=1)
    return (x / (bias + alpha / size * s) ** beta).astype(np.float32)


def want_of(m, x, attrs):
    """onnxruntime's output (checked against the spec), or the spec where onnxruntime's CPU LRN refuses
    what the ONNX spec allows: even sizes ("size_ % 2 == 1"), beta <= 0 ("beta_ > 0.0f")."""
    if attrs["size"] % 2 and attrs["beta"] > 0 and attrs["alpha"] > 0:
        want = _ort(m, x)
        assert np.allclose(want, spec(x, **attrs), rtol=1e-5, atol=1e-6)
        return want
    with pytest.raises(Exception, match="size_ % 2 == 1|beta_ > 0.0f|alpha_ > 0.0f"):
        _ort(m, x)
    return spec(x, **attrs)


CASES = [  # (shape NCHW, LRN attributes): odd / even sizes, size 1, size > C, bias / alpha / beta, batch 2
    ([1, 16, 5, 6], dict(size=5)),
    ([2, 16, 5, 6], dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)),
    ([1, 12, 4, 4], dict(size=4, alpha=0.02, beta=0.5, bias=2.0)),
    ([2, 7, 3, 5], dict(size=2, alpha=0.5, beta=1.0, bias=0.5)),
    ([1, 5, 4, 3], dict(size=9, alpha=0.1, beta=0.75, bias=1.0)),     # size > C: the window covers every channel
    ([1, 6, 3, 3], dict(size=12, alpha=0.3, beta=0.3, bias=1.5)),     # even size > 2C - 1
    ([1, 8, 3, 3], dict(size=1, alpha=1.0, beta=0.75, bias=1.0)),
    ([2, 9, 4, 4], dict(size=3, alpha=1e-3, beta=-0.25, bias=3.0)),   # negative beta: a multiplier growing with s
]


@pytest.mark.parametrize("shape, attrs", CASES)
def test_kernel_matches_onnxruntime(shape, attrs):
    """The simulator kernel on NHWC fp16 values against onnxruntime's LRN (the spec for even sizes):
    within one fp16 rounding."""
    x = (R.standard_normal(shape) * 3).astype(np.float16).astype(np.float32)
    a = dict(dict(alpha=1e-4, beta=0.75, bias=1.0), **attrs)
    want = want_of(lrn_model(shape, **attrs), x, a)
    got, ok = lrn(x.transpose(0, 2, 3, 1), a["size"], a["alpha"], a["beta"], a["bias"])
    got = got.transpose(0, 3, 1, 2)
    assert ok and np.array_equal(got, got.astype(np.float16).astype(np.float32))   # fp16 storage
    assert (np.abs(got - want) <= bound(want, a["beta"], input_rounded=False)).all()


@pytest.mark.parametrize("shape, attrs", CASES)
def test_converted_lrn_matches_onnxruntime(shape, attrs, tmp_path):
    """A model of one LRN: one region, the LRN layer in the JSON, every output element within the
    documented bound of onnxruntime's on the float model (fp16 input rounding included); the reference
    body in plain onnxruntime within fp32 noise."""
    m = lrn_model(shape, **attrs)
    x = (R.standard_normal(shape) * 3).astype(np.float32)
    a = dict(dict(alpha=1e-4, beta=0.75, bias=1.0), **attrs)
    want = want_of(m, x, a)
    result = onnx_mrvl.convert(m, force=True)   # a region of one LRN (no MAC work: the minimum-work rule)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert result.report["lrn"].placement != "cpu"
    layer = next(n for n in result.subgraphs[0].nodes_json["nodes"] if n.get("op") == "tvm_op"
                 and n["attrs"]["layer_name"] == ["LRN"])
    ref = onnx_mrvl.convert(m, reference=True, force=True).model    # the reference body (opset_lrn.py), any size
    assert np.abs(_ort(ref, x) - want).max() <= 1e-5 * np.abs(want).max()
    assert layer["attrs"]["size"] == [str(a["size"])] and layer["attrs"]["data_layout"] == ["NHWC"]
    assert [np.float32(layer["attrs"][k][0]) for k in ("alpha", "beta", "bias")] == \
        [np.float32(a[k]) for k in ("alpha", "beta", "bias")]   # float32 in 9 significant digits
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": x})[0]
    assert got.shape == want.shape
    assert (np.abs(got - want) <= bound(want, a["beta"])).all()


def test_conv_lrn_conv_and_reference_body(tmp_path):
    """conv -> LRN -> conv (batch 2): one region; the simulator within 1e-2 max|ref|; the reference body
    (opset_lrn.py) in plain onnxruntime equal to the original within fp32 noise."""
    m = lrn_model([2, 16, 7, 7], conv=True, size=5, alpha=1e-2, beta=0.75, bias=1.0)
    x = R.standard_normal([2, 16, 7, 7]).astype(np.float32)
    want = _ort(m, x)
    fused = fuse(legalize(m))
    lrns = [n for n in fused.model.graph.node if n.domain == opset.DOMAIN and n.op_type == "LRN"]
    assert len(lrns) == 1 and fused.decisions["lrn"].composite == "mrvl.lrn"
    assert not any(n.op_type == "LayoutTransform" for n in fused.model.graph.node[1:-1])   # NHWC throughout
    assert np.abs(_ort(fused.model, x) - want).max() <= 1e-5 * np.abs(want).max()
    ref = onnx_mrvl.convert(m, reference=True)
    assert np.abs(_ort(ref.model, x) - want).max() <= 1e-5 * np.abs(want).max()
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": x})[0]
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


def test_perf_model_cost():
    """vector_ops = elements * (min(size, C) + 7), the same in the compile step, split's cost and the
    perf model's derivation for a layer without it."""
    for size, c in ((5, 16), (9, 5)):
        m = lrn_model([2, c, 4, 4], size=size)
        result = onnx_mrvl.convert(m, force=True)
        layer = next(li for li in load(result.subgraphs[0].binary).meta["layers"] if li["layer_name"] == "LRN")
        assert layer["vector_ops"] == 2 * c * 16 * (min(size, c) + 7)
        assert layer["params"]["size"] == size and layer["params"]["bias"] == 1.0
        fused = fuse(legalize(m)).model
        node = next(n for n in fused.graph.node if n.op_type == "LRN")
        assert vector_ops(GraphIndex(fused), node) == layer["vector_ops"]
        hand_written = {k: v for k, v in layer.items() if k != "vector_ops"}   # the perf model derives it
        assert costmodel.vector_ops(hand_written, {t: [2, 4, 4, c] for t in layer["outputs"]}) == layer["vector_ops"]


@pytest.mark.parametrize("attrs, reason", [
    (dict(size=5, bias=0.0), "bias > 0"),
    (dict(size=5, alpha=-1e-3), "alpha >= 0"),
])
def test_unsafe_attributes_stay_on_the_cpu(attrs, reason):
    d = fuse(legalize(lrn_model([1, 8, 4, 4], **attrs))).decisions["lrn"]
    assert d.placement == "cpu" and reason in d.reason


def test_3d_input_stays_on_the_cpu():
    d = fuse(legalize(lrn_model([1, 8, 10], size=3))).decisions["lrn"]
    assert d.placement == "cpu" and "4-D" in d.reason


@pytest.mark.parametrize("key, value, message", [("size", ["0"], "size 0"), ("bias", ["0"], "bias > 0"),
                                                 ("alpha", ["nan"], "alpha nan")])
def test_compile_refuses_a_bad_lrn_layer(key, value, message):
    result = onnx_mrvl.convert(lrn_model([1, 8, 4, 4], size=3), force=True)
    nodes = copy.deepcopy(result.subgraphs[0].nodes_json)
    layer = next(n for n in nodes["nodes"] if n.get("op") == "tvm_op" and n["attrs"]["layer_name"] == ["LRN"])
    layer["attrs"][key] = value
    with pytest.raises(CompileError, match=message):
        compile_json(nodes, result.subgraphs[0].consts_json)


def test_fp16_overflow_fails_closed(tmp_path):
    """An output beyond fp16's range is an error, never inf: bias 1e-3, beta -1 multiplies x by ~1e4 s."""
    m = lrn_model([1, 4, 2, 2], size=3, alpha=1.0, beta=-1.0, bias=1e-3)
    x = np.full([1, 4, 2, 2], 100.0, np.float32)
    result = onnx_mrvl.convert(m, force=True)
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path)))
    with pytest.raises(MrvlError, match="fp16 overflow: LRN"):
        sess.run(None, {"x": x})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inception_v1", "bvlc_alexnet"])
def test_zoo_models_in_one_region(name, tmp_path):
    """The onnx wheel's inception_v1 and bvlc_alexnet (seeded weights): their 2 LRNs on the
    accelerator, one region, nothing on the CPU, within 1e-2 max|ref| of onnxruntime."""
    from onnx_mrvl.testing.int8_zoo import float_model, inputs
    m = float_model(name)
    assert sum(n.op_type == "LRN" for n in m.graph.node) == 2
    result = onnx_mrvl.convert(m)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    assert result.report.cpu_nodes() == []
    layers = [n for n in result.subgraphs[0].nodes_json["nodes"] if n.get("op") == "tvm_op"
              and n["attrs"]["layer_name"] == ["LRN"]]
    assert len(layers) == 2 and all(n["attrs"]["composite_name"] == ["mrvl.lrn"] for n in layers)
    feed = inputs(m, 1, 0)[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, feed)[0]
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


@pytest.mark.parametrize("act", ["s8", "u8"])
def test_qdq_model_lrn_whose_output_is_quantized_stays_on_the_cpu(act, tmp_path):
    """onnxruntime's quantize_static of conv -> relu -> LRN -> conv (an AlexNet block): onnxruntime keeps
    DQ -> LRN -> Q in float and quantizes its fp32 result. An fp16 LRN layer moves codes near rounding
    ties (AlexNet: 16 output steps), so an LRN whose output is quantized stays on the CPU, with the
    reason, and the int8 layers around it match onnxruntime bit for bit."""
    pytest.importorskip("onnxruntime.quantization")
    from onnx_mrvl.testing import int8_zoo
    m = lrn_model([1, 16, 10, 10], conv=True, size=5, alpha=1e-2, beta=0.75, bias=1.0)
    m.graph.node.insert(1, h.make_node("Relu", ["c"], ["cr"], name="relu"))
    m.graph.node[2].input[0] = "cr"
    qpath = int8_zoo.quantize(m, str(tmp_path / "q"), act)
    row = int8_zoo.measure("lrn_block", qpath, str(tmp_path / "out"), act, n_inputs=4)
    assert row.cpu_ops == {"LRN": 1} and row.inner_qdq == 0, row
    assert row.identical == 1.0 and row.max_quanta == 0, row
    res = onnx_mrvl.convert(qpath)
    lrn = next(d for d in res.report.decisions.values() if d.op_type == "LRN")
    assert lrn.placement == "cpu" and "quantized" in lrn.reason, lrn
    kinds = [(n["attrs"]["layer_name"][0], n["attrs"].get("precision", ["fp16"])[0])
             for sg in res.subgraphs for n in sg.nodes_json["nodes"]
             if n.get("op") == "tvm_op" and n["attrs"]["layer_name"][0] in ("Conv2D", "LRN")]
    assert kinds == [("Conv2D", "int8"), ("Conv2D", "int8")], kinds
