"""Merge accelerator regions that neither reaches: one accelerator call for independent branches.

``find_regions`` grows regions along tensors, so two branches that never meet at an accelerator node
(a mask model's heads from the inputs, an ensemble of LSTMs, heads ending at CPU ops or graph
outputs) stay separate regions. Like TVM's BYOC ``MergeCompilerRegions``, two regions are merged
when no path leads from one to the other (through CPU nodes, dropped regions or other regions):
collapsing the merged region into one node then creates no cycle, since a cycle through it would
be such a path. The check runs on the transitive closure of the region graph, updated after each
merge (a merged region reaches what either part reached, and is reached by what reached either).

Greedy, in topological order of the regions' first nodes: each region joins the earliest group it
is independent of, unless the merged region would not fit the target (split's ``fits``: at most
``Target.max_region_io`` inputs and outputs, which the runtime passes unpacked; with a batch above
``max_batch``, every tensor leading with the batch, so that the merged region can still run in
hardware batches). Regions connected by a path, e.g. both sides of a ``cut_after`` name or a CPU
op, are never merged.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import onnx

from ..graph_index import GraphIndex, node_reads


def merge_independent(g: GraphIndex, order: Sequence[onnx.NodeProto], kept: List[List[onnx.NodeProto]],
                      fits: Callable[[List[onnx.NodeProto]], bool]) -> List[List[onnx.NodeProto]]:
    """``kept`` (node lists, in topological order of their first nodes) with independent regions
    merged; a merged list is its parts one after the other, the lists ordered by their first node.
    ``fits(nodes)``: whether a merged region of these nodes is within the target's limits."""
    if len(kept) < 2:
        return kept
    region = {n.name: i for i, nodes in enumerate(kept) for n in nodes}
    anc = _ancestors(g, order, region, len(kept))
    members: Dict[int, List[int]] = {}        # leader -> regions (every member has the same anc)
    mask: Dict[int, int] = {}                 # leader -> bit set of its members
    for r in range(len(kept)):
        mine = 1 << r
        for lead in members:                  # insertion order: leaders in topological order
            if anc[r] & mask[lead] or anc[lead] & mine:
                continue                      # a path links them: merging would close a cycle
            nodes = [n for m in members[lead] + [r] for n in kept[m]]
            if not fits(nodes):
                continue
            _contract(anc, members[lead], r)
            members[lead].append(r)
            mask[lead] |= mine
            break
        else:
            members[r], mask[r] = [r], mine
    # part after part (no path links them, so this is a topological order): each part's
    # activations die before the next part starts, which keeps the OCM plan's live set small
    return [[n for m in members[lead] for n in kept[m]] for lead in members]


def _ancestors(g: GraphIndex, order, region: Dict[str, int], count: int) -> List[int]:
    """Per region, the bit set of regions with a path into it (through anything)."""
    up: Dict[str, int] = {}                   # node -> regions reaching it (its own excluded)
    anc = [0] * count
    for n in order:
        bits = 0
        for i in node_reads(n):
            p = g.producer.get(i)
            if p is None:
                continue
            bits |= up.get(p.name, 0)
            if p.name in region:
                bits |= 1 << region[p.name]
        r = region.get(n.name)
        if r is not None:
            bits &= ~(1 << r)
            anc[r] |= bits
        up[n.name] = bits
    return anc


def _contract(anc: List[int], group: List[int], r: int) -> None:
    """Update the closure for merging region ``r`` into ``group`` (independent of it): whatever
    reaches one part now reaches every part and whatever the merged region reaches."""
    parts = group + [r]
    mask = sum(1 << m for m in parts)
    above = 0
    for m in parts:
        above |= anc[m]
    above &= ~mask
    for m in parts:
        anc[m] = above
    for x in range(len(anc)):
        if x not in parts and anc[x] & mask:
            anc[x] |= above | mask
