"""Patterns of more trained models from PyPI wheels (tools/survey_trained_more.py,
docs/surveys/trained-more.md), built with onnx.helper and seeded weights.

magika (a JAX byte CNN through jax2tf + tf2onnx): max over time of a 1-D conv over 508 positions, a
GlobalMaxPool above what one GlobalMaxPool2D takes (gmp_split)."""
import numpy as np
import pytest
from onnx import helper

from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import legalize_and_compare, make_model, op_types
from onnx_mrvl.provenance import get_origin
from onnx_mrvl.target import Target
from test_fuse_exports import Net
from test_legalize_ocr_audio_idioms import _convert

mk = helper.make_node


def _attr(n, name):
    return helper.get_attribute_value(next(a for a in n.attribute if a.name == name))


@pytest.mark.parametrize("hw,stages", [((1, 508), 1), ((300, 20), 1), ((1, 256), 0), ((1, 5000), 2),
                                       ((1, 70000), 3)])
def test_global_max_pool_above_the_limit_becomes_window_stages(hw, stages):
    """Sizes with no exact factorisation (508 = 4 x 127) too: the last window of a ceil-mode stage
    holds what is left, and a max of maxima is exact."""
    m = make_model([mk("GlobalMaxPool", ["x"], ["y"], name="gmp")], [("x", [2, 3] + list(hw))], ["y"])
    out, log = legalize_and_compare(m, tol=0.0)
    assert op_types(out) == ["MaxPool"] * stages + ["GlobalMaxPool"]
    for n in out.graph.node[:-1]:
        k = list(_attr(n, "kernel_shape"))
        assert max(k) <= 16 and list(_attr(n, "strides")) == k
    assert all(get_origin(n) == ["gmp"] for n in out.graph.node)


def test_small_pool_window_target():
    m = make_model([mk("GlobalMaxPool", ["x"], ["y"], name="gmp")], [("x", [1, 2, 20, 300])], ["y"])
    out, _ = legalize_and_compare(m, Target(max_pool_kernel=4), tol=0.0)
    assert op_types(out) == ["MaxPool"] * 3 + ["GlobalMaxPool"]   # 20 x 300 -> 5 x 75 -> 19 -> 5 (<= 16 fits)
    assert [list(_attr(n, "kernel_shape")) for n in out.graph.node[:3]] == [[4, 4], [1, 4], [1, 4]]


def _qdq_max_over_time(shape, zp_dtype=np.int8):
    """x -> Q -> DQ -> GlobalMaxPool -> Q -> DQ (onnxruntime's quantize_static of a max-over-time pool;
    the output scale differs from the input's)."""
    n = Net(31)
    s_in, s_out = n.const(np.float32(0.05)), n.const(np.float32(0.07))
    z_in, z_out = n.const(np.array(0 if zp_dtype == np.int8 else 128, zp_dtype)), n.const(np.array(3, zp_dtype))
    x = n.op("DequantizeLinear", [n.op("QuantizeLinear", ["x", s_in, z_in]), s_in, z_in])
    q = n.op("QuantizeLinear", [n.op("GlobalMaxPool", [x], "gmp"), s_out, z_out])
    return n.model([("x", shape)], [n.op("DequantizeLinear", [q, s_out, z_out])])


@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint8])
def test_int8_global_max_pool_gets_a_pair_after_each_stage(zp_dtype):
    out, _ = legalize_and_compare(_qdq_max_over_time([2, 4, 1, 600], zp_dtype), tol=0.0)
    ops = op_types(out)
    i = ops.index("MaxPool")
    assert ops[i:i + 4] == ["MaxPool", "QuantizeLinear", "DequantizeLinear", "GlobalMaxPool"]
    q = out.graph.node[i + 1]
    assert list(q.input[1:]) == list(next(n for n in out.graph.node[i + 4:] if n.op_type == "QuantizeLinear").input[1:])


