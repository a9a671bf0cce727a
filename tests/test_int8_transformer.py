"""QDQ transformers and recurrent models (onnxruntime's quant_pre_process + quantize_static, QDQ,
per-channel int8 weights): a Q -> DQ pair no int8 layer absorbs is a Requantize layer in the region
(docs/fusion.md "int8 in transformers and recurrent models"), compared against onnxruntime's own
execution of the same QDQ model (docs/simulator.md "int8 layers")."""
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

pytest.importorskip("onnxruntime.quantization")
from onnx_mrvl.testing import qdq_transformers as qt  # noqa: E402


def _json_layers(folder: str):
    out = []
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            out += [n for n in json.load(open(os.path.join(folder, f)))["nodes"] if n["op"] == "tvm_op"]
    return out


@pytest.mark.parametrize("act", ["s8", "u8"])
@pytest.mark.parametrize("name", ["mha_legacy", "mha_bmm3d", "lstm_head", "gru_head"])
def test_qdq_attention_and_recurrent_are_one_region(tmp_path, name, act):
    """Every Q/DQ pair, the Softmax, the Div / Mul scales, the head Transposes and Reshapes, the
    int8 projections and the MatMuls of two activations: one region, no CPU node; the output
    within one output quantization step of onnxruntime's QDQ execution."""
    m = qt.convert_and_measure(name, str(tmp_path), act)
    assert m["regions"] == 1 and set(m["cpu"]) <= {"QuantizeLinear", "DequantizeLinear"}, m["cpu"]
    q = onnx.load(m["qpath"])
    graph_io = {i.name for i in q.graph.input} | {o.name for o in q.graph.output}
    on_cpu = [n for n in m["result"].model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert all(set(n.input[:1]) & graph_io or set(n.output) & graph_io or
               any(p.op_type == "QuantizeLinear" and p.input[0] in graph_io and p.output[0] == n.input[0]
                   for p in on_cpu) or any(c.op_type == "DequantizeLinear" and c.output[0] in graph_io
                                           and c.input[0] == n.output[0] for c in on_cpu) for n in on_cpu)
    (agree,) = m["agreement"].values()
    print(name, act, agree)
    assert agree["steps"] <= 1.0 + 1e-3
    assert agree["identical"] >= 0.9
    layers = _json_layers(str(tmp_path / f"{name}.out"))
    requant = [n for n in layers if n["attrs"]["layer_name"] == ["Requantize"]]
    if name.startswith("mha"):
        assert requant   # the pairs after Softmax, the Div, the MatMuls of two activations, ...
    assert all(n["attrs"]["precision"] == ["int8"] and n["attrs"]["in_dtype"] == [
        "int8" if act == "s8" else "uint8"] for n in requant)
    binary = load(m["result"].subgraphs[0].binary)
    for lay in binary.meta["layers"]:
        if lay["layer_name"] == "Requantize":   # its codes are stored: an int8 tensor
            assert binary.meta["tensors"][lay["outputs"][0]]["dtype"] in ("int8", "uint8")
    n_fc = sum(n.op_type in ("Gemm", "MatMul") and any(i.endswith("_DequantizeLinear_Output") and "weight" in i
                                                       or "_w_" in i for i in n.input) for n in q.graph.node)
    assert len([n for n in layers if n["attrs"]["layer_name"] == ["FC"]
                and n["attrs"].get("precision") == ["int8"]]) >= min(n_fc, 1)


@pytest.mark.parametrize("dtype, zp", [(np.int8, -3), (np.uint8, 131)])
def test_requantize_matches_quantize_dequantize_bit_exact(dtype, zp):
    """sim's Requantize against onnxruntime's QuantizeLinear -> DequantizeLinear on values around
    the rounding ties (x / s = k + 0.5), beyond the range, and NaN-free random data."""
    from onnx_mrvl.sim.int8_transformer import build_requantize

    class Spec:
        def __init__(self, params):
            self.params = params

        def error(self, msg):
            return ValueError(msg)

    s = np.float32(0.0371)
    rng = np.random.default_rng(0)
    x = np.concatenate([(np.arange(-300, 300) + 0.5) * s, rng.standard_normal(600) * 3,
                        np.array([1e6, -1e6, 0.0], np.float32)]).astype(np.float32).reshape(1, -1)
    inits = [onnx.numpy_helper.from_array(np.array(s), "s"), onnx.numpy_helper.from_array(np.array(zp, dtype), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    dt = "int8" if dtype == np.int8 else "uint8"
    params = dict(precision="int8", in_scale=float(s), in_zero_point=zp, in_dtype=dt, out_scale=float(s),
                  out_zero_point=zp, out_dtype=dt)
    y, ok = build_requantize(Spec(params), 1)(x)
    assert ok and np.array_equal(y, want)
    with pytest.raises(ValueError, match="differ"):
        build_requantize(Spec(dict(params, in_scale=0.5)), 1)


def test_requantize_fuses_with_reference_body(tmp_path):
    """fuse: each unabsorbed pair is a Mrvl Requantize whose reference body (the pair) reproduces
    the QDQ model in plain onnxruntime; a user exclusion keeps a pair on the CPU."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = qt.quantize(qt.MODELS["mha_legacy"](), str(tmp_path / "q.onnx"), "u8")
    legal = legalize(onnx.load(qpath))
    legal = getattr(legal, "model", legal)
    res = fuse(legal)
    rq = [n for n in res.model.graph.node if n.domain == "mrvl" and n.op_type == "Requantize"]
    left = [n for n in res.model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert rq and [n.op_type for n in left] == ["QuantizeLinear", "DequantizeLinear"]   # the model input's
    assert left[0].input[0] == "input"
    x = qt.feeds(legal, 0)
    a = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
    b = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    step = qt.output_steps(onnx.load(qpath))["output"]
    assert np.abs(a - b).max() <= step * (1 + 1e-3)
    softmax_q = next(n for n in legal.graph.node if n.op_type == "QuantizeLinear" and "softmax" in n.input[0])
    kept = fuse(legal, exclude=[softmax_q.name])
    d = kept.decisions.get(softmax_q.name) if hasattr(kept.decisions, "get") else None
    assert softmax_q.name in [n.name for n in kept.model.graph.node]
    assert d is None or d.placement == "cpu"


def test_requantize_refuses_per_channel_and_exported_codes():
    """A per-channel activation pair and a Q whose codes are a model output stay on the CPU, with reasons."""
    from onnx_mrvl.fuse import fuse
    s = onnx.numpy_helper.from_array(np.array([0.1, 0.2, 0.3, 0.4], np.float32), "s")
    z = onnx.numpy_helper.from_array(np.zeros(4, np.int8), "z")
    s1 = onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s1")
    nodes = [helper.make_node("Softmax", ["x"], ["sm"], name="sm", axis=-1),
             helper.make_node("QuantizeLinear", ["sm", "s", "z"], ["q"], name="q_pc", axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq_pc", axis=1),
             helper.make_node("QuantizeLinear", ["y", "s1"], ["codes"], name="q_out")]
    m = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("codes", TensorProto.UINT8, [1, 4, 8])], [s, z, s1]),
        opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    res = fuse(m)
    reasons = {d.node: d.reason for d in res.decisions.by_placement("cpu")}
    assert "per channel" in reasons["q_pc"]
    assert "model output" in reasons["q_out"]


class _Spec:
    def __init__(self, params):
        self.params = params

    def error(self, msg):
        return ValueError(msg)


def _q(dtype):
    return (TensorProto.INT8, "int8") if dtype == np.int8 else (TensorProto.UINT8, "uint8")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_int8_batch_matmul_matches_qlinearmatmul_bit_exact(dtype):
    """sim's int8 BatchMatMul (K stored as K^T: transpose_b) against onnxruntime's QLinearMatMul on
    random full-range codes: the integer sums and MLAS's requantization, bit for bit."""
    from onnx_mrvl.sim.int8_transformer import Int8BatchMatMul
    rng = np.random.default_rng(5)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max + 1
    a = rng.integers(lo, hi, (1, 4, 16, 8)).astype(dtype)
    b = rng.integers(lo, hi, (1, 4, 8, 16)).astype(dtype)
    sa, sb, sy = np.float32(0.031), np.float32(0.017), np.float32(0.29)
    za, zb, zy = (dtype(3), dtype(-7 if dtype == np.int8 else 140), dtype(-2 if dtype == np.int8 else 127))
    elem, dt = _q(dtype)
    inits = [onnx.numpy_helper.from_array(v, n) for v, n in (
        (np.array(sa), "sa"), (np.array(za, dtype), "za"), (np.array(sb), "sb"), (np.array(zb, dtype), "zb"),
        (np.array(sy), "sy"), (np.array(zy, dtype), "zy"))]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("a", elem, a.shape),
                                                          helper.make_tensor_value_info("b", elem, b.shape)],
                                            [helper.make_tensor_value_info("y", elem, None)], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})[0].astype(np.int32)
    params = dict(in_scale=float(sa), in_zero_point=int(za), in_dtype=dt, in2_scale=float(sb),
                  in2_zero_point=int(zb), in2_dtype=dt, out_scale=float(sy), out_zero_point=int(zy), out_dtype=dt)
    deq = lambda q, s, z: ((q.astype(np.float32) - float(z)) * s).astype(np.float32)   # noqa: E731
    bmm = Int8BatchMatMul(params, True, 1.0, {})   # B stored [.., N, K]
    y, ok = bmm.apply(deq(a, sa, za), np.ascontiguousarray(deq(b, sb, zb).transpose(0, 1, 3, 2)))
    got = np.rint(y / sy).astype(np.int32) + int(zy)
    assert ok and np.array_equal(got, want)


