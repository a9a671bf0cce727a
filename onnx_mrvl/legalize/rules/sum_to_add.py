"""Sum with N >= 2 inputs -> a chain of binary Add nodes (Sum of one input: remove_identity)."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "sum_to_add"
OPS = ("Sum",)


def match(node, g) -> Optional[Match]:
    if node.op_type == "Sum" and node.domain in ("", "ai.onnx") and len(node.input) >= 2:
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    if g.opset < 7:
        return "opset < 7: Add has no broadcasting"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    ins, out = list(node.input), node.output[0]
    g.remove(node)
    acc = ins[0]
    for k, x in enumerate(ins[1:], start=1):
        y = out if k == len(ins) - 1 else g.fresh(f"{out}/sum{k}")
        g.make("Add", [acc, x], [y], near=node, origin=m.origin, name=f"{node.name}/add{k}")
        acc = y
    return f"Sum of {len(ins)} -> {len(ins) - 1} Add"