def test_int8_max_over_time_runs_in_one_region_with_onnxruntime_codes(tmp_path):
    """A 1-D QDQ pool over 600 steps (qdq_conv_1d's pairs make it 2-D): int8 pools on the
    accelerator, every output equal to onnxruntime's run of the QDQ model."""
    import onnx_mrvl
    from test_fuse_exports import feeds_for, run_ort
    n = Net(43)
    s_x, s_w, s_c, s_o = (n.const(np.float32(v)) for v in (0.04, 0.01, 0.05, 0.07))
    z8 = n.const(np.array(0, np.int8))
    x = n.op("DequantizeLinear", [n.op("QuantizeLinear", ["x", s_x, z8]), s_x, z8])
    w = n.op("DequantizeLinear", [n.const(n.rng.integers(-90, 90, (8, 4, 5)).astype(np.int8)), s_w, z8])
    b = n.op("DequantizeLinear", [n.const(n.rng.integers(-200, 200, 8).astype(np.int32)),
                                  n.const(np.float32(0.04 * 0.01))])
    h = n.op("Relu", [n.op("Conv", [x, w, b], "conv", kernel_shape=[5])])
    h = n.op("DequantizeLinear", [n.op("QuantizeLinear", [h, s_c, z8]), s_c, z8])
    q = n.op("QuantizeLinear", [n.op("GlobalMaxPool", [h], "gmp"), s_o, n.const(np.array(3, np.int8))])
    m = n.model([("x", [2, 4, 600])], [n.op("DequantizeLinear", [q, s_o, n.const(np.array(3, np.int8))])])
    feeds = feeds_for(m)
    res = onnx_mrvl.convert(m)
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, feeds)[0]
    assert len(res.subgraphs) == 1 and res.report.decisions["gmp"].placement == "accelerator"
    ends = {n.name for n in m.graph.node if "x" in n.input or n.output[0] in ("x",) or
            n.input[0] in {p.output[0] for p in m.graph.node if "x" in p.input}} | {m.graph.node[-1].name}
    # the input's Q -> DQ and the output's DQ: the host's side of a QDQ model
    assert {d.node for d in res.report.cpu_nodes()} <= ends
    assert np.array_equal(got, run_ort(m, feeds)[0])


def _byte_cnn(length=512):
    """A magika / Kim-style 1-D CNN: Conv1d over the sequence, Relu, max over time
    (GlobalMaxPool of [N, C, L]), a Dense head."""
    n = Net(32)
    h = n.op("Conv", ["x", n.w(24, 16, 5)], "conv", kernel_shape=[5])
    h = n.op("Relu", [h])
    p = n.op("GlobalMaxPool", [h], "max_over_time")
    p = n.op("Flatten", [p])
    y = n.op("Gemm", [p, n.w(10, 24), n.w(10)], "head", transB=1)
    return n.model([("x", [2, 16, length])], [y])


