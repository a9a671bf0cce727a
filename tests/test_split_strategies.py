"""convert() end to end on small onnx.helper models: strategies, exclude, cut_after, deployable
model structure, and outputs against plain onnxruntime on the original."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.pipeline import convert
from onnx_mrvl.split.deploy import is_subgraph, subgraph_attrs

RTOL, ATOL = 1e-2, 1e-2      # fp16 tolerance (the reference bodies are fp32, so far tighter in fact)


def _simulator_available() -> bool:
    try:
        from onnx_mrvl.sim import Simulator  # noqa: F401
        return True
    except ImportError:
        return False


class _Builder:
    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def conv(self, x, cin, cout, name, k=3):
        w = (self.rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = self.rng.normal(0, 0.1, cout).astype(np.float32)
        self.inits += [numpy_helper.from_array(w, f"{name}.w"), numpy_helper.from_array(b, f"{name}.b")]
        self.nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], name=name,
                                           pads=[k // 2] * 4))
        return name

    def op(self, op, ins, name, **attrs):
        self.nodes.append(helper.make_node(op, ins, [name], name=name, **attrs))
        return name

    def model(self, inputs, outputs):
        vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
        g = helper.make_graph(self.nodes, "t", [vi(n, s) for n, s in inputs], [vi(n, s) for n, s in outputs],
                              self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m


def branchy_model():
    """conv-relu, then a Softsign branch (a CPU op that runs on the stored NHWC data; LogSoftmax is a Mrvl op now) and a conv branch, rejoined by Add, then conv."""
    b = _Builder()
    r1 = b.op("Relu", [b.conv("x", 3, 8, "c1")], "r1")
    s = b.op("Softsign", [r1], "sm")
    r2 = b.op("Relu", [b.conv(s, 8, 8, "c2")], "r2")
    r3 = b.op("Relu", [b.conv(r1, 8, 8, "c3")], "r3")
    a = b.op("Add", [r2, r3], "add")
    b.conv(a, 8, 4, "out")
    return b.model([("x", [1, 3, 16, 16])], [("out", [1, 4, 16, 16])])


def diamond_model():
    """c1 -> {Softsign (CPU), c2} -> Add -> c3: only one branch of the diamond is offloadable."""
    b = _Builder(1)
    c1 = b.conv("x", 3, 8, "c1")
    s = b.op("Softsign", [c1], "sm")
    c2 = b.op("Relu", [b.conv(c1, 8, 8, "c2")], "r2")
    a = b.op("Add", [s, c2], "add")
    b.conv(a, 8, 4, "out")
    return b.model([("x", [1, 3, 16, 16])], [("out", [1, 4, 16, 16])])


def two_input_model():
    """Two independent conv chains from two inputs meeting at a Concat."""
    b = _Builder(2)
    a = b.op("Relu", [b.conv("x1", 3, 8, "a1")], "ar")
    c = b.op("Relu", [b.conv("x2", 3, 8, "b1")], "br")
    cat = b.op("Concat", [a, c], "cat", axis=1)
    b.conv(cat, 16, 4, "out")
    return b.model([("x1", [1, 3, 8, 8]), ("x2", [1, 3, 8, 8])], [("out", [1, 4, 8, 8])])


def chain_model(n=4):
    b = _Builder(3)
    x, c = "x", 3
    for i in range(n):
        x = b.op("Relu", [b.conv(x, c, 8, f"c{i}")], f"r{i}")
        c = 8
    b.nodes[-1].output[0] = "out"
    return b.model([("x", [1, 3, 8, 8])], [("out", [1, 8, 8, 8])])


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check_deployable(original, result):
    """Structure of the deployable model, then its outputs against onnxruntime on the original."""
    dep = result.model
    onnx.checker.check_model(dep)
    assert dep.ir_version <= 13
    sig = lambda vis: [(v.name, v.type.SerializeToString()) for v in vis]  # noqa: E731
    assert sig(dep.graph.input) == sig(original.graph.input)
    assert [(o.name, o.type.tensor_type.elem_type) for o in dep.graph.output] == \
        [(o.name, o.type.tensor_type.elem_type) for o in original.graph.output]
    for d, o in zip(dep.graph.output, original.graph.output):
        # data-dependent dims (NonMaxSuppression's count) come back with another dim_param name;
        # compare the outputs the original declares with static dims exactly
        if all(x.HasField("dim_value") for x in o.type.tensor_type.shape.dim):
            assert d.type.SerializeToString() == o.type.SerializeToString(), o.name
    subs = [n for n in dep.graph.node if is_subgraph(n)]
    assert [n.name for n in subs] == [r["name"] for r in result.report.regions]
    for node, region in zip(subs, result.report.regions):
        a = subgraph_attrs(node)
        assert a["region"] == region["name"] and json.loads(a["origin"]) == region["origin"]
        assert a["embed_mode"] == 0 and a["artifact"] == f"{region['name']}.bin" and len(a["sha256"]) == 64
        assert list(node.input) == region["inputs"] and list(node.output) == region["outputs"]
    assert not any(n.domain == "mrvl" and not is_subgraph(n) for n in dep.graph.node), \
        "every Mrvl op outside a region is standard ONNX again"
    feeds = _feeds(original)
    want = _run(original, feeds)
    got = _run(dep, feeds)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    if _simulator_available():
        import onnx_mrvl
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = result.save(d)
            sim = onnx_mrvl.InferenceSession(path).run(None, feeds)
        for w, g in zip(want, sim):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return got


def _accel_origin(result):
    return {o for r in result.report.regions for o in r["origin"]}


def test_branchy_model_two_regions_under_max_one_under_single():
    m = branchy_model()
    r = convert(m, partition="max", reference=True)
    regions = r.report.regions
    assert len(regions) == 2
    assert {"c1", "c3"} <= set(regions[0]["origin"]) and {"c2", "out"} <= set(regions[1]["origin"])
    assert len(regions[0]["outputs"]) == 2            # r1 feeds the Softsign, c3 feeds region 1
    assert [n.op_type for n in r.model.graph.node].count("Softsign") == 1
    check_deployable(m, r)
    s = convert(m, partition="single", reference=True)
    assert len(s.report.regions) == 1 and s.report.regions[0]["inputs"] == ["x"]
    assert {"c2", "out"}.isdisjoint(s.report.regions[0]["origin"])
    assert any("single" in d["reason"] for d in s.report.dropped)
    check_deployable(m, s)
    assert 0 < s.report.to_dict()["offload_fraction"] < r.report.to_dict()["offload_fraction"] <= 1


def test_diamond_with_one_offloadable_branch_stays_acyclic():
    m = diamond_model()
    for partition in ("max", "single", "cost"):
        r = convert(m, partition=partition, reference=True)
        check_deployable(m, r)                      # the checker and onnxruntime reject cycles
        for reg in r.report.regions:
            assert not ({"c1", "c2"} & set(reg["origin"]) and {"add", "out"} & set(reg["origin"]))
    assert len(convert(m, partition="max").report.regions) == 2


def test_two_chains_meeting_at_concat_form_one_region():
    m = two_input_model()
    r = convert(m, reference=True)
    assert len(r.report.regions) == 1
    assert sorted(r.report.regions[0]["inputs"]) == ["x1", "x2"]
    check_deployable(m, r)


@pytest.mark.parametrize("names", [["r1"], ["r0", "r3"], ["c2"]])
def test_exclude_moves_exactly_the_named_nodes(names):
    m = chain_model()
    base = convert(m, reference=True)
    r = convert(m, exclude=names, reference=True)
    moved = _accel_origin(base) - _accel_origin(r)
    for name in names:
        assert r.report[name].placement == "cpu" and "exclude" in r.report[name].reason
    assert moved == set(names)   # (r2 after an excluded c2 runs as a standalone activation layer)
    check_deployable(m, r)


def test_exclude_by_op_type():
    m = branchy_model()
    r = convert(m, exclude=["Add"], reference=True)
    assert "add" not in _accel_origin(r) and "c2" in _accel_origin(r)
    check_deployable(m, r)


@pytest.mark.parametrize("partition", ["max", "single"])
def test_cut_after_ends_regions_after_exactly_the_named_nodes(partition):
    m = chain_model()
    r = convert(m, cut_after=["r1"], partition=partition, reference=True)
    regions = r.report.regions
    if partition == "max":
        assert [set(x["origin"]) for x in regions] == [{"c0", "r0", "c1", "r1"}, {"c2", "r2", "c3", "r3"}]
        assert regions[1]["inputs"] == regions[0]["outputs"]
    else:
        assert [set(x["origin"]) for x in regions] == [{"c0", "r0", "c1", "r1"}]
    check_deployable(m, r)


def test_force_keeps_regions_without_conv():
    b = _Builder(4)
    x = b.op("Relu", [b.conv("x", 3, 8, "c1")], "r1")
    s = b.op("Softsign", [x], "sm")
    b.op("MaxPool", [s], "out", kernel_shape=[2, 2], strides=[2, 2])
    m = b.model([("x", [1, 3, 8, 8])], [("out", [1, 8, 4, 4])])
    plain = convert(m, reference=True)
    assert len(plain.report.regions) == 1
    assert any("minimum-work" in d["reason"] for d in plain.report.dropped)
    forced = convert(m, force=True, reference=True)
    assert len(forced.report.regions) == 2 and "out" in forced.report.regions[1]["origin"]
    check_deployable(m, forced)


def test_unknown_strategy_is_an_error():
    from onnx_mrvl.errors import UnsupportedError
    with pytest.raises(UnsupportedError, match="partition"):
        convert(chain_model(), partition="greedy")
