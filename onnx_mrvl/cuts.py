"""Why each cut: where the deployable model leaves the accelerator, and the recorded reason.

A *cut* is either

* a **CPU island**: CPU nodes connected to each other through tensors, next to at least one
  accelerator region (``position`` "between" two regions, "before" the first region it feeds, or
  "after" the region feeding it); it is there because of its CPU nodes, each with the reasons its
  original nodes run on the CPU (``Decisions``), classed as *not supported on the accelerator*,
  *user exclude*, *partition strategy/cost* or *compile failure*; or
* a **direct boundary**: region A's output read straight by region B. Its reason is *user
  cut_after* (a ``cut_after`` name ends A), else *partition (cycle)* when A also reaches B through
  other nodes (merging A and B would close a cycle; the first CPU node on that path is named), else
  *partition strategy/cost*.

``find_cuts`` works on a deployable model (Subgraph region nodes); it runs at ``convert()`` time
(``Report.cuts``, the "cuts" section of report.json) and in ``onnx-mrvl report`` when a report.json
has no such section.
"""
from __future__ import annotations

import json
from collections import deque
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

import onnx

from .provenance import get_origin

NOT_SUPPORTED, USER_EXCLUDE, STRATEGY, COMPILE, CUT_AFTER, CYCLE, UNKNOWN = (
    "not supported on the accelerator", "user exclude", "partition strategy/cost", "compile failure",
    "user cut_after", "partition (cycle)", "reason unknown")
LAYOUT_OPS = {"Transpose", "LayoutTransform"}


def reason_class(reason: str) -> str:
    """The class of a CPU reason recorded in ``Decisions``."""
    r = reason or ""
    if r.startswith("created by the conversion") and "; on the CPU: " in r:   # report_graph: why it stayed
        r = r.split("; on the CPU: ", 1)[1]
    if r.startswith("excluded by the user"):
        return USER_EXCLUDE
    if r.startswith("compile:"):
        return COMPILE
    if (r.startswith("cost model:") or "minimum-work rule" in r or "partition=" in r
            or r.startswith("only layout changes")):
        return STRATEGY
    if not r or r.startswith("runs on the CPU (no report.json"):
        return UNKNOWN
    return NOT_SUPPORTED


def _is_region(node: onnx.NodeProto) -> bool:
    return node.domain == "mrvl" and node.op_type.startswith("Subgraph")


def _region_name(node: onnx.NodeProto) -> str:
    for a in node.attribute:
        if a.name == "region" and a.type == onnx.AttributeProto.STRING and a.s:
            return a.s.decode("utf-8", "replace")
    return node.name


def _region_origin(node: onnx.NodeProto) -> List[str]:
    for a in node.attribute:
        if a.name == "origin" and a.type == onnx.AttributeProto.STRING:
            try:
                names = json.loads(a.s.decode("utf-8", "replace"))
                return [str(n) for n in names] if isinstance(names, list) else [str(names)]
            except ValueError:
                return [a.s.decode("utf-8", "replace")]
    return []


def _as_dict(d: Any) -> Dict[str, Any]:
    return d if isinstance(d, Mapping) else d.to_dict()


def _field(d: Any, key: str):
    return d.get(key) if isinstance(d, Mapping) else getattr(d, key, None)


