"""Tests of the HTML graph pictures (onnx_mrvl.inspection.graphview / graph_layout), incl. headless Chromium."""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from onnx import TensorProto, helper

from onnx_mrvl.inspection.diff import diff_models
from onnx_mrvl.inspection.graphview import render_diff_html, render_graph_html, write_html
from onnx_mrvl.inspection.graph_layout import layered_layout, node_keys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the model builders of test_diff
from test_diff import build_model, chain_model, fused_model, node  # noqa: E402


def svgs(html):
    """Every <svg> element of the page, parsed as XML (fails on malformed SVG)."""
    parts = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    return [ET.fromstring(p) for p in parts]


def node_groups(svg):
    return [g for g in svg.iter("g") if g.get("class", "").split()[:1] == ["node"]]


def details(html, side):
    m = re.search(r'<script type="application/json" class="details" data-side="%s">(.*?)</script>' % side, html, re.S)
    return json.loads(m.group(1))


def test_graph_html_structure():
    m = build_model()
    html = render_graph_html(m, node_classes={"conv1": "accelerator", "relu1": "accelerator", "fc": "cpu"},
                             node_info={"fc": "kept on CPU: Gemm is not offloaded"}, title="small <cnn>")
    assert html.count('<g class="node') == 9
    assert not re.search(r"https?://", html)
    (svg,) = svgs(html)
    groups = node_groups(svg)
    assert sorted(g.get("data-name") for g in groups) == sorted(n.name for n in m.graph.node)
    cls = {g.get("data-name"): g.get("class") for g in groups}
    assert cls["conv1"] == "node accelerator" and cls["fc"] == "node cpu" and cls["pool1"] == "node"
    fc = next(g for g in groups if g.get("data-name") == "fc")
    assert "kept on CPU" in fc.find("title").text
    assert [t.text for t in fc.findall("text")] == ["Gemm", "fc"]
    assert len(svg.findall("./g[@class='edges']/path")) == 11  # 9 tensors between nodes + x in + y out
    assert "small &lt;cnn&gt;" in html and ">accelerator<" in html and ">CPU<" in html
    assert details(html, "a")["fc"]["info"] == "kept on CPU: Gemm is not offloaded"
    assert details(html, "a")["fc"]["attributes"]["transB"] == "1"


def test_layout_is_layered_without_overlaps():
    m = build_model()
    html = render_graph_html(m)
    (svg,) = svgs(html)
    pos = {}
    for g in node_groups(svg):
        x, y = map(float, re.match(r"translate\(([-\d.]+),([-\d.]+)\)", g.get("transform")).groups())
        w = float(g.find("rect").get("width"))
        pos[g.get("data-name")] = (x, y, w)
    for n in m.graph.node:  # every edge goes downwards
        for t in n.input:
            prod = next((p for p in m.graph.node if t in p.output), None)
            if prod is not None:
                assert pos[prod.name][1] < pos[n.name][1]
    rows = {}
    for x, y, w in pos.values():
        rows.setdefault(y, []).append((x, x + w))
    for boxes in rows.values():
        boxes.sort()
        assert all(a[1] <= b[0] for a, b in zip(boxes, boxes[1:]))


def test_layout_orders_a_tree_without_crossings_and_places_constants_late():
    # a tree given in a scrambled order: root 0 -> 3 children -> 2 grandchildren each
    kids = {0: [5, 2, 8]}
    kids.update({5: [9, 1], 2: [7, 3], 8: [4, 6]})
    edges = [(u, v) for u, vs in kids.items() for v in vs] + [(10, 4)]  # 10: a constant feeding 4
    lay = layered_layout([(60.0, 30.0)] * 11, edges, roots=[0])
    assert lay.layer[0] == 0 and lay.layer[5] == 1 and lay.layer[9] == 2
    assert lay.layer[10] == 1  # pulled down next to its consumer, not left at the top
    same = [(u, v) for u, v in edges if lay.layer[u] + 1 == lay.layer[v]]
    crossings = sum(1 for i, (a, b) in enumerate(same) for c, d in same[i + 1:]
                    if lay.layer[a] == lay.layer[c] and (lay.x[a] - lay.x[c]) * (lay.x[b] - lay.x[d]) < 0)
    assert crossings == 0
    for u, v, pts in lay.edges:
        assert pts[0][1] < pts[-1][1]


