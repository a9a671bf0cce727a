"""Tests of onnx_mrvl.inspection.diff (model alignment and report) and the ``diff`` command."""
import copy
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_mrvl.cli.main import main
from onnx_mrvl.errors import ModelError
from onnx_mrvl.inspection.diff import diff_models
from onnx_mrvl.provenance import set_composite, set_origin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def build_model(seed: int = 0) -> onnx.ModelProto:
    """conv1-relu1-pool1-conv2-relu2-add1(residual)-gap-flat-fc, 9 named nodes."""
    rng = np.random.default_rng(seed)

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("fc_w", 10, 8), w("fc_b", 10)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r2", "p1"], ["a1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], name="fc", transB=1, alpha=1.0),
    ]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="test")
    model.ir_version = 8
    return model


def node(model, name):
    return next(n for n in model.graph.node if n.name == name)


def keys(refs):
    return sorted(r["key"] for r in refs)


def assert_only(d, **expected):
    """Every node section is empty except the ones given (as sorted key lists of B/A refs)."""
    for section in ("added", "removed", "renamed", "changed", "groups"):
        items = d.nodes[section]
        want = expected.get(section, [])
        if section in ("added", "removed"):
            assert keys(items) == sorted(want), section
        else:
            assert len(items) == len(want), (section, items)


def test_self_diff_is_empty():
    m = build_model()
    d = diff_models(m, copy.deepcopy(m))
    assert d.is_empty()
    assert d.matched["exact"] == 9 and sum(d.matched.values()) == 9
    assert d.to_dict()["identical"] is True
    assert "identical" in d.to_text().splitlines()[0]


def test_all_nodes_renamed_are_matched_structurally():
    a = build_model()
    b = copy.deepcopy(a)
    for i, n in enumerate(b.graph.node):
        n.name = f"node_{100 - i}"
    d = diff_models(a, b)
    assert not d.is_empty()
    assert_only(d, renamed=list(range(9)))
    assert d.matched["structure"] == 9
    mapping = {r["a"]["name"]: r["b"]["name"] for r in d.nodes["renamed"]}
    assert mapping == {n.name: f"node_{100 - i}" for i, n in enumerate(a.graph.node)}
    assert "renamed" in d.to_text() and "node_100" in d.to_text()


def test_one_attribute_changed_is_the_only_change():
    a = build_model()
    b = copy.deepcopy(a)
    next(at for at in node(b, "fc").attribute if at.name == "alpha").f = 0.5
    d = diff_models(a, b)
    assert_only(d, changed=["fc"])
    ch = d.nodes["changed"][0]
    assert ch["a"]["name"] == "fc" and ch["changes"] == {"attributes": {"alpha": {"a": 1.0, "b": 0.5}}}
    assert not any(d.initializers.values()) and not any(d.inputs.values())
    assert "attribute alpha: 1.0 -> 0.5" in d.to_text()


def test_attribute_change_found_through_renaming():
    a = build_model()
    b = copy.deepcopy(a)
    for n in b.graph.node:
        n.name = "new_" + n.name
    node(b, "new_pool1").attribute[0].ints[:] = [3, 3]  # kernel_shape
    d = diff_models(a, b)
    assert d.nodes["added"] == [] and d.nodes["removed"] == []
    assert len(d.nodes["renamed"]) == 9
    (ch,) = d.nodes["changed"]
    assert (ch["a"]["name"], ch["b"]["name"]) == ("pool1", "new_pool1")
    assert ch["changes"]["attributes"] == {"kernel_shape": {"a": [2, 2], "b": [3, 3]}}


def test_one_initializer_perturbed():
    a = build_model()
    b = copy.deepcopy(a)
    t = next(t for t in b.graph.initializer if t.name == "w2")
    arr = numpy_helper.to_array(t).copy()
    arr[0, 0, 0, 0] += 1e-3
    t.CopyFrom(numpy_helper.from_array(arr, "w2"))
    d = diff_models(a, b)
    assert_only(d)
    assert d.initializers["added"] == [] and d.initializers["removed"] == []
    (ch,) = d.initializers["changed"]
    assert ch["name"] == "w2" and ch["a"]["shape"] == [8, 8, 3, 3]
    assert ch["a"]["sha256"] != ch["b"]["sha256"] and len(ch["a"]["sha256"]) == 64
    assert ch["allclose"] is False
    assert ch["max_abs_diff"] == pytest.approx(1e-3, rel=1e-3)
    assert ch["mean_abs_diff"] == pytest.approx(1e-3 / arr.size, rel=1e-3)


