"""int8 Conv2D that onnxruntime runs in float (requant="float", sim/int8_float_conv.py): with S8
activations onnxruntime leaves a DQ -> Conv -> Q whose input DQ other nodes read as a float Conv
(checked in its optimized model); the layer then follows MLAS's fp32 arithmetic and matches bit for bit."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

import onnx_mrvl
from onnx_mrvl.ort_plan import ort_float_nodes
from onnx_mrvl.testing.models import GraphBuilder

pytest.importorskip("onnxruntime.quantization")
from tests.test_int8_qdq import quantize  # noqa: E402


def shared_input_cnn(seed: int = 0, c: int = 24, size: int = 20) -> onnx.ModelProto:
    """Three convs (1x1, 3x3, depthwise 3x3) reading one tensor, Concat, 1x1 conv: 3x3 convs with K > 128."""
    g = GraphBuilder(seed, 13)
    x = g.relu(g.conv("input", 3, c, 3, "stem"), "stem_relu")
    a = g.conv(x, c, 16, 1, "pw")
    b = g.relu(g.conv(x, c, 16, 3, "c3"), "c3_relu")
    w = g.const("dw.weight", g.he((c, 1, 3, 3), 9))
    d = g.node("Conv", [x, w, g.const("dw.bias", np.zeros(c, np.float32) + 0.05)], "dw", kernel_shape=[3, 3],
               pads=[1, 1, 1, 1], group=c)
    g.conv(g.node("Concat", [a, b, d], "cat", axis=1), 32 + c, 8, 1, "head")
    g.nodes[-1].output[0] = "output"
    return g.model("shared_input_cnn", [("input", TensorProto.FLOAT, [1, 3, size, size])],
                   [("output", TensorProto.FLOAT, [1, 8, size, size])])


def test_float_path_convs_match_onnxruntime_bit_for_bit(tmp_path):
    qpath = quantize(shared_input_cnn(seed=5), str(tmp_path / "q.onnx"), True, "s8")
    float_convs = ort_float_nodes(onnx.load(qpath), "Conv")
    assert {"pw", "c3", "dw"} <= set(float_convs), float_convs   # onnxruntime 1.32, S8
    result = onnx_mrvl.convert(qpath)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))["nodes"]
    convs = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["Conv2D"]]
    assert sum(a.get("requant") == ["float"] for a in convs) == len(float_convs) and all("bias_scale_const" in a for a in convs
                                                                         if a.get("requant"))
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(2)
    for _ in range(8):
        x = (rng.standard_normal((1, 3, 20, 20)) * 1.5).astype(np.float32)
        assert np.array_equal(ref.run(None, {"input": x})[0], sess.run(None, {"input": x})[0])


def test_float_path_pointwise_conv_follows_mlas_threads(tmp_path):
    """A float-path 1x1 conv is MlasGemm(filters, pixels, K) on onnxruntime's thread pool: with
    more pixels than filters its threads take 16-aligned parts of the pixels, each an SGEMM of its
    own N, so of its own K block (mlas_stride_k: 128 for the first 80 of 144 pixels, 256 for the
    last 64 when K = 160 on 2 threads). One K block for the whole image (before) differed from
    onnxruntime near ties (DeepLabV3-MobileNetV3 QDQ S8: 72.4% identical)."""
    from onnx_mrvl.sim.int8_float_conv import gemm_segments, mlas_stride_k
    assert gemm_segments(16, 144, 160, threads=2) == [(0, 80, 128), (80, 144, 256)]
    assert gemm_segments(16, 144, 160, threads=1) == [(0, 144, mlas_stride_k(144, 160))]
    assert gemm_segments(200, 144, 160, threads=2) == [(0, 144, 128)]   # M > N: MLAS splits the filters
    qpath = quantize(shared_input_cnn(seed=3, c=160, size=12), str(tmp_path / "q.onnx"), True, "s8")
    assert "pw" in ort_float_nodes(onnx.load(qpath), "Conv")
    result = onnx_mrvl.convert(qpath)
    folder = str(tmp_path / "out")
    result.save(folder)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(4)
    for _ in range(4):
        x = (rng.standard_normal((1, 3, 12, 12)) * 1.5).astype(np.float32)
        assert np.array_equal(ref.run(None, {"input": x})[0], sess.run(None, {"input": x})[0])


def _ort_conv_sums(layer, xd: np.ndarray, kernel, bias, ws, bs, pads=(0, 0, 0, 0), threads=None) -> np.ndarray:
    """onnxruntime's float Conv of a QDQ model (weights and bias through DequantizeLinear) on the
    dequantized NHWC input ``xd``: its fp32 output, NHWC (``threads``: the session's intra-op threads)."""
    from onnx import helper, numpy_helper
    o, c = kernel.shape[0], kernel.shape[-1]
    inits = [numpy_helper.from_array(kernel.transpose(0, 3, 1, 2).copy(), "wq"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(bias, "bq"), numpy_helper.from_array(bs, "bs")]
    nodes = [helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=list(pads))]
    n, h, w, _ = xd.shape
    m = helper.make_model(helper.make_graph(nodes, "pw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.ascontiguousarray(xd.transpose(0, 3, 1, 2))})[0].transpose(0, 2, 3, 1)


def _random_float_conv(rng, c: int, o: int, h: int, w: int, k: int):
    """A float-path k x k conv (padding k // 2) with random int8 weights, int32 bias and scales: the
    layer, (kernel, bias, weight scales, bias scales), a dequantized NHWC input [1, h, w, c]."""
    from onnx_mrvl.sim.int8_float_conv import FloatPathConv2D
    kernel = rng.integers(-127, 128, (o, k, k, c)).astype(np.int8)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    ws = rng.uniform(0.001, 0.02, o).astype(np.float32)
    sx = np.float32(0.037)
    bs = (ws * sx).astype(np.float32)
    params = dict(in_scale=float(sx), in_zero_point=3, in_dtype="int8", out_scale=0.1, out_zero_point=0, out_dtype="int8")
    layer = FloatPathConv2D(kernel, bias, ws, params, [1, 1], [k // 2] * 4, [1, 1], 1, bias_scale=bs)
    xd = ((rng.integers(-128, 128, (1, h, w, c)) - 3).astype(np.float32) * sx).astype(np.float32)
    return layer, (kernel, bias, ws, bs), xd


@pytest.mark.parametrize("c, o, h, w", [(160, 16, 12, 12), (240, 80, 10, 10), (300, 70, 9, 11), (96, 24, 20, 20)])
def test_float_path_pointwise_sums_equal_onnxruntime(c, o, h, w):
    """The fp32 sums of a float-path 1x1 conv equal onnxruntime's float Conv bit for bit, numpy and
    native kernels: MlasGemm(filters, pixels, K) splits the pixels among its threads when there are
    more pixels than filters, each part an SGEMM with its own K block (gemm_segments); one K block
    for the whole image (before) differed in most sums (DeepLabV3-MobileNetV3 QDQ S8: 72.4%
    identical, 100% after)."""
    from onnx_mrvl.sim import int8_float_native
    rng = np.random.default_rng(c + o)
    layer, consts, xd = _random_float_conv(rng, c, o, h, w, 1)
    want = _ort_conv_sums(layer, xd, *consts)
    assert np.array_equal(layer.sums(xd), want)
    native = int8_float_native.prepare_float(layer)
    if native is not None:
        assert np.array_equal(native.sums(xd), want)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_float_path_segmented_conv_sums_follow_mlas_threads(monkeypatch, threads):
    """A float-path 3x3 conv of one image with no more filters than pixels is MLAS's segmented
    im2col path: MlasConvPrepare gives each of ``M N K / 64K + 1`` threads (at most the pool's) a
    16-aligned part of the pixels, each part an MlasConvOperation with the K block of its own pixel
    count (segmented_parts). 32 filters on 8 x 8 pixels, K = 288: one block of 256 + 32 on one
    thread, one of 288 per 32-pixel half on 2 or 3 threads (a stride of 22 pixels rounded up to
    32; yolov5_like S8's conv_23 was 1 step off on a 2-core host: 99.38% identical). The sums equal
    onnxruntime's float Conv with that many intra-op threads, bit for bit."""
    from onnx_mrvl.sim.int8_float_conv import conv_segments
    monkeypatch.setenv("ONNX_MRVL_ORT_THREADS", str(threads))
    layer, consts, xd = _random_float_conv(np.random.default_rng(7), 32, 32, 8, 8, 3)
    parts = conv_segments(layer, 1, 8, 8)
    assert parts == ([(0, 64, 256)] if threads == 1 else [(0, 32, 512), (32, 64, 512)]), parts
    want = _ort_conv_sums(layer, xd, *consts, pads=(1, 1, 1, 1), threads=threads)
    assert np.array_equal(layer.sums(xd), want)


def test_fma_chain_rounds_once_per_step_in_k_order():
    from onnx_mrvl.sim.int8_float_conv import fma_chain
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 300)).astype(np.float32)
    w = rng.standard_normal((300, 3)).astype(np.float32)
    want = np.zeros((5, 3), np.float32)
    for k0 in range(0, 300, 128):   # the K blocks (fma_chain default: 128)' sums added in order
        acc = np.zeros((5, 3), np.float32)
        for k in range(k0, min(300, k0 + 128)):
            acc = (acc.astype(np.float64) + a[:, k:k + 1].astype(np.float64) * w[k].astype(np.float64)).astype(np.float32)
        want = (want + acc).astype(np.float32) if k0 else acc
    assert np.array_equal(fma_chain(a, w), want)


def test_float_path_depthwise_sums_follow_mlas_m1_kernel():
    """onnxruntime's float Conv with DequantizeLinear weights (no NCHWc: the weight is no initializer)
    runs a conv with one output channel per group as SGEMMs with M = 1, which MLAS's M1 kernel sums
    without FMA in groups of 4 taps (PP-OCRv4's depthwise convs: a sum at -7.4999995 codes in
    onnxruntime was -7.5 as an FMA chain, a code off). The layer's fp32 sums equal onnxruntime's bit
    for bit: depthwise 3x3 / 5x5 / strided / dilated, one output per group of 2 inputs, O = 1."""
    from onnx import helper, numpy_helper
    from onnx_mrvl.sim.int8_float_conv import FloatPathConv2D
    from onnx_mrvl.sim.int8_float_native import prepare_float
    rng = np.random.default_rng(11)
    for c, groups, o, k, stride, pad, dil in ((48, 48, 48, 3, 1, 1, 1), (32, 32, 32, 5, 2, 2, 1), (16, 16, 16, 3, 1, 2, 2),
                                              (16, 8, 8, 3, 1, 1, 1), (6, 1, 1, 3, 1, 1, 1), (24, 24, 24, 7, 1, 3, 1)):
        s_x, z_x = np.float32(0.0461), np.int8(-12)
        wq = rng.integers(-127, 128, (o, c // groups, k, k)).astype(np.int8)
        ws = rng.uniform(0.001, 0.01, o).astype(np.float32)
        params = dict(in_scale=float(s_x), in_zero_point=int(z_x), in_dtype="int8", out_scale=0.1, out_zero_point=0,
                      out_dtype="int8")
        layer = FloatPathConv2D(np.ascontiguousarray(wq.transpose(0, 2, 3, 1)), None, ws, params, [stride] * 2,
                                [pad] * 4, [dil] * 2, groups)
        inits = [numpy_helper.from_array(v, n) for n, v in
                 (("sx", s_x), ("zx", z_x), ("wq", wq), ("ws", ws), ("wz", np.zeros(o, np.int8)))]
        nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                 helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
                 helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
                 helper.make_node("Conv", ["xd", "wd"], ["y"], group=groups, kernel_shape=[k, k], pads=[pad] * 4,
                                  strides=[stride] * 2, dilations=[dil] * 2)]
        g = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 19, 21])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        x = (rng.standard_normal((1, c, 19, 21)) * 2).astype(np.float32)
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = layer.sums(np.ascontiguousarray(x.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
        assert np.array_equal(got, want), (c, groups, o, k, int(np.count_nonzero(got != want)))
        fn = prepare_float(layer)
        if c == groups and fn is not None:       # depthwise: the native kernel's M1 sums (m1_sums) as well
            native_sums = fn.sums(np.ascontiguousarray(x.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)
            assert np.array_equal(native_sums, want), (c, k, int(np.count_nonzero(native_sums != want)))
        elif c != groups:
            assert fn is None                    # other M1 sums are numpy's (the native kernel chains FMAs)


def _qdq_convtranspose(c_in, c_out, x_zp, s_x, s_w, s_y, rng, bias=True):
    """DQ(x) -> ConvTranspose 2x2 stride 2 (int8 weights per channel on axis 1, int32 bias) -> Q -> DQ:
    a DB head's upsampling as onnxruntime's quantizer writes it."""
    from onnx import helper, numpy_helper
    wq = rng.integers(-127, 128, (c_in, c_out, 2, 2)).astype(np.int8)
    inits = {"sx": np.float32(s_x), "zx": x_zp, "wq": wq, "ws": np.full(c_out, s_w, np.float32),
             "wz": np.zeros(c_out, np.int8), "sy": np.float32(s_y), "zy": x_zp.dtype.type(x_zp + 3)}
    ins = ["xd", "wd"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=1)]
    if bias:
        inits.update(bq=rng.integers(-3000, 3000, c_out).astype(np.int32),
                     bs=np.full(c_out, np.float32(s_x) * np.float32(s_w), np.float32), bz=np.zeros(c_out, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"], axis=0))
        ins.append("bd")
    nodes += [helper.make_node("ConvTranspose", ins, ["y"], name="up", kernel_shape=[2, 2], strides=[2, 2]),
              helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c_in, 24, 20])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, c_out, 48, 40])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_qdq_convtranspose_one_tap_per_pixel_follows_onnxruntime_float_sums(tmp_path):
    """onnxruntime runs a QDQ ConvTranspose as its float ConvTranspose (SGEMM with A transposed, col2im).
    With one kernel tap per output pixel (2x2 stride 2: DBNet's / PP-OCR det's upsampling) each phase
    Conv is a float-path layer with those sums (gemm "conv_transpose": K blocks of 128, never MLAS's M1
    kernel, also for one output channel), so the codes equal onnxruntime's where the integer sums
    rounded near-ties the other way (an output scale of 2 s_x s_w puts half of the sums on a tie;
    PP-OCRv4 det U8 / PP-OCRv3 det S8 lost codes there)."""
    rng = np.random.default_rng(23)
    for c_in, c_out, zp in ((24, 8, np.int8(-7)), (8, 1, np.uint8(120)), (160, 4, np.int8(2))):
        s_x, s_w = np.float32(0.0173), np.float32(0.0091)
        m = _qdq_convtranspose(c_in, c_out, zp, s_x, s_w, 2 * float(np.float32(s_x * s_w)) * 11, rng)
        res = onnx_mrvl.convert(m)
        assert res.report.decisions["up"].placement == "accelerator"
        folder = str(tmp_path / f"ct{c_in}_{c_out}")
        res.save(folder)
        nodes = json.load(open(os.path.join(folder, f"{res.subgraphs[0].name}-nodes.json")))["nodes"]
        convs = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["Conv2D"]]
        assert len(convs) == 4 and all(a.get("requant") == ["float"] and a.get("float_gemm") == ["conv_transpose"]
                                       for a in convs)
        sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
        for j in range(3):
            x = (rng.standard_normal((1, c_in, 24, 20)) * 1.2).astype(np.float32)
            want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            got = sess.run(None, {"x": x})[0]
            assert np.array_equal(got, want), (c_in, c_out, int(np.count_nonzero(got != want)))


@pytest.mark.parametrize("n, c, o, k, groups, size", [(1, 120, 480, 1, 1, 1), (1, 480, 120, 1, 1, 1), (1, 75, 61, 1, 1, 1),
                                                      (3, 72, 18, 1, 1, 1), (1, 16, 22, 3, 1, 3), (1, 24, 14, 1, 2, 1),
                                                      (1, 960, 240, 1, 1, 1), (1, 900, 242, 1, 1, 1)])
def test_float_path_one_pixel_conv_follows_mlas_m1_transpose_b_kernel(n, c, o, k, groups, size):
    """A float-path conv with one output pixel (squeeze-excite fc1 / fc2 on the pooled [1, C, 1, 1]
    vector: MobileNetV3, EfficientNet) is an SGEMM with N = 1, which MLAS hands to its M1 kernel with
    A and B swapped (SgemmKernelM1TransposeBAvx: 8 lane sums of vmulps / vaddps, reduced per block
    of 4 / 2 / 1 rows, MLAS's thread row parts). Its fp32 sums (DQ weights and bias) equal
    onnxruntime's float Conv bit for bit, where the FMA chain (before: LRASPP-MobileNetV3 S8's
    ``fc2`` a code off, 76.6% identical output) differs."""
    from onnx import helper, numpy_helper
    from onnx_mrvl.sim.int8_float_conv import FloatPathConv2D, fma_chain, mlas_stride_k
    from onnx_mrvl.sim.int8_float_native import prepare_float
    rng = np.random.default_rng(c * 7 + o)
    ig = c // groups
    s_x, z_x = np.float32(0.0213), np.int8(-7)
    wq = rng.integers(-127, 128, (o, ig, k, k)).astype(np.int8)
    ws = rng.uniform(0.001, 0.01, o).astype(np.float32)
    bq = rng.integers(-3000, 3000, o).astype(np.int32)
    bs = (ws * s_x).astype(np.float32)
    params = dict(in_scale=float(s_x), in_zero_point=int(z_x), in_dtype="int8", out_scale=0.1, out_zero_point=0,
                  out_dtype="int8")
    layer = FloatPathConv2D(np.ascontiguousarray(wq.transpose(0, 2, 3, 1)), bq, ws, params, [1, 1], [0] * 4, [1, 1],
                            groups, bias_scale=bs)
    inits = [numpy_helper.from_array(v, nm) for nm, v in (("sx", s_x), ("zx", z_x), ("wq", wq), ("ws", ws),
                                                          ("wz", np.zeros(o, np.int8)), ("bq", bq), ("bs", bs))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["y"], group=groups, kernel_shape=[k, k])]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    native = prepare_float(layer)
    old_differs = 0
    for _ in range(4):
        x = (rng.standard_normal((n, c, size, size)) * 1.3).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        xn = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        got = layer.sums(xn).transpose(0, 3, 1, 2)
        assert got.shape == want.shape == (n, o, 1, 1)
        assert np.array_equal(got, want), int(np.count_nonzero(got != want))
        if native is not None:
            assert np.array_equal(native.sums(xn).transpose(0, 3, 1, 2), want)
        if groups == 1:      # the FMA chain of the other convs (the order before)
            xd = ((np.clip(np.rint(xn / s_x) + z_x, -128, 127) - z_x).astype(np.float32) * s_x).astype(np.float32)
            cols = xd.reshape(n, -1) if k == 1 else np.ascontiguousarray(xd).reshape(n, -1)
            old = (fma_chain(cols, layer.wd, mlas_stride_k(1, cols.shape[1])) + layer.bd).astype(np.float32)
            old_differs += int(np.count_nonzero(old != want.reshape(n, o)))
    if groups == 1 and c >= 120:
        assert old_differs > 0
