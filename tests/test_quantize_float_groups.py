"""``quantize="int8"`` keeps a rotary ``rotate_half`` (Slice / Neg / Concat of one tensor) and an RMSNorm's
mean / + eps / * gamma float (onnx_mrvl/quantize/float_groups.py): the Llama-style decoder block is one
region, the rotary exact against onnxruntime's run of the same QDQ model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.quantize import quantize_model
from onnx_mrvl.quantize.float_groups import rms_norms, signed_permutations, written_norms_softmaxes
from onnx_mrvl.testing.arch_decoder import llama_block, rotary
from onnx_mrvl.testing.arch_transformer import Net

pytest.importorskip("onnxruntime.quantization")


def _feeds(shape, n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"hidden": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def _rotary_model(T: int = 16, H: int = 2, d: int = 16) -> onnx.ModelProto:
    """hidden [1, T, H*d] -> Linear -> heads [1, H, T, d] -> rotary -> merge -> Linear."""
    n = Net(3, 18)
    D = H * d
    x = n.linear("hidden", D, D, "q_proj")
    shape = n.const(np.array([1, T, H, d], np.int64), "shape")
    q = n.op("Transpose", [n.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])
    r = rotary(n, q, [1, H, T, d])
    merged = n.op("Reshape", [n.op("Transpose", [r], perm=[0, 2, 1, 3]), n.const(np.array([1, T, D], np.int64), "m")])
    n.linear(merged, D, D, "o_proj")
    return n.model("rotary", [("hidden", [1, T, D])])


def _converted(model, tmp_path):
    calib = _feeds((1, 16, model.graph.input[0].type.tensor_type.shape.dim[2].dim_value), 16, 1)
    qdq = quantize_model(model, quantize="int8", calibration=calib).model
    r = onnx_mrvl.convert(model, quantize="int8", calibration=calib)
    r.save(str(tmp_path / "m"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "m" / "model.onnx"))
    ref = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    fp32 = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return qdq, r, ours, ref, fp32


def test_groups_found():
    m = llama_block()
    perms = signed_permutations(m)
    assert len(perms) == 2 and all(p.startswith("rotate_half") for p in perms)
    norms = rms_norms(m)
    ops = sorted(n.op_type for n in m.graph.node if n.name in norms)
    assert ops == ["Add", "Add", "Mul", "Mul", "ReduceMean", "ReduceMean"]   # 2 x (mean, + eps, * gamma)
    # a Concat of two different tensors, a mean that is no norm: nothing
    n = Net(0, 18)
    a = n.op("Slice", ["x", n.const(np.array([0], np.int64)), n.const(np.array([4], np.int64)),
                       n.const(np.array([2], np.int64))])
    b = n.op("Neg", [n.op("Slice", ["y", n.const(np.array([4], np.int64)), n.const(np.array([8], np.int64)),
                                    n.const(np.array([2], np.int64))])])
    n.op("Concat", [n.op("ReduceMean", [n.op("Concat", [b, a], axis=2), n.const(np.array([2], np.int64))])], axis=2)
    other = n.model("other", [("x", [1, 2, 8]), ("y", [1, 2, 8])])
    assert signed_permutations(other) == set() and rms_norms(other) == set()
    assert rms_norms(onnx.ModelProto()) == set()


def test_rotary_float_and_exact(tmp_path):
    """The rotate_half group is float in the QDQ model (no Q after the Neg, none on the Concat), the
    model one region with nothing on the CPU (before: the Neg on the CPU, 2 regions), and every output
    element equal to onnxruntime's run of the same QDQ model (the +-1 permutation is exact)."""
    m = _rotary_model()
    qdq, r, ours, ref, _ = _converted(m, tmp_path)
    prod = {o: n for n in qdq.graph.node for o in n.output}
    neg = next(n for n in qdq.graph.node if n.op_type == "Neg")
    readers = [n for n in qdq.graph.node if neg.output[0] in n.input]
    assert [n.op_type for n in readers] == ["Concat"]
    cat = readers[0]
    assert all(prod[i].op_type != "DequantizeLinear" for i in cat.input)
    assert len(r.report.regions) == 1 and not list(r.report.cpu_nodes())
    for f in _feeds((1, 16, 32), 3, 2):
        a, b = ours.run(None, f)[0], ref.run(None, f)[0]
        assert np.array_equal(a, b)


