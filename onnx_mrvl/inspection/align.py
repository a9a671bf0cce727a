"""Align the nodes of two ONNX models (the matching half of ``diff.py``).


Works on any two models (two stages of onnx_mrvl, or two versions of a model with renamed
nodes). Nodes are aligned in this order, each step only looking at nodes still unmatched:

0. identity: same unique name, op type, domain and provenance record;
1. provenance: a node of B whose origin (metadata ``mrvl.origin``, or the ``origin`` attribute of
   a ``Subgraph`` region node) names nodes of A (by name, or through A's own origin records)
   forms a group with them (fused / replaced / split / converted); a plain ONNX node with a
   single origin of the same op type is a 1:1 match;
2. name: same unique name and op type;
3. structure: Weisfeiler-Lehman labels (op, domain, attributes, initializer content hashes,
   graph-input positions, producer and consumer labels, a few rounds), matched nodes acting as
   anchors; unique labels match, equal-size ambiguous buckets pair in topological order;
4. position: per op type, greedy on a similarity score (wiring to matched neighbours,
   attributes, relative topological position), candidates windowed by position.
Steps 3 and 4 alternate until nothing new matches; last, same-name nodes of different op type.
Cost is O((V + E) * rounds) plus sorting. Graph inputs that are initializers (IR < 4) are
reported with the initializers only.
"""
from __future__ import annotations

import logging
from bisect import bisect_left
from collections import Counter, defaultdict
from typing import Any, Dict, List, Tuple

import onnx

from ..provenance import COMPOSITE_KEY
from .canonical import MRVL_DOMAIN, attr_value, explicit_origin, is_region_node, meta_props, tensor_sha256
from .graph_layout import node_keys, producer_map, topo_order

log = logging.getLogger(__name__)

WL_ROUNDS = 3
WINDOW = 24
METHODS = ("exact", "provenance", "name", "structure", "position")


class IndexedGraph:
    """One model's graph with the lookups the aligner needs."""

    def __init__(self, model: onnx.ModelProto, label: str):
        g = model.graph
        self.model, self.label = model, label
        self.nodes = list(g.node)
        n = len(self.nodes)
        self.keys = node_keys(g)
        self.inits = {t.name: t for t in g.initializer}
        self.init_sha = {name: tensor_sha256(t) for name, t in self.inits.items()}
        self.inputs = [vi for vi in g.input if vi.name not in self.inits]
        input_pos = {vi.name: i for i, vi in enumerate(self.inputs)}
        self.output_pos = {vi.name: i for i, vi in enumerate(g.output)}
        prod = producer_map(g)
        self.src: List[List[Tuple]] = []
        preds: List[List[int]] = [[] for _ in range(n)]
        succs: List[List[int]] = [[] for _ in range(n)]
        for i, nd in enumerate(self.nodes):
            row = []
            for t in nd.input:
                if not t:
                    row.append(("",))
                elif t in prod:
                    j, k = prod[t]
                    row.append(("node", j, k))
                    preds[i].append(j)
                    succs[j].append(i)
                elif t in self.inits:
                    row.append(("init", t))
                elif t in input_pos:
                    row.append(("input", input_pos[t]))
                else:
                    row.append(("free", t))
            self.src.append(row)
        self.succs = [sorted(set(s)) for s in succs]
        self.order = topo_order(n, preds, succs)
        self.pos = [0.0] * n
        for r, v in enumerate(self.order):
            self.pos[v] = r / max(1, n - 1)
        names = Counter(nd.name for nd in self.nodes)
        self.by_name = {nd.name: i for i, nd in enumerate(self.nodes) if nd.name and names[nd.name] == 1}
        self.attrs = [{a.name: attr_value(a) for a in nd.attribute} for nd in self.nodes]
        self.origin = [explicit_origin(nd) for nd in self.nodes]

    def base_label(self, i: int) -> int:
        nd = self.nodes[i]
        ins = tuple(("node", s[2]) if s[0] == "node" else ("init", self.init_sha[s[1]]) if s[0] == "init"
                    else ("free",) if s[0] == "free" else s for s in self.src[i])
        outs = tuple(self.output_pos.get(t, -1) for t in nd.output)
        return hash((nd.domain, nd.op_type, tuple(sorted(self.attrs[i].items())), ins, outs))

    def ref(self, i: int) -> Dict[str, Any]:
        nd = self.nodes[i]
        return {"key": self.keys[i], "name": nd.name, "op_type": nd.op_type, "domain": nd.domain}

    def describe(self, s: Tuple) -> str:
        if s[0] == "node":
            return f"node {self.keys[s[1]]}:{s[2]}"
        if s[0] == "init":
            return f"initializer {s[1]}"
        if s[0] == "input":
            return f"input {self.inputs[s[1]].name}"
        return f"tensor {s[1]}" if s[0] == "free" else "(none)"


