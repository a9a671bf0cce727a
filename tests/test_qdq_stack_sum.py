"""A requantizing sum of n maps written as a stack (``torch.stack(maps).sum(0)``, smp FPN's merge) in a
QDQ model: legalize's ``qdq_stack_sum`` makes it a channel Concat + a 1x1 int8 conv of ones, so the
sum no longer sits on the CPU between two regions, and the result equals onnxruntime's own run of
the QDQ model element for element."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.testing import qdq_transformers as qt


def stack_sum(n: int = 4, c: int = 8, hw: int = 8, seed: int = 0) -> onnx.ModelProto:
    """x -> n x (Conv 3x3 -> Relu -> Unsqueeze(0)) -> Concat(axis 0) -> ReduceSum(axis 0) -> Conv 3x3."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], [numpy_helper.from_array(np.array([0], np.int64), "ax0")]

    def conv(x, y, i):
        inits.extend([numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.3 * (i + 1)).astype(np.float32), f"w{i}"),
                      numpy_helper.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), f"b{i}")])
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [y], pads=[1, 1, 1, 1]))
    for i in range(n):
        conv("x", f"c{i}", i)
        nodes += [helper.make_node("Relu", [f"c{i}"], [f"r{i}"]), helper.make_node("Unsqueeze", [f"r{i}", "ax0"], [f"u{i}"])]
    nodes += [helper.make_node("Concat", [f"u{i}" for i in range(n)], ["st"], axis=0),
              helper.make_node("ReduceSum", ["st", "ax0"], ["s"], keepdims=0)]
    conv("s", "y", n)
    g = helper.make_graph(nodes, "stack_sum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("n", [2, 4])
def test_qdq_stack_sum_is_one_region_bit_exact(tmp_path, monkeypatch, n):
    """Before: the Concat on the stack axis, its Q / DQ and the float ReduceSum on the CPU, 2 regions."""
    monkeypatch.setitem(qt.MODELS, "stack_sum", lambda: stack_sum(n))
    m = qt.convert_and_measure("stack_sum", str(tmp_path), "s8")
    assert m["regions"] == 1 and not m["cpu"], m["cpu"]
    agree = m["agreement"]["y"]
    assert agree["identical"] == 1.0 and agree["steps"] == 0.0, agree


def test_qdq_stack_sum_legalized_model_equals_the_qdq_model(tmp_path):
    """The legalized model (no ReduceSum; a channel Concat read by a Conv of DQ'd int8 ones) runs in
    plain onnxruntime equal to the QDQ model."""
    import onnxruntime as ort
    from onnx_mrvl.legalize import legalize
    qpath = qt.quantize(stack_sum(4, seed=1), str(tmp_path / "q.onnx"), "s8")
    out = legalize(onnx.load(qpath))
    model = getattr(out, "model", out)
    ops = [n.op_type for n in model.graph.node]
    assert "ReduceSum" not in ops and ops.count("Conv") == 6, ops
    x = qt.feeds(model, 3)
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"]).run(None, x)[0]
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_array_equal(got, ref)
