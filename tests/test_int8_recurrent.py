"""int8 recurrent layers (precision "int8_in", fuse/qdq_recurrent.py, sim/recurrent_int8.py): a QDQ
LSTM / GRU / RNN (DQ on X, W and R) is one Mrvl recurrent layer with int8 W / R codes; the input
projection is exact int32 (bit-level checked), the state fp16 (bound: the fp16 region bound
``max|err| <= 1e-2 max|ref|`` against onnxruntime's run of the QDQ model; measured 3-6e-4)."""
from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.costmodel import recurrent_fp16_macs, roofline
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.recurrent import activation_fns
from onnx_mrvl.sim.recurrent_int8 import Int8Recurrent
from onnx_mrvl.testing import qdq_recurrent_models as qm

CASES = {
    "lstm_forward_u8": dict(),
    "lstm_reverse_row_scales": dict(direction="reverse", scales="row"),
    "lstm_bidirectional_zp_dq_bias_s8": dict(direction="bidirectional", scales="direction", weight_zp=-1, bias="dq",
                                             act="s8"),
    "gru_forward_lbr0": dict(cell="GRU"),
    "gru_bidirectional_lbr1_batch2": dict(cell="GRU", direction="bidirectional", linear_before_reset=1, batch=2),
    "rnn_reverse_no_bias": dict(cell="RNN", direction="reverse", bias=None),
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = {}
    for name, kw in CASES.items():
        m = qm.layer(**kw)
        r = onnx_mrvl.convert(m)
        d = str(tmp_path_factory.mktemp(name))
        r.save(d, overwrite=True)
        out[name] = (m, r, d)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_structure(converted, name):
    """One region, no Q/DQ on the CPU; the JSON layer states int8_in with int8 kernel / recurrence
    codes, their scales and zero points per gate row and the input quantization."""
    m, r, d = converted[name]
    assert len(r.subgraphs) == 1
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    nodes = json.load(open(os.path.join(d, f"{r.subgraphs[0].name}-nodes.json")))["nodes"]
    (layer,) = [n for n in nodes if n.get("attrs", {}).get("precision") == ["int8_in"]]
    a = layer["attrs"]
    kw = CASES[name]
    assert a["kernel_const"]["dtype"] == "int8" and a["recurrence_const"]["dtype"] == "int8"
    assert a["in_dtype"] == [{"u8": "uint8", "s8": "int8"}[kw.get("act", "u8")]] and a["out_dtype"] == ["float16"]
    dirs = 2 if kw.get("direction") == "bidirectional" else 1
    rows = {"LSTM": 4, "GRU": 3, "RNN": 1}[kw.get("cell", "LSTM")] * 16
    for key in ("kernel_scale", "recurrence_scale", "kernel_zero_point", "recurrence_zero_point"):
        assert a[f"{key}_const"]["shape"][-1] == dirs * rows or np.prod(a[f"{key}_const"]["shape"]) == dirs * rows
    assert "state_scale" not in a   # the default: fp16 state
    dec = r.report.decisions["rnn"]
    assert dec.placement == "accelerator" and dec.precision == "int8 in, fp16 out"
    assert "int8 recurrent layer" in dec.reason


@pytest.mark.parametrize("name", list(CASES))
def test_numbers_against_onnxruntime(converted, name):
    m, r, d = converted[name]
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(d, "model.onnx"))
    for seed in range(2):
        f = qm.feeds(m, seed)
        y0, y = ref.run(None, f)[0], sess.run(None, f)[0]
        assert np.abs(y - y0).max() <= 1e-2 * np.abs(y0).max()


