"""``Reshape`` merging the k leading axes -> ``Transpose`` keeping the merged axis first -> ``Reshape``
splitting it back into the same k axes  =>  one ``Transpose`` of the original tensor (exact: only data
moves, and the merged axes never move).

torch.onnx's dynamo exporter writes attention's ``k.transpose(-2, -1)`` (onnxscript's
scaled_dot_product_attention decomposition) as ``Reshape [B, H, T, d] -> [B*H, T, d]``,
``Transpose [0, 2, 1]``, ``Reshape -> [B, H, d, T]``; so do hand-written ``bmm`` attentions
(``view(B*H, T, d).transpose(1, 2).view(B, H, d, T)``). With a batch of one the merge is a no-op for
fuse, but with B > 1 each Reshape moves data across the batch axis, which no region takes: a
sentence-transformers MiniLM run on a batch of 2 sentences was 7 regions (12 CPU Reshapes and 6 CPU
Transposes). As one 4-D Transpose it merges with the head split's Transpose (merge_transposes) and
the attention stays in one region.

In a QDQ model (onnxruntime's quantize_static puts a ``QuantizeLinear -> DequantizeLinear`` pair of
the input's grid after each Reshape / Transpose) the pairs between the three moves are looked
through when the input holds values of that grid (a DQ of it, or moves of such values): on the grid
a pair is the identity, so dropping them is exact."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, attr
from .qdq_move_chain import grid_key, on_grid

NAME = "grouped_transpose"
OPS = ("Reshape",)


def _std(node, op) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _behind(g, node, op):
    """(producer of ``node``'s input 0 of type ``op``, [the Q, DQ pair between them] or []), or None;
    each tensor on the way read by the next node alone."""
    p = g.producer.get(node.input[0])
    pair = []
    if p is not None and p.op_type == "DequantizeLinear" and _std(p, "DequantizeLinear"):
        q = g.producer.get(p.input[0])
        if q is None or q.op_type != "QuantizeLinear" or g.only_consumer(p.output[0]) is not node \
                or g.only_consumer(q.output[0]) is not p:
            return None
        pair, p = [q, p], g.producer.get(q.input[0])
        node = pair[0]
    if not _std(p, op) or g.only_consumer(p.output[0]) is not node:
        return None
    return p, pair


def match(node, g) -> Optional[Match]:
    if not _std(node, "Reshape"):
        return None
    b = _behind(g, node, "Transpose")
    if b is None:
        return None
    t, pair2 = b
    b = _behind(g, t, "Reshape")
    if b is None:
        return None
    r1, pair1 = b
    return Match([node, t, r1] + pair1 + pair2, {"pairs": pair1 + pair2})


def check(m: Match, g, target) -> Optional[str]:
    r2, t, r1 = m.nodes[:3]
    pairs = m.data["pairs"]
    if pairs:
        keys = [grid_key(n, g) for n in pairs]
        if keys[0] is None or any(k != keys[0] for k in keys):
            return "the Q / DQ pairs between the moves are not of one 8-bit grid"
        if not on_grid(g, r1.input[0], keys[0]):
            return "the input does not hold values of the pairs' grid (a pair would round them)"
    xs, s1, s2 = g.shape(r1.input[0]), g.shape(r1.output[0]), g.shape(r2.output[0])
    if xs is None or s1 is None or s2 is None:
        return "shapes are not static"
    perm = attr(t, "perm")
    perm = [int(p) for p in perm] if perm is not None else list(range(len(s1)))[::-1]
    if perm[0] != 0:
        return "the Transpose moves the merged leading axis"
    k = len(xs) - len(s1) + 1
    if k < 2 or int(np.prod(xs[:k])) != s1[0] or list(xs[k:]) != list(s1[1:]):
        return "the first Reshape does not merge the leading axes alone"
    if list(s2) != list(xs[:k]) + [s1[p] for p in perm[1:]]:
        return "the second Reshape does not split the merged axis back into the same axes"
    m.data["perm"] = list(range(k)) + [k - 1 + p for p in perm[1:]]
    return None


def rewrite(m: Match, g) -> str:
    r2, t, r1 = m.nodes[:3]
    perm, origin = m.data["perm"], m.origin
    x, y = r1.input[0], r2.output[0]
    for n in m.nodes:
        g.remove(n)
    g.make("Transpose", [x], [y], near=r1, origin=origin, name=f"{t.name}/grouped", perm=perm)
    pairs = f" ({len(m.data['pairs']) // 2} Q -> DQ pairs on the grid dropped)" if m.data["pairs"] else ""
    return f"Reshape -> Transpose -> Reshape as one Transpose perm={perm}{pairs}"
