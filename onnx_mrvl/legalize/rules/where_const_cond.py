"""``Where(cond, a, b)`` with a constant condition:

    cond all true  -> a;  all false -> b   (exact; the result's shape must be that operand's)
    otherwise, one branch a constant scalar c (finite, fp16 holds it) and the other a tensor x:
        -> x * keep + c * (1 - keep)   (keep: the constant 0 / 1 mask where x is chosen)

Models run without an attention mask (speech encoders: SEW-D, wav2vec2-style with no padding) fold
their ``masked_fill(~mask, 0)`` of the attention probabilities into a Where of a constant
condition; it had no accelerator op (the boolean condition) and cut each attention block. The
second form is exact for finite x (x * 1 + 0, x * 0 + c). Where's whose fill is beyond fp16 (an
attention mask of float32's lowest / -inf) are fuse's masks.py, not this rule's."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .base import Match, is_float

NAME = "where_const_cond"
OPS = ("Where",)


def match(node, g) -> Optional[Match]:
    if node.op_type != "Where" or node.domain not in ("", "ai.onnx") or len(node.input) != 3:
        return None
    if not g.is_const(node.input[0]) or (g.is_const(node.input[1]) and g.is_const(node.input[2])):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    node = m.node
    cond = np.asarray(g.const(node.input[0])).astype(bool)
    sy = g.shape(node.output[0])
    if sy is None or any(d is None for d in sy):
        return "the result's shape is unknown"
    if cond.all() or not cond.any():
        src = node.input[1] if cond.all() else node.input[2]
        if g.is_const(src) or g.shape(src) is None or tuple(g.shape(src)) != tuple(sy):
            return "the chosen operand is a constant or broadcast to another shape"
        if node.output[0] in g.pinned and (g.producer.get(src) is None or src in g.pinned):
            return "it would copy a graph input or output to a graph output"
        m.data["bypass"] = src
        return None
    consts = [k for k in (1, 2) if g.is_const(node.input[k])]
    if len(consts) != 1:
        return "both branches are tensors"
    k = consts[0]
    c = np.asarray(g.const(node.input[k]))
    x = node.input[3 - k]
    if c.size != 1 or not is_float(g, x) or c.dtype.kind != "f":
        return "the constant branch is not a float scalar"
    v = float(c.reshape(-1)[0])
    if not np.isfinite(v) or abs(v) > target.fp16_max:
        return f"the fill {v:g} is not a finite value fp16 holds (a mask fill: fuse's masks.py)"
    if g.shape(x) is None or tuple(g.shape(x)) != tuple(sy):
        return "the Where broadcasts the tensor to another shape"
    keep = np.broadcast_to(cond if k == 2 else ~cond, sy)
    m.data.update(x=x, fill=v, keep=keep)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    if "bypass" in m.data:
        g.bypass(node, m.data["bypass"], node.output[0])
        return "Where of a constant all-true / all-false condition -> its operand"
    x, keep, fill = m.data["x"], m.data["keep"], m.data["fill"]
    dt = g.const(node.input[1] if g.is_const(node.input[1]) else node.input[2]).dtype
    k = np.asarray(keep, dt)
    while k.ndim > 1 and k.shape[0] == 1:
        k = k[0]
    kept = g.fresh(f"{node.output[0]}/kept")
    g.remove(node)
    g.make("Mul", [x, g.add_const(f"{node.name}/keep", k)], [kept], near=node, origin=m.origin, name=f"{node.name}/keep")
    g.set_shape(kept, g.shape(x), g.dtype(x))
    g.make("Add", [kept, g.add_const(f"{node.name}/fill", (1 - k) * np.asarray(fill, dt))], [node.output[0]],
           near=node, origin=m.origin, name=node.name)
    return "Where of a constant condition -> x * keep + fill * (1 - keep)"
