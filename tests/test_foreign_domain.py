"""Operators of another domain than ONNX's that legalize leaves are never fused by their op type
(fuse._foreign): onnxruntime's ORT_ENABLE_ALL-saved models (its default level) hold
com.microsoft.nchwc ``Conv`` / ``GlobalAveragePool`` / ``ReorderInput`` / ``ReorderOutput`` in its CPU's
blocked channel layout; the fuse patterns took the ``Conv`` for ONNX's and the region computed
garbage (an fp16 overflow error on MobileNetV2 dynamic int8). They run in onnxruntime with the
reason, the ONNX ops around them stay offloaded, and the output is onnxruntime's."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

import onnx_mrvl

TOL = 1e-2      # docs/simulator.md: max|y_sim - y_ref| <= 1e-2 * max|y_ref|


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """[1, 3, 16, 16] -> Conv 3x3 (16) -> Relu -> Conv 3x3 (16) -> Relu -> GAP -> Flatten -> Gemm (10)."""
    rng = np.random.default_rng(seed)
    w = lambda *s: nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32))  # noqa: E731
    inits = []
    for name, arr in (("w1", w(16, 3, 3, 3)), ("b1", w(16)), ("w2", w(16, 16, 3, 3)), ("b2", w(16)),
                      ("wf", w(10, 16)), ("bf", w(10))):
        arr.name = name
        inits.append(arr)
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             h.make_node("GlobalAveragePool", ["r2"], ["p"], name="gap"),
             h.make_node("Flatten", ["p"], ["f"], name="flatten"),
             h.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    g = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", TP.FLOAT, [1, 3, 16, 16])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, 10])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)])


def test_nchwc_ops_of_an_ort_all_saved_model_stay_on_the_cpu(tmp_path):
    src, saved = str(tmp_path / "cnn.onnx"), str(tmp_path / "cnn.all.onnx")
    onnx.save(small_cnn(), src)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = saved
    so.log_severity_level = 3
    ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    model = onnx.load(saved)
    nchwc = {n.name: n.op_type for n in model.graph.node if n.domain == "com.microsoft.nchwc"}
    if not any(op == "Conv" for op in nchwc.values()):
        pytest.skip("this CPU's onnxruntime writes no NCHWc layout")
    x = {"x": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ref = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, x)[0]
    result = onnx_mrvl.convert(saved)
    result.save(str(tmp_path / "out"), overwrite=True)
    cpu = {d.node: d.reason for d in result.report.cpu_nodes()}
    for name in nchwc:
        assert name in cpu and "com.microsoft.nchwc::" in cpu[name] and "NCHWc" in cpu[name], (name, cpu.get(name))
    fc = [d for d in result.report if d.node == "fc"]
    assert fc and all(d.placement == "accelerator" for d in fc)      # the ONNX ops after them still offload
    got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, x)[0]
    assert np.isfinite(got).all() and np.abs(got - ref).max() <= TOL * np.abs(ref).max()


@pytest.mark.parametrize("act", ["u8", "s8"])
def test_channels_last_qlinear_of_an_ort_all_saved_qdq_model(act, tmp_path):
    """A QDQ model saved at ORT_ENABLE_ALL: onnxruntime's NhwcTransformer writes com.microsoft
    QLinearConv / QLinearGlobalAveragePool with channels_last=1 between Transposes (they stayed on
    the CPU: 0 regions). qlinear_to_qdq makes them the NCHW ops with the Transposes on the codes, which
    cancel: one region, and exactly what the import makes of the QDQ model it came from."""
    from onnxruntime import quantization as q
    src, qdq, saved = (str(tmp_path / f) for f in ("cnn.onnx", "cnn.qdq.onnx", "cnn.all.onnx"))
    onnx.save(small_cnn(), src)
    rng = np.random.default_rng(0)
    samples = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(samples, None)

    q.quantize_static(src, qdq, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      activation_type=q.QuantType.QUInt8 if act == "u8" else q.QuantType.QInt8,
                      weight_type=q.QuantType.QInt8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = saved
    so.log_severity_level = 3
    ort.InferenceSession(qdq, so, providers=["CPUExecutionProvider"])
    nhwc = [n for n in onnx.load(saved).graph.node
            if n.domain == "com.microsoft" and any(a.name == "channels_last" and a.i for a in n.attribute)]
    if not any(n.op_type == "QLinearConv" for n in nhwc):
        pytest.skip("this onnxruntime writes no channels_last QLinearConv")
    x = {"x": np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    got = {}
    for name, path in (("saved", saved), ("qdq", qdq)):
        result = onnx_mrvl.convert(path)
        result.save(str(tmp_path / name), overwrite=True)
        got[name] = onnx_mrvl.InferenceSession(str(tmp_path / name / "model.onnx")).run(None, x)[0]
        if name == "saved":
            assert len(result.subgraphs) == 1
            assert {d.op_type for d in result.report.cpu_nodes()} <= {"QuantizeLinear"}   # the input's, on the host
            assert all(result.report[n.name].placement == "accelerator" for n in nhwc)
    np.testing.assert_array_equal(got["saved"], got["qdq"])
    ref = ort.InferenceSession(saved, providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert np.array_equal(ref, ort.InferenceSession(qdq, providers=["CPUExecutionProvider"]).run(None, x)[0])
