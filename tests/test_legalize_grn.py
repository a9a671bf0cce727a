"""legalize's grn_norm (ConvNeXt-V2's Global Response Normalization: a spatial L2 norm divided by its
channel mean) -> GlobalAveragePool of squares, Sqrt, RMS norm over C, square: exact in fp32 against
onnxruntime on the original model, no ReduceL2 / Div left on the CPU, one region, the simulator within
the fp16 bound (1e-2)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize import shapes
from onnx_mrvl.legalize.graph import Graph
from onnx_mrvl.legalize.rules import grn_norm
from onnx_mrvl.target import Target


def _grn(channels_last: bool, opset: int, l2: str = "ReduceL2", hw=(12, 10), c=16, seed=0) -> onnx.ModelProto:
    """Conv 3x3 -> [Transpose NHWC] -> Conv-as-MatMul -> GRN (x + gamma (x * n) + beta) -> MatMul ->
    [Transpose back], the block ConvNeXt-V2 writes (HF / official code channels-last, timm NCHW)."""
    r = np.random.default_rng(seed)
    f = np.float32
    inits = [nh.from_array((r.standard_normal((c, 3, 3, 3)) * 0.3).astype(f), "w0"),
             nh.from_array((r.standard_normal((c, c)) * 0.3).astype(f), "w1"),
             nh.from_array((r.standard_normal((c, c)) * 0.3).astype(f), "w2"),
             nh.from_array(np.array(1e-6, f), "eps")]
    spatial, chan = ([1, 2], [-1]) if channels_last else ([2, 3], [1])
    aff = [1, 1, 1, c] if channels_last else [1, c, 1, 1]
    inits += [nh.from_array((0.5 * r.standard_normal(aff)).astype(f), "gamma"),
              nh.from_array((0.1 * r.standard_normal(aff)).astype(f), "beta")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv", pads=[1] * 4)]
    if channels_last:
        nodes += [helper.make_node("Transpose", ["c0"], ["t"], perm=[0, 2, 3, 1]),
                  helper.make_node("MatMul", ["t", "w1"], ["h"], name="pw1")]
    else:
        nodes += [helper.make_node("Conv", ["c0", "w1_4d"], ["h"], name="pw1")]
        inits.append(nh.from_array(r.standard_normal((c, c, 1, 1)).astype(f) * 0.3, "w1_4d"))
    nodes.append(helper.make_node("Relu", ["h"], ["a"]))

    def reduce(op, x, y, axes, **kw):
        if opset >= 18:
            name = f"{y}_axes"
            inits.append(nh.from_array(np.array(axes, np.int64), name))
            return helper.make_node(op, [x, name], [y], keepdims=1, **kw)
        return helper.make_node(op, [x], [y], axes=axes, keepdims=1, **kw)

    if l2 == "ReduceL2":
        nodes.append(reduce("ReduceL2", "a", "gx", spatial, name="grn_l2"))
    else:   # Sqrt(ReduceSumSquare), tf2onnx-style
        nodes += [reduce("ReduceSumSquare", "a", "ss", spatial), helper.make_node("Sqrt", ["ss"], ["gx"])]
    nodes += [reduce("ReduceMean", "gx", "gm", chan),
              helper.make_node("Add", ["gm", "eps"], ["gd"]),
              helper.make_node("Div", ["gx", "gd"], ["nx"], name="grn_div"),
              helper.make_node("Mul", ["a", "nx"], ["an"]),
              helper.make_node("Mul", ["gamma", "an"], ["ga"]),
              helper.make_node("Add", ["ga", "beta"], ["gb"]),
              helper.make_node("Add", ["gb", "a"], ["g"])]
    if channels_last:
        nodes += [helper.make_node("MatMul", ["g", "w2"], ["p"], name="pw2"),
                  helper.make_node("Transpose", ["p"], ["y"], perm=[0, 3, 1, 2])]
    else:
        nodes.append(helper.make_node("Conv", ["g", "w2_4d"], ["y"], name="pw2"))
        inits.append(nh.from_array(r.standard_normal((c, c, 1, 1)).astype(f) * 0.3, "w2_4d"))
    g = helper.make_graph(nodes, "grn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, *hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


CASES = {
    "hf_channels_last_op17": lambda: _grn(True, 17),
    "dynamo_channels_last_op18": lambda: _grn(True, 18, hw=(40, 40)),
    "timm_nchw_op13": lambda: _grn(False, 13, hw=(7, 9)),
    "sumsquare_sqrt_op13": lambda: _grn(True, 13, l2="ReduceSumSquare"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grn_on_the_accelerator(name, tmp_path):
    m = CASES[name]()
    feeds = {"x": np.random.default_rng(1).standard_normal(
        [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    res = legalize(m)
    kinds = {n.op_type for n in res.model.graph.node}
    assert not {"ReduceL2", "ReduceSumSquare"} & kinds
    assert any(rule == "grn_norm" for rule, _, _ in res.report.applied)
    got = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max()
    conv = onnx_mrvl.convert(m)
    assert len(conv.subgraphs) == 1 and not conv.report.cpu_nodes(), [d.op_type for d in conv.report.cpu_nodes()]
    assert conv.report.decisions["grn_div"].placement == "accelerator"
    y = onnx_mrvl.InferenceSession(conv.save(str(tmp_path / "out"))).run(None, feeds)[0]
    assert np.abs(y - ref).max() <= 1e-2 * np.abs(ref).max()


def _l2_read_twice():
    m = _grn(True, 17)
    m.graph.node.append(helper.make_node("Mul", ["gx", "gx"], ["gx2"]))
    m.graph.output.append(helper.make_tensor_value_info("gx2", TensorProto.FLOAT, None))
    return m


def test_l2_read_elsewhere_is_left_with_reason():
    m = _l2_read_twice()
    g = Graph(m)
    shapes.infer(g, list(m.graph.input), list(m.graph.output))
    div = next(n for n in g.toposort() if n.name == "grn_div")
    assert grn_norm.check(grn_norm.match(div, g), g, Target()) == "the L2 norm is read outside GRN's divide"
    assert "ReduceL2" in {n.op_type for n in legalize(_l2_read_twice()).model.graph.node}
