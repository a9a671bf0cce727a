"""benchmarks/fma_peak.py: a model's multiply-adds (the FMA floor's numerator) and one core's FMA peak."""
import math
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from fma_peak import fma_peak_gflops, model_macs  # noqa: E402


def test_model_macs_counts_conv_grouped_conv_gemm_and_matmul():
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)        # 3 -> 16, 3x3, stride 2, pad 1
    w2 = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)        # depthwise 16
    g = rng.standard_normal((16, 10)).astype(np.float32)
    m = rng.standard_normal((10, 4)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w2"], ["b"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["b"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "g"], ["h"]),
             helper.make_node("MatMul", ["h", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(v, k) for k, v in (("w1", w1), ("w2", w2), ("g", g), ("m", m))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    want = 2 * 16 * 16 * 16 * 27 + 2 * 16 * 16 * 16 * 9 + 2 * 10 * 16 + 2 * 4 * 10
    assert model_macs(model) == want


def test_fma_peak_is_a_rate():
    from onnx_mrvl.sim import native
    peak = fma_peak_gflops(runs=2, n=2_000_000)
    if not native.on():
        assert math.isnan(peak)
    else:
        assert 1.0 < peak < 10_000.0