@pytest.mark.parametrize("dtype, zx, zy, sy", [(np.uint8, 120, 0, 1 / 255), (np.int8, -5, -128, 1 / 255),
                                               (np.int8, 3, -128, 0.0041)])
def test_int8_softmax_matches_qlinearsoftmax_bit_exact(dtype, zx, zy, sy):
    """sim's int8 Softmax against onnxruntime's com.microsoft QLinearSoftmax (opset-13 form) on
    random codes, three input scales, rows of 16 / 17 / 64, over the last axis and over axis 1."""
    from onnx_mrvl.sim.int8_transformer import Int8Softmax
    rng = np.random.default_rng(2)
    elem, dt = _q(dtype)
    for sx in (0.02, 0.11, 0.5):
        for shape, axis in (((3, 40, 16), -1), ((2, 40, 17), -1), ((40, 64), -1), ((2, 17, 5), 1)):
            x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
            inits = [onnx.numpy_helper.from_array(np.array(v, t), n) for v, t, n in (
                (sx, np.float32, "sx"), (zx, dtype, "zx"), (sy, np.float32, "sy"), (zy, dtype, "zy"))]
            node = helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                                    axis=axis, opset=13)
            m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                                                    [helper.make_tensor_value_info("y", elem, shape)], inits),
                                  opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
            m.ir_version = 8
            want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0].astype(np.int32)
            params = dict(in_scale=float(np.float32(sx)), in_zero_point=zx, in_dtype=dt,
                          out_scale=float(np.float32(sy)), out_zero_point=zy, out_dtype=dt)
            xf = ((x.astype(np.float32) - zx) * np.float32(sx)).astype(np.float32)
            y, ok = Int8Softmax(params, axis).apply(xf)
            got = np.rint(y / np.float32(sy)).astype(np.int32) + zy
            assert ok and np.array_equal(got, want), (sx, shape, axis)


