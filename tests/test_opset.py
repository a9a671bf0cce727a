"""Each Mrvl op's reference body (a model-local ONNX function) against an independent numpy NHWC
reference: conv kernels OHWI, FC kernels OI, pads [top, left, bottom, right]."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from onnx_mrvl import opset

RNG = np.random.default_rng(0)


# ---------------------------------------------------------------- numpy references (NHWC)
def act_np(y, a, slope=None):
    kind = a.get("activation", "none")
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    if kind == "none":
        return y
    if kind == "relu":
        return np.maximum(y, 0)
    if kind == "clamp":
        return np.clip(y, a["activation_min"], a["activation_max"])
    if kind == "leaky_relu":
        return np.where(y >= 0, y, y * a["activation_alpha"])
    if kind == "prelu":
        return np.where(y >= 0, y, y * slope)          # slope per channel, last axis
    if kind == "sigmoid":
        return sig(y)
    if kind == "tanh":
        return np.tanh(y)
    if kind == "hard_sigmoid":
        return np.clip(a["activation_alpha"] * y + a["activation_beta"], 0, 1)
    if kind == "hard_swish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if kind == "silu":
        return y * sig(y)
    raise AssertionError(kind)


def conv_np(x, w, b, strides, pads, dilations, group):
    n, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    t, l, bo, r = pads
    xp = np.pad(x, [(0, 0), (t, bo), (l, r), (0, 0)])
    sh, sw = strides
    dh, dw = dilations
    ho = (h + t + bo - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + l + r - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, ho, wo, cout), np.float64)
    mult = cout // cin if group > 1 else None
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw, :]
            if group == 1:
                y += np.einsum("nhwc,oc->nhwo", patch, w[:, i, j, :])
            else:  # depthwise: output channel o reads input channel o // multiplier
                y += patch[..., np.arange(cout) // mult] * w[:, i, j, 0]
    return y + (b if b is not None else 0)


def pool_np(x, kind, k, strides, pads, include_pad=0, ceil_mode=0):
    n, h, w, c = x.shape
    t, l, bo, r = pads

    def out_len(size, kk, s, pb, pe):
        num = size + pb + pe - kk
        o = (-(-num // s) if ceil_mode else num // s) + 1
        if ceil_mode and (o - 1) * s >= size + pb:
            o -= 1
        return o
    ho, wo = out_len(h, k[0], strides[0], t, bo), out_len(w, k[1], strides[1], l, r)
    y = np.zeros((n, ho, wo, c))
    for i in range(ho):
        for j in range(wo):
            h0, w0 = i * strides[0] - t, j * strides[1] - l
            h1, w1 = h0 + k[0], w0 + k[1]
            win = x[:, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w), :]
            if kind == "max":
                y[:, i, j] = win.max(axis=(1, 2))
            else:
                if include_pad:
                    count = (min(h1, h + bo) - h0) * (min(w1, w + r) - w0)
                else:
                    count = win.shape[1] * win.shape[2]
                y[:, i, j] = win.sum(axis=(1, 2)) / count
    return y


# ---------------------------------------------------------------- harness
def run_node(op, inputs, weights, attrs):
    """Run one Mrvl node (data inputs ``inputs`` as graph inputs, ``weights`` as initializers)
    through its reference function in plain onnxruntime."""
    names = [f"in{i}" for i in range(len(inputs))]
    wnames = []
    for k, v in weights:
        wnames.append("" if v is None else k)
    node = opset.make_node(op, names + wnames, ["Y"], name="n0", origin=["orig"], attrs=attrs)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights if v is not None]
    g = helper.make_graph([node], "t",
                          [helper.make_tensor_value_info(nm, onnx.TensorProto.FLOAT, list(v.shape))
                           for nm, v in zip(names, inputs)],
                          [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None] * _rank(op, attrs))],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    opset.attach_functions(m)
    onnx.checker.check_model(m, full_check=True)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {nm: v.astype(np.float32) for nm, v in zip(names, inputs)})[0]


def _rank(op, attrs):
    return 2 if op == "FC" else len(attrs["shape"]) if "shape" in attrs else 4


def close(a, b, tol=1e-4):
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max())))


ACTS = [dict(activation="none"), dict(activation="relu"),
        dict(activation="clamp", activation_min=0.0, activation_max=6.0),
        dict(activation="leaky_relu", activation_alpha=0.1), dict(activation="prelu"),
        dict(activation="sigmoid"), dict(activation="tanh"),
        dict(activation="hard_sigmoid", activation_alpha=0.25, activation_beta=0.4),
        dict(activation="hard_swish"), dict(activation="silu")]


@pytest.mark.parametrize("act", ACTS, ids=lambda a: a["activation"])
def test_conv2d_activation(act):
    x = RNG.standard_normal((2, 7, 6, 3)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.5
    b = RNG.standard_normal(5).astype(np.float32)
    slope = RNG.uniform(0.05, 0.5, 5).astype(np.float32)
    attrs = dict(strides=[1, 2], pads=[1, 0, 2, 1], dilations=[1, 1], group=1, kernel_shape=[3, 3],
                 channels=5, **act)
    weights = [("W", w), ("B", b)] + ([("slope", slope)] if act["activation"] == "prelu" else [])
    got = run_node("Conv2D", [x], weights, attrs)
    want = act_np(conv_np(x, w, b, [1, 2], [1, 0, 2, 1], [1, 1], 1), act, slope)
    close(got, want)


@pytest.mark.parametrize("mult,dil,stride", [(1, [1, 1], [1, 1]), (2, [2, 1], [2, 2]), (3, [1, 3], [1, 2])])
def test_conv2d_depthwise_dilated(mult, dil, stride):
    cin = 4
    x = RNG.standard_normal((1, 9, 10, cin)).astype(np.float32)
    w = RNG.standard_normal((cin * mult, 3, 3, 1)).astype(np.float32)
    attrs = dict(strides=stride, pads=[2, 1, 0, 2], dilations=dil, group=cin, kernel_shape=[3, 3],
                 channels=cin * mult, activation="none")
    got = run_node("Conv2D", [x], [("W", w), ("B", None)], attrs)
    close(got, conv_np(x, w, None, stride, [2, 1, 0, 2], dil, cin))


def test_conv2d_dilated_no_bias():
    x = RNG.standard_normal((1, 11, 11, 2)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 2, 2)).astype(np.float32)
    attrs = dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[3, 2], group=1, kernel_shape=[2, 2],
                 channels=3)
    close(run_node("Conv2D", [x], [("W", w)], attrs), conv_np(x, w, None, [1, 1], [0] * 4, [3, 2], 1))


@pytest.mark.parametrize("act", ACTS[:4] + ACTS[5:], ids=lambda a: a["activation"])
def test_fc(act):
    x = RNG.standard_normal((3, 12)).astype(np.float32)
    w = RNG.standard_normal((5, 12)).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    close(run_node("FC", [x], [("W", w), ("B", b)], dict(act)), act_np(x @ w.T + b, act))


def test_fc_weights_need_transform():
    """X is an NHWC tensor flattened; W is in the logical (NCHW-flatten) order."""
    n, h, w_, c = 2, 3, 4, 5
    x_nchw = RNG.standard_normal((n, c, h, w_)).astype(np.float32)
    x_flat_nhwc = x_nchw.transpose(0, 2, 3, 1).reshape(n, -1)
    w = RNG.standard_normal((7, c * h * w_)).astype(np.float32)
    attrs = dict(weights_need_transform=1, flatten_shape=[n, h, w_, c], activation="relu")
    got = run_node("FC", [x_flat_nhwc], [("W", w), ("B", None)], attrs)
    # independent reference: permute W's columns to the NHWC flatten order
    w_nhwc = w.reshape(7, c, h, w_).transpose(0, 2, 3, 1).reshape(7, -1)
    close(got, np.maximum(x_flat_nhwc @ w_nhwc.T, 0))
    close(got, np.maximum(x_nchw.reshape(n, -1) @ w.T, 0))


@pytest.mark.parametrize("k,s,p,ceil", [([3, 3], [2, 2], [1, 1, 1, 1], 0), ([2, 3], [2, 1], [0, 1, 1, 0], 0),
                                        ([3, 3], [2, 2], [0, 0, 0, 0], 1)])
def test_maxpool(k, s, p, ceil):
    x = RNG.standard_normal((1, 8, 9, 3)).astype(np.float32)
    attrs = dict(kernel_shape=k, strides=s, pads=p, ceil_mode=ceil, dilations=[1, 1])
    close(run_node("MaxPool2D", [x], [], attrs), pool_np(x, "max", k, s, p, ceil_mode=ceil))


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("k,s,p", [([3, 3], [2, 2], [1, 1, 1, 1]), ([2, 3], [1, 2], [0, 1, 1, 1])])
def test_avgpool_both_padding_semantics(include_pad, k, s, p):
    x = RNG.standard_normal((2, 7, 8, 3)).astype(np.float32)
    attrs = dict(kernel_shape=k, strides=s, pads=p, ceil_mode=0, count_include_pad=include_pad)
    close(run_node("AvgPool2D", [x], [], attrs), pool_np(x, "avg", k, s, p, include_pad))


def test_avgpool_semantics_differ():
    """The two padding semantics must give different numbers at the borders (else the test above
    could not tell them apart)."""
    x = np.ones((1, 4, 4, 1), np.float32)
    a = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], ceil_mode=0)
    y0 = run_node("AvgPool2D", [x], [], dict(a, count_include_pad=0))
    y1 = run_node("AvgPool2D", [x], [], dict(a, count_include_pad=1))
    assert np.allclose(y0, 1.0) and np.isclose(y1[0, 0, 0, 0], 4 / 9)


@pytest.mark.parametrize("op,fn", [("GlobalAvgPool2D", np.mean), ("GlobalMaxPool2D", np.max)])
def test_global_pools(op, fn):
    x = RNG.standard_normal((2, 5, 6, 4)).astype(np.float32)
    close(run_node(op, [x], [], {}), fn(x, axis=(1, 2), keepdims=True))


@pytest.mark.parametrize("act", [dict(activation="none"), dict(activation="relu"), dict(activation="silu")],
                         ids=lambda a: a["activation"])
def test_sum_mul_two_tensors(act):
    a = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    b = RNG.standard_normal((1, 4, 5, 3)).astype(np.float32)
    close(run_node("Sum2D", [a, b], [], dict(act)), act_np(a + b, act))
    close(run_node("Mul2D", [a, b], [], dict(act)), act_np(a * b, act))


def test_sum_mul_broadcast_constant():
    a = RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)
    c = RNG.standard_normal((1, 1, 1, 3)).astype(np.float32)   # per channel, NHWC
    close(run_node("Sum2D", [a], [("B", c)], dict(activation="relu")), np.maximum(a + c, 0))
    close(run_node("Mul2D", [a], [("B", c)], {}), a * c)


@pytest.mark.parametrize("axis", [3, 1, 2])
def test_concat(axis):
    shapes = [[1, 3, 4, 2], [1, 3, 4, 5]] if axis == 3 else [[1, 3, 4, 2]] * 3
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    got = run_node("Concat", xs, [], dict(axis=axis, num_inputs=len(xs)))
    close(got, np.concatenate(xs, axis=axis))


@pytest.mark.parametrize("axis,start,end", [(3, 2, 5), (3, 0, 1), (1, 1, 3)])
def test_slice2d(axis, start, end):
    """Entries [start, end) of the stored axis (3 = NHWC channels, 1 = NCHW channels)."""
    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    want = x[:, start:end] if axis == 1 else x[..., start:end]
    np.testing.assert_array_equal(run_node("Slice2D", [x], [], dict(axis=axis, start=start, end=end)), want)


@pytest.mark.parametrize("op,shape", [("Reshape", [1, 6, 10]), ("Flatten", [2, 30]), ("Squeeze", [2, 30])])
def test_reshape_family(op, shape):
    x = RNG.standard_normal((2, 1, 30) if op == "Squeeze" else (1, 3, 4, 5) if op == "Reshape"
                            else (2, 3, 2, 5)).astype(np.float32)
    close(run_node(op, [x], [], dict(shape=shape)), x.reshape(shape))


@pytest.mark.parametrize("scales", [[2, 2], [3, 1], [1, 4]])
def test_resize_nearest_integer_scale(scales):
    x = RNG.standard_normal((1, 3, 4, 2)).astype(np.float32)
    want = np.repeat(np.repeat(x, scales[0], axis=1), scales[1], axis=2)
    close(run_node("Resize", [x], [], dict(scales=scales, mode="nearest")), want)


def test_layout_transform_both_ways():
    x = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    close(run_node("LayoutTransform", [x], [], dict(src_layout="NCHW", dst_layout="NHWC")),
          x.transpose(0, 2, 3, 1))
    close(run_node("LayoutTransform", [x], [], dict(src_layout="NHWC", dst_layout="NCHW")),
          x.transpose(0, 3, 1, 2))


def test_op_table_consistent():
    """Every op has a distinct JSON layer name, a namespaced composite, and activation attributes
    only where it declares ``has_activation``; unknown attributes are refused."""
    assert len(opset.LAYER_NAMES) == len(opset.OPS)
    for op in opset.OPS.values():
        assert op.composite.startswith("mrvl.")
        assert ("activation" in op.attrs) == op.has_activation
    with pytest.raises(ValueError, match="unknown attributes"):
        opset.make_node("MaxPool2D", ["x"], ["y"], name="n", origin=[], attrs={"activation": "relu"})


def test_overloads_specialise_per_attribute_set():
    """Two nodes of one op with different attributes get two functions; equal ones share one."""
    mk = lambda name, k: opset.make_node(  # noqa: E731
        "MaxPool2D", ["x"], [name], name=name, origin=[],
        attrs=dict(kernel_shape=[k, k], strides=[1, 1], pads=[0, 0, 0, 0], ceil_mode=0, dilations=[1, 1]))
    nodes = [mk("a", 2), mk("b", 2), mk("c", 3)]
    assert nodes[0].overload == nodes[1].overload != nodes[2].overload
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", 1, [1, 5, 5, 1])],
                          [helper.make_tensor_value_info(n, 1, None) for n in "abc"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    opset.attach_functions(m)
    assert len(m.functions) == 2
    assert {f.overload for f in m.functions} == {nodes[0].overload, nodes[2].overload}
