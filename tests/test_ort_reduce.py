"""onnxruntime's fp32 ReduceMean orders (sim/ort_reduce.py) and the decomposed layer norm built on
them (int8_transformer.layernorm_inner), bit for bit against onnxruntime's CPU kernels."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from onnx_mrvl.sim import ort_reduce
from onnx_mrvl.sim.int8_transformer import layernorm_inner

F32 = np.float32
mk = helper.make_node


def _session(nodes, shape, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # the ops one by one
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("shape,axis", [((1, 64, 40), 2), ((1, 40, 64), 2), ((1, 197, 768), 2), ((1, 300, 37), 2),
                                        ((4, 8, 64, 40), 3), ((3, 7, 3), 2), ((1, 50, 19), 2),
                                        ((1, 64, 40), 1), ((1, 96, 197), 1), ((1, 1, 7, 13), 2)])
def test_mean_is_onnxruntimes(shape, axis):
    """Last axis: Eigen's packet order (row heads before the 16-byte boundary); a strided axis with
    only 1s before it: in order. numpy's own order differs on the last axis (so the test can fail)."""
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 2 + 0.5).astype(F32)
    y = _session([mk("ReduceMean", ["x"], ["y"], axes=[axis], keepdims=1)], shape).run(None, {"x": x})[0]
    strided = axis != len(shape) - 1
    assert np.array_equal(ort_reduce.mean(x, axis, strided=strided), y)
    if not strided and shape[-1] >= 40:
        assert not np.array_equal(np.mean(x, axis=axis, keepdims=True, dtype=F32), y)


@pytest.mark.parametrize("split", [True, False])
def test_decomposed_layernorm_is_onnxruntimes(split):
    """A layer norm onnxruntime runs op by op (the mean over C before the Transpose when ``split``),
    its fp32 result bit-identical to layernorm_inner's (no interior pairs: every sum shows)."""
    C, T = 96, 50
    rng = np.random.default_rng(3)
    gamma = (1 + 0.2 * rng.standard_normal(C)).astype(F32)
    beta = (0.1 * rng.standard_normal(C)).astype(F32)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, list(v.shape), v.reshape(-1).tolist())
             for n, v in (("two", np.array(2.0, F32)), ("eps", np.array(1e-5, F32)), ("gamma", gamma), ("beta", beta))]
    head = ([mk("ReduceMean", ["x"], ["m"], axes=[1], keepdims=1), mk("Sub", ["x", "m"], ["d"]),
             mk("Transpose", ["d"], ["dt"], perm=[0, 2, 1])] if split else
            [mk("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), mk("ReduceMean", ["xt"], ["m"], axes=[-1], keepdims=1),
             mk("Sub", ["xt", "m"], ["dt"])])
    nodes = head + [mk("Pow", ["dt", "two"], ["sq"]), mk("ReduceMean", ["sq"], ["v"], axes=[-1], keepdims=1),
                    mk("Add", ["v", "eps"], ["ve"]), mk("Sqrt", ["ve"], ["sd"]), mk("Div", ["dt", "sd"], ["n"]),
                    mk("Mul", ["n", "gamma"], ["g"]), mk("Add", ["g", "beta"], ["y"])]
    sess = _session(nodes, (1, C, T), inits)
    x = (rng.standard_normal((1, C, T)) * 2 + 0.5).astype(F32)
    ref = sess.run(None, {"x": x})[0]
    xt = np.ascontiguousarray(x.transpose(0, 2, 1))
    y, ok = layernorm_inner(xt, -1, 1e-5, gamma, beta, [None] * 4, mean_strided=split)
    assert ok and np.array_equal(y, ref), f"{np.count_nonzero(y != ref)} of {y.size} differ"
    if split:   # the last-axis order for that mean is not onnxruntime's
        y2, _ = layernorm_inner(xt, -1, 1e-5, gamma, beta, [None] * 4)
        assert not np.array_equal(y2, ref)
