"""Legalization: an If whose condition the static shapes decide (torch.onnx's TorchScript
``squeeze(dim)`` of an axis of unknown size: ``If(Equal(Gather(Shape(t), dim), 1))``) becomes the branch
it takes (if_static_branch): exact, and the model is one region (akiki's GRU VAD: 2 regions -> 1,
docs/surveys/trained-text.md). A condition that reads data stays an If."""
import numpy as np
import onnxruntime as ort
import pytest

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import feeds_for, legalize_and_compare, op_types
from onnx_mrvl.testing.control_flow_models import squeeze_if


def applied(log, rule):
    return [names for r, names, _ in log if r == rule]


@pytest.mark.parametrize("last", [1, 3])
def test_static_condition_inlines_the_taken_branch(last):
    out, log = legalize_and_compare(squeeze_if(last=last), input_shapes={"x": [2, 16 * last]})
    assert applied(log, "if_static_branch")
    ops = op_types(out)
    assert "If" not in ops and "Equal" not in ops and "Shape" not in ops
    assert out.graph.output[0].type.tensor_type.shape.dim[-1].dim_value == (4 if last == 1 else 3)


@pytest.mark.parametrize("opset", [13, 17])
def test_squeeze_if_model_is_one_region_within_fp16(opset, tmp_path):
    m = squeeze_if(opset=opset)
    f = feeds_for(m, 2, {"x": [2, 16]})
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)[0]
    conv = onnx_mrvl.convert(m, input_shapes={"x": [2, 16]})
    assert len(conv.report.regions) == 1
    assert not list(conv.report.cpu_nodes()), [(d.node, d.op_type, d.reason) for d in conv.report.cpu_nodes()]
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, f)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


def test_condition_on_data_stays_an_if():
    res = legalize(squeeze_if(data_cond=True), input_shapes={"x": [2, 16]})
    assert not applied(res.log, "if_static_branch")
    assert "If" in op_types(res.model)
