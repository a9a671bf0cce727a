"""The report says what was produced: every CPU node of the deployable graph (with its origin and
a reason) and each offloaded node's precision as the emitted layer has it (report_graph.py)."""
import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T, helper as h, numpy_helper as nh

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.report_graph import check_report, layer_precision


def _conv1d_pair(seed=0):
    rng = np.random.default_rng(seed)
    inits = [nh.from_array(rng.standard_normal((8, 4, 3)).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal((8, 8, 3)).astype(np.float32), "w2")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv1d", pads=[1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("Conv", ["r", "w2"], ["y"], name="conv1d_b", pads=[1, 1])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 16])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 16])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)])


def _run(model_or_path, feeds):
    if isinstance(model_or_path, onnx.ModelProto):
        model_or_path = model_or_path.SerializeToString()
    return ort.InferenceSession(model_or_path, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_a_cpu_node_created_from_an_offloaded_node_is_reported(tmp_path, capsys):
    """A legalized piece (the 1-D conv's Reshape back to 3-D) left on the CPU while its original
    Conv is offloaded: the report lists it with its origin and reason (it listed no CPU node)."""
    m = _conv1d_pair()
    r = onnx_mrvl.convert(m, exclude=["conv1d_b/to1d"])
    cpu_graph = [n.name for n in r.model.graph.node if n.domain != "mrvl"]
    assert cpu_graph == ["conv1d_b/to1d"]
    assert r.report["conv1d_b"].placement == "accelerator"
    cpu = r.report.cpu_nodes()   # one record: the original it came from, the node it runs as
    assert [(d.node, d.op_type, d.origin, d.runs_as) for d in cpu] == \
        [("conv1d_b", "Reshape", ["conv1d_b"], ["conv1d_b/to1d"])]
    assert cpu[0].reason.startswith("created by the conversion from offloaded node(s); on the CPU: excluded by the user")
    assert "partly on the CPU: 1 node(s) created from it (conv1d_b/to1d)" in r.report["conv1d_b"].reason
    assert check_report(r.report, r.model, r.subgraphs) == []
    text = r.report.explain()
    assert "3 nodes: 3 on the accelerator, 0 on the CPU, 1 CPU node(s) created by the conversion from them;" in text
    assert "conv1d_b                         Reshape  (from conv1d_b)  (runs as conv1d_b/to1d)" in text
    assert "user exclude" in r.report.cuts[0]["why"]
    # report.json and `onnx-mrvl report` carry it
    out = tmp_path / "out"
    r.save(str(out), overwrite=True)
    rep = json.loads((out / "report.json").read_text())
    row = next(d for d in rep["nodes"] if d.get("runs_as") == ["conv1d_b/to1d"])
    assert row["placement"] == "cpu" and row["origin"] == ["conv1d_b"] and row["node"] == "conv1d_b"
    assert main(["report", str(out)]) == 0
    assert "conv1d_b/to1d" in capsys.readouterr().out
    x = np.random.default_rng(3).standard_normal((1, 4, 16)).astype(np.float32)
    ref, = _run(m, {"x": x})
    got, = onnx_mrvl.InferenceSession(str(out / "model.onnx")).run(None, {"x": x})
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


def test_boundary_transforms_are_listed_as_such():
    """The output's layout change the conversion adds on the CPU is a transform, not a CPU node."""
    r = onnx_mrvl.convert(_conv1d_pair())
    cpu_graph = [n for n in r.model.graph.node if n.domain != "mrvl"]
    assert [n.op_type for n in cpu_graph] == ["Transpose"]
    assert r.report.cpu_nodes() == []
    assert [(t["node"], t["op_type"], t["origin"]) for t in r.report.transforms] == \
        [(cpu_graph[0].name, "Transpose", ["conv1d_b"])]
    assert r.report.transforms[0]["reason"].startswith("added by the conversion at a region boundary: layout change")
    assert "(+1 boundary transforms)" in r.report.explain()
    assert r.report.to_dict()["transforms"] == r.report.transforms
    assert check_report(r.report, r.model, r.subgraphs) == []


def test_check_report_finds_an_unlisted_cpu_node():
    """The invariant can fail: a CPU node missing from the report is named."""
    r = onnx_mrvl.convert(_conv1d_pair(), exclude=["conv1d_b/to1d"])
    del r.report.decisions["conv1d_b (on the CPU)"]
    assert check_report(r.report, r.model, r.subgraphs) == \
        ["graph node conv1d_b/to1d runs on the CPU but the report does not list it"]


def _qdq_conv_heads(seed=0):
    """An int8 conv (Q/DQ around it, its output also a graph output, so a layout layer follows
    it) read by fp16 layers: a 1x1 float conv, a sigmoid and a pool."""
    rng = np.random.default_rng(seed)
    inits = [nh.from_array(rng.integers(-100, 100, (8, 4, 3, 3)).astype(np.int8), "wq"),
             nh.from_array(np.full(8, 0.01, np.float32), "ws"), nh.from_array(np.zeros(8, np.int8), "wz"),
             nh.from_array(np.float32(0.05), "xs"), nh.from_array(np.int8(0), "xz"),
             nh.from_array(np.float32(0.1), "ys"), nh.from_array(np.int8(0), "yz"),
             nh.from_array(rng.standard_normal(8).astype(np.float32), "b"),
             nh.from_array(rng.standard_normal((8, 8, 1, 1)).astype(np.float32), "w2")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dqw", axis=0),
             h.make_node("Conv", ["xd", "wd", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"], name="qc"),
             h.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"], name="dqc"),
             h.make_node("Conv", ["cd", "w2"], ["y2"], name="conv2"),
             h.make_node("Sigmoid", ["cd"], ["s"], name="sig"),
             h.make_node("AveragePool", ["s"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 4, 4]),
                      h.make_tensor_value_info("y2", T.FLOAT, [1, 8, 8, 8]),
                      h.make_tensor_value_info("cd", T.FLOAT, [1, 8, 8, 8])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)])


def test_precision_is_the_emitted_layers():
    """Each offloaded node's layer is its compute layer (not the layout change after it) and its
    precision that layer's, read here from the Nodes-JSON independently of the report."""
    m = _qdq_conv_heads()
    r = onnx_mrvl.convert(m)
    emitted = {n["name"]: n["attrs"] for sg in r.subgraphs for n in sg.nodes_json["nodes"] if n.get("op") == "tvm_op"}
    by_node = {d.node: d for d in r.report}
    assert by_node["conv"].precision == "int8" and emitted[by_node["conv"].layer]["layer_name"] == ["Conv2D"]
    assert len(by_node["conv"].layers) == 3          # layout in, the conv, the layout change of its output
    for name in ("qx", "dqx", "dqw", "qc", "dqc"):   # the pairs it absorbed: the same layer
        assert (by_node[name].layer, by_node[name].precision) == (by_node["conv"].layer, "int8")
    for name, op in (("conv2", "Conv2D"), ("pool", "Avgpool2D")):
        d = by_node[name]
        assert d.precision == "fp16" and emitted[d.layer]["layer_name"] == [op]
    for d in r.report:
        assert d.placement == "accelerator"
        prec = {"int8": "int8", "int8_in": "int8 in, fp16 out", "int8_out": "fp32, int8 out"}.get(
            (emitted[d.layer].get("precision") or [""])[0], "fp16")
        assert d.precision == prec == layer_precision(emitted[d.layer]), d.node
    assert [row["layer"] for row in r.report.layers] == list(emitted)
    assert all(row["precision"] == layer_precision(emitted[row["layer"]]) for row in r.report.layers)
    assert check_report(r.report, r.model, r.subgraphs) == []
    r.report.decisions["pool"].precision = "int8"    # a rule's intent that was not emitted: caught
    assert check_report(r.report, r.model, r.subgraphs) == \
        [f"pool: report says int8, layer {by_node['pool'].layer} is fp16"]


def _mixed_precision_cnn():
    from onnx_mrvl.testing.models import tiny_cnn
    m = tiny_cnn(seed=2)
    x = np.random.default_rng(5).standard_normal([d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim])
    calib = [{m.graph.input[0].name: (x * s).astype(np.float32)} for s in (0.5, 1.0, 1.5, 2.0)]
    return m, calib


def test_invariants_hold_across_models():
    """check_report on models with CPU islands, branches, exclusions and int8 / fp16 layers."""
    from onnx_mrvl.testing.models import branchy_chain, detection_like
    cases = [(detection_like(seed=1), {}), (branchy_chain(40, seed=1, branchy=True), {}),
             (_conv1d_pair(1), {"exclude": ["relu"]}), (_conv1d_pair(2), {"exclude": ["Conv"]}),
             (_qdq_conv_heads(1), {"exclude": ["sig"]})]
    m, calib = _mixed_precision_cnn()
    cases.append((m, {"quantize": "int8", "calibration": calib}))
    for model, kw in cases:
        r = onnx_mrvl.convert(model, **kw)
        assert check_report(r.report, r.model, r.subgraphs) == [], (model.graph.name, kw)
    assert {d.precision for d in r.report if d.placement == "accelerator"} >= {"int8"}


def test_quantization_layers_say_what_was_emitted():
    """report.quantization["layers"]: each layer's precision is its node's emitted layer's (or
    where it ended), the policy's choice kept under ``planned`` when they differ."""
    m, calib = _mixed_precision_cnn()
    r = onnx_mrvl.convert(m, quantize="int8", calibration=calib, fp16_layers=[m.graph.node[0].name])
    q = r.report.quantization
    emitted = {row["layer"]: row["precision"] for row in r.report.layers}
    assert q["layers"]
    for row in q["layers"]:
        d = r.report[row["layer"]]
        assert row["precision"] == (emitted[d.layer] if d.placement == "accelerator" else d.placement), row
    assert q["int8_layers"] == sum(1 for row in q["layers"] if row["precision"] == "int8") > 0
    first = next(row for row in q["layers"] if row["layer"] == m.graph.node[0].name)
    assert first["precision"] == "fp16" and "planned" not in first
    info = {"layers": [{"layer": first["layer"], "precision": "int8", "reason": "intended"}], "int8_layers": 1}
    from onnx_mrvl.report_graph import reconcile_quantization
    reconcile_quantization(r.report.decisions, info)   # an intent that was not emitted is corrected
    assert info["layers"][0]["precision"] == "fp16" and info["layers"][0]["planned"] == "int8"
    assert info["int8_layers"] == 0 and "planned int8, emitted fp16 (layer " in info["layers"][0]["reason"]


def test_cli_explain_and_report_list_the_created_node(tmp_path, capsys):
    """`onnx-mrvl convert --explain` and `onnx-mrvl report --json` show the created CPU node with its origin."""
    src = tmp_path / "m.onnx"
    onnx.save(_conv1d_pair(4), str(src))
    out = tmp_path / "out"
    assert main(["convert", str(src), "-o", str(out), "--exclude", "conv1d_b/to1d", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "1 CPU node(s) created by the conversion from them" in text
    assert "(from conv1d_b)  (runs as conv1d_b/to1d)" in text
    assert main(["report", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [(c["node"], c["origin"], c["runs_as"]) for c in rep["cpu_nodes"]] == \
        [("conv1d_b", ["conv1d_b"], ["conv1d_b/to1d"])]
    assert rep["cpu_nodes"][0]["reason"].startswith("created by the conversion from offloaded node(s)")


def _if_with_cpu_node_in_a_branch():
    """x -> conv -> y; If(cond): then ``conv -> Sin`` (the conv offloaded, Sin on the CPU), else
    ``conv -> Relu``."""
    rng = np.random.default_rng(7)
    w = lambda *s: nh.from_array((rng.standard_normal(s) * 0.2).astype(np.float32), f"w{len(s)}_{rng.integers(1 << 30)}")
    wt, we, w0 = w(8, 8, 3, 3), w(8, 8, 3, 3), w(8, 3, 3, 3)
    vi = h.make_tensor_value_info
    then = h.make_graph([h.make_node("Conv", ["y", wt.name], ["t1"], name="then_conv", pads=[1, 1, 1, 1]),
                         h.make_node("Sin", ["t1"], ["t_out"], name="then_sin")],
                        "then", [], [vi("t_out", T.FLOAT, [1, 8, 8, 8])])
    other = h.make_graph([h.make_node("Conv", ["y", we.name], ["e1"], name="else_conv", pads=[1, 1, 1, 1]),
                          h.make_node("Relu", ["e1"], ["e_out"], name="else_relu")],
                         "else", [], [vi("e_out", T.FLOAT, [1, 8, 8, 8])])
    nodes = [h.make_node("Conv", ["x", w0.name], ["y"], name="conv0", pads=[1, 1, 1, 1]),
             h.make_node("If", ["cond"], ["z"], name="If_0", then_branch=then, else_branch=other)]
    g = h.make_graph(nodes, "if_sin", [vi("x", T.FLOAT, [1, 3, 8, 8]), vi("cond", T.BOOL, [])],
                     [vi("z", T.FLOAT, [1, 8, 8, 8])], [w0, wt, we])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_check_report_reads_the_cpu_nodes_inside_if_branches(tmp_path):
    """A converted branch's CPU node (then_sin, beside its offloaded conv) is in ``report.bodies``
    (and report.json), and check_report walks the bodies: leaving it out, or the body's record, is
    found; a body kept as it was is exempt (it runs whole on the CPU, its If's record says so)."""
    import copy
    m = _if_with_cpu_node_in_a_branch()
    r = onnx_mrvl.convert(m)
    then = next(b for b in r.report.bodies if b["path"] == ["If_0", "then_branch"])
    assert [d["node"] for d in then["nodes"]] == ["then_sin"] and then["nodes"][0]["placement"] == "cpu"
    assert any(b["path"] == ["If_0", "else_branch"] and b["nodes"] == [] for b in r.report.bodies)
    assert check_report(r.report, r.model, r.subgraphs) == []
    assert "cpu: inside body If_0.then_branch (1 nodes)" in r.report.explain() and "then_sin" in r.report.explain()
    r.save(str(tmp_path / "out"))
    assert json.load(open(tmp_path / "out" / "report.json"))["bodies"] == r.report.bodies
    for x in (0, 1):   # the deployable model still computes both branches
        feeds = {"x": np.random.default_rng(x).standard_normal((1, 3, 8, 8)).astype(np.float32), "cond": np.array(bool(x))}
        ref = _run(m, feeds)[0]
        got = onnx_mrvl.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, feeds)[0]
        assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    bad = copy.deepcopy(r.report)
    next(b for b in bad.bodies if b["path"] == ["If_0", "then_branch"])["nodes"] = []
    assert check_report(bad, r.model, r.subgraphs) == \
        ["graph node then_sin of body If_0.then_branch runs on the CPU but the report does not list it"]
    bad.bodies = [b for b in bad.bodies if b["path"] != ["If_0", "then_branch"]]
    assert check_report(bad, r.model, r.subgraphs) == \
        ["body If_0.then_branch has accelerator regions but the report has no record of it"]
    kept = onnx_mrvl.convert(m, reference=True)   # both bodies kept as they were (reference bodies)
    assert kept.report.bodies == [] and check_report(kept.report, kept.model, kept.subgraphs) == []
    assert "bodies on the CPU" in kept.report["If_0"].reason


def test_exclude_takes_a_node_inside_a_branch():
    """``exclude=["then_conv"]`` names a node of the If's then branch: it was refused as matching no
    node of the model; now the branch's conversion keeps it on the CPU (the branch, with nothing
    left to offload, runs as it was, which its If's record says), the else branch is converted."""
    m = _if_with_cpu_node_in_a_branch()
    r = onnx_mrvl.convert(m, exclude=["then_conv"])
    assert [b["path"] for b in r.report.bodies] == [["If_0", "else_branch"]]
    assert "then_branch on the CPU" in r.report["If_0"].reason
    assert check_report(r.report, r.model, r.subgraphs) == []
    then = next(a.g for a in next(n for n in r.model.graph.node if n.op_type == "If").attribute if a.name == "then_branch")
    assert [n.op_type for n in then.node] == ["Conv", "Sin"]
