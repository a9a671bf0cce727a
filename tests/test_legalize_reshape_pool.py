"""Legalization: Reshape family, ReduceMean/GlobalAveragePool, Pad folding, Gemm / MatMul."""
import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.provenance import get_origin
from onnx_mrvl.target import Target

mk = helper.make_node
R = np.random.default_rng(2)


def consts(model):
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def shape_of_reshape(model, node):
    return list(consts(model)[node.input[1]])


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_to_reshape(opset):
    if opset < 13:
        nodes = [mk("Squeeze", ["x"], ["s"], name="sq", axes=[1, 3]),
                 mk("Unsqueeze", ["s"], ["y"], name="usq", axes=[0, -1])]
        inits = {}
    else:
        nodes = [mk("Squeeze", ["x", "a"], ["s"], name="sq"),
                 mk("Unsqueeze", ["s", "b"], ["y"], name="usq")]
        inits = {"a": np.array([1, 3], np.int64), "b": np.array([0, -1], np.int64)}
    m = make_model(nodes, [("x", [2, 1, 5, 1])], ["y"], inits, opset=opset)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Reshape"]
    assert shape_of_reshape(out, out.graph.node[1]) == [1, 2, 5, 1]
    assert [n.name for n in out.graph.node] == ["sq", "usq"]
    assert all(get_origin(n) == [n.name] for n in out.graph.node)


def test_flatten_to_reshape():
    m = make_model([mk("Flatten", ["x"], ["f"], name="flat", axis=2),
                    mk("Relu", ["f"], ["y"], name="relu")], [("x", [2, 3, 4, 5])], ["y"])
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Relu"]
    assert shape_of_reshape(out, out.graph.node[0]) == [6, 20]


@pytest.mark.parametrize("given,allowzero,want", [
    ([0, -1], 0, [2, 60]), ([-1, 0, 4], 0, [10, 3, 4]), ([2, 3, 20], 1, None),
    ([0, 3, -1], 1, "zero")])
def test_reshape_resolves_zero_and_minus_one(given, allowzero, want):
    shape_in = [2, 3, 4, 5] if want != "zero" else [0, 3, 4]
    m = make_model([mk("Reshape", ["x", "s"], ["r"], name="reshape", allowzero=allowzero),
                    mk("Relu", ["r"], ["y"], name="relu")], [("x", shape_in)], ["y"],
                   {"s": np.array(given, np.int64)}, opset=14)
    if want == "zero":  # allowzero=1: the 0 is a literal size
        res = legalize(m)
        out, report = res.model, res.report
        assert op_types(out) == ["Reshape", "Relu"]
        return
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Relu"]
    assert shape_of_reshape(out, out.graph.node[0]) == (want or given)
    assert bool(log) == (want is not None)


