"""int8 AveragePool that onnxruntime runs in float: it fuses DQ -> AveragePool -> Q into
QLinearAveragePool when its selectors accept the group, which depends on the readers after it
(two float readers: not fused; checked below in its optimized model). Fuse asks onnxruntime
(fuse/ort_plan.py); the int8 AvgPool2D then has requant="float" and matches bit for bit
(docs/simulator.md "int8 layers")."""
from __future__ import annotations

import collections
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T, helper, numpy_helper as nh

import onnx_mrvl

pytest.importorskip("onnxruntime.quantization")


def pool_model(readers: int, qt=T.INT8, z=3) -> onnx.ModelProto:
    np_t = np.int8 if qt == T.INT8 else np.uint8
    rng = np.random.default_rng(0)
    w = (rng.integers(-127, 128, (8, 8, 3, 3))).astype(np.int8)
    inits = [nh.from_array(np.array(0.05, np.float32), "s"), nh.from_array(np.array(z, np_t), "z"),
             nh.from_array(np.array(0.07, np.float32), "s2"), nh.from_array(np.array(z, np_t), "z2"),
             nh.from_array(w, "wq"), nh.from_array(np.full(8, 0.002, np.float32), "ws"),
             nh.from_array(np.zeros(8, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["y", "s2", "z2"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s2", "z2"], ["yd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0)]
    outs = []
    if readers == 1:   # an int8 conv reads the pool: QLinearAveragePool
        nodes += [helper.make_node("Conv", ["yd", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"]),
                  helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["o0"])]
        outs.append(helper.make_tensor_value_info("o0", T.FLOAT, [1, 8, 4, 4]))
    for i in range(readers if readers > 1 else 0):   # two float readers: onnxruntime averages in float
        nodes.append(helper.make_node("Relu", ["yd"], [f"o{i}"]))
        outs.append(helper.make_tensor_value_info(f"o{i}", T.FLOAT, [1, 8, 4, 4]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 8, 8, 8])], outs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("qt,z", [(T.INT8, 3), (T.UINT8, 128)])
@pytest.mark.parametrize("readers", [1, 2])   # 2 float readers: onnxruntime keeps int8's average in float
def test_avgpool_follows_onnxruntimes_float_or_qlinear_path(tmp_path, readers, qt, z):
    m = pool_model(readers, qt, z)
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ops = collections.Counter(n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node)
    float_avg = ops["AveragePool"] == 1
    assert ops["QLinearAveragePool"] + ops["AveragePool"] == 1, ops
    result = onnx_mrvl.convert(path, force=True)   # the float readers' region has no conv
    folder = str(tmp_path / "out")
    result.save(folder)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))["nodes"]
    pool = next(n for n in nodes if n.get("attrs", {}).get("layer_name") == ["Avgpool2D"])
    assert pool["attrs"]["precision"] == ["int8"]
    assert pool["attrs"].get("requant") == (["float"] if float_avg else None)
    sess = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    rng = np.random.default_rng(1)
    for _ in range(4):   # codes of one scale: a 2x2 mean lands on .5 ties often
        x = (rng.integers(-40, 40, (1, 8, 8, 8)) * 0.05).astype(np.float32)
        for a, b in zip(ref.run(None, {"x": x}), sess.run(None, {"x": x})):
            # the pool's codes are onnxruntime's (a Relu reader is an fp16 layer: its output is the
            # dequantized code rounded to fp16, which cannot move a code)
            qa, qb = np.rint(a / np.float32(0.07)), np.rint(b / np.float32(0.07))
            if float_avg and qt == T.INT8:   # onnxruntime's int8 float path: not bit-exact yet
                assert np.abs(qa - qb).max() <= 1 and np.mean(qa == qb) >= 0.95
            else:
                assert np.array_equal(qa, qb)
            assert np.array_equal(a, b) or readers > 1


def test_some_average_runs_in_float():
    """The float path is exercised: with two float readers of an int8 pool onnxruntime (1.32, a
    default session) leaves AveragePool unfused (measured); one int8 conv reader: fused."""
    from onnx_mrvl.ort_plan import ort_float_nodes
    m = pool_model(2, T.INT8, 3)
    m.graph.node[2].name = "pool"
    assert "pool" in ort_float_nodes(m, "AveragePool")
    m1 = pool_model(1, T.INT8, 3)
    m1.graph.node[2].name = "pool"
    assert "pool" not in ort_float_nodes(m1, "AveragePool")


