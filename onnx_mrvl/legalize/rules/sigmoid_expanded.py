"""A sigmoid written out, ``1 / (1 + exp(y))`` (Reciprocal, or Div of the constant 1, of an Add of 1
and an Exp) -> Sigmoid(-y): ``y = -z`` (Neg) gives Sigmoid(z), ``y = z * c`` (Mul by a constant)
gives Sigmoid(z * -c), any other y Sigmoid(y * -1). DBNet's differentiable binarization
``1 / (1 + exp(-k (P - T)))`` (MhLiao/DB, PaddleOCR's DBHead ``step_function``), hand-written
``1 / (1 + torch.exp(-x))`` gates. The same function (exp overflowing to inf gives 0 either way);
the accelerator has Sigmoid and no Exp or Reciprocal."""
from __future__ import annotations

from typing import Optional


from .base import Match, is_float, scalar

NAME = "sigmoid_expanded"
RESTORABLE = True   # a float re-expression: put back when none of it is offloaded (split/restore.py)
OPS = ("Reciprocal", "Div")


def _single(g, name: str, op: str):
    p = g.producer.get(name)
    if p is None or p.op_type != op or p.domain not in ("", "ai.onnx") or g.only_consumer(name) is None:
        return None
    return p


def match(node, g) -> Optional[Match]:
    if node.op_type not in OPS or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Div":
        if len(node.input) != 2 or scalar(g.const(node.input[0])) != 1.0:
            return None
        den = node.input[1]
    else:
        den = node.input[0]
    add = _single(g, den, "Add")
    if add is None or len(add.input) != 2:
        return None
    one = [k for k in (0, 1) if scalar(g.const(add.input[k])) == 1.0]
    if not one:
        return None
    exp = _single(g, add.input[1 - one[0]], "Exp")
    if exp is None:
        return None
    y = exp.input[0]
    src = _single(g, y, "Neg") or _single(g, y, "Mul")
    if src is not None and src.op_type == "Mul":
        cs = [k for k in (0, 1) if g.is_const(src.input[k])]
        if len(cs) != 1 or g.const(src.input[cs[0]]).size != 1:
            src = None
    return Match([node, add, exp] + ([src] if src is not None else []))


def check(m: Match, g, target) -> Optional[str]:
    if not is_float(g, m.node.output[0]) and g.dtype(m.node.output[0]) is not None:
        return "not a float tensor"
    sy, so = g.shape(m.nodes[2].input[0]), g.shape(m.node.output[0])
    if sy is not None and so is not None and tuple(sy) != tuple(so):
        return "the constant 1 broadcasts the result to another shape"
    return None


def rewrite(m: Match, g) -> str:
    node, add, exp = m.nodes[:3]
    src = m.nodes[3] if len(m.nodes) > 3 else None
    for n in m.nodes:
        g.remove(n)
    y = exp.input[0]
    if src is not None and src.op_type == "Neg":
        arg, how = src.input[0], "Neg"
    else:
        if src is not None:
            k = 0 if g.is_const(src.input[0]) else 1
            z, c = src.input[1 - k], g.const(src.input[k])
            neg = g.add_const(f"{src.name}/negated", (-c).astype(c.dtype))
            how = "Mul by a constant"
        else:
            z, how = y, "Exp argument"
            neg = g.scalar_like(f"{node.name}/minus_one", -1.0, y)
        arg = g.fresh(f"{node.output[0]}/sigmoid_in")
        g.make("Mul", [z, neg], [arg], near=exp, origin=m.origin, name=f"{node.name}/negate")
        if g.shape(y) is not None:
            g.set_shape(arg, g.shape(y), g.dtype(y))
    g.make("Sigmoid", [arg], [node.output[0]], near=node, origin=m.origin, name=f"{node.name}/sigmoid")
    return f"1 / (1 + exp(y)) -> Sigmoid(-y) ({how})"
