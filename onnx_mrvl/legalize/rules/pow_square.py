"""Pow(x, 2) of a float tensor -> Mul(x, x): the accelerator multiplies two tensors element-wise
(Mul2D) and has no Pow. ``x ** 2`` in PyTorch exports as Pow with a constant 2.0: the power spectrum
``re ** 2 + im ** 2`` of a conv STFT (Silero VAD v5 / v6, every "magnitude" front end), variances and
RMS written by hand. IEEE ``pow(x, 2)`` is the correctly rounded square, as is ``x * x``: the same
value in fp32 and in fp16. Left alone: other exponents, integer tensors, and a Pow read by a
QuantizeLinear (a QDQ model's quantized square: fuse's int8 paths read that form)."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float, scalar

NAME = "pow_square"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Pow",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Pow" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    return Match([node]) if scalar(g.const(node.input[1])) == 2.0 else None


def check(m: Match, g, target) -> Optional[str]:
    x = m.node.input[0]
    if not is_float(g, x):
        return "an integer Pow"
    if any(u.op_type == "QuantizeLinear" for u in g.users(m.node.output[0])):
        return "a QDQ square (read by a QuantizeLinear)"
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    x = node.input[0]
    g.remove(node)
    g.make("Mul", [x, x], [node.output[0]], near=node, origin=m.origin, name=node.name)
    return "x ** 2 -> x * x"
