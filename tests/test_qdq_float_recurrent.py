"""A float LSTM / GRU inside a QDQ model (onnxruntime's ``quantize_static`` leaves recurrent ops float:
``x -> Q -> DQ -> LSTM(W, R float) -> Q -> DQ``): onnxruntime runs it in fp32, the accelerator in fp16
(W, R, x and the per-step state). The decision says so (fuse/qdq_recurrent.py ``FLOAT_IN_QDQ``), and
the codes after it agree as docs/quantize.md states (one layer: >= 95% identical, the rest one code)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl

GATES = {"LSTM": 4, "GRU": 3}


def _model(cell: str, qdq: bool, steps=16, batch=2, feat=12, hid=16, seed=0):
    rng = np.random.default_rng(seed)
    g = GATES[cell]
    s = 1 / np.sqrt(hid)
    inits = [numpy_helper.from_array(rng.uniform(-s, s, shape).astype(np.float32), name)
             for name, shape in (("W", (1, g * hid, feat)), ("R", (1, g * hid, hid)), ("B", (1, 2 * g * hid)))]
    inits += [numpy_helper.from_array(np.array(1 / 64, np.float32), "sx"), numpy_helper.from_array(np.array(0, np.int8), "zx"),
              numpy_helper.from_array(np.array(1 / 127, np.float32), "sy"), numpy_helper.from_array(np.array(0, np.int8), "zy")]
    nodes, x = [], "x"
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
                  helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx")]
        x = "xd"
    nodes.append(helper.make_node(cell, [x, "W", "R", "B"], ["y"], name="rnn", hidden_size=hid,
                                  **({"linear_before_reset": 1} if cell == "GRU" else {})))
    out = "y"
    if qdq:
        nodes += [helper.make_node("QuantizeLinear", ["y", "sy", "zy"], ["yq"], name="qy"),
                  helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["yd"], name="dqy")]
        out = "yd"
    graph = helper.make_graph(nodes, "qdq_float_rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, feat])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [steps, 1, batch, hid])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("cell", sorted(GATES))
def test_float_recurrent_layer_in_a_qdq_model_is_labelled_and_agrees_as_documented(cell, tmp_path):
    m = _model(cell, qdq=True)
    res = onnx_mrvl.convert(m)
    d = res.report.decisions["rnn"]
    assert d.placement == "accelerator" and d.precision == "fp16"
    assert f"QDQ model's float {cell}" in d.reason and "fp32" in d.reason, d.reason
    x = np.random.default_rng(1).uniform(-1.5, 1.5, (16, 2, 12)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = onnx_mrvl.InferenceSession(res.save(str(tmp_path))).run(None, {"x": x})[0]
    codes = np.rint(np.asarray(got, np.float64) * 127) - np.rint(np.asarray(ref, np.float64) * 127)
    assert np.mean(codes == 0) >= 0.95 and np.abs(codes).max() <= 1, (np.mean(codes == 0), np.abs(codes).max())
    plain = onnx_mrvl.convert(_model(cell, qdq=False)).report.decisions["rnn"]
    assert "QDQ model" not in plain.reason
