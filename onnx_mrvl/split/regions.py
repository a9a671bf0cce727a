"""Group Mrvl nodes into maximal accelerator regions whose collapse never creates a cycle.

Collapsing every region into one node must leave the graph acyclic: not only may no path leave a
region and come back to it (convexity), no chain region A -> CPU -> region B -> ... -> region A may
exist either. Nodes are visited once, in topological order, and the region graph is kept as data:
each region knows the regions that feed it directly (``adj``) and through at least one node outside
both (``ext``); each CPU node knows its nearest regions upstream (``near``). A node joins the region
of one of its producers unless that region already reaches the node some other way, which a
backward search over the region graph answers; it is pruned to regions ending after the
candidate's first node (a region can only reach regions that end later than it starts), so the
work stays near-linear on real graphs. Producers' regions merge (two chains meeting at a Concat
become one region) when neither reaches the other through anything outside them. ``cut_after``
nodes end their region: their consumers see them as outside nodes.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Set

import onnx

from .. import opset
from ..graph_index import GraphIndex

EMPTY: FrozenSet[int] = frozenset()


def is_mrvl(node: onnx.NodeProto) -> bool:
    return node.domain == opset.DOMAIN and node.op_type in opset.OPS


class RegionGraph:
    """Union-find over region ids plus, per region, its first/last node position and its feeders."""

    def __init__(self):
        self.parent: List[int] = []
        self.first: List[int] = []
        self.last: List[int] = []
        self.adj: List[Set[int]] = []      # regions with an edge straight into a member
        self.ext: List[Set[int]] = []      # regions reaching a member through outside nodes only

    def new(self, pos: int) -> int:
        self.parent.append(len(self.parent))
        self.first.append(pos)
        self.last.append(pos)
        self.adj.append(set())
        self.ext.append(set())
        return len(self.parent) - 1

    def find(self, r: int) -> int:
        root = r
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[r] != root:
            self.parent[r], r = root, self.parent[r]
        return root

    def feeders(self, r: int) -> Set[int]:
        return {self.find(x) for x in self.adj[r] | self.ext[r]} - {r}

    def reaches(self, src: int, targets: Iterable[int]) -> bool:
        """True when region ``src`` reaches any region of ``targets`` (or is one of them)."""
        floor = self.first[src]
        todo = [self.find(t) for t in targets]
        seen: Set[int] = set()
        while todo:
            r = todo.pop()
            if r == src:
                return True
            if r in seen or self.last[r] <= floor:
                continue
            seen.add(r)
            todo.extend(self.feeders(r))
        return False

    def union(self, keep: int, other: int) -> None:
        self.parent[other] = keep
        self.first[keep] = min(self.first[keep], self.first[other])
        self.last[keep] = max(self.last[keep], self.last[other])
        self.adj[keep] |= self.adj[other]
        self.ext[keep] |= self.ext[other]
        self.adj[other], self.ext[other] = set(), set()


def find_regions(g: GraphIndex, order: List[onnx.NodeProto], accel: Set[str],
                 cut_after: Iterable[str] = (), single: bool = False) -> Dict[str, int]:
    """node name -> region id (0, 1, ... in topological order of the regions' first nodes) for the
    nodes of ``accel`` that end up in a region."""
    cut = set(cut_after)
    if single:
        return _single_region(g, order, accel, cut)
    R = RegionGraph()
    region: Dict[str, int] = {}             # member -> raw region id (resolve with R.find)
    near: Dict[str, FrozenSet[int]] = {}    # outside node (or cut member) -> nearest regions upstream
    for pos, n in enumerate(order):
        direct: Set[int] = set()            # regions of producers feeding n straight
        via: Set[int] = set()               # nearest regions feeding n through outside nodes
        for i in n.input:
            p = g.producer.get(i)
            if p is None:
                continue
            if p.name in region and p.name not in cut:
                direct.add(R.find(region[p.name]))
            else:
                via |= near[p.name]
        via = {R.find(r) for r in via}
        mine: Optional[int] = None
        if n.name in accel:
            mine = _join(R, n, pos, direct, via)
            region[n.name] = mine
            R.adj[mine] |= direct - {mine}
            R.ext[mine] |= via
        if mine is None or n.name in cut:
            out = via | direct
            if mine is not None:
                out.add(mine)
            near[n.name] = frozenset(out)
    _pull_layout_changes(g, order, region, near, R)
    return _renumber(order, region, R)


def _join(R: RegionGraph, n: onnx.NodeProto, pos: int, direct: Set[int], via: Set[int]) -> int:
    """The region ``n`` joins: the producers' regions it may join, merged as far as allowed."""
    ok = []
    for q in sorted(direct):
        if q in via or R.reaches(q, (direct - {q}) | via):
            continue                        # q reaches n some other way: joining closes a cycle
        ok.append(q)
    if not ok:
        return R.new(pos)
    keep = ok[0]
    for r in ok[1:]:
        # merging is safe when neither reaches the other through something outside both
        if (keep in {R.find(x) for x in R.ext[r]} or r in {R.find(x) for x in R.ext[keep]}
                or any(R.reaches(keep, [f]) for f in R.feeders(r) - {keep})
                or any(R.reaches(r, [f]) for f in R.feeders(keep) - {r})):
            continue
        R.union(keep, r)
    keep = R.find(keep)
    R.last[keep] = pos
    return keep


def _single_region(g: GraphIndex, order, accel: Set[str], cut: Set[str]) -> Dict[str, int]:
    """The RFC's first revision: one region fed by model inputs only (everything after it on the CPU)."""
    region: Dict[str, int] = {}
    for n in order:
        if n.name not in accel:
            continue
        ok = True
        for i in n.input:
            if not i or i in g.inputs or g.is_const(i):
                continue
            p = g.producer.get(i)
            if p is None or p.name not in region or p.name in cut:
                ok = False
                break
        if ok:
            region[n.name] = 0
    return region


def _pull_layout_changes(g: GraphIndex, order, region: Dict[str, int], near, R: RegionGraph) -> None:
    """A layout change alone in its region (its producer is on the CPU) joins the region of its
    consumers, when that closes no cycle."""
    sizes: Dict[int, int] = {}
    for r in region.values():
        r = R.find(r)
        sizes[r] = sizes.get(r, 0) + 1
    for n in reversed(order):
        if n.op_type != "LayoutTransform" or n.name not in region:
            continue
        own = R.find(region[n.name])
        if sizes[own] != 1 or n.output[0] in g.output_set:
            continue
        targets = {R.find(region[c.name]) if c.name in region else None
                   for c in g.consumers.get(n.output[0], [])}
        if len(targets) != 1 or None in targets:
            continue
        dest = targets.pop()
        p = g.producer.get(n.input[0])
        feed = {R.find(r) for r in near.get(p.name, EMPTY)} if p is not None and p.name not in region else None
        if feed is None or R.reaches(dest, feed):
            continue
        sizes[own] -= 1
        sizes[dest] += 1
        region[n.name] = dest
        R.ext[dest] |= feed
        R.first[dest] = min(R.first[dest], R.first[own])


def _renumber(order, region: Dict[str, int], R: RegionGraph) -> Dict[str, int]:
    ids: Dict[int, int] = {}
    out: Dict[str, int] = {}
    for n in order:
        if n.name in region:
            r = R.find(region[n.name])
            out[n.name] = ids.setdefault(r, len(ids))
    return out


def boundary(g: GraphIndex, members: List[onnx.NodeProto]):
    """(inputs, outputs) tensor names of a region, in first-use order. A tensor used both inside and
    outside the region (or a graph output) is an output."""
    names = {n.name for n in members}
    produced = {o for n in members for o in n.output if o}
    inputs: List[str] = []
    seen: Set[str] = set()
    outputs: List[str] = []
    for n in members:
        for i in n.input:
            if i and i not in produced and not g.is_const(i) and i not in seen:
                seen.add(i)
                inputs.append(i)
    for n in members:
        for o in n.output:
            if o and (o in g.output_set or any(c.name not in names for c in g.consumers.get(o, []))):
                outputs.append(o)
    return inputs, outputs


def is_convex(g: GraphIndex, members: Iterable[str]) -> bool:
    """True when no path leaves the node set and comes back (a check for tests and asserts)."""
    inside = set(members)
    # nodes reachable from the region through an outside node
    frontier = [c for m in inside for o in g.by_name[m].output if o
                for c in g.consumers.get(o, []) if c.name not in inside]
    seen: Set[str] = set()
    while frontier:
        n = frontier.pop()
        if n.name in seen:
            continue
        seen.add(n.name)
        for o in n.output:
            for c in g.consumers.get(o, []):
                if c.name in inside:
                    return False
                frontier.append(c)
    return True
