"""legalize's node order: a strict topological order of a ``Graph``'s nodes, ties broken by each
node's insertion key (new nodes where the node they replace stood), bodies' outer-scope reads counted."""
from __future__ import annotations

import heapq
import logging
from typing import Dict, List, Tuple

import onnx

from ..graph_index import node_reads

logger = logging.getLogger(__name__)


def stable_toposort(nodes_by_id: Dict[int, onnx.NodeProto], producer: Dict[str, onnx.NodeProto],
                    order: Dict[int, Tuple[float, int]]) -> List[onnx.NodeProto]:
    """The nodes (``Graph.nodes``: id -> node) in topological order by ``producer``, ties by ``order``
    (id -> insertion key); a cycle keeps every node, the rest in ``nodes_by_id`` order."""
    nodes = list(nodes_by_id.values())
    indeg = {id(n): 0 for n in nodes}
    users: Dict[int, List[onnx.NodeProto]] = {}
    for n in nodes:   # a body's outer-scope reads count (onnxruntime's quantizer moves Loops up)
        for i in set(node_reads(n)):
            p = producer.get(i)
            if p is not None and id(p) in nodes_by_id:
                indeg[id(n)] += 1
                users.setdefault(id(p), []).append(n)
    heap = [(order[id(n)], id(n)) for n in nodes if indeg[id(n)] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, nid = heapq.heappop(heap)
        n = nodes_by_id[nid]
        out.append(n)
        for u in users.get(nid, []):
            indeg[id(u)] -= 1
            if indeg[id(u)] == 0:
                heapq.heappush(heap, (order[id(u)], id(u)))
    if len(out) != len(nodes):  # a cycle cannot come from the rules; keep every node anyway
        seen = {id(n) for n in out}
        out += [n for n in nodes if id(n) not in seen]
        logger.warning("legalize: graph has a cycle; node order left partly unsorted")
    return out