# ---------------------------------------------------------------------------------------------
# alignment


class Aligner:
    def __init__(self, A: IndexedGraph, B: IndexedGraph, init_rename: Dict[str, str]):
        self.A, self.B, self.init_rename = A, B, init_rename
        self.a2b: Dict[int, int] = {}
        self.b2a: Dict[int, int] = {}
        self.how: Dict[int, str] = {}
        self.groups: List[Tuple[List[int], List[int], str]] = []
        self.a_groups: Dict[int, List[int]] = defaultdict(list)
        self.b_group: Dict[int, int] = {}

    # -- bookkeeping
    def free_a(self, a: int) -> bool:
        return a not in self.a2b and a not in self.a_groups

    def free_b(self, b: int) -> bool:
        return b not in self.b2a and b not in self.b_group

    def match(self, a: int, b: int, how: str) -> None:
        self.a2b[a], self.b2a[b], self.how[a] = b, a, how

    def amap(self, a: int) -> List[int]:
        if a in self.a2b:
            return [self.a2b[a]]
        return [b for g in self.a_groups.get(a, ()) for b in self.groups[g][1]]

    def run(self) -> None:
        self._identity()
        self._provenance()
        self._by_name(same_op=True)
        for _ in range(6):
            before = len(self.a2b)
            self._structure()
            self._position()
            if len(self.a2b) == before:
                break
        self._by_name(same_op=False)

    # -- steps
    def _identity(self) -> None:
        A, B = self.A, self.B
        for name, a in A.by_name.items():
            b = B.by_name.get(name)
            if b is None:
                continue
            na, nb = A.nodes[a], B.nodes[b]
            if (na.op_type, na.domain) == (nb.op_type, nb.domain) and A.origin[a] == B.origin[b]:
                self.match(a, b, "exact")

    def _provenance(self) -> None:
        A, B = self.A, self.B
        through: Dict[str, List[int]] = defaultdict(list)
        for a, org in enumerate(A.origin):
            if org is not None and self.free_a(a):
                for name in org:
                    through[name].append(a)
        entries: List[Tuple[int, List[int]]] = []
        for b, org in enumerate(B.origin):
            if org is None or not self.free_b(b):
                continue
            src: List[int] = []
            for name in org:
                a = A.by_name.get(name)
                cands = [a] if a is not None and self.free_a(a) else through.get(name, [])
                src.extend(c for c in cands if c not in src)
            if src:
                entries.append((b, src))
        sole = Counter(src[0] for _, src in entries if len(src) == 1)
        split: Dict[int, List[int]] = defaultdict(list)
        for b, src in entries:
            nb, na = B.nodes[b], A.nodes[src[0]]
            plain = nb.domain != MRVL_DOMAIN and COMPOSITE_KEY not in meta_props(nb)
            if len(src) == 1 and sole[src[0]] == 1 and plain and (na.op_type, na.domain) == (nb.op_type, nb.domain):
                self.match(src[0], b, "provenance")
            elif len(src) == 1 and sole[src[0]] > 1:
                split[src[0]].append(b)
            else:
                self._group(src, [b])
        for a, bs in split.items():
            self._group([a], bs)

    def _group(self, a_list: List[int], b_list: List[int]) -> None:
        if any(is_region_node(self.B.nodes[b]) for b in b_list):
            kind = "replaced"
        elif len(a_list) > 1:
            kind = "fused"
        elif len(b_list) > 1:
            kind = "split"
        else:
            kind = "converted"
        g = len(self.groups)
        self.groups.append((a_list, b_list, kind))
        for a in a_list:
            self.a_groups[a].append(g)
        for b in b_list:
            self.b_group[b] = g

    def _by_name(self, same_op: bool) -> None:
        A, B = self.A, self.B
        for name, a in A.by_name.items():
            b = B.by_name.get(name)
            if b is None or not (self.free_a(a) and self.free_b(b)):
                continue
            if A.nodes[a].op_type == B.nodes[b].op_type or (not same_op and self._wiring(a, b) >= 0.5):
                self.match(a, b, "name")

    def _labels(self, G: IndexedGraph, anchor) -> List[List[int]]:
        n = len(G.nodes)
        cur = [anchor(i) if anchor(i) is not None else G.base_label(i) for i in range(n)]
        levels = [cur]
        for _ in range(WL_ROUNDS):
            nxt = []
            for i in range(n):
                fixed = anchor(i)
                if fixed is not None:
                    nxt.append(fixed)
                    continue
                ins = tuple((cur[s[1]], s[2]) for s in G.src[i] if s[0] == "node")
                outs = tuple(sorted(cur[s] for s in G.succs[i]))
                nxt.append(hash((cur[i], ins, outs)))
            cur = nxt
            levels.append(cur)
        return levels

    def _structure(self) -> None:
        A, B = self.A, self.B

        def anchor_a(i):
            if i in self.a2b:
                return hash(("m", self.a2b[i]))
            return hash(("g", min(self.a_groups[i]))) if i in self.a_groups else None

        def anchor_b(i):
            if i in self.b2a:
                return hash(("m", i))
            return hash(("g", self.b_group[i])) if i in self.b_group else None

        la, lb = self._labels(A, anchor_a), self._labels(B, anchor_b)
        for level in range(WL_ROUNDS, -1, -1):
            ba: Dict[int, List[int]] = defaultdict(list)
            bb: Dict[int, List[int]] = defaultdict(list)
            for i in A.order:
                if self.free_a(i):
                    ba[la[level][i]].append(i)
            for i in B.order:
                if self.free_b(i):
                    bb[lb[level][i]].append(i)
            for lab, xs in ba.items():
                ys = bb.get(lab)
                if not ys:
                    continue
                if len(xs) == 1 and len(ys) == 1:
                    self.match(xs[0], ys[0], "structure")
                elif level == WL_ROUNDS and len(xs) == len(ys):
                    for x, y in zip(xs, ys):
                        self.match(x, y, "structure")

    def src_status(self, sa: Tuple, sb: Tuple) -> str:
        """'same', 'diff' or 'explained' (one side is an added/removed producer or tensor)."""
        A, B = self.A, self.B
        b_unmatched = sb[0] == "node" and self.free_b(sb[1])
        if sa[0] == "node":
            mapped = self.amap(sa[1])
            if sb[0] == "node" and sb[1] in mapped and (sa[1] not in self.a2b or sa[2] == sb[2]):
                return "same"
            return "explained" if not mapped or b_unmatched else "diff"
        if b_unmatched:
            return "explained"
        if sa[0] == "init" and sb[0] == "init":
            if self.init_rename.get(sa[1], sa[1]) == sb[1] or A.init_sha[sa[1]] == B.init_sha[sb[1]]:
                return "same"
            return "explained" if sa[1] not in B.inits or sb[1] not in A.inits else "diff"
        if (sa[0] == "init" and sa[1] not in B.inits) or (sb[0] == "init" and sb[1] not in A.inits):
            return "explained"
        return "same" if sa == sb else "diff"

    def _wiring(self, a: int, b: int) -> float:
        """Fraction of inputs and consumers of ``a`` that map onto those of ``b``."""
        A, B = self.A, self.B
        sa, sb = A.src[a], B.src[b]
        ok = sum(self.src_status(x, y) == "same" for x, y in zip(sa, sb))
        bset = set(B.succs[b])
        ok += sum(1 for c in A.succs[a] if any(m in bset for m in self.amap(c)))
        total = max(len(sa), len(sb)) + max(len(A.succs[a]), len(B.succs[b]))
        return ok / total if total else 0.0

    def _score(self, a: int, b: int) -> float:
        A, B = self.A, self.B
        nb = self._wiring(a, b)
        xa, xb = A.attrs[a], B.attrs[b]
        names = set(xa) | set(xb)
        at = sum(xa.get(k) == xb.get(k) for k in names) / len(names) if names else 1.0
        ps = 1.0 - min(1.0, 4.0 * abs(A.pos[a] - B.pos[b]))
        return 0.5 * nb + 0.3 * at + 0.2 * ps

    def _position(self) -> None:
        A, B = self.A, self.B
        ga: Dict[Tuple[str, str], List[int]] = defaultdict(list)
        gb: Dict[Tuple[str, str], List[int]] = defaultdict(list)
        for i in A.order:
            if self.free_a(i):
                ga[(A.nodes[i].domain, A.nodes[i].op_type)].append(i)
        for i in B.order:
            if self.free_b(i):
                gb[(B.nodes[i].domain, B.nodes[i].op_type)].append(i)
        cands: List[Tuple[float, float, int, int]] = []
        for op, xs in ga.items():
            ys = gb.get(op, [])
            if not ys:
                continue
            ypos = [B.pos[y] for y in ys]
            for x in xs:
                if len(xs) * len(ys) <= 4096:
                    window = ys
                else:
                    k = bisect_left(ypos, A.pos[x])
                    window = ys[max(0, k - WINDOW // 2): k + WINDOW // 2]
                for y in window:
                    s = self._score(x, y)
                    if s >= 0.5:
                        cands.append((-s, abs(A.pos[x] - B.pos[y]), x, y))
        cands.sort()
        for _, _, x, y in cands:
            if self.free_a(x) and self.free_b(y):
                self.match(x, y, "position")
