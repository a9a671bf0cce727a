"""The quantization recipe (onnx_mrvl/quantize/recipe.py, equalize.py; docs/quantize.md "Recipe
options"): cross-layer equalization exact in fp32 against onnxruntime, the options reaching
onnxruntime's quantizer, Concat and element-wise table lookups quantized, error messages; and the
data-driven BatchNormalization statistics of the test builders (testing/bn_stats.py)."""
from __future__ import annotations


import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import onnx_mrvl
from onnx_mrvl.testing.cli_run import run_cli
from onnx_mrvl.errors import UsageError
from onnx_mrvl.quantize.equalize import check_exact, equalize, pairs
from onnx_mrvl.quantize.recipe import Recipe, make_recipe, not_lookups, op_types, parse_cli
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
from test_quantize import badly_scaled, feeds  # noqa: E402  (conv2's channel 0 x 1000, conv3's / 1000)

F32 = TensorProto.FLOAT


def cle_chain(seed: int = 0) -> onnx.ModelProto:
    """Every kind of pair: conv -> Relu -> conv, -> LeakyRelu -> MaxPool -> depthwise conv (group 8),
    -> (nothing) -> grouped conv (group 2); then pairs that must not be equalized: Clip(0, 6) between,
    and a tensor read twice (a residual Add). Channel ranges spread over 1e-2..1e2."""
    g = GraphBuilder(seed, 13)
    rng = np.random.default_rng(seed + 7)

    def conv(x, cin, cout, name, group=1, bias=True):
        w = g.he((cout, cin // group, 3, 3), 9 * cin // group)
        w *= (10.0 ** rng.uniform(-2, 2, cout)).astype(np.float32).reshape(-1, 1, 1, 1)
        ins = [x, g.const(f"{name}.w", w)]
        if bias:
            ins.append(g.const(f"{name}.b", rng.standard_normal(cout).astype(np.float32)))
        return g.node("Conv", ins, name, kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group)

    x = g.relu(conv("input", 3, 8, "c1"), "r1")
    x = g.node("LeakyRelu", [conv(x, 8, 8, "c2")], "lr2", alpha=0.1)
    x = g.node("MaxPool", [x], "mp2", kernel_shape=[2, 2], strides=[2, 2])
    x = conv(x, 8, 8, "c3_dw", group=8)
    x = conv(x, 8, 8, "c4_g2", group=2, bias=False)
    x = g.clip6(x, "clip6")
    y = conv(x, 8, 8, "c5")
    x = g.node("Add", [y, conv(y, 8, 8, "c6")], "add")
    g.conv(x, 8, 4, 1, "c7")
    g.nodes[-1].output[0] = "output"
    return g.model("cle_chain", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 4, 8, 8])])


def _w(model, name):
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name)).astype(np.float64)


def test_equalization_is_exact_in_fp32_and_equalizes_ranges():
    model = cle_chain()
    found = [(a.name, b.name) for a, b in pairs(model)]
    assert found == [("c1", "c2"), ("c2", "c3_dw"), ("c3_dw", "c4_g2")]   # not across Clip(0, 6), nor a tensor read twice
    eq, n = equalize(model)
    assert n == 3
    assert check_exact(model, eq, feeds(model, 3, 1)) is None
    sess_a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    sess_b = ort.InferenceSession(eq.SerializeToString(), providers=["CPUExecutionProvider"])
    x = feeds(model, 1, 5)[0]
    a, b = sess_a.run(None, x)[0], sess_b.run(None, x)[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    # the last pair of the chain is balanced: c3_dw's output channel i and c4_g2's input channel i
    w3, w4 = _w(eq, "c3_dw.w"), _w(eq, "c4_g2.w")
    r1 = np.abs(w3).reshape(8, -1).max(1)
    r2 = np.abs(w4).reshape(2, 4, 4, -1).max(axis=(1, 3)).reshape(-1)
    assert np.allclose(r1, r2, rtol=1e-3)
    before = np.abs(_w(model, "c3_dw.w")).reshape(8, -1).max(1)
    assert r1.max() / r1.min() < before.max() / before.min()
    # the pairs left alone keep their weights
    for name in ("c5.w", "c6.w", "c7.weight"):
        assert np.array_equal(_w(model, name), _w(eq, name))


def test_check_exact_reports_a_change():
    model = cle_chain()
    broken = onnx.ModelProto()
    broken.CopyFrom(model)
    t = next(t for t in broken.graph.initializer if t.name == "c1.w")
    t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * 1.01).astype(np.float32), "c1.w"))
    why = check_exact(model, broken, feeds(model, 1, 1))
    assert why and "output 'output' differs by" in why and "sample 0" in why


