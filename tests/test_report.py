"""``onnx-mrvl report``: regions, layers, MACs offloaded, CPU reasons, simulated cycles; HTML in Chromium.

Model-zoo architectures: squeezenet, shufflenet and inception_v1 by default; all nine with
ONNX_MRVL_FULL_ZOO=1 (the large-FC ones take 30-140 s each to convert on 2 cores)."""
import json
import os
import re
import shutil
import struct
import sys
import time

import onnx
import pytest
from onnx_mrvl.testing.models import branchy_chain, tiny_cnn

import onnx_mrvl
from onnx_mrvl.artifact import load
from onnx_mrvl.cli.main import main
from onnx_mrvl.inspection.diff import diff_models
from onnx_mrvl.inspection.graphview import write_html
from onnx_mrvl.inspection.offload import UNKNOWN_REASON, offload_report
from onnx_mrvl.inspection.report_html import render_report_html

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_graphview import chromium, run_chromium  # noqa: E402

FAST_ZOO = ("squeezenet", "shufflenet", "inception_v1")


def zoo_names():
    from onnx_mrvl.testing.randomize_weights import zoo_model_paths
    names = list(zoo_model_paths())
    return names if os.environ.get("ONNX_MRVL_FULL_ZOO") else [n for n in names if n in FAST_ZOO]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Every selected zoo architecture converted once: name -> output folder."""
    from onnx_mrvl.testing.randomize_weights import load_zoo
    base = tmp_path_factory.mktemp("zoo")
    out = {}
    for name in zoo_names():
        onnx_mrvl.convert(load_zoo(name, 0)).save(str(base / name))
        out[name] = str(base / name)
    return out


def _subgraphs(model_path):
    return [n for n in onnx.load(model_path).graph.node if n.domain == "mrvl" and n.op_type.startswith("Subgraph")]


@pytest.mark.parametrize("name", zoo_names())
def test_report_of_each_zoo_architecture(zoo, name, capsys):
    out = zoo[name]
    with open(os.path.join(out, "report.json")) as f:
        rep = json.load(f)
    assert main(["report", out, "--no-layers"]) == 0
    text = capsys.readouterr().out
    frac = 100 * rep["macs_offloaded"] / rep["macs_total"]
    assert f"MACs offloaded: {rep['macs_offloaded']:,} of {rep['macs_total']:,} = {frac:.1f}%" in text
    cpu = [d for d in rep["nodes"] if d["placement"] == "cpu"]
    for reason in {d["reason"] for d in cpu}:
        assert f"  {reason} ({sum(d['reason'] == reason for d in cpu)}): " in text
    assert main(["report", out, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["offload_fraction"] == pytest.approx(rep["offload_fraction"], abs=1e-6)
    assert data["summary"]["cpu_nodes"] == len(cpu) and data["reasons"] == {
        r: sum(d["reason"] == r for d in cpu) for r in {d["reason"] for d in cpu}}
    nodes = _subgraphs(os.path.join(out, "model.onnx"))
    assert [r["node"] for r in data["regions"]] == [n.name for n in nodes]
    for r in data["regions"]:
        meta = load(os.path.join(out, r["artifact"])).meta
        assert r["layers"] == len(meta["layers"]) == len(r["layer_rows"])
        assert r["macs"] == sum(layer["macs"] for layer in meta["layers"])
        assert r["cycles"] == sum(x["cycles"] for x in r["layer_rows"]) > 0
        for x, layer in zip(r["layer_rows"], meta["layers"]):
            assert (x["name"], x["layer_name"], x["origin"]) == (layer["name"], layer["layer_name"], layer["origin"])
            assert x["bound"] in ("compute", "memory") and x["cycles"] >= max(x["compute_cycles"], x["memory_cycles"])
    assert sum(r["macs"] for r in data["regions"]) == rep["macs_offloaded"]


@pytest.fixture(scope="module")
def tiny_cpu_conv(tmp_path_factory):
    """tiny_cnn with conv2 kept on the CPU: two regions, a CPU Conv between them."""
    out = tmp_path_factory.mktemp("tiny") / "out"
    m = tiny_cnn()
    result = onnx_mrvl.convert(m, exclude=["conv2"])
    result.save(str(out))
    onnx.save(m, str(out.parent / "orig.onnx"))
    return str(out), result


def test_bare_model_derives_regions_and_estimates_cpu_macs(tiny_cpu_conv, tmp_path, capsys):
    out, result = tiny_cpu_conv
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in os.listdir(out):
        if f.endswith(".bin") or f == "model.onnx":
            shutil.copy(os.path.join(out, f), bare / f)
    full, derived = offload_report(out), offload_report(str(bare / "model.onnx"))
    assert full.has_report_json and not derived.has_report_json and derived.macs_total_estimated
    assert derived.macs_offloaded == full.macs_offloaded == result.report.macs_offloaded
    assert derived.macs_total == full.macs_total == result.report.macs_total   # conv2's MACs from shapes
    assert [r["cycles"] for r in derived.regions] == [r["cycles"] for r in full.regions]
    cpu = [n for n in onnx.load(str(bare / "model.onnx")).graph.node if n.domain != "mrvl"]
    assert [c["node"] for c in derived.cpu_nodes] == [n.name for n in cpu] and "conv2" in [n.name for n in cpu]
    assert {c["reason"] for c in derived.cpu_nodes} == {UNKNOWN_REASON}
    assert [c["reason"] for c in full.cpu_nodes if c["node"] == "conv2"] == ["excluded by the user (exclude=...)"]
    assert main(["report", str(bare / "model.onnx")]) == 0
    assert "(total estimated from shapes)" in capsys.readouterr().out


def test_report_html_colours_regions_and_cpu_nodes(tiny_cpu_conv, tmp_path):
    out, _ = tiny_cpu_conv
    rep = offload_report(out)
    html = render_report_html(rep)
    groups = re.findall(r'<g class="node ([a-z]+)" data-name="([^"]+)"[^>]*><title>([^<]*)</title>', html)
    classes = {name: cls for cls, name, _ in groups}
    assert classes == {"mrvl_region_0": "accelerator", "conv2": "cpu", "mrvl_region_1": "accelerator"}
    titles = {name: tip for _, name, tip in groups}
    assert "excluded by the user" in titles["conv2"] and "original nodes: conv2" in titles["conv2"]
    assert "original nodes: conv1, relu1, pool1" in titles["mrvl_region_0"]
    assert html.count("<h2 id=\"region-") == 2 and "tvmgen_mrvl_main_1" in html
    orig = render_report_html(rep, original=os.path.join(os.path.dirname(out), "orig.onnx"))
    oc = dict((n, c) for c, n in re.findall(r'<g class="node ([a-z]+)" data-name="([^"]+)"', orig))
    assert oc == {"conv1": "accelerator", "relu1": "accelerator", "pool1": "accelerator", "conv2": "cpu",
                  "gap": "accelerator", "flatten": "accelerator", "fc": "accelerator"}


def test_chromium_renders_the_report_page(zoo, tmp_path, capsys):
    exe = chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install it)")
        pytest.skip("chromium not installed")
    out = zoo["shufflenet"] if "shufflenet" in zoo else next(iter(zoo.values()))
    page = str(tmp_path / "report.html")
    assert main(["report", out, "--html", page, "--no-layers"]) == 0
    assert f"html: {page}" in capsys.readouterr().out
    n_nodes = len(onnx.load(os.path.join(out, "model.onnx")).graph.node)
    url = "file://" + os.path.abspath(page)
    dom = run_chromium(exe, tmp_path, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<div id="rendered-count">(\d+)</div>', dom.stdout)
    assert m, "the page's script did not run: " + dom.stdout[-500:]
    assert int(m.group(1)) == n_nodes
    assert 'section class="report"' in dom.stdout and "CPU nodes" in dom.stdout
    shot = tmp_path / "shot.png"
    r = run_chromium(exe, tmp_path, url, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert r.returncode == 0 and data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1000) and len(data) > 20_000


def test_errors_exit_3(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 3
    assert "holds no model.onnx" in capsys.readouterr().err
    onnx.save(tiny_cnn(), str(tmp_path / "model.onnx"))
    (tmp_path / "report.json").write_text("[1, 2]")
    assert main(["report", str(tmp_path)]) == 3
    assert "not a convert report" in capsys.readouterr().err


def test_diff_and_report_of_a_2000_node_model_under_5s(tmp_path):
    m = branchy_chain(2000, branchy=True)
    onnx.save(m, str(tmp_path / "orig.onnx"))
    onnx_mrvl.convert(m).save(str(tmp_path / "out"), stages=True)
    t0 = time.process_time()
    d = diff_models(str(tmp_path / "orig.onnx"), str(tmp_path / "out" / "model.onnx"))
    t_diff = time.process_time() - t0
    t0 = time.process_time()
    rep = offload_report(str(tmp_path / "out"))
    write_html(str(tmp_path / "r.html"), render_report_html(rep, original=str(tmp_path / "orig.onnx")))
    t_report = time.process_time() - t0
    grouped = sum(len(g["a"]) for g in d.nodes["groups"])
    assert d.a_nodes == 2000 and grouped > 1900 and grouped + sum(d.matched.values()) == 2000
    assert not d.nodes["removed"]          # every original node is in the region or still on the CPU
    assert rep.macs_total > 0 and rep.offload_fraction == pytest.approx(1.0)
    assert t_diff < 5.0 and t_report < 5.0, (t_diff, t_report)


def test_a_node_only_partly_offloaded_says_so():
    """An original node that legalization split (an 11x11 conv -> kernel tiles summed by Adds) is
    reported on the accelerator when its main part is, and its reason names the parts left on the
    CPU (here the Adds, excluded by the user) instead of hiding them."""
    import numpy as np
    from onnx import helper
    from onnx_mrvl.legalize.testing import make_model
    r = np.random.default_rng(0)
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="big", kernel_shape=[11, 11], pads=[5] * 4)],
                   [("x", [1, 3, 16, 16])], ["y"], {"w": r.standard_normal((4, 3, 11, 11)).astype(np.float32)})
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", 1, [1, 4, 16, 16]))
    d = onnx_mrvl.convert(m, exclude=["Add"]).report.decisions["big"]
    assert d.placement == "accelerator" and "partly on the CPU" in d.reason, d.reason
    assert re.search(r"partly on the CPU: \d+ of its \d+ legalized nodes", d.reason)
