"""split/restore.py: a legalize rewrite none of whose products is offloaded is put back as the user's
original nodes (TVM BYOC's "inline back what is not offloaded"): structure (the original op types
back on the CPU, no rewrite product left) and numbers (the CPU part bit-identical to onnxruntime on
the original model), for several rules; a rewrite partly in a region stays as it is."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import onnx_mrvl
from onnx_mrvl.fuse import fuse
from onnx_mrvl.legalize import legalize
from onnx_mrvl.legalize.testing import feeds_for, make_model
from onnx_mrvl.split import split
from onnx_mrvl.split.deploy import is_subgraph

SHAPE = [1, 4, 8, 16]


def _pattern(kind: str, x: str, y: str):
    """(nodes, initializers) of a float idiom a restorable rule rewrites, reading ``x``, writing ``y``."""
    mk = helper.make_node
    if kind == "pow_square":
        return [mk("Pow", [x, "two"], [y], name="pow")], {"two": np.array(2.0, np.float32)}
    if kind == "softmax_expanded":
        return [mk("ReduceMax", [x], ["mx"], name="max", axes=[-1], keepdims=1),
                mk("Sub", [x, "mx"], ["d"], name="sub"), mk("Exp", ["d"], ["e"], name="exp"),
                mk("ReduceSum", ["e", "ax"], ["s"], name="sum", keepdims=1),
                mk("Div", ["e", "s"], [y], name="div")], {"ax": np.array([-1], np.int64)}
    if kind == "sigmoid_expanded":
        return [mk("Neg", [x], ["n"], name="neg"), mk("Exp", ["n"], ["e"], name="exp"),
                mk("Add", ["one", "e"], ["a"], name="add"), mk("Reciprocal", ["a"], [y], name="rcp")], \
            {"one": np.array(1.0, np.float32)}
    if kind == "l2_normalize":
        return [mk("ReduceL2", [x], ["nrm"], name="l2", axes=[-1], keepdims=1),
                mk("Div", [x, "nrm"], [y], name="normalize")], {}
    raise ValueError(kind)


RULES = {"pow_square": ["Pow"], "softmax_expanded": ["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"],
         "sigmoid_expanded": ["Neg", "Exp", "Add", "Reciprocal"], "l2_normalize": ["ReduceL2", "Div"]}


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_rewrite_left_on_the_cpu_runs_as_the_original_nodes(rule, tmp_path):
    """The idiom alone (no conv, fc or matmul: the minimum-work rule keeps it on the CPU) beside an
    offloaded conv: legalize rewrites it, split puts the original nodes back."""
    nodes, inits = _pattern(rule, "x", "y2")
    nodes.append(helper.make_node("Conv", ["x", "w"], ["y1"], name="conv", pads=[1, 1, 1, 1]))
    inits["w"] = np.random.default_rng(0).standard_normal([4, 4, 3, 3]).astype(np.float32) * 0.2
    m = make_model(nodes, [("x", SHAPE)], ["y1", "y2"], inits)
    assert rule in legalize(m).report.by_rule()          # the rule does rewrite it
    res = onnx_mrvl.convert(m)
    cpu = [n for n in res.model.graph.node if not is_subgraph(n)]
    assert len(res.subgraphs) == 1
    assert [n.op_type for n in cpu] == RULES[rule]       # the user's nodes, in order, no rewrite product
    assert [n.name for n in cpu] == [n.name for n in m.graph.node[:-1]]
    assert not any(p.key.startswith("mrvl.") for n in cpu for p in n.metadata_props)
    assert res.report.restored and res.report.restored[0]["rules"] == [rule]
    for n in cpu:
        d = res.report.decisions[n.name]
        assert d.placement == "cpu" and d.reason.startswith(f"restored: {rule} on the CPU, original nodes kept")
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    for seed in range(3):
        feeds = feeds_for(m, seed)
        assert np.array_equal(sess.run(["y2"], feeds)[0], _ort(m, feeds)[1])   # bit-identical


def test_a_rewrite_between_regions_reads_the_region_output(tmp_path):
    """Pow(conv1, 2) excluded between two offloaded convs: the region writes conv1's result under
    fuse's name for its NCHW copy (``c1__nchw``); the original Pow reads that, and the value_info and
    the exponent initializer come back."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Pow", ["c1", "two"], ["p"], name="pow"),
             helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2")]
    m = make_model(nodes, [("x", SHAPE)], ["y"], {"w1": rng.standard_normal([4, 4, 3, 3]).astype(np.float32) * 0.2,
                                                  "w2": rng.standard_normal([4, 4, 1, 1]).astype(np.float32) * 0.2,
                                                  "two": np.array(2.0, np.float32)})
    res = onnx_mrvl.convert(m, exclude=["pow"])
    ops = [n.op_type for n in res.model.graph.node if not is_subgraph(n)]
    assert ops == ["Pow"] and len(res.subgraphs) == 2
    pow_node = next(n for n in res.model.graph.node if n.op_type == "Pow")
    assert pow_node.input[1] == "two" and "two" in {t.name for t in res.model.graph.initializer}
    assert "p" in {v.name for v in res.model.graph.value_info}
    assert res.report["pow"].reason.startswith("restored: pow_square on the CPU")
    sess = onnx_mrvl.InferenceSession(res.save(str(tmp_path)))
    feeds = feeds_for(m, 0)
    ref = _ort(m, feeds)[0]
    assert float(np.abs(sess.run(None, feeds)[0] - ref).max()) <= 1e-2 * float(np.abs(ref).max())