def test_equalize_in_the_flow_fixes_a_badly_scaled_channel(tmp_path):
    """badly_scaled: conv2's output channel 0 is 1000x the others, conv3 reads it / 1000. One per-tensor
    scale for conv2's output crushes the other channels; equalized, it does not."""
    model = badly_scaled(seed=0)
    cal, held = feeds(model, 8, 1), feeds(model, 4, 2)
    plain = onnx_mrvl.convert(model, quantize="int8", calibration=cal)
    eq = onnx_mrvl.convert(model, quantize="int8", calibration=cal, quantize_options={"equalize": True})
    q = eq.report.quantization
    assert q["options"]["equalize"] is True and q["equalized_pairs"] >= 2
    assert plain.report.quantization["equalized_pairs"] == 0
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    errs = {}
    for name, result in (("plain", plain), ("eq", eq)):
        sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path / name)))
        errs[name] = max(float(np.abs(sess.run(None, f)[0] - fp32.run(None, f)[0]).max()
                               / np.abs(fp32.run(None, f)[0]).max()) for f in held)
    # measured: max|err| / max|ref| 1.0 -> 0.13, output SNR 0 dB -> 34 dB (calibration set)
    assert errs["eq"] < 0.2 * errs["plain"], errs
    assert q["output_snr_db"]["output"] > 30 > plain.report.quantization["output_snr_db"]["output"] + 25
    opts = next(p.value for p in eq.model.metadata_props if p.key == "mrvl.options")
    assert '"equalize": true' in opts


def silu_net(seed: int = 0) -> onnx.ModelProto:
    """conv -> SiLU (x * Sigmoid(x)) -> conv, conv -> LeakyRelu, Concat of both -> conv; and a Mul of
    two different tensors (no function of one tensor: stays float)."""
    g = GraphBuilder(seed, 13)
    a = g.silu(g.conv("input", 3, 8, 3, "ca"), "silu")
    b = g.node("LeakyRelu", [g.conv("input", 3, 8, 3, "cb")], "leaky", alpha=0.1)
    x = g.conv(g.node("Concat", [a, b], "cat", axis=1), 16, 8, 3, "cc")
    x = g.node("Mul", [x, g.conv(a, 8, 8, 3, "cd")], "prod")
    g.conv(x, 8, 4, 1, "ce")
    g.nodes[-1].output[0] = "output"
    return g.model("silu_net", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 4, 16, 16])])


