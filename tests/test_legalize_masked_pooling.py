"""Legalization of masked mean pooling (sentence-transformers, seq2seq bridges): ``(h * m).sum(1) /
m.sum(1).clamp(min)`` with ``m`` from an integer / boolean mask input. The token-axis ReduceSum of a
3-D tensor becomes a ReduceMean x T (reducesum_to_mean, then a pool) and the Div by the host's token
count a Mul by its Reciprocal computed on the host (div_host_divisor): the head after the pooling
joins the encoder's region (arabic-name-romanizer's encoder bridge, docs/surveys/trained-text.md)."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.legalize.testing import legalize_and_compare, op_types

mk = helper.make_node
B, T, C = 2, 10, 16


def pooled(mask_type=TensorProto.INT64, divisor="mask", seed=0):
    """x [B, T, C] -> MatMul -> Relu = h; m = Cast(Unsqueeze(mask, -1)); pooled = ReduceSum(h * m, 1) /
    Clip(ReduceSum(m, 1), 1e-9) -> MatMul -> Tanh. ``divisor`` "float": the divisor is the L2 norm of
    the pooled vector instead (a float tensor: left as it is)."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((C, C)) * 0.3).astype(np.float32), "W1"),
             numpy_helper.from_array((rng.standard_normal((C, 8)) * 0.3).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array([1], np.int64), "tok"),
             numpy_helper.from_array(np.array(1e-9, np.float32), "eps")]
    nodes = [mk("MatMul", ["x", "W1"], ["hm"], name="proj"), mk("Relu", ["hm"], ["h"], name="relu"),
             mk("Unsqueeze", ["mask", "last"], ["mu"], name="unsqueeze"),
             mk("Cast", ["mu"], ["m"], name="cast", to=TensorProto.FLOAT),
             mk("Mul", ["h", "m"], ["hmask"], name="masked"),
             mk("ReduceSum", ["hmask", "tok"], ["s"], name="sum", keepdims=0)]
    if divisor == "mask":
        nodes += [mk("ReduceSum", ["m", "tok"], ["n"], name="count", keepdims=0),
                  mk("Clip", ["n", "eps"], ["nc"], name="clamp")]
    else:
        nodes += [mk("ReduceL2", ["s"], ["nc"], name="norm", axes=[-1], keepdims=1)]
    nodes += [mk("Div", ["s", "nc"], ["e"], name="mean"), mk("MatMul", ["e", "W2"], ["o"], name="head"),
              mk("Tanh", ["o"], ["y"], name="tanh")]
    g = helper.make_graph(nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, T, C]),
                                            helper.make_tensor_value_info("mask", mask_type, [B, T])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def _feeds(m, seed=1):
    rng = np.random.default_rng(seed)
    mask = np.ones((B, T), np.int64)
    mask[0, 6:] = 0
    mask[1, 3:] = 0
    dt = m.graph.input[1].type.tensor_type.elem_type
    return {"x": rng.standard_normal((B, T, C)).astype(np.float32),
            "mask": mask.astype(bool) if dt == TensorProto.BOOL else mask}


def applied(log, rule):
    return [names for r, names, _ in log if r == rule]


@pytest.mark.parametrize("mask_type", [TensorProto.INT64, TensorProto.BOOL])
def test_token_count_divisor_becomes_a_host_reciprocal(mask_type):
    out, log = legalize_and_compare(pooled(mask_type))
    assert applied(log, "div_host_divisor") and applied(log, "reducesum_to_mean")
    assert "Div" not in op_types(out) and "Reciprocal" in op_types(out)


def test_float_divisor_is_left_alone():
    out, log = legalize_and_compare(pooled(divisor="float"))
    assert not applied(log, "div_host_divisor")
    assert "Div" in op_types(out)


@pytest.mark.parametrize("mask_type", [TensorProto.INT64, TensorProto.BOOL])
def test_masked_mean_pooling_and_head_are_one_region_within_fp16(mask_type, tmp_path):
    m = pooled(mask_type)
    f = _feeds(m)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    conv = onnx_mrvl.convert(m)
    assert len(conv.report.regions) == 1
    cpu = {d.node for d in conv.report.cpu_nodes()}
    assert cpu <= {"unsqueeze", "cast", "count", "clamp", "mean"}, cpu   # the mask's bookkeeping alone
    assert {"proj", "masked", "sum", "head", "tanh"}.isdisjoint(cpu)
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, f)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


def test_qdq_model_keeps_its_division(tmp_path):
    """In a QDQ model the pooling tail is onnxruntime's fp32 ops on the host: x / d keeps its bits."""
    from onnx_mrvl.legalize import legalize
    from onnx_mrvl.testing.int8_zoo import quantize_static_qdq
    m = pooled()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(m, src)
    quantize_static_qdq(src, dst, [_feeds(m, s) for s in range(3)])
    res = legalize(onnx.load(dst))
    assert not applied(res.log, "div_host_divisor")
    assert "Div" in op_types(res.model)


def test_dynamic_int8_model_pools_in_the_region(tmp_path):
    """quantize_dynamic of the same model (MatMulInteger, DynamicQuantizeLinear; legalize writes the
    calibrated form with QuantizeLinear nodes): its pooling tail reads float activations, not a QDQ
    pair, so the division is the host's reciprocal and the head joins the region (romanizer encoder
    dyn: 2 regions -> 1; the QuantizeLinear nodes elsewhere in the graph had made it "a QDQ model")."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnx_mrvl.legalize import legalize
    m = pooled()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "d.onnx")
    onnx.save(m, src)
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    res = legalize(onnx.load(dst))
    assert applied(res.log, "div_host_divisor")
    conv = onnx_mrvl.convert(dst)
    assert len(conv.report.regions) == 1
    cpu = {d.node for d in conv.report.cpu_nodes()}
    assert cpu <= {"unsqueeze", "cast", "count", "clamp", "mean"}, cpu   # the mask's bookkeeping alone
