"""Dropout is the identity at inference: removed. A used mask output is an error."""
from __future__ import annotations

from typing import Optional

from ...errors import ModelError
from .base import Match, attr, const_input, inp

NAME = "remove_dropout"
OPS = ("Dropout",)


def match(node, g) -> Optional[Match]:
    if node.op_type == "Dropout" and node.domain in ("", "ai.onnx"):
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    if inp(node, 2):
        mode = const_input(g, node, 2)
        if mode is None:
            return "training_mode is not a constant"
        if bool(mode.reshape(-1)[0]):
            return "training_mode is true"
    if attr(node, "is_test", 1) == 0:
        return "is_test=0 (training)"
    if len(node.output) > 1 and node.output[1] and g.used(node.output[1]):
        raise ModelError("Dropout mask output is used; an inference model has no dropout mask",
                         node=node.name, origin=m.origin,
                         hint="remove the use of the mask (it is all ones at inference)")
    src, dst = node.input[0], node.output[0]
    if dst in g.pinned and (g.producer.get(src) is None or src in g.pinned):
        return "it copies a graph input or output to a graph output"
    return None


def rewrite(m: Match, g) -> str:
    g.bypass(m.node, m.node.input[0], m.node.output[0])
    return "Dropout removed"
