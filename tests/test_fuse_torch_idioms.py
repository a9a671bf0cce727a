"""PyTorch-export idioms seen on OCR / audio / detection models (CRNN, conformer/wav2vec2
attention, YOLOv5 Focus, DS-CNN), built with onnx.helper: what used to stay on the CPU without a
reason. Each test checks the structure and the numbers (fused model in onnxruntime within 1e-4,
convert + simulator within 1e-2 of max|ref|)."""
import numpy as np
import onnx

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from test_fuse_exports import Net, feeds_for, rel_err, run_ort


def _convert_and_run(m, tmp_path, **kw):
    """legalize + fuse in onnxruntime (1e-4), convert + simulator (1e-2); returns (fuse result, convert result)."""
    r = fuse(legalize(m))
    onnx.checker.check_model(r.model, full_check=True)
    feeds = feeds_for(m)
    ref = run_ort(m, feeds)
    assert rel_err(ref, run_ort(r.model, feeds)) < 1e-4
    res = onnx_mrvl.convert(m, **kw)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)
    for a, b in zip(ref, got):
        assert a.shape == b.shape and float(np.max(np.abs(a - b))) <= 1e-2 * float(np.max(np.abs(a)))
    return r, res


def test_2d_fc_rows_beyond_max_batch_run_on_the_accelerator(tmp_path):
    """CRNN: BiLSTM output [T, B, 2H] -> view(T * B, 2H) -> Linear -> view(T, B, -1): the Gemm's 33 rows
    are time steps, not a batch (the N-D MatMul form already ignores max_batch)."""
    n = Net(11)
    x = n.op("Reshape", ["input", n.const(np.array([33, 32], np.int64))], "view")
    y = n.op("Gemm", [x, n.w(16, 32), n.w(16, scale=0.1)], "emb", transB=1)
    y = n.op("Reshape", [y, n.const(np.array([33, 1, 16], np.int64))], "view_back")
    out = n.op("LogSoftmax", [y], "lsm", axis=2)
    m = n.model([("input", [33, 1, 32])], [out])
    r, res = _convert_and_run(m, tmp_path)
    assert r.decisions["emb"].placement == "accelerator", r.decisions["emb"]
    assert res.report.offload_fraction == 1.0 and len(res.subgraphs) == 1
    # a 2-D FC is still bounded by the row limit
    big = Net(12)
    y = big.op("Gemm", ["input", big.w(4, 8)], "fc", transB=1)
    r = fuse(legalize(big.model([("input", [70000, 8])], [y])))
    assert "70000 rows" in r.decisions["fc"].reason


def _slice(n, x, start, axis, step, name=None):
    big = np.iinfo(np.int64).max
    return n.op("Slice", [x, n.const(np.array([start], np.int64)), n.const(np.array([big], np.int64)),
                          n.const(np.array([axis], np.int64)), n.const(np.array([step], np.int64))], name)


def test_focus_stem_strided_slices_become_one_hot_depthwise_convs(tmp_path):
    """YOLOv5 (<= v5) / YOLOX Focus: cat(x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
    x[..., 1::2, 1::2]) -> Conv, exported as chained step-2 Slices on H then W. The slices become
    depthwise one-hot Conv2D (exact), so the single region starts at the model input."""
    n = Net(13)
    rows = [_slice(n, "input", a, 2, 2, f"rows{a}") for a in (0, 1)]
    parts = [_slice(n, rows[a], b, 3, 2, f"cols{a}{b}") for b in (0, 1) for a in (0, 1)]
    cat = n.op("Concat", parts, "focus_cat", axis=1)
    y = n.conv(cat, 12, 8, act="relu")
    crop = _slice(n, y, 1, 3, 1, "crop")                     # a step-1 start crop read by a conv
    y = n.op("Conv", [crop, n.w(4, 8, 3, 3)], "after_crop", kernel_shape=[3, 3], pads=[1] * 4)
    lone = _slice(n, "input", 1, 2, 2, "lone")               # read by a CPU op only: stays a CPU Slice
    m = n.model([("input", [1, 3, 16, 18])], [y, n.op("Softplus", [lone])])
    r, res = _convert_and_run(m, tmp_path, partition="single")
    for name in ("rows0", "rows1", "cols00", "cols11", "crop"):
        d = r.decisions[name]
        assert d.placement == "accelerator" and d.composite == "mrvl.conv2d_nhwc2nhwc", d
    assert r.decisions["lone"].placement == "cpu"
    node = {x.name: x for x in r.model.graph.node}
    from onnx_mrvl import opset
    a = opset.node_attrs(node[r.decisions["cols11"].mrvl_node])
    assert a["strides"] == [1, 2] and a["kernel_shape"] == [1, 2] and a["group"] == 3
    assert res.report.offload_fraction == 1.0 and len(res.subgraphs) == 1