def _quantized_outputs(qdq):
    """Names of the nodes whose output a QuantizeLinear reads (the quantizer quantized them)."""
    q_reads = {n.input[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    return {n.name for n in qdq.graph.node if n.op_type not in ("QuantizeLinear", "DequantizeLinear")
            and n.output[0] in q_reads}


def test_elementwise_ops_are_quantized_and_offloaded():
    from onnx_mrvl.quantize import quantize_model
    model = silu_net()
    cal = feeds(model, 4, 1)
    assert not_lookups(model, Recipe()) == {"prod"}
    assert {"Concat", "Sigmoid", "Mul", "LeakyRelu", "HardSwish"} <= set(op_types(Recipe()))
    assert not {"Concat", "Sigmoid", "Mul"} & set(op_types(Recipe(elementwise=False)))
    on = _quantized_outputs(quantize_model(model, quantize="int8", calibration=cal).model)
    off = _quantized_outputs(quantize_model(model, quantize="int8", calibration=cal,
                                           quantize_options={"elementwise": False}).model)
    sig = next(n.name for n in model.graph.node if n.op_type == "Sigmoid")
    assert {sig, "leaky"} <= on and not {sig, "leaky"} & off   # read by float ops only when not quantized
    result = onnx_mrvl.convert(model, quantize="int8", calibration=cal)
    cpu = [n.op_type for n in result.model.graph.node if not n.op_type.startswith("Subgraph")
           and n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    assert "Sigmoid" not in cpu and "Concat" not in cpu and "LeakyRelu" not in cpu and "Conv" not in cpu


def test_activation_symmetric_reaches_the_quantizer():
    from onnx_mrvl.quantize import quantize_model
    model = badly_scaled(seed=1)
    cal = feeds(model, 4, 1)
    q = quantize_model(model, quantize="int8", calibration=cal, quantize_options={"activation_symmetric": "true"})
    inits = {t.name: numpy_helper.to_array(t) for t in q.model.graph.initializer}
    zps = [inits[n.input[2]] for n in q.model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    assert zps and all(int(z) == (128 if z.dtype == np.uint8 else 0) for z in zps)   # the type's middle: symmetric
    assert q.info["options"]["activation_symmetric"] is True and "symmetric" in q.info["activation_type"]
    plain = quantize_model(model, quantize="int8", calibration=cal)
    assert plain.info["options"] == Recipe().as_dict()


@pytest.mark.parametrize("options,match", [
    ({"equalise": True}, "unknown option 'equalise'.*did you mean 'equalize'"),
    ({"equalize": "maybe"}, "equalize='maybe' is not a boolean"),
    ({"percentile": 50}, "percentile=50 is not a number in"),
    ({"percentile": "x"}, "percentile='x' is not a number in"),
    ({"weight_bits": 6}, "weight_bits=6 is not 7 or 8"),
    ({"weight_bits": True}, "weight_bits=True is not 7 or 8"),
    (["equalize"], "must be a dict"),
])
def test_option_errors(options, match):
    with pytest.raises(UsageError, match=match):
        make_recipe(options)


def test_option_plumbing_errors():
    assert make_recipe({"equalize": "yes", "percentile": "99.9"}) == Recipe(equalize=True, percentile=99.9)
    assert parse_cli(["equalize=true", " moving_average = 0 "]) == {"equalize": "true", "moving_average": "0"}
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        parse_cli(["equalize"])
    model = badly_scaled()
    with pytest.raises(UsageError, match="quantize_options are given but quantize='float16'"):
        onnx_mrvl.convert(model, quantize_options={"equalize": True})
    with pytest.raises(UsageError, match="calibration_method='entropy' is given but quantize='float16'"):
        onnx_mrvl.convert(model, calibration_method="entropy")   # was ignored: an fp16 conversion


def test_cli_quantize_option(tmp_path):
    model = badly_scaled()
    src = str(tmp_path / "m.onnx")
    onnx.save(model, src)
    np.savez(tmp_path / "cal.npz", input=np.stack([f["input"] for f in feeds(model, 4, 1)]))

    def cli(*args):
        return run_cli(*args, cwd=str(tmp_path))
    ok = cli("convert", src, "-o", "out", "--quantize", "int8", "--calibration", "cal.npz",
             "--quantize-option", "equalize=true", "--json")
    assert ok.returncode == 0, ok.stderr
    import json
    q = json.loads(ok.stdout)["quantization"]
    assert q["options"]["equalize"] is True and q["equalized_pairs"] >= 2
    bad = cli("convert", src, "-o", "out2", "--quantize", "int8", "--calibration", "cal.npz",
              "--quantize-option", "equalise=1")
    assert bad.returncode == 3 and "did you mean 'equalize'" in bad.stderr


def test_data_bn_stats_normalize_every_layer():
    from onnx_mrvl.testing.bn_stats import data_bn_stats
    from onnx_mrvl.testing.models import mobilenetv2_like
    model = mobilenetv2_like(seed=0, width=0.25, input_size=64, num_classes=10)
    out = data_bn_stats(model, samples=4, seed=3)
    bns = [n for n in out.graph.node if n.op_type == "BatchNormalization"]
    probe = onnx.ModelProto()
    probe.CopyFrom(out)
    for n in bns:
        probe.graph.output.append(onnx.helper.make_empty_tensor_value_info(n.output[0]))
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    from onnx_mrvl.feeds import random_feeds
    got = [sess.run(None, random_feeds(out, 3 + k)) for k in range(4)]   # the samples it was fitted on
    names = [o.name for o in sess.get_outputs()]
    for n in bns:
        y = np.concatenate([g[names.index(n.output[0])] for g in got], 0).astype(np.float64)
        gamma, beta = _w(out, n.input[1]), _w(out, n.input[2])
        mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3))
        live = _w(out, n.input[4]) > 1.5e-2 * _w(out, n.input[4]).mean()   # not a floored (dead) channel
        assert np.allclose(mean, beta, atol=1e-3 + 1e-3 * np.abs(gamma).max())
        assert np.allclose(std[live], np.abs(gamma[live]), rtol=2e-3, atol=1e-4)


def test_a_concat_no_int8_layer_reads_stays_float():
    """DenseNet's Concat -> BatchNormalization -> Relu -> Conv (and Concat -> Concat): no int8 layer
    reads the Concats, so they stay float (a per-tensor scale over inputs of different ranges would
    only add rounding); a Concat a conv reads, or one a kept Concat reads, is quantized."""
    from onnx_mrvl.quantize.recipe import float_read_concats
    g = GraphBuilder(0, 13)
    a, b = g.conv("input", 3, 4, 3, "ca"), g.conv("input", 3, 4, 3, "cb")
    c1 = g.node("Concat", [a, b], "dense_cat1", axis=1)
    x = g.relu(g.bn(c1, 8, "bn1"), "r1")
    c2 = g.node("Concat", [c1, g.conv(x, 8, 4, 3, "cc")], "dense_cat2", axis=1)
    y = g.relu(g.bn(c2, 12, "bn2"), "r2")
    c3 = g.node("Concat", [y, a], "to_cat4", axis=1)
    c4 = g.node("Concat", [c3, b], "cat4", axis=1)
    model = _with_conv_head(g, c4, 20, "dense")
    assert float_read_concats(model, Recipe()) == {"dense_cat1", "dense_cat2"}
    assert float_read_concats(model, Recipe(elementwise=False)) == set()


def _with_conv_head(g: GraphBuilder, x: str, channels: int, name: str) -> onnx.ModelProto:
    """``g``'s model with a 1x1 conv ``head`` of ``x`` (``channels`` in, 4 out) as its output."""
    g.conv(x, channels, 4, 1, "head")
    g.nodes[-1].output[0] = "output"
    return g.model(name, [("input", F32, [1, 3, 8, 8])], [("output", F32, [1, 4, 8, 8])])


def test_a_lookup_a_float_op_feeds_stays_float():
    """conv -> SiLU is quantized (the conv is an int8 layer); Softmax -> Sigmoid and
    Softmax -> x * 0.5 are not (quantized, they would add a rounding of the float op's output)."""
    from onnx_mrvl.quantize.recipe import float_fed_lookups
    g = GraphBuilder(0, 13)
    a = g.silu(g.conv("input", 3, 4, 3, "ca"), "silu")
    sm = g.node("Softmax", [a], "sm", axis=1)
    b = g.node("Sigmoid", [sm], "sig_of_softmax")
    c = g.node("Mul", [sm, g.const("half", np.array(0.5, np.float32))], "half_of_softmax")
    x = g.node("Add", [b, c], "add")
    model = _with_conv_head(g, x, 4, "fed")
    assert float_fed_lookups(model, Recipe()) == {"sig_of_softmax", "half_of_softmax"}
    assert float_fed_lookups(model, Recipe(elementwise=False)) == set()


def test_output_layers_fp16_keeps_the_head_float():
    from onnx_mrvl.quantize import quantize_model
    g = GraphBuilder(0, 13)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [g.relu(g.conv("input", 3, 8, 3, "c1"), "r1")], "gap")],
               "flat", axis=1)
    g.node("Softmax", [g.gemm(x, 8, 10, "fc")], "softmax", axis=1)
    g.nodes[-1].output[0] = "output"
    model = g.model("head", [("input", F32, [1, 3, 8, 8])], [("output", F32, [1, 10])])
    q = quantize_model(model, quantize="int8", calibration=feeds(model, 4, 1),
                       quantize_options={"output_layers_fp16": True})
    recs = {r["layer"]: r for r in q.info["layers"]}
    assert recs["fc"]["precision"] == "fp16" and "writes a model output" in recs["fc"]["reason"]
    assert recs["c1"]["precision"] == "int8"
    fc = next(n for n in q.model.graph.node if n.name == "fc")
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == fc.output[0] for n in q.model.graph.node)


