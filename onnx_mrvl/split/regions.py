"""Group Mrvl nodes into convex accelerator regions.

A node may join a region only when no path leaves that region and comes back to the node; so
collapsing every region into one node can never create a cycle. Linear in nodes times the number
of regions a node can reach through the CPU (small in practice).
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set

import onnx

from .. import opset
from .._graph import GraphIndex


def is_mrvl(node: onnx.NodeProto) -> bool:
    return node.domain == opset.DOMAIN and node.op_type in opset.OPS


def find_regions(g: GraphIndex, order: List[onnx.NodeProto], accel: Set[str],
                 cut_after: Iterable[str] = (), single: bool = False) -> Dict[str, int]:
    """node name -> region id for the nodes in ``accel`` that end up in a region."""
    cut = set(cut_after)
    region: Dict[str, int] = {}
    reach_out: Dict[str, Set[int]] = {}     # regions that reach this node through an outside node
    closed: Set[int] = set()                # regions ended by cut_after (nothing more may join)
    next_id = 0
    for n in order:
        preds = [g.producer[i] for i in n.input if i in g.producer]
        indirect: Set[int] = set()
        direct: List[int] = []
        for p in preds:
            indirect |= reach_out.get(p.name, set())
            r = region.get(p.name)
            if r is not None:
                direct.append(r)
        if n.name in accel:
            if single:
                if 0 not in closed and all(i in g.inputs or g.is_const(i) or
                                           (i in g.producer and g.producer[i].name in region)
                                           for i in n.input if i):
                    region[n.name] = 0
            else:
                choice: Optional[int] = None
                for r in direct:
                    if r not in indirect and r not in closed:
                        choice = r if choice is None else min(choice, r)
                if choice is None:
                    choice, next_id = next_id, next_id + 1
                region[n.name] = choice
        mine = region.get(n.name)
        # paths leave region r at n when n is not in r
        out = set(indirect)
        for r in direct:
            if r != mine:
                out.add(r)
        if mine is not None:
            out.discard(mine)
        reach_out[n.name] = out
        if n.name in cut or any(o in cut for o in _origin(n)):
            if mine is not None:
                closed.add(mine)
    return region


def _origin(node: onnx.NodeProto) -> List[str]:
    from ..provenance import get_origin
    return get_origin(node)


def boundary(g: GraphIndex, members: List[onnx.NodeProto]):
    """(inputs, outputs) tensor names of a region, in first-use order."""
    names = {n.name for n in members}
    produced = {o for n in members for o in n.output if o}
    inputs, outputs = [], []
    for n in members:
        for i in n.input:
            if i and i not in produced and not g.is_const(i) and i not in inputs:
                inputs.append(i)
    for n in members:
        for o in n.output:
            if not o:
                continue
            if o in g.output_set or any(c.name not in names for c in g.consumers.get(o, [])):
                outputs.append(o)
    return inputs, outputs
