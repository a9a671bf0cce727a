"""Graph structure helpers and a layered (Sugiyama-style) layout for drawing ONNX graphs.

``node_keys`` gives every node a unique, stable key (its name when that is unique, else
``<name or op_type>#<index>``); the diff and the HTML view both use it. ``layered_layout`` places
an abstract DAG top to bottom: layers by longest path from the sources (constant computations,
i.e. nodes not reachable from the graph inputs, pulled down next to their first consumer), long
edges routed through dummy points, order within a layer by a few barycentre sweeps, x coordinates by an order-preserving least-squares fit to the neighbours
(isotonic regression, O(n) per layer). Everything is O((V + E) log V) apart from the dummy
points, whose number is capped.
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import onnx

log = logging.getLogger(__name__)


def node_keys(graph: onnx.GraphProto) -> List[str]:
    """One unique key per node: its name if non-empty and unique, else ``name-or-op#index``."""
    counts: Dict[str, int] = {}
    for n in graph.node:
        counts[n.name] = counts.get(n.name, 0) + 1
    taken = {n.name for n in graph.node if n.name and counts[n.name] == 1}
    keys = []
    for i, n in enumerate(graph.node):
        if n.name and counts[n.name] == 1:
            keys.append(n.name)
            continue
        key = f"{n.name or n.op_type}#{i}"
        while key in taken:
            key += "#"
        taken.add(key)
        keys.append(key)
    return keys


def producer_map(graph: onnx.GraphProto) -> Dict[str, Tuple[int, int]]:
    """Tensor name -> (index of the producing node, output position)."""
    out: Dict[str, Tuple[int, int]] = {}
    for i, n in enumerate(graph.node):
        for k, t in enumerate(n.output):
            if t:
                out[t] = (i, k)
    return out


def topo_order(n: int, preds: Sequence[Sequence[int]], succs: Sequence[Sequence[int]]) -> List[int]:
    """Kahn's order, ties broken by index; nodes on a cycle are appended in index order."""
    indeg = [len(set(p)) for p in preds]
    heap = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    order: List[int] = []
    done = [False] * n
    while heap:
        v = heapq.heappop(heap)
        if done[v]:
            continue
        done[v] = True
        order.append(v)
        for s in set(succs[v]):
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) < n:
        log.warning("graph has a cycle: %d nodes placed in index order", n - len(order))
        order.extend(i for i in range(n) if not done[i])
    return order


@dataclass
class Layout:
    """Node centres and sizes, canvas size, and per edge the polyline to draw."""
    x: List[float]
    y: List[float]
    w: List[float]
    h: List[float]
    layer: List[int]
    width: float
    height: float
    edges: List[Tuple[int, int, List[Tuple[float, float]]]] = field(default_factory=list)


