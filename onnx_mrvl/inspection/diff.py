"""Diff two ONNX models: what changed, as data (``GraphDiff``), text and JSON.

Node alignment (identity, provenance, name, structure, position) lives in ``align.py``;
this module compares the aligned nodes, initializers, inputs/outputs and headers.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import numpy as np
import onnx
from onnx import numpy_helper

from ..provenance import COMPOSITE_KEY
from .align import METHODS, Aligner, IndexedGraph
from .canonical import (ModelLike, attr_value, dtype_name, explicit_origin, is_region_node,  # noqa: F401
                        jsonable, load_model, meta_props, tensor_sha256, value_info)

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# report


@dataclass
class GraphDiff:
    """Everything that differs between model A and model B.

    ``nodes``: ``added`` / ``removed`` (node refs: key, name, op_type, domain), ``renamed`` and
    ``changed`` (``{"a": ref, "b": ref, "matched_by": step, "changes": {...}}``) and ``groups``
    (``{"kind": fused|replaced|split|converted, "b": refs with composite, "a": refs}``);
    ``initializers``: added / removed / renamed / changed (sha256, allclose, max and mean abs diff);
    ``inputs`` / ``outputs``: added / removed / changed (dtype, shape); ``model``,
    ``opset_import``, ``metadata_props``: ``{field: {"a": old, "b": new}}`` for differing fields.
    ``pairs`` (A key, B key, step) lists the 1:1 matches (used by the HTML view).
    """
    a_label: str
    b_label: str
    a_nodes: int
    b_nodes: int
    model: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    opset_import: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    metadata_props: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    functions: Dict[str, List[Any]] = field(default_factory=dict)
    inputs: Dict[str, List[Any]] = field(default_factory=dict)
    outputs: Dict[str, List[Any]] = field(default_factory=dict)
    initializers: Dict[str, List[Any]] = field(default_factory=dict)
    nodes: Dict[str, List[Any]] = field(default_factory=dict)
    matched: Dict[str, int] = field(default_factory=dict)
    op_histogram: List[Dict[str, Any]] = field(default_factory=list)
    pairs: List[Tuple[str, str, str]] = field(default_factory=list, repr=False)

    def is_empty(self) -> bool:
        sections = (self.inputs, self.outputs, self.initializers, self.functions, self.nodes)
        return not (self.model or self.opset_import or self.metadata_props
                    or any(v for s in sections for v in s.values()))

    def counts(self) -> Dict[str, int]:
        c = {"nodes_a": self.a_nodes, "nodes_b": self.b_nodes, "matched": sum(self.matched.values())}
        for k, v in self.nodes.items():
            c[f"nodes_{k}"] = len(v)
        for sec in ("initializers", "inputs", "outputs", "functions"):
            for k, v in getattr(self, sec).items():
                c[f"{sec}_{k}"] = len(v)
        c.update(model_fields=len(self.model), opsets=len(self.opset_import), metadata=len(self.metadata_props))
        return c

    def to_dict(self) -> Dict[str, Any]:
        return {"a": self.a_label, "b": self.b_label, "identical": self.is_empty(),
                "summary": self.counts(), "matched_by": dict(self.matched),
                "model": self.model, "opset_import": self.opset_import,
                "metadata_props": self.metadata_props, "functions": self.functions,
                "inputs": self.inputs, "outputs": self.outputs, "initializers": self.initializers,
                "nodes": self.nodes, "op_histogram": self.op_histogram}

    def to_text(self, limit: int = 20) -> str:
        """A terminal summary: counts first, then up to ``limit`` items per section."""
        c = self.counts()
        out = [f"diff {self.a_label} -> {self.b_label}: "
               + ("identical" if self.is_empty() else "differences found")]
        by = ", ".join(f"{k} {v}" for k, v in self.matched.items() if v)
        out.append(f"  nodes         {self.a_nodes} -> {self.b_nodes}, matched {c['matched']}"
                   + (f" ({by})" if by else ""))
        out.append("  nodes         " + "  ".join(f"{k} {len(v)}" for k, v in self.nodes.items()))
        for sec in ("initializers", "inputs", "outputs", "functions"):
            out.append(f"  {sec:<13} " + "  ".join(f"{k} {len(v)}" for k, v in getattr(self, sec).items()))
        out.append(f"  header        model fields {len(self.model)}  opsets {len(self.opset_import)}"
                   f"  metadata {len(self.metadata_props)}")
        for title, d in (("model", self.model), ("opset_import", self.opset_import),
                         ("metadata_props", self.metadata_props)):
            _section(out, title, [f"{k}: {short_value(v['a'])} -> {short_value(v['b'])}" for k, v in d.items()], limit)
        for sec in ("inputs", "outputs", "functions", "initializers"):
            for kind, items in getattr(self, sec).items():
                _section(out, f"{sec} {kind}", [_item_text(kind, it) for it in items], limit)
        for kind in ("removed", "added", "renamed", "changed", "groups"):
            _section(out, f"nodes {kind}", [_node_text(kind, it) for it in self.nodes.get(kind, [])], limit)
        hist = [f"{r['op_type']:<28} {r['a']:>6} {r['b']:>6} {r['delta']:>+7}" for r in self.op_histogram]
        _section(out, "op types (A, B, delta)", hist, max(limit, 60))
        return "\n".join(out) + "\n"


def short_value(v: Any, width: int = 80) -> str:
    text = json.dumps(v) if not isinstance(v, str) else v
    return text if len(text) <= width else text[:width - 3] + "..."


def _section(out: List[str], title: str, lines: List[str], limit: int) -> None:
    if not lines:
        return
    out.append(f"[{title}] ({len(lines)})")
    out.extend("  " + ln for ln in lines[:limit])
    if len(lines) > limit:
        out.append(f"  ... and {len(lines) - limit} more")


def _item_text(kind: str, it: Any) -> str:
    if isinstance(it, str):
        return it
    if kind == "renamed":
        return f"{it['a']} -> {it['b']} (same content)"
    if "sha256" in it:
        return f"{it['name']} {_tensor_short(it)}"
    if "a" in it and "b" in it and "sha256" in it["a"]:
        extra = ""
        if "max_abs_diff" in it:
            extra = (f"  allclose={it['allclose']} max|d|={it['max_abs_diff']:.4g}"
                     f" mean|d|={it['mean_abs_diff']:.4g}")
            if it.get("nonfinite_diffs"):
                extra += f" non-finite|d|={it['nonfinite_diffs']}"
        return f"{it['name']}: {_tensor_short(it['a'])} -> {_tensor_short(it['b'])}{extra}"
    if "a" in it and "b" in it:
        return f"{it['name']}: {short_value(it['a'], 120)} -> {short_value(it['b'], 120)}"
    return f"{it['name']} {short_value({k: v for k, v in it.items() if k != 'name'}, 120)}"


def _tensor_short(t: Dict[str, Any]) -> str:
    return f"{t['dtype']}{t['shape']} sha256:{t['sha256'][:12]}"


def _ref_text(r: Dict[str, Any]) -> str:
    op = f"{r['domain']}::{r['op_type']}" if r["domain"] else r["op_type"]
    return f"{op} {r['key']}"


def _node_text(kind: str, it: Dict[str, Any]) -> str:
    if kind in ("added", "removed"):
        return _ref_text(it) + (f"  origin {it['origin']}" if it.get("origin") else "")
    if kind == "renamed":
        return f"{_ref_text(it['a'])} -> {it['b']['key']} (by {it['matched_by']})"
    if kind == "changed":
        head = f"{_ref_text(it['a'])} -> {_ref_text(it['b'])} (by {it['matched_by']})"
        return "\n    ".join([head] + change_lines(it["changes"]))
    comp = sorted({r["composite"] for r in it["b"] if r.get("composite")})
    return (f"{it['kind']}: {', '.join(_ref_text(r) for r in it['b'])}"
            + (f" [{', '.join(comp)}]" if comp else "")
            + f" <- {', '.join(r['key'] for r in it['a'])}")


def change_lines(ch: Dict[str, Any]) -> List[str]:
    lines = []
    for k in ("op_type", "domain", "n_inputs", "n_outputs"):
        if k in ch:
            lines.append(f"{k}: {ch[k]['a']} -> {ch[k]['b']}")
    for name, v in ch.get("attributes", {}).items():
        lines.append(f"attribute {name}: {short_value(v['a'])} -> {short_value(v['b'])}")
    for w in ch.get("inputs", []):
        lines.append(f"input {w['index']}: {w['a']} -> {w['b']}")
    for name, v in ch.get("metadata", {}).items():
        lines.append(f"metadata {name}: {short_value(v['a'])} -> {short_value(v['b'])}")
    return lines


def _pairs(da: Dict[str, Any], db: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {k: {"a": jsonable(da.get(k)), "b": jsonable(db.get(k))}
            for k in sorted(set(da) | set(db)) if da.get(k) != db.get(k)}


def _header(m: onnx.ModelProto) -> Dict[str, Any]:
    return {"ir_version": m.ir_version, "producer_name": m.producer_name,
            "producer_version": m.producer_version, "domain": m.domain,
            "model_version": m.model_version, "doc_string": m.doc_string, "graph_name": m.graph.name}


def _io_diff(la, lb) -> Dict[str, List[Any]]:
    da = {vi.name: value_info(vi) for vi in la}
    db = {vi.name: value_info(vi) for vi in lb}
    return {"added": [{"name": n, **v} for n, v in db.items() if n not in da],
            "removed": [{"name": n, **v} for n, v in da.items() if n not in db],
            "changed": [{"name": n, "a": v, "b": db[n]} for n, v in da.items() if n in db and db[n] != v]}


def _functions_diff(ma: onnx.ModelProto, mb: onnx.ModelProto) -> Dict[str, List[str]]:
    def digests(m):
        return {f"{f.domain}::{f.name}": hashlib.sha256(f.SerializeToString(deterministic=True)).hexdigest()
                for f in m.functions}
    da, db = digests(ma), digests(mb)
    return {"added": [k for k in db if k not in da], "removed": [k for k in da if k not in db],
            "changed": [k for k in da if k in db and da[k] != db[k]]}


def _init_diff(A: IndexedGraph, B: IndexedGraph) -> Tuple[Dict[str, List[Any]], Dict[str, str]]:
    def info(G, name):
        t = G.inits[name]
        return {"name": name, "dtype": dtype_name(t.data_type), "shape": list(t.dims), "sha256": G.init_sha[name]}

    def content(G, name):
        t = G.inits[name]
        return (G.init_sha[name], t.data_type, tuple(t.dims))

    added = [n for n in B.inits if n not in A.inits]
    removed = [n for n in A.inits if n not in B.inits]
    new_by: Dict[Tuple, List[str]] = defaultdict(list)
    old_by: Dict[Tuple, List[str]] = defaultdict(list)
    for n in added:
        new_by[content(B, n)].append(n)
    for n in removed:
        old_by[content(A, n)].append(n)
    rename = {olds[0]: new_by[c][0] for c, olds in old_by.items()  # only when unambiguous
              if len(olds) == 1 and len(new_by.get(c, ())) == 1}
    taken = set(rename.values())
    changed = []
    for n in A.inits:
        if n not in B.inits or content(A, n) == content(B, n):
            continue
        entry = {"name": n, "a": info(A, n), "b": info(B, n)}
        del entry["a"]["name"], entry["b"]["name"]
        ta, tb = A.inits[n], B.inits[n]
        if list(ta.dims) == list(tb.dims):
            try:
                xa, xb = numpy_helper.to_array(ta), numpy_helper.to_array(tb)
            except Exception:  # noqa: BLE001 - external data missing: report hashes only
                xa = xb = None
            if xa is not None and xa.dtype.kind in "biufc" and xb.dtype.kind in "biufc":
                xa, xb = xa.astype(np.float64), xb.astype(np.float64)
                d = np.abs(xa - xb)
                entry["allclose"] = bool(np.allclose(xa, xb, equal_nan=True))
                finite = d[np.isfinite(d)]  # NaN/inf positions (e.g. inf - inf) are left out
                entry["max_abs_diff"] = float(finite.max()) if finite.size else 0.0
                entry["mean_abs_diff"] = float(finite.mean()) if finite.size else 0.0
                if finite.size < d.size:
                    entry["nonfinite_diffs"] = int(d.size - finite.size)
        changed.append(entry)
    return {"added": [info(B, n) for n in added if n not in taken],
            "removed": [info(A, n) for n in removed if n not in rename],
            "renamed": [{"a": a, "b": b} for a, b in rename.items()],
            "changed": changed}, rename


def _node_changes(al: Aligner, a: int, b: int) -> Dict[str, Any]:
    A, B = al.A, al.B
    na, nb = A.nodes[a], B.nodes[b]
    ch: Dict[str, Any] = {}
    for k in ("op_type", "domain"):
        if getattr(na, k) != getattr(nb, k):
            ch[k] = {"a": getattr(na, k), "b": getattr(nb, k)}
    if len(na.input) != len(nb.input):
        ch["n_inputs"] = {"a": len(na.input), "b": len(nb.input)}
    if len(na.output) != len(nb.output):
        ch["n_outputs"] = {"a": len(na.output), "b": len(nb.output)}
    attrs = _pairs(A.attrs[a], B.attrs[b])
    if attrs:
        ch["attributes"] = attrs
    wiring = [{"index": k, "a": A.describe(x), "b": B.describe(y)}
              for k, (x, y) in enumerate(zip(A.src[a], B.src[b])) if al.src_status(x, y) == "diff"]
    if wiring:
        ch["inputs"] = wiring
    meta = _pairs(meta_props(na), meta_props(nb))
    if meta:
        ch["metadata"] = meta
    return ch


def _op_label(n: onnx.NodeProto) -> str:
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"


def _label(x: ModelLike, m: onnx.ModelProto, default: str) -> str:
    return os.fspath(x) if not isinstance(x, onnx.ModelProto) else (m.graph.name or default)


def diff_models(a: ModelLike, b: ModelLike) -> GraphDiff:
    """Align the nodes of model ``a`` and model ``b`` and report every difference."""
    ma, mb = load_model(a), load_model(b)
    A, B = IndexedGraph(ma, _label(a, ma, "A")), IndexedGraph(mb, _label(b, mb, "B"))
    inits, rename = _init_diff(A, B)
    al = Aligner(A, B, rename)
    al.run()
    d = GraphDiff(A.label, B.label, len(A.nodes), len(B.nodes))
    d.model = _pairs(_header(ma), _header(mb))
    d.opset_import = _pairs({o.domain or "ai.onnx": o.version for o in ma.opset_import},
                            {o.domain or "ai.onnx": o.version for o in mb.opset_import})
    d.metadata_props = _pairs({p.key: p.value for p in ma.metadata_props},
                              {p.key: p.value for p in mb.metadata_props})
    d.functions = _functions_diff(ma, mb)
    d.inputs = _io_diff(A.inputs, B.inputs)
    d.outputs = _io_diff(ma.graph.output, mb.graph.output)
    d.initializers = inits
    nodes: Dict[str, List[Any]] = {"added": [], "removed": [], "renamed": [], "changed": [], "groups": []}
    for bi in B.order:
        if al.free_b(bi):
            nodes["added"].append(dict(B.ref(bi), **({"origin": B.origin[bi]} if B.origin[bi] else {})))
    nodes["removed"] = [A.ref(ai) for ai in A.order if al.free_a(ai)]
    matched = Counter()
    for ai in A.order:
        if ai not in al.a2b:
            continue
        bi, how = al.a2b[ai], al.how[ai]
        matched[how] += 1
        d.pairs.append((A.keys[ai], B.keys[bi], how))
        pair = {"a": A.ref(ai), "b": B.ref(bi), "matched_by": how}
        if A.nodes[ai].name != B.nodes[bi].name:
            nodes["renamed"].append(dict(pair))
        ch = _node_changes(al, ai, bi)
        if ch:
            nodes["changed"].append(dict(pair, changes=ch))
    for a_list, b_list, kind in sorted(al.groups, key=lambda g: min(B.pos[x] for x in g[1])):
        brefs = [dict(B.ref(x), composite=meta_props(B.nodes[x]).get(COMPOSITE_KEY)) for x in b_list]
        nodes["groups"].append({"kind": kind, "b": brefs, "a": [A.ref(x) for x in a_list]})
    d.nodes = nodes
    d.matched = {m: matched.get(m, 0) for m in METHODS}
    ca, cb = Counter(map(_op_label, A.nodes)), Counter(map(_op_label, B.nodes))
    d.op_histogram = [{"op_type": k, "a": ca[k], "b": cb[k], "delta": cb[k] - ca[k]}
                      for k in sorted(set(ca) | set(cb))]
    log.info("diff %s -> %s: %d/%d nodes matched", A.label, B.label, sum(matched.values()), len(B.nodes))
    return d