def _head_inits(qt, rng, scales, channels: int, shape) -> list:
    """A QDQ conv head's shared initializers: the activation scales ``s, s1, s2, s3`` with their
    zero points (0 for int8, 120 for uint8), an int8 3x3 conv of ``channels`` outputs from 8
    (per-channel scale 0.004), the ReduceMean's axes (H, W) and the Reshape's ``shape``."""
    np_t = np.int8 if qt == T.INT8 else np.uint8
    z = np_t(0 if qt == T.INT8 else 120)
    inits = []
    for i, scale in enumerate(scales):
        tag = str(i) if i else ""
        inits += [nh.from_array(np.array(scale, np.float32), "s" + tag), nh.from_array(np.array(z, np_t), "z" + tag)]
    return inits + [nh.from_array(rng.integers(-127, 128, (channels, 8, 3, 3)).astype(np.int8), "wq"),
                    nh.from_array(np.full(channels, 0.004, np.float32), "ws"),
                    nh.from_array(np.zeros(channels, np.int8), "wz"),
                    nh.from_array(np.array([2, 3], np.int64), "axes"), nh.from_array(np.array(shape, np.int64), "shape")]


def _head_model(middle, x_shape, outputs, inits) -> onnx.ModelProto:
    """``Q -> DQ -> Conv(DQ(wq)) -> Q -> DQ`` (output ``cd``), ``middle``, then ``y``'s Q -> DQ (``out``)."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["xd", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s1", "z1"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["cd"])] + middle + [
             helper.make_node("QuantizeLinear", ["y", "s3", "z3"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s3", "z3"], ["out"])]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", T.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(n, T.FLOAT, s) for n, s in outputs], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _one_region_float_mean(tmp_path, model):
    """``model`` converted (one region) and saved: its Nodes-JSON, its one GlobalAvgPool2D layer
    (checked to average in float) and sessions of ours and onnxruntime's."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    result = onnx_mrvl.convert(path)
    assert len(result.subgraphs) == 1
    folder = str(tmp_path / "out")
    result.save(folder, overwrite=True)
    nodes = json.load(open(os.path.join(folder, f"{result.subgraphs[0].name}-nodes.json")))["nodes"]
    pools = [n for n in nodes if n.get("attrs", {}).get("layer_name") == ["GlobalAvgpool2D"]]
    assert len(pools) == 1 and pools[0]["attrs"].get("requant") == ["float"], pools
    ours = onnx_mrvl.InferenceSession(os.path.join(folder, "model.onnx"))
    return nodes, pools[0], ours, ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def reducemean_head(qt=T.UINT8) -> onnx.ModelProto:
    """A dynamo classifier head, QDQ: an int8 conv, then ``DQ -> ReduceMean(H, W) -> Reshape ->
    Reshape -> Transpose -> Q`` (dynamo writes adaptive_avg_pool2d as a ReduceMean and ConvNeXt's
    as_strided as a Gather, a Reshape after legalize), then an int8 MatMul."""
    rng = np.random.default_rng(1)
    inits = _head_inits(qt, rng, (0.05, 0.027014907, 0.0036251063, 0.1), 64, [1, 64, 1, 1])
    inits += [nh.from_array(rng.integers(-127, 128, (64, 16)).astype(np.int8), "fq"),
              nh.from_array(np.array(0.01, np.float32), "fs"), nh.from_array(np.array(0, np.int8), "fz")]
    middle = [helper.make_node("ReduceMean", ["cd", "axes"], ["m"], keepdims=1),
              helper.make_node("Reshape", ["m", "shape"], ["r1"]),
              helper.make_node("Reshape", ["r1", "shape"], ["r2"]),
              helper.make_node("Transpose", ["r2"], ["t"], perm=[0, 2, 3, 1]),
              helper.make_node("QuantizeLinear", ["t", "s2", "z2"], ["tq"]),
              helper.make_node("DequantizeLinear", ["tq", "s2", "z2"], ["td"]),
              helper.make_node("DequantizeLinear", ["fq", "fs", "fz"], ["f"]),
              helper.make_node("MatMul", ["td", "f"], ["y"])]
    return _head_model(middle, [1, 8, 5, 5], [("td", [1, 1, 1, 64]), ("out", [1, 1, 1, 16])], inits)