def test_glu_split_and_slice_on_channels_of_3d_data_run_as_slice2d(tmp_path):
    """Conformer conv module: Conv1d -> F.glu(dim=1) (Split of a 3-D [N, 2C, L] on channels, then
    a * sigmoid(b)) -> depthwise Conv1d; YOLOv8's decode slices [N, 4*16 + nc, anchors] on channels.
    legalize lifts the 3-D Split/Slice to [N, C, 1, L] (as it does 1-D convs): Slice2D layers, one region."""
    n = Net(14)
    x = n.op("Conv", ["input", n.w(8, 4, 3), n.w(8, scale=0.1)], "pw1", kernel_shape=[3], pads=[1, 1])
    a, b = n.op("Split", [x, n.const(np.array([4, 4], np.int64))], "glu_split", n_out=2, axis=1)
    g = n.op("Mul", [a, n.op("Sigmoid", [b], "glu_sigmoid")], "glu_mul")
    y = n.op("Conv", [g, n.w(4, 1, 5)], "dw", kernel_shape=[5], pads=[2, 2], group=4)
    big = np.iinfo(np.int64).max
    cls = n.op("Slice", [y, n.const(np.array([1], np.int64)), n.const(np.array([big], np.int64)),
                         n.const(np.array([-2], np.int64))], "cls_slice")
    out = n.op("Conv", [cls, n.w(2, 3, 1)], "head", kernel_shape=[1])
    m = n.model([("input", [1, 4, 20])], [out])
    r, res = _convert_and_run(m, tmp_path)
    for name in ("glu_split", "cls_slice", "glu_mul"):
        assert r.decisions[name].placement == "accelerator", r.decisions[name]
    assert r.decisions["glu_split"].composite == "mrvl.slice"
    assert not r.decisions.by_placement("cpu") and len(res.subgraphs) == 1


def test_panns_mean_over_mel_then_max_plus_mean_over_time_become_pools(tmp_path):
    """PANNs / Cnn14 head: x.mean(dim=3) over mel bins (4-D, keepdims 0), then max(dim=2) + mean(dim=2)
    over 25 frames (3-D) -> Linear. legalize's reduce_axis_to_pool makes each reduction a chain of
    exact-window pools (25 = 5 x 5), so the head joins the backbone's region; a prime size above the
    pool window limit (17) keeps its ReduceMean."""
    n = Net(15)
    x = n.conv("input", 1, 8, act="relu")                                       # [1, 8, 25, 8]
    x = n.op("ReduceMean", [x], "mel_mean", axes=[3], keepdims=0)              # [1, 8, 25]
    mx = n.op("ReduceMax", [x], "time_max", axes=[2], keepdims=0)
    mn = n.op("ReduceMean", [x], "time_mean", axes=[-1], keepdims=0)
    y = n.op("Gemm", [n.op("Add", [mx, mn], "pool_sum"), n.w(5, 8)], "fc", transB=1)
    odd = n.op("ReduceMean", ["odd"], "odd_mean", axes=[2], keepdims=1)
    # a decomposed LayerNorm over the last axis of [B, T, D] keeps its means out of the pools: it becomes
    # one LayerNormalization (legalize's layernorm_canonical) and a Mrvl LayerNorm, alone in a region
    # without conv/fc here (so on the CPU after split)
    d = n.op("Sub", ["ln", n.op("ReduceMean", ["ln"], "ln_mean", axes=[-1], keepdims=1)])
    v = n.op("ReduceMean", [n.op("Pow", [d, n.const(np.float32(2.0))])], "ln_var", axes=[-1], keepdims=1)
    ln = n.op("Div", [d, n.op("Sqrt", [n.op("Add", [v, n.const(np.float32(1e-5))])])])
    m = n.model([("input", [1, 1, 25, 8]), ("odd", [1, 2, 17, 3]), ("ln", [1, 4, 16])], [y, odd, ln])
    r, res = _convert_and_run(m, tmp_path)
    for name in ("mel_mean", "time_max", "time_mean", "pool_sum", "fc"):
        assert res.report.decisions[name].placement == "accelerator", res.report.decisions[name]
    for name in ("odd_mean", "ln_mean", "ln_var"):
        assert res.report.decisions[name].op_type == "ReduceMean" and res.report.decisions[name].placement == "cpu"
    assert {"MaxPool2D", "AvgPool2D"} <= {x.op_type for x in r.model.graph.node}
    assert [x.op_type for x in r.model.graph.node].count("ReduceMean") == 1
    assert "LayerNorm" in [x.op_type for x in r.model.graph.node]
    assert len(res.subgraphs) == 1