def test_max_over_time_of_a_long_sequence_runs_in_one_region(tmp_path):
    res = _convert(_byte_cnn(), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()
    assert res.report.decisions["max_over_time"].placement == "accelerator"


def _moments_ln(n, x, shape, axis, *, keepdims=0, clamp=True, form="flax"):
    """A layer norm from the moments over ``axis``: flax's ``use_fast_variance`` as jax2tf + tf2onnx
    write it (ReduceSum keepdims=0 * 1/n, Max(0, q - m^2), Reshape + Expand back, Rsqrt as Sqrt +
    Reciprocal, the scale joined to the rsqrt) or by hand in PyTorch (ReduceMean keepdim, Pow 2,
    d / Sqrt)."""
    d = shape[axis]
    kept = [1 if k == axis else s for k, s in enumerate(shape)]
    ax = n.const(np.array([axis], np.int64))
    vec = [d if k == axis else 1 for k in range(len(shape))]
    gamma = n.const((1 + 0.2 * n.rng.standard_normal(vec)).astype(np.float32))
    beta = n.const((0.1 * n.rng.standard_normal(vec)).astype(np.float32))
    if form == "flax":
        inv_n = n.const(np.float32(1.0 / d))
        m = n.op("Mul", [n.op("ReduceSum", [x, ax], "sum", keepdims=keepdims), inv_n], "mean")
        q = n.op("Mul", [n.op("ReduceSum", [n.op("Mul", [x, x], "square"), ax], keepdims=keepdims), inv_n])
        v = n.op("Sub", [q, n.op("Mul", [m, m])])
        if clamp:
            v = n.op("Max", [n.const(np.float32(0.0)), v])
        shp = n.const(np.array(kept, np.int64))

        def back(t):
            return n.op("Expand", [n.op("Reshape", [t, shp]), shp]) if not keepdims else t
        inv = n.op("Reciprocal", [n.op("Sqrt", [n.op("Add", [back(v), n.const(np.float32(1e-6))])])])
        y = n.op("Mul", [n.op("Sub", [x, back(m)]), n.op("Mul", [inv, gamma])])
        return n.op("Add", [y, beta], "ln_out")
    m = n.op("ReduceMean", [x], "mean", keepdims=1, axes=[axis])   # opset 13: axes attribute
    two = n.const(np.float32(2.0))
    v = n.op("Sub", [n.op("ReduceMean", [n.op("Pow", [x, two])], keepdims=1, axes=[axis]), n.op("Pow", [m, two])])
    y = n.op("Div", [n.op("Sub", [x, m]), n.op("Sqrt", [n.op("Add", [v, n.const(np.float32(1e-5))])])])
    return n.op("Add", [n.op("Mul", [y, gamma]), beta], "ln_out")


@pytest.mark.parametrize("shape,axis,keepdims,clamp,form", [
    ([2, 64, 40], 1, 0, True, "flax"),      # magika's LayerNorm_0: channels of [N, C, L]
    ([3, 48], 1, 0, True, "flax"),          # magika's LayerNorm_1: features of [N, D]
    ([2, 10, 32], 2, 1, False, "flax"),
    ([2, 10, 32], 2, 1, False, "torch"),
])
def test_moments_layer_norm_becomes_layernormalization(shape, axis, keepdims, clamp, form):
    n = Net(33)
    x = n.op("Add", ["x", n.const((3 * n.rng.standard_normal(shape[1:])).astype(np.float32))], "shift")
    y = n.op("Relu", [_moments_ln(n, x, shape, axis, keepdims=keepdims, clamp=clamp, form=form)])
    m = n.model([("x", shape)], [y])
    out, log = legalize_and_compare(m, tol=1e-4)
    ops = op_types(out)
    assert ops.count("LayerNormalization") == 1
    assert not {"ReduceSum", "ReduceMean", "Sqrt", "Reciprocal", "Max", "Expand", "Pow"} & set(ops)
    assert ("Transpose" in ops) == (axis != len(shape) - 1)
    assert any("moments" in str(e) for e in log)


def test_moments_with_an_outside_reader_stay():
    n = Net(34)
    y = _moments_ln(n, "x", [2, 8, 16], 2, keepdims=1, clamp=False)
    m = n.model([("x", [2, 8, 16])], [y, "mean"])   # the mean is also a graph output
    out, _ = legalize_and_compare(m, tol=1e-4)
    assert "LayerNormalization" not in op_types(out)


def test_magika_like_classifier_runs_in_one_region(tmp_path):
    """Dense -> LayerNorm over channels (moments) -> 1-D conv -> max over 508 positions -> LayerNorm
    (moments) -> Dense: one region, nothing on the CPU."""
    n = Net(35)
    h = n.op("MatMul", ["x", n.w(32, 24)])                          # [N, L, 24] -> per-position Dense
    h = n.op("Transpose", [h], perm=[0, 2, 1])                       # [N, 24, L]
    h = _moments_ln(n, h, [2, 24, 512], 1)
    h = n.op("Relu", [n.op("Conv", [h, n.w(40, 24, 5), n.w(40)], kernel_shape=[5])])
    p = n.op("Reshape", [n.op("GlobalMaxPool", [h], "max_over_time"), n.const(np.array([2, 40], np.int64))])
    p = _moments_ln(n, p, [2, 40], 1)
    y = n.op("Gemm", [p, n.w(10, 40), n.w(10)], "head", transB=1)
    res = _convert(n.model([("x", [2, 512, 32])], [y]), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def _softmax(n, x, shape, axis, *, keepdims=0, guard=True, subtract=True):
    """jax.nn.softmax as jax2tf + tf2onnx write it (ReduceMax keepdims=0, Max(-inf, .), Reshape +
    Expand back, Exp, ReduceSum, Div), or by hand with keepdims reductions."""
    kept = [1 if k == axis else s for k, s in enumerate(shape)]
    shp = n.const(np.array(kept, np.int64))

    def back(t):
        return n.op("Expand", [n.op("Reshape", [t, shp]), shp]) if not keepdims else t
    mx = n.op("ReduceMax", [x], "max", keepdims=keepdims, axes=[axis])
    if guard:
        mx = n.op("Max", [n.const(np.float32(-np.inf)), mx])
    e = n.op("Exp", [n.op("Sub", [x, back(mx)]) if subtract else x], "exp")
    s = n.op("ReduceSum", [e, n.const(np.array([axis], np.int64))], "sum", keepdims=keepdims)
    return n.op("Div", [e, back(s)], "probs")


@pytest.mark.parametrize("shape,axis,keepdims,guard", [([3, 214], 1, 0, True), ([2, 5, 12], 1, 1, False),
                                                       ([2, 5, 12], 2, 0, True)])
def test_expanded_softmax_becomes_softmax(shape, axis, keepdims, guard):
    n = Net(36)
    x = n.op("Mul", ["x", n.const(np.float32(4.0))])
    m = n.model([("x", shape)], [_softmax(n, x, shape, axis, keepdims=keepdims, guard=guard)])
    out, log = legalize_and_compare(m, tol=1e-6)
    assert op_types(out) == ["Mul", "Softmax"]
    assert _attr(out.graph.node[1], "axis") == axis


def test_softmax_without_the_max_subtracted_stays():
    n = Net(37)
    m = n.model([("x", [3, 20])], [_softmax(n, "x", [3, 20], 1, keepdims=1, guard=False, subtract=False)])
    out = legalize(m).model
    assert "Softmax" not in op_types(out)


def test_classifier_head_softmax_runs_on_the_accelerator(tmp_path):
    n = Net(38)
    h = n.op("Gemm", ["x", n.w(214, 64), n.w(214)], "head", transB=1)
    res = _convert(n.model([("x", [4, 64])], [_softmax(n, h, [4, 214], 1)]), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def _toeplitz_linear(n, x, d_in, d_out, bias=False):
    """PESTO's ToeplitzLinear: Unsqueeze -> Conv1d(1, 1, kernel d_in + d_out - 1, padding d_out - 1)
    -> Squeeze, a dense layer written as a convolution."""
    k = d_in + d_out - 1
    h = n.op("Unsqueeze", [x, n.const(np.array([1], np.int64))])
    ins = [h, n.w(1, 1, k)] + ([n.w(1)] if bias else [])
    h = n.op("Conv", ins, "toeplitz", kernel_shape=[k], pads=[d_out - 1, d_out - 1])
    return n.op("Squeeze", [h, n.const(np.array([1], np.int64))])


@pytest.mark.parametrize("bias", [False, True])
def test_conv_whose_kernel_covers_the_input_becomes_one_matmul(bias):
    n = Net(39)
    y = _toeplitz_linear(n, "x", 40, 60, bias)
    out, log = legalize_and_compare(n.model([("x", [3, 40])], [y]), tol=1e-5)
    ops = op_types(out)
    assert "Conv" not in ops and ops.count("MatMul") + ops.count("Gemm") == 1
    assert any("Toeplitz" in str(e) for e in log)


def test_unrolled_matrix_matches_strided_dilated_conv():
    """The unrolling itself, with stride, dilation, several channels and uneven pads."""
    from onnx_mrvl.legalize.rules.conv_dense_toeplitz import unrolled
    rng = np.random.default_rng(40)
    w, x = rng.standard_normal((3, 2, 9)), rng.standard_normal((2, 2, 8))
    stride, dil, pad, lo = 2, 2, 7, 6
    xp = np.pad(x, ((0, 0), (0, 0), (pad, 20)))
    ref = np.stack([np.einsum("ock,nck->no", w, xp[:, :, j * stride:j * stride + 9 * dil:dil][:, :, :9])
                    for j in range(lo)], -1)
    got = (x.reshape(2, -1) @ unrolled(w, 8, lo, stride, dil, pad)).reshape(2, 3, lo)
    assert np.allclose(got, ref)


def test_conv_longer_input_than_kernel_stays_a_conv():
    n = Net(41)
    h = n.op("Conv", ["x", n.w(4, 2, 9)], "conv", kernel_shape=[9], pads=[4, 4])
    out = legalize(n.model([("x", [1, 2, 50])], [h])).model
    assert "MatMul" not in op_types(out) and "Gemm" not in op_types(out)


def test_toeplitz_linear_runs_as_one_fc_in_one_region(tmp_path):
    n = Net(42)
    h = n.op("Relu", [n.op("Gemm", ["x", n.w(64, 32), n.w(64)], transB=1)])
    y = n.op("Softmax", [_toeplitz_linear(n, h, 64, 96)], axis=-1)
    res = _convert(n.model([("x", [4, 32])], [y]), tmp_path)
    assert len(res.subgraphs) == 1 and not res.report.cpu_nodes()


def test_int8_flow_takes_a_gemm_bias_of_shape_1_n():
    """onnxruntime's quant_pre_process fuses MatMul + Add([1, N]) (magika's Dense head) into a Gemm
    with that C, on which its quantize_static (per-channel) fails ("truth value of an array ...
    ambiguous"): the quantize step gives it C [N] (the same function)."""
    import onnx
    import onnx_mrvl
    from onnx_mrvl.quantize.bias_shapes import vector_biases
    from test_fuse_exports import feeds_for, run_ort
    def head(fused):
        n = Net(44)
        h = n.op("Relu", [n.op("Gemm", ["x", n.w(32, 16), n.w(32)], transB=1)])
        w, c = n.w(32, 10), n.const((0.1 * n.rng.standard_normal((1, 10))).astype(np.float32))
        y = n.op("Gemm", [h, w, c], "head") if fused else n.op("Add", [n.op("MatMul", [h, w]), c])
        return n.model([("x", [4, 16])], [y])
    m, g = head(False), head(True)
    flat = onnx.ModelProto()
    flat.CopyFrom(g)
    assert vector_biases(flat) == 1
    head = next(x for x in flat.graph.node if x.name == "head")
    assert [list(t.dims) for t in flat.graph.initializer if t.name == head.input[2]] == [[10]]
    feeds = feeds_for(g)
    assert np.array_equal(run_ort(flat, feeds)[0], run_ort(g, feeds)[0])
    res = onnx_mrvl.convert(m, quantize="int8", calibration=[feeds_for(m, seed=s) for s in range(4)])
    assert len(res.subgraphs) == 1
