"""Self-contained HTML pictures of ONNX graphs (inline SVG, a little inline CSS/JS, no network).

``render_graph_html(model, node_classes=..., node_info=...)`` draws one graph as a layered DAG
(``layout.layered_layout``); ``render_diff_html(a, b, diff)`` draws A and B side by side coloured
by the diff (removed / changed / renamed / fused in A; added / changed / renamed / fused in B;
clicking a node selects its counterpart). Every node is ``<g class="node <class>"
data-name="<key>">`` (keys from ``layout.node_keys``: the name when unique). At load the page
writes how many node boxes the browser actually rendered into ``<div id="rendered-count">``;
``page.html#node=<key>`` opens with that node selected.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Dict, List, Mapping, Optional, Tuple
from xml.sax.saxutils import escape

import onnx

from .canonical import ModelLike, attr_value, load_model
from .diff import GraphDiff, change_lines, short_value
from .graph_layout import layered_layout, node_keys, producer_map

log = logging.getLogger(__name__)

#: class -> (fill, stroke, legend text)
CLASS_STYLES: Dict[str, Tuple[str, str, str]] = {
    "accelerator": ("#cdeedd", "#1b7f4c", "accelerator"),
    "cpu": ("#dde7f6", "#3a69a6", "CPU"),
    "added": ("#d3f5c9", "#2b8a2b", "added"),
    "removed": ("#fbd5d5", "#c0392b", "removed"),
    "changed": ("#ffedb8", "#b7860b", "changed"),
    "renamed": ("#d3eef6", "#2a8aa8", "renamed"),
    "fused": ("#e7d7f7", "#7b3fa6", "fused / replaced"),
}
DEFAULT_STYLE = ("#f6f6f6", "#8a8a8a", "node")
NODE_H, IO_H = 38.0, 24.0
MAX_LABEL = 34


def _attr(text: str) -> str:
    return escape(str(text), {'"': "&quot;", "\n": "&#10;"})


def _css_class(cls: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", cls) or "node"


def _clip(text: str, n: int = MAX_LABEL) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _label_width(*texts: str) -> float:
    return max(70.0, min(280.0, max(len(_clip(t)) for t in texts) * 7.0 + 22.0))


def _curve(pts: List[Tuple[float, float]]) -> str:
    d = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        dy = (y1 - y0) / 2 if y1 > y0 else 40.0
        d.append(f"C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} {x1:.1f},{y1:.1f}")
    return " ".join(d)


def _graph_svg(model: onnx.ModelProto, side: str, classes: Mapping[str, str], info: Mapping[str, str],
               peers: Mapping[str, List[str]]) -> Tuple[str, Dict[str, dict], set, Dict[str, int]]:
    """The <svg> of one graph, the per-node details for the side panel, the classes used."""
    g = model.graph
    keys = node_keys(g)
    inits = {t.name for t in g.initializer}
    g_inputs = [vi.name for vi in g.input if vi.name not in inits]
    g_outputs = [vi.name for vi in g.output]
    n = len(g.node)
    sizes = [(_label_width(nd.op_type, nd.name or keys[i]), NODE_H) for i, nd in enumerate(g.node)]
    io_index: Dict[Tuple[str, str], int] = {}
    for kind, names in (("in", g_inputs), ("out", g_outputs)):
        for name in names:
            io_index[(kind, name)] = len(sizes)
            sizes.append((_label_width(name), IO_H))
    prod = producer_map(g)
    edges: List[Tuple[int, int]] = []
    tensors: Dict[Tuple[int, int], str] = {}
    for i, nd in enumerate(g.node):
        for t in nd.input:
            u = prod[t][0] if t in prod else io_index.get(("in", t))
            if u is not None:
                edges.append((u, i))
                tensors.setdefault((u, i), t)
    for name in g_outputs:
        u = prod[name][0] if name in prod else io_index.get(("in", name))
        if u is not None:
            edges.append((u, io_index[("out", name)]))
            tensors.setdefault((u, io_index[("out", name)]), name)
    lay = layered_layout(sizes, edges, roots=[io_index[("in", name)] for name in g_inputs])
    used = set()
    parts = [f'<svg id="svg-{side}" class="graph" width="{lay.width:.0f}" height="{lay.height:.0f}" '
             f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" data-w="{lay.width:.0f}" data-h="{lay.height:.0f}">',
             f'<defs><marker id="arrow-{side}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
             f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>',
             '<g class="edges">']
    for u, v, pts in lay.edges:
        parts.append(f'<path d="{_curve(pts)}" marker-end="url(#arrow-{side})">'
                     f'<title>{escape(tensors.get((u, v), ""))}</title></path>')
    parts.append("</g>")
    for (kind, name), idx in io_index.items():
        x, y, w, h = lay.x[idx], lay.y[idx], lay.w[idx], lay.h[idx]
        parts.append(f'<g class="io {kind}" data-tensor="{_attr(name)}"><title>graph {kind}put {escape(name)}</title>'
                     f'<rect x="{x - w / 2:.1f}" y="{y - h / 2:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{h / 2:.1f}"/>'
                     f'<text x="{x:.1f}" y="{y + 4:.1f}">{escape(_clip(name))}</text></g>')
    details: Dict[str, dict] = {}
    for i, nd in enumerate(g.node):
        key = keys[i]
        cls = classes.get(key) or (classes.get(nd.name) if nd.name else None)
        text = info.get(key) or (info.get(nd.name) if nd.name else None) or ""
        css = _css_class(cls) if cls else ""
        if cls:
            used.add(css)
        x, y, w, h = lay.x[i], lay.y[i], lay.w[i], lay.h[i]
        op = f"{nd.domain}::{nd.op_type}" if nd.domain not in ("", "ai.onnx") else nd.op_type
        tip = f"{op} {nd.name or key}" + (f"\n{text}" if text else "")
        parts.append(f'<g class="node{" " + css if css else ""}" data-name="{_attr(key)}" '
                     f'transform="translate({x - w / 2:.1f},{y - h / 2:.1f})"><title>{escape(tip)}</title>'
                     f'<rect width="{w:.1f}" height="{h:.1f}" rx="5"/>'
                     f'<text class="op" x="{w / 2:.1f}" y="15">{escape(_clip(nd.op_type))}</text>'
                     f'<text class="nm" x="{w / 2:.1f}" y="30">{escape(_clip(nd.name or key))}</text></g>')
        attrs = {a.name: short_value(_attr_text(a), 160) for a in nd.attribute}
        details[key] = {"op": op, "name": nd.name, "class": cls or "", "info": text,
                        "inputs": list(nd.input), "outputs": list(nd.output), "attributes": attrs,
                        "peers": list(peers.get(key, []))}
    parts.append("</svg>")
    stats = {"nodes": n, "edges": len(lay.edges), "layers": (max(lay.layer) + 1) if n else 0}
    return "\n".join(parts), details, used, stats


def _attr_text(a: onnx.AttributeProto) -> str:
    v = attr_value(a)
    return json.dumps(list(v)) if isinstance(v, tuple) else str(v)


_CSS = """
body{margin:0;font:13px system-ui,-apple-system,"Segoe UI",sans-serif;color:#222;background:#fff}
header{display:flex;gap:12px;align-items:center;padding:6px 12px;border-bottom:1px solid #ddd;background:#fafafa}
header h1{font-size:15px;margin:0;flex:0 1 auto;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
header .stats{color:#555}
header button{font:inherit;padding:2px 8px}
#legend{display:flex;flex-wrap:wrap;gap:10px;padding:4px 12px;border-bottom:1px solid #eee}
#legend span.sw{display:inline-block;width:14px;height:12px;border:2px solid;border-radius:3px;vertical-align:-2px;margin-right:4px}
main{display:flex;height:calc(100vh - 72px)}
.pane{flex:1 1 0;display:flex;flex-direction:column;min-width:0;border-right:1px solid #ddd}
.pane-title{padding:3px 10px;background:#f0f0f0;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.scroll{flex:1;overflow:auto}
aside{width:300px;flex:0 0 300px;overflow:auto;padding:8px 10px;background:#fcfcfc}
aside h2{font-size:14px;margin:4px 0;word-break:break-all}
aside pre{white-space:pre-wrap;word-break:break-all;font-size:12px}
svg.graph{display:block;margin:0 auto}
svg .edges path{fill:none;stroke:#888;stroke-width:1.3}
svg g.node{cursor:pointer}
svg g.node rect{fill:%(fill)s;stroke:%(stroke)s;stroke-width:1.5}
svg g.node text{text-anchor:middle;font-size:11px;font-family:ui-monospace,Menlo,Consolas,monospace;pointer-events:none}
svg g.node text.op{font-weight:700;font-size:12px}
svg g.node.removed rect{stroke-dasharray:5 3}
svg g.io rect{fill:#fff;stroke:#555;stroke-dasharray:3 2}
svg g.io text{text-anchor:middle;font-size:11px;font-family:ui-monospace,Menlo,Consolas,monospace}
#rendered-count{display:none}
section.report{padding:8px 12px;border-top:1px solid #ddd}
section.report h2{font-size:14px;margin:12px 0 4px}
section.report table{border-collapse:collapse;margin:4px 0 12px}
section.report th,section.report td{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
section.report td.num{text-align:right;font-variant-numeric:tabular-nums}
section.report th{background:#f4f4f4}
"""

_JS = """
(function(){
  var details = {};
  document.querySelectorAll('script.details').forEach(function(s){ details[s.getAttribute('data-side')] = JSON.parse(s.textContent); });
  var panes = Array.prototype.slice.call(document.querySelectorAll('.pane'));
  function svgOf(p){ return p.querySelector('svg'); }
  function zoom(p, z){ var s = svgOf(p); p.zoom = z;
    s.setAttribute('width', (+s.getAttribute('data-w')) * z); s.setAttribute('height', (+s.getAttribute('data-h')) * z); }
  function fit(p, least){ var s = svgOf(p), box = p.querySelector('.scroll');
    zoom(p, Math.min(1, Math.max(least || 0.02, (box.clientWidth - 8) / (+s.getAttribute('data-w'))))); }
  panes.forEach(function(p){ fit(p, 0.3);
    p.querySelector('.scroll').addEventListener('wheel', function(e){ if (!e.ctrlKey) return; e.preventDefault();
      zoom(p, Math.max(0.05, Math.min(4, p.zoom * (e.deltaY < 0 ? 1.15 : 1 / 1.15)))); }, {passive: false}); });
  document.querySelectorAll('button[data-zoom]').forEach(function(b){ b.addEventListener('click', function(){
    var how = b.getAttribute('data-zoom');
    panes.forEach(function(p){ if (how === 'fit') fit(p); else zoom(p, p.zoom * (how === 'in' ? 1.25 : 0.8)); }); }); });
  function show(side, key){ var d = (details[side] || {})[key]; if (!d) return;
    document.getElementById('panel-title').textContent = d.op + ' ' + (d.name || key);
    var lines = ['key: ' + key, 'graph: ' + side.toUpperCase()];
    if (d['class']) lines.push('class: ' + d['class']);
    if (d.info) lines.push('', d.info);
    lines.push('', 'inputs:'); d.inputs.forEach(function(t){ lines.push('  ' + (t || '(none)')); });
    lines.push('outputs:'); d.outputs.forEach(function(t){ lines.push('  ' + t); });
    var ak = Object.keys(d.attributes); if (ak.length) { lines.push('attributes:'); ak.forEach(function(k){ lines.push('  ' + k + ' = ' + d.attributes[k]); }); }
    if (d.peers.length) lines.push('', 'counterpart: ' + d.peers.join(', '));
    document.getElementById('panel-body').textContent = lines.join('\\n'); }
  function reveal(p, g){ var box = p.querySelector('.scroll'), r = g.getBoundingClientRect(), br = box.getBoundingClientRect();
    box.scrollTop += r.top - br.top - box.clientHeight / 2; box.scrollLeft += r.left - br.left - box.clientWidth / 2; }
  function select(p, key, peers){
    document.querySelectorAll('g.node.sel').forEach(function(g){ g.classList.remove('sel'); });
    var found = null;
    svgOf(p).querySelectorAll('g.node').forEach(function(g){ if (g.getAttribute('data-name') === key) { g.classList.add('sel'); found = g; } });
    var side = p.getAttribute('data-side'); show(side, key);
    (peers || []).forEach(function(k){ panes.forEach(function(q){ if (q === p) return;
      q.querySelectorAll('g.node').forEach(function(g){ if (g.getAttribute('data-name') === k) { g.classList.add('sel'); reveal(q, g); } }); }); });
    return found; }
  panes.forEach(function(p){ p.addEventListener('click', function(e){ var g = e.target.closest ? e.target.closest('g.node') : null; if (!g) return;
    var key = g.getAttribute('data-name'), d = (details[p.getAttribute('data-side')] || {})[key];
    select(p, key, d ? d.peers : []); }); });
  var search = document.getElementById('search');
  search.addEventListener('keydown', function(e){ if (e.key !== 'Enter' || !search.value) return; var q = search.value.toLowerCase();
    for (var i = 0; i < panes.length; i++) { var gs = panes[i].querySelectorAll('g.node');
      for (var j = 0; j < gs.length; j++) { var k = gs[j].getAttribute('data-name');
        if (k.toLowerCase().indexOf(q) >= 0) { var d = (details[panes[i].getAttribute('data-side')] || {})[k];
          reveal(panes[i], select(panes[i], k, d ? d.peers : [])); return; } } } });
  var wanted = decodeURIComponent((location.hash.match(/^#node=(.*)$/) || [])[1] || '');
  if (wanted) panes.some(function(p){ var d = details[p.getAttribute('data-side')] || {};
    if (!d[wanted]) return false; reveal(p, select(p, wanted, d[wanted].peers)); return true; });
  var rendered = 0;
  document.querySelectorAll('svg g.node').forEach(function(g){ var b = g.getBBox(); if (b.width > 0 && b.height > 0) rendered++; });
  document.getElementById('rendered-count').textContent = String(rendered);
})();
"""


def _json_script(side: str, data: dict) -> str:
    text = json.dumps(data, ensure_ascii=True).replace("</", "<\\/")
    return f'<script type="application/json" class="details" data-side="{side}">{text}</script>'


def _page(title: str, stats: str, panes: List[Tuple[str, str, str]], used: set,
          details: Dict[str, dict], extra_html: str = "") -> str:
    style = _CSS % {"fill": DEFAULT_STYLE[0], "stroke": DEFAULT_STYLE[1]}
    style += "".join(f"svg g.node.{c} rect{{fill:{f};stroke:{s}}}\n" for c, (f, s, _) in CLASS_STYLES.items())
    style += "svg g.node.sel rect{stroke:#e6007e;stroke-width:3.5}\n"
    legend = []
    for c in [c for c in CLASS_STYLES if c in used] + sorted(used - set(CLASS_STYLES)):
        f, s, text = CLASS_STYLES.get(c, (DEFAULT_STYLE[0], DEFAULT_STYLE[1], c))
        legend.append(f'<span><span class="sw" style="background:{f};border-color:{s}"></span>{escape(text)}</span>')
    f, s, _ = DEFAULT_STYLE
    legend.append(f'<span><span class="sw" style="background:{f};border-color:{s}"></span>'
                  f'{"unchanged / other" if used else "op node"}</span>')
    legend.append('<span><span class="sw" style="background:#fff;border-color:#555;border-style:dashed;'
                  'border-radius:7px"></span>graph input / output</span>')
    body = [f'<div class="pane" data-side="{side}"><div class="pane-title" title="{_attr(head)}">{escape(head)}</div>'
            f'<div class="scroll">{svg}</div></div>' for side, head, svg in panes]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>", f"<style>{style}</style></head><body>",
        f'<header><h1 title="{_attr(title)}">{escape(title)}</h1><span class="stats">{escape(stats)}</span>'
        '<button data-zoom="in" title="zoom in">+</button><button data-zoom="out" title="zoom out">&#8722;</button>'
        '<button data-zoom="fit" title="fit width">fit</button>'
        '<input id="search" placeholder="find node (Enter)" size="22"></header>',
        f'<div id="legend">{"".join(legend)}</div>',
        "<main>", *body,
        '<aside id="panel"><h2 id="panel-title">click a node</h2><pre id="panel-body"></pre></aside></main>',
        extra_html,
        '<div id="rendered-count"></div>',
        *[_json_script(side, d) for side, d in details.items()],
        f"<script>{_JS}</script>", "</body></html>", ""])


def render_graph_html(model: ModelLike, *, node_classes: Optional[Mapping[str, str]] = None,
                      node_info: Optional[Mapping[str, str]] = None, title: Optional[str] = None,
                      extra_html: str = "") -> str:
    """One graph as a self-contained HTML page; classes and hover/click text keyed by node name;
    ``extra_html`` (trusted markup, e.g. report tables) goes below the graph."""
    m = load_model(model)
    svg, details, used, st = _graph_svg(m, "a", node_classes or {}, node_info or {}, {})
    title = title or m.graph.name or "ONNX graph"
    stats = f"{st['nodes']} nodes, {st['edges']} edges, {st['layers']} layers"
    return _page(title, stats, [("a", m.graph.name or "graph", svg)], used, {"a": details}, extra_html)


def diff_views(diff: GraphDiff) -> Tuple[Dict[str, str], Dict[str, str], Dict[str, str], Dict[str, str],
                                          Dict[str, List[str]], Dict[str, List[str]]]:
    """(A classes, B classes, A info, B info, A peers, B peers) keyed by node key."""
    ca: Dict[str, str] = {}
    cb: Dict[str, str] = {}
    ia: Dict[str, str] = {}
    ib: Dict[str, str] = {}
    pa: Dict[str, List[str]] = {}
    pb: Dict[str, List[str]] = {}
    for a, b, how in diff.pairs:
        pa[a], pb[b] = [b], [a]
        ia[a], ib[b] = f"same as B:{b} (matched by {how})", f"same as A:{a} (matched by {how})"
    for it in diff.nodes.get("renamed", []):
        a, b = it["a"]["key"], it["b"]["key"]
        ca[a] = cb[b] = "renamed"
        ia[a], ib[b] = f"renamed to {it['b']['name']!r} (matched by {it['matched_by']})", \
            f"renamed from {it['a']['name']!r} (matched by {it['matched_by']})"
    for it in diff.nodes.get("changed", []):
        a, b = it["a"]["key"], it["b"]["key"]
        ca[a] = cb[b] = "changed"
        lines = "\n".join(change_lines(it["changes"]))
        ia[a] = f"changed, now B:{b} (matched by {it['matched_by']})\n{lines}"
        ib[b] = f"changed, was A:{a} (matched by {it['matched_by']})\n{lines}"
    for r in diff.nodes.get("removed", []):
        ca[r["key"]], ia[r["key"]] = "removed", "removed: no counterpart in B"
    for r in diff.nodes.get("added", []):
        cb[r["key"]] = "added"
        ib[r["key"]] = "added: no counterpart in A" + (f"\norigin: {', '.join(r['origin'])}" if r.get("origin") else "")
    grouped = set()
    for grp in diff.nodes.get("groups", []):
        akeys, bkeys = [r["key"] for r in grp["a"]], [r["key"] for r in grp["b"]]
        comp = sorted({r["composite"] for r in grp["b"] if r.get("composite")})
        for r in grp["b"]:
            cb[r["key"]] = "fused"
            pb[r["key"]] = akeys
            ib[r["key"]] = f"{grp['kind']} from: {', '.join(akeys)}" + (f"\ncomposite: {', '.join(comp)}" if comp else "")
        for k in akeys:
            line = f"{grp['kind']} into: {', '.join(bkeys)}" + (f" [{', '.join(comp)}]" if comp else "")
            if k in grouped:
                pa[k] += [x for x in bkeys if x not in pa[k]]
                ia[k] += "\n" + line
            else:
                pa[k], ia[k] = list(bkeys), line
            ca[k] = "fused"
            grouped.add(k)
    return ca, cb, ia, ib, pa, pb


def render_diff_html(a: ModelLike, b: ModelLike, diff: GraphDiff, *, title: Optional[str] = None) -> str:
    """A and B side by side, coloured by ``diff`` (from ``diff_models(a, b)``)."""
    ma, mb = load_model(a), load_model(b)
    ca, cb, ia, ib, pa, pb = diff_views(diff)
    svg_a, det_a, used_a, st_a = _graph_svg(ma, "a", ca, ia, pa)
    svg_b, det_b, used_b, st_b = _graph_svg(mb, "b", cb, ib, pb)
    c = diff.counts()
    stats = (f"A {st_a['nodes']} nodes, B {st_b['nodes']} nodes: matched {c['matched']}, "
             f"added {c.get('nodes_added', 0)}, removed {c.get('nodes_removed', 0)}, "
             f"changed {c.get('nodes_changed', 0)}, renamed {c.get('nodes_renamed', 0)}, "
             f"groups {c.get('nodes_groups', 0)}" + (" (identical)" if diff.is_empty() else ""))
    la, lb = os.path.basename(diff.a_label) or diff.a_label, os.path.basename(diff.b_label) or diff.b_label
    panes = [("a", f"A: {diff.a_label}", svg_a), ("b", f"B: {diff.b_label}", svg_b)]
    return _page(title or f"diff {la} -> {lb}", stats, panes, used_a | used_b,
                 {"a": det_a, "b": det_b})


def write_html(path: str, html: str) -> str:
    """Write ``html`` atomically (temp file in the same folder, then ``os.replace``); a folder in the
    way or one that cannot be written is an ``ArtifactError`` / ``UsageError``, not an OSError."""
    from ..modelio import check_file_target, make_folder, write_atomic
    check_file_target(path)
    make_folder(os.path.dirname(os.path.abspath(path)), f"the HTML page '{path}'")
    write_atomic(path, lambda f: f.write(html.encode("utf-8")))
    return path