def test_llama_block_one_region(tmp_path):
    """Llama-style block: 3 regions before (the two Negs, the RMSNorms' Pow / ReduceMean / Sqrt /
    Reciprocal on the CPU) -> one, nothing on the CPU but the host's norm of the model input; the RMSNorm is an fp16 layer, so ours is as
    close to fp32 as onnxruntime's int8 run of the same QDQ model (measured: 3.7e-2 - 3.9e-2 against
    3.3e-2 - 4.5e-2) and within two output quanta of it."""
    m = llama_block()
    qdq, r, ours, ref, fp32 = _converted(m, tmp_path)
    # the first RMSNorm normalizes the float model input before its first Q: the host's, in fp32 as
    # onnxruntime computes it (fuse/host_preprocess.py; tests/test_host_input_norm.py)
    cpu = list(r.report.cpu_nodes())
    assert len(r.report.regions) == 1
    assert sorted(d.op_type for d in cpu) == ["Add", "Mul", "Mul", "Pow", "Reciprocal", "ReduceMean", "Sqrt"], cpu
    assert all("input preprocessing" in d.reason for d in cpu), cpu
    norms = {n.name for n in m.graph.node if n.name in rms_norms(m) and n.op_type != "Mul"}   # the mean, + eps
    assert len(norms) == 4 and not [n for n in qdq.graph.node if n.op_type == "QuantizeLinear"
                and any(n.input[0] == f"{k}_out" for k in norms)]
    for f in _feeds((1, 16, 64), 3, 2):
        a, b, c = ours.run(None, f)[0], ref.run(None, f)[0], fp32.run(None, f)[0]
        ours_err = np.abs(a - c).max() / np.abs(c).max()
        ort_err = np.abs(b - c).max() / np.abs(c).max()
        assert ours_err <= max(1.25 * ort_err, 2e-2), (ours_err, ort_err)
        assert np.abs(a - b).max() / np.abs(b).max() < 5e-2
        # the first RMSNorm on the host, the second int8_out, the masked Softmax int8 with its fp32
        # mask (fuse/qdq_masked_softmax.py): every element as onnxruntime's run (before: 56-73%)
        assert np.array_equal(a, b), float(np.mean(a == b))


def _magika_like(seed: int = 35) -> onnx.ModelProto:
    """magika's int8-relevant shape (tests/test_legalize_trained_more.py's builders): Dense -> moments
    LayerNorm over features (flax through jax2tf: ReduceSum keepdims 0, Reshape + Expand back) -> 1-D
    conv -> max over time -> moments LayerNorm -> Dense -> written-out softmax (ReduceMax, Max(-inf))."""
    from test_fuse_exports import Net as Builder
    from test_legalize_trained_more import _moments_ln, _softmax
    n = Builder(seed)
    h = _moments_ln(n, n.op("MatMul", ["x", n.w(32, 24)]), [2, 64, 24], 2)           # per position
    h = n.op("Transpose", [h], perm=[0, 2, 1])                                          # [2, 24, 64]
    h = n.op("Relu", [n.op("Conv", [h, n.w(40, 24, 5), n.w(40)], kernel_shape=[5])])
    p = n.op("Reshape", [n.op("GlobalMaxPool", [h]), n.const(np.array([2, 40], np.int64))])
    p = _moments_ln(n, p, [2, 40], 1)
    y = n.op("Gemm", [p, n.w(12, 40), n.w(12)], "head", transB=1)
    return n.model([("x", [2, 64, 32])], [_softmax(n, y, [2, 12], 1)])