def test_renamed_initializer_is_not_added_and_removed():
    a = build_model()
    b = copy.deepcopy(a)
    next(t for t in b.graph.initializer if t.name == "w2").name = "w2_new"
    node(b, "conv2").input[1] = "w2_new"
    d = diff_models(a, b)
    assert d.initializers == {"added": [], "removed": [], "renamed": [{"a": "w2", "b": "w2_new"}], "changed": []}
    assert_only(d)  # conv2 reads the same data under the new name: not a node change


def test_one_node_added():
    a = build_model()
    b = copy.deepcopy(a)
    node(b, "pool1").input[0] = "r1_id"
    b.graph.node.insert(2, helper.make_node("Identity", ["r1"], ["r1_id"], name="extra"))
    d = diff_models(a, b)
    assert_only(d, added=["extra"])
    assert d.matched["exact"] == 9
    row = next(r for r in d.op_histogram if r["op_type"] == "Identity")
    assert (row["a"], row["b"], row["delta"]) == (0, 1, 1)


def test_one_node_removed():
    a = build_model()
    b = copy.deepcopy(a)
    b.graph.node.remove(node(b, "relu2"))
    node(b, "add1").input[0] = "c2"
    d = diff_models(a, b)
    assert_only(d, removed=["relu2"])
    assert next(r for r in d.op_histogram if r["op_type"] == "Relu")["delta"] == -1


def renamed(b):
    for i, n in enumerate(b.graph.node):
        n.name = f"q{50 - i}"
    return b


def test_removed_and_added_nodes_found_through_renaming():
    a = build_model()
    b = copy.deepcopy(a)
    b.graph.node.remove(node(b, "relu2"))
    node(b, "add1").input[0] = "c2"
    d = diff_models(a, renamed(b))
    assert_only(d, removed=["relu2"], renamed=list(range(8)))
    b = copy.deepcopy(a)
    node(b, "pool1").input[0] = "r1_id"
    b.graph.node.insert(2, helper.make_node("Identity", ["r1"], ["r1_id"], name="extra"))
    d = diff_models(a, renamed(b))
    assert_only(d, added=["q48"], renamed=list(range(9)))
    assert d.nodes["added"][0]["op_type"] == "Identity"


def test_split_node_is_one_group():
    a = build_model()
    b = copy.deepcopy(a)
    parts = [helper.make_node("Conv2D", ["x", "w1", "b1"], [f"c1_{k}"], name=f"conv1_part{k}", domain="mrvl")
             for k in (0, 1)]
    parts.append(helper.make_node("Concat", ["c1_0", "c1_1"], ["c1"], name="conv1_concat", axis=1))
    for p in parts:
        set_origin(p, ["conv1"])
    b.graph.node.remove(node(b, "conv1"))
    for k, p in enumerate(parts):
        b.graph.node.insert(k, p)
    d = diff_models(a, b)
    (grp,) = d.nodes["groups"]
    assert grp["kind"] == "split" and keys(grp["a"]) == ["conv1"]
    assert keys(grp["b"]) == ["conv1_concat", "conv1_part0", "conv1_part1"]
    assert_only(d, groups=[grp])


def test_rewired_input_is_reported():
    a = build_model()
    b = copy.deepcopy(a)
    node(b, "add1").input[1] = "r1"  # residual now from relu1 instead of pool1
    d = diff_models(a, b)
    (ch,) = d.nodes["changed"]
    assert ch["b"]["name"] == "add1"
    assert ch["changes"]["inputs"] == [{"index": 1, "a": "node pool1:0", "b": "node relu1:0"}]


