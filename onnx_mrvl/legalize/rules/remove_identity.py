"""Identity nodes and single-input Sum nodes are removed (their consumers read the input)."""
from __future__ import annotations

from typing import Optional

from .base import Match, bypass_reason

NAME = "remove_identity"
OPS = ("Identity", "Sum")


def match(node, g) -> Optional[Match]:
    if node.domain in ("", "ai.onnx") and (
            node.op_type == "Identity" or (node.op_type == "Sum" and len(node.input) == 1)):
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    return bypass_reason(m, g)


def rewrite(m: Match, g) -> str:
    g.bypass(m.node, m.node.input[0], m.node.output[0])
    return f"{m.node.op_type} removed"