@pytest.mark.parametrize("name", ["lstm_bidirectional_zp_dq_bias_s8", "gru_bidirectional_lbr1_batch2"])
def test_reference_body_runs_in_onnxruntime(name):
    """The fused model runs in plain onnxruntime and computes what the QDQ model computes."""
    m = qm.layer(**CASES[name])
    fused = fuse(legalize(m).model).model
    assert any(n.op_type in ("LSTM", "GRU") and n.domain != "" and
               any(a.name == "precision" and a.s == b"int8_in" for a in n.attribute) for n in fused.graph.node)
    f = qm.feeds(m)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    b = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def _layer(state_q=None, zp=0, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (2, 80, 12)).astype(np.int8)
    r = rng.integers(-128, 128, (2, 80, 20)).astype(np.int8)
    ws = (rng.random(160) * 1e-2 + 1e-3).astype(np.float32)
    rs = (rng.random(160) * 1e-2 + 1e-3).astype(np.float32)
    acts = activation_fns(["sigmoid", "tanh", "tanh"] * 2, [0.0] * 6, [0.0] * 6)
    return Int8Recurrent("LSTM", w, r, ws, rs, (0.05, 128, "uint8"), state_q, kernel_zero_point=np.full(160, zp),
                         recurrence_zero_point=np.full(160, zp), direction="bidirectional", activations=acts), w, r, ws, rs


@pytest.mark.parametrize("zp", [0, -1])
def test_input_projection_is_exact_integer_arithmetic(zp):
    """x W^T: codes of x (QuantizeLinear), sum (q_x - z_x)(q_w - z_w) in int64, then fp32(acc) *
    fp32(s_x s_w): bit-identical."""
    layer, w, _, ws, _ = _layer(zp=zp)
    x = np.random.default_rng(3).standard_normal((7 * 2, 12)).astype(np.float32) * 3   # saturates some codes
    q = np.clip(np.rint(x / np.float32(0.05)) + 128, 0, 255).astype(np.int64) - 128
    for d in range(2):
        acc = q @ (w[d].astype(np.int64) - zp).T
        want = (acc.astype(np.float32) * (np.float32(0.05) * ws.reshape(2, 80)[d]).astype(np.float32)).astype(np.float32)
        assert np.array_equal(layer._xw(d, x), want)


def test_state_quantized_recurrent_product_is_exact_integer_arithmetic():
    """The option: h quantized per step, sum (q_h - z_h) q_r exact, fp32(acc) * fp32(s_h s_r)."""
    layer, _, r, _, rs = _layer(state_q=(0.01, 128, "uint8"))
    h = np.random.default_rng(4).uniform(-1, 1, (3, 20)).astype(np.float16).astype(np.float32)
    q = np.clip(np.rint(h / np.float32(0.01)) + 128, 0, 255).astype(np.int64) - 128
    for d in range(2):
        acc = q @ r[d].astype(np.int64).T
        want = (acc.astype(np.float32) * (np.float32(0.01) * rs.reshape(2, 80)[d]).astype(np.float32)).astype(np.float32)
        assert np.array_equal(layer._hr(d, h, 0, 80), want)


def test_fp16_state_product_uses_exact_codes():
    """Default: fp16 h times the R codes (exact products) summed in fp32, times s_r: equal to the
    float64 sum within fp32 summation error, and h never quantized."""
    layer, _, r, _, rs = _layer()
    h = np.random.default_rng(5).uniform(-1, 1, (3, 20)).astype(np.float16).astype(np.float32)
    got = layer._hr(0, h, 0, 80).astype(np.float64)
    want = (h.astype(np.float64) @ r[0].astype(np.float64).T) * rs[:80]
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_perf_model_int8_rates():
    """Input projection at the int8 rate, the fp16 state's products at the fp16 rate."""
    arch = dict(num_tiles=1, macs_per_cycle_per_tile=100, int8_macs_factor=2.0, vector_ops_per_cycle_per_tile=64,
                dram_bytes_per_cycle=32, layer_overhead_cycles=0, recurrent_step_cycles=10)
    steps, feat, hid = 10, 30, 20
    total = steps * 4 * hid * (feat + hid)
    fp16_part = recurrent_fp16_macs("LSTM", steps, 1, 1, hid, False)
    assert fp16_part == steps * 4 * hid * hid and recurrent_fp16_macs("LSTM", steps, 1, 1, hid, True) == 0
    fp16 = roofline(total, 0, 0, arch, steps=steps)["compute"]
    mixed = roofline(total, 0, 0, arch, steps=steps, int8=True, fp16_macs=fp16_part)["compute"]
    full = roofline(total, 0, 0, arch, steps=steps, int8=True)["compute"]
    assert mixed == steps * (int(np.ceil((4 * hid * feat / 2 + 4 * hid * hid) / 100)) + 10)
    assert full < mixed < fp16


