"""Idioms of real torchvision / timm exports (tools/survey_vision_exports.py, docs/surveys/vision.md),
built with onnx.helper and seeded weights: what cut regions or crashed. Structure and numbers (fused
model in onnxruntime within 1e-4, convert + simulator within 1e-2 of max|ref|)."""
import numpy as np
import pytest

from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from test_fuse_exports import Net
from test_fuse_torch_idioms import _convert_and_run

BIG = np.iinfo(np.int64).max


def _slice(n, x, starts, ends, axes, steps=None, name=None):
    ins = [x] + [n.const(np.array(v, np.int64)) for v in (starts, ends, axes)]
    if steps is not None:
        ins.append(n.const(np.array(steps, np.int64)))
    return n.op("Slice", ins, name)


def test_dynamo_as_strided_gather_after_the_pool_is_a_reshape(tmp_path):
    """torchvision ConvNeXt through dynamo: AdaptiveAvgPool2d's ``as_strided`` view is ``ReduceMean ->
    Reshape [-1] -> Gather(arange(C) as [1, C, 1, 1])``: the Gather reads the whole axis in order, so
    legalize makes it a Reshape and the head joins the backbone's region (2 regions, Gather on the CPU)."""
    n = Net(21)
    x = n.conv("input", 3, 8, act="relu")
    pooled = n.op("ReduceMean", [x, n.const(np.array([-1, -2], np.int64))], "mean", keepdims=1)
    flat = n.op("Reshape", [pooled, n.const(np.array([-1], np.int64))], "flat")
    view = n.op("Gather", [flat, n.const(np.arange(8, dtype=np.int64).reshape(1, 8, 1, 1))], "as_strided", axis=0)
    y = n.op("Gemm", [n.op("Flatten", [view], "flatten"), n.w(5, 8), n.w(5)], "fc", transB=1)
    # indices that are not the whole axis in order stay a Gather
    perm = n.op("Gather", ["other", n.const(np.array([[1, 0, 2]], np.int64))], "perm_gather", axis=1)
    m = n.model([("input", [1, 3, 12, 12]), ("other", [2, 3, 4])], [y, n.op("Relu", [perm], "perm_relu")],
                opset_version=18)
    lg = legalize(m)
    assert "as_strided" not in [x.name for x in lg.model.graph.node if x.op_type == "Gather"]
    assert [x.name for x in lg.model.graph.node if x.op_type == "Gather"] == ["perm_gather"]
    r, res = _convert_and_run(m, tmp_path)
    for name in ("as_strided", "fc", "mean"):
        assert res.report.decisions[name].placement == "accelerator", res.report.decisions[name]
    assert len(res.subgraphs) == 1


def _swin_stage(n, x, shift, C):
    """[1, H, W, C] tokens: torch.roll by -shift on H and W (Slice + Slice + Concat per axis, as both
    exporters write it), then patch merging x[:, a::2, b::2, :] (one two-axis step-2 Slice each, or
    chained one-axis Slices), cat on C, LayerNorm-free Linear 4C -> 2C."""
    H = 8
    for ax in (1, 2):
        head = _slice(n, x, [shift], [BIG], [ax], name=f"roll_head{ax}")
        tail = _slice(n, x, [0], [shift], [ax], name=f"roll_tail{ax}")
        x = n.op("Concat", [head, tail], f"roll_cat{ax}", axis=ax)
    parts = [_slice(n, x, [0, 0], [H, H], [1, 2], [2, 2], "merge00"),          # TorchScript: one Slice, two axes
             _slice(n, _slice(n, x, [1], [BIG], [1], [2], "merge1_rows"), [0], [BIG], [2], [2], "merge10"),
             _slice(n, x, [0, 1], [BIG, BIG], [-3, -2], [2, 2], "merge01"),
             _slice(n, x, [1, 1], [H, H], [1, 2], [2, 2], "merge11")]
    x = n.op("Concat", parts, "merge_cat", axis=-1)                             # [1, 4, 4, 4C]
    return n.op("MatMul", [x, n.w(4 * C, 2 * C)], "reduction")