def _activation_scales(qdq) -> dict:
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in qdq.graph.node
            if n.op_type == "QuantizeLinear" and n.input[0] not in inits and inits[n.input[1]].size == 1}


def test_entropy_calibration_clips_rare_outliers():
    """onnxruntime's quantize_static gives its Entropy calibrator 128 bins for 128 quantized bins: one
    candidate threshold, the MinMax range. With the finer histogram the KL threshold clips the tail of
    a tensor whose range a few outliers set (here: 1 sample in 64 scaled by 40), MinMax does not."""
    from onnx_mrvl.quantize import quantize_model
    g = GraphBuilder(0, 13)
    g.conv(g.relu(g.conv("input", 3, 8, 3, "c1"), "r1"), 8, 4, 3, "c2")
    g.nodes[-1].output[0] = "output"
    model = g.model("tail", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 4, 16, 16])])
    cal = feeds(model, 64, 3)
    cal[7]["input"] *= 40.0
    mm = _activation_scales(quantize_model(model, quantize="int8", calibration=cal).model)
    en = _activation_scales(quantize_model(model, quantize="int8", calibration=cal, calibration_method="entropy").model)
    assert set(mm) == set(en) and mm
    ratios = {t: en[t] / mm[t] for t in mm}
    assert all(r <= 1.0 + 1e-6 for r in ratios.values())
    assert min(ratios.values()) < 0.5, ratios     # the outlier no longer sets the range