def test_uint8_weights_are_recoded_exactly():
    """uint8 W codes q (zero point z) are the int8 codes q - 128 with zero point z - 128: int8."""
    from onnx import numpy_helper
    m = qm.layer()
    inits = {t.name: t for t in m.graph.initializer}
    q = numpy_helper.to_array(inits["W_q"]).astype(np.int32) + 128
    inits["W_q"].CopyFrom(numpy_helper.from_array(q.astype(np.uint8), "W_q"))
    inits["W_z"].CopyFrom(numpy_helper.from_array(np.array(128, np.uint8), "W_z"))
    r = onnx_mrvl.convert(m)
    assert r.report.decisions["rnn"].precision == "int8 in, fp16 out"
    fused = fuse(legalize(m).model).model
    f = qm.feeds(m)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    b = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_unusable_weights_keep_the_fp16_layer():
    """W quantized along its input axis (axis 2) is no int8 recurrent layer: the reason is in the
    decision, and the fp16 layer on the dequantized weights runs it within the fp16 bound."""
    from onnx import helper, numpy_helper
    m = qm.layer()
    inits = {t.name: t for t in m.graph.initializer}
    s = float(numpy_helper.to_array(inits["W_s"]))
    inits["W_s"].CopyFrom(numpy_helper.from_array(np.full(12, s, np.float32), "W_s"))
    inits["W_z"].CopyFrom(numpy_helper.from_array(np.zeros(12, np.int8), "W_z"))
    dq = next(n for n in m.graph.node if n.name == "W_dq")
    dq.attribute.append(helper.make_attribute("axis", 2))
    r = onnx_mrvl.convert(m)
    dec = r.report.decisions["rnn"]
    assert dec.placement == "accelerator" and dec.precision == "fp16"
    assert "not per direction or per gate row" in dec.reason, dec.reason


@pytest.mark.parametrize("kw", [dict(out_pair=True), dict(cell="GRU", direction="bidirectional", linear_before_reset=1,
                                                           out_pair=True, act="s8"),
                                dict(cell="RNN", direction="reverse", steps=30, out_pair=True)])
def test_output_pair_is_absorbed(kw, tmp_path):
    """Y -> Q -> DQ: the layer (precision int8) writes Y's codes quantized from the fp32 state: one
    region, nothing on the CPU, at most one output step from onnxruntime, >= 98% identical."""
    m = qm.layer(**kw)
    r = onnx_mrvl.convert(m)
    r.save(str(tmp_path), overwrite=True)
    assert len(r.subgraphs) == 1
    assert [n.op_type for n in r.model.graph.node if not n.op_type.startswith("Subgraph")] == []
    assert r.report.decisions["rnn"].precision == "int8" and r.report.decisions["y_q"].placement == "accelerator"
    nodes = json.load(open(os.path.join(str(tmp_path), f"{r.subgraphs[0].name}-nodes.json")))["nodes"]
    (layer,) = [n for n in nodes if n.get("attrs", {}).get("precision") == ["int8"]]
    assert layer["attrs"]["out_dtype"] == ["int8"] and float(layer["attrs"]["out_scale"][0]) == pytest.approx(1 / 127)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(str(tmp_path), "model.onnx"))
    for seed in range(2):
        f = qm.feeds(m, seed)
        steps = np.abs(sess.run(None, f)[0] - ref.run(None, f)[0]) * 127
        assert steps.max() <= 1.0 + 1e-3 and np.mean(steps < 0.5) >= 0.98
    fused = fuse(legalize(m).model).model   # the reference body: Q -> DQ of Y too
    f = qm.feeds(m)
    a = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    b = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    assert np.abs(a - b).max() * 127 <= 1.0 + 1e-3


