"""QDQ transformers as PyTorch's TorchScript exporter writes a Linear (``MatMul`` then
``Add(bias, MatMul)``, bias first) quantized by ``quantize_static`` without pre-processing (issue #19:
the real MiniLM-L6): the bias Add is an int8 Sum2D computed in fp32 as onnxruntime's unfused
``DQ -> Add -> Q``, and a MatMul onnxruntime leaves in float (an S8 input whose DQ other nodes read)
an int8 FC on MLAS's fp32 SGEMM path; the encoders agree with onnxruntime element for element."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.ort_plan import float_nodes_of
from onnx_mrvl.sim.int8_float_conv import FloatPathFC, mlas_stride_k
from onnx_mrvl.testing import qdq_transformers as qt

ort = pytest.importorskip("onnxruntime")


def _layers(folder: str):
    out = []
    for f in sorted(os.listdir(folder)):
        if f.endswith("-nodes.json"):
            out += [n["attrs"] for n in json.load(open(os.path.join(folder, f)))["nodes"] if "layer_name" in n.get("attrs", {})]
    return out


@pytest.mark.parametrize("name,act", [("bert_encoder_torch", "s8"), ("encoder_block_ln_op_torch", "s8"),
                                      ("encoder_block_ln_op_torch", "u8")])
def test_torch_linear_encoders_bit_exact(tmp_path, name, act):
    m = qt.convert_and_measure(name, str(tmp_path), act)
    assert m["regions"] == 1
    agree = m["agreement"]["last_hidden_state" if name.startswith("bert") else "output"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree
    qmodel = onnx.load(m["qpath"])
    biases = _bias_adds(qmodel)
    assert len(biases) == (12 if name.startswith("bert") else 6), biases
    layers = _layers(str(tmp_path / f"{name}.out"))
    sums = {a["onnx_node_name"][0][len("mrvl_"):]: a for a in layers if a["layer_name"] == ["Sum2D"]}
    plan = float_nodes_of(qmodel)
    for b in biases:   # every bias Add: an int8 Sum2D (never fp16), as onnxruntime runs it: its unfused
        # fp32 DQ -> Add -> Q (S8) or its QLinearAdd kernel (U8: the bias codes are int8 of one scale)
        requant = sums[b].get("requant")
        assert sums[b].get("precision") == ["int8"] and requant in (["float"], ["qlinear"], ["qlinear_u8"]), sums[b]
        assert (requant == ["float"]) == (b in plan.get("Add", ())), (b, requant)
        if act == "s8":
            assert requant == ["float"]
    floats = plan.get("MatMul", frozenset())
    fcs = {a["onnx_node_name"][0][len("mrvl_"):]: a.get("requant") for a in layers if a["layer_name"] == ["FC"]}
    assert fcs and all((fcs[k] == ["float"]) == (k in floats) for k in fcs), (fcs, floats)
    bmms = {a["onnx_node_name"][0][len("mrvl_"):]: a.get("requant") for a in layers
            if a["layer_name"] == ["BatchMatMul"] and a.get("precision") == ["int8"]}
    assert bmms and all((bmms[k] == ["float"]) == (k in floats) for k in bmms), (bmms, floats)
    if act == "s8":   # S8: the Q/K/V projections read a DQ shared by three MatMuls: onnxruntime's float path
        assert any(v == ["float"] for v in fcs.values())


def _bias_adds(qmodel: onnx.ModelProto):
    """The Adds reading the DQ of a constant first and the DQ of a MatMul's Q -> DQ second."""
    prod = {o: n for n in qmodel.graph.node for o in n.output}
    inits = {t.name for t in qmodel.graph.initializer}

    def made_by(t, op):
        return prod[t] if t in prod and prod[t].op_type == op else None
    found = []
    for n in qmodel.graph.node:
        c, dq = (made_by(n.input[0], "DequantizeLinear"), made_by(n.input[1], "DequantizeLinear")) \
            if n.op_type == "Add" else (None, None)
        q = made_by(dq.input[0], "QuantizeLinear") if dq is not None else None
        if c is not None and c.input[0] in inits and q is not None and made_by(q.input[0], "MatMul") is not None:
            found.append(n.name)
    return found


