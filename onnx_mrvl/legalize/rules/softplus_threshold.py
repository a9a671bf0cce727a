"""PyTorch's thresholded softplus as the dynamo exporter writes ``nn.Softplus()`` (beta 1,
threshold 20): ``Where(Greater(x, t), x, Softplus(x))`` -> ``Softplus(x)``. For x > t >= 15 the
two differ by log1p(exp(-x)) < 3.1e-7, below half an fp32 ulp of x (so the same fp32 values); the
accelerator has the softplus activation and no Greater / Where of run-time conditions. CRN / speech
enhancement masks."""
from __future__ import annotations

from typing import Optional

from .base import Match, scalar

NAME = "softplus_threshold"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Where",)
MIN_THRESHOLD = 15.0


def match(node, g) -> Optional[Match]:
    if node.op_type != "Where" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    cond, a, b = node.input
    gt, sp = g.producer.get(cond), g.producer.get(b)
    if gt is None or sp is None or gt.op_type != "Greater" or sp.op_type != "Softplus":
        return None
    if gt.input[0] != a or sp.input[0] != a:
        return None
    t = scalar(g.const(gt.input[1]))
    if t is None or t < MIN_THRESHOLD:
        return None
    if g.only_consumer(cond) is not node:
        return None
    return Match([node, gt, sp])


def check(m: Match, g, target) -> Optional[str]:
    sx, sy = g.shape(m.node.input[1]), g.shape(m.node.output[0])
    if sx is None or sy is None or tuple(sx) != tuple(sy):
        return "the threshold broadcasts x to another shape"
    return None


def rewrite(m: Match, g) -> str:
    node, gt, sp = m.nodes
    g.remove(node)
    g.remove(gt)
    if not g.used(sp.output[0]):
        g.remove(sp)
    g.make("Softplus", [node.input[1]], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "Where(x > threshold, x, Softplus(x)) -> Softplus(x)"
