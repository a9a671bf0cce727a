"""The attention data path on the accelerator: mrvl::BatchMatMul, token reshapes, N-D splits and
masks (docs/fusion.md "Attention"). Models from onnx_mrvl/testing/arch_attention.py (seeded, no downloads)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_mrvl.testing import arch_attention as A
import onnx_mrvl
from onnx_mrvl import opset
from onnx_mrvl.emit.compile import build_program
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.sim.fp16 import to_fp16_values
from onnx_mrvl.sim.matmul import BatchMatMul

F = TensorProto.FLOAT


def _ref(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _deployed(model, tmp_path, feeds):
    """(convert result, outputs of onnx_mrvl.InferenceSession), checked within the fp16 bound."""
    res = onnx_mrvl.convert(model)
    assert not res.report.warnings, res.report.warnings
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    for g, r in zip(got, _ref(model, feeds)):
        assert g.shape == r.shape
        assert np.all(np.isfinite(g))
        assert np.max(np.abs(g - r)) <= 1e-2 * np.max(np.abs(r))
    return res, got


def _cpu_ops(res):
    return sorted(n.op_type for n in res.model.graph.node if not n.op_type.startswith("Subgraph"))


def _regions(res):
    return sum(n.op_type.startswith("Subgraph") for n in res.model.graph.node)


def _mask_cpu_ops(mask):
    """hf: the int64 attention_mask's Unsqueeze (legalized to a Reshape) and its Cast to float stay on
    the CPU (integer tensors); ``1 - m`` (legalized to m * -1 + 1) and the Mul by float32's lowest run
    in the region, the fill saturated to -32768 (fuse/masks.py; before: on the CPU, the region fed
    -3.4e38 that fp16 rounded to -inf)."""
    if mask in ("bool_inf", "bool_min"):   # the boolean mask and its Where(m, 0, fill) run on the CPU
        return ["Cast", "Reshape", "Where"]
    return ["Cast", "Reshape"] if mask == "hf" else []


def _layout_changes(res):
    """LayoutTransform layers (NCHW<->NHWC moves and block rotations) in the deployed regions."""
    return [n for sg in res.subgraphs for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op"
            and n["attrs"]["layer_name"][0].startswith("layout_transform")]


@pytest.mark.parametrize("style", A.STYLES)
@pytest.mark.parametrize("mask", A.MASKS)
def test_attention_block_is_one_region(style, mask, tmp_path):
    """Every exporter form and mask: the whole block (projections, heads, Q*K^T, scale, mask,
    Softmax, P*V, heads back, out_proj, residual) is one region; only hf's integer mask
    preparation (Unsqueeze, Cast) stays on the CPU. The scores [B,H,T,T] are read by the mask Sum2D
    and the Softmax in the order the BatchMatMul wrote them: no LayoutTransform in the region."""
    m = A.mha_block(style, mask)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == sorted(_mask_cpu_ops(mask))
    assert _regions(res) == 1
    assert _layout_changes(res) == []


@pytest.mark.parametrize("style", A.STYLES)
@pytest.mark.parametrize("softmax,mask", [("Sigmoid", "const"), ("none", "none")])
def test_attention_data_path_is_one_region(style, softmax, mask, tmp_path):
    m = A.mha_block(style, mask, softmax)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == [] and _regions(res) == 1


@pytest.mark.parametrize("style", A.STYLES)
def test_head_transposes_move_no_data(style, tmp_path):
    """Q, K, V are read by the BatchMatMuls as the FCs wrote them ([.., T, H, d]: a_perm / b_perm)
    and P*V writes the heads back in token order (out_perm): no LayoutTransform, no rotation; every
    MAC of the block is offloaded."""
    m = A.mha_block(style, "const")
    r = fuse(legalize(m))
    ops = [n.op_type for n in r.model.graph.node if n.domain == opset.DOMAIN]
    assert "LayoutTransform" not in ops, ops
    bmm = {n.name: opset.node_attrs(n) for n in r.model.graph.node if n.op_type == "BatchMatMul"}
    assert all("a_perm" in a for n, a in bmm.items() if "attn.qk" in n)
    assert all("out_perm" in a for n, a in bmm.items() if "attn.av" in n)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    T, D, H = 16, 32, 4
    proj = (4 if style == "legacy" else 2) * T * D * D + (2 * T * D * D if style != "legacy" else 0)
    assert res.report.macs_offloaded == proj + 2 * H * T * T * (D // H)


@pytest.mark.parametrize("style", ["legacy", "fused_qkv", "dynamo"])
def test_batch_of_two(style, tmp_path):
    """B = 2 ([2,T,D] -> [2,T,H,d] -> [2,H,T,d], HF's [B,1,1,T] input mask): the batch stays the
    leading axis of every reshape, the 4-D BatchMatMuls run 2 x H products."""
    m = A.mha_block(style, "input", B=2)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == [] and _regions(res) == 1 and _layout_changes(res) == []


def test_reshape_targets_from_shape_ops(tmp_path):
    """The TorchScript exporter's Shape -> Gather -> Unsqueeze -> Concat reshape targets fold to
    constants (legalize) and the block converts like the constant form."""
    m = A.mha_block("legacy", "const", dynamic=True)
    assert any(n.op_type == "Shape" for n in m.graph.node)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == [] and _regions(res) == 1 and _layout_changes(res) == []


@pytest.mark.parametrize("style", A.STYLES)
def test_fused_model_runs_the_reference_bodies(style):
    """Fused model (Mrvl nodes with their opset.py bodies) in plain onnxruntime: fp32-exact."""
    m = A.mha_block(style, "const")
    r = fuse(legalize(m))
    onnx.checker.check_model(r.model, full_check=True)
    ops = [n.op_type for n in r.model.graph.node if n.domain == opset.DOMAIN]
    assert ops.count("BatchMatMul") == 2
    qk = next(n for n in r.model.graph.node if n.op_type == "BatchMatMul" and "attn.qk" in n.name)
    alpha = opset.node_attrs(qk)["alpha"]
    want = {"legacy": 1 / np.sqrt(8), "fused_qkv": 1 / np.sqrt(8), "dynamo": 1.0, "bmm3d": 1.0}[style]
    assert alpha == pytest.approx(want, rel=1e-6)          # Div by sqrt(d) folded into alpha
    f = A.feeds(m)
    ref, got = _ref(m, f)[0], _ref(r.model, f)[0]
    assert np.max(np.abs(got - ref)) <= 1e-5 * np.max(np.abs(ref))


def _qk_model(q_shape, k_shape, transpose_k=None, scale=None):
    nodes, k = [], "k"
    if transpose_k is not None:
        nodes.append(helper.make_node("Transpose", ["k"], ["kt"], perm=transpose_k, name="kt"))
        k = "kt"
    nodes.append(helper.make_node("MatMul", ["q", k], ["s"], name="qk"))
    out, inits = "s", []
    if scale is not None:
        inits.append(helper.make_tensor("c", F, [], [scale]))
        nodes.append(helper.make_node("Div", ["s", "c"], ["y"], name="div"))
        out = "y"
    g = helper.make_graph(nodes, "qk", [helper.make_tensor_value_info("q", F, q_shape),
                                        helper.make_tensor_value_info("k", F, k_shape)],
                          [helper.make_tensor_value_info(out, F, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def _feeds(m, seed=0):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in m.graph.input}


def test_transpose_of_k_is_folded_into_transpose_b(tmp_path):
    """Q [1,H,T,d] x Transpose(K [1,H,T,d], 0,1,3,2): K is read in its rows (transpose_b=1), no
    data movement; the Div by sqrt(d) is alpha."""
    m = _qk_model([1, 4, 16, 8], [1, 4, 16, 8], [0, 1, 3, 2], float(np.sqrt(8)))
    r = fuse(legalize(m))
    assert [n.op_type for n in r.model.graph.node] == ["BatchMatMul"]
    a = opset.node_attrs(r.model.graph.node[0])
    assert a["transpose_b"] == 1 and a["alpha"] == pytest.approx(1 / np.sqrt(8))
    assert r.decisions["kt"].placement == "accelerator" and r.decisions["div"].placement == "accelerator"
    res, _ = _deployed(m, tmp_path, _feeds(m))
    assert _cpu_ops(res) == [] and _regions(res) == 1


@pytest.mark.parametrize("qs,ks", [([2, 16, 32], [2, 32, 16]),         # 3-D [B,T,D] x [B,D,T], B = 2
                                   ([1, 4, 16, 8], [1, 1, 8, 16]),     # broadcast over heads
                                   ([2, 4, 16, 8], [2, 4, 8, 16])])    # batch 2 x 4 heads
def test_batch_matmul_forms(qs, ks, tmp_path):
    m = _qk_model(qs, ks)
    r = fuse(legalize(m))
    assert [n.op_type for n in r.model.graph.node] == ["BatchMatMul"]
    res, _ = _deployed(m, tmp_path, _feeds(m))
    assert _cpu_ops(res) == []


def test_batch_matmul_rejections():
    cases = {
        "ranks": (_qk_model([1, 4, 16, 8], [8, 16]), "of one rank"),
        "5d": (_qk_model([1, 2, 4, 16, 8], [1, 2, 4, 8, 16]), "3-D or 4-D"),
    }
    for name, (m, why) in cases.items():
        r = fuse(legalize(m))
        assert why in r.decisions["qk"].reason, (name, r.decisions["qk"].reason)
        assert r.decisions["qk"].placement == "cpu"


def test_sim_batch_matmul_fp16_semantics():
    """fp16 operands, float32 sums, alpha on the float32 sum, one rounding to fp16."""
    rng = np.random.default_rng(0)
    a = to_fp16_values(rng.standard_normal((2, 3, 5, 8)) * 4)
    b = to_fp16_values(rng.standard_normal((2, 3, 7, 8)) * 4)
    y, ok = BatchMatMul(transpose_b=True, alpha=0.125).apply(a, b)
    want = to_fp16_values(np.matmul(a, np.swapaxes(b, -1, -2), dtype=np.float32) * np.float32(0.125))
    assert ok and y.shape == (2, 3, 5, 7) and np.array_equal(y, want)
    # operands in a stored order (a_perm / b_perm) and a permuted output (out_perm)
    y, ok = BatchMatMul(alpha=0.5, a_perm=[0, 2, 1, 3], b_perm=[0, 2, 3, 1], out_perm=[0, 2, 1, 3]).apply(
        np.ascontiguousarray(a.transpose(0, 2, 1, 3)), np.ascontiguousarray(np.swapaxes(b, -1, -2).transpose(0, 2, 3, 1)))
    want = to_fp16_values(np.matmul(a, np.swapaxes(b, -1, -2), dtype=np.float32) * np.float32(0.5))
    assert ok and np.array_equal(y, np.ascontiguousarray(want.transpose(0, 2, 1, 3)))
    big = np.full((1, 2, 64), 64.0, np.float32)
    y, ok = BatchMatMul().apply(big, np.full((1, 64, 2), 64.0, np.float32))
    assert not ok and np.isinf(y).all()                 # 262144 overflows fp16: flagged, not hidden


def test_compile_counts_batch_matmul_macs():
    m = _qk_model([1, 4, 16, 8], [1, 4, 16, 8], [0, 1, 3, 2])
    res = onnx_mrvl.convert(m)
    meta, _ = build_program(res.subgraphs[0].nodes_json, res.subgraphs[0].consts_json)
    layer = next(x for x in meta["layers"] if x["layer_name"] == "BatchMatMul")
    assert layer["macs"] == 1 * 4 * 16 * 16 * 8        # B*H*T*T*d
    assert layer["params"]["transpose_b"] == 1
    node = next(n for n in res.subgraphs[0].nodes_json["nodes"] if n.get("op") != "input")
    assert node["attrs"]["layer_name"] == ["BatchMatMul"]
    assert node["attrs"]["composite_name"] == ["mrvl.batch_matmul"]


@pytest.mark.parametrize("mask", ["min", "where"])
def test_masks_beyond_fp16_become_sum2d(mask, tmp_path):
    """float32's lowest / -inf fills: a Sum2D of 0 / -32768 before the Softmax; every row keeps at
    least one key (causal), so the probabilities match onnxruntime's."""
    m = A.mha_block("legacy", mask)
    r = fuse(legalize(m))
    node = "attn.add_mask" if mask == "min" else "attn.where"
    d = r.decisions[node]
    assert d.placement == "accelerator" and d.mrvl_node and "Sum2D" in d.reason
    op = next(n for n in r.model.graph.node if n.name == d.mrvl_node)
    c = onnx.numpy_helper.to_array(next(t for t in r.model.graph.initializer if t.name == op.input[1]))
    assert set(np.unique(c).tolist()) == {-32768.0, 0.0}
    _deployed(m, tmp_path, A.feeds(m))


def test_runtime_mask_of_float32_lowest(tmp_path):
    """An input mask holding -3.4e38 becomes -inf in fp16: the masked keys get weight 0 after the
    Softmax, as in onnxruntime."""
    m = A.mha_block("legacy", "input")
    f = A.feeds(m)
    f["mask"] = np.where(f["mask"] < 0, np.finfo(np.float32).min, 0).astype(np.float32)
    _deployed(m, tmp_path, f)


def test_mask_rejections():
    m = A.mha_block("legacy", "min", "Sigmoid")         # no Softmax: -32768 is not float32's lowest
    r = fuse(legalize(m))
    assert r.decisions["attn.add_mask"].placement == "cpu"
    assert "fp16" in r.decisions["attn.add_mask"].reason
    m = A.mha_block("legacy", "where")
    cond = next(i for i in m.graph.initializer if i.name == "attn.causal")
    m.graph.initializer.remove(cond)
    m.graph.input.append(helper.make_tensor_value_info("attn.causal", TensorProto.BOOL, [1, 1, 16, 16]))
    r = fuse(legalize(m))
    assert "condition computed at run time" in r.decisions["attn.where"].reason


@pytest.mark.parametrize("style", ["legacy", "bmm3d"])
def test_hf_runtime_mask_fill_saturates(style, tmp_path, caplog):
    """HF's ``(1 - Cast(attention_mask)) * lowest``: the Mul by lowest is a Mul2D of -32768 (the
    factor is integer-valued: a Cast of int64 through m * -1 + 1), ``1 - m`` joins it in the region;
    the fused model matches onnxruntime to fp32 precision, the deployed one within the fp16 bound,
    and the simulator sees no fp16 overflow (before: -3.4e38 from the CPU, -inf at the region input)."""
    m = A.mha_block(style, "hf")
    f = A.feeds(m)
    r = fuse(legalize(m))
    d = r.decisions["attn.mask.mul"]
    assert d.placement == "accelerator", d.reason
    op = next(n for n in r.model.graph.node if n.name == d.mrvl_node)
    assert op.op_type == "Mul2D"
    c = onnx.numpy_helper.to_array(next(t for t in r.model.graph.initializer if t.name == op.input[1]))
    assert np.unique(c).tolist() == [-32768.0]
    for a, b in zip(_ref(m, f), _ref(r.model, f)):
        assert np.max(np.abs(a - b)) <= 1e-5 * np.max(np.abs(a))
    with caplog.at_level("WARNING"):
        res, _ = _deployed(m, tmp_path, f)
    assert _cpu_ops(res) == ["Cast", "Reshape"] and _regions(res) == 1
    assert not [x for x in caplog.messages if "overflow" in x]


def _hf_mask_variant(kind):
    """mha_block(legacy, hf) with the mask chain changed: ``float_input`` (the mask a float graph
    input: values not known to be integers), ``other_reader`` (the float mask also a graph output)."""
    m = A.mha_block("legacy", "hf")
    if kind == "float_input":
        cast = next(n for n in m.graph.node if n.name == "attn.mask.cast")
        m.graph.node.remove(cast)
        m.graph.input.append(helper.make_tensor_value_info(cast.output[0], TensorProto.FLOAT, [1, 1, 1, 16]))
    else:
        mul = next(n for n in m.graph.node if n.name == "attn.mask.mul")
        m.graph.output.append(helper.make_tensor_value_info(mul.output[0], TensorProto.FLOAT, [1, 1, 1, 16]))
    return m


@pytest.mark.parametrize("kind, why", [("float_input", "not known to hold integers"),
                                       ("other_reader", "graph output")])
def test_hf_runtime_mask_rejections(kind, why):
    """The fill is saturated only when the factor holds integers and the product reaches nothing but
    mask Adds before a Softmax: otherwise the Mul by lowest stays on the CPU, with the reason."""
    r = fuse(legalize(_hf_mask_variant(kind)))
    d = r.decisions["attn.mask.mul"]
    assert d.placement == "cpu" and why in d.reason, d.reason


def test_hf_runtime_mask_with_scores_of_unknown_shape_stays_on_the_cpu():
    """A mask Add whose result's shape legalize could not measure (its onnxruntime shape probe failed):
    the Mul by lowest stays on the CPU with the reason (before: a TypeError out of fuse)."""
    legal = legalize(A.mha_block("legacy", "hf")).model
    mul = next(n for n in legal.graph.node if n.name == "attn.mask.mul")
    adds = {n.output[0] for n in legal.graph.node if n.op_type == "Add" and mul.output[0] in n.input}
    assert adds
    kept = [vi for vi in legal.graph.value_info if vi.name not in adds]
    del legal.graph.value_info[:]
    legal.graph.value_info.extend(kept)
    d = fuse(legal).decisions["attn.mask.mul"]
    assert d.placement == "cpu" and "shape is not known" in d.reason, d.reason


def test_token_reshapes_move_no_image_batch():
    """[1,T,D] <-> [T,D] and [T,H,d] reshapes are accelerator copies; a reshape merging a batch
    of 2 images stays on the CPU."""
    m = A.mha_block("bmm3d", "none", "none")
    r = fuse(legalize(m))
    for name in ("attn.q.reshape", "attn.out.reshape", "attn.out.reshape3"):
        assert r.decisions[name].placement == "accelerator", r.decisions[name]


def test_compile_checks_and_perf_model():
    """A Nodes-JSON BatchMatMul whose operands do not fit is a CompileError naming the layer; the
    performance model counts B*H*T*T*d MACs (also when it derives them from the shapes)."""
    import copy
    from onnx_mrvl.errors import CompileError
    from onnx_mrvl.costmodel import perf_report

    m = _qk_model([1, 4, 16, 8], [1, 4, 16, 8], [0, 1, 3, 2])
    sg = onnx_mrvl.convert(m).subgraphs[0]
    bad = copy.deepcopy(sg.nodes_json)
    node = next(n for n in bad["nodes"] if n.get("attrs", {}).get("layer_name") == ["BatchMatMul"])
    node["attrs"]["transpose_b"] = ["0"]
    with pytest.raises(CompileError, match="inner dimension"):
        build_program(bad, sg.consts_json)
    meta, _ = build_program(sg.nodes_json, sg.consts_json)
    assert perf_report(meta).macs == 4 * 16 * 16 * 8
    for layer in meta["layers"]:
        layer.pop("macs")
    report = perf_report(meta)
    assert report.macs == 4 * 16 * 16 * 8 and report.derived


@pytest.mark.parametrize("style", ["legacy", "fused_qkv", "bmm3d"])
def test_opset_11_exports(style, tmp_path):
    """Opset 11 (Split with a ``split`` attribute, Softmax flattening from ``axis``): the same
    structure and numbers."""
    m = A.mha_block(style, "const", opset=11)
    res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == [] and _regions(res) == 1 and _layout_changes(res) == []


def test_fully_masked_rows_stay_finite(tmp_path):
    """The documented difference: a query row whose every key is masked. onnxruntime gives equal
    weights (Add of float32's lowest); the accelerator's clamped fill (-32768) keeps the scores
    finite, so the row's weights are finite (not equal): no NaN, no inf in the output."""
    m = A.mha_block("legacy", "min", T=16)
    mask = next(i for i in m.graph.initializer if i.name == "attn.mask")
    arr = onnx.numpy_helper.to_array(mask).copy()
    arr[..., :4, :] = np.finfo(np.float32).min            # the first 4 queries see no key
    mask.CopyFrom(onnx.numpy_helper.from_array(arr, "attn.mask"))
    f = A.feeds(m)
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)[0]
    ref = _ref(m, f)[0]
    assert np.all(np.isfinite(got))
    rows = np.max(np.abs(got[:, 4:] - ref[:, 4:]))       # the rows with a kept key match
    assert rows <= 1e-2 * np.max(np.abs(ref))