def test_swin_roll_and_patch_merging_slices_run_on_the_accelerator(tmp_path):
    """torchvision Swin / timm Swin-style [B, H, W, C] tokens: the roll's spatial Slices and the patch
    merging's step-2 Slices on H and W were CPU ops (dynamo export: 15 regions). They become Slice2D
    layers of views of the stored data (a step: one phase of [.., X/2, 2, ..]): one region, exact."""
    n = Net(22)
    C = 6
    x = n.conv("input", 3, C, act="relu")                                       # [1, C, 8, 8]
    tokens = n.op("Transpose", [x], "to_tokens", perm=[0, 2, 3, 1])             # [1, 8, 8, C]
    y = _swin_stage(n, tokens, 3, C)
    out = n.op("Relu", [n.op("Transpose", [y], "to_image", perm=[0, 3, 1, 2])], "post")
    out = n.op("Conv", [out, n.w(4, 2 * C, 1, 1)], "head", kernel_shape=[1, 1])
    m = n.model([("input", [1, 3, 8, 8])], [out])
    r, res = _convert_and_run(m, tmp_path)
    names = ["roll_head1", "roll_tail1", "roll_head2", "roll_tail2", "merge00", "merge1_rows", "merge10",
             "merge01", "merge11"]
    for name in names:
        d = r.decisions[name]                 # a Slice2D of a view, or a crop's one-hot conv
        assert d.placement == "accelerator", d
    assert [r.decisions[k].composite for k in ("merge00", "merge01", "roll_tail1")] == ["mrvl.slice"] * 3
    assert not r.decisions.by_placement("cpu")
    assert res.report.offload_fraction == 1.0 and len(res.subgraphs) == 1


@pytest.mark.parametrize("starts,ends,steps", [
    ([1], [BIG], [3]),             # 8 is no multiple of 3
    ([3], [BIG], [2]),             # starts beyond the step
    ([0], [5], [2]),               # stops before the end
])
def test_strided_slices_that_are_no_phase_of_a_view_are_split(starts, ends, steps, tmp_path):
    """No phase of a view (they stayed on the CPU with that reason): legalize's strided_slice_split
    writes a step-1 run, every k-th row of it (a phase) and the last row alone + Concat."""
    n = Net(23)
    x = n.op("Transpose", [n.conv("input", 3, 4, act="relu")], "tok", perm=[0, 2, 3, 1])
    s = _slice(n, x, starts, ends, [1], steps, "node")
    m = n.model([("input", [1, 3, 8, 8])], [n.op("MatMul", [s, n.w(4, 4)], "fc")])
    r, res = _convert_and_run(m, tmp_path)
    assert not r.decisions.by_placement("cpu") and len(res.subgraphs) == 1


def test_a_reversed_axis_slice_is_a_gather_on_the_accelerator(tmp_path):
    """A step -1 slice of the token axis (no phase of a view: it slices backwards) was kept on the CPU
    ("slices forward"); legalize's slice_reverse_gather (session 13) makes it an exact GatherElements:
    one region, nothing on the CPU, the numbers of onnxruntime's run."""
    n = Net(23)
    x = n.op("Transpose", [n.conv("input", 3, 4, act="relu")], "tok", perm=[0, 2, 3, 1])
    s = _slice(n, x, [7], [0], [1], [-1], "node")
    m = n.model([("input", [1, 3, 8, 8])], [n.op("MatMul", [s, n.w(4, 4)], "fc")])
    r, res = _convert_and_run(m, tmp_path)
    assert not r.decisions.by_placement("cpu") and len(res.subgraphs) == 1
    assert not any(nd.op_type == "Slice" for nd in legalize(m).model.graph.node)