def fused_model(a: onnx.ModelProto) -> onnx.ModelProto:
    """conv1+relu1 -> one mrvl Conv2D node, pool1 -> mrvl Maxpool2D; the rest unchanged."""
    b = copy.deepcopy(a)
    conv = helper.make_node("Conv2D", ["x", "w1", "b1"], ["r1"], name="mrvl_conv2d_0", domain="mrvl")
    set_origin(conv, ["conv1", "relu1"])
    set_composite(conv, "mrvl.conv2d_nhwc2nhwc")
    pool = helper.make_node("Maxpool2D", ["r1"], ["p1"], name="mrvl_maxpool_1", domain="mrvl")
    set_origin(pool, ["pool1"])
    set_composite(pool, "mrvl.maxpool2d_nhwc2nhwc")
    rest = [n for n in b.graph.node if n.name not in ("conv1", "relu1", "pool1")]
    del b.graph.node[:]
    b.graph.node.extend([conv, pool] + rest)
    b.opset_import.append(helper.make_opsetid("mrvl", 1))
    return b


def test_fused_model_reports_fused_groups():
    a = build_model()
    b = fused_model(a)
    d = diff_models(a, b)
    assert d.nodes["added"] == [] and d.nodes["removed"] == [] and d.nodes["changed"] == []
    groups = {g["b"][0]["key"]: g for g in d.nodes["groups"]}
    assert set(groups) == {"mrvl_conv2d_0", "mrvl_maxpool_1"}
    conv = groups["mrvl_conv2d_0"]
    assert conv["kind"] == "fused" and keys(conv["a"]) == ["conv1", "relu1"]
    assert conv["b"][0]["composite"] == "mrvl.conv2d_nhwc2nhwc"
    assert groups["mrvl_maxpool_1"]["kind"] == "converted" and keys(groups["mrvl_maxpool_1"]["a"]) == ["pool1"]
    assert d.matched["exact"] == 6
    assert d.opset_import == {"mrvl": {"a": None, "b": 1}}
    assert "fused: mrvl::Conv2D mrvl_conv2d_0 [mrvl.conv2d_nhwc2nhwc] <- conv1, relu1" in d.to_text()


def deployable_model(a: onnx.ModelProto) -> onnx.ModelProto:
    b = copy.deepcopy(a)
    region = helper.make_node("Subgraph_0", ["x"], ["p1"], name="mrvl_region_0", domain="mrvl",
                              origin='["conv1","relu1","pool1"]', region="region_0")
    rest = [n for n in b.graph.node if n.name not in ("conv1", "relu1", "pool1")]
    del b.graph.node[:]
    b.graph.node.extend([region] + rest)
    for name in ("w1", "b1"):
        b.graph.initializer.remove(next(t for t in b.graph.initializer if t.name == name))
    return b


def test_deployable_model_reports_replaced_region():
    a = build_model()
    d = diff_models(a, deployable_model(a))
    (grp,) = d.nodes["groups"]
    assert grp["kind"] == "replaced" and grp["b"][0]["key"] == "mrvl_region_0"
    assert keys(grp["a"]) == ["conv1", "pool1", "relu1"]
    assert d.nodes["added"] == [] and d.nodes["removed"] == [] and d.nodes["changed"] == []
    assert sorted(t["name"] for t in d.initializers["removed"]) == ["b1", "w1"]


def test_fused_vs_deployable_resolves_through_origin_records():
    a = build_model()
    d = diff_models(fused_model(a), deployable_model(a))
    (grp,) = d.nodes["groups"]
    assert keys(grp["a"]) == ["mrvl_conv2d_0", "mrvl_maxpool_1"]
    assert d.nodes["removed"] == [] and d.nodes["added"] == []


def test_fused_model_against_itself_is_empty():
    b = fused_model(build_model())
    assert diff_models(b, copy.deepcopy(b)).is_empty()