def test_nd_split_on_permuted_storage(tmp_path):
    """Conv -> Reshape [1, C, H*W] (stored [1, H*W, C]) -> Split on the H*W axis: Slice2D on the 4-D
    view of the stored data, the parts keep the storage; numbers against onnxruntime."""
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W"),
             nh.from_array(np.array([1, 8, 16], np.int64), "shp"), nh.from_array(np.array([6, 10], np.int64), "sp")]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Reshape", ["c", "shp"], ["r"], name="reshape"),
             helper.make_node("Split", ["r", "sp"], ["a", "b"], axis=2, name="split"),
             helper.make_node("Sigmoid", ["a"], ["ya"], name="sig"),
             helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1], name="tr"),
             helper.make_node("Relu", ["bt"], ["yb"], name="relu")]
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("ya", F, None), helper.make_tensor_value_info("yb", F, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    m = onnx.shape_inference.infer_shapes(m)
    r = fuse(legalize(m))
    assert r.decisions["split"].placement == "accelerator"
    assert [n.op_type for n in r.model.graph.node].count("Slice2D") == 2
    _deployed(m, tmp_path, {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)})



def _overflow_logs(caplog):
    return [r.getMessage() for r in caplog.records if "overflow" in r.getMessage()]


@pytest.mark.parametrize("style", ["legacy", "dynamo", "bmm3d"])
@pytest.mark.parametrize("mask", ["bool_inf", "bool_min"])
def test_safe_softmax_stays_in_the_region(style, mask, tmp_path, caplog):
    """torch's _safe_softmax as exported (Softmax -> IsNaN -> Where(isnan, 0, y)) and a boolean mask
    turned into Where(m, 0, -inf | lowest) on the CPU: one region (before: the IsNaN / Where cut the
    block after its Softmax, 7 regions for a 6-layer MiniLM); the guard is the Mrvl Softmax's
    nan_fill. A lowest fill is written as MASK_FILL by the CPU (no fp16 overflow at the region's
    input every run); -inf stays (fp16 holds it)."""
    m = A.mha_block(style, mask, "safe")
    with caplog.at_level("WARNING"):
        res, _ = _deployed(m, tmp_path, A.feeds(m))
    assert _cpu_ops(res) == sorted(_mask_cpu_ops(mask)) and _regions(res) == 1
    assert _overflow_logs(caplog) == []
    decided = {d.node: d for d in res.report.decisions.values()}
    for name in ("attn.softmax.isnan", "attn.softmax.where"):
        assert decided[name].placement == "accelerator" and "absorbed into Softmax" in decided[name].reason
    where = decided["attn.mask.where"]
    assert where.placement == "cpu" and (("becomes -32768" in where.reason) == (mask == "bool_min"))
    sm = [n for sg in res.subgraphs for n in sg.nodes_json["nodes"]
          if n.get("op") == "tvm_op" and n["attrs"]["layer_name"][0] == "Softmax"]
    assert len(sm) == 1 and float(sm[0]["attrs"]["nan_fill"][0]) == 0.0


