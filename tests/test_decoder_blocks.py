"""RMSNorm (fuse/rmsnorm.py: Mrvl LayerNorm rms=1), rotary rotate_half (legalize signed_permute),
GQA repeat_kv (legalize expand_to_concat), DeBERTa's masked_fill of the scores (legalize
mask_fill_add) and Swin's shift and patch merging (fuse/slices_nd.py on 4-D token grids, legalize
strided_slice_view), as torch's exporters write them (onnx_mrvl/testing/arch_decoder.py)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.norm_ops import layernorm as sim_layernorm
from onnx_mrvl.testing import arch_decoder as A
from onnx_mrvl.testing.arch_transformer import Net

F16_TOL = 1e-2


def run_ort(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def convert_and_run(m, feeds, tmp_path):
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    return res, got


def assert_fp16_close(ref, got):
    for a, b in zip(ref, got):
        assert a.shape == b.shape and np.isfinite(b).all()
        assert float(np.max(np.abs(a - b))) <= F16_TOL * float(np.max(np.abs(a)))


def rms_model(form, T=8, D=48):
    n = Net(3, 18)
    h = n.linear("x", D, D, "fc1")
    n.linear(A.rmsnorm(n, h, D, form), D, D, "fc2")
    return n.model(f"rms_{form}", [("x", [1, T, D])])


@pytest.mark.parametrize("form", A.RMS_FORMS)
def test_rmsnorm_forms_one_layernorm_rms(form, tmp_path):
    m = rms_model(form)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 8, 48)).astype(np.float32) * 3}
    ref = run_ort(m, feeds)
    f = fuse(legalize(m))
    lns = [n for n in f.model.graph.node if n.domain == opset.DOMAIN and n.op_type == "LayerNorm"]
    assert len(lns) == 1 and any(a.name == "rms" and a.i == 1 for a in lns[0].attribute)
    assert not [n for n in f.model.graph.node if n.op_type in ("Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div")]
    for a, b in zip(ref, run_ort(f.model, feeds)):    # the reference body
        assert float(np.max(np.abs(a - b))) <= 1e-5 * float(np.max(np.abs(a)))
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)
    layers = [x for sg in res.subgraphs for x in sg.nodes_json["nodes"]
              if x.get("op") == "tvm_op" and x["attrs"]["layer_name"][0] == "LayerNorm"]
    assert len(layers) == 1 and layers[0]["attrs"]["rms"] == ["1"]


def test_rmsnorm_intermediate_read_outside_stays_on_cpu(tmp_path):
    n = Net(3, 18)
    D = 32
    h = n.linear("x", D, D, "fc1")
    y = A.rmsnorm(n, h, D)
    mean = next(x for x in n.nodes if x.op_type == "ReduceMean").output[0]
    n.op("Add", [y, mean], "uses_the_mean")          # the mean square is read by another node
    m = n.model("rms_shared", [("x", [1, 8, D])])
    f = fuse(legalize(m))
    assert not any(x.op_type == "LayerNorm" and x.domain == opset.DOMAIN for x in f.model.graph.node)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, D)).astype(np.float32)}
    res, got = convert_and_run(m, feeds, tmp_path)
    assert_fp16_close(run_ort(m, feeds), got)


def test_sim_rmsnorm_matches_float64():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 7, 48)).astype(np.float16).astype(np.float32) * 5 + 2
    g = rng.uniform(0.5, 2, 48).astype(np.float32)
    y, ok = sim_layernorm(x.copy(), -1, 1e-6, g, rms=True)
    xd = x.astype(np.float64)
    ref = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * g
    assert ok and np.array_equal(y, y.astype(np.float16).astype(np.float32))
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(y - ref) <= ulp)            # within 1 fp16 ulp of the exact result


def rotary_model(T=8, H=2, d=16):
    n = Net(5, 18)
    A.rotary(n, "q", [1, H, T, d])
    return n.model("rotary", [("q", [1, H, T, d])])


def test_rotary_rotate_half_is_an_exact_matmul(tmp_path):
    m = rotary_model()
    feeds = {"q": np.random.default_rng(2).standard_normal((1, 2, 8, 16)).astype(np.float32)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    assert any(rule == "signed_permute" for rule, _, _ in leg.log)
    assert not [x for x in leg.model.graph.node if x.op_type in ("Slice", "Neg", "Concat")]
    np.testing.assert_array_equal(run_ort(leg.model, feeds)[0], ref[0])      # exact in fp32
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)


def test_signed_permute_refuses_a_shared_slice_and_another_axis():
    n = Net(5, 18)
    x1 = n.op("Slice", ["q", A._i64(n, [0]), A._i64(n, [8]), A._i64(n, [3]), A._i64(n, [1])])
    x2 = n.op("Slice", ["q", A._i64(n, [8]), A._i64(n, [16]), A._i64(n, [3]), A._i64(n, [1])])
    c = n.op("Concat", [n.op("Neg", [x2]), x1], axis=-1)
    n.op("Add", [c, n.op("Concat", [x1, x1], axis=-1)])     # x1 read by a second Concat
    m = n.model("shared", [("q", [1, 2, 8, 16])])
    leg = legalize(m)
    assert not any(rule == "signed_permute" for rule, _, _ in leg.log)
    n = Net(5, 18)
    y1 = n.op("Slice", ["q", A._i64(n, [0]), A._i64(n, [4]), A._i64(n, [2]), A._i64(n, [1])])
    y2 = n.op("Slice", ["q", A._i64(n, [4]), A._i64(n, [8]), A._i64(n, [2]), A._i64(n, [1])])
    n.op("Concat", [y2, y1], axis=2)                     # the T axis, not the last one
    leg = legalize(n.model("axis2", [("q", [1, 2, 8, 16])]))
    assert not any(rule == "signed_permute" for rule, _, _ in leg.log)


def test_gqa_expand_becomes_concat(tmp_path):
    n = Net(7, 18)
    u = n.op("Unsqueeze", ["k", A._i64(n, [2])])
    e = n.op("Expand", [u, A._i64(n, [1, 2, 3, 8, 16])])
    n.linear(n.op("Reshape", [e, A._i64(n, [1, 6, 8, 16])]), 16, 16)    # a region needs compute
    m = n.model("gqa", [("k", [1, 2, 8, 16])])
    feeds = {"k": np.random.default_rng(3).standard_normal((1, 2, 8, 16)).astype(np.float32)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    cat = [x for x in leg.model.graph.node if x.op_type == "Concat"]
    assert len(cat) == 1 and len(cat[0].input) == 3 and not any(x.op_type == "Expand" for x in leg.model.graph.node)
    np.testing.assert_array_equal(run_ort(leg.model, feeds)[0], ref[0])
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)


def test_expand_of_two_axes_or_new_axes_stays():
    for shape_in, shape_out in (([1, 2, 1, 1], [1, 2, 3, 4]), ([2, 8], [3, 2, 8])):
        n = Net(7, 18)
        n.op("Relu", [n.op("Expand", ["k", A._i64(n, shape_out)])])
        leg = legalize(n.model("e", [("k", shape_in)]))
        assert any(x.op_type == "Expand" for x in leg.model.graph.node)


def test_llama_block_one_region(tmp_path):
    m = A.llama_block()
    feeds = {"hidden": np.random.default_rng(4).standard_normal((1, 16, 64)).astype(np.float32)}
    ref = run_ort(m, feeds)
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)


def test_masked_fill_scores_become_a_mask_add(tmp_path):
    m = A.masked_fill_attention()
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, 16, 32)).astype(np.float32),
             "attention_mask": np.array([[1] * 11 + [0] * 5], np.int64)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    assert any(rule == "mask_fill_add" for rule, _, _ in leg.log)
    np.testing.assert_allclose(run_ort(leg.model, feeds)[0], ref[0], rtol=0, atol=1e-6)   # exact up to fp32 order
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1
    assert sorted(x.op_type for x in res.model.graph.node if not x.op_type.startswith("Subgraph")) == \
        ["Cast", "Not", "Reshape", "Where"]       # the mask's Unsqueeze (a Reshape), Cast, Not, Where(c, fill, 0)
    where = next(x for x in res.model.graph.node if x.op_type == "Where")
    fills = sorted(float(onnx.numpy_helper.to_array(i).reshape(-1)[0]) for i in res.model.graph.initializer if i.name in where.input)
    assert fills == [-32768.0, 0.0]                # fp16 holds the fill: no overflow
    assert_fp16_close(ref, got)


def test_mask_fill_add_refuses_a_fill_fp16_holds_and_other_readers():
    m = A.masked_fill_attention()
    for init in m.graph.initializer:
        if init.name.startswith("lowest"):
            init.CopyFrom(onnx.numpy_helper.from_array(np.array(-1e4, np.float32), init.name))
    assert not any(rule == "mask_fill_add" for rule, _, _ in legalize(m).log)
    m = A.masked_fill_attention()
    where = next(x for x in m.graph.node if x.op_type == "Where")
    m.graph.node.append(helper.make_node("Relu", [where.output[0]], ["other"]))
    m.graph.output.append(helper.make_tensor_value_info("other", onnx.TensorProto.FLOAT, None))
    assert not any(rule == "mask_fill_add" for rule, _, _ in legalize(m).log)


def test_swin_shift_and_patch_merging_one_region(tmp_path):
    m = A.swin_shift_merge()
    feeds = {"tokens": np.random.default_rng(6).standard_normal((1, 64, 16)).astype(np.float32)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    assert sum(rule == "strided_slice_view" for rule, _, _ in leg.log) == 4      # x[:, i::2] of each part
    np.testing.assert_array_equal(run_ort(leg.model, feeds)[0], ref[0])
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)


def test_strided_slice_view_cases():
    def one(shape, axis, start, step, end=None):
        n = Net(1, 18)
        n.op("Relu", [n.op("Slice", ["x", A._i64(n, [start]), A._i64(n, [shape[axis] if end is None else end]),
                                     A._i64(n, [axis]), A._i64(n, [step])], "s")])
        m = n.model("s", [("x", list(shape))])
        leg = legalize(m)
        f = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        np.testing.assert_array_equal(run_ort(leg.model, f)[0], run_ort(m, f)[0])
        return any(rule == "strided_slice_view" for rule, _, _ in leg.log)
    assert one([2, 6, 5], 1, 1, 3) and one([1, 8, 4, 4], 1, 0, 2) and one([4, 6], 1, 1, 2)
    assert not one([1, 3, 8, 8], 2, 0, 2)     # an image's H: the Focus conv's
    assert one([2, 7, 5], 1, 0, 2)            # 7 rows: strided_slice_split's run of 6, every 2nd of it
    assert one([2, 6, 5], 1, 0, 2, end=4)     # stops early: the run [0, 4), every 2nd of it


def test_token_grid_slice_off_the_channel_axis_is_a_slice_nd(tmp_path):
    """torch.roll of a [1, H, W, C] token grid on W: one part too long for crop_to_conv's one-tap
    conv (13 rows dropped) was a CPU Slice ("slice on axis 2"); now a Slice2D of the stored view."""
    n = Net(2, 18)
    x = n.op("Reshape", [n.linear("t", 8, 8, "fc"), A._i64(n, [1, 4, 16, 8])])
    x = n.op("Concat", [x, x], axis=1)
    a = n.op("Slice", [x, A._i64(n, [13]), A._i64(n, [16]), A._i64(n, [2])], "tail")
    b = n.op("Slice", [x, A._i64(n, [0]), A._i64(n, [13]), A._i64(n, [2])], "head")
    n.linear(n.op("Concat", [a, b], axis=2), 8, 8, "fc2")
    m = n.model("roll", [("t", [1, 64, 8])])
    feeds = {"t": np.random.default_rng(8).standard_normal((1, 64, 8)).astype(np.float32)}
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["head_" + b.split("_")[1]].placement == "accelerator"
    assert_fp16_close(run_ort(m, feeds), got)


def test_deberta_disentangled_attention_one_region(tmp_path):
    """Constant-index GatherElements (Mrvl GatherElements), MatMul by a per-head constant
    (batched_const_matmul) and masked_fill of a constant all-false mask (where_const_cond)."""
    m = A.deberta_attention()
    feeds = {"x": np.random.default_rng(9).standard_normal((1, 16, 32)).astype(np.float32)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    rules = [rule for rule, _, _ in leg.log]
    assert rules.count("batched_const_matmul") == 2 and rules.count("where_const_cond") == 1
    np.testing.assert_allclose(run_ort(leg.model, feeds)[0], ref[0], rtol=0, atol=1e-6 * np.abs(ref[0]).max())
    f = fuse(leg)
    gathers = [n for n in f.model.graph.node if n.domain == opset.DOMAIN and n.op_type == "GatherElements"]
    assert len(gathers) == 2
    from onnx_mrvl.graph_index import GraphIndex
    from onnx_mrvl.split import cost
    gi = GraphIndex(f.model)
    assert all(cost.vector_ops(gi, n) == 2 * 16 * 16 for n in gathers)    # one indexed copy per element
    np.testing.assert_allclose(run_ort(f.model, feeds)[0], ref[0], rtol=0, atol=1e-5 * np.abs(ref[0]).max())
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)
    layers = [x for sg in res.subgraphs for x in sg.nodes_json["nodes"]
              if x.get("op") == "tvm_op" and x["attrs"]["layer_name"][0] == "GatherElements"]
    assert len(layers) == 2 and all(x["attrs"]["index_shape"] == ["2", "16", "16"] for x in layers)
    consts = [sg.consts_json[x["attrs"]["indices_const_name"][0]] for sg in res.subgraphs for x in layers]
    assert all(c["shape"] == [1, 16, 16] and c["dtype"] == "int32" for c in consts)   # one table for both heads


def test_sim_gather_elements_broadcast_index():
    from onnx_mrvl.sim.gather import build_gather_elements

    class Spec:
        params = {"axis": 2, "index_shape": [3, 4, 5]}

        def param(self, k, default=None, required=False):
            return self.params.get(k, default)

        def weight(self, k, required=False):
            return idx

        def error(self, msg):
            return ValueError(msg)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 6, (1, 4, 5)).astype(np.int32)
    x = rng.standard_normal((3, 4, 6)).astype(np.float16).astype(np.float32)
    y, ok = build_gather_elements(Spec(), 1)(x)
    assert ok and np.array_equal(y, np.take_along_axis(x, np.broadcast_to(idx, (3, 4, 5)), 2))
    with pytest.raises(ValueError):
        build_gather_elements(Spec(), 1)(x[:, :, :3])       # index 5 beyond an axis of 3


def _gather_model(index, dynamic=False):
    n = Net(1, 17)
    i = "index" if dynamic else n.const(index, "i")
    n.linear(n.op("GatherElements", [n.linear("x", 6, 6, "fc"), i], "node", axis=-1), index.shape[-1], 4, "out")
    m = n.model("g", [("x", [2, 4, 6])])
    if dynamic:
        m.graph.input.append(helper.make_tensor_value_info("index", onnx.TensorProto.INT64, list(index.shape)))
    return m


def test_gather_elements_refusals():
    def decision(m):
        f = fuse(legalize(m))
        return next(v for k, v in f.decisions.items() if k.startswith("node"))
    rng = np.random.default_rng(0)
    assert decision(_gather_model(rng.integers(-6, 6, (2, 4, 5)))).placement == "accelerator"   # negative: from the end
    d = decision(_gather_model(np.full((2, 4, 6), 7, np.int64)))
    assert d.placement == "cpu" and "outside" in d.reason
    d = decision(_gather_model(np.zeros((2, 4, 6), np.int64), dynamic=True))
    assert d.placement == "cpu" and "computed at run time" in d.reason


def test_batched_const_matmul_equal_matrices_is_one_matmul():
    n = Net(4, 17)
    w = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    n.op("MatMul", [n.linear("x", 8, 6, "fc"), n.const(np.stack([w] * 3), "w")], "bmm")
    m = n.model("bmm", [("x", [3, 5, 8])])
    leg = legalize(m)
    assert any("one MatMul" in why for rule, _, why in leg.log if rule == "batched_const_matmul")
    feeds = {"x": np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32)}
    np.testing.assert_allclose(run_ort(leg.model, feeds)[0], run_ort(m, feeds)[0], rtol=1e-6, atol=1e-6)


def test_where_const_cond_mixed_mask_is_mul_add(tmp_path):
    n = Net(4, 17)
    h = n.linear("x", 8, 8, "fc")
    keep = np.random.default_rng(2).random((1, 5, 8)) > 0.3
    y = n.op("Where", [n.const(keep, "cond"), h, n.const(np.array(-7.5, np.float32), "fill")], "masked")
    n.linear(y, 8, 8, "out")
    m = n.model("w", [("x", [1, 5, 8])])
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 5, 8)).astype(np.float32)}
    leg = legalize(m)
    assert any(rule == "where_const_cond" for rule, _, _ in leg.log)
    np.testing.assert_array_equal(run_ort(leg.model, feeds)[0], run_ort(m, feeds)[0])
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(run_ort(m, feeds), got)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_wavlm_gate_sum_and_widening_mul(keepdims, tmp_path):
    """WavLM's gate: a ReduceSum over the last axis and a [.., 1] gate times a constant bias of the
    full shape (legalize last_axis_ones: MatMuls by ones) -> one region."""
    n = Net(6, 18)
    T = 12
    g = n.op("Reshape", [n.linear("x", 16, 8, "gate"), A._i64(n, [T, 2, 4])], "gate_view")
    s = n.op("ReduceSum", [g, A._i64(n, [-1])], "gate_sum", keepdims=keepdims)
    if not keepdims:
        s = n.op("Reshape", [s, A._i64(n, [T, 2, 1])], "gate_col")
    s = n.op("Sigmoid", [s], "gate_sigmoid")
    bias = np.random.default_rng(1).standard_normal((T, 2, 16)).astype(np.float32)
    y = n.op("Mul", [s, n.const(bias, "position_bias")], "gated_bias")
    n.linear(n.op("Reshape", [y, A._i64(n, [1, T, 32])], "flat"), 32, 8, "out")
    m = n.model("gate", [("x", [1, T, 16])])
    feeds = {"x": np.random.default_rng(2).standard_normal((1, T, 16)).astype(np.float32)}
    ref = run_ort(m, feeds)
    leg = legalize(m)
    assert [r for r, _, _ in leg.log].count("last_axis_ones") == 2
    np.testing.assert_allclose(run_ort(leg.model, feeds)[0], ref[0], rtol=0, atol=1e-5 * np.abs(ref[0]).max())
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert_fp16_close(ref, got)


def test_dynamic_int8_codes_moved_then_dequantized(tmp_path):
    """quantize_dynamic's DynamicQuantizeLinear -> Transpose of the codes -> DequantizeLinear
    (SegFormer's efficient attention) -> the Transpose in float (legalize dynamic_dq_moves)."""
    w = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dql"),
             helper.make_node("Transpose", ["q"], ["qt"], name="codes_t", perm=[0, 2, 1]),
             helper.make_node("DequantizeLinear", ["qt", "s", "z"], ["xt"], name="dq"),
             helper.make_node("MatMul", ["xt", "w"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 5])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5, 6])],
                          [onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 8, 5)).astype(np.float32)}
    leg = legalize(m)
    assert any(rule == "dynamic_dq_moves" for rule, _, _ in leg.log)
    assert not [n for n in leg.model.graph.node if n.op_type in ("DynamicQuantizeLinear", "DequantizeLinear")]
    exact = np.transpose(feeds["x"], (0, 2, 1)) @ w          # the float chain: no dynamic rounding
    np.testing.assert_allclose(run_ort(leg.model, feeds)[0], exact, rtol=1e-5, atol=1e-5)
    ref = run_ort(m, feeds)[0]                                # onnxruntime's dynamic run: within its rounding
    assert float(np.abs(ref - exact).max()) <= 2e-2 * float(np.abs(exact).max())
    res, got = convert_and_run(m, feeds, tmp_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    assert float(np.abs(got[0] - exact).max()) <= F16_TOL * float(np.abs(exact).max())


def test_rotate_half_torchscript_slice_bounds():
    """The TorchScript exporter's ``x[..., h:]``: end INT64_MAX, axis given as -1; still exact."""
    n = Net(5, 17)
    big = np.iinfo(np.int64).max
    x1 = n.op("Slice", ["q", A._i64(n, [0]), A._i64(n, [8]), A._i64(n, [-1]), A._i64(n, [1])], "x1")
    x2 = n.op("Slice", ["q", A._i64(n, [8]), A._i64(n, [big]), A._i64(n, [-1]), A._i64(n, [1])], "x2")
    n.op("Concat", [n.op("Neg", [x2], "neg"), x1], "rotate_half", axis=3)
    m = n.model("rot_ts", [("q", [1, 2, 4, 16])])
    feeds = {"q": np.random.default_rng(1).standard_normal((1, 2, 4, 16)).astype(np.float32)}
    leg = legalize(m)
    assert any(rule == "signed_permute" for rule, _, _ in leg.log)
    np.testing.assert_array_equal(run_ort(leg.model, feeds)[0], run_ort(m, feeds)[0])
