"""Transpose(Transpose(x, p1), p2) -> Transpose(x, p1[p2]) (removed when the identity)."""
from __future__ import annotations

from typing import Optional

from .base import Match, attr

NAME = "merge_transposes"
OPS = ("Transpose",)


def _perm(node, g):
    p = attr(node, "perm")
    if p is not None:
        return [int(v) for v in p]
    s = g.shape(node.input[0])
    return None if s is None else list(range(len(s)))[::-1]


def match(node, g) -> Optional[Match]:
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return None
    first = g.producer.get(node.input[0])
    if first is None or first.op_type != "Transpose" or first.domain not in ("", "ai.onnx"):
        return None
    if g.only_consumer(first.output[0]) is not node:
        return None
    p1, p2 = _perm(first, g), _perm(node, g)
    if p1 is None or p2 is None:
        return None
    return Match([node, first], {"perm": [p1[i] for i in p2]})


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node, first = m.nodes
    perm = m.data["perm"]
    origin = m.origin
    x, y = first.input[0], node.output[0]
    g.remove(node)
    g.remove(first)
    if perm == sorted(perm):
        if y in g.pinned and (g.producer.get(x) is None or x in g.pinned):
            g.make("Identity", [x], [y], near=first, origin=origin)
            return "two Transposes cancel (Identity kept for a graph output)"
        if y in g.pinned:
            p = g.producer[x]
            g.replace_uses(x, y)
            g.rename_output(p, list(p.output).index(x), y)
        else:
            g.replace_uses(y, x)
        return "two Transposes cancel"
    g.make("Transpose", [x], [y], near=first, origin=origin, name=f"{node.name}/merged",
           perm=perm)
    return f"two Transposes merged into perm={perm}"