@pytest.mark.parametrize("qt", [T.UINT8, T.INT8])
def test_reducemean_head_is_float_mean(tmp_path, qt):
    """onnxruntime runs the QDQ ReduceMean in float (no QLinear form): reached through the layout
    ops to its Q (qdq_pool_move), it is an int8 GlobalAvgPool2D with requant float (the fp32 mean of
    the dequantized values, then Q), one region (before: an fp16 pool and two regions). onnxruntime
    sums in its own order (not followed: a mean at a tie can round the other way; calibrated scales,
    ConvNeXt's here, make exact ties rare, round ratios such as 0.027 / 0.0036 frequent), so on 40
    inputs >= 99% of the pooled codes and outputs are equal and the rest one step off (the issue's
    bar; ConvNeXt-T dynamo S8 / U8: 91-95% identical logits before, 100% now)."""
    _, _, ours, ref = _one_region_float_mean(tmp_path, reducemean_head(qt))
    rng = np.random.default_rng(4)
    same = total = 0
    for _ in range(40):
        x = (rng.standard_normal((1, 8, 5, 5)) * 2).astype(np.float32)
        for a, b, step in zip(ours.run(None, {"x": x}), ref.run(None, {"x": x}), (0.0036251063, 0.1)):
            assert np.abs(a - b).max() <= step * 1.001
            same, total = same + int((a == b).sum()), total + a.size
    assert same >= 0.99 * total, (same, total)


def activated_mean_head(act: str, qt=T.INT8) -> onnx.ModelProto:
    """dynamo's MobileNetV3 head: ``Conv -> Q -> DQ -> HardSwish -> ReduceMean -> Reshape -> Q ->
    DQ -> Gemm -> Q -> DQ``, the activation's output not quantized (onnxruntime's quantizer)."""
    rng = np.random.default_rng(2)
    inits = _head_inits(qt, rng, (0.05, 0.04317, 0.0021133, 0.1), 96, [1, 96])
    inits += [nh.from_array(rng.integers(-127, 128, (16, 96)).astype(np.int8), "fq"),
              nh.from_array(np.full(16, 0.01, np.float32), "fs"), nh.from_array(np.zeros(16, np.int8), "fz")]
    kw = dict(alpha=0.25, beta=0.375) if act == "HardSigmoid" else {}
    middle = [helper.make_node(act, ["cd"], ["h"], **kw),
              helper.make_node("ReduceMean", ["h", "axes"], ["m"], keepdims=1),
              helper.make_node("Reshape", ["m", "shape"], ["r"]),
              helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["rq"]),
              helper.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["rd"]),
              helper.make_node("DequantizeLinear", ["fq", "fs", "fz"], ["f"], axis=0),
              helper.make_node("Gemm", ["rd", "f"], ["y"], transB=1)]
    return _head_model(middle, [1, 8, 12, 12], [("rd", [1, 96]), ("out", [1, 16])], inits)


@pytest.mark.parametrize("act,qt", [("HardSwish", T.INT8), ("HardSwish", T.UINT8), ("HardSigmoid", T.INT8),
                                    ("Relu", T.INT8)])
def test_activated_mean_head_is_float_mean_identical(tmp_path, act, qt):
    """The activation between the DQ and the float ReduceMean (onnxruntime runs both in fp32) is
    folded into the int8 GlobalAvgPool2D (``in_activation``, fuse/qdq_pool_activation.py): the
    activation of the dequantized values in fp32, the mean, Q; pooled codes and outputs equal to
    onnxruntime's on every input (before: an fp16 HardSwish layer, then the mean; its rounding
    moved codes near ties; dynamo MobileNetV3-Large S8 78.9% / U8 81.0% identical, now 100%)."""
    nodes, pool, ours, ref = _one_region_float_mean(tmp_path, activated_mean_head(act, qt))
    name = {"HardSwish": "hard_swish", "HardSigmoid": "hard_sigmoid", "Relu": "relu"}[act]
    assert pool["attrs"].get("in_activation") == [name], pool
    layers = [n["attrs"]["layer_name"][0] for n in nodes if n.get("op") == "tvm_op"]
    assert [x for x in layers if x not in ("layout_transform", "nn.batch_flatten", "Requantize")] == \
        ["Conv2D", "GlobalAvgpool2D", "FC"], layers   # no fp16 activation layer in front of the mean
    rng = np.random.default_rng(5)
    for _ in range(20):
        x = (rng.standard_normal((1, 8, 12, 12)) * 2).astype(np.float32)
        for a, b in zip(ours.run(None, {"x": x}), ref.run(None, {"x": x})):
            np.testing.assert_array_equal(a, b)
