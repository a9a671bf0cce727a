"""A QDQ InstanceNormalization (smp's GroupNorm as torch exports it: ``DQ -> InstanceNormalization ->
Q``) that onnxruntime runs in fp32 with its InstanceNorm kernel: legalize's group_norm writes a
LayerNormalization marked ``ort_plan.mark_instance_norm``, fuse gives the int8_out LayerNorm
``ort_kernel`` = "instance_norm" and the simulator follows that kernel's fp32 order
(``sim/ort_reduce.instance_norm``), bit for bit with onnxruntime's codes."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.sim.norm_ops import layernorm_onnxruntime
from onnx_mrvl.sim.ort_reduce import instance_norm

F32 = np.float32


def qdq_instance_norm(shape=(1, 8, 300), s_x=0.05, z_x=119, s_y=0.031, z_y=123, scale=1.0000002, bias=0.25):
    """``Q -> DQ -> InstanceNormalization(scale, bias: one value for every channel) -> Q -> DQ`` (uint8)."""
    c = shape[1]
    inits = [numpy_helper.from_array(np.array(v, d), n) for n, v, d in
             (("sx", s_x, F32), ("zx", z_x, np.uint8), ("sy", s_y, F32), ("zy", z_y, np.uint8))]
    inits += [numpy_helper.from_array(np.full(c, scale, F32), "gn_scale"),
              numpy_helper.from_array(np.full(c, bias, F32), "gn_bias")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("InstanceNormalization", ["xd", "gn_scale", "gn_bias"], ["n"], name="gn", epsilon=1e-5),
             helper.make_node("QuantizeLinear", ["n", "sy", "zy"], ["nq"]),
             helper.make_node("DequantizeLinear", ["nq", "sy", "zy"], ["y"])]
    g = helper.make_graph(nodes, "qdq_instance_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_instance_norm_kernel_order_equals_onnxruntime():
    """sim/ort_reduce.instance_norm is onnxruntime's InstanceNormalization bit for bit (rows with and
    without a 16-byte aligned start, short rows); its LayerNormalization order differs."""
    rng = np.random.default_rng(3)
    for shape in ((1, 32, 1024), (2, 16, 37), (1, 8, 5), (1, 4, 4099)):
        m = qdq_instance_norm(shape)
        g = helper.make_graph([helper.make_node("InstanceNormalization", ["x", "gn_scale", "gn_bias"], ["y"], epsilon=1e-5)],
                              "in", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [i for i in m.graph.initializer if i.name.startswith("gn_")])
        fm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        fm.ir_version = 8
        x = (rng.standard_normal(shape) * 3 + 1).astype(F32)
        want = ort.InferenceSession(fm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = instance_norm(x.reshape(-1, shape[-1]), 1e-5, 1.0000002, 0.25).reshape(shape)
        assert np.array_equal(got, want), (shape, int(np.count_nonzero(got != want)))
        ln, _ = layernorm_onnxruntime(x, -1, 1e-5, np.full(shape[-1], F32(1.0000002)), np.full(shape[-1], F32(0.25)))
        if shape[-1] >= 1024:
            assert np.count_nonzero(ln != want) > 0.1 * want.size   # the LayerNormalization kernel's order


def group_norm_block(seed: int = 0, c: int = 32, groups: int = 8, size: int = 12) -> onnx.ModelProto:
    """Conv -> GroupNorm as torch's TorchScript exporter writes it (Reshape [0, G, -1] ->
    InstanceNormalization(ones, zeros) -> Reshape -> Mul(gamma) -> Add(beta)) -> Relu -> Conv (smp's
    FPN decoder blocks)."""
    from onnx_mrvl.testing.models import GraphBuilder
    g = GraphBuilder(seed, 13)
    x = g.conv("input", 3, c, 3, "conv0")
    r = g.node("Reshape", [x, g.const("gn.view", np.array([0, groups, -1], np.int64))], "gn_view")
    r = g.node("InstanceNormalization", [r, g.const("gn.ones", np.ones(groups, F32)),
                                         g.const("gn.zeros", np.zeros(groups, F32))], "gn", epsilon=1e-5)
    r = g.node("Reshape", [r, g.const("gn.back", np.array([1, c, size, size], np.int64))], "gn_back")
    rng = np.random.default_rng(seed)
    r = g.node("Mul", [r, g.const("gn.gamma", rng.uniform(0.5, 1.5, (c, 1, 1)).astype(F32))], "gn_mul")
    r = g.node("Add", [r, g.const("gn.beta", (0.1 * rng.standard_normal((c, 1, 1))).astype(F32))], "gn_add")
    r = g.relu(r, "gn_relu")
    g.conv(r, c, 8, 1, "head")
    g.nodes[-1].output[0] = "output"
    m = g.model("group_norm_block", [("input", TensorProto.FLOAT, [1, 3, size, size])],
                [("output", TensorProto.FLOAT, [1, 8, size, size])])
    m.graph.output.append(helper.make_tensor_value_info(r, TensorProto.FLOAT, [1, c, size, size]))   # the norm's codes
    return m


def test_qdq_group_norm_codes_equal_onnxruntime(tmp_path):
    """smp FPN U8's GroupNorm (its InstanceNormalization between DQ and Q, which onnxruntime runs in
    fp32): one region, the int8_out LayerNorm in onnxruntime's InstanceNorm order, the output codes
    equal onnxruntime's (the model's real FPN: 96.3% -> 100% identical). Its LayerNormalization
    kernel's order (before) puts codes of the normalized tensor a step off."""
    from tests.test_int8_qdq import quantize
    qpath = quantize(group_norm_block(seed=4), str(tmp_path / "q.onnx"), True, "u8")
    q = onnx.load(qpath)
    norm = next(n for n in q.graph.node if n.op_type == "InstanceNormalization")
    init = {t.name for t in q.graph.initializer}
    prod = {o: n for n in q.graph.node for o in n.output}
    assert prod[norm.input[0]].op_type == "DequantizeLinear" and norm.input[0] not in init
    result = onnx_mrvl.convert(qpath)
    assert [n.op_type for n in result.model.graph.node] == ["Subgraph_1x2"]   # the output and the norm's codes
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))["nodes"]
    norms = [n["attrs"] for n in nodes if n.get("attrs", {}).get("layer_name") == ["LayerNorm"]]
    assert len(norms) == 1 and norms[0].get("ort_kernel") == ["instance_norm"] and norms[0]["precision"] == ["int8_out"]
    ref = ort.InferenceSession(qpath, providers=["CPUExecutionProvider"])
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(7)
    for _ in range(6):
        x = (rng.standard_normal((1, 3, 12, 12)) * 1.5).astype(F32)
        for got, want in zip(sess.run(None, {"input": x}), ref.run(None, {"input": x})):
            assert np.array_equal(got, want)