def created_index(decisions: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """Deployable node name -> the record of the CPU nodes the conversion created (report_graph.py)."""
    return {x: d for d in (decisions or {}).values() if _field(d, "origin") is not None
            for x in (_field(d, "runs_as") or ())}


def _cpu_row(node: onnx.NodeProto, decisions: Mapping[str, Any], unknown: str,
             created: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    origin = get_origin(node)
    reasons: List[str] = []
    own = (created or {}).get(node.name)
    if own is not None:   # a node the conversion created from an offloaded node
        reasons.append(_as_dict(own).get("reason") or "not supported")
    for o in origin if not reasons else ():
        d = decisions.get(o)
        if d is not None and _as_dict(d).get("placement") == "cpu":
            r = _as_dict(d).get("reason") or "not supported"
            if r not in reasons:
                reasons.append(r)
    if not reasons:
        if node.op_type in LAYOUT_OPS and decisions:
            reasons = ["layout change inserted by the conversion at the accelerator boundary"]
        else:
            reasons = [unknown if not decisions else "created by the conversion (no original node on the CPU)"]
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
    return {"node": node.name, "op_type": op, "origin": origin, "reasons": reasons,
            "why": sorted({reason_class(r) for r in reasons})}


def _island_reason(rows: List[Dict[str, Any]]) -> str:
    parts = []
    for row in rows[:6]:
        parts.append(f"{row['op_type']} {row['node']}: {'; '.join(row['reasons'])}")
    more = f"; and {len(rows) - 6} more CPU node(s)" if len(rows) > 6 else ""
    return "CPU node(s) " + " | ".join(parts) + more


class _Graph:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.nodes = [n for n in g.node if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx"))]
        self.producer: Dict[str, onnx.NodeProto] = {t: n for n in self.nodes for t in n.output if t}
        self.consumers: Dict[str, List[onnx.NodeProto]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.input):
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.pos = {id(n): k for k, n in enumerate(self.nodes)}   # the graph is topologically sorted
        inits = {t.name for t in g.initializer}
        self.inputs = {vi.name for vi in g.input if vi.name not in inits}
        self.outputs = {o.name for o in g.output}

    def successors(self, node: onnx.NodeProto) -> List[onnx.NodeProto]:
        return [c for t in node.output if t for c in self.consumers.get(t, [])]


def _islands(G: _Graph) -> List[List[onnx.NodeProto]]:
    """CPU nodes grouped by connection through tensors between CPU nodes, in graph order."""
    parent: Dict[int, int] = {}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    cpu = [n for n in G.nodes if not _is_region(n)]
    parent.update((id(n), id(n)) for n in cpu)
    for n in cpu:
        for i in n.input:
            p = G.producer.get(i)
            if p is not None and not _is_region(p):
                a, b = find(id(n)), find(id(p))
                if a != b:
                    parent[a] = b
    groups: Dict[int, List[onnx.NodeProto]] = {}
    for n in cpu:
        groups.setdefault(find(id(n)), []).append(n)
    return list(groups.values())


def _cycle_path(G: _Graph, src: onnx.NodeProto, dst: onnx.NodeProto) -> Optional[onnx.NodeProto]:
    """The first node on a path src -> (other nodes) -> dst, or None when only direct edges join them."""
    end = G.pos[id(dst)]                  # nodes after dst cannot reach it
    todo = deque((c, c) for c in G.successors(src) if c is not dst)
    seen: Set[int] = set()
    while todo:
        n, first = todo.popleft()
        if id(n) in seen or G.pos[id(n)] > end:
            continue
        seen.add(id(n))
        for c in G.successors(n):
            if c is dst:
                return first
            if c is not src:
                todo.append((c, first))
    return None


def find_cuts(model: onnx.ModelProto, decisions: Optional[Mapping[str, Any]] = None, *,
              cut_after: Iterable[str] = (), partition: Optional[str] = None,
              unknown: str = "runs on the CPU (reason unknown: no report.json)") -> List[Dict[str, Any]]:
    """Every cut of a deployable ``model`` with its reason (see the module docstring).
    ``decisions``: original node name -> ``Decision`` (or its dict)."""
    decisions = decisions or {}
    created = created_index(decisions)
    G = _Graph(model)
    regions = {id(n): _region_name(n) for n in G.nodes if _is_region(n)}
    cuts: List[Dict[str, Any]] = []
    for island in _islands(G):
        members = {id(n) for n in island}
        ups, downs = [], []
        for n in island:
            for i in n.input:
                p = G.producer.get(i)
                if p is not None and id(p) in regions and regions[id(p)] not in ups:
                    ups.append(regions[id(p)])
            for c in G.successors(n):
                if id(c) in regions and regions[id(c)] not in downs:
                    downs.append(regions[id(c)])
        if not ups and not downs:
            continue
        rows = [_cpu_row(n, decisions, unknown, created) for n in island]
        src = ups or (["model input"] if any(i in G.inputs for n in island for i in n.input) else ["constants"])
        dst = downs or ["model output"]
        if downs and any(t in G.outputs for n in island for t in n.output if id(n) in members):
            dst = dst + ["model output"]
        why = sorted({w for r in rows for w in r["why"]})
        cuts.append({"kind": "cpu", "position": "between" if ups and downs else ("before" if downs else "after"),
                     "from": src, "to": dst, "cpu_nodes": rows, "why": why, "reason": _island_reason(rows)})
    cuts.extend(_direct_cuts(G, regions, decisions, set(cut_after or ()), partition, unknown))
    return cuts


def _direct_cuts(G: _Graph, regions, decisions, cut_after: Set[str], partition, unknown) -> List[Dict[str, Any]]:
    by_id = {id(n): n for n in G.nodes}
    out = []
    for rid, name in regions.items():
        node = by_id[rid]
        feeders: Dict[int, List[str]] = {}
        for i in node.input:
            p = G.producer.get(i)
            if p is not None and id(p) in regions and p is not node:
                feeders.setdefault(id(p), []).append(i)
        for pid, tensors in feeders.items():
            up = by_id[pid]
            origin = _region_origin(up)
            users = [o for o in origin if o in cut_after
                     or _as_dict(decisions.get(o, {})).get("op_type") in cut_after]
            if users:
                why, reason = CUT_AFTER, f"user cut_after: {', '.join(users[:6])} ends {regions[pid]}"
            else:
                via = _cycle_path(G, up, node)
                if via is not None:
                    row = _cpu_row(via, decisions, unknown, created_index(decisions)) if id(via) not in regions else None
                    what = (f"CPU node {via.op_type} {via.name} ({'; '.join(row['reasons'])})" if row
                            else f"region {regions[id(via)]}")
                    why, reason = CYCLE, (f"{regions[pid]} also reaches {name} through {what}: merging them "
                                          f"would close a cycle")
                elif not decisions:
                    why, reason = UNKNOWN, "no report.json: the partition strategy or a user cut_after"
                else:
                    why, reason = STRATEGY, f"partition strategy/cost (partition={partition or 'unknown'})"
            out.append({"kind": "direct", "position": "between", "from": [regions[pid]], "to": [name],
                        "tensors": tensors, "cpu_nodes": [], "why": [why], "reason": reason})
    return out


def cuts_text(cuts: List[Dict[str, Any]]) -> List[str]:
    """Lines for ``explain()`` / ``onnx-mrvl report``."""
    if not cuts:
        return []
    lines = ["\ncuts (why each region ends where it does):"]
    for c in cuts:
        arrow = f"{', '.join(c['from'])} -> {', '.join(c['to'])}"
        label = "direct" if c["kind"] == "direct" else f"CPU island {c['position']}"
        lines.append(f"  {arrow} [{label}; {', '.join(c['why'])}]: {c['reason']}")
    return lines