def test_shape_computed_pads_of_many_blocks_all_fold(caplog):
    """TorchScript Swin: each block pads its tokens to a multiple of the window with pads computed from
    ``Shape -> Gather -> Mod -> Sub -> Mod``; the next block's Shape is static only once the pads before
    it folded and shape inference ran again: one sweep per block. 12 blocks (more than MAX_SWEEPS) fold
    completely (swin_t TorchScript: 12 regions with 135 Shape / 70 Expand / 42 Where ... on the CPU)."""
    from onnx_mrvl import legalize as legalize_mod
    from onnx_mrvl.legalize.testing import legalize_and_compare
    n = Net(24)
    x = n.conv("input", 3, 4, act="relu")
    seven = n.const(np.array(7, np.int64))
    for b in range(12):
        h = n.op("Gather", [n.op("Shape", [x], f"shape{b}"), n.const(np.array(2, np.int64))], f"h{b}", axis=0)
        p = n.op("Mod", [n.op("Sub", [seven, n.op("Mod", [h, seven], f"m{b}")], f"s{b}"), seven], f"pad_r{b}")
        pads = n.op("Concat", [n.const(np.zeros(6, np.int64)), n.op("Unsqueeze", [p, n.const(np.array([0]))], f"u{b}"),
                               n.const(np.zeros(1, np.int64))], f"pads{b}", axis=0)
        x = n.op("Relu", [n.op("Pad", [x, pads], f"pad{b}")], f"act{b}")
    m = n.model([("input", [1, 3, 8, 8])], [x])
    out, _ = legalize_and_compare(m)
    assert not [x for x in out.graph.node if x.op_type in ("Shape", "Pad", "Mod", "Gather")]
    assert legalize_mod.legalize(m).report.sweeps > legalize_mod.MAX_SWEEPS
    assert not [r for r in caplog.records if "still rewriting" in r.getMessage()]


@pytest.mark.parametrize("eq,sa,sb", [
    ("B G H I D, B G H J D -> B G H I J", [1, 4, 2, 6, 8], [1, 4, 2, 5, 8]),     # MaxViT's scores (dynamo)
    ("B G H I J, B G H J D -> B G H I D", [1, 4, 2, 6, 5], [1, 4, 2, 5, 8]),     # its attention x values
    ("bhid,bhjd->bhji", [1, 2, 6, 8], [1, 2, 5, 8]),                              # output transposed
    ("bld,dk->blk", [1, 6, 8], [8, 5]),                                          # no batch letter
    ("ij,jk->ik", [6, 8], [8, 5]),                                                # a plain product
    ("bhxyd,bhdz->bhxyz", [1, 2, 3, 4, 8], [1, 2, 8, 5]),                        # two free letters merged
])
def test_einsum_matrix_products_become_matmuls(eq, sa, sb):
    """torchvision MaxViT through dynamo: its attention's Einsums (and the Splits / Softmax / Mul around
    them) were on the CPU, 23 regions. legalize writes each two-operand matrix-product Einsum as
    Transpose / Reshape + MatMul (+ Reshape / Transpose back), exact against onnxruntime's Einsum."""
    from onnx_mrvl.legalize.testing import legalize_and_compare
    n = Net(25)
    a = n.op("Relu", ["a"], "pre_a")
    weight = eq == "bld,dk->blk"                                                  # a constant operand
    b = n.w(*sb) if weight else n.op("Relu", ["b"], "pre_b")
    y = n.op("Einsum", [a, b], "einsum", equation=eq)
    inputs = [("a", sa)] + ([] if weight else [("b", sb)])
    m = n.model(inputs, [n.op("Relu", [y], "post")], opset_version=13)
    out, log = legalize_and_compare(m)
    assert "Einsum" not in [x.op_type for x in out.graph.node]
    assert [x.op_type for x in out.graph.node].count("MatMul") + \
        [x.op_type for x in out.graph.node].count("Gemm") == 1


@pytest.mark.parametrize("eq,sa,sb,why", [
    ("bij,bjk->bk", [1, 3, 4], [1, 4, 5], "summed over one operand"),
    ("ii,ij->ij", [4, 4], [4, 5], "diagonal"),
    ("...ij,...jk->...ik", [1, 3, 4], [1, 4, 5], "ellipsis"),
    ("ij,jk", [3, 4], [4, 5], "no explicit output"),
])
def test_einsum_forms_left_with_their_reason(eq, sa, sb, why):
    n = Net(26)
    y = n.op("Einsum", ["a", "b"], "einsum", equation=eq)
    m = n.model([("a", sa), ("b", sb)], [y], opset_version=13)
    r = legalize(m)
    assert [x.op_type for x in r.model.graph.node] == ["Einsum"]
    assert any(rule == "einsum_to_matmul" and why in reason for rule, _, reason in r.report.skipped)