@pytest.mark.parametrize("dtype, zy, sy", [(np.uint8, 0, 1 / 255), (np.int8, -128, 0.0041), (np.int8, 3, 0.0041)])
def test_int8_softmax_qlinearsoftmax_at_ties(dtype, zy, sy):
    """QLinearSoftmax on 3000 rows per case (row lengths 16-197, four input scales, the ViT scale
    0.018864457 among them): every code equal. Its table's shift takes the log in fp32 and its
    quotient E * floor(1 / s_y) / sum is rounded once, in float64: with the log in float64 or the
    quotient rounded to fp32 first (an exact fp32 .5 then went to even where onnxruntime went up)
    1-3 codes per case differed, which put ViT-B/16 U8 at 74% identical logits."""
    from onnx_mrvl.sim.int8_transformer import Int8Softmax
    rng = np.random.default_rng(0)
    elem, dt = _q(dtype)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    for d in (16, 17, 33, 40, 64, 65, 197):
        for sx in (0.02, 0.11, 0.5, 0.018864457):
            x = rng.integers(lo, hi + 1, (3000, d)).astype(dtype)
            inits = [onnx.numpy_helper.from_array(np.array(v, t), n) for v, t, n in (
                (sx, np.float32, "sx"), (0, dtype, "zx"), (sy, np.float32, "sy"), (zy, dtype, "zy"))]
            node = helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                                    axis=-1, opset=13)
            m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [3000, d])],
                                                    [helper.make_tensor_value_info("y", elem, None)], inits),
                                  opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
            m.ir_version = 8
            want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0].astype(np.int32)
            params = dict(in_scale=float(np.float32(sx)), in_zero_point=0, in_dtype=dt,
                          out_scale=float(np.float32(sy)), out_zero_point=zy, out_dtype=dt)
            y, ok = Int8Softmax(params, -1).apply((x.astype(np.float32) * np.float32(sx)).astype(np.float32))
            got = np.rint(y / np.float32(sy)).astype(np.int32) + zy
            assert ok and np.array_equal(got, want), (d, sx, int((got != want).sum()))