def test_a_rewrite_partly_in_a_region_stays_rewritten():
    """group_norm's products of an InstanceNormalization between two convs (Reshape, LayerNormalization,
    Reshape; the affine folded into the next conv): the layer norm excluded at split, the rest
    offloaded. Some products in a region: the group stays as it is (no InstanceNormalization back)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("InstanceNormalization", ["c", "s", "b"], ["n"], name="inorm"),
             helper.make_node("Conv", ["n", "w2"], ["y"], name="conv2")]
    m = make_model(nodes, [("x", SHAPE)], ["y"], {
        "w": rng.standard_normal([4, 4, 3, 3]).astype(np.float32), "w2": rng.standard_normal([4, 4, 1, 1]).astype(np.float32),
        "s": rng.standard_normal([4]).astype(np.float32), "b": rng.standard_normal([4]).astype(np.float32)})
    legal = legalize(m)
    assert "group_norm" in legal.report.by_rule()
    fused = fuse(legal.model)
    norm = next(n.name for n in fused.model.graph.node if n.op_type == "LayerNorm")
    res = split(fused.model, exclude=[norm], restore=legal.report.restore)
    assert not res.restored and "inorm" in {o for r in res.regions for o in r.origin}
    ops = [n.op_type for n in res.model.graph.node if not is_subgraph(n)]
    assert "ReduceMean" in ops and "InstanceNormalization" not in ops   # the reverted LayerNorm stays


def test_a_rewrite_in_a_converted_if_branch_is_restored():
    """An If branch with a region goes through the same stages (bodies.py): its CPU softmax idiom is
    put back there too."""
    from onnx import TensorProto, numpy_helper
    nodes, inits = _pattern("softmax_expanded", "x", "sm")
    w = np.random.default_rng(0).standard_normal([4, 4, 3, 3]).astype(np.float32) * 0.2
    body = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])] + nodes + \
        [helper.make_node("Add", ["c", "sm"], ["out_t"], name="add")]
    then_g = helper.make_graph(body, "then", [], [helper.make_tensor_value_info("out_t", TensorProto.FLOAT, SHAPE)],
                               [numpy_helper.from_array(v, k) for k, v in inits.items()])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["out_e"], name="id")], "else", [],
                               [helper.make_tensor_value_info("out_e", TensorProto.FLOAT, SHAPE)])
    g = helper.make_graph([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                          "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
                                helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    res = onnx_mrvl.convert(m, exclude=["add", "max", "sub", "exp", "sum", "div"])
    then = next(a.g for a in res.model.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then.node if not is_subgraph(n)] == RULES["softmax_expanded"] + ["Add"]
    assert len([n for n in then.node if is_subgraph(n)]) == 1
    rec = {d["node"]: d for b in res.report.bodies for d in b["nodes"]}
    assert rec["div"]["reason"].startswith("restored: softmax_expanded on the CPU")
