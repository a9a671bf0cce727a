"""A QDQ ``ReduceMean`` over axes (2, 3) of an NCHW map (PSPNet's bin-1 pyramid pool, any
``x.mean((2, 3), keepdim=True)``) that onnxruntime runs in float between DQ and Q. Where its plan
keeps the mean on NCHW (its KR path) each channel's H*W values are summed by Eigen's row sum (SSE
packets); where its layout transformer moved the mean onto channels-last data (after its NHWC
QLinearConv: axes 1, 2, the RK path) in order. The int8 GlobalAvgPool2D with requant float summed in
order always: on smp PSPNet S8 (KR) 1 code of 128 channels differed and the decoder carried it to 15%
of the output. fuse now reads the plan (``ort_plan.MEAN_ROWS``) and records ``mean_sum`` rows. These
seeded models hit no tie either way: they check the structure (which order) and bit-exactness; the
PSPNet S8 survey row (94.9% -> 100%) is the case that moved."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.testing.int8_zoo import quantize_static_qdq

pytest.importorskip("onnxruntime.quantization")
mk = helper.make_node


def mean_model(c=512, hw=32, residual=True):
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("w0", onnx.TensorProto.FLOAT, [c, 3, 3, 3],
                                (rng.standard_normal((c, 3, 3, 3)) * 0.4).astype(np.float32).ravel()),
             helper.make_tensor("w1", onnx.TensorProto.FLOAT, [c, c, 1, 1], np.eye(c, dtype=np.float32).ravel()),
             helper.make_tensor("axes", onnx.TensorProto.INT64, [2], [2, 3])]
    inits.append(helper.make_tensor("w2", onnx.TensorProto.FLOAT, [c, 3, 1, 1],
                                    (rng.standard_normal((c, 3, 1, 1)) * 0.4).astype(np.float32).ravel()))
    nodes = [mk("Conv", ["x", "w0"], ["a0"], pads=[1, 1, 1, 1]), mk("Relu", ["a0"], ["r0"]),
             mk("Conv", ["x", "w2"], ["b"]), mk("Add", ["r0", "b"], ["a"]),   # a residual Add, as ResNet's
             mk("Relu", ["a"], ["r"])] if residual else [
             mk("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), mk("Relu", ["a"], ["r"])]
    nodes += [
             mk("ReduceMean", ["r", "axes"], ["m"], keepdims=1),
             mk("Conv", ["m", "w1"], ["y"])]   # a 1x1 identity: each mean's code shows in the output
    g = helper.make_graph(nodes, "mean_rows", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, hw, hw])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("residual", [True, False])
def test_trailing_axes_mean_follows_onnxruntime_row_sums(tmp_path, residual):
    """After a residual Add onnxruntime's plan keeps the mean over NCHW axes 2, 3 (row sums: the layer
    records ``mean_sum`` rows); straight after its channels-last QLinearConv its layout transformer
    moves the mean onto NHWC axes 1, 2 (an in-order sum: no ``mean_sum``). Both bit-exact."""
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(mean_model(residual=residual), src)
    rng = np.random.default_rng(1)
    cal = [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)]
    quantize_static_qdq(src, dst, cal)
    res = onnx_mrvl.convert(dst)
    model_path = res.save(str(tmp_path / "out"))
    folder = os.path.dirname(model_path)
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    nodes = json.load(open(os.path.join(folder, "mrvl_region_0-nodes.json")))["nodes"]
    gap = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["GlobalAvgpool2D"]]
    assert gap and gap[0].get("requant") == ["float"], gap
    assert gap[0].get("mean_sum") == (["rows"] if residual else None), gap[0].get("mean_sum")
    ours = onnx_mrvl.InferenceSession(model_path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
    same = total = 0
    for s in range(20, 32):
        f = {"x": (2 * np.random.default_rng(s).standard_normal((1, 3, 32, 32))).astype(np.float32)}
        a, b = ours.run(None, f)[0], ref.run(None, f)[0]
        same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same == total, f"{same} of {total} identical"


@pytest.mark.parametrize("residual", [True, False])
def test_row_sum_mean_with_quark_scale(tmp_path, residual):
    """Both session-12 changes to the float mean on one layer (merged tree): the mean's summation order
    (``mean_sum`` rows where onnxruntime's plan keeps NCHW) and Quark's ``mean * 1.00488281`` before
    the Q (``out_mul``): the layer records both and stays bit-exact to onnxruntime over 12 inputs."""
    from onnx import numpy_helper
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(mean_model(residual=residual), src)
    rng = np.random.default_rng(1)
    quantize_static_qdq(src, dst, [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(4)])
    m = onnx.load(dst)
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "m")
    q.input[0] = "mc"   # ReduceMean -> Mul(c) -> Q, as Quark writes its average pools
    m.graph.initializer.append(numpy_helper.from_array(np.float32(1.00488281), "quark_c"))
    m.graph.node.insert(list(m.graph.node).index(q), helper.make_node("Mul", ["m", "quark_c"], ["mc"], name="mean_mul"))
    onnx.save(m, dst)
    res = onnx_mrvl.convert(dst)
    model_path = res.save(str(tmp_path / "out"))
    assert len(res.report.regions) == 1 and not res.report.cpu_nodes()
    nodes = json.load(open(os.path.join(os.path.dirname(model_path), "mrvl_region_0-nodes.json")))["nodes"]
    gap = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["GlobalAvgpool2D"]]
    assert gap and gap[0].get("requant") == ["float"] and gap[0].get("out_mul") == [1.0048828125], gap
    assert gap[0].get("mean_sum") == (["rows"] if residual else None), gap[0].get("mean_sum")
    ours = onnx_mrvl.InferenceSession(model_path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"])
    for s in range(20, 32):
        f = {"x": (2 * np.random.default_rng(s).standard_normal((1, 3, 32, 32))).astype(np.float32)}
        a, b = ours.run(None, f)[0], ref.run(None, f)[0]
        assert np.array_equal(a, b), f"input {s}: {int(np.count_nonzero(a != b))} of {a.size} differ"