@pytest.mark.parametrize("dtype, zx", [(np.uint8, 128), (np.int8, 0)])
def test_int8_softmax_huge_input_scale_is_onnxruntime_hard_max(dtype, zx):
    """A huge finite input scale (a mask's float32-lowest range: lowest / 255 = 1.3e36, or 1e10):
    onnxruntime's table is exp(ln(FLT_MAX / D) - 5) at 255 and exp(-k s_x) = 0 below, so each row
    is a hard max shared by its tied maxima; the sim's table gives the same codes. An infinite
    scale (a NaN table, the code a cast of NaN) is refused (legalize's qdq_infinite_softmax)."""
    from onnx_mrvl.sim.int8_transformer import Int8Softmax
    rng = np.random.default_rng(3)
    elem, dt = _q(dtype)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    for sx in (float(np.float32(np.finfo(np.float32).max / 255)), 1e10):
        x = rng.integers(lo, hi + 1, (500, 33)).astype(dtype)
        x[:100] = rng.integers(hi - 2, hi + 1, (100, 33))   # many tied maxima
        inits = [onnx.numpy_helper.from_array(np.array(v, t), n) for v, t, n in (
            (sx, np.float32, "sx"), (zx, dtype, "zx"), (1 / 255, np.float32, "sy"), (lo, dtype, "zy"))]
        node = helper.make_node("QLinearSoftmax", ["x", "sx", "zx", "sy", "zy"], ["y"], domain="com.microsoft",
                                axis=-1, opset=13)
        m = helper.make_model(helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [500, 33])],
                                                [helper.make_tensor_value_info("y", elem, None)], inits),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0].astype(np.int32)
        params = dict(in_scale=sx, in_zero_point=zx, in_dtype=dt, out_scale=float(np.float32(1 / 255)),
                      out_zero_point=int(lo), out_dtype=dt)
        y, ok = Int8Softmax(params, -1).apply(((x.astype(np.float64) - zx) * np.float32(sx)).astype(np.float32))
        got = np.rint(y / np.float32(1 / 255)).astype(np.int32) + int(lo)
        assert ok and np.array_equal(got, want), (sx, int((got != want).sum()))
        assert len(np.unique(want[:100])) > 2    # ties share the probability
    with pytest.raises(ValueError, match="infinite scale"):
        Int8Softmax(dict(params, in_scale=float("inf")), -1)


CPU_LEFT = {"encoder_block_ln_op": set(), "vit_like": set(), "whisper_encoder": set(),
            "bert_encoder": {"Gather", "Reshape", "Cast", "Add", "Mul"}}      # embedding lookups, the HF mask


