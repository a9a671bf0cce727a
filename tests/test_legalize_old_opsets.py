"""Opset 1-6 models are converted with onnx.version_converter (they used to be refused: "opset 6 is
older than the oldest supported (7)"). Numbers: against onnxruntime on the original where onnxruntime
runs it (opset 6 without BatchNormalization), else against the same network written at opset 13."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.errors import ModelError
from onnx_mrvl.legalize import legalize

R = np.random.default_rng(11)
WEIGHTS = {"W": (R.standard_normal([8, 3, 3, 3]) * 0.3).astype(np.float32),
           "s": (1 + 0.1 * R.standard_normal(8)).astype(np.float32),
           "b": (0.1 * R.standard_normal(8)).astype(np.float32),
           "m": (0.1 * R.standard_normal(8)).astype(np.float32),
           "v": (1 + 0.5 * R.random(8)).astype(np.float32),
           "fcw": (R.standard_normal([512, 10]) * 0.05).astype(np.float32),
           "fcb": (0.1 * R.standard_normal(10)).astype(np.float32)}


def net(opset: int, bn: bool = True) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Relu -> MaxPool -> flatten -> Gemm in the attribute forms of
    ``opset`` (BN-1 ``consumed_inputs``/``is_test``, Relu-1 ``consumed_inputs``, Reshape-1 ``shape``,
    Gemm-6 ``broadcast``); IR 3 lists the initializers as graph inputs."""
    old = opset < 7
    bn_kw = dict(epsilon=1e-5, **(dict(is_test=1) if old else {}), **(dict(consumed_inputs=[0, 0, 0, 1, 1]) if opset < 6 else {}))
    nodes = [h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3])]
    if bn:
        nodes.append(h.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn", **bn_kw))
    nodes += [h.make_node("Relu", ["bn" if bn else "c"], ["r"], name="relu", **(dict(consumed_inputs=[0]) if opset < 6 else {})),
              h.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
              (h.make_node("Reshape", ["p"], ["f"], name="flat", shape=[1, 512]) if opset < 5 else
               h.make_node("Flatten", ["p"], ["f"], name="flat", axis=1)),
              h.make_node("Gemm", ["f", "fcw", "fcb"], ["y"], name="fc", **(dict(broadcast=1) if old else {}))]
    inits = [nh.from_array(v, k) for k, v in WEIGHTS.items() if bn or k not in "sbmv"]
    ins = [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16])]
    if old:
        ins += [h.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    g = h.make_graph(nodes, "old", ins, [h.make_tensor_value_info("y", T.FLOAT, [1, 10])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 3 if old else 7
    return m


def _ort(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


X = np.random.default_rng(0).standard_normal([1, 3, 16, 16]).astype(np.float32)


@pytest.mark.parametrize("opset", [1, 3, 5, 6])
def test_old_opset_converted_and_offloaded(opset, tmp_path):
    model = net(opset)
    res = legalize(model)
    legal, report = res.model, res.report
    assert report.opset == (opset, 13)
    assert "BatchNormalization" not in [n.op_type for n in legal.graph.node]   # folded into the conv
    result = onnx_mrvl.convert(model)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": X})[0]
    want = _ort(net(13), X)        # onnxruntime has no BatchNormalization-1/6 kernel: the same net at 13
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
    assert np.abs(_ort(legal, X) - want).max() <= 1e-5 * np.abs(want).max()


def test_opset_6_model_onnxruntime_runs(tmp_path):
    """Conv-1 -> Relu-6 -> MaxPool-1: onnxruntime runs the opset 6 original itself (it has no
    BatchNormalization-6 or Gemm-6 kernel)."""
    nodes = [h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    w = nh.from_array(WEIGHTS["W"], "W")
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 16, 16]),
                                  h.make_tensor_value_info("W", T.FLOAT, [8, 3, 3, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 8, 8])], [w])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 6)])
    model.ir_version = 3
    want = _ort(model, X)
    result = onnx_mrvl.convert(model)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x1"]
    got = onnx_mrvl.InferenceSession(result.save(str(tmp_path))).run(None, {"x": X})[0]
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()


def test_old_opset_that_cannot_convert_is_refused(monkeypatch):
    """When the converter fails on an opset < 7 model the result would be a model onnxruntime
    refuses: a clear error instead (opset >= 7 models keep their opset, as before)."""
    def fail(model, version):
        raise RuntimeError("no adapter")
    monkeypatch.setattr(onnx.version_converter, "convert_version", fail)
    with pytest.raises(ModelError, match="opset 5 model cannot be converted to opset 13") as e:
        onnx_mrvl.convert(net(5))
    assert "opset 7 or newer" in str(e.value)
    res = legalize(net(7))
    legal, report = res.model, res.report
    assert report.opset == (7, 7)
