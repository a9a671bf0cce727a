"""``Expand(x, shape)`` of a float tensor computed at run time that repeats one unit axis r times ->
``Concat(x, x, ..., axis)`` (r copies): grouped-query attention's ``repeat_kv`` (Llama, Qwen2,
Mistral: ``Unsqueeze(k, 2) -> Expand [B, Hkv, r, T, d] -> Reshape [B, Hkv * r, T, d]``) and any
other broadcast of a tensor along one axis. Exact (a copy); the Concat is an accelerator op (2-D to
5-D, not on the batch axis) where Expand has none, so the attention stays in its region.

Rules: static shapes, the result of x's rank (no new leading axes), exactly one axis widened
(from 1 to r, 2 <= r <= ``MAX_COPIES``)."""
from __future__ import annotations

from typing import Optional

from .base import Match, is_float

NAME = "expand_to_concat"
OPS = ("Expand",)
MAX_COPIES = 64


def match(node, g) -> Optional[Match]:
    if node.op_type != "Expand" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    if g.is_const(node.input[0]) or not g.is_const(node.input[1]):
        return None
    return Match([node])


def check(m: Match, g, target) -> Optional[str]:
    x, y = m.node.input[0], m.node.output[0]
    sx, sy = g.shape(x), g.shape(y)
    if not is_float(g, x):
        return "not a float tensor"
    if sx is None or sy is None or any(d is None for d in list(sx) + list(sy)):
        return "shapes unknown"
    if len(sx) != len(sy):
        return f"the result has {len(sy)} axes, the input {len(sx)} (new leading axes)"
    wide = [k for k, (a, b) in enumerate(zip(sx, sy)) if a != b]
    if len(wide) != 1 or sx[wide[0]] != 1:
        return f"widens {len(wide)} axes (one unit axis only)"
    r = sy[wide[0]]
    if not 2 <= r <= MAX_COPIES:
        return f"{r} copies (2 to {MAX_COPIES})"
    m.data.update(axis=wide[0], copies=r)
    return None


def rewrite(m: Match, g) -> str:
    node = m.node
    g.remove(node)
    g.make("Concat", [node.input[0]] * m.data["copies"], [node.output[0]], near=node, origin=m.origin,
           name=node.name, axis=m.data["axis"])
    return f"Expand of one unit axis -> Concat of {m.data['copies']} copies along axis {m.data['axis']}"