@pytest.mark.parametrize("style", ["legacy", "dynamo"])
def test_safe_softmax_fully_masked_rows(style, tmp_path):
    """Every key masked with -inf: onnxruntime's Softmax gives NaN and the guard 0; the Mrvl
    Softmax's nan_fill gives the same 0 (the attention output is then the out_proj bias), finite,
    within the fp16 bound; the fused model's reference body is fp32-exact."""
    m = A.mha_block(style, "bool_inf", "safe")
    f = A.feeds(m)
    f["attention_mask"][...] = 0
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, f)[0]
    ref = _ref(m, f)[0]
    assert np.all(np.isfinite(ref)) and np.all(np.isfinite(got))
    assert np.max(np.abs(got - ref)) <= 1e-2 * np.max(np.abs(ref))
    fused = fuse(legalize(m)).model
    assert np.array_equal(_ref(fused, f)[0], ref)


def test_softmax_nan_fill_kernel():
    """sim: NaN results (a row of -inf, a row holding NaN) become the fill; other rows unchanged."""
    from onnx_mrvl.sim.norm_ops import softmax
    x = np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf], [np.nan, 0.0, 1.0]], np.float32)
    plain, _ = softmax(x.copy(), -1)
    y, ok = softmax(x.copy(), -1, nan_fill=0.0)
    assert ok and np.array_equal(y[0], plain[0]) and np.all(y[1:] == 0) and np.isnan(plain[1:]).all()