def _weight_codes(qdq) -> dict:
    """{conv name: (codes - zero point as int32, the codes' dtype)} of the weight DQs of ``qdq``."""
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    producer = {o: n for n in qdq.graph.node for o in n.output}
    out = {}
    for n in qdq.graph.node:
        if n.op_type == "Conv":
            dq = producer[n.input[1]]
            q, z = inits[dq.input[0]], inits[dq.input[2]]
            out[n.name] = (q.astype(np.int32) - z.astype(np.int32).reshape(-1, 1, 1, 1), q.dtype)
    return out


def test_full_range_weights_are_exact_u8u8(tmp_path):
    """weight_bits=8 (default): 8-bit weight codes as onnxruntime's U8U8 form (uint8, zero point 128;
    uint8 activations), which its kernels sum exactly on every x86 CPU -- the accelerator's int8
    layers (codes q - 128) give onnxruntime's numbers. weight_bits=7: S8S8 with reduce_range (|q| <= 64),
    6 dB less weight SNR. Measured on held-out inputs: the 8-bit model is closer to fp32."""
    from onnx_mrvl.quantize import quantize_model
    g = GraphBuilder(0, 13)
    x = "input"
    for i, (cin, cout) in enumerate([(3, 16), (16, 16), (16, 16), (16, 16)]):
        x = g.relu(g.conv(x, cin, cout, 3, f"c{i}"), f"r{i}")
    g.conv(x, 16, 8, 3, "head")
    g.nodes[-1].output[0] = "output"
    model = g.model("chain", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 8, 16, 16])])
    cal, held = feeds(model, 8, 1), feeds(model, 4, 2)
    full = quantize_model(model, quantize="int8", calibration=cal)
    seven = quantize_model(model, quantize="int8", calibration=cal, quantize_options={"weight_bits": 7})
    assert full.info["options"]["weight_bits"] == 8 and "uint8" in full.info["weight_type"]
    for name, (codes, dtype) in _weight_codes(full.model).items():       # full range per channel
        assert dtype == np.uint8 and np.abs(codes).reshape(codes.shape[0], -1).max(1).min() >= 127, name
    for name, (codes, dtype) in _weight_codes(seven.model).items():
        assert dtype == np.int8 and np.abs(codes).max() <= 64, name
    ws = {r["layer"]: r["snr_db"] for r in full.info["layers"]}
    assert min(ws.values()) > 30

    def snr(qdq):
        fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
        sig = noise = 0.0
        for feed in held:
            a, b = fp32.run(None, feed)[0].astype(np.float64), ref.run(None, feed)[0]
            sig, noise = sig + float((a * a).sum()), noise + float(((a - b) ** 2).sum())
        return 10 * np.log10(sig / noise)
    s8, s7 = snr(full.model), snr(seven.model)
    assert s8 > s7 + 2.0          # measured: 35.2 vs 32.4 dB
    # the accelerator's run of the default model is onnxruntime's run of its QDQ model
    result = onnx_mrvl.convert(model, quantize="int8", calibration=cal)
    assert result.report.quantization["int8_layers"] == 5
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path / "out")))
    ref = ort.InferenceSession(result.stages["quantize"].SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in held:
        assert np.array_equal(sess.run(None, feed)[0], ref.run(None, feed)[0])
