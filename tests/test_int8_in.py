"""int8-in / fp16-out layers (precision "int8_in", fuse/qdq_int8_in.py, sim/int8_in.py): a QDQ
Conv / Gemm / MatMul whose output is float (ModelOpt / TensorRT "inputs only") quantizes its input,
multiplies int8 x int8 and dequantizes in fp32, storing fp16. Against onnxruntime's run of the
QDQ model (DQ -> fp32 Conv): every element within half an fp16 ulp of the reference plus fp32
summation slack (docs/simulator.md "int8-in layers"): |y - ref| <= 2^-11 |ref| + 2^-24 + 1e-6 max|ref|."""
from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.costmodel import roofline
from onnx_mrvl.errors import MrvlError
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.testing.ort_sessions import exact_session
from onnx_mrvl.testing import int8_in_models as im

CASES = {
    "conv_s8_per_channel_int32_bias": dict(kind="conv"),
    "conv_u8_per_tensor_fp32_bias_relu": dict(kind="conv", act="u8", per_channel=False, bias="fp32", activation="Relu"),
    "depthwise_s8_clip": dict(kind="conv", groups=8, channels=(8, 8), activation="Clip"),
    "conv1x1_leaky_relu": dict(kind="conv", kernel=1, activation="LeakyRelu"),
    "gemm_s8": dict(kind="gemm"),
    "gemm_u8_fp32_bias_sigmoid": dict(kind="gemm", act="u8", bias="fp32", activation="Sigmoid"),
    "matmul_nd_bias_add": dict(kind="matmul"),
    "matmul_nd_u8_per_tensor": dict(kind="matmul", act="u8", per_channel=False, bias=None),
    # a BatchNormalization left after the layer (pytorch-quantization QAT exports): its factor (of
    # either sign) in the weight scales, the int8 codes kept
    "conv_bn_relu": dict(kind="conv", bias="fp32", activation="Relu", bn=True),
    "gemm_u8_per_tensor_bn": dict(kind="gemm", act="u8", per_channel=False, bn=True),
}


def _bound_ratio(ref: np.ndarray, y: np.ndarray) -> float:
    ref, y = ref.astype(np.float64), y.astype(np.float64)
    bound = 2.0 ** -11 * np.abs(ref) + 2.0 ** -24 + 1e-6 * np.abs(ref).max()
    return float((np.abs(y - ref) / bound).max())


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = {}
    for name, kw in CASES.items():
        m = im.layer(**kw)
        r = onnx_mrvl.convert(m)
        d = str(tmp_path_factory.mktemp(name))
        r.save(d, overwrite=True)
        out[name] = (m, r, d)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_structure(converted, name):
    """One region, no Q/DQ (nor anything else) on the CPU; the JSON states int8_in with the input's
    quantization, int8 kernel, float32 bias and fp16 output; the decision names the precision."""
    m, r, d = converted[name]
    assert len(r.subgraphs) == 1
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    nodes = json.load(open(os.path.join(d, f"{r.subgraphs[0].name}-nodes.json")))["nodes"]
    layers = [n for n in nodes if n.get("attrs", {}).get("precision") == ["int8_in"]]
    assert len(layers) == 1, [n.get("attrs", {}).get("layer_name") for n in nodes]
    a = layers[0]["attrs"]
    assert a["kernel_dtype"] == ["int8"] and a["out_dtype"] == ["float16"] and "out_scale" not in a
    assert a["in_dtype"] == [{"s8": "int8", "u8": "uint8"}[CASES[name].get("act", "s8")]]
    assert "weight_scale_const_name" in a
    if CASES[name].get("bias", "int32"):
        assert a["bias_dtype"] == ["float32"] and a["bias_const"]["dtype"] == "float32"
    dec = r.report.decisions["layer"]
    assert dec.placement == "accelerator" and dec.precision == "int8 in, fp16 out"
    assert "is not quantized" in dec.reason, dec.reason