def test_maxvit_style_attention_block_is_one_region(tmp_path):
    """Conv stem -> tokens [1, G, T, C] -> qkv Linear -> Split -> heads [1, G, H, T, D] -> Einsum scores ->
    Softmax -> Einsum with v -> merge heads -> Linear: one region (dynamo MaxViT: 23)."""
    n = Net(27)
    C, H, D, G, T = 8, 2, 4, 4, 4
    x = n.conv("input", 3, C, act="relu")                                        # [1, 8, 4, 4]
    tok = n.op("Reshape", [n.op("Transpose", [x], "to_tok", perm=[0, 2, 3, 1]),
                           n.const(np.array([1, G, T, C], np.int64))], "windows")   # 4 windows of 4 tokens
    qkv = n.op("Add", [n.op("MatMul", [tok, n.w(C, 3 * C)], "qkv"), n.w(3 * C, scale=0.1)], "qkv_bias")
    q, k, v = n.op("Split", [qkv], "split_qkv", n_out=3, axis=3)
    heads = [n.op("Transpose", [n.op("Reshape", [t, n.const(np.array([1, G, T, H, D], np.int64))], f"h{i}")],
                  f"ht{i}", perm=[0, 1, 3, 2, 4]) for i, t in enumerate((q, k, v))]
    qs = n.op("Mul", [heads[0], n.const(np.float32(D ** -0.5))], "scale")
    s = n.op("Einsum", [qs, heads[1]], "scores", equation="B G H I D, B G H J D -> B G H I J")
    p = n.op("Softmax", [s], "softmax", axis=-1)
    o = n.op("Einsum", [p, heads[2]], "attn_v", equation="B G H I J, B G H J D -> B G H I D")
    o = n.op("Reshape", [n.op("Transpose", [o], "merge_t", perm=[0, 1, 3, 2, 4]),
                         n.const(np.array([1, G, T, C], np.int64))], "merge")
    y = n.op("MatMul", [o, n.w(C, C)], "proj")
    m = n.model([("input", [1, 3, 4, 4])], [y], opset_version=13)
    r, res = _convert_and_run(m, tmp_path)
    for name in ("scores", "attn_v", "softmax", "split_qkv"):
        assert res.report.decisions[name].placement == "accelerator", res.report.decisions[name]
    assert len(res.subgraphs) == 1