def test_unnamed_and_duplicate_names_get_unique_keys():
    m = build_model()
    for n in m.graph.node[:4]:
        n.name = ""
    m.graph.node[5].name = m.graph.node[6].name = "dup"
    keys = node_keys(m.graph)
    assert len(set(keys)) == 9 and keys[0] == "Conv#0" and keys[5] == "dup#5" and keys[8] == "fc"
    html = render_graph_html(m)
    (svg,) = svgs(html)
    assert sorted(g.get("data-name") for g in node_groups(svg)) == sorted(keys)


def diff_pair():
    a = build_model()
    b = fused_model(a)
    b.graph.node.remove(node(b, "relu2"))
    node(b, "add1").input[0] = "c2"
    b.graph.node.append(helper.make_node("Identity", ["y"], ["y2"], name="extra"))
    b.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 10]))
    next(at for at in node(b, "fc").attribute if at.name == "alpha").f = 0.5
    return a, b


def test_diff_html_colours_both_graphs():
    a, b = diff_pair()
    d = diff_models(a, b)
    html = render_diff_html(a, b, d)
    assert html.count('<g class="node') == len(a.graph.node) + len(b.graph.node) == 17
    assert not re.search(r"https?://", html)
    svg_a, svg_b = svgs(html)
    ca = {g.get("data-name"): g.get("class") for g in node_groups(svg_a)}
    cb = {g.get("data-name"): g.get("class") for g in node_groups(svg_b)}
    assert ca["relu2"] == "node removed" and ca["fc"] == "node changed" and ca["conv1"] == "node fused"
    assert ca["gap"] == "node"
    assert cb["extra"] == "node added" and cb["fc"] == "node changed" and cb["mrvl_conv2d_0"] == "node fused"
    db = details(html, "b")
    assert db["mrvl_conv2d_0"]["peers"] == ["conv1", "relu1"]
    assert "mrvl.conv2d_nhwc2nhwc" in db["mrvl_conv2d_0"]["info"]
    assert "alpha: 1.0 -> 0.5" in db["fc"]["info"]
    assert details(html, "a")["gap"]["peers"] == ["gap"]
    for word in ("added", "removed", "changed", "fused / replaced"):
        assert f">{word}<" in html


def test_big_graph_renders_every_node_quickly():
    m = chain_model(400)  # 2000 nodes
    t0 = time.process_time()
    html = render_graph_html(m)
    dt = time.process_time() - t0
    assert html.count('<g class="node') == 2000
    (svg,) = svgs(html)
    assert len(node_groups(svg)) == 2000
    assert dt < 20, f"layout of 2000 nodes took {dt:.1f} s"


def test_write_html_is_atomic(tmp_path):
    path = tmp_path / "sub" / "g.html"
    write_html(str(path), "<html>one</html>")
    write_html(str(path), "<html>two</html>")
    assert path.read_text() == "<html>two</html>"
    assert os.listdir(path.parent) == ["g.html"]
    assert path.stat().st_mode & 0o444 == 0o444


def chromium():
    for c in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if c and os.path.exists(c):
            return c
    return None


def run_chromium(exe, tmp_path, url, *extra):
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000", *extra, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def test_chromium_renders_the_diff_page(tmp_path):
    exe = chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI must install it)")
        pytest.skip("chromium not installed")
    a, b = diff_pair()
    page = write_html(str(tmp_path / "diff.html"), render_diff_html(a, b, diff_models(a, b)))
    url = "file://" + os.path.abspath(page)
    dom = run_chromium(exe, tmp_path, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r'<div id="rendered-count">(\d+)</div>', dom.stdout)
    assert m, "the page's script did not run: " + dom.stdout[-500:]
    assert int(m.group(1)) == 17
    shot = tmp_path / "shot.png"
    r = run_chromium(exe, tmp_path, url, f"--screenshot={shot}")
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1000)
    assert len(data) > 20_000  # boxes, text, edges and colours, not a blank page
