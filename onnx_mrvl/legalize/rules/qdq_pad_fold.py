"""A zero Pad between Q/DQ pairs in front of QDQ Convs (tf2onnx writes TF's asymmetric SAME padding
as an explicit Pad; onnxruntime's quantizer puts a pair after it):

    DQ(x_q; s, z) -> Pad(0) -> Q(s, z) -> DQ(s, z) -> Conv   =>   DQ(x_q; s, z) -> Conv(pads + Pad's)

Exact: the pair after the Pad has the DQ's scale and zero point, so it maps every value (the
dequantized codes and the pad's 0 = the code z) to itself, and a Conv's own zero padding pads the
same 0. The float ``pad_fold`` cannot see through the pair; this leaves fuse an int8 Conv2D
(docs/fusion.md "int8") instead of a Pad on the CPU between two regions.
"""
from __future__ import annotations

from typing import Optional


from ... import provenance
from ..graph import set_attr
from .base import Match, attr, inp
from .pad_fold import pad_spec

NAME = "qdq_pad_fold"
OPS = ("Pad",)


def _only(g, t: str, op: str):
    users = g.users(t)
    return users[0] if len(users) == 1 and users[0].op_type == op and t not in g.pinned else None


def _qp(g, n):
    s = g.const(inp(n, 1))
    z = g.const(inp(n, 2)) if inp(n, 2) else None
    if s is None or s.size != 1 or (inp(n, 2) and (z is None or z.size != 1)):
        return None
    return float(s.reshape(-1)[0]), (int(z.reshape(-1)[0]) if z is not None else 0), \
        (z.dtype if z is not None else None)


def match(node, g) -> Optional[Match]:
    dq_a = g.producer.get(node.input[0])
    if node.domain not in ("", "ai.onnx") or dq_a is None or dq_a.op_type != "DequantizeLinear":
        return None
    q = _only(g, node.output[0], "QuantizeLinear")
    dq_b = _only(g, q.output[0], "DequantizeLinear") if q is not None else None
    if dq_b is None:
        return None
    convs = g.users(dq_b.output[0])
    if not convs or dq_b.output[0] in g.pinned or any(c.op_type != "Conv" or c.input[0] != dq_b.output[0]
                                                      or list(c.input).count(dq_b.output[0]) != 1 for c in convs):
        return None
    spec = pad_spec(node, g)
    return None if spec is None else Match([node, q, dq_b] + convs, {"spec": spec, "dq_a": dq_a})


def check(m: Match, g, target) -> Optional[str]:
    pad, q, dq_b, *convs = m.nodes
    pads, value, r = m.data["spec"]
    qa, qq, qb = _qp(g, m.data["dq_a"]), _qp(g, q), _qp(g, dq_b)
    if qa is None or qa != qq or qq != qb:
        return "the pair after the Pad does not have the DequantizeLinear's scale and zero point"
    if value != 0.0:
        return f"pad value {value} is not 0"
    if any(pads[a] or pads[a + r] for a in (0, 1)) or any(v < 0 for v in pads):
        return "pads the batch or channel axis, or crops"
    news = []
    for c in convs:
        if attr(c, "auto_pad", "NOTSET") != "NOTSET":
            return f"Conv {c.name} still has auto_pad"
        s = r - 2
        own = list(attr(c, "pads") or [0] * (2 * s))
        new = [own[k] + pads[2 + k] for k in range(s)] + [own[s + k] + pads[r + 2 + k] for k in range(s)]
        if max(new) > target.max_pad["conv"]:
            return f"merged pads {new} exceed target.max_pad ({target.max_pad['conv']})"
        news.append(new)
    m.data["new"] = news
    return None


def rewrite(m: Match, g) -> str:
    pad, q, dq_b, *convs = m.nodes
    for c, new in zip(convs, m.data["new"]):
        g.set_input(c, 0, pad.input[0])
        set_attr(c, "pads", new)
        provenance.set_origin(c, provenance.merge_origin(c, pad, q, dq_b))
    for n in (dq_b, q, pad):
        g.remove(n)
    return ", ".join(f"Pad and its Q/DQ pair folded into Conv {c.name} (pads {new})" for c, new in zip(convs, m.data["new"]))
