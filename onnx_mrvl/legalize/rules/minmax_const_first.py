"""``Max(c, x)`` / ``Min(c, x)`` with a constant first operand -> ``Max(x, c)`` / ``Min(x, c)``.

Both ops are commutative (the broadcast output is the same), but fuse's one-bound clamp
(``steps.classify``) and legalize's log-floor rules (``log_floor_clamp``) read the data at input 0
and the bound at input 1: Keras' ``tf.maximum(1e-12, power)`` before a log (DNSMOS' P.835 front
end, keras2onnx) stayed a 0-D "standalone activation" on the CPU between two regions, its 1e-12
floor (0 in fp16) not moved into the log domain. Exact: operands only swap."""
from __future__ import annotations

from typing import Optional

from .base import Match

NAME = "minmax_const_first"
OPS = ("Max", "Min")


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    a, b = node.input
    if a and b and g.is_const(a) and not g.is_const(b):
        return Match([node])
    return None


def check(m: Match, g, target) -> Optional[str]:
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    a, b = node.input
    g.set_input(node, 1, a)   # the constant first: it keeps a reader (an unread constant is dropped)
    g.set_input(node, 0, b)
    return f"{node.op_type}(constant, x) -> {node.op_type}(x, constant)"