def chain_model(blocks: int, seed: int = 1) -> onnx.ModelProto:
    """blocks x (Conv, Relu, Conv, Add residual, Relu), unique weights, nodes named b<i>_<op>."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for i in range(blocks):
        for j in (0, 1):
            inits.append(numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), f"w{i}_{j}"))
        nodes += [helper.make_node("Conv", [cur, f"w{i}_0"], [f"c{i}a"], name=f"b{i}_conv_a"),
                  helper.make_node("Relu", [f"c{i}a"], [f"r{i}a"], name=f"b{i}_relu_a"),
                  helper.make_node("Conv", [f"r{i}a", f"w{i}_1"], [f"c{i}b"], name=f"b{i}_conv_b"),
                  helper.make_node("Add", [f"c{i}b", cur], [f"s{i}"], name=f"b{i}_add"),
                  helper.make_node("Relu", [f"s{i}"], [f"o{i}"], name=f"b{i}_relu_b")]
        cur = f"o{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_large_renamed_copy_is_fully_matched():
    a = chain_model(200)
    b = copy.deepcopy(a)
    for i, n in enumerate(b.graph.node):
        n.name = f"renamed_{i:05d}"
    d = diff_models(a, b)
    assert d.a_nodes == 1000
    assert len(d.nodes["renamed"]) == 1000 and d.nodes["changed"] == []
    assert d.nodes["added"] == [] and d.nodes["removed"] == []
    index = {n.name: i for i, n in enumerate(a.graph.node)}
    assert all(r["b"]["name"] == f"renamed_{index[r['a']['name']]:05d}" for r in d.nodes["renamed"])


def test_inception_v1_vs_v2():
    v1, v2 = os.path.join(LIGHT, "light_inception_v1.onnx"), os.path.join(LIGHT, "light_inception_v2.onnx")
    d = diff_models(v1, v2)
    data = json.loads(json.dumps(d.to_dict()))
    assert data["identical"] is False and data["a"] == v1
    assert (d.a_nodes, d.b_nodes) == (237, 916)
    hist = {r["op_type"]: (r["a"], r["b"], r["delta"]) for r in data["op_histogram"]}
    assert hist["Conv"] == (57, 69, 12) and hist["BatchNormalization"] == (0, 69, 69) and hist["LRN"] == (2, 0, -2)
    matched = sum(d.matched.values())
    assert matched + len(d.nodes["removed"]) == d.a_nodes  # no groups: every A node matched or removed
    assert matched + len(d.nodes["added"]) == d.b_nodes
    assert data["model"]["graph_name"] == {"a": "inception_v1", "b": "inception_v2"}
    assert list(data) == ["a", "b", "identical", "summary", "matched_by", "model", "opset_import",
                          "metadata_props", "functions", "inputs", "outputs", "initializers", "nodes",
                          "op_histogram"]
    assert diff_models(v2, v2).is_empty()


def test_unreadable_model_raises_model_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff\xfe not a protobuf \x00\x01")
    with pytest.raises(ModelError):
        diff_models(str(bad), build_model())
    with pytest.raises(ModelError, match="no such file"):
        diff_models(str(tmp_path / "missing.onnx"), build_model())


@pytest.fixture
def model_files(tmp_path):
    a = build_model()
    b = copy.deepcopy(a)
    next(at for at in node(b, "fc").attribute if at.name == "alpha").f = 0.5
    pa, pb = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(a, pa)
    onnx.save(b, pb)
    return str(pa), str(pb)


def test_cli_exit_codes_and_json(model_files, tmp_path, capsys):
    pa, pb = model_files
    assert main(["diff", pa, pa]) == 0
    assert "identical" in capsys.readouterr().out
    assert main(["diff", pa, pb, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["identical"] is False and data["nodes"]["changed"][0]["a"]["name"] == "fc"
    html = tmp_path / "out" / "d.html"
    assert main(["diff", pa, pb, "--html", str(html)]) == 1
    assert html.stat().st_size > 1000 and "html:" in capsys.readouterr().out
    assert main(["diff", pa, str(tmp_path / "nope.onnx")]) == 3
    assert "no such file" in capsys.readouterr().err


def test_tools_wrapper(model_files):
    pa, pb = model_files
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "diff.py"), pa, pb, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["summary"]["nodes_changed"] == 1
