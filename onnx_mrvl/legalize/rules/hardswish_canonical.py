"""``Clip(x + 3, 0, 6) / 6`` -> ``HardSigmoid(x; 1/6, 1/2)`` and ``x * Clip(x + 3, 0, 6) / 6`` ->
``x * HardSigmoid(x; 1/6, 1/2)`` (which fuse takes as the hard_swish activation of the producing
conv). paddle2onnx writes Paddle's hard_swish below opset 14 as Add / Clip / Mul / Div, tf2onnx
writes Keras' hard-swish as Add / Relu6 / Mul / Mul: left alone, each became three extra
element-wise layers after the conv instead of its activation."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float, scalar

NAME = "hardswish_canonical"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Clip",)


def _const_operand(g, node, value: float, tol: float = 1e-6) -> Optional[str]:
    """The other input of a binary ``node`` whose one input is the scalar constant ``value``."""
    if node is None or len(node.input) != 2 or node.domain not in ("", "ai.onnx"):
        return None
    for k in (0, 1):
        v = scalar(g.const(node.input[k]))
        if v is not None and abs(v - value) <= tol and not g.is_const(node.input[1 - k]):
            return node.input[1 - k]
    return None


def match(node, g) -> Optional[Match]:
    if node.op_type != "Clip" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    if scalar(g.const(node.input[1])) != 0.0 or scalar(g.const(node.input[2])) != 6.0:
        return None
    add = g.producer.get(node.input[0])
    if add is None or add.op_type != "Add" or g.only_consumer(add.output[0]) is not node:
        return None
    x = _const_operand(g, add, 3.0)
    user = g.only_consumer(node.output[0])
    if x is None or user is None or user.op_type != "Mul":
        return None
    if _const_operand(g, user, 1 / 6) == node.output[0]:          # hard sigmoid
        return Match([user, node, add], {"x": x, "swish": False})
    if sorted(user.input) == sorted([x, node.output[0]]):          # x * relu6(x + 3), then / 6
        last = g.only_consumer(user.output[0])
        if last is not None and last.op_type == "Mul" and _const_operand(g, last, 1 / 6) == user.output[0]:
            return Match([last, user, node, add], {"x": x, "swish": True})
    return None


def check(m: Match, g, target) -> Optional[str]:
    x = m.data["x"]
    if not is_float(g, x):
        return "not a float tensor"
    if g.shape(x) is None or g.shape(x) != g.shape(m.node.output[0]):
        return "the constants broadcast the tensor to another shape"
    return None


def rewrite(m: Match, g) -> str:
    x, out, origin = m.data["x"], m.node.output[0], m.origin
    for n in m.nodes:
        g.remove(n)
    hs = g.fresh(f"{out}/hard_sigmoid") if m.data["swish"] else out
    g.make("HardSigmoid", [x], [hs], near=m.nodes[-1], origin=origin, name=f"{m.node.name}/hard_sigmoid",
           alpha=1 / 6, beta=0.5)
    if not m.data["swish"]:
        return "Clip(x + 3, 0, 6) / 6 -> HardSigmoid(x; 1/6, 1/2)"
    g.set_shape(hs, g.shape(x), g.dtype(x))
    g.make("Mul", [x, hs], [out], near=m.node, origin=origin, name=m.node.name)
    return "x * Clip(x + 3, 0, 6) / 6 -> x * HardSigmoid(x; 1/6, 1/2)"