def _float_matmul_model(k: int, n: int, sx: float, zx: int, ws: np.ndarray, wq: np.ndarray, m: int) -> onnx.ModelProto:
    """x codes -> DQ -> MatMul(DQ(W)) (fp32 output): onnxruntime's unfused QDQ MatMul."""
    inits = [numpy_helper.from_array(np.array(sx, np.float32), "sx"), numpy_helper.from_array(np.array(zx, np.int8), "zx"),
             numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.zeros(n, np.int8), "wz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["y"])]
    g = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.INT8, [m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("k,n", [(64, 16), (384, 384), (300, 1536), (1536, 384)])
def test_float_path_fc_sums_match_onnxruntime_bit_exact(k, n, monkeypatch):
    """The fp32 sums of a float-path FC equal onnxruntime's float MatMul on the dequantized operands
    bit for bit (K blocks of ``mlas_stride_k(N, K)``; another blocking differs), and the output
    codes its QuantizeLinear's (one onnxruntime thread, said to the simulator)."""
    monkeypatch.setenv("ONNX_MRVL_ORT_THREADS", "1")
    rng = np.random.default_rng(k + n)
    m, sx, zx = 32, 0.05, 3
    wq = rng.integers(-127, 128, (k, n)).astype(np.int8)
    ws = (rng.uniform(0.5, 2.0, n) / 127).astype(np.float32)
    xq = rng.integers(-128, 128, (m, k)).astype(np.int8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    y_ref = ort.InferenceSession(_float_matmul_model(k, n, sx, zx, ws, wq, m).SerializeToString(), so,
                                 providers=["CPUExecutionProvider"]).run(None, {"x": xq})[0]
    sy = float(np.abs(y_ref).max() / 100)
    params = dict(in_scale=sx, in_zero_point=zx, in_dtype="int8", out_scale=sy, out_zero_point=-2, out_dtype="int8")
    layer = FloatPathFC(np.ascontiguousarray(wq.T), None, ws, params)
    x = ((xq.astype(np.float32) - zx) * np.float32(sx)).astype(np.float32)
    got = layer.sums(x)
    assert np.array_equal(got, y_ref)
    if k > mlas_stride_k(n, k):   # the test sees the order: one block of all K differs
        from onnx_mrvl.sim.int8_float_conv import fma_chain
        assert not np.array_equal(fma_chain(np.ascontiguousarray(x), layer.wd, k), y_ref)
    y, ok = layer.apply(x)
    want = np.clip(np.rint(y_ref / np.float32(sy)) - 2, -128, 127)
    assert ok and np.array_equal(np.rint(y / np.float32(sy)) - 2, want)


def test_float_path_fc_refuses_a_bias():
    params = dict(in_scale=0.1, in_zero_point=0, in_dtype="int8", out_scale=0.1, out_zero_point=0, out_dtype="int8")
    with pytest.raises(ValueError, match="no bias"):
        FloatPathFC(np.ones((4, 8), np.int8), np.zeros(4, np.int32), np.ones(4, np.float32), params)


def _float_bmm_reference(qa, qb, sa, za, sb, zb):
    """onnxruntime's unfused DQ(a) x DQ(b) MatMul (fp32 output)."""
    inits = [numpy_helper.from_array(np.array(v, t), n) for v, t, n in
             [(sa, np.float32, "sa"), (za, np.int8, "za"), (sb, np.float32, "sb"), (zb, np.int8, "zb")]]
    g = helper.make_graph([helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
                           helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
                           helper.make_node("MatMul", ["ad", "bd"], ["y"])], "bmm",
                          [helper.make_tensor_value_info("a", TensorProto.INT8, list(qa.shape)),
                           helper.make_tensor_value_info("b", TensorProto.INT8, list(qb.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
        None, {"a": qa, "b": qb})[0]


def test_float_path_batch_matmul_matches_onnxruntime_bit_exact():
    """``requant="float"`` int8 BatchMatMul (attention's P x V where onnxruntime leaves the MatMul of
    two DQs in float): the codes of onnxruntime's DQ -> MatMul -> Q, unfused, element for element,
    for K below, at and above MLAS's K block; the integer (QLinearMatMul) requantization differs."""
    from onnx_mrvl.sim.int8_transformer import Int8BatchMatMul
    (sa, za), (sb, zb), zy = (0.0123, -5), (0.0371, 7), 3
    flips = 0
    for k in (32, 64, 128, 300):
        rng = np.random.default_rng(k)
        qa = rng.integers(-128, 128, [1, 4, 24, k]).astype(np.int8)
        qb = rng.integers(-128, 128, [1, 4, k, 40]).astype(np.int8)
        y_ref = _float_bmm_reference(qa, qb, sa, za, sb, zb)
        sy = float(np.abs(y_ref).max() / 120)
        want = np.clip(np.rint(y_ref / np.float32(sy)) + zy, -128, 127)
        params = dict(in_scale=sa, in_zero_point=za, in_dtype="int8", in2_scale=sb, in2_zero_point=zb,
                      in2_dtype="int8", out_scale=sy, out_zero_point=zy, out_dtype="int8")
        xa = ((qa.astype(np.float32) - za) * np.float32(sa)).astype(np.float32)
        xb = ((qb.astype(np.float32) - zb) * np.float32(sb)).astype(np.float32)
        codes = {}
        for requant in ("float", "qlinear"):
            y, ok = Int8BatchMatMul(dict(params, requant=requant), False, 1.0, {}).apply(xa, xb)
            assert ok
            codes[requant] = np.rint(y / np.float32(sy)) + zy
        assert np.array_equal(codes["float"], want), k
        flips += int((codes["qlinear"] != want).sum())
    assert flips > 0
    with pytest.raises(ValueError, match="requant"):
        Int8BatchMatMul(dict(params, requant="qlinear_u8"), False, 1.0, {})


def test_infinite_scale_pair_says_why_it_stays_on_the_cpu():
    """quantize_static on an HF attention mask (float32's lowest) writes a Q/DQ of scale inf
    (the real MiniLM-L6: every score NaN, the probabilities 0 after the NaN-fill Where): the reason
    names the scale and the remedy, not a generic one."""
    from onnx_mrvl.fuse.qdq import qparams
    from onnx_mrvl.graph_index import GraphIndex
    inits = [numpy_helper.from_array(np.array(np.inf, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")]
    g = helper.make_graph([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="mask_q"),
                           helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="mask_dq")], "inf",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    reason = qparams(GraphIndex(model), model.graph.node[0])
    assert isinstance(reason, str) and "infinite scale" in reason and "nodes_to_exclude" in reason


@pytest.mark.parametrize("m,k,n", [(32, 384, 384), (7, 1536, 384), (32, 384, 1536), (1, 64, 16)])
def test_float_path_fc_native_kernel_bit_exact(m, k, n):
    """The native float-path FC (the 1x1 float conv kernel over the rows, a MatMul's K block) gives
    numpy's sums and codes bit for bit, and the VNNI integer kernel never takes it."""
    from onnx_mrvl.sim import int8_float_native, int8_native
    if int8_float_native.lib() is None:
        pytest.skip(int8_float_native.why_disabled() or "no native float-path kernel")
    rng = np.random.default_rng(m * k + n)
    params = dict(in_scale=0.031, in_zero_point=-4, in_dtype="int8", out_scale=0.29, out_zero_point=6, out_dtype="int8")
    layer = FloatPathFC(rng.integers(-127, 128, (n, k)).astype(np.int8), None,
                        (rng.uniform(0.5, 2.0, n) / 127).astype(np.float32), params)
    x = (rng.integers(-128, 128, (m, k)).astype(np.float32) + 4) * np.float32(0.031)
    fn = int8_native.prepare(layer)
    assert fn is not None and hasattr(fn, "sums")
    np.testing.assert_array_equal(fn.sums(x), layer.sums(x))
    got, ok = fn(x)
    want, _ = layer.apply(x)
    assert ok and np.array_equal(got, want)


def _shared_input_projections(seed: int, m: int, k: int, n: int) -> onnx.ModelProto:
    """``x [1, M, K] -> MatMul(Wq), MatMul(Wk) -> Add``: two projections reading one tensor (Swin's /
    BERT's Q/K/V), which onnxruntime runs as float MatMuls between DQ and Q once quantized (S8)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), w)
             for w in ("wq", "wk")]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], "q_proj"), helper.make_node("MatMul", ["x", "wk"], ["k"], "k_proj"),
             helper.make_node("Add", ["q", "k"], ["y"], "add")]
    g = helper.make_graph(nodes, "proj", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, m, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, n])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_float_path_fc_follows_mlas_thread_parts(tmp_path, monkeypatch):
    """onnxruntime's float MatMul with more output features than rows is one MlasGemm whose threads
    each sum a 16-aligned part of the columns with the K block of their own N (``fc_segments``):
    64 rows x 128 features at K = 256 on 2 threads are two parts of 64 columns summed in one K block
    of 256, where the whole N takes two blocks of 128 (MaskFormer's Swin patch-merging reduction
    lost a code near a tie, 99.99% identical, which the next stages grew to 53% of the class
    logits). The QDQ model (quantize_static S8) converted and run agrees with onnxruntime on 2
    threads element for element."""
    import onnx_mrvl
    from onnx_mrvl.sim.int8_float_conv import fc_segments
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    monkeypatch.setenv("ONNX_MRVL_ORT_THREADS", "2")
    assert fc_segments(64, 128, 256) == [(0, 64, 256), (64, 128, 256)]
    assert fc_segments(64, 128, 256, threads=1) == [(0, 128, 128)]
    assert fc_segments(256, 128, 256) == [(0, 128, 128)]          # more rows than features: M is split
    from onnx_mrvl.sim import int8_float_native, int8_native
    rng = np.random.default_rng(3)
    sx, zx = 0.05, 3
    wq = rng.integers(-127, 128, (256, 128)).astype(np.int8)
    ws = (rng.uniform(0.5, 2.0, 128) / 127).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    mm = ort.InferenceSession(_float_matmul_model(256, 128, sx, zx, ws, wq, 64).SerializeToString(), so,
                              providers=["CPUExecutionProvider"])
    params = dict(in_scale=sx, in_zero_point=zx, in_dtype="int8", out_scale=0.1, out_zero_point=0, out_dtype="int8")
    layer = FloatPathFC(np.ascontiguousarray(wq.T), None, ws, params)
    native = int8_native.prepare(layer) if int8_float_native.lib() is not None else None
    for _ in range(3):     # the fp32 sums bit for bit (one part of all N: most sums differ)
        xq = rng.integers(-128, 128, (64, 256)).astype(np.int8)
        x = ((xq.astype(np.float32) - zx) * np.float32(sx)).astype(np.float32)
        want = mm.run(None, {"x": xq})[0]
        assert np.array_equal(layer.sums(x), want)
        if native is not None:
            assert np.array_equal(native.sums(x), want)
            got, ok = native(x)
            assert ok and np.array_equal(got, layer.apply(x)[0])
    m, k, n = 64, 256, 128
    model = _shared_input_projections(5, m, k, n)
    rng = np.random.default_rng(6)
    feeds = [{"x": (rng.standard_normal((1, m, k)) * 1.5).astype(np.float32)} for _ in range(4)]
    src, qpath = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(model, src)
    quantize_static_qdq(src, qpath, feeds, "s8")
    qmodel = onnx.load(qpath)
    assert len(float_nodes_of(qmodel).get("MatMul", ())) == 2       # onnxruntime's float path
    result = onnx_mrvl.convert(qpath)
    assert len(result.report.regions) == 1
    folder = str(tmp_path / "out")
    result.save(folder)
    fcs = [a for a in _layers(folder) if a["layer_name"] == ["FC"]]
    assert len(fcs) == 2 and all(a.get("requant") == ["float"] for a in fcs), fcs
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    ref = ort.InferenceSession(qpath, so, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    for seed in range(3):
        x = (np.random.default_rng(10 + seed).standard_normal((1, m, k)) * 1.5).astype(np.float32)
        assert np.array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])
