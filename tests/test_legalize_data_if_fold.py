"""fold_constants inside the cone of a data-dependent If condition: a condition that reads the input's
values cannot become static, so its cone (the whole model in front of it: openWakeWord hey_jarvis'
QDQ head, whose LayerNorms' quantized eps ``Q(const) -> DQ`` stayed unfolded and kept them on the CPU
between 4 regions) folds as any graph; a shape-only condition's cone is still left alone
(tests/test_control_flow.py, tests/test_conformance.py's affine_grid regression)."""
from onnx_mrvl.legalize.graph import Graph
from onnx_mrvl.legalize.rules.fold_constants import condition_cone
from onnx_mrvl.legalize.testing import legalize_and_compare
from onnx_mrvl.testing.data_if_models import norm_then_data_if


def test_constant_pair_in_front_of_a_data_dependent_if_folds():
    m = norm_then_data_if()
    assert not condition_cone(Graph(norm_then_data_if()))   # reads the input's values: no cone kept
    out, _ = legalize_and_compare(m)             # numbers vs onnxruntime (1e-5)
    ops = [n.op_type for n in out.graph.node]
    assert "QuantizeLinear" not in ops and "If" in ops, ops