def _x_feeds(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((2, 64, 32)).astype(np.float32)} for _ in range(n)]


def test_written_norms_and_softmaxes_found():
    """Every node of both moments LayerNorms (flax form) and of the softmax; the hand-written PyTorch
    moments form too; shapes a Shape -> Reshape leaves open measured on the given input (jax2tf);
    a softmax without the max subtracted and a model without reductions: nothing."""
    from test_fuse_exports import Net as Builder
    from test_legalize_trained_more import _moments_ln, _softmax
    m = _magika_like()
    got = written_norms_softmaxes(m)
    ops = sorted(n.op_type for n in m.graph.node if n.name in got)
    assert ops.count("ReduceSum") == 5 and ops.count("ReduceMax") == 1 and ops.count("Exp") == 1
    assert ops.count("Sqrt") == 2 and ops.count("Div") == 1 and ops.count("Max") == 3
    assert not {"MatMul", "Conv", "Gemm", "GlobalMaxPool", "Relu", "Transpose"} & set(ops)
    # the PyTorch moments form, behind a data-dependent Reshape and with a dynamic batch
    n = Builder(40)
    x = n.op("Reshape", ["x", n.op("Shape", ["x"])])
    _moments_ln(n, x, [2, 10, 32], 2, keepdims=1, clamp=False, form="torch")
    torch_form = n.model([("x", ["N", 10, 32])], ["ln_out"])
    feed = {"x": np.zeros((2, 10, 32), np.float32)}
    found = written_norms_softmaxes(torch_form, feed)
    assert sorted(k.op_type for k in torch_form.graph.node if k.name in found) == \
        ["Add", "Add", "Div", "Mul", "Pow", "Pow", "ReduceMean", "ReduceMean", "Sqrt", "Sub", "Sub"]
    assert written_norms_softmaxes(torch_form) == set()      # no input shapes: nothing measured
    n = Builder(41)
    _softmax(n, "x", [3, 20], 1, keepdims=1, guard=False, subtract=False)
    assert written_norms_softmaxes(n.model([("x", [3, 20])], ["probs"])) == set()
    assert written_norms_softmaxes(_rotary_model()) == set()


def test_magika_like_int8_one_region(tmp_path):
    """Before: the int8 recipe quantized the LayerNorms' + eps Add and the softmax's Sub, splitting
    both forms (their pieces on the CPU, 3 regions). Now they stay float in the QDQ model, legalize
    makes them LayerNormalization / Softmax (fp16), and the model is one region with nothing on the
    CPU, as close to the fp32 model as onnxruntime's run of the same QDQ model."""
    m = _magika_like()
    calib = _x_feeds(16, 1)
    qdq = quantize_model(m, quantize="int8", calibration=calib).model
    group = written_norms_softmaxes(m)
    quantized = {n.input[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    inside = {o for n in m.graph.node if n.name in group for o in n.output
              if not o.startswith(("ln_out", "probs"))}                # the forms' results
    assert len(group) == 48 and not inside & quantized
    r = onnx_mrvl.convert(m, quantize="int8", calibration=calib)
    assert len(r.report.regions) == 1 and not list(r.report.cpu_nodes())
    r.save(str(tmp_path / "m"), overwrite=True)
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "m" / "model.onnx"))
    ref = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    fp32 = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for f in _x_feeds(3, 2):
        a, b, c = ours.run(None, f)[0], ref.run(None, f)[0], fp32.run(None, f)[0]
        ours_err = np.abs(a - c).max() / np.abs(c).max()
        ort_err = np.abs(b - c).max() / np.abs(c).max()
        assert ours_err <= max(1.25 * ort_err, 2e-2), (ours_err, ort_err)
        assert np.abs(a - b).max() <= 2e-3 * np.abs(b).max()     # fp16 norms / softmax vs fp32 ones (1e-4)