@pytest.mark.parametrize("name", sorted(CPU_LEFT))
def test_qdq_encoder_is_one_region_bit_exact(tmp_path, name):
    """QDQ encoders: a pre-LN layer (LayerNormalization op, attention, GELU as Div/Erf/Add/Mul/Mul
    between pairs), the Whisper-style encoder (its int8 Conv1d stem as 2-D int8 convs: legalize's
    conv_1d_to_2d), BERT and ViT with decomposed layer norms cut by pairs: one region, the attention's MatMuls and Softmax int8, the layer norms
    writing int8 codes, the GELU an int8 Lookup (or its Muls writing int8 codes), every other pair a Requantize; the hidden states equal to
    onnxruntime's QDQ execution element for element."""
    m = qt.convert_and_measure(name, str(tmp_path), "s8")
    assert m["regions"] == 1
    assert set(m["cpu"]) <= {"QuantizeLinear", "DequantizeLinear"} | CPU_LEFT[name], m["cpu"]
    agree = m["agreement"]["last_hidden_state" if name.startswith(("bert", "whisper")) else "output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    kinds = {(n["attrs"]["layer_name"][0], n["attrs"].get("precision", ["fp16"])[0])
             for n in _json_layers(str(tmp_path / f"{name}.out"))}
    assert {("BatchMatMul", "int8"), ("Softmax", "int8"), ("LayerNorm", "int8_out"),
            ("FC", "int8"), ("Requantize", "int8")} <= kinds, kinds
    # the GELU between its pairs: one int8 Lookup table of onnxruntime's own results (qdq_lookup.py),
    # or its Muls writing int8 codes when no table takes it
    assert {("Lookup", "int8"), ("Mul2D", "int8_out")} & kinds, kinds
    if name == "whisper_encoder":   # the QDQ Conv1d stem: int8 2-D convs on a unit H axis
        assert ("Conv2D", "int8") in kinds
    if name in ("bert_encoder", "vit_like"):   # decomposed layer norms: interior quantization points
        lns = [n for n in _json_layers(str(tmp_path / f"{name}.out")) if n["attrs"]["layer_name"] == ["LayerNorm"]]
        assert lns and all("inner_scales" in n["attrs"] for n in lns)
    binary = load(m["result"].subgraphs[0].binary)
    for lay in binary.meta["layers"]:
        if lay["params"].get("precision") in ("int8", "int8_out"):
            assert binary.meta["tensors"][lay["outputs"][0]]["dtype"] in ("int8", "uint8")


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_symmetric_activations_encoder_bit_exact(tmp_path, act):
    """``ActivationSymmetric`` (zero point 128 with U8): onnxruntime runs the residual adds as
    QLinearAdd and the GELU's Add / Muls as QLinearAdd / QLinearMul; the Sum2Ds follow MLAS's kernel
    (requant qlinear) and the GELU's Lookup table is computed with those kernels (U8 was 2 steps off)."""
    m = qt.convert_and_measure("encoder_block_ln_op", str(tmp_path), act, "symmetric")
    assert m["regions"] == 1
    agree = m["agreement"]["output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    sums = [n for n in _json_layers(str(tmp_path / "encoder_block_ln_op.out")) if n["attrs"]["layer_name"] == ["Sum2D"]]
    # S8: onnxruntime's S8 -> U8 rewrite turns only some of the adds' pairs, so it leaves the adds in float
    want = ["qlinear"] if act == "u8" else ["float"]
    assert len(sums) == 2 and all(n["attrs"]["requant"] == want for n in sums), sums


@pytest.mark.parametrize("name", ["encoder_block_ln_op", "vit_like"])
def test_int8_out_reference_bodies_run_in_plain_onnxruntime(tmp_path, name):
    """The fused QDQ encoder (int8 BatchMatMul / Softmax, int8_out LayerNorm / Mul2D, Requantize,
    erf; vit_like: layer norms with interior quantization) runs in plain onnxruntime through its
    reference bodies, within one output step of the QDQ model."""
    from onnx_mrvl.fuse import fuse
    from onnx_mrvl.legalize import legalize
    qpath = qt.quantize(qt.MODELS[name](), str(tmp_path / "q.onnx"), "u8")
    legal = legalize(onnx.load(qpath))
    legal = getattr(legal, "model", legal)
    fused = fuse(legal).model
    ops = {(n.op_type, next((a.s.decode() for a in n.attribute if a.name == "precision"), "fp16"))
           for n in fused.graph.node if n.domain == "mrvl"}
    assert {("LayerNorm", "int8_out"), ("Softmax", "int8"), ("BatchMatMul", "int8")} <= ops, ops
    x = qt.feeds(legal, 0)
    a = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
    b = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    step = qt.output_steps(onnx.load(qpath))["output"]
    assert np.abs(a - b).max() <= step * (1 + 1e-3)


def test_requantize_and_int8_attention_perf_model(tmp_path):
    """Perf model: a Requantize costs its 3 vector ops per element (target.VECTOR_LOWERINGS, an
    assumption), its output 1 byte per element; the int8 BatchMatMul runs its MACs at the int8 rate."""
    import math
    from onnx_mrvl.costmodel import perf_report, vector_ops
    from onnx_mrvl.target import VECTOR_LOWERINGS, ArchProfile
    m = qt.convert_and_measure("mha_legacy", str(tmp_path), "s8")
    meta = load(m["result"].subgraphs[0].binary).meta
    shapes = {int(t["id"]): list(t["shape"]) for t in meta["tensors"]}
    rep = perf_report(meta)
    arch = ArchProfile()
    rq = [lay for lay in meta["layers"] if lay["layer_name"] == "Requantize"]
    assert rq and VECTOR_LOWERINGS["Requantize"][1] == 3
    for lay in rq:
        out = meta["tensors"][lay["outputs"][0]]
        assert vector_ops(lay, shapes) == 3 * int(np.prod(out["shape"]))
        assert out["nbytes"] == int(np.prod(out["shape"]))
    peak = arch.macs_per_cycle_per_tile * meta["arch"]["num_tiles"]
    bmm = [(lay, row) for lay, row in zip(meta["layers"], rep.layers) if lay["layer_name"] == "BatchMatMul"]
    assert len(bmm) == 2
    for lay, row in bmm:
        assert lay["params"]["precision"] == "int8" and row.macs > 0
        assert row.compute_cycles == math.ceil(row.macs / (peak * arch.int8_macs_factor))


@pytest.mark.parametrize("d", [5, 16, 17, 65, 197, 257])
def test_mlas_fp32_softmax_bit_for_bit(d):
    """sim.mlas_softmax: onnxruntime's fp32 Softmax (MLAS AVX-512 sum-exp kernel) output equal,
    every element, on 4000 rows; the int8 Softmax with requant float (a DQ -> Softmax -> Q group
    onnxruntime leaves unfused, e.g. a dynamo export's Softmax whose Q feeds IsNaN / Where) then
    gives onnxruntime's codes at a fine output scale (np.exp there: ~50% of the fp32 outputs an ulp
    off and codes moved; DINOv2 dynamo S8 99.3% identical)."""
    from onnx_mrvl.sim.int8_transformer import Int8Softmax
    from onnx_mrvl.sim.mlas_softmax import softmax_last_axis
    rng = np.random.default_rng(d)
    v = (rng.standard_normal((4000, d)) * 3).astype(np.float32)
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4000, d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert np.array_equal(softmax_last_axis(v), ort.InferenceSession(m.SerializeToString(), so,
                                                                   providers=["CPUExecutionProvider"]).run(None, {"x": v})[0])
    codes = rng.integers(-128, 128, (4000, d)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["x"]),
             helper.make_node("Softmax", ["x"], ["y"], axis=-1),
             helper.make_node("QuantizeLinear", ["y", "so", "zo"], ["qy"])]
    inits = [onnx.numpy_helper.from_array(np.float32(0.05), "s"), onnx.numpy_helper.from_array(np.int8(-3), "z"),
             onnx.numpy_helper.from_array(np.float32(0.0004), "so"), onnx.numpy_helper.from_array(np.int8(-128), "zo")]
    qm = helper.make_model(helper.make_graph(nodes, "sm", [helper.make_tensor_value_info("q", TensorProto.INT8, [4000, d])],
                                             [helper.make_tensor_value_info("qy", TensorProto.INT8, None)], inits),
                           opset_imports=[helper.make_opsetid("", 13)])
    qm.ir_version = 8
    ref = ort.InferenceSession(qm.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"q": codes})[0]
    params = dict(in_scale=0.05, in_zero_point=-3, in_dtype="int8", out_scale=float(np.float32(0.0004)),
                  out_zero_point=-128, out_dtype="int8", requant="float")
    y, ok = Int8Softmax(params, -1).apply(((codes.astype(np.float32) + 3) * np.float32(0.05)).astype(np.float32))
    got = np.rint(y / np.float32(0.0004)).astype(np.int32) - 128
    assert ok and np.array_equal(got, ref.astype(np.int32)), int((got != ref).sum())
