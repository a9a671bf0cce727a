"""Group Mrvl nodes into maximal convex accelerator regions.

A region is convex when no path leaves it and comes back: collapsing every region into one node
then never creates a cycle. Nodes are visited once, in topological order. Each node carries the
set of (live) regions that reach it from outside its own region; a node may join a region of one
of its producers only when that region does not reach it through another node, and the regions of
several producers merge when neither reaches the other from outside (two chains meeting at a
Concat become one region). ``cut_after`` nodes end their region: everything downstream of them
sees the region as "reached from outside" and so cannot join it.

A region that can no longer grow (all consumers of its members visited) is dropped from the sets,
so the work per node is bounded by the number of regions still open around it: near-linear on
real graphs.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Set

import onnx

from .. import opset
from .._graph import GraphIndex

EMPTY: FrozenSet[int] = frozenset()


def is_mrvl(node: onnx.NodeProto) -> bool:
    return node.domain == opset.DOMAIN and node.op_type in opset.OPS


class _Regions:
    """Union-find over region ids, with the bookkeeping the convexity checks need."""

    def __init__(self):
        self.parent: List[int] = []
        self.pending: List[int] = []       # edges from members to consumers not visited yet
        self.ext: List[FrozenSet[int]] = []  # regions reaching a member from outside (raw ids)

    def new(self) -> int:
        self.parent.append(len(self.parent))
        self.pending.append(0)
        self.ext.append(EMPTY)
        return len(self.parent) - 1

    def find(self, r: int) -> int:
        root = r
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[r] != root:
            self.parent[r], r = root, self.parent[r]
        return root

    def live(self, r: int) -> bool:
        return self.pending[r] > 0

    def canon(self, ids: Iterable[int], own: int = -1) -> FrozenSet[int]:
        """Current ids of the live regions in ``ids``, without ``own``."""
        out = set()
        for r in ids:
            r = self.find(r)
            if r != own and self.pending[r] > 0:
                out.add(r)
        return frozenset(out)

    def union(self, keep: int, other: int) -> None:
        self.parent[other] = keep
        self.pending[keep] += self.pending[other]
        self.ext[keep] = self.ext[keep] | self.ext[other]


def find_regions(g: GraphIndex, order: List[onnx.NodeProto], accel: Set[str],
                 cut_after: Iterable[str] = (), single: bool = False) -> Dict[str, int]:
    """node name -> region id (0, 1, ... in topological order of the regions' first nodes) for the
    nodes of ``accel`` that end up in a region."""
    cut = set(cut_after)
    if single:
        return _single_region(g, order, accel, cut)
    R = _Regions()
    region: Dict[str, int] = {}            # node -> raw region id (resolve with R.find)
    reach: Dict[str, FrozenSet[int]] = {}  # node -> live regions reaching it from outside its region
    for n in order:
        preds = [g.producer[i] for i in n.input if i in g.producer]
        direct: Set[int] = set()
        raw: Set[int] = set()
        for p in preds:
            raw |= reach[p.name]
            if p.name in region:
                direct.add(R.find(region[p.name]))
        indirect = R.canon(raw)             # before this node's edges are counted off
        mine = -1
        if n.name in accel:
            mine = _join(R, sorted(r for r in direct if r not in indirect))
            region[n.name] = mine
        for p in preds:                     # one pending edge per (producer, input) pair
            if p.name in region:
                R.pending[R.find(region[p.name])] -= 1
        if mine >= 0:
            R.pending[mine] += sum(len(g.consumers.get(o, ())) for o in n.output if o)
        out = set(R.canon(indirect | direct, mine))
        if mine >= 0 and out:
            R.ext[mine] = R.canon(R.ext[mine] | out, mine)
        if n.name in cut and mine >= 0 and R.live(mine):
            out.add(mine)                   # downstream nodes see the region as left behind
        reach[n.name] = frozenset(out)
    _pull_layout_changes(g, order, region, reach, R)
    return _renumber(order, region, R)


def _join(R: _Regions, cands: List[int]) -> int:
    """The region ``n`` joins: the candidates merged as far as convexity allows, else a new one."""
    if not cands:
        return R.new()
    keep = cands[0]
    for r in cands[1:]:
        R.ext[keep] = ext_keep = R.canon(R.ext[keep], keep)
        R.ext[r] = ext_r = R.canon(R.ext[r], r)
        if r in ext_keep or keep in ext_r:
            continue                       # one reaches the other from outside: stay apart
        R.union(keep, r)
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


def _pull_layout_changes(g: GraphIndex, order, region: Dict[str, int], reach, R: _Regions) -> None:
    """A layout change alone in its region (its producer is on the CPU) joins the region of its
    consumers, when that keeps the region convex (the region does not reach the node)."""
    sizes: Dict[int, int] = {}
    for r in region.values():
        r = R.find(r)
        sizes[r] = sizes.get(r, 0) + 1
    for n in reversed(order):
        if n.op_type != "LayoutTransform" or n.name not in region or sizes[R.find(region[n.name])] != 1:
            continue
        targets = {R.find(region[c.name]) if c.name in region else None
                   for c in g.consumers.get(n.output[0], [])}
        if len(targets) != 1 or None in targets or n.output[0] in g.output_set:
            continue
        dest = targets.pop()
        preds = {R.find(region[g.producer[i].name]) for i in n.input
                 if i in g.producer and g.producer[i].name in region}
        if any(R.find(r) == dest for r in reach[n.name]) or dest in preds:
            continue
        sizes[R.find(region[n.name])] -= 1
        region[n.name] = dest
        sizes[dest] += 1


def _renumber(order, region: Dict[str, int], R: _Regions) -> Dict[str, int]:
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
