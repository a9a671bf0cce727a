"""The offload report as one self-contained HTML page: the deployable graph (or the original one)
with accelerator regions coloured apart from CPU nodes, hover text naming each node's original
nodes and its reason, and the report's tables below."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple
from xml.sax.saxutils import escape

import onnx

from ..stamp import check_original
from .canonical import explicit_origin, is_region_node, load_model
from .graphview import render_graph_html
from .offload import OffloadReport


def _names(names: List[str], n: int = 12) -> str:
    return ", ".join(names[:n]) + (f", ... ({len(names)} in all)" if len(names) > n else "")


def deployable_views(model: onnx.ModelProto, rep: OffloadReport) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(class, hover text) per node of the deployable model."""
    regions = {r["node"]: r for r in rep.regions}
    by_name = {d.get("node"): d for d in rep.decisions if d.get("origin") is None}   # (not created records)
    cpu_reason = {c["node"]: c["reason"] for c in rep.cpu_nodes if not c.get("origin")}
    made = {x: d.get("reason") for d in rep.decisions if d.get("origin") is not None for x in d.get("runs_as") or ()}
    classes, info = {}, {}
    for n in model.graph.node:
        if is_region_node(n):
            r = regions.get(n.name)
            classes[n.name] = "accelerator"
            if r is not None:
                info[n.name] = (f"accelerator region {r['name']}: {r['layers']} layers, {r['macs']:,} MACs, "
                                f"{r['cycles']:,} cycles\noriginal nodes: {_names(r['origin'])}")
            continue
        origin = explicit_origin(n) or [n.name]
        reasons = [made[n.name]] if n.name in made else \
            sorted({cpu_reason.get(o) or (by_name.get(o) or {}).get("reason") or "" for o in origin} - {""})
        classes[n.name] = "cpu"
        info[n.name] = (f"CPU: {'; '.join(reasons) or 'inserted by the converter (layout change / glue)'}"
                        f"\noriginal nodes: {_names(origin)}")
    return classes, info


def original_views(model: onnx.ModelProto, rep: OffloadReport) -> Tuple[Dict[str, str], Dict[str, str]]:
    """(class, hover text) per node of the original model, from report.json's decisions."""
    by_name = {d.get("node"): d for d in rep.decisions if d.get("origin") is None}   # (not created records)
    classes, info = {}, {}
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}_{i}"
        d = by_name.get(name)
        if d is None:
            continue
        place = d.get("placement")
        classes[n.name or name] = {"accelerator": "accelerator", "cpu": "cpu"}.get(place, "removed")
        where = f"region {d.get('subgraph')}, layer {d.get('layer')}" if place == "accelerator" else place
        info[n.name or name] = f"{where}: {d.get('reason')}" + (f" [{d['composite']}]" if d.get("composite") else "")
    return classes, info


def _table(head: List[str], rows: List[List[str]], numeric: Tuple[int, ...] = ()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if j in numeric else ""}>{escape(str(c))}</td>'
                                    for j, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def tables_html(rep: OffloadReport) -> str:
    est = " (total estimated from shapes)" if rep.macs_total_estimated else ""
    parts = ['<section class="report" id="report">', "<h2>Summary</h2>",
             _table(["regions", "layers", "MACs offloaded", "MACs total", "offloaded", "simulated cycles",
                     "CPU nodes"],
                    [[len(rep.regions), sum(r["layers"] for r in rep.regions), f"{rep.macs_offloaded:,}",
                      f"{rep.macs_total:,}{est}", f"{100 * rep.offload_fraction:.1f}%", f"{rep.cycles:,}",
                      len(rep.cpu_nodes)]], numeric=(0, 1, 2, 3, 4, 5, 6)),
             "<h2>Regions</h2>",
             _table(["region", "layers", "MACs", "cycles", "latency (us)", "utilization", "inputs", "outputs"],
                    [[r["name"], r["layers"], f"{r['macs']:,}", f"{r['cycles']:,}", f"{r['latency_s'] * 1e6:.1f}",
                      f"{100 * r['utilization']:.1f}%", ", ".join(r["inputs"]), ", ".join(r["outputs"])]
                     for r in rep.regions], numeric=(1, 2, 3, 4, 5))]
    for r in rep.regions:
        parts.append(f'<h2 id="region-{escape(r["name"])}">Layers of {escape(r["name"])}</h2>')
        parts.append(_table(["#", "layer", "type", "MACs", "DRAM bytes", "cycles", "bound", "origin"],
                            [[i, x["name"], x["layer_name"], f"{x['macs']:,}", f"{x['dram_bytes']:,}",
                              f"{x['cycles']:,}", x["bound"], ", ".join(x["origin"])]
                             for i, x in enumerate(r["layer_rows"])], numeric=(0, 3, 4, 5)))
    parts.append("<h2>CPU nodes</h2>")
    parts.append(_table(["node", "op type", "reason"], [[c["node"], c["op_type"], c["reason"]] for c in rep.cpu_nodes])
                 if rep.cpu_nodes else "<p>none</p>")
    if rep.cuts:
        parts.append("<h2>Cuts: why each region ends where it does</h2>")
        parts.append(_table(["from", "to", "kind", "why", "reason"],
                            [[", ".join(c.get("from") or []), ", ".join(c.get("to") or []),
                              "direct" if c.get("kind") == "direct" else f"CPU island {c.get('position', '')}",
                              ", ".join(c.get("why") or []), c.get("reason", "")] for c in rep.cuts]))
    parts.append("</section>")
    return "\n".join(parts)


def render_report_html(rep: OffloadReport, original: Optional[str] = None) -> str:
    """The page: the deployable graph, or with ``original`` (path / ModelProto) the original graph
    coloured by where each node went (needs report.json); ``original`` must be the model the report's
    conversion was made from (``UsageError`` otherwise, see ``stamp.check_original``)."""
    if original is not None:
        check_original(rep.provenance, original, f"'{rep.source}'")
        m = load_model(original)
        classes, info = original_views(m, rep)
        title = f"offload report: {rep.source} (original graph)"
    else:
        m = load_model(rep.model_path)
        classes, info = deployable_views(m, rep)
        title = f"offload report: {rep.source}"
    stats_line = f"{100 * rep.offload_fraction:.1f}% of MACs offloaded, {len(rep.regions)} region(s)"
    return render_graph_html(m, node_classes=classes, node_info=info, title=f"{title} ({stats_line})",
                             extra_html=tables_html(rep))
