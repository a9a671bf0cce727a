"""Sub(Sigmoid(a), Sigmoid(b)) -> Mul(Sub(Tanh(a / 2), Tanh(b / 2)), 1/2): the same difference
(``sigmoid(x) = (1 + tanh(x / 2)) / 2``), computed where fp16 storage loses less. DBNet's binarization
``1 / (1 + exp(-k (P - T)))`` with P = sigmoid(a), T = sigmoid(b) multiplies the error of P - T by
k / 4 (k = 50); P and T near 0.5 (uncertain pixels, where B matters) are stored in fp16 with a
half-ulp of 2.4e-4, tanh(a / 2) near 0 with a far smaller one, and never a larger one than the
sigmoid's (|tanh| < 1 has the ulp of |2 sigmoid - 1|). The Sigmoids stay for their other readers
(the P and T outputs). Runs before ``sub_tensors``."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float

NAME = "sigmoid_difference"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Sub",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Sub" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    ps = [g.producer.get(t) for t in node.input]
    if any(p is None or p.op_type != "Sigmoid" or p.domain not in ("", "ai.onnx") for p in ps):
        return None
    return Match([node] + ps)


def check(m: Match, g, target) -> Optional[str]:
    node, sa, sb = m.nodes
    if not all(is_float(g, t) for t in (sa.input[0], sb.input[0])):
        return "not float tensors"
    if g.shape(sa.input[0]) is None or g.shape(sa.input[0]) != g.shape(sb.input[0]):
        return "the two logits differ in shape (or have none)"
    if any(u.op_type == "QuantizeLinear" for u in g.users(node.output[0])):
        return "a QDQ Sub"
    return None


def rewrite(m: Match, g) -> str:
    node, sa, sb = m.nodes
    half = g.scalar_like(f"{node.name}/half", 0.5, sa.input[0])
    tanhs = []
    for tag, s in (("a", sa), ("b", sb)):
        x, shape = s.input[0], g.shape(s.input[0])
        h, t = g.fresh(f"{x}/half"), g.fresh(f"{x}/tanh_half")
        g.make("Mul", [x, half], [h], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/half_{tag}"))
        g.make("Tanh", [h], [t], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/tanh_{tag}"))
        for v in (h, t):
            g.set_shape(v, shape, g.dtype(x))
        tanhs.append(t)
    d = g.fresh(f"{node.output[0]}/tanh_diff")
    g.remove(node)
    g.make("Sub", tanhs, [d], near=node, origin=m.origin, name=g.fresh_node_name(f"{node.name}/tanh_diff"))
    if g.shape(node.output[0]) is not None:
        g.set_shape(d, g.shape(node.output[0]), g.dtype(node.output[0]))
    g.make("Mul", [d, half], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "sigmoid(a) - sigmoid(b) -> (tanh(a/2) - tanh(b/2)) / 2 (less fp16 rounding)"