def test_reshape_dynamic_shape_input_gets_static_shape():
    m = make_model([mk("Shape", ["x"], ["s"], name="shape"),
                    mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Reshape", ["r", "s"], ["y"], name="reshape")], [("x", [2, 3])], ["y"])
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Relu"]  # folded shape made the Reshape a no-op


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("axes,keep", [([2, 3], 1), ([-1, -2], 0), ([1, 2], 1)])
def test_reducemean_to_gap(opset, axes, keep):
    if opset < 18:
        node, inits = mk("ReduceMean", ["x"], ["y"], name="rm", axes=axes, keepdims=keep), {}
    else:
        node = mk("ReduceMean", ["x", "ax"], ["y"], name="rm", keepdims=keep)
        inits = {"ax": np.array(axes, np.int64)}
    m = make_model([node], [("x", [2, 3, 5, 6])], ["y"], inits, opset=opset)
    out, log = legalize_and_compare(m)
    if sorted(a % 4 for a in axes) != [2, 3]:
        assert op_types(out) == ["ReduceMean"]
    else:
        assert op_types(out) == ["GlobalAveragePool"] + ([] if keep else ["Reshape"])


@pytest.mark.parametrize("hw,kernel,want", [((56, 56), 16, 0), ((64, 48), 4, 1), ((17, 17), 4, 0)])
def test_gap_split(hw, kernel, want):
    """A map one GlobalAvgPool2D takes (<= kernel**2 per side) stays whole; a larger one gets window
    stages, then one global pool (tests/test_gap_accuracy.py: the numbers)."""
    m = make_model([mk("GlobalAveragePool", ["x"], ["y"], name="gap")], [("x", [1, 4] + list(hw))],
                   ["y"])
    out, log = legalize_and_compare(m, Target(max_pool_kernel=kernel))
    if want:
        assert op_types(out) == ["AveragePool"] * want + ["GlobalAveragePool"]
        for n in out.graph.node[:-1]:
            k = [a for a in n.attribute if a.name == "kernel_shape"][0].ints
            assert max(k) <= kernel
        assert all(get_origin(n) == ["gap"] for n in out.graph.node)
    else:  # fits one global pool, or 17 is a prime above the window: no exact factorisation
        assert op_types(out) == ["GlobalAveragePool"]


def _pad_node(opset, pads, value=None, axes=None):
    """A Pad in the form of ``opset`` and its initializers."""
    if opset < 11:
        kw = {"pads": pads}
        if value is not None:
            kw["value"] = value
        return mk("Pad", ["x"], ["p"], name="pad", **kw), {}
    inits = {"pads": np.array(pads, np.int64)}
    ins = ["x", "pads"]
    if value is not None or axes is not None:
        ins.append("val" if value is not None else "")
        if value is not None:
            inits["val"] = np.array(value, np.float32)
    if axes is not None:
        ins.append("axes")
        inits["axes"] = np.array(axes, np.int64)
    return mk("Pad", ins, ["p"], name="pad"), inits


@pytest.mark.parametrize("opset", [7, 11, 13, 18])
def test_pad_folds_into_conv(opset):
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    if opset == 18:
        pad, inits = _pad_node(opset, [1, 2, 1, 0], axes=[2, 3])
    else:
        pad, inits = _pad_node(opset, [0, 0, 1, 2, 0, 0, 1, 0])
    inits["w"] = w
    m = make_model([pad, mk("Conv", ["p", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                   [("x", [1, 3, 8, 8])], ["y"], inits, opset=opset)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv"]
    pads = [a for a in out.graph.node[0].attribute if a.name == "pads"][0].ints
    assert list(pads) == [2, 3, 2, 1]
    assert set(get_origin(out.graph.node[0])) == {"pad", "conv"}


def test_pad_not_folded_when_over_limit_or_nonzero_value():
    """Not folded into the Conv; pad_to_conv makes it a depthwise 1x1 Conv (value v: Add -v first)."""
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    pad, inits = _pad_node(13, [0, 0, 5, 5, 0, 0, 5, 5])
    inits["w"] = w
    m = make_model([pad, mk("Conv", ["p", "w"], ["y"], name="conv", pads=[3, 3, 3, 3])],
                   [("x", [1, 3, 8, 8])], ["y"], inits)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Conv", "Conv"] and "pad_to_conv" in [r for r, _, _ in log]
    pad, inits = _pad_node(13, [0, 0, 1, 1, 0, 0, 1, 1], value=1.5)
    inits["w"] = w
    m = make_model([pad, mk("Conv", ["p", "w"], ["y"], name="conv")], [("x", [1, 3, 8, 8])],
                   ["y"], inits)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Add", "Conv", "Conv"] and "pad_to_conv" in [r for r, _, _ in log]


@pytest.mark.parametrize("pool,pre,value,folds", [
    ("AveragePool", None, None, True), ("MaxPool", None, None, False),
    ("MaxPool", "Relu", None, True), ("MaxPool", None, -np.inf, True)])
def test_pad_into_pools(pool, pre, value, folds):
    pad, inits = _pad_node(13, [0, 0, 1, 1, 0, 0, 1, 1], value=value)
    nodes = []
    if pre:
        nodes.append(mk(pre, ["x0"], ["x"], name="pre"))
    nodes += [pad, mk(pool, ["p"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2])]
    m = make_model(nodes, [("x0" if pre else "x", [1, 2, 9, 9])], ["y"], inits)
    out, log = legalize_and_compare(m)
    assert "Pad" not in op_types(out)      # folded, or a depthwise 1x1 Conv (pad_to_conv)
    assert ("pad_fold" in [r for r, _, _ in log]) == folds
    if folds and pool == "AveragePool":
        cip = [a.i for a in out.graph.node[-1].attribute if a.name == "count_include_pad"]
        assert cip == [1]


@pytest.mark.parametrize("alpha,beta,ta,tb,cshape", [
    (1.0, 1.0, 0, 0, (5,)), (0.5, 2.0, 0, 1, (1, 5)), (1.0, 0.5, 1, 0, (3, 5)),
    (2.0, 1.0, 1, 1, None), (1.0, 1.0, 0, 1, (1,)), (1.0, 3.0, 0, 1, ())])
def test_gemm_to_fc_form(alpha, beta, ta, tb, cshape):
    a_shape = [4, 3] if ta else [3, 4]
    b = R.standard_normal((5, 4) if tb else (4, 5)).astype(np.float32)
    inits = {"b": b}
    ins = ["a", "b"]
    if cshape is not None:
        inits["c"] = R.standard_normal(cshape).astype(np.float32)
        ins.append("c")
    m = make_model([mk("Gemm", ins, ["y"], name="gemm", alpha=alpha, beta=beta, transA=ta,
                       transB=tb)], [("a", a_shape)], ["y"], inits, opset=13)
    out, log = legalize_and_compare(m)
    gemm = [n for n in out.graph.node if n.op_type == "Gemm"][0]
    at = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    assert at.get("transB") == 1 and at.get("alpha", 1.0) == 1.0 and at.get("beta", 1.0) == 1.0
    assert at.get("transA", 0) == 0
    c = consts(out)
    assert c[gemm.input[1]].shape == (5, 4)
    if len(gemm.input) > 2:
        assert c[gemm.input[2]].shape == (5,)
    ops = op_types(out)
    assert ("Transpose" in ops) == bool(ta)
    assert ("Add" in ops) == (cshape == (3, 5))


@pytest.mark.parametrize("bias_shape", [(6,), (1, 6), None])
def test_matmul_add_to_gemm(bias_shape):
    w = R.standard_normal((4, 6)).astype(np.float32)
    nodes = [mk("MatMul", ["x", "w"], ["h"], name="mm")]
    inits = {"w": w}
    out_name = "h"
    if bias_shape:
        inits["b"] = R.standard_normal(bias_shape).astype(np.float32)
        nodes.append(mk("Add", ["b", "h"], ["y"], name="add"))
        out_name = "y"
    m = make_model(nodes, [("x", [3, 4])], [out_name], inits)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Gemm"]
    assert len(out.graph.node[0].input) == (3 if bias_shape else 2)
    assert set(get_origin(out.graph.node[0])) == ({"mm", "add"} if bias_shape else {"mm"})


def test_matmul_on_4d_unit_input_and_nd_input():
    w = R.standard_normal((8, 5)).astype(np.float32)
    m = make_model([mk("MatMul", ["x", "w"], ["y"], name="mm"),
                    mk("MatMul", ["z", "w"], ["v"], name="mm3")],
                   [("x", [2, 1, 1, 8]), ("z", [2, 3, 8])], ["y", "v"], {"w": w})
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Gemm", "Reshape", "MatMul"]


def test_gemm_after_4d_input_flattened():
    w = R.standard_normal((10, 2 * 3 * 3)).astype(np.float32)
    m = make_model([mk("Relu", ["x"], ["r"], name="relu"),
                    mk("Flatten", ["r"], ["f"], name="flat"),
                    mk("Gemm", ["f", "w"], ["y"], name="fc", transB=1)],
                   [("x", [2, 2, 3, 3])], ["y"], {"w": w})
    out, _ = legalize_and_compare(m)
    assert op_types(out) == ["Relu", "Reshape", "Gemm"]


def _resize_model(opset, in_hw, out_hw, by_sizes=False, **kw):
    inits = {"roi": np.zeros(0, np.float32)}
    if by_sizes:
        inits["sizes"] = np.array([1, 4, *out_hw], np.int64)
        ins = ["x", "roi" if opset < 13 else "", "" if opset >= 13 else "scales0", "sizes"]
        if opset < 13:
            inits["scales0"] = np.zeros(0, np.float32)
    else:
        inits["scales"] = np.array([1, 1, out_hw[0] / in_hw[0], out_hw[1] / in_hw[1]], np.float32)
        ins = ["x", "roi", "scales"]
    return make_model([mk("Resize", ins, ["y"], name="resize", **kw)], [("x", [1, 4, *in_hw])], ["y"],
                      inits, opset=opset)


def _resizes(out):
    return [(n, {a.name: helper.get_attribute_value(a) for a in n.attribute})
            for n in out.graph.node if n.op_type == "Resize"]


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("mode,ctm", [("linear", "half_pixel"), ("linear", "align_corners"),
                                      ("cubic", "pytorch_half_pixel"), ("nearest", "half_pixel")])
def test_resize_of_a_1x1_map_is_a_nearest_broadcast_within_the_scale_limit(opset, mode, ctm):
    """DeepLabV3's ASPP pooling: bilinear upsample of [N, C, 1, 1] to 20x20 = a broadcast ->
    nearest x5 then x4 (each within resize_max_scale 8)."""
    m = _resize_model(opset, (1, 1), (20, 20), by_sizes=True, mode=mode, coordinate_transformation_mode=ctm)
    out, log = legalize_and_compare(m, tol=1e-5)   # cubic weights sum to 1 up to rounding
    rs = _resizes(out)
    assert len(rs) == 2 and all(a["mode"] == b"nearest" for _, a in rs)
    c = consts(out)
    assert [list(c[n.input[2]]) for n, _ in rs] == [[1, 1, 5, 5], [1, 1, 4, 4]]
    assert out.graph.node[-1].output[0] == "y"


@pytest.mark.parametrize("scale,steps", [(16, 2), (24, 2), (8, None), (11, None)])
def test_nearest_pixel_repeat_above_the_limit_becomes_a_chain(scale, steps):
    m = _resize_model(13, (3, 2), (3 * scale, 2 * scale), mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    out, log = legalize_and_compare(m, tol=0)
    applied = [d for r, _, d in log if r == "resize_nearest"]
    assert len(_resizes(out)) == (steps or 1) and bool(applied) == bool(steps)


def test_bilinear_upsample_of_a_real_map_is_left_alone():
    m = _resize_model(13, (5, 5), (20, 20), mode="linear")
    out, log = legalize_and_compare(m)
    assert len(_resizes(out)) == 1 and not any(r == "resize_nearest" for r, _, _ in log)


def test_pad_shared_by_convs_and_pools_folds_into_each():
    """tf2onnx merges identical Pads: one Pad feeding two depthwise convs and an AveragePool."""
    pad, inits = _pad_node(13, [0, 0, 2, 3, 0, 0, 3, 2])
    inits.update(w1=R.standard_normal((3, 1, 5, 5)).astype(np.float32),
                 w2=R.standard_normal((3, 1, 3, 3)).astype(np.float32))
    nodes = [pad, mk("Conv", ["p", "w1"], ["a"], name="dw1", group=3, strides=[2, 2]),
             mk("Conv", ["p", "w2"], ["b"], name="dw2", group=3, strides=[2, 2], pads=[0, 0, 1, 1]),
             mk("AveragePool", ["p"], ["c"], name="pool", kernel_shape=[5, 5], strides=[2, 2])]
    m = make_model(nodes, [("x", [1, 3, 12, 12])], ["a", "b", "c"], inits)
    out, log = legalize_and_compare(m)
    assert sorted(op_types(out)) == ["AveragePool", "Conv", "Conv"]
    pads = {n.name: list(next(a.ints for a in n.attribute if a.name == "pads")) for n in out.graph.node}
    assert pads == {"dw1": [2, 3, 3, 2], "dw2": [2, 3, 4, 3], "pool": [2, 3, 3, 2]}
    assert all("pad" in get_origin(n) for n in out.graph.node)


@pytest.mark.parametrize("after", ["MaxPool", "Slice", "Concat"])
def test_unfoldable_zero_pad_becomes_identity_depthwise_conv(after):
    """A zero Pad nothing can absorb (MaxPool over signed data, a crop, a Concat) becomes a
    depthwise 1x1 Conv of ones with the pads: exact and an accelerator op."""
    pad, inits = _pad_node(13, [0, 0, 0, 1, 0, 0, 1, 2])
    nodes = [mk("Conv", ["x", "w"], ["x1"], name="conv"), pad]
    nodes[1].input[0] = "x1"
    inits["w"] = R.standard_normal((4, 3, 1, 1)).astype(np.float32)
    if after == "MaxPool":
        nodes.append(mk("MaxPool", ["p"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2]))
    elif after == "Slice":
        inits.update(st=np.array([1, 1], np.int64), en=np.array([100, 100], np.int64),
                     ax=np.array([2, 3], np.int64))
        nodes.append(mk("Slice", ["p", "st", "en", "ax"], ["y"], name="crop"))
    else:
        nodes.append(mk("Concat", ["p", "p"], ["y"], name="cat", axis=1))
    m = make_model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits)
    out, log = legalize_and_compare(m, tol=0)
    assert "Pad" not in op_types(out)
    conv = [n for n in out.graph.node if n.op_type == "Conv"][1]
    a = {x.name: helper.get_attribute_value(x) for x in conv.attribute}
    assert a["group"] == 4 and a["kernel_shape"] == [1, 1] and a["pads"] == [0, 1, 1, 2]
    assert get_origin(conv) == ["pad"]


def test_zero_pad_between_cpu_ops_left_alone():
    pad, inits = _pad_node(13, [0, 0, 1, 1, 0, 0, 1, 1])
    pad.input[0] = "x1"
    m = make_model([mk("Exp", ["x"], ["x1"], name="sp"), pad,
                    mk("Softsign", ["p"], ["y"], name="ss")], [("x", [1, 3, 8, 8])], ["y"], inits)
    res = legalize(m)
    out, report = res.model, res.report
    assert "Pad" in op_types(out)
    assert ("pad_to_conv", "pad", "no accelerator op next to it") in report.skipped


@pytest.mark.parametrize("axis,pushed,pre", [(1, False, None), (2, False, None), (3, False, None),
                                             (2, True, None), (2, False, [0, 2, 3, 1]),
                                             (1, False, [0, 2, 3, 1])])
def test_repeat_becomes_nearest_resize(axis, pushed, pre):
    """tf.repeat(x, 2, axis) = Unsqueeze -> Tile -> (Transpose) -> Reshape -> nearest Resize."""
    shape = [1, 3, 4, 5]
    nodes, inits, x = [], {}, "x"
    if pre:
        nodes.append(mk("Transpose", ["x"], ["xt"], name="pre", perm=pre))
        x, shape = "xt", [shape[p] for p in pre]
    reps = np.ones(5, np.int64)
    reps[axis + 1] = 2
    inits.update(ax=np.array([axis + 1], np.int64), reps=reps)
    nodes += [mk("Unsqueeze", [x, "ax"], ["u"], name="unsq"), mk("Tile", ["u", "reps"], ["t"], name="tile")]
    out = list(shape)
    out[axis] *= 2
    t = "t"
    if pushed:
        nodes.append(mk("Transpose", ["t"], ["tt"], name="push", perm=[0, 2, 3, 4, 1]))
        t, out = "tt", [out[0], out[2], out[3], out[1]]
    inits["shape"] = np.array(out, np.int64)
    nodes.append(mk("Reshape", [t, "shape"], ["y"], name="merge"))
    m = make_model(nodes, [("x", [1, 3, 4, 5])], ["y"], inits)
    out_m, log = legalize_and_compare(m, tol=0)
    ops = op_types(out_m)
    assert "Tile" not in ops and ops.count("Resize") == 1, ops
    assert ops.count("Transpose") <= 2
    assert [r for r, _, _ in log if r == "repeat_to_resize"]


def test_tile_of_whole_axis_is_not_a_repeat():
    """Unsqueeze before the axis then merge = np.tile (copies of the axis), not a repeat."""
    inits = {"ax": np.array([1], np.int64), "reps": np.array([1, 2, 1, 1, 1], np.int64),
             "shape": np.array([1, 6, 4, 5], np.int64)}
    m = make_model([mk("Unsqueeze", ["x", "ax"], ["u"], name="unsq"),
                    mk("Tile", ["u", "reps"], ["t"], name="tile"),
                    mk("Reshape", ["t", "shape"], ["y"], name="merge")], [("x", [1, 3, 4, 5])], ["y"], inits)
    out, log = legalize_and_compare(m, tol=0)
    assert "Tile" in op_types(out)


@pytest.mark.parametrize("form", ["MatMul", "Gemm", "GemmBias"])
def test_tensordot_becomes_nd_matmul(form):
    """tf2onnx's Keras Dense on [1, T, K]: Reshape [T, K] -> MatMul/Gemm -> Reshape [1, T, O]."""
    w = R.standard_normal((8, 5)).astype(np.float32)
    inits = {"s1": np.array([6, 8], np.int64), "s2": np.array([1, 6, 5], np.int64),
             "b": R.standard_normal(5).astype(np.float32)}
    if form == "MatMul":
        inits["w"] = w
        fc = mk("MatMul", ["f", "w"], ["m"], name="fc")
    else:
        inits["w"] = w.T.copy()
        fc = mk("Gemm", ["f", "w"] + (["b"] if form == "GemmBias" else []), ["m"], name="fc", transB=1)
    m = make_model([mk("Reshape", ["x", "s1"], ["f"], name="flat"), fc,
                    mk("Reshape", ["m", "s2"], ["r"], name="back"),
                    mk("Add", ["r", "b"], ["a"], name="bias"), mk("Relu", ["a"], ["y"], name="relu")],
                   [("x", [1, 6, 8])], ["y"], inits)
    out, log = legalize_and_compare(m)
    assert [r for r, _, _ in log if r == "tensordot_to_matmul"]
    assert "Reshape" not in op_types(out) and op_types(out)[0] == "MatMul"
    assert out.graph.node[0].input[0] == "x"


def test_repeat_of_3d_time_axis_becomes_resize():
    """Keras UpSampling1D on [N, T, C]: through a 4-D [N, T, 1, C] view."""
    inits = {"ax": np.array([2], np.int64), "reps": np.array([1, 1, 3, 1], np.int64),
             "shape": np.array([1, 15, 4], np.int64)}
    m = make_model([mk("Unsqueeze", ["x", "ax"], ["u"], name="unsq"),
                    mk("Tile", ["u", "reps"], ["t"], name="tile"),
                    mk("Reshape", ["t", "shape"], ["y"], name="merge")], [("x", [1, 5, 4])], ["y"], inits)
    out, log = legalize_and_compare(m, tol=0)
    assert "Tile" not in op_types(out) and op_types(out).count("Resize") == 1


@pytest.mark.parametrize("form", ["causal_conv1d", "nhwc_pad"])
def test_pad_sinks_below_reshape_and_transpose_into_conv(form):
    """tf2onnx: Conv1D(padding='causal') = Pad([N, T, C]) -> Reshape [N, 1, T, C] -> Transpose ->
    Conv; ZeroPadding2D on NHWC data = Pad -> Transpose -> Conv. The Pad moves down and folds."""
    if form == "causal_conv1d":
        inits = {"pads": np.array([0, 4, 0, 0, 0, 0], np.int64), "s": np.array([1, 1, 14, 3], np.int64),
                 "w": R.standard_normal((5, 3, 1, 5)).astype(np.float32)}
        nodes = [mk("Pad", ["x", "pads"], ["p"], name="pad"), mk("Reshape", ["p", "s"], ["r"], name="expand"),
                 mk("Transpose", ["r"], ["t"], name="tr", perm=[0, 3, 1, 2]),
                 mk("Conv", ["t", "w"], ["y"], name="conv", kernel_shape=[1, 5])]
        shape = [1, 10, 3]
    else:
        inits = {"pads": np.array([0, 1, 2, 0, 0, 1, 0, 0], np.int64),
                 "w": R.standard_normal((5, 3, 3, 3)).astype(np.float32)}
        nodes = [mk("Pad", ["x", "pads"], ["p"], name="pad"),
                 mk("Transpose", ["p"], ["t"], name="tr", perm=[0, 3, 1, 2]),
                 mk("Conv", ["t", "w"], ["y"], name="conv", kernel_shape=[3, 3], strides=[2, 2])]
        shape = [1, 9, 8, 3]
    m = make_model(nodes, [("x", shape)], ["y"], inits)
    out, log = legalize_and_compare(m)
    assert "Pad" not in op_types(out) and op_types(out).count("Conv") == 1
    assert [r for r, _, _ in log if r == "pad_sink"]


@pytest.mark.parametrize("starts,ends,axes,kernel", [
    ([1, 1], [100, 100], [2, 3], [2, 2]),          # NASNet Cropping2D(((1, 0), (1, 0)))
    ([2], [-3], [2], [6, 1]),                      # UNet skip crop, negative end
    ([0, 0, 1, 2], [1, 4, -1, 9], None, [3, 6]),   # all axes given, batch/channel untouched
])
def test_small_spatial_crop_becomes_one_tap_depthwise_conv(starts, ends, axes, kernel):
    inits = {"w": R.standard_normal((4, 3, 1, 1)).astype(np.float32), "st": np.array(starts, np.int64),
             "en": np.array(ends, np.int64)}
    ins = ["c", "st", "en"]
    if axes is not None:
        inits["ax"] = np.array(axes, np.int64)
        ins.append("ax")
    m = make_model([mk("Conv", ["x", "w"], ["c"], name="conv"), mk("Slice", ins, ["y"], name="crop")],
                   [("x", [1, 3, 11, 12])], ["y"], inits)
    out, log = legalize_and_compare(m, tol=0)
    assert op_types(out) == ["Conv", "Conv"]
    a = {x.name: helper.get_attribute_value(x) for x in out.graph.node[1].attribute}
    assert a["kernel_shape"] == kernel and a["group"] == 4 and get_origin(out.graph.node[1]) == ["crop"]


@pytest.mark.parametrize("starts,ends,axes,steps,reason", [
    ([1], [3], [1], None, "axis 1"), ([0], [4], [2], None, "max_kernel"),
    ([1], [10], [3], [2], "step")])
def test_crop_left_alone(starts, ends, axes, steps, reason):
    inits = {"w": R.standard_normal((4, 3, 1, 1)).astype(np.float32), "st": np.array(starts, np.int64),
             "en": np.array(ends, np.int64), "ax": np.array(axes, np.int64)}
    ins = ["c", "st", "en", "ax"]
    if steps:
        inits["sp"] = np.array(steps, np.int64)
        ins.append("sp")
    m = make_model([mk("Conv", ["x", "w"], ["c"], name="conv"), mk("Slice", ins, ["y"], name="crop")],
                   [("x", [1, 3, 11, 12])], ["y"], inits)
    res = legalize(m)
    out, report = res.model, res.report
    assert "Slice" in op_types(out)
    why = [r for rule, n, r in report.skipped if rule == "crop_to_conv"]
    assert why and reason in why[0], report.skipped


@pytest.mark.parametrize("op,attrs,shape", [("DepthToSpace", {"mode": "DCR"}, [1, 16, 3, 5]),
                                            ("DepthToSpace", {"mode": "CRD"}, [1, 16, 3, 5]),
                                            ("DepthToSpace", {}, [2, 8, 3, 5]),
                                            ("SpaceToDepth", {}, [1, 3, 6, 4])])
def test_depth_to_space_to_reshape_transpose(op, attrs, shape, tmp_path):
    """DepthToSpace / SpaceToDepth -> Reshape 6-D, Transpose, Reshape (exact); after a conv the whole
    model is one accelerator region (the transpose runs as block rotations), within fp16 tolerance."""
    import onnxruntime as ort

    import onnx_mrvl

    m = make_model([mk(op, ["x"], ["y"], name="d2s", blocksize=2, **attrs)], [("x", shape)], ["y"], {}, opset=13)
    out, log = legalize_and_compare(m)
    assert op_types(out) == ["Reshape", "Transpose", "Reshape"]
    assert all(get_origin(n) == ["d2s"] for n in out.graph.node)
    w = (R.standard_normal((shape[1], shape[1], 3, 3)) * 0.3).astype(np.float32)
    m = make_model([mk("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4),
                    mk(op, ["c"], ["y"], name="d2s", blocksize=2, **attrs)], [("x", shape)], ["y"], {"w": w}, opset=13)
    m = onnx.shape_inference.infer_shapes(m)
    res = onnx_mrvl.convert(m)
    assert [n.op_type for n in res.model.graph.node] == ["Subgraph_1x1"]
    feeds = {"x": R.standard_normal(shape).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path / "m"))).run(None, feeds)[0]
    assert ref.shape == got.shape and float(np.max(np.abs(ref - got))) <= 1e-2 * float(np.max(np.abs(ref)))


@pytest.mark.parametrize("opset", [11, 13])
def test_gather_of_a_unit_axis_and_split_into_one_part_become_reshapes(opset):
    """x[0] of a batch of one (torchvision detection's images[0]) and a one-part Split are reshapes;
    a Gather on a longer axis stays."""
    split = mk("Split", ["x"], ["s"], name="split", axis=0) if opset < 13 else \
        mk("Split", ["x", "parts"], ["s"], name="split", axis=0)
    m = make_model([split,
                    mk("Gather", ["s", "i0"], ["g"], name="first", axis=0),
                    mk("Relu", ["g"], ["r"], name="relu"),
                    mk("Gather", ["r", "i1"], ["y"], name="row", axis=1)],
                   [("x", [1, 3, 4, 5])], ["y"],
                   {"i0": np.array(0, np.int64), "i1": np.array(-1, np.int64), "parts": np.array([1], np.int64)},
                   opset=opset)
    out, log = legalize_and_compare(m, tol=0)
    assert op_types(out) == ["Reshape", "Relu", "Gather"]
    assert shape_of_reshape(out, out.graph.node[0]) == [3, 4, 5]