def test_packed_projection_of_a_one_image_model(tmp_path):
    """nn.MultiheadAttention's packed in-projection under the dynamo exporter (sequence first inside):
    [T, 1, 3E] -> Reshape [T, 1, 3, E] -> Unsqueeze(0) -> Transpose -> Squeeze -> Gather q / k / v. Its
    4-D / 5-D tensors lead with T, not with images: the model holds one image (inputs of batch 1), so
    the reshapes changing the leading axis stay in the region (before: 'moves data across the batch
    axis of T images', a cut per attention layer)."""
    T, E = 8, 16
    rng = np.random.default_rng(3)
    inits = [onnx.numpy_helper.from_array((rng.standard_normal((E, 3 * E)) * 0.3).astype(np.float32), "w_in"),
             onnx.numpy_helper.from_array((rng.standard_normal((E, E)) * 0.3).astype(np.float32), "w_out"),
             onnx.numpy_helper.from_array(np.array([T, 1, 3, E], np.int64), "s4"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             onnx.numpy_helper.from_array(np.array([3], np.int64), "ax3"),
             onnx.numpy_helper.from_array(np.array(1, np.int64), "i1")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("MatMul", ["xt", "w_in"], ["p"]),
             helper.make_node("Reshape", ["p", "s4"], ["p4"]),
             helper.make_node("Unsqueeze", ["p4", "ax0"], ["p5"]),
             helper.make_node("Transpose", ["p5"], ["pt"], perm=[3, 1, 2, 0, 4]),
             helper.make_node("Squeeze", ["pt", "ax3"], ["qkv"]),
             helper.make_node("Gather", ["qkv", "i1"], ["k"], axis=0),
             helper.make_node("MatMul", ["k", "w_out"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "packed", [helper.make_tensor_value_info("x", F, [1, T, E])],
                                            [helper.make_tensor_value_info("y", F, [T, 1, E])], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    f = {"x": rng.standard_normal((1, T, E)).astype(np.float32)}
    res, _ = _deployed(m, tmp_path, f)
    assert _cpu_ops(res) == [] and _regions(res) == 1
    from onnx_mrvl.fuse.groups import image_batch_moved
    assert image_batch_moved([T, 1, 3, E], [1, T, 1, 3, E], 1) is None
    assert "batch axis of 8 images" in image_batch_moved([T, 1, 3, E], [1, T, 1, 3, E], 8)


def test_sequence_first_fc_converges(tmp_path, caplog):
    """x [1, T, D] -> Transpose(1, 0, 2) -> MatMul: matmul_to_gemm's [T, 1, D] FC form is not undone
    by tensordot_to_matmul (they alternated for 10 sweeps), and the folded Transpose + flatten to
    rows is a Reshape of the [1, T, D] it reads (it was written as a Flatten, which the compile step
    took as [1, T*D]: CompileError)."""
    from onnx_mrvl.legalize import legalize
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((16, 48)).astype(np.float32), "W")
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]), helper.make_node("MatMul", ["xt", "W"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 8, 16])],
                                            [helper.make_tensor_value_info("y", F, [8, 1, 48])], [w]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with caplog.at_level("WARNING"):
        log = legalize(m).log
    assert not [r for r in caplog.records if "still rewriting" in r.getMessage()]
    assert [r for r, _, _ in log].count("matmul_to_gemm") == 1
    res, _ = _deployed(m, tmp_path, {"x": rng.standard_normal((1, 8, 16)).astype(np.float32)})
    assert _cpu_ops(res) == [] and _regions(res) == 1