@pytest.mark.parametrize("name", list(CASES))
def test_numbers_against_onnxruntime(converted, name):
    m, r, d = converted[name]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
    for seed in range(3):
        f = im.feeds(m, seed)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        assert b.dtype == np.float32 and np.isfinite(b).all()
        assert _bound_ratio(a, b) <= 1.0, (name, seed, _bound_ratio(a, b))


def test_numpy_layer_is_exact_integer_sum():
    """sim/int8_in.py on its own: fp32(acc) * m + b with acc the exact integer sum, then fp16."""
    from onnx_mrvl.sim.int8_in import Int8InFC
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (5, 40)).astype(np.int8)
    ws = rng.uniform(0.001, 0.01, 5).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    p = {"in_scale": 0.02, "in_zero_point": 3, "in_dtype": "int8"}
    layer = Int8InFC(w, b, ws, p)
    x = rng.standard_normal((7, 40)).astype(np.float32)
    q = np.clip(np.rint(x / np.float32(0.02)) + 3, -128, 127) - 3
    acc = q.astype(np.int64) @ w.T.astype(np.int64)
    want = ((acc.astype(np.float32) * (np.float32(0.02) * ws)).astype(np.float32) + b).astype(np.float16)
    y, finite = layer.apply(x)
    assert finite and np.array_equal(y, want.astype(np.float32))


@pytest.mark.parametrize("name", ["conv_u8_per_tensor_fp32_bias_relu", "depthwise_s8_clip", "gemm_u8_fp32_bias_sigmoid",
                                  "matmul_nd_bias_add", "conv_bn_relu"])
