"""The int8_out LayerNorm is onnxruntime's fp32 LayerNormalization kernel bit for bit
(``sim.norm_ops.layernorm_onnxruntime``, docs/simulator.md "Transformers"): a QDQ layer norm's codes
are onnxruntime's. Before, its inverse std was an ulp off onnxruntime's in ~18% of rows, which moved
a code now and then; a ViT's classification logits all follow the class token, so one moved code in
one layer norm made DeiT-tiny S8 76% identical."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.sim.norm_ops import layernorm_onnxruntime

F = TensorProto.FLOAT


def _norm_model(op: str, c: int, gamma, beta=None) -> onnx.ModelProto:
    inputs = ["x", "g"] + (["b"] if beta is not None else [])
    inits = [numpy_helper.from_array(gamma, "g")] + ([numpy_helper.from_array(beta, "b")] if beta is not None else [])
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], axis=-1, epsilon=1e-6)], "norm",
                              [helper.make_tensor_value_info("x", F, [None, c])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _rows(c: int, scale: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1024, c)) * scale + rng.standard_normal((1024, 1))).astype(np.float32)


@pytest.mark.parametrize("c", [8, 13, 20, 192, 197, 768])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_is_onnxruntime_kernel_bit_for_bit(c, bias):
    """Every fp32 output equal to onnxruntime's LayerNormalization (row lengths with and without a
    remainder of 4 / 8, with and without bias, two input scales)."""
    rng = np.random.default_rng(c)
    g = (1 + 0.3 * rng.standard_normal(c)).astype(np.float32)
    b = (0.2 * rng.standard_normal(c)).astype(np.float32) if bias else None
    sess = ort.InferenceSession(_norm_model("LayerNormalization", c, g, b).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    for scale in (3.0, 0.01):
        x = _rows(c, scale, c + 1)
        ref = sess.run(None, {"x": x})[0]
        y, ok = layernorm_onnxruntime(x, -1, 1e-6, g, b)
        assert ok and y.dtype == np.float32
        assert np.array_equal(y, ref), (scale, int((y != ref).sum()))


@pytest.mark.parametrize("c", [16, 197, 768])
def test_rms_norm_is_onnxruntime_simplified_kernel_bit_for_bit(c):
    """``rms``: onnxruntime's SimplifiedLayerNormalization (what it fuses an RMSNorm into), rows of 16+."""
    g = (1 + 0.3 * np.random.default_rng(c).standard_normal(c)).astype(np.float32)
    sess = ort.InferenceSession(_norm_model("SimplifiedLayerNormalization", c, g).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    x = _rows(c, 3.0, c)
    y, ok = layernorm_onnxruntime(x, -1, 1e-6, g, None, rms=True)
    assert ok and np.array_equal(y, sess.run(None, {"x": x})[0])


def _qdq_layernorm_unit(c: int, act: int) -> onnx.ModelProto:
    """x -> Q/DQ -> LayerNormalization -> Q/DQ (an output: its codes seen) -> MatMul
    (int8 weights) -> Q/DQ: a QDQ model's layer norm group, written by hand."""
    rng = np.random.default_rng(c)
    z = np.int8(0) if act == TensorProto.INT8 else np.uint8(128)
    inits = [numpy_helper.from_array(np.float32(v), n) for n, v in (("sx", 0.05), ("sy", 0.03), ("so", 0.2), ("sw", 0.004))]
    inits += [numpy_helper.from_array(z, n) for n in ("zx", "zy", "zo")] + [
        numpy_helper.from_array((1 + 0.2 * rng.standard_normal(c)).astype(np.float32), "g"),
        numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), "b"),
        numpy_helper.from_array(rng.integers(-127, 128, (c, 32)).astype(np.int8), "w"),
        numpy_helper.from_array(np.int8(0), "zw")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("LayerNormalization", ["xd", "g", "b"], ["ln"], axis=-1, epsilon=1e-6),
             helper.make_node("QuantizeLinear", ["ln", "sy", "zy"], ["lq"]),
             helper.make_node("DequantizeLinear", ["lq", "sy", "zy"], ["norm"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("MatMul", ["norm", "wd"], ["mm"]),
             helper.make_node("QuantizeLinear", ["mm", "so", "zo"], ["mq"]),
             helper.make_node("DequantizeLinear", ["mq", "so", "zo"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_ln", [helper.make_tensor_value_info("x", F, [1, 4096, c])],
                              [helper.make_tensor_value_info("norm", F, [1, 4096, c]),
                               helper.make_tensor_value_info("y", F, [1, 4096, 32])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("act", [TensorProto.INT8, TensorProto.UINT8])
def test_qdq_layernorm_codes_identical_to_onnxruntime(tmp_path, act):
    """The converted QDQ unit (one region, the LayerNorm int8_out) gives onnxruntime's codes, every one."""
    path = str(tmp_path / "m.onnx")
    onnx.save(_qdq_layernorm_unit(192, act), path)
    result = onnx_mrvl.convert(path)
    assert len(result.subgraphs) == 1
    result.save(str(tmp_path / "out"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(os.path.join(str(tmp_path / "out"), "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for k in range(3):
        x = (rng.standard_normal((1, 4096, 192)) * (1 + k) + rng.standard_normal((1, 4096, 1))).astype(np.float32)
        for a, b in zip(ours.run(None, {"x": x}), ref.run(None, {"x": x})):
            assert np.array_equal(a, b), int((a != b).sum())


@pytest.mark.parametrize("n", [1, 4, 7, 8, 11, 12, 13, 384, 771])
def test_native_layernorm_sums_are_the_numpy_forms_bit_for_bit(n):
    """norm_native's C sums (the mean in 4 float64 lanes, the squares in 8 fma lanes) against the
    numpy forms they replace, on rows of every remainder length and magnitudes 1e-4 .. 1e4."""
    from onnx_mrvl.sim import native, norm_native, norm_ops
    if not native.on():
        pytest.skip(native.why_disabled())
    assert norm_native.lib() is not None, norm_native.why_disabled()      # its own bit check passed
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((37, n)) * 10 ** rng.uniform(-4, 4, (37, 1))).astype(np.float32)
    for native_name, ref in (("ln_mean_f64_lanes", norm_ops.numpy_mean_f64_lanes),
                             ("ln_lanes_fma_sum", norm_ops.numpy_lanes_fma_sum)):
        got = norm_native.row_sums(native_name, x)
        np.testing.assert_array_equal(got.view(np.uint32), ref(x).view(np.uint32))


@pytest.mark.parametrize("n", [8, 13, 100, 129, 384, 771])
def test_native_layernorm_kernels_are_the_numpy_forms_bit_for_bit(n):
    """norm_native's whole LayerNorm kernels (``ln_ort_rows``: onnxruntime's, the int8_out layer;
    ``ln_numpy_rows``: the fp16 layer's numpy pairwise means) against the numpy forms they replace,
    with and without beta, on rows of magnitudes 1e-4 .. 1e4 and constant rows; through the layer
    functions, which take the native kernel from MIN_SIZE values on."""
    from onnx_mrvl.sim import native, norm_native, norm_ops
    from onnx_mrvl.sim.fp16 import round_fp16_
    if not native.on():
        pytest.skip(native.why_disabled())
    assert norm_native.lib() is not None, norm_native.why_disabled()
    rng = np.random.default_rng(n + 7)
    x = (rng.standard_normal((2, 37, n)) * 10 ** rng.uniform(-4, 4, (2, 37, 1)) + rng.standard_normal((2, 37, 1))).astype(np.float32)
    x[0, :3] = x[0, :3, :1]                                   # variance 0
    g = (1 + 0.3 * rng.standard_normal(n)).astype(np.float32)
    for b in (None, (0.2 * rng.standard_normal(n)).astype(np.float32)):
        for eps in (1e-5, 1e-12):
            assert norm_native.layernorm_rows("ln_ort_rows", x, -1, eps, g, b) is not None
            y, ok = norm_ops.layernorm_onnxruntime(x, -1, eps, g, b)
            want = norm_ops.numpy_layernorm_onnxruntime(x, -1, eps, g, b, pure=True)
            assert ok and np.array_equal(y.view(np.uint32), want.view(np.uint32)), int((y != want).sum())
            y, ok = norm_ops.layernorm(x, -1, eps, g, b)
            want = norm_ops.numpy_layernorm(x, -1, eps, g, b)
            assert ok == round_fp16_(want) and np.array_equal(y.view(np.uint32), want.view(np.uint32))
    # another axis or layout: numpy (None from the native entry)
    assert norm_native.layernorm_rows("ln_ort_rows", np.ascontiguousarray(x.transpose(0, 2, 1)), 1, 1e-5,
                                      np.ones(37, np.float32), None) is None
