"""Empirical bias correction (onnx_mrvl/quantize/bias_correction.py, quantize_options
bias_correction; docs/quantize.md): only the int32 biases change, the per-channel mean error of
each layer shrinks on held-out inputs, and the corrected QDQ model still imports with outputs
identical to onnxruntime's run of it."""
from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper

import onnx_mrvl
from onnx_mrvl.testing.cli_run import run_cli
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
from test_quantize import badly_scaled, feeds  # noqa: E402  (conv2's channel 0 x 1000, conv3's / 1000)

F32 = TensorProto.FLOAT


def biasless_net(seed: int = 0) -> onnx.ModelProto:
    """conv (no bias) -> Relu -> conv (no bias, output channels of very different scale) -> Relu ->
    conv -> GAP -> Flatten -> Gemm: a bias-free conv gets an int32 bias from the correction."""
    g = GraphBuilder(seed, 13)
    x = g.relu(g.conv("input", 3, 8, 3, "c0", bias=False), "r0")
    w1 = g.he((8, 8, 3, 3), 72)
    w1[:4] *= 30.0                      # half the channels 30x: the others get few codes
    x = g.relu(g.node("Conv", [x, g.const("w1", w1)], "c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]), "r1")
    x = g.conv(x, 8, 8, 3, "c2")
    x = g.node("GlobalAveragePool", [x], "gap")
    x = g.node("Flatten", [x], "flat", axis=1)
    g.node("Gemm", [x, g.const("fc.w", g.he((10, 8), 8)), g.const("fc.b", np.zeros(10, np.float32))],
               "fc", transB=1)
    g.nodes[-1].output[0] = "output"
    return g.model("biasless_net", [("input", F32, [1, 3, 16, 16])], [("output", F32, [1, 10])])


def _quantize(model, cal, on: bool):
    from onnx_mrvl.quantize import quantize_model
    return quantize_model(model, quantize="int8", calibration=cal, quantize_options={"bias_correction": on})


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _bias_codes(model):
    """{layer: its int32 bias codes} of the Conv / Gemm of a QDQ model."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = _inits(model)
    out = {}
    for n in model.graph.node:
        if n.op_type in ("Conv", "Gemm") and len(n.input) > 2 and n.input[2]:
            out[n.name] = inits[producer[n.input[2]].input[0]]
    return out


def _mean_errors(float_model, qdq, feeds_, layer_outputs):
    """{layer: per-channel mean over ``feeds_`` of (float layer output - QDQ layer output)}."""
    def with_outputs(m, names):
        c = onnx.ModelProto()
        c.CopyFrom(m)
        del c.graph.output[:]
        c.graph.output.extend(onnx.helper.make_tensor_value_info(t, F32, None) for t in names)
        return ort.InferenceSession(c.SerializeToString(), providers=["CPUExecutionProvider"])
    f_names = [fo for fo, _ in layer_outputs.values()]
    q_names = [qo for _, qo in layer_outputs.values()]
    fs, qs = with_outputs(float_model, f_names), with_outputs(qdq, q_names)
    acc = {k: 0.0 for k in layer_outputs}
    for feed in feeds_:
        fv, qv = fs.run(None, feed), qs.run(None, feed)
        for k, a, b in zip(layer_outputs, fv, qv):
            d = (a.astype(np.float64) - b).swapaxes(0, 1).reshape(a.shape[1], -1).mean(axis=1)
            acc[k] = acc[k] + d / len(feeds_)
    return acc


@pytest.mark.parametrize("builder", [badly_scaled, biasless_net])
def test_only_the_biases_change(builder):
    """Structure: the corrected QDQ model is the quantizer's, node for node and initializer for
    initializer, but the int32 bias codes (and, for a conv without a bias, a new DQ of an int32
    bias with scale input scale x weight scale, as onnxruntime writes one)."""
    model = builder(seed=0)
    cal = feeds(model, 8, 1)
    plain, corr = _quantize(model, cal, False), _quantize(model, cal, True)
    info = corr.info["bias_correction"]
    assert "bias_correction" not in plain.info and corr.info["options"]["bias_correction"] is True
    p_nodes = [(n.op_type, n.name, list(n.output)) for n in plain.model.graph.node]
    c_nodes = [(n.op_type, n.name, list(n.output)) for n in corr.model.graph.node]
    added = [n for n in c_nodes if n not in p_nodes]
    assert [n for n in p_nodes if n not in c_nodes] == []
    assert all(op == "DequantizeLinear" and name.endswith(".bias_corrected_DequantizeLinear") for op, name, _ in added)
    pi, ci = _inits(plain.model), _inits(corr.model)
    plain_bias, corr_bias = _bias_codes(plain.model), _bias_codes(corr.model)
    bias_names = {producer.input[0] for producer in corr.model.graph.node
                  if producer.op_type == "DequantizeLinear" and producer.output[0] in
                  {n.input[2] for n in corr.model.graph.node if n.op_type in ("Conv", "Gemm") and len(n.input) > 2}}
    for name, v in pi.items():
        if name not in bias_names:
            assert np.array_equal(v, ci[name]), name
    changed = [k for k in corr_bias if k not in plain_bias or not np.array_equal(corr_bias[k], plain_bias[k])]
    assert changed and info["layers"] == len(corr_bias)
    assert all(v.dtype == np.int32 for v in corr_bias.values())
    # the new biases: zero point 0 and scale s_in * s_w, what fuse/qdq.py requires of a bias
    for op, name, out in added:
        dq = next(n for n in corr.model.graph.node if n.name == name)
        assert np.all(ci[dq.input[2]] == 0) and ci[dq.input[0]].dtype == np.int32
        layer = next(n for n in corr.model.graph.node if out[0] in n.input)
        prod = {o: n for n in corr.model.graph.node for o in n.output}
        s_x = ci[prod[layer.input[0]].input[1]]
        s_w = ci[prod[layer.input[1]].input[1]]
        assert np.allclose(ci[dq.input[1]], np.float32(s_x) * s_w, rtol=1e-6)
    if builder is biasless_net:
        assert {n[1] for n in added} == {"c0.bias_corrected_DequantizeLinear", "c1.bias_corrected_DequantizeLinear"}


def test_the_mean_error_shrinks_on_held_out_inputs():
    """Numbers: badly_scaled's conv2 output channels 1..7 are crushed by one per-tensor scale (most
    values round to the zero point), so conv3 and conv4 see a systematic error; corrected, the
    per-channel mean error of every layer is smaller on held-out inputs and the output SNR rises."""
    model = badly_scaled(seed=0)
    cal, held = feeds(model, 16, 1), feeds(model, 8, 2)
    plain, corr = _quantize(model, cal, False), _quantize(model, cal, True)
    info = corr.info["bias_correction"]
    assert info["layers"] == 4 and info["runs"] == 5          # depths 1..4, then the last check
    assert info["mean_error_after"] < 0.05 * info["mean_error_before"]   # measured 0.31 -> 0.0097
    pre_out = {n.name: n.output[0] for n in model.graph.node}
    q_out = {n.name: n.output[0] for n in corr.model.graph.node}
    layers = {k: (pre_out[k], q_out[k]) for k in ("conv3", "conv4")}
    before = _mean_errors(model, plain.model, held, layers)
    after = _mean_errors(model, corr.model, held, layers)
    for k in layers:   # measured (mean |channel mean error|): conv3 0.88 -> 0.045, conv4 1.06 -> 0.035
        assert np.abs(after[k]).mean() < 0.1 * np.abs(before[k]).mean(), (k, before[k], after[k])
    # measured: output SNR (calibration set) 0.0 -> 3.2 dB: the crushed channels' variation stays lost
    assert corr.info["output_snr_db"]["output"] > plain.info["output_snr_db"]["output"] + 2


@pytest.mark.parametrize("builder", [badly_scaled, biasless_net])
def test_the_corrected_model_imports_identically(tmp_path, builder):
    """The corrected QDQ model converts to int8 layers whose outputs are identical to onnxruntime's run
    of that QDQ model (the import's check of tests/test_quantize.py)."""
    model = builder(seed=0)
    cal, held = feeds(model, 8, 1), feeds(model, 4, 2)
    result = onnx_mrvl.convert(model, quantize="int8", calibration=cal, quantize_options={"bias_correction": True})
    q = result.report.quantization
    assert q["int8_layers"] == q["layers_total"] and q["bias_correction"]["layers"] >= 3
    assert [n.op_type for n in result.model.graph.node if n.op_type in ("Conv", "Gemm")] == []
    ref_q = ort.InferenceSession(result.stages["quantize"].SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(result.save(str(tmp_path / "out")))
    for feed in held:
        a, b = ref_q.run(None, feed)[0], sess.run(None, feed)[0]
        assert np.array_equal(a, b)
    opts = json.loads(next(p.value for p in result.model.metadata_props if p.key == "mrvl.options"))
    assert json.dumps(opts).count('"bias_correction": true') == 1


def test_a_correction_that_does_not_take_is_an_error(monkeypatch):
    """The check after each depth: a bias written where onnxruntime does not read it (here: the
    write is dropped) leaves the mean error and raises ModelError naming the layer."""
    from onnx_mrvl.errors import ModelError
    from onnx_mrvl.quantize import bias_correction
    monkeypatch.setattr(bias_correction, "_write", lambda tensor, codes: None)
    model = badly_scaled(seed=0)
    with pytest.raises(ModelError, match=r"bias correction of 'conv\d': channel \d+ still has mean error"):
        _quantize(model, feeds(model, 4, 1), True)


def test_cli_bias_correction(tmp_path):
    model = badly_scaled()
    src = str(tmp_path / "m.onnx")
    onnx.save(model, src)
    np.savez(tmp_path / "cal.npz", input=np.stack([f["input"] for f in feeds(model, 4, 1)]))
    ok = run_cli("convert", src, "-o", "out", "--quantize", "int8", "--calibration", "cal.npz",
                 "--quantize-option", "bias_correction=1", "--json", cwd=str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    q = json.loads(ok.stdout)["quantization"]
    assert q["options"]["bias_correction"] is True and q["bias_correction"]["layers"] == 4
    bad = run_cli("convert", src, "-o", "out2", "--quantize", "int8", "--calibration", "cal.npz",
                  "--quantize-option", "bias_correction=maybe", cwd=str(tmp_path))
    assert bad.returncode == 3 and "bias_correction='maybe' is not a boolean" in bad.stderr