def test_flow_quantizer_recurrent_option():
    """convert(quantize="int8"): LSTM / GRU stay fp16 layers by default; the recipe option
    recurrent=True quantizes them too and fuse makes them int8 recurrent layers."""
    from onnx_mrvl.testing import recurrent_models as rm
    m = rm.cell_model("GRU", steps=8, feat=12, hid=16, seed=4, head=True, direction="bidirectional")
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((8, 1, 12)).astype(np.float32)} for _ in range(4)]
    plain = onnx_mrvl.convert(m, quantize="int8", calibration=calib)
    assert plain.report.decisions["rnn"].precision == "fp16"
    r = onnx_mrvl.convert(m, quantize="int8", calibration=calib, quantize_options={"recurrent": True})
    assert r.report.decisions["rnn"].precision in ("int8", "int8 in, fp16 out")
    assert len(r.subgraphs) == 1 and r.report.quantization["options"]["recurrent"] is True


def test_time_major_pair_after_the_pytorch_transpose_is_in_the_region(tmp_path):
    """PyTorch's BiLSTM head: Y [T, D, B, H] -> Q -> DQ -> Transpose(0, 2, 1, 3) -> Q -> DQ (a QDQ
    quantizer's pair after the Transpose) with T = 20 > the image batch limit: the pair is a
    Requantize of time steps, not images, so the model is one region."""
    from onnx import TensorProto, helper
    m = qm.layer(direction="bidirectional", steps=20, out_pair=True)
    g = m.graph
    g.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.FLOAT, [20, 1, 2, 16]))
    g.node.extend([helper.make_node("Transpose", ["y"], ["y_t"], name="head_t", perm=[0, 2, 1, 3]),
                   helper.make_node("QuantizeLinear", ["y_t", "y_s", "y_z"], ["t_q"], name="t_q"),
                   helper.make_node("DequantizeLinear", ["t_q", "y_s", "y_z"], ["t_dq"], name="t_dq"),
                   helper.make_node("Relu", ["t_dq"], ["z"], name="relu")])
    r = onnx_mrvl.convert(m)
    assert len(r.subgraphs) == 1, [(d.op_type, d.reason) for d in r.report.decisions.values() if d.placement == "cpu"]
    assert r.report.decisions["t_q"].placement == "accelerator"
    r.save(str(tmp_path), overwrite=True)
    sess = onnx_mrvl.InferenceSession(os.path.join(str(tmp_path), "model.onnx"))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    f = qm.feeds(m)
    steps = np.abs(sess.run(None, f)[0] - ref.run(None, f)[0]) * 127
    assert steps.max() <= 1.0 + 1e-3


@pytest.mark.parametrize("k", [1, 255, 256, 257, 700])
def test_exact_sum_is_the_integer_sum(k):
    """The input projection's chunked float32 sums equal the int64 sum, at the codes' extremes too
    (a row of 255 times a column of 255: 700 * 65025 needs more than fp32's 24 bits)."""
    from onnx_mrvl.sim.recurrent_int8 import exact_sum
    rng = np.random.default_rng(k)
    a = rng.integers(-255, 256, (4, k)).astype(np.float32)
    b = rng.integers(-255, 256, (k, 6)).astype(np.float32)
    a[0], a[1], b[:, 0] = 255, -255, 255
    got = exact_sum(a, b)
    assert got.dtype == np.float64
    assert np.array_equal(got, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64))


@pytest.mark.parametrize("dt,zp", [("uint8", 128), ("uint8", 0), ("int8", -5)])
def test_native_input_projection_is_the_integer_sum(dt, zp):
    """int8_in_native.exact_sums (the native int8 GEMM, identity requantization) = fp32 of the int64
    sum of the codes, saturated codes and K > 256 included."""
    from onnx_mrvl.sim import int8_native
    from onnx_mrvl.sim.int8 import quantize
    from onnx_mrvl.sim.int8_in_native import exact_sums
    if int8_native.lib() is None:
        pytest.skip("native int8 kernels off here")
    rng = np.random.default_rng(11)
    w = rng.integers(-128, 128, (48, 700)).astype(np.int8)
    w[0] = 127
    x = (rng.standard_normal((9, 700)) * 4).astype(np.float32)
    x[0] = 1e3                                                      # every code saturated
    sums = exact_sums(w, (0.02, zp, dt))
    q = quantize(x, 0.02, zp, dt).astype(np.int64) - zp
    want = (q @ w.astype(np.int64).T).astype(np.float32)
    assert np.array_equal(sums(x), want)