def test_pool_minus_input_token_mixer_is_one_region(tmp_path):
    """EfficientFormer / PoolFormer: ``x + pool(x) - x`` (AveragePool 3x3, count_include_pad=0) between
    convs: the Sub of two activations had no accelerator op (efficientformer_l1: 16 regions). It becomes
    Add(x, Mul(y, -1)), exact; a normalization's centering and a constant operand keep their forms."""
    n = Net(28)
    x = n.conv("input", 3, 8, act="relu")
    pool = n.op("AveragePool", [x], "pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                count_include_pad=0)
    mixed = n.op("Sub", [pool, x], "token_mixer")
    y = n.op("Add", [x, mixed], "residual")
    y = n.conv(y, 8, 4, act="relu")
    centred = n.op("Sub", ["z", n.op("ReduceMean", ["z"], "mean", axes=[1], keepdims=1)], "centre")
    m = n.model([("input", [1, 3, 8, 8]), ("z", [1, 6, 4])], [y, n.op("Relu", [centred], "centre_relu")])
    lg = legalize(m)
    assert "token_mixer" in [x.name for x in lg.model.graph.node if x.op_type == "Add"]
    assert [x.name for x in lg.model.graph.node if x.op_type == "Sub"] == ["centre"]
    r, res = _convert_and_run(m, tmp_path)
    for name in ("pool", "token_mixer", "residual"):
        assert res.report.decisions[name].placement == "accelerator", res.report.decisions[name]
    assert len([s for s in res.subgraphs]) == 1


def test_qkv_unbind_on_the_leading_axis_runs_as_slice2d(tmp_path):
    """timm Attention (MobileViT, ViT): ``qkv.reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4).unbind(0)``:
    Slices of the leading axis of [3, B, H, N, d]; with one image in the model that axis is no batch,
    so they run as Slice2D of views (mobilevit_xxs dynamo: 27 CPU Slices, 10 regions)."""
    n = Net(29)
    C, H, d, N = 8, 2, 4, 16
    x = n.conv("input", 3, C, act="relu")                                        # [1, 8, 4, 4]
    tok = n.op("Reshape", [n.op("Transpose", [x], "to_tok", perm=[0, 2, 3, 1]),
                           n.const(np.array([1, N, C], np.int64))], "tokens")
    qkv = n.op("MatMul", [tok, n.w(C, 3 * C)], "qkv")
    qkv = n.op("Transpose", [n.op("Reshape", [qkv, n.const(np.array([1, N, 3, H, d], np.int64))], "qkv_r")],
               "qkv_t", perm=[2, 0, 3, 1, 4])                                   # [3, 1, H, N, d]
    q, k, v = [n.op("Reshape", [_slice(n, qkv, [i], [i + 1], [0], name=f"unbind{i}"),
                                n.const(np.array([1, H, N, d], np.int64))], f"sq{i}") for i in range(3)]
    s = n.op("MatMul", [q, n.op("Transpose", [k], "kt", perm=[0, 1, 3, 2])], "scores")
    o = n.op("MatMul", [n.op("Softmax", [s], "softmax", axis=-1), v], "attn_v")
    y = n.op("MatMul", [n.op("Reshape", [n.op("Transpose", [o], "merge_t", perm=[0, 2, 1, 3]),
                                         n.const(np.array([1, N, C], np.int64))], "merge"), n.w(C, C)], "proj")
    m = n.model([("input", [1, 3, 4, 4])], [y])
    r, res = _convert_and_run(m, tmp_path)
    for name in ("unbind0", "unbind1", "unbind2", "softmax"):
        assert res.report.decisions[name].placement == "accelerator", res.report.decisions[name]
    assert len(res.subgraphs) == 1
    # two images in the model: the leading axis is a batch, the slice stays with its reason
    n2 = Net(30)
    t = n2.op("Relu", ["input"], "pre")
    s2 = _slice(n2, t, [1], [2], [0], name="node")
    m2 = n2.model([("input", [2, 3, 4, 4])], [n2.op("Relu", [s2], "post")])
    d = fuse(legalize(m2)).decisions["node"]
    assert d.placement == "cpu" and "leading axis" in d.reason, d


def test_token_mean_head_joins_the_region(tmp_path):
    """timm EfficientFormer / LeViT heads: ``x.mean(1)`` over the tokens of [B, N, C], then the
    classifier. The ReduceMean over axis 1 stayed on the CPU and cut the head into a second region; it
    becomes Transpose -> average pools over N = 16 (4 x 4) -> Reshape."""
    n = Net(32)
    x = n.conv("input", 3, 8, act="relu")                                        # [1, 8, 4, 4]
    tok = n.op("Reshape", [n.op("Transpose", [x], "to_tok", perm=[0, 2, 3, 1]),
                           n.const(np.array([1, 16, 8], np.int64))], "tokens")
    tok = n.op("Add", [n.op("MatMul", [tok, n.w(8, 8)], "mlp"), n.w(8, scale=0.1)], "mlp_bias")
    mean = n.op("ReduceMean", [tok], "token_mean", axes=[1], keepdims=0)         # [1, 8]
    y = n.op("Gemm", [mean, n.w(5, 8), n.w(5)], "head", transB=1)
    m = n.model([("input", [1, 3, 4, 4])], [y])
    r, res = _convert_and_run(m, tmp_path)
    assert res.report.decisions["token_mean"].placement == "accelerator", res.report.decisions["token_mean"]
    assert len(res.subgraphs) == 1


@pytest.mark.parametrize("radix,opset", [(2, 13), (4, 11)])
def test_split_attention_radix_sum_is_split_and_adds(tmp_path, radix, opset):
    """timm ResNeSt: ``x.view(B, radix, C, H, W).sum(1)`` sums the radix branches; the ReduceSum had no
    accelerator op (resnest14d: 8 CPU ReduceSums, 9 regions). legalize writes it as a Split of that
    axis and Adds; a long axis (a real reduction) keeps its ReduceSum."""
    n = Net(33)
    C = 4
    x = n.conv("input", 3, radix * C, act="relu")                                # [1, radix*C, 6, 6]
    five = n.op("Reshape", [x, n.const(np.array([1, radix, C, 6, 6], np.int64))], "radix_view")
    if opset >= 13:
        s = n.op("ReduceSum", [five, n.const(np.array([1], np.int64))], "radix_sum", keepdims=0)
    else:
        s = n.op("ReduceSum", [five], "radix_sum", axes=[1], keepdims=0)
    y = n.conv(s, C, 4, act="relu")
    m = n.model([("input", [1, 3, 6, 6])], [y], opset_version=opset)
    r, res = _convert_and_run(m, tmp_path)
    assert res.report.decisions["radix_sum"].placement == "accelerator", res.report.decisions["radix_sum"]
    assert len(res.subgraphs) == 1
    long = Net(34)
    t = long.op("ReduceSum", [long.op("Relu", ["z"], "pre"), long.const(np.array([1], np.int64))], "node", keepdims=0)
    lg = legalize(long.model([("z", [1, 16, 3])], [t]))
    assert "ReduceSum" in [x.op_type for x in lg.model.graph.node]


def test_stacked_maps_sum_is_one_region(tmp_path):
    """segmentation_models_pytorch FPN merge: ``torch.stack(maps).sum(0)`` = Unsqueeze(0) of each map,
    a Concat on the new leading axis, ReduceSum over it. reduce_sum_split made the sum a Split + Adds,
    which left the Concat on the batch axis on the CPU between two regions (smp FPN: 2 regions);
    ``split_of_concat`` reads the parts directly: no Concat, no Split, one region."""
    n = Net(35)
    x = n.conv("input", 3, 8, act="relu")                                        # [1, 8, 6, 6]
    maps = [n.conv(x, 8, 8, act="relu") for _ in range(4)]
    st = n.op("Concat", [n.op("Unsqueeze", [m, n.const(np.array([0], np.int64))], f"unsq{i}")
                         for i, m in enumerate(maps)], "stack", axis=0)          # [4, 1, 8, 6, 6]
    s = n.op("ReduceSum", [st, n.const(np.array([0], np.int64))], "merge", keepdims=0)
    y = n.conv(s, 8, 4)
    m = n.model([("input", [1, 3, 6, 6])], [y], opset_version=13)
    r, res = _convert_and_run(m, tmp_path)
    ops = [x.op_type for x in legalize(m).model.graph.node]
    assert "Concat" not in ops and "Split" not in ops, ops
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes(), res.report.cpu_nodes()


def test_split_of_concat_on_other_pieces_is_kept():
    """A Split whose pieces are not the Concat's parts (other sizes) keeps both (exact either way)."""
    from onnx_mrvl.legalize.testing import compare
    n = Net(36)
    c = n.op("Concat", [n.op("Relu", ["a"], "ra"), n.op("Relu", ["b"], "rb")], "cat", axis=1)   # [1, 6, 4]
    s1, s2 = n.op("Split", [c, n.const(np.array([3, 3], np.int64))], "split", n_out=2, axis=1)
    m = n.model([("a", [1, 2, 4]), ("b", [1, 4, 4])], [s1, s2], opset_version=13)
    out = legalize(m).model
    assert compare(m, out) <= 1e-6
    assert "Concat" in [x.op_type for x in out.graph.node]