def test_reference_body_runs_in_onnxruntime(name):
    """The fused model (model-local functions) runs in plain onnxruntime and computes what the QDQ
    model computes (Q -> DQ of X, DQ of W, the fp32 float body)."""
    m = im.layer(**CASES[name])
    fused = fuse(legalize(m).model).model
    assert any(n.op_type in ("Conv2D", "FC") and any(a.name == "precision" and a.s == b"int8_in" for a in n.attribute)
               for n in fused.graph.node)
    f = im.feeds(m)
    # onnxruntime against itself: an FC's in both sessions with exact integer sums (testing/ort_sessions.exact_session),
    # as on a VNNI host (on AVX2 its U8S8 kernel, the model's QGemm / MatMulIntegerToFloat, clamps pairs, the
    # body's kernel may not); a Conv's runs as onnxruntime's float Conv in both, on any host (its
    # session.x64quantprecision rewrite refuses the body's per-channel weight DQ without a zero point)
    run = exact_session if CASES[name]["kind"] != "conv" else (
        lambda mb: ort.InferenceSession(mb, providers=["CPUExecutionProvider"]))
    a = run(m.SerializeToString()).run(None, f)[0]
    b = run(fused.SerializeToString()).run(None, f)[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_quantized_output_stays_int8_and_fp32_bias_kept_only_without_q():
    """A layer whose output a Q reads is an ordinary int8 layer (not int8_in); legalize quantizes an
    fp32 bias only then (onnxruntime's BiasQuantization), the int8-in layer keeps it fp32."""
    from onnx import helper, numpy_helper
    m = im.layer(kind="conv", bias="fp32")
    legal = legalize(m).model
    assert not [n for n in legal.graph.node if n.op_type == "DequantizeLinear" and "b_quantized" in n.input[0]]
    m.graph.node[-1].output[0] = "y_float"   # the same layer with an output pair
    m.graph.initializer.append(numpy_helper.from_array(np.array(0.05, np.float32), "y_s"))
    m.graph.node.extend([helper.make_node("QuantizeLinear", ["y_float", "y_s"], ["y_q"]),
                         helper.make_node("DequantizeLinear", ["y_q", "y_s"], ["y"])])
    legal = legalize(m).model
    assert [n for n in legal.graph.node if n.op_type == "DequantizeLinear" and "b_quantized" in n.input[0]]
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["layer"].precision == "int8"


def test_perf_model_int8_rate_fp16_output():
    """Perf model: the int8-in layer's MACs at the int8 rate; it reads an int8 tensor (the region
    input, quantized by the host) and writes an fp16 one (2 bytes per element)."""
    from onnx_mrvl.costmodel import arch_params, perf_report
    from onnx_mrvl.emit.compile import build_program
    m = im.layer(kind="conv", channels=(64, 64), size=28)
    sg = onnx_mrvl.convert(m).subgraphs[0]
    meta, _ = build_program(sg.nodes_json, sg.consts_json)
    layer = next(x for x in meta["layers"] if x["params"].get("precision") == "int8_in")
    tensors = {t["id"]: t for t in meta["tensors"]}
    assert tensors[layer["inputs"][0]].get("dtype") == "int8"
    assert tensors[layer["outputs"][0]].get("dtype", "float16") == "float16"
    row = next(x for x in perf_report(meta).layers if x.name == layer["name"])
    macs = 64 * 64 * 9 * 28 * 28
    arch = arch_params(meta)
    assert row.macs == macs
    assert row.compute_cycles == roofline(macs, 0, 0, arch, int8=True)["compute"] < roofline(macs, 0, 0, arch)["compute"]


def test_compile_refuses_an_int8_in_layer_with_an_output_scale(converted, tmp_path):
    from onnx_mrvl.emit.compile import compile_json
    m, r, d = converted["gemm_s8"]
    name = r.subgraphs[0].name
    nodes = json.load(open(os.path.join(d, f"{name}-nodes.json")))
    consts = json.load(open(os.path.join(d, f"{name}-consts.json")))
    compile_json(nodes, consts)   # as written: fine
    for n in nodes["nodes"]:
        if n.get("attrs", {}).get("precision") == ["int8_in"]:
            n["attrs"]["out_scale"] = ["0.1"]
    with pytest.raises(MrvlError, match="int8_in layer writes fp16"):
        compile_json(nodes, consts)


def test_native_kernels_bit_identical_to_numpy():
    """int8_in_native.py (the VNNI kernels with an identity requantization) against the numpy path:
    random Conv2D (kernels 1-5, strides, dilation, pads, depthwise), FC; int8 / uint8; weight zero
    points or none; activations; NaN."""
    from onnx_mrvl.sim import int8_in_native, int8_native
    from onnx_mrvl.sim.int8_in import Int8InConv2D, Int8InFC
    if int8_native.lib() is None:
        pytest.skip(f"native int8 kernels: {int8_native.why_disabled()}")
    rng = np.random.default_rng(0)
    for trial in range(16):
        o = int(rng.integers(1, 70))
        groups, ig = (o, 1) if trial % 4 == 0 else (1, int(rng.integers(1, 40)))
        kh, kw = (int(v) for v in rng.integers(1, 6, 2))
        w = rng.integers(-127, 128, (o, kh, kw, ig)).astype(np.int8)
        ws = rng.uniform(1e-3, 1e-2, o).astype(np.float32)
        b = rng.standard_normal(o).astype(np.float32)
        dt = ["int8", "uint8"][trial % 2]
        p = {"in_scale": float(rng.uniform(0.01, 0.1)), "in_dtype": dt,
             "in_zero_point": int(rng.integers(-20, 20)) + (128 if dt == "uint8" else 0)}
        act = ["none", "relu", "leaky_relu", "sigmoid", "clamp"][trial % 5]
        ap = {"alpha": 0.1} if act == "leaky_relu" else ({"min": 0.0, "max": 6.0} if act == "clamp" else None)
        zw = rng.integers(-128, 128, o).astype(np.int32) if trial % 2 else None     # asymmetric weights too
        conv = Int8InConv2D(w, b, ws, p, [int(rng.integers(1, 3))] * 2, [int(v) for v in rng.integers(0, 3, 4)],
                            [int(rng.integers(1, 3))] * 2, groups, act, ap, weight_zero_point=zw)
        x = (rng.standard_normal((2, int(rng.integers(12, 18)), int(rng.integers(12, 18)), ig * groups)) * 3
             ).astype(np.float32)
        if trial % 3 == 0:
            x.flat[::97] = np.nan
        native_conv = int8_in_native.prepare(conv)
        assert native_conv is not None
        (a, fa), (c, fc) = conv.apply(x), native_conv(x)
        assert fa == fc and np.array_equal(a, c, equal_nan=True), trial
        k = int(rng.integers(1, 300))
        fc_layer = Int8InFC(rng.integers(-127, 128, (o, k)).astype(np.int8), b, ws, p, act, ap, weight_zero_point=zw)
        x2 = (rng.standard_normal((int(rng.integers(1, 20)), k)) * 3).astype(np.float32)
        (a, fa), (c, fc) = fc_layer.apply(x2), int8_in_native.prepare(fc_layer)(x2)
        assert fa == fc and np.array_equal(a, c), trial


def test_compile_refuses_int8_in_on_other_layers(converted):
    from onnx_mrvl.emit.compile import compile_json
    m, r, d = converted["conv_s8_per_channel_int32_bias"]
    name = r.subgraphs[0].name
    nodes = json.load(open(os.path.join(d, f"{name}-nodes.json")))
    consts = json.load(open(os.path.join(d, f"{name}-consts.json")))
    for n in nodes["nodes"]:
        if n.get("op") == "tvm_op" and n["attrs"].get("precision") != ["int8_in"]:
            n["attrs"]["precision"] = ["int8_in"]
            break
    else:
        pytest.skip("no other layer in this region")
    with pytest.raises(MrvlError, match="no int8-in mode"):
        compile_json(nodes, consts)


def test_activation_then_next_layers_input_quantizer(tmp_path):
    """Inputs-only placement with an activation the int8 layer cannot fold: conv -> LeakyRelu -> Q ->
    DQ -> conv (DQ weights) -> float output. The Q is the second conv's input quantizer, not the
    first's output pair: both are int8-in layers, nothing on the CPU (test_int8_qdq.py: the same with
    the pair at the model's output stays on the CPU, exactly as onnxruntime runs it)."""
    from onnx import helper, numpy_helper
    m = im.layer(kind="conv", activation="LeakyRelu", channels=(8, 16))
    g = m.graph
    g.node[-1].output[0] = "a1"
    rng = np.random.default_rng(5)
    w2 = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    g.initializer.extend([numpy_helper.from_array(np.array(0.03, np.float32), "a1_s"),
                          numpy_helper.from_array(np.array(-100, np.int8), "a1_z"),
                          numpy_helper.from_array(w2, "w2_q"),
                          numpy_helper.from_array(rng.uniform(0.002, 0.004, 16).astype(np.float32), "w2_s")])
    g.node.extend([helper.make_node("QuantizeLinear", ["a1", "a1_s", "a1_z"], ["a1_q"], name="a1_Q"),
                   helper.make_node("DequantizeLinear", ["a1_q", "a1_s", "a1_z"], ["a1_dq"], name="a1_DQ"),
                   helper.make_node("DequantizeLinear", ["w2_q", "w2_s"], ["w2"], axis=0, name="w2_DQ"),
                   helper.make_node("Conv", ["a1_dq", "w2"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3],
                                    name="conv2")])
    r = onnx_mrvl.convert(m)
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    d = r.report.decisions
    assert d["layer"].precision == d["conv2"].precision == "int8 in, fp16 out"
    assert d["a1_Q"].mrvl_node == d["conv2"].mrvl_node      # the second conv quantizes its input itself
    r.save(str(tmp_path / "out"))
    sess = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in range(3):
        f = im.feeds(m, seed)
        a, b = ref.run(None, f)[0], sess.run(None, f)[0]
        # fp16 values in front of the second conv's quantization may flip a code near a tie: the
        # fp16 region bound (docs/simulator.md)
        assert np.abs(a - b).max() <= 1e-2 * np.abs(a).max()
