"""Why each cut: the CPU island between two regions with its nodes' reasons, a direct boundary made
by the user's cut_after, one the partitioner made to avoid a cycle, user excludes; in
``result.report``, report.json and ``onnx-mrvl report`` (docs/partition.md "Why each cut")."""
import json
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_mrvl
from onnx_mrvl.cli.main import main
from onnx_mrvl.cuts import CUT_AFTER, CYCLE, NOT_SUPPORTED, USER_EXCLUDE, find_cuts
from onnx_mrvl.inspection.offload import offload_report
from onnx_mrvl.inspection.report_html import render_report_html

F = TensorProto.FLOAT


def _conv(rng, x, y, name, cin=8, cout=8):
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, 3, 3)) * 0.2).astype(np.float32), f"{name}_w")
    return helper.make_node("Conv", [x, w.name], [y], name=name, pads=[1, 1, 1, 1]), w


def _model(nodes_and_weights, out, channels=8):
    nodes = [n for n, _ in nodes_and_weights]
    inits = [w for _, w in nodes_and_weights if w is not None]
    g = helper.make_graph(nodes, "cuts", [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info(out, F, [1, channels, 16, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def chain_with_erf():
    """conv1 -> relu1 -> Erf (CPU only) -> conv2 -> conv3."""
    rng = np.random.default_rng(0)
    return _model([_conv(rng, "x", "c1", "conv1", cin=3), (helper.make_node("Relu", ["c1"], ["r1"], name="relu1"), None),
                   (helper.make_node("Erf", ["r1"], ["e"], name="erf_cpu"), None),
                   _conv(rng, "e", "c2", "conv2"), _conv(rng, "c2", "c3", "conv3")], "c3")


def test_cpu_island_and_user_cut_after(tmp_path, capsys):
    result = onnx_mrvl.convert(chain_with_erf(), cut_after=["conv2"])
    cuts = result.report.cuts
    assert [(c["kind"], c["from"], c["to"]) for c in cuts] == [
        ("cpu", ["mrvl_region_0"], ["mrvl_region_1"]), ("direct", ["mrvl_region_1"], ["mrvl_region_2"])]
    island, direct = cuts
    assert island["position"] == "between" and island["why"] == [NOT_SUPPORTED]
    (erf,) = island["cpu_nodes"]
    assert erf["node"] == "erf_cpu" and erf["op_type"] == "Erf" and erf["reasons"] == ["no accelerator op for Erf"]
    assert island["reason"] == "CPU node(s) Erf erf_cpu: no accelerator op for Erf"
    assert direct["why"] == [CUT_AFTER] and direct["tensors"] == ["c2"]
    assert direct["reason"] == "user cut_after: conv2 ends mrvl_region_1"
    text = result.report.explain()
    assert "cuts (why each region ends where it does):" in text
    assert ("  mrvl_region_0 -> mrvl_region_1 [CPU island between; not supported on the accelerator]: "
            "CPU node(s) Erf erf_cpu: no accelerator op for Erf") in text
    assert "  mrvl_region_1 -> mrvl_region_2 [direct; user cut_after]: user cut_after: conv2 ends mrvl_region_1" in text
    # report.json and `onnx-mrvl report` carry the same section
    out = str(tmp_path / "out")
    result.save(out)
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    assert rep["cuts"] == cuts and rep["options"] == {"exclude": [], "cut_after": ["conv2"]}
    assert main(["report", out, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cuts"] == cuts
    assert main(["report", out, "--no-layers"]) == 0
    assert "[direct; user cut_after]: user cut_after: conv2 ends mrvl_region_1" in capsys.readouterr().out
    page = render_report_html(offload_report(out))
    assert "<h2>Cuts: why each region ends where it does</h2>" in page
    assert "<td>user cut_after: conv2 ends mrvl_region_1</td>" in page
    # a report.json written before cuts were recorded: recomputed from the model and the decisions
    del rep["cuts"]
    os.remove(os.path.join(out, "manifest.json"))   # we edit the folder on purpose: no longer checked
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(rep, f)
    assert offload_report(out).cuts == cuts
    # a bare model: the boundaries are known, the reasons are not
    os.remove(os.path.join(out, "report.json"))
    bare = offload_report(os.path.join(out, "model.onnx")).cuts
    assert [(c["kind"], c["from"], c["to"]) for c in bare] == [(c["kind"], c["from"], c["to"]) for c in cuts]
    assert bare[0]["why"] == ["reason unknown"] and bare[1]["why"] == ["reason unknown"]


def test_user_exclude_between_two_regions():
    rng = np.random.default_rng(1)
    m = _model([_conv(rng, "x", "c1", "conv1", cin=3), _conv(rng, "c1", "c2", "conv2"),
                _conv(rng, "c2", "c3", "conv3")], "c3")
    cuts = onnx_mrvl.convert(m, exclude=["conv2"]).report.cuts
    (cut,) = cuts
    assert cut["from"] == ["mrvl_region_0"] and cut["to"] == ["mrvl_region_1"] and cut["why"] == [USER_EXCLUDE]
    assert [r["node"] for r in cut["cpu_nodes"]] == ["conv2"]
    assert cut["cpu_nodes"][0]["reasons"] == ["excluded by the user (exclude=...)"]


def test_direct_boundary_that_avoids_a_cycle_names_the_cpu_path():
    """conv1 feeds conv2's group directly and through Erf (CPU): one region would need Erf inside."""
    rng = np.random.default_rng(2)
    m = _model([_conv(rng, "x", "c1", "conv1", cin=3), (helper.make_node("Erf", ["c1"], ["e"], name="erf_cpu"), None),
                _conv(rng, "c1", "c2", "conv2"), (helper.make_node("Add", ["c2", "e"], ["s"], name="add"), None),
                _conv(rng, "s", "c3", "conv3")], "c3")
    result = onnx_mrvl.convert(m)
    cuts = result.report.cuts
    kinds = {(c["kind"], tuple(c["from"]), tuple(c["to"])): c for c in cuts}
    assert set(kinds) == {("cpu", ("mrvl_region_0",), ("mrvl_region_1",)),
                          ("direct", ("mrvl_region_0",), ("mrvl_region_1",))}
    direct = kinds[("direct", ("mrvl_region_0",), ("mrvl_region_1",))]
    assert direct["why"] == [CYCLE]
    assert direct["reason"] == ("mrvl_region_0 also reaches mrvl_region_1 through CPU node Erf erf_cpu (no "
                                "accelerator op for Erf): merging them would close a cycle")
    # find_cuts on the deployable model alone gives the same boundaries
    again = find_cuts(result.model, result.report.decisions, partition="max")
    assert again == cuts


def test_regions_touching_model_inputs_and_outputs_through_cpu_nodes():
    rng = np.random.default_rng(3)
    m = _model([(helper.make_node("Erf", ["x"], ["e0"], name="erf_in"), None), _conv(rng, "e0", "c1", "conv1", cin=3),
                _conv(rng, "c1", "c2", "conv2"), (helper.make_node("Erf", ["c2"], ["e1"], name="erf_out"), None)], "e1")
    cuts = onnx_mrvl.convert(m).report.cuts
    assert [(c["position"], c["from"], c["to"]) for c in cuts] == [
        ("before", ["model input"], ["mrvl_region_0"]), ("after", ["mrvl_region_0"], ["model output"])]
    assert onnx.checker.check_model(m) is None