def _isotonic(target: List[float], weight: List[float]) -> List[float]:
    """Non-decreasing least-squares fit (pool adjacent violators), O(n)."""
    blocks: List[List[float]] = []  # [mean, weight, count]
    for t, w in zip(target, weight):
        blocks.append([t, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            tw = w1 + w2
            blocks.append([(m1 * w1 + m2 * w2) / tw, tw, c1 + c2])
    out: List[float] = []
    for m, _, c in blocks:
        out.extend([m] * c)
    return out


def layered_layout(sizes: Sequence[Tuple[float, float]], edges: Sequence[Tuple[int, int]], *,
                   sweeps: int = 4, hgap: float = 24.0, vgap: float = 48.0, margin: float = 20.0,
                   max_dummies: int = 0, roots: Optional[Iterable[int]] = None) -> Layout:
    """Top-to-bottom layout of a DAG with ``len(sizes)`` nodes of the given (width, height).

    Nodes not reachable from ``roots`` (default: every node without predecessors is movable) are
    constant computations: they are placed as late as possible, right above their first consumer.
    """
    n = len(sizes)
    uniq = sorted({(u, v) for u, v in edges if u != v})
    preds: List[List[int]] = [[] for _ in range(n)]
    succs: List[List[int]] = [[] for _ in range(n)]
    for u, v in uniq:
        preds[v].append(u)
        succs[u].append(v)
    order = topo_order(n, preds, succs)
    rank = [0] * n
    for r, v in enumerate(order):
        rank[v] = r
    layer = [0] * n
    for v in order:
        for u in preds[v]:
            if rank[u] < rank[v]:
                layer[v] = max(layer[v], layer[u] + 1)
    if roots is None:
        floating = [not preds[v] for v in range(n)]
    else:
        floating = [True] * n
        stack = [r for r in roots if 0 <= r < n]
        for r in stack:
            floating[r] = False
        while stack:
            for s in succs[stack.pop()]:
                if floating[s]:
                    floating[s] = False
                    stack.append(s)
    for v in reversed(order):  # constants sit right above their first consumer
        fwd = [layer[s] for s in succs[v] if rank[s] > rank[v]]
        if floating[v] and fwd:
            layer[v] = max(layer[v], min(fwd) - 1)
    # dummy points for edges spanning several layers (shortest spans first, capped)
    budget = max_dummies or (4 * n + 4000)
    fwd_edges = [(u, v) for u, v in uniq if layer[v] > layer[u]]
    fwd_edges.sort(key=lambda e: layer[e[1]] - layer[e[0]])
    w = [float(s[0]) for s in sizes]
    h = [float(s[1]) for s in sizes]
    lay = list(layer)
    order_key = [float(r) for r in rank]
    up: List[List[int]] = [[] for _ in range(n)]
    down: List[List[int]] = [[] for _ in range(n)]
    chains: Dict[Tuple[int, int], List[int]] = {}
    for u, v in fwd_edges:
        span = layer[v] - layer[u]
        if span > 1 and span - 1 <= budget:
            budget -= span - 1
            chain, prev = [], u
            for L in range(layer[u] + 1, layer[v]):
                d = len(w)
                w.append(8.0), h.append(0.0), lay.append(L), up.append([prev]), down.append([])
                order_key.append(rank[u] + 0.5)
                down[prev].append(d)
                chain.append(d)
                prev = d
            down[prev].append(v)
            up[v].append(prev)
            chains[(u, v)] = chain
        else:
            down[u].append(v)
            up[v].append(u)
    total = len(w)
    nlayers = (max(lay) + 1) if total else 0
    layers: List[List[int]] = [[] for _ in range(nlayers)]
    for v in sorted(range(total), key=lambda v: (order_key[v], v)):
        layers[lay[v]].append(v)
    pos = [0.0] * total
    for L in layers:
        for i, v in enumerate(L):
            pos[v] = float(i)

    def sweep(seq, nbrs):
        for L in seq:
            keyed = []
            for v in layers[L]:
                nb = nbrs[v]
                bary = sum(pos[u] for u in nb) / len(nb) if nb else pos[v]
                keyed.append((bary, pos[v], v))
            keyed.sort()
            layers[L] = [v for _, _, v in keyed]
            for i, v in enumerate(layers[L]):
                pos[v] = float(i)

    for _ in range(sweeps):
        sweep(range(1, nlayers), up)
        sweep(range(nlayers - 2, -1, -1), down)
    # x coordinates: pack, then fit each layer to its neighbours' mean keeping order and gaps
    x = [0.0] * total
    for L in layers:
        cur = 0.0
        for v in L:
            x[v] = cur + w[v] / 2
            cur += w[v] + hgap
        shift = cur / 2
        for v in L:
            x[v] -= shift

    wt = [1.0 if v < n else 2.0 for v in range(total)]  # dummies pull harder: long edges stay straight

    def place(seq, nbrs):
        for L in seq:
            vs = layers[L]
            if not vs:
                continue
            offs, acc = [], 0.0
            for i, v in enumerate(vs):
                if i:
                    acc += (w[vs[i - 1]] + w[v]) / 2 + hgap
                offs.append(acc)
            target = []
            for v, o in zip(vs, offs):
                nb = nbrs[v]
                t = sum(wt[u] * x[u] for u in nb) / sum(wt[u] for u in nb) if nb else x[v]
                target.append(t - o)
            for v, o, y in zip(vs, offs, _isotonic(target, [wt[v] for v in vs])):
                x[v] = y + o

    for _ in range(3):
        place(range(1, nlayers), up)
        place(range(nlayers - 2, -1, -1), down)
    ys, cur = [], margin
    for L in layers:
        hh = max((h[v] for v in L), default=0.0)
        ys.append(cur + hh / 2)
        cur += hh + vgap
    y = [ys[lay[v]] for v in range(total)]
    left = min((x[v] - w[v] / 2 for v in range(total)), default=0.0)
    x = [xv - left + margin for xv in x]
    width = max((x[v] + w[v] / 2 for v in range(total)), default=0.0) + margin
    height = max(cur - vgap + margin, 2 * margin)
    paths = []
    for u, v in uniq:
        pts = [(x[u], y[u] + h[u] / 2)]
        pts += [(x[d], y[d]) for d in chains.get((u, v), [])]
        pts.append((x[v], y[v] - h[v] / 2))
        paths.append((u, v, pts))
    return Layout(x[:n], y[:n], w[:n], h[:n], layer, width, height, paths)
